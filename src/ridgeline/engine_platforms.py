"""Which engines, weight formats and KV caches run on which accelerators.

Each check answers with the reason a user reads ("" where the combination runs): an engine
on a vendor it has no backend for, weights whose kernels a card's generation lacks (fp8
before Turing, NVFP4 off NVIDIA, AWQ/Marlin before compute capability 7.5, W4A8-FP8 off
Hopper, anything but a GGUF tensor type on llama.cpp), a KV-cache format the engine does not
keep. The families each refusal names cite the engine's own support tables.
"""

from __future__ import annotations

from ridgeline.hardware import Accelerator
from ridgeline.model import ModelSpec
from ridgeline.precision import KVDtype, WeightPlan, kv_dtypes, weight_formats

# the vendors each engine's GPU backend runs on (vLLM and SGLang: CUDA, ROCm, TPU, XPU)
ENGINE_VENDORS = {
    "llama.cpp-cuda": ("nvidia",), "llama.cpp-metal": ("apple",), "llama.cpp-rocm": ("amd",),
    "trtllm": ("nvidia",), "vllm": ("nvidia", "amd", "google", "intel"),
    "sglang": ("nvidia", "amd", "google", "intel"),
}


# vLLM's ROCm requirements (docs, getting_started/installation/gpu.rocm.inc.md, v0.14 to
# 2026): MI200s (gfx90a), MI300 (gfx942), MI350 (gfx950), Radeon RX 7900 (gfx1100/1101),
# RX 9000 (gfx1200/1201), Ryzen AI MAX / AI 300 (gfx1151/1150): not Vega 20 (MI50, MI60,
# Radeon VII), MI100 (gfx908) or RDNA2.
VLLM_NO_ROCM_FAMILIES = ("gcn5", "cdna", "rdna2")

# SGLang's ROCm build: sgl-kernel's setup_rocm.py builds for gfx942 and gfx950 only (MI300,
# MI325; MI350, MI355) and stops on any other target, and its AMD docs (platforms/amd_gpu.md)
# name MI300X-class cards alone; an RDNA3 or Strix Halo card needs a third party's patched
# kernel (pypi sglang-radeon-rdna3: 'SGLang officially supports only CDNA Instinct parts
# (gfx942 / gfx950)'; sgl-project/sglang issue #11195 on gfx1151).
SGLANG_ROCM_FAMILIES = ("cdna3", "cdna4")

# The lowest compute capability SGLang and TensorRT-LLM start on, in every release read:
# SGLang 7.5 (Turing): its model runner raises 'SGLang only supports sm75 and above.' as it
# loads the model below it (model_executor/model_runner.py in the PyPI wheels 0.5.3 to
# 0.5.12, model_runner_components/load_model_utils.py by 0.5.23; read 2026-12-05).
# TensorRT-LLM 8.0 (Ampere): 0.15's release notes, '[BREAKING CHANGE] NVIDIA Volta GPU
# support is removed in this and future releases' (NVIDIA/TensorRT-LLM PR #2389); 'T4 is no
# longer a support hardware since 0.14 release' (a maintainer, NVIDIA/TensorRT-LLM issue
# #2620; its wheels carry no sm_75 build, issue #278), and ridgeline models its 1.x PyTorch
# backend. vLLM's own floor goes release by release (vllm_gpu_floors.py: Volta to 0.19).
ENGINE_FLOORS = {
    "sglang": ("7.5", ("kepler", "maxwell", "pascal", "volta"),
               "SGLang refuses it as it loads the model ('SGLang only supports sm75 and "
               "above.')"),
    "trtllm": ("8.0", ("kepler", "maxwell", "pascal", "volta", "turing"),
               "TensorRT-LLM dropped Turing in 0.14 and Volta in 0.15, its wheels carrying no "
               "kernels for them (its release notes and issue #2620)"),
}


def sixteen_bit(accelerator: Accelerator) -> str:
    """The 16-bit weights or cache a refusal offers in its stead: bf16, or fp16 on a card
    without bf16 matmuls (a V100 or T4), where an engine serves 16-bit weights as fp16."""
    return "bf16" if "bf16" in accelerator.peak_flops or not accelerator.peak_flops else "fp16"


def below_engine_floor(engine: str, accelerator: Accelerator) -> bool:
    """Whether ``engine`` refuses this NVIDIA card in every release, its family below the
    engine's floor (ENGINE_FLOORS: SGLang a V100, TensorRT-LLM a V100 or T4)."""
    floor = ENGINE_FLOORS.get(engine)
    return floor is not None and accelerator.vendor == "nvidia" \
        and accelerator.family in floor[1]


