"""The roofline: ridge point, attainable FLOP/s, and where each part of a step sits.

Ridge point = peak FLOP/s ÷ memory bandwidth: H100 SXM 989.4e12 / 3.35e12 = 295 FLOP/byte.
Decode's weight matrices do 2 FLOP per weight per token and read each weight once per
step, so their intensity is 2·B / bytes_per_weight: B at bf16, the batch itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ridgeline.explain import Step, q, step
from ridgeline.hardware import Accelerator
from ridgeline.kvcache import kv_replication
from ridgeline.model import ModelSpec
from ridgeline.moe import expected_experts_touched
from ridgeline.units import require_positive


def ridge_point(peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """FLOP per byte where compute and memory take equal time: an H100 SXM's 989.4e12 bf16
    FLOP/s over 3.35e12 B/s is 295.3. Each figure must be a positive, finite number in base
    units (a zero, a negative, nan or inf raises InputError naming the argument)."""
    require_positive(peak_flops_per_s, "peak_flops_per_s")
    require_positive(bandwidth_bytes_per_s, "bandwidth_bytes_per_s")
    return peak_flops_per_s / bandwidth_bytes_per_s


def blended_peak_flops_per_s(weights_and_peaks: Sequence[tuple[float, float]]) -> float:
    """The one peak matmuls at several rates reach together, each weight doing 2 FLOP a token
    at its own peak: Σ weights ÷ Σ (weights ÷ peak), the weighted harmonic mean, so that the
    time they take together is their FLOPs over it. One rate is that rate, exactly.
    nvidia/Qwen3.6-35B-A3B-NVFP4's dense matmuls on an H200: 0.66 B weights at bf16's 989.4,
    1.28 B at fp8's 1,978.9 TFLOP/s: 1,479 TFLOP/s."""
    peaks = {peak for _, peak in weights_and_peaks}
    if len(peaks) == 1:
        return peaks.pop()
    return sum(n for n, _ in weights_and_peaks) / sum(n / peak for n, peak in weights_and_peaks)


def attainable_flops_per_s(peak_flops_per_s: float, bandwidth_bytes_per_s: float,
                           intensity: float) -> float:
    """min(peak, intensity × bandwidth): the roof and the ramp."""
    return min(peak_flops_per_s, intensity * bandwidth_bytes_per_s)


def weight_intensity(tokens: float, bytes_per_weight: float) -> float:
    """2 FLOP per weight per token ÷ bytes per weight: batch 32 at bf16 -> 32 FLOP/byte."""
    return 2.0 * tokens / bytes_per_weight


def arithmetic_share(tokens: float, bytes_per_weight: float, ridge: float) -> float:
    """The share of the arithmetic a step of ``tokens`` sharing each weight read puts to use:
    its weight intensity ÷ the ridge, at most 1 (batch 32 at bf16 on an H100: 32/295 = 11 %)."""
    return min(1.0, weight_intensity(tokens, bytes_per_weight) / ridge)


def batch_for_intensity(intensity: float, bytes_per_weight: float) -> float:
    """Tokens per weight read needed for an intensity (inverse of weight_intensity)."""
    return intensity * bytes_per_weight / 2.0


def expert_ridge_batch(acc: Accelerator, expert_dtype: str, expert_bytes_per_weight: float,
                       routed_fraction: float, peak_flops_per_s: float | None = None) -> float:
    """The article's batch at which an MoE model's routed experts reach the ridge: the ridge
    batch at the experts' matmul dtype and bytes per weight ÷ (k/E), each expert seeing k/E
    of the batch (Qwen3.6-35B-A3B at bf16 on an H100: 295 ÷ (8/256) ≈ 9,450). At
    ``peak_flops_per_s`` where given (Deployment.peak_at: the engine's), else the catalog's."""
    peak = acc.peak(expert_dtype) if peak_flops_per_s is None else peak_flops_per_s
    ridge = ridge_point(peak, acc.memory_bandwidth_bytes_per_s)
    return batch_for_intensity(ridge, expert_bytes_per_weight) / routed_fraction


