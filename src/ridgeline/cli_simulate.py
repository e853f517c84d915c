"""CLI: simulate — continuous batching of a load on one deployment: TTFT, TPOT, goodput."""

from __future__ import annotations

import argparse
import math
from typing import Any

from ridgeline.cli import (
    _deployment_flags,
    _engine,
    _output,
    data_parallel_flags,
    engine_sizes,
    expert_parallel_flags,
    max_model_len_option,
)
from ridgeline.cli_engine import (
    _usage_and_version,
    check_engine_flags,
    pool_switches,
    say_async_caution,
    sglang_overlap,
    trtllm_overlap,
)
from ridgeline.cli_load import (
    build_deployment,
    engine_settings,
    load_accelerator,
    load_model,
    load_profile,
    one_rank_refusal,
    pipeline_size,
)
from ridgeline.cli_offload import (
    _offload,
    auto_layers,
    fit_launch,
    margin_bytes,
    set_aside_caution,
)
from ridgeline.cli_spec import spec_args, spec_drafter, spec_flags, spec_method
from ridgeline.cli_types import (
    MAX_BATCH,
    _count,
    _how_many,
    _not_empty,
    _percentile,
    _positive_float,
    _typed,
)
from ridgeline.data_parallel import independent_ranks
from ridgeline.errors import DoesNotFit, EveryRequestRefused, FellBehind, InputError
from ridgeline.sim.workload import MAX_RATE, LoadAsked
from ridgeline.units import COUNT_EXAMPLES
from ridgeline.vllm_mla_cache import per_head_caution

MAX_REQUESTS = 10_000_000  # a simulation that finishes: about 10 minutes at 10 million


