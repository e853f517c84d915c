"""Bad input (audit): simulate's and plan's flags read as a user writes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

LOAD = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--num-requests", "5")


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out, (argv, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("seed", ["１", "1_000", "-1"])
def test_a_seed_is_a_whole_number_in_ascii_digits(capsys: pytest.CaptureFixture[str],
                                                  seed: str) -> None:
    assert "argument --seed: seed" in refused(capsys, *LOAD, f"--seed={seed}")
    assert "argument --seed: seed" in refused(capsys, "plan", "llama-3.1-8b", f"--seed={seed}")


def test_an_acceptance_of_minus_zero_prints_as_zero(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *LOAD, "--spec-tokens", "2", "--spec-acceptance=-0.0")
    assert code == 0, err
    assert "each accepted with chance 0," in out and "-0" not in out
    assert "draft acceptance rate must be" in refused(capsys, *LOAD, "--spec-tokens", "2",
                                                     "--spec-acceptance", "０.５")


def test_export_takes_a_csv_or_json_name(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.xlsx"
    assert "--export writes a .csv or a .json file" in refused(capsys, *LOAD, "--export",
                                                               str(out))
    assert not out.exists()


def test_enforce_eager_on_trtllm_names_its_own_switch(capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM has no --enforce-eager: its PyTorch backend turns CUDA graphs off with
    cuda_graph_config: null, which is what the flag prices, and the output says so; the
    TensorRT engine backend, whose graphs are off by default, is refused."""
    trt = ("--engine", "trtllm")
    code, graphed, _ = run_cli(capsys, *LOAD, *trt)
    code_eager, eager, err = run_cli(capsys, *LOAD, *trt, "--enforce-eager")
    assert code == code_eager == 0, err
    assert "cuda_graph_config: null" in eager and "cuda_graph_config" not in graphed
    decode = ("decode", "llama-3.1-8b", "--gpu", "h100", *trt, "--json")
    _, plain, _ = run_cli(capsys, *decode)
    _, ungraphed, _ = run_cli(capsys, *decode, "--enforce-eager")
    slow, fast = json.loads(ungraphed), json.loads(plain)
    assert slow["points"][0]["expected"]["time_s"] > fast["points"][0]["expected"]["time_s"]
    assert any("cuda_graph_config: null" in c for c in slow["cautions"])
    assert not any("cuda_graph_config" in c for c in fast["cautions"])
    err = refused(capsys, *LOAD, *trt, "--backend", "tensorrt", "--enforce-eager")
    assert "TensorRT engine backend" in err and "cuda_graph_mode" in err
    # vLLM and SGLang spell it themselves: no note
    _, vllm, _ = run_cli(capsys, *LOAD, "--enforce-eager")
    assert "cuda_graph_config" not in vllm


@pytest.mark.parametrize(("typed", "named"), [("-tp", "-tp"), ("--num-gpus", "--num-gpus"),
                                              ("--tensor-parallel-size", "--tensor-parallel-size")])
def test_a_refused_flag_is_named_as_typed_not_by_all_its_spellings(
        capsys: pytest.CaptureFixture[str], typed: str, named: str) -> None:
    """argparse joins a flag's aliases with '/', a run the one-line error then cut to
    '--num-gpus/--tensor-parallel-siz…(86 chars)'; the error names the spelling used."""
    err = refused(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", typed, "0")
    assert f"argument {named}: number of GPUs must be positive" in err
    assert "/" not in err.split(":")[2] and "chars)" not in err
    both = refused(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--weights", "fp8",
                   "-q", "awq")
    assert "--quantization awq reads" in both and "not fp8" in both


@pytest.mark.parametrize("command", [
    ("plan", "llama-3.1-8b", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50"),
    ("simulate", "llama-3.1-8b", "--gpu", "h100", "--num-requests", "5"),
])
def test_a_request_rate_past_a_million_a_second_is_refused(
        capsys: pytest.CaptureFixture[str], command: tuple[str, ...]) -> None:
    """plan --rate 1e300 printed that the load needs about 11,997,489,…,488 GPUs (a
    297-digit count); a rate is at most MAX_RATE, and simulate's --rate inf stays its own."""
    from ridgeline.sim.workload import MAX_RATE

    err = refused(capsys, *command, "--rate", "1e300")
    assert f"request rate must be between 0 and {MAX_RATE:g}, got 1e+300" in err
    assert "GPUs" not in err


@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--input-len", "lognormal:x,1", "input length: bad numbers in 'lognormal:x,1'"),
    ("--output-len", "0", "output length: a fixed length must be 1 to 10,000,000, got 0"),
])
def test_plans_length_refusals_name_the_length_as_simulates_do(
        capsys: pytest.CaptureFixture[str], flag: str, value: str, said: str) -> None:
    """plan said "input: bad numbers in …" where simulate says "input length: …"."""
    assert said in refused(capsys, *LOAD, flag, value)
    assert said in refused(capsys, "plan", "llama-3.1-8b", "--rate", "1", "--slo-ttft-ms",
                           "500", "--slo-tpot-ms", "50", flag, value)
