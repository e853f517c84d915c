"""CLI wiring for the companion calculations: amdahl, evalstats, prefix, attention."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, is_dataclass, replace
from typing import TYPE_CHECKING, Any

from ridgeline.amdahl import FractionSource
from ridgeline.cli_types import DEFAULT_CONTEXT_TOKENS
from ridgeline.errors import InputError, shorten
from ridgeline.explain import Step
from ridgeline.step_share import OP_GROUPS
from ridgeline.units import plural

if TYPE_CHECKING:
    from ridgeline.evalstats import PercentageCount


@dataclass(frozen=True)
class LinesReport:
    """A report made of named result dataclasses, each of which can explain itself."""

    results: tuple[tuple[str, Any], ...]  # (JSON key, result)
    lines: tuple[str, ...]
    notes: tuple[str, ...] = ()
    steps: tuple[Step, ...] = field(default=())

    def __post_init__(self) -> None:
        keys = [key for key, _ in self.results]
        assert len(set(keys)) == len(keys), f"a repeated key drops a result from --json: {keys}"

    def to_dict(self) -> dict[str, Any]:
        # a result that names its keys for --json (amdahl's source) gives them itself
        out: dict[str, Any] = {key: result.to_dict() if hasattr(result, "to_dict")
                               else asdict(result) for key, result in self.results}
        if self.notes:
            out["notes"] = list(self.notes)
        return out

    def text_lines(self) -> list[str]:
        return [*self.lines, *self.notes]

    def explain_step_dicts(self) -> list[dict[str, Any]]:
        """The --json explain of results that print their own text (evalstats, prefix): each
        result's Steps (evalstats_steps), as every command's, each naming its result
        ("point": "wilson_interval_a") where there are several; none for amdahl's, whose
        ``steps`` render as every command's."""
        from ridgeline.evalstats_steps import result_steps
        from ridgeline.explain import step_dict

        if self.steps:
            return []
        several = len(self.results) > 1
        return [{"point": key, **step_dict(s)} if several else step_dict(s)
                for key, result in self.results for s in result_steps(result)]

    def explain_lines(self) -> list[str]:
        if len(self.results) == 1:
            return list(self.results[0][1].explain_lines())
        out: list[str] = []
        for key, result in self.results:  # each under its JSON key: A's and B's look alike
            out += [f"{key}:", *("  " + line for line in result.explain_lines())]
        return out


def named(result: Any, suffix: str = "") -> tuple[str, Any]:
    """(key, result), the key from the class name: McNemarExact -> mc_nemar_exact."""
    assert is_dataclass(result) and not isinstance(result, type)
    name = type(result).__name__
    return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_") + suffix, result


# the engine's default is decode's (cli_load.default_engine): llama.cpp-metal on Apple silicon
AMDAHL_STEP_DEFAULTS = {"op": "attention", "batch": 1, "context": DEFAULT_CONTEXT_TOKENS,
                        "num_gpus": 1}


