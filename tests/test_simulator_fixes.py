"""`ridgeline simulate` as the engines run: each engine's prefix-cache timing, overload
read without a window, llama-server's -c pool, TensorRT-LLM's whole
contexts, one ITL per streamed chunk, and two messages."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.sim.blocks import BlockPool
from ridgeline.sim.config import SimConfig, sim_config
from ridgeline.sim.request import Request
from ridgeline.sim.scheduler import Scheduler, SchedulerConfig
from ridgeline.sim.simulator import Simulator
from ridgeline.sim.workload import Workload, read_trace
from tests.conftest import run_cli

H100 = resolve_accelerator("h100")
DEP = Deployment.build(resolve_model("llama-3.1-8b"), H100, "bf16")


def _engine(name: str) -> Deployment:
    return replace(DEP, engine=name)


def _first_step(config: SchedulerConfig, prompts: list[int], prefix: int = 0) -> list[int]:
    """The new tokens of each request in the first step, all waiting at t = 0."""
    s = Scheduler(config, BlockPool(10_000, 16))
    for i, p in enumerate(prompts):
        s.add(Request(i, 0.0, p, 5, prefix_group=0 if prefix else -1, prefix_tokens=prefix))
    return [b.tokens for b in s.schedule(0.0)]


# -- 1. prefix cache: vLLM publishes at scheduling, SGLang and TensorRT-LLM after the step --

def test_vllm_hits_a_prefix_scheduled_earlier_in_the_same_step() -> None:
    """Three users of one 800-token prefix start together: vLLM's allocate_slots caches the
    first one's blocks as it schedules them, so the other two compute 1,000 − 800 = 200."""
    assert _first_step(SchedulerConfig(64, 8192), [1000] * 3, prefix=800) == [1000, 200, 200]


def test_sglang_and_trtllm_publish_a_prompt_only_once_it_is_computed() -> None:
    for engine in ("sglang", "trtllm"):
        assert not sim_config(_engine(engine)).cache_on_schedule
    assert sim_config(DEP).cache_on_schedule
    config = SchedulerConfig(64, 8192, cache_on_schedule=False)
    assert _first_step(config, [1000] * 3, prefix=800) == [1000, 1000, 1000]


