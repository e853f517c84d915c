"""Predict a measurement row's metric under its conditions, through step_cost.

Metric definitions: validation/README.md. The speed metrics (decode, prefill, TTFT,
throughput) are divisions of step times, converted once in metric_divisions; the KV metrics
are the engine's KV pool (memory.py).
TPOT (time per output token after the first) = 1 ÷ decode_tok_s_per_user; ITL is the same
quantity measured between consecutive tokens; end-to-end latency = TTFT + (output−1)·TPOT.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache

from ridgeline.catalog import resolve_model
from ridgeline.context_length import served_positions
from ridgeline.deployment import Deployment
from ridgeline.engine_names import engine_name
from ridgeline.engine_platforms import LLAMACPP_PLAIN_KV
from ridgeline.engine_versions import modelled_version
from ridgeline.engines import EngineProfile, engine_id, llamacpp_build, profile_for
from ridgeline.errors import InputError
from ridgeline.graph_batches import with_cuda_graphs
from ridgeline.hardware import resolve_accelerator
from ridgeline.measurements import KV_METRICS, UNITS, Measurement
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.metric_divisions import (
    THROUGHPUT_METRICS,
    decode_division,
    priced_decode_batch,
    prompt_division,
    throughput_division,
)
from ridgeline.model import ModelSpec
from ridgeline.offload import offload_caution
from ridgeline.precision import kv_dtype
from ridgeline.quantization import EXPERTS
from ridgeline.raw_fit import raw_fit
from ridgeline.units import GIB
from ridgeline.vllm_memory import parse_version

_WEIGHTS = {"f16": "fp16", "f32": "fp32", "fp8": "fp8", "bf16": "bf16", "int8": "int8",
            "nvfp4": "nvfp4", "mxfp4": "mxfp4"}
# NVIDIA's Model Optimizer exports (nvidia/*-FP8, nvidia/*-FP4 checkpoints) write
# "kv_cache_quant_algo": "FP8" into hf_quant_config.json, and TensorRT-LLM and vLLM follow it
# when the KV dtype is left on auto: a row that names such a checkpoint and leaves the KV dtype
# unknown ran an FP8 cache.
MODELOPT = "ModelOpt"


@dataclass(frozen=True)
class Prediction:
    id: str
    metric: str
    measured: float
    predicted: float | None
    reason: str = ""
    low: float | None = None
    high: float | None = None
    caveat: str = ""  # engine behaviour the row ran into that the model leaves out
    # the decode batch the prediction priced (priced_decode_batch), or None where it priced no
    # decode step (a prefill, a TTFT, a KV figure) or none at all
    batch: int | None = None

    @property
    def error(self) -> float | None:
        """Signed relative error (predicted − measured) / measured."""
        if self.predicted is None:
            return None
        return (self.predicted - self.measured) / self.measured

    @property
    def optimism(self) -> float | None:
        """The error read one way for every metric: + where the prediction promises more
        than was measured (faster, or more capacity). A time's error is turned into its
        rate's: measured ÷ predicted − 1."""
        if self.predicted is None:
            return None
        if UNITS.get(self.metric) == "ms":
            return self.measured / self.predicted - 1 if self.predicted > 0 else math.inf
        return self.error


@lru_cache(maxsize=4096)
def row_engine(row: Measurement) -> str:
    """The engine a row ran: 'llama.cpp' unqualified as the build its card's vendor runs."""
    try:
        vendor = resolve_accelerator(row.gpu).vendor
    except InputError:  # an unknown card: the row is refused when it is predicted
        vendor = ""
    return engine_id(llamacpp_build(row.engine, vendor))


