"""llama.cpp over several GPUs by layer (-sm layer): which GPU holds each layer, what each GPU
holds, and whether llama.cpp pipelines the split.

llama.cpp deals the layers out by the cumulative -ts shares (by default each device's free
memory: equal on identical cards) and counts the output layer as one more slot, the last
(``layer_devices``): 80 layers on two GPUs put 41 on the first and 39 with the output layer
on the second. Each GPU holds its own layers' weights and cache (``split_devices``) and
reserves the peak of its own layers (llamacpp_memory.py). -c is one number for every GPU: the
GPU whose cache-growing layers allow the fewest cells binds, and every GPU's compute buffer is
sized at that one -c (memory.stage_pools).

With every block and the output on the GPUs (-ngl past the GGUF's block count, MTP blocks
included) and no tensor override (--n-cpu-moe is one), llama.cpp turns on pipeline
parallelism (src/llama-context.cpp; ``pipelines``): the ggml scheduler keeps
GGML_SCHED_MAX_COPIES = 4 copies of each input a GPU's part of the graph reads from
elsewhere (``split_input_copies``; what they cost is llamacpp_memory.py's).
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from ridgeline.engine_windows import honours_windows
from ridgeline.errors import InputError
from ridgeline.gguf_blocks import gguf_block_count, mtp_cache_blocks
from ridgeline.layouts import FULL, LINEAR, MAMBA, WINDOW_MIXERS
from ridgeline.offload import GPU, HOST, HOST_EXPERTS, gpu_weight_bytes
from ridgeline.params import layer_params
from ridgeline.quantization import ROUTED

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment


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


def layer_devices(n_layer_all: int, n_devices: int,
                  tensor_split: Sequence[float] | None = None,
                  n_gpu_layers: int | None = None, output_first: bool = True
                  ) -> tuple[int | None, ...]:
    """The device -sm layer puts each of the GGUF's ``n_layer_all`` blocks on (the repeating
    layers, then any MTP blocks: gguf_blocks.gguf_block_count), and last the output layer
    (index n_layer_all), None for the host. llama.cpp counts the output layer as one more
    slot: of act = min(-ngl, n_layer_all + 1) slots from i0 = n_layer_all + 1 − -ngl
    (n_layer_all − -ngl before PR #18148), slot il goes to the first device whose split
    point exceeds (il − i0) ÷ act (upper_bound; src/llama-model.cpp load_tensors,
    get_layer_buft_list). 80 layers over two equal GPUs: 81 slots, layers 0–40 (41; 40 ÷ 81
    < ½) on the first, 41–79 (39) and the output on the second; GLM-4.5's 92 and its MTP
    block over eight: 94 slots, 11 or 12 blocks a GPU. ``tensor_split`` None: equal shares
    (identical cards' free memory); ``n_gpu_layers`` None: every block (-ngl's default)."""
    points = split_points(tensor_split if tensor_split is not None else [1.0] * n_devices)
    if len(points) != n_devices:
        raise InputError(f"--tensor-split gives {len(points)} shares for {n_devices} GPUs")
    ngl = n_layer_all + 1 if n_gpu_layers is None else n_gpu_layers
    first = max(n_layer_all + 1 - ngl if output_first else n_layer_all - ngl, 0)
    slots = min(ngl, n_layer_all + 1) if n_devices else 0
    where: list[int | None] = []
    for il in range(n_layer_all + 1):
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
    mtp_blocks: int = 0  # of the GGUF's MTP blocks (gguf_blocks.py): no weights, maybe a cache

    def describe(self) -> str:
        """'GPU 2 of 2 (39 layers and the output layer)'; GLM-4.5's last of eight: '(11
        layers, the MTP block and the output layer)'."""
        held = [f"{self.layers} layer{'s' if self.layers != 1 else ''}"]
        if self.mtp_blocks:
            held.append("the MTP block" if self.mtp_blocks == 1
                        else f"{self.mtp_blocks} MTP blocks")
        if self.output:
            held.append("the output layer")
        text = held[0] if len(held) == 1 else ", ".join(held[:-1]) + " and " + held[-1]
        return f"GPU {self.index + 1} of {self.count} ({text})"


SCHED_MAX_COPIES = 4  # ggml's GGML_SCHED_MAX_COPIES: a pipelined scheduler's input copies


def pipelines(dep: Deployment) -> bool:
    """Whether llama.cpp pipelines ``dep``'s layer split (src/llama-context.cpp, the
    llama_context constructor's pipeline_parallel): more than one device, -ngl
    (llama_model::n_gpu_layers(); unset, n_layer_all + 1) past n_layer_all (gguf_block_count:
    MTP blocks included, so GLM-4.5's -ngl 93 does not pipeline, 94 does), the split by
    layer, the KV cache offloaded (ridgeline models no --no-kv-offload, so always) and no
    tensor overridden (--n-cpu-moe is an override)."""
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
    where = GPU if dep.offload is None else dep.offload.placement(
        index, n, gguf_block_count(dep.model))
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
    embedding's copy; llama.cpp keeps the input embedding on the host). The GGUF's MTP blocks
    come after the layers, placed as they are: no weights, and for GLM-4.5 one more
    full-attention layer's cache among those that grow with -c (gguf_blocks.py)."""
    n, count = dep.model.num_layers, dep.pipeline_parallel_size
    blocks, o = gguf_block_count(dep.model), dep.offload
    where = layer_devices(blocks, count, tensor_split, None if o is None else o.gpu_layers,
                          True if o is None else o.output_first)
    mtp, cached = where[n:blocks], mtp_cache_blocks(dep.model)  # the MTP blocks' devices
    per_layer = [_gpu_layer_bytes(dep, i) if where[i] is not None else 0.0 for i in range(n)]
    windows = WINDOW_MIXERS if honours_windows(dep) else ()
    growing_kinds = (FULL,) if windows else (FULL, *WINDOW_MIXERS)
    slot_kinds = (*windows, LINEAR, MAMBA)

    def share(device: int, kinds: tuple[str, ...], extra: tuple[int | None, ...] = ()) -> float:
        mine = [where[i] == device for i, layer in enumerate(dep.model.layers)
                if layer.mixer in kinds] + [w == device for w in extra]
        return sum(mine) / len(mine) if mine else 0.0

    outside = gpu_weight_bytes(dep) - sum(per_layer)  # the output layer's weights
    copies = split_input_copies(dep)
    # the -c mask on a GPU whose layers read it (the MTP blocks run in no forward pass);
    # where -ngl left every such layer on the host, one on each GPU, as on one GPU
    # (KVPool.host_cells)
    reads = [share(d, growing_kinds) for d in range(count)]
    held = [sum(1 for w in where[:n] if w == d) for d in range(count)]
    return tuple(SplitDevice(
        d, count, held[d], where[blocks] == d,
        sum(b for b, w in zip(per_layer, where[:n], strict=True) if w == d)
        + (outside if where[blocks] == d else 0.0),
        share(d, growing_kinds, mtp[:cached]), share(d, slot_kinds),
        copies if reads[d] else 0 if any(reads) else 1,
        copies if held[d] or where[blocks] == d else 1, share(d, windows) > 0,
        sum(1 for w in mtp if w == d))
        for d in range(count))


def _f32(x: float) -> float:
    """``x`` rounded to an IEEE single, as llama.cpp's split arithmetic runs."""
    return float(struct.unpack("f", struct.pack("f", x))[0])
