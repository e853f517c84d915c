"""The engines' own words for the weights: vLLM's and SGLang's --quantization METHOD and
--dtype, read as ridgeline's weight formats (formats.json engine_methods).

``vllm serve meta-llama/Llama-3.1-70B-Instruct --quantization fp8`` serves the 16-bit
checkpoint in FP8 (ridgeline's --weights fp8); on a checkpoint already stored in FP8 the same
flag loads it as stored. The engines refuse the rest at start-up, and so does ridgeline: a
method that needs a checkpoint of its own (awq, gptq, modelopt, …) on a 16-bit checkpoint, a
method the checkpoint's quant_method does not match, -q for an engine without the flag, and
(vLLM's and SGLang's get_min_capability) a method below the card's compute capability, named
with -q or the one the checkpoint is read with as stored, release by release (modelopt_mixed
on an A100 before vLLM 0.24, a ModelOpt FP8 export there before vLLM 0.27 and under any SGLang,
an NVFP4 one before Blackwell up to SGLang 0.5.12).
--weights stays the what-if flag: it sizes any format on any checkpoint. --dtype names the
16-bit type an unquantized checkpoint runs in; bfloat16 where the card has none is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ridgeline.catalog import normalise
from ridgeline.datafiles import load_data
from ridgeline.engine_names import engine_name
from ridgeline.errors import InputError, shorten
from ridgeline.hardware import Accelerator
from ridgeline.model import ModelSpec
from ridgeline.precision import (
    experts_mix_problem,
    is_stored_format,
    weight_format,
    weight_formats,
    weight_mixes,
)

# vLLM's and SGLang's --dtype choices -> the weight format an unquantized checkpoint runs in
DTYPES = {"auto": None, "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
FULL_PRECISION = ("float", "float32")  # vLLM's fp32: taken to refuse, not modelled for serving
UNQUANTIZED = ("bf16", "fp16", "fp32")


# the engines with a --quantization flag; trtllm-serve has none (TensorRT-LLM quantizes
# beforehand, with ModelOpt, and serves the checkpoint as stored), llama.cpp runs the GGUF's types
QUANTIZATION_ENGINES = ("vllm", "sglang")


@dataclass(frozen=True)
class EngineMethod:
    """One --quantization METHOD: the format it stands for (what a 16-bit checkpoint is
    served in where it quantizes on load, ``online``), the stored formats it loads as they
    are, the checkpoints' quant_method values the engines accept it on, and the quant_algo
    values among those where the method is one of several on one quant_method (ModelOpt's;
    empty: any)."""

    method: str
    format: str
    reads: tuple[str, ...]
    online: bool
    checkpoints: tuple[str, ...]
    source: str
    quant_algos: tuple[str, ...] = ()
    engines: tuple[str, ...] = QUANTIZATION_ENGINES  # those with the method (w8a8_fp8: SGLang)
    layout: str = ""  # what the method holds, where a checkpoint stored otherwise fails to load

    def serves_as_stored(self, spec: ModelSpec) -> bool:
        """Whether the engines take this method on ``spec``'s checkpoint and load it as
        stored: its quant_method (and quant_algo, where the method names some) is the
        method's, and every stored format one the method reads."""
        stored = set(spec.stored_format_map.values())
        return (bool(stored) and spec.quant_method in self.checkpoints
                and (not self.quant_algos or spec.quant_algo in self.quant_algos)
                and stored <= set(self.reads))