def engine_floor_problem(engine: str, accelerator: Accelerator,
                         llama_cpp: str = "--engine llama.cpp-cuda") -> str:
    """Why ``engine`` refuses this card below its floor (ENGINE_FLOORS; "" above it), and
    the ways out: the vLLM release that runs it (a T4: any; a V100: 0.19, its last with Volta
    kernels), SGLang where its own floor is met (TensorRT-LLM on a T4), then llama.cpp, in
    ``llama_cpp``'s words (plan, which sizes no llama.cpp, says which commands do:
    plan.LEFT_OUT_LEVER)."""
    if not below_engine_floor(engine, accelerator):
        return ""
    need, _, why = ENGINE_FLOORS[engine]
    vllm = {"turing": "--engine vllm", "volta": "--engine vllm --engine-version 0.19 "
            "(vLLM's last release with Volta kernels)"}.get(accelerator.family)
    sglang = "--engine sglang" if engine != "sglang" \
        and not below_engine_floor("sglang", accelerator) else None
    ways = [way for way in (vllm, sglang) if way] + [llama_cpp]
    return (f"{engine} does not run on {accelerator.id} ({accelerator.family}, below compute "
            f"capability {need}): {why}; try {''.join(f'{w}, ' for w in ways[:-1])}"
            f"{'or ' if len(ways) > 1 else ''}{ways[-1]}")


def vulkan_caution(engine: str, accelerator: Accelerator) -> str:
    """Why llama.cpp's Vulkan build on this card is uncertain, or "": an Instinct part
    (VULKAN_UNCHECKED_FAMILIES: an MI300X) is compute-only, with no Vulkan driver of AMD's."""
    if engine != "llama.cpp-vulkan" or accelerator.family not in VULKAN_UNCHECKED_FAMILIES:
        return ""
    return (f"{engine} on {accelerator.id} ({accelerator.family}) is unchecked: Instinct parts "
            "are compute-only and AMD's Vulkan driver (AMDVLK) lists Radeon parts only, so "
            "a Vulkan device there rests on Mesa's RADV; --engine llama.cpp-rocm runs it "
            "through ROCm")


def vllm_free_engine(accelerator: Accelerator) -> str | None:
    """The engine of a card no vLLM release runs on, whatever the release: llama.cpp's Metal
    build on Apple silicon (vLLM has no Metal backend), its ROCm build on the AMD GPUs vLLM's
    ROCm build leaves out (Vega 20, MI100, RDNA2: VLLM_NO_ROCM_FAMILIES); None elsewhere.
    An M2 Max: llama.cpp-metal; an MI100: llama.cpp-rocm; an H100: None."""
    if accelerator.vendor == "apple":
        return "llama.cpp-metal"
    if accelerator.vendor == "amd" and accelerator.family in VLLM_NO_ROCM_FAMILIES:
        return "llama.cpp-rocm"
    return None


def default_engine(accelerator: Accelerator, version: str | None = None) -> str:
    """The engine a command that names none runs on ``accelerator``: ``vllm_free_engine``'s
    where vLLM never runs; llama.cpp's CUDA build on the NVIDIA GPUs the vLLM release
    (``version``, --engine-version as typed; a llama.cpp build's number or None: the newest
    modelled) has no kernels for (a V100 from 0.20: vllm_gpu_floors); vLLM elsewhere.
    A V100: llama.cpp-cuda, or vllm with version 0.19; an H100: vllm."""
    from ridgeline.engine_versions import llamacpp_build
    from ridgeline.errors import InputError
    from ridgeline.vllm_gpu_floors import floor_problem

    only = vllm_free_engine(accelerator)
    if only is not None:
        return only
    release = None if version is None or llamacpp_build(version) is not None else version
    try:
        refused = floor_problem("engine", accelerator, release)
    except InputError:  # a version no release is spelt as: --engine-version refuses it later
        refused = ""
    return "llama.cpp-cuda" if refused else "vllm"


