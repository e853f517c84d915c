"""`ridgeline fit --explain`: the steps behind the pool and what it holds (the binding pipeline
stage, the KV pool per GPU as each engine sizes it or as --kv-cache-memory-bytes sets it, the
conversations it holds, vLLM's start-up check, the pool in blocks, the shortfall and the
levers), each with its inputs and their sources."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ridgeline.capacity import (
    admission_gate,
    context_refusal,
    past_trained_context,
    refuses_to_start,
    reserved_blocks,
)
from ridgeline.decode_context import dcp_log_line
from ridgeline.deployment import Deployment
from ridgeline.engine_runs import seats_knob
from ridgeline.engine_windows import has_windows
from ridgeline.explain import Quantity, Step, q, step
from ridgeline.layouts import LINEAR, MAMBA
from ridgeline.lora_slots import engine_lora_modules
from ridgeline.memory import EngineSettings, KVPool, device_memory_note, stage_pools
from ridgeline.reports.fit_budget_steps import (
    accounting_quantity,
    llamacpp_pool_step,
    peak_quantities,
    window_rule,
)
from ridgeline.reports.fit_offload import offload_steps
from ridgeline.reports.fit_state import running_step, state_pool_note, state_shortfall_step
from ridgeline.reports.fit_terms import cap_flag, is_llamacpp, logs_concurrency_tokens, per_gpu
from ridgeline.reports.fit_verdict import DOES_NOT_FIT
from ridgeline.reports.fit_weights import weights_note
from ridgeline.sglang_hybrid import sglang_state_dtypes, sglang_state_ratio
from ridgeline.sglang_lora import SGLangLoRASettings
from ridgeline.sglang_memory import sglang_data
from ridgeline.sglang_page import sglang_page_size
from ridgeline.units import GIB, MIB
from ridgeline.vllm_eplb import replicas_note
from ridgeline.vllm_graphs import (
    capture_cap,
    capture_ceiling,
    capture_sizes,
    listed_sizes,
    sm100_card,
    split_grids,
    splits,
)
from ridgeline.vllm_hybrid import ssm_state_dtype, ssm_state_dtype_why
from ridgeline.vllm_memory import indexer_decode_logits_bytes
from ridgeline.vllm_pool import (
    full_decode_tokens,
    graph_multiple,
    graph_query_len,
    served_length,
    vllm_deployment,
    vllm_seats_note,
)

if TYPE_CHECKING:
    from ridgeline.reports.fit import FitReport


def stage_steps(dep: Deployment, s: EngineSettings, pool: KVPool) -> tuple[Step, ...]:
    """The pipeline's stages, each pool's blocks, and the one that binds."""
    if pool.stage is None:
        return ()
    pools = stage_pools(dep, s)
    return (step("binding pipeline stage", "every stage sizes a pool from its own weights "
                 "(its own layers', the embedding on the first, the lm_head on the last) and "
                 "its own layers' blocks; the engine keeps the fewest blocks"
                 + (" (vLLM V1 get_kv_cache_configs: the smallest num_blocks among workers)"
                    if pool.engine == "vllm" else ""),
                 q("binds", pool.stage.describe()),
                 q("layers per stage", ", ".join(str(p.stage.layers) for p in pools if p.stage),
                   "", "even, the remainder to the stages before the last (vLLM's "
                   "get_pp_indices; read as the same split for " + pool.engine + ")"
                   if pool.engine != "vllm" else
                   "vLLM get_pp_indices: even, the remainder to the stages before the last"),
                 q(f"weights {per_gpu(pool)} by stage",
                   ", ".join(f"{p.weight_bytes / GIB:,.2f}" for p in pools), "GiB"),
                 q("blocks by stage", ", ".join(f"{p.blocks:,}" for p in pools))),)


def reserved_steps(dep: Deployment, pool: KVPool, s: EngineSettings) -> tuple[Step, ...]:
    """The budget's "reserved (gpu_memory_utilization 0.92)" row: the memory the engine lets itself use, which
    the pool step then takes its terms from; none for llama.cpp (it reserves no fraction) or
    a pool --kv-cache-memory-bytes sets (the fraction is ignored there), which print no row."""
    if is_llamacpp(pool) or pool.set_pool_bytes:
        return ()
    return (step(f"reserved {per_gpu(pool)}", "total × reserved fraction",
                 q("reserved", pool.reserved_bytes / GIB, "GiB"),
                 q("total", pool.total_bytes / GIB, "GiB", device_memory_note(dep.accelerator)),
                 q("reserved fraction", pool.reserved_fraction, "",
                   _fraction_note(dep, pool, s))),)


def seat_state_note(pool: KVPool) -> str:
    """Where TensorRT-LLM's every-seat recurrent state comes from, with its division."""
    each = pool.seat_state_bytes / max(1, pool.max_num_seqs) / MIB
    return (f"{pool.max_num_seqs:,} seats (max_batch_size) × {each:,.1f} MiB of conv and SSM "
            "state: TensorRT-LLM to 1.2 allocates it for every seat before it measures the "
            "memory its cache may take (MambaCacheManager; inside the KV pool only after "
            "PR #12185)")


