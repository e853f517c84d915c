"""CLI: observe — a live engine's batch on the roofline, from its metrics, log or bench
result."""

from __future__ import annotations

import argparse
import math
from typing import Any

from ridgeline.cli import (
    _engine,
    _formats,
    _gpu,
    _output,
    _pipeline,
    seats_flag,
)
from ridgeline.cli_engine import MEMORY_RULES, checked_engine_version, engine_version_flag
from ridgeline.cli_load import (
    default_engine,
    load_accelerator,
    load_deployment,
    load_model,
    load_profile,
)
from ridgeline.cli_spec import draft_cost_flag, spec_flags
from ridgeline.cli_types import _not_empty, _positive_count, _typed
from ridgeline.errors import InputError

MAX_POLL_S = 86_400.0  # observe's window and interval against a live engine: a day


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


def _positive_seconds(text: str) -> float:
    value = _seconds(text)
    if value <= 0:
        raise InputError(f"the time between scrapes must be above 0, got {text!r}")
    return value


def engine_for_metrics(family: str | None, args: argparse.Namespace) -> str:
    """The engine a source's metric names point to: llama-server's build for the card
    (Metal on Apple silicon, ROCm on AMD, CUDA otherwise), SGLang, TensorRT-LLM, or the
    default. vLLM's metrics size vLLM on any card some release runs on, even one the newest
    runs nothing on (a V100: the server runs a release before 0.20, which --engine-version or
    its log names), where the default would have priced llama.cpp-cuda's pool beside them;
    on one no build runs on (Apple silicon) the card's default, and a caution, stay."""
    from ridgeline.engine_platforms import engine_platform_problem
    from ridgeline.engines import llamacpp_build

    if family in ("sglang", "trtllm"):
        return family
    if family == "vllm" and not engine_platform_problem("vllm", load_accelerator(args)):
        return family
    if family == "llama.cpp":
        return llamacpp_build("llama.cpp", load_accelerator(args).vendor)
    return default_engine(args)


def _refuse_unreleased_card(args: argparse.Namespace, family: str | None) -> None:
    """vLLM's metrics with no --engine on a card the release priced runs nothing on (a V100
    under 0.32, vllm_gpu_floors): the server runs an earlier release, so the way out is the
    release it runs, not llama.cpp-cuda, whose pool is not the server's."""
    from ridgeline.vllm_gpu_floors import floor_problem

    if family != "vllm":
        return
    problem = floor_problem("engine", load_accelerator(args), args.engine_version, lever="")
    if problem:
        raise InputError(f"{problem} (the metrics are vLLM's: the server runs such a release)")


def cmd_observe(args: argparse.Namespace) -> Any:
    from dataclasses import replace

    from ridgeline.engines import engine_id
    from ridgeline.observe import is_url, read_source, refuse_other_scheme
    from ridgeline.reports.observe import observe_report

    args.fetch = False
    refuse_other_scheme(args.source)  # before --duration's "polls a URL", which it is not
    model = load_model(args)
    given = [flag for flag, value in (("--duration", args.duration), ("--interval", args.interval))
             if value is not None]
    if given and not is_url(args.source):  # a saved file's window is the one its scrapes span
        raise InputError(f"{' and '.join(given)} poll{'s' * (len(given) == 1)} a URL; "
                         f"{args.source} is read as saved "
                         "(its window is the span of its timed scrapes)")
    obs = read_source(args.source, 60.0 if args.duration is None else args.duration,
                      1.0 if args.interval is None else args.interval)
    named = args.engine
    if named is None:  # the engine whose metric names the source carries, else the default
        args.engine = engine_for_metrics(obs.engine_family, args)
    launched(args, obs, engine_id(args.engine))
    if named is None:
        _refuse_unreleased_card(args, obs.engine_family)
    dep = replace(load_deployment(args, model), engine=engine_id(args.engine))
    settings = server_settings(args, model, obs)
    # an --engine the metric names contradict is cautioned (ObserveReport.cross_checks)
    report = observe_report(obs, dep, load_profile(args), args.context, settings,
                            observed_spec(args, obs, model))
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
                                 f"{report.misdescribed}, as its cautions say"
                                 if report.misdescribed else
                                 "a drafter served the window, and the measurements format "
                                 "has no speculative-decoding column: calibrate and validate "
                                 "would price its tokens as plain decodes, one a step "
                                 "(validation/README.md leaves such rows out)"
                                 if report.drafted else
                                 mixed_step_note(report, written=False)
                                 if report.mixed_row and _itl_histogram(report) else
                                 _missing_for_a_row(report)) + ")")
            return report
        try:
            with open(args.emit_measurements, "w", encoding="utf-8", newline="") as handle:
                handle.write(rows)
        except OSError as exc:
            raise InputError(f"cannot write {args.emit_measurements}: {exc}") from None
        obs.notes.append(f"wrote {count} {'row' if count == 1 else 'rows'} for `ridgeline "
                         f"calibrate` to {args.emit_measurements}" + mixed_step_note(report))
    return report


