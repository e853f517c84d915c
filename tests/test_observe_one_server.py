"""observe reads one server's run: pages of two servers (a load balancer in front of replicas)
and a counter reset no restart explains are refused, token rates no server computes are
refused or cautioned, the scrape-order refusal names times that differ, and the pool is
modelled at the memory settings vLLM's cache_config_info states."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engine_pool import EnginePool
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.observe import read_source
from ridgeline.reports.observe_floor import RATE_OVER_PEAK, peak_tok_s
from tests.conftest import run_cli

M = 'engine="0",model_name="m"'
T0 = 1764953600  # a real unix time: :g printed every one of that day as 1.76495e+09


def page(t: float, prompt: float, generated: float, requests: float,
         start: float | None = None, utilization: str = "0.9",
         itl: float | None = None) -> str:
    """One timed vLLM scrape: 25 running, its token and request counters, an ITL histogram of
    12 ms a token (``itl`` observations, else a token each but the first of a request), its
    pool (27,015 blocks of 16 at ``utilization``) and, if given, its process start."""
    itl = generated - requests if itl is None else itl
    lines = [f"# scrape_time {t}", f"vllm:num_requests_running{{{M}}} 25",
             f"vllm:num_requests_waiting{{{M}}} 0", f"vllm:kv_cache_usage_perc{{{M}}} 0.06",
             f"vllm:prompt_tokens_total{{{M}}} {prompt}",
             f"vllm:generation_tokens_total{{{M}}} {generated}",
             f"vllm:request_success_total{{{M}}} {requests}",
             f'vllm:inter_token_latency_seconds_bucket{{{M},le="0.025"}} {itl}',
             f'vllm:inter_token_latency_seconds_bucket{{{M},le="+Inf"}} {itl}',
             f"vllm:inter_token_latency_seconds_count{{{M}}} {itl}",
             f"vllm:inter_token_latency_seconds_sum{{{M}}} {itl * 0.012}",
             'vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",'
             f'gpu_memory_utilization="{utilization}",kv_cache_memory_bytes="None",'
             'num_gpu_blocks="27015"} 1.0']
    if start is not None:
        lines.append(f"process_start_time_seconds {start}")
    return "\n".join(lines) + "\n"


def run(run_in: Path, capsys: pytest.CaptureFixture[str], *pages: str,
        extra: tuple[str, ...] = ()) -> tuple[int, str, str]:
    path = run_in / "scrapes.prom"
    path.write_text("".join(pages))
    return run_cli(capsys, "observe", str(path), "--model", "llama-3.1-8b", "--gpu", "h100",
                   *extra)


def one_line(err: str) -> None:
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def h100_8b() -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"))


# -- two servers, or a reset nothing explains -------------------------------------------------


def test_a_process_start_that_moves_earlier_is_another_servers_page(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A load balancer answers the middle scrape from another replica, started 10,000 s
    earlier with 0.6× the counters. It was read as two restarts, 778,400 prompt tok/s."""
    start = T0 - 3600
    code, out, err = run(tmp_path, capsys,
                         page(T0, 28_800_000, 7_200_000, 28_800, start),
                         page(T0 + 30, 17_424_000, 4_356_000, 17_424, start - 10_000),
                         page(T0 + 60, 29_280_000, 7_320_000, 29_280, start))
    assert code == 2 and not out
    one_line(err)
    assert "process_start_time_seconds moves earlier between the scrapes 0 s and 30 s" in err
    assert "(10,000 s before)" in err and "not one server's run" in err


def test_a_counter_that_falls_under_a_held_process_start_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The generation counter falls while the prompt counter rises and the process start
    holds: no process restarted. Read as a restart, the prompt counter's whole value was the
    window's: 492,000 prompt tok/s, a 253 ms step against 12 ms measured (+2012%)."""
    start = T0 - 3600
    code, out, err = run(tmp_path, capsys,
                         page(T0, 28_800_000, 7_200_000, 28_800, start),
                         page(T0 + 30, 29_040_000, 7_260_000, 29_040, start),
                         page(T0 + 60, 29_280_000, 1_000, 29_280, start, itl=7_290_720))
    assert code == 2 and not out
    one_line(err)
    assert "vllm:generation_tokens_total went down between the scrapes 30 s and 60 s" in err
    assert f"process_start_time_seconds stayed at {start:,.0f} s" in err


