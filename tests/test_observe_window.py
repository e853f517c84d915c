"""observe over a window a serving engineer would not trust blindly: a series missing from a
scrape, a restart seen on some counters, a latency under the floor by a little, a bench result
without an ITL or at odds with itself, preemptions the readings did not see, a bad stats line,
and the inputs behind the context in --explain."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engines import profile_for
from ridgeline.floors import decode_floor
from ridgeline.observe import read_source
from ridgeline.observe_bench import COUNTS_AGREE
from ridgeline.reports.observe import ObserveReport, observe_report
from ridgeline.reports.observe_floor import UNIT_GAP
from ridgeline.reports.observe_wall import CAPACITY, CLIENT, PREEMPTED_SHARE, UNKNOWN
from tests.conftest import run_cli

FIXTURES = Path(__file__).parent / "fixtures"
M = 'model_name="m"'
ITL_H = "vllm:inter_token_latency_seconds"


def scrape(t: float, counters: dict[str, float], itl: tuple[float, float] | None = None,
           kv: float = 0.3, running: float = 32) -> str:
    """One timed vLLM scrape: the gauges, the counters given (``vllm:`` left off their names)
    and, if given, an ITL histogram of (observations, seconds each)."""
    lines = [f"# scrape_time {t}", f"vllm:num_requests_running{{{M}}} {running}",
             f"vllm:num_requests_waiting{{{M}}} 0", f"vllm:kv_cache_usage_perc{{{M}}} {kv}"]
    lines += [f"vllm:{name}{{{M}}} {value}" for name, value in counters.items()]
    if itl is not None:
        count, each_s = itl
        lines += [f'{ITL_H}_bucket{{{M},le="0.1"}} {count}',
                  f'{ITL_H}_bucket{{{M},le="+Inf"}} {count}',
                  f"{ITL_H}_count{{{M}}} {count}", f"{ITL_H}_sum{{{M}}} {count * each_s}"]
    return "\n".join(lines) + "\n"


def window(tmp_path: Path, first: str, last: str) -> Path:
    path = tmp_path / "window.prom"
    path.write_text(first + last)
    return path


def tokens(prompt: float, generated: float, requests: float,
           preempted: float = 0) -> dict[str, float]:
    return {"prompt_tokens_total": prompt, "generation_tokens_total": generated,
            "request_success_total": requests, "num_preemptions_total": preempted}


def observe(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    return run_cli(capsys, "observe", *args)


def deployment(model: str = "llama-3.1-8b", num_gpus: int = 1) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator("h100"), None, None,
                            num_gpus)


# 60 s, 60 requests finished: 60,000 prompt and 96,000 output tokens, 96,000 ITL observations
BEFORE = scrape(1000, tokens(100_000, 50_000, 100), (50_000, 0.02))
AFTER = scrape(1060, tokens(160_000, 146_000, 160), (146_000, 0.02))


# -- a series missing from the last scrape ------------------------------------------------------


def test_a_counter_missing_from_the_last_scrape_is_no_rate_and_no_length(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The generation counter is absent from the second scrape: no generation rate (it had read
    0 tok/s) and no mean lengths (it had read a prompt-only context), said in a note."""
    whole = read_source(str(window(tmp_path, BEFORE, AFTER)))
    assert whole.generation_tok_s == pytest.approx(96_000 / 60)
    gone = AFTER.replace(f"vllm:generation_tokens_total{{{M}}} 146000\n", "")
    path = window(tmp_path, BEFORE, gone)
    obs = read_source(str(path))
    assert obs.generation_tok_s is None and obs.prompt_tok_s == whole.prompt_tok_s
    assert obs.mean_prompt_tokens is None and obs.mean_output_tokens is None
    assert any("vllm:generation_tokens_total is missing from scrape 2 of 2" in n
               and "not taken as 0" in n for n in obs.notes)
    report = observe_report(obs, deployment(), profile_for("vllm"), None)
    assert not report.context_source.startswith("mean prompt")  # not the prompt alone
    code, out, _ = observe(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100")
    (rates,) = [line for line in out.splitlines() if line.startswith("prompt ")]
    assert code == 0 and "generation" not in rates


# -- a restart seen on some counters -------------------------------------------------------------


def test_a_restart_seen_on_one_counter_reads_the_run_after_it(tmp_path: Path) -> None:
    """The server restarts mid-window, no process start exported (SGLang's, llama-server's
    pages): its prompt and request counters fall, while the generation counter and the ITL
    histogram climb past their old values by the next scrape. The two scrapes after it are
    read as one run: 96,000 tokens in 60 s, not (48,000 + 96,000) ÷ 120 s counted from zero
    across it, nor the 8,000 between two lifetimes; the histogram's 96,000 observations at
    20 ms, not a difference of two lifetimes (which had been refused)."""
    old = scrape(1000, tokens(100_000, 40_000, 100), (40_000, 0.02))
    old = old.replace(f"{ITL_H}_sum{{{M}}} 800.0", f"{ITL_H}_sum{{{M}}} 2500.0")
    restarted = scrape(1060, tokens(30_000, 48_000, 30), (48_000, 0.02))
    later = scrape(1120, tokens(90_000, 144_000, 90), (144_000, 0.02))
    obs = read_source(str(window(tmp_path, old + restarted, later)))
    assert obs.duration_s == 60
    assert obs.generation_tok_s == pytest.approx((144_000 - 48_000) / 60)
    assert obs.prompt_tok_s == pytest.approx((90_000 - 30_000) / 60)
    assert (obs.mean_prompt_tokens, obs.mean_output_tokens) == (1_000, 1_600)
    assert obs.latency_ms["itl"]["count"] == 144_000 - 48_000
    assert obs.latency_ms["itl"]["mean"] == pytest.approx(20.0)
    (note,) = [n for n in obs.notes if "restarted" in n]
    assert "vllm:prompt_tokens_total, vllm:request_success_total went down" in note
    assert "read the 2 scrapes after it (60 s to 120 s)" in note


def test_one_data_parallel_engine_restarting_leaves_the_others_subtracted(
        tmp_path: Path) -> None:
    """Engine 0's request counter falls, its tokens climb past their old value; engine 1 runs
    on. Engine 0 counts from zero (96,000 tokens), engine 1 its increase (30,000): 63,000
    each over 60 s is 1,050 tok/s per engine."""
    def two(t: float, zero: dict[str, float], one: dict[str, float]) -> str:
        lines = [f"# scrape_time {t}"]
        for engine, values in (("0", zero), ("1", one)):
            lab = f'engine="{engine}",{M}'
            lines += [f"vllm:num_requests_running{{{lab}}} 32",
                      f"vllm:num_requests_waiting{{{lab}}} 0",
                      f"vllm:kv_cache_usage_perc{{{lab}}} 0.3"]
            lines += [f"vllm:{name}{{{lab}}} {value}" for name, value in values.items()]
        return "\n".join(lines) + "\n"

    path = window(tmp_path, two(1000, tokens(100_000, 50_000, 100), tokens(90_000, 40_000, 90)),
                  two(1060, tokens(60_000, 96_000, 60), tokens(120_000, 70_000, 120)))
    obs = read_source(str(path))
    assert obs.engines == 2
    assert obs.generation_tok_s == pytest.approx((96_000 + 30_000) / 2 / 60)
    assert any(n.startswith("engine 0 restarted") for n in obs.notes)
    assert not any(n.startswith("engine 1 restarted") for n in obs.notes)


# -- a series absent from the first scrape -------------------------------------------------------


def test_a_vllm_series_absent_from_the_first_scrape_is_not_read_as_the_window(
        tmp_path: Path) -> None:
    """vLLM exports its histograms and counters from start-up: one absent from the first
    scrape has no start in the window, and its lifetime (here 50,000 tokens at 50 ms beside
    the window's 96,000 at 20 ms) would be read as the window's."""
    lifetime = scrape(1060, tokens(160_000, 146_000, 160))
    lifetime += (f'{ITL_H}_bucket{{{M},le="0.1"}} 146000\n'
                 f'{ITL_H}_bucket{{{M},le="+Inf"}} 146000\n{ITL_H}_count{{{M}}} 146000\n'
                 f"{ITL_H}_sum{{{M}}} {50_000 * 0.05 + 96_000 * 0.02}\n")
    obs = read_source(str(window(tmp_path, scrape(1000, tokens(100_000, 50_000, 100)),
                                 lifetime)))
    assert "itl" not in obs.latency_ms
    assert any(n.startswith(f"{ITL_H} is missing from the first scrape") for n in obs.notes)
    no_counter = scrape(1000, tokens(100_000, 50_000, 100)).replace(
        f"vllm:generation_tokens_total{{{M}}} 50000\n", "")
    obs = read_source(str(window(tmp_path, no_counter, AFTER)))
    assert obs.generation_tok_s is None and obs.mean_output_tokens is None
    assert any("vllm:generation_tokens_total is missing from the first scrape" in n
               for n in obs.notes)


SGLANG_HEAD = ('sglang:num_running_reqs{model_name="m"} 60\n'
               'sglang:num_queue_reqs{model_name="m"} 0\n'
               'sglang:token_usage{model_name="m"} 0.5\n')
TRTLLM_HEAD = ('trtllm_num_requests_running{model_name="m"} 48\n'
               'trtllm_num_requests_waiting{model_name="m"} 0\n'
               'trtllm_kv_cache_utilization{model_name="m"} 0.4\n')


@pytest.mark.parametrize(("head", "counter"), [
    (SGLANG_HEAD, "sglang:generation_tokens_total"),
    (TRTLLM_HEAD, "trtllm_generation_tokens_total")])
def test_a_counter_absent_from_the_first_scrape_is_not_read_whatever_the_engine(
        tmp_path: Path, head: str, counter: str) -> None:
    """SGLang and TensorRT-LLM make a labelled series at its first increment, but a series
    the first scrape lacks has no known start: its 150,000 tokens may be the server's
    lifetime. Not read, as vLLM's is not, and said so."""
    path = tmp_path / "fresh.prom"
    path.write_text(f"# scrape_time 1000\n{head}# scrape_time 1100\n{head}"
                    f'{counter}{{model_name="m"}} 150000\n')
    obs = read_source(str(path))
    assert obs.generation_tok_s is None
    assert any(n.startswith(f"{counter} is missing from the first scrape: the window has no "
                            "start for it") for n in obs.notes)
    assert not any("first appears mid-window" in n for n in obs.notes)


@pytest.mark.parametrize("started", [900, 1150])
def test_a_late_counter_of_a_server_started_inside_the_window_counts_from_zero(
        tmp_path: Path, started: float) -> None:
    """process_start_time_seconds at 1,050 puts the server's start inside the 1,000-1,100 s
    window: all it counted is the window's, 150,000 tokens over 100 s. A start before the
    window (900), or after the scrape that carries it (1,150: the clocks disagree), does not."""
    def fresh(start: float) -> Path:
        path = tmp_path / "fresh.prom"
        path.write_text(f"# scrape_time 1000\n{SGLANG_HEAD}# scrape_time 1100\n{SGLANG_HEAD}"
                        'sglang:generation_tokens_total{model_name="m"} 150000\n'
                        f"process_start_time_seconds {start}\n")
        return path

    obs = read_source(str(fresh(1050)))
    assert obs.generation_tok_s == pytest.approx(150_000 / 100)
    assert any(n.startswith("sglang:generation_tokens_total first appears mid-window, after "
                            "the server's process started 50 s into it") for n in obs.notes)
    assert read_source(str(fresh(started))).generation_tok_s is None


def test_a_label_value_born_mid_window_is_no_increase_of_the_summed_counter(
        tmp_path: Path) -> None:
    """TensorRT-LLM counts finished requests by reason, each reason's series made at its
    first such request. A "length" series that appears with 40 is no 40 finished in the
    window: the request count, and the mean lengths read from it, are not read."""
    def page(t: float, stop: float, length: float | None) -> str:
        return (f"# scrape_time {t}\n{TRTLLM_HEAD}"
                f'trtllm_prompt_tokens_total{{model_name="m"}} {stop * 1000}\n'
                f'trtllm_generation_tokens_total{{model_name="m"}} {stop * 200}\n'
                f'trtllm_request_success_total{{model_name="m",finished_reason="stop"}} {stop}\n'
                + ("" if length is None else 'trtllm_request_success_total{model_name="m",'
                   f'finished_reason="length"}} {length}\n'))

    path = tmp_path / "reasons.prom"
    path.write_text(page(1000, 100, 5) + page(1060, 160, 5))
    obs = read_source(str(path))
    assert obs.finished_requests == 60 and obs.mean_output_tokens == pytest.approx(200)
    path.write_text(page(1000, 100, None) + page(1060, 160, 40))
    obs = read_source(str(path))
    assert obs.finished_requests is None and obs.mean_output_tokens is None
    assert obs.generation_tok_s == pytest.approx(60 * 200 / 60)  # its own series spans it
    assert any(n.startswith("trtllm_request_success_total (finished_reason=length) is "
                            "missing from the first scrape") for n in obs.notes)


def test_a_process_start_that_moves_is_a_restart_though_no_counter_fell(
        tmp_path: Path) -> None:
    """The server restarts and its counters pass their old values by the next scrape: only
    process_start_time_seconds moving says so. The run after it is read: 120,000 tokens in
    60 s, not the 50,000 between two lifetimes, nor (200,000 + 120,000) ÷ 120 s counted from
    zero across the restart."""
    before = scrape(1000, tokens(100_000, 150_000, 100)) + "process_start_time_seconds 500\n"
    after = scrape(1060, tokens(110_000, 200_000, 110)) + "process_start_time_seconds 1030\n"
    later = scrape(1120, tokens(170_000, 320_000, 170)) + "process_start_time_seconds 1030\n"
    obs = read_source(str(window(tmp_path, before + after, later)))
    assert obs.generation_tok_s == pytest.approx((320_000 - 200_000) / 60)
    (note,) = [n for n in obs.notes if "restarted" in n]
    assert note.startswith("the server restarted 30 s into the window "
                           "(process_start_time_seconds 500 → 1,030), between the scrapes 0 s "
                           "and 60 s into the window: read the 2 scrapes after it")
    same = after.replace("process_start_time_seconds 1030", "process_start_time_seconds 500")
    assert read_source(str(window(tmp_path, before, same))).generation_tok_s == \
        pytest.approx(50_000 / 60)


# -- a latency under the floor by a little, and a pool that cannot hold the batch --------------


def test_a_latency_just_under_the_floor_is_flagged_and_the_pool_misfit_cautioned(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The window (32 running, 20 ms a token, 1,800-token requests) described as 70B bf16 on
    two H100s: its floor is a little above 20 ms — under the old 0.9 margin, so unflagged —
    and the modelled pool holds a few of the 32 running at 1,800 tokens. Both say the
    deployment described is not the one that runs."""
    path = window(tmp_path, BEFORE, AFTER)
    obs = read_source(str(path))
    dep = deployment("llama-3.1-70b", 2)
    report = observe_report(obs, dep, profile_for("vllm"), None)
    floor_ms = decode_floor(dep, 32, report.context).step_time_s * 1e3
    measured = obs.latency_ms["itl"]["mean"]
    assert 0.9 * floor_ms < measured < floor_ms
    assert report.floor_itl_ms == pytest.approx(floor_ms) and report.below_floor
    counted = ObserveReport(obs, dep, profile_for("vllm"), 1_800, "")
    assert report.unheld_mean == (1_800, counted.pool_batch) and counted.pool_batch < 32
    code, out, _ = observe(capsys, str(path), "--model", "llama-3.1-70b", "--gpu", "h100",
                           "--num-gpus", "2")
    assert code == 0
    assert f"caution: the measured {measured:,.1f} ms a token is under the {floor_ms:,.1f} ms" \
        in out
    assert (f"at the counters' mean of 1,800 tokens a request, the KV pool modelled for "
            f"llama-3.1-70b on 2 x h100-sxm with bf16 weights holds only "
            f"{counted.pool_batch:,} of the 32.0 running") in out
    # described as the 8B it is: neither caution (its modelled pool's fill, over twice the
    # counters' mean it keeps, is cautioned apart)
    code, out, _ = observe(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100")
    cautions = [line for line in out.splitlines() if line.startswith("caution:")
                and not line.startswith("caution: the engine labels")
                and "which the figures above use" not in line]
    assert code == 0 and not cautions


def test_a_misdescribed_deployment_gets_no_percentage_against_its_prediction(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The 8B's window described as 70B on two H100s runs under that deployment's floor: a
    prediction for the 70B against the 8B's 20 ms measures the description ("+107%"). The
    text and --json keep the prediction and the measurement but set no percentage between
    them, saying why, and --emit-measurements writes no row pricing the wrong deployment."""
    path = window(tmp_path, BEFORE, AFTER)
    obs = read_source(str(path))
    report = observe_report(obs, deployment("llama-3.1-70b", 2), profile_for("vllm"), None)
    assert report.below_floor and "itl" in report.gaps()  # a comparison there is to withhold
    argv = [str(path), "--model", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "2"]
    code, out, _ = observe(capsys, *argv)
    (line,) = [ln for ln in out.splitlines() if ln.startswith("ridgeline predicts")]
    assert code == 0 and f"{report.predicted_itl_ms:,.1f} ms per token" in line
    assert "measured 20.0 ms: not compared, the measurement is under the floor" in line
    assert "%" not in line
    code, out, _ = observe(capsys, *argv, "--json")
    data = json.loads(out)
    assert data["gap"] == {} and data["gap_not_comparable"].startswith(
        "the measurement is under the floor of the deployment described")
    assert data["predicted_itl_s"] * 1e3 == pytest.approx(report.predicted_itl_ms)
    assert data["latency_s"]["itl"]["mean"] == pytest.approx(20.0 / 1e3)
    rows = tmp_path / "rows.csv"
    code, out, _ = observe(capsys, *argv, "--emit-measurements", str(rows))
    assert code == 0 and not rows.exists() and "wrote nothing" in out
    # described as the 8B it is: compared, and the row written
    argv = [str(path), "--model", "llama-3.1-8b", "--gpu", "h100"]
    code, out, _ = observe(capsys, *argv, "--json")
    data = json.loads(out)
    assert "itl" in data["gap"] and data["gap_not_comparable"] is None
    code, out, _ = observe(capsys, *argv, "--emit-measurements", str(rows))
    assert code == 0 and len(rows.read_text().splitlines()) == 2


def test_a_pool_that_cannot_hold_the_batch_sets_no_percentage_either(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """20,000-token prompts: the 8B's modelled pool holds fewer than the 32 running, the
    description cautioned though the 20 ms clears its floor. The prediction is not compared."""
    long = scrape(1060, tokens(100_000 + 60 * 20_000, 146_000, 160), (146_000, 0.02))
    path = window(tmp_path, BEFORE, long)
    report = observe_report(read_source(str(path)), deployment(), profile_for("vllm"), None)
    assert report.unheld_mean is not None and not report.below_floor and report.gaps()
    code, out, _ = observe(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100",
                           "--json")
    data = json.loads(out)
    assert code == 0 and data["gap"] == {}
    assert data["gap_not_comparable"].startswith("the pool modelled for the deployment "
                                                 "described cannot hold the running batch")
    assert any(c.startswith("at the counters' mean of") for c in data["cautions"])


# -- benchmark results -----------------------------------------------------------------------


def bench(tmp_path: Path, **changes: object) -> Path:
    data = {**json.loads((FIXTURES / "vllm_bench.json").read_text()), **changes}
    data = {k: v for k, v in data.items() if v is not None}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data))
    return path


NO_ITL = {f"{stat}_{family}_ms": None for stat in ("mean", "median", "std", "p99")
          for family in ("itl", "tpot")}


def test_a_bench_without_itl_reads_its_batch_by_littles_law_on_requests(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No ITL or TPOT: requests per second × the time each spends decoding (end-to-end less
    TTFT) is the batch, and the client's cap of 64 is the wall — not '0 of 388 sequences'."""
    data = json.loads((FIXTURES / "vllm_bench.json").read_text())
    path = bench(tmp_path, **NO_ITL)
    obs = read_source(str(path))
    expected = data["request_throughput"] * (data["mean_e2el_ms"] - data["mean_ttft_ms"]) / 1e3
    assert obs.batch == pytest.approx(expected)
    report = observe_report(obs, deployment(), profile_for("vllm"), None)
    assert report.wall == CLIENT
    code, out, _ = observe(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 0 and " 0 of " not in out and "no running batch" not in out
    assert "Little's law on requests" in out and f"batch {expected:,.1f}" in out
    # neither an ITL nor an end-to-end latency: the batch, and so the wall, are unknown
    path = bench(tmp_path, **NO_ITL, mean_e2el_ms=None, median_e2el_ms=None, std_e2el_ms=None,
                 p99_e2el_ms=None)
    report = observe_report(read_source(str(path)), deployment(), profile_for("vllm"), None)
    assert report.batch is None and report.wall == UNKNOWN
    code, out, _ = observe(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 0 and "wall: unknown" in out and "at most 64 requests" in out
    assert " 0 of " not in out


def test_a_bench_timing_gaps_between_tokens_it_has_none_of_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = bench(tmp_path, total_output_tokens=0, output_throughput=0)
    code, out, err = observe(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert f"{path}: total_output_tokens is 0, yet the mean time between" in err


@pytest.mark.parametrize(("field", "factor"), [("output_throughput", 10.0),
                                               ("request_throughput", 0.5)])
def test_a_bench_whose_rates_are_not_its_counts_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, factor: float) -> None:
    data = json.loads((FIXTURES / "vllm_bench.json").read_text())
    path = bench(tmp_path, **{field: data[field] * factor})
    code, out, err = observe(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert f"{field} is {data[field] * factor:,.1f}" in err and "contradicts itself" in err
    # within COUNTS_AGREE (a duration rounded in the file) it reads
    assert read_source(str(bench(tmp_path, **{field: data[field] * (1 + COUNTS_AGREE / 2)})))


def test_a_bench_batch_past_the_clients_cap_is_read_as_the_cap(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "vllm_bench.json").read_text())
    cap = 32
    assert data["output_throughput"] * data["mean_itl_ms"] / 1e3 > cap * (1 + COUNTS_AGREE)
    obs = read_source(str(bench(tmp_path, max_concurrency=cap)))
    assert obs.batch == cap
    assert any(n.startswith("caution: output tok/s × mean ITL gives a batch of")
               for n in obs.notes)


def test_a_bench_itl_in_seconds_under_ms_names_gets_a_unit_caution(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads((FIXTURES / "vllm_bench.json").read_text())
    seconds = {k: v / 1e3 for k, v in data.items()
               if re.fullmatch(r"(mean|median|std|p99)_(itl|tpot)_ms", k)}
    path = bench(tmp_path, **seconds)
    report = observe_report(read_source(str(path)), deployment(), profile_for("vllm"), None)
    assert report.floor_itl_ms is not None
    assert report.measured_itl_ms is not None
    assert report.measured_itl_ms < UNIT_GAP * report.floor_itl_ms and report.unit_suspect
    code, out, _ = observe(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 0 and "likely seconds" in out
    assert f"(× 1,000: {data['mean_itl_ms']:,.1f} ms)" in out
    # the batch read from that ITL sets no wall and no share: said, not "0 of 388" and "0.0%"
    assert report.wall == UNKNOWN and "wall: unknown — the running batch, output tok/s × a " \
        "mean ITL whose unit is in doubt" in out
    assert " 0 of " not in out and "0.0%" not in out and "no share of the arithmetic" in out
    assert f"ITL/TPOT    mean {data['mean_itl_ms'] / 1e3:.2g} ms" in out  # not "0.0 ms"
    rows = tmp_path / "rows.csv"
    code, out, _ = observe(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100",
                           "--emit-measurements", str(rows))
    assert code == 0 and not rows.exists() and "unit is in doubt" in out
    clean = observe_report(read_source(str(FIXTURES / "vllm_bench.json")), deployment(),
                           profile_for("vllm"), None)
    assert not clean.unit_suspect and not clean.below_floor and clean.wall != UNKNOWN


def test_a_bench_batch_under_half_a_sequence_is_not_shown_as_0(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """10.7 output tok/s at 28 ms a token: a mean batch of 0.3, which the wall's lever says,
    not '0 of the 388 sequences its pool holds'."""
    data = json.loads((FIXTURES / "vllm_bench.json").read_text())
    rate = 10.7
    path = bench(tmp_path, output_throughput=rate,
                 total_output_tokens=round(rate * data["duration"]))
    report = observe_report(read_source(str(path)), deployment(), profile_for("vllm"), None)
    assert report.batch == pytest.approx(rate * data["mean_itl_ms"] / 1e3)
    code, out, _ = observe(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 0 and f"({report.batch:,.1f} of the {report.pool_batch:,} sequences" in out
    assert " 0 of " not in out


# -- preemptions the readings did not see --------------------------------------------------------


def test_one_preemption_beside_a_roomy_pool_is_not_the_capacity_wall(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every reading shows the pool 30% full. One preemption among 60 finished requests is a
    burst between readings, noted; one in twenty or more is the pool filling, said so."""
    rare = window(tmp_path, BEFORE, AFTER.replace(f"vllm:num_preemptions_total{{{M}}} 0",
                                                  f"vllm:num_preemptions_total{{{M}}} 1"))
    obs = read_source(str(rare))
    assert obs.preemptions == 1 and obs.finished_requests == 60
    report = observe_report(obs, deployment(), profile_for("vllm"), None)
    assert report.wall != CAPACITY
    code, out, _ = observe(capsys, str(rare), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 0 and "wall: neither" in out
    assert "caution: 1 preemption in the window against 60 finished requests, though the " \
        "readings saw the KV pool at most 30% full" in out
    often = round(PREEMPTED_SHARE * 60)
    path = tmp_path / "often.prom"
    path.write_text(BEFORE + AFTER.replace(f"vllm:num_preemptions_total{{{M}}} 0",
                                           f"vllm:num_preemptions_total{{{M}}} {often}"))
    report = observe_report(read_source(str(path)), deployment(), profile_for("vllm"), None)
    assert report.wall == CAPACITY
    assert report.lever.startswith(f"the KV pool filled between readings: {often} preemptions "
                                   "against 60 finished requests, though the readings saw it "
                                   "at most 30% full")
    full = window(tmp_path, BEFORE, AFTER.replace(f"vllm:kv_cache_usage_perc{{{M}}} 0.3",
                                                  f"vllm:kv_cache_usage_perc{{{M}}} 0.95"))
    report = observe_report(read_source(str(full)), deployment(), profile_for("vllm"), None)
    assert report.wall == CAPACITY and report.lever.startswith("the KV pool is full")


# -- bad input names its file and line -------------------------------------------------------


STATS = ("INFO 11-29 12:00:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: "
         "{prompt} tokens/s, Avg generation throughput: 612.4 tokens/s, Running: 24 reqs, "
         "Waiting: 0 reqs, GPU KV cache usage: 31.2%, Prefix cache hit rate: 0.0%\n")


@pytest.mark.parametrize(("prompt", "message"), [
    ("-2048.0", "line 2: Avg prompt throughput is -2048"),
    ("abc", "line 2: 'INFO 11-29 12:00:10"),
])
def test_a_bad_value_in_a_vllm_stats_line_names_the_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], prompt: str, message: str) -> None:
    path = tmp_path / "server.log"
    path.write_text(STATS.format(s=0, prompt="2048.0") + STATS.format(s=10, prompt=prompt))
    code, out, err = observe(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert f"{path}, {message}" in err and "Prometheus" not in err


def test_an_empty_or_broken_scrape_file_is_named_in_its_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    code, _, err = observe(capsys, str(empty), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 2 and err.startswith(f"ridgeline: error: {empty}: no Prometheus samples")
    broken = tmp_path / "broken.prom"
    broken.write_text(scrape(1000, {}).replace(
        "# scrape_time 1000\n", "") + f'{ITL_H}_bucket{{le="0.01"}} 100\n'
        f'{ITL_H}_bucket{{le="0.1"}} 50\n{ITL_H}_bucket{{le="+Inf"}} 100\n'
        f"{ITL_H}_count 100\n{ITL_H}_sum 1\n")
    code, _, err = observe(capsys, str(broken), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 2 and f"{broken}: {ITL_H}_bucket falls" in err


# -- --explain shows what the context is made of ----------------------------------------------


def test_explain_shows_the_inputs_of_the_context(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = window(tmp_path, BEFORE, AFTER)
    obs = read_source(str(path))
    prompt, output, n = obs.mean_prompt_tokens, obs.mean_output_tokens, obs.finished_requests
    assert prompt is not None and output is not None and n is not None
    code, out, _ = observe(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100",
                           "--explain")
    assert code == 0
    assert (f"mean prompt = {prompt:,.0f} tokens  [{prompt * n:,.0f} prompt tokens ÷ {n:,.0f} "
            "requests finished in the window") in out
    assert f"mean output = {output:,.0f} tokens  [{output * n:,.0f} output tokens" in out
    assert f"=> context = {int(prompt + output / 2):,} tokens" in out
    # read off the KV fill: its usage, pool and running requests
    code, out, _ = observe(capsys, str(FIXTURES / "vllm_server.log"), "--model", "llama-3.1-8b",
                           "--gpu", "h100", "--explain")
    assert code == 0
    block = out[out.index("tokens each running request holds"):]
    block = block[:block.index("=>")]
    assert "KV usage × the pool's tokens ÷ running requests" in block
    assert "KV usage = " in block and "pool = " in block and "running = " in block


def test_sglangs_scheduler_seconds_falling_is_a_restart(tmp_path: Path) -> None:
    """SGLang exports no process start. It restarts between the first two scrapes and its
    token counters pass their old values by the second; its scheduler's CPU seconds (0.5.20
    on) fall from 3,000 to 40: a restart, so the two scrapes after it are read (60,000 tokens
    in 60 s), not the 5,000 between two lifetimes."""
    lab = 'model_name="m",tp_rank="0",pp_rank="0",moe_ep_rank="0"'

    def sglang(t: float, generated: float, cpu_s: float) -> str:
        return "\n".join([f"# scrape_time {t}", f"sglang:num_running_reqs{{{lab}}} 8",
                          f"sglang:num_queue_reqs{{{lab}}} 0", f"sglang:token_usage{{{lab}}} 0.2",
                          f"sglang:generation_tokens_total{{{lab}}} {generated}",
                          f"sglang:scheduler_process_cpu_seconds_total{{{lab}}} {cpu_s}"]) + "\n"

    path = tmp_path / "sglang.prom"
    path.write_text(sglang(1000, 20_000, 3_000) + sglang(1060, 25_000, 40)
                    + sglang(1120, 85_000, 80))
    obs = read_source(str(path))
    assert obs.duration_s == 60
    assert obs.generation_tok_s == pytest.approx((85_000 - 25_000) / 60)
    (note,) = [n for n in obs.notes if "restarted" in n]
    assert "sglang:scheduler_process_cpu_seconds_total went down" in note
