"""Parsing sizes and counts at the edge."""

from __future__ import annotations

import math

import pytest

from ridgeline.errors import InputError
from ridgeline.units import (
    GIB,
    LATENCY_SECONDS_FROM_S,
    MAX_COUNT,
    fmt_latency,
    fmt_latency_limit,
    fmt_share,
    fmt_total_tok_s,
    latency_figure,
    latency_unit,
    ordinal,
    parse_bytes,
    parse_count,
    parse_count_list,
    share_of_requests,
)


def test_lower_case_k_is_decimal_and_upper_case_is_binary_like_vllm() -> None:
    assert parse_count("128k") == 128_000
    assert parse_count("128K") == 131_072
    assert parse_count("2048") == 2048


def test_gb_and_gib_are_different_numbers() -> None:
    assert parse_bytes("80GB") == 80e9
    assert parse_bytes("80 GiB") == 80 * GIB
    assert parse_bytes("24") == 24 * GIB


def test_lists_of_counts() -> None:
    assert parse_count_list("1,8,32") == [1, 8, 32]


@pytest.mark.parametrize("text", ["", "abc", "1.5", "-4", "12q"])
def test_bad_counts_are_refused(text: str) -> None:
    with pytest.raises(InputError):
        parse_count(text)


def test_usd_per_million_tokens_is_the_hourly_price_over_an_hours_tokens() -> None:
    from ridgeline.units import usd_per_million_tokens

    assert usd_per_million_tokens(2.99, 1000) == pytest.approx(2.99 / 3.6)  # 3.6 M tokens/h
    assert usd_per_million_tokens(None, 1000) is None
    assert usd_per_million_tokens(2.99, 0) is None


def test_a_price_per_hour_keeps_the_digits_it_carries_and_at_least_cents() -> None:
    from ridgeline.units import fmt_usd_per_hour

    assert fmt_usd_per_hour(2.99) == "$2.99"
    assert fmt_usd_per_hour(1.861) == "$1.861"  # not $1.86: 19 of them bill $35.36
    assert fmt_usd_per_hour(0.8048) == "$0.8048"
    assert fmt_usd_per_hour(6) == "$6.00"
    assert fmt_usd_per_hour(1234.5) == "$1,234.50"


def test_decimal_bytes_take_the_unit_that_keeps_them_short() -> None:
    from ridgeline.units import fmt_decimal_bytes

    assert fmt_decimal_bytes(65_536**2 * 2) == "8.59 GB"
    assert fmt_decimal_bytes(1.717e18) == "1.72 EB"
    assert fmt_decimal_bytes(3.0e14) == "300 TB"
    assert fmt_decimal_bytes(512) == "512 B"


def test_decimal_bytes_past_the_largest_unit_stay_plain_numbers() -> None:
    from ridgeline.units import fmt_decimal_bytes

    assert fmt_decimal_bytes(2.25e21) == "2,250 EB"


def test_a_list_where_one_count_is_taken_is_named_as_such() -> None:
    with pytest.raises(InputError, match="takes one whole number, not a list; got '4,8'"):
        parse_count("4,8", "number of GPUs")
    with pytest.raises(InputError, match="must be a whole number such as"):
        parse_count("4,x", "number of GPUs")


def test_a_decimal_with_a_binary_suffix_is_refused_as_vllm_refuses_it() -> None:
    # vLLM's human_readable_int: "Decimals are not allowed with binary suffixes like K"
    assert parse_count("25.6k") == 25_600 and parse_count("32K") == 32_768
    with pytest.raises(InputError, match="decimals are not allowed with binary suffixes"):
        parse_count("1.5G", "kv_cache_memory_bytes")


def test_ordinals_read_as_spoken() -> None:
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 112, 1001)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "112th", "1,001st"]


