#!/usr/bin/env python3
"""The simulator against published serving benchmarks (a benchmark, not a test): each
configuration of validation/serving.csv (InferenceX: vLLM, SGLang, TensorRT-LLM at
concurrency 1-256) replayed as `ridgeline simulate --concurrency C` replays it.

    python scripts/bench_simulate_serving.py [--requests-per-user 10] [--min-requests 200]
                                             [--max-requests 5000] [--engine-defaults] [--seed 0]

A run takes the row's deployment as validate builds it (predict.deployment_for: weights, KV
dtype, engine and its memory rules and scheduling), the engine settings its notes state as
validate reads them (predict.kv_row_settings, past its max_model_len; --engine-defaults drops
them), the bundled profile, and max(10 × C, 200) requests, capped at 5,000 (no row reaches the
cap: C ≤ 256), their lengths drawn as the harness draws them, uniform in [0.8 L, L] around the
nominal L (the rows record the mean, 0.9 L). Steady state: the requests arriving from two mean
lifetimes in to one longest lifetime before the last arrival (the fill and the drain left out);
TPOT is their mean (the median where the source printed that), decode tok/s per user = 1 ÷ TPOT,
output tok/s = C × Σ output ÷ Σ end-to-end (Little's law: a closed loop's seats are never
empty). 'as run' reads the harness's own way instead: 10 × C requests, every one counted, the
output over the whole run's time. Beside both, `ridgeline validate`'s analytic error for the
row (predict.predict). error = simulated ÷ measured − 1. About 2 s on one core.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
import time
from dataclasses import dataclass, replace

from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.measurements import Measurement, read_measurements
from ridgeline.memory import EngineSettings
from ridgeline.predict import (
    Prediction,
    cdna3_moe_caution,
    deployment_for,
    kv_row_settings,
    predict,
    ran_eager,
)
from ridgeline.scoring import error_stats
from ridgeline.sim import build
from ridgeline.sim.config import sim_config, start_refusal
from ridgeline.sim.lanes import pipeline_lane, run_lanes
from ridgeline.sim.simulator import Simulator
from ridgeline.sim.workload import Workload

CSV = "validation/serving.csv"
DECODE = "decode_tok_s_per_user"
# the steady state starts this many mean request lifetimes in: past the first wave, whose C
# prompts all start at t = 0. A margin, not a fit: from 1 to 4 lifetimes no row's TPOT or
# output rate moves 0.2 % from what 2 read, nor a median |error| (14.3 %, 11.2 % without the
# CDNA3 MoE rows) a tenth of a point; from t = 0 a row moves up to 2.0 % (gpt-oss-120b on one
# MI300X at C = 256, its first wave's prompts stacked) (2026-12-05)
FILL_LIFETIMES = 2.0
HARNESS_PROMPTS_PER_USER = 10  # InferenceX: num prompts = CONC × 10


@dataclass(frozen=True)
class Served:
    """One closed-loop run read as a serving benchmark reads it."""

    tpot_s: float
    output_tok_s: float
    requests: int  # the requests counted
    note: str = ""


@dataclass(frozen=True)
class Outcome:
    steady: Served | None
    as_run: Served | None
    reason: str = ""  # why the simulator could not run the row


def group_key(row: Measurement) -> tuple[object, ...]:
    """Rows of one benchmark run: the same source, deployment, concurrency and lengths."""
    return (row.source_key, row.model, row.gpu, row.num_gpus, row.tp, row.engine,
            row.weights_dtype, row.kv_dtype, row.batch, row.input_len, row.output_len)


def length_spec(mean_tokens: int, notes: str) -> tuple[str, int]:
    """The harness's draw as a --input-len/--output-len spec, and its longest: uniform in
    [ratio × L, L] (vLLM benchmark_serving's randint(int(L × ratio), L + 1)), the row recording
    the mean, (1 + ratio) / 2 × L; fixed where the notes name no --random-range-ratio.
    922 at ratio 0.8: L = 1024, uniform:819,1024."""
    found = re.search(r"random-range-ratio\s+([0-9.]+)", notes)
    ratio = float(found.group(1)) if found else 1.0
    if ratio >= 1.0:
        return str(mean_tokens), mean_tokens
    nominal = round(mean_tokens / ((1 + ratio) / 2))
    return f"uniform:{int(nominal * ratio)},{nominal}", nominal


def settings_for(row: Measurement, defaults: bool, longest_tokens: int) -> EngineSettings:
    """The engine settings the row's notes state (kv_row_settings), its max_model_len the
    notes' --max-model-len or the engine's default rather than the row's mean context, at
    least the longest request drawn."""
    stated = EngineSettings() if defaults else kv_row_settings(row)
    max_len = row.setting_count("max_model_len") if not defaults else None
    if max_len is not None:
        max_len = max(max_len, longest_tokens)
    return replace(stated, max_model_len=max_len)


def read_served(rows: list[tuple], users: int, median: bool, window: bool,
                duration_s: float) -> Served:
    """TPOT and output tok/s of the simulator's per-request rows: the steady window's, the
    rate by Little's law (users × Σ output ÷ Σ end-to-end), or (window False) every
    request's, the rate over the run's duration as the harness reads it."""
    done = [(arrival_s, output, tpot_s, e2e_s)  # the export's columns, the finished requests
            for _, arrival_s, _, output, _, tpot_s, e2e_s, _, status, *_ in rows
            if status == "finished"]
    note = ""
    if window:
        mean_e2e_s = statistics.fmean(r[3] for r in done)
        low_s = FILL_LIFETIMES * mean_e2e_s
        high_s = max(r[0] for r in done) - max(r[3] for r in done)  # the drain starts after
        chosen = [r for r in done if low_s <= r[0] <= high_s]
        if len(chosen) < users:  # too short a run for a steady state: say so, count them all
            chosen, note = done, "no steady window (too few requests): all counted"
        output_tok_s = users * sum(r[1] for r in chosen) / sum(r[3] for r in chosen)
    else:
        chosen = done
        output_tok_s = sum(r[1] for r in done) / duration_s
    tpots_s = [r[2] for r in chosen if not math.isnan(r[2])]
    tpot_s = statistics.median(tpots_s) if median else statistics.fmean(tpots_s)
    return Served(tpot_s, output_tok_s, len(chosen), note)


def simulate(row: Measurement, requests: int, as_run_requests: int, defaults: bool,
             seed: int) -> Outcome:
    """The row's configuration as a closed loop of ``row.batch`` users: steady and as run."""
    users = row.batch or 1
    input_len, longest_input = length_spec(row.input_len or 1, row.notes)
    output_len, longest_output = length_spec(row.output_len or 1, row.notes)
    median = re.search(r"\bmedian TPOT\b", row.notes, re.I) is not None
    try:
        dep = deployment_for(row)
        profile = profile_for(dep.engine)
        if ran_eager(row):
            profile = profile.without_cuda_graphs()
        settings = settings_for(row, defaults, longest_input + longest_output)
        config = sim_config(dep, settings)
        if dep.engine == "sglang":  # the harness asks for exactly each output (ignore_eos)
            config = replace(config, ignore_eos=True)
        refusal = start_refusal(dep, settings, config)
        if refusal:
            fraction = settings.gpu_memory_utilization
            return Outcome(None, None, f"{refusal}; memory fraction "
                           f"{'the engine default' if fraction is None else fraction}")
        pp = dep.num_gpus // dep.tensor_parallel_size
        lane = pipeline_lane(config, pp)

        def run(count: int) -> tuple[list[tuple], float, str]:
            work = Workload(count, input_len, output_len, seed=seed)
            result = run_lanes(lambda w, n: Simulator(dep, profile, lane).run(
                w, closed_loop=n, keep_rows=True), work, pp, users)
            if not result.completed:
                reason, n = max(result.rec.rejected.items(), key=lambda item: item[1])
                raise InputError(f"the engine refused every request ({n:,}: {reason})")
            note = "; ".join(s for s in (
                f"{result.rejected:,} rejected" if result.rejected else "",
                f"{result.preemptions:,} preemptions" if result.preemptions else "") if s)
            return result.rec.rows, result.duration_s, note

        rows, duration_s, note = run(requests)
        steady = read_served(rows, users, median, True, duration_s)
        if as_run_requests != requests:
            rows, duration_s, _ = run(as_run_requests)
        as_run = read_served(rows, users, median, False, duration_s)
    except InputError as exc:
        return Outcome(None, None, str(exc))
    note = "; ".join(s for s in (steady.note, note) if s)
    return Outcome(replace(steady, note=note), as_run)


def value_of(row: Measurement, served: Served | None) -> float | None:
    """The row's metric from a run: 1 / TPOT, or the output rate in total or per GPU."""
    if served is None:
        return None
    if row.metric == DECODE:
        return 1.0 / served.tpot_s
    return served.output_tok_s / (row.num_gpus if row.metric.endswith("per_gpu") else 1)


def _err(p: Prediction | None) -> str:
    return "" if p is None or p.error is None else f"{p.error:+.1%}"


def _stats_cells(preds: list[Prediction]) -> str:
    stats = error_stats(preds, lambda p: "all")
    if not stats:
        return f"{'–':>7} {'–':>6} {'–':>7}"
    s = stats[0]
    return f"{s.median_abs_error:>7.1%} {s.p90_abs_error:>6.1%} {s.median_bias:>+7.1%}"


def summary(title: str, groups: dict[str, list[str]], kinds: dict[str, dict[str, Prediction]]
            ) -> None:
    """Median |error|, p90 |error| and median signed error (scoring.error_stats, as
    validate prints them) per group of row ids, for each estimate over the same rows."""
    print(f"\n{'':38}" + "".join(f"  {name:^22}" for name in kinds))
    print(f"{title:32} {'rows':>5}" + f"  {'median':>7} {'p90':>6} {'bias':>7}" * len(kinds))
    for label, ids in groups.items():
        print(f"{label:32} {len(ids):>5}" + "".join(
            "  " + _stats_cells([kind[i] for i in ids if i in kind]) for kind in kinds.values()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests-per-user", type=int, default=10,
                        help="requests per closed-loop user in the steady run (default 10)")
    parser.add_argument("--min-requests", type=int, default=200)
    parser.add_argument("--max-requests", type=int, default=5000)
    parser.add_argument("--engine-defaults", action="store_true",
                        help="the engines' default settings, not those the notes state")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    rows = list(read_measurements(CSV).rows)
    groups: dict[tuple[object, ...], list[Measurement]] = {}
    for row in rows:
        groups.setdefault(group_key(row), []).append(row)
    print(f"simulator build: {build()} (Python {sys.version.split()[0]}); {len(rows)} rows of "
          f"{CSV} in {len(groups)} runs; settings: "
          f"{'engine defaults' if args.engine_defaults else 'as the notes state'}\n")
    sim: dict[str, Prediction] = {}
    as_run: dict[str, Prediction] = {}
    analytic: dict[str, Prediction] = {}
    refused: list[tuple[str, str]] = []
    print("| run | C | dec meas | dec sim | err | as run | analytic | out meas | out sim | "
          "err | as run | analytic | note |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for members in groups.values():
        first = members[0]
        users = first.batch or 1
        requests = min(args.max_requests, max(args.requests_per_user * users, args.min_requests))
        outcome = simulate(first, requests, HARNESS_PROMPTS_PER_USER * users,
                           args.engine_defaults, args.seed)
        cells: dict[str, list[str]] = {DECODE: ["", "", "", "", ""], "out": ["", "", "", "", ""]}
        for row in members:
            analytic[row.id] = predict(row)
            steady, whole = value_of(row, outcome.steady), value_of(row, outcome.as_run)
            if steady is not None and whole is not None:
                sim[row.id] = Prediction(row.id, row.metric, row.value, steady)
                as_run[row.id] = Prediction(row.id, row.metric, row.value, whole)
            unit = "" if row.metric != "output_throughput_tok_s" else " tot"
            cells[DECODE if row.metric == DECODE else "out"] = [
                f"{row.value:,.4g}{unit}", "–" if steady is None else f"{steady:,.4g}",
                _err(sim.get(row.id)), _err(as_run.get(row.id)), _err(analytic[row.id])]
        stem = re.sub(r"-(dec|out)$", "", first.id)
        if outcome.reason:
            refused.append((stem, outcome.reason))
        note = outcome.reason or (outcome.steady.note if outcome.steady else "")
        print(f"| {stem} | {users} | " + " | ".join(cells[DECODE] + cells["out"]) +
              f" | {note} |", flush=True)

    ran = [r for r in rows if r.id in sim]
    by_metric = {"decode tok/s per user": [r.id for r in ran if r.metric == DECODE],
                 "output tok/s (total or per GPU)": [r.id for r in ran if r.metric != DECODE]}
    by_engine = {e: [r.id for r in ran if r.engine == e]
                 for e in sorted({r.engine for r in ran})}
    cdna3 = {r.id for r in ran if cdna3_moe_caution(deployment_for(r))}
    overall = {"all": [r.id for r in ran],
               "without cautioned CDNA3 MoE rows": [r.id for r in ran if r.id not in cdna3]}
    kinds = {"simulated": sim, "as run": as_run, "analytic": analytic}
    summary("metric", by_metric, kinds)
    summary("engine", by_engine, kinds)
    summary("subset", overall, kinds)
    print("\nerror = estimate ÷ measured − 1; bias: the median signed error (+ faster than "
          "measured); each column over the same rows; 'tot': the row's output rate is the "
          "total, else per GPU")
    for label, ids in overall.items():
        worst = sorted(ids, key=lambda i: -abs(sim[i].error or 0))[:5]
        print(f"\nworst simulated, {label}: " + "; ".join(
            f"{i} {_err(sim[i])} (analytic {_err(analytic[i]) or 'none'})" for i in worst))
    if refused:
        print(f"\nnot simulated ({len(refused)} {'run' if len(refused) == 1 else 'runs'}):")
        for rid, reason in refused:
            print(f"  {rid}: {reason}")
    print(f"\n{len(sim)} of {len(rows)} rows simulated in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
