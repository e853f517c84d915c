"""ModelOpt's quant_algo values as each engine serves them (modelopt_algos.py, formats.json
modelopt_algos): a W4A8_AWQ, W4A16_AWQ or W8A16 export is TensorRT-LLM's alone, refused
under vLLM ('Unknown ModelOpt quant algo') and SGLang, where before it was sized under all
three; FP8_PB_WO and FP8_PER_CHANNEL_PER_TOKEN, which vLLM serves as modelopt, are read
(fp8-block, fp8) where before they were refused; INT8, a KV-cache algorithm, is refused as
weights. And plan under TensorRT-LLM sizes the cache the checkpoint keeps, as fit does, where
it sized and launched an fp8 one TensorRT-LLM refuses over an int8 checkpoint cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ridgeline import resolve_model
from ridgeline.candidate import kv_choices
from ridgeline.engine_quantization import VLLM_EARLIER_FLOORS
from ridgeline.modelopt_algos import algo_formats, modelopt_algos, refusal, served_until
from tests.conftest import refused_line, run_cli
from tests.test_modelopt_sidecar import checkpoint, fit_json, model_json, sidecar

# vLLM's QUANT_ALGOS (vllm/model_executor/layers/quantization/modelopt.py, read 2026): what
# ModelOptQuantConfigBase.from_config takes from config.json
VLLM_QUANT_ALGOS = ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "NVFP4", "W4A16_NVFP4",
                    "MXFP8", "MIXED_PRECISION")
# and what its convertor names from hf_quant_config.json (model_arch_config_convertor.py)
VLLM_SIDECAR_ALGOS = ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "NVFP4")


def test_the_table_gives_vllm_only_what_its_modelopt_configs_take() -> None:
    for algo, row in modelopt_algos().items():
        assert ("vllm" in row.engines) == (algo in VLLM_QUANT_ALGOS), algo
        assert ("vllm" in row.sidecar_engines) == (algo in VLLM_SIDECAR_ALGOS), algo
        assert set(row.sidecar_engines) <= set(row.engines), algo
        assert row.source


@pytest.mark.parametrize(("algo", "weights"), [
    ("W4A8_AWQ", "awq-int4"), ("W4A16_AWQ", "awq-int4"), ("W8A16", "int8-w8a16")])
def test_an_algorithm_only_tensorrt_llm_serves_is_refused_under_vllm_and_sglang(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, algo: str, weights: str) -> None:
    folder = str(checkpoint(tmp_path, sidecar(algo, group_size=128)))
    line = refused_line(capsys, "fit", folder, "--gpu", "h100")  # vLLM, the default
    assert f"ModelOpt quant_algo {algo}" in line
    assert f"'Unknown ModelOpt quant algo: {algo}'" in line
    assert line.endswith("TensorRT-LLM serves it: give --engine trtllm")
    line = refused_line(capsys, "fit", folder, "--gpu", "h100", "--engine", "sglang")
    assert "SGLang names no method for" in line and "--engine trtllm" in line
    assert fit_json(capsys, folder, "trtllm")["weights_format"] == weights
    assert model_json(capsys, folder)["stored_formats"] == {"attention": weights,
                                                            "mlp": weights}


def test_w4a8_awq_needs_fp8_matmuls_under_tensorrt_llm(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Its activations are fp8: an A100 (compute capability 8.0) runs none."""
    folder = str(checkpoint(tmp_path, sidecar("W4A8_AWQ", group_size=128)))
    line = refused_line(capsys, "fit", folder, "--gpu", "a100", "--engine", "trtllm")
    assert "fp8 activations" in line and "a100-sxm-80gb (ampere)" in line
    fit_json(capsys, folder, "trtllm", "h100")  # Hopper runs it


@pytest.mark.parametrize(("algo", "weights"), [
    ("FP8_PB_WO", "fp8-block"), ("fp8_pb_wo", "fp8-block"),
    ("FP8_PER_CHANNEL_PER_TOKEN", "fp8")])
def test_the_fp8_algorithms_vllm_serves_as_modelopt_are_read(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, algo: str, weights: str) -> None:
    folder = str(checkpoint(tmp_path, sidecar(algo, "FP8")))
    assert model_json(capsys, folder)["stored_formats"] == {"attention": weights,
                                                            "mlp": weights}
    for engine in ("vllm", "trtllm"):
        assert fit_json(capsys, folder, engine)["kv_dtype"] == "fp8", engine
    # vLLM's ModelOptFp8Config needs compute capability 8.9, as for FP8, before 0.27 (8.0 from
    # then, FP8 Marlin): an A100 is refused by the release before, served by the newest
    lowered = VLLM_EARLIER_FLOORS["modelopt"][0]
    before = f"0.{int(lowered.split('.')[1]) - 1}"
    line = refused_line(capsys, "fit", folder, "--gpu", "a100", "--engine-version", before)
    assert "modelopt method" in line and "get_min_capability" in line
    assert f"vLLM {before} refuses it" in line and f"--engine-version {lowered} or later" in line
    assert fit_json(capsys, folder, "vllm", "a100")["kv_dtype"] == "fp8"


