"""What OVERLOADED and the early stop mean for a finite burst: the queue the last request
joined, against the noise of all the arrivals' count (the one reading where the arrivals end
before the batch has filled, none past the fill for the flows test to read); a run cut short
is one the verdict calls overloaded; a closed loop never is. The fill is the run's own: the
step that first left a request waiting on a full KV cache or full seats, or where none did,
an estimate (FILL_LIFETIMES mean service times in), said to be one."""

from __future__ import annotations

import io
import json
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.engines import profile_for
from ridgeline.memory import EngineSettings
from ridgeline.reports.simulate_overload import (
    backlog_evidence,
    fill_clause,
    fill_dict,
    overload_rates,
    since_fill,
)
from ridgeline.sim.config import sim_config
from ridgeline.sim.metrics import (
    FILL_LIFETIMES,
    OVERLOAD_BACKLOG,
    QUEUE_CUT,
    Recorder,
    SimResult,
    beyond_noise,
)
from ridgeline.sim.overload import CAPACITY_READ
from ridgeline.sim.pipeline import run_replica
from ridgeline.sim.run import CHECK_STEPS
from ridgeline.sim.scheduler import FULL_KV, FULL_SEATS
from ridgeline.sim.workload import Workload

DEP = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16")
# the pool these runs' figures were read at: vLLM 0.32's (0.34 sizes a larger one after warm-up)
POOL = EngineSettings(engine_version="0.32")
CHAT = ("1000", "300")  # about 17 req/s served on one H100 once its batch is full
HOPELESS = ["llama-3.1-8b", "--gpu", "h100", "--input-len", "100000", "--output-len", "10000",
            "--max-model-len", "131072"]  # about 0.01 req/s served, four at a time


@cache  # a run two tests read is run once (SimResult is only read)
def _run(n: int, rate: float, seed: int, lengths: tuple[str, str] = CHAT,
         **arrivals: Any) -> SimResult:
    work = Workload(n, *lengths, rate=rate, seed=seed, **arrivals)
    return run_replica(DEP, profile_for("vllm"), sim_config(DEP, POOL), work, stop_when_behind=True)


