"""observe on data-parallel engines, prefix caches, swapped requests and the pool an engine
reports: each series read per engine, as Prometheus' own rate() reads it."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from ridgeline.cli import main
from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile
from ridgeline.observe import from_log, from_scrapes, read_source
from ridgeline.prometheus import split_scrapes

MODEL = 'model_name="meta-llama/Llama-3.1-8B-Instruct"'
EDGES = (0.01, 0.025, 0.05, 0.1)


def series(name: str, engine: str, value: float, extra: str = "") -> str:
    return f'{name}{{engine="{engine}",{MODEL}{extra}}} {value}'


def itl(engine: str, observations: float, seconds: float) -> list[str]:
    """An ITL histogram of ``observations`` all at ``seconds`` (cumulative buckets)."""
    lines = [series("vllm:inter_token_latency_seconds_bucket", engine,
                    observations if seconds <= edge else 0, f',le="{edge}"') for edge in EDGES]
    lines.append(series("vllm:inter_token_latency_seconds_bucket", engine, observations,
                        ',le="+Inf"'))
    lines.append(series("vllm:inter_token_latency_seconds_sum", engine, observations * seconds))
    lines.append(series("vllm:inter_token_latency_seconds_count", engine, observations))
    return lines


def scrape(time_s: float, engines: dict[str, dict[str, float]]) -> str:
    lines = [f"# scrape_time {time_s}"]
    for engine, values in engines.items():
        for name, value in values.items():
            if name == "itl":
                continue
            lines.append(series(name, engine, value))
        if "itl" in values:
            lines += itl(engine, values["itl"], 0.03)
    return "\n".join(lines) + "\n"


def gauges(running: float, waiting: float, kv: float) -> dict[str, float]:
    return {"vllm:num_requests_running": running, "vllm:num_requests_waiting": waiting,
            "vllm:kv_cache_usage_perc": kv}


def test_one_engine_restarting_counts_only_its_own_tokens_from_zero() -> None:
    """Engine 1 restarts mid-window: its lifetime 1M tokens fall to 30k. Summed first, the
    drop had read as a restart of both, counting engine 0's whole lifetime in the window."""
    text = scrape(1764500000, {
        "0": {**gauges(40, 0, 0.5), "vllm:generation_tokens_total": 1_000_000},
        "1": {**gauges(40, 0, 0.5), "vllm:generation_tokens_total": 1_000_000}})
    text += scrape(1764500060, {
        "0": {**gauges(40, 0, 0.5), "vllm:generation_tokens_total": 1_060_000},
        "1": {**gauges(40, 0, 0.5), "vllm:generation_tokens_total": 30_000}})
    obs = from_scrapes(split_scrapes(text), "t")
    assert obs.engines == 2
    assert obs.generation_tok_s == pytest.approx((60_000 + 30_000) / 60 / 2)
    assert any("restart" in n for n in obs.notes)


def test_every_engine_restarting_is_the_servers_restart_and_its_run_after_it_read() -> None:
    """Both engines' counters fall between the first and second scrapes, no process start
    exported: the server restarted, and the two scrapes after it are read (60,000 tokens an
    engine in 60 s), not each engine counted from zero across it (90,000 in 120 s)."""
    def both(t: int, tokens: float) -> str:
        return scrape(t, {e: {**gauges(40, 0, 0.5), "vllm:generation_tokens_total": tokens}
                          for e in ("0", "1")})
    obs = from_scrapes(split_scrapes(both(1764500000, 1_000_000) + both(1764500060, 30_000)
                                     + both(1764500120, 90_000)), "t")
    assert obs.duration_s == 60
    assert obs.generation_tok_s == pytest.approx((90_000 - 30_000) / 60)
    assert any(n.startswith("the server restarted between the scrapes 0 s and 60 s") and
               "read the 2 scrapes after it" in n for n in obs.notes)


