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

# up to 2 GPUs, one process: which cards a floor leaves out, and the card the winner is on, are
# the same at any group size
PLAN = ("--rate", "2", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100", "--max-gpus", "2",
        "--workers", "1")


pytestmark = pytest.mark.usefixtures("unsimulated")  # every test here reads the search alone


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
        assert "below compute capability 8.0" in t4[2] and "try --engine vllm" in t4[2]


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_plan_leaves_a_v100_out_beside_a_card_the_engine_runs_on(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    code, out, err = run_cli(capsys, "plan", "llama-3.1-8b", "--engine", engine, *PLAN,
                             "--gpus", "v100,a100", "--json")
    assert code == 0, err
    shown = json.loads(out)
    (left,) = shown["left_out"]
    assert left["accelerator"].startswith("v100") and left["what"] == "every format"
    assert shown["winner"]["accelerator"].startswith("a100")
    alone = refused_line(capsys, "plan", "llama-3.1-8b", "--engine", engine, *PLAN,
                         "--gpus", "v100")
    assert "below compute capability" in alone


@pytest.mark.parametrize(("engine", "gpu"), [("sglang", "v100"), ("trtllm", "v100"),
                                             ("trtllm", "t4")])
def test_plans_refusal_names_a_way_out_plan_can_follow(
        capsys: pytest.CaptureFixture[str], engine: str, gpu: str) -> None:
    """plan sizes no llama.cpp: a card alone below the engine's floor was refused with its
    ways out cut off (': plan sizes vLLM, SGLang and TensorRT-LLM deployments'), and a card
    left out beside others named --engine llama.cpp-cuda as if plan took it. Both now name
    the vLLM release that runs the card first, and llama.cpp as the other commands' way;
    that vLLM release, followed, plans on the card."""
    alone = refused_line(capsys, "plan", "llama-3.2-1b", "--engine", engine, *PLAN,
                         "--gpus", gpu)
    assert "(plan sizes no llama.cpp)" in alone
    code, out, err = run_cli(capsys, "plan", "llama-3.2-1b", "--engine", engine, *PLAN,
                             "--gpus", f"{gpu},a100", "--json")
    assert code == 0, err
    (left,) = json.loads(out)["left_out"]
    assert "ridgeline: error: " + left["why"] == alone  # one reason, one way out, in both
    way = alone.split("; try ")[1].split(", ")[0].split()  # the first of two or three ways
    assert way[:2] == ["--engine", "vllm"]
    code, out, err = run_cli(capsys, "plan", "llama-3.2-1b", *PLAN, "--gpus", gpu, *way[2:4],
                             "--json")
    assert code == 0, err
    assert json.loads(out)["winner"]["accelerator"] == left["accelerator"]


def test_trtllm_on_an_amd_card_names_an_engine_that_runs_there(
        capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM runs on no AMD card; its refusal named vLLM on every one, which refuses
    an MI50 or MI100 too (VLLM_NO_ROCM_FAMILIES): on those it names llama.cpp, the card's
    ROCm build, as vLLM's own refusal does; the engine named runs each card."""
    for acc in catalog().values():
        if acc.vendor != "amd":
            continue
        line = engine_platform_problem("trtllm", acc)
        hint = line.split("try --engine ")[1]
        assert hint == "llama.cpp" or not engine_platform_problem(hint, acc), acc.id
    line = refused_line(capsys, "fit", "llama-3.2-1b", "--gpu", "mi50", "--engine", "trtllm")
    code, _, err = run_cli(capsys, "fit", "llama-3.2-1b", "--gpu", "mi50",
                           *line.split("; try ")[1].split(), "--max-model-len", "4096")
    assert code == 0, err


def test_plan_refuses_cards_the_engines_floor_refuses_every_one_of(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A V100 and a T4 under TensorRT-LLM: each was left out beside the other, and plan
    searched 0 configurations to say 'NO DEPLOYMENT within the limits meets this SLO' (exit
    1), as if the load were too much; it is refused as one card alone is, naming the first."""
    both = refused_line(capsys, "plan", "llama-3.2-1b", "--engine", "trtllm", *PLAN,
                        "--gpus", "v100,t4")
    assert both == refused_line(capsys, "plan", "llama-3.2-1b", "--engine", "trtllm", *PLAN,
                                "--gpus", "v100")


def test_plan_keeps_a_way_out_it_can_follow_for_an_engine_the_vendor_lacks(
        capsys: pytest.CaptureFixture[str]) -> None:
    """plan --gpus mi300x --engine trtllm was told only 'plan sizes vLLM, SGLang and
    TensorRT-LLM deployments', its '; try --engine vllm' cut off though plan sizes vLLM; the
    way out is kept where plan takes it, and followed, plans on the card. Metal's way out,
    llama.cpp, which plan does not size, is still cut."""
    line = refused_line(capsys, "plan", "llama-3.2-1b", "--engine", "trtllm", *PLAN,
                        "--gpus", "mi300x")
    way = line.split("; try ")[1].split()
    assert way == ["--engine", "vllm"]
    code, out, err = run_cli(capsys, "plan", "llama-3.2-1b", *PLAN, "--gpus", "mi300x", *way,
                             "--json")
    assert code == 0, err
    assert json.loads(out)["winner"]["accelerator"] == "mi300x"
    assert "; try" not in refused_line(capsys, "plan", "llama-3.2-1b", *PLAN, "--gpus",
                                       "apple-m2-max-38c")


def test_sglang_runs_on_the_amd_families_its_kernels_are_built_for_only(
        capsys: pytest.CaptureFixture[str]) -> None:
    """sgl-kernel's ROCm build targets gfx942 and gfx950 (CDNA3, CDNA4): an MI250 or a
    Radeon is refused, naming vLLM where its ROCm build runs the card, llama.cpp where it
    does not (an MI100); the way out named runs."""
    from ridgeline.engine_platforms import SGLANG_ROCM_FAMILIES

    amd = [a for a in catalog().values() if a.vendor == "amd" and a.family]
    assert {a.family for a in amd} - set(SGLANG_ROCM_FAMILIES)  # some are refused
    for acc in amd:
        problem = engine_platform_problem("sglang", acc)
        assert bool(problem) == (acc.family not in SGLANG_ROCM_FAMILIES), acc.id
        if problem:
            other = problem.rsplit("--engine ", 1)[1]
            assert not engine_platform_problem(
                "llama.cpp-rocm" if other == "llama.cpp" else other, acc), acc.id
    for gpu in ("mi250", "mi100"):
        line = refused_line(capsys, "fit", "llama-3.1-8b", "--gpu", gpu, "--engine", "sglang",
                            "--max-model-len", "4096")
        assert "gfx942 and gfx950" in line