def engine_platform_problem(engine: str, accelerator: Accelerator) -> str:
    """Why ``engine`` does not run on this accelerator's vendor, or "" (records without a
    catalog vendor, as measured or custom ones, are taken at their word)."""
    if engine == "llama.cpp-vulkan" and accelerator.family in NO_VULKAN_FAMILIES:
        return (f"{engine} needs a Vulkan driver, which {accelerator.id} "
                f"({accelerator.family}) has none of; try --engine vllm")
    if engine == "vllm" and accelerator.vendor == "amd" \
            and accelerator.family in VLLM_NO_ROCM_FAMILIES:
        return (f"vllm's ROCm build does not run on {accelerator.id} ({accelerator.family}): it "
                "supports MI200/MI300/MI350 (gfx90a, gfx942, gfx950), RDNA3/3.5 (gfx1100/1101, "
                "gfx1150/1151) and RDNA4 (gfx1200/1201); try --engine llama.cpp")
    if below_engine_floor(engine, accelerator):
        return engine_floor_problem(engine, accelerator)
    if engine == "sglang" and accelerator.vendor == "amd" and accelerator.family \
            and accelerator.family not in SGLANG_ROCM_FAMILIES:
        other = "llama.cpp" if accelerator.family in VLLM_NO_ROCM_FAMILIES else "vllm"
        return (f"sglang's ROCm build does not run on {accelerator.id} ({accelerator.family}): "
                "sgl-kernel builds for gfx942 and gfx950 only (MI300X, MI325X, MI355X); try "
                f"--engine {other}")
    if engine == "sglang" and accelerator.runtime_devices > 1:
        return (f"sglang on {accelerator.id} is not modelled: ROCm lists its "
                f"{accelerator.runtime_devices} GCDs as devices, so each --tp-size rank is one "
                "die with its own memory, which ridgeline models for vllm only; try --engine vllm")
    vendors = ENGINE_VENDORS.get(engine)
    vendor = accelerator.vendor
    if not vendors or not vendor or vendor == "measured" or vendor in vendors:
        return ""
    runs = [e for e, vs in ENGINE_VENDORS.items() if vendor in vs]
    same_family = [e for e in runs if e.startswith("llama.cpp") == engine.startswith("llama.cpp")]
    hint = (same_family or runs or ["llama.cpp-vulkan"])[0]
    if engine_platform_problem(hint, accelerator):  # vLLM's ROCm build refuses an MI50 too
        hint = "llama.cpp"  # the card's own build, the way out vLLM's refusal names
    return f"{engine} does not run on {accelerator.id} ({vendor}); try --engine {hint}"


# Accelerator families on which vLLM, SGLang and TensorRT-LLM run no fp8 weights: fp8 runs
# on compute capability ≥ 8.9 as W8A8 and ≥ 7.5 as weight-only W8A16 through FP8 Marlin
# (vLLM docs, features/quantization/fp8: "FP8 models will run on compute capability >= 7.5
# (Turing) as weight-only W8A16"), so not on Volta or Pascal; on AMD from MI300 (gfx942)
# on, so not on CDNA 1-2 (MI100, MI200), which lack fp8 (vLLM quantization hardware table),
# nor on the Radeon generations before RDNA4 (GCN5 Vega 20, RDNA2, RDNA3, RDNA3.5), whose
# matrix instructions take fp16, bf16 and integers only.
NO_FP8_FAMILIES = ("pascal", "volta", "cdna", "cdna2", "gcn5", "rdna2", "rdna3", "rdna3.5")
# TensorRT-LLM's support matrix: FP8 from compute capability 8.9 (Ada, Hopper, Blackwell),
# NVFP4 on Blackwell only
TRTLLM_NO_FP8_FAMILIES = ("pascal", "volta", "turing", "ampere")
NVFP4_FAMILIES = ("blackwell",)
# vLLM's quantization hardware table (docs, features/quantization): AWQ and the Marlin kernels
# (GPTQ/AWQ/FP8/FP4, weight-only) need Turing (SM 7.5) or newer, so Volta and Pascal run
# neither; "Turing does not support Marlin MXFP4". GPTQ's own kernels run on Volta.
NO_MARLIN_FAMILIES = ("pascal", "volta")
NO_MARLIN_MXFP4_FAMILIES = ("turing",)
MARLIN_ONLY_PREFIXES = ("awq", "nvfp4", "mxfp4")
NO_VULKAN_FAMILIES = ("tpu", "gaudi")  # accelerators without a Vulkan driver
# AMD's Instinct parts from CDNA on: compute-only, their graphics blocks gone, and AMD's own
# Vulkan driver (AMDVLK) lists Radeon parts only; whether Mesa's RADV runs llama.cpp's compute
# shaders on them is unread (no source either way), so it is cautioned, not refused
VULKAN_UNCHECKED_FAMILIES = ("cdna", "cdna2", "cdna3", "cdna4")
# Vendors whose cards run fp8 only where the catalog lists an fp8 peak. A TPU without one (v4,
# v5e, v5p, v6e: fp8 came with v7) has no fp8 path ridgeline can price: vLLM's quantization
# hardware table (docs, features/quantization/supported_hardware) marks FP8 W8A8 and the Marlin
# FP8 kernels ❌ on Google TPU, and tpu-inference's support matrix marks its quantized KV cache
# ❓ (vllm-project/tpu-inference#3126: kv_cache_dtype=fp8 on a v5e logs fp8 and allocates bf16,
# 'GPU KV cache size: 415,872 tokens' under auto and fp8 alike, so a pool sized at fp8 would be
# twice the real one). tpu-inference loads fp8 checkpoints (tpu_inference/layers/common/
# quant_methods.py FP8), how it runs them on a card without fp8 units is unread: fit, decode,
# kv, page and plan all refuse fp8 weights and an fp8 cache there alike. An NVIDIA or AMD card
# without an fp8 peak (A100) keeps its documented weight-only path.
FP8_PEAK_ONLY_VENDORS = ("google",)
FP8_FORMATS = ("fp8", "fp8-block")
# compressed-tensors W4A8-FP8 (compressed_tensors_schemes.py): vLLM's _is_fp8_w4a8_sm90 matches
# compute capability 9.0 exactly, the CUTLASS W4A8 kernel's; the hopper family is SM 9.0
W4A8_FP8 = "int4-w4a8-fp8"
W4A8_FP8_FAMILY = "hopper"
GGUF_PLAIN = ("bf16", "fp16", "fp32", "mxfp4")  # besides the q*/iq*/tq* block types and mixes
GGUF_BLOCK_PREFIXES = ("q", "iq", "tq")  # ggml's quant types: q4_k, iq2_xxs, tq1_0
# the vendors whose cards' family decides the checks above (fp8, Marlin, NVFP4, the ROCm
# build, compute capability): a user's record of theirs names a family these model
FAMILY_CHECKED_VENDORS = ("nvidia", "amd")
# families no catalog record carries that a user's record may name, their compute capability
# in engine_quantization.NVIDIA_FAMILY_CAPABILITY: Pascal (P100, P40), and the Maxwell and
# Kepler cards llama.cpp's CUDA build still runs on (GTX 980, K80)
FAMILIES_BEYOND_CATALOG = {"nvidia": ("kepler", "maxwell", "pascal")}


