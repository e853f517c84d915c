"""CLI wiring for the companion calculations: amdahl, evalstats, prefix, attention."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any

from ridgeline.errors import InputError
from ridgeline.explain import Step


@dataclass(frozen=True)
class LinesReport:
    """A report made of result dataclasses, each of which can explain itself."""

    results: tuple[Any, ...]
    lines: tuple[str, ...]
    notes: tuple[str, ...] = ()
    steps: tuple[Step, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for result in self.results:
            is_instance = is_dataclass(result) and not isinstance(result, type)
            out[_snake(type(result).__name__)] = asdict(result) if is_instance else result
        if self.notes:
            out["notes"] = list(self.notes)
        return out

    def text_lines(self) -> list[str]:
        return [*self.lines, *self.notes]

    def explain_lines(self) -> list[str]:
        out: list[str] = []
        for result in self.results:
            out += result.explain_lines()
        return out


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")


def cmd_amdahl(args: argparse.Namespace) -> LinesReport:
    from ridgeline.amdahl import end_to_end_speedup, required_part_speedup, speedup_ceiling

    fraction, source = args.fraction, "given"
    if fraction is not None:
        if args.model:
            raise InputError("--fraction and --model both give the part's share of the step; "
                             "pass one")
        stray = [flag for flag, value in (("--gpu", args.gpu), ("--weights", args.weights),
                                          ("--kv-dtype", args.kv_dtype),
                                          ("--profile", args.profile)) if value]
        if stray:
            verb = "applies" if len(stray) == 1 else "apply"
            raise InputError(f"{', '.join(stray)} {verb} only with --model (the share from a "
                             "model's step)")
    else:
        fraction, source = _fraction_from_model(args)
    results: list[Any] = [speedup_ceiling(fraction)]
    lines = [f"part at {fraction:.1%} of the time ({source})"]
    if args.speedup is not None:
        gain = end_to_end_speedup(fraction, args.speedup)
        results.insert(0, gain)
        lines.append(f"  {args.speedup:g}x on the part -> {gain.end_to_end_speedup:.2f}x end to end")
    ceiling = results[-1].ceiling_speedup
    lines.append(f"  ceiling if the part took no time: {ceiling:.2f}x")
    if args.target is not None:
        need = required_part_speedup(fraction, args.target)
        results.append(need)
        lines.append(f"  for {args.target:g}x end to end: {need.verdict}")
    return LinesReport(tuple(results), tuple(lines))


OP_GROUPS = {
    "attention": ("attention",),
    "weights": ("attention projections", "mlp", "experts", "shared experts", "router",
                "linear attention", "mamba", "lm head"),
    "communication": ("tp all-reduce", "ep all-to-all", "pipeline send"),
}


def _fraction_from_model(args: argparse.Namespace) -> tuple[float, str]:
    from ridgeline.cli import load_deployment
    from ridgeline.cost import decode_batch, step_cost
    from ridgeline.engines import profile_for

    if not (args.model and args.gpu):
        raise InputError("give --fraction, or --model, --gpu and --op to take it from the step")
    args.fetch, args.gpu_file, args.peak_tflops, args.bandwidth_gbs = False, None, None, None
    args.gpu_memory_gib, args.gpu_required = None, True
    dep = load_deployment(args)
    from ridgeline.engines import load_profile_file

    profiles = load_profile_file(args.profile) if args.profile else None
    cost = step_cost(dep, decode_batch(args.batch, args.context),
                     profile_for(args.engine, profiles))
    fraction = cost.share(*OP_GROUPS[args.op])
    return fraction, (f"{args.op} share of a decode step of {dep.model.name} on "
                      f"{dep.accelerator.id}, batch {args.batch}, context {args.context:,}, "
                      f"step_cost with the {args.engine} profile")


def cmd_evalstats(args: argparse.Namespace) -> LinesReport:
    from ridgeline import evalstats as ev

    results: list[Any] = []
    lines: list[str] = []
    if args.discordant:
        b, c = args.discordant
        mc = ev.mcnemar_exact(b, c, args.alpha)
        results.append(mc)
        verdict = "a real difference" if mc.significant else "not distinguishable from chance"
        lines.append(f"McNemar exact: b={b}, c={c} (net gap {mc.net_gap_items}) -> "
                     f"p = {mc.p_value:.4g}: {verdict} at alpha {args.alpha:g}")
    if args.pct_a is not None or args.pct_b is not None:
        if args.pct_a is None or args.pct_b is None or args.n is None:
            raise InputError("--pct-a and --pct-b need --n, the number of items")
        a = ev.count_from_percentage(args.pct_a, args.n)
        b2 = ev.count_from_percentage(args.pct_b, args.n)
        results += [a, b2]
        for label, r in (("A", a), ("B", b2)):
            flag = "" if r.is_whole_count else "  <- no whole number of items gives this"
            lines.append(f"{label}: {r.percent}% of {args.n} = {r.nearest_count} items{flag}")
        wa = ev.wilson_interval(a.nearest_count, args.n, 1 - args.alpha)
        wb = ev.wilson_interval(b2.nearest_count, args.n, 1 - args.alpha)
        test = ev.two_proportion_z_test(a.nearest_count, args.n, b2.nearest_count, args.n,
                                        args.alpha)
        results += [wa, wb, test]
        conf = f"{1 - args.alpha:.0%}"
        lines.append(f"Wilson {conf}: A [{wa.low:.3f}, {wa.high:.3f}], "
                     f"B [{wb.low:.3f}, {wb.high:.3f}]")
        lines.append(f"unpaired two-proportion test: z = {test.z:.2f}, p = {test.p_value:.4g}"
                     + (" (significant)" if test.significant else " (not significant)"))
        need = ev.items_needed_unpaired(wa.proportion, wb.proportion, args.alpha, args.power) \
            if wa.proportion != wb.proportion else None
        if need:
            results.append(need)
            lines.append(f"items needed to detect this gap (alpha {args.alpha:g}, power "
                         f"{args.power:g}): {need.num_items:,} per model, unpaired")
        if need and args.discordance:
            paired = ev.items_needed_paired(abs(wa.proportion - wb.proportion), args.discordance,
                                            args.alpha, args.power)
            results.append(paired)
            lines.append(f"  paired, with {args.discordance:.0%} of items disagreeing: "
                         f"{paired.num_items:,}")
    if not results:
        raise InputError("give --pct-a A --pct-b B --n N, or --discordant B,C")
    return LinesReport(tuple(results), tuple(lines), (ev.OVERLAPPING_INTERVALS_NOTE,))


def cmd_prefix(args: argparse.Namespace) -> LinesReport:
    from ridgeline.prefix import prefix_reuse, tokenize

    texts = args.text_a is not None or args.text_b is not None
    if texts and (args.tokens_a is not None or args.tokens_b is not None):
        raise InputError("give token ids (--tokens-a/--tokens-b) or texts (--text-a/--text-b), "
                         "not both")
    if args.tokenizer and not texts:
        raise InputError("--tokenizer applies to --text-a/--text-b; token ids need none")
    if texts:
        if not (args.text_a is not None and args.text_b is not None and args.tokenizer):
            raise InputError("--text-a and --text-b need both texts and --tokenizer NAME")
        a, b = tokenize(args.text_a, args.tokenizer), tokenize(args.text_b, args.tokenizer)
    elif args.tokens_a is not None and args.tokens_b is not None:
        a, b = args.tokens_a, args.tokens_b
    else:
        raise InputError("give --tokens-a and --tokens-b (token ids), or --text-a/--text-b")
    r = prefix_reuse(a, b, args.block_size)
    lines = (f"common prefix {r.common_prefix_tokens} tokens; with block_size {r.block_size}: "
             f"{r.full_blocks_reused} full blocks = {r.tokens_reused} tokens reused "
             f"({r.fraction_of_b_reused:.1%} of prompt B), {r.tokens_to_recompute} recomputed",)
    return LinesReport((r,), lines)


def cmd_attention(args: argparse.Namespace) -> Any:
    from ridgeline.attention_memory import attention_memory
    from ridgeline.cli import load_model

    return attention_memory(load_model(args), args.context, args.bytes_per_element)


def _token_ids(text: str) -> list[int]:
    parts = text.replace(" ", "").split(",")
    if text.strip() and not all(parts):
        raise InputError(f"empty entry in the token ids {text!r}")
    try:
        ids = [int(t) for t in parts if t]
    except ValueError:
        raise InputError(f"token ids must be whole numbers separated by commas, got {text!r}") \
            from None
    if any(i < 0 for i in ids):
        raise InputError("token ids must not be negative")
    return ids


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
    from ridgeline.cli import (
        MAX_BATCH,
        _engine_name,
        _kv_name,
        _not_empty,
        _positive_count,
        _positive_float,
        _weight_name,
    )

    p = sub.add_parser("amdahl", help="what speeding up one part of the step is worth")
    p.add_argument("--fraction", type=float, help="share of the time the part takes, 0–1")
    p.add_argument("--speedup", type=float, help="how much faster the part gets")
    p.add_argument("--target", type=float, help="end-to-end speedup wanted")
    p.add_argument("--model", type=_not_empty("model name"),
                   help="take the fraction from this model's decode step")
    p.add_argument("--gpu", type=_not_empty("accelerator name"))
    p.add_argument("--op", choices=sorted(OP_GROUPS), default="attention")
    p.add_argument("--engine", default="vllm", type=typed(_engine_name))
    p.add_argument("--profile", metavar="FILE", help="profiles from `ridgeline calibrate`")
    p.add_argument("--batch", type=_positive_count("batch", MAX_BATCH), default=1)
    p.add_argument("--context", type=_positive_count("context length"), default=2000)
    p.add_argument("--num-gpus", type=_positive_count("number of GPUs"), default=1)
    p.add_argument("--weights", type=typed(_weight_name))
    p.add_argument("--kv-dtype", type=typed(_kv_name))
    output(p)
    p.set_defaults(handler=cmd_amdahl)

    p = sub.add_parser("evalstats", help="can a benchmark resolve the difference reported")
    p.add_argument("--pct-a", help="model A's score in percent, as printed (39.02)")
    p.add_argument("--pct-b", help="model B's score in percent")
    p.add_argument("--n", type=_positive_count("number of items"), help="items in the benchmark")
    p.add_argument("--discordant", type=typed(_pair), metavar="B,C",
                   help="items only A got right, items only B got right")
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--power", type=float, default=0.8)
    p.add_argument("--discordance", type=float,
                   help="share of items the two models disagree on (for the paired size)")
    output(p)
    p.set_defaults(handler=cmd_evalstats)

    p = sub.add_parser("prefix", help="what prefix caching can reuse between two prompts")
    p.add_argument("--tokens-a", type=typed(_token_ids), metavar="IDS")
    p.add_argument("--tokens-b", type=typed(_token_ids), metavar="IDS")
    p.add_argument("--text-a")
    p.add_argument("--text-b")
    p.add_argument("--tokenizer", type=_not_empty("tokenizer name"),
                   help="a local Hugging Face tokenizer or a tiktoken encoding")
    p.add_argument("--block-size", type=_positive_count("block size"), default=16)
    output(p)
    p.set_defaults(handler=cmd_prefix)

    p = sub.add_parser("attention", help="the S×S scores naive attention would write")
    p.add_argument("--model", required=True)
    p.add_argument("--fetch", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--context", type=_positive_count("context length"), required=True)
    p.add_argument("--bytes-per-element", type=_positive_float("bytes per element"), default=2.0)
    output(p)
    p.set_defaults(handler=cmd_attention)
