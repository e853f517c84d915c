"""A context of one token is legal (kv --context 1, fit --max-model-len 1, utilization
--context 1), and so is --max-num-seqs 1: the reports say "1 token" and "1 seat", and the
counts beside them are still the ones the code computes."""

from __future__ import annotations

import json
import re

import pytest

from ridgeline.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_kv_at_one_token_says_token_not_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "kv", "llama-3.1-8b", "--gpu", "h100", "--context", "1")
    assert "1 tokens" not in out
    assert out.splitlines()[0].endswith(", 1 token of context")
    fit = re.search(r"conversations of 1 token that fit: ([\d,]+)", out)
    assert fit is not None
    json_out = run(capsys, "kv", "llama-3.1-8b", "--gpu", "h100", "--context", "1", "--json")
    assert int(fit.group(1).replace(",", "")) == json.loads(json_out)["conversations"]


def test_kv_at_two_tokens_keeps_the_plural(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "kv", "llama-3.1-8b", "--gpu", "h100", "--context", "2")
    assert ", 2 tokens of context" in out
    assert "conversations of 2 tokens that fit" in out


def test_fit_at_max_model_len_one_says_token(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "1")
    assert not re.search(r"(?<![\d,])1 tokens", out)  # "7,581 tokens" is a count
    assert "conversations of 1 token;" in out
    assert "one conversation of 1 token takes" in out


def test_utilization_at_context_one_says_token(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "utilization", "--gpu", "h100", "--running", "1", "--model",
              "llama-3.1-8b", "--context", "1")
    assert "1 tokens" not in out
    assert re.search(r"holds [\d,]+ conversations of 1 token\b", out)


def test_fit_with_one_seat_says_seat(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192",
              "--max-num-seqs", "1")
    assert "(1 seat × vocab)" in out
    assert "conversations of 8,192 tokens at once: min(" in out and "max_num_seqs 1) = 1" in out
    many = run(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192")
    assert re.search(r"\([\d,]+ seats × vocab\)", many)


def test_kv_shows_a_short_sequences_cache_in_a_unit_that_is_not_zero(
        capsys: pytest.CaptureFixture[str]) -> None:
    """One token of Llama-3.1-8B's cache is 128 KiB (--json's bytes_per_sequence), where three
    places of GB read 0.000; a long sequence gives GB (GiB) to four figures, as the other
    lines do. Either is layers × K and V × KV heads × head_dim × 2 bytes (bf16) a token, from
    the config: Llama-3.1-70B's 131,072 tokens are 42.95 GB (40.00 GiB)."""
    import ridgeline.units as units
    from ridgeline import resolve_model

    def per_token(name: str) -> int:
        spec = resolve_model(name)
        assert spec.attention is not None
        return spec.num_layers * 2 * spec.attention.num_kv_heads * spec.attention.head_dim * 2

    one = json.loads(run(capsys, "kv", "llama-3.1-8b", "--context", "1", "--json"))
    out = run(capsys, "kv", "llama-3.1-8b", "--context", "1")
    size = one["bytes_per_sequence"]
    assert size == per_token("llama-3.1-8b") == 128 * 1024
    assert f"per sequence at 1: {units.fmt_decimal_bytes(size)} " \
           f"({units.fmt_binary_bytes(size)})" in out and "0.000 GB" not in out
    long = run(capsys, "kv", "llama-3.1-70b", "--context", "131072")
    size = 131072 * per_token("llama-3.1-70b")
    assert f"per sequence at 131,072: {size / 1e9:.2f} GB ({size / 2**30:.2f} GiB)" in long
