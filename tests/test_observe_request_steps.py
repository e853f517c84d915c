"""A drafting server's token is its step over the tokens a request's step kept over ALL its
decode steps, not over the steps that drafted: vLLM's mean acceptance length (1 + accepted ÷
drafts) leaves out the steps an n-gram drafter found no match for, which keep 1 token each,
while the measured ITL spreads every step over its tokens. vLLM's generation and accepted
tokens give the all-steps figure (spec_decode.tokens_per_request_step); where a source gives
only an acceptance length (SGLang's gauge, a bench's JSON), a caution says so."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ridgeline.observe import read_source
from ridgeline.sim.config import acceptance_for_tokens
from ridgeline.spec_decode import tokens_per_request_step
from tests.conftest import run_cli
from tests.test_observe_spec_step import EAGLE3, L8, RUNNING, observe_json, sglang_scrapes

FIXTURES = Path(__file__).parent / "fixtures"
CAUTION = "acceptance length, which counts only the steps that drafted"
M = 'engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"'


def test_half_the_steps_drafting_keep_fewer_tokens_a_step_than_the_acceptance_length() -> None:
    """The docstring's worked number: 36,000 steps, 18,000 of them drafting, 18,000 drafts
    accepted: 1.5 tokens a step over all of them, 2.0 over the drafted ones."""
    steps, drafts, accepted, first = 36_000, 18_000, 18_000, 400
    every = tokens_per_request_step(first + steps + accepted, accepted, first)
    assert every == pytest.approx((steps + accepted) / steps) == pytest.approx(1.5)
    assert 1 + accepted / drafts == pytest.approx(2.0)
    # every step drafting: the two figures are one
    assert tokens_per_request_step(first + drafts + accepted, accepted, first) \
        == pytest.approx(1 + accepted / drafts)
    with pytest.raises(ValueError, match="leave no decode step"):
        tokens_per_request_step(1_000, 1_000)


def vllm_window(tmp_path: Path, steps: int, drafts: int, accepted: int, first: int = 400,
                step_s: float = 0.012, drop: str = "", readings: int | None = None) -> Path:
    """Two vLLM scrapes 10 s apart, 40 running: over the window ``steps`` decode steps (an
    ITL reading each, ``step_s`` apart, unless ``readings`` says otherwise), ``drafts`` of
    them drafting 3 tokens, ``accepted`` drafts kept, ``first`` requests' first tokens; the
    generation counter rises by every token (first + steps + accepted). A line naming
    ``drop`` is left out."""
    base = {"gen": 100_000, "drafts": 10_000, "accepted": 12_000, "ttft": 2_000,
            "itl": 40_000}
    steps_timed = steps if readings is None else readings
    rise = {"gen": first + steps + accepted, "drafts": drafts, "accepted": accepted,
            "ttft": first, "itl": steps_timed}
    text = ""
    for time_s, scale in ((1000, 0), (1010, 1)):
        n = {key: base[key] + scale * rise[key] for key in base}
        itl_sum = base["itl"] * step_s + scale * steps_timed * step_s
        text += (f"# scrape_time {time_s}\n"
                 f"vllm:num_requests_running{{{M}}} {RUNNING}\n"
                 f"vllm:num_requests_waiting{{{M}}} 0\n"
                 f"vllm:kv_cache_usage_perc{{{M}}} 0.3\n"
                 f"vllm:prompt_tokens_total{{{M}}} 400000\n"
                 f"vllm:generation_tokens_total{{{M}}} {n['gen']}\n"
                 f"vllm:spec_decode_num_drafts_total{{{M}}} {n['drafts']}\n"
                 f"vllm:spec_decode_num_draft_tokens_total{{{M}}} {3 * n['drafts']}\n"
                 f"vllm:spec_decode_num_accepted_tokens_total{{{M}}} {n['accepted']}\n"
                 "# TYPE vllm:time_to_first_token_seconds histogram\n"
                 f"vllm:time_to_first_token_seconds_bucket{{{M},le=\"+Inf\"}} {n['ttft']}\n"
                 f"vllm:time_to_first_token_seconds_count{{{M}}} {n['ttft']}\n"
                 f"vllm:time_to_first_token_seconds_sum{{{M}}} {n['ttft'] * 0.15}\n"
                 "# TYPE vllm:inter_token_latency_seconds histogram\n"
                 f"vllm:inter_token_latency_seconds_bucket{{{M},le=\"0.025\"}} {n['itl']}\n"
                 f"vllm:inter_token_latency_seconds_bucket{{{M},le=\"+Inf\"}} {n['itl']}\n"
                 f"vllm:inter_token_latency_seconds_count{{{M}}} {n['itl']}\n"
                 f"vllm:inter_token_latency_seconds_sum{{{M}}} {itl_sum}\n")
    if drop:
        text = "\n".join(line for line in text.splitlines() if drop not in line) + "\n"
    path = tmp_path / "window.prom"
    path.write_text(text)
    return path


HALF = {"steps": 36_000, "drafts": 18_000, "accepted": 18_000}  # an n-gram's window


def test_an_ngram_window_half_of_whose_steps_drafted_reads_its_tokens_over_all_steps(
        tmp_path: Path) -> None:
    """Half the 36,000 steps drafted: the counters read 1.5 tokens a step over all of them
    (the tokens an ITL reading covered, too), 2.0 over the drafted ones, and the note says
    how many steps drafted."""
    path = vllm_window(tmp_path, **HALF)
    obs = read_source(str(path))
    steps, drafts, accepted, first = HALF["steps"], HALF["drafts"], HALF["accepted"], 400
    every = tokens_per_request_step(first + steps + accepted, accepted, first)
    assert obs.spec_tokens_per_step == pytest.approx(1 + accepted / drafts)
    assert obs.spec_tokens_per_request_step == pytest.approx(every)
    assert obs.spec_tokens_per_decode_step == pytest.approx(every)
    assert every < obs.spec_tokens_per_step
    assert obs.latency_ms["itl"]["mean"] == pytest.approx(0.012e3 / every)
    assert any(f"{drafts:,} of {steps:,} steps drafted (50%)" in note for note in obs.notes)


def test_a_half_drafted_windows_prediction_divides_its_verify_step_by_all_steps(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--spec-tokens 3: the verify step accepts as the drafted steps say (2.0 tokens), but a
    token's time is that step over 1.5, the tokens of all steps, as the measured ITL is; the
    text says which steps it counts, and no caution is given."""
    path = vllm_window(tmp_path, **HALF)
    obs = read_source(str(path))
    report = observe_json(capsys, str(path), *L8, "--spec-tokens", "3")
    every = obs.spec_tokens_per_request_step
    assert every is not None and obs.spec_tokens_per_step is not None
    assert report["speculative"]["spec_acceptance"] == pytest.approx(
        acceptance_for_tokens(3, obs.spec_tokens_per_step))
    assert report["tokens_per_step"] == pytest.approx(every)
    assert report["tokens_per_step_over"] == "all decode steps"
    assert report["predicted_itl_s"] == pytest.approx(report["predicted_step_s"] / every)
    assert report["gap"]["itl"] == pytest.approx(
        report["predicted_itl_s"] * 1e3 / obs.latency_ms["itl"]["mean"] - 1)
    assert not any(CAUTION in c for c in report["cautions"])
    code, out, _ = run_cli(capsys, "observe", str(path), *L8, "--spec-tokens", "3")
    assert code == 0 and f"{every:,.2f} tokens a request over all decode steps" in out


