"""The dtype each serving engine multiplies gpt-oss's MXFP4 experts at (mxfp4_matmul)."""

from __future__ import annotations

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.floors import prefill_floor
from ridgeline.hardware import blackwell_generation
from ridgeline.mxfp4_matmul import mxfp4_moe_matmul_dtypes


@pytest.mark.parametrize(("gpu", "generation"), [
    ("b200", "sm100"), ("gb200", "sm100"), ("b300", "sm100"), ("rtx-5090", "sm12x"),
    ("rtx-pro-6000-blackwell", "sm12x"), ("dgx-spark-gb10", "sm12x"), ("h200", None),
    ("mi355x", None)])
def test_blackwell_generation_tells_data_centre_from_rtx_cards(
        gpu: str, generation: str | None) -> None:
    assert blackwell_generation(resolve_accelerator(gpu)) == generation


@pytest.mark.parametrize(("engine", "gpu", "expected"), [
    ("vllm", "b200", "bf16"), ("vllm", "mi355x", "bf16"), ("vllm", "rtx-5090", "bf16"),
    ("vllm", "h100", "bf16"),
    ("sglang", "b200", "fp8"), ("sglang", "rtx-5090", "bf16"), ("sglang", "h100", "bf16"),
    ("trtllm", "b200", "fp8"), ("trtllm", "rtx-5090", "fp8"), ("trtllm", "h100", "bf16")])
def test_no_engine_runs_gpt_oss_experts_at_fp4(engine: str, gpu: str, expected: str) -> None:
    """No engine's default gpt-oss MoE kernel quantizes its activations to FP4, so a card's
    fp4 peak never prices the experts: vLLM keeps bf16 activations everywhere; SGLang
    (SM100) and TensorRT-LLM (SM 10 and up) quantize them to MXFP8, the fp8 rate; Hopper
    gets bf16 from every engine, as the format alone already said."""
    acc = resolve_accelerator(gpu)
    d = Deployment.build(resolve_model("gpt-oss-120b"), acc, engine=engine)
    assert d.expert_compute_dtype == expected
    assert d.expert_compute_dtype == acc.first_supported(mxfp4_moe_matmul_dtypes(engine, acc)
                                                         or ())


def test_llamacpp_has_no_rule_of_its_own_here() -> None:
    assert mxfp4_moe_matmul_dtypes("llama.cpp-cuda", resolve_accelerator("b200")) is None


def test_vllm_b200_prefill_floor_over_h200_is_the_bf16_peak_ratio() -> None:
    """The audit's question: gpt-oss-120b's 8,192-token prefill floor on a B200 under vLLM
    against an H200's. Compute-bound on both at bf16, it gains what the bf16 peaks give
    (2,250 ÷ 989.4 = 2.27), not the 4.7 the experts' fp4 peak had given."""
    model = resolve_model("gpt-oss-120b")
    b200, h200 = resolve_accelerator("b200"), resolve_accelerator("h200")
    fast = prefill_floor(Deployment.build(model, b200), 8192)
    slow = prefill_floor(Deployment.build(model, h200), 8192)
    assert fast.bound == slow.bound == "compute"
    assert slow.time_s / fast.time_s == pytest.approx(b200.peak("bf16") / h200.peak("bf16"),
                                                      rel=0.02)
