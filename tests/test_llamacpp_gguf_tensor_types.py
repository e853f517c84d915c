"""The GGUF's type per tensor, as llama.cpp's converter and llama-quantize write it.

convert_hf_to_gguf.py writes the MoE router (ffn_gate_inp), every norm and every bias F32
whatever --outtype, and llama-quantize never quantizes them (engines.json gguf_f32, with its
source lines); its default --outtype, auto, writes a float32 checkpoint as F16; and the BF16
GGUF of a bf16 checkpoint stays BF16 on a card with no bf16 rate, whose CUDA and ROCm builds
multiply it at best at the fp32 rate (engines.json gguf_16bit matmul_dtype cuda_without_bf16)."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.datafiles import load_data
from ridgeline.params import count_params
from ridgeline.precision import weight_bytes, weight_plan
from ridgeline.quantization import EXPERT_BIAS, OTHER, ROUTER
from ridgeline.served_model import llamacpp_gguf_dtype
from tests.conftest import cli_json

GIB = 2**30
F32 = (ROUTER, OTHER, EXPERT_BIAS)


@pytest.mark.parametrize(("model", "weights"), [
    ("qwen3-30b-a3b", None), ("qwen3-30b-a3b", "q4_k_m"), ("mixtral-8x7b", None),
    ("gpt-oss-120b", None), ("gpt-oss-120b", "stored")])
def test_the_router_norms_and_biases_are_f32_in_every_gguf(model: str, weights: str | None) -> None:
    """Four bytes a weight under llama.cpp, whatever the rest's type (the BF16 conversion,
    llama-quantize's Q4_K_M, ggml-org's MXFP4_MOE); vLLM reads the checkpoint's bf16 router."""
    spec, h100 = resolve_model(model), resolve_accelerator("h100")
    gguf = Deployment.build(spec, h100, weights, engine="llama.cpp-cuda")
    params = count_params(spec).by_category
    rule = load_data("engines.json")["llama.cpp"]["gguf_f32"]["categories"]
    assert set(rule) == set(F32)
    for category in F32:
        assert gguf.bytes_by_category[category] == 4 * params[category]
    assert params[ROUTER] and gguf.weights.format_of(ROUTER).id == "fp32"
    vllm = Deployment.build(spec, h100, engine="vllm")
    assert vllm.bytes_by_category[ROUTER] == 2 * params[ROUTER]


@pytest.mark.parametrize(("model", "logged_gib"), [("gpt-oss-20b", 11.27), ("gpt-oss-120b", 59.02)])
def test_ggml_orgs_gpt_oss_gguf_is_the_size_llama_bench_logs(model: str, logged_gib: float) -> None:
    """With its router, sinks, norms and biases F32 the MXFP4_MOE file llama.cpp runs lands
    within 0.05 % of llama-bench's size (validation notes, build 6918); the same mix with
    them at bf16 was 0.17-0.19 % short."""
    spec = resolve_model(model)
    dep = Deployment.build(spec, resolve_accelerator("h100"), engine="llama.cpp-cuda")
    assert dep.weights.label == "mxfp4_moe"
    gguf_gib = weight_bytes(spec, dep.weights) / GIB
    bf16_gib = weight_bytes(spec, weight_plan(spec, "mxfp4_moe")) / GIB
    assert gguf_gib == pytest.approx(logged_gib, rel=5e-4)
    assert abs(gguf_gib - logged_gib) < abs(bf16_gib - logged_gib) / 3


def test_the_f32_router_is_multiplied_at_the_steps_dtype() -> None:
    """Its bytes are fp32's, its matmul is left at the step's rate (cuBLAS's TF32, not
    modelled): Qwen3-30B-A3B's BF16 GGUF on an RTX 4090 names no router dtype of its own."""
    dep = Deployment.build(resolve_model("qwen3-30b-a3b"), resolve_accelerator("rtx-4090"),
                           engine="llama.cpp-cuda")
    assert dep.compute_dtype_of(ROUTER) == dep.compute_dtype == "bf16"
    assert "router" not in dep.matmuls_label


