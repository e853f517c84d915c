"""Amdahl's law: what speeding up one part of a step is worth end to end.

A part that takes fraction P of the time, made S times faster, turns a step of
time 1 into (1 - P) + P / S.  Everything here is that one division, read three ways:
forward (the gain), at S = infinity (the ceiling), and backwards (the S a target needs).
Source: G. Amdahl, "Validity of the single processor approach...", AFIPS 1967.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

from ridgeline.errors import InputError
from ridgeline.explain import Step, q, shown_number, step


@dataclass(frozen=True)
class FractionSource:
    """Where P came from: given, or the share of some operators in a model's decode step.

    P = time in the operators / step time, both from step_cost (ridgeline.cost).
    """

    fraction: float
    given: bool  # True: the user gave P; False: from step_cost of the model's decode step
    model: str | None = None
    gpu: str | None = None
    num_gpus: int | None = None
    weights: str | None = None
    kv_dtype: str | None = None
    engine: str | None = None
    profile: str | None = None
    op: str | None = None
    op_defaulted: bool = False  # --op not given
    ops: tuple[str, ...] = ()  # the op group's step_cost operators this step has, added up
    batch: int | None = None
    context: int | None = None
    part_time_s: float | None = None
    step_time_s: float | None = None
    # the engine's fixed costs (per step, layer and weight matmul): in no operator group
    overhead_time_s: float = 0.0

    def to_dict(self) -> dict[str, object]:
        """amdahl --json's ``source``: the fields under every command's names, the card as
        ``accelerator`` ("h100-sxm") and the conversation's length as ``context_len`` (2000)."""
        names = {"gpu": "accelerator", "context": "context_len"}
        return {names.get(k, k): v for k, v in asdict(self).items()}

    def text(self) -> str:
        if self.given:
            return "given"
        gpus = f" x{self.num_gpus}" if self.num_gpus and self.num_gpus > 1 else ""
        fixed = ""
        if self.overhead_time_s and self.step_time_s:
            fixed = (f"; the engine's fixed costs per step, layer and weight matmul take "
                     f"{self.overhead_time_s / self.step_time_s:.0%} of it, in no group")
        return (f"{self.op} share of a decode step of {self.model} on {self.gpu}{gpus}, "
                f"batch {self.batch}, context {self.context:,}, "
                f"step_cost with the {self.engine} profile{fixed}")

    def explain_steps(self) -> tuple[Step, ...]:
        """P as --explain gives it: as given, or the part's time ÷ the step's (step_cost),
        with the engine's fixed costs' share of that step the text names."""
        if self.part_time_s is None or self.step_time_s is None:
            return (step("the part's share", "as given",
                         q("P", share_shown(self.fraction), "", "--fraction")),)
        from ridgeline.capacity import SERVING_ENGINES, pool_at_context_note

        part = " + ".join(self.ops)
        part = f"({part})" if len(self.ops) > 1 else part
        pool = (q("KV pool", f"batch {self.batch:,} at context {self.context:,}", "",
                  f"checked against {self.engine}'s KV pool: "
                  + pool_at_context_note(self.engine)),) if self.engine in SERVING_ENGINES \
            else ()
        # a digit more in the times than in P (shown to 4), so that their division gives P as
        # shown: the text shows the times to 5 significant digits, the JSON has them whole
        out = [step("the part's share", f"P = time in {part} ÷ decode step time (step_cost)",
                    q("P", share_shown(self.fraction)),
                    q(f"time in {part}", self.part_time_s * 1e3, "ms", digits=5),
                    q("decode step time", self.step_time_s * 1e3, "ms", digits=5), *pool)]
        if self.overhead_time_s and self.step_time_s:
            out.append(step("the engine's fixed costs' share", "fixed costs (per step, layer "
                            "and weight matmul: in no operator group) ÷ decode step time",
                            q("share", self.overhead_time_s / self.step_time_s),
                            q("fixed costs", self.overhead_time_s * 1e3, "ms"),
                            q("decode step time", self.step_time_s * 1e3, "ms")))
        return tuple(out)

    def explain_lines(self) -> list[str]:
        if self.part_time_s is None or self.step_time_s is None:
            return [f"P = {_p_text(self.fraction)}, as given"]
        from ridgeline.capacity import SERVING_ENGINES, pool_at_context_note

        pool = [f"batch {self.batch:,} at context {self.context:,} checked against "
                f"{self.engine}'s KV pool: "
                + pool_at_context_note(self.engine)] if self.engine in SERVING_ENGINES else []
        part = " + ".join(self.ops)
        part = f"({part})" if len(self.ops) > 1 else part
        return [f"P = time in {part} / decode step time (step_cost)",
                # a digit more in the times than in P, so that their division gives P as shown
                f"  = {self.part_time_s * 1e3:.5g} ms / {self.step_time_s * 1e3:.5g} ms"
                f" = {truthful(self.fraction, (0.0, 1.0), 'g', 4)}", *pool]


