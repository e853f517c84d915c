"""Side-by-side comparisons keep the entries that run: an engine or card that cannot run is
marked under the table, with the error its own run gives, and only a comparison where none
runs fails."""

from __future__ import annotations

import json

import pytest

from ridgeline.errors import InputError
from ridgeline.side_by_side import NotRun, run_each
from tests.conftest import run_cli

MAC = "apple-m2-max-38c"  # vLLM, the default engine on an H100, has no Metal backend


def _alone_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one-line error a run of this entry alone gives (exit 2)."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out
    return err.strip().removeprefix("ridgeline: error: ")


# (the comparison, the same with the refused entry left out, that entry's own run)
COMPARISONS = [
    (["fit", "deepseek-r1", "--gpu", "mi300x", "--num-gpus", "8", "--max-model-len", "32k",
      "--engine", "vllm,sglang,trtllm"],
     ["fit", "deepseek-r1", "--gpu", "mi300x", "--num-gpus", "8", "--max-model-len", "32k",
      "--engine", "vllm,sglang"],
     ["fit", "deepseek-r1", "--gpu", "mi300x", "--num-gpus", "8", "--max-model-len", "32k",
      "--engine", "trtllm"]),
    (["fit", "llama-3.1-8b", "--gpu", f"h100,{MAC},mi300x", "--max-model-len", "8k",
      "--engine", "vllm"],
     ["fit", "llama-3.1-8b", "--gpu", "h100,mi300x", "--max-model-len", "8k",
      "--engine", "vllm"],
     ["fit", "llama-3.1-8b", "--gpu", MAC, "--max-model-len", "8k", "--engine", "vllm"]),
    (["decode", "llama-3.1-8b", "--gpu", f"h100,mi300x,{MAC}", "--batch", "1",
      "--context", "1000"],
     ["decode", "llama-3.1-8b", "--gpu", "h100,mi300x", "--batch", "1", "--context", "1000"],
     ["decode", "llama-3.1-8b", "--gpu", MAC, "--batch", "1", "--context", "1000",
      "--engine", "vllm"]),
    (["prefill", "llama-3.1-8b", "--gpu", f"h100,{MAC},mi300x", "--prompt-len", "1000,8000"],
     ["prefill", "llama-3.1-8b", "--gpu", "h100,mi300x", "--prompt-len", "1000,8000"],
     ["prefill", "llama-3.1-8b", "--gpu", MAC, "--prompt-len", "1000,8000",
      "--engine", "vllm"]),
    # a Mac is one GPU: two of them are refused, two H100s are not
    (["roofline", "--model", "llama-3.1-8b", "--gpu", f"h100,{MAC},a100", "--num-gpus", "2"],
     ["roofline", "--model", "llama-3.1-8b", "--gpu", "h100,a100", "--num-gpus", "2"],
     ["decode", "llama-3.1-8b", "--gpu", MAC, "--num-gpus", "2"]),
]


@pytest.mark.parametrize(("both", "running", "alone"), COMPARISONS,
                         ids=["fit-engines", "fit-cards", "decode", "prefill", "roofline"])
def test_a_comparison_keeps_the_rows_that_run_and_marks_the_one_that_cannot(
        capsys: pytest.CaptureFixture[str], both: list[str], running: list[str],
        alone: list[str]) -> None:
    why = _alone_error(capsys, *alone)
    code, out, err = run_cli(capsys, *both)
    assert code == 0, err
    lines = out.splitlines()
    assert why in lines  # marked, in the words its own run gives
    code, ran, err = run_cli(capsys, *running)
    assert code == 0, err
    # the rows that ran are the comparison's without the refused entry, unchanged
    assert [line for line in lines if line != why] == ran.splitlines()


def test_the_marked_line_names_the_entry_where_its_error_does_not(
        capsys: pytest.CaptureFixture[str]) -> None:
    # TensorRT-LLM's fp8 KV cache needs Ada or newer: its error names the card, not 'trtllm'
    args = ["fit", "llama-3.1-8b", "--max-model-len", "8k", "--kv-dtype", "fp8"]
    why = _alone_error(capsys, *args, "--gpu", "a100", "--engine", "trtllm")
    assert "trtllm" not in why
    code, out, err = run_cli(capsys, *args, "--gpu", "a100", "--engine", "vllm,trtllm")
    assert code == 0, err
    assert f"trtllm: {why}" in out.splitlines()
    assert NotRun("sglang", "sglang has no x").line == "sglang has no x"


def test_json_lists_what_ran_and_what_did_not(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", f"h100,{MAC},mi300x",
                             "--batch", "1", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [a["accelerator"] for a in data["accelerators"]] == ["h100-sxm", "mi300x"]
    why = _alone_error(capsys, "decode", "llama-3.1-8b", "--gpu", MAC, "--engine", "vllm")
    assert data["not_run"] == [{"accelerator": MAC, "error": why}]
    code, out, _ = run_cli(capsys, "fit", "deepseek-r1", "--gpu", "mi300x", "--num-gpus", "8",
                           "--max-model-len", "32k", "--engine", "vllm,sglang,trtllm", "--json")
    data = json.loads(out)
    assert [e["engine"] for e in data["engines"]] == ["vllm", "sglang"]
    assert [e["engine"] for e in data["not_run"]] == ["trtllm"]
    # where every entry runs, the JSON has no not_run key at all
    code, out, _ = run_cli(capsys, "roofline", "--gpu", "h100,a100", "--json")
    assert code == 0 and "not_run" not in json.loads(out)


def test_where_no_entry_runs_the_first_entrys_error_stands(
        capsys: pytest.CaptureFixture[str]) -> None:
    first = _alone_error(capsys, "decode", "llama-3.1-8b", "--gpu", MAC, "--engine", "trtllm")
    code, out, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", f"{MAC},mi300x",
                             "--engine", "trtllm")
    assert (code, out) == (2, "")
    assert err.strip() == f"ridgeline: error: {first}"
    code, out, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "mi300x",
                             "--max-model-len", "8k", "--engine", "trtllm,llama.cpp-metal")
    assert (code, out) == (2, "")
    assert err.strip() == "ridgeline: error: " + _alone_error(
        capsys, "fit", "llama-3.1-8b", "--gpu", "mi300x", "--max-model-len", "8k",
        "--engine", "trtllm")


def test_run_each_keeps_order_and_raises_the_first_refusal() -> None:
    def run(name: str) -> str:
        if name.startswith("x"):
            raise InputError(f"{name} refused")
        return name.upper()

    assert run_each(["a", "x1", "b", "x2"], run) == (
        ["A", "B"], (NotRun("x1", "x1 refused"), NotRun("x2", "x2 refused")))
    with pytest.raises(InputError, match=r"^x1 refused$"):
        run_each(["x1", "x2"], run)
    with pytest.raises(ZeroDivisionError):  # a bug is not a refusal: it is not set aside
        run_each(["a"], lambda name: 1 // 0)


def test_an_entry_is_named_unless_its_error_names_it_as_a_whole_word() -> None:
    """'l4' inside 'l40s' does not name the L4: its line leads with its own name."""
    from ridgeline.side_by_side import NotRun

    assert NotRun("l4", "fp8 KV is not supported on l40s").line.startswith("l4: ")
    assert NotRun("a10", "a100 refuses it").line == "a10: a100 refuses it"
    named = "trtllm does not run on mi300x (amd); try --engine vllm"
    assert NotRun("trtllm", named).line == named
