"""plan after its 2026 audit: the launch length, the closest miss, the CDNA3 MoE winner, the
JSON's names, the Pareto frontier's SLO batch, a prefill-only load's price."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

import ridgeline.plan as planning
from ridgeline.candidate import replica_deployment
from ridgeline.catalog import resolve_model
from ridgeline.cli import main
from ridgeline.context_length import served_positions
from ridgeline.cost import decode_batch, mean_decode_context, step_time_s
from ridgeline.engines import profile_for
from ridgeline.hardware import resolve_accelerator
from ridgeline.measured_slowdown import MEASURED_SLOWDOWN_LOW
from ridgeline.memory import EngineSettings
from ridgeline.plan import PlanResult, plan
from ridgeline.replica_sizing import MODEL_LEN_STEP, launch_length, starts_at
from ridgeline.serving_load import Load, Slo
from ridgeline.units import fmt_req_rate, share_of_requests, usd_per_million_tokens
from tests.conftest import leave_splits_unchecked
from tests.plan_memo import PlanMemo

LLAMA_8B, LLAMA_70B = resolve_model("llama-3.1-8b"), resolve_model("llama-3.1-70b")
# this module's searches, each question once, the CLI's among them; a test that spies on
# what the search calls calls ``plan`` itself
PLANS = PlanMemo()


@pytest.fixture(autouse=True)
def _one_search_per_question(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planning, "plan", PLANS)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["plan", *args, "--workers", "1"]) == 0
    return capsys.readouterr().out


# -- 1. the launch length ------------------------------------------------------------------
def test_a_pool_that_holds_the_models_context_launches_at_it() -> None:
    dep = replica_deployment(LLAMA_8B, resolve_accelerator("h100-sxm"), 1, 1, "fp8", "fp8")
    assert launch_length(dep, EngineSettings()) == served_positions(LLAMA_8B, "vllm")


def test_a_pool_too_small_for_the_context_shrinks_to_the_longest_length_that_starts() -> None:
    dep = replica_deployment(LLAMA_70B, resolve_accelerator("l40s"), 2, 1, "fp8", "fp8")
    settings = EngineSettings()
    length = launch_length(dep, settings)
    assert 0 < length < served_positions(LLAMA_70B, "vllm") and length % MODEL_LEN_STEP == 0
    assert starts_at(dep, settings, length)
    assert not starts_at(dep, settings, length + MODEL_LEN_STEP)
    one_h100 = replica_deployment(LLAMA_70B, resolve_accelerator("h100-sxm"), 1, 1, "fp8", "fp8")
    profiled = EngineSettings(extensible_kv_cache=False)  # 0.92 of the card, as before v0.34
    assert launch_length(one_h100, profiled) == 0  # 70B's weights leave it no pool
    # v0.34 sizes the whole card after warm-up: a pool, at a context shorter than the model's
    length = launch_length(one_h100, settings)
    assert 0 < length < served_positions(LLAMA_70B, "vllm") and starts_at(one_h100, settings,
                                                                           length)


def test_the_sampled_length_refused_more_than_a_p99_9_slo_spares_and_the_context_none() -> None:
    """The audit's p99.9 load: the old --max-model-len (the longest of 2,000 draws, 18,432)
    refused about 0.2 % of its requests, twice what p99.9 spares; the model's context none."""
    load = Load(10, "lognormal:1000,1", "lognormal:300,1")
    assert load.refused_share(18432) > 0.001
    assert load.refused_share(served_positions(LLAMA_8B, "vllm")) == 0


