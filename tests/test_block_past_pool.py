"""A --block-size whose one block is more than the whole KV pool: no engine starts so (vLLM's
start check, SGLang's whole pages, TensorRT-LLM's), and fit, simulate, decode and prefill
refuse it in one line naming the flag (kvpool.block_past_pool), rather than answer "does not
fit" with a GPU count to add; a block the pool holds, or a pool the weights leave empty, is
sized as before."""

from __future__ import annotations

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.deployment import Deployment
from ridgeline.hardware import resolve_accelerator
from ridgeline.kvpool import block_past_pool
from ridgeline.memory import EngineSettings, kv_pool
from tests.conftest import refused_line, run_cli

ON_H100 = ("llama-3.1-8b", "--gpu", "h100")
HUGE = ("--block-size", "99999999999")


def test_a_block_past_any_pool_is_refused_alike_by_fit_simulate_decode_and_prefill(
        capsys: pytest.CaptureFixture[str]) -> None:
    fit = refused_line(capsys, "fit", *ON_H100, *HUGE)
    assert fit.startswith("ridgeline: error: --block-size 99,999,999,999: one block is ")
    assert "more than the whole KV pool" in fit and "vLLM does not start so" in fit
    assert fit.endswith("give a smaller --block-size")
    assert "GPU" not in fit.split(";")[1]  # no GPU count to add: the block is the cause
    assert refused_line(capsys, "simulate", *ON_H100, "--rate", "20", *HUGE) == fit
    assert refused_line(capsys, "decode", *ON_H100, *HUGE) == fit
    assert refused_line(capsys, "prefill", *ON_H100, "--prompt-len", "1000", *HUGE) == fit
    assert "--block-size 99,999,999,999: one block" in refused_line(
        capsys, "fit", *ON_H100, *HUGE, "--target-concurrency", "4")


def test_a_block_of_a_million_tokens_is_122_gib_past_the_h100s_59_gib_pool(
        capsys: pytest.CaptureFixture[str]) -> None:
    """block_past_pool's worked number: Llama-3.1-8B's 128 KiB a token (bf16) × 1,000,000."""
    line = refused_line(capsys, "fit", *ON_H100, "--block-size", "1000000")
    assert "one block is 122.07 GiB a GPU, more than the whole KV pool (59.03 GiB)" in line
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"))
    pool = kv_pool(dep, EngineSettings(block_size=1_000_000))
    assert pool.blocks == 0 and block_past_pool(pool, 1_000_000) in line


@pytest.mark.parametrize(("engine", "block", "name"), [
    ("sglang", "99999999999", "SGLang"), ("trtllm", str(2 ** 30), "TensorRT-LLM")])
def test_sglang_and_trtllm_refuse_a_page_past_their_pool_too(
        capsys: pytest.CaptureFixture[str], engine: str, block: str, name: str) -> None:
    line = refused_line(capsys, "fit", *ON_H100, "--engine", engine, "--block-size", block)
    assert f"--block-size {int(block):,}: one block is" in line
    assert f"{name} does not start so" in line


def test_a_block_the_pool_holds_is_sized_and_none_asked_is_not_checked(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "fit", *ON_H100, "--block-size", "1024")
    assert code == 0 and "fits" in out, err
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"))
    assert block_past_pool(kv_pool(dep, EngineSettings(block_size=1024)), 1024) == ""
    assert block_past_pool(kv_pool(dep), None) == ""


def test_weights_past_the_card_are_named_not_the_block(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B's bf16 weights do not load on one H100: fit says so, as without the
    block, and its levers (2 GPUs, whose pool still holds no such block) are sized, not
    refused."""
    code, out, err = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--block-size",
                             "1000000")
    assert code == 0, err
    assert "DOES NOT FIT" in out and "the weights alone" in out and "one block is" not in out


def test_a_pool_of_one_big_block_reads_as_one_block_in_fit_and_simulate(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A block the pool holds once is sized, and said as one: before, fit printed '1 blocks
    of 262144' and simulate '1 KV blocks of 262144'."""
    code, out, err = run_cli(capsys, "fit", *ON_H100, "--engine", "trtllm",
                             "--block-size", "262144")
    assert code == 0, err
    assert "holds 262,144 tokens in 1 block of 262,144;" in out
    code, out, err = run_cli(capsys, "fit", *ON_H100, "--max-model-len", "1000",
                             "--block-size", "300000")
    assert code == 0, err
    assert ": 1 block of 300,000, 300,000 token slots" in out
    code, out, err = run_cli(capsys, "simulate", *ON_H100, "--rate", "1", "--num-requests",
                             "3", "--block-size", "262144")
    assert code == 0, err
    assert "engine: 1 KV block of 262,144, " in out