def test_one_engine_restarting_keeps_the_others_histogram_window() -> None:
    """Every observation in the window is 30 ms; engine 0's lifetime histogram (at 10 ms)
    must not leak in when engine 1 restarts."""
    first = scrape(1764500000, {"0": {**gauges(40, 0, 0.5)}, "1": {**gauges(40, 0, 0.5)}})
    first += "\n".join(itl("0", 1000, 0.01) + itl("1", 1000, 0.01)) + "\n"
    second = scrape(1764500060, {"0": {**gauges(40, 0, 0.5)}, "1": {**gauges(40, 0, 0.5)}})
    later = itl("0", 1000, 0.01)  # engine 0: 1000 at 10 ms, then 500 more at 30 ms
    later = [line.replace('le="0.025"} 1000', 'le="0.025"} 1000')
             for line in later]
    engine0 = [series("vllm:inter_token_latency_seconds_bucket", "0", c, f',le="{e}"')
               for e, c in ((0.01, 1000), (0.025, 1000), (0.05, 1500), (0.1, 1500))]
    engine0 += [series("vllm:inter_token_latency_seconds_bucket", "0", 1500, ',le="+Inf"'),
                series("vllm:inter_token_latency_seconds_sum", "0", 10 + 15),
                series("vllm:inter_token_latency_seconds_count", "0", 1500)]
    second += "\n".join(engine0 + itl("1", 200, 0.03)) + "\n"  # engine 1 restarted
    obs = from_scrapes(split_scrapes(first + second), "t")
    assert obs.latency_ms["itl"]["mean"] == pytest.approx(30.0)
    assert obs.latency_ms["itl"]["count"] == pytest.approx(700)


def test_the_wall_is_the_fullest_engines_not_the_mean() -> None:
    """Engine 0 is full with a queue, engine 1 half empty: averaged, 69 % and 3 waiting had
    read as the latency wall ('raise --max-num-seqs'); engine 0's own pool is the wall."""
    text = scrape(1764500000, {"0": gauges(90, 6, 0.98), "1": gauges(70, 0, 0.40)})
    text += scrape(1764500060, {"0": gauges(90, 6, 0.98), "1": gauges(70, 0, 0.40)})
    path_obs = from_scrapes(split_scrapes(text), "t")
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.engines import profile_for
    from ridgeline.reports.observe import observe_report
    from ridgeline.reports.observe_wall import CAPACITY, LATENCY

    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"))
    report = observe_report(path_obs, dep, profile_for("vllm"), 2000)
    assert max(path_obs.kv_usage) == pytest.approx(0.69)  # the table's mean stays the mean
    assert report.wall == CAPACITY
    # the same queue on an engine with room is the latency wall
    roomy = scrape(1764500000, {"0": gauges(90, 6, 0.50), "1": gauges(70, 0, 0.85)})
    roomy += scrape(1764500060, {"0": gauges(90, 6, 0.50), "1": gauges(70, 0, 0.85)})
    obs = from_scrapes(split_scrapes(roomy), "t")
    assert observe_report(obs, dep, profile_for("vllm"), 2000).wall == LATENCY


