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
    # no strategy with group_size -1: 'channel', one scale a row, as GPTQ's -1 reads
    assert stored_formats(ct_int4(group_size=-1, symmetric=False), "x") == \
        stored_formats({"quant_method": "gptq", "bits": 4, "group_size": -1}, "x")


@pytest.mark.parametrize("qc", [
    {"quant_method": "gptq", "bits": 4, "group_size": -1},
    {"quant_method": "awq", "bits": 4, "group_size": -1},
    ct_int4(strategy="channel"),
])
def test_per_channel_int4_pays_one_scale_a_row_not_one_a_128(qc: dict[str, object]) -> None:
    """group_size -1 (one group a row) had been priced as group 128, 4.156 bits a weight: a
    70B's 1.3 GB too many. A row's scale (and zero) spread over its 4,096 or more inputs is
    under 0.005 bits a weight, so the format sits within that of the bare 4 bits, below g128."""
    fmt = weight_formats()[stored_formats(qc, "x")["mlp"]]
    g128 = weight_formats()["gptq-int4"].bits_per_weight
    assert 4 < fmt.bits_per_weight <= 4 + 20 / 4096 < g128


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


def ct_config(weights: dict[str, object], fmt: str | None = None,
              group_format: str | None = None) -> dict[str, object]:
    """A compressed-tensors quantization_config of one config group over every Linear."""
    group: dict[str, object] = {"targets": ["Linear"], "weights": weights}
    if group_format is not None:
        group["format"] = group_format
    config: dict[str, object] = {"quant_method": "compressed-tensors",
                                 "config_groups": {"group_0": group}}
    if fmt is not None:
        config["format"] = fmt
    return config


FP8_BLOCK = {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128],
             "symmetric": True, "dynamic": False}  # llm-compressor's FP8_BLOCK preset
FP8_CHANNEL = {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True,
               "dynamic": False}  # FP8_DYNAMIC's weights
MXFP4 = {"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32,
         "symmetric": True, "dynamic": False, "scale_dtype": "torch.uint8"}  # MXFP4A16
NVFP4 = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
         "symmetric": True, "dynamic": False}  # NVFP4A16


def llama_bytes(qc: dict[str, object]) -> tuple[float, float]:
    """(weight bytes, linear parameters) of Llama 3.1 8B stored as ``qc`` says."""
    from ridgeline.config_reader import spec_from_hf_config
    from ridgeline.datafiles import load_data
    from ridgeline.params import count_params
    from ridgeline.precision import weight_bytes, weight_plan
    from ridgeline.quantization import LINEAR_CATEGORIES

    config = dict(load_data("models/meta-llama--Llama-3.1-8B.json"))
    config["quantization_config"] = qc
    spec = spec_from_hf_config(config, "llama-ct")
    params = count_params(spec).by_category
    return (weight_bytes(spec, weight_plan(spec)),
            sum(params.get(c, 0) for c in LINEAR_CATEGORIES))


def test_compressed_tensors_fp8_blocks_cost_an_fp32_scale_a_block_as_deepseeks_do() -> None:
    """FP8 in 128 x 128 blocks (RedHat's FP8-block checkpoints) against per-channel FP8: one
    fp32 scale a block more, 32/16384 bits a weight; sized as DeepSeek's weight_block_size is."""
    from ridgeline.quantization import scaled_bits_per_weight

    block, linear = llama_bytes(ct_config(FP8_BLOCK, "float-quantized"))
    channel, _ = llama_bytes(ct_config(FP8_CHANNEL, "float-quantized"))
    native, _ = llama_bytes({"quant_method": "fp8", "weight_block_size": [128, 128]})
    assert block == native
    scale_bits = scaled_bits_per_weight(8, 128 * 128, 32) - 8
    assert block - channel == pytest.approx(linear * scale_bits / 8, rel=2e-3)  # 8.00195 in data


