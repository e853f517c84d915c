"""`ridgeline fit` under llama.cpp's partial host offload: what stays in host memory (its
weights, and its layers' share of the growing KV cache) and llama-server's flags for it; and
vLLM's --cpu-offload-gb as a lever where the pool holds nothing."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ridgeline.deployment import Deployment
from ridgeline.explain import Step, q, step
from ridgeline.units import GIB, MIB

if TYPE_CHECKING:
    from ridgeline.memory import EngineSettings
    from ridgeline.reports.fit import FitReport


def host_bytes(d: Deployment) -> float:
    from ridgeline.offload import host_weight_bytes

    return host_weight_bytes(d)


def host_kv_share(d: Deployment) -> float | None:
    """The growing KV cache's share in host memory (its layers' on the host); None without
    an offload."""
    if d.offload is None:
        return None
    from ridgeline.llamacpp_pool import llamacpp_cache_on_gpu

    return 1 - llamacpp_cache_on_gpu(d)[0]


def host_cache(r: FitReport) -> float:
    """That share's bytes at the cells llama-server is started with (-c)."""
    from ridgeline.llamacpp_pool import host_cache_bytes

    return host_cache_bytes(r.deployment, r.launch_cells)


def offload_steps(r: FitReport) -> tuple[Step, ...]:
    """The placement line's figures: the weights that stay in host memory, the growing KV
    cache's share there, and that share's bytes at the cells the fit starts with."""
    d = r.deployment
    if d.offload is None:
        return ()
    from ridgeline.llamacpp_pool import growing_cache_bytes_per_token, llamacpp_cache_on_gpu
    from ridgeline.offload import host_weight_parts

    layers, outside = host_weight_parts(d)
    share = host_kv_share(d) or 0.0
    out = [step("weights in host memory", "the host's layers' weights (and its experts') + "
                "what lies outside the layers there",
                q("host weights", host_bytes(d) / GIB, "GiB", d.offload.describe(d.model)),
                q("layers on the host", layers / GIB, "GiB"),
                q("outside the layers", outside / GIB, "GiB", "the token embeddings (untied), "
                  "and the output layer and final norm where -ngl leaves it on the host")),
           step("growing KV cache in host memory", "1 − its share on the GPU (a layer's cache "
                "lives with the layer)", q("share in host memory", share),
                q("share on the GPU", llamacpp_cache_on_gpu(d)[0], "", "the full layers' (and MTP blocks') "
                  "caches on the GPU ÷ all of them"))]
    cache = host_cache(r)
    if cache:
        out.append(step("its cache in host memory", "bytes per cell × cells × share in "
                        "host memory", q("host cache", cache / GIB, "GiB"),
                        q("bytes per cell", growing_cache_bytes_per_token(d) / 2**10, "KiB",
                          "every layer's that keeps a growing cache"),
                        q("cells", r.launch_cells, "", "llama-server -c"),
                        q("share in host memory", share)))
    return tuple(out)


def offload_flags(d: Deployment) -> str:
    """llama-server's flags for the partial offload the fit was sized for."""
    o = d.offload
    if o is None:
        return ""
    if o.chosen_by_fit:  # its default: say so, for builds or scripts that turn it off
        return " -ngl auto --fit on"
    every = o.cpu_expert_layers >= d.model.num_layers
    return (f" -ngl {o.gpu_layers}" + (" --cpu-moe" if every else
                                       f" --n-cpu-moe {o.cpu_expert_layers}"
                                       if o.cpu_expert_layers else ""))


def fit_target_flag(r: FitReport) -> str:
    """llama-server's --fit-target where --fit places the run (``r.fit_host``) and the margin
    `fit` sized it for is not the default: started without it, --fit keeps 1024 MiB free
    instead, and a -c sized for a smaller margin makes it move weights to the host."""
    from ridgeline.llamacpp_fit import default_fit_target_bytes

    margin = r.fit_margin_bytes
    if r.fit_host is None or margin is None or margin == default_fit_target_bytes():
        return ""
    return f" --fit-target {round(margin / MIB)}"


def offload_lines(d: Deployment, cells: int) -> list[str]:
    """What partial offload keeps off the GPU: its weights, and its layers' cache (in GiB for
    ``cells`` cells: the batch the verdict allows)."""
    if d.offload is None:
        return []
    from ridgeline.llamacpp_pool import host_cache_bytes, llamacpp_cache_on_gpu
    from ridgeline.offload import host_weight_bytes

    growing = llamacpp_cache_on_gpu(d)[0]
    cache = host_cache_bytes(d, cells)
    return [f"{d.offload.describe(d.model)}: {host_weight_bytes(d) / GIB:,.2f} GiB of weights "
            f"and {1 - growing:.0%} of the growing KV cache stay in host memory"
            + (f" ({cache / GIB:,.2f} GiB at {cells:,} cells: the host's RAM must hold both)"
               if cache else "")]


def cpu_offload_lever(r: FitReport) -> list[tuple[str, Deployment, int, EngineSettings]]:
    """vLLM's --cpu-offload-gb where the pool holds no conversation: the fewest whole GiB more
    that leave one (the pool grows with each GiB the flag moves off the GPU, up to every
    decoder layer of a stage, stage_layer_bytes_per_gpu), each step then reading them over
    the host link. None past that: all layers on the host and still no pool."""
    from dataclasses import replace

    from ridgeline.capacity import held_conversations
    from ridgeline.cpu_offload import FLAG, stage_layer_bytes_per_gpu
    from ridgeline.memory import kv_pool

    d, s, context = r.deployment, r.settings, r.context
    if d.cpu_offload is None or r.conversations:
        return []
    settings = replace(s, max_model_len=context)

    def at(gib: int) -> Deployment:
        assert d.cpu_offload is not None
        return replace(d, cpu_offload=replace(d.cpu_offload, bytes_per_gpu=gib * GIB))

    def holds(gib: int) -> bool:
        dep = at(gib)
        return held_conversations(kv_pool(dep, settings), dep, context) > 0

    low = math.floor(d.cpu_offload.bytes_per_gpu / GIB)  # holds none (the GiB asked, or less)
    high = math.ceil(max(split.bytes for split in stage_layer_bytes_per_gpu(d)) / GIB)
    if high <= low or not holds(high):
        return []
    while high - low > 1:  # the pool grows with the GiB moved: the fewest that hold one
        middle = (low + high) // 2
        low, high = (low, middle) if holds(middle) else (middle, high)
    return [(f"{FLAG} {high} (the least that runs)", at(high), context, s)]