def test_without_a_generation_counter_the_acceptance_length_divides_with_a_caution(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = vllm_window(tmp_path, **HALF, drop="generation_tokens")
    obs = read_source(str(path))
    assert obs.spec_tokens_per_request_step is None
    report = observe_json(capsys, str(path), *L8, "--spec-tokens", "3")
    assert report["tokens_per_step"] == pytest.approx(obs.spec_tokens_per_step)
    assert report["tokens_per_step_over"] == "drafted steps"
    assert sum(CAUTION in c for c in report["cautions"]) == 1


def test_counters_leaving_fewer_steps_than_drafts_are_not_read(tmp_path: Path) -> None:
    """20,000 drafts in what the generation counter leaves as 10,000 steps: no one server's
    counters, so the all-steps figure is not read; a few fewer steps than drafts (a request
    that stopped inside its accepted drafts, trimmed but counted accepted) read as every
    step drafting: the acceptance length."""
    obs = read_source(str(vllm_window(tmp_path, steps=10_000, drafts=20_000,
                                      accepted=20_000)))
    assert obs.spec_tokens_per_request_step is None
    assert any("fewer than the 20,000 drafts" in note for note in obs.notes)
    near = read_source(str(vllm_window(tmp_path, steps=19_900, drafts=20_000,
                                       accepted=20_000)))
    assert near.spec_tokens_per_request_step == pytest.approx(near.spec_tokens_per_step)


def test_itl_readings_the_counters_disagree_with_are_noted(tmp_path: Path) -> None:
    """Each decode step is one ITL reading, and the counters leave one token a step besides
    the accepted: 30,000 readings where they leave 36,000 steps is noted, the readings'
    own tokens still dividing the histogram."""
    obs = read_source(str(vllm_window(tmp_path, **HALF, readings=30_000)))
    every = obs.spec_tokens_per_request_step
    covered = (HALF["steps"] + HALF["accepted"]) / 30_000
    assert every is not None and covered > every
    assert obs.latency_ms["itl"]["mean"] == pytest.approx(0.012e3 / covered)
    assert any(f"cover {covered:,.2f} tokens each, the counters {every:,.2f} a step" in note
               for note in obs.notes)
    agreed = read_source(str(vllm_window(tmp_path, **HALF)))
    assert not any("they should agree" in note for note in agreed.notes)


STATS = ("INFO 11-29 12:00:{s:02d} [loggers.py:1] Engine 000: Avg prompt throughput: 0.0 "
         "tokens/s, Avg generation throughput: {gen:.1f} tokens/s, Running: 40 reqs, Waiting: "
         "0 reqs, GPU KV cache usage: 30.0%, Prefix cache hit rate: 0.0%")
SPEC = ("INFO 11-29 12:00:{s:02d} [metrics.py:1] SpecDecoding metrics: Mean acceptance length: "
        "{mean:.2f}, Accepted throughput: {rate:.2f} tokens/s, Drafted throughput: "
        "{drafted_rate:.2f} tokens/s, Accepted: {accepted} tokens, Drafted: {drafted} tokens, "
        "Per-position acceptance rate: 0.500, 0.300, 0.200, Avg Draft acceptance rate: 33.3%")


def half_drafted_log(tmp_path: Path, throughput: bool = True) -> Path:
    """Three 10 s intervals at 6,000 tok/s, 4,000 tok/s and 6,000 tok/s: the first and last
    half of their 4,000 steps a second drafting 3 tokens and accepting 2,000 tok/s (a mean
    acceptance length of 2.0); the middle one drafting nothing, so no SpecDecoding line."""
    lines = []
    for s, gen, drafting in ((10, 6000.0, True), (20, 4000.0, False), (30, 6000.0, True)):
        lines.append(STATS.format(s=s, gen=gen))
        if drafting:
            lines.append(SPEC.format(s=s, mean=2.0, rate=2000.0, drafted_rate=6000.0,
                                     accepted=20_000, drafted=60_000))
    text = "\n".join(lines) + "\n"
    if not throughput:
        text = re.sub(r"Accepted throughput: [\d.]+ tokens/s, ", "", text)
    path = tmp_path / "half.log"
    path.write_text(text)
    return path


def test_a_logs_throughputs_give_the_tokens_of_all_steps(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The stats lines' generation throughputs summed (16,000 tok/s) over those less the
    drafter lines' accepted ones (4,000): 1.33 tokens a step, where the lines' acceptance
    length reads 2.0; the prediction divides by it."""
    path = half_drafted_log(tmp_path)
    text = path.read_text()
    gen = sum(float(v) for v in re.findall(r"generation throughput: ([\d.]+)", text))
    accepted = sum(float(v) for v in re.findall(r"Accepted throughput: ([\d.]+)", text))
    obs = read_source(str(path))
    assert obs.spec_tokens_per_step == pytest.approx(2.0)
    assert obs.spec_tokens_per_request_step == pytest.approx(
        tokens_per_request_step(gen, accepted)) == pytest.approx(gen / (gen - accepted))
    report = observe_json(capsys, str(path), *L8, "--spec-tokens", "3")
    assert report["tokens_per_step_over"] == "all decode steps"
    assert report["predicted_itl_s"] * 1e3 == pytest.approx(
        report["predicted_step_s"] * 1e3 / obs.spec_tokens_per_request_step)


def test_a_log_without_accepted_throughputs_keeps_the_acceptance_length_with_a_caution(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = half_drafted_log(tmp_path, throughput=False)
    obs = read_source(str(path))
    assert obs.spec_tokens_per_request_step is None
    assert any("no accepted throughput" in note for note in obs.notes)
    report = observe_json(capsys, str(path), *L8, "--spec-tokens", "3")
    assert report["tokens_per_step"] == pytest.approx(obs.spec_tokens_per_step)
    assert sum(CAUTION in c for c in report["cautions"]) == 1


def test_sglangs_and_a_benchs_acceptance_length_come_with_the_caution(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Neither counts its steps without drafts: today's divisor, and one caution line."""
    sglang = observe_json(capsys, sglang_scrapes(tmp_path, 2.5), *L8, *EAGLE3)
    bench = json.loads((FIXTURES / "vllm_bench.json").read_text())
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({**bench, "spec_decode_acceptance_length": 2.2}))
    benched = observe_json(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100",
                           "--spec-tokens", "2")
    for report, kept in ((sglang, 2.5), (benched, 2.2)):
        assert report["tokens_per_step"] == pytest.approx(kept)
        assert report["tokens_per_step_over"] == "drafted steps"
        assert sum(CAUTION in c for c in report["cautions"]) == 1
    plain = observe_json(capsys, sglang_scrapes(tmp_path, None), *L8)
    assert plain["tokens_per_step_over"] is None
    assert not any(CAUTION in c for c in plain["cautions"])


def test_a_benchs_accepted_tokens_give_the_tokens_of_all_steps(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """vllm bench serve's spec_decode_accepted_tokens (the server's counter over the run)
    against its 128,000 output tokens less 500 first ones: 60,000 accepted leave 67,500 steps,
    1.89 tokens each, where the 30,000 drafts' acceptance length reads 3.0; TPOT is set
    against the verify step over 1.89. Drafts past the steps the output leaves (another
    client's traffic) are not read."""
    bench = json.loads((FIXTURES / "vllm_bench.json").read_text())
    run = {**bench, "spec_decode_acceptance_length": 3.0, "spec_decode_num_drafts": 30_000,
           "spec_decode_accepted_tokens": 60_000}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(run))
    obs = read_source(str(path))
    every = tokens_per_request_step(bench["total_output_tokens"], 60_000, bench["completed"])
    assert obs.spec_tokens_per_request_step == pytest.approx(every) == pytest.approx(
        127_500 / 67_500)
    report = observe_json(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100",
                          "--spec-tokens", "3")
    assert report["tokens_per_step_over"] == "all decode steps"
    assert report["predicted_itl_s"] == pytest.approx(report["predicted_step_s"] / every)
    assert report["gap"]["itl"] == pytest.approx(
        report["predicted_itl_s"] * 1e3 / bench["mean_tpot_ms"] - 1)
    path.write_text(json.dumps({**run, "spec_decode_num_drafts": 80_000}))
    crowded = read_source(str(path))
    assert crowded.spec_tokens_per_request_step is None
    assert any("served more than the run" in note for note in crowded.notes)
