"""Engine-aware memory: what an engine leaves for the KV cache, per GPU.

vLLM reserves gpu_memory_utilization × total memory, profiles one forward pass of
max_num_batched_tokens tokens (V0 without chunked prefill: max(max_model_len, 2048)) to
find the activation peak, keeps non-torch memory (CUDA context, NCCL) and CUDA graphs,
and pages the KV cache into what is left, in blocks of block_size tokens
(vllm/v1/worker/gpu_worker.py determine_available_memory; V0 worker.py). What that pass
counts changed from version to version: ``vllm_memory.py``.
SGLang gives the KV pool what is free after loading minus (1 − mem_fraction_static) ×
total, i.e. mem_fraction_static × total − weights − CUDA context: activations and CUDA
graphs live in the part it keeps back, sized from the card's memory
(model_runner profile_max_num_token; server_args _handle_gpu_memory_settings, v0.5);
TensorRT-LLM gives
kv_cache_free_gpu_mem_fraction of the memory free after the engine loads; llama.cpp
allocates the KV cache for the whole n_ctx up front.

Each engine's pool is built in its own module (vllm_pool.py, sglang_pool.py,
trtllm_memory.py, llamacpp_pool.py) as a KVPool (kvpool.py); this one checks the settings
against the engine, sizes each pipeline stage's weights and keeps the stage that binds.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import lru_cache

from ridgeline.cpu_offload import stage_offloaded_bytes_per_gpu
from ridgeline.datafiles import engine_defaults
from ridgeline.deployment import Deployment, require_deployment
from ridgeline.drafter_memory import drafter_bytes, vllm_draft_settings, with_mtp_cache
from ridgeline.engine_platforms import flash_attention_kv_problem
from ridgeline.engine_spec import EngineSpec
from ridgeline.engine_versions import (
    check_version_kind,
    expert_parallel_problem,
    llamacpp_build,
    pipeline_parallel_problem,
    speculative_problem,
)
from ridgeline.engine_windows import has_windows, honours_windows, token_bytes
from ridgeline.errors import DoesNotFit, InputError, wrong_kind
from ridgeline.expert_ranks import ep_rank_experts
from ridgeline.hardware import Accelerator, device_memory_bytes
from ridgeline.kvcache import kv_footprint

# KVPool lives beneath the engines' builders, which fill it in; this module, which calls
# them, is where the pool's users take it from
from ridgeline.kvpool import KVPool as KVPool
from ridgeline.kvpool import block_past_pool
from ridgeline.llamacpp_pool import llamacpp_pool
from ridgeline.llamacpp_split import SplitDevice, split_devices
from ridgeline.llamacpp_tensor import tensor_split_build_problem
from ridgeline.load_peak import load_peak_bytes
from ridgeline.lora_slots import AnyLoRA, check_engine_lora
from ridgeline.offload import gpu_weight_bytes
from ridgeline.quantization import EXPERTS
from ridgeline.record_views import given_fields_repr
from ridgeline.sglang_drafter import sglang_drafter_bytes
from ridgeline.sglang_lora import SGLangLoRASettings, sglang_lora_bytes
from ridgeline.sglang_memory import sglang_drafter_headroom_tokens, sglang_loads_tower
from ridgeline.sglang_pool import sglang_pool, sglang_settings
from ridgeline.sizing_flags import check_sizing_flags
from ridgeline.stages import Stage, pipeline_stages, stage_weight_bytes
from ridgeline.trtllm_memory import check_backend, default_backend, trtllm_pool
from ridgeline.trtllm_transceiver import CacheTransceiver
from ridgeline.units import GIB, require_count, require_fraction, require_whole
from ridgeline.vllm_eplb import EPLBSettings, check_eplb
from ridgeline.vllm_lora import LoRASettings, lora_bytes
from ridgeline.vllm_memory import parse_version
from ridgeline.vllm_mm_limits import MMLimits, serves_text_only
from ridgeline.vllm_pool import vllm_deployment, vllm_pool


def device_memory_note(acc: Accelerator) -> str:
    if acc.vendor == "apple":
        return ("Metal working set: 2/3 of RAM up to 36 GiB, 3/4 above (macOS default; "
                "sysctl iogpu.wired_limit_mb raises it)")
    if acc.runtime_total_bytes:
        return "the device total the runtime reports (catalog, from logs: see its sources)"
    return "catalog memory (ECC-visible where it applies) × 0.985 visible"


MAMBA_SSM_DTYPES = ("float32", "bfloat16", "float16")  # SGLang's --mamba-ssm-dtype, 0.5.9
# EngineSettings' counts: positive whole numbers, kept as ints
COUNT_FIELDS = ("max_model_len", "max_num_seqs", "server_max_num_seqs",
                "max_num_batched_tokens", "n_batch", "block_size", "kv_cache_memory_bytes",
                "max_total_tokens", "max_mamba_cache_size", "max_cudagraph_capture_size")
# … and its sizes in MiB, which may be 0 (SGLANG_VLM_CACHE_SIZE_MB=0: no embedding cache)
SIZE_FIELDS = ("sglang_vlm_cache_size_mb", "sglang_mm_feature_cache_mb",
               "mm_preprocess_cache_size_mb")
# vLLM's CUDAGraphMode names (engines.json vllm.compilation_config.modes)
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


@dataclass(frozen=True)
class EngineSettings:
    """The memory and batch knobs, in the engine's own words (None: the engine's default),
    for ``kv_pool`` and ``fit_report``: vLLM's names first (``max_model_len``,
    ``gpu_memory_utilization``, ``max_num_seqs``, ``block_size``), each comment naming the
    other engines' flag it stands for. EngineSettings(max_model_len=8192) is vllm serve's
    defaults at --max-model-len 8192: Llama-3.1-8B on one H100 gets 7,555 blocks of 64.
    Counts are positive whole numbers (8192.0 is read as 8192; 2.5, True, "8192" and 0 raise
    InputError), fractions are in (0, 1]; the objects a field takes (``drafter``,
    ``mm_limits``, ``lora``, ``eplb``, ``cache_transceiver``) are exported from ridgeline."""

    gpu_memory_utilization: float | None = None  # vLLM; SGLang mem_fraction_static; TRT-LLM
    max_model_len: int | None = None  # kv_cache_free_gpu_mem_fraction; llama.cpp n_ctx
    max_num_seqs: int | None = None  # SGLang max_running_requests; TRT max_batch_size
    # SGLang: max_num_seqs is the default a drafter sets (sglang_pool.sglang_settings), not
    # --max-running-requests: its memory rule ran before it and saw none
    requests_by_drafter: bool = False
    # SGLang under data-parallel attention: the server's --max-running-requests where
    # max_num_seqs is one rank's // --dp-size share (data_parallel.rank_settings), which its
    # memory rule reads whole; None elsewhere
    server_max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None  # SGLang chunked_prefill_size; TRT max_num_tokens
    n_batch: int | None = None  # llama.cpp -b: the tokens one llama_decode call takes (2048)
    block_size: int | None = None  # SGLang page_size; TRT tokens_per_block
    enforce_eager: bool = False  # vLLM: no CUDA graphs, no graph memory
    usage: str = "serve"  # vLLM usage context: "serve" (vllm serve) or "offline" (LLM class)
    # vLLM/SGLang: whose memory rules, as 0.11; llama.cpp: its build, as b9400 (default: newest)
    engine_version: str | None = None
    swa_full_tokens_ratio: float | None = None  # SGLang's window pool ÷ full pool (default 0.8)
    async_scheduling: bool = True  # vLLM (default since v0.14): off is --no-async-scheduling
    # vLLM --async-scheduling given: a release raises where its default would turn it off
    # (engine_scheduling.vllm_async_conflict), and runs a draft model from v0.16, not v0.28
    async_scheduling_given: bool = False
    # vLLM --distributed-executor-backend (mp, ray, uni, external_launcher; None: its own
    # choice): ray has no async scheduling on 0.14-0.20 (engine_scheduling.vllm_executor_async_from)
    distributed_executor_backend: str | None = None
    # vLLM's VLLM_USE_RAY_V2_EXECUTOR_BACKEND as the server starts with it (None unset):
    # 0.20-0.32 pick ray's executor by it (engines.json vllm.async_scheduling.ray_v2_env)
    ray_v2_executor: bool | None = None
    overlap_schedule: bool = True  # SGLang (default since v0.4.0): off is --disable-overlap-schedule
    # TensorRT-LLM's PyTorch backend (default since v0.20): off is disable_overlap_scheduler
    overlap_scheduler: bool = True
    # TensorRT-LLM's LLM API enable_chunked_prefill (off by default): a context runs in chunks
    # of what max_num_tokens leaves, as vLLM V1 and SGLang always run one (chunked_prefill.py)
    enable_chunked_prefill: bool = False
    # vLLM --no-enable-chunked-prefill: each prompt runs whole, so an unset budget is at least
    # max_model_len and a smaller one is refused (V0 always; V1 from 0.12, which before turned
    # it back on: vllm_v0_chunking.v1_honours_off)
    no_chunked_prefill: bool = False
    # vLLM: None is its default (on; for a model with recurrent state, off before v0.28)
    prefix_caching: bool | None = None
    # a drafter configured (--spec-tokens): vLLM's V0 engine then leaves chunked prefill off
    # past 32K tokens of context (vllm_v0_chunking.py)
    speculative_decoding: bool = False
    # the drafter is the checkpoint's MTP layers (--spec-method mtp): vLLM's and TensorRT-LLM's
    # pools hold their weights and their cache (drafter_memory.py)
    draft_mtp: bool = False
    # the drafter as the engine's flags give it (engine_spec.EngineSpec): its draft length
    # (TensorRT-LLM caches an MTP layer a draft), a separate drafter's name and GPUs (vLLM's
    # pool holds one it can read: draft_model_memory.py), and SGLang's reserve for it
    drafter: EngineSpec | None = None
    language_model_only: bool = False  # vLLM --language-model-only: no vision tower loaded
    # vLLM --limit-mm-per-prompt: images (videos) a prompt may carry, which cap the tower's
    # profiled images; every modality at 0 is --language-model-only (vllm_mm_limits.py)
    mm_limits: MMLimits | None = None
    # SGLang --enable-multimodal: Gemma-3 and Llama-4 are served text-only without it
    # (Llama-4 then without its vision tower)
    enable_multimodal: bool = False
    # SGLang's multimodal buffers (sglang_mm_reserve.py): SGLANG_VLM_CACHE_SIZE_MB, the
    # embedding cache in MiB, and SGLANG_MM_FEATURE_CACHE_MB, the feature pool (None: the
    # variable unset), --mm-feature-transport (None: SGLang resolves it) and
    # --mm-preprocess-cache-size-mb (host memory; above 0 it turns Qwen3-VL's pool off)
    sglang_vlm_cache_size_mb: int | None = None
    mm_feature_transport: str | None = None
    sglang_mm_feature_cache_mb: int | None = None
    mm_preprocess_cache_size_mb: int | None = None
    warm_compile_cache: bool = False  # vLLM: torch.compile's cache from an earlier start found
    backend: str | None = None  # TensorRT-LLM --backend: pytorch (default) or tensorrt
    # TensorRT-LLM cache_transceiver_config (a disaggregated pool's KV hand-off): its
    # transfer buffers come out of the KV cache's memory (trtllm_transceiver.py)
    cache_transceiver: CacheTransceiver | None = None
    # vLLM --kv-cache-memory-bytes: the pool per GPU, set; no profile check, no utilization
    kv_cache_memory_bytes: int | None = None
    # vLLM v0.34+ --[no-]enable-extensible-kv-cache: None is its default (on, on CUDA and ROCm:
    # the pool measured after warm-up, vllm_extensible.py); False sizes it from the profile
    extensible_kv_cache: bool | None = None
    # vLLM --disable-hybrid-kv-cache-manager (True) or --no-disable-hybrid-kv-cache-manager
    # (False; v0.33+ also --enable-hybrid-kv-cache-manager); None: vLLM decides. Off, a model
    # mixing full attention with windows or chunks caches every layer in full (vllm_hybrid)
    disable_hybrid_kv_cache_manager: bool | None = None
    # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE as the server starts with it (None:
    # the release's default, 0 on v0.10.1-v0.13, 1 from v0.14): 0 caches Llama 4 in full
    allow_chunked_local_attn_hybrid: bool | None = None
    # vLLM --kv-transfer-config's kv_connector (NixlConnector, as a prefill/decode split's
    # pools run it, or MooncakeConnector; "": none): with it v0.9.1-v0.21 turn the hybrid
    # KV-cache manager off (vllm_hybrid.connector_off_reason)
    kv_connector: str = ""
    # vLLM --kv-events-config given (any value): v0.9.1-v0.19 then turn the hybrid KV-cache
    # manager off (vllm_hybrid.events_off_reason)
    kv_events: bool = False
    # SGLang --max-total-tokens, TensorRT-LLM kv_cache_config.max_tokens: a cap on the pool's
    # tokens; each engine keeps the smaller of it and what its memory rule leaves
    max_total_tokens: int | None = None
    # SGLang --max-mamba-cache-size: a hybrid's state pool in requests' states, set rather
    # than carved; --mamba-ssm-dtype (float32, bfloat16, float16): its SSM state's dtype
    max_mamba_cache_size: int | None = None
    mamba_ssm_dtype: str | None = None
    # vLLM --max-cudagraph-capture-size, SGLang --cuda-graph-max-bs: the largest batch captured
    max_cudagraph_capture_size: int | None = None
    # vLLM's compilation config (vllm_compilation.py): the sizes listed (cudagraph_capture_sizes,
    # --cudagraph-capture-sizes; None: vLLM's own list), the CUDA-graph mode (None: the default
    # FULL_AND_PIECEWISE; NONE comes with enforce_eager), and whether torch.compile runs
    # (None: as enforce_eager implies; True: cudagraph_mode NONE kept it; False: mode 0)
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    cudagraph_mode: str | None = None
    torch_compile: bool | None = None
    # -cc.mode=STOCK_TORCH_COMPILE (1): before v0.32 vLLM runs it on the V1 model runner
    stock_torch_compile: bool = False
    # --enable-lora: vLLM's adapters' slots (--max-loras, --max-lora-rank, …: vllm_lora.py)
    # or SGLang's (--max-loras-per-batch, --lora-paths, …: sglang_lora.py), whose buffers the
    # pool loses; None: LoRA off
    lora: AnyLoRA | None = None
    # vLLM --enable-eplb: its redundant experts (--eplb-config), whole experts every
    # expert-parallel rank loads with the weights (vllm_eplb.py); None: EPLB off
    eplb: EPLBSettings | None = None
    # llama.cpp under --fit (-ngl auto, or a build's default from b7437): the memory it keeps
    # free on each GPU (--fit-target), which more cells would not fill, since --fit moves a
    # layer to the host rather (llamacpp_fit.run_pool); None: --fit off (-ngl given)
    fit_target_bytes: float | None = None

    def __post_init__(self) -> None:
        # counts read as decode_floor reads a batch (units.require_count): 8192.0 is 8192;
        # 2.5, True, "8192", 0 and nan are refused naming the field, and each is kept an int
        for name in COUNT_FIELDS:
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, require_count(value, name))
        for name in SIZE_FIELDS:  # MiB where 0 turns the cache off
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, require_whole(value, name))
        if self.gpu_memory_utilization is not None:
            object.__setattr__(self, "gpu_memory_utilization", require_fraction(
                self.gpu_memory_utilization, "memory fraction"))
        if self.swa_full_tokens_ratio is not None:
            object.__setattr__(self, "swa_full_tokens_ratio", require_fraction(
                self.swa_full_tokens_ratio, "swa_full_tokens_ratio"))
        if self.cudagraph_capture_sizes is not None:
            sizes = self.cudagraph_capture_sizes
            if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Iterable) \
                    or not tuple(sizes):
                raise InputError(f"cudagraph_capture_sizes must list sizes of at least 1, got "
                                 f"{sizes!r}")
            object.__setattr__(self, "cudagraph_capture_sizes", tuple(
                require_count(size, "cudagraph_capture_sizes' size") for size in sizes))
        if self.cudagraph_mode is not None and self.cudagraph_mode not in CUDAGRAPH_MODES:
            raise InputError(f"cudagraph_mode must be one of {', '.join(CUDAGRAPH_MODES)}, "
                             f"got {self.cudagraph_mode!r}")
        if self.cudagraph_mode == "NONE" and not self.enforce_eager:
            raise InputError("cudagraph_mode NONE runs every step eager: give it with "
                             "enforce_eager (and torch_compile to keep torch.compile), the one "
                             "switch the step cost reads")
        if self.usage not in ("serve", "offline"):
            raise InputError(f"usage must be serve or offline, got {self.usage!r}")
        kinds: tuple[tuple[str, tuple[type, ...]], ...] = (
            ("drafter", (EngineSpec,)), ("mm_limits", (MMLimits,)),
            ("cache_transceiver", (CacheTransceiver,)),
            ("lora", (LoRASettings, SGLangLoRASettings)), ("eplb", (EPLBSettings,)))
        for name, kind in kinds:  # each an object ridgeline exports
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                raise wrong_kind(value, name,
                                 " or ".join(f"a ridgeline.{k.__name__}" for k in kind))
        if self.engine_version is not None and not isinstance(self.engine_version, str):
            raise wrong_kind(self.engine_version, "engine_version",
                             "a release such as '0.11' or 'b9400'")
        if self.engine_version is not None and llamacpp_build(self.engine_version) is None:
            if re.fullmatch(r"\s*[bB]\d*\s*", self.engine_version):
                raise InputError(f"not a llama.cpp build: {self.engine_version!r} (expected "
                                 "e.g. b9400)")
            parse_version(self.engine_version)
        target = self.fit_target_bytes
        if target is not None and (isinstance(target, bool) or not isinstance(
                target, numbers.Real) or not 0 <= target < math.inf):
            raise InputError(f"fit_target_bytes must be a number of bytes of at least 0, got "
                             f"{target!r}")
        if self.backend is not None:
            check_backend(self.backend)
        if self.mamba_ssm_dtype is not None and self.mamba_ssm_dtype not in MAMBA_SSM_DTYPES:
            raise InputError(f"mamba_ssm_dtype must be one of {', '.join(MAMBA_SSM_DTYPES)}, "
                             f"got {self.mamba_ssm_dtype!r}")

    def __repr__(self) -> str:
        return given_fields_repr(self)

    @property
    def cold_compile(self) -> bool:
        """Whether vLLM's torch.compile runs cold at start-up (Model Runner V2 profiles it):
        not under --enforce-eager or -cc.mode=0, nor with the compile cache found
        (--warm-compile-cache); -cc.cudagraph_mode=NONE alone keeps it."""
        compiles = self.torch_compile if self.torch_compile is not None \
            else not self.enforce_eager
        return compiles and not self.warm_compile_cache


def require_settings(settings: object) -> EngineSettings:
    """``settings`` where it is an EngineSettings, else an InputError naming what it was
    (kv_pool(dep, {"max_model_len": 8192}) is refused so, not read as a dict deep inside);
    None is the engine's defaults, EngineSettings()."""
    if settings is None:
        return EngineSettings()
    if not isinstance(settings, EngineSettings):
        raise wrong_kind(settings, "settings",
                         "a ridgeline.EngineSettings (EngineSettings(max_model_len=8192))")
    return settings