def known_families(vendor: str) -> tuple[str, ...]:
    """The families ridgeline models for ``vendor``: its catalog records', and those only the
    tables above name (FAMILIES_BEYOND_CATALOG)."""
    from ridgeline.hardware import catalog

    return tuple(sorted({acc.family for acc in catalog().values()
                         if acc.vendor == vendor and acc.family}
                        | set(FAMILIES_BEYOND_CATALOG.get(vendor, ()))))


def family_problem(accelerator: Accelerator) -> str:
    """'' where a user's record names a family the checks above know, or none, or is of a
    vendor whose family no check reads; else why not, with the nearest known family: a
    misspelt 'hoper' would pass every fp8, Marlin and NVFP4 check unchecked."""
    import difflib

    family, vendor = accelerator.family, accelerator.vendor
    if not family or vendor not in FAMILY_CHECKED_VENDORS:
        return ""
    known = known_families(vendor)
    if family in known:
        return ""
    close = difflib.get_close_matches(family, known, n=1)
    return (f"family {family!r} is none of the {vendor} families ridgeline models "
            f"({', '.join(known)})" + (f" (did you mean {close[0]!r}?)" if close else "")
            + ": the fp8, Marlin, NVFP4 and ROCm checks read it, and would pass an unknown "
            "one unchecked; for a newer generation, give the newest family whose kernels it "
            "runs")


GGUF_LEVER = "give --weights q8_0, bf16 or q4_k_m"  # the GGUF files a checkpoint becomes


