"""The methods that quantize a 16-bit checkpoint on load besides fp8: vLLM's and SGLang's
--quantization bitsandbytes (4-bit NF4, and the bitsandbytes checkpoints it reads as stored)
and vLLM's experts_int8 (a MoE's experts in int8, the rest at 16 bits), with the refusals the
engines give and the caution a bitsandbytes step time carries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.datafiles import load_data
from ridgeline.deployment import Deployment
from ridgeline.engine_quantization import quantized_weights
from ridgeline.hardware import resolve_accelerator
from ridgeline.model import ModelSpec
from ridgeline.params import count_params
from ridgeline.precision import weight_bytes_by_category, weight_format, weight_plan
from ridgeline.quantization import CATEGORIES, EXPERTS, LINEAR_CATEGORIES, stored_formats
from tests.conftest import run_cli

# bitsandbytes' 4-bit layout (functional.quantize_4bit): blocks of 64 weights, each 4-bit code
# with one absmax per block, fp32 as vLLM holds it; double quantization stores that absmax in 8
# bits with one fp32 per 256 blocks
BLOCK = 64
CODE_BITS = 4
FP32_BITS = 32
NESTED_ABSMAX_BITS = 8
BLOCKS_PER_NESTED_SCALE = 256
BF16_BYTES = 2


def served(model: str | ModelSpec, method: str, gpus: int = 1) -> Deployment:
    spec = resolve_model(model) if isinstance(model, str) else model
    return Deployment.build(spec, resolve_accelerator("h100"),
                            quantized_weights(method, spec), None, gpus, 1)


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out, (argv, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def answer(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    return dict(json.loads(out))


def checkpoint(tmp_path: Path, base: str, qc: dict[str, Any], name: str) -> str:
    """A catalog config with a bitsandbytes quantization_config, as transformers writes it."""
    config = dict(load_data(f"models/{base}.json"))
    config["quantization_config"] = {"quant_method": "bitsandbytes", **qc}
    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    return str(path)


NF4_DQ = {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
          "bnb_4bit_use_double_quant": True, "bnb_4bit_quant_storage": "uint8"}


# -- bitsandbytes -----------------------------------------------------------------------------
def test_an_8b_at_q_bitsandbytes_holds_4_bits_and_an_fp32_absmax_per_64_weights() -> None:
    """Llama 3.1 8B quantized on load: its linear layers at 4 + 32/64 = 4.5 bits, embeddings
    and lm_head at bf16: about 6.0 GB where bf16 holds 16.1."""
    dep = served("llama-3.1-8b", "bitsandbytes")
    params = count_params(dep.model).by_category
    bits = CODE_BITS + FP32_BITS / BLOCK
    linear = sum(params.get(c, 0) for c in LINEAR_CATEGORIES)
    rest = sum(params.get(c, 0) for c in CATEGORIES if c not in LINEAR_CATEGORIES)
    expected = linear * bits / 8 + rest * BF16_BYTES
    assert dep.weight_bytes == pytest.approx(expected, rel=1e-9)
    assert dep.weight_bytes / 1e9 == pytest.approx(6.0, abs=0.05)  # the docstring's figure
    assert dep.weights.label == "bnb-nf4"


def test_double_quantization_is_a_files_size_vllm_holds_it_at_fp32_absmaxes() -> None:
    """QLoRA's nested absmax: 4 + 8/64 + 32/(64 x 256) bits on disk; vLLM's dequantize_dq
    restores fp32 absmaxes at load, so the checkpoint is served at the in-flight 4.5 bits."""
    nested = (CODE_BITS + NESTED_ABSMAX_BITS / BLOCK
              + FP32_BITS / (BLOCK * BLOCKS_PER_NESTED_SCALE))
    assert weight_format("bnb-nf4-dq").bits_per_weight == pytest.approx(nested)
    assert weight_format("nf4").bits_per_weight == CODE_BITS + FP32_BITS / BLOCK
    assert set(stored_formats({"quant_method": "bitsandbytes", **NF4_DQ}, "x").values()) \
        == {"bnb-nf4"}
    assert set(stored_formats({"quant_method": "bitsandbytes", "load_in_8bit": True},
                              "x").values()) == {"bnb-int8"}


def test_a_bitsandbytes_checkpoint_is_served_as_stored_and_q_bitsandbytes_names_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = checkpoint(tmp_path, "meta-llama--Llama-3.1-8B", NF4_DQ, "nf4")
    argv = ("fit", path, "--gpu", "h100", "--max-model-len", "8k", "--json")
    stored = answer(capsys, *argv)
    assert answer(capsys, *argv, "-q", "bitsandbytes") == stored
    inflight = answer(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k",
                      "--json", "-q", "bitsandbytes")
    assert stored["pool_bytes_per_gpu"] == inflight["pool_bytes_per_gpu"]  # both at 4.5 bits
    err = refused(capsys, *argv, "-q", "fp8")
    assert "quant_method bitsandbytes" in err and "--quantization bitsandbytes" in err


def test_llm_int8_skip_modules_stay_at_16_bits(tmp_path: Path) -> None:
    path = checkpoint(tmp_path, "meta-llama--Llama-3.1-8B",
                      {"load_in_8bit": True, "llm_int8_skip_modules": ["self_attn", "lm_head"]},
                      "int8")
    spec = resolve_model(path)
    assert spec.stored_format_map["mlp"] == "bnb-int8" and "attention" not in spec.stored_format_map
    by_category = weight_bytes_by_category(spec, weight_plan(spec))
    params = count_params(spec).by_category
    assert by_category["attention"] == params["attention"] * BF16_BYTES
    assert by_category["mlp"] == params["mlp"] * weight_format("bnb-int8").bytes_per_weight


def test_a_pre_quantized_bitsandbytes_checkpoint_is_refused_tensor_parallel(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """vLLM's loader: 'Prequant BitsAndBytes models with tensor parallelism is not supported.
    Please try with pipeline parallelism.' Quantized on load it runs at TP 2."""
    path = checkpoint(tmp_path, "meta-llama--Llama-3.1-8B", NF4_DQ, "nf4")
    err = refused(capsys, "fit", path, "--gpu", "h100", "--num-gpus", "2", "--max-model-len", "8k")
    assert "--pipeline-parallel-size 2" in err
    answer(capsys, "fit", path, "--gpu", "h100", "--pipeline-parallel-size", "2",
           "--max-model-len", "8k", "--json")
    answer(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--num-gpus", "2",
           "--max-model-len", "8k", "--json", "-q", "bitsandbytes")