def observed_spec(args: argparse.Namespace, obs: Any, model: Any) -> Any:
    """The drafter the flags give (--spec-tokens, --spec-method or the engine's spelling),
    its acceptance read off the tokens the source says a verify step keeps (SpecDecode.observed;
    its drafter's cost --spec-draft-cost, decode's default SPEC_DRAFT_COST where not given),
    as decode --spec-tokens prices it; None without the flags or the source's acceptance
    length (the step then priced as plain decoding, which the report's notes say). An
    acceptance length past what the drafts can keep, or draft tokens a draft past the draft
    length, is refused: the flags are not the server's."""
    from ridgeline.cli_spec import spec_method
    from ridgeline.spec_decode import SpecDecode

    tokens = obs.spec_tokens_per_step
    if not args.spec_tokens or not tokens:
        return None
    if not 1 <= tokens <= args.spec_tokens + 1:
        raise InputError(f"{obs.source} reads {tokens:,.2f} tokens a verify step, and "
                         f"{args.spec_tokens} draft{'s keep' if args.spec_tokens > 1 else ' keeps'} "
                         f"1 to {args.spec_tokens + 1} (the bonus token and each draft "
                         "accepted): give the server's own draft length")
    each = obs.spec_drafts_per_draft
    if each is not None and each > args.spec_tokens:
        raise InputError(f"{obs.source} reads {each:,.2f} draft tokens a draft, and "
                         f"--spec-tokens {args.spec_tokens} drafts at most {args.spec_tokens}: "
                         "give the server's own draft length")
    return SpecDecode.observed(args.spec_tokens, tokens, args.spec_draft_cost,
                               spec_method(args, model))


def _missing_for_a_row(report: Any) -> str:
    """Why a source wrote no row where nothing else stopped it: a row needs a mean
    inter-token latency and a running batch over one window. A log's stats lines carry no
    latency; a scrape or a bench may lack either (SGLang's scrapes without an ITL histogram,
    a histogram that did not grow between the scrapes, a running gauge at 0)."""
    if report.obs.kind == "log":
        return ("one needs a mean inter-token latency and a running batch over the same "
                "window, which /metrics scrapes carry and a log does not")
    if not _itl_histogram(report):
        return ("one needs a mean inter-token latency over the window, and the source "
                "gives none" + (": no ITL histogram that grew between its scrapes"
                                if report.obs.kind == "metrics" else ""))
    return "one needs a running batch over the window, and the source shows none running"


def _itl_histogram(report: Any) -> bool:
    """Whether the source timed its tokens (an ITL histogram's mean over the window), which
    a decode row is read from: without one, its prompt work is no reason it wrote none."""
    itl = report.obs.latency_ms.get("itl", {}).get("mean")
    return bool(itl) and not math.isnan(itl)


