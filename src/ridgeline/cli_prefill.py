"""CLI: prefill — a prompt's floor (TTFT), its expected time and intensity, and whether
the engine's pool seats it."""

from __future__ import annotations

import argparse
from typing import Any

from ridgeline.cli import (
    _deployment_flags,
    _engine,
    _output,
    data_parallel_flags,
    llamacpp_batch_flag,
)
from ridgeline.cli_engine import lora_settings
from ridgeline.cli_load import (
    accelerator_names,
    card_id,
    chunked_prefill_asked,
    load_deployment,
    load_profile,
    one_card,
)
from ridgeline.cli_offload import _offload, fit_seats, fit_settings, fitted_run, no_fit_ctx
from ridgeline.cli_pool import (
    add_eager_flag,
    add_pool_flags,
    engine_pool_settings,
    eplb_step_note,
    pool_engine_version,
    pool_max_model_len,
)
from ridgeline.cli_types import MAX_BATCH, _count_list, _how_many, _positive_count
from ridgeline.errors import InputError
from ridgeline.side_by_side import run_each


def cmd_prefill(args: argparse.Namespace) -> Any:
    if args.batch is None:  # llama-server's -np N gave N (llamacpp_launch)
        args.batch = 1
    from ridgeline.capacity import default_slots, engine_seats, slots_placed_for
    from ridgeline.floors import prefill_floor
    from ridgeline.reports.expectation import Expectation
    from ridgeline.reports.prefill import (
        PrefillComparison,
        PrefillReport,
        PrefillSeries,
        engine_runs,
        with_fit_seat,
    )
    from ridgeline.reports.refusal_steps import refusal_steps

    def one(a: argparse.Namespace) -> list[PrefillReport]:
        from dataclasses import replace

        from ridgeline.capacity import start_trim_caution, suggested_max_model_len
        from ridgeline.chunked_prefill import step_budget
        from ridgeline.data_parallel import rank_step_budget
        from ridgeline.llamacpp_batching import llamacpp_n_batch, llamacpp_n_ubatch
        from ridgeline.memory import EngineSettings
        from ridgeline.predict import shared_profile_caution
        from ridgeline.reports.decode import describe_settings
        from ridgeline.track_record import track_record_caution

        dep = load_deployment(a)
        no_fit_ctx(a)
        placing = EngineSettings(max_num_batched_tokens=a.ubatch_size, n_batch=a.n_batch,
                                 engine_version=pool_engine_version(a, dep))
        # --fit places for the prompts that run at once: -np's, else the default slots'
        run = fitted_run(a, dep, placing, max(a.prompt_len),
                         slots_placed_for(dep.engine, getattr(a, "max_num_seqs", None), a.batch))
        placed = run.deployment
        if a.ubatch_size and not placed.engine.startswith("llama.cpp"):
            raise InputError(f"--ubatch-size is llama.cpp's -ub; {placed.engine} runs a prompt "
                             "in one pass")
        if a.n_batch and not placed.engine.startswith("llama.cpp"):
            raise InputError(f"-b (--batch-size) is llama.cpp's logical batch; {placed.engine} "
                             "runs a prompt in steps of --max-num-batched-tokens")
        # llama_context clamps -ub to -b (n_ubatch = min(n_batch, n_ubatch)), as fit's
        # compute buffer and simulate's ubatches take it
        n_batch = a.n_batch or llamacpp_n_batch()
        ubatch = min(a.ubatch_size or llamacpp_n_ubatch(), n_batch) \
            if a.ubatch_size or a.n_batch else None
        profile = load_profile(a)
        pool_settings = fit_settings(engine_pool_settings(a, placed), run)
        length = pool_max_model_len(a, placed, a.prompt_len, "--prompt-len")
        once = placed.offload is not None and placed.offload.chosen_by_fit \
            and len(a.prompt_len) > 1
        trim = start_trim_caution(placed, pool_settings or EngineSettings(),
                                  length)
        notes = tuple(filter(None, (shared_profile_caution(profile, placed.model.moe is not None,
                                                           placed),
                                    trim, _lora_step_note(a), eplb_step_note(a), run.caution(),
                                    track_record_caution(placed, "prefill", profile), (
            f"-ngl auto placed the weights once, for the longest prompt asked "
            f"({max(a.prompt_len):,} tokens); a shorter one alone would keep more of them on "
            "the GPU") if once else "")))
        chunked = chunked_prefill_asked(a)  # TensorRT-LLM's enable_chunked_prefill

        # where -ngl all's run is priced (--fit set aside, or no placement), the max batch
        # is the run `fit --max-model-len` starts for each prompt, as decode's line
        fitted = fit_seats(a, run, placing, [max(n, a.max_model_len or 0)
                                             for n in a.prompt_len], a.prompt_len, length)

        def priced(n: int, started: int | None) -> PrefillReport:
            """The prompt on the engine started at ``started`` (None: its default)."""
            # a serving engine's prompt runs in steps of its token budget (vLLM V1 chunks by
            # default), the budget its pool is sized with (at the --max-model-len it is
            # started with, as engine_seats sizes it): the flag, else the engine's default
            budget = None if placed.engine.startswith("llama.cpp") else rank_step_budget(
                placed, step_budget(placed, replace(pool_settings or EngineSettings(),
                                                    max_model_len=started)))
            # the pool's settings in decode's words (its JSON's engine_max_batch[].settings)
            described = describe_settings(pool_settings or EngineSettings(), placed.engine,
                                          started) if pool_settings or started else ""
            floor = prefill_floor(placed, n, a.batch, ubatch,
                                  budget[0] if budget else None, a.n_batch)
            # llama.cpp without -np: llama-server's default slots cap the prompts, as decode's
            seat = default_slots(engine_seats(placed, n, a.enforce_eager, pool_settings,
                                              started), placed.engine)
            # the steps are priced where the engine runs the prompts (a prompt past every
            # pool would be millions of steps, for an expectation nobody is shown)
            expected = Expectation.of_prefill(placed, n, a.batch, profile, ubatch,
                                              budget if engine_runs(floor, seat) else None,
                                              chunked, a.n_batch)
            return PrefillReport(placed, floor, expected, ubatch, seat, notes, budget,
                                 pool_settings.usage if pool_settings else "serve",
                                 a.engine_version, described, chunked)

        def report(n: int) -> PrefillReport:
            out = priced(n, length)
            # where the engine would refuse to start, the prompt again at the --max-model-len
            # the refusal suggests, as decode prices its points there
            longest = suggested_max_model_len(() if out.seat is None else (out.seat,), length)
            if longest:
                base = pool_settings or EngineSettings()
                out = replace(out, at_longest=priced(n, longest), refusal_working=refusal_steps(
                    placed, replace(base, enforce_eager=a.enforce_eager or base.enforce_eager),
                    longest, [n]))
            if fitted is None:
                return out
            i = a.prompt_len.index(n)
            return with_fit_seat(out, fitted[0][i], fitted[2], fitted[1][i],
                                 bool(run.unplaced))

        return [report(n) for n in a.prompt_len]

    names = accelerator_names(args)
    if len(names) > 1:  # the same prompts on several cards, side by side
        ran, not_run = run_each(names, lambda name: one(one_card(args, name)), card_id)
        return PrefillComparison(tuple(r for reports in ran for r in reports), not_run)
    reports = one(args)
    return reports[0] if len(reports) == 1 else PrefillSeries(tuple(reports))