def test_a_process_start_that_moves_later_is_still_a_restart(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The refusals leave a real restart alone: the two scrapes after it are read, 30,000
    tokens in 30 s (counted from zero across it: 90,000 in 90 s)."""
    code, out, _ = run(tmp_path, capsys, page(T0, 28_800_000, 7_200_000, 28_800, T0 - 3600),
                       page(T0 + 60, 240_000, 60_000, 240, T0 + 30),
                       page(T0 + 90, 360_000, 90_000, 360, T0 + 30), extra=("--json",))
    assert code == 0
    obs = json.loads(out)
    assert obs["output_tok_s"] == pytest.approx((90_000 - 60_000) / 30)
    assert any("the server restarted" in n for n in obs["notes"])


# -- a restart: one run of the server read ----------------------------------------------------


def restarted_run(restart_after: int, scrapes: int) -> list[str]:
    """Scrapes 30 s apart of a server at 8 requests a second (1,000 prompt and 250 generated
    tokens each) that restarts 20 s after scrape ``restart_after`` (0-based) and serves 4 a
    second after it, with a pool sized at gpu_memory_utilization 0.8."""
    pages = []
    for i in range(scrapes):
        t = T0 + 30 * i
        before = i <= restart_after
        start = T0 - 3600 if before else T0 + 30 * restart_after + 20
        requests = 8 * (t - start) if before else 4 * (t - start)
        pages.append(page(t, 1000 * requests, 250 * requests, requests, start,
                          utilization="0.9" if before else "0.8"))
    return pages


def test_a_restart_reads_the_scrapes_after_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Four scrapes, the server restarted between the second and the third: the two after it
    are read, 4 requests a second (1,000 generated tokens a second) over 30 s, at the new
    run's settings. Counted from zero across it, the window read 1,111 tok/s over 90 s: the
    new run's counts over time it did not run, beside the old run's."""
    code, out, _ = run(tmp_path, capsys, *restarted_run(1, 4), extra=("--json",))
    assert code == 0
    obs = json.loads(out)
    assert obs["duration_s"] == 30
    assert obs["output_tok_s"] == pytest.approx(4 * 250)
    assert obs["prompt_tok_s"] == pytest.approx(4 * 1000)
    assert any(re.match(r"the server restarted \d+ s into the window \(process_start_time_"
                        r"seconds [\d,]+ → [\d,]+\), between the scrapes 30 s and 60 s into "
                        r"the window: read the 2 scrapes after it \(60 s to 90 s\)", n)
               for n in obs["notes"])
    code, out, _ = run(tmp_path, capsys, *restarted_run(1, 4))
    assert code == 0 and "30 s window" in out


def test_a_restart_with_one_scrape_after_it_reads_the_scrapes_before_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Restarted between the third scrape and the fourth: the three before it are read, 8
    requests a second over 60 s (counted across it, 1,444 generated tok/s, not 2,000), and
    the pool at their settings (gpu_memory_utilization 0.9, not the later run's 0.8)."""
    code, out, _ = run(tmp_path, capsys, *restarted_run(2, 4), extra=("--json",))
    assert code == 0
    obs = json.loads(out)
    assert obs["duration_s"] == 60
    assert obs["output_tok_s"] == pytest.approx(8 * 250)
    assert any("between the scrapes 60 s and 90 s" in n and "fewer than 2 scrapes after it: "
               "read the 3 scrapes before it (0 s to 60 s)" in n for n in obs["notes"])
    assert read_source(str(tmp_path / "scrapes.prom")).gpu_memory_utilization == 0.9


def test_a_restart_with_no_run_of_two_scrapes_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two scrapes with a restart between them: no run of one server gives a rate, so the
    window is refused in one line rather than the new run's counts spread over 30 s it only
    partly ran (1,333 prompt tok/s where it served 4,000)."""
    code, out, err = run(tmp_path, capsys, *restarted_run(0, 2))
    assert code == 2 and not out
    one_line(err)
    assert "the server restarted 20 s into the window (process_start_time_seconds " \
        "1,764,950,000 → 1,764,953,620), between the scrapes 0 s and 30 s into the window" in err
    assert "no run of it has 2 scrapes to give a rate" in err


def test_two_restarts_read_the_latest_run_of_two_scrapes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Restarts after the second scrape and after the fourth, one scrape after the last: the
    run between them (the third and fourth scrapes) is read, and the note says it is one of
    two restarts."""
    first = restarted_run(1, 4)
    again = restarted_run(0, 2)[1].replace(f"# scrape_time {T0 + 30}", f"# scrape_time {T0 + 120}")
    again = again.replace(f"process_start_time_seconds {T0 + 20}",
                          f"process_start_time_seconds {T0 + 110}")
    code, out, _ = run(tmp_path, capsys, *first, again, extra=("--json",))
    assert code == 0
    obs = json.loads(out)
    assert obs["duration_s"] == 30 and obs["output_tok_s"] == pytest.approx(4 * 250)
    assert any("between the scrapes 90 s and 120 s" in n and "(one of 2 restarts in the "
               "window)" in n and "read the 2 scrapes before it (60 s to 90 s)" in n
               for n in obs["notes"])


# -- token rates no server computes -----------------------------------------------------------


def test_token_rates_past_ten_times_the_peak_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No process start to tell two servers apart: the rates themselves give them away."""
    peak = peak_tok_s(h100_8b())
    generated = RATE_OVER_PEAK * 1.1 * peak * 60
    code, out, err = run(tmp_path, capsys, page(T0, 0, 1_000, 1),
                         page(T0 + 60, 0, 1_000 + generated, 1 + generated / 250))
    assert code == 2 and not out
    one_line(err)
    assert f"{RATE_OVER_PEAK * 1.1:,.1f}× the {peak:,.0f} llama-3.1-8b computes" in err


def test_token_rates_past_the_peak_are_cautioned_and_not_compared(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """3× the peak: a deployment other than described could (more GPUs), so cautioned, and
    the prediction is not set against the measurement."""
    peak = peak_tok_s(h100_8b())
    generated = 3 * peak * 60
    code, out, _ = run(tmp_path, capsys, page(T0, 0, 1_000, 1),
                       page(T0 + 60, 0, 1_000 + generated, 1 + generated / 250))
    assert code == 0
    assert f"3.0× the {peak:,.0f} llama-3.1-8b computes on 1 x h100-sxm at their peak" in out
    assert "measured 12.0 ms: not compared, the token rates pass" in out
    code, out, _ = run(tmp_path, capsys, page(T0, 0, 1_000, 1),
                       page(T0 + 60, 0, 121_000, 481))  # 2,000 tok/s: none
    assert code == 0 and "at their peak" not in out


def sglang_ranks(ranks: list[str], generated_each: float) -> str:
    """Two SGLang scrapes 60 s apart, one series set for each of ``ranks`` (its labels),
    each rank generating ``generated_each`` tokens between them."""
    return "".join(f"# scrape_time {t}\n" + "".join(
        f'sglang:num_running_reqs{{model_name="m",{r}}} 20\n'
        f'sglang:num_queue_reqs{{model_name="m",{r}}} 0\n'
        f'sglang:token_usage{{model_name="m",{r}}} 0.3\n'
        f'sglang:generation_tokens_total{{model_name="m",{r}}} {1_000 + n}\n' for r in ranks)
        for t, n in ((T0, 0), (T0 + 60, generated_each)))


@pytest.mark.parametrize(("shared", "num_gpus"), [(True, 8), (False, 2)])
def test_the_rate_bound_counts_every_engine_against_the_gpus_they_run_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], shared: bool, num_gpus: int) -> None:
    """Four SGLang DP ranks computing 15× the peak of the GPUs described, together. With DP
    attention (--tp 8 --dp 4 --enable-dp-attention: dp_rank r holds tp_ranks 2r and 2r+1)
    the ranks share those 8 GPUs, so the four ranks' sum is refused: each rank's mean (3.75×)
    against all 8 had passed, cautioned. As replicas (--dp 4 --tp 2: every rank tp_rank 0
    and 1) each runs its own 2 GPUs, 3.75× their peak: cautioned, not refused."""
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                           num_gpus=num_gpus)
    peak = peak_tok_s(dep)
    ranks = [f'dp_rank="{r}",tp_rank="{2 * r + t if shared else t}"'
             for r in range(4) for t in range(2)]
    path = tmp_path / "sglang.prom"
    path.write_text(sglang_ranks(ranks, 15 * peak / 4 * 60))
    code, out, err = run_cli(capsys, "observe", str(path), "--model", "llama-3.1-8b", "--gpu",
                             "h100", "--num-gpus", str(num_gpus))
    if shared:
        assert code == 2 and not out
        one_line(err)
        assert "by its 4 engines together" in err
        assert f"15.0× the {peak:,.0f} llama-3.1-8b computes on 8 x h100-sxm, shared by its 4 " \
            "DP-attention ranks at their peak" in err
    else:
        assert code == 0
        assert f"3.8× the {4 * peak:,.0f} llama-3.1-8b computes on 4 engines of 2 x h100-sxm " \
            "at their peak" in out


# -- the scrape order --------------------------------------------------------------------------


@pytest.mark.parametrize(("times", "shown"), [
    ((T0, T0 + 0.5), "1,764,953,600.5 s follows 1,764,953,600 s (+0.5 s)"),
    ((T0 + 60, T0 + 30), "1,764,953,630 s follows 1,764,953,660 s (-30 s)")])
def test_the_scrape_order_refusal_names_times_that_differ(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], times: tuple[float, float],
        shown: str) -> None:
    code, _, err = run(tmp_path, capsys, *(page(t, 0, 1_000, 1) for t in times))
    assert code == 2 and f"scrape_time {shown}" in err
    one_line(err)


# -- the pool at the server's own memory settings ---------------------------------------------


def modelled(out: str) -> tuple[float, list[str]]:
    report = json.loads(out)
    return report["pool_tokens_modelled"], report["notes"]


def test_the_pool_is_modelled_at_the_utilization_cache_config_info_states(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """gpu_memory_utilization="0.9" sizes the modelled pool as fit sizes it at 0.9 (434,112
    tokens beside the engine's 432,240), not at 0.34's default 1.0 (483,520, an 11 % gap
    cautioned); "None", vLLM's label where the flag was not given, leaves the default."""
    first, last = page(T0, 0, 1_000, 1), page(T0 + 60, 60_000, 121_000, 481)
    flags = ("--context", "1125", "--json")
    code, out, _ = run(tmp_path, capsys, first, last, extra=flags)
    assert code == 0
    tokens, notes = modelled(out)
    dep = h100_8b()  # vLLM, the engine a vllm: page names

    def pool(settings: EngineSettings) -> float:
        return EnginePool.modelled(kv_pool(dep, settings)).tokens

    at = pool(EngineSettings(gpu_memory_utilization=0.9, max_model_len=1125))
    assert tokens == at
    assert "gpu_memory_utilization 0.9, as the server's vllm:cache_config_info states it" in \
        " ".join(notes)
    code, out, _ = run(tmp_path, capsys, first.replace('"0.9"', '"None"'),
                       last.replace('"0.9"', '"None"'), extra=flags)
    tokens, notes = modelled(out)
    assert tokens == pool(EngineSettings(max_model_len=1125)) > at
    assert not any("cache_config_info states" in n for n in notes)


def test_a_utilization_no_flag_takes_is_noted_and_left_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, last = page(T0, 0, 1_000, 1, utilization="1.5"), \
        page(T0 + 60, 60_000, 121_000, 481, utilization="1.5")
    code, out, _ = run(tmp_path, capsys, first, last, extra=("--json",))
    assert code == 0
    _, notes = modelled(out)
    assert any("gpu_memory_utilization='1.5' is no setting vLLM takes" in n for n in notes)


def test_a_later_start_before_the_earlier_scrape_is_another_servers_page(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The second page's process started later than the first's, but an hour before the first
    scrape: it was running then, so a replica started after the first answered, not a
    restart (whose lifetime's counts were read as the window's)."""
    code, out, err = run(tmp_path, capsys, page(T0, 28_800_000, 7_200_000, 28_800, T0 - 7200),
                         page(T0 + 60, 14_400_000, 3_600_000, 14_400, T0 - 3600))
    assert code == 2 and not out
    one_line(err)
    assert "moves later between the scrapes 0 s and 60 s into the window" in err
    assert "3,600 s before the earlier scrape" in err


def test_the_peak_rate_is_the_dense_peak_over_two_flop_a_weight() -> None:
    """peak_tok_s's worked number: an H100's dense bf16 peak over 2 FLOP for each of
    Llama-3.1-8B's matmul weights a token multiplies against, about 65,917 tok/s."""
    dep = h100_8b()
    peak = peak_tok_s(dep)
    assert peak == pytest.approx(dep.dense_peak_flops_per_s / (2 * dep.matmul_params_per_token))
    assert round(peak) == pytest.approx(65_917, abs=1)
