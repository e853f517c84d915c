"""plan's checks made cheaper without moving an answer: a run that can only miss its SLO stops
(``Recorder.stop_past``), and candidates whose engine launches the same share their runs."""

from __future__ import annotations

from typing import Any

import pytest

import ridgeline.plan_checks as plan_checks
from ridgeline.candidate import Candidate, replica_deployment
from ridgeline.catalog import resolve_model
from ridgeline.engines import profile_for
from ridgeline.hardware import resolve_accelerator
from ridgeline.memory import EngineSettings
from ridgeline.plan import _evaluate
from ridgeline.plan_checks import CheckRuns, verify
from ridgeline.serving_load import Load, Slo
from ridgeline.sim.config import sim_config
from ridgeline.sim.metrics import SimResult, misses_settling
from ridgeline.sim.pipeline import run_replica

LLAMA_8B = resolve_model("llama-3.1-8b")
LLAMA_405B = resolve_model("llama-3.1-405b")
A100 = resolve_accelerator("a100")
SLO = Slo(0.5, 0.03)


def _run(pp: int, rate: float, stop: bool) -> SimResult:
    """Llama-3.1-8B on an H100 (or two, a pipeline's stages) at ``rate`` req/s, 500 requests
    read past the first 50 and before the last 50, as plan reads a check; ``stop``: stopping
    once the window's misses settle the percentile."""
    dep = replica_deployment(LLAMA_8B, resolve_accelerator("h100"), 1, pp, "bf16", "bf16")
    config = sim_config(dep, EngineSettings(max_model_len=8192))
    work = list(Load(rate, "1000", "250").share(1, count=500))
    window = (work[50].arrival_s, work[-50].arrival_s)
    return run_replica(dep, profile_for("vllm"), config, work, slo=(SLO.ttft_s, SLO.tpot_s),
                       window_s=window,
                       stop_past=misses_settling(work, window, SLO.percentile) if stop else None)


def _latencies(result: SimResult) -> tuple[float, float]:
    return (result.latency_s_at("ttft", SLO.percentile),
            result.latency_s_at("tpot", SLO.percentile))


@pytest.mark.parametrize("pp", [1, 2])
def test_a_run_that_can_only_miss_stops_and_would_have_missed_whole(pp: int) -> None:
    """At 60 req/s the replica misses a 30 ms p90 TPOT: the run stops once more than a tenth
    of its window's requests passed it, before its end, and the whole run misses it too. At
    5 req/s nothing stops it: the same run, to the last digit."""
    stopped, whole = _run(pp, 60.0, stop=True), _run(pp, 60.0, stop=False)
    assert stopped.rec.missed and not whole.rec.missed
    assert stopped.steps < whole.steps and stopped.completed < whole.completed
    ttft_s, tpot_s = _latencies(whole)
    assert ttft_s > SLO.ttft_s or tpot_s > SLO.tpot_s
    held, unstopped = _run(pp, 5.0, stop=True), _run(pp, 5.0, stop=False)
    assert not held.rec.missed
    assert (held.steps, _latencies(held)) == (unstopped.steps, _latencies(unstopped))
    ttft_s, tpot_s = _latencies(held)
    assert ttft_s <= SLO.ttft_s and tpot_s <= SLO.tpot_s


def _candidate(load: Load, slo: Slo, seqs: int | None, budget: int | None) -> Candidate:
    """Llama-3.1-405B at fp8 on one A100 node, sized as the search sizes it."""
    c = _evaluate((LLAMA_405B, A100.id, 8, 1, "fp8", "bf16", (seqs, budget), False, load, slo,
                   A100.price_per_hour_usd, None, "vllm", profile_for("vllm"), 1))
    assert c is not None
    return c


def test_a_knob_set_to_the_engines_default_repeats_no_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On an A100 vLLM's default token budget is 2,048: the candidate that sets
    --max-num-batched-tokens 2048 is checked from the runs of the one that does not,
    simulating nothing more, to the answer it gets alone; 64 seats launch another engine,
    which runs its own."""
    load, slo = Load(1.0, "1000", "250"), Slo(3.0, 0.08)
    runs: CheckRuns = {}
    default = verify(LLAMA_405B, _candidate(load, slo, None, None), load, slo, 64, runs=runs)
    made = len(runs)
    alone = verify(LLAMA_405B, _candidate(load, slo, None, 2048), load, slo, 64)
    simulated: list[object] = []
    real = plan_checks.run_replica

    def counted(*args: Any, **kwargs: Any) -> SimResult:
        simulated.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(plan_checks, "run_replica", counted)
    shared = verify(LLAMA_405B, _candidate(load, slo, None, 2048), load, slo, 64, runs=runs)
    assert default is not None and shared is not None and made
    assert not simulated and len(runs) == made
    assert shared == alone and shared.max_num_batched_tokens == 2048
    assert (shared.replicas, shared.sim_ttft_s) == (default.replicas, default.sim_ttft_s)
    verify(LLAMA_405B, _candidate(load, slo, 64, None), load, slo, 64, runs=runs)
    assert simulated and len(runs) > made
