"""vLLM's LoRA slots: the stacked A and B buffers --enable-lora allocates on every GPU, which
the KV pool loses (engines.json vllm.lora holds each rule with its source).

At load vLLM wraps every linear layer of attention and the MLP, and the embedding and the
lm_head where the model class lists them, and gives each module zero-filled room for
max_loras adapters at max_lora_rank in lora_dtype (auto: the model's 16-bit dtype). It does
so inside the profiler that counts the weights, so the buffers are taken before the profile
whatever adapters are loaded later. Per GPU under tensor parallelism t, for a module of
input width i and output width o (its packed slices' outputs summed), in rank r, 2 bytes each:

    column-parallel (qkv_proj, gate_up_proj):  max_loras × r × (slices × i + o ÷ t)
    row-parallel (o_proj, down_proj):          max_loras × r × (i ÷ t + o)

(--fully-sharded-loras: the column-parallel A's rank ÷ t, the row-parallel B's output ÷ t),
and the embedding's and lm_head's max_loras × r × (vocab + hidden) each, not sharded.
Llama-3.1-8B at max_loras 4, rank 64, TP1: 32 layers × 40 MiB + 2 × 64.6 MiB = 1,409 MiB.
A MoE layer's experts hold the column and row shapes once an expert (w13: 2 slices of the
expert's intermediate ÷ t; w2), all E on every GPU (vLLM refuses expert parallel), and its
router, a replicated linear, max_loras × r × (hidden + E): Qwen3-30B-A3B at 4 × rank 32, TP1,
48 layers × 128 experts × 4 × 32 × (2 × 2,048 + 2 × 768 + 768 + 2,048) × 2 B = 12.4 GiB.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ridgeline.deployment import Deployment
from ridgeline.errors import InputError
from ridgeline.layouts import DENSE, FULL, MOE, SLIDING
from ridgeline.lora_shapes import (
    LoRAModule,
    active_words,
    embedding_lora_module,
    linear_lora_modules,
    lm_head_lora_module,
)
from ridgeline.stages import Stage
from ridgeline.vllm_memory import parse_version, vllm_accounting, vllm_data


def lora_data() -> dict[str, Any]:
    """engines.json vllm.lora: the defaults, the ranks vLLM takes, the models sized."""
    data: dict[str, Any] = vllm_data()["lora"]
    return data


@dataclass(frozen=True)
class LoRASettings:
    """vllm serve's --enable-lora knobs, in its words (None: vLLM's default, engines.json)."""

    max_loras: int | None = None  # GPU slots: adapters one batch may mix
    max_lora_rank: int | None = None  # every slot is sized at it
    fully_sharded_loras: bool = False
    lora_dtype: str = "auto"  # auto, float16 or bfloat16: 2 bytes an element either way
    # ridgeline's, not vLLM's: the distinct adapters a step's batch mixes at most (None: every
    # request may bring its own, so min(batch, max_loras)); 1: one adapter shared by all; 0:
    # the base model alone, whose steps skip the kernels (lora_step.py)
    active_loras: int | None = None

    def __post_init__(self) -> None:
        data = lora_data()
        if self.max_loras is not None and self.max_loras < 1:
            raise InputError(f"--max-loras must be at least 1, got {self.max_loras}")
        ranks = tuple(int(r) for r in data["ranks"])
        if self.max_lora_rank is not None and self.max_lora_rank not in ranks:
            raise InputError(f"--max-lora-rank {self.max_lora_rank} is not one vLLM takes: "
                             f"{', '.join(map(str, ranks))} (vllm/config/lora.py MaxLoRARanks)")
        if self.active_loras is not None and not 0 <= self.active_loras <= self.slots:
            raise InputError(f"--active-loras must be between 0 and --max-loras ({self.slots}: "
                             f"the adapters a batch can mix), got {self.active_loras}")
        if self.lora_dtype not in data["dtypes"]:
            raise InputError(f"--lora-dtype must be one of {', '.join(data['dtypes'])}, "
                             f"got {self.lora_dtype!r}")

    @property
    def slots(self) -> int:
        return self.max_loras or int(lora_data()["max_loras"])

    @property
    def rank(self) -> int:
        return self.max_lora_rank or int(lora_data()["max_lora_rank"])

    def describe(self) -> str:
        """'4 × rank 64', as fit's breakdown names the line."""
        return f"{self.slots} × rank {self.rank}" + (", fully sharded"
                                                     if self.fully_sharded_loras else "")

    def active(self, sequences: int) -> int:
        """The adapters a step of ``sequences`` requests reads: one per request, at most
        max_loras (the slots a batch can mix) and --active-loras where given."""
        most = self.slots if self.active_loras is None else self.active_loras
        return min(sequences, self.slots, most)