def test_eight_users_of_one_prefix_hit_350_blocks_and_a_third_of_the_ttft() -> None:
    """8 × 1,000 tokens, 800 shared, 8 users at once. Seven hit the prefix's whole blocks
    (50 of 16 each, 350; from v0.34 12 of 64, 84), and the first step computes about 1,000 +
    7 × 200 tokens, not 8,000."""
    work = [Request(i, 0.0, 1000, 5, prefix_group=0, prefix_tokens=800) for i in range(8)]
    config = sim_config(DEP)
    result = Simulator(DEP, profile_for("vllm"), config).run(iter(work), closed_loop=8)
    assert result.prefix_hit_blocks == 7 * (800 // config.block_size)
    later = [Request(i, 0.0, 1000, 5, prefix_group=0, prefix_tokens=800) for i in range(8)]
    after = Simulator(DEP, profile_for("vllm"), replace(config, cache_on_schedule=False)).run(
        iter(later), closed_loop=8)
    assert after.prefix_hit_blocks == 0
    assert result.percentiles("ttft")["mean"] < 0.4 * after.percentiles("ttft")["mean"]


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_the_fast_path_publishes_as_the_step_loop_does(engine: str) -> None:
    """Chunked prompts inside a long shared prefix (budget 512, prefix 1,500), a tight pool:
    the summed decodes and the plain step loop publish the same blocks at the same time."""
    dep = _engine(engine)
    config = sim_config(dep)  # a pool of 24,000 tokens, whatever the engine's block size
    config = replace(config, num_blocks=24_000 // config.block_size, max_num_batched_tokens=512)
    work = Workload(150, "uniform:1600,2400", "uniform:20,200", rate=6.0, prefix_groups=2,
                    prefix_len=1500, seed=4)
    fast = Simulator(dep, profile_for(engine), config).run(iter(work))
    slow = Simulator(dep, profile_for(engine), replace(config, fast_path=False)).run(iter(work))
    assert fast.prefix_hit_blocks == slow.prefix_hit_blocks > 0
    assert (fast.steps, fast.preemptions) == (slow.steps, slow.preemptions)
    assert fast.duration_s == pytest.approx(slow.duration_s, rel=1e-9)
    assert fast.percentiles("ttft")["p99"] == pytest.approx(slow.percentiles("ttft")["p99"],
                                                            rel=1e-9)


# -- 2. an overload below 25 % is flagged without --window ----------------------------------

LOGNORMAL = ["--input-len", "lognormal:1000,0.8", "--output-len", "lognormal:250,0.8"]


def _overloaded(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, float] | None:
    assert main(["simulate", "llama-3.1-8b", "--gpu", "h100", *argv, "--json"]) == 0
    flag: dict[str, float] | None = json.loads(capsys.readouterr().out)["overloaded"]
    return flag


@pytest.mark.usefixtures("simulate_once")  # one run for its --json and its text
def test_llamacpp_offered_a_seventh_more_than_it_serves_is_overloaded(
        capsys: pytest.CaptureFixture[str]) -> None:
    """1.05 req/s offered, 0.90 served: about 14 % of the arrivals pile up, which the rule of
    20 % of all requests waiting never read at any run length (3,000 requests, 2,850 s, read
    as 10,000 do)."""
    flag = _overloaded(capsys, "--engine", "llama.cpp", "--rate", "1.05", "--num-requests",
                       "3000", *LOGNORMAL)
    assert flag is not None
    assert flag["offered_req_s"] == pytest.approx(1.05, rel=0.03)
    assert flag["served_req_s"] == pytest.approx(0.90, rel=0.03)
    assert main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "llama.cpp",
                 "--rate", "1.05", "--num-requests", "3000", *LOGNORMAL]) == 0
    assert "OVERLOADED: requests arrive at 1.05 req/s" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["--rate", "8", "--num-requests", "2000", *LOGNORMAL],  # docs/simulate.md's example
    ["--rate", "8", "--num-requests", "2000", *LOGNORMAL, "--seed", "5"],
    ["--rate", "8", "--num-requests", "2000", *LOGNORMAL, "--arrival", "gamma",
     "--burstiness", "0.3"],
    ["--engine", "llama.cpp", "--rate", "0.85", "--num-requests", "3000", *LOGNORMAL],
    ["--engine", "sglang", "--rate", "8", "--num-requests", "2000", *LOGNORMAL],
    ["--rate", "8", "--num-requests", "100"],
    ["--concurrency", "64", "--num-requests", "640", "--input-len", "uniform:2200,2800",
     "--output-len", "uniform:100,300"],
])
def test_healthy_loads_ending_in_a_drain_are_not_overloaded(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert _overloaded(capsys, *argv) is None


def test_the_backlog_read_is_of_the_arrivals_past_the_fill() -> None:
    """Recorder.falls_behind: 14 req/s of the chat load on one H100 (about 11 served) leaves
    more than 5 % of the arrivals past the fill behind; 8 req/s leaves none to speak of."""
    def read(rate: float) -> tuple[int, int, float] | None:
        work = Workload(3000, "lognormal:1000,0.8", "lognormal:250,0.8", rate=rate, seed=1)
        return Simulator(DEP, profile_for("vllm"), sim_config(DEP)).run(
            iter(work)).rec.falls_behind()

    behind = read(14.0)
    assert behind is not None
    arrived, left, seconds = behind
    assert arrived == pytest.approx(14 * seconds, rel=0.1) and left < 0.95 * arrived
    assert read(8.0) is None


# -- 3. llama-server's pool is its -c, and it does not preempt ------------------------------

def _settings(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "llama.cpp",
                 "--concurrency", "4", "--num-requests", "4", "--input-len", "2000",
                 "--output-len", "10", *argv, "--json"]) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    return out