def pool_step(dep: Deployment, pool: KVPool, s: EngineSettings) -> Step:
    """The KV pool per GPU: llama.cpp's, one --kv-cache-memory-bytes sets, or what the
    engine's reserved fraction leaves after the weights, the profiled peak and the rest."""
    static = bool(pool.state_request_bytes)  # SGLang's hybrid: its state pool comes out next
    return (llamacpp_pool_step(dep, pool, s) if is_llamacpp(pool) else
            _set_pool_step(dep, pool, s) if pool.set_pool_bytes else
            step(f"static pool {per_gpu(pool)}" if static else f"KV pool {per_gpu(pool)}",
                 _floored(pool, "(total × reserved fraction − weights − activations − non-torch "
                 "− graphs" + (" − runtime buffers" if pool.engine_buffers else "")
                 + (" − every seat's Mamba state" if pool.seat_state_bytes else "")
                 + (" − KV transfer buffer" if pool.transfer_buffer_bytes
                    and not pool.transfer_after_fraction else "")
                 + ") × free fraction of the rest"
                 + (" − KV transfer buffer" if pool.transfer_buffer_bytes
                    and pool.transfer_after_fraction else "")
                 if pool.free_fraction_of_rest != 1 else
                 "total × reserved fraction − weights"
                 + (" − LoRA adapters" if pool.lora_bytes else "")
                 + " − non-torch"
                 + (" − multimodal buffers" if pool.mm_reserve_bytes else "")
                 + " (activations and CUDA graphs "
                 "live in the 1 − mem_fraction_static SGLang holds back)"
                 + (" + drafter headroom" if pool.headroom_bytes else "")
                 if pool.engine == "sglang"
                 else "total × reserved fraction − weights"
                 + (" − LoRA adapters" if pool.lora_bytes else "")
                 + " − activations − non-torch − graphs"
                 + (" − sampler state" if pool.seat_buffer_bytes else "")
                 + (" − drafter buffers" if pool.drafter_buffer_bytes else "")
                 + (" − kept free after warm-up" if pool.kept_free_bytes else "")),
                 q("static pool" if static else "pool", pool.pool_bytes / GIB, "GiB"),
                 q("total", pool.total_bytes / GIB, "GiB",
                   device_memory_note(dep.accelerator)),
                 q("reserved fraction", pool.reserved_fraction, "", _fraction_note(dep, pool, s)),
                 q(f"weights {per_gpu(pool)}", pool.weight_bytes / GIB, "GiB",
                   weights_note(dep, pool)),
                 *([q("of them redundant experts", pool.redundant_expert_bytes / GIB, "GiB",
                      replicas_note(dep, s.eplb))]
                   if pool.redundant_expert_bytes and s.eplb is not None else []),
                 *([q("LoRA adapters", pool.lora_bytes / GIB, "GiB", lora_note(dep, pool, s))]
                   if pool.lora_bytes else []),
                 *([q("multimodal buffers", pool.mm_reserve_bytes / 2**20, "MiB",
                      _mm_reserve_note(dep, pool, s))] if pool.mm_reserve_bytes else []),
                 *([q("drafter's cache a token", pool.drafter_kv_bytes_per_token / 1024, "KiB",
                      f"of {pool.kv_bytes_per_token / 1024:,.2f} KiB a token {per_gpu(pool)}: "
                      "SGLang v0.5.14+ loads the drafter before it sizes the pool and sizes "
                      "its cell × (1 + draft layers ÷ layers), the draft worker's cache as "
                      "many tokens as the target's (pool_configurator.py)"
                      + _draft_kv_note(s))]
                   if pool.engine == "sglang" and pool.drafter_kv_bytes_per_token else []),
                 *(peak_quantities(dep, pool) if pool.engine != "sglang" else ()),
                 *([q("max_num_seqs", pool.max_num_seqs, "", note)]
                   if pool.engine == "vllm" and (note := vllm_seats_note(dep, s)) else ()),
                 q("non-torch", pool.non_torch_bytes / GIB, "GiB",
                   "mem_fraction_static × (CUDA context + the TP communicators): SGLang applies "
                   "its fraction to the memory its distributed start-up leaves"
                   if pool.engine == "sglang" else
                   "CUDA context" + (", custom all-reduce buffers over NVLink"
                                     if pool.accounting and pool.non_torch_bytes
                                     > pool.accounting.non_torch_gib * GIB else "")),
                 *([q("CUDA graphs", pool.cuda_graph_bytes / GIB, "GiB",
                      f"layers × {_captured(dep, pool, s)} captured sizes{_capture_note(dep, pool, s)}"
                      f" × 0.45 MiB{_graph_logits_note(dep, pool, s)} (vLLM v0.21+ estimate"
                      + ("; it stands in for Model Runner V2's trial capture, v0.29+)"
                         if pool.runner == "MRV2" else ")")
                      if pool.cuda_graph_bytes else "not taken from the budget")]
                   if pool.engine != "sglang" else []),
                 *([q("runtime buffers and decoder", pool.seat_buffer_bytes / GIB, "GiB",
                      f"TensorRT engine backend: {pool.max_num_seqs:,} seats (max_batch_size) × "
                      f"(4 × vocab {dep.model.vocab_size:,} × 4 B + top-k scratch + 15 × "
                      "max_seq_len × 4 B), allocated before the cache is sized")]
                   if pool.engine_buffers else []),
                 *([q("Mamba state for every seat", pool.seat_state_bytes / GIB, "GiB",
                      seat_state_note(pool))] if pool.seat_state_bytes else []),
                 *([q("sampler state", pool.seat_buffer_bytes / GIB, "GiB",
                      f"Model Runner V2's persistent buffers: {pool.max_num_seqs:,} seats × (4 × "
                      f"vocab {dep.model.vocab_size:,} + 8 × vocab ÷ 32 + 17,924) B + 13 B × "
                      f"{pool.profile_tokens:,} tokens, held from start-up and counted from v0.27")]
                   if pool.seat_buffer_bytes and not pool.engine_buffers else []),
                 *_drafter_buffer_quantity(dep, pool, s),
                 *([q("kept free after warm-up", pool.kept_free_bytes / GIB, "GiB",
                      "vLLM v0.34+'s extensible KV cache, sized after warm-up and CUDA-graph "
                      "capture: min(budget, free at start-up − margin) − max(peak, torch's "
                      "reservation growth), so it keeps free the memory held before its "
                      "start-up snapshot (an estimate: 0.5 GiB at TP1, 0.75 past it) and "
                      "max(1 GiB, 0.75 × the transient peak) (3 GiB floor on ROCm) beyond what "
                      "1 − the fraction leaves, and at most a 2 MiB VMM granule a layer "
                      "(vllm_extensible.py)")]
                   if pool.kept_free_bytes else []),
                 *([q("KV transfer buffer", pool.transfer_buffer_bytes / GIB, "GiB",
                      "cache_transceiver_config: send + receive buffers, each (max_tokens_in_"
                      "buffer up to max_seq_len + one block) × KV bytes per token, or 512 MiB "
                      "without it (CacheTransBufferManager)")]
                   if pool.transfer_buffer_bytes else []),
                 *([q("drafter headroom", pool.headroom_bytes / GIB, "GiB",
                      f"{pool.headroom_tokens:,} tokens × KV bytes per token: SGLang "
                      "v0.4.3.post3-v0.5.6.post2 allocates max_running_requests × (the drafts "
                      "+ the drafts + 1 it verifies) + 100 tokens past its profile for a "
                      "drafter's draft and verify tokens (model_runner.py init_memory_pool)")]
                   if pool.headroom_bytes else []),
                 *([q("token cap", pool.token_cap, "tokens",
                      cap_flag(pool) + (": it binds, the pool is its blocks"
                                                         if pool.capped else ": above what memory "
                                                         "leaves, so it does not bind"))]
                   if pool.token_cap and not static else []),
                 *([q("free fraction of the rest", pool.free_fraction_of_rest, "",
                      "kv_cache_free_gpu_mem_fraction: TensorRT-LLM's share of the memory free "
                      "after the engine loads")] if pool.free_fraction_of_rest != 1 else []),
                 accounting_quantity(pool)))


