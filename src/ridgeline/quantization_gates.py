"""Where vLLM and SGLang refuse bitsandbytes and experts_int8 weights, by layout and by
release (formats.json engine_methods: since, multi_gpu_since, moe_since, absent), and the one
check a layout passes before anything is sized on it, ``deployment_problem``: the model's
tensor-parallel split (tensor_parallel.py), a ModelOpt algorithm the engine does not serve
(modelopt_algos.py), a KV dtype TensorRT-LLM refuses over a checkpoint's own, and these
refusals. The CLI's build, the planner's
candidates and fit's levers all ask it, so none offers a layout the engine will not start.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ridgeline.datafiles import load_data
from ridgeline.engine_names import engine_name
from ridgeline.engine_platforms import TRTLLM_NO_FP8_FAMILIES
from ridgeline.engine_quantization import stored_method_problem
from ridgeline.engine_versions import pipeline_parallel_problem, release_before
from ridgeline.modelopt_algos import (
    checkpoint_refusal,
    dropped_refusal,
    layers_served_since,
    needs_fp8_activations,
    release_refusal,
    served_since,
    served_until,
)
from ridgeline.quantization import EXPERTS
from ridgeline.release_features import release_feature_problem
from ridgeline.sglang_nsa import nsa_layout_problem
from ridgeline.tensor_parallel import tensor_parallel_problem
from ridgeline.vllm_gpu_floors import gpu_floor_problem

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.model import ModelSpec

GATED_ENGINES = ("vllm", "sglang")  # the engines whose --quantization methods are gated by release


@lru_cache(maxsize=1)
def _rows() -> dict[str, dict[str, Any]]:
    return {row["method"]: row for row in load_data("formats.json")["engine_methods"]}


def deployment_problem(dep: Deployment, version: str | None = None) -> str:
    """Why the engine cannot start ``dep`` at ``version`` (None: the newest modelled), or "":
    the model's heads or widths do not split over its tensor-parallel ranks, its bitsandbytes
    or experts_int8 weights are refused on this layout or release, its ModelOpt quant_algo or
    KV dtype is one the engine refuses (modelopt_problem, kv_override_problem), or the method
    vLLM or SGLang reads its checkpoint with as stored needs a higher compute capability than
    the card's (capability_problem), or vLLM ``version`` runs nothing, no fp8 weights or no
    fp8 KV cache on the card (vllm_gpu_floors: fp8 KV on a T4 from 0.24, anything on a V100
    from 0.20), or SGLang ``version`` lays a DeepSeek Sparse Attention model out
    as one-GPU ranks whatever the layout (sglang_nsa.nsa_layout_problem), or the release
    came before the card's vendor, the model's architecture, a weight format or the KV dtype
    it asks for (release_features.release_feature_problem: vLLM 0.1 has no fp8), or vLLM
    ``version`` has no pipeline stages (before 0.5.1: engine_versions.PIPELINE_FROM), so that
    fit's PP lever is skipped on vLLM 0.4 rather than refusing the report."""
    return (tensor_parallel_problem(dep.model, dep.tensor_parallel_size)
            or release_feature_problem(dep, version)
            or modelopt_problem(dep, version) or kv_override_problem(dep)
            or bnb_problem(dep, version) or experts_int8_problem(dep, version)
            or capability_problem(dep, version) or gpu_floor_problem(dep, version)
            or nsa_layout_problem(dep, version)
            or pipeline_parallel_problem(dep.engine, version, dep.pipeline_parallel_size))


def modelopt_problem(dep: Deployment, version: str | None = None) -> str:
    """Why ``dep``'s engine at ``version`` (None: the newest modelled) refuses its ModelOpt
    checkpoint, as stored, by its quant_algo, or "" (modelopt_algos.py): a W4A8_AWQ export
    under vLLM ('Unknown ModelOpt quant algo'), which TensorRT-LLM serves; a W4A16_NVFP4 one
    under SGLang before 0.5.19, a MIXED_PRECISION one before 0.5.15 (qwen3.6-35b-a3b); under
    vLLM a W4A16_NVFP4 one before 0.21, a MIXED_PRECISION one before 0.17, and before 0.22 one
    with W4A16_NVFP4 layers (qwen3.6-35b-a3b's experts: layers_served_since); an FP8_PB_WO or
    FP8_PER_CHANNEL_PER_TOKEN one under SGLang after 0.5.17 and under its newest release
    (served_until);
    --weights FMT sizes another checkpoint."""
    spec = dep.model
    if dep.weights.label != "as stored":
        return ""
    refused = checkpoint_refusal(spec, dep.engine)
    if refused or spec.quant_method != "modelopt":
        return refused
    until = served_until(spec.quant_algo, dep.engine)
    if until and (version is None or release_before(dep.engine, until, version)):
        return dropped_refusal(spec, dep.engine, until, version)
    since = served_since(spec.quant_algo, dep.engine)
    if version is None:
        return ""
    if release_before(dep.engine, version, since):
        return release_refusal(spec, dep.engine, str(since), version)
    return next((release_refusal(spec, dep.engine, from_release, version, fmt)
                 for fmt, from_release in layers_served_since(spec, dep.engine)
                 if release_before(dep.engine, version, from_release)), "")


