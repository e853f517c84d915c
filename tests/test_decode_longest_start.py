"""decode after the CLI audit: where vLLM would refuse to start at its default max_model_len,
the verdict stays and the expectation at the --max-model-len the refusal suggests is printed
beside it (text, --json, --explain); the card table's $/M tok and ridge batch columns have
their --explain steps and the JSON its ridge batch, and the table carries the band."""

from __future__ import annotations

import json

import pytest

from ridgeline.roofline import first_whole_batch
from tests.conftest import cli_json as run_json
from tests.conftest import run_cli

TP2_70B = ["llama-3.1-70b", "--gpu", "h100", "--num-gpus", "2", "--context", "1100"]


def longest(report: dict) -> int:
    """The length the refusal names: fit --target-concurrency 1's, the reason's number."""
    reason = report["points"][0]["expected_none_reason"]
    return int(reason.rsplit("≤ ", 1)[1].replace(",", ""))


def test_a_refused_start_carries_the_expectation_at_the_length_it_suggests(
        capsys: pytest.CaptureFixture[str]) -> None:
    """70B bf16 on 2 x H100 fails vLLM's start-up check at 131,072: each point keeps its
    verdict, and at_max_model_len is the run --max-model-len N gives (N the suggested length):
    batch 1 priced, 64 past the pool's seats."""
    refused = run_json(capsys, "decode", *TP2_70B, "--batch", "1,64")
    n = longest(refused)
    assert all(p["expected"] is None for p in refused["points"])
    given = run_json(capsys, "decode", *TP2_70B, "--batch", "1,64", "--max-model-len", str(n))
    assert given["at_max_model_len"] is None  # it starts: nothing to suggest
    at = refused["at_max_model_len"]
    assert at["max_model_len"] == n
    assert [p["expected"] for p in at["points"]] == [p["expected"] for p in given["points"]]
    assert at["points"][0]["expected"]["per_user_tok_s"] > 0
    assert at["points"][1]["expected_none_code"] == "over_engine_pool"
    assert at["engine_max_batch"] == given["engine_max_batch"]


def test_the_text_keeps_the_verdict_and_marks_the_suggested_length(
        capsys: pytest.CaptureFixture[str]) -> None:
    n = longest(run_json(capsys, "decode", *TP2_70B, "--batch", "1,64"))
    given = run_json(capsys, "decode", *TP2_70B, "--batch", "1,64", "--max-model-len", str(n))
    ms = given["points"][0]["expected"]["time_s"] * 1e3
    code, out, _ = run_cli(capsys, "decode", *TP2_70B, "--batch", "1,64")
    assert code == 0 and out.count("won't start") == 2
    table = out.split(f"at --max-model-len {n:,} (the longest vLLM starts at)", 1)[1]
    assert f"{ms:,.2f}" in table.splitlines()[2]  # the batch-1 row, priced at that length
    held = given["engine_max_batch"][0]["engine_max_batch"]
    assert f"runs ≤ {held:,}" in table  # batch 64 past its seats there
    code, one, _ = run_cli(capsys, "decode", *TP2_70B, "--batch", "1")
    assert code == 0 and f"expected at --max-model-len {n:,}: {ms:,.2f} ms per step" in one
    assert one.startswith("DOES NOT FIT on vLLM 0.34: ")  # the verdict stays, and leads
    assert "expected on vLLM 0.34: nothing (first line)" in one


def test_explain_gives_the_suggested_lengths_expectation_as_priced(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "decode", *TP2_70B, "--batch", "1", "--json", "--explain")
    assert code == 0, err
    data = json.loads(out)
    n, e = data["at_max_model_len"]["max_model_len"], data["at_max_model_len"]["points"][0]
    head = f"at --max-model-len {n:,}, batch 1 at 1,100 tokens of context"
    priced = {s["point"]: s for s in data["explain"] if s["label"] == "expected step"}
    assert list(priced) == [head]  # the refused run prices nothing; the suggested one does
    assert float(priced[head]["result"]["value"]) == pytest.approx(
        e["expected"]["time_s"] * 1e3)
    code, out, _ = run_cli(capsys, "decode", *TP2_70B, "--batch", "1", "--explain")
    assert head + ":" in out
    block = out.split(head + ":", 1)[1]
    assert f"=> expected = {e['expected']['time_s'] * 1e3:,.4g} ms" in block


def test_the_card_table_explains_its_cost_and_ridge_batch_columns(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h200,mi300x",
                             "--batch", "64", "--context", "4096", "--json", "--explain")
    assert code == 0, err
    data = json.loads(out)
    steps = {s["label"]: s for s in data["explain"]}
    for card in data["accelerators"]:
        name, point = card["accelerator"], card["points"][0]
        cost = steps[f"{name}: cost per million output tokens"]
        inputs = {i["name"]: i["value"] for i in cost["inputs"]}
        assert cost["result"]["value"] == pytest.approx(inputs["price"] / inputs["output"]) \
            == pytest.approx(point["expected"]["usd_per_million_output_tokens"])
        ridge = steps[f"{name}: ridge batch"]
        inputs = {i["name"]: i["value"] for i in ridge["inputs"]}
        assert card["first_whole_batch_to_ridge"] == ridge["result"]["value"] == first_whole_batch(
            card["ridge_flop_per_byte"] * inputs["bytes per weight"] / 2)
    code, text, _ = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h200,mi300x",
                            "--batch", "64", "--context", "4096")
    assert code == 0 and "band" in text.splitlines()[2]
    for card in data["accelerators"]:
        e = card["points"][0]["expected"]
        row = next(line for line in text.splitlines() if card["accelerator"] in line)
        assert f"{e['low_s'] * 1e3:,.1f}–{e['high_s'] * 1e3:,.1f}" in row
        assert f" {card['first_whole_batch_to_ridge']:,} " in row
