"""The article's floors: a decode step and a prefill, bounded by FLOPs or by bytes.

step time = max(FLOPs ÷ peak, (weight bytes read + KV bytes read) ÷ bandwidth).
Llama-3.1-70B at one byte per weight on one H100: 70.5 GB ÷ 3.35 TB/s = 21 ms, 48 tok/s.
These are lower bounds: real engines reach a fraction of peak (the calibrated model
comes later). N GPUs in tensor parallel split FLOPs, bytes and memory evenly.
"""

from __future__ import annotations

from dataclasses import dataclass

from ridgeline.deployment import Deployment
from ridgeline.explain import Step, q, step
from ridgeline.kvcache import cached_tokens, kv_footprint
from ridgeline.layouts import ATTENTION_MIXERS
from ridgeline.moe import expected_experts_touched
from ridgeline.units import GB, require_positive


def experts_fraction_read(dep: Deployment, tokens: float) -> float:
    """Share of the routed experts' bytes a step over ``tokens`` tokens reads."""
    moe = dep.model.moe
    if moe is None:
        return 1.0
    return expected_experts_touched(moe.num_experts, moe.experts_per_token, tokens) / moe.num_experts


def weight_bytes_read(dep: Deployment, tokens: float) -> float:
    """Every dense weight once, plus the experts this many tokens touch."""
    return dep.non_expert_bytes_read + dep.expert_bytes * experts_fraction_read(dep, tokens)


def attention_decode_flops(dep: Deployment, context: int) -> float:
    """One sequence's new token attending to ``context`` cached tokens, all layers.

    GQA: per head 2·C·d (QKᵀ) + 2·C·d_v (PV). MLA (absorbed): per head
    2·C·(r_kv + d_rope) + 2·C·r_kv, every head over the shared latent.
    """
    att = dep.model.attention
    if att is None:
        return 0.0
    if att.mla:
        per_token = att.num_heads * 2 * (2 * att.mla.kv_lora_rank + att.mla.qk_rope_head_dim)
    else:
        per_token = att.num_heads * 2 * (att.head_dim + att.v_head_dim)
    return sum(
        per_token * cached_tokens(layer, context)
        for layer in dep.model.layers if layer.mixer in ATTENTION_MIXERS
    )


def causal_pairs(prompt_len: int, window: int | None) -> int:
    """Query-key pairs of causal attention: Σ min(i, w) over i = 1..S (S(S+1)/2 unwindowed)."""
    if window is None or prompt_len <= window:
        return prompt_len * (prompt_len + 1) // 2
    return window * (window + 1) // 2 + (prompt_len - window) * window


def attention_prefill_flops(dep: Deployment, prompt_len: int) -> float:
    """One prompt's causal attention: per head 2·pairs·(d + d_v), every attention layer."""
    att = dep.model.attention
    if att is None:
        return 0.0
    per_pair = att.num_heads * 2 * (att.head_dim + att.v_head_dim)
    return sum(
        per_pair * causal_pairs(prompt_len, layer.window_tokens)
        for layer in dep.model.layers if layer.mixer in ATTENTION_MIXERS
    )


@dataclass(frozen=True)
class FitCheck:
    weight_bytes: float
    kv_bytes: float
    capacity_bytes: float

    @property
    def needed_bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.capacity_bytes

    @property
    def shortfall_bytes(self) -> float:
        return max(0.0, self.needed_bytes - self.capacity_bytes)

    def headline(self) -> str:
        if self.fits:
            return (f"fits: {self.needed_bytes / GB:.1f} GB of weights and KV cache in "
                    f"{self.capacity_bytes / GB:.1f} GB (raw capacity, before engine overheads)")
        return (f"DOES NOT FIT: {self.weight_bytes / GB:.1f} GB of weights + "
                f"{self.kv_bytes / GB:.1f} GB of KV cache = {self.needed_bytes / GB:.1f} GB "
                f"> {self.capacity_bytes / GB:.1f} GB of memory, short by "
                f"{self.shortfall_bytes / GB:.1f} GB")


@dataclass(frozen=True)
class DecodeFloor:
    batch: int
    context: int
    flops: float
    weight_bytes_read: float
    kv_bytes_read: float
    compute_time_s: float
    memory_time_s: float
    fit: FitCheck
    steps: tuple[Step, ...]

    @property
    def step_time_s(self) -> float:
        return max(self.compute_time_s, self.memory_time_s)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_time_s > self.memory_time_s else "memory bandwidth"

    @property
    def per_user_tok_s(self) -> float:
        return 1.0 / self.step_time_s

    @property
    def aggregate_tok_s(self) -> float:
        return self.batch / self.step_time_s

    @property
    def intensity_flop_per_byte(self) -> float:
        return self.flops / (self.weight_bytes_read + self.kv_bytes_read)


