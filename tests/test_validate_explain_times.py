"""`validate --explain` shows a prefill-speed, TTFT or throughput row's intermediate times
(the prefill, the decode step, each step's operators and the division), as it did a decode
row's step: it had shown the deployment and conditions, then the predicted figure, with
nothing between. Each is read from the object the prediction was computed with (metric_divisions'
prompt_division and throughput_division), so the division shown is the prediction."""

from __future__ import annotations

import re

import pytest

from ridgeline.explain import Quantity
from ridgeline.measurements import parse_row
from ridgeline.predict import predict
from ridgeline.reports.validation import prediction_steps
from tests.test_calibrate_input import ROW

TTFT = {**ROW, "id": "t", "batch": "1", "input_len": "2048", "output_len": "1",
        "context_len": "2048", "metric": "ttft_ms", "unit": "ms", "value": "60"}
PREFILL = {**ROW, "id": "pp", "model": "meta-llama/Meta-Llama-3-8B", "weights_dtype": "q4_k_m",
           "kv_dtype": "f16", "gpu": "rtx-4090", "batch": "1", "input_len": "2048",
           "output_len": "0", "context_len": "2048", "metric": "prefill_tok_s",
           "value": "8000", "engine": "llama.cpp-cuda"}
THROUGHPUT = {**ROW, "id": "thr", "batch": "64", "input_len": "512", "output_len": "256",
              "context_len": "768", "metric": "output_throughput_tok_s", "value": "5000"}


def _inputs(fields: dict[str, str]) -> tuple[float, dict[str, Quantity]]:
    row = parse_row(fields)
    p = predict(row)
    assert p.predicted is not None
    (only,) = prediction_steps([row], [p])
    return p.predicted, {x.name: x for x in only.inputs}


def _ms(text: str) -> list[float]:
    return [float(x) for x in re.findall(r" ([0-9.]+) ms", text)]


def test_a_ttft_shows_its_prefill_and_the_step_s_operators() -> None:
    """Llama-3.1-8B, 2,048 tokens on an H100 under vLLM: 60.7 ms, of which the MLP's matmuls
    are about 42 ms (compute-bound) and the fixed costs 4.6 ms."""
    predicted, inputs = _inputs(TTFT)
    assert inputs["prefill"].value == pytest.approx(predicted)
    parts = str(inputs["prefill step by operator"].value)
    assert "mlp" in parts and "(compute-bound)" in parts and "overhead" in parts
    assert sum(_ms(parts)) == pytest.approx(predicted, rel=1e-3)  # the operators add up
    assert str(inputs["division"].value) == f"TTFT = the prefill = {predicted:,.4g} ms"


def test_a_llama_bench_prompt_shows_its_ubatches_and_division() -> None:
    """pp2048 runs in four 512-token ubatches: the prefill says so, the first ubatch's
    operators are shown, and 1 × 2,048 ÷ the prefill is the prediction."""
    predicted, inputs = _inputs(PREFILL)
    prefill = inputs["prefill"]
    assert "in 4 ubatches of at most 512 tokens" in prefill.source
    assert 2048 / (float(prefill.value) / 1e3) == pytest.approx(predicted)
    assert "first ubatch by operator" in inputs
    assert str(inputs["division"].value).endswith(f"= {predicted:,.4g} tok/s")


def test_a_static_batch_throughput_shows_prefill_decode_step_and_division() -> None:
    predicted, inputs = _inputs(THROUGHPUT)
    prefill, decode = float(inputs["prefill"].value), float(inputs["decode step"].value)
    assert inputs["prefill"].source == ("64 prompts of 512 tokens, 16 a step under the "
                                        "engine's 8,192-token budget: 4 steps")
    assert 64 * 256 / ((prefill + 256 * decode) / 1e3) == pytest.approx(predicted)
    parts = str(inputs["decode step by operator"].value)
    assert "attention" in parts and sum(_ms(parts)) == pytest.approx(decode, rel=1e-3)
    assert str(inputs["division"].value).endswith(f"= {predicted:,.4g} tok/s")


def test_a_decode_row_shows_its_step_s_operators_too() -> None:
    predicted, inputs = _inputs({**ROW, "batch": "1"})
    decode = float(inputs["decode step"].value)
    assert 1e3 / decode == pytest.approx(predicted)
    assert sum(_ms(str(inputs["decode step by operator"].value))) == pytest.approx(decode,
                                                                                  rel=1e-3)
