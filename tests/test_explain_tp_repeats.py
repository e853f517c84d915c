"""--explain's FLOP terms under tensor parallelism: each rank runs on every token what it keeps
whole (routers, MLA's down-projections, K/V heads past their count), and the floors count
that work once a rank. The explain names it apart, so "attention and the rest" is attention
and "weight matmuls" is batch × 2 × the weights a token passes, as the words say. Expected
values come from config.json fields, by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline import Deployment, decode_floor, prefill_floor, resolve_accelerator, resolve_model

MODELS = Path(__file__).resolve().parents[1] / "src" / "ridgeline" / "data" / "models"


def config(name: str) -> dict:
    return json.loads((MODELS / name).read_text())


def inputs(floor: object, label: str) -> dict[str, float]:
    step = next(s for s in floor.steps if s.label == label)  # type: ignore[attr-defined]
    return {q.name: float(q.value) for q in step.inputs if not isinstance(q.value, str)}


def dep(model: str, gpu: str, n: int) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), None, None, n)


def test_deepseek_v3_tp8_prefill_attention_term_is_causal_mla_and_repeats_stand_apart() -> None:
    c = config("deepseek-ai--DeepSeek-V3.json")
    s, tp = 8192, 8
    layers, moe_layers = c["num_hidden_layers"], c["num_hidden_layers"] - c["first_k_dense_replace"]
    h, heads = c["hidden_size"], c["num_attention_heads"]
    pairs = s * (s + 1) / 2  # causal query-key pairs of one prompt
    qk, v = c["qk_nope_head_dim"] + c["qk_rope_head_dim"], c["v_head_dim"]
    attention = 2 * heads * (qk + v) * pairs * layers  # QKᵀ and PV, 2 FLOP a multiply-add
    # whole on every rank: q_a_proj, kv_a_proj_with_mqa (every layer), the router (MoE layers)
    whole = layers * h * (c["q_lora_rank"] + c["kv_lora_rank"] + c["qk_rope_head_dim"]) \
        + moe_layers * h * c["n_routed_experts"]
    repeated = (tp - 1) * 2 * s * whole
    floor = prefill_floor(dep("deepseek-v3", "h200", tp), s)
    got = inputs(floor, "FLOPs")
    assert got["attention and the rest"] * 1e12 == pytest.approx(attention, rel=1e-3)
    assert got["repeated on the TP ranks"] * 1e12 == pytest.approx(repeated, rel=1e-3)


def test_tp1_prefill_has_no_repeats_and_its_rest_is_attention() -> None:
    c = config("meta-llama--Llama-3.1-70B.json")
    s = 8192
    hd = c["hidden_size"] // c["num_attention_heads"]
    attention = 2 * c["num_attention_heads"] * 2 * hd * s * (s + 1) / 2 * c["num_hidden_layers"]
    got = inputs(prefill_floor(dep("llama-3.1-70b", "h100", 1), s), "FLOPs")
    assert "repeated on the TP ranks" not in got
    assert got["attention and the rest"] * 1e12 == pytest.approx(attention, rel=1e-5)


def test_llama_70b_tp16_decode_weight_matmuls_are_batch_times_two_times_its_weights() -> None:
    """8 KV heads over 16 ranks: each K/V head's projection runs on two ranks."""
    c = config("meta-llama--Llama-3.1-70B.json")
    h, inter, vocab = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    heads, kv, layers = c["num_attention_heads"], c["num_key_value_heads"], c["num_hidden_layers"]
    hd = h // heads
    per_layer = 2 * h * heads * hd + 2 * h * kv * hd + 3 * h * inter  # q, o; k, v; gate, up, down
    batch, tp = 32, 16
    matmuls = batch * 2 * (layers * per_layer + vocab * h)  # the LM head's included
    repeated = batch * 2 * layers * 2 * h * kv * hd * (tp // kv - 1)
    got = inputs(decode_floor(dep("llama-3.1-70b", "h100", tp), batch, 8192), "compute time")
    assert got["weight matmuls"] * 1e12 == pytest.approx(matmuls, rel=1e-4)
    assert got["repeated on the TP ranks"] * 1e12 == pytest.approx(repeated, rel=1e-3)
    parts = got["weight matmuls"] + got["repeated on the TP ranks"] + got["attention FLOPs"]
    assert parts == pytest.approx(got["FLOPs"], rel=1e-3)


def test_expert_parallel_repeats_name_the_busiest_ranks_skew() -> None:
    """Under EP the floor counts every rank at the busiest one's expert work: that excess is
    in the repeated term too, and its words say so; attention stays attention alone."""
    from dataclasses import replace

    d = dep("deepseek-v3", "h200", 8)
    plain = prefill_floor(d, 8192)
    ep = prefill_floor(replace(d, expert_parallel=True), 8192)
    step = next(s for s in ep.steps if s.label == "FLOPs")
    words = {q.name: q.source for q in step.inputs}["repeated on the TP ranks"]
    assert "expert parallelism" in words
    a, b = inputs(plain, "FLOPs"), inputs(ep, "FLOPs")
    assert b["attention and the rest"] == pytest.approx(a["attention and the rest"])
    assert b["repeated on the TP ranks"] > a["repeated on the TP ranks"]
