"""validation/moe_prefill.csv scores as validation/README.md says: MoE TTFTs on B200 priced
2.6-9x too fast (median error -73 %), Llama-4 on MI300X 3.0x and 1.2x, DeepSeek-R1's saturated
prefill on 8 x H200 a third of the priced rate at 2K and 4K and 55 % at 32K, the dense
control 26 % too fast at the 1K run's median prompt (742 tokens) and 31 % too slow at the 8K run's
(3,439 prefilled); saturated MoE prefill on H100 and
H200 a third of the priced rate at 2K-4K and half at 32K, flat in prompt length while the priced rate
falls; DeepSeek-V3.1's TTFT on MI300X growing 8-9x the priced slope; the dense H100 control (kept out of
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
from ridgeline.predict import CLIENT_TTFT_CAVEAT, Prediction, predict
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


def test_every_b200_moe_ttft_is_priced_2_6_to_9_times_too_fast(
        scored: dict[str, Prediction]) -> None:
    b200 = [p for i, p in scored.items() if "b200" in i and "-c1-" in i]
    assert len(b200) == 11
    factors = [priced_over_measured(p) for p in b200]
    assert round(min(factors), 1) == 2.6 and round(max(factors)) == 9
    assert statistics.median(1 / f - 1 for f in factors) == pytest.approx(-0.73, abs=0.005)


def test_llama_4_on_mi300x_and_the_saturated_h200_rows(
        scored: dict[str, Prediction], unslowed: dict[str, Prediction]) -> None:
    assert priced_over_measured(scored["MP-M5-l4scout-bf16-8xmi300x-sglang057-c1-1k1k"]) \
        == pytest.approx(3.0, abs=0.05)
    assert priced_over_measured(scored["MP-M5-l4maverick-bf16-8xmi300x-sglang057-c1-1k1k"]) \
        == pytest.approx(1.2, abs=0.05)
    saturated = {length: 1 / priced_over_measured(unslowed[
        f"MP-M9-dsr1-fp8-8xh200-vllm0110-sat-{length}"]) for length in ("2k", "4k", "32k")}
    assert saturated["2k"] == pytest.approx(1 / 3, abs=0.02)
    assert saturated["4k"] == pytest.approx(1 / 3, abs=0.02)
    assert saturated["32k"] == pytest.approx(0.55, abs=0.005)


def test_the_dense_control_is_priced_26_percent_fast_then_31_percent_slow(
        scored: dict[str, Prediction]) -> None:
    control = "MP-D1-dense-llama31-70b-bf16-8xa100-sglang056-c1-"
    short, long = (1 / priced_over_measured(scored[control + s]) - 1 for s in ("1k1k", "8k1k"))
    assert short == pytest.approx(-0.255, abs=0.005)
    assert long == pytest.approx(0.31, abs=0.005)


def test_the_cookbook_rows_record_their_median_request_s_prompt() -> None:
    """bench_serving's random set draws the 10 lengths from numpy seeded 1: randint(1, L + 1, 10),
    which sums to the printed totals (6,101 and 41,941). A median TTFT is the median request's, so
    a 1K row records the median of its draw; an 8K row the median of the lengths prefilled, its
    first prompt being the warmup request's, served from the radix cache (0 tokens)."""
    np = pytest.importorskip("numpy")  # the draw bench_serving makes (matplotlib brings numpy)

    rows = {r.id: r for r in read_measurement_files([CSV]).rows}
    for limit, total in ((1000, 6101), (8000, 41941)):
        draw = np.random.RandomState(1).randint(1, limit + 1, size=10)
        assert int(draw.sum()) == total
        prefilled = [0, *draw[1:]] if limit == 8000 else list(draw)
        median = round(float(np.median(prefilled)) + 1e-9)  # 3,438.5 rounds up
        cookbook = [r for r in rows.values() if "sglang05" in r.id and "-c1-" in r.id
                    and f"total input {total} tokens" in r.notes]
        assert len(cookbook) == (9 if limit == 1000 else 4)
        assert all(r.input_len == median for r in cookbook)


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


def test_deepseek_v31_ttft_on_mi300x_grows_eight_to_nine_times_the_priced_slope(
        scored: dict[str, Prediction]) -> None:
    run = "MP-M13-dsv31-fp8-8xmi300x-sglang057-c1-"
    short, lone, long = (scored[run + s] for s in ("1k1k", "1k8k", "8k1k"))
    lengths = {r.id: r.input_len for r in read_measurement_files([CSV]).rows}
    tokens = lengths[run + "8k1k"] - lengths[run + "1k8k"]
    priced_slope = ((long.predicted or 0) - (lone.predicted or 0)) / tokens
    slopes = [(long.measured - p.measured) / tokens / priced_slope for p in (short, lone)]
    assert (round(min(slopes)), round(max(slopes))) == (8, 9)
    assert long.error == pytest.approx(-0.83, abs=0.01)


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


def test_the_client_timed_ttfts_carry_the_caveat_that_says_what_they_hold(
        scored: dict[str, Prediction]) -> None:
    """Every TTFT here is a benchmark client's (notes: 'client-side'), so each carries the caveat
    that the request's path is inside it, with the MoE rows' excess over the priced step as it
    quotes it; the TensorRT-LLM TTFTs of measurements.csv, timed inside the engine's own
    benchmark, carry none."""
    ttft = {i: p for i, p in scored.items() if p.metric == "ttft_ms"}
    assert len(ttft) == 18 and all(CLIENT_TTFT_CAVEAT in p.caveat for p in ttft.values())
    moe = [p.measured - (p.predicted or 0) for i, p in ttft.items() if "-dense-" not in i]
    assert f"MoE models' TTFTs measured {min(moe):.0f} to {max(moe):.0f} ms over that step" \
        in CLIENT_TTFT_CAVEAT
    shared = Path(__file__).resolve().parent.parent / "validation" / "measurements.csv"
    engine_side = [r for r in read_measurement_files([shared]).rows if r.metric == "ttft_ms"]
    assert engine_side and all(predict(r).caveat == "" for r in engine_side)
