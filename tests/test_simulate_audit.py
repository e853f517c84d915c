"""`ridgeline simulate` after the audit: an overload read over the whole steady part, runs cut
short once hopelessly behind, a step cap that says why, levers where no length fits, fit's
engine-version cautions, and prefix groups and cache hits counted as they happened."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.reports.simulate import latency_table
from ridgeline.sim.config import sim_config
from ridgeline.sim.metrics import Recorder
from ridgeline.sim.pipeline import run_replica
from ridgeline.sim.request import Request
from ridgeline.sim.run import CHECK_STEPS
from ridgeline.sim.simulator import Simulator
from ridgeline.sim.workload import Workload
from tests.conftest import run_cli

DEP = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16")
LONG_PROMPTS = ["--input-len", "20000", "--output-len", "500", "--max-model-len", "32768"]


def _simulate(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["simulate", *argv, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def _queue(every_s: float, n: int = 3000) -> Recorder:
    """One arrival a second; the engine starts one request every ``every_s`` seconds (as
    soon as it has one), each taking 10 s: 1/every_s req/s served."""
    rec = Recorder(1)
    free_s = 0.0
    done = []
    for i in range(n):
        r = Request(i, float(i), 100, 10)
        rec.arrive(r)
        r.first_scheduled_s = max(r.arrival_s, free_s)
        free_s = r.first_scheduled_s + every_s
        r.first_token_s, r.finish_s, r.num_generated = r.first_scheduled_s + 0.1, \
            r.first_scheduled_s + 10, 10
        done.append(r)
    for r in done:
        rec.finish(r)
    return rec


# -- finding 2: the backlog over the whole steady part ------------------------------------------

def test_an_engine_serving_a_tenth_less_than_offered_falls_behind_and_one_with_room_does_not(
        ) -> None:
    """1 req/s offered, 0.91 served: of the arrivals past the fill (30 s) about 9 % more came
    than left, and the later ones queue longer; at 1.11 served none is left behind."""
    behind = _queue(1.1).falls_behind()
    assert behind is not None
    arrived, left, _ = behind
    assert arrived == pytest.approx(2970, abs=5)
    assert (arrived - left) / arrived == pytest.approx(1 - 1 / 1.1, abs=0.02)
    rec = _queue(1.1)
    early, late = rec.queue_trend(*rec.steady_s) or (0.0, 0.0)
    assert late > 2 * early > 0  # the queue grows with the arrival time
    assert _queue(0.9).falls_behind() is None


@pytest.mark.parametrize("seed", ["0", "1", "2", "3"])
@pytest.mark.usefixtures("simulate_once")  # one run for its --json and its text
def test_a_kv_bound_overload_is_flagged_whatever_the_seed(
        capsys: pytest.CaptureFixture[str], seed: str) -> None:
    """The audit's case: 0.8 req/s of 20,000-token prompts on one H100 (about 0.73 served, a
    pool of 22 such requests). Seeds 0 and 3 went unflagged when only the second half of the
    arrivals was read; the whole steady part reads every seed as behind."""
    argv = ["llama-3.1-8b", "--gpu", "h100", "--rate", "0.8", "--num-requests", "2000",
            *LONG_PROMPTS, "--seed", seed]
    flag = _simulate(capsys, *argv)["overloaded"]
    assert flag is not None and flag["served_req_s"] < 0.95 * flag["offered_req_s"]
    arrived, left = flag["arrived_past_fill"], flag["left_past_fill"]
    assert arrived - left > 0.05 * arrived
    early, late = flag["queue_mean_s_halves"]
    assert late > 1.5 * early
    code, out, _ = run_cli(capsys, "simulate", *argv)
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("OVERLOADED"))
    assert f"{arrived:,} requests arrived and {left:,} left the engine, " \
        f"{arrived - left:,} fewer" in line
    assert f"queued a mean {late:,.1f} s, {late / early:,.1f}× the {early:,.1f} s" in line


@pytest.mark.parametrize("argv", [
    ["llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--num-requests", "1000", "--input-len",
     "1000", "--output-len", "300"],
    ["llama-3.1-70b", "--gpu", "h100", "--num-gpus", "2", "--weights", "fp8", "--rate", "4",
     "--num-requests", "2000", "--max-model-len", "8192"],
    # just under what the engine serves (0.73 req/s): its queue wanders, and is not flagged
    ["llama-3.1-8b", "--gpu", "h100", "--rate", "0.7", "--num-requests", "2000", *LONG_PROMPTS],
])
def test_loads_the_engine_keeps_up_with_are_not_flagged_nor_cut(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    out = _simulate(capsys, *argv)
    assert out["overloaded"] is None and out["stopped_early"] is None
    assert out["completed"] == out["requests"]


# -- finding 6: cut short once hopelessly behind; the step cap says why ------------------------

def test_an_engine_serving_under_half_of_what_comes_is_hopelessly_behind() -> None:
    assert _queue(3.0).hopelessly_behind(3000.0, True)
    assert not _queue(1.1).hopelessly_behind(3000.0, True)  # behind, but not by half
    assert not _queue(0.9).hopelessly_behind(3000.0, True)


@pytest.mark.usefixtures("simulate_once")  # one run for its --json and its text
@pytest.mark.usefixtures("simulate_once")  # one run for the late window's text and --json
def test_a_window_in_a_run_cut_short_does_not_keep_up(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The fill is read from every completed request, a window's or not, so a windowed run
    is cut short too; a window none of whose requests finished by then is an error naming
    the cause, not 'no completed request arrived in it'. 5 req/s of 100,000-token prompts
    for 2,000 s (about 0.01 served): cut at the first check, past the fill, by its flows, as
    the 20 req/s run of test_sim_overload's hopeless tests is, with a quarter of the arrivals
    to simulate."""
    argv = ["llama-3.1-8b", "--gpu", "h100", "--rate", "5", "--num-requests", "10000",
            "--input-len", "100000", "--output-len", "10000", "--max-model-len", "131072"]
    out = _simulate(capsys, *argv, "--window", "0,1500")
    assert out["stopped_early"] is not None and out["keeps_up"] is False
    code, _, err = run_cli(capsys, "simulate", *argv, "--window", "500,1500")
    assert code == 2 and "fell hopelessly behind" in err and "lower --rate" in err
    # an answer about the load, not bad input: under --json, the refusal object says so
    code, out, err = run_cli(capsys, "simulate", *argv, "--window", "500,1500", "--json")
    answer = json.loads(out)
    assert code == 2 and answer["fits"] is False and answer["error"]["code"] == "fell_behind"
    assert answer["error"]["message"] in err


