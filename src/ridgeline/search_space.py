"""The planner's search space: every card, weight format, KV dtype, tensor × pipeline layout,
engine knobs and expert parallelism ``plan`` sizes a replica for, a MoE's data-parallel
attention layouts (``data_parallel_space``), and the layouts the closest miss is looked for
over (``closest_miss``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ridgeline.candidate import (
    kv_choices,
    replica_build,
    replica_deployment,
    served_choice,
    weight_choices,
)
from ridgeline.data_parallel import DATA_PARALLEL_ENGINES
from ridgeline.engine_platforms import engine_floor_problem, fp8_unpriced
from ridgeline.errors import InputError
from ridgeline.hardware import Accelerator, resolve_accelerator
from ridgeline.model import ModelSpec
from ridgeline.parallel import node_size
from ridgeline.quantization_gates import (
    capability_problem,
    deployment_problem,
    single_rank_checkpoint,
)
from ridgeline.vllm_gpu_floors import gpu_floor_problem

# (max_num_seqs, max_num_batched_tokens) tried per configuration, None the engine's default:
# fewer seats bound the batch (and TPOT); a smaller token budget cuts prefill chunks, so
# decodes stall less behind long prompts, at the price of a lower steady-state batch.
ENGINE_KNOBS: tuple[tuple[int | None, int | None], ...] = ((None, None), (64, None), (None, 2048))



def search_space(model: ModelSpec, gpus: Sequence[str], max_gpus: int, engine: str = "vllm",
                 version: str | None = None
                 ) -> Iterable[tuple[str, int, int, str, str, tuple[int | None, int | None],
                                     bool]]:
    """Every weight format and KV dtype ``engine`` runs on each card, as ``decode``, ``fit``
    and ``simulate`` take them: a card without fp8 matmul units (A100) runs fp8 weights
    weight-only (W8A16, through FP8 Marlin) and an fp8 cache widened to 16 bits in attention
    (vLLM's FlashInfer and Triton backends), step_cost pricing their matmuls at the 16-bit
    rate on half the bytes; a pair the engine runs on no such card (TensorRT-LLM's fp8 before
    Ada) is left out (``_engine_runs``, at ``version``: vLLM's fp8 cache on a T4 runs in 0.12
    to 0.23 only); bf16 is fp16 on a card without bf16 matmuls (``served_choice``: T4, V100)."""
    formats = weight_choices(model)
    for gpu in gpus:
        acc = resolve_accelerator(gpu)
        node = node_size(acc)
        for weights in (served_choice(w, acc) for w in formats):
            for kv in (served_choice(k, acc) for k in kv_choices(model, engine)):
                if not offered(acc, weights, kv) \
                        or not _engine_runs(model, acc, weights, kv, engine, version):
                    continue
                for tp, pp in layouts(node, max_gpus,
                                      not single_rank_checkpoint(model, engine)):
                    for knobs in ENGINE_KNOBS:
                        for ep in (False, True) if model.moe and tp > 1 else (False,):
                            yield acc.id, tp, pp, weights, kv, knobs, ep




def offered(acc: Accelerator, weights: str, kv: str) -> bool:
    """Whether plan offers fp8 ``weights`` or an fp8 ``kv`` cache on ``acc``: not on a card of
    engine_platforms.FP8_PEAK_ONLY_VENDORS whose catalog lists no fp8 peak (a TPU v6e: bf16
    and int8; ``fp8_unpriced``, the rule fit, decode, kv and page share); every other pair is
    the engine's to refuse (``_engine_runs``)."""
    lacks = fp8_unpriced(acc)
    return not (lacks and (weights.startswith("fp8") or kv.startswith("fp8")))


# the GPUs a data-parallel rank's attention runs on: one (MLA's cache is whole on every
# tensor-parallel GPU, so each rank of one holds the most), or two (a GQA cache of few KV
# heads still splits over two)
RANK_TENSOR_PARALLEL = (1, 2)


def data_parallel_space(model: ModelSpec, gpus: Sequence[str], max_gpus: int,
                        engine: str = "vllm", version: str | None = None
                        ) -> Iterable[tuple[str, int, str, str, tuple[int | None, int | None],
                                            int]]:
    """A MoE's data-parallel attention layouts on ``engine`` (vLLM's --data-parallel-size
    with --enable-expert-parallel, SGLang's --dp-size --enable-dp-attention with --ep-size):
    (card, a rank's TP, weights, KV dtype, knobs, ranks), the experts spread whole over every
    GPU (EP). Each rank keeps its own requests' cache, so a cache TP copies (MLA's) holds
    ranks times the conversations. A replica stays inside one node (``data_parallel_layouts``);
    none for a dense model, whose ranks are plain replicas, or an engine without it."""
    if not model.moe or engine not in DATA_PARALLEL_ENGINES:
        return
    formats = weight_choices(model)
    for gpu in gpus:
        acc = resolve_accelerator(gpu)
        for weights in (served_choice(w, acc) for w in formats):
            for kv in (served_choice(k, acc) for k in kv_choices(model, engine)):
                if not offered(acc, weights, kv) \
                        or not _engine_runs(model, acc, weights, kv, engine, version):
                    continue
                for tp, ranks in data_parallel_layouts(node_size(acc), max_gpus):
                    for knobs in ENGINE_KNOBS:
                        yield acc.id, tp, weights, kv, knobs, ranks


def data_parallel_layouts(node: int, max_gpus: int) -> list[tuple[int, int]]:
    """(a rank's TP, ranks) for a replica of 2, 4, 8 … GPUs within one node and ``max_gpus``,
    at least two ranks each, fewest GPUs first: on 8-GPU nodes (1, 2), (1, 4), (2, 2),
    (1, 8), (2, 4). A replica over nodes is left out: each engine launches one with its own
    multi-node data-parallel flags."""
    out = []
    gpus = 2
    while gpus <= min(node, max_gpus):
        out += [(tp, gpus // tp) for tp in RANK_TENSOR_PARALLEL if gpus // tp >= 2]
        gpus *= 2
    return out


def _engine_runs(model: ModelSpec, acc: Accelerator, weights: str, kv: str, engine: str,
                 version: str | None = None) -> bool:
    """Whether ``engine`` at ``version`` runs these weights and this cache on ``acc`` at all:
    a one-GPU replica of them builds (``Deployment.build`` refuses a format the engine's
    kernels do not run on the card, ``deployment_problem`` one the release does not: vLLM's
    fp8 cache on a T4 from 0.24; what a layout refuses, its own)."""
    try:
        replica_deployment(model, acc, 1, 1, weights, kv, engine=engine, version=version)
    except InputError:
        return False
    return True


@dataclass(frozen=True)
class LeftOut:
    """A requested card, or some of its formats, the search leaves out: ``what`` ("every
    format", "KV fp8", "weights fp8", "weights fp8 with KV fp8"), and why, in the release's
    words with its way out."""

    gpu: str
    what: str
    why: str


def left_out(model: ModelSpec, gpus: Sequence[str], engine: str = "vllm",
             version: str | None = None, lever: str = "") -> tuple[LeftOut, ...]:
    """What ``search_space`` drops of the cards asked for, one entry a card: a card ``engine``
    at ``version`` runs none of the weight formats and KV dtypes on (vLLM 0.32 on a V100: its
    wheels carry no Volta kernels; ``lever`` the way out vllm_gpu_floors names beside an
    older release, "" that release alone), whatever refused it; else the pairs a release
    floor refuses on it (vllm_gpu_floors, capability_problem: an fp8 cache on a T4 from vLLM
    0.24, a ModelOpt FP8 export on an A100 under vLLM before 0.27). A pair the card's kernels
    never run (TensorRT-LLM's fp8 before Ada) is no release's floor and is left unsaid."""
    out = []
    formats = weight_choices(model)
    for gpu in gpus:
        acc = resolve_accelerator(gpu)
        floor = engine_floor_problem(engine, acc, lever or "--engine llama.cpp-cuda")
        if floor:  # below SGLang's or TensorRT-LLM's card floor: its ways out in plan's words
            out.append(LeftOut(acc.id, "every format", floor))
            continue
        pairs = [(served_choice(w, acc), served_choice(k, acc))
                 for w in formats for k in kv_choices(model, engine)]
        refused = {pair: _refusal(model, acc, *pair, engine, version, lever) for pair in pairs}
        if all(why for why, _ in refused.values()):
            out.append(LeftOut(acc.id, "every format", next(iter(refused.values()))[0]))
            continue
        floors = {pair: why for pair, (why, floor) in refused.items() if floor}
        if floors:
            # what no release runs on the card is no floor's: left out of the words too
            floored = [p for p in pairs if p in floors or not refused[p][0]]
            out.append(LeftOut(acc.id, _pairs_words(list(floors), floored),
                               next(iter(floors.values()))))
    return tuple(out)


def _refusal(model: ModelSpec, acc: Accelerator, weights: str, kv: str, engine: str,
             version: str | None, lever: str) -> tuple[str, bool]:
    """Why ``engine`` at ``version`` starts no one-GPU replica of this pair on ``acc`` ("":
    it does), and whether a release floor is why (an older or newer release runs it)."""
    try:
        dep = replica_build(model, acc, 1, 1, weights, kv, engine=engine
                            ).with_state_settings(version, None)
    except InputError as exc:  # the engine's kernels, in every release
        return str(exc), False
    problem = deployment_problem(dep, version)
    capability = capability_problem(dep, version)
    if problem and problem == (capability or gpu_floor_problem(dep, version)):
        return capability or gpu_floor_problem(dep, version, lever, format_lever=""), True
    return problem, False


def _pairs_words(refused: list[tuple[str, str]], pairs: list[tuple[str, str]]) -> str:
    """The (weights, KV) pairs left out, in the fewest words: "KV fp8" where every pair with
    that cache is, "weights fp8" where every pair with those weights is, else each pair."""
    kvs = {k for _, k in refused}
    if len(kvs) == 1 and all((w, k) in refused for w, k in pairs if k in kvs):
        return f"KV {next(iter(kvs))}"
    weights = {w for w, _ in refused}
    if len(weights) == 1 and all((w, k) in refused for w, k in pairs if w in weights):
        return f"weights {next(iter(weights))}"
    return ", ".join(f"weights {w} with KV {k}" for w, k in refused)


def layouts(node: int, max_gpus: int, tensor_parallel: bool = True) -> list[tuple[int, int]]:
    """The (tensor, pipeline) parallel sizes the search tries on a card with ``node`` GPUs
    a node, fewest GPUs first: TP up to 16, and a pipeline of two stages of full-node TP
    groups; cross-node TP is allowed (and priced), not with a pipeline too. Where the
    checkpoint loads on one tensor-parallel rank only (``single_rank_checkpoint``), pipeline
    stages of one GPU each, up to as many GPUs."""
    if not tensor_parallel:
        return [(1, pp) for pp in (1, 2, 4, 8, 16) if pp <= min(max_gpus, 2 * node)]
    out = []
    for tp in (1, 2, 4, 8, 16):
        for pp in (1, 2):
            if tp * pp > min(max_gpus, 2 * node) or (pp > 1 and tp < min(8, node)):
                continue
            if tp > node and pp > 1:
                continue
            out.append((tp, pp))
    return sorted(out, key=lambda layout: layout[0] * layout[1])
