"""One flag under two of its spellings with two values is refused, on the command line and
in a config file; the same value twice, or a command-line value over a file's, still runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

PLAN = ("plan", "llama-3.1-8b", "--rate", "1", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50",
        "--max-gpus", "1", "--json")


def _refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, (argv, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    return json.loads(out)


def test_plans_gpu_beside_gpus_naming_other_cards_is_refused_by_both_names(
        capsys: pytest.CaptureFixture[str]) -> None:
    said = _refused(capsys, *PLAN, "--gpu", "h100", "--gpus", "h200")
    assert "--gpu h100" in said and "--gpus h200" in said and "give it once" in said
    one = _json(capsys, *PLAN, "--gpu", "h200", "--gpus", "h200")
    assert one == _json(capsys, *PLAN, "--gpus", "h200")


def test_two_spellings_compare_as_the_flag_reads_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    """8k is 8,000 tokens (ridgeline's k), so --context-length 8000 agrees with it and 8192
    does not."""
    base = ("fit", "llama-3.1-8b", "--gpu", "h100", "--json")
    agreed = _json(capsys, *base, "--max-model-len", "8k", "--context-length", "8000")
    assert agreed == _json(capsys, *base, "--max-model-len", "8000")
    said = _refused(capsys, *base, "--max-model-len", "8k", "--context-length=8192")
    assert "--max-model-len 8k" in said and "--context-length 8192" in said
    said = _refused(capsys, *base, "--kv-dtype", "fp8", "--kv-cache-dtype", "bf16")
    assert "--kv-cache-dtype bf16" in said


def test_the_same_spelling_twice_keeps_the_last_as_argparse_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ("fit", "llama-3.1-8b", "--gpu", "h100", "--json")
    twice = _json(capsys, *base, "--max-model-len", "4096", "--max-model-len", "8192")
    assert twice == _json(capsys, *base, "--max-model-len", "8192")


def test_a_config_file_setting_one_flag_under_two_keys_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    both = tmp_path / "serve.yaml"
    both.write_text("tensor_parallel_size: 4\ntp: 8\n")
    said = _refused(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--config", str(both))
    assert "tensor_parallel_size and tp in " in said and "serve.yaml set one flag" in said
    same = tmp_path / "same.yaml"
    same.write_text("tensor_parallel_size: 4\ntp: 4\nmax_model_len: 8192\n")
    read = _json(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--config", str(same),
                 "--json")
    assert read == _json(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4",
                         "--max-model-len", "8192", "--json")


def test_the_command_line_still_overrides_a_config_files_value(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """vllm serve's rule: the file's max_model_len gives way to the typed one, no refusal."""
    conf = tmp_path / "serve.yaml"
    conf.write_text("max_model_len: 4096\n")
    read = _json(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--config", str(conf),
                 "--context-length", "8192", "--json")
    assert read == _json(capsys, "fit", "llama-3.1-8b", "--gpu", "h100",
                         "--max-model-len", "8192", "--json")
