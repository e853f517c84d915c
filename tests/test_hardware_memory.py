"""--gpu-memory-gib: another memory configuration of a catalog part, never a bigger part than
the catalog's, and a custom accelerator's memory, given rather than assumed."""

from __future__ import annotations

import json

import pytest

from ridgeline.errors import InputError
from ridgeline.hardware import custom_accelerator, device_memory_bytes, resolve_accelerator, with_memory_gib
from ridgeline.units import GIB
from tests.conftest import run_cli

FIT_8B = ("fit", "llama-3.1-8b", "--max-model-len", "8k")


@pytest.mark.parametrize(("card", "gib", "said"), [
    ("h100", "1000", "h100-sxm carries 80 GiB, its only size"),  # 909 conversations, once
    ("rtx-4090", "96", "rtx-4090 carries 24 GiB, its only size"),
    ("dgx-spark", "256", "dgx-spark-gb10 comes with at most 128 GiB"),  # sold in one size
    ("apple-m1-max-32c", "128", "comes with at most 64 GiB, its largest configuration"),
])
def test_more_memory_than_the_part_comes_with_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str], card: str, gib: str, said: str) -> None:
    code, out, err = run_cli(capsys, *FIT_8B, "--gpu", card, "--gpu-memory-gib", gib)
    assert code == 2 and not out
    assert said in err and err.count("\n") == 1


def test_the_records_own_size_leaves_its_runtime_total_in_place(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--gpu-memory-gib 80 on an H100 once dropped the 79.18 GiB CUDA reports for 80: the
    pool grew by what the driver never gives."""
    h100 = resolve_accelerator("h100")
    assert with_memory_gib(h100, h100.memory_gib) == (h100, "")
    _, plain, _ = run_cli(capsys, *FIT_8B, "--gpu", "h100", "--json")
    code, sized, err = run_cli(capsys, *FIT_8B, "--gpu", "h100", "--gpu-memory-gib", "80",
                               "--json")
    assert code == 0 and not err
    assert json.loads(sized) == json.loads(plain)


def test_a_smaller_discrete_card_is_cautioned_once_that_only_its_memory_shrank(
        capsys: pytest.CaptureFixture[str]) -> None:
    h100 = resolve_accelerator("h100")
    half, caution = with_memory_gib(h100, 40)
    assert half.memory_bytes == 40 * GIB and half.peak_flops == h100.peak_flops
    assert "40 of its 80 GiB" in caution and "MIG slice" in caution
    # roofline --model loads the card twice (its own line and the deployment's): said once
    code, out, err = run_cli(capsys, "roofline", "--gpu", "h100", "--gpu-memory-gib", "40",
                             "--model", "llama-3.1-8b")
    assert code == 0 and out
    assert err == f"ridgeline: caution: {caution}\n"


def test_a_smaller_configuration_of_a_soc_is_taken_quietly() -> None:
    """The Apple records are each chip's largest machine: a 32 GB M1 Max is one Apple sold."""
    m1_max = resolve_accelerator("apple-m1-max-32c")
    smaller, caution = with_memory_gib(m1_max, 32)
    assert caution == "" and smaller.memory_bytes == 32 * GIB
    assert smaller.visible_memory_bytes == pytest.approx(32 * GIB * 2 / 3)


def test_a_size_that_is_not_positive_is_refused() -> None:
    with pytest.raises(InputError, match="--gpu-memory-gib"):
        with_memory_gib(resolve_accelerator("h100"), 0)


def test_a_custom_card_holding_a_model_needs_its_memory_given(
        capsys: pytest.CaptureFixture[str]) -> None:
    """It was quietly an 80 GiB part ('memory per GPU 78.80 GiB')."""
    custom = ("--peak-tflops", "100", "--bandwidth-gbs", "1000")
    code, out, err = run_cli(capsys, *FIT_8B, *custom)
    assert code == 2 and not out and "needs --gpu-memory-gib" in err
    code, out, _ = run_cli(capsys, *FIT_8B, *custom, "--gpu-memory-gib", "48", "--json")
    card = custom_accelerator("custom", 100, 1000, 48)
    assert code == 0 and json.loads(out)["memory_bytes_per_gpu"] == device_memory_bytes(card)
    # the ridge alone reads no memory: the article's 990 ÷ 3.35 still needs none
    code, out, _ = run_cli(capsys, "roofline", "--peak-tflops", "990", "--bandwidth-gbs",
                           "3350")
    assert code == 0 and "ridge at 296 FLOP/byte" in out


def test_the_resized_card_caution_reaches_a_json_reader(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--json carries the caution stderr gives, first among the report's own."""
    _, caution = with_memory_gib(resolve_accelerator("h100"), 40)
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--gpu-memory-gib",
                           "40", "--max-model-len", "8192", "--json")
    assert code == 0 and json.loads(out)["cautions"][0] == caution
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100",
                           "--max-model-len", "8192", "--json")
    assert caution not in json.loads(out)["cautions"]
