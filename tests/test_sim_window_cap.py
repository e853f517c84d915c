"""A window-only model under vLLM V1: a request holds the blocks of its last window, not its
whole context (SlidingWindowManager.remove_skipped_blocks), alike on the fast path and the
plain step; prefix sharers stay uncapped (conservative)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.engines import profile_for
from ridgeline.memory import EngineSettings
from ridgeline.sim.blocks import BlockPool
from ridgeline.sim.config import SimConfig, sim_config, window_cap
from ridgeline.sim.request import Request
from ridgeline.sim.simulator import Simulator
from ridgeline.sim.workload import Workload
from tests.conftest import same_run_both_paths, sim_workloads

MISTRAL = Deployment.build(resolve_model("mistral-7b"), resolve_accelerator("h100"), "bf16")
PROFILE = profile_for("vllm")


def capped_config(blocks: int, window: int, fast: bool, seqs: int = 64, budget: int = 256,
                  block_size: int = 16, overhead: int = 0) -> SimConfig:
    return SimConfig(num_blocks=blocks, block_size=block_size, max_num_seqs=seqs,
                     max_num_batched_tokens=budget, max_model_len=32768, fast_path=fast,
                     overhead_blocks=overhead, window_cap_tokens=window)


def check_capped(sim: Simulator) -> None:
    pool, s = sim.pool, sim.scheduler
    assert pool.held + pool.free + len(pool.evictable) == pool.total
    held = sum(r.private_blocks for r in s.running) + sum(
        1 for n in pool.refs.values() if n > 0)
    assert held == pool.held
    budget = sim.config.max_num_batched_tokens + sim.config.spec_tokens
    for r in s.running:
        if pool.windowed(r):  # the window's blocks, never more than a chunk's peak
            assert r.blocks_held >= pool.held_for(r, r.num_computed, 1)
            assert r.blocks_held <= pool.cap_blocks(budget) + pool.overhead
        else:
            assert (r.blocks_held - pool.overhead) * pool.block_size >= r.num_computed


workloads = sim_workloads(50)


@settings(max_examples=50, deadline=None)
@given(workload=workloads, blocks=st.sampled_from([40, 120, 5000]),
       window=st.sampled_from([48, 100, 300]), overhead=st.sampled_from([0, 2]),
       budget=st.sampled_from([64, 256]), block_size=st.sampled_from([16, 32]))
def test_fast_path_and_step_loop_cap_alike(workload: Workload, blocks: int, window: int,
                                           overhead: int, budget: int,
                                           block_size: int) -> None:
    """The same preemptions and batch, times within half a percent, blocks conserved and
    held within the window's cap after every step."""
    def run(fast: bool) -> tuple[Simulator, object]:
        sim = Simulator(MISTRAL, PROFILE, capped_config(blocks, window, fast, budget=budget,
                                                        block_size=block_size,
                                                        overhead=overhead))
        return sim, sim.run(iter(workload), after_step=check_capped)

    same_run_both_paths(run)


def test_a_decoding_request_holds_its_window_and_gives_back_the_rest() -> None:
    """Window 4,096 in blocks of 16: a decode holds ceil(4,095 / 16) + 1 = 257 blocks (as
    kvgroups.decode_blocks and fit count), a 2,048-token chunk at most ceil(6,142 / 16) + 1 = 385."""
    pool = BlockPool(10_000, 16, window_tokens=4096)
    assert pool.cap_blocks(1) == 257
    assert pool.cap_blocks(2048) == 385
    r = Request(0, 0.0, prompt_tokens=10_000, output_tokens=10)
    assert pool.grow(r, 2048)
    r.num_computed = 2048
    for _ in range(3):
        assert pool.grow(r, r.num_computed + 2048)
        assert r.blocks_held <= pool.cap_blocks(2048)
        r.num_computed += 2048
        pool.trim(r)
    assert r.blocks_held == 257 and pool.held == 257  # 8,192 tokens cached, its window held
    assert pool.trimmed(r)
    pool.retire(r)  # its leading blocks are gone: nothing of it is published
    assert not pool.refs and pool.held == 0 and pool.free == pool.total


def test_a_request_sharing_cached_blocks_stays_uncapped() -> None:
    pool = BlockPool(10_000, 16, window_tokens=64)
    member = Request(1, 0.0, prompt_tokens=500, output_tokens=10, prefix_group=0,
                     prefix_tokens=320)
    assert not pool.windowed(member)  # it may publish its group's prefix
    assert pool.held_for(member, 500, 1) == pool.blocks_for(500)
    uncached = BlockPool(10_000, 16, prefix_caching=False, window_tokens=64)
    assert uncached.held_for(member, 500, 1) < pool.blocks_for(500)  # nothing to publish


def test_only_vllm_v1_caps_a_window_only_model() -> None:
    windows = ((4096, 1),)
    assert window_cap("vllm", windows) == 4096
    assert window_cap("vllm", windows, v1=False) == 0
    assert window_cap("sglang", windows) == 0
    assert window_cap("vllm", ()) == 0
    assert window_cap("vllm", ((4096, 1), (1024, 2))) == 4096  # the largest bounds them all
    assert sim_config(MISTRAL, EngineSettings(max_model_len=32768)).window_cap_tokens == 4096
    gemma = Deployment.build(resolve_model("gemma-3-27b"), resolve_accelerator("h100"), "bf16")
    assert sim_config(gemma, EngineSettings(max_model_len=32768)).window_cap_tokens == 0
    sglang = replace(MISTRAL, engine="sglang")
    assert sim_config(sglang, EngineSettings(max_model_len=32768)).window_cap_tokens == 0


def test_mistral_runs_as_many_as_fit_counts(capsys: pytest.CaptureFixture[str]) -> None:
    """Mistral-7B on an H100 at 32,768 tokens, 128 conversations of 16,000 + 4,000 tokens:
    fit counts 1 + (blocks − a 16,000-token prompt's) ÷ a decoding request's window = 117
    for these prompts under vLLM 0.34 (109 under 0.32: 1 + (28,927 − 1,000) ÷ 257); grown
    uncapped the simulator ran at most 28, with 208 preemptions."""
    main(["simulate", "mistral-7b", "--gpu", "h100", "--max-model-len", "32768",
          "--concurrency", "128", "--input-len", "16000", "--output-len", "4000",
          "--num-requests", "250", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["running"]["max"] == 117
    assert out["preemptions"] == 0
    assert not any("sliding windows" in c for c in out["cautions"])