def cmd_amdahl(args: argparse.Namespace) -> LinesReport:
    from ridgeline.amdahl import (
        end_to_end_speedup,
        required_part_speedup,
        slower_words,
        speedup_ceiling,
        truthful,
    )

    notes: list[str] = []
    if args.fraction is not None:
        if args.model:
            raise InputError("--fraction and --model both give the part's share of the step; "
                             "pass one")
        stray = [f"--{name.replace('_', '-')}" for name in (
            "gpu", "num_gpus", "weights", "kv_dtype", "engine", "profile", "op", "batch",
            "context", "hf_overrides", "vllm_allow_long_max_model_len")
            if getattr(args, name) is not None] + (["--fetch"] if args.fetch else [])
        if stray:
            verb = "applies" if len(stray) == 1 else "apply"
            raise InputError(f"{', '.join(stray)} {verb} only with --model (the share from a "
                             "model's step)")
        source = FractionSource(args.fraction, given=True)
    else:
        source, cautions = _fraction_from_model(args)
        notes += [f"caution: {c}" for c in cautions]
        if source.op_defaulted:
            others = " or ".join(op for op in OP_GROUPS if op != source.op)
            notes.append(f"--op not given: the {source.op} share (--op {others} for another)")
        if source.op == "communication" and source.num_gpus == 1:  # a 0% share, unexplained
            notes.append("one GPU runs no collectives, so communication takes no time: "
                         "give --num-gpus 2 or more, the tensor-parallel group, for its share")
    fraction = source.fraction
    results: list[tuple[str, Any]] = [("source", source)]
    # amdahl's working as Step objects, like every other command's (its --json explain too)
    steps = list(source.explain_steps())
    # each figure with the digits that keep it on its side of 1x (and of the ceiling, for the
    # target): 1.0000001x on the part is not "1x", a 99.9999999% share not "100.0%"
    lines = [f"part at {truthful(fraction * 100, (0.0, 100.0), 'f', 1)}% of the time "
             f"({source.text()})"]
    if args.speedup is not None:
        gain = end_to_end_speedup(fraction, args.speedup)
        results.append(named(gain))
        steps += gain.explain_steps()
        times = gain.end_to_end_speedup
        shown = truthful(times, (1.0,), "f", 2) if times >= 0.01 else f"{times:.3g}"  # not 0.00
        lines.append(f"  {truthful(args.speedup, (1.0,), 'g', 6)}x on the part"
                     f"{slower_words(args.speedup)} -> {shown}x end to end{slower_words(times)}")
    ceiling = speedup_ceiling(fraction)
    results.append(named(ceiling))
    steps += ceiling.explain_steps(args.target)  # on its side of the target, as its line is
    marks = (1.0,) if args.target is None else (1.0, args.target)
    shown = ("unbounded (the part is the whole step)" if math.isinf(ceiling.ceiling_speedup)
             else f"{truthful(ceiling.ceiling_speedup, marks, 'f', 2)}x")
    lines.append(f"  ceiling if the part took no time: {shown}")
    if args.target is not None:
        need = required_part_speedup(fraction, args.target)
        results.append(named(need))
        steps += need.explain_steps()
        lines.append(f"  for {truthful(args.target, (1.0, ceiling.ceiling_speedup), 'g', 6)}x "
                     f"end to end: {need.verdict}")
    return LinesReport(tuple(results), tuple(lines), tuple(notes), tuple(steps))


def _fraction_from_model(args: argparse.Namespace) -> tuple[FractionSource, list[str]]:
    """The part's share of the model's decode step, and the cautions it earns: a context past
    the model's trained one, a profile that saw too few rows on this class of card or none at
    this batch."""
    from ridgeline.cli_load import default_engine, load_deployment
    from ridgeline.engines import chosen_profile
    from ridgeline.parallel import deployment_cross_node_caution
    from ridgeline.reports.expectation import context_caution
    from ridgeline.step_share import decode_share

    if not (args.model and args.gpu):
        missing = " and ".join(f for f, v in (("--model", args.model), ("--gpu", args.gpu))
                               if not v)
        raise InputError(f"give --fraction, or take it from a decode step: {missing} missing "
                         "(--op picks the part, attention by default)")
    given = {name: value for name, value in vars(args).items() if value is not None}
    step = argparse.Namespace(**{
        **vars(args), **AMDAHL_STEP_DEFAULTS, "engine": default_engine(args), **given,
        "gpu_file": None,
        "peak_tflops": None, "bandwidth_gbs": None, "gpu_memory_gib": None,
        "gpu_required": True})
    dep = load_deployment(step)
    profile = chosen_profile(step.engine, step.profile)
    source = decode_share(dep, step.op, step.batch, step.context, profile, step.profile,
                          op_defaulted=args.op is None)
    cautions = (context_caution(dep, step.context), profile.calibration_caution(dep.accelerator),
                profile.batch_range_caution(dep.accelerator, step.batch),
                deployment_cross_node_caution(dep))
    return source, [c for c in cautions if c]


