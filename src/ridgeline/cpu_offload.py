"""vLLM's --cpu-offload-gb: some of each GPU's layer weights in pinned host memory.

vLLM moves the parameters of its decoder layers to pinned host memory, one by one, until
each GPU has given up the GiB asked (engines.json vllm.cpu_offload.rule): embeddings and the
LM head stay. Those bytes leave the GPU's weights, so its KV cache pool gains them. They do
not leave the forward pass: since v0.8.4 the GPU's kernels read them over the host link
through a UVA view (V0 copied each layer in before running it), so every step, decode or
prompt, moves them across PCIe once more (read in place, an MoE layer's routed experts only
where the step routes to them). The floor reads that share over the link instead of from HBM;
the expectation (step_cost) adds the link's time and leaves the matmuls' HBM reads whole, a few
per cent over (HBM is tens of times faster than PCIe). vLLM counts GiB per runtime device: an
MI250X card, two devices, offloads twice the flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ridgeline.errors import InputError
from ridgeline.moe import expected_experts_touched
from ridgeline.offload import host_link_bytes_per_s, placed_layers
from ridgeline.parallel import node_size
from ridgeline.params import layer_params
from ridgeline.quantization import ROUTED
from ridgeline.stages import stage_layers
from ridgeline.units import GIB

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.model import Layer

FLAG = "--cpu-offload-gb"
READ_OP = "cpu-offloaded weights"  # step_cost's operator for the host-link read


@dataclass(frozen=True)
class CpuOffload:
    """``bytes_per_gpu`` of layer weights each GPU keeps in host memory (--cpu-offload-gb × 2³⁰:
    vLLM reads the flag as GiB), read over a host link of ``link_bytes_per_s`` (None: the
    card's own, ``host_link_bytes_per_s``)."""

    bytes_per_gpu: float
    link_bytes_per_s: float | None = None
    # V1 (v0.8.4+) kernels read the host copy in place through a UVA view, so an MoE step
    # pulls only the experts it routes to; V0 copies each offloaded layer in whole
    in_place: bool = True

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


def runner_problem(dep: Deployment, version: str | None) -> str:
    """Why vLLM ``version`` ignores --cpu-offload-gb for ``dep``, or "": a release before
    runner_v2_from (0.29) that runs the model on Model Runner V2 never installs the offloader
    (engines.json runner_v2_note), so every weight stays on the GPU."""
    from ridgeline.datafiles import engine_defaults
    from ridgeline.vllm_memory import model_runner, parse_version, vllm_accounting

    if dep.cpu_offload is None or version is None:  # None: the newest modelled release
        return ""
    since = str(engine_defaults("vllm")["cpu_offload"]["runner_v2_from"])
    if parse_version(version) >= parse_version(since):
        return ""
    if model_runner(dep, vllm_accounting(version)) != "MRV2":
        return ""
    return (f"vLLM {version} runs {dep.model.name} on Model Runner V2, which ignores {FLAG} "
            f"before v{since} (vLLM issue #51396): every weight would stay on the GPU; give "
            f"--engine-version {since} or later")


def layer_weight_bytes(dep: Deployment, layer: Layer, categories: tuple[str, ...] = ()) -> float:
    """One decoder layer's weights (or only those of ``categories``) over all its GPUs."""
    return sum(n * dep.weights.format_of(category).bytes_per_weight
               for category, n in layer_params(dep.model, layer).items()
               if not categories or category in categories)


def layer_weight_bytes_per_gpu(dep: Deployment, categories: tuple[str, ...] = ()) -> float:
    """The decoder layers' weights one GPU holds, the most --cpu-offload-gb can move: every
    layer's weights (or only those of ``categories``) over the TP × PP GPUs (each stage
    offloads its own layers)."""
    total = sum(count * layer_weight_bytes(dep, layer, categories)
                for layer, _where, count in placed_layers(dep))
    return total / dep.rank_gpus


@dataclass(frozen=True)
class OffloadedSplit:
    """The bytes one GPU keeps in host memory (averaged over the pipeline stages), split into
    the routed experts' (read only where a step routes to them) and everything else's."""

    routed_bytes: float
    other_bytes: float


@lru_cache(maxsize=256)
def offloaded_split_per_gpu(dep: Deployment) -> OffloadedSplit:
    """Spend each GPU's offloaded bytes over its stage's decoder layers from the first up, as
    vLLM's maybe_offload_to_cpu does in make_layers order (a layer's attention before its
    MLP, so its non-routed weights go first). DeepSeek-V3 on 8 H200s at 2 GiB: layers 0-2,
    dense, whole, then the rest from layers 3 and 4; the model-wide mix would be ~97% experts."""
    budget = offloaded_bytes_per_gpu(dep)
    tp = dep.tensor_parallel_size
    layers = dep.model.layers
    routed = other = 0.0
    start = 0
    for count in stage_layers(len(layers), dep.pipeline_parallel_size):
        left = budget
        for layer in layers[start:start + count]:
            if left <= 0:
                break
            layer_routed = layer_weight_bytes(dep, layer, ROUTED) / tp
            layer_other = layer_weight_bytes(dep, layer) / tp - layer_routed
            took_other = min(left, layer_other)
            took_routed = min(left - took_other, layer_routed)
            other += took_other
            routed += took_routed
            left -= took_other + took_routed
        start += count
    stages = dep.pipeline_parallel_size
    return OffloadedSplit(routed / stages, other / stages)


def touched_share(dep: Deployment, tokens: float) -> float:
    """The share of an MoE layer's routed experts a step over ``tokens`` tokens reads
    (Qwen3-30B-A3B at one token: 8 of 128)."""
    moe = dep.model.moe
    if moe is None:
        return 1.0
    return expected_experts_touched(moe.num_experts, moe.experts_per_token, tokens) / moe.num_experts


def offloaded_bytes_per_gpu(dep: Deployment) -> float:
    """The weights each GPU keeps in host memory: the GiB asked, or every layer's where the
    budget is larger (vLLM stops there, the embeddings and LM head on the GPU). 0: none."""
    if dep.cpu_offload is None:
        return 0.0
    return min(asked_bytes_per_gpu(dep), layer_weight_bytes_per_gpu(dep))


def asked_bytes_per_gpu(dep: Deployment) -> float:
    """The GiB asked of each card: vLLM offloads them per runtime device, so a card the
    runtime lists as two (an MI250X's two GCDs) gives up twice the flag's amount."""
    if dep.cpu_offload is None:
        return 0.0
    return dep.cpu_offload.bytes_per_gpu * dep.accelerator.runtime_devices


def offloaded_bytes(dep: Deployment) -> float:
    """The weights every GPU of ``dep`` together keeps in host memory."""
    return offloaded_bytes_per_gpu(dep) * dep.num_gpus


def offload_read_share(dep: Deployment, tokens: float | None = None) -> float:
    """The share of the offloaded bytes a step over ``tokens`` tokens moves over the link
    (None: the most, every expert): offload_read_bytes_per_gpu ÷ the offloaded bytes."""
    moved = offloaded_bytes_per_gpu(dep)
    return offload_read_bytes_per_gpu(dep, tokens) / moved if moved else 1.0


def offload_read_bytes_per_gpu(dep: Deployment, tokens: float | None = None) -> float:
    """What one GPU's step over ``tokens`` tokens (None: every expert) reads of its offloaded
    bytes. Read in place (V1's UVA view), an MoE layer's routed experts cross the link only
    where the step routes to them: other + routed × experts touched ÷ experts, over the
    layers vLLM offloaded first (offloaded_split_per_gpu). Copied in whole (V0), or a dense
    model: all of it."""
    if dep.cpu_offload is None or not dep.cpu_offload.in_place or dep.model.moe is None \
            or tokens is None:
        return offloaded_bytes_per_gpu(dep)
    split = offloaded_split_per_gpu(dep)
    return split.other_bytes + split.routed_bytes * touched_share(dep, tokens)


def hbm_spared_bytes(dep: Deployment, other_read_bytes: float, routed_read_bytes: float) -> float:
    """Of a step's decoder-layer weight reads (``routed_read_bytes`` of the routed experts,
    ``other_read_bytes`` of the rest), those in host memory, read over the link instead of
    HBM: each part × the share of it offloaded (offloaded_split_per_gpu ÷ the layers')."""
    if dep.cpu_offload is None:
        return 0.0
    split = offloaded_split_per_gpu(dep)
    routed_layers = layer_weight_bytes_per_gpu(dep, ROUTED)
    other_layers = layer_weight_bytes_per_gpu(dep) - routed_layers
    spared = split.other_bytes / other_layers * other_read_bytes if other_layers else 0.0
    if routed_layers:
        spared += split.routed_bytes / routed_layers * routed_read_bytes
    return spared


def offload_read_bytes(dep: Deployment, tokens: float | None = None) -> float:
    """What one step moves over the host links of one tensor-parallel rank: each GPU's
    read (offload_read_bytes_per_gpu), once per pipeline stage
    (the stages run one after another)."""
    return dep.pipeline_parallel_size * offload_read_bytes_per_gpu(dep, tokens)


def offload_read_time_s(dep: Deployment, tokens: float | None = None) -> float:
    """The host-link read of one step over ``tokens`` tokens (None: every expert):
    offload_read_bytes ÷ the link (a stage's TP GPUs read at once, each over its own link).
    4 GiB at an H100 SXM's PCIe 5.0 (64 GB/s): about 67 ms a step."""
    if dep.cpu_offload is None:
        return 0.0
    link = host_link_bytes_per_s(dep.accelerator, dep.cpu_offload.link_bytes_per_s)
    return offload_read_bytes(dep, tokens) / link


def host_memory_problem(dep: Deployment, host_memory_bytes: float | None) -> str:
    """Why a host (--host-memory-gib, each node's RAM; None: not given) cannot pin what its
    GPUs offload, or "": the offloaded bytes of one node's GPUs together must fit in its RAM
    (405B at TP8 x PP2 on 16 H100s pins 8 GPUs' share on each of its two hosts)."""
    if dep.cpu_offload is None or host_memory_bytes is None:
        return ""
    gpus = min(dep.num_gpus, node_size(dep.accelerator))
    pinned = gpus * offloaded_bytes_per_gpu(dep)
    if pinned <= host_memory_bytes:
        return ""
    return (f"does not fit: {FLAG} pins {pinned / GIB:,.1f} GiB of weights in each host's "
            f"memory ({gpus} GPUs a node x {offloaded_bytes_per_gpu(dep) / GIB:,.2f} GiB), "
            f"more than the host's {host_memory_bytes / GIB:,.1f} GiB (--host-memory-gib)")


def cpu_offload_note(dep: Deployment) -> str:
    """The deployment line's mention of --cpu-offload-gb: '; 20.00 GiB a GPU of weights in
    host memory (--cpu-offload-gb)', or "" without it."""
    if dep.cpu_offload is None:
        return ""
    return f"; {offloaded_bytes_per_gpu(dep) / GIB:,.2f} GiB a GPU of weights in host memory ({FLAG})"


def cpu_offload_json(dep: Deployment) -> dict[str, Any]:
    """--json's ``cpu_offload`` object, {} without the flag (so the key is left out): the
    bytes each GPU offloads and was asked to, the host link, and a step's read over it (the
    most: an MoE step read in place reads only its routed experts)."""
    if dep.cpu_offload is None:
        return {}
    return {"cpu_offload": {
        "bytes_per_gpu": offloaded_bytes_per_gpu(dep),
        "asked_bytes_per_gpu": asked_bytes_per_gpu(dep),
        "link_bytes_per_s": host_link_bytes_per_s(dep.accelerator,
                                                  dep.cpu_offload.link_bytes_per_s),
        "max_read_time_s": offload_read_time_s(dep),
        "read_in_place": dep.cpu_offload.in_place}}


def cpu_offload_caution(dep: Deployment) -> str:
    """What a deployment with --cpu-offload-gb should be read with, or ""."""
    if dep.cpu_offload is None:
        return ""
    moved = offloaded_bytes_per_gpu(dep)
    link = host_link_bytes_per_s(dep.accelerator, dep.cpu_offload.link_bytes_per_s)
    routed = offload_read_share(dep, 1) < 1  # read in place: only the experts routed to
    text = (f"{FLAG}: {moved / GIB:,.2f} GiB of each GPU's weights live in pinned host memory "
            f"and every step reads them over the host link ({link / 1e9:,.0f} GB/s: "
            f"{'up to ' if routed else ''}{offload_read_time_s(dep) * 1e3:,.1f} ms a step, "
            "counted once; a prompt step's matmuls may read them more than once"
            + ("; an MoE step reads only the experts it routes to" if routed else "") + ")")
    if moved < asked_bytes_per_gpu(dep):
        text += (f"; {asked_bytes_per_gpu(dep) / GIB:g} GiB asked is more than the layers' "
                 f"{moved / GIB:,.2f} GiB a GPU: vLLM offloads every layer and stops")
    return text


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
    version = getattr(args, "engine_version", None)
    from ridgeline.vllm_memory import vllm_accounting

    in_place = version is None or vllm_accounting(version).engine != "V0"
    return CpuOffload(gib * GIB, link * 1e9 if link else None, in_place)
