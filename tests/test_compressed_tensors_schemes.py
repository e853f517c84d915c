"""compressed-tensors checkpoints beyond the dense schemes: 2:4 sparse ones (marlin-24, a
sparsity_config), refused as vLLM now refuses them, and int4 weights with 8-bit activations
(W4A8): fp8 activations priced on Hopper, int8 activations refused."""

from __future__ import annotations

import pytest

from ridgeline.engine_platforms import weights_platform_problem
from ridgeline.errors import InputError
from ridgeline.hardware import resolve_accelerator
from ridgeline.precision import weight_formats, weight_plan
from ridgeline.quantization import int_bits_per_weight, scaled_bits_per_weight, stored_formats
from tests.test_quantization import ct_config, llama_bytes

INT4 = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128,
        "symmetric": True, "dynamic": False}  # W4A16's weights; W4A8's too
FP8_TOKEN = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True,
             "symmetric": True}  # W4A8-FP8's activations (llm-compressor's W4AFP8 preset)
INT8_TOKEN = {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True,
              "symmetric": True}  # W4A8's int8 activations
FP8_CHANNEL = {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True,
               "dynamic": False}


def with_acts(config: dict[str, object], acts: dict[str, object]) -> dict[str, object]:
    """``config`` with its one group's input_activations set to ``acts``."""
    groups = config["config_groups"]
    assert isinstance(groups, dict)
    groups["group_0"]["input_activations"] = acts
    return config


def sparse(config: dict[str, object], stored: str, structure: str = "2:4") -> dict[str, object]:
    config["sparsity_config"] = {"format": stored, "sparsity_structure": structure,
                                 "targets": ["Linear"], "ignore": ["lm_head"]}
    return config