@lru_cache(maxsize=4096)
def deployment_for(row: Measurement) -> Deployment:
    model = resolve_model(row.model)
    acc = resolve_accelerator(row.gpu)
    engine = row_engine(row)
    stored = set(model.stored_format_map.values())
    weights = _WEIGHTS.get(row.weights_dtype, row.weights_dtype)
    if weights in stored or (weights == "bf16" and not stored):
        # the checkpoint as stored (gpt-oss MXFP4 experts); under llama.cpp the GGUF it runs
        # the checkpoint as (Deployment.build: gpt-oss's MXFP4 experts, Q8_0 for the rest)
        weights_arg: str | None = None
    else:
        weights_arg = weights
    kv = {"f16": "fp16", "unknown": None}.get(row.kv_dtype, row.kv_dtype)
    if kv is None and MODELOPT in row.notes:
        kv = "fp8"
    if kv is None:
        kv = "fp16" if engine.startswith("llama.cpp") else None
    pp = row.num_gpus // row.tp
    flash = row.flash_attention()
    if flash is None:  # llama-bench's -fa was off unless asked for, through the builds here,
        # and on where it ran a quantized V cache, which starts with flash attention alone
        flash = not engine.startswith("llama.cpp") or (
            kv is not None and kv_dtype(kv).id not in LLAMACPP_PLAIN_KV)
    dep = Deployment.laid_out(model, acc, weights_arg, kv, row.num_gpus, pp, engine,
                              flash_attention=flash, offload=row.offload())
    # the state's dtype as the run kept it: a vLLM row's release (Nemotron-H's SSM state fp16
    # before v0.20, fp32 from it), where ridgeline models it (modelled_version; else the
    # defaults, as a row naming none), and an SGLang run's --mamba-ssm-dtype
    version = modelled_version(engine, row.engine_version()) if engine == "vllm" else None
    ssm = row.mamba_ssm_dtype() if engine == "sglang" else None
    dep = dep.with_state_settings(version, ssm) if version or ssm else dep
    # the decode graphs the run captured: none where it ran eager, else its engine's sizes
    # under the seats and capture size its notes state (graph_batches.py)
    return with_cuda_graphs(dep, replace(kv_row_settings(row), max_cudagraph_capture_size=(
        row.setting_count("max_cudagraph_capture_size", "cuda_graph_max_bs"))))


@lru_cache(maxsize=4096)
def _does_not_fit(row: Measurement) -> str:
    """Why the row's batch and context cannot fit its GPUs beside the weights, or ""."""
    dep = deployment_for(row)
    context = row.context_len or (row.input_len or 0) + (row.output_len or 0) or 1
    fit = raw_fit(dep, row.batch or 1, context)
    return fit.does_not_fit


def predict(row: Measurement, profiles: Mapping[str, EngineProfile] | None = None) -> Prediction:
    """The row's metric as ridgeline expects it, or None with the reason it cannot."""
    try:
        dep = deployment_for(row)
        if row.metric not in KV_METRICS:
            unfit = _does_not_fit(row)
            if unfit:
                return Prediction(row.id, row.metric, row.value, None, unfit)
        profile = row_profile(row, dep, profiles)
        value = _predict_value(row, dep, profile)
    except InputError as exc:
        return Prediction(row.id, row.metric, row.value, None, _row_hint(str(exc)))
    if value is None:
        return Prediction(row.id, row.metric, row.value, None, "not enough conditions stated")
    if row.metric in KV_METRICS:
        return Prediction(row.id, row.metric, row.value, value, caveat=kv_caveat(row, dep))
    low, high = profile.band_s(value) if row.metric == "ttft_ms" else (
        value * profile.band_low, value * profile.band_high)  # a rate's band, or a time's
    caveat = "; ".join(c for c in (speed_caveat(dep) or (
        eager_caution(dep) if ran_eager(row) else "") or offload_caution(dep),
        client_ttft_caveat(row)) if c)
    return Prediction(row.id, row.metric, row.value, value, "", low, high, caveat=caveat,
                      batch=priced_decode_batch(row, dep))


def predicted_value(row: Measurement,
                    profiles: Mapping[str, EngineProfile] | None = None) -> float | None:
    """predict's figure alone, None where it has none: no band, caveat or reason (the fit's
    objective prices every row under each of hundreds of trial profiles, and reads only it)."""
    try:
        dep = deployment_for(row)
        if row.metric not in KV_METRICS and _does_not_fit(row):
            return None
        return _predict_value(row, dep, row_profile(row, dep, profiles))
    except InputError:
        return None


