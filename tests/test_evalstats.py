import dataclasses
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ridgeline.evalstats import (
    OVERLAPPING_INTERVALS_NOTE,
    count_from_percentage,
    discordant_conflicts,
    explain_lines,
    items_needed_paired,
    items_needed_unpaired,
    mcnemar_exact,
    normal_quantile,
    two_proportion_z_test,
    wilson_interval,
)
from tests.conftest import run_cli


@st.composite
def scores(draw: st.DrawFn) -> tuple[int, int]:
    n = draw(st.integers(min_value=1, max_value=5000))
    return draw(st.integers(min_value=0, max_value=n)), n


# --- percentages back to items ---


def test_39_02_percent_of_164_items_is_64_items() -> None:
    result = count_from_percentage(39.02, 164)
    assert result.nearest_count == 64
    assert result.is_whole_count
    assert (result.consistent_count_low, result.consistent_count_high) == (64, 64)


def test_39_5_percent_of_164_items_is_no_whole_number_of_items() -> None:
    result = count_from_percentage("39.5", 164)
    assert result.nearest_count == 65
    assert round(result.nearest_count_percent, 2) == 39.63
    assert not result.is_whole_count
    assert result.consistent_count_low is None


def test_40_percent_of_1000_printed_without_decimals_could_be_395_to_405_items() -> None:
    result = count_from_percentage("40%", 1000)
    assert result.decimals == 0
    assert (result.consistent_count_low, result.consistent_count_high) == (395, 405)


def test_printed_text_keeps_its_trailing_zero_as_a_decimal() -> None:
    assert count_from_percentage("39.0", 164).decimals == 1
    assert count_from_percentage(39.0, 164, decimals=3).rounding_tolerance_points == 0.0005


@given(scores())
def test_every_count_printed_to_two_decimals_is_recovered(score: tuple[int, int]) -> None:
    k, n = score
    result = count_from_percentage(f"{100 * k / n:.2f}", n)
    assert result.is_whole_count
    assert result.consistent_count_low is not None and result.consistent_count_high is not None
    assert result.consistent_count_low <= k <= result.consistent_count_high


@pytest.mark.parametrize("bad", [-0.1, 100.5, "abc", "nan", math.inf])
def test_percent_outside_0_to_100_is_refused(bad: float | str) -> None:
    with pytest.raises(ValueError, match="percent"):
        count_from_percentage(bad, 164)


# --- the normal quantile ---


def test_two_sided_95_percent_z_is_1_96_and_80_percent_power_z_is_0_84() -> None:
    assert normal_quantile(0.975) == pytest.approx(1.959963984540054, abs=1e-12)
    assert normal_quantile(0.8) == pytest.approx(0.8416212335729143, abs=1e-12)


@given(st.floats(min_value=1e-12, max_value=1 - 1e-12))
def test_normal_quantile_inverts_the_normal_cdf(p: float) -> None:
    z = normal_quantile(p)
    assert 0.5 * math.erfc(-z / math.sqrt(2)) == pytest.approx(p, rel=1e-9, abs=1e-15)


# --- Wilson interval ---


def test_64_of_164_is_39_percent_within_32_to_47_percent_at_95_percent() -> None:
    result = wilson_interval(64, 164)
    assert round(result.low, 3) == 0.319
    assert round(result.high, 3) == 0.467


def test_zero_successes_still_has_a_positive_upper_bound() -> None:
    result = wilson_interval(0, 50)
    assert result.low == 0.0
    assert 0.0 < result.high < 0.1


@given(scores(), st.floats(min_value=0.5, max_value=0.999))
def test_wilson_interval_contains_the_score_and_stays_within_0_and_1(
    score: tuple[int, int], confidence: float
) -> None:
    k, n = score
    result = wilson_interval(k, n, confidence)
    assert 0.0 <= result.low <= result.proportion <= result.high <= 1.0


@given(scores())
def test_a_99_percent_interval_is_wider_than_a_95_percent_interval(score: tuple[int, int]) -> None:
    k, n = score
    assert wilson_interval(k, n, 0.99).half_width > wilson_interval(k, n, 0.95).half_width


# --- unpaired test, and why overlap is not the test ---