def test_a_shrunk_launch_prints_the_share_of_the_load_it_refuses() -> None:
    """70B on L40Ss at 0.3 req/s of 8,000-token prompts: 4 × TP2 launches shorter than the
    model's context. At its $14.89 the full-context 2 × TP4 has more headroom and now wins
    (the rank order among one price); the shorter launch, printed as the answer, says what it
    refuses. (Read unsimulated: the launch length is the search's, settled before any check;
    the search itself, not the memo's, as the stand-in asks.)"""
    from dataclasses import replace

    from ridgeline.reports.plan import PlanReport

    load = Load(0.3, "lognormal:8000,0.8", "200")
    result = plan(LLAMA_70B, load, Slo(20.0, 0.15), ["l40s"], max_gpus=8, workers=1, verify=0)
    shrunk = next(c for c in result.candidates
                  if c.max_model_len < served_positions(LLAMA_70B, "vllm"))
    length = shrunk.max_model_len
    out = "\n".join(PlanReport(LLAMA_70B, "meta-llama/Llama-3.1-70B", replace(
        result, candidates=(shrunk,)), length, load.refused_share(length)).text_lines())
    assert f"--max-model-len {length} " in out
    share = load.refused_share(length)
    assert share > 0
    assert f"--max-model-len {length:,}: the longest its KV pool starts with" in out
    refused = share_of_requests(share, "this load's")
    assert f"it refuses {refused} (those longer)" in out