def kv_override_problem(dep: Deployment) -> str:
    """Why TensorRT-LLM refuses ``dep``'s KV dtype on its checkpoint as stored, or "": a
    checkpoint whose kv_cache_quant_algo TensorRT-LLM keeps (checkpoint_kv.py: int8, fp4, fp8)
    takes no other kv_cache_config dtype; validate_and_set_kv_cache_quant
    (tensorrt_llm/_torch/pyexecutor/model_loader.py) raises 'You cannot override a checkpoint
    with a pre-quantized KV cache that doesn't match' for any dtype but auto and its own."""
    if dep.engine != "trtllm" or dep.weights.label != "as stored":
        return ""
    own = dict(dep.model.engine_kv_cache_dtypes).get("trtllm", "")
    if not own or dep.kv.id == own:
        return ""
    return (f"{dep.model.name}'s checkpoint keeps a pre-quantized {own} KV cache, and "
            f"TensorRT-LLM refuses a {dep.kv.id} one over it at start-up ('You cannot override a "
            "checkpoint with a pre-quantized KV cache that doesn't match'): leave --kv-dtype "
            f"out (auto keeps its {own})")


def capability_problem(dep: Deployment, version: str | None = None) -> str:
    """Why ``dep``'s engine at ``version`` (None: the newest modelled) refuses its checkpoint
    as stored on its card, or "" (--weights FMT, the what-if flag, sizes another checkpoint;
    --quantization is method_on's): the method vLLM or SGLang reads it with below the card's
    compute capability (a ModelOpt FP8 export on an A100 under SGLang, and under vLLM before
    0.27; qwen3.6-35b-a3b's MIXED_PRECISION there under vLLM before 0.24; an NVFP4 one on an
    H100 under SGLang before 0.5.13), or TensorRT-LLM's W4A8_AWQ,
    fp8 activations, on a card without fp8 matmuls (before compute capability 8.9)."""
    if dep.weights.label != "as stored":
        return ""
    spec, acc = dep.model, dep.accelerator
    if dep.engine == "trtllm" and spec.quant_method == "modelopt" \
            and needs_fp8_activations(spec.quant_algo) and acc.family in TRTLLM_NO_FP8_FAMILIES:
        return (f"{spec.name} is stored in ModelOpt quant_algo {spec.quant_algo}, whose matmuls "
                "TensorRT-LLM runs on fp8 activations, from compute capability 8.9 (Ada, "
                f"Hopper, Blackwell), not on the {acc.id} ({acc.family}); name such a card")
    return stored_method_problem(spec, acc, dep.engine, version)


def single_rank_checkpoint(model: ModelSpec, engine: str) -> bool:
    """Whether ``engine`` loads ``model``'s checkpoint, as stored, on one tensor-parallel rank
    only, so more GPUs are pipeline stages: a pre-quantized bitsandbytes one under vLLM or
    SGLang ('Prequant BitsAndBytes models with TP is not supported. Please try with PP.')."""
    return model.quant_method == "bitsandbytes" and bool(model.stored_format_map) \
        and engine in GATED_ENGINES


