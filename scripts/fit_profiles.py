#!/usr/bin/env python3
"""Fit the bundled engine profiles to validation/measurements.csv (reproducible).

    python scripts/fit_profiles.py            # writes src/ridgeline/data/profiles.json

Engines with throughput or latency rows are fitted; the rest borrow a fitted profile
of the closest engine, and say so in their `source`.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from ridgeline.calibrate import fit_profiles
from ridgeline.engines import EngineProfile
from ridgeline.measurements import read_measurements

ROOT = Path(__file__).resolve().parent.parent
CSV = ROOT / "validation" / "measurements.csv"
OUT = ROOT / "src" / "ridgeline" / "data" / "profiles.json"
# engine without rows -> the fitted engine it borrows from, and why
BORROW = {
    "vllm": ("trtllm", "CUDA-graph serving engine like TensorRT-LLM; the measurements hold no "
             "vLLM throughput rows"),
    "sglang": ("trtllm", "CUDA-graph serving engine like TensorRT-LLM; no SGLang rows"),
    "llama.cpp-rocm": ("llama.cpp-vulkan", "llama.cpp on an AMD GPU; no ROCm rows, the Vulkan "
                       "rows include Radeon"),
}


# engines with neither rows nor a close donor: a stated prior
PRIORS = {
    "torch-eager": EngineProfile(
        "torch-eager", 0.6, 0.5, 1e-3, 1e-4, band_low=0.6, band_high=1.6,
        source="prior: eager PyTorch (one kernel launch per op, no CUDA graphs); not fitted — "
               "run `ridgeline measure` and `ridgeline calibrate` on your device"),
}


def main() -> int:
    result = read_measurements(CSV)
    for error in result.errors:
        print(f"skipped {error}", file=sys.stderr)
    fitted = fit_profiles(result.rows)
    profiles = dict(fitted)
    for engine, (donor, why) in BORROW.items():
        if engine not in profiles and donor in fitted:
            profiles[engine] = replace(fitted[donor], engine=engine, fitted_rows=0, fitted_ids=(),
                                       source=f"borrowed from {donor}: {why}")
    for engine, prior in PRIORS.items():
        profiles.setdefault(engine, prior)
    data = {
        "_about": "Engine profiles used by step_cost. Written by scripts/fit_profiles.py from "
                  "validation/measurements.csv; do not edit by hand.",
        "engines": {e: p.to_dict() for e, p in sorted(profiles.items())},
    }
    OUT.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    for engine, p in sorted(profiles.items()):
        print(f"{engine:18s} bw {p.bandwidth_efficiency:.3f} compute {p.compute_efficiency:.3f} "
              f"step {p.step_overhead_s * 1e6:7.1f} µs layer {p.layer_overhead_s * 1e6:6.2f} µs "
              f"band {p.band_low:.2f}-{p.band_high:.2f}  {p.source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
