"""A plan's check of a recorded trace counts every request of it (plan audit, 2026-12-06: a
trace opening with a 150-request burst was checked on the calm rest, its winner's p90 TTFT
8.2 s over the whole file against a 500 ms SLO)."""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

import pytest

from ridgeline.cli import main
from ridgeline.serving_load import WARMUP_SPANS, Load

SLO_ARGS = ["--slo-ttft-ms", "500", "--slo-tpot-ms", "50"]


def _burst_first(path: Path) -> Path:
    """150 requests of 1,500 / 250 tokens in the first 3 s, then one every 0.5 s to 120 s."""
    rows = [(i * 3 / 150, 1500, 250) for i in range(150)]
    rows += [(3 + i * 0.5, 1500, 250) for i in range(234)]
    path.write_text("arrival_s,prompt_tokens,output_tokens\n"
                    + "".join(f"{t:.3f},{p},{o}\n" for t, p, o in rows))
    return path


def test_a_trace_checked_whole_counts_its_opening_burst(tmp_path: Path) -> None:
    load = Load.from_trace(str(_burst_first(tmp_path / "b.csv")))
    work, window = load.steady(1, 5.0, percentile=90)
    assert len(work) == len(load.trace)
    assert all(window[0] <= r.arrival_s <= window[1] for r in work)  # the burst too


def test_a_long_traces_stretch_counts_its_own_requests_warmed_by_those_before() -> None:
    """8,000 requests, the last 2,000 arriving 30 times as fast: the check's 1,600 counted
    are the burst's, each of them, after the calm requests of two lifetimes before it."""
    calm = [(i * 0.5, 1000, 250) for i in range(6000)]
    burst = [(3000 + i / 60, 1000, 250) for i in range(2000)]
    load = Load(2.67, "trace", "trace", 0, tuple(calm + burst), "t.csv")
    first = load.heaviest(1, 1600)
    work, (low, high) = load.steady(1, 10.0)
    counted = [r for r in work if low <= r.arrival_s <= high]
    assert len(counted) == 1600 and counted[0].id == first
    lead = [r for r in work if r.arrival_s < low]  # run, not counted: the engine's load
    assert lead and lead[-1].id == first - 1
    assert min(r.arrival_s for r in lead) >= low - WARMUP_SPANS * 10.0


def test_a_plans_winner_on_a_bursty_trace_holds_on_the_whole_trace(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Whatever wins within two L40Ss, its check reruns as `simulate --trace` over the whole
    file (no --window) and reads there the p90 the plan printed, within the SLO."""
    trace = _burst_first(tmp_path / "b.csv")
    assert main(["plan", "llama-3.1-8b", "--gpus", "l40s", "--max-gpus", "2", "--trace",
                 str(trace), *SLO_ARGS, "--workers", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    win = data["winner"]
    for c in [win, *data["runners_up"]]:  # every simulated row counted the whole trace
        if c["verified"] and c["replicas"] == 1 and not c.get("disaggregated"):
            assert c["sim_window_s"] is None and c["sim_requests"] == len(Load.from_trace(
                str(trace)).trace)
    if not (win["verified"] and win["replicas"] == 1):
        return  # no single replica held: nothing simulate --trace reruns
    check = data["check_command"]
    assert "--window" not in check
    assert main([*shlex.split(check)[1:], "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    ttft = sim["at_percentile"]["ttft_s"]
    assert ttft == pytest.approx(win["sim_ttft_s"], rel=1e-9) and ttft <= 0.5
    assert not math.isnan(ttft)
