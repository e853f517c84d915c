"""Why the attention kernel matters at long context."""

from __future__ import annotations

import dataclasses

import pytest

from ridgeline.attention_memory import attention_memory, score_matrix_bytes, tiled_attention_bytes
from ridgeline.catalog import resolve_model
from ridgeline.model import ModelSpec
from tests.conftest import run_cli


def test_64k_scores_are_8_6_gb_per_head_per_layer_in_bf16() -> None:
    assert score_matrix_bytes(65_536, 65_536, 2) / 1e9 == pytest.approx(8.6, abs=0.05)


def test_tiling_moves_orders_of_magnitude_fewer_bytes_at_long_context() -> None:
    report = attention_memory(resolve_model("llama-3.1-8b"), 65_536)
    assert report.total_naive_bytes > 100 * report.total_tiled_bytes
    assert report.total_tiled_bytes < report.total_tiled_worst_bytes


def test_an_unfused_kernel_writes_s_squared_even_on_window_layers() -> None:
    gpt_oss = attention_memory(resolve_model("gpt-oss-120b"), 65_536)
    assert gpt_oss.total_score_bytes == pytest.approx(36 * 64 * score_matrix_bytes(65_536, 65_536, 2))
    assert gpt_oss.windowed_layers == 18
    assert "18 of the layers attend within a window" in "\n".join(gpt_oss.text_lines())
    # a tiled kernel re-reads only the 128-token window (plus its own rows) per query tile:
    # tile 0 sees keys 0-127, each later tile i keys i·128 − 127 to i·128 + 127 (255 keys)
    full = tiled_attention_bytes(65_536, 64, 64, 2, 64, 8, None, 128)
    window = tiled_attention_bytes(65_536, 64, 64, 2, 64, 8, 128, 128)
    assert window == (65_536 * 64 + 64 * (128 + 511 * 255)) * (64 + 64) * 2
    assert gpt_oss.total_tiled_worst_bytes == pytest.approx(18 * full + 18 * window)
    assert window < full / 50


def test_llama_4s_chunked_layers_are_said_to_attend_within_a_chunk() -> None:
    """Llama 4's 36 chunked layers were said to "attend within a window"; a query there sees
    its own chunk, and a layer whose chunk is the whole prompt is not counted."""
    scout = resolve_model("llama-4-scout")
    chunked = sum(1 for layer in scout.layers if layer.mixer == "chunked")
    long = attention_memory(scout, 65_536)
    assert long.windowed_layers == long.chunked_layers == chunked
    assert f"{chunked} of the layers attend within a chunk" in "\n".join(long.text_lines())
    short = attention_memory(scout, 4_096)  # under the 8,192-token chunk
    assert short.windowed_layers == short.chunked_layers == 0
    assert "attend within" not in "\n".join(short.text_lines())
    assert attention_memory(resolve_model("gpt-oss-120b"), 65_536).chunked_layers == 0


def test_mla_prefill_reads_q_and_k_at_192_dims_and_v_and_o_at_128() -> None:
    deepseek = attention_memory(resolve_model("deepseek-v3"), 32_768)
    # Q, O of 128 heads and K, V of 128 heads, each pair at 192 + 128 dims, 61 layers
    assert deepseek.total_tiled_bytes == pytest.approx(32_768 * 256 * (192 + 128) * 2 * 61)
    assert deepseek.total_tiled_bytes / 1e9 == pytest.approx(327.5, abs=0.05)


def _as_mha(name: str) -> ModelSpec:
    """The same model with a KV head for every query head (no GQA)."""
    spec = resolve_model(name)
    assert spec.attention is not None
    return dataclasses.replace(
        spec, attention=dataclasses.replace(spec.attention, num_kv_heads=spec.attention.num_heads)
    )


def test_llama3_70b_tiled_traffic_at_8k_is_24_gb_with_k_and_v_at_its_8_kv_heads() -> None:
    report = attention_memory(resolve_model("llama-3.1-70b"), 8192)
    assert (report.num_heads, report.num_kv_heads) == (64, 8)
    assert report.total_tiled_bytes / 1e9 == pytest.approx(24.16, abs=0.01)
    # K and V at all 64 heads (what GQA avoids) would be 42.9 GB
    assert attention_memory(_as_mha("llama-3.1-70b"), 8192).total_tiled_bytes / 1e9 == (
        pytest.approx(42.95, abs=0.01)
    )


def test_gqa_saves_exactly_the_k_and_v_of_the_heads_it_shares() -> None:
    gqa = attention_memory(resolve_model("llama-3.1-8b"), 32_768)
    mha = attention_memory(_as_mha("llama-3.1-8b"), 32_768)
    spared_heads = gqa.num_heads - gqa.num_kv_heads
    k_and_v_of_one_head = tiled_attention_bytes(32_768, 128, 128, 2, 0, 1)
    assert mha.total_tiled_bytes - gqa.total_tiled_bytes == pytest.approx(
        gqa.attention_layers * spared_heads * k_and_v_of_one_head
    )
    # the naive path expands K and V to every head, so sharing them saves it nothing
    assert mha.total_naive_bytes == gqa.total_naive_bytes


