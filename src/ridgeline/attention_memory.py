"""Why the attention kernel matters at long context: the S×S scores a naive kernel writes.

A naive attention materialises the score matrix: S² elements per head per layer
(64K tokens in bf16: 65,536² × 2 B = 8.6 GB). FlashAttention-style tiling keeps each
tile of scores on chip and streams K and V past each block of queries, so HBM sees
Q and O of every query head and K and V of every KV head (fewer, with GQA), plus at
worst one re-read of K and V per query tile, of the keys the causal mask lets it see
(Dao et al. 2022, §3.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ridgeline.context_length import served_context_caution
from ridgeline.errors import InputError
from ridgeline.explain import Step, q, step
from ridgeline.kvcache import cached_tokens
from ridgeline.layouts import ATTENTION_MIXERS, CHUNKED
from ridgeline.model import ModelSpec
from ridgeline.sparse_attention import INDEXER_LOGIT_BYTES, sparse_topk
from ridgeline.units import GB, fmt_decimal_bytes, indefinite, require_positive

# Q, K, V and O in bf16 whatever the scores are kept in (an eager fp32 softmax upcasts the
# scores alone)
ACTIVATION_BYTES = 2.0
# the sizes a score can be kept in: fp4, fp8 or int8, bf16 or fp16, fp32 (the number formats,
# without the block scales a cache format adds)
SCORE_BYTES = {0.5: "fp4", 1.0: "fp8 or int8", 2.0: "bf16 or fp16", 4.0: "fp32"}
QUERY_TILE_ROWS = 128  # a typical FlashAttention-2 query block (Br) on Hopper/Ampere


def score_matrix_bytes(queries: int, keys: int, bytes_per_element: float) -> float:
    """queries × keys scores of one head: 65,536² × 2 B = 8.6 GB."""
    return queries * keys * bytes_per_element


def naive_attention_bytes(seq_len: int, qk_dim: int, v_dim: int, bytes_per_element: float,
                          activation_bytes: float = ACTIVATION_BYTES,
                          keys: int | None = None) -> float:
    """HBM bytes of one query head, unfused: scores written, read for softmax, probabilities
    written, read for PV (4 passes over S × S at ``bytes_per_element``), plus Q and K read at
    ``qk_dim``, V read and O written at ``v_dim``, at ``activation_bytes`` (K and V per query
    head: an unfused path expands them to every head, as repeat_kv does). A window or chunk
    changes only the mask: the scores are S × S. ``keys``: the keys each query scores where
    it picks them (DeepSeek Sparse Attention: S × min(S, index_topk))."""
    scores = 4 * score_matrix_bytes(seq_len, seq_len if keys is None else keys,
                                    bytes_per_element)
    return scores + 2 * seq_len * (qk_dim + v_dim) * activation_bytes


def causal_keys_read(seq_len: int, query_tile_rows: int, window: int | None = None,
                     chunk: int | None = None) -> int:
    """Keys one query head reads over all its query tiles, the tiles the causal mask hides
    skipped: tile i (rows i·Br to min((i+1)·Br, S) − 1) reads keys start_i to end_i − 1, with
    end_i = min((i+1)·Br, S) and start_i = 0 (full attention), max(0, i·Br − W + 1) (a
    sliding window of W keys) or ⌊i·Br / C⌋·C (chunks of C). Summed over T = ⌈S / Br⌉ tiles:
    Σ end_i = Br·T·(T − 1)/2 + S. Full attention at 65,536 tokens in 128-row tiles:
    128·512·511/2 + 65,536 = 16,809,984 keys, 32,832 a tile: about half of S.
    """
    tiles = math.ceil(seq_len / query_tile_rows)
    ends = query_tile_rows * tiles * (tiles - 1) // 2 + seq_len
    starts = 0
    if window is not None and window < seq_len:
        first = math.ceil((window - 1) / query_tile_rows)  # the first tile past key 0
        if first < tiles:
            n = tiles - first
            starts = query_tile_rows * (first + tiles - 1) * n // 2 - (window - 1) * n
    elif chunk is not None and chunk < seq_len:
        starts = chunk * _floor_sum(tiles, chunk, query_tile_rows)
    return ends - starts


def _floor_sum(n: int, m: int, a: int) -> int:
    """Σ_{i=0}^{n−1} ⌊a·i / m⌋ in O(log) steps (the Euclid-like reduction of AtCoder Library's
    floor_sum), for a tile count in the billions: each chunk's tiles start at its first key."""
    total, b = 0, 0
    while True:
        if a >= m:
            total += (n - 1) * n // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        top = a * n + b
        if top < m:
            return total
        n, b, m, a = top // m, top % m, a, m


