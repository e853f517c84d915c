"""Rendering: text, JSON (no infinities) and the explanation."""

from __future__ import annotations

import json

from ridgeline.explain import q, step
from ridgeline.hardware import resolve_accelerator
from ridgeline.render import render
from ridgeline.reports.hardware import hardware_record


def test_explain_lists_the_inputs_with_their_sources() -> None:
    report = hardware_record(resolve_accelerator("h100"))
    text = render(report, explain=True)
    assert "ridge point: peak FLOP/s ÷ memory bandwidth" in text
    assert "nvidia.com" in text


def test_json_explain_is_machine_readable() -> None:
    data = json.loads(render(hardware_record(resolve_accelerator("l40s")), True, True))
    assert data["explain"][0]["result"]["value"] > 400


def test_a_step_prints_one_line_per_input() -> None:
    s = step("ridge", "a ÷ b", q("ridge", 296.0), q("a", 990, "TFLOP/s", "sheet"), q("b", 3.35))
    assert s.lines() == ["ridge: a ÷ b", "    a = 990 TFLOP/s  [sheet]", "    b = 3.35",
                         "    => ridge = 296"]