def test_llamacpp_allocates_its_minus_c_cells_not_every_free_byte(
        capsys: pytest.CaptureFixture[str]) -> None:
    """-c 0 is the trained context (131,072 cells for Llama-3.1-8B), as -ngl auto already
    said; --max-model-len 8192 over 4 slots is -c 32768 (fit's `llama-server -c 32768 -np
    4`), with -ngl auto too; never the 525,925 cells an H100 has room for."""
    assert _settings(capsys)["settings"]["num_blocks"] == 131_072  # type: ignore[index]
    given = _settings(capsys, "--max-model-len", "8192")
    assert given["settings"]["num_blocks"] == 32_768  # type: ignore[index]
    fitted = _settings(capsys, "--max-model-len", "8192", "-ngl", "auto")
    assert fitted["settings"]["num_blocks"] == 32_768  # type: ignore[index]


def test_llamacpp_sizes_minus_c_for_the_conversations_that_fit_as_fit_starts_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen2.5-32B Q4_K_M on an RTX 4090 holds 2 conversations of 8,192 tokens, not its 4
    slots' worth: `fit` starts it with -c 16384 -np 4, and simulate runs that cache."""
    argv = ["--weights", "q4_k_m", "--engine", "llama.cpp", "--max-model-len", "8192"]
    assert main(["fit", "qwen2.5-32b", "--gpu", "rtx-4090", *argv, "--json"]) == 0
    launched = json.loads(capsys.readouterr().out)["llama_server_c"]
    assert main(["simulate", "qwen2.5-32b", "--gpu", "rtx-4090", *argv, "--concurrency", "2",
                 "--num-requests", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["settings"]["num_blocks"] == launched == 16_384


@pytest.mark.parametrize("argv", [
    # -c 0 with every layer asked on the GPU: 131,072 cells beside 40 GiB
    ["llama-3.1-70b", "--weights", "q4_k_m", "-ngl", "all"],
    ["llama-3.1-70b", "--weights", "q4_k_m", "--max-model-len", "131072"],  # not even one
])
def test_a_minus_c_past_the_card_does_not_fit(capsys: pytest.CaptureFixture[str],
                                               argv: list[str]) -> None:
    code, _, err = run_cli(capsys, "simulate", argv[0], "--gpu", "h100", "--engine",
                           "llama.cpp", "--rate", "1", "--num-requests", "10", *argv[1:])
    assert code == 2 and "does not fit" in err and "-c " in err
    assert len(err.strip().splitlines()) == 1


def test_llamacpps_default_fit_shrinks_a_minus_c_past_the_card(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The same -c 0 with no -ngl on a --fit build: llama-server shrinks the trained context
    to what the card leaves (never under --fit-ctx) before it moves a layer, and runs."""
    code, out, _ = run_cli(capsys, "simulate", "llama-3.1-70b", "--gpu", "h100", "--engine",
                           "llama.cpp", "--rate", "1", "--num-requests", "10", "--weights",
                           "q4_k_m", "--json")
    cells = json.loads(out)["settings"]["num_blocks"]
    assert code == 0 and 4096 <= cells < 131_072


def test_llamacpp_running_out_of_cells_is_cautioned_not_passed_as_preemption(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Four 60,000-token prompts in 131,072 shared cells: llama-server would fail requests
    ("Context size has been exceeded"); the report says so beside its preemption count."""
    code, out, _ = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--engine",
                           "llama.cpp", "--concurrency", "4", "--num-requests", "4",
                           "--input-len", "60000", "--output-len", "100", "--json")
    report = json.loads(out)
    assert code == 0 and report["preemptions"] > 0
    assert any("llama-server does not preempt" in c for c in report["cautions"])
    code, out, _ = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--concurrency",
                           "4", "--num-requests", "4", "--input-len", "2000", "--output-len",
                           "100", "--json")
    assert not any("does not preempt" in c for c in json.loads(out)["cautions"])


def test_llamacpps_full_cache_caution_names_the_slots_that_fit_where_max_model_len_was_given(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--max-model-len 32,000 where memory holds 3 such conversations: -c is 3 × 32,000 and
    the default 4 slots outgrow it. The caution names --parallel 3 (fit's -np), not
    --max-model-len, already given; --parallel 3 runs the same requests without a
    preemption, at most 3 at once."""
    argv = ("simulate", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda",
            "--weights", "q4_k_m", "--max-model-len", "32000", "--flash-attn", "off",
            "--concurrency", "4", "--num-requests", "4", "--input-len", "30000",
            "--output-len", "100", "--json")
    code, out, err = run_cli(capsys, *argv)
    report = json.loads(out)
    cells = report["settings"]["num_blocks"] * report["settings"]["block_size"]
    fits = cells // 32000
    assert code == 0 and report["preemptions"] > 0 and 0 < fits < 4, err
    (caution,) = [c for c in report["cautions"] if "llama-server does not preempt" in c]
    assert f"give fewer slots, --parallel {fits} (as `ridgeline fit` starts it)" in caution
    assert "(--max-model-len, which sizes -c" not in caution
    fit = json.loads(run_cli(capsys, "fit", *argv[1:12], "--json")[1])
    assert fit["llama_server_np"] == fits
    code, out, err = run_cli(capsys, *argv, "--parallel", str(fits))
    fewer = json.loads(out)
    assert code == 0 and fewer["preemptions"] == 0, err
    assert fewer["running"]["max"] == fits


def test_llamacpps_full_cache_caution_without_max_model_len_says_both_remedies() -> None:
    """Without --max-model-len (the -c it sized unknown) the caution gives both ways out."""
    from ridgeline.reports.simulate_cautions import full_cache_caution

    said = full_cache_caution("llama.cpp-cuda", 2)
    assert "--max-model-len × slots) or fewer slots (--parallel)" in said
    assert "--parallel 3" in full_cache_caution("llama.cpp-cuda", 2, 32000, 96000, 4)
    assert "--parallel)" in full_cache_caution("llama.cpp-cuda", 2, 32000, 128000, 4)
    assert full_cache_caution("vllm", 2, 32000, 96000, 4) == ""


# -- 4. TensorRT-LLM runs a context whole by default ----------------------------------------

def test_trtllm_waits_to_run_a_context_whole_where_vllm_chunks_it() -> None:
    """Three 3,000-token prompts, max_num_tokens 8,192: TensorRT-LLM (enable_chunked_prefill
    off) runs two and the third next step; vLLM fills the budget with a 2,192-token chunk."""
    assert not sim_config(_engine("trtllm")).chunked_prefill
    assert sim_config(DEP).chunked_prefill and sim_config(_engine("sglang")).chunked_prefill
    whole = SchedulerConfig(64, 8192, reserve_full=True, chunked_prefill=False)
    assert _first_step(whole, [3000] * 3) == [3000, 3000]
    assert _first_step(SchedulerConfig(64, 8192), [3000] * 3) == [3000, 3000, 2192]


def test_trtllm_with_chunked_prefill_fills_the_step_as_vllm_does() -> None:
    """enable_chunked_prefill on: the same three prompts' first step is vLLM's, a 2,192-token
    chunk of the third filling max_num_tokens; off (the default), the config is as before."""
    from ridgeline.memory import EngineSettings

    on = sim_config(_engine("trtllm"), EngineSettings(enable_chunked_prefill=True))
    off = sim_config(_engine("trtllm"))
    assert on.chunked_prefill and not off.chunked_prefill
    assert on == replace(off, chunked_prefill=True)  # nothing else moves
    assert off == sim_config(_engine("trtllm"), EngineSettings(enable_chunked_prefill=False))
    step = SchedulerConfig(64, on.max_num_batched_tokens, reserve_full=True,
                           chunked_prefill=on.chunked_prefill)
    assert _first_step(step, [3000] * 3) == _first_step(
        SchedulerConfig(64, on.max_num_batched_tokens), [3000] * 3) == [3000, 3000, 2192]


def test_chunked_prefill_is_tensorrt_llms_setting_alone() -> None:
    from ridgeline.memory import EngineSettings

    for engine in ("vllm", "sglang"):
        with pytest.raises(InputError, match="TensorRT-LLM's LLM API option"):
            sim_config(_engine(engine), EngineSettings(enable_chunked_prefill=True))


def test_trtllm_chunked_prefill_times_three_prompts_as_vllm_at_its_budget(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Three 3,000-token prompts at once: whole, TensorRT-LLM answers two after a 6,000-token
    step and the third a step later; chunked, its first step takes 8,192 tokens, so the two
    wait longer (the third ends in the second step either way), TTFTs equal to vLLM's at the
    same budget (one calibrated step cost for both)."""
    argv = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--concurrency", "3",
            "--num-requests", "3", "--input-len", "3000", "--output-len", "2", "--json")

    def ttft(*more: str) -> dict[str, float]:
        code, out, err = run_cli(capsys, *argv, *more)
        assert code == 0, err
        return dict(json.loads(out)["ttft_s"])

    whole = ttft("--engine", "trtllm")
    chunked = ttft("--engine", "trtllm", "--enable_chunked_prefill")
    assert chunked == ttft("--engine", "vllm", "--max-num-batched-tokens", "8192")
    assert whole["p50"] < chunked["p50"] and whole["mean"] < chunked["mean"]


def test_trtllm_whole_contexts_keep_the_fast_path_equal_to_the_step_loop() -> None:
    dep = _engine("trtllm")
    config = replace(sim_config(dep), max_num_batched_tokens=3000)
    work = Workload(300, "lognormal:1500,0.8", "lognormal:200,0.8", rate=12.0, seed=7)
    fast = Simulator(dep, profile_for("trtllm"), config).run(iter(work))
    slow = Simulator(dep, profile_for("trtllm"), replace(config, fast_path=False)).run(
        iter(work))
    assert (fast.steps, fast.completed) == (slow.steps, slow.completed)
    assert fast.duration_s == pytest.approx(slow.duration_s, rel=1e-9)
    assert fast.rec.over_budget_prompts == slow.rec.over_budget_prompts > 0


def test_a_trtllm_prompt_past_max_num_tokens_is_refused_as_the_engine_refuses_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM, enable_chunked_prefill off, refuses a prompt past max_num_tokens ("The
    sum of prompt length …, query length (0) should not exceed max_num_tokens"): three such
    prompts are every request, so simulate answers "does not run" (exit 2), not latencies of
    a chunked engine; beside shorter prompts they are counted rejected, with the remedy."""
    code, out, err = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--engine",
                             "trtllm", "--rate", "1", "--num-requests", "3", "--input-len",
                             "10000", "--output-len", "5")
    assert code == 2 and "refused every request" in err and "max_num_tokens 8,192" in err
    assert "--enable_chunked_prefill" in err and len(err.strip().splitlines()) == 1
    code, out, _ = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--engine",
                           "trtllm", "--rate", "1", "--num-requests", "20", "--input-len",
                           "uniform:6000,10000", "--output-len", "5", "--json")
    report = json.loads(out)
    over = report["rejected"]
    assert code == 0 and 0 < over < 20 and report["completed"] == 20 - over
    assert "contexts whole" in report["settings"]["capacity_policy"]
    assert [n for reason, n in report["rejected_reasons"].items()
            if "max_num_tokens 8,192" in reason] == [over]
    assert any(c.startswith(f"{over} prompts longer than max_num_tokens 8,192") and
               "refuses them" in c for c in report["cautions"])
    code, out, _ = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--engine",
                           "trtllm", "--rate", "1", "--num-requests", "3", "--input-len",
                           "10000", "--output-len", "5", "--enable_chunked_prefill", "--json")
    assert code == 0 and json.loads(out)["completed"] == 3  # chunked: it runs them
    code, out, _ = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "1",
                           "--num-requests", "3", "--input-len", "10000", "--output-len", "5",
                           "--json")
    assert not any("max_num_tokens" in c for c in json.loads(out)["cautions"])  # vLLM chunks


# -- 5. one ITL per streamed chunk; messages --------------------------------------------------

def test_speculative_itl_counts_one_gap_per_streamed_chunk() -> None:
    """One request, 200 tokens, 3 drafts at 0.7: after the first token each verify step
    streams its 2.53 tokens as one chunk, so ITL has one sample a step (as vllm bench serve
    appends one per chunk), not one per token."""
    config = SimConfig(num_blocks=1000, block_size=16, max_num_seqs=8,
                       max_num_batched_tokens=2048, max_model_len=4096, spec_tokens=3,
                       spec_acceptance=0.7)
    result = Simulator(DEP, profile_for("vllm"), config).run(iter([Request(0, 0.0, 1000, 200)]))
    itl = result.rec.hist["itl"]
    assert itl.total == result.steps - 1 < 199


def test_a_percentile_with_no_tpot_says_none(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2",
                           "--num-requests", "50", "--output-len", "1", "--percentile", "90")
    line = next(x for x in out.splitlines() if x.startswith("p90"))
    assert code == 0 and "TPOT none" in line and "- ms" not in line


@pytest.mark.parametrize(("name", "text"), [("rows.json", "[1, 2, 3]"),
                                            ("rows.jsonl", "1\n2\n")])
def test_a_trace_of_non_objects_says_rows_must_be_objects(tmp_path: Path, name: str,
                                                         text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError, match=r"trace rows must be objects.*got int"):
        read_trace(str(path))


def test_bench_simulate_serving_reads_the_rows_the_simulator_keeps(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """scripts/bench_simulate_serving.py reads the per-request rows --export writes; they
    gained a column (offered_arrival_s) that it did not unpack, and it stopped at its first
    row with a ValueError."""
    spec = importlib.util.spec_from_file_location(
        "bench_simulate_serving",
        Path(__file__).resolve().parent.parent / "scripts" / "bench_simulate_serving.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, script)  # its dataclasses look it up
    spec.loader.exec_module(script)
    config = SimConfig(num_blocks=20_000, block_size=16, max_num_seqs=64,
                       max_num_batched_tokens=2048, max_model_len=32768)
    result = Simulator(DEP, profile_for("vllm"), config).run(
        iter(Workload(40, "200", "20", seed=0)), closed_loop=4, keep_rows=True)
    served = script.read_served(result.rec.rows, 4, False, False, result.duration_s)
    assert served.requests == result.completed == 40
    assert served.output_tok_s == pytest.approx(40 * 20 / result.duration_s)


def test_trtllm_refuses_a_request_whose_whole_reservation_outgrows_the_pool() -> None:
    """TensorRT-LLM reserves a request's whole life, the never-fed last token's slot
    included: 900 + 61 tokens are 61 blocks of 16 on a 60-block pool, which it can never
    admit. That request is rejected with its reason and the others run, as vLLM's check
    rejects one past its own need (960 cached tokens alone would be 60 blocks); the whole run
    had failed with "cannot schedule"."""
    trt = SimConfig(num_blocks=60, block_size=16, max_num_seqs=16, max_num_batched_tokens=2048,
                    max_model_len=32768, reserve_full=True, chunked_prefill=False,
                    cache_on_schedule=False)
    requests = [Request(0, 0.0, 900, 61), Request(1, 0.0, 200, 20)]
    result = Simulator(_engine("trtllm"), profile_for("trtllm"), trt).run(iter(requests))
    assert result.completed == 1
    assert list(result.rec.rejected.values()) == [1]
    assert "needs more KV blocks than its pool's 60" in next(iter(result.rec.rejected))
    # without the reservation (vLLM's policy) the same request runs: 60 blocks hold it
    vllm = replace(trt, reserve_full=False, chunked_prefill=True, cache_on_schedule=True)
    assert Simulator(DEP, profile_for("vllm"), vllm).run(
        iter([Request(0, 0.0, 900, 61)])).completed == 1
