"""--explain's weight-matmul count under each engine: launches.py counts vLLM's model files,
so under SGLang and TensorRT-LLM the source says vLLM's count stands in for theirs."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.launches import deployment_matmuls
from tests.conftest import run_cli

RUN = ["mixtral-8x7b", "--gpu", "h100", "--num-gpus", "2", "--rate", "1", "--num-requests", "10"]


def _matmuls(capsys: pytest.CaptureFixture[str], engine: str) -> dict:
    code, out, err = run_cli(capsys, "simulate", *RUN, "--engine", engine, "--explain", "--json")
    assert code == 0, err
    (found,) = [i for s in json.loads(out)["explain"] for i in s["inputs"]
                if i["name"] == "weight-matmul launches"]
    return found


@pytest.mark.parametrize("engine, name", [("sglang", "SGLang"), ("trtllm", "TensorRT-LLM")])
def test_another_engines_matmul_count_says_vllms_stands_in_for_it(
        capsys: pytest.CaptureFixture[str], engine: str, name: str) -> None:
    found = _matmuls(capsys, engine)
    dep = Deployment.build(resolve_model("mixtral-8x7b"), resolve_accelerator("h100"),
                           num_gpus=2, engine=engine)
    assert found["value"] == deployment_matmuls(dep)
    assert "as vLLM's model files launch them" in found["source"]
    assert f"standing in for {name}'s" in found["source"]


def test_vllms_matmul_count_is_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    found = _matmuls(capsys, "vllm")
    assert "as vLLM's model files launch them" in found["source"]
    assert "standing in" not in found["source"]
