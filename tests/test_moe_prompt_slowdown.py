"""vLLM's MoE prompt slowdown: a step that carries prompt tokens prices its routed experts'
arithmetic at engines.json's factor; dense steps, decode-only steps and the other engines are
priced as before; the bundled factor is the one scripts/fit_moe_prompt_slowdown.py fits, and
it carries to the source it did not see."""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path
from types import ModuleType
from unittest import mock

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cost import (
    Seq,
    StepCost,
    StepRates,
    batch_shape,
    decode_batch,
    shape_time_s,
    step_cost,
)
from ridgeline.engines import moe_prompt_expert_slowdown, profile_for
from ridgeline.sim.timer import StepTimer

ROOT = Path(__file__).resolve().parent.parent
VLLM = profile_for("vllm")


def build(model: str) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator("h100"), "bf16", None, 1,
                            engine="vllm")


def op_time_s(cost: StepCost, name: str) -> float:
    return next(op.time_s for op in cost.ops if op.name == name)


def priced(dep: Deployment, batch: list[Seq]) -> tuple[StepCost, StepCost]:
    """The step with vLLM's slowdown, then without it."""
    slowed = step_cost(dep, batch, VLLM)
    with mock.patch("ridgeline.cost.moe_prompt_expert_slowdown", return_value=1.0):
        return slowed, step_cost(dep, batch, VLLM)


def test_vllms_experts_reach_an_eighth_of_peak_on_prompt_steps() -> None:
    """The serving profile's compute share, 0.561 of peak, over the fitted 4.9: 0.11. Read
    off the step's rates: the routed experts' FLOPs over their time on a prompt step, against
    the H100's peak; on a decode step, and for every other operator, the share itself."""
    dep = build("qwen3-30b-a3b")
    peak, flops = dep.peak_at(dep.compute_dtype), 1e12
    share = VLLM.compute_for(dep.accelerator)
    prompt, decode = StepRates(dep, VLLM, prompt=True), StepRates(dep, VLLM)
    reached = flops / prompt.compute_s("experts", flops, 1) / peak
    assert reached == pytest.approx(share / moe_prompt_expert_slowdown("vllm"), rel=1e-12)
    assert reached == pytest.approx(0.11, abs=0.005)
    assert flops / decode.compute_s("experts", flops, 1) / peak == pytest.approx(share)
    assert prompt.compute_s("mlp", flops, 1) == decode.compute_s("mlp", flops, 1)
    assert moe_prompt_expert_slowdown("sglang") == moe_prompt_expert_slowdown("trtllm") == 1.0
    sglang = profile_for("sglang")
    assert StepRates(dep, sglang, prompt=True).compute_s("experts", flops, 1) \
        == StepRates(dep, sglang).compute_s("experts", flops, 1)


def test_a_moe_prompt_steps_experts_cost_the_slowdown_times_their_arithmetic() -> None:
    """Qwen3-30B-A3B, one 8,192-token chunk on an H100: 512 tokens an expert, compute-bound, so
    the experts' time is the factor times what it was; nothing else in the step moves. A mixed
    step (an 8,128-token chunk beside 64 decodes) pays it too."""
    dep = build("qwen3-30b-a3b")
    for batch in ([Seq(8192)], [Seq(8128), *decode_batch(64, 1500)]):
        slowed, plain = priced(dep, batch)
        assert op_time_s(slowed, "experts") == pytest.approx(
            op_time_s(plain, "experts") * moe_prompt_expert_slowdown("vllm"))
        assert slowed.time_s - plain.time_s == pytest.approx(
            op_time_s(slowed, "experts") - op_time_s(plain, "experts"))


def test_a_dense_prompt_step_and_a_moe_decode_step_are_priced_as_before() -> None:
    """Llama-3.1-8B's prompt has no routed experts; Qwen3-30B-A3B's decode at batch 64 (one
    token a sequence) reads its experts' bytes, not their arithmetic, and is not a prompt step."""
    for dep, batch in ((build("llama-3.1-8b"), [Seq(8192)]),
                       (build("qwen3-30b-a3b"), decode_batch(64, 1500))):
        slowed, plain = priced(dep, batch)
        assert slowed.time_s == plain.time_s


def test_the_simulators_timer_keeps_a_prompt_steps_experts_apart_from_a_decode_steps() -> None:
    """StepTimer remembers a step's context-free work by its token count: 2,048 decodes and a
    2,047-token chunk beside one decode have the same count, but only the second is a prompt
    step, whose experts (128 tokens each, compute-bound at 4.9 times their arithmetic) cost more.
    Asked in turn, each is step_cost's time."""
    dep = build("qwen3-30b-a3b")
    timer = StepTimer(dep, VLLM)
    decode = batch_shape(dep, decode_batch(2048, 1500))
    mixed = batch_shape(dep, [Seq(2047, 100), Seq(1, 1500)])
    for shape in (decode, mixed, decode, mixed):
        assert timer.time_s(shape) == pytest.approx(shape_time_s(dep, shape, VLLM), rel=1e-12)
    slowed, plain = priced(dep, [Seq(2047, 100), Seq(1, 1500)])
    assert op_time_s(slowed, "experts") > 1.5 * op_time_s(plain, "experts")


def fit_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "fit_moe_prompt_slowdown", ROOT / "scripts" / "fit_moe_prompt_slowdown.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_the_bundled_slowdown_is_the_fit_and_carries_to_a_held_out_source() -> None:
    """engines.json's value is what the script fits on every vLLM row of moe_prefill.csv; with
    each source held out the fit stays within 4.3-5.5, and the held-out rows' median |error|
    falls from 170 % to 25 %."""
    full, folds, before, after = fit_script().fit()
    assert full == pytest.approx(moe_prompt_expert_slowdown("vllm"))
    assert (min(folds.values()), max(folds.values())) == (4.3, 5.5)
    assert round(statistics.median(before), 2) == 1.70
    assert round(statistics.median(after), 2) == 0.25