def test_stopping_early_changes_no_run_that_keeps_up() -> None:
    """Runs past the first check that keep up report the same with the early stop allowed or
    not (llama.cpp's 4 slots at 0.85 of its 0.92 req/s: 278,000 steps)."""
    dep = replace(DEP, engine="llama.cpp")
    config = sim_config(dep, cells=32768)
    work = Workload(3000, "lognormal:1000,0.8", "lognormal:250,0.8", rate=0.85)
    runs = [run_replica(dep, profile_for("llama.cpp"), config, work, stop_when_behind=stop)
            for stop in (False, True)]
    assert runs[0].steps > 2 * CHECK_STEPS
    assert not runs[1].rec.stopped_early
    assert [(r.steps, r.duration_s, r.percentiles("ttft")) for r in runs[1:]] == \
        [(runs[0].steps, runs[0].duration_s, runs[0].percentiles("ttft"))]


def test_the_step_cap_says_what_the_engine_serves_of_what_is_offered() -> None:
    config = replace(sim_config(DEP), max_steps=5000)

    def message(rate: float, closed_loop: int = 0) -> str:
        work = Workload(20000, "20000", "2000", rate=rate)
        with pytest.raises(InputError) as info:
            Simulator(DEP, profile_for("vllm"), config).run(iter(work), closed_loop=closed_loop)
        return str(info.value)

    swamped = message(50.0)
    assert swamped.startswith("stopped after 5,000 steps")
    assert "lower --rate" in swamped
    served, offered = (float(part.split(" req/s")[0]) for part in
                       (swamped.split("about ")[1], swamped.split("req/s of the ")[1]))
    assert offered == pytest.approx(50, rel=0.05)
    assert 0.1 < served < 0.5  # a pool of about 22 such requests, each about 2,000 steps
    closed = message(50.0, closed_loop=4)
    assert "give fewer --num-requests" in closed and "lower --rate" not in closed


