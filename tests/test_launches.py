"""The weight matmuls a layer launches, and what the serving profile charges for them."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.cost import decode_batch, step_cost
from ridgeline.deployment import Deployment
from ridgeline.engines import profile_for
from ridgeline.hardware import resolve_accelerator
from ridgeline.launches import layer_matmuls, step_matmuls
from ridgeline.model import ModelSpec


def kinds(name: str) -> Counter[int]:
    model = resolve_model(name)
    return Counter(layer_matmuls(model, layer) for layer in model.layers)


def test_a_dense_gqa_layer_launches_four_matmuls() -> None:
    """qkv_proj, o_proj, gate_up_proj, down_proj: Llama-3.1-70B's 80 layers launch 320."""
    assert kinds("llama-3.1-70b") == Counter({4: 80})
    assert step_matmuls(resolve_model("llama-3.1-70b")) == 320


def test_deepseek_layers_launch_mla_and_a_shared_expert() -> None:
    """MLA decode: fused q_a/kv_a, q_b, W_UK, W_UV, o_proj (5); the first
    first_k_dense_replace = 3 layers add a dense MLP (2), the other 58 a router, two expert
    projections and a shared expert's two (5)."""
    assert kinds("deepseek-v3") == Counter({10: 58, 7: 3})
    assert kinds("kimi-k2-instruct") == Counter({10: 60, 7: 1})  # first_k_dense_replace = 1


def test_moe_blocks_count_their_router_experts_and_shared_parts() -> None:
    assert kinds("gpt-oss-120b") == Counter({5: 36})  # no shared expert
    assert kinds("mixtral-8x7b-v0.1") == Counter({5: 32})
    # Llama-4: a shared expert; Maverick alternates MoE and dense layers, Scout does not
    assert kinds("llama-4-maverick-17b-128e-instruct") == Counter({7: 24, 4: 24})
    assert kinds("llama-4-scout-17b-16e-instruct") == Counter({7: 48})


def test_hybrid_mixers_count_their_projections() -> None:
    # Qwen3-Next: three Gated DeltaNet layers (in_proj_qkvz, in_proj_ba, out_proj) to one
    # attention layer, each with router, experts, shared expert and its sigmoid gate (6)
    assert kinds("qwen3-next-80b-a3b-thinking") == Counter({9: 36, 8: 12})
    # Jamba: Mamba-1 mixers (in, x, dt, out) in 28 layers, attention in 4; MoE every other
    assert kinds("ai21-jamba-1.5-mini") == Counter({7: 16, 6: 12, 4: 4})
    # Nemotron-H: each layer one Mamba-2 mixer, attention or MLP: two matmuls apiece
    assert kinds("nemotron-h-56b-base-8k") == Counter({2: 118})


def test_the_serving_profile_prices_matmuls_so_a_deepseek_layer_costs_more() -> None:
    """The bundled serving profile's fixed cost per layer is larger for a DeepSeek-V3 layer
    (ten matmuls) than for a Llama layer (four), by six matmuls' cost."""
    profile = profile_for("vllm")
    assert profile.matmul_overhead_s > 0
    llama = profile.overhead_s(80, False, 320) / 80
    deepseek = profile.overhead_s(61, False, 601) / 61
    step = profile.step_overhead_s
    assert deepseek - llama == pytest.approx(
        (601 / 61 - 4) * profile.matmul_overhead_s + step / 61 - step / 80)
    assert profile_for("llama.cpp-cuda").matmul_overhead_s == 0  # unfused projections


def test_step_cost_charges_the_models_matmuls() -> None:
    """A decode step's overhead entry is the profile's fixed costs for this model's layers and
    matmuls; without the per-matmul cost it falls by exactly matmuls × that cost."""
    dep = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("b200"), "fp8",
                           None, 8)
    profile = profile_for("vllm")
    overhead = {op.name: op.time_s for op in step_cost(dep, decode_batch(1, 1000), profile).ops}
    without = {op.name: op.time_s for op in step_cost(
        dep, decode_batch(1, 1000), replace(profile, matmul_overhead_s=0.0)).ops}
    assert overhead["overhead"] == pytest.approx(profile.overhead_s(61, False, 601))
    assert overhead["overhead"] - without["overhead"] == pytest.approx(
        601 * profile.matmul_overhead_s)


def test_explain_shows_the_matmuls_behind_the_fixed_cost(
        capsys: pytest.CaptureFixture[str]) -> None:
    """decode --explain writes the overhead as its parts: per step, layers × per layer and
    weight-matmul launches × per matmul, and the parts add up to the overhead it prints."""
    from ridgeline.cli import main

    assert main(["decode", "deepseek-r1", "--gpu", "b200", "--num-gpus", "8", "--weights",
                 "fp8", "--batch", "1", "--context", "1000", "--explain"]) == 0
    out = capsys.readouterr().out
    block = out.split("engine overhead:")[1].split("=> overhead")[0]
    assert "weight-matmul launches = 601" in block and "layers = 61" in block
    profile = profile_for("vllm")
    shown = float(out.split("engine overhead:")[1].split("=> overhead = ")[1].split()[0])
    assert shown == pytest.approx(profile.overhead_s(61, False, 601) * 1e3, rel=1e-3)