def test_the_count_limit_is_spelled_as_the_parser_reads_it() -> None:
    """The refusal of a count past 10^12 states the limit in a form parse_count accepts (not
    1e+12, which it refuses), and that form is the limit."""
    import re

    with pytest.raises(InputError) as refused:
        parse_count("2t", "context length")
    limit = re.search(r"at most (\S+) \((\w+)\)", str(refused.value))
    assert limit is not None
    assert parse_count(limit.group(1)) == parse_count(limit.group(2)) == MAX_COUNT


def test_a_flags_limit_is_spelled_so_the_flag_takes_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--batch past its limit states the limit in forms the flag itself reads back: a list
    flag would read 1,000,000 as three entries (1, 0 and 0) and refuse it."""
    import re

    from ridgeline.cli import main
    from ridgeline.cli_types import MAX_BATCH

    for argv in (["decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "1,2m"],
                 ["prefill", "llama-3.1-8b", "--gpu", "h100", "--batch", "2m"]):
        with pytest.raises(SystemExit):
            main(argv)
        err = capsys.readouterr().err
        limit = re.search(r"at most (\S+) \((\w+)\), got (\S+) ", err)
        assert limit is not None, err
        for form in limit.groups()[:2]:
            assert parse_count_list(form, "batch") == [MAX_BATCH]
        assert parse_count_list(limit.group(3), "batch") == [2 * MAX_BATCH]


def test_a_count_of_sequences_is_illustrated_with_counts_not_token_lengths(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--batch and --running refuse a bad value with examples of a batch, each of which the
    flag takes; a token length still gets token examples."""
    import re

    from ridgeline.cli import main

    for argv in (["decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "x"],
                 ["utilization", "--gpu", "h100", "--running", "x"]):
        with pytest.raises(SystemExit):
            main(argv)
        err = capsys.readouterr().err
        shown = re.search(r"such as (.+), got", err)
        assert shown is not None and "128K" not in shown.group(1), err
        for example in re.split(r", | or ", shown.group(1)):
            assert parse_count(example) <= 1024
    with pytest.raises(SystemExit):
        main(["decode", "llama-3.1-8b", "--gpu", "h100", "--context", "x"])
    assert "128K" in capsys.readouterr().err


@pytest.mark.parametrize("share", [1e-5, 1.43e-5, 3e-6, 2.5e-4, 9.99e-4])
def test_a_tiny_share_of_requests_reads_as_one_in_so_many(share: float) -> None:
    text = share_of_requests(share)
    assert text.startswith("about 1 in ") and text.endswith(" requests")
    many = int(text.removeprefix("about 1 in ").removesuffix(" requests").replace(",", ""))
    assert many == pytest.approx(1 / share, rel=0.05)  # two significant figures
    assert "e-" not in text and "%" not in text
    assert share_of_requests(share, "this load's") == \
        f"about 1 in {many:,} of this load's requests"


@pytest.mark.parametrize("share, digits", [(1e-3, 2), (0.0035, 2), (0.0123, 1), (0.25, 1)])
def test_an_ordinary_share_of_requests_is_a_percentage_to_the_digits_that_tell(
        share: float, digits: int) -> None:
    text = share_of_requests(share)
    percent, rest = text.split("% ", 1)
    assert rest == "of the requests"
    assert len(percent.split(".")[1]) == digits
    assert float(percent) == pytest.approx(100 * share, abs=0.5 * 10 ** -digits)


@pytest.mark.parametrize("tok_s, text", [(9.49, "9.5"), (48.7, "48.7"), (99.94, "99.9"),
                                         (99.96, "100"), (1230.4, "1,230")])
def test_a_total_rate_keeps_the_per_user_precision_while_it_is_small(
        tok_s: float, text: str) -> None:
    """Beside a per-user rate printed to 0.1 tok/s, a total under 100 keeps that place (batch
    1's 9.5 beside 9.5, not 9), and from 100 up prints whole."""
    assert fmt_total_tok_s(tok_s) == text


@pytest.mark.parametrize("share", [0.003, 1e-6, 0.9996, 0.99999, 0.42, 0.0, 1.0])
def test_a_share_reads_0_or_100_percent_only_when_it_is(share: float) -> None:
    """decode had printed 0.3 % of batch 1's speed as "0%"."""
    shown = float(fmt_share(share).rstrip("%"))
    assert (shown == 0) == (share == 0) and (shown == 100) == (share == 1)
    assert shown == pytest.approx(share * 100, abs=0.5)


def test_a_share_keeps_its_side_of_a_bound_and_its_places_elsewhere() -> None:
    assert fmt_share(0.42) == f"{0.42:.0%}" and fmt_share(0.423, 1) == f"{0.423:.1%}"
    above, below = fmt_share(1.00015, bounds=(1.0,)), fmt_share(0.49996, bounds=(0.5,))
    assert float(above.rstrip("%")) > 100 and float(below.rstrip("%")) < 50


@pytest.mark.parametrize(("share", "side"), [(1e-9, "over 0"), (1e-12, "over 0"),
                                             (1 - 1e-12, "under 100"), (1 + 1e-12, "over 100")])
def test_a_share_within_a_millionth_of_a_percent_of_a_bound_says_which_side(
        share: float, side: str) -> None:
    """The fallback had printed two significant figures: 1e-9 as '1e-07%', 1 − 1e-12 as
    '1e+02%'."""
    assert fmt_share(share) == f"just {side}%" and not any(s in fmt_share(share, 1) for s in ("e-", "e+"))


def test_a_share_of_minus_zero_reads_0_percent() -> None:
    assert fmt_share(-0.0) == fmt_share(0.0) == "0%"
    assert fmt_share(-1e-9, bounds=(0.9,)) == "0%"


def test_a_latency_reads_in_ms_below_100_s_and_in_seconds_from_there() -> None:
    """4,144,765.8 ms is counted on fingers; 4,144.8 s is read. A caller's ms format (TTFT
    whole, TPOT to 0.1 ms) holds below the switch, seconds to 0.1 s from it."""
    assert fmt_latency(0.0432) == "43.2 ms" and fmt_latency(0.0432, ",.0f") == "43 ms"
    assert fmt_latency(LATENCY_SECONDS_FROM_S - 0.01) == "99,990.0 ms"
    assert fmt_latency(LATENCY_SECONDS_FROM_S) == "100.0 s"
    assert fmt_latency(4144.7658) == fmt_latency(4144.7658, ",.0f") == "4,144.8 s"


def test_an_slo_limit_keeps_the_ms_it_was_typed_in_until_100_s() -> None:
    """--slo-ttft-ms 1000 reads '1000 ms' as before; 300000 reads '300 s'; set against a
    latency in seconds each side says its unit."""
    assert fmt_latency_limit(1.0) == "1000 ms" and fmt_latency_limit(0.0125) == "12.5 ms"
    assert fmt_latency_limit(300.0) == "300 s"
    assert f"{fmt_latency(4144.7658)} > {fmt_latency_limit(1.0)}" == "4,144.8 s > 1000 ms"


def test_a_latency_table_switches_to_seconds_only_when_an_entry_reaches_100_s() -> None:
    assert latency_unit([0.0085, LATENCY_SECONDS_FROM_S - 1e-6]) == "ms"
    assert latency_unit([0.0085, LATENCY_SECONDS_FROM_S]) == "s"
    assert latency_unit([0.0085, math.nan, math.inf]) == "ms"  # none measured, or never
    assert latency_unit([]) == "ms"


def test_a_table_in_seconds_keeps_the_digits_its_ms_figures_had() -> None:
    """Tenths of a second from 100 s, four significant figures from 1 s, and below 1 s the
    0.1 ms the ms table shows: 98.5 ms reads 0.0985, not 0.1."""
    assert [latency_figure(x, "s") for x in (2302.6757, 12.3456, 1.23449, 0.0985)] == [
        "2,302.7", "12.35", "1.234", "0.0985"]
    for x in (0.0985, 0.4683, 0.00812):
        assert f"{float(latency_figure(x, 's')) * 1e3:.1f}" == latency_figure(x, "ms")
    assert latency_figure(math.nan, "s") == latency_figure(math.nan, "ms") == "-"
