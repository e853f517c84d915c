"""How simulate and plan read a run: percentiles as `vllm bench serve` computes them
(numpy.percentile's default, linear: vllm/benchmarks/serve.py calculate_metrics passes each
latency list to np.percentile), an ITL SLO with no chunk after a first token said to be not
measured (and refused by plan), and a running batch past `fit`'s count of full-length
conversations said why."""

from __future__ import annotations

import json
import math
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ridgeline.sim.histogram import Histogram
from ridgeline.sim.metrics import Recorder, SimResult, misses_settling
from ridgeline.sim.request import Request
from tests.conftest import run_cli

HALF_BIN = 10 ** (0.5 / 1000) - 1  # a sample read at its log bin's centre: 0.115 % off at most


def _linear(values: list[float], q: float) -> float:
    """numpy.percentile(values, q)'s default reading, by the standard library: the
    'inclusive' quantiles are R's type 7, numpy's linear (the least value p0, the most p100)."""
    if q == 100:
        return max(values)
    return statistics.quantiles(values, n=1000, method="inclusive")[round(q * 10) - 1]


def test_ten_latencies_read_p90_between_the_ninth_and_the_tenth() -> None:
    """1 … 10 s: position 0.9 × 9 = 8.1 in the sorted ten, 9 + 0.1 × (10 − 9) = 9.1 s, where
    the nearest rank read the ninth (9 s); the median 5.5 s, not 5."""
    h = Histogram()
    for v in range(1, 11):
        h.add(float(v))
    assert _linear([float(v) for v in range(1, 11)], 90) == pytest.approx(9.1)
    assert h.percentile(90) == pytest.approx(9.1, rel=HALF_BIN)
    assert h.percentile(50) == pytest.approx(5.5, rel=HALF_BIN)
    assert h.percentile(0) == 1.0 and h.percentile(100) == 10.0  # the ends exact


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 300), seed=st.integers(0, 10_000))
def test_every_percentile_is_numpys_linear_reading_to_half_a_bin(n: int, seed: int) -> None:
    rng = random.Random(seed)
    values = [rng.lognormvariate(-3, 1) for _ in range(n)]
    h = Histogram()
    for v in values:
        h.add(v)
    for q in (1, 50, 90, 95, 99, 99.9):
        assert h.percentile(q) == pytest.approx(_linear(values, q), rel=HALF_BIN * 1.01)


def _recorder(ttfts_s: list[float], rejected: int, slo_ttft_s: float | None = None,
              stop_past: int | None = None) -> SimResult:
    rec = Recorder(1, slo_ttft_s)
    rec.stop_past = stop_past
    for i, ttft in enumerate(ttfts_s):
        r = Request(i, float(i), 100, 10)
        r.first_token_s, r.first_scheduled_s = i + ttft, float(i)
        r.finish_s, r.num_generated = i + 1.0, 10
        rec.finish(r)
    for j in range(rejected):
        r = Request(len(ttfts_s) + j, 0.5, 100_000, 10)
        r.reason = "too long"
        rec.reject(r)
    return SimResult(rec, float(len(ttfts_s)), 0, 0, len(ttfts_s))


def test_a_rejected_request_sorts_last_and_the_percentile_interpolates_towards_it() -> None:
    """Nine TTFTs 10, 20, … 90 ms and one rejected (never answered: infinite, sorted last):
    p80 is at position 0.8 × 9 = 7.2, 80 + 0.2 × (90 − 80) = 82 ms (the nearest rank read
    80); p90 at 8.1, past the last answered: infinite."""
    ttfts = [0.01 * (i + 1) for i in range(9)]
    result = _recorder(ttfts, rejected=1)
    assert result.latency_s_at("ttft", 80) == pytest.approx(0.082, rel=HALF_BIN)
    assert result.latency_s_at("ttft", 800 / 9) == pytest.approx(0.09, rel=HALF_BIN)  # at 8
    assert result.latency_s_at("ttft", 90) == math.inf


@settings(max_examples=80, deadline=None)
@given(arrived=st.integers(1, 400), percentile=st.sampled_from([50.0, 90.0, 95.0, 99.0, 99.9]),
       rejected_share=st.floats(0, 1))
def test_a_check_stops_only_where_the_percentile_has_passed_the_slo(
        arrived: int, percentile: float, rejected_share: float) -> None:
    """``misses_settling``: once more of a window's requests than it allows land past the SLO,
    the percentile read with the rejected sorted last (``latency_s_at``) passes the SLO
    whatever the rest do, however many of those arriving were rejected."""
    rejected = min(arrived - 1, int(rejected_share * arrived))
    kept = arrived - rejected
    work = [Request(i, float(i), 100, 10) for i in range(arrived)]
    past = misses_settling(work, (-math.inf, math.inf), percentile) + 1
    if past > kept:
        return  # not that many answered: the rejected alone decide it
    slo_s = 0.1
    ttfts = [2 * slo_s] * past + [0.5 * slo_s] * (kept - past)
    result = _recorder(ttfts, rejected, slo_s, stop_past=past - 1)
    assert result.rec.missed
    assert result.latency_s_at("ttft", percentile) > slo_s


