"""Exclusion lists read per layer: a pattern naming some layers leaves those layers, not the
whole category, at the checkpoint's dtype, each key matched as vLLM matches it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import ridgeline
from ridgeline.config_reader import spec_from_hf_config
from ridgeline.exclusion_patterns import (
    COMPONENT,
    EQUAL_OR_RE,
    PIECE,
    WILDCARD,
    matched_probes,
    module_matches,
)
from ridgeline.model import ModelSpec
from ridgeline.params import count_params
from ridgeline.precision import (
    mixed_bits_per_weight,
    weight_bytes_by_category,
    weight_formats,
    weight_plan,
)
from ridgeline.quantization import stored_formats
from tests.conftest import run_cli

_MODELS = Path(ridgeline.__file__).parent / "data" / "models"
_NVFP4 = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
_FP8_BLOCK_CT = {"quant_method": "compressed-tensors", "format": "float-quantized",
                 "config_groups": {"group_0": {
                     "weights": {"num_bits": 8, "type": "float", "strategy": "block",
                                 "block_structure": [128, 128]},
                     "input_activations": {"num_bits": 8, "type": "float", "dynamic": True},
                     "targets": ["Linear"]}}}


def _deepseek_v3(qc: dict[str, Any]) -> ModelSpec:
    """DeepSeek-V3's bundled config (3 dense layers, then 58 MoE layers) under ``qc``."""
    config = json.loads((_MODELS / "deepseek-ai--DeepSeek-V3.json").read_text())
    return spec_from_hf_config({**config, "quantization_config": qc}, "DeepSeek-V3")


def _bits(fmt: str) -> float:
    return weight_formats()[fmt].bits_per_weight


def test_modelopt_glob_on_layer_0_keeps_a_third_of_deepseeks_mlp_in_bf16() -> None:
    spec = _deepseek_v3({**_NVFP4, "exclude_modules": ["lm_head", "model.layers.0.mlp*"]})
    assert spec.stored_format_map["mlp"] == "nvfp4"  # layers 1 and 2 stay NVFP4
    assert spec.unquantized_layers == (("mlp", (0,)),)
    mlp_params = count_params(spec).by_category["mlp"]
    mlp_bytes = weight_bytes_by_category(spec, weight_plan(spec))["mlp"]
    expected_bits = 2 / 3 * _bits("nvfp4") + 1 / 3 * _bits("bf16")
    assert mlp_bytes == pytest.approx(mlp_params * expected_bits / 8)


def test_excluding_all_three_dense_layers_leaves_deepseeks_mlp_wholly_bf16() -> None:
    patterns = [f"model.layers.{i}.mlp*" for i in range(3)]
    spec = _deepseek_v3({**_NVFP4, "exclude_modules": ["lm_head", *patterns]})
    assert "mlp" not in spec.stored_format_map and spec.unquantized_layers == ()
    assert spec.stored_format_map["experts"] == "nvfp4"


def test_a_whole_layer_pattern_excludes_that_layer_not_nothing() -> None:
    spec = _deepseek_v3({**_NVFP4, "exclude_modules": ["lm_head", "model.layers.0*"]})
    assert spec.unquantized_layers == (("attention", (0,)), ("mlp", (0,)))
    plain = _deepseek_v3({**_NVFP4, "exclude_modules": ["lm_head"]})
    assert weight_bytes_by_category(spec, weight_plan(spec))["attention"] > \
        weight_bytes_by_category(plain, weight_plan(plain))["attention"]


def test_fnmatch_reads_model_layers_1_star_as_layers_1_and_10_to_19() -> None:
    layers = {i for i, _ in matched_probes("model.layers.1*", WILDCARD, 61)}
    assert layers == {1, *range(10, 20)}


