"""A Deployment: model, accelerator and count, weight and KV formats. Built once, read everywhere."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

from ridgeline.cpu_offload import CpuOffload
from ridgeline.ds_mla_cache import packed_cache_problem, vllm_stored_cache
from ridgeline.engine_platforms import (
    engine_platform_problem,
    flash_attention_kv_problem,
    flash_attention_unsupported,
    kv_platform_problem,
    quantized_v_problem,
    vllm_free_engine,
    weights_platform_problem,
)
from ridgeline.engine_quantization import (
    engine_method,
    loaded_as_stored,
    method_weights,
    names_stored_checkpoint,
)
from ridgeline.engines import ENGINES, engine_id, llamacpp_build
from ridgeline.errors import InputError, wrong_kind
from ridgeline.hardware import Accelerator, engine_devices
from ridgeline.kvcache import kv_replication
from ridgeline.llamacpp_rope import RopeLaunch
from ridgeline.llamacpp_tensor import tensor_split_kv_problem, tensor_split_problem
from ridgeline.model import Layer, ModelSpec
from ridgeline.offload import HostOffload, check_host_memory
from ridgeline.params import count_params, layer_params, rank_params
from ridgeline.precision import (
    KVDtype,
    WeightFormat,
    WeightPlan,
    compute_format_for,
    is_stored_format,
    kv_dtype,
    weight_bytes,
    weight_bytes_by_category,
    weight_plan,
)
from ridgeline.quantization import (
    EMBEDDING,
    EXPERTS,
    LINEAR_CATEGORIES,
    ROUTED,
    ROUTER,
    head_category,
)
from ridgeline.served_model import (
    latent_attention,
    llamacpp_attention,
    llamacpp_gguf_dtype,
    llamacpp_tensor_types,
    llamacpp_weights,
    served_dtype,
)
from ridgeline.tensor_parallel import tensor_parallel_problem
from ridgeline.units import plural, require_count

if TYPE_CHECKING:
    from ridgeline.graph_batches import GraphCapture
    from ridgeline.lora_slots import AnyLoRA

LLAMA_CPP_MATMUL_DTYPES = ("bf16", "fp16", "fp32")


def llamacpp_matmul_dtypes(dtypes: tuple[str, ...]) -> tuple[str, ...]:
    """The dtypes llama.cpp multiplies a format of these compute dtypes (best first) at: its
    16- and 32-bit ones, and fp16 alone for a format whose best is narrower (MXFP4's fp4,
    an fp8 or int8 format). llama.cpp runs such weights as it runs its own quants, through
    MMQ's int8 kernels or dequantized to f16 for cuBLAS (ggml-cuda.cu, ggml_cuda_mul_mat:
    ggml_cuda_should_use_mmq, else the to_fp16 conversion; Metal's kernel_mul_mm dequantizes
    into half tiles), never as a bf16 GEMM, which on a GeForce card would run at half the
    rate: gpt-oss-20b's MXFP4 experts on an RTX 3090 run at its fp16 rate, as Q4_0 does."""
    if dtypes and dtypes[0] not in LLAMA_CPP_MATMUL_DTYPES:
        return ("fp16",)
    return tuple(d for d in dtypes if d in LLAMA_CPP_MATMUL_DTYPES) or ("fp16",)


# llama.cpp's backends that multiply a BF16 GGUF no faster than fp32 on a card with no bf16 rate
LLAMACPP_BF16_AT_FP32 = ("llama.cpp-cuda", "llama.cpp-rocm")


def llamacpp_bf16_dtypes(dtypes: tuple[str, ...], engine: str,
                         accelerator: Accelerator) -> tuple[str, ...]:
    """The dtypes llama.cpp's CUDA or ROCm build multiplies a format led by bf16 at on
    ``accelerator``: fp32 where the card has no bf16 rate (a T4's 8.1 TFLOP/s, not its fp16
    65: the BF16 GGUF is not converted for the card, and cuBLAS runs its GEMM on CUDA cores,
    or, from PR #28846, llama.cpp hands it to F32 cuBLAS; engines.json gguf_16bit
    matmul_dtype cuda_without_bf16, with its source lines); ``dtypes`` as they are
    elsewhere, on Vulkan (not traced) and for any format not led by bf16."""
    if (engine in LLAMACPP_BF16_AT_FP32 and dtypes[:1] == ("bf16",)
            and "bf16" not in accelerator.peak_flops and "fp32" in accelerator.peak_flops):
        return ("fp32",)
    return dtypes


# The dtypes a step's activations are kept in between layers. A weight format that runs its
# matmuls at one of these takes the step's; one that quantizes its input narrower runs at that
# dtype whatever the step's: vLLM's ModelOptMixedPrecisionConfig gives a checkpoint's FP8
# layers ModelOptFp8LinearMethod (the input quantized to fp8 with its static scale, an fp8
# GEMM, on compute capability 8.9 and up) and its W4A16_NVFP4 layers the Marlin FP4 kernel
# (16-bit activations, no fp4 GEMM, on Blackwell too): vllm/model_executor/layers/
# quantization/modelopt.py, ModelOptNvFp4W4A16LinearMethod "pins" MarlinNvFp4LinearKernel.
ACTIVATION_DTYPES = ("bf16", "fp16", "fp32", "tf32")
LLAMACPP_SPLIT_MODES = ("layer", "row", "tensor")  # llama.cpp -sm (row: refused, not modelled)


def cache_matmul_dtypes(kv_id: str) -> tuple[str, ...]:
    """The dtypes, in preference, that attention's QKᵀ and PV run at over a cache of ``kv_id``
    (the first the card has wins): an fp8 cache on fp8 units runs fp8 attention (vLLM
    quantizes the query for FlashAttention 3's fp8 path); any other cache is dequantized to
    the 16-bit rate, an fp16 one (--dtype float16) to fp16, an f32 one (measure's float32
    rows) kept at fp32."""
    if kv_id.startswith("fp8"):
        return ("fp8", "bf16", "fp16")
    if kv_id in ("fp16", "f16"):
        return ("fp16", "bf16")
    if kv_id == "fp32":
        return ("fp32", "bf16", "fp16")
    return ("bf16", "fp16")


# Deployment.build's arguments that take one of ridgeline's objects, and the call that makes it
_MADE_BY = {"model": (ModelSpec, "a ModelSpec from resolve_model"),
            "accelerator": (Accelerator, "an Accelerator from resolve_accelerator"),
            "engine_version": (str, "a release such as '0.11' or 'b9400', or None")}


def require_deployment(dep: object) -> Deployment:
    """``dep`` where it is a Deployment, else the one-line refusal of its kind
    (decode_floor("llama-3.1-8b", 1, 1) says "dep must be a ridgeline.Deployment from
    Deployment.build, got str 'llama-3.1-8b'", not an AttributeError from deep inside):
    the library's calls that take one ask it first."""
    if not isinstance(dep, Deployment):
        raise wrong_kind(dep, "dep", "a ridgeline.Deployment from Deployment.build")
    return dep


def _check_types(**given: object) -> None:
    """InputError naming an argument of Deployment.build given the wrong kind of value, before
    an attribute error deep inside: 'model must be a ModelSpec from resolve_model, got str'
    (the name 'llama-3.1-8b' where the model belongs); a name (engine, weights, kv,
    quantization) must be a str or None."""
    for name, value in given.items():
        kind, words = _MADE_BY.get(name, (str, "a name (a str) or None"))
        if not isinstance(value, kind) and not (kind is str and value is None):
            raise wrong_kind(value, name, words)


