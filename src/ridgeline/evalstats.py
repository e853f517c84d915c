"""Can a benchmark resolve the difference it reports?

A score is a count of items out of N.  These functions recover that count from a printed
percentage, put an interval around it, test a gap between two models (unpaired, or paired
on the same items with McNemar's exact test), and size a benchmark that could detect a gap.
Standard library only: the normal quantile is found by bisection on math.erfc.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from ridgeline.errors import InputError


def confidence_percent(alpha: float) -> str:
    """The level 1 − alpha as a percentage, to six figures where they say it (0.05: "95",
    1/3: "66.6667"), else to every digit alpha was given in (1e-7: "99.99999", not the
    "100" six figures round it to, an interval no finite sample gives)."""
    text = f"{(1 - alpha) * 100:.6g}"
    if float(text) < 100:
        return text
    exact = Decimal(100) - Decimal(repr(alpha)) * 100
    return format(exact.normalize(), "f")


def overlapping_intervals_note(alpha: float = 0.05) -> str:
    """Why overlapping intervals at level 1 − alpha settle nothing, at the level asked."""
    return OVERLAPPING_INTERVALS_NOTE.replace("95%", f"{confidence_percent(alpha)}%").replace(
        "at 0.05", f"at {alpha:g}")


OVERLAPPING_INTERVALS_NOTE = (
    "Overlapping confidence intervals do not mean 'no difference'. Two 95% intervals can "
    "overlap while the difference between the scores is significant at 0.05: the interval "
    "of a difference is narrower than the two intervals laid end to end (its standard error "
    "is √(se_a² + se_b²), not se_a + se_b). And when both models ran on the same items, "
    "neither the intervals nor the unpaired test use that pairing; McNemar's test on the "
    "items where the models disagree does, and is usually far more sensitive."
)


def normal_quantile(probability: float) -> float:
    """The z with Phi(z) = probability, for the standard normal CDF Phi.

    Phi(z) = erfc(-z / sqrt(2)) / 2, inverted by bisection to double precision.
    Example: normal_quantile(0.975) = 1.959964 (the z of a two-sided 95% interval).
    """
    _check_open_unit("probability", probability)
    low, high = -40.0, 40.0  # Phi(-40) underflows to 0, so this brackets every answer
    while True:
        mid = (low + high) / 2.0
        if mid in (low, high):
            return mid
        if 0.5 * math.erfc(-mid / math.sqrt(2.0)) < probability:
            low = mid
        else:
            high = mid


@dataclass(frozen=True)
class PercentageCount:
    """The whole number of items behind a printed percentage of `num_items`."""

    percent: float
    decimals: int  # digits printed after the decimal point
    num_items: int
    nearest_count: int
    nearest_count_percent: float
    difference_points: float  # |nearest_count_percent - percent|
    rounding_tolerance_points: float  # 0.5 * 10^-decimals
    is_whole_count: bool
    consistent_count_low: int | None  # every count in [low, high] prints as `percent`
    consistent_count_high: int | None

    @property
    def printed_percent(self) -> str:
        """The percentage with the digits it was given with: "40" stays "40", "40.0" stays
        "40.0" and "39.02" stays "39.02"; a `decimals` that drops digits gives the value."""
        text = f"{self.percent:.{self.decimals}f}"
        return text if float(text) == self.percent else f"{self.percent:g}"

    def explain_lines(self) -> list[str]:
        p, n, k = self.percent, self.num_items, self.nearest_count
        verdict = (
            f"within the printed rounding of ±{self.rounding_tolerance_points:g} points"
            if self.is_whole_count
            else f"off by more than the printed rounding of ±{self.rounding_tolerance_points:g}"
            " points: no whole number of items gives this percentage"
        )
        return [
            "count = percent × N / 100",
            f"  = {p:g} × {n:,} / 100 = {p * n / 100:.4g} -> nearest whole count {k:,}",
            f"check: {k:,} / {n:,} = {self.nearest_count_percent:.{self.decimals + 2}f}%,"
            f" {self.difference_points:.2g} points from {p:g}%",
            f"  {verdict}",
        ]


def count_from_percentage(
    percent: float | str, num_items: int, decimals: int | None = None
) -> PercentageCount:
    """Recover the item count behind `percent` of `num_items`, and flag impossible ones.

    count = round(percent x N / 100); the percentage is consistent when
    |100 x count / N - percent| <= 0.5 x 10^-decimals (the rounding of the printed digits).
    Example: 39.02% of 164 is 64 items (64 / 164 = 39.024%).
    `decimals` defaults to the digits in `percent` as written ("39.0" has one).
    """
    printed_decimals, value = _parse_percent(percent)
    _check_count("num_items", num_items, minimum=1)
    if decimals is None:
        decimals = printed_decimals
    elif not isinstance(decimals, int) or isinstance(decimals, bool) or decimals < 0:
        raise InputError(f"decimals must be a whole number >= 0, got {decimals!r}")
    tolerance = 0.5 * 10.0**-decimals
    slack = 1e-9 * max(1.0, value)  # float noise in the boundary case of an exact half
    nearest = min(num_items, max(0, round(value * num_items / 100.0)))
    nearest_percent = 100.0 * nearest / num_items
    low = max(0, math.ceil((value - tolerance - slack) * num_items / 100.0))
    high = min(num_items, math.floor((value + tolerance + slack) * num_items / 100.0))
    whole = low <= high
    return PercentageCount(
        percent=value,
        decimals=decimals,
        num_items=num_items,
        nearest_count=nearest,
        nearest_count_percent=nearest_percent,
        difference_points=abs(nearest_percent - value),
        rounding_tolerance_points=tolerance,
        is_whole_count=whole,
        consistent_count_low=low if whole else None,
        consistent_count_high=high if whole else None,
    )


@dataclass(frozen=True)
class WilsonInterval:
    """Wilson score interval for `successes` out of `num_items`."""

    successes: int
    num_items: int
    confidence: float
    z: float
    proportion: float
    center: float
    half_width: float
    low: float
    high: float

    def explain_lines(self) -> list[str]:
        n, z, p = self.num_items, self.z, self.proportion
        return [
            f"p = {self.successes:,} / {n:,} = {p:.4f}, z = {z:.4f} for {self.confidence:g} confidence",
            "center = (p + z² / 2n) / (1 + z² / n)",
            f"  = ({p:.4f} + {z * z / (2 * n):.5f}) / {1 + z * z / n:.5f} = {self.center:.4f}",
            "half width = z / (1 + z² / n) × √(p(1 - p) / n + z² / 4n²)",
            f"  = {z / (1 + z * z / n):.4f}"
            f" × √({p * (1 - p) / n:.6f} + {z * z / (4 * n * n):.6f}) = {self.half_width:.4f}",
            f"interval = {self.center:.4f} ± {self.half_width:.4f}"
            f" = [{self.low:.4f}, {self.high:.4f}]",
        ]


def wilson_interval(successes: int, num_items: int, confidence: float = 0.95) -> WilsonInterval:
    """Wilson score interval for a proportion; unlike p +/- z*se it stays inside [0, 1].

    center = (p + z^2/2n) / (1 + z^2/n); half = z / (1 + z^2/n) * sqrt(p(1-p)/n + z^2/4n^2)
    Example: 64 of 164 at 95% is 39.0% in [31.9%, 46.7%].
    Source: E. B. Wilson, JASA 22 (1927) 209-212.
    """
    _check_successes(successes, num_items)
    _check_open_unit("confidence", confidence)
    z = normal_quantile(1.0 - (1.0 - confidence) / 2.0)
    n = num_items
    p = successes / n
    shrink = 1.0 + z * z / n
    center = (p + z * z / (2 * n)) / shrink
    half = z / shrink * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return WilsonInterval(
        successes=successes,
        num_items=n,
        confidence=confidence,
        z=z,
        proportion=p,
        center=center,
        half_width=half,
        # At 0 or n successes the bound is exactly 0 or 1; the subtraction leaves float noise.
        low=0.0 if successes == 0 else max(0.0, center - half),
        high=1.0 if successes == n else min(1.0, center + half),
    )


@dataclass(frozen=True)
class TwoProportionZTest:
    """Pooled z-test of two scores measured on independent item sets."""

    successes_a: int
    num_items_a: int
    successes_b: int
    num_items_b: int
    proportion_a: float
    proportion_b: float
    pooled_proportion: float
    standard_error: float
    z: float
    p_value: float
    alpha: float
    significant: bool

    def explain_lines(self) -> list[str]:
        pa, pb, pp = self.proportion_a, self.proportion_b, self.pooled_proportion
        na, nb = self.num_items_a, self.num_items_b
        return [
            f"p_a = {self.successes_a:,} / {na:,} = {pa:.4f},"
            f" p_b = {self.successes_b:,} / {nb:,} = {pb:.4f}",
            f"pooled p = ({self.successes_a:,} + {self.successes_b:,}) / ({na:,} + {nb:,})"
            f" = {pp:.4f}",
            "se = √(p(1 - p)(1/n_a + 1/n_b))",
            f"  = √({pp:.4f} × {1 - pp:.4f} × {1 / na + 1 / nb:.5f})"
            f" = {self.standard_error:.4f}",
            f"z = (p_a - p_b) / se = {pa - pb:.4f} / {self.standard_error:.4f} = {self.z:.3f}",
            f"two-sided p = erfc(|z| / √2) {format_p(self.p_value, 3)}"
            f" ({_against_alpha(self.significant, self.alpha)})",
        ]


def two_proportion_z_test(
    successes_a: int,
    num_items_a: int,
    successes_b: int,
    num_items_b: int,
    alpha: float = 0.05,
) -> TwoProportionZTest:
    """Unpaired pooled two-proportion z-test with a two-sided p-value.

    z = (p_a - p_b) / sqrt(p(1-p)(1/n_a + 1/n_b)), p pooled; p-value = erfc(|z| / sqrt 2).
    Example: 77/164 vs 64/164 (47.0% vs 39.0%): z = 1.45, p = 0.147, not significant.
    """
    _check_successes(successes_a, num_items_a, "successes_a", "num_items_a")
    _check_successes(successes_b, num_items_b, "successes_b", "num_items_b")
    _check_open_unit("alpha", alpha)
    pa, pb = successes_a / num_items_a, successes_b / num_items_b
    pooled = (successes_a + successes_b) / (num_items_a + num_items_b)
    se = math.sqrt(pooled * (1 - pooled) * (1 / num_items_a + 1 / num_items_b))
    z = 0.0 if se == 0.0 else (pa - pb) / se  # se = 0 only when both scores are 0 or 100%
    p_value = math.erfc(abs(z) / math.sqrt(2.0))
    return TwoProportionZTest(
        successes_a=successes_a,
        num_items_a=num_items_a,
        successes_b=successes_b,
        num_items_b=num_items_b,
        proportion_a=pa,
        proportion_b=pb,
        pooled_proportion=pooled,
        standard_error=se,
        z=z,
        p_value=p_value,
        alpha=alpha,
        significant=p_value < alpha,
    )


@dataclass(frozen=True)
class McNemarExact:
    """Exact McNemar test on the items where two models disagree."""

    b: int  # items model A got right and model B got wrong
    c: int  # items model B got right and model A got wrong
    discordant_items: int  # b + c
    net_gap_items: int  # b - c
    p_value: float
    alpha: float
    significant: bool

    def explain_lines(self) -> list[str]:
        n, k = self.discordant_items, min(self.b, self.c)
        lines = [
            f"discordant items n = b + c = {self.b:,} + {self.c:,} = {n:,};"
            f" net gap b - c = {self.net_gap_items:,}",
            "p = min(1, 2 × P[X <= min(b, c)]), X ~ Binomial(n, 1/2)",
        ]
        if n > EXACT_INTEGER_ITEMS:  # the float sum the test itself used
            lines.append(f"  = 2 × {_half_binomial_tail_float(n, k):.4g} (summed in floats past "
                         f"{EXACT_INTEGER_ITEMS:,} items): p {format_p(self.p_value)}")
        else:
            tail = _half_binomial_tail_count(n, k)
            if n <= 40:  # small enough to show as one division of whole numbers
                terms = (
                    " + ".join(f"C({n},{i})" for i in range(k + 1))
                    if k <= 3
                    else f"C({n},0) + ... + C({n},{k})"
                )
                lines.append(
                    f"  = 2 × ({terms}) / 2^{n} = 2 × {tail} / {2**n} = {self.p_value:.3g}")
            else:
                lines.append(f"  = 2 × {tail / 2**n:.4g}: p {format_p(self.p_value)}")
        lines.append(f"  {_against_alpha(self.significant, self.alpha)}")
        return lines


EXACT_INTEGER_ITEMS = 100_000  # up to here the tail is summed in exact integers (~1 s)
MAX_DISCORDANT = 10**12  # past it no benchmark has items; the float sum takes seconds


def mcnemar_exact(
    b: int, c: int, alpha: float = 0.05, num_items: int | None = None
) -> McNemarExact:
    """Exact McNemar test: two-sided binomial test with p = 1/2 on the b + c discordant items.

    p = min(1, 2 x P[X <= min(b, c)]), X ~ Binomial(b + c, 1/2).
    Example: the same net gap of 13 items: b=15, c=2 gives p = 0.0023 (significant at 0.05);
    b=30, c=17 gives p = 0.079 (not).  With `num_items`, b + c must fit in the benchmark.
    """
    _check_count("b", b)
    _check_count("c", c)
    _check_open_unit("alpha", alpha)
    n = b + c
    if n > MAX_DISCORDANT:
        raise InputError(f"b + c = {n:,} discordant items: more than any benchmark holds "
                         f"(at most {MAX_DISCORDANT:.0e})")
    if num_items is not None:
        _check_count("num_items", num_items, minimum=1)
        if n > num_items:
            raise InputError(
                f"b + c = {b:,} + {c:,} = {n:,} discordant items cannot exceed the {num_items:,}"
                " items in the benchmark"
            )
    if n <= EXACT_INTEGER_ITEMS:
        tail = _half_binomial_tail_count(n, min(b, c))
        p_value = min(1.0, 2 * tail / 2**n)  # exact integers; one rounding at the division
    else:
        p_value = min(1.0, 2 * _half_binomial_tail_float(n, min(b, c)))
    return McNemarExact(
        b=b,
        c=c,
        discordant_items=n,
        net_gap_items=b - c,
        p_value=p_value,
        alpha=alpha,
        significant=p_value < alpha,
    )


def discordant_conflicts(
    count_a: PercentageCount, count_b: PercentageCount, b: int, c: int
) -> list[str]:
    """Ways the discordant counts b, c contradict the two scores on the same N items.

    On shared items, A's count - B's count = b - c exactly (both-right items cancel);
    A got at least b items right and at least c wrong (c <= N - count_A), B at least c right
    and b wrong (b <= N - count_B).  Each count may be anything that prints as its
    percentage.  Example: 40% vs 50% of 100 is a gap of -10 items, but b=15, c=5 say +10;
    90% vs 95% of 100 leave A 10 wrong items and B 5, so b=40, c=45 cannot be.
    """
    if count_a.num_items != count_b.num_items:
        raise InputError("both scores must be out of the same items to compare with b and c")
    n = count_a.num_items
    low_a, high_a = _count_range(count_a)
    low_b, high_b = _count_range(count_b)
    out: list[str] = []
    gap_low, gap_high = low_a - high_b, high_a - low_b
    if not gap_low <= b - c <= gap_high:
        scores = f"{count_a.printed_percent}% vs {count_b.printed_percent}% of {n:,}"
        gap = f"{gap_low:+,d}" if gap_low == gap_high else f"{gap_low:+,d} to {gap_high:+,d}"
        ahead = {True: "A ahead", False: "B ahead"}
        side = (
            f" ({ahead[b > c]} by the discordant items, {ahead[gap_high > 0]} by the scores)"
            if b != c and gap_low * gap_high > 0 and (b > c) != (gap_high > 0)
            else ""
        )
        out.append(
            f"b - c = {b:,} - {c:,} = {b - c:+,d} items, but the scores ({scores}) give A - B ="
            f" {gap} items{side}; on the same items the two must agree"
        )
    if b > high_a:
        out.append(f"b = {b:,} items only A got right, but A's {count_a.printed_percent}% of "
                   f"{n:,} is at most {high_a:,} items")
    if c > high_b:
        out.append(f"c = {c:,} items only B got right, but B's {count_b.printed_percent}% of "
                   f"{n:,} is at most {high_b:,} items")
    # the other side of each: an item only B got right is one A got wrong, and A got at
    # most N - (its lowest count) wrong
    if c > n - low_a:
        out.append(f"c = {c:,} items only B got right, but A's {count_a.printed_percent}% of "
                   f"{n:,} leaves at most {n - low_a:,} items A got wrong")
    if b > n - low_b:
        out.append(f"b = {b:,} items only A got right, but B's {count_b.printed_percent}% of "
                   f"{n:,} leaves at most {n - low_b:,} items B got wrong")
    return out


def _count_range(count: PercentageCount) -> tuple[int, int]:
    """Counts that print as the percentage; the nearest one when none does."""
    if count.consistent_count_low is None or count.consistent_count_high is None:
        return count.nearest_count, count.nearest_count
    return count.consistent_count_low, count.consistent_count_high


@dataclass(frozen=True)
class UnpairedItemsNeeded:
    """Items per model to detect p_a vs p_b with independent item sets."""

    proportion_a: float
    proportion_b: float
    alpha: float
    power: float
    z_alpha: float  # z_{1 - alpha/2}
    z_beta: float  # z_{power}
    exact_items: float
    num_items: int  # exact_items rounded up

    def explain_lines(self) -> list[str]:
        pa, pb = self.proportion_a, self.proportion_b
        pbar = (pa + pb) / 2
        return [
            "n = (z_a √(2 pbar (1 - pbar)) + z_b √(p_a(1 - p_a) + p_b(1 - p_b)))²"
            " / (p_a - p_b)²",
            f"  z_a = {self.z_alpha:.4f} (alpha {self.alpha:g}, two-sided),"
            f" z_b = {self.z_beta:.4f} (power {self.power:g}), pbar = {pbar:.4f}",
            f"  = ({self.z_alpha:.4f} × {math.sqrt(2 * pbar * (1 - pbar)):.4f}"
            f" + {self.z_beta:.4f} × {math.sqrt(pa * (1 - pa) + pb * (1 - pb)):.4f})²"
            f" / {(pa - pb) ** 2:.6f}",
            f"  = {self.exact_items:,.1f} -> {self.num_items:,} items",
        ]


def items_needed_unpaired(
    proportion_a: float, proportion_b: float, alpha: float = 0.05, power: float = 0.8
) -> UnpairedItemsNeeded:
    """Items per model for a two-sided unpaired test to detect p_a vs p_b.

    n = (z_{1-a/2} sqrt(2 pbar qbar) + z_{1-b} sqrt(p_a q_a + p_b q_b))^2 / (p_a - p_b)^2,
    pbar = (p_a + p_b)/2, no continuity correction (Fleiss, Statistical Methods for Rates
    and Proportions, 1981, sec. 3.2).  Example: 39% vs 47% at alpha 0.05, power 0.8: 600.
    """
    _check_proportions(proportion_a, proportion_b)
    if proportion_a == proportion_b:
        raise InputError("proportion_a and proportion_b are equal: no gap to detect")
    z_alpha, z_beta = _power_quantiles(alpha, power)
    pa, pb = proportion_a, proportion_b
    pbar = (pa + pb) / 2
    root = z_alpha * math.sqrt(2 * pbar * (1 - pbar)) + z_beta * math.sqrt(
        pa * (1 - pa) + pb * (1 - pb)
    )
    exact = root * root / (pa - pb) ** 2
    return UnpairedItemsNeeded(pa, pb, alpha, power, z_alpha, z_beta, exact, math.ceil(exact))


@dataclass(frozen=True)
class PairedItemsNeeded:
    """Items to detect an accuracy gap when both models answer the same items."""

    gap: float  # p_10 - p_01, the accuracy difference
    discordance: float  # p_10 + p_01, the share of items the models disagree on
    alpha: float
    power: float
    z_alpha: float
    z_beta: float
    exact_items: float
    num_items: int

    def explain_lines(self) -> list[str]:
        d, psi = self.gap, self.discordance
        return [
            "n = (z_a √(psi) + z_b √(psi - d²))² / d²   (Connor 1987)",
            f"  d = {d:g} (gap), psi = {psi:g} (discordance), z_a = {self.z_alpha:.4f},"
            f" z_b = {self.z_beta:.4f}",
            f"  = ({self.z_alpha:.4f} × {math.sqrt(psi):.4f} + {self.z_beta:.4f}"
            f" × {math.sqrt(psi - d * d):.4f})² / {d * d:.6f}",
            f"  = {self.exact_items:,.1f} -> {self.num_items:,} items",
        ]


def max_discordance(proportion_a: float, proportion_b: float) -> float:
    """The largest share of items two models with these scores can disagree on.

    psi = p_a + p_b - 2 p_11, and p_11 (both right) is at least p_a + p_b - 1 and at least 0,
    so psi <= min(p_a + p_b, 2 - p_a - p_b).
    Example: 90% and 95% both right on at least 85% of items: psi <= 0.15.
    """
    _check_proportions(proportion_a, proportion_b)
    return min(proportion_a + proportion_b, 2.0 - proportion_a - proportion_b)


def items_needed_paired(
    gap: float, discordance: float, alpha: float = 0.05, power: float = 0.8,
    proportions: tuple[float, float] | None = None,
) -> PairedItemsNeeded:
    """Items for McNemar's test to detect an accuracy gap d given discordance psi.

    n = (z_{1-a/2} sqrt(psi) + z_{1-b} sqrt(psi - d^2))^2 / d^2, with d = p_10 - p_01 and
    psi = p_10 + p_01 (R. J. Connor, Biometrics 43 (1987) 207-211).
    Example: gap 0.08, models disagree on 20% of items, alpha 0.05, power 0.8: 243 items.
    With the two scores as `proportions`, psi must also be one they allow (max_discordance).
    """
    if not (0.0 < abs(gap) <= 1.0):
        raise InputError(f"gap must be non-zero and between -1 and 1, got {gap!r}")
    if not (abs(gap) <= discordance <= 1.0):
        raise InputError(
            f"discordance must be between |gap| = {abs(gap):g} and 1 (the models disagree on"
            f" at least the items that make the gap), got {discordance!r}"
        )
    if proportions is not None:
        most = max_discordance(*proportions)
        if discordance > most + 1e-12:  # slack: 2 - 0.9 - 0.95 is 0.15 plus float noise
            pa, pb = proportions
            raise InputError(
                f"discordance {discordance:g} is impossible for scores of {100 * pa:.4g}% and"
                f" {100 * pb:.4g}%: they disagree on at most min(p_a + p_b, 2 - p_a - p_b) ="
                f" {most:.4g} of the items"
            )
    z_alpha, z_beta = _power_quantiles(alpha, power)
    root = z_alpha * math.sqrt(discordance) + z_beta * math.sqrt(discordance - gap * gap)
    exact = root * root / (gap * gap)
    return PairedItemsNeeded(
        gap, discordance, alpha, power, z_alpha, z_beta, exact, math.ceil(exact)
    )


EvalResult = (
    PercentageCount
    | WilsonInterval
    | TwoProportionZTest
    | McNemarExact
    | UnpairedItemsNeeded
    | PairedItemsNeeded
)


def explain_lines(result: EvalResult) -> list[str]:
    """The formula behind `result` with its numbers substituted, one line per step."""
    return result.explain_lines()


def _parse_percent(percent: float | str) -> tuple[int, float]:
    """(decimals printed, value) for a percentage given as a number or as printed text."""
    if isinstance(percent, str):
        text = percent.strip().removesuffix("%").strip()
    elif isinstance(percent, int) and not isinstance(percent, bool):
        text = str(percent)  # an int was printed with no decimals
    else:
        text = repr(float(percent))  # shortest repr: the digits as typed, e.g. 39.02
    try:
        exact = Decimal(text)
    except InvalidOperation:
        raise InputError(f"percent must be a number such as 39.02, got {percent!r}") from None
    if not exact.is_finite() or not (0 <= exact <= 100):
        raise InputError(f"percent must be between 0 and 100, got {percent!r}")
    exponent = exact.as_tuple().exponent
    assert isinstance(exponent, int)  # finite Decimals have an int exponent
    return max(0, -exponent), float(exact) + 0.0  # -0 reads as 0


def _half_binomial_tail_count(n: int, k: int) -> int:
    """C(n,0) + C(n,1) + ... + C(n,k): outcomes with X <= k out of the 2^n equally likely."""
    term, total = 1, 1
    for i in range(k):
        term = term * (n - i) // (i + 1)  # C(n, i+1) from C(n, i), exact
        total += term
    return total


def format_p(p: float, digits: int = 4) -> str:
    """"= 0.02537" (to ``digits`` significant digits), or "< 1e-300" for a p-value below what
    a float holds (not "= 0")."""
    return "< 1e-300" if p < 1e-300 else f"= {p:.{digits}g}"


def _half_binomial_tail_float(n: int, k: int) -> float:
    """P[X <= k], X ~ Binomial(n, 1/2), for k <= n/2, in floats: the terms from C(n, k)/2^n
    down, each the last × i/(n − i + 1), until they no longer move the sum (they fall
    geometrically below the mean, so a few √n of them at most)."""
    term = math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                    - n * math.log(2))
    total, i = term, k
    while i > 0 and term > total * 1e-17:
        term *= i / (n - i + 1)
        total += term
        i -= 1
    return total


def _check_count(name: str, value: int, minimum: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{name} must be a whole number >= {minimum}, got {value!r}")


def _check_successes(
    successes: int, num_items: int, name: str = "successes", total: str = "num_items"
) -> None:
    _check_count(total, num_items, minimum=1)
    _check_count(name, successes)
    if successes > num_items:
        raise InputError(f"{name} ({successes}) cannot exceed {total} ({num_items})")


def _check_open_unit(name: str, value: float) -> None:
    if not (0.0 < value < 1.0):  # also rejects NaN
        raise InputError(f"{name} must be strictly between 0 and 1, got {value!r}")


def _check_proportions(proportion_a: float, proportion_b: float) -> None:
    for name, value in (("proportion_a", proportion_a), ("proportion_b", proportion_b)):
        if not (0.0 <= value <= 1.0):
            raise InputError(f"{name} must be between 0 and 1, got {value!r}")


def _power_quantiles(alpha: float, power: float) -> tuple[float, float]:
    """(z_{1 - alpha/2}, z_{power}): the two z's of a two-sided test's sample size.
    Example: alpha 0.05, power 0.8 give 1.959964 and 0.841621."""
    _check_open_unit("alpha", alpha)
    _check_open_unit("power", power)
    return normal_quantile(1 - alpha / 2), normal_quantile(power)


def _against_alpha(significant: bool, alpha: float) -> str:
    """"< alpha 0.05" for a significant p-value, ">= alpha 0.05" for one that is not."""
    return f"{'<' if significant else '>='} alpha {alpha:g}"