def row_profile(row: Measurement, dep: Deployment,
                profiles: Mapping[str, EngineProfile] | None = None) -> EngineProfile:
    """The profile a row is priced on: its engine's (``profiles``: a user's, by engine), its
    CUDA graphs taken out where the row ran eager (a speed row; a KV row prices no step)."""
    profile = profile_for(dep.engine, profiles)
    if ran_eager(row) and row.metric not in KV_METRICS:
        profile = profile.without_cuda_graphs()
    return profile


# `ridgeline measure`'s harness runs experts through torch._grouped_mm behind unfused routing
# kernels: about half a dense matmul's bandwidth at decode shapes (docs/h200.md)
HARNESS_MOE_CAVEAT = ("the measure harness runs experts through torch._grouped_mm, which read "
                      "them at about half a dense matmul's bandwidth on an H200 (docs/h200.md); "
                      "its MoE rows are scored, not fitted")


# vLLM issue #45709: Qwen3-30B-A3B at TP4 (RTX 4090D, concurrency 8) decoded at a TPOT of
# 33.92 ms eager against 10.03 ms with CUDA graphs, 3.4x; dense single-GPU runs lose 11-31 %
# (vLLM PR #10058, SGLang PR #1401), about what a prefill step's per-layer cost adds
EAGER_CAUTION = ("without CUDA graphs a MoE or tensor-parallel step launches many more kernels "
                 "and collectives than this prices: vLLM #45709 measured 3.4x the graphed TPOT "
                 "(Qwen3-30B-A3B, TP4), far more than an ungraphed step's per-layer cost "
                 "adds here; read the expectation as a lower bound")


def eager_caution(dep: Deployment) -> str:
    """The caution an eager (ungraphed) expectation carries, or ""."""
    return EAGER_CAUTION if dep.model.moe is not None or dep.num_gpus > 1 else ""


# TensorRT-LLM has no --enforce-eager: its PyTorch backend captures CUDA graphs for batches of
# decoding requests only, unless its LLM API options set cuda_graph_config to null
# (tensorrt_llm/llmapi/llm_args.py, TorchLlmArgs.cuda_graph_config: default_factory=
# CudaGraphConfig, 1.x); the TensorRT engine backend's graphs are
# extended_runtime_perf_knob_config.cuda_graph_mode, off by default (check_engine_flags)
TRTLLM_EAGER_NOTE = ("TensorRT-LLM has no --enforce-eager: this prices its PyTorch backend "
                     "with `cuda_graph_config: null` in the YAML trtllm-serve reads "
                     "(--extra_llm_api_options; --config in later releases), which leaves "
                     "its decode steps without CUDA graphs")


def eager_switch_note(engine: str) -> str:
    """How the engine itself turns CUDA graphs off, where its name for it is not the flag's
    (vLLM --enforce-eager, SGLang --disable-cuda-graph): TensorRT-LLM's; else ""."""
    return TRTLLM_EAGER_NOTE if engine == "trtllm" else ""


def ran_eager(row: Measurement) -> bool:
    """Whether the row's engine ran without CUDA graphs (notes: 'enforce_eager=true')."""
    return _notes_say_eager(row.notes)


@lru_cache(maxsize=4096)
def _notes_say_eager(notes: str) -> bool:
    return re.search(r"enforce_eager\s*[=:]?\s*(yes|true)", notes, re.I) is not None


# validation/moe_prefill.csv's one-request TTFTs, timed by a benchmark client (SGLang's
# bench_serving on its cookbook pages, InferenceX's): the MoE rows measured 11 to 398 ms more
# than their priced prompt step, flat in the prompt on the cookbook's B200 runs, where TensorRT-LLM's
# TTFTs, timed inside its own benchmark, are within 10 % at the median (validation/README.md)
CLIENT_TTFT_CAVEAT = ("a benchmark client's time to first token: HTTP, tokenising, scheduling "
                      "and streaming the token are inside it, and ridgeline prices the prompt's "
                      "step alone (one request at a time on an idle SGLang server, MoE models' "
                      "TTFTs measured 11 to 398 ms over that step: validation/moe_prefill.csv)")