@dataclass(frozen=True)
class EndToEndSpeedup:
    """A part at `fraction` of the time, sped up `part_speedup` times."""

    fraction: float
    part_speedup: float
    new_time_fraction: float  # (1 - P) + P / S, of the old step time
    end_to_end_speedup: float

    def explain_steps(self) -> tuple[Step, ...]:
        p, s = share_shown(self.fraction), explained(self.part_speedup, (1.0,))
        new = explained(self.new_time_fraction, (1.0,))  # 1: the old step's time
        return (step("new step time", "(1 − P) + P ÷ S, of the old step time",
                     q("new step time", new, "of the old"),
                     q("P", p, "", "the part's share"), q("S", s, "x", "--speedup")),
                step("end-to-end speedup", "1 ÷ new step time",
                     q("end to end", explained(self.end_to_end_speedup, (1.0,)), "x"),
                     q("new step time", new, "of the old")))

    def explain_lines(self) -> list[str]:
        # P, S and the results on their side of 0, 1 and 1x, as explain_steps shows them
        p, s = _p_text(self.fraction), truthful(self.part_speedup, (1.0,), "g", 6)
        return [
            "end-to-end speedup = 1 / ((1 - P) + P / S)",
            f"  P = {p} (fraction of the time in the part), S = {s} (its speedup)",
            f"  = 1 / ({1 - self.fraction:g} + {p} / {s})",
            f"  = 1 / {truthful(self.new_time_fraction, (1.0,), 'g', 4)} = "
            f"{truthful(self.end_to_end_speedup, (1.0,), 'f', 2)}x",
        ]


@dataclass(frozen=True)
class SpeedupCeiling:
    """The most a part at `fraction` of the time can give, if it became free."""

    fraction: float
    ceiling_speedup: float  # inf when fraction == 1

    def explain_steps(self, target: float | None = None) -> tuple[Step, ...]:
        """The ceiling's working, on its side of 1x and of ``target`` (--target) as the text
        prints it."""
        p = share_shown(self.fraction)
        if math.isinf(self.ceiling_speedup):
            return (step("ceiling", "1 ÷ (1 − P): the part is the whole step, so making it "
                         "free has no limit", q("ceiling", "unbounded"), q("P", p)),)
        marks = (1.0,) if target is None else (1.0, target)
        return (step("ceiling", "1 ÷ (1 − P) (the part takes no time at all)",
                     q("ceiling", explained(self.ceiling_speedup, marks), "x"), q("P", p)),)

    def explain_lines(self) -> list[str]:
        p = _p_text(self.fraction)
        if math.isinf(self.ceiling_speedup):
            return [
                "ceiling = 1 / (1 - P)",
                f"  P = {p}: the part is the whole step, so making it free has no limit",
            ]
        return [
            "ceiling = 1 / (1 - P)   (the part takes no time at all)",
            f"  = 1 / (1 - {p}) = 1 / {1 - self.fraction:g} = "
            f"{truthful(self.ceiling_speedup, (1.0,), 'f', 2)}x",
        ]


@dataclass(frozen=True)
class RequiredPartSpeedup:
    """The part speedup S that gives `target_speedup` end to end, if any does."""

    fraction: float
    target_speedup: float
    ceiling_speedup: float
    possible: bool
    required_part_speedup: float | None  # None when no finite S reaches the target
    verdict: str

    def explain_steps(self) -> tuple[Step, ...]:
        # each figure on its side of 1x, the ceiling and the target, as the verdict prints it
        p, g = share_shown(self.fraction), self.target_speedup
        target = q("G", explained(g, (1.0, self.ceiling_speedup)), "x", "--target")
        if not self.possible or self.required_part_speedup is None:
            ceiling = q("ceiling", "unbounded") if math.isinf(self.ceiling_speedup) \
                else q("ceiling", explained(self.ceiling_speedup, (1.0, g)), "x", "1 ÷ (1 − P)")
            return (step("part speedup for the target", "none where G ≥ the ceiling 1 ÷ (1 − P)"
                         " (or the part takes no time)", q("S", "none", "", self.verdict),
                         q("P", p), target, ceiling),)
        return (step("part speedup for the target", "S = P ÷ (1/G − (1 − P)) (Amdahl solved "
                     "for S)", q("S", explained(self.required_part_speedup, (1.0,)), "x",
                                 self.verdict),
                     q("P", p), target),)

    def explain_lines(self) -> list[str]:
        # P, G, the ceiling and S on their side of 0, 1x, each other, as the verdict is
        f, g = self.fraction, self.target_speedup
        p, shown_g = _p_text(f), truthful(g, (1.0, self.ceiling_speedup), "g", 6)
        if not self.possible or self.required_part_speedup is None:
            return [
                "ceiling = 1 / (1 - P)",
                f"  = 1 / (1 - {p}) = {truthful(self.ceiling_speedup, (1.0, g), 'g', 4)}x",
                f"  target {shown_g}x >= ceiling: {self.verdict}",
            ]
        return [
            "S = P / (1/G - (1 - P))   (Amdahl solved for S)",
            f"  P = {p}, G = {shown_g} (target end-to-end speedup)",
            f"  = {p} / ({1 / g:.4g} - {1 - f:g})",
            f"  = {p} / {1 / g - (1 - f):.4g} = "
            f"{truthful(self.required_part_speedup, (1.0,), 'g', 3)}x",
        ]


