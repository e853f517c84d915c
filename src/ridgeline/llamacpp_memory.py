"""llama.cpp's memory: the weights, the KV cache for every n_ctx cell allocated up front,
and a compute buffer that ggml's graph allocator reserves for a worst-case graph.

The reserve graph processes n_ubatch tokens (default 512) against every cell. Before PR
#23861 it asked for all n_ubatch logits, so its peak was the larger of two tensors, plus the
few hidden-size tensors alive beside it:

- the logits, n_vocab × n_ubatch f32 (gpt-oss-20b: 201,088 × 512 × 4 B = 393 MiB; logged
  398.38 MiB, llama.cpp #15297);
- without flash attention, the attention scores of one layer, n_ctx × n_ubatch × n_head
  f32 (Mistral-7B at 32,000 cells: 2,000 MiB; logged 2,094.50 MiB, llama.cpp #7450).

With flash attention the scores are never materialised, so the buffer stays at the logits
whatever the context; without it every cell costs n_ubatch × n_head × 4 B of compute
buffer on top of its KV (half again for Llama-3.1-8B at f16). ``-fa`` defaults to auto,
on wherever the backend supports it, since mid-2025 (llama.cpp PR #15746 era).

Split over several GPUs by layer, each GPU reserves the peak of its own layers, and only the
GPU holding the output layer adds the logits, as the larger of the two, not their sum (two
GPUs at 1,080.00 MiB each, ik_llama.cpp #514; on 4 × P100 the output GPU grows with n_ubatch
by the logits while the others stay small, miminashi/llm-server-ops 2026-04 reports). That
GPU binds (it also holds the output layer's weights), so the pool is sized for it.

llama-server builds since PR #23861 (merged 2026-06-01, about b9470) reserve logits for one
row per slot (n_outputs_max), not every ubatch token (issue #23527), and since PR #23764 the
flash-attention mask is f16. The buffer is then one layer's peak: the FFN's three n_ubatch ×
n_ff f32 products (gate, up, their product; for MoE, the picked experts' plus their gathered
inputs), or without flash attention the scores, beside two hidden-size tensors, the mask
(n_ctx × n_ubatch × 2 B) and the slots' logits. Logged on one build (b9849, n_ubatch 2048,
8,192 cells): Qwen3-8B 384.04 MiB (this: 384.6), Qwen3-30B-A3B 368.04 (336.6); Llama-3.1-8B
at 512 and 32,768 cells 140 (132.5). ``outputs`` None is the older rule.
"""

from __future__ import annotations

from ridgeline.kvcache import (
    LLAMACPP_STATE_BYTES,
    attention_kv_bytes_per_token,
    state_bytes_per_sequence,
)
from ridgeline.layouts import FULL, WINDOW_MIXERS
from ridgeline.model import ModelSpec

F32_BYTES = 4
# residual stream, normed input, attention output and FFN output, in f32, beside the peak
HIDDEN_TENSORS_AT_PEAK = 4


def logits_bytes(model: ModelSpec, n_ubatch: int) -> float:
    """All n_ubatch tokens' logits in f32: Llama-3.1-8B at 512 = 250.5 MiB."""
    return float(model.vocab_size * n_ubatch * F32_BYTES)


def scores_bytes_per_cell(model: ModelSpec, n_ubatch: int, flash_attn: bool) -> float:
    """One cell's share of a layer's attention scores (n_ubatch × n_head f32), 0 with flash
    attention: the n_ctx-dependent part of the compute buffer."""
    if flash_attn or model.attention is None:
        return 0.0
    return float(n_ubatch * model.attention.num_heads * F32_BYTES)


def hidden_bytes(model: ModelSpec, n_ubatch: int) -> float:
    return float(HIDDEN_TENSORS_AT_PEAK * n_ubatch * model.hidden_size * F32_BYTES)


def ffn_peak_bytes(model: ModelSpec, n_ubatch: int) -> float:
    """One FFN's live f32 products for n_ubatch tokens: gate, up and their product (3 × n_ff
    wide); for MoE the picked experts' (k × expert n_ff, plus any shared expert) and the
    tokens gathered for them (k × hidden)."""
    widths = [3.0 * model.dense_mlp.intermediate_size] if model.dense_mlp else [0.0]
    if model.moe is not None:
        moe = model.moe
        routed = moe.experts_per_token * moe.expert_intermediate_size
        shared = moe.num_shared_experts * moe.shared_intermediate_size
        widths.append(3.0 * (routed + shared) + moe.experts_per_token * model.hidden_size)
    return n_ubatch * max(widths) * F32_BYTES


