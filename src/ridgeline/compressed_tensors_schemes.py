"""compressed-tensors checkpoints that quantization.py's dense W4A16 / W8A8 / FP4 readers do not
cover: 2:4 sparse ones (the marlin-24 format, a sparsity_config) and int4 weights with 8-bit
activations (W4A8).

vLLM has dropped both of its 2:4 paths, so those checkpoints are refused, saying what vLLM
held for them; W4A8 with fp8 activations is served on Hopper only (engine_platforms.py), and
W4A8 with int8 activations on no GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ridgeline.errors import InputError

# 2:4 metadata: each kept value's position among its four, 2 bits, two kept a four: 4 bits/4
SPARSE24_METADATA_BITS_PER_WEIGHT = 2 * 2 / 4


def sparse24_bits_per_weight(value_bits: int, group_size: int, scale_bits: int = 16) -> float:
    """Bits a 2:4 sparse weight takes as vLLM's Marlin-24 held it, per weight of the dense matrix.

    bits = value_bits / 2           (two values kept of every four)
         + 1                        (the 2:4 metadata: a 2-bit position for each kept value)
         + scale_bits / group_size  (one 16-bit scale a group of dense input positions)
    int4 in groups of 128 (CompressedTensorsW4A16Sparse24): 2 + 1 + 16/128 = 3.125 bits.
    """
    return value_bits / 2 + SPARSE24_METADATA_BITS_PER_WEIGHT + scale_bits / group_size


# vllm-project/vllm, vllm/model_executor/layers/quantization/compressed_tensors/schemes/
# compressed_tensors_w4a16_24.py (CompressedTensorsW4A16Sparse24, before its removal), per
# K x N weight (K inputs): weight_packed int32 [K/32, 2N] = 2 bits a dense weight (the kept
# half at 4 bits), meta int16 [K/32, 2N] = 1 bit, scale_packed [K/group, N] in the checkpoint
# dtype (one row for 'channel'); 4-bit only (W4A16SPARSE24_SUPPORTED_BITS), symmetric (uint4b8,
# asserted), group 128 or channel (gptq_marlin_24.py). Its kernel multiplies on the sparse
# tensor cores (csrc/quantization/marlin/sparse/common/mma.h: mma.sp m16n8k32 with fp16
# operands), so it skips the pruned half: the dense FLOPs at twice the fp16 rate, fp16 only.
# vLLM dropped it (PR #32688, January 2026: "vLLM will no longer support marlin24 models",
# vllm-project/llm-compressor issue #2267; schemes/__init__.py no longer imports the scheme).
MARLIN_24_SOURCE = "vLLM PR #32688 dropped its Marlin 2:4 kernel in January 2026"


def marlin_24_refusal(origin: str, weights: Mapping[str, Any]) -> str:
    """The one line refusing a compressed-tensors marlin-24 checkpoint, with what vLLM held."""
    if weights.get("num_bits") != 4:
        return (f"{origin}: compressed-tensors marlin-24 with {weights.get('num_bits')}-bit "
                "weights is not served: vLLM's Marlin 2:4 took 4-bit ones only "
                f"(W4A16SPARSE24_SUPPORTED_BITS), and {MARLIN_24_SOURCE}")
    group = weights.get("group_size")
    per_row = group in (None, -1) or weights.get("strategy") == "channel"
    held = (f"{sparse24_bits_per_weight(4, 1, scale_bits=0):g} bits a weight and a 16-bit "
            "scale a row" if per_row else
            f"{sparse24_bits_per_weight(4, 128):g} bits a weight in groups of 128")
    return (f"{origin}: compressed-tensors marlin-24 (2:4 sparse int4, which vLLM held at "
            f"{held}: half the values, their 2:4 positions and the scales) is not served: "
            f"{MARLIN_24_SOURCE}; quantize the dense checkpoint instead (pack-quantized W4A16)")


# vLLM's 2:4 sparse path (compressed_tensors.py supports_cutlass_24): a sparsity_config with
# sparsity_structure '2:4' stored 'dense' or 'sparse-24-bitmask', on a layer unquantized or
# W8A8 at 8 bits (weights 'tensor' or 'channel', activations 'tensor' or 'token'), went to
# CompressedTensors24, whose every method raises "Sparse24 models are no longer supported by
# vLLM" since PR #36799 (merged March 2026). Other layers stored dense read through their own
# scheme; 'sparse-bitmask' (unstructured: the kept values, a bitmask and row offsets) has no
# reader in vLLM at all.
SPARSE24_SOURCE = ("vLLM sends them to CompressedTensors24, which raises 'Sparse24 models are no "
                   "longer supported by vLLM' since PR #36799 (2026)")


def sparsity_problem(qc: Mapping[str, Any], origin: str) -> None:
    """Refuses a sparsity_config vLLM does not serve (see above); other sparsity passes, its
    weights read by the config group's own scheme, dense."""
    sparsity = qc.get("sparsity_config")
    if not sparsity:
        return
    if not isinstance(sparsity, Mapping):
        raise InputError(f"{origin}: quantization_config.sparsity_config must be a JSON object")
    stored = str(sparsity.get("format") or "dense").lower()
    structure = str(sparsity.get("sparsity_structure") or "unstructured").lower()
    if stored == "sparse-bitmask":
        raise InputError(f"{origin}: compressed-tensors sparse-bitmask weights (the kept values, "
                         "a bitmask and row offsets) are not supported: vLLM reads sparse "
                         "weights only as 2:4 (compressed_tensors.py supports_cutlass_24 takes "
                         "'dense' or 'sparse-24-bitmask'); save the checkpoint dense")
    if stored == "sparse-24-bitmask" or (structure == "2:4" and stored == "dense"
                                         and _cutlass_24_takes(qc)):
        raise InputError(f"{origin}: compressed-tensors 2:4 sparse weights stored {stored} are "
                         f"not supported: {SPARSE24_SOURCE}; save the checkpoint dense "
                         "without a sparsity_config, which vLLM reads with the weights' own "
                         "scheme")


