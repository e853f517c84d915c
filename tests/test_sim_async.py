"""Async scheduling (vLLM) and the overlap scheduler (SGLang, TensorRT-LLM's PyTorch backend)
in the simulator: on a busy engine the next batch is formed as one starts, so an arrival joins
a step later (``Run.arrive_due``) and a finished request's seat and blocks come free at the end
of the next step (``Simulator.finish``), than in the synchronous loop."""

from __future__ import annotations

import json
from collections.abc import Callable
from copy import deepcopy
from dataclasses import replace
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.engine_scheduling import overlapped_scheduling, vllm_async_with_drafter
from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, check_overlap_flag
from ridgeline.reports.simulate_engine import overlap_clause
from ridgeline.sim.config import SimConfig, sim_config
from ridgeline.sim.request import Request
from ridgeline.sim.simulator import Simulator
from ridgeline.sim.workload import Workload

DEP = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16")
PROFILE = profile_for("vllm")
SGLANG = {"prefill_first": True, "token_ratio": True, "cache_on_schedule": False}
# TensorRT-LLM's scheduler as sim_config builds it: GUARANTEED_NO_EVICT, contexts whole
TRTLLM = {"reserve_full": True, "chunked_prefill": False, "cache_on_schedule": False,
          "lru_free_queue": False}


def engine_of(engine: dict[str, bool]) -> str:
    return "sglang" if engine is SGLANG else "trtllm" if engine is TRTLLM else "vllm"


def config(async_on: bool, fast: bool = True, blocks: int = 20_000, seqs: int = 64,
           **engine: bool) -> SimConfig:
    return SimConfig(num_blocks=blocks, block_size=16, max_num_seqs=seqs,
                     max_num_batched_tokens=2048, max_model_len=32768, fast_path=fast,
                     async_scheduling=async_on, **engine)  # type: ignore[arg-type]


def start_and_steps(async_on: bool, second_arrival_s: float,
                    fast: bool = False) -> tuple[float, list[float]]:
    """When a second request, arriving at ``second_arrival_s`` behind a long one, was first
    scheduled; and every step's end."""
    first = Request(0, 0.0, 200, 400)
    second = Request(1, second_arrival_s, 200, 10)
    ends: list[float] = []
    sim = Simulator(DEP, PROFILE, config(async_on, fast))
    sim.run(iter([first, second]), after_step=lambda s: ends.append(s.now_s))
    return second.first_scheduled_s, ends


def test_a_request_arriving_mid_step_on_a_busy_engine_starts_one_step_later() -> None:
    _, ends = start_and_steps(False, 1.0)
    arrival_s = (ends[5] + ends[6]) / 2  # inside the seventh step, the first one decoding
    sync_start, sync_ends = start_and_steps(False, arrival_s)
    async_start, async_ends = start_and_steps(True, arrival_s)
    boundary = next(i for i, end in enumerate(sync_ends) if end >= arrival_s)
    assert sync_start == sync_ends[boundary]  # the synchronous loop: the next step
    assert async_start == async_ends[boundary + 1]  # async: the step after it
    assert async_ends[boundary + 1] > async_ends[boundary]


def test_an_idle_engine_takes_an_arrival_at_once_under_async_scheduling() -> None:
    _, ends = start_and_steps(False, 1e6)
    arrival_s = ends[-1] + 1.0  # the first request long finished
    assert start_and_steps(True, arrival_s)[0] == start_and_steps(False, arrival_s)[0] \
        == arrival_s


def test_the_fast_path_holds_an_arrival_as_the_step_loop_does() -> None:
    _, ends = start_and_steps(False, 1.0)
    arrival_s = (ends[40] + ends[41]) / 2  # inside a run of decode steps
    fast_start, fast_ends = start_and_steps(True, arrival_s, fast=True)
    slow_start, _ = start_and_steps(True, arrival_s, fast=False)
    assert fast_start == pytest.approx(slow_start, rel=1e-3)
    assert fast_start > min(end for end in fast_ends if end >= arrival_s)  # a step later


