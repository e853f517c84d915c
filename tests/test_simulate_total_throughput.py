"""simulate's total token throughput, as vllm bench serve's "Total Token throughput": the
completed requests' prompt and output tokens over the span output tok/s is over, each prompt
counted whole as sent, a prefix-cache hit or not."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

RUN = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "4", "--num-requests", "100",
       "--input-len", "2048", "--output-len", "128"]
SHARED = ["--prefix-groups", "4", "--prefix-len", "1024"]


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_total_tok_s_is_prompt_and_output_tokens_over_output_tok_s_span(
        capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, *RUN)
    span = data["rates_over_s"]
    assert data["output_tok_s"] == pytest.approx(data["output_tokens"] / span)
    assert data["prompt_tokens"] == pytest.approx(data["prompt_tokens_mean"] * data["completed"])
    assert data["total_tok_s"] == pytest.approx(
        (data["prompt_tokens"] + data["output_tokens"]) / span)
    # a prefill-heavy load: the total is far past the output rate alone
    assert data["total_tok_s"] > 10 * data["output_tok_s"]
    code, text, _ = run_cli(capsys, *RUN)
    assert code == 0
    assert (f"{data['output_tok_s']:,.0f} output tok/s" in text
            and f"{data['total_tok_s']:,.0f} total tok/s (prompt + output" in text)


def test_a_prefix_cache_hit_leaves_the_prompts_counted_as_sent(
        capsys: pytest.CaptureFixture[str]) -> None:
    plain, shared = _json(capsys, *RUN), _json(capsys, *RUN, *SHARED)
    assert shared["prefix_cache_hit_blocks"] > 0 == plain["prefix_cache_hit_blocks"]
    assert shared["prompt_tokens"] == plain["prompt_tokens"]
    assert shared["total_tok_s"] == pytest.approx(
        (shared["prompt_tokens"] + shared["output_tokens"]) / shared["rates_over_s"])


def test_explain_gives_the_total_token_rate_from_its_operands(
        capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, *RUN, "--explain")
    (total,) = [s for s in data["explain"] if s["label"] == "total token rate"]
    given = {q["name"]: q["value"] for q in total["inputs"]}
    assert total["result"]["value"] == pytest.approx(
        (given["prompt tokens"] + given["output tokens"]) / given["simulated time"]) \
        == pytest.approx(data["total_tok_s"])