@pytest.mark.parametrize(("algo", "sidecar_file"), [
    ("FP8_PB_WO", True), ("FP8_PER_CHANNEL_PER_TOKEN", True), ("FP8_PB_WO", False),
    ("FP8_BLOCK", True)])
def test_sglang_serves_the_fp8_variants_up_to_0_5_17_only(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, algo: str, sidecar_file: bool) -> None:
    """From 0.5.18 SGLang names modelopt_fp8 for quant_algo FP8 alone, and its
    ModelOptFp8Config refuses any other: the newest release, and a release past the last that
    served it, refuse the export and name the last one; that one sizes it; plain FP8 stays
    served by every release."""
    flat = {"quant_method": "modelopt", "quant_algo": algo}
    folder = str(checkpoint(tmp_path, sidecar(algo, "FP8")) if sidecar_file
                 else checkpoint(tmp_path, None, qc=flat))
    last = served_until(algo, "sglang")
    assert last is not None
    after = f"{last.rsplit('.', 1)[0]}.{int(last.rsplit('.', 1)[1]) + 1}"
    for version in ((), ("--engine-version", after)):
        line = refused_line(capsys, "fit", folder, "--gpu", "h100", "--engine", "sglang",
                            *version)
        assert f"ModelOpt quant_algo {algo}" in line and "does not serve" in line
        assert f"--engine-version {last} or earlier" in line
        assert ("ModelOptFp8Config only supports regular FP8" in line) != sidecar_file
    code, out, err = run_cli(capsys, "fit", folder, "--gpu", "h100", "--engine", "sglang",
                             "--engine-version", last, "--json")
    assert code == 0, err
    assert json.loads(out)["engine"] == "sglang"
    assert served_until("FP8", "sglang") is None
    plain = str(checkpoint(tmp_path, sidecar("FP8", "FP8"), "plain"))
    assert fit_json(capsys, plain, "sglang")["kv_dtype"] == "fp8"


