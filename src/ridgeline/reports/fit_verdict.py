"""`ridgeline fit`'s verdict and its headline: does not fit, fits under the ridge, or clears
it, with the one line that says why."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ridgeline.capacity import admission_gate, context_refusal, start_trim_caution
from ridgeline.context_length import served_positions
from ridgeline.load_peak import load_peak_reason
from ridgeline.memory import KVPool
from ridgeline.reports.fit_ranks import each_rank_note
from ridgeline.reports.fit_state import (
    fixed_state_size,
    running_requests_for,
    running_slots,
    set_by_cache_size,
    state_overrun,
    state_overrun_reason,
)
from ridgeline.reports.fit_target import (
    seats_bind,
    seats_first_words,
    target_clause,
    target_words,
)
from ridgeline.reports.fit_terms import cap_flag, host_cache_unbounded, is_llamacpp, per_gpu
from ridgeline.roofline import first_whole_batch
from ridgeline.sglang_hybrid import sglang_slots_per_request, sglang_state_ratio
from ridgeline.sglang_memory import sglang_data
from ridgeline.stages import micro_batches
from ridgeline.units import GIB, fmt_binary_bytes, plural

if TYPE_CHECKING:
    from ridgeline.floors import DecodeFloor
    from ridgeline.reports.fit import FitReport

DOES_NOT_FIT = "does not fit"
UNDER_RIDGE = "fits, under the ridge"
CLEARS_RIDGE = "clears the ridge"
# each verdict's code, for a program (--json's verdict_code beside the prose verdict)
VERDICT_CODES = {DOES_NOT_FIT: "does_not_fit", UNDER_RIDGE: "fits_under_ridge",
                 CLEARS_RIDGE: "clears_ridge"}


def verdict_line(r: FitReport) -> str:
    """The verdict and what decides it: for a deployment that does not fit, what binds (a
    length refused, the state pool, a pool set past the card, or memory short by how much);
    for one that fits, whether its batch reaches the ridge."""
    d, p = r.deployment, r.pool
    floor = memory_bound_floor(r)  # None unless the batch clears the ridge
    verdict = r.verdict.upper() if r.verdict == DOES_NOT_FIT else r.verdict
    headline = (f"{verdict}: {r.conversations:,} "
                f"{plural(r.conversations, 'conversation')} of {r.context:,} "
                f"{plural(r.context, 'token')}{target_words(r)}")
    if r.verdict != DOES_NOT_FIT and seats_bind(r) and not is_llamacpp(p):
        # the seats bind: lead with what the launch runs at once, then what the pool holds
        headline = f"{r.verdict}: {seats_first_words(r)}"
    slots = r.verdict != DOES_NOT_FIT and is_llamacpp(p) and seats_bind(r)
    if slots:  # the slots bind: lead with what the printed llama-server command runs
        headline = (f"{r.verdict}: the memory holds {r.conversations:,} "
                    f"{plural(r.conversations, 'conversation')} of {r.context:,} "
                    f"{plural(r.context, 'token')}, the llama-server command below runs "
                    f"{r.batch:,} at once (-np {p.max_num_seqs:,}){target_clause(r)}")
    if slots and host_cache_unbounded(p, d):  # -ngl 0, no --host-memory-gib: the RAM decides
        from ridgeline.llamacpp_pool import host_cache_bytes

        each = host_cache_bytes(d, r.context) / GIB
        headline = (f"{r.verdict}: the KV cache is in host memory (-ngl 0), which the GPU does "
                    f"not bound: the llama-server command below runs {r.batch:,} "
                    f"{plural(r.batch, 'conversation')} of {r.context:,} tokens at once "
                    f"(-np {p.max_num_seqs:,}), {each:,.3f} GiB of host memory each; "
                    "--host-memory-gib counts how many the host's RAM holds")
    if r.verdict == DOES_NOT_FIT and not r.target and not r.conversations:
        # no target given: say what fails, rather than a target of one nobody set
        headline = f"DOES NOT FIT: not even one conversation of {r.context:,} tokens fits"
    if r.verdict == DOES_NOT_FIT and context_refusal(d, r.context):
        headline = f"DOES NOT FIT: {context_refusal(d, r.context)}"
    elif r.verdict == DOES_NOT_FIT and p.load_overflow:
        headline = f"DOES NOT FIT: {load_peak_reason(p, d, r.settings.engine_version)}"
    elif r.verdict == DOES_NOT_FIT and state_overrun(p):
        headline = f"DOES NOT FIT: {state_overrun_reason(r)}"
    elif r.verdict == DOES_NOT_FIT and p.state_request_bytes and p.max_num_seqs < 1 \
            and (r.conversations or (not p.state_slots and p.blocks > 0)):
        per = sglang_slots_per_request(r.settings.prefix_caching is not False,
                                       r.settings.engine_version, d.model)
        zero = sglang_data()["mamba_pool"]["no_running_request"]
        if p.state_slots:
            headline = (f"DOES NOT FIT: SGLang runs no request at once: its state pool's "
                        f"{p.state_slots:,} {plural(p.state_slots, 'slot')} leave "
                        f"max_running_requests at {p.state_slots:,} // {per}"
                        " = 0 (a running request's state and its radix cache's), so it "
                        f"would refuse to start ('{zero}'); a bigger pool or "
                        "--disable-radix-cache")
        else:  # carved: the ratio's share of the static pool holds no request's state
            ratio = sglang_state_ratio(r.settings.engine_version)
            headline = (f"DOES NOT FIT: SGLang runs no request at once: its state pool "
                        f"holds no request's state (mamba_full_memory_ratio {ratio:g}: "
                        f"{p.pool_bytes / GIB:,.4f} GiB static pool × {ratio:g} ÷ "
                        f"{1 + ratio:g} = {p.pool_bytes * ratio / (1 + ratio) / GIB:,.4f} "
                        f"GiB, less than one request's "
                        f"{p.state_request_bytes / GIB:,.4f} GiB), which leaves "
                        f"max_running_requests at 0 // {per} = 0, so it would refuse to "
                        f"start ('{zero}'); a bigger pool")
    elif r.verdict == DOES_NOT_FIT and p.overflow_bytes:
        headline = (f"DOES NOT FIT: the {p.set_pool_bytes / GIB:,.2f} GiB pool "
                    f"--kv-cache-memory-bytes sets overruns the card by "
                    f"{p.overflow_bytes / GIB:,.2f} GiB {per_gpu(p)} (the weights, the profiled "
                    f"peak, non-torch memory and CUDA graphs leave "
                    f"{max(0.0, p.rest_bytes) / GIB:,.2f} GiB); vLLM skips its memory "
                    "check for a set pool, so it would run out of memory (allocating the "
                    "cache or capturing graphs at start-up, or later under load) rather "
                    "than refuse")
    elif r.verdict == DOES_NOT_FIT and p.state_pool_fixed and not r.shortfall_bytes \
            and r.rank_target > p.state_slots:  # the slots bind, not the memory
        want = max(1, r.target or 1)
        headline += (f"{_against(r)}: its state pool holds "
                     f"{p.state_slots:,} requests' states{each_rank_note(d)} "
                     f"({fixed_state_size(r.settings, d.model)}), a conversation each, and "
                     "the memory is not short: " + (
                         f"--max-mamba-cache-size {want * running_slots(r):,} holds them, "
                         f"{running_slots(r)} state slots each"
                         if set_by_cache_size(r.settings, d.model) else
                         f"--max-running-requests {running_requests_for(r, want):,} to "
                         f"{r.most_running_requests:,} holds them, a state slot each"))
    elif r.verdict == DOES_NOT_FIT:
        short = r.shortfall_bytes / GIB
        share = p.free_fraction_of_rest
        if 0 < share < 1:  # TensorRT-LLM's pool takes a share of what is left: memory ≠ pool
            headline += (f"{_against(r)}; the memory is short by "
                         f"{_short_words(r.shortfall_bytes)} {per_gpu(p)}"
                         + (f" (the pool, {share:g} of what is left, by "
                            f"{short * share:,.1f} GiB)" if p.rest_bytes >= 0 else ""))
        else:
            headline += (f"{_against(r)}; the pool is short by "
                         f"{_short_words(r.shortfall_bytes)} {per_gpu(p)}")
        if r.refused_start and r.start_blocks is not None and p.rest_bytes >= 0:
            windows = p.groups is not None and bool(p.groups.windows)
            headline += (f" (vLLM refuses to start: one {r.context:,}-token request "
                         f"asks {r.start_blocks:,} blocks of the pool's {p.blocks:,}"
                         + (", its window layers at window + "
                            + ("max_num_batched_tokens)" if p.in_flight_batches == 1 else
                               f"{p.in_flight_batches} × max_num_batched_tokens in flight)")
                            if windows else ")"))
        elif trim := _start_trim(r):
            headline += f"; {trim}"
        elif r.never_admitted:
            headline += (f" (vLLM {p.accounting.version if p.accounting else ''} starts, "
                         f"but its admission gate charges a {r.context:,}-token prompt "
                         f"{p.admission_blocks(r.context):,} blocks, its window layers the "
                         f"whole prompt, and the pool holds {p.blocks:,}: such a request "
                         "waits forever, issue #39734; v0.20 charges a window its window "
                         "and a prefill's room)")
        elif p.state_pool_fixed and r.rank_target > p.state_slots:
            headline += (f" (and its state pool holds {p.state_slots:,} requests' "
                         f"states{each_rank_note(d)}, {fixed_state_size(r.settings, d.model)}: "
                         + (f"--max-mamba-cache-size {max(1, r.target or 1) * running_slots(r):,}"
                            " gives each conversation its slots"
                            if set_by_cache_size(r.settings, d.model) else
                            f"--max-running-requests "
                            f"{running_requests_for(r, max(1, r.target or 1)):,} gives each "
                            "conversation one")
                         + ", and the shortfall counts their states)")
        elif p.rest_bytes < 0 and is_llamacpp(p):
            headline += (f" (the weights, the runtime and the compute buffer alone "
                         f"overflow its {p.total_bytes / GIB:,.1f} GiB)")
        elif p.capped:
            tokens = -(-int(r.per_conversation_bytes * max(1, r.target or 1))
                       // int(p.page_bytes)) * p.block_size
            left = max(0.0, p.rest_bytes * p.free_fraction_of_rest)
            if p.state_request_bytes:  # SGLang caps what its state pool leaves
                left = max(0.0, p.pool_bytes - p.slot_cache_bytes)
            room = int(left // p.page_bytes) * p.block_size
            headline += (f" ({cap_flag(p)} caps it at {p.token_cap:,} tokens; "
                         + (f"{tokens:,} would hold it, and the memory leaves room for "
                            f"{room:,})" if tokens <= room else
                            f"the memory leaves room for only {room:,})"))
        elif p.set_pool_bytes:
            need = p.pool_bytes + r.shortfall_bytes
            headline += (f" (--kv-cache-memory-bytes {int(need)}, {need / GIB:,.2f} GiB, "
                         f"would hold it; the card "
                         f"has room for {p.rest_bytes / GIB:,.2f} GiB)" if need <= p.rest_bytes
                         else f" (the card has room for {p.rest_bytes / GIB:,.2f} GiB)")
        elif p.weights_overflow:
            headline += (f" (the weights alone, {p.weight_bytes / GIB:,.1f} GiB {per_gpu(p)}, "
                         f"exceed the card's {p.total_bytes / GIB:,.1f} GiB: it could not "
                         "load them)")
        elif p.rest_bytes < 0 and p.seat_state_bytes:
            headline += (f" (TensorRT-LLM reserves Mamba state for every one of "
                         f"--max_batch_size {p.max_num_seqs:,} seats, "
                         f"{p.seat_state_bytes / GIB:,.1f} GiB {per_gpu(p)})")
        elif p.rest_bytes < 0:
            headline += f" ({_overflow(p)})"
    elif r.verdict == UNDER_RIDGE and slots:
        headline += (f"; a batch of {r.batch_label()} is under the ridge "
                     f"({first_whole_batch(r.ridge_batch):,}): {_any_load_words(r)}")
    elif r.verdict == UNDER_RIDGE:
        headline += (f"; the batch they allow ({r.batch_label()}) is under the ridge "
                     f"({first_whole_batch(r.ridge_batch):,}): {_any_load_words(r)}")
    elif floor is not None:  # the weights' matmuls clear the ridge, the whole step does not
        headline += _memory_bound_words(r, floor)
    elif micro_batches(d) > 1 or d.data_parallel_size > 1:
        headline += (f"; a batch of {r.batch_label()}, reaches the ridge "
                     f"({first_whole_batch(r.ridge_batch):,})")
    else:
        headline += f"; a batch of {r.batch:,} reaches the ridge ({first_whole_batch(r.ridge_batch):,})"
    if r.verdict == CLEARS_RIDGE and floor is None and _experts_under_ridge(r):
        headline += (" in the weights every token reads; the routed experts stay "
                     "bandwidth-bound (caution below)")
    return headline + _host_weights_words(r)


def _any_load_words(r: FitReport) -> str:
    """The under-the-ridge verdict's close: "bandwidth-bound at any load", and where the
    context is the model's own, --max-model-len not given (``FitReport.ridge_context``), that
    this is that context's, with the longest whose batch reaches the ridge: "… at any load at
    this full 131,072-token context; at 6,656 tokens or fewer (--max-model-len) its batch
    reaches the ridge"."""
    words = "bandwidth-bound at any load"
    if r.ridge_context is None:
        return words
    return (f"{words} at this full {r.context:,}-token context; "
            + (f"at {r.ridge_context:,} tokens or fewer (--max-model-len) its batch reaches "
               "the ridge" if r.ridge_context else "no shorter context's batch reaches it"))