def _floored(pool: KVPool, formula: str) -> str:
    """The pool's formula, as max(0, …) where what it leaves is negative and the pool is
    none (Qwen3-Next-80B's bf16 weights on one H200: 139.8 − 148.4 − … = −15.29 GiB, pool 0)."""
    after = pool.transfer_buffer_bytes if pool.transfer_after_fraction else 0.0
    return f"max(0, {formula})" if pool.rest_bytes * pool.free_fraction_of_rest - after < 0 \
        else formula


def state_pool_steps(dep: Deployment, pool: KVPool, s: EngineSettings) -> tuple[Step, ...]:
    """SGLang's state pool, taken from the static pool before the KV cache: the slots (the
    ratio's share of the static pool in whole requests' states, or the requests SGLang sets
    it at with its radix cache off), slots × one request's state, and the KV cache the
    rest (at most --max-total-tokens, which SGLang applies after the states)."""
    if not pool.state_request_bytes:
        return ()
    model = dep.model
    layers = ", ".join(f"{n} {kind}" for n, kind in ((model.count(mixer=MAMBA), "Mamba"),
                                                   (model.count(mixer=LINEAR), "linear"))
                       if n)
    conv, ssm = sglang_state_dtypes(model, s.mamba_ssm_dtype)
    per = q("state per request", pool.state_request_bytes / GIB, "GiB",
            f"{layers} layers' conv state ({conv}) and SSM state ({ssm}"
            + (f", --mamba-ssm-dtype {s.mamba_ssm_dtype}" if s.mamba_ssm_dtype else "")
            + f") ÷ TP "
            f"{dep.tensor_parallel_size}" + (" × the stage's share" if pool.stage is not None
                                             else ""))
    static = q("static pool", pool.pool_bytes / GIB, "GiB")
    rule = sglang_data()["mamba_pool"]
    out = []
    if pool.state_pool_fixed:
        slots = q("state slots", pool.state_slots, "", state_pool_note(pool, s, model))
    else:
        ratio = sglang_state_ratio(s.engine_version)
        out.append(step("state slots", "floor(static pool × ratio ÷ (1 + ratio) ÷ state per "
                        "request): the state pool is ratio × the KV cache, in whole requests' "
                        "states", q("state slots", pool.state_slots), static,
                        q("ratio", ratio, "", "mamba_full_memory_ratio, SGLang"
                          + (f" {s.engine_version}" if s.engine_version else "") + "'s default"
                          + (" (--max-running-requests sets no pool with the radix cache on)"
                             if s.max_num_seqs else "")),
                        per))
        slots = q("state slots", pool.state_slots, "", "the step above")
    out.append(step("state pool per GPU", "state slots × state per request"
                    + (" (SGLang sets the slots, not a share of the pool)"
                       if pool.state_pool_fixed else ""),
                    q("state pool", pool.slot_cache_bytes / GIB, "GiB"), slots, per))
    left = pool.pool_bytes - pool.slot_cache_bytes
    refusal = rule["state_pool_radix_off"]["overrun"]
    cap = [q("the cap's memory", pool.capped_bytes / GIB, "GiB",
             f"{cap_flag(pool)} {pool.token_cap:,} tokens in whole pages of {pool.block_size} "
             f"× KV bytes per token: " + ("it binds" if pool.capped else
                                         "above what the states leave, so it does not bind")
             + "; SGLang caps the tokens after taking the states from the uncapped rest")] \
        if pool.token_cap else []
    out.append(step("KV cache beside the state pool",
                    ("min(max(0, static pool − state pool), the cap's memory)" if cap else
                     "max(0, static pool − state pool)")
                    + (f": the states are {-left / GIB:,.4g} GiB more than the static pool, "
                       f"so SGLang stops at start-up ('{refusal}')" if left < 0 else
                       f" (SGLang stops at start-up where nothing is left: '{refusal}')"),
                    q("KV cache", pool.state_kv_bytes / GIB, "GiB"), static,
                    q("state pool", pool.slot_cache_bytes / GIB, "GiB"), *cap))
    return tuple(out)


