"""page takes its cards as --gpu, as every command but plan spells it, and under plan's
--gpus too (as plan reads --gpu): one list of candidate cards, one meaning; it had been
refused as 'a flag of `plan`, not of `page`'."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli


def test_page_reads_plans_gpus_as_its_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    base = ("page", "llama-3.1-8b", "--counts", "1", "--json")
    code, as_gpu, _ = run_cli(capsys, *base, "--gpu", "h100,l40s")
    assert code == 0
    code, as_gpus, err = run_cli(capsys, *base, "--gpus", "h100,l40s")
    assert code == 0, err
    assert json.loads(as_gpus) == json.loads(as_gpu)
    assert json.loads(as_gpu)["page"]["gpus"] == ["h100", "l40s"]


def test_page_refuses_two_different_card_lists(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "page", "--gpu", "h100", "--gpus", "a100", "--json")
    assert code == 2 and "are one flag" in err


def test_page_help_shows_one_spelling(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "page", "--help")
    assert code == 0 and "--gpu GPU" in out and "--gpus" not in out