def test_77_vs_64_of_164_unpaired_is_not_significant_at_p_0_147() -> None:
    result = two_proportion_z_test(77, 164, 64, 164)
    assert round(result.z, 2) == 1.45
    assert round(result.p_value, 3) == 0.147
    assert not result.significant


def test_overlapping_95_percent_intervals_can_hide_a_significant_difference() -> None:
    a, b = wilson_interval(85, 164), wilson_interval(64, 164)
    assert a.low < b.high  # the intervals overlap
    test = two_proportion_z_test(85, 164, 64, 164)
    assert round(test.p_value, 3) == 0.020 and test.significant
    assert "do not mean 'no difference'" in OVERLAPPING_INTERVALS_NOTE


def test_identical_perfect_scores_have_p_value_1() -> None:
    assert two_proportion_z_test(10, 10, 20, 20).p_value == 1.0


# --- McNemar exact ---


def test_15_vs_2_discordant_items_is_significant_at_p_0_0023() -> None:
    result = mcnemar_exact(15, 2)
    assert result.p_value == pytest.approx(2 * 154 / 2**17)
    assert round(result.p_value, 4) == 0.0023
    assert result.significant


def test_30_vs_17_discordant_items_is_not_significant_at_p_0_079() -> None:
    result = mcnemar_exact(30, 17)
    assert round(result.p_value, 3) == 0.079
    assert not result.significant


def test_the_same_net_gap_of_13_items_gets_opposite_verdicts() -> None:
    strong, weak = mcnemar_exact(15, 2), mcnemar_exact(30, 17)
    assert strong.net_gap_items == weak.net_gap_items == 13
    assert strong.significant != weak.significant


def test_no_disagreement_gives_p_value_1() -> None:
    assert mcnemar_exact(0, 0).p_value == 1.0
    assert mcnemar_exact(7, 7).p_value == 1.0


@given(st.integers(min_value=0, max_value=300), st.integers(min_value=0, max_value=300))
def test_mcnemar_is_symmetric_and_matches_the_binomial_sum(b: int, c: int) -> None:
    n, k = b + c, min(b, c)
    expected = min(1.0, 2 * sum(math.comb(n, i) * 0.5**n for i in range(k + 1)))
    assert mcnemar_exact(b, c).p_value == pytest.approx(expected, rel=1e-9)
    assert mcnemar_exact(b, c).p_value == mcnemar_exact(c, b).p_value


# --- sample sizes ---


def test_39_vs_47_percent_needs_600_items_per_model_unpaired() -> None:
    result = items_needed_unpaired(0.39, 0.47)
    assert result.exact_items == pytest.approx(599.99, abs=0.01)
    assert result.num_items == 600


def test_an_8_point_gap_with_20_percent_disagreement_needs_243_paired_items() -> None:
    result = items_needed_paired(0.08, 0.20)
    assert result.num_items == 243


def test_pairing_needs_fewer_items_when_models_agree_on_most_items() -> None:
    assert items_needed_paired(0.08, 0.20).num_items < items_needed_unpaired(0.39, 0.47).num_items


@given(
    st.floats(min_value=0.05, max_value=0.9),
    st.floats(min_value=0.01, max_value=0.04),
    st.floats(min_value=0.5, max_value=0.95),
)
def test_a_smaller_gap_or_more_power_needs_more_items(
    base: float, gap: float, power: float
) -> None:
    wide = items_needed_unpaired(base, base + 2 * gap, power=power).exact_items
    narrow = items_needed_unpaired(base, base + gap, power=power).exact_items
    assert narrow > wide
    more_power = items_needed_unpaired(base, base + gap, power=min(0.99, power + 0.04))
    assert more_power.exact_items > narrow


# --- input checks ---


