"""Amdahl's P from a model: the share of a decode step an operator group takes."""

from __future__ import annotations

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.cost import decode_batch, step_cost
from ridgeline.deployment import Deployment
from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.hardware import resolve_accelerator
from ridgeline.step_share import OP_GROUPS, decode_refusal, decode_share

VLLM = profile_for("vllm")


def _dep(model: str = "llama-3.1-8b", num_gpus: int = 1) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator("h100"),
                            num_gpus=num_gpus, engine="vllm")


def test_attention_takes_more_of_the_step_as_the_context_grows() -> None:
    dep = _dep()
    short = decode_share(dep, "attention", 8, 2_000, VLLM).fraction
    long = decode_share(dep, "attention", 8, 32_000, VLLM).fraction
    assert 0 < short < long < 1


def test_the_share_is_the_groups_time_over_the_step_time_of_step_cost() -> None:
    dep = _dep("llama-3.1-70b", num_gpus=4)
    source = decode_share(dep, "communication", 8, 4_000, VLLM)
    cost = step_cost(dep, decode_batch(8, 4_000), VLLM)
    part = sum(op.time_s for op in cost.ops if op.name in OP_GROUPS["communication"])
    assert source.part_time_s == pytest.approx(part)
    assert source.step_time_s == pytest.approx(cost.time_s)
    assert source.fraction == pytest.approx(part / cost.time_s) and source.fraction > 0


def test_a_single_gpu_step_spends_nothing_on_communication() -> None:
    assert decode_share(_dep(), "communication", 8, 4_000, VLLM).fraction == 0


def test_the_groups_never_add_up_to_more_than_the_step() -> None:
    dep = _dep("llama-3.1-70b", num_gpus=4)
    total = sum(decode_share(dep, op, 8, 4_000, VLLM).fraction for op in OP_GROUPS)
    assert 0.5 < total <= 1 + 1e-9


def test_a_batch_the_pool_holds_is_no_refusal_and_one_past_it_is() -> None:
    dep = _dep()
    assert decode_refusal(dep, 1, 2_000) is None
    pool = decode_refusal(dep, 16, 32_000)  # the cache fits the card; vLLM 0.34's pool runs 15
    assert pool is not None and pool.startswith("does not fit: vllm's KV pool runs 15 of batch 16")
    card = decode_refusal(dep, 100_000, 2_000)
    assert card is not None and card.startswith("does not fit: ") and "short by" in card
    with pytest.raises(InputError, match="KV pool runs 15"):
        decode_share(dep, "attention", 16, 32_000, VLLM)


def test_an_unknown_group_is_refused_by_name() -> None:
    with pytest.raises(InputError, match="'softmax'"):
        decode_share(_dep(), "softmax", 1, 2_000, VLLM)


def test_the_engines_fixed_costs_are_named_beside_the_share() -> None:
    """At batch 1 most of a step is the engine's fixed cost, in no operator group: the
    source carries it (the profile's per step, layer and matmul costs) and says its share."""
    dep = _dep()
    source = decode_share(dep, "weights", 1, 2_000, VLLM)
    fixed = VLLM.overhead_s(dep.model.num_layers, False, 32 * 4)  # Llama: 4 matmuls a layer
    assert source.overhead_time_s == pytest.approx(fixed)
    assert f"take {fixed / source.step_time_s:.0%} of it, in no group" in source.text()