def cmd_simulate(args: argparse.Namespace) -> Any:
    import csv
    import json
    from dataclasses import replace

    from ridgeline.drafter_memory import vllm_draft_settings
    from ridgeline.engine_versions import sized_version
    from ridgeline.engines import engine_id
    from ridgeline.memory import check_block_fits, kv_pool
    from ridgeline.reports.simulate import SimulateReport
    from ridgeline.reports.simulate_cautions import whole_context_caution
    from ridgeline.sim.config import (
        llamacpp_context,
        sim_config,
        start_refusal,
        too_small_pool,
    )
    from ridgeline.sim.data_parallel import rank_config
    from ridgeline.sim.pipeline import lane_config, run_replica
    from ridgeline.sim.run import CountedRequests
    from ridgeline.sim.workload import Workload, read_trace
    from ridgeline.units import plural
    from ridgeline.vllm_memory import one_pool

    if args.gpu and "," in args.gpu:
        raise InputError("simulate runs one deployment: give one --gpu (decode, prefill and "
                         "fit compare several)")
    acc = load_accelerator(args)
    engine = engine_id(args.engine)
    pp = pipeline_size(args, engine)
    model = load_model(args)
    if args.expert_parallel and not model.is_moe:
        raise InputError(f"--enable-expert-parallel spreads a MoE's experts: {model.name} is "
                         "dense")
    if args.expert_parallel and engine.startswith("llama.cpp"):
        raise InputError(f"--enable-expert-parallel: {engine} has no expert parallelism (its "
                         "-sm splits layers or tensors; --cpu-moe/--n-cpu-moe place experts on "
                         "the host)")
    dep = build_deployment(args, model, acc, engine, expert_parallel=args.expert_parallel)
    if args.expert_parallel and dep.engine_expert_ranks < 2:
        raise InputError(one_rank_refusal(dep.engine))
    ranks = dep.data_parallel_size
    acceptance_given = getattr(args, "spec_acceptance", None) is not None  # (spec_args fills
    spec_args(args)  # in its default)
    if ranks > 1 and args.spec_tokens and not independent_ranks(dep):  # a dense model's
        # ranks are each a plain engine, drafting as one replica drafts
        given = getattr(args, "spec_given_as", "") or "--spec-tokens"  # the drafter's flags
        raise InputError("speculative decoding with data-parallel attention is not simulated "
                         f"yet: drop {given}, or simulate without data parallelism")
    all_at_once(args)
    check_load_flags(args)
    if args.burstiness is not None and args.arrival != "gamma":
        raise InputError(f"--burstiness shapes gamma arrivals, not --arrival {args.arrival}'s: "
                         "drop one (--burstiness alone gives gamma arrivals)")
    args.burstiness = 1.0 if args.burstiness is None else args.burstiness
    check_engine_flags(args, engine)
    settings: Any = vllm_draft_settings(engine, engine_settings(args))  # 0.9.x: draft on V0
    say_async_caution(args, dep, settings)
    if engine == "vllm":  # the scheduler, its lanes and cautions read the engine it runs
        args.engine_version = settings.engine_version
    story = ""
    # llama.cpp's --fit, -ngl auto typed or the build's default: one rule, fit's -c and -ngl
    placed = fit_launch(args, dep, settings) if auto_layers(args, engine) else None
    if not settings.max_model_len and placed:  # -c 0 under --fit
        from ridgeline.llamacpp_fit import context_story

        context, dep = placed[:2]
        settings = replace(settings, max_model_len=context)
        story = context_story(dep, context, bool(placed[3]))  # [3]: no placement found
    elif placed:  # the -c of the slots that fit, --fit placing the weights for it
        dep = placed[1]
    set_aside = placed[3] if placed else set_aside_caution(args, dep, settings)
    # llama-server allocates -c cells and no more: the context --fit chose, else the one asked
    # for (--max-model-len × slots), else its -c 0, the trained context
    cells = None if not engine.startswith("llama.cpp") else (
        (settings.max_model_len, "--fit") if story else (placed[0], placed[2]) if placed
        else llamacpp_context(dep, settings, auto_layers(args, engine) and not set_aside,
                              margin_bytes(args)))  # set aside: -ngl all's, the whole card
    check_block_fits(dep, settings)  # a block past the pool: --block-size's own refusal
    config = sim_config(dep, settings, args.spec_tokens, args.spec_acceptance, args.spec_draft_cost,
                        cells=cells[0] if cells else None,
                        spec_method=spec_method(args, model),
                        long_prefill_tokens=args.long_prefill_token_threshold or None)
    if args.ignore_eos:
        config = replace(config, ignore_eos=True)
    # a prompt past the budget of an engine that runs contexts whole: refused, as the engine
    # refuses it (TensorRT-LLM's "should not exceed max_num_tokens"), not chunked
    config = replace(config, refuse_past_budget=True)
    refusal = start_refusal(dep, settings, config, None if story else cells)
    if refusal and not args.trace:  # its 'give --max-model-len ≤ N' may refuse every request
        refusal = requests_past_start(dep, settings, args) or refusal
    if config.num_blocks >= 1:  # the host's RAM holds the host
        from ridgeline.llamacpp_pool import check_host_memory_for  # layers' cache for the pool

        check_host_memory_for(dep, config.num_blocks * config.block_size)
    if refusal:
        from ridgeline.capacity import context_refusal
        from ridgeline.reports.simulate_cautions import pool_levers

        pool_too_small = not context_refusal(dep, config.max_model_len) \
            and too_small_pool(dep, settings)  # no length rescues it: say what would
        raise DoesNotFit(refusal + (pool_levers(dep, settings, config.max_model_len,
                                                pointed="`ridgeline fit" in refusal)
                                    if pool_too_small else ""))
    if args.trace and args.rate is not None:
        raise InputError("--trace replays its own arrival times; drop --rate")
    # vllm bench serve's --request-rate R (or a trace's times) with --max-concurrency C:
    # arrivals at R, at most C in flight; --rate inf with it is the closed loop of C
    capped = capped_rate(args)
    if args.trace and (args.prefix_groups or args.prefix_len):
        raise InputError("--trace replays its own prompts; drop --prefix-groups/--prefix-len")
    if args.trace:
        requests: Any = read_trace(args.trace)
        # the trace's own span, read before a capped run moves a held request's time to its send
        trace_span_s = requests[-1].arrival_s - requests[0].arrival_s
        if len(requests) > 1:  # plan's floor on a trace's rate, shared
            from ridgeline.serving_load import check_trace_rate

            check_trace_rate(args.trace, len(requests), trace_span_s)
        count, load = len(requests), (f"trace {args.trace} ({len(requests):,} "
                                      f"{plural(len(requests), 'request')})") + (
            f", {cap_clause(args.concurrency)}" if capped else "")
        asked = LoadAsked(count, "trace", max_concurrency=args.concurrency if capped else None,
                          trace=args.trace)
    else:
        if args.rate is None and args.concurrency is None:
            raise InputError("give --rate R (requests/s), --concurrency C, or --trace FILE")
        rate = math.inf if args.rate is None else args.rate
        requests = Workload(args.num_requests, args.input_len, args.output_len, rate,
                            args.arrival, args.burstiness, args.prefix_groups, args.prefix_len,
                            args.seed)
        count = args.num_requests
        asked = LoadAsked(
            count, "at_once" if getattr(args, "sent_at_once", False) else
            "closed_loop" if args.rate is None else args.arrival,
            rate_req_s=args.rate, input_len_spec=args.input_len, output_len_spec=args.output_len,
            burstiness=args.burstiness if args.rate is not None and args.arrival == "gamma"
            else None, max_concurrency=args.concurrency, seed=args.seed,
            prefix_groups=args.prefix_groups or 0, prefix_len=args.prefix_len or 0)
        load = (f"{args.num_requests:,} {plural(args.num_requests, 'request')}, input "
                f"{args.input_len}, output "
                f"{args.output_len}, " + ("all sent at time 0 (--rate inf)"
                                          if getattr(args, "sent_at_once", False) else
                                          f"{args.arrival} arrivals at {args.rate:g}/s"
                                          + (f" (burstiness {args.burstiness:g})"
                                             if args.arrival == "gamma" else "")
                                          + f", {cap_clause(args.concurrency)}" if capped else
                                          f"concurrency {args.concurrency}"
                                          if args.concurrency else
                                          f"{args.arrival} arrivals at {args.rate:g}/s")
                + (f" (burstiness {args.burstiness:g})"
                   if args.arrival == "gamma" and args.rate is not None and not capped else ""))
        if args.prefix_groups:
            fixed = args.input_len.strip()
            if fixed.isdigit() and args.prefix_len >= int(fixed):  # the whole prompt but one
                load += (f", each prompt shared but its last token by {args.prefix_groups} "
                         f"groups (--prefix-len {args.prefix_len:,} is past the "
                         f"{int(fixed):,}-token prompts)")
            else:
                load += (f", each request drawn into one of {args.prefix_groups:,} groups, "
                         f"each group sharing its own {args.prefix_len:,}-token prefix (inside "
                         "the prompt; a shorter prompt shares all but its last token)")
    if story:
        load += f"; {story}"
    profile = load_profile(args)
    slo_ttft = None if args.slo_ttft_ms is None else args.slo_ttft_ms / 1e3
    slo_tpot = None if args.slo_tpot_ms is None else args.slo_tpot_ms / 1e3
    slo_itl = None if args.slo_itl_ms is None else args.slo_itl_ms / 1e3
    # vLLM V1: one pool, pp micro-batches in flight (sim/pipeline.py); V0, SGLang and
    # TensorRT-LLM: pp lanes, each 1/pp of it (sim/lanes.py)
    split = pp > 1 and not one_pool(engine, args.engine_version)
    lane = lane_config(config, pp, engine, args.engine_version) if dep.data_parallel_size == 1 \
        else rank_config(engine, config, dep.data_parallel_size)  # what one rank runs with
    # where the lanes split a pool the engine shares (SGLang, TensorRT-LLM), or split it as
    # the engine does (vLLM V0's virtual engines)
    shared = (f"where {engine} shares one pool among its batches in flight" if engine != "vllm"
              else f"as vLLM {args.engine_version}'s V0 virtual engines each hold 1/{pp}")
    if lane.num_blocks < 1:
        raise DoesNotFit(f"does not fit: a pipeline lane's share of the KV pool (1/{pp} of "
                         f"{config.num_blocks:,} blocks) holds no block (see `ridgeline fit`)")
    result = run_replica(dep, profile, config, requests if args.trace else
                         CountedRequests(requests, count), args.engine_version,
                         closed_loop=0 if capped else args.concurrency or 0,
                         keep_rows=bool(args.export), slo=(slo_ttft, slo_tpot),
                         window_s=args.window, stop_when_behind=True,
                         max_in_flight=args.concurrency if capped else 0)
    if result.rejected and not result.completed:  # nothing ran: no latency to report
        reason, n = max(result.rec.rejected.items(), key=lambda item: item[1])
        first = result.rec.rejected_first.get(reason)
        raise EveryRequestRefused(f"the engine refused every request ({n:,} of {result.rejected:,}: "
                         f"{reason}" + (f"; first: {first}" if first else "") + ")"
                         + (f"; each of the {pp} pipeline lanes is simulated with 1/{pp} of "
                            f"the {config.num_blocks:,} blocks, {shared} (`ridgeline fit` "
                            "sizes that pool)" if split else "")
                         + (f"; {over}" if (over := whole_context_caution(
                             config, result.rec.over_budget_prompts,
                             settings.enable_chunked_prefill)) else ""))
    if args.window and result.completed and not result.rec.windowed \
            and result.rec.stopped_early:
        raise FellBehind(f"the engine fell hopelessly behind, finishing "
                         f"{result.completed:,} requests in {result.duration_s:,.0f} s while "
                         f"{round(result.rec.arrivals.total):,} arrived, and the run stopped "
                         "early, before any request arriving in --window "
                         f"{args.window[0]:g},{args.window[1]:g} had finished: lower --rate")
    if args.window and result.completed and not result.rec.windowed:
        earliest, latest = result.rec.arrived_s
        raise InputError(f"--window {args.window[0]:g},{args.window[1]:g}: no completed "
                         f"request arrived in it (the run's arrived {earliest:,.6g}–"
                         f"{latest:,.6g} s)")
    if args.export:
        rows = sorted(result.rec.rows, key=lambda row: row[0])  # by request id
        blank = [[None if isinstance(v, float) and math.isnan(v) else v for v in row]
                 for row in rows]  # no latency (one token, or rejected): empty, null in JSON
        # arrival_s: the send, where a request's clock starts; offered_arrival_s: when it
        # came, the rate's or the trace's time, earlier where --max-concurrency held it
        header = ["id", "arrival_s", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s",
                  "e2e_s", "preemptions", "status", "offered_arrival_s"]
        try:
            with open(args.export, "w", newline="", encoding="utf-8") as handle:
                if args.export.lower().endswith(".json"):
                    json.dump([dict(zip(header, r)) for r in blank], handle, allow_nan=False)
                else:
                    writer = csv.writer(handle)
                    writer.writerow(header)
                    writer.writerows(blank)
        except OSError as exc:
            raise InputError(f"cannot write {args.export}: {exc}") from None
    from ridgeline.capacity import held_conversations
    from ridgeline.chunked_prefill import mla_unchunked_caution
    from ridgeline.data_parallel import data_parallel_cautions
    from ridgeline.decode_context import dcp_caution
    from ridgeline.engine_scheduling import v0_scheduling_caution
    from ridgeline.lora_slots import step_caution as lora_step_caution
    from ridgeline.offload import offload_caution
    from ridgeline.parallel import deployment_cross_node_caution
    from ridgeline.plan_cautions import extensible_shortfall_caution
    from ridgeline.predict import (
        bnb_caution,
        cdna3_moe_caution,
        eager_caution,
        eager_switch_note,
        gguf_caution,
    )
    from ridgeline.reports.expectation import context_caution
    from ridgeline.reports.simulate_cautions import (
        full_cache_caution,
        spec_acceptance_caution,
        uncapped_window_caution,
        version_cautions,
        warmup_caution,
    )
    from ridgeline.reports.simulate_overload import overload_rates
    from ridgeline.serving_load import tail_caution
    from ridgeline.sim.data_parallel import dispatch_label
    from ridgeline.sim.overload import backing_up, budget_gain, saturated_req_s
    from ridgeline.track_record import track_record_caution
    from ridgeline.vllm_eplb import eplb_step_caution

    # a run whose requests backed up, its own readings not calling it overloaded: the most
    # the engine serves of these requests, its batch full, tells a filling batch from one
    # that falls behind (sim/overload.py)
    saturated = saturated_req_s(dep, profile, config, requests, args.engine_version) \
        if not args.concurrency and not result.rec.overloaded() and backing_up(result.rec) \
        else None
    # steps that ran the whole token budget with requests waiting: whether a larger budget
    # computes more a second (the budget holding an overload back, not the GPU)
    gain = budget_gain(dep, profile, config.max_num_batched_tokens) \
        if result.rec.budget_full_steps and not result.rec.fill_observed else None

    span: float | None
    if (args.concurrency and not capped_rate(args)) or args.window:  # a closed loop holds its
        span = None  # batch from the start; a window leaves out the filling up and the draining
    elif args.trace:
        span = trace_span_s
    else:
        span = count / args.rate
    # a capped loop whose requests waited for a seat sent them over longer than they came
    sent_span_s = None
    if capped and result.rec.client.waited and span is not None:
        came_s, sent_s = result.rec.client.arrivals_s, result.rec.arrived_s
        span, sent_span_s = came_s[1] - came_s[0], sent_s[1] - sent_s[0]
    lane_tokens = lane.num_blocks * lane.block_size
    split_pool = (f"each of the {pp} pipeline lanes holds 1/{pp} of the pool "
                  f"({lane_tokens:,} tokens): a request longer than that is refused here, "
                  f"{shared}") if split and config.max_model_len > lane_tokens else ""
    lockstep = ("every request has the same lengths in a closed loop: the waves run in "
                "lockstep, so the percentiles all read alike; benchmarks draw lengths at random "
                "(vllm bench serve's and SGLang's --random-range-ratio), which --input-len and "
                "--output-len uniform:a,b reproduce") \
        if args.concurrency and not capped_rate(args) and not args.trace \
        and fixed_length(args.input_len) and fixed_length(args.output_len) \
        and count > args.concurrency else ""
    v0 = v0_scheduling_caution(engine, args.engine_version)
    dispatched = dispatch_label(engine) if dep.data_parallel_size > 1 else ""
    pool = kv_pool(dep, settings)
    # plan's caution of its rows, of this run: its largest batch at its mean request
    extensible = extensible_shortfall_caution(
        dep, replace(settings, max_model_len=config.max_model_len),
        max(1, round((result.rec.prompt_tokens + result.rec.output_tokens)
                     / max(1, result.completed))),
        result.rec.running_max, "this run held at once") if result.completed else ""
    lora: tuple[str, ...] = (lora_step_caution(settings.lora),) \
        if settings.lora is not None else ()
    lora += (eplb_step_caution(settings.eplb),) if settings.eplb is not None else ()
    cautions = tuple(c for c in (context_caution(dep, config.max_model_len), split_pool, lockstep,
                                 set_aside, *lora,
                                 spec_acceptance_caution(args.spec_method or "eagle",
                                                         args.spec_acceptance, not args.trace)
                                 if args.spec_tokens and not acceptance_given else "",
                                 v0, *version_cautions(settings, pool), extensible,
                                 full_cache_caution(
                                     engine, result.preemptions,
                                     config.max_model_len if args.max_model_len is not None
                                     else None, config.num_blocks * config.block_size,
                                     config.max_num_seqs),
                                 uncapped_window_caution(dep, pool, config,
                                                         result.rec.running_max,
                                                         result.preemptions,
                                                         bool(args.prefix_groups
                                                              or args.prefix_len)),
                                 whole_context_caution(config, result.rec.over_budget_prompts,
                                                       settings.enable_chunked_prefill),
                                 mla_unchunked_caution(dep, settings.enable_chunked_prefill),
                                 eager_switch_note(engine) if args.enforce_eager else "",
                                 eager_caution(dep) if args.enforce_eager else "",
                                 offload_caution(dep), cdna3_moe_caution(dep), gguf_caution(dep),
                                 bnb_caution(dep), dep.model.architecture_caution,
                                 per_head_caution(dep.model),
                                 deployment_cross_node_caution(dep), dcp_caution(dep),
                                 *data_parallel_cautions(dep, True, dispatched),
                                 "" if overload_rates(result, count, saturated, gain) else warmup_caution(
                                     span, result.percentiles("e2e")["mean"], args.rate,
                                     sent_span_s),
                                 profile.calibration_caution(dep.accelerator),
                                 track_record_caution(dep, "prefill", profile),
                                 track_record_caution(dep, "decode", profile),
                                 profile.batch_range_caution(  # a lane's mean running batch
                                     dep.accelerator,
                                     round(result.running_batch["mean"] / (pp if split else 1))),
                                 "" if args.percentile is None else tail_caution(
                                     result.rec.windowed + result.rec.windowed_rejected,
                                     args.percentile, "the percentiles read",
                                     "a trace of {n:,} or more" if args.trace
                                     else "--num-requests {n:,} or more")) if c)
    if args.spec_tokens:  # fit's caution where the pool leaves the drafter out, once run
        spec_drafter(args, model, [engine])
    return SimulateReport(replace(dep), lane, result, count, load, slo_ttft, slo_tpot,
                          cautions=cautions, percentile=args.percentile, slo_itl_s=slo_itl,
                          fit_conversations=held_conversations(pool, dep, config.max_model_len),
                          context_asked=args.max_model_len is not None,
                          lanes=pp if split else 1, engine_config=config,
                          micro_batches=1 if split else pp,
                          engine_version=sized_version(engine, settings.engine_version)
                          if pool.accounting is None else pool.accounting.version,
                          usage=settings.usage if engine == "vllm" else None,
                          model_runner=pool.runner or None, saturated_req_s=saturated,
                          budget_gain=gain,
                          dispatch=dispatched, load_asked=asked)


