"""The planner's search space: every card, weight format, KV dtype, tensor × pipeline layout,
engine knobs and expert parallelism ``plan`` sizes a replica for, and the layouts the closest
miss is looked for over (``closest_miss``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ridgeline.candidate import replica_deployment, weight_choices
from ridgeline.errors import InputError
from ridgeline.hardware import Accelerator, resolve_accelerator
from ridgeline.model import ModelSpec
from ridgeline.parallel import node_size
from ridgeline.quantization_gates import single_rank_checkpoint

# (max_num_seqs, max_num_batched_tokens) tried per configuration, None the engine's default:
# fewer seats bound the batch (and TPOT); a smaller token budget cuts prefill chunks, so
# decodes stall less behind long prompts, at the price of a lower steady-state batch.
ENGINE_KNOBS: tuple[tuple[int | None, int | None], ...] = ((None, None), (64, None), (None, 2048))



def search_space(model: ModelSpec, gpus: Sequence[str], max_gpus: int, engine: str = "vllm"
                 ) -> Iterable[tuple[str, int, int, str, str, tuple[int | None, int | None],
                                     bool]]:
    """Every weight format and KV dtype ``engine`` runs on each card, as ``decode``, ``fit``
    and ``simulate`` take them: a card without fp8 matmul units (A100) runs fp8 weights
    weight-only (W8A16, through FP8 Marlin) and an fp8 cache widened to 16 bits in attention
    (vLLM's FlashInfer and Triton backends), step_cost pricing their matmuls at the 16-bit
    rate on half the bytes; a pair the engine runs on no such card (TensorRT-LLM's fp8 before
    Ada) is left out (``_engine_runs``)."""
    formats = weight_choices(model)
    for gpu in gpus:
        acc = resolve_accelerator(gpu)
        node = node_size(acc)
        for weights in formats:
            for kv in ("bf16", "fp8"):
                if not _engine_runs(model, acc, weights, kv, engine):
                    continue
                for tp, pp in layouts(node, max_gpus,
                                      not single_rank_checkpoint(model, engine)):
                    for knobs in ENGINE_KNOBS:
                        for ep in (False, True) if model.moe and tp > 1 else (False,):
                            yield acc.id, tp, pp, weights, kv, knobs, ep


def _engine_runs(model: ModelSpec, acc: Accelerator, weights: str, kv: str, engine: str) -> bool:
    """Whether ``engine`` runs these weights and this cache on ``acc`` at all: a one-GPU
    replica of them builds (``Deployment.build`` refuses a format the engine's kernels do not
    run on the card; what a layout refuses, its own)."""
    try:
        replica_deployment(model, acc, 1, 1, weights, kv, engine=engine)
    except InputError:
        return False
    return True


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
