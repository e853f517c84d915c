"""decode and prefill under a vLLM V0 release (--engine-version): decode's --spec-tokens
sizes the pool simulate sizes for the same launch, prefill's step budget is V0's (its chunk
budget, or max_model_len where it runs a prompt whole) whatever --usage says, and prefill's
JSON names the release as decode's does."""

from __future__ import annotations

import json
import math

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engine_versions import sized_version
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.vllm_memory import vllm_accounting
from ridgeline.vllm_pool import v0_chunk_tokens
from ridgeline.vllm_v0_chunking import V0_CHUNKED_ABOVE, v0_exemption
from tests.conftest import run_cli

GPU = "h100"
LONG = 40_000  # past V0's 32K rule
V0 = "0.10 V0"


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    loaded: dict = json.loads(out)
    return loaded


def _dep(model: str) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(GPU))


def _decode_batch(capsys: pytest.CaptureFixture[str], *extra: str) -> int:
    out = _json(capsys, "decode", "llama-3.1-8b", "--gpu", GPU, "--engine-version", V0,
                "--context", str(LONG), "--max-model-len", str(LONG), *extra)
    batch: int = out["engine_max_batch"][0]["engine_max_batch"]
    return batch


# -- decode --spec-tokens ---------------------------------------------------------------

def test_decode_with_spec_tokens_holds_the_sequences_simulates_v0_pool_holds(
        capsys: pytest.CaptureFixture[str]) -> None:
    sim = _json(capsys, "simulate", "llama-3.1-8b", "--gpu", GPU, "--engine-version", V0,
                "--max-model-len", str(LONG), "--spec-tokens", "3", "--rate", "1",
                "--num-requests", "5")["settings"]
    assert sim["max_num_batched_tokens"] == LONG  # the drafter keeps V0's prompts whole
    held = sim["num_blocks"] // math.ceil(LONG / sim["block_size"])
    assert _decode_batch(capsys, "--spec-tokens", "3") == held
    # without a drafter V0 chunks at 2,048 a step: a smaller profile, a larger pool
    assert _decode_batch(capsys) > held


def test_decode_spec_tokens_keep_v0_from_chunking_with_pool_flags_given_too(
        capsys: pytest.CaptureFixture[str]) -> None:
    seqs = ("--max-num-seqs", "64")
    settings = EngineSettings(max_model_len=LONG, max_num_seqs=64, engine_version=V0,
                              speculative_decoding=True)
    whole = kv_pool(_dep("llama-3.1-8b"), settings)
    assert whole.profile_tokens == LONG
    assert _decode_batch(capsys, *seqs, "--spec-tokens", "3") < _decode_batch(capsys, *seqs)


# -- prefill's step budget --------------------------------------------------------------

def _prefill(capsys: pytest.CaptureFixture[str], model: str, version: str, prompt: int,
             *extra: str) -> tuple[dict, str]:
    argv = ("prefill", model, "--gpu", GPU, "--engine-version", version,
            "--prompt-len", str(prompt), *extra)
    code, text, err = run_cli(capsys, *argv)
    assert code == 0, err
    return _json(capsys, *argv), text


@pytest.mark.parametrize("version", ["0.6.4", V0])
def test_prefill_past_32k_chunks_at_v0s_budget_for_the_release(
        capsys: pytest.CaptureFixture[str], version: str) -> None:
    out, text = _prefill(capsys, "llama-3.1-8b", version, LONG, "--max-model-len", str(LONG))
    tokens = v0_chunk_tokens(version)
    assert out["max_num_batched_tokens"] == tokens
    assert out["prompt_steps"] == math.ceil(LONG / tokens)
    assert (f"in {out['prompt_steps']:,} steps of at most {tokens:,} tokens (vLLM {version}'s "
            "default max_num_batched_tokens with its V0 engine's chunked prefill, on past 32K "
            "tokens of context: 512 before v0.6.5, 2,048 from it; the same for vllm serve and "
            "--usage offline)") in text
    assert "16,384" not in text  # V1's offline budget is no V0 figure


def test_v0_chunks_a_512_token_budget_before_0_6_5_and_2048_from_it() -> None:
    assert v0_chunk_tokens("0.6.4") < v0_chunk_tokens("0.6.5") == v0_chunk_tokens(V0)


def test_prefill_on_v0_at_the_default_context_is_chunked_whatever_the_usage(
        capsys: pytest.CaptureFixture[str]) -> None:
    serve, _ = _prefill(capsys, "llama-3.1-8b", "0.6", LONG)
    offline, _ = _prefill(capsys, "llama-3.1-8b", "0.6", LONG, "--usage", "offline")
    assert serve["max_model_len"] > V0_CHUNKED_ABOVE  # the model's 128K
    assert serve["max_num_batched_tokens"] == offline["max_num_batched_tokens"] \
        == v0_chunk_tokens("0.6")


def test_prefill_runs_a_multimodal_models_prompts_whole_on_v0_past_32k(
        capsys: pytest.CaptureFixture[str]) -> None:
    model = "gemma-3-4b"
    reason = v0_exemption(_dep(model), EngineSettings(), vllm_accounting(V0).version)
    assert "multimodal" in reason
    out, text = _prefill(capsys, model, V0, 30_000, "--max-model-len", str(LONG),
                         "--batch", "2")
    assert out["max_num_batched_tokens"] == LONG
    assert (f"(vLLM {V0}'s default max_num_batched_tokens: max_model_len, as it runs a prompt "
            "whole on its V0 engine past 32K tokens of context too, chunked prefill left off "
            f"{reason}; the same for vllm serve and --usage offline)") in text


def test_prefill_at_a_32k_or_shorter_max_model_len_runs_a_v0_prompt_in_one_step(
        capsys: pytest.CaptureFixture[str]) -> None:
    length = 30_000
    assert length <= V0_CHUNKED_ABOVE
    out, _ = _prefill(capsys, "llama-3.1-8b", "0.6.4", 20_000, "--max-model-len", str(length))
    pool = kv_pool(_dep("llama-3.1-8b"), EngineSettings(max_model_len=length,
                                                        engine_version="0.6.4"))
    assert out["max_num_batched_tokens"] == pool.profile_tokens == length
    assert out["prompt_steps"] == 1


# -- prefill --json names the release ---------------------------------------------------

@pytest.mark.parametrize("version", [None, "0.6", V0])
def test_prefill_json_carries_the_engine_version_and_decodes_settings(
        capsys: pytest.CaptureFixture[str], version: str | None) -> None:
    asked = ("--gpu", GPU, "--max-model-len", str(LONG)) + (
        ("--engine-version", version) if version else ())
    prefill = _json(capsys, "prefill", "llama-3.1-8b", "--prompt-len", "4000", *asked)
    decode = _json(capsys, "decode", "llama-3.1-8b", "--context", "4000", *asked)
    # the release the pool was sized as, named where none was given too (fit's)
    assert prefill["engine_version"] == sized_version("vllm", version)
    assert prefill["settings"] == decode["engine_max_batch"][0]["settings"]
    assert (f"as vLLM {version} sizes it" in prefill["settings"]) == bool(version)
