"""CLI: decode — a decode step's floor and expected time, tok/s per user and in total,
for one deployment or several cards side by side, with the cautions its switches add
(--enable-lora, --enable-eplb, a drafter, -ngl auto)."""

from __future__ import annotations

import argparse
from typing import Any

from ridgeline.cli import _deployment_flags, _engine, _output, data_parallel_flags
from ridgeline.cli_engine import lora_settings
from ridgeline.cli_load import (
    accelerator_names,
    card_id,
    check_cards,
    load_deployment,
    load_model,
    load_profile,
    one_card,
)
from ridgeline.cli_offload import FitRun, _offload, fit_settings, fitted_run, no_fit_ctx
from ridgeline.cli_pool import (
    add_eager_flag,
    add_pool_flags,
    drafts_asked,
    engine_pool_settings,
    eplb_step_note,
    pool_engine_version,
    pool_max_model_len,
)
from ridgeline.cli_spec import spec_args, spec_flags
from ridgeline.cli_types import DEFAULT_CONTEXT_TOKENS, MAX_BATCH, _count_list
from ridgeline.errors import InputError
from ridgeline.side_by_side import run_each
from ridgeline.units import COUNT_EXAMPLES


def cmd_decode(args: argparse.Namespace) -> Any:

    from ridgeline.reports.decode import DecodeComparison, decode_report

    _default_context(args)
    check_cards(args)  # an unknown card refused before an MTP drafter loads the model
    if args.batch is None:  # llama-server's -np N gave N (llamacpp_launch)
        args.batch = [1]
    spec = _spec_decode(args)
    names = accelerator_names(args)
    if len(names) > 1:  # the same decode on several cards, side by side
        if args.plot:
            raise InputError("--plot draws one deployment; give one --gpu")

        def on(name: str) -> Any:
            card = one_card(args, name)
            run = _decode_deployment(card)
            one = run.deployment
            return _acceptance_caution(args, _fit_seats(card, run, _placed_once(
                args, run, decode_report(one, args.batch, args.context, load_profile(card),
                                         args.enforce_eager,
                                         fit_settings(engine_pool_settings(args, one), run),
                                         _max_model_len(args, one), spec))))

        reports, not_run = run_each(names, on, card_id)
        return _drafter_caution(args, DecodeComparison(tuple(reports), not_run))
    run = _decode_deployment(args)
    dep = run.deployment
    return _drafter_caution(args, _acceptance_caution(args, _eplb_caution(
        args, _lora_caution(args, _fit_seats(args, run, _placed_once(
            args, run, decode_report(dep, args.batch, args.context, load_profile(args),
                                     args.enforce_eager,
                                     fit_settings(engine_pool_settings(args, dep), run),
                                     _max_model_len(args, dep), spec)))))))


def _default_context(args: argparse.Namespace) -> None:
    """--context as decode prices it: decode's default where none was given, remembered as
    a default so that a refusal does not name a --context the user never typed."""
    args.context_defaulted = args.context is None
    if args.context is None:
        args.context = [DEFAULT_CONTEXT_TOKENS]


def _max_model_len(args: argparse.Namespace, dep: Any) -> int | None:
    """--max-model-len, refused where it is shorter than a context asked (pool_max_model_len),
    the refusal naming decode's default context as a default."""
    return pool_max_model_len(args, dep, args.context, defaulted=args.context_defaulted)


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
    note = eplb_step_note(args)
    if not note:
        return report
    from dataclasses import replace

    return replace(report, cautions=(*report.cautions, note))


def _acceptance_caution(args: argparse.Namespace, report: Any) -> Any:
    """``report`` with the line an assumed acceptance adds (no --spec-acceptance): the
    speculative figures rest on it, as simulate says (spec_acceptance_caution)."""
    if not args.spec_tokens or not getattr(args, "spec_acceptance_assumed", False):
        return report
    from dataclasses import replace

    from ridgeline.reports.simulate_cautions import spec_acceptance_caution

    return replace(report, cautions=(*report.cautions, spec_acceptance_caution(
        args.spec_method or "eagle", args.spec_acceptance, synthetic=False)))


def _spec_decode(args: argparse.Namespace) -> Any:
    """The speculative decoding --spec-tokens asks for (simulate's flags), or None."""
    spec_args(args)
    if not args.spec_tokens:
        return None
    from ridgeline.cli_spec import MTP_METHODS, spec_method
    from ridgeline.spec_decode import SpecDecode

    model = load_model(args) if args.spec_method in MTP_METHODS else None  # its MTP layers
    return SpecDecode(args.spec_tokens, args.spec_acceptance, args.spec_draft_cost,
                      spec_method(args, model), args.spec_method or "")


