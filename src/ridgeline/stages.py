"""Pipeline stages: which layers, and which weights, each stage of a pipeline-parallel
deployment holds.

vLLM splits the decoder layers evenly over ``--pipeline-parallel-size`` stages; a remainder
goes one layer each to the stages before the last, from the second-to-last backwards (the
last holds the final norm and the lm_head; with a remainder up to pp − 2 the first, which
holds the embedding, is spared too): 61 layers over 2 stages are [31, 30], 126 over 4 are
[31, 32, 32, 31] (vllm/distributed/utils.py, get_pp_indices; VLLM_PP_LAYER_PARTITION
overrides it). The input embedding lives on the first stage and the lm_head on the last
(a tied embedding on both), each split over the stage's tensor-parallel ranks; a vision
tower runs before the first layer, on the first stage.

Every stage profiles its own memory and the engine keeps the smallest number of blocks any
stage can hold (vLLM V1's get_kv_cache_configs: "change the num_blocks of each worker to
the smallest among all workers"), so the binding stage is the one whose memory left, per
block of its own layers, is least. ridgeline spreads a stage's layer weights by its share
of the layers (a model whose layers differ — DeepSeek's three dense layers first — is
priced at the mean layer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ridgeline.quantization import EMBEDDING, LM_HEAD

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment


@dataclass(frozen=True)
class Stage:
    """One pipeline stage of a deployment, as one of its GPUs sees it."""

    index: int  # 0 holds the embedding
    count: int  # stages in the pipeline
    layers: int  # decoder layers on this stage
    model_layers: int

    @property
    def first(self) -> bool:
        return self.index == 0

    @property
    def last(self) -> bool:
        return self.index == self.count - 1

    @property
    def layer_share(self) -> float:
        """This stage's layers over an even split's: 31 of 61 over 2 stages = 1.016."""
        return self.layers * self.count / self.model_layers

    def describe(self) -> str:
        """'stage 2 of 2 (30 layers and the lm_head)'."""
        holds = [f"{self.layers} layers"]
        if self.first:
            holds.append("the embedding")
        if self.last:
            holds.append("the lm_head")
        listed = ", ".join(holds[:-1]) + (" and " if len(holds) > 1 else "") + holds[-1]
        return f"stage {self.index + 1} of {self.count} ({listed})"


def stage_layers(num_layers: int, stages: int) -> tuple[int, ...]:
    """vLLM's split of ``num_layers`` over ``stages``: even, the remainder one each to the
    stages before the last, second-to-last first (61 over 2 → (31, 30))."""
    split = [num_layers // stages] * stages
    for i in range(2, num_layers % stages + 2):
        split[-i] += 1
    return tuple(split)


def pipeline_stages(dep: Deployment) -> tuple[Stage, ...]:
    """The deployment's stages, first to last (one for a deployment without a pipeline)."""
    n, pp = dep.model.num_layers, dep.pipeline_parallel_size
    return tuple(Stage(i, pp, layers, n) for i, layers in enumerate(stage_layers(n, pp)))


def stage_weight_bytes(dep: Deployment, stage: Stage, gpu_bytes: float,
                       vision_bytes: float) -> float:
    """Weights on one GPU of ``stage``: its share of the layers' weights, the embedding on the
    first stage, the lm_head on the last (a tied embedding read there as the lm_head), the
    vision tower on the first; all split over the stage's tensor-parallel ranks.
    ``gpu_bytes`` is every weight the engine keeps on GPUs, ``vision_bytes`` the tower's."""
    by = dep.bytes_by_category
    embedding = by.get(EMBEDDING, 0.0)
    head = embedding if dep.model.tie_word_embeddings else by.get(LM_HEAD, 0.0)
    layers = gpu_bytes - embedding - by.get(LM_HEAD, 0.0)
    held = layers * stage.layers / stage.model_layers
    if stage.first:
        held += embedding + vision_bytes
    if stage.last and (not stage.first or not dep.model.tie_word_embeddings):
        held += head
    return held / dep.tensor_parallel_size
