"""Bad input the 2026-12-04 audit left as design questions: a misspelt --gpu-file family, a
--gpu-file record's aliases, a URL of another scheme given to observe, a vLLM log read under
another engine, and vLLM flags that change nothing (--max-loras without --enable-lora,
--limit-mm-per-prompt on a text-only model). Each answer: one line, and exit 2 where refused.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ridgeline import engine_platforms, engine_quantization
from ridgeline.engine_platforms import family_problem, known_families
from ridgeline.hardware import catalog, resolve_accelerator
from tests.conftest import run_cli
from tests.test_calibrate_input import csv_file, line

FIXTURES = Path(__file__).parent / "fixtures"


def record(**changes: Any) -> dict[str, Any]:
    """A user's H200-like record, its id its own."""
    base: dict[str, Any] = {
        "id": "lab-h200", "name": "a lab's H200", "vendor": "nvidia", "family": "hopper",
        "form": "datacenter", "memory_size": 141, "memory_unit": "GB",
        "memory_bandwidth_bytes_per_s": 4.8e12, "peak_flops": {"bf16": 9.89e14, "fp8": 1.979e15},
        "sources": ["a lab's notes"]}
    return {**base, **changes}


def card_file(tmp_path: Path, name: str = "card.json", **changes: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(record(**changes)))
    return path


@pytest.mark.parametrize(("family", "nearest"), [("hoper", "hopper"), ("turring", "turing"),
                                                 ("blackwel", "blackwell")])
def test_a_misspelt_nvidia_family_is_refused_with_the_nearest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], family: str, nearest: str) -> None:
    """'hoper' had passed every fp8, Marlin and NVFP4 check unchecked (none names it)."""
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu-file",
                           str(card_file(tmp_path, family=family)))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"family {family!r} is none of the nvidia families" in err
    assert f"did you mean {nearest!r}?" in err
    assert "hopper, kepler, maxwell, pascal, turing" in err


def test_an_older_nvidia_family_llama_cpp_still_runs_on_is_known(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A GTX 980 (Maxwell, compute capability 5.2) runs llama.cpp's CUDA build: its record is
    taken, and the capability table vLLM's checks read holds it (below every method's floor)."""
    path = card_file(tmp_path, family="maxwell", peak_flops={"fp16": 9.9e12, "fp32": 4.9e12})
    code, out, err = run_cli(capsys, "decode", "llama-3.2-1b", "--gpu-file", str(path),
                             "--engine", "llama.cpp", "--weights", "q4_k_m")
    assert code == 0, err
    assert "on 1 x lab-h200" in out
    assert "maxwell" in known_families("nvidia") and "kepler" in known_families("nvidia")
    low, high = engine_quantization.NVIDIA_FAMILY_CAPABILITY["maxwell"]
    assert low <= high < engine_quantization.NVIDIA_FAMILY_CAPABILITY["pascal"][0]


def test_a_new_amd_family_is_refused_naming_the_modelled_ones(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu-file",
                           str(card_file(tmp_path, vendor="amd", family="cdna9")))
    assert code == 2 and "none of the amd families ridgeline models (cdna, cdna2" in err
    assert "give the newest family whose kernels it runs" in err


def test_a_family_in_capitals_reads_as_the_catalogs_and_none_is_taken_at_its_word(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for family in ("Hopper", ""):
        code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu-file",
                               str(card_file(tmp_path, family=family)))
        assert code == 0, err
    # a vendor whose family no check reads keeps a new one (an M5)
    apple = resolve_accelerator("apple-m4-max-40c")
    assert family_problem(replace(apple, family="apple-m5")) == ""


def test_every_family_a_platform_table_names_is_a_known_one() -> None:
    """A family the tables name that no known list holds would refuse a record of that card."""
    known = set(known_families("nvidia")) | set(known_families("amd"))
    tabled = {*engine_platforms.NO_FP8_FAMILIES, *engine_platforms.TRTLLM_NO_FP8_FAMILIES,
              *engine_platforms.NVFP4_FAMILIES, *engine_platforms.NO_MARLIN_FAMILIES,
              *engine_platforms.NO_MARLIN_MXFP4_FAMILIES, *engine_platforms.VLLM_NO_ROCM_FAMILIES,
              engine_platforms.W4A8_FP8_FAMILY, *engine_quantization.NVIDIA_FAMILY_CAPABILITY}
    assert tabled <= known
    assert all(not family_problem(acc) for acc in catalog().values())


def test_a_gpu_file_alias_names_the_card_its_rows_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows naming a record's alias had been refused as naming an unknown card (only the id
    was registered), the record reported as unused."""
    from ridgeline import hardware

    monkeypatch.setattr(hardware, "_USER", {})
    card = card_file(tmp_path, aliases=["lab-h200-a"])
    rows = csv_file(tmp_path, *(line(id=f"r{i}", gpu="lab-h200-a", batch=str(2 ** i))
                                for i in range(6)))
    code, out, err = run_cli(capsys, "validate", str(rows), "--gpu-file", str(card))
    assert code == 0, err
    assert "no row names its id" not in out + err


