"""CLI: serving questions — fit, simulate, plan, observe."""

from __future__ import annotations

import argparse
import math
from typing import Any

from ridgeline.cli import (
    MAX_BATCH,
    _accelerator_name,
    _count,
    _engine,
    _engine_name,
    _formats,
    _gpu,
    _model,
    _name_list,
    _not_empty,
    _offload,
    _output,
    _pipeline,
    _positive_count,
    _positive_float,
    _share,
    _split_mode,
    _typed,
    accelerator_names,
    auto_layers,
    build_deployment,
    card_id,
    engine_settings,
    engine_sizes,
    fitted,
    fitted_context,
    load_accelerator,
    load_deployment,
    load_model,
    load_profile,
    no_fit_ctx,
    one_card,
    pipeline_size,
)
from ridgeline.context_length import positions_label, served_positions
from ridgeline.errors import InputError, shorten
from ridgeline.side_by_side import run_each

MAX_REQUESTS = 10_000_000  # a simulation that finishes: about 10 minutes at 10 million
SPEC_ACCEPTANCE, SPEC_DRAFT_COST = 0.7, 0.05  # simulate's speculative-decoding defaults
MAX_WORKERS = 256  # processes plan may start on this machine (--executor ray: the cluster's)
MAX_POLL_S = 86_400.0  # observe's window and interval against a live engine: a day


def _prefix_caching(g: Any, help_text: str) -> None:
    switch = g.add_mutually_exclusive_group()
    switch.add_argument("--enable-prefix-caching", dest="prefix_caching", action="store_const",
                        const=True, help=help_text + " (default: the engine's)")
    switch.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_const",
                        const=False, help="the engine without prefix caching (TensorRT-LLM: "
                        "kv_cache_config.enable_block_reuse false)")


def cmd_fit(args: argparse.Namespace) -> Any:
    from dataclasses import replace

    from ridgeline.engines import engine_id
    from ridgeline.llamacpp_pool import check_host_memory_for
    from ridgeline.reports.fit import fit_report, longest_context, slots_for_target

    model = load_model(args)
    defaulted = ""
    if args.max_model_len is None and args.target_concurrency is None \
            and not auto_layers(args):
        if any(engine_id(e.strip()).startswith("llama.cpp") for e in args.engine.split(",")):
            raise InputError("give --max-model-len L (llama-server's -c), -ngl auto for its "
                             "default -c 0 under --fit (the context that fits), or "
                             "--target-concurrency T alone for the longest context T "
                             "conversations can have")
        # vllm serve's default, SGLang's and TensorRT-LLM's alike: the context each derives
        # from the config (served_positions); comparing engines, the shortest of theirs
        named = [engine_id(e.strip()) for e in args.engine.split(",")]
        served = [(served_positions(model, e), e) for e in named]
        if any(n is None for n, _ in served):
            raise InputError("give --max-model-len L (the config states no "
                             "max_position_embeddings), or --target-concurrency T alone to "
                             "find the longest context T conversations can have")
        positions, first = min((n or 0, e) for n, e in served)
        args.max_model_len = positions
        alike = len({served_positions(model, e) for e in ("vllm", "sglang", "trtllm")}) == 1
        engines_named = ("vLLM, SGLang and TensorRT-LLM default it" if alike
                         else f"{first} defaults it")
        defaulted = (f"--max-model-len not given: {args.max_model_len:,}, {model.name}'s "
                     f"{positions_label(model, first)}, as {engines_named} "
                     "(--target-concurrency T alone finds the longest context T conversations "
                     "can have)")
    engines = [engine_id(name.strip()) for name in args.engine.split(",")]
    cards = accelerator_names(args)
    if args.max_model_len is None and (len(engines) > 1 or len(cards) > 1):
        raise InputError("the longest-context search runs on one deployment: give one --engine "
                         "and one --gpu, or --max-model-len to compare")
    if len(cards) > 1:
        return _compare_accelerators(args, model, cards, engines)
    acc = load_accelerator(args)
    if len(engines) > 1:
        return _compare_engines(args, model, acc, engines)
    dep = build_deployment(args, model, acc, engines[0])
    check_engine_flags(args, engines[0])
    if args.enforce_eager and engines[0] != "vllm":
        raise InputError(f"--enforce-eager sizes vLLM's pool without its CUDA-graph memory; "
                         f"{engines[0]}'s pool does not depend on it (`decode` and `simulate` "
                         "take it, for the step time without graphs)")
    settings = engine_settings(args)
    if args.max_model_len is None and auto_layers(args):
        if args.target_concurrency is not None:
            raise InputError("-ngl auto places the layers for a context: give --max-model-len "
                             "with --target-concurrency (or neither, for llama-server's -c 0)")
        from ridgeline.llamacpp_fit import context_story

        context, dep = fitted_context(args, dep, settings)
        return replace(fit_report(dep, context, settings, None),
                       searched=context_story(dep, context))
    if args.max_model_len is None:
        return longest_context(dep, settings, args.target_concurrency)
    no_fit_ctx(args)
    settings = slots_for_target(dep, settings, args.target_concurrency)  # before --fit places
    dep = fitted(args, dep, settings, args.max_model_len, args.target_concurrency or 1,
                 check_host=False)
    report = fit_report(dep, args.max_model_len, settings, args.target_concurrency)
    check_host_memory_for(dep, report.launch_cells)  # the -c it tells llama-server to take
    return replace(report, searched=defaulted) if defaulted else report