def cmd_evalstats(args: argparse.Namespace) -> LinesReport:
    from ridgeline import evalstats as ev

    results: list[tuple[str, Any]] = []
    lines: list[str] = []
    notes: list[str] = []
    alpha = args.alpha
    scores = args.pct_a is not None or args.pct_b is not None
    if args.power is not None and not scores:  # McNemar's verdict has no size to power
        raise InputError("--power sizes a benchmark for the gap between --pct-a and --pct-b; "
                         "give them and --n")
    power = 0.8 if args.power is None else args.power
    if args.discordance is not None and not scores:
        raise InputError("--discordance sizes a paired benchmark for the gap between "
                         "--pct-a and --pct-b; give them and --n")
    if args.discordant:
        b, c = args.discordant
        mc = ev.mcnemar_exact(b, c, alpha, args.n)
        results.append(named(mc))
        verdict = "a real difference" if mc.significant else "not distinguishable from chance"
        lines.append(f"McNemar exact: b={b:,}, c={c:,} (net gap {mc.net_gap_items:,}) -> "
                     f"p {ev.format_p(mc.p_value)}: {verdict} at alpha {alpha:g}")
    if scores:
        missing = [flag for flag, value in (("--pct-a", args.pct_a), ("--pct-b", args.pct_b),
                                            ("--n", args.n)) if value is None]
        if missing:
            raise InputError(f"comparing two scores needs --pct-a, --pct-b and --n (the number "
                             f"of items): give {', '.join(missing)}")
        n = args.n
        a = ev.count_from_percentage(args.pct_a, n)
        b2 = ev.count_from_percentage(args.pct_b, n)
        results += [named(a, "_a"), named(b2, "_b")]
        for label, r in (("A", a), ("B", b2)):
            flag = "" if r.is_whole_count else "  <- no whole number of items gives this"
            lines.append(f"{label}: {r.printed_percent}% of {n:,} = {r.nearest_count:,} "
                         f"{plural(r.nearest_count, 'item')}{flag}")
        notes += _count_notes(a, b2)
        conflicts = ev.discordant_conflicts(a, b2, *args.discordant) if args.discordant else []
        if conflicts:  # both cannot describe the same items: no verdict from either
            raise InputError(f"--discordant contradicts the scores: {conflicts[0]}")
        wa = ev.wilson_interval(a.nearest_count, n, 1 - alpha)
        wb = ev.wilson_interval(b2.nearest_count, n, 1 - alpha)
        test = ev.two_proportion_z_test(a.nearest_count, n, b2.nearest_count, n, alpha)
        results += [named(wa, "_a"), named(wb, "_b"), named(test)]
        lines.append(f"Wilson {ev.confidence_percent(alpha)}%: A {_interval_text(wa.low, wa.high)}, "
                     f"B {_interval_text(wb.low, wb.high)}")
        lines += _unpaired_test_lines(test, results)
        # a benchmark to come is sized for the scores' gap: where each percentage is k/N for
        # one whole k alone (39.02 % and 42.07 % of 164: 64 and 69), the counts are the scores
        # and the percentages their roundings, so the counts size it (4,070 items, not the
        # 4,067 of 0.3902 vs 0.4207); elsewhere the gap reported (39.02 % and 41.5 % of 500
        # are no whole counts: 5,586 items for 0.3902 vs 0.415, not the 6,137 of 195 vs 208),
        # the line saying which gap it sized and, where the tests above used other counts,
        # what the counts' gap would need
        ka, kb = a.nearest_count, b2.nearest_count
        pinned = all(r.consistent_count_low is not None
                     and r.consistent_count_low == r.consistent_count_high for r in (a, b2))
        pa, pb = (ka / n, kb / n) if pinned else (a.percent / 100, b2.percent / 100)
        if pa == pb:
            lines.append("equal scores: no gap for a benchmark of any size to detect")
        else:
            need, how = _items_needed(pa, pb, alpha, power, notes, results)
            gap = (f"the counts' gap, {ka:,}/{n:,} vs {kb:,}/{n:,}" if pinned else
                   f"the reported gap, {a.printed_percent}% vs {b2.printed_percent}%")
            line = (f"items needed to detect {gap} (alpha {alpha:g}, power {power:g}): "
                    f"{need.num_items:,} per model, unpaired{how}")
            ca, cb = ka / n, kb / n
            if not pinned and ca != cb and (ca, cb) != (pa, pb):
                counts, _ = _items_needed(ca, cb, alpha, power, notes, results, "_counts")
                line += (f"; the counts the tests use, {a.nearest_count_percent:g}% vs "
                         f"{b2.nearest_count_percent:g}%, would need {counts.num_items:,}")
            lines.append(line)
            if args.discordance is not None:
                paired = ev.items_needed_paired(abs(pa - pb), args.discordance, alpha,
                                                power, proportions=(pa, pb))
                results.append(named(paired))
                lines.append(f"  paired, with {args.discordance:.0%} of items disagreeing: "
                             f"{paired.num_items:,}")
            elif args.discordant:
                lines += _observed_paired_lines(pa, pb, n, args.discordant, alpha, power,
                                                results)
    if not results:
        raise InputError("give --pct-a A --pct-b B --n N, or --discordant B,C")
    # the note reads the Wilson intervals: shown only where they are
    overlap = (ev.overlapping_intervals_note(alpha),) if scores else ()
    return LinesReport(tuple(results), tuple(lines), (*notes, *overlap))


def _interval_text(low: float, high: float) -> str:
    """An interval to 3 decimals, or as many more as its width needs to show two digits:
    39.02 % of 164 reads [0.319, 0.467]; 50 % of a billion items, ±0.00003, reads
    [0.499969, 0.500031], not [0.500, 0.500]."""
    width = high - low
    places = 3 if width <= 0 else max(3, 1 - math.floor(math.log10(width)))
    return f"[{low:.{places}f}, {high:.{places}f}]"


