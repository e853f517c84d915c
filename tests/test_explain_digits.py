"""--explain prints four significant digits, but a factor below 10 that is not whole never
prints as a whole one: DeepSeek-V3's block-fp8 experts hold 1 + 4/16,384 bytes a weight (the
scales), which printed as "1 B", so the batch to the ridge repeated from the printed inputs
came out 9,452 against the printed 9,454."""

from __future__ import annotations

import math
import re

import pytest

from ridgeline.explain import shown_number
from tests.conftest import run_cli


def _shown(out: str, name: str) -> float:
    return float(re.search(rf"\n\s+{re.escape(name)} = ([0-9.,]+)", out)[1].replace(",", ""))


def test_the_batch_to_the_ridge_repeats_from_its_printed_inputs(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "moe", "deepseek-v3", "--gpu", "h100", "--explain")
    assert code == 0
    step = out[out.index("article's batch to the ridge:"):]
    ridge, per_weight = _shown(step, "ridge"), _shown(step, "bytes per expert weight")
    routed, batch = _shown(step, "k/E"), _shown(step, "=> batch")
    assert per_weight != 1 and abs(per_weight - (1 + 4 / 16384)) < 5e-5
    assert math.ceil(ridge * per_weight / 2 / routed) == batch


@pytest.mark.parametrize("value", [1 + 4 / 16384, 0.99997, 2.0001, -1.00003, 9.99996])
def test_a_factor_below_ten_never_prints_as_whole(value: float) -> None:
    shown = shown_number(value)
    assert float(shown) != round(value) and abs(float(shown) - value) <= 5e-5 * abs(value)


@pytest.mark.parametrize(("value", "shown"), [(30.9994, "31"), (153.02, "153"), (1.5, "1.5"),
                                              (32.000000000001, "32"), (7.0, "7"),
                                              (412.29, "412.3")])
def test_other_figures_keep_four_digits(value: float, shown: str) -> None:
    assert shown_number(value) == shown  # float noise past nine digits stays hidden (32)
