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


K2_THINKING_QC = {
    # moonshotai/Kimi-K2-Thinking's quantization_config (config.json), as quoted by
    # get_kimi_k2_quantization_config in a public abliteration tool ("Based on the config.json
    # from moonshotai/Kimi-K2-Thinking"): int4 symmetric in groups of 32, routed experts only
    "quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
        "num_bits": 4, "type": "int", "strategy": "group", "group_size": 32,
        "symmetric": True, "dynamic": False}}},
    "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
               "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
}


def ct_int4(**weights: object) -> dict[str, object]:
    return {"quant_method": "compressed-tensors",
            "config_groups": {"group_0": {"targets": ["Linear"],
                                          "weights": {"num_bits": 4, "type": "int", **weights}}}}


def test_kimi_k2_thinking_stores_only_its_routed_experts_at_4_5_bits() -> None:
    from ridgeline.precision import weight_format
    from ridgeline.quantization import int_bits_per_weight

    formats = stored_formats(K2_THINKING_QC, "x")
    # the ignore regexes keep attention, shared experts and the dense MLP at bf16
    assert not {"attention", "shared_experts", "mlp", "lm_head"} & set(formats)
    assert weight_format(formats["experts"]).bits_per_weight == int_bits_per_weight(4, 32, True)
    assert int_bits_per_weight(4, 32, True) == 4 + 16 / 32  # one bf16 scale per 32, no zero


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("group", [32, 64, 128])
def test_compressed_tensors_int4_bits_follow_group_size_and_symmetry(
        group: int, symmetric: bool) -> None:
    from ridgeline.quantization import int_bits_per_weight

    fmt = stored_formats(ct_int4(strategy="group", group_size=group, symmetric=symmetric),
                         "x")["experts"]
    assert weight_formats()[fmt].bits_per_weight == int_bits_per_weight(4, group, symmetric)


def test_a_zero_point_costs_4_bits_a_group() -> None:
    """Asymmetric group 128 (GPTQ's layout) against symmetric group 32 (Kimi-K2-Thinking): the
    smaller group costs more in scales than the zero point does."""
    sym32 = weight_formats()[stored_formats(ct_int4(group_size=32), "x")["mlp"]]
    asym128 = weight_formats()[stored_formats(ct_int4(group_size=128, symmetric=False),
                                              "x")["mlp"]]
    sym128 = weight_formats()[stored_formats(ct_int4(group_size=128), "x")["mlp"]]
    assert asym128.id == "gptq-int4"  # the same bits as a GPTQ checkpoint of group 128
    assert asym128.bits_per_weight - sym128.bits_per_weight == 4 / 128
    assert sym32.bits_per_weight - sym128.bits_per_weight == 16 / 32 - 16 / 128


def test_compressed_tensors_defaults_are_read_as_compressed_tensors_infers_them() -> None:
    # no strategy with a positive group_size: 'group'; no symmetric: true
    assert stored_formats(ct_int4(group_size=32), "x") == \
        stored_formats(ct_int4(strategy="group", group_size=32, symmetric=True), "x")
    # one scale per row is fewer scales than one per 128 weights: read as group 128
    assert stored_formats(ct_int4(strategy="channel"), "x") == \
        stored_formats(ct_int4(group_size=128), "x")
    assert stored_formats(ct_int4(group_size=-1, symmetric=False), "x") == \
        stored_formats(ct_int4(group_size=128, symmetric=False), "x")


@pytest.mark.parametrize(("weights", "message"), [
    ({}, "strategy 'tensor' is not supported"),
    ({"strategy": "block"}, "strategy 'block' is not supported"),
    ({"group_size": 256}, r"groups of 256 \(4.0625 bits a weight\) is not supported"),
    ({"group_size": 32, "scale_dtype": "torch.float32"}, "torch.float32 scales"),
    ({"group_size": 32, "symmetric": "yes"}, "symmetric must be true or false"),
    ({"strategy": "group"}, "needs a positive group_size"),
])
def test_compressed_tensors_int4_it_cannot_size_is_refused(weights: dict[str, object],
                                                          message: str) -> None:
    with pytest.raises(InputError, match=message):
        stored_formats(ct_int4(**weights), "x")