def _drafter_caution(args: argparse.Namespace, report: Any) -> Any:
    """``report``, once priced, after fit's caution where the pool leaves the drafter out
    (cli_spec.spec_drafter): said last, so that a refusal stays one line."""
    if args.spec_tokens:
        from ridgeline.cli_spec import spec_drafter
        from ridgeline.engines import engine_id

        spec_drafter(args, load_model(args), [engine_id(args.engine)])
    return report


def _placed_once(args: argparse.Namespace, run: FitRun, report: Any) -> Any:
    """The report, with a caution where -ngl auto placed one deployment for several points,
    or where the build's default --fit was set aside for -ngl all (FitRun.caution)."""
    from dataclasses import replace

    dep = run.deployment
    notes = [run.caution()]
    if dep.offload is not None and dep.offload.chosen_by_fit and (
            len(args.batch) > 1 or len(args.context) > 1):
        notes.append(f"-ngl auto placed the weights once, for the largest point asked (batch "
                     f"{max(args.batch):,} at {max(args.context):,} tokens); a smaller point "
                     "alone would keep more of them on the GPU")
    return replace(report, cautions=(*report.cautions, *filter(None, notes)))


def _fit_seats(args: argparse.Namespace, run: FitRun, report: Any) -> Any:
    """``report`` with its max-batch line as llama-server runs each context under its --fit,
    where the answer's run set that --fit aside for -ngl all or --fit found no placement
    (cli_offload.fit_seats, reports.decode.with_fit_seats), whatever the batches asked."""
    from ridgeline.cli_offload import fit_seats
    from ridgeline.reports.decode import with_fit_seats

    found = fit_seats(args, run, _placement_settings(args, run.deployment),
                      [_slot_cells(args, run.deployment, [c]) for c in args.context],
                      args.context)
    if found is None:
        return report
    seats, hosted, described = found
    return with_fit_seats(report, seats, described, hosted, bool(run.unplaced))


def _placement_settings(args: argparse.Namespace, dep: Any) -> Any:
    """The settings --fit places decode's run under: the build, and a drafter where asked."""
    from ridgeline.memory import EngineSettings

    return EngineSettings(engine_version=pool_engine_version(args, dep),
                          speculative_decoding=drafts_asked(args))


def _decode_deployment(args: argparse.Namespace) -> FitRun:
    """The deployment decode prices; with -ngl auto (or a build's default --fit), placed for
    its largest batch × context, with the margin --fit keeps free (cli_offload.fitted_run)."""
    from dataclasses import replace

    from ridgeline.engines import engine_id

    dep = replace(load_deployment(args), engine=engine_id(args.engine))
    no_fit_ctx(args)
    # llama.cpp's slots are --max-model-len long where it is given (fit's -c ÷ -np), so
    # --fit places the weights for that many cells a sequence, for the slots that run
    from ridgeline.capacity import slots_placed_for

    return fitted_run(args, dep, _placement_settings(args, dep), _slot_cells(args, dep,
                                                                             args.context),
                      slots_placed_for(dep.engine, getattr(args, "max_num_seqs", None),
                                       max(args.batch)))


def _slot_cells(args: argparse.Namespace, dep: Any, contexts: list[int]) -> int:
    """The cells a sequence --fit places for: llama.cpp's slot, --max-model-len long where
    given (fit's -c ÷ -np) and at least the longest context; another engine's longest
    context."""
    longest = max(contexts)
    return max(longest, args.max_model_len or 0) if dep.engine.startswith("llama.cpp") \
        else longest


def register(sub: Any) -> None:

    p = sub.add_parser("decode", help="decode step: floor and expected time, tok/s per user and total")
    _deployment_flags(p, several=True)
    p.add_argument("--batch", type=_count_list("batch", MAX_BATCH, COUNT_EXAMPLES),
                   help="sequences decoding together; one or a list: 1,8,32,128,296 (default 1; "
                   "llama.cpp with -np N: N, its slots)")
    p.add_argument("--context", type=_count_list("context length"),
                   help="tokens already cached per sequence; "
                   f"one or a list (default {DEFAULT_CONTEXT_TOKENS})")
    _engine(p)
    _offload(p)
    add_eager_flag(p)
    add_pool_flags(p)
    data_parallel_flags(p)
    spec_flags(p.add_argument_group("speculative decoding (as simulate prices it)"))
    _output(p, plot=True)
    p.set_defaults(handler=cmd_decode)
