"""llama.cpp's tensor split (-sm tensor, PR #19378): what its start-up refuses, and how it is
launched.

Every build that has the mode stops at start-up with flash attention off ("SPLIT_MODE_TENSOR
requires flash_attn to be enabled"; -fa auto turns it on) and for an architecture on its
denylist (src/llama-arch.cpp ``llm_arch_supports_sm_tensor``); builds before PR #23792 also
refuse a quantized KV cache, and every build aborts on one other than q8_0 or q4_0 (issue
#27116). Its --fit does not place a tensor split, so the mode is launched
with -fit off and a -c of its own (docs/multi-gpu.md). engines.json ``tensor_split`` holds the
builds, the denylist and their sources.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ridgeline.datafiles import engine_defaults

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.model import ModelSpec
    from ridgeline.precision import KVDtype

UNQUANTIZED_KV = ("fp16", "bf16", "fp32")  # -ctk/-ctv f16, bf16, f32


def tensor_split_data() -> dict[str, Any]:
    data: dict[str, Any] = engine_defaults("llama.cpp")["tensor_split"]
    return data


def tensor_split_launch() -> str:
    """The llama-server flags of a tensor split: ``-sm tensor -fit off``."""
    return str(tensor_split_data()["launch"])


def tensor_split_problem(model: ModelSpec, flash_attention: bool) -> str:
    """Why every llama.cpp build with -sm tensor stops at start-up for this model, or "":
    flash attention off, or an architecture it has no tensor split for (DeepSeek-V3 is its
    deepseek2)."""
    if not flash_attention:
        return ("-sm tensor needs flash attention: llama.cpp stops at start-up with "
                "'SPLIT_MODE_TENSOR requires flash_attn to be enabled' (docs/multi-gpu.md); "
                "drop --flash-attn off (auto turns it on) or split by layer (-sm layer)")
    arch = tensor_split_data()["refused_architectures"].get(model.architecture)
    if arch:
        return (f"llama.cpp has no -sm tensor for {model.name} ({model.architecture}, its "
                f"{arch!r}): it stops at start-up with 'LLAMA_SPLIT_MODE_TENSOR not "
                "implemented for architecture' (src/llama-arch.cpp); split by layer "
                "(-sm layer, the default)")
    return ""


def tensor_split_kv_problem(cache: KVDtype) -> str:
    """Why every llama.cpp build stops at start-up on this KV cache split by tensor, or "": the
    split tracks q8_0 and q4_0 caches and asserts on q4_1, q5_0, q5_1 and iq4_nl ('GGML_ASSERT(
    ret.axis != GGML_BACKEND_SPLIT_AXIS_UNKNOWN)', issue #27116)."""
    splits = tensor_split_data()["quantized_kv_types"]
    if cache.id in UNQUANTIZED_KV or cache.id in splits:
        return ""
    return (f"llama.cpp's -sm tensor splits a {' or '.join(splits)} KV cache, not a {cache.id} "
            "one: it aborts at start-up with 'GGML_ASSERT(ret.axis != "
            "GGML_BACKEND_SPLIT_AXIS_UNKNOWN) failed' (issue #27116); give --kv-dtype "
            f"{' or '.join(splits)}, or split by layer (-sm layer)")


def tensor_split_build_problem(dep: Deployment, build: int | None) -> str:
    """Why llama.cpp build ``build`` (None: the newest modelled) refuses this tensor split, or
    "": a build before the mode (b8738), or a quantized KV cache before PR #23792 (b9455)."""
    if build is None or not dep.engine.startswith("llama.cpp") \
            or dep.tensor_parallel_size == 1:
        return ""
    data = tensor_split_data()
    if build < int(data["since_build"]):
        return (f"llama.cpp b{build} has no -sm tensor: it came with PR #19378 in "
                f"b{data['since_build']} (April 2026); split by layer (-sm layer) or name a "
                "later build")
    if dep.kv.id not in UNQUANTIZED_KV and build < int(data["quantized_kv_since_build"]):
        return (f"llama.cpp b{build} refuses a {dep.kv.id} KV cache under -sm tensor "
                "('simultaneous use of SPLIT_MODE_TENSOR and KV cache quantization not "
                f"implemented') until PR #23792 (b{data['quantized_kv_since_build']}): "
                "--kv-dtype fp16, -sm layer, or a later build")
    return ""
