"""`ridgeline simulate`'s cautions: what makes a run's latencies read other than a steady
engine's (arrivals that end before the batch settles, llama.cpp's cache running out, prompts
past a whole-context engine's token budget, an engine version past what was checked), and,
where the pool is too small to start, `fit`'s levers that would let it.

cli_simulate gathers the cautions into the report's list with the other modules' own (a
context past the model's, a cross-node split, …); ``pool_levers`` ends its refusal to start."""

from __future__ import annotations

import math
from typing import Any

from ridgeline.chunked_prefill import over_budget_caution
from ridgeline.deployment import Deployment
from ridgeline.sim.config import SimConfig
from ridgeline.sim.metrics import STEADY_LIFETIMES
from ridgeline.units import GIB, MIB, fmt_latency, plural

MOST_SUGGESTED = 10_000_000  # a --num-requests past this is no advice


def pool_levers(dep: Deployment, settings: Any, context: int, pointed: bool = False,
                requests_fixed: bool = False) -> str:
    """What would let the engine start where its pool is too small for any length worth
    serving (``sim.config.too_small_pool``), or for the requests asked (``requests_fixed``:
    the levers that shorten the context left out, as they would refuse those requests):
    `fit`'s levers at ``context`` (a second GPU, smaller weights, a larger memory fraction,
    a smaller profiling budget, a set pool …), each with the conversations it holds, as a
    clause; where none holds one, a pointer to `ridgeline fit`, or nothing where the refusal
    it follows has one (``pointed``)."""
    from dataclasses import replace

    from ridgeline.errors import InputError
    from ridgeline.reports.fit import fit_report

    pointer = "" if pointed else " (see `ridgeline fit`)"
    try:
        found = fit_report(dep, context, replace(settings, max_model_len=context), 1,
                           None).levers
    except InputError:
        return pointer
    if requests_fixed:  # a lever that shortens the context would refuse those requests
        found = tuple(lv for lv in found if lv.context >= context)
    if not found:
        return pointer
    named = "; ".join(f"{lv.name}: {lv.conversations:,} {plural(lv.conversations, 'conversation')}"
                      for lv in found)
    return (f"; what would, at {context:,} tokens a conversation: {named} (`ridgeline fit "
            f"--max-model-len {context}` shows the budget)")


def version_cautions(settings: Any, pool: Any) -> list[str]:
    """What `fit` cautions of the engine version asked: a vLLM release newer than the newest
    whose memory accounting was checked (``vllm_memory.past_modelled``), an SGLang version
    newer than the newest whose defaults were read (``sglang_memory.past_checked``)."""
    from ridgeline.sglang_memory import past_checked
    from ridgeline.vllm_memory import past_modelled

    out = []
    if pool.accounting is not None and past_modelled(pool.accounting):
        out.append(past_modelled(pool.accounting))
    if pool.engine == "sglang" and past_checked(settings.engine_version):
        out.append(past_checked(settings.engine_version))
    if pool.engine == "trtllm" and pool.seat_state_bytes:
        out.append(seat_state_caution(pool))
    return out


def seat_state_caution(pool: Any) -> str:
    """TensorRT-LLM (to 1.2) holds a hybrid's recurrent state for every seat from start-up
    (trtllm_memory.seat_state_bytes): what it takes, and the flag that sets it."""
    seats = pool.max_num_seqs
    each = pool.seat_state_bytes / max(1, seats) / MIB
    return (f"TensorRT-LLM (to 1.2) allocates every seat's recurrent state up front ({seats:,} "
            f"seats × {each:,.1f} MiB = {pool.seat_state_bytes / GIB:,.1f} GiB per GPU, before "
            "its free-memory fraction), as counted here: --max_batch_size sets it; later "
            "releases keep the state inside the KV pool, a block a request (PR #12185)")


def warmup_caution(span_s: float | None, mean_e2e_s: float, rate: float | None,
                   sent_span_s: float | None = None) -> str:
    """What to say of a run whose arrivals end before the batch has settled, or "" (and for
    a closed loop, ``span_s`` None, which holds its batch from the start). ``sent_span_s``:
    a capped open loop's, the span its requests were sent over, the cap's client-side waits
    stretching it past the arrivals' ``span_s``; the batch fills and drains over that one
    (200 requests come within 0.2 s under --max-concurrency 4 are sent over about 40 s)."""
    sent = span_s if sent_span_s is None or span_s is None else max(span_s, sent_span_s)
    if span_s is None or sent is None or not mean_e2e_s > 0 \
            or sent >= STEADY_LIFETIMES * mean_e2e_s:
        return ""
    more = ""
    if rate and math.isfinite(rate) and rate * 10 * mean_e2e_s <= MOST_SUGGESTED:
        more = (f"; --num-requests {math.ceil(rate * 10 * mean_e2e_s):,} spans about ten (if "
                "each longer run asks for more still, the rate is more than the engine serves)")
    spread = f"the arrivals span {span_s:,.1f} s" if sent == span_s else (
        f"the requests were sent over {sent:,.1f} s (they came over {span_s:,.1f} s, the cap "
        "holding some back for a seat)")
    return (f"{spread}, under {STEADY_LIFETIMES} request lifetimes "
            f"(mean end-to-end {mean_e2e_s:,.1f} s): much of the run is the batch filling up "
            f"and draining, so the latencies read lighter than the steady state{more}")


