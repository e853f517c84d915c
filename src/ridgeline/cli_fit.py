"""CLI: fit — the KV pool an engine leaves and the capacity verdict, for one deployment
or several engines or cards side by side."""

from __future__ import annotations

import argparse
from typing import Any

from ridgeline.cli import (
    _deployment_flags,
    _output,
    data_parallel_flags,
    engine_sizes,
    max_model_len_option,
)
from ridgeline.cli_engine import (
    MEMORY_RULES,
    _usage_and_version,
    check_engine_flags,
    pool_switches,
    say_async_caution,
)
from ridgeline.cli_load import (
    _say_caution,
    accelerator_names,
    build_deployment,
    card_engines,
    card_id,
    check_cards,
    engine_settings,
    load_accelerator,
    load_model,
    one_card,
)
from ridgeline.cli_offload import (
    _offload,
    _split_mode,
    auto_layers,
    fit_host,
    fitted_context_run,
    launch_fitted_run,
    no_fit_ctx,
)
from ridgeline.cli_spec import spec_drafter, spec_flags
from ridgeline.cli_types import (
    _engine_name,
    _flash_attn,
    _how_many,
    _name_list,
    _typed,
)
from ridgeline.context_length import positions_label, served_positions
from ridgeline.errors import InputError
from ridgeline.sglang_memory import sglang_eager_drops_graphs
from ridgeline.side_by_side import run_each


def cmd_fit(args: argparse.Namespace) -> Any:
    from dataclasses import replace

    from ridgeline.drafter_memory import vllm_draft_settings
    from ridgeline.engines import engine_id
    from ridgeline.llamacpp_pool import check_host_memory_for
    from ridgeline.reports.fit import fit_report, longest_context, slots_for_target

    check_cards(args)  # an unknown card refused before the model loads (a --fetch download)
    model = load_model(args)
    spec_drafter(args, model, [engine_id(n.strip()) for n in args.engine.split(",")])
    defaulted = ""
    named = card_engines(args)
    one = named[0] if len(named) == 1 and len(accelerator_names(args)) == 1 else None
    placed_by_fit = auto_layers(args, engine_id(one) if one else None)  # -ngl auto, or the build's
    if args.max_model_len is None and args.target_concurrency is None \
            and not placed_by_fit:
        if any(engine_id(e).startswith("llama.cpp") for e in named):
            raise InputError("give --max-model-len L (llama-server's -c), or "
                             "--target-concurrency T alone for the longest context T "
                             "conversations can have (llama-server's -c 0 under --fit, the "
                             "context that fits, is one engine's on one card, from b7437)")
        # vllm serve's default, SGLang's and TensorRT-LLM's alike: the context each derives
        # from the config (served_positions); comparing engines, the shortest of theirs
        served = [(served_positions(model, engine_id(e)), engine_id(e)) for e in named]
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
    if args.enforce_eager and engines[0] == "sglang":
        version = getattr(args, "engine_version", None)
        if sglang_eager_drops_graphs(version):  # v0.5.14+: its reserve leaves the graphs out
            _say_caution(args, SGLANG_EAGER_DROPS)
        else:
            _say_caution(args, SGLANG_EAGER)
            args.enforce_eager = False  # SGLang's pool is the same with graphs off
    if args.enforce_eager and engines[0] not in ("vllm", "sglang"):
        raise InputError(f"--enforce-eager sizes vLLM's pool without its CUDA-graph memory; "
                         f"{engines[0]}'s pool does not depend on it (`decode` and `simulate` "
                         "take it, for the step time without graphs)")
    settings = vllm_draft_settings(engines[0], engine_settings(args))  # 0.9.x: V0
    say_async_caution(args, dep, settings)
    if engines[0] == "trtllm":
        from ridgeline.trtllm_memory import flash_mla_caution

        _say_caution(args, flash_mla_caution(dep, settings.block_size, settings.backend))
    if args.max_model_len is None and (auto_layers(args) or (
            placed_by_fit and args.target_concurrency is None)):  # the search keeps all on the GPU
        if args.target_concurrency is not None:
            raise InputError("-ngl auto places the layers for a context: give --max-model-len "
                             "with --target-concurrency (or neither, for llama-server's -c 0)")
        from ridgeline.llamacpp_fit import context_story

        run = fitted_context_run(args, dep, settings)  # no placement: every layer as given
        host = {"fit_host": None} if run.unplaced else fit_host(args, run.deployment)
        return replace(fit_report(run.deployment, run.context, settings, None, **host),
                       searched=context_story(run.deployment, run.context, bool(run.unplaced)),
                       fit_note=run.caution())
    if args.max_model_len is None:
        return longest_context(dep, settings, args.target_concurrency, **fit_host(args, dep))
    no_fit_ctx(args)
    settings = slots_for_target(dep, settings, args.target_concurrency)  # before --fit places
    report = _launched_report(args, dep, settings, check_host=False)  # simulate's -c and -ngl
    check_host_memory_for(report.deployment, report.launch_cells)  # the -c llama-server takes
    if not defaulted:
        return report
    from ridgeline.reports.fit import ridge_context
    from ridgeline.reports.fit_headline_steps import ridge_context_step
    from ridgeline.reports.fit_verdict import UNDER_RIDGE

    report = replace(report, searched=defaulted,  # the verdict said to be the full context's
                     ridge_context=ridge_context(report) if report.verdict == UNDER_RIDGE
                     else None)
    shown = ridge_context_step(report)
    return report if shown is None else replace(report, steps=(*report.steps, shown))