def end_to_end_speedup(fraction: float, part_speedup: float) -> EndToEndSpeedup:
    """Speedup of the whole step when a part at `fraction` of the time gets `part_speedup`.

    speedup = 1 / ((1 - P) + P / S)
    Example: a 2x attention kernel at 18% of the time: 1 / (0.82 + 0.09) = 1.10x;
    at 85% of the time: 1 / (0.15 + 0.425) = 1.74x.
    """
    _check_fraction(fraction)
    check_speedup("part_speedup", part_speedup)
    new_time_fraction = (1.0 - fraction) + fraction / part_speedup
    return EndToEndSpeedup(
        fraction=fraction,
        part_speedup=part_speedup,
        new_time_fraction=new_time_fraction,
        end_to_end_speedup=1.0 / new_time_fraction,
    )


def speedup_ceiling(fraction: float) -> SpeedupCeiling:
    """The end-to-end speedup if the part took no time at all (S -> infinity).

    ceiling = 1 / (1 - P), infinite when P = 1.
    Example: P = 0.18 gives 1 / 0.82 = 1.22x; P = 0.85 gives 1 / 0.15 = 6.67x.
    """
    _check_fraction(fraction)
    ceiling = math.inf if fraction == 1.0 else 1.0 / (1.0 - fraction)
    return SpeedupCeiling(fraction=fraction, ceiling_speedup=ceiling)


def required_part_speedup(fraction: float, target_speedup: float) -> RequiredPartSpeedup:
    """The speedup S the part needs for an end-to-end speedup G, or why none will do.

    S = P / (1/G - (1 - P)); impossible when G >= 1 / (1 - P), the ceiling.
    Example: P = 0.85, G = 1.5: S = 0.85 / (0.6667 - 0.15) = 1.65x.
    A target below 1 is a slowdown budget: S < 1 says how much slower the part may get.
    """
    _check_fraction(fraction)
    check_speedup("target_speedup", target_speedup)
    ceiling = speedup_ceiling(fraction).ceiling_speedup
    if fraction == 0.0:
        # The part takes no time: no S changes anything, so only G = 1 is "reached".
        reachable = target_speedup == 1.0
        return RequiredPartSpeedup(
            fraction=fraction,
            target_speedup=target_speedup,
            ceiling_speedup=ceiling,
            possible=reachable,
            required_part_speedup=1.0 if reachable else None,
            verdict=(
                "no speedup needed: the part takes no time"
                if reachable
                else "impossible: the part takes no time, so the step time cannot change"
            ),
        )
    if target_speedup >= ceiling:
        return RequiredPartSpeedup(
            fraction=fraction,
            target_speedup=target_speedup,
            ceiling_speedup=ceiling,
            possible=False,
            required_part_speedup=None,
            verdict=f"impossible: the ceiling is "
                    f"{truthful(ceiling, (1.0, target_speedup), 'f', 2)}x even if the part "
                    "became free",
        )
    # G = 1 asks for no change: S = P / (1 − (1 − P)) is 1, which floating point misses
    # (1 − (1 − 0.3) = 0.30000000000000004 read "may get up to 1x slower")
    needed = 1.0 if target_speedup == 1.0 else \
        fraction / (1.0 / target_speedup - (1.0 - fraction))
    return RequiredPartSpeedup(
        fraction=fraction,
        target_speedup=target_speedup,
        ceiling_speedup=ceiling,
        possible=True,
        required_part_speedup=needed,
        verdict=(f"the part must get {truthful(needed, (1.0,))}x faster" if needed > 1.0 else
                 "the part may stay as it is" if needed == 1.0 else
                 f"a slowdown budget: the part may get up to {truthful(1.0 / needed, (1.0,))}x "
                 "slower"),
    )