def _request_rate(text: str) -> float:
    """--rate R, requests per second; 'inf', as vllm bench serve takes it: all at time 0."""
    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    return float(_positive_float("request rate", most=MAX_RATE)(text))


def all_at_once(args: argparse.Namespace) -> None:
    """--rate inf as vllm bench serve reads it: every request sent at time 0, which is a
    closed loop as wide as the requests (each one's user sends one and stops), or, with
    --max-concurrency C, a closed loop of C."""
    if args.rate is None or not math.isinf(args.rate):
        return
    given = [flag for flag, value in (("--trace", args.trace), ("--arrival", args.arrival),
                                      ("--burstiness", args.burstiness)) if value is not None]
    if given:
        raise InputError(f"--rate inf sends every request at time 0; drop {', '.join(given)}")
    args.rate = None
    if args.concurrency is None:
        args.concurrency = 1000 if args.num_requests is None else args.num_requests
        args.sent_at_once = True


def capped_rate(args: argparse.Namespace) -> bool:
    """vllm bench serve's --request-rate R with --max-concurrency C: arrivals at R, at most C
    in flight (``sim/run.py``); a --trace's arrivals at their own times under the same cap, as
    the benchmark sends a timed dataset's; --rate inf with it is the closed loop of C."""
    timed = bool(args.trace) or (args.rate is not None and math.isfinite(args.rate))
    return timed and args.concurrency is not None


