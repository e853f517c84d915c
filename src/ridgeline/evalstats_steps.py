"""evalstats' and prefix's working as explain Steps, the {label, formula, inputs, result}
objects every other command's --json gives (docs/json.md), beside the text lines their
--explain prints (each result's explain_lines): one step per division, each result's inputs
unrounded, so the division repeated from them gives the result.

A Wilson interval for 195 of 500 at 95 %: p = 195 ÷ 500 = 0.39, z = 1.96, center
(0.39 + 1.96² ÷ 1,000) ÷ (1 + 1.96² ÷ 500) = 0.3908, half width 0.0426, so [0.3482, 0.4334].
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ridgeline.evalstats import (
    EXACT_INTEGER_ITEMS,
    McNemarExact,
    PairedItemsNeeded,
    PercentageCount,
    TwoProportionZTest,
    UnpairedItemsNeeded,
    WilsonInterval,
    _against_alpha,
    _half_binomial_tail_count,
    _half_binomial_tail_float,
)
from ridgeline.evalstats_exact import ExactItemsNeeded, FisherExactTest
from ridgeline.explain import Step, q, step
from ridgeline.prefix import PrefixReuse


def percentage_steps(r: PercentageCount) -> tuple[Step, ...]:
    """The count behind a percentage and its check: 39.02 % of 500 → 195.1 → 195, whose
    39.0 % is 0.02 points off, past the ±0.005 the printed digits allow."""
    verdict = ("within the printed rounding: a whole count gives it" if r.is_whole_count else
               "past the printed rounding: no whole number of items gives this percentage")
    return (
        step("count", "percent × N ÷ 100, to the nearest whole count",
             q("count", r.nearest_count, "items"), q("percent", r.percent, "%"),
             q("N", r.num_items, "items")),
        step("the count's percentage", "100 × count ÷ N",
             q("percentage", r.nearest_count_percent, "%"),
             q("count", r.nearest_count, "items"), q("N", r.num_items, "items")),
        step("off by", "|the count's percentage − percent|, against ± half the last printed "
             "digit", q("difference", r.difference_points, "points", verdict),
             q("the count's percentage", r.nearest_count_percent, "%"),
             q("percent", r.percent, "%"),
             q("printed rounding", r.rounding_tolerance_points, "points")),
    )


def wilson_steps(r: WilsonInterval) -> tuple[Step, ...]:
    """p, its z, the Wilson center and half width, and the interval's two ends."""
    n, p, z = q("n", r.num_items, "items"), q("p", r.proportion), q("z", r.z)
    center, half = q("center", r.center), q("half width", r.half_width)
    return (
        step("p", "successes ÷ n", q("p", r.proportion),
             q("successes", r.successes, "items"), n),
        step("z", "the standard normal quantile at 1 − (1 − confidence) ÷ 2",
             q("z", r.z), q("confidence", r.confidence)),
        step("center", "(p + z² ÷ 2n) ÷ (1 + z² ÷ n)", center, p, z, n),
        step("half width", "z ÷ (1 + z² ÷ n) × √(p(1 − p) ÷ n + z² ÷ 4n²)", half, p, z, n),
        step("low end", "max(0, center − half width)", q("low", r.low), center, half),
        step("high end", "min(1, center + half width)", q("high", r.high), center, half),
    )


