"""vLLM --fully-sharded-loras under tensor parallelism: each adapted linear's gather or
all-reduce of the shrink's buffer, the step's "lora collectives" link part
(lora_collectives.py), priced as the base model's collectives are (parallel.py)."""

from __future__ import annotations

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cost import IDEAL, StepCost, batch_shape, decode_batch, step_cost, step_terms
from ridgeline.engines import EngineProfile, profile_for
from ridgeline.lora_collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    LORA_COLLECTIVES,
    lora_collective_time_s,
    lora_collectives,
)
from ridgeline.lora_step import BUFFER_BYTES, INPUT_BYTES, LORA_OP
from ridgeline.parallel import (
    RING_LAUNCH_S,
    all_gather_time_s,
    all_reduce_time_s,
    link_latency_s,
    rank_link_bytes_per_s,
)
from ridgeline.vllm_lora import LoRASettings, lora_modules

SHARDED = LoRASettings(max_loras=4, max_lora_rank=64, fully_sharded_loras=True)
PLAIN = LoRASettings(max_loras=4, max_lora_rank=64)


def deployment(model: str = "llama-3.1-8b", gpus: int = 2, gpu: str = "h100-sxm"
               ) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), None,
                            num_gpus=gpus, engine="vllm")


def link_part(dep: Deployment, batch: int, profile: EngineProfile = IDEAL) -> float:
    cost = step_cost(dep, decode_batch(batch, 1024), profile)
    return sum(op.time_s for op in cost.ops if op.name == LORA_COLLECTIVES)


def test_qkv_proj_gathers_tokens_times_rank_times_its_three_slices_in_float32() -> None:
    """_mcp_apply all-gathers the (slices, tokens, rank ÷ TP) float32 buffer to the full
    rank: the payload is the gathered tensor, from the module's own shapes."""
    dep = deployment().with_lora(SHARDED)
    qkv = next(m for m in lora_modules(dep, SHARDED) if m.name == "qkv_proj")
    assert (qkv.slices, qkv.a_rank, qkv.b_rank) == (3, 32, 64)  # A's rank split over TP2
    (c,) = [c for c in lora_collectives(dep, 8) if c.module == "qkv_proj"]
    assert c.kind == ALL_GATHER and c.ranks == 2
    assert c.message_bytes == 8 * qkv.b_rank * qkv.slices * BUFFER_BYTES == 6144
    # o_proj all-reduces its partial (tokens × full rank) buffer, one slice
    (o,) = [c for c in lora_collectives(dep, 8) if c.module == "o_proj"]
    assert o.kind == ALL_REDUCE and o.message_bytes == 8 * 64 * BUFFER_BYTES
    # linear in the step's tokens
    assert [c.message_bytes * 4 for c in lora_collectives(dep, 8)] == \
        [c.message_bytes for c in lora_collectives(dep, 32)]


def test_llama_8b_at_tp2_issues_a_collective_a_linear_128_a_step() -> None:
    """Every layer's qkv_proj and gate_up_proj gather, its o_proj and down_proj reduce; the
    embedding's and lm_head's adapters, whole on every GPU, issue none."""
    dep = deployment().with_lora(SHARDED)
    found = lora_collectives(dep, 8)
    layers = dep.model.num_layers
    linears = [m for m in lora_modules(dep, SHARDED) if m.name not in ("embed_tokens", "lm_head")]
    assert sum(c.count for c in found) == sum(m.count for m in linears) == 4 * layers == 128
    assert sum(c.count for c in found if c.kind == ALL_GATHER) == 2 * layers
    assert sum(c.count for c in found if c.kind == ALL_REDUCE) == 2 * layers
    assert {c.module for c in found} == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}


def test_the_link_part_prices_each_at_the_base_models_collectives() -> None:
    dep = deployment().with_lora(SHARDED)
    acc = dep.accelerator
    want = sum(c.count * (all_gather_time_s if c.kind == ALL_GATHER else all_reduce_time_s)(
        c.message_bytes, 2, acc) for c in lora_collectives(dep, 8))
    assert lora_collective_time_s(dep, 8) == pytest.approx(want, rel=1e-12)
    assert link_part(dep, 8) == pytest.approx(want, rel=1e-12)
    terms = step_terms(dep, batch_shape(dep, decode_batch(8, 1024)))
    assert dict(terms.link)[LORA_COLLECTIVES] == pytest.approx(want, rel=1e-12)


