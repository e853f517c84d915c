"""llama.cpp's pool: the weights, the CUDA context and the compute buffer, then a cache of
single-token cells for -c in what is left, beside the caches sized by slots (windows,
recurrent states); and, where -ngl leaves layers on the host, their share of the cache there.
What each buffer holds is ``llamacpp_memory.py``'s; the cache counts the MTP block GLM-4.5's
GGUF keeps beside its layers (gguf_blocks.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ridgeline.datafiles import engine_defaults
from ridgeline.deployment import Deployment
from ridgeline.engine_versions import llamacpp_build
from ridgeline.engine_windows import honours_windows, token_bytes
from ridgeline.errors import InputError
from ridgeline.gguf_blocks import gguf_block_count, mtp_cache_blocks, mtp_kv_bytes_per_token
from ridgeline.kvpool import KVPool
from ridgeline.layouts import FULL, LINEAR, MAMBA, WINDOW_MIXERS
from ridgeline.llamacpp_memory import (
    buffer_bytes_per_cell,
    cells_that_fit,
    compute_buffer_bytes,
    slot_cache_bytes,
    window_cache_cells,
)
from ridgeline.llamacpp_split import SplitDevice
from ridgeline.offload import check_host_memory, gpu_share, host_weight_bytes

if TYPE_CHECKING:
    from ridgeline.memory import EngineSettings


def llamacpp_outputs(slots: int, engine_version: str | None) -> int | None:
    """The logits rows llama-server reserves: one per slot since PR #23861 (the newest, by
    default), or every ubatch token (None) in builds before it."""
    since = int(engine_defaults("llama.cpp")["outputs_per_slot_since_build"])
    build = llamacpp_build(engine_version) if engine_version else None
    return None if build is not None and build < since else slots


def mtp_cache_bytes_per_token(dep: Deployment) -> float:
    """Per GPU, the cache llama.cpp keeps per -c cell for the GGUF's MTP blocks
    (gguf_blocks.mtp_kv_bytes_per_token), spread as token_bytes spreads the layers': GLM-4.5
    at f16, 4 KiB (its 93rd block) beside 368 KiB; 0 for other engines, which load no GGUF."""
    if not dep.engine.startswith("llama.cpp"):
        return 0.0
    return mtp_kv_bytes_per_token(dep.model, dep.kv.bytes_per_element) * dep.kv_replication \
        / dep.num_gpus


def llamacpp_cache_on_gpu(dep: Deployment) -> tuple[float, float]:
    """The shares of llama.cpp's two caches on the GPU under -ngl (a layer's cache stays with
    it): the cells that grow with -c (full layers, windowed ones where the build ignores the
    window, and the MTP blocks that keep a cache, gguf_blocks.mtp_cache_blocks), and the
    slot-sized caches (windows, recurrent states). GLM-4.5 at -ngl 80: of 92 layers and its
    MTP block, 78 and the block on the GPU, 79 of 93."""
    windows = honours_windows(dep)
    kinds = (FULL,) if windows else (FULL, *WINDOW_MIXERS)
    layers = sum(1 for layer in dep.model.layers if layer.mixer in kinds)
    cached = mtp_cache_blocks(dep.model) if dep.engine.startswith("llama.cpp") else 0
    o, n = dep.offload, dep.model.num_layers
    on_gpu = cached if o is None else min(cached, o.mtp_on_gpu(n, gguf_block_count(dep.model)))
    growing = (gpu_share(dep, kinds) * layers + on_gpu) / (layers + cached) \
        if layers + cached else 1.0
    return growing, gpu_share(dep, (*(WINDOW_MIXERS if windows else ()), LINEAR, MAMBA))


def window_mask_cells(dep: Deployment, device: SplitDevice | None, slots: int, n_ubatch: int,
                      max_model_len: int | None) -> int:
    """The cells of the window cache's mask the GPU (of a split, ``device``) reads: the
    window cache's for ``slots`` slots of ``max_model_len`` (the widest window;
    llamacpp_memory.window_cache_cells), 0 where no window layer whose window the build
    keeps is on it."""
    windowed = [layer.window_tokens for layer in dep.model.layers
                if layer.mixer in WINDOW_MIXERS and layer.window_tokens]
    if not windowed or not honours_windows(dep):
        return 0
    on_gpu = gpu_share(dep, WINDOW_MIXERS) > 0 if device is None else device.window_mask
    n_ctx = slots * max_model_len if max_model_len else None  # -c: each slot's context
    return window_cache_cells(max(windowed), slots, n_ubatch, n_ctx) if on_gpu else 0


def host_cache_bytes(dep: Deployment, cells: int, engine_version: str | None = None) -> float:
    """The KV cache of the layers -ngl leaves on the host, for ``cells`` cells of -c: a
    layer's cache lives with the layer (the slot-sized window and state caches left out)."""
    if dep.offload is None:
        return 0.0
    growing = llamacpp_cache_on_gpu(dep)[0]
    return growing_cache_bytes_per_token(dep, engine_version) * cells * (1.0 - growing)


