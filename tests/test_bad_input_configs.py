"""Bad input (audit): a config.json field the engines would refuse or read otherwise is refused
in one line naming it, never read into a number: a rope_scaling type no engine builds, a list
of unquantized modules given as one string, a vision tower's malformed size, another file of
the checkpoint handed in as its config.json."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from ridgeline.catalog import load_data, model_entry
from ridgeline.config_reader import spec_from_hf_config
from ridgeline.errors import InputError
from tests.conftest import config_refused as refused


def config_of(alias: str, **changes: Any) -> dict[str, Any]:
    """A bundled model's config.json, with ``changes`` at its top level."""
    return {**copy.deepcopy(load_data(f"models/{model_entry(alias).file}")), **changes}




# -- rope_scaling's type --------------------------------------------------------------------
def test_a_rope_type_no_engine_builds_is_refused_not_stretched(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """{"rope_type": "frobnicate", "factor": 8} on Llama-3.1-8B was read as a stretch: vLLM's
    served context 131,072 × 8 = 1,048,576 tokens, and decode said vllm would refuse to start
    at it; vLLM refuses the config itself ('Unknown RoPE scaling type')."""
    config = config_of("llama-3.1-8b", rope_scaling={"rope_type": "frobnicate", "factor": 8.0})
    err = refused(capsys, tmp_path, config)
    assert "rope_scaling type 'frobnicate'" in err and "Unknown RoPE scaling type" in err


@pytest.mark.parametrize("scaling", [
    {"rope_type": "dynamic", "alpha": 1000.0},  # Hunyuan's NTK alpha, no factor
    {"type": "mrope", "mrope_section": [16, 24, 24]},  # Qwen2-VL's legacy spelling
    {"type": "su", "short_factor": [1.0], "long_factor": [1.0],
     "original_max_position_embeddings": 4096},  # Phi-3's legacy longrope
    {"rope_type": "default"},
])
def test_the_rope_types_vllm_builds_are_read(scaling: dict[str, Any]) -> None:
    spec = spec_from_hf_config(config_of("llama-3.1-8b", rope_scaling=scaling), "m")
    assert spec.rope_scaling is not None
    assert spec.rope_scaling.type == scaling.get("rope_type", scaling.get("type"))


# -- quantization_config's unquantized modules ----------------------------------------------
@pytest.mark.parametrize("key", ["modules_to_not_convert", "ignore"])
def test_unquantized_modules_given_as_one_string_are_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, key: str) -> None:
    """gpt-oss-20b with "model.layers.*.self_attn" as a string, not a list: read a character
    at a time, its attention was taken for mxfp4 (12.8 GB as stored against 13.8 GB)."""
    config = config_of("gpt-oss-20b")
    config["quantization_config"] = {"quant_method": "mxfp4", key: "model.layers.*.self_attn"}
    err = refused(capsys, tmp_path, config)
    assert f"quantization_config.{key} must be a list of module names" in err
    assert "'model.layers.*.self_attn'" in err


def test_unquantized_modules_in_a_list_leave_attention_at_the_checkpoints_dtype() -> None:
    config = config_of("gpt-oss-20b")
    config["quantization_config"]["modules_to_not_convert"] = ["model.layers.*.self_attn"]
    formats = dict(spec_from_hf_config(config, "m").stored_formats)
    assert "attention" not in formats and formats["experts"] == "mxfp4"


# -- the vision tower -----------------------------------------------------------------------
def gemma3(vision: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    config = config_of("gemma-3-27b", **top)
    config["vision_config"] = {**config["vision_config"], **(vision or {})}
    return config


@pytest.mark.parametrize(("vision", "top", "message"), [
    ({"num_hidden_layers": "27"}, {}, "vision_config: num_hidden_layers must be a whole number"),
    ({"image_size": 0}, {}, "vision_config: image_size must be at least 1, got 0"),
    ({"patch_size": 0}, {}, "vision_config: patch_size must be at least 1, got 0"),
    ({"patch_size": 2000}, {}, r"patch_size \(2000\) exceeds image_size \(896\)"),
    ({}, {"mm_tokens_per_image": -256}, "mm_tokens_per_image must be at least 1, got -256"),
])
def test_a_malformed_vision_tower_is_refused_not_left_uncounted(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, vision: dict[str, Any],
        top: dict[str, Any], message: str) -> None:
    """Gemma-3-27B's SigLIP (423.1M, 0.85 GB that `fit` adds) with a malformed field was
    dropped from the count without a word, or (a 2,000-pixel patch) counted as 14.24B."""
    import re

    assert re.search(message, refused(capsys, tmp_path, gemma3(vision, **top)))


def test_a_vision_tower_in_a_layout_not_read_is_still_left_uncounted() -> None:
    config = gemma3()
    del config["vision_config"]["intermediate_size"]
    spec = spec_from_hf_config(config, "m")
    assert spec.vision_params == 0 and spec.vision_item is None
    assert spec_from_hf_config(gemma3(), "m").vision_params == 423_060_336  # its SigLIP, 423.1M


# -- another file of the checkpoint ---------------------------------------------------------
@pytest.mark.parametrize(("content", "named"), [
    ({"metadata": {"total_size": 16_060_522_496},
      "weight_map": {"lm_head.weight": "model-00004-of-00004.safetensors"}},
     "a safetensors index (model.safetensors.index.json)"),
    ({"version": "1.0", "added_tokens": [], "model": {"type": "BPE", "vocab": {}}},
     "a tokenizer (tokenizer.json)"),
    ({"bos_token_id": 128000, "do_sample": True, "temperature": 0.6},
     "the sampling defaults (generation_config.json)"),
    ({"id": "my-h100", "memory_bandwidth_bytes_per_s": 3.35e12,  # hardware h100 --json's keys
      "peak_flops_per_s": {"bf16": 9.894e14}},
     "an accelerator record (--gpu-file takes it)"),
])
def test_another_checkpoint_file_given_as_config_json_is_named(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, content: dict[str, Any],
        named: str) -> None:
    """It said only "config has no hidden_size or n_embd or d_model"."""
    err = refused(capsys, tmp_path, content)
    assert f"this is {named}, not the model's config.json" in err


def test_a_config_with_geometry_is_never_taken_for_another_file() -> None:
    config = config_of("llama-3.1-8b", do_sample=True, tokenizer_class="LlamaTokenizer")
    assert spec_from_hf_config(config, "m").hidden_size == 4096
    with pytest.raises(InputError, match="config has no num_hidden_layers"):
        spec_from_hf_config({**config, "num_hidden_layers": None}, "m")
