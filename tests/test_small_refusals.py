"""Small refusals the bad-input audit found said wrongly or not at all: an SGLang release that
is vLLM's number, a bench result's impossible cap and rate, --ep-size on one GPU or a dense
model, --spec-tokens 0, --percentile 0's range, and a one-request trace's plural."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline.errors import InputError
from ridgeline.observe import read_source
from tests.conftest import run_cli

FIXTURES = Path(__file__).resolve().parent / "fixtures"
DECODE = ("decode", "llama-3.1-8b", "--gpu", "h100")


def _refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, (out, err)
    return err


def test_sglang_0_34_is_refused_as_vllms_number_with_its_likely_meaning(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = _refusal(capsys, *DECODE, "--engine", "sglang", "--engine-version", "0.34")
    assert "SGLang 0.34 is no release SGLang has had" in err
    assert "did you mean 0.3.4?" in err and "0.34 is a vLLM release: --engine vllm" in err
    for meant in ("0.3.4", "0.6"):  # the release split out, and the next minor, still run
        code, _, _ = run_cli(capsys, *DECODE, "--engine", "sglang", "--engine-version", meant)
        assert code == 0


@pytest.mark.parametrize(("fields", "message"), [
    ({"max_concurrency": 0}, "max_concurrency is 0"),
    ({"request_rate": -3}, "request_rate must be a positive number"),
    ({"request_rate": 0}, "request_rate must be a positive number"),
    ({"request_rate": "fast"}, "request_rate must be a positive number"),
])
def test_a_bench_results_impossible_cap_or_rate_is_refused(
        tmp_path: Path, fields: dict[str, object], message: str) -> None:
    good = json.loads((FIXTURES / "vllm_bench.json").read_text("utf-8"))
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({**good, **fields}))
    with pytest.raises(InputError, match=message):
        read_source(str(path))
    path.write_text(json.dumps({**good, "max_concurrency": None, "request_rate": 4.0}))
    assert read_source(str(path)).client_concurrency is None


def test_ep_size_on_a_dense_model_or_one_gpu_says_so_once(
        capsys: pytest.CaptureFixture[str]) -> None:
    dense = _refusal(capsys, *DECODE, "--ep-size", "3")
    assert "--ep-size 3 spreads a MoE's experts: llama-3.1-8b is dense" in dense
    one = _refusal(capsys, "decode", "qwen3-30b-a3b", "--gpu", "h100", "--ep-size", "3")
    assert one.count("--ep-size 1") == 1 and "run on 1 GPU" in one


def test_spec_tokens_0_is_refused_as_the_speculative_configs_0_is(
        capsys: pytest.CaptureFixture[str]) -> None:
    flag = _refusal(capsys, *DECODE, "--spec-tokens", "0")
    config = _refusal(capsys, *DECODE, "-sc", '{"method": "ngram", "num_speculative_tokens": 0}')
    assert "at least 1 token" in flag and "at least 1 token" in config
    assert run_cli(capsys, *DECODE, "--spec-tokens", "1")[0] == 0


@pytest.mark.parametrize("percentile", ["0", "-5", "100", "nan"])
def test_a_percentile_out_of_range_is_told_the_range(
        capsys: pytest.CaptureFixture[str], percentile: str) -> None:
    err = _refusal(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2",
                   "--percentile", percentile)
    assert "from 1 to below 100" in err and "must be positive" not in err


def test_a_one_request_trace_is_one_request(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    trace = tmp_path / "one.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n")
    code, out, err = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--trace",
                             str(trace))
    assert code == 0, err
    assert "(1 request)" in out and "(1 requests)" not in out