def cap_clause(cap: int) -> str:
    """The load line's words for a capped open loop (``capped_rate``)."""
    return (f"at most {cap} in flight (a request that arrives while {cap} "
            f"{'is' if cap == 1 else 'are'} running waits client-side and is timed from its "
            "send)")


def requests_past_start(dep: Any, settings: Any, args: argparse.Namespace) -> str:
    """Where the engine refuses to start (capacity.start_check) and the longest max_model_len
    that starts is shorter than one request of the fixed lengths asked, a refusal that says
    so, with fit's levers at that length; "" elsewhere. Llama-3.1-70B on 2 H100s, requests of
    120,000 + 100 tokens: vLLM starts at 17,200 at most, which had been the advice given."""
    from dataclasses import replace

    from ridgeline.capacity import start_check
    from ridgeline.reports.simulate_cautions import pool_levers
    from ridgeline.sim.config import too_small_pool
    from ridgeline.units import parse_count

    if not (fixed_length(args.input_len) and fixed_length(args.output_len)):
        return ""
    asked = parse_count(args.input_len, "--input-len") + parse_count(args.output_len,
                                                                     "--output-len")
    check = start_check(dep, settings)
    if check is None or not check.refused or not 0 < check.longest < asked \
            or too_small_pool(dep, settings):  # no length worth serving: that refusal's own
        return ""
    return ("does not fit: " + replace(check, longest=0).clause(dep.engine)
            + f"; the longest it starts at, {check.longest:,} tokens, holds less than one "
            f"request of the {asked:,} asked (--input-len + --output-len)"
            + pool_levers(dep, settings, asked, requests_fixed=True))


