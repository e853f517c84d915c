"""SGLang starts on compute capability 7.5 and up only, TensorRT-LLM on 8.0 and up
(engine_platforms.ENGINE_FLOORS): a V100 was sized under both ('fits, under the ridge: 25
conversations' under SGLang), and a T4 under TensorRT-LLM, where SGLang raises 'SGLang only
supports sm75 and above.' as it loads the model and TensorRT-LLM dropped Turing in 0.14 and
Volta in 0.15. fit and decode refuse them and name the engines that run them; plan leaves
such a card out beside cards they run on."""

from __future__ import annotations

import json

import pytest

from ridgeline.engine_platforms import below_engine_floor, engine_platform_problem
from ridgeline.engine_quantization import NVIDIA_FAMILY_CAPABILITY
from ridgeline.hardware import catalog
from tests.conftest import refused_line, run_cli

PLAN = ("--rate", "2", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100")


@pytest.mark.parametrize(("engine", "floor"), [("sglang", 75), ("trtllm", 80)])
def test_every_nvidia_card_below_the_engines_floor_is_refused_and_no_other(
        engine: str, floor: int) -> None:
    for acc in catalog().values():
        if acc.vendor != "nvidia" or acc.family not in NVIDIA_FAMILY_CAPABILITY:
            continue
        below = NVIDIA_FAMILY_CAPABILITY[acc.family][1] < floor
        assert below_engine_floor(engine, acc) == below, acc.id
        assert bool(engine_platform_problem(engine, acc)) == below, acc.id
    assert not any(below_engine_floor("vllm", a) for a in catalog().values())


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_fit_refuses_a_v100_and_names_what_runs_there(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    line = refused_line(capsys, "fit", "llama-3.1-8b", "--gpu", "v100", "--engine", engine,
                        "--max-model-len", "4096")
    assert "below compute capability" in line and "--engine llama.cpp-cuda" in line
    release = line.split("--engine vllm --engine-version ")[1].split()[0]
    # the release it names runs the card under vLLM
    code, out, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "v100", "--engine",
                             "vllm", "--engine-version", release, "--max-model-len", "4096",
                             "--json")
    assert code == 0, err
    assert json.loads(out)["conversations"] > 0
    # a T4, Turing: SGLang's floor itself, below TensorRT-LLM's
    t4 = run_cli(capsys, "fit", "llama-3.2-1b", "--gpu", "t4", "--engine", engine,
                 "--max-model-len", "4096")
    assert (t4[0] == 0) == (engine == "sglang"), t4
    if engine == "trtllm":
        assert "below compute capability 8.0" in t4[2] and "or --engine vllm" in t4[2]


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_plan_leaves_a_v100_out_beside_a_card_the_engine_runs_on(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    code, out, err = run_cli(capsys, "plan", "llama-3.1-8b", "--engine", engine, *PLAN,
                             "--gpus", "v100,a100", "--json")
    assert code == 0, err
    shown = json.loads(out)
    (left,) = shown["left_out"]
    assert left["gpu"].startswith("v100") and left["what"] == "every format"
    assert shown["winner"]["accelerator"].startswith("a100")
    alone = refused_line(capsys, "plan", "llama-3.1-8b", "--engine", engine, *PLAN,
                         "--gpus", "v100")
    assert "below compute capability" in alone