def z_test_steps(r: TwoProportionZTest) -> tuple[Step, ...]:
    """The unpaired pooled z-test: each score, the pooled p, its standard error, z, p-value."""
    pa, pb = q("p_a", r.proportion_a), q("p_b", r.proportion_b)
    pooled, se, z = q("pooled p", r.pooled_proportion), q("se", r.standard_error), q("z", r.z)
    na, nb = q("n_a", r.num_items_a, "items"), q("n_b", r.num_items_b, "items")
    return (
        step("p_a", "successes_a ÷ n_a", pa, q("successes_a", r.successes_a, "items"), na),
        step("p_b", "successes_b ÷ n_b", pb, q("successes_b", r.successes_b, "items"), nb),
        step("pooled p", "(successes_a + successes_b) ÷ (n_a + n_b)", pooled,
             q("successes_a", r.successes_a, "items"), q("successes_b", r.successes_b, "items"),
             na, nb),
        step("se", "√(pooled p × (1 − pooled p) × (1 ÷ n_a + 1 ÷ n_b))", se, pooled, na, nb),
        step("z", "(p_a − p_b) ÷ se (0 where se is 0)", z, pa, pb, se),
        step("two-sided p", "erfc(|z| ÷ √2)",
             q("p", r.p_value, "", _against_alpha(r.significant, r.alpha)), z),
    )


def mcnemar_steps(r: McNemarExact) -> tuple[Step, ...]:
    """The discordant items, the net gap and the exact two-sided p: b = 15, c = 2 → n = 17,
    P[X ≤ 2] = 154 ÷ 131,072, p = 0.00235."""
    n, k = r.discordant_items, min(r.b, r.c)
    tail = (_half_binomial_tail_count(n, k) / 2**n if n <= EXACT_INTEGER_ITEMS
            else _half_binomial_tail_float(n, k))
    b, c = q("b", r.b, "items"), q("c", r.c, "items")
    return (
        step("discordant items", "b + c", q("n", n, "items"), b, c),
        step("net gap", "b − c", q("net gap", r.net_gap_items, "items"), b, c),
        step("two-sided p", "min(1, 2 × P[X ≤ min(b, c)]), X ~ Binomial(n, 1/2)",
             q("p", r.p_value, "", _against_alpha(r.significant, r.alpha)),
             q("P[X ≤ min(b, c)]", tail, "", "C(n, 0) + … + C(n, min(b, c)), ÷ 2^n"),
             q("n", n, "items"), q("min(b, c)", k, "items")),
    )


def _items_step(label: str, formula: str, exact: float, items: int,
                *inputs: Any) -> tuple[Step, ...]:
    """A sample size and its whole count: the formula's n, then ⌈n⌉."""
    return (step(label, formula, q("n", exact, "items"), *inputs),
            step(f"{label}, whole", "⌈n⌉", q("items", items, "items"),
                 q("n", exact, "items")))


def unpaired_steps(r: UnpairedItemsNeeded) -> tuple[Step, ...]:
    """Fleiss's items a model: 39.02 % vs 41.5 % at alpha 0.05, power 0.8: 6,137.5 → 6,138."""
    pa, pb = q("p_a", r.proportion_a), q("p_b", r.proportion_b)
    pbar = (r.proportion_a + r.proportion_b) / 2
    return (step("pbar", "(p_a + p_b) ÷ 2", q("pbar", pbar), pa, pb),
            *_items_step("items needed, unpaired", "(z_a √(2 pbar (1 − pbar)) + z_b √(p_a(1 − "
                         "p_a) + p_b(1 − p_b)))² ÷ (p_a − p_b)² (Fleiss 1981, §3.2)",
                         r.exact_items, r.num_items,
                         q("z_a", r.z_alpha, "", f"alpha {r.alpha:g}, two-sided"),
                         q("z_b", r.z_beta, "", f"power {r.power:g}"),
                         q("pbar", pbar), pa, pb))


def paired_steps(r: PairedItemsNeeded) -> tuple[Step, ...]:
    """Connor's items for McNemar's test: gap 0.08, discordance 0.2: 242.x → 243."""
    return _items_step("items needed, paired", "(z_a √psi + z_b √(psi − d²))² ÷ d² "
                       "(Connor 1987)", r.exact_items, r.num_items,
                       q("z_a", r.z_alpha, "", f"alpha {r.alpha:g}, two-sided"),
                       q("z_b", r.z_beta, "", f"power {r.power:g}"),
                       q("d", r.gap, "", "the gap"), q("psi", r.discordance, "",
                                                        "the share of items disagreed on"))


