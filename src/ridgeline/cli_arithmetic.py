"""CLI: the article's arithmetic — hardware, model, roofline, moe, kv, decode, prefill, utilization."""

from __future__ import annotations

import argparse
from typing import Any

from ridgeline.cli import (
    _deployment_flags,
    _engine,
    _formats,
    _gpu,
    _model,
    _output,
    _pipeline,
    data_parallel_flags,
    engine_sizes,
    expert_parallel_flags,
    max_model_len_option,
    refuse_data_parallel,
)
from ridgeline.cli_engine import (
    ENGINE_DEFAULT,
    ENGINE_NAMES,
    MEMORY_RULES,
    async_scheduling_problem,
    cache_transceiver,
    checked_engine_version,
    decode_context_flag,
    engine_flag,
    engine_version_flag,
    eplb_settings,
    lora_settings,
    mm_limits,
    pool_switches,
)
from ridgeline.cli_load import (
    accelerator_names,
    build_deployment,
    card_id,
    chunked_prefill_asked,
    default_engine,
    drafter,
    drafts_with_mtp,
    load_accelerator,
    load_deployment,
    load_model,
    load_profile,
    named_weights,
    one_card,
)
from ridgeline.cli_offload import _offload, fitted, no_fit_ctx
from ridgeline.cli_spec import spec_args, spec_flags
from ridgeline.cli_types import (
    DEFAULT_CONTEXT_TOKENS,
    MAX_BATCH,
    MAX_MEMORY_GIB,
    _count,
    _count_list,
    _how_many,
    _not_empty,
    _positive_count,
    _positive_float,
)
from ridgeline.errors import InputError
from ridgeline.side_by_side import run_each
from ridgeline.units import COUNT_EXAMPLES

ROOFLINE_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")  # its --compute-dtype

# why prefill refuses a data-parallel layout (decode, fit, kv and simulate take one)
PREFILL_DP = ("its floor splits no prompt over the ranks yet; fit, decode, kv and simulate "
              "model data-parallel attention")


def cmd_hardware(args: argparse.Namespace) -> Any:
    from ridgeline.hardware import load_accelerator_file, resolve_accelerator
    from ridgeline.reports.hardware import HardwareRecords, hardware_list, hardware_record

    if args.gpu is not None:  # --gpu NAME, as every other command spells it
        if args.name is not None and args.name != args.gpu:
            raise InputError(f"NAME ({args.name!r}) and --gpu ({args.gpu!r}) both name the "
                             "accelerator: give one")
        args.name = args.gpu
    if args.gpu_file and args.name is not None:
        raise InputError(f"NAME ({args.name!r}) and --gpu-file both name the accelerator: give one")
    if args.gpu_file:
        return hardware_record(load_accelerator_file(args.gpu_file))
    if args.name is not None:
        names = [name.strip() for name in args.name.split(",")]
        if len(names) > 1:  # h100,h200: each record in turn, as roofline takes a list
            if not all(names):
                raise InputError(f"{args.name!r} has an empty name between its commas")
            cards = [resolve_accelerator(name) for name in names]
            ids = [card.id for card in cards]
            if len(set(ids)) < len(ids):
                twice = next(card for i, card in enumerate(ids) if card in ids[:i])
                raise InputError(f"{args.name!r} names {twice} twice")
            return HardwareRecords(tuple(hardware_record(card) for card in cards))
        return hardware_record(resolve_accelerator(args.name))
    return hardware_list()

def cmd_model(args: argparse.Namespace) -> Any:
    from ridgeline.reports.model import model_list, model_report

    if args.model is None:
        if args.fetch:
            raise InputError("--fetch reads a MODEL from the Hugging Face Hub: name one")
        return model_list()
    return model_report(load_model(args))

# --compute-dtype's weights where no --weights names them: tf32 multiplies fp32 weights
_WEIGHTS_AT = {"tf32": "fp32"}


def _element_bytes(args: argparse.Namespace) -> tuple[float, float, str]:
    """Bytes per weight and per KV element named without a model, and where the weights'
    came from. --weights names them; else --compute-dtype's own (an fp8 step is W8A8: it
    reads 1-byte weights, so an H100's fp8 ridge of 591 FLOP/byte is reached at batch
    591 × 1 ÷ 2 = 296, as bf16's 295 is at 2-byte weights); else 2 (bf16). KV: 2."""
    from ridgeline.precision import is_stored_format, kv_dtype, weight_format

    weights = named_weights(args)
    if (weights and is_stored_format(weights)) or args.kv_dtype == "auto":
        raise InputError("'as stored' and 'auto' formats need --model (the checkpoint's formats)")
    kvb = kv_dtype(args.kv_dtype).bytes_per_element if args.kv_dtype else 2.0
    if weights:
        return weight_format(weights).bytes_per_weight, kvb, ""
    dtype = getattr(args, "compute_dtype", None)
    if dtype is None:
        return 2.0, kvb, ""
    fmt = weight_format(_WEIGHTS_AT.get(dtype, dtype))
    return fmt.bytes_per_weight, kvb, (
        f"{fmt.id} weights, {fmt.bytes_per_weight:g} B each, as a step whose matmuls run at "
        f"--compute-dtype {dtype} reads them (--weights names others)")


