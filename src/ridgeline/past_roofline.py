"""Rows measured past their deployment's roofline: flagged, or refused as unreadable.

The roofline is a row's metric predicted on its deployment with efficiencies of 1 and no
overheads (cost.IDEAL): no engine beats it. A row past it by more than ROOFLINE_SLACK is
scored and flagged by `validate` and left out by `calibrate` (beyond_roofline); a row
UNREADABLE_PAST_ROOFLINE times past it is no measurement at all, and is moved to the read's
errors (refuse_past_roofline).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ridgeline.cost import IDEAL
from ridgeline.measurements import Measurement, ReadResult, performance_rows
from ridgeline.predict import predict, row_engine

LOWER_IS_FASTER = ("ttft_ms",)
ROOFLINE_SLACK = 1.05  # a row this much past the roofline is not this deployment's
# A row this many times past its deployment's roofline is no measurement of it: unreadable.
# Nothing real gets there: speculative decoding's published speed-ups reach about 6× (EAGLE-3,
# 6.5× at best), and a step verifying k drafted tokens streams the weights once for at most
# k + 1 tokens, so even 32 drafts, every one accepted, stay under 33× the one-token roofline;
# a card or model named wrong is off by its bandwidth or size ratio (an RTX 4090 named for a
# B200: 8×; a 70B model for an 8B one, ~9×). Unit slips and typos land far past it: seconds
# written as ms are 1,000× off, and 1e12 tok/s for Llama-3.1-8B on an H100 is nine orders of
# magnitude past its roofline of 223.
UNREADABLE_PAST_ROOFLINE = 100.0


def _rooflines(rows: Sequence[Measurement]) -> list[tuple[Measurement, float]]:
    """(row, the roofline's figure) for each performance row that has one: its metric on
    its deployment with efficiencies of 1 and no overheads (cost.IDEAL)."""
    table = {row_engine(r): replace(IDEAL, engine=row_engine(r)) for r in rows}
    figures = ((row, predict(row, table).predicted) for row in performance_rows(rows))
    return [(row, floor) for row, floor in figures if floor is not None]


def times_past(row: Measurement, floor: float) -> float:
    """How many times faster than the roofline's ``floor`` the row was measured (under 1:
    slower, as every engine is)."""
    return floor / row.value if row.metric in LOWER_IS_FASTER else row.value / floor


def beyond_roofline(rows: Sequence[Measurement]) -> list[tuple[Measurement, float]]:
    """The rows measured faster than the roofline lets their deployment run (a card named
    wrong, speculative decoding): (row, the roofline's figure). An engine cannot beat it, so
    no efficiency up to 100 % fits them."""
    return [(row, floor) for row, floor in _rooflines(rows)
            if (row.value * ROOFLINE_SLACK < floor if row.metric in LOWER_IS_FASTER
                else row.value > floor * ROOFLINE_SLACK)]


def why_past_roofline(row: Measurement) -> str:
    """What most likely put ``row`` past its roofline, as `validate` flags it and `calibrate`
    leaves it out: a TTFT under a millisecond is seconds written as ms; a longer one a card
    named wrong or a prompt served from a prefix cache (speculative decoding drafts output
    tokens, never the prompt); any other row a card named wrong or speculative decoding."""
    if row.metric == "ttft_ms":
        return ("a TTFT under a millisecond: seconds written as ms?" if row.value < 1 else
                "is the card right? was the prompt served from a prefix cache?")
    return "is the card right? speculative decoding?"


def refuse_past_roofline(result: ReadResult) -> ReadResult:
    """``result`` with each row UNREADABLE_PAST_ROOFLINE or more times past its deployment's
    roofline moved from its rows to its errors, named with why (as a negative value is):
    `validate` would score it at −100 % and `calibrate` would have to leave it out."""
    impossible = {row.id: (row, floor) for row, floor in _rooflines(result.rows)
                  if times_past(row, floor) >= UNREADABLE_PAST_ROOFLINE}
    if not impossible:
        return result
    errors = tuple(
        f"{row.id}: {row.value:,.4g} {row.unit} is {times_past(row, floor):,.0f}× faster than "
        f"the roofline's {floor:,.4g} {row.unit} for {row.model} on {row.num_gpus} x {row.gpu}; nothing "
        f"real runs {UNREADABLE_PAST_ROOFLINE:g}× past its roofline, speculative decoding "
        "included (a unit slip? a typo?)" for row, floor in impossible.values())
    return ReadResult(tuple(r for r in result.rows if r.id not in impossible),
                      result.errors + errors)