SIM_ONE_TOKEN = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "4", "--num-requests",
                 "100", "--output-len", "1", "--slo-itl-ms", "30")


def test_an_itl_slo_with_no_gap_to_read_is_not_measured(
        capsys: pytest.CaptureFixture[str]) -> None:
    """1-token outputs stream no chunk after the first: the ITL SLO is neither met nor missed
    (it had read "met"), null in --json, said so in the text."""
    code, out, err = run_cli(capsys, *SIM_ONE_TOKEN, "--json")
    assert code == 0, err
    verdict = json.loads(out)["itl_slo"]
    assert verdict["chunks"] == 0 and verdict["itl_s"] is None and verdict["met"] is None
    code, out, err = run_cli(capsys, *SIM_ONE_TOKEN)
    line = next(line for line in out.splitlines() if line.startswith("ITL SLO"))
    assert "not measured" in line and "neither met nor missed" in line
    assert ": met" not in line and "MISSED" not in line


def test_plan_refuses_an_itl_slo_for_one_token_outputs(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run_cli(capsys, "plan", "llama-3.1-8b", "--rate", "4", "--output-len", "1",
                              "--slo-ttft-ms", "500", "--slo-tpot-ms", "50",
                              "--slo-itl-ms", "30")
    assert code != 0 and "ITL SLO (30 ms) needs outputs of 2 tokens or more" in err


def _fit_conversations(capsys: pytest.CaptureFixture[str], context: str) -> int:
    code, out, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100",
                             "--max-model-len", context, "--json")
    assert code == 0, err
    return int(json.loads(out)["conversations"])


def test_a_running_batch_past_fits_count_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    """At --max-model-len 131,072 the H100's pool holds fit's 3 conversations of that
    length, but 512-token prompts at 20 a second run near 48 at once (batch_past_fit's
    worked number): simulate says the batch passed fit's count and why (vLLM admits on the
    prompt), and --json gives that count. At 2,048 tokens the pool holds more than the run
    ever runs: no such line."""
    held = _fit_conversations(capsys, "131072")
    argv = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "20", "--num-requests",
            "300", "--max-model-len", "131072")
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    data = json.loads(out)
    peak = data["running"]["max"]
    assert data["conversations"] == held == 3 and abs(peak - 48) <= 4
    code, out, err = run_cli(capsys, *argv)
    line = next(line for line in out.splitlines() if "`fit` counts at once" in line)
    assert f"peaked at {peak:,.0f}, past the {held:,} conversations of 131,072 tokens" in line
    assert "vLLM admits a request once its prompt's blocks are free" in line
    assert f"({data['preemptions']:,} preemption" in line
    short = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "8", "--num-requests",
             "300", "--max-model-len", "2048")
    code, out, err = run_cli(capsys, *short, "--json")
    data = json.loads(out)
    assert data["running"]["max"] <= data["conversations"] \
        == _fit_conversations(capsys, "2048")
    code, out, err = run_cli(capsys, *short)
    assert code == 0 and "`fit` counts at once" not in out


def test_a_default_context_past_fits_count_is_told_only_where_the_run_preempted(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Without --max-model-len the context is the model's 131,072 tokens, whose 3
    conversations a default run of 512-token prompts passes without a preemption: no line
    (nobody asked for such conversations). A run whose requests outgrow the pool once
    admitted on their prompts preempts: the line says the batch passed fit's count, and why
    that preempted."""
    code, out, err = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--rate",
                             "20", "--num-requests", "300", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["running"]["max"] > data["conversations"] and not data["preemptions"]
    code, out, err = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--rate",
                             "20", "--num-requests", "300")
    assert code == 0 and "peaked at" not in out and "`fit` counts at once" not in out
    argv = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "inf", "--num-requests",
            "200", "--input-len", "2000", "--output-len", "4000")
    code, out, err = run_cli(capsys, *argv, "--json")
    data = json.loads(out)
    peak, held, preempted = (data["running"]["max"], data["conversations"],
                             data["preemptions"])
    assert peak > held and preempted > 0
    code, out, err = run_cli(capsys, *argv)
    line = next(line for line in out.splitlines() if "`fit` counts at once" in line)
    assert f"peaked at {peak:,.0f}, past the {held:,} conversations of 131,072 tokens" in line
    assert "the requests admitted together outgrew the pool as they decoded " \
        f"({preempted:,} preemptions here)" in line


def test_fit_names_its_count_for_what_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    """fit's count is of conversations of the whole context at once, not a cap on the running
    batch ("batch the engine can run" read as one)."""
    code, out, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100",
                             "--max-model-len", "32768")
    assert code == 0, err
    held = _fit_conversations(capsys, "32768")
    assert f"conversations of 32,768 tokens at once: min({held:,} conversations, " in out
    assert "batch the engine can run" not in out