@pytest.mark.usefixtures("unsimulated")  # the launch length the search settles
def test_a_shrunk_launch_that_refuses_nothing_says_so_without_calling_requests_misses(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Fixed 8,000-token prompts under a 47,104-token launch: none is longer, so the note
    says it refuses none, not "none of this load's requests (those longer), each a miss"."""
    out = _run(capsys, "llama-3.1-70b", "--rate", "0.3", "--input-len", "8000",
               "--output-len", "200", "--slo-ttft-ms", "20000", "--slo-tpot-ms", "150",
               "--gpus", "l40s", "--max-gpus", "8")
    length = int(re.search(r"vllm serve .* --max-model-len (\d+)", out).group(1))  # type: ignore[union-attr]
    assert length < served_positions(LLAMA_70B, "vllm")
    assert Load(0.3, "8000", "200").refused_share(length) == 0
    note = next(line for line in out.splitlines() if "the longest its KV pool starts with" in line)
    assert "no request of this load is longer, so it refuses none" in note
    assert "each a miss" not in note


# -- 3. the closest miss -----------------------------------------------------------------
def test_the_closest_miss_is_the_nearest_layout_not_the_widest() -> None:
    """A 3 ms TPOT no card keeps: 8 x B200 at TP8 comes nearer than TP16 over two nodes."""
    load = Load(10, "1000", "250")
    result = PLANS(LLAMA_70B, load, Slo(1.0, 0.003), gpus=["b200"], workers=1)
    assert result.winner is None
    found = re.match(r"(\d+) x b200 \(TP(\d+)\): TTFT ≥ [\d,]+ ms, TPOT ≥ ([\d.]+) ms",
                     result.closest_miss)
    assert found, result.closest_miss
    tp, tpot_ms = int(found.group(2)), float(found.group(3))
    ctx = mean_decode_context(*load.means())
    wide = replica_deployment(LLAMA_70B, resolve_accelerator("b200"), 16, 1, "fp8", "fp8")
    assert tp < 16
    assert tpot_ms < step_time_s(wide, decode_batch(1, ctx), profile_for("vllm")) * 1e3


def test_a_load_past_max_gpus_says_how_many_gpus_it_needs() -> None:
    load, slo = Load(3000, "1000", "250"), Slo(0.5, 0.04)
    result = PLANS(LLAMA_8B, load, slo, gpus=["h100-sxm"], workers=1)
    assert result.winner is None and "the load is the miss" in result.closest_miss
    found = re.search(r"needs about ([\d,]+) GPUs .*raise --max-gpus", result.closest_miss)
    assert found, result.closest_miss
    needed = int(found.group(1).replace(",", ""))
    assert needed > 64
    enough = PLANS(LLAMA_8B, load, slo, gpus=["h100-sxm"], max_gpus=needed, workers=1,
                   verify=0)
    assert min(c.gpus for c in enough.candidates) == needed


def test_a_rate_of_thousands_reads_as_a_number_not_an_exponent(
        capsys: pytest.CaptureFixture[str]) -> None:
    """plan's head printed --rate 100000 as '1e+05 req/s' (4 significant figures), and the
    closest miss its replicas ungrouped ('2769 replicas' beside 'about 2,769 GPUs'): both now
    read as the GPUs do, whole and grouped; a rate under 1,000 keeps its figures."""
    code = main(["plan", "llama-3.1-8b", "--gpus", "h100", "--rate", "100000",
                 "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50"])
    out = capsys.readouterr().out
    assert code == 1 and "e+0" not in out
    assert out.startswith("llama-3.1-8b at 100,000 req/s (input")
    assert "no batch sustaining 100,000 req/s within 64 GPUs" in out
    found = re.search(r"needs about ([\d,]+) GPUs \(([\d,]+) replicas of 1 x h100-sxm", out)
    assert found and found.group(1) == found.group(2) and "," in found.group(2), out
    assert fmt_req_rate(0.25) == "0.25" and fmt_req_rate(12.5) == "12.5"


# -- 2. the CDNA3 MoE caution ------------------------------------------------------------
def test_a_cautioned_winner_whose_slowed_tpot_misses_gives_way_to_one_without_it() -> None:
    # TPOT 25 ms: at 30 the MI300X variant ranked first at its price (the most headroom,
    # plan_checks.cheapest: an fp8 cache) reads 18.5 ms, whose slowed floor keeps the SLO
    model, slo = resolve_model("gpt-oss-120b"), Slo(2.0, 0.025)
    load = Load(10, "1000", "250")
    with pytest.MonkeyPatch.context() as patch:  # alone: the single MI300X pools' checks
        leave_splits_unchecked(patch)
        alone = PLANS(model, load, slo, gpus=["mi300x"], max_gpus=2, workers=1)
    cautioned = alone.winner
    assert cautioned is not None and cautioned.sim_tpot_s is not None and alone.winner_unverified
    assert cautioned.sim_tpot_s * MEASURED_SLOWDOWN_LOW > slo.tpot_s
    assert any("is unverified" in c and "no deployment without this caution meets the SLO" in c
               for c in alone.cautions)
    # --max-gpus 2: the question the test of the cheaper cautioned list asks, as `plan` asks it
    both = PLANS(model, load, slo, gpus=["mi300x", "h100"], max_gpus=2, workers=1)
    assert both.winner is not None and both.winner.accelerator == "h100-sxm"
    assert not both.winner_unverified
    assert both.winner.verified and both.winner.sim_tpot_s <= slo.tpot_s  # type: ignore[operator]
    note = next(c for c in both.cautions if "is unverified" in c)
    assert f"at least {cautioned.sim_tpot_s * MEASURED_SLOWDOWN_LOW * 1e3:,.1f} ms" in note
    assert "ranked first" in note


def test_a_cautioned_cheapest_with_no_alternative_is_printed_unverified_not_as_winner(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = ("gpt-oss-120b", "--rate", "5", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "30",
            "--gpus", "mi300x", "--max-gpus", "1")
    data = json.loads(_run(capsys, *args, "--json"))
    assert any("no deployment without this caution meets the SLO within the search" in c
               for c in data["cautions"])
    text = _run(capsys, *args)
    assert not re.search(r"^winner:", text, re.M)
    assert f"cheapest, unverified: {data['winner']['label']} = " in text
    assert data["winner_unverified"] is True and data["winner"]["unverified"]


def test_after_a_demotion_the_cheaper_cautioned_deployments_are_listed_apart_from_runners_up(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The cheapest (MI300X) gives way to an H100 without the caution: the deployments cheaper
    than that winner are the cautioned ones, listed as unverified with their TPOT at the
    measured slowdown, not as runners-up nor as candidates the simulation budget missed."""
    args = ("gpt-oss-120b", "--rate", "10", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "25",
            "--gpus", "mi300x,h100", "--max-gpus", "2")
    data = json.loads(_run(capsys, *args, "--json"))
    win = data["winner"]
    assert any("ranked first" in c for c in data["cautions"])
    text = _run(capsys, *args)
    assert f"winner: {win['label']} = " in text
    assert "were not simulated" not in text
    assert data["verdict"] == "winner" and data["winner_unverified"] is False
    assert not win["unverified"] and win["slowed_tpot_floor_s"] is None
    assert not [r for r in data["runners_up"] if r["cost_per_hour_usd"] < win["cost_per_hour_usd"]]
    cheaper = data["cheaper_unverified"]
    assert cheaper and all(r["unverified"] and r["cost_per_hour_usd"] < win["cost_per_hour_usd"]
                           for r in cheaper)
    n = len(cheaper)
    assert (f"{n} cheaper {'deployment carries' if n == 1 else 'deployments carry'} a measured "
            "caution") in text
    demoted = next(r for r in cheaper if r["verified"])  # the cheapest, simulated
    assert demoted["slowed_tpot_floor_s"] == pytest.approx(
        demoted["sim_tpot_s"] * MEASURED_SLOWDOWN_LOW)
    row = re.search(re.escape(demoted["label"]) + r" .* simulated$", text, re.M)
    assert row and f"{demoted['slowed_tpot_floor_s'] * 1e3:,.1f} ms, past the SLO" in row.group()


def test_a_cautioned_cheapest_whose_slowed_floor_keeps_the_slo_still_gives_way(
        capsys: pytest.CaptureFixture[str]) -> None:
    """At 5 req/s and a 40 ms TPOT the MI300X's simulated p90 × 1.4 (31.5 ms) keeps the SLO,
    but that is a floor, not a result: the winner is the H100 that holds without the caution,
    and the MI300X is listed cheaper, unverified, with its floor within the SLO."""
    args = ("gpt-oss-120b", "--rate", "5", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "40",
            "--gpus", "mi300x,h100", "--max-gpus", "1")
    data = json.loads(_run(capsys, *args, "--json"))
    win, slo_s = data["winner"], data["slo"]["tpot_s"]
    assert win["accelerator"] == "h100-sxm" and win["verified"] and not win["unverified"]
    assert data["winner_unverified"] is False and win["sim_tpot_s"] <= slo_s
    (amd,) = data["cheaper_unverified"]
    assert amd["accelerator"] == "mi300x" and amd["verified"]
    assert amd["sim_tpot_s"] < amd["slowed_tpot_floor_s"] <= slo_s
    note = next(c for c in data["cautions"] if "is unverified" in c)
    assert f"the cheapest without it: {win['label']} = " in note
    assert f"at least {amd['slowed_tpot_floor_s'] * 1e3:,.1f} ms, within the" in note
    text = _run(capsys, *args)
    row = re.search(r"^" + re.escape(amd["label"]) + r" .*$", text, re.M)
    assert row and f"{amd['slowed_tpot_floor_s'] * 1e3:,.1f} ms" in row.group()
    assert "past the SLO" not in row.group()


@pytest.mark.usefixtures("splits_unchecked")  # the single pools' checks (the search itself)
def test_the_winner_is_the_cheapest_without_the_caution_that_holds_not_the_first_checked(
        ) -> None:
    """Mixtral-8x7B at 10 req/s within 4 GPUs: the H100 pair at TP2 (fp8), $5.98/h analytic,
    needed 2 replicas in simulation ($11.96/h); four MI300Xs at TP4 (bf16, no caution), next
    at $7.40/h, hold as one replica. The search for the winner goes on past the first that
    holds while a candidate's analytic price is below it (it had stopped at the first)."""
    model = resolve_model("mixtral-8x7b")
    result = plan(model, Load(10, "1000", "250"), Slo(1.0, 0.03), gpus=["mi300x", "h100-sxm"],
                  max_gpus=4, workers=1)
    win = result.winner
    assert win is not None and win.verified and not result.winner_unverified
    held = [c for c in result.candidates if c.verified and not result.unverified_by(c)]
    assert min(c.cost_per_hour or 0.0 for c in held) == win.cost_per_hour
    grown = [c for c in held if c.replicas > c.analytic_replicas]  # priced past the winner
    assert any((c.cost_per_hour or 0.0) > (win.cost_per_hour or 0.0) for c in grown)
    cheaper = result.cheaper_unverified
    assert cheaper and all((c.cost_per_hour or 0.0) < (win.cost_per_hour or 0.0) for c in cheaper)
    assert all(result.unverified_by(c) for c in result.candidates
               if (c.cost_per_hour or 0.0) < (win.cost_per_hour or 0.0))


@pytest.mark.usefixtures("splits_unchecked")  # the single pools' checks (the search itself)
def test_a_candidate_the_search_for_an_alternative_saw_miss_leaves_the_list(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """gpt-oss-20b at 15 req/s within 4 GPUs: two L40S pairs miss in simulation, and more
    replicas pass the limit; they had stayed in the list as analytic runners-up after their
    check missed. (At 14 req/s the pair ranked first at its price, the most headroom, holds.)"""
    import ridgeline.measured_slowdown as measured_slowdown
    import ridgeline.plan_checks as plan_checks

    missed = []
    check = plan_checks.verify

    def spy(model: object, c: object, *args: object, **kwargs: object) -> object:
        held = check(model, c, *args, **kwargs)  # type: ignore[arg-type]
        if held is None:
            missed.append(c)
        return held

    for checks in (plan_checks, measured_slowdown):  # every caller of the check
        monkeypatch.setattr(checks, "verify", spy)
    result = plan(resolve_model("gpt-oss-20b"), Load(15, "1000", "250"), Slo(1.0, 0.03),
                  gpus=["mi300x", "l40s"], max_gpus=4, workers=1)
    assert any(c.accelerator == "l40s" for c in missed)
    assert not any(c in result.candidates for c in missed)
    assert result.winner_unverified


def test_a_cautioned_cheapest_names_the_split_that_held_without_the_caution(
        capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss-20b at 10 req/s within 6 GPUs: no single pool without the caution (the L40Ss)
    holds, so the MI300X stays first, unverified; an L40S split held in simulation. Its
    pools, a hybrid's under vLLM's NixlConnector, are sized as the release runs them beside
    the connector (v0.34 keeps the hybrid KV cache manager: disaggregated.pool_connector), so
    --json names it (``held_splits``) and the text says it beside the caution."""
    args = ("gpt-oss-20b", "--rate", "10", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "15",
            "--gpus", "mi300x,l40s", "--max-gpus", "6")
    data = json.loads(_run(capsys, *args, "--json"))
    assert data["verdict"] == "cheapest unverified" and data["winner_unverified"] is True
    assert data["cheaper_unverified"] == []  # nothing ranks before the cheapest
    split = next(r for r in data["disaggregated"] if r["verified"] and not r["unverified"])
    # the connector's one caution is v0.34's sizing beside it (no IMEX channel assumed:
    # plan_cautions.split_extensible_caution), not the manager's
    assert [c for c in split["cautions"] if "NixlConnector" in c] \
        == [c for c in split["cautions"] if "IMEX" in c and "manager" not in c]
    held = data["held_splits"]
    assert held and all(r["verified"] and not r["unverified"] and r["accelerator"] == "l40s"
                        for r in held)
    assert held == [r for r in data["disaggregated"] if r["verified"] and not r["unverified"]]
    text = _run(capsys, *args)
    assert (f"  split prefill and decode pools without the caution held in simulation: "
            f"{held[0]['label']} = {held[0]['num_gpus']} GPUs, ${held[0]['cost_per_hour_usd']:,.2f}/h"
            in text)


# -- 9. --json names -----------------------------------------------------------------------
@pytest.mark.usefixtures("unsimulated")  # the names and rate limits the search settles
def test_json_names_the_engine_its_version_the_stored_format_and_the_rate_limits(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = ("gpt-oss-120b", "--rate", "10", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "30",
            "--gpus", "h100", "--max-gpus", "8", "--engine-version", "0.17.0")
    data = json.loads(_run(capsys, *args, "--json"))
    assert (data["engine"], data["engine_version"]) == ("vllm", "0.17.0")
    win = data["winner"]
    stored = {fmt for _, fmt in resolve_model("gpt-oss-120b").stored_formats}
    assert win["weights"] == "as stored" and win["weights_format"] == "+".join(sorted(stored))
    assert set(win["rate_limits"]) == {"tpot_at_batch", "token_budget", "prompt_queue", "kv_pool"}
    assert win["replica_rate_req_s"] == pytest.approx(min(win["rate_limits"].values()))
    text = _run(capsys, *args)
    assert "pools sized as vLLM 0.17.0 sizes them" in text
    assert f"as stored ({win['weights_format']})" in text


# -- 10. the Pareto frontier ---------------------------------------------------------------
FRONTIER_SLO = Slo(0.5, 0.04)


def _frontier_plan() -> PlanResult:
    """Llama 8B at 10 req/s on H100s within 8 (a point on the frontier of more layouts is on
    the frontier of fewer), searched once for the two tests of its frontier; unsimulated, as
    the frontier is drawn from the analytic rows (``plan`` sizes the batch before any check)."""
    return PLANS(LLAMA_8B, Load(10, "1000", "250"), FRONTIER_SLO, gpus=["h100-sxm"], max_gpus=8,
                 workers=1, verify=0)


def test_the_pareto_frontier_holds_the_batch_that_meets_the_slo() -> None:
    result = _frontier_plan()
    tp1 = max((c for c in result.candidates if (c.tp, c.weights, c.kv) == (1, "fp8", "fp8")),
              key=lambda c: c.batch)
    assert tp1.batch & (tp1.batch - 1)  # not a power of two: the doubling alone misses it
    label = f"h100-sxm TP1 fp8, KV fp8, b{tp1.batch}"
    assert any(p.label == label for p in result.pareto)


def test_the_frontiers_slo_batch_reads_faster_than_the_slo_and_the_table_says_why() -> None:
    """The SLO's batch was sized with the load's prompts in its steps; the frontier prices a
    decode step alone, so that point's tok/s/user is past 1 ÷ the TPOT SLO, which a reader
    would take for slack: the table says why."""
    from ridgeline.reports.plan_lists import PlanLists

    slo, result = FRONTIER_SLO, _frontier_plan()
    tp1 = max((c for c in result.candidates if (c.tp, c.weights, c.kv) == (1, "fp8", "fp8")),
              key=lambda c: c.batch)
    label = f"h100-sxm TP1 fp8, KV fp8, b{tp1.batch}"
    per_user = next(p.per_user_tok_s for p in result.pareto if p.label == label)
    assert per_user > 1 / slo.tpot_s
    lines = PlanLists(LLAMA_8B, result).pareto_lines()
    assert any("a decode step alone" in line and "prompts sharing the steps" in line
               for line in lines)


# -- 11. a prefill-only load ---------------------------------------------------------------
def test_a_prefill_only_load_is_priced_per_prompt_token_with_no_infinite_bound(
        capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(capsys, "llama-3.1-8b", "--rate", "10", "--input-len", "1000", "--output-len", "1",
               "--slo-ttft-ms", "500", "--slo-tpot-ms", "40", "--gpus", "h100")
    assert "inf req/s" not in out
    cost = float(re.search(r"\$([\d.]+)/h", out).group(1))  # type: ignore[union-attr]
    per_m = usd_per_million_tokens(cost, 10 * 1000)
    assert per_m is not None and f"${per_m:,.3f} per million prompt tokens" in out


def test_a_check_at_p99_9_holds_ten_requests_past_its_percentile() -> None:
    """At p99.9 the 1,600 requests a check drew put 1.6 past the percentile, the slowest one
    deciding: plan asked 8 GPUs where 10,000 requests showed 2 holding. A check now draws
    10 ÷ (1 − p) requests where that is more, so the tail the percentile reads is 10 deep;
    p90 and p99 keep the 1,600 that reach the steady state."""
    from ridgeline.serving_load import SIM_REQUESTS, TAIL_REQUESTS

    load = Load(10, "lognormal:1000,1", "lognormal:300,1")
    for percentile, least in ((90.0, SIM_REQUESTS), (99.0, SIM_REQUESTS), (99.9, 10_000)):
        work, window = load.steady(1, 1.0, percentile=percentile)
        assert len(work) == least
        counted = sum(window[0] <= r.arrival_s <= window[1] for r in work)
        if percentile == 99.9:  # the latencies counted hold most of the ten past p99.9
            assert counted * (1 - percentile / 100) >= 0.5 * TAIL_REQUESTS


def test_a_split_on_cdna3_carries_the_measured_caution_and_is_not_offered_as_cheaper(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The MI300X 1P1D split prices the same MXFP4 MoE path the caution demoted the single
    MI300X for: it is marked unverified, and not named as costing less than the H100 winner."""
    args = ("gpt-oss-120b", "--rate", "10", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "30",
            "--gpus", "mi300x,h100", "--max-gpus", "2")
    data = json.loads(_run(capsys, *args, "--json"))
    splits = {r["label"]: r for r in data["disaggregated"]}
    amd = [r for label, r in splits.items() if "mi300x" in label]
    assert amd and all(r["unverified"] for r in amd)
    assert not any(r["unverified"] for label, r in splits.items() if "h100" in label)
    text = _run(capsys, *args)
    assert "split costs less than the winner" not in text
    assert re.search(r"^disaggregated, .*mi300x.*, unverified: CDNA3.s FP8 and MXFP4 MoE", text,
                     re.M)


@pytest.mark.usefixtures("splits_unchecked")  # the single-pool alternatives' checks
def test_a_cautioned_cheapest_says_how_many_alternatives_were_simulated(
        capsys: pytest.CaptureFixture[str]) -> None:
    """With A100s beside the MI300X, the deployments without the caution exist and were
    simulated and missed: the caution says that, not that the search held none. (At 5 req/s
    and a 60 ms TPOT an A100 pair holds, 57.0 ms: at 50 ms no A100 shape does.)"""
    data = json.loads(_run(capsys, "gpt-oss-120b", "--rate", "5", "--slo-ttft-ms", "2000",
                           "--slo-tpot-ms", "50", "--gpus", "mi300x,a100", "--max-gpus", "2",
                           "--json"))
    note = next(c for c in data["cautions"] if "is unverified" in c)
    assert re.search(r"; (both deployments|all \d+ deployments|the only deployment|the \d+ "
                     r"cheapest of the \d+ deployments) without this caution (was|were) "
                     r"simulated and missed the SLO", note)
    assert "within the search" not in note and data["winner_unverified"] is True


def test_where_only_split_pools_hold_plan_names_them_and_exits_0(
        capsys: pytest.CaptureFixture[str]) -> None:
    """20,000-token prompts under an 8 ms TPOT: no single H100 pool within 8 GPUs holds, a
    simulated 3P3D split does; that is an answer (exit 0), not NO DEPLOYMENT (exit 1)."""
    args = ["plan", "llama-3.1-8b", "--rate", "5", "--input-len", "20000", "--output-len",
            "200", "--slo-ttft-ms", "5000", "--slo-tpot-ms", "8", "--gpus", "h100",
            "--max-gpus", "8", "--workers", "1"]
    code = main(args)
    text = capsys.readouterr().out
    assert code == 0
    assert "NO SINGLE-POOL DEPLOYMENT within the limits meets this SLO; split" in text
    data_code = main([*args, "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data_code == 0 and data["winner"] is None and data["verdict"] == "split pools"
    held = [r for r in data["disaggregated"] if r["verified"] and not r["unverified"]]
    assert held and data["held_splits"] == held
    listed = re.findall(r"^  (\d+P\d+D pools of .*?): \d+ GPUs", text, re.M)
    assert listed == [r["label"] for r in held]  # the text names the JSON's splits, all of them


@pytest.mark.usefixtures("unsimulated")  # the context and its refused share, as searched
def test_a_tiny_share_longer_than_the_context_reads_as_one_in_so_many_requests(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A lognormal tail past llama-3.1-8b's 131,072 tokens: 3e-05 of the requests, which
    printed as "3.0e-05 of the requests"; it reads "about 1 in 33,000 requests"."""
    argv = ["llama-3.1-8b", "--rate", "2", "--input-len", "lognormal:2000,1", "--output-len",
            "200", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "50", "--percentile", "99",
            "--gpus", "h100-sxm", "--max-gpus", "8"]
    assert main(["plan", *argv, "--json", "--workers", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert 0 < data["refused_share"] < 1e-3
    out = _run(capsys, *argv)
    line = f"  {share_of_requests(data['refused_share'])} are longer than llama-3.1-8b's " \
        f"{data['max_model_len']:,}-token context"
    assert line in out
    assert line.startswith("  about 1 in ")


def test_a_trace_dealt_to_two_replicas_says_in_json_what_its_check_replayed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A trace at 30 req/s needs two H100s: simulate --trace cannot rerun one replica's
    share, so the text says what the check replayed instead of a command; --json gave only
    check_command null, without the text's reason (now check_note, the same words)."""
    trace = tmp_path / "trace.csv"
    rows = [f"{i / 30:.4f},{800 + 300 * (i % 7)},{100 + 30 * (i % 5)}" for i in range(600)]
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    args = ("llama-3.1-8b", "--trace", str(trace), "--slo-ttft-ms", "300", "--slo-tpot-ms",
            "20", "--gpus", "h100")
    data = json.loads(_run(capsys, *args, "--json"))
    assert data["winner"]["replicas"] > 1 and data["check_command"] is None
    note = data["check_note"]
    assert note and "every 2nd request of the trace" in note and "simulate --trace" in note
    assert f"({note})" in _run(capsys, *args).splitlines()


@pytest.mark.usefixtures("splits_unchecked")  # the single pools' checks and their misses
def test_where_every_check_within_max_gpus_misses_the_closest_miss_is_the_nearest_simulated(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A p99 TTFT of 30 ms at 10 req/s within two H100s: the analytic sizing finds
    deployments, but each one's check misses at every count it can run; plan said NO
    DEPLOYMENT with no closest miss at all. It names the nearest simulated one, its figures
    and which latency missed: of the checks that missed, the one whose p99 TTFT came nearest
    its SLO (TPOT within its own)."""
    import ridgeline.plan as planner

    missed: list = []  # (candidate, its check run), every check that missed
    named = planner.simulated_miss

    def seen(model: object, runs: list, *rest: object) -> object:
        missed.extend(runs)
        return named(model, runs, *rest)

    monkeypatch.setattr(planner, "simulated_miss", seen)
    slo = Slo(0.030, 0.020, 99)
    result = plan(LLAMA_8B, Load(10, "1000", "250"), slo, gpus=["h100"], max_gpus=2, workers=1)
    assert result.winner is None and not result.unpriced
    found = re.match(r"(.+), as many replicas as --max-gpus 2 allows, came nearest in "
                     r"simulation: p99 TTFT ([\d,]+) ms, TPOT ([\d.]+) ms: TTFT misses its 30 ms "
                     r"SLO; TPOT is within its 20 ms$", result.closest_miss)
    assert found, result.closest_miss
    assert float(found.group(2)) > 30 and float(found.group(3)) <= 20
    assert missed and all(run.tpot_s <= slo.tpot_s for _, run in missed)
    nearest = min(missed, key=lambda seen: seen[1].ttft_s)[1]
    assert found.group(2) == f"{nearest.ttft_s * 1e3:,.0f}"
    assert found.group(3) == f"{nearest.tpot_s * 1e3:.1f}"
    assert re.search(r"x h100-sxm \(TP2, fp8, KV (fp8|bf16), max_num_seqs 64\)$", found.group(1))


def test_a_simulated_miss_of_one_token_outputs_speaks_of_ttft_alone() -> None:
    """1-token outputs have no TPOT: the nearest simulated miss says the TTFT missed, not
    that a TPOT of n/a is within its SLO."""
    from ridgeline.candidate import Candidate
    from ridgeline.closest_miss import simulated_miss
    from ridgeline.plan_checks import CheckRun

    c = Candidate("h200-sxm", 2, 1, "fp8", "fp8", None, 4, 0.02, 0.6, 1.0, 1, 4.54, True, "",
                  (1.0, 1.0))
    slo = Slo(1.0, 0.05, 99)
    near, far = (CheckRun(False, ttft, math.nan, 1600, 0, (1.0, 9.0)) for ttft in (1.8, 2.5))
    miss = simulated_miss(LLAMA_70B, [(c, far), (c, near)], slo, 2, "vllm")
    assert miss is not None
    text = miss.text
    assert text.endswith("came nearest in simulation: p99 TTFT 1,800 ms, TPOT n/a "
                         "(1-token outputs): TTFT misses its 1,000 ms SLO")
