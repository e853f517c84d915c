"""A request that arrives to an idle engine and runs alone is priced as `prefill` and
`decode --batch 1` price its steps: its TTFT is prefill's expected time for its prompt (never
under prefill's floor) and its TPOT decode's expected step at its context, on every engine
and attention family (a 79-deployment sweep of simulate against prefill and decode found them
equal to 1e-5; this pins a few of each kind)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline.cli import main

PROMPT_TOKENS = 512
OUTPUT_TOKENS = 32
# the mean context of the decode steps: the prompt, then each token decoded after the first
MID_CONTEXT = PROMPT_TOKENS + OUTPUT_TOKENS // 2

DEPLOYMENTS = [
    ("llama-3.1-8b", "--gpu", "h100-sxm"),  # dense GQA, vLLM
    ("gemma-2-9b", "--gpu", "a100-sxm-80gb", "--engine", "trtllm"),  # full + sliding
    ("qwen3-30b-a3b", "--gpu", "l40s", "--num-gpus", "2", "--engine", "sglang"),  # MoE
    ("jamba-1.5-mini", "--gpu", "mi300x"),  # attention + mamba
    ("mistral-7b", "--gpu", "apple-m2-ultra-76c"),  # llama.cpp-metal, sliding
]


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    data: dict = json.loads(capsys.readouterr().out)
    return data


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=lambda d: f"{d[0]}-{d[2]}")
def test_a_lone_request_takes_prefills_ttft_and_decodes_batch_1_tpot(
        deployment: tuple[str, ...], capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    dep = [*deployment, "--max-model-len", "2048"]
    export = tmp_path / "requests.json"
    # constant arrivals 100 s apart: each request finishes long before the next comes
    sim = run_json(capsys, "simulate", *dep, "--rate", "0.01", "--arrival", "constant",
                   "--num-requests", "2", "--input-len", str(PROMPT_TOKENS),
                   "--output-len", str(OUTPUT_TOKENS), "--export", str(export))
    assert sim["completed"] == 2 and sim["running"]["max"] == 1
    rows = json.loads(export.read_text())
    prefill = run_json(capsys, "prefill", *dep, "--prompt-len", str(PROMPT_TOKENS))
    decode = run_json(capsys, "decode", *dep, "--batch", "1", "--context", str(MID_CONTEXT))
    step = decode["points"][0]
    for row in rows:
        assert row["ttft_s"] >= prefill["floor_time_s"]
        assert row["ttft_s"] == pytest.approx(prefill["expected"]["time_s"], rel=1e-6)
        assert row["tpot_s"] >= step["floor_step_time_s"]
        # the steps' context runs 512 … 543 around decode's 528: a step's time is linear
        # in it, so their mean is the mid-context step's to well under 0.1%
        assert row["tpot_s"] == pytest.approx(step["expected"]["time_s"], rel=1e-3)