@pytest.mark.parametrize(("aliases", "second", "said"), [
    (["shared"], {"id": "lab-b", "aliases": ["shared"]}, "both answer to 'shared'"),
    ([], {"id": "lab-b", "aliases": ["lab-h200"]}, "both answer to 'lab-h200'"),
])
def test_a_gpu_file_alias_another_record_answers_to_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        aliases: list[str], second: dict[str, Any], said: str) -> None:
    from ridgeline import hardware

    monkeypatch.setattr(hardware, "_USER", {})
    rows = csv_file(tmp_path, line(gpu="lab-h200"))
    code, _, err = run_cli(capsys, "validate", str(rows),
                           "--gpu-file", str(card_file(tmp_path, aliases=aliases)),
                           "--gpu-file", str(card_file(tmp_path, "b.json", **second)))
    assert code == 2 and said in err and len(err.strip().splitlines()) == 1


def test_a_row_naming_an_alias_the_catalog_also_answers_to_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A record copied from `hardware h200 --json` keeps the catalog's aliases: its rows
    naming 'h200' would read either card. Rows naming the record's id are not in doubt."""
    from ridgeline import hardware

    monkeypatch.setattr(hardware, "_USER", {})
    card = card_file(tmp_path, aliases=["h200", "nvidia h200"])
    rows = csv_file(tmp_path, line(gpu="h200"))
    code, _, err = run_cli(capsys, "validate", str(rows), "--gpu-file", str(card))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"r1: its gpu 'h200' is the catalog's h200-sxm and an alias of --gpu-file {card}'s " \
        "lab-h200" in err
    rows = csv_file(tmp_path, line(gpu="lab-h200"))
    code, _, err = run_cli(capsys, "validate", str(rows), "--gpu-file", str(card))
    assert code == 0, err


@pytest.mark.parametrize("url", ["ftp://host/metrics", "file:///tmp/metrics.txt"])
def test_observe_names_a_url_of_another_scheme(capsys: pytest.CaptureFixture[str],
                                               url: str) -> None:
    """It had said "no such file: ftp://host/metrics"."""
    for extra in ((), ("--duration", "10")):
        code, _, err = run_cli(capsys, "observe", url, "--model", "llama-3.1-8b", "--gpu",
                               "h100", *extra)
        assert code == 2 and f"{url} is not an http(s) URL" in err and "no such file" not in err


def test_a_vllm_log_under_another_engine_is_cautioned_as_its_metrics_are(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "observe", str(FIXTURES / "vllm_server.log"), "--model",
                           "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang")
    assert code == 0 and "the source carries vllm's metrics, but sglang's pool" in out
    code, out, _ = run_cli(capsys, "observe", str(FIXTURES / "vllm_server.log"), "--model",
                           "llama-3.1-8b", "--gpu", "h100")
    assert code == 0 and "carries vllm's metrics" not in out


def test_vllm_metrics_on_a_card_vllm_does_not_run_on_doubt_the_card_not_the_engine(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's metrics with --gpu an Apple chip and no --engine: the card's default, llama.cpp's
    Metal build, sizes the figures, and the caution had said "leave --engine out", which was
    left out; it now says vllm does not run on the card, so --gpu is the doubt. An --engine
    the metrics contradict on a card vLLM runs on keeps its advice."""
    metrics = str(FIXTURES / "vllm_metrics.txt")
    code, out, _ = run_cli(capsys, "observe", metrics, "--model", "llama-3.1-8b",
                           "--gpu", "apple-m3-max-40c")
    (line,) = [x for x in out.splitlines() if "the source carries vllm's metrics" in x]
    assert code == 0 and "but llama.cpp-metal's pool" in line
    assert "vllm does not run on apple-m3-max-40c: is --gpu the server's card?" in line
    assert "leave --engine out" not in line
    code, out, _ = run_cli(capsys, "observe", metrics, "--model", "llama-3.1-8b",
                           "--gpu", "h100", "--engine", "sglang")
    assert code == 0 and "(leave --engine out to size the engine the metrics name)" in out


@pytest.mark.parametrize(("flags", "said"), [
    (("--max-loras", "4"), "--max-loras without --enable-lora changes nothing: vllm serve"),
    (("--max-lora-rank", "64", "--fully-sharded-loras"),
     "--fully-sharded-loras, --max-lora-rank without --enable-lora changes nothing"),
    (("--max-loras-per-batch", "4", "--engine", "sglang"),
     "--max-loras-per-batch without --enable-lora changes nothing: SGLang"),
])
def test_lora_flags_without_enable_lora_are_cautioned(
        capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], said: str) -> None:
    """vLLM builds its LoRAConfig only with --enable-lora (arg_utils.py): the flags are
    dropped, as ridgeline drops them; it had said nothing."""
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", *flags)
    assert code == 0 and f"ridgeline: caution: {said}" in err


def test_mm_limits_on_a_text_only_model_are_cautioned(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100",
                           "--limit-mm-per-prompt", "image=2")
    assert code == 0 and "--limit-mm-per-prompt: llama-3.1-8b (LlamaForCausalLM) takes text " \
        "alone, so the flag changes nothing" in err
    code, _, err = run_cli(capsys, "fit", "gemma-3-27b", "--gpu", "h200",
                           "--limit-mm-per-prompt", "image=2")
    assert "takes text alone" not in err