def seat_freed(async_on: bool, fast: bool, **engine: bool) -> tuple[float, float, list[float]]:
    """Two seats, a long request in one and a short one in the other, a third waiting for a
    seat: when the short one finished, when the third started, and every step's end."""
    long, short, third = Request(0, 0.0, 100, 300), Request(1, 0.0, 100, 20), \
        Request(2, 0.0, 100, 20)
    ends: list[float] = []
    Simulator(DEP, profile_for(engine_of(engine)),
              config(async_on, fast, seqs=2, **engine)).run(
        iter([long, short, third]), after_step=lambda s: ends.append(s.now_s))
    return short.finish_s, third.first_scheduled_s, ends


@pytest.mark.parametrize("engine", [{}, SGLANG, TRTLLM], ids=["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("fast", [True, False], ids=["fast path", "step loop"])
def test_a_finished_requests_seat_comes_free_at_the_end_of_the_next_step(
        engine: dict[str, bool], fast: bool) -> None:
    """The batch after a finish was formed before the finish was read: the seat it leaves
    is taken a step later than in the synchronous loop, and the engine's other request runs
    on meanwhile."""
    done_s, started_s, ends = seat_freed(False, fast, **engine)
    assert started_s == done_s  # the synchronous loop: the very next step
    done_s, started_s, ends = seat_freed(True, fast, **engine)
    after = ends.index(done_s)
    assert started_s == ends[after + 1] > done_s  # async: the step after it


def test_a_finished_requests_blocks_come_free_a_step_later() -> None:
    """A pool of 55 blocks holds two 400-token prompts (25 blocks each), not three: the
    waiting one gets the short one's blocks a step after it finished (vLLM frees them in
    update_from_output, after the next batch was scheduled)."""
    held: list[tuple[int, int]] = []

    def note(s: Simulator) -> None:
        held.append((s.pool.held, sum(r.blocks_held for r in s.scheduler.running)))

    for async_on in (False, True):
        held.clear()
        long, short, third = Request(0, 0.0, 400, 300), Request(1, 0.0, 400, 20), \
            Request(2, 0.0, 400, 20)
        Simulator(DEP, PROFILE, config(async_on, blocks=55)).run(
            iter([long, short, third]), after_step=note)
        gap = third.first_scheduled_s - short.finish_s
        assert (gap > 0) == async_on
        # blocks held by nobody running: the finished request's, for one step under async
        assert any(pool > running for pool, running in held) == async_on


def test_async_scheduling_lengthens_ttft_under_load_but_not_queueing_nor_tpot() -> None:
    """At 8 req/s on one H100 (docs/simulate.md's example, shorter) the lag adds about a decode
    step to mean TTFT; not to the queueing vLLM reports (its SCHEDULED less its QUEUED event:
    an arrival during a step is taken in, and scheduled, as the batch after next is formed);
    a step's work, and so TPOT, is unchanged."""
    w = Workload(400, "lognormal:1000,0.8", "lognormal:250,0.8", rate=8.0, seed=0)
    sync = Simulator(DEP, PROFILE, config(False)).run(iter(w))
    lagged = Simulator(DEP, PROFILE, config(True)).run(iter(w))
    step_s = sync.percentiles("tpot")["p50"]
    gained = lagged.percentiles("ttft")["mean"] - sync.percentiles("ttft")["mean"]
    assert 0.5 * step_s < gained < 1.5 * step_s
    queued = lagged.percentiles("queue")["mean"] - sync.percentiles("queue")["mean"]
    assert queued < 0.5 * step_s
    assert lagged.percentiles("tpot")["p50"] == pytest.approx(step_s, rel=0.02)
    assert lagged.completed == sync.completed


@pytest.mark.parametrize("engine", [{}, SGLANG, TRTLLM], ids=["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("blocks,seqs", [(20_000, 64), (400, 64), (150, 16), (20_000, 8)])
def test_async_fast_path_agrees_with_the_step_loop_within_half_a_percent(
        engine: dict[str, bool], blocks: int, seqs: int) -> None:
    """Open loop, with pools and seats tight enough that the late frees decide who starts
    and who is preempted (150 requests: vLLM's 400 and 150 blocks preempt 60 and 67 times,
    SGLang's 3 and 6; 8 seats queue 30 s)."""
    w = Workload(150, "lognormal:800,0.8", "lognormal:200,0.8", rate=10.0, seed=3)
    profile = profile_for(engine_of(engine))
    fast = Simulator(DEP, profile, config(True, True, blocks, seqs, **engine)).run(iter(w))
    slow = Simulator(DEP, profile, config(True, False, blocks, seqs, **engine)).run(iter(w))
    assert fast.completed == slow.completed
    for name in ("ttft", "tpot", "queue"):
        for key, value in slow.percentiles(name).items():
            assert fast.percentiles(name)[key] == pytest.approx(value, rel=0.005)


def test_a_step_that_preempts_its_only_request_beside_an_unread_finish_runs_nothing() -> None:
    """60 blocks of 16, budget 512, two one-token requests at once: the first step computes
    440 + 72 tokens; the 440 finishes, its 28 blocks held a step (its finish unread). The
    second's other 463 tokens need 29 blocks, 27 are free: it is preempted, and a step that
    preempted admits nobody — an empty batch, no step and no time, on the fast path as on
    the plain step: the 440 leaves, and the second starts again (its 64 cached tokens hit):
    2 steps, not 3 with an empty step's 7.8 ms."""
    cfg = SimConfig(num_blocks=60, block_size=16, max_num_seqs=16, max_num_batched_tokens=512,
                    max_model_len=32768, async_scheduling=True)
    runs = [Simulator(DEP, PROFILE, replace(cfg, fast_path=fast)).run(
        iter([Request(0, 0.0, 440, 1), Request(1, 0.0, 535, 1)])) for fast in (True, False)]
    fast, slow = runs
    assert (fast.steps, fast.preemptions) == (slow.steps, slow.preemptions) == (2, 1)
    assert fast.duration_s == pytest.approx(slow.duration_s, rel=1e-12)


def test_one_token_outputs_on_a_tiny_pool_at_200_per_s_agree_with_the_step_loop() -> None:
    """gemma-3-27b (sliding-window layers), 250 one-token requests at 200 req/s on 60 blocks:
    the fast path ran an empty step wherever the only running prompt was preempted beside an
    unread finish (157 steps, 7.559 s against the plain step's 151, 7.408 s)."""
    dep = Deployment.build(resolve_model("gemma-3-27b"), resolve_accelerator("h100"), "bf16",
                           engine="vllm")
    work = list(Workload(250, "lognormal:200,1.0", "1", rate=200.0, arrival="gamma", seed=45))
    cfg = SimConfig(num_blocks=60, block_size=16, max_num_seqs=16, max_num_batched_tokens=512,
                    max_model_len=32768, async_scheduling=True)
    fast, slow = (Simulator(dep, PROFILE, replace(cfg, fast_path=fast)).run(
        iter(deepcopy(work))) for fast in (True, False))
    assert (fast.steps, fast.preemptions) == (slow.steps, slow.preemptions) == (151, 6)
    assert fast.duration_s == pytest.approx(slow.duration_s, rel=1e-12)
    for name in ("ttft", "e2e", "queue"):
        for key, value in slow.percentiles(name).items():
            assert fast.percentiles(name)[key] == pytest.approx(value, rel=1e-9)


def test_a_closed_loops_next_request_waits_a_step_too() -> None:
    """``--concurrency``: the request sent as one finishes misses the batch already formed;
    the fast path agrees with the step loop."""
    w = Workload(200, "1000", "lognormal:250,0.8", seed=2)
    sync = Simulator(DEP, PROFILE, config(False)).run(iter(w), closed_loop=16)
    fast = Simulator(DEP, PROFILE, config(True)).run(iter(w), closed_loop=16)
    slow = Simulator(DEP, PROFILE, config(True, False)).run(iter(w), closed_loop=16)
    assert fast.completed == slow.completed == sync.completed == 200
    step_s = sync.percentiles("tpot")["p50"]
    gained = fast.percentiles("ttft")["mean"] - sync.percentiles("ttft")["mean"]
    assert 0.5 * step_s < gained < 1.5 * step_s
    assert fast.percentiles("queue")["mean"] - sync.percentiles("queue")["mean"] < 0.5 * step_s
    for name in ("ttft", "tpot", "queue"):
        for key, value in slow.percentiles(name).items():
            assert fast.percentiles(name)[key] == pytest.approx(value, rel=0.005)


def two_sent_together(async_on: bool, closed_loop: int, max_in_flight: int) -> list[Request]:
    """Two requests that finish in the same step, the engine then idle, and two more sent as
    they leave (a closed loop of 2, or two waiting client-side for a seat under a cap of 2)."""
    requests = [Request(0, 0.0, 500, 30), Request(1, 0.0, 500, 30),
                Request(2, 0.01, 1500, 5), Request(3, 0.01, 100, 5)]
    Simulator(DEP, PROFILE, config(async_on)).run(iter(requests), closed_loop=closed_loop,
                                                  max_in_flight=max_in_flight)
    return requests


@pytest.mark.parametrize("closed_loop, max_in_flight", [(2, 0), (0, 2)],
                         ids=["closed loop", "capped open loop"])
def test_requests_sent_together_on_an_idle_engine_join_its_next_batch_together(
        closed_loop: int, max_in_flight: int) -> None:
    """Sent at one instant to an engine with nothing running, both are in the next batch,
    under async scheduling as in the synchronous loop: the first sent does not make the
    engine busy for the second, holding it a step (it had, a 10 ms step behind the other)."""
    for async_on in (False, True):
        done = two_sent_together(async_on, closed_loop, max_in_flight)
        assert done[0].finish_s == done[1].finish_s  # the engine idle after their step
        assert done[2].arrival_s == done[3].arrival_s == done[0].finish_s  # sent together
        assert done[2].first_scheduled_s == done[3].first_scheduled_s == done[0].finish_s
        assert done[2].first_token_s == done[3].first_token_s


@pytest.mark.parametrize("closed_loop, max_in_flight", [(16, 0), (0, 16)],
                         ids=["closed loop", "capped open loop"])
@pytest.mark.parametrize("fast", [True, False], ids=["fast path", "step loop"])
def test_a_request_sent_earlier_is_never_scheduled_after_one_sent_later(
        closed_loop: int, max_in_flight: int, fast: bool) -> None:
    """FCFS across sends under async scheduling: 16 users in lockstep waves, 8 prompts a
    step, so 8 finish a step before the other 8. Those sent at the first finish are held for
    the batch after next; the second 8, sent a step later as the running batch empties, had
    found the engine 'idle' and joined the queue ahead of them (first scheduled 0.22 s
    earlier, though sent 8 ms later); now they queue behind, as the engine reads its input
    in the order it came."""
    cfg = replace(config(True, fast), max_num_batched_tokens=8192)
    requests = list(Workload(48, "1000", "250", rate=float("inf"), seed=0))
    Simulator(DEP, PROFILE, cfg).run(iter(requests), closed_loop=closed_loop,
                                     max_in_flight=max_in_flight)
    sent = sorted(requests, key=lambda r: r.arrival_s)
    assert len({r.arrival_s for r in sent}) > 3  # waves sent at several instants
    for earlier, later in pairwise(sent):
        assert earlier.first_scheduled_s <= later.first_scheduled_s


def check_invariants(sim: Simulator) -> None:
    """Blocks conserved, the finished-but-unread requests' among them; their seats counted
    under max_num_seqs."""
    pool, s = sim.pool, sim.scheduler
    assert pool.held + pool.free + len(pool.evictable) == pool.total
    held = sum(r.private_blocks for r in [*s.running, *sim.retiring]) + sum(
        1 for n in pool.refs.values() if n > 0)
    assert held == pool.held
    assert s.seats_held == len(sim.retiring)
    assert s.seats_taken <= sim.config.max_num_seqs


@settings(max_examples=30, deadline=None)
@given(workload=st.builds(Workload, num_requests=st.integers(1, 60),
                          input_len=st.sampled_from(["64", "uniform:1,700"]),
                          output_len=st.sampled_from(["1", "uniform:1,300"]),
                          rate=st.sampled_from([2.0, 50.0, float("inf")]),
                          seed=st.integers(0, 10_000)),
       blocks=st.sampled_from([40, 200, 5000]), seqs=st.sampled_from([2, 64]),
       engine=st.sampled_from([{}, SGLANG, TRTLLM]))
def test_invariants_hold_after_every_step_under_async_scheduling(
        workload: Workload, blocks: int, seqs: int, engine: dict[str, bool]) -> None:
    sim = Simulator(DEP, profile_for(engine_of(engine)),
                    config(True, blocks=blocks, seqs=seqs, **engine))
    result = sim.run(iter(workload), after_step=check_invariants)
    assert result.completed + result.rejected == workload.num_requests
    assert sim.pool.held == 0 and not sim.retiring and sim.scheduler.seats_held == 0


def test_vllm_schedules_asynchronously_from_v0_14_and_its_flag_turns_it_off() -> None:
    assert sim_config(DEP).async_scheduling
    assert not sim_config(DEP, EngineSettings(async_scheduling=False)).async_scheduling
    assert not sim_config(DEP, EngineSettings(engine_version="0.13.0")).async_scheduling
    assert sim_config(DEP, EngineSettings(engine_version="0.14.0")).async_scheduling
    # speculative decoding on 0.32: an EAGLE/MTP drafter and a draft model keep it, n-gram
    # does not (vllm_async_with_drafter dates each by release); on the default release (0.34,
    # Model Runner V2 alone) every drafter keeps it
    v032 = EngineSettings(engine_version="0.32")
    assert sim_config(DEP, v032, spec_tokens=3, spec_method="eagle").async_scheduling
    assert not sim_config(DEP, v032, spec_tokens=3, spec_method="ngram").async_scheduling
    assert sim_config(DEP, v032, spec_tokens=3, spec_method="draft-model").async_scheduling
    assert all(sim_config(DEP, spec_tokens=3, spec_method=m).async_scheduling
               for m in ("eagle", "ngram", "draft-model"))
    # pipeline parallelism runs on the pipeline's own batch queue
    assert not overlapped_scheduling("vllm", EngineSettings(), 2)


def test_sglang_overlaps_from_v0_4_unless_disable_overlap_schedule() -> None:
    sglang = replace(DEP, engine="sglang")
    assert sim_config(sglang).async_scheduling
    assert not sim_config(sglang, EngineSettings(overlap_schedule=False)).async_scheduling
    assert not sim_config(sglang, EngineSettings(engine_version="0.3.6")).async_scheduling
    assert sim_config(sglang, EngineSettings(engine_version="0.4.0")).async_scheduling
    assert not sim_config(sglang, spec_tokens=3).async_scheduling  # EAGLE turns it off
    assert not overlapped_scheduling("sglang", EngineSettings(), 2)


def test_trtllm_overlaps_on_its_pytorch_backend_unless_disable_overlap_scheduler() -> None:
    """TensorRT-LLM's PyTorch backend overlaps by default (v0.20+); its switch, n-gram drafts
    and pipeline parallelism turn it off, and its TensorRT engine backend never overlaps."""
    trtllm = replace(DEP, engine="trtllm")
    assert sim_config(trtllm).async_scheduling
    assert sim_config(trtllm, EngineSettings(backend="pytorch")).async_scheduling
    assert not sim_config(trtllm, EngineSettings(overlap_scheduler=False)).async_scheduling
    assert not sim_config(trtllm, EngineSettings(backend="tensorrt")).async_scheduling
    # speculative decoding: MTP/EAGLE-3 and a draft model keep it, n-gram does not
    assert sim_config(trtllm, spec_tokens=3, spec_method="eagle").async_scheduling
    assert sim_config(trtllm, spec_tokens=3, spec_method="draft-model").async_scheduling
    assert not sim_config(trtllm, spec_tokens=3, spec_method="ngram").async_scheduling
    assert not overlapped_scheduling("trtllm", EngineSettings(), 2)  # _executor_loop_pp


SIMULATE = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "8", "--num-requests", "300",
            "--input-len", "lognormal:1000,0.8", "--output-len", "lognormal:250,0.8", "--json"]


def test_disable_overlap_schedule_makes_sglang_take_arrivals_a_step_sooner(
        capsys: pytest.CaptureFixture[str]) -> None:
    ttft = {}
    for flags in ([], ["--disable-overlap-schedule"]):
        assert main([*SIMULATE, "--engine", "sglang", *flags]) == 0
        ttft[bool(flags)] = json.loads(capsys.readouterr().out)["ttft_s"]["mean"]
    assert ttft[True] < ttft[False]


def test_disable_overlap_schedule_is_refused_for_vllm(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SIMULATE, "--disable-overlap-schedule"]) == 2
    err = capsys.readouterr().err
    assert "--disable-overlap-schedule is SGLang's" in err and "--no-async-scheduling" in err


def test_disable_overlap_scheduler_makes_trtllm_take_arrivals_a_step_sooner(
        capsys: pytest.CaptureFixture[str]) -> None:
    """At 8 req/s the PyTorch backend's default overlap costs TTFT that the switch gives
    back; the TensorRT engine backend, which has no overlap scheduler, runs synchronously
    too, and is refused the switch."""
    ttft = {}
    for flags in ([], ["--disable-overlap-scheduler"], ["--backend", "tensorrt"]):
        assert main([*SIMULATE, "--engine", "trtllm", *flags]) == 0
        out = json.loads(capsys.readouterr().out)
        ttft[" ".join(flags)] = out["ttft_s"]["mean"]
        assert out["settings"]["async_scheduling"] is (not flags)
    assert ttft["--disable-overlap-scheduler"] < ttft[""]
    assert ttft["--backend tensorrt"] < ttft[""]
    assert main([*SIMULATE, "--engine", "trtllm", "--backend", "tensorrt",
                 "--disable-overlap-scheduler"]) == 2
    assert "no overlap scheduler to turn off" in capsys.readouterr().err


@pytest.mark.parametrize("engine,own", [("vllm", "vLLM's is --no-async-scheduling"),
                                        ("sglang", "SGLang's is --disable-overlap-schedule)")])
def test_disable_overlap_scheduler_is_refused_for_other_engines(
        capsys: pytest.CaptureFixture[str], engine: str, own: str) -> None:
    assert main([*SIMULATE, "--engine", engine, "--disable-overlap-scheduler"]) == 2
    err = capsys.readouterr().err
    assert "--disable-overlap-scheduler is TensorRT-LLM's" in err and own in err


def _engine_line_and_settings(capsys: pytest.CaptureFixture[str], *flags: str
                              ) -> tuple[str, dict[str, object]]:
    run = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "4", "--num-requests", "20",
           *flags]
    assert main(run) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("engine:"))
    assert main([*run, "--json"]) == 0
    return line, json.loads(capsys.readouterr().out)["settings"]