def _matmul_dtype(args: argparse.Namespace, acc: Any) -> str:
    """The matmul dtype a weight format named without a model runs at on this accelerator
    (fp8 weights on an H100: fp8), as a deployment of it would; bf16 when none is named."""
    from ridgeline.precision import weight_format

    weights = named_weights(args)
    if not weights:
        return "bf16"
    return str(acc.first_supported(weight_format(weights).compute_dtypes))


def cmd_roofline(args: argparse.Namespace) -> Any:
    from ridgeline.reports.roofline import roofline_report

    names = accelerator_names(args)
    if len(names) > 1:
        from ridgeline.reports.roofline import RooflineComparison

        reports, not_run = run_each(names, lambda name: cmd_roofline(one_card(args, name)),
                                    card_id)
        return RooflineComparison(tuple(reports), not_run)
    acc = load_accelerator(args)
    dep = load_deployment(args) if args.model else None
    bpw, kvb, weights_from = (2.0, 2.0, "") if dep else _element_bytes(args)
    try:
        dtype = args.compute_dtype or (dep.dense_compute_dtype if dep
                                       else _matmul_dtype(args, acc))
        experts = args.compute_dtype or (dep.expert_compute_dtype if dep else dtype)
        return roofline_report(acc, dtype, args.batch, args.prompt_len, dep, bpw, kvb,
                               args.intensity, experts, args.num_gpus,
                               None if dep else _attention_dtype(args, acc), weights_from)
    except InputError as exc:  # a rate the card lacks: name the flags that pick its own
        fixes = _rate_fixes(args, acc, dep)
        if not fixes:
            raise
        raise InputError(f"{exc}{fixes}") from None


def _attention_dtype(args: argparse.Namespace, acc: Any) -> str:
    """Without a model, the dtype decode attention multiplies the cache at: the cache's
    (bf16 by default), whatever the weights' matmuls run at (fp8 weights, bf16 cache: bf16)."""
    from ridgeline.deployment import cache_matmul_dtypes
    from ridgeline.precision import kv_dtype

    kv_id = kv_dtype(args.kv_dtype).id if args.kv_dtype else "bf16"
    return str(acc.first_supported(cache_matmul_dtypes(kv_id)))


def _rate_fixes(args: argparse.Namespace, acc: Any, dep: Any) -> str:
    """For a card without a rate roofline's rows need (an fp32-only --gpu-file): the flags
    that pick rates it has, as a clause to the refusal; "" where it has them. Decode
    attention multiplies the cache at the cache's dtype, whatever --compute-dtype says."""
    from ridgeline.deployment import cache_matmul_dtypes
    from ridgeline.precision import kv_dtype

    def runs(dtypes: tuple[str, ...]) -> bool:
        try:
            acc.first_supported(dtypes)
        except InputError:
            return False
        return True

    fixes = []
    try:
        matmul = args.compute_dtype or (dep.dense_compute_dtype if dep else _matmul_dtype(args, acc))
    except InputError:
        matmul = None
    rates = [d for d in ROOFLINE_DTYPES if d in acc.peak_flops]
    if (matmul is None or not runs((matmul,))) and rates:
        fixes.append(f"--compute-dtype {' or '.join(rates)}")
    kv_id = dep.kv.id if dep else (kv_dtype(args.kv_dtype).id if args.kv_dtype else "bf16")
    fits = [k for k in ("bf16", "fp16", "fp8", "fp32") if runs(cache_matmul_dtypes(k))]
    if not runs(cache_matmul_dtypes(kv_id)) and fits:
        fixes.append(f"--kv-dtype {' or '.join(fits)} (decode attention multiplies the cache "
                     f"at its own dtype, {kv_id} here, whatever --compute-dtype says)")
    return f"; give {' and '.join(fixes)}" if fixes else ""


def cmd_moe(args: argparse.Namespace) -> Any:
    from ridgeline.reports.moe import moe_report

    if not args.gpu and not args.gpu_file and not args.peak_tflops:
        args.gpu = "h100-sxm"  # the article's card
    return moe_report(load_deployment(args), args.batch)

