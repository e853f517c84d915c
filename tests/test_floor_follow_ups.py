"""The release floors' follow-ups (vllm_gpu_floors): plan says which cards, or formats of a
card, the release it sizes for refuses and leaves out (before, `plan --gpus v100,a100` dropped
the V100 without a word); page takes --engine-version as fit does (before, only the newest
release's floors); plan's launch lines name the release they were sized for; and a floor's
refusal names a release where the deployment is sized as fitting (before, fp8 weights on a T4
pointed at 0.14, where vLLM loads the 16-bit weights first and fit says DOES NOT FIT)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ridgeline.engine_versions import sized_version
from ridgeline.hardware import resolve_accelerator
from ridgeline.vllm_extensible import launch_fraction
from ridgeline.vllm_memory import vllm_accounting
from tests.conftest import refused_line, run_cli
from tests.test_modelopt_sidecar import checkpoint, sidecar

# up to 2 GPUs: what left out a card or a format, and the release a launch is sized for, are the
# same at any group size
SLO = ("--rate", "1", "--input-len", "500", "--output-len", "100", "--slo-ttft-ms", "2000",
       "--slo-tpot-ms", "100", "--workers", "1", "--max-gpus", "2")
V100 = resolve_accelerator("v100").id
# the 16-bit checkpoint quantized on load (-q fp8), which vLLM before 0.16 loads at 16 bits first
T4_FP8 = ("fit", "llama-3.1-8b", "--gpu", "t4", "-q", "fp8")


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, "plan", "llama-3.1-8b", *SLO, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def plan_text(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    code, out, err = run_cli(capsys, "plan", "llama-3.1-8b", *SLO, *argv)
    assert code == 0, err
    return out.splitlines()


@pytest.mark.usefixtures("plan_once", "unsimulated")
def test_plan_says_it_left_out_a_v100_the_newest_vllm_runs_nothing_on(
        capsys: pytest.CaptureFixture[str]) -> None:
    """One line, naming the 0.20 floor and both ways out; --json gives the same entry."""
    left = plan_json(capsys, "--gpus", "v100,a100")["left_out"]
    assert [(x["accelerator"], x["what"]) for x in left] == [(V100, "every format")]
    why = left[0]["why"]
    assert f"does not run on the {V100}" in why and "below 0.20" in why
    assert "--engine llama.cpp-cuda to fit, decode or simulate" in why
    lines = plan_text(capsys, "--gpus", "v100,a100")
    said = [line for line in lines if line.startswith("left out:")]
    assert said == [f"left out: {V100} (every format): {why}"]


@pytest.mark.usefixtures("plan_once", "unsimulated")
def test_plan_under_0_19_keeps_the_v100_and_leaves_out_only_its_fp8_cache(
        capsys: pytest.CaptureFixture[str]) -> None:
    left = plan_json(capsys, "--gpus", "v100,a100", "--engine-version", "0.19")["left_out"]
    assert [(x["accelerator"], x["what"]) for x in left] == [(V100, "KV fp8")]
    assert "keeps no fp8 KV cache" in left[0]["why"]


@pytest.mark.usefixtures("plan_once", "unsimulated")
def test_plan_on_a_t4_names_the_releases_that_keep_its_fp8_cache(
        capsys: pytest.CaptureFixture[str]) -> None:
    """plan takes no --kv-dtype: its way out is a release alone."""
    left = plan_json(capsys, "--gpus", "t4")["left_out"]
    assert [(x["accelerator"], x["what"]) for x in left] == [("t4", "KV fp8")]
    assert left[0]["why"].endswith("give an --engine-version from 0.12 and below 0.24")
    assert "--kv-dtype" not in left[0]["why"]


@pytest.mark.usefixtures("plan_once", "unsimulated")
def test_plan_prints_no_left_out_line_where_it_searched_every_card(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert plan_json(capsys, "--gpus", "a100,h100")["left_out"] == []
    assert not [line for line in plan_text(capsys, "--gpus", "a100,h100")
                if line.startswith("left out")]


@pytest.mark.usefixtures("plan_once", "unsimulated")
@pytest.mark.parametrize("version", [None, "0.19"])
def test_plans_launch_line_names_the_release_it_was_sized_for(
        capsys: pytest.CaptureFixture[str], version: str | None) -> None:
    """The newest modelled where none is named; the line's memory fraction is that
    release's default, which is why the release matters to the pool it starts."""
    flags = ("--gpus", "a100", *(("--engine-version", version) if version else ()))
    lines = plan_text(capsys, *flags)
    sized = sized_version("vllm", version)
    at = next(i for i, line in enumerate(lines) if line.startswith("run it with"))
    assert f"sized for vLLM {sized}" in lines[at]
    assert ("as --engine-version named it" in lines[at]) == (version is not None)
    fraction = launch_fraction(vllm_accounting(version), "nvidia")  # 1.0 from v0.34
    assert f"--gpu-memory-utilization {fraction} " in lines[at + 1]
    assert f"pools sized as vLLM {sized} sizes them" in lines[0]
    assert plan_json(capsys, *flags)["engine_version"] == sized


