"""Reading a checkpoint's quantization_config into formats per weight category."""

from __future__ import annotations

import pytest

from ridgeline.errors import InputError
from ridgeline.precision import weight_formats
from ridgeline.quantization import category_of, stored_formats


def test_module_names_map_to_categories() -> None:
    assert category_of("model.layers.3.mlp.experts") == "experts"
    assert category_of("model.layers.3.mlp.gate") == "router"
    assert category_of("model.layers.3.self_attn.q_proj") == "attention"
    assert category_of("model.language_model.layers.0.linear_attn.in_proj_qkv") == "linear_attention"
    assert category_of("lm_head") == "lm_head"


def test_block_fp8_covers_linear_layers_only() -> None:
    formats = stored_formats({"quant_method": "fp8", "weight_block_size": [128, 128]}, "x")
    assert formats["experts"] == "fp8-block"
    assert "embedding" not in formats and "lm_head" not in formats and "router" not in formats


def test_modules_to_not_convert_keep_their_dtype() -> None:
    qc = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}
    formats = stored_formats(qc, "x")
    assert "attention" not in formats and formats["experts"] == "mxfp4"


@pytest.mark.parametrize(("group", "fmt"), [(128, "gptq-int4"), (64, "gptq-int4-g64"),
                                              (32, "gptq-int4-g32")])
def test_gptq_group_size_decides_the_bits(group: int, fmt: str) -> None:
    formats = stored_formats({"quant_method": "gptq", "bits": 4, "group_size": group}, "x")
    assert formats["mlp"] == fmt
    assert fmt in weight_formats()


@pytest.mark.parametrize("group", [0, -2])
def test_a_group_of_no_weights_is_refused(group: int) -> None:
    with pytest.raises(InputError, match=f"group_size is {group}: a group holds some weights"):
        stored_formats({"quant_method": "gptq", "bits": 4, "group_size": group}, "x")


def test_every_format_a_config_can_name_exists_in_the_table() -> None:
    for qc in ({"quant_method": "awq", "bits": 4, "group_size": 64},
               {"quant_method": "modelopt", "quant_algo": "NVFP4"},
               {"quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}}}):
        for fmt in stored_formats(qc, "x").values():
            assert fmt in weight_formats()


@pytest.mark.parametrize("qc", [{"quant_method": "hqq"}, {"quant_method": "gptq", "bits": 3},
                                {"quant_method": "bitsandbytes",
                                 "bnb_4bit_quant_storage": "bfloat16"},
                                {"quant_method": "bitsandbytes", "load_in_8bit": "yes"},
                                {"quant_method": "modelopt", "quantized_layers": {"a.mlp": []}},
                                "fp8"])
def test_unsupported_or_malformed_configs_are_refused(qc: object) -> None:
    with pytest.raises(InputError):
        stored_formats(qc, "x")


def test_a_checkpoint_keeps_its_quant_method_the_engines_match_quantization_against() -> None:
    """vLLM and SGLang compare --quantization with quantization_config.quant_method."""
    from ridgeline.catalog import resolve_model
    from ridgeline.quantization import checkpoint_method

    assert resolve_model("qwen3-235b-a22b-fp8").quant_method == "fp8"
    assert resolve_model("gpt-oss-120b").quant_method == "mxfp4"
    assert resolve_model("llama-3.1-8b").quant_method == ""
    assert checkpoint_method({"quant_method": "Compressed-Tensors"}) == "compressed-tensors"
    assert checkpoint_method(None) == ""
