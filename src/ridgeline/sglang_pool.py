"""SGLang's KV pool: mem_fraction_static of the memory its distributed start-up leaves, less
the weights (the defaults by release are sglang_memory.py's), a recurrent hybrid's state pool
carved out of it first (sglang_hybrid.py), and the requests it runs beside them."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ridgeline.context_length import served_positions
from ridgeline.deployment import Deployment
from ridgeline.engine_windows import has_windows
from ridgeline.kvpool import KVPool
from ridgeline.sglang_hybrid import sglang_running_cap, sglang_state_pool
from ridgeline.sglang_memory import (
    SGLangMemoryDefaults,
    SGLangVisionCut,
    check_sglang_fraction,
    sglang_fraction,
    sglang_gpu_mem_bytes,
    sglang_max_running_requests,
    sglang_memory_defaults,
    sglang_prefill_case,
    sglang_requests_asked,
    sglang_speculative_requests,
    sglang_startup_bytes,
    sglang_vision_cut,
)
from ridgeline.sglang_mm_reserve import (
    SGLangMMBuffers,
    SGLangMMReserve,
    sglang_mm_reserve,
    sglang_nodes,
)
from ridgeline.sglang_page import sglang_page_size
from ridgeline.stages import Stage

if TYPE_CHECKING:
    from ridgeline.memory import EngineSettings


def sglang_pool(dep: Deployment, s: EngineSettings, total_bytes: float, weight_bytes: float,
                kv_bytes_per_token: float, stage: Stage | None,
                headroom_tokens: int = 0, lora_bytes: float = 0.0) -> KVPool:
    """SGLang: mem_fraction_static × (the card − what its distributed start-up takes) − the
    weights − its LoRA slots (``lora_bytes``: sglang_lora.py, built before the pool is
    sized) − a multimodal model's buffers (sglang_mm_reserve.py), in pages
    of page_size tokens (64 for DeepSeek NSA whatever --page-size says, 64 for DeepSeek-V3's
    trtllm_mla on a B200 from 0.5.3.post2: sglang_page.py), and a drafter's ``headroom_tokens`` past it
    (sglang_drafter_headroom_tokens; not sized here beside a state pool or windows); a
    hybrid's state pool carved out first (sglang_state_pool), then max_running_requests from
    the tokens left (sglang_own_requests)."""
    rule, cut = sglang_rule(dep, s, total_bytes)
    tokens = rule.chunked_prefill_size
    fraction = sglang_fraction(rule, cut, s.gpu_memory_utilization)
    check_sglang_fraction(rule, fraction, sglang_gpu_mem_bytes(dep.accelerator, total_bytes)[0])
    # SGLang keeps activations and CUDA graphs in the memory it holds back, and applies
    # its fraction to what its distributed start-up leaves
    pool = KVPool("sglang", total_bytes, fraction, weight_bytes, 0.0,
                  fraction * sglang_startup_bytes(dep), 0.0, 1.0, kv_bytes_per_token,
                  sglang_page_size(dep, s.engine_version, s.block_size)[0], 1, tokens,
                  windows_apart=has_windows(dep), stage=stage, engine_era=rule.era,
                  token_cap=s.max_total_tokens or 0, lora_bytes=lora_bytes,
                  mm_reserve_bytes=sglang_pool_mm_reserve(dep, s, total_bytes).mib * 2**20)
    pool = sglang_state_pool(dep, pool, s)
    if headroom_tokens and not pool.state_request_bytes and not pool.windows_apart:
        pool = replace(pool, headroom_tokens=headroom_tokens)
    seats = sglang_own_requests(dep, pool, s)
    if pool.state_request_bytes:  # the state pool keeps slots for the radix cache's too
        seats = min(seats, sglang_running_cap(pool.state_slots, s.prefix_caching is not False,
                                              s.engine_version, dep.model))
    return replace(pool, max_num_seqs=seats)


def sglang_settings(s: EngineSettings) -> EngineSettings:
    """The settings SGLang's server_args leaves ``s`` at: with a drafter and
    --max-running-requests unset, max_running_requests the drafter's default (48 from
    0.4.4.post4: sglang_speculative_requests), which the scheduler then takes as given, each
    data-parallel rank its // --dp-size, marked as the drafter's (``requests_by_drafter``);
    ``s`` as it is otherwise."""
    if s.max_num_seqs is not None or s.drafter is None:
        return s
    seats = sglang_speculative_requests(s.drafter.method, s.engine_version)
    return s if seats is None else replace(s, max_num_seqs=seats, requests_by_drafter=True)


def sglang_rule(dep: Deployment, s: EngineSettings,
                total_bytes: float) -> tuple[SGLangMemoryDefaults, SGLangVisionCut]:
    """SGLang's default rule for ``dep`` (on nvidia-smi's memory where known, else
    ``total_bytes``; its --tp-size every GPU of a stage, data-parallel attention's ranks
    included, their --dp-size, --cuda-graph-max-bs or --cuda-graph-bs's largest where given,
    the drafter's reserve, and from v0.5.10 the prefill CUDA graphs sglang_prefill_case
    describes) and
    its cut for a vision tower: the pool and --explain both read them here."""
    memory, _ = sglang_gpu_mem_bytes(dep.accelerator, total_bytes)
    prefill = sglang_prefill_case(dep.model, dep.accelerator, s.engine_version,
                                  s.enable_multimodal, s.lora is not None, s.drafter is not None,
                                  s.enforce_eager, s.max_total_tokens)
    rule = sglang_memory_defaults(memory, dep.expert_ranks, dep.pipeline_parallel_size,
                                  s.max_num_batched_tokens, s.engine_version,
                                  dep.data_parallel_size, sglang_graph_max_bs(s),
                                  s.drafter.method if s.drafter is not None else "", prefill,
                                  sglang_requests_given(s))
    return rule, sglang_vision_cut(dep.model, s.engine_version, s.enable_multimodal)


def sglang_pool_mm_reserve(dep: Deployment, s: EngineSettings,
                           total_bytes: float) -> SGLangMMReserve:
    """What ``dep``'s KV budget loses on each GPU for a multimodal model's buffers under
    ``s`` (sglang_mm_reserve), the pool and --explain both read it here."""
    return sglang_mm_reserve(dep.model, dep.accelerator, s.engine_version, s.enable_multimodal,
                             sglang_nodes(dep), sglang_requests_given(s), total_bytes,
                             sglang_mm_buffers(s))


def sglang_mm_buffers(s: EngineSettings) -> SGLangMMBuffers:
    """``s``'s SGLang multimodal buffer settings (the two variables and two flags)."""
    return SGLangMMBuffers(s.sglang_vlm_cache_size_mb, s.mm_feature_transport,
                           s.sglang_mm_feature_cache_mb, s.mm_preprocess_cache_size_mb)


