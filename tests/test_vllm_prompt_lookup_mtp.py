"""vLLM 0.8.0 to 0.10.x read a --speculative-config of prompt_lookup keys without a method as
no drafter named: a target they list (DeepSeek-V3) drafts with its own MTP layers and the
lookup keys are dropped (SpeculativeConfig.__post_init__); "method": "ngram" stays n-gram."""

from __future__ import annotations

import json

import pytest

from ridgeline.engine_spec import vllm_unnamed_drafts_mtp
from tests.conftest import run_cli

LOOKUP_ONLY = '{"prompt_lookup_max": 4, "num_speculative_tokens": 1}'
NGRAM = '{"method": "ngram", "prompt_lookup_max": 4, "num_speculative_tokens": 1}'
MTP = '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'


@pytest.mark.parametrize(("version", "model_type", "mtp"), [
    ("0.8.5", "deepseek_v3", True), ("0.9.2", "deepseek_v3", True),
    ("0.10.2", "deepseek_v3", True), ("0.10.2", "qwen3_next", True),
    ("0.9.2", "llama", False), ("0.11", "deepseek_v3", False), ("0.8.4", "deepseek_v3", True),
    ("0.8.0", "deepseek_v3", True), ("0.8.4", "llama", False)])
def test_the_releases_that_draft_with_the_targets_mtp_layers(version: str, model_type: str,
                                                             mtp: bool) -> None:
    assert vllm_unnamed_drafts_mtp(version, model_type) is mtp


def _spec(capsys, config: str, version: str = "0.9.2") -> tuple[dict, str]:
    code, out, err = run_cli(capsys, "decode", "deepseek-v3", "--gpu", "h200", "--num-gpus",
                             "8", "--engine", "vllm", "--engine-version", version, "--batch",
                             "8", "--context", "4096", "--speculative-config", config, "--json")
    assert code == 0, err
    return json.loads(out)["points"][0]["speculative"], err


@pytest.mark.parametrize("version", ["0.8.2", "0.8.4", "0.8.5", "0.9.2", "0.10.2"])
def test_prompt_lookup_alone_on_deepseek_v3_is_its_mtp_drafter(capsys, version: str) -> None:
    looked, err = _spec(capsys, LOOKUP_ONLY, version)
    named, _ = _spec(capsys, MTP, version)
    assert err.count("caution: ") == 1 and "MTP layers" in err and '"method": "ngram"' in err
    assert looked["method"] == named["method"] != "ngram"
    assert looked["verify_s"] == named["verify_s"] and looked["step_s"] == named["step_s"]
    assert looked["step_s"] > looked["verify_s"]  # the MTP layer's pass


def test_method_ngram_stays_an_ngram_lookup(capsys) -> None:
    spec, err = _spec(capsys, NGRAM)
    assert spec["method"] == "ngram" and spec["step_s"] == spec["verify_s"]
    assert "MTP layers" not in err


def test_a_target_without_mtp_layers_is_refused_as_before(capsys) -> None:
    code, _, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--engine",
                           "vllm", "--engine-version", "0.9.2", "--speculative-config",
                           LOOKUP_ONLY)
    assert code == 2 and err.count("\n") == 1 and "neither model nor method" in err