def _lora_step_note(args: argparse.Namespace) -> str:
    """prefill's line for --enable-lora (lora_slots.step_caution), or ""."""
    lora = lora_settings(args)
    if lora is None:
        return ""
    from ridgeline.lora_slots import step_caution

    return step_caution(lora)


def register(sub: Any) -> None:

    p = sub.add_parser("prefill", help="a prompt's floor and expected TTFT, and its intensity")
    _deployment_flags(p, several=True)
    p.add_argument("--prompt-len", type=_count_list("prompt length"), required=True,
                   help="tokens in each prompt; one or a list: 1000,8000,32000")
    p.add_argument("--batch", type=_how_many("batch", MAX_BATCH),
                   help="prompts prefilled together (default 1; llama.cpp with -np N: N, its "
                   "slots)")
    _engine(p)
    p.add_argument("-ub", "--ubatch-size", dest="ubatch_size", metavar="N",
                   type=_positive_count("ubatch size"),
                   help="llama.cpp: tokens per ubatch (default 512); each re-reads the weights, "
                   "and with partial offload copies the host's over the link")
    llamacpp_batch_flag(p)
    _offload(p)
    add_eager_flag(p)
    add_pool_flags(p)
    data_parallel_flags(p)
    _output(p)
    p.set_defaults(handler=cmd_prefill)