def client_ttft_caveat(row: Measurement) -> str:
    """The caveat a TTFT row timed by a benchmark client carries (notes: 'client-side'), or
    "": the step-cost model prices the prompt's step, not the request's path to it."""
    return CLIENT_TTFT_CAVEAT if row.metric == "ttft_ms" and "client-side" in row.notes else ""


def harness_moe(engine: str, model: ModelSpec) -> bool:
    """A MoE model timed by `ridgeline measure`'s harness (torch-eager or torch-cudagraph)."""
    return engine_id(engine).startswith("torch-") and model.moe is not None


# validation/serving.csv (InferenceX, never fitted): DeepSeek-R1-0528 FP8 on 8 × MI325X (SGLang
# 0.5.9-0.5.19) decoded 1.5-2.1x slower than priced, gpt-oss-120b MXFP4 on one MI300X (vLLM 0.17)
# 1.3x at 64 concurrent to 1.5x at 256 (each TPOT with the other requests' prompts counted, as
# since 2026-12-02, and those prompts' experts at vLLM's MoE prompt slowdown, since 2026-12-03),
# where the same models on H100, H200 and B200 came within about 21 %;
# lowbatch.csv's Kimi-K2 FP8 on 8 × MI300X (SGLang 0.5.7, the SGLang cookbook) ran 3.5x slower
# at one user (24.75 tok/s measured, 87.5 priced; that row is fitted, and stays 3.5x off)
CDNA3_MOE_CAUTION = ("the serving engines' FP8 and MXFP4 MoE paths on CDNA3 (MI300X, MI325X) have "
                     "run slower than this prices: DeepSeek-R1 FP8 on 8 x MI325X (SGLang) decoded "
                     "1.5-2.1x slower, gpt-oss-120b MXFP4 on one MI300X (vLLM 0.17) 1.3x at 64 "
                     "concurrent to 1.5x at 256 (validation/serving.csv, out of sample), Kimi-K2 "
                     "FP8 on 8 x MI300X (SGLang 0.5.7) 3.5x at one user (validation/lowbatch.csv); "
                     "read the expectation as optimistic")


def cdna3_moe_caution(dep: Deployment) -> str:
    """The caution a serving engine's FP8 or MXFP4 MoE model on a CDNA3 card carries, or ""."""
    moe = dep.model.moe is not None and dep.bytes_by_category.get(EXPERTS, 0) > 0
    if not moe or dep.accelerator.family != "cdna3" \
            or engine_id(dep.engine) not in ("vllm", "sglang", "trtllm"):
        return ""
    expert_format = dep.weights.format_of(EXPERTS).id
    return CDNA3_MOE_CAUTION if expert_format.startswith(("fp8", "mxfp4")) else ""


# No row in validation/ measures a serving engine on GGUF weights: every q*/iq* row is
# llama.cpp's. vLLM's docs (docs.vllm.ai, features/quantization/gguf) warn that its GGUF
# support "is highly experimental and under-optimized"; SGLang loads a .gguf path with its
# gguf load format (docs.sglang.io, advanced_features/model_loading); TensorRT-LLM's
# quantization recipes (nvidia.github.io/TensorRT-LLM, features/quantization) list FP4, FP8,
# INT8 and INT4 AWQ/GPTQ, and no GGUF loader.
GGUF_CAUTION = {
    "vllm": "vllm on GGUF weights ({label}) is priced like its other formats of that size, but "
            "vLLM's docs call its GGUF support highly experimental and under-optimized "
            "(docs.vllm.ai, features/quantization/gguf) and no measurement here is of it: "
            "read the expectation as optimistic (GGUF's own engine: --engine llama.cpp)",
    "sglang": "sglang on GGUF weights ({label}) is priced like its other formats of that size; "
              "SGLang loads GGUF (its gguf load format: docs.sglang.io, model loading), but no "
              "measurement here is of it, so the expectation is unchecked (GGUF's own engine: "
              "--engine llama.cpp)"}


