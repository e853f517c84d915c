"""--engine-version read alike for every engine: a release's leading v dropped in what is kept
and printed (vLLM's label already dropped it; SGLang's echoed 'v0.11.0'), a llama.cpp build or
a word that is no release refused in one line of one shape whichever engine is named (SGLang's
CUDA-graph sizes read the version before the kind was checked, and said "not a version: 'b1'"
where vLLM said "a llama.cpp build"), and a vLLM release older than the oldest accounting era
in engines.json refused naming that era, as SGLang's is."""

from __future__ import annotations

import json

import pytest

from ridgeline.engine_versions import check_engine_version
from ridgeline.errors import InputError
from ridgeline.vllm_memory import parse_version, vllm_data
from tests.conftest import run_cli

FIT = ("fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192")
DECODE = ("decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "1", "--context", "4096")
NAMES = {"vllm": "vLLM", "sglang": "SGLang"}
# a model every release modelled loads (Llama 3.1's rope_scaling came in vLLM 0.5.3.post1)
OLD_FIT = ("fit", "llama-2-7b", "--gpu", "h100", "--max-model-len", "4096")


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_releases_leading_v_is_dropped_for_every_engine(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    code, plain, _ = run_cli(capsys, *OLD_FIT, "--engine", engine, "--engine-version", "0.5.2")
    assert code == 0
    code, with_v, _ = run_cli(capsys, *OLD_FIT, "--engine", engine, "--engine-version", " v0.5.2")
    assert code == 0 and with_v == plain
    code, out, _ = run_cli(capsys, *OLD_FIT, "--engine", engine, "--engine-version", "v0.5.2",
                           "--json")
    assert code == 0 and json.loads(out)["engine_version"] == "0.5.2"
    assert "v0.5.2" not in with_v


def test_release_text_keeps_a_build_and_what_names_the_v0_engine() -> None:
    from ridgeline.engine_versions import release_text

    assert release_text("b9400") == "b9400"
    assert release_text("v0.9.2 V0") == "0.9.2 V0"
    assert release_text("V1") == "V1"  # no release to strip: refused later as no version


@pytest.mark.parametrize("argv", [FIT, DECODE])
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize(("version", "said"), [
    ("b1", "--engine-version b1: a llama.cpp build, not a version of {}"),
    ("junk", "--engine-version junk: not a version of {}")])
def test_a_version_that_is_no_release_is_refused_alike_for_vllm_and_sglang(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], engine: str, version: str,
        said: str) -> None:
    code, out, err = run_cli(capsys, *argv, "--engine", engine, "--engine-version", version)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert said.format(NAMES[engine]) in err


def test_a_vllm_release_before_the_oldest_accounting_era_is_refused_naming_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """engines.json's first vLLM memory era is the oldest release modelled: one before it is
    refused naming it (as SGLang's names 0.3), and that era's own release is priced."""
    oldest = str(vllm_data()["memory_versions"][0]["from"])
    major, minor, _ = parse_version(oldest)
    before = f"{major}.{minor - 1}.9" if minor else f"{major - 1}.9"
    with pytest.raises(InputError, match=f"read from {oldest} on"):
        check_engine_version("vllm", before)
    code, out, err = run_cli(capsys, *OLD_FIT, "--engine-version", before)
    assert code == 2 and f"vLLM {before} is older than any version ridgeline models" in err
    code, out, _ = run_cli(capsys, *OLD_FIT, "--engine-version", oldest)
    assert code == 0 and f"vLLM {oldest}" in out


# -- TensorRT-LLM: the releases whose defaults are modelled (engines.json trtllm.releases) --
TRT_FIT = (*FIT, "--engine", "trtllm")


def _trt_releases() -> dict[str, str]:
    from ridgeline.datafiles import engine_defaults

    return dict(engine_defaults("trtllm")["releases"])


@pytest.mark.parametrize("version", ["1.0.0rc6", "1.1.0", "v1.2.0rc6", "1.2"])
def test_a_modelled_tensorrt_llm_release_is_taken_and_named_in_the_header(
        capsys: pytest.CaptureFixture[str], version: str) -> None:
    """A recipe's pinned release pastes (it was refused: 'trtllm has none'); its defaults are
    the ones priced without it, so only the header, naming the release, differs."""
    code, out, err = run_cli(capsys, *TRT_FIT, "--engine-version", version)
    assert code == 0, err
    named = version.lstrip("v")
    assert f"trtllm {named}," in out
    code, plain, _ = run_cli(capsys, *TRT_FIT)
    assert code == 0 and out.replace(f"trtllm {named},", "trtllm,") == plain
    code, out, _ = run_cli(capsys, *TRT_FIT, "--engine-version", version, "--json")
    assert code == 0 and json.loads(out)["engine_version"] == named


def test_a_tensorrt_llm_release_outside_the_modelled_ones_is_refused_with_the_range(
        capsys: pytest.CaptureFixture[str]) -> None:
    releases = _trt_releases()
    major, minor, _ = parse_version(releases["from"])
    early = f"{major - 1}.21.0" if not minor else f"{major}.{minor - 1}.0"
    major, minor, _ = parse_version(releases["until"])
    late = f"{major}.{minor}.0rc5"
    span = f"TensorRT-LLM {releases['from']} to {releases['newest']}"
    for version, why in ((early, "prebuilt TensorRT engine"), (late, "kv_cache_config")):
        with pytest.raises(InputError, match=span):
            check_engine_version("trtllm", version)
        code, out, err = run_cli(capsys, *TRT_FIT, "--engine-version", version)
        assert code == 2 and not out and len(err.strip().splitlines()) == 1
        assert span in err and why in err
    code, out, err = run_cli(capsys, *TRT_FIT, "--engine-version", "b5000")
    assert code == 2 and "a llama.cpp build, not a version of TensorRT-LLM" in err
