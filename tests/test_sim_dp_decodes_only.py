"""A data-parallel rank's step of running decodes alone, taken without the scheduler's walk
(``Scheduler.decodes_only``, priced by ``StepTimer.rank_decode_times``): each the same as
what it stands in for, to the last digit."""

from __future__ import annotations

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cost import rank_shape
from ridgeline.engines import profile_for
from ridgeline.memory import EngineSettings
from ridgeline.sim.config import sim_config
from ridgeline.sim.data_parallel import DataParallelSimulator
from ridgeline.sim.request import RUNNING, Request
from ridgeline.sim.simulator import Simulator
from ridgeline.sim.timer import StepTimer


def dp4() -> Deployment:
    return Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"),
                            num_gpus=2, engine="vllm", expert_parallel=True,
                            data_parallel_size=4)


def rank(contexts: list[int], spare_blocks: int, prompt: int = 0) -> Simulator:
    """A vLLM rank running one decode per context (its table's blocks held), then a prompt of
    ``prompt`` tokens half computed (none: 0), its pool left ``spare_blocks`` free."""
    dep = dp4()
    config = sim_config(dep, EngineSettings(max_model_len=32_000))
    sim = DataParallelSimulator(dep, profile_for("vllm"), config).ranks[0]
    pool, s = sim.pool, sim.scheduler
    for i, c in enumerate(contexts):
        r = Request(i, 0.0, prompt_tokens=c - 3, output_tokens=500)
        r.num_generated, r.status = 4, RUNNING
        assert pool.grow(r, c)
        r.num_computed = c
        s.running.append(r)
    if prompt:
        r = Request(len(contexts), 0.0, prompt_tokens=prompt, output_tokens=100)
        r.status = RUNNING
        assert pool.grow(r, prompt // 2)
        r.num_computed = prompt // 2
        s.running.append(r)
    held = sum(r.blocks_held for r in s.running)
    pool.take(pool.available - spare_blocks)  # the rest held by others
    assert pool.available == spare_blocks and held > 0
    return sim


def state(sim: Simulator) -> tuple:
    pool = sim.pool
    return (pool.free, pool.held, pool.available, sim.scheduler.preemptions,
            [(r.id, r.num_computed, r.private_blocks, r.status) for r in sim.scheduler.running])


def contexts(block_size: int) -> list[int]:
    """Decodes at, just past and just short of a block's end: three of them cross into one."""
    return [block_size * 40, block_size * 3 + 1, block_size * 90 - 1, block_size * 7,
            block_size * 12 + 30, block_size * 2]


def test_a_ranks_decodes_alone_are_schedules_batch_and_take_the_same_blocks() -> None:
    bs = rank([100], 10).pool.block_size
    walked, fast = rank(contexts(bs), 10), rank(contexts(bs), 10)
    batch = walked.scheduler.schedule(walked.now_s)
    got = fast.scheduler.decodes_only()
    assert got is not None
    decodes, context = got
    assert [(b.request.id, b.tokens, b.context) for b in batch] == \
        [(r.id, 1, r.num_computed) for r in decodes]
    assert context == sum(b.context for b in batch)
    assert state(fast) == state(walked)
    assert walked.pool.available == 10 - 3  # three crossed into a block


def test_a_pool_short_of_the_decodes_blocks_is_left_to_schedule_untouched() -> None:
    bs = rank([100], 10).pool.block_size
    walked, fast = rank(contexts(bs), 2), rank(contexts(bs), 2)
    before = state(fast)
    assert fast.scheduler.decodes_only() is None
    assert state(fast) == before
    walked.scheduler.schedule(walked.now_s)
    assert walked.scheduler.preemptions > 0  # the walk preempts for them


def test_a_rank_with_a_prompt_chunk_or_a_queue_is_left_to_schedule() -> None:
    bs = rank([100], 10).pool.block_size
    assert rank(contexts(bs), 200, prompt=4000).scheduler.decodes_only() is None
    queued = rank(contexts(bs), 200)
    queued.scheduler.add(Request(99, 0.0, 100, 10))
    assert queued.scheduler.decodes_only() is None


@pytest.mark.parametrize("any_rank_prompt", [False, True])
def test_a_ranks_decode_time_by_its_summed_context_is_time_s_of_its_rows(
        any_rank_prompt: bool) -> None:
    dep = dp4()
    timer = StepTimer(dep, profile_for("vllm"))
    rows = contexts(64)
    every = len(rows) + (2048 if any_rank_prompt else 18)  # another rank's chunk, or decodes
    shape = rank_shape(timer.windows, rows, [])._replace(all_tokens=every,
                                                           any_rank_prompt=any_rank_prompt)
    times = timer.rank_decode_times(len(rows), every, any_rank_prompt)
    assert times(sum(rows)) == timer.time_s(shape)
    assert times(sum(rows) + 6000) > times(sum(rows))


def test_another_ranks_prompt_prices_a_decode_ranks_experts_as_a_prompt_steps() -> None:
    """Six decodes beside another rank's 2,048-token chunk: the experts at the prompt price."""
    timer = StepTimer(dp4(), profile_for("vllm"))
    every = 6 + 2048
    assert timer.rank_decode_times(6, every, True)(9000) \
        > timer.rank_decode_times(6, every)(9000)
