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

Split over several GPUs by layer (-sm layer), llama.cpp deals the layers out by the
cumulative -ts shares (by default each device's free memory: equal on identical cards) and
counts the output layer as one more slot, the last (layer_devices): 80 layers on two GPUs
put 41 on the first and 39 with the output layer on the second. Each GPU holds its own
layers' weights and cache and reserves the peak of its own layers; only the one holding the
output layer adds the logits, as the larger of the two, not their sum (two GPUs at 1,080.00
MiB each, ik_llama.cpp #514; on 4 × P100 the output GPU grows with n_ubatch by the logits
while the others stay small, miminashi/llm-server-ops 2026-04 reports). -c is one number for
every GPU: the GPU whose cache-growing layers allow the fewest cells binds, and every GPU's
compute buffer is sized at that one -c (split_devices; memory.stage_pools).

With every block and the output on the GPUs of a layer split (-ngl past the GGUF's block
count, MTP blocks included: ``pipelines``) and no tensor override (--n-cpu-moe is one),
llama.cpp turns on pipeline parallelism (src/llama-context.cpp): the ggml scheduler then
keeps GGML_SCHED_MAX_COPIES = 4 copies of each input a GPU's split reads from elsewhere, each
marked an output so that none is reused (ggml-backend.cpp, ggml_backend_sched_split_graph).
The masks are such inputs, kept on the host: each GPU whose layers read the -c mask holds four
copies (n_ctx × n_ubatch × 2 B each), and each holding a window layer four of the window
cache's own mask (``window_mask_bytes``); a GPU holding none of the layers that read the -c
cells (only Mamba or window layers) holds no -c mask. Four copies on each GPU is what unsloth
measured (PR #7637: Kimi-K3 at 1M cells on 4 GPUs, 4.0 GiB a GPU). So is the hidden state each
GPU receives, the embeddings from the host or the previous GPU's last layer
(``incoming_hidden_bytes``: 64 MiB a GPU for Llama-3.1-70B at n_ubatch 512).

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

import struct
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from ridgeline.datafiles import engine_defaults
from ridgeline.engine_windows import honours_windows
from ridgeline.errors import InputError
from ridgeline.kvcache import (
    LLAMACPP_STATE_BYTES,
    attention_kv_bytes_per_token,
    state_bytes_per_sequence,
)
from ridgeline.layouts import FULL, LINEAR, MAMBA, WINDOW_MIXERS
from ridgeline.model import ModelSpec
from ridgeline.offload import GPU, HOST, HOST_EXPERTS, gpu_weight_bytes
from ridgeline.params import layer_params
from ridgeline.quantization import ROUTED

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment

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
    -c mask the GPU holds, 1 alone, 4 on a GPU of a pipelined split (split_input_copies), 0
    on one whose layers read no -c cell (no scores of them either). ``input_copies``: the
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


def split_points(tensor_split: Sequence[float]) -> tuple[float, ...]:
    """-ts as llama.cpp reads it: the shares summed and normalised into cumulative split
    points, in f32 as its loader keeps them (src/llama-model.cpp, load_tensors): -ts 3,1 →
    (0.75, 1.0). With -ts unset (all zero) the shares are each device's free memory."""
    shares = [float(x) for x in tensor_split]
    if any(not x >= 0 for x in shares) or not sum(shares) > 0:
        raise InputError(f"--tensor-split takes shares ≥ 0, not all 0; got {list(tensor_split)}")
    total, points = 0.0, []
    for share in shares:
        total = _f32(total + _f32(share))
        points.append(total)
    return tuple(_f32(p / total) for p in points)


def layer_devices(n_layer: int, n_devices: int, tensor_split: Sequence[float] | None = None,
                  n_gpu_layers: int | None = None, output_first: bool = True
                  ) -> tuple[int | None, ...]:
    """The device -sm layer puts each repeating layer on, and last the output layer (index
    n_layer), None for the host. llama.cpp counts the output layer as one more slot: of
    act = min(-ngl, n_layer + 1) slots from i0 = n_layer + 1 − -ngl (n_layer − -ngl before
    PR #18148), slot il goes to the first device whose split point exceeds (il − i0) ÷ act
    (upper_bound; src/llama-model.cpp load_tensors, get_layer_buft_list). 80 layers over
    two equal GPUs: 81 slots, layers 0–40 (41; 40 ÷ 81 < ½) on the first, 41–79 (39) and
    the output on the second. ``tensor_split`` None: equal shares (identical cards' free
    memory); ``n_gpu_layers`` None: every layer (-ngl's default)."""
    points = split_points(tensor_split if tensor_split is not None else [1.0] * n_devices)
    if len(points) != n_devices:
        raise InputError(f"--tensor-split gives {len(points)} shares for {n_devices} GPUs")
    ngl = n_layer + 1 if n_gpu_layers is None else n_gpu_layers
    first = max(n_layer + 1 - ngl if output_first else n_layer - ngl, 0)
    slots = min(ngl, n_layer + 1) if n_devices else 0
    where: list[int | None] = []
    for il in range(n_layer + 1):
        if il < first or il - first >= slots:
            where.append(None)
        else:
            where.append(bisect_right(points, _f32(_f32(il - first) / _f32(slots))))
    return tuple(where)


@dataclass(frozen=True)
class SplitDevice:
    """One GPU of llama.cpp's layer split, as its own memory sees it."""

    index: int
    count: int  # GPUs in the split
    layers: int  # repeating layers on it
    output: bool  # the output layer (final norm, lm_head, the logits) too
    weight_bytes: float  # the weights of its layers (less -ngl's host experts) and output
    growing_share: float  # of the cache that grows with -c: its share of those layers
    slot_share: float  # of the slot-sized caches (windows, recurrent states): its share
    mask_copies: int = 1  # of the -c mask: 0 where no layer of its reads it (buffer_terms)
    input_copies: int = 1  # the scheduler's of each input it receives: 4 where pipelined
    # (1 on a GPU that holds nothing and so receives nothing)
    window_mask: bool = False  # holds a window layer, so reads the window cache's mask

    def describe(self) -> str:
        """'GPU 2 of 2 (39 layers and the output layer)'."""
        held = f"{self.layers} layer{'s' if self.layers != 1 else ''}"
        return f"GPU {self.index + 1} of {self.count} ({held}" \
            + (" and the output layer)" if self.output else ")")


SCHED_MAX_COPIES = 4  # ggml's GGML_SCHED_MAX_COPIES: a pipelined scheduler's input copies


def gguf_block_count(model: ModelSpec) -> int:
    """n_layer_all: the blocks of the model's GGUF, as convert_hf_to_gguf.py writes
    block_count: the repeating layers, and the MTP (nextn) layers where the architecture's
    converter keeps them (engines.json gguf_mtp_architectures: conversion/glm.py Glm4MoeModel,
    conversion/qwen.py _Qwen35MtpMixin; DeepseekV2Model drops them). llama.cpp loads those as
    blocks n_layer … n_layer_all − 1 (src/llama-hparams.h). GLM-4.5: 92 + 1 = 93."""
    kept = engine_defaults("llama.cpp")["gguf_mtp_architectures"]
    return model.num_layers + (model.mtp_layers if model.architecture in kept else 0)


def pipelines(dep: Deployment) -> bool:
    """Whether llama.cpp pipelines ``dep``'s layer split (src/llama-context.cpp, the
    llama_context constructor's pipeline_parallel): more than one device, -ngl
    (llama_model::n_gpu_layers(); unset, n_layer_all + 1) past n_layer_all (gguf_block_count:
    MTP blocks included, so GLM-4.5's -ngl 93 does not pipeline, 94 does), the split by
    layer, the KV cache offloaded and no tensor overridden (--n-cpu-moe is an override)."""
    o = dep.offload
    on_gpus = o is None or (o.gpu_layers > gguf_block_count(dep.model)
                            and not o.cpu_expert_layers)
    return dep.pipeline_parallel_size > 1 and on_gpus


def split_input_copies(dep: Deployment) -> int:
    """The copies the ggml scheduler keeps of each input of a GPU's part of the graph: 4
    (GGML_SCHED_MAX_COPIES) where llama.cpp pipelines a layer split (``pipelines``), else 1
    (ggml-backend.cpp, ggml_backend_sched_new: n_copies)."""
    return SCHED_MAX_COPIES if pipelines(dep) else 1


def _gpu_layer_bytes(dep: Deployment, index: int) -> float:
    """Layer ``index``'s weights on its GPU: none on the host, all but the routed experts
    where --n-cpu-moe keeps those on the host."""
    n = dep.model.num_layers
    where = GPU if dep.offload is None else dep.offload.placement(index, n)
    if where == HOST:
        return 0.0
    layer = dep.model.layers[index]
    return sum(count * dep.weights.format_of(category).bytes_per_weight
               for category, count in layer_params(dep.model, layer).items()
               if count and not (where == HOST_EXPERTS and category in ROUTED))


@lru_cache(maxsize=256)
def split_devices(dep: Deployment, tensor_split: tuple[float, ...] | None = None
                  ) -> tuple[SplitDevice, ...]:
    """The GPUs of ``dep``'s -sm layer split (layer_devices), each with its weights and its
    shares of the two caches (a layer's cache lives on the layer's device). The output
    device also holds what no layer does: the final norm and the lm_head (a tied one as the
    embedding's copy; llama.cpp keeps the input embedding on the host)."""
    n, count = dep.model.num_layers, dep.pipeline_parallel_size
    o = dep.offload
    where = layer_devices(n, count, tensor_split, None if o is None else o.gpu_layers,
                          True if o is None else o.output_first)
    per_layer = [_gpu_layer_bytes(dep, i) if where[i] is not None else 0.0 for i in range(n)]
    windows = WINDOW_MIXERS if honours_windows(dep) else ()
    growing_kinds = (FULL,) if windows else (FULL, *WINDOW_MIXERS)
    slot_kinds = (*windows, LINEAR, MAMBA)

    def share(device: int, kinds: tuple[str, ...]) -> float:
        mine = [where[i] == device for i, layer in enumerate(dep.model.layers)
                if layer.mixer in kinds]
        return sum(mine) / len(mine) if mine else 0.0

    outside = gpu_weight_bytes(dep) - sum(per_layer)  # the output layer's weights
    copies = split_input_copies(dep)
    # the -c mask on a GPU whose layers read it; where -ngl left every such layer on the host,
    # one on each GPU, as on one GPU (KVPool.host_cells)
    growing = [share(d, growing_kinds) for d in range(count)]
    held = [sum(1 for w in where[:n] if w == d) for d in range(count)]
    return tuple(SplitDevice(
        d, count, held[d], where[n] == d,
        sum(b for b, w in zip(per_layer, where[:n], strict=True) if w == d)
        + (outside if where[n] == d else 0.0),
        growing[d], share(d, slot_kinds),
        copies if growing[d] else 0 if any(growing) else 1,
        copies if held[d] or where[n] == d else 1, share(d, windows) > 0)
        for d in range(count))


def _f32(x: float) -> float:
    """``x`` rounded to an IEEE single, as llama.cpp's split arithmetic runs."""
    return float(struct.unpack("f", struct.pack("f", x))[0])
