#!/usr/bin/env python3
"""Cross-validated accuracy of the step-cost model (a benchmark, not a test).

    python scripts/crossval.py            # prints the tables, writes docs/accuracy.md
    python scripts/crossval.py --engine llama.cpp-cuda --rows out.json   # one engine's folds

With --engine, only the folds that hold out that engine's rows run, and only its rows are
scored: a change to one engine's profile is measured without refitting every engine (its fits
see the same training rows as the full run's, so its figures are the full run's for that
engine). That run prints its tables and leaves docs/accuracy.md alone; --rows writes each
scored row's signed error (predicted ÷ measured − 1), by held-out group, as JSON.

Rows: every CSV in validation/. measurements.csv, lowbatch.csv, rocm.csv and cuda.csv are
fitted as scripts/fit_profiles.py fits them (the serving engines together); the others are scored
in every fold and fitted in none (SCORED_ONLY): serving.csv (serving benchmarks at a
concurrency), eager.csv, moe_prefill.csv, offload.csv and pipeline.csv (speed rows fit_profiles.py
never fits, though moe_prefill.csv's vLLM rows set vLLM's MoE prompt slowdown and offload.csv's
sweep the host-bandwidth share, terms the folds keep), and the KV-capacity files. Leave one
accelerator out: fit every engine on the rows of all other accelerators, predict the held-out
accelerator's rows. Leave one source out: the same by source (S1…S6, L1…L16, R1…R14).
An engine with no training rows in a fold falls back to a generic prior, never to the
bundled profile (which saw the held-out rows). KV-capacity rows (those files' and
validation/kvlogs.csv's and hybrid.csv's engine start-up logs) come from the memory model and
need no fit. validation/h200/'s runs of ridgeline's own harness are scored in docs/h200.md.
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
FITTED = ("measurements.csv", "lowbatch.csv", "rocm.csv", "cuda.csv")  # as fit_profiles.py
# scored in every fold, fitted in none: what a new row of their kind would see
SCORED_ONLY = ("serving.csv", "eager.csv", "moe_prefill.csv", "offload.csv", "pipeline.csv",
               "kvlogs.csv", "hybrid.csv")
CSVS = tuple(ROOT / "validation" / name for name in (*FITTED, *SCORED_ONLY))
OUT = ROOT / "docs" / "accuracy.md"
PRIOR = EngineProfile("prior", 0.8, 0.5, 3e-4, 5e-6, source="generic prior")
TARGETS = {"decode_tok_s_per_user": 0.10, "prefill_tok_s": 0.10, "output_throughput_tok_s": 0.15,
           "output_throughput_tok_s_per_gpu": 0.15, "ttft_ms": 0.15, "gpu_blocks": 0.03,
           "kv_cache_gib": 0.03, "kv_cache_tokens": 0.03, "max_concurrency": 0.03}


# the scored-only files' rows, by id: no fold trains on them
SCORED_ONLY_IDS = frozenset(r.id for name in SCORED_ONLY
                            for r in read_measurements(ROOT / "validation" / name).rows)

def fold(args: tuple[list[Measurement], list[Measurement], frozenset[str]]
         ) -> list[Prediction]:
    """One held-out group's predictions, every engine fitted on ``train`` less the scored-only
    rows and ``slipped`` (the rows the bundled fit leaves out as unit slips, fit_profiles.py:
    they train no fold either, and are still scored where held out, as `validate` scores
    them)."""
    train, test, slipped = args
    train = [r for r in train if r.id not in SCORED_ONLY_IDS and r.id not in slipped]
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
    trains = {key(r) for r in rows if r.id not in SCORED_ONLY_IDS and r.id not in slipped}
    # a group with no training row leaves every fit as it is: one fold scores all of those
    apart = [g for g in groups if g in trains]
    rest = frozenset(groups) - trains
    jobs = [([r for r in rows if key(r) != g], [r for r in scored if key(r) == g], slipped)
            for g in apart]
    if rest:
        jobs.append((list(rows), [r for r in scored if key(r) in rest], slipped))
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
             file_of: dict[str, str]) -> list[str]:
    """One line per metric: its median |error| against its target on every row, on the
    shared set's rows alone and on the rows no fit saw (SCORED_ONLY files), each with its
    count, so that no verdict rests on rows it does not name."""
    def median(metric: str, where: Callable[[str], bool]) -> tuple[float, int] | None:
        errs = [abs(p.error) for p in preds if p.error is not None
                and rows[p.id].metric == metric and where(file_of[p.id])]
        return (statistics.median(errs), len(errs)) if errs else None

    def verdict(found: tuple[float, int], target: float) -> str:
        return (f"{found[0]:.1%} over {found[1]} {'row' if found[1] == 1 else 'rows'} — "
                f"{'met' if found[0] <= target else 'NOT met'}")

    out = []
    for metric, target in TARGETS.items():
        every = median(metric, lambda f: True)
        if every is None:
            continue
        line = f"- {metric} (target {target:.0%}): every row {verdict(every, target)}"
        shared = median(metric, lambda f: f == FITTED[0])
        if shared is not None and shared != every:
            line += f"; shared set alone {verdict(shared, target)}"
        unseen = median(metric, lambda f: f in SCORED_ONLY)
        if unseen is not None:
            files = sorted({file_of[p.id] for p in preds if p.error is not None
                            and rows[p.id].metric == metric and file_of[p.id] in SCORED_ONLY})
            line += f"; never fitted ({', '.join(files)}) {verdict(unseen, target)}"
        out.append(line)
    return out


# said beside the targets: which rows they rest on, and what the never-fitted files carry
TARGETS_NOTE = (
    "Targets (median |error|), on every row, on the shared set alone "
    f"(`{FITTED[0]}`, the copy of the shared published measurements) and on the files no "
    f"fit uses ({', '.join(f'`{n}`' for n in SCORED_ONLY)}: scored in every fold, fitted in "
    "none). Every CSV in `validation/` is scored; `validation/h200/`'s runs of ridgeline's own "
    "harness are in docs/h200.md. `moe_prefill.csv`'s TTFTs are client-side (HTTP, "
    "tokenisation and scheduling inside them: about 25 ms on its cookbook harness), and two "
    "terms no fold refits were set on never-fitted rows: vLLM's MoE prompt slowdown on "
    "`moe_prefill.csv`'s vLLM rows, the host-bandwidth share on `offload.csv`'s sweep "
    "(validation/README.md).")


def _engine_kind(r: Measurement) -> str:
    """An engine's KV-capacity rows (the memory model's, no step time) apart from its speed
    rows, whose error is the step-cost model's."""
    return f"{r.engine}: KV capacity" if r.metric in KV_METRICS else f"{r.engine}: speed"


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
        lines += [*table(preds, by_id, _engine_kind, "engine: rows"), ""]
        lines += [*table(preds, by_id, lambda r: f"{file_of[r.id]}: {r.metric}",
                         "file: metric"), ""]
        lines += [TARGETS_NOTE, "", *_targets(preds, by_id, file_of), ""]
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
