"""What tensor-parallel ranks keep whole: the MoE router, MLA's down-projections, and K/V
heads past their count (vLLM's ReplicatedLinear / disable_tp=True layers)."""

from __future__ import annotations

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.floors import decode_floor
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.params import layer_params, rank_params
from ridgeline.quantization import ATTENTION, EXPERTS, ROUTER
from ridgeline.stages import pipeline_stages, stage_weight_bytes
from tests.conftest import run_cli


def dep(model: str, gpus: int, gpu: str = "h200", pp: int = 1) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), None, None, gpus, pp)


def test_deepseek_ranks_keep_the_router_and_mla_down_projections_whole() -> None:
    """DeepSeek-V3 at TP8: each rank holds q_a (7,168 × 1,536) and kv_a (7,168 × 576) whole,
    and a slice of the rest of the attention; the router (256 × 7,168) whole."""
    spec = resolve_model("deepseek-v3")
    moe_layer = spec.layers[-1]
    attention = layer_params(spec, moe_layer)[ATTENTION]
    down = 7168 * 1536 + 7168 * (512 + 64)
    assert rank_params(spec, moe_layer, ATTENTION, 8) == pytest.approx(
        (attention - down) / 8 + down)
    assert rank_params(spec, moe_layer, ROUTER, 8) == 256 * 7168
    assert rank_params(spec, moe_layer, EXPERTS, 8) == layer_params(spec, moe_layer)[EXPERTS] / 8
    assert rank_params(spec, moe_layer, ATTENTION, 1) == attention


def test_kv_head_projections_copied_past_the_head_count() -> None:
    """Qwen3-235B-A22B has 4 KV heads: at TP8 each rank keeps one head's K and V projections
    (the pairs copied), at TP4 an even share."""
    spec = resolve_model("qwen3-235b-a22b")
    layer = spec.layers[0]
    attention = layer_params(spec, layer)[ATTENTION]
    head = 2 * 4096 * 128  # one KV head's K and V projections
    assert rank_params(spec, layer, ATTENTION, 4) == pytest.approx(attention / 4)
    assert rank_params(spec, layer, ATTENTION, 8) == pytest.approx((attention - 4 * head) / 8
                                                                   + head)


def test_copies_add_to_the_weights_per_gpu_in_the_pool() -> None:
    """The pool's weights per GPU are the checkpoint's share plus what each rank keeps whole:
    about 0.93 GiB more a GPU for DeepSeek-V3 at TP8, so fewer tokens than an even split."""
    d = dep("deepseek-v3", 8)
    spec = d.model
    fp8 = d.weights.format_of(ATTENTION).bytes_per_weight
    bf16_router = d.weights.format_of(ROUTER).bytes_per_weight
    moe_layers = sum(1 for layer in spec.layers if layer.ffn == "moe")
    per_copy = moe_layers * 256 * 7168 * bf16_router + 61 * 7168 * (1536 + 576) * fp8
    assert d.tp_copies_bytes == pytest.approx(7 * per_copy)
    pool = kv_pool(d, EngineSettings(max_model_len=32768))
    assert pool.weight_bytes == pytest.approx((d.weight_bytes + d.tp_copies_bytes) / 8)
    assert d.tp_copies_bytes / 8 / 2**30 == pytest.approx(0.93, abs=0.01)


def test_no_copies_on_one_gpu_or_for_a_dense_model_within_its_kv_heads() -> None:
    assert dep("deepseek-v3", 8, "b200").tp_copies_bytes > 0
    assert Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"),
                            num_gpus=1).tp_copies_bytes == 0.0
    assert dep("llama-3.1-70b", 8).tp_copies_bytes == 0.0  # 8 KV heads over 8 ranks


def test_pipeline_stages_hold_their_own_layers_copies() -> None:
    """Over TP8 × PP2 the stages' copies add up to the whole model's at TP8."""
    d = dep("deepseek-v3", 16, pp=2)
    stages = pipeline_stages(d)
    with_copies = sum(stage_weight_bytes(d, s, 0.0) for s in stages) * 8
    assert with_copies == pytest.approx(d.weight_bytes + d.tp_copies_bytes)


def test_each_rank_reads_its_copies_in_a_decode_step() -> None:
    """The step's bytes per rank carry the whole router and down-projections: over the TP
    group, the floor's weights read are one copy of everything plus the copies."""
    d = dep("deepseek-v3", 8)
    floor = decode_floor(d, 1, 2000)
    one_copy = d.non_expert_bytes_read + d.expert_bytes * 8 / 256
    assert floor.weight_bytes_read == pytest.approx(one_copy + d.tp_copies_bytes, rel=1e-3)
    assert d.tp_copies_bytes / one_copy > 0.2  # a fifth more read on every rank at batch 1


def test_decode_explain_keeps_the_share_touched(capsys: pytest.CaptureFixture[str]) -> None:
    """--explain names the copies as their own term, so the share of the experts touched
    stays 8 of 256 at batch 1."""
    _, out, _ = run_cli(capsys, "decode", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8",
                  "--batch", "1", "--context", "2000", "--explain")
    assert "share touched = 0.03125" in out
    assert "copies kept whole" in out