def loaded_vision_bytes(dep: Deployment, s: EngineSettings) -> float:
    """The vision tower ``dep.engine`` loads beside the text model under ``s`` (all of it, at
    16 bits): none on llama.cpp (its projector, mmproj, is a file apart), none under vLLM's
    --language-model-only or --limit-mm-per-prompt at 0 for every modality the model takes
    (vllm_mm_limits.serves_text_only), none for Llama-4 on SGLang without
    --enable-multimodal (sglang_loads_tower); Gemma-3-27B's 0.85 GB otherwise."""
    if dep.engine.startswith("llama.cpp") or s.language_model_only or (
            dep.engine == "vllm" and serves_text_only(dep.model, s.mm_limits)) or (
            dep.engine == "sglang" and not sglang_loads_tower(dep.model, s.enable_multimodal)):
        return 0.0
    return dep.model.vision_tower_bytes


def kv_pool(dep: Deployment, settings: EngineSettings | None = None,
            total_bytes: float | None = None) -> KVPool:
    """The per-GPU KV pool of ``dep.engine`` under ``settings`` (None: the engine's
    defaults), its figures in bytes per GPU: of a pipeline, the stage whose pool holds the
    fewest blocks (every stage sizes its own; the engine keeps the fewest, stages.py); of
    llama.cpp's layer split, a GPU holding cache before one holding none at the same cells.
    ``total_bytes``: the device memory in bytes, where not the card's (device_memory_bytes).
    Llama-3.1-8B on one H100 under vLLM at max_model_len 8,192: 59.03 GiB, 7,555 blocks
    of 64. Remembered (``_remembered_pool``) where the deployment and settings are the frozen
    records (a planner sizes each candidate's pool half a dozen times)."""
    if isinstance(dep, Deployment) and (settings is None or isinstance(
            settings, EngineSettings)) and (total_bytes is None or isinstance(
                total_bytes, (int, float))):
        try:
            hash((dep, settings, total_bytes))
        except TypeError:  # a field given as an unhashable value: sized, not remembered
            return _sized_pool(dep, settings, total_bytes)
        return _remembered_pool(dep, settings, total_bytes)
    return _sized_pool(dep, settings, total_bytes)


