"""`ridgeline fit`'s cautions: what holds the conversations back besides memory (seats, the
state pool, a token cap), what makes the sizing approximate (an engine version or backend
past what was checked), and a batch that clears the ridge in its weights but not in its step."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ridgeline.capacity import engine_seat_limit, held_conversations, refuses_to_start
from ridgeline.chunked_prefill import chunks_prefill, refuses_whole_prompt, whole_context_reason
from ridgeline.data_parallel import data_parallel_cautions
from ridgeline.datafiles import engine_defaults
from ridgeline.engine_platforms import vulkan_caution
from ridgeline.engine_windows import trtllm_window_caution
from ridgeline.parallel import deployment_cross_node_caution
from ridgeline.reports.fit_ranks import each_rank_note
from ridgeline.reports.fit_state import drafter_seats_note, running_slots
from ridgeline.reports.fit_terms import cap_flag, is_llamacpp, seats_name
from ridgeline.reports.fit_verdict import CLEARS_RIDGE, memory_bound_floor
from ridgeline.reports.simulate_cautions import version_cautions
from ridgeline.roofline import first_whole_batch
from ridgeline.sglang_lora import SGLangLoRASettings, sglang_lora_targets_caution
from ridgeline.sglang_page import sglang_page_size
from ridgeline.stages import micro_batch
from ridgeline.units import GIB, plural
from ridgeline.vllm_eplb import eplb_step_caution
from ridgeline.vllm_hybrid import cache_mode
from ridgeline.vllm_lora import lora_graph_caution
from ridgeline.vllm_mla_block import mla_block_size
from ridgeline.vllm_mla_cache import per_head_caution
from ridgeline.vllm_pool import indexer_eager_shortfall, served_length

if TYPE_CHECKING:
    from ridgeline.kvpool import KVPool
    from ridgeline.reports.fit import FitReport

NON_CUDA_VENDORS = ("google", "intel")  # TPU (JAX/XLA) and Gaudi backends: no CUDA graphs


def fit_cautions(r: FitReport) -> list[str]:
    """What holds the conversations back besides memory, or makes the context suspect."""
    from ridgeline.cpu_offload import cpu_offload_caution
    from ridgeline.reports.expectation import context_caution

    d = r.deployment
    out = [c for c in (r.fit_note, context_caution(d, r.context), d.model.architecture_caution,
                       per_head_caution(d.model),
                       cpu_offload_caution(d),
                       deployment_cross_node_caution(d),
                       *data_parallel_cautions(d, stepping=False))
           if c]
    seats, pool = engine_seat_limit(r.pool, r.deployment), r.pool
    per = state_capped_seats(r)
    if r.target and r.target > seats and r.conversations >= r.target and per:
        out.append(f"the pool holds the {r.target:,} conversations, but at most "
                   f"{seats:,} run at once: max_running_requests is the state pool's "
                   f"{pool.state_slots:,} slots // {per}{each_rank_note(d)} (the slots a "
                   "running request "
                   "takes), which --max-running-requests cannot raise; more state slots "
                   "(a larger static pool"
                   + (", or --disable-radix-cache: one slot a request" if per > 1 else "")
                   + ") run more")
    elif r.target and r.target > seats and r.conversations >= r.target:
        out.append(f"the pool holds the {r.target:,} conversations, but at most "
                   f"{seats:,} run at once ({seats_name(r.pool)}{drafter_seats_note(r)}): raise "
                   "it to run them together")
    p, d = r.pool, r.deployment
    if trtllm_window_caution(d):
        out.append(trtllm_window_caution(d))
    if p.token_cap and not p.capped:
        out.append(f"{cap_flag(p)} {p.token_cap:,} is more than the memory leaves "
                   f"({p.blocks * p.block_size:,} tokens): the engine keeps the smaller"
                   + (", as SGLang warns ('Use the profiled value instead')"
                      if p.engine == "sglang" else ""))
    if p.set_pool_bytes and r.settings.gpu_memory_utilization is not None:
        out.append("vLLM ignores --gpu-memory-utilization when --kv-cache-memory-bytes sets "
                   "the pool (its worker logs 'This does not respect the "
                   "gpu_memory_utilization config')")
    if p.runtime_devices > 1:
        n, acc = p.runtime_devices, d.accelerator
        from ridgeline.engine_names import engine_name

        out.append(f"{engine_name(p.engine)} runs each {acc.id} card's {n} dies as a GPU of "
                   f"its own ({p.total_bytes / n / GIB:,.2f} GiB), a tensor-parallel rank each "
                   f"(--tensor-parallel-size {d.tensor_parallel_size * n} for "
                   f"{d.tensor_parallel_size} x {acc.id}): its defaults are such a device's, "
                   "each profiles, captures its graphs and keeps its sampler state, and the "
                   f"rows above add the {n}")
    out += [c for c in (custom_card_caution(r),) if c]
    if vulkan_caution(p.engine, d.accelerator):
        out.append(vulkan_caution(p.engine, d.accelerator))
    if d.accelerator.vendor in NON_CUDA_VENDORS and not is_llamacpp(p):
        out.append(f"{p.engine} on {d.accelerator.id} is sized with the CUDA accounting "
                   "(a CUDA context, CUDA graphs, under the runtime's own names above); no "
                   "start-up log of its "
                   f"{d.accelerator.vendor} backend checks it: read the pool as approximate"
                   + ("; vLLM cannot query a TPU's memory, so it takes a small GPU's "
                      f"{p.max_num_seqs:,} seats and {p.profile_tokens:,}-token budget"
                      if p.engine == "vllm" and d.accelerator.vendor
                      in engine_defaults("vllm")["batch_defaults"]["memory_unknown_vendors"]
                      and r.settings.max_num_seqs is None
                      and r.settings.max_num_batched_tokens is None else ""))
    if d.accelerator.form == "soc" and d.accelerator.vendor != "apple" \
            and p.accounting is not None and p.kept_free_bytes:  # v0.34+: measured free
        out.append(f"{d.accelerator.id} shares its memory with the OS: vLLM "
                   f"{p.accounting.version} sizes its pool from the memory free after "
                   "warm-up, so what the OS, its page cache and other processes hold comes "
                   "out of the pool, beyond what this pool counts (drop the caches first)")
    elif d.accelerator.form == "soc" and d.accelerator.vendor != "apple" \
            and p.accounting is not None:
        out.append(f"{d.accelerator.id} shares its memory with the OS: vLLM refuses to "
                   f"start unless {p.reserved_fraction:g} × {p.total_bytes / GIB:,.2f} GiB "
                   f"= {p.reserved_fraction * p.total_bytes / GIB:,.1f} GiB is free at "
                   "start-up, and what the OS, its page cache and other processes hold "
                   "counts against that (drop the caches, or lower "
                   "--gpu-memory-utilization)")
    asked = r.settings.block_size
    if p.accounting is not None and asked and d.model.attention is not None \
            and d.model.attention.mla is not None:
        block, why = mla_block_size(d, p.accounting.version, asked)
        if block != asked:  # the MLA kernel overwrote the --block-size given
            out.append(why)
    if asked and p.engine == "sglang":  # the model's set-up overwrote --page-size
        page, why = sglang_page_size(d, r.settings.engine_version, asked)
        if page != asked:
            out.append(why)
    out += version_cautions(r.settings, p)
    if p.engine == "vllm" and p.kept_free_bytes and p.accounting is not None:
        out.append(profiled_range_caution(r))
    if p.accounting is not None and p.accounting.tp_caveat and d.tensor_parallel_size > 1:
        out.append(f"vLLM {p.accounting.version} {p.accounting.tp_caveat}")
    if p.accounting is not None and cache_mode(
            d.model, r.settings.prefix_caching, p.accounting.version) == "all":
        out.append(f"vLLM {p.accounting.version} with prefix caching keeps "
                   f"{d.model.name}'s Mamba state at every block (mamba_cache_mode 'all'), "
                   "which is not modelled: its blocks round up to the Mamba chunk and its "
                   "start-up check counts a state block per block of tokens, so it holds "
                   "fewer conversations than this sizing, which --no-prefix-caching (its "
                   "default before v0.28) matches")
    moe = d.model.moe
    if moe and r.verdict == CLEARS_RIDGE and r.expert_batch < r.expert_ridge_batch:
        out.append(f"MoE: the routed experts see B × {moe.routed_fraction:.3f} tokens each "
                   f"and reach the ridge only near batch {first_whole_batch(r.expert_ridge_batch):,}; "
                   f"at batch {r.batch_label()} they stay bandwidth-bound")
    if r.verdict == CLEARS_RIDGE:
        out += [c for c in (kv_bound_caution(r),) if c]
    if p.lora_bytes and p.cuda_graph_bytes:  # vLLM --enable-lora
        out.append(lora_graph_caution())
    if isinstance(r.settings.lora, SGLangLoRASettings) and p.lora_bytes:
        out += [c for c in (sglang_lora_targets_caution(r.settings.lora),) if c]
    if r.settings.eplb is not None:  # vLLM --enable-eplb: its balance is not priced
        out.append(eplb_step_caution(r.settings.eplb))
    out += [c for c in (indexer_eager_caution(r), whole_prompt_caution(r)) if c]
    return out


def whole_prompt_caution(r: FitReport) -> str:
    """TensorRT-LLM, running a context whole (enable_chunked_prefill off, its default), at a
    max_model_len past its max_num_tokens: the prompts between the two are refused, as
    `simulate` refuses them (chunked_prefill.refuses_whole_prompt, asked of the longest prompt
    the length admits), with the two levers that serve them and what the second leaves: the
    pool at --max-num-tokens of the length, whose activations profile grows with it.
    Llama-3.3-70B fp8 on 2 x H100 at 16,384: prompts past 8,192 refused; at
    --max-num-tokens 16,384 the pool still holds 15 conversations."""
    from ridgeline.memory import kv_pool

    d, s, p = r.deployment, r.settings, r.pool
    length = s.max_model_len or r.context
    chunked = chunks_prefill(d, s.enable_chunked_prefill)
    if d.engine != "trtllm" or not refuses_whole_prompt(length, p.profile_tokens, chunked):
        return ""
    raised = replace(s, max_num_batched_tokens=length)
    held = held_conversations(kv_pool(d, raised), d, r.context, length)
    # given, enable_chunked_prefill was turned off again (an MLA model on an Ampere or Ada card)
    turned_off = s.enable_chunked_prefill
    return (f"TensorRT-LLM refuses a prompt longer than max_num_tokens {p.profile_tokens:,} "
            f"while it runs a context whole ({whole_context_reason(turned_off)}: \"should not "
            f"exceed max_num_tokens\"), though max_model_len {length:,} admits it, as "
            "`simulate` refuses it: "
            + ("" if turned_off else "--enable_chunked_prefill runs such prompts in chunks, or ")
            + f"--max-num-tokens {length:,} runs them whole (its activations profile grows with "
            f"it: the pool then holds {held:,} {plural(held, 'conversation')} of "
            f"{r.context:,} tokens)")


def indexer_eager_caution(r: FitReport) -> str:
    """A DeepSeek Sparse Attention decode batch past vLLM's largest FULL CUDA graph runs
    eagerly, and its indexer's logits ([decode tokens, max_model_len] float32, as wide for a
    short request as for a long one) come from the memory left after the KV cache, which
    nothing in the budget sized for them: said where a decode of every seat, short requests
    filling max_num_seqs, outgrows the room the profile's peak left
    (vllm_pool.indexer_eager_shortfall), with the share of the card outside
    gpu_memory_utilization it would eat into; "" otherwise."""
    s, p, d = r.settings, r.pool, r.deployment
    drafts = s.drafter.tokens if s.drafter is not None else 0
    seats = engine_seat_limit(p, d)
    tokens = seats * (1 + drafts)
    need, room = indexer_eager_shortfall(d, p, s, tokens)
    if need <= room:
        return ""
    outside = p.total_bytes * (1 - p.reserved_fraction) / p.runtime_devices
    return (f"a decode of all {seats:,} seats{f' × {1 + drafts} tokens' if drafts else ''} "
            "(short requests) runs past vLLM's largest FULL CUDA graph, so eagerly: each "
            f"sparse layer's indexer then takes {need / GIB:,.2f} GiB a GPU (its float32 "
            f"logits, {tokens:,} × max_model_len {served_length(d, s):,} × 4 B however short "
            "the requests, with the step's queries and hidden states) from the memory left "
            f"after the KV cache, where the profile's peak left {room / GIB:,.2f} GiB; the "
            f"{(need - room) / GIB:,.2f} GiB more comes out of the {outside / GIB:,.1f} GiB "
            "outside --gpu-memory-utilization, and runs out of memory where that is taken: "
            "a --max-cudagraph-capture-size of the batch, fewer seats or a shorter "
            "--max-model-len keeps it inside the budget")


def state_capped_seats(r: FitReport) -> int:
    """Where SGLang's state pool sets max_running_requests (its slots // the slots a running
    request takes), those slots a request; else 0 (the seats are a flag's, which raises
    them)."""
    pool = r.pool
    per = running_slots(r) if pool.state_request_bytes else 0
    return per if per and pool.max_num_seqs == pool.state_slots // per else 0


def kv_bound_caution(r: FitReport) -> str:
    """Where the batch clears the ridge in the weights but the whole step, every cache read
    at the full context, stays memory-bound (the cache is private: batching never amortises
    it): Llama-3.1-8B on an H100 at 1,000 tokens, 444 conversations read 58.3 GB of cache
    beside 15.0 GB of weights a step, 22.3 ms of memory against 7.0 of arithmetic. The
    floor is decode's (``decode_floor``: under PP, a micro-batch's trip)."""
    d, b, s = r.deployment, r.batch, r.settings
    floor = memory_bound_floor(r)
    if floor is None:
        return ""
    micro = micro_batch(d, b)
    who = f"{b:,} conversations" if micro == b else \
        f"each micro-batch of {micro:,} conversations (of {b:,})"
    flags = f"--batch {b} --context {r.context} --max-model-len {r.context}" + (
        f" --usage {s.usage}" if d.engine == "vllm" else "")
    return (f"the matmuls over the weights every token reads reach the ridge at this batch, "
            f"but the whole step does not: {who} at {r.context:,} tokens read "
            f"{floor.kv_bytes_read / 1e9:,.1f} GB of KV cache beside "
            f"{floor.weight_bytes_read / 1e9:,.1f} GB of weights a step, "
            f"{floor.memory_time_s * 1e3:,.1f} ms of memory against "
            f"{floor.compute_time_s * 1e3:,.1f} ms of arithmetic at the floor, so it stays "
            "memory-bound; each cache is private, and batching never amortises it "
            f"(`ridgeline decode {flags}` with this deployment and its engine settings)")


def profiled_range_caution(r: FitReport) -> str:
    """vLLM 0.34+'s extensible KV cache, which no start-up log has checked, beside what 0.33's
    rules make of the same run (--no-enable-extensible-kv-cache: the pool the profile sizes,
    and the conversations it holds), so that the line gives the range
    (vllm_extensible.extensible_caution)."""

    from ridgeline.memory import kv_pool
    from ridgeline.reports.fit_terms import per_gpu
    from ridgeline.vllm_extensible import extensible_caution, profiled_settings

    d, p = r.deployment, r.pool
    profiled = kv_pool(d, profiled_settings(r.settings))
    held = held_conversations(profiled, d, r.context)
    words = extensible_caution(p.accounting.version if p.accounting else "",
                               profiled.pool_bytes / GIB, held, r.context, per_gpu(profiled))
    return words + (profiled_refusal_words(r, profiled) if not held else "")


def profiled_refusal_words(r: FitReport, profiled: KVPool) -> str:
    """After the 0.33 figures where they hold no conversation: what vLLM does at start-up
    with that pool, which is no slow service but none; the release before the extensible
    cache (0.33) is sized at its own defaults too, as plan's caution sizes it, and named
    where it refuses as well. Gemma-3-27B on one H100 at 131,072 tokens: 15.45 GiB, 3,164
    blocks where one request asks 3,686, so vLLM 0.33 refuses to start."""
    from ridgeline.errors import InputError
    from ridgeline.memory import kv_pool
    from ridgeline.plan_cautions import release_before
    from ridgeline.vllm_extensible import extensible_rule

    d = r.deployment
    if not refuses_to_start(profiled, d, r.context):
        return f": under them vLLM starts but runs no {r.context:,}-token conversation"
    before = release_before(str(extensible_rule()["from"]))
    try:  # the release before, at its own defaults (a setting it does not take: unnamed)
        prior = kv_pool(d, replace(r.settings, engine_version=before, extensible_kv_cache=None,
                                   gpu_memory_utilization=None))
        who = f"vLLM {before}" if refuses_to_start(prior, d, r.context) else ""
    except InputError:
        who = ""
    asked = profiled.request_blocks(r.context) if profiled.groups is not None else None
    return (f": under them {who or 'vLLM'} would refuse to start at {r.context:,} tokens, "
            "its pool short of one such request"
            + (f" ({asked:,} blocks asked of its {profiled.blocks:,})" if asked else ""))


def custom_card_caution(r: FitReport) -> str:
    """Why a card described by --peak-tflops/--bandwidth-gbs/--gpu-memory-gib holds fewer
    conversations than the catalog card it copies, or "": the engine sees 98.5 % of the GiB
    given (hardware.device_memory_bytes: no log pins its runtime total; an 80 GiB H100's is
    79.18), and, having no vendor, it is not taken for a CUDA or ROCm card, on which alone
    vLLM 0.34 runs its extensible KV cache (config/vllm.py), so vLLM sizes it by 0.33's
    rules at gpu_memory_utilization 0.92."""
    from ridgeline.engine_names import engine_name
    from ridgeline.hardware import CUSTOM_SOURCE, VISIBLE_MEMORY_FRACTION

    acc, p = r.deployment.accelerator, r.pool
    if acc.sources != (CUSTOM_SOURCE,) or acc.vendor:
        return ""
    parts = []
    if p.total_bytes < acc.memory_bytes * (1 - 1e-9):  # the runtime's share, estimated
        parts.append(f"{engine_name(p.engine)} is given {p.total_bytes / GIB:,.2f} GiB of the "
                     f"{acc.memory_size:g} GiB typed ({VISIBLE_MEMORY_FRACTION:.1%}: what the "
                     "runtime leaves of a discrete card where no start-up log pins its total; "
                     "a --gpu-file record's runtime_total_bytes sets it)")
    s = r.settings
    if p.engine == "vllm" and p.accounting is not None and p.accounting.extensible_kv_cache \
            and not p.kept_free_bytes and s.extensible_kv_cache is not False \
            and s.kv_cache_memory_bytes is None:
        parts.append("with no vendor it is not taken for a CUDA or ROCm card, the only ones "
                     f"vLLM {p.accounting.version} runs its extensible KV cache on, so its "
                     "pool is sized by 0.33's rules (--no-enable-extensible-kv-cache) at "
                     f"gpu_memory_utilization {p.reserved_fraction:g}; a --gpu-file record "
                     "with \"vendor\": \"nvidia\" or \"amd\" gets the extensible cache "
                     "(`ridgeline hardware h100 --json` is one to edit)")
    return "custom accelerator: " + "; ".join(parts) if parts else ""
