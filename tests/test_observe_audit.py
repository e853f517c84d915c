"""`ridgeline observe` against what its sources measure: the prompt work the rates imply, the
queue's real cause, a latency no step can reach, and an ITL the generation rate contradicts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engines import profile_for
from ridgeline.floors import decode_floor
from ridgeline.observe import read_source
from ridgeline.observe_log import from_log
from ridgeline.reports.observe import observe_report
from ridgeline.reports.observe_wall import LATENCY, LEVERS, NEITHER
from tests.conftest import run_cli

FIXTURES = Path(__file__).parent / "fixtures"
POOL_LINE = ("INFO 12-01 10:00:00 [kv_cache_utils.py:1087] GPU KV cache size: {pool:,} tokens\n")
STATS_LINE = ("INFO 12-01 10:01:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: "
              "{prompt:.1f} tokens/s, Avg generation throughput: {gen:.1f} tokens/s, Running: "
              "{running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: {kv:.1f}%\n")


def vllm_log(readings: list[tuple[int, int, float]], prompt: float, gen: float,
             pool: int | None = None) -> str:
    """A vLLM V1 log: (running, waiting, KV %) a stats line, ten seconds apart."""
    head = POOL_LINE.format(pool=pool) if pool else ""
    return head + "".join(STATS_LINE.format(s=10 * i, prompt=prompt, gen=gen, running=r,
                                            waiting=w, kv=kv)
                          for i, (r, w, kv) in enumerate(readings))


def llama_8b(gpu: str = "h100", engine: str = "vllm", weights: str | None = None
             ) -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator(gpu), weights,
                            engine=engine)


def observe(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    return run_cli(capsys, "observe", *args)


# -- 4: the prompt work the two rates imply, and the generation-rate gap -----------------------


def test_a_log_without_mean_lengths_prices_the_prompt_work_its_rates_imply(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The vLLM log has no mean prompt length, but prompt 2,389 and generation 831 tok/s at
    batch 34: 98 prompt tokens a step, which the prediction carries (it had priced 0)."""
    obs = read_source(str(FIXTURES / "vllm_server.log"))
    assert obs.mean_prompt_tokens is None and obs.prompt_tok_s and obs.generation_tok_s
    dep = llama_8b()
    report = observe_report(obs, dep, profile_for("vllm"), None)
    assert obs.batch is not None
    expected = round(obs.prompt_tok_s / obs.generation_tok_s * obs.batch)
    assert report.prompt_tokens_per_step == expected > 0
    assert report.chunk_context == round(report.context / 2)
    decode_only = observe_report(obs, dep, profile_for("vllm"), report.context)
    object.__setattr__(decode_only, "prompt_tokens_per_step", 0)  # its cached value, emptied
    predicted, alone = report.predicted_itl_ms, decode_only.predicted_itl_ms
    assert predicted is not None and alone is not None and predicted > alone
    code, out, _ = observe(capsys, str(FIXTURES / "vllm_server.log"), "--model", "llama-3.1-8b",
                           "--gpu", "h100", "--explain")
    assert code == 0
    assert f"prompt tokens per step = {expected}  [prompt tok/s ÷ generation tok/s" in out
    # the text sets the prediction against what the generation rate implies, as --json does
    implied = obs.batch / obs.generation_tok_s * 1e3
    assert f"implies {implied:,.1f} ms a token: {predicted / implied - 1:+.0%}" in out
    code, out, _ = observe(capsys, str(FIXTURES / "vllm_server.log"), "--model", "llama-3.1-8b",
                           "--gpu", "h100", "--json")
    gap = json.loads(out)["gap"]["output_tok_s"]
    assert gap == pytest.approx(obs.batch / (predicted / 1e3) / obs.generation_tok_s - 1)
    assert "itl" not in json.loads(out)["gap"]


def test_sglang_metrics_without_lengths_carry_their_prompt_work_too() -> None:
    obs = read_source(str(FIXTURES / "sglang_metrics.txt"))
    assert obs.prompt_tok_s and obs.generation_tok_s and obs.batch
    report = observe_report(obs, Deployment.build(resolve_model("qwen3-8b"),
                                                  resolve_accelerator("h100"), engine="sglang"),
                            profile_for("sglang"), None)
    assert report.prompt_tokens_per_step == round(
        obs.prompt_tok_s / obs.generation_tok_s * obs.batch) > 0


