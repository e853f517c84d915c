"""plan --json names the settings its winner was sized and launched with as simulate's --json
and its own launch line do: the engine release whose rules sized the pools (the newest
modelled where none is named), and enable_chunked_prefill only where it is a launch setting
(TensorRT-LLM's YAML), null under vLLM and SGLang, which chunk without it."""

from __future__ import annotations

import functools
import json
import shlex

import pytest

import ridgeline.plan as planning
from tests.conftest import run_cli
from tests.plan_memo import PlanMemo

# one card serves each load here: the search within one GPU
SLO = ["--slo-ttft-ms", "5000", "--slo-tpot-ms", "50", "--gpus", "h100-sxm", "--max-gpus", "1"]
LONG_PROMPTS = ["--rate", "1", "--input-len", "12000", "--output-len", "200"]
# this module's searches, each question once (`plan`'s among them)
PLANS = PlanMemo()


@pytest.fixture(autouse=True)
def _one_search_per_question(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planning, "plan", PLANS)


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def _checked(capsys: pytest.CaptureFixture[str], plan: dict) -> dict:
    """simulate --json of the plan's own check command for its winner."""
    argv = shlex.split(plan["check_command"])
    assert argv[:2] == ["ridgeline", "simulate"]
    return _json(capsys, *argv[1:])


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_plan_names_the_release_that_sized_it_as_its_check_does(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        engine: str) -> None:
    plan = _json(capsys, "plan", "llama-3.1-8b", "--rate", "5", *SLO, "--engine", engine)
    assert plan["engine_version"] is not None
    assert plan["engine_version"] == _checked(capsys, plan)["settings"]["engine_version"]
    # a release named is named back, as the search reads it (unsimulated: verify=0)
    monkeypatch.setattr(planning, "plan", functools.partial(PLANS, verify=0))
    named = _json(capsys, "plan", "llama-3.1-8b", "--rate", "5", *SLO, "--engine", engine,
                  "--engine-version", "0.5.2" if engine == "sglang" else "0.17.0")
    assert named["engine_version"] == ("0.5.2" if engine == "sglang" else "0.17.0")


def test_vllm_winner_leaves_tensorrt_llms_chunked_prefill_setting_null(
        capsys: pytest.CaptureFixture[str]) -> None:
    plan = _json(capsys, "plan", "llama-3.1-8b", *LONG_PROMPTS, *SLO)
    assert plan["winner"]["enable_chunked_prefill"] is None
    assert "chunked" not in json.dumps(plan["commands"])


def test_trtllm_winner_gives_the_chunked_prefill_its_yaml_sets(
        capsys: pytest.CaptureFixture[str]) -> None:
    for load in (LONG_PROMPTS, ["--rate", "5"]):
        plan = _json(capsys, "plan", "llama-3.1-8b", *load, *SLO, "--engine", "trtllm")
        yaml = "".join((plan.get("config_files") or {}).values())
        on = "enable_chunked_prefill: true" in yaml
        assert plan["winner"]["enable_chunked_prefill"] is on
        assert ("--enable_chunked_prefill" in plan["check_command"]) is on


UNPRICED = ["llama-3.1-8b", "--rate", "5", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50",
            "--gpus", "a100-pcie-40gb", "--max-gpus", "1"]


def test_an_unpriced_single_pool_gets_its_figures_and_the_launch_a_price_would_give(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Only unpriced cards: the single pool had one line, no figures and no command, where
    the split below it got both. It gets the analytic figures it was sized with (not
    simulated) and the launch command that pricing its card makes the winner's."""
    plan = _json(capsys, "plan", *UNPRICED)
    (row,) = plan["unpriced"]
    assert plan["verdict"] == "unpriced" and not row["verified"]
    priced = _json(capsys, "plan", *UNPRICED, "--price", f"{row['accelerator']}=1.5")
    assert priced["winner"]["label"] == row["label"]
    assert row["commands"] == priced["commands"]
    code, text, _ = run_cli(capsys, "plan", *UNPRICED)
    assert code == 0
    lines = text.splitlines()
    at = lines.index(next(line for line in lines if line.startswith(f"  {row['label']}: ")))
    assert (f"analytic capacity of a replica {row['replica_rate_req_s']:,.2f} req/s at batch "
            f"{row['batch']}") in lines[at] and "not simulated" in lines[at]
    assert lines[at + 1] == f"    run it with: {row['commands']['vllm']}"
