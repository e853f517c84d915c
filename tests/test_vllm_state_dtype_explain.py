"""vLLM's fit --explain names the dtype it keeps a hybrid's SSM state in, which sets the
block: Qwen3.5 and Nemotron-H get 1088- and 4160-token blocks because vLLM keeps their SSM
state in fp32 (Qwen3.5's config names mamba_ssm_dtype; Nemotron-H by vLLM's own rule), and
the explain had named only "bf16"; `kv` and SGLang's explain said "SSM state fp32"."""

from __future__ import annotations

import math
import re

import pytest

from tests.test_calibrate_input import run

QWEN35 = ("qwen3.5-35b-a3b", "the config's mamba_ssm_dtype")
NEMOTRON_H = ("nemotron-h-56b", "vLLM's own rule for nemotron_h, its config naming no "
              "mamba_ssm_cache_dtype")


def _figure(text: str, name: str) -> int:
    found = re.search(rf"      {name} = ([\d,]+) ", text)
    assert found, name
    return int(found.group(1).replace(",", ""))


@pytest.mark.parametrize(("model", "why"), [QWEN35, NEMOTRON_H])
def test_the_block_step_names_the_state_dtype_and_gives_the_block(
        model: str, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, text, _ = run(capsys, "fit", model, "--gpu", "h100", "--num-gpus", "2",
                        "--max-model-len", "32768", "--explain")
    assert code == 0
    assert f"SSM state fp32 ({why}), conv state bf16; ÷ TP 2" in text
    assert f"its SSM state in fp32: {why})" in text  # the headline's block, said once
    assert "32768 tokens, bf16 KV, SSM state fp32;" in text  # per conversation
    state, per_token = _figure(text, "state per layer"), _figure(text, "attention bytes per token")
    alignment, block = _figure(text, "alignment"), _figure(text, "=> block")
    assert block == alignment * math.ceil(state / (alignment * per_token))
    assert f"blocks of {block} tokens shared by" in text  # the block the pool is cut into


def test_kv_and_fit_name_the_same_ssm_dtype(capsys: pytest.CaptureFixture[str]) -> None:
    """`kv` says the state dtypes in the same words and order as fit's block step."""
    code, kv, _ = run(capsys, "kv", "qwen3.5-35b-a3b", "--context", "32768")
    assert code == 0 and "SSM state fp32, conv state bf16" in kv
    code, fit, _ = run(capsys, "fit", "qwen3.5-35b-a3b", "--gpu", "h100", "--num-gpus", "2",
                       "--max-model-len", "32768", "--explain")
    assert code == 0 and f"SSM state fp32 ({QWEN35[1]}), conv state bf16" in fit