def _observed_paired_lines(pa: float, pb: float, n: int, discordant: tuple[int, int],
                           alpha: float, power: float,
                           results: list[tuple[str, Any]]) -> list[str]:
    """The paired size at the discordance --discordant measured, (b + c) ÷ N, where no
    --discordance is given: 39.02 % vs 41.46 % of 164 with b, c = 10, 14 disagree on 24 of
    164 items (14.6 %), so a paired benchmark needs 1,929 items against the unpaired 6,345.
    None where the scores, read as percentages, leave that share impossible."""
    from ridgeline import evalstats as ev

    b, c = discordant
    observed = (b + c) / n
    if not abs(pa - pb) <= observed <= ev.max_discordance(pa, pb):
        return []
    paired = ev.items_needed_paired(abs(pa - pb), observed, alpha, power,
                                    proportions=(pa, pb))
    results.append(named(paired))
    return [f"  paired, with {observed:.1%} of items disagreeing (--discordant's {b + c:,} of "
            f"{n:,}): {paired.num_items:,}"]


def _unpaired_test_lines(test: Any, results: list[tuple[str, Any]]) -> list[str]:
    """The z-test's line; where a cell of the table expects under 5 items (Cochran's rule),
    its verdict is left to Fisher's exact test, on a line of its own (0/2 vs 2/2: z = 2.00,
    p = 0.046 by the normal curve, 1/3 exactly)."""
    from ridgeline import evalstats as ev
    from ridgeline import evalstats_exact as ex

    # p past a float's reach reads "< 1e-300", as McNemar's does, never "p = 0"
    line = f"unpaired two-proportion test: z = {test.z:.2f}, p {ev.format_p(test.p_value)}"
    na, nb = test.num_items_a, test.num_items_b
    if ex.normal_approximation_holds(na, nb, test.pooled_proportion):
        return [line + (" (significant)" if test.significant else " (not significant)")]
    fisher = ex.fisher_exact_test(test.successes_a, na, test.successes_b, nb, test.alpha)
    results.append(named(fisher))
    fewest = ex.smallest_expected_count(na, nb, test.pooled_proportion)
    return [f"{line} (normal approximation: a cell expects {fewest:.3g} "
            f"{plural(fewest, 'item')}, under {ex.MIN_EXPECTED_COUNT:g})",
            f"Fisher's exact test, two-sided: p {ev.format_p(fisher.p_value)}"
            + (" (significant)" if fisher.significant else " (not significant)")]


def _items_needed(pa: float, pb: float, alpha: float, power: float, notes: list[str],
                  results: list[tuple[str, Any]], suffix: str = "") -> tuple[Any, str]:
    """Fleiss's size for p_a vs p_b, or, where a cell of the table it sizes expects under 5
    items, the exact size for Fisher's test (both kept in `results`); with what the line
    says of the method."""
    from ridgeline import evalstats as ev
    from ridgeline import evalstats_exact as ex

    need = ev.items_needed_unpaired(pa, pb, alpha, power)
    results.append(named(need, suffix))
    if ex.normal_approximation_holds(need.num_items, need.num_items, (pa + pb) / 2):
        return need, ""
    if need.num_items > ex.MAX_EXACT_ITEMS:
        notes.append(f"the size for {100 * pa:.4g}% vs {100 * pb:.4g}% is the normal "
                     f"approximation's, outside its range (a cell expects under "
                     f"{ex.MIN_EXPECTED_COUNT:g} items), and past {ex.MAX_EXACT_ITEMS:,} items "
                     "a model, too many to size by Fisher's exact test")
        return need, ""
    exact = ex.items_needed_exact(pa, pb, alpha, power)
    results.append(named(exact, suffix))
    return exact, (f", by Fisher's exact test (the normal approximation's "
                   f"{exact.approximate_items:,} has exact power {exact.approximate_power:.2f})")


def _count_notes(a: PercentageCount, b: PercentageCount) -> list[str]:
    """Refuse scores whose claimed gap is under one item; say which tests use a guessed count."""
    n = a.num_items
    off = [(label, r) for label, r in (("A", a), ("B", b)) if not r.is_whole_count]
    if off and a.nearest_count == b.nearest_count and a.percent != b.percent:
        raise InputError(f"{a.printed_percent}% and {b.printed_percent}% of --n {n:,} "
                         f"{plural(n, 'item')} are both {a.nearest_count:,} "
                         f"{plural(a.nearest_count, 'item')}: the gap is under one item, and "
                         f"no whole number of {n:,} {plural(n, 'item')} prints as "
                         f"{off[0][1].printed_percent}%; check --n")
    return [f"{label}'s {r.printed_percent}% is not k/{n:,} for any whole k: the tests use the "
            f"nearest count, {r.nearest_count:,} ({r.nearest_count_percent:g}%); check --n,"
            " or whether the score averages several runs" for label, r in off]


