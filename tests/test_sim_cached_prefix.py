"""A waiting request's cached prefix, remembered between asks (sim/blocks.py, CachedPrefix),
is what a fresh walk of the cache finds, whatever entered or left it in between."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engines import profile_for
from ridgeline.sim.blocks import BlockPool
from ridgeline.sim.config import SimConfig
from ridgeline.sim.pipeline import PipelineSimulator
from ridgeline.sim.request import Request
from ridgeline.sim.simulator import Simulator
from ridgeline.sim.workload import Workload

MODEL, H100 = resolve_model("llama-3.1-8b"), resolve_accelerator("h100")
PP1 = Deployment.build(MODEL, H100, "bf16")
PP2 = Deployment.build(MODEL, H100, "bf16", None, 2, 2)


def walked(pool: BlockPool, r: Request) -> tuple[list[tuple[int, int]], int]:
    """r's leading cached keys found by walking the cache from its first block, and how many
    of them no request holds."""
    if not pool.prefix_caching or r.shared:
        return [], 0
    keys = []
    for index in range((r.known_tokens - 1) // pool.block_size):
        key = pool.key(r, index)
        if key not in pool.refs:
            break
        keys.append(key)
    return keys, sum(1 for key in keys if pool.refs[key] == 0)


def assert_remembered_as_walked(pool: BlockPool, waiting: list[Request]) -> None:
    for r in waiting:
        keys, unheld = walked(pool, r)
        assert pool.prefix_hit(r) == (len(keys), unheld)
        assert pool.cached_prefix(r) == keys


def test_a_preempted_requests_prefix_shrinks_a_block_at_a_time_as_its_blocks_are_evicted() -> None:
    """A request preempted after computing 10 blocks leaves them cached, tail freed first; a
    pool with nothing else free gives them up from the tail, one per block taken."""
    pool = BlockPool(10, 16)
    r = Request(0, 0.0, 170, 10)  # 170 tokens: 10 full blocks and 10 tokens in the 11th
    assert pool.grow(r, 160)
    r.num_computed = 160
    pool.retire(r)
    r.num_computed = 0
    assert pool.prefix_hit(r) == (10, 10)  # all cached, none held
    for left in range(9, -1, -1):
        pool.take(1)  # evicts the least recently freed: r's tail
        assert pool.prefix_hit(r) == (left, left)
        assert_remembered_as_walked(pool, [r])


def test_a_shared_prefix_held_by_another_request_is_cached_but_not_evictable() -> None:
    """Two members of one group: while the first holds the published prefix, the second finds
    it cached and held (admitting it takes nothing off the evictable list); once the first
    leaves, the same blocks are cached and unheld."""
    pool = BlockPool(64, 16)
    first, second = (Request(i, 0.0, 200, 10, prefix_group=0, prefix_tokens=128)
                     for i in range(2))
    assert pool.grow(first, 200)
    first.num_computed = 200
    pool.register(first)  # the group's 8 full prefix blocks
    assert pool.prefix_hit(second) == (8, 0)
    pool.release(first)
    assert pool.prefix_hit(second) == (8, 8)
    assert_remembered_as_walked(pool, [second])


CASES = {  # engine-like configurations over a small pool (preemption, eviction, reuse)
    "vllm": {},
    "vllm, plain step": {"fast_path": False},
    "sglang": {"prefill_first": True, "token_ratio": True, "cache_on_schedule": False},
    "trtllm": {"reserve_full": True, "chunked_prefill": False, "cache_on_schedule": False},
}


@settings(max_examples=16, deadline=None)
@given(case=st.sampled_from(sorted(CASES)), pipeline=st.booleans(),
       blocks=st.integers(60, 400), groups=st.integers(0, 3), seed=st.integers(0, 10_000))
def test_the_remembered_prefix_of_every_waiting_request_is_what_a_walk_finds_after_every_step(
        case: str, pipeline: bool, blocks: int, groups: int, seed: int) -> None:
    config = replace(SimConfig(num_blocks=blocks, block_size=16, max_num_seqs=16,
                               max_num_batched_tokens=512, max_model_len=8192),
                     **CASES[case])
    work = Workload(40, "uniform:50,900", "uniform:5,300", rate=40.0, seed=seed,
                    prefix_groups=groups, prefix_len=320 if groups else 0)
    sim = PipelineSimulator(PP2, profile_for("vllm"), config) if pipeline and case == "vllm" \
        else Simulator(PP1, profile_for("vllm"), config)
    asked = []

    def check(s: Simulator) -> None:
        asked.append(len(s.scheduler.waiting))
        assert_remembered_as_walked(s.pool, list(s.scheduler.waiting))

    result = sim.run(iter(work), after_step=check)
    assert result.completed + result.rejected == 40
    assert sum(asked) > 0  # requests waited, and were asked about
