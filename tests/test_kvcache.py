"""KV-cache bytes by layer kind."""

from __future__ import annotations

import json

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.kvcache import conversations_that_fit, kv_footprint, kv_replication
from ridgeline.units import GIB, KIB


def test_llama_3_1_70b_caches_320_kib_per_token_in_bf16() -> None:
    assert kv_footprint(resolve_model("llama-3.1-70b"), 1, 2).bytes_per_token_growing == 320 * KIB


def test_gpt_oss_120b_grows_36_kib_per_token_not_72() -> None:
    kv = kv_footprint(resolve_model("gpt-oss-120b"), 4096, 2)
    assert kv.bytes_per_token_growing == 36 * KIB
    assert kv.bytes_per_token_naive == 72 * KIB
    assert kv.windowed_bytes == 18 * 128 * 2 * KIB  # 18 sliding layers stop at 128 tokens


def test_llama_3_1_70b_at_128k_needs_40_gib_per_conversation() -> None:
    kv = kv_footprint(resolve_model("llama-3.1-70b"), 131072, 2)
    assert kv.bytes_per_sequence / GIB == pytest.approx(40)


def test_deepseek_v3_mla_caches_one_576_wide_latent_per_layer() -> None:
    kv = kv_footprint(resolve_model("deepseek-v3"), 1, 2)
    assert kv.bytes_per_token_growing == 61 * (512 + 64) * 2


def test_linear_attention_and_ssm_state_is_constant_in_context() -> None:
    for model in ("qwen3-next-80b-a3b", "jamba-1.5-mini", "nemotron-h-56b"):
        spec = resolve_model(model)
        short, long = kv_footprint(spec, 1000, 2), kv_footprint(spec, 100_000, 2)
        assert short.state_bytes == long.state_bytes > 0
        growth = long.bytes_per_sequence - short.bytes_per_sequence
        assert growth == pytest.approx(99_000 * short.bytes_per_token_growing)


def test_sliding_window_stops_growing_at_the_window() -> None:
    spec = resolve_model("mistral-7b")
    assert kv_footprint(spec, 4096, 2).bytes_per_sequence == kv_footprint(spec, 32768, 2).bytes_per_sequence


def test_kv_heads_replicate_when_tp_exceeds_them() -> None:
    falcon = resolve_model("falcon-7b")  # one KV head
    assert kv_replication(falcon, 4) == 4
    llama = resolve_model("llama-3.1-70b")  # eight KV heads
    assert kv_replication(llama, 8) == 1
    assert kv_replication(llama, 16) == 2
    assert kv_replication(resolve_model("deepseek-v3"), 8) == 8  # the MLA latent is not split


def test_conversations_that_fit_are_whole_and_never_negative() -> None:
    assert conversations_that_fit(10.5, 2) == 5
    assert conversations_that_fit(-1, 2) == 0


def test_kv_cautions_a_context_past_the_trained_one(capsys: pytest.CaptureFixture[str]) -> None:
    from ridgeline.cli import main

    assert main(["kv", "llama-2-7b", "--context", "8000", "--json"]) == 0
    assert "4,096-token context" in json.loads(capsys.readouterr().out)["cautions"][0]
    assert main(["kv", "llama-2-7b", "--context", "4000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cautions"] == []