def _compare_accelerators(args: argparse.Namespace, model: Any, cards: list[str],
                          engines: list[str]) -> Any:
    from ridgeline.engines import engine_id
    from ridgeline.reports.fit import fit_report, slots_for_target
    from ridgeline.reports.fit_comparison import FitComparison

    if len(engines) > 1:
        raise InputError("compare engines or accelerators, not both: give one --engine or "
                         "one --gpu")
    if args.plot:
        raise InputError("--plot draws one deployment; give one --gpu")
    settings = engine_settings(args)

    def on(card: str) -> Any:
        one = one_card(args, card)
        acc = load_accelerator(one)
        engine = engine_id(one.engine) if len(engines) == 1 else engines[0]  # the card's build
        dep = build_deployment(args, model, acc, engine)
        slots = slots_for_target(dep, settings, args.target_concurrency)
        dep = fitted(args, dep, slots, args.max_model_len, args.target_concurrency or 1)
        return fit_report(dep, args.max_model_len, slots, args.target_concurrency)

    reports, not_run = run_each(cards, on, card_id)
    return FitComparison(tuple(reports), by="accelerator", not_run=not_run)


PLAN_ENGINES = ("vllm", "sglang", "trtllm")  # the CUDA-graph serving engines plan sizes for
# the settings that name one engine's knob: a comparison runs each engine at its defaults
ENGINE_KNOBS = ("gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens",
                "block_size", "engine_version", "flash_attn", "swa_full_tokens_ratio",
                "split_mode", "gpu_layers", "n_cpu_moe", "cpu_moe", "host_bandwidth_gbs",
                "host_link_gbs", "host_memory_gib", "output_layer_last", "fit_target_mib",
                "fit_ctx", "no_async_scheduling", "prefix_caching", "language_model_only",
                "backend", "warm_compile_cache", "kv_cache_memory_bytes", "max_total_tokens")


def _compare_engines(args: argparse.Namespace, model: Any, acc: Any, engines: list[str]) -> Any:
    from ridgeline.memory import EngineSettings
    from ridgeline.reports.fit import fit_report
    from ridgeline.reports.fit_comparison import FitComparison

    flag = {"gpu_layers": "-ngl", "fit_target_mib": "--fit-target",
            "prefix_caching": "--enable-prefix-caching" if args.prefix_caching
            else "--no-prefix-caching"}
    knobs = [flag.get(k, f"--{k.replace('_', '-')}") for k in ENGINE_KNOBS
             if getattr(args, k, None) is not None
             and (getattr(args, k) is not False or k == "prefix_caching")]
    if knobs or args.enforce_eager or args.plot:
        given = knobs + (["--enforce-eager"] if args.enforce_eager else []) + (
            ["--plot"] if args.plot else [])
        verb = "names" if len(given) == 1 else "name"
        raise InputError(f"{', '.join(given)} {verb} one engine's settings; compare engines at "
                         "their defaults, or give one --engine")
    if len(set(engines)) < len(engines):
        raise InputError("an engine is named twice in --engine")
    settings = EngineSettings(max_model_len=args.max_model_len, usage=args.usage or "serve")
    reports, not_run = run_each(engines, lambda engine: fit_report(
        build_deployment(args, model, acc, engine), args.max_model_len, settings,
        args.target_concurrency))
    return FitComparison(tuple(reports), not_run=not_run)

