"""vLLM V0's chunked prefill past 32K tokens of context, and the launches it exempts: each
release's EngineArgs, as vllm_v0_chunking.py pins them, decides whether the profiling pass
and the token budget hold a chunk or a whole max_model_len prompt."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.vllm_memory import vllm_accounting
from ridgeline.vllm_pool import v0_chunk_tokens
from ridgeline.vllm_v0_chunking import V0_CHUNKED_ABOVE, v0_exemption, v0_runs_whole

LONG = 2 * V0_CHUNKED_ABOVE  # 64K: past the rule


def dep(model: str, gpu: str = "h100", n: int = 1) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), None, None, n)


def budget(d: Deployment, version: str, length: int = LONG, **knobs: Any) -> int:
    settings = EngineSettings(max_model_len=length, engine_version=version, **knobs)
    return kv_pool(d, settings).profile_tokens


def chunked(d: Deployment, version: str, **knobs: Any) -> bool:
    """Whether V0 at ``version`` profiles (and schedules) a chunk at 64K, not the prompt."""
    tokens = budget(d, version, **knobs)
    assert tokens in (v0_chunk_tokens(version), LONG)
    return tokens == v0_chunk_tokens(version)


@pytest.mark.parametrize("version", ["0.5.3", "0.6.4", "0.6.5", "0.7.3", "0.8.5 V0",
                                     "0.10.1 V0"])
def test_a_dense_llama_at_64k_is_chunked_on_every_v0_release_from_0_5_3(version: str) -> None:
    assert chunked(dep("llama-3.1-8b"), version)
    assert not v0_exemption(dep("llama-3.1-8b"), EngineSettings(), version)


def test_before_0_5_3_v0_runs_a_64k_prompt_whole() -> None:
    """0.5.2's EngineArgs has no long-context rule: chunked prefill stays off."""
    assert budget(dep("llama-3.1-8b"), "0.5.2") == LONG
    assert "v0.5.3" in v0_exemption(dep("llama-3.1-8b"), EngineSettings(), "0.5.2")


@pytest.mark.parametrize("version", ["0.5.3", "0.6.5", "0.8.5 V0", "0.10.1 V0"])
def test_mistral_7b_v0_1s_sliding_window_keeps_v0_from_chunking_it(version: str) -> None:
    mistral = dep("mistralai/Mistral-7B-v0.1")
    assert not chunked(mistral, version)
    assert "sliding-window" in v0_exemption(mistral, EngineSettings(), version)


def test_gemma_2s_interleaved_window_runs_as_full_attention_until_0_10_1() -> None:
    """0.6.5-0.10.0 delete an interleaved model's sliding_window, so the 32K rule chunks it;
    0.10.1 keeps the window, and exempts it."""
    gemma = dep("google/gemma-2-9b-it")
    assert chunked(gemma, "0.6.5") and chunked(gemma, "0.8.5 V0") and chunked(gemma, "0.10.0 V0")
    assert not chunked(gemma, "0.10.1 V0")


def test_a_whole_64k_prompt_profiles_32_times_a_2048_token_chunks_activations() -> None:
    """The exemption moves the activation peak: a Llama served with a drafter profiles the
    whole 64K prompt where the same release otherwise profiles a 2,048-token chunk, and its
    pool is smaller by the difference."""
    llama = dep("llama-3.1-8b")
    whole = kv_pool(llama, EngineSettings(max_model_len=LONG, engine_version="0.6.5",
                                          speculative_decoding=True))
    chunk = kv_pool(llama, EngineSettings(max_model_len=LONG, engine_version="0.6.5"))
    assert whole.profile_tokens == LONG and chunk.profile_tokens == 2048
    assert whole.forward_bytes == pytest.approx(LONG / 2048 * chunk.forward_bytes)
    assert whole.kv_cache_bytes < chunk.kv_cache_bytes


