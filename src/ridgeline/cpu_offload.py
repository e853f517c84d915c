"""vLLM's --cpu-offload-gb: some of each GPU's layer weights in pinned host memory.

vLLM moves the parameters of its decoder layers to pinned host memory, one by one and each
whole, while each GPU has given up less than the GiB asked (engines.json
vllm.cpu_offload.rule; cpu_offload_order), so the last one moved overshoots the ask by up to
its own size: embeddings and the LM head stay, and each pipeline stage spends the whole
budget on its own layers, so a stage whose layers hold less gives up all of them and no
more. Those bytes leave the GPU's weights, so its KV cache pool gains them. They do not
leave the forward pass: since v0.8.4 the GPU's kernels read them over the host link through
a UVA view (V0 copied each layer in before running it), so every step, decode or prompt,
moves them across PCIe once more (read in place, an MoE layer's routed experts only where
the step routes to them). The floor reads that share over the link instead of from HBM; the
expectation (step_cost) adds the link's time and leaves the matmuls' HBM reads whole, a few
per cent over (HBM is tens of times faster than PCIe). vLLM counts GiB per runtime device:
an MI250X card, two devices, offloads twice the flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ridgeline.cpu_offload_order import offload_walk
from ridgeline.errors import InputError
from ridgeline.moe import expected_experts_touched
from ridgeline.offload import host_link_bytes_per_s
from ridgeline.parallel import host_gpus
from ridgeline.params import layer_params
from ridgeline.quantization import ROUTED
from ridgeline.stages import Stage, pipeline_stages
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


def runner_problem(dep: Deployment, version: str | None, draft_method: str = "",
                   draft_algorithm: str = "") -> str:
    """Why vLLM ``version`` ignores --cpu-offload-gb for ``dep``, or "": a release before
    runner_v2_from (0.29) that runs the model on Model Runner V2 never installs the offloader
    (engines.json runner_v2_note), so every weight stays on the GPU. A drafter that sends the
    model to the V1 runner (vllm_memory.model_runner: ``draft_method`` a draft model or
    ngram, ``draft_algorithm`` eagle3 under pipeline parallelism) offloads there, as V1 does."""
    from ridgeline.datafiles import engine_defaults
    from ridgeline.vllm_memory import model_runner, parse_version, vllm_accounting

    if dep.cpu_offload is None or version is None:  # None: the newest modelled release
        return ""
    since = str(engine_defaults("vllm")["cpu_offload"]["runner_v2_from"])
    if parse_version(version) >= parse_version(since):
        return ""
    if model_runner(dep, vllm_accounting(version), draft_method, draft_algorithm) != "MRV2":
        return ""
    return (f"vLLM {version} runs {dep.model.name} on Model Runner V2, which ignores {FLAG} "
            f"before v{since} (vLLM issue #51396): every weight would stay on the GPU; give "
            f"--engine-version {since} or later")


def layer_weight_bytes(dep: Deployment, layer: Layer, categories: tuple[str, ...] = ()) -> float:
    """One decoder layer's weights (or only those of ``categories``) over all its GPUs."""
    return sum(n * dep.weights.format_of(category).bytes_per_weight
               for category, n in layer_params(dep.model, layer).items()
               if not categories or category in categories)


@dataclass(frozen=True)
class OffloadedSplit:
    """Bytes on one GPU of a pipeline stage, split into the routed experts' (read in place
    only where a step routes to them) and everything else's."""

    routed_bytes: float
    other_bytes: float

    @property
    def bytes(self) -> float:
        return self.routed_bytes + self.other_bytes


def layer_bytes_per_gpu(dep: Deployment, layer: Layer) -> OffloadedSplit:
    """One decoder layer's weights on one GPU of its stage, the most vLLM can move of it: its
    weights over the tensor-parallel ranks, plus what each rank keeps whole
    (``Deployment.layer_tp_copies_bytes``: routers, MLA's down-projections, K/V heads past
    their count), which vLLM offloads like any other parameter and counts as non-routed."""
    tp = dep.tensor_parallel_size
    routed = layer_weight_bytes(dep, layer, ROUTED) / tp
    whole = (layer_weight_bytes(dep, layer) + dep.layer_tp_copies_bytes(layer)) / tp
    return OffloadedSplit(routed, whole - routed)


