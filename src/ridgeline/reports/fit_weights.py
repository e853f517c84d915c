"""`ridgeline fit`'s weights per GPU: the checkpoint's share, and where the pool's weights
differ from it (vLLM's padded MXFP4 experts, a vision tower, what each tensor-parallel rank
keeps whole, llama.cpp's layers and embedding in host memory)."""

from __future__ import annotations

from ridgeline.deployment import Deployment
from ridgeline.memory import KVPool, ep_extra_bytes
from ridgeline.reports.fit_terms import is_llamacpp, per_gpu
from ridgeline.stages import stage_tp_copies_bytes, stage_weight_bytes
from ridgeline.units import GIB


def weights_note(dep: Deployment, pool: KVPool) -> str:
    """Where the weights per GPU differ from the checkpoint's share: vLLM's padded MXFP4
    experts; a vision tower or a drafter loaded beside the model; llama.cpp's input embedding
    (and -ngl's host layers) in host memory."""
    from ridgeline.vllm_memory import parse_version
    from ridgeline.vllm_mxfp4 import HOPPER_SCALES_FREED_FROM, mxfp4_kernel, mxfp4_padding_bytes

    whole = _kept_whole_note(dep, pool)
    share = f"{checkpoint_share_bytes(dep, pool) / GIB:,.2f} GiB of {dep.weights.label} " \
        f"weights {per_gpu(pool)}" + (f" of {pool.stage.describe()}" if pool.stage else "") + whole
    vision = vision_bytes_in_pool(dep, pool)
    if vision > 0:
        share += (f" + {vision / GIB:,.2f} GiB of vision tower ("
                  + ("--language-model-only, or --limit-mm-per-prompt at 0 for every "
                     "modality, leaves it out" if pool.engine == "vllm"
                     else "the engine loads it") + ")")
    if pool.drafter_weight_bytes > 0:
        share += (f" + {pool.drafter_weight_bytes / GIB:,.2f} GiB of the drafter's weights "
                  "(the engine loads them beside the model)")
    if pool.redundant_expert_bytes > 0:
        share += (f" + {pool.redundant_expert_bytes / GIB:,.2f} GiB of redundant experts "
                  f"({'SGLang' if pool.engine == 'sglang' else 'vLLM'} loads them with the "
                  "weights)")
    padding = mxfp4_padding_bytes(dep, pool.stage, _version(pool)) \
        if pool.engine == "vllm" else 0.0
    if padding:
        kernel = mxfp4_kernel(dep.accelerator, parse_version(_version(pool) or "0.0"))
        if kernel != "triton-hopper":
            tile = "ROCm MoE kernels' tiles" if kernel == "rocm" else f"{kernel} kernel's tile"
            return (f"{share} + {padding / GIB:,.2f} GiB: vLLM pads the MXFP4 experts to its "
                    f"{tile}")
        kept = parse_version(_version(pool) or "0.0") < HOPPER_SCALES_FREED_FROM
        return (f"{share} + {padding / GIB:,.2f} GiB: vLLM's Hopper kernels hold the MXFP4 "
                "experts' scales swizzled and padded, their biases in fp32"
                + (", and the loaded scales beside them (until v0.25)" if kept else ""))
    if vision > 0 or pool.drafter_weight_bytes > 0 or pool.redundant_expert_bytes > 0 \
            or pool.stage is not None:
        return share
    if pool.split_device is not None:  # llama.cpp -sm layer: the binding GPU's own layers
        return (f"{pool.weight_bytes / GIB:,.2f} GiB of {dep.weights.label} weights on "
                f"{pool.split_device.describe()}: llama.cpp counts the output layer as one "
                "more layer to split, the last")
    if is_llamacpp(pool) and pool.weight_bytes < dep.weight_bytes / dep.num_gpus:
        return (f"{share}, less what stays in host memory: the input embedding"
                + (" and -ngl's host layers" if dep.offload is not None else ""))
    return f"{dep.weights.label}, the checkpoint's share{whole}"


def _kept_whole_note(dep: Deployment, pool: KVPool) -> str:
    """What of the weights per GPU each tensor-parallel rank keeps whole, where it shows;
    with data-parallel attention, what each rank keeps a copy of."""
    tp = dep.tensor_parallel_size
    if dep.data_parallel_size > 1:
        if dep.model.moe is None:  # nothing is split over the ranks: each is a replica
            return (", all of it from each data-parallel rank's own copy of the model (a "
                    "dense model has no routed experts to spread over the ranks)")
        copies = dep.tp_copies_bytes / dep.num_gpus
        return (f", {copies / GIB:,.2f} GiB of it copies each data-parallel rank keeps of all "
                f"but the routed experts (those split over all {dep.expert_ranks} GPUs)")
    if tp == 1 or is_llamacpp(pool):
        return ""
    extra = stage_tp_copies_bytes(dep, pool.stage) / tp
    if extra < 0.005 * GIB:
        return ""
    att = dep.model.attention
    what = [name for name, held in (
        ("the MoE routers", dep.model.moe is not None),
        ("MLA's q_a/kv_a down-projections", att is not None and att.mla is not None),
        ("a K/V head's projections (more ranks than KV heads)",
         att is not None and att.mla is None and tp > att.num_kv_heads)) if held]
    return f", {extra / GIB:,.2f} GiB of it kept whole on every rank: {', '.join(what)}"


def _version(pool: KVPool) -> str | None:
    return None if pool.accounting is None else pool.accounting.version


def vision_bytes_in_pool(dep: Deployment, pool: KVPool) -> float:
    """The vision tower's bytes per GPU among the pool's weights (0 where the engine leaves it
    out: llama.cpp, vLLM --language-model-only): what they hold past the checkpoint's share,
    less vLLM's MXFP4 padding, a drafter's weights (pool.drafter_weight_bytes) and
    --enable-eplb's redundant experts (pool.redundant_expert_bytes)."""
    from ridgeline.vllm_mxfp4 import mxfp4_padding_bytes

    if is_llamacpp(pool):
        return 0.0
    extra = pool.weight_bytes - checkpoint_share_bytes(dep, pool) - pool.drafter_weight_bytes \
        - pool.redundant_expert_bytes \
        - (mxfp4_padding_bytes(dep, pool.stage, _version(pool)) if pool.engine == "vllm"
           else 0.0)
    return extra if extra > 1e-9 * pool.weight_bytes else 0.0  # not float rounding


def checkpoint_share_bytes(dep: Deployment, pool: KVPool) -> float:
    """The checkpoint's weights on one GPU of the pool's deployment (of its binding pipeline
    stage), before a vision tower or padding: with expert parallelism, its whole experts."""
    if pool.stage is None:
        return (dep.weight_bytes + dep.tp_copies_bytes) / dep.num_gpus + ep_extra_bytes(dep)
    return stage_weight_bytes(dep, pool.stage, 0.0)