def _experts_under_ridge(r: FitReport) -> bool:
    """An MoE whose routed experts, at B × routed fraction tokens each, stay under their
    own ridge at the batch that clears the weights every token reads."""
    return r.deployment.model.moe is not None and r.expert_batch < r.expert_ridge_batch


def _memory_bound_words(r: FitReport, floor: DecodeFloor) -> str:
    """The clearing verdict's clause where the matmuls over the weights every token reads
    clear the ridge but the whole step stays memory-bound: the batch and the ridge they
    clear, then what keeps the step on memory, the KV cache each conversation reads alone
    (at bandwidth), with the floor's two times as the caution gives them. Falcon-7B on an
    A10 at 2,000 tokens: a batch of 256 clears 209, and the caches' 4.2 GB add 7.0 ms, 31.4
    ms of memory against 30.7 of arithmetic."""
    d = r.deployment
    moe = d.model.moe is not None
    experts = _experts_under_ridge(r)
    kv_ms = floor.kv_bytes_read / d.bandwidth_bytes_per_s * 1e3
    matmuls = "the matmuls over the weights every token reads" if moe \
        else "the weights' matmuls"
    return (f"; {matmuls} clear the ridge ({first_whole_batch(r.ridge_batch):,}) at a batch of "
            f"{r.batch_label()}, but the {'MoE ' if moe else ''}step stays memory-bound there: the KV cache "
            f"reads, private to each conversation, add {kv_ms:,.1f} ms"
            + (", and the routed experts stay under their ridge" if experts else "")
            + f" ({floor.memory_time_s * 1e3:,.1f} ms memory vs "
            f"{floor.compute_time_s * 1e3:,.1f} ms arithmetic; "
            + ("cautions" if experts else "caution") + " below)")