def _captured(dep: Deployment, pool: KVPool, s: EngineSettings) -> str:
    """How many batch sizes vLLM captures for this pool's seats, drafts and token budget, as
    the graph memory counts them (vllm_graphs.capture_sizes: 51, or 59 for v0.34's split
    grids on a B200)."""
    version = pool.accounting.version if pool.accounting else None
    counted = capture_sizes(pool.max_num_seqs, s.max_cudagraph_capture_size,
                            pool.profile_tokens, _query_len(pool, s), _multiple(dep, pool, s),
                            version, s.cudagraph_capture_sizes, s.cudagraph_mode,
                            sm100_card(dep.accelerator))
    return f"{counted:g}"


def _graph_logits_note(dep: Deployment, pool: KVPool, s: EngineSettings) -> str:
    """The sparse indexer's decode logits the graph pool holds, in words, or "" (none for a
    model without an indexer, or where no decode graph is FULL)."""
    rows, length = full_decode_tokens(dep, pool, s), served_length(dep, s)
    logits = indexer_decode_logits_bytes(dep, rows, length)
    if not logits:
        return ""
    return (f" + {logits / MIB:,.0f} MiB of indexer logits ({rows:,} decode tokens × "
            f"max_model_len {length:,} × 4 B: the largest FULL decode graph's, allocated in "
            "the graph pool at capture)")


def _query_len(pool: KVPool, s: EngineSettings) -> int:
    """The decode query length this pool's vLLM scales its default capture cap by."""
    return graph_query_len(s, pool.accounting.version) if pool.accounting else 1


def _multiple(dep: Deployment, pool: KVPool, s: EngineSettings) -> int:
    """The multiple this pool's vLLM rounds its captured sizes to under speculative decoding."""
    if pool.accounting is None:
        return 1
    return graph_multiple(vllm_deployment(dep), s, pool.accounting, pool.runner)


def _capture_note(dep: Deployment, pool: KVPool, s: EngineSettings) -> str:
    """What caps vLLM's captured sizes, in words, or "": --max-cudagraph-capture-size, or the
    token budget where it is the smaller (vLLM captures no batch past it), or the drafts
    its default cap is scaled by (v0.13+); and, drafting, the multiple each size is rounded
    up to (v0.11.1+)."""
    query = _query_len(pool, s)
    multiple = _multiple(dep, pool, s)
    rounded = (f", each rounded up to a multiple of {multiple} (vLLM v0.11.1+ under "
               "speculative decoding)") if multiple > 1 else ""
    mode = (f"cudagraph_mode {s.cudagraph_mode}"
            + (", the decode sizes alone" if s.cudagraph_mode == "FULL_DECODE_ONLY" else "")
            + ", counted at the default FULL_AND_PIECEWISE's figure a size"
            if s.cudagraph_mode else "")
    if s.cudagraph_capture_sizes:
        listed = listed_sizes(s.cudagraph_capture_sizes, pool.profile_tokens)
        return (f" (the compilation config's cudagraph_capture_sizes: {len(listed)} sizes to "
                f"{listed[-1]:,}{rounded}" + (f"; {mode})" if mode else ")"))
    version = pool.accounting.version if pool.accounting else None
    if splits(version, sm100_card(dep.accelerator), s.max_cudagraph_capture_size,
              s.cudagraph_capture_sizes, s.cudagraph_mode, query, multiple):
        prefill, decode = split_grids(pool.max_num_seqs, pool.profile_tokens)
        return (f" (vLLM v0.34+ on an SM 10.x card: {len(prefill)} prefill graphs to "
                f"{prefill[-1]:,} tokens and {len(decode)} decode graphs to {decode[-1]:,} "
                "requests, one graph a size, so half as many sizes)")
    cap = _capture_note_cap(pool, s, query, rounded, capture_ceiling(
        version, sm100_card(dep.accelerator)))
    if not mode:
        return cap
    return f" ({cap[2:-1]}; {mode})" if cap else f" ({mode})"


def _capture_note_cap(pool: KVPool, s: EngineSettings, query: int, rounded: str,
                      ceiling: int = 512) -> str:
    """What caps vLLM's own list of captured sizes, in words, or "" (_capture_note);
    ``ceiling``: the default cap's most (vllm_graphs.capture_ceiling: a B200's 1,024)."""
    cap = capture_cap(pool.max_num_seqs, s.max_cudagraph_capture_size, query_len=query,
                      ceiling=ceiling)
    if pool.profile_tokens < cap:
        return f" (to the token budget, max_num_batched_tokens {pool.profile_tokens:,}{rounded})"
    if s.max_cudagraph_capture_size:
        return f" (to --max-cudagraph-capture-size {cap:,}{rounded})"
    if query > 1:
        return (f" (to min(2 × {pool.max_num_seqs:,} seats × {query} tokens a decode step, "
                f"{ceiling:,}) = {cap:,}: vLLM v0.13+ scales its cap by 1 + the drafts{rounded})")
    if ceiling != 512 and cap == ceiling:
        return (f" (to {cap:,}: vLLM v0.28+ caps its default at 1,024 on an SM 10.x card, 512 "
                f"elsewhere{rounded})")
    return f" ({rounded[2:]})" if rounded else ""


