"""`observe` prices the window as the engine runs it: each prompt in a step of its own beside the
running decodes (chunked at the step budget the decodes leave, where longer), the other steps
decode alone — not a slice of every prompt in every step, which made each step a mixed one
without CUDA graphs and put the fixture's batch of 8 at 11.2 ms a token where `simulate` and
`decode` say about 8.5–9."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.chunked_prefill import prefill_steps, step_budget
from ridgeline.cost import Seq, decode_batch, step_time_s
from ridgeline.engines import profile_for
from ridgeline.memory import EngineSettings
from ridgeline.observation import Observation
from ridgeline.observe import read_source
from ridgeline.reports.observe import observe_report
from tests.conftest import run_cli

FIXTURES = Path(__file__).parent / "fixtures"


def llama_8b() -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"))


def simulated_itl_ms(capsys: pytest.CaptureFixture[str], concurrency: int) -> float:
    """`simulate`'s mean ITL for the fixture's load at ``concurrency``: 1,024-token prompts
    and 256-token outputs on average, drawn at random as a benchmark draws them (equal
    lengths in a closed loop run in lockstep waves, several prompts a step)."""
    code, out, _ = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100",
                           "--concurrency", str(concurrency), "--num-requests", "200",
                           "--input-len", "uniform:512,1536", "--output-len", "uniform:128,384",
                           "--max-model-len", "2048", "--json")
    assert code == 0
    return float(json.loads(out)["itl_s"]["mean"]) * 1e3


def steady_mix_ms(dep: Deployment, batch: int, context: int, prompt: int,
                  output: int) -> tuple[float, float, float]:
    """(the time-weighted mean step, decode alone, the old average step) for ``batch`` running
    requests of ``prompt`` in and ``output`` out, built here from step_time_s and
    prefill_steps: one prompt every output ÷ batch steps, in its own steps beside the
    decodes; the old model put batch × prompt ÷ output tokens in every step."""
    profile = profile_for("vllm")
    decodes = decode_batch(batch, context)
    room = step_budget(dep, EngineSettings())[0] - batch  # the decodes take their share first
    decode_s = step_time_s(dep, decodes, profile)
    mixed_s = [step_time_s(dep, [*decodes, *chunk], profile)
               for chunk in prefill_steps(prompt, 1, room)]
    cycle = output / batch  # steps between two prompts' arrivals
    mean_s = (sum(mixed_s) + (cycle - len(mixed_s)) * decode_s) / cycle
    spread_s = step_time_s(dep, [*decodes, Seq(round(batch * prompt / output), prompt // 2)],
                           profile)
    return mean_s * 1e3, decode_s * 1e3, spread_s * 1e3


def test_the_fixtures_batch_of_8_runs_each_prompt_in_one_step_as_simulate_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Batch 8, 1,024 in, 256 out: one prompt every 32 steps, each in one mixed step (32.9 ms)
    and 31 decode steps (8.3 ms): 9.1 ms a token, within half the prompt's share of a step of
    simulate's ITL (9.0 ms); the old average step (11.2 ms) is not."""
    obs = read_source(str(FIXTURES / "vllm_metrics.txt"))
    assert obs.batch == 8 and obs.mean_prompt_tokens == 1024 and obs.mean_output_tokens == 256
    dep = llama_8b()
    report = observe_report(obs, dep, profile_for("vllm"), None)
    mean_ms, decode_ms, spread_ms = steady_mix_ms(dep, 8, report.context, 1024, 256)
    predicted = report.predicted_itl_ms
    assert predicted == pytest.approx(mean_ms, rel=1e-9)
    assert report.prompts_per_step == pytest.approx(8 / 256)
    assert [sum(s.new_tokens for s in step) for step in report.prompt_steps] == [1024]
    prompt_share_ms = mean_ms - decode_ms  # what the prompts add to the mean step
    simulated = simulated_itl_ms(capsys, 8)
    assert abs(predicted - simulated) < prompt_share_ms / 2
    assert abs(spread_ms - simulated) > 2 * prompt_share_ms  # the old figure, far off
    code, out, _ = run_cli(capsys, "observe", str(FIXTURES / "vllm_metrics.txt"), "--model",
                           "llama-3.1-8b", "--gpu", "h100")
    assert code == 0
    assert (f"ridgeline predicts {predicted:,.1f} ms per token at this batch (vllm; each "
            "prompt, 1,024 tokens, runs in its own step beside the batch's decodes, about one "
            "step in 32; the other steps decode alone)") in out
    code, out, _ = run_cli(capsys, "observe", str(FIXTURES / "vllm_metrics.txt"), "--model",
                           "llama-3.1-8b", "--gpu", "h100", "--explain")
    assert code == 0 and "the engine's mean step at this batch" in out
    assert f"prompts per step = {8 / 256:.4g}  [batch ÷ mean output" in out