def test_sglang_folds_deepseeks_shared_expert_into_the_routed_ones() -> None:
    """SGLang runs DeepSeek-V3/R1's one shared expert as one more routed expert (its
    determine_num_fused_shared_experts): 58 MoE layers of 8 matmuls, not 10. Not for
    Kimi-K2 (384 routed experts), not on a Turing card, not under NVIDIA expert parallelism,
    and never in vLLM."""
    from ridgeline.launches import deployment_matmuls, fuses_shared_expert

    def dep(model: str, gpu: str, engine: str, ep: bool = False) -> Deployment:
        return Deployment.build(resolve_model(model), resolve_accelerator(gpu), "fp8", None, 8,
                                engine=engine, expert_parallel=ep)

    assert deployment_matmuls(dep("deepseek-r1", "b200", "sglang")) == 3 * 7 + 58 * 8
    assert deployment_matmuls(dep("deepseek-r1", "b200", "vllm")) == 601
    assert fuses_shared_expert(dep("deepseek-r1", "mi300x", "sglang"))  # gfx942
    assert not fuses_shared_expert(dep("deepseek-r1", "h100", "sglang", ep=True))
    assert not fuses_shared_expert(dep("kimi-k2-instruct", "b200", "sglang"))
    assert not fuses_shared_expert(dep("llama-3.1-70b", "b200", "sglang"))
    # TensorRT-LLM runs DeepSeek's shared expert on an auxiliary stream: off the critical path
    assert deployment_matmuls(dep("deepseek-r1", "b200", "trtllm")) == 3 * 7 + 58 * 8
    assert deployment_matmuls(dep("qwen3-235b-a22b", "b200", "trtllm")) == \
        deployment_matmuls(dep("qwen3-235b-a22b", "b200", "vllm"))  # no shared expert


def test_a_calibration_on_one_model_keeps_the_bundled_cost_per_matmul() -> None:
    """Rows of one model cannot tell a cost per matmul from a cost per layer: a calibration on
    them keeps the bundled profile's per-matmul cost and says so, so that a DeepSeek layer
    it then prices still costs more than the Llama layers it was fitted on."""
    from ridgeline.calibrate import fit_profiles
    from ridgeline.measurements import read_measurements
    from tests.conftest import LOWBATCH

    rows = [r for r in read_measurements(LOWBATCH).rows
            if r.engine == "vllm" and "nightly-L3-8B" in r.id]
    rows = [replace(r, id=f"{r.id}-{i}", batch=b, value=r.value * b / 8 * (0.97 + 0.01 * i))
            for i, b in enumerate((1, 2, 4, 8, 16, 32)) for r in rows]
    profile = fit_profiles(rows)["vllm"]
    assert profile.matmul_overhead_s == profile_for("vllm").matmul_overhead_s > 0
    assert "held at" in profile.source


def test_moe_layers_counts_the_layers_that_route() -> None:
    """DeepSeek-V3 keeps its first three layers dense (first_k_dense_replace): 58 of 61 route;
    Qwen3-30B-A3B routes in all 48; a dense Llama in none."""
    from ridgeline.launches import moe_layers

    assert moe_layers(resolve_model("deepseek-v3")) == 61 - 3
    qwen = resolve_model("qwen3-30b-a3b")
    assert moe_layers(qwen) == qwen.num_layers == 48
    assert moe_layers(resolve_model("llama-3.1-8b")) == 0


def test_deepseek_v32s_shared_expert_overlaps_on_tensorrt_llm_not_fused_on_sglang() -> None:
    """TensorRT-LLM serves DeepSeek-V3.2 with its DeepseekV3ForCausalLM (registered under
    DeepseekV32ForCausalLM too), so its shared expert runs on the auxiliary stream as V3's
    does: 58 MoE layers of 8 matmuls on the critical path. SGLang's DeepseekV32ForCausalLM
    keeps determine_num_fused_shared_experts' 'DeepseekV3ForCausalLM' check, so it does not
    fuse: 10, as vLLM. Before, V3.2's model_type (deepseek_v32) was not read as V3's under
    TensorRT-LLM: 601 matmuls, its 8×H200 decode at 8,192 tokens 11.49 ms, not 9.83."""
    from ridgeline.launches import deployment_matmuls
    from tests.test_ds_mla_cache import v32_config

    v3, v32 = resolve_model("deepseek-v3"), ModelSpec.from_hf_config(v32_config(), "v32")

    def launches(model: ModelSpec, engine: str) -> int:
        return deployment_matmuls(Deployment.build(model, resolve_accelerator("h200"), "fp8",
                                                   None, 8, engine=engine))

    overlapped = 58 * 2  # each MoE layer's shared expert: gate_up and down
    assert launches(v3, "vllm") - launches(v3, "trtllm") == overlapped
    assert launches(v32, "vllm") - launches(v32, "trtllm") == overlapped
    assert launches(v32, "sglang") == launches(v32, "vllm")