@lru_cache(maxsize=256)
def stage_layer_bytes_per_gpu(dep: Deployment) -> tuple[OffloadedSplit, ...]:
    """Each pipeline stage's own decoder layers on one of its GPUs (layer_bytes_per_gpu,
    added up), first stage to last: the most --cpu-offload-gb can move there."""
    layers = dep.model.layers
    out = []
    for stage in pipeline_stages(dep):
        own = [layer_bytes_per_gpu(dep, layer)
               for layer in layers[stage.start:stage.start + stage.layers]]
        out.append(OffloadedSplit(sum(s.routed_bytes for s in own),
                                  sum(s.other_bytes for s in own)))
    return tuple(out)


@lru_cache(maxsize=256)
def stage_offloads(dep: Deployment) -> tuple[OffloadedSplit, ...]:
    """What one GPU of each pipeline stage keeps in host memory, first stage to last. Each
    stage's worker spends the whole asked budget on its own layers (vLLM's
    set_cpu_offload_max_bytes runs on every worker, make_layers builds only its stage's),
    from its first layer up, parameter by parameter in vLLM's order, each moved whole while
    the total is under the budget (cpu_offload_order.offload_walk): the GiB asked and up to
    one parameter more, or every layer of the stage where they hold less. DeepSeek-V3 on 8
    H200s at 2 GiB: layers 0-2, dense, then layer 3 whole and layer 4's attention, router,
    shared expert and routed experts' w13, 2.51 GiB; the model-wide mix would be ~97%
    experts. () without the flag."""
    if dep.cpu_offload is None:
        return ()
    budget = asked_bytes_per_gpu(dep)
    layers = dep.model.layers
    out = []
    for stage in pipeline_stages(dep):
        routed, other = offload_walk(dep, layers[stage.start:stage.start + stage.layers], budget)
        out.append(OffloadedSplit(routed, other))
    return tuple(out)


def stage_offloaded_bytes_per_gpu(dep: Deployment, stage: Stage) -> float:
    """What one GPU of ``stage`` keeps in host memory: its own layers, or the asked GiB and
    the rest of the tensor that crossed it. DeepSeek-V3 on TP8 x PP2 H200s at 40 GiB: its
    first stage's 31 layers hold less than that, so every one moves; its second's 30 hold
    more, so 40.23 GiB (an expert w13 of 896 MiB crosses the ask)."""
    if dep.cpu_offload is None:
        return 0.0
    return stage_offloads(dep)[stage.index].bytes


def touched_share(dep: Deployment, tokens: float) -> float:
    """The share of an MoE layer's routed experts a step over ``tokens`` tokens reads
    (Qwen3-30B-A3B at one token: 8 of 128)."""
    moe = dep.model.moe
    if moe is None:
        return 1.0
    return expected_experts_touched(moe.num_experts, moe.experts_per_token, tokens) / moe.num_experts


def offloaded_bytes_per_gpu(dep: Deployment) -> float:
    """The most any one GPU keeps in host memory (stage_offloads): the GiB asked and up to
    one parameter more, or every layer of its stage where the budget is larger (vLLM stops
    there, the embeddings and LM head on the GPU). 0: none."""
    return max((split.bytes for split in stage_offloads(dep)), default=0.0)


def asked_bytes_per_gpu(dep: Deployment) -> float:
    """The GiB asked of each card: vLLM offloads them per runtime device, so a card the
    runtime lists as two (an MI250X's two GCDs) gives up twice the flag's amount."""
    if dep.cpu_offload is None:
        return 0.0
    return dep.cpu_offload.bytes_per_gpu * dep.accelerator.runtime_devices


def offloaded_bytes(dep: Deployment) -> float:
    """The weights every GPU of ``dep`` together keeps in host memory: each stage's GPUs
    their stage's share."""
    gpus_a_stage = dep.num_gpus // dep.pipeline_parallel_size
    return gpus_a_stage * sum(split.bytes for split in stage_offloads(dep))


def offload_read_share(dep: Deployment, tokens: float | None = None) -> float:
    """The share of the offloaded bytes a step over ``tokens`` tokens moves over the link
    (None: the most, every expert): offload_read_bytes ÷ the offloaded bytes."""
    moved = offload_read_bytes(dep)
    return offload_read_bytes(dep, tokens) / moved if moved else 1.0