def test_the_printed_ratio_and_tiled_line_follow_the_kv_heads() -> None:
    report = attention_memory(resolve_model("llama-3.1-70b"), 8192)
    text = "\n".join(report.text_lines())
    ratio = report.total_naive_bytes / report.total_tiled_bytes
    assert round(ratio) == 116
    assert f"naive ÷ tiled        {ratio:,.0f}x" in text
    assert "K, V of 8 KV heads once" in text


def test_the_worst_case_rereads_k_and_v_for_each_query_heads_tiles() -> None:
    """1,024 tokens in 8 tiles of 128 rows, causal: tile i sees keys 0 to (i+1)·128 − 1, so
    a head reads 128·(1 + 2 + … + 8) = 4,608 keys, not 8 × 1,024 = 8,192."""
    worst = tiled_attention_bytes(1024, 128, 128, 2, num_heads=4, num_kv_heads=1,
                                  query_tile_rows=128)
    q_and_o = tiled_attention_bytes(1024, 128, 128, 2, num_heads=4, num_kv_heads=0)
    assert worst - q_and_o == 4 * 128 * sum(range(1, 9)) * (128 + 128) * 2  # 4 heads


def test_fp32_scores_double_the_scores_not_q_k_v_and_o() -> None:
    """An eager fp32 softmax keeps its scores at 4 bytes; Q, K, V and O stay bf16. The tiled
    kernel never writes scores, so its traffic does not move; the naive one's S² terms
    double and its Q/K/V/O terms do not."""
    spec = resolve_model("llama-3.1-8b")
    bf16, fp32 = attention_memory(spec, 8192, 2.0), attention_memory(spec, 8192, 4.0)
    assert fp32.total_tiled_bytes == bf16.total_tiled_bytes
    assert fp32.total_score_bytes == 2 * bf16.total_score_bytes
    qkvo = 32 * 32 * 2 * 8192 * (128 + 128) * 2  # layers × heads × 2·S·(d_qk + d_v) × 2 B
    assert fp32.total_naive_bytes - qkvo == pytest.approx(2 * (bf16.total_naive_bytes - qkvo))


def test_a_prompt_some_engines_serve_and_others_refuse_says_which() -> None:
    """`attention` names no engine. Qwen3-8B with Qwen's YaRN block: vLLM stretches it to
    131,072, SGLang and llama.cpp serve its 40,960 positions; a prompt between the two is
    cautioned as past the shorter for those engines and within vLLM's, each limit with its
    source; past every engine's, the one caution every engine's answer gives; within every
    engine's, none."""
    from ridgeline import Deployment, resolve_accelerator
    from ridgeline.catalog import load_data, model_entry
    from ridgeline.config_reader import spec_from_hf_config
    from ridgeline.context_length import positions_label, served_positions
    from ridgeline.reports.expectation import context_caution

    config = {**load_data(f"models/{model_entry('qwen3-8b').file}"), "rope_scaling": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32_768}}
    yarn = spec_from_hf_config(config, "qwen3-yarn")
    short, long = served_positions(yarn, "sglang"), served_positions(yarn, "vllm")
    assert short == served_positions(yarn, "llama.cpp-cuda") and short is not None
    assert long is not None and long > short
    assert attention_memory(yarn, short).caution == ""
    between = attention_memory(yarn, short + 1).caution
    assert between.startswith(f"{short + 1:,} tokens exceed")
    assert f"SGLang and llama.cpp serve it, {short:,} ({positions_label(yarn, 'sglang')})" \
        in between
    assert f"vLLM serves up to {long:,} ({positions_label(yarn, 'vllm')})" in between
    past = attention_memory(yarn, long + 1).caution
    vllm = Deployment.build(yarn, resolve_accelerator("h100"), None, None, 8)
    assert past and past == context_caution(vllm, long + 1)


def test_a_prompt_past_the_models_positions_is_cautioned_as_kv_decode_and_prefill_caution_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`attention --context 1t` prints exabytes with a caution, not a refusal: every command
    that takes a context past the model's positions answers so (fit too, whose verdict names
    the engine's refusal), each with the same caution line; only past 1t is refused."""
    argvs = (("attention", "--model", "llama-3.1-8b", "--context", "1t"),
             ("kv", "llama-3.1-8b", "--context", "1t"),
             ("decode", "llama-3.1-8b", "--gpu", "h100", "--context", "1t"),
             ("prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len", "1t"),
             ("fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "1t"))
    said = []
    for argv in argvs:
        code, out, err = run_cli(capsys, *argv)
        assert code == 0, (argv, err)
        said.append({line for line in out.splitlines()
                     if line.startswith("caution: ") and " exceed " in line})
    assert all(len(s) == 1 for s in said) and len(set.union(*said)) == 1, said
    code, _, err = run_cli(capsys, "attention", "--model", "llama-3.1-8b", "--context", "2t")
    assert code == 2 and err.count("\n") == 1, err


def test_a_ratio_under_ten_keeps_its_decimal() -> None:
    """At a 1-token prompt the naive path moves 1.06 MB against the tiled 655 kB: 1.6x,
    which a whole number would print as 2x (and Gemma-3-27B's 1.3x as 1x)."""
    for name in ("llama-3.1-8b", "gemma-3-27b"):
        report = attention_memory(resolve_model(name), 1)
        ratio = report.total_naive_bytes / report.total_tiled_bytes
        assert 1 < ratio < 10
        assert f"naive ÷ tiled        {ratio:.1f}x" in "\n".join(report.text_lines())
