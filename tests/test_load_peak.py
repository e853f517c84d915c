"""A 16-bit checkpoint served with --quantization fp8 loads at 16 bits first where the engine
quantizes after loading (SGLang; vLLM before 0.16): fit refuses what cannot load, plan does
not pick it, and a pre-quantized checkpoint or a release that streams is unaffected."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.deployment import Deployment
from ridgeline.hardware import resolve_accelerator
from ridgeline.load_peak import load_peak_bytes, loads_16bit_first, sixteen_bit_bytes
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.units import GIB
from tests.conftest import run_cli


def answer(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return dict(json.loads(out))


def fit(capsys: pytest.CaptureFixture[str], model: str, gpu: str, *extra: str) -> dict[str, Any]:
    return answer(capsys, "fit", model, "--gpu", gpu, "--max-model-len", "4096", *extra)


def served(model: str, gpu: str, weights: str | None, gpus: int, engine: str) -> Deployment:
    """The checkpoint as stored (None, or a plan's "as stored"), or its 16-bit weights served
    in fp8 as a plan launches them: -q fp8, quantized on load (Deployment.build's
    ``quantization``; ``weights`` would be a checkpoint stored in fp8)."""
    method = "fp8" if weights == "fp8" else None
    stored = None if method or weights == "as stored" else weights
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), stored, None, gpus,
                            1, engine, quantization=method)


def test_llama3_70b_served_fp8_holds_131_gib_of_bf16_on_one_gpu_at_start_up() -> None:
    dep = served("llama-3.1-70b", "h100", "fp8", 1, "sglang")
    pool = kv_pool(dep, EngineSettings(max_model_len=4096))
    # every linear weight back at 2 bytes: the whole 16-bit checkpoint on one GPU
    assert sixteen_bit_bytes(dep, pool.weight_bytes) == pytest.approx(
        served("llama-3.1-70b", "h100", None, 1, "sglang").weight_bytes)
    assert pool.load_peak_bytes / GIB == pytest.approx(131.4, abs=0.1)
    assert pool.weight_bytes / GIB == pytest.approx(67.7, abs=0.1)  # what it serves
    # split over 2 GPUs, each loads its tensor-parallel half
    two = kv_pool(served("llama-3.1-70b", "h100", "fp8", 2, "sglang"),
                  EngineSettings(max_model_len=4096))
    assert two.load_peak_bytes == pytest.approx(pool.load_peak_bytes / 2, rel=0.02)


def test_sglang_refuses_70b_bf16_quantized_to_fp8_on_one_h100(
        capsys: pytest.CaptureFixture[str]) -> None:
    report = fit(capsys, "llama-3.1-70b", "h100", "-q", "fp8", "--engine", "sglang")
    assert report["verdict"] == "does not fit" and report["conversations"] == 0
    why = report["load_refusal"]
    assert why.startswith("SGLang loads llama-3.1-70b's 16-bit weights before quantizing them")
    assert "131.4 GiB per GPU" in why and "more GPUs" in why
    assert report["load_peak_bytes_per_gpu"] / GIB == pytest.approx(131.4, abs=0.1)
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "-q", "fp8",
                           "--engine", "sglang", "--max-model-len", "4096")
    assert code == 0 and out.startswith("DOES NOT FIT: SGLang loads llama-3.1-70b's 16-bit")


def test_vllm_before_0_16_loads_16_bits_first_and_from_0_16_streams(
        capsys: pytest.CaptureFixture[str]) -> None:
    # on an H200 the fp8 weights leave a pool; the 16-bit ones (131.4 GiB) overrun vLLM's
    # 0.9 x 139.8 GiB
    before = fit(capsys, "llama-3.1-70b", "h200", "-q", "fp8", "--engine-version", "0.15")
    assert before["verdict"] == "does not fit"
    assert "vLLM 0.15 loads" in before["load_refusal"]
    assert "run vLLM 0.16 or later" in before["load_refusal"]
    for version in ("0.16", "0.32"):
        after = fit(capsys, "llama-3.1-70b", "h200", "-q", "fp8",
                    "--engine-version", version)
        assert after["load_refusal"] is None and after["load_peak_bytes_per_gpu"] is None
        assert after["verdict"] != "does not fit" and after["conversations"] > 0


def test_vllm_0_15_refuses_70b_bf16_quantized_to_fp8_on_one_h100(
        capsys: pytest.CaptureFixture[str]) -> None:
    report = fit(capsys, "llama-3.1-70b", "h100", "-q", "fp8", "--engine-version", "0.15")
    assert report["verdict"] == "does not fit" and report["load_refusal"]
    streamed = fit(capsys, "llama-3.1-70b", "h100", "-q", "fp8",
                   "--engine-version", "0.16")
    assert streamed["load_refusal"] is None  # what binds there is the pool, not the load


def test_a_pre_quantized_checkpoint_loads_as_stored_under_every_engine_and_release(
        capsys: pytest.CaptureFixture[str]) -> None:
    for extra in (("--engine", "sglang"), ("--engine-version", "0.15")):
        report = fit(capsys, "qwen3-235b-a22b-fp8", "h200", "--num-gpus", "2", *extra)
        assert report["load_refusal"] is None and report["load_peak_bytes_per_gpu"] is None
        assert report["verdict"] != "does not fit"
    dep = served("qwen3-235b-a22b-fp8", "h200", None, 2, "sglang")
    assert loads_16bit_first(dep, None) is None
    assert load_peak_bytes(dep, None, dep.weight_bytes / 2) == 0.0


def test_the_16_bit_checkpoint_at_its_own_precision_has_no_load_peak() -> None:
    dep = served("llama-3.1-70b", "h100", None, 2, "sglang")
    assert loads_16bit_first(dep, "0.5.9") is None
    assert kv_pool(dep, EngineSettings(max_model_len=4096)).load_peak_bytes == 0.0


def test_fit_names_the_fp8_checkpoint_of_the_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    report = fit(capsys, "qwen3-235b-a22b", "h200", "--num-gpus", "2", "-q", "fp8",
                 "--engine", "sglang")
    assert report["verdict"] == "does not fit"
    assert "a checkpoint stored in fp8 (qwen3-235b-a22b-fp8)" in report["load_refusal"]


def plan_winner(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    report = answer(capsys, "plan", *argv)
    winner = report["winner"]
    assert winner is not None
    return dict(winner)


def test_plan_does_not_serve_qwen3_235b_bf16_as_fp8_on_two_h200s_under_sglang(
        capsys: pytest.CaptureFixture[str]) -> None:
    # 235 GB of bf16 a GPU at TP2 on 141 GB cards: it picked 2 x H200 with --quantization fp8
    # (within 4 GPUs: the pair it picked and the four that load it; no split pools to check)
    winner = plan_winner(capsys, "qwen3-235b-a22b", "--rate", "4", "--slo-ttft-ms", "3000",
                         "--slo-tpot-ms", "60", "--gpus", "h200", "--engine", "sglang",
                         "--input-len", "2000", "--output-len", "500", "--max-gpus", "4")
    gpus = winner["tensor_parallel_size"] * winner["pipeline_parallel_size"] \
        * winner["data_parallel_size"]
    assert winner["weights"] != "fp8" or gpus >= 4
    dep = served("qwen3-235b-a22b", "h200", winner["weights"], gpus, "sglang")
    assert not kv_pool(dep, EngineSettings(max_model_len=4096)).load_overflow


@pytest.mark.usefixtures("unsimulated")  # the layouts the search admits
def test_plan_for_vllm_0_15_does_not_serve_llama3_70b_as_fp8_on_one_h100(
        capsys: pytest.CaptureFixture[str]) -> None:
    # within 2 GPUs: one H100 and the TP2 pair 0.15 falls back to (no split pools to check)
    argv = ("llama-3.1-70b", "--rate", "0.5", "--slo-ttft-ms", "5000", "--slo-tpot-ms", "100",
            "--gpus", "h100", "--max-gpus", "2", "--input-len", "500", "--output-len", "200")
    old = plan_winner(capsys, *argv, "--engine-version", "0.15")
    assert (old["tensor_parallel_size"], old["weights"]) != (1, "fp8")
    # the newest vLLM streams the quantization, so one H100 loads; plan says which release
    report = answer(capsys, "plan", *argv)
    assert (report["winner"]["tensor_parallel_size"], report["winner"]["weights"]) == (1, "fp8")
    assert any("loads only on vLLM 0.16 or later" in c and "131.4 GiB per GPU" in c
               for c in report["notes"])


def test_weights_fp8_sizes_a_checkpoint_stored_in_fp8_which_loads_as_stored(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--weights fp8 names an FP8 checkpoint (nvidia/Llama-3.1-70B-Instruct-FP8), which loads at
    8 bits; only -q fp8 on the 16-bit one holds its 16-bit share first."""
    for extra in (("--engine", "sglang"), ("--engine-version", "0.15")):
        on_load = fit(capsys, "llama-3.1-70b", "h200", "-q", "fp8", *extra)
        stored = fit(capsys, "llama-3.1-70b", "h200", "--weights", "fp8", *extra)
        assert on_load["load_peak_bytes_per_gpu"] and stored["load_peak_bytes_per_gpu"] is None
        assert stored["load_refusal"] is None and stored["conversations"] > 0
    report = fit(capsys, "llama-3.1-70b", "h200", "--engine-version", "0.15", "-q", "fp8")
    assert "--weights fp8 sizes one" in report["load_refusal"]


@pytest.mark.parametrize("flags", [("-q", "modelopt"), ("-q", "modelopt", "--weights", "fp8")])
def test_modelopt_on_a_catalog_model_is_its_fp8_export_loaded_as_stored(
        capsys: pytest.CaptureFixture[str], flags: tuple[str, ...]) -> None:
    """vLLM's Llama-3.3-70B recipe (0.11.2): nvidia/Llama-3.3-70B-Instruct-FP8 with
    --quantization modelopt on one GPU; it was refused, then sized with a 16-bit load peak."""
    argv = ("fit", "llama-3.3-70b", "--gpu", "h200", "--engine-version", "0.11.2",
            "--max-model-len", "4096", "--json", *flags)
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    report = json.loads(out)
    stored = fit(capsys, "llama-3.3-70b", "h200", "--engine-version", "0.11.2",
                 "--weights", "fp8")
    assert report["conversations"] == stored["conversations"] > 0
    assert report["load_peak_bytes_per_gpu"] is None
    assert ("ModelOpt fp8 export" in err) == ("--weights" not in flags)


def test_fits_fp8_weights_lever_is_quantized_on_load_with_its_peak(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The lever from a 16-bit checkpoint is -q fp8 (no "different checkpoint"): on vLLM 0.15
    one H200 cannot load the 16-bit weights, so it is not offered; from --weights fp8, the next
    format is another checkpoint."""
    argv = ("fit", "llama-3.1-70b", "--gpu", "h200", "--max-model-len", "32768",
            "--target-concurrency", "64")
    _, old, _ = run_cli(capsys, *argv, "--engine-version", "0.15")
    _, new, _ = run_cli(capsys, *argv)
    assert "  fp8 weights " not in old and "  fp8 weights " in new
    _, stored, _ = run_cli(capsys, *argv, "--weights", "fp8")
    assert ("(a different checkpoint; this one is bf16 in the catalog, sized as stored in fp8 "
            "by --weights fp8)") in stored