def stage_read_bytes(dep: Deployment, split: OffloadedSplit, tokens: float | None = None) -> float:
    """What one GPU of a stage that offloads ``split`` reads of it in a step over ``tokens``
    tokens (None: every expert). Read in place (V1's UVA view), an MoE layer's routed experts
    cross the link only where the step routes to them: other + routed × experts touched ÷
    experts. Copied in whole (V0), or a dense model: all of it."""
    if dep.cpu_offload is None or not dep.cpu_offload.in_place or dep.model.moe is None \
            or tokens is None:
        return split.bytes
    return split.other_bytes + split.routed_bytes * touched_share(dep, tokens)


def hbm_spared_bytes(dep: Deployment, other_read_bytes: float, routed_read_bytes: float) -> float:
    """Of a step's decoder-layer weight reads (``routed_read_bytes`` of the routed experts,
    ``other_read_bytes`` of the rest, the copies each TP rank keeps whole among them), those
    read over the link instead of HBM: each part × the share of it offloaded (the stages'
    offloads over their layers'). Read in place only: V0 copies each offloaded layer into
    HBM before running it, so its kernels read HBM as much as without the flag."""
    if dep.cpu_offload is None or not dep.cpu_offload.in_place:
        return 0.0
    offloads, layers = stage_offloads(dep), stage_layer_bytes_per_gpu(dep)
    routed_layers = sum(split.routed_bytes for split in layers)
    other_layers = sum(split.other_bytes for split in layers)
    spared = 0.0
    if other_layers:
        spared += sum(split.other_bytes for split in offloads) / other_layers * other_read_bytes
    if routed_layers:
        spared += sum(split.routed_bytes for split in offloads) / routed_layers \
            * routed_read_bytes
    return spared


def offload_read_bytes(dep: Deployment, tokens: float | None = None) -> float:
    """What one step moves over the host links of one tensor-parallel rank: each stage's
    read (stage_read_bytes), added up (the stages run one after another)."""
    return sum(stage_read_bytes(dep, split, tokens) for split in stage_offloads(dep))


def offload_read_time_s(dep: Deployment, tokens: float | None = None) -> float:
    """The host-link read of one step over ``tokens`` tokens (None: every expert):
    offload_read_bytes ÷ the link (a stage's TP GPUs read at once, each over its own link).
    Llama-3.1-8B at 4 GiB (4.06 moved) on an H100 SXM's PCIe 5.0 (64 GB/s): about 68 ms a
    step."""
    if dep.cpu_offload is None:
        return 0.0
    link = host_link_bytes_per_s(dep.accelerator, dep.cpu_offload.link_bytes_per_s)
    return offload_read_bytes(dep, tokens) / link


