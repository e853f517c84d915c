"""Every answer that sizes a pool names the release it was sized as, where none was given
too, by fit's one rule (engine_versions.sized_version: vLLM 0.32, SGLang 0.5.23, nothing
for TensorRT-LLM): page's and prefill's --json wrote "engine_version": null, simulate's
header named only the engine, and a split's pool commands no release beside them, where
the single pool's launch line says "sized for vLLM 0.32"."""

from __future__ import annotations

import json
from typing import cast

import pytest

from ridgeline.engine_versions import engine_name, sized_version
from tests.conftest import run_cli

ENGINES = ["vllm", "sglang", "trtllm"]


@pytest.mark.parametrize("engine", ENGINES)
def test_pages_json_names_the_release_its_pools_were_sized_as(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    code, out, err = run_cli(capsys, "page", "llama-3.1-8b", "--gpu", "h100", "--counts", "1",
                             "--engine", engine, "--json")
    assert code == 0, err
    assert json.loads(out)["page"]["engine_version"] == sized_version(engine, None)


def test_a_page_sized_as_the_newest_release_named_is_the_page_sized_unnamed(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The page prices its opening --explain at the release it names: naming it changes no
    number, only where the release was said."""
    argv = ("page", "llama-3.1-8b", "--gpu", "h100", "--counts", "1", "--json", "--explain")
    unnamed = json.loads(run_cli(capsys, *argv)[1])
    named = json.loads(run_cli(capsys, *argv, "--engine-version",
                               str(sized_version("vllm", None)))[1])
    assert unnamed == named


@pytest.mark.parametrize("engine", ENGINES)
def test_prefills_json_names_the_release_its_pool_was_sized_as(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    argv = ("prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len", "2000",
            "--engine", engine, "--json")
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert json.loads(out)["engine_version"] == sized_version(engine, None)
    if engine == "vllm":  # a release given is the one named
        assert json.loads(run_cli(capsys, *argv, "--engine-version", "0.19")[1]) \
            ["engine_version"] == "0.19"


@pytest.mark.parametrize("engine", ENGINES)
def test_simulates_header_names_the_release_its_json_sized(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    argv = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", engine, "--rate", "2",
            "--num-requests", "12", "--input-len", "300", "--output-len", "8")
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    sized = json.loads(out)["settings"]["engine_version"]
    assert sized == sized_version(engine, None)
    header = run_cli(capsys, *argv)[1].splitlines()[0]
    said = f"{engine} {sized}, weights " if sized else f"{engine}, weights "
    assert f"({said}" in header, header


@pytest.mark.parametrize(("engine", "version"), [("vllm", None), ("vllm", "0.19"),
                                                 ("sglang", None), ("trtllm", None)])
def test_a_splits_pool_commands_name_the_release_as_the_single_pools_line_does(
        engine: str, version: str | None) -> None:
    from types import SimpleNamespace

    from ridgeline.catalog import resolve_model
    from ridgeline.plan import PlanResult
    from ridgeline.reports.plan_commands import PlanCommands
    from tests.test_split_launch import LOAD, MODEL_ID, _split

    result = cast(PlanResult, SimpleNamespace(engine=engine, engine_version=version,
                                              load=LOAD))
    launch = PlanCommands(resolve_model(MODEL_ID), MODEL_ID, result, 16384)
    commands, extra = launch.pool_launch(_split())
    sized = sized_version(engine, version)
    assert commands and (launch.release_note() == "") == (sized is None)
    said = [line for line in extra if "sized for" in line]
    if sized is None:  # TensorRT-LLM: its defaults here span releases, said of none
        assert not said
    else:  # the single pool's words, the release the plan's first line names
        assert said == [f"each pool's launch line {launch.sized_for()}"]
        assert launch.release_note().startswith(launch.sized_for())
        assert launch.sized_for().endswith(f" {sized}")


@pytest.mark.parametrize("engine", ENGINES)
def test_decodes_json_names_the_release_at_the_top_as_fit_and_prefill_do(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    """decode --json had no top-level key for the release its pools were sized as; it has
    fit's and prefill's, ``engine_version``, for one card and for each of several."""
    argv = ("decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "8", "--engine", engine,
            "--json")
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    fit = json.loads(run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine", engine,
                             "--max-model-len", "8k", "--json")[1])
    prefill = json.loads(run_cli(capsys, "prefill", "llama-3.1-8b", "--gpu", "h100",
                                 "--prompt-len", "2000", "--engine", engine, "--json")[1])
    assert json.loads(out)["engine_version"] == prefill["engine_version"] \
        == fit["engine_version"]
    cards = json.loads(run_cli(capsys, *argv[:3], "h100,a100", *argv[4:])[1])["accelerators"]
    assert [c["engine_version"] for c in cards] == [sized_version(engine, None)] * 2
    if engine == "vllm":
        assert json.loads(run_cli(capsys, *argv, "--engine-version", "0.19")[1]) \
            ["engine_version"] == "0.19"


@pytest.mark.parametrize(("engine", "version"), [("vllm", None), ("vllm", "0.19"),
                                                 ("sglang", None), ("trtllm", None)])
@pytest.mark.parametrize("command", ["prefill", "decode", "decode table"])
def test_the_expected_line_names_the_release_its_json_names(
        capsys: pytest.CaptureFixture[str], command: str, engine: str,
        version: str | None) -> None:
    """prefill's and decode's "expected on vllm:" named the engine, not the release its pool
    (and prefill's step budget) was sized as, which their --json and fit's header name; the
    text spells the engine as its project does ("vLLM 0.34", "TensorRT-LLM"), --json keeps
    its id."""
    argv = [command.split()[0], "llama-3.1-8b", "--gpu", "h100", "--engine", engine,
            *(["--engine-version", version] if version else []),
            *(["--prompt-len", "2000"] if command == "prefill" else
              ["--batch", "1,8" if command == "decode table" else "8"])]
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    report = json.loads(run_cli(capsys, *argv, "--json")[1])
    sized = report["engine_version"]
    if command != "prefill":
        assert {p["expected"]["engine"] for p in report["points"]} == {engine}
    name = engine_name(engine)  # the engine as its project spells it, its id kept in --json
    said = f"expected on {name} {sized}: " if sized else f"expected on {name}: "
    assert sum(line.startswith(said) for line in out.splitlines()) == 1, out
    fit = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine", engine,
                  "--max-model-len", "8k", *(["--engine-version", version] if version else []))[1]
    assert sized is None or f" {sized}" in fit.splitlines()[1]  # fit's header names it too
