"""A step's work: its FLOPs and bytes over all GPUs, summed from step_cost's operators, and
what they are for (weights, KV, activations, the host's share; the weight matmuls, attention,
the matmuls each tensor-parallel rank repeats, each matmul dtype's FLOPs). The floors
(floors.py) divide these totals by the peak and the bandwidth; --explain splits them so.
Llama-3.1-8B, batch 32 at 16,000 tokens: 480.3 GFLOP of weight matmuls + 268.5 GFLOP of
attention = 0.7488 TFLOP.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ridgeline.cost import (
    CPU_OFFLOAD_READ,
    IN_HOST_MEMORY,
    INDEXER_OP,
    NORM_BYTES,
    OVER_HOST_LINK,
    WEIGHT_OPS,
    OpCost,
    Seq,
    attention_activation_bytes,
    host_floor_s,
    indexer_logit_traffic_bytes,
    op_compute_dtype,
    op_slowdown,
    step_cost,
)
from ridgeline.cpu_offload import hbm_spared_bytes
from ridgeline.deployment import Deployment
from ridgeline.expert_ranks import physical_experts_touched
from ridgeline.lora_step import LORA_OP
from ridgeline.moe import expected_experts_touched
from ridgeline.offload import placed_layers
from ridgeline.params import count_params, layer_params
from ridgeline.quantization import EMBEDDING, LM_HEAD, OTHER

# what a step's host time waits on (Work.host_bound): the CPU's memory, or the link a
# prompt copies host-held weights over
HOST_MEMORY_BOUND = "host memory"
HOST_LINK_BOUND = "the host link"
_KV_OPS = ("attention", INDEXER_OP, "recurrent state")
_WEIGHT_OPS = tuple(op for op in WEIGHT_OPS if op != "lm head")  # its logits are activations


def experts_fraction_read(dep: Deployment, tokens: float) -> float:
    """Share of the routed experts' bytes a step over ``tokens`` tokens reads, over all the
    GPUs: under EPLB with redundant experts, of the physical experts they reach (more than
    the logical experts touched where two copies of one are: physical_experts_touched)."""
    moe = dep.model.moe
    if moe is None:
        return 1.0
    touched = expected_experts_touched(moe.num_experts, moe.experts_per_token, tokens)
    return physical_experts_touched(moe.num_experts, dep.eplb_redundant_experts,
                                    touched) / moe.num_experts


def weight_bytes_read(dep: Deployment, tokens: float) -> float:
    """Every dense weight once, plus the experts this many tokens touch, plus the copies of
    what each tensor-parallel rank keeps whole."""
    return dep.non_expert_bytes_read + dep.expert_bytes * experts_fraction_read(dep, tokens) \
        + dep.tp_copies_bytes


@dataclass(frozen=True)
class DtypeFlops:
    """One matmul dtype's share of a step's FLOPs, over all GPUs, and its operators."""

    dtype: str
    flops: float
    ops: tuple[str, ...]
    # one GPU's peak they run at (Deployment.peak_at; attention's own where it differs,
    # Deployment.attention_peak_flops_per_s) and the name --explain gives them ("" : dtype)
    peak_flops_per_s: float = 0.0
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or self.dtype


@dataclass(frozen=True)
class Work:
    """A step's FLOPs and bytes over all GPUs, from step_cost's operators."""

    flops: float
    weight_bytes: float
    kv_bytes: float
    other_bytes: float  # activations, logits
    # the FLOPs at the step's compute dtype's rate: a weight matmul that runs at another
    # dtype (Deployment.compute_dtype_of) counts × the step's peak ÷ its own (gpt-oss's bf16
    # attention in an fp4 step on a B200: × 4; Qwen3.6-NVFP4's fp8 attention in a bf16 step: × ½)
    paced_flops: float
    host_bytes: float = 0.0  # of all these, what the CPU reads in host memory (offload)
    link_bytes: float = 0.0  # and what a prompt step copies over the host link
    host_time_s: float = 0.0  # moving both at the host's rated bandwidth and link
    expert_weight_bytes: float = 0.0  # of the weights, the routed experts' (in weight_bytes)
    # the HBM reads the host's share spares: None, all of it (llama.cpp's host layers are read
    # by the CPU or copied over); --cpu-offload-gb: the offloaded share of the weights read
    hbm_spared_bytes: float | None = None
    # vLLM --enable-lora's part: the active adapters' A and B, the shrink's input and buffer,
    # the output the expand adds into (lora_step.py)
    lora_bytes: float = 0.0
    # of the FLOPs, the weights' matmuls (2 × the weights a token passes, LM head included)
    # and attention's QKᵀ and PV over the cache: --explain's split of the compute time
    weight_flops: float = 0.0
    attention_flops: float = 0.0
    # of weight_flops, the matmuls the tensor-parallel ranks each repeat beyond one copy
    # (routers, MLA's down-projections, K/V heads past their count: rank_params keeps them
    # whole), so the rest is 2 × the matmul weights a token passes (repeated_matmul_flops)
    repeated_flops: float = 0.0
    # the FLOPs at each matmul dtype (op_compute_dtype), with the operators that run there,
    # the step's own dtype first: the compute time is the sum of each ÷ its peak
    flops_by_dtype: tuple[DtypeFlops, ...] = ()

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes + self.other_bytes + self.lora_bytes

    @property
    def gpu_bytes(self) -> float:
        spared = self.host_bytes + self.link_bytes if self.hbm_spared_bytes is None \
            else self.hbm_spared_bytes
        return max(0.0, self.bytes - spared)

    @property
    def host_bound(self) -> str:
        """What the host time waits on: the CPU's memory, or the link a prompt copies over."""
        return HOST_LINK_BOUND if self.link_bytes > self.host_bytes else HOST_MEMORY_BOUND