def tiled_attention_bytes(
    seq_len: int, qk_dim: int, v_dim: int, bytes_per_element: float,
    num_heads: int, num_kv_heads: int, keys_per_query: int | None = None,
    query_tile_rows: int | None = None, chunked: bool = False,
) -> float:
    """HBM bytes of one layer with tiling: Q read and O written per query head, K and V of
    every token read once per KV head: S·(H_q + H_kv)·(d_qk + d_v)·bytes.

    llama-3.1-70b at 8,192 tokens, bf16: 8192·(64 + 8)·(128 + 128)·2 B = 0.30 GB a layer.
    With ``query_tile_rows`` the worst case: each query head re-reads, for every query tile,
    the keys its rows can see under the causal mask (causal_keys_read: ``keys_per_query``
    is the window, or with ``chunked`` the chunk; None for full attention); in practice those
    re-reads hit L2.
    """
    q_and_o = seq_len * num_heads
    if query_tile_rows is None:
        k_and_v = seq_len * num_kv_heads
    else:
        window, chunk = (None, keys_per_query) if chunked else (keys_per_query, None)
        k_and_v = num_heads * causal_keys_read(seq_len, query_tile_rows, window, chunk)
    return (q_and_o + k_and_v) * (qk_dim + v_dim) * bytes_per_element


@dataclass(frozen=True)
class AttentionMemoryReport:
    model: str
    context: int
    bytes_per_element: float
    per_head_per_layer_bytes: float  # scores of one head, one full-attention layer
    total_score_bytes: float  # every head's scores, every attention layer
    total_naive_bytes: float  # HBM traffic unfused, all heads and layers
    total_tiled_bytes: float  # HBM traffic tiled, K/V once per KV head
    total_tiled_worst_bytes: float  # tiled, K/V re-read per query tile
    attention_layers: int
    num_heads: int
    num_kv_heads: int
    steps: tuple[Step, ...]
    caution: str = ""  # a prompt past the context the engines serve the model at
    windowed_layers: int = 0  # sliding/chunked layers whose window is shorter than the prompt
    chunked_layers: int = 0  # of them, Llama 4's chunked layers: a query sees its own chunk
    # DeepSeek Sparse Attention: the keys a query attends to (index_topk), and the indexer's
    # fp32 logits of every layer, S × S each (vLLM's prefill writes them whole for its top-k)
    index_topk: int | None = None
    indexer_logit_bytes: float = 0.0

    def to_dict(self) -> dict[str, object]:
        """--json's object: the fields, the sequence's length as ``context_len`` (every
        command's name for a conversation's length: 8000), the caution in ``cautions``."""
        out = {"context_len" if k == "context" else k: v for k, v in vars(self).items()
               if k not in ("steps", "caution")}
        return {**out, "cautions": [self.caution] if self.caution else []}

    def text_lines(self) -> list[str]:
        return [
            f"{self.model}, {indefinite(self.context)} {self.context:,}-token prompt in one pass "
            f"({self.bytes_per_element:g}-byte scores):",
            f"  naive score matrix   {fmt_decimal_bytes(self.per_head_per_layer_bytes)} per head per "
            "attention layer" + ("" if self.index_topk is None else
                                 f" (each query scores the {self.index_topk:,} keys its "
                                 "indexer picks: S × index_topk)"),
            f"  over {self.num_heads} heads x {self.attention_layers} attention layers "
            f"{fmt_decimal_bytes(self.total_score_bytes)} of scores",
            f"  HBM traffic, naive   {fmt_decimal_bytes(self.total_naive_bytes)} (scores written, "
            "read for softmax, written, read for PV)",
            f"  HBM traffic, tiled   {fmt_decimal_bytes(self.total_tiled_bytes)} (flash-style: Q, O of "
            f"{self.num_heads} heads and K, V of {self.num_kv_heads} KV heads once; scores on chip)",
            f"                       {fmt_decimal_bytes(self.total_tiled_worst_bytes)} if K and V were "
            f"re-read from HBM by each of the {self.num_heads} query heads for every "
            f"{QUERY_TILE_ROWS}-row query tile, up to the causal diagonal (a kernel that "
            "shares them across a KV head's group reads ÷ the group)",
            f"  naive ÷ tiled        {self.ratio_text()}",
            *([f"  {self.windowed_layers} of the layers attend within a {self._span()}: an "
               "unfused kernel still writes S×S and masks it; a tiled one skips the tiles "
               f"outside the {self._span()}"]
              if self.windowed_layers else []),
            *([f"  indexer logits       {fmt_decimal_bytes(self.indexer_logit_bytes)} (DeepSeek "
               "Sparse Attention's indexer scores every causal pair: S × S fp32 logits a "
               f"layer over {self.attention_layers} layers, which vLLM's prefill writes to HBM "
               "whole for its top-k to read; no tiling keeps them on chip)"]
              if self.index_topk is not None else []),
            *([f"caution: {self.caution}"] if self.caution else []),
        ]

    def ratio_text(self) -> str:
        """Naive ÷ tiled traffic, whole from 10x up and to one decimal below, where a whole
        number would hide the most of it (Llama-3.1-8B at a 1-token prompt: 1.06 MB ÷
        655 kB = 1.6x, not 2x; at 8,192 tokens 104x)."""
        ratio = self.total_naive_bytes / self.total_tiled_bytes
        return f"{ratio:,.0f}x" if ratio >= 10 else f"{ratio:.1f}x"

    def _span(self) -> str:
        """What the windowed layers attend within: a sliding window, their own chunk, or
        (both kinds at once) either."""
        if not self.chunked_layers:
            return "window"
        return "chunk" if self.chunked_layers == self.windowed_layers else "window or chunk"