def test_compressed_tensors_mxfp4_is_4_bits_and_an_8_bit_scale_per_32_not_nvfp4() -> None:
    """MXFP4 (an E8M0 scale per 32) is a quarter bit a weight smaller than NVFP4 (an E4M3
    scale per 16), and sized as gpt-oss's own mxfp4 checkpoint is."""
    from ridgeline.quantization import scaled_bits_per_weight

    mx, linear = llama_bytes(ct_config(MXFP4, "mxfp4-pack-quantized"))
    nv, _ = llama_bytes(ct_config(NVFP4, "nvfp4-pack-quantized"))
    native, _ = llama_bytes({"quant_method": "mxfp4"})
    assert mx == native
    per_weight = scaled_bits_per_weight(4, 16, 8) - scaled_bits_per_weight(4, 32, 8)
    assert nv - mx == pytest.approx(linear * per_weight / 8)


@pytest.mark.parametrize("qc", [
    ct_config(MXFP4, "mxfp4-pack-quantized"),
    ct_config(MXFP4),  # the preset's arguments alone: group_size 32
    ct_config({"num_bits": 4, "type": "float"}, "mxfp4-pack-quantized"),  # the format alone
    ct_config(MXFP4, "mixed-precision", "mxfp4-pack-quantized"),  # the group's own format
])
def test_every_spelling_of_compressed_tensors_mxfp4_reads_as_mxfp4(
        qc: dict[str, object]) -> None:
    assert set(stored_formats(qc, "x").values()) == {"mxfp4"}


def test_the_scaled_formats_bits_are_the_formulas() -> None:
    """formats.json's rows that compressed-tensors schemes map to agree with the formula."""
    from ridgeline.quantization import scaled_bits_per_weight

    assert weight_formats()["mxfp4"].bits_per_weight == scaled_bits_per_weight(4, 32, 8)
    assert weight_formats()["nvfp4"].bits_per_weight == scaled_bits_per_weight(4, 16, 8)
    assert weight_formats()["fp8-block"].bits_per_weight == pytest.approx(
        scaled_bits_per_weight(8, 128 * 128, 32), abs=1e-5)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("stored", ["naive-quantized", "int-quantized"])
def test_compressed_tensors_weight_only_int_a_byte_a_weight_is_refused_as_vllm_refuses_it(
        stored: str, bits: int) -> None:
    """vLLM takes weight-only integer weights pack-quantized only; unpacked, each value fills
    a byte, and vLLM asserts such a group is float."""
    with pytest.raises(InputError, match=f"int{bits} stored {stored} .*pack-quantized only"):
        stored_formats(ct_config({"num_bits": bits, "type": "int", "group_size": 128}, stored),
                       "x")
    packed = ct_config({"num_bits": 4, "type": "int", "group_size": 128}, "pack-quantized")
    assert stored_formats(packed, "x")["mlp"] == "int4-g128-sym"


def test_compressed_tensors_int8_is_w8a8_with_int_activations_and_w8a16_without() -> None:
    """W8A8 (int8 activations) multiplies in int8; W8A16 (weights alone, pack-quantized)
    dequantizes to 16-bit matmuls, as CompressedTensorsWNA16 serves it."""
    channel = {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True}
    w8a8 = ct_config(channel, "int-quantized")
    w8a8["config_groups"]["group_0"]["input_activations"] = {  # type: ignore[index]
        "num_bits": 8, "type": "int", "strategy": "token", "dynamic": True}
    assert stored_formats(w8a8, "x")["mlp"] == "int8"
    w8a16 = stored_formats(ct_config(channel, "pack-quantized"), "x")["mlp"]
    assert w8a16 == "int8-w8a16"
    assert "int8" not in weight_formats()[w8a16].compute_dtypes


@pytest.mark.parametrize(("qc", "message"), [
    (ct_config({**MXFP4, "group_size": 16}, "mxfp4-pack-quantized"),
     "mxfp4-pack-quantized in groups of 16 is not supported"),
    (ct_config({**MXFP4, "group_size": 64}), "4-bit float in groups of 64 is not supported"),
    (ct_config({**FP8_BLOCK, "block_structure": None}), "'block' needs a block_structure"),
    (ct_config({**FP8_BLOCK, "block_structure": "128x128"}),
     r"block_structure must be two whole numbers \[rows, columns\]"),
])
def test_compressed_tensors_float_schemes_it_cannot_size_are_refused(
        qc: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        stored_formats(qc, "x")
