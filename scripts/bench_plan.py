#!/usr/bin/env python3
"""Planner speed (a benchmark, not a test): the default search on 2 worker processes.

    python scripts/bench_plan.py

Llama-3.1-70B, a chat workload (log-normal prompts ~1,000 tokens, answers ~250) at
10 req/s, SLO p90 TTFT ≤ 1 s and TPOT ≤ 50 ms, the five default accelerators, up to 64 GPUs.
No ITL SLO (plan's optional --slo-itl-ms): the timing is of a plan without one.
"""

from __future__ import annotations

import sys
import time

from ridgeline.catalog import resolve_model
from ridgeline.plan import plan
from ridgeline.serving_load import Load, Slo


def main() -> int:
    model = resolve_model("llama-3.1-70b")
    load = Load(10.0, "lognormal:1000,0.8", "lognormal:250,0.8")
    start = time.perf_counter()
    result = plan(model, load, Slo(1.0, 0.05, 90), workers=2)
    wall = time.perf_counter() - start
    win = result.winner
    print(f"searched {result.searched} configurations in {wall:.1f} s on 2 processes; "
          f"winner: {win.label if win else 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
