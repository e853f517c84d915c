"""Llama 4's chunked local attention under vLLM's hybrid KV-cache manager: a chunk group holds
the blocks from the start of the chunk its next token is in (ChunkedLocalAttentionManager:
remove_skipped_blocks frees every block wholly before it), not a sliding window's last 8,192
tokens; fit, the admission gate and the simulator count it alike."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import conversations
from ridgeline.engines import profile_for
from ridgeline.kvgroups import chunk_blocks
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.sim.blocks import BlockPool
from ridgeline.sim.config import SimConfig, sim_config
from ridgeline.sim.data_parallel import DataParallelSimulator
from ridgeline.sim.request import Request
from ridgeline.sim.simulator import Simulator
from ridgeline.sim.workload import Workload
from tests.conftest import check_balance, same_run_both_paths, sim_workloads

SCOUT = Deployment.build(resolve_model("llama-4-scout"), resolve_accelerator("h100"),
                         num_gpus=4)
V033 = EngineSettings(engine_version="0.33", max_model_len=131_072)  # blocks of 16
CHUNK = 8192


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def test_scout_at_100k_holds_106_blocks_a_chunk_group_not_a_window_s_513() -> None:
    """v0.33, blocks of 16: one full group and three chunk groups. At 100,000 tokens the
    decode's chunk starts at 98,304, so each chunk group holds 6,250 − 6,144 = 106 blocks,
    where a sliding window of 8,192 keeps cdiv(8,191, 16) + 1 = 513."""
    g = kv_pool(SCOUT, V033).groups
    assert g is not None and (g.full, g.windows, g.chunks) == (1, ((CHUNK, 3),), (CHUNK,))
    assert g.block_size == 16
    per_group = chunk_blocks(100_000, 1, CHUNK, 16)
    assert per_group == cdiv(100_000 - 98_304, 16) == 106
    window_rule = cdiv(CHUNK - 1, 16) + 1
    assert window_rule == 513
    assert g.decode_blocks(100_000) == cdiv(100_000, 16) + 3 * per_group == 6568
    # at 128K, the end of a chunk, a whole chunk's 512: one block a group fewer than 513
    assert g.decode_blocks(131_072) == 8192 + 3 * 512


def test_a_request_crossing_a_chunk_boundary_gives_back_its_chunk() -> None:
    """The last token of the first chunk (position 8,191) is computed holding 512 blocks a
    group; the first of the next (8,192) with one, the first chunk's blocks freed."""
    g = kv_pool(SCOUT, V033).groups
    assert g is not None
    assert g.decode_blocks(8192) - cdiv(8192, 16) == 3 * 512
    assert g.decode_blocks(8193) - cdiv(8193, 16) == 3 * 1
    assert g.decode_blocks(8193) < g.decode_blocks(8192)
    assert chunk_blocks(8192, 0, CHUNK, 16) == 0  # kept between steps: nothing of chunk 0


@given(tokens=st.integers(1, 300_000), chunk=st.sampled_from([64, 100, 8192]),
       block_size=st.sampled_from([16, 64, 96]))
