"""ModelOpt exports on cards below the engine's get_min_capability: SGLang refuses ModelOpt
FP8 before compute capability 8.9 (an A100), vLLM too before 0.27 (8.0 from then, FP8 Marlin);
NVFP4 vLLM runs from 7.5 through FP4 Marlin (8.0 before 0.14), SGLang from 8.0 since 0.5.13
(FP4 Marlin too) and from 10.0 (Blackwell) before, as MIXED_PRECISION (its FP4 config's
floor); vLLM's MIXED_PRECISION needs 8.9 before 0.24 and 7.5 from then. fit refuses such a card
in one line naming the card, the format, the engine and the release that serves it, and plan
leaves it out. SGLang serves a W4A16_NVFP4 export from 0.5.19 and a MIXED_PRECISION one
(qwen3.6-35b-a3b's W4A16_NVFP4 experts) from 0.5.15; vLLM a MIXED_PRECISION one from 0.17 and
its W4A16_NVFP4 layers from 0.22; older releases are refused naming the release that brought
it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.engine_quantization import (
    NVIDIA_FAMILY_CAPABILITY,
    SGLANG_EARLIER_FLOORS,
    SGLANG_MIN_CAPABILITY,
    SGLANG_MIXED_FP8_BELOW_89_FROM,
    VLLM_EARLIER_FLOORS,
    VLLM_MIN_CAPABILITY,
    capability_shortfall,
    min_capability,
)
from ridgeline.hardware import resolve_accelerator
from ridgeline.modelopt_algos import layers_served_since, served_since, served_until
from ridgeline.plan import plan
from ridgeline.serving_load import Load, Slo
from tests.conftest import refused_line, run_cli
from tests.test_modelopt_sidecar import checkpoint, sidecar

PLAN = ("--rate", "2", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100")


def fits(capsys: pytest.CaptureFixture[str], folder: Path | str, gpu: str, engine: str,
         *flags: str) -> bool:
    code, _, err = run_cli(capsys, "fit", str(folder), "--gpu", gpu, "--engine", engine,
                           "--max-model-len", "8k", "--json", *flags)
    assert code in (0, 2), err
    return code == 0


def runs_on(method: str, gpu: str, engine: str, version: str | None = None) -> bool:
    """What the engine's floor table says: the card's family reaches the method's floor."""
    acc = resolve_accelerator(gpu)
    floor = min_capability(method, engine, version)
    assert floor is not None
    return NVIDIA_FAMILY_CAPABILITY[acc.family][1] >= floor



def planned_cards(model: str, engine: str, version: str | None = None) -> set[str]:
    """The cards of every deployment plan sizes for ``model`` (Qwen3.6-35B-A3B-NVFP4, or a
    checkpoint's folder) over A100s and H100s under ``engine`` at ``version``, at PLAN's load
    and SLO: the search's own rows up to 2 GPUs, unsimulated (verify=0: a check re-sizes a
    row, it adds no card the search left out; a card's floor leaves it out at any count)."""
    result = plan(resolve_model(model), Load(2.0, "1000", "250"), Slo(2.0, 0.1),
                  ["a100", "h100"], max_gpus=2, workers=1, verify=0, engine=engine,
                  engine_version=version)
    return {c.accelerator for c in result.candidates}


@pytest.mark.parametrize(("algo", "method"), [("FP8", "modelopt"), ("FP8_PB_WO", "modelopt"),
                                              ("NVFP4", "modelopt_fp4")])
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_fit_serves_a_modelopt_export_exactly_on_the_cards_its_engine_floor_allows(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, algo: str, method: str,
        engine: str) -> None:
    """ModelOpt FP8 on an A100: refused by both engines; NVFP4 on an A100 or H100: both run it
    (SGLang from 0.5.13, below); every export on a B200 runs under both. FP8_PB_WO under
    SGLang at the last release that serves it (0.5.17: served_until)."""
    folder = checkpoint(tmp_path, sidecar(algo))
    last = served_until(algo, engine)
    flags = ("--engine-version", last) if last else ()
    for gpu in ("a100", "l40s", "h100", "b200"):
        assert fits(capsys, folder, gpu, engine, *flags) == runs_on(method, gpu, engine, last), \
            (gpu, engine)