def test_simulate_says_whether_it_schedules_the_next_batch_during_a_step(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The engine line and --json's settings show the overlapped loop where it runs, in each
    engine's own name, and nothing of it where the run is synchronous."""
    line, settings = _engine_line_and_settings(capsys)
    assert settings["async_scheduling"] is True
    assert line.endswith(overlap_clause("vllm", True)) and "async scheduling on" in line
    line, settings = _engine_line_and_settings(capsys, "--no-async-scheduling")
    assert settings["async_scheduling"] is False and overlap_clause("vllm", False) == ""
    assert "async scheduling" not in line
    line, settings = _engine_line_and_settings(capsys, "--engine", "sglang")
    assert settings["async_scheduling"] is True and "overlap scheduler on" in line
    line, settings = _engine_line_and_settings(capsys, "--engine", "trtllm")
    assert settings["async_scheduling"] is True and "overlap scheduler on" in line
    line, settings = _engine_line_and_settings(capsys, "--engine", "trtllm", "--backend",
                                               "tensorrt")
    assert settings["async_scheduling"] is False and "scheduling on" not in line


def test_disable_overlap_schedule_is_refused_before_sglang_had_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang 0.3.x had --enable-overlap-schedule; --disable-overlap-schedule came in 0.4.0
    with the overlap scheduler as the default."""
    sglang = [*SIMULATE, "--engine", "sglang", "--disable-overlap-schedule", "--engine-version"]
    assert main([*sglang, "0.3.6"]) == 2
    assert "SGLang 0.3.6 has no --disable-overlap-schedule" in capsys.readouterr().err
    assert main([*sglang, "0.4.0"]) == 0
    assert json.loads(capsys.readouterr().out)["settings"]["async_scheduling"] is False
    check_overlap_flag("0.4.0")
    with pytest.raises(InputError, match=r"came in v0\.4\.0"):
        check_overlap_flag("0.3.4.post1")


@pytest.mark.parametrize(("version", "runner", "kept"), [
    ("0.14", "V1", {"eagle"}),
    ("0.27.1", "MRV2", {"eagle"}),
    ("0.28", "V1", {"eagle", "draft-model"}),
    ("0.32", "MRV2", {"eagle", "draft-model"}),
    ("0.33", "V1", {"eagle", "draft-model"}),
    ("0.33", "MRV2", {"eagle", "draft-model", "ngram"}),
    ("0.34", "V1", {"eagle", "draft-model", "ngram"}),
])
def test_vllms_async_scheduling_keeps_a_drafter_by_release_and_runner(
        version: str, runner: str, kept: set[str]) -> None:
    """vLLM's default turns async scheduling off for a drafter outside its list: EAGLE/MTP
    from 0.14, a draft model from 0.28; from 0.33 the list binds the V1 runner alone, and
    0.34 has none (engines.json vllm.async_scheduling)."""
    methods = ("eagle", "draft-model", "ngram")
    assert {m for m in methods if vllm_async_with_drafter(version, m, runner)} == kept


def test_an_ngram_drafter_keeps_async_scheduling_on_0_33s_model_runner_v2() -> None:
    on = {v: sim_config(DEP, EngineSettings(engine_version=v), spec_tokens=3,
                        spec_method="ngram").async_scheduling for v in ("0.32", "0.33")}
    assert on == {"0.32": False, "0.33": True}


def ends_into(ends: list[float]) -> Callable[[Simulator], None]:
    """An after_step that notes each step's end in ``ends``."""
    return lambda sim: ends.append(sim.now_s)


@pytest.mark.parametrize("fast", [False, True])
def test_queueing_is_vllms_queue_time_not_the_wait_for_the_running_step(fast: bool) -> None:
    """vLLM's queue time is its SCHEDULED event less its QUEUED one (v1/metrics/stats.py),
    both engine-side: a request arriving mid-step on a busy engine is taken in and scheduled as
    the next batch is formed, under async scheduling as the step before it runs begins. Behind
    a long request it queues for nothing, though its first step starts one step (async: two)
    after its arrival; its TTFT holds that wait."""
    for async_on in (False, True):
        second = Request(1, 0.05, 200, 10)
        ends: list[float] = []
        sim = Simulator(DEP, PROFILE, config(async_on, fast))
        result = sim.run(iter([Request(0, 0.0, 200, 400), second]),
                         after_step=ends_into(ends))
        start = second.first_scheduled_s
        assert start > second.arrival_s and start in ends
        before = ends[ends.index(start) - 1]  # the start of the step before its first
        assert second.scheduled_s == (before if async_on else start)
        assert second.queued_s == second.scheduled_s
        assert second.queue_time_s == 0
        assert result.percentiles("queue")["p99"] == 0
        assert second.first_token_s - second.arrival_s > start - second.arrival_s