def slower_words(speedup: float) -> str:
    """A speedup below 1 as the slowdown it is, for a line that prints it as "0.5x": " (2x
    slower)"; else "". A slower part is a fair question (a dequantizing kernel, PCIe in place
    of NVLink): Amdahl's division holds for S < 1, and its end-to-end figure is a slowdown
    too, 0.5x on half the step giving 0.67x, 1.5x slower."""
    if speedup >= 1.0:
        return ""
    return f" ({truthful(1.0 / speedup, (1.0,))}x slower)"


def truthful(x: float, marks: tuple[float, ...], kind: str = "g", digits: int = 3) -> str:
    """``x`` to ``digits`` digits (significant for kind "g", decimals for "f"), more where
    fewer would print it on, or past, one of ``marks`` it is not (a speedup's 1, a ceiling, a
    target); where no decimals do, significant digits (a 1e-298 % share): a part that must get
    1.0000000002x faster reads so, not "1x faster"; 1.65 reads "1.65". From 1,000 up, whole
    with separators where that keeps its sides ("g": rounded to its digits first): a
    99.9999 % share's ceiling reads 1,000,000, not 1000000.00 or 1e+06; a 1,999,999,999x
    slowdown budget to 3 digits 2,000,000,000. A figure and a mark that would print alike
    take more digits: a ceiling of 999,999.99997 beside a target of 1,000,000.3 reads
    999,999.99997 (their sides kept and told apart); from 1,000 up, with separators."""
    def whole(v: float) -> str:
        return f"{float(f'{v:.{digits}g}') if kind == 'g' else v:,.0f}"

    if math.isfinite(x) and abs(x) >= 1000 and _kept(whole, x, marks):
        return whole(x)
    for form in dict.fromkeys((kind, "g")):
        for shown in range(digits if form == kind else 3, 18):
            def text(v: float, spec: str = f",.{shown}{form}") -> str:
                return format(v, spec)
            if _kept(text, x, marks):
                return text(x)
    return repr(x)


def _kept(shown: Callable[[float], str], x: float, marks: tuple[float, ...]) -> bool:
    """Whether ``x`` printed by ``shown`` stays on its side of each mark and reads apart from
    the mark printed alike (a target of 1,000,000.3 and a ceiling of 999,999.99997 both
    whole would read 1,000,000 twice, each on its right side)."""
    text = shown(x)
    value = float(text.replace(",", ""))
    return all(_side(value, m) == _side(x, m) and (m == x or shown(m) != text)
               for m in marks)


def explained(x: float, marks: tuple[float, ...]) -> float | str:
    """``x`` as --explain shows it: the number, in explain's own digits, where they keep it on
    its side of each of ``marks`` (1x, the ceiling, the target) as the verdict keeps it; else
    truthful's digits, as text: a target of 1.0000000001 shows so, not as "G = 1 x", and the
    S it needs as 1.0000000002, not 1 (the JSON's results carry both whole)."""
    shown = float(shown_number(x).replace(",", ""))
    if all(_side(shown, m) == _side(x, m) for m in marks):
        return x
    return truthful(x, marks, "g", 4)


def share_shown(fraction: float) -> float | str:
    """P as --explain shows it: off 0 and 1 where it is off them (0.9999999999 is not 1),
    as the text's percentage is off 0 % and 100 %."""
    return explained(fraction, (0.0, 1.0))


def _p_text(fraction: float) -> str:
    """P in explain_lines' text: six significant digits, more off 0 and 1 (share_shown's)."""
    return truthful(fraction, (0.0, 1.0), "g", 6)


def _side(x: float, mark: float) -> int:
    return (x > mark) - (x < mark)


def explain_lines(
    result: EndToEndSpeedup | SpeedupCeiling | RequiredPartSpeedup,
) -> list[str]:
    """The formula behind `result` with its numbers substituted, one line per step."""
    return result.explain_lines()


def _check_fraction(fraction: float) -> None:
    if not (0.0 <= fraction <= 1.0):  # also rejects NaN
        raise InputError(
            f"fraction must be between 0 and 1 (the share of time in the part), got {fraction!r}"
        )


# A part or a step a billion times slower is the least speedup read: below it 1/S and P/S
# overflow (1e-320 gives 1/G = inf, a required S of 0 and a division by zero)
MIN_SPEEDUP = 1e-9


def check_speedup(name: str, value: float) -> float:
    """A speedup (of the part, or the target end to end): positive, finite, at least
    MIN_SPEEDUP; ``name`` is what the message calls it (a flag at the CLI)."""
    if not (value > 0.0) or math.isinf(value):  # also rejects NaN
        raise InputError(f"{name} must be a positive finite number, got {value!r}")
    if value < MIN_SPEEDUP:
        raise InputError(f"{name} must be at least {MIN_SPEEDUP:g} (a billionfold slowdown), "
                         f"got {value:g}")
    return value