def decode_attention_intensity(spec: ModelSpec, kv_bytes_per_element: float,
                               tensor_parallel_size: int = 1) -> float:
    """FLOP per KV byte in decode attention; constant in batch (each user has their own cache).

    GQA: each K/V element serves `group` query heads with 2 FLOP (QKᵀ and PV):
    2·group / bytes = 8 for group 8 at bf16. MLA (absorbed): every head reads the shared
    latent, n_heads · 2·(2·r_kv + d_rope) FLOP per (r_kv + d_rope) elements. Under tensor
    parallelism the heads split over the ranks but a replicated cache is read on each of
    them, so the intensity falls by the replication (kv_replication): DeepSeek-V3's latent at
    TP8 serves 16 heads per rank, 241.8 ÷ 8 = 30.2 FLOP/byte at bf16.
    """
    att = spec.attention
    if att is None:
        return 0.0
    replication = kv_replication(spec, tensor_parallel_size)
    m = att.cached_latent
    if m:
        flops = att.num_heads * 2 * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
        return flops / ((m.kv_lora_rank + m.qk_rope_head_dim) * kv_bytes_per_element
                        * replication)
    return 2.0 * att.group_size / (kv_bytes_per_element * replication)


def expert_intensity(batch: int, spec: ModelSpec, bytes_per_weight: float) -> float:
    """Tokens each touched expert sees, as FLOP per byte: 2·B·k / (E_touched(B) · bytes)."""
    moe = spec.moe
    if moe is None or batch == 0:  # no tokens: no expert read, no arithmetic
        return weight_intensity(batch, bytes_per_weight)
    touched = expected_experts_touched(moe.num_experts, moe.experts_per_token, batch)
    return 2.0 * batch * moe.experts_per_token / (touched * bytes_per_weight)


@dataclass(frozen=True)
class OperatingPoint:
    name: str
    intensity: float  # FLOP per byte
    attainable_flops_per_s: float
    fraction_of_peak: float  # share of the card's arithmetic this part can use
    batch_to_ridge: float | None  # batch at which this part reaches the ridge; None = never
    note: str = ""
    dtype: str = ""  # the matmuls' dtype, whose peak fraction_of_peak is of
    peak_flops_per_s: float = 0.0  # that peak


@dataclass(frozen=True)
class RooflineReport:
    accelerator: str
    compute_dtype: str
    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    ridge_flop_per_byte: float
    batch: int
    points: tuple[OperatingPoint, ...]
    steps: tuple[Step, ...]


def operating_point(
    name: str, intensity: float, acc: Accelerator, dtype: str,
    batch_to_ridge: float | None, note: str = "", peak_flops_per_s: float | None = None,
) -> OperatingPoint:
    """A part of the step on the roofline under ``dtype``'s peak, or under
    ``peak_flops_per_s`` where given (a blend of dtypes, ``dtype`` then its label)."""
    peak = acc.peak(dtype) if peak_flops_per_s is None else peak_flops_per_s
    bandwidth = acc.memory_bandwidth_bytes_per_s
    attainable = attainable_flops_per_s(peak, bandwidth, intensity)
    return OperatingPoint(name, intensity, attainable, attainable / peak, batch_to_ridge, note,
                          acc.resolve_dtype(dtype) if peak_flops_per_s is None else dtype, peak)


def ridge_step(acc: Accelerator, dtype: str, peak_flops_per_s: float | None = None,
               peak_note: str = "") -> Step:
    """The ridge point's explain step at ``dtype``'s catalog peak, or at ``peak_flops_per_s``
    where given (an engine's, Deployment.peak_at), ``peak_note`` saying why."""
    peak = acc.peak(dtype) if peak_flops_per_s is None else peak_flops_per_s
    bandwidth = acc.memory_bandwidth_bytes_per_s
    return step(
        "ridge point", "peak FLOP/s ÷ memory bandwidth",
        q("ridge", ridge_point(peak, bandwidth), "FLOP/byte"),
        q(f"peak {acc.resolve_dtype(dtype)} (dense)", peak / 1e12, "TFLOP/s",
          "; ".join(filter(None, (acc.source_of("peak_flops"), peak_note)))),
        q("memory bandwidth", bandwidth / 1e12, "TB/s",
          acc.source_of("memory_bandwidth_bytes_per_s")),
    )


# the significant digits --explain shows a fractional ridge batch to, so that ⌈it⌉ repeats
# from the text where four would round across a whole number (1,000.4 shows as "1,000")
RIDGE_BATCH_DIGITS = 6


def first_whole_batch(batch: float) -> int:
    """The first whole batch at or past a fractional one (295.3 on an H100: 296 reaches the
    ridge, 295 stops at 99.9 %)."""
    return math.ceil(batch - 1e-9)
