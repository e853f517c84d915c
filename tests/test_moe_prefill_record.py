"""validation/moe_prefill.csv scores as validation/README.md says: MoE TTFTs on B200 priced
2.3-9x too fast (median error -74 %), Llama-4 on MI300X 3.1x and 1.3x, DeepSeek-R1's saturated
prefill on 8 x H200 a third of the priced rate at 2K and 4K and 55 % at 32K, the dense
control 37 % too fast at 610 tokens and 61 % too slow at 4,194; saturated MoE prefill on H100 and
H200 a third of the priced rate at 2K-4K and half at 32K, flat in prompt length while the priced rate
falls; DeepSeek-V3.1's TTFT on MI300X growing 6-7x the priced slope; the dense H100 control (kept out of
the file) 2.2x and 2.5x; and the record cautions B200 MoE prefill. The saturated figures are
the rows against the price before vLLM's MoE prompt slowdown, which was fitted to them; with it,
vLLM's rows are priced within a fifth at the median."""

from __future__ import annotations

import statistics
from pathlib import Path
from unittest import mock

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cost import _cached_time
from ridgeline.engines import moe_prompt_expert_slowdown, profile_for
from ridgeline.measurements import read_measurement_files
from ridgeline.past_roofline import refuse_past_roofline
from ridgeline.predict import Prediction
from ridgeline.scoring import validate
from ridgeline.track_record import track_record_caution

CSV = Path(__file__).resolve().parent.parent / "validation" / "moe_prefill.csv"


def score() -> dict[str, Prediction]:
    rows = refuse_past_roofline(read_measurement_files([CSV])).rows  # as validate reads it
    return {row.id: p for row, p in zip(rows, validate(rows), strict=True)}


@pytest.fixture(scope="module")
def scored() -> dict[str, Prediction]:
    return score()


@pytest.fixture(scope="module")
def unslowed() -> dict[str, Prediction]:
    """The rows priced as they were before vLLM's MoE prompt slowdown was fitted to them
    (engines.json vllm.moe_prompt_expert_slowdown): the evidence it was fitted on."""
    _cached_time.cache_clear()  # step times are remembered per deployment
    with mock.patch("ridgeline.cost.moe_prompt_expert_slowdown", return_value=1.0):
        before = score()
    _cached_time.cache_clear()
    return before


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


def test_llama_4_on_mi300x_and_the_saturated_h200_rows(
        scored: dict[str, Prediction], unslowed: dict[str, Prediction]) -> None:
    assert priced_over_measured(scored["MP-M5-l4scout-bf16-8xmi300x-sglang057-c1-1k1k"]) \
        == pytest.approx(3.1, abs=0.05)
    assert priced_over_measured(scored["MP-M5-l4maverick-bf16-8xmi300x-sglang057-c1-1k1k"]) \
        == pytest.approx(1.3, abs=0.05)
    saturated = {length: 1 / priced_over_measured(unslowed[
        f"MP-M9-dsr1-fp8-8xh200-vllm0110-sat-{length}"]) for length in ("2k", "4k", "32k")}
    assert saturated["2k"] == pytest.approx(1 / 3, abs=0.02)
    assert saturated["4k"] == pytest.approx(1 / 3, abs=0.02)
    assert saturated["32k"] == pytest.approx(0.55, abs=0.005)


def test_the_dense_control_is_priced_37_percent_fast_then_60_percent_slow(
        scored: dict[str, Prediction]) -> None:
    control = "MP-D1-dense-llama31-70b-bf16-8xa100-sglang056-c1-"
    short, long = (1 / priced_over_measured(scored[control + s]) - 1 for s in ("1k1k", "8k1k"))
    assert short == pytest.approx(-0.37, abs=0.005)
    assert long == pytest.approx(0.60, abs=0.005)


def test_the_record_cautions_moe_prefill_on_b200(scored: dict[str, Prediction]) -> None:
    """Every row behind it is one request's TTFT, so the caution gives the measured times over
    the priced ones as a factor (3.8x, not "+278% faster") and the excess in ms."""
    dep = Deployment.build(resolve_model("deepseek-r1"), resolve_accelerator("b200"), None, None,
                           8, engine="sglang")
    caution = track_record_caution(dep, "prefill", profile_for("sglang"))
    b200 = [p for i, p in scored.items() if "b200" in i and "-c1-" in i]
    assert all(p.predicted for p in b200)
    factor = statistics.median(p.measured / p.predicted for p in b200 if p.predicted)
    excess = statistics.median(p.measured - p.predicted for p in b200 if p.predicted)
    assert f"time to first token each, measured {factor:.1f}x the priced time" in caution
    assert f"{excess:+,.0f} ms over it" in caution
    assert "validation/moe_prefill.csv" in caution and "faster than measured" not in caution


def test_vllm_does_not_take_sglangs_moe_prefill_record() -> None:
    # vLLM shares the serving profile with SGLang but prices its routed experts' prompt
    # arithmetic slower (moe_prompt_expert_slowdown): SGLang's b200 rows were not priced as
    # vLLM's would be, so they caution SGLang's MoE prompts and not vLLM's; decode is shared
    assert moe_prompt_expert_slowdown("vllm") != moe_prompt_expert_slowdown("sglang")
    sglang, vllm = (Deployment.build(resolve_model("deepseek-r1"), resolve_accelerator("b200"),
                                     None, None, 8, engine=e) for e in ("sglang", "vllm"))
    assert track_record_caution(sglang, "prefill", profile_for("sglang"))
    assert track_record_caution(vllm, "prefill", profile_for("vllm")) == ""
    assert track_record_caution(vllm, "decode", profile_for("vllm")) == \
        track_record_caution(sglang, "decode", profile_for("sglang"))


