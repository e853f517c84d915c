"""vllm bench serve's --request-rate R (or a trace's times) with --max-concurrency C: arrivals
at R, at most C in flight; one that arrives while C are running waits client-side and is timed
from its send (sim/run.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli

UNSIZED = ("simulate", "llama-3.1-8b", "--gpu", "h100")  # --num-prompts: 200, or the test's
SIM = (*UNSIZED, "--num-prompts", "200", "--json")


def simulate(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    size = () if "--num-prompts" in argv else ("--num-prompts", "200")  # a flag given once
    code, out, err = run_cli(capsys, *UNSIZED, *size, *argv, "--json")
    assert code == 0, err
    return dict(json.loads(out))


def test_the_cap_bounds_the_running_batch(capsys: pytest.CaptureFixture[str]) -> None:
    """At 40 req/s an 8B on an H100 runs dozens at once; capped at 4 it never runs more, and
    serves about what a closed loop of 4 serves (the backlog is never empty)."""
    free = simulate(capsys, "--request-rate", "40")
    capped = simulate(capsys, "--request-rate", "40", "--max-concurrency", "4")
    closed = simulate(capsys, "--request-rate", "inf", "--max-concurrency", "4")
    assert free["running"]["max"] > 16
    assert capped["running"]["max"] == 4 == closed["running"]["max"]
    assert capped["request_rate_req_s"] == pytest.approx(closed["request_rate_req_s"], rel=0.03)
    assert capped["request_rate_req_s"] < 0.25 * free["request_rate_req_s"]
    assert "at most 4 in flight" in capped["settings"]["load"]


def test_a_cap_never_reached_changes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """At 2 req/s a handful run at once: a cap of 200 is never reached, and the run is the
    open loop's, request for request."""
    free = simulate(capsys, "--request-rate", "2")
    capped = simulate(capsys, "--request-rate", "2", "--max-concurrency", "200")
    for key in ("ttft_s", "tpot_s", "e2e_s", "duration_s", "steps"):
        assert capped[key] == free[key]


def test_a_capped_arrival_is_timed_from_its_send(capsys: pytest.CaptureFixture[str]) -> None:
    """A request that waited for a seat is timed from its send, as the benchmark's clock
    starts inside its semaphore: capped TTFT stays near one prompt's, while the uncapped open
    loop at the same rate queues in the engine."""
    capped = simulate(capsys, "--request-rate", "40", "--max-concurrency", "4")
    free = simulate(capsys, "--request-rate", "40")
    assert capped["ttft_s"]["p99"] < free["ttft_s"]["p99"]
    assert capped["queue_s"]["mean"] <= free["queue_s"]["mean"]


def test_a_capped_rate_keeps_its_arrival_process(capsys: pytest.CaptureFixture[str]) -> None:
    """--arrival/--burstiness shape the capped open loop's arrivals (refused for a closed
    loop); the lanes of a pipeline that splits its pool refuse the pair in one line."""
    gamma = simulate(capsys, "--request-rate", "10", "--max-concurrency", "8", "--arrival",
                     "gamma", "--burstiness", "0.5")
    assert "gamma arrivals at 10/s (burstiness 0.5), at most 8 in flight" in gamma["settings"]["load"]
    code, _, err = run_cli(capsys, *SIM, "--request-rate", "inf", "--max-concurrency", "8",
                           "--arrival", "gamma")
    assert code == 2 and "drop --arrival" in err
    code, _, err = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--engine",
                           "sglang", "--pipeline-parallel-size", "2", "--request-rate", "4",
                           "--max-concurrency", "8", "--num-prompts", "20")
    assert code == 2 and "pipeline lanes" in err and len(err.strip().splitlines()) == 1


def test_a_cap_that_holds_the_load_back_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """60 req/s against 64 seats that serve about 30: the client's backlog, not the engine's
    queue, grows; the run names the waits and that the cap held the load back, and a window
    does not read 'keeps up'. At 10 req/s the same cap is never full and no line is said."""
    held = simulate(capsys, "--request-rate", "60", "--max-concurrency", "64",
                    "--num-prompts", "600", "--window", "2,8")
    client = held["client_cap"]
    assert client["max_in_flight"] == 64 and client["held_back"]
    assert client["waiting_at_last_arrival"] > 100 and client["wait_max_s"] > client["wait_mean_s"]
    assert client["offered_req_s"] > 1.5 * held["request_rate_req_s"]
    assert held["keeps_up"] is False
    code, out, _ = run_cli(capsys, *UNSIZED, "--request-rate", "60", "--max-concurrency", "64",
                           "--num-prompts", "600")
    assert code == 0 and "HELD BACK BY THE CAP" in out and "waited for a seat" in out
    light = simulate(capsys, "--request-rate", "10", "--max-concurrency", "64")
    assert light["client_cap"]["waited"] == 0 and not light["client_cap"]["held_back"]
    assert simulate(capsys, "--request-rate", "10")["client_cap"] is None


def test_a_cap_never_reached_keeps_the_engines_overload_reading(
        capsys: pytest.CaptureFixture[str]) -> None:
    """500 req/s, far past the engine: with a cap it never reaches, the engine's own queue
    grows as it does uncapped, and the run reads OVERLOADED alike."""
    free = simulate(capsys, "--request-rate", "500", "--num-prompts", "2000")
    capped = simulate(capsys, "--request-rate", "500", "--max-concurrency", "5000",
                      "--num-prompts", "2000")
    assert free["overloaded"] is not None and capped["overloaded"] is not None
    assert capped["overloaded"]["reading"] == free["overloaded"]["reading"]
    assert not capped["client_cap"]["held_back"]


