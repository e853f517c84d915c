#!/usr/bin/env python3
"""Fit vLLM's MoE prompt slowdown (engines.json vllm.moe_prompt_expert_slowdown), and hold
each source out to see how well it carries (reproducible; writes nothing).

    python scripts/fit_moe_prompt_slowdown.py

Rows: validation/moe_prefill.csv's vLLM rows, the saturated prefill rates (sources M9-M12,
the M-number in each row's id). The slowdown multiplies the routed experts' priced arithmetic
on a step that carries prompt tokens (cost.StepRates). Each candidate on a grid of 1.0-8.0 in
steps of 0.1 scores every row; the fit is the candidate with the least sum of squared
ln(priced ÷ measured), over all the sources and with each held out in turn. Prints the fit,
each fold's, and the held-out rows' median |error| (validate's: priced ÷ measured - 1 for a
rate) without the slowdown and with their fold's.
"""

from __future__ import annotations

import math
import re
import statistics
import sys
from pathlib import Path
from unittest import mock

import ridgeline.cost
from ridgeline.measurements import Measurement, read_measurement_files
from ridgeline.past_roofline import refuse_past_roofline
from ridgeline.predict import row_engine
from ridgeline.scoring import validate

ROOT = Path(__file__).resolve().parent.parent
CSV = ROOT / "validation" / "moe_prefill.csv"
GRID = [round(1 + i / 10, 1) for i in range(71)]  # 1.0 … 8.0


def source(row: Measurement) -> str:
    """The source a row's id names: MP-M10-… is M10."""
    found = re.match(r"MP-(M\d+)-", row.id)
    return found.group(1) if found else row.id


def priced_at(rows: list[Measurement], slowdown: float) -> list[float]:
    """Each row's priced figure with vLLM's slowdown at ``slowdown``."""
    ridgeline.cost._cached_time.cache_clear()
    with mock.patch.object(ridgeline.cost, "moe_prompt_expert_slowdown",
                           lambda engine: slowdown if engine == "vllm" else 1.0):
        priced = [p.predicted for p in validate(rows)]
    ridgeline.cost._cached_time.cache_clear()
    if any(p is None for p in priced):
        raise SystemExit("a vLLM row of moe_prefill.csv has no prediction")
    return [float(p or 0.0) for p in priced]


def best(log_errors: dict[float, list[float]], keep: list[int]) -> float:
    """The grid value with the least sum of squared log errors over the rows ``keep``."""
    return min(GRID, key=lambda f: sum(log_errors[f][i] ** 2 for i in keep))


def vllm_rows() -> list[Measurement]:
    """moe_prefill.csv's vLLM rows, as validate reads them."""
    return [r for r in refuse_past_roofline(read_measurement_files([CSV])).rows
            if row_engine(r) == "vllm"]


def fit() -> tuple[float, dict[str, float], list[float], list[float]]:
    """The slowdown fitted on every vLLM row; each source's fold (fitted on the others); and
    the held-out rows' |error| without the slowdown and with their fold's."""
    rows = vllm_rows()
    measured = [p.measured for p in validate(rows)]
    priced = {f: priced_at(rows, f) for f in GRID}
    log_errors = {f: [math.log(p / m) for p, m in zip(priced[f], measured, strict=True)]
                  for f in GRID}
    everything = list(range(len(rows)))
    folds: dict[str, float] = {}
    before: list[float] = []
    after: list[float] = []
    for held in sorted({source(r) for r in rows}, key=lambda s: int(s[1:])):
        out = [i for i in everything if source(rows[i]) == held]
        folds[held] = fold = best(log_errors, [i for i in everything if i not in out])
        before += [abs(priced[1.0][i] / measured[i] - 1) for i in out]
        after += [abs(priced[fold][i] / measured[i] - 1) for i in out]
    return best(log_errors, everything), folds, before, after


def fitted_slowdown() -> float:
    """The slowdown fitted on every vLLM row of moe_prefill.csv."""
    return fit()[0]


def main() -> int:
    full, folds, before, after = fit()
    print(f"{len(before)} vLLM rows of {CSV.name} from {', '.join(folds)}: fitted on all, "
          f"{full:.1f}")
    print("each source held out, fitted on the rest: "
          + ", ".join(f"{held} {fold:.1f}" for held, fold in folds.items()))
    print(f"held-out median |error|: {statistics.median(before):.1%} without the slowdown, "
          f"{statistics.median(after):.1%} with each fold's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
