"""prefill where vLLM would refuse to start at its default max_model_len: the verdict stays,
and the prompt is priced again at the --max-model-len the refusal suggests (text, --json
at_max_model_len, --explain), as decode prices its points there."""

from __future__ import annotations

import json

import pytest

from tests.conftest import cli_json as run_json
from tests.conftest import run_cli

TP2_70B = ["llama-3.1-70b", "--gpu", "h100", "--num-gpus", "2", "--prompt-len", "1100"]


def longest(report: dict) -> int:
    """The length the refusal names, the reason's number."""
    return int(report["expected_none_reason"].rsplit("≤ ", 1)[1].split(" ")[0]
               .replace(",", ""))


def test_a_refused_start_carries_the_prompt_priced_at_the_length_it_suggests(
        capsys: pytest.CaptureFixture[str]) -> None:
    """70B bf16 on 2 x H100 fails vLLM's start-up check at 131,072: the prompt keeps its
    verdict, and at_max_model_len is the run --max-model-len N gives (N the suggested
    length); 64 prompts there are past its pool."""
    refused = run_json(capsys, "prefill", *TP2_70B)
    n = longest(refused)
    assert refused["expected"] is None and refused["expected_none_code"] == "engine_runs_none"
    given = run_json(capsys, "prefill", *TP2_70B, "--max-model-len", str(n))
    assert given["at_max_model_len"] is None  # it starts: nothing to suggest
    at = refused["at_max_model_len"]
    assert at["max_model_len"] == n and at["engine_runs"]
    for key in ("expected", "engine_max_batch", "prompt_steps", "max_num_batched_tokens"):
        assert at[key] == given[key], key
    assert at["expected"]["prompt_tok_s"] > 0
    many = run_json(capsys, "prefill", *TP2_70B, "--batch", "64")["at_max_model_len"]
    assert many["expected"] is None and many["expected_none_code"] == "over_engine_pool"
    assert many["engine_max_batch"] == at["engine_max_batch"] < 64


def test_the_text_keeps_the_verdict_and_names_the_suggested_length(
        capsys: pytest.CaptureFixture[str]) -> None:
    n = longest(run_json(capsys, "prefill", *TP2_70B))
    given = run_json(capsys, "prefill", *TP2_70B, "--max-model-len", str(n))
    ms, held = given["expected"]["time_s"] * 1e3, given["engine_max_batch"]
    said = f"expected at --max-model-len {n:,}: {ms:,.1f} ms"
    code, out, _ = run_cli(capsys, "prefill", *TP2_70B)
    assert code == 0 and out.startswith("DOES NOT FIT on vLLM 0.34: ")  # the verdict leads
    assert "expected on vLLM 0.34: nothing (first line)" in out
    line = next(x for x in out.splitlines() if x.startswith(said))
    assert f"its pool holds {held:,} prompts of 1,100 tokens" in line
    code, out, _ = run_cli(capsys, "prefill", *TP2_70B[:-1], "1100,2000")
    assert code == 0 and out.count("won't start") == 2 and f"  {said}" in out
    code, out, _ = run_cli(capsys, "prefill", *TP2_70B[:2], "h100,h200", *TP2_70B[3:])
    assert code == 0 and f"2 x h100-sxm: {said}" in out


def test_the_expectation_priced_at_the_suggested_length_brings_its_cautions(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The RTX 4090's profile caution (no GeForce rows) goes with the expectation printed,
    the one at the suggested length."""
    card = ["llama-3.1-8b", "--gpu", "rtx-4090", "--prompt-len", "4096"]
    refused = run_json(capsys, "prefill", *card)
    given = run_json(capsys, "prefill", *card, "--max-model-len", str(longest(refused)))
    geforce = [c for c in given["cautions"] if "nvidia-geforce" in c]
    assert geforce and all(c in refused["cautions"] for c in geforce)


def test_explain_gives_the_suggested_lengths_expectation_as_priced(
        capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "prefill", *TP2_70B, "--explain")
    n, e = data["at_max_model_len"]["max_model_len"], data["at_max_model_len"]["expected"]
    head = f"at --max-model-len {n:,}, 1 x 1,100-token prompt"
    speed = {s["point"]: s for s in data["explain"] if s["label"] == "expected prompt throughput"}
    assert list(speed) == [head]  # the refused run prices nothing; the suggested one does
    assert float(speed[head]["result"]["value"]) == pytest.approx(e["prompt_tok_s"])
    code, out, _ = run_cli(capsys, "prefill", *TP2_70B, "--explain")
    assert code == 0 and f"  {head}:" in out
    code, out, _ = run_cli(capsys, "prefill", *TP2_70B[:-1], "1100,2000", "--json", "--explain")
    labels = [s["label"] for s in json.loads(out)["explain"]]
    assert f"1,100-token prompt: at --max-model-len {n:,}: expected prompt throughput" in labels


def test_explain_gives_no_throughput_to_prompts_that_do_not_fit(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A prompt whose weights and cache overflow the card runs at no speed: --explain keeps
    the arithmetic of its time but no throughput step (floor_prompt_tok_s is null), as
    decode's does for a batch that does not fit; a prompt that fits keeps its throughput."""
    for model, fits in (("llama-3.1-70b", False), ("llama-3.1-8b", True)):
        code, out, err = run_cli(capsys, "prefill", model, "--gpu", "h100",
                                 "--prompt-len", "4000", "--json", "--explain")
        assert code == 0, err
        data = json.loads(out)
        assert data["fits"] is fits
        speeds = [s for s in data["explain"] if s["result"]["unit"] == "tok/s"]
        assert bool(speeds) is fits and (data["floor_prompt_tok_s"] is not None) is fits
        assert any(s["label"] == "prefill time" for s in data["explain"])
