"""Shared fixtures: the repository's copy of the published measurements."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MEASUREMENTS = ROOT / "validation" / "measurements.csv"
LOWBATCH = ROOT / "validation" / "lowbatch.csv"
EAGER = ROOT / "validation" / "eager.csv"


@pytest.fixture(scope="session")
def measurement_rows() -> list[dict[str, str]]:
    with MEASUREMENTS.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))
