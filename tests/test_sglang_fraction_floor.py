"""SGLang's default mem_fraction_static has no floor: round((card MiB − reserved MiB) ÷ card
MiB, 3), so on a card no larger than its reserve it is at or below 0 and SGLang stops at
start-up ("Not enough memory"). ridgeline had printed the negative fraction as a budget
("reserved (x -6.392) -3.15 GiB"); it now refuses the deployment in one line, exit 2."""

from __future__ import annotations

import pytest

from ridgeline.hardware import device_memory_bytes, resolve_accelerator, with_memory_gib
from ridgeline.sglang_memory import sglang_gpu_mem_bytes, sglang_memory_defaults
from tests.conftest import run_cli

# the figures below are 0.5.9's rule (before 0.5.10 added the prefill CUDA graphs)
SMALL = ("llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "sglang", "--gpu-memory-gib", "0.5",
         "--engine-version", "0.5.9")
DRAFTER = ("llama-3.2-1b", "--gpu", "rtx-3070", "--engine", "sglang", "--spec-tokens", "4",
           "--spec-method", "draft-model", "--engine-version", "0.5.9")


def _refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out, (code, out[:300], err)
    lines = [line for line in err.strip().splitlines() if "caution" not in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_the_default_reserve_past_a_small_card_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    card, _ = with_memory_gib(resolve_accelerator("h100-sxm"), 0.5)
    memory, smi = sglang_gpu_mem_bytes(card, device_memory_bytes(card))
    assert not smi  # a card given part of its memory: the runtime's figure
    mib = memory / 2**20
    reserved = 512 + 1.5 * 2048 + 2 * 8 + 1024 * 1 / 8  # base, chunk, graphs, ranks (MiB)
    assert sglang_memory_defaults(memory, version="0.5.9").reserved_mib == reserved
    fraction = round((mib - reserved) / mib, 3)
    assert fraction <= 0
    line = _refusal(capsys, "fit", *SMALL)
    assert "mem_fraction_static" in line and "stops at start-up" in line
    assert f"is {fraction:g}," in line and f"{reserved:,.0f} MiB" in line, line
    assert "reserved (mem_fraction_static -" not in line


def test_a_drafter_reserve_past_an_8_gib_card_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    card = resolve_accelerator("rtx-3070")
    mib = sglang_gpu_mem_bytes(card, device_memory_bytes(card))[0] / 2**20
    reserved = 512 + 1.5 * 2048 + 2 * 8 + 1024 / 8 + 6 * 1024  # STANDALONE's 6 GiB on top
    fraction = round((mib - reserved) / mib, 3)
    assert fraction <= 0
    for command in ("fit", "decode"):
        line = _refusal(capsys, command, *DRAFTER, "--context" if command == "decode"
                        else "--max-model-len", "4096")
        assert f"is {fraction:g}," in line and "6,144 for the drafter" in line, line


def test_a_fraction_above_zero_still_fits(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", "llama-3.2-1b", "--gpu", "rtx-3070", "--engine",
                           "sglang", "--max-model-len", "4096")
    assert code == 0 and "reserved (mem_fraction_static 0." in out