def weights_platform_problem(plan: WeightPlan, accelerator: Accelerator, engine: str,
                             named: bool) -> str:
    """Why this engine cannot run these weights on this accelerator, or "" (``named``: the
    user named the format; as stored, a checkpoint is taken at its word, but for llama.cpp,
    which loads only GGUF tensor types: a checkpoint stored in another, fp8 or AWQ/GPTQ int4,
    runs as the GGUF convert_hf_to_gguf.py writes from it, dequantized to --outtype and then
    perhaps llama-quantize'd, a file of a format the user names; gpt-oss's MXFP4 experts
    stay MXFP4, a GGUF type)."""
    formats = {f for _, f in plan.formats}
    if engine.startswith("llama.cpp"):
        alien = sorted(f for f in formats
                       if not (f in GGUF_PLAIN or f.startswith(GGUF_BLOCK_PREFIXES)))
        if alien:  # a mix is judged by its formats too: experts_int8's int8 is no GGUF type
            what = ("a GGUF tensor type" if len(alien) == 1 else "GGUF tensor types")
            return ((f"{', '.join(alien)} {'is' if len(alien) == 1 else 'are'} not {what}"
                     if named else
                     f"the checkpoint stores {' and '.join(alien)} weights, not {what}")
                    + ": llama.cpp runs GGUF files (q8_0, q4_k_m, … or bf16)"
                    + ("" if named else ", converted from the checkpoint by "
                       "convert_hf_to_gguf.py") + f"; {GGUF_LEVER}")
        return ""
    known = weight_formats()
    gguf = any(f in known and known[f].applies_to == "all" for f in formats)  # q4_k_m, q8_0, …
    if engine == "trtllm" and gguf:  # a GGUF file type: a block format over every tensor
        return (f"trtllm loads no GGUF file ({plan.label}): TensorRT-LLM's quantization "
                "recipes are FP4, FP8, INT8 and INT4 AWQ/GPTQ (nvidia.github.io/TensorRT-LLM, "
                "features/quantization); give --weights fp8, nvfp4 or awq-int4, or --engine "
                "llama.cpp")
    bnb = sorted(f for f in formats if f.startswith("bnb-"))
    if engine == "trtllm" and bnb:
        return (f"trtllm loads no bitsandbytes weights ({bnb[0]}): TensorRT-LLM's quantization "
                "recipes are FP4, FP8, INT8 and INT4 AWQ/GPTQ (nvidia.github.io/TensorRT-LLM, "
                "features/quantization); give --weights awq-int4 or fp8, or --engine vllm")
    if engine == "trtllm" and formats & set(FP8_FORMATS) \
            and accelerator.family in TRTLLM_NO_FP8_FAMILIES:
        return (f"TensorRT-LLM runs fp8 from compute capability 8.9 (Ada, Hopper, Blackwell), "
                f"not on {accelerator.id} ({accelerator.family}); try --weights {sixteen_bit(accelerator)} "
                "or int8")
    fp4 = sorted(f for f in formats if f.startswith("nvfp4"))
    if (fp4 and accelerator.vendor not in ("nvidia", "measured", "")) or (
            "nvfp4" in formats and engine == "trtllm" and accelerator.family
            and accelerator.family not in NVFP4_FAMILIES):
        return (f"{engine} runs no {fp4[0]} weights on {accelerator.id} ({accelerator.family}): "
                "NVFP4 kernels are NVIDIA's" + (", Blackwell only in TensorRT-LLM"
                                                 if engine == "trtllm" else "")
                + ("; try --weights awq-int4" if accelerator.family in NO_FP8_FAMILIES or (
                    engine == "trtllm" and accelerator.family in TRTLLM_NO_FP8_FAMILIES)
                   else "; try --weights fp8 or awq-int4"))
    marlin = sorted(f for f in formats if f.startswith(MARLIN_ONLY_PREFIXES))
    if marlin and accelerator.family in NO_MARLIN_FAMILIES:
        return (f"{engine} runs no {marlin[0]} weights on {accelerator.id} "
                f"({accelerator.family}): its kernels (AWQ, Marlin FP4) need compute "
                f"capability 7.5+; try --weights gptq-int4 or {sixteen_bit(accelerator)}")
    if "mxfp4" in formats and accelerator.family in NO_MARLIN_MXFP4_FAMILIES:
        floor = ("Marlin's MXFP4 kernel needs compute capability 8.0+" if engine == "vllm" else
                 "vLLM's MXFP4 kernel (Marlin) needs compute capability 8.0+, the floor taken "
                 f"for {engine} too, whose own is not modelled")
        return (f"{engine} runs no mxfp4 weights on {accelerator.id} ({accelerator.family}): "
                f"{floor}; try --weights {sixteen_bit(accelerator)}")
    if W4A8_FP8 in formats and accelerator.vendor not in ("measured", "") \
            and accelerator.family != W4A8_FP8_FAMILY:
        return (f"{engine} runs no {W4A8_FP8} weights on {accelerator.id} "
                f"({accelerator.family or accelerator.vendor}): vLLM serves compressed-tensors "
                "W4A8-FP8 on compute capability 9.0 only (Hopper: CompressedTensorsW4A8Fp8, "
                "the CUTLASS W4A8 kernel); try --weights awq-int4 or fp8")
    if formats & set(FP8_FORMATS) and fp8_unpriced(accelerator):
        return (f"{engine} runs no fp8 weights ridgeline can price on {accelerator.id} "
                f"({accelerator.family}, no fp8 units): vLLM's quantization hardware table "
                "marks FP8 ❌ on Google TPU, and how tpu-inference runs an fp8 checkpoint there "
                f"is unread; try --weights {sixteen_bit(accelerator)}")
    if formats & set(FP8_FORMATS) and accelerator.family in NO_FP8_FAMILIES:
        needs = ("an AMD GPU with fp8 matrix instructions: MI300-class (CDNA3) or newer, or "
                 "RDNA4" if accelerator.vendor == "amd" else
                 "compute capability 7.5+ (weight-only through Marlin; W8A8 from 8.9)")
        return (f"{engine} runs no fp8 weights on {accelerator.id} ({accelerator.family}): fp8 "
                f"needs {needs}; try --weights {sixteen_bit(accelerator)}")
    return ""


def fp8_unpriced(accelerator: Accelerator) -> bool:
    """Whether ``accelerator`` is of a vendor whose fp8 ridgeline prices only on an fp8 peak
    (FP8_PEAK_ONLY_VENDORS) and its catalog record lists none: a TPU v6e (bf16 and int8) yes,
    an A100 (weight-only fp8 through Marlin) or a Gaudi 3 (an fp8 peak) no."""
    return accelerator.vendor in FP8_PEAK_ONLY_VENDORS and not accelerator.has("fp8")