def full_cache_caution(engine: str, preemptions: int, max_model_len: int | None = None,
                       cells: int = 0, slots: int = 0) -> str:
    """What to say where llama.cpp's cache ran out mid-run, or "". llama-server does not
    preempt: with no free cells it clears idle slots' cached prompts, halves its batch down
    to one token, then fails every request in the batch ("Context size has been exceeded",
    tools/server/server-context.cpp); the simulator recomputes them as vLLM would. Where
    --max-model-len was given (``max_model_len``) and the -c ``cells`` hold fewer of its
    conversations than the ``slots`` (memory capped -c: sim.config.llamacpp_context), the
    remedy is those fewer slots, named: gpt-oss-20b on an L4 at 131,072 tokens, -c 393,216
    and 4 slots, --parallel 3 (fit's -np)."""
    if not engine.startswith("llama.cpp") or not preemptions:
        return ""
    held = cells // max_model_len if max_model_len else 0
    remedy = ("give -c room for every slot's longest request (--max-model-len, which sizes -c "
              "as --max-model-len × slots) or fewer slots (--parallel)") \
        if not 0 < held < slots else (
            f"give fewer slots, --parallel {held} (as `ridgeline fit` starts it): the memory "
            f"holds {held} {plural(held, 'conversation')} of --max-model-len "
            f"{max_model_len:,}, so -c is {cells:,} cells, not room for all {slots} slots")
    return (f"llama-server does not preempt: where its cache (-c cells) ran out here it would "
            f"halve its batch down to one token and then fail the requests in it with "
            f"\"Context size has been exceeded\"; here {preemptions:,} "
            f"{plural(preemptions, 'preemption')} recomputed them as vLLM would, so these "
            f"latencies are of requests llama-server would have answered with errors: {remedy}")


def whole_context_caution(config: SimConfig, over_budget: int, asked: bool = False) -> str:
    """What to say where prompts outran the step's whole token budget of an engine that runs
    contexts whole (TensorRT-LLM, enable_chunked_prefill off by default), or "" (``asked``:
    enable_chunked_prefill was given and the engine turned it off again, so only a larger
    budget runs them: chunked_prefill.mla_unchunked_caution). Refused where the config
    refuses them (``SimConfig.refuse_past_budget``, simulate's), else chunked."""
    if config.chunked_prefill or not over_budget:
        return ""
    refused = config.refuse_past_budget
    run = "in chunks" if refused else "so"
    return over_budget_caution(over_budget, config.max_num_batched_tokens,
                               "give --max-num-tokens past the longest prompt" if asked else
                               f"give --enable_chunked_prefill to run them {run}, or "
                               "--max-num-tokens past the longest prompt", turned_off=asked,
                               refused=refused)


def uncapped_window_caution(dep: Deployment, pool: Any, config: SimConfig,
                            running_max: float, preemptions: int, shared: bool = False) -> str:
    """What to say where the simulator held a model with no full attention, only sliding
    windows, in blocks grown past its window (sim_config: one growing block table, the window
    uncapped), which vLLM frees, so its running batch stays under the conversations `fit`
    counts, where the run's batch met that limit (it preempted, or ran as many as the grown
    blocks hold); "" elsewhere, and where the simulator capped them as vLLM V1 does
    (``SimConfig.window_cap_tokens``: now only vLLM's V0 engine), unless the requests share
    cached prefixes (``shared``), whose holders it keeps uncapped (sim/blocks.py). Mistral-7B
    on one H100 at 32,768 tokens: a decoding request holds 257 blocks in vLLM, 2,048 grown
    uncapped; fit counts 108 at once, such a closed loop ran 21 before V1's windows were
    capped."""
    from ridgeline.capacity import conversations

    g = pool.groups
    capped = config.window_cap_tokens > 0 and not (shared and config.prefix_caching)
    if g is None or g.full or not g.windows or g.states or capped:
        return ""
    window = min(w for w, _ in g.windows)
    held = conversations(pool, dep, config.max_model_len)
    grown = config.num_blocks // (-(-config.max_model_len // config.block_size)
                                  + config.overhead_blocks)  # the simulator's own count
    if config.max_model_len <= window or running_max >= min(held, config.max_num_seqs) \
            or not (preemptions or running_max >= grown):
        return ""
    return (f"{dep.model.name} attends only through {window:,}-token sliding windows, whose "
            "blocks past the window vLLM frees; the simulator grows them with the request "
            + ("instead" if not config.window_cap_tokens else
               "where it shares a cached prefix (it caps the others)")
            + f", so its batch (at most {running_max:,.0f} here) is conservative: vLLM "
            f"holds {held:,} {plural(held, 'conversation')} of {config.max_model_len:,} tokens "
            "at once (`ridgeline fit`)")