def cmd_prefix(args: argparse.Namespace) -> LinesReport:
    from ridgeline.cli_engine import checked_engine_version
    from ridgeline.engine_choices import (
        block_size_refusal,
        block_source,
        engine_block_size,
        vllm_newer_than_read,
    )
    from ridgeline.engines import engine_id
    from ridgeline.prefix import BLOCK_SETTINGS, prefix_reuse, tokenize

    texts = args.text_a is not None or args.text_b is not None
    if texts and (args.tokens_a is not None or args.tokens_b is not None):
        raise InputError("give token ids (--tokens-a/--tokens-b) or texts (--text-a/--text-b), "
                         "not both")
    if args.tokenizer and not texts:
        raise InputError("--tokenizer applies to --text-a/--text-b; token ids need none")
    if texts and not (args.text_a is not None and args.text_b is not None and args.tokenizer):
        raise InputError("--text-a and --text-b need both texts and --tokenizer NAME")
    if not texts and (args.tokens_a is None or args.tokens_b is None):
        raise InputError("give --tokens-a and --tokens-b (token ids), or --text-a/--text-b")
    engine = engine_id(args.engine)
    card, vendor = _prefix_card(args.gpu, engine)
    version = checked_engine_version(args.engine_version, engine)
    if args.block_size is not None:  # a size the engine refuses to start with matches nothing:
        problem = block_size_refusal(engine, version, args.block_size)  # fit's and simulate's
        if problem:
            raise InputError(problem)
    default = engine_block_size(engine, version, vendor)  # refuses an engine without a cache
    a, b = (tokenize(args.text_a, args.tokenizer), tokenize(args.text_b, args.tokenizer)) \
        if texts else (args.tokens_a, args.tokens_b)
    setting = BLOCK_SETTINGS[engine]
    unit = "page" if setting == "page_size" else "block"
    source = "as given" if args.block_size else block_source(engine, version, card, vendor)
    block, reason = args.block_size or default, ""
    if args.model:  # the block the model's kernel or state forces, as fit's pool takes it
        forced, name, reason = _model_block(args, engine, version)
        if forced != block:
            source = (f"{name}'s on {card}, as `ridgeline fit` sizes its pool"
                      + (f", not the {block} asked" if args.block_size else ""))
        else:
            source += f"; {name}'s cache on {card} runs in it"  # the model forces no other
        block = forced
    r = replace(prefix_reuse(a, b, block, setting, source), block_reason=reason)
    common, reused = r.common_prefix_tokens, r.tokens_reused
    lines = (f"common prefix {common} {plural(common, 'token')}; with {setting} "
             f"{r.block_size} ({source}): {r.full_blocks_reused} full "
             f"{plural(r.full_blocks_reused, unit)} = {reused} {plural(reused, 'token')} "
             "reused "
             f"({r.fraction_of_b_reused:.1%} of prompt B), {r.tokens_to_recompute} recomputed",)
    partial = min(common, r.prompt_b_tokens - 1) - reused
    notes = []
    newest = vllm_newer_than_read(version) if engine == "vllm" else ""
    if newest:  # as SGLang's next minor is taken at its newest's rules, and said so
        notes.append(f"vLLM {version} is newer than the newest release ridgeline has read "
                     f"({newest}): read at {newest}'s rules, its default block size may have "
                     "moved")
    if engine == "trtllm" and partial > 0:
        notes.append(f"TensorRT-LLM also reuses a block matched in part by default "
                     f"(kv_cache_config.enable_partial_reuse), up to {partial} more "
                     f"{plural(partial, 'token')} here; only full blocks are counted")
    rocm = engine_block_size(engine, version, "amd") if engine == "vllm" else default
    if not (card or args.block_size) and rocm != default:  # vLLM 0.34: 64 on CUDA, 16 on ROCm
        from ridgeline.vllm_memory import vllm_accounting

        notes.append(f"no --gpu: vLLM {vllm_accounting(version).version} on ROCm (an AMD GPU) "
                     f"keeps {setting} {rocm}; give --gpu to match in the card's block")
    if not (args.model or args.block_size):
        notes.append(f"no --model: {setting} {r.block_size} is the engine's default for any "
                     "model; a model's kernel can force another (an MLA cache: 64 on Hopper's "
                     "FlashMLA; a hybrid's blocks grow to hold its state): give --model and "
                     f"--gpu to match in the model's {unit}")
    return LinesReport((named(r),), lines, tuple(notes))


