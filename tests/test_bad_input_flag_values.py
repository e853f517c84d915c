"""Bad input (generated audit): every option of every command given 0, -1, nan, inf, 1e-308,
1e308, 20 digits, '', '１' (fullwidth), '٣', '²', '1_0', 5,000 characters …, alone and under the
engine, drafter, LoRA, MoE or multimodal model that makes the flag read. What it found: a
whole number read by str.isdigit() or re's \\d (which take '１' and '٣'), by int() (which
takes '１' and '1_0', and past 4300 digits refuses in Python's words) or float() (which takes
'１'); a memory or a memory share so small that a division ran to inf GiB."""

from __future__ import annotations

import pytest

from ridgeline.cli_types import MAX_DP_RANKS
from ridgeline.units import MAX_WHOLE_DIGITS, ascii_whole
from ridgeline.vllm_graphs import MAX_CAPTURE_SIZE
from tests.conftest import run_cli

LLAMACPP = ("decode", "llama-3.1-8b", "--gpu", "h100", "--engine", "llama.cpp")
SGLANG_EAGLE = ("decode", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang",
                "--speculative-algorithm", "EAGLE")
MULTIMODAL = ("fit", "gemma-3-4b", "--gpu", "h100")  # Gemma 3 reads images
UNICODE_DIGITS = ["１", "٣", "²", "9" * 5000]  # fullwidth 1, Arabic-Indic 3, superscript 2


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Exit 2, nothing on stdout, one line on stderr, in ridgeline's words; the line."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out, (argv[-2:], code, out[:200], err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not any(python in err for python in ("int()", "Exceeds the limit", "invalid int value",
                                                "invalid float value")), err
    return err


def test_a_whole_number_is_ascii_digits_alone() -> None:
    assert ascii_whole(" 12 ") == 12
    assert ascii_whole("0") == 0
    assert ascii_whole("9" * MAX_WHOLE_DIGITS) == int("9" * MAX_WHOLE_DIGITS)
    for text in ["１２", "٣", "²", "1_0", "+4", "-1", "1e3", "", " ", "9" * (MAX_WHOLE_DIGITS + 1)]:
        assert ascii_whole(text) is None, text


@pytest.mark.parametrize("text", UNICODE_DIGITS)
def test_llama_cpps_gpu_layers_are_ascii_digits(
        capsys: pytest.CaptureFixture[str], text: str) -> None:
    """-ngl '１' had run as -ngl 1 (str.isdigit), '²' and 5,000 digits failed in int()'s words."""
    assert "-ngl takes a number of layers" in refused(capsys, *LLAMACPP, "-ngl", text)


@pytest.mark.parametrize("text", UNICODE_DIGITS)
def test_a_llama_cpp_build_is_ascii_digits(
        capsys: pytest.CaptureFixture[str], text: str) -> None:
    """--engine-version '１' had priced llama.cpp's build b1 (re's \\d), 5,000 digits failed in
    int()'s words."""
    said = refused(capsys, *LLAMACPP, "--engine-version", text)
    assert "not a llama.cpp build" in said


def test_a_vllm_release_is_ascii_digits(capsys: pytest.CaptureFixture[str]) -> None:
    """--engine-version '０.１１' had been read as vLLM 0.11."""
    said = refused(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine-version", "０.１１")
    assert "not a version of vLLM" in said
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine-version",
                           "0.11")
    assert code == 0, err


@pytest.mark.parametrize("text", UNICODE_DIGITS)
def test_a_multimodal_limit_is_ascii_digits(
        capsys: pytest.CaptureFixture[str], text: str) -> None:
    """--limit-mm-per-prompt.image '１' had been read as 1, '²' failed in int()'s words."""
    said = refused(capsys, *MULTIMODAL, "--limit-mm-per-prompt.image", text)
    assert "the count must be a whole number" in said


@pytest.mark.parametrize("text", ["", " "])
def test_an_empty_multimodal_limit_is_refused(
        capsys: pytest.CaptureFixture[str], text: str) -> None:
    """It had run as the flag given, printed as vLLM's default ('image=999')."""
    assert "--limit-mm-per-prompt is empty" in refused(capsys, *MULTIMODAL,
                                                       "--limit-mm-per-prompt", text)


@pytest.mark.parametrize("text", ["１", "1_0", "nan", "-1", "9" * 5000])
def test_sglangs_drafter_steps_are_read_as_every_count_is(
        capsys: pytest.CaptureFixture[str], text: str) -> None:
    """--speculative-num-steps (and vLLM's --num-speculative-tokens, SGLang's topk and draft
    tokens) took Python's int(): '１' and '1_0' ran as 1 and 10, nan was argparse's 'invalid
    int value'."""
    said = refused(capsys, *SGLANG_EAGLE, "--speculative-num-steps", text)
    assert "drafter steps" in said
    code, _, err = run_cli(capsys, *SGLANG_EAGLE, "--speculative-num-steps", "3",
                           "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")
    assert code == 0, err


