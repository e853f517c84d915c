"""The ITL keeps the chunks of the requests a run's window keeps (their TTFT and TPOT's), the
warm-up's and the drain's left out, on every path (plain steps, the fast path's runs, a
pipeline, lock-step data-parallel ranks); and a check given an ITL SLO stops once the
window's chunks settle its percentile past it, as it stops on TTFT and TPOT."""

from __future__ import annotations

import math

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.candidate import replica_deployment
from ridgeline.engines import profile_for
from ridgeline.memory import EngineSettings
from ridgeline.plan_checks import settling
from ridgeline.serving_load import Load, Slo
from ridgeline.sim.config import sim_config
from ridgeline.sim.data_parallel import DataParallelSimulator
from ridgeline.sim.metrics import SimResult, itl_misses_settling
from ridgeline.sim.pipeline import run_replica
from ridgeline.sim.request import Request

LLAMA_8B = resolve_model("llama-3.1-8b")
H100 = resolve_accelerator("h100")
FAR_S = 1e6  # TTFT and TPOT SLOs no request misses: the ITL alone is judged


def _work(rate: float, count: int = 400) -> list[Request]:
    return list(Load(rate, "1000", "250").share(1, count=count))


def _run(work: list[Request], window: tuple[float, float] | None, pp: int = 1,
         fast: bool = True, slo: tuple[float | None, ...] = (None, None),
         stop_past: int | tuple[int, int] | None = None) -> SimResult:
    dep = replica_deployment(LLAMA_8B, H100, 1, pp, "bf16", "bf16")
    config = sim_config(dep, EngineSettings(max_model_len=8192), fast_path=fast)
    return run_replica(dep, profile_for("vllm"), config, [r for r in work], slo=slo,
                       window_s=window, stop_past=stop_past)


def _chunks(work: list[Request], window: tuple[float, float]) -> int:
    """Chunks the window's requests stream after their first token: one per further token
    (no speculative decoding), however a preemption splits them."""
    low, high = window
    return sum(r.output_tokens - 1 for r in work if low <= r.arrival_s <= high)


@pytest.mark.parametrize(("pp", "fast"), [(1, True), (1, False), (2, True)])
def test_the_itl_counts_the_windowed_requests_chunks_alone(pp: int, fast: bool) -> None:
    work = _work(8.0, 200)  # 60 requests each side of an 80-request window
    window = (work[60].arrival_s, work[-60].arrival_s)
    windowed = _run(work, window, pp, fast)
    assert windowed.rec.hist["itl"].total == _chunks(work, window)
    whole = _run(_work(8.0, 200), None, pp, fast)  # no window: every request's, as before
    assert whole.rec.hist["itl"].total == _chunks(work, (-math.inf, math.inf))
    assert windowed.rec.hist["itl"].total < whole.rec.hist["itl"].total


def test_the_fast_path_and_the_plain_steps_read_one_windowed_itl() -> None:
    work = _work(12.0, 240)  # 80 requests each side of an 80-request window
    window = (work[80].arrival_s, work[-80].arrival_s)
    fast, plain = _run(_work(12.0, 240), window), _run(work, window, fast=False)
    assert fast.rec.hist["itl"].counts == plain.rec.hist["itl"].counts  # bin by bin
    # the mean's sum, added line by line or step by step, rounds apart (as without a window)
    assert fast.percentiles("itl")["mean"] == pytest.approx(plain.percentiles("itl")["mean"])


def test_lock_step_data_parallel_ranks_keep_the_windowed_chunks() -> None:
    dep = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"),
                           num_gpus=8, engine="vllm", expert_parallel=True,
                           data_parallel_size=8)
    work = list(Load(20.0, "1000", "200").share(1, count=240))
    window = (work[40].arrival_s, work[-40].arrival_s)
    readings = []
    for fast in (True, False):
        config = sim_config(dep, EngineSettings(max_model_len=4096), fast_path=fast)
        sim = DataParallelSimulator(dep, profile_for("vllm"), config)
        result = sim.run(iter(list(Load(20.0, "1000", "200").share(1, count=240))),
                         window_s=window)
        assert result.rec.hist["itl"].total == _chunks(work, window)
        readings.append(result.rec.hist["itl"].counts)
    assert readings[0] == readings[1]


def test_an_itl_slo_the_run_misses_stops_it_and_one_it_keeps_does_not() -> None:
    """At 40 req/s on one H100, a p90 ITL SLO under the whole run's stops the run early; one
    above it leaves the run to the last digit as without it. Every SLO that stopped a run is
    one the whole run misses (the stop is sound at the bins' edges)."""
    work = _work(40.0)
    window = (work[50].arrival_s, work[-50].arrival_s)
    whole = _run(work, window)
    itl_s = whole.itl_s_at(90)
    for factor in (0.5, 0.9, 0.99, 1.0, 1.01, 1.1, 2.0):
        slo = Slo(FAR_S, FAR_S, 90, factor * itl_s)
        run = _run(_work(40.0), window, slo=(slo.ttft_s, slo.tpot_s, slo.itl_s),
                   stop_past=settling(work, window, slo))
        if run.rec.missed:
            assert itl_s > factor * itl_s
            assert run.steps < whole.steps
        else:
            assert run.percentiles("itl") == whole.percentiles("itl")
            assert run.steps == whole.steps
    early = _run(_work(40.0), window, slo=(FAR_S, FAR_S, 0.5 * itl_s),
                 stop_past=settling(work, window, Slo(FAR_S, FAR_S, 90, 0.5 * itl_s)))
    assert early.rec.missed and early.rec.itl_misses > early.rec.itl_stop_past


def test_the_itl_settles_at_a_tenth_of_the_windowed_chunks_at_p90() -> None:
    work = _work(8.0)
    window = (work[60].arrival_s, work[-60].arrival_s)
    assert itl_misses_settling(work, window, 90) == math.floor(0.1 * _chunks(work, window)) + 1
    slo = Slo(0.5, 0.05, 90)
    assert settling(work, window, slo) == settling(work, window, Slo(0.5, 0.05, 90, None))
    assert settling(work, window, Slo(0.5, 0.05, 90, 0.05)) == (
        settling(work, window, slo), itl_misses_settling(work, window, 90))
