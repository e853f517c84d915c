"""The collectives vLLM's LoRA layers add to a step under tensor parallelism: the "lora
collectives" link part of the step (cost.step_terms), priced as the base model's all-reduces
are (parallel.py), from the per-GPU shapes lora_slots.engine_lora_modules gives.

Without --fully-sharded-loras there are none. A column-parallel layer (qkv_proj,
gate_up_proj) holds each adapter's A whole and B's output partition, so each rank's shrink
and expand make its own output columns; a row-parallel layer (o_proj, down_proj) holds A's
input partition and B whole, so its expand adds a partial sum into the base's partial output,
which the base all-reduce then sums (vllm/lora/layers/base_linear.py
BaseLinearLayerWithLoRA.apply, one add_lora_linear; row_parallel_linear.py
RowParallelLinearWithLoRA.forward, the base's one tensor_model_parallel_all_reduce). The
embedding's and the lm_head's adapters are whole on every GPU and run on the gathered
outputs (vocal_parallel_embedding.py, logits_processor.py: after _gather_logits); the MoE
router's is replicated.

With it (S-LoRA's scheme, the *WithShardedLoRA layers), each adapted linear issues one
collective of the shrink's float32 buffer over the step's tokens:

    column-parallel (ColumnParallelLinear-, MergedColumnParallelLinear-, QKVParallelLinear-,
    MergedQKVParallelLinearWithShardedLoRA; column_parallel_linear.py _mcp_apply): A's rank
    split over TP, so the buffer (slices × tokens × r/TP) is all-gathered to slices × tokens
    × r before the expand (tensor_model_parallel_all_gather)
    row-parallel (RowParallelLinearWithShardedLoRA.apply): A's input split, so the buffer
    (tokens × r) is a partial sum, all-reduced before the expand into B's output partition
    (tensor_model_parallel_all_reduce); the base all-reduce then carries the result

A MoE layer's experts (FusedMoEWithLoRA, fully_sharded; lora/ops/triton_ops/
fused_moe_lora_op.py _fused_moe_lora) do the same on every (token, chosen expert) pair in the
activations' dtype: w13 all-gathers its slices × tokens × top_k × r, w2 all-reduces its
tokens × top_k × r. Llama-3.1-8B at TP2: 64 all-gathers and 64 all-reduces a step; at rank
64 and a batch of 8 decode tokens, qkv_proj's gathers 3 × 8 × 64 × 4 = 6,144 bytes.

vLLM issues them whatever the batch's adapters: the gather and the reduction sit outside
punica's kernels, which alone check no_lora_flag_cpu, so --active-loras 0 keeps them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ridgeline.deployment import Deployment
from ridgeline.lora_shapes import LoRAModule
from ridgeline.lora_step import BUFFER_BYTES, INPUT_BYTES, step_modules
from ridgeline.parallel import all_gather_time_s, all_reduce_time_s

LORA_COLLECTIVES = "lora collectives"  # the step's link part (cost.py), as --explain names it
ALL_GATHER, ALL_REDUCE = "all-gather", "all-reduce"
# the column-parallel modules, whose A's rank --fully-sharded-loras splits (gathered after the
# shrink), and the row-parallel ones, whose A's input TP splits (reduced after it); the
# embedding, the lm_head and a MoE router issue none (lora_shapes.py names them all)
GATHERED = ("qkv_proj", "gate_up_proj", "experts.w13")
REDUCED = ("o_proj", "down_proj", "experts.w2")


@dataclass(frozen=True)
class LoRACollective:
    """One kind of adapted module's collective in a step on one GPU: ``kind`` over the
    ``ranks`` of TP, of ``message_bytes`` (the gathered buffer, or the reduced one), ``count``
    times (its layers)."""

    module: str
    kind: str
    message_bytes: float
    count: int
    ranks: int


def lora_collectives(dep: Deployment, tokens: int) -> tuple[LoRACollective, ...]:
    """The collectives of a step of ``tokens`` tokens: one per adapted linear under vLLM's
    --fully-sharded-loras at TP > 1, of slices × columns × rank × the buffer's bytes (a
    MoE layer's columns: tokens × top_k, its buffer in the activations' 2 bytes; elsewhere
    the step's tokens and punica's float32); () otherwise."""
    lora = dep.lora
    ranks = dep.engine_tensor_parallel_size  # an MI250's dies under vLLM: a rank each
    if lora is None or not lora.fully_sharded_loras or ranks <= 1 or tokens <= 0:
        return ()
    found = []
    for m in step_modules(dep):
        if m.name in GATHERED:
            kind = ALL_GATHER
        elif m.name in REDUCED:
            kind = ALL_REDUCE
        else:
            continue
        found.append(LoRACollective(m.name, kind, message_bytes(dep, m, tokens), m.count, ranks))
    return tuple(found)


def message_bytes(dep: Deployment, m: LoRAModule, tokens: int) -> float:
    """The buffer one of ``m``'s collectives moves for ``tokens`` tokens, whole (every
    rank's share of a gather; the summed partials of a reduction): slices × columns × the
    adapter's full rank (B's, which the gather restores) × bytes an element."""
    if m.experts > 1:
        moe = dep.model.moe
        assert moe is not None
        return float(m.slices * tokens * moe.experts_per_token * m.b_rank * INPUT_BYTES)
    return float(m.slices * tokens * m.b_rank * BUFFER_BYTES)


def lora_collective_time_s(dep: Deployment, tokens: int) -> float:
    """The step's LoRA collectives on the link: each all-gather at parallel.all_gather_time_s,
    each all-reduce at all_reduce_time_s (the base model's price), times its layers."""
    acc, devices = dep.accelerator, dep.devices_per_gpu
    total = 0.0
    for c in lora_collectives(dep, tokens):
        price = all_gather_time_s if c.kind == ALL_GATHER else all_reduce_time_s
        total += c.count * price(c.message_bytes, c.ranks, acc, devices)
    return total