def cmd_kv(args: argparse.Namespace) -> Any:
    from ridgeline.kvcache import kv_replication
    from ridgeline.precision import kv_dtype
    from ridgeline.raw_fit import device_fit
    from ridgeline.reports.kv import kv_report
    from ridgeline.served_model import served_dtype
    from ridgeline.units import GIB

    model = load_model(args)
    kv = kv_dtype(args.kv_dtype or served_dtype(model))
    budget, label, replication = None, "", 1.0
    dep: Any = None
    given = [flag for flag, value in (("--gpu", args.gpu), ("--gpu-file", args.gpu_file),
                                      ("--peak-tflops", args.peak_tflops))
             if value is not None]
    if args.memory_gib is not None and given:
        raise InputError(f"--memory-gib is the budget itself; {', '.join(given)} would size "
                         "another: give one")
    if args.memory_gib is not None and args.num_gpus != 1:
        raise InputError("--memory-gib is the whole budget for the cache alone, over every "
                         "GPU: drop --num-gpus, or give --gpu to split a card's memory")
    if args.memory_gib is None and not given and args.num_gpus != 1:
        raise InputError("--num-gpus splits an accelerator's memory: give --gpu")
    if args.data_parallel_size is not None and not given:
        raise InputError("--data-parallel-size splits accelerators' memory into ranks: give "
                         "--gpu")
    if args.memory_gib is not None:
        budget, label = args.memory_gib * GIB, f"{args.memory_gib:g} GiB given, for the cache alone"
    else:
        # where the card's own engine is llama.cpp (Apple silicon, Vega 20, MI100, RDNA2), the
        # memory is counted as it runs there, as decode and fit count it: its input embedding
        # on the host, windows only for the architectures it keeps them for
        engine = default_engine(args)
        acc = load_accelerator(args)
        dep = None if acc is None else build_deployment(
            args, model, acc, engine if engine.startswith("llama.cpp") else None)
        if dep is not None:
            model = dep.model
            # the weights on the GPUs against the memory the engine finds, as decode and fit
            room = device_fit(dep)
            budget = room.kv_room_bytes
            label = (f"{dep.num_gpus} x {dep.accelerator.id} ({room.capacity_bytes / 1e9:,.1f} "
                     f"GB as the runtime reports it) − {room.weight_bytes / 1e9:,.1f} GB of "
                     f"weights ({dep.weights.label}"
                     + (f", as {dep.engine} holds them" if engine.startswith("llama.cpp")
                        else "")
                     + (f": {dep.weight_bytes / 1e9:,.1f} GB, and "
                        f"{dep.tp_copies_bytes / 1e9:,.1f} GB more: "
                        + ("each data-parallel rank's own copy of all but the experts, and "
                           "what every tensor-parallel rank keeps whole"
                           if dep.data_parallel_size > 1 else
                           "the copies of what every tensor-parallel rank keeps whole")
                        if dep.tp_copies_bytes >= 0.05e9  # shown as 0.1 GB or more
                        else "") + ")"
                     + (f"; a serving engine also loads the {room.vision_bytes / 1e9:,.2f} GB "
                        "vision tower, left out here" if room.vision_bytes else ""))
            # a conversation's cache is copied over its own rank's GPUs only, each of an
            # MI250's dies a rank under vLLM (as the weights' copies above count them)
            replication = kv_replication(model, dep.num_gpus // dep.data_parallel_size
                                         * dep.devices_per_gpu)
            kv = dep.kv  # the cache the engine keeps on this card (fp16 where it lacks bf16)
    engine = "vllm" if args.memory_gib is not None else default_engine(args)
    return kv_report(model, args.context, kv, budget, label, replication, engine,
                     ranks=1 if dep is None else dep.data_parallel_size,
                     rank_gpus=1 if dep is None else dep.num_gpus // dep.data_parallel_size)

def cmd_decode(args: argparse.Namespace) -> Any:

    from ridgeline.reports.decode import DecodeComparison, decode_report

    spec = _spec_decode(args)
    names = accelerator_names(args)
    if len(names) > 1:  # the same decode on several cards, side by side
        if args.plot:
            raise InputError("--plot draws one deployment; give one --gpu")

        def on(name: str) -> Any:
            card = one_card(args, name)
            one = _decode_deployment(card)
            return _placed_once(args, one, decode_report(
                one, args.batch, args.context, load_profile(card), args.enforce_eager,
                _engine_pool_settings(args, one), _max_model_len(args, one, args.context),
                spec))

        reports, not_run = run_each(names, on, card_id)
        return _drafter_caution(args, DecodeComparison(tuple(reports), not_run))
    dep = _decode_deployment(args)
    return _drafter_caution(args, _eplb_caution(args, _lora_caution(args, _placed_once(
        args, dep, decode_report(dep, args.batch, args.context, load_profile(args),
                                 args.enforce_eager, _engine_pool_settings(args, dep),
                                 _max_model_len(args, dep, args.context), spec)))))


def _lora_caution(args: argparse.Namespace, report: Any) -> Any:
    """``report`` with the one line --enable-lora adds: what its step times take of the
    adapters' matmuls (lora_slots.step_caution)."""
    lora = lora_settings(args)
    if lora is None:
        return report
    from dataclasses import replace

    from ridgeline.lora_slots import step_caution

    return replace(report, cautions=(*report.cautions, step_caution(lora)))


def _eplb_caution(args: argparse.Namespace, report: Any) -> Any:
    """``report`` with the line --enable-eplb adds: its pool holds the redundant experts, its
    step times price no rebalancing (vllm_eplb.eplb_step_caution)."""
    note = _eplb_step_note(args)
    if not note:
        return report
    from dataclasses import replace

    return replace(report, cautions=(*report.cautions, note))


def _eplb_step_note(args: argparse.Namespace) -> str:
    """decode's and prefill's line for --enable-eplb, or ""."""
    eplb = eplb_settings(args)
    if eplb is None:
        return ""
    from ridgeline.vllm_eplb import eplb_step_caution

    return eplb_step_caution(eplb)


def _spec_decode(args: argparse.Namespace) -> Any:
    """The speculative decoding --spec-tokens asks for (simulate's flags), or None."""
    spec_args(args)
    if not args.spec_tokens:
        return None
    from ridgeline.cli_spec import MTP_METHODS, spec_method
    from ridgeline.spec_decode import SpecDecode

    model = load_model(args) if args.spec_method in MTP_METHODS else None  # its MTP layers
    return SpecDecode(args.spec_tokens, args.spec_acceptance, args.spec_draft_cost,
                      spec_method(args, model))


def _lora_step_note(args: argparse.Namespace) -> str:
    """prefill's line for --enable-lora (lora_slots.step_caution), or ""."""
    lora = lora_settings(args)
    if lora is None:
        return ""
    from ridgeline.lora_slots import step_caution

    return step_caution(lora)


def _drafter_caution(args: argparse.Namespace, report: Any) -> Any:
    """``report``, once priced, after fit's caution where the pool leaves the drafter out
    (cli_spec.spec_drafter): said last, so that a refusal stays one line."""
    if args.spec_tokens:
        from ridgeline.cli_spec import spec_drafter
        from ridgeline.engines import engine_id

        spec_drafter(args, load_model(args), [engine_id(args.engine)])
    return report


def _max_model_len(args: argparse.Namespace, dep: Any, contexts: list[int],
                   flag: str = "--context") -> int | None:
    """--max-model-len where given, no shorter than the longest context asked (the engine
    admits no longer request); refused for llama.cpp, whose context is -c, a slot's each."""
    from ridgeline.capacity import SERVING_ENGINES

    length = args.max_model_len
    if length is None:
        return None
    if dep.engine not in SERVING_ENGINES:
        raise InputError("--max-model-len starts a serving engine (vLLM, SGLang, TensorRT-LLM); "
                         + ("decode and prefill give llama.cpp a slot of each context (its -c)"
                            if dep.engine.startswith("llama.cpp") else
                            f"{dep.engine} keeps no KV pool to size"))
    if max(contexts) > length:
        raise InputError(f"{flag} {max(contexts):,} is past --max-model-len {length:,}: "
                         f"{dep.engine} admits no longer request; give a --max-model-len of at "
                         f"least {max(contexts):,}")
    return int(length)


def _engine_pool_settings(args: argparse.Namespace, dep: Any) -> Any:
    """decode's pool settings where any was given (None: the engine's defaults, vLLM's as vllm
    serve sets them, as fit, simulate and plan size it); refused for llama.cpp, which decode
    gives a slot per sequence, but for --engine-version, whose rules (a release's, a build's)
    size every engine's pool as fit sizes it. vLLM 0.8 to 0.9.x run a draft model on V0."""
    from ridgeline.drafter_memory import vllm_draft_settings

    settings = _given_pool_settings(args, dep)
    return None if settings is None else vllm_draft_settings(dep.engine, settings)


def _given_pool_settings(args: argparse.Namespace, dep: Any) -> Any:
    from ridgeline.memory import EngineSettings

    version = _engine_version(args, dep)
    spec = _drafts(args)
    if getattr(args, "async_scheduling", False):  # vLLM's default from 0.14, as fit reads it
        problem = async_scheduling_problem(dep.engine, version)
        if problem:
            raise InputError(problem[0])
    asynchronous = not getattr(args, "no_async_scheduling", False)
    if not asynchronous and dep.engine != "vllm":
        raise InputError(f"--no-async-scheduling is vLLM's; {dep.engine} has no such setting")
    if getattr(args, "no_enable_chunked_prefill", False) and dep.engine != "vllm":
        raise InputError(f"--no-enable-chunked-prefill is vLLM's; {dep.engine} has no such "
                         "setting")
    given = [f"--{name.replace('_', '-')}" for name in (
        "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "block_size",
        "usage", "kv_cache_memory_bytes", "max_total_tokens", "max_mamba_cache_size",
        "mamba_ssm_dtype", "max_cudagraph_capture_size") if getattr(args, name) is not None]
    switches = pool_switch_settings(args)  # fit's and simulate's, as they size the pool
    if switches.get("lora") is not None:  # as fit refuses it: llama.cpp's slots reach no pool
        from ridgeline.lora_slots import check_engine_lora

        check_engine_lora(dep, switches["lora"], version)
    if not given:
        # an MTP drafter's layer and cache are the pool's too (drafter_memory.py), as fit holds
        # so are a separate drafter's vLLM reads, and SGLang's reserve for any drafter; and
        # vLLM runs a draft model or ngram on its V1 runner where Model Runner V2 is the default
        plain = version is None and asynchronous and not switches and not drafts_with_mtp(args) \
            and not (spec and (dep.engine == "sglang" or getattr(args, "spec_draft_model", "")
                               or getattr(args, "spec_method", None) in ("ngram", "draft-model")))
        return None if plain else EngineSettings(
            engine_version=version, speculative_decoding=spec, async_scheduling=asynchronous,
            draft_mtp=drafts_with_mtp(args), drafter=drafter(args), **switches)
    if dep.engine.startswith("llama.cpp"):
        owner = ("vLLM's pool" if given == ["--kv-cache-memory-bytes"] else
                 "SGLang's and TensorRT-LLM's pools" if given == ["--max-total-tokens"] else
                 "a serving engine's pool (vLLM, SGLang, TensorRT-LLM)")
        raise InputError(f"{', '.join(given)} {'sizes' if len(given) == 1 else 'size'} "
                         f"{owner}; decode and prefill give llama.cpp a slot per sequence")
    if args.usage is not None and dep.engine != "vllm":
        raise InputError(f"--usage is vLLM's (vllm serve or its offline LLM class); {dep.engine} "
                         "has one set of defaults")
    return EngineSettings(gpu_memory_utilization=args.gpu_memory_utilization,
                          max_num_seqs=args.max_num_seqs,
                          max_num_batched_tokens=args.max_num_batched_tokens,
                          block_size=args.block_size, usage=args.usage or "serve",
                          kv_cache_memory_bytes=args.kv_cache_memory_bytes,
                          max_total_tokens=args.max_total_tokens, engine_version=version,
                          speculative_decoding=spec, async_scheduling=asynchronous,
                          draft_mtp=drafts_with_mtp(args), drafter=drafter(args),
                          max_mamba_cache_size=args.max_mamba_cache_size,
                          mamba_ssm_dtype=args.mamba_ssm_dtype,
                          max_cudagraph_capture_size=args.max_cudagraph_capture_size,
                          **switches)


def pool_switch_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The pool switches given (cli_engine.pool_switches), in EngineSettings' names: the
    ones left at their defaults are left out, so a run without them is sized as before."""
    given = {name: getattr(args, name, None) for name in (
        "prefix_caching", "swa_full_tokens_ratio", "backend")}
    given |= {name: True for name in ("language_model_only", "enable_multimodal",
                                      "warm_compile_cache") if getattr(args, name, False)}
    if getattr(args, "no_enable_chunked_prefill", False):  # vLLM: each prompt whole
        given["no_chunked_prefill"] = True
    given["lora"] = lora_settings(args)  # --enable-lora (vLLM's or SGLang's): its slots
    given["eplb"] = eplb_settings(args)  # vLLM --enable-eplb: its redundant experts
    given |= {name: getattr(args, name, None)  # vLLM's compilation config (vllm_compilation)
              for name in ("cudagraph_capture_sizes", "cudagraph_mode", "torch_compile")}
    given["mm_limits"] = mm_limits(args)  # vLLM --limit-mm-per-prompt: the tower's images
    given["cache_transceiver"] = cache_transceiver(args)  # TRT-LLM: its KV transfer buffers
    return {name: value for name, value in given.items() if value is not None}


def _drafts(args: argparse.Namespace) -> bool:
    """Whether a drafter is configured (decode's --spec-tokens; prefill has none), as
    simulate's settings say it: vLLM's V0 engine then leaves chunked prefill off past 32K
    tokens of context, so its pool is profiled at a whole max_model_len (vllm_v0_chunking)."""
    return bool(getattr(args, "spec_tokens", 0))


def _engine_version(args: argparse.Namespace, dep: Any) -> str | None:
    """--engine-version, checked against ``dep.engine`` before anything is priced, with fit's
    one-line errors (its spelling as EngineSettings reads it, then the engine's own check)."""
    return checked_engine_version(getattr(args, "engine_version", None), dep.engine)


def _placed_once(args: argparse.Namespace, dep: Any, report: Any) -> Any:
    """The report, with a caution where -ngl auto placed one deployment for several points."""
    if dep.offload is None or not dep.offload.chosen_by_fit or (
            len(args.batch) == 1 and len(args.context) == 1):
        return report
    from dataclasses import replace

    note = (f"-ngl auto placed the weights once, for the largest point asked (batch "
            f"{max(args.batch):,} at {max(args.context):,} tokens); a smaller point alone "
            "would keep more of them on the GPU")
    return replace(report, cautions=(*report.cautions, note))


def _decode_deployment(args: argparse.Namespace) -> Any:
    """The deployment decode prices; with -ngl auto, placed for its largest batch × context."""
    from dataclasses import replace

    from ridgeline.engines import engine_id
    from ridgeline.memory import EngineSettings

    dep = replace(load_deployment(args), engine=engine_id(args.engine))
    no_fit_ctx(args)
    settings = EngineSettings(engine_version=_engine_version(args, dep),
                              speculative_decoding=_drafts(args))
    return fitted(args, dep, settings, max(args.context), max(args.batch))

def cmd_prefill(args: argparse.Namespace) -> Any:
    from ridgeline.capacity import engine_seats
    from ridgeline.floors import prefill_floor
    from ridgeline.reports.expectation import Expectation
    from ridgeline.reports.prefill import (
        PrefillComparison,
        PrefillReport,
        PrefillSeries,
        engine_runs,
    )

    refuse_data_parallel(args, "prefill", PREFILL_DP)

    def one(a: argparse.Namespace) -> list[PrefillReport]:
        from dataclasses import replace

        from ridgeline.capacity import start_trim_caution
        from ridgeline.chunked_prefill import step_budget
        from ridgeline.memory import EngineSettings
        from ridgeline.predict import shared_profile_caution
        from ridgeline.reports.decode import describe_settings
        from ridgeline.track_record import track_record_caution

        dep = load_deployment(a)
        no_fit_ctx(a)
        placed = fitted(a, dep, EngineSettings(max_num_batched_tokens=a.ubatch_size,
                                               engine_version=_engine_version(a, dep)),
                        max(a.prompt_len), a.batch)
        if a.ubatch_size and not placed.engine.startswith("llama.cpp"):
            raise InputError(f"--ubatch-size is llama.cpp's -ub; {placed.engine} runs a prompt "
                             "in one pass")
        profile = load_profile(a)
        pool_settings = _engine_pool_settings(a, placed)
        length = _max_model_len(a, placed, a.prompt_len, "--prompt-len")
        once = placed.offload is not None and placed.offload.chosen_by_fit \
            and len(a.prompt_len) > 1
        trim = start_trim_caution(placed, pool_settings or EngineSettings(),
                                  length)
        notes = tuple(filter(None, (shared_profile_caution(profile, placed.model.moe is not None),
                                    trim, _lora_step_note(a), _eplb_step_note(a),
                                    track_record_caution(placed, "prefill", profile), (
            f"-ngl auto placed the weights once, for the longest prompt asked "
            f"({max(a.prompt_len):,} tokens); a shorter one alone would keep more of them on "
            "the GPU") if once else "")))
        # a serving engine's prompt runs in steps of its token budget (vLLM V1 chunks by
        # default), the budget its pool is sized with (at the --max-model-len it is started
        # with, as engine_seats sizes it): the flag, else the engine's default
        budget = None if placed.engine.startswith("llama.cpp") else step_budget(
            placed, replace(pool_settings or EngineSettings(), max_model_len=length))
        chunked = chunked_prefill_asked(a)  # TensorRT-LLM's enable_chunked_prefill
        # the pool's settings in decode's words (its JSON's engine_max_batch[].settings)
        described = describe_settings(pool_settings or EngineSettings(), placed.engine,
                                      length) if pool_settings or length else ""

        def report(n: int) -> PrefillReport:
            floor = prefill_floor(placed, n, a.batch, a.ubatch_size)
            seat = engine_seats(placed, n, a.enforce_eager, pool_settings, length)
            # the steps are priced where the engine runs the prompts (a prompt past every
            # pool would be millions of steps, for an expectation nobody is shown)
            expected = Expectation.of_prefill(placed, n, a.batch, profile, a.ubatch_size,
                                              budget if engine_runs(floor, seat) else None,
                                              chunked)
            return PrefillReport(placed, floor, expected, a.ubatch_size, seat, notes, budget,
                                 pool_settings.usage if pool_settings else "serve",
                                 a.engine_version, described, chunked)

        return [report(n) for n in a.prompt_len]

    names = accelerator_names(args)
    if len(names) > 1:  # the same prompts on several cards, side by side
        ran, not_run = run_each(names, lambda name: one(one_card(args, name)), card_id)
        return PrefillComparison(tuple(r for reports in ran for r in reports), not_run)
    reports = one(args)
    return reports[0] if len(reports) == 1 else PrefillSeries(tuple(reports))

def cmd_utilization(args: argparse.Namespace) -> Any:
    from ridgeline.engine_platforms import engine_platform_problem
    from ridgeline.engines import engine_id
    from ridgeline.reports.utilization import utilization_report

    acc = load_accelerator(args)
    engine = engine_id(args.engine)
    problem = engine_platform_problem(engine, acc)
    if problem:  # the pool is sized only with --model: the engine must run on the card anyway
        raise InputError(problem)
    dep = load_deployment(args) if args.model else None
    if dep is None and args.pipeline_parallel_size:
        raise InputError("--pipeline-parallel-size splits the running batch over a model's "
                         "layer stages: give --model")
    if dep is None and (args.kv_dtype or args.context):
        raise InputError("--kv-dtype and --context size a model's KV pool: give --model")
    if dep is None and (args.decode_context_parallel_size or args.expert_parallel
                        or args.expert_parallel_size):
        raise InputError("-dcp, --enable-expert-parallel and --ep-size lay out a model's KV "
                         "pool and experts over the GPUs: give --model")
    if dep is not None and args.compute_dtype not in (None, dep.dense_compute_dtype):
        # an engine's matmuls run at the dtype its weights are served in: fp8 matmuls on bf16
        # weights is no deployment, so the flag would price one that does not exist
        formats = {"fp4": "nvfp4 or mxfp4"}.get(args.compute_dtype, args.compute_dtype)
        raise InputError(f"--compute-dtype {args.compute_dtype} with --model: an engine runs "
                         f"{dep.model.name}'s matmuls at the dtype its weights are served in "
                         f"({dep.dense_compute_dtype}, weights {dep.weights.label}); serve it "
                         f"quantized with --weights {formats} instead")
    bpw = 2.0 if dep else _element_bytes(args)[0]
    dtype = args.compute_dtype or (dep.dense_compute_dtype if dep else _matmul_dtype(args, acc))
    context = (args.context or DEFAULT_CONTEXT_TOKENS) if dep else None  # decode's default
    return utilization_report(acc, args.running, dtype, bpw, dep, context,
                              tensor_parallel_size=args.num_gpus,  # --num-gpus: TP (× -pp)
                              engine=engine)

def _pool_flags(p: Any) -> None:
    """decode's and prefill's serving-engine pool settings (the seats a context gets)."""
    g = p.add_argument_group("serving engine's pool (the engine's own names; default: the "
                             "engine's defaults, vLLM's as vllm serve sets them)")
    engine_sizes(g, llamacpp=False)
    max_model_len_option(g, "the longest request the engine admits, which its pool must hold "
                         "one of to start (vLLM --max-model-len, SGLang --context-length, "
                         "TensorRT-LLM max_seq_len; default: the model's context, as each "
                         "defaults it)")
    g.add_argument("--usage", choices=["serve", "offline"],
                   help="vLLM usage context whose defaults size the pool: vllm serve "
                   "(default), or the offline LLM class (a batch run)")
    engine_version_flag(g, MEMORY_RULES, v0=True)
    decode_context_flag(g)
    pool_switches(g, "prompt reuse between requests, as fit and simulate size the pool with "
                  "it: vLLM runs a hybrid with recurrent state without it by default before "
                  "v0.28, and with it a linear-attention hybrid keeps two state blocks per "
                  "request")


def _eager(p: Any) -> None:
    """decode's and prefill's --enforce-eager (SGLang's --disable-cuda-graph)."""
    p.add_argument("--enforce-eager", "--disable-cuda-graph", dest="enforce_eager",
                   action="store_true", help="without CUDA graphs (vLLM --enforce-eager, SGLang "
                   "--disable-cuda-graph, TensorRT-LLM's cuda_graph_config: null): decode steps "
                   "launch every kernel (a prefill step's per-layer cost; a prompt runs without "
                   "graphs anyway), and vLLM's pool keeps the graphs' memory")


def register(sub: Any) -> None:

    p = sub.add_parser("hardware", help="the accelerator catalog, or one record with sources")
    p.add_argument("name", nargs="?", metavar="NAME",
                   help="an accelerator id or alias, or several comma-separated (none: the "
                   "whole catalog)")
    p.add_argument("--gpu", metavar="NAME", type=_not_empty("accelerator name"),
                   help="the same as NAME")
    p.add_argument("--gpu-file", metavar="FILE", help="show a record from a JSON file")
    _output(p)
    p.set_defaults(handler=cmd_hardware)

    p = sub.add_parser("model", help="layers, attention geometry, experts, params, bytes "
                       "(no MODEL: the bundled models)")
    _model(p, optional=True)
    _output(p)
    p.set_defaults(handler=cmd_model)

    p = sub.add_parser("roofline", help="ridge point and where each part of a step sits")
    _gpu(p, several=True)
    p.add_argument("--compute-dtype", choices=ROOFLINE_DTYPES,
                   help="the peak the ridge divides (default: the weights' matmul dtype)")
    p.add_argument("--batch", type=_how_many("batch", MAX_BATCH), default=1,
                   help="decode batch: tokens sharing each read of the weights (default 1)")
    p.add_argument("--prompt-len", type=_positive_count("prompt length"), default=4000,
                   help="prefill prompt tokens (default 4000)")
    # 1e-3 to 1e9 FLOP/byte: an fp32 vector add's 1/12 to a million-token prefill's, wide;
    # 1e308 had printed a 400-digit row
    p.add_argument("--intensity", type=_positive_float("intensity", 1e-3, 1e9),
                   help="also show the attainable FLOP/s at this many FLOP per byte")
    p.add_argument("--model", type=_not_empty("model name"),
                   help="place this model's attention and experts on the roofline")
    p.add_argument("--fetch", action="store_true", help=argparse.SUPPRESS)
    _formats(p)
    _output(p)
    p.set_defaults(handler=cmd_roofline)

    p = sub.add_parser("moe", help="routed fraction, experts touched, bytes a step reads")
    _model(p)
    _gpu(p, required=False)
    _formats(p)
    p.add_argument("--batch", type=_count_list("batch", MAX_BATCH, COUNT_EXAMPLES),
                   help="tokens in the decode step: one or a list, 1,16,64, the table's rows "
                   "(default: 1, 8, 32, 128, 512, 2048)")
    _output(p, plot=True)
    p.set_defaults(handler=cmd_moe)

    p = sub.add_parser("kv", help="KV-cache bytes by layer kind and conversations that fit")
    _model(p)
    p.add_argument("--context", type=_positive_count("context length"), required=True,
                   help="tokens each conversation holds (128k, 4096, …)")
    p.add_argument("--memory-gib", type=_positive_float("memory GiB", most=MAX_MEMORY_GIB),
                   help="a KV budget in GiB (instead of --gpu)")
    _gpu(p, required=False)
    data_parallel_flags(p, sglang=False, expert_parallel=False)
    _formats(p)
    _output(p, plot=True)
    p.set_defaults(handler=cmd_kv)

    p = sub.add_parser("decode", help="decode step: floor and expected time, tok/s per user and total")
    _deployment_flags(p, several=True)
    p.add_argument("--batch", type=_count_list("batch", MAX_BATCH, COUNT_EXAMPLES), default=[1],
                   help="one batch or a list: 1,8,32,128,296")
    p.add_argument("--context", type=_count_list("context length"),
                   default=[DEFAULT_CONTEXT_TOKENS], help="tokens already cached per sequence; "
                   f"one or a list (default {DEFAULT_CONTEXT_TOKENS})")
    _engine(p)
    _offload(p)
    _eager(p)
    _pool_flags(p)
    data_parallel_flags(p)
    spec_flags(p.add_argument_group("speculative decoding (as simulate prices it)"))
    _output(p, plot=True)
    p.set_defaults(handler=cmd_decode)

    p = sub.add_parser("prefill", help="prefill floor (TTFT) of a prompt and its intensity")
    _deployment_flags(p, several=True)
    p.add_argument("--prompt-len", type=_count_list("prompt length"), required=True,
                   help="tokens in each prompt; one or a list: 1000,8000,32000")
    p.add_argument("--batch", type=_how_many("batch", MAX_BATCH), default=1,
                   help="prompts prefilled together (default 1)")
    _engine(p)
    p.add_argument("-ub", "--ubatch-size", dest="ubatch_size", metavar="N",
                   type=_positive_count("ubatch size"),
                   help="llama.cpp: tokens per ubatch (default 512); each re-reads the weights, "
                   "and with partial offload copies the host's over the link")
    _offload(p)
    _eager(p)
    _pool_flags(p)
    data_parallel_flags(p, refused="not read by prefill: " + PREFILL_DP)  # refused by name
    _output(p)
    p.set_defaults(handler=cmd_prefill)

    p = sub.add_parser("utilization", help="the running batch an engine reports vs the ridge")
    _gpu(p)
    _pipeline(p)
    p.add_argument("--running", type=_count("running requests", COUNT_EXAMPLES), required=True,
                   help="the engine's running requests: vllm:num_requests_running (or N in "
                   "vLLM's 'Running: N reqs'), sglang:num_running_reqs, "
                   "trtllm_num_requests_running, llamacpp:requests_processing")
    p.add_argument("--compute-dtype", choices=["bf16", "fp16", "fp8", "int8", "fp4"],
                   help="the peak the ridge divides (default: the weights' matmul dtype)")
    p.add_argument("--model", type=_not_empty("model name"),
                   help="compare with the batch this model's KV budget allows")
    p.add_argument("--fetch", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--context", type=_positive_count("context length"),
                   help="with --model: tokens each running request holds (default "
                   f"{DEFAULT_CONTEXT_TOKENS}, as decode's)")
    engine_flag(p, f"engine whose pool (at its defaults, with --model), seats flag and running "
                f"gauge the advice names ({ENGINE_DEFAULT}): {ENGINE_NAMES}")
    expert_parallel_flags(p)  # the deployment fit sizes, as its launch line says it
    decode_context_flag(p)
    _formats(p)
    _output(p)
    p.set_defaults(handler=cmd_utilization)
