"""plan's checks made cheaper without moving an answer: a run that can only miss its SLO stops
(``Recorder.stop_past``), and candidates whose engine launches the same share their runs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

import ridgeline.plan_checks as plan_checks
from ridgeline.candidate import Candidate, replica_deployment
from ridgeline.catalog import resolve_model
from ridgeline.engines import profile_for
from ridgeline.hardware import resolve_accelerator
from ridgeline.memory import EngineSettings
from ridgeline.plan import _evaluate, plan
from ridgeline.plan_checks import CheckRuns, verify
from ridgeline.plan_constraints import NO_CONSTRAINTS, PlanConstraints
from ridgeline.reports.plan import PlanReport
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
    c = _evaluate((LLAMA_405B, A100, 8, 1, "fp8", "bf16", (seqs, budget), False, load, slo,
                   A100.price_per_hour_usd, None, "vllm", profile_for("vllm"), 1, NO_CONSTRAINTS))
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


def _sized(tp: int, weights: str, kv: str, seqs: int | None, replicas: int) -> Candidate:
    """An A100 candidate of ``tp`` GPUs a replica as the search leaves it, ``replicas`` of
    them (the analytic count), at $1 a GPU-hour."""
    return Candidate(A100.id, tp, 1, weights, kv, seqs, 64, 0.02, 0.1, 1.0, replicas, 1.0,
                     True, "", (0.8, 1.2))


def _ran(runs: CheckRuns | None) -> None:
    """What a check that ran the simulator leaves in the plan's runs: one more."""
    if runs is not None:
        runs[(len(runs),) * 5] = None  # a key no real run has