def test_marlin_24_held_half_the_values_their_positions_and_the_scales() -> None:
    """vLLM's CompressedTensorsW4A16Sparse24 tensors for a K x N weight (K inputs), group 128:
    weight_packed int32 [K/32, 2N], meta int16 [K/32, 2N], scale_packed 16-bit [K/128, N];
    the formula's bits a dense weight are their bytes over K x N."""
    from ridgeline.compressed_tensors_schemes import sparse24_bits_per_weight

    k, n = 4096, 14336
    held_bytes = (k // 32 * 2 * n * 4  # the kept half, eight 4-bit values an int32
                  + k // 32 * 2 * n * 2  # the 2:4 metadata, int16
                  + k // 128 * n * 2)  # one 16-bit scale a group of 128 inputs
    assert sparse24_bits_per_weight(4, 128) == held_bytes * 8 / (k * n)
    # a quarter fewer bits than the dense checkpoint it was pruned from
    assert sparse24_bits_per_weight(4, 128) < 0.8 * int_bits_per_weight(4, 128, True)


def test_a_marlin_24_checkpoint_is_refused_with_what_vllm_held_for_it() -> None:
    from ridgeline.compressed_tensors_schemes import sparse24_bits_per_weight

    with pytest.raises(InputError, match="PR #32688") as refusal:
        stored_formats(ct_config(INT4, "marlin-24"), "x")
    assert f"{sparse24_bits_per_weight(4, 128):g} bits a weight in groups of 128" in \
        str(refusal.value)
    with pytest.raises(InputError, match="4-bit ones only"):
        stored_formats(ct_config({**INT4, "num_bits": 8}, "marlin-24"), "x")
    with pytest.raises(InputError, match="a 16-bit scale a row"):  # strategy channel
        stored_formats(ct_config({**INT4, "strategy": "channel", "group_size": None},
                                 "marlin-24"), "x")


@pytest.mark.parametrize("config", [
    sparse(with_acts(ct_config(FP8_CHANNEL, "float-quantized"), FP8_TOKEN), "sparse-24-bitmask"),
    sparse(with_acts(ct_config(FP8_CHANNEL, "float-quantized"), FP8_TOKEN), "dense"),
    sparse({"quant_method": "compressed-tensors"}, "dense"),  # 2:4 alone, unquantized
])
def test_2_4_sparsity_vllm_sent_to_compressed_tensors_24_is_refused(
        config: dict[str, object]) -> None:
    with pytest.raises(InputError, match="Sparse24 models are no longer supported by vLLM"):
        stored_formats(config, "x")


def test_sparsity_vllm_reads_past_is_sized_as_the_weights_scheme_alone() -> None:
    """A weight-only group stored dense (CompressedTensorsWNA16 reads it whatever its sparsity
    says) and an unstructured dense sparsity_config size as the same checkpoint without one."""
    dense = stored_formats(ct_config(INT4, "pack-quantized"), "x")
    assert stored_formats(sparse(ct_config(INT4, "pack-quantized"), "dense"), "x") == dense
    fp8 = with_acts(ct_config(FP8_CHANNEL, "float-quantized"), FP8_TOKEN)
    assert stored_formats(sparse(fp8, "dense", "unstructured"), "x") == \
        stored_formats(with_acts(ct_config(FP8_CHANNEL, "float-quantized"), FP8_TOKEN), "x")


def test_bitmask_sparsity_has_no_reader_in_vllm() -> None:
    with pytest.raises(InputError, match=r"sparse-bitmask weights .* not supported"):
        stored_formats(sparse(ct_config(INT4, "pack-quantized"), "sparse-bitmask",
                              "unstructured"), "x")
    with pytest.raises(InputError, match="sparsity_config must be a JSON object"):
        stored_formats({**ct_config(INT4, "pack-quantized"), "sparsity_config": "2:4"}, "x")


@pytest.mark.parametrize("stored", ["int-quantized", "pack-quantized"])
def test_w4a8_with_int8_activations_is_refused_on_gpus(stored: str) -> None:
    """vLLM's CompressedTensorsW4A8Int finds no CUDA or ROCm kernel for signed int4 weights."""
    with pytest.raises(InputError, match=r"W4A8 with int8 activations .* Dynamic4bitLinear"):
        stored_formats(with_acts(ct_config(INT4, stored), INT8_TOKEN), "x")


def test_w4a8_fp8_holds_an_eightfold_fp8_scale_a_group_of_128() -> None:
    """int4 weights with fp8 activations: the CUTLASS W4A8 kernel's eight fp8 copies of each
    group's scale (64 bits a 128) in place of W4A16's one 16-bit scale."""
    w4a8, linear = llama_bytes(with_acts(ct_config(INT4, "pack-quantized"), FP8_TOKEN))
    w4a16, _ = llama_bytes(ct_config(INT4, "pack-quantized"))
    held = scaled_bits_per_weight(4, 128, 8 * 8)
    assert weight_formats()["int4-w4a8-fp8"].bits_per_weight == held
    assert w4a8 - w4a16 == pytest.approx(linear * (held - int_bits_per_weight(4, 128, True)) / 8)
    assert weight_formats()["int4-w4a8-fp8"].compute_dtypes == ("fp8",)


@pytest.mark.parametrize(("weights", "acts", "stored", "message"), [
    ({**INT4, "group_size": 64}, FP8_TOKEN, "pack-quantized", "groups of 128"),
    ({**INT4, "symmetric": False}, FP8_TOKEN, "pack-quantized", "symmetric int4"),
    (INT4, {**FP8_TOKEN, "dynamic": False}, "pack-quantized", "per token, dynamic"),
    (INT4, FP8_TOKEN, "int-quantized", "stored int-quantized is not supported"),
    (INT4, {**FP8_TOKEN, "num_bits": 4}, "pack-quantized", "4-bit float activations"),
])
def test_w4a8_fp8_outside_vllms_one_layout_is_refused(
        weights: dict[str, object], acts: dict[str, object], stored: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        stored_formats(with_acts(ct_config(weights, stored), acts), "x")


@pytest.mark.parametrize("gpu", ["h100", "h200", "a100", "b200", "l40s", "mi300x"])
def test_w4a8_fp8_runs_on_hopper_alone(gpu: str) -> None:
    """vLLM picks CompressedTensorsW4A8Fp8 on compute capability 9.0 exactly."""
    from ridgeline.config_reader import spec_from_hf_config
    from ridgeline.datafiles import load_data

    config = dict(load_data("models/meta-llama--Llama-3.1-8B.json"))
    config["quantization_config"] = with_acts(ct_config(INT4, "pack-quantized"), FP8_TOKEN)
    spec = spec_from_hf_config(config, "llama-w4a8")
    acc = resolve_accelerator(gpu)
    problem = weights_platform_problem(weight_plan(spec), acc, "vllm", False)
    assert (problem == "") == (acc.family == "hopper"), problem
    if problem:
        assert "compute capability 9.0 only" in problem
