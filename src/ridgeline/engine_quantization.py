"""The engines' own words for the weights: vLLM's and SGLang's --quantization METHOD and
--dtype, read as ridgeline's weight formats (formats.json engine_methods).

``vllm serve meta-llama/Llama-3.1-70B-Instruct --quantization fp8`` serves the 16-bit
checkpoint in FP8 (ridgeline's --weights fp8); on a checkpoint already stored in FP8 the same
flag loads it as stored. --dtype names the 16-bit type an unquantized checkpoint runs in.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ridgeline.catalog import normalise
from ridgeline.datafiles import load_data
from ridgeline.errors import InputError, shorten
from ridgeline.model import ModelSpec
from ridgeline.precision import is_stored_format, weight_format, weight_mixes

# vLLM's and SGLang's --dtype choices -> the weight format an unquantized checkpoint runs in
DTYPES = {"auto": None, "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
FULL_PRECISION = ("float", "float32")  # vLLM's fp32: taken to refuse, not modelled for serving
UNQUANTIZED = ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class EngineMethod:
    """One --quantization METHOD: the format a 16-bit checkpoint is served in under it, and
    the stored formats it loads as they are."""

    method: str
    format: str
    reads: tuple[str, ...]
    source: str


@lru_cache(maxsize=1)
def engine_methods() -> dict[str, EngineMethod]:
    return {row["method"]: EngineMethod(row["method"], row["format"], tuple(row["reads"]),
                                        row["source"])
            for row in load_data("formats.json")["engine_methods"]}


def engine_method(name: str) -> EngineMethod:
    """'fp8', 'AWQ', 'gptq-marlin' -> the method; a method ridgeline has no format for is
    refused with the ones it reads."""
    key = name.strip().lower().replace("-", "_")
    methods = engine_methods()
    if key in methods:
        return methods[key]
    raise InputError(f"{shorten(name)!r} is not a method ridgeline serves in a format of its "
                     f"own; it reads {', '.join(methods)} (or give --weights FMT)")


def quantized_weights(method: str, spec: ModelSpec) -> str:
    """What --quantization ``method`` serves ``spec`` in: 'auto' (as stored) where the
    checkpoint stores its quantized weights in formats the method loads as they are (vLLM
    and SGLang read such a checkpoint by its own config), else the method's format."""
    chosen = engine_method(method)
    stored = set(spec.stored_format_map.values())
    return "auto" if stored and stored <= set(chosen.reads) else chosen.format


def engine_dtype(name: str) -> str:
    """--dtype as vLLM and SGLang spell it: auto, bfloat16, float16 or half; float32 is
    refused in one line (ridgeline does not model fp32 serving)."""
    key = name.strip().lower()
    if key in FULL_PRECISION:
        raise InputError(f"{key}: ridgeline models serving at 16 bits (bfloat16, float16) and "
                         "below; 32-bit weights are --weights fp32")
    if key not in DTYPES:
        raise InputError(f"takes {', '.join(DTYPES)}, got {shorten(name)!r}")
    return key


def weights_with_dtype(weights: str | None, dtype: str | None, spec: ModelSpec) -> str | None:
    """The weights once --dtype is read: an unquantized checkpoint runs in the 16-bit type
    it names (bf16 or fp16, the matmuls at it: an MI100's fp16 peak is twice its bf16);
    weights a format quantizes keep that format (--dtype is then the activations' type, whose
    matmuls the format decides); an unquantized --weights that disagrees is refused."""
    served = DTYPES.get(dtype or "auto")
    if served is None:
        return weights
    if weights is None or is_stored_format(weights):
        return weights if spec.stored_format_map else served
    if normalise(weights) in weight_mixes() or weight_format(weights).id not in UNQUANTIZED:
        return weights
    if weight_format(weights).id != served:
        raise InputError(f"--weights {weights} and --dtype {dtype} name two types for the "
                         "weights: give one")
    return weights
