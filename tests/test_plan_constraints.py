"""What a plan's deployments must keep, as the flags state it (plan_constraints.py): a
--weights naming a checkpoint's own format searches it as stored, and a refusal names the
values to type."""

from __future__ import annotations

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.plan_constraints import STORED, PlanConstraints
from tests.conftest import refused_line as refused

DEEPSEEK = resolve_model("deepseek-v3")
PLAN = ("plan", "deepseek-v3", "--gpus", "h200-sxm", "--max-gpus", "8", "--max-model-len",
        "32768", "--rate", "0.5", "--input-len", "8000", "--output-len", "800",
        "--slo-ttft-ms", "5000", "--slo-tpot-ms", "80")


def test_fp8_on_an_fp8_checkpoint_is_searched_as_stored() -> None:
    """DeepSeek-V3 is stored fp8-block (quant_method fp8): plan --weights fp8 had refused it,
    where fit, decode, kv, moe and simulate take the flag."""
    for spelling in ("fp8", "FP8", "fp8-block", "auto"):
        asked = PlanConstraints.parse(spelling, None, None)
        assert asked.for_model(DEEPSEEK, "vllm").weights == (STORED,)
    # TensorRT-LLM has no --quantization fp8 that loads it: a per-tensor fp8 checkpoint there
    assert PlanConstraints.parse("fp8", None, None).for_model(DEEPSEEK, "trtllm").weights \
        == ("fp8",)
    llama = resolve_model("llama-3.1-8b")  # 16-bit: fp8 is quantized on load, plan's own fp8
    assert PlanConstraints.parse("fp8", None, None).for_model(llama, "vllm").weights \
        == ("fp8",)


def test_a_weights_plan_does_not_search_is_refused_naming_what_to_type(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The refusal had said "give those" of "as stored", which --weights does not take as
    typed; it names --weights auto."""
    err = refused(capsys, *PLAN, "--weights", "int8")
    assert "give --weights auto" in err and "`ridgeline fit --weights int8`" in err
    err = refused(capsys, *PLAN, "--weights", "fp8", "--engine", "trtllm")
    assert "give --weights auto" in err
    err = refused(capsys, "plan", "llama-3.1-8b", "--gpus", "h100", "--rate", "1",
                  "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50", "--weights", "awq-int4")
    assert "give --weights bf16 or fp8" in err