def write_trace(path: Path, arrivals_s: list[float], prompt: int, output: int) -> str:
    path.write_text("arrival_s,prompt_tokens,output_tokens\n"
                    + "".join(f"{t},{prompt},{output}\n" for t in arrivals_s))
    return str(path)


def trace_run(capsys: pytest.CaptureFixture[str], trace: str, *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, *SIM[:4], "--trace", trace, *argv, "--json")
    assert code == 0, err
    return dict(json.loads(out))


def test_a_capped_trace_keeps_its_arrival_times(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A trace of 20 requests 10 s apart under --max-concurrency 4, as vllm bench serve sends
    a timed dataset: each sent at its own time (not a closed loop's back to back), so the run
    lasts past the last arrival, and a cap never reached changes nothing."""
    trace = write_trace(tmp_path / "spread.csv", [10.0 * i for i in range(20)], 500, 50)
    capped = trace_run(capsys, trace, "--max-concurrency", "4")
    free = trace_run(capsys, trace)
    assert capped["duration_s"] >= 190.0
    assert "at most 4 in flight" in capped["settings"]["load"]
    for key in ("ttft_s", "e2e_s", "duration_s", "steps"):
        assert capped[key] == free[key]
    assert capped["client_cap"]["max_in_flight"] == 4 and capped["client_cap"]["waited"] == 0
    code, _, err = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--engine",
                           "sglang", "--pipeline-parallel-size", "2", "--trace", trace,
                           "--max-concurrency", "4")
    assert code == 2 and "pipeline lanes" in err and len(err.strip().splitlines()) == 1


def test_a_bursty_trace_under_a_cap_reports_the_client_waits(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """200 requests within 0.2 s against a cap of 4: four run at once, the rest wait
    client-side, and the run says the cap held the load back; a trace whose requests all
    come at one instant reads as come all at once, not at an infinite rate."""
    trace = write_trace(tmp_path / "burst.csv", [i / 1000 for i in range(200)], 500, 100)
    held = trace_run(capsys, trace, "--max-concurrency", "4")
    client = held["client_cap"]
    assert held["running"]["max"] == 4
    assert client["waited"] == 200 - 4 and client["held_back"]
    assert 0 < client["wait_mean_s"] < client["wait_max_s"] <= held["duration_s"]
    once = write_trace(tmp_path / "once.csv", [5.0] * 60, 300, 30)
    code, out, _ = run_cli(capsys, *SIM[:4], "--trace", once, "--max-concurrency", "4")
    assert code == 0 and "waited for a seat" in out
    assert "requests come all at once" in out and "inf req/s" not in out


@pytest.mark.parametrize(("cap", "clause"), [("4", "arrives while 4 are running waits"),
                                             ("1", "arrives while 1 is running waits")])
def test_the_load_line_says_who_waits_in_plain_words(capsys: pytest.CaptureFixture[str],
                                                     cap: str, clause: str) -> None:
    load = simulate(capsys, "--request-rate", "2", "--max-concurrency", cap)["settings"]["load"]
    assert f"a request that {clause} client-side" in load


def test_a_capped_runs_warm_up_caution_reads_the_span_its_requests_were_sent_over(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """24 requests within 0.23 s under --max-concurrency 8: the cap sends them over about
    three waves, which the caution gives beside the trace's own span; 200 within 0.2 s under
    a cap of 4 are sent over tens of lifetimes, past any warm-up, and no caution is said."""
    import csv

    times = [i / 100 for i in range(24)]
    trace = write_trace(tmp_path / "wave.csv", times, 500, 100)
    out = tmp_path / "sent.csv"
    code, text, err = run_cli(capsys, *SIM[:4], "--trace", trace, "--max-concurrency", "8",
                              "--export", str(out))
    assert code == 0, err
    sent = [float(row["arrival_s"]) for row in csv.DictReader(out.open())]
    assert (f"the requests were sent over {max(sent) - min(sent):,.1f} s (they came over "
            f"{times[-1] - times[0]:,.1f} s") in text
    burst = write_trace(tmp_path / "burst.csv", [i / 1000 for i in range(200)], 500, 100)
    code, text, err = run_cli(capsys, *SIM[:4], "--trace", burst, "--max-concurrency", "4")
    assert code == 0 and "HELD BACK BY THE CAP" in text and "request lifetimes" not in text
    # uncapped, the same trace's caution is its arrivals' span, as before
    code, text, err = run_cli(capsys, *SIM[:4], "--trace", trace)
    assert code == 0 and f"the arrivals span {times[-1] - times[0]:,.1f} s" in text


def test_the_export_carries_each_requests_offered_arrival_and_its_send(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """arrival_s is the send, where the latencies start; offered_arrival_s the trace's own
    time: later where the cap held a request for a seat (as many as client_cap counts), the
    same where it did not, and the same throughout an uncapped run."""
    import csv

    times = [i / 100 for i in range(24)]
    trace = write_trace(tmp_path / "wave.csv", times, 500, 100)
    out = tmp_path / "r.csv"
    capped = trace_run(capsys, trace, "--max-concurrency", "8", "--export", str(out))
    rows = list(csv.DictReader(out.open()))
    offered = [float(row["offered_arrival_s"]) for row in rows]
    sent = [float(row["arrival_s"]) for row in rows]
    assert offered == pytest.approx(times)
    assert all(s >= o for s, o in zip(sent, offered, strict=True))
    assert sum(s > o for s, o in zip(sent, offered, strict=True)) \
        == capped["client_cap"]["waited"] > 0
    trace_run(capsys, trace, "--export", str(out))
    rows = list(csv.DictReader(out.open()))
    assert all(row["arrival_s"] == row["offered_arrival_s"] for row in rows)