def _host_weights_words(r: FitReport) -> str:
    """Where a llama.cpp deployment fits only by keeping weights in host memory (-ngl N,
    --n-cpu-moe, or --fit's own placement) and no --host-memory-gib checks the RAM, the
    clause that says so, since "fits" alone reads as the card holding the model: Llama-3.1-
    405B fp16 on one 16 GB MI50 fits with 746.11 GiB of its weights on the host."""
    from ridgeline.offload import host_weight_bytes

    o = r.deployment.offload
    if r.verdict == DOES_NOT_FIT or o is None or o.host_memory_bytes is not None:
        return ""
    host = host_weight_bytes(r.deployment)
    if host <= 0:
        return ""
    return (f" — with {host / GIB:,.2f} GiB of weights in host memory, which the host's RAM "
            "must hold (--host-memory-gib checks it)")


def logged_concurrency_line(r: FitReport) -> str | None:
    """Where vLLM's logged 'Maximum concurrency' is not the headline's count: the log
    figure, how vLLM counts it and why the headline's count runs. vLLM charges each request
    the most blocks it ever holds (window groups: the window plus a prefill's room); one
    decoding holds less, and only the prompt being admitted needs that room.
    gpt-oss-120b on one H200 at 131,072 tokens: 116,877 ÷ 9,225 = 12.67x logged, 14 run.
    None where the two agree, nothing fits, or the engine logs no such figure."""
    d, p = r.deployment, r.pool
    if p.groups is None or p.accounting is None or p.accounting.engine == "V0" \
            or r.conversations < 1 or (r.settings.max_model_len or r.context) != r.context:
        return None
    held = r.conversations // d.data_parallel_size
    logged = p.concurrency(r.context)
    if held == int(logged):
        return None
    charged, decoding = p.request_blocks(r.context), p.groups.peak_decode_blocks(r.context)
    gate = admission_gate(p, r.context)
    why = f"a decoding request holds {decoding:,} blocks"
    if gate is not None:
        free = "them" if gate[0] == charged else f"{gate[0]:,} blocks"
        only = "only " if held > logged else ""  # v0.19's gate asked more: fewer run
        why = f"{only}the prompt being admitted needs {free} free and {why}"
    rank = " on each rank" if d.data_parallel_size > 1 else ""
    return (f'vLLM will log "Maximum concurrency for {r.context:,} tokens per request: '
            f'{logged:.2f}x": {p.blocks:,} blocks ÷ {charged:,}, the most vLLM lets one request hold; '
            f"{held:,} run at once{rank}, as {why}")


