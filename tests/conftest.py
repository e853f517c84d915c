"""Shared fixtures: the repository's copy of the published measurements."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from hypothesis import settings

# The suite's property tests draw the same examples on every run (CI stays green or red for
# the code, not the draw); `pytest --hypothesis-profile=explore` draws fresh ones, and a
# failure found that way is pinned as an example.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("repeatable")

ROOT = Path(__file__).resolve().parent.parent
MEASUREMENTS = ROOT / "validation" / "measurements.csv"
LOWBATCH = ROOT / "validation" / "lowbatch.csv"
EAGER = ROOT / "validation" / "eager.csv"
ROCM = ROOT / "validation" / "rocm.csv"
CUDA = ROOT / "validation" / "cuda.csv"
SERVING = ROOT / "validation" / "serving.csv"


@pytest.fixture(scope="session")
def measurement_rows() -> list[dict[str, str]]:
    with MEASUREMENTS.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """One command in-process: its exit code (argparse's own refusals included), stdout,
    stderr."""
    from ridgeline.cli import main

    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse refuses a flag's value before main's handler runs
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err