def decode_floor(dep: Deployment, batch: int, context: int) -> DecodeFloor:
    """One decode step for ``batch`` sequences, each with ``context`` tokens cached."""
    require_positive(batch, "batch")
    require_positive(context, "context length")
    footprint = kv_footprint(dep.model, context, dep.kv.bytes_per_element)
    kv_per_seq = footprint.bytes_per_sequence * dep.kv_replication
    weights_read = weight_bytes_read(dep, batch)
    kv_read = batch * kv_per_seq
    flops = batch * (2 * dep.matmul_params_per_token + attention_decode_flops(dep, context))
    compute_s = flops / dep.peak_flops_per_s
    memory_s = (weights_read + kv_read) / dep.bandwidth_bytes_per_s
    fit = FitCheck(dep.weight_bytes, kv_read, dep.memory_bytes)
    acc = dep.accelerator
    src = acc.sources[0] if acc.sources else acc.id
    bw = q("bandwidth", dep.bandwidth_bytes_per_s / 1e12, "TB/s",
           f"{dep.num_gpus} x {acc.id}: {src}")
    steps = (
        step("weight bytes read", "Σ params × bytes per weight (experts: the share B tokens touch)",
             q("weights read", weights_read / GB, "GB"),
             q("weight format", dep.weights.label),
             q("bytes per weight (average read)", dep.bytes_per_weight, "B")),
        step("KV bytes read", "batch × KV bytes per sequence at this context",
             q("KV read", kv_read / GB, "GB"), q("batch", batch),
             q("KV per sequence", kv_per_seq / 1e6, "MB",
               f"{dep.kv.id} cache, {context} tokens"),),
        step("memory time", "(weights read + KV read) ÷ bandwidth",
             q("memory time", memory_s * 1e3, "ms"),
             q("bytes", (weights_read + kv_read) / GB, "GB"), bw),
        step("compute time", "batch × (2 × params per token + attention FLOPs) ÷ peak",
             q("compute time", compute_s * 1e3, "ms"), q("FLOPs", flops / 1e12, "TFLOP"),
             q(f"peak {dep.compute_dtype}", dep.peak_flops_per_s / 1e12, "TFLOP/s", src)),
        step("step time", "max(compute time, memory time)",
             q("step", max(compute_s, memory_s) * 1e3, "ms")),
        step("tokens per second", "per user = 1 ÷ step; aggregate = batch ÷ step",
             q("per user", 1 / max(compute_s, memory_s), "tok/s"),
             q("aggregate", batch / max(compute_s, memory_s), "tok/s")),
    )
    return DecodeFloor(batch, context, flops, weights_read, kv_read, compute_s, memory_s, fit, steps)


@dataclass(frozen=True)
class PrefillFloor:
    prompt_len: int
    batch: int
    flops: float
    bytes_moved: float
    compute_time_s: float
    memory_time_s: float
    fit: FitCheck
    steps: tuple[Step, ...]

    @property
    def time_s(self) -> float:
        return max(self.compute_time_s, self.memory_time_s)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_time_s > self.memory_time_s else "memory bandwidth"

    @property
    def tokens_per_s(self) -> float:
        return self.batch * self.prompt_len / self.time_s

    @property
    def intensity_flop_per_byte(self) -> float:
        return self.flops / self.bytes_moved


def prefill_floor(dep: Deployment, prompt_len: int, batch: int = 1) -> PrefillFloor:
    """Prefill ``batch`` prompts of ``prompt_len`` tokens in one pass: the TTFT floor."""
    require_positive(prompt_len, "prompt length")
    require_positive(batch, "batch")
    tokens = batch * prompt_len
    footprint = kv_footprint(dep.model, prompt_len, dep.kv.bytes_per_element)
    kv_written = batch * footprint.bytes_per_sequence * dep.kv_replication
    weights_read = weight_bytes_read(dep, tokens)
    linear_flops = 2 * dep.matmul_params_per_token * tokens
    flops = linear_flops + batch * attention_prefill_flops(dep, prompt_len)
    bytes_moved = weights_read + kv_written
    compute_s = flops / dep.peak_flops_per_s
    memory_s = bytes_moved / dep.bandwidth_bytes_per_s
    fit = FitCheck(dep.weight_bytes, kv_written, dep.memory_bytes)
    steps = (
        step("FLOPs", "2 × params per token × tokens + causal attention",
             q("FLOPs", flops / 1e12, "TFLOP"), q("tokens", tokens),
             q("params per token", dep.matmul_params_per_token / 1e9, "B")),
        step("bytes", "weights read once + KV written",
             q("bytes", bytes_moved / GB, "GB"), q("weights read", weights_read / GB, "GB"),
             q("KV written", kv_written / GB, "GB")),
        step("intensity", "FLOPs ÷ bytes", q("intensity", flops / bytes_moved, "FLOP/byte")),
        step("prefill time", "max(FLOPs ÷ peak, bytes ÷ bandwidth)",
             q("time", max(compute_s, memory_s) * 1e3, "ms"),
             q(f"peak {dep.compute_dtype}", dep.peak_flops_per_s / 1e12, "TFLOP/s"),
             q("bandwidth", dep.bandwidth_bytes_per_s / 1e12, "TB/s")),
    )
    return PrefillFloor(prompt_len, batch, flops, bytes_moved, compute_s, memory_s, fit, steps)
