"""Where llama.cpp's --fit finds no placement (one memory: a Mac's, a GB10's, where it has
nowhere to move weights), llama-server warns and loads the model as given (common/common.cpp
ignores common_fit_params' result): every layer on the GPU, no --fit-target kept free, and
the -c --fit shrank -c 0 to before it failed. `fit`'s -c 0, its longest-context search, a
typed -ngl auto and its chart answer that run, as `fit --max-model-len L` does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.deployment import Deployment
from ridgeline.hardware import resolve_accelerator
from ridgeline.llamacpp_fit import default_fit_min_context, unplaced_context
from tests.conftest import run_cli

# mixtral-8x7b q8_0 fills an M4 Pro's 48 GiB but for 1.31 GiB: 10,730 cells on the whole card,
# 2,601 with the default 1,024 MiB left free, short of --fit-ctx's 4,096
MAC = ("mixtral-8x7b", "--weights", "q8_0", "--gpu", "apple-m4-pro-20c", "--engine",
       "llama.cpp-metal")


def _fit(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "fit", *MAC, *argv, "--json")
    assert code == 0, err
    return dict(json.loads(out))


def _unplaced(answer: dict[str, Any]) -> str:
    (said,) = [c for c in answer["cautions"] if "finds no placement" in c]
    return said


@pytest.mark.parametrize("typed", [(), ("-ngl", "auto")])
def test_c0_where_fit_finds_no_placement_runs_every_layer_at_the_fit_ctx_floor(
        capsys: pytest.CaptureFixture[str], typed: tuple[str, ...]) -> None:
    """-c 0: --fit shrinks the trained 32,768 to --fit-ctx (4,096), still short of the margin,
    and fails; llama-server keeps that -c and loads every layer. `fit` had refused it ("does
    not fit") where `fit --max-model-len 4096` answers -ngl all's conversations, as now both
    do, with the same caution."""
    dep = Deployment.build(resolve_model("mixtral-8x7b"),
                           resolve_accelerator("apple-m4-pro-20c"), engine="llama.cpp-metal")
    floor = unplaced_context(dep)
    assert floor == default_fit_min_context() < dep.model.max_position_embeddings
    c0 = _fit(capsys, *typed)
    given = _fit(capsys, "--max-model-len", str(floor))
    every = _fit(capsys, "--max-model-len", str(floor), "-ngl", "all")
    assert c0["max_model_len"] == floor
    assert c0["conversations"] == given["conversations"] == every["conversations"] >= 1
    assert c0["tokens"] == every["tokens"]  # no margin left free
    assert _unplaced(c0) == _unplaced(given)
    assert "leaves -c there" in c0["longest_context_search"]
    wider = _fit(capsys, "--fit-ctx", str(2 * floor))  # a higher floor is where -c stays
    assert wider["max_model_len"] == unplaced_context(dep, 2 * floor)


def test_longest_context_on_one_memory_is_the_longest_llama_server_loads(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--target-concurrency 1 alone: past the margin's 2,601 cells --fit finds no placement
    and llama-server loads every layer, so one conversation fits up to the whole card's cells
    (the search had stopped at the margin's); one token more fits under no flag."""
    found = _fit(capsys, "--target-concurrency", "1")
    length = found["max_model_len"]
    margin = _fit(capsys, "--max-model-len", "1024")  # --fit places it: the margin kept free
    assert not any("finds no placement" in c for c in margin["cautions"])
    assert margin["tokens"] < length == _fit(capsys, "--max-model-len", "1024",
                                             "-ngl", "all")["tokens"]
    at = _fit(capsys, "--max-model-len", str(length))
    assert found["conversations"] == at["conversations"] == 1
    assert _unplaced(found) == _unplaced(at)
    assert _fit(capsys, "--max-model-len", str(length + 1), "-ngl", "all")["conversations"] == 0


def test_fit_chart_draws_the_batch_fit_answers_at_each_context(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`fit --plot`'s pool leaves the margin --fit keeps free where the text's does, and on one
    memory past it loads every layer as llama-server does: at each context up to the trained
    one the chart draws `fit --max-model-len`'s own batch (it had drawn the whole card's,
    4 slots at 2,048 tokens where the margin holds one conversation)."""
    from ridgeline.reports.charts import CONTEXTS

    path = tmp_path / "fit.html"
    code, _out, err = run_cli(capsys, "fit", *MAC, "--max-model-len", "2048", "--plot",
                              str(path))
    assert code == 0, err
    html = path.read_text()
    payload = json.loads(html.split("const CHARTS = ", 1)[1].split(";\n", 1)[0])
    xs, batches = payload[0]["data"][:2]  # the first series: conversations of full length at once
    drawn = dict(zip(xs, batches))
    trained = resolve_model("mixtral-8x7b").max_position_embeddings
    checked = [c for c in CONTEXTS if c <= trained]
    for context in checked:
        assert drawn[float(context)] == _fit(capsys, "--max-model-len", str(context))["engine_max_batch"]
    assert drawn[2048.0] < drawn[512.0]  # the slot cap (4) no longer hides the margin


@pytest.mark.parametrize("typed", [(), ("-ngl", "auto")])
def test_simulate_runs_c0_where_fit_finds_no_placement_as_fit_answers_it(
        capsys: pytest.CaptureFixture[str], typed: tuple[str, ...]) -> None:
    """simulate with no --max-model-len (llama-server's -c 0): --fit fails at its floor and
    llama-server keeps that -c, every layer on the GPU; simulate had refused the trained
    32,768 cells (and -ngl auto typed, the placement), and now runs fit's -c with its
    caution."""
    c0 = _fit(capsys, *typed)
    code, out, err = run_cli(capsys, "simulate", *MAC, *typed, "--concurrency", "1",
                             "--num-requests", "2", "--input-len", "100", "--output-len", "10",
                             "--json")
    assert code == 0, err
    sim = json.loads(out)
    assert sim["settings"]["offload"] is None
    assert sim["settings"]["num_blocks"] == c0["max_model_len"]
    assert _unplaced(c0) in sim["cautions"]
