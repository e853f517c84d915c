"""vLLM V1 keeps free and cached blocks in one LRU queue (block_pool.py: get_new_blocks pops
its head, free_blocks appends to its tail): an idle cached prefix is evicted once the blocks
freed before it are handed out, though plain free blocks freed after it remain. SGLang's radix
tree (and the other engines) evicts only when no free block is left."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engines import profile_for
from ridgeline.sim.blocks import BlockPool
from ridgeline.sim.config import SimConfig, sim_config
from ridgeline.sim.request import Request
from ridgeline.sim.simulator import Simulator

PREFIX_BLOCKS, BS = 4, 16


def _idle_prefix_then_plain_blocks(lru: bool) -> tuple[BlockPool, Request]:
    """A request of group 0 (a 4-block prefix, 2 blocks of its own) finishes, then a plain
    request of 4 blocks: the queue holds 10 never-used blocks, the first request's 2, its 4
    cached and the second's 4."""
    pool = BlockPool(20, BS, lru=lru)
    first = Request(0, 0.0, 6 * BS, 1, prefix_group=0, prefix_tokens=PREFIX_BLOCKS * BS)
    plain = Request(1, 0.0, 4 * BS, 1)
    for r in (first, plain):
        assert pool.grow(r, r.prompt_tokens)
        r.num_computed = r.prompt_tokens
    pool.register(first)
    pool.release(first)
    pool.release(plain)
    return pool, Request(2, 1.0, 6 * BS, 1, prefix_group=0,
                         prefix_tokens=PREFIX_BLOCKS * BS)


@pytest.mark.parametrize("lru", [True, False])
def test_an_idle_prefix_is_evicted_in_lru_order_only_with_one_queue(lru: bool) -> None:
    pool, again = _idle_prefix_then_plain_blocks(lru)
    assert pool.prefix_hit(again) == (PREFIX_BLOCKS, PREFIX_BLOCKS)
    fresh_and_first = pool.free - 4  # never used, and the first request's own blocks
    assert pool.free_before_cached() == (fresh_and_first if lru else pool.free)
    pool.take(fresh_and_first + 1)
    assert pool.held + pool.free + len(pool.evictable) == pool.total
    assert pool.free == (4 if lru else 3)  # the plain request's blocks, freed after the prefix
    # one queue: the prefix's tail block goes although plain free blocks remain
    left = PREFIX_BLOCKS - 1 if lru else PREFIX_BLOCKS
    assert pool.prefix_hit(again) == (left, left)
    pool.take(pool.available)
    assert pool.free == 0 and not pool.evictable and not pool.refs


def test_a_vllm_run_finds_fewer_prefix_hits_than_free_blocks_first() -> None:
    """The same requests (20 prefixes of 40 blocks, drawn at random, on a 1,000-block pool)
    on vLLM's one queue and on a pool handing out free blocks first: the one queue evicts idle
    prefixes the other keeps, so it reuses fewer blocks."""
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16")
    config = SimConfig(num_blocks=1000, block_size=BS, max_num_seqs=8,
                       max_num_batched_tokens=2048, max_model_len=4096)

    def hits(lru: bool) -> int:
        rng = random.Random(0)
        requests = [Request(i, 0.05 * i, 900, 20, prefix_group=rng.randrange(20),
                            prefix_tokens=640) for i in range(200)]
        sim = Simulator(dep, profile_for("vllm"), replace(config, lru_free_queue=lru))
        result = sim.run(iter(requests))
        assert result.completed == len(requests)
        assert sim.pool.held + sim.pool.free + len(sim.pool.evictable) == sim.pool.total
        return sim.pool.hits

    assert hits(True) < hits(False)


def test_vllm_alone_gets_the_one_queue() -> None:
    """The queue follows the engine: vLLM's simulator pool is one LRU queue, SGLang's hands
    out free blocks first."""
    model, h100 = resolve_model("llama-3.1-8b"), resolve_accelerator("h100")
    for engine in ("vllm", "sglang"):
        dep = Deployment.build(model, h100, "bf16", engine=engine)
        sim = Simulator(dep, profile_for(engine), sim_config(dep))
        assert sim.pool.lru == (engine == "vllm")


def test_vllms_v0_allocator_hands_out_free_blocks_first() -> None:
    """V0's prefix-caching allocator took never-cached blocks before evicting, so a vLLM run
    asked at a V0 release keeps the free-first pool; the same release's V1 gets the queue."""
    from ridgeline.memory import EngineSettings

    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16",
                           engine="vllm")
    for version, lru in (("0.8.5 V0", False), ("0.8.5 V1", True)):
        config = sim_config(dep, EngineSettings(engine_version=version))
        assert config.lru_free_queue is lru