def _set_pool_step(dep: Deployment, pool: KVPool, s: EngineSettings) -> Step:
    """A pool --kv-cache-memory-bytes sets: vLLM takes it as given, unchecked; ridgeline checks
    it against the room the card leaves (nothing held where it overruns it)."""
    return step(f"KV pool {per_gpu(pool)}", "as set by --kv-cache-memory-bytes, if it fits in the room: "
                "total − weights − activations − non-torch − graphs"
                + (" − sampler state" if pool.seat_buffer_bytes else "")
                + (" − drafter buffers" if pool.drafter_buffer_bytes else ""),
                q("pool", pool.pool_bytes / GIB, "GiB"),
                q("set", pool.set_pool_bytes / GIB, "GiB",
                  "--kv-cache-memory-bytes (vLLM PR #21489: no profile check, "
                  "gpu_memory_utilization ignored)"),
                q("room", pool.rest_bytes / GIB, "GiB"),
                q("total", pool.total_bytes / GIB, "GiB", device_memory_note(dep.accelerator)),
                q(f"weights {per_gpu(pool)}", pool.weight_bytes / GIB, "GiB",
                  weights_note(dep, pool)),
                *peak_quantities(dep, pool),
                q("non-torch", pool.non_torch_bytes / GIB, "GiB", "CUDA context"),
                q("CUDA graphs", pool.cuda_graph_bytes / GIB, "GiB",
                  f"layers × {_captured(dep, pool, s)} captured sizes{_capture_note(dep, pool, s)}"
                  f" × 0.45 MiB{_graph_logits_note(dep, pool, s)}, captured after the pool"),
                *([q("sampler state", pool.seat_buffer_bytes / GIB, "GiB",
                     "Model Runner V2's persistent buffers")] if pool.seat_buffer_bytes else []),
                *_drafter_buffer_quantity(dep, pool, s),
                accounting_quantity(pool))


def _drafter_buffer_quantity(dep: Deployment, pool: KVPool, s: EngineSettings) -> list[Quantity]:
    """What Model Runner V2 holds for the drafter (vllm_mrv2_drafter), where it holds any."""
    from ridgeline.vllm_mrv2_drafter import describe_drafter_buffers

    if not pool.drafter_buffer_bytes or s.drafter is None:
        return []
    return [q("drafter buffers", pool.drafter_buffer_bytes / GIB, "GiB",
              describe_drafter_buffers(s.drafter, pool.max_num_seqs, served_length(dep, s)))]


def _fraction_note(dep: Deployment, pool: KVPool, s: EngineSettings) -> str:
    """Where the reserved fraction came from: the flag, or the engine's default (TRT-LLM's
    always the whole card, its flag the free fraction of what is left; SGLang's
    derived from the card as nvidia-smi shows it, with its reserve and the ranks the pool
    was sized with, and any cut for a vision tower)."""
    if pool.engine == "trtllm":  # it takes the whole card; its fraction is of the rest
        return ("trtllm: the whole card; the flag sets the free fraction of the rest"
                if s.gpu_memory_utilization is not None else "trtllm default")
    if pool.engine != "sglang":
        if s.gpu_memory_utilization is None and pool.kept_free_bytes:
            return ("vLLM v0.34+'s default under its extensible KV cache "
                    "(resolved_gpu_memory_utilization; 0.92 without it)")
        return "the flag" if s.gpu_memory_utilization is not None else f"{pool.engine} default"
    from ridgeline.sglang_memory import (
        RESERVED_MIB,
        TP_TABLE,
        sglang_gpu_mem_bytes,
        sglang_prefill_graphs_default,
    )
    from ridgeline.sglang_pool import sglang_rule

    rule, cut = sglang_rule(dep, s, pool.total_bytes)
    if s.gpu_memory_utilization is not None:
        return "the flag" + (f", {cut.note}" if cut.given_too and cut.factor != 1 else "")
    memory, smi = sglang_gpu_mem_bytes(dep.accelerator, pool.total_bytes)
    ranks = dep.expert_ranks * dep.pipeline_parallel_size
    if rule.era == TP_TABLE:
        base = f"SGLang's default at TP{dep.expert_ranks} (its table by TP size)"
    else:
        dp = dep.data_parallel_size
        base = (f"SGLang's default: ({memory / 2**20:,.0f} MiB − {rule.reserved_mib:,.0f} MiB "
                f"reserved) ÷ {memory / 2**20:,.0f} MiB = {rule.mem_fraction_static}, for a "
                f"prefill chunk of {rule.chunked_prefill_size:,} tokens, CUDA graphs to batch "
                f"{rule.cuda_graph_max_bs}"
                + ("" if not (s.max_cudagraph_capture_size or s.cudagraph_capture_sizes)
                   else f" ({_graph_flag(s)})" if rule.era == RESERVED_MIB
                   else f" ({_graph_flag(s)}, which this release's tier reserve does not "
                   "read)")
                + f" and {ranks} GPU{'s' if ranks > 1 else ''} (its "
                "--tp-size × --pp-size)"
                + (f", {rule.dp_attention_mib:,.0f} MiB of it for data-parallel attention over "
                   f"{dp} ranks" if rule.dp_attention_mib else "")
                + (f", {rule.prefill_graph_mib:,.0f} MiB of it for prefill CUDA graphs"
                   if rule.prefill_graph_mib else
                   f", no prefill CUDA graphs ({rule.prefill_graph_off})"
                   if rule.prefill_graph_off and sglang_prefill_graphs_default(s.engine_version)
                   else "")
                + (f", {rule.drafter_mib:,.0f} MiB of it for the drafter (its weights, its "
                   "cache and its CUDA graphs, loaded after the pool)" if rule.drafter_mib
                   else "")
                + ("; memory: nvidia-smi's memory.total (catalog), which SGLang reads" if smi
                   else "; memory: the runtime's total, as the pool's (nvidia-smi's "
                   "memory.total, which SGLang reads, is not in the catalog for this card)"))
    return base + (f"; {cut.note}" if cut.note else "")


def state_blocks_note(pool: KVPool) -> str:
    """How many of a request's blocks its state groups hold, whatever its length: one each
    without prefix caching, in mamba_cache_mode "align" the running state and the last
    block-aligned one, and a Mamba-2 prefill checkpoint from v0.32 (vllm_hybrid.py)."""
    g = pool.groups
    if g is None or not g.states:
        return ""
    kept = g.state_blocks - g.draft_blocks
    why = "one a group, whatever the length" if kept == 1 else \
        "prefix caching's mamba_cache_mode 'align': the running state, the last " \
        "block-aligned one" + (", a Mamba-2 prefill checkpoint" if kept > 2 else "")
    if g.draft_blocks:  # MambaSpec.num_speculative_blocks (vllm_pool.draft_state_blocks)
        why += f", and {g.draft_blocks} more, one a draft token"
    return f", {g.states} × {g.state_blocks} of them recurrent state ({why})"


