"""vLLM 0.8.0 to 0.8.2's own drafter flags: --speculative-model [ngram] with
--ngram-prompt-lookup-max/-min, read as those releases read them (0.8.0 and 0.8.1 have no
--speculative-config and need the max; 0.8.2 builds the config of them; 0.8.3 removed them),
and prompt_lookup keys beside a named drafter, which vLLM drops."""

from __future__ import annotations

import json

import pytest

from ridgeline.engine_spec import legacy_lookup_required, vllm_speculative_config
from ridgeline.engine_versions import removed_flags
from tests.conftest import run_cli

LLAMA = ("decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "8", "--json")
V3 = ("decode", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--batch", "8",
      "--context", "4096", "--json")
NGRAM = ("--speculative-model", "[ngram]", "--num-speculative-tokens", "3")


def spec(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[dict, str]:
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    return json.loads(out)["points"][0]["speculative"], err


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, (argv, err)
    return err


@pytest.mark.parametrize("version", ["0.8.0", "0.8.1"])
def test_before_0_8_2_an_ngram_drafter_needs_its_lookup_max(
        capsys: pytest.CaptureFixture[str], version: str) -> None:
    assert legacy_lookup_required(version)
    err = refusal(capsys, *LLAMA, "--engine-version", version, *NGRAM)
    assert "--ngram-prompt-lookup-max" in err and f"vLLM {version}" in err
    looked, _ = spec(capsys, *LLAMA, "--engine-version", version, *NGRAM,
                     "--ngram-prompt-lookup-max", "4")
    named, _ = spec(capsys, *LLAMA, "--engine-version", "0.8.2", "--speculative-config",
                    '{"method": "ngram", "num_speculative_tokens": 3}')
    assert looked == named and looked["method"] == "ngram"


def test_0_8_2_defaults_the_lookup_and_takes_either_spelling(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert not legacy_lookup_required("0.8.2")
    plain, _ = spec(capsys, *LLAMA, "--engine-version", "0.8.2", *NGRAM)
    looked, _ = spec(capsys, *LLAMA, "--engine-version", "0.8.2", *NGRAM,
                     "--ngram-prompt-lookup-max", "4", "--ngram-prompt-lookup-min", "2")
    assert plain == looked and plain["method"] == "ngram"


@pytest.mark.parametrize("version", ["0.8.0", "0.8.1"])
def test_speculative_config_before_0_8_2_is_refused(capsys: pytest.CaptureFixture[str],
                                                    version: str) -> None:
    err = refusal(capsys, *LLAMA, "--engine-version", version, "--speculative-config",
                  '{"method": "ngram", "num_speculative_tokens": 3}')
    assert "no --speculative-config" in err and "0.8.2" in err


def test_the_lookup_flags_went_with_the_others_in_0_8_3(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert "--ngram-prompt-lookup-max" in removed_flags("vllm")
    err = refusal(capsys, *LLAMA, "--engine-version", "0.8.3", "--ngram-prompt-lookup-max", "4")
    assert "removed in v0.8.3" in err


def test_a_min_above_the_max_is_refused_as_vllm_raises(
        capsys: pytest.CaptureFixture[str]) -> None:
    for version in ("0.8.0", "0.8.2"):  # the flags given are the ones named
        err = refusal(capsys, *LLAMA, "--engine-version", version, *NGRAM,
                      "--ngram-prompt-lookup-max", "2", "--ngram-prompt-lookup-min", "3")
        assert "--ngram-prompt-lookup-min (3) is above --ngram-prompt-lookup-max (2)" in err
        assert "--speculative-config" not in err and "prompt_lookup_" not in err
    err = refusal(capsys, *LLAMA, "--engine-version", "0.9.2", "--speculative-config",
                  '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 3, '
                  '"prompt_lookup_max": 2}')
    assert "--speculative-config's prompt_lookup_min (3) is above its prompt_lookup_max (2)" \
        in err
    err = refusal(capsys, *LLAMA, "--engine-version", "0.9.2", "--speculative-config",
                  '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 0}')
    assert "prompt_lookup_max is an n-gram length of at least 1" in err
    err = refusal(capsys, *LLAMA, "--engine-version", "0.8.2", *NGRAM,
                  "--ngram-prompt-lookup-max", "0")
    assert "--ngram-prompt-lookup-max is an n-gram length of at least 1" in err
    # one unset takes the other's value, so a min alone is never above the max
    assert vllm_speculative_config('{"method": "ngram", "num_speculative_tokens": 3, '
                                   '"prompt_lookup_min": 6}').method == "ngram"


def test_the_older_drafter_flags_are_named_in_their_own_errors(
        capsys: pytest.CaptureFixture[str]) -> None:
    """0.8.2 builds --speculative-config's JSON of --speculative-model and
    --num-speculative-tokens: an error names the flags given, not the keys built."""
    err = refusal(capsys, *LLAMA, "--engine-version", "0.8.2", "--speculative-model", "[ngram]",
                  "--ngram-prompt-lookup-max", "4")
    assert "--num-speculative-tokens" in err and "--speculative-config" not in err
    err = refusal(capsys, *LLAMA, "--engine-version", "0.8.2", "--speculative-model",
                  "z-lab/Qwen3-8B-DFlash", "--num-speculative-tokens", "3")
    assert "--speculative-model 'z-lab/Qwen3-8B-DFlash' names a dflash drafter" in err
    assert "--speculative-config" not in err


def test_the_lookup_keys_without_a_model_follow_the_unnamed_rule_on_0_8_0(
        capsys: pytest.CaptureFixture[str]) -> None:
    """0.8.0's maybe_create_spec_config: --num-speculative-tokens without --speculative-model
    takes DeepSeek-V3's own MTP layers and refuses any other target; the lookup is dropped."""
    legacy = ("--engine-version", "0.8.0", "--num-speculative-tokens", "1",
              "--ngram-prompt-lookup-max", "4")
    looked, err = spec(capsys, *V3, *legacy)
    named, _ = spec(capsys, *V3, "--engine-version", "0.8.2", "--speculative-config",
                    '{"method": "deepseek_mtp", "num_speculative_tokens": 1}')
    assert looked["method"] == named["method"] != "ngram"
    assert "caution" in err and "--speculative-model [ngram]" in err
    err = refusal(capsys, *LLAMA, *legacy)
    assert "--num-speculative-tokens without --speculative-model" in err


def test_the_lookup_alone_builds_no_drafter(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *LLAMA, "--engine-version", "0.8.2",
                             "--ngram-prompt-lookup-max", "4")
    assert code == 0 and json.loads(out)["points"][0]["speculative"] is None
    assert "--ngram-prompt-lookup-max ignored: no drafter" in err


def test_lookup_keys_beside_a_named_drafter_leave_it_a_draft_model() -> None:
    """SpeculativeConfig zeroes the lookup keys outside its n-gram branch (0.8.2-0.8.4)."""
    drafter = vllm_speculative_config('{"model": "meta-llama/Llama-3.2-1B", '
                                      '"num_speculative_tokens": 3, "prompt_lookup_max": 4}')
    assert drafter.method == "draft-model" and drafter.draft_model