def sglang_requests_given(s: EngineSettings) -> int | None:
    """The --max-running-requests SGLang's memory rule sees (v0.5.22+ caps the graph batch by
    it): the value given, not the 48 a drafter sets, which its server_args settle only after
    the memory rule (arg_groups/pipeline.py runs handle_gpu_memory_settings before
    handle_speculative_decoding in 0.5.23). A given 48 beside a drafter is given, and caps the
    tier's 512 graph batches of an H200 at TP8 to 48 (2 MiB × 464 less reserved); the same 48
    set by the drafter caps nothing. Under data-parallel attention the server's value, not a
    rank's // --dp-size share (256 over 8 ranks caps at 256, not 32)."""
    if s.requests_by_drafter:
        return None
    return s.server_max_num_seqs or s.max_num_seqs


def sglang_graph_max_bs(s: EngineSettings) -> int | None:
    """The cuda_graph_max_bs SGLang's default reserve counts: the largest of --cuda-graph-bs
    where given (server_args sets cuda_graph_max_bs = max(cuda_graph_bs) from 0.5.3, over
    --cuda-graph-max-bs; the reserve before 0.5.3 reads neither), else --cuda-graph-max-bs,
    else None (the memory tier's). --cuda-graph-bs 1 2 4 8 reserves 8 × 2 MiB."""
    if s.cudagraph_capture_sizes:
        return max(s.cudagraph_capture_sizes)
    return s.max_cudagraph_capture_size


def sglang_own_requests(dep: Deployment, pool: KVPool, s: EngineSettings) -> int:
    """max_running_requests as SGLang derives it from its KV cache's tokens (or takes it
    from --max-running-requests), before a state pool caps it (sglang_max_running_requests);
    where a state pool leaves the KV cache no token, the requests it asked for its request
    pool (max_num_reqs): it stops ('Not enough memory') before it halves the tokens."""
    context = s.max_model_len or served_positions(dep.model, dep.engine) or 131072
    if pool.state_request_bytes and pool.tokens < 1:
        return sglang_requests_asked(pool.tokens, context, s.max_num_seqs, s.engine_version)
    return sglang_max_running_requests(pool.tokens, context, s.max_num_seqs, s.engine_version)
