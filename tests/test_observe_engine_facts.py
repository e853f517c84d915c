"""observe against what each engine writes: vLLM's summed data-parallel pool, its KV-cache
groups, its log's deferred queue and computed prompt rate, its prefix-cache queries, its
per-process gauges, its start-up pool lines, and `vllm bench serve` results that measured no
ITL, name no server, or stream several tokens a chunk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.engine_pool import LOG_POOL_UNREAD, context_from_kv_usage
from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.kvgroups import vllm_kv_groups
from ridgeline.observe import from_log, from_scrapes, read_source
from ridgeline.prometheus import split_scrapes
from ridgeline.reports.observe import observe_report
from ridgeline.reports.observe_wall import NEITHER
from tests.conftest import run_cli
from tests.test_observe_dp import gauges, scrape, vllm_8b


def h100(model: str) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator("h100"))


def cache_config_info(blocks: int, engine: str) -> str:
    """vllm:cache_config_info as vLLM V1 writes it: the CacheConfig as labels, value 1."""
    return ('vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales='
            f'"False",enable_prefix_caching="True",engine="{engine}",gpu_memory_utilization='
            f'"0.9",num_gpu_blocks="{blocks}",num_gpu_blocks_override="None",'
            'prefix_caching_hash_algo="sha256",swap_space_bytes="4294967296"} 1.0\n')


# -- F1: data parallelism ---------------------------------------------------------------


def test_a_dp_servers_num_gpu_blocks_is_its_engines_sum_read_per_engine(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's frontend adds up its engines' blocks at start-up (wait_for_engine_startup) and
    labels every engine's cache_config_info with the sum: 2 engines of 10,000 blocks write
    20,000 on each. Each engine's pool is 160,000 tokens: 39 sequences of 4,096, and half
    its pool over 32 running is 2,500 tokens each (read whole: 78 and 5,000)."""
    def at(t: float) -> str:
        return (scrape(t, {e: gauges(32, 0, 0.5) for e in ("0", "1")})
                + cache_config_info(20_000, "0") + cache_config_info(20_000, "1"))

    obs = from_scrapes(split_scrapes(at(1764500000) + at(1764500010)), "dp")
    assert obs.engines == 2 and obs.pool_tokens == 10_000 * 16
    assert any("num_gpu_blocks=20,000 is the 2 data-parallel engines' sum" in n
               for n in obs.notes)
    dep, profile = vllm_8b()
    assert observe_report(obs, dep, profile, 4096).pool_batch == 10_000 // 256 == 39
    held = context_from_kv_usage(obs, dep)
    assert held is not None and held[0] == 0.5 * 160_000 // 32 == 2_500
    # builds that label one series engine="" carry the same sum
    one = scrape(1764500000, {e: gauges(32, 0, 0.5) for e in ("0", "1")}) \
        + cache_config_info(20_000, "")
    assert from_scrapes(split_scrapes(one), "dp").pool_tokens == 160_000
    path = tmp_path / "dp.prom"
    path.write_text(at(1764500000) + at(1764500010))
    assert main(["observe", str(path), "--model", "llama-3.1-8b", "--gpu", "h100",
                 "--context", "4096", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["pool_tokens_reported"] == 160_000 and data["engine_max_batch"] == 39


# -- F2: KV-cache groups ----------------------------------------------------------------


def test_gemma3_blocks_are_shared_by_its_kv_cache_groups(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma-3-27B's layers form 7 groups in vLLM V1 (1 full attention, 6 of a 1,024-token
    window): a sequence of 4,096 tokens holds 256 + 6 × 65 = 646 of the 60,000 blocks, so 92
    fit, not the 234 that 960,000 'tokens' ÷ 4,096 make; vLLM counts 137,136 tokens. Half the
    blocks over 8 running is 3,750 blocks a request: 390 in the windows, 3,360 × 16 = 53,760
    tokens (not 60,000)."""
    dep = h100("gemma-3-27b")
    groups = vllm_kv_groups(dep, 16)
    assert groups is not None and groups.count == 7
    text = (scrape(1764500000, {"0": gauges(8, 0, 0.5)}) + cache_config_info(60_000, "0"))
    obs = from_scrapes(split_scrapes(text), "t")
    report = observe_report(obs, dep, profile_for("vllm"), 4096)
    assert report.pool_batch == 60_000 // groups.decode_blocks(4096) == 92
    assert report.engine_pool is not None
    assert report.engine_pool.tokens == groups.reported_tokens(60_000) == 137_136
    held = context_from_kv_usage(obs, dep)
    assert held is not None and held[0] == 53_760
    assert groups.decode_blocks(53_760) <= 3_750 < groups.decode_blocks(53_761)
    path = tmp_path / "gemma.prom"
    path.write_text(text)
    assert main(["observe", str(path), "--model", "gemma-3-27b", "--gpu", "h100",
                 "--context", "4096"]) == 0
    assert "60,000 blocks of 16 shared by 7 KV-cache groups" in capsys.readouterr().out


# -- F3, F4: the stats line -------------------------------------------------------------

V1_LINE = ("(APIServer pid=7) INFO 11-20 10:00:{s:02d} [loggers.py:236] Engine 000: Avg prompt "
           "throughput: {prompt} tokens/s, Avg generation throughput: 1000.0 tokens/s, Running: "
           "{running} reqs, Waiting: {waiting} reqs,{extra} GPU KV cache usage: 40.0%, Prefix "
           "cache hit rate: {hit}%\n")


def line(s: int, prompt: float = 0.0, running: int = 30, waiting: int = 0, extra: str = "",
         hit: float = 0.0) -> str:
    return V1_LINE.format(s=s, prompt=prompt, running=running, waiting=waiting, extra=extra,
                          hit=hit)


def test_deferred_requests_in_a_log_do_not_wait_for_the_batch() -> None:
    """vLLM logs Waiting as num_waiting_reqs + num_skipped_waiting_reqs, then 'Deferred: N'
    (the skipped: a KV transfer, a LoRA budget). 12 waiting, all deferred, is an empty queue,
    as the metrics' waiting_by_reason reads the same state — not the latency wall."""
    log = "".join(line(s, waiting=12, extra=" Deferred: 12 reqs,") for s in (0, 10))
    obs = from_log(log, "vllm.log")
    assert obs.waiting == [0, 0]
    assert any("up to 12 waiting requests deferred" in n for n in obs.notes)
    scraped = from_scrapes(split_scrapes(
        '# scrape_time 1764500000\nvllm:num_requests_running{engine="0"} 30\n'
        'vllm:num_requests_waiting{engine="0"} 12\nvllm:kv_cache_usage_perc{engine="0"} 0.4\n'
        'vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 0\n'
        'vllm:num_requests_waiting_by_reason{engine="0",reason="deferred"} 12\n'), "m")
    dep, profile = vllm_8b()
    assert observe_report(obs, dep, profile, 2000).wall == NEITHER \
        == observe_report(scraped, dep, profile, 2000).wall
    with pytest.raises(InputError, match="Deferred: 13 reqs but Waiting: 12 reqs"):
        from_log(line(0, waiting=12, extra=" Deferred: 13 reqs,"), "vllm.log")


def test_a_logs_prompt_rate_is_not_discounted_by_its_hit_rate_again() -> None:
    """Since PR #33290 the logged prompt rate counts computed tokens alone: 4,000 tok/s beside
    1,000 generated is 4 computed prompt tokens a decode, 160 a step over 40 running — the
    50 % hit rate taken off again had read 80."""
    log = "".join(line(s, prompt=4000.0, running=40, hit=50.0) for s in (0, 10))
    obs = from_log(log, "vllm.log")
    obs.mean_prompt_tokens = 2000.0
    dep, profile = vllm_8b()
    assert obs.cached_prompt_share is None
    assert observe_report(obs, dep, profile, 2000).prompt_tokens_per_step == 40 * 4 == 160
    assert any("prefix cache hit rate 50%" in n and "PR #33290" in n for n in obs.notes)


# -- F5, F6: counters and gauges --------------------------------------------------------


def test_prefix_cache_hits_are_a_share_of_the_lookups() -> None:
    """A request blocked for a step is looked up again, its hits counted again: 40 % of
    10,000 prompt tokens cached, each looked up twice, is 8,000 hits of 20,000 queries — 0.4,
    where hits ÷ prompt tokens read 0.8."""
    def at(t: float, n: int) -> str:
        return scrape(t, {"0": {**gauges(64, 3, 0.9),
                                "vllm:prompt_tokens_total": 10_000 * n,
                                "vllm:generation_tokens_total": 5_000 * n,
                                "vllm:prefix_cache_queries_total": 20_000 * n,
                                "vllm:prefix_cache_hits_total": 8_000 * n}})

    obs = from_scrapes(split_scrapes(at(1764500000, 10) + at(1764500010, 11)), "pc")
    assert obs.cached_prompt_share == pytest.approx(8_000 / 20_000) == 0.4


def test_kv_usage_per_api_server_process_is_read_at_its_highest() -> None:
    """vLLM before PR #28792 exported kv_cache_usage_perc per API-server process with
    --api-server-count > 1 (prometheus_client's 'all' mode): one pid holds the reading, the
    others 0. The pool is 65 % used, not refused, nor 0.65 ÷ 8 averaged."""
    pids = (277, 275, 273, 271, 272, 276, 274, 278)
    text = ("# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            + "".join(f'vllm:kv_cache_usage_perc{{engine="0",model_name="Qwen/Qwen3-VL-8B-'
                      f'Instruct",pid="{p}"}} {0.6530455880475035 if p == 273 else 0.0}\n'
                      for p in pids)
            + 'vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-VL-8B-Instruct"} 30\n')
    obs = from_scrapes(split_scrapes(text), "m")
    assert obs.kv_usage == [pytest.approx(0.653, abs=1e-3)]
    assert any("once per API-server process" in n for n in obs.notes)
    stale = text.replace('pid="275"} 0.0', 'pid="275"} 0.6')  # an older reading
    assert from_scrapes(split_scrapes(stale), "m").kv_usage == [pytest.approx(0.653, abs=1e-3)]


# -- F9: the start-up log's pool --------------------------------------------------------

STATS = line(0, running=32) + line(10, running=32)


def test_a_v1_logs_start_up_pool_sizes_the_batch_per_engine() -> None:
    """Each engine core logs 'GPU KV cache size: N tokens' once: two engines' lines are two
    pools, the smaller read. 423,408 tokens hold 103 sequences of 4,096."""
    startup = "".join(
        f"(EngineCore_DP{e} pid={2154 + e}) INFO 11-20 09:58:41 [kv_cache_utils.py:1229] GPU "
        f"KV cache size: {tokens} tokens\n(EngineCore_DP{e} pid={2154 + e}) INFO 11-20 "
        "09:58:41 [kv_cache_utils.py:1234] Maximum concurrency for 8,192 tokens per request: "
        "51.68x\n" for e, tokens in ((0, "423,408"), (1, "424,000")))
    obs = from_log(startup + STATS, "vllm.log")
    assert obs.pool_tokens == 423_408 and obs.pool_block_size is None
    assert any("the smallest of 2 lines" in n for n in obs.notes)
    dep, profile = vllm_8b()
    assert observe_report(obs, dep, profile, 4096).pool_batch == 423_408 // 4096 == 103


def test_a_v0_logs_gpu_blocks_and_concurrency_name_its_pool() -> None:
    """V0 logs '# cuda blocks: 27000, # CPU blocks: 2048' and, next, 'Maximum concurrency for
    8192 tokens per request: 52.73x' = 27,000 × 16 ÷ 8,192: 16 tokens a block, 432,000."""
    startup = ("INFO 09-11 17:18:02 executor_base.py:111] # cuda blocks: 27000, # CPU blocks: "
               "2048\nINFO 09-11 17:18:02 executor_base.py:116] Maximum concurrency for 8192 "
               "tokens per request: 52.73x\n")
    v0 = ("INFO 09-11 17:20:40 metrics.py:351] Avg prompt throughput: 2048.3 tokens/s, Avg "
          "generation throughput: 812.4 tokens/s, Running: 38 reqs, Swapped: 0 reqs, Pending: "
          "4 reqs, GPU KV cache usage: 88.1%, CPU KV cache usage: 0.0%.\n")
    assert from_log(startup + v0, "v0.log").pool_tokens == 27_000 * 16
    assert from_log(v0, "v0.log").pool_tokens is None
    # a release before the concurrency line: the count is not read, and the notes say so
    # (they said nothing, as if the log had stated no pool)
    unsized = from_log(startup.splitlines(keepends=True)[0] + v0, "v0.log")
    assert unsized.pool_tokens is None
    assert any("'# cuda blocks: 27000' is not read as the pool" in n for n in unsized.notes)
    assert not any("is not read as the pool" in n for n in from_log(v0, "v0.log").notes)


def test_a_logged_token_pool_is_not_read_for_a_model_of_several_groups() -> None:
    """With several KV-cache groups vLLM's 'GPU KV cache size' is blocks ÷ groups × block
    size before v0.24, maximum concurrency × max_model_len after: neither is tokens a
    sequence holds, so the pool is modelled, and says why."""
    startup = ("(EngineCore_DP0 pid=9) INFO 11-20 09:58:41 [kv_cache_utils.py:1229] GPU KV "
               "cache size: 137,136 tokens\n")
    obs = from_log(startup + STATS, "vllm.log")
    report = observe_report(obs, h100("gemma-3-27b"), profile_for("vllm"), 4096)
    assert report.engine_pool is None and LOG_POOL_UNREAD in obs.notes


def test_a_start_up_pool_of_0_tokens_is_refused_naming_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """'GPU KV cache size: 0 tokens' (V1) or '# GPU blocks: 0' (V0) is an engine with no room
    for a token, which vLLM stops at start-up; beside stats lines, and with no start-up that
    sized a pool, the log is refused with one line naming it (exit 2), as a negative count
    is, rather than the 0 dropped and the pool modelled as if nothing were said."""
    for startup in ("INFO 11-20 09:58:41 [kv_cache_utils.py:1229] GPU KV cache size: 0 tokens\n",
                    "INFO 09-11 17:18:02 executor_base.py:111] # GPU blocks: 0, # CPU blocks: "
                    "2048\n"):
        path = tmp_path / "zero.log"
        path.write_text(startup + STATS)
        with pytest.raises(InputError, match=r"zero\.log, line 1: .* 0 tokens"):
            read_source(str(path))
        code, out, err = run_cli(capsys, "observe", str(path), "--model", "llama-3.1-8b",
                                 "--gpu", "h100")
        assert (code, out) == (2, "") and len(err.strip().splitlines()) == 1
        assert "line 1" in err and "cannot serve" in err


def test_a_0_token_start_before_a_restart_that_sized_a_pool_is_cautioned_and_left_out() -> None:
    """A failed start (0 tokens) and a restart that sized 423,408 tokens, appended to one log:
    the restart's pool is read, the failed start named in a caution, not taken as the smallest."""
    startup = ("INFO 11-20 09:50:00 [kv_cache_utils.py:1229] GPU KV cache size: 0 tokens\n"
               "INFO 11-20 09:58:41 [kv_cache_utils.py:1229] GPU KV cache size: 423,408 tokens\n")
    obs = from_log(startup + STATS, "vllm.log")
    assert obs.pool_tokens == 423_408
    assert any(n.startswith("caution: line 1, 'GPU KV cache size: 0 tokens'")
               for n in obs.notes)


def test_stats_lines_whose_times_go_backwards_get_a_caution_naming_the_first_step() -> None:
    """Lines at :00, :20, then :10 and :05: the first step back is line 3's, after line 2's;
    named once. In time order, or over the year's turn (12-31 to 01-01), no caution."""
    obs = from_log(line(0) + line(20) + line(10) + line(5), "vllm.log")
    cautions = [n for n in obs.notes if "go backwards" in n]
    assert len(cautions) == 1
    assert "at line 3 (11-20 10:00:10, after line 2's 11-20 10:00:20)" in cautions[0]
    assert not any("go backwards" in n for n in from_log(line(0) + line(10), "v.log").notes)
    turn = line(59).replace("11-20", "12-31").replace("10:00", "23:59") + line(0).replace(
        "11-20", "01-01")
    assert not any("go backwards" in n for n in from_log(turn, "v.log").notes)


# -- F7, F8, F10: vllm bench serve results ----------------------------------------------


def vllm_bench(**changes: object) -> dict[str, object]:
    """`vllm bench serve --save-result`, as its serve.py writes it (default backend)."""
    result: dict[str, object] = {
        "date": "20251120-100000", "endpoint_type": "openai", "backend": "openai",
        "label": None, "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct", "num_prompts": 1000,
        "request_rate": "inf", "burstiness": 1.0, "max_concurrency": None,
        "duration": 50.0, "completed": 1000, "failed": 0, "total_input_tokens": 1_024_000,
        "total_output_tokens": 128_000, "request_throughput": 20.0, "request_goodput": None,
        "output_throughput": 2560.0, "total_token_throughput": 23040.0,
        "max_output_tokens_per_s": 3100.0, "max_concurrent_requests": 96,
        "mean_ttft_ms": 210.0, "median_ttft_ms": 190.0, "std_ttft_ms": 40.0,
        "p99_ttft_ms": 380.0, "mean_tpot_ms": 25.0, "median_tpot_ms": 24.5,
        "std_tpot_ms": 2.0, "p99_tpot_ms": 31.0, "mean_itl_ms": 25.0, "median_itl_ms": 24.0,
        "std_itl_ms": 5.0, "p99_itl_ms": 60.0, "mean_e2el_ms": 3400.0,
        "median_e2el_ms": 3350.0, "std_e2el_ms": 300.0, "p99_e2el_ms": 4100.0}
    return {**result, **changes}


def test_a_prefill_only_vllm_bench_keeps_its_ttft_and_lengths(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--output-len 1`: serve.py writes np.mean(itls or 0) and np.mean(tpots or 0), 0.0 ms
    each. They are nothing measured: the run's TTFT, throughput and lengths still read."""
    zeros = {f"{stat}_{family}_ms": 0.0 for stat in ("mean", "median", "std", "p99")
             for family in ("tpot", "itl")}
    path = tmp_path / "prefill.json"
    path.write_text(json.dumps(vllm_bench(total_output_tokens=1000, output_throughput=20.0,
                                          **zeros)))
    obs = read_source(str(path))
    assert "itl" not in obs.latency_ms and obs.latency_ms["ttft"]["mean"] == 210.0
    assert (obs.mean_prompt_tokens, obs.mean_output_tokens) == (1024, 1)
    assert any("itl_ms is 0 throughout" in n for n in obs.notes)
    assert main(["observe", str(path), "--model", "llama-3.1-8b", "--gpu", "h100"]) == 0
    assert "no running batch in this source" in capsys.readouterr().out


def test_a_benchs_backend_names_its_request_format_not_the_server(tmp_path: Path) -> None:
    """vllm bench serve defaults to --backend openai; its "vllm" and "sglang" backends post
    OpenAI completions too, which any server answers: none names the engine."""
    for backend in ("openai", "vllm", "sglang"):
        path = tmp_path / f"{backend}.json"
        path.write_text(json.dumps(vllm_bench(backend=backend, endpoint_type=backend)))
        obs = read_source(str(path))
        assert obs.engine_family is None
        assert any(f"backend '{backend}' names the benchmark's request format" in n
                   for n in obs.notes)


def test_a_speculative_bench_reads_tpot_as_the_time_per_token(tmp_path: Path) -> None:
    """With speculative decoding each streamed chunk carries ~2.5 tokens: ITL 50 ms a chunk,
    TPOT 20 ms a token. 2,560 tok/s × 20 ms is a batch of 51.2, not 128."""
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(vllm_bench(
        mean_itl_ms=50.0, median_itl_ms=48.0, p99_itl_ms=90.0, mean_tpot_ms=20.0,
        median_tpot_ms=19.5, p99_tpot_ms=26.0, spec_decode_acceptance_rate=50.0,
        spec_decode_acceptance_length=2.5)))
    obs = read_source(str(path))
    assert obs.latency_ms["itl"]["mean"] == 20.0
    assert obs.batch == pytest.approx(2560 * 20.0 / 1e3) == 51.2
    assert any("speculative decoding (2.50 tokens a step)" in n for n in obs.notes)
    # the same run without the acceptance length: ITL kept, with a caution
    path.write_text(json.dumps(vllm_bench(mean_itl_ms=50.0, median_itl_ms=48.0,
                                          p99_itl_ms=90.0, mean_tpot_ms=20.0,
                                          median_tpot_ms=19.5, p99_tpot_ms=26.0)))
    obs = read_source(str(path))
    assert obs.batch == pytest.approx(128.0)
    assert any("caution: the mean ITL (50.0 ms) is 2.5× the mean TPOT" in n for n in obs.notes)
