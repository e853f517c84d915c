"""OVERLOADED where a run's own counts miss it (sim/overload.py): a small, sustained overload
that vLLM's batch takes on, read against the most the engine serves with its batch full; a
burst the engine works through long after it ended; and the line says what grew."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from typing import Any

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engines import profile_for
from ridgeline.memory import EngineSettings
from ridgeline.reports.simulate_overload import COMPUTE_BOUND, overload_rates
from ridgeline.sim.config import sim_config
from ridgeline.sim.metrics import OVERLOAD_BACKLOG, SimResult
from ridgeline.sim.overload import (
    BURST_LIFETIMES,
    BURST_SHARE,
    SATURATION_SLACK,
    backing_up,
    burst,
    grows,
    growth,
    offered_req_s,
    saturated_req_s,
)
from ridgeline.sim.pipeline import run_replica
from ridgeline.sim.scheduler import FULL_KV
from ridgeline.sim.workload import Workload
from tests.test_sim_overload import late_burst_simulated, simulate_both

DEP = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16")
# the pool these runs' figures were read at: vLLM 0.32's (0.34 sizes a larger one after warm-up)
POOL = EngineSettings(engine_version="0.32")
SHORT = ("512", "128")  # simulate's default lengths: one H100 serves about 44.3 req/s of them
AT_46 = ["llama-3.1-8b", "--gpu", "h100", "--rate", "46", "--num-requests", "2000",
         "--seed", "2"]


def _work(n: int, rate: float, seed: int, **arrivals: Any) -> Workload:
    return Workload(n, *SHORT, rate=rate, seed=seed, **arrivals)


@cache  # a run two readings ask of is run once (SimResult is only read)
def _run(work: Workload) -> SimResult:
    return run_replica(DEP, profile_for("vllm"), sim_config(DEP, POOL), work, stop_when_behind=True)


@cache
def _saturated(work: Workload) -> float:
    """The batch-full replay's rate (saturated_req_s) of ``work`` on DEP under POOL."""
    return saturated_req_s(DEP, profile_for("vllm"), sim_config(DEP, POOL), work)


def _verdict(work: Workload) -> str:
    """What simulate reads of the run: its own readings, else (where requests backed up) the
    batch-full replay's; "" for none."""
    r = _run(work)
    saturated = None if r.rec.overloaded() or not backing_up(r.rec) else _saturated(work)
    flag = overload_rates(r, work.num_requests, saturated)
    return "" if flag is None else flag.reading


def _simulate(*argv: str) -> tuple[dict[str, Any], str]:
    """simulate's --json and text for ARGV, from one run (simulate_both)."""
    return simulate_both(*argv)


def test_the_batch_full_rate_is_within_its_slack_under_what_a_long_overloaded_run_serves() -> None:
    """The replay of 46 req/s's requests sent at once serves 43.5 req/s; 20,000 requests offered
    48 req/s serve 44.3 over the second half of their arrivals, its queue growing throughout.
    Of 1,000 / 300 tokens: 16.7. (Before the serving profile's refit, 8917c5a: 43.2, 43.6 and
    16.6; before a batch ran as its captured CUDA-graph size's matmul rows, graph_batches.py:
    43.7, 44.2 and 16.6.)"""
    saturated = _saturated(_work(2000, 46.0, 2))
    assert saturated == pytest.approx(43.46, abs=0.01)
    chat = Workload(765, "1000", "300", rate=17.0)  # a long run offered more serves a little more
    assert saturated_req_s(DEP, profile_for("vllm"), sim_config(DEP, POOL), chat) == \
        pytest.approx(16.70, abs=0.01)
    rec = _run(_work(20_000, 48.0, 0)).rec
    first, last = rec.arrived_s
    mid = (first + last) / 2
    served = (rec.departures.count_to(last) - rec.departures.count_to(mid)) / (last - mid)
    assert (1 - SATURATION_SLACK) * served < saturated < served