def test_mlp_gate_star_glob_takes_gate_proj_as_modelopt_reads_it() -> None:
    # fnmatch('model.layers.0.mlp.gate_up_proj', '*mlp.gate*') is true in vLLM's
    # is_layer_excluded, so the MLP's fused gate_up_proj stays unquantized
    assert module_matches("*mlp.gate*", WILDCARD, "model.layers.0.mlp.gate_up_proj")
    assert "mlp" not in stored_formats({**_NVFP4, "exclude_modules": ["*mlp.gate*"]}, "x", 61)
    # without the trailing star it names the router alone
    assert stored_formats({**_NVFP4, "exclude_modules": ["*mlp.gate"]}, "x", 61)["mlp"] == "nvfp4"


def test_compressed_tensors_regex_on_the_router_leaves_the_mlp_quantized() -> None:
    qc = {**_FP8_BLOCK_CT, "ignore": ["lm_head", "re:.*mlp.gate$"]}
    assert stored_formats(qc, "x", 61)["mlp"] == "fp8-block"


def test_compressed_tensors_exact_name_excludes_its_own_layer_only() -> None:
    spec = _deepseek_v3({**_FP8_BLOCK_CT,
                         "ignore": ["lm_head", "model.layers.0.mlp.down_proj"]})
    assert spec.unquantized_layers == (("mlp", (0,)),)
    ranged = _deepseek_v3({**_FP8_BLOCK_CT,
                           "ignore": ["lm_head", r"re:model\.layers\.[0-2]\.self_attn\..*"]})
    assert ranged.unquantized_layers == (("attention", (0, 1, 2)),)


def test_modules_to_not_convert_is_a_substring_except_under_fp8() -> None:
    # AWQ/GPTQ (vLLM is_layer_skipped_awq): 'model.layers.1' is a piece of layer 10's names
    assert module_matches("model.layers.1", PIECE, "model.layers.10.mlp.down_proj")
    # fp8 (vLLM is_layer_skipped): the name whole
    assert not module_matches("model.layers.1", EQUAL_OR_RE, "model.layers.10.mlp.down_proj")


def test_bitsandbytes_skip_modules_match_whole_components() -> None:
    assert module_matches("mlp", COMPONENT, "model.layers.3.mlp.down_proj")
    assert module_matches("model.layers.3", COMPONENT, "model.layers.3.mlp.down_proj")
    assert not module_matches("model.layers.3", COMPONENT, "model.layers.30.mlp.down_proj")


def test_an_mtp_layer_past_the_model_excludes_nothing() -> None:
    # DeepSeek-V3's MTP layer is model.layers.61, past its 61 counted layers
    spec = _deepseek_v3({"quant_method": "fp8", "weight_block_size": [128, 128],
                         "modules_to_not_convert": ["model.layers.61.self_attn.q_a_proj"]})
    assert spec.stored_format_map["attention"] == "fp8-block"
    assert spec.unquantized_layers == ()


def test_without_a_layer_count_a_named_layer_still_excludes_its_category() -> None:
    qc = {**_FP8_BLOCK_CT, "ignore": ["model.layers.5.mlp.down_proj"]}
    assert "mlp" not in stored_formats(qc, "x")


def test_mixed_bits_of_deepseeks_attention_with_one_bf16_layer() -> None:
    bits = mixed_bits_per_weight(_bits("fp8-block"), _bits("bf16"), 1 / 61)
    assert bits == pytest.approx(8.1331, abs=1e-4)


def test_the_model_report_names_the_layers_kept_in_bf16(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = json.loads((_MODELS / "deepseek-ai--DeepSeek-V3.json").read_text())
    exclude = ["lm_head", "model.layers.0.self_attn*", "model.layers.1.self_attn*",
               "model.layers.2.self_attn*", "model.layers.7.self_attn*", "model.layers.0.mlp*"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "quantization_config": {**_NVFP4,
                                                                  "exclude_modules": exclude}}))
    code, out, _ = run_cli(capsys, "model", str(path))
    assert code == 0
    assert "attention nvfp4 (layers 0-2, 7 in bf16)" in out
    assert "mlp nvfp4 (layer 0 in bf16)" in out
    code, out, _ = run_cli(capsys, "model", str(path), "--json")
    assert json.loads(out)["unquantized_layers"] == {"attention": [0, 1, 2, 7], "mlp": [0]}