def fp8_kv_problem(cache: KVDtype, accelerator: Accelerator, engine: str) -> str:
    """Why ``engine`` (vLLM or SGLang) keeps no fp8 KV cache on this card, or "": a TPU without
    fp8 units allocates bf16 under --kv-cache-dtype fp8 (``fp8_unpriced``), and vLLM's Triton
    attention on an AMD card without fp8 (NO_FP8_FAMILIES: MI250X, W7900) stops on its fp8e4nv
    cache ('type fp8e4nv not supported in this architecture. The supported fp8 dtypes are
    ('fp8e5',)', vllm-project/vllm#13147 on an RDNA3 card; CDNA2 lacks fp8 the same way)."""
    if not cache.id.startswith("fp8") or engine.startswith("llama.cpp") or engine == "trtllm":
        return ""
    if fp8_unpriced(accelerator):
        return (f"{engine} keeps no fp8 KV cache on {accelerator.id} ({accelerator.family}, no "
                "fp8 units): tpu-inference takes --kv-cache-dtype fp8 and still allocates bf16 "
                "(vllm-project/tpu-inference#3126), so the pool does not grow; give "
                "--kv-dtype bf16")
    if accelerator.vendor == "amd" and accelerator.family in NO_FP8_FAMILIES:
        return (f"{engine} keeps no fp8 KV cache on {accelerator.id} ({accelerator.family}, no "
                "fp8 units): vLLM's Triton attention stops on the fp8e4nv cache ('type fp8e4nv not "
                "supported in this architecture', vllm-project/vllm#13147); give --kv-dtype "
                f"{sixteen_bit(accelerator)}")
    return ""


def kv_platform_problem(cache: KVDtype, accelerator: Accelerator, engine: str,
                        checkpoint: str = "") -> str:
    """Why this engine keeps no KV cache of this format on this accelerator, or "": a format
    only some engines cache in (formats.json's ``engines``: q8_0 is llama.cpp's), then
    TensorRT-LLM's fp8 cache, from compute capability 8.9, and its NVFP4 cache, Blackwell only.
    ``checkpoint`` names the model whose checkpoint keeps this cache pre-quantized, which
    TensorRT-LLM takes no other --kv-dtype over (quantization_gates.kv_override_problem): the
    way out is then another card or checkpoint, not another cache."""
    if not cache.cached_by(engine):
        # a packed record (vLLM's fp8_ds_mla) is one model family's, not a choice for any
        takes = ", ".join(k for k, d in kv_dtypes().items()
                          if d.cached_by(engine) and d.read_by_flash_attention_of(engine)
                          and not d.elements_per_token)
        return f"{engine} has no {cache.id} KV cache; it caches in {takes}"
    lever = (f"; {checkpoint}'s checkpoint keeps this cache pre-quantized, and TensorRT-LLM "
             "takes no other over it ('You cannot override a checkpoint with a pre-quantized "
             "KV cache that doesn't match'): name a card that keeps it, or size another "
             "checkpoint with --weights FMT") if checkpoint else ""
    if engine == "trtllm" and cache.id.startswith("fp8") \
            and accelerator.family in TRTLLM_NO_FP8_FAMILIES:
        return (f"TensorRT-LLM keeps no fp8 KV cache before compute capability 8.9 "
                f"(Ada, Hopper, Blackwell), not on {accelerator.id} "
                f"({accelerator.family})" + (lever or f"; try --kv-dtype int8 or {sixteen_bit(accelerator)}"))
    fp8 = fp8_kv_problem(cache, accelerator, engine)
    if fp8:
        return fp8
    if engine == "trtllm" and cache.id == "fp4" and accelerator.family \
            and accelerator.family not in NVFP4_FAMILIES:
        return (f"TensorRT-LLM keeps an NVFP4 KV cache on Blackwell only, not on "
                f"{accelerator.id} ({accelerator.family})" + (lever or "; try --kv-dtype fp8"))
    return ""


def kv_kept_nowhere_problem(cache: KVDtype, accelerator: Accelerator) -> str:
    """Why no engine keeps a cache of this format on this accelerator, where only some
    engines keep it (formats.json ``engines``), or "": ``kv`` with no --engine sizes the
    cache as written, but not one no engine could hold there (TensorRT-LLM's NVFP4 cache on
    an H100: the refusal fit gives under --engine trtllm)."""
    if accelerator.vendor in ("google", "amd"):  # vLLM's and SGLang's fp8 alike, no llama.cpp's
        fp8 = fp8_kv_problem(cache, accelerator, "vllm")
        if fp8:
            return fp8.replace("vllm keeps no", "no engine keeps an", 1)
    if not cache.engines:
        return ""
    problems = [kv_platform_problem(cache, accelerator, engine) for engine in cache.engines]
    return "" if not all(problems) else problems[0]