def _model_block(args: argparse.Namespace, engine: str,
                 version: str | None) -> tuple[int, str, str]:
    """(tokens per block, model name, why the model's set-up chose it or "") that ``engine``
    at ``version`` caches --model's prompts in on --gpu, as its KV pool is sized (kv_pool: an
    MLA kernel's block, a hybrid's grown one, or the one asked): DeepSeek-V3 on an H100 under
    TensorRT-LLM, FlashMLA's 64; on a B200 under SGLang 0.5.23, trtllm_mla's 64
    (sglang_page.sglang_page_size, the reason)."""
    if not args.gpu:
        raise InputError("--model needs --gpu: the block a model's cache runs in depends on "
                         "the card (vLLM's default is 64 tokens on NVIDIA GPUs, 16 on ROCm; "
                         "DeepSeek-V3's MLA cache ran in CUTLASS MLA's 128 on a B200 before "
                         "vLLM 0.15)")
    from ridgeline.cli_load import load_model
    from ridgeline.deployment import Deployment
    from ridgeline.hardware import resolve_accelerator
    from ridgeline.memory import EngineSettings, kv_pool
    from ridgeline.sglang_page import sglang_page_size

    model = load_model(args)
    dep = Deployment.laid_out(model, resolve_accelerator(args.gpu), engine=engine)
    pool = kv_pool(dep, EngineSettings(block_size=args.block_size, engine_version=version))
    reason = sglang_page_size(dep, version, args.block_size)[1] if engine == "sglang" else ""
    return pool.block_size, model.name, reason


def _prefix_card(gpu: str | None, engine: str) -> tuple[str, str]:
    """(catalog id, vendor) of prefix's --gpu, ("", "") without one; an engine that does not
    run on the card is refused in fit's words (vllm on an M2 Max)."""
    if not gpu:
        return "", ""
    from ridgeline.engine_platforms import engine_platform_problem
    from ridgeline.hardware import resolve_accelerator

    acc = resolve_accelerator(gpu)
    problem = engine_platform_problem(engine, acc) if engine in ("vllm", "sglang", "trtllm") \
        else ""
    if problem:
        raise InputError(problem)
    return acc.id, acc.vendor or ""


def cmd_attention(args: argparse.Namespace) -> Any:
    from ridgeline.attention_memory import attention_memory
    from ridgeline.cli_load import load_model

    return attention_memory(load_model(args), args.context, args.bytes_per_element)


def _token_ids(text: str) -> list[int]:
    """Token ids as digits separated by commas ("1,2,3"); spaces around a comma are allowed."""
    if not text.strip():
        raise InputError("no token ids given; write them as 1,2,3")
    ids = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            raise InputError(f"empty entry in the token ids {text!r}")
        if not (entry.isascii() and entry.isdigit()):  # not int(): it reads '1_000' and '²'
            raise InputError(f"token ids are whole numbers >= 0 in digits, separated by commas;"
                             f" {shorten(repr(entry))} is not one")
        digits = entry.lstrip("0") or "0"  # counted first: int() stops at 4,300 digits,
        # with words about sys.set_int_max_str_digits
        if len(digits) > len(str(MAX_TOKEN_ID)) or int(digits) > MAX_TOKEN_ID:
            raise InputError(f"token id {shorten(entry)} is past any tokenizer's: ids are "
                             f"at most {MAX_TOKEN_ID:,} (32 bits)")
        ids.append(int(digits))
    return ids


# Hugging Face tokenizers hold a token's id in 32 unsigned bits (tokenizers/src/tokenizer/
# mod.rs: Token { id: u32 }, Model::id_to_token(id: u32)): no vocabulary reaches past it
MAX_TOKEN_ID = 2**32 - 1


