"""plan as a buyer reads it: a card rented in whole units (a GB200 NVL72 rack) priced as the
units it pays for, an unpriced card's break-even a ceiling, every listed row carrying its
deployment's cautions, one line naming the cards compared, and each price with its source."""

from __future__ import annotations

import math

import pytest

import ridgeline.plan as planning
from ridgeline.catalog import resolve_model
from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.hardware import Accelerator, price_source, rented_gpus, resolve_accelerator
from ridgeline.measured_slowdown import moe_caution
from ridgeline.plan import PlanResult, calibration
from ridgeline.reports.plan import PlanReport
from ridgeline.reports.plan_lists import break_even_usd
from ridgeline.serving_load import Load, Slo
from tests.conftest import cli_json, run_cli
from tests.plan_memo import PlanMemo

MODEL = resolve_model("llama-3.1-8b")
LOAD = Load(5.0, "1000", "200")
SLO = Slo(1.0, 0.05, 90)
GPUS = ("h100", "gb200", "gaudi3", "l40s")
# one card serves it: the CLI's searches within one GPU (a GB200 rented whole all the same)
PLAN = ("plan", "llama-3.1-8b", "--rate", "5", "--input-len", "1000", "--output-len", "200",
        "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50", "--max-gpus", "1", "--workers", "1")
# this module's searches, each question once (`plan`'s among them)
PLANS = PlanMemo()


@pytest.fixture(autouse=True)
def _one_search_per_question(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planning, "plan", PLANS)


def _mixed() -> PlanResult:
    """The four cards within 8 GPUs, room for split pools, searched once; its rows left
    unsimulated (``verify=0``): its tests read the rows priced, the cards and the cautions."""
    return PLANS(MODEL, LOAD, SLO, GPUS, 8, workers=1, verify=0)


def _report(result: PlanResult) -> PlanReport:
    return PlanReport(MODEL, "meta-llama/Llama-3.1-8B", result, 131072)


def test_a_rack_scale_card_pays_for_whole_units() -> None:
    gb200 = resolve_accelerator("gb200")
    assert gb200.rental_gpus > 1  # the catalog's rack-scale rental
    assert rented_gpus(gb200, 1) == gb200.rental_gpus
    assert rented_gpus(gb200, gb200.rental_gpus + 1) == 2 * gb200.rental_gpus
    assert rented_gpus(resolve_accelerator("h100"), 5) == 5
    rows = [c for c in _mixed().candidates if c.accelerator == "gb200"]
    assert rows
    for c in rows:
        assert c.rented_gpus % gb200.rental_gpus == 0 and c.rented_gpus >= c.gpus
        assert c.cost_per_hour == pytest.approx(c.rented_gpus * (gb200.price_per_hour_usd or 0))
    # a rack for a 1-GPU load: the winner is a card rented alone
    assert _mixed().winner is not None and _mixed().winner.accelerator != "gb200"