def measured_over_priced_rate(scored: dict[str, Prediction], suffix: str) -> list[float]:
    """The saturated MoE rows' measured prefill rate over the priced one, prompts of ``suffix``."""
    return [p.measured / p.predicted for i, p in scored.items()
            if "-sat-" in i and "-dense-" not in i and i.endswith(suffix) and p.predicted]


def test_saturated_moe_prefill_was_a_third_of_the_priced_rate_at_2k_4k_and_half_at_32k(
        unslowed: dict[str, Prediction]) -> None:
    short = measured_over_priced_rate(unslowed, "-2k") + measured_over_priced_rate(unslowed, "-4k")
    long = measured_over_priced_rate(unslowed, "-32k")
    assert len(short) == 12 and len(long) == 6
    assert (round(min(short), 2), round(max(short), 2)) == (0.25, 0.43)
    assert statistics.median(short) == pytest.approx(0.34, abs=0.005)
    assert (round(min(long), 2), round(max(long), 2)) == (0.42, 0.63)
    assert statistics.median(long) == pytest.approx(0.53, abs=0.005)


def test_the_measured_saturated_rate_is_flat_in_prompt_length_while_the_priced_one_fell(
        unslowed: dict[str, Prediction]) -> None:
    runs = {i.removesuffix("-32k") for i in unslowed if "-sat-" in i and i.endswith("-32k")}
    assert len(runs) == 6
    measured = [unslowed[r + "-32k"].measured / unslowed[r + "-2k"].measured for r in runs]
    priced = [(unslowed[r + "-32k"].predicted or 0) / (unslowed[r + "-2k"].predicted or 1)
              for r in runs]
    assert (round(min(measured) - 1, 2), round(max(measured) - 1, 2)) == (-0.15, 0.17)
    assert (round(1 - max(priced), 2), round(1 - min(priced), 2)) == (0.24, 0.53)


def test_deepseek_v31_ttft_on_mi300x_grows_six_to_seven_times_the_priced_slope(
        scored: dict[str, Prediction]) -> None:
    run = "MP-M13-dsv31-fp8-8xmi300x-sglang057-c1-"
    short, lone, long = (scored[run + s] for s in ("1k1k", "1k8k", "8k1k"))
    tokens = 4194 - 610
    priced_slope = ((long.predicted or 0) - (lone.predicted or 0)) / tokens
    slopes = [(long.measured - p.measured) / tokens / priced_slope for p in (short, lone)]
    assert (round(min(slopes)), round(max(slopes))) == (6, 7)
    assert long.error == pytest.approx(-0.80, abs=0.01)


def test_the_dense_h100_control_at_128_tokens_is_priced_2_2_and_2_5_times_fast(
        tmp_path: Path) -> None:
    """The dense control validation/README.md keeps out of the file (it would caution every dense
    H100 prefill): Qwen3-32B on one H100, 127,698 prompt tokens in 32.88 s (vLLM) and 19.29 s
    (TensorRT-LLM), priced as rows of 64 prompts of 128 tokens a step."""
    header = CSV.read_text().splitlines()[0]
    rows = [f"D2-{engine},Qwen/Qwen3-32B,{dtype},unknown,h100,1,1,64,128,0,128,prefill_tok_s,"
            f"{127698 / seconds:.1f},tok/s,{engine},D2,dense control"
            for engine, dtype, seconds in (("vllm", "bf16", 32.88), ("trtllm", "fp8", 19.29))]
    path = tmp_path / "dense_control.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    read = refuse_past_roofline(read_measurement_files([path])).rows
    vllm, trtllm = (priced_over_measured(p) for p in validate(read))
    assert vllm == pytest.approx(2.2, abs=0.05)
    assert trtllm == pytest.approx(2.5, abs=0.05)


def test_with_vllms_moe_prompt_slowdown_its_saturated_rows_are_priced_within_a_fifth(
        scored: dict[str, Prediction], unslowed: dict[str, Prediction]) -> None:
    """The slowdown fitted on the vLLM rows (4.9) takes their median |error| from 170 % to 20 %
    (in sample; held out by source, 25 %: tests/test_moe_prompt_slowdown.py). Measured over
    priced is now 0.59-1.50 at 2K and 4K (median 0.95) and 0.82-1.51 at 32K (median 1.21): the
    priced rate still falls 9-32 % from 2K to 32K where the measured one is flat. The SGLang
    rows are priced as before."""
    assert moe_prompt_expert_slowdown("vllm") > 1
    vllm = [i for i in scored if "-vllm" in i]
    assert len(vllm) == 20
    assert statistics.median(abs(unslowed[i].error or 0) for i in vllm) \
        == pytest.approx(1.70, abs=0.005)
    assert statistics.median(abs(scored[i].error or 0) for i in vllm) \
        == pytest.approx(0.20, abs=0.005)
    short = measured_over_priced_rate(scored, "-2k") + measured_over_priced_rate(scored, "-4k")
    long = measured_over_priced_rate(scored, "-32k")
    assert (round(min(short), 2), round(max(short), 2)) == (0.59, 1.50)
    assert statistics.median(short) == pytest.approx(0.95, abs=0.005)
    assert (round(min(long), 2), round(max(long), 2)) == (0.82, 1.51)
    assert statistics.median(long) == pytest.approx(1.21, abs=0.005)
    runs = {i.removesuffix("-32k") for i in vllm if i.endswith("-32k")}
    priced = [(scored[r + "-32k"].predicted or 0) / (scored[r + "-2k"].predicted or 1)
              for r in runs]
    assert (round(1 - max(priced), 2), round(1 - min(priced), 2)) == (0.09, 0.32)
    assert all(scored[i].predicted == unslowed[i].predicted for i in scored if i not in vllm)
