"""llama.cpp partial offload: which weights live in host memory, and what reading them costs.

``-ngl N`` puts the output layer and the last N − 1 blocks of the GGUF on the GPU and the rest
in host memory (llama.cpp PR #18148, Dec 2025: the output layer goes first). Builds before it,
and the ik_llama.cpp fork, put the last N blocks there and the output layer only when N
exceeds the block count. ``-ngl 99`` is "everything" either way. The blocks are the repeating
layers and, last, the MTP blocks GLM-4.5's and Qwen3.5's GGUFs keep (gguf_blocks.py): those
take -ngl's first slots, so GLM-4.5's ``-ngl 93`` leaves its first layer on the host. The
token embeddings stay on the host whatever N is (a lookup of a few rows). ``--n-cpu-moe N``
keeps the routed experts of the first N layers on the host; ``--cpu-moe`` keeps them all. A
layer's KV cache lives with the layer.

A decode step walks the host's layers on the CPU and the GPU's on the GPU, one after the
other: the step is a sum, and the host's part is its bytes ÷ (rated host bandwidth × the
share llama.cpp's CPU matvecs reach). A prompt step of 32 tokens or more runs the host's
matmuls on the GPU instead, copying their weights over the host link once per ubatch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ridgeline.datafiles import load_data
from ridgeline.errors import DoesNotFit, InputError
from ridgeline.gguf_blocks import gguf_block_count, mtp_blocks
from ridgeline.layouts import ATTENTION_MIXERS, MOE
from ridgeline.params import layer_params
from ridgeline.quantization import EMBEDDING, ROUTED
from ridgeline.units import GIB, plural

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.hardware import Accelerator
    from ridgeline.model import Layer, ModelSpec

GPU, HOST, HOST_EXPERTS = "gpu", "host", "host experts"  # where a layer's weights live


def offload_constants() -> dict[str, Any]:
    """The llama.cpp offload block of engines.json: host share, op-offload batch, sources."""
    return dict(load_data("engines.json")["llama.cpp"]["offload"])


def host_bandwidth_share() -> float:
    """The share of rated host-memory bandwidth llama.cpp's CPU layers stream at."""
    return float(offload_constants()["host_bandwidth_share"])


def op_offload_min_batch() -> int:
    """Tokens in a step from which the CUDA backend runs host-resident matmuls on the GPU."""
    return int(offload_constants()["op_offload_min_batch"])