def fixed_length(text: str | None) -> bool:
    """Whether a length flag is one number (512, 2k), not a distribution."""
    return text is not None and ":" not in text


def check_load_flags(args: argparse.Namespace) -> None:
    """Refuse the load flags the chosen load ignores, then fill in the defaults: a trace
    brings its own requests, lengths and arrivals; a closed loop has no arrivals."""
    if args.trace:
        given = [flag for flag, value in (("--num-requests", args.num_requests),
                                          ("--input-len", args.input_len),
                                          ("--output-len", args.output_len),
                                          ("--arrival", args.arrival),
                                          ("--burstiness", args.burstiness)) if value is not None]
        if given:
            raise InputError(f"--trace replays its own requests, lengths and arrival times; "
                             f"drop {', '.join(given)}")
    if args.concurrency is not None and args.rate is None:  # a capped --rate keeps its own
        given = [flag for flag, value in (("--arrival", args.arrival),
                                          ("--burstiness", args.burstiness)) if value is not None]
        if given:
            raise InputError(f"--concurrency is a closed loop: each request arrives as one "
                             f"finishes; drop {', '.join(given)}")
    args.num_requests = 1000 if args.num_requests is None else args.num_requests
    if args.trace and args.dataset_name:
        raise InputError("--trace replays its own requests; drop --dataset-name")
    if args.trace and args.random_range_ratio is not None:
        raise InputError("--trace replays its own lengths; drop --random-range-ratio")
    args.input_len = args.input_len or ("1024" if args.dataset_name else "512")
    args.output_len = args.output_len or "128"
    if args.random_range_ratio:  # 0 draws the lengths given, as vllm bench serve's default
        args.input_len = ranged(args.input_len, args.random_range_ratio, "--input-len")
        args.output_len = ranged(args.output_len, args.random_range_ratio, "--output-len")
    # --burstiness alone asks for gamma arrivals, as vllm bench serve's --burstiness does
    # (its arrivals are gamma at every burstiness; Poisson is its burstiness 1)
    args.arrival = args.arrival or ("gamma" if args.burstiness is not None else "poisson")