def conversations_step(dep: Deployment, pool: KVPool, s: EngineSettings, context: int,
                       n: int, per_seq: float) -> Step:
    """The conversations of ``context`` tokens the pool holds (none past the trained
    context), and the bytes one takes."""
    if pool.state_request_bytes and not past_trained_context(dep, context):
        kv = q("KV cache", pool.state_kv_bytes / GIB, "GiB", "beside the state pool, above")
        slots = q("state slots", pool.state_slots, "", "each conversation holds one")
        if pool.block_size == 1:
            return step("conversations", "min(floor(KV cache ÷ bytes per conversation), state "
                        "slots)", q("conversations", n), kv, slots,
                        q("per conversation", per_seq / GIB, "GiB", f"{context} tokens, "
                          f"{dep.kv.id}" + (f"; {window_rule(dep, s)}" if has_windows(dep)
                                            else "")))
        return step("conversations", "min(floor(floor(KV cache ÷ bytes per page) × page size "
                    "÷ context), state slots)", q("conversations", n), kv, slots,
                    q("bytes per page", pool.page_bytes / 2**20, "MiB",
                      f"{pool.block_size} tokens × KV bytes per token {per_gpu(pool)}"),
                    q("page size", pool.block_size), q("context", context, "tokens"))
    gate = None if past_trained_context(dep, context) else admission_gate(pool, context)
    page_why = sglang_page_size(dep, s.engine_version, s.block_size)[1] \
        if pool.engine == "sglang" else ""
    if gate is not None:  # vLLM v0.19+: the prompt being admitted needs its windows' room free
        admission, decoding = gate
        return step("conversations", "min(floor(pool blocks ÷ blocks a decoding conversation "
                    "holds), 1 + floor((pool blocks − blocks to admit a prompt) ÷ blocks a "
                    "decoding conversation holds)): only the prompt being admitted needs its "
                    "windows' prefill room free (none where the pool is short of it)",
                    q("conversations", n), q("pool blocks", pool.blocks, "",
                                             f"{per_gpu(pool)}: the pool in blocks, as below"),
                    q("blocks a decoding conversation holds", decoding, "",
                      f"{context} tokens, {dep.kv.id}, across vLLM's {pool.groups.count} "
                      "KV-cache groups" if pool.groups else ""),
                    q("blocks to admit a prompt", admission, "", "its windows' prefill room "
                      "kept"))
    return step("conversations", f"none: {context_refusal(dep, context)}"
                if past_trained_context(dep, context) else
                "min(cells ÷ context, (cells' bytes + slots × per slot) ÷ "
                "(per conversation + per slot)): each conversation a slot, each slot its windows"
                if pool.slot_bytes_each else
                "floor((pool − the slots' window and recurrent cache) ÷ bytes per conversation)"
                if pool.slot_cache_bytes else
                "floor(pool ÷ bytes per conversation)", q("conversations", n),
                # the operand the formula names first: the pool step's result
                q("pool", pool.pool_bytes / GIB, "GiB", f"{per_gpu(pool)}, the step above"),
                *([q("slots' window and recurrent cache", pool.slot_cache_bytes / GIB, "GiB",
                     f"sized for {pool.max_num_seqs} slots (-np)")] if pool.slot_cache_bytes
                  else []),
                *([q("per slot", pool.slot_bytes_each / GIB, "GiB", "what one more slot adds: "
                     "its window (or context) cells and its state"),
                   # the min's other operands: the cells below, and what they take
                   q("cells", pool.tokens, "", "the pool's, below"),
                   q("context", context, "tokens"),
                   q("cells' bytes", pool.tokens * pool.kv_bytes_per_token / GIB, "GiB",
                     "cells × KV bytes per token"),
                   q("slots", pool.max_num_seqs, "", "-np")] if pool.slot_bytes_each
                  else []),
                q("per conversation", per_seq / GIB, "GiB", f"{context} tokens, {dep.kv.id}"
                  + (f" KV, SSM state {ssm_state_dtype(dep.model, pool.accounting.version)}"
                     if pool.groups and pool.groups.states and pool.accounting is not None
                     else "")
                  + (f"; {reserved_blocks(pool, context):,} whole blocks of {pool.block_size}, "
                     "as GUARANTEED_NO_EVICT reserves them" if reserved_blocks(pool, context)
                     else "")
                  + (f"; {pool.groups.peak_decode_blocks(context)} blocks of {pool.page_bytes / 2**20:,.2f}"
                     f" MiB across vLLM's {pool.groups.count} KV-cache groups"
                     + state_blocks_note(pool) if pool.groups and pool.groups.count > 1 else "")
                  + (f"; {window_rule(dep, s)}" if pool.windows_apart and has_windows(dep)
                     else "")
                  + (f"; pages of {pool.block_size}: {page_why}" if page_why else "")))


def start_steps(pool: KVPool, dep: Deployment, context: int) -> tuple[Step, ...]:
    """vLLM's start-up check, where its window groups make it more than one conversation."""
    g = pool.groups
    if g is None or not g.windows:
        return ()
    batches = pool.in_flight_batches
    budget = "max_num_batched_tokens" if batches == 1 else \
        f"{batches} × max_num_batched_tokens (batches in flight under async scheduling)"
    return (step("start-up check (vLLM refuses a pool short of it)",
                 "blocks one max_model_len request asks ≤ the pool's blocks; window groups at "
                 f"min(window − 1 + {budget}, tokens)",
                 q("starts", "yes" if not refuses_to_start(pool, dep, context) else "no"),
                 q("blocks asked", pool.request_blocks(context)), q("pool blocks", pool.blocks),
                 q("max_num_batched_tokens", pool.profile_tokens),
                 *((q("batches in flight", batches),) if batches > 1 else ())),)


