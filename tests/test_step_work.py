"""step_work: a step's FLOPs and bytes over all GPUs, split by what they are for."""

from __future__ import annotations

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.cost import decode_batch
from ridgeline.deployment import Deployment
from ridgeline.hardware import resolve_accelerator
from ridgeline.step_work import step_work


def test_llama31_8b_batch_32_at_16000_is_480_gflop_of_matmuls_and_268_of_attention() -> None:
    """The module docstring's worked number: 480.3 GFLOP of weight matmuls + 268.5 GFLOP of
    attention = 0.7488 TFLOP, the whole step's FLOPs (no rest, nothing repeated on one GPU)."""
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                           "as stored")
    work = step_work(dep, decode_batch(32, 16000))
    assert work.weight_flops / 1e9 == pytest.approx(480.3, abs=0.05)
    assert work.attention_flops / 1e9 == pytest.approx(268.5, abs=0.05)
    assert work.flops / 1e12 == pytest.approx(0.7488, abs=5e-5)
    assert work.flops == pytest.approx(work.weight_flops + work.attention_flops)
    assert work.repeated_flops == 0.0
