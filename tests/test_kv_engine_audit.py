"""Session 53's second audit of kv --engine and the engine choice flags, each claim derived
from the model's config.json and checked against the command that prices the same pool:

- kv --engine sglang and --engine trtllm count a window layer as the engine keeps it: SGLang
  outside its hybrid-SWA architectures and TensorRT-LLM keep every token in every layer, as
  fit prices their pools (engine_windows.honours_windows). Before, kv gave them vLLM's
  windows: Mistral-7B at 32,000 tokens on an H100, 131 conversations of 0.5 GiB each where
  fit's pool holds conversations of 3.906 GiB.
- an engine's --kv-cache-dtype value ridgeline does not size (vLLM's fp8_inc, SGLang's
  fp4_e2m1) is refused as not modelled under every command; kv and roofline, which size a
  cache without building a deployment, said "unknown KV-cache dtype 'fp8_inc'; closest: fp8".
- a value a release refuses names a fix that works: the engine's own value where only the
  case or a space was off (Auto: auto), and no --kv-dtype for a cache the engine does not
  keep (vLLM's int8, q8_0).
"""

from __future__ import annotations

import json
import math
import re

import pytest

from ridgeline.datafiles import load_data
from tests.conftest import run_cli

KV = ("kv", "mistral-7b", "--gpu", "h100", "--context", "32000", "--json")


def mistral_bytes_per_token() -> int:
    config = load_data("models/mistralai--Mistral-7B-v0.1.json")
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    return (config["num_hidden_layers"]
            * 2  # K and V
            * config["num_key_value_heads"] * head_dim
            * 2)  # bf16


