"""observe says, in one note, where the engine's pool size or cache dtype cannot be read and
the check it feeds is skipped (observe_metrics._read_pool): such a scrape used to pass
with no word, the pool modelled standing in for the engine's unannounced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

FLAGS = ("--model", "llama-3.1-8b", "--gpu", "h100", "--context", "4000")
M = 'model_name="meta-llama/Llama-3.1-8B"'
SKIPPED = "no pool size read"


def vllm_scrape(tmp_path: Path, labels: str) -> str:
    path = tmp_path / "m.prom"
    path.write_text(f"vllm:num_requests_running{{{M}}} 10\n"
                    f"vllm:num_requests_waiting{{{M}}} 0\n"
                    f"vllm:kv_cache_usage_perc{{{M}}} 0.02\n"
                    f"vllm:cache_config_info{{{labels}{M}}} 1\n")
    return str(path)


def observed(capsys: pytest.CaptureFixture[str], source: str) -> tuple[str, dict]:
    code, text, _ = run_cli(capsys, "observe", source, *FLAGS)
    assert code == 0
    code, out, _ = run_cli(capsys, "observe", source, *FLAGS, "--json")
    assert code == 0
    return text, json.loads(out)


@pytest.mark.parametrize("blocks", ['num_gpu_blocks="None",', 'num_gpu_blocks="0",',
                                    'num_gpu_blocks="NaN",', 'num_gpu_blocks="-3",',
                                    'num_gpu_blocks="",', ""])
def test_a_pool_size_that_gives_no_pool_is_noted_as_a_check_skipped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], blocks: str) -> None:
    """num_gpu_blocks None (before the engine profiled its pool), 0, NaN, negative, empty or
    left out: no pool is read, and a note says the reported pool's check is skipped."""
    text, data = observed(capsys, vllm_scrape(tmp_path, f'block_size="16",cache_dtype="auto",'
                                                        f"{blocks}"))
    assert data["pool_blocks_reported"] is None
    (note,) = [n for n in data["notes"] if SKIPPED in n]
    assert note.startswith("vllm:cache_config_info: ")
    assert ("num_gpu_blocks=" if blocks else "no num_gpu_blocks") in note
    assert "the reported pool's check against it is skipped" in note
    assert f"note: {note}" in text


def test_a_block_size_left_out_is_noted(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    _, data = observed(capsys, vllm_scrape(tmp_path, 'cache_dtype="auto",num_gpu_blocks="9",'))
    assert any(SKIPPED in n and "no block_size" in n for n in data["notes"])


def test_a_readable_pool_gets_no_such_note(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    _, data = observed(capsys, vllm_scrape(
        tmp_path, 'block_size="16",cache_dtype="auto",num_gpu_blocks="30000",'))
    assert data["pool_blocks_reported"] == 30000
    assert not any("vllm:cache_config_info" in n for n in data["notes"])


@pytest.mark.parametrize(("label", "words"), [
    ('cache_dtype="q9_z",', "cache_dtype='q9_z' names no KV cache dtype"),
    ('cache_dtype="None",', "cache_dtype='None' names no KV cache dtype"),
    ("", "no cache_dtype")])
def test_a_cache_dtype_naming_no_cache_is_noted_as_a_check_skipped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], label: str, words: str) -> None:
    """A label that names no cache (or none at all) left the KV dtype described unchecked
    against the server's without a word."""
    text, data = observed(capsys, vllm_scrape(
        tmp_path, f'block_size="16",{label}num_gpu_blocks="30000",'))
    note = (f"vllm:cache_config_info: {words}: the KV dtype described is not checked against "
            "the server's")
    assert note in data["notes"] and f"note: {note}" in text
    assert not any("cache_dtype=" in c for c in data["cautions"])


def test_sglangs_pool_at_zero_is_noted_as_a_check_skipped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.prom"
    path.write_text(f"sglang:num_running_reqs{{{M}}} 10\n"
                    f"sglang:num_queue_reqs{{{M}}} 0\n"
                    f"sglang:token_usage{{{M}}} 0.02\n"
                    f"sglang:max_total_num_tokens{{{M}}} 0\n")
    _, data = observed(capsys, str(path))
    assert data["pool_tokens_reported"] is None
    assert any(n.startswith("sglang:max_total_num_tokens is 0: no pool size read")
               for n in data["notes"])