def is_gguf(dep: Deployment) -> bool:
    """Whether the weights are a GGUF file type: a block format that covers every tensor
    (q4_k_m, q8_0, iq4_xs; formats.json applies_to "all"), alone or in a mix (mxfp4_moe)."""
    from ridgeline.precision import weight_formats

    return any(weight_formats()[f].applies_to == "all" for _, f in dep.weights.formats)


def gguf_caution(dep: Deployment) -> str:
    """What to say of vLLM or SGLang serving GGUF weights, or "": no serving profile row
    measures it, and vLLM's own docs call the path experimental. Under llama.cpp, what to say
    of a BF16 GGUF on a card with no bf16 rate (bf16_gguf_caution)."""
    if dep.engine.startswith("llama.cpp"):
        return bf16_gguf_caution(dep)
    if dep.engine not in GGUF_CAUTION or not is_gguf(dep):
        return ""
    return GGUF_CAUTION[dep.engine].format(label=dep.weights.label)


def bf16_gguf_caution(dep: Deployment) -> str:
    """Why a BF16 GGUF's matmuls are priced at the card's fp32 peak under llama.cpp's CUDA or
    ROCm build (deployment.llamacpp_bf16_dtypes, with its sources), and the file that runs at
    its fp16 one; "" where none is. Llama-3.1-8B on a T4: 8.1 TFLOP/s, where F16 runs at 65."""
    from ridgeline.deployment import llamacpp_bf16_dtypes

    acc = dep.accelerator
    if "bf16" not in {f for _, f in dep.weights.formats} \
            or llamacpp_bf16_dtypes(("bf16",), dep.engine, acc) != ("fp32",):
        return ""
    fp16 = f", {acc.peak('fp16') / 1e12:,.4g} TFLOP/s" if "fp16" in acc.peak_flops else ""
    why = ("cuBLAS has no BF16 tensor-core GEMM before Ampere, and llama.cpp PR #28846 hands "
           "it to F32 cuBLAS" if dep.engine == "llama.cpp-cuda" else
           "llama.cpp PR #28846 measured hipBLAS's BF16 GEMM below F32's on an MI50 and hands "
           "it to F32")
    return (f"{acc.id} has no bf16 rate and the BF16 GGUF is not converted for it: {dep.engine} "
            f"multiplies it no faster than fp32 ({why}), priced at the fp32 peak, "
            f"{acc.peak('fp32') / 1e12:,.4g} TFLOP/s; a GGUF converted with --outtype f16 "
            f"(--weights fp16) runs at the fp16 rate{fp16}")


# No row in validation/ measures bitsandbytes weights, and the step-cost model prices a step
# by the bytes it reads: bitsandbytes' kernels dequantize as they go (matmul_4bit; LLM.int8's
# int8 product plus an fp16 one for the outlier columns), and on a MoE the engine's
# BitsAndBytesMoEMethod dequantizes every expert to 16 bits before the fused kernel, each step
# (vLLM's, and SGLang's from 0.5.8: its apply calls _apply_4bit_dequant, then fused_moe).
BNB_CAUTION = ("bitsandbytes weights ({label}) are priced by the bytes a step reads, as any "
               "format is, but bitsandbytes' dequantizing kernels run well below that and no "
               "measurement calibrates them: read the step times as optimistic (the memory and "
               "capacity figures stand)")
BNB_MOE = ("; on a MoE {engine} dequantizes every expert to 16 bits each step "
           "(BitsAndBytesMoEMethod), which this does not price at all")


def bnb_caution(dep: Deployment) -> str:
    """What to say of a step time on bitsandbytes weights (bnb-nf4, bnb-int8), or ""."""
    bnb = {f for _, f in dep.weights.formats if f.startswith("bnb-")}
    if not bnb:
        return ""
    moe = dep.model.moe is not None and dep.weights.format_of(EXPERTS).id in bnb
    # no engine named is vLLM; TensorRT-LLM and llama.cpp load no bitsandbytes weights
    engine = {"sglang": "SGLang"}.get(dep.engine, "vLLM")
    return BNB_CAUTION.format(label=dep.weights.label) + (BNB_MOE.format(engine=engine)
                                                          if moe else "")