def _dataset_name(text: str) -> str:
    """--dataset-name: random, or a one-line refusal naming what replays a real dataset (and
    'random', where ``text`` is a slip from it: 'randon')."""
    from ridgeline.catalog import nearest_spelling

    if text.strip().lower() != "random":
        slip = nearest_spelling(text.strip().lower(), ["random"])
        raise InputError(f"{text}: " + (f"did you mean {slip}? " if slip else "")
                         + "simulate draws the random dataset's "
                         "synthetic lengths; a dataset of real prompts (sharegpt, …) is not "
                         "bundled: replay its lengths with --trace FILE")
    return "random"


def _range_ratio(text: str) -> float:
    """--random-range-ratio R, 0 ≤ R < 1 as vllm bench serve checks it."""
    try:
        ratio = float(text)
    except ValueError:
        ratio = math.nan
    if not 0 <= ratio < 1:
        raise InputError(f"R is 0 ≤ R < 1, as vllm bench serve takes it, got {text!r}")
    return ratio


def ranged(spec: str, ratio: float, flag: str) -> str:
    """A plain length L as vllm bench serve's RandomDataset draws it under --random-range-ratio
    R: uniform whole tokens in [floor(L(1 − R)), ceil(L(1 + R))], at least 1
    (vllm/benchmarks/datasets.py, RandomDataset.get_sampling_params). 1024 at 0.5:
    uniform:512,1536."""
    from ridgeline.units import parse_count

    if not fixed_length(spec):
        raise InputError(f"--random-range-ratio draws around a plain {flag}; {spec!r} is "
                         "already a distribution")
    length = parse_count(spec, flag)
    low, high = max(1, math.floor(length * (1 - ratio))), max(1, math.ceil(length * (1 + ratio)))
    return f"uniform:{low},{high}"