def _cutlass_24_takes(qc: Mapping[str, Any]) -> bool:
    """Whether vLLM's supports_cutlass_24 sent the first config group (none: unquantized) to
    CompressedTensors24: unquantized, or 8-bit weights per tensor or channel with 8-bit
    activations per tensor or token."""
    group = next(iter((qc.get("config_groups") or {}).values()), None) or {}
    weights, acts = group.get("weights"), group.get("input_activations")
    if not weights and not acts:
        return True
    if not (isinstance(weights, Mapping) and isinstance(acts, Mapping)):
        return False  # weight-only: vLLM reads it through its own scheme, dense
    return (weights.get("num_bits") == acts.get("num_bits") == 8
            and weights.get("strategy") in ("tensor", "channel")
            and acts.get("strategy") in ("tensor", "token"))


# compressed-tensors int4 weights with fp8 activations (W4A8-FP8), as vLLM serves them
# (vllm-project/vllm, compressed_tensors.py _is_fp8_w4a8_sm90 -> schemes/
# compressed_tensors_w4a8_fp8.py CompressedTensorsW4A8Fp8): symmetric int4 in groups of 128
# ('W4A8 kernels require group quantization with group size 128'), packed eight to an int32,
# with dynamic per-token fp8 activations, on compute capability 9.0 exactly (match_exact):
# elsewhere no scheme takes it. The CUTLASS W4A8 kernel (kernels/linear/mixed_precision/
# cutlass.py, 'CUTLASS W4A8 requires compute capability of 90 (Hopper)') multiplies at the fp8
# rate; it casts the group scales to fp8 and packs each into 8 (pack_scale_fp8: numel * 8 fp8
# elements), 64 bits a group of 128: 4 + 64/128 = 4.5 bits (formats.json int4-w4a8-fp8).
W4A8_FP8_GROUP = 128
W4A8_FP8_FORMAT = "int4-w4a8-fp8"


def w4a8_format(weights: Mapping[str, Any], acts: Any, stored: str, origin: str) -> str:
    """int4 weights with 8-bit activations: fp8 activations in vLLM's one W4A8-FP8 layout read as
    int4-w4a8-fp8; int8 activations, other layouts and other widths refused in one line."""
    if not isinstance(acts, Mapping):
        raise InputError(f"{origin}: compressed-tensors input_activations must be a JSON object")
    bits, kind = acts.get("num_bits"), acts.get("type")
    if bits == 8 and kind == "int":
        raise InputError(
            f"{origin}: compressed-tensors W4A8 with int8 activations is not supported on "
            "GPUs: vLLM's CompressedTensorsW4A8Int holds its int4 weights a byte each and no "
            "CUDA or ROCm kernel takes signed int4 with 16-bit inputs (choose_mp_linear_kernel: "
            "CUTLASS W4A8 wants fp8 activations; Marlin, Machete, Exllama and Conch unsigned "
            "int4), only the CPU's Dynamic4bitLinearKernel and Intel XPU's; serve W4A16 "
            "(pack-quantized) or W8A8 int8")
    if not (bits == 8 and kind == "float"):
        raise InputError(f"{origin}: compressed-tensors int4 weights with {bits}-bit {kind} "
                         "activations are not supported (vLLM's W4A8 takes 8-bit ones)")
    group = weights.get("group_size")
    layout = (weights.get("strategy") in ("group", None) and group == W4A8_FP8_GROUP
              and weights.get("symmetric") is not False and not weights.get("dynamic")
              and acts.get("strategy") == "token" and acts.get("dynamic") is True
              and acts.get("symmetric") is not False)
    if not layout:
        raise InputError(f"{origin}: compressed-tensors W4A8 with fp8 activations is served in "
                         f"one layout only: symmetric int4 in groups of {W4A8_FP8_GROUP}, fp8 "
                         "activations per token, dynamic (vLLM's CompressedTensorsW4A8Fp8)")
    if stored not in ("pack-quantized", ""):
        raise InputError(f"{origin}: compressed-tensors W4A8 with fp8 activations stored "
                         f"{stored} is not supported: vLLM's CompressedTensorsW4A8Fp8 loads "
                         "int4 weights pack-quantized (eight to an int32) only")
    return W4A8_FP8_FORMAT
