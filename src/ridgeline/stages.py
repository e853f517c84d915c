"""Pipeline stages: which layers, and which weights, each stage of a pipeline-parallel
deployment holds.

vLLM splits the decoder layers evenly over ``--pipeline-parallel-size`` stages; a remainder
goes one layer each to the stages before the last, from the second-to-last backwards (the
last holds the final norm and the lm_head; with a remainder up to pp − 2 the first, which
holds the embedding, is spared too): 61 layers over 2 stages are [31, 30], 126 over 4 are
[31, 32, 32, 31] (vllm/distributed/utils.py, get_pp_indices; VLLM_PP_LAYER_PARTITION
overrides it; SGLang's copy splits the same; TensorRT-LLM gives the remainder to the first
stages). The input embedding lives on the first stage and the lm_head on the last
(a tied embedding on both), each split over the stage's tensor-parallel ranks; a vision
tower runs before the first layer, on the first stage.

Every stage profiles its own memory and the engine keeps the smallest number of blocks any
stage can hold (vLLM V1's get_kv_cache_configs: "change the num_blocks of each worker to
the smallest among all workers"), so the binding stage is the one whose memory left, per
block of its own layers, is least. A stage's weights are its own layers' (DeepSeek's three
dense layers sit on the first stage), its cache its own cache-holding layers'.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from ridgeline.layouts import MOE, NONE
from ridgeline.model import Layer
from ridgeline.params import layer_params
from ridgeline.quantization import CATEGORIES, EMBEDDING, LM_HEAD

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment


@dataclass(frozen=True)
class Stage:
    """One pipeline stage of a deployment, as one of its GPUs sees it."""

    index: int  # 0 holds the embedding
    count: int  # stages in the pipeline
    start: int  # its first decoder layer
    layers: int  # decoder layers on this stage
    kv_share: float = 1.0  # its cache-holding layers over an even split's
    expert_share: float = 1.0  # its MoE layers over an even split's
    blocks_per_layer: int = 1  # a parallel hybrid's (Falcon-H1's) two: ``layers`` counts blocks

    @property
    def first(self) -> bool:
        return self.index == 0

    @property
    def last(self) -> bool:
        return self.index == self.count - 1

    def describe(self) -> str:
        """'stage 2 of 2 (30 layers and the lm_head)'."""
        n = self.layers // self.blocks_per_layer
        holds = [f"{n} layer{'s' if n != 1 else ''}"]
        if self.first:
            holds.append("the embedding")
        if self.last:
            holds.append("the lm_head")
        listed = ", ".join(holds[:-1]) + (" and " if len(holds) > 1 else "") + holds[-1]
        return f"stage {self.index + 1} of {self.count} ({listed})"


def stage_layers(num_layers: int, stages: int, engine: str = "vllm") -> tuple[int, ...]:
    """The engine's split of ``num_layers`` over ``stages``: even, the remainder one each to
    the stages before the last, second-to-last first, in vLLM and SGLang (its get_pp_indices
    is vLLM's; 61 over 2 → (31, 30)); to the first stages in TensorRT-LLM (Mapping.pp_layers,
    torch.tensor_split: 61 over 2 → (31, 30), 126 over 4 → (32, 32, 31, 31))."""
    split = [num_layers // stages] * stages
    extra = num_layers % stages
    if engine == "trtllm":
        for i in range(extra):
            split[i] += 1
        return tuple(split)
    for i in range(2, extra + 2):
        split[-i] += 1
    return tuple(split)


def _share(layers: Sequence[Layer], start: int, count: int, stages: int,
           holds: Callable[[Layer], bool]) -> float:
    """The layers from ``start`` that ``holds``, over an even split's share of them."""
    total = sum(1 for layer in layers if holds(layer))
    mine = sum(1 for layer in layers[start:start + count] if holds(layer))
    return mine * stages / total if total else 1.0


@lru_cache(maxsize=256)
def pipeline_stages(dep: Deployment) -> tuple[Stage, ...]:
    """The deployment's stages, first to last (one for a deployment without a pipeline)."""
    layers, pp = dep.model.layers, dep.pipeline_parallel_size
    # the engine splits a parallel hybrid's decoder layers (Falcon-H1's 44), two blocks each
    blocks = 2 if dep.model.parallel_hybrid else 1
    out, start = [], 0
    for i, n in enumerate(blocks * n for n in stage_layers(len(layers) // blocks, pp,
                                                           dep.engine)):
        out.append(Stage(i, pp, start, n,
                         _share(layers, start, n, pp, lambda layer: layer.mixer != NONE),
                         _share(layers, start, n, pp, lambda layer: layer.ffn == MOE),
                         blocks))
        start += n
    return tuple(out)


@lru_cache(maxsize=256)
def _layer_bytes(dep: Deployment) -> tuple[float, ...]:
    """Each decoder layer's weight bytes, as ``dep``'s formats store them."""
    plan = dep.weights
    bpw = {c: plan.format_of(c).bytes_per_weight for c in CATEGORIES}
    return tuple(sum(n * bpw[c] for c, n in layer_params(dep.model, layer).items() if n)
                 for layer in dep.model.layers)


def stage_weight_bytes(dep: Deployment, stage: Stage, vision_bytes: float) -> float:
    """Weights on one GPU of ``stage``: its own layers', the embedding (and a vision tower,
    ``vision_bytes``) on the first stage, the lm_head and the final norm on the last (a tied
    embedding read there as the lm_head); all split over the stage's tensor-parallel ranks,
    but for what each rank keeps whole (``Deployment.layer_tp_copies_bytes``)."""
    by = dep.bytes_by_category
    embedding = by.get(EMBEDDING, 0.0)
    head = embedding if dep.model.tie_word_embeddings else by.get(LM_HEAD, 0.0)
    per_layer = _layer_bytes(dep)
    held = sum(per_layer[stage.start:stage.start + stage.layers])
    held += stage_tp_copies_bytes(dep, stage)
    if stage.first:
        held += embedding + vision_bytes
    if stage.last:
        rest = dep.weight_bytes - embedding - by.get(LM_HEAD, 0.0) - sum(per_layer)  # final norm
        held += rest + (head if not stage.first or not dep.model.tie_word_embeddings else 0.0)
    return held / dep.tensor_parallel_size


def stage_tp_copies_bytes(dep: Deployment, stage: Stage | None) -> float:
    """What the tensor-parallel ranks of ``stage`` (None: the whole model) hold beyond one
    copy of its layers' weights (``Deployment.layer_tp_copies_bytes``)."""
    if stage is None:
        return dep.tp_copies_bytes
    return sum(dep.layer_tp_copies_bytes(layer)
               for layer in dep.model.layers[stage.start:stage.start + stage.layers])


def micro_batches(dep: Deployment) -> int:
    """The batches a pipeline keeps in flight, one in each stage: a serving engine's PP
    (vLLM, SGLang, TensorRT-LLM schedule a micro-batch per stage); 1 for llama.cpp, whose
    layer split passes the whole batch from stage to stage."""
    if dep.engine.startswith("llama.cpp"):
        return 1
    return dep.pipeline_parallel_size


def split_batch(batch: int, parts: int) -> int:
    """The largest of ``parts`` even shares of ``batch``: ⌈batch ÷ parts⌉."""
    return -(-batch // parts)


def micro_batch(dep: Deployment, batch: int) -> int:
    """The sequences one stage multiplies at once: a running batch of ``batch`` split into
    ``micro_batches`` (544 over PP4: 136), each stage reading its weights for one of them —
    what the ridge, and a token's step, are judged by."""
    return split_batch(batch, micro_batches(dep))
