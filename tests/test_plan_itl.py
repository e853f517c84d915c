"""plan's ITL SLO (--slo-itl-ms): the inter-token latency at the SLO's percentile over the
streamed chunks of the requests a check's window keeps, as simulate's ITL row reads it; a plan
given none is judged, and reported, as before."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from functools import lru_cache

import pytest

from ridgeline.candidate import Candidate, candidate_deployment, replica_deployment
from ridgeline.catalog import resolve_model
from ridgeline.closest_miss import simulated_miss
from ridgeline.cost import Seq, decode_batch, mean_decode_context, step_time_s
from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.hardware import resolve_accelerator
from ridgeline.memory import EngineSettings
from ridgeline.plan import PlanResult, plan
from ridgeline.plan_checks import CheckRun
from ridgeline.replica_sizing import size_replica
from ridgeline.reports.plan import PlanReport
from ridgeline.serving_load import Load, Slo
from ridgeline.sim.config import sim_config
from ridgeline.sim.pipeline import run_replica
from tests.conftest import run_cli

MODEL = resolve_model("llama-3.1-8b")
LOAD = Load(4.0, "1000", "250")
SLO = Slo(0.5, 0.05, 90)
GPUS = ("l40s",)
MAX_GPUS = 8  # one node of L40S: the winners with and without the ITL SLO are in it
PLAN = ("plan", "llama-3.1-8b", "--rate", "4", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50",
        "--gpus", "l40s", "--workers", "1", "--max-gpus", str(MAX_GPUS))


@lru_cache(maxsize=1)
def _without_itl() -> PlanResult:
    return plan(MODEL, LOAD, SLO, GPUS, MAX_GPUS, workers=1)


def _limit_s() -> float:
    """An ITL SLO under the plan's winner's simulated ITL: that alone must rule it out."""
    win = _without_itl().winner
    assert win is not None and win.sim_itl_s is not None
    return 0.7 * win.sim_itl_s


@lru_cache(maxsize=1)
def _with_itl() -> PlanResult:
    return plan(MODEL, LOAD, replace(SLO, itl_s=_limit_s()), GPUS, MAX_GPUS, workers=1)


def _report(result: PlanResult) -> PlanReport:
    assert result.winner is not None
    return PlanReport(MODEL, "meta-llama/Llama-3.1-8B", result, result.winner.max_model_len)


def _config(c: Candidate) -> tuple[object, ...]:
    """A candidate's launch, its replica count apart."""
    return (c.accelerator, c.tp, c.pp, c.weights, c.kv, c.max_num_seqs,
            c.max_num_batched_tokens, c.data_parallel)


def test_a_checks_itl_is_simulates_itl_at_the_percentile() -> None:
    """The winner's ITL is its check's run read as simulate's table reads its ITL row: the
    p90 of the gaps between the streamed chunks of the requests its window keeps, rerun here
    on the same requests."""
    win = _without_itl().winner
    assert win is not None and win.verified and win.sim_itl_s is not None
    dep = candidate_deployment(MODEL, win, "vllm")
    config = sim_config(dep, EngineSettings(max_num_seqs=win.max_num_seqs,
                                            max_num_batched_tokens=win.max_num_batched_tokens,
                                            max_model_len=win.max_model_len))
    lifetime = win.ttft_floor_s + LOAD.means()[1] * win.tpot_s
    work, window = LOAD.steady(win.replicas, lifetime, percentile=SLO.percentile)
    result = run_replica(dep, profile_for("vllm"), config, work,
                         slo=(SLO.ttft_s, SLO.tpot_s), window_s=window)
    assert result.itl_s_at(SLO.percentile) == result.percentiles("itl")["p90"]
    assert win.sim_itl_s == pytest.approx(result.itl_s_at(SLO.percentile), rel=1e-9)


def test_an_itl_slo_alone_rules_out_the_otherwise_cheapest_deployment() -> None:
    """Llama-3.1-8B at 4 req/s on L40S: the winner meets the TTFT and TPOT SLOs, but its
    chunked prefill's stalls put its p90 ITL past an ITL SLO of 0.7 × that ITL; another
    deployment, whose ITL is within it, wins, at no lower price."""
    base, itl = _without_itl(), _with_itl()
    win, limit = base.winner, _limit_s()
    assert win is not None and win.verified and win.sim_ttft_s is not None
    assert win.sim_ttft_s <= SLO.ttft_s and (win.sim_tpot_s or math.inf) <= SLO.tpot_s
    new = itl.winner
    assert new is not None and new.verified and new.sim_itl_s is not None
    assert new.sim_itl_s <= limit < (win.sim_itl_s or 0.0)
    assert new.sim_ttft_s is not None and new.sim_ttft_s <= SLO.ttft_s
    assert (new.sim_tpot_s or math.inf) <= SLO.tpot_s
    assert (_config(new), new.replicas) != (_config(win), win.replicas)
    assert (new.cost_per_hour or 0.0) >= (win.cost_per_hour or 0.0)
    # the winner's launch is in the ITL plan only with more replicas, within the ITL SLO
    for c in itl.candidates:
        if c.verified and _config(c) == _config(win):
            assert c.replicas > win.replicas and (c.sim_itl_s or 0.0) <= limit
    for c in itl.disaggregated:  # a split's ITL is its decode pool's
        if c.verified:
            assert (c.sim_itl_s or 0.0) <= limit


