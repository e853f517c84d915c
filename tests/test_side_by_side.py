"""Side-by-side comparisons keep the entries that run: an engine or card that cannot run is
marked under the table, with the error its own run gives, and only a comparison where none
runs fails."""

from __future__ import annotations

import json

import pytest

from ridgeline.errors import InputError
from ridgeline.side_by_side import NotRun, run_each
from tests.conftest import run_cli

MAC = "apple-m2-max-38c"  # vLLM has no Metal backend: under --engine vllm a Mac cannot run


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
      "--context", "1000", "--engine", "vllm"],
     ["decode", "llama-3.1-8b", "--gpu", "h100,mi300x", "--batch", "1", "--context", "1000",
      "--engine", "vllm"],
     ["decode", "llama-3.1-8b", "--gpu", MAC, "--batch", "1", "--context", "1000",
      "--engine", "vllm"]),
    (["prefill", "llama-3.1-8b", "--gpu", f"h100,{MAC},mi300x", "--prompt-len", "1000,8000",
      "--engine", "vllm"],
     ["prefill", "llama-3.1-8b", "--gpu", "h100,mi300x", "--prompt-len", "1000,8000",
      "--engine", "vllm"],
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
                             "--batch", "1", "--engine", "vllm", "--json")
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


def _alone_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    data: dict[str, object] = json.loads(out)
    return data


CARD_KEYS = ("accelerator", "engine", "price_per_gpu_hour_usd", "ridge_flop_per_byte",
             "first_whole_batch_to_ridge")


def _without_card(entry: dict[str, object]) -> dict[str, object]:
    """A card's entry less what names the card (a comparison's row adds them; fit's own JSON
    has them too)."""
    # ridgeline_version and notes stamp the whole answer, not a card's row
    return {k: v for k, v in entry.items()
            if k not in CARD_KEYS and k not in ("ridgeline_version", "notes")}


# the same question on a Mac and an H100, with no --engine named
PER_CARD = [
    ["decode", "llama-3.1-8b", "--batch", "1,8", "--context", "1000"],
    ["prefill", "llama-3.1-8b", "--prompt-len", "1000"],
    ["fit", "llama-3.1-8b", "--max-model-len", "8k"],
]


@pytest.mark.parametrize("question", PER_CARD, ids=["decode", "prefill", "fit"])
@pytest.mark.parametrize("cards", [f"{MAC},h100", f"h100,{MAC}"], ids=["mac-first", "h100-first"])
def test_with_no_engine_named_each_card_runs_its_own_default_engine(
        capsys: pytest.CaptureFixture[str], question: list[str], cards: str) -> None:
    """Whichever card is named first, the Mac runs llama.cpp-metal and the H100 vllm, each
    exactly as its own run gives it: the first card's engine is not forced on the other."""
    data = _alone_json(capsys, *question, "--gpu", cards)
    assert "not_run" not in data
    rows = data["accelerators"]
    assert isinstance(rows, list)
    by_card = {row["accelerator"]: row for row in rows}
    for card, name in ((MAC, MAC), ("h100-sxm", "h100")):
        alone = _alone_json(capsys, *question, "--gpu", name)
        assert _without_card(by_card[card]) == _without_card(alone)
    assert by_card[MAC]["engine"] == "llama.cpp-metal"
    assert by_card["h100-sxm"]["engine"] == "vllm"


def test_each_row_names_its_engine_where_the_cards_run_different_ones(
        capsys: pytest.CaptureFixture[str]) -> None:
    question = ["decode", "llama-3.1-8b", "--batch", "1", "--gpu"]
    code, out, err = run_cli(capsys, *question, f"{MAC},h100")
    assert code == 0, err
    header = next(line for line in out.splitlines() if line.startswith("accelerator"))
    assert header.split()[:2] == ["accelerator", "engine"]
    row = {line.split()[2]: line.split()[3] for line in out.splitlines()
           if line.startswith("1 x ")}
    assert row == {MAC: "llama.cpp-metal", "h100-sxm": "vllm"}
    # one engine on every card: no engine column, the header names it once
    code, out, err = run_cli(capsys, *question, "h100,a100")
    assert code == 0, err
    assert "engine" not in next(line for line in out.splitlines()
                                if line.startswith("accelerator")).split()


def test_fit_without_a_context_asks_for_one_where_any_card_defaults_to_llamacpp(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp's context is -c, not derived from the config: with the Mac on llama.cpp-metal
    beside an H100, fit asks for --max-model-len as the Mac's own run on a build before --fit
    does, in either order (llama-server's -c 0 under --fit is one deployment's)."""
    why = _alone_error(capsys, "fit", "llama-3.1-8b", "--gpu", MAC, "--engine-version", "b7000")
    for cards in (f"h100,{MAC}", f"{MAC},h100"):
        assert _alone_error(capsys, "fit", "llama-3.1-8b", "--gpu", cards) == why


def test_a_named_engine_still_runs_on_every_card_or_marks_the_one_that_cannot(
        capsys: pytest.CaptureFixture[str]) -> None:
    why = _alone_error(capsys, "decode", "llama-3.1-8b", "--gpu", "h100",
                       "--engine", "llama.cpp-metal")
    data = _alone_json(capsys, "decode", "llama-3.1-8b", "--gpu", f"{MAC},h100",
                       "--engine", "llama.cpp-metal")
    rows = data["accelerators"]
    assert isinstance(rows, list)
    assert [(a["accelerator"], a["engine"]) for a in rows] == [(MAC, "llama.cpp-metal")]
    assert data["not_run"] == [{"accelerator": "h100-sxm", "error": why}]


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
