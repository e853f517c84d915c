"""`plan(verify=0)` simulates no split prefill/decode pool either: each split is listed as
sized, analytic (``verified`` False), as the splits past those checked are; the default
budget still checks the cheapest splits in simulation."""

from __future__ import annotations

import pytest

import ridgeline.split_runs as split_runs
from ridgeline.catalog import resolve_model
from ridgeline.plan import plan
from ridgeline.reports.plan import PlanReport
from ridgeline.serving_load import Load, Slo
from ridgeline.sim.simulator import Simulator

MODEL = resolve_model("llama-3.1-8b")
LOAD = Load(4.0, "lognormal:800,0.6", "lognormal:200,0.6")
SLO = Slo(0.5, 0.05, 90)


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the split pools' runs (``split_runs.run_pool``) and every simulator run."""
    calls = {"pools": 0, "runs": 0}
    pool, run = split_runs.run_pool, Simulator.run

    def counted_pool(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["pools"] += 1
        return pool(*args, **kwargs)

    def counted_run(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls["runs"] += 1
        return run(self, *args, **kwargs)

    monkeypatch.setattr(split_runs, "run_pool", counted_pool)
    monkeypatch.setattr(Simulator, "run", counted_run)
    return calls


def test_verify_zero_runs_no_split_simulation_and_lists_the_splits_analytic(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    result = plan(MODEL, LOAD, SLO, ["h100-sxm"], workers=1, verify=0)
    assert calls == {"pools": 0, "runs": 0}  # neither a split nor a single pool simulated
    assert result.disaggregated  # the splits are still sized and listed
    assert not any(c.verified for c in result.disaggregated)
    # as sized: no check moved the replicas (a check records the analytic count it grew from)
    assert all(c.analytic_replicas == 0 and c.sim_ttft_s is None
               for c in result.disaggregated)
    assert not any(c.verified for c in result.candidates)
    # the text says none was simulated (it had said the cheapest were, and none held)
    assert result.splits_simulated == 0
    text = "\n".join(PlanReport(MODEL, "meta-llama/Llama-3.1-8B", result, 4096).text_lines())
    assert "disaggregated pools: none simulated (analytic only)" in text
    assert "splits were simulated" not in text


def test_the_default_budget_still_simulates_the_cheapest_splits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    result = plan(MODEL, LOAD, SLO, ["h100-sxm"], workers=1)
    assert calls["pools"] > 0 and result.splits_simulated > 0
    split = result.disaggregated[0]
    assert split.verified and split.sim_ttft_s is not None and split.sim_ttft_s <= SLO.ttft_s