def _launched_report(args: argparse.Namespace, dep: Any, settings: Any,
                     check_host: bool = True) -> Any:
    """fit's report at --max-model-len for the run llama-server is started with: placed by
    --fit where it places it (cli_offload.launch_fitted_run), its margin kept free; where the
    build's default --fit finds no placement, llama-server loads every layer as given and
    keeps no margin, and the report says so."""
    from dataclasses import replace

    from ridgeline.reports.fit import fit_report

    run = launch_fitted_run(args, dep, settings, args.target_concurrency,
                            check_host=check_host, priced=False)
    host = {"fit_host": None} if run.unplaced else fit_host(args, run.deployment)
    report = fit_report(run.deployment, args.max_model_len, settings,
                        args.target_concurrency, **host)
    return replace(report, fit_note=run.caution()) if run.unplaced else report


def _compare_accelerators(args: argparse.Namespace, model: Any, cards: list[str],
                          engines: list[str]) -> Any:
    from ridgeline.drafter_memory import vllm_draft_settings
    from ridgeline.engines import engine_id
    from ridgeline.reports.fit import slots_for_target
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
        slots = slots_for_target(dep, vllm_draft_settings(engine, settings),
                                 args.target_concurrency)
        return _launched_report(args, dep, slots)

    reports, not_run = run_each(cards, on, card_id)
    return FitComparison(tuple(reports), by="accelerator", not_run=not_run)


# SGLang's reserve (server_args._handle_gpu_memory_settings) counts --cuda-graph-max-bs
# whether or not --disable-cuda-graph is given through 0.5.13, so its static pool is the same
# either way; from 0.5.14 the flag turns off the graphs' terms (sglang_eager_drops_graphs)
SGLANG_EAGER = ("--disable-cuda-graph: SGLang's memory reserve counts --cuda-graph-max-bs with "
                "the graphs on or off, so the pool is as without it; decode and simulate price "
                "its steps without graphs")
SGLANG_EAGER_DROPS = ("--disable-cuda-graph: SGLang's memory reserve leaves out the CUDA graphs "
                      "it no longer captures (the prefill graphs' from v0.5.14, the decode "
                      "graphs' 2 MiB a batch from v0.5.15), so the pool is sized without them; "
                      "decode and simulate price its steps without graphs")