def mask_bytes_per_cell(n_ubatch: int, flash_attn: bool) -> float:
    """The attention mask's row per cell: f16 for flash attention (PR #23764), else f32."""
    return float(n_ubatch * (2 if flash_attn else F32_BYTES))


def buffer_terms(model: ModelSpec, n_ubatch: int, flash_attn: bool,
                 outputs: int | None) -> tuple[float, float, float, float]:
    """The compute buffer as c0 + max(c1, s × cells) + m × cells: (c0, c1, s, m).
    ``outputs`` None: the rule before PR #23861 (all n_ubatch logits, or the scores, beside
    four hidden tensors); else the logits of ``outputs`` rows beside one layer's peak."""
    scores = scores_bytes_per_cell(model, n_ubatch, flash_attn)
    if outputs is None:
        return hidden_bytes(model, n_ubatch), logits_bytes(model, n_ubatch), scores, 0.0
    head = float(outputs * model.vocab_size * F32_BYTES)
    hidden = 2.0 * n_ubatch * model.hidden_size * F32_BYTES
    return (head + hidden, ffn_peak_bytes(model, n_ubatch), scores,
            mask_bytes_per_cell(n_ubatch, flash_attn))


def compute_buffer_bytes(model: ModelSpec, n_ubatch: int, cells: int, flash_attn: bool,
                         outputs: int | None = None) -> float:
    """The device compute buffer llama.cpp reserves at ``cells`` cells (buffer_terms)."""
    fixed, peak, scores, mask = buffer_terms(model, n_ubatch, flash_attn, outputs)
    return fixed + max(peak, cells * scores) + cells * mask


MAX_CELLS = 1 << 30  # a bound for -c where no GPU memory grows with it


def cells_that_fit(free_bytes: float, cell_bytes: float, model: ModelSpec, n_ubatch: int,
                   flash_attn: bool, outputs: int | None = None) -> int:
    """The most n_ctx cells whose KV (``cell_bytes`` each) and compute buffer share
    ``free_bytes``: cells × (KV + m) + c0 + max(c1, cells × s) ≤ free, i.e. the smaller
    of (free − c0 − c1) ÷ (KV + m) and (free − c0) ÷ (KV + m + s)."""
    if cell_bytes < 0:
        return 0
    fixed, peak, scores, mask = buffer_terms(model, n_ubatch, flash_attn, outputs)
    room = free_bytes - fixed
    if cell_bytes + mask <= 0:  # nothing on the GPU grows with -c
        return MAX_CELLS if room >= peak else 0
    cells = min((room - peak) / (cell_bytes + mask), room / (cell_bytes + mask + scores))
    return max(0, min(MAX_CELLS, int(cells)))


def slot_cache_bytes(model: ModelSpec, kv_bytes_per_element: float, slots: int,
                     n_ubatch: int, windows: bool = True, n_ctx: int | None = None) -> float:
    """The caches llama.cpp sizes by slots rather than by -c: each sliding-window layer keeps
    n_swa × slots + n_ubatch cells (llama-kv-cache-iswa with --kv-unified, without
    --swa-full), but never more than the -c cells ``n_ctx`` where it is known; each recurrent
    layer one state per slot, in f32. Gemma-3-27B, f16, 4 slots: 52 layers × 4,608 cells ×
    8 KiB.
    ``windows`` False: the architecture has no window in llama.cpp, its layers grow with -c."""
    per_cell = attention_kv_bytes_per_token(model, kv_bytes_per_element)
    total = 0.0
    for layer in model.layers:
        if layer.mixer in WINDOW_MIXERS:
            if windows and layer.window_tokens:  # else cached per -c cell, as full layers are
                cells = layer.window_tokens * slots + n_ubatch
                total += per_cell * (cells if n_ctx is None else min(cells, n_ctx))
        elif layer.mixer != FULL:
            total += state_bytes_per_sequence(model, layer, LLAMACPP_STATE_BYTES) * slots
    return total