def lora_problem(dep: Deployment, lora: LoRASettings, version: str | None) -> str:
    """Why ``dep`` with ``lora`` is not sized here ("" where it is): an engine other than
    vLLM, vLLM before the extra vocabulary went (v0.12) or on V0, a model class whose LoRA
    modules are not in engines.json or not yet in that release, MLA, shared experts,
    expert parallel (vLLM asserts against it), a tied lm_head the class makes the embedding
    itself, a vocab past the lm_head's limit, or --fully-sharded-loras with a rank TP does
    not divide."""
    data = lora_data()
    if dep.engine != "vllm":
        return (f"--enable-lora is not modelled for {dep.engine}: its adapters' buffers take "
                "memory and their matmuls time in every step (vLLM's and SGLang's are: "
                "--engine vllm or sglang)")
    acc = vllm_accounting(version)
    if acc.engine == "V0" or parse_version(acc.version) < parse_version(data["from"]):
        return (f"--enable-lora is modelled from vLLM v{data['from']}: earlier releases add "
                "lora_extra_vocab_size rows to the embedding's LoRA buffers (removed in PRs "
                "#28382 and #28545), which are not sized here")
    m = dep.model
    arch = m.architecture
    known = data["architectures"]
    since = data["architectures_from"].get(arch)
    why = ""
    if arch not in known:
        why = f"its class's LoRA modules are not sized here (sized: {', '.join(known)})"
    elif since and parse_version(acc.version) < parse_version(since):
        why = (f"its class lists no embedding_modules before v{since} (PR #29816 added "
               "embed_tokens and lm_head), a layout not sized here")
    elif m.attention is None or m.attention.mla is not None:
        why = "only grouped-query attention's qkv_proj and o_proj are sized here"
    elif any(layer.mixer not in (FULL, SLIDING) for layer in m.layers):
        why = "only attention layers are sized here"
    elif m.moe is not None:
        why = _moe_problem(dep, arch in data["routers"])
    elif any(layer.ffn != DENSE for layer in m.layers) or m.dense_mlp is None \
            or not m.dense_mlp.gated:
        why = "only a gated dense MLP's gate_up_proj and down_proj are sized here"
    if not why and m.tie_word_embeddings and known[arch] \
            and arch not in data["tied_lm_head_kept"]:
        why = ("its lm_head is the embedding module itself when tied (tie_word_embeddings), "
               "whose LoRA wrapping is not sized here")
    if why:
        return f"--enable-lora with {arch} is not modelled: {why}"
    if "lm_head" in known[arch] and m.vocab_size > int(data["max_vocab_lm_head"]):
        return (f"vLLM refuses --enable-lora for {m.name}: 'When using LoRA, vocab size must be "
                f"<= {int(data['max_vocab_lm_head']):,}' (its vocab is {m.vocab_size:,})")
    tp = dep.tensor_parallel_size
    if lora.fully_sharded_loras and lora.rank % tp:
        return (f"--fully-sharded-loras shards the rank over --tensor-parallel-size {tp}, which "
                f"does not divide --max-lora-rank {lora.rank}: vLLM fails at load")
    return ""


def _moe_problem(dep: Deployment, routed: bool) -> str:
    """Why a MoE model's adapters are not sized ("" where they are): a class whose router is
    not known, shared experts or dense layers beside the MoE ones, or expert parallel."""
    moe = dep.model.moe
    assert moe is not None
    if not routed:
        return "its experts' LoRA buffers (FusedMoEWithLoRA or FusedMoE3DWithLoRA) are not sized here"
    if moe.num_shared_experts:
        return "its shared experts' LoRA modules are not sized here"
    if any(layer.ffn != MOE for layer in dep.model.layers):
        return "dense MLP layers beside the MoE layers are not sized here"
    if dep.expert_parallel:
        return ("vLLM asserts 'EP support for Fused MoE LoRA is not implemented yet' "
                "(FusedMoEWithLoRA): drop --enable-expert-parallel")
    return ""