def test_the_budget_goes_first_to_a_layout_whose_checks_have_not_priced_it_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Four variants of TP4 (max_num_seqs) at 3 replicas, 12 GPUs, each needing 6 when
    simulated; TP8 at 2 replicas, 16 GPUs, holding at 2. Cheapest analytic price first, a
    budget of three checks went to three TP4 variants and the winner cost 24 GPUs; once the
    first TP4 check has doubled its layout's count, the TP8 one, then priced lowest, goes
    next and wins at 16, and the budget left checks the cheaper TP4 variants still."""
    tp4 = [_sized(4, "bf16", "bf16", seqs, 3) for seqs in (None, 64, 128, 256)]
    tp8 = _sized(8, "bf16", "bf16", None, 2)
    needs = {4: 6, 8: 2}  # the replicas each layout holds at in simulation
    checked: list[Candidate] = []

    def simulated(model: object, c: Candidate, *args: Any, **kwargs: Any) -> Candidate:
        checked.append(c)
        _ran(args[-1])
        return replace(c, replicas=needs[c.tp], verified=True, analytic_replicas=c.replicas)

    monkeypatch.setattr(plan_checks, "verify", simulated)
    priced = sorted([*tp4, tp8], key=plan_checks.cheapest)
    verified, rest = plan_checks.verify_cheapest(LLAMA_8B, priced, Load(1.0, "1000", "250"),
                                                 SLO, 64, 3)
    assert checked[:2] == [tp4[0], tp8] and len(checked) == 3
    assert verified[0].tp == 8 and verified[0].gpus == 16
    assert rest == tp4[2:]  # the budget spent, those left are listed as unsimulated
    verified, rest = plan_checks.verify_cheapest(LLAMA_8B, priced, Load(1.0, "1000", "250"),
                                                 SLO, 64, 16)
    assert not rest and len(verified) == 5  # a budget that reaches them checks them all


@pytest.mark.usefixtures("splits_unchecked")  # the budget is the co-located checks'
def test_the_winner_is_no_dearer_than_a_candidate_that_holds_in_simulation() -> None:
    """Llama-3.1-8B on A100s at 20 req/s of 2,000-token prompts, p99 TTFT 800 ms and TPOT
    40 ms (a reviewer's plan, on A100s alone): TP4 sizes analytically at 3 replicas, 12
    GPUs, and needs 6 in simulation in each of its formats and knobs; TP8 sizes at 2, 16
    GPUs, and holds at 2. The plan had spent its budget on TP4's variants and named 24 GPUs
    the cheapest. (bf16 weights and cache alone, with a budget of two checks: the first TP4
    check doubles its layout's count, and the second goes to TP8, where in price order it
    went to a TP4 knob variant; the reviewer's five checks reached TP8 past TP4's four
    formats.)"""
    load = Load(20.0, "lognormal:2000,0.8", "lognormal:300,0.5")
    slo = Slo(0.8, 0.04, 99)
    result = plan(LLAMA_8B, load, slo, ["a100"], workers=1, verify=2,
                  constraints=PlanConstraints(weights=("bf16",), kv_dtypes=("bf16",)))
    tp8 = _evaluate((LLAMA_8B, A100, 8, 1, "bf16", "bf16", (None, None), False,
                     load.for_sizing(), slo, A100.price_per_hour_usd, None, "vllm",
                     profile_for("vllm"), 1, NO_CONSTRAINTS))
    assert tp8 is not None
    held = verify(LLAMA_8B, tp8, load, slo, 64)
    assert held is not None and held.cost_per_hour is not None
    win = result.winner
    assert win is not None and win.verified and win.cost_per_hour is not None
    assert win.cost_per_hour <= held.cost_per_hour
    # where a budget leaves it unchecked, the text counts it, in words that agree
    dear = next(c for c in result.candidates if c.verified and c.tp == 4)
    text = "\n".join(PlanReport(LLAMA_8B, "meta-llama/Llama-3.1-8B", replace(
        result, candidates=(dear, tp8)), 131072).text_lines())
    assert ("1 cheaper deployment was not simulated (the budget of simulated candidates ran "
            "out before it; it is listed below as an analytic runner-up): its price is the "
            "analytic estimate, not a result") in text


def test_a_check_answered_from_runs_already_made_costs_no_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Four TP4 variants at 3 replicas, each needing 6 in simulation; the one that sets
    --max-num-batched-tokens 2048 launches the A100's default engine, so its check is
    answered from the default's runs and simulates nothing. With a budget of two checks it
    had spent the second and left two variants unchecked; now the second that simulates is
    the third variant, and one is left. A search whose checks all come from runs already
    made still ends: each candidate is checked at most once."""
    default = _sized(4, "bf16", "bf16", None, 3)
    priced = [default, replace(default, max_num_batched_tokens=2048),
              *(_sized(4, "bf16", "bf16", seqs, 3) for seqs in (64, 128))]
    checked: list[Candidate] = []
    ran: list[Candidate] = []
    repeats = True  # whether the 2048 variant's check repeats the default's runs

    def simulated(model: object, c: Candidate, *args: Any, **kwargs: Any) -> Candidate:
        checked.append(c)
        if not (repeats and c.max_num_batched_tokens == 2048):
            ran.append(c)
            _ran(args[-1])
        return replace(c, replicas=6, verified=True, analytic_replicas=c.replicas)

    monkeypatch.setattr(plan_checks, "verify", simulated)
    load = Load(1.0, "1000", "250")
    verified, rest = plan_checks.verify_cheapest(LLAMA_8B, priced, load, SLO, 64, 2)
    assert ran == [priced[0], priced[2]] and checked == priced[:3]
    assert rest == priced[3:] and len(verified) == 3
    checked.clear()
    ran.clear()
    repeats = False  # every check simulates: the budget of two reaches two
    verified, rest = plan_checks.verify_cheapest(LLAMA_8B, priced, load, SLO, 64, 2)
    assert checked == ran == priced[:2] and rest == priced[2:]
    runs: CheckRuns = {(0,) * 5: None}  # type: ignore[dict-item]
    monkeypatch.setattr(plan_checks, "verify",  # every check answered from ``runs``
                        lambda model, c, *args, **kwargs: checked.append(c) or replace(
                            c, replicas=6, verified=True, analytic_replicas=c.replicas))
    checked.clear()
    verified, rest = plan_checks.verify_cheapest(LLAMA_8B, priced, load, SLO, 64, 1,
                                                 runs=runs)
    assert checked == priced and not rest and len(runs) == 1


def _eight_one_gpu_replicas() -> tuple[Load, Slo, Candidate]:
    """Llama-3.1-8B at 20 req/s (1000 / 250 tokens) on one-H100 fp8 replicas, as 8 of them:
    the candidate the replica checks below climb from."""
    load, slo = Load(20, "1000", "250"), Slo(0.5, 0.04)
    h100 = resolve_accelerator("h100")
    c = _evaluate((LLAMA_8B, h100, 1, 1, "fp8", "fp8", (None, None), False, load, slo,
                   h100.price_per_hour_usd, None, "vllm", profile_for("vllm"), 1, NO_CONSTRAINTS))
    assert c is not None
    return load, slo, replace(c, replicas=8)


def test_a_check_that_misses_tries_the_most_replicas_max_gpus_allows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Grown by a quarter, a check of 8 one-GPU replicas jumped to 10 and, past a --max-gpus
    of 9, gave up without running the 9 that hold; it now runs the most allowed, and where
    that count misses too, keeps it and its run as the check's miss."""
    load, slo, c = _eight_one_gpu_replicas()
    steady = Load.steady

    def overloaded_under_nine(self: Load, replicas: int, lifetime_s: float,
                              first_token_only: bool = False, percentile: float = 0.0) -> Any:
        if replicas < 9:  # each of fewer replicas gets 50 times its share: it misses
            self = replace(self, rate_req_s=self.rate_req_s * 50)
        return steady(self, replicas, lifetime_s, first_token_only, percentile)

    monkeypatch.setattr(Load, "steady", overloaded_under_nine)
    checked = verify(LLAMA_8B, c, load, slo, 9)
    assert checked is not None and checked.replicas == 9
    missed: plan_checks.Missed = []
    assert verify(LLAMA_8B, c, load, Slo(0.001, 0.04), 9, missed=missed) is None
    ((at, run),) = missed
    assert at.replicas == 9 and run.ttft_s > 0.001 and not run.held


def test_of_two_deployments_at_one_price_the_one_with_more_headroom_wins() -> None:
    """Llama-3.1-8B at 20 req/s of 1,024 / 256 tokens, p90 TTFT 500 ms and TPOT 40 ms, on one
    H100: each format sizes at one card, $2.99/h, but bf16 weights with an fp8 cache sustain
    21 req/s and fp8 weights 26-34 (the numbers audit of session 51). The winner had been
    the first the search listed, bf16, with the least headroom; now, at one price and GPU
    count, the highest analytic capacity ranks first, in the winner, the candidates' order
    (--json's runners-up) and the lists alike (``plan_checks.cheapest``)."""
    def capacity(c: Candidate) -> float:  # req/s within the SLO, as the sizing rates it
        return c.replicas * c.replica_rate_req_s

    load = Load(20.0, "1024", "256")
    slo = Slo(0.5, 0.04, 90)
    result = plan(LLAMA_8B, load, slo, ["h100-sxm"], 1, workers=1)  # each format on one card
    win = result.winner
    assert win is not None and win.verified and win.cost_per_hour is not None
    rivals = [c for c in result.candidates
              if c.cost_per_hour == win.cost_per_hour and c.gpus == win.gpus]
    assert len(rivals) > 1 and len({round(capacity(c), 6) for c in rivals}) > 1
    assert capacity(win) == max(capacity(c) for c in rivals)
    for group in (True, False):  # simulated first, then the analytic ones, each so ranked
        ranked = [c for c in result.candidates if c.verified is group]
        assert ranked == sorted(ranked, key=plan_checks.cheapest)
    # the lists keep the order: the runner-up of the winner's price has less headroom
    report = PlanReport(LLAMA_8B, "meta-llama/Llama-3.1-8B", result, 131072)
    same = [c for c in report.lists.runners_up() if c.cost_per_hour == win.cost_per_hour]
    assert same and all(capacity(c) <= capacity(win) for c in same)


def test_the_rank_key_puts_headroom_after_price_gpus_and_nodes() -> None:
    """``cheapest``: at one price, GPU count and node span, the higher capacity (replicas ×
    one replica's analytic rate) first; a cheaper one first whatever its headroom."""
    base = _evaluate((LLAMA_8B, A100, 1, 1, "bf16", "bf16", (None, None), False,
                      Load(4.0, "1000", "250").for_sizing(), SLO, A100.price_per_hour_usd,
                      None, "vllm", profile_for("vllm"), 1, NO_CONSTRAINTS))
    assert base is not None
    more = replace(base, replica_rate_req_s=base.replica_rate_req_s * 1.25)
    dearer = replace(more, price_per_gpu_hour=(base.price_per_gpu_hour or 0.0) + 1.0)
    assert more.capacity_req_s == more.replicas * more.replica_rate_req_s > base.capacity_req_s
    assert sorted([base, more], key=plan_checks.cheapest) == [more, base]
    assert sorted([dearer, base], key=plan_checks.cheapest) == [base, dearer]


def test_a_count_that_held_on_the_first_draw_alone_is_kept_as_a_second_draw_miss(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Fewer one-GPU replicas hold on the load's requests, but the second draw (seed 1) is
    overloaded under nine: the check climbs to nine, and each count it turned down on the
    second draw alone is kept, with both runs, where the plan can name the cheapest; the runs
    are the check's own, none made for it."""
    load, slo, c = _eight_one_gpu_replicas()
    steady = Load.steady

    def second_draw_overloaded(self: Load, replicas: int, lifetime_s: float,
                               first_token_only: bool = False, percentile: float = 0.0) -> Any:
        if self.seed == plan_checks.CONFIRM_DRAW and replicas < 9:
            self = replace(self, rate_req_s=self.rate_req_s * 50)
        return steady(self, replicas, lifetime_s, first_token_only, percentile)

    monkeypatch.setattr(Load, "steady", second_draw_overloaded)
    edges: plan_checks.SecondDraws = []
    runs: CheckRuns = {}
    checked = verify(LLAMA_8B, c, load, slo, 16, runs=runs, edges=edges)
    assert checked is not None and checked.replicas == 9
    counts = [e.candidate.replicas for e in edges]
    assert counts == list(range(counts[0], 9)) and counts[0] < 8
    assert all(e.first.held and not e.second.held for e in edges)
    assert all(e.first in runs.values() and e.second in runs.values() for e in edges)
    # the plan names the cheapest where it is cheaper than the winner, and none where none is
    fewest = edges[0]
    assert plan_checks.second_draw_miss(edges, checked) is fewest
    assert plan_checks.second_draw_miss(edges, replace(checked, replicas=counts[0])) is None
    assert plan_checks.second_draw_miss(edges, None) is fewest
