"""Vision towers read by their family's layout: Qwen2.5-VL's gated blocks under RMSNorms,
Qwen3-VL's deepstack mergers, and Llama-3.2-Vision (mllama), whose cross-attention layers
are refused by name. Small hand-written configs; every expected figure is worked beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ridgeline import resolve_model
from ridgeline.config_reader import spec_from_hf_config
from ridgeline.errors import InputError
from tests.conftest import run_cli

TEXT = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100}
# a tower of 2 layers of width 32, MLP 48, merging 2 × 2 patches into the 64-wide text model
TOWER = {"depth": 2, "hidden_size": 32, "intermediate_size": 48, "num_heads": 4,
         "in_chans": 3, "patch_size": 14, "temporal_patch_size": 2, "spatial_merge_size": 2,
         "out_hidden_size": 64}


def tower_params(model_type: str, vision: dict[str, Any]) -> int:
    config = {"model_type": model_type, **TEXT, "vision_config": vision}
    return spec_from_hf_config(config, "m").vision_params


def test_qwen25_vl_prices_its_blocks_gated_under_rmsnorms() -> None:
    h, i = 32, 48
    attention = 4 * h * h + 4 * h  # qkv and proj, with biases
    mlp = 3 * h * i + 2 * i + h  # gate, up (biases of i) and down (a bias of h)
    norms = 2 * h  # norm1 and norm2, RMSNorms: a weight each
    patch = 3 * 2 * 14 * 14 * h  # Conv3d, no bias
    width = 4 * h  # 2 × 2 patches merged
    merger = h + width * width + width + width * 64 + 64  # ln_q (RMSNorm), then two linears
    assert tower_params("qwen2_5_vl", TOWER) == 2 * (attention + mlp + norms) + patch + merger


def test_qwen2_vl_and_qwen3_vl_blocks_stay_two_matrices() -> None:
    """Qwen2-VL's VisionMlp and Qwen3-VL's (Qwen3.5's) Qwen3VLVisionMLP are fc1, fc2: the
    gated Qwen2.5-VL tower of the same shape holds a third matrix a layer, its biases, and
    RMSNorms (h a norm, not 2 h) with no patch-embedding bias."""
    h, i = 32, 48
    gated, plain = tower_params("qwen2_5_vl", TOWER), tower_params("qwen2_vl", TOWER)
    per_layer = h * i + i - 2 * h  # up's matrix and bias; two norms lose their biases
    assert gated - plain == 2 * per_layer - h - h  # ln_q's bias, the patch bias
    assert tower_params("qwen3_vl", TOWER) == plain


def test_qwen3_vl_counts_a_merger_for_each_deepstack_layer() -> None:
    width, out = 4 * 32, 64
    merger = 2 * width + width * width + width + width * out + out  # LayerNorm, fc1, fc2
    base = tower_params("qwen3_vl", TOWER)
    assert tower_params("qwen3_vl", {**TOWER, "deepstack_visual_indexes": []}) == base
    deep = tower_params("qwen3_vl", {**TOWER, "deepstack_visual_indexes": [0, 1]})
    assert deep - base == 2 * merger


def test_the_bundled_qwen_towers_have_no_deepstack_and_no_gate() -> None:
    """Qwen3.5's and Qwen3.6's configs list deepstack_visual_indexes [] and no gated blocks:
    their towers are as before, 447 M."""
    for name in ("qwen3.5-35b-a3b", "qwen3.6-35b-a3b"):
        assert round(resolve_model(name).vision_params / 1e6) == 447


def test_deepstack_indexes_that_are_not_layer_numbers_are_refused() -> None:
    with pytest.raises(InputError, match="deepstack_visual_indexes must be a list of layer"):
        tower_params("qwen3_vl", {**TOWER, "deepstack_visual_indexes": "8,16"})


MLLAMA = {"model_type": "mllama", "architectures": ["MllamaForConditionalGeneration"],
          "text_config": {"model_type": "mllama_text_model", **TEXT, "num_hidden_layers": 5,
                          "cross_attention_layers": [3]},
          "vision_config": {"model_type": "mllama_vision_model", "hidden_size": 32,
                            "intermediate_size": 48, "num_hidden_layers": 2,
                            "image_size": 56, "patch_size": 14}}


def test_llama32_vision_is_refused_naming_its_cross_attention(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its cross-attention layers were priced as self-attention (+25 % KV at 8 of 40 layers)
    and their image cache not at all; vLLM dropped MllamaForConditionalGeneration after
    v0.10.2."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MLLAMA))
    code, out, err = run_cli(capsys, "model", str(path))
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "cross_attention_layers" in err and "until v0.10.2" in err
