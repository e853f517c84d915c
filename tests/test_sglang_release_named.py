"""SGLang is priced as its newest_checked release (0.5.23) where no --engine-version is given:
fit's header named no release then, where its --json and plan name it ('sglang, weights bf16'
beside "engine_version": "0.5.23"); observe gave no word that a release past the newest read
(SGLang 0.6.0, vLLM 0.99) is sized by the newest's rules, where fit cautions so; and fit's
--explain called an SGLang fit's start-up check vLLM's."""

from __future__ import annotations

import json

import pytest

from ridgeline.cli_observe import past_read
from ridgeline.engine_versions import sized_version
from tests.conftest import run_cli

FIT = ("fit", "qwen3-8b", "--gpu", "h100", "--engine", "sglang", "--max-model-len", "8192")
METRICS = "tests/fixtures/sglang_metrics.txt"


@pytest.mark.parametrize("version", [(), ("--engine-version", "0.5.9")])
def test_fits_header_names_the_release_its_json_sized(
        capsys: pytest.CaptureFixture[str], version: tuple[str, ...]) -> None:
    code, out, err = run_cli(capsys, *FIT, *version, "--json")
    assert code == 0, err
    sized = json.loads(out)["engine_version"]
    assert sized == sized_version("sglang", version[1] if version else None)
    code, out, err = run_cli(capsys, *FIT, *version)
    assert code == 0, err
    header = out.splitlines()[1]
    assert f", sglang {sized}, weights " in header, header


@pytest.mark.parametrize(("engine", "fixture", "version"), [
    ("sglang", METRICS, "0.6.0"), ("vllm", "tests/fixtures/vllm_metrics.txt", "0.99")])
def test_observe_says_a_release_past_the_newest_read_is_sized_by_the_newests_rules(
        capsys: pytest.CaptureFixture[str], engine: str, fixture: str, version: str) -> None:
    past = past_read(engine, version)
    assert past and past_read(engine, sized_version(engine, None)) == ""
    code, out, err = run_cli(capsys, "observe", fixture, "--model", "qwen3-8b", "--gpu", "h100",
                             "--engine", engine, "--engine-version", version)
    assert code == 0, err
    assert past in out
    # the fit of the same release cautions in the same words
    code, out, err = run_cli(capsys, "fit", "qwen3-8b", "--gpu", "h100", "--engine", engine,
                             "--engine-version", version, "--max-model-len", "8192")
    assert code == 0 and past in out + err


def test_an_sglang_fits_levers_do_not_name_vllms_check(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *FIT, "--explain")
    assert code == 0, err
    levers = next(line for line in out.splitlines() if line.strip().startswith("levers:"))
    assert "vLLM" not in levers