def test_preemptions_are_the_engines_total(capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    text = scrape(1764500000, {"0": {**gauges(40, 0, 0.5), "vllm:num_preemptions_total": 3},
                               "1": {**gauges(40, 0, 0.5), "vllm:num_preemptions_total": 0}})
    text += scrape(1764500060, {"0": {**gauges(40, 0, 0.5), "vllm:num_preemptions_total": 4},
                                "1": {**gauges(40, 0, 0.5), "vllm:num_preemptions_total": 0}})
    path = tmp_path / "m.prom"
    path.write_text(text)
    assert main(["observe", str(path), "--model", "llama-3.1-8b", "--gpu", "h100",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["preemptions"] == 1 and data["data_parallel_size"] == 2 and data["wall"] == "capacity"


def prefix_load(hits: float) -> str:
    """64 running at half the pool; the lifetime counters say 20k-token prompts, most of
    them a shared prefix the cache holds once."""
    def at(t: float, scale: float) -> dict[str, float]:
        return {**gauges(64, 0, 0.5), "vllm:prompt_tokens_total": 2_400_000 * scale,
                "vllm:prefix_cache_hits_total": 2_400_000 * scale * hits,
                "vllm:generation_tokens_total": 120_000 * scale,
                "vllm:request_success_total": 120 * scale}
    return (scrape(1764500000, {"0": at(0, 1.0)})
            + scrape(1764500060, {"0": at(60, 2.0)})).replace('engine="0",', "")


def test_prefix_cache_hits_are_not_prompt_work_and_the_live_fill_wins() -> None:
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.engines import profile_for
    from ridgeline.reports.observe import observe_report

    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"))
    cached = observe_report(from_scrapes(split_scrapes(prefix_load(0.9)), "t"), dep,
                            profile_for("vllm"), None)
    plain = observe_report(from_scrapes(split_scrapes(prefix_load(0.0)), "t"), dep,
                           profile_for("vllm"), None)
    assert cached.obs.cached_prompt_share == pytest.approx(0.9)
    # 40,000 prompt tok/s ÷ 2,000 generated = 20 per decode; a tenth of them computed
    assert plain.prompt_tokens_per_step == 64 * 20
    assert cached.prompt_tokens_per_step == 64 * 2
    # the counters' 20,000-token mean would hold fewer than the 64 running: the fill is read
    assert cached.context < 20_000 and "KV cache's fill" in cached.context_source
    assert cached.pool_batch >= 64


def test_a_single_scrape_sets_no_gap(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "one.prom"
    path.write_text(scrape(1764500000, {"0": {**gauges(32, 0, 0.25), "itl": 500}})
                    .replace('engine="0",', ""))
    assert main(["observe", str(path), "--model", "llama-3.1-8b", "--gpu", "h100",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gap"] == {} and data["predicted_itl_s"] > 0


def test_swapped_requests_are_the_capacity_wall(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM V0 swaps requests to CPU memory when the pool runs out."""
    path = tmp_path / "v0.prom"
    path.write_text(scrape(1764500000, {"0": {**gauges(120, 0, 0.87),
                                              "vllm:num_requests_swapped": 14}})
                    .replace('engine="0",', "").replace("kv_cache_usage_perc",
                                                        "gpu_cache_usage_perc"))
    assert main(["observe", str(path), "--model", "llama-3.1-8b", "--gpu", "h100"]) == 0
    out = capsys.readouterr().out
    assert "wall: capacity" in out and "swapped" in out
    log = ("INFO 03-01 10:00:00 metrics.py:345] Avg prompt throughput: 100.0 tokens/s, Avg "
           "generation throughput: 900.0 tokens/s, Running: 120 reqs, Swapped: 14 reqs, "
           "Pending: 0 reqs, GPU KV cache usage: 87.0%, CPU KV cache usage: 3.0%.\n")
    assert from_log(log, "t").swapped == [14]


def test_per_engine_log_lines_are_counted_as_engines() -> None:
    line = ("(APIServer pid=1) INFO 11-02 10:00:{s:02d} [loggers.py:123] Engine 00{e}: Avg "
            "prompt throughput: 8000.0 tokens/s, Avg generation throughput: 2000.0 tokens/s, "
            "Running: 60 reqs, Waiting: 0 reqs, GPU KV cache usage: 40.0%, Prefix cache hit "
            "rate: 50.0%\n")
    obs = from_log("".join(line.format(s=s, e=e) for s in (0, 10) for e in (0, 1)), "t")
    assert obs.engines == 2 and obs.generation_tok_s == 2000
    assert obs.cached_prompt_share is None  # the logged prompt rate is computed tokens
    assert any("prefix cache hit rate 50%" in n for n in obs.notes)


def test_a_benchmark_at_its_client_cap_says_so(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({
        "duration": 100.0, "completed": 1000, "total_input_tokens": 1_000_000,
        "total_output_tokens": 250_000, "output_throughput": 2500.0, "max_concurrency": 64,
        "mean_tpot_ms": 23.0, "mean_itl_ms": 23.0, "mean_ttft_ms": 150.0}))
    assert main(["observe", str(path), "--model", "llama-3.1-8b", "--gpu", "h100"]) == 0
    out = capsys.readouterr().out
    assert "wall: the client's cap" in out and "--max-concurrency" in out


def test_the_pool_an_engine_reports_sizes_the_batch() -> None:
    """vLLM's cache_config_info names its blocks: 10,000 blocks of 16 hold 39 sequences of
    4,096 tokens (256 blocks each), whatever the model of the deployment says."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.engines import profile_for
    from ridgeline.reports.observe import observe_report

    info = ('vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="10000",'
            'gpu_memory_utilization="0.9"} 1.0\n')
    text = scrape(1764500000, {"0": gauges(8, 0, 0.1)}).replace('engine="0",', "") + info
    obs = from_scrapes(split_scrapes(text), "t")
    assert obs.pool_tokens == 160_000 and obs.pool_block_size == 16
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"))
    report = observe_report(obs, dep, profile_for("vllm"), 4096)
    assert report.pool_batch == 10_000 // 256


def test_read_source_accepts_the_files_written_here(tmp_path: Path) -> None:
    path = tmp_path / "w.prom"
    path.write_text(prefix_load(0.5))
    assert read_source(str(path)).cached_prompt_share == pytest.approx(0.5)


def test_prefix_hits_past_the_prompt_tokens_are_not_read() -> None:
    """vLLM's prompt counter includes cached tokens: hits beyond it are counters from
    different sources, and pricing nothing as computed would hide the prompt work."""
    def at(t: float, prompt: float, hits: float) -> str:
        return scrape(t, {"0": {**gauges(64, 0, 0.5), "vllm:prompt_tokens_total": prompt,
                                "vllm:prefix_cache_hits_total": hits,
                                "vllm:generation_tokens_total": t}}).replace('engine="0",', "")

    obs = from_scrapes(split_scrapes(at(1764500000, 1e6, 0) + at(1764500060, 1.24e6, 2.16e6)),
                       "t")
    assert obs.cached_prompt_share is None
    assert any("outrun the prompt tokens" in n and "9.0×" in n for n in obs.notes)


def cache_info(blocks: int, engine: str = "0") -> str:
    """vLLM's cache_config_info: the pool it profiled, as labels (blocks of 16 tokens); one
    engine's, as a server of several writes their sum on each (test_observe_engine_facts)."""
    return (f'vllm:cache_config_info{{block_size="16",engine="{engine}",'
            f'num_gpu_blocks="{blocks}"}} 1.0\n')


def vllm_8b() -> tuple[Deployment, EngineProfile]:
    from ridgeline import resolve_accelerator, resolve_model
    from ridgeline.engines import profile_for

    return (Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100")),
            profile_for("vllm"))


def test_a_reported_pool_is_capped_at_the_engines_seats() -> None:
    """432,000 reported tokens hold 3,857 sequences of 100 tokens (7 blocks each), but vllm
    serve seats 1,024 on an H100, as the modelled pool is capped; SGLang's 400,000 tokens
    hold 40,000 of 10, its max_running_requests 4,096."""
    from ridgeline.reports.observe import observe_report

    dep, profile = vllm_8b()
    text = scrape(1764500000, {"0": gauges(32, 0, 0.1)}) + cache_info(27_000)
    report = observe_report(from_scrapes(split_scrapes(text), "t"), dep, profile, 100)
    assert report.pool_batch == 1_024 < 27_000 // 7
    assert report.seats == 1_024
    sglang = ('sglang:num_running_reqs{tp_rank="0"} 32\n'
              'sglang:max_total_num_tokens{tp_rank="0"} 400000\n')
    from dataclasses import replace

    from ridgeline.engines import profile_for
    obs = from_scrapes(split_scrapes(sglang), "t")
    report = observe_report(obs, replace(dep, engine="sglang"), profile_for("sglang"), 10)
    assert report.pool_batch == report.seats == 4_096


def test_a_full_reported_pool_reads_the_context_off_its_fill() -> None:
    """KV 98 % of the engine's 192,000 tokens over 47.5 running is 3,961 tokens each; the
    counters' mean (1,000 + 200 ÷ 2 = 1,100) had the pool 'allow' 174 sequences beside a
    full cache. More than twice the mean, the fill is read: 48 sequences."""
    from ridgeline.reports.observe import observe_report

    dep, profile = vllm_8b()
    def at(t: float, n: float, running: float) -> str:
        return scrape(t, {"0": {**gauges(running, 4, 0.98), "vllm:prompt_tokens_total": 1000 * n,
                                "vllm:generation_tokens_total": 200 * n,
                                "vllm:request_success_total": n}}) + cache_info(12_000)

    obs = from_scrapes(split_scrapes(at(1764500000, 5000, 47) + at(1764500010, 5100, 48)), "t")
    report = observe_report(obs, dep, profile, None)
    assert obs.mean_prompt_tokens == 1000 and obs.mean_output_tokens == 200
    assert report.context == round(0.98 * 192_000 / 47.5) == 3_961
    assert "3.6× the counters' mean of 1,100 tokens" in report.context_source
    assert report.pool_batch == 12_000 // math.ceil(3_961 / 16) == 48


def test_an_idle_engines_missing_log_lines_are_idle_rounds_not_skipped() -> None:
    """vLLM logs an idle engine's stats line at debug level: engine 000 logs 6 rounds at
    1,000 tok/s, engine 001 only the first. Per engine over the 6 rounds: 7,000 ÷ 12 = 583,
    1,167 in all — the lines' mean × 2 engines had read 2,000."""
    line = ("(APIServer pid=7) INFO 11-20 10:{m:02d}:{s:02d} [loggers.py:236] Engine 00{e}: "
            "Avg prompt throughput: 4000.0 tokens/s, Avg generation throughput: 1000.0 "
            "tokens/s, Running: 32 reqs, Waiting: 0 reqs, GPU KV cache usage: 40.0%, Prefix "
            "cache hit rate: 0.0%\n")
    log = line.format(m=0, s=0, e=0) + line.format(m=0, s=0, e=1) + "".join(
        line.format(m=0, s=10 * r, e=0) for r in range(1, 6))
    obs = from_log(log, "t")
    assert obs.engines == 2 and len(obs.running) == 6
    assert obs.generation_tok_s * obs.engines == pytest.approx(7_000 / 6)
    assert obs.running == [32, 16, 16, 16, 16, 16]
    assert max(kv for kv, _ in obs.core_pressure) == pytest.approx(0.4)  # each engine's own
    # engine 001 alone in the next interval (its line 10 s after 000's) is a second round
    obs = from_log(line.format(m=0, s=0, e=0) + line.format(m=0, s=10, e=1), "t")
    assert len(obs.running) == 2 and obs.generation_tok_s == pytest.approx(500)


def test_vllms_prompt_tokens_by_source_give_the_cached_share() -> None:
    """prefix_cache_hits counts a waiting request's lookup again at each step it is not
    scheduled (90 % here); vLLM's prompt tokens by source count each prompt once: 8,000 of
    40,000 from the cache, 20 %. prompt_tokens_cached is read next, the hits last."""
    def at(t: float, n: float, by_source: bool) -> str:
        values = {**gauges(120, 30, 0.93), "vllm:prompt_tokens_total": 40_000 * n,
                  "vllm:prefix_cache_hits_total": 36_000 * n,
                  "vllm:generation_tokens_total": 20_000 * n}
        if not by_source:
            values["vllm:prompt_tokens_cached_total"] = 10_000 * n
        text = scrape(t, {"0": values})
        if by_source:
            text += "".join(series("vllm:prompt_tokens_by_source_total", "0", v * n,
                                   f',source="{k}"') + "\n" for k, v in (
                ("local_compute", 32_000), ("local_cache_hit", 8_000),
                ("external_kv_transfer", 0)))
        return text

    obs = from_scrapes(split_scrapes(at(1764500000, 100, True) + at(1764500010, 101, True)), "t")
    assert obs.cached_prompt_share == pytest.approx(0.2)
    obs = from_scrapes(split_scrapes(at(1764500000, 100, False) + at(1764500010, 101, False)),
                       "t")
    assert obs.cached_prompt_share == pytest.approx(0.25)


def test_uneven_engines_are_held_against_a_pool_by_the_busiest_engine(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Engines at 50 and 10 running: each has its own pool of 60 sequences of 8,000 tokens
    (vLLM 0.34: 7,555 blocks of 64 ÷ 125 a sequence), and the busiest engine's 50 is what
    fills its pool. The text had held the mean, 30, against one engine's pool ("30 of the 55
    sequences its pool holds"), and --max-num-seqs 40 passed though engine 0 runs 50."""
    text = "".join(scrape(t, {"0": gauges(50, 0, 0.7), "1": gauges(10, 0, 0.15)})
                   for t in (1764500000, 1764500060))
    obs = from_scrapes(split_scrapes(text), "t")
    assert (obs.batch, obs.busiest_batch) == (30, 50)
    path = tmp_path / "m.prom"
    path.write_text(text)
    argv = ["observe", str(path), "--model", "llama-3.1-8b", "--gpu", "h100", "--context",
            "8000"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "batch 30.0 against a ridge batch" in out  # each engine's step: the mean's arithmetic
    held = int(re.search(r"the KV pool allows ([\d,]+) sequences", out)[1].replace(",", ""))
    assert held > 50
    assert f"(the busiest of 2 engines, 50 of the {held} sequences its pool holds)" in out
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["busiest_engine_running"]["max"] == 50
    assert main([*argv, "--max-num-seqs", "40"]) == 2
    assert "50 requests running in one engine core" in capsys.readouterr().err


def started(engines: dict[str, float]) -> str:
    """Each engine's own process start, labelled with it."""
    return "".join(f'process_start_time_seconds{{engine="{e}"}} {t}\n' for e, t in engines.items())


@pytest.mark.parametrize("engine1_started", [1764300000, 1764450000])
def test_one_engine_whose_own_start_moves_restarts_alone(engine1_started: float) -> None:
    """Two scrapes, two engines, each exporting its own process start. Engine 1 restarts 30 s
    into the window and by the next scrape has generated 30,000 tokens, past its old 10,000:
    only its start moving says so. It counts from zero (30,000), engine 0 its increase
    (60,000): 750 tok/s an engine. Read off the earliest start of all, engine 1 started
    first had the server's start move to engine 0's, 100,000 s before the earlier scrape
    (refused as another server's page), and started after engine 0 left the restart unseen
    (20,000 read for engine 1: 667 tok/s)."""
    t0 = 1764500000
    tokens = [{"0": 1_000_000, "1": 10_000}, {"0": 1_060_000, "1": 30_000}]
    starts = [{"0": 1764400000, "1": engine1_started}, {"0": 1764400000, "1": t0 + 30}]
    text = "".join(
        scrape(t0 + 60 * k, {e: {**gauges(40, 0, 0.5), "vllm:generation_tokens_total": n}
                             for e, n in tokens[k].items()})
        + started(starts[k]) for k in (0, 1))
    obs = from_scrapes(split_scrapes(text), "t")
    assert obs.duration_s == 60
    assert obs.generation_tok_s == pytest.approx((60_000 + 30_000) / 60 / 2)
    (note,) = [n for n in obs.notes if "restarted" in n]
    assert note.startswith("engine 1 restarted between the scrapes 0 s and 60 s")
    assert "(process_start_time_seconds moved later)" in note


def test_the_servers_own_start_moving_is_still_every_engines_restart() -> None:
    """An unlabelled process start (the server's process, vLLM's API server) moving later
    restarts every engine: the two scrapes after it are read."""
    def both(t: int, tokens: float, start: float) -> str:
        return scrape(t, {e: {**gauges(40, 0, 0.5), "vllm:generation_tokens_total": tokens}
                          for e in ("0", "1")}) + f"process_start_time_seconds {start}\n"
    obs = from_scrapes(split_scrapes(both(1764500000, 10_000, 1764400000)
                                     + both(1764500060, 40_000, 1764500030)
                                     + both(1764500120, 100_000, 1764500030)), "t")
    assert obs.duration_s == 60
    assert obs.generation_tok_s == pytest.approx(60_000 / 60)
    assert any(n.startswith("the server restarted 30 s into the window "
                            "(process_start_time_seconds 1,764,400,000 → 1,764,500,030), "
                            "between the scrapes 0 s and 60 s") for n in obs.notes)