def cmd_simulate(args: argparse.Namespace) -> Any:
    import csv
    import json
    from dataclasses import replace

    from ridgeline.engines import engine_id
    from ridgeline.memory import kv_pool
    from ridgeline.reports.simulate import SimulateReport
    from ridgeline.sim.config import llamacpp_context, sim_config, start_refusal, too_small_pool
    from ridgeline.sim.pipeline import lane_config, one_pool, run_replica
    from ridgeline.sim.workload import Workload, read_trace
    from ridgeline.units import plural

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
    if args.expert_parallel and dep.tensor_parallel_size < 2:
        raise InputError("--enable-expert-parallel spreads the experts over the tensor-parallel "
                         "GPUs: with one there is nothing to spread (vLLM's expert "
                         "parallelism is off at TP × DP = 1)")
    stray = [flag for flag, value in (("--spec-acceptance", args.spec_acceptance),
                                      ("--spec-draft-cost", args.spec_draft_cost))
             if value is not None and not args.spec_tokens]
    if stray:
        raise InputError(f"{', '.join(stray)} describe{'s' if len(stray) == 1 else ''} "
                         "speculative decoding: give --spec-tokens N, a draft of at least "
                         "1 token")
    check_load_flags(args)
    if args.burstiness is not None and args.arrival != "gamma":
        raise InputError("--burstiness shapes gamma arrivals: give --arrival gamma")
    args.spec_acceptance = SPEC_ACCEPTANCE if args.spec_acceptance is None else args.spec_acceptance
    args.spec_draft_cost = SPEC_DRAFT_COST if args.spec_draft_cost is None else args.spec_draft_cost
    args.burstiness = 1.0 if args.burstiness is None else args.burstiness
    check_engine_flags(args, engine)
    settings = engine_settings(args)
    story = ""
    if auto_layers(args) and not settings.max_model_len:  # llama-server's -c 0 under --fit
        from ridgeline.llamacpp_fit import context_story

        context, dep = fitted_context(args, dep, settings)
        settings = replace(settings, max_model_len=context)
        story = context_story(dep, context)
    elif auto_layers(args):  # --fit sizes for -c: every slot's max_model_len
        no_fit_ctx(args)
        dep = fitted(args, dep, settings, settings.max_model_len,
                     kv_pool(dep, settings).max_num_seqs)
    # llama-server allocates -c cells and no more: the context --fit chose, else the one asked
    # for (--max-model-len × slots), else its -c 0, the trained context
    cells = None if not engine.startswith("llama.cpp") else (
        (settings.max_model_len, "--fit") if story else llamacpp_context(dep, settings))
    config = sim_config(dep, settings, args.spec_tokens, args.spec_acceptance, args.spec_draft_cost,
                        cells=cells[0] if cells else None)
    if args.ignore_eos:
        config = replace(config, ignore_eos=True)
    refusal = start_refusal(dep, settings, config, None if story else cells)
    if config.num_blocks >= 1 and not auto_layers(args):  # the host's RAM holds the host
        from ridgeline.llamacpp_pool import check_host_memory_for  # layers' cache for the pool

        check_host_memory_for(dep, config.num_blocks * config.block_size)
    if refusal:
        from ridgeline.capacity import context_refusal
        from ridgeline.reports.simulate import pool_levers

        pool_too_small = not context_refusal(dep, config.max_model_len) \
            and too_small_pool(dep, settings)  # no length rescues it: say what would
        raise InputError(refusal + (pool_levers(dep, settings, config.max_model_len)
                                    if pool_too_small else ""))
    if args.trace and args.rate is not None:
        raise InputError("--trace replays its own arrival times; drop --rate")
    if args.rate is not None and args.concurrency is not None:
        raise InputError("--rate (open loop) and --concurrency (closed loop) are two loads; "
                         "give one")
    if args.trace and (args.prefix_groups or args.prefix_len):
        raise InputError("--trace replays its own prompts; drop --prefix-groups/--prefix-len")
    if args.trace:
        requests: Any = read_trace(args.trace)
        count, load = len(requests), f"trace {args.trace} ({len(requests):,} requests)" + (
            f", its lengths sent by a closed loop of {args.concurrency} users (its arrival "
            "times unused)" if args.concurrency else "")
    else:
        if args.rate is None and args.concurrency is None:
            raise InputError("give --rate R (requests/s), --concurrency C, or --trace FILE")
        rate = math.inf if args.rate is None else args.rate
        requests = Workload(args.num_requests, args.input_len, args.output_len, rate,
                            args.arrival, args.burstiness, args.prefix_groups, args.prefix_len,
                            args.seed)
        count = args.num_requests
        load = (f"{args.num_requests:,} {plural(args.num_requests, 'request')}, input "
                f"{args.input_len}, output "
                f"{args.output_len}, " + (f"concurrency {args.concurrency}"
                                          if args.concurrency else
                                          f"{args.arrival} arrivals at {args.rate:g}/s"))
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
    # vLLM V1: one pool, pp micro-batches in flight (sim/pipeline.py); V0, SGLang and
    # TensorRT-LLM: pp lanes, each 1/pp of it (sim/lanes.py)
    split = pp > 1 and not one_pool(engine, args.engine_version)
    lane = lane_config(config, pp, engine, args.engine_version)
    # where the lanes split a pool the engine shares (SGLang, TensorRT-LLM), or split it as
    # the engine does (vLLM V0's virtual engines)
    shared = (f"where {engine} shares one pool among its batches in flight" if engine != "vllm"
              else f"as vLLM {args.engine_version}'s V0 virtual engines each hold 1/{pp}")
    if lane.num_blocks < 1:
        raise InputError(f"does not fit: a pipeline lane's share of the KV pool (1/{pp} of "
                         f"{config.num_blocks:,} blocks) holds no block (see `ridgeline fit`)")
    result = run_replica(dep, profile, config, requests, args.engine_version,
                         closed_loop=args.concurrency or 0, keep_rows=bool(args.export),
                         slo=(slo_ttft, slo_tpot), window_s=args.window,
                         stop_when_behind=True)
    if result.rejected and not result.completed:  # nothing ran: no latency to report
        reason, n = max(result.rec.rejected.items(), key=lambda item: item[1])
        first = result.rec.rejected_first.get(reason)
        raise InputError(f"the engine refused every request ({n:,} of {result.rejected:,}: "
                         f"{reason}" + (f"; first: {first}" if first else "") + ")"
                         + (f"; each of the {pp} pipeline lanes is simulated with 1/{pp} of "
                            f"the {config.num_blocks:,} blocks, {shared} (`ridgeline fit` "
                            "sizes that pool)" if split else ""))
    if args.window and result.completed and not result.rec.windowed \
            and result.rec.stopped_early:
        raise InputError(f"the engine fell hopelessly behind, finishing "
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
        header = ["id", "arrival_s", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s",
                  "e2e_s", "preemptions", "status"]
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
    from ridgeline.offload import offload_caution
    from ridgeline.parallel import cross_node_caution
    from ridgeline.predict import cdna3_moe_caution, eager_caution, gguf_caution
    from ridgeline.reports.expectation import context_caution
    from ridgeline.reports.simulate import (
        full_cache_caution,
        overload_rates,
        version_cautions,
        warmup_caution,
        whole_context_caution,
    )
    from ridgeline.serving_load import tail_caution
    from ridgeline.sim.config import v0_scheduling_caution

    span: float | None
    if args.concurrency or args.window:  # a closed loop holds its batch from the start; a
        span = None  # window leaves out the filling up and the draining
    elif args.trace:
        span = requests[-1].arrival_s - requests[0].arrival_s if requests else 0.0
    else:
        span = count / args.rate
    lane_tokens = lane.num_blocks * lane.block_size
    split_pool = (f"each of the {pp} pipeline lanes holds 1/{pp} of the pool "
                  f"({lane_tokens:,} tokens): a request longer than that is refused here, "
                  f"{shared}") if split and config.max_model_len > lane_tokens else ""
    lockstep = ("every request has the same lengths in a closed loop: the waves run in "
                "lockstep, so the percentiles all read alike; benchmarks draw lengths at random "
                "(vllm bench serve's and SGLang's --random-range-ratio), which --input-len and "
                "--output-len uniform:a,b reproduce") \
        if args.concurrency and not args.trace and fixed_length(args.input_len) \
        and fixed_length(args.output_len) and count > args.concurrency else ""
    v0 = v0_scheduling_caution(engine, args.engine_version)
    pool = kv_pool(dep, settings)
    cautions = tuple(c for c in (context_caution(dep, config.max_model_len), split_pool, lockstep,
                                 v0, *version_cautions(settings, pool),
                                 full_cache_caution(engine, result.preemptions),
                                 whole_context_caution(config, result.rec.over_budget_prompts),
                                 eager_caution(dep) if args.enforce_eager else "",
                                 offload_caution(dep), cdna3_moe_caution(dep), gguf_caution(dep),
                                 cross_node_caution(dep.tensor_parallel_size, dep.accelerator,
                                                    dep.engine),
                                 "" if overload_rates(result, count) else warmup_caution(
                                     span, result.percentiles("e2e")["mean"], args.rate),
                                 profile.calibration_caution(dep.accelerator),
                                 "" if args.percentile is None else tail_caution(
                                     result.rec.windowed + result.rec.windowed_rejected,
                                     args.percentile, "the percentiles read",
                                     "a trace of {n:,} or more" if args.trace
                                     else "--num-requests {n:,} or more")) if c)
    return SimulateReport(replace(dep), lane, result, count, load, slo_ttft, slo_tpot,
                          cautions=cautions, percentile=args.percentile,
                          lanes=pp if split else 1, engine_config=config,
                          micro_batches=1 if split else pp,
                          engine_version=settings.engine_version if pool.accounting is None
                          else pool.accounting.version,
                          usage=settings.usage if engine == "vllm" else None,
                          model_runner=pool.runner or None)

def fixed_length(text: str | None) -> bool:
    """Whether a length flag is one number (512, 2k), not a distribution."""
    return text is not None and ":" not in text


def check_engine_flags(args: argparse.Namespace, engine: str) -> None:
    """Refuse an engine setting the chosen engine has no use for, rather than drop it."""
    problems = []
    if engine.startswith("llama.cpp"):
        if args.gpu_memory_utilization is not None:
            problems.append("--gpu-memory-utilization: llama.cpp has no memory fraction; it "
                            "allocates the cache -c asks for (--max-model-len × --parallel)")
        if args.block_size is not None:
            problems.append("--block-size: llama.cpp caches single-token cells")
    if args.usage is not None and engine != "vllm":
        problems.append(f"--usage is vLLM's usage context (vllm serve or the LLM class); "
                        f"{engine} has none")
    if getattr(args, "ignore_eos", False) and engine != "sglang":
        problems.append(f"--ignore-eos changes only SGLang's admission estimate here ({engine} "
                        "admits by free blocks, or reserves the whole output)")
    if problems:
        raise InputError("; ".join(problems))


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
    if args.concurrency is not None:
        given = [flag for flag, value in (("--arrival", args.arrival),
                                          ("--burstiness", args.burstiness)) if value is not None]
        if given:
            raise InputError(f"--concurrency is a closed loop: each request arrives as one "
                             f"finishes; drop {', '.join(given)}")
    args.num_requests = 1000 if args.num_requests is None else args.num_requests
    args.input_len = args.input_len or "512"
    args.output_len = args.output_len or "128"
    args.arrival = args.arrival or "poisson"


def cmd_plan(args: argparse.Namespace) -> Any:
    from ridgeline.deployment import engine_platform_problem
    from ridgeline.hardware import MAX_PRICE_USD, resolve_accelerator
    from ridgeline.plan import DEFAULT_GPUS, plan
    from ridgeline.replica_sizing import DEFAULT_CONTEXT
    from ridgeline.reports.plan import PlanReport
    from ridgeline.serving_load import Load, Slo

    model = load_model(args)
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus \
        else [g for g in DEFAULT_GPUS  # the defaults the engine runs on (TRT-LLM: no AMD)
              if not engine_platform_problem(args.engine, resolve_accelerator(g))]
    cards = [resolve_accelerator(g) for g in gpus]
    ids = [acc.id for acc in cards]
    if len(set(ids)) < len(ids):
        raise InputError("an accelerator is named twice in --gpus")
    for acc in cards:  # plan sizes serving engines: none runs on Metal
        problem = engine_platform_problem(args.engine, acc)
        if problem:
            raise InputError(problem.split("; try")[0] + ": plan sizes vLLM, SGLang and "
                             "TensorRT-LLM deployments")
    prices: dict[str, float] = {}
    for item in args.price or []:
        name, _, value = item.partition("=")
        try:
            price = float(value)
        except ValueError:
            raise InputError(f"--price takes GPU=USD_PER_HOUR, got {item!r}") from None
        if not 0 < price <= MAX_PRICE_USD:
            raise InputError(f"a price is USD per GPU-hour, above 0 and at most "
                             f"{MAX_PRICE_USD:,.0f}, got {shorten(item)!r}")
        card = resolve_accelerator(name.strip()).id
        if card not in ids:
            raise InputError(f"--price {shorten(item)}: {card} is not among the searched GPUs "
                             f"({', '.join(ids)})")
        if card in prices:
            raise InputError(f"--price names {card} twice ({prices[card]:g} and {price:g}): "
                             "give one")
        prices[card] = price
    given = [flag for flag, value in (("--input-len", args.input_len),
                                      ("--output-len", args.output_len)) if value is not None]
    if args.trace and given:
        raise InputError(f"--trace replays its own lengths; drop {', '.join(given)}")
    load = Load.from_trace(args.trace, args.seed) if args.trace \
        else Load(args.rate, args.input_len or "1000", args.output_len or "250", args.seed)
    slo = Slo(args.slo_ttft_ms / 1e3, args.slo_tpot_ms / 1e3, args.percentile)
    if args.engine_version is not None:  # a bad version is named before the search
        from ridgeline.engine_versions import check_engine_version

        check_engine_version(args.engine, args.engine_version)
    result = plan(model, load, slo, gpus, args.max_gpus, prices, workers=args.workers,
                  executor=args.executor, engine_version=args.engine_version,
                  engine=args.engine, profile=load_profile(args))
    from ridgeline.catalog import model_entries

    hf = next((e.hf_id for e in model_entries() if e.id == model.name), args.model)
    if hf.lower().endswith(".json"):  # an engine loads a folder (config and weights), or an id
        from pathlib import Path

        hf = str(Path(hf).parent)
    win = result.winner  # its launch's --max-model-len, else the model's context
    max_len = win.max_model_len if win and win.max_model_len else \
        served_positions(model, args.engine) or DEFAULT_CONTEXT
    return PlanReport(model, hf, result, max_len, load.refused_share(max_len),
                      args.model, bool(args.fetch), args.profile or "")

def _seconds(text: str) -> float:
    text = str(text).strip().lower()
    factor = 60.0 if text.endswith("m") else 1.0
    try:
        value = float(text.rstrip("sm")) * factor
    except ValueError:
        raise InputError(f"a duration looks like 60s, 2m or 0.5, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise InputError(f"a duration is a finite time ≥ 0 such as 60s or 2m, got {text!r}")
    if value > MAX_POLL_S:
        raise InputError(f"a polling time is at most a day ({MAX_POLL_S:,.0f} s), got {text!r}")
    return value


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


def _positive_seconds(text: str) -> float:
    value = _seconds(text)
    if value <= 0:
        raise InputError(f"the time between scrapes must be above 0, got {text!r}")
    return value

def _vllm_memory_switches(g: Any) -> None:
    """vLLM switches that change what its pool holds (fit and simulate)."""
    g.add_argument("--no-async-scheduling", action="store_true",
                   help="vLLM v0.26+: window layers keep blocks for one batch in flight, not two")
    g.add_argument("--language-model-only", action="store_true",
                   help="vLLM: a multimodal checkpoint without its vision tower")
    g.add_argument("--warm-compile-cache", action="store_true",
                   help="vLLM v0.25.1+ (Model Runner V2): torch.compile's cache from an earlier "
                   "start is found, so the profile carries no cold compile (about 1 GiB more "
                   "pool); default: a first start, as in a fresh container")


def _percentile(text: str) -> float:
    """A percentile in percent, as simulate and plan read it: from 1 to below 100 (0.9 would
    be p0.9, not p90)."""
    value = _positive_float("percentile")(text)
    if not 1 <= value < 100:
        raise InputError(f"a percentile in percent, from 1 to below 100 (90 for p90), got "
                         f"{value:g}")
    return value


def _trtllm_backend(g: Any) -> None:
    """TensorRT-LLM's backend, which decides what it allocates before the cache."""
    g.add_argument("--backend", choices=["pytorch", "tensorrt"],
                   help="TensorRT-LLM (trtllm-serve --backend): pytorch (default from v1.0) or "
                   "tensorrt, the prebuilt engine (default before v1.0), whose runtime and "
                   "decoder keep vocabulary-sized buffers for every max_batch_size seat")


def engine_for_metrics(family: str | None, args: argparse.Namespace) -> str:
    """The engine a source's metric names point to: llama-server's build for the card
    (Metal on Apple silicon, ROCm on AMD, CUDA otherwise), SGLang, TensorRT-LLM, or the
    default."""
    from ridgeline.cli import default_engine, load_accelerator
    from ridgeline.engines import llamacpp_build

    if family in ("sglang", "trtllm"):
        return family
    if family == "llama.cpp":
        return llamacpp_build("llama.cpp", load_accelerator(args).vendor)
    return default_engine(args)


def cmd_observe(args: argparse.Namespace) -> Any:
    from dataclasses import replace

    from ridgeline.engines import engine_id
    from ridgeline.observe import is_url, read_source
    from ridgeline.reports.observe import observe_report

    args.fetch = False
    model = load_model(args)
    given = [flag for flag, value in (("--duration", args.duration), ("--interval", args.interval))
             if value is not None]
    if given and not is_url(args.source):  # a saved file's window is the one its scrapes span
        raise InputError(f"{' and '.join(given)} poll a URL; {args.source} is read as saved "
                         "(its window is the span of its timed scrapes)")
    obs = read_source(args.source, 60.0 if args.duration is None else args.duration,
                      1.0 if args.interval is None else args.interval)
    named = args.engine
    if named is None:  # the engine whose metric names the source carries, else the default
        args.engine = engine_for_metrics(obs.engine_family, args)
    dep = replace(load_deployment(args, model), engine=engine_id(args.engine))
    if named is not None and obs.engine_family and not engine_id(named).startswith(
            obs.engine_family):
        obs.notes.append(f"the source carries {obs.engine_family}'s metrics, but --engine "
                         f"{named} sizes the pool and the prediction")
    report = observe_report(obs, dep, load_profile(args), args.context)
    if args.emit_measurements:
        rows = report.measurement_rows(args.model)
        count = len(rows.splitlines()) - 1  # below its header
        if not count:
            obs.notes.append(f"--emit-measurements wrote nothing: {args.source} gives no row "
                             "`calibrate` takes (" + (
                                 "the deployment as described does not fit, so a row would "
                                 "price another than the server runs" if not report.fits else
                                 "one scrape's latency histogram covers the server's lifetime, "
                                 "not the batch it shows: scrape a window, a URL with "
                                 "--duration or a file of timed scrapes"
                                 if report.single_scrape else
                                 "one needs a mean inter-token latency and a running batch "
                                 "over the same window, which /metrics scrapes carry and a "
                                 "log does not") + ")")
            return report
        try:
            with open(args.emit_measurements, "w", encoding="utf-8", newline="") as handle:
                handle.write(rows)
        except OSError as exc:
            raise InputError(f"cannot write {args.emit_measurements}: {exc}") from None
        obs.notes.append(f"wrote {count} {'row' if count == 1 else 'rows'} for `ridgeline "
                         f"calibrate` to {args.emit_measurements}"
                         + (f"; its inter-token latency includes the {chunk:,} prompt tokens "
                            "each step carries on average, which calibrate reads as decode "
                            "alone (a little slow): measure a window with few arrivals for a "
                            "clean decode row" if (chunk := report.prompt_tokens_per_step)
                            else ""))
    return report

def register(sub: Any) -> None:

    p = sub.add_parser("fit", help="the KV pool an engine leaves, and the capacity verdict")
    _model(p)
    _gpu(p, several=True)
    _pipeline(p)
    _formats(p)
    p.add_argument("--max-model-len", type=_positive_count("max model length"), metavar="N",
                   help="tokens per conversation to size for (vLLM --max-model-len; 32k = "
                   "32,000, 32K = 32,768); leave it out with --target-concurrency to find the "
                   "longest context that many fit at")
    p.add_argument("--target-concurrency", type=_positive_count("target concurrency"),
                   help="conversations that must fit at once")
    p.add_argument("--engine", type=_name_list(_engine_name),
                   help="vllm (default; llama.cpp-metal on Apple silicon, llama.cpp-rocm on the "
                   "AMD GPUs vLLM leaves out), sglang, trtllm, "
                   "llama.cpp-…; several, comma-separated, to compare them")
    p.set_defaults(engine_by_accelerator=True)
    g = p.add_argument_group("engine settings (the engine's own names; default: its default)")
    _split_mode(g)
    engine_sizes(g)
    g.add_argument("--enforce-eager", action="store_true", help="vLLM: no CUDA graphs")
    _prefix_caching(g, "vLLM: a hybrid with recurrent state (Qwen3-Next, Nemotron-H) runs "
                    "without it by default before v0.28; with it, a linear-attention hybrid "
                    "keeps two state blocks per request, not one")
    _vllm_memory_switches(g)
    _trtllm_backend(g)
    g.add_argument("--swa-full-tokens-ratio", type=_positive_float("swa_full_tokens_ratio"),
                   metavar="R", help="SGLang hybrid-SWA models: window pool ÷ full pool "
                   "(default 0.8); lower holds more long conversations")
    g.add_argument("--flash-attn", choices=["on", "off", "auto"],
                   help="llama.cpp -fa (default auto: on where supported); off sizes the "
                   "attention scores into the compute buffer and costs their traffic")
    g.add_argument("--usage", choices=["serve", "offline"],
                   help="vLLM usage context: vllm serve (default) or the offline LLM class")
    g.add_argument("--engine-version", metavar="V",
                   help="engine version whose memory rules to follow, any release within an "
                   "era: vLLM 0.1 ... 0.32 (add V0 for VLLM_USE_V1=0), SGLang 0.3 ... "
                   "0.5.9, llama.cpp a build (b9400); default: the newest modelled")
    _offload(p)
    _output(p, plot=True)
    p.set_defaults(handler=cmd_fit)

    p = sub.add_parser("simulate", help="continuous batching under a load: TTFT/TPOT, goodput")
    _model(p)
    _gpu(p)
    _pipeline(p)
    _formats(p)
    _engine(p)
    _offload(p)
    w = p.add_argument_group("workload")
    w.add_argument("--rate", type=_positive_float("request rate"), help="requests per second")
    w.add_argument("--concurrency", type=_positive_count("concurrency", MAX_BATCH),
                   help="closed loop: keep this many requests in flight")
    w.add_argument("--num-requests", type=_positive_count("number of requests", MAX_REQUESTS),
                   help="requests to run (default 1000)")
    w.add_argument("--input-len", type=_not_empty("--input-len"),
                   help="512 (default), uniform:a,b, normal:mean,sd, lognormal:median,sigma, "
                   "zipf:s,max, file:PATH")
    w.add_argument("--output-len", type=_not_empty("--output-len"),
                   help="as --input-len (default 128)")
    w.add_argument("--arrival", choices=["poisson", "gamma", "constant"],
                   help="open-loop arrivals (default poisson)")
    w.add_argument("--burstiness", type=_positive_float("burstiness"),
                   help="gamma arrivals' shape, as vllm bench serve's: below 1 burstier "
                   "than Poisson (gaps' coefficient of variation 1/√burstiness)")
    w.add_argument("--prefix-groups", type=_count("prefix groups"), default=0,
                   help="requests share one of this many prompt prefixes")
    w.add_argument("--prefix-len", type=_count("prefix length"), default=0,
                   help="tokens of the shared prefix")
    w.add_argument("--seed", type=_count("seed"), default=0,
                   help="the synthetic load's draw (default 0): the same seed, the same requests")
    w.add_argument("--trace", metavar="FILE", type=_not_empty("trace path"),
                   help="replay CSV/JSONL (arrival_s, prompt_tokens, output_tokens; or Azure's "
                   "TIMESTAMP, ContextTokens, GeneratedTokens)")
    w.add_argument("--percentile", type=_typed(_percentile),
                   metavar="P", help="also read the latencies at this percentile (in percent), "
                   "a request the engine rejected counting as a miss, as plan reads its checks")
    w.add_argument("--window", metavar="FROM,UNTIL", type=_typed(_arrival_window),
                   help="count the latencies of the requests arriving between these seconds "
                   "only (the steady state: the rest warm the engine up and drain it), and "
                   "check that the engine keeps up with them; plan's checks print theirs")
    g = p.add_argument_group("engine settings (the engine's own names; default: its default)")
    g.add_argument("--max-model-len", type=_positive_count("max model length"), metavar="N",
                   help="longest request the engine admits (default: the model's context, as "
                   "vLLM's)")
    engine_sizes(g)
    g.add_argument("--enable-expert-parallel", "--ep", dest="expert_parallel",
                   action="store_true", help="MoE: each GPU holds whole experts, a share of "
                   "them, instead of a slice of every expert")
    g.add_argument("--enforce-eager", "--disable-cuda-graph", dest="enforce_eager",
                   action="store_true", help="no CUDA graphs: decode steps pay a prefill step's "
                   "per-layer cost; the pool keeps the graphs' memory")
    g.add_argument("--usage", choices=["serve", "offline"],
                   help="vLLM usage context: vllm serve (default) or the offline LLM class")
    g.add_argument("--engine-version", metavar="V",
                   help="engine version whose memory and scheduling rules to follow: vLLM "
                   "0.1 ... 0.32, SGLang 0.3 ... 0.5.9, llama.cpp a build (b9400); default: "
                   "the newest modelled")
    g.add_argument("--swa-full-tokens-ratio", type=_positive_float("swa_full_tokens_ratio"),
                   metavar="R", help="SGLang hybrid-SWA models: window pool ÷ full pool (0.8)")
    _prefix_caching(g, "prompt reuse between requests; vLLM runs a hybrid with recurrent "
                    "state without it by default before v0.28, and with it a linear-attention "
                    "hybrid keeps two state blocks per request")
    _vllm_memory_switches(g)
    _trtllm_backend(g)
    g.add_argument("--ignore-eos", action="store_true",
                   help="SGLang: the requests ask for exactly their output (sglang.bench_serving "
                   "sends ignore_eos unless --disable-ignore-eos), so admission holds each "
                   "running request's whole remaining output, not × new_token_ratio")
    g.add_argument("--spec-tokens", type=_count("draft length"), default=0,
                   help="speculative decoding: draft length")
    g.add_argument("--spec-acceptance", type=_share("draft acceptance rate"),
                   help=f"chance each draft token is accepted (default {SPEC_ACCEPTANCE})")
    g.add_argument("--spec-draft-cost", type=float,
                   help="a drafter pass's cost as a share of the target model's time for "
                   "the same tokens: one pass over the step's tokens, then drafts − 1 of one "
                   f"token per sampling row (default {SPEC_DRAFT_COST})")
    p.add_argument("--slo-ttft-ms", type=_positive_float("TTFT SLO"), metavar="MS",
                   help="goodput: a request meets the SLO with its TTFT at most this")
    p.add_argument("--slo-tpot-ms", type=_positive_float("TPOT SLO"), metavar="MS",
                   help="… and its TPOT at most this (each request's own; plan reads them at "
                   "--percentile)")
    p.add_argument("--export", metavar="FILE", type=_typed(_export_path),
                   help="per-request CSV (or .json)")
    _output(p, plot=True)
    p.set_defaults(handler=cmd_simulate)

    p = sub.add_parser("plan", help="the cheapest deployment that meets an SLO for a load",
                       epilog="Exit status: 0 with a deployment to run: the winner, the "
                       "cheapest unverified one where a measured caution leaves it so, or "
                       "cards that meet the SLO without a price (--price); 1 where no "
                       "deployment within the limits meets the SLO (the report, or --json, "
                       "is still printed, with the closest miss); 2 for bad input.")
    _model(p)
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument("--rate", type=_positive_float("request rate"),
                      help="requests/s, with --input-len and --output-len")
    load.add_argument("--trace", metavar="FILE", type=_not_empty("trace path"),
                      help="a recorded load (CSV/JSONL as in simulate, Azure layout too): its "
                      "rate and lengths, replayed round-robin across replicas")
    p.add_argument("--input-len", type=_not_empty("--input-len"),
                   help="prompt tokens, as in simulate (1000 by default here; "
                   "512, lognormal:median,sigma, …)")
    p.add_argument("--output-len", type=_not_empty("--output-len"),
                   help="output tokens, as --input-len (250 by default here)")
    p.add_argument("--slo-ttft-ms", type=_positive_float("TTFT SLO"), required=True,
                   metavar="MS", help="time to first token the --percentile request may take")
    p.add_argument("--slo-tpot-ms", type=_positive_float("TPOT SLO"), required=True,
                   metavar="MS", help="time per output token at the same percentile")
    p.add_argument("--percentile", type=_typed(_percentile), default=90.0,
                   help="the SLO's percentile, in percent (default 90: p90)")
    p.add_argument("--gpus", type=_name_list(_accelerator_name),
                   help="candidate accelerators, comma-separated "
                   "(default h100-sxm,h200-sxm,b200,mi300x,l40s)")
    p.add_argument("--max-gpus", type=_positive_count("max GPUs"), default=64,
                   help="GPUs in all replicas together (default 64)")
    p.add_argument("--price", action="append", metavar="GPU=USD",
                   help="price per GPU-hour, repeatable (default: the catalog's)")
    p.add_argument("--workers", type=_positive_count("workers", MAX_WORKERS), default=2,
                   help="processes evaluating candidates (default 2)")
    p.add_argument("--executor", choices=["process", "ray"], default="process",
                   help="local processes (default) or a Ray cluster (RAY_ADDRESS; extra ray)")
    p.add_argument("--seed", type=_count("seed"), default=0,
                   help="the synthetic load's draw (default 0)")
    p.add_argument("--engine", choices=PLAN_ENGINES, default="vllm",
                   help="the serving engine whose memory rules size each replica's pool "
                   "(default vllm)")
    p.add_argument("--engine-version", metavar="V",
                   help="that engine's version whose memory accounting sizes the pools (vLLM, "
                   "SGLang; default: newest)")
    p.add_argument("--profile", metavar="FILE",
                   help="the engine's profile from `ridgeline calibrate` (default: the bundled "
                   "one) that times each candidate's steps")
    _output(p, plot=True)
    p.set_defaults(handler=cmd_plan)

    p = sub.add_parser("observe", help="a live engine's batch on the roofline, and its wall")
    p.add_argument("source", metavar="SOURCE",
                   help="/metrics URL, saved metrics text, a vLLM server log (its stats "
                   "lines and start-up pool; other engines' logs are not read), or a bench "
                   "result JSON")
    p.add_argument("--model", required=True, help="the model the engine serves")
    _gpu(p)
    _pipeline(p)
    _formats(p)
    _engine(p)
    p.add_argument("--duration", type=_typed(_seconds),
                   help="polling window for a URL (60s)")
    p.add_argument("--interval", type=_typed(_positive_seconds),
                   help="time between scrapes of a URL, at least 1 s (1s)")
    p.add_argument("--context", type=_positive_count("context"),
                   help="typical tokens per sequence (default: from the source, else 2000)")
    p.add_argument("--emit-measurements", metavar="FILE", type=_not_empty("output path"),
                   help="write what was observed as measurement rows for `calibrate`")
    _output(p)
    # no --engine: the one whose metric names the source carries (cmd_observe)
    p.set_defaults(handler=cmd_observe, engine_by_accelerator=False)
