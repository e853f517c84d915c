"""The search for a deployment without the CDNA3 MoE caution (``measured_slowdown``) checks
its alternatives in the order ``verify_cheapest`` does (``plan_checks.likeliest``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

import ridgeline.measured_slowdown as measured_slowdown
from ridgeline.candidate import Candidate, weight_choices
from ridgeline.catalog import resolve_model
from ridgeline.serving_load import Load, Slo

GPT_OSS = resolve_model("gpt-oss-120b")  # MXFP4 experts: cautioned on an MI300X


def _sized(accelerator: str, tp: int, seqs: int | None, replicas: int) -> Candidate:
    """A gpt-oss-120b candidate of ``tp`` GPUs a replica as the search leaves it, as stored,
    ``replicas`` of them (the analytic count), at $1 a GPU-hour."""
    return Candidate(accelerator, tp, 1, weight_choices(GPT_OSS)[0], "bf16", seqs, 64, 0.02,
                     0.1, 1.0, replicas, 1.0, True, "", (0.8, 1.2))


def test_the_alternatives_budget_goes_first_to_a_layout_its_checks_have_not_priced_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An MI300X (cautioned) is cheapest. Without the caution: three H100 TP4 variants
    (max_num_seqs) at 3 replicas, 12 GPUs, each needing 6 in simulation, and TP8 at 2
    replicas, 16 GPUs, holding at 2. Checked cheapest first, the three checks went to the
    TP4 variants and the winner cost 24 GPUs; once the first TP4 check has doubled its
    layout's count, TP8 goes next and wins at 16 GPUs."""
    amd = replace(_sized("mi300x", 1, None, 4), verified=True, analytic_replicas=4)
    tp4 = [_sized("h100-sxm", 4, seqs, 3) for seqs in (None, 64, 128)]
    tp8 = _sized("h100-sxm", 8, None, 2)
    assert measured_slowdown.moe_caution(GPT_OSS, amd, "vllm")
    assert not any(measured_slowdown.moe_caution(GPT_OSS, c, "vllm") for c in (*tp4, tp8))
    needs = {4: 6, 8: 2}  # the replicas each layout holds at in simulation
    checked: list[Candidate] = []

    def simulated(model: object, c: Candidate, *args: Any, **kwargs: Any) -> Candidate:
        checked.append(c)
        runs = args[-1]
        if runs is not None:  # it ran the simulator: one more of the runs
            runs[(len(runs),) * 5] = None
        return replace(c, replicas=needs[c.tp], verified=True, analytic_replicas=c.replicas)

    monkeypatch.setattr(measured_slowdown, "verify", simulated)
    text, ranked = measured_slowdown.measured_slowdown(
        GPT_OSS, (amd, *tp4, tp8), Load(1.0, "1000", "250"), Slo(0.5, 0.03), 64, None,
        "vllm", None)
    assert checked[:2] == [tp4[0], tp8]
    assert len(checked) == measured_slowdown.UNCAUTIONED_CHECKS
    win = ranked[0]
    assert (win.tp, win.gpus, win.verified) == (8, 16, True)
    assert "ranked first" in text and f"= {win.gpus} GPUs" in text
    # the cheapest held one wins, whichever the budget reached: the search named the
    # cheapest of those it checked
    held = [c for c in ranked if c.verified and not measured_slowdown.moe_caution(
        GPT_OSS, c, "vllm")]
    assert min(c.cost_per_hour or 0.0 for c in held) == win.cost_per_hour
