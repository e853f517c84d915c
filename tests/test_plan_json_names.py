"""plan --json's rows name what fit --json names under fit's keys (tensor_parallel_size,
pipeline_parallel_size, kv_dtype, data_parallel_size, weights_format), so one script reads
both; fit --json names the weights and the cache's dtype as simulate's and plan's do."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

FIT_KEYS = ("tensor_parallel_size", "pipeline_parallel_size", "kv_dtype", "weights",
            "weights_format", "accelerator")


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_a_plan_row_reads_as_fit_reads_the_same_deployment(
        capsys: pytest.CaptureFixture[str]) -> None:
    plan = _json(capsys, "plan", "llama-3.1-70b", "--rate", "2", "--slo-ttft-ms", "2000",
                 "--slo-tpot-ms", "100", "--gpus", "h100", "--max-gpus", "8")
    win = plan["winner"]
    assert not {"tp", "pp", "kv", "data_parallel"} & set(win)  # plan's old names
    assert win["data_parallel_size"] == 1
    fit = _json(capsys, "fit", "llama-3.1-70b", "--gpu", win["accelerator"],
                "--num-gpus", str(win["tensor_parallel_size"]),
                "--weights", win["weights_format"], "--kv-dtype", win["kv_dtype"],
                "--max-model-len", str(win["max_model_len"]))
    assert {k: fit[k] for k in FIT_KEYS} == {k: win[k] for k in FIT_KEYS}


def test_fit_names_the_stored_formats_of_a_quantized_checkpoint(
        capsys: pytest.CaptureFixture[str]) -> None:
    fit = _json(capsys, "fit", "gpt-oss-120b", "--gpu", "h200", "--max-model-len", "8k")
    assert (fit["weights"], fit["weights_format"], fit["kv_dtype"]) == (
        "as stored", "mxfp4", "bf16")
    simulate = _json(capsys, "simulate", "gpt-oss-120b", "--gpu", "h200", "--rate", "1",
                     "--num-requests", "4", "--max-model-len", "8k")
    assert (simulate["settings"]["weights"], simulate["settings"]["kv_dtype"]) == (
        fit["weights"], fit["kv_dtype"])