# -ctk/-ctv types llama.cpp reads without flash attention: its non-flash path multiplies the
# scores by a transposed V, which it cannot keep quantized
LLAMACPP_PLAIN_KV = ("fp16", "bf16", "fp32")


def quantized_v_problem(cache: KVDtype, engine: str, flash_attention: bool,
                        auto_off: str = "") -> str:
    """Why llama.cpp stops at start-up on this KV cache with flash attention off, or "": a
    quantized V cache (-ctv q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl) needs it.
    llama_init_from_model (src/llama-context.cpp) returns no context, logging 'quantized V
    cache requires flash_attn to be enabled' (older builds: 'V cache quantization requires
    flash_attn'); -fa auto turns it on where the backend runs it, and ``auto_off`` says why
    the backend cannot (flash_attention_unsupported), so that auto turns it off."""
    if not engine.startswith("llama.cpp") or flash_attention or cache.id in LLAMACPP_PLAIN_KV:
        return ""
    if auto_off:
        return (f"llama.cpp keeps no {cache.id} V cache without flash attention, which this "
                f"model cannot run here (-fa auto turns it off): {auto_off}; it stops at "
                "start-up ('quantized V cache was requested, but this requires Flash "
                "Attention', src/llama-context.cpp): give --kv-dtype f16")
    return (f"llama.cpp keeps no {cache.id} V cache with flash attention off: it stops at "
            "start-up with 'quantized V cache requires flash_attn to be enabled' "
            "(src/llama-context.cpp); drop --flash-attn off (auto turns it on) or give "
            "--kv-dtype f16")


# llama.cpp's CUDA build, which HIP compiles for ROCm too (ggml/src/ggml-cuda/fattn.cu)
LLAMACPP_CUDA_FILE = ("llama.cpp-cuda", "llama.cpp-rocm")

# The K head sizes (Q·K width) the CUDA/HIP flash-attention kernels take, each with the V
# width and the multiple of query heads per KV head it needs (1: any):
# ggml_cuda_get_best_fattn_kernel (ggml/src/ggml-cuda/fattn.cu, ggml-org/llama.cpp at
# 00a2d60) returns BEST_FATTN_KERNEL_NONE for any other; 192 (K 192, V 128) wants the GQA
# path with a ratio divisible by 8, 320 (V 256) one divisible by 32; 576 is MLA's latent
# (512) and RoPE (64) parts, read with V the latent. ggml-cuda.cu's supports_op asks
# ggml_cuda_flash_attn_ext_supported, which is that function's answer != NONE.
CUDA_FLASH_ATTENTION_HEADS: dict[int, tuple[int, int]] = {
    **{d: (d, 1) for d in (40, 64, 72, 80, 96, 112, 128, 256, 512)},
    192: (128, 8), 320: (256, 32), 576: (512, 1)}


# llama.cpp's Vulkan build takes FLASH_ATTN_EXT for any K and V head size that is a
# multiple of 8, MLA's 576/512 and K 192 / V 128 included, and refuses the rest:
# ggml_backend_vk_device_supports_op (ggml/src/ggml-vulkan/ggml-vulkan.cpp, ggml-org/llama.cpp
# at 000651c: "(HSK % 8) != 0 || (HSV % 8) != 0" returns false), so since ggml-org/llama.cpp
# #15537 (2025-08-24, "vulkan: Support FA with any multiple of 8 head sizes"). The same
# function also wants subgroup shuffle and vote from a device without NVIDIA's coopmat2, a
# driver's property ridgeline does not model (taken as present).
VULKAN_FLASH_ATTENTION_HEAD_MULTIPLE = 8


def llamacpp_attention_heads(model: ModelSpec) -> tuple[int, int, int] | None:
    """(K width, V width, query heads per KV head) of the attention llama.cpp hands its
    flash-attention op, or None for a model with no softmax attention (Mamba): MLA as
    llama.cpp runs it, every head reading the one cached latent (kv_lora_rank + the RoPE
    part; V the latent), else the model's own head sizes and GQA group."""
    att = model.attention
    if att is None:
        return None
    mla = att.cached_latent
    if mla is not None:
        return mla.kv_lora_rank + mla.qk_rope_head_dim, mla.kv_lora_rank, att.num_heads
    return att.head_dim, att.v_head_dim, att.group_size