def vllm_state_dtypes(dep: Deployment, version: str) -> str:
    """The dtypes vLLM keeps a hybrid's recurrent states in, and why (as `kv` says them):
    "SSM state fp32 (the config's mamba_ssm_dtype), conv state bf16"."""
    return f"SSM state {ssm_state_dtype(dep.model, version)} " \
        f"({ssm_state_dtype_why(dep.model, version)}), conv state {dep.model.dtype}"


def hybrid_block_step(r: FitReport) -> Step | None:
    """vLLM's block for a hybrid: the attention block grown, in steps of the alignment, until
    one attention layer's page holds one recurrent layer's state; None for any other pool.
    Qwen3.5-35B-A3B at TP 2: ⌈1,073,152 B ÷ (64 × 1,024 B)⌉ × 64 = 1088 tokens."""
    p, dep = r.pool, r.deployment
    g = p.groups
    if p.engine != "vllm" or g is None or not g.alignment or p.accounting is None:
        return None
    tp = dep.tensor_parallel_size
    return step("block size (a hybrid's attention page holds one layer's recurrent state)",
                "alignment × ⌈state per layer ÷ (alignment × attention bytes per token)⌉, "
                "or the block asked where larger",
                q("block", p.block_size, "tokens"),
                q("state per layer", g.state_layer_bytes, "B",
                  "one linear-attention/Mamba layer, one sequence, per GPU: "
                  f"{vllm_state_dtypes(dep, p.accounting.version)}"
                  + (f"; ÷ TP {tp}" if tp > 1 else "")),
                q("attention bytes per token", g.attention_token_bytes, "B",
                  f"one attention layer's K and V, {dep.kv.id}, per GPU"),
                q("alignment", g.alignment, "tokens", "the block asked or the kernel's 16, "
                  "whichever is larger (v0.20+; 16 before)"))


