"""The first line decode and prefill share where some point does not run
(reports.refusal_headline): each clause built from the rows it is given."""

from __future__ import annotations

import pytest

from ridgeline.raw_fit import FitCheck
from ridgeline.reports.refusal_headline import (
    DECODE,
    PREFILL,
    Row,
    point_refusal,
    refusal_headline,
)
from tests.conftest import run_cli

GB = 1e9
H100 = 85.0 * GB  # an H100's memory as fit counts it
WEIGHTS = 72.7 * GB  # Llama-3.1-70B at fp8
ON = "vLLM 0.34"
HINT = "(`ridgeline fit` for the breakdown)"
START = "vLLM would refuse to start at its default max_model_len"
POOL = "vLLM cannot run a batch of 62 at 8,000 tokens of context: its KV pool runs at most 60"


def _row(batch: int, kv_gb: float, runs: bool = True, reason: str = "",
         held: bool = False, weight_bytes: float = WEIGHTS) -> Row:
    fit = FitCheck(weight_bytes, kv_gb * GB, H100)
    return Row(f"batch {batch:,} at 2,000 tokens", fit, runs and fit.fits,
               fit.shortfall_bytes, reason, held)


def _shortfall(row: Row) -> str:
    return row.fit.headline().removeprefix("DOES NOT FIT: ")


def test_every_row_running_gives_no_line() -> None:
    assert refusal_headline([_row(1, 0.7), _row(8, 5.2)], ON, DECODE, HINT) == ""


def test_one_row_leads_with_its_own_verdict() -> None:
    """A point alone: the memory's DOES NOT FIT, or the engine's refusal with the hint, or,
    where the pool runs fewer at once, DOES NOT RUN AT ONCE without it."""
    unfit = _row(32, 21.0)
    assert refusal_headline([unfit], ON, DECODE, HINT) == unfit.fit.headline()
    start = _row(1, 0.7, runs=False, reason=START)
    assert refusal_headline([start], ON, DECODE, HINT) == f"DOES NOT FIT on {ON}: {START} {HINT}"
    pool = _row(62, 8.0, runs=False, reason=POOL, held=True)
    assert point_refusal(pool, ON, HINT) == f"DOES NOT RUN AT ONCE on {ON}: {POOL}"


def test_some_rows_refused_counts_them_with_the_memorys_and_names_the_refusal_first() -> None:
    """The README's case with a point that runs beside it: batch 1 runs, batch 8 vLLM would
    not start (say), batch 32 is past the memory."""
    runs, refused, unfit = _row(1, 0.7), _row(8, 5.2, runs=False, reason=START), _row(32, 21.0)
    line = refusal_headline([runs, refused, unfit], ON, DECODE, HINT)
    assert line == (f"2 of 3 points do not run on {ON}: {START} {HINT}; and {unfit.where} does "
                    f"not fit in memory: {_shortfall(unfit)}")
    one = refusal_headline([runs, refused], ON, PREFILL)  # agreeing in number, prefill's noun
    assert one == f"1 of 2 prompts does not run on {ON}: {START}"


def test_all_refused_for_one_reason_says_it_once_with_the_worst_shortfall() -> None:
    rows = [_row(1, 0.7, runs=False, reason=START), _row(2, 1.3, runs=False, reason=START),
            _row(32, 21.0), _row(64, 42.0)]
    line = refusal_headline(rows, ON, DECODE, HINT)
    assert line == (f"DOES NOT FIT on {ON} at any of the 4 points: {START} {HINT}; the worst of "
                    f"the 2 past the memory, {rows[3].where}: {_shortfall(rows[3])}")
    assert line.count(START) == 1
    prefill = refusal_headline(rows[:2], ON, PREFILL)
    assert prefill == f"DOES NOT FIT on {ON} for any of the 2 prompts: {START}"
    # a pool that runs some says DOES NOT RUN, its count already in the reason: no hint
    held = [_row(62, 8.0, runs=False, reason=POOL, held=True), _row(64, 42.0)]
    assert refusal_headline(held, ON, DECODE, HINT) == (
        f"DOES NOT RUN on {ON} at any of the 2 points: {POOL}; and {held[1].where} does not "
        f"fit in memory: {_shortfall(held[1])}")


def test_two_reasons_decode_names_the_first_and_prefill_counts_the_rows() -> None:
    rows = [_row(62, 8.0, runs=False, reason=POOL, held=True),
            _row(1, 0.7, runs=False, reason=START), _row(2, 1.3, runs=False, reason=START)]
    assert refusal_headline(rows, ON, DECODE, HINT) == (
        f"DOES NOT RUN on {ON} at any of the 3 points: {POOL}; the engine refuses 1 more "
        "(the table)")
    assert refusal_headline(rows, ON, PREFILL) == (
        f"DOES NOT RUN on {ON} for any of the 3 prompts: the engine refuses 3 that fit the "
        "memory (under the table)")


def test_memory_only_names_the_largest_row_past_it_whatever_the_order() -> None:
    """No refusal: how many do not fit, and the largest (decode's worst shortfall, prefill's
    longest prompt) however the rows were listed; where none fits, decode leads with DOES NOT
    FIT, decode's and prefill's alike, and says where the weights alone are past the memory."""
    small, big, runs = _row(32, 21.0), _row(64, 42.0), _row(1, 0.7)
    for rows in ([runs, big, small], [runs, small, big]):
        assert refusal_headline(rows, ON, DECODE) == (
            f"2 of 3 points do not fit; the worst, {big.where}: {_shortfall(big)}")
    assert refusal_headline([runs, small], ON, PREFILL) == (
        f"1 of 2 prompts does not fit; the longest, {small.where}: {_shortfall(small)}")
    heavy = [_row(b, kv, weight_bytes=141.1 * GB) for b, kv in ((1, 0.7), (16, 10.0))]
    assert refusal_headline(heavy, ON, DECODE) == (
        f"DOES NOT FIT at any of the 2 points; the worst, {heavy[1].where}: "
        f"{_shortfall(heavy[1])}; the weights alone, 141.1 GB, exceed the memory at any batch")
    assert refusal_headline([small, big], ON, DECODE).endswith(_shortfall(big))  # room: no claim
    assert refusal_headline(heavy, ON, PREFILL) == (
        f"DOES NOT FIT for any of the 2 prompts; the longest, {heavy[1].where}: "
        f"{_shortfall(heavy[1])}; the weights alone, 141.1 GB, exceed the memory whatever the "
        "prompt")


def test_a_prefill_table_names_its_longest_prompt_past_the_memory_in_any_order(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B in bf16 on one H100: neither 2,000 nor 8,000 tokens fits (141.1 GB of
    weights). Listed 8,000 first, the line named the last listed, 2,000, 'the longest'."""
    argv = ["prefill", "llama-3.1-70b", "--gpu", "h100", "--prompt-len"]
    _, ordered, _ = run_cli(capsys, *argv, "2000,8000")
    code, reversed_, _ = run_cli(capsys, *argv, "8000,2000")
    first = reversed_.splitlines()[0]
    assert code == 0 and first == ordered.splitlines()[0]
    assert first.startswith("DOES NOT FIT for any of the 2 prompts; the longest, 8,000 tokens: ")