def test_sglangs_refusal_is_one_line_naming_the_card_the_format_and_the_engine(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = checkpoint(tmp_path, sidecar("FP8"), name="Llama-FP8")
    line = refused_line(capsys, "fit", str(folder), "--gpu", "a100", "--engine", "sglang")
    assert "a100-sxm-80gb" in line and "quant_algo FP8" in line and "stored fp8" in line
    assert "SGLang's modelopt_fp8 method" in line and "compute capability 8.9" in line
    # vLLM's newest release runs it there (FP8 Marlin): the way out is named, and it runs
    assert line.endswith(f"or --engine vllm (FP8 Marlin from 8.0, since "
                         f"{VLLM_EARLIER_FLOORS['modelopt'][0]})")
    assert fits(capsys, folder, "a100", "vllm")
    folder = checkpoint(tmp_path, sidecar("NVFP4"), name="Llama-NVFP4")
    line = refused_line(capsys, "decode", str(folder), "--gpu", "h100", "--engine", "sglang",
                        "--engine-version", "0.5.12")
    assert "h100-sxm" in line and "modelopt_fp4" in line and "10.0 or more (Blackwell)" in line
    assert "SGLang 0.5.12" in line and f"--engine-version {SGLANG_EARLIER_FLOORS['modelopt_fp4'][0]}" in line


def test_sglang_plan_skips_the_a100_for_a_modelopt_fp8_export_and_refuses_it_alone(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Before, the A100 won (the cheapest card); now the H100 does, and an A100-only plan is
    refused with SGLang's reason."""
    folder = str(checkpoint(tmp_path, sidecar("FP8")))
    assert planned_cards(folder, "sglang") == {resolve_accelerator("h100").id}
    line = refused_line(capsys, "plan", folder, "--engine", "sglang", *PLAN, "--gpus", "a100")
    assert "SGLang" in line and "a100-sxm-80gb" in line


def test_quantization_modelopt_fp4_is_refused_on_a_hopper_under_sglang_before_0_5_13_only(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = str(checkpoint(tmp_path, sidecar("NVFP4")))
    argv = ("decode", folder, "--gpu", "h100", "-q", "modelopt_fp4", "--json")
    lowered = SGLANG_EARLIER_FLOORS["modelopt_fp4"][0]
    assert "SGLang 0.5.12 refuses it" in refused_line(capsys, *argv, "--engine", "sglang",
                                                       "--engine-version", "0.5.12")
    for flags in (("--engine", "vllm"), ("--engine", "sglang"),
                  ("--engine", "sglang", "--engine-version", lowered)):
        code, _, err = run_cli(capsys, *argv, *flags)
        assert code == 0, (flags, err)


@pytest.mark.parametrize("version", ["0.5.12", "0.5.12.post1", "0.5.13", None])
def test_sglang_serves_nvfp4_on_an_a100_and_h100_from_0_5_13_as_its_floor_table_says(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, version: str | None) -> None:
    """ModelOptFp4Config.get_min_capability: 100 to 0.5.12.post1, 80 from 0.5.13 (FP4 Marlin)."""
    folder = checkpoint(tmp_path, sidecar("NVFP4"))
    flags = ("--engine-version", version) if version else ()
    for gpu in ("a100", "h100", "b200"):
        assert fits(capsys, folder, gpu, "sglang", *flags) == \
            runs_on("modelopt_fp4", gpu, "sglang", version), (gpu, version)
    assert runs_on("modelopt_fp4", "a100", "sglang") and \
        not runs_on("modelopt_fp4", "h100", "sglang", "0.5.12.post1")


def w4a16_nvfp4(tmp_path: Path) -> Path:
    """A W4A16_NVFP4 export, quant_algo in config.json (where vLLM reads it too)."""
    return checkpoint(tmp_path, None, name="W4A16", qc={
        "quant_method": "modelopt", "quant_algo": "W4A16_NVFP4", "group_size": 16,
        "ignore": ["lm_head"], "producer": {"name": "modelopt"}})


def test_sglang_refuses_a_w4a16_nvfp4_export_before_its_fp4_config_took_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """ModelOptFp4Config.from_config takes W4A16_NVFP4 from 0.5.19; before, FP8 and NVFP4."""
    folder = w4a16_nvfp4(tmp_path)
    since = served_since("W4A16_NVFP4", "sglang")
    assert since == "0.5.19"
    assert fits(capsys, folder, "b200", "sglang", "--engine-version", since)
    assert fits(capsys, folder, "b200", "sglang")  # the newest
    line = refused_line(capsys, "fit", str(folder), "--gpu", "b200", "--engine", "sglang",
                        "--engine-version", "0.5.18")
    assert "W4A16_NVFP4" in line and "SGLang 0.5.18" in line and f"v{since}" in line
    assert "ModelOpt currently only supports: FP8, NVFP4" in line


def test_sglang_serves_qwen3_6s_w4a16_nvfp4_experts_from_0_5_15(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before 0.5.15 SGLang reads MIXED_PRECISION as w4afp8 (Qwen3.5-MoE is no NemotronH), and
    its mixed config runs no W4A16_NVFP4 layers; from 0.5.15 it does. The refusal names the
    layers' formats and the engine."""
    since = served_since("MIXED_PRECISION", "sglang")
    model = "qwen3.6-35b-a3b"
    assert fits(capsys, model, "b200", "sglang", "--engine-version", str(since))
    line = refused_line(capsys, "fit", model, "--gpu", "b200", "--engine", "sglang",
                        "--engine-version", "0.5.14")
    assert "nvfp4-w4a16 layers" in line and "SGLang 0.5.14" in line and f"v{since}" in line
    assert "w4afp8" in line


def test_sglang_runs_qwen3_6s_fp8_layers_below_8_9_from_0_5_17_only(
        capsys: pytest.CaptureFixture[str]) -> None:
    """0.5.15 and 0.5.16 multiply a mixed export's FP8 layers with torch._scaled_mm (8.9);
    0.5.17 brought FP8 Marlin, so an A100 serves the export from then; an H100 from 0.5.15."""
    model, since = "qwen3.6-35b-a3b", SGLANG_MIXED_FP8_BELOW_89_FROM
    line = refused_line(capsys, "fit", model, "--gpu", "a100", "--engine", "sglang",
                        "--engine-version", "0.5.16")
    assert "fp8 layers" in line and "a100-sxm-80gb" in line and f"v{since}" in line
    assert fits(capsys, model, "h100", "sglang", "--engine-version", "0.5.16")
    assert fits(capsys, model, "a100", "sglang", "--engine-version", since)
    assert fits(capsys, model, "a100", "sglang")


def test_sglang_plan_of_qwen3_6_keeps_the_a100_from_0_5_17_and_leaves_it_out_before() -> None:
    a100 = resolve_accelerator("a100").id
    assert a100 in planned_cards("qwen3.6-35b-a3b", "sglang")
    assert a100 not in planned_cards("qwen3.6-35b-a3b", "sglang", "0.5.16")


def test_the_floors_differ_only_where_vllm_has_a_fallback() -> None:
    """FP8 89 under SGLang and under vLLM before 0.27 (FP8 Marlin from then); NVFP4 and
    MIXED_PRECISION lower under vLLM, and under SGLang before 0.5.13; an AMD card is never
    refused by the NVIDIA table."""
    h100, a100 = resolve_accelerator("h100"), resolve_accelerator("a100")
    assert capability_shortfall("modelopt", a100, "sglang") and \
        capability_shortfall("modelopt", a100, "vllm", "0.26")
    assert not capability_shortfall("modelopt", a100, "vllm")
    assert capability_shortfall("modelopt_fp4", h100, "sglang", "0.5.12")
    assert not capability_shortfall("modelopt_fp4", a100, "sglang")
    assert not capability_shortfall("modelopt_fp4", h100, "vllm")
    assert capability_shortfall("modelopt_mixed", h100, "sglang", "0.5.12")
    assert not capability_shortfall("modelopt_mixed", h100, "vllm")
    assert SGLANG_MIN_CAPABILITY["modelopt_mixed"] == SGLANG_MIN_CAPABILITY["modelopt_fp4"]
    assert VLLM_MIN_CAPABILITY["modelopt_fp4"] < SGLANG_MIN_CAPABILITY["modelopt_fp4"]
    assert not capability_shortfall("modelopt_fp4", resolve_accelerator("mi300x"), "sglang")


def release_before_lowering(method: str) -> str:
    """The vLLM release just before the one that lowered ``method``'s floor ('0.24' -> '0.23';
    each was a minor release: the wheels read have no x.y.1 between)."""
    major, minor = VLLM_EARLIER_FLOORS[method][0].split(".")
    return f"{major}.{int(minor) - 1}"


@pytest.mark.parametrize("method", sorted(VLLM_EARLIER_FLOORS))
def test_vllms_modelopt_floors_are_its_releases(method: str) -> None:
    """Each floor was higher before the release that lowered it and is the newest one's from
    then: an NVIDIA card between the two is refused before only, naming that release."""
    lowered, before, _ = VLLM_EARLIER_FLOORS[method]
    older = release_before_lowering(method)
    assert min_capability(method, "vllm", older) == before > VLLM_MIN_CAPABILITY[method]
    assert min_capability(method, "vllm", lowered) == min_capability(method, "vllm") == \
        VLLM_MIN_CAPABILITY[method]
    between = next(family for family, (_, high) in NVIDIA_FAMILY_CAPABILITY.items()
                   if VLLM_MIN_CAPABILITY[method] <= high < before)
    card = next(acc for gpu in ("t4", "a100") if (acc := resolve_accelerator(gpu)).family == between)
    line = capability_shortfall(method, card, "vllm", older)
    assert f"vLLM {older} refuses it" in line and f"--engine-version {lowered} or later" in line
    assert not capability_shortfall(method, card, "vllm", lowered)
    assert not capability_shortfall(method, card, "vllm")


@pytest.mark.parametrize("algo", ["FP8", "FP8_PB_WO"])
def test_vllm_serves_a_modelopt_fp8_export_on_an_a100_from_the_release_its_floor_came_down(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, algo: str) -> None:
    folder = checkpoint(tmp_path, sidecar(algo))
    lowered, older = VLLM_EARLIER_FLOORS["modelopt"][0], release_before_lowering("modelopt")
    for version in (older, lowered, None):
        flags = ("--engine-version", version) if version else ()
        assert fits(capsys, folder, "a100", "vllm", *flags) == \
            runs_on("modelopt", "a100", "vllm", version), version
    assert not fits(capsys, folder, "a100", "sglang")


def test_vllm_serves_qwen3_6_on_an_a100_from_0_24_and_names_that_release_before(
        capsys: pytest.CaptureFixture[str]) -> None:
    """ModelOptMixedPrecisionConfig.get_min_capability: 89 to 0.23, 75 from 0.24."""
    model, lowered = "qwen3.6-35b-a3b", VLLM_EARLIER_FLOORS["modelopt_mixed"][0]
    older = release_before_lowering("modelopt_mixed")
    assert fits(capsys, model, "a100", "vllm")
    assert fits(capsys, model, "a100", "vllm", "--engine-version", lowered)
    line = refused_line(capsys, "fit", model, "--gpu", "a100", "--engine", "vllm",
                        "--engine-version", older)
    assert f"vLLM {older} refuses it" in line and "vLLM's modelopt_mixed method" in line
    assert "a100-sxm-80gb" in line and f"--engine-version {lowered} or later" in line
    assert fits(capsys, model, "h100", "vllm", "--engine-version", older)


def test_vllm_plan_of_qwen3_6_keeps_the_a100_from_0_24_and_leaves_it_out_before(
        capsys: pytest.CaptureFixture[str]) -> None:
    a100, older = resolve_accelerator("a100").id, release_before_lowering("modelopt_mixed")
    assert a100 in planned_cards("qwen3.6-35b-a3b", "vllm")
    assert a100 not in planned_cards("qwen3.6-35b-a3b", "vllm", older)
    line = refused_line(capsys, "plan", "qwen3.6-35b-a3b", "--engine", "vllm", *PLAN,
                        "--gpus", "a100", "--engine-version", older)
    assert f"vLLM {older}" in line and "a100-sxm-80gb" in line


def test_vllm_serves_mixed_precision_from_0_17_and_its_w4a16_nvfp4_layers_from_0_22(
        capsys: pytest.CaptureFixture[str]) -> None:
    """0.16 reads MIXED_PRECISION with ModelOptFp8Config, which refuses it; 0.17 to 0.21 run
    its FP8 and NVFP4 layers only, not qwen3.6-35b-a3b's W4A16_NVFP4 experts."""
    model = "qwen3.6-35b-a3b"
    since = served_since("MIXED_PRECISION", "vllm")
    (layers,) = layers_served_since(resolve_model(model), "vllm")
    assert since is not None and layers[0] == "nvfp4-w4a16"
    argv = ("fit", model, "--gpu", "h100", "--engine", "vllm", "--engine-version")
    line = refused_line(capsys, *argv, "0.16")
    assert "vLLM 0.16 does not serve" in line and f"v{since}" in line
    line = refused_line(capsys, *argv, since)
    assert f"vLLM {since} does not serve" in line and "nvfp4-w4a16 ones" in line
    assert f"--engine-version {layers[1]} or later" in line
    assert fits(capsys, model, "h100", "vllm", "--engine-version", layers[1])


def test_vllm_refuses_a_w4a16_nvfp4_export_before_its_modelopt_config_took_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """QUANT_ALGOS lists W4A16_NVFP4 from vLLM 0.21; 0.20's from_config refuses it."""
    folder = w4a16_nvfp4(tmp_path)
    since = served_since("W4A16_NVFP4", "vllm")
    assert since is not None
    assert fits(capsys, folder, "h100", "vllm", "--engine-version", since)
    assert fits(capsys, folder, "h100", "vllm")
    line = refused_line(capsys, "fit", str(folder), "--gpu", "h100", "--engine", "vllm",
                        "--engine-version", "0.20")
    assert "W4A16_NVFP4" in line and "vLLM 0.20 does not serve" in line and f"v{since}" in line
    assert "ModelOpt currently only supports" in line