def test_a_chunk_group_holds_the_blocks_of_its_tokens_since_the_chunk_start(
        tokens: int, chunk: int, block_size: int) -> None:
    """Counted block by block: the blocks holding any token from the decode's chunk start to
    its last token, never more than a sliding window of the chunk's size keeps."""
    start = (tokens - 1) // chunk * chunk
    blocks = {t // block_size for t in range(start, tokens)}
    assert chunk_blocks(tokens, 1, chunk, block_size) == len(blocks)
    assert len(blocks) <= min(cdiv(tokens, block_size), cdiv(chunk - 1, block_size) + 1)


@settings(max_examples=60, deadline=None)
@given(tokens=st.integers(1, 200_000))
def test_peak_decode_blocks_bounds_every_shorter_length(tokens: int) -> None:
    g = kv_pool(SCOUT, V033).groups
    assert g is not None
    peak = g.peak_decode_blocks(tokens)
    assert g.decode_blocks(tokens) <= peak
    assert peak <= g.peak_decode_blocks(tokens + 1)
    # the end of the last whole chunk is where a chunk group held its most
    last_end = tokens // CHUNK * CHUNK
    if last_end:
        assert g.decode_blocks(last_end) <= peak


@pytest.mark.parametrize("length", [1, 8191, 8192, 8193, 8208, 8209, 98_304, 100_000,
                                    131_072])
def test_fit_and_the_simulator_count_a_chunked_conversation_alike(length: int) -> None:
    pool = kv_pool(SCOUT, V033)
    config = sim_config(SCOUT, V033)
    g = pool.groups
    assert g is not None and config.window_groups == g.windows
    assert config.window_chunks == config.gate_chunks == g.chunks
    sim_pool = BlockPool(config.num_blocks, config.block_size,
                         window_groups=config.window_groups, chunk_sizes=config.window_chunks)
    assert sim_pool.blocks_for(length) == g.decode_blocks(length)
    gate = config.admission_extra(length)
    assert gate is not None
    assert cdiv(length, config.block_size) + gate == pool.admission_blocks(length)


def test_the_gate_charges_a_chunk_group_its_chunk_and_the_tokens_in_flight() -> None:
    """v0.33 (two batches of 8,192 in flight): a 100,000-token prompt is charged cdiv(8,192 +
    16,384, 16) = 1,536 blocks a chunk group (ChunkedLocalAttentionSpec's admission cap, no
    block more), a 4,000-token one its own 250."""
    config = sim_config(SCOUT, V033)
    assert config.gate_in_flight == 2 * 8192
    assert config.admission_extra(100_000) == 3 * cdiv(CHUNK + 2 * 8192, 16) == 3 * 1536
    assert config.admission_extra(4000) == 3 * cdiv(4000, 16)


def test_conversations_are_charged_their_chunk_and_never_rise_with_the_context() -> None:
    """fit charges a conversation the most it holds on its way to the context, a whole chunk a
    chunk group: at 100,000 tokens, mid chunk, no more conversations than at 98,304, the end
    of a chunk they pass through (11 and 11 on v0.33), though mid chunk each holds fewer."""
    pool = kv_pool(SCOUT, V033)
    g = pool.groups
    assert g is not None
    assert g.decode_blocks(100_000) < g.peak_decode_blocks(100_000)
    counts = [conversations(pool, SCOUT, n) for n in range(90_000, 110_001, 1_000)]
    assert counts == sorted(counts, reverse=True)
    assert conversations(pool, SCOUT, 100_000) == conversations(pool, SCOUT, 98_304)


def test_the_simulator_s_request_gives_back_its_chunk_at_the_boundary() -> None:
    """A 8,000-token prompt decoding past 8,192 in blocks of 16: 500 + 3 × 500 after its
    prompt, 512 + 3 × 512 computing its 8,192nd token, then 513 + 3 × 1 as its next token
    starts the second chunk; the pool gets the difference back."""
    pool = BlockPool(100_000, 16, window_groups=((CHUNK, 3),), chunk_sizes=(CHUNK,))
    r = Request(0, 0.0, prompt_tokens=8000, output_tokens=400)
    assert pool.grow(r, 8000)
    r.num_computed = 8000
    pool.trim(r)
    assert r.blocks_held == 4 * 500
    while r.num_computed < 8192:
        assert pool.grow(r, r.num_computed + 1)
        r.num_computed += 1
        pool.trim(r)
    assert r.blocks_held == 512  # the next token starts a chunk: its chunk groups emptied
    assert pool.grow(r, 8193)
    assert r.blocks_held == 513 + 3 * 1 == pool.held
    pool.release(r)
    assert pool.held == 0 and pool.free == pool.total


def check_chunked(sim: Simulator) -> None:
    check_balance(sim)
    pool, s = sim.pool, sim.scheduler
    for r in s.running:  # what its cache needs of the current chunk, and no more
        assert r.window_held == pool.window_blocks(r.num_computed, 0)


@settings(max_examples=30, deadline=None)
@given(workload=sim_workloads(30), blocks=st.sampled_from([120, 400, 5000]),
       chunk=st.sampled_from([64, 100, 256]), block_size=st.sampled_from([16, 32]),
       lagged=st.booleans())
def test_fast_path_and_step_loop_give_back_chunks_alike(
        workload: Workload, blocks: int, chunk: int, block_size: int, lagged: bool) -> None:
    """Blocks conserved, each request holding its current chunk's, the same run on both paths
    (a 100-token chunk starts mid-block: both run the plain step)."""
    def run(fast: bool) -> tuple[Simulator, object]:
        config = SimConfig(num_blocks=blocks, block_size=block_size, max_num_seqs=64,
                           max_num_batched_tokens=256, max_model_len=32_768, fast_path=fast,
                           window_groups=((chunk, 3),), window_chunks=(chunk,),
                           async_scheduling=lagged)
        sim = Simulator(SCOUT, profile_for("vllm"), config)
        return sim, sim.run(iter(workload), after_step=check_chunked)

    same_run_both_paths(run)


def test_the_summed_decodes_give_back_a_chunk_as_the_plain_step_does() -> None:
    """Eight 200-token prompts decoding 600 tokens each through 256-token chunks: the run
    takes most of its steps in bulk and ends as the plain step's, every block returned."""
    workload = Workload(8, input_len="200", output_len="600")

    def run(fast: bool) -> tuple[Simulator, object]:
        config = SimConfig(num_blocks=2000, block_size=16, max_num_seqs=64,
                           max_num_batched_tokens=256, max_model_len=32_768, fast_path=fast,
                           window_groups=((256, 3),), window_chunks=(256,))
        sim = Simulator(SCOUT, profile_for("vllm"), config)
        return sim, sim.run(iter(workload), after_step=check_chunked)

    fast_sim, _ = run(True)
    assert fast_sim.bulk_steps > fast_sim.steps // 2
    same_run_both_paths(run)


def test_data_parallel_ranks_give_back_chunks_alike_both_ways() -> None:
    """Scout on two data-parallel ranks, 8,000 + 600-token requests crossing their first chunk
    on a small pool (preempting): the lock-step runs give the plain steps' figures exactly."""
    dep = Deployment.build(resolve_model("llama-4-scout"), resolve_accelerator("h100"),
                           num_gpus=4, engine="vllm", data_parallel_size=2)
    results = []
    for fast in (True, False):
        config = sim_config(dep, EngineSettings(max_model_len=32_768,
                                                kv_cache_memory_bytes=3_000_000_000),
                            fast_path=fast)
        assert config.window_chunks == (CHUNK,)
        sim = DataParallelSimulator(dep, profile_for("vllm"), config)
        work = Workload(num_requests=40, input_len="8000", output_len="600", rate=20.0, seed=1)
        result = sim.run(iter(work))
        results.append((result.duration_s, result.preemptions, result.steps,
                        result.percentiles("itl"), result.percentiles("ttft")))
    assert results[0] == results[1]
    assert results[0][1] > 0