def attention_memory(spec: ModelSpec, context: int, bytes_per_element: float = 2.0) -> AttentionMemoryReport:
    require_positive(context, "context length")
    att = spec.attention
    if att is None:
        raise InputError(f"{spec.name} has no attention layers (it is a pure SSM model)")
    layers = [layer for layer in spec.layers if layer.mixer in ATTENTION_MIXERS]
    windowed = sum(1 for layer in layers if cached_tokens(layer, context) < context)
    chunked_windows = sum(1 for layer in layers
                          if layer.mixer == CHUNKED and cached_tokens(layer, context) < context)
    topk = sparse_topk(spec)  # a sparse model's queries score the keys its indexer picks
    picked = context if topk is None else min(context, topk)
    per_head = score_matrix_bytes(context, picked, bytes_per_element)
    # MLA prefill runs as multi-head attention: Q and K at qk_nope + qk_rope, V and O at v_head_dim
    qk, v, h, h_kv = att.head_dim, att.v_head_dim, att.num_heads, att.num_kv_heads
    scores = h * per_head * len(layers)
    naive = h * naive_attention_bytes(context, qk, v, bytes_per_element,
                                      keys=None if topk is None else picked) * len(layers)
    logits = 0.0 if topk is None \
        else score_matrix_bytes(context, context, INDEXER_LOGIT_BYTES) * len(layers)
    tiled = worst = 0.0  # a tiled kernel keeps its scores on chip: Q, K, V and O alone
    keys_read: dict[str, tuple[int, int]] = {}  # layer kind -> (layers, keys a head reads)
    for layer in layers:
        tiled += tiled_attention_bytes(context, qk, v, ACTIVATION_BYTES, h, h_kv)
        kept, chunked = cached_tokens(layer, context), layer.mixer == CHUNKED
        worst += tiled_attention_bytes(context, qk, v, ACTIVATION_BYTES, h, h_kv, kept,
                                       QUERY_TILE_ROWS, chunked)
        kind = ("full attention" if kept >= context else
                f"{'chunk' if chunked else 'window'} {layer.window_tokens:,}")
        window, chunk = (None, kept) if chunked else (kept, None)
        count = keys_read.get(kind, (0, 0))[0] + 1
        keys_read[kind] = (count, causal_keys_read(context, QUERY_TILE_ROWS, window, chunk))
    tiles = math.ceil(context / QUERY_TILE_ROWS)
    sparse_steps = () if topk is None else (
        step("indexer logits", "context² × fp32 bytes × attention layers",
             q("logits", logits / GB, "GB"), q("context", context, "tokens"),
             q("fp32 bytes", INDEXER_LOGIT_BYTES, "B", "fp8_mqa_logits' output"),
             q("attention layers", len(layers))),)
    steps = (
        step("score matrix per head per layer", "context² × bytes per element"
             if topk is None else "context × min(context, index_topk) × bytes per element",
             q("scores", per_head / GB, "GB"), q("context", context, "tokens"),
             *([] if topk is None else [q("index_topk", topk, "keys", "config.json: the "
                                          "keys each query's indexer picks")]),
             q("bytes per element", bytes_per_element, "B")),
        step("all heads and layers", "heads × attention layers × score matrix",
             q("total", scores / GB, "GB"), q("heads", att.num_heads, "", "num_attention_heads"),
             q("attention layers", len(layers)),
             q("score matrix", per_head / GB, "GB", "per head per layer, the step above")),
        step("naive traffic", "attention layers × heads × (4 × "
             + ("S²" if topk is None else "S × min(S, index_topk)")
             + " × score bytes + 2·S·(d_qk + d_v) × activation bytes)",
             q("total", naive / GB, "GB"), q("attention layers", len(layers)),
             q("heads", h, "", "num_attention_heads"), q("S", context, "tokens"),
             *([] if topk is None else [q("index_topk", topk, "keys", "config.json")]),
             q("d_qk", qk, "", "config.json"), q("d_v", v, "", "config.json"),
             q("score bytes", bytes_per_element, "B"),
             q("activation bytes", ACTIVATION_BYTES, "B", "Q, K, V and O in bf16")),
        step("tiled traffic", "attention layers × S·(heads + KV heads)·(d_qk + d_v) × "
             "activation bytes (the scores stay on chip)",
             q("total", tiled / GB, "GB"), q("attention layers", len(layers)),
             q("S", context, "tokens"), q("heads", h, "", "num_attention_heads"),
             q("KV heads", h_kv, "", "num_key_value_heads"), q("d_qk", qk, "", "config.json"),
             q("d_v", v, "", "config.json"),
             q("activation bytes", ACTIVATION_BYTES, "B", "Q, K, V and O in bf16")),
        step("tiled traffic, K and V re-read per query tile (the worst case)",
             "Σ over the kinds of attention layer of layers × (S·heads·(d_qk + d_v) × "
             "activation bytes (Q, O) + heads × keys read × (d_qk + d_v) × activation bytes); "
             "keys read = Σ over the "
             "T = ⌈S ÷ tile rows⌉ query tiles of the keys each tile's rows see under the "
             "causal mask = tile rows·T·(T − 1)/2 + S for full attention, less the keys "
             "before a window or chunk",
             q("total", worst / GB, "GB"), q("S", context, "tokens"),
             q("query tile rows", QUERY_TILE_ROWS, "", "a FlashAttention-2 query block"),
             q("query tiles", tiles),
             *(quantity for kind, (n, keys) in keys_read.items() for quantity in (
                 q(f"attention layers, {kind}", n),
                 q(f"keys read per head, {kind}", keys, "keys",
                   f"a layer; {keys / tiles:,.0f} a tile of the {context:,}"))),
             q("heads", h, "", "num_attention_heads"), q("d_qk", qk, "", "config.json"),
             q("d_v", v, "", "config.json"),
             q("activation bytes", ACTIVATION_BYTES, "B", "Q, K, V and O in bf16")),
        step("naive ÷ tiled", "naive traffic ÷ tiled traffic",
             q("ratio", naive / tiled, "x"), q("naive", naive / GB, "GB"),
             q("tiled", tiled / GB, "GB")),
        *sparse_steps,
    )
    return AttentionMemoryReport(spec.name, context, bytes_per_element, per_head, scores, naive,
                                 tiled, worst, len(layers), h, h_kv, steps,
                                 served_context_caution(spec, context), windowed,
                                 index_topk=topk, indexer_logit_bytes=logits,
                                 chunked_layers=chunked_windows)