def shared_profile_caution(profile: EngineProfile, moe_prompt: bool = False,
                           dep: Deployment | None = None) -> str:
    """For an engine other than vLLM priced on a profile it shares with others (the bundled
    serving profile, fitted on TensorRT-LLM's, vLLM's and SGLang's rows together): that its
    step times are theirs, so comparing engines compares pools and scheduling; else "".
    ``moe_prompt``: the steps carry a MoE's prompt tokens, which a twin with its own
    moe_prompt_expert_slowdown (vLLM's 4.9) prices slower, so those are not the same.
    ``dep``: the deployment timed, where the engines write its model with different numbers
    of matmul launches (``launches.engine_matmuls``: DeepSeek-V3's shared expert, folded in by
    SGLang, 485 against vLLM's 601), each priced the profile's launch overhead, so those
    steps differ too."""
    from ridgeline.engines import bundled_twins, moe_prompt_expert_slowdown
    from ridgeline.launches import engine_matmuls

    if profile.engine == "vllm":
        return ""
    twins = bundled_twins(profile)
    if len(twins) < 2:
        return ""
    own = moe_prompt_expert_slowdown(profile.engine)
    slower = [f"{engine_name(e)} prices {moe_prompt_expert_slowdown(e):g}x slower" for e in twins
              if moe_prompt and moe_prompt_expert_slowdown(e) != own]
    launches = {e: engine_matmuls(dep, e) for e in twins} if dep is not None else {}
    differ = [("the routed experts' arithmetic on a prompt, which " + ", ".join(slower)
               + " (engines.json moe_prompt_expert_slowdown: its fused MoE kernels)")
              if slower else "",
              ("the weight matmuls each launches in a forward pass, "
               + ", ".join(f"{engine_name(e)} {n:,}" for e, n in launches.items())
               + f" (each launch priced the profile's {profile.matmul_overhead_s * 1e6:.2f} µs; "
               "the fewer fold a shared expert in, or run it on a stream of their own)")
              if len(set(launches.values())) > 1 else ""]
    differ = [d for d in differ if d]
    same = ("so these step times are the same on each" if not differ else
            "so these step times are the same on each but for " + " and for ".join(differ))
    return (f"{', '.join(engine_name(e) for e in twins)} share one calibrated step-cost "
            f"profile, fitted on their rows together, {same}: "
            "the engines differ in their KV pools and scheduling (`ridgeline fit`, `ridgeline "
            "simulate`), and no engine comparison should be read into this figure")


def speed_caveat(dep: Deployment) -> str:
    """What the row's engine does that the step-cost model leaves out, or ""."""
    return HARNESS_MOE_CAVEAT if harness_moe(dep.engine, dep.model) else cdna3_moe_caution(dep)


def _predict_value(row: Measurement, dep: Deployment, profile: EngineProfile) -> float | None:
    m = row.metric
    if m == "decode_tok_s_per_user":
        division = decode_division(row, dep, profile)
        return None if division is None else division.tok_s
    if m in ("prefill_tok_s", "ttft_ms"):
        prompt_run = prompt_division(row, dep, profile)
        if prompt_run is None:
            return None
        return prompt_run.ttft_ms if m == "ttft_ms" else prompt_run.tok_s
    if m in THROUGHPUT_METRICS:
        value = output_throughput(row, dep, profile)
        if value is None:
            return None
        return value / row.num_gpus if m.endswith("per_gpu") else value
    return _kv_metric(row, dep)


def output_throughput(row: Measurement, dep: Deployment, profile: EngineProfile) -> float | None:
    """A throughput row's tok/s over all its GPUs: a llama-batched-bench S_TG row's decode
    division (decode steps only), else a static batch's or a full pool's (throughput_division);
    None with no output."""
    if (row.output_len or 0) <= 0:
        return None
    division = decode_division(row, dep, profile)  # llama-batched-bench: decode steps only
    if division is not None:
        return division.tok_s
    run = throughput_division(row, dep, profile)
    return None if run is None else run.tok_s