def launched(args: argparse.Namespace, obs: Any, engine: str) -> None:
    """The release and the seats the server runs (args.engine_version, args.max_num_seqs):
    the source's own where it states them (a vLLM log's start-up lines), else the flags
    (--engine-version, --max-num-seqs / --max-running-requests / --max_batch_size), else
    none (the newest release modelled, the engine's default seats); which was used goes in
    the notes, and a flag that contradicts the source is refused in one line."""
    ours = not obs.engine_family or engine.startswith(obs.engine_family)
    stated = obs.engine_version if ours else None
    if stated is not None:
        try:
            checked_engine_version(stated, engine)
        except InputError as exc:  # a release ridgeline does not model: sized as the newest
            obs.notes.append(f"{obs.source} states {engine} {stated}, which is not modelled "
                             f"({exc}): sized as the newest release modelled")
            stated = None
    given = checked_engine_version(args.engine_version, engine)
    if stated is not None and given is not None and same_release(given, stated):
        # one release however spelt ("v0.9.1", "0.9"): the spelling that names its engine
        from ridgeline.vllm_memory import engine_named

        given = stated = max(stated, given, key=lambda v: bool(engine_named(v)))
    args.engine_version = checked_engine_version(
        _stated_or_given(obs, "--engine-version", given, stated,
                         "the engine's release"), engine)
    if args.engine_version is None and engine == "vllm":
        args.engine_version = inferred_release(obs)
    if past := past_read(engine, args.engine_version):  # fit's caution, as a note
        obs.notes.append(past)
    stated_seats = obs.max_num_seqs if ours else None
    from ridgeline.reports.utilization import seats_flag as engine_seats_flag

    # the engine's own name for the seats (observe takes no llama-server -np)
    flag = "--max-num-seqs" if engine.startswith("llama.cpp") else engine_seats_flag(engine)
    args.max_num_seqs = _stated_or_given(obs, flag, args.max_num_seqs,
                                         stated_seats, "the seats")
    if stated_seats is None:  # the flag's seats, against what the source shows running
        _refuse_seats_below_batch(args, obs, engine)


def inferred_release(obs: Any) -> str | None:
    """The vLLM release to size the pool at where neither the source nor --engine-version
    states one and the page carries no vllm:cache_config_info (which gives the pool itself):
    the newest its metric names allow (vllm_metric_releases: a page with
    vllm:gpu_cache_usage_perc is 0.11 or earlier, sized as 0.11: utilization 0.9 and blocks
    of 16, where 0.34's 1.0 modelled 11 % more pool on an H100), with a note naming the
    range and the names; None, sized as the newest release modelled, where no name caps it,
    the names contradict each other, or the cap is no release ridgeline models."""
    found = obs.vllm_releases
    if found is None or obs.engine_family != "vllm" or obs.cache_config_read:
        return None
    if not found.consistent:
        obs.notes.append(f"the page's metric names bound vLLM's release both ways at once "
                         f"({found.reasons()}): not one release's names, so no release is "
                         "inferred; sized as the newest release modelled")
        return None
    if found.newest is None:
        return None
    try:
        version = checked_engine_version(found.newest, "vllm")
    except InputError as exc:
        obs.notes.append(f"the page's metric names put vLLM at {found.text()}, which is not "
                         f"modelled ({exc}): sized as the newest release modelled")
        return None
    obs.engine_version_inferred = version
    obs.notes.append(f"vLLM's release inferred from the page's metric names: {found.text()} "
                     f"({found.reasons()}); with no vllm:cache_config_info and no "
                     f"--engine-version the pool is sized at {version}, the newest they "
                     "allow (--engine-version gives the server's own)")
    return version


def past_read(engine: str, version: str | None) -> str:
    """The caution fit gives where ``version`` is newer than the newest release whose memory
    rules were read (SGLang 0.6.0 past 0.5.23, vLLM 0.99 past its newest checked), else ""."""
    if version is None:
        return ""
    if engine == "sglang":
        from ridgeline.sglang_memory import past_checked

        return past_checked(version)
    if engine == "vllm":
        from ridgeline.vllm_memory import past_modelled, vllm_accounting

        return past_modelled(vllm_accounting(version))
    return ""


