#!/usr/bin/env python3
"""How far plan's analytic replica count is from the steady-state simulation (a benchmark,
not a test): for ten loads on three replica shapes, the replicas `size_replica` asks for
against the fewest that meet the SLO when simulated in the steady state (`plan_checks.verify`).

    python scripts/bench_plan_sizing.py [--engine sglang]

The error is log(analytic / simulated): positive means the analytic sizing asks for more
replicas than the simulation needs. The SLOs are TTFT and TPOT alone, no ITL SLO (plan's
optional --slo-itl-ms, whose sizing tests/test_plan_itl.py pins): the figures are of sizing
without one.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys

from ridgeline.candidate import Candidate, replica_deployment
from ridgeline.catalog import resolve_model
from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.hardware import resolve_accelerator
from ridgeline.plan_checks import verify
from ridgeline.replica_sizing import size_replica
from ridgeline.serving_load import Load, Slo

# (model, rate req/s, input, output, SLO TTFT s, SLO TPOT s)
LOADS = (
    ("llama-3.1-8b", 200, "lognormal:1000,0.8", "lognormal:300,0.8", 1.0, 0.05),
    ("llama-3.1-8b", 300, "1000", "200", 0.5, 0.03),
    ("llama-3.1-8b", 50, "lognormal:4000,0.7", "lognormal:150,0.7", 1.5, 0.04),
    ("llama-3.1-70b", 20, "lognormal:2000,1.0", "lognormal:400,0.7", 2.0, 0.06),
    ("llama-3.1-70b", 10, "lognormal:8000,0.5", "lognormal:500,0.5", 3.0, 0.05),
    ("llama-3.1-70b", 10, "lognormal:1000,0.8", "lognormal:250,0.8", 1.0, 0.05),
    ("qwen3-30b-a3b", 100, "uniform:200,3000", "uniform:50,800", 1.0, 0.03),
    ("qwen3-30b-a3b", 30, "200", "1000", 0.5, 0.02),
    # long prompts whose unloaded TTFT nears the SLO: the prompt queue sets the rate (each
    # prompt chunked beside the decodes, every drawn length its own, the rest of the prefill
    # under way its wait)
    ("llama-3.1-70b", 2, "32000", "500", 3.0, 0.06),
    ("llama-3.1-8b", 4, "lognormal:24000,0.5", "300", 2.0, 0.04),
)
SHAPES = (("h100-sxm", 1), ("h100-sxm", 2), ("l40s", 1))  # fp8 weights and cache


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=["vllm", "sglang", "trtllm"], default="vllm",
                        help="whose memory rules and scheduling size and check the replicas")
    engine = parser.parse_args().engine
    profile = profile_for(engine)
    errors = []
    print(f"{'model':14} {'rate':>5} {'input':20} {'replica':12} {'analytic':>8} "
          f"{'simulated':>9} {'error':>7}")
    for name, rate, isl, osl, ttft, tpot in LOADS:
        model = resolve_model(name)
        load, slo = Load(rate, isl, osl), Slo(ttft, tpot)
        for gpu, tp in SHAPES:
            try:
                dep = replica_deployment(model, resolve_accelerator(gpu), tp, 1, "fp8", "fp8",
                                  engine=engine)
            except InputError:
                continue
            sized = size_replica(dep, profile, load, slo, None)
            if sized is None:
                continue
            batch, mean_tpot, ttft_floor, per_replica = sized[:4]
            replicas = max(1, math.ceil(rate / per_replica * 1.0001))
            c = Candidate(gpu, tp, 1, "fp8", "fp8", None, batch, mean_tpot, ttft_floor,
                          per_replica, replicas, None, True, "", (1.0, 1.0))
            checked = verify(model, c, load, slo, 4096, engine=engine)
            if checked is None:
                continue
            error = math.log(replicas / checked.replicas)
            errors.append(error)
            print(f"{name:14} {rate:>5g} {isl:20} {f'{tp} x {gpu}':12} {replicas:>8} "
                  f"{checked.replicas:>9} {error:>+7.2f}")
    exact = sum(1 for e in errors if e == 0)
    print(f"{len(errors)} replicas: median |error| {statistics.median(map(abs, errors)):.2f}, "
          f"mean {statistics.fmean(map(abs, errors)):.3f}, from {min(errors):+.2f} to "
          f"{max(errors):+.2f} (log ratio; 0.10 ≈ 10 %); {exact} exact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