# -- 6: the queue's cause, and its lever ----------------------------------------------------


def test_a_brief_queue_with_seats_and_budget_to_spare_is_no_wall(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """50 running of vLLM's 1,024 seats on an H100, about 150 tokens of its 8,192 a step, the
    pool 75 % full at most: waiting in 2 of 3 lines is prompts caught between steps. It had
    read 'raise --max-num-seqs … or relax the SLO that caps them'."""
    log = tmp_path / "v1.log"
    log.write_text(vllm_log([(50, 0, 60.0), (52, 3, 70.0), (48, 5, 75.0)], 3000, 1500,
                            pool=120_000))
    report = observe_report(read_source(str(log)), llama_8b(), profile_for("vllm"), None)
    assert report.queued == (2, 3) and report.queue_persists
    assert report.peak_running < 0.9 * report.seats
    assert report.batch is not None
    assert report.batch + report.prompt_tokens_per_step < 0.9 * report.step_budget
    assert report.wall == NEITHER
    code, out, _ = observe(capsys, str(log), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 0
    assert "wall: neither — requests waited in 2 of 3 readings" in out
    assert "--max-num-seqs" not in out and "SLO" not in out
    assert "as its log reports it" in out  # it read "as its log report it"


def test_a_queue_at_the_seats_asks_for_more_seats_and_one_under_them_for_budget(
        tmp_path: Path) -> None:
    """Near every seat taken (≥ 90 %), the seats are the wall: --max-num-seqs (SGLang's
    --max-running-requests). Far under them, with the steps' token budget about full from the
    prompt rate, the budget is: --max-num-batched-tokens."""
    dep = llama_8b()
    seats = observe_report(from_log(vllm_log([(60, 0, 10.0)], 100, 100), "x"), dep,
                           profile_for("vllm"), 2000).seats
    full = round(0.95 * seats)
    obs = from_log(vllm_log([(full, 4, 40.0)] * 3, 100, 1000), "x")
    report = observe_report(obs, dep, profile_for("vllm"), 2000)
    assert report.wall == LATENCY and report.queue_cause == "seats"
    assert report.lever.endswith("raise --max-num-seqs")
    sglang = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                              engine="sglang")
    at_seats = observe_report(obs, sglang, profile_for("sglang"), 2000)
    at_seats_obs = from_log(vllm_log([(at_seats.seats, 4, 40.0)] * 3, 100, 1000), "x")
    assert observe_report(at_seats_obs, sglang, profile_for("sglang"),
                          2000).lever.endswith("raise --max-running-requests")
    # 40 running with 400 prompt tokens for each generated one: past the step's 8,192
    busy = from_log(vllm_log([(40, 6, 40.0)] * 3, 400_000, 1000), "x")
    report = observe_report(busy, dep, profile_for("vllm"), 2000)
    assert report.prompt_tokens_per_step + 40 >= 0.9 * report.step_budget
    assert report.wall == LATENCY and report.queue_cause == "budget"
    assert report.lever.endswith("raise --max-num-batched-tokens")
    assert "--max-num-seqs" not in report.lever


def test_one_reading_with_a_queue_among_several_is_not_a_wall() -> None:
    obs = from_log(vllm_log([(40, 0, 30.0), (40, 0, 30.0), (40, 7, 30.0), (40, 0, 30.0)],
                            1000, 1000), "x")
    report = observe_report(obs, llama_8b(), profile_for("vllm"), 2000)
    assert report.queued == (1, 4) and not report.queue_persists
    assert report.wall == NEITHER
    assert report.lever.startswith("requests waited in only 1 of 4 readings")


def test_no_lever_names_an_slo_the_engine_does_not_have() -> None:
    assert not any("SLO" in text for text in LEVERS.values())


# -- 5: a latency under the floor, and an ITL the generation rate contradicts ----------------


def test_a_latency_under_decodes_floor_says_the_weights_are_not_what_is_described(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama-server's 10 ms a token at batch 4 on an RTX 4090 is under bf16's floor (every
    weight read at the rated bandwidth): the server runs a lighter GGUF, and observe names the
    formats whose floor the measurement clears."""
    obs = read_source(str(FIXTURES / "llamacpp_metrics.txt"))
    dep = llama_8b("rtx-4090", "llama.cpp-cuda")
    report = observe_report(obs, dep, profile_for("llama.cpp-cuda"), None)
    assert report.batch is not None
    floor_ms = decode_floor(dep, round(report.batch), report.context).step_time_s * 1e3
    measured = obs.latency_ms["itl"]["mean"]
    assert report.floor_itl_ms == pytest.approx(floor_ms)
    assert measured < 0.9 * floor_ms and report.below_floor
    lighter = report.lighter_weights
    assert lighter and lighter[0][0] == "q8_0"
    for name, ms in lighter:
        assert ms <= measured
        assert ms == pytest.approx(decode_floor(
            llama_8b("rtx-4090", "llama.cpp-cuda", name), round(report.batch),
            report.context).step_time_s * 1e3)
    code, out, _ = observe(capsys, str(FIXTURES / "llamacpp_metrics.txt"), "--model",
                           "llama-3.1-8b", "--gpu", "rtx-4090")
    assert code == 0
    assert (f"caution: the measured {measured:,.1f} ms a token is under the {floor_ms:,.1f} ms "
            "floor") in out
    assert "--weights q8_0" in out
    # as a q4_k_m GGUF the same 10 ms clears the floor: no caution
    code, out, _ = observe(capsys, str(FIXTURES / "llamacpp_metrics.txt"), "--model",
                           "llama-3.1-8b", "--gpu", "rtx-4090", "--weights", "q4_k_m")
    assert code == 0 and "under the" not in out


def test_an_itl_the_generation_rate_contradicts_is_flagged(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Batch 8 at an 18 ms ITL makes 444 tok/s; the window's counter says 2,560: 5.8× apart.
    observe says so, and which one it sets the prediction against."""
    from tests.test_observe import timed_window

    path = timed_window(tmp_path)
    obs = read_source(str(path))
    report = observe_report(obs, llama_8b(), profile_for("vllm"), None)
    itl, b, gen = obs.latency_ms["itl"]["mean"], obs.batch, obs.generation_tok_s
    assert b is not None and gen is not None
    apart = max(itl, b / gen * 1e3) / min(itl, b / gen * 1e3)
    assert report.rates_apart == pytest.approx(apart) and apart > 2
    code, out, _ = observe(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 0
    assert f"disagree {apart:,.1f}×" in out and "sets its prediction against the histogram" in out
    # a bench's batch is Little's law from the two: they cannot disagree, and no caution shows
    bench = observe_report(read_source(str(FIXTURES / "vllm_bench.json")), llama_8b(),
                           profile_for("vllm"), None)
    assert bench.rates_apart is None and bench.cross_checks() == []


# -- 11: observe's wording ---------------------------------------------------------------------


def test_a_model_whose_weights_overflow_the_card_is_told_so_not_blamed_on_the_pool(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = observe(capsys, str(FIXTURES / "vllm_server.log"), "--model", "llama-3.1-70b",
                           "--gpu", "h100")
    assert code == 0
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"))
    report = observe_report(read_source(str(FIXTURES / "vllm_server.log")), dep,
                            profile_for("vllm"), None)
    weights_gib = report.modelled_pool.weight_bytes / 2**30
    assert report.weights_do_not_load and report.wall == "does not fit"
    assert f"the weights alone, {weights_gib:,.1f} GiB per GPU, exceed" in out
    assert "KV pool holds no sequence" not in out
    assert "of the arithmetic you are billed for" not in out


def test_llama_server_seats_are_its_slots_in_explain(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = observe(capsys, str(FIXTURES / "llamacpp_metrics.txt"), "--model",
                           "llama-3.1-8b", "--gpu", "rtx-4090", "--explain")
    assert code == 0
    assert re.search(r"seats = \d+  \[llama-server's slots \(-np\)", out)
    assert "SGLang" not in out


# -- 11: fit's budget rows in ROCm's names on AMD cards --------------------------------------


def test_fit_budget_rows_name_rocms_runtime_on_amd_and_stay_as_they_were_elsewhere() -> None:
    from ridgeline.memory import EngineSettings, kv_pool
    from ridgeline.reports.fit_budget import budget_rows
    from ridgeline.reports.fit_budget_steps import llamacpp_pool_step

    for engine in ("vllm", "sglang"):
        dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("mi300x"),
                               engine=engine)
        settings = EngineSettings(max_model_len=8192)
        pool = kv_pool(dep, settings)
        fa = dep.flash_attention
        amd = [label for label, _ in budget_rows(pool, settings, dep.model, vendor="amd",
                                                 flash_attention=fa)]
        plain = budget_rows(pool, settings, dep.model, flash_attention=fa)
        assert plain == budget_rows(pool, settings, dep.model, vendor="nvidia",
                                    flash_attention=fa)
        assert not any("CUDA" in label or "NCCL" in label for label in amd)
        assert any("HIP graphs" in label for label in amd)
        assert any("CUDA graphs" in label for label, _ in plain)
        # the figures are the same: only the names change
        assert [value for _, value in plain] == [value for _, value in
                                                budget_rows(pool, settings, dep.model, "amd",
                                                                    flash_attention=fa)]
    vllm_8b = llama_8b("mi300x")
    assert "− non-torch (HIP context, RCCL)" in [label for label, _ in budget_rows(
        kv_pool(vllm_8b, EngineSettings(max_model_len=8192)), EngineSettings(),
        vendor="amd", flash_attention=vllm_8b.flash_attention)]
    rocm = llama_8b("mi300x", "llama.cpp-rocm")
    settings = EngineSettings(max_model_len=8192)
    step = llamacpp_pool_step(rocm, kv_pool(rocm, settings), settings)
    assert "HIP (ROCm) context" in str(step) and "CUDA" not in str(step)


def test_explain_shows_a_benchs_batch_as_the_littles_law_product_it_is(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A bench reports no running gauge: its batch is output tok/s × mean ITL (2,091.5 ×
    28.0 ms = 58.6). --explain labelled it "running requests, mean over the window", a gauge
    the source has not, and showed no product to redo."""
    bench = read_source(str(FIXTURES / "vllm_bench.json"))
    code, out, _ = observe(capsys, str(FIXTURES / "vllm_bench.json"), "--model", "llama-3.1-8b",
                           "--gpu", "h100", "--explain")
    gen, itl = bench.generation_tok_s or 0.0, bench.latency_ms["itl"]["mean"]
    assert code == 0 and bench.batch == pytest.approx(gen * itl / 1e3)
    assert (f"batch = {bench.batch:,.4g}  [Little's law: output tok/s × mean ITL = "
            f"{gen:,.1f} tok/s × {itl:,.1f} ms]") in out
    assert "running requests, mean over the window" not in out
    code, out, _ = observe(capsys, str(FIXTURES / "vllm_metrics.txt"), "--model",
                           "llama-3.1-8b", "--gpu", "h100", "--explain")
    assert "batch = 8  [running requests, mean over the window]" in out  # a gauge's: as before


def test_an_empty_ttft_histogram_is_said_and_the_itls_percentiles_still_get_their_note(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A scrape whose TTFT histogram has counted nothing yet, beside an ITL one that has: the
    TTFT line was left out without a word, and the note on interpolated percentiles, said
    with the first histogram read only, was lost with it though the ITL's p50 … p99 print."""
    text = "\n".join(re.sub(r" [0-9.]+$", " 0.0", line)
                     if line.startswith("vllm:time_to_first_token_seconds") else line
                     for line in (FIXTURES / "vllm_metrics.txt").read_text().splitlines())
    path = tmp_path / "metrics.txt"
    path.write_text(text + "\n")
    code, out, _ = observe(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 0 and "ITL/TPOT    mean 18.0 ms, p50 17.6 ms" in out and "TTFT  " not in out
    assert ("vllm:time_to_first_token_seconds observed no request since the server started: "
            "no ttft figures") in out
    assert "latency percentiles are interpolated within the histograms' buckets" in out