def _refuse_seats_below_batch(args: argparse.Namespace, obs: Any, engine: str) -> None:
    """Refuse seats the source's running batch outgrew: a vLLM engine core runs at most
    max_num_seqs requests (V1's scheduler caps its one running list; vllm:num_requests_running
    and the log's "Running: N reqs" are each core's, as observe reads them), so a batch of 32
    under --max-num-seqs 16 says the flag is not the server's. A pipeline is left alone: V0
    runs a scheduler a stage, each seating max_num_seqs. Other engines' gauges are not read
    for this (SGLang's under data-parallel attention may add the ranks)."""
    seats, running = args.max_num_seqs, max(obs.busiest_running or obs.running, default=0.0)
    if seats is None or engine != "vllm" or obs.engine_family not in (None, "vllm") \
            or (getattr(args, "pipeline_parallel_size", None) or 1) > 1 or running <= seats:
        return
    raise InputError(f"{obs.source} shows {running:,.0f} requests running in one engine core, "
                     f"past the {seats:,} seats --max-num-seqs gives: vLLM seats no more, so "
                     "the flag is not the server's; give its own, or leave it out")


def same_release(given: str, stated: str) -> bool:
    """Whether --engine-version ``given`` names the release a source ``stated``: the same
    numbers ("0.9" is 0.9.0, "v0.9.1" is 0.9.1), and the same engine (V0, V1) where both
    name one."""
    from ridgeline.vllm_memory import engine_named, parse_version

    def release(text: str) -> tuple[tuple[int, ...], str]:
        return parse_version(text), engine_named(text)

    (given_numbers, given_word), (stated_numbers, stated_word) = release(given), release(stated)
    return given_numbers == stated_numbers and (
        "" in (given_word, stated_word) or given_word == stated_word)


def _stated_or_given(obs: Any, flag: str, given: Any, stated: Any, what: str) -> Any:
    """The source's ``stated`` value where it has one (a ``given`` flag that differs refused),
    else the flag's; a note says which sized the pool."""
    if stated is None:
        if given is not None:
            obs.notes.append(f"{what}: {given}, as {flag} gives it")
        return given
    if given is not None and str(given) != str(stated):
        raise InputError(f"{flag} {given} contradicts {obs.source}, whose start-up lines "
                         f"state {stated}: leave {flag} out")
    obs.notes.append(f"{what}: {stated}, as {obs.source}'s start-up lines state it")
    return stated


def server_settings(args: argparse.Namespace, model: Any, obs: Any = None) -> Any:
    """The server's settings as its launch gives them, read once the engine is known (the
    source's, or --engine): its release and seats (``launched``), its drafter
    (--spec-tokens and --spec-method, or the engine's own spelling, --speculative-algorithm
    EAGLE --speculative-num-steps 3 …), and under vLLM the memory settings its metrics state
    (``scraped_memory``), which size the modelled pool and the seats as fit and simulate
    size them."""
    from ridgeline.cli_load import drafter, drafts_with_mtp
    from ridgeline.cli_spec import spec_args, spec_method
    from ridgeline.engines import engine_id
    from ridgeline.memory import EngineSettings

    spec_args(args)
    if args.spec_tokens:
        spec_method(args, model)  # an MTP drafter needs the checkpoint's MTP layers
    utilization, kv_bytes = scraped_memory(obs) if obs is not None and engine_id(
        args.engine) == "vllm" else (None, None)
    return EngineSettings(speculative_decoding=bool(args.spec_tokens),
                          draft_mtp=drafts_with_mtp(args), drafter=drafter(args),
                          engine_version=args.engine_version, max_num_seqs=args.max_num_seqs,
                          gpu_memory_utilization=utilization, kv_cache_memory_bytes=kv_bytes)


