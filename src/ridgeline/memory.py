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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from ridgeline.context_length import served_positions
from ridgeline.datafiles import load_data
from ridgeline.deployment import Deployment, windows_as_full
from ridgeline.engine_windows import has_windows, honours_windows, token_bytes
from ridgeline.errors import InputError
from ridgeline.hardware import Accelerator
from ridgeline.kvcache import kv_footprint
from ridgeline.kvgroups import (
    KERNEL_BLOCK_ALIGNMENT,
    KVGroups,
    stage_group_layers,
    vllm_kv_groups,
)
from ridgeline.layouts import DENSE, FULL, LINEAR, MAMBA, MOE, WINDOW_MIXERS
from ridgeline.llamacpp_memory import (
    SplitDevice,
    cells_that_fit,
    compute_buffer_bytes,
    slot_cache_bytes,
    split_devices,
)
from ridgeline.offload import check_host_memory, gpu_share, gpu_weight_bytes
from ridgeline.parallel import ep_rank_experts
from ridgeline.quantization import EXPERTS
from ridgeline.sglang_memory import (
    sglang_data,
    sglang_fixed_state_slots,
    sglang_max_running_requests,
    sglang_memory_defaults,
    sglang_release,
    sglang_requests_asked,
    sglang_running_cap,
    sglang_startup_bytes,
    sglang_state_model,
    sglang_state_ratio,
)
from ridgeline.stages import Stage, pipeline_stages, stage_weight_bytes
from ridgeline.trtllm_memory import (
    check_backend,
    default_backend,
    engine_buffer_bytes,
    lm_head_output_bytes,
)
from ridgeline.units import GIB, MIB
from ridgeline.vllm_hybrid import chunked_in_full, ssm_state_dtype, state_blocks
from ridgeline.vllm_memory import (
    ACTIVATION_BYTES,
    VLLMAccounting,
    compile_transient_bytes,
    cuda_graph_bytes,
    encoder_profile,
    mla_block_size,
    model_runner,
    moe_workspace_bytes,
    mrv2_sampler_bytes,
    mrv2_state_bytes,
    mxfp4_padding_bytes,
    non_torch_bytes,
    parse_version,
    sampler_peak_bytes,
    vllm_accounting,
    vllm_data,
)

# What the driver keeps from the nominal capacity: torch reports 23.58 GiB total on a
# 24 GiB RTX 3090 (vLLM issue #10517 log) and 79.2 GiB on an 80 GiB H100.
VISIBLE_MEMORY_FRACTION = 0.985
# vLLM V0 (vllm/config.py SchedulerConfig, v0.6): without chunked prefill it profiles
# max(max_model_len, 2048) tokens; chunked prefill is on by default past 32K tokens of
# context, with a 2,048-token budget ("a balance between ITL and TTFT").
V0_CHUNK_TOKENS = 2048
V0_CHUNKED_ABOVE = 32 * 1024


def device_memory_bytes(acc: Accelerator) -> float:
    """What an engine finds on the device: the runtime's total where the catalog records
    one from logs; else the driver's figure less what the runtime keeps on a discrete card
    (× 0.985); Metal's working set is already that figure."""
    if acc.runtime_total_bytes:
        return acc.runtime_total_bytes
    if acc.vendor == "apple":
        return acc.visible_memory_bytes
    return acc.visible_memory_bytes * VISIBLE_MEMORY_FRACTION


def device_memory_note(acc: Accelerator) -> str:
    if acc.vendor == "apple":
        return ("Metal working set: 2/3 of RAM up to 36 GiB, 3/4 above (macOS default; "
                "sysctl iogpu.wired_limit_mb raises it)")
    if acc.runtime_total_bytes:
        return "the device total the runtime reports (catalog, from logs: see its sources)"
    return "catalog memory (ECC-visible where it applies) × 0.985 visible"


def engine_defaults(engine: str) -> dict[str, Any]:
    key = "llama.cpp" if engine.startswith("llama.cpp") else engine
    data: dict[str, Any] = load_data("engines.json").get(key, {})
    return data


@dataclass(frozen=True)
class EngineSettings:
    """The memory and batch knobs, in the engine's own words (None: the engine's default)."""

    gpu_memory_utilization: float | None = None  # vLLM; SGLang mem_fraction_static; TRT-LLM
    max_model_len: int | None = None  # kv_cache_free_gpu_mem_fraction; llama.cpp n_ctx
    max_num_seqs: int | None = None  # SGLang max_running_requests; TRT max_batch_size
    max_num_batched_tokens: int | None = None  # SGLang chunked_prefill_size; TRT max_num_tokens
    block_size: int | None = None  # SGLang page_size; TRT tokens_per_block
    enforce_eager: bool = False  # vLLM: no CUDA graphs, no graph memory
    usage: str = "serve"  # vLLM usage context: "serve" (vllm serve) or "offline" (LLM class)
    # vLLM/SGLang: whose memory rules, as 0.11; llama.cpp: its build, as b9400 (default: newest)
    engine_version: str | None = None
    flash_attn: bool = True  # llama.cpp -fa (default auto: on where the backend supports it)
    swa_full_tokens_ratio: float | None = None  # SGLang's window pool ÷ full pool (default 0.8)
    async_scheduling: bool = True  # vLLM (default since v0.14): off is --no-async-scheduling
    # vLLM: None is its default (on; for a model with recurrent state, off before v0.28)
    prefix_caching: bool | None = None
    language_model_only: bool = False  # vLLM --language-model-only: no vision tower loaded
    warm_compile_cache: bool = False  # vLLM: torch.compile's cache from an earlier start found
    backend: str | None = None  # TensorRT-LLM --backend: pytorch (default) or tensorrt
    # vLLM --kv-cache-memory-bytes: the pool per GPU, set; no profile check, no utilization
    kv_cache_memory_bytes: int | None = None
    # SGLang --max-total-tokens, TensorRT-LLM kv_cache_config.max_tokens: a cap on the pool's
    # tokens; each engine keeps the smaller of it and what its memory rule leaves
    max_total_tokens: int | None = None

    def __post_init__(self) -> None:
        u = self.gpu_memory_utilization
        if u is not None and not 0 < u <= 1:
            raise InputError(f"memory fraction must be in (0, 1], got {u}")
        for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size",
                     "kv_cache_memory_bytes", "max_total_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InputError(f"{name} must be at least 1, got {value}")
        if self.usage not in ("serve", "offline"):
            raise InputError(f"usage must be serve or offline, got {self.usage!r}")
        if self.engine_version is not None and llamacpp_build(self.engine_version) is None:
            if re.fullmatch(r"\s*[bB]\d*\s*", self.engine_version):
                raise InputError(f"not a llama.cpp build: {self.engine_version!r} (expected "
                                 "e.g. b9400)")
            parse_version(self.engine_version)
        r = self.swa_full_tokens_ratio
        if r is not None and not 0 < r <= 1:
            raise InputError(f"swa_full_tokens_ratio must be in (0, 1], got {r}")
        if self.backend is not None:
            check_backend(self.backend)


