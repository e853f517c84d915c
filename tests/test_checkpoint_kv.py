"""A checkpoint's own KV quantization, read as vLLM, SGLang and TensorRT-LLM read it
(checkpoint_kv.py), and the KV dtype a deployment of it defaults to (Deployment.build)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.checkpoint_kv import (
    checkpoint_kv_dtype,
    engine_checkpoint_kv,
    label_hides_checkpoint_kv,
)
from ridgeline.datafiles import load_data
from ridgeline.vllm_cache_dtype import served_cache_dtype
from tests.conftest import refused_line, run_cli

# llm-compressor's FP8 KV scheme, as its examples write it into config.json
CT_KV_SCHEME = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False,
                "symmetric": True}
COMPRESSED_TENSORS_FP8_KV = {
    "quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"],
                                  "weights": {"num_bits": 8, "type": "float",
                                              "strategy": "channel"}}},
    "ignore": ["lm_head"], "kv_cache_scheme": CT_KV_SCHEME}
MODELOPT_FP8_KV = {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8",
                   "ignore": ["lm_head"]}
# ModelOpt 1.x's config.json (the flat layout): the KV cache as a static 8-bit float scheme
MODELOPT_FP8_KV_SCHEME = {"quant_method": "modelopt", "quant_algo": "FP8", "ignore": ["lm_head"],
                          "kv_cache_scheme": {"type": "float", "num_bits": 8, "dynamic": False}}


def checkpoint(tmp_path: Path, qc: dict[str, Any], name: str = "ckpt") -> str:
    """Llama-3.1-8B's config.json with ``qc`` as its quantization_config."""
    config = dict(load_data("models/meta-llama--Llama-3.1-8B.json"))
    config["quantization_config"] = qc
    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    return str(path)


@pytest.mark.parametrize(("qc", "kv"), [
    (MODELOPT_FP8_KV, "fp8"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "fp8"}, "fp8"),
    # hf_quant_config.json's layout: the algorithms inside a "quantization" block
    ({"quant_method": "modelopt", "quantization": {"quant_algo": "FP8",
                                                   "kv_cache_quant_algo": "FP8"}}, "fp8"),
    # ModelOpt's compressed-tensors-style config.json: a static 8-bit float scheme
    ({"quant_method": "modelopt", "quant_algo": "FP8",
      "kv_cache_scheme": {"type": "float", "num_bits": 8, "dynamic": False}}, "fp8"),
    ({"quant_method": "modelopt", "quant_algo": "FP8",
      "kv_cache_scheme": {"type": "float", "num_bits": 8, "dynamic": True}}, ""),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "NVFP4"}, ""),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, ""),
    (COMPRESSED_TENSORS_FP8_KV, "fp8"),
    ({**COMPRESSED_TENSORS_FP8_KV, "kv_cache_scheme": None}, ""),
    ({"quant_method": "fp8", "kv_cache_scheme": CT_KV_SCHEME}, ""),  # vLLM's Fp8Config: none
    (None, ""),
])
def test_the_kv_cache_a_quantization_config_asks_for_is_vllms_auto(
        qc: dict[str, Any] | None, kv: str) -> None:
    """vLLM turns --kv-cache-dtype auto into fp8 for ModelOpt's kv_cache_quant_algo FP8
    (resolve_kv_cache_dtype_string) and any compressed-tensors kv_cache_scheme (Attention);
    another algorithm falls back to the model's dtype."""
    assert checkpoint_kv_dtype(qc) == kv


def test_a_checkpoint_asking_for_an_fp8_cache_is_sized_with_one_under_vllm(
        tmp_path: Path) -> None:
    """Such a checkpoint's KV defaulted to its 16-bit dtype: fit sized a pool half what vLLM
    keeps, and observe cautioned a server running the checkpoint as it ships."""
    h100 = resolve_accelerator("h100")
    for qc in (COMPRESSED_TENSORS_FP8_KV, MODELOPT_FP8_KV):
        model = resolve_model(checkpoint(tmp_path, qc, qc["quant_method"]))
        assert model.kv_cache_dtype == "fp8"
        assert Deployment.build(model, h100, engine="vllm").kv.id == "fp8"
        assert Deployment.build(model, h100).kv.id == "fp8"  # no engine named: costed as vLLM
        assert Deployment.build(model, h100, kv="bf16", engine="vllm").kv.id == "bf16"
        assert Deployment.build(model, h100, kv="auto", engine="vllm").kv.id == "fp8"
        # another format than the checkpoint's is another checkpoint's cache
        assert Deployment.build(model, h100, "bf16", engine="vllm").kv.id == "bf16"
    plain = resolve_model("llama-3.1-8b")
    assert plain.kv_cache_dtype == ""
    assert Deployment.build(plain, h100, engine="vllm").kv.id == "bf16"


@pytest.mark.parametrize(("qc", "label", "served"), [
    (COMPRESSED_TENSORS_FP8_KV, "auto", "fp8"),  # set as the model loads, after the label
    (MODELOPT_FP8_KV, "auto", "bf16"),  # resolved before: a vLLM that took it says fp8_e4m3
    (MODELOPT_FP8_KV, "fp8_e4m3", "fp8"),
    (None, "auto", "bf16"),
    (None, "fp8_inc", "fp8"),
    (None, "None", None),
])
def test_vllms_cache_dtype_label_is_read_as_vllm_resolves_auto(
        tmp_path: Path, qc: dict[str, Any] | None, label: str, served: str | None) -> None:
    model = resolve_model(checkpoint(tmp_path, qc) if qc else "llama-3.1-8b")
    cache = served_cache_dtype(label, model)
    assert (cache.id if cache else None) == served
    assert label_hides_checkpoint_kv(model.quant_method, model.kv_cache_dtype) is (
        qc is COMPRESSED_TENSORS_FP8_KV)