def _sized_pool(dep: Deployment, settings: EngineSettings | None,
                total_bytes: float | None) -> KVPool:
    """``kv_pool`` computed: the stage whose pool holds the fewest blocks."""
    pools = stage_pools(dep, settings, total_bytes)
    return min(pools, key=lambda pool: (
        pool.blocks, pool.split_device is not None and not pool.kv_bytes_per_token,
        pool.rest_bytes))


@lru_cache(maxsize=4096)
def _remembered_pool(dep: Deployment, settings: EngineSettings | None,
                     total_bytes: float | None) -> KVPool:
    """``_sized_pool``, once per (deployment, settings, memory): each is a frozen record, and
    so is the pool (an error raised is not remembered: it is raised again)."""
    return _sized_pool(dep, settings, total_bytes)


def served_kv_pool(dep: Deployment, settings: EngineSettings | None = None,
                   total_bytes: float | None = None) -> KVPool:
    """``ridgeline.kv_pool``: kv_pool, but a max_model_len the engine refuses outright is
    not sized: DoesNotFit with the reason fit's DOES NOT FIT headline gives for it
    (capacity.context_refusal): Llama-3.1-8B under vLLM at max_model_len 1,000,000, past its
    131,072 positions, 'vllm refuses --max-model-len 1,000,000, past llama-3.1-8b's 131,072
    positions …', where kv_pool, which fit prices the pool behind that verdict with, sizes
    it."""
    s = require_settings(settings)
    if s.max_model_len is not None:
        from ridgeline.capacity import context_refusal

        refusal = context_refusal(require_deployment(dep), s.max_model_len)
        if refusal:
            raise DoesNotFit(refusal)
    return kv_pool(dep, s, total_bytes)