def flash_attention_unsupported(model: ModelSpec, engine: str) -> str:
    """Why the engine's backend has no flash-attention kernel for this model's heads, or "".
    Established for llama.cpp's CUDA/ROCm build (CUDA_FLASH_ATTENTION_HEADS) and its Vulkan
    build (VULKAN_FLASH_ATTENTION_HEAD_MULTIPLE); Metal, whose list of (K, V) head sizes has
    changed from build to build through 2026, is taken as running it."""
    if engine == "llama.cpp-vulkan":
        return _vulkan_flash_attention_unsupported(model, engine)
    heads = llamacpp_attention_heads(model) if engine in LLAMACPP_CUDA_FILE else None
    if heads is None:
        return ""
    k, v, group = heads
    need = CUDA_FLASH_ATTENTION_HEADS.get(k)
    if need is not None and v == need[0] and group % need[1] == 0:
        return ""
    takes = ", ".join(str(d) for d in CUDA_FLASH_ATTENTION_HEADS if d not in (192, 320, 576))
    return (f"{engine}'s flash-attention kernels (ggml-cuda/fattn.cu) have none for "
            f"{model.name}'s attention heads (K {k}, V {v}, a GQA group of {group}): "
            f"they take K = V of {takes}, K 192 with V 128 and K 320 with V 256 at a GQA "
            "group divisible by 8 and 32, and MLA's 576/512")


def _vulkan_flash_attention_unsupported(model: ModelSpec, engine: str) -> str:
    heads = llamacpp_attention_heads(model)
    if heads is None:
        return ""
    k, v, _ = heads
    step = VULKAN_FLASH_ATTENTION_HEAD_MULTIPLE
    if k % step == 0 and v % step == 0:
        return ""
    return (f"{engine}'s flash-attention shaders (ggml-vulkan.cpp) have none for "
            f"{model.name}'s attention heads (K {k}, V {v}): they take K and V head sizes "
            f"that are multiples of {step}")


def auto_flash_attention(model: ModelSpec, engine: str) -> bool:
    """What llama.cpp's -fa auto (its default) resolves to: llama_context reserves a graph
    with flash attention, and where a layer's FLASH_ATTN_EXT lands on another device than the
    layer (the backend's supports_op refused it, so the scheduler put it on the CPU) it logs
    'Flash Attention was auto, set to disabled' and runs without (src/llama-context.cpp,
    'resolve automatic Flash Attention use'); else 'set to enabled'. Other engines: on."""
    return not engine.startswith("llama.cpp") or not flash_attention_unsupported(model, engine)


def flash_attention_kv_problem(cache: KVDtype, engine: str, build: int | None = None) -> str:
    """Why llama.cpp build ``build`` (None: the newest modelled) runs no flash attention on
    this cache on this backend, or "" (formats.json's ``flash_attention_engines`` and
    ``flash_attention_missing_builds``). CUDA's kernels read f16, q4_0 and q8_0 K/V pairs
    unless built with GGML_CUDA_FA_ALL_QUANTS (off by default; iq4_nl in no build), Vulkan's
    no iq4_nl in b9106-b10164, so the op goes to the CPU: -fa auto then turns flash attention
    off and a quantized V cache stops start-up (src/llama-context.cpp), and -fa on runs
    attention on the CPU, which is not priced here."""
    if not engine.startswith("llama.cpp") or cache.read_by_flash_attention_of(engine, build):
        return ""
    read = ", ".join(k for k, d in kv_dtypes().items() if d.cached_by(engine)
                     and k not in LLAMACPP_PLAIN_KV and d.read_by_flash_attention_of(engine, build))
    span = cache.flash_attention_missing_span(engine, build)
    if span is not None:  # a kernel the newest build has, missing from this one's
        first, last = span
        return (f"llama.cpp b{build}'s {engine} has no flash-attention kernel for {cache.id} "
                f"caches (builds b{first}-b{last} leave it out; b{last + 1} puts it back), so "
                "-fa auto turns flash attention off and llama-server stops at start-up "
                "('quantized V cache was requested, but this requires Flash Attention'), and "
                "-fa on runs attention on the CPU, which ridgeline does not price; give "
                f"--kv-dtype {read.split(', ')[0]} or a build from b{last + 1}")
    if engine not in LLAMACPP_CUDA_FILE:
        return (f"{engine} has no flash-attention kernel for {cache.id} caches, which llama.cpp "
                f"needs for a quantized V cache; its flash attention reads {read}: give "
                f"--kv-dtype {read.split(', ')[0]}")
    builds = ("in any build" if cache.id == "iq4_nl"
              else "unless built with -DGGML_CUDA_FA_ALL_QUANTS=ON (off by default)")
    return (f"{engine} has no flash-attention kernel for {cache.id} caches {builds} "
            f"(ggml-cuda/fattn.cu reads f16, {read}), so llama.cpp puts attention on the CPU: "
            "-fa auto turns flash attention off and stops at start-up ('quantized V cache was "
            "requested, but this requires Flash Attention'), -fa on runs attention on the CPU, "
            f"which ridgeline does not price; give --kv-dtype {read.replace(', ', ' or ')}")
