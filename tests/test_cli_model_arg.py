"""MODEL one way for every command (cli_model_arg): first or as --model, wherever the
command's own spelling is the other; given twice, refused where the two differ."""

from __future__ import annotations

import json

import pytest

from tests.conftest import refused_line, run_cli


def _same(capsys: pytest.CaptureFixture[str], one: list[str], other: list[str]) -> None:
    """Both command lines answer, with the same --json."""
    code, out, err = run_cli(capsys, *one, "--json")
    assert code == 0, err
    code, again, err = run_cli(capsys, *other, "--json")
    assert code == 0, err
    assert json.loads(out) == json.loads(again)


@pytest.mark.parametrize(("command", "rest"), [
    ("roofline", ["--gpu", "h100", "--batch", "8"]),
    ("utilization", ["--gpu", "h100", "--running", "8"])])
def test_a_command_whose_model_is_a_flag_takes_it_first_too(
        capsys: pytest.CaptureFixture[str], command: str, rest: list[str]) -> None:
    """`roofline qwen3-32b --gpu h100` was refused ("roofline takes the model as --model"),
    while fit, decode and plan take MODEL first: it now reads as --model."""
    _same(capsys, [command, "qwen3-32b", *rest], [command, "--model", "qwen3-32b", *rest])
    _same(capsys, [command, "qwen3-32b", "--model", "qwen3-32b", *rest],
          [command, "--model", "qwen3-32b", *rest])


@pytest.mark.parametrize(("command", "rest"), [
    ("kv", ["--gpu", "h100", "--context", "4k"]),
    ("moe", ["--batch", "1,8"]),
    ("model", [])])
def test_a_command_that_takes_model_first_takes_it_as_model_too(
        capsys: pytest.CaptureFixture[str], command: str, rest: list[str]) -> None:
    """`moe --model qwen3-30b-a3b` and `kv --model …` were refused ("--model is a flag of
    `roofline`, …, not of `moe`"): they now read it as MODEL, once where both name it."""
    model = "qwen3-30b-a3b"
    _same(capsys, [command, model, *rest], [command, "--model", model, *rest])
    _same(capsys, [command, model, *rest], [command, model, "--model", model, *rest])


@pytest.mark.parametrize("argv", [
    ["roofline", "qwen3-32b", "--gpu", "h100", "--model", "llama-3.1-8b"],
    ["kv", "qwen3-32b", "--model", "llama-3.1-8b", "--gpu", "h100", "--context", "4k"]])
def test_two_models_that_differ_are_refused_in_a_line_naming_both(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    said = refused_line(capsys, *argv)
    assert "the model is given twice" in said and "qwen3-32b" in said \
        and "llama-3.1-8b" in said and "give it once" in said