def check_block_fits(dep: Deployment, settings: EngineSettings | None) -> None:
    """Refuse the --block-size asked where one block is more than ``dep``'s pool holds
    (kvpool.block_past_pool), as fit, simulate, decode and prefill do for the deployment
    asked; a lever's or a search's other deployment is sized, not refused."""
    if settings is None or settings.block_size is None:
        return
    problem = block_past_pool(kv_pool(dep, settings), settings.block_size)
    if problem:  # the block asked, not the memory: the flag's own refusal
        raise InputError(problem)


def stage_pools(dep: Deployment, settings: EngineSettings | None = None,
                total_bytes: float | None = None) -> tuple[KVPool, ...]:
    """The pool each pipeline stage of a serving engine sizes, first to last; of llama.cpp's
    layer split, each GPU's (llamacpp_split.split_devices); one pool for a deployment
    without a pipeline."""
    engine = require_deployment(dep).engine
    s = vllm_draft_settings(engine, require_settings(settings))  # 0.9.x: a draft model on V0
    if engine.startswith("torch-"):
        raise InputError(f"{engine} is `ridgeline measure`'s PyTorch harness, not a serving "
                         "engine: it has no KV pool or scheduler to size (use vllm, sglang, "
                         "trtllm or llama.cpp-…)")
    if s.engine_version is not None:
        check_version_kind(engine, s.engine_version)
        build = llamacpp_build(s.engine_version) if engine.startswith("llama.cpp") else None
        problem = tensor_split_build_problem(dep, build) \
            or flash_attention_kv_problem(dep.kv, engine, build)
        if problem:
            raise InputError(problem)
        problem = expert_parallel_problem(engine, s.engine_version) \
            if dep.expert_parallel else ""
        if problem:
            raise InputError(problem)
        problem = speculative_problem(engine, s.engine_version, s.drafter.method,
                                      s.drafter.algorithm) \
            if s.drafter is not None else ""
        if problem:
            raise InputError(problem)
        if engine == "vllm" and s.async_scheduling_given:
            from ridgeline.engine_scheduling import vllm_async_problem

            problem = vllm_async_problem(dep, s)
        if problem:
            raise InputError(problem)
    total = total_bytes or device_memory_bytes(dep.accelerator)
    if s.language_model_only and engine != "vllm":
        raise InputError(f"--language-model-only is vLLM's; {engine} has no such setting")
    if s.mm_limits is not None and engine != "vllm":
        raise InputError(f"--limit-mm-per-prompt is vLLM's; {engine} has no such setting")
    if s.mm_limits is not None and serves_text_only(dep.model, s.mm_limits):
        s = replace(s, language_model_only=True)  # vLLM's own meaning of every modality at 0
    if s.enable_multimodal and engine != "sglang":
        raise InputError(f"--enable-multimodal is SGLang's; {engine} has no such setting")
    if s.sglang_vlm_cache_size_mb is not None and engine != "sglang":
        raise InputError(f"--sglang-vlm-cache-size-mb is SGLang's (SGLANG_VLM_CACHE_SIZE_MB); "
                         f"{engine} has no such setting")
    if s.sglang_mm_feature_cache_mb is not None and engine != "sglang":
        raise InputError(f"--sglang-mm-feature-cache-mb is SGLang's (SGLANG_MM_FEATURE_CACHE_MB); "
                         f"{engine} has no such setting")
    for flag, value in (("--mm-feature-transport", s.mm_feature_transport),
                        ("--mm-preprocess-cache-size-mb", s.mm_preprocess_cache_size_mb)):
        if value is not None and engine != "sglang":
            raise InputError(f"{flag} is SGLang's; {engine} has no such setting")
    if s.ray_v2_executor is not None and engine != "vllm":
        raise InputError("--vllm-use-ray-v2-executor-backend is vLLM's "
                         f"(VLLM_USE_RAY_V2_EXECUTOR_BACKEND); {engine} has no such setting")
    if s.disable_hybrid_kv_cache_manager is not None and engine != "vllm":
        raise InputError(f"--{'' if s.disable_hybrid_kv_cache_manager else 'no-'}disable-"
                         f"hybrid-kv-cache-manager is vLLM's; {engine} has no such setting")
    if s.allow_chunked_local_attn_hybrid is not None and engine != "vllm":
        raise InputError("--vllm-allow-chunked-local-attn-with-hybrid-kv-cache is vLLM's "
                         "(VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE); "
                         f"{engine} has no such setting")
    if engine == "sglang":
        from ridgeline.sglang_mm_reserve import sglang_mm_problem, sglang_nodes
        from ridgeline.sglang_pool import sglang_mm_buffers, sglang_requests_given

        problem = sglang_mm_problem(dep.model, dep.accelerator, s.engine_version,
                                    s.enable_multimodal, sglang_nodes(dep),
                                    dep.pipeline_parallel_size, sglang_requests_given(s),
                                    sglang_mm_buffers(s))
        if problem:
            raise InputError(problem)
    if s.swa_full_tokens_ratio is not None and engine != "sglang":
        raise InputError(f"--swa-full-tokens-ratio is SGLang's; {engine} has no such setting")
    if s.swa_full_tokens_ratio is not None and not (
            has_windows(dep) and honours_windows(dep, s.engine_version)):
        raise InputError(f"--swa-full-tokens-ratio sizes SGLang's hybrid-SWA pool, which "
                         f"{dep.model.architecture} on {dep.accelerator.id} does not get: "
                         "SGLang caches every layer's tokens in one pool for it")
    if not s.async_scheduling and engine != "vllm":
        raise InputError(f"--no-async-scheduling is vLLM's; {engine} has no such setting"
                         + _overlap_switch_hint(engine))
    if not s.overlap_schedule and engine != "sglang":
        raise InputError(f"--disable-overlap-schedule is SGLang's; {engine} has no such setting"
                         + _overlap_switch_hint(engine))
    if not s.overlap_scheduler:
        check_overlap_scheduler_flag(engine, s.backend)
    if s.enable_chunked_prefill and engine != "trtllm":
        raise InputError(f"enable_chunked_prefill is TensorRT-LLM's LLM API option; {engine} "
                         "has no such setting (vLLM V1 and SGLang chunk a prompt regardless)")
    if not s.overlap_schedule and s.engine_version is not None:
        check_overlap_flag(s.engine_version)
    problem = pipeline_parallel_problem(engine, s.engine_version, dep.pipeline_parallel_size)
    if problem:
        raise InputError(problem)
    if s.warm_compile_cache and engine != "vllm":
        raise InputError(f"--warm-compile-cache is vLLM's; {engine} has no such setting")
    if s.kv_cache_memory_bytes is not None and engine != "vllm":
        raise InputError(f"--kv-cache-memory-bytes is vLLM's; {engine} has no such setting")
    if s.max_total_tokens is not None and engine not in ("sglang", "trtllm"):
        raise InputError(f"--max-total-tokens caps SGLang's pool (TensorRT-LLM's "
                         f"kv_cache_config.max_tokens); {engine} has no such setting"
                         + (" (--kv-cache-memory-bytes sets vLLM's pool)" if engine == "vllm"
                            else ""))
    check_sizing_flags(dep, s)
    if s.lora is not None:
        check_engine_lora(dep, s.lora, s.engine_version)
    if s.eplb is not None:
        check_eplb(dep, s.eplb, s.engine_version)
    redundant = 0 if s.eplb is None else s.eplb.num_redundant_experts
    drafted = False  # max_running_requests SGLang's default with a drafter, no flag
    headroom = 0  # the tokens SGLang allocates past its profile for a drafter
    if engine == "sglang":  # a drafter sets max_running_requests before anything reads it
        s = sglang_settings(s)
        drafted = s.requests_by_drafter
        if s.drafter is not None:  # from the server's max_running_requests, every rank
            headroom = sglang_drafter_headroom_tokens(s.drafter.method, s.drafter.tokens,
                                                      s.max_num_seqs, s.engine_version)
    if s.backend is not None and engine != "trtllm":
        raise InputError(f"--backend is TensorRT-LLM's; {engine} has no such setting")
    if s.cache_transceiver is not None and engine != "trtllm":
        raise InputError(f"--cache-transceiver-config is TensorRT-LLM's (cache_transceiver_config "
                         f"in its YAML); {engine} has no such setting")
    if s.prefix_caching is not None and engine not in ("vllm", "sglang", "trtllm"):
        flag = "--enable-prefix-caching" if s.prefix_caching else "--no-prefix-caching"
        raise InputError(f"{flag} is vLLM's and SGLang's (TensorRT-LLM's "
                         f"kv_cache_config.enable_block_reuse); {engine} has no such setting")
    on_gpus = gpu_weight_bytes(dep)  # all of them, but for llama.cpp's -ngl
    vision = loaded_vision_bytes(dep, s)
    if dep.pipeline_parallel_size > 1 and engine.startswith("llama.cpp"):  # -sm layer
        # -c is one number: the fewest cells any GPU holds, and every GPU sized at it
        devices = split_devices(dep)
        cells = min(_stage_pool(dep, s, total, device.weight_bytes, None, device).context_cells
                    for device in devices)
        return tuple(_stage_pool(dep, s, total, device.weight_bytes, None, device, cells)
                     for device in devices)
    if dep.pipeline_parallel_size > 1:
        # --cpu-offload-gb: each stage's GPUs keep min(asked, their own layers) in host memory
        return tuple(_with_load_peak(dep, s, _with_replicas(dep, _stage_pool(
            dep, s, total, stage_weight_bytes(dep, stage, vision)
            + ep_extra_bytes(dep, stage.expert_share, redundant)
            - stage_offloaded_bytes_per_gpu(dep, stage), stage, headroom_tokens=headroom),
            redundant, stage.expert_share)) for stage in pipeline_stages(dep))
    if dep.data_parallel_size > 1:  # each rank sizes its own pool, under its own share
        from ridgeline.data_parallel import rank_settings

        s = rank_settings(dep, s, drafted)
    # each data-parallel rank loads its own vision tower
    return (_with_load_peak(dep, s, _with_replicas(dep, _stage_pool(
        dep, s, total, (on_gpus + vision * dep.data_parallel_size) / dep.num_gpus
        + ep_extra_bytes(dep, redundant_experts=redundant), None, headroom_tokens=headroom),
        redundant)),)


