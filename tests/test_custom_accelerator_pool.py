"""A card described by --peak-tflops/--bandwidth-gbs/--gpu-memory-gib: fit says why its
pool differs from the catalog card it copies (the runtime's share of the GiB typed; with no
vendor, vLLM 0.34's extensible KV cache not assumed, so 0.33's rules at 0.92), and a
--gpu-file record naming the vendor gets the engine's sizing on that card."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import run_cli

CUSTOM = ("--peak-tflops", "989.4", "--bandwidth-gbs", "3350", "--gpu-memory-gib", "80")


def _fit(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, "fit", "llama-3.1-8b", "--max-model-len", "8192",
                             *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def _custom_caution(report: dict) -> str:
    return next((c for c in report["cautions"] if c.startswith("custom accelerator")), "")


def test_a_custom_card_says_which_vllm_rules_size_its_pool_and_why(
        capsys: pytest.CaptureFixture[str]) -> None:
    report = _fit(capsys, *CUSTOM)
    caution = _custom_caution(report)
    given = re.search(r"is given ([\d.]+) GiB of the 80 GiB typed", caution)
    fraction = re.search(r"at gpu_memory_utilization ([\d.]+)", caution)
    assert given and fraction, caution
    assert float(given.group(1)) == pytest.approx(report["memory_bytes_per_gpu"] / 2**30,
                                                  abs=0.005)
    assert float(fraction.group(1)) == report["reserved_fraction"] < 1
    assert "no vendor" in caution and "--gpu-file" in caution


def test_a_gpu_file_naming_the_vendor_gets_the_extensible_cache(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The same figures as a record with "vendor": "nvidia": vLLM 0.34's extensible KV cache
    at gpu_memory_utilization 1.0, more conversations, and no word about a vendor."""
    record = {"id": "my-card", "name": "my card", "vendor": "nvidia",
              "memory_bytes": 80 * 2**30, "memory_bandwidth_bytes_per_s": 3.35e12,
              "peak_flops": {"bf16": 989.4e12}}
    path = tmp_path / "card.json"
    path.write_text(json.dumps(record))
    custom = _fit(capsys, *CUSTOM)
    named = _fit(capsys, "--gpu-file", str(path))
    assert named["memory_bytes_per_gpu"] == custom["memory_bytes_per_gpu"]  # same 98.5 %
    assert named["reserved_fraction"] == 1.0 > custom["reserved_fraction"]
    assert named["conversations"] > custom["conversations"]
    assert not _custom_caution(named)


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_other_engines_hear_only_of_the_memory_share(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    caution = _custom_caution(_fit(capsys, *CUSTOM, "--engine", engine))
    assert "98.5%" in caution and "vendor" not in caution


def test_a_catalog_card_gets_no_custom_caution(capsys: pytest.CaptureFixture[str]) -> None:
    assert not _custom_caution(_fit(capsys, "--gpu", "h100"))