def float32_config(tmp_path: pathlib.Path) -> str:
    """Llama-3.1-8B's config.json, saying torch_dtype float32."""
    config = json.loads(pathlib.Path("src/ridgeline/data/models/meta-llama--Llama-3.1-8B.json")
                        .read_text())
    config["torch_dtype"] = "float32"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_a_float32_checkpoint_runs_as_the_f16_gguf_the_converter_writes(
        capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path) -> None:
    """--outtype auto finds no bf16 or fp16 tensor and writes F16 (it had been priced as
    BF16, vLLM's auto): the 4090's fp16-accumulate rate under llama.cpp's CUDA build, twice
    its bf16; vLLM still serves it at bf16."""
    spec, acc = resolve_model("llama-3.1-8b"), resolve_accelerator("rtx-4090")
    fp32 = dataclasses.replace(spec, dtype="fp32")
    gguf = Deployment.build(fp32, acc, engine="llama.cpp-cuda")
    assert gguf.weights.label == llamacpp_gguf_dtype(fp32) == gguf.compute_dtype == "fp16"
    assert gguf.peak_at(gguf.compute_dtype) == acc.fp16_accumulate_flops \
        == 2 * acc.peak_flops["bf16"]
    assert Deployment.build(fp32, acc, engine="vllm").weights.label == "bf16"
    line = cli_json(capsys, "decode", float32_config(tmp_path), "--gpu", "rtx-4090",
                    "--engine", "llama.cpp-cuda")["deployment"]
    assert ", weights fp16, KV fp16, matmuls at fp16" in line


@pytest.mark.parametrize(("card", "engine"), [("t4", "llama.cpp-cuda"),
                                              ("v100-sxm-32gb", "llama.cpp-cuda"),
                                              ("mi50", "llama.cpp-rocm")])
def test_a_bf16_gguf_on_a_card_without_bf16_multiplies_at_fp32(card: str, engine: str) -> None:
    """The BF16 GGUF is not converted for the card: its bytes stay 2 a weight and its matmuls
    run on CUDA cores (cuBLAS's CUDA_R_16BF before Ampere, or F32 cuBLAS from PR #28846), at
    most the fp32 peak: a T4's 8.1 TFLOP/s, where it had been priced as fp16's 65. vLLM's
    auto serves the same checkpoint at fp16."""
    spec, acc = resolve_model("llama-3.1-8b"), resolve_accelerator(card)
    assert "bf16" not in acc.peak_flops
    gguf = Deployment.build(spec, acc, engine=engine)
    assert gguf.weights.label == "bf16" and gguf.weights.format_of("mlp").bytes_per_weight == 2
    assert gguf.compute_dtype == gguf.dense_dtype_label == "fp32"
    assert gguf.peak_flops_per_s == acc.peak_flops["fp32"]
    if engine == "llama.cpp-cuda":
        vllm = Deployment.build(spec, acc, engine="vllm", engine_version="0.19")  # Volta: to 0.19
        assert (vllm.weights.label, vllm.compute_dtype) == ("fp16", "fp16")
        assert gguf.peak_flops_per_s < vllm.peak_flops_per_s / 7


@pytest.mark.parametrize("command", [("decode",), ("prefill", "--prompt-len", "2048")])
def test_the_t4s_answer_says_the_bf16_gguf_runs_at_fp32_and_which_file_would_not(
        capsys: pytest.CaptureFixture[str], command: tuple[str, ...]) -> None:
    """The deployment line names fp32 matmuls, and a caution says why and gives the F16 file's
    rate, the card's own figures."""
    t4 = resolve_accelerator("t4")
    data = cli_json(capsys, command[0], "llama-3.1-8b", "--gpu", "t4", "--engine",
                    "llama.cpp-cuda", *command[1:])
    assert data["deployment"].endswith(
        ", weights bf16, KV fp16, matmuls at fp32 (QKᵀ and PV at fp16)")
    said = [c for c in data["cautions"] if c.startswith("t4 has no bf16 rate")]
    assert len(said) == 1 and "PR #28846" in said[0]
    assert said[0].endswith(f"at the fp32 peak, {t4.peak('fp32') / 1e12:,.4g} TFLOP/s; a GGUF "
                            "converted with --outtype f16 (--weights fp16) runs at the fp16 "
                            f"rate, {t4.peak('fp16') / 1e12:,.4g} TFLOP/s")
    plain = cli_json(capsys, command[0], "llama-3.1-8b", "--gpu", "rtx-4090", "--engine",
                     "llama.cpp-cuda", *command[1:])
    assert not any("no bf16 rate" in c for c in plain["cautions"])


def test_a_card_with_bf16_and_an_f16_gguf_keep_their_16_bit_rate() -> None:
    """Only bf16 on a card without it falls to fp32: the same GGUF on an RTX 4090 runs at bf16,
    and --weights fp16 on a T4 at fp16."""
    spec = resolve_model("llama-3.1-8b")
    assert Deployment.build(spec, resolve_accelerator("rtx-4090"),
                            engine="llama.cpp-cuda").compute_dtype == "bf16"
    assert Deployment.build(spec, resolve_accelerator("t4"), "fp16",
                            engine="llama.cpp-cuda").compute_dtype == "fp16"
