"""A dense model's data-parallel ranks each on its own clock (sim/independent_ranks.py), as
vLLM runs them: Llama-3.1-8B on vLLM DP2 over two H100s. A rank's requests are served as one
rank alone would serve them, whatever the other rank runs; the MoE's ranks still step together
(tests/test_sim_data_parallel.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.data_parallel import independent_ranks
from ridgeline.engines import profile_for
from ridgeline.memory import EngineSettings
from ridgeline.sim.config import SimConfig, sim_config
from ridgeline.sim.data_parallel import ROUND_ROBIN, DataParallelSimulator, rank_config
from ridgeline.sim.independent_ranks import IndependentRanksSimulator
from ridgeline.sim.metrics import SimResult
from ridgeline.sim.pipeline import run_replica
from ridgeline.sim.request import Request
from ridgeline.sim.simulator import Simulator
from ridgeline.sim.workload import Workload
from tests.conftest import run_cli

PROFILE = profile_for("vllm")
LONG, SHORT = (4000, 300), (200, 100)  # (prompt, output) tokens


def llama_dp2() -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                            num_gpus=1, engine="vllm", data_parallel_size=2)


def config(dep: Deployment, lagged: bool) -> SimConfig:
    return replace(sim_config(dep, EngineSettings(max_model_len=8192)),
                   async_scheduling=lagged)


def replica(dep: Deployment) -> Deployment:
    """One rank as a deployment of its own, without data parallelism."""
    return Deployment.build(dep.model, dep.accelerator, num_gpus=dep.rank_gpus,
                            engine=dep.engine)


def burst(shapes: list[tuple[int, int]]) -> list[Request]:
    """Requests all arriving at 0 s, in order."""
    return [Request(i, 0.0, prompt, output) for i, (prompt, output) in enumerate(shapes)]


def one_rank(dep: Deployment, cfg: SimConfig, shapes: list[tuple[int, int]]) -> SimResult:
    """The same requests on one rank alone: a plain simulator with one rank's settings, on
    one replica without data parallelism."""
    return Simulator(replica(dep), PROFILE, rank_config(dep.engine, cfg, dep.data_parallel_size)).run(
        iter(burst(shapes)), keep_rows=True)


def latencies(result: SimResult, ids: list[int]) -> list[float]:
    """TTFT, TPOT and end-to-end of each of the rows ``ids`` in turn (a row: id, arrival,
    prompt, output, TTFT, TPOT, end-to-end, …)."""
    rows = {row[0]: row for row in result.rec.rows}
    return [value for i in ids for value in rows[i][4:7]]


@pytest.mark.parametrize("lagged", [False, True])
def test_a_ranks_short_requests_run_as_one_rank_alone_runs_them_beside_long_ones(
        lagged: bool) -> None:
    # long and short in turn at 0 s: vLLM's least loaded deals the longs to rank 0 and the
    # shorts to rank 1, whose steps do not wait for rank 0's prompt chunks
    dep = llama_dp2()
    cfg = config(dep, lagged)
    mixed = [LONG, SHORT] * 4
    sim = IndependentRanksSimulator(dep, PROFILE, cfg)
    both = sim.run(iter(burst(mixed)), keep_rows=True)
    assert both.completed == 8 and sim.dealt == [4, 4]
    shorts = list(range(1, 8, 2))
    alone = one_rank(dep, cfg, [SHORT] * 4)
    assert latencies(both, shorts) == pytest.approx(latencies(alone, [0, 1, 2, 3]), rel=1e-12)
    longs = one_rank(dep, cfg, [LONG] * 4)
    assert latencies(both, list(range(0, 8, 2))) == pytest.approx(
        latencies(longs, [0, 1, 2, 3]), rel=1e-12)
    # the run lasts as long as the slower rank; steps and busy time are both ranks' summed
    assert both.duration_s == pytest.approx(longs.duration_s, rel=1e-12)
    assert both.steps == alone.steps + longs.steps
    assert both.busy_s == pytest.approx(alone.busy_s + longs.busy_s, rel=1e-12)
    # the ranks stepping together (the lock step a MoE's take) would have slowed the shorts
    locked = DataParallelSimulator(dep, PROFILE, cfg).run(iter(burst(mixed)), keep_rows=True)
    assert latencies(locked, [1])[2] > 1.5 * latencies(alone, [0])[2]


def test_two_ranks_evenly_dealt_serve_twice_one_ranks_throughput() -> None:
    dep = llama_dp2()
    cfg = config(dep, True)
    shapes = [(500, 100)] * 200
    sim = IndependentRanksSimulator(dep, PROFILE, cfg)
    two = sim.run(iter(burst(shapes)))
    one = one_rank(dep, cfg, shapes[:100])
    assert sim.dealt == [100, 100]
    assert two.duration_s == one.duration_s
    assert two.request_rate_req_s == pytest.approx(2 * one.request_rate_req_s, rel=1e-12)
    assert two.output_tok_s == pytest.approx(2 * one.output_tok_s, rel=1e-12)
    # the running gauge is both ranks' summed at every instant
    assert two.running_batch["max"] == 2 * one.running_batch["max"]
    assert two.running_batch["mean"] == pytest.approx(2 * one.running_batch["mean"], rel=1e-9)
    assert two.percentiles("itl") == pytest.approx(one.percentiles("itl"), rel=1e-12)


def test_an_idle_rank_starts_at_its_arrival_not_at_the_busy_ranks_clock() -> None:
    # a long request keeps rank 0 busy; a short one at 0.5 s goes to the idle rank 1 and
    # starts then: its latencies are those of a rank given it alone
    dep = llama_dp2()
    cfg = config(dep, True)
    requests = [Request(0, 0.0, 8000, 2000), Request(1, 0.5, *SHORT)]
    result = IndependentRanksSimulator(dep, PROFILE, cfg).run(iter(requests), keep_rows=True)
    alone = one_rank(dep, cfg, [SHORT])
    assert latencies(result, [1]) == pytest.approx(latencies(alone, [0]), rel=1e-9)


def test_run_replica_takes_independent_ranks_for_a_dense_model_only() -> None:
    dep = llama_dp2()
    assert independent_ranks(dep)
    assert not independent_ranks(replace(dep, data_parallel_size=1))
    cfg = config(dep, True)
    shapes = [LONG, SHORT] * 3
    replica = run_replica(dep, PROFILE, cfg, burst(shapes))
    own = IndependentRanksSimulator(dep, PROFILE, cfg).run(iter(burst(shapes)))
    assert (replica.duration_s, replica.steps) == (own.duration_s, own.steps)


def test_simulate_runs_a_dense_model_over_vllm_ranks_and_says_how(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "llama-3.1-8b", "--gpu", "h100", "-dp", "2", "--rate", "8",
            "--num-requests", "200"]
    code, text, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert "each rank steps on its own clock" in text
    assert "every step runs all the ranks together" not in text
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["completed"] == 200
    assert report["settings"]["data_parallel"]["ranks_summed"] == ["steps", "busy_s"]
    # the mean step is one rank's: two ranks' steps over their busy time, each under 1 s
    assert 0 < report["busy_s"] / report["steps"] < 0.05
    assert report["busy_s"] > report["duration_s"]  # both ranks busy most of the run


@pytest.mark.parametrize("lagged", [False, True])
def test_a_rank_dealt_staggered_arrivals_serves_them_as_one_rank_alone_does(
        lagged: bool) -> None:
    # dealt in turn (SGLang's method, set here to fix who gets what): rank 0 every long
    # request, rank 1 every short one, arriving at their own times; rank 1's requests come
    # while it is idle, mid-step and at a step's end, so its clock, its waking and (async)
    # its holding a request a step are read as one rank's own run reads them
    dep = llama_dp2()
    cfg = config(dep, lagged)
    times = [0.013 * k * k for k in range(40)]
    shapes = [LONG if k % 2 == 0 else SHORT for k in range(40)]

    def requests(keep: int | None = None) -> list[Request]:
        return [Request(k, t, *shape) for k, (t, shape) in enumerate(zip(times, shapes))
                if keep is None or k % 2 == keep]

    sim = IndependentRanksSimulator(dep, PROFILE, cfg)
    sim.method = ROUND_ROBIN
    both = sim.run(iter(requests()), keep_rows=True)
    assert sim.dealt == [20, 20]
    for rank in (0, 1):
        alone = Simulator(replica(dep), PROFILE, rank_config(dep.engine, cfg, 2)).run(
            iter(requests(rank)), keep_rows=True)
        ids = list(range(rank, 40, 2))
        assert latencies(both, ids) == pytest.approx(latencies(alone, ids), rel=1e-12,
                                                     nan_ok=True)


def test_a_closed_loop_over_the_ranks_keeps_its_users_in_flight() -> None:
    dep = llama_dp2()
    sim = IndependentRanksSimulator(dep, PROFILE, config(dep, True))
    result = sim.run(iter(burst([(500, 100)] * 300)), closed_loop=16)
    assert result.completed == 300 and sum(sim.dealt) == 300
    assert result.running_batch["max"] == 16
    assert min(sim.dealt) > 100  # least loaded: neither rank starved


def test_the_queue_an_arrival_joins_is_every_ranks_summed() -> None:
    # 400 requests at once on two ranks of 4 seats, all come before either rank's first step:
    # the last leaves 400 waiting over the deployment (200 a rank) and 8 seats to fill (4 a
    # rank); the overload readings count both ranks' (one rank's read 200, 196 past its room)
    dep = llama_dp2()
    cfg = replace(config(dep, True), max_num_seqs=4)
    sim = IndependentRanksSimulator(dep, PROFILE, cfg)
    result = sim.run(iter(burst([(500, 100)] * 400)))
    assert sim.dealt == [200, 200]
    assert result.rec.waiting_at_arrival == 400
    assert result.rec.batch_room_at_arrival == 8.0
    assert result.rec.peak_queue[:2] == (392.0, 400)


@pytest.mark.parametrize("lagged", [False, True])
def test_a_rank_drafting_speculatively_serves_its_requests_as_one_replica_does(
        lagged: bool) -> None:
    # each rank a plain engine: EAGLE's 3 drafts a step, priced and accepted on the rank
    # alone, its shorts' latencies those of one replica given them (a MoE's lock step
    # refuses speculative decoding)
    dep = llama_dp2()
    cfg = replace(config(dep, lagged), spec_tokens=3, spec_acceptance=0.7, spec_draft_cost=0.05)
    mixed = [LONG, SHORT] * 4
    sim = IndependentRanksSimulator(dep, PROFILE, cfg)
    both = sim.run(iter(burst(mixed)), keep_rows=True)
    assert both.completed == 8 and sim.dealt == [4, 4]
    alone = one_rank(dep, cfg, [SHORT] * 4)
    assert latencies(both, list(range(1, 8, 2))) == pytest.approx(
        latencies(alone, [0, 1, 2, 3]), rel=1e-12)
    plain = one_rank(dep, replace(cfg, spec_tokens=0), [SHORT] * 4)
    assert latencies(alone, [0])[1] < 0.6 * latencies(plain, [0])[1]  # TPOT: drafts accepted


def test_simulate_drafts_on_a_dense_models_ranks_and_refuses_a_moes(
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = ["--rate", "4", "--num-requests", "100", "--spec-tokens", "3", "--spec-method",
            "eagle", "--json"]
    code, out, err = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "-dp", "2",
                             *spec)
    assert code == 0, err
    report = json.loads(out)
    assert report["completed"] == 100 and report["settings"]["spec_tokens"] == 3
    code, out, err = run_cli(capsys, "simulate", "qwen3-30b-a3b", "--gpu", "h100", "-dp", "2",
                             *spec)
    assert code == 2 and "speculative decoding with data-parallel attention" in err


@pytest.mark.parametrize("lagged", [False, True])
def test_a_run_cut_short_counts_no_gap_of_a_step_still_running(lagged: bool) -> None:
    # two short requests 1 ms apart, one a rank; a TPOT SLO every request misses stops the run
    # at rank 0's finish (``stop_past``), rank 1's last step then still running: its 99
    # decode gaps less that step's one count, not all 99
    dep = llama_dp2()
    cfg = config(dep, lagged)

    def requests() -> Iterator[Request]:
        return iter([Request(0, 0.0, *SHORT), Request(1, 0.001, *SHORT)])

    sim = IndependentRanksSimulator(dep, PROFILE, cfg)
    cut = sim.run(requests(), slo=(None, 1e-4), stop_past=0)
    assert sim.dealt == [1, 1] and cut.rec.missed and cut.completed == 1
    whole = IndependentRanksSimulator(dep, PROFILE, cfg).run(requests())
    assert whole.rec.hist["itl"].total == 2 * 99
    assert cut.rec.hist["itl"].total == 99 + 98


@pytest.mark.parametrize("seed", [0, 2])
def test_ranks_dealt_a_busy_stream_under_async_scheduling_serve_it_as_alone(seed: int) -> None:
    # 200 req/s of short outputs over 3 ranks of 4 seats, dealt in turn: arrivals come
    # mid-step, often several a step, some after a step that leaves its rank idle. Each rank
    # holds or takes them as one engine would (``Run.arrive_due``: its state read once at
    # the step's end, for every arrival in the step; those held a step join first), so its
    # requests' latencies are those of the rank alone
    dep = replace(llama_dp2(), data_parallel_size=3)
    cfg = replace(config(dep, True), max_num_seqs=4)
    work = Workload(90, "uniform:30,700", "uniform:1,3", rate=200.0, seed=seed)
    sim = IndependentRanksSimulator(dep, PROFILE, cfg)
    sim.method = ROUND_ROBIN
    both = sim.run(iter(work), keep_rows=True)
    assert sim.dealt == [30, 30, 30]
    for rank in range(3):
        mine = [r for r in work if r.id % 3 == rank]
        alone = Simulator(replica(dep), PROFILE, rank_config(dep.engine, cfg, 3)).run(
            iter(mine), keep_rows=True)
        ids = [r.id for r in mine]
        assert latencies(both, ids) == pytest.approx(latencies(alone, ids), rel=1e-12,
                                                     nan_ok=True)


@pytest.mark.parametrize("lagged", [False, True])
def test_a_ranks_runs_of_decode_steps_serve_as_its_plain_steps(lagged: bool) -> None:
    # the fast path: each rank takes runs of decode steps up to the next arrival; the run
    # reads as the plain steps do, to rounding (latencies, steps, gaps, the dealing, the
    # running gauge), in far fewer of the loop's turns
    dep = replace(llama_dp2(), data_parallel_size=4)
    cfg = config(dep, lagged)
    work = Workload(400, "lognormal:400,0.8", "uniform:20,300", rate=30.0, seed=3)
    results = {}
    for fast in (True, False):
        sim = IndependentRanksSimulator(dep, PROFILE, replace(cfg, fast_path=fast))
        results[fast] = (sim, sim.run(iter(work), keep_rows=True))
    (fast_sim, fast), (plain_sim, plain) = results[True], results[False]
    assert fast_sim.dealt == plain_sim.dealt
    assert (fast.completed, fast.steps) == (plain.completed, plain.steps) == (400, plain.steps)
    ids = list(range(400))
    assert latencies(fast, ids) == pytest.approx(latencies(plain, ids), rel=1e-9)
    assert fast.duration_s == pytest.approx(plain.duration_s, rel=1e-12)
    assert fast.rec.hist["itl"].total == plain.rec.hist["itl"].total
    assert fast.running_batch["mean"] == pytest.approx(plain.running_batch["mean"], rel=1e-9)
    # every step the ranks' own fast path's (sim/fast_path.py), none on the other
    assert sum(rank.sim.bulk_steps for rank in fast_sim.ranks) == fast.steps
    assert not sum(rank.sim.bulk_steps for rank in plain_sim.ranks)


def test_tensorrt_llm_data_parallelism_over_a_dense_model_points_at_its_levers(
        capsys: pytest.CaptureFixture[str]) -> None:
    # vLLM's data-parallel attention (--enable-expert-parallel) is refused for a dense model:
    # the refusal names one replica, or vLLM's ranks each its own engine, not that lever
    code, _, err = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "-dp", "2",
                           "--engine", "trtllm", "--rate", "4")
    assert code == 2 and "(enable_attention_dp) is not modelled" in err
    assert "llama-3.1-8b is dense" in err and "--engine vllm --data-parallel-size 2)" in err
    assert "--enable-expert-parallel" not in err
    code, _, err = run_cli(capsys, "simulate", "qwen3-30b-a3b", "--gpu", "h100", "-dp", "2",
                           "--engine", "trtllm", "--rate", "4")
    assert code == 2 and "--enable-expert-parallel" in err  # a MoE's lever stays
