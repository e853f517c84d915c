"""Figures that decode, prefill, fit and simulate print with no step behind them now have
one, and each step repeats from the inputs its --json lists, as its formula says: vLLM's
"give --max-model-len ≤ 12,032" and the pool that holds 5 there, fit's "at 1,600 tokens or
fewer" and the 0.33 caution's 54.64 GiB, each lever's batch, the expected step's memory-bound
operators, simulate's p90 and p99 readings."""

from __future__ import annotations

import math

import pytest

from tests.conftest import explain_by_label as by_label
from tests.conftest import explain_inputs as ins
from tests.conftest import explain_result as res
from tests.conftest import explained

GIB, MIB = 2**30, 2**20
README_DECODE = ("decode", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--kv-dtype",
                 "bf16", "--batch", "1,32", "--context", "2000")


def _pool_tokens(pool_gib: float, block_mib: float, block_size: float) -> float:
    return math.floor(pool_gib * GIB / (block_mib * MIB)) * block_size


def _check_longest(s: dict) -> None:
    """The pool sized at L holds L tokens, the pool sized at L + 1 fewer than L + 1."""
    got = ins(s)
    longest = res(s)
    at = _pool_tokens(got["pool at L"], got["one block"], got["block size"])
    past = _pool_tokens(got["pool at L + 1"], got["one block"], got["block size"])
    assert (at, past) == (got["pool tokens at L"], got["pool tokens at L + 1"])
    assert at >= longest > past - 1


def _check_held(s: dict) -> None:
    got = ins(s)
    blocks = math.floor(got["pool"] * GIB / (got["one block"] * MIB))
    assert res(s) == blocks // math.ceil(got["context"] / got["block size"])


