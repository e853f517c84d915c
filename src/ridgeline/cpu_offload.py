"""vLLM's --cpu-offload-gb: some of each GPU's layer weights in pinned host memory.

vLLM moves the parameters of its decoder layers to pinned host memory, one by one, until
each GPU has given up the GiB asked (engines.json vllm.cpu_offload.rule): embeddings and the
LM head stay. Those bytes leave the GPU's weights, so its KV cache pool gains them. They do
not leave the forward pass: since v0.8.4 the GPU's kernels read them over the host link
through a UVA view (V0 copied each layer in before running it), so every step, decode or
prompt, moves them across PCIe once more. The floor reads them over the link instead of from
HBM; the expectation (step_cost) adds the link's time and leaves the matmuls' HBM reads whole,
a few per cent over (HBM is tens of times faster than PCIe).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ridgeline.errors import InputError
from ridgeline.offload import host_link_bytes_per_s, placed_layers
from ridgeline.params import layer_params
from ridgeline.units import GIB

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment

FLAG = "--cpu-offload-gb"
READ_OP = "cpu-offloaded weights"  # step_cost's operator for the host-link read


@dataclass(frozen=True)
class CpuOffload:
    """``bytes_per_gpu`` of layer weights each GPU keeps in host memory (--cpu-offload-gb × 2³⁰:
    vLLM reads the flag as GiB), read over a host link of ``link_bytes_per_s`` (None: the
    card's own, ``host_link_bytes_per_s``)."""

    bytes_per_gpu: float
    link_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        if not self.bytes_per_gpu > 0:
            raise InputError(f"{FLAG} takes the GiB of weights each GPU keeps in host memory, "
                             f"more than 0; got {self.bytes_per_gpu / GIB:g}")
        if self.link_bytes_per_s is not None and not self.link_bytes_per_s > 0:
            raise InputError("the host link must be positive")


def cpu_offload_problem(engine: str, version: str | None, data_parallel_size: int) -> str:
    """Why ``engine`` at ``version`` (None: the newest modelled) cannot run --cpu-offload-gb as
    ridgeline models it, or ""."""
    from ridgeline.datafiles import engine_defaults
    from ridgeline.vllm_memory import parse_version, vllm_accounting

    if engine == "sglang":  # its --cpu-offload-gb (OffloaderV1) is a flag of its own
        return f"SGLang's {FLAG} is not modelled (vLLM's is: --engine vllm)"
    if engine != "vllm":
        return (f"{FLAG} is vLLM's (and SGLang's); {engine} keeps every weight on the GPU"
                + (" (llama.cpp's split is -ngl and --n-cpu-moe)" if engine.startswith("llama.cpp")
                   else ""))
    rule = engine_defaults("vllm")["cpu_offload"]
    if version is not None:
        asked = parse_version(version)
        if asked < parse_version(rule["since"]):
            return f"vLLM {version} has no {FLAG}: it came in v{rule['since']} (PR #6496)"
        v1 = vllm_accounting(version).engine == "V1"  # V1 the default from 0.8, bar "… V0"
        if v1 and asked < parse_version(rule["v1_from"]):
            return (f"vLLM {version} runs {FLAG} on the V0 engine, falling back from V1 "
                    f"(V1 offloads from v{rule['v1_from']}): give --engine-version "
                    f"'{version} V0', or {rule['v1_from']} or later")
    if data_parallel_size > 1:
        return f"{FLAG} with --data-parallel-size is not modelled"
    return ""


def layer_weight_bytes_per_gpu(dep: Deployment) -> float:
    """The decoder layers' weights one GPU holds, the most --cpu-offload-gb can move: every
    layer's weights over the TP × PP GPUs (each stage offloads its own layers)."""
    total = 0.0
    for layer, _where, count in placed_layers(dep):
        for category, n in layer_params(dep.model, layer).items():
            total += count * n * dep.weights.format_of(category).bytes_per_weight
    return total / dep.rank_gpus


def offloaded_bytes_per_gpu(dep: Deployment) -> float:
    """The weights each GPU keeps in host memory: the GiB asked, or every layer's where the
    budget is larger (vLLM stops there, the embeddings and LM head on the GPU). 0: none."""
    if dep.cpu_offload is None:
        return 0.0
    return min(dep.cpu_offload.bytes_per_gpu, layer_weight_bytes_per_gpu(dep))


def offload_read_time_s(dep: Deployment) -> float:
    """The host-link read of one step: each GPU's offloaded bytes ÷ its link, once per
    pipeline stage (the stages run one after another; a stage's TP GPUs read at once, each
    over its own link). 4 GiB at an H100 SXM's PCIe 5.0 (64 GB/s): about 67 ms a step."""
    if dep.cpu_offload is None:
        return 0.0
    link = host_link_bytes_per_s(dep.accelerator, dep.cpu_offload.link_bytes_per_s)
    return dep.pipeline_parallel_size * offloaded_bytes_per_gpu(dep) / link


def cpu_offload_caution(dep: Deployment) -> str:
    """What a deployment with --cpu-offload-gb should be read with, or ""."""
    if dep.cpu_offload is None:
        return ""
    moved = offloaded_bytes_per_gpu(dep)
    link = host_link_bytes_per_s(dep.accelerator, dep.cpu_offload.link_bytes_per_s)
    text = (f"{FLAG}: {moved / GIB:,.2f} GiB of each GPU's weights live in pinned host memory "
            f"and every step reads them over the host link ({link / 1e9:,.0f} GB/s: "
            f"{offload_read_time_s(dep) * 1e3:,.1f} ms a step, counted once; a prompt step's "
            "matmuls may read them more than once)")
    if moved < dep.cpu_offload.bytes_per_gpu:
        text += (f"; {dep.cpu_offload.bytes_per_gpu / GIB:g} GiB asked is more than the layers' "
                 f"{moved / GIB:,.2f} GiB a GPU: vLLM offloads every layer and stops")
    return text + ("; releases before 0.29 ignore the flag where they pick Model Runner V2 "
                   "(vLLM issue #51396)")


def cpu_offload_from_args(args: Any, engine: str | None, data_parallel_size: int) -> Any:
    """The CpuOffload --cpu-offload-gb (and --host-link-gbs) ask for, or None; refused where
    vLLM does not run it (cpu_offload_problem)."""
    gib = getattr(args, "cpu_offload_gb", None)
    if not gib:
        return None
    problem = cpu_offload_problem(engine or "vllm", getattr(args, "engine_version", None),
                                  data_parallel_size)
    if problem:
        raise InputError(problem)
    link = getattr(args, "host_link_gbs", None)
    return CpuOffload(gib * GIB, link * 1e9 if link else None)