@dataclass(frozen=True)
class Deployment:
    """A model served on ``tensor_parallel_size`` × ``pipeline_parallel_size`` accelerators
    in given weight and KV formats by one engine (``build`` resolves the defaults and
    refuses what the engine would): every floor, pool and fit is a question about one.
    Llama-3.1-8B in bf16 on one H100 under vLLM: 16.06 GB of weights (``weight_bytes``),
    a ridge of 295 FLOP/byte reached by its dense weights at batch 296
    (``dense_ridge_flop_per_byte``, ``dense_ridge_batch``, rounded up)."""

    model: ModelSpec
    accelerator: Accelerator
    weights: WeightPlan
    kv: KVDtype
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1  # layers split over stages (llama.cpp's multi-GPU split)
    expert_parallel: bool = False  # experts spread over the TP ranks instead of sliced
    engine: str = "vllm"
    # False: attention writes its scores to memory and reads them back (llama.cpp without -fa)
    flash_attention: bool = True
    offload: HostOffload | None = None  # llama.cpp: weights kept in host memory (offload.py)
    # data-parallel attention (data_parallel.py): ranks of tensor_parallel_size GPUs, each
    # with its own requests, its own KV pool and its own copy of the attention weights; a
    # MoE's routed experts spread over every rank's GPUs
    data_parallel_size: int = 1
    cpu_offload: CpuOffload | None = None  # vLLM's --cpu-offload-gb (cpu_offload.py)
    # vLLM's -dcp (decode_context.py): each sequence's cache dealt over this many of the
    # tensor-parallel ranks, token by token, so TP's copies of it shrink by as much
    decode_context_parallel_size: int = 1
    rope: RopeLaunch | None = None  # llama.cpp's RoPE flags, which may lift n_ctx_train
    # the engine settings a hybrid's recurrent-state dtype follows, as its pool reads them
    # (cost.served_state_model): vLLM's --engine-version (Nemotron-H's SSM state fp16 before
    # v0.20, fp32 from it), SGLang's --mamba-ssm-dtype; None: the engine's defaults
    state_engine_version: str | None = None
    mamba_ssm_dtype: str | None = None
    # --enable-lora (vLLM's or SGLang's): the adapters whose matmuls each step runs
    # (lora_step.py); None: off
    lora: AnyLoRA | None = None
    # the decode batches the engine replays from captured CUDA graphs, as its settings give
    # them (graph_batches.with_cuda_graphs); None: the engine's defaults (default_capture)
    cuda_graphs: GraphCapture | None = None
    # why llama.cpp's -fa auto (its default) resolved to off for this model on this backend
    # (engine_platforms.flash_attention_unsupported's words); "" where it resolved on, or
    # where -fa was given
    flash_attention_auto_off: str = ""
    # the redundant experts --enable-eplb places (vLLM's or SGLang's) under expert parallelism,
    # 0 without: the busiest rank's routed tokens at expert_ranks.EP_IMBALANCE_EPLB × the mean, not
    # EP_IMBALANCE, and its reads of (E + N) ÷ R physical experts (cost._token_ops)
    eplb_redundant_experts: int = 0
    # SGLang's --ep-num-redundant-experts without --enable-eplb under expert parallelism: its
    # trivial layout keeps the replicas on the last ranks, where no token reaches them, and
    # leaves the first ranks (E + N) ÷ R experts that take tokens (parallel
    # .trivial_layout_routed_experts; priced in cost._token_ops); 0 otherwise
    unrouted_redundant_experts: int = 0
    # --weights FMT (or -q modelopt) on a 16-bit checkpoint: a checkpoint stored in FMT,
    # loaded as stored, so no 16-bit load peak (load_peak.online_method); False: a 16-bit
    # one served in FMT is quantized on load (-q fp8, the fp8 a plan launches with -q fp8)
    weights_stored: bool = False
    # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (--vllm-allow-long-max-model-len 1): vLLM takes a
    # max_model_len past the model's positions with a warning (capacity.past_trained_context)
    allow_long_context: bool = False

    def __post_init__(self) -> None:
        for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                     "decode_context_parallel_size"):
            # numpy's int64 (an np.arange sweep) and 2.0 are 2, stored as an int
            object.__setattr__(self, name, require_count(getattr(self, name), name))
        # the engine by its id, as the CLI's --engine reads it ('SGLang': sglang, 'tensorrt-llm':
        # trtllm); an unknown one is refused, not costed as llama.cpp's cell pool
        if self.engine not in ENGINES:
            object.__setattr__(self, "engine", engine_id(self.engine))

    @classmethod
    def build(
        cls, model: ModelSpec, accelerator: Accelerator, weights: str | None = None,
        kv: str | None = None, num_gpus: int = 1, pipeline_parallel_size: int = 1,
        engine: str | None = None, expert_parallel: bool = False,
        flash_attention: bool | None = True,
        offload: HostOffload | None = None, split_mode: str | None = None,
        data_parallel_size: int = 1, decode_context_parallel_size: int = 1,
        quantization: str | None = None, engine_version: str | None = None,
    ) -> Deployment:
        """Weights default to the checkpoint's stored formats (under a named llama.cpp, to the
        GGUF it runs the checkpoint as: served_model.llamacpp_weights); KV to the model's dtype,
        or under vLLM, SGLang and TensorRT-LLM to the cache the checkpoint's
        quantization_config asks for, as that engine's auto reads it
        (ModelSpec.engine_kv_cache_dtypes).

        ``weights`` is --weights: a checkpoint stored in that format (``weights_stored``, no
        16-bit load peak); ``quantization`` is -q/--quantization METHOD, a 16-bit checkpoint
        quantized on load (-q fp8), or with ``weights`` a checkpoint the method reads
        (engine_quantization.method_weights, which refuses what the engine refuses).

        ``num_gpus`` accelerators in all: ``pipeline_parallel_size`` stages of num_gpus ÷ PP
        tensor-parallel GPUs (the CLI's --num-gpus is one stage's).
        ``engine`` None: no engine named (the article's arithmetic), costed as vLLM and any
        cache format taken, except on a card no vLLM release runs, which is costed under its
        llama.cpp build, as the CLI's default engine (engine_platforms.vllm_free_engine: an
        M2 Max's llama.cpp-metal). A named engine is read as --engine reads it
        (engines.engine_id: 'vLLM' is vllm, 'tensorrt-llm' trtllm; 'llama.cpp' the card's
        build: llama.cpp-metal on a Mac); an unknown one ('vlm') is refused naming the
        nearest; it must have the KV cache format asked for, and the layout must pass the
        gates the CLI asks of it at ``engine_version`` (None: the newest modelled):
        quantization_gates.deployment_problem (vLLM 0.34 on a V100, its fp8 cache on a T4).
        ``offload``: llama.cpp's split of the weights between the GPUs and host memory.
        ``split_mode``: llama.cpp's -sm. Its default, ``layer``, makes each GPU a stage of whole
        layers run one after the other; ``tensor`` splits each layer (tensor parallel);
        ``row`` (deprecated in llama.cpp, its KV cache on the main GPU) is refused.
        ``data_parallel_size``: ranks of ``num_gpus`` GPUs each, attention data-parallel
        (vLLM's --data-parallel-size; data_parallel.py checks what each engine accepts).
        ``decode_context_parallel_size``: vLLM's -dcp, refused where no release runs it
        (decode_context.py; the release's own limits are checked with its version).
        ``flash_attention``: llama.cpp's -fa; None is its default, auto, on where the
        backend has a kernel for the model's heads (engine_platforms.auto_flash_attention;
        -sm tensor turns auto on, llama_init_from_model), else off. On (or -sm tensor's auto)
        where it has none is refused: the op would run on the CPU, which is not priced.
        Where auto resolves off, ``flash_attention_auto_off`` keeps why (fit says it).
        """
        dep = cls.laid_out(model, accelerator, weights, kv, num_gpus, pipeline_parallel_size,
                           engine, expert_parallel, flash_attention, offload, split_mode,
                           data_parallel_size, decode_context_parallel_size, quantization,
                           engine_version)
        if engine is not None or dep.engine != "vllm":  # a named engine's own gates
            from ridgeline.quantization_gates import deployment_problem

            problem = deployment_problem(dep, engine_version)
            if problem:
                raise InputError(problem)
        return dep

    @classmethod
    def laid_out(
        cls, model: ModelSpec, accelerator: Accelerator, weights: str | None = None,
        kv: str | None = None, num_gpus: int = 1, pipeline_parallel_size: int = 1,
        engine: str | None = None, expert_parallel: bool = False,
        flash_attention: bool | None = True,
        offload: HostOffload | None = None, split_mode: str | None = None,
        data_parallel_size: int = 1, decode_context_parallel_size: int = 1,
        quantization: str | None = None, engine_version: str | None = None,
    ) -> Deployment:
        """``build``'s deployment before quantization_gates.deployment_problem is asked: for a
        caller that asks it itself, at its own release and in its own words (the CLI's
        build_deployment, with a floor's way out to a release; the planner's candidates)."""
        _check_types(model=model, accelerator=accelerator, weights=weights, kv=kv,
                     engine=engine, quantization=quantization, engine_version=engine_version)
        # any whole number (numpy's int64, 2.0) is that many, as decode_floor's batch is
        num_gpus = require_count(num_gpus, "number of GPUs")
        pipeline_parallel_size = require_count(pipeline_parallel_size, "pipeline_parallel_size")
        data_parallel_size = require_count(data_parallel_size, "data_parallel_size")
        decode_context_parallel_size = require_count(decode_context_parallel_size,
                                                     "decode_context_parallel_size")
        if engine is None:  # a card no vLLM runs: its llama.cpp build, as the CLI's default
            engine = vllm_free_engine(accelerator)
        else:  # 'llama.cpp': the card's build (Metal on a Mac, ROCm on AMD), as --engine's
            engine = llamacpp_build(engine, accelerator.vendor or "")
        named = engine is not None
        engine = engine_id(engine) if engine is not None else "vllm"  # 'vLLM': vllm
        if named and engine_version is not None:
            from ridgeline.engine_versions import check_version_kind

            check_version_kind(engine, engine_version)  # before any rule reads it
        # --weights FMT: a checkpoint stored in FMT; -q METHOD alone: quantized on load
        stored = loaded_as_stored(quantization, weights) if weights or quantization else False
        if quantization is not None:
            weights = method_weights(quantization, weights, model, accelerator,
                                     engine if named else None, engine_version)
        if weights is not None and names_stored_checkpoint(
                weights, model, engine if named else None) and (
                quantization is None or engine_method(quantization).serves_as_stored(model)):
            weights = "auto"  # fp8 on an FP8 checkpoint: the engine loads it as it is stored
        if named and weights is None and engine.startswith("llama.cpp"):
            weights = llamacpp_weights(model)  # gpt-oss: its GGUF, not the safetensors
        no_kernel = flash_attention_unsupported(model, engine) if named else ""
        auto_off = ""
        if flash_attention is None:  # -fa auto
            flash_attention = not no_kernel or split_mode == "tensor"
            auto_off = "" if flash_attention else no_kernel
        if flash_attention and no_kernel:
            words = ("-sm tensor turns -fa auto on, and flash attention" if split_mode == "tensor"
                     else "-fa on")
            raise InputError(f"{no_kernel}; {words} would put attention on the CPU, which "
                             "ridgeline does not price: give --flash-attn auto or off"
                             + (" with -sm layer" if split_mode == "tensor" else ""))
        if split_mode is not None and split_mode not in LLAMACPP_SPLIT_MODES:
            raise InputError(f"split mode is one of {', '.join(LLAMACPP_SPLIT_MODES)}, got "
                             f"{split_mode!r}")
        if split_mode is not None and not engine.startswith("llama.cpp"):
            raise InputError(f"--split-mode is llama.cpp's -sm; {engine} splits by tensor "
                             "parallelism")
        if split_mode is not None and num_gpus == 1:
            raise InputError("--split-mode splits a model over several GPUs: give --num-gpus")
        if split_mode == "row":
            raise InputError("-sm row keeps the KV cache and the intermediate results on the "
                             "main GPU (-mg) and splits only the matmuls; llama.cpp's "
                             "docs/multi-gpu.md calls it deprecated and ridgeline does not "
                             "model it: use -sm layer (the default) or -sm tensor")
        if split_mode == "tensor":
            problem = tensor_split_problem(model, flash_attention)
            if problem:
                raise InputError(problem)
        if (engine.startswith("llama.cpp") and (split_mode or "layer") == "layer"
                and pipeline_parallel_size == 1):
            pipeline_parallel_size = max(1, num_gpus)  # llama.cpp's default: whole layers
            if num_gpus > model.num_layers:
                raise InputError(f"{num_gpus} GPUs split {model.name}'s {model.num_layers} "
                                 "layers by layer (-sm layer): more GPUs than layers leaves "
                                 "some with none")
        # a card without bf16 (T4, V100, Turing) runs a bf16 checkpoint in fp16: vLLM's dtype
        # "auto" falls back to float16 below compute capability 8.0 (same bytes)
        no_bf16 = accelerator.vendor in ("nvidia", "amd") and "bf16" not in \
            accelerator.peak_flops and "fp16" in accelerator.peak_flops
        served = served_dtype(model)
        # a float --weights is the engine's --dtype, which its KV cache follows ("auto"); vLLM's,
        # SGLang's and TensorRT-LLM's auto serve the cache a checkpoint's quantization_config
        # asks for, each as it reads it (checkpoint_kv.py: ModelOpt's kv_cache_quant_algo or
        # kv_cache_scheme under all three, compressed-tensors' kv_cache_scheme under vLLM and
        # TensorRT-LLM, not SGLang); llama.cpp's GGUF carries none
        as_stored = weights is None or is_stored_format(weights)
        checkpoint_kv = dict(model.engine_kv_cache_dtypes).get(engine, "") if as_stored else ""
        # SGLang's DeepSeek NSA set-up reads auto, and refuses a cache it does not keep
        nsa_kv = None
        if named and engine == "sglang":
            from ridgeline.sglang_nsa import nsa_cache_name

            nsa_kv = nsa_cache_name(kv, model, accelerator)
        kv_name = nsa_kv or kv if kv not in (None, "auto") else nsa_kv or checkpoint_kv or (
            "fp16" if engine.startswith("llama.cpp") or (no_bf16 and served == "bf16")
            else weights if weights in ("fp16", "bf16", "fp32") else served)  # llama.cpp: f16
        assert kv_name is not None
        if pipeline_parallel_size > model.num_layers:
            raise InputError(f"{pipeline_parallel_size} pipeline stages split {model.name}'s "
                             f"{model.num_layers} layers: more stages than layers leaves some "
                             "with none")
        if num_gpus % pipeline_parallel_size:
            raise InputError(f"{num_gpus} GPUs do not split into {pipeline_parallel_size} "
                             "pipeline stages")
        platform = engine_platform_problem(engine, accelerator) if named else ""
        if platform:
            raise InputError(platform)
        tp = num_gpus // pipeline_parallel_size
        problem = tensor_parallel_problem(model, tp)
        if problem and (not engine.startswith("llama.cpp") or split_mode == "tensor"):
            raise InputError(problem)  # llama.cpp's default splits by layer
        devices = engine_devices(engine, accelerator)
        if named and devices > 1:  # the engine runs each of the card's devices as a rank
            problem = tensor_parallel_problem(model, tp * devices)
            if problem:
                raise InputError(f"{tp} x {accelerator.id} runs at --tensor-parallel-size "
                                 f"{tp * devices} under {engine} (ROCm lists its {devices} "
                                 f"GCDs as devices): {problem}")
        if accelerator.vendor == "apple" and num_gpus > 1:
            raise InputError(f"{accelerator.id} is one Apple-silicon GPU: llama.cpp's Metal "
                             "backend runs on one device (several Macs over RPC are not "
                             "modelled)")
        plan = weight_plan(model, weights)
        llamacpp = engine.startswith("llama.cpp")
        if weights is None or is_stored_format(weights):  # the engine's dtype "auto"
            # llama.cpp runs the GGUF convert_hf_to_gguf.py wrote at its --outtype auto, which
            # knows no card: a float32 checkpoint's F16 (llamacpp_gguf_dtype), a bf16 one's
            # BF16 on a T4 too (its matmuls: llamacpp_bf16_dtypes)
            served_as = ({"fp32": llamacpp_gguf_dtype(model)} if llamacpp
                         else {"fp32": "fp16", "bf16": "fp16"} if no_bf16 else {"fp32": "bf16"})
            plan = replace(plan, formats=tuple((c, served_as.get(f, f)) for c, f in plan.formats),
                           label=served_as.get(plan.label, plan.label),
                           base=served_as.get(plan.base, plan.base))
        if engine.startswith("llama.cpp") and plan.label in ("fp16", "bf16"):
            # a 16-bit GGUF (convert_hf_to_gguf.py --outtype f16 or bf16) keeps its token
            # embeddings and output matrix in that type too, not at the checkpoint's
            plan = replace(plan, formats=tuple((c, plan.label) for c, _ in plan.formats),
                           base=plan.label)
        if llamacpp:  # the router, norms and biases F32 in any GGUF
            plan = llamacpp_tensor_types(plan)
        if named and plan.label == "as stored":  # an algorithm the engine has no method for
            from ridgeline.modelopt_algos import checkpoint_refusal

            refused = checkpoint_refusal(model, engine)
            if refused:
                raise InputError(refused)
        # no engine named (kv, roofline, moe): the arithmetic runs no kernel, so no kernel's
        # platform refuses the format (NVFP4 on an MI300X sizes as its bytes say)
        fmt_problem = weights_platform_problem(
            plan, accelerator, engine, weights is not None and not is_stored_format(weights)) \
            if named else ""
        if fmt_problem:
            raise InputError(fmt_problem)
        cache = kv_dtype(kv_name)
        if named and engine == "vllm":  # DeepSeek-V3.2's fp8 cache in fp8_ds_mla's records
            cache = vllm_stored_cache(cache, model)
        asked_cache = cache  # the engine's checks read the cache as its flag names it
        if nsa_kv is not None:  # SGLang keeps an NSA model's fp8 in the same 656-byte records
            from ridgeline.sglang_nsa import nsa_stored_cache

            cache = nsa_stored_cache(cache, model)
        # only a named engine keeps its own cache formats (TensorRT-LLM's is always named);
        # a packed record a token fits one latent width, engine or none
        kv_problem = packed_cache_problem(cache, model) or (
            kv_platform_problem(asked_cache, accelerator, engine,
                                model.name if engine == "trtllm"
                                and asked_cache.id == checkpoint_kv else "")
            or quantized_v_problem(asked_cache, engine, flash_attention, no_kernel)
            or flash_attention_kv_problem(asked_cache, engine)
            or (tensor_split_kv_problem(cache) if split_mode == "tensor" else "")
            if named else "")
        if kv_problem:
            raise InputError(kv_problem)
        if engine.startswith("llama.cpp"):
            model = llamacpp_attention(model)
        elif named:  # kv, roofline and moe keep the GGUF's own (llama.cpp's) cache
            model = latent_attention(model)
        if named and engine == "vllm" and engine_version is not None:
            from ridgeline.vllm_mla_cache import vllm_cache_model  # it reads engine_versions

            model = vllm_cache_model(model, engine_version, plan)  # MLA per head before 0.7.1
        dep = cls(model, accelerator, plan, cache,
                  num_gpus // pipeline_parallel_size, pipeline_parallel_size, expert_parallel,
                  engine, flash_attention, flash_attention_auto_off=auto_off,
                  weights_stored=stored)
        if data_parallel_size != 1:
            from ridgeline.data_parallel import data_parallel_problem

            problem = data_parallel_problem(dep, data_parallel_size, named)
            if problem:
                raise InputError(problem)
            dep = replace(dep, data_parallel_size=data_parallel_size)
        if decode_context_parallel_size != 1:
            from ridgeline.decode_context import dcp_layout_problem

            problem = dcp_layout_problem(model, engine if named else None,
                                         dep.engine_tensor_parallel_size,
                                         decode_context_parallel_size)
            if problem:
                raise InputError(problem)
            dep = replace(dep, decode_context_parallel_size=decode_context_parallel_size)
        return dep if offload is None else dep.offloaded(offload)

    def offloaded(self, offload: HostOffload, check_host: bool = True) -> Deployment:
        """This deployment with llama.cpp keeping some weights in host memory (refused when
        they overflow the host's RAM, where given, unless ``check_host`` is False: a search
        trying placements checks the one it picks)."""
        if not self.engine.startswith("llama.cpp"):
            raise InputError(f"weights in host memory (-ngl, --n-cpu-moe) are llama.cpp's; "
                             f"{self.engine} keeps every weight on the GPU")
        if self.tensor_parallel_size > 1:
            raise InputError("partial offload is modelled with llama.cpp's layer split "
                             "(-sm layer), not with -sm tensor")
        offload.check(self.model, self.accelerator)
        n = self.model.num_layers
        if self.num_gpus > 1 and 0 < offload.cpu_expert_layers < n and not offload.chosen_by_fit:
            raise InputError(f"over {self.num_gpus} GPUs, --n-cpu-moe {offload.cpu_expert_layers} "
                             "leaves the first GPUs light and the last heavy (llama.cpp splits "
                             "layers by count), and ridgeline sizes an even split: give -ngl "
                             "auto (its --fit balances the split) or --cpu-moe")
        dep = replace(self, offload=offload)
        if check_host:  # the weights here; commands add the cache at their -c
            check_host_memory(dep)
        return dep

    def __hash__(self) -> int:
        """Remembered on the instance: a fit looks one deployment up in the step-cost caches
        hundreds of thousands of times (cost.step_time_s), and its fields never change. A
        copy sent to another process hashes afresh there (``__getstate__``)."""
        remembered: int | None = self.__dict__.get("_hash")
        if remembered is None:
            remembered = self._fields_hash()
            object.__setattr__(self, "_hash", remembered)
        return remembered

    def __getstate__(self) -> dict[str, object]:
        # without the remembered hash: string hashes differ from one process to another
        return {name: value for name, value in self.__dict__.items() if name != "_hash"}

    def __repr__(self) -> str:
        """The headline, not every field (the ModelSpec's layers run to thousands of
        characters): Deployment(model='llama-3.1-8b', accelerator='h100-sxm', engine='vllm',
        weights='as stored', kv='bf16', tensor_parallel_size=1, …)."""
        parts = [f"model={self.model.name!r}", f"accelerator={self.accelerator.id!r}",
                 f"engine={self.engine!r}", f"weights={self.weights.label!r}",
                 f"kv={self.kv.id!r}", f"tensor_parallel_size={self.tensor_parallel_size}",
                 f"pipeline_parallel_size={self.pipeline_parallel_size}",
                 f"data_parallel_size={self.data_parallel_size}",
                 f"expert_parallel={self.expert_parallel}"]
        return f"Deployment({', '.join(parts)})"

    def _fields_hash(self) -> int:
        return hash((self.model, self.accelerator.id, self.weights.label, self.kv.id,
                     self.tensor_parallel_size, self.pipeline_parallel_size,
                     self.expert_parallel, self.engine, self.flash_attention, self.offload,
                     self.data_parallel_size, self.cpu_offload,
                     self.decode_context_parallel_size, self.state_engine_version,
                     self.mamba_ssm_dtype, self.lora, self.cuda_graphs,
                     self.eplb_redundant_experts, self.unrouted_redundant_experts))

    def with_state_settings(self, engine_version: str | None,
                            mamba_ssm_dtype: str | None) -> Deployment:
        """This deployment with the engine settings its recurrent states' dtype follows
        (``state_engine_version``, ``mamba_ssm_dtype``), so the step and the fit line size the
        states as the pool does under the same settings (cost.served_state_model); each kept
        only where the engine reads it (vLLM its version, SGLang its flag), so no other
        deployment changes identity or step-cost cache entry. Under a vLLM release before
        its MLA cache the model's MLA is cached per head, as that release keeps it
        (vllm_mla_cache: DeepSeek-V3 at 0.7.0, 128 heads × (192 K + 192 V) a token and layer)."""
        model = self.model
        if self.engine == "vllm":
            from ridgeline.vllm_mla_cache import vllm_cache_model  # it reads engine_versions

            model = vllm_cache_model(model, engine_version, self.weights)
        return replace(self, model=model,
                       state_engine_version=engine_version if self.engine == "vllm" else None,
                       mamba_ssm_dtype=mamba_ssm_dtype if self.engine == "sglang" else None)

    def with_lora(self, lora: AnyLoRA | None) -> Deployment:
        """This deployment with vLLM's or SGLang's LoRA adapters, whose matmuls every step runs
        (lora_step.py) as the pool holds their slots (EngineSettings.lora, from the same
        flags); None leaves it as it is, so a deployment without LoRA keeps its identity and
        step-cost cache entries."""
        return self if lora is None else replace(self, lora=lora)

    def with_eplb(self, enabled: bool, redundant_experts: int) -> Deployment:
        """This deployment with --enable-eplb and its redundant experts: balanced (the busiest
        expert-parallel rank priced at expert_ranks.EP_IMBALANCE_EPLB, reading its share of the
        replicas: expert_ranks.busiest_rank_physical_experts) where EPLB is on with replicas to
        place and the experts are spread over more than one rank; SGLang's replicas without
        --enable-eplb, which take no token and leave the first ranks more experts that do,
        as unrouted_redundant_experts (expert_ranks.trivial_layout_routed_experts; only SGLang
        runs them, vLLM refuses them); as it is otherwise (EPLB without replicas only
        reorders the experts, for which no source gives a figure)."""
        spread = redundant_experts > 0 and self.expert_parallel and self.engine_expert_ranks > 1
        if spread and enabled:
            return replace(self, eplb_redundant_experts=redundant_experts)
        if spread and self.engine == "sglang":
            return replace(self, unrouted_redundant_experts=redundant_experts)
        return self

    @property
    def eplb_balanced(self) -> bool:
        """Whether EPLB places redundant experts over this deployment's expert-parallel ranks
        (with_eplb)."""
        return self.eplb_redundant_experts > 0

    @property
    def num_gpus(self) -> int:
        """Every GPU of the deployment: TP × PP, × the data-parallel ranks."""
        return self.rank_gpus * self.data_parallel_size

    @property
    def engine_tensor_parallel_size(self) -> int:
        """The tensor-parallel ranks the engine launches, its --tensor-parallel-size, which
        vLLM's -dcp divides: TP × the devices it runs each card as (engine_devices), so 4 x
        MI250 under vLLM run 8; TP on any other card."""
        return self.tensor_parallel_size * engine_devices(self.engine, self.accelerator)

    @property
    def devices_per_gpu(self) -> int:
        """The devices the engine runs each card as, each a tensor-parallel rank
        (engine_devices): an MI250 under vLLM, its 2 dies; 1 on any other card."""
        return engine_devices(self.engine, self.accelerator)

    @property
    def dies_note(self) -> str:
        """What a count of the engine's tensor-parallel ranks adds where each card is several
        (``devices_per_gpu``): ' (2 dies × 8 GPUs)' for 8 x MI250 under vLLM, TP16; ''."""
        devices, tp = self.devices_per_gpu, self.tensor_parallel_size
        return "" if devices == 1 else f" ({devices} dies × {tp} {plural(tp, 'GPU')})"

    def gpu_params(self, layer: Layer, category: str, count: int | None = None) -> float:
        """One layer's ``category`` weights one GPU holds: ``rank_params`` over the ranks the
        category is split across (``category_ranks``), × the card's devices where each is a
        rank of its own. DeepSeek-V3's router on an MI250 under vLLM: each die keeps it
        whole, so the card holds (and a step reads) two copies, where an H100 holds one."""
        ranks, devices = self.category_ranks(category), self.devices_per_gpu
        if devices == 1:
            return rank_params(self.model, layer, category, ranks, count)
        return devices * rank_params(self.model, layer, category, ranks * devices, count)

    @property
    def rank_gpus(self) -> int:
        """The GPUs one data-parallel rank spans, TP × PP (every GPU, without data
        parallelism): those a sequence's cache is spread over."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def expert_ranks(self) -> int:
        """The GPUs a stage's routed experts are spread over: its tensor-parallel GPUs, × the
        data-parallel ranks (vLLM's EP or MoE-TP group of DP × TP; SGLang's --tp-size)."""
        return self.tensor_parallel_size * self.data_parallel_size

    @property
    def engine_expert_ranks(self) -> int:
        """The ranks the engine spreads a stage's routed experts over: ``expert_ranks`` × the
        devices it runs each card as (``devices_per_gpu``), so 4 x MI250 under vLLM's
        --enable-expert-parallel hold them over 8 dies; ``expert_ranks`` on any other card."""
        return self.expert_ranks * self.devices_per_gpu

    def gathered(self, category: str) -> bool:
        """Whether a weight category runs on every data-parallel rank's tokens, gathered,
        split over all the ranks' GPUs, rather than on one rank's own (data_parallel.py)."""
        if self.data_parallel_size == 1:
            return False
        from ridgeline.data_parallel import gathered_categories

        return category in gathered_categories(self.engine)

    def category_ranks(self, category: str) -> int:
        """The GPUs a weight category is split over: a stage's tensor-parallel GPUs, or, for
        one gathered over the data-parallel ranks, all of them (``expert_ranks``)."""
        return self.expert_ranks if self.gathered(category) else self.tensor_parallel_size

    def rank_sequences(self, sequences: int) -> int:
        """The sequences the busiest data-parallel rank runs of a batch dealt over the ranks:
        ⌈batch ÷ ranks⌉ (the batch itself without data parallelism)."""
        return -(-sequences // self.data_parallel_size)

    @property
    def gpus_label(self) -> str:
        """'8 x h100-sxm'; a serving engine's pipeline '16 x h100-sxm (TP8 × PP2)' (llama.cpp's
        layer split is its own default over the GPUs); data-parallel attention '8 x h200-sxm
        (attention DP8 × TP1, experts EP8)'."""
        label = f"{self.num_gpus} x {self.accelerator.id}"
        parts = self.layout_parts
        return f"{label} ({', '.join(parts)})" if parts else label

    @property
    def layout_parts(self) -> tuple[str, ...]:
        """What ``gpus_label`` says in its one parenthesis: the data-parallel layout, the dies
        an engine runs as its ranks ('8 dies: TP8' for 4 x MI250 under vLLM) or the pipeline's,
        then -dcp's dealing of the KV ('TP8 × PP2', 'KV dealt over DCP8')."""
        parts: list[str] = []
        if self.data_parallel_size > 1:
            from ridgeline.data_parallel import layout_label

            parts.append(layout_label(self))
        elif self.devices_per_gpu > 1:  # vLLM's ranks are the dies: its --tensor-parallel-size
            pp = self.pipeline_parallel_size
            parts.append(f"{self.num_gpus * self.devices_per_gpu} dies: "
                         f"TP{self.engine_tensor_parallel_size}" + (f" × PP{pp}" if pp > 1 else ""))
        elif self.pipeline_parallel_size > 1 and not self.engine.startswith("llama.cpp"):
            parts.append(f"TP{self.tensor_parallel_size} × PP{self.pipeline_parallel_size}")
        if self.decode_context_parallel_size > 1:
            parts.append(f"KV dealt over DCP{self.decode_context_parallel_size}")
        return tuple(parts)

    @cached_property
    def dequantizes(self) -> bool:
        """Weights narrower than the matmuls they feed (W4A16, GGUF, fp8 without fp8 units):
        every matmul first expands them, which costs compute."""
        linear = [c for c in ("mlp", "experts", "attention") if self.bytes_by_category.get(c)]
        fmt = self.weights.format_of(linear[0]) if linear else None
        return bool(fmt and fmt.bits_per_weight < 16
                    and self.compute_dtype in ("bf16", "fp16", "fp32"))

    @cached_property
    def compute_dtype(self) -> str:
        """The matmul dtype: the weight format's best one this accelerator runs natively.

        llama.cpp multiplies quantized weights on int8 tensor cores (MMQ, PR #7676) or
        dequantized to fp16, never fp8/fp4 units (native MXFP4 came experimentally in PR
        #17906, Dec 2025), so its matmuls are counted at the 16-bit rate."""
        return self._native_dtype(self.format_dtypes(compute_format_for(self.weights)))

    def format_dtypes(self, fmt: WeightFormat) -> tuple[str, ...]:
        """The dtypes, best first, this engine multiplies weights of ``fmt`` at: the format's
        own, except the experts of a checkpoint whose quant_method is "mxfp4" (gpt-oss), which
        each serving engine's default MoE kernel multiplies at its activations' dtype
        (mxfp4_matmul): gpt-oss on a B200 under vLLM, bf16's 2,250 TFLOP/s, not fp4's 9,000;
        under SGLang, fp8's 4,500. Other MXFP4 weights (compressed-tensors' and Quark's W4A4
        checkpoints, --weights mxfp4 on a 16-bit one), whose kernels are not traced, keep
        the format's fp4."""
        if fmt.id == "mxfp4" and self.model.quant_method == "mxfp4":
            from ridgeline.mxfp4_matmul import mxfp4_moe_matmul_dtypes

            return mxfp4_moe_matmul_dtypes(self.engine, self.accelerator) or fmt.compute_dtypes
        return fmt.compute_dtypes

    def _native_dtype(self, dtypes: tuple[str, ...]) -> str:
        if self.engine.startswith("llama.cpp"):
            dtypes = llamacpp_bf16_dtypes(llamacpp_matmul_dtypes(dtypes), self.engine,
                                          self.accelerator)
        return self.accelerator.first_supported(dtypes)

    def compute_dtype_of(self, category: str) -> str:
        """The dtype one weight category's matmuls run at, the one place that decides it: a
        format that quantizes its activations to a narrow dtype this card runs (W8A8 fp8 or
        int8, W4A4 fp4) runs at that, faster or slower than the step's; any other runs at
        the step's 16-bit dtype where its format can (the engine casts its activations to
        the model's --dtype), else at its own. gpt-oss on a B200 under SGLang: fp8 for the
        MXFP4 experts (MXFP8 activations: format_dtypes), bf16 for the bf16 attention;
        nvidia/Qwen3.6-35B-A3B-NVFP4 on an H200 or a B200: bf16 for the W4A16 experts (the
        step's), fp8 for the fp8 attention. llama.cpp has
        no --dtype to cast to: each tensor's ggml type picks its kernel, so gpt-oss's BF16
        attention beside its MXFP4 experts (--weights stored) runs cuBLAS's bf16 GEMM, 165.2
        TFLOP/s on an RTX 4090, not the fp16-accumulate 330.4 the experts' fp16 step has. Its
        router is priced at the step's: every GGUF keeps ffn_gate_inp F32 (its bytes are fp32's,
        served_model.llamacpp_tensor_types), which cuBLAS multiplies in TF32 (ggml-cuda
        common.cuh sets CUBLAS_TF32_TENSOR_OP_MATH), a rate not modelled, on 0.4 % of
        Qwen3-30B-A3B's active weights."""
        dtypes = self.format_dtypes(self.weights.format_of(category))
        own, step = self._native_dtype(dtypes), self.compute_dtype
        if self.engine.startswith("llama.cpp"):
            return step if category == ROUTER else own
        return step if step in dtypes and own in ACTIVATION_DTYPES else own

    @cached_property
    def dense_matmuls(self) -> tuple[tuple[str, float, str], ...]:
        """(category, weights, matmul dtype) of the matmuls every token runs: the weight-matrix
        categories of the weights every token reads (bytes_per_weight_split's, less the norms
        and biases, which multiply nothing), each at its own dtype (compute_dtype_of), as
        the step prices it. nvidia/Qwen3.6-35B-A3B-NVFP4 on an H200: attention and
        linear_attention at fp8, lm_head, shared_experts and router at bf16."""
        params = count_params(self.model).by_category
        head = head_category(self.model.tie_word_embeddings)
        matmuls = [c for c in (*LINEAR_CATEGORIES, ROUTER, head)
                   if c not in ROUTED and params.get(c) and self.bytes_by_category.get(c)]
        return tuple((c, float(params[c]), self.compute_dtype_of(c)) for c in matmuls)

    @cached_property
    def dense_peak_flops_per_s(self) -> float:
        """One GPU's peak for the matmuls every token runs: their dtypes' peaks as the step
        prices them (peak_at) blended by weight (roofline.blended_peak_flops_per_s); one
        dtype's own peak where they share it (a bf16 Llama: 989.4 TFLOP/s on an H100; a GGUF
        under llama.cpp on an RTX 4090: fp16-accumulate's 330.4). Qwen3.6-35B-A3B-NVFP4 on an
        H200: 1,479, between bf16's 989.4 and fp8's 1,978.9."""
        from ridgeline.roofline import blended_peak_flops_per_s

        if not self.dense_matmuls:
            return self.peak_at(self.dense_compute_dtype)
        return blended_peak_flops_per_s([(n, self.peak_at(dtype))
                                         for _, n, dtype in self.dense_matmuls])

    @property
    def dense_blended(self) -> bool:
        """Whether the matmuls every token runs are at more than one peak (a mixed-precision
        checkpoint's fp8 attention beside bf16 ones; an fp8 checkpoint's bf16 lm_head)."""
        return len({self.peak_at(dtype) for _, _, dtype in self.dense_matmuls}) > 1

    @property
    def dense_dtype_label(self) -> str:
        """The dtype the dense ridge is at: "bf16"; blended, its dtypes by their share of the
        weights, "fp8+bf16" (Qwen3.6-35B-A3B-NVFP4: 66 % of them at fp8)."""
        if not self.dense_blended:
            return self.accelerator.resolve_dtype(self.dense_compute_dtype)
        by: dict[str, float] = {}
        for _, n, dtype in self.dense_matmuls:
            key = self.accelerator.resolve_dtype(dtype)
            by[key] = by.get(key, 0.0) + n
        return "+".join(sorted(by, key=lambda d: -by[d]))

    @property
    def dense_ridge_flop_per_byte(self) -> float:
        """The ridge a step's dense weights are judged by: one stage's peak for their matmuls
        (dense_peak_flops_per_s) ÷ its bandwidth (gpt-oss on a B200 under SGLang: bf16's 281,
        not its experts' fp8 562; Qwen3.6-35B-A3B-NVFP4 on an H200: 1,479 ÷ 4.8 = 308, blended)."""
        from ridgeline.roofline import ridge_point

        return ridge_point(self.dense_peak_flops_per_s,
                           self.accelerator.memory_bandwidth_bytes_per_s)

    @property
    def dense_ridge_batch(self) -> float:
        """The batch at which the dense weights' reads reach that ridge: ridge × bytes per
        weight ÷ 2 (Llama-3.1-70B bf16 on an H200: 206 FLOP/byte is a batch of 206). Blended,
        it is where the matmuls' time, batch × Σ 2 × weights ÷ peak over their dtypes, equals
        the weights' read time, bytes ÷ bandwidth (the norms' bytes, which multiply nothing,
        aside): Qwen3.6-35B-A3B-NVFP4 on an H200, 134, between bf16's 90 and fp8's 180."""
        from ridgeline.roofline import batch_for_intensity

        return batch_for_intensity(self.dense_ridge_flop_per_byte, self.bytes_per_weight_split[0])

    @property
    def expert_ridge_batch(self) -> float:
        """The article's batch at which the routed experts reach the ridge at their dtype's
        peak as the step prices it (peak_at): roofline.expert_ridge_batch. A dense model:
        dense_ridge_batch."""
        from ridgeline.roofline import expert_ridge_batch

        moe = self.model.moe
        if moe is None:
            return self.dense_ridge_batch
        dtype = self.expert_compute_dtype
        return expert_ridge_batch(self.accelerator, dtype, self.bytes_per_weight_split[1],
                                  moe.routed_fraction, self.peak_at(dtype))

    @property
    def dense_compute_dtype(self) -> str:
        """The dtype of the matmuls every token runs: the largest linear category's other than
        the routed experts (gpt-oss: its bf16 attention; a dense model: the step's). Where
        they run at several (dense_matmuls), the ridge blends their peaks
        (dense_peak_flops_per_s); this names the step's dtype for them."""
        params = count_params(self.model).by_category
        dense = [c for c in LINEAR_CATEGORIES if c != EXPERTS and params.get(c)]
        if not dense:
            return self.compute_dtype
        category = max(dense, key=lambda c: params[c])
        # the step's dtype where that category's format runs at it, not a faster dtype its
        # activations are quantized to (nvidia/Qwen3.6-35B-A3B-NVFP4's fp8 attention: bf16)
        dtypes = self.format_dtypes(self.weights.format_of(category))
        return self.compute_dtype if self.compute_dtype in dtypes \
            else self.compute_dtype_of(category)

    @property
    def expert_compute_dtype(self) -> str:
        """The routed experts' matmul dtype (the step's for a dense model)."""
        return self.compute_dtype_of(EXPERTS) if self.model.moe else self.compute_dtype

    @property
    def attention_compute_dtype(self) -> str:
        """The dtype attention's score and value matmuls run at: the cache's, not the
        weights' (QKᵀ and PV multiply cached K and V), as cache_matmul_dtypes orders them."""
        if self.engine.startswith("llama.cpp"):
            return self._native_dtype(("fp16",))  # its attention kernels multiply in f16
        return self._native_dtype(cache_matmul_dtypes(self.kv.id))

    @property
    def indexer_compute_dtype(self) -> str:
        """The dtype a DeepSeek Sparse Attention indexer scores its keys at: fp8 where the card
        has it (vLLM quantizes the indexer's query to fp8, per_token_group_quant_fp8, and keeps
        its keys in fp8: DeepGEMM's fp8_mqa_logits multiplies the two), else the cache's."""
        return self._native_dtype(("fp8", *cache_matmul_dtypes(self.kv.id)))

    @property
    def attention_peak_flops_per_s(self) -> float:
        """One GPU's peak for attention's QKᵀ and PV as this engine's kernels run them: its
        dtype's (peak_at), except where that is fp16 with fp16 accumulate (llama.cpp's CUDA
        build on a GeForce card). llama.cpp asks its scores for fp32 (llama-graph.cpp's
        build_attn_mha: GGML_PREC_F32 on QKᵀ without flash attention, which the cuBLAS path
        runs at CUBLAS_COMPUTE_32F, and on the flash-attention node, whose MMA kernel keeps
        the scores in an f32 tile), while P·V runs at fp16 accumulate (cuBLAS's default
        precision; the MMA kernel's half2 accumulator, at most head sizes). So QKᵀ's FLOPs
        (its share of the head dims) run at the FP32-accumulate rate, the catalog's, and PV's
        at peak_at's: RTX 4090, 2 ÷ (1/165.2 + 1/330.4) = 220.3 TFLOP/s, not 330.4."""
        dtype = self.attention_compute_dtype
        fast, slow = self.peak_at(dtype), self.accelerator.peak(dtype)
        attention = self.model.attention
        if fast == slow or attention is None:
            return fast
        scores = attention.head_dim / (attention.head_dim + attention.v_head_dim)
        return 1.0 / (scores / slow + (1.0 - scores) / fast)

    @property
    def attention_slowdown(self) -> float:
        """Peak at the step's compute dtype ÷ attention's (attention_peak_flops_per_s;
        DeepSeek-V3 as stored on an H100: fp8 weights, a bf16 cache: 2; below 1 where the
        cache's rate is the faster)."""
        return self.peak_at(self.compute_dtype) / self.attention_peak_flops_per_s

    @property
    def matmuls_label(self) -> str:
        """The step's matmul dtype, and the weight categories whose matmuls run at another:
        "fp4 (attention, router, lm_head at bf16)", "bf16 (attention, linear_attention at
        fp8)"; attention's QKᵀ and PV where the cache's rate differs."""
        head = head_category(self.model.tie_word_embeddings)
        matmuls = {*LINEAR_CATEGORIES, ROUTER, head}
        other: dict[str, list[str]] = {}
        for category, _ in self.matmul_slowdowns:
            if category in matmuls:
                name = "lm_head" if category == head else category
                other.setdefault(self.compute_dtype_of(category), []).append(name)
        if self.attention_compute_dtype != self.compute_dtype and self.model.attention:
            other.setdefault(self.attention_compute_dtype, []).append("QKᵀ and PV")
        rest = "; ".join(f"{', '.join(names)} at {dtype}" for dtype, names in other.items())
        return self.compute_dtype + (f" ({rest})" if rest else "")

    @cached_property
    def matmul_slowdowns(self) -> tuple[tuple[str, float], ...]:
        """(category, factor) for the weight categories whose matmuls run at another rate
        than the step's compute dtype: peak at the step's dtype ÷ peak at theirs (gpt-oss's
        attention on a B200 under SGLang: fp8 ÷ bf16 = 2; Qwen3.6-35B-A3B-NVFP4's fp8 attention in its
        bf16 step on an H200: bf16 ÷ fp8 = 0.5, below 1 where theirs is the faster)."""
        step = self.compute_dtype
        out = []
        for category, n in self.bytes_by_category.items():
            dtype = self.compute_dtype_of(category) if n else step
            if dtype != step and self.peak_at(dtype) != self.peak_at(step):
                out.append((category, self.peak_at(step) / self.peak_at(dtype)))
        return tuple(out)

    def peak_at(self, dtype: str) -> float:
        """One GPU's dense peak at a matmul dtype, as this engine's kernels run it, the one
        peak the step's price and every ridge of this deployment divide: the catalog's,
        except that llama.cpp's CUDA build multiplies fp16 with fp16 accumulation, which a
        GeForce card runs at twice its FP32-accumulate rate (RTX 4090: 330.3 against 165.2
        TFLOPS). ggml-cuda.cu's cuBLAS path gives F16 GEMMs CUBLAS_COMPUTE_16F (quantized
        weights dequantized to F16 too), fp32 only on Volta, CDNA and RDNA4 or where a graph
        asks GGML_PREC_F32; BF16 GEMMs CUBLAS_COMPUTE_32F, so bf16 keeps the catalog's. MMQ's
        int8 kernels run at about this rate, not int8's: on validation's 4090 rows, Llama-2-7B
        Q4_0's pp512 through MMQ does 162 TFLOP/s, Llama-3-8B F16's through cuBLAS 151."""
        acc = self.accelerator
        fast = acc.fp16_accumulate_flops
        if fast and self.engine == "llama.cpp-cuda" and acc.resolve_dtype(dtype) == "fp16":
            return fast
        return acc.peak(dtype)

    @property
    def peak_note(self) -> str:
        """Where the step's peak differs from the catalog's figure, why; else ""."""
        return self.peak_note_at(self.compute_dtype)

    def peak_note_at(self, dtype: str) -> str:
        """Where peak_at(dtype) differs from the catalog's figure, why; else ""."""
        acc = self.accelerator
        if self.peak_at(dtype) == acc.peak(dtype):
            return ""
        return (f"fp16 with fp16 accumulate, as llama.cpp's cuBLAS path asks: "
                f"{self.peak_at(dtype) / 1e12:,.4g} TFLOP/s per GPU, where the catalog's "
                f"{acc.peak(dtype) / 1e12:,.4g} TFLOP/s accumulates in fp32")

    @property
    def peak_flops_per_s(self) -> float:
        """What one step can use: a step passes the pipeline stages one after another, so
        it has one stage's tensor-parallel GPUs at a time (llama.cpp's layer split too)."""
        return self.peak_at(self.compute_dtype) * self.tensor_parallel_size

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """What one step can read with: one pipeline stage's GPUs at a time."""
        return self.accelerator.memory_bandwidth_bytes_per_s * self.tensor_parallel_size

    @property
    def memory_bytes(self) -> float:
        """The memory the GPUs expose: an L40S keeps a sixteenth for ECC by default; Apple
        silicon's GPU, Metal's working set of the unified memory."""
        return self.accelerator.visible_memory_bytes * self.num_gpus

    @cached_property
    def weight_bytes(self) -> float:
        """Bytes the weights occupy over all GPUs."""
        return weight_bytes(self.model, self.weights)

    @cached_property
    def bytes_by_category(self) -> dict[str, float]:
        return weight_bytes_by_category(self.model, self.weights)

    @property
    def expert_bytes(self) -> float:
        """The routed experts' weights, with their biases (gpt-oss)."""
        return sum(self.bytes_by_category[c] for c in ROUTED)

    @property
    def non_expert_bytes_read(self) -> float:
        """Weights every step reads in full: all but routed experts and the embedding table.

        The input embedding is a lookup of a few rows; a tied one is read whole as lm_head.
        """
        skip = {*ROUTED} | self._looked_up
        return sum(v for c, v in self.bytes_by_category.items() if c not in skip)

    @cached_property
    def matmul_params_per_token(self) -> float:
        """Weights one token multiplies against (2 FLOP each): active, minus the embedding lookup."""
        params = count_params(self.model)
        if self.model.tie_word_embeddings:
            return float(params.active)
        return float(params.active - params.embedding)

    @cached_property
    def tp_copies_bytes(self) -> float:
        """Weights the tensor-parallel ranks hold beyond one copy, over the whole model
        (``layer_tp_copies_bytes``): DeepSeek-V3 at TP8 keeps its routers and MLA
        down-projections whole on each of the 8 ranks. With data-parallel attention, also
        each rank's own copy of what it does not share with the others: the attention and
        dense layers, the embedding and LM head (data_parallel.table_copies_bytes)."""
        layers = sum(self.layer_tp_copies_bytes(layer) for layer in self.model.layers)
        if self.data_parallel_size == 1:
            return layers
        from ridgeline.data_parallel import table_copies_bytes

        return layers + table_copies_bytes(self)

    def layer_tp_copies_bytes(self, layer: Layer) -> float:
        """One layer's weights its tensor-parallel ranks hold beyond one copy: what
        ``rank_params`` keeps whole, less the share a split would have given each rank."""
        return self._tp_copies_by_layer.get(layer, 0.0)

    @cached_property
    def _tp_copies_by_layer(self) -> dict[Layer, float]:
        """``layer_tp_copies_bytes`` of each distinct layer, worked once a deployment (a
        model's layers repeat a few kinds): what one GPU holds of each category
        (``gpu_params``: over the GPUs it is split across, an MI250's dies under vLLM each
        a rank) × a stage's GPUs, less one copy."""
        gpus = self.expert_ranks  # a stage's GPUs: TP, × the data-parallel ranks
        if gpus * self.devices_per_gpu == 1:
            return {}
        out: dict[Layer, float] = {}
        for layer in dict.fromkeys(self.model.layers):
            params = layer_params(self.model, layer)
            out[layer] = sum((self.gpu_params(layer, c, n) * gpus - n)
                             * self.weights.format_of(c).bytes_per_weight
                             for c, n in params.items() if n)
        return out

    @property
    def kv_replication(self) -> float:
        """The cache's copies over the engine's TP ranks (kvcache.kv_replication over
        ``engine_tensor_parallel_size``), ÷ vLLM's -dcp, which deals each sequence's tokens
        over that many of the copies: DeepSeek-V3 at TP8, 8 copies of its latent; with -dcp
        8, one. 8 x MI250 under vLLM run 16 ranks, its dies: 16 copies, 2 a card."""
        return kv_replication(self.model, self.engine_tensor_parallel_size) \
            / self.decode_context_parallel_size

    @cached_property
    def bytes_per_weight_split(self) -> tuple[float, float]:
        """Bytes per weight of the matrices every token reads (all but the routed experts and
        the embedding lookup), and of the routed experts (gpt-oss: bf16 attention, MXFP4
        experts); the two are equal for a dense model."""
        params = count_params(self.model).by_category
        by = self.bytes_by_category
        skip = {*ROUTED} | self._looked_up
        dense = [c for c, n in params.items() if n and c not in skip]
        dense_bpw = sum(by[c] for c in dense) / sum(params[c] for c in dense)
        experts = params.get(EXPERTS, 0)
        return dense_bpw, by[EXPERTS] / experts if experts else dense_bpw

    @property
    def bytes_per_weight(self) -> float:
        """Average bytes per weight of what a step reads (fp8 linear + bf16 lm_head: ~1.01)."""
        skip = self._looked_up
        b = sum(v for c, v in self.bytes_by_category.items() if c not in skip)
        return b / self.params_a_step_reads

    @property
    def params_a_step_reads(self) -> float:
        """Every weight but the input embedding table."""
        skip = self._looked_up
        return float(sum(v for c, v in count_params(self.model).by_category.items()
                         if c not in skip))

    @property
    def params_read_note(self) -> str:
        """Which weights ``params_a_step_reads`` counts, in words: a tied input embedding is
        read whole as the LM head (Llama-3.2-1B's 262.7M), so none is left out."""
        return ("all of them: the tied input embedding is read whole as the LM head"
                if self.model.tie_word_embeddings else "all but the input embedding")

    @property
    def _looked_up(self) -> set[str]:
        """The categories a step looks rows up in rather than reads: the input embedding
        (a tied one is read whole as the lm_head)."""
        return set() if self.model.tie_word_embeddings else {EMBEDDING}
