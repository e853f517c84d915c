"""validation/moe_prefill.csv scores as validation/README.md says: MoE TTFTs on B200 priced
2.3-9x too fast (median error -74 %), Llama-4 on MI300X 3.1x and 1.3x, DeepSeek-R1's saturated
prefill on 8 x H200 a third of the priced rate at 2K and 4K and 55 % at 32K, the dense
control 37 % too fast at 610 tokens and 61 % too slow at 4,194; and the record cautions B200
MoE prefill."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engines import profile_for
from ridgeline.measurements import read_measurement_files
from ridgeline.past_roofline import refuse_past_roofline
from ridgeline.predict import Prediction
from ridgeline.scoring import validate
from ridgeline.track_record import track_record_caution

CSV = Path(__file__).resolve().parent.parent / "validation" / "moe_prefill.csv"


@pytest.fixture(scope="module")
def scored() -> dict[str, Prediction]:
    rows = refuse_past_roofline(read_measurement_files([CSV])).rows  # as validate reads it
    return {row.id: p for row, p in zip(rows, validate(rows), strict=True)}


def priced_over_measured(p: Prediction) -> float:
    """The priced figure over the measured one, read as a rate: a TTFT's inverse."""
    assert p.optimism is not None
    return 1 + p.optimism


def test_every_b200_moe_ttft_is_priced_2_3_to_9_times_too_fast(
        scored: dict[str, Prediction]) -> None:
    b200 = [p for i, p in scored.items() if "b200" in i and "-c1-" in i]
    assert len(b200) == 11
    factors = [priced_over_measured(p) for p in b200]
    assert round(min(factors), 1) == 2.3 and round(max(factors)) == 9
    assert statistics.median(1 / f - 1 for f in factors) == pytest.approx(-0.74, abs=0.005)


def test_llama_4_on_mi300x_and_the_saturated_h200_rows(scored: dict[str, Prediction]) -> None:
    assert priced_over_measured(scored["MP-M5-l4scout-bf16-8xmi300x-sglang057-c1-1k1k"]) \
        == pytest.approx(3.1, abs=0.05)
    assert priced_over_measured(scored["MP-M5-l4maverick-bf16-8xmi300x-sglang057-c1-1k1k"]) \
        == pytest.approx(1.3, abs=0.05)
    saturated = {length: 1 / priced_over_measured(
        scored[f"MP-M9-dsr1-fp8-8xh200-vllm0110-sat-{length}"]) for length in ("2k", "4k", "32k")}
    assert saturated["2k"] == pytest.approx(1 / 3, abs=0.02)
    assert saturated["4k"] == pytest.approx(1 / 3, abs=0.02)
    assert saturated["32k"] == pytest.approx(0.55, abs=0.005)


def test_the_dense_control_is_priced_37_percent_fast_then_61_percent_slow(
        scored: dict[str, Prediction]) -> None:
    control = "MP-D1-dense-llama31-70b-bf16-8xa100-sglang056-c1-"
    short, long = (1 / priced_over_measured(scored[control + s]) - 1 for s in ("1k1k", "8k1k"))
    assert short == pytest.approx(-0.37, abs=0.005)
    assert long == pytest.approx(0.61, abs=0.005)


def test_the_record_cautions_moe_prefill_on_b200() -> None:
    dep = Deployment.build(resolve_model("deepseek-r1"), resolve_accelerator("b200"), None, None,
                           8, engine="sglang")
    caution = track_record_caution(dep, "prefill", profile_for("sglang"))
    assert "faster than measured" in caution and "validation/moe_prefill.csv" in caution