def vllm_batch_defaults(dep: Deployment, usage: str) -> dict[str, int]:
    """vLLM's default max_num_seqs and max_num_batched_tokens for this accelerator."""
    table = engine_defaults("vllm")["batch_defaults"]
    acc = dep.accelerator
    large = acc.memory_bytes >= table["large_memory_gib"] * GIB and not acc.id.startswith("a100")
    return dict(table["large" if large else "other"][usage])


def activation_bytes_per_token(dep: Deployment) -> float:
    """Peak live activations per token in a forward pass, per TP rank.

    The MLP holds gate and up outputs and their product (3 × intermediate) beside three
    hidden-size tensors (residual, normed input, attention output): Llama-3.1-8B,
    2 B × (3·14336 + 3·4096) = 110.6 KB per token. A routed MoE layer holds vLLM's
    fused-experts caches for each of its top-k copies of the token: one buffer shared by
    the gate-up output (2 × expert intermediate ÷ TP) and the down output (hidden), beside
    the activated product (intermediate ÷ TP) (fused_moe.py fused_experts_impl:
    intermediate_cache13 of M·topk·max(N, K), intermediate_cache2 of M·topk·N/2), and its
    shared experts an MLP's three: Qwen3-235B-A22B at TP4, 8 × (4096 + 384) + 3 × 4096.
    """
    model = dep.model
    tp = dep.tensor_parallel_size
    widths = [0.0]
    if model.dense_mlp and any(layer.ffn == DENSE for layer in model.layers):
        widths.append(3 * model.dense_mlp.intermediate_size / tp)
    if model.moe and any(layer.ffn == MOE for layer in model.layers):
        moe = model.moe
        i = moe.expert_intermediate_size / tp
        widths.append(moe.experts_per_token * (max(2 * i, model.hidden_size) + i)
                      + 3 * moe.num_shared_experts * moe.shared_intermediate_size / tp)
    return ACTIVATION_BYTES * (max(widths) + 3 * model.hidden_size)


