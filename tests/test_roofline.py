"""Roofline arithmetic and the roofline report."""

from __future__ import annotations

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.reports.roofline import roofline_report
from ridgeline.roofline import (
    attainable_flops,
    batch_for_intensity,
    decode_attention_intensity,
    expert_intensity,
    weight_intensity,
)


def test_attainable_flops_is_the_ramp_then_the_roof() -> None:
    assert attainable_flops(990e12, 3.35e12, 100) == pytest.approx(335e12)
    assert attainable_flops(990e12, 3.35e12, 1000) == 990e12


def test_fp8_weights_double_the_intensity_of_the_same_batch() -> None:
    assert weight_intensity(32, 1.0) == 2 * weight_intensity(32, 2.0)
    assert batch_for_intensity(weight_intensity(32, 1.0), 1.0) == 32


def test_mla_decode_attention_is_far_denser_than_gqa() -> None:
    mla = decode_attention_intensity(resolve_model("deepseek-v3"), 2.0)
    gqa = decode_attention_intensity(resolve_model("llama-3.1-70b"), 2.0)
    assert gqa == 8
    assert mla == pytest.approx(128 * 2 * (2 * 512 + 64) / ((512 + 64) * 2))  # ~242
    assert mla > 25 * gqa


def test_fp8_kv_doubles_decode_attention_intensity() -> None:
    spec = resolve_model("llama-3.1-8b")
    assert decode_attention_intensity(spec, 1.0) == 2 * decode_attention_intensity(spec, 2.0)


def test_expert_intensity_of_one_token_is_one_token_per_touched_expert() -> None:
    spec = resolve_model("mixtral-8x7b")
    assert expert_intensity(1, spec, 2.0) == pytest.approx(1.0)
    assert expert_intensity(10_000, spec, 2.0) == pytest.approx(10_000 * 2 / 8, rel=1e-6)


def test_report_places_moe_experts_when_the_model_has_them() -> None:
    acc = resolve_accelerator("h100")
    dep = Deployment.build(resolve_model("qwen3-30b-a3b"), acc, "bf16")
    report = roofline_report(acc, "bf16", 32, 4000, dep)
    names = [p.name for p in report.points]
    assert "MoE expert layers" in names
    experts = report.points[names.index("MoE expert layers")]
    weights = report.points[0]
    assert experts.intensity < weights.intensity  # each expert sees a thin slice of the batch
    assert experts.batch_to_ridge == pytest.approx(weights.batch_to_ridge / (8 / 128))