def _arrival_window(text: str) -> tuple[float, float]:
    """--window FROM,UNTIL: seconds of arrival, 0 ≤ FROM < UNTIL, both finite."""
    parts = str(text).split(",")
    try:
        low, high = (float(x) for x in parts) if len(parts) == 2 else (math.nan, math.nan)
    except ValueError:
        low = high = math.nan
    if not (math.isfinite(low) and math.isfinite(high) and 0 <= low < high):
        raise InputError(f"--window is FROM,UNTIL, seconds of arrival with 0 ≤ FROM < UNTIL "
                         f"(10,90), got {text!r}")
    return low, high


def _export_path(text: str) -> str:
    """--export's file: .csv, or .json for a list of objects (out.xlsx had been written as
    CSV text under a spreadsheet's name)."""
    _not_empty("export path")(text)
    if not text.lower().endswith((".csv", ".json")):
        raise InputError(f"--export writes a .csv or a .json file, got {text!r}")
    return text


def register(sub: Any) -> None:

    p = sub.add_parser("simulate", help="continuous batching under a load: TTFT/TPOT, goodput")
    _deployment_flags(p)
    _engine(p)
    _offload(p)
    w = p.add_argument_group("workload")
    w.add_argument("--rate", "--request-rate", type=_typed(_request_rate),
                   help="requests per second; inf sends them all at time 0, as vllm bench "
                   "serve's --request-rate inf does")
    w.add_argument("--concurrency", "--max-concurrency", type=_how_many("concurrency", MAX_BATCH),
                   help="closed loop: keep this many requests in flight (vllm bench serve's "
                   "--max-concurrency at its default rate, inf); beside --rate or --trace, the "
                   "most in flight, a request that arrives while that many are running "
                   "waiting client-side")
    w.add_argument("--num-requests", "--num-prompts",
                   type=_how_many("number of requests", MAX_REQUESTS),
                   help="requests to run (default 1000, as vllm bench serve's)")
    w.add_argument("--input-len", "--random-input-len", type=_not_empty("--input-len"),
                   help="prompt tokens: 512 (default; vllm bench serve's random dataset: "
                   "1024), uniform:a,b, normal:mean,sd, lognormal:median,sigma, zipf:s,max, "
                   "file:PATH")
    w.add_argument("--output-len", "--random-output-len", type=_not_empty("--output-len"),
                   help="output tokens, drawn as --input-len's (default 128)")
    w.add_argument("--random-range-ratio", type=_typed(_range_ratio), metavar="R",
                   help="vllm bench serve's: each plain --input-len/--output-len L drawn "
                   "uniform on whole tokens in [floor(L(1 − R)), ceil(L(1 + R))] (an output "
                   "at least 1), 0 ≤ R < 1, as vllm/benchmarks/datasets.py's RandomDataset "
                   "draws them (the older benchmarks/benchmark_serving.py and "
                   "sglang.bench_serving draw [L·R, L]: give uniform:a,b for those)")
    w.add_argument("--dataset-name", metavar="NAME", type=_typed(_dataset_name),
                   help="vllm bench serve's: random, the synthetic lengths simulate draws "
                   "(the default lengths then its 1024 in, 128 out); a dataset of real "
                   "prompts is replayed with --trace")
    w.add_argument("--arrival", choices=["poisson", "gamma", "constant"],
                   help="open-loop arrivals (default poisson)")
    w.add_argument("--burstiness", type=_positive_float("burstiness"),
                   help="gamma arrivals' shape, as vllm bench serve's (given alone, the "
                   "arrivals are gamma): below 1 burstier than Poisson (gaps' coefficient "
                   "of variation 1/√burstiness)")
    w.add_argument("--prefix-groups", type=_count("prefix groups", COUNT_EXAMPLES), default=0,
                   help="requests share one of this many prompt prefixes")
    w.add_argument("--prefix-len", type=_count("prefix length"), default=0,
                   help="tokens of the shared prefix")
    w.add_argument("--seed", type=_count("seed", COUNT_EXAMPLES), default=0,
                   help="the synthetic load's draw (default 0): the same seed, the same requests")
    w.add_argument("--trace", metavar="FILE", type=_not_empty("trace path"),
                   help="replay CSV/JSONL (arrival_s, prompt_tokens, output_tokens; or Azure's "
                   "TIMESTAMP, ContextTokens, GeneratedTokens); an arrival is seconds or an "
                   "ISO date, UTC unless it gives an offset")
    w.add_argument("--percentile", type=_typed(_percentile),
                   metavar="P", help="also read the latencies at this percentile (in percent), "
                   "a request the engine rejected counting as a miss, as plan reads its checks")
    w.add_argument("--window", metavar="FROM,UNTIL", type=_typed(_arrival_window),
                   help="count the latencies of the requests arriving between these seconds "
                   "only (the steady state: the rest warm the engine up and drain it), and "
                   "check that the engine keeps up with them; seconds from the first "
                   "arrival, a --trace's times counted from its first request; plan's checks "
                   "print theirs")
    g = p.add_argument_group("engine settings (the engine's own names; default: its default)")
    max_model_len_option(g, "longest request the engine admits (default: the model's context, "
                         "as vLLM's)")
    engine_sizes(g)
    expert_parallel_flags(g)
    data_parallel_flags(g, expert_parallel=False)
    g.add_argument("--enforce-eager", "--disable-cuda-graph", dest="enforce_eager",
                   action="store_true", help="no CUDA graphs (vLLM --enforce-eager, SGLang "
                   "--disable-cuda-graph, TensorRT-LLM's cuda_graph_config: null): decode steps "
                   "pay a prefill step's per-layer cost; vLLM's pool keeps the graphs' memory")
    _usage_and_version(g, "memory and scheduling rules to follow")
    pool_switches(g, "prompt reuse between requests; vLLM runs a hybrid with recurrent "
                  "state without it by default before v0.28, and with it a linear-attention "
                  "hybrid keeps two state blocks per request")
    sglang_overlap(g)
    trtllm_overlap(g)
    g.add_argument("--ignore-eos", action="store_true",
                   help="the requests ask for exactly their output, as benchmarks send them "
                   "(vllm bench serve --ignore-eos; sglang.bench_serving unless "
                   "--disable-ignore-eos): every engine here runs each request to its output "
                   "length anyway; SGLang's admission then holds each running request's whole "
                   "remaining output, not × new_token_ratio")
    spec_flags(g)
    g.add_argument("--long-prefill-token-threshold", type=_count("long prefill token threshold"),
                   metavar="N", help="vLLM: a request takes at most N tokens a step, leaving "
                   "the rest of the budget to the requests behind it (default 0: off; from "
                   "v0.31 not while it is the only request)")
    p.add_argument("--slo-ttft-ms", type=_positive_float("TTFT SLO"), metavar="MS",
                   help="goodput: a request meets the SLO with its TTFT at most this")
    p.add_argument("--slo-tpot-ms", type=_positive_float("TPOT SLO"), metavar="MS",
                   help="… and its TPOT at most this (each request's own; plan reads them at "
                   "--percentile)")
    p.add_argument("--slo-itl-ms", type=_positive_float("ITL SLO"), metavar="MS",
                   help="the run's inter-token latency at --percentile (default 90, plan's) at "
                   "most this, over the streamed chunks of the requests whose latencies count "
                   "(a --window's), as plan judges a check; a run's, not a request's, so "
                   "goodput leaves it out (as vllm bench serve's --goodput takes no ITL)")
    p.add_argument("--export", metavar="FILE", type=_typed(_export_path),
                   help="per-request CSV (or .json): arrival_s is the request's send, where "
                   "its latencies start; offered_arrival_s when it came (earlier where "
                   "--max-concurrency beside --request-rate or --trace held it for a seat)")
    _output(p, plot=True)
    p.set_defaults(handler=cmd_simulate)