def step_work(dep: Deployment, batch: list[Seq]) -> Work:
    """Sum step_cost's per-rank operators over the tensor-parallel ranks. The floor's
    attention never writes its scores out (an engine without flash attention does: that
    is the engine's cost, not the floor's)."""
    if not dep.flash_attention:
        dep = replace(dep, flash_attention=True)
    cost = step_cost(dep, batch)
    tp = dep.tensor_parallel_size

    def base(name: str) -> str:  # "mlp (host memory)" is the mlp's work on the host
        return name.split(" (")[0]

    total = cost.bytes * tp
    weights = sum(op.bytes for op in cost.ops if base(op.name) in _WEIGHT_OPS) * tp
    kv = sum(op.bytes for op in cost.ops if base(op.name) in _KV_OPS) * tp
    kv -= attention_activation_bytes(dep, cost.tokens) * tp  # queries in, outputs out
    kv -= indexer_logit_traffic_bytes(dep, batch) * tp  # a sparse layer's logits
    head = "embedding" if dep.model.tie_word_embeddings else "lm_head"
    head_bytes = dep.bytes_by_category[head]  # lm head's weights (its logits are activations)
    if dep.gathered(head):  # SGLang's DP attention: a rank's GPUs hold their share of it
        head_bytes *= tp / dep.expert_ranks
    weights += head_bytes
    weights += sum(count * layer_params(dep.model, layer)[OTHER] * NORM_BYTES
                   for layer, _, count in placed_layers(dep))  # norms and biases, read too
    host = sum(op.bytes for op in cost.ops if op.name.endswith(f"({IN_HOST_MEMORY})")) * tp
    link = sum(op.bytes for op in cost.ops if op.name.endswith(f"({OVER_HOST_LINK})")) * tp
    host_s = host_floor_s(dep, batch) if host or link else 0.0
    paced = sum(op.flops * op_slowdown(dep, op.name) for op in cost.ops) * tp
    experts = sum(op.bytes for op in cost.ops if base(op.name) == "experts") * tp
    # --cpu-offload-gb: weights in the matmuls' bytes, read over the link instead of from HBM
    offloaded = sum(op.bytes for op in cost.ops if op.name == CPU_OFFLOAD_READ) * tp
    # of the layers' weights the step reads (an MoE's touched experts), the offloaded share
    spared = hbm_spared_bytes(dep, weights - head_bytes - experts, experts) \
        if dep.cpu_offload else None
    lora = sum(op.bytes for op in cost.ops if op.name == LORA_OP) * tp
    weight_flops = sum(op.flops for op in cost.ops if base(op.name) in WEIGHT_OPS) * tp
    attention_flops = sum(op.flops for op in cost.ops
                          if base(op.name) in ("attention", INDEXER_OP)) * tp
    head_flops = sum(op.flops for op in cost.ops if base(op.name) == "lm head") * tp
    repeated = repeated_matmul_flops(dep, weight_flops, head_flops, cost.tokens)
    return Work(cost.flops * tp, weights, kv, total - weights - kv - offloaded - lora, paced,
                host, link, host_s, experts, spared, lora, weight_flops, attention_flops,
                repeated, _flops_by_dtype(dep, cost.ops, tp))