def test_a_sustained_overload_the_batch_takes_on_is_overloaded() -> None:
    """46 req/s offered to one H100 serving 44.3: only 3 wait when the last arrives, and past
    the fill the shortfall is under the noise its own readings ask, so it had passed. Its
    requests in the engine grew by 167 of the 1,012 arriving over the second half, beyond
    noise, and it is offered more than the 43.5 it serves at most: OVERLOADED, worded by what
    grew, the running batch (its running batch 362 to 551; 7 waiting, 163 grown, 363 to 549
    before the fp8-block checkpoints' refit of the serving profile, 94c4964)."""
    rec = _run(_work(2000, 46.0, 2)).rec
    g = growth(rec)
    assert g is not None and g.arrived == 1012 and g.grown == pytest.approx(166.7, abs=1)
    assert grows(rec) is not None and not rec.overloaded()
    out, text = _simulate(*AT_46)
    flag = out["overloaded"]
    assert flag["reading"] == "capacity" and flag["grew"] == "batch"
    assert flag["offered_req_s"] > (1 + SATURATION_SLACK) * flag["saturated_req_s"]
    assert flag["waiting_at_last_arrival"] < OVERLOAD_BACKLOG
    grown = flag["growth"]
    assert grown["running"][1] > grown["running"][0]
    line = next(x for x in text.splitlines() if x.startswith("OVERLOADED"))
    assert f"{flag['saturated_req_s']:,.2f} " + ("at most" if flag["saturated_req_s"] >= flag[
        "served_req_s"] else "with its batch full") + " (these requests sent at once" in line
    assert f"its running batch from {grown['running'][0]:,} to {grown['running'][1]:,}" in line
    assert "the running batch takes on the excess, each step slower as it grows" in line
    assert "the queue grows for as long as they arrive" not in line


def test_a_long_run_offered_a_little_more_than_it_serves_is_overloaded() -> None:
    """20,000 requests at 46 req/s, 435 s: 340 wait when the last arrives, its pool full, but
    past the fill fewer leave than arrive by less than the 5 % the run's own readings ask (320
    before the fp8-block checkpoints' refit, 94c4964; 426 before the serving profile's refit,
    8917c5a; 302 before a batch ran as its captured CUDA-graph size's rows); the batch-full
    rate reads it."""
    work = _work(20_000, 46.0, 0)
    rec = _run(work).rec
    assert not rec.overloaded() and rec.waiting_at_arrival == 340
    assert _verdict(work) == "capacity"


def test_a_full_batch_with_a_queue_is_backing_up_though_it_grew_within_noise() -> None:
    """5,000 requests at 48 req/s, seed 6: the batch sits at its pool's edge and the queue swings
    over the second half of the arrivals, the requests in the engine growing by 56 of 2,462,
    within noise; 26 waiting when the last arrives say they back up, and the batch-full rate
    reads the overload the run's own readings miss (25 before the fp8-block checkpoints'
    refit, 94c4964; 76 and 67 before the serving profile's refit, 8917c5a). (Seed 5 had read
    so until a batch ran as its captured CUDA-graph size's rows, graph_batches.py; its own
    readings now catch it.)"""
    work = _work(5000, 48.0, 6)
    rec = _run(work).rec
    g = growth(rec)
    assert g is not None and g.arrived == 2462 and g.grown == pytest.approx(55.6, abs=1)
    assert grows(rec) is None and rec.waiting_at_arrival == 26 and backing_up(rec)
    assert not rec.overloaded() and _verdict(work) == "capacity"


@pytest.mark.parametrize("rate", [30.0, 35.0, 40.0])
def test_loads_well_under_what_the_engine_serves_are_not_overloaded(rate: float) -> None:
    """2,000 requests at 30-40 req/s (68-90 % of 44.3), Poisson and bursty gamma arrivals,
    three seeds each: none is called overloaded."""
    for seed in (0, 1, 2):
        for arrivals in ({}, {"arrival": "gamma", "burstiness": 0.5}):
            assert _verdict(_work(2000, rate, seed, **arrivals)) == ""