def bnb_problem(dep: Deployment, version: str | None = None) -> str:
    """Why vLLM or SGLang cannot serve ``dep``'s bitsandbytes weights, or "": a release without
    the method (vLLM before 0.5; SGLang 0.5.4.post2 to 0.5.7), more than one GPU before vLLM
    0.6.2, a pre-quantized checkpoint over tensor-parallel ranks ('Prequant BitsAndBytes models
    with tensor parallelism is not supported. Please try with pipeline parallelism.', both
    engines' loaders), a MoE's experts before the engine's BitsAndBytesMoEMethod (vLLM 0.10,
    SGLang 0.5.8), or 8-bit experts (its 8-bit create_weights raises NotImplementedError).
    Quantized on load (-q bitsandbytes) it runs at any TP."""
    spec, engine = dep.model, dep.engine
    bnb = {f for _, f in dep.weights.formats if f.startswith("bnb-")}
    if not bnb or engine not in GATED_ENGINES:
        return ""
    row, name = _rows()["bitsandbytes"], engine_name(engine)
    asked = f"{name} {version}"
    gap = row["absent"].get(engine)
    if version and gap and not release_before(engine, version, gap[0]) \
            and release_before(engine, version, gap[1]):
        return (f"{asked} has no bitsandbytes method (its QUANTIZATION_METHODS dropped the one "
                f"it borrowed from vLLM in v{gap[0]}; its own came in v{gap[1]}): name another "
                "--engine-version, or another format")
    since = row["since"].get(engine)
    if release_before(engine, version, since):
        return (f"{asked} has no bitsandbytes: it came in v{since} (PR #4776); name a later "
                "--engine-version, or another format")
    multi = row["multi_gpu_since"].get(engine)
    if dep.rank_gpus > 1 and release_before(engine, version, multi):
        return (f"{asked} runs bitsandbytes weights on one GPU only ('BitAndBytes quantization "
                f"with TP or PP is not supported yet'); tensor and pipeline parallelism came in "
                f"v{multi} (PR #8434): run it on one GPU, or name a later --engine-version")
    if single_rank_checkpoint(spec, engine) and dep.weights.label == "as stored" \
            and dep.tensor_parallel_size > 1:
        stages = dep.tensor_parallel_size * dep.pipeline_parallel_size
        said = "TP" if engine == "sglang" else "tensor parallelism"  # its loader's words
        return (f"{spec.name} is a pre-quantized bitsandbytes checkpoint, and {name} loads one "
                f"on a single tensor-parallel rank only ('Prequant BitsAndBytes models with "
                f"{said} is not supported'): give --num-gpus 1 with "
                f"--pipeline-parallel-size {stages}, or serve the 16-bit "
                "checkpoint with --quantization bitsandbytes, which quantizes it on each rank")
    experts = dep.weights.format_of(EXPERTS).id
    if spec.moe is None or experts not in bnb:
        return ""
    moe_since = row["moe_since"].get(engine)
    if release_before(engine, version, moe_since):
        return (f"{asked} has no bitsandbytes MoE method, so {spec.name}'s experts would not "
                f"be quantized: BitsAndBytesMoEMethod came in v{moe_since}; name a later "
                "--engine-version, or another format")
    if experts == "bnb-int8":
        return (f"{spec.name} is an 8-bit bitsandbytes checkpoint of a MoE, and {name} has no "
                "8-bit bitsandbytes experts (BitsAndBytesMoEMethod: NotImplementedError): "
                "serve a 4-bit one, or the 16-bit checkpoint with --quantization bitsandbytes")
    return ""


# the methods whose release gates read the deployment (--weights reaches them too)
_GATED_BY_LAYOUT = ("bitsandbytes", "experts_int8")


def method_release_problem(method: str, engine: str | None, version: str | None) -> str:
    """Why ``engine`` at ``version`` (None: the newest modelled) refuses --quantization
    ``method`` as no method of that release (formats.json engine_methods ``since``: vLLM's
    mxfp4 came in 0.10.1), or ""; bitsandbytes and experts_int8 are gated on the deployment
    (bnb_problem, experts_int8_problem)."""
    from ridgeline.engine_quantization import engine_method

    key = engine_method(method).method
    row = _rows().get(key)
    if row is None or key in _GATED_BY_LAYOUT or engine not in GATED_ENGINES:
        return ""
    since = row.get("since", {}).get(engine)
    if not release_before(engine, version, since):
        return ""
    return (f"{engine_name(engine)} {version} has no --quantization {method}: {key} came in "
            f"v{since}; name a later --engine-version, or another method")


def experts_int8_problem(dep: Deployment, version: str | None = None) -> str:
    """Why vLLM at ``version`` has no experts_int8, or "": ExpertsInt8Config came in 0.5.5."""
    if dep.weights.label != "experts_int8" or dep.engine != "vllm":
        return ""
    since = _rows()["experts_int8"]["since"]["vllm"]
    if not release_before("vllm", version, since):
        return ""
    return (f"vLLM {version} has no experts_int8: ExpertsInt8Config came in v{since} (PR #7415); "
            "name a later --engine-version, or another format")
