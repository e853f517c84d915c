"""Rows far off their prediction in the direction of a unit slip: flagged, and not fitted.

A row whose measured value is FAR_OFF times or more off its prediction, and which read in
another unit lands within NEAR of it, was most likely written in that unit: a TPOT of
6.8 ms written as 6.8 tok/s where 147 is priced (1,000 ÷ 6.8), a TTFT of 60,000 µs written
as ms where 60 is priced, a per-GPU throughput written as the total of 8 GPUs. `validate`
still scores such a row (the reading is a guess, and a row far off for a real reason must
show in the summary) and says which slip it looks like; `calibrate` leaves it out, as it
leaves out a row past its roofline, and so does the bundled fit (scripts/fit_profiles.py,
through fit_without_slips: the mark is judged against the fit's own profiles). A slip that
makes a row faster than its roofline by 100× or more (seconds written as ms, for most TTFTs)
is refused before this, as unreadable (past_roofline).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ridgeline.engines import EngineProfile
from ridgeline.errors import InputError
from ridgeline.measurements import MIB_PER_GIB, UNITS, Measurement, performance_rows
from ridgeline.predict import predict

# calibrate's caution on rows "more than 5× off the bundled prediction": nearer than this a
# row is a slow build or a card the profile reads badly, not a slip
FAR_OFF = 5.0
# a reading this close to the prediction (either way) is taken as the unit the row was
# written in; the bundled profiles' p10-p90 bands are at most ×0.60-×1.43 wide
NEAR = 2.0
# a slip's reading this close to the prediction (either way) reconciles the row, within the
# bundled profiles' usual miss (median |err| 6-11 % on speed rows, docs/accuracy.md); farther,
# the reading is said to leave the row still that far off
RECONCILED = 0.2
# judge-then-refit rounds before fit_without_slips gives up: a row far enough off to be marked
# moves a profile fitted on many rows too little to unmark itself, so one round settles it
MAX_ROUNDS = 4


@dataclass(frozen=True)
class UnitSlip:
    """The unit a row's value looks written in, and the value read so (in the metric's
    unit): ``shown`` is the arithmetic ("1,000 ÷ 7.4 = 135.1 tok/s")."""

    reading: str
    value: float
    shown: str


Reading = tuple[str, float, str]  # (the slip, the value read so, the arithmetic)


def _figure(value: float) -> str:
    """60,000, not 6e+04; 147.1; 0.0068."""
    return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:,.4g}"


def _readings(row: Measurement) -> list[Reading]:
    """The slips a row of this metric can have been written with, each with the value it
    reads as and how; none where a slip would not change the value."""
    v, unit = row.value, UNITS.get(row.metric, "")
    if unit == "ms":
        return [("µs written as ms", v / 1e3, f"{_figure(v)} ÷ 1,000"),
                ("seconds written as ms", v * 1e3, f"{_figure(v)} × 1,000")]
    if unit == "GiB":
        return [("MiB written as GiB", v / MIB_PER_GIB,
                 f"{_figure(v)} ÷ {MIB_PER_GIB:,}")]
    if not unit.startswith("tok/s"):
        return []
    out: list[Reading] = [
        ("ms per token (a TPOT or an ITL) written as tok/s", 1e3 / v,
         f"1,000 ÷ {_figure(v)}"),
        ("seconds per token written as tok/s", 1 / v, f"1 ÷ {_figure(v)}"),
        ("thousands of tok/s written as tok/s", v * 1e3, f"{_figure(v)} × 1,000")]
    n = row.num_gpus
    if n > 1 and row.metric == "output_throughput_tok_s":
        out.append(("a per-GPU figure written as the total", v * n,
                    f"{_figure(v)} × {n} GPUs"))
    if n > 1 and row.metric == "output_throughput_tok_s_per_gpu":
        out.append(("the total written per GPU", v / n, f"{_figure(v)} ÷ {n} GPUs"))
    return out


def unit_slip(row: Measurement, predicted: float | None) -> UnitSlip | None:
    """The slip ``row`` looks written with, or None: its value is FAR_OFF times or more off
    ``predicted``, and a reading in another unit (_readings) lands within NEAR of it (the
    nearest such). 7.4 tok/s where Llama-3.1-8B at one user on an H100 is priced at 126.6:
    1,000 ÷ 7.4 = 135.1 tok/s, ms per token."""
    if predicted is None or predicted <= 0 or row.value <= 0:
        return None
    if abs(math.log(predicted / row.value)) < math.log(FAR_OFF):
        return None
    near = [(abs(math.log(value / predicted)), slip, value, how)
            for slip, value, how in _readings(row)]
    near = [n for n in near if n[0] <= math.log(NEAR)]
    if not near:
        return None
    _, slip, value, how = min(near)
    unit = UNITS[row.metric]
    return UnitSlip(slip, value, f"{how} = {_figure(value)} {unit}")


def slip_words(row: Measurement, slip: UnitSlip, predicted: float) -> str:
    """How far off ``predicted`` the row is, the slip it looks like and whether that reading
    reconciles it (within RECONCILED of the prediction), as `validate` flags it (still
    scored) and `calibrate` leaves it out: "525 tok/s is 6× off the prediction of 3,210; read
    as a per-GPU figure written as the total, 525 × 4 GPUs = 2,100 tok/s, still 35 % under
    it: a unit slip?" (TensorRT-LLM v0.6's LLaMA-2-70B TP4 row in
    validation/measurements.csv: 2,100 ÷ 3,210 − 1 = −35 %)."""
    times = max(predicted / row.value, row.value / predicted)
    off = slip.value / predicted - 1
    gap = round(abs(off) * 100)
    left = (f"within {max(gap, 1)} % of it" if abs(off) <= RECONCILED else
            f"still {gap} % {'under' if off < 0 else 'over'} it")
    return (f"{_figure(row.value)} {UNITS[row.metric]} is {times:,.0f}× off the prediction "
            f"of {_figure(predicted)}; read as {slip.reading}, {slip.shown}, {left}: a unit "
            "slip?")


def slipped_rows(rows: Sequence[Measurement],
                 predicted: Sequence[float | None]) -> dict[str, str]:
    """{row id: slip_words} for each of ``rows`` that looks written in another unit against
    its prediction (``predicted``, in the same order; None: unpredicted), as validate marks
    them and calibrate leaves them out."""
    return {row.id: slip_words(row, slip, p) for row, p in zip(rows, predicted, strict=True)
            if p is not None and (slip := unit_slip(row, p)) is not None}


def slipped_against(rows: Sequence[Measurement],
                    profiles: Mapping[str, EngineProfile] | None = None) -> dict[str, str]:
    """slipped_rows of ``rows``' throughput and latency rows (a KV row is not fitted), each
    priced on its engine's profile in ``profiles`` (None, or an engine it lacks: the
    bundled one, as `calibrate` judges)."""
    timed = performance_rows(rows)
    return slipped_rows(timed, [predict(r, profiles).predicted for r in timed])


def fit_without_slips(rows: Sequence[Measurement],
                      fit: Callable[[Sequence[Measurement]], Mapping[str, EngineProfile]],
                      profiles: Mapping[str, EngineProfile] | None = None
                      ) -> tuple[dict[str, EngineProfile], dict[str, str]]:
    """``fit`` on ``rows`` less those slipped_against its own result, and {row id:
    slip_words} of those left out. The mark depends on the profile the fit is to make: it is
    judged first against ``profiles`` (None: the bundled ones), then against each fit, until
    the rows a fit's own predictions mark are the rows it was fitted without. There, fitting
    again leaves out the same rows and gives the same profiles (scripts/fit_profiles.py run
    twice, or its --check), and `validate` on those profiles marks what they left out. An
    InputError where MAX_ROUNDS fits do not settle (a row marked by one fit, not the next)."""
    left_out = slipped_against(rows, profiles)
    flipped: list[str] = []
    for _ in range(MAX_ROUNDS):
        fitted = dict(fit([r for r in rows if r.id not in left_out]))
        judged = slipped_against(rows, fitted)
        if judged.keys() == left_out.keys():
            return fitted, judged
        flipped = sorted(judged.keys() ^ left_out.keys())
        left_out = judged
    raise InputError(f"no stable set of unit-slip rows after {MAX_ROUNDS} fits: "
                     f"{', '.join(flipped)} marked by one fit and not by the next")
