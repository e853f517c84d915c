"""Exact answers where the normal approximation behind evalstats' z-test and sizes fails.

The z-test and Fleiss's sample size treat each score as normal.  That holds while every
cell of the 2 × 2 table expects at least 5 items under "no difference" (Cochran's rule); at
0 % vs 100 % of 10 items the formula sizes a benchmark of 2 items per model, where Fisher's
exact test of 0/2 vs 2/2 gives p = 1/3.  Here: the rule, Fisher's exact test, its exact
power, and the smallest benchmark whose exact power reaches the power asked.
Two-sided throughout, as the rest of evalstats.  Standard library only.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from ridgeline.errors import InputError
from ridgeline.evalstats import (
    _against_alpha,
    _check_open_unit,
    _check_proportions,
    _check_successes,
    items_needed_unpaired,
)
from ridgeline.units import plural

MIN_EXPECTED_COUNT = 5.0  # Cochran's rule for the 2 × 2 table
TIE_TOLERANCE = 1 + 1e-7  # tables this close in probability count as equally likely (R's)
MAX_TABLES = 10**6  # tables one exact test may sum: a bound on its time (~1 s)
MAX_EXACT_ITEMS = 10_000  # Fleiss's size a model up to which the exact size is sought (~2 s)


def smallest_expected_count(num_items_a: int, num_items_b: int, pooled_proportion: float
                            ) -> float:
    """The fewest items any cell of the 2 × 2 table expects when both scores are equal.

    Expected right answers of a model = n × p, wrong = n × (1 − p), p pooled; the normal
    approximation wants each at least 5 (W. G. Cochran, Biometrics 10 (1954) 417-451).
    Example: 0/2 vs 2/2 pool to p = 1/2, so each cell expects 2 × 1/2 = 1 item: too few.
    """
    p = pooled_proportion
    return min(num_items_a, num_items_b) * min(p, 1.0 - p)


def normal_approximation_holds(num_items_a: int, num_items_b: int, pooled_proportion: float
                               ) -> bool:
    """Whether every expected cell count reaches MIN_EXPECTED_COUNT (Cochran's rule)."""
    return smallest_expected_count(num_items_a, num_items_b,
                                   pooled_proportion) >= MIN_EXPECTED_COUNT


@dataclass(frozen=True)
class FisherExactTest:
    """Fisher's exact test of two scores on independent item sets, two-sided."""

    successes_a: int
    num_items_a: int
    successes_b: int
    num_items_b: int
    observed_probability: float  # of this table, given the margins
    p_value: float
    alpha: float
    significant: bool

    def explain_lines(self) -> list[str]:
        k = self.successes_a + self.successes_b
        na, nb = self.num_items_a, self.num_items_b
        return [
            f"given {k:,} right of {na + nb:,}, A's count is hypergeometric:",
            f"  P(x) = C({k},x) C({na + nb - k},{na}-x) / C({na + nb},{na})",
            f"P(x = {self.successes_a:,}) = {self.observed_probability:.4g}; p = the sum of P(x)"
            " over every x no more likely than that",
            f"  = {self.p_value:.4g} ({_against_alpha(self.significant, self.alpha)})",
        ]


def _table_weights(successes_total: int, num_items_a: int, num_items_b: int
                   ) -> tuple[int, list[float]]:
    """(first x, weights): A's count x given `successes_total` right in all, hypergeometric,
    each weight P(x) / P(mode), built outward from the mode so none overflows:
    P(x + 1) / P(x) = (K − x)(n_a − x) / ((x + 1)(n_b − K + x + 1))."""
    k, na, nb = successes_total, num_items_a, num_items_b
    low, high = max(0, k - nb), min(k, na)
    if high - low + 1 > MAX_TABLES:
        raise InputError(f"{high - low + 1:,} tables: too many for Fisher's exact test "
                         f"(at most {MAX_TABLES:,}); the z-test holds at these counts")
    mode = min(high, max(low, (k + 1) * (na + 1) // (na + nb + 2)))
    weights = [0.0] * (high - low + 1)
    weights[mode - low] = 1.0
    for x in range(mode, high):
        weights[x + 1 - low] = weights[x - low] * (k - x) * (na - x) / (
            (x + 1) * (nb - k + x + 1))
    for x in range(mode, low, -1):  # P(x − 1) = P(x) / ratio(x − 1)
        weights[x - 1 - low] = weights[x - low] * x * (nb - k + x) / ((k - x + 1) * (na - x + 1))
    return low, weights


def fisher_exact_test(successes_a: int, num_items_a: int, successes_b: int, num_items_b: int,
                      alpha: float = 0.05) -> FisherExactTest:
    """Fisher's exact test, two-sided: with both margins fixed, A's count is hypergeometric,
    and p sums the probability of every table no more likely than the one observed (R. A.
    Fisher, Statistical Methods for Research Workers, 1934, §21.02; the two-sided rule and
    its 1e-7 tie tolerance are R's fisher.test).
    Example: 0/2 vs 2/2: the tables x = 0, 1, 2 have 1/6, 4/6, 1/6, so p = 1/3.
    """
    _check_successes(successes_a, num_items_a, "successes_a", "num_items_a")
    _check_successes(successes_b, num_items_b, "successes_b", "num_items_b")
    _check_open_unit("alpha", alpha)
    low, weights = _table_weights(successes_a + successes_b, num_items_a, num_items_b)
    total = math.fsum(weights)
    observed = weights[successes_a - low]
    p_value = min(1.0, math.fsum(w for w in weights if w <= observed * TIE_TOLERANCE) / total)
    return FisherExactTest(successes_a, num_items_a, successes_b, num_items_b,
                           observed / total, p_value, alpha, p_value < alpha)


def _rejected_counts(successes_total: int, num_items: int, alpha: float) -> list[int]:
    """A's counts x the two-sided Fisher test rejects at `alpha` with `num_items` a model and
    `successes_total` right in all: those whose p, the weight of every table no more likely
    (sorted once, so each x costs a bisection), is under alpha."""
    low, weights = _table_weights(successes_total, num_items, num_items)
    ordered = sorted(weights)
    cumulative = [0.0]
    for w in ordered:
        cumulative.append(cumulative[-1] + w)
    total = cumulative[-1]
    return [low + i for i, w in enumerate(weights)
            if cumulative[bisect.bisect_right(ordered, w * TIE_TOLERANCE)] / total < alpha]


def _binomial_pmf(num_items: int, proportion: float) -> dict[int, float]:
    """P[X = x], X ~ Binomial(n, p), for every x within 12 standard deviations (plus 2) of
    n·p: what lies past that is under 1e-12 in all."""
    n, p = num_items, proportion
    if p in (0.0, 1.0):
        return {round(n * p): 1.0}
    spread = 12 * math.sqrt(n * p * (1 - p)) + 2
    first, last = max(0, math.floor(n * p - spread)), min(n, math.ceil(n * p + spread))
    log_n = math.lgamma(n + 1)
    return {x: math.exp(log_n - math.lgamma(x + 1) - math.lgamma(n - x + 1)
                        + x * math.log(p) + (n - x) * math.log1p(-p))
            for x in range(first, last + 1)}


def fisher_exact_power(proportion_a: float, proportion_b: float, num_items: int,
                       alpha: float = 0.05) -> float:
    """Chance that Fisher's two-sided test rejects at `alpha` with `num_items` a model whose
    true scores are p_a and p_b: Σ over the tables it rejects of
    Binomial(n, p_a)(x_a) × Binomial(n, p_b)(x_b) (exact, not a normal approximation).
    Example: 0 % vs 100 % with 4 items a model: the one possible table, 0/4 vs 4/4, has
    p = 2 / C(8,4) = 0.029, so the power is 1; with 3 items, p = 2 / C(6,3) = 0.1: power 0.
    """
    _check_proportions(proportion_a, proportion_b)
    _check_open_unit("alpha", alpha)
    pmf_a = _binomial_pmf(num_items, proportion_a)
    pmf_b = _binomial_pmf(num_items, proportion_b)
    totals = range(min(pmf_a) + min(pmf_b), max(pmf_a) + max(pmf_b) + 1)
    return math.fsum(pmf_a[x] * pmf_b.get(k - x, 0.0) for k in totals
                     for x in _rejected_counts(k, num_items, alpha) if x in pmf_a)


def _fewest_items_to_reject(alpha: float) -> int:
    """The fewest items a model at which any table can reach p < alpha: the most extreme,
    0/n vs n/n, has p = 2 / C(2n, n) (at alpha 0.05: 4 items, p = 0.029; 3 give 0.1)."""
    n = 1
    while 2 / math.comb(2 * n, n) >= alpha:
        n += 1
    return n


@dataclass(frozen=True)
class ExactItemsNeeded:
    """Items a model for Fisher's exact test to detect p_a vs p_b, where the normal
    approximation's size expects too few items in a cell."""

    proportion_a: float
    proportion_b: float
    alpha: float
    power: float
    num_items: int  # the fewest items a model whose exact power reaches `power`
    exact_power: float  # at num_items
    power_one_fewer: float  # at num_items - 1
    approximate_items: int  # Fleiss's formula, which Cochran's rule rejects here
    approximate_power: float  # Fisher's exact power at approximate_items
    smallest_expected_count: float  # at approximate_items

    def explain_lines(self) -> list[str]:
        return [
            f"Fleiss's normal formula gives {self.approximate_items:,} items a model, where a cell"
            f" expects {self.smallest_expected_count:.3g}"
            f" {plural(self.smallest_expected_count, 'item')} (< {MIN_EXPECTED_COUNT:g}):"
            " outside the approximation's range",
            "exact power(n) = sum over the tables Fisher's test rejects at alpha of"
            " Bin(n, p_a)(x_a) × Bin(n, p_b)(x_b)",
            f"  power({self.approximate_items:,}) = {self.approximate_power:.3f}",
            f"  power({self.num_items - 1:,}) = {self.power_one_fewer:.3f},"
            f" power({self.num_items:,}) = {self.exact_power:.3f}"
            f" >= {self.power:g} -> {self.num_items:,} items",
        ]


def items_needed_exact(proportion_a: float, proportion_b: float, alpha: float = 0.05,
                       power: float = 0.8) -> ExactItemsNeeded:
    """The fewest items a model at which Fisher's two-sided test reaches `power` exactly
    (fisher_exact_power), counted up from half Fleiss's size (from the fewest at which any
    table rejects, if power is reached there already): exact power saw-tooths in n, and this
    is the first n to reach it from there; Fisher's test being conservative, it is seldom
    below Fleiss's size (0 % vs 10 %: 78 items a model, Fleiss 74).
    Example: 0 % vs 100 % at alpha 0.05: 4 items a model (Fleiss's formula says 2; 0/2 vs
    2/2 has p = 1/3).
    """
    approx = items_needed_unpaired(proportion_a, proportion_b, alpha, power)
    if approx.num_items > MAX_EXACT_ITEMS:
        raise InputError(f"{approx.num_items:,} items a model: past {MAX_EXACT_ITEMS:,}, "
                         "too many to size exactly")
    pbar = (proportion_a + proportion_b) / 2
    n = max(_fewest_items_to_reject(alpha), approx.num_items // 2)
    if n > 1 and fisher_exact_power(proportion_a, proportion_b, n - 1, alpha) >= power:
        n = _fewest_items_to_reject(alpha)  # reached below half the formula's: count it all
    previous = fisher_exact_power(proportion_a, proportion_b, n - 1, alpha) if n > 1 else 0.0
    while (reached := fisher_exact_power(proportion_a, proportion_b, n, alpha)) < power:
        previous, n = reached, n + 1
    return ExactItemsNeeded(
        proportion_a, proportion_b, alpha, power, n, reached, previous, approx.num_items,
        fisher_exact_power(proportion_a, proportion_b, approx.num_items, alpha),
        smallest_expected_count(approx.num_items, approx.num_items, pbar))