def _with_load_peak(dep: Deployment, s: EngineSettings, pool: KVPool) -> KVPool:
    """``pool`` with the weights its GPU holds at start-up where the engine loads a 16-bit
    checkpoint before quantizing it (load_peak.load_peak_bytes)."""
    peak = load_peak_bytes(dep, s.engine_version, pool.weight_bytes, pool.stage)
    return replace(pool, load_peak_bytes=peak) if peak else pool


def ep_extra_bytes(dep: Deployment, share: float = 1.0, redundant_experts: int = 0) -> float:
    """What the busiest expert-parallel rank holds beyond an even share of the experts: whole
    experts, ⌈(E + N) ÷ R⌉ of them (Mixtral's 8 over 16 GPUs: an eighth each on eight, not a
    sixteenth), N the redundant copies vLLM's --enable-eplb adds (DeepSeek-V3's 256 + 32 over
    8: 36 each, 4 past its share: vllm_eplb.py); of a pipeline stage, its MoE layers'
    ``share``. With data-parallel attention the experts spread over every rank's GPUs. vLLM's
    ranks on an MI250 are its dies: each holds its ⌈(E + N) ÷ R⌉ over R dies, a card its two
    dies' (engine_expert_ranks)."""
    moe, ranks, devices = dep.model.moe, dep.engine_expert_ranks, dep.devices_per_gpu
    if moe is None or not dep.expert_parallel or ranks < 2:
        return 0.0
    experts = dep.bytes_by_category.get(EXPERTS, 0.0) * share / dep.pipeline_parallel_size
    held = ep_rank_experts(moe.num_experts + redundant_experts, ranks)
    return devices * experts * (held / moe.num_experts - 1 / ranks)