def growing_cache_bytes_per_token(dep: Deployment, engine_version: str | None = None) -> float:
    """The growing cache's bytes per cell, every layer's that keeps one (the MTP blocks'
    too), wherever the layer lives."""
    return token_bytes(dep, None, engine_version) + mtp_cache_bytes_per_token(dep)


def host_cells_that_fit(dep: Deployment, engine_version: str | None, most: int) -> int:
    """The -c cells whose cache the host's RAM (--host-memory-gib) holds beside the host's
    weights, for the layers -ngl leaves there; ``most`` where the RAM is not given or keeps
    none of the cache. llama-3.1-8b Q4_K_M at -ngl 0 with 64 GiB: (64 − 4.52) GiB ÷ 128 KiB,
    487,222 cells, 59 conversations of 8,192 tokens (not the 24 million the GPU's mask
    allows)."""
    o = dep.offload
    per_cell = host_cache_bytes(dep, 1, engine_version)  # check_host_memory's rule, per cell
    if o is None or o.host_memory_bytes is None or per_cell <= 0:
        return most
    return max(0, int((o.host_memory_bytes - host_weight_bytes(dep)) // per_cell))


def check_host_memory_for(dep: Deployment, cells: int) -> None:
    """Refuse a split whose host share, its weights and its layers' cache for ``cells`` cells,
    overflows the host's RAM, where given."""
    check_host_memory(dep, host_cache_bytes(dep, cells), cells)


def llamacpp_pool(dep: Deployment, s: EngineSettings, total_bytes: float, weight_bytes: float,
                  non_torch: float, kv_bytes_per_token: float,
                  device: SplitDevice | None = None, cells: int | None = None) -> KVPool:
    """llama.cpp (and engines without a paged pool): the weights, the CUDA context and the
    compute buffer, then a cache of single-token cells in what is left, each the layers'
    ``kv_bytes_per_token`` and the MTP blocks' (mtp_cache_bytes_per_token); the compute
    buffer is sized at the cells that fit, since its mask (and without flash attention its
    scores) grows with them. Of a layer split, one ``device``: its own layers' caches, the logits
    only with the output, the masks' and the received hidden state's copies
    (SplitDevice.mask_copies, input_copies); ``cells``: the -c the
    split runs at (its binding GPU's, memory.stage_pools), None: the most this GPU holds."""
    d = engine_defaults(dep.engine)
    # llama_context clamps -ub to -b (n_ubatch = min(n_batch, n_ubatch), src/llama-context.cpp)
    n_ubatch = min(s.max_num_batched_tokens or int(d.get("n_ubatch", 512)),
                   s.n_batch or int(d.get("n_batch", 2048)))
    seats = s.max_num_seqs or int(d.get("n_parallel", 1))
    windows = honours_windows(dep)
    growing, slot_sized = llamacpp_cache_on_gpu(dep)
    kv_bytes_per_token += mtp_cache_bytes_per_token(dep)
    if device is None:
        kv_bytes_per_token *= growing
        per_gpu = dep.kv_replication / dep.num_gpus * slot_sized
    else:  # kv_bytes_per_token is an even share of every GPU-held layer's: take the device's
        kv_bytes_per_token *= dep.num_gpus * device.growing_share
        per_gpu = device.slot_share
    output = device is None or device.output
    copies = 1 if device is None else device.mask_copies
    inputs = 1 if device is None else device.input_copies

    def slot_caches(slots: int) -> float:
        cells = slots * s.max_model_len if s.max_model_len else None  # -c: each slot's context
        return slot_cache_bytes(dep.model, dep.kv.bytes_per_element, slots, n_ubatch, windows,
                                cells) * per_gpu

    fixed = slot_caches(seats)
    each = slot_caches(seats + 1) - fixed
    free = total_bytes - weight_bytes - non_torch - fixed
    outputs = llamacpp_outputs(seats, s.engine_version)
    window = window_mask_cells(dep, device, seats, n_ubatch, s.max_model_len)
    flash = dep.flash_attention  # -fa as Deployment.build resolved it (auto: per backend)
    most = cells_that_fit(free, kv_bytes_per_token, dep.model, n_ubatch, flash, outputs,
                          output, copies, input_copies=inputs, window_cells=window)
    # no growing layer on the GPU, its cache on the host: the cells stand for its blocks; of a
    # split GPU whose growing layers are on the others, the most it would allow (no fewer than
    # the binding GPU's unless it cannot start)
    on_host = kv_bytes_per_token == 0 and growing == 0 and dep.model.count(mixer=FULL) > 0
    elsewhere = device is not None and kv_bytes_per_token == 0 and growing > 0
    if on_host:  # the host's RAM, where given, holds the cache the GPU's mask would allow
        most = min(most, host_cells_that_fit(dep, s.engine_version, most))
    cells = most if cells is None else cells
    # the cache on the host, the GPU bounds no cells: llama.cpp reserves the compute buffer
    # for the -c it starts (llama_context's graph_reserve over the n_ctx cells of its
    # memory), the slots' contexts, not for the most the GPU's mask would allow (-ngl 0 with
    # Llama-3.1-8B on an H100: 32,768 cells, a few GiB; 82 million had filled the card)
    sized = min(cells, seats * s.max_model_len) if on_host and s.max_model_len else cells
    compute = compute_buffer_bytes(dep.model, n_ubatch, sized, flash, outputs, output,
                                   copies, input_copies=inputs, window_cells=window)
    per_cell = buffer_bytes_per_cell(dep.model, n_ubatch, sized, flash, outputs, output,
                                     copies, input_copies=inputs, window_cells=window)
    return KVPool(dep.engine, total_bytes, 1.0, weight_bytes, compute, non_torch, 0.0, 1.0,
                  kv_bytes_per_token,
                  1, seats, n_ubatch, forward_bytes=compute, slot_cache_bytes=fixed,
                  slot_bytes_each=each, buffer_bytes_per_cell=per_cell, windows_apart=True,
                  host_cells=most if elsewhere else cells if on_host else 0,
                  split_device=device, context_cells=sized)


def per_slot_context(cells: int, slots: int) -> int:
    """A slot's conversation in llama-server's ``-c`` cells over its ``-np`` slots: the
    length at which every slot holds one at once (without --kv-unified, llama.cpp's own cap
    on a slot, n_ctx_seq = n_ctx / n_seq_max in src/llama-context.cpp; with it, the slots'
    even share of the cells they pool). -c 96000 -np 4: 24,000 tokens."""
    if slots < 1:
        raise InputError(f"-np must be at least 1, got {slots}")
    return cells // slots