def test_a_batch_still_filling_near_capacity_is_not_overloaded() -> None:
    """1,000 requests at 40 req/s: over the second half of the arrivals the requests in the
    engine grew by 142 of 527 (140 before the fp8-block checkpoints' refit, 94c4964), beyond
    noise, as a near-capacity batch swings; the engine serves 43.5 at most, more than the 40.6
    offered."""
    work = _work(1000, 40.0, 0)
    rec = _run(work).rec
    g = grows(rec)
    assert g is not None and g.grown == pytest.approx(142, abs=1) and g.arrived == 527
    assert offered_req_s(rec) < _saturated(work)
    assert _verdict(work) == ""


def test_a_burst_worked_through_long_after_it_ended_is_overloaded() -> None:
    """The burst to 8 seats: its last request finds 1,992 waiting, a queue the engine works
    through until 1,097 s, 250 times a request's 4.4 s of service, at 1.82 req/s; the late
    arrivals find none, and it had read no verdict (p99 end-to-end 1,093 s)."""
    out, text = late_burst_simulated()  # test_sim_overload's run, where it ran here
    assert out["stopped_early"] is None and out["completed"] == 2050
    flag = out["overloaded"]
    assert flag["reading"] == "burst" and flag["grew"] == "queue"
    found = flag["burst"]
    assert found["waiting"] == 1992 and found["arrived"] == 2000
    assert found["cleared_s"] == pytest.approx(1097, abs=1)
    lifetimes = (found["cleared_s"] - found["at_s"]) / found["mean_service_s"]
    assert lifetimes == pytest.approx(250, abs=1) and lifetimes > BURST_LIFETIMES
    line = next(x for x in text.splitlines() if x.startswith("OVERLOADED"))
    assert line.startswith("OVERLOADED by a burst: when the request arriving at 1.0 s came, "
                           "1,992 of the 2,000 arrived by then were waiting to start")
    assert f"until {found['cleared_s']:,.0f} s to clear, {lifetimes:,.0f} times" in line
    assert "working through it at about 1.82 req/s" in line


def test_a_queue_wandering_near_capacity_is_no_burst() -> None:
    """llama.cpp's 4 slots offered 0.88 req/s, near what they serve: 61 wait at 671 s and
    the queue takes 880 s to clear, nearly two hundred service times, but it built over the
    588 requests come since the queue was last empty: no burst."""
    dep = replace(DEP, engine="llama.cpp")
    work = Workload(2000, "lognormal:1000,0.8", "lognormal:250,0.8", rate=0.88, seed=0)
    rec = run_replica(dep, profile_for("llama.cpp"), sim_config(dep, cells=32768), work,
                      stop_when_behind=True).rec
    _, waiting, at_s, _, since_empty = rec.peak_queue
    assert waiting == 61 and since_empty == 588 and waiting < BURST_SHARE * since_empty
    assert rec.peak_cleared_s - at_s > BURST_LIFETIMES * rec.mean_service_s
    assert burst(rec) is None and not rec.overloaded()


def test_a_queue_that_grows_is_worded_as_one() -> None:
    """990 chat requests at 22 req/s to an engine serving about 17: 135 wait when the last
    arrives; the line says the queue grows, not the batch."""
    out, text = _simulate("llama-3.1-8b", "--gpu", "h100", "--rate", "22",
                          "--num-requests", "990", "--input-len", "1000", "--output-len", "300")
    flag = out["overloaded"]
    assert flag["grew"] == "queue" and flag["waiting_at_last_arrival"] >= OVERLOAD_BACKLOG
    line = next(x for x in text.splitlines() if x.startswith("OVERLOADED"))
    assert "the queue grows for as long as they arrive" in line
    assert "the running batch takes on the excess" not in line


def test_the_batch_full_rate_is_called_a_ceiling_only_where_it_is_one() -> None:
    """30 req/s of 100 / 1,000 tokens to one H100: the run serves 12.44 req/s over its time,
    its drain included, and the replay with the batch full 12.33; the line had called the
    lower one "at most" beside the higher."""
    out, text = _simulate("llama-3.1-8b", "--gpu", "h100", "--rate", "30",
                          "--num-requests", "1000", "--input-len", "100", "--output-len", "1000")
    flag = out["overloaded"]
    line = next(x for x in text.splitlines() if x.startswith("OVERLOADED"))
    saturated = f"{flag['saturated_req_s']:,.2f}"
    if flag["saturated_req_s"] >= flag["served_req_s"]:
        assert f"{saturated} at most" in line
    else:
        assert f"{saturated} with its batch full" in line and "at most" not in line
    assert flag["served_req_s"] > flag["saturated_req_s"]  # the case this pins