def ran(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, (argv, err)
    return dict(json.loads(out))


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and not out and len(lines) == 1 and "Traceback" not in err, (argv, err)
    return lines[0]


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_kv_under_an_engine_without_mistrals_window_keeps_every_token_as_fit_does(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    report = ran(capsys, *KV, "--engine", engine)
    per_sequence = mistral_bytes_per_token() * 32000  # 3.906 GiB: every token, every layer
    assert report["bytes_per_sequence"] == per_sequence
    assert [row["kind"] for row in report["layer_kinds"]] == ["full attention"]
    assert report["conversations"] == math.floor(report["budget_bytes"] / per_sequence)
    pool = ran(capsys, "fit", "mistral-7b", "--gpu", "h100", "--engine", engine,
               "--max-model-len", "32000", "--json")
    assert pool["per_conversation_bytes_per_gpu"] == per_sequence


def test_kv_under_vllm_and_sglangs_hybrid_swa_models_still_keeps_the_window(
        capsys: pytest.CaptureFixture[str]) -> None:
    window = load_data("models/mistralai--Mistral-7B-v0.1.json")["sliding_window"]
    report = ran(capsys, *KV, "--engine", "vllm")
    assert report["bytes_per_sequence"] == mistral_bytes_per_token() * window
    gpt_oss = load_data("models/openai--gpt-oss-20b.json")
    assert "GptOssForCausalLM" in load_data("engines.json")["sglang"]["hybrid_swa"][
        "architectures"]
    kept = {row["kind"]: row["tokens_kept"] for row in ran(
        capsys, "kv", "gpt-oss-20b", "--gpu", "h100", "--context", "32000", "--engine",
        "sglang", "--json")["layer_kinds"]}
    assert kept["sliding window"] == gpt_oss["sliding_window"]


@pytest.mark.parametrize("argv", [
    KV, ("kv", "mistral-7b", "--memory-gib", "10", "--context", "4096"),
    ("roofline", "--gpu", "h100"), ("roofline", "--gpu", "h100", "--weights", "fp8")])
@pytest.mark.parametrize(("value", "engine"), [("fp8_inc", "vLLM"), ("fp4_e2m1", "SGLang")])
def test_an_engines_unmodelled_cache_is_refused_as_such_where_no_deployment_is_built(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], value: str,
        engine: str) -> None:
    line = refused(capsys, *argv, "--kv-cache-dtype", value)
    assert f"--kv-cache-dtype {value} is not modelled: {engine}'s {value} is" in line
    assert "unknown" not in line


@pytest.mark.parametrize(("engine", "value", "meant"), [
    ("vllm", "Auto", "auto"), ("vllm", "FP8", "fp8"), ("sglang", "Auto", "auto"),
    ("vllm", "fp8_e4m3 ", "fp8_e4m3")])
def test_a_value_off_only_by_case_or_space_is_answered_with_the_engines_spelling(
        capsys: pytest.CaptureFixture[str], engine: str, value: str, meant: str) -> None:
    fit = ("fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k", "--engine", engine)
    line = refused(capsys, *fit, "--kv-cache-dtype", value)
    assert line.endswith(f"(the engine reads its values exactly: give --kv-cache-dtype {meant})")
    ran(capsys, *fit, "--kv-cache-dtype", meant, "--json")


@pytest.mark.parametrize(("engine", "value"), [
    ("vllm", "int8"), ("vllm", "q8_0"), ("vllm", "fp4"), ("sglang", "int8")])
def test_a_cache_the_engine_does_not_keep_is_not_offered_under_kv_dtype(
        capsys: pytest.CaptureFixture[str], engine: str, value: str) -> None:
    fit = ("fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k", "--engine", engine)
    line = refused(capsys, *fit, "--kv-cache-dtype", value)
    assert "give --kv-dtype" not in line
    keeps = re.search(r"it keeps ([a-z0-9_, ]+)\)$", line)
    assert keeps, line
    for cache in keeps.group(1).split(", "):
        ran(capsys, *fit, "--kv-dtype", cache, "--json")  # each cache it names is taken
    assert refused(capsys, *fit, "--kv-dtype", value).startswith(
        f"ridgeline: error: {engine} has no {value} KV cache")


def test_kv_and_fit_say_why_sglangs_window_pool_charges_more_than_the_windows_kept(
        capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss-120b at 131,072 tokens on one H100 under SGLang: kv counted 4 conversations of
    4.504 GiB (windows kept at 128 tokens, raw memory) where fit counts 0 of 8.100 GiB, which
    read as a contradiction. SGLang sizes its window layers' pool at --swa-full-tokens-ratio
    of the full pool's tokens, so each token is charged 36 KiB + 0.8 × 36 KiB: kv's caution
    and fit's pool line both say so, and kv's caution gives fit's per-conversation size."""
    spec = load_data("engines.json")["sglang"]["hybrid_swa"]
    assert "GptOssForCausalLM" in spec["architectures"]
    ratio = float(spec["swa_full_tokens_ratio"])
    kv = json.loads(run_cli(capsys, "kv", "gpt-oss-120b", "--context", "131072", "--gpu",
                            "h100", "--engine", "sglang", "--json")[1])
    fit = json.loads(run_cli(capsys, "fit", "gpt-oss-120b", "--gpu", "h100", "--max-model-len",
                             "131072", "--engine", "sglang", "--json")[1])
    full, window = (row for row in kv["layer_kinds"])
    assert window["tokens_kept"] < 131072  # kv keeps the window: its count is the raw one
    charged = full["bytes_per_token"] + ratio * window["bytes_per_token"]
    assert math.isclose(fit["per_conversation_bytes_per_gpu"], charged * 131072, rel_tol=1e-9)
    assert fit["per_conversation_bytes_per_gpu"] > kv["bytes_per_sequence"]
    said = [c for c in kv["cautions"] if "hybrid-SWA pool" in c]
    assert len(said) == 1
    assert f"takes {fit['per_conversation_bytes_per_gpu'] / 2**30:,.3f} GiB of SGLang's pool" \
        in said[0] and f"--swa-full-tokens-ratio {ratio:g}" in said[0]
    text = run_cli(capsys, "fit", "gpt-oss-120b", "--gpu", "h100", "--max-model-len", "131072",
                   "--engine", "sglang")[1]
    pool_line = next(line for line in text.splitlines() if line.startswith("holds "))
    assert f"--swa-full-tokens-ratio {ratio:g} of the full layers' tokens" in pool_line
    # vLLM keeps only the windows in its pool: neither says it
    assert not any("hybrid-SWA" in c for c in json.loads(run_cli(
        capsys, "kv", "gpt-oss-120b", "--context", "131072", "--gpu", "h100", "--engine",
        "vllm", "--json")[1])["cautions"])