def _open_unit(flag: str, top_closed: bool = False) -> Callable[[str], float]:
    """A share strictly between 0 and 1 (or up to 1 itself), its errors naming the flag."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise InputError(f"{flag} must be a number, got {text!r}") from None
        if not (0.0 < value < 1.0 or (top_closed and value == 1.0)):  # also rejects NaN
            bounds = "above 0 and at most 1" if top_closed else "strictly between 0 and 1"
            raise InputError(f"{flag} must be {bounds}, got {text}")
        if not top_closed and (1.0 - value == 1.0 or 1.0 - value == 0.0):
            # its complement (a confidence, a miss rate) would round to 1 or 0
            raise InputError(f"{flag} {text} is too close to 0 or 1 to compute with "
                             "(between 1e-15 and 1 - 1e-15)")
        return value

    return parse


MAX_SCORE_DECIMALS = 10  # a score to 1e-10 %: one item in 10^12, past any benchmark


def _printed_percent(text: str) -> str:
    """A score as a benchmark prints it (39.02, 39.02%), kept as text: its decimals are the
    precision evalstats reads. ASCII digits, 0 to 100, at most ten decimals ("1e-300" had
    printed a 300-digit score, "８" had read as 8)."""
    from decimal import Decimal, InvalidOperation

    body = text.strip().removesuffix("%").strip()
    try:
        if not body.isascii() or "_" in body:
            raise InvalidOperation
        exact = Decimal(body)
    except InvalidOperation:
        raise InputError(f"percent must be a number such as 39.02, got {text!r}") from None
    if not exact.is_finite() or not 0 <= exact <= 100:  # refused here, argparse names the flag
        raise InputError(f"percent must be between 0 and 100, got {text!r}")
    exponent = exact.as_tuple().exponent
    if isinstance(exponent, int) and -exponent > MAX_SCORE_DECIMALS:
        raise InputError(f"percent {text.strip()[:40]} has more than {MAX_SCORE_DECIMALS} "
                         "decimals: not a score as a benchmark prints it")
    return text


def _score_bytes(text: str) -> float:
    """attention --bytes-per-element: a size a score can be kept in (SCORE_BYTES: '2' is
    bf16's); a 3-byte score has no format, so it is refused in one line."""
    from ridgeline.attention_memory import SCORE_BYTES
    from ridgeline.cli_types import _plain_float

    sizes = ", ".join(f"{b:g} ({name})" for b, name in SCORE_BYTES.items())
    value = _plain_float(text, f"bytes per element must be one of {sizes}")
    if value not in SCORE_BYTES:  # NaN too
        raise InputError(f"bytes per element must be one of {sizes}, got {text}")
    return value


def _speedup(what: str, positive_float: Callable[..., Callable[[str], float]]
             ) -> Callable[[str], float]:
    """A speedup flag: a positive number (cli's own parser), at least amdahl.MIN_SPEEDUP."""
    from ridgeline.amdahl import check_speedup

    number = positive_float(what)
    return lambda text: check_speedup(what, number(text))


def _pair(text: str) -> tuple[int, int]:
    parts = text.split(",")
    try:
        b, c = (int(p) for p in parts)
    except ValueError:
        raise InputError(f"--discordant takes two counts B,C, got {text!r}") from None
    if b < 0 or c < 0:
        raise InputError("discordant counts must not be negative")
    return b, c


def add_companion_commands(
    sub: Any, output: Callable[[argparse.ArgumentParser], None],
    typed: Callable[[Callable[[str], Any]], Callable[[str], Any]],
) -> None:
    from ridgeline.cli_engine import engine_flag, engine_version_flag
    from ridgeline.cli_offload import vllm_context_flags
    from ridgeline.cli_types import (
        MAX_BATCH,
        _engine_name,
        _how_many,
        _kv_name,
        _not_empty,
        _one_accelerator,
        _positive_count,
        _positive_float,
        _share,
        _weight_name,
    )

    p = sub.add_parser("amdahl", help="what speeding up one part of the step is worth")
    p.add_argument("--fraction", type=_share("fraction"),
                   help="share of the time the part takes, 0–1")
    p.add_argument("--speedup", type=typed(_speedup("speedup", _positive_float)),
                   help="how much faster the part gets (below 1, a slowdown: 0.5 is "
                   "twice as slow)")
    p.add_argument("--target", type=typed(_speedup("target speedup", _positive_float)),
                   help="end-to-end speedup wanted")
    p.add_argument("--model", type=_not_empty("model name"),
                   help="take the fraction from this model's decode step")
    p.add_argument("--fetch", action="store_true",
                   help="with --model: download its config.json from the Hugging Face Hub")
    p.add_argument("--gpu", type=_one_accelerator(),
                   help="with --model: the accelerator the step runs on")
    # With --model; left None here so that --fraction can refuse them (defaults in
    # AMDAHL_STEP_DEFAULTS).
    p.add_argument("--op", choices=sorted(OP_GROUPS),
                   help="with --model: the part whose share is taken: attention (reading the "
                   "KV cache and its FLOPs), weights (the weight matmuls), communication (the "
                   "collectives between GPUs); default attention")
    p.add_argument("--engine", type=typed(_engine_name),
                   help="with --model: the engine whose calibrated profile prices the step "
                   "(default vllm; llama.cpp-metal on Apple silicon, llama.cpp-rocm on the "
                   "AMD GPUs vLLM leaves out)")
    p.add_argument("--profile", metavar="FILE", type=_not_empty("profile path"),
                   help="with --model: profiles from `ridgeline calibrate`")
    p.add_argument("--batch", type=_how_many("batch", MAX_BATCH),
                   help="with --model: sequences in the decode step whose shares are taken "
                   "(default 1)")
    p.add_argument("--context", type=_positive_count("context length"),
                   help=f"with --model: tokens cached per sequence (default "
                   f"{DEFAULT_CONTEXT_TOKENS:,})")
    p.add_argument("--num-gpus", type=_how_many("number of GPUs"),
                   help="with --model: GPUs in one tensor-parallel group (default 1)")
    p.add_argument("--weights", type=typed(_weight_name),
                   help="with --model: weight format (default: as stored)")
    p.add_argument("--kv-dtype", type=typed(_kv_name),
                   help="with --model: KV-cache dtype (default: the model's dtype, as decode's)")
    vllm_context_flags(p)  # with --model: a --context past its positions, as decode serves it
    output(p)
    p.set_defaults(handler=cmd_amdahl)

    p = sub.add_parser("evalstats", help="can a benchmark resolve the difference reported")
    p.add_argument("--pct-a", type=typed(_printed_percent),
                   help="model A's score in percent, as printed (39.02)")
    p.add_argument("--pct-b", type=typed(_printed_percent), help="model B's score in percent")
    p.add_argument("--n", type=_how_many("number of items"), help="items in the benchmark")
    p.add_argument("--discordant", type=typed(_pair), metavar="B,C",
                   help="items only A got right, items only B got right")
    p.add_argument("--alpha", type=typed(_open_unit("--alpha")), default=0.05,
                   help="significance level, two-sided (default 0.05)")
    p.add_argument("--power", type=typed(_open_unit("--power")),
                   help="chance of detecting the difference, for the sizes (default 0.8)")
    p.add_argument("--discordance", type=typed(_open_unit("--discordance", top_closed=True)),
                   help="share of items the two models disagree on (for the paired size)")
    output(p)
    p.set_defaults(handler=cmd_evalstats)

    p = sub.add_parser("prefix", help="what prefix caching can reuse between two prompts")
    p.add_argument("--tokens-a", type=typed(_token_ids), metavar="IDS",
                   help="token ids of the prompt cached first, comma-separated: 1,2,3")
    p.add_argument("--tokens-b", type=typed(_token_ids), metavar="IDS",
                   help="token ids of the prompt that follows")
    p.add_argument("--text-a", help="the first prompt as text (needs --tokenizer)")
    p.add_argument("--text-b", help="the second prompt as text")
    p.add_argument("--tokenizer", type=_not_empty("tokenizer name"),
                   help="a local Hugging Face tokenizer or a tiktoken encoding")
    p.add_argument("--block-size", "--page-size", "--tokens-per-block", dest="block_size",
                   type=_how_many("block size"),
                   help="tokens per KV block: only whole blocks are reused (default: the "
                   "engine's, vLLM's block_size 64 from 0.34 on NVIDIA GPUs, 16 on ROCm and "
                   "before 0.34, SGLang's page_size 1, TensorRT-LLM's tokens_per_block 32; a "
                   "model's kernel can set another: --model)")
    p.add_argument("--gpu", type=_one_accelerator(),
                   help="the card the engine runs on, for its block (vLLM 0.34 keeps 16 on "
                   "ROCm); default an NVIDIA GPU")
    p.add_argument("--model", type=_not_empty("model name"),
                   help="the model served (needs --gpu), for the block its kernel forces: an "
                   "MLA cache's 64 on Hopper, a hybrid's grown blocks (default: the engine's)")
    engine_flag(p, "engine whose cache the prompts meet (default vllm): vllm, sglang, trtllm")
    engine_version_flag(p, "block size and --block-size rules to follow (64 from vLLM 0.34; "
                        "vLLM's list before 0.18)")
    output(p)
    p.set_defaults(handler=cmd_prefix)

    p = sub.add_parser("attention", help="the S×S scores naive attention would write")
    p.add_argument("--model", required=True, help="a bundled model, a config.json or a Hub id")
    p.add_argument("--fetch", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--context", type=_positive_count("context length"), required=True,
                   help="sequence length S")
    p.add_argument("--bytes-per-element", type=typed(_score_bytes),
                   default=2.0, help="bytes per score: 0.5, 1, 2 or 4 (default 2: bf16; 4: "
                   "an eager fp32 softmax); Q, K, V and O stay bf16")
    output(p)
    p.set_defaults(handler=cmd_attention)
