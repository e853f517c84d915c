import json
import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ridgeline.errors import InputError
from ridgeline.evalstats import items_needed_unpaired, two_proportion_z_test
from ridgeline.evalstats_exact import (
    fisher_exact_power,
    fisher_exact_test,
    items_needed_exact,
    normal_approximation_holds,
    smallest_expected_count,
)
from tests.conftest import run_cli


def _fisher_by_enumeration(sa: int, na: int, sb: int, nb: int) -> Fraction:
    """Two-sided Fisher p in exact fractions: every table with the same margins that is no
    more likely than the observed one, each C(K, x) C(N - K, n_a - x) / C(N, n_a)."""
    k, n = sa + sb, na + nb
    prob = {x: Fraction(math.comb(k, x) * math.comb(n - k, na - x), math.comb(n, na))
            for x in range(max(0, k - nb), min(k, na) + 1)}
    return sum((q for q in prob.values() if q <= prob[sa]), Fraction(0))


# --- Fisher's exact test ---


def test_0_of_2_vs_2_of_2_is_not_significant_at_p_one_third() -> None:
    """The three tables with 2 right of 4 have 1/6, 4/6, 1/6; the z-test says p = 0.046."""
    fisher = fisher_exact_test(0, 2, 2, 2)
    assert fisher.p_value == pytest.approx(float(_fisher_by_enumeration(0, 2, 2, 2)))
    assert fisher.p_value == pytest.approx(1 / 3) and not fisher.significant
    assert two_proportion_z_test(0, 2, 2, 2).significant  # the approximation's wrong verdict
    assert not normal_approximation_holds(2, 2, 0.5)


@given(st.integers(1, 30), st.integers(1, 30), st.data())
def test_fisher_matches_summing_every_table_in_fractions(
        na: int, nb: int, data: st.DataObject) -> None:
    sa, sb = data.draw(st.integers(0, na)), data.draw(st.integers(0, nb))
    fisher = fisher_exact_test(sa, na, sb, nb)
    assert fisher.p_value == pytest.approx(float(_fisher_by_enumeration(sa, na, sb, nb)),
                                           rel=1e-9)
    assert fisher.p_value == pytest.approx(fisher_exact_test(sb, nb, sa, na).p_value, rel=1e-9)


def test_3_of_10_vs_8_of_10_gives_p_0_07() -> None:
    assert fisher_exact_test(3, 10, 8, 10).p_value == pytest.approx(
        float(_fisher_by_enumeration(3, 10, 8, 10)))


def test_bad_counts_are_refused() -> None:
    with pytest.raises(InputError, match="successes_a"):
        fisher_exact_test(3, 2, 0, 2)


# --- the rule that picks it ---


def test_cochran_rule_reads_the_smallest_expected_cell() -> None:
    assert smallest_expected_count(10, 10, 0.5) == 5.0 and normal_approximation_holds(10, 10, 0.5)
    assert smallest_expected_count(100, 100, 0.97) == pytest.approx(3.0)
    assert not normal_approximation_holds(100, 100, 0.97)


# --- the size of a benchmark ---


def test_0_vs_100_percent_needs_the_fewest_items_fisher_can_reject_with() -> None:
    """With 0 % and 100 % the only table is 0/n vs n/n: the size is the first n whose p is
    under alpha, the one before is not, and Fleiss's formula (2 items) is below both."""
    need = items_needed_exact(0.0, 1.0)
    n = need.num_items
    assert fisher_exact_test(0, n, n, n).p_value < 0.05
    assert fisher_exact_test(0, n - 1, n - 1, n - 1).p_value >= 0.05
    assert need.approximate_items == items_needed_unpaired(0.0, 1.0).num_items < n
    assert (need.exact_power, need.power_one_fewer, need.approximate_power) == (1.0, 0.0, 0.0)


def test_a_stricter_alpha_needs_more_items_for_0_vs_100_percent() -> None:
    n = items_needed_exact(0.0, 1.0, alpha=0.01).num_items
    assert fisher_exact_test(0, n, n, n).p_value < 0.01
    assert fisher_exact_test(0, n - 1, n - 1, n - 1).p_value >= 0.01


@pytest.mark.parametrize("pa, pb", [(0.0, 0.1), (0.1, 0.3), (0.5, 0.9), (0.95, 1.0)])
def test_the_exact_size_is_the_first_to_reach_the_power(pa: float, pb: float) -> None:
    need = items_needed_exact(pa, pb)
    assert need.exact_power == fisher_exact_power(pa, pb, need.num_items) >= 0.8
    assert need.power_one_fewer == fisher_exact_power(pa, pb, need.num_items - 1) < 0.8
    assert need.approximate_power == fisher_exact_power(pa, pb, need.approximate_items)


def test_exact_power_sums_the_rejected_tables() -> None:
    """0 % vs 50 % with 6 items a model: A always scores 0/6, and Fisher rejects B's x/6
    exactly where its p is under 0.05; the power is the binomial chance of those x."""
    rejected = [x for x in range(7) if fisher_exact_test(0, 6, x, 6).p_value < 0.05]
    expected = sum(math.comb(6, x) for x in rejected) / 2**6
    assert rejected and fisher_exact_power(0.0, 0.5, 6) == pytest.approx(expected)


# --- the command ---


def test_evalstats_at_2_items_gives_fisher_verdict_not_the_z_tests(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "evalstats", "--pct-a", "0", "--pct-b", "100", "--n", "2")
    assert code == 0
    assert "Fisher's exact test, two-sided: p = 0.3333 (not significant)" in out
    assert "0.0455 (significant)" not in out


def test_evalstats_sizes_0_vs_100_percent_by_fisher(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "evalstats", "--pct-a", "0", "--pct-b", "100", "--n", "10",
                           "--json")
    data = json.loads(out)
    n = data["exact_items_needed"]["num_items"]
    assert code == 0 and n == items_needed_exact(0.0, 1.0).num_items
    _, text, _ = run_cli(capsys, "evalstats", "--pct-a", "0", "--pct-b", "100", "--n", "10")
    assert f"): {n} per model, unpaired, by Fisher's exact test" in text


def test_evalstats_at_large_counts_keeps_the_normal_answers(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "evalstats", "--pct-a", "39.02", "--pct-b", "47.56",
                           "--n", "164", "--json")
    data = json.loads(out)
    assert code == 0 and "fisher_exact_test" not in data and "exact_items_needed" not in data
    assert data["unpaired_items_needed"]["num_items"] == items_needed_unpaired(
        0.3902, 0.4756).num_items


def test_evalstats_too_rare_to_size_exactly_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "evalstats", "--pct-a", "0", "--pct-b", "0.01", "--n",
                           "10000")
    assert code == 0 and "too many to size by Fisher's exact test" in out