def test_int8_weights_are_refused_as_the_kv_algorithm_they_are(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = refused_line(capsys, "model", str(checkpoint(tmp_path, sidecar("INT8"))))
    assert "names no weights an engine serves" in line and "KV-cache algorithm only" in line
    assert "INT8" not in algo_formats()


def test_vllm_takes_w4a16_nvfp4_from_config_json_but_not_from_the_sidecar(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Its convertor names FP8-family and NVFP4 alone from hf_quant_config.json; from
    config.json ModelOptNvFp4Config serves W4A16_NVFP4 (Marlin)."""
    from_file = str(checkpoint(tmp_path, sidecar("W4A16_NVFP4", group_size=16), "file"))
    line = refused_line(capsys, "fit", from_file, "--gpu", "h100")
    assert "W4A16_NVFP4 read from hf_quant_config.json" in line
    assert "'Unknown ModelOpt quant algo: W4A16_NVFP4'" in line and "--engine sglang" in line
    flat = {"quant_method": "modelopt", "quant_algo": "W4A16_NVFP4", "group_size": 16,
            "ignore": ["lm_head"]}
    inline = str(checkpoint(tmp_path, None, "inline", qc=flat))
    assert fit_json(capsys, inline, "vllm")["kv_dtype"] == "bf16"
    assert refusal("W4A16_NVFP4", "vllm", sidecar=False) == ""


def _plan(capsys: pytest.CaptureFixture[str], folder: str, gpus: str, *flags: str
          ) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "plan", folder, "--rate", "1", "--slo-ttft-ms", "2000",
                             "--slo-tpot-ms", "100", "--gpus", gpus, "--workers", "1",
                             "--json", *flags)
    assert code == 0, err
    return dict(json.loads(out))


def test_plan_refuses_vllm_for_a_tensorrt_llm_algorithm_and_skips_its_card_under_trtllm(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Before: '1 x a100, as stored (awq-int4)' under vLLM, which refuses the checkpoint."""
    folder = str(checkpoint(tmp_path, sidecar("W4A8_AWQ", group_size=128)))
    line = refused_line(capsys, "plan", folder, "--rate", "1", "--slo-ttft-ms", "2000",
                        "--slo-tpot-ms", "100", "--gpus", "a100")
    assert "'Unknown ModelOpt quant algo: W4A8_AWQ'" in line and "--engine trtllm" in line
    plan = _plan(capsys, folder, "a100,h100", "--engine", "trtllm")
    assert plan["winner"]["accelerator"] == "h100-sxm"  # the A100 has no fp8 matmuls
    assert {c["accelerator"] for c in plan["runners_up"]} <= {"h100-sxm"}


@pytest.mark.parametrize(("kv_algo", "kv", "gpu"), [("INT8", "int8", "h100"),
                                                    ("NVFP4", "fp4", "b200")])
def test_plan_under_trtllm_keeps_the_checkpoints_cache_as_fit_does(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, kv_algo: str, kv: str,
        gpu: str) -> None:
    """TensorRT-LLM keeps a checkpoint's kv_cache_quant_algo under auto and refuses any other
    dtype over it; plan searched bf16 and fp8 only, and wrote kv_cache_config dtype: fp8."""
    weights = "NVFP4" if kv_algo == "NVFP4" else "FP8"
    folder = str(checkpoint(tmp_path, sidecar(weights, kv_algo)))
    assert fit_json(capsys, folder, "trtllm", gpu)["kv_dtype"] == kv
    plan = _plan(capsys, folder, gpu, "--engine", "trtllm")
    assert plan["winner"]["kv_dtype"] == kv
    assert {c["kv_dtype"] for c in plan["runners_up"] + plan["disaggregated"]} <= {kv}
    assert "dtype: fp8" not in json.dumps(plan["config_files"])
    assert f"--kv-dtype {kv}" in plan["check_command"]
    line = refused_line(capsys, "fit", folder, "--gpu", gpu, "--engine", "trtllm",
                        "--kv-dtype", "fp8")
    assert "You cannot override a checkpoint with a pre-quantized KV cache" in line


def test_the_plans_kv_choices_are_the_engines_default_and_fp8_beside_no_checkpoint_cache(
        tmp_path: Path) -> None:
    int8 = resolve_model(str(checkpoint(tmp_path, sidecar("FP8", "INT8"))))
    assert kv_choices(int8, "trtllm") == ("int8",)
    assert kv_choices(int8, "vllm") == ("bf16", "fp8")  # vLLM falls back to auto for INT8
    fp8 = resolve_model(str(checkpoint(tmp_path, sidecar("FP8", "FP8"), "fp8kv")))
    assert kv_choices(fp8, "vllm") == kv_choices(fp8, "trtllm") == ("fp8",)
    assert kv_choices(resolve_model("llama-3.1-8b"), "trtllm") == ("bf16", "fp8")


@pytest.mark.parametrize(("kv_algo", "gpu", "kv"), [("FP8", "a100", "fp8"),
                                                    ("NVFP4", "h100", "fp4")])
def test_tensorrt_llm_names_no_kv_dtype_it_refuses_over_the_checkpoints_own_cache(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, kv_algo: str, gpu: str,
        kv: str) -> None:
    """Before: 'try --kv-dtype int8 or bf16' (fp8 on an A100; 'try --kv-dtype fp8' for fp4 on
    an H100), which TensorRT-LLM then refuses over the checkpoint's pre-quantized cache, and
    fit said to leave --kv-dtype out: a loop."""
    folder = str(checkpoint(tmp_path, sidecar("W4A16_AWQ", kv_algo, group_size=128)))
    line = refused_line(capsys, "fit", folder, "--gpu", gpu, "--engine", "trtllm")
    assert "try --kv-dtype" not in line
    assert "checkpoint keeps this cache pre-quantized" in line and "--weights FMT" in line
    # the card that keeps it serves it
    assert fit_json(capsys, folder, "trtllm", "b200")["kv_dtype"] == kv
    # a 16-bit checkpoint keeps the advice: its cache is the flag's to choose
    line = refused_line(capsys, "fit", "llama-3.1-8b", "--gpu", "a100", "--engine", "trtllm",
                        "--kv-dtype", "fp8")
    assert line.endswith("try --kv-dtype int8 or bf16")


@pytest.mark.parametrize(("algo", "kv"), [("W4A16_NVFP4", "FP8"), ("FP8_BLOCK", None)])
def test_an_algorithm_the_engine_lacks_is_named_before_what_the_card_lacks(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, algo: str, kv: str | None) -> None:
    """Before: on an A100 under TensorRT-LLM, 'keeps no fp8 KV cache …' (W4A16_NVFP4) or 'runs
    fp8 from compute capability 8.9' (FP8_BLOCK) came first, and the card it pointed to then
    refused the quant_algo itself, which TensorRT-LLM serves on no card."""
    folder = str(checkpoint(tmp_path, sidecar(algo, kv)))
    line = refused_line(capsys, "fit", folder, "--gpu", "a100", "--engine", "trtllm")
    assert line.endswith("TensorRT-LLM's QuantAlgo does not list; SGLang serves it: give "
                         "--engine sglang")
