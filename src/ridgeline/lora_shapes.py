"""The shapes of one GPU's LoRA buffers, which vLLM and SGLang stack alike: per adapted
module, every slot's A (rank × input, per packed slice) and B (output × rank), sharded as the
module's own layer under tensor parallelism t. One formula per shape, which vllm_lora.py and
sglang_lora.py each pick from by their own rules (which modules, how many slots, what rank).

    column-parallel (qkv_proj, gate_up_proj):  A slices × r × input,  B (output ÷ t) × r
    row-parallel (o_proj, down_proj):          A r × (input ÷ t),     B output × r
    embed_tokens:                              A vocab × r,           B hidden × r
    lm_head:                                   A r × hidden,          B vocab × r

A MoE model's MLP (vLLM's, from 0.12: FusedMoEWithLoRA) is its router, replicated (A r ×
hidden, B experts × r), and every expert's w13 and w2, column- and row-parallel as above, each
slot holding an A and B for each of the E experts (vLLM has no expert parallelism with LoRA).

Llama-3.1-8B at rank 64, TP1: 10 MiB a slot and layer over the four linear kinds (qkv_proj
1,179,648 elements, o_proj 524,288, gate_up_proj 2,359,296, down_proj 1,179,648; 2 bytes).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from ridgeline.deployment import Deployment
from ridgeline.model import ModelSpec


@dataclass(frozen=True)
class LoRAModule:
    """One kind of adapted module on a GPU: how many there are, and one adapter's A and B
    there: A is ``slices`` × (``a_rank`` × ``input_width``), B is ``output_width`` (the
    slices' outputs summed) × ``b_rank``, ``slots`` of each in the buffers, and a MoE
    layer's ``experts`` of each (FusedMoEWithLoRA's local-expert axis; 1 elsewhere). The
    step reads these shapes (lora_step.py); the pool, their bytes."""

    name: str
    count: int
    slots: int
    slices: int
    input_width: int
    a_rank: int  # the rank one GPU's A holds (vLLM --fully-sharded-loras: column-parallel ÷ TP)
    output_width: int
    b_rank: int
    element_bytes: int
    experts: int = 1  # the experts each slot holds an A and B for (all E: no EP with LoRA)

    @property
    def a_elements(self) -> int:
        """One adapter's A on this GPU, every slice (of one expert)."""
        return self.slices * self.a_rank * self.input_width

    @property
    def b_elements(self) -> int:
        """One adapter's B on this GPU, every slice (of one expert)."""
        return self.output_width * self.b_rank

    @property
    def bytes_each(self) -> float:
        """The module's buffers: ``slots`` adapters' A and B, for each of its experts."""
        return float(self.slots * self.experts * self.element_bytes
                     * (self.a_elements + self.b_elements))

    @property
    def total_bytes(self) -> float:
        return self.count * self.bytes_each


def active_words(active_loras: int | None, slots: int) -> str:
    """How many adapters a step's LoRA part reads, as both engines' cautions say it: the
    --active-loras given, else every request its own adapter up to the slots."""
    if active_loras:
        return (f"at most {active_loras} adapter{'' if active_loras == 1 else 's'} a step "
                "(--active-loras)")
    return f"every request its own adapter, min(batch, {slots}) a step (--active-loras N: fewer)"


def linear_lora_modules(dep: Deployment, layers: int, slots: int, rank: int,
                        element_bytes: int, fully_sharded: bool = False,
                        single_slice: Collection[str] = (), router: str | None = None
                        ) -> tuple[LoRAModule, ...]:
    """The linear layers' modules on one GPU of ``dep``, ``layers`` of each: qkv_proj and
    o_proj, then gate_up_proj and down_proj, or in a MoE model (every layer MoE) its
    ``router`` (the gate's name in the engine's modules) and its experts' w13 and w2. A
    column-parallel module's A takes the whole input and B the partition's output (its KV
    heads one a GPU where TP exceeds them, as QKVParallelLinear replicates them); a
    row-parallel module's A the partition's input and B the whole output; the router's A and
    B are whole on every GPU. ``fully_sharded`` (vLLM's --fully-sharded-loras) also splits
    the column-parallel A's rank and the row-parallel B's output over TP; a module named in
    ``single_slice`` (packed on disk, as Phi-3's qkv_proj and gate_up_proj) has one slice."""
    m, att = dep.model, dep.model.attention
    assert att is not None  # the engines' checks refuse the others
    tp, r, h = dep.tensor_parallel_size, rank, m.hidden_size
    q_out = att.num_heads * att.head_dim // tp
    kv_heads = 1 if tp >= att.num_kv_heads else att.num_kv_heads // tp  # QKVParallelLinear
    kv_out = kv_heads * (att.head_dim + att.v_head_dim)

    def column(name: str, slices: int, out: int, experts: int = 1) -> LoRAModule:
        # A whole input, B the partition's output
        return LoRAModule(name, layers, slots, 1 if name in single_slice else slices, h,
                          r // tp if fully_sharded else r, out, r, element_bytes, experts)

    def row(name: str, inp: int, experts: int = 1) -> LoRAModule:
        # A the partition's input, B whole output
        return LoRAModule(name, layers, slots, 1, inp, r, h // tp if fully_sharded else h, r,
                          element_bytes, experts)

    found = [column("qkv_proj", 3, q_out + kv_out),
             row("o_proj", att.num_heads * att.v_head_dim // tp)]
    if m.moe is None:
        assert m.dense_mlp is not None
        inter = m.dense_mlp.intermediate_size // tp
        return (*found, column("gate_up_proj", 2, 2 * inter), row("down_proj", inter))
    assert router is not None  # the engine names its MoE models' gate (vLLM: engines.json)
    e, inter = m.moe.num_experts, m.moe.expert_intermediate_size // tp
    return (*found,
            LoRAModule(router, layers, slots, 1, h, r, e, r, element_bytes),  # replicated
            column("experts.w13", 2, 2 * inter, e), row("experts.w2", inter, e))


def embedding_lora_module(model: ModelSpec, slots: int, rank: int,
                          element_bytes: int) -> LoRAModule:
    """The embedding's, whole on every GPU: A (vocab × rank), looked up by token, and B
    (hidden × rank)."""
    return LoRAModule("embed_tokens", 1, slots, 1, model.vocab_size, rank, model.hidden_size,
                      rank, element_bytes)


def lm_head_lora_module(model: ModelSpec, slots: int, rank: int,
                        element_bytes: int) -> LoRAModule:
    """The lm_head's, whole on every GPU: A (rank × hidden) and B (vocab × rank)."""
    return LoRAModule("lm_head", 1, slots, 1, model.hidden_size, rank, model.vocab_size, rank,
                      element_bytes)
