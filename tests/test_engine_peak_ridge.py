"""One deployment, one peak: the ridge every command judges a batch by divides the peak the
step is priced at (Deployment.peak_at). llama.cpp's CUDA build multiplies fp16 with fp16
accumulation (ggml-cuda's cuBLAS path asks for CUBLAS_COMPUTE_16F), which an RTX 4090 runs
at 330.4 TFLOP/s, twice the 165.2 its spec sheet quotes with fp32 accumulation; roofline,
fit, utilization and the page had judged the ridge at the 165.2 while decode priced the
matmuls at the 330.4 (Qwen2.5-7B q4_k_m: ridge batch 50, yet batch 60 memory-bound)."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.dense_ridge import engine_ridge_step
from ridgeline.floors import decode_floor
from ridgeline.roofline import expert_ridge_batch, ridge_point


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def llamacpp(model: str, weights: str = "q4_k_m", gpu: str = "rtx-4090") -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), weights,
                            engine="llama.cpp-cuda")


def test_qwen25_7b_q4_k_m_on_a_4090_under_llamacpp_reaches_the_ridge_at_100_everywhere(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The price's peak, 330.4 TFLOP/s ÷ 1.008 TB/s = 327.8 FLOP/byte, × 0.605 bytes a weight
    ÷ 2 = 99.2: roofline, fit, utilization and the page all say 100 (they said 50)."""
    dep = llamacpp("qwen2.5-7b")
    acc = dep.accelerator
    peak = dep.peak_flops_per_s
    assert peak == acc.fp16_accumulate_flops
    # what decode prices the step's weight matmuls at; attention's QKᵀ accumulates in fp32
    # (Deployment.attention_peak_flops_per_s: 220.3), so the step's FLOPs together reach less
    assert dep.attention_peak_flops_per_s == pytest.approx(2 / (1 / 165.2e12 + 1 / 330.4e12))
    assert dep.attention_peak_flops_per_s < decode_floor(dep, 8, 4000).step_peak_flops_per_s \
        < peak
    ridge = ridge_point(peak, acc.memory_bandwidth_bytes_per_s)
    batch = ridge * dep.bytes_per_weight_split[0] / 2
    assert dep.dense_ridge_batch == pytest.approx(batch)
    flags = ("--gpu", "rtx-4090", "--engine", "llama.cpp", "--weights", "q4_k_m")
    roof = run_json(capsys, "roofline", "--model", "qwen2.5-7b", *flags)
    assert roof["ridge_flop_per_byte"] == pytest.approx(ridge)
    assert roof["points"][0]["batch_to_ridge"] == pytest.approx(batch)
    assert run_json(capsys, "fit", "qwen2.5-7b", *flags)["batch_to_ridge"] \
        == pytest.approx(batch)
    use = run_json(capsys, "utilization", "--model", "qwen2.5-7b", *flags, "--running", "60",
                   "--context", "4000")
    assert use["ridge_flop_per_byte"] == pytest.approx(ridge)
    assert use["first_whole_batch_to_ridge"] == 100 == roof["points"][0]["first_whole_batch_to_ridge"]
    # 60 running uses 60 ÷ 99.2 of the arithmetic, not all of it
    assert use["fraction_of_arithmetic"] == pytest.approx(60 / batch)
    page = run_json(capsys, "page", "qwen2.5-7b", "--gpu", "rtx-4090", "--counts", "1",
                    "--engine", "llama.cpp", "--weights", "q4_k_m")
    assert page["batch_to_ridge"] == pytest.approx(batch)


def test_under_the_ridge_batch_decodes_floor_is_memory_bound_and_past_it_compute_bound() -> None:
    """Where the ridge says the weights reach it, the priced floor's matmuls do too: with a
    short context (little KV), the floor turns compute-bound past the ridge batch, not before."""
    dep = llamacpp("qwen2.5-7b")
    whole = int(dep.dense_ridge_batch) + 1
    assert decode_floor(dep, whole - 10, 1).bound == "memory bandwidth"
    assert decode_floor(dep, 2 * whole, 1).bound == "compute"


def test_a_moe_models_experts_reach_their_ridge_at_the_priced_peak_under_llamacpp(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-30B-A3B q4_k_m on a 4090 under llama.cpp: fit's and roofline's expert ridge batch
    is at fp16 accumulate's 330.4 TFLOP/s, twice the batch the catalog's 165.2 gives."""
    dep = llamacpp("qwen3-30b-a3b")
    moe = dep.model.moe
    assert moe is not None
    acc, dtype = dep.accelerator, dep.expert_compute_dtype
    bpw = dep.bytes_per_weight_split[1]
    priced = expert_ridge_batch(acc, dtype, bpw, moe.routed_fraction, dep.peak_at(dtype))
    assert priced == pytest.approx(2 * expert_ridge_batch(acc, dtype, bpw, moe.routed_fraction),
                                   rel=1e-3)
    flags = ("--gpu", "rtx-4090", "--engine", "llama.cpp", "--weights", "q4_k_m")
    assert run_json(capsys, "fit", "qwen3-30b-a3b", *flags)["expert_batch_to_ridge"] \
        == pytest.approx(priced)
    roof = run_json(capsys, "roofline", "--model", "qwen3-30b-a3b", *flags)
    experts = next(p for p in roof["points"] if p["name"] == "MoE expert layers")
    assert experts["batch_to_ridge"] == pytest.approx(priced)


def test_roofline_names_the_engines_peak_in_its_header_and_llamacpps_line_only_for_a_card(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Under llama.cpp the header is the priced peak, with why; under vLLM on the same card,
    the catalog's, with no word on llama.cpp (a deployment names its own engine); the card
    alone keeps the line saying where llama.cpp's ridge is."""
    dep = llamacpp("qwen2.5-7b")
    assert main(["roofline", "--model", "qwen2.5-7b", "--gpu", "rtx-4090", "--engine",
                 "llama.cpp", "--weights", "q4_k_m"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"rtx-4090: {dep.peak_at('fp16') / 1e12:,.1f} TFLOP/s (fp16, dense)")
    assert dep.peak_note_at("fp16") in out
    for argv in (["--model", "qwen2.5-7b", "--engine", "vllm"], []):
        assert main(["roofline", "--gpu", "rtx-4090", *argv]) == 0
        said = "llama.cpp's CUDA build multiplies fp16" in capsys.readouterr().out
        assert said == (not argv)


def test_the_ridges_explain_step_names_the_engines_peak() -> None:
    """--explain's ridge point under llama.cpp on a 4090: 330.4 TFLOP/s, saying it is fp16
    accumulate's, as decode --explain says of the step's peak."""
    dep = llamacpp("qwen2.5-7b")
    peak = engine_ridge_step(dep, "fp16").inputs[0]
    assert peak.value == pytest.approx(dep.peak_at("fp16") / 1e12)
    assert dep.peak_note_at("fp16") in peak.source