def _flops_by_dtype(dep: Deployment, ops: Sequence[OpCost], tp: int) -> tuple[DtypeFlops, ...]:
    """Each matmul dtype's FLOPs over the ``tp`` ranks and the operators that run at it
    (op_compute_dtype, as op_slowdown paces them), the step's compute dtype first."""
    step = (dep.compute_dtype, dep.compute_dtype)
    flops: dict[tuple[str, str], float] = {step: 0.0}
    names: dict[tuple[str, str], list[str]] = {step: []}
    for op in ops:
        dtype = op_compute_dtype(dep, op.name)
        # attention apart where its peak is its own (llama.cpp's fp32-accumulated scores)
        key = (dtype, f"{dtype} attention") if op.name.split(" (")[0] == "attention" and \
            dep.attention_peak_flops_per_s != dep.peak_at(dtype) else (dtype, dtype)
        flops[key] = flops.get(key, 0.0) + op.flops * tp
        if op.flops and op.name not in names.setdefault(key, []):
            names[key].append(op.name)
    return tuple(DtypeFlops(d, f, tuple(names[(d, label)]),
                            dep.attention_peak_flops_per_s if label != d else dep.peak_at(d),
                            "" if label == d else label)
                 for (d, label), f in flops.items() if f or (d, label) == step)


def matmul_weights_per_token(dep: Deployment) -> float:
    """The weights a token multiplies against below the LM head, 2 FLOP each: the matmul
    params per token less the LM head and the norms (a norm's scale is no matmul weight)."""
    return (dep.matmul_params_per_token - head_params(dep)
            - count_params(dep.model).by_category[OTHER])


def repeated_matmul_flops(dep: Deployment, weight_flops: float, head_flops: float,
                          tokens: int) -> float:
    """Of the weight matmuls' FLOPs summed over the tensor-parallel ranks, those beyond one
    copy: what each rank keeps whole and runs on every token (routers, MLA's
    down-projections, K/V heads past their count; under expert parallelism also the busiest
    rank's skew, which every rank is counted at). DeepSeek-V3 at TP8, an 8,192-token
    prompt: 2 × 8,192 × 1.03 B of down-projections and router × 7 more copies ≈ 118 TFLOP.
    0 on one GPU and under data-parallel attention (its ranks see other tokens)."""
    if dep.tensor_parallel_size == 1 or dep.data_parallel_size > 1:
        return 0.0
    repeated = weight_flops - head_flops - 2 * tokens * matmul_weights_per_token(dep)
    return repeated if repeated > 1e-6 * weight_flops else 0.0


def head_params(dep: Deployment) -> float:
    """The LM head's weights (a tied one is the embedding table)."""
    counts = count_params(dep.model).by_category
    return float(counts[EMBEDDING] if dep.model.tie_word_embeddings else counts[LM_HEAD])
