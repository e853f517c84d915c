"""Scoring predictions against measurements: each row's prediction (validate), and the
median and p90 |error| and the median bias by group (error_stats).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ridgeline.engines import EngineProfile
from ridgeline.measurements import Measurement
from ridgeline.predict import Prediction, predict


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


def error_stats(predictions: Sequence[Prediction], key: Callable[[Prediction], str]
                ) -> list[ErrorStats]:
    """Median and p90 |error| per group of predictions that have a prediction, and the
    median bias, read the same way for times, rates and capacities (Prediction.optimism)."""
    groups: dict[str, list[float]] = {}
    optimism: dict[str, list[float]] = {}
    for p in predictions:
        if p.error is not None and p.optimism is not None:  # both exist with a prediction
            groups.setdefault(key(p), []).append(p.error)
            optimism.setdefault(key(p), []).append(p.optimism)
    out = []
    for group, errors in sorted(groups.items()):
        absolute = sorted(abs(e) for e in errors)
        out.append(ErrorStats(group, len(errors), statistics.median(absolute),
                              quantile(absolute, 0.9), statistics.median(optimism[group])))
    return out


def validate(rows: Sequence[Measurement],
             profiles: Mapping[str, EngineProfile] | None = None) -> list[Prediction]:
    return [predict(row, profiles) for row in rows]