@pytest.mark.parametrize(("qc", "engines"), [
    # every engine: hf_quant_config.json's block, ModelOpt 1.x's static 8-bit float scheme
    ({"quant_method": "modelopt", "quantization": {"quant_algo": "FP8",
                                                   "kv_cache_quant_algo": "FP8"}},
     {"vllm": "fp8", "sglang": "fp8", "trtllm": "fp8"}),
    (MODELOPT_FP8_KV_SCHEME, {"vllm": "fp8", "sglang": "fp8", "trtllm": "fp8"}),
    # SGLang's ModelOptFp8Config reads a flat config's scheme only; its FP4 config the algo too
    (MODELOPT_FP8_KV, {"vllm": "fp8", "trtllm": "fp8"}),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"},
     {"vllm": "fp8", "sglang": "fp8", "trtllm": "fp8"}),
    # a dynamic scheme: vLLM falls back to auto, the others read type and bits alone
    ({"quant_method": "modelopt", "quant_algo": "FP8",
      "kv_cache_scheme": {"type": "float", "num_bits": 8, "dynamic": True}},
     {"sglang": "fp8", "trtllm": "fp8"}),
    # NVFP4 and INT8 caches: TensorRT-LLM's alone
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "NVFP4"},
     {"trtllm": "fp4"}),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_scheme": "INT8"},
     {"trtllm": "int8"}),
    # compressed-tensors: vLLM and TensorRT-LLM follow the scheme, SGLang leaves it aside
    (COMPRESSED_TENSORS_FP8_KV, {"vllm": "fp8", "trtllm": "fp8"}),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, {}),
    (None, {}),
])
def test_each_engines_auto_reads_the_checkpoints_kv_its_own_way(
        qc: dict[str, Any] | None, engines: dict[str, str]) -> None:
    assert dict(engine_checkpoint_kv(qc)) == engines


def _fit_kv(capsys: pytest.CaptureFixture[str], config: str, engine: str,
            *flags: str) -> str:
    code, out, err = run_cli(capsys, "fit", config, "--gpu", "h100", "--engine", engine,
                             *flags, "--json")
    assert code == 0, err
    return str(json.loads(out)["kv_dtype"])


@pytest.mark.parametrize(("qc", "engine", "kv"), [
    (MODELOPT_FP8_KV_SCHEME, "vllm", "fp8"),
    (MODELOPT_FP8_KV_SCHEME, "sglang", "fp8"),  # was bf16: half the tokens SGLang keeps
    (MODELOPT_FP8_KV_SCHEME, "trtllm", "fp8"),  # was bf16
    (MODELOPT_FP8_KV, "sglang", "bf16"),  # its FP8 config reads no flat kv_cache_quant_algo
    (MODELOPT_FP8_KV, "trtllm", "fp8"),  # was bf16
    (COMPRESSED_TENSORS_FP8_KV, "sglang", "bf16"),
    (COMPRESSED_TENSORS_FP8_KV, "trtllm", "fp8"),  # was bf16
])
def test_fit_sizes_the_cache_each_engines_auto_serves_for_the_checkpoint(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, qc: dict[str, Any], engine: str,
        kv: str) -> None:
    """fit --json kv_dtype without --kv-dtype: the engine's default, as it reads the
    checkpoint's quantization_config (checkpoint_kv.engine_checkpoint_kv)."""
    assert _fit_kv(capsys, checkpoint(tmp_path, qc), engine) == kv


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_an_explicit_kv_dtype_overrides_the_checkpoints_but_under_trtllm(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, engine: str) -> None:
    """vLLM's and SGLang's --kv-cache-dtype replaces the checkpoint's cache; TensorRT-LLM's
    validate_and_set_kv_cache_quant refuses any dtype but auto and the checkpoint's own."""
    config = checkpoint(tmp_path, MODELOPT_FP8_KV_SCHEME)
    if engine == "trtllm":
        line = refused_line(capsys, "fit", config, "--gpu", "h100", "--engine", engine,
                            "--kv-dtype", "bf16")
        assert "You cannot override a checkpoint with a pre-quantized KV cache" in line
        assert _fit_kv(capsys, config, engine, "--kv-dtype", "fp8") == "fp8"  # its own
    else:
        assert _fit_kv(capsys, config, engine, "--kv-dtype", "bf16") == "bf16"
    # another weight format is another checkpoint, whose cache is the engine's dtype
    assert _fit_kv(capsys, config, engine, "--weights", "bf16") == "bf16"


def test_llamacpp_runs_a_gguf_whose_cache_is_its_own_flags(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """convert_hf_to_gguf.py carries no KV quantization: -ctk/-ctv's f16 by default."""
    config = checkpoint(tmp_path, MODELOPT_FP8_KV_SCHEME)
    assert _fit_kv(capsys, config, "llama.cpp-cuda", "--weights", "q8_0") == "fp16"