# a small card offered many short requests, seats enough that neither they nor the pool fill:
# each step's token budget is shared by the decodes and the prompts, the batch held at ~1,400
COMPUTE_BOUND_RUN = ["llama-3.2-1b", "--gpu", "l4", "--rate", "300", "--input-len", "32",
                     "--output-len", "64", "--max-num-seqs", "2048"]


@pytest.mark.parametrize("requests", ["2000", "20000"])
def test_a_compute_bound_overload_says_so_in_tokens(requests: str) -> None:
    """Llama-3.2-1B on an L4 offered 300 req/s of 32 / 64 tokens with 2,048 seats: no step
    found the KV cache, the seats or the token budget full, yet it serves about 235 req/s,
    so the requests in the engine grow by ~60 req/s. The line had counted "once the batch had
    filled at ~16.6 s (an estimate …)", a fill that never came, and said the batch grows
    "until its pool is full"; it now gives the offered and served tok/s, the growth, and
    that the bound is compute, and --json the same."""
    out, text = _simulate(*COMPUTE_BOUND_RUN, "--num-requests", requests)
    flag = out["overloaded"]
    assert out["batch_filled"]["found"] == "estimated" and flag["limit"] == COMPUTE_BOUND
    assert out["running"]["max"] < 2048
    best = max(flag["served_req_s"], flag["saturated_req_s"] or 0.0)
    tokens = flag["tokens_per_request"]
    assert tokens == 32 + 64
    assert flag["offered_tok_s"] == pytest.approx(flag["offered_req_s"] * tokens)
    assert flag["served_tok_s"] == pytest.approx(best * tokens)
    assert flag["backlog_req_s"] == pytest.approx(flag["offered_req_s"] - best)
    assert flag["offered_tok_s"] > 1.2 * flag["served_tok_s"]
    line = next(x for x in text.splitlines() if x.startswith("OVERLOADED"))
    assert (f"offered {flag['offered_tok_s']:,.0f} tok/s (prompt + output) > served "
            f"{flag['served_tok_s']:,.0f} tok/s, so the requests in the engine grow by "
            f"~{flag['backlog_req_s']:,.1f} req/s") in line
    assert "compute-bound" in line
    assert "once the batch had filled" not in line and "until its pool is full" not in line
    if flag["grew"] == "batch":  # the short run: the batch took the excess on, so its steps
        # slow and TTFT grows only once the batch stops growing (the clause said it of the
        # requests' growth, beside a TTFT that held)
        assert "req/s for as long as they arrive; compute-bound" in line
        assert ("until its steps' token budget, its seats or its pool stop it and the queue "
                "grows, TTFT with it, without bound") in line
    else:  # the long one: its queue, past the estimated fill, with the counts' evidence
        assert "req/s for as long as they arrive and TTFT grows without bound" in line
        assert f"from ~{flag['past_fill_s'][0]:,.1f} s on" in line
        # a longer run's TTFT is the longer: the queue's growth, not a steady state
        short = _simulate(*COMPUTE_BOUND_RUN, "--num-requests", "5000")[0]
        assert out["ttft_s"]["p50"] > 5 * short["ttft_s"]["p50"]


def test_an_overload_its_pool_bounds_is_not_called_compute_bound() -> None:
    """990 chat requests at 22 req/s to one H100 fill its KV cache: the limit is the fill's,
    and the line gives the tokens offered past those served without the compute words."""
    out, text = _simulate("llama-3.1-8b", "--gpu", "h100", "--rate", "22",
                          "--num-requests", "990", "--input-len", "1000", "--output-len", "300")
    flag = out["overloaded"]
    assert out["batch_filled"]["by"] == flag["limit"] == FULL_KV
    line = next(x for x in text.splitlines() if x.startswith("OVERLOADED"))
    assert f"offered {flag['offered_tok_s']:,.0f} tok/s (prompt + output) > served " in line
    assert "compute-bound" not in line and "once the batch had filled at" in line
