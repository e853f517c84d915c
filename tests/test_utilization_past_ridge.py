"""`utilization` past the ridge: the share it prints stops at 100 %, so --explain writes the
min(1, …) the code applies, and the text and --json say how far past the ridge the weight
matmuls are (compute-bound there) rather than read as a batch exactly at it."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import run_cli


def _explained(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, "utilization", *argv, "--json", "--explain")
    assert code == 0, err
    return json.loads(out)


def _step(report: dict, label: str) -> dict:
    return next(s for s in report["explain"] if s["label"].startswith(label))


def _value(step: dict, name: str) -> float:
    return next(i["value"] for i in step["inputs"] if i["name"] == name)


def test_explains_share_formula_gives_the_printed_share_past_the_ridge(
        capsys: pytest.CaptureFixture[str]) -> None:
    """1,000 running at bf16 on an H100: (2 × 1,000 ÷ 2) ÷ 295.3 = 3.39, which the share
    caps at 1; the formula says so, and redone from its inputs it gives the result."""
    report = _explained(capsys, "--gpu", "h100", "--running", "1000")
    share = _step(report, "the weight matrices' share")
    assert share["formula"].startswith("min(1, ")
    redone = min(1.0, 2 * _value(share, "running") / _value(share, "bytes per weight")
                 / _value(share, "ridge"))
    assert share["result"]["value"] == pytest.approx(redone) == report["fraction_of_arithmetic"]
    times = _step(report, "times the ridge")
    uncapped = 2 * _value(times, "batch") / _value(times, "bytes per weight") \
        / _value(times, "ridge")
    assert times["result"]["value"] == pytest.approx(uncapped) == report["times_ridge"] > 3
    assert report["past_ridge"] is True


def test_the_headline_says_past_the_ridge_and_how_far(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "utilization", "--gpu", "h100", "--running", "1000")
    head = out.splitlines()[0]
    code, js, _ = run_cli(capsys, "utilization", "--gpu", "h100", "--running", "1000", "--json")
    report = json.loads(js)
    found = re.search(r"is past the ridge batch of ([\d,]+) .*?, ([\d.]+)× the ridge: the "
                      r"weight matmuls are compute-bound", head)
    assert code == 0 and found, head
    assert int(found.group(1).replace(",", "")) == report["first_whole_batch_to_ridge"]
    assert float(found.group(2)) == pytest.approx(report["times_ridge"], abs=0.005)


def test_a_batch_under_the_ridge_reads_as_before_with_no_times_step(
        capsys: pytest.CaptureFixture[str]) -> None:
    """8 running: under the ridge, the share is the plain ratio, no "past", no extra step."""
    report = _explained(capsys, "--gpu", "h100", "--running", "8")
    assert report["past_ridge"] is False and report["times_ridge"] < 1
    assert report["fraction_of_arithmetic"] == pytest.approx(report["times_ridge"])
    assert not [s for s in report["explain"] if s["label"] == "times the ridge"]
    code, out, _ = run_cli(capsys, "utilization", "--gpu", "h100", "--running", "8")
    assert code == 0 and "against a ridge batch" in out.splitlines()[0] and "past" not in out