def test_page_takes_engine_version_and_draws_vllm_on_a_v100_at_0_19(
        capsys: pytest.CaptureFixture[str]) -> None:
    """With no --engine, as decode picks it: llama.cpp-cuda under the newest release, vLLM
    under 0.19, which still ships Volta kernels."""
    argv = ("page", "llama-3.1-8b", "--gpu", "v100", "--counts", "1", "--json")
    code, out, err = run_cli(capsys, *argv, "--engine-version", "0.19")
    assert code == 0, err
    page = json.loads(out)["page"]
    assert page["engine_version"] == "0.19"
    assert {c["engine"] for c in page["combos"].values()} == {"vllm"}
    assert all("keeps no fp8 KV cache" in why or "v100" in why
               for why in page["left_out"].values())
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert {c["engine"] for c in json.loads(out)["page"]["combos"].values()} \
        == {"llama.cpp-cuda"}


@pytest.mark.parametrize("version", ["b7000", "9.9", "0.x"])
def test_page_refuses_a_version_as_fit_refuses_it(
        capsys: pytest.CaptureFixture[str], version: str) -> None:
    page = refused_line(capsys, "page", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm",
                        "--engine-version", version, "--json")
    fit = refused_line(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm",
                       "--max-model-len", "8192", "--engine-version", version)
    assert page == fit


def test_page_help_names_engine_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "page", "--help")
    assert code == 0 and "--engine-version V" in out


def _named_release(line: str) -> str:
    """The first release the refusal's --engine-version way out names."""
    match = re.search(r"an --engine-version (?:from )?([0-9.]+)", line)
    assert match, line
    return match.group(1)


def test_fp8_weights_on_a_t4_are_sent_to_a_release_that_fits_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    """0.13 refuses them; 0.14 runs them but loads the 16-bit weights first (15 GiB on the
    T4's 13.3 GiB budget), so the refusal names the first release fit says fits."""
    argv = (*T4_FP8, "--max-model-len", "8192")
    line = refused_line(capsys, *argv, "--engine-version", "0.13")
    named = _named_release(line)
    assert "runs no fp8 weights on the t4" in line and named != "0.14"
    code, out, err = run_cli(capsys, *argv, "--engine-version", named)
    assert code == 0 and out.startswith("fits"), err
    code, out, err = run_cli(capsys, *argv, "--engine-version", "0.14")
    assert code == 0 and out.startswith("DOES NOT FIT") and "16-bit weights" in out, err
    # a checkpoint stored in fp8 (--weights fp8) loads at 8 bits: 0.14 fits it
    stored = (*argv[:4], "--weights", "fp8", *argv[6:])
    assert _named_release(refused_line(capsys, *stored, "--engine-version", "0.13")) == "0.14"
    code, out, err = run_cli(capsys, *stored, "--engine-version", "0.14")
    assert code == 0 and out.startswith("fits"), err


def test_a_floor_refusal_says_plainly_where_no_release_fits(
        capsys: pytest.CaptureFixture[str]) -> None:
    """At the model's 131,072-token context no release holds one sequence on a T4: the
    refusal names none, and fit at the newest says DOES NOT FIT."""
    line = refused_line(capsys, *T4_FP8, "--engine-version", "0.13")
    assert "--engine-version 0." not in line.split("; give")[1].split("fit with")[0]
    assert "is sized as fitting it under these flags either" in line
    code, out, err = run_cli(capsys, *T4_FP8)
    assert code == 0 and out.splitlines()[1].startswith("DOES NOT FIT"), err


def test_a_floor_whose_every_release_fits_keeps_its_span(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Two T4s hold the 16-bit load: 0.14 and each release after it fit."""
    line = refused_line(capsys, *T4_FP8, "--max-model-len", "8192", "--num-gpus", "2",
                        "--engine-version", "0.13")
    assert line.endswith("an --engine-version 0.14 or later")
    code, out, err = run_cli(capsys, *T4_FP8, "--max-model-len", "8192", "--num-gpus", "2",
                             "--engine-version", "0.14")
    assert code == 0 and out.startswith("fits"), err


@pytest.mark.usefixtures("unsimulated")
def test_plan_says_it_left_out_an_a100_sglang_serves_no_modelopt_fp8_export_on(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The export is plan's one weight format: the A100 is left out whole, with SGLang's
    capability refusal, which names vLLM's release that runs it there."""
    folder = str(checkpoint(tmp_path, sidecar("FP8")))
    code, out, err = run_cli(capsys, "plan", folder, "--engine", "sglang", *SLO,
                             "--gpus", "a100,h100", "--json")
    assert code == 0, err
    left = json.loads(out)["left_out"]
    acc = resolve_accelerator("a100")
    assert [(x["accelerator"], x["what"]) for x in left] == [(acc.id, "every format")]
    assert "SGLang" in left[0]["why"] and acc.id in left[0]["why"]
