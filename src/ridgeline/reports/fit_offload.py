"""`ridgeline fit` under llama.cpp's partial host offload: what stays in host memory (its
weights, and its layers' share of the growing KV cache) and llama-server's flags for it."""

from __future__ import annotations

from ridgeline.deployment import Deployment
from ridgeline.units import GIB


def host_bytes(d: Deployment) -> float:
    from ridgeline.offload import host_weight_bytes

    return host_weight_bytes(d)


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
