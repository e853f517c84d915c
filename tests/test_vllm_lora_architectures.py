"""vLLM --enable-lora beyond Llama and Qwen2: Qwen3, Gemma 2/3, Phi-3 (one slice a packed
module), Llama-3.2's tied head, and the MoE classes' expert and router buffers, each against
a sum of the tensors vLLM allocates, shape by shape, from config.json (vllm_lora.py;
engines.json vllm.lora architectures)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.datafiles import load_data
from ridgeline.lora_step import lora_step_work
from ridgeline.vllm_lora import LoRASettings, lora_bytes, lora_modules, lora_problem

FOUR_RANK_32 = LoRASettings(max_loras=4, max_lora_rank=32)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def deployment(model: str, tp: int = 1, **model_changes: Any) -> Deployment:
    spec = replace(resolve_model(model), **model_changes) if model_changes else \
        resolve_model(model)
    return Deployment.build(spec, resolve_accelerator("h200"), num_gpus=tp, engine="vllm")


def config(name: str) -> dict[str, Any]:
    return dict(load_data(f"models/{name}.json"))


def attention_shapes(c: dict[str, Any], loras: int, rank: int, tp: int, qkv_slices: int = 3
                     ) -> list[tuple[int, int, int]]:
    """qkv_proj and o_proj's stacked A (max_loras, rank, in) and B (max_loras, out, rank)."""
    h, heads, kv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim") or h // heads
    q, k = heads // tp * d, kv // tp * d
    shapes = [(loras, rank, h)] * qkv_slices  # A: the whole input, once a slice
    shapes += [(loras, q, rank), (loras, k, rank), (loras, k, rank)] if qkv_slices == 3 \
        else [(loras, q + 2 * k, rank)]  # B: the partition's rows
    return [*shapes, (loras, rank, heads * d // tp), (loras, h, rank)]  # o_proj


def mlp_shapes(c: dict[str, Any], loras: int, rank: int, tp: int, slices: int = 2
               ) -> list[tuple[int, int, int]]:
    h, inter = c["hidden_size"], c["intermediate_size"] // tp
    shapes = [(loras, rank, h)] * slices  # gate_up_proj A
    shapes += [(loras, inter, rank)] * 2 if slices == 2 else [(loras, 2 * inter, rank)]
    return [*shapes, (loras, rank, inter), (loras, h, rank)]  # down_proj


def tables(c: dict[str, Any], loras: int, rank: int) -> int:
    """embed_tokens' A (vocab × rank) and B (hidden × rank), lm_head's A and B, whole."""
    return 2 * loras * rank * (c["vocab_size"] + c["hidden_size"])


def total_bytes(per_layer: list[tuple[int, int, int]], layers: int, table_elements: int) -> int:
    return 2 * (layers * sum(a * b * e for a, b, e in per_layer) + table_elements)


def test_qwen3_8b_at_tp2_rank_32_is_its_shape_sum_with_both_tables() -> None:
    c = config("Qwen--Qwen3-8B")
    expected = total_bytes(attention_shapes(c, 4, 32, 2) + mlp_shapes(c, 4, 32, 2),
                           c["num_hidden_layers"], tables(c, 4, 32))
    assert lora_bytes(deployment("qwen3-8b", tp=2), FOUR_RANK_32) == expected


def test_qwen3_before_v0_16_lists_no_embedding_modules_and_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ("fit", "qwen3-8b", "--gpu", "h100-sxm", "--max-model-len", "8192", "--enable-lora")
    assert run(capsys, *base)[0] == 0
    code, _, err = run(capsys, *base, "--engine-version", "0.15")
    assert code == 2
    assert "PR #29816" in err and len(err.strip().splitlines()) == 1


def test_llama_3_2_1b_tied_head_keeps_both_tables_as_untied() -> None:
    c = config("meta-llama--Llama-3.2-1B")
    assert c["tie_word_embeddings"]
    expected = total_bytes(attention_shapes(c, 4, 32, 1) + mlp_shapes(c, 4, 32, 1),
                           c["num_hidden_layers"], tables(c, 4, 32))
    tied = lora_bytes(deployment("llama-3.2-1b"), FOUR_RANK_32)
    assert tied == expected
    assert tied == lora_bytes(deployment("llama-3.2-1b", tie_word_embeddings=False),
                              FOUR_RANK_32)


def test_a_tied_qwen3_whose_head_is_the_embedding_is_refused() -> None:
    why = lora_problem(deployment("qwen3-8b", tie_word_embeddings=True), FOUR_RANK_32, None)
    assert "lm_head is the embedding module itself" in why


@pytest.mark.parametrize("model, name", [("gemma-2-9b", "google--gemma-2-9b-it")])
def test_gemma_adapts_its_linear_layers_only(model: str, name: str) -> None:
    c = config(name)
    expected = total_bytes(attention_shapes(c, 4, 32, 1) + mlp_shapes(c, 4, 32, 1),
                           c["num_hidden_layers"], 0)
    assert lora_bytes(deployment(model), FOUR_RANK_32) == expected


def test_gemma_3s_vocab_past_the_lm_head_limit_is_no_bar_without_an_lm_head() -> None:
    dep = deployment("gemma-3-27b", tp=2)
    assert dep.model.vocab_size > 258048
    assert lora_problem(dep, FOUR_RANK_32, None) == ""
    assert {m.name for m in lora_modules(dep, FOUR_RANK_32)} == {
        "qkv_proj", "o_proj", "gate_up_proj", "down_proj"}


def test_phi_4s_fused_checkpoint_modules_take_one_slice() -> None:
    c = config("microsoft--phi-4")
    expected = total_bytes(attention_shapes(c, 4, 32, 2, qkv_slices=1)
                           + mlp_shapes(c, 4, 32, 2, slices=1),
                           c["num_hidden_layers"], tables(c, 4, 32))
    assert lora_bytes(deployment("phi-4", tp=2), FOUR_RANK_32) == expected


def expert_elements(c: dict[str, Any], loras: int, rank: int, tp: int) -> tuple[int, int]:
    """One MoE layer's FusedMoEWithLoRA (w13 A and B × 2 slices, w2 A and B, every
    expert) and its ReplicatedLinear router (A rank × hidden, B experts × rank)."""
    h, e, inter = c["hidden_size"], c["num_experts"], c["moe_intermediate_size"] // tp
    w13 = 2 * (loras * e * rank * h) + 2 * (loras * e * inter * rank)
    w2 = loras * e * rank * inter + loras * e * h * rank
    return w13 + w2, loras * (rank * h + e * rank)


@pytest.mark.parametrize("tp", [1, 2])
def test_qwen3_30b_a3b_expert_and_router_buffers_are_their_shape_sums(tp: int) -> None:
    c = config("Qwen--Qwen3-30B-A3B")
    dep = deployment("qwen3-30b-a3b", tp=tp)
    experts, router = expert_elements(c, 4, 32, tp)
    by_name = {m.name: m.total_bytes for m in lora_modules(dep, FOUR_RANK_32)}
    layers = c["num_hidden_layers"]
    assert by_name["experts.w13"] + by_name["experts.w2"] == 2 * layers * experts
    assert by_name["gate"] == 2 * layers * router
    expected = total_bytes(attention_shapes(c, 4, 32, tp), layers, tables(c, 4, 32)) \
        + 2 * layers * (experts + router)
    assert lora_bytes(dep, FOUR_RANK_32) == expected
    # the experts' A is whole on every GPU: 12.4 GiB at TP1, most of it still at TP2
    assert by_name["experts.w13"] + by_name["experts.w2"] > 0.6 * 2 * layers * \
        expert_elements(c, 4, 32, 1)[0]


def test_fully_sharded_experts_split_w13_a_by_rank_and_w2_b_by_hidden() -> None:
    dep = deployment("qwen3-30b-a3b", tp=2)
    sharded = {m.name: m for m in lora_modules(dep, replace(FOUR_RANK_32,
                                                            fully_sharded_loras=True))}
    assert (sharded["experts.w13"].a_rank, sharded["experts.w2"].output_width) == (16, 1024)
    assert sharded["gate"].a_rank == 32  # the replicated router is never sharded


def test_one_token_reads_its_top_k_experts_adapters() -> None:
    """Decode of one sequence: the experts' A and B read are those of the 8 experts its
    token routes to, in one adapter; the FLOPs 2 × 8 routed pairs × (A + B)."""
    dep = deployment("qwen3-30b-a3b").with_lora(FOUR_RANK_32)
    modules = lora_modules(dep, FOUR_RANK_32)
    work = dict(zip((m.name for m in modules), lora_step_work(dep, 1, 1)))
    for name in ("experts.w13", "experts.w2"):
        m = next(x for x in modules if x.name == name)
        _, flops, nbytes, count = work[name]
        assert count == 48
        assert flops == pytest.approx(2 * 8 * (m.a_elements + m.b_elements))
        one_expert = (m.a_elements + m.b_elements) * 2
        # + per routed pair: x in bf16, the fp32 buffer zeroed, written and read, the
        # output read and written back
        pairs = 8 * (2 * m.input_width + 3 * 4 * m.slices * m.a_rank + 2 * 2 * m.output_width)
        assert nbytes == pytest.approx(8 * one_expert + pairs, rel=1e-12)
    # a long prefill reads nearly every expert's A and B of its adapter
    prefill = dict(zip((m.name for m in modules), lora_step_work(dep, 4096, 1)))
    w2 = next(x for x in modules if x.name == "experts.w2")
    assert prefill["experts.w2"][2] > 128 * (w2.a_elements + w2.b_elements) * 2


def test_fit_sizes_mixtral_and_qwen3_moe_with_lora(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fit", "qwen3-30b-a3b", "--gpu", "h200", "--max-model-len",
                       "8192", "--enable-lora", "--max-loras", "4", "--max-lora-rank", "32")
    assert code == 0
    line = next(row for row in out.splitlines() if row.startswith("− LoRA adapters"))
    expected = lora_bytes(deployment("qwen3-30b-a3b"), FOUR_RANK_32) / 2**30
    assert line.split()[-2] == f"{expected:,.2f}"
    code, _, _ = run(capsys, "fit", "mixtral-8x7b", "--gpu", "h100-sxm", "--num-gpus", "2",
                     "--max-model-len", "8192", "--enable-lora")
    assert code == 0


def test_expert_parallel_with_lora_exits_2_in_vllms_words(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "fit", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--num-gpus", "2",
                       "--max-model-len", "8192", "--enable-expert-parallel", "--enable-lora")
    assert code == 2
    assert "EP support for Fused MoE LoRA is not implemented yet" in err


@pytest.mark.parametrize("model, gpus, said", [
    ("gpt-oss-20b", "1", "GptOssForCausalLM is not modelled"),
    ("deepseek-v3", "8", "DeepseekV3ForCausalLM is not modelled"),
])
def test_a_class_still_unsized_exits_2(capsys: pytest.CaptureFixture[str], model: str,
                                       gpus: str, said: str) -> None:
    code, _, err = run(capsys, "fit", model, "--gpu", "h200", "--num-gpus", gpus,
                       "--max-model-len", "8192", "--enable-lora")
    assert code == 2
    assert said in err and len(err.strip().splitlines()) == 1