def _with_replicas(dep: Deployment, pool: KVPool, redundant_experts: int,
                   share: float = 1.0) -> KVPool:
    """``pool`` naming, of its weights, what --enable-eplb's redundant experts add (fit's
    weights line): ep_extra_bytes with them less without."""
    if not redundant_experts:
        return pool
    extra = ep_extra_bytes(dep, share, redundant_experts) - ep_extra_bytes(dep, share)
    return replace(pool, redundant_expert_bytes=extra)


def _stage_pool(dep: Deployment, s: EngineSettings, total_bytes: float, weight_bytes: float,
                stage: Stage | None, device: SplitDevice | None = None,
                cells: int | None = None, headroom_tokens: int = 0) -> KVPool:
    """The pool of one GPU holding ``weight_bytes``: of one pipeline ``stage`` (its share of the
    layers' cache; the sampler on the last), of one ``device`` of llama.cpp's layer split (at
    the split's ``cells``, None: the most it holds), or of a deployment without a pipeline
    (None). ``headroom_tokens``: SGLang's past its profile for a drafter."""
    engine = dep.engine
    d = engine_defaults(engine)
    share = 1.0 if stage is None else stage.kv_share
    non_torch = float(d.get("non_torch_gib", 0.4)) * GIB
    if engine == "vllm":  # windows and states: vLLM's own groups (kvgroups.py); a part the
        # runtime lists as n devices (an MI250's two GCDs) runs n tensor-parallel ranks, each
        # sizing its own pool of 1/n of the memory and weights: the part's is their sum
        run, n = vllm_deployment(dep), dep.accelerator.runtime_devices
        footprint = kv_footprint(run.model, 1, run.kv.bytes_per_element)
        kv_bytes_per_token = footprint.bytes_per_token_growing * run.kv_replication / run.rank_gpus
        # the last stage drafts
        draft_weights, draft_kv = drafter_bytes(run, s) if stage is None or stage.last \
            else (0.0, 0.0)
        weight_bytes += n * draft_weights
        pool = vllm_pool(run, s, total_bytes / n, weight_bytes / n, kv_bytes_per_token * share,
                         stage)
        if s.lora is not None and not isinstance(s.lora, SGLangLoRASettings):
            # loaded with the weights, before the profile
            pool = replace(pool, lora_bytes=lora_bytes(run, s.lora, stage))
        if draft_kv:
            pool = with_mtp_cache(pool, draft_kv)
        return replace(pool, drafter_weight_bytes=draft_weights).across_devices(n)
    kv_bytes_per_token = token_bytes(dep, s.swa_full_tokens_ratio, s.engine_version) * share
    draft_weights, draft_kv = 0.0, 0.0
    if engine == "trtllm" and (stage is None or stage.last):  # the last stage's KV manager
        draft_weights, draft_kv = drafter_bytes(dep, s)  # adds the MTP layers
        weight_bytes, kv_bytes_per_token = weight_bytes + draft_weights, \
            kv_bytes_per_token + draft_kv
    if engine.startswith("llama.cpp") or engine not in ("sglang", "trtllm"):
        return llamacpp_pool(dep, s, total_bytes, weight_bytes, non_torch, kv_bytes_per_token,
                             device, cells)
    if engine == "sglang":  # its LoRA slots, allocated before it sizes the pool
        lora = sglang_lora_bytes(dep, s.lora) if isinstance(s.lora, SGLangLoRASettings) else 0.0
        # v0.5.14+: the drafter loads before the pool is sized, its cache sized with it
        draft_weights, draft_kv = sglang_drafter_bytes(dep, s, kv_bytes_per_token) \
            if stage is None else (0.0, 0.0)
        pool = sglang_pool(dep, s, total_bytes, weight_bytes + draft_weights,
                           kv_bytes_per_token + draft_kv, stage, headroom_tokens, lora)
        return replace(pool, drafter_kv_bytes_per_token=draft_kv,
                       drafter_weight_bytes=draft_weights) if draft_kv or draft_weights else pool
    pool = trtllm_pool(dep, s, total_bytes, weight_bytes, non_torch, kv_bytes_per_token, stage)
    return replace(pool, drafter_kv_bytes_per_token=draft_kv,
                   drafter_weight_bytes=draft_weights) if draft_kv or draft_weights else pool


