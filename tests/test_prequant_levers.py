"""fit's smaller-weights lever on a checkpoint whose quantization_config fixes its format
(bitsandbytes, AWQ, GPTQ, fp8): no flag turns it into another format, so the lever names a
different checkpoint, and a 4-bit one, the smallest, gets none; a 16-bit checkpoint's fp8
lever stays the flag it is (vLLM quantizes it on load)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ridgeline.datafiles import load_data
from ridgeline.reports.fit_levers import SMALLER_WEIGHTS
from tests.test_quantize_on_load import answer

FIT = ("--gpu", "h200", "--num-gpus", "1", "--max-model-len", "32768",
       "--target-concurrency", "256", "--json")


def quantized_70b(tmp_path: Path, qc: dict[str, Any]) -> str:
    config = dict(load_data("models/meta-llama--Llama-3.1-70B.json"))
    config["quantization_config"] = qc
    path = tmp_path / "q70b" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    return str(path)


def weight_levers(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [lv for lv in report["levers"] if " weights" in lv["name"]]


@pytest.mark.parametrize("qc", [
    {"quant_method": "bitsandbytes", "load_in_8bit": True},
    {"quant_method": "gptq", "bits": 8, "group_size": 128},
    {"quant_method": "fp8"},
    {"quant_method": "fp8", "weight_block_size": [128, 128]}])
def test_an_8_bit_checkpoints_smaller_weights_are_a_different_checkpoint(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, qc: dict[str, Any]) -> None:
    path = quantized_70b(tmp_path, qc)
    report = answer(capsys, "fit", path, *FIT)
    (lever,) = weight_levers(report)
    smaller = lever["name"].split()[0]
    assert "a different checkpoint" in lever["name"]
    # priced as that checkpoint: what `--weights` sizes for it
    what_if = answer(capsys, "fit", path, *FIT, "--weights", smaller)
    assert (lever["conversations"], lever["engine_max_batch"]) == (what_if["conversations"],
                                                        what_if["engine_max_batch"])
    # the same lever where --weights names the checkpoint's own format
    own = lever["name"].split("this one is ")[1].rstrip(")")
    assert SMALLER_WEIGHTS[own] == smaller
    again = answer(capsys, "fit", path, *FIT, "--weights", own)
    assert [lv["name"] for lv in weight_levers(again)] == [lever["name"]]


@pytest.mark.parametrize("qc", [
    {"quant_method": "bitsandbytes", "load_in_4bit": True},
    {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True},
    {"quant_method": "gptq", "bits": 4, "group_size": 128}])
def test_a_4_bit_checkpoint_gets_no_smaller_weights_lever(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, qc: dict[str, Any]) -> None:
    report = answer(capsys, "fit", quantized_70b(tmp_path, qc), *FIT)
    assert report["levers"] and not weight_levers(report)


def test_a_bundled_fp8_checkpoint_and_a_16_bit_one(capsys: pytest.CaptureFixture[str]) -> None:
    fp8 = answer(capsys, "fit", "qwen3-235b-a22b-fp8", *FIT[:2], "--num-gpus", "8",
                 *FIT[4:])
    (lever,) = weight_levers(fp8)
    assert lever["name"].endswith("(a different checkpoint; this one is fp8-block)")
    bf16 = answer(capsys, "fit", "llama-3.1-70b", *FIT[:2], "--num-gpus", "2", *FIT[4:])
    assert [lv["name"] for lv in weight_levers(bf16)] == ["fp8 weights"]


def test_a_16_bit_checkpoint_served_as_fp8_needs_another_checkpoint_for_int4(
        capsys: pytest.CaptureFixture[str]) -> None:
    """-q fp8 quantizes a 16-bit checkpoint on load; no engine makes AWQ on load, so the
    next lever names a different checkpoint as a pre-quantized one's does, and is priced as
    --weights names it. --weights fp8 names a checkpoint stored in fp8: its lever says so."""
    from ridgeline.catalog import resolve_model
    from ridgeline.precision import weight_plan
    from ridgeline.reports.fit_levers import ON_LOAD_WEIGHTS

    args = ("llama-3.1-70b", *FIT[:2], "--num-gpus", "2", *FIT[4:])
    served = answer(capsys, "fit", *args, "-q", "fp8")
    (lever,) = weight_levers(served)
    smaller = lever["name"].split()[0]
    assert smaller == SMALLER_WEIGHTS["fp8"] and smaller not in ON_LOAD_WEIGHTS
    checkpoint = weight_plan(resolve_model("llama-3.1-70b")).label
    assert lever["name"].endswith(f"(a different checkpoint; this one is {checkpoint}, "
                                  "quantized to fp8 on load)")
    (stored,) = weight_levers(answer(capsys, "fit", *args, "--weights", "fp8"))
    # the catalog's checkpoint is 16-bit; --weights fp8 sizes one stored in fp8
    assert stored["name"].endswith(f"(a different checkpoint; this one is {checkpoint} in the "
                                   "catalog, sized as stored in fp8 by --weights fp8)")
    assert stored["conversations"] == lever["conversations"]
    # unserved at fp8, the same checkpoint's lever is the flag, quantized on load
    bf16 = answer(capsys, "fit", *args)
    assert [lv["name"] for lv in weight_levers(bf16)] == [f"{SMALLER_WEIGHTS[checkpoint]} weights"]
    assert SMALLER_WEIGHTS[checkpoint] in ON_LOAD_WEIGHTS
    what_if = answer(capsys, "fit", *args, "--weights", smaller)
    assert (lever["conversations"], lever["engine_max_batch"]) == (what_if["conversations"],
                                                        what_if["engine_max_batch"])


@pytest.mark.parametrize("served", ["bf16", "q8_0"])
def test_llamacpps_smaller_weights_are_always_a_different_gguf_file(
        capsys: pytest.CaptureFixture[str], served: str) -> None:
    """llama-server runs the tensor types its GGUF file holds, quantizing nothing on load:
    even a 16-bit checkpoint's next format is another file, priced as --weights names it."""
    from ridgeline.reports.fit_levers import SMALLER_GGUF

    args = ("fit", "llama-3.1-8b", "--engine", "llama.cpp", "--gpu", "rtx-4090", "-ngl",
            "all", "--max-model-len", "32768", "--target-concurrency", "16", "--weights",
            served, "--json")
    smaller = SMALLER_GGUF[served]
    (lever,) = [lv for lv in weight_levers(answer(capsys, *args))
                if lv["name"].startswith(f"{smaller} ")]  # not -ngl's weights on the host
    assert lever["name"] == f"{smaller} weights (a different GGUF file; this one is {served})"
    what_if = answer(capsys, *args[:-2], smaller, "--json")
    assert (lever["conversations"], lever["engine_max_batch"]) == (what_if["conversations"],
                                                        what_if["engine_max_batch"])
