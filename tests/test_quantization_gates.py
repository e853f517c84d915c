"""Where vLLM and SGLang refuse bitsandbytes and experts_int8 by layout and release, asked
through one check (quantization_gates.deployment_problem) by the CLI's build, the planner's
candidates and fit's levers: a pre-quantized bitsandbytes checkpoint loads on one
tensor-parallel rank only, so more GPUs are pipeline stages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ridgeline.datafiles import load_data
from ridgeline.errors import InputError
from ridgeline.model import ModelSpec
from ridgeline.plan import plan
from ridgeline.serving_load import Load, Slo
from tests.test_quantize_on_load import NF4_DQ, answer, checkpoint, refused

ROWS = {row["method"]: row for row in load_data("formats.json")["engine_methods"]}
BNB = ROWS["bitsandbytes"]


def bnb_70b(tmp_path: Path) -> str:
    return checkpoint(tmp_path, "meta-llama--Llama-3.1-70B", {"load_in_4bit": True}, "bnb70b")


def lever_names(report: dict[str, Any]) -> list[str]:
    return [lever["name"] for lever in report["levers"]]


# -- the layout: one tensor-parallel rank, pipeline stages past it ---------------------------
def test_plan_lays_a_pre_quantized_bitsandbytes_checkpoint_out_in_pipeline_stages() -> None:
    """vLLM refuses 'Prequant BitsAndBytes models with tensor parallelism': every candidate
    is TP1, the 70B's ~40 GiB of NF4 spread over pipeline stages of L40S. The search's own
    layouts are read, unsimulated (verify=0: a check adds replicas, never a rank)."""
    config = dict(load_data("models/meta-llama--Llama-3.1-70B.json"))
    config["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    spec = ModelSpec.from_hf_config(config, "bnb70b")
    result = plan(spec, Load(1.0, 1000, 250), Slo(2.0, 0.1, 90), ["l40s"], max_gpus=8,
                  workers=1, verify=0)
    every = (*result.candidates, *result.unpriced, *result.disaggregated)
    assert result.winner is not None
    assert all(c.tp == 1 for c in every)
    assert all(c.pp > 1 for c in every)  # one L40S holds no 70B at 4.5 bits


def test_plan_under_trtllm_refuses_a_bitsandbytes_checkpoint_as_fit_does(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """TensorRT-LLM loads no bitsandbytes weights on any card, so plan says so in one line
    (fit's reason) rather than that no deployment meets the SLO; plan takes no --weights."""
    path = bnb_70b(tmp_path)
    fit = refused(capsys, "fit", path, "--gpu", "h100", "--engine", "trtllm")
    err = refused(capsys, "plan", path, "--gpus", "h100,l40s", "--rate", "2", "--slo-ttft-ms",
                  "2000", "--slo-tpot-ms", "100", "--engine", "trtllm", "--workers", "1")
    reason = fit.split("; give ")[0]
    assert err.startswith(reason) and "--weights" not in err and "--engine" in err


def test_fit_levers_add_pipeline_stages_for_a_pre_quantized_bitsandbytes_checkpoint(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fit = ("fit", "--gpu", "l40s", "--max-model-len", "8192", "--json")
    stored = lever_names(answer(capsys, fit[0], bnb_70b(tmp_path), *fit[1:]))
    assert not any("tensor parallel" in n or "TP2" in n for n in stored)
    assert "2 GPUs (TP1 × PP2)" in stored
    # quantized on load (-q bitsandbytes) each rank quantizes its own shard: TP is offered
    in_flight = lever_names(answer(capsys, fit[0], "llama-3.1-70b", *fit[1:],
                                   "-q", "bitsandbytes"))
    assert "2 GPUs (tensor parallel)" in in_flight


def test_sglang_refuses_a_pre_quantized_bitsandbytes_checkpoint_tensor_parallel_too(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """SGLang's model_loader/loader.py (0.4.0-0.5.9): 'Prequant BitsAndBytes models with TP is
    not supported. Please try with PP.'"""
    path = checkpoint(tmp_path, "meta-llama--Llama-3.1-8B", NF4_DQ, "nf4")
    sglang = ("--gpu", "h100", "--max-model-len", "8k", "--engine", "sglang")
    err = refused(capsys, "fit", path, *sglang, "--num-gpus", "2")
    assert "SGLang" in err and "--pipeline-parallel-size 2" in err
    answer(capsys, "fit", path, *sglang, "--pipeline-parallel-size", "2", "--json")


# -- the releases ----------------------------------------------------------------------------
FIT_MOE = ("fit", "qwen3-30b-a3b", "--gpu", "h100", "--max-model-len", "8k", "--json",
           "-q", "bitsandbytes")
FIT_DENSE = ("fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k", "--json",
             "-q", "bitsandbytes")


@pytest.mark.parametrize(("engine", "before"), [("vllm", "0.9.2"), ("sglang", "0.5.4.post1")])
def test_a_moes_bitsandbytes_experts_need_the_release_with_its_moe_method(
        capsys: pytest.CaptureFixture[str], engine: str, before: str) -> None:
    """BitsAndBytesMoEMethod: vLLM's from 0.10 (PR #20061), SGLang's own from 0.5.8."""
    since = BNB["moe_since"][engine]
    err = refused(capsys, *FIT_MOE, "--engine", engine, "--engine-version", before)
    assert "BitsAndBytesMoEMethod" in err and f"v{since}" in err
    answer(capsys, *FIT_MOE, "--engine", engine, "--engine-version", since)
    answer(capsys, *FIT_DENSE, "--engine", engine, "--engine-version", before)  # dense: runs


def test_plan_refuses_in_one_line_a_release_that_serves_the_checkpoint_on_no_layout() -> None:
    config = dict(load_data("models/Qwen--Qwen3-30B-A3B.json"))
    config["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    spec = ModelSpec.from_hf_config(config, "bnbmoe")
    with pytest.raises(InputError, match="BitsAndBytesMoEMethod"):
        plan(spec, Load(1.0, 1000, 250), Slo(2.0, 0.1, 90), ["l40s"], max_gpus=2, workers=1,
             engine_version="0.9.2")


def test_sglang_releases_between_the_borrowed_and_its_own_method_have_no_bitsandbytes(
        capsys: pytest.CaptureFixture[str]) -> None:
    start, end = BNB["absent"]["sglang"]
    for version in (start, "0.5.7"):
        err = refused(capsys, *FIT_DENSE, "--engine", "sglang", "--engine-version", version)
        assert "no bitsandbytes method" in err
    answer(capsys, *FIT_DENSE, "--engine", "sglang", "--engine-version", end)
    answer(capsys, *FIT_DENSE, "--engine", "sglang", "--engine-version", "0.5.4.post1")


def test_vllm_runs_bitsandbytes_from_0_5_and_on_several_gpus_from_0_6_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    """0.5.4-0.6.1.post2's verify_with_parallel_config: 'BitAndBytes quantization with TP or PP
    is not supported yet'; gone in 0.6.2 (PR #8434)."""
    vllm = ("--engine", "vllm", "--engine-version")
    # Llama 3: releases before 0.5.3.post1 cannot load 3.1's rope_scaling
    dense = ("fit", "llama-3-8b", *FIT_DENSE[2:])
    assert "PR #4776" in refused(capsys, *dense, *vllm, "0.4.3")
    answer(capsys, *dense, *vllm, BNB["since"]["vllm"])
    for layout in (("--num-gpus", "2"), ("--pipeline-parallel-size", "2")):
        assert "one GPU only" in refused(capsys, *dense, *vllm, "0.6.1.post2", *layout)
        answer(capsys, *dense, *vllm, BNB["multi_gpu_since"]["vllm"], *layout)
    # and fit offers no second GPU where the release runs on one
    on_l4 = (*dense[:2], "--gpu", "l4", *dense[4:])
    assert "2 GPUs (tensor parallel)" in lever_names(answer(capsys, *on_l4))
    one = lever_names(answer(capsys, *on_l4, *vllm, "0.6.1"))
    assert not any(n.startswith("2 GPUs") for n in one)


def test_experts_int8_came_in_vllm_0_5_5(capsys: pytest.CaptureFixture[str]) -> None:
    # Mixtral: vLLM 0.5.4 has no Qwen3MoeForCausalLM (it came in 0.8.4)
    moe = ("fit", "mixtral-8x7b", "--gpu", "h100", "--max-model-len", "8k", "--json",
           "-q", "experts_int8", "--engine-version")
    since = ROWS["experts_int8"]["since"]["vllm"]
    assert "ExpertsInt8Config came in" in refused(capsys, *moe, "0.5.4")
    answer(capsys, *moe, since)


# -- the caution and the dense refusal -------------------------------------------------------
@pytest.mark.parametrize(("engine", "name"), [("vllm", "vLLM"), ("sglang", "SGLang")])
def test_the_moe_caution_names_the_engine_that_dequantizes_the_experts(
        capsys: pytest.CaptureFixture[str], engine: str, name: str) -> None:
    report = answer(capsys, "decode", "qwen3-30b-a3b", "--gpu", "h100", "--json",
                    "-q", "bitsandbytes", "--engine", engine)
    assert any(f"on a MoE {name} dequantizes every expert" in c for c in report["cautions"])


def test_weights_experts_int8_on_a_dense_model_is_refused_as_the_flag_q_is(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--weights", "experts_int8")
    assert "dense" in err and "ExpertsInt8Config" in err and "--weights" in err


def test_a_method_a_later_vllm_release_brought_is_refused_for_an_earlier_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's --quantization mxfp4 came with gpt-oss in v0.10.1 (formats.json engine_methods
    since); an earlier release's QUANTIZATION_METHODS has no such choice, and vllm serve stops.
    Before, -q mxfp4 at --engine-version 0.9.2 sized gpt-oss as 0.10.1 would."""
    from ridgeline.quantization_gates import method_release_problem
    from tests.conftest import run_cli

    argv = ("fit", "gpt-oss-20b", "--gpu", "h100", "--max-model-len", "8k", "--quantization",
            "mxfp4", "--engine-version")
    code, out, err = run_cli(capsys, *argv, "0.10.0")
    assert code == 2 and not out
    assert err.strip() == ("ridgeline: error: vLLM 0.10.0 has no --quantization mxfp4: mxfp4 "
                           "came in v0.10.1; name a later --engine-version, or another method")
    for release in ("0.10.1", "0.11.0"):
        code, _, err = run_cli(capsys, *argv, release)
        assert code == 0, err
    assert method_release_problem("mxfp4", "vllm", None) == ""  # the default release has it
    assert method_release_problem("mxfp4", "sglang", "0.4.6") == ""  # no SGLang since read
    assert method_release_problem("fp8", "vllm", "0.5.0") == ""  # no since: not checked
