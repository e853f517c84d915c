"""plan's note where a winner quantizes and a higher precision meets the SLO at the same price
(plan audit, 2026-12-06: fp8 weights and cache won one H100 at $2.99/h, bf16 holding there too,
with no word of it)."""

from __future__ import annotations

from dataclasses import replace

from ridgeline.candidate import Candidate
from ridgeline.catalog import resolve_model
from ridgeline.plan import plan
from ridgeline.plan_constraints import PlanConstraints
from ridgeline.plan_precision import precision_note
from ridgeline.serving_load import Load, Slo

MODEL = resolve_model("llama-3.1-8b")
SLO = Slo(0.5, 0.05, 90)


def _row(weights: str, kv: str, price: float = 2.99, verified: bool = False) -> Candidate:
    return Candidate("h100-sxm", 1, 1, weights, kv, None, 64, 0.02, 0.1, 5.0, 1, price, False,
                     "", (1.0, 1.0), verified=verified, sim_ttft_s=0.05, sim_tpot_s=0.01)


def test_an_fp8_winner_names_bf16_meeting_the_slo_at_its_price() -> None:
    result = plan(MODEL, Load(10.0, "1000", "250"), SLO, ["h100-sxm"], max_gpus=1, workers=1)
    win = result.winner
    assert win is not None and win.weights == "fp8"
    note = next(n for n in result.notes if "keeps the higher precision" in n)
    assert "--weights bf16" in note and "meet the SLO too" in note and "simulated" in note
    assert f"${win.cost_per_hour:,.2f}/h" in note


def test_a_winner_already_at_bf16_gets_no_precision_note() -> None:
    only_bf16 = PlanConstraints.parse("bf16", "bf16", None)
    result = plan(MODEL, Load(10.0, "1000", "250"), SLO, ["h100-sxm"], max_gpus=1, workers=1,
                  constraints=only_bf16)
    assert result.winner is not None and result.winner.weights == "bf16"
    assert not any("higher precision" in n for n in result.notes)


def test_the_note_takes_only_same_price_rows_keeping_more_bits() -> None:
    win = _row("fp8", "fp8", verified=True)
    dearer = _row("bf16", "bf16", price=5.98, verified=True)
    assert precision_note(win, [win, dearer], 90) == ""  # not the same price
    assert precision_note(win, [win, _row("fp8", "fp8")], 90) == ""  # no more bits
    mixed = _row("bf16", "fp8")  # more bits in the weights, the same cache
    note = precision_note(win, [win, mixed, dearer], 90)
    assert "--weights bf16" in note and "--kv-dtype" not in note and "analytic" in note
    simulated = replace(mixed, verified=True)  # a simulated one is named before analytic
    assert "simulated" in precision_note(win, [win, _row("bf16", "bf16"), simulated], 90)
    # checked, it needed a second replica: the winner won on price after all
    assert precision_note(win, [win, mixed], 90,
                          check=lambda c: replace(c, replicas=2, verified=True)) == ""


def test_the_alternative_is_labelled_in_the_engines_own_knob_names() -> None:
    """Under TensorRT-LLM the alternative's step budget is its max_num_tokens, as the plan's
    lists label the winner, not vLLM's max_num_batched_tokens; vLLM's keeps its own."""
    win = _row("fp8", "fp8", verified=True)
    alt = replace(_row("bf16", "fp8", verified=True), max_num_batched_tokens=2048)
    trtllm = precision_note(win, [win, alt], 90, engine="trtllm")
    assert alt.label_for("trtllm") in trtllm and "max_num_tokens 2048" in trtllm
    assert "max_num_batched_tokens" not in trtllm
    assert "max_num_batched_tokens 2048" in precision_note(win, [win, alt], 90)