def test_the_report_names_the_itl_slo_and_the_winners_itl() -> None:
    itl, limit = _with_itl(), _limit_s()
    report = _report(itl)
    win = itl.winner
    assert win is not None and win.sim_itl_s is not None
    text = "\n".join(report.text_lines())
    assert f"ITL ≤ {limit * 1e3:g} ms" in text.splitlines()[0]
    assert f", ITL {win.sim_itl_s * 1e3:,.1f} ms" in text
    data = report.to_dict()
    assert data["slo"]["itl_s"] == limit
    assert data["winner"]["sim_itl_s"] == win.sim_itl_s
    explained = [qty.value for s in report.steps for qty in s.inputs if "ITL" in qty.name]
    assert explained == [pytest.approx(win.sim_itl_s * 1e3)]


def test_without_an_itl_slo_the_report_says_nothing_of_itl() -> None:
    """No --slo-itl-ms: the text, --json and --explain are what they were before the flag."""
    report = _report(_without_itl())
    assert "ITL" not in "\n".join(report.text_lines())
    data = report.to_dict()
    assert "itl_s" not in data["slo"]
    assert all("sim_itl_s" not in row for row in (data["winner"], *data["runners_up"],
                                                   *data["disaggregated"]))
    assert not any("ITL" in qty.name for s in report.steps for qty in s.inputs)


def test_the_nearest_simulated_miss_names_the_itl_that_missed() -> None:
    """Two checks that missed only the ITL SLO: the nearer is named, its ITL the miss."""
    slo = Slo(0.5, 0.05, 90, itl_s=0.02)
    c = Candidate("l40s", 1, 1, "fp8", "fp8", None, 16, 0.02, 0.05, 1.0, 1, 1.86, True, "",
                  (1.0, 1.0))
    near, far = (CheckRun(False, 0.1, 0.03, 1600, 0, (1.0, 9.0), itl_s=slo.itl_s * f)
                 for f in (1.2, 1.5))
    miss = simulated_miss(MODEL, [(c, far), (c, near)], slo, 1, "vllm")
    assert miss is not None
    text = miss.text
    assert text.endswith(
        f"p90 TTFT {near.ttft_s * 1e3:,.0f} ms, TPOT {near.tpot_s * 1e3:,.1f} ms, ITL "
        f"{near.itl_s * 1e3:,.1f} ms: ITL misses its {slo.itl_s * 1e3:g} ms SLO; TTFT and TPOT "
        f"are within their {slo.ttft_s * 1e3:g} ms and {slo.tpot_s * 1e3:g} ms")


def test_an_itl_slo_under_a_lone_decode_step_is_the_unloaded_miss() -> None:
    """An ITL SLO half a lone request's decode step on the fastest group: no replica can
    keep it, and the closest miss says ITL missed, its figure the unloaded decode step's."""
    result = plan(MODEL, LOAD, Slo(0.5, 0.05, 90, itl_s=1e-3), GPUS, max_gpus=1, workers=1)
    assert result.winner is None and not result.candidates
    dep = candidate_deployment(MODEL, Candidate("l40s", 1, 1, "fp8", "fp8", None, 1, 0.0, 0.0,
                                                1.0, 1, None, True, "", (1.0, 1.0)), "vllm")
    step_s = step_time_s(dep, decode_batch(1, mean_decode_context(*LOAD.means())),
                         profile_for("vllm"))
    assert result.closest_miss.startswith("1 x l40s (TP1): ")
    assert (f"TPOT ≥ {step_s * 1e3:,.1f} ms, ITL ≥ {step_s * 1e3:,.1f} ms even unloaded: ITL "
            "misses its 1 ms SLO") in result.closest_miss


def test_at_p99_an_itl_slo_under_a_mixed_step_caps_the_analytic_batch_at_2() -> None:
    """1,000-token prompts, 250-token answers, each prompt one chunk: a batch of b puts
    b ÷ 250 of the steps past a prompt's chunk, so at p99 past b = 2 the gap at the
    percentile is a mixed step's; an ITL SLO between the decode step and that caps it."""
    load = Load(20, "1000", "250")
    dep = replica_deployment(MODEL, resolve_accelerator("h100-sxm"), 1, 1, "fp8", "fp8")
    profile = profile_for("vllm")
    ctx = mean_decode_context(*load.means())
    decode_s = step_time_s(dep, decode_batch(3, ctx), profile)
    mixed_s = step_time_s(dep, [*decode_batch(3, ctx), Seq(1000, 0)], profile)
    assert decode_s < mixed_s
    slo = Slo(0.5, 0.04, 99)
    free = size_replica(dep, profile, load, slo, None)
    capped = size_replica(dep, profile, load, replace(slo, itl_s=(decode_s + mixed_s) / 2), None)
    assert free is not None and capped is not None
    assert free.batch > 2 and capped.batch == 2
    assert capped.rate_req_s < free.rate_req_s


@pytest.mark.parametrize("itl_s", [0.0, -0.01, math.nan, math.inf])
def test_an_slo_refuses_an_itl_limit_that_is_not_a_positive_time(itl_s: float) -> None:
    with pytest.raises(InputError, match="ITL SLO must be positive and finite"):
        Slo(0.5, 0.05, 90, itl_s=itl_s)


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "fast"])
def test_a_bad_itl_slo_is_refused_in_one_line(capsys: pytest.CaptureFixture[str],
                                             value: str) -> None:
    code, out, err = run_cli(capsys, *PLAN, f"--slo-itl-ms={value}")
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "argument --slo-itl-ms: ITL SLO must be" in err


def test_the_cli_carries_the_itl_slo_into_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, *PLAN, "--slo-itl-ms", f"{_limit_s() * 1e3!r}", "--json")
    data, win = json.loads(out), _with_itl().winner
    assert code == 0 and data["slo"]["itl_s"] == pytest.approx(_limit_s(), rel=1e-12)
    assert win is not None and data["winner"]["sim_itl_s"] == pytest.approx(win.sim_itl_s)
