"""An expectation on a card whose group the profile saw too few rows of carries a band
UNSEEN_GROUP_BAND times wider each way (EngineProfile.band_on), so that a figure resting on
other cards' efficiencies does not read as the fit's own p10/p90; the central value stays."""

from __future__ import annotations

import json

import pytest

from ridgeline.engines import UNSEEN_GROUP_BAND, profile_for
from ridgeline.hardware import resolve_accelerator
from tests.conftest import run_cli

VULKAN_PROMPT = ("prefill", "llama-2-7b", "--gpu", "rtx-4090", "--engine", "llama.cpp-vulkan",
                 "--weights", "q4_0", "--prompt-len", "512", "--json")


def test_the_vulkan_profile_on_an_rtx_4090_widens_its_band_and_says_why() -> None:
    """llama.cpp-vulkan's rows are Intel Arc and Radeon cards: on a GeForce card its band
    is its fit's, UNSEEN_GROUP_BAND times wider, and the docstring's 0.24 .. 4.07 is it."""
    vulkan = profile_for("llama.cpp-vulkan")
    rtx = resolve_accelerator("rtx-4090")
    assert vulkan.calibration_caution(rtx)
    low, high = vulkan.band_on(rtx)
    assert (low, high) == pytest.approx((vulkan.band_low / UNSEEN_GROUP_BAND,
                                         vulkan.band_high * UNSEEN_GROUP_BAND))
    assert (round(low, 2), round(high, 2)) == (0.24, 4.07)


def test_a_card_the_fit_covers_keeps_the_fits_band() -> None:
    """vLLM's fit has its multiplier on NVIDIA's datacenter cards: an H100 is banded by it."""
    vllm = profile_for("vllm")
    h100 = resolve_accelerator("h100")
    assert not vllm.calibration_caution(h100)
    assert vllm.band_on(h100) == (vllm.band_low, vllm.band_high)


def test_prefill_on_an_uncovered_card_prints_the_wider_band_around_the_same_expectation(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The RTX 4090's Vulkan prompt: the expected TTFT is the fit's, its slow edge the
    expectation ÷ the widened slowest rate, its fast edge no faster than the floor allows."""
    code, out, _ = run_cli(capsys, *VULKAN_PROMPT)
    assert code == 0
    e = json.loads(out)
    expected = next(v for k, v in _walk(e) if k == "expected" and isinstance(v, dict)
                    and "low_s" in v)
    vulkan = profile_for("llama.cpp-vulkan")
    slowest, fastest = vulkan.band_on(resolve_accelerator("rtx-4090"))
    assert expected["high_s"] == pytest.approx(expected["time_s"] / slowest)
    assert expected["high_s"] > expected["time_s"] / vulkan.band_low * 2
    assert expected["low_s"] >= expected["time_s"] / fastest * (1 - 1e-9)
    assert expected["low_s"] < expected["time_s"] / vulkan.band_high


def _walk(node: object) -> list[tuple[str, object]]:
    """Every (key, value) of a JSON document, depth first."""
    found: list[tuple[str, object]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            found.append((k, v))
            found += _walk(v)
    elif isinstance(node, list):
        for v in node:
            found += _walk(v)
    return found