def test_decodes_longest_start_and_its_pool_have_steps(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The README's example: vLLM refuses at 131,072; "give --max-model-len ≤ 12,032" and
    "pool holds = 5" at it were cited, never derived."""
    data, steps = explained(capsys, *README_DECODE)
    at = data["at_max_model_len"]
    s = by_label(steps, "longest --max-model-len that starts")
    _check_longest(s)
    assert res(s) == at["max_model_len"]
    held = by_label(steps, "conversations the KV pool holds at 2,000 tokens")
    _check_held(held)
    assert res(held) == at["engine_max_batch"][0]["conversations"]
    seats = by_label(steps, "sequences the engine runs at 2,000 tokens")
    assert ins(seats)["pool holds"] == res(held)


def test_prefills_longest_start_has_its_step(capsys: pytest.CaptureFixture[str]) -> None:
    data, steps = explained(capsys, "prefill", "llama-3.1-70b", "--gpu", "h100", "--weights",
                            "fp8", "--kv-dtype", "bf16", "--prompt-len", "4000")
    s = by_label(steps, "longest --max-model-len that starts")
    _check_longest(s)
    assert res(s) == data["at_max_model_len"]["max_model_len"]
    _check_held(by_label(steps, "conversations the KV pool holds at 4,000 tokens"))


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_fits_ridge_context_has_a_step(capsys: pytest.CaptureFixture[str],
                                       engine: str) -> None:
    """"at 1,600 tokens or fewer (--max-model-len) its batch reaches the ridge" (SGLang: 312):
    ⌊blocks ÷ ridge batch⌋ × block size, from the blocks and the ridge batch steps."""
    data, steps = explained(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine", engine)
    s = by_label(steps, "longest context whose batch reaches the ridge")
    got = ins(s)
    assert res(s) == got["pool blocks"] // got["ridge batch"] * got["block size"]
    assert res(s) == data["ridge_max_model_len"]
    assert got["pool blocks"] == res(by_label(steps, "blocks the pool holds"))
    assert got["ridge batch"] == res(by_label(steps, "ridge batch"))


SUBTRACTED = ("weights per GPU", "activation peak", "non-torch", "CUDA graphs", "sampler state")


def test_the_033_caution_has_its_pool_and_conversations(
        capsys: pytest.CaptureFixture[str]) -> None:
    """"0.33's rules … give 54.64 GiB per GPU, 3 conversations": the pool step under those
    rules (0.92 of the card, nothing kept free after warm-up) and its conversations."""
    data, steps = explained(capsys, "fit", "llama-3.1-8b", "--gpu", "h100")
    rules = "under 0.33's rules (--no-enable-extensible-kv-cache)"
    pool = by_label(steps, f"KV pool per GPU, {rules}")
    got = ins(pool)
    assert "kept free after warm-up" not in got
    assert res(pool) == pytest.approx(got["total"] * got["reserved fraction"]
                                      - sum(got[n] for n in SUBTRACTED))
    held = by_label(steps, f"conversations, {rules}")
    assert ins(held)["pool"] == pytest.approx(res(pool))
    assert res(held) == math.floor(ins(held)["pool"] / ins(held)["per conversation"])
    (caution,) = [c for c in data["cautions"] if "0.33's rules" in c]
    assert f"give {res(pool):,.2f} GiB per GPU, {res(held):,.0f} conversations" in caution


def test_each_lever_ends_in_its_batch(capsys: pytest.CaptureFixture[str]) -> None:
    """"levers = 4" counted the levers; each lever is now min(conversations, seats), its
    seats an input, its batch the figure the levers table prints."""
    data, steps = explained(capsys, "fit", "llama-3.1-8b", "--gpu", "h100")
    assert data["levers"]
    assert not [s for s in steps if s["label"] == "levers"]
    for lever in data["levers"]:
        s = by_label(steps, f"lever, {lever['name']}")
        got = ins(s)
        assert res(s) == min(got["conversations"], got["seats"]) == lever["engine_max_batch"]
        assert (got["conversations"], got["seats"]) == (lever["conversations"], lever["max_num_seqs"])


@pytest.mark.parametrize("argv", [README_DECODE,
                                  ("decode", "qwen3-30b-a3b", "--gpu", "h100", "--batch", "16",
                                   "--context", "2000"),
                                  ("decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "64",
                                   "--context", "3000", "--engine", "llama.cpp", "--weights",
                                   "q4_k_m", "--parallel", "64"),
                                  ("decode", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4",
                                   "--batch", "16"),
                                  ("prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len",
                                   "64")])
def test_memory_bound_operators_have_their_bytes_and_bandwidth(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    """"memory-bound operators = 28.52 ms" was an input no step explained: 71.22 GB ÷
    (3.35 TB/s × 0.7455), plus any work items whose arithmetic outlasts their bytes."""
    _, steps = explained(capsys, *argv)
    memory = [s for s in steps if s["label"] == "memory-bound operators"]
    cited = [(ins(s)["memory-bound operators"], ins(s)["bandwidth share"]) for s in steps
             if s["label"] != "memory-bound operators" and "memory-bound operators" in ins(s)]
    assert memory and len(memory) == len(cited)
    for s, (total, share) in zip(memory, cited):
        got = ins(s)
        seconds = got["bytes per GPU"] * 1e9 / (got["bandwidth per GPU"] * 1e12
                                                * got["bandwidth share"])
        assert res(s) == pytest.approx(seconds * 1e3 + got.get("arithmetic past the bytes", 0))
        assert (total, share) == (pytest.approx(res(s)), got["bandwidth share"])


def test_simulates_percentiles_repeat_from_their_reading(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The percentile steps gave p50 alone, from "requests measured"; now p50, p90 and p99
    each from its position and the values either side."""
    data, steps = explained(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "5",
                            "--num-requests", "200", "--input-len", "1000", "--output-len",
                            "200")
    for name in ("TTFT", "TPOT"):
        readings = [(50, by_label(steps, f"{name} percentiles"))] + [
            (p, by_label(steps, f"{name} p{p}")) for p in (90, 99)]
        for p, s in readings:
            got = ins(s)
            position = got["position"]
            assert position == pytest.approx(p / 100 * (got["requests measured"] - 1))
            low, high = got["value at ⌊position⌋"], got["next value"]
            assert res(s) == pytest.approx(low + (position - math.floor(position))
                                           * (high - low))
            assert res(s) == pytest.approx(data[f"{name.lower()}_s"][f"p{p}"] * 1e3)
