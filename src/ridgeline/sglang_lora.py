"""SGLang's LoRA slots: the A and B buffers its LoRAMemoryPool stacks on every GPU for
--max-loras-per-batch adapters at --max-lora-rank, which the static pool loses (engines.json
sglang.lora holds each rule with its source).

SGLang builds its LoRA manager after the weights load and before it sizes the KV pool
(model_runner.py: init_lora_manager, then init_memory_pool), so the buffers come out of
mem_fraction_static's share as the weights do. Each targeted module of every layer gets A
(max_loras_per_batch, stacked × rank, input) and B (max_loras_per_batch, output, rank) in the
model's dtype, sharded as its layer: vLLM's shapes (lora_shapes.py). The rank and the targets
are the flags', or read from the --lora-paths adapters, which ridgeline does not read: it asks
for --max-lora-rank and sizes unnamed targets as the four linear kinds. Llama-3.1-8B, the
default 8 slots at rank 64, TP1: 32 layers × 80 MiB = 2,560 MiB.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ridgeline.deployment import Deployment
from ridgeline.errors import InputError
from ridgeline.layouts import DENSE, FULL
from ridgeline.lora_shapes import (
    LoRAModule,
    active_words,
    embedding_lora_module,
    linear_lora_modules,
    lm_head_lora_module,
)
from ridgeline.sglang_memory import sglang_data, sglang_release

ALL = "all"  # --lora-target-modules all: every module SGLang can adapt


def sglang_lora_data() -> dict[str, Any]:
    """engines.json sglang.lora: the defaults, the target names, the models sized."""
    data: dict[str, Any] = sglang_data()["lora"]
    return data


@dataclass(frozen=True)
class SGLangLoRASettings:
    """python -m sglang.launch_server's LoRA knobs, in its words (None: SGLang's default).
    ``lora_paths`` counts the adapters --lora-paths names; their files are not read."""

    max_loras_per_batch: int | None = None  # GPU slots: adapters one batch may mix
    max_lora_rank: int | None = None  # every slot is sized at it
    lora_target_modules: tuple[str, ...] = ()  # as given; (): the adapters' (inferred)
    lora_paths: int = 0
    # ridgeline's, as with vLLM: the distinct adapters a step's batch mixes at most (None:
    # every request its own, min(batch, slots)); 0: the base model alone
    active_loras: int | None = None

    def __post_init__(self) -> None:
        data = sglang_lora_data()
        if self.max_loras_per_batch is not None and self.max_loras_per_batch < 1:
            raise InputError("SGLang: 'max_loras_per_batch must be positive', got "
                             f"--max-loras-per-batch {self.max_loras_per_batch}")
        known = data["target_modules"]
        unknown = [t for t in self.lora_target_modules if t != ALL and t not in known]
        if unknown:
            raise InputError(f"--lora-target-modules {' '.join(unknown)}: not a module SGLang "
                             f"adapts in the models sized here ({', '.join(known)} or all)")
        if ALL in self.lora_target_modules and len(self.lora_target_modules) > 1:
            raise InputError("SGLang: 'If 'all' is specified in --lora-target-modules, it "
                             "should be the only module specified.'")
        if not self.lora_paths and not (self.max_lora_rank and self.lora_target_modules):
            raise InputError("SGLang: 'When no initial --lora-paths is provided, you need to "
                             "specify both --max-lora-rank and --lora-target-modules for LoRA "
                             "initialization.'")
        if self.max_lora_rank is None:
            raise InputError("--lora-paths without --max-lora-rank: SGLang sizes its LoRA slots "
                             "at the largest rank of the adapters, whose files ridgeline does "
                             "not read; give --max-lora-rank R")
        if self.active_loras is not None and not 0 <= self.active_loras <= self.slots:
            raise InputError(f"--active-loras must be between 0 and --max-loras-per-batch "
                             f"({self.slots}: the adapters a batch can mix), got "
                             f"{self.active_loras}")

    @property
    def slots(self) -> int:
        return self.max_loras_per_batch or int(sglang_lora_data()["max_loras_per_batch"])

    @property
    def rank(self) -> int:
        assert self.max_lora_rank is not None  # __post_init__ asks for it
        return self.max_lora_rank

    @property
    def fully_sharded_loras(self) -> bool:
        """vLLM's switch; SGLang has none (fit --json names it for either engine)."""
        return False

    @property
    def targets_inferred(self) -> bool:
        """No --lora-target-modules: SGLang takes the adapters' targets, sized here as
        engines.json sglang.lora inferred_sized_as."""
        return not self.lora_target_modules

    @property
    def targets(self) -> frozenset[str]:
        """The modules SGLang adapts, in its normalized names (q_proj → qkv_proj)."""
        data = sglang_lora_data()
        if self.targets_inferred:
            return frozenset(data["inferred_sized_as"])
        if self.lora_target_modules == (ALL,):
            return frozenset(data["all"])
        return frozenset(data["target_modules"][t] for t in self.lora_target_modules)

    def describe(self) -> str:
        """'8 × rank 64', as fit's breakdown names the line."""
        return f"{self.slots} × rank {self.rank}"

    def active(self, sequences: int) -> int:
        """The adapters a step of ``sequences`` requests reads: one per request, at most the
        slots and --active-loras where given."""
        most = self.slots if self.active_loras is None else self.active_loras
        return min(sequences, self.slots, most)