# the settings that name one engine's knob: a comparison runs each engine at its defaults
ENGINE_KNOBS = ("gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "n_batch",
                "block_size", "engine_version", "flash_attn", "swa_full_tokens_ratio",
                "split_mode", "gpu_layers", "n_cpu_moe", "cpu_moe", "host_bandwidth_gbs",
                "host_link_gbs", "host_memory_gib", "output_layer_last", "fit_target_mib",
                "fit_ctx", "no_async_scheduling", "async_scheduling", "no_enable_chunked_prefill",
                "extensible_kv_cache", "disable_hybrid_kv_cache_manager",
                "vllm_allow_chunked_local_attn_with_hybrid_kv_cache",
                "prefix_caching", "language_model_only",
                "enable_multimodal", "sglang_vlm_cache_size_mb", "mm_feature_transport",
                "sglang_mm_feature_cache_mb", "mm_preprocess_cache_size_mb",
                "backend", "warm_compile_cache", "kv_cache_memory_bytes", "max_total_tokens",
                "data_parallel_size", "enable_dp_attention", "max_mamba_cache_size",
                "mamba_ssm_dtype", "max_cudagraph_capture_size",
                # --enable-lora and its slots: one engine's (vLLM's or SGLang's; TRT-LLM's refused)
                "enable_lora", "max_loras", "max_lora_rank", "fully_sharded_loras", "lora_dtype",
                "lora_paths", "max_loras_per_batch", "lora_target_modules",
                # --enable-eplb and its redundant experts (vLLM's or SGLang's): one engine's
                "enable_eplb", "eplb_config", "eplb_redundant_dotted", "num_redundant_experts",
                "ep_num_redundant_experts",
                # vLLM --limit-mm-per-prompt: one engine's
                "limit_mm_per_prompt", "limit_mm_image", "limit_mm_video", "limit_mm_audio",
                # TensorRT-LLM cache_transceiver_config: one engine's
                "cache_transceiver_config")


def _compare_engines(args: argparse.Namespace, model: Any, acc: Any, engines: list[str]) -> Any:
    from ridgeline.memory import EngineSettings
    from ridgeline.reports.fit import fit_report
    from ridgeline.reports.fit_comparison import FitComparison

    flag = {"gpu_layers": "-ngl", "fit_target_mib": "--fit-target", "n_batch": "-b",
            "eplb_redundant_dotted": "--eplb-config.num_redundant_experts",
            **{f"limit_mm_{m}": f"--limit-mm-per-prompt.{m}" for m in ("image", "video", "audio")},
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

    def at_defaults(engine: str) -> Any:  # llama.cpp: placed by its --fit where the build is
        dep = build_deployment(args, model, acc, engine)
        if args.max_model_len is not None and engine.startswith("llama.cpp"):
            return _launched_report(args, dep, settings)
        return fit_report(dep, args.max_model_len, settings, args.target_concurrency, None)

    reports, not_run = run_each(engines, at_defaults)
    return FitComparison(tuple(reports), not_run=not_run)


def register(sub: Any) -> None:

    p = sub.add_parser("fit", help="the KV pool an engine leaves, and the capacity verdict")
    _deployment_flags(p, several=True)
    max_model_len_option(p, "tokens per conversation to size for (vLLM --max-model-len; 32k = "
                         "32,000, 32K = 32,768); leave it out with --target-concurrency to find "
                         "the longest context that many fit at")
    p.add_argument("--target-concurrency", type=_how_many("target concurrency"),
                   help="conversations that must fit at once")
    p.add_argument("--engine", type=_name_list(_engine_name),
                   help="vllm (default; llama.cpp-metal on Apple silicon, llama.cpp-rocm on the "
                   "AMD GPUs vLLM leaves out), sglang, trtllm, "
                   "llama.cpp-…; several, comma-separated, to compare them")
    p.set_defaults(engine_by_accelerator=True)
    g = p.add_argument_group("engine settings (the engine's own names; default: its default)")
    _split_mode(g)
    engine_sizes(g)
    data_parallel_flags(g)
    g.add_argument("--enforce-eager", "--disable-cuda-graph", dest="enforce_eager",
                   action="store_true", help="vLLM: no CUDA graphs (SGLang's "
                   "--disable-cuda-graph: its pool is the same without them, which fit says; "
                   "decode and simulate price the steps without graphs)")
    pool_switches(g, "vLLM: a hybrid with recurrent state (Qwen3-Next, Nemotron-H) runs "
                  "without it by default before v0.28; with it, a linear-attention hybrid "
                  "keeps two state blocks per request, not one")
    spec_flags(g, pricing=False)
    g.add_argument("--flash-attn", "-fa", choices=["on", "off", "auto"],
                   type=_typed(_flash_attn),
                   help="llama.cpp -fa (default auto: on where supported); off sizes the "
                   "attention scores into the compute buffer and costs their traffic")
    _usage_and_version(g, MEMORY_RULES, v0=True)
    _offload(p)
    _output(p, plot=True)
    p.set_defaults(handler=cmd_fit)
