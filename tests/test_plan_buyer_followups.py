"""plan as a buyer reads it, the audit's follow-ups: a winner whose streamed gaps stall past its
TPOT SLO said so, a failed plan's closest line one priced deployment, the text listing every
split --json lists, fit's verdict at the model's full context said to be there, and no format
offered on a card that lacks it."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import ridgeline.plan as planning
from ridgeline.plan_cautions import ITL_STALL_FACTOR, itl_stall_note
from ridgeline.serving_load import Slo
from tests.conftest import cli_json, run_cli
from tests.plan_memo import PlanMemo

# this module's searches, each question once (`plan`'s among them)
PLANS = PlanMemo()


@pytest.fixture(autouse=True)
def _one_search_per_question(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planning, "plan", PLANS)


# Llama-3.1-8B on L40Ss, 4,000-token prompts at 4 req/s: the winner's p90 TPOT holds 40 ms
# while one gap in ten waits out another request's prompt
STALL = ("plan", "llama-3.1-8b", "--rate", "4", "--input-len", "4000", "--output-len", "250",
         "--slo-ttft-ms", "1000", "--slo-tpot-ms", "40", "--percentile", "90",
         "--gpus", "l40s", "--max-gpus", "8", "--workers", "1")


def test_a_winner_whose_itl_stalls_past_its_tpot_slo_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    """TPOT is a request's mean gap: the winner's simulated p90 ITL, simulate's ITL row,
    at ITL_STALL_FACTOR × the TPOT SLO or more is said in the text and in --json's notes."""
    data = cli_json(capsys, *STALL, "--json")
    win, slo = data["winner"], data["slo"]
    assert win["verified"] and win["sim_tpot_s"] <= slo["tpot_s"]
    stall = [n for n in data["notes"] if "ITL" in n]
    assert len(stall) == 1
    code, out, _ = run_cli(capsys, *STALL)
    assert code == 0 and f"  note: {stall[0]}" in out.splitlines()
    # the figure is the check's ITL, which --json gives where an ITL SLO is asked for: a limit
    # past it keeps the same winner and, the ITL now judged, no note
    itl_ms = float(stall[0].split("ITL is ")[1].split(" ms")[0])
    judged = cli_json(capsys, *STALL, "--slo-itl-ms", f"{itl_ms * 1.01:g}", "--json")
    assert judged["winner"]["sim_itl_s"] * 1e3 == pytest.approx(itl_ms, abs=0.05)
    assert itl_ms >= ITL_STALL_FACTOR * slo["tpot_s"] * 1e3
    assert not any("ITL is" in n for n in judged["notes"])


