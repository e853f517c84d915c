"""fit --json where the weights and the engine's buffers overflow the memory it reserves:
the pool available is 0, never negative, and how far they overflow is its own figure, the
one the text prints as a negative KV pool (llama.cpp: its KV cache of 0 and "overflow")."""

from __future__ import annotations

import json

import pytest

from ridgeline.units import GIB
from tests.conftest import run_cli

ENGINES = (("vllm",), ("sglang",), ("trtllm",), ("llama.cpp-cuda", "-ngl", "99"))


def _fit(capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[dict, str]:
    argv = ("fit", "llama-3.1-70b", "--gpu", "h100", "--max-model-len", "8192", "--engine",
            *flags)
    code, out, _ = run_cli(capsys, *argv, "--json")
    assert code == 0
    code, text, _ = run_cli(capsys, *argv)
    return json.loads(out), text


@pytest.mark.parametrize("flags", ENGINES, ids=[f[0] for f in ENGINES])
def test_llama_70b_bf16_on_one_h100_reports_no_pool_and_its_overflow(
        capsys: pytest.CaptureFixture[str], flags: tuple[str, ...]) -> None:
    report, text = _fit(capsys, *flags)
    over = report["over_budget_bytes_per_gpu"]
    assert report["verdict"] == "does not fit" and report["available_kv_bytes_per_gpu"] == 0
    assert over > 0 and report["pool_bytes_per_gpu"] == 0
    taken = sum(report["taken_bytes_per_gpu"].values())  # 131.4 GiB of weights and the rest
    assert over == pytest.approx(taken - report["reserved_bytes_per_gpu"])
    if flags[0].startswith("llama.cpp"):  # the text's KV cache is 0, the headline's overflow
        assert "= KV cache" in text and "alone overflow" in text.splitlines()[0]
    else:  # the text's negative pool is this figure, unscaled by TensorRT-LLM's fraction
        line = next(x for x in text.splitlines() if x.startswith("= KV pool"))
        assert f"-{over / GIB:,.2f} GiB" in line


def test_vllm_overflow_is_the_budget_lines_sum_past_the_reserved_memory(
        capsys: pytest.CaptureFixture[str]) -> None:
    report, _ = _fit(capsys, "vllm")  # 79.18 GiB reserved (v0.34: x 1); 139.26 GiB taken
    assert report["over_budget_bytes_per_gpu"] / GIB == pytest.approx(60.08, abs=0.005)


def test_a_set_pool_past_an_overflowing_card_leaves_no_room(
        capsys: pytest.CaptureFixture[str]) -> None:
    report, _ = _fit(capsys, "vllm", "--kv-cache-memory-bytes", "10G")
    set_pool = report["kv_cache_memory_bytes"]
    assert set_pool["room_bytes_per_gpu"] == 0 and report["available_kv_bytes_per_gpu"] == 0
    assert set_pool["overflow_bytes_per_gpu"] == pytest.approx(
        set_pool["set"] + report["over_budget_bytes_per_gpu"])


def test_a_fitting_deployment_has_no_overflow(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                           "8192", "--json")
    report = json.loads(out)
    assert code == 0 and report["over_budget_bytes_per_gpu"] == 0
    assert report["available_kv_bytes_per_gpu"] == pytest.approx(report["pool_bytes_per_gpu"])