def test_at_batch_32_each_prompt_in_its_step_and_the_average_step_agree(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Batch 32 of the same load: a prompt every 8 steps, whose compute dominates its mixed
    step, so running it whole or spread over the steps costs about the same — the two within a
    quarter of what the prompts add to decode, and both near simulate's ITL."""
    dep = llama_8b()
    obs = Observation("x", "metrics", running=[32.0], mean_prompt_tokens=1024,
                      mean_output_tokens=256, duration_s=60.0)
    report = observe_report(obs, dep, profile_for("vllm"), None)
    mean_ms, decode_ms, spread_ms = steady_mix_ms(dep, 32, report.context, 1024, 256)
    predicted = report.predicted_itl_ms
    assert predicted == pytest.approx(mean_ms, rel=1e-9)
    assert abs(predicted - spread_ms) < (spread_ms - decode_ms) / 4
    assert abs(predicted - simulated_itl_ms(capsys, 32)) < (mean_ms - decode_ms) / 2
    # at batch 8 the two part by most of what the prompts add: the gap the fix closes
    low_mean, low_decode, low_spread = steady_mix_ms(dep, 8, report.context, 1024, 256)
    assert low_spread - low_mean > (low_spread - low_decode) / 2


def test_a_prompt_longer_than_the_budget_runs_in_chunks_beside_the_decodes(
        capsys: pytest.CaptureFixture[str]) -> None:
    """20,000-token prompts beside 8 decodes take the 8,184 tokens a step the decodes leave of
    vLLM's 8,192: three chunks, each after the ones before it, priced step by step."""
    dep = llama_8b()
    obs = Observation("x", "metrics", running=[8.0], mean_prompt_tokens=20_000,
                      mean_output_tokens=500, duration_s=60.0)
    report = observe_report(obs, dep, profile_for("vllm"), None)
    room = report.step_budget - 8
    chunks = prefill_steps(20_000, 1, room)
    assert len(chunks) == 3 and report.prompt_steps == tuple(tuple(c) for c in chunks)
    assert report.predicted_itl_ms == pytest.approx(
        steady_mix_ms(dep, 8, report.context, 20_000, 500)[0], rel=1e-9)
    assert f"runs in 3 chunks of at most {room:,} tokens beside" in report.prompt_work_label
    data = report.to_dict()
    assert data["prompt_step_tokens"] == [sum(s.new_tokens for s in c) for c in chunks]


def test_prefix_cache_hits_leave_a_shorter_prompt_step_after_the_cached_tokens() -> None:
    """Half of each 1,024-token prompt from the prefix cache: its step computes 512 tokens
    after the 512 cached, and the prompts still arrive one every 32 steps."""
    dep = llama_8b()
    obs = Observation("x", "metrics", running=[8.0], mean_prompt_tokens=1024,
                      mean_output_tokens=256, duration_s=60.0, cached_prompt_share=0.5)
    report = observe_report(obs, dep, profile_for("vllm"), None)
    assert report.prompt_steps == ((Seq(512, 512),),)
    assert report.prompts_per_step == pytest.approx(8 / 256)
    profile = profile_for("vllm")
    decodes = decode_batch(8, report.context)
    decode_s = step_time_s(dep, decodes, profile)
    mixed_s = step_time_s(dep, [*decodes, Seq(512, 512)], profile)
    assert report.predicted_itl_ms == pytest.approx((decode_s + (mixed_s - decode_s) / 32) * 1e3,
                                                    rel=1e-9)
    assert "512 tokens computed of 1,024 (the rest from the prefix cache)" in \
        report.prompt_work_label


def test_without_a_mean_prompt_length_the_average_step_stays_and_says_why(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A vLLM log gives the two rates but no mean prompt: how many prompts a step starts is
    unknown, so the prediction keeps the step carrying the average prompt tokens, and says so;
    a load whose prompts keep every step busy (one a step at batch 256) is priced so too."""
    obs = read_source(str(FIXTURES / "vllm_server.log"))
    assert obs.mean_prompt_tokens is None
    report = observe_report(obs, llama_8b(), profile_for("vllm"), None)
    assert report.prompt_steps == () and report.prompt_tokens_per_step > 0
    code, out, _ = run_cli(capsys, "observe", str(FIXTURES / "vllm_server.log"), "--model",
                           "llama-3.1-8b", "--gpu", "h100")
    assert code == 0
    assert (f"the {report.prompt_tokens_per_step:,} prompt tokens the load brings per step, on "
            "average: the source gives no mean prompt length to run each prompt in a step of "
            "its own)") in out
    busy = observe_report(Observation("x", "metrics", running=[256.0], mean_prompt_tokens=1024,
                                      mean_output_tokens=256, duration_s=60.0),
                          llama_8b(), profile_for("vllm"), None)
    assert busy.prompt_steps == () and busy.prompts_per_step == pytest.approx(1.0)
    assert busy.prompt_work_label.endswith("on average: its prompts keep every step busy")


def _vllm_scrapes(tmp_path: Path, itl_histogram: bool) -> str:
    """Two vLLM scrapes 10 s apart, 40 then 46 running, three prompt tokens to each one
    generated (so ridgeline prices the window's mean step well past its decodes alone), with
    a 15 ms ITL histogram, or none."""
    text = ""
    for time_s, running, generated, itl_sum_s, itl_count in ((1000, 40, 10000, 0.0, 0),
                                                               (1010, 46, 14000, 60.0, 4000)):
        text += (f"# scrape_time {time_s}\nvllm:num_requests_running {running}\n"
                 "vllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.3\n"
                 f"vllm:generation_tokens_total {generated}\n"
                 f"vllm:prompt_tokens_total {3 * generated}\n")
        if itl_histogram:
            for le in ("0.01", "0.02", "+Inf"):
                text += (f'vllm:inter_token_latency_seconds_bucket{{le="{le}"}} '
                         f"{0 if le == '0.01' else itl_count}\n")
            text += (f"vllm:inter_token_latency_seconds_sum {itl_sum_s}\n"
                     f"vllm:inter_token_latency_seconds_count {itl_count}\n")
    path = tmp_path / f"vllm-{itl_histogram}.prom"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("itl_histogram", [True, False])
def test_a_mixed_window_says_why_it_wrote_no_row_only_where_it_timed_its_tokens(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], itl_histogram: bool) -> None:
    """A mixed load's ITL would read slow as a decode row, the reason --emit-measurements
    gives for writing none; a source with no ITL histogram has no ITL to read slow, so its
    reason is the missing latency, not the prompt work."""
    source = _vllm_scrapes(tmp_path, itl_histogram)
    out_csv = tmp_path / "rows.csv"
    code, out, err = run_cli(capsys, "observe", source, "--model", "llama-3.1-8b", "--gpu",
                             "h100", "--emit-measurements", str(out_csv), "--json")
    assert code == 0, err
    report = observe_report(read_source(source), llama_8b(), profile_for("vllm"), None)
    assert report.mixed_row and not out_csv.exists()
    (why,) = [n for n in json.loads(out)["notes"] if "--emit-measurements wrote nothing" in n]
    assert ("a row would read" in why) is itl_histogram
    assert ("one needs a mean inter-token latency" in why) is not itl_histogram