@pytest.mark.usefixtures("unsimulated")  # the units and prices the search settles
def test_the_winner_line_says_the_units_and_spare_gpus(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    code, out, _ = run_cli(capsys, *PLAN, "--gpus", "gb200")
    assert code == 0
    data = cli_json(capsys, *PLAN, "--gpus", "gb200", "--json")
    win = data["winner"]
    unit = resolve_accelerator("gb200").rental_gpus
    assert win["rented_gpus"] == unit and win["price"]["rental_gpus"] == unit
    assert f"rented as {unit}-GPU units (1 unit, {unit - win['num_gpus']} spare)" in out
    assert win["cost_per_hour_usd"] == pytest.approx(unit * win["price_per_gpu_hour_usd"])


def test_break_even_is_a_ceiling_over_the_gpus_it_pays_for() -> None:
    result = _mixed()
    win = result.winner
    assert win is not None
    gaudi = next(c for c in result.unpriced if c.accelerator == "gaudi3")
    ceiling = break_even_usd(win, gaudi)
    assert ceiling == pytest.approx((win.cost_per_hour or 0) / gaudi.rented_gpus)
    report = _report(result)
    row = next(r for r in report.to_dict()["unpriced"] if r["accelerator"] == "gaudi3")
    assert row["break_even_price_per_gpu_hour_usd"] == pytest.approx(ceiling)
    assert row["break_even_note"].startswith("a ceiling")
    text = "\n".join(report.text_lines())
    assert f"it can win only below ${ceiling:,.2f} per GPU-hour (a ceiling" in text
    assert "it wins below" not in text


def test_every_listed_row_carries_its_calibration_caution() -> None:
    result = _mixed()
    profile = profile_for("vllm")
    outside = [c for c in (*result.candidates[1:], *result.unpriced, *result.disaggregated)
               if not calibration(profile, resolve_accelerator(c.accelerator), "vllm")[0]]
    assert any(c.accelerator == "gaudi3" for c in outside)
    for c in outside:
        note = calibration(profile, resolve_accelerator(c.accelerator), "vllm")[1]
        assert f"outside the calibrated range: {note}" in result.cautions_for(c)
    report = _report(result)
    row = next(r for r in report.to_dict()["unpriced"] if r["accelerator"] == "gaudi3")
    assert any("0 fitted rows on intel-gaudi" in text for text in row["cautions"])


def test_an_unpriced_cdna3_moe_row_carries_the_measured_caution() -> None:
    model = resolve_model("Qwen/Qwen3-30B-A3B")
    result = PLANS(model, Load(1.0, "500", "100"), Slo(2.0, 0.1, 90), ("mi325x", "l40s"), 1,
                   workers=1, data_parallel=False,  # one card of either holds it
                   verify=0)  # an unpriced row is not simulated: the search settles its caution
    row = next(c for c in result.unpriced if c.accelerator == "mi325x")
    why = moe_caution(model, row, "vllm")
    assert why and why in result.cautions_for(row)


def test_one_line_names_every_card_compared() -> None:
    result = _mixed()
    assert [k.gpu for k in result.cards] == [resolve_accelerator(g).id for g in GPUS]
    status = {k.gpu: k.status for k in result.cards}
    assert status["gaudi3"] == "unpriced" and status["h100-sxm"] == "priced"
    line = next(x for x in _report(result).text_lines() if x.startswith("cards compared: "))
    for k in result.cards:
        assert k.gpu in line
    cards = _report(result).to_dict()["cards"]
    assert [c["accelerator"] for c in cards] == [k.gpu for k in result.cards]


def test_a_card_past_max_gpus_says_how_many_it_needs() -> None:
    result = PLANS(MODEL, Load(100.0, "1000", "200"), SLO, ("l40s",), max_gpus=2, workers=1)
    l40s = result.cards[0]
    assert l40s.status == "beyond" and l40s.gpus > 2
    assert f"l40s: needs {l40s.gpus:,} GPUs, past --max-gpus" in _report(result).cards_line()


@pytest.mark.usefixtures("unsimulated")  # the units and prices the search settles
def test_prices_carry_their_source_and_date(capsys: pytest.CaptureFixture[str]) -> None:
    data = cli_json(capsys, *PLAN, "--gpus", "l40s,h200", "--json")
    by_card = {c["accelerator"]: c["price"] for c in data["cards"]}
    for gpu, price in by_card.items():
        acc = resolve_accelerator(gpu)
        assert price["price_per_gpu_hour_usd"] == acc.price_per_hour_usd
        assert price["source"] == price_source(acc)
        assert price["date"] == (acc.price_date or None)
    assert by_card["l40s"]["date"] is None  # undated: null, as every absent value
    assert by_card["h200-sxm"]["date"] == resolve_accelerator("h200").price_date != ""
    given = cli_json(capsys, *PLAN, "--gpus", "l40s", "--price", "l40s=1.5", "--json")
    assert given["winner"]["price"] == {"price_per_gpu_hour_usd": 1.5, "source": "--price",
                                        "date": None, "rental_gpus": 1}
    code, out, _ = run_cli(capsys, *PLAN, "--gpus", "l40s,h200", "--explain")  # its search
    assert code == 0
    assert f"l40s: {price_source(resolve_accelerator('l40s'))}; undated" in out


def test_a_record_s_price_date_must_be_iso() -> None:
    record = {"id": "x-card", "memory_size": 80, "memory_unit": "GiB",
              "memory_bandwidth_bytes_per_s": 3e12, "peak_flops": {"bf16": 1e15}}
    assert Accelerator.from_record({**record, "price_date": "2026-03-17"}).price_date \
        == "2026-03-17"
    with pytest.raises(InputError, match="price_date must be a date"):
        Accelerator.from_record({**record, "price_date": "17 March 2026"})
    assert Accelerator.from_record(record).rental_gpus == 1
    assert math.isfinite(Accelerator.from_record({**record, "rental_gpus": 72}).rental_gpus)
