"""The step-cost model's own record on a card: how far `ridgeline validate` puts its bundled
predictions from the published rows of the same card, engine profile, phase and model kind
(data/track_record.json, written by scripts/track_record.py from validation/*.csv). Where
those rows lean one way, a prediction for that card says so with their figure.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from ridgeline.datafiles import load_data
from ridgeline.engine_names import engine_name
from ridgeline.metric_divisions import THROUGHPUT_METRICS

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.engines import EngineProfile
    from ridgeline.measurements import Measurement
    from ridgeline.predict import Prediction

# Which metrics speak for which phase of a step: decode rates and serving throughput are
# decode steps' record; prefill rates and TTFTs are prefill's.
PHASE_METRICS = {"decode": ("decode_tok_s_per_user", *THROUGHPUT_METRICS),
                 "prefill": ("prefill_tok_s", "ttft_ms")}
MIN_ROWS = 5  # fewer rows on a card say too little to caution on
LEANING = 0.15  # a median optimism this far from 0 (either way) is worth a caution
# a median optimism this large (twice as fast, or more) reads as a factor, not a percentage:
# "278% faster" reads as 2.8x as readily as 3.8x, and the rows' measured times were 3.8x
AS_FACTOR = 1.0


@dataclass(frozen=True)
class RecordRow:
    """One validated row, as the record keeps it: + optimism where the prediction promised
    more than was measured (Prediction.optimism)."""

    id: str
    accelerator: str
    engine: str
    phase: str
    moe: bool
    model: str
    optimism: float
    file: str
    # a TTFT row's measured minus priced time, ms (None: another metric; the record file
    # leaves it out there)
    excess_ms: float | None = None


def phase_of(metric: str) -> str | None:
    """The phase a metric speaks for ("decode", "prefill"), or None (a KV capacity)."""
    return next((phase for phase, metrics in PHASE_METRICS.items() if metric in metrics), None)


def record_rows(rows: Sequence[Measurement], predictions: Sequence[Prediction],
                files: Sequence[str]) -> list[RecordRow]:
    """The record's rows: each predicted decode or prefill row with its card (as the catalog
    names it), the engine that priced it, whether its model is an MoE, and its optimism.
    ``files`` names the CSV each row came from."""
    from ridgeline.predict import deployment_for, row_engine

    out = []
    for row, prediction, file in zip(rows, predictions, files, strict=True):
        phase = phase_of(row.metric)
        if phase is None or prediction.optimism is None:
            continue
        dep = deployment_for(row)
        excess = (round(prediction.measured - prediction.predicted, 2)
                  if row.metric == "ttft_ms" and prediction.predicted is not None else None)
        out.append(RecordRow(row.id, dep.accelerator.id, row_engine(row), phase,
                             dep.model.moe is not None, dep.model.name,
                             round(prediction.optimism, 4), file, excess))
    return out


@lru_cache(maxsize=1)
def bundled_record() -> tuple[RecordRow, ...]:
    """data/track_record.json's rows."""
    return tuple(RecordRow(**row) for row in load_data("track_record.json")["rows"])


@dataclass(frozen=True)
class Leaning:
    rows: int
    median_optimism: float
    low: float
    high: float
    models: tuple[str, ...]
    engines: tuple[str, ...]
    files: tuple[str, ...]
    # the rows' measured minus priced times (ms) where every one is a TTFT, else ()
    excess_ms: tuple[float, ...] = ()


def leaning(records: Iterable[RecordRow], accelerator: str, engines: frozenset[str],
            phase: str, moe: bool) -> Leaning | None:
    """The record's rows of this card, these engines, this phase and model kind, summed up,
    or None where there are fewer than MIN_ROWS."""
    mine = [r for r in records if r.accelerator == accelerator and r.engine in engines
            and r.phase == phase and r.moe == moe]
    if len(mine) < MIN_ROWS:
        return None
    values = [r.optimism for r in mine]
    excess = sorted(r.excess_ms for r in mine if r.excess_ms is not None)  # TTFTs alone
    return Leaning(len(mine), statistics.median(values), min(values), max(values),
                   tuple(dict.fromkeys(r.model for r in mine)),
                   tuple(sorted({r.engine for r in mine})), tuple(sorted({r.file for r in mine})),
                   tuple(excess) if len(excess) == len(mine) else ())


