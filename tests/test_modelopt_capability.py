"""ModelOpt exports on cards below the engine's get_min_capability: vLLM and SGLang refuse
ModelOpt FP8 before compute capability 8.9 (an A100); NVFP4 vLLM runs from 7.5 through FP4
Marlin, SGLang from 10.0 (Blackwell) only, as MIXED_PRECISION (its FP4 config's floor).
fit refuses such a card in one line naming the card, the format and the engine, and plan
leaves it out. Before, SGLang was priced on an A100 for a ModelOpt FP8 export it would refuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline.engine_quantization import (
    NVIDIA_FAMILY_CAPABILITY,
    SGLANG_MIN_CAPABILITY,
    VLLM_MIN_CAPABILITY,
    capability_shortfall,
)
from ridgeline.hardware import resolve_accelerator
from tests.conftest import refused_line, run_cli
from tests.test_modelopt_sidecar import checkpoint, sidecar

PLAN = ("--rate", "2", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100")


def fits(capsys: pytest.CaptureFixture[str], folder: Path, gpu: str, engine: str) -> bool:
    code, _, err = run_cli(capsys, "fit", str(folder), "--gpu", gpu, "--engine", engine,
                           "--max-model-len", "8k", "--json")
    assert code in (0, 2), err
    return code == 0


def runs_on(method: str, gpu: str, engine: str) -> bool:
    """What the engine's floor table says: the card's family reaches the method's floor."""
    acc = resolve_accelerator(gpu)
    floors = SGLANG_MIN_CAPABILITY if engine == "sglang" else VLLM_MIN_CAPABILITY
    return NVIDIA_FAMILY_CAPABILITY[acc.family][1] >= floors[method]


@pytest.mark.parametrize(("algo", "method"), [("FP8", "modelopt"), ("FP8_PB_WO", "modelopt"),
                                              ("NVFP4", "modelopt_fp4")])
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_fit_serves_a_modelopt_export_exactly_on_the_cards_its_engine_floor_allows(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, algo: str, method: str,
        engine: str) -> None:
    """ModelOpt FP8 on an A100: refused by both engines; NVFP4 on an A100 or H100: vLLM runs
    it, SGLang does not; every export on a B200 runs under both."""
    folder = checkpoint(tmp_path, sidecar(algo))
    for gpu in ("a100", "l40s", "h100", "b200"):
        assert fits(capsys, folder, gpu, engine) == runs_on(method, gpu, engine), (gpu, engine)


def test_sglangs_refusal_is_one_line_naming_the_card_the_format_and_the_engine(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = checkpoint(tmp_path, sidecar("FP8"), name="Llama-FP8")
    line = refused_line(capsys, "fit", str(folder), "--gpu", "a100", "--engine", "sglang")
    assert "a100-sxm-80gb" in line and "quant_algo FP8" in line and "stored fp8" in line
    assert "SGLang's modelopt_fp8 method" in line and "compute capability 8.9" in line
    folder = checkpoint(tmp_path, sidecar("NVFP4"), name="Llama-NVFP4")
    line = refused_line(capsys, "decode", str(folder), "--gpu", "h100", "--engine", "sglang")
    assert "h100-sxm" in line and "modelopt_fp4" in line and "10.0 or more (Blackwell)" in line


def test_sglang_plan_skips_the_a100_for_a_modelopt_fp8_export_and_refuses_it_alone(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Before, the A100 won (the cheapest card); now the H100 does, and an A100-only plan is
    refused with SGLang's reason."""
    folder = str(checkpoint(tmp_path, sidecar("FP8")))
    code, out, err = run_cli(capsys, "plan", folder, "--engine", "sglang", *PLAN,
                             "--gpus", "a100,h100", "--json")
    assert code == 0, err
    shown = json.loads(out)
    cards = {c["accelerator"] for c in (shown["winner"], *shown["runners_up"])}
    assert cards == {resolve_accelerator("h100").id}
    line = refused_line(capsys, "plan", folder, "--engine", "sglang", *PLAN, "--gpus", "a100")
    assert "SGLang" in line and "a100-sxm-80gb" in line


def test_quantization_modelopt_fp4_is_refused_on_a_hopper_under_sglang_only(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = str(checkpoint(tmp_path, sidecar("NVFP4")))
    argv = ("decode", folder, "--gpu", "h100", "-q", "modelopt_fp4", "--json")
    assert "SGLang refuses it" in refused_line(capsys, *argv, "--engine", "sglang")
    code, _, err = run_cli(capsys, *argv, "--engine", "vllm")
    assert code == 0, err


def test_the_floors_differ_only_where_vllm_has_a_fallback() -> None:
    """FP8 89 under both (no Marlin path for ModelOpt FP8); NVFP4 and MIXED_PRECISION lower
    under vLLM; an AMD card is never refused by the NVIDIA table."""
    h100, a100 = resolve_accelerator("h100"), resolve_accelerator("a100")
    assert capability_shortfall("modelopt", a100, "sglang") and \
        capability_shortfall("modelopt", a100, "vllm")
    assert capability_shortfall("modelopt_fp4", h100, "sglang")
    assert not capability_shortfall("modelopt_fp4", h100, "vllm")
    assert capability_shortfall("modelopt_mixed", h100, "sglang")
    assert not capability_shortfall("modelopt_mixed", h100, "vllm")
    assert not capability_shortfall("modelopt_fp4", resolve_accelerator("mi300x"), "sglang")