def test_v0_refuses_a_budget_below_a_64k_context_it_runs_whole_and_says_why() -> None:
    with pytest.raises(InputError, match=r"sliding-window model.*refuses to start"):
        budget(dep("mistralai/Mistral-7B-v0.1"), "0.6.5", max_num_batched_tokens=4096)
    assert budget(dep("llama-3.1-8b"), "0.6.5", max_num_batched_tokens=4096) == 4096


def test_deepseeks_mla_runs_whole_on_v0_from_0_8() -> None:
    """0.8.0 set chunked prefill off for MLA before the budget; 0.7.1-0.7.3 turned it off
    only after SchedulerConfig had set the chunked budget, which the pass profiles."""
    deepseek = dep("deepseek-v3", "h200", 8)
    assert chunked(deepseek, "0.7.3")
    assert not chunked(deepseek, "0.8.5 V0") and not chunked(deepseek, "0.10.1 V0")


def test_a_multimodal_model_runs_whole_on_v0_from_0_6_2() -> None:
    """Gemma-3-4B's vision tower exempts it; without it, its interleaved window run as full
    attention (0.8-0.10.0) leaves it to the 32K rule."""
    gemma = dep("google/gemma-3-4b-it")
    assert gemma.model.vision_params and not chunked(gemma, "0.8.5 V0")
    assert "multimodal" in v0_exemption(gemma, EngineSettings(), "0.8.5 V0")
    text_only = replace(gemma, model=replace(gemma.model, vision_params=0, vision_config=None,
                                             vision_item=None))
    assert chunked(text_only, "0.8.5 V0")
    llama = dep("llama-3.1-8b")
    with_tower = replace(llama, model=replace(llama.model, vision_params=gemma.model.vision_params))
    assert chunked(with_tower, "0.6.1") and not chunked(with_tower, "0.6.2")


def test_mamba_layers_are_exempt_from_0_5_4_to_0_6_2() -> None:
    jamba = dep("ai21labs/AI21-Jamba-1.5-Mini", "h100", 2)
    assert chunked(jamba, "0.5.3") and chunked(jamba, "0.6.3")
    assert not chunked(jamba, "0.5.4") and not chunked(jamba, "0.6.2")


def test_prefix_caching_is_exempt_until_0_6_1() -> None:
    llama = dep("llama-3.1-8b")
    assert not chunked(llama, "0.6.0", prefix_caching=True)
    assert chunked(llama, "0.6.1", prefix_caching=True) and chunked(llama, "0.6.0")


def test_v0_chunks_on_cuda_only_and_on_rocm_until_0_6_5() -> None:
    mi300x, tpu = dep("llama-3.1-8b", "mi300x"), dep("llama-3.1-8b", "tpu-v6e")
    assert chunked(mi300x, "0.6.4") and not chunked(mi300x, "0.6.5")
    assert not chunked(tpu, "0.6.4") and not chunked(tpu, "0.8.5 V0")


def test_speculative_decoding_keeps_v0_from_chunking() -> None:
    llama = dep("llama-3.1-8b")
    assert not chunked(llama, "0.6.5", speculative_decoding=True)
    acc = vllm_accounting("0.6.5")
    spec = EngineSettings(speculative_decoding=True)
    assert v0_runs_whole(llama, spec, acc, LONG) and not v0_runs_whole(llama, EngineSettings(),
                                                                        acc, LONG)
    assert not v0_runs_whole(llama, spec, vllm_accounting("0.32"), LONG)  # V1: no such rule


def test_simulate_with_spec_tokens_runs_v0s_prompts_whole(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--spec-tokens configures a drafter: V0's budget is the whole 64K context."""
    base = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "64k",
            "--rate", "2", "--num-requests", "8", "--input-len", "1000", "--output-len", "20",
            "--engine-version", "0.6.5", "--json"]
    budgets = []
    for extra in ([], ["--spec-tokens", "3"]):
        assert main(base + extra) == 0
        budgets.append(json.loads(capsys.readouterr().out)["settings"]["max_num_batched_tokens"])
    assert budgets == [v0_chunk_tokens("0.6.5"), 64_000]