def held_steps(r: FitReport) -> tuple[Step, ...]:
    """The pool in blocks, the shortfall and the levers, each with its division."""
    p = r.pool
    unit = "cells" if is_llamacpp(p) else "blocks"
    slots = [q("slots' window cache", p.slot_cache_bytes / GIB, "GiB")] \
        if is_llamacpp(p) else []
    per_block = q(f"bytes per {unit[:-1]}", p.page_bytes / 2**20, "MiB",
                  f"{p.block_size} token(s) × KV bytes per token {per_gpu(p)}"
                  + (" across every KV-cache group" if p.groups else ""))
    hybrid = hybrid_block_step(r)
    out = [step("blocks the KV cache holds", "floor(KV cache ÷ bytes per block)",
                q(unit, p.blocks), q("KV cache", p.state_kv_bytes / GIB, "GiB",
                                     "beside the state pool, above"), per_block)
           if p.state_request_bytes else
           step(f"{unit} the pool holds", (f"floor((pool − {slots[0].name}) ÷ bytes per "
                                            f"{unit[:-1]})") if slots else
                f"floor(pool ÷ bytes per {unit[:-1]})", q(unit, p.blocks),
                q("pool", p.pool_bytes / GIB, "GiB"), *slots, per_block)]
    if hybrid is not None:
        out.append(hybrid)
    dcp = r.deployment.decode_context_parallel_size
    if dcp == 1 and not is_llamacpp(p) and not p.state_request_bytes \
            and p.logged_tokens(r.context) == p.blocks * p.block_size:
        # the text's "holds N tokens in B blocks": where it is the plain product (vLLM's
        # several KV-cache groups log concurrency × max_model_len instead, said on their line)
        out.append(step("tokens the pool holds", "blocks × block size",
                        q("tokens", p.logged_tokens(r.context)), q("blocks", p.blocks),
                        q("block size", p.block_size, "tokens")))
    out += logged_steps(r)
    if dcp > 1:
        logged = dcp_log_line(p, dcp)
        out.append(step("tokens the pool holds, dealt over the DCP ranks",
                        "blocks × tokens per block on one rank × -dcp (each rank holds every "
                        "Nth token of a block of N × block_size)", q("tokens", p.tokens),
                        q("blocks", p.blocks), q("tokens per block on one rank",
                                                 p.block_size // dcp),
                        q("-dcp", dcp, "", f'vLLM logs "{logged}"' if logged else
                          "vLLM v0.24+ counts it as concurrency × max_model_len, each "
                          "request's blocks ÷ N")))
    if p.state_request_bytes:
        out.append(running_step(r))
    if r.verdict == DOES_NOT_FIT and p.state_request_bytes \
            and not past_trained_context(r.deployment, r.context):
        out.append(state_shortfall_step(r))
    elif r.verdict == DOES_NOT_FIT and not past_trained_context(r.deployment, r.context):
        out.append(step(f"shortfall {per_gpu(r.pool)}", "(max(target × per conversation, start-up blocks) "
                        "+ slots' window cache) ÷ share of the rest for the cache − the rest",
                        q("shortfall", r.shortfall_bytes / GIB, "GiB"),
                        q("target", max(1, r.target or 1)),
                        q("per conversation", r.per_conversation_bytes / GIB, "GiB"),
                        q("start-up", r.start_bytes / GIB, "GiB"),
                        q("share of the rest", p.free_fraction_of_rest),
                        q("rest after weights and profiling", p.rest_bytes / GIB, "GiB")))
    out += advice_steps(r)
    out += offload_steps(r)
    if is_llamacpp(p) and r.batch:
        placed = r.deployment.offload is not None and bool(r.deployment.offload.fit_cells)
        out.append(step("llama-server -c", "the cells --fit placed for" if placed else
                        "batch × context: every running conversation its whole context",
                        q("-c", r.launch_cells), q("batch", r.batch), q("context", r.context)))
    out += [step(f"lever, {lv.name}", "min(conversations, seats): this fit re-run with the "
                 "one change, its conversations held (the engine's start-up check included)",
                 q("batch", lv.batch),
                 q("conversations", lv.conversations, "", f"of {lv.context:,} tokens"
                   if lv.context else ""),
                 q("seats", lv.seats, "", f"the engine's {seats_knob(p.engine)} under the change"))
            for lv in r.levers]
    return tuple(out)


def logged_steps(r: FitReport) -> tuple[Step, ...]:
    """vLLM's 'Maximum concurrency' and the tokens it logs for a pool of several KV-cache
    groups (or windowed or state groups), as the text's "holds N tokens as vLLM logs them"
    prints them: blocks ÷ the blocks one max_model_len request holds, then (v0.24+) that
    concurrency × max_model_len."""
    p = r.pool
    g = p.groups
    if g is None or not (g.count > 1 or g.windows or g.states
                         or logs_concurrency_tokens(p, r.context)):
        return ()
    concurrency = p.concurrency(r.context)
    out = [step("vLLM's maximum concurrency", "pool blocks ÷ blocks one max_model_len request "
                "holds (vLLM's start-up check's count" + (", window groups at their window "
                                                          "plus a prefill's room" if g.windows
                                                          else "") + ")",
                q("maximum concurrency", concurrency, "x"), q("pool blocks", p.blocks),
                q("blocks one request holds", p.request_blocks(r.context)))]
    logged = p.logged_tokens(r.context)
    if logged != p.tokens:  # v0.24+: the log's tokens are concurrency × max_model_len
        out.append(step("tokens vLLM logs", "floor(maximum concurrency × max_model_len) "
                        "(vLLM v0.24+ 'GPU KV cache size')", q("tokens", logged),
                        q("maximum concurrency", concurrency, "x"),
                        q("max_model_len", r.context, "tokens")))
    return tuple(out)


def advice_steps(r: FitReport) -> tuple[Step, ...]:
    """vLLM's start-up advice for --kv-cache-memory-bytes (vllm_pool.PoolAdvice): the card's
    memory (× the fraction requested, for the first) less what is taken and the margin."""
    terms, advice = r.advice_terms, r.advice
    if terms is None or advice is None:
        return ()
    device = "card" if r.pool.runtime_devices == 1 else "die"
    taken = q("taken", terms.taken_bytes / GIB, "GiB",
              "(weights + LoRA + activations + non-torch + seat buffers"
              + (" + drafter buffers" if r.pool.drafter_buffer_bytes else "")
              + f") per {device} "
              "+ CUDA graphs, the budget above")
    margin = q("margin", terms.margin_bytes / GIB, "GiB",
               "redundancy_buffer_memory, engines.json vllm.set_pool")
    return (step("start-up advice, fits the memory requested",
                 "total × gpu_memory_utilization − (taken + margin)",
                 q("--kv-cache-memory-bytes", advice[0] / GIB, "GiB", f"{int(advice[0])} bytes"),
                 q(f"memory per {device}", terms.total_bytes / GIB, "GiB"),
                 q("gpu_memory_utilization", terms.reserved_fraction), taken, margin),
            step(f"start-up advice, fills the {device}", "total − (taken + margin)",
                 q("--kv-cache-memory-bytes", advice[1] / GIB, "GiB", f"{int(advice[1])} bytes"),
                 q(f"memory per {device}", terms.total_bytes / GIB, "GiB"), taken, margin))


def _draft_kv_note(s: EngineSettings) -> str:
    """SGLang's --speculative-draft-kv-cache-dtype, where given (sglang_drafter.py)."""
    from ridgeline.sglang_drafter import sglang_draft_kv_note

    return sglang_draft_kv_note(s.drafter.draft_kv_cache_dtype if s.drafter else "")


def _mm_reserve_note(dep: Deployment, pool: KVPool, s: EngineSettings) -> str:
    """What SGLang's multimodal reserve holds (sglang_mm_reserve.py)."""
    from ridgeline.sglang_pool import sglang_pool_mm_reserve

    return sglang_pool_mm_reserve(dep, s, pool.total_bytes).note


def lora_note(dep: Deployment, pool: KVPool, s: EngineSettings) -> str:
    """Where the LoRA line comes from: each adapted module's buffers on one GPU, and the
    engine's rule for them (vllm_lora.py, sglang_lora.py)."""
    if s.lora is None:
        return ""
    run = vllm_deployment(dep) if dep.engine == "vllm" else dep
    parts = ", ".join(f"{m.name} {m.count:,} × {m.bytes_each / 2**20:,.2f} MiB"
                      for m in engine_lora_modules(run, s.lora, pool.stage))
    if isinstance(s.lora, SGLangLoRASettings):
        return (f"--enable-lora, {s.lora.describe()}: max_loras_per_batch × rank × (input + "
                "output) per slice of each targeted module, every layer, 2 bytes an element, "
                "allocated before SGLang sizes its pool (lora/mem_pool.py LoRAMemoryPool)"
                + (", the targets the adapters' (sized as the linear layers)"
                   if s.lora.targets_inferred else "") + f": {parts}")
    return (f"--enable-lora, {s.lora.describe()}: max_loras × rank × (input + output) per "
            f"slice of each adapted module (and per expert of a MoE layer's), 2 bytes an "
            f"element, allocated at load with the "
            f"weights (vllm/lora/layers create_lora_weights, from v0.12): {parts}")


def _graph_flag(s: EngineSettings) -> str:
    """The flag that set SGLang's largest CUDA-graph batch: --cuda-graph-bs's largest (0.5.3+
    takes it over --cuda-graph-max-bs), else --cuda-graph-max-bs."""
    return "--cuda-graph-bs's largest" if s.cudagraph_capture_sizes else "--cuda-graph-max-bs"
