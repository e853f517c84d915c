#!/usr/bin/env python3
"""Cross-validated accuracy of the step-cost model (a benchmark, not a test).

    python scripts/crossval.py            # prints the tables, writes docs/accuracy.md
    python scripts/crossval.py --engine llama.cpp-cuda --rows out.json   # one engine's folds

With --engine, only the folds that hold out that engine's rows run, and only its rows are
scored: a change to one engine's profile is measured without refitting every engine (its fits
see the same training rows as the full run's, so its figures are the full run's for that
engine). That run prints its tables and leaves docs/accuracy.md alone; --rows writes each
scored row's signed error (predicted ÷ measured − 1), by held-out group, as JSON.

Rows: validation/measurements.csv, validation/lowbatch.csv, validation/rocm.csv and
validation/cuda.csv, fitted as scripts/fit_profiles.py fits them (the serving engines together);
validation/serving.csv is scored in every fold and fitted in none (SCORED_ONLY). Leave one accelerator
out: fit every engine on the rows of all other accelerators, predict the held-out
accelerator's rows. Leave one source out: the same by source (S1…S6, L1…L16, R1…R14).
An engine with no training rows in a fold falls back to a generic prior, never to the
bundled profile (which saw the held-out rows). KV-capacity rows (those files' and
validation/kvlogs.csv's engine start-up logs) come from the memory model and need no fit.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

from ridgeline.calibrate import SERVING_ENGINES, fit_engine
from ridgeline.engines import EngineProfile, engine_id
from ridgeline.measurements import KV_METRICS, Measurement, performance_rows, read_measurements
from ridgeline.predict import Prediction, predict, row_engine
from ridgeline.reports.validation import figure
from ridgeline.scoring import quantile
from ridgeline.unit_slips import slipped_against

ROOT = Path(__file__).resolve().parent.parent
CSVS = (ROOT / "validation" / "measurements.csv", ROOT / "validation" / "lowbatch.csv",
        ROOT / "validation" / "rocm.csv", ROOT / "validation" / "cuda.csv",
        ROOT / "validation" / "serving.csv", ROOT / "validation" / "kvlogs.csv")
OUT = ROOT / "docs" / "accuracy.md"
PRIOR = EngineProfile("prior", 0.8, 0.5, 3e-4, 5e-6, source="generic prior")
TARGETS = {"decode_tok_s_per_user": 0.10, "prefill_tok_s": 0.10, "output_throughput_tok_s": 0.15,
           "output_throughput_tok_s_per_gpu": 0.15, "ttft_ms": 0.15, "gpu_blocks": 0.03,
           "kv_cache_gib": 0.03, "kv_cache_tokens": 0.03, "max_concurrency": 0.03}


SCORED_ONLY = ROOT / "validation" / "serving.csv"  # an out-of-sample check: never fitted
SCORED_ONLY_KEYS = frozenset(r.source_key for r in read_measurements(SCORED_ONLY).rows)


def fold(args: tuple[list[Measurement], list[Measurement], frozenset[str]]
         ) -> list[Prediction]:
    """One held-out group's predictions, every engine fitted on ``train`` less the scored-only
    rows and ``slipped`` (the rows the bundled fit leaves out as unit slips, fit_profiles.py:
    they train no fold either, and are still scored where held out, as `validate` scores
    them)."""
    train, test, slipped = args
    train = [r for r in train if r.source_key not in SCORED_ONLY_KEYS and r.id not in slipped]
    profiles: dict[str, EngineProfile] = {}
    fits: dict[tuple[str, ...], EngineProfile] = {}
    trained = {row_engine(r) for r in performance_rows(train)}
    for engine in sorted({row_engine(r) for r in test}):
        family = SERVING_ENGINES if engine in SERVING_ENGINES else (engine,)
        if not trained & set(family):
            profiles[engine] = replace(PRIOR, engine=engine)
            continue
        if family not in fits:
            fits[family] = fit_engine(train, family[0], PRIOR, family=family)
        # under each engine's own name, as the bundled serving profile is given to each:
        # what an engine's name carries (vLLM's moe_prompt_expert_slowdown) prices its rows
        profiles[engine] = replace(fits[family], engine=engine)
    return [predict(r, profiles) for r in test]


def cross_validate(rows: Sequence[Measurement],
                   key: Callable[[Measurement], str],
                   engine: str | None = None,
                   only: Sequence[str] | None = None) -> list[Prediction]:
    """Each group held out in turn (``engine``: only that engine's rows scored, and only the
    groups that hold some run; ``only``: only these groups held out)."""
    scored = [r for r in rows if engine is None or row_engine(r) == engine]
    groups = sorted({key(r) for r in scored if not only or key(r) in only})
    slipped = frozenset(slipped_against(rows))
    jobs = [([r for r in rows if key(r) != g], [r for r in scored if key(r) == g], slipped)
            for g in groups]
    with ProcessPoolExecutor(max_workers=2) as pool:
        return [p for result in pool.map(fold, jobs) for p in result]


def table(preds: Sequence[Prediction], rows: dict[str, Measurement],
          key: Callable[[Measurement], str], title: str) -> list[str]:
    groups: dict[str, list[float]] = {}
    for p in preds:
        if p.error is not None:
            groups.setdefault(key(rows[p.id]), []).append(abs(p.error))
    out = [f"| {title} | rows | median abs error | p90 abs error |", "|---|---:|---:|---:|"]
    for g, errs in sorted(groups.items()):
        errs.sort()
        out.append(f"| {g} | {len(errs)} | {statistics.median(errs):.1%} | "
                   f"{quantile(errs, 0.9):.1%} |")
    return out


def _targets(preds: Sequence[Prediction], rows: dict[str, Measurement],
             shared: Sequence[Prediction]) -> list[str]:
    """One line per metric: its median |error| against its target, on every row and on the
    shared set's rows alone."""
    def median(of: Sequence[Prediction], metric: str) -> float | None:
        errs = [abs(p.error) for p in of if p.error is not None and rows[p.id].metric == metric]
        return statistics.median(errs) if errs else None

    out = []
    for metric, target in TARGETS.items():
        every, alone = median(preds, metric), median(shared, metric)
        if every is None:
            continue
        line = (f"- {metric}: median {every:.1%} against a target of {target:.0%} — "
                f"{'met' if every <= target else 'NOT met'}")
        if alone is not None and alone != every:
            line += (f"; shared set alone {alone:.1%} — "
                     f"{'met' if alone <= target else 'NOT met'}")
        out.append(line)
    return out


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", help="run only the folds of this engine's rows, score "
                        "only them, and leave docs/accuracy.md alone")
    parser.add_argument("--rows", help="write each scored row's signed error to this JSON file")
    parser.add_argument("--by", choices=("accelerator", "source"), action="append",
                        help="the leave-one-out kinds to run (default: both)")
    parser.add_argument("--hold-out", action="append", metavar="GROUP",
                        help="hold out only this accelerator or source (repeatable): a partial run")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    engine = engine_id(args.engine) if args.engine else None
    files = {csv.name: list(read_measurements(csv).rows) for csv in CSVS}
    rows = [r for file_rows in files.values() for r in file_rows]
    if engine is not None:
        files = {name: [r for r in file_rows if row_engine(r) == engine]
                 for name, file_rows in files.items()}
    by_id = {r.id: r for r in rows}
    file_of = {r.id: name for name, file_rows in files.items() for r in file_rows}
    kv = [predict(r) for r in rows if r.metric in KV_METRICS]
    counts = " and ".join(f"`validation/{name}` ({len(r)} rows)" for name, r in files.items())
    lines = ["# Accuracy of the step-cost model", "",
             f"Generated by `python scripts/crossval.py` from {counts}. "
             "Errors are |predicted − measured| / measured, "
             "cross-validated: the rows scored were not used to fit the profile that "
             "predicted them.", ""]
    worst: list[tuple[float, str, str]] = []
    scored: dict[str, list[dict[str, object]]] = {}
    kinds = args.by or ["accelerator", "source"]
    for name, key in (("accelerator", lambda r: r.gpu), ("source", lambda r: r.source_key)):
        if name not in kinds:
            continue
        perf = cross_validate(performance_rows(rows), key, engine, args.hold_out)
        preds = perf + [p for p in kv if engine is None or row_engine(by_id[p.id]) == engine]
        scored[name] = [{"id": p.id, "source": by_id[p.id].source_key, "gpu": by_id[p.id].gpu,
                         "metric": by_id[p.id].metric, "file": file_of[p.id],
                         "error": p.error, "reason": p.reason} for p in perf]
        missing = [p for p in preds if p.predicted is None]
        lines += [f"## Leave one {name} out", ""]
        lines += [*table(preds, by_id, lambda r: r.metric, "metric"), ""]
        lines += [*table(preds, by_id, lambda r: r.engine, "engine"), ""]
        lines += [*table(preds, by_id, lambda r: f"{file_of[r.id]}: {r.metric}",
                         "file: metric"), ""]
        shared = [p for p in preds if file_of[p.id] == CSVS[0].name]
        lines += ["Targets (median |error|), on every row and on the shared set alone "
                  f"(`{CSVS[0].name}`, the copy of the shared published measurements):",
                  "",
                  *_targets(preds, by_id, shared), ""]
        if missing:
            lines.append(f"{len(missing)} rows without a prediction: "
                         + "; ".join(f"{p.id} ({p.reason})" for p in missing[:5]))
        if name == "accelerator":
            worst = sorted(((abs(math.log(p.predicted / p.measured)), p.id,
                             f"{figure(p.predicted)} vs {figure(p.measured)}")
                            for p in preds if p.predicted), reverse=True)[:12]
    lines += ["## Worst rows (leave one accelerator out)", "",
              "| row | predicted vs measured |", "|---|---|"]
    lines += [f"| {i} | {v} |" for _, i, v in worst]
    text = "\n".join(lines) + "\n"
    if args.rows:
        Path(args.rows).write_text(json.dumps(scored, indent=1), encoding="utf-8")
    if engine is None and args.by is None and args.hold_out is None:
        OUT.parent.mkdir(exist_ok=True)
        OUT.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