@lru_cache(maxsize=256)
def record_leaning(profile: EngineProfile, accelerator: str, phase: str,
                   moe: bool) -> Leaning | None:
    """``leaning`` of the bundled record's rows on ``accelerator`` of every engine ``profile``
    prices (engines.bundled_twins; a MoE's prompt rows only of the twins whose routed experts
    are priced as its engine's), once per profile, card, phase and model kind: a plan asks
    it of every row it prints, two phases each. None where no engine is left."""
    from ridgeline.engines import bundled_twins, moe_prompt_expert_slowdown

    engines = frozenset(bundled_twins(profile))
    if phase == "prefill" and moe:
        # a twin whose MoE prompt steps are priced by another rule (vLLM's fused-MoE
        # slowdown) was not priced as this engine is: its rows do not speak for it
        own = moe_prompt_expert_slowdown(profile.engine)
        engines = frozenset(e for e in engines if moe_prompt_expert_slowdown(e) == own)
    if not engines:
        return None
    return leaning(bundled_record(), accelerator, engines, phase, moe)


def how_far(found: Leaning, where: str) -> str:
    """The rows' median and range, as the caution words them, ``where`` (the command that
    scores them) closing the range's parentheses: a percentage (17% slower, -21% to +3%), or
    a factor where the median is twice as fast or more; where every row is a TTFT, the
    measured times over the priced ones, and the excess in ms. B200's SGLang MoE TTFTs:
    measured 3.7x the priced time at the median (2.6x to 9.0x), +105 ms over it (+24 to
    +289 ms)."""
    if found.excess_ms:
        ms = found.excess_ms
        return (f"are one request's time to first token each, measured "
                f"{1 + found.median_optimism:.1f}x the priced time at the median "
                f"({1 + found.low:.1f}x to {1 + found.high:.1f}x), "
                f"{statistics.median(ms):+,.0f} ms over it ({ms[0]:+,.0f} to {ms[-1]:+,.0f} ms; "
                f"{where})")
    if found.median_optimism >= AS_FACTOR:
        return (f"were priced {1 + found.median_optimism:.1f}x as fast as measured at the median "
                f"({1 + found.low:.1f}x to {1 + found.high:.1f}x; {where})")
    way = "faster" if found.median_optimism > 0 else "slower"
    return (f"were priced {abs(found.median_optimism):.0%} {way} than measured at the median "
            f"({found.low:+.0%} to {found.high:+.0%}; {where})")


def track_record_caution(dep: Deployment, phase: str, profile: EngineProfile) -> str:
    """What the record says of ``dep``'s card where its rows lean LEANING or more one way,
    or "": the rows of every engine ``profile`` prices (engines.bundled_twins), none where it
    is the user's own calibration, which the record never scored; a MoE's prompt rows only of
    the twins whose routed experts are priced as this engine's (moe_prompt_expert_slowdown).
    DeepSeek-R1 decode on B300 under SGLang: the 10 rows came out 17 % slower than measured at
    the median. Nothing where the CDNA3 MoE caution already speaks for the card."""
    from ridgeline.predict import cdna3_moe_caution

    if cdna3_moe_caution(dep):
        return ""
    found = record_leaning(profile, dep.accelerator.id, phase, dep.model.moe is not None)
    if found is None or abs(found.median_optimism) < LEANING:
        return ""
    models = ", ".join(found.models[:3]) + (f" and {len(found.models) - 3} more"
                                            if len(found.models) > 3 else "")
    kind = "MoE" if dep.model.moe is not None else "dense"
    where = f"`ridgeline validate {' '.join(found.files)}`"
    named = ", ".join(map(engine_name, found.engines))
    return (f"on the {dep.accelerator.id}, the {found.rows} published {phase} rows of {kind} "
            f"models under {named} ({models}) {how_far(found, where)}: read "
            "this expectation in that light")