def _growth_in_a_lifetime(r: SimResult) -> float:
    """How much the backlog grows within a mean service time, at its pace past the fill."""
    behind = r.rec.falls_behind()
    assert behind is not None
    arrived, left, seconds = behind
    return (arrived - left) / seconds * r.rec.service_s / r.rec.completed


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["simulate", *argv, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


@cache
def _both(*argv: str) -> tuple[str, str, Any]:
    """What ``simulate ARGV --json`` prints, the same report's text, and the report."""
    import ridgeline.cli as cli

    reports: list[tuple[Any, dict[str, Any]]] = []
    rendered = cli.render

    def spy(report: Any, **how: Any) -> str:
        reports.append((report, how))
        return rendered(report, **how)

    cli.render = spy  # type: ignore[assignment]
    try:
        with redirect_stdout(io.StringIO()) as out, redirect_stderr(io.StringIO()):
            assert cli.main(["simulate", *argv, "--json"]) == 0
    finally:
        cli.render = rendered  # type: ignore[assignment]
    [(report, how)] = reports
    return out.getvalue(), rendered(report, **{**how, "as_json": False}) + "\n", report


def simulate_both(*argv: str) -> tuple[dict[str, Any], str]:
    """``simulate ARGV`` run once in-process, in its two outputs: what --json prints and the
    text printed without it (the same report rendered both ways: ``render`` reads only the
    report, and simulate's handler reads no --json). Run once per module for the tests
    that read the same run."""
    out, text, _ = _both(*argv)
    return json.loads(out), text


def test_the_noise_bar_is_the_larger_of_five_percent_and_two_and_a_half_deviations() -> None:
    assert beyond_noise(112, 2000) and not beyond_noise(111, 2000)  # 2.5 √2000 = 111.8
    assert beyond_noise(500, 10_000) and not beyond_noise(499, 10_000)  # 5 %
    assert not beyond_noise(19, 20) and not beyond_noise(5, 0)  # at least 20, of some


def _estimated_fill_s(rec: Recorder) -> float:
    """Where the batch's filling was estimated before the run recorded it."""
    return rec.arrived_s[0] + FILL_LIFETIMES * rec.mean_service_s


@pytest.mark.parametrize("seed", [0, 2, 3])
def test_a_burst_over_what_the_engine_serves_is_overloaded_by_its_queue_and_its_flows(
        seed: int) -> None:
    """990 requests at 22 req/s, about 45 s of them: the queue the last joined holds more than
    noise (it had passed as a warm-up, under the 20 % of all requests then asked). The run's
    KV cache filled about halfway (22-25 s, preempting past it), where the estimate of
    FILL_LIFETIMES mean service times had put the fill past the last arrival (53 s), read
    no flows, and called the burst one that ended before its batch filled; past the fill
    seen, fewer left than arrived too. The same rate run five times longer falls behind by
    the flows, as the burst said. 136, 114 and 119 wait (seeds 0, 2, 3) against a noise of
    79."""
    burst = _run(990, 22.0, seed)
    rec, flag = burst.rec, overload_rates(burst, 990)
    assert flag is not None and flag[1] < 0.9 * flag[0] and flag.reading == QUEUE_CUT
    assert flag[2] == rec.waiting_at_arrival
    assert beyond_noise(rec.waiting_at_arrival, 990) and rec.waiting_at_arrival < 0.2 * 990
    assert rec.fill_reason == FULL_KV and rec.steady_s[0] == rec.filled_s
    assert rec.arrived_s[0] < rec.filled_s < rec.arrived_s[1] < _estimated_fill_s(rec)
    assert rec.falls_behind() is not None and rec.series.preempted_between(*rec.steady_s) > 0
    longer = _run(5000, 22.0, seed).rec
    assert longer.falls_behind() is not None and longer.overloaded()


def test_the_fill_a_run_saw_is_the_one_its_verdict_and_json_give() -> None:
    """DeepSeek-V3 on eight H200s, 10 req/s of 2,000 + 1,000 tokens for 300 s: its KV cache is
    full from about 38 s, hundreds waiting behind it, but FILL_LIFETIMES mean service times
    had put the fill at 246 s, and OVERLOADED read only the last minute of arrivals as the
    time "once the batch had filled". The verdict and --json now give the step that first
    left a request waiting on the full pool, which the time series shows full there."""
    argv = ["deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--rate", "10",
            "--num-requests", "3000", "--input-len", "2000", "--output-len", "1000",
            "--max-model-len", "8192"]
    out, text = simulate_both(*argv)
    fill, points = out["batch_filled"], out["time_series"]
    assert fill["found"] == "observed" and fill["by"] == FULL_KV
    assert out["overloaded"]["past_fill_s"][0] == fill["at_s"]
    first_full = min(p["t_s"] for p in points if p["kv_usage"] > 0.99)
    first_preempted = min(p["t_s"] for p in points if p["preemptions"])
    assert fill["at_s"] <= first_full < fill["at_s"] + 1 and fill["at_s"] <= first_preempted
    assert fill["at_s"] < 0.2 * out["duration_s"]
    assert f"once the batch had filled at {fill['at_s']:,.1f} s (KV cache full), up to the " \
        "last arrival" in text


def test_a_run_whose_batch_never_filled_says_its_fill_is_an_estimate() -> None:
    """48 req/s of short chats, 2,000 of them: no step left a request waiting on a full pool
    or full seats, so the fill is FILL_LIFETIMES mean service times in, and said to be an
    estimate."""
    r = _run(2000, 48.0, 2, ("512", "128"))
    rec = r.rec
    assert not rec.fill_observed and rec.steady_s[0] == pytest.approx(_estimated_fill_s(rec))
    assert fill_dict(rec) == {"at_s": rec.steady_s[0], "found": "estimated", "by": None,
                              "lifetimes": FILL_LIFETIMES,
                              "mean_service_s": rec.mean_service_s}
    clause = fill_clause(rec)
    assert clause.startswith(f"at ~{rec.steady_s[0]:,.1f} s (an estimate, {FILL_LIFETIMES} ")
    # the verdict counts from there without calling it a fill ("once the batch had filled at
    # ~22.6 s (an estimate … no step found the KV cache or the seats full)" had said both)
    evidence = backlog_evidence(r)
    assert evidence.startswith(since_fill(rec)) and "once the batch had filled" not in evidence
    assert since_fill(rec).startswith(f"from ~{rec.steady_s[0]:,.1f} s on ({FILL_LIFETIMES} ")


def test_few_seats_fill_by_their_count() -> None:
    """Eight seats (--max-num-seqs 8) at 22 req/s: the batch is full once the eighth starts and
    the next arrival waits, long before the pool is; a seat's fill is read as one."""
    work = Workload(400, *CHAT, rate=22.0, seed=0)
    r = run_replica(DEP, profile_for("vllm"), replace(sim_config(DEP, POOL), max_num_seqs=8),
                    work)
    rec = r.rec
    assert rec.fill_reason == FULL_SEATS and rec.filled_s < 2.0
    assert "(every seat taken)" in fill_clause(rec)


def test_lanes_side_by_side_have_filled_once_every_one_has() -> None:
    """Pipeline lanes' recorders added up: the latest lane's fill, or none where a lane never
    filled."""
    lanes = [Recorder(1) for _ in range(3)]
    lanes[0].batch_filled(12.0, FULL_KV)
    lanes[1].batch_filled(15.0, FULL_SEATS)
    lanes[1].batch_filled(9.0, FULL_KV)  # only the first filling counts
    lanes[0].absorb(lanes[1])
    assert (lanes[0].filled_s, lanes[0].fill_reason) == (15.0, FULL_SEATS)
    lanes[0].absorb(lanes[2])
    assert not lanes[0].fill_observed


@pytest.mark.parametrize(("rate", "seed"), [(16.0, 2), (17.0, 0)])
def test_a_burst_the_engine_keeps_up_with_is_not_overloaded_by_a_batch_still_filling(
        rate: float, seed: int) -> None:
    """45 s of arrivals at 16 or 17 req/s: past a fill read early (the mean service time of a
    short run, its first batches light), more arrived than left, but the growth is the
    batch's: a few wait when the last arrives. It had been called OVERLOADED; the same rate
    run 6,000 requests long is not, by either reading."""
    n = round(rate * 45)
    burst = _run(n, rate, seed)
    assert overload_rates(burst, n) is None
    rec = burst.rec
    assert rec.falls_behind() is not None and rec.waiting_at_arrival < 20
    # the batch had room for more than it would grow by in a lifetime, and none was preempted
    assert _growth_in_a_lifetime(burst) < rec.batch_room_at_arrival
    assert rec.series.preempted_between(*rec.steady_s) == 0
    longer = _run(6000, rate, seed).rec
    assert not longer.overloaded() and longer.falls_behind() is None


def test_a_hopeless_burst_stops_early_and_is_overloaded() -> None:
    """5,000 requests in 0.05 s, each 100,000 tokens in and 10,000 out: the engine starts the
    first as it comes and every other waits. It had run all 12.5 million steps with no
    OVERLOADED (no gauge sample before the last arrival) and a warm-up caution; 200,000 had
    ended at the step cap. Now both stop at the first check, the queue saying why."""
    for n in (5000, 200_000):
        out = simulate_both(*HOPELESS, "--rate", "100000", "--num-requests", str(n))[0]
        stop, flag = out["stopped_early"], out["overloaded"]
        assert stop is not None and CHECK_STEPS <= stop["steps"] < 2 * CHECK_STEPS
        assert flag is not None and flag["waiting_at_last_arrival"] == n - 1
        assert not any("warm" in c or "lighter" in c for c in out["cautions"])
        assert stop["reading"] == "queue"
        assert flag["reading"] == "stopped_early" and flag["grew"] == "queue"
    out, text = simulate_both(*HOPELESS, "--rate", "100000", "--num-requests", "5000")
    reason = ("when the last of its 5,000 requests arrived, 4,999 were still waiting to start, "
              "so the rest of the run would only work through that queue")
    assert reason in text
    assert out["stopped_early"]["reason"] == reason


def test_a_pipelines_burst_is_read_by_its_queue_too(capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM V1 with two stages, one pool: 300 requests of 20,000-token prompts in 0.03 s.
    The first starts as it comes, and the core waits on its micro-batch while the others
    arrive: all but it wait (it had read no OVERLOADED, and a warm-up caution)."""
    out = _json(capsys, "llama-3.1-8b", "--gpu", "h100", "-pp", "2", "--rate", "10000",
                "--num-requests", "300", "--input-len", "20000", "--output-len", "500",
                "--max-model-len", "32768")
    assert out["settings"]["micro_batches_in_flight"] == 2
    assert out["overloaded"]["waiting_at_last_arrival"] == 300 - 1
    assert out["stopped_early"] is None and out["completed"] == 300
    # no warm-up caution; vLLM 0.34's unchecked pool is cautioned where 0.33's rules hold fewer
    assert not [c for c in out["cautions"] if "extensible KV cache" not in c]


def test_a_hopeless_burst_stops_early_in_pipeline_lanes(
        capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang's two lanes, each its own run cut short, their queues summed."""
    out = _json(capsys, *HOPELESS, "--rate", "100000", "--num-requests", "5000", "-pp", "2",
                "--engine", "sglang")
    assert out["stopped_early"] is not None and out["overloaded"] is not None
    assert out["overloaded"]["waiting_at_last_arrival"] > 0.9 * 5000


# the audit's run was 200,000 requests at 100 req/s; at 20 req/s they arrive for as long
# (2,000 s), past the first check as they were, with a fifth of the arrivals to draw
STILL_ARRIVING = ("--rate", "20", "--num-requests", "40000")


def test_a_hopeless_run_is_still_cut_by_its_flows_past_the_fill() -> None:
    """20 req/s of the same requests arrive for 2,000 s, past the fill: the cut and its
    words are the flows'."""
    out, text = simulate_both(*HOPELESS, *STILL_ARRIVING)
    assert "STOPPED EARLY" in text
    stop, fill = out["stopped_early"], out["batch_filled"]
    assert stop["reading"] == "flows" and stop["reason"] in text
    assert fill["found"] == "observed" and fill["by"] == FULL_KV
    assert f"once the batch had filled at {fill['at_s']:,.1f} s (KV cache full), fewer than " \
        "half as many requests left" in text


def test_a_hopeless_run_stops_early_and_says_what_its_figures_are() -> None:
    """The audit's case, the run above (20 req/s of 100,000-token prompts to one H100, about
    0.01 served; the audit's 100 req/s had ended in `stopped after 50,000,000 steps`): it
    stops at the first check, saying so."""
    out, text = simulate_both(*HOPELESS, *STILL_ARRIVING)
    stop = out["stopped_early"]
    assert stop is not None and CHECK_STEPS <= stop["steps"] < 2 * CHECK_STEPS
    assert stop["unfinished"] == 40_000 - out["completed"] - out["rejected"] > 20_000
    assert out["overloaded"]["served_req_s"] < 0.5 * out["overloaded"]["offered_req_s"]
    assert out["keeps_up"] is None  # no window
    assert f"STOPPED EARLY at {stop['at_s']:,.0f} s simulated ({stop['steps']:,} steps)" in text
    assert f"{stop['unfinished']:,} of the 40,000 requests did not finish here" in text
    assert "over the run until it stopped early" in text


def _late_burst(tmp_path: Path) -> str:
    """A trace: 2,000 requests of 1,000 / 500 tokens in the first second, then 50 over
    5,000-6,000 s."""
    trace = tmp_path / "burst.csv"
    rows = [f"{i * 0.0005:.4f},1000,500" for i in range(2000)]
    rows += [f"{5000 + 20 * i},1000,500" for i in range(50)]
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    return str(trace)


@cache
def late_burst_simulated() -> tuple[dict[str, Any], str]:
    """simulate_both of the late burst (``_late_burst``) to 8 seats: one run a process for the
    tests here and in test_overload_readings.py that read it."""
    with tempfile.TemporaryDirectory() as folder:
        return simulate_both("llama-3.1-8b", "--gpu", "h100", "--trace",
                             _late_burst(Path(folder)), "--max-num-seqs", "8")


def test_a_burst_is_not_cut_short_while_requests_are_still_to_come() -> None:
    """2,000 requests in the first second to 8 seats, then 50 over 5,000-6,000 s: at the first
    check nearly all that came wait, but the queue drains (by about 1,100 s) long before the
    late ones come. It had been cut at 50,000 steps with 793 done, "the rest of the run would
    only lengthen that queue"; it runs to the end, and its last arrival finds no queue (the
    burst is still OVERLOADED, by its own queue: ``test_a_burst_worked_through_long_after_it
    _ended_is_overloaded``)."""
    out = late_burst_simulated()[0]
    assert out["stopped_early"] is None and out["completed"] == 2050
    assert out["steps"] > CHECK_STEPS
    assert out["overloaded"]["waiting_at_last_arrival"] < OVERLOAD_BACKLOG


# seed 2 at 48 req/s: until the serving profile's refit (8917c5a) seed 1, which the run's own
# readings now pass (its growth within a lifetime, 123, under the batch's room of 138, none
# preempted)
def test_a_running_batch_that_takes_on_the_excess_is_overloaded() -> None:
    """2,000 short chats (512 in, 128 out) at 48 req/s where one H100 serves about 44: vLLM's
    batch grows towards the pool's edge and only a handful wait when the last arrives, yet past
    the (estimated) fill far fewer leave than arrive. It had lost its OVERLOADED to the
    20-waiting gate: the growth within a lifetime overruns the batch's room."""
    r = _run(2000, 48.0, 2, ("512", "128"))
    flag = overload_rates(r, 2000)
    assert flag is not None and flag[1] < flag[0] and flag[2] < 20
    assert _growth_in_a_lifetime(r) > r.rec.batch_room_at_arrival


def test_a_bursty_overload_whose_pool_fills_late_is_read_by_its_batch_full_rate() -> None:
    """Gamma arrivals (burstiness 0.02) at 57 req/s of the same chats: the pool fills under
    5 s before the last arrival, too few arrivals past it for the flows to tell from noise.
    The estimated fill (FILL_LIFETIMES mean service times, 30 s) had read OVERLOADED from the
    flows by counting the batch still filling as a backlog; the batch-full rate (the run's
    requests sent at once) reads it now. One run, read from the report simulate rendered (it
    had been run a second time, as _run runs it, for the recorder)."""
    printed, _, report = _both("llama-3.1-8b", "--gpu", "h100", "--engine-version", "0.32",
                               "--rate", "57", "--arrival", "gamma", "--burstiness", "0.02",
                               "--seed", "0", "--num-requests", "2000", "--input-len", "512",
                               "--output-len", "128")
    out, rec = json.loads(printed), report.result.rec
    assert report.result.completed == out["completed"]  # the report is the run printed
    assert rec.fill_reason == FULL_KV and _estimated_fill_s(rec) < rec.filled_s
    assert rec.arrived_s[1] - rec.filled_s < 5 and rec.falls_behind() is None
    assert out["batch_filled"] == {"at_s": rec.filled_s, "found": "observed", "by": FULL_KV}
    assert out["overloaded"]["reading"] == CAPACITY_READ


def test_a_closed_loop_with_more_users_than_seats_is_not_overloaded(
        capsys: pytest.CaptureFixture[str]) -> None:
    """1,000 users over 256 seats keep 744 waiting, a queue that does not grow: each arrival
    follows a completion (it had read OVERLOADED at 25 req/s offered)."""
    out = _json(capsys, "llama-3.1-8b", "--gpu", "h100", "--concurrency", "1000",
                "--num-requests", "3000", "--max-num-seqs", "256", "--input-len", CHAT[0],
                "--output-len", CHAT[1])
    assert out["overloaded"] is None and out["completed"] == 3000
