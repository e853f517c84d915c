"""Words at fit's and prefill's edges: an eager run's graph row says none were captured, a
derived SGLang fraction reads to the four places its --explain gives, one of a thing is not
"1 things", and prefill names the engine as decode does."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import run_cli


def test_enforce_eager_graph_row_says_none_rather_than_captured_after_sizing(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ("fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192")
    code, out, _ = run_cli(capsys, *base, "--enforce-eager")
    [row] = [line for line in out.splitlines() if line.startswith("− CUDA graphs")]
    assert code == 0 and "none: --enforce-eager" in row and "captured" not in row
    code, out, _ = run_cli(capsys, *base, "--enforce-eager", "--json")
    assert json.loads(out)["taken_bytes_per_gpu"]["cuda_graphs"] == 0
    # a release that captures its graphs after sizing still says so
    code, out, _ = run_cli(capsys, *base, "--engine-version", "0.15")
    [row] = [line for line in out.splitlines() if line.startswith("− CUDA graphs")]
    assert "captured after sizing" in row


def test_sglangs_derived_fraction_reads_as_its_explain_gives_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3.5-35B-A3B's vision tower cuts SGLang's 0.835 by 0.9248: 0.772179…, printed
    0.7722 in the budget row, as --explain's reserved fraction gives it."""
    argv = ("fit", "qwen3.5-35b-a3b", "--gpu", "h100", "--engine", "sglang",
            "--max-model-len", "32k")
    code, out, _ = run_cli(capsys, *argv, "--json")
    fraction = json.loads(out)["reserved_fraction"]
    code, out, _ = run_cli(capsys, *argv)
    shown = re.search(r"mem_fraction_static ([\d.]+);", out)
    assert code == 0 and shown and len(shown.group(1)) <= len("0.7722") < len(repr(fraction))
    assert float(shown.group(1)) == pytest.approx(fraction, abs=5e-5)


def test_one_conversation_and_one_block_are_singular(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "h100",
                           "--target-concurrency", "1")
    assert "holds 1 conversation at once" in out and " 1 conversations" not in out
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100",
                           "--max-model-len", "1")
    assert code == 0 and "(1 whole block of 64 tokens, 64 slots)" in out and " 1 whole blocks" not in out


def test_prefill_names_the_engine_as_decode_does_in_its_refusal(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ("llama-3.1-70b", "--gpu", "h100", "--weights", "fp8")
    _, prefill, _ = run_cli(capsys, "prefill", *base, "--prompt-len", "2000")
    _, decode, _ = run_cli(capsys, "decode", *base, "--batch", "1", "--context", "2000")
    assert "vLLM would refuse to start" in prefill.splitlines()[0]
    assert "vllm would" not in prefill and "vLLM (" in decode.splitlines()[0]
