"""A hybrid's sliding-window groups under vLLM V1: each holds a request's blocks of its window
of the tokens, growing with the request (SlidingWindowManager.get_num_blocks_to_allocate:
cdiv(num_tokens, block_size) less the blocks remove_skipped_blocks freed), not a whole
window's from the first token; alike on the fast path and the plain step."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.engines import profile_for
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.sim.blocks import BlockPool
from ridgeline.sim.config import SimConfig, sim_config
from ridgeline.sim.request import Request
from ridgeline.sim.simulator import Simulator
from ridgeline.sim.workload import Workload
from tests.conftest import check_balance, same_run_both_paths, sim_workloads

GEMMA = Deployment.build(resolve_model("gemma-3-27b"), resolve_accelerator("h100"), "bf16")
PROFILE = profile_for("vllm")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def test_gemma_3_grows_its_window_groups_beside_the_full_table() -> None:
    config = sim_config(GEMMA)
    groups = kv_pool(GEMMA, EngineSettings()).groups
    assert groups is not None and groups.full == 1
    assert config.window_groups == groups.windows  # six groups of 1,024 tokens
    assert config.overhead_blocks == 0  # no fixed charge left: no state groups
    assert config.gate_fixed_blocks == 0


def test_a_short_request_holds_its_own_tokens_blocks_in_each_window_group() -> None:
    """1,024-token windows in blocks of 64, six groups: a 512 + 128-token request holds its 10
    blocks in each group, 70 in all (not 10 + 6 × 17); one past its window holds 17 a group."""
    windows = ((1024, 6),)
    pool = BlockPool(10_000, 64, window_groups=windows)
    r = Request(0, 0.0, prompt_tokens=512, output_tokens=128)
    assert pool.grow(r, 512)
    r.num_computed = 512
    pool.trim(r)
    assert r.blocks_held == 7 * cdiv(512, 64)
    for _ in range(127):  # its decodes, to its last fed token
        assert pool.grow(r, r.num_computed + 1)
        r.num_computed += 1
        pool.trim(r)
    assert r.blocks_held == pool.held == 7 * cdiv(639, 64)
    long = Request(1, 0.0, prompt_tokens=4096, output_tokens=10)
    for _ in range(4):  # chunks of 1,024: each window group holds the chunk beside its window
        assert pool.grow(long, long.num_computed + 1024)
        assert long.window_held <= 6 * pool.window_cap(1024, 1024)
        long.num_computed += 1024
        pool.trim(long)
    assert long.window_held == 6 * pool.window_cap(1024, 1)  # 17: what its next token needs
    assert long.blocks_held == cdiv(4096, 64) + long.window_held
    pool.release(long)
    pool.release(r)
    assert pool.held == 0 and pool.free == pool.total


def test_the_gate_counts_each_window_group_as_vllm_does() -> None:
    """v0.20+: min(cdiv(prompt), cdiv(min(window − 1 + in flight, max_model_len)) + 1) a group
    (get_num_blocks_to_allocate with apply_admission_cap); v0.19: cdiv(prompt)."""
    config = sim_config(GEMMA)
    bs, flight = config.block_size, config.gate_in_flight
    cap = cdiv(1024 - 1 + flight, bs) + 1
    assert config.admission_extra(512) == 6 * cdiv(512, bs)
    assert config.admission_extra(32_000) == 6 * cap < 6 * cdiv(32_000, bs)
    old = sim_config(GEMMA, EngineSettings(engine_version="0.19"))
    assert old.gate_in_flight == 0
    assert old.admission_extra(32_000) == 6 * cdiv(32_000, old.block_size)


def test_gemma_runs_the_batch_its_requests_hold(capsys: pytest.CaptureFixture[str]) -> None:
    """A backlog of 512 + 128-token requests on one H100: at their end each holds 10 blocks in
    each of its seven groups, so the pool holds blocks ÷ 70 of them at once (53), and vLLM
    admits on prompts and preempts past that; charged 17 blocks a window group from the start,
    the run peaked at 34."""
    main_args = ["simulate", "gemma-3-27b", "--gpu", "h100", "--rate", "inf",
                 "--num-requests", "400", "--input-len", "512", "--output-len", "128", "--json"]
    config = sim_config(GEMMA)
    pool = BlockPool(config.num_blocks, config.block_size, window_groups=config.window_groups)
    at_end = pool.blocks_for(512 + 127)
    assert at_end == 7 * cdiv(639, 64)
    main(main_args)
    out = json.loads(capsys.readouterr().out)
    assert out["running"]["max"] >= config.num_blocks // at_end


def check_hybrid(sim: Simulator) -> None:
    check_balance(sim)
    pool, s = sim.pool, sim.scheduler
    budget = sim.config.max_num_batched_tokens
    for r in s.running:  # never past a chunk's peak, and what its cache needs
        assert r.window_held <= pool.window_blocks(r.num_computed + budget, budget)
        assert r.window_held >= pool.window_blocks(r.num_computed)


workloads = sim_workloads(40)


@settings(max_examples=40, deadline=None)
@given(workload=workloads, blocks=st.sampled_from([200, 400, 5000]),
       windows=st.sampled_from([((48, 2),), ((100, 1), (300, 3)), ((64, 6),)]),
       budget=st.sampled_from([64, 256]), block_size=st.sampled_from([16, 32]),
       lagged=st.booleans())
def test_fast_path_and_step_loop_grow_window_groups_alike(
        workload: Workload, blocks: int, windows: tuple[tuple[int, int], ...], budget: int,
        block_size: int, lagged: bool) -> None:
    def run(fast: bool) -> tuple[Simulator, object]:
        config = SimConfig(num_blocks=blocks, block_size=block_size, max_num_seqs=64,
                           max_num_batched_tokens=budget, max_model_len=32768,
                           fast_path=fast, window_groups=windows, async_scheduling=lagged)
        sim = Simulator(GEMMA, PROFILE, config)
        return sim, sim.run(iter(workload), after_step=check_hybrid)

    same_run_both_paths(run)
