"""Chunked attention priced as chunks (attention_span): a query at position p sees the keys of
its own chunk, (p mod C) + 1 of them, not a window's min(p + 1, C)."""

from __future__ import annotations

from copy import deepcopy
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.attention_memory import causal_keys_read
from ridgeline.attention_span import (
    Chunk,
    Span,
    decode_keys,
    keys_read,
    layer_span,
    query_key_pairs,
)
from ridgeline.cost import Seq, attention_windows, batch_shape, decode_batch, step_cost
from ridgeline.engines import profile_for
from ridgeline.floors import decode_floor
from ridgeline.kvcache import attention_kv_bytes_per_token
from ridgeline.layouts import CHUNKED, FULL, SLIDING
from ridgeline.sim.config import SimConfig
from ridgeline.sim.decodes import DecodeSet
from ridgeline.sim.request import Request
from ridgeline.sim.simulator import Simulator
from ridgeline.sim.workload import Workload
from tests.test_simulator import decoding

SPANS = st.one_of(st.none(), st.integers(1, 40), st.builds(Chunk, st.integers(1, 40)))


def _seen(p: int, span: Span) -> list[int]:
    """The key positions a query at position p sees, by the definition."""
    if span is None:
        return list(range(p + 1))
    if isinstance(span, Chunk):
        return list(range(p // span.tokens * span.tokens, p + 1))
    return list(range(max(0, p - span + 1), p + 1))


@settings(max_examples=300, deadline=None)
@given(cached=st.integers(0, 200), new=st.integers(1, 120), span=SPANS)
def test_closed_forms_count_what_each_query_sees(cached: int, new: int, span: Span) -> None:
    queries = range(cached, cached + new)
    assert query_key_pairs(cached, new, span) == sum(len(_seen(p, span)) for p in queries)
    if not isinstance(span, int) or span is None:  # a window's min(read, W) is its last query's
        assert keys_read(cached, new, span) == len({k for p in queries for k in _seen(p, span)})
    assert keys_read(cached, 1, span) == len(_seen(cached, span)) == query_key_pairs(cached, 1, span)


@settings(max_examples=200, deadline=None)
@given(contexts=st.lists(st.integers(0, 300), max_size=30), span=SPANS)
def test_decode_keys_sum_each_decodes_keys(contexts: list[int], span: Span) -> None:
    assert decode_keys(contexts, span) == sum(keys_read(c, 1, span) for c in contexts)


def test_chunks_read_the_key_spans_vllms_virtual_batches_give() -> None:
    """make_local_attention_virtual_batches' docstring example (vllm/v1/attention/backends/
    utils.py): chunks of 4, queries 4, 10 and 5 ending at 6, 17 and 9 keys give key spans
    [4, 2], [4, 4, 4, 1] and [4, 1]."""
    spans = {(2, 4): [4, 2], (7, 10): [4, 4, 4, 1], (4, 5): [4, 1]}
    for (cached, new), local in spans.items():
        assert keys_read(cached, new, Chunk(4)) == sum(local)


@pytest.mark.parametrize("context", [1, 4096, 8191, 8192, 8200, 20000])
def test_attention_and_decode_agree_on_a_chunked_layers_keys(context: int) -> None:
    """`attention`'s keys a chunked head reads (one-row tiles: each query's own) are the
    prefill pairs step_cost prices, and its last query's are a decode's keys."""
    chunk = Chunk(8192)
    assert causal_keys_read(context, 1, chunk=chunk.tokens) == query_key_pairs(0, context, chunk)
    last = causal_keys_read(context, 1, chunk=chunk.tokens) \
        - causal_keys_read(context - 1, 1, chunk=chunk.tokens) if context > 1 else 1
    assert last == keys_read(context - 1, 1, chunk)
    assert causal_keys_read(context, 1, 4096) == query_key_pairs(0, context, 4096)


SCOUT = resolve_model("llama-4-scout")
H100 = resolve_accelerator("h100")


def test_llama4_scout_layers_are_chunks_and_full_attention() -> None:
    spans = {layer_span(layer) for layer in SCOUT.layers if layer.mixer in (FULL, CHUNKED)}
    assert spans == {None, Chunk(8192)}
    dep = Deployment.build(SCOUT, H100, "bf16", num_gpus=4)
    assert attention_windows(dep) == (None, Chunk(8192))


def test_llama4_scout_decode_past_a_chunk_reads_the_new_chunks_keys() -> None:
    """Batch 64 at 8,200 tokens on 4 × H100: the 36 chunked layers read 9 keys a sequence
    (8,200 mod 8,192 + 1), not 8,192 as a window would; the 12 full layers 8,201. Each
    writes its new token: KV traffic 64 × (12 × 8,202 + 36 × 10) tokens × bytes per layer."""
    dep = Deployment.build(SCOUT, H100, "bf16", num_gpus=4)
    full = SCOUT.count(mixer=FULL)
    chunked = SCOUT.count(mixer=CHUNKED)
    per_layer = attention_kv_bytes_per_token(SCOUT, dep.kv.bytes_per_element) * dep.kv_replication
    batch, context = 64, 8200
    tokens = full * (context + 1 + 1) + chunked * (context % 8192 + 1 + 1)
    floor = decode_floor(dep, batch, context)
    assert floor.kv_bytes_read == pytest.approx(batch * tokens * per_layer, rel=1e-12)
    as_window = replace(SCOUT, layers=tuple(
        replace(layer, mixer=SLIDING) if layer.mixer == CHUNKED else layer
        for layer in SCOUT.layers))
    windowed = decode_floor(Deployment.build(as_window, H100, "bf16", num_gpus=4),
                            batch, context)
    assert windowed.kv_bytes_read == pytest.approx(
        batch * (full * (context + 2) + chunked * (8192 + 1)) * per_layer, rel=1e-12)
    assert floor.step_time_s < 0.8 * windowed.step_time_s


def test_a_decode_a_chunk_later_costs_what_it_did_at_the_chunks_start() -> None:
    """The chunked layers' load repeats every 8,192 tokens: at 100 and 8,292 tokens of context
    they read the same keys."""
    dep = Deployment.build(SCOUT, H100, "bf16", num_gpus=4)
    early, late = (batch_shape(dep, decode_batch(8, c)).attention for c in (100, 8292))
    assert early[1] == late[1] and early[1].window_tokens == Chunk(8192)
    assert early[0].decode_pairs + 8 * 8192 == late[0].decode_pairs
    prefill = batch_shape(dep, [Seq(10_000, 0)]).attention[1]
    assert prefill.prefill_pairs == 8192 * 8193 // 2 + 1808 * 1809 // 2
    assert step_cost(dep, [Seq(10_000, 0)]).time_s < step_cost(
        Deployment.build(replace(SCOUT, layers=tuple(replace(layer, mixer=SLIDING)
                                                     if layer.mixer == CHUNKED else layer
                                                     for layer in SCOUT.layers)),
                         H100, "bf16", num_gpus=4), [Seq(10_000, 0)]).time_s


@settings(max_examples=150, deadline=None)
@given(contexts=st.lists(st.integers(0, 600), min_size=1, max_size=30),
       chunk=st.sampled_from([1, 16, 100, 512]), moves=st.lists(
           st.tuples(st.integers(0, 700), st.integers(0, 40)), max_size=12))
def test_summed_decodes_read_what_each_chunk_holds(
        contexts: list[int], chunk: int, moves: list[tuple[int, int]]) -> None:
    """Keys per chunk equal Σ (context mod C) + 1 member by member, through steps, chunks
    starting, members joining and leaving; between two changes they grow linearly."""
    span = Chunk(chunk)
    decodes = DecodeSet(16, chunks=(span,))
    members = decoding(decodes, contexts)
    g = 0
    for n, (steps, leaver) in enumerate(moves):
        change = decodes.next_change()
        assert change > g
        run = min(steps, change - g)  # a run never crosses a chunk's start
        if run > 1:
            first, last = decodes.keys(g)[span], decodes.keys(g + run - 1)[span]
            assert last - first == (run - 1) * len(members)
        g += run
        decodes.fill_windows(g)
        if leaver in members:
            decodes.discard(members.pop(leaver), g)
        elif leaver >= 30:  # a newcomer joins mid-run
            r = Request(100 + n, 0.0, 50, 10_000, num_computed=leaver * 7,
                        num_generated=1)
            decodes.add(r, g)
            members[r.id] = r
        contexts_now = [r.decode_base + g for r in members.values()]
        keys = decodes.keys(g)
        assert keys[None] == sum(c + 1 for c in contexts_now)
        assert keys[span] == sum(c % chunk + 1 for c in contexts_now)


def _small_chunks(tokens: int) -> Deployment:
    """Llama-4-Scout with its chunk cut to ``tokens``, so that short runs cross chunks."""
    model = replace(SCOUT, layers=tuple(replace(layer, window_tokens=tokens)
                                        if layer.mixer == CHUNKED else layer
                                        for layer in SCOUT.layers))
    return Deployment.build(model, resolve_accelerator("h200"), "bf16", num_gpus=4,
                            engine="vllm")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_fast_path_prices_chunks_as_the_plain_step_does(seed: int) -> None:
    dep = _small_chunks(256)
    work = list(Workload(60, "uniform:1,900", "uniform:1,700", rate=8.0, seed=seed))
    config = SimConfig(num_blocks=4000, block_size=16, max_num_seqs=32,
                       max_num_batched_tokens=512, max_model_len=32768)
    sim = Simulator(dep, profile_for("vllm"), config)
    fast = sim.run(iter(deepcopy(work)))
    slow = Simulator(dep, profile_for("vllm"), replace(config, fast_path=False)).run(
        iter(deepcopy(work)))
    assert sim.bulk_steps > 0
    assert (fast.steps, fast.completed) == (slow.steps, slow.completed)
    assert fast.duration_s == pytest.approx(slow.duration_s, rel=1e-9)
    for name in ("ttft", "tpot", "itl"):
        assert fast.percentiles(name)["p99"] == pytest.approx(slow.percentiles(name)["p99"],
                                                              rel=1e-6)