def scraped_memory(obs: Any) -> tuple[float | None, int | None]:
    """vLLM's gpu_memory_utilization and kv_cache_memory_bytes as its cache_config_info
    states them (observe_metrics._read_memory_labels), with a note naming each read: the
    modelled pool is sized under the server's own (Llama-3.1-8B on an H100 at 0.9: 434,112
    tokens, beside the engine's 432,240; 0.34's default 1.0 had modelled 483,520)."""
    from ridgeline.engine_metrics import CACHE_CONFIG

    read = [f"{key} {value:,}" for key, value in (
        ("gpu_memory_utilization", obs.gpu_memory_utilization),
        ("kv_cache_memory_bytes", obs.kv_cache_memory_bytes)) if value is not None]
    if read:
        obs.notes.append(f"the modelled pool is sized at {' and '.join(read)}, as the "
                         f"server's {CACHE_CONFIG} states {'them' if len(read) > 1 else 'it'}")
    return obs.gpu_memory_utilization, obs.kv_cache_memory_bytes


def mixed_step_note(report: Any, written: bool = True) -> str:
    """What a decode row leaves out where steps also carry prompt tokens: how much slower
    ridgeline prices the window's mean step than the decode the row is read as (32 decodes of
    Llama-3.1-8B on an H100, a 1,000-token prompt in its own step one step in 50: 11.4 ms
    against 10.9, 4%); ``written`` False: why no row was written (past MIXED_ROW_SLACK)."""
    from ridgeline.reports.observe import MIXED_ROW_SLACK

    chunk, mixed, own = report.prompt_tokens_per_step, report.predicted_step_ms, \
        report.prompt_steps
    slow = report.mixed_step_slowdown
    if not slow:
        return ""
    alone = report.decode_step_ms  # the batch's decodes alone, as validate prices the row
    carried = (f"the steps that run its prompts beside the decodes (about {len(own)} in "
               f"{1 / report.prompts_per_step:,.0f})" if own else
               f"the {chunk:,} prompt tokens each step carries on average")
    priced = (f"ridgeline prices {'the mean step' if own else 'that step'} at {mixed:,.1f} ms, "
              f"decode alone at {alone:,.1f} ms")
    if not written:
        return (f"its inter-token latency includes {carried}: {priced}, so a row would read "
                f"{slow:.0%} slow to calibrate and validate, which take it for decode alone, "
                f"past the {MIXED_ROW_SLACK:.0%} a decode row may carry; measure a window "
                "with few arrivals for a clean decode row")
    return (f"; its inter-token latency includes {carried}, and the row says nothing of them: "
            f"{priced}, so the row reads {slow:.0%} slow to "
            "calibrate and validate, which take it for decode alone: measure a window with few "
            "arrivals for a clean decode row")


def register(sub: Any) -> None:

    p = sub.add_parser("observe", help="a live engine's batch on the roofline, and its wall",
                       epilog="The server's launch (--engine-version, --max-num-seqs) defaults "
                       "to what the source states, else the engine's defaults. Its drafter "
                       "(--spec-tokens, --speculative-config, --speculative-algorithm) sizes "
                       "the pool and seats, each step priced as its verify step at the "
                       "source's acceptance length (docs/observe.md); without one, priced "
                       "without drafts.")
    p.add_argument("source", metavar="SOURCE", type=_not_empty("source path or URL"),
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
    launch = p.add_argument_group("the server's launch (its pool and seats; default: what "
                                  "the source states, else the engine's defaults)")
    engine_version_flag(launch, MEMORY_RULES)
    seats_flag(launch, llamacpp=False)
    drafter = p.add_argument_group(
        "the server's drafter (its pool and seats; each step priced as its verify step at the "
        "source's acceptance length, docs/observe.md; without one, priced without drafts)")
    spec_flags(drafter, pricing=False)  # the acceptance is the source's, not a flag's
    draft_cost_flag(drafter)
    _output(p)
    # no --engine: the one whose metric names the source carries (cmd_observe)
    p.set_defaults(handler=cmd_observe, engine_by_accelerator=False)
