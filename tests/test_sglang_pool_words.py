"""SGLang's pool in SGLang's words: its start-up log gives a token count, max_total_num_tokens,
in pages of --page-size tokens (1 by default), not vLLM's "blocks of 16". fit and simulate say
so under --engine sglang and keep vLLM's words under vLLM."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

LLAMA_8B = ["llama-3.1-8b", "--gpu", "h100"]
SIM = ["--rate", "2", "--num-requests", "20"]


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def _text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    return out


def test_sglang_fit_names_its_pool_max_total_num_tokens_not_blocks_of_1(
        capsys: pytest.CaptureFixture[str]) -> None:
    fit = _json(capsys, "fit", *LLAMA_8B, "--engine", "sglang")
    assert fit["block_size"] == 1 and fit["tokens"] == fit["blocks_per_gpu"]
    text = _text(capsys, "fit", *LLAMA_8B, "--engine", "sglang")
    assert (f"holds {fit['tokens']:,} tokens (SGLang's max_total_num_tokens; page size 1);"
            in text)
    assert "blocks of 1" not in text


def test_sglang_pages_past_1_give_the_tokens_and_the_pages(
        capsys: pytest.CaptureFixture[str]) -> None:
    fit = _json(capsys, "fit", *LLAMA_8B, "--engine", "sglang", "--page-size", "16")
    assert fit["tokens"] == 16 * fit["blocks_per_gpu"]
    text = _text(capsys, "fit", *LLAMA_8B, "--engine", "sglang", "--page-size", "16")
    assert (f"holds {fit['tokens']:,} tokens (SGLang's max_total_num_tokens; page size 16: "
            f"{fit['blocks_per_gpu']:,} pages)" in text)


def test_sglang_simulate_gives_fits_token_count_in_its_words_and_json(
        capsys: pytest.CaptureFixture[str]) -> None:
    fit = _json(capsys, "fit", *LLAMA_8B, "--engine", "sglang")
    report = _json(capsys, "simulate", *LLAMA_8B, "--engine", "sglang", *SIM)
    settings = report["settings"]
    # a field added beside the ones kept: num_blocks and block_size stay
    assert settings["tokens"] == settings["num_blocks"] * settings["block_size"]
    assert settings["tokens"] == fit["tokens"]
    engine_line = _text(capsys, "simulate", *LLAMA_8B, "--engine", "sglang", *SIM
                        ).splitlines()[1]
    assert engine_line.startswith(f"engine: {fit['tokens']:,} tokens (SGLang's "
                                  "max_total_num_tokens; page size 1), max_running_requests")
    assert "KV blocks" not in engine_line


def test_vllm_keeps_its_blocks_and_has_no_sglang_field(
        capsys: pytest.CaptureFixture[str]) -> None:
    fit = _json(capsys, "fit", *LLAMA_8B)
    text = _text(capsys, "fit", *LLAMA_8B)
    assert f"in {fit['blocks_per_gpu']:,} blocks of {fit['block_size']};" in text
    report = _json(capsys, "simulate", *LLAMA_8B, *SIM)
    assert "tokens" not in report["settings"]
    engine_line = _text(capsys, "simulate", *LLAMA_8B, *SIM).splitlines()[1]
    assert engine_line.startswith(f"engine: {report['settings']['num_blocks']:,} KV blocks of "
                                  f"{report['settings']['block_size']}, max_num_seqs")