def test_an_itl_within_the_factor_or_unmeasured_gets_no_note(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The same plan's winner read against a TPOT SLO its ITL is within ITL_STALL_FACTOR of,
    or with no ITL (1-token outputs), says nothing."""
    from ridgeline.catalog import resolve_model
    from ridgeline.serving_load import Load

    result = PLANS(resolve_model("llama-3.1-8b"), Load(4.0, "4000", "250"),
                   Slo(1.0, 0.04, 90), ("l40s",), 8, workers=1)  # STALL's search
    win = result.winner
    assert win is not None and win.sim_itl_s is not None
    assert itl_stall_note(win, result.slo) in result.notes
    loose = replace(result.slo, tpot_s=win.sim_itl_s / ITL_STALL_FACTOR * 1.01)
    assert itl_stall_note(win, loose) == ""
    assert itl_stall_note(replace(win, sim_itl_s=math.nan), result.slo) == ""
    assert itl_stall_note(win, replace(result.slo, itl_s=1.0)) == ""


def test_a_failed_plans_closest_line_is_one_deployment_priced() -> None:
    """Past --max-gpus, the closest line named the nearest group unloaded (the first card's,
    an L40S) beside the fewest GPUs the sizing found (H100s), and no price: it now names one
    deployment, its group's latencies unloaded and its $/h, which a plan allowed its GPUs
    finds at that price."""
    import re

    from ridgeline.catalog import resolve_model
    from ridgeline.serving_load import Load

    model, load, slo = resolve_model("llama-3.1-8b"), Load(3000, "1000", "250"), Slo(0.5, 0.04)
    result = PLANS(model, load, slo, gpus=["l40s", "h100-sxm"], workers=1)
    miss = result.closest_miss
    assert result.winner is None and "the load is the miss" in miss
    found = re.search(r"needs about ([\d,]+) GPUs \(([\d,]+) replicas of 1 x (\S+) .*"
                      r"\$([\d,.]+)/h, sized analytically", miss)
    assert found, miss
    card = found.group(3)
    assert miss.startswith(f"1 x {card} (TP1) meets the SLO unloaded")
    other = ({"l40s", "h100-sxm"} - {card}).pop()
    assert other not in miss
    needed = int(found.group(1).replace(",", ""))
    enough = PLANS(model, load, slo, gpus=[card], max_gpus=needed, workers=1, verify=0)
    fewest = min(enough.candidates, key=lambda c: c.gpus)
    assert fewest.gpus == needed and fewest.cost_per_hour is not None
    assert float(found.group(4).replace(",", "")) == pytest.approx(fewest.cost_per_hour,
                                                                    abs=0.005)


SPLITS = ("plan", "llama-3.1-8b", "--rate", "5", "--input-len", "1000", "--output-len", "200",
          "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50", "--gpus", "h100,b200,mi300x,l40s",
          "--max-gpus", "8", "--workers", "1")


def test_the_text_lists_every_split_the_json_lists(capsys: pytest.CaptureFixture[str]) -> None:
    """The text printed the first three splits and --json all of them (an H200 split seen
    only in --json): each split --json lists now has its line, its price as --json gives it;
    the pools' launch lines stay under the first SPLITS_LAUNCHED."""
    from ridgeline.reports.plan_lists import SPLITS_LAUNCHED

    data = cli_json(capsys, *SPLITS, "--json")
    splits = data["disaggregated"]
    assert len(splits) > SPLITS_LAUNCHED
    code, out, _ = run_cli(capsys, *SPLITS)
    assert code == 0
    lines = out.splitlines()
    for row in splits:
        line = next(x for x in lines if x.startswith(f"disaggregated, {row['label']}: "))
        assert f"${row['cost_per_hour_usd']:,.2f}/h" in line
    launched = sum(x.startswith("  prefill pool, ") for x in lines)
    assert launched == SPLITS_LAUNCHED
    assert f"launch lines under the first {SPLITS_LAUNCHED} splits only" in out


FIT = ("fit", "llama-3.1-70b", "--gpu", "mi300x", "--weights", "fp8", "--kv-dtype", "fp8")


def test_fit_at_the_models_full_context_says_so_and_where_the_batch_reaches_the_ridge(
        capsys: pytest.CaptureFixture[str]) -> None:
    """"bandwidth-bound at any load" read as the card's: without --max-model-len the verdict
    is said to be the model's full context's, with the longest context whose batch reaches
    the ridge, which fit at that --max-model-len clears and one token longer does not."""
    data = cli_json(capsys, *FIT, "--json")
    ridge = data["ridge_max_model_len"]
    assert 0 < ridge < data["max_model_len"]
    code, out, _ = run_cli(capsys, *FIT)
    headline = out.splitlines()[1]  # under the "--max-model-len not given" line
    assert code == 0 and headline.startswith("fits, under the ridge") and (
        f"at any load at this full {data['max_model_len']:,}-token context; "
        f"at {ridge:,} tokens or fewer") in headline
    at, past = (cli_json(capsys, *FIT, "--max-model-len", str(n), "--json")
                for n in (ridge, ridge + 1))
    assert at["ridge_max_model_len"] is None and past["ridge_max_model_len"] is None
    code, out_at, _ = run_cli(capsys, *FIT, "--max-model-len", str(ridge))
    assert out_at.startswith("clears the ridge")
    code, out_past, _ = run_cli(capsys, *FIT, "--max-model-len", str(ridge + 1))
    assert out_past.startswith("fits, under the ridge") and out_past.splitlines()[0].endswith(
        "bandwidth-bound at any load")


@pytest.mark.usefixtures("unsimulated")  # the formats searched, split and launched
def test_plan_offers_no_fp8_on_a_tpu_whose_catalog_lists_none(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A TPU v6e (bf16 and int8 peaks only) was planned at --quantization fp8 with an fp8
    cache: the search, its splits and its launch lines now keep to bf16 there, while an A100,
    also without an fp8 peak, keeps vLLM's weight-only fp8."""
    from ridgeline.catalog import resolve_model
    from ridgeline.hardware import resolve_accelerator
    from ridgeline.search_space import search_space

    tpu, a100 = resolve_accelerator("tpu-v6e"), resolve_accelerator("a100-sxm-80gb")
    assert not tpu.has("fp8") and not a100.has("fp8")
    model = resolve_model("llama-3.1-8b")
    on_tpu = {(w, kv) for _, _, _, w, kv, _, _ in search_space(model, ["tpu-v6e"], 8)}
    on_a100 = {(w, kv) for _, _, _, w, kv, _, _ in search_space(model, ["a100-sxm-80gb"], 8)}
    assert on_tpu == {("bf16", "bf16")} and ("fp8", "fp8") in on_a100
    data = cli_json(capsys, "plan", "llama-3.1-8b", "--gpus", "tpu-v6e", "--rate", "5",
                    "--input-len", "1000", "--output-len", "200", "--slo-ttft-ms", "1000",
                    "--slo-tpot-ms", "50", "--workers", "1", "--json")
    rows = [data["winner"], *data["runners_up"], *data["disaggregated"]]
    assert data["winner"] is not None
    assert all(r["weights"] == "bf16" and r["kv_dtype"] == "bf16" for r in rows if r)
    assert "fp8" not in " ".join(data["commands"].values())
