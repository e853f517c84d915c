"""Decode and prefill floors beyond the article's example."""

from __future__ import annotations

import re

import pytest

from ridgeline import Deployment, decode_floor, prefill_floor, resolve_accelerator, resolve_model
from ridgeline.attention_span import query_key_pairs as _pairs
from ridgeline.step_work import weight_bytes_read


def dep(model: str, gpu: str = "h100", weights: str | None = "bf16", n: int = 1) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), weights, None, n)


def test_tensor_parallel_splits_the_step_evenly() -> None:
    one, four = decode_floor(dep("llama-3.1-70b"), 8, 4000), decode_floor(
        dep("llama-3.1-70b", n=4), 8, 4000)
    assert four.step_time_s == pytest.approx(one.step_time_s / 4)


def test_moe_decode_reads_only_the_experts_the_batch_touches() -> None:
    d = dep("qwen3-30b-a3b")
    one, many = weight_bytes_read(d, 1), weight_bytes_read(d, 4096)
    assert one < 0.2 * many
    assert many == pytest.approx(d.weight_bytes - d.bytes_by_category["embedding"], rel=0.01)


def test_huge_batches_become_compute_bound() -> None:
    floor = decode_floor(dep("llama-3.1-8b"), 2048, 128)
    assert floor.bound == "compute"


@pytest.mark.parametrize(("model", "gpu", "n", "batch", "context"), [
    ("llama-3.1-8b", "h100", 1, 32, 2048), ("qwen3-30b-a3b", "h100", 2, 256, 8192),
    ("llama-3.1-70b", "l4", 1, 8, 512)])  # the last does not fit: its check the same too
def test_a_floor_without_its_explanation_has_the_same_figures(model: str, gpu: str, n: int,
                                                              batch: int, context: int) -> None:
    """The page asks for floors without their --explain steps: the same floor, no words."""
    d = dep(model, gpu, n=n)
    full, bare = decode_floor(d, batch, context), decode_floor(d, batch, context, explain=False)
    assert full.steps and not bare.steps
    assert bare == type(full)(**{**full.__dict__, "steps": ()})


def test_causal_pairs_with_and_without_a_window() -> None:
    assert _pairs(0, 4, None) == 10
    assert _pairs(0, 4, 2) == 1 + 2 + 2 + 2
    assert _pairs(0, 10, 10) == _pairs(0, 10, None)
    assert _pairs(100, 1, None) == 101  # a decode step sees the cache and itself
    assert _pairs(100, 1, 64) == 64


def test_prefill_of_a_sliding_window_model_grows_linearly_past_the_window() -> None:
    d = dep("mistral-7b")
    a, b = prefill_floor(d, 16_384), prefill_floor(d, 32_768)
    assert b.flops / a.flops == pytest.approx(2.0, rel=0.03)


def test_a_70b_bf16_model_does_not_fit_one_h100_even_alone() -> None:
    fit = prefill_floor(dep("llama-3.1-70b"), 1000).fit  # against the runtime's 79.18 GiB
    assert not fit.fits and fit.shortfall_bytes / 1e9 == pytest.approx(141.1 + 0.3 - 85.0, abs=0.5)


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="batch"):
        decode_floor(dep("llama-3.1-8b"), 0, 10)
    with pytest.raises(ValueError, match="context"):
        decode_floor(dep("llama-3.1-8b"), 1, -5)


def _explained(steps: tuple, label: str) -> dict[str, float | str]:
    st = next(s for s in steps if s.label == label)
    return {i.name: i.value for i in (*st.inputs, st.result)}


def test_explain_names_what_the_weights_read_add_up_from() -> None:
    """70.55 GB = 69.5 B params (no input embedding) × 1.015 B (fp8 layers, bf16 lm_head)."""
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"), "fp8",
                           "bf16", 1)
    floor = decode_floor(dep, 32, 2000)
    read = _explained(floor.steps, "weight bytes read")
    assert read["weights read"] == pytest.approx(
        float(read["params a step can read"]) * float(read["bytes per weight (average read)"]),
        rel=1e-4)  # the norms' few MB travel with the activations
    assert 69 < float(read["params a step can read"]) < 70
    memory = _explained(floor.steps, "memory time")
    assert float(memory["of which activations"]) * 1e9 == pytest.approx(floor.activation_bytes)
    assert floor.weight_bytes_read + floor.kv_bytes_read + floor.activation_bytes \
        == pytest.approx(float(memory["bytes"]) * 1e9)
    prefill = _explained(prefill_floor(dep, 4000).steps, "bytes")
    source = str(next(i.source for s in prefill_floor(dep, 4000).steps
                      if s.label == "bytes" for i in s.inputs if i.name == "weights read"))
    params, per_weight = re.fullmatch(r"([\d.]+) B params \(.*\) × ([\d.]+) bytes a weight on "
                                      r"average \(fp8\)", source).groups()  # type: ignore[union-attr]
    # the source's two figures repeat the step's product to its printed digits (70.56 GB)
    assert float(params) * float(per_weight) == pytest.approx(float(prefill["weights read"]),
                                                              abs=0.005)
    assert sum(float(prefill[k]) for k in ("weights read", "KV traffic", "activations")) \
        == pytest.approx(float(prefill["bytes"]), rel=1e-6)