def test_without_fully_sharded_loras_no_layer_adds_a_collective() -> None:
    """Column-parallel: A whole, B the partition's, each rank its own columns; row-parallel:
    the partial expand rides the base all-reduce (RowParallelLinearWithLoRA.forward)."""
    dep = deployment().with_lora(PLAIN)
    assert lora_collectives(dep, 8) == ()
    assert link_part(dep, 8) == 0.0
    assert LORA_COLLECTIVES not in dict(step_terms(dep, batch_shape(dep, decode_batch(8, 1024))).link)


def test_at_tp1_fully_sharded_is_the_plain_step() -> None:
    one = deployment(gpus=1)
    assert lora_collectives(one.with_lora(SHARDED), 8) == ()
    batch = decode_batch(8, 1024)
    profile = profile_for("vllm")
    assert step_cost(one.with_lora(SHARDED), batch, profile).time_s == \
        step_cost(one.with_lora(PLAIN), batch, profile).time_s


def test_fully_sharded_adds_its_collectives_to_the_engines_step() -> None:
    """The step under --fully-sharded-loras at TP2 is the plain LoRA step, plus its
    collectives, less the A bytes its adapters' part no longer reads (half A's rank a rank)."""
    profile = profile_for("vllm")
    batch = decode_batch(8, 1024)
    plain = step_cost(deployment().with_lora(PLAIN), batch, profile)
    sharded = step_cost(deployment().with_lora(SHARDED), batch, profile)
    link = lora_collective_time_s(deployment().with_lora(SHARDED), 8)
    assert link > 0 and LORA_COLLECTIVES not in {op.name for op in plain.ops}

    def adapters(cost: StepCost) -> float:
        return sum(op.time_s for op in cost.ops if op.name == LORA_OP)

    assert sharded.time_s - plain.time_s == pytest.approx(
        link + adapters(sharded) - adapters(plain), rel=1e-9)
    # 64 gathers and 64 reductions of a few KB: latency, about 10 µs each on NVLink
    assert 128 * 8e-6 < link < 128 * 20e-6


def test_active_loras_0_keeps_the_collectives_outside_the_kernels_check() -> None:
    none = LoRASettings(max_loras=4, max_lora_rank=64, fully_sharded_loras=True,
                        active_loras=0)
    dep = deployment().with_lora(none)
    assert lora_collective_time_s(dep, 8) == lora_collective_time_s(
        deployment().with_lora(SHARDED), 8) > 0


def test_a_moe_layers_experts_gather_and_reduce_every_routed_pair_in_bf16() -> None:
    """FusedMoEWithLoRA (_fused_moe_lora): w13's (2, tokens, top_k, rank ÷ TP) buffer in the
    activations' dtype gathered, w2's (1, tokens, top_k, rank) reduced; the router's none."""
    dep = deployment("qwen3-30b-a3b").with_lora(SHARDED)
    moe = dep.model.moe
    assert moe is not None
    found = {c.module: c for c in lora_collectives(dep, 8)}
    assert set(found) == {"qkv_proj", "o_proj", "experts.w13", "experts.w2"}
    top_k = moe.experts_per_token
    assert found["experts.w13"].message_bytes == 2 * 8 * top_k * 64 * INPUT_BYTES
    assert found["experts.w2"].message_bytes == 8 * top_k * 64 * INPUT_BYTES
    assert found["experts.w13"].kind == ALL_GATHER and found["experts.w2"].kind == ALL_REDUCE


def test_an_all_gather_is_the_all_gather_half_of_a_ring() -> None:
    """n−1 steps of bytes/n after the launch: at 2 NVLink ranks one step."""
    acc = resolve_accelerator("h100-sxm")
    message = 6144.0
    want = RING_LAUNCH_S + link_latency_s(acc) + message / (2 * rank_link_bytes_per_s(acc, 2))
    assert all_gather_time_s(message, 2, acc) == pytest.approx(want, rel=1e-12)
    assert all_gather_time_s(message, 1, acc) == all_gather_time_s(0.0, 4, acc) == 0.0
    # a big message: half the ring all-reduce's bytes on the wire
    big = 1e9
    ring_reduce = RING_LAUNCH_S + 2 * 3 * (link_latency_s(acc)
                                           + big / (4 * rank_link_bytes_per_s(acc, 4)))
    gather = all_gather_time_s(big, 4, acc)
    assert gather - RING_LAUNCH_S == pytest.approx((ring_reduce - RING_LAUNCH_S) / 2, rel=1e-12)