def test_an_8_bit_bitsandbytes_moe_is_refused(capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    path = checkpoint(tmp_path, "Qwen--Qwen3-30B-A3B", {"load_in_8bit": True}, "moe8")
    assert "NotImplementedError" in refused(capsys, "fit", path, "--gpu", "h100",
                                            "--max-model-len", "8k")


def test_bitsandbytes_on_another_methods_checkpoint_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, "fit", "qwen3-235b-a22b-fp8", "--gpu", "h200", "--num-gpus", "4",
                  "--max-model-len", "8k", "-q", "bitsandbytes")
    assert "quant_method fp8" in err and "does not match" in err


def test_step_times_on_bitsandbytes_carry_a_caution_the_memory_does_not_change(
        capsys: pytest.CaptureFixture[str]) -> None:
    decode = ("decode", "llama-3.1-8b", "--gpu", "h100", "--json")
    with_bnb = answer(capsys, *decode, "-q", "bitsandbytes")
    assert any("bitsandbytes" in c for c in with_bnb["cautions"])
    assert not any("bitsandbytes" in c for c in answer(capsys, *decode, "-q", "fp8")["cautions"])
    prefill = answer(capsys, "prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len", "2k",
                     "--json", "-q", "bitsandbytes")
    assert any("bitsandbytes" in c for c in prefill["cautions"])
    moe = answer(capsys, "decode", "qwen3-30b-a3b", "--gpu", "h100", "--json",
                 "-q", "bitsandbytes")
    assert any("every expert" in c for c in moe["cautions"])


def test_simulate_on_bitsandbytes_carries_the_caution(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2",
                             "--num-requests", "20", "--input-len", "500", "--output-len", "50",
                             "-q", "bitsandbytes")
    assert code == 0, err
    assert "bitsandbytes' dequantizing kernels" in out + err


def test_tensorrt_llm_loads_no_bitsandbytes_weights(capsys: pytest.CaptureFixture[str]) -> None:
    assert "no bitsandbytes" in refused(capsys, "fit", "llama-3.1-8b", "--gpu", "h100",
                                        "--engine", "trtllm", "--weights", "bnb-nf4")


# -- experts_int8 -----------------------------------------------------------------------------
def test_experts_int8_on_qwen3_30b_a3b_halves_the_experts_and_nothing_else() -> None:
    spec = resolve_model("qwen3-30b-a3b")
    before = weight_bytes_by_category(spec, weight_plan(spec))
    dep = served(spec, "experts_int8")
    after = weight_bytes_by_category(spec, dep.weights)
    assert after[EXPERTS] == pytest.approx(before[EXPERTS] / 2)
    assert before[EXPERTS] > 0
    assert {c: v for c, v in after.items() if c != EXPERTS} \
        == {c: v for c, v in before.items() if c != EXPERTS}
    assert dep.weights.format_of("attention").id == spec.dtype


def test_experts_int8_on_a_dense_model_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "-q", "experts_int8")
    assert "dense" in err and "ExpertsInt8Config" in err


def test_experts_int8_is_vllms_and_needs_ampere(capsys: pytest.CaptureFixture[str]) -> None:
    moe = ("fit", "qwen3-30b-a3b", "--max-model-len", "8k", "-q", "experts_int8")
    assert "SGLang has no such method" in refused(capsys, *moe, "--gpu", "h100",
                                                  "--engine", "sglang")
    assert "compute capability 8.0" in refused(capsys, *moe, "--gpu", "t4")


def test_experts_int8_without_a_model_has_no_size_per_weight_and_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert "give --model" in refused(capsys, "roofline", "--gpu", "h100", "-q", "experts_int8")
    code, _, err = run_cli(capsys, "roofline", "--gpu", "h100", "-q", "experts_int8",
                           "--model", "qwen3-30b-a3b")
    assert code == 0, err
