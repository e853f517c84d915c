#!/usr/bin/env python3
"""The data-parallel simulator's runs of lock-step decode steps against its plain steps.

    python scripts/check_dp_fast_path.py [--only N ...]

Runs each case's ``simulate … --json`` twice in-process, as the command runs it and with the
simulator's fast path off (``sim_config(fast_path=False)``: every rank steps one step at a
time, sim/data_parallel.py), and compares the two outputs character for character. Cases:
vLLM's least-loaded and SGLang's round-robin dispatch over 2, 4 and 8 ranks; rates that keep
up and rates that queue; closed loops; a capped open loop; prefix groups; seats few enough
to queue on; pools small enough to preempt (vLLM) and retract (SGLang); all on DeepSeek-V3.
Prints each case's verdict and both wall times; exits 1 on any difference. About 4 min of
CPU, two thirds of it case 13 (SGLang's pool small enough to retract: 364 s of wall time on a
loaded 2-core machine, 2026-12-04, where the other 13 took 137 s). Pure Python only (it
patches ``sim.config.sim_config``, which the command imports as it runs).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from typing import Any
from unittest import mock

DSV3 = ["deepseek-v3", "--gpu", "h200", "--enable-expert-parallel", "--max-model-len", "32k"]
SGLANG = ["deepseek-v3", "--gpu", "h200", "--engine", "sglang", "--enable-dp-attention",
          "--max-model-len", "32k"]

CASES: list[tuple[str, list[str]]] = [
    ("vllm dp4 x2gpu, 16k/8k at 0.2/s", [
        "deepseek-v3", "--gpu", "h200-sxm", "--num-gpus", "2", "--data-parallel-size", "4",
        "--enable-expert-parallel", "--rate", "0.2", "--input-len", "16000", "--output-len",
        "8000", "--num-requests", "100"]),
    ("vllm dp8, 2k/600 at 4/s", [*DSV3, "-dp", "8", "--rate", "4", "--input-len", "2000",
                                 "--output-len", "600", "--num-requests", "200"]),
    ("vllm dp2 x4gpu, queues at 30/s", [
        *DSV3, "--num-gpus", "4", "-dp", "2", "--rate", "30", "--input-len", "1000",
        "--output-len", "300", "--num-requests", "300"]),
    ("vllm dp4 x2gpu, closed loop 24", [
        *DSV3, "--num-gpus", "2", "-dp", "4", "--concurrency", "24", "--input-len", "3000",
        "--output-len", "700", "--num-requests", "120"]),
    ("vllm dp8, prefix groups", [*DSV3, "-dp", "8", "--rate", "3", "--input-len", "3000",
                                 "--output-len", "400", "--prefix-groups", "3",
                                 "--prefix-len", "2048", "--num-requests", "150"]),
    ("vllm dp8, 2 seats a rank", [*DSV3, "-dp", "8", "--rate", "8", "--input-len", "1500",
                                  "--output-len", "400", "--max-num-seqs", "2",
                                  "--num-requests", "150"]),
    ("vllm dp4 x2gpu, small pool preempts", [
        "deepseek-v3", "--gpu", "h200", "--enable-expert-parallel", "--max-model-len", "10000",
        "--num-gpus", "2", "-dp", "4", "--rate", "20", "--input-len", "6000",
        "--output-len", "3000", "--kv-cache-memory-bytes", "1500000000",
        "--num-requests", "40"]),
    ("vllm dp4 x2gpu, capped open loop", [
        *DSV3, "--num-gpus", "2", "-dp", "4", "--rate", "6", "--max-concurrency", "10",
        "--input-len", "2000", "--output-len", "500", "--num-requests", "120"]),
    ("sglang dp8, 4k/1k at 2/s", [*SGLANG, "--num-gpus", "8", "--dp-size", "8", "--rate", "2",
                                  "--input-len", "4000", "--output-len", "1000",
                                  "--num-requests", "100"]),
    ("sglang dp4, queues at 25/s", [*SGLANG, "--num-gpus", "8", "--dp-size", "4", "--rate",
                                    "25", "--input-len", "1000", "--output-len", "300",
                                    "--num-requests", "300"]),
    ("sglang dp2, closed loop 16", [*SGLANG, "--num-gpus", "8", "--dp-size", "2",
                                    "--concurrency", "16", "--input-len", "2500",
                                    "--output-len", "800", "--num-requests", "100"]),
    ("sglang dp8, prefix groups", [*SGLANG, "--num-gpus", "8", "--dp-size", "8", "--rate", "3",
                                   "--input-len", "3000", "--output-len", "500",
                                   "--prefix-groups", "2", "--prefix-len", "2000",
                                   "--num-requests", "150"]),
    ("sglang dp4, 3 seats a rank", [*SGLANG, "--num-gpus", "8", "--dp-size", "4", "--rate", "10",
                                    "--input-len", "1500", "--output-len", "400",
                                    "--max-num-seqs", "12", "--num-requests", "150"]),
    ("sglang dp4, small pool retracts", [
        "deepseek-v3", "--gpu", "h200", "--engine", "sglang", "--enable-dp-attention",
        "--max-model-len", "10000", "--num-gpus", "8", "--dp-size", "4", "--rate", "20",
        "--input-len", "2000", "--output-len", "5000", "--max-total-tokens", "30000",
        "--num-requests", "80"]),
]


def simulate_json(argv: list[str], fast_path: bool) -> tuple[str, float]:
    """``simulate ARGV --json``'s output (or its exit code and error) and its wall time."""
    from ridgeline.cli import main
    from ridgeline.sim import config

    real = config.sim_config

    def sim_config(*args: Any, **kwargs: Any) -> Any:
        return real(*args, **{**kwargs, "fast_path": fast_path})

    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with mock.patch.object(config, "sim_config", sim_config), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["simulate", *argv, "--json"])
    wall = time.perf_counter() - start
    return (out.getvalue() if code == 0 else f"exit {code}: {err.getvalue()}"), wall


def compare(argv: list[str]) -> tuple[bool, float, float, str]:
    """(the same output both ways, the fast and the plain wall times, the output)."""
    fast, fast_s = simulate_json(argv, True)
    plain, plain_s = simulate_json(argv, False)
    return fast == plain, fast_s, plain_s, fast


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", type=int, nargs="*", help="case numbers (from 0)")
    args = parser.parse_args()
    bad = 0
    for i, (name, argv) in enumerate(CASES):
        if args.only and i not in args.only:
            continue
        same, fast_s, plain_s, out = compare(argv)
        bad += not same
        note = "" if not out.startswith("exit") else "  (" + out.strip()[:80] + ")"
        print(f"{i:2} {'same' if same else 'DIFFERENT':9} fast {fast_s:6.2f} s  plain "
              f"{plain_s:6.2f} s  {name}{note}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
