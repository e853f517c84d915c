"""The ridge of the weights every token reads, shown: one dtype's ridge point, or, where
their matmuls run at several dtypes (a mixed-precision checkpoint's fp8 attention beside its
bf16 layers), the weighted sum that blends their peaks and the ridge it gives.

The blended peak is Deployment.dense_peak_flops_per_s; its ridge × bytes per weight ÷ 2 is
the batch at which the matmuls' time, batch × Σ 2 × weights ÷ peak, equals the weights'
read time (nvidia/Qwen3.6-35B-A3B-NVFP4 on an H200: 134, between bf16's 90 and fp8's 180).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ridgeline.explain import Step, q, step
from ridgeline.roofline import RIDGE_BATCH_DIGITS, first_whole_batch, ridge_point, ridge_step

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment


def engine_ridge_step(dep: Deployment, dtype: str) -> Step:
    """ridge_step at the peak ``dep``'s engine runs ``dtype`` at (Deployment.peak_at), the
    step's price's: llama.cpp's CUDA build on an RTX 4090, fp16 at 330.4 TFLOP/s, ridge 328."""
    return ridge_step(dep.accelerator, dtype, dep.peak_at(dtype), dep.peak_note_at(dtype))


def dense_ridge_steps(dep: Deployment) -> tuple[Step, ...]:
    """The explain steps of ``dep``'s dense ridge: ridge_step at its one dtype; blended, the
    blended peak with each matmul category's weights, dtype and peak, then the ridge."""
    acc = dep.accelerator
    if not dep.dense_blended:
        return (engine_ridge_step(dep, dep.dense_compute_dtype),)
    peak = dep.dense_peak_flops_per_s
    bandwidth = acc.memory_bandwidth_bytes_per_s
    parts = [q(f"{category} at {acc.resolve_dtype(dtype)}", n / 1e9, "B weights",
               f"its peak {dep.peak_at(dtype) / 1e12:,.1f} TFLOP/s (dense)")
             for category, n, dtype in dep.dense_matmuls]
    total = sum(n for _, n, _ in dep.dense_matmuls)
    return (
        step("dense matmuls' blended peak", "2 FLOP × Σ weights ÷ one token's matmuls, "
             "Σ 2 FLOP × weights ÷ peak at their dtype: each weight does 2 FLOP a token at its "
             "category's rate, so the matmuls together take batch × Σ 2 × weights ÷ peak",
             q("blended peak", peak / 1e12, "TFLOP/s", acc.source_of("peak_flops")),
             q("Σ weights", total / 1e9, "B weights", "the matmuls every token runs"),
             q("one token's matmuls", 2 * total / peak * 1e6, "µs",
               "Σ 2 FLOP × weights ÷ peak, over the categories below"),
             *parts),
        step("ridge point (dense weights, blended)", "blended peak ÷ memory bandwidth: the "
             "batch it gives, ridge × bytes per weight ÷ 2, is where the matmuls' time equals "
             "the weights' read time",
             q("ridge", ridge_point(peak, bandwidth), "FLOP/byte"),
             q(f"blended peak ({dep.dense_dtype_label})", peak / 1e12, "TFLOP/s"),
             q("memory bandwidth", bandwidth / 1e12, "TB/s",
               acc.source_of("memory_bandwidth_bytes_per_s"))),
    )


def ridge_batch_step(dep: Deployment) -> Step:
    """The ridge batch fit, utilization and decode's card table print: ⌈ridge × bytes per
    weight ÷ 2⌉, the first whole batch whose tokens, sharing each read of the weights, do 2
    FLOP a weight for every byte the ridge asks (Llama-3.1-8B bf16 on an H200: 206.1 × 2 ÷ 2
    → 207)."""
    ridge_batch = dep.dense_ridge_batch
    return step("ridge batch", "⌈ridge × bytes per weight ÷ 2 FLOP⌉: the first whole batch "
                "whose tokens, sharing each read of the weights every token reads, reach the "
                "ridge",
                q("batch", first_whole_batch(ridge_batch)),
                q("ridge", dep.dense_ridge_flop_per_byte, "FLOP/byte"),
                q("bytes per weight", dep.bytes_per_weight_split[0], "B",
                  f"{dep.weights.label}; all but the routed experts and the input embedding"
                  if dep.model.moe else f"{dep.weights.label}; {dep.params_read_note}"),
                q("ridge × bytes per weight ÷ 2", ridge_batch, digits=RIDGE_BATCH_DIGITS))
