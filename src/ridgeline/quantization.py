"""Weight categories, and the formats a checkpoint's ``quantization_config`` stores them in.

A format quantizes categories of weights, never all of them: vLLM's fp8 leaves embeddings,
lm_head, norms and routers in bf16; gpt-oss stores only its experts in MXFP4 (its
``modules_to_not_convert`` lists attention, router, embeddings, lm_head).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from ridgeline.compressed_tensors_schemes import marlin_24_refusal, sparsity_problem, w4a8_format
from ridgeline.errors import InputError, shorten
from ridgeline.exclusion_patterns import (
    COMPONENT,
    EQUAL_OR_RE,
    PIECE,
    WILDCARD,
    literal_layer,
    matched_probes,
)
from ridgeline.modelopt_algos import KV_ONLY, algo_formats

EMBEDDING = "embedding"
LM_HEAD = "lm_head"
ATTENTION = "attention"
MLP = "mlp"
EXPERTS = "experts"
SHARED_EXPERTS = "shared_experts"
ROUTER = "router"
LINEAR_ATTENTION = "linear_attention"
SSM = "mamba"
OTHER = "other"  # norms, biases, conv filters, SSM A/D vectors, attention sinks
EXPERT_BIAS = "expert_bias"  # gpt-oss's per-expert biases: read with their expert, never quantized

def head_category(tied: bool) -> str:
    """The weight category the LM head's matmul reads: the embedding where the model ties
    them (tie_word_embeddings: Llama-3.2-1B), else its own lm_head."""
    return EMBEDDING if tied else LM_HEAD


# What a "linear" weight format covers; GGUF "all" formats also cover embeddings and lm_head.
LINEAR_CATEGORIES = (ATTENTION, MLP, EXPERTS, SHARED_EXPERTS, LINEAR_ATTENTION, SSM)
CATEGORIES = (EMBEDDING, LM_HEAD, *LINEAR_CATEGORIES, ROUTER, OTHER, EXPERT_BIAS)
ROUTED = (EXPERTS, EXPERT_BIAS)  # what a token reads only of the experts it is sent to

# Module-name fragments (HF parameter names) -> category.
_NAME_HINTS = (
    ("shared_expert_gate", ROUTER),  # Qwen's one-output gate on its shared expert
    ("shared_expert", SHARED_EXPERTS),
    ("mlp.experts", EXPERTS),
    ("block_sparse_moe.experts", EXPERTS),
    ("linear_attn", LINEAR_ATTENTION),
    ("self_attn", ATTENTION),
    ("mixer", SSM),
    ("lm_head", LM_HEAD),
    ("embed_tokens", EMBEDDING),
    ("mlp.router", ROUTER),
    ("mlp.gate.", ROUTER),
    ("mlp", MLP),
)


def category_of(module_name: str) -> str | None:
    """'model.layers.0.mlp.experts' -> 'experts'; None when the name says nothing known."""
    name = module_name.lower()
    if name.endswith("mlp.gate"):
        return ROUTER
    for fragment, category in _NAME_HINTS:
        if fragment in name:
            return category
    return None


def checkpoint_method(qc: Any) -> str:
    """quantization_config's quant_method in lower case ('fp8', 'awq', 'compressed-tensors';
    '' where the checkpoint has none): the name vLLM's and SGLang's _verify_quantization
    match --quantization against (engine_quantization.quantized_weights)."""
    if not isinstance(qc, Mapping):
        return ""
    return str(qc.get("quant_method") or "").lower()


def checkpoint_algo(qc: Any) -> str:
    """quantization_config's quant_algo in upper case ('FP8', 'NVFP4', 'MIXED_PRECISION';
    '' where it names none): what tells vLLM's and SGLang's ModelOpt methods apart on one
    quant_method 'modelopt' (their override_quantization_method: FP8 -> modelopt, NVFP4 ->
    modelopt_fp4, MIXED_PRECISION -> modelopt_mixed)."""
    if not isinstance(qc, Mapping):
        return ""
    return str(modelopt_block(qc).get("quant_algo") or "").upper()


def modelopt_block(qc: Mapping[str, Any]) -> Mapping[str, Any]:
    """Where a ModelOpt quantization_config keeps its algorithms: the ``quantization`` block of
    hf_quant_config.json's layout (``{"producer": …, "quantization": {"quant_algo": "FP8",
    …}}``, which vLLM takes whole as the quantization_config: modelopt_sidecar.py), else the
    config itself (config.json's flat layout); any other method's config is itself."""
    inner = qc.get("quantization")
    if isinstance(inner, Mapping) and str(qc.get("quant_method") or "").lower() == "modelopt":
        return inner
    return qc


def stored_formats(qc: Any, origin: str, num_layers: int | None = None) -> Mapping[str, str]:
    """{category: format id} of a checkpoint; categories absent stay at its dtype. Without
    ``num_layers`` a category an exclusion names in any layer is read as wholly unquantized."""
    return stored_layout(qc, origin, num_layers)[0]


def stored_layout(qc: Any, origin: str, num_layers: int | None = None
                  ) -> tuple[Mapping[str, str], Mapping[str, frozenset[int]]]:
    """({category: format id}, {category: layers its exclusions leave at the dtype}) over a
    model of ``num_layers`` layers: a category named unquantized in every layer is left out
    of the first; one named in some layers only ('model.layers.0.mlp*': DeepSeek's and GLM's
    dense first layers kept in bf16) stays in it, and its layers are in the second."""
    if qc is None:
        return {}, {}
    if not isinstance(qc, Mapping):
        raise InputError(f"{origin}: quantization_config must be a JSON object")
    try:
        return _stored_layout(qc, origin, num_layers)
    except (TypeError, AttributeError):
        raise InputError(f"{origin}: quantization_config is malformed") from None


def _stored_layout(qc: Mapping[str, Any], origin: str, num_layers: int | None
                   ) -> tuple[Mapping[str, str], Mapping[str, frozenset[int]]]:
    method = str(qc.get("quant_method", "")).lower()
    if method == "modelopt":
        qc = modelopt_block(qc)
        if isinstance(qc.get("quantized_layers"), Mapping):
            return _per_layer_modelopt(qc["quantized_layers"], origin), {}
        if qc.get("quant_algo") is None:  # its KV cache alone quantized (quant_algo null)
            return {}, {}
    fmt = _uniform_format(method, qc, origin)
    layers = num_layers if num_layers is not None else _UNKNOWN_LAYERS
    excluded = _excluded_layers(_exclusions(qc, method, origin), layers)
    if num_layers is None:  # no layer list: a category named anywhere is named everywhere
        whole = set(excluded)
    else:
        whole = {c for c, named in excluded.items() if len(named) >= num_layers}
    formats = {c: fmt for c in LINEAR_CATEGORIES if c not in whole}
    return formats, {c: named for c, named in excluded.items() if c in formats}


_UNKNOWN_LAYERS = 256  # the layers a pattern is tried on where the model's are not known


def _exclusions(qc: Mapping[str, Any], method: str, origin: str) -> list[tuple[str, str]]:
    """(pattern, how it is matched) for each module the checkpoint names unquantized, read
    as exclusion_patterns.py says vLLM reads each key; the MTP layers' own ('mtp.layers.0*')
    are left out: ridgeline does not count those weights."""
    not_convert = EQUAL_OR_RE if method == "fp8" else PIECE
    found = [(m, not_convert) for m in _module_names(qc, "modules_to_not_convert", origin)]
    found += [(m, EQUAL_OR_RE) for m in _module_names(qc, "ignore", origin) if "mtp" not in m]
    if method == "modelopt":  # hf_quant_config.json's name for what stays unquantized
        found += [(m, WILDCARD) for m in _module_names(qc, "exclude_modules", origin)
                  if "mtp" not in m]
    if method == "bitsandbytes":  # transformers' BitsAndBytesConfig names its exclusions so
        found += [(m, COMPONENT) for m in _module_names(qc, "llm_int8_skip_modules", origin)]
    return found


def _excluded_layers(patterns: list[tuple[str, str]], num_layers: int
                     ) -> dict[str, frozenset[int]]:
    """{linear category: the layers a pattern names it in}, by the probes each pattern
    matches (exclusion_patterns.matched_probes); a pattern matching none is read by its own
    words (category_of), in the layer it names or else in all."""
    named: dict[str, set[int]] = {}
    for pattern, syntax in patterns:
        probes = matched_probes(pattern, syntax, num_layers)
        if not probes:
            category, layer = category_of(pattern), literal_layer(pattern)
            layers = range(num_layers) if layer is None else (
                (layer,) if layer < num_layers else ())
            probes = tuple((i, pattern) for i in layers) if category else ()
        for i, module in probes:
            category = category_of(module)
            if category in LINEAR_CATEGORIES:
                named.setdefault(category, set()).add(i)
    return {c: frozenset(layers) for c, layers in named.items()}


def _module_names(qc: Mapping[str, Any], key: str, origin: str) -> list[str]:
    """A list of module names the checkpoint leaves unquantized (absent or null: none); a
    string in its place is refused, not read a character at a time ("lm_head" is not the
    modules 'l', 'm', …)."""
    value = qc.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        raise InputError(f"{origin}: quantization_config.{key} must be a list of module "
                         f"names ([\"lm_head\"]), got {shorten(repr(value))}")
    return value


def _whole(qc: Mapping[str, Any], origin: str, *keys: str) -> int | None:
    """The first of ``keys`` present: a whole number, or refused by name; None if absent."""
    for key in keys:
        value = qc.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"{origin}: quantization_config.{key} must be a whole number, "
                             f"got {value!r}")
        return value
    return None


def _uniform_format(method: str, qc: Mapping[str, Any], origin: str) -> str:
    bits = _whole(qc, origin, "bits", "w_bit")
    if method == "fp8":
        block = qc.get("weight_block_size")
        if block is not None:
            _block_shape(block, origin, "quantization_config.weight_block_size")
        return "fp8-block" if block else "fp8"
    if method == "mxfp4":
        return "mxfp4"
    if method == "bitsandbytes":
        return _bitsandbytes(qc, origin)
    if method in ("awq", "gptq"):
        if bits == 8:
            return "gptq-int8"
        if bits not in (4, None):
            raise InputError(f"{origin}: {method} with {bits}-bit weights is not supported")
        group = _whole(qc, origin, "group_size", "q_group_size")
        if group is None:
            group = 128
        if group == 0 or group < -1:
            raise InputError(f"{origin}: quantization_config.group_size is {group}: a group "
                             "holds some weights (-1: one group per row)")
        if group == 128:
            return f"{method}-int4"
        if group == -1:  # one group a row: one scale and zero an output row, not one a 128
            return f"{method}-int4-channel"
        known = {("gptq", 32), ("gptq", 64), ("awq", 64)}  # formats.json ids
        if (method, group) in known:
            return f"{method}-int4-g{group}"
        raise InputError(f"{origin}: {method} group size {group} is not supported")
    if method == "modelopt":
        algo = str(qc.get("quant_algo", "")).upper()
        formats = algo_formats()
        if algo in formats:
            return formats[algo]
        if algo in KV_ONLY:
            raise InputError(f"{origin}: ModelOpt quant_algo {algo!r} names no weights an engine "
                             f"serves: {KV_ONLY[algo]}")
        raise InputError(f"{origin}: ModelOpt quant_algo {shorten(algo)!r} is not supported "
                         f"(ridgeline reads {', '.join(formats)}, and MIXED_PRECISION with its "
                         "quantized_layers, the algorithms vLLM, SGLang or TensorRT-LLM serve: "
                         "formats.json modelopt_algos)")
    if method == "compressed-tensors":
        return _compressed_tensors(qc, origin)
    if not method:  # vLLM reads no quant_method as no quantization ("" -> None)
        raise InputError(f"{origin}: quantization_config "
                         f"{'names no quant_method' if qc else 'is empty ({})'}, so ridgeline "
                         "cannot tell how its weights are stored (vLLM would load them as "
                         "unquantized): give its quant_method, or delete it for an unquantized "
                         "checkpoint")
    raise InputError(f"{origin}: quantization method {method!r} is not supported")


def _block_shape(block: Any, origin: str, key: str) -> None:
    """Refuses a weight block that is not two positive whole numbers [rows, columns]: DeepSeek's
    weight_block_size and compressed-tensors' block_structure alike ([128, 128])."""
    if not (isinstance(block, list) and len(block) == 2 and all(
            isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise InputError(f"{origin}: {key} must be two whole numbers [rows, columns], "
                         f"got {block!r}")


def _bitsandbytes(qc: Mapping[str, Any], origin: str) -> str:
    """A bitsandbytes checkpoint's format as vLLM holds it (its BitsAndBytesConfig.from_config):
    load_in_8bit -> LLM.int8 (bnb-int8); else 4-bit (load_in_4bit is its default), NF4 or FP4,
    double-quantized or not, held with fp32 absmaxes (bnb-nf4: its loader's dequantize_dq).
    vLLM refuses a bnb_4bit_quant_storage other than uint8."""
    flags = {key: qc.get(key) for key in ("load_in_8bit", "load_in_4bit")}
    for key, value in flags.items():
        if value is not None and not isinstance(value, bool):
            raise InputError(f"{origin}: quantization_config.{key} must be true or false, "
                             f"got {value!r}")
    if flags["load_in_8bit"]:
        return "bnb-int8"
    storage = qc.get("bnb_4bit_quant_storage")
    if storage not in (None, "uint8"):
        named = shorten(str(storage))
        raise InputError(f"{origin}: bitsandbytes bnb_4bit_quant_storage {named!r} is not "
                         "supported (vLLM takes uint8 only: 'Unsupported "
                         "bnb_4bit_quant_storage')")
    return "bnb-nf4"


def _per_layer_modelopt(layers: Mapping[str, Any], origin: str) -> dict[str, str]:
    """ModelOpt MIXED_PRECISION: each category takes the algorithm most of its layers use."""
    votes: dict[str, Counter[str]] = {}
    formats = algo_formats()
    for module, spec in layers.items():
        if not isinstance(spec, Mapping):
            raise InputError(f"{origin}: quantized_layers entry {module!r} is not an object")
        category = category_of(str(module))
        algo = str(spec.get("quant_algo", "")).upper()
        if category is None or algo not in formats:
            if algo and algo not in formats:
                raise InputError(f"{origin}: ModelOpt algorithm {algo!r} is not supported")
            continue
        votes.setdefault(category, Counter())[formats[algo]] += 1
    if not votes:
        raise InputError(f"{origin}: no quantized layer of a known kind in quantized_layers")
    return {category: counter.most_common(1)[0][0] for category, counter in votes.items()}


def _compressed_tensors(qc: Mapping[str, Any], origin: str) -> str:
    """The first config group's format. Its own "format" names how it is stored, else the
    config's (a "mixed-precision" config names it per group, compressed-tensors
    quant_scheme.py QuantizationScheme.format). Sparse checkpoints vLLM no longer serves are
    refused first (compressed_tensors_schemes.py)."""
    groups = qc.get("config_groups") or {}
    sparsity_problem(qc, origin)
    for group in groups.values():
        weights = (group or {}).get("weights") or {}
        stored = str((group or {}).get("format") or qc.get("format") or "").lower()
        bits, kind = weights.get("num_bits"), weights.get("type")
        if stored == "marlin-24":
            raise InputError(marlin_24_refusal(origin, weights))
        activations = (group or {}).get("input_activations")
        if bits == 4 and kind == "int" and activations:
            return w4a8_format(weights, activations, stored, origin)
        if bits == 8 and kind == "float":
            return _compressed_fp8(weights, origin)
        if bits == 8 and kind == "int":
            if activations:  # W8A8: int8 activations too
                return "int8"
            if stored in _UNPACKED_FORMATS:
                raise InputError(_unpacked_refusal(origin, 8, stored))
            # W8A16 (llm-compressor's preset: per channel, pack-quantized), served by
            # CompressedTensorsWNA16 on 16-bit matmuls
            return "int8-w8a16"
        if bits == 4 and kind == "float":
            return _compressed_fp4(weights, stored, origin)
        if bits == 4 and kind == "int":
            if stored in _UNPACKED_FORMATS:
                raise InputError(_unpacked_refusal(origin, 4, stored))
            return _compressed_int4(weights, origin)
    raise InputError(f"{origin}: compressed-tensors scheme not recognised")


def _unpacked_refusal(origin: str, bits: int, stored: str) -> str:
    """Integer weights without int activations stored a value a byte (_UNPACKED_FORMATS)."""
    return (f"{origin}: compressed-tensors weight-only int{bits} stored {stored} is not "
            f"supported: vLLM serves weight-only integer weights pack-quantized only "
            "(compressed_tensors.py picks CompressedTensorsWNA16 for pack-quantized, and "
            f"asserts that a weight-only {stored} group is float)")


def _compressed_fp8(weights: Mapping[str, Any], origin: str) -> str:
    """FP8 per tensor or channel (scales negligible), or in blocks (strategy 'block',
    block_structure [128, 128]: llm-compressor's FP8_BLOCK preset, DeepSeek-V3's layout) with
    one fp32 scale a block, counted as the native fp8 checkpoint's weight_block_size is
    (fp8-block: 8 + 32/16384 bits; vLLM's CompressedTensorsW8A8Fp8 holds the block scales in
    fp32, fp8_utils.py create_fp8_scale_parameter, whatever the checkpoint stores them in)."""
    if str(weights.get("strategy") or "").lower() != "block":
        return "fp8"
    block = weights.get("block_structure")
    if block is None:
        raise InputError(f"{origin}: compressed-tensors strategy 'block' needs a "
                         "block_structure [rows, columns]")
    _block_shape(block, origin, "compressed-tensors block_structure")
    return "fp8-block"


# the compressed-tensors formats that keep each 4-bit value in a byte of its own (config/base.py
# CompressionFormat). vLLM takes neither for int4 weights (vllm-project/vllm, vllm/model_executor/
# layers/quantization/compressed_tensors/compressed_tensors.py): _get_scheme_from_parts picks
# CompressedTensorsWNA16 for pack-quantized only, and both are activation-quantization formats
# (utils.py is_activation_quantization_format), for which _quantization_scheme_map_from_config
# asserts that a group without input_activations has float weights, so it fails at start-up.
_UNPACKED_FORMATS = ("naive-quantized", "int-quantized")
# the 4-bit float formats by weights per scale: NVFP4 (an E4M3 scale per 16, and a per-tensor
# fp32 one) and MXFP4 (an E8M0 scale per 32), compressed-tensors quant_scheme.py's NVFP4 and
# MXFP4 presets; their formats (config/base.py CompressionFormat) name the group they take
_FP4_FORMATS = {16: "nvfp4", 32: "mxfp4"}
_FP4_GROUPS = {"nvfp4-pack-quantized": 16, "mxfp4-pack-quantized": 32}


def _compressed_fp4(weights: Mapping[str, Any], stored: str, origin: str) -> str:
    """A 4-bit float scheme's format from its group size, or its format's where it gives none
    (neither: NVFP4's 16, the first 4-bit float compressed-tensors wrote); a group size its
    format does not take, or one of neither, is refused."""
    group = _whole(weights, origin, "group_size")
    named = _FP4_GROUPS.get(stored)
    if group is None:
        group = named or 16
    if named is not None and group != named:
        raise InputError(f"{origin}: compressed-tensors {stored} in groups of {group} is not "
                         f"supported (it takes groups of {named})")
    if group not in _FP4_FORMATS:
        raise InputError(f"{origin}: compressed-tensors 4-bit float in groups of {group} is "
                         "not supported (NVFP4 takes groups of 16, MXFP4 of 32)")
    return _FP4_FORMATS[group]


# compressed-tensors int4 (pack-quantized) by (weights per scale, symmetric) -> formats.json id.
# An asymmetric scheme stores GPTQ's bits (a 16-bit scale and a 4-bit zero point a group),
# so it reads as the GPTQ row of its group size.
_INT4_FORMATS = {
    (128, False): "gptq-int4", (64, False): "gptq-int4-g64", (32, False): "gptq-int4-g32",
    (128, True): "int4-g128-sym", (64, True): "int4-g64-sym", (32, True): "int4-g32-sym",
}
_SIXTEEN_BIT_SCALES = (None, "torch.bfloat16", "torch.float16", "bfloat16", "float16")


def scaled_bits_per_weight(value_bits: int, weights_per_scale: int, scale_bits: int) -> float:
    """Bits a weight takes with its share of the one scale each ``weights_per_scale`` share.

    bits = value_bits + scale_bits / weights_per_scale
    MXFP4, an 8-bit E8M0 scale per 32: 4 + 8/32 = 4.25 bits; FP8 with an fp32 scale per
    128 x 128 block: 8 + 32/16384 = 8.00195.
    """
    return value_bits + scale_bits / weights_per_scale


def int_bits_per_weight(num_bits: int, group_size: int, symmetric: bool,
                        scale_bits: int = 16) -> float:
    """Bits a grouped-integer weight takes with its share of the group's scale and zero point.

    bits = num_bits + scale_bits / group_size  (one scale per group, the checkpoint dtype)
                    + num_bits / group_size    (asymmetric only: a zero point, packed like
                                                the weights)
    Kimi-K2-Thinking's experts, int4 symmetric in groups of 32: 4 + 16/32 = 4.5 bits;
    GPTQ's int4 in groups of 128, asymmetric: 4 + 20/128 = 4.15625.
    """
    zero_point_bits = 0 if symmetric else num_bits
    return scaled_bits_per_weight(num_bits, group_size, scale_bits + zero_point_bits)


def _compressed_int4(weights: Mapping[str, Any], origin: str) -> str:
    """A compressed-tensors int4 scheme's format, from the weights' QuantizationArgs: strategy
    (absent: 'group' with a positive group_size, 'channel' with -1, else 'tensor'), group_size
    and symmetric (absent: true), as compressed-tensors' quant_args.py infers them. The
    pack-quantized layout (compressors/quantized_compressors/pack_quantized.py) packs eight
    values an int32 and, for an asymmetric group or channel scheme only, the zero points too.
    One scale per row (channel): int4-channel-sym, or GPTQ's per-row bits asymmetric."""
    group = _whole(weights, origin, "group_size")
    strategy = str(weights.get("strategy") or (
        "tensor" if group is None else "group" if group > 0 else "channel")).lower()
    symmetric = True if weights.get("symmetric") is None else weights["symmetric"]
    if not isinstance(symmetric, bool):
        raise InputError(f"{origin}: compressed-tensors symmetric must be true or false, "
                         f"got {symmetric!r}")
    scale_dtype = weights.get("scale_dtype")
    if scale_dtype not in _SIXTEEN_BIT_SCALES:
        raise InputError(f"{origin}: compressed-tensors int4 with {shorten(str(scale_dtype))} "
                         "scales is not supported (bfloat16 or float16 only)")
    if strategy == "channel":
        return "int4-channel-sym" if symmetric else "gptq-int4-channel"
    if strategy != "group":
        raise InputError(f"{origin}: compressed-tensors int4 with strategy {strategy!r} is not "
                         "supported (vLLM's W4A16 takes 'group' or 'channel')")
    if group is None or group <= 0:
        raise InputError(f"{origin}: compressed-tensors strategy 'group' needs a positive "
                         f"group_size, got {group!r}")
    fmt = _INT4_FORMATS.get((group, symmetric))
    if fmt is None:
        bits = int_bits_per_weight(4, group, symmetric)
        kind = "symmetric" if symmetric else "asymmetric"
        raise InputError(f"{origin}: compressed-tensors int4 {kind} in groups of {group} "
                         f"({bits:g} bits a weight) is not supported (groups of 32, 64 or 128)")
    return fmt