# -- finding 7: no length fits: the levers that would --------------------------------------------

def test_a_pool_too_small_for_any_request_names_fits_levers_not_a_shorter_length(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B in fp8 on one H100, sized from the profile at 0.92 (vLLM 0.33; 0.34's
    extensible cache leaves it 3.67 GiB): a 0.01 GiB pool, 32 tokens. --max-model-len 4096
    was refused again after simulate had asked for it; now it names what fit finds."""
    base = ["llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--engine-version", "0.33"]
    assert main(["fit", *base, "--max-model-len", "4096", "--json"]) == 0
    levers = json.loads(capsys.readouterr().out)["levers"]
    assert levers
    code, out, err = run_cli(capsys, "simulate", *base, "--rate", "1", "--num-requests", "50",
                             "--max-model-len", "4096")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "no --max-model-len worth serving starts it: its pool holds 32 tokens" in err
    assert "; ".join(f"{lv['name']}: {lv['conversations']:,} conversation"
                     + ("" if lv["conversations"] == 1 else "s") for lv in levers) in err
    code, _, err = run_cli(capsys, "simulate", *base, "--rate", "1", "--num-requests", "50")
    assert code == 2 and "give --max-model-len" not in err and "2 GPUs (tensor parallel)" in err


def test_a_pool_that_only_the_default_length_overruns_still_asks_for_a_length(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "simulate", "llama-3.1-70b", "--gpu", "h100", "--num-gpus",
                           "2", "--rate", "0.2", "--num-requests", "20")
    assert code == 2 and "give --max-model-len" in err and "worth serving" not in err


# -- finding 10: fit's engine-version cautions, and the version in --json ------------------------

@pytest.mark.parametrize("engine", [["--engine-version", "0.99"],
                                    ["--engine", "sglang", "--engine-version", "0.6"]])
def test_simulate_cautions_an_engine_version_as_fit_does(
        capsys: pytest.CaptureFixture[str], engine: list[str]) -> None:
    base = ["llama-3.1-8b", "--gpu", "h100", *engine]
    assert main(["fit", *base, "--max-model-len", "8192", "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)
    newer = [c for c in fit["cautions"] if " is newer than " in c]
    assert len(newer) == 1
    out = _simulate(capsys, *base, "--rate", "2", "--num-requests", "50")
    assert newer[0] in out["cautions"]
    assert out["settings"]["engine_version"] == fit["engine_version"]
    assert out["settings"]["model_runner"] == fit["model_runner"]


def test_the_json_settings_name_the_version_usage_and_runner_that_sized_the_pool(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--num-requests", "50"]
    serve = _simulate(capsys, *argv)["settings"]
    offline = _simulate(capsys, *argv, "--usage", "offline")["settings"]
    assert (serve["usage"], offline["usage"]) == ("serve", "offline")
    assert offline["max_num_batched_tokens"] != serve["max_num_batched_tokens"]  # it sized
    old = _simulate(capsys, *argv, "--engine-version", "0.10")["settings"]
    assert old["engine_version"] == "0.10" and old["model_runner"] != serve["model_runner"]
    assert _simulate(capsys, *argv, "--engine", "sglang")["settings"]["usage"] is None


# -- finding 13: prefix groups as drawn; hits of preempted requests -------------------------------

@pytest.mark.usefixtures("simulate_once")  # one run for its --json and its text
def test_the_summary_counts_the_requests_that_follow_one_of_their_group(
        capsys: pytest.CaptureFixture[str]) -> None:
    """5,000 groups for 200 requests: most groups get one request, which has no earlier one
    to share with; the count is the workload's own."""
    work = Workload(200, "512", "128", rate=2.0, prefix_groups=5000, prefix_len=100)
    seen: set[int] = set()
    followers = 0
    for r in work:
        followers += r.prefix_group in seen
        seen.add(r.prefix_group)
    assert 0 < followers < 20
    argv = ["llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--num-requests", "200",
            "--prefix-groups", "5000", "--prefix-len", "100"]
    out = _simulate(capsys, *argv)
    assert out["prefix_followers"] == followers
    code, text, _ = run_cli(capsys, "simulate", *argv)
    assert code == 0
    assert f"shared prefixes: {followers} of the 200 requests follow an earlier request" in text
    assert "each request drawn into one of 5,000 groups" in text


@pytest.mark.usefixtures("simulate_once")  # one run for its --json and its text
def test_prefix_cache_hits_without_shared_prefixes_are_said_to_be_preempted_requests(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["llama-3.1-8b", "--gpu", "h100", "--rate", "0.8", "--num-requests", "2000",
            *LONG_PROMPTS, "--seed", "2", "--engine-version", "0.33"]  # 0.34's pool preempts none
    out = _simulate(capsys, *argv)
    assert out["preemptions"] > 0
    assert out["prefix_cache_hit_blocks_readmitted"] == out["prefix_cache_hit_blocks"] > 0
    code, text, _ = run_cli(capsys, "simulate", *argv)
    assert code == 0
    assert "all of them preempted requests finding their own blocks again" in text
    grouped = _simulate(capsys, "llama-3.1-8b", "--gpu", "h100", "--rate", "4",
                        "--num-requests", "200", "--prefix-groups", "2", "--prefix-len", "256")
    assert grouped["prefix_cache_hit_blocks"] > grouped["prefix_cache_hit_blocks_readmitted"]


@pytest.mark.parametrize("fraction", ["0.832", "0.835"])
def test_sglang_with_too_few_state_slots_does_not_fit_rather_than_hang(
        fraction: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3.5-35B-A3B on one H100 at these fractions: 0 or 2 state slots, under the 3 a
    running request takes, so SGLang runs no request; the simulator had admitted none and
    looped for ever. It refuses, as fit does."""
    argv = ["qwen3.5-35b-a3b", "--gpu", "h100", "--engine", "sglang", "--max-model-len",
            "2048", "--mem-fraction-static", fraction]
    assert main(["fit", *argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "does not fit"
    assert main(["simulate", *argv, "--rate", "1", "--num-requests", "20"]) == 2
    err = capsys.readouterr().err
    assert "does not fit" in err and "max_running_requests is 0" in err


def test_shared_prefixes_are_not_said_to_be_cached_with_prefix_caching_off(
        capsys: pytest.CaptureFixture[str]) -> None:
    """With --no-prefix-caching the followers of a group find nothing cached (no hit is
    counted): the summary says caching is off rather than that they can find the prefix."""
    argv = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--num-requests",
            "100", "--prefix-groups", "10", "--prefix-len", "300"]
    code, cached, _ = run_cli(capsys, *argv)
    assert code == 0 and "whose prefix they can find cached" in cached
    code, off, _ = run_cli(capsys, *argv, "--no-prefix-caching")
    line = next(x for x in off.splitlines() if x.startswith("shared prefixes:"))
    assert code == 0 and "prefix-cache hits 0 blocks" in off
    assert "can find" not in line and "prefix caching is off" in line


@pytest.mark.usefixtures("simulate_once")  # one run for its --json and its text
def test_a_windows_goodput_and_the_runs_rates_each_name_their_span_in_json(
        capsys: pytest.CaptureFixture[str]) -> None:
    """With --window goodput is per second of the window's arrivals, the request rate per
    second of the whole run (the fill and the drain in it): 3 req/s with every request good
    reads a goodput above the request rate. Each says its span and its seconds, which
    divide its count back to it, as the text's lines do."""
    argv = ["llama-3.1-8b", "--gpu", "h100", "--rate", "3", "--num-requests", "300",
            "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100"]
    out = _simulate(capsys, *argv, "--window", "20,80")
    assert out["goodput_req_s"] > out["request_rate_req_s"]  # the two spans differ
    assert (out["rates_over"], out["goodput_over"]) == ("simulated_time", "window_arrivals")
    assert out["rates_over_s"] == out["duration_s"] > out["goodput_over_s"] > 0
    assert out["request_rate_req_s"] == pytest.approx(out["completed"] / out["rates_over_s"])
    assert out["goodput_req_s"] == pytest.approx(out["good_requests"] / out["goodput_over_s"])
    code, text, _ = run_cli(capsys, "simulate", *argv, "--window", "20,80")
    assert code == 0 and f"over the window's {out['goodput_over_s']:,.6g} s of arrivals" in text
    whole = _simulate(capsys, *argv)  # no window: both over the simulated time
    assert whole["goodput_over"] == whole["rates_over"] == "simulated_time"
    assert whole["goodput_over_s"] == whole["rates_over_s"] == whole["duration_s"]


def test_the_latency_table_reads_seconds_once_an_entry_reaches_100_s() -> None:
    """One unit for the whole table, named in its corner: a TTFT just under 100 s keeps it in
    ms; one just over puts every row, TPOT too, in seconds (not 100,010.0 ms)."""
    tpot = {"mean": 0.0985, "p50": 0.0928, "p90": 0.1126, "p95": 0.1565, "p99": 0.1601}
    under = latency_table({"TTFT": {**tpot, "p99": 99.99}, "TPOT": tpot})
    over = latency_table({"TTFT": {**tpot, "p99": 100.04}, "TPOT": tpot})
    assert under[0].split()[0] == "ms" and under[1].split()[-1] == "99,990.0"
    assert under[2].split()[1:] == [f"{x * 1e3:.1f}" for x in tpot.values()]
    assert over[0].split()[0] == "s" and over[1].split()[-1] == "100.0"
    assert over[2].split()[1:] == [f"{x:.4f}" for x in tpot.values()]  # 0.1 ms kept


def test_an_overloaded_runs_hour_long_latencies_read_in_seconds_and_json_keeps_seconds(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B on an L4 at 20 req/s of 2,000 / 500 tokens: TTFTs of ~25 minutes, once
    printed as 1,410,9xx.x ms. The text's table and its --percentile line read seconds; --json
    keeps its ttft_s in seconds under the same names as any run's."""
    argv = ("llama-3.1-8b", "--gpu", "l4", "--rate", "20", "--num-requests", "400",
            "--input-len", "2000", "--output-len", "500", "--max-model-len", "4096")
    out = _simulate(capsys, *argv)
    ttft = out["ttft_s"]
    assert set(ttft) == {"mean", "p50", "p90", "p95", "p99"} and ttft["p99"] > 100
    code, text, _ = run_cli(capsys, "simulate", *argv, "--percentile", "90", "--slo-ttft-ms",
                            "1000", "--slo-tpot-ms", "200")
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[-5:] == [
        "mean", "p50", "p90", "p95", "p99"])
    assert code == 0 and lines[head].split()[0] == "s"
    assert lines[head + 1].split()[1:] == [f"{ttft[k]:,.1f}" for k in
                                           ("mean", "p50", "p90", "p95", "p99")]
    assert f"p90: TTFT {ttft['p90']:,.1f} s, TPOT {out['tpot_s']['p90'] * 1e3:,.1f} ms" in text
    assert " ms" not in lines[head + 1] and f"{ttft['p90'] * 1e3:,.1f}" not in text