@dataclass(frozen=True)
class KVPool:
    """The KV pool of one GPU and everything that was taken before it."""

    engine: str
    total_bytes: float  # per GPU, as the driver reports it
    reserved_fraction: float  # gpu_memory_utilization / mem_fraction_static / …
    weight_bytes: float  # per GPU
    activation_bytes: float
    non_torch_bytes: float
    cuda_graph_bytes: float
    free_fraction_of_rest: float  # TRT-LLM: its fraction applies to what is left
    kv_bytes_per_token: float  # per GPU, full-attention (growing) layers
    block_size: int
    max_num_seqs: int
    profile_tokens: int
    groups: KVGroups | None = None  # vLLM V1: the hybrid allocator's groups and page
    forward_bytes: float = 0.0  # the profiled forward pass's activations (vLLM)
    sampler_bytes: float = 0.0  # the profiled sampler's buffers (vLLM); activations = the larger
    accounting: VLLMAccounting | None = None  # vLLM: the version whose accounting applies
    slot_cache_bytes: float = 0.0  # llama.cpp: window and recurrent caches sized by slots
    slot_bytes_each: float = 0.0  # of those, what one more slot adds (its window and state)
    host_cells: int = 0  # llama.cpp with every growing layer on the host: the -c cells the
    # GPU's compute buffer (its mask grows with -c) still leaves room for
    windows_apart: bool = False  # llama.cpp, SGLang: a conversation costs tokens x context
    in_flight_batches: int = 1  # vLLM v0.26+ under async scheduling: window groups keep 2
    windows_in_full: bool = False  # vLLM before v0.10: a window+full model cached in full
    stage: Stage | None = None  # pipeline parallel: the stage whose pool binds (stages.py)
    split_device: SplitDevice | None = None  # llama.cpp -sm layer: the GPU whose cells bind
    encoder_bytes: float = 0.0  # vLLM: the vision tower's profiled peak (encoder_profile)
    encoder_held_bytes: float = 0.0  # … its outputs, held through the text pass and sampler
    encoder_images: int = 0  # … the dummy images it ran
    # buffers kept for every seat from start-up: TensorRT-LLM's engine backend (its runtime
    # and decoder), vLLM's Model Runner V2 (its sampler state, counted from v0.27)
    seat_buffer_bytes: float = 0.0
    runner: str = ""  # vLLM: the GPU model runner whose profile sized it (V0, V1, MRV2)
    compile_bytes: float = 0.0  # vLLM MRV2: a cold torch.compile's transient in the peak
    moe_workspace_bytes: float = 0.0  # vLLM: the fused-MoE workspace held through the sampler
    engine_era: str = ""  # SGLang: which of its default rules sized it (sglang_memory.py)
    # vLLM --kv-cache-memory-bytes: the pool as set (0: sized from the profile). vLLM skips
    # its memory check then, so rest_bytes is the room the card leaves it (fraction 1)
    set_pool_bytes: float = 0.0
    # SGLang --max-total-tokens, TensorRT-LLM max_tokens: the pool holds at most this many
    # tokens (0: no cap), whatever memory is left
    token_cap: int = 0
    # SGLang's hybrid (recurrent-state) models: the requests its state pool holds, carved out
    # of the pool before the KV cache (slot_cache_bytes); 0: no such pool
    state_slots: int = 0
    # … set at a number of requests (its radix cache off: --max-running-requests or 512)
    # whatever the memory, not carved as mamba_full_memory_ratio's share
    state_pool_fixed: bool = False
    # … one request's recurrent state per GPU; 0: no state pool (a pool of 0 slots is still
    # one: it runs no request)
    state_request_bytes: float = 0.0

    @property
    def engine_buffers(self) -> bool:
        """TensorRT-LLM's engine backend: runtime buffers and decoder kept for every seat."""
        return self.engine == "trtllm" and self.seat_buffer_bytes > 0

    @property
    def kv_share(self) -> float:
        """The binding pipeline stage's cache-holding layers over an even split's (1 without a
        pipeline)."""
        return 1.0 if self.stage is None else self.stage.kv_share

    @property
    def weights_overflow(self) -> bool:
        """The weights alone take more than the card holds: the engine could not load them."""
        return self.weight_bytes > self.total_bytes

    @property
    def rest_bytes(self) -> float:
        """The reserved memory less everything taken before the cache; negative when the
        weights and the profiling pass already overflow it."""
        budget = self.total_bytes * self.reserved_fraction
        return budget - self.weight_bytes - self.activation_bytes - self.non_torch_bytes \
            - self.cuda_graph_bytes - self.seat_buffer_bytes

    @property
    def pool_bytes(self) -> float:
        """The KV pool per GPU: what is left (× TensorRT-LLM's fraction), or the pool set by
        --kv-cache-memory-bytes — none where that overflows the card, which runs out of memory
        rather than serve."""
        if self.set_pool_bytes:
            return 0.0 if self.overflow_bytes else self.set_pool_bytes
        left = max(0.0, self.rest_bytes * self.free_fraction_of_rest)
        # SGLang's hybrid: the static pool its state pool is carved from; the cap binds on the
        # KV cache beside it (state_kv_bytes)
        return min(left, self.capped_bytes) if self.token_cap and not self.state_request_bytes \
            else left

    @property
    def capped_bytes(self) -> float:
        """The memory a token cap (--max-total-tokens) allows: its whole blocks."""
        return self.token_cap // self.block_size * self.page_bytes

    @property
    def capped(self) -> bool:
        """Whether the token cap, not the memory, sized the pool (SGLang's hybrid: the KV
        cache beside its state pool)."""
        left = max(0.0, self.rest_bytes * self.free_fraction_of_rest)
        if self.state_request_bytes:
            left = max(0.0, left - self.slot_cache_bytes)
        return bool(self.token_cap) and self.capped_bytes < left

    @property
    def state_kv_bytes(self) -> float:
        """SGLang's hybrid: the KV cache beside its state pool, what the static pool leaves
        after the states (none where they fill it), at most --max-total-tokens' whole pages:
        SGLang takes the states from the uncapped rest, then caps the tokens
        (handle_max_mamba_cache, then min(profiled, max_total_tokens))."""
        kv = max(0.0, self.pool_bytes - self.slot_cache_bytes)
        return min(kv, self.capped_bytes) if self.token_cap else kv

    @property
    def kv_cache_bytes(self) -> float:
        """The KV cache itself per GPU, what a pool's size means wherever one is printed or
        compared: SGLang's hybrid, what its state pool leaves of the static pool
        (state_kv_bytes); any other, the pool (pool_bytes)."""
        return self.state_kv_bytes if self.state_request_bytes else self.pool_bytes

    @property
    def overflow_bytes(self) -> float:
        """How far a pool set by --kv-cache-memory-bytes overruns the room the card leaves it
        (0 when it fits, or when the pool was sized from the profile)."""
        return max(0.0, self.set_pool_bytes - self.rest_bytes) if self.set_pool_bytes else 0.0

    @property
    def page_bytes(self) -> float:
        """One block's memory per GPU."""
        if self.groups is not None:
            return self.groups.page_bytes
        return self.kv_bytes_per_token * self.block_size

    @property
    def blocks(self) -> int:
        """Blocks of the growing cache (llama.cpp: -c cells, beside its slot-sized caches)."""
        page = self.page_bytes
        if not page:
            return self.host_cells
        if self.state_request_bytes:
            return int(self.state_kv_bytes // page)
        return max(0, int((self.pool_bytes - self.slot_cache_bytes) // page))

    @property
    def tokens(self) -> int:
        """Tokens of cache the pool holds, counted as vLLM did before v0.24 (blocks ÷ groups ×
        block_size, so every group counted as growing); llama.cpp's cells."""
        if self.groups is not None:
            return self.groups.reported_tokens(self.blocks)
        return self.blocks * self.block_size

    def logged_tokens(self, max_model_len: int) -> int:
        """The engine's own token figure ("GPU KV cache size"): from vLLM v0.24 its maximum
        concurrency × max_model_len, before it ``tokens``."""
        if self.groups is not None and self.accounting is not None \
                and self.accounting.tokens_from_concurrency:
            return int(self.concurrency(max_model_len) * max_model_len)
        return self.tokens

    @property
    def window_budget_tokens(self) -> int:
        """The prefill tokens a window group must keep blocks for, on top of its window:
        max_num_batched_tokens per batch in flight (vLLM v0.26+ async scheduling: two)."""
        return self.profile_tokens * self.in_flight_batches

    def request_blocks(self, max_model_len: int) -> int:
        """The most blocks one max_model_len request holds, as vLLM's start-up check and its
        'Maximum concurrency' count them (0 without KV-cache groups)."""
        if self.groups is None:
            return 0
        return self.groups.blocks_per_request(max_model_len, self.window_budget_tokens)

    def admission_blocks(self, prompt_tokens: int) -> int | None:
        """Free blocks vLLM's admission gate asks before it admits a prompt of
        ``prompt_tokens`` tokens (scheduler_reserve_full_isl, on from v0.19): v0.19's charged
        every window group the whole prompt, later ones what the start-up check charges; None
        where no such gate runs (other engines, vLLM before v0.19, no KV-cache groups)."""
        a = self.accounting
        if self.engine != "vllm" or self.groups is None or a is None or a.engine == "V0":
            return None
        rule = vllm_data()["full_prompt_admission"]
        version = parse_version(a.version)
        if version < parse_version(str(rule["from"])):
            return None
        if version < parse_version(str(rule["windows_capped_from"])):
            return self.groups.whole_prompt_blocks(prompt_tokens)
        return self.request_blocks(prompt_tokens)

    def concurrency(self, max_model_len: int) -> float:
        """Full-length sequences that fit (vLLM's 'Maximum concurrency'): tokens ÷
        max_model_len, or with groups blocks ÷ the blocks one such request holds."""
        if self.groups is not None:
            return self.blocks / self.request_blocks(max_model_len)
        return self.tokens / max_model_len


def kv_pool(dep: Deployment, settings: EngineSettings | None = None,
            total_bytes: float | None = None) -> KVPool:
    """The per-GPU KV pool of ``dep.engine`` under ``settings``: of a pipeline, the stage
    whose pool holds the fewest blocks (every stage sizes its own; the engine keeps the
    fewest, stages.py)."""
    pools = stage_pools(dep, settings, total_bytes)
    return min(pools, key=lambda pool: (pool.blocks, pool.rest_bytes))


def stage_pools(dep: Deployment, settings: EngineSettings | None = None,
                total_bytes: float | None = None) -> tuple[KVPool, ...]:
    """The pool each pipeline stage of a serving engine sizes, first to last; of llama.cpp's
    layer split, each GPU's (llamacpp_memory.split_devices); one pool for a deployment
    without a pipeline."""
    s = settings or EngineSettings()
    engine = dep.engine
    if engine.startswith("torch-"):
        raise InputError(f"{engine} is `ridgeline measure`'s PyTorch harness, not a serving "
                         "engine: it has no KV pool or scheduler to size (use vllm, sglang, "
                         "trtllm or llama.cpp-…)")
    if s.engine_version is not None:
        _check_version_kind(engine, s.engine_version)
    total = total_bytes or device_memory_bytes(dep.accelerator)
    if s.language_model_only and engine != "vllm":
        raise InputError(f"--language-model-only is vLLM's; {engine} has no such setting")
    if s.swa_full_tokens_ratio is not None and engine != "sglang":
        raise InputError(f"--swa-full-tokens-ratio is SGLang's; {engine} has no such setting")
    if s.swa_full_tokens_ratio is not None and not (
            has_windows(dep) and honours_windows(dep, s.engine_version)):
        raise InputError(f"--swa-full-tokens-ratio sizes SGLang's hybrid-SWA pool, which "
                         f"{dep.model.architecture} on {dep.accelerator.id} does not get: "
                         "SGLang caches every layer's tokens in one pool for it")
    if not s.async_scheduling and engine != "vllm":
        raise InputError(f"--no-async-scheduling is vLLM's; {engine} has no such setting")
    if engine == "vllm" and dep.pipeline_parallel_size > 1 and s.engine_version \
            and parse_version(s.engine_version) < PIPELINE_FROM:
        raise InputError(f"vLLM {s.engine_version} has no pipeline parallelism: it came in "
                         "v0.5.1 (PR #4412; vLLM #6054)")
    if s.warm_compile_cache and engine != "vllm":
        raise InputError(f"--warm-compile-cache is vLLM's; {engine} has no such setting")
    if s.kv_cache_memory_bytes is not None and engine != "vllm":
        raise InputError(f"--kv-cache-memory-bytes is vLLM's; {engine} has no such setting")
    if s.max_total_tokens is not None and engine not in ("sglang", "trtllm"):
        raise InputError(f"--max-total-tokens caps SGLang's pool (TensorRT-LLM's "
                         f"kv_cache_config.max_tokens); {engine} has no such setting"
                         + (" (--kv-cache-memory-bytes sets vLLM's pool)" if engine == "vllm"
                            else ""))
    if s.backend is not None and engine != "trtllm":
        raise InputError(f"--backend is TensorRT-LLM's; {engine} has no such setting")
    if s.prefix_caching is not None and engine not in ("vllm", "sglang", "trtllm"):
        flag = "--enable-prefix-caching" if s.prefix_caching else "--no-prefix-caching"
        raise InputError(f"{flag} is vLLM's and SGLang's (TensorRT-LLM's "
                         f"kv_cache_config.enable_block_reuse); {engine} has no such setting")
    on_gpus = gpu_weight_bytes(dep)  # all of them, but for llama.cpp's -ngl
    # llama.cpp's vision projector (mmproj) is a file apart
    vision = 0.0 if engine.startswith("llama.cpp") or s.language_model_only \
        else dep.model.vision_tower_bytes
    if dep.pipeline_parallel_size > 1 and engine.startswith("llama.cpp"):  # -sm layer
        return tuple(_stage_pool(dep, s, total, device.weight_bytes, None, device)
                     for device in split_devices(dep))
    if dep.pipeline_parallel_size > 1:
        return tuple(_stage_pool(dep, s, total, stage_weight_bytes(dep, stage, vision)
                                 + ep_extra_bytes(dep, stage.expert_share), stage)
                     for stage in pipeline_stages(dep))
    return (_stage_pool(dep, s, total, (on_gpus + vision) / dep.num_gpus
                        + ep_extra_bytes(dep), None),)


def ep_extra_bytes(dep: Deployment, share: float = 1.0) -> float:
    """What the busiest expert-parallel rank holds beyond an even share of the experts: whole
    experts, ⌈E ÷ R⌉ of them (Mixtral's 8 over 16 GPUs: an eighth each on eight, not a
    sixteenth); of a pipeline stage, its MoE layers' ``share``."""
    moe, ranks = dep.model.moe, dep.tensor_parallel_size
    if moe is None or not dep.expert_parallel or ranks < 2:
        return 0.0
    experts = dep.bytes_by_category.get(EXPERTS, 0.0) * share / dep.pipeline_parallel_size
    return experts * (ep_rank_experts(moe.num_experts, ranks) / moe.num_experts - 1 / ranks)


PIPELINE_FROM = (0, 5, 1)  # vLLM's first release with --pipeline-parallel-size (PR #4412)
# vLLM's first release aligning a hybrid's attention block to the block size asked (PR
# #37467, read in the v0.19.1 and v0.20.0 wheels)
HYBRID_ALIGN_ASKED = (0, 20)


def _stage_pool(dep: Deployment, s: EngineSettings, total_bytes: float, weight_bytes: float,
                stage: Stage | None, device: SplitDevice | None = None) -> KVPool:
    """The pool of one GPU holding ``weight_bytes``: of one pipeline ``stage`` (its share of the
    layers' cache; the sampler on the last), of one ``device`` of llama.cpp's layer split, or
    of a deployment without a pipeline (None)."""
    engine = dep.engine
    d = engine_defaults(engine)
    share = 1.0 if stage is None else stage.kv_share
    non_torch = float(d.get("non_torch_gib", 0.4)) * GIB
    if engine == "vllm":  # windows and states: vLLM's own groups (kvgroups.py)
        footprint = kv_footprint(dep.model, 1, dep.kv.bytes_per_element)
        kv_bytes_per_token = footprint.bytes_per_token_growing * dep.kv_replication / dep.num_gpus
        return _vllm_pool(dep, s, total_bytes, weight_bytes, kv_bytes_per_token * share, stage)
    kv_bytes_per_token = token_bytes(dep, s.swa_full_tokens_ratio, s.engine_version) * share
    if engine.startswith("llama.cpp") or engine not in ("sglang", "trtllm"):
        return _llamacpp_pool(dep, s, total_bytes, weight_bytes, non_torch, kv_bytes_per_token,
                              device)
    if engine == "sglang":
        rule = sglang_memory_defaults(total_bytes, dep.tensor_parallel_size,
                                      dep.pipeline_parallel_size,
                                      s.max_num_batched_tokens, s.engine_version)
        tokens = rule.chunked_prefill_size
        fraction = s.gpu_memory_utilization or rule.mem_fraction_static
        # SGLang keeps activations and CUDA graphs in the memory it holds back, and applies
        # its fraction to what its distributed start-up leaves
        pool = KVPool(engine, total_bytes, fraction, weight_bytes, 0.0,
                      fraction * sglang_startup_bytes(dep), 0.0, 1.0, kv_bytes_per_token,
                      s.block_size or int(d["page_size"]), 1, tokens,
                      windows_apart=has_windows(dep), stage=stage, engine_era=rule.era,
                      token_cap=s.max_total_tokens or 0)
        pool = sglang_state_pool(dep, pool, s)
        seats = sglang_own_requests(dep, pool, s)
        if pool.state_request_bytes:  # the state pool keeps slots for the radix cache's too
            seats = min(seats, sglang_running_cap(pool.state_slots, s.prefix_caching is not False,
                                                  s.engine_version, dep.model))
        return replace(pool, max_num_seqs=seats)
    # trtllm: its fraction applies to what is free after the engine, its activations and (the
    # TensorRT engine backend) its runtime buffers and decoder load
    block = s.block_size
    if block is not None and (block < 2 or block & (block - 1)):  # docs/source/features/kvcache.md
        raise InputError(f"TensorRT-LLM's tokens_per_block must be a power of two greater than "
                         f"1; got {block}")
    seqs = s.max_num_seqs or int(d["max_batch_size"])
    tokens = s.max_num_batched_tokens or int(d["max_num_tokens"])
    forward = tokens * activation_bytes_per_token(dep)
    peak, buffers = forward, 0.0
    if (s.backend or default_backend()) == "tensorrt":
        last = stage is None or stage.last  # the decoder and the lm_head: the last stage's
        if last:
            peak = max(forward, lm_head_output_bytes(dep.model, seqs, dep.tensor_parallel_size))
        context = s.max_model_len or served_positions(dep.model, dep.engine) or 131072
        buffers = engine_buffer_bytes(dep.model, seqs, context, decoder=last)
    free_rest = s.gpu_memory_utilization or float(d["kv_cache_free_gpu_mem_fraction"])
    return KVPool(engine, total_bytes, 1.0, weight_bytes, peak, non_torch, 0.0, free_rest,
                  kv_bytes_per_token,
                  s.block_size or int(d["tokens_per_block"]), seqs, tokens, forward_bytes=forward,
                  stage=stage, seat_buffer_bytes=buffers, token_cap=s.max_total_tokens or 0,
                  windows_apart=has_windows(dep))  # windows counted whole (engine_windows.py)


def sglang_own_requests(dep: Deployment, pool: KVPool, s: EngineSettings) -> int:
    """max_running_requests as SGLang derives it from its KV cache's tokens (or takes it
    from --max-running-requests), before a state pool caps it (sglang_max_running_requests);
    where a state pool leaves the KV cache no token, the requests it asked for its request
    pool (max_num_reqs): it stops ('Not enough memory') before it halves the tokens."""
    context = s.max_model_len or served_positions(dep.model, dep.engine) or 131072
    if pool.state_request_bytes and pool.tokens < 1:
        return sglang_requests_asked(pool.tokens, context, s.max_num_seqs, s.engine_version)
    return sglang_max_running_requests(pool.tokens, context, s.max_num_seqs, s.engine_version)


def sglang_state_pool(dep: Deployment, pool: KVPool, s: EngineSettings) -> KVPool:
    """SGLang's state pool for a hybrid with recurrent-state layers, sized first: rest ×
    mamba_full_memory_ratio ÷ (1 + ratio) as whole requests' states (the ratio 0.2 in
    0.5.3.post2, 0.9 from 0.5.3.post3), or, where SGLang sets it instead (its radix cache off:
    before 0.5.9 --max-running-requests or 512, from 0.5.9 --max-running-requests where
    given; sglang_fixed_state_slots), that many requests' states whatever the memory; the KV
    cache gets the rest (under --max-total-tokens, at most the cap: the states come out of
    the uncapped rest), and where a set pool leaves it nothing SGLang stops at start-up
    (engines.json sglang.mamba_pool). A carved pool of 0 slots is still a state pool: SGLang
    runs no request beside it. The pool unchanged for other models and older releases."""
    rule, version = sglang_data()["mamba_pool"], s.engine_version
    if version is not None and sglang_release(version) < sglang_release(str(rule["from"])):
        return pool
    per_request = kv_footprint(sglang_state_model(dep.model), 1, dep.kv.bytes_per_element) \
        .state_bytes / dep.tensor_parallel_size * pool.kv_share
    if not per_request:
        return pool
    pool = replace(pool, state_request_bytes=per_request, windows_apart=True)
    fixed = sglang_fixed_state_slots(s.prefix_caching is not False, version, dep.model,
                                     s.max_num_seqs)
    if fixed is not None:
        return replace(pool, state_slots=fixed, slot_cache_bytes=fixed * per_request,
                       state_pool_fixed=True)
    ratio = sglang_state_ratio(version)  # of the static pool, before any token cap
    slots = max(0, int(pool.pool_bytes * ratio / (1 + ratio) // per_request))
    return replace(pool, state_slots=slots, slot_cache_bytes=slots * per_request)


def llamacpp_build(text: str) -> int | None:
    """'b9400', 'B9400' or '9400' → 9400; None for anything else (a vLLM/SGLang version, or
    build 0, which never was)."""
    match = re.fullmatch(r"\s*[bB]?(\d+)\s*", text)
    return int(match.group(1)) or None if match else None


def check_engine_version(engine: str, version: str) -> None:
    """The version is one this engine has and ridgeline models, or a one-line error."""
    _check_version_kind(engine, version)
    if engine == "vllm":
        vllm_accounting(version)
    elif engine == "sglang":
        parse_version(version)


def _check_version_kind(engine: str, version: str) -> None:
    """llama.cpp takes a build (b9400), vLLM and SGLang a version (0.11), others neither."""
    build = llamacpp_build(version) is not None
    if engine.startswith("llama.cpp"):
        if not build:
            raise InputError(f"--engine-version {version}: llama.cpp's is a build, as b9400")
    elif engine not in ("vllm", "sglang"):
        raise InputError(f"--engine-version models vLLM's and SGLang's versions and llama.cpp's "
                         f"builds; {engine} has none")
    elif build:
        raise InputError(f"--engine-version {version}: a llama.cpp build, not a {engine} "
                         "version (e.g. 0.11)")


def llamacpp_outputs(slots: int, engine_version: str | None) -> int | None:
    """The logits rows llama-server reserves: one per slot since PR #23861 (the newest, by
    default), or every ubatch token (None) in builds before it."""
    since = int(engine_defaults("llama.cpp")["outputs_per_slot_since_build"])
    build = llamacpp_build(engine_version) if engine_version else None
    return None if build is not None and build < since else slots


def llamacpp_cache_on_gpu(dep: Deployment) -> tuple[float, float]:
    """The shares of llama.cpp's two caches on the GPU under -ngl (a layer's cache stays with
    it): the cells that grow with -c (full layers, and windowed ones where the build ignores
    the window), and the slot-sized caches (windows, recurrent states)."""
    windows = honours_windows(dep)
    growing = gpu_share(dep, (FULL,) if windows else (FULL, *WINDOW_MIXERS))
    return growing, gpu_share(dep, (*(WINDOW_MIXERS if windows else ()), LINEAR, MAMBA))


def host_cache_bytes(dep: Deployment, cells: int, engine_version: str | None = None) -> float:
    """The KV cache of the layers -ngl leaves on the host, for ``cells`` cells of -c: a
    layer's cache lives with the layer (the slot-sized window and state caches left out)."""
    if dep.offload is None:
        return 0.0
    growing = llamacpp_cache_on_gpu(dep)[0]
    return token_bytes(dep, None, engine_version) * cells * (1.0 - growing)


def check_host_memory_for(dep: Deployment, cells: int) -> None:
    """Refuse a split whose host share, its weights and its layers' cache for ``cells`` cells,
    overflows the host's RAM, where given."""
    check_host_memory(dep, host_cache_bytes(dep, cells), cells)


def _llamacpp_pool(dep: Deployment, s: EngineSettings, total_bytes: float, weight_bytes: float,
                   non_torch: float, kv_bytes_per_token: float,
                   device: SplitDevice | None = None) -> KVPool:
    """llama.cpp (and engines without a paged pool): the weights, the CUDA context and the
    compute buffer, then a cache of single-token cells in what is left; the compute buffer
    is sized at the cells that fit, since without flash attention it grows with them. Of a
    layer split, one ``device``: its own layers' caches, the logits only with the output."""
    d = engine_defaults(dep.engine)
    # llama_context clamps -ub to -b (n_ubatch = min(n_batch, n_ubatch), src/llama-context.cpp),
    # and -b keeps its default here
    n_ubatch = min(s.max_num_batched_tokens or int(d.get("n_ubatch", 512)),
                   int(d.get("n_batch", 2048)))
    seats = s.max_num_seqs or int(d.get("n_parallel", 1))
    windows = honours_windows(dep)
    growing, slot_sized = llamacpp_cache_on_gpu(dep)
    if device is None:
        kv_bytes_per_token *= growing
        per_gpu = dep.kv_replication / dep.num_gpus * slot_sized
    else:  # kv_bytes_per_token is an even share of every GPU-held layer's: take the device's
        kv_bytes_per_token *= dep.num_gpus * device.growing_share
        per_gpu = device.slot_share
    output = device is None or device.output

    def slot_caches(slots: int) -> float:
        cells = slots * s.max_model_len if s.max_model_len else None  # -c: each slot's context
        return slot_cache_bytes(dep.model, dep.kv.bytes_per_element, slots, n_ubatch, windows,
                                cells) * per_gpu

    fixed = slot_caches(seats)
    each = slot_caches(seats + 1) - fixed
    free = total_bytes - weight_bytes - non_torch - fixed
    outputs = llamacpp_outputs(seats, s.engine_version)
    cells = cells_that_fit(free, kv_bytes_per_token, dep.model, n_ubatch, s.flash_attn, outputs,
                           output)
    compute = compute_buffer_bytes(dep.model, n_ubatch, cells, s.flash_attn, outputs, output)
    on_host = kv_bytes_per_token == 0 and growing == 0 and dep.model.count(mixer=FULL) > 0
    return KVPool(dep.engine, total_bytes, 1.0, weight_bytes, compute, non_torch, 0.0, 1.0,
                  kv_bytes_per_token,
                  1, seats, n_ubatch, forward_bytes=compute, slot_cache_bytes=fixed,
                  slot_bytes_each=each, windows_apart=True, host_cells=cells if on_host else 0,
                  split_device=device)


VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)  # vLLM's CacheConfig BlockSize choices


def _vllm_pool(dep: Deployment, s: EngineSettings, total_bytes: float, weight_bytes: float,
               kv_bytes_per_token: float, stage: Stage | None = None) -> KVPool:
    """vLLM: total × gpu_memory_utilization − weights − the profiling pass's peak (the larger
    of the forward pass over the token budget and the sampler over max_num_seqs requests, a
    vision tower's images held beside them, or the tower's own pass if larger) − non-torch
    memory − (v0.21+) the CUDA-graph estimate, as ``s.engine_version`` counts them; of one
    pipeline ``stage``, its own layers (the sampler on the last, the tower on the first)."""
    d = engine_defaults("vllm")
    acc = vllm_accounting(s.engine_version)
    defaults = vllm_batch_defaults(dep, s.usage)
    if acc.engine == "V0":  # a whole max_model_len prompt over 256 seqs; chunks past 32K
        seqs = s.max_num_seqs or 256
        length = s.max_model_len or 0
        tokens = s.max_num_batched_tokens or (V0_CHUNK_TOKENS if length > V0_CHUNKED_ABOVE
                                               else max(length, V0_CHUNK_TOKENS))
    else:
        seqs = s.max_num_seqs or defaults["max_num_seqs"]
        tokens = s.max_num_batched_tokens or defaults["max_num_batched_tokens"]
        if tokens < seqs:  # vLLM's SchedulerConfig refuses this at start-up
            raise InputError(f"max_num_batched_tokens ({tokens:,}) must be at least max_num_seqs "
                             f"({seqs:,}): vLLM refuses to start otherwise")
    block = s.block_size
    if block is not None and block not in VLLM_BLOCK_SIZES:
        raise InputError(f"vLLM's --block-size is one of {', '.join(map(str, VLLM_BLOCK_SIZES))}; "
                         f"got {block}")
    fraction = s.gpu_memory_utilization or acc.gpu_memory_utilization
    if s.kv_cache_memory_bytes is not None:
        if acc.engine == "V0" or parse_version(acc.version) < SET_POOL_FROM:
            raise InputError(f"--kv-cache-memory-bytes came in vLLM v0.10.2 (PR #21489): "
                             f"vLLM {acc.version} sizes its pool only from the profile")
        fraction = 1.0  # vLLM ignores gpu_memory_utilization for a set pool
    forward = tokens * activation_bytes_per_token(dep)
    # only the last pipeline stage samples (and so profiles the sampler)
    sampler = sampler_peak_bytes(dep, seqs, acc) if stage is None or stage.last else 0.0
    encoder, held, images = encoder_profile(dep, tokens) if acc.engine == "V1" \
        and not s.language_model_only and (stage is None or stage.first) else (0.0, 0.0, 0)
    # a set pool is checked against the card with the graphs captured after it, whether or
    # not this version's budget counts them
    graphs = cuda_graph_bytes(dep, seqs, acc, s.enforce_eager, stage,
                              counted=s.kv_cache_memory_bytes is not None)
    runner, compile_peak, state = model_runner(dep, acc), 0.0, 0.0
    if s.warm_compile_cache and runner != "MRV2":
        raise InputError(f"--warm-compile-cache changes nothing here: vLLM {acc.version} runs "
                         f"{dep.model.name} on its {runner} runner, whose profile ridgeline "
                         "sizes without a cold compile (Model Runner V2, where the logs show "
                         "one, runs dense models from v0.25.1 and every model from v0.29)")
    if runner == "MRV2":  # Model Runner V2's own profile (vllm_memory.py); it builds its
        # sampler, and with it the sampler state, on the last pipeline stage only
        # (v1/worker/gpu/model_runner.py load_model: `if self.is_last_pp_rank`)
        last = stage is None or stage.last
        sampler = mrv2_sampler_bytes(dep, seqs, tokens) if sampler else 0.0
        if not acc.mrv2_encoder_profiled:
            encoder, held, images = 0.0, 0.0, 0
        if not acc.mrv2_graphs_in_budget and s.kv_cache_memory_bytes is None:
            graphs = 0.0
        if acc.mrv2_state_counted and last:
            state = mrv2_state_bytes(dep, seqs, tokens)
        if not (s.warm_compile_cache or s.enforce_eager):
            compile_peak = compile_transient_bytes()
    # the tower runs first, its outputs kept; a fused-MoE workspace kept from the first MoE
    # layer on is still held while the sampler runs
    workspace = moe_workspace_bytes(dep, tokens, acc.version)
    peak = max(encoder, held + max(forward + compile_peak, workspace + sampler))
    paged = dep  # before the hybrid allocator, a model mixing windows and full attention
    kinds = {layer.mixer for layer in dep.model.layers}  # cached every layer in full
    if (not acc.hybrid_allocator or chunked_in_full(dep.model, acc.version)) \
            and FULL in kinds and kinds & set(WINDOW_MIXERS):
        paged = replace(dep, model=windows_as_full(dep.model))
    state_dtype = ssm_state_dtype(dep.model, acc.version)
    if state_dtype != dep.model.state_dtype:  # Nemotron-H: vLLM's own SSM cache dtype
        paged = replace(paged, model=replace(paged.model, state_dtype=state_dtype))
    # from v0.20 a hybrid's attention block grows in steps of the block size asked
    # (--block-size), not of 16 (Platform._align_hybrid_block_size, PR #37467)
    steps = max(KERNEL_BLOCK_ALIGNMENT, s.block_size or 0) \
        if parse_version(acc.version) >= HYBRID_ALIGN_ASKED else KERNEL_BLOCK_ALIGNMENT
    block = s.block_size or int(d["block_size"])
    if dep.model.attention is not None and dep.model.attention.mla is not None:
        block = mla_block_size(dep, acc.version, s.block_size)[0]  # the MLA kernel's block
    groups = vllm_kv_groups(paged, block, align_state_blocks(dep, acc, s.prefix_caching), steps)
    block = groups.block_size if groups else block
    weight_bytes += mxfp4_padding_bytes(dep, stage, acc.version)
    if groups is not None and stage is not None:  # a block holds this stage's largest group
        layers = stage_group_layers(dep, groups.layers_per_group, stage.start, stage.layers)
        layer_page = groups.page_bytes * dep.pipeline_parallel_size / groups.layers_per_group
        groups = replace(groups, page_bytes=layer_page * layers)
    return KVPool("vllm", total_bytes, fraction, weight_bytes, peak, non_torch_bytes(dep, acc),
                  graphs, 1.0, kv_bytes_per_token, block, seqs, tokens, groups, forward, sampler,
                  acc, in_flight_batches=acc.in_flight_batches if s.async_scheduling else 1,
                  windows_in_full=paged is not dep, stage=stage, encoder_bytes=encoder,
                  encoder_held_bytes=held, encoder_images=images, seat_buffer_bytes=state,
                  runner=runner, compile_bytes=compile_peak, moe_workspace_bytes=workspace,
                  set_pool_bytes=float(s.kv_cache_memory_bytes or 0))


# vLLM PR #21489 (--kv-cache-memory-bytes and the start-up advice): first released in v0.10.2.
# The PyPI source tarballs of 0.10.1 and 0.10.1.1 hold no kv_cache_memory_bytes; 0.10.2's has
# it (vllm/config/cache.py, engine/arg_utils.py "--kv-cache-memory-bytes", and the worker's
# "as specified by kv_cache_memory_bytes config" log and "--kv-cache-memory=" advice)
SET_POOL_FROM = (0, 10, 2)


def set_pool_margin_bytes() -> float:
    """The margin vLLM leaves below its --kv-cache-memory-bytes advice (redundancy_buffer_memory,
    150 MiB; engines.json vllm.set_pool)."""
    return float(engine_defaults("vllm")["set_pool"]["redundancy_mib"]) * MIB


def vllm_pool_advice(dep: Deployment, pool: KVPool, settings: EngineSettings
                     ) -> tuple[float, float] | None:
    """The --kv-cache-memory-bytes vLLM's V1 worker advises at start-up when the flag is
    unset: to fit the requested memory (total × gpu_memory_utilization), and to fill the card;
    each less the weights, the profiled peak, non-torch memory, the CUDA graphs and a 150 MiB
    margin (engines.json vllm.set_pool). None for another engine, V0, or a pool already set."""
    acc = pool.accounting
    if pool.engine != "vllm" or acc is None or acc.engine == "V0" or pool.set_pool_bytes \
            or parse_version(acc.version) < SET_POOL_FROM:
        return None
    graphs = pool.cuda_graph_bytes or cuda_graph_bytes(
        dep, pool.max_num_seqs, acc, settings.enforce_eager, pool.stage, counted=True)
    taken = pool.weight_bytes + pool.activation_bytes + pool.non_torch_bytes + graphs \
        + pool.seat_buffer_bytes
    taken += set_pool_margin_bytes()
    return (max(0.0, pool.total_bytes * pool.reserved_fraction - taken),
            max(0.0, pool.total_bytes - taken))


def align_state_blocks(dep: Deployment, acc: VLLMAccounting, prefix_caching: bool | None
                       ) -> int:
    """State blocks a request holds per state group (vllm_hybrid.py): two in
    mamba_cache_mode "align" (three for Mamba-2 from v0.32), else one — "all" mode, a state
    per block, is not modelled."""
    return state_blocks(dep.model, prefix_caching, acc.version, acc.linear_state_blocks)