def memory_bound_floor(r: FitReport) -> DecodeFloor | None:
    """Where the batch clears the ridge in the weights every token reads but the whole step,
    every cache read at the full context, stays memory-bound: decode's floor of that step
    (``decode_floor``: under PP, a micro-batch's trip); else None. Qwen3-235B-A22B on 8
    H200s at 4,000 tokens: 385 conversations, 27.8 ms of memory against 2.8 of arithmetic."""
    from ridgeline.floors import decode_floor

    if r.verdict != CLEARS_RIDGE:
        return None
    floor = decode_floor(r.deployment, r.batch, r.context)
    return floor if floor.bound == "memory bandwidth" else None


def _start_trim(r: FitReport) -> str:
    """Where SGLang or TensorRT-LLM starts at the context asked (its default where it is the
    model's) with a pool too short for one such sequence, what it trims a request to
    (capacity.start_trim_caution, as simulate and plan say it); else "". Llama-3.1-70B in fp8
    on one H100 under trtllm: max_seq_len 131,072 reduced to the pool's 27,776 tokens."""
    d = r.deployment
    if d.engine not in ("sglang", "trtllm"):
        return ""
    given = None if r.context == served_positions(d.model, d.engine) else r.context
    return start_trim_caution(d, replace(r.settings, max_model_len=given), given)


