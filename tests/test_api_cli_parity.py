"""The library answers as the CLI does for the same inputs: Deployment.build runs the engine
gates the CLI's build runs, reads --weights and -q as the CLI reads them, picks llama.cpp's
build for the card; decode_floor micro-batches a pipeline; fit_report keeps llama.cpp's
default --fit margin; the floors say whether the engine runs them, as --json does."""

from __future__ import annotations

from typing import Any

import pytest

from ridgeline import (
    Deployment,
    InputError,
    ModelSpec,
    decode_floor,
    fit_report,
    prefill_floor,
    resolve_accelerator,
    resolve_model,
)
from tests.conftest import cli_json, refused_line

LLAMA_8B = resolve_model("llama-3.1-8b")


def _fit(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    data = cli_json(capsys, "fit", *argv)
    return dict(data.get("results", [data])[0])


def _refusal(build: Any) -> str:
    with pytest.raises(InputError) as refused:
        build()
    return str(refused.value)


@pytest.mark.parametrize(("model", "gpu", "kv"), [
    ("llama-3.1-8b", "v100-sxm-32gb", None),  # vLLM 0.34 has no Volta kernels
    ("llama-3.2-1b", "t4", "fp8"),  # nor an fp8 cache on a T4
])
def test_build_refuses_what_the_cli_refuses_in_its_words(
        capsys: pytest.CaptureFixture[str], model: str, gpu: str, kv: str | None) -> None:
    """The library had sized both ('fits, under the ridge'); the CLI exits 2 with one line,
    and build raises that line."""
    line = refused_line(capsys, "fit", model, "--gpu", gpu, "--engine", "vllm",
                        "--max-model-len", "4096", *(("--kv-dtype", kv) if kv else ()))
    said = _refusal(lambda: Deployment.build(resolve_model(model), resolve_accelerator(gpu),
                                             kv=kv, engine="vllm"))
    assert line == f"ridgeline: error: {said}"


def test_an_engine_version_builds_what_that_release_runs(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM 0.19 still ran on a V100: build takes the release, as --engine-version does."""
    v100 = resolve_accelerator("v100-sxm-32gb")
    dep = Deployment.build(LLAMA_8B, v100, engine="vllm", engine_version="0.19")
    cli = _fit(capsys, "llama-3.1-8b", "--gpu", "v100-sxm-32gb", "--engine", "vllm",
               "--engine-version", "0.19", "--max-model-len", "4096")
    from ridgeline import EngineSettings

    report = fit_report(dep, 4096, EngineSettings(engine_version="0.19"))
    assert (report.verdict, report.conversations) == (cli["verdict"], cli["conversations"])


@pytest.mark.parametrize(("gpu", "engine"), [
    ("apple-m2-max-38c", "llama.cpp-metal"), ("mi100", "llama.cpp-rocm")])
def test_no_engine_on_a_card_vllm_never_runs_is_its_llamacpp_build(
        capsys: pytest.CaptureFixture[str], gpu: str, engine: str) -> None:
    """engine=None on an M2 Max had priced vLLM (489 conversations where fit with no
    --engine, llama.cpp-metal, holds 529): it is now the card's llama.cpp build, the CLI's
    default there, and the fit is the CLI's."""
    dep = Deployment.build(LLAMA_8B, resolve_accelerator(gpu))
    cli = _fit(capsys, "llama-3.1-8b", "--gpu", gpu, "--max-model-len", "4096")
    report = fit_report(dep, 4096)
    assert dep.engine == cli["engine"] == engine
    assert (report.verdict, report.conversations) == (cli["verdict"], cli["conversations"])


@pytest.mark.parametrize("gpu", ["apple-m2-max-38c", "mi300x", "h100"])
def test_llamacpp_is_the_cards_build_as_engine_reads_it(
        capsys: pytest.CaptureFixture[str], gpu: str) -> None:
    """'llama.cpp' on a Mac is the Metal build, on AMD the ROCm one, as --engine llama.cpp
    (it had been refused as 'llama.cpp-cuda does not run on apple')."""
    dep = Deployment.build(LLAMA_8B, resolve_accelerator(gpu), engine="llama.cpp")
    cli = _fit(capsys, "llama-3.1-8b", "--gpu", gpu, "--engine", "llama.cpp",
               "--max-model-len", "8192")
    assert dep.engine == cli["engine"]
    assert fit_report(dep, 8192).conversations == cli["conversations"]


def test_llamacpp_fit_keeps_the_builds_default_fit_margin(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama-server starts with --fit on (b7437 on), which keeps its margin free: 63
    conversations of 8,192 tokens on an H100, not -ngl all's 64, and the levers' runs too."""
    dep = Deployment.build(LLAMA_8B, resolve_accelerator("h100"), engine="llama.cpp")
    report = fit_report(dep, 8192)
    cli = _fit(capsys, "llama-3.1-8b", "--gpu", "h100", "--engine", "llama.cpp",
               "--max-model-len", "8192")
    assert report.conversations == cli["conversations"]
    assert [lv.conversations for lv in report.levers] == [
        lv["conversations"] for lv in cli["levers"]]
    every_layer = fit_report(dep, 8192, fit_host=None)  # -ngl all: no margin kept
    assert (report.conversations, every_layer.conversations) == (63, 64)


def test_weights_are_a_stored_checkpoint_and_quantization_is_q(
        capsys: pytest.CaptureFixture[str]) -> None:
    """weights='fp8' is --weights fp8, a checkpoint stored in fp8 (no 16-bit load peak: it
    fits on an L40S); quantization='fp8' is -q fp8, the 16-bit checkpoint quantized on load,
    whose 61 GiB peak does not fit. Each is the CLI's answer."""
    qwen, l40s = resolve_model("qwen3-32b"), resolve_accelerator("l40s")
    argv = ("qwen3-32b", "--gpu", "l40s", "--engine", "sglang", "--max-model-len", "4096")
    for kwargs, flags in (({"weights": "fp8"}, ("--weights", "fp8")),
                          ({"quantization": "fp8"}, ("-q", "fp8"))):
        dep = Deployment.build(qwen, l40s, engine="sglang", **kwargs)
        report, cli = fit_report(dep, 4096), _fit(capsys, *argv, *flags)
        assert (report.verdict, report.conversations) == (cli["verdict"], cli["conversations"])
    stored = Deployment.build(qwen, l40s, weights="fp8", engine="sglang")
    loaded = Deployment.build(qwen, l40s, quantization="fp8", engine="sglang")
    assert stored.weights_stored and not loaded.weights_stored
    assert fit_report(stored, 4096).conversations > fit_report(loaded, 4096).conversations


def test_the_library_reads_q_and_weights_as_the_cli_does() -> None:
    """-q fp8 alone serves the 16-bit checkpoint in fp8, quantized on load; with --weights, or
    -q modelopt alone (an export), a checkpoint stored so."""
    from ridgeline.engine_quantization import loaded_as_stored, method_weights

    h100 = resolve_accelerator("h100")
    assert method_weights("fp8", None, LLAMA_8B, h100, "vllm") == "fp8"
    assert not loaded_as_stored("fp8", None)
    assert loaded_as_stored("fp8", "fp8") and loaded_as_stored(None, "fp8")
    assert loaded_as_stored("modelopt", None)


def test_the_default_engine_is_the_cards_as_the_cli_picks_it() -> None:
    """vLLM where it runs; llama.cpp's CUDA build on a V100, which vLLM left at 0.20."""
    from ridgeline.engine_platforms import default_engine, vllm_free_engine

    v100, h100 = resolve_accelerator("v100-sxm-32gb"), resolve_accelerator("h100")
    assert (default_engine(v100), default_engine(v100, "0.19"), default_engine(h100)) == (
        "llama.cpp-cuda", "vllm", "vllm")
    assert (vllm_free_engine(resolve_accelerator("apple-m2-max-38c")),
            vllm_free_engine(resolve_accelerator("mi100")), vllm_free_engine(h100)) == (
        "llama.cpp-metal", "llama.cpp-rocm", None)


def test_quantization_is_refused_as_q_is() -> None:
    """-q is vLLM's and SGLang's flag: llama.cpp's build refuses it, as the CLI does."""
    said = _refusal(lambda: Deployment.build(LLAMA_8B, resolve_accelerator("h100"),
                                             quantization="fp8", engine="llama.cpp"))
    assert "--quantization" in said


def test_decode_floor_runs_a_pipeline_in_micro_batches_as_decode_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B on 2 stages of 2 H100s (num_gpus=4 in all; --num-gpus 2 -pp 2, the CLI's
    per stage), batch 32 at 2,000 tokens: a token's step is a micro-batch of 16's trip, as
    decode prices it, not the whole batch's (23.95 ms, twice the FLOPs)."""
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"),
                           num_gpus=4, pipeline_parallel_size=2, engine="vllm")
    floor = decode_floor(dep, 32, 2000)
    point = cli_json(capsys, "decode", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "2",
                     "--pipeline-parallel-size", "2", "--engine", "vllm", "--batch", "32",
                     "--context", "2000")["points"][0]
    assert point["micro_batch"] == 16 and floor.batch == point["batch"] == 32
    assert floor.step_time_s == pytest.approx(point["floor_step_time_s"], rel=1e-9)
    for name in ("flops", "weight_bytes_read", "kv_bytes_read"):
        assert getattr(floor, name) == pytest.approx(point[name], rel=1e-9), name
    assert floor.aggregate_tok_s_if_fits == pytest.approx(point["floor_aggregate_tok_s"],
                                                        rel=1e-9)
    assert floor.fits == point["fits"]
    assert floor.steps[0].label == "micro-batch"
    from ridgeline.floors import trip_floor

    whole = trip_floor(dep, 32, 2000)  # the whole batch in one trip, as it had been priced
    assert (round(floor.step_time_s * 1e3, 1), round(whole.step_time_s * 1e3, 1)) == (22.3, 23.9)
    assert whole.flops > 1.9 * floor.flops


def test_a_floor_says_whether_the_engine_runs_it_as_json_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-2-7B (4,096 positions) under vLLM at 8,000 tokens fits in memory, but vLLM
    refuses the length: the floors say so (engine_runs False, decode's and prefill's reason
    and code), though their _if_fits speeds stand (the memory holds the point); --json,
    which prints a speed only where the engine runs the point, gives null for them."""
    dep = Deployment.build(resolve_model("llama-2-7b"), resolve_accelerator("h100"),
                           engine="vllm")
    argv = ("llama-2-7b", "--gpu", "h100", "--engine", "vllm")
    step = decode_floor(dep, 1, 8000)
    point = cli_json(capsys, "decode", *argv, "--batch", "1", "--context", "8000")["points"][0]
    assert step.fits and step.per_user_tok_s_if_fits is not None
    assert point["floor_per_user_tok_s"] is None and point["floor_step_time_s"] \
        == pytest.approx(step.step_time_s)
    assert (step.engine_runs, step.engine_none_reason, step.engine_none_code) == (
        point["engine_runs"], point["expected_none_reason"], point["expected_none_code"])
    assert not step.engine_runs
    prompt = prefill_floor(dep, 8000)
    cli = cli_json(capsys, "prefill", *argv, "--prompt-len", "8000")
    assert (prompt.engine_runs, prompt.engine_none_reason, prompt.engine_none_code) == (
        cli["engine_runs"], cli["expected_none_reason"], cli["expected_none_code"])
    short = decode_floor(dep, 8, 2000)
    running = cli_json(capsys, "decode", *argv, "--batch", "8", "--context", "2000")["points"][0]
    assert short.engine_runs == running["engine_runs"] is True
    assert short.engine_none_reason == short.engine_none_code == ""


def test_a_name_where_an_object_belongs_is_refused_naming_the_call() -> None:
    """Deployment.build('llama-3.1-8b', 'h100') had raised "'str' object has no attribute
    'vendor'" from deep inside."""
    h100 = resolve_accelerator("h100")
    for given, said in (
            (("llama-3.1-8b", h100), "model must be a ModelSpec from resolve_model, got str "
                                     "'llama-3.1-8b'"),
            ((LLAMA_8B, "h100"), "accelerator must be an Accelerator from "
                                 "resolve_accelerator, got str 'h100'"),
            ((LLAMA_8B, h100, None, {"dtype": "fp8"}), "kv must be a name (a str) or None, "
                                                       "got dict {'dtype': 'fp8'}")):
        with pytest.raises(InputError) as refused:
            Deployment.build(*given)  # type: ignore[arg-type]
        assert str(refused.value) == said
    assert _refusal(lambda: Deployment.build(LLAMA_8B, h100, engine=3)) == (  # type: ignore[arg-type]
        "engine must be a name (a str) or None, got int 3")
    assert isinstance(LLAMA_8B, ModelSpec)