@dataclass(frozen=True)
class HostOffload:
    """Where llama.cpp keeps the weights: ``gpu_layers`` (-ngl) of the slots of the GGUF's
    blocks and the output layer on the GPU (the methods take the block count where it keeps
    MTP blocks, gguf_blocks.gguf_block_count; ``every_layer_ngl``: all of them), the routed
    experts of the first ``cpu_expert_layers`` (--n-cpu-moe) on the host, and the host's
    rated memory bandwidth and link to the GPU (None: the card's own link)."""

    gpu_layers: int
    cpu_expert_layers: int = 0
    host_bandwidth_bytes_per_s: float = 0.0
    link_bytes_per_s: float | None = None
    output_first: bool = True  # False: the rule before PR #18148 (and ik_llama.cpp's)
    host_memory_bytes: float | None = None  # the host's RAM, where given: its share must fit
    experts_last: bool = False  # the experts of the *last* N layers (--fit's choice)
    chosen_by_fit: bool = False  # placed by llama.cpp's --fit (llamacpp_fit.py) …
    fit_cells: int = 0  # … for this -c: llama-server allocates it, and no more

    def __post_init__(self) -> None:
        for name in ("gpu_layers", "cpu_expert_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InputError(f"{name.replace('_', ' ')} must be a whole number ≥ 0, "
                                 f"got {value!r}")
        if not self.host_bandwidth_bytes_per_s >= 0:
            raise InputError("the host's memory bandwidth must be positive")
        for name in ("link_bytes_per_s", "host_memory_bytes"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise InputError(f"the host's {name.replace('_bytes', '').replace('_', ' ')} "
                                 "must be positive")

    def check(self, model: ModelSpec, accelerator: Accelerator) -> None:
        """The split names experts this model has, on a GPU with memory of its own."""
        if self.cpu_expert_layers and model.moe is None:
            raise InputError(f"--n-cpu-moe keeps routed experts on the host; {model.name} has "
                             "none")
        if accelerator.one_memory:
            raise InputError(f"{accelerator.id}'s GPU and CPU share one memory: there is no "
                             "host memory to offload to (every layer is already in it)")
        if model.parallel_hybrid and self.moves_weights(model.num_layers,
                                                        gguf_block_count(model)):
            # llama.cpp's blocks are the config's layers; ridgeline's, two a layer
            raise InputError(f"llama.cpp places {model.name}'s {model.decoder_layers} layers "
                             "(-ngl, --fit), each attention beside Mamba-2, which ridgeline "
                             f"lists as {model.num_layers} blocks: a partial offload of a "
                             "parallel hybrid is not modelled (every layer on the GPU: -ngl -1)")

    def moves_weights(self, num_layers: int, blocks: int | None = None) -> bool:
        """Whether any weight stays in host memory (tok_embd aside); ``blocks``: the GGUF's
        block count where it keeps MTP blocks (gguf_block_count), which weigh nothing."""
        return (self.repeating_on_gpu(num_layers, blocks) < num_layers
                or not self.output_on_gpu(num_layers, blocks) or self.cpu_expert_layers > 0)

    def first_gpu_block(self, num_layers: int, blocks: int | None = None) -> int:
        """i_gpu_start: the first block -ngl puts on the GPU, of ``blocks`` (the GGUF's block
        count, MTP blocks included; None: ``num_layers``): blocks + 1 − ngl since PR #18148,
        blocks − ngl before (src/llama-model.cpp, load_tensors). GLM-4.5's 93 blocks at -ngl
        93: 1, its first layer on the host."""
        b = num_layers if blocks is None else blocks
        return max((b + 1 if self.output_first else b) - self.gpu_layers, 0)

    def repeating_on_gpu(self, num_layers: int, blocks: int | None = None) -> int:
        """How many of the repeating layers (the last ones) -ngl puts on the GPU: those from
        ``first_gpu_block`` on. 48 layers at -ngl 8: 7; GLM-4.5's 92 (93 blocks) at -ngl 93: 91."""
        return max(0, num_layers - self.first_gpu_block(num_layers, blocks))

    def mtp_on_gpu(self, num_layers: int, blocks: int | None = None) -> int:
        """How many of the MTP blocks (the GGUF's last, after the ``num_layers`` repeating
        ones) -ngl puts on the GPU: they are the first it takes after the output layer."""
        b = num_layers if blocks is None else blocks
        return max(0, b - max(num_layers, self.first_gpu_block(num_layers, blocks)))

    def layer_on_gpu(self, index: int, num_layers: int, blocks: int | None = None) -> bool:
        return index >= self.first_gpu_block(num_layers, blocks)

    def output_on_gpu(self, num_layers: int, blocks: int | None = None) -> bool:
        """Whether -ngl puts the output layer on the GPU: any -ngl since PR #18148, one past
        the block count before it."""
        b = num_layers if blocks is None else blocks
        return self.gpu_layers >= 1 if self.output_first else self.gpu_layers > b

    def placement(self, index: int, num_layers: int, blocks: int | None = None) -> str:
        if not self.layer_on_gpu(index, num_layers, blocks):
            return HOST
        first = num_layers - self.cpu_expert_layers if self.experts_last else 0
        return HOST_EXPERTS if first <= index < first + self.cpu_expert_layers else GPU

    def describe(self, model: ModelSpec) -> str:
        n, blocks, mtp = model.num_layers, gguf_block_count(model), mtp_blocks(model)
        on_gpu = self.repeating_on_gpu(n, blocks)
        if on_gpu == n and self.output_on_gpu(n, blocks):
            text = f"all {n} layers and the output layer on the GPU"
        else:
            text = f"-ngl {self.gpu_layers}: {on_gpu} of {n} layers on the GPU"
            if mtp and self.gpu_layers:
                text += (f" (-ngl counts the GGUF's {mtp} {plural(mtp, 'MTP block')} too, taken "
                         "first)")
            text += (", the output layer too" if self.output_on_gpu(n, blocks)
                     else ", the output layer on the host")
        if not self.output_first:
            text += " (the rule before llama.cpp PR #18148)"
        experts = len([i for i in range(n) if self.placement(i, n, blocks) == HOST_EXPERTS
                       and model.layers[i].ffn == MOE])
        if experts and self.chosen_by_fit:
            text += (", every expert on the host" if self.cpu_expert_layers >= n
                     else f", the experts of the last {experts} MoE layers on the host")
        elif experts:
            flag = ("--cpu-moe" if self.cpu_expert_layers >= n
                    else f"--n-cpu-moe {self.cpu_expert_layers}")
            text += f"; {flag}: the experts of {experts} MoE layers on the host"
        if self.chosen_by_fit:
            text = f"llama.cpp's --fit: {text}"
        return text


def every_layer_ngl(model: ModelSpec) -> int:
    """-ngl's default (-1): every block of the GGUF and the output layer, n_layer_all + 1
    (llama_model::n_gpu_layers, src/llama-model.cpp). Llama-3.1-70B: 81; GLM-4.5: 94."""
    return gguf_block_count(model) + 1


@lru_cache(maxsize=256)
def placed_layers(dep: Deployment) -> tuple[tuple[Layer, str, int], ...]:
    """Distinct (layer, where its weights live) and how many of each."""
    counts: dict[tuple[Layer, str], int] = {}
    layers = dep.model.layers
    blocks = gguf_block_count(dep.model)
    for i, layer in enumerate(layers):
        where = GPU if dep.offload is None else dep.offload.placement(i, len(layers), blocks)
        if where == HOST_EXPERTS and layer.ffn != MOE:
            where = GPU
        counts[(layer, where)] = counts.get((layer, where), 0) + 1
    return tuple((layer, where, count) for (layer, where), count in counts.items())


def placement_lines(deps: Sequence[Deployment]) -> list[str]:
    """A comparison's lines on where each card keeps its weights: none if every card keeps
    them all."""
    lines = [f"  {d.accelerator.id}: {d.offload.describe(d.model)}" for d in deps
             if d.offload is not None]
    return ["", "where the weights live:", *lines] if lines else []


def on_host(where: str, op: str) -> bool:
    """Whether an operator of a layer placed ``where`` reads host memory."""
    return where == HOST or (where == HOST_EXPERTS and op == "experts")


def output_on_host(dep: Deployment) -> bool:
    return dep.offload is not None and not dep.offload.output_on_gpu(
        dep.model.num_layers, gguf_block_count(dep.model))


@lru_cache(maxsize=256)
def host_weight_parts(dep: Deployment) -> tuple[float, float]:
    """Bytes of weights in host memory in two parts: the host's layers (and host experts), and
    what lies outside the layers there — the output layer and final norm when the output
    stays on the host, and (with any offload, untied) the token embeddings."""
    if dep.offload is None:
        return 0.0, 0.0
    host = layers = 0.0
    for layer, where, count in placed_layers(dep):
        for category, n in layer_params(dep.model, layer).items():
            nbytes = count * n * dep.weights.format_of(category).bytes_per_weight
            layers += nbytes
            if where == HOST or (where == HOST_EXPERTS and category in ROUTED):
                host += nbytes
    outside = dep.weight_bytes - layers  # embeddings, output layer, final norm
    if output_on_host(dep):
        return host, outside
    tied = dep.model.tie_word_embeddings  # a tied output layer is the embedding table
    return host, (0.0 if tied else dep.bytes_by_category[EMBEDDING])


def host_weight_bytes(dep: Deployment) -> float:
    """Bytes of weights in host memory: the host's layers, host experts, the output layer
    when it stays there, and (with any offload) the token embeddings."""
    layers, outside = host_weight_parts(dep)
    return layers + outside


def check_host_memory(dep: Deployment, cache_bytes: float = 0.0, cells: int = 0) -> None:
    """Refuse a split whose host share, its weights and ``cache_bytes`` of its layers' cache
    (``cells`` cells of -c), overflows the host's RAM, where given."""
    o = dep.offload
    if o is None or o.host_memory_bytes is None:
        return
    weights = host_weight_bytes(dep)
    if weights + cache_bytes > o.host_memory_bytes:
        held = f"{weights / GIB:,.1f} GiB of weights" + (
            f" and {cache_bytes / GIB:,.1f} GiB of KV cache ({cells:,} cells)" if cells else "")
        raise DoesNotFit(f"does not fit: {held} stay in host memory, more than the host's "
                         f"{o.host_memory_bytes / GIB:,.1f} GiB")

def gpu_weight_bytes(dep: Deployment) -> float:
    """Bytes of weights on the GPUs: all of them for a serving engine, with the copies its
    tensor-parallel ranks keep (``Deployment.tp_copies_bytes``); llama.cpp keeps the
    token embeddings on the CPU even with every layer offloaded (its log's 'CPU_Mapped model
    buffer', 281.81 MiB for a Llama-3-8B Q4_K_M: 128,256 × 4,096 at Q4_K)."""
    on_gpus = dep.weight_bytes + dep.tp_copies_bytes  # what each TP rank keeps whole, too
    if dep.cpu_offload is not None:  # vLLM's --cpu-offload-gb: some layers in host memory
        from ridgeline.cpu_offload import offloaded_bytes

        on_gpus -= offloaded_bytes(dep)
    if dep.offload is not None:
        return on_gpus - host_weight_bytes(dep)
    if dep.engine.startswith("llama.cpp") and not dep.model.tie_word_embeddings:
        return on_gpus - dep.bytes_by_category[EMBEDDING]
    return on_gpus


def gpu_share(dep: Deployment, mixers: tuple[str, ...] = ATTENTION_MIXERS) -> float:
    """The share of the layers with these mixers (and so of their cache) kept on the GPU:
    a layer's cache lives with it."""
    layers = [(where, count) for layer, where, count in placed_layers(dep)
              if layer.mixer in mixers]
    total = sum(count for _, count in layers)
    if not total:
        return 1.0
    return sum(count for where, count in layers if where != HOST) / total


def gpu_attention_share(dep: Deployment) -> float:
    """The share of the attention layers (and so of the KV cache) kept on the GPU."""
    return gpu_share(dep)


# the host link of a card whose record names another link (an NVLink bridge, an SXM board):
# PCIe x16 of its architecture's generation, per direction, rated (3.0: 15.75 GB/s, 4.0: 31.5,
# 5.0: 63; rounded as the catalog's PCIe records are)
HOST_LINK_BY_FAMILY = {
    "volta": 16e9, "turing": 16e9,
    "ampere": 32e9, "ada": 32e9, "cdna2": 32e9, "rdna3": 32e9, "xe-hpg": 32e9, "xe2-hpg": 32e9,
    "hopper": 64e9, "blackwell": 64e9, "cdna3": 64e9, "cdna4": 64e9, "rdna4": 64e9,
}


# llmfit PR #755 (validation/offload.csv OF-llmfit755-*): Qwen3-30B-A3B Q4_K_M with
# --n-cpu-moe 36 on an RTX 2080 and quad-channel DDR4 decoded at 36.7 tok/s where the dense
# layers' host share predicts 50.1 (54.9 before the 2026-12-01 refit): a CPU reads many small
# experts less well than whole layers
EXPERT_OFFLOAD_CAUTION = ("experts on the host are priced like whole layers streamed from its "
                          "memory; the one published run with its host stated (llmfit #755, "
                          "Qwen3-30B-A3B --n-cpu-moe 36 on an RTX 2080) decoded about a quarter "
                          "slower than this predicts: read the expectation as optimistic")


def offload_caution(dep: Deployment) -> str:
    """What the expectation of this split (or of vLLM's --cpu-offload-gb) leaves out, or ""."""
    if dep.cpu_offload is not None:
        from ridgeline.cpu_offload import cpu_offload_caution

        return cpu_offload_caution(dep)
    experts = any(where == HOST_EXPERTS for _, where, _ in placed_layers(dep))
    return EXPERT_OFFLOAD_CAUTION if experts else ""


def link_bytes_per_s(dep: Deployment) -> float:
    """The host-to-GPU link: the one given, else the card's PCIe record, else PCIe x16 of
    its architecture's generation."""
    assert dep.offload is not None
    return host_link_bytes_per_s(dep.accelerator, dep.offload.link_bytes_per_s)


def host_link_bytes_per_s(acc: Accelerator, given: float | None = None) -> float:
    """The host-to-GPU link of one ``acc``: ``given`` (--host-link-gbs), else its PCIe record,
    else PCIe x16 of its architecture's generation (an H100 SXM: 64 GB/s, PCIe 5.0)."""
    if given:
        return given
    if (acc.link_kind or "").startswith("pcie") and acc.link_bytes_per_s:
        return acc.link_bytes_per_s
    if acc.family in HOST_LINK_BY_FAMILY:
        return HOST_LINK_BY_FAMILY[acc.family]
    raise InputError(f"{acc.id} records no PCIe link to its host: give --host-link-gbs "
                     "(e.g. 25 for PCIe 4.0 x16)")


def offload_json(dep: Deployment) -> dict[str, Any] | None:
    """--json's ``offload`` object for llama.cpp's layers in host memory (-ngl, --n-cpu-moe,
    --fit), None without a split: the placement in words (the text's deployment line) and as
    keys, the weights on the host, the host memory's bandwidth (None: not given) and the
    host-to-GPU link. Qwen3-30B-A3B q4_k_m on an RTX 4090 at -ngl 30: 29 of 48 layers on
    the GPU, the output layer too, host memory 76.8 GB/s."""
    o = dep.offload
    if o is None:
        return None
    n, blocks = dep.model.num_layers, gguf_block_count(dep.model)
    return {"placement": o.describe(dep.model), "gpu_layers": o.gpu_layers,
            "layers_on_gpu": o.repeating_on_gpu(n, blocks), "num_layers": n,
            "output_on_gpu": o.output_on_gpu(n, blocks),
            "cpu_expert_layers": o.cpu_expert_layers, "experts_last": o.experts_last,
            "chosen_by_fit": o.chosen_by_fit, "host_weight_bytes": host_weight_bytes(dep),
            "host_bandwidth_bytes_per_s": o.host_bandwidth_bytes_per_s or None,
            "link_bytes_per_s": link_bytes_per_s(dep)}