def fisher_steps(r: FisherExactTest) -> tuple[Step, ...]:
    """The observed table's hypergeometric probability and the two-sided p: 0/2 vs 2/2 has
    P(x = 0) = 1/6, p = 1/3."""
    k = r.successes_a + r.successes_b
    right, x = q("right in all", k, "items"), q("x", r.successes_a, "items", "A's count")
    na, nb = q("n_a", r.num_items_a, "items"), q("n_b", r.num_items_b, "items")
    return (
        step("P(x)", "C(right, x) × C(n_a + n_b − right, n_a − x) ÷ C(n_a + n_b, n_a), "
             "A's count given both margins", q("P(x)", r.observed_probability), right, x,
             na, nb),
        step("two-sided p", "Σ P(y) over every table y no more likely than x (R's 1e-7 tie "
             "tolerance)", q("p", r.p_value, "", _against_alpha(r.significant, r.alpha)),
             q("P(x)", r.observed_probability), right, na, nb),
    )


def exact_items_steps(r: ExactItemsNeeded) -> tuple[Step, ...]:
    """The fewest items a model whose Fisher power reaches the target: power(n − 1) below it,
    power(n) at or above it."""
    return (step("items needed, exact", "the fewest n, counted up from half Fleiss's size, "
                 "with exact power(n) ≥ power: power(n − 1) < power ≤ power(n)",
                 q("items", r.num_items, "items"), q("power", r.power),
                 q("power(n − 1)", r.power_one_fewer), q("power(n)", r.exact_power),
                 q("Fleiss's items", r.approximate_items, "items",
                   f"a cell expects {r.smallest_expected_count:.3g} there, under 5"),
                 q("power at Fleiss's items", r.approximate_power)),)


def prefix_steps(r: PrefixReuse) -> tuple[Step, ...]:
    """What prompt B reuses: 17 shared of 18 tokens, blocks of 4: ⌊min(17, 17) ÷ 4⌋ = 4
    blocks, 16 tokens, 88.9 % of B, 2 to recompute."""
    unit = "pages" if r.block_setting == "page_size" else "blocks"
    n_b, size = q("B tokens", r.prompt_b_tokens, "tokens"), q(r.block_setting, r.block_size,
                                                             "tokens", r.block_source)
    reused = q("tokens reused", r.tokens_reused, "tokens")
    return (
        step(f"full {unit} reused", f"⌊min(common prefix, B tokens − 1) ÷ {r.block_setting}⌋: "
             "only full blocks match, and B's last token is computed for its logits",
             q(f"full {unit}", r.full_blocks_reused, unit),
             q("common prefix", r.common_prefix_tokens, "tokens",
               f"prompt A {r.prompt_a_tokens:,} tokens"), n_b, size),
        step("tokens reused", f"full {unit} × {r.block_setting}", reused,
             q(f"full {unit}", r.full_blocks_reused, unit), size),
        step("share of B reused", "tokens reused ÷ B tokens",
             q("share", r.fraction_of_b_reused), reused, n_b),
        step("tokens to recompute", "B tokens − tokens reused",
             q("to recompute", r.tokens_to_recompute, "tokens"), n_b, reused),
    )


STEPS: dict[type, Callable[[Any], tuple[Step, ...]]] = {
    PercentageCount: percentage_steps, WilsonInterval: wilson_steps,
    TwoProportionZTest: z_test_steps, McNemarExact: mcnemar_steps,
    UnpairedItemsNeeded: unpaired_steps, PairedItemsNeeded: paired_steps,
    FisherExactTest: fisher_steps, ExactItemsNeeded: exact_items_steps,
    PrefixReuse: prefix_steps}


def result_steps(result: Any) -> tuple[Step, ...]:
    """The Steps of one evalstats or prefix result (none for a type without them)."""
    make = STEPS.get(type(result))
    return make(result) if make else ()
