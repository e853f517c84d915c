#!/usr/bin/env python3
"""Fit the bundled engine profiles to the measurements (reproducible).

    python scripts/fit_profiles.py            # writes src/ridgeline/data/profiles.json
    python scripts/fit_profiles.py --check    # fits, writes nothing; exit 1 where the
                                              # committed file is not this fit (stale)

Rows: validation/measurements.csv (the shared published measurements),
validation/lowbatch.csv (low-batch serving figures collected for ridgeline),
validation/rocm.csv (llama.cpp's ROCm backend on Radeon cards, from llama.cpp's pull requests),
validation/cuda.csv (llama.cpp's CUDA backend: MoE models and datacenter cards, collected for ridgeline) and
validation/h200/ (`ridgeline measure` on an H200: the torch-eager and torch-cudagraph rows of
dense models; its MoE rows are not fitted, see to_fit). The llama.cpp
backends are fitted one by one; TensorRT-LLM, vLLM and SGLang together (SERVING_ENGINES:
one profile fitted on all their rows); an engine with no rows gets a stated prior (PRIORS).
A row far off its prediction in the direction of a unit slip (a per-GPU throughput written as
the total) is left out and named, as `calibrate` leaves it out and `validate` marks it: judged
against the fit's own profiles, refitted until the rows they mark are the rows left out
(unit_slips.fit_without_slips), so a second run, or --check, fits the same.
validation/serving.csv (serving benchmarks at a concurrency) is never fitted: it is the serving
profile's out-of-sample check (scripts/crossval.py scores it, `ridgeline validate` too).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ridgeline.calibrate import SERVING_ENGINES, fit_engine, fit_profiles
from ridgeline.catalog import resolve_model
from ridgeline.engines import EngineProfile
from ridgeline.measurements import Measurement, read_measurement_files
from ridgeline.predict import harness_moe, row_engine
from ridgeline.unit_slips import fit_without_slips

ROOT = Path(__file__).resolve().parent.parent
CSVS = (ROOT / "validation" / "measurements.csv", ROOT / "validation" / "lowbatch.csv",
        ROOT / "validation" / "rocm.csv", ROOT / "validation" / "cuda.csv",
        *sorted((ROOT / "validation" / "h200").glob("*.csv")))
OUT = ROOT / "src" / "ridgeline" / "data" / "profiles.json"


# engines without rows: a stated prior
PRIORS = {
    "torch-eager": EngineProfile(
        "torch-eager", 0.6, 0.5, 1e-3, 1e-4, band_low=0.6, band_high=1.6,
        source="prior: eager PyTorch (one kernel launch per op, no CUDA graphs); not fitted — "
               "run `ridgeline measure` and `ridgeline calibrate` on your device"),
    "torch-cudagraph": EngineProfile(
        "torch-cudagraph", 0.7, 0.5, 1e-4, 2e-5, band_low=0.6, band_high=1.6,
        source="prior: eager PyTorch kernels replayed from a CUDA graph (no launch gaps, no "
               "fused kernels); not fitted — run `ridgeline measure` and `ridgeline "
               "calibrate` on your device"),
}


def to_fit(row: Measurement) -> bool:
    """All rows but `ridgeline measure`'s MoE ones: its experts run through torch._grouped_mm
    (half the bandwidth a dense matmul of the same bytes reaches at decode shapes) behind
    unfused routing kernels, which no serving engine runs (docs/h200.md). Those are kept and
    scored, not fitted: a profile has one bandwidth efficiency for every weight."""
    return not (row_engine(row).startswith("torch-")
                and harness_moe(row.engine, resolve_model(row.model)))


def fit_all(rows: Sequence[Measurement]) -> dict[str, EngineProfile]:
    """Every engine's profile from ``rows``: the llama.cpp backends and the torch harness one
    by one, the serving engines pooled (SERVING_ENGINES), PRIORS where an engine has none."""
    alone = [r for r in rows if row_engine(r) not in SERVING_ENGINES]
    profiles = fit_profiles(alone)
    serving = fit_engine(rows, SERVING_ENGINES[0], family=SERVING_ENGINES)
    for engine in SERVING_ENGINES:
        profiles[engine] = replace(serving, engine=engine)
    for engine, prior in PRIORS.items():
        profiles.setdefault(engine, prior)
    return profiles


def main() -> int:
    args = sys.argv[1:]
    if any(a not in ("--check",) for a in args):  # --help (or a typo) must not rewrite the file
        print(__doc__.split("\n\n")[1] if "--help" in args or "-h" in args
              else f"fit_profiles.py: unknown argument {next(a for a in args if a != '--check')!r}"
              " (only --check)", file=sys.stderr)
        return 0 if "--help" in args or "-h" in args else 2
    check = "--check" in args
    result = read_measurement_files(CSVS)
    for error in result.errors:
        print(f"skipped {error}", file=sys.stderr)
    rows = [r for r in result.rows if to_fit(r)]
    # judged first against the bundled profiles (this file), then against each fit
    profiles, left_out = fit_without_slips(rows, fit_all)
    for row_id, words in left_out.items():
        print(f"left out {row_id}: {words} (unit_slips.py)")
    data = {
        "_about": "Engine profiles used by step_cost. Written by scripts/fit_profiles.py from "
                  "validation/measurements.csv; do not edit by hand.",
        "engines": {e: p.to_dict() for e, p in sorted(profiles.items())},
    }
    text = json.dumps(data, indent=1) + "\n"
    if check:  # a model change that moves a fitted row's prediction leaves the file stale
        current = OUT.read_text(encoding="utf-8") == text
        print(f"{OUT.name}: {'current' if current else 'stale: run scripts/fit_profiles.py'}")
        return 0 if current else 1
    OUT.write_text(text, encoding="utf-8")
    for engine, p in sorted(profiles.items()):
        print(f"{engine:18s} bw {p.bandwidth_efficiency:.3f} compute {p.compute_efficiency:.3f} "
              f"step {p.step_overhead_s * 1e6:7.1f} µs layer {p.layer_overhead_s * 1e6:6.2f} µs "
              f"(prefill {(p.prefill_layer_overhead_s or p.layer_overhead_s) * 1e6:6.2f}) "
              + (f"matmul {p.matmul_overhead_s * 1e6:5.2f} µs " if p.matmul_overhead_s else "")
              + (f"MoE layer {p.moe_layer_overhead_s * 1e6:6.2f} µs "
                 if p.moe_layer_overhead_s else "")
              + f"band {p.band_low:.2f}-{p.band_high:.2f}"
              + (f" ceiling {p.bandwidth_cap_bytes_per_s / 1e12:.2f} TB/s"
                 if p.bandwidth_cap_bytes_per_s is not None else "") + f"  {p.source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
