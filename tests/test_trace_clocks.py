"""A trace simulate replays is held to plan's bar: a load under the floor --rate keeps, or
arrivals that mix seconds from the start with unix times, is refused in one line (exit 2),
not replayed as "0.00 req/s" (sim/workload.py ``_one_clock``, serving_load.check_trace_rate)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ridgeline.serving_load import MIN_RATE
from ridgeline.sim.workload import UNIX_TIMES_FROM_S, read_trace
from tests.conftest import run_cli

HEADER = "arrival_s,prompt_tokens,output_tokens\n"
SIMULATE = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--trace")
PLAN = ("plan", "llama-3.1-8b", "--gpus", "h100", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50",
        "--trace")


def _trace(tmp_path: Path, rows: str, name: str = "t.csv") -> str:
    path = tmp_path / name
    path.write_text(HEADER + rows)
    return str(path)


def _refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, (out, err)
    assert "Traceback" not in err
    return err


def test_seconds_beside_a_unix_time_are_refused_by_simulate_and_plan(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A row at 0, the next at 1700000002: a half-converted trace, 54 years apart."""
    mixed = _trace(tmp_path, "0,512,128\n1700000002,100,10\n")
    for argv in (SIMULATE, PLAN):
        err = _refused(capsys, *argv, mixed)
        assert "line 3" in err and "unix times mixed with seconds" in err


def test_unix_times_alone_and_seconds_alone_still_replay(tmp_path: Path) -> None:
    start = UNIX_TIMES_FROM_S + 7e8
    unix = read_trace(_trace(tmp_path, f"{start:.0f},512,128\n{start + 2:.0f},100,10\n"))
    seconds = read_trace(_trace(tmp_path, "0,512,128\n2,100,10\n", "s.csv"))
    assert [r.arrival_s for r in unix] == [r.arrival_s for r in seconds] == [0.0, 2.0]


def test_simulate_refuses_a_trace_under_plans_rate_floor_as_plan_does(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Three requests over two million seconds, 9.999998e-07 req/s: plan refused it, simulate
    replayed it; both now give the one refusal, its rate in the digits that show it is under
    the floor."""
    slow = _trace(tmp_path, "0,512,128\n1000000,100,10\n2000000.5,100,10\n")
    said = _refused(capsys, *SIMULATE, slow)
    assert said == _refused(capsys, *PLAN, slow)
    rate = 2 / 2000000.5
    assert rate < MIN_RATE and f"{rate:.7g} req/s, under the {MIN_RATE:g}" in said