@lru_cache(maxsize=1)
def engine_methods() -> dict[str, EngineMethod]:
    return {row["method"]: EngineMethod(row["method"], row["format"], tuple(row["reads"]),
                                        bool(row["online"]), tuple(row["checkpoints"]),
                                        row["source"], tuple(row.get("quant_algos", ())),
                                        tuple(row.get("engines", QUANTIZATION_ENGINES)),
                                        row.get("layout", ""))
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


def method_format(method: str) -> str:
    """The weight format --quantization ``method`` stands for where no checkpoint is named
    (roofline, utilization without --model): 'awq' -> 'awq-int4'."""
    return engine_method(method).format


# the methods that read a ModelOpt export in one format, which NVIDIA publishes of many 16-bit
# models (nvidia/Llama-3.3-70B-Instruct-FP8, served with --quantization modelopt in vLLM's recipe
# Llama/Llama3.3-70B.md and InferenceMAX's H200 70B line; nvidia/Llama-3.3-70B-Instruct-FP4,
# modelopt_fp4): given on a 16-bit catalog model, -q names that export of it, sized as stored
# in the method's format. modelopt_mixed is left out: its layers' formats are the export's own.
MODELOPT_EXPORTS = ("modelopt", "modelopt_fp4")


def modelopt_export_note(method: str, spec: ModelSpec) -> str:
    """What -q ``method`` (modelopt, modelopt_fp4) on ``spec``'s 16-bit checkpoint is read as:
    a ModelOpt export of it in the method's format, loaded as stored; "" for another method or
    a quantized checkpoint."""
    chosen = engine_method(method)
    if chosen.method not in MODELOPT_EXPORTS or spec.stored_format_map:
        return ""
    return (f"--quantization {chosen.method} on {spec.name}, a {spec.dtype} checkpoint: sized as "
            f"a ModelOpt {chosen.format} export of it (such as NVIDIA's nvidia/…-"
            f"{'FP8' if chosen.format == 'fp8' else 'FP4'} checkpoints), loaded as stored")


def method_with_weights(method: str, weights: str) -> str:
    """--quantization ``method`` with --weights ``weights``: a checkpoint quantized with the
    method and stored in that format (-q modelopt --weights fp8: NVIDIA's FP8 export), so
    ``weights``; refused where the method does not read the format."""
    chosen = engine_method(method)
    if normalise(weights) in {normalise(r) for r in chosen.reads}:
        return weights
    raise InputError(f"--quantization {chosen.method} reads {', '.join(chosen.reads)} "
                     f"checkpoints, not {weights}: give --weights {chosen.format} with it, or "
                     "one flag alone")


def method_weights(method: str, weights: str | None, spec: ModelSpec, acc: Accelerator,
                   engine: str | None, version: str | None = None) -> str:
    """What --quantization ``method`` (with --weights ``weights``, where given) serves ``spec``
    in on ``acc`` under ``engine`` at ``version`` (None: the newest modelled), each refusal
    the engine's as one line: an engine without the method or the flag, a release before it
    (quantization_gates.method_release_problem), a card below its compute capability
    (method_on), a checkpoint it does not read (quantized_weights, method_with_weights).
    Llama-3.1-8B's bf16 checkpoint under -q fp8 on an H100: fp8, quantized on load."""
    from ridgeline.quantization_gates import method_release_problem

    quantization_engine(method, engine)
    problem = method_release_problem(method, engine, version)
    if problem:
        raise InputError(problem)
    method_on(method, acc, engine, version)
    if weights:  # a checkpoint quantized with the method, stored in that format
        return method_with_weights(method, weights)
    return quantized_weights(method, spec, engine)


def names_stored_checkpoint(weights: str, spec: ModelSpec, engine: str | None = None) -> bool:
    """Whether --weights ``weights`` names ``spec``'s checkpoint as stored: the format a
    method of ``engine``'s (None: vLLM's or SGLang's) quantizes a 16-bit checkpoint to on
    load, where that method loads this checkpoint as it is instead, at the same width. vLLM's
    Fp8Config.from_config reads an FP8 checkpoint's quant_method and weight_block_size
    (vllm/model_executor/layers/quantization/fp8.py) and loads its weights with their own
    scales, re-quantizing none: DeepSeek-V3 (fp8-block, quant_method fp8) at --weights fp8 is
    the checkpoint, 8.002 bits a weight, not a per-tensor one at 8.0. A name of another width
    (bnb-nf4 on a bnb-int8 checkpoint), or one only a checkpoint of its own holds (awq-int4),
    sizes that other checkpoint."""
    stored = set(spec.stored_format_map.values())
    if not stored or is_stored_format(weights) or normalise(weights) in weight_mixes():
        return False
    named, formats = weight_format(weights), weight_formats()
    width = int(named.bits_per_weight)
    return all(s in formats and int(formats[s].bits_per_weight) == width for s in stored) \
        and any(m.online and m.format == named.id and m.serves_as_stored(spec)
                and (engine is None or engine in m.engines) for m in engine_methods().values())


def loaded_as_stored(method: str | None, weights: str | None) -> bool:
    """Whether the weights load as a checkpoint stores them (Deployment.weights_stored): all
    but a 16-bit checkpoint quantized on load by -q alone (fp8, ptpc_fp8, w8a8_fp8,
    bitsandbytes), which holds its 16-bit share first where the engine does (load_peak.py).
    --weights FMT sizes a checkpoint stored in FMT (with or without -q), -q modelopt a
    ModelOpt export: True; -q fp8 alone: False."""
    return not (method and not weights and engine_method(method).online)


def quantized_weights(method: str, spec: ModelSpec, engine: str | None = None) -> str:
    """What --quantization ``method`` serves ``spec`` in, or the engines' refusal in one line.
    A 16-bit checkpoint: the method's format where it quantizes on load (fp8), else refused
    (vLLM looks for the method's config in the checkpoint and fails at start-up). A quantized
    checkpoint: 'auto' (as stored) where its quant_method is one the method is accepted on and
    its formats are ones the method reads, else refused as vLLM's and SGLang's
    _verify_quantization refuse it (qwen3-235b-a22b-fp8 with awq), or, where its quant_method
    is one the method is accepted on, as the weights fail to load (_layout_refusal)."""
    chosen = engine_method(method)
    stored = set(spec.stored_format_map.values())
    mix = weight_mixes().get(normalise(chosen.format))
    problem = experts_mix_problem(spec, mix, "--quantization") if mix else ""
    if problem:
        raise InputError(problem)
    if not stored:
        if chosen.online or chosen.method in MODELOPT_EXPORTS:  # the latter: its export
            return chosen.format
        engines = (engine,) if engine in QUANTIZATION_ENGINES else chosen.engines
        online = [m.method for m in engine_methods().values()  # what these engines all have,
                  if m.online and set(engines) <= set(m.engines)  # for this model's kind
                  and (m.method != "experts_int8" or spec.moe is not None)]
        one, s = len(engines) == 1, "s" if len(engines) == 1 else ""
        raise InputError(f"{spec.name} is a {spec.dtype} checkpoint and --quantization "
                         f"{chosen.method} does not quantize on load: "
                         f"{_engine_names(engines)} read{s} a "
                         f"checkpoint quantized with {chosen.method} and fail{s} at start-up "
                         "without one "
                         f"(only {', '.join(online)} quantize{'s' if len(online) == 1 else ''} "
                         f"a 16-bit one{'' if one else ' on both'}); name a pre-quantized "
                         f"checkpoint of the model, or give --weights {chosen.format} to size "
                         "one")
    if chosen.serves_as_stored(spec):
        return "auto"
    label = "+".join(sorted(stored))
    if spec.quant_method in chosen.checkpoints and (
            not chosen.quant_algos or spec.quant_algo in chosen.quant_algos):
        raise InputError(_layout_refusal(chosen, spec, label, engine))
    algo = f", quant_algo {spec.quant_algo}" if spec.quant_algo else ""
    own = checkpoint_engine_method(spec, engine)
    instead = (f"leave out --quantization, or give its own method --quantization "
               f"{own.method}, to serve it as stored" if own else
               "leave out --quantization to serve it as stored, or give --weights "
               f"{chosen.format} to size a checkpoint quantized with {chosen.method}")
    raise InputError(f"{spec.name} is stored {label} (quant_method {spec.quant_method or '?'}"
                     f"{algo}), and vLLM and SGLang refuse --quantization {chosen.method} on "
                     "it (the method in the model config does not match the `quantization` "
                     f"argument): {instead}")


def _layout_refusal(chosen: EngineMethod, spec: ModelSpec, label: str,
                    engine: str | None) -> str:
    """--quantization METHOD on a checkpoint of a quant_method the engines take it on, stored in
    a format METHOD does not load (SGLang's w8a8_fp8 on compressed-tensors FP8 in 128x128
    blocks: W8A8Fp8Config holds one scale a row, formats.json's source): the engines pass the
    name check and fail loading the weights; without the flag they read the checkpoint with
    the method its quant_method names, or the method that serves it as stored."""
    engines = (engine,) if engine in chosen.engines else chosen.engines
    own = checkpoint_engine_method(spec, engine)
    instead = (f"give its own method --quantization {own.method}, or leave the flag out"
               if own else "leave out --quantization: the checkpoint's own quant_method "
               f"({spec.quant_method}) reads it as stored")
    s = "s" if len(engines) == 1 else ""
    return (f"{spec.name} is stored {label} (quant_method {spec.quant_method}), and "
            f"--quantization {chosen.method} loads {', '.join(chosen.reads)} only: "
            f"{_engine_names(engines)} take{s} the method on a {spec.quant_method} checkpoint but "
            f"fail{s} loading its weights{f' ({chosen.layout})' if chosen.layout else ''}; "
            f"{instead}")


# vLLM's get_min_capability (compute capability x 10) in its newest modelled release, checked at
# start-up for the method given with --quantization or read from the checkpoint's
# quantization_config alike (config/vllm.py _get_quantization_config: 'The quantization method X
# is not supported for the current GPU. Minimum capability: 89. Current capability: 80.'), for
# the methods whose floor is above a card ridgeline knows: bitsandbytes.py 70, experts_int8.py
# 80, mxfp4.py Mxfp4Config 80, and modelopt.py's ModelOptFp8Config (modelopt) 80,
# ModelOptNvFp4Config (modelopt_fp4) 75 and ModelOptMixedPrecisionConfig (modelopt_mixed) 75,
# each through Marlin below the card's native format (vllm 0.32.0 wheel, read 2026-12). Not fp8:
# Fp8Config's floor, 89 in its first release, is 80 since FP8 Marlin runs it weight-only
# (W8A16) below 8.9, so an A100 serves an fp8 checkpoint, and 75 from v0.14 (a T4): release by
# release in vllm_gpu_floors.py, with vLLM's fp8 KV cache and its wheels' own floor; the
# format-wide floors (AWQ and Marlin below 7.5, fp8 below Turing) are engine_platforms'.
VLLM_MIN_CAPABILITY = {"bitsandbytes": 70, "experts_int8": 80, "mxfp4": 80, "modelopt": 80,
                       "modelopt_fp4": 75, "modelopt_mixed": 75}
# the ModelOpt floors of vLLM's earlier releases: (the release that lowered it, the floor before,
# the kernels that run it below the card's native format since), read in
# vllm/model_executor/layers/quantization/modelopt.py of the PyPI wheels 0.11.0-0.17.0,
# 0.20.0-0.24.0, 0.26.0-0.28.0 and 0.32.0 (2026-12): ModelOptFp8Config 89 to 0.26.0, 80 from
# 0.27.0 (ModelOptFp8LinearMethod's init_fp8_linear_kernel picks MarlinFP8ScaledMMLinearKernel
# below 8.9); ModelOptNvFp4Config 80 to 0.13.0, 75 from 0.14.0; ModelOptMixedPrecisionConfig
# (from 0.17.0) 89 to 0.23.0, 75 from 0.24.0 ('NVFP4 routed experts run via Marlin W4A16
# (SM75+), FP8 weight-only dense via MarlinFP8 (cc>=7.5) ... Validated end-to-end on a Tesla T4
# (SM75) and A100 (SM80)'). Releases before 0.11 are taken as 0.11.0.
VLLM_EARLIER_FLOORS = {"modelopt": ("0.27", 89, "FP8 Marlin"),
                       "modelopt_fp4": ("0.14", 80, "FP4 Marlin"),
                       "modelopt_mixed": ("0.24", 89, "FP4 and FP8 Marlin")}
# SGLang's get_min_capability for its ModelOpt methods in its newest release, checked as it
# loads the model as vLLM's is (model_loader/loader.py _get_quantization_config: 'The
# quantization method X is not supported for the current GPU. Minimum capability: 100. Current
# capability: 90.'), keyed by ridgeline's method names: ModelOptFp8Config (SGLang's
# modelopt_fp8) 89 in every release; ModelOptFp4Config (modelopt_fp4) 80 and
# ModelOptMixedPrecisionConfig (modelopt_mixed, from 0.5.10) ModelOptFp4Config's, so 80
# (layers/quantization/modelopt_quant.py of the sglang wheels 0.5.3 to 0.5.23 on PyPI, read
# 2026-12). SGLang runs no ModelOpt FP8 below 8.9; vLLM does from 0.27 (VLLM_EARLIER_FLOORS).
SGLANG_MIN_CAPABILITY = {"modelopt": 89, "modelopt_fp4": 80, "modelopt_mixed": 80}
# the floors of earlier releases: (the release that lowered it, the floor before). NVFP4 was
# Blackwell-only (100) to 0.5.12.post1; 0.5.13 runs it with FP4 Marlin from 8.0 to 9.x
# (fp4_utils.initialize_fp4_gemm_config picks the marlin GEMM there, and
# ModelOptNvFp4FusedMoEMethod its Marlin experts: use_marlin_fallback = (8, 0) <= capability
# < (10, 0)), as vLLM's FP4 Marlin does from 7.5.
SGLANG_EARLIER_FLOORS = {"modelopt_fp4": ("0.5.13", 100, "FP4 Marlin"),
                         "modelopt_mixed": ("0.5.13", 100, "FP4 Marlin")}
# SGLang runs a modelopt_mixed export's FP8 layers (ModelOptFp8LinearMethod) below compute
# capability 8.9 from 0.5.17 only, with FP8 Marlin (can_auto_enable_marlin_fp8: 80 <= sm < 89);
# 0.5.15 and 0.5.16 multiply them with torch._scaled_mm, which needs 8.9 (apply_fp8_linear,
# per-tensor scales, cutlass_fp8_supported False on an sm80)
SGLANG_MIXED_FP8_BELOW_89_FROM = "0.5.17"
MIN_CAPABILITY = {"vllm": VLLM_MIN_CAPABILITY, "sglang": SGLANG_MIN_CAPABILITY}
EARLIER_FLOORS = {"vllm": VLLM_EARLIER_FLOORS, "sglang": SGLANG_EARLIER_FLOORS}
# SGLang's names for ridgeline's ModelOpt methods, where they differ (its --quantization modelopt
# picks modelopt_fp8 or modelopt_fp4 by the checkpoint's quant_algo)
SGLANG_METHOD_NAMES = {"modelopt": "modelopt_fp8"}
# the compute capabilities of each NVIDIA family, its lowest part's and its highest's (NVIDIA's
# CUDA GPUs table, developer.nvidia.com/cuda-gpus, and the CUDA C++ Programming Guide's
# compute-capability table): Kepler 3.0-3.7, Maxwell 5.0-5.3, Pascal 6.0-6.2, Volta 7.0-7.2,
# Turing 7.5, Ampere 8.0 (A100) to 8.7 (A10, A40, RTX 30: 8.6), Ada 8.9, Hopper 9.0,
# Blackwell 10.0 (B200) to 12.1 (RTX 50: 12.0)
NVIDIA_FAMILY_CAPABILITY = {"kepler": (30, 37), "maxwell": (50, 53),
                            "pascal": (60, 62), "volta": (70, 72), "turing": (75, 75),
                            "ampere": (80, 87), "ada": (89, 89), "hopper": (90, 90),
                            "blackwell": (100, 121)}


def _capability(tenths: int) -> str:
    """89 -> '8.9'."""
    return f"{tenths // 10}.{tenths % 10}"


def min_capability(method: str, engine: str = "vllm", version: str | None = None) -> int | None:
    """``engine``'s get_min_capability for ``method`` at ``version`` (None: the newest
    modelled), compute capability x 10: vLLM's modelopt_mixed 75, 89 before 0.24; SGLang's
    modelopt_fp4 80, 100 before 0.5.13; None where no floor above a card ridgeline knows is
    modelled."""
    from ridgeline.engine_versions import release_before

    need = MIN_CAPABILITY.get(engine, {}).get(method)
    earlier = EARLIER_FLOORS.get(engine, {}).get(method)
    return earlier[1] if earlier and release_before(engine, version, earlier[0]) else need


def _lowered_in(method: str, engine: str, need: int, has: int) -> str:
    """The way out through a later release, where ``engine``'s floor ``need`` for ``method`` is
    an earlier release's and the newest one's reaches the card's ``has``: ', or
    --engine-version 0.24 or later (FP4 and FP8 Marlin from 7.5)' for vLLM's modelopt_mixed
    on an A100 (8.0) under 0.23; "" otherwise."""
    earlier = EARLIER_FLOORS.get(engine, {}).get(method)
    newest = MIN_CAPABILITY[engine][method]
    if not earlier or need != earlier[1] or has < newest:
        return ""
    return (f", or --engine-version {earlier[0]} or later ({earlier[2]} from "
            f"{_capability(newest)})")


def _other_engine(method: str, engine: str, has: int) -> str:
    """The way out through vLLM, where SGLang's floor refuses ``method`` on a card of ``has``
    and vLLM's newest release runs it: ', or --engine vllm (FP8 Marlin from 8.0, since 0.27)'
    for a ModelOpt FP8 export on an A100; "" otherwise."""
    need = VLLM_MIN_CAPABILITY.get(method)
    if engine != "sglang" or need is None or has < need:
        return ""
    earlier = VLLM_EARLIER_FLOORS.get(method)
    since = f"{earlier[2]} from {_capability(need)}, since {earlier[0]}" if earlier and \
        has < earlier[1] else f"from {_capability(need)}"
    return f", or --engine vllm ({since})"


def capability_shortfall(method: str, acc: Accelerator, engine: str = "vllm",
                         version: str | None = None) -> str:
    """'' where ``engine`` (vLLM, SGLang) at ``version`` starts ``method`` on ``acc``, else
    what the card lacks, in words: 'needs compute capability 8.9 or more, and the
    a100-sxm-80gb (ampere family, compute capability 8.0 to 8.7) has less' (vLLM's
    modelopt_mixed before 0.24); modelopt_fp4 needs 7.5 under vLLM (8.0 before 0.14), 8.0
    under SGLang (10.0 before 0.5.13). Only an NVIDIA card of a family the table knows is
    refused."""
    need = min_capability(method, engine, version)
    has = NVIDIA_FAMILY_CAPABILITY.get(acc.family) if acc.vendor == "nvidia" else None
    if need is None or has is None or has[1] >= need:
        return ""
    low, high = (_capability(c) for c in has)
    span = low if low == high else f"{low} to {high}"
    able = ", ".join(f.capitalize() for f, (lo, _) in NVIDIA_FAMILY_CAPABILITY.items()
                     if lo >= need)
    when = "at start-up" if engine == "vllm" else "as it loads the model"
    who = f"{engine_name(engine)} {version}" if version else engine_name(engine)
    return (f"needs compute capability {_capability(need)} or more, and the {acc.id} "
            f"({acc.family} family, compute capability {span}) has less: "
            f"{who} refuses it {when} (get_min_capability); name a card of "
            f"{_capability(need)} or more ({able}){_lowered_in(method, engine, need, has[1])}"
            f"{_other_engine(method, engine, has[1])}")


def method_on(method: str, acc: Accelerator, engine: str | None = None,
              version: str | None = None) -> None:
    """Refuses a method on an NVIDIA card below its compute capability, as vLLM does at
    start-up ('The quantization method X is not supported for the current GPU. Minimum
    capability: 80'): experts_int8 on a T4 or V100, bitsandbytes on a P100, modelopt_mixed on
    an A100 before vLLM 0.24; under SGLang ``version`` its own ModelOpt floors first
    (modelopt_fp4 on an H100 before 0.5.13, on a T4 after), vLLM's newest release's standing
    for the methods whose SGLang floor is not modelled."""
    chosen = engine_method(method)
    if engine == "sglang" and chosen.method in SGLANG_MIN_CAPABILITY:
        short = capability_shortfall(chosen.method, acc, "sglang", version)
    else:
        short = capability_shortfall(chosen.method, acc, "vllm",
                                     version if engine == "vllm" else None)
    if short:
        raise InputError(f"--quantization {chosen.method} {short}")


def sglang_modelopt_method(spec: ModelSpec) -> str:
    """The ridgeline method SGLang reads ``spec``'s ModelOpt checkpoint with as stored, by its
    quant_algo as SGLang's ModelConfig names it: modelopt_mixed for MIXED_PRECISION, modelopt
    (SGLang's modelopt_fp8) where FP8 is in the name (FP8, FP8_PB_WO, FP8_BLOCK), modelopt_fp4
    where FP4 is (NVFP4, W4A16_NVFP4); '' for any other checkpoint."""
    algo = spec.quant_algo.upper()
    if spec.quant_method != "modelopt" or not spec.stored_format_map:
        return ""
    if algo == "MIXED_PRECISION":
        return "modelopt_mixed"
    return "modelopt" if "FP8" in algo else "modelopt_fp4" if "FP4" in algo else ""


def stored_method_problem(spec: ModelSpec, acc: Accelerator, engine: str | None,
                          version: str | None = None) -> str:
    """Why vLLM or SGLang (at ``version``; None: the newest modelled) refuses ``spec``'s
    checkpoint, served as stored, on ``acc``, or "": the method it reads the checkpoint with
    (checkpoint_engine_method; SGLang's ModelOpt one, sglang_modelopt_method) is below its
    compute capability there, as with --quantization (method_on): Qwen3.6-35B-A3B-NVFP4
    (ModelOpt MIXED_PRECISION, modelopt_mixed) on an A100 under vLLM before 0.24 (8.9); a
    ModelOpt FP8 export on an A100 under SGLang, and under vLLM before 0.27; an NVFP4 one on
    an H100 under SGLang before 0.5.13 (10.0); under SGLang 0.5.15 and 0.5.16, a mixed
    export's FP8 layers below 8.9 (Qwen3.6's on an A100: sglang_mixed_fp8_problem)."""
    if engine == "vllm":
        own = checkpoint_engine_method(spec, engine)
        method = own.method if own else ""
    elif engine == "sglang":
        method = sglang_modelopt_method(spec)
    else:
        return ""
    short = capability_shortfall(method, acc, engine, version) if method else ""
    if not short and method == "modelopt_mixed" and engine == "sglang":
        short = sglang_mixed_fp8_problem(spec, acc, version)
    if not short:
        return ""
    algo = f", quant_algo {spec.quant_algo}" if spec.quant_algo else ""
    label = "+".join(sorted(set(spec.stored_format_map.values())))
    name = SGLANG_METHOD_NAMES.get(method, method) if engine == "sglang" else method
    return (f"{spec.name} is stored {label} (quant_method {spec.quant_method}{algo}) and read "
            f"as stored with {engine_name(engine)}'s {name} method, which {short}")


def sglang_mixed_fp8_problem(spec: ModelSpec, acc: Accelerator, version: str | None) -> str:
    """What SGLang ``version`` lacks to run a modelopt_mixed export's FP8 layers on ``acc``, or
    "": below compute capability 8.9 it multiplies them with FP8 Marlin from 0.5.17 only
    (qwen3.6-35b-a3b's attention projections on an A100 under 0.5.16: torch._scaled_mm)."""
    from ridgeline.engine_versions import release_before

    has = NVIDIA_FAMILY_CAPABILITY.get(acc.family) if acc.vendor == "nvidia" else None
    since = SGLANG_MIXED_FP8_BELOW_89_FROM
    if "fp8" not in spec.stored_format_map.values() or has is None \
            or has[1] >= MIN_CAPABILITY["sglang"]["modelopt"] \
            or not release_before("sglang", version, since):
        return ""
    return (f"runs its fp8 layers (ModelOptFp8LinearMethod) below compute capability 8.9 from "
            f"v{since} only, with FP8 Marlin: SGLang {version} multiplies them with "
            f"torch._scaled_mm, which the {acc.id} ({acc.family}) lacks; name --engine-version "
            f"{since} or later, or a card of 8.9 or more")


def checkpoint_engine_method(spec: ModelSpec, engine: str | None = None) -> EngineMethod | None:
    """The first method (formats.json's order) of ``engine`` (None: either) that serves
    ``spec``'s checkpoint as stored: the one to name when another is refused (qwen3.6-35b-a3b's
    MIXED_PRECISION -> modelopt_mixed; a compressed-tensors FP8 one on vLLM: none, w8a8_fp8
    being SGLang's); None for a 16-bit checkpoint or one no method reads."""
    return next((m for m in engine_methods().values() if m.serves_as_stored(spec)
                 and (engine is None or engine in m.engines)), None)


def quantization_engine(method: str, engine: str | None) -> None:
    """Refuses --quantization for an engine that has no such flag (None: none named), or
    one without the method (w8a8_fp8 is SGLang's; ptpc_fp8 vLLM's)."""
    if engine is None:
        return
    chosen = engine_method(method)
    if engine in QUANTIZATION_ENGINES:
        if engine not in chosen.engines:
            raise InputError(f"--quantization {chosen.method} is "
                             f"{engine_name(chosen.engines[0])}'s; "
                             f"{engine_name(engine)} has no such method: give --engine "
                             f"{chosen.engines[0]}, or --weights {chosen.format} to size it")
        return
    fmt = chosen.format
    owners = _engine_names(chosen.engines, "'s")
    if engine.startswith("llama.cpp"):
        raise InputError(f"--quantization {method} is {owners}; llama.cpp runs the "
                         "GGUF's own types: give --weights q4_k_m, q8_0, … (as stored: leave "
                         "it out)")
    raise InputError(f"--quantization {method} is {owners}; trtllm-serve has no such "
                     "flag and serves a checkpoint quantized beforehand (TensorRT Model "
                     "Optimizer) as stored: leave it out, or give --weights "
                     f"{fmt} to size such a checkpoint")


def _engine_names(engines: tuple[str, ...], suffix: str = "") -> str:
    """('vllm', 'sglang') -> "vLLM and SGLang" (with suffix "'s": "vLLM's and SGLang's")."""
    return " and ".join(engine_name(e) + suffix for e in engines)


def dtype_on(dtype: str | None, acc: Accelerator) -> None:
    """Refuses --dtype bfloat16 on a card with no bf16 matmuls in the catalog (T4, V100):
    vLLM stops at start-up ('Bfloat16 is only supported on GPUs with compute capability of
    at least 8.0', platforms/cuda.py check_if_supports_dtype; the worker's own check before)."""
    if DTYPES.get(dtype or "auto") == "bf16" and "bf16" not in acc.peak_flops:
        raise InputError(f"--dtype {dtype}: the {acc.id} has no bfloat16 matmuls, and vLLM "
                         "refuses bfloat16 on such a card (on NVIDIA, below compute "
                         "capability 8.0); give --dtype float16 (half)")


def engine_dtype(name: str) -> str:
    """--dtype as vLLM and SGLang spell it: auto, bfloat16, float16 or half; float32 is
    refused in one line (ridgeline does not model fp32 serving)."""
    key = name.strip().lower()
    if key in FULL_PRECISION:
        raise InputError(f"{key}: ridgeline models serving at 16 bits (bfloat16, float16) and "
                         "below; 32-bit weights are --weights fp32")
    if key not in DTYPES:
        # bf16 and fp16 are ridgeline's (and --weights') names; the engines' flag takes the
        # torch names (vLLM's ModelDType, SGLang's --dtype choices) and refuses these
        spelled = [engine for engine, short in DTYPES.items() if short == key]
        hint = f" (the engines spell {key} {' or '.join(spelled)})" if spelled else \
            " (a quantized format, fp8, int8, int4, …, is --quantization or --weights)"
        raise InputError(f"takes {', '.join(DTYPES)}, got {shorten(name)!r}{hint}")
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
