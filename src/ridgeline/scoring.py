"""Scoring predictions against measurements: each row's prediction (validate), which rows
their profile was fitted on (fitted_row_ids: their errors are in sample), and the median,
p90 and worst |error|, the shares within 10 % and 25 % and the median bias by group
(error_stats).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ridgeline.datafiles import engine_defaults
from ridgeline.engines import EngineProfile, profile_for
from ridgeline.errors import InputError
from ridgeline.measurements import KV_METRICS, Measurement
from ridgeline.predict import Prediction, predict, row_engine

# the shares of rows error_stats counts as close: within 10 % and within 25 % |error|
CLOSE_ERRORS = (0.10, 0.25)


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted ``values``, linear between neighbours (1.0 of none)."""
    if not values:
        return 1.0
    position = q * (len(values) - 1)
    low, high = math.floor(position), math.ceil(position)
    return values[low] + (values[high] - values[low]) * (position - low)


@dataclass(frozen=True)
class ErrorStats:
    group: str
    rows: int
    median_abs_error: float
    p90_abs_error: float
    median_bias: float  # + where the prediction promises more: faster, or more capacity
    max_abs_error: float  # the worst row's |error|: a tail the p90 can hide
    within_10_percent: float  # the share of rows within 10 % |error| (CLOSE_ERRORS)
    within_25_percent: float


def error_stats(predictions: Sequence[Prediction], key: Callable[[Prediction], str]
                ) -> list[ErrorStats]:
    """Median, p90 and worst |error| per group of predictions that have a prediction, the
    shares within 10 % and 25 %, and the median bias, read the same way for times, rates and
    capacities (Prediction.optimism). Errors of −5 %, +8 % and +30 %: median 8 %, worst 30 %,
    a third within 10 %, two thirds within 25 %."""
    groups: dict[str, list[float]] = {}
    optimism: dict[str, list[float]] = {}
    for p in predictions:
        if p.error is not None and p.optimism is not None:  # both exist with a prediction
            groups.setdefault(key(p), []).append(p.error)
            optimism.setdefault(key(p), []).append(p.optimism)
    out = []
    for group, errors in sorted(groups.items()):
        absolute = sorted(abs(e) for e in errors)
        within = [sum(e <= close for e in absolute) / len(absolute) for close in CLOSE_ERRORS]
        out.append(ErrorStats(group, len(errors), statistics.median(absolute),
                              quantile(absolute, 0.9), statistics.median(optimism[group]),
                              absolute[-1], *within))
    return out


def fitted_row_ids(rows: Sequence[Measurement],
                   profiles: Mapping[str, EngineProfile] | None = None) -> frozenset[str]:
    """The ids of ``rows`` whose prediction was fitted to them: by the profile pricing each
    (``profiles``' for its engine, else the bundled one; its fitted_ids), or by a term fitted
    beside the profiles (term_fitted_ids). Their errors are in sample, how far a fit bends to
    them, not how far off a row it never saw would be. A KV row prices no step and no profile
    is fitted to one: never in sample. Of validation/*.csv's 866 scored rows, 669 are in
    sample: 642 the bundled profiles' and 27 the two terms'."""
    ids = []
    fitted: dict[str, frozenset[str]] = {}  # by engine, each profile's ids read once
    for row in rows:
        if row.metric in KV_METRICS:
            continue
        engine = row_engine(row)
        if engine not in fitted:
            try:
                own = frozenset(profile_for(engine, profiles).fitted_ids)
            except InputError:  # an engine with no profile: its row has no prediction
                own = frozenset()
            fitted[engine] = own | term_fitted_ids(engine)
        if row.id in fitted[engine]:
            ids.append(row.id)
    return frozenset(ids)


def term_fitted_ids(engine: str) -> frozenset[str]:
    """The rows a term of ``engine`` beside its profile was fitted on, as engines.json records
    them (each rule's fitted_ids): llama.cpp's host bandwidth share under offload
    (scripts/fit_offload.py, offload.csv's 7 OF-IH rows) and vLLM's MoE prompt slowdown
    (scripts/fit_moe_prompt_slowdown.py, moe_prefill.csv's 20 vLLM rows)."""
    block = engine_defaults(engine)
    ids: list[str] = []
    for rule in (block.get("offload"), block.get("moe_prompt_expert_slowdown")):
        if isinstance(rule, dict):
            ids += rule.get("fitted_ids", [])
    return frozenset(ids)


def validate(rows: Sequence[Measurement],
             profiles: Mapping[str, EngineProfile] | None = None) -> list[Prediction]:
    return [predict(row, profiles) for row in rows]