def lora_modules(dep: Deployment, lora: LoRASettings, stage: Stage | None = None
                 ) -> tuple[LoRAModule, ...]:
    """Each kind of adapted module on one GPU of ``dep`` (of a pipeline ``stage``: its own
    layers, the embedding on the first, the lm_head on the last), with its buffers' bytes:
    A (rank × input) and B (output × rank) per slice, max_loras of each, per expert in a
    MoE layer (lora_shapes.py)."""
    m, r, slots = dep.model, lora.rank, lora.slots
    data = lora_data()
    element = int(data["dtype_bytes"])
    layers = m.num_layers if stage is None else stage.layers
    found = list(linear_lora_modules(
        dep, layers, slots, r, element, lora.fully_sharded_loras,
        single_slice=data["single_slice"].get(m.architecture, ()),  # packed on disk: one slice
        router=data["routers"].get(m.architecture)))
    # the tables, A and B whole on every GPU: the embedding's A (vocab × rank) looked up by
    # token, the lm_head's A (rank × hidden) and B (vocab × rank)
    embedding = data["architectures"].get(m.architecture, [])
    if "embed_tokens" in embedding and (stage is None or stage.first):
        found.append(embedding_lora_module(m, slots, r, element))
    if "lm_head" in embedding and (stage is None or stage.last):
        found.append(lm_head_lora_module(m, slots, r, element))
    return tuple(found)


def lora_bytes(dep: Deployment, lora: LoRASettings, stage: Stage | None = None) -> float:
    """The LoRA slots' bytes on one GPU of ``dep`` (``lora_modules`` summed)."""
    return sum(module.total_bytes for module in lora_modules(dep, lora, stage))


def lora_step_caution(lora: LoRASettings) -> str:
    """The one line decode, prefill and simulate print under --enable-lora: what their step
    times assume of the adapters' matmuls (lora_step.py), and what they leave out."""
    n = lora.active_loras
    # --fully-sharded-loras: each adapted linear's gather or reduction of the shrink's buffer
    # under TP (lora_collectives.py), outside the kernels' no-LoRA check
    sharded = (" --fully-sharded-loras adds a collective a module under tensor parallelism "
               "(the shrink's buffer gathered or all-reduced), in the step as 'lora "
               "collectives'." if lora.fully_sharded_loras else "")
    if n == 0:
        return ("--enable-lora with --active-loras 0: no request names an adapter, so vLLM "
                "skips the adapters' kernels in every step (no_lora_flag_cpu) and the step "
                "times are the base model's"
                + (" but for --fully-sharded-loras's collectives, which still run under "
                   "tensor parallelism (outside that check), priced as 'lora collectives'"
                   if lora.fully_sharded_loras else "")
                + "; the pool still holds the slots")
    active = active_words(n, lora.slots)
    return (f"--enable-lora: the adapters' matmuls (punica's shrink and expand, rank "
            f"{lora.rank}) are in the step as 'lora adapters', {active}, at the step's "
            "efficiencies (no measured efficiency of their own), and their 2 kernels a module "
            "in the step's overhead at the profile's cost per weight matmul, fitted without "
            f"LoRA.{sharded} " + lora_measured_note())


def lora_measured_note() -> str:
    """What vLLM's own benchmark lost to LoRA (engines.json vllm.lora.measured), against which
    the priced part and its launches read as a lower bound at that benchmark's large batches
    (simulated at its lengths on an A100: 8 % of output throughput, not 34 %)."""
    m = vllm_data()["lora"]["measured"]
    return (f"vLLM's own benchmark lost {m['throughput_loss']:.0%} of its throughput to LoRA "
            f"({m['setup'].split(': ')[0]}; {m['source'].split(' ')[0]}), several times "
            "what these steps price at its batch sizes: read them as a lower bound there")


def lora_graph_caution() -> str:
    """fit's line under --enable-lora with CUDA graphs: vLLM captures the adapters' cases too
    (engines.json vllm.lora graphs_source), which the graph estimate counts once."""
    return ("--enable-lora: vLLM captures each CUDA-graph size with and without active "
            "adapters (cudagraph_specialize_lora, on by default: 'slightly higher memory "
            "usage'), which the graph estimate here counts once")
