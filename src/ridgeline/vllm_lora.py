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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ridgeline.deployment import Deployment
from ridgeline.errors import InputError
from ridgeline.layouts import DENSE, FULL, SLIDING
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

    def __post_init__(self) -> None:
        data = lora_data()
        if self.max_loras is not None and self.max_loras < 1:
            raise InputError(f"--max-loras must be at least 1, got {self.max_loras}")
        ranks = tuple(int(r) for r in data["ranks"])
        if self.max_lora_rank is not None and self.max_lora_rank not in ranks:
            raise InputError(f"--max-lora-rank {self.max_lora_rank} is not one vLLM takes: "
                             f"{', '.join(map(str, ranks))} (vllm/config/lora.py MaxLoRARanks)")
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


@dataclass(frozen=True)
class LoRAModule:
    """One kind of adapted module on a GPU: how many there are, and each one's buffers."""

    name: str
    count: int
    bytes_each: float

    @property
    def total_bytes(self) -> float:
        return self.count * self.bytes_each


def lora_problem(dep: Deployment, lora: LoRASettings, version: str | None) -> str:
    """Why ``dep`` with ``lora`` is not sized here ("" where it is): an engine other than
    vLLM, vLLM before the extra vocabulary went (v0.12) or on V0, a model class whose LoRA
    modules are not in engines.json (MoE experts, MLA, tied embeddings among them), a vocab
    past the lm_head's limit, or --fully-sharded-loras with a rank TP does not divide."""
    data = lora_data()
    if dep.engine != "vllm":
        return (f"--enable-lora is not modelled for {dep.engine}: its adapters' buffers take "
                "memory and their matmuls time in every step (vLLM's are: --engine vllm)")
    acc = vllm_accounting(version)
    if acc.engine == "V0" or parse_version(acc.version) < parse_version(data["from"]):
        return (f"--enable-lora is modelled from vLLM v{data['from']}: earlier releases add "
                "lora_extra_vocab_size rows to the embedding's LoRA buffers (removed in PRs "
                "#28382 and #28545), which are not sized here")
    m = dep.model
    arch = m.architecture
    known = data["architectures"]
    why = ""
    if arch not in known:
        why = f"its class's LoRA modules are not sized here (sized: {', '.join(known)})"
    elif m.moe is not None:
        why = "its experts' LoRA buffers (FusedMoEWithLoRA) are not sized here"
    elif m.attention is None or m.attention.mla is not None:
        why = "only grouped-query attention's qkv_proj and o_proj are sized here"
    elif any(layer.ffn != DENSE for layer in m.layers) or m.dense_mlp is None \
            or not m.dense_mlp.gated:
        why = "only a gated dense MLP's gate_up_proj and down_proj are sized here"
    elif any(layer.mixer not in (FULL, SLIDING) for layer in m.layers):
        why = "only attention layers are sized here"
    elif m.tie_word_embeddings and known[arch]:
        why = ("its lm_head is the embedding's table (tie_word_embeddings), whose LoRA "
               "wrapping is not sized here")
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


def check_lora(dep: Deployment, lora: LoRASettings, version: str | None) -> None:
    """An InputError carrying ``lora_problem`` where there is one."""
    problem = lora_problem(dep, lora, version)
    if problem:
        raise InputError(problem)


def lora_modules(dep: Deployment, lora: LoRASettings, stage: Stage | None = None
                 ) -> tuple[LoRAModule, ...]:
    """Each kind of adapted module on one GPU of ``dep`` (of a pipeline ``stage``: its own
    layers, the embedding on the first, the lm_head on the last), with its buffers' bytes:
    A (rank × input) and B (output × rank) per slice, max_loras of each."""
    m, att, mlp = dep.model, dep.model.attention, dep.model.dense_mlp
    assert att is not None and mlp is not None  # lora_problem refused the others
    tp, r, slots = dep.tensor_parallel_size, lora.rank, lora.slots
    element = int(lora_data()["dtype_bytes"])
    sharded = lora.fully_sharded_loras
    h, inter = m.hidden_size, mlp.intermediate_size
    q_out = att.num_heads * att.head_dim // tp
    kv_heads = 1 if tp >= att.num_kv_heads else att.num_kv_heads // tp  # QKVParallelLinear
    kv_out = kv_heads * (att.head_dim + att.v_head_dim)

    def column(slices: int, out: int) -> float:  # A whole input, B the partition's output
        return slots * element * ((r // tp if sharded else r) * h * slices + out * r)

    def row(inp: int) -> float:  # A the partition's input, B whole output
        return slots * element * (r * inp + (h // tp if sharded else h) * r)

    layers = m.num_layers if stage is None else stage.layers
    found = [LoRAModule("qkv_proj", layers, column(3, q_out + kv_out)),
             LoRAModule("o_proj", layers, row(att.num_heads * att.v_head_dim // tp)),
             LoRAModule("gate_up_proj", layers, column(2, 2 * (inter // tp))),
             LoRAModule("down_proj", layers, row(inter // tp))]
    table = slots * element * r * (m.vocab_size + h)  # A and B, whole on every GPU
    embedding = lora_data()["architectures"].get(m.architecture, [])
    if "embed_tokens" in embedding and (stage is None or stage.first):
        found.append(LoRAModule("embed_tokens", 1, table))
    if "lm_head" in embedding and (stage is None or stage.last):
        found.append(LoRAModule("lm_head", 1, table))
    return tuple(found)


def lora_bytes(dep: Deployment, lora: LoRASettings, stage: Stage | None = None) -> float:
    """The LoRA slots' bytes on one GPU of ``dep`` (``lora_modules`` summed)."""
    return sum(module.total_bytes for module in lora_modules(dep, lora, stage))


def lora_step_caution(lora: LoRASettings) -> str:
    """The one line decode, prefill and simulate print under --enable-lora: the adapters'
    matmuls are not in the step time they give."""
    r = lora.rank
    return (f"--enable-lora: the adapters' matmuls (rank {r}: ≈ 2·{r}·(in + out) FLOPs a "
            "token per adapted module, and the active adapters' A and B bytes read per module "
            "each step) are not in these step times; the pool holds their buffers")


def lora_graph_caution() -> str:
    """fit's line under --enable-lora with CUDA graphs: vLLM captures the adapters' cases too
    (engines.json vllm.lora graphs_source), which the graph estimate counts once."""
    return ("--enable-lora: vLLM captures each CUDA-graph size with and without active "
            "adapters (cudagraph_specialize_lora, on by default: 'slightly higher memory "
            "usage'), which the graph estimate here counts once")