def _short_words(short_bytes: float) -> str:
    """A shortfall in GiB, to 0.1 (to 0.01 under 0.1 GiB); one under 0.005 GiB, which would
    read '0.00 GiB', in the binary unit that shows it (SGLang's Gemma-3-27B on one H100 at
    --context-length 30,956: 180.8 KiB, under a token's 496 KiB)."""
    short = short_bytes / GIB
    if 0 < short < 0.005:
        return fmt_binary_bytes(short_bytes)
    return f"{short:,.{2 if 0 < short < 0.1 else 1}f} GiB"


def _against(r: FitReport) -> str:
    """' against a target of 32' where the user gave one; else nothing (the headline then
    says what fails without a target of one nobody set)."""
    return f" against a target of {r.target:,}" if r.target else ""


def _overflow(p: KVPool) -> str:
    """Which of what comes before the cache overflow the memory reserved: the weights and the
    profiling pass, or, after them, the CUDA graphs and the sampler's seats."""
    budget = p.total_bytes * p.reserved_fraction
    first = p.weight_bytes + p.lora_bytes + p.activation_bytes + p.non_torch_bytes \
        + p.mm_reserve_bytes
    # SGLang runs no profiling pass (its activations live outside mem_fraction_static): what
    # overflows there is the weights and the CUDA context and TP communicators, its row
    taken = "the weights and the CUDA context and TP communicators" if p.engine == "sglang" \
        else "the weights and the profiling pass"
    if first > budget:
        return f"{taken} alone overflow the {budget / GIB:,.1f} GiB it reserves"
    later = (("CUDA graphs", p.cuda_graph_bytes), ("sampler's seats", p.seat_buffer_bytes),
             ("Mamba state of every seat", p.seat_state_bytes),
             ("margin it keeps free after warm-up", p.kept_free_bytes))  # the last: v0.34+
    rest = " and the ".join(name for name, size in later if size > 0)
    return (f"{taken} take {first / GIB:,.2f} of the "
            f"{budget / GIB:,.2f} GiB it reserves, and the {rest} "
            f"({sum(size for _, size in later) / GIB:,.2f} GiB) overflow it")
