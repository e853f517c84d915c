"""The keys an attention layer lets a query see: every key before it, a window, or its chunk.

A query at position p (0-based; a decode after c cached tokens sits at p = c) sees p + 1
keys under full attention, min(p + 1, W) under a sliding window of W, and under chunked
attention (Llama 4's attention_chunk_size C on its RoPE layers) only the keys of its own
chunk, ⌊p ÷ C⌋·C … p: (p mod C) + 1. Llama-4-Scout's decode after 8,200 cached tokens reads
8,192 keys in a window of 8,192 but 9 in chunks of 8,192. vLLM runs each chunk a sequence's
queries touch as a "virtual batch" of its own (make_local_attention_virtual_batches,
vllm/v1/attention/backends/utils.py: chunks of 4, 10 new tokens after 7 cached read key
spans of 4, 4, 4 and 1).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from ridgeline.layouts import CHUNKED
from ridgeline.model import Layer


class Chunk(NamedTuple):
    """Chunked attention's span: a query sees its own chunk of ``tokens`` up to itself."""

    tokens: int


# what a layer's queries see: every key before them (None), a sliding window of that many
# tokens (int) or their own chunk (Chunk)
Span = int | Chunk | None


def layer_span(layer: Layer) -> Span:
    """The span of an attention layer: its chunk, its window, or None (full attention)."""
    if not layer.window_tokens:
        return None
    return Chunk(layer.window_tokens) if layer.mixer == CHUNKED else layer.window_tokens


def span_order(span: Span) -> tuple[int, int]:
    """A sort key: full attention first, then windows, then chunks, each by size."""
    if span is None:
        return (0, 0)
    return (2, span.tokens) if isinstance(span, Chunk) else (1, span)


def keys_read(cached: int, new: int, span: Span) -> int:
    """Keys ``new`` queries after ``cached`` tokens read, their own included: cached + new;
    a window, min(cached + new, W) (the last query's); chunks, every key from the start of the
    first query's chunk, cached + new − ⌊cached ÷ C⌋·C (each key in some query's chunk). A
    decode (new 1) after 8,200 tokens in chunks of 8,192: 9."""
    read = cached + new
    if span is None:
        return read
    if isinstance(span, Chunk):
        return read - cached // span.tokens * span.tokens
    return min(read, span)


def decode_keys(contexts: Iterable[int], span: Span) -> int:
    """Σ keys_read(c, 1, span) over one-token sequences with ``contexts`` cached tokens each:
    c + 1, min(c + 1, W) or (c mod C) + 1 apiece (a simulator's step sums thousands)."""
    if span is None:
        return sum(c + 1 for c in contexts)
    if isinstance(span, Chunk):
        size = span.tokens
        return sum(c % size + 1 for c in contexts)
    return sum(min(c + 1, span) for c in contexts)


def query_key_pairs(cached: int, new: int, span: Span) -> float:
    """Query-key pairs when ``new`` queries follow ``cached`` keys, causal, within ``span``.
    Full: new·cached + new(new + 1)/2. A window: min(cached + i, W) for query i (1-based).
    Chunks: Σ (p mod C) + 1 over the positions p = cached … cached + new − 1, the difference
    of ``_chunk_pairs`` at both ends: 8,192 queries from 0 in chunks of 4,096, 2 × 4,096 ×
    4,097 ÷ 2 = 16,781,312 pairs (33,558,528 under full attention)."""
    if span is None:
        return new * cached + new * (new + 1) / 2
    if isinstance(span, Chunk):
        return float(_chunk_pairs(cached + new, span.tokens) - _chunk_pairs(cached, span.tokens))
    total = 0.0
    free = max(0, min(new, span - cached))  # queries before the window fills
    total += free * cached + free * (free + 1) / 2
    total += (new - free) * span
    return total


def _chunk_pairs(positions: int, chunk_tokens: int) -> int:
    """Pairs of the queries at positions 0 … positions − 1 in chunks of C: q whole chunks of
    C(C + 1)/2 each, and r(r + 1)/2 for the r positions past them."""
    whole, rest = divmod(positions, chunk_tokens)
    return whole * chunk_tokens * (chunk_tokens + 1) // 2 + rest * (rest + 1) // 2
