"""decode and prefill take --engine-version as fit does: the release's (or build's) rules size
the pool they report, refuse what that release cannot run, and a bad version is fit's own
one-line error."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import max_batch
from ridgeline.cpu_offload import CpuOffload, runner_problem
from ridgeline.datafiles import engine_defaults
from ridgeline.llamacpp_fit import fit_default_since_build
from ridgeline.memory import EngineSettings
from ridgeline.sglang_memory import sglang_data
from ridgeline.units import GIB
from ridgeline.vllm_memory import vllm_accounting, vllm_data
from tests.conftest import run_cli

MODEL, GPU, CONTEXT = "llama-3.1-8b", "h100", 8000
SIZED = ("--gpu", GPU, "--max-model-len", str(CONTEXT))


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    loaded: dict = json.loads(out)
    return loaded


def _library_batch(engine: str, version: str | None) -> int:
    dep = Deployment.build(resolve_model(MODEL), resolve_accelerator(GPU), engine=engine)
    return max_batch(dep, CONTEXT, EngineSettings(max_model_len=CONTEXT, engine_version=version))


@pytest.mark.parametrize(("engine", "version"), [
    ("vllm", "0.10"), ("vllm", "0.8.5 V0"), ("vllm", "0.24"), ("sglang", "0.4.0")])
def test_decode_and_prefill_size_the_pool_fit_sizes_at_a_version(
        capsys: pytest.CaptureFixture[str], engine: str, version: str) -> None:
    asked = ("--engine", engine, "--engine-version", version)
    fit = _json(capsys, "fit", MODEL, *SIZED, *asked)
    decode = _json(capsys, "decode", MODEL, *SIZED, "--context", str(CONTEXT), *asked)
    prefill = _json(capsys, "prefill", MODEL, *SIZED, "--prompt-len", str(CONTEXT), *asked)
    expected = _library_batch(engine, version)
    assert fit["engine_max_batch"] == expected
    assert decode["engine_max_batch"][0]["engine_max_batch"] == expected
    assert prefill["engine_max_batch"] == expected


def test_an_older_vllm_sizes_decodes_pool_by_its_own_rule(
        capsys: pytest.CaptureFixture[str]) -> None:
    # vLLM 0.10 reserves another gpu_memory_utilization of the card than the newest
    assert vllm_accounting("0.10").gpu_memory_utilization \
        != vllm_accounting(None).gpu_memory_utilization
    old = _json(capsys, "decode", MODEL, *SIZED, "--context", str(CONTEXT),
                "--engine-version", "0.10")["engine_max_batch"][0]
    new = _json(capsys, "decode", MODEL, *SIZED, "--context", str(CONTEXT))["engine_max_batch"][0]
    assert old["engine_max_batch"] == _library_batch("vllm", "0.10")
    assert new["engine_max_batch"] == _library_batch("vllm", None)
    assert old["engine_max_batch"] != new["engine_max_batch"]
    assert "as vLLM 0.10 sizes it" in old["settings"] and "vLLM" not in new["settings"]


def test_decode_text_names_the_release_and_hints_fit_with_the_same_settings(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "decode", MODEL, "--gpu", GPU, "--context", str(CONTEXT),
                           "--engine-version", "0.10")
    assert code == 0
    assert "vLLM's KV pool (vllm serve's defaults, as vLLM 0.10 sizes it)" in out
    assert "`ridgeline fit` with the same settings" in out


@pytest.mark.parametrize(("engine", "version"), [
    ("vllm", "abc"), ("vllm", "9.9"), ("vllm", "b9400"), ("vllm", "0.12 V0"),
    ("vllm", "0.5 V1"), ("sglang", "0.2.9"), ("sglang", "9.9"), ("trtllm", "0.12"),
    ("llama.cpp-cuda", "0.12"), ("llama.cpp-cuda", "b0")])
def test_a_bad_version_is_fits_one_line_error(
        capsys: pytest.CaptureFixture[str], engine: str, version: str) -> None:
    asked = ("--gpu", GPU, "--engine", engine, "--engine-version", version)
    code, _, fit = run_cli(capsys, "fit", MODEL, *asked, "--max-model-len", str(CONTEXT))
    assert code == 2 and fit.count("\n") == 1
    for argv in (("decode", MODEL, *asked, "--context", str(CONTEXT)),
                 ("prefill", MODEL, *asked, "--prompt-len", str(CONTEXT))):
        code, out, err = run_cli(capsys, *argv)
        assert (code, out, err) == (2, "", fit)


def test_decode_and_prefill_refuse_cpu_offload_under_model_runner_v2_before_its_fix(
        capsys: pytest.CaptureFixture[str]) -> None:
    since = str(engine_defaults("vllm")["cpu_offload"]["runner_v2_from"])
    dep = Deployment.build(resolve_model(MODEL), resolve_accelerator(GPU), engine="vllm")
    offloaded = replace(dep, cpu_offload=CpuOffload(4 * GIB))
    mrv2 = next(str(e["from"]) for e in vllm_data()["memory_versions"]
                if e.get("mrv2_default"))  # the first release running it by default
    problem = runner_problem(offloaded, mrv2)
    assert problem and dep.model.moe is None  # a dense model runs on MRV2 from that release
    offload = ("--gpu", GPU, "--cpu-offload-gb", "4")
    for argv in (("decode", MODEL, *offload, "--context", str(CONTEXT)),
                 ("prefill", MODEL, *offload, "--prompt-len", str(CONTEXT))):
        code, _, err = run_cli(capsys, *argv, "--engine-version", mrv2)
        assert code == 2 and err == f"ridgeline: error: {problem}\n"
        code, _, err = run_cli(capsys, *argv, "--engine-version", since)
        assert code == 0, err


def test_a_v0_version_reads_offloaded_weights_by_copy_in_prefill(
        capsys: pytest.CaptureFixture[str]) -> None:
    # V0 copies the offloaded weights in; V1 reads them in place (cpu_offload_from_args)
    argv = ("prefill", "llama-3.1-8b", "--gpu", GPU, "--cpu-offload-gb", "4",
            "--prompt-len", str(CONTEXT))
    v0 = _json(capsys, *argv, "--engine-version", "0.8.5 V0")
    v1 = _json(capsys, *argv, "--engine-version", "0.10")
    assert v0["expected"]["time_s"] != v1["expected"]["time_s"]


def test_prefill_hints_fit_at_the_version_that_sized_the_pool(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "prefill", "llama-3.1-70b", "--gpu", GPU, "--weights", "fp8",
                           "--prompt-len", "8", "--engine-version", "0.10")
    assert code == 0 and "(`ridgeline fit --engine-version 0.10` for the breakdown)" in out


def test_an_old_llamacpp_build_has_no_fit_in_decode_as_in_fit(
        capsys: pytest.CaptureFixture[str]) -> None:
    since = fit_default_since_build()
    asked = ("qwen3-30b-a3b", "--gpu", "rtx-3060", "--weights", "q4_k_m", "--engine",
             "llama.cpp-cuda", "-ngl", "auto", "--host-bandwidth-gbs", "76.8",
             "--engine-version", f"b{since - 1}")
    _, _, fit = run_cli(capsys, "fit", *asked, "--max-model-len", "32768")
    code, _, decode = run_cli(capsys, "decode", *asked, "--context", "32768")
    assert code == 2 and decode == fit and "-ngl auto is llama.cpp's --fit" in fit


def test_llamacpps_default_fit_places_as_the_build_named(
        capsys: pytest.CaptureFixture[str]) -> None:
    since = fit_default_since_build()
    asked = ("decode", "qwen3-30b-a3b", "--gpu", "rtx-3060", "--weights", "q4_k_m", "--engine",
             "llama.cpp-cuda", "--context", "32768", "--host-bandwidth-gbs", "76.8")
    placed = _json(capsys, *asked, "--engine-version", f"b{since}")
    assert "--fit" in placed["deployment"]
    code, _, err = run_cli(capsys, *asked, "--engine-version", f"b{since - 1}")
    assert code == 2 and "describes a partial offload" in err  # every layer stays on the GPU


def test_the_help_names_the_newest_modelled_releases() -> None:
    from ridgeline.cli import build_parser
    from ridgeline.cli_help import command_help

    vllm, sglang = vllm_data(), sglang_data()
    oldest_sglang = sglang["legacy_fraction"]["from"]
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for command in ("fit", "simulate", "decode", "prefill"):  # --help-all's: --help summarizes
        text = " ".join(command_help(commands[command], everything=True).split())
        assert f"vLLM {vllm['memory_versions'][0]['from']} ... {vllm['newest_checked']}" in text
        assert f"SGLang {oldest_sglang} ... {sglang['newest_checked']}" in text