def host_memory_problem(dep: Deployment, host_memory_bytes: float | None) -> str:
    """Why a host (--host-memory-gib, each host's RAM; None: not given) cannot pin what its
    GPUs offload, or "": the offloaded bytes of one host's GPUs together must fit in its RAM.
    A host holds ``host_gpus`` of them (8 in a DGX/HGX, 4 in a GB200 compute tray), the
    engine's ranks in order, tensor-parallel ranks innermost, so a host's GPUs may span two
    stages (405B at TP8 x PP2 on 16 H100s pins 8 GPUs' share on each of its two hosts)."""
    if dep.cpu_offload is None or host_memory_bytes is None:
        return ""
    per_stage = [split.bytes for split in stage_offloads(dep)]
    gpus_a_stage = dep.num_gpus // dep.pipeline_parallel_size
    on_gpu = [per_stage[gpu // gpus_a_stage] for gpu in range(dep.num_gpus)]
    gpus = min(dep.num_gpus, host_gpus(dep.accelerator))
    hosts = [on_gpu[first:first + gpus] for first in range(0, dep.num_gpus, gpus)]
    worst = max(hosts, key=sum)
    pinned = sum(worst)
    if pinned <= host_memory_bytes:
        return ""
    each = (f"{len(worst)} GPUs a host x {worst[0] / GIB:,.2f} GiB" if len(set(worst)) == 1
            else " + ".join(f"{worst.count(b)} x {b / GIB:,.2f} GiB" for b in dict.fromkeys(worst)))
    return (f"does not fit: {FLAG} pins {pinned / GIB:,.1f} GiB of weights in each host's "
            f"memory ({each}), more than the host's {host_memory_bytes / GIB:,.1f} GiB "
            "(--host-memory-gib)")


def _per_gpu_label(dep: Deployment) -> str:
    """'20.00 GiB a GPU', or with stages that offload differently, each stage's:
    '37.73, 40.00 GiB a GPU by stage'; '16.00 GiB a GPU (2 dies added)' on an MI250X, whose
    dies vLLM offloads the flag's 8 GiB from each (asked_bytes_per_gpu)."""
    per_stage = [split.bytes for split in stage_offloads(dep)]
    dies = _dies_added(dep)
    if len(set(per_stage)) == 1:
        return f"{per_stage[0] / GIB:,.2f} GiB a GPU{dies}"
    return ", ".join(f"{b / GIB:,.2f}" for b in per_stage) + f" GiB a GPU{dies} by stage"


def _dies_added(dep: Deployment) -> str:
    """' (2 dies added)' where vLLM runs each card as several devices, each offloading the
    flag's amount; '' otherwise."""
    from ridgeline.hardware import dies_added, engine_devices

    return dies_added(engine_devices(dep.engine, dep.accelerator))


def cpu_offload_note(dep: Deployment) -> str:
    """The deployment line's mention of --cpu-offload-gb: '; 20.00 GiB a GPU of weights in
    host memory (--cpu-offload-gb)', or "" without it."""
    if dep.cpu_offload is None:
        return ""
    return f"; {_per_gpu_label(dep)} of weights in host memory ({FLAG})"


def cpu_offload_json(dep: Deployment) -> dict[str, Any]:
    """--json's ``cpu_offload`` object, {} without the flag (so the key is left out): the
    bytes each GPU offloads (the most of any stage, and each stage's) and was asked to, the
    host link, and a step's read over it (the most: an MoE step read in place reads only its
    routed experts)."""
    if dep.cpu_offload is None:
        return {}
    return {"cpu_offload": {
        "bytes_per_gpu": offloaded_bytes_per_gpu(dep),
        "bytes_per_gpu_by_stage": [split.bytes for split in stage_offloads(dep)],
        "asked_bytes_per_gpu": asked_bytes_per_gpu(dep),
        "link_bytes_per_s": host_link_bytes_per_s(dep.accelerator,
                                                  dep.cpu_offload.link_bytes_per_s),
        "max_read_time_s": offload_read_time_s(dep),
        "read_in_place": dep.cpu_offload.in_place}}


def cpu_offload_caution(dep: Deployment) -> str:
    """What a deployment with --cpu-offload-gb should be read with, or ""."""
    if dep.cpu_offload is None:
        return ""
    link = host_link_bytes_per_s(dep.accelerator, dep.cpu_offload.link_bytes_per_s)
    routed = offload_read_share(dep, 1) < 1  # read in place: only the experts routed to
    per_stage = [split.bytes for split in stage_offloads(dep)]
    moved = (f"{per_stage[0] / GIB:,.2f} GiB" if len(set(per_stage)) == 1 else
             ", ".join(f"{b / GIB:,.2f}" for b in per_stage) + " GiB (stage by stage)")
    text = (f"{FLAG}: {moved}{_dies_added(dep)} of each GPU's weights live in pinned host memory "
            f"and every step reads them over the host link ({link / 1e9:,.0f} GB/s: "
            f"{'up to ' if routed else ''}{offload_read_time_s(dep) * 1e3:,.1f} ms a step, "
            "counted once; a prompt step's matmuls may read them more than once"
            + ("; an MoE step reads only the experts it routes to" if routed else "") + ")")
    asked = asked_bytes_per_gpu(dep)
    asked_text = f"{asked / GIB:g} GiB asked{_dies_added(dep)}"  # the flag's GiB a die, added
    if max(per_stage) > asked:  # the parameter that crossed the ask moved whole
        text += (f"; {asked_text}: vLLM moves each parameter whole, so the last "
                 "one moved carries it past the ask")
    stages = pipeline_stages(dep)
    short = [(stage, layers.bytes) for stage, layers in zip(stages, stage_layer_bytes_per_gpu(dep))
             if layers.bytes < asked]  # stages whose layers hold less than asked: all go
    if len(short) == len(stages):
        held = ("every stage's layers" if len({b for _, b in short}) > 1 else
                f"the layers' {short[0][1] / GIB:,.2f} GiB a GPU")
        text += f"; {asked_text} is more than {held}: vLLM offloads every layer and stops"
    elif short:
        which = ", ".join(str(stage.index + 1) for stage, _ in short)
        held = ", ".join(f"{b / GIB:,.2f}" for _, b in short)
        text += (f"; {asked_text} is more than the layers of stage"
                 f"{'s' if len(short) > 1 else ''} {which} hold ({held} GiB a GPU): vLLM "
                 "offloads every layer there and stops")
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