def kv_row_settings(row: Measurement) -> EngineSettings:
    """The engine settings a KV-capacity row states, each in its engine's own name; a vLLM
    row's version picks the memory accounting (main after PR #2031 counts as v0.2.5, the
    release it landed in)."""
    version = row.engine_version() if row.engine in ("vllm", "sglang") else None
    if version and "#2031" in row.notes and parse_version(version) < (0, 2, 5):
        version = "0.2.5"
    fraction = row.setting_number("gpu_memory_utilization", "mem_fraction_static",
                                  "kv_cache_free_gpu_mem_fraction")
    tokens = row.setting_count("max_num_batched_tokens", "chunked_prefill_size", "max_num_tokens")
    seqs = row.setting_count("max_num_seqs", "max_running_requests", "max_batch_size")
    block = row.setting_count("block_size", "page_size", "tokens_per_block")
    return EngineSettings(
        gpu_memory_utilization=fraction, max_model_len=row.context_len,
        max_num_seqs=seqs, max_num_batched_tokens=tokens, block_size=block,
        enforce_eager=ran_eager(row),
        prefix_caching=row.prefix_caching() if row.engine == "vllm" else None,
        engine_version=version,
        mamba_ssm_dtype=row.mamba_ssm_dtype() if row.engine == "sglang" else None,
        backend=row.trtllm_backend() if row.engine == "trtllm" else None,
        warm_compile_cache=row.engine == "vllm" and row.warm_compile_cache())


def kv_caveat(row: Measurement, dep: Deployment) -> str:
    """What the row's engine version is known to do at its parallelism that the pool model
    leaves out (vLLM 0.2.5-0.2.6 at TP > 1), or ""."""
    accounting = kv_pool(dep, kv_row_settings(row)).accounting
    if accounting is None or not accounting.tp_caveat or dep.tensor_parallel_size < 2:
        return ""
    return f"vLLM {accounting.version} {accounting.tp_caveat}"


MIN_DEVICE_GIB, MAX_DEVICE_GIB = 0.5, 100_000  # what a stated device total can be


def _kv_metric(row: Measurement, dep: Deployment) -> float | None:
    total = row.setting_number("total_gpu_memory")
    if total is not None and not MIN_DEVICE_GIB <= total <= MAX_DEVICE_GIB:
        raise InputError(f"total_gpu_memory in the notes is {total:g} GiB: a device's memory "
                         f"is {MIN_DEVICE_GIB:g}–{MAX_DEVICE_GIB:,} GiB (nvidia-smi's MiB are "
                         "read as written: '81559MiB')")
    total_bytes = total * GIB if total else None
    stated = kv_row_settings(row)
    max_len = row.context_len or served_positions(dep.model, dep.engine) or 4096
    settings = replace(stated, max_model_len=max_len)
    pool = kv_pool(dep, settings, total_bytes)
    if row.metric == "kv_cache_tokens":
        return float(pool.logged_tokens(max_len))
    if row.metric == "kv_cache_gib":
        return pool.kv_cache_bytes / GIB
    if row.metric == "gpu_blocks":
        return float(pool.blocks)
    return pool.concurrency(max_len)


def _row_hint(reason: str) -> str:
    """A resolution error's hint as a measurements file can act on it: a row names a model
    not bundled by a config.json path in its model column (validate and calibrate fetch
    nothing), an unknown card by a record given with --gpu-file, and an engine the card does
    not run by the engines that do, as its engine column names them ('try --engine vllm, or
    --engine llama.cpp-cuda': 'engines that run it, for the engine column: vllm, or
    llama.cpp-cuda'), a release by its notes ('engine: v0.19')."""
    reason = reason.replace("--fetch reads its config.json from the Hugging Face Hub",
                            "give a path to its config.json in the model column")
    head, try_, ways = reason.partition("; try --engine ")
    if try_:  # a release a way names is the one the row's notes give ('engine: vLLM v0.19')
        ways = re.sub(r" --engine-version (\S+) \(", r" (its notes reading 'engine: v\1'; ",
                      "--engine " + ways)
        reason = f"{head}; engines that run it, for the engine column: " \
            + ways.replace("--engine ", "")
    if reason.startswith("unknown accelerator"):
        reason += "; --gpu-file adds a card's record"
    return reason
