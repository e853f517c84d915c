"""fit on a vLLM release without pipeline parallelism (before 0.5.1: engine_versions.
PIPELINE_FROM) skips its pipeline-stage levers instead of refusing the user's own layout, and
says the stages are what more GPUs would need; a layout with stages is still refused. No
lever's refusal aborts the report."""

from __future__ import annotations

import json

import pytest

from ridgeline.engine_versions import pipeline_parallel_problem
from tests.conftest import run_cli

# models vLLM 0.4 and 0.5 load (Llama 3.1's rope type came in 0.5.3.post1), on cards whose
# eight GPUs leave more GPUs a pipeline-stage lever
LLAMA_70B = ("fit", "llama-2-70b", "--gpu", "a100-40gb", "--num-gpus", "8", "--json")


def test_vllm_0_4_runs_one_stage_and_refuses_two() -> None:
    assert pipeline_parallel_problem("vllm", "0.4", 1) == ""
    assert pipeline_parallel_problem("vllm", "0.5.1", 2) == ""
    assert pipeline_parallel_problem("vllm", None, 2) == ""
    assert "v0.5.1" in pipeline_parallel_problem("vllm", "0.4", 2)


@pytest.mark.parametrize("argv", [
    (*LLAMA_70B, "--engine-version", "0.4"),
    ("fit", "mixtral-8x22b", "--gpu", "a100-40gb", "--num-gpus", "8", "--engine-version", "0.5",
     "--json"),
])
def test_tp8_on_a_release_without_stages_gets_its_report(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    report = json.loads(out)
    assert report["pipeline_parallel_size"] == 1
    assert not any("PP" in str(lever["name"]) for lever in report["levers"])


def test_more_gpus_names_the_missing_stages_rather_than_64_gpus(
        capsys: pytest.CaptureFixture[str]) -> None:
    # eight T4s cannot load Llama-2-70B's fp16 weights: more GPUs would need stages
    on_t4 = [("t4" if arg == "a100-40gb" else arg) for arg in LLAMA_70B[:-1]]
    code, out, _ = run_cli(capsys, *on_t4, "--engine-version", "0.4")
    assert code == 0
    assert pipeline_parallel_problem("vllm", "0.4", 2) in out
    code, later, _ = run_cli(capsys, *LLAMA_70B, "--engine-version", "0.5.1")
    assert code == 0
    assert any("PP2" in str(lever["name"]) for lever in json.loads(later)["levers"])


def test_the_users_own_stages_are_still_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "fit", "llama-2-7b", "--gpu", "h100", "-pp", "2",
                           "--engine-version", "0.4")
    assert code == 2 and pipeline_parallel_problem("vllm", "0.4", 2) in err


def test_a_lever_the_engine_refuses_never_aborts_the_report(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever refuses a lever's pool (its run in the lever loop, or a builder that sizes
    pools of its own), the user's layout was sized already: the lever is skipped and the
    report stands, with the levers that are left."""
    from ridgeline.errors import InputError
    from ridgeline.reports import fit_levers

    argv = ("fit", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "2", "--max-model-len",
            "131072", "--json")
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    names = [lever["name"] for lever in json.loads(out)["levers"]]
    assert any(name.startswith("--max-model-len") for name in names) and len(names) > 1

    def refused(*_: object, **__: object) -> object:
        raise InputError("refused by this test")

    monkeypatch.setattr(fit_levers, "_longest_context_lever", refused)
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    left = [lever["name"] for lever in json.loads(out)["levers"]]
    assert left == [n for n in names if not n.startswith("--max-model-len")]
    monkeypatch.setattr(fit_levers, "run_pool", refused)
    code, out, err = run_cli(capsys, *argv)
    assert code == 0 and json.loads(out)["levers"] == [], err
