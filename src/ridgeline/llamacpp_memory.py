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

On a GPU of a layer split (llamacpp_split.py) the buffer is the peak of its own layers: only
the one holding the output layer adds the logits, as the larger of the two, not their sum
(two GPUs at 1,080.00 MiB each, ik_llama.cpp #514; on 4 × P100 the output GPU grows with
n_ubatch by the logits while the others stay small, miminashi/llm-server-ops 2026-04
reports), and every GPU's buffer is sized at the split's one -c. Where llama.cpp pipelines
the split (llamacpp_split.pipelines), the ggml scheduler keeps GGML_SCHED_MAX_COPIES = 4
copies of each input a GPU's split reads from elsewhere, each marked an output so that none
is reused (ggml-backend.cpp, ggml_backend_sched_split_graph). The masks are such inputs, kept
on the host: each GPU whose layers read the -c mask holds four copies (n_ctx × n_ubatch × 2 B
each), and each holding a window layer four of the window cache's own mask
(``window_mask_bytes``); a GPU holding none of the layers that read the -c cells (only Mamba
or window layers) holds no -c mask. Four copies on each GPU is what unsloth measured (PR
#7637: Kimi-K3 at 1M cells on 4 GPUs, 4.0 GiB a GPU). So is the hidden state each GPU
receives, the embeddings from the host or the previous GPU's last layer
(``incoming_hidden_bytes``: 64 MiB a GPU for Llama-3.1-70B at n_ubatch 512).

llama-server builds since PR #23861 (merged 2026-06-01, first in release b9460) reserve logits for one
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


def incoming_hidden_bytes(model: ModelSpec, n_ubatch: int, copies: int) -> float:
    """The copies a GPU of a pipelined split keeps of the hidden state it receives (the host's
    embeddings for the first, the last layer's output of the one before for the others):
    copies × n_ubatch × hidden × 4 B, never freed (marked outputs; ggml-backend.cpp,
    ggml_backend_sched_split_graph). Llama-3.1-70B at 512: 4 × 512 × 8,192 × 4 B = 64 MiB.
    One copy (no pipelining) is freed once the first layer has read it: 0 beside the peak."""
    return float(copies * n_ubatch * model.hidden_size * F32_BYTES) if copies > 1 else 0.0


def window_cache_cells(window_tokens: int, slots: int, n_ubatch: int,
                       n_ctx: int | None = None) -> int:
    """The cells of llama.cpp's window cache (src/llama-kv-cache-iswa.cpp, the constructor):
    window × slots + n_ubatch with --kv-unified, at most the -c cells ``n_ctx`` where known
    (it pads them to 256 too, not counted here). gpt-oss (window 128), 4 slots: 1,024."""
    cells = window_tokens * slots + n_ubatch
    return cells if n_ctx is None else min(cells, n_ctx)


def window_mask_bytes(n_ubatch: int, flash_attn: bool, cells: int, copies: int) -> float:
    """The window cache's own mask on a GPU holding a window layer: copies × its cells ×
    n_ubatch × 2 B (f16 with flash attention, else 4 B), beside the -c mask
    (src/llama-graph.cpp, build_attn_inp_kv_iswa builds one mask per cache with
    build_attn_inp_kq_mask). Gemma-3 at 4 slots on a pipelined split: 4 × 4,608 × 512 × 2 B
    = 18 MiB."""
    return copies * cells * mask_bytes_per_cell(n_ubatch, flash_attn)


def buffer_terms(model: ModelSpec, n_ubatch: int, flash_attn: bool, outputs: int | None,
                 holds_output: bool = True, mask_copies: int = 1, *, input_copies: int = 1,
                 window_cells: int = 0) -> tuple[float, float, float, float]:
    """The compute buffer as c0 + max(c1, s × cells) + m × cells: (c0, c1, s, m).
    ``outputs`` None: the rule before PR #23861 (all n_ubatch logits, or the scores, beside
    four hidden tensors); else the logits of ``outputs`` rows beside one layer's peak.
    ``holds_output`` False: a GPU of a layer split without the output layer, no logits (its
    peak, under the older rule, one layer's FFN products). ``mask_copies``: the copies of the
    -c mask the GPU holds, 1 alone, 4 on a GPU of a pipelined split
    (llamacpp_split.split_input_copies), 0 on one whose layers read no -c cell (no scores of
    them either). ``input_copies``: the
    scheduler's copies of each input (4 pipelined: the hidden state received is kept 4
    times); ``window_cells``: the cells of the window mask the GPU reads (0: no window layer
    on it), ``input_copies`` copies of it. The older rule counts no mask: its peak, the
    logits, comes after the last layer has read them."""
    scores = scores_bytes_per_cell(model, n_ubatch, flash_attn) if mask_copies else 0.0
    received = incoming_hidden_bytes(model, n_ubatch, input_copies)
    if outputs is None:
        peak = logits_bytes(model, n_ubatch) if holds_output else ffn_peak_bytes(model, n_ubatch)
        return hidden_bytes(model, n_ubatch) + received, peak, scores, 0.0
    head = float(outputs * model.vocab_size * F32_BYTES) if holds_output else 0.0
    hidden = 2.0 * n_ubatch * model.hidden_size * F32_BYTES
    window = window_mask_bytes(n_ubatch, flash_attn, window_cells, input_copies)
    return (head + hidden + received + window, ffn_peak_bytes(model, n_ubatch), scores,
            mask_copies * mask_bytes_per_cell(n_ubatch, flash_attn))


def compute_buffer_bytes(model: ModelSpec, n_ubatch: int, cells: int, flash_attn: bool,
                         outputs: int | None = None, holds_output: bool = True,
                         mask_copies: int = 1, *, input_copies: int = 1,
                         window_cells: int = 0) -> float:
    """The device compute buffer llama.cpp reserves at ``cells`` cells (buffer_terms)."""
    fixed, peak, scores, mask = buffer_terms(model, n_ubatch, flash_attn, outputs, holds_output,
                                             mask_copies, input_copies=input_copies,
                                             window_cells=window_cells)
    return fixed + max(peak, cells * scores) + cells * mask


def buffer_bytes_per_cell(model: ModelSpec, n_ubatch: int, cells: int, flash_attn: bool,
                          outputs: int | None = None, holds_output: bool = True,
                          mask_copies: int = 1, *, input_copies: int = 1,
                          window_cells: int = 0) -> float:
    """What one more cell adds to the compute buffer at ``cells`` cells (buffer_terms): its
    mask row (× the split's copies), and its scores where they, not the FFN products, are the
    larger part. A pipelined split's 4 mask copies × n_ubatch 512 × 2 B are 4 KiB a cell,
    more than the KV cell of a hybrid whose few attention layers share the GPU."""
    _, peak, scores, mask = buffer_terms(model, n_ubatch, flash_attn, outputs, holds_output,
                                         mask_copies, input_copies=input_copies,
                                         window_cells=window_cells)
    return mask + (scores if cells * scores > peak else 0.0)


MAX_CELLS = 1 << 30  # a bound for -c where no GPU memory grows with it


def cells_that_fit(free_bytes: float, cell_bytes: float, model: ModelSpec, n_ubatch: int,
                   flash_attn: bool, outputs: int | None = None, holds_output: bool = True,
                   mask_copies: int = 1, *, input_copies: int = 1, window_cells: int = 0) -> int:
    """The most n_ctx cells whose KV (``cell_bytes`` each) and compute buffer share
    ``free_bytes``: cells × (KV + m) + c0 + max(c1, cells × s) ≤ free, i.e. the smaller
    of (free − c0 − c1) ÷ (KV + m) and (free − c0) ÷ (KV + m + s)."""
    if cell_bytes < 0:
        return 0
    fixed, peak, scores, mask = buffer_terms(model, n_ubatch, flash_attn, outputs, holds_output,
                                             mask_copies, input_copies=input_copies,
                                             window_cells=window_cells)
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
                total += per_cell * window_cache_cells(layer.window_tokens, slots, n_ubatch, n_ctx)
        elif layer.mixer != FULL:
            total += state_bytes_per_sequence(model, layer, LLAMACPP_STATE_BYTES) * slots
    return total