def sglang_lora_problem(dep: Deployment, lora: SGLangLoRASettings, version: str | None) -> str:
    """Why ``dep`` with SGLang's ``lora`` is not sized here ("" where it is): a release before
    the rules read, a model class whose modules are not sized (MoE, MLA, hybrids), a
    pipeline or data-parallel attention (whose sharding of the buffers changed across
    releases), more GPUs than KV heads, or the embedding and lm_head tables above TP1."""
    data = sglang_lora_data()
    if version is not None and sglang_release(version) < sglang_release(data["from"]):
        return (f"SGLang's LoRA pool is modelled from {data['from']}: earlier releases' "
                "buffers are not sized here")
    m = dep.model
    why = ""
    if m.architecture not in data["architectures"]:
        why = f"its class's LoRA modules are not sized here (sized: {', '.join(data['architectures'])})"
    elif m.moe is not None:
        why = "its experts' LoRA buffers are not sized here"
    elif m.attention is None or m.attention.mla is not None:
        why = "only grouped-query attention's qkv_proj and o_proj are sized here"
    elif any(layer.ffn != DENSE for layer in m.layers) or m.dense_mlp is None \
            or not m.dense_mlp.gated:
        why = "only a gated dense MLP's gate_up_proj and down_proj are sized here"
    elif any(layer.mixer != FULL for layer in m.layers):
        why = "only full-attention layers are sized here"
    if why:
        return f"SGLang --enable-lora with {m.architecture} is not modelled: {why}"
    if dep.pipeline_parallel_size > 1 or dep.data_parallel_size > 1:
        return ("SGLang --enable-lora with --pp-size or --dp-size is not modelled: its LoRA "
                "pool sizes every layer's buffers and shards them by attention TP differently "
                "across releases")
    tp, att = dep.tensor_parallel_size, m.attention
    assert att is not None  # refused above
    if tp > att.num_kv_heads:
        return (f"SGLang --enable-lora at --tp-size {tp} over {att.num_kv_heads} KV "
                "heads is not modelled: releases size qkv_proj's B differently there")
    tables = sorted(lora.targets & {"embed_tokens", "lm_head"})
    if tables and tp > 1:
        return (f"SGLang's LoRA {' and '.join(tables)} buffers above --tp-size 1 are not "
                "modelled: the lm_head's B is whole in some releases and split in others")
    if "lm_head" in lora.targets and m.tie_word_embeddings:
        return ("SGLang's LoRA lm_head on a model whose lm_head is the embedding's table "
                "(tie_word_embeddings) is not modelled")
    return ""


def sglang_lora_modules(dep: Deployment, lora: SGLangLoRASettings) -> tuple[LoRAModule, ...]:
    """Each targeted kind of module on one GPU of ``dep``, every layer's (num_hidden_layers:
    SGLang's pool sizes them all), with its buffers' bytes."""
    m, r, slots = dep.model, lora.rank, lora.slots
    element = int(sglang_lora_data()["dtype_bytes"])
    targets = lora.targets
    found = [module for module in linear_lora_modules(dep, m.num_layers, slots, r, element)
             if module.name in targets]
    if "embed_tokens" in targets:
        found.append(embedding_lora_module(m, slots, r, element))
    if "lm_head" in targets:
        found.append(lm_head_lora_module(m, slots, r, element))
    return tuple(found)


def sglang_lora_bytes(dep: Deployment, lora: SGLangLoRASettings) -> float:
    """The LoRA slots' bytes on one GPU of ``dep`` (``sglang_lora_modules`` summed)."""
    return sum(module.total_bytes for module in sglang_lora_modules(dep, lora))


def sglang_lora_targets_caution(lora: SGLangLoRASettings) -> str:
    """fit's line where SGLang infers the adapted modules from the adapters, or ""."""
    if not lora.targets_inferred:
        return ""
    sized = ", ".join(sorted(lora.targets))
    return (f"--lora-paths without --lora-target-modules: SGLang adapts the modules its "
            f"adapters name, sized here as {sized} (q/k/v/o/gate/up/down adapters); name "
            "them with --lora-target-modules to size fewer, or all for the tables too")


def sglang_lora_step_caution(lora: SGLangLoRASettings) -> str:
    """The one line decode, prefill and simulate print under SGLang's LoRA: what the step
    times assume of the adapters' matmuls (lora_step.py), and what they leave out."""
    n = lora.active_loras
    if n == 0:
        return ("SGLang LoRA with --active-loras 0: no request names an adapter, so its LoRA "
                "kernels do not run and the step times are the base model's; the pool still "
                "holds the slots")
    active = active_words(n, lora.slots)
    return (f"SGLang LoRA: the adapters' matmuls (its LoRA A and B kernels, csgmv or "
            f"triton, rank {lora.rank}) are in the step as 'lora adapters', {active}, at the "
            "step's efficiencies (no measured efficiency of their own), and their 2 kernels a "
            "module in the step's overhead at the profile's cost per weight matmul, fitted "
            "without LoRA")
