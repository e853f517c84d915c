"""A serving engineer's first hour, the odd-but-legal corners: `fit` at a max_model_len that is
no multiple of vLLM's block says which token count it prints (vLLM v0.24+ logs maximum
concurrency × max_model_len, not blocks × block size), `simulate`'s summary gives a run under
a second in figures its rates can be repeated from, and an empty config, accelerator or trace
file is refused as empty rather than as JSON "Expecting value"."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from ridgeline.vllm_memory import vllm_accounting
from tests.conftest import run_cli

BLOCK = vllm_accounting().block_size  # vLLM's default block (64 from v0.34), the pool's


def _fit_json(capsys: pytest.CaptureFixture[str], length: int) -> dict:
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                           str(length), "--json")
    assert code == 0
    return json.loads(out)


def _held_line(capsys: pytest.CaptureFixture[str], length: int, *extra: str) -> str:
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                           str(length), *extra)
    assert code == 0
    (line,) = [x for x in out.splitlines() if x.startswith("holds ")]
    return line


def test_a_length_off_the_block_names_the_logged_count_and_the_slots(
        capsys: pytest.CaptureFixture[str]) -> None:
    """At 17 tokens a request holds ⌈17 ÷ 64⌉ = 1 block (⌈17 ÷ 16⌉ = 2 before v0.34), so
    vLLM's logged count is blocks ÷ that × 17, not blocks × the block: the line had read
    "holds 237,787 tokens in 27,975 blocks of 16", which multiplies out to 447,600."""
    blocks = _fit_json(capsys, 17)["blocks_per_gpu"]
    per_request = math.ceil(17 / BLOCK)
    concurrency = blocks / per_request
    logged = int(concurrency * 17)
    assert logged != blocks * BLOCK
    assert _held_line(capsys, 17).startswith(
        f"holds {logged:,} tokens as vLLM logs them (its maximum concurrency "
        f"{concurrency:,.2f}x × max_model_len 17): {blocks:,} blocks of {BLOCK}, "
        f"{blocks * BLOCK:,} token slots; ")
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                           "17", "--explain")
    assert code == 0 and "tokens vLLM logs: floor(maximum concurrency × max_model_len)" in out


def test_one_token_conversations_hold_a_block_each(capsys: pytest.CaptureFixture[str]) -> None:
    """--max-model-len 1: every conversation takes a whole block, so vLLM logs as many tokens
    as blocks; the line says so rather than "N tokens in N blocks of 16"."""
    blocks = _fit_json(capsys, 1)["blocks_per_gpu"]
    assert _held_line(capsys, 1).startswith(
        f"holds {blocks:,} tokens as vLLM logs them (its maximum concurrency {blocks:,.2f}x × "
        f"max_model_len 1): {blocks:,} blocks of {BLOCK}, {blocks * BLOCK:,} token slots")


@pytest.mark.parametrize("length", [BLOCK, 8192])
def test_a_length_on_the_block_keeps_the_plain_product(
        capsys: pytest.CaptureFixture[str], length: int) -> None:
    blocks = _fit_json(capsys, length)["blocks_per_gpu"]
    assert _held_line(capsys, length).startswith(
        f"holds {blocks * BLOCK:,} tokens in {blocks:,} blocks of {BLOCK}; ")


def test_an_older_release_logs_blocks_times_the_block(capsys: pytest.CaptureFixture[str]) -> None:
    """Before v0.24 vLLM logged blocks × block size whatever the length: the plain line."""
    line = _held_line(capsys, 17, "--engine-version", "0.19.0")
    found = re.match(r"holds ([\d,]+) tokens in ([\d,]+) blocks of 16; ", line)
    assert found is not None
    tokens, blocks = (int(x.replace(",", "")) for x in found.groups())
    assert tokens == blocks * 16  # its default block


def test_a_run_under_a_second_prints_the_seconds_its_rates_divide_by(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Five 1-token requests one after another take about 40 ms: "in 0.0 s" beside 124 req/s
    could not be repeated."""
    argv = ("simulate", "llama-3.2-1b", "--gpu", "rtx-3090", "--concurrency", "1",
            "--num-requests", "5", "--input-len", "100", "--output-len", "1")
    code, out, _ = run_cli(capsys, *argv, "--json")
    assert code == 0
    duration = json.loads(out)["duration_s"]
    assert 0 < duration < 1
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    found = re.search(r"completed 5 of 5 requests in ([\d.]+) s \(5 steps\): ([\d.]+) req/s", out)
    assert found is not None
    printed_s, rate = (float(x) for x in found.groups())
    assert printed_s == float(f"{duration:.3g}")
    assert 5 / printed_s == pytest.approx(rate, rel=0.005)


def _empty(tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    path.write_text("\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("argv, said", [
    (("model", "{f}"), "is empty: a config.json is one JSON object"),
    (("decode", "llama-3.1-8b", "--gpu-file", "{f}"), "is empty: an accelerator file is one "
     "record in the catalog's format"),
    (("simulate", "llama-3.1-8b", "--gpu", "h100", "--trace", "{f}"),
     "is empty: a .json trace is an array of rows"),
])
def test_an_empty_file_is_refused_as_empty(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                           argv: tuple[str, ...], said: str) -> None:
    path = _empty(tmp_path, "empty.json")
    code, out, err = run_cli(capsys, *(a.format(f=path) for a in argv))
    assert code == 2 and out == ""
    assert err.startswith(f"ridgeline: error: {path} {said}")
    assert len(err.strip().splitlines()) == 1 and "Expecting value" not in err


def test_under_dcp_the_block_is_the_schedulers(capsys: pytest.CaptureFixture[str]) -> None:
    """-dcp 8 makes vLLM's scheduler block 8 × its block (64 from v0.34): at 17 tokens a
    request holds one, and the logged count is blocks × 17, not blocks × 512."""
    code, out, _ = run_cli(capsys, "fit", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8",
                           "--max-model-len", "17", "-dcp", "8", "--json")
    assert code == 0
    report = json.loads(out)
    blocks, block = report["blocks_per_gpu"], report["block_size"]
    assert block == 8 * BLOCK
    code, out, _ = run_cli(capsys, "fit", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8",
                           "--max-model-len", "17", "-dcp", "8")
    (line,) = [x for x in out.splitlines() if x.startswith("holds ")]
    assert line.startswith(
        f"holds {blocks * 17:,} tokens as vLLM logs them (its maximum concurrency "
        f"{blocks:,.2f}x × max_model_len 17): {blocks:,} blocks of {block}, "
        f"{blocks * block:,} token slots; ")


@pytest.mark.parametrize("engine", ["sglang", "llama.cpp"])
def test_a_one_token_conversation_is_one_token_in_its_own_unit(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    """Llama-3.1-8B's bf16 cache is 2 × 8 heads × 128 dims × 32 layers × 2 B = 128 KiB a token;
    a one-token conversation had read "of 1 tokens" and "takes 0.000 GiB"."""
    per_token_kib = 2 * 8 * 128 * 32 * 2 // 1024
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine", engine,
                           "--max-model-len", "1")
    assert code == 0 and re.search(r"(?<![\d,])1 tokens", out) is None  # not 412,781 tokens
    assert "0.000 GiB" not in out
    assert f"one conversation of 1 token takes {per_token_kib} KiB per GPU" in out
