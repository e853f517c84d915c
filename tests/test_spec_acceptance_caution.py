"""Speculative decoding's acceptance, where --spec-acceptance is not given, is an assumption
simulate says it makes; an n-gram drafter on synthetic random prompts, which repeat nothing,
is told it would accept about none (reports/simulate_cautions.spec_acceptance_caution)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import run_cli

RUN = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--num-requests", "30",
       "--spec-tokens", "4", "--json")


def _report(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    return dict(json.loads(out))


def _said(report: dict[str, Any]) -> list[str]:
    return [c for c in report["cautions"] if "acceptance" in c and "assumed" in c]


def test_ngram_on_random_prompts_is_told_it_accepts_about_none(
        capsys: pytest.CaptureFixture[str]) -> None:
    said = _said(_report(capsys, *RUN, "--spec-method", "ngram"))
    assert len(said) == 1 and "repeat nothing" in said[0] and "about none" in said[0]
    assert not _said(_report(capsys, *RUN, "--spec-method", "ngram", "--spec-acceptance", "0.3"))


def test_an_eagle_drafters_default_acceptance_is_said_to_be_assumed(
        capsys: pytest.CaptureFixture[str]) -> None:
    report = _report(capsys, *RUN)
    said = _said(report)
    assert len(said) == 1 and f"{report['settings']['spec_acceptance']:g}" in said[0]
    assert "repeat nothing" not in said[0]


def test_the_acceptance_the_caution_points_to_reads_the_plain_engines_tpot(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--spec-acceptance 0, what the caution says random prompts earn: no faster than without
    speculative decoding (the 2.8× cut the default 0.7 printed is gone)."""
    plain = _report(capsys, *RUN[:-3], "--json")["tpot_s"]["p50"]
    none = _report(capsys, *RUN, "--spec-method", "ngram", "--spec-acceptance", "0")
    assumed = _report(capsys, *RUN, "--spec-method", "ngram")
    assert none["tpot_s"]["p50"] >= 0.95 * plain > 2 * assumed["tpot_s"]["p50"]


def test_decode_says_its_speculative_figures_rest_on_an_assumed_acceptance(
        capsys: pytest.CaptureFixture[str]) -> None:
    """decode prices the same drafter at the same 0.7 (its speculative tok/s rest on it): it
    says so where --spec-acceptance is not given, and not where it is; an n-gram drafter is
    told its acceptance is the traffic's, on every card of a comparison once."""
    argv = ("decode", "llama-3.1-8b", "--batch", "1", "--context", "2000", "--spec-tokens", "3",
            "--json")
    assumed = _said(_report(capsys, *argv, "--gpu", "h100"))
    assert len(assumed) == 1 and "the eagle drafter's depends on the model" in assumed[0]
    assert _said(_report(capsys, *argv, "--gpu", "h100", "--spec-acceptance", "0.6")) == []
    code, text, _ = run_cli(capsys, *argv[:-1], "--gpu", "h100,a100", "--spec-method", "ngram")
    lines = [line for line in text.splitlines() if "acceptance, 0.7 a draft token" in line]
    assert code == 0 and len(lines) == 1 and "the traffic's, not the drafter's" in lines[0]
