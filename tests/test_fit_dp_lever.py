"""fit offers data-parallel attention on the same GPUs as a lever for a MoE under vLLM and
SGLang, priced by the same pool code a run with those flags gets, where the engine's version
has expert parallelism."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

DSV3 = ("fit", "deepseek-v3", "--gpu", "h200", "--max-model-len", "131072", "--json")


def _dp_lever(out: str) -> dict[str, object] | None:
    return next((lv for lv in json.loads(out)["levers"] if lv["name"].startswith("DP attention")),
                None)


@pytest.mark.parametrize(("engine", "spelled"), [
    ("vllm", ("--num-gpus", "1", "-dp", "8", "--enable-expert-parallel")),
    ("sglang", ("--num-gpus", "8", "--dp-size", "8", "--enable-dp-attention",
                "--enable-expert-parallel")),
])
def test_deepseek_v3_on_eight_h200s_is_offered_dp_attention_in_its_engines_flags(
        capsys: pytest.CaptureFixture[str], engine: str, spelled: tuple[str, ...]) -> None:
    code, out, _ = run_cli(capsys, *DSV3, "--num-gpus", "8", "--engine", engine)
    assert code == 0
    lever = _dp_lever(out)
    assert lever is not None
    flags = " ".join(spelled[2:]) if engine == "sglang" else " ".join(spelled)
    assert flags in str(lever["name"])
    code, run, _ = run_cli(capsys, *DSV3, *spelled, "--engine", engine)
    assert code == 0 and json.loads(run)["conversations"] == lever["conversations"]


def test_on_vllm_dp_attention_holds_more_than_tp8(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, *DSV3, "--num-gpus", "8")
    lever = _dp_lever(out)
    assert code == 0 and lever is not None
    assert int(str(lever["conversations"])) > 2 * json.loads(out)["conversations"]


@pytest.mark.parametrize("argv", [
    (*DSV3, "--num-gpus", "8", "--engine-version", "0.7.3"),  # before --enable-expert-parallel
    # (no SGLang release loads DeepSeek-V3 without expert parallelism: DeepseekV3ForCausalLM
    # came in 0.4.1, --enable-ep-moe in 0.4.0.post1; 0.3.6 is refused, test_release_features)
    ("fit", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "8", "--max-model-len", "131072",
     "--target-concurrency", "500", "--json"),  # dense: DP is whole replicas, not a lever
    (*DSV3, "--num-gpus", "1", "-dp", "8", "--enable-expert-parallel"),  # already DP
])
def test_no_dp_attention_lever_where_the_layout_is_not_there_to_take(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0 and json.loads(out)["levers"] and _dp_lever(out) is None
