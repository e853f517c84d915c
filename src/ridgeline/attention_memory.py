"""Why the attention kernel matters at long context: the S×S scores a naive kernel writes.

A naive attention materialises the score matrix: S² elements per head per layer
(64K tokens in bf16: 65,536² × 2 B = 8.6 GB). FlashAttention-style tiling keeps each
tile of scores on chip and streams K and V past each block of queries, so HBM sees
Q and O of every query head and K and V of every KV head (fewer, with GQA), plus at
worst one re-read of K and V per query tile (Dao et al. 2022, §3.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ridgeline.errors import InputError
from ridgeline.explain import Step, q, step
from ridgeline.kvcache import cached_tokens
from ridgeline.layouts import ATTENTION_MIXERS
from ridgeline.model import ModelSpec, trained_context_caution
from ridgeline.units import GB, fmt_decimal_bytes, indefinite, require_positive

# Q, K, V and O in bf16 whatever the scores are kept in (an eager fp32 softmax upcasts the
# scores alone)
ACTIVATION_BYTES = 2.0
QUERY_TILE_ROWS = 128  # a typical FlashAttention-2 query block (Br) on Hopper/Ampere


def score_matrix_bytes(queries: int, keys: int, bytes_per_element: float) -> float:
    """queries × keys scores of one head: 65,536² × 2 B = 8.6 GB."""
    return queries * keys * bytes_per_element


def naive_attention_bytes(seq_len: int, qk_dim: int, v_dim: int, bytes_per_element: float,
                          activation_bytes: float = ACTIVATION_BYTES) -> float:
    """HBM bytes of one query head, unfused: scores written, read for softmax, probabilities
    written, read for PV (4 passes over S × S at ``bytes_per_element``), plus Q and K read at
    ``qk_dim``, V read and O written at ``v_dim``, at ``activation_bytes`` (K and V per query
    head: an unfused path expands them to every head, as repeat_kv does). A window or chunk
    changes only the mask: the scores are S × S."""
    scores = 4 * score_matrix_bytes(seq_len, seq_len, bytes_per_element)
    return scores + 2 * seq_len * (qk_dim + v_dim) * activation_bytes


def tiled_attention_bytes(
    seq_len: int, qk_dim: int, v_dim: int, bytes_per_element: float,
    num_heads: int, num_kv_heads: int, keys_per_query: int | None = None,
    query_tile_rows: int | None = None,
) -> float:
    """HBM bytes of one layer with tiling: Q read and O written per query head, K and V of
    every token read once per KV head: S·(H_q + H_kv)·(d_qk + d_v)·bytes.

    llama-3.1-70b at 8,192 tokens, bf16: 8192·(64 + 8)·(128 + 128)·2 B = 0.30 GB a layer.
    With ``query_tile_rows`` the worst case: each query head re-reads, for every query tile,
    the keys its rows can see (``keys_per_query``, the window, plus the tile's own rows; all
    S for full attention); in practice those re-reads hit L2.
    """
    q_and_o = seq_len * num_heads
    if query_tile_rows is None:
        k_and_v = seq_len * num_kv_heads
    else:
        seen = seq_len if keys_per_query is None else min(seq_len, keys_per_query + query_tile_rows - 1)
        k_and_v = seen * num_heads * math.ceil(seq_len / query_tile_rows)
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
    caution: str = ""  # a prompt past the model's trained context
    windowed_layers: int = 0  # sliding/chunked layers whose window is shorter than the prompt

    def to_dict(self) -> dict[str, object]:
        out = {k: v for k, v in vars(self).items() if k not in ("steps", "caution")}
        return {**out, "cautions": [self.caution] if self.caution else []}

    def text_lines(self) -> list[str]:
        return [
            f"{self.model}, {indefinite(self.context)} {self.context:,}-token prompt in one pass "
            f"({self.bytes_per_element:g}-byte scores):",
            f"  naive score matrix   {fmt_decimal_bytes(self.per_head_per_layer_bytes)} per head per "
            "attention layer",
            f"  over {self.num_heads} heads x {self.attention_layers} attention layers "
            f"{fmt_decimal_bytes(self.total_score_bytes)} of scores",
            f"  HBM traffic, naive   {fmt_decimal_bytes(self.total_naive_bytes)} (scores written, "
            "read for softmax, written, read for PV)",
            f"  HBM traffic, tiled   {fmt_decimal_bytes(self.total_tiled_bytes)} (flash-style: Q, O of "
            f"{self.num_heads} heads and K, V of {self.num_kv_heads} KV heads once; scores on chip)",
            f"                       {fmt_decimal_bytes(self.total_tiled_worst_bytes)} if K and V were "
            f"re-read from HBM by each of the {self.num_heads} query heads for every "
            f"{QUERY_TILE_ROWS}-row query tile (a kernel that shares them across a KV head's "
            "group reads ÷ the group)",
            f"  naive ÷ tiled        {self.total_naive_bytes / self.total_tiled_bytes:,.0f}x",
            *([f"  {self.windowed_layers} of the layers attend within a window: an unfused kernel "
               "still writes S×S and masks it; a tiled one skips the tiles outside the window"]
              if self.windowed_layers else []),
            *([f"caution: {self.caution}"] if self.caution else []),
        ]


def attention_memory(spec: ModelSpec, context: int, bytes_per_element: float = 2.0) -> AttentionMemoryReport:
    require_positive(context, "context length")
    att = spec.attention
    if att is None:
        raise InputError(f"{spec.name} has no attention layers (it is a pure SSM model)")
    layers = [layer for layer in spec.layers if layer.mixer in ATTENTION_MIXERS]
    windowed = sum(1 for layer in layers if cached_tokens(layer, context) < context)
    per_head = score_matrix_bytes(context, context, bytes_per_element)
    # MLA prefill runs as multi-head attention: Q and K at qk_nope + qk_rope, V and O at v_head_dim
    qk, v, h, h_kv = att.head_dim, att.v_head_dim, att.num_heads, att.num_kv_heads
    scores = h * per_head * len(layers)
    naive = h * naive_attention_bytes(context, qk, v, bytes_per_element) * len(layers)
    tiled = worst = 0.0  # a tiled kernel keeps its scores on chip: Q, K, V and O alone
    for layer in layers:
        tiled += tiled_attention_bytes(context, qk, v, ACTIVATION_BYTES, h, h_kv)
        worst += tiled_attention_bytes(context, qk, v, ACTIVATION_BYTES, h, h_kv,
                                       cached_tokens(layer, context), QUERY_TILE_ROWS)
    steps = (
        step("score matrix per head per layer", "context² × bytes per element",
             q("scores", per_head / GB, "GB"), q("context", context, "tokens"),
             q("bytes per element", bytes_per_element, "B")),
        step("all heads and layers", "heads × attention layers × score matrix",
             q("total", scores / GB, "GB"), q("heads", att.num_heads, "", "num_attention_heads"),
             q("attention layers", len(layers))),
        step("naive traffic", "attention layers × heads × (4 × S² × score bytes + "
             "2·S·(d_qk + d_v) × activation bytes)",
             q("total", naive / GB, "GB"), q("attention layers", len(layers)),
             q("heads", h, "", "num_attention_heads"), q("S", context, "tokens"),
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
    )
    return AttentionMemoryReport(spec.name, context, bytes_per_element, per_head, scores, naive,
                                 tiled, worst, len(layers), h, h_kv, steps,
                                 trained_context_caution(spec.name, spec.max_position_embeddings,
                                                         context), windowed)
