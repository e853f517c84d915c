#!/usr/bin/env python3
"""The host-bandwidth share of llama.cpp's partial offload, fitted and checked (reproducible).

    python scripts/fit_offload.py

Fits one number, the share of the rated host-memory bandwidth that llama.cpp's CPU layers
stream at during decode, on the one sweep whose host is fully stated (InventiveHQ: seven -ngl
settings of one model on one machine, rows OF-IH-*), by the share whose median relative
error over those rows is smallest. It then scores the rows it did not see (ik_llama.cpp #255,
OF-ik255-*: another model, GPU, CPU and memory, whose memory speed is assumed) and prints
both, then the expert-offload row (llmfit #755), which the share is not fitted to. The
bundled value lives in src/ridgeline/data/engines.json (llama.cpp → offload).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from unittest import mock

from ridgeline import cost
from ridgeline.measurements import read_measurements
from ridgeline.predict import predict

ROOT = Path(__file__).resolve().parent.parent
ROWS = read_measurements(ROOT / "validation" / "offload.csv").rows
DECODE = [r for r in ROWS if r.metric == "decode_tok_s_per_user"]
FIT = [r for r in DECODE if r.id.startswith("OF-IH-")]
CHECK = [r for r in DECODE if r.id.startswith("OF-ik255-")]  # whole layers, another machine
EXPERTS = [r for r in DECODE if r not in FIT and r not in CHECK]  # --n-cpu-moe: not fitted


def errors(share: float, rows: list) -> list[float]:
    """Signed relative errors of ``rows`` with the host share set to ``share``."""
    cost._cached_time.cache_clear()  # step times are remembered per deployment
    with mock.patch("ridgeline.cost.host_bandwidth_share", return_value=share):
        out = []
        for row in rows:
            p = predict(row)
            assert p.error is not None, p.reason
            out.append(p.error)
    return out


def median_abs(errs: list[float]) -> float:
    return statistics.median(abs(e) for e in errs)


def fitted_share() -> float:
    """The share, to the hundredth, whose median |error| over the sweep's rows is smallest."""
    shares = [s / 100 for s in range(40, 101)]
    return min(shares, key=lambda s: median_abs(errors(s, FIT)))


def main() -> None:
    best = fitted_share()
    print(f"fitted on {len(FIT)} rows (InventiveHQ sweep): host share {best:.2f}, "
          f"median |error| {median_abs(errors(best, FIT)):.1%}")
    for row, e in zip(FIT, errors(best, FIT)):
        print(f"  {row.id:<40} {e:+.1%}")
    check = errors(best, CHECK)
    print(f"checked on {len(CHECK)} rows it did not see (ik_llama.cpp #255, memory speed "
          f"assumed): median |error| {median_abs(check):.1%}")
    for row, e in zip(CHECK, check):
        print(f"  {row.id:<40} {e:+.1%}")
    print(f"expert offload ({len(EXPERTS)} row, priced like whole layers; a caution says so):")
    for row, e in zip(EXPERTS, errors(best, EXPERTS)):
        print(f"  {row.id:<40} {e:+.1%}")


if __name__ == "__main__":
    main()