@pytest.mark.parametrize(
    ("call", "word"),
    [
        (lambda: count_from_percentage(39.02, 0), "num_items"),
        (lambda: wilson_interval(165, 164), "cannot exceed"),
        (lambda: wilson_interval(-1, 164), "successes"),
        (lambda: wilson_interval(64, 164, confidence=1.0), "confidence"),
        (lambda: two_proportion_z_test(64, 164, 70, 164, alpha=0.0), "alpha"),
        (lambda: mcnemar_exact(-1, 3), "b"),
        (lambda: mcnemar_exact(True, 3), "b"),
        (lambda: items_needed_unpaired(0.4, 0.4), "no gap"),
        (lambda: items_needed_unpaired(0.4, 1.2), "proportion_b"),
        (lambda: items_needed_unpaired(0.4, 0.5, power=1.0), "power"),
        (lambda: items_needed_paired(0.0, 0.2), "gap"),
        (lambda: items_needed_paired(0.3, 0.2), "discordance"),
        (lambda: normal_quantile(0.0), "probability"),
    ],
)
def test_bad_input_is_refused_with_a_message_naming_it(call: object, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        call()  # type: ignore[operator]


# --- explanations and JSON ---


def test_explain_lines_show_one_division_you_can_repeat() -> None:
    assert "2 × 154 / 131072 = 0.00235" in "\n".join(explain_lines(mcnemar_exact(15, 2)))
    assert "63.99 -> nearest whole count 64" in "\n".join(
        explain_lines(count_from_percentage(39.02, 164))
    )
    assert "[0.3189, 0.4666]" in "\n".join(explain_lines(wilson_interval(64, 164)))
    assert "= 1.450" in "\n".join(explain_lines(two_proportion_z_test(77, 164, 64, 164)))
    assert "-> 600 items" in "\n".join(explain_lines(items_needed_unpaired(0.39, 0.47)))
    assert "-> 243 items" in "\n".join(explain_lines(items_needed_paired(0.08, 0.2)))
    assert "2 × 0.03947" in "\n".join(explain_lines(mcnemar_exact(30, 17)))


def test_explain_writes_times_plus_minus_and_root_as_every_other_explain_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every other --explain prints ×, ± and √; evalstats printed x, +/- and sqrt."""
    _, out, _ = _cli(capsys, "--pct-a", "39.02", "--pct-b", "47.56", "--n", "164",
                     "--discordant", "2,16", "--explain")
    paired = "\n".join(explain_lines(items_needed_paired(0.08, 0.2)))
    unpaired = "\n".join(explain_lines(items_needed_unpaired(0.39, 0.47)))
    for text in (out, paired, unpaired):
        assert " x " not in text and "+/-" not in text and "sqrt" not in text
    assert "×" in out and "±" in out and "√" in out and "√(psi" in paired


def test_results_serialise_to_json() -> None:
    for result in (
        count_from_percentage("39.5", 164),
        wilson_interval(64, 164),
        two_proportion_z_test(77, 164, 64, 164),
        mcnemar_exact(30, 17),
        items_needed_unpaired(0.39, 0.47),
        items_needed_paired(0.08, 0.2),
    ):
        json.loads(json.dumps(dataclasses.asdict(result), allow_nan=False))


# --- the command: every check in --json, impossible inputs refused ---


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, "evalstats", *argv)


def test_json_keeps_both_models_count_checks_and_intervals(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _cli(capsys, "--pct-a", "39.02", "--pct-b", "41.5", "--n", "500", "--json")
    data = json.loads(out)
    assert code == 0
    for key, pct, count in (("a", "39.02", 195), ("b", "41.5", 208)):
        assert data[f"percentage_count_{key}"] == dataclasses.asdict(
            count_from_percentage(pct, 500)
        )
        assert data[f"wilson_interval_{key}"] == dataclasses.asdict(wilson_interval(count, 500))
    # the text's interval for A is the JSON's, not B's
    _, text, _ = _cli(capsys, "--pct-a", "39.02", "--pct-b", "41.5", "--n", "500")
    low_a, high_a = data["wilson_interval_a"]["low"], data["wilson_interval_a"]["high"]
    assert f"A [{low_a:.3f}, {high_a:.3f}]" in text
    assert data["notes"][:2] == [line for line in text.splitlines() if "not k/500" in line]


def test_explain_labels_each_models_working(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = _cli(capsys, "--pct-a", "39.02", "--pct-b", "47.56", "--n", "164", "--explain")
    a, b = out.index("wilson_interval_a:"), out.index("wilson_interval_b:")
    assert a < out.index("p = 64 / 164") < b < out.index("p = 78 / 164")


def test_more_discordant_items_than_the_benchmark_holds_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(ValueError, match="160 discordant items cannot exceed the 100"):
        mcnemar_exact(80, 80, num_items=100)
    assert mcnemar_exact(50, 50, num_items=100).p_value == 1.0
    code, out, err = _cli(capsys, "--discordant", "80,80", "--n", "100")
    assert code == 2 and not out
    assert len(err.splitlines()) == 1 and "160" in err and "100" in err


def test_discordant_items_saying_a_leads_contradict_scores_saying_b_leads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = count_from_percentage(40, 100), count_from_percentage(50, 100)
    (warning,) = discordant_conflicts(a, b, 15, 5)
    assert "A ahead by the discordant items, B ahead by the scores" in warning
    assert discordant_conflicts(a, b, 5, 15) == []
    code, out, err = _cli(capsys, "--pct-a", "40", "--pct-b", "50", "--n", "100",
                          "--discordant", "15,5")
    assert code == 2 and not out and len(err.splitlines()) == 1  # no verdict from either
    assert "--discordant contradicts the scores: b - c = 15 - 5 = +10 items" in err
    code, out, _ = _cli(capsys, "--pct-a", "40", "--pct-b", "50", "--n", "100",
                        "--discordant", "5,15")
    assert code == 0 and "contradicts" not in out and "McNemar" in out


def test_more_items_only_a_got_right_than_a_got_right_is_flagged() -> None:
    a, b = count_from_percentage(10, 100), count_from_percentage(5, 100)
    assert any("at most 10 items" in w for w in discordant_conflicts(a, b, 30, 25))


@given(st.integers(0, 300), st.integers(0, 300), st.integers(0, 300), st.integers(0, 300))
def test_discordant_counts_from_real_paired_results_never_conflict(
    both_right: int, b: int, c: int, both_wrong: int
) -> None:
    n = both_right + b + c + both_wrong
    if n == 0:
        return
    count_a = count_from_percentage(f"{100 * (both_right + b) / n:.2f}", n)
    count_b = count_from_percentage(f"{100 * (both_right + c) / n:.2f}", n)
    assert discordant_conflicts(count_a, count_b, b, c) == []


def test_scores_a_gap_apart_that_one_item_cannot_separate_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = _cli(capsys, "--pct-a", "40", "--pct-b", "50", "--n", "1")
    assert code == 2 and not out
    assert len(err.splitlines()) == 1 and "under one item" in err and "--n 1" in err


def test_scores_no_whole_count_gives_say_which_count_the_tests_used(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _cli(capsys, "--pct-a", "40", "--pct-b", "60", "--n", "1")
    assert code == 0
    assert "A's 40% is not k/1 for any whole k: the tests use the nearest count, 0 (0%)" in out
    assert "B's 60% is not k/1" in out
    _, out, _ = _cli(capsys, "--pct-a", "39.02", "--pct-b", "47.56", "--n", "164")
    assert "not k/164" not in out  # both are whole counts: nothing to say


@pytest.mark.parametrize("discordance", ["0", "0.05", "-0.2", "1.5", "nan"])
def test_every_impossible_discordance_is_refused_naming_it(
    capsys: pytest.CaptureFixture[str], discordance: str
) -> None:
    code, out, err = _cli(capsys, "--pct-a", "40", "--pct-b", "50", "--n", "100",
                          "--discordance", discordance)
    assert code == 2 and not out
    assert len(err.splitlines()) == 1 and "discordance" in err


def test_discordance_without_the_scores_it_sizes_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = _cli(capsys, "--discordant", "15,2", "--discordance", "0.2")
    assert code == 2 and "--pct-a" in err


@pytest.mark.parametrize(("flag", "value"), [("--alpha", "0"), ("--alpha", "1"),
                                             ("--power", "1.0"), ("--alpha", "x")])
def test_alpha_and_power_errors_name_the_flag_and_the_value_given(
    capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    code, _, err = _cli(capsys, "--pct-a", "40", "--pct-b", "50", "--n", "100", flag, value)
    assert code == 2 and len(err.splitlines()) == 1
    assert flag in err and f"got {value}" in err.replace("'", "")
    assert "confidence" not in err


def test_a_99_9_percent_interval_is_labelled_as_such(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = _cli(capsys, "--pct-a", "40", "--pct-b", "50", "--n", "100", "--alpha", "0.001")
    assert "Wilson 99.9%:" in out


def test_large_discordant_counts_are_summed_in_floats_as_the_integers_would() -> None:
    """Past 100,000 items the tail is a float sum from C(n, k) down; at the boundary it
    agrees with the exact integer sum, and a trillion items take well under a second."""
    from ridgeline.evalstats import _half_binomial_tail_count, _half_binomial_tail_float

    n, k = 99_000, 49_000
    exact = _half_binomial_tail_count(n, k) / 2**n
    assert _half_binomial_tail_float(n, k) == pytest.approx(exact, rel=1e-9)
    assert mcnemar_exact(60_001, 40_000).p_value < 1e-100  # a 20,000-item gap
    assert mcnemar_exact(50_001, 50_000).p_value == pytest.approx(1.0, abs=1e-6)
    assert 0.01 < mcnemar_exact(10**11, 10**11 - 10**6).p_value < 0.05


def test_a_benchmark_to_come_is_sized_for_the_gap_reported(
        capsys: pytest.CaptureFixture[str]) -> None:
    """39.02 % against 41.5 % on 500 items: the tests use the counts (195 and 208), but the
    benchmark that would resolve the reported 2.48 points is sized for 0.3902 and 0.415, not
    the 2.6 points the counts round to."""
    from ridgeline.cli import main

    assert main(["evalstats", "--pct-a", "39.02", "--pct-b", "41.5", "--n", "500",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    need = data["unpaired_items_needed"]
    assert need["num_items"] == items_needed_unpaired(0.3902, 0.415).num_items
    assert need["num_items"] > items_needed_unpaired(195 / 500, 208 / 500).num_items


def test_scores_that_pin_whole_counts_are_sized_from_the_counts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """39.02 % and 42.07 % of 164 are 64 and 69 items and no other counts: those are the
    scores, the percentages their roundings, so the size is the counts' (64/164 vs 69/164),
    not the typed 0.3902 vs 0.4207's, and the line says it sized the counts."""
    from ridgeline.cli import main

    argv = ["evalstats", "--pct-a", "39.02", "--pct-b", "42.07", "--n", "164"]
    assert main([*argv, "--json"]) == 0
    need = json.loads(capsys.readouterr().out)["unpaired_items_needed"]
    counts = items_needed_unpaired(64 / 164, 69 / 164).num_items
    assert need["num_items"] == counts != items_needed_unpaired(0.3902, 0.4207).num_items
    assert main(argv) == 0
    assert (f"items needed to detect the counts' gap, 64/164 vs 69/164 (alpha 0.05, power "
            f"0.8): {counts:,} per model") in capsys.readouterr().out


def test_scores_several_counts_print_as_are_sized_as_typed(
        capsys: pytest.CaptureFixture[str]) -> None:
    """39 % of 1,001 items is any of 386 to 395 (each prints as 39 %): no count is given, so
    the typed 0.39 vs 0.42 sizes it, and the line says so beside the nearest counts' size."""
    from ridgeline.cli import main

    assert main(["evalstats", "--pct-a", "39", "--pct-b", "42", "--n", "1001", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["unpaired_items_needed"]["num_items"] == items_needed_unpaired(0.39,
                                                                               0.42).num_items
    assert data["unpaired_items_needed_counts"]["num_items"] == items_needed_unpaired(
        round(0.39 * 1001) / 1001, round(0.42 * 1001) / 1001).num_items
    assert main(["evalstats", "--pct-a", "39", "--pct-b", "42", "--n", "1001"]) == 0
    assert "items needed to detect the reported gap, 39% vs 42%" in capsys.readouterr().out


def test_power_without_scores_to_size_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """McNemar's verdict on --discordant alone sizes nothing: a --power there was ignored."""
    from ridgeline.cli import main

    assert main(["evalstats", "--discordant", "20,33", "--power", "0.9"]) == 2
    assert "--power sizes a benchmark" in capsys.readouterr().err
    assert main(["evalstats", "--discordant", "20,33"]) == 0


# --- the discordant counts and the discordance the two scores allow ---


def test_items_only_b_got_right_cannot_outnumber_the_items_a_got_wrong(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """90% and 95% of 100: A got 100 − 90 = 10 items wrong and B 100 − 95 = 5. c = 45 items
    only B got right are 45 items A got wrong (45 > 10); b = 40 are 40 B got wrong (40 > 5).
    b − c = −5 matches the gap and b ≤ 90, c ≤ 95, so only these two checks catch it."""
    a, b = count_from_percentage(90, 100), count_from_percentage(95, 100)
    conflicts = discordant_conflicts(a, b, 40, 45)
    assert any(f"leaves at most {100 - 90} items A got wrong" in w for w in conflicts)
    assert any(f"leaves at most {100 - 95} items B got wrong" in w for w in conflicts)
    assert len(conflicts) == 2  # the gap and the right-answer bounds hold
    assert discordant_conflicts(a, b, 5, 10) == []  # at the limits: b = 5, c = 10 can be
    assert discordant_conflicts(a, b, 6, 11) != []
    code, out, err = _cli(capsys, "--pct-a", "90", "--pct-b", "95", "--n", "100",
                          "--discordant", "40,45")
    assert code == 2 and not out and len(err.splitlines()) == 1
    assert "c = 45 items only B got right, but A's 90% of 100 leaves at most 10" in err


def test_a_discordance_the_scores_cannot_reach_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With p_a = 0.90 and p_b = 0.95 both are right on at least 0.85 of the items, so they
    disagree on at most 2 − 0.90 − 0.95 = 0.15; at 0.40 and 0.50 on at most 0.90. At the
    largest, Connor's size is (z_a √0.15 + z_b √(0.15 − 0.05²))² / 0.05²."""
    from ridgeline.evalstats import max_discordance

    assert max_discordance(0.90, 0.95) == pytest.approx(2 - 0.90 - 0.95)
    assert max_discordance(0.40, 0.50) == pytest.approx(0.40 + 0.50)
    with pytest.raises(ValueError, match="at most min"):
        items_needed_paired(0.05, 0.5, proportions=(0.90, 0.95))
    z_a, z_b = normal_quantile(0.975), normal_quantile(0.8)
    at_most = (z_a * math.sqrt(0.15) + z_b * math.sqrt(0.15 - 0.05**2)) ** 2 / 0.05**2
    assert items_needed_paired(0.05, 0.15, proportions=(0.90, 0.95)).num_items == \
        math.ceil(at_most)
    code, out, err = _cli(capsys, "--pct-a", "90", "--pct-b", "95", "--n", "100",
                          "--discordance", "0.5")
    assert code == 2 and not out and len(err.splitlines()) == 1
    assert "discordance 0.5" in err and "0.15" in err
    code, out, _ = _cli(capsys, "--pct-a", "90", "--pct-b", "95", "--n", "100",
                        "--discordance", "0.15")  # the bound itself, despite float noise
    assert code == 0 and f"disagreeing: {math.ceil(at_most):,}" in out
    code, _, err = _cli(capsys, "--pct-a", "40", "--pct-b", "50", "--n", "100",
                        "--discordance", "1")
    assert code == 2 and "0.9" in err


def test_scores_print_back_with_the_digits_typed_and_items_pluralised(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _cli(capsys, "--pct-a", "40%", "--pct-b", "50.0", "--n", "100")
    assert code == 0
    assert "A: 40% of 100 = 40 items" in out and "40.0%" not in out.split("B:")[0]
    assert "B: 50.0% of 100 = 50 items" in out
    assert count_from_percentage("39.02", 164).printed_percent == "39.02"
    code, out, _ = _cli(capsys, "--pct-a", "100", "--pct-b", "0", "--n", "1")
    assert code == 0 and "A: 100% of 1 = 1 item\n" in out and "B: 0% of 1 = 0 items" in out
    code, _, err = _cli(capsys, "--pct-a", "33.3", "--pct-b", "40", "--n", "3")
    assert code == 2 and "both 1 item:" in err and "1 items" not in err


def test_a_p_value_past_a_floats_reach_is_below_1e_300_never_0(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A trillion items a model: the z-test printed "p = 0" where McNemar's prints
    "p < 1e-300"; a p-value is never 0, only smaller than a float holds."""
    argv = ("--pct-a", "39", "--pct-b", "47", "--n", "1t")
    assert two_proportion_z_test(390_000_000_000, 10**12, 470_000_000_000, 10**12).p_value == 0.0
    code, out, _ = _cli(capsys, *argv)
    assert code == 0 and "p < 1e-300 (significant)" in out and "p = 0 " not in out
    code, out, _ = _cli(capsys, *argv, "--explain")
    assert code == 0 and "two-sided p = erfc(|z| / √2) < 1e-300" in out


def test_a_benchmark_of_millions_prints_its_counts_with_thousands_separators(
        capsys: pytest.CaptureFixture[str]) -> None:
    """"39.02% of 5000001 = 1951000 items": every count evalstats prints reads as sizes do
    (6,138 per model), in its lines, its working and its refusals."""
    n = 5_000_001
    a = count_from_percentage(39.02, n)
    code, out, err = run_cli(capsys, "evalstats", "--pct-a", "39.02", "--pct-b", "41.5",
                             "--n", str(n), "--explain")
    assert code == 0, err
    assert f"A: 39.02% of {n:,} = {a.nearest_count:,} items" in out
    assert f"p_a = {a.nearest_count:,} / {n:,}" in out
    code, out, err = run_cli(capsys, "evalstats", "--discordant", "12000,15000", "--explain")
    assert code == 0 and "b=12,000, c=15,000 (net gap -3,000)" in out
    assert "b + c = 12,000 + 15,000 = 27,000" in out
    code, out, err = run_cli(capsys, "evalstats", "--pct-a", "39.02", "--pct-b", "41.5",
                             "--n", str(n), "--discordant", "120000,150000")
    assert code == 2 and "b - c = 120,000 - 150,000 = -30,000 items" in err


def test_discordant_counts_with_the_scores_size_a_paired_benchmark_at_their_share(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """39.02 % vs 41.46 % of 164 with b, c = 10, 14: the models disagree on 24 of the 164
    items, and a paired benchmark at that discordance is Connor's size for it, the same
    --discordance 24/164 gives, far under the unpaired one."""
    code, out, err = _cli(capsys, "--pct-a", "39.02", "--pct-b", "41.46", "--n", "164",
                          "--discordant", "10,14", "--json")
    assert code == 0, err
    data = json.loads(out)
    expected = items_needed_paired(68 / 164 - 64 / 164, 24 / 164)
    assert data["paired_items_needed"]["num_items"] == expected.num_items
    assert expected.num_items < data["unpaired_items_needed"]["num_items"]
    code, out, err = _cli(capsys, "--pct-a", "39.02", "--pct-b", "41.46", "--n", "164",
                          "--discordant", "10,14")
    assert f"disagreeing (--discordant's 24 of 164): {expected.num_items:,}" in out


def test_a_narrow_wilson_interval_keeps_the_digits_that_tell_its_ends_apart(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """50 % of a billion items: the interval is ±0.00003, which three decimals would print
    as [0.500, 0.500]."""
    code, out, err = _cli(capsys, "--pct-a", "50", "--pct-b", "60", "--n", "1000000000")
    assert code == 0, err
    w = wilson_interval(500_000_000, 1_000_000_000)
    low, high = out.split("A [")[1].split("]")[0].split(", ")
    assert low != high
    assert float(low) == pytest.approx(w.low, abs=1e-6)
    assert float(high) == pytest.approx(w.high, abs=1e-6)


@pytest.mark.parametrize(("alpha", "level"), [("0.05", "95"), ("0.0000001", "99.99999"),
                                              ("1e-12", "99.9999999999")])
def test_evalstats_names_the_level_it_computed_not_100_percent(
        capsys: pytest.CaptureFixture[str], alpha: str, level: str) -> None:
    """At alpha 1e-7 the intervals were labelled 'Wilson 100%', a level no interval short of
    [0, 1] has."""
    from ridgeline.evalstats import confidence_percent

    assert confidence_percent(float(alpha)) == level
    assert 100 - float(level) == pytest.approx(float(alpha) * 100)
    code, out, _ = run_cli(capsys, "evalstats", "--pct-a", "39.02", "--pct-b", "47.56", "--n",
                           "164", "--alpha", alpha)
    assert code == 0 and f"Wilson {level}%:" in out and "Wilson 100%" not in out