@pytest.mark.parametrize("argv", [
    ("decode", "llama-3.1-8b", "--gpu", "h100", "--speculative-model", "[ngram]",
     "--num-speculative-tokens", "４"),
    (*SGLANG_EAGLE, "--speculative-num-steps", "3", "--speculative-eagle-topk", "１"),
    (*SGLANG_EAGLE, "--speculative-num-steps", "3", "--speculative-num-draft-tokens", "４")])
def test_every_engine_drafter_count_refuses_a_fullwidth_digit(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    """Each had run as its ASCII digit (vLLM's older --num-speculative-tokens ４ as 4)."""
    refused(capsys, *argv)


@pytest.mark.parametrize("text", ["１", "٣", "", "0x10"])
def test_a_drafters_cost_is_an_ascii_number(
        capsys: pytest.CaptureFixture[str], text: str) -> None:
    """--spec-draft-cost was float(): '１' ran as a drafter as slow as the target."""
    said = refused(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--spec-tokens", "4",
                   "--spec-draft-cost", text)
    assert "drafter pass's cost must be a number, 0 to 1" in said


def test_a_drafters_cost_of_minus_zero_reads_as_zero(capsys: pytest.CaptureFixture[str]) -> None:
    """It printed 'drafter at -0 of the target' and "spec_draft_cost": -0.0."""
    code, out, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--spec-tokens",
                             "4", "--spec-draft-cost=-0.0")
    assert code == 0 and "drafter at 0 of the target" in out, err
    assert "-0 " not in out


@pytest.mark.parametrize(("engine", "flag"), [
    ("sglang", "--gpu-memory-gib"), ("vllm", "--gpu-memory-gib"),
    ("trtllm", "--gpu-memory-utilization"), ("sglang", "--mem-fraction-static")])
def test_a_memory_too_small_to_be_one_is_refused(
        capsys: pytest.CaptureFixture[str], engine: str, flag: str) -> None:
    """fit's SGLang reserve had been '-inf GiB' on --gpu-memory-gib 1e-308, TensorRT-LLM's
    shortfall 'short by inf GiB' on a fraction of 1e-308."""
    said = refused(capsys, "fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", engine, flag,
                   "1e-308")
    assert "must be between 0.001 and" in said


@pytest.mark.parametrize("argv", [
    ("kv", "llama-3.1-8b", "--context", "8000", "--memory-gib"),
    ("decode", "llama-3.1-8b", "--gpu", "h100", "--engine", "llama.cpp", "--host-memory-gib"),
])
def test_every_memory_in_gib_has_the_same_floor(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    assert "must be between 0.001 and" in refused(capsys, *argv, "1e-308")


def test_the_least_memory_share_still_answers_does_not_fit_in_finite_figures(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine",
                             "trtllm", "--gpu-memory-utilization", "0.001")
    assert code == 0 and "DOES NOT FIT" in out, err
    assert " inf " not in out and "nan" not in out


@pytest.mark.parametrize("argv", [
    ("--max-cudagraph-capture-size", str(MAX_CAPTURE_SIZE + 1)),
    ("--engine", "sglang", "--cuda-graph-max-bs", str(MAX_CAPTURE_SIZE + 1)),
    ("-cc", f'{{"max_cudagraph_capture_size": {MAX_CAPTURE_SIZE + 1}}}'),
    (f"-cc.max_cudagraph_capture_size={MAX_CAPTURE_SIZE + 1}",)])
def test_a_capture_size_past_any_batch_is_refused_not_listed(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    """--max-cudagraph-capture-size 2147483647 (or a compilation config's) built vLLM's size
    list, every 16 up to it, 134 million sizes: decode, prefill, fit and simulate ran for
    minutes (the fuzz audit's hang). A cap past any batch an engine runs is refused."""
    said = refused(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", *argv)
    assert "max_cudagraph_capture_size must be at most" in said
    assert f"{MAX_CAPTURE_SIZE + 1}" in said.replace(",", "")


def test_a_capture_size_of_a_million_still_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100",
                             "--max-cudagraph-capture-size", str(MAX_CAPTURE_SIZE))
    assert code == 0, err
    assert f"max_cudagraph_capture_size {MAX_CAPTURE_SIZE:,}" in out


@pytest.mark.parametrize("command", ["simulate", "decode", "fit"])
def test_data_parallel_ranks_past_any_deployment_are_refused(
        capsys: pytest.CaptureFixture[str], command: str) -> None:
    """-dp 100000 made simulate build 100,000 schedulers (minutes) and decode answer for
    100,000 GPUs: past MAX_DP_RANKS the size is refused; at it, simulate still answers."""
    extra = ("--rate", "2", "--num-requests", "20") if command == "simulate" else ()
    said = refused(capsys, command, "llama-3.2-1b", "--gpu", "h100", *extra,
                   "-dp", str(MAX_DP_RANKS + 1))
    assert "data-parallel size must be at most" in said


def test_the_most_data_parallel_ranks_still_simulate(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "simulate", "llama-3.2-1b", "--gpu", "h100", "--rate", "2",
                             "--num-requests", "20", "-dp", str(MAX_DP_RANKS))
    assert code == 0, err
    assert f"the {MAX_DP_RANKS:,} ranks together" in out