def batch_past_fit(engine: str, running_max: float, held: int | None, context: int,
                   preemptions: int, asked: bool = False) -> str:
    """Why the running batch peaked past `fit`'s count (``held``: conversations of
    ``context`` tokens, each holding its full length's blocks, at once), where that informs:
    the context was asked (``asked``: --max-model-len given), or the run preempted, the batch
    admitted past that count outgrowing the pool; "" elsewhere (past a default context, the
    model's trained one, fit's few conversations say nothing of a run's short requests).
    fit's count is not a cap: a request shorter than the context holds fewer blocks, and the
    engine admits one by what it holds now, not by its longest — vLLM on its prompt's blocks,
    preempting the newest when a decode finds none; SGLang on its prompt and an estimate of
    its output, retracting when short; TensorRT-LLM on its prompt and requested output,
    reserved whole. Llama-3.1-8B on one H100 at --max-model-len 131,072: fit holds 3
    conversations of that length, 512-token prompts at 20 a second peak near 48 at once."""
    if held is None or running_max <= held or not (asked or preemptions):
        return ""
    how = {"vllm": "vLLM admits a request once its prompt's blocks are free, not its whole "
                   "length's, and preempts the newest when a decode finds no block",
           "sglang": "SGLang admits a request on its prompt and an estimate of its output "
                     "(new_token_ratio), not its whole length, and retracts one when a decode "
                     "finds no room",
           "trtllm": "TensorRT-LLM admits a request with its prompt and asked output "
                     "reserved, not the whole context"}.get(
        engine, "a shorter request holds fewer cells")
    grew = ": the requests admitted together outgrew the pool as they decoded" \
        if preemptions else ""
    return (f"  (the running batch peaked at {running_max:,.0f}, past the {held:,} "
            f"{plural(held, 'conversation')} of {context:,} {plural(context, 'token')} `fit` "
            f"counts at once: requests shorter than that hold less; {how}{grew} "
            f"({preemptions:,} {plural(preemptions, 'preemption')} here))")


def itl_mean_past_p99(itl_s: dict[str, float], preemptions: int) -> str:
    """Why ITL's mean reads above its p99, where it does: fewer than 1 in 100 gaps are far
    longer than the rest, and carry the mean past 99 of every 100. Under a pool that
    preempts, those are the preempted requests' gaps: each spans the wait to be readmitted
    and the recompute of its tokens. Llama-3.1-70B fp8 on one H100 at 5 req/s of 2,048 +
    500 with --max-model-len 4096: mean 38.1 ms, p99 34.5 ms, 357 preemptions. Else "", and
    where the two print alike, to 0.1 ms (0.1 s from 100 s: fmt_latency) (mean 8.02 ms beside
    p99 7.95 ms: every gap about 8 ms, nothing to explain)."""
    mean, p99 = itl_s["mean"], itl_s["p99"]
    if math.isnan(mean) or math.isnan(p99) or mean <= p99 \
            or fmt_latency(mean) == fmt_latency(p99):
        return ""
    why = (f"those of the {preemptions:,} {plural(preemptions, 'preemption')}, each a "
           "preempted request's wait to be readmitted and the recompute of its tokens before "
           "its next one" if preemptions else
           "and they pull the mean past 99 of every 100")
    return (f"  (ITL's mean, {fmt_latency(mean)}, is above its p99, {fmt_latency(p99)}: "
            f"fewer than 1 in 100 gaps are far longer than the rest, {why})")


def spec_acceptance_caution(method: str, acceptance: float, synthetic: bool) -> str:
    """What to say where speculative decoding's acceptance was not given (--spec-acceptance),
    its default read as if measured: every step's streamed tokens, TPOT with them, rest on it.
    An n-gram (prompt-lookup) drafter proposes only text already in the prompt, so its
    acceptance is the load's, not the drafter's: on ``synthetic`` prompts (random tokens, as
    vllm bench serve's random dataset), which repeat nothing, about none are accepted."""
    measured = ("give --spec-acceptance, the rate measured on your traffic (vLLM's "
                "vllm:spec_decode_num_accepted_tokens_total ÷ "
                "vllm:spec_decode_num_draft_tokens_total)")
    if method != "ngram":
        return (f"speculative decoding's acceptance, {acceptance:g} a draft token, is assumed, "
                f"not measured: the {method} drafter's depends on the model and the traffic, "
                f"and TPOT scales with the tokens a step streams; {measured}")
    if synthetic:
        return (f"n-gram drafting's acceptance, {acceptance:g} a draft token, is assumed, not "
                "measured, and this load's prompts cannot earn it: the drafter proposes only "
                "tokens that repeat text already in the prompt, and these synthetic prompts "
                "(random tokens, as vllm bench serve's random dataset) repeat nothing, so it "
                "would accept about none and TPOT would be the plain engine's or slower; "
                f"--spec-acceptance 0 reads this load, or {measured}")
    return (f"n-gram drafting's acceptance, {acceptance:g} a draft token, is assumed, not "
            "measured: the drafter proposes only tokens that repeat text already in the prompt, "
            "and how much the outputs repeat their prompts is the traffic's, not the "
            "drafter's; " + measured)