def _overlap_switch_hint(engine: str) -> str:
    """The engine's own switch for its overlapped scheduling, for a refusal of another's."""
    return {"vllm": " (vLLM's is --no-async-scheduling)",
            "sglang": " (SGLang's is --disable-overlap-schedule)",
            "trtllm": " (TensorRT-LLM's is --disable-overlap-scheduler)"}.get(engine, "")


def check_overlap_scheduler_flag(engine: str, backend: str | None) -> None:
    """An InputError where --disable-overlap-scheduler has nothing to turn off: it is
    TensorRT-LLM's PyTorch backend's (TorchLlmArgs.disable_overlap_scheduler, engines.json
    trtllm.overlap_scheduler); the TensorRT engine backend runs synchronously by default."""
    if engine != "trtllm":
        raise InputError("--disable-overlap-scheduler is TensorRT-LLM's (disable_overlap_"
                         f"scheduler in its LLM API); {engine} has no such setting"
                         + _overlap_switch_hint(engine))
    backends = engine_defaults("trtllm")["overlap_scheduler"]["backends"]
    if (backend or default_backend()) not in backends:
        raise InputError(f"--disable-overlap-scheduler is TensorRT-LLM's PyTorch backend's; the "
                         f"{backend} engine backend has no overlap scheduler to turn off (its "
                         "C++ executor runs synchronously unless enableTrtOverlap is set)")


def check_overlap_flag(version: str) -> None:
    """An InputError where SGLang ``version`` has no --disable-overlap-schedule: the flag came
    with the overlap scheduler's default in v0.4.0 (engines.json overlap_schedule); 0.3.x ran
    without overlap unless --enable-overlap-schedule (from v0.3.4.post1) turned it on."""
    from ridgeline.sglang_memory import sglang_release

    first = str(engine_defaults("sglang")["overlap_schedule"]["default_from"])
    if sglang_release(version) < sglang_release(first):
        raise InputError(f"SGLang {version} has no --disable-overlap-schedule (it came in "
                         f"v{first}, when the overlap scheduler became the default); its "
                         "scheduler runs without overlap unless --enable-overlap-schedule is "
                         "given, so leave the flag out")
