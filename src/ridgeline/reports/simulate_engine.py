"""`ridgeline simulate`'s engine line: the simulated engine's pool, seats and token budget
in its own flags' names (llama-server's slots, -b and -ub), how it admits and schedules, its
speculative decoding and overlapped scheduling, and a data-parallel deployment's ranks summed.

--json reads two of its parts: the policy (``capacity_policy``) and every rank's pool, seats
and token budget together (``all_ranks``)."""

from __future__ import annotations

from ridgeline.candidate import ENGINE_KNOB_NAMES
from ridgeline.reports.fit_terms import sglang_pool_words
from ridgeline.sim.config import SimConfig, tokens_per_step
from ridgeline.units import plural


def all_ranks(rank: SimConfig, ranks: int) -> tuple[int, int, int]:
    """A data-parallel deployment's KV blocks, seats and token budget, every rank's together,
    each of the ``ranks`` holding ``rank``'s own: DeepSeek-V3 at 32K on vLLM DP8 over 8 H200s,
    28,740 blocks and max_num_seqs 1024 a rank, 229,920 blocks and 8,192 seats in all."""
    return (rank.num_blocks * ranks, rank.max_num_seqs * ranks,
            rank.max_num_batched_tokens * ranks)


def _ranks_together(rank: SimConfig, ranks: int, engine: str) -> str:
    """The engine line's sum over the data-parallel ranks (``all_ranks``), in the engine's
    own names."""
    blocks, seqs, budget = all_ranks(rank, ranks)
    seats, tokens = ENGINE_KNOB_NAMES.get(engine, ENGINE_KNOB_NAMES["vllm"])
    pool = f"{blocks * rank.block_size:,} tokens" if engine == "sglang" else \
        f"{blocks:,} KV blocks"
    return (f"the {ranks:,} ranks together: {pool}, {seats} {seqs:,}, {tokens} "
            f"{budget:,}")


def _policy(c: SimConfig) -> str:
    """How the simulated engine admits and schedules, as its own docs name it; the engine
    line's last clause and --json's ``capacity_policy``, one string for both. llama-server
    adds every generating slot's sampled token to the batch first, then prompts up to -b
    (update_slots, "first, add sampled tokens from any ongoing sequences"), and never
    preempts (simulate_cautions.full_cache_caution: the simulator recomputes instead)."""
    if c.ubatch_tokens:  # llama.cpp (sim.config: -ub set only for llama-server)
        return ("decodes first, then prompts, up to -b tokens a step; a full cache preempts "
                "the newest, where llama-server would fail requests (llama.cpp)")
    if c.reserve_full:
        return "GUARANTEED_NO_EVICT" + (", chunked prefill (enable_chunked_prefill)"
                                        if c.chunked_prefill else
                                        ", contexts whole (no chunked prefill)") \
            + " (TensorRT-LLM)"
    if c.prefill_first and c.token_ratio:
        held = "whole (ignore_eos)" if c.ignore_eos else "× new_token_ratio"
        return f"prefill first, no mixed chunk, running outputs held {held} (SGLang)"
    if c.prefill_first:
        return "prefill first, no mixed chunk (SGLang)"
    if not c.chunked_prefill:  # vLLM --no-enable-chunked-prefill (sim.config.runs_whole_asked)
        return ("one token budget, running requests first in admission order, each prompt "
                "whole (no chunked prefill), preempt the newest (vLLM V1)")
    return "one token budget, running requests first in admission order, preempt the newest " \
        "(vLLM V1)"


def _engine_line(c: SimConfig, engine: str, overlapped: bool) -> str:
    """The simulated engine's limits, in the engine's own terms (llama-server: slots, -b, -ub),
    its speculative decoding where it drafts, and its overlapped scheduling where on
    (``overlapped``: vLLM's async scheduling, SGLang's and TensorRT-LLM's overlap scheduler)."""
    spec = (f"; speculative decoding: {c.spec_tokens} draft {plural(c.spec_tokens, 'token')} a "
            f"step, each accepted with chance {c.spec_acceptance:g}, so a step streams "
            f"{tokens_per_step(c.spec_tokens, c.spec_acceptance):.2f} tokens on average (TPOT "
            "counts them all; ITL is per streamed chunk)") if c.spec_tokens else ""
    if c.ubatch_tokens:
        return (f"engine: {c.num_blocks:,} KV cells, {c.max_num_seqs:,} slots (-np), batch "
                f"{c.max_num_batched_tokens:,} (-b) run as ubatches of {c.ubatch_tokens:,} (-ub); "
                f"{_policy(c)}" + spec)
    cap = (f", long_prefill_token_threshold {c.long_prefill_token_threshold:,}"
           + ("" if c.long_prefill_alone else " (not for a request alone)")
           ) if c.long_prefill_token_threshold else ""
    seats, tokens = ENGINE_KNOB_NAMES.get(engine, ENGINE_KNOB_NAMES["vllm"])  # its own names
    pool = sglang_pool_words(c.num_blocks, c.block_size) if engine == "sglang" else \
        f"{c.num_blocks:,} KV {plural(c.num_blocks, 'block')} of {c.block_size:,}"  # SGLang: tokens
    return (f"engine: {pool}, {seats} "
            f"{c.max_num_seqs:,}, {tokens} {c.max_num_batched_tokens:,}{cap}; "
            f"{_policy(c)}" + spec + overlap_clause(engine, overlapped))


def overlap_clause(engine: str, overlapped: bool) -> str:
    """The engine line's word on overlapped scheduling, in the engine's own name, or ""."""
    if not overlapped:
        return ""
    name = "overlap scheduler" if engine in ("sglang", "trtllm") else "async scheduling"
    return (f"; {name} on: the next batch is formed while one runs, so an arrival or a freed "
            "seat waits a step")
