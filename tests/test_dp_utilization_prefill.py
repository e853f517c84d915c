"""Data-parallel attention in `utilization` and `prefill` (the ranks fit, decode and simulate
model), the page's and utilization's llama.cpp refusal where llama-server's --fit runs one
with weights on the host, and two explain words in each engine's own names."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.chunked_prefill import prefill_steps, rank_prefill_steps
from ridgeline.cost import Seq, batch_shape
from ridgeline.data_parallel import rank_budget_tokens
from ridgeline.deployment import Deployment
from ridgeline.floors import prefill_floor
from ridgeline.hardware import resolve_accelerator
from ridgeline.llamacpp_fit_run import default_fit_run
from ridgeline.reports.decode import settings_knob
from ridgeline.reports.utilization import utilization_report
from ridgeline.roofline import arithmetic_share
from tests.conftest import run_cli

SGLANG_DP = ("--gpu", "h200", "--num-gpus", "8", "--engine", "sglang", "--dp-size", "8",
             "--enable-dp-attention")
VLLM_DP = ("--gpu", "h200", "--num-gpus", "1", "--engine", "vllm", "-dp", "8",
           "--enable-expert-parallel")


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def _dsv3_dp(engine: str = "sglang") -> Deployment:
    # 8 ranks of one GPU each: SGLang's --tp-size 8 --dp-size 8, vLLM's -tp 1 -dp 8
    return Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"), None,
                            None, 1, engine=engine, data_parallel_size=8,
                            expert_parallel=engine == "vllm")


@pytest.mark.parametrize("layout", [SGLANG_DP, VLLM_DP])
def test_utilization_under_dp_attention_counts_as_fit_and_decode(
        capsys: pytest.CaptureFixture[str], layout: tuple[str, ...]) -> None:
    fit = _json(capsys, "fit", "deepseek-v3", *layout, "--max-model-len", "8192")
    decode = _json(capsys, "decode", "deepseek-v3", *layout, "--context", "8192",
                   "--batch", "64")
    util = _json(capsys, "utilization", "--model", "deepseek-v3", *layout, "--context",
                 "8192", "--running", "64")
    assert util["conversations"] == fit["conversations"] \
        == decode["engine_max_batch"][0]["engine_max_batch"]
    assert util["data_parallel_size"] == 8
    assert util["first_whole_batch_to_ridge"] == fit["first_whole_batch_to_ridge"]
    # each rank multiplies its own share by its own copy of the dense weights, as fit's
    # stage batch (⌈64 ÷ 8⌉ = 8)
    dep = _dsv3_dp(layout[layout.index("--engine") + 1])
    assert util["stage_batch"] == dep.rank_sequences(64) == 8
    assert util["fraction_of_arithmetic"] == pytest.approx(
        arithmetic_share(dep.rank_sequences(64), util["bytes_per_weight"],
                         util["ridge_flop_per_byte"]))


def test_utilization_under_dp_attention_reads_the_ranks_summed(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "utilization", "--model", "deepseek-v3", *SGLANG_DP,
                             "--context", "32768", "--running", "16")
    assert code == 0, err
    held = utilization_report(resolve_accelerator("h200"), 16, dep=_dsv3_dp(),
                              context=32768, engine="sglang").kv_batch_limit
    assert held is not None
    assert f"({held // 8:,} on each of 8 data-parallel ranks" in out
    assert "summed over the 8 data-parallel ranks" in out
    # SGLang's --max-running-requests is the server's, divided over the ranks
    assert "--max-running-requests is only a ceiling (the server's, ÷ 8 on each rank)" in out
    assert "each of 8 data-parallel ranks multiplying 2 by its own copy" in out


def test_utilization_dp_flags_need_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "utilization", "--gpu", "h200", "--running", "8",
                           "--dp-size", "2")
    assert code == 2 and "--data-parallel-size" in err and "give --model" in err


def test_prefill_under_dp_attention_is_one_ranks_prompt(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A prompt runs whole on one rank: the floor is that rank's step, its FLOPs the terms
    its explain adds, the prompts dealt one a rank."""
    dep = _dsv3_dp()
    one = _json(capsys, "prefill", "deepseek-v3", *SGLANG_DP, "--prompt-len", "8192")
    floor = prefill_floor(dep, 8192)
    assert one["floor_time_s"] == pytest.approx(floor.time_s)
    assert one["flops"] == pytest.approx(floor.flops)
    code, out, _ = run_cli(capsys, "prefill", "deepseek-v3", *SGLANG_DP, "--prompt-len",
                           "8192", "--explain")
    assert code == 0 and "one data-parallel rank's step" in out
    assert "attention and the rest = -" not in out  # the TP form's residual, read wrongly
    assert "each prompt runs whole on one of the 8 ranks" in out
    # 8 prompts over 8 ranks: one a rank, the floor the busiest's (its one prompt's attention,
    # the experts on all 8 prompts' tokens): more than one prompt's, less than 8 on one rank
    eight = prefill_floor(dep, 8192, 8)
    assert floor.time_s < eight.time_s < 8 * floor.time_s


def test_prefill_steps_under_dp_are_each_ranks_under_its_budget(
        capsys: pytest.CaptureFixture[str]) -> None:
    # vLLM: --max-num-batched-tokens each engine core's; 8 prompts over 8 ranks run in one step
    steps = rank_prefill_steps(8192, 8, 8192, True, 8)
    assert len(steps) == 1 and len(prefill_steps(8192, 8, 8192, True)) == 8
    assert batch_shape(_dsv3_dp("vllm"), steps[0]) == batch_shape(
        _dsv3_dp("vllm"), [Seq(8192, 0)] * 8)
    out = _json(capsys, "prefill", "deepseek-v3", *VLLM_DP, "--prompt-len", "8192",
                "--batch", "8")
    assert out["prompt_steps"] == 1
    # SGLang: --chunked-prefill-size the server's, ÷ --dp-size on each rank
    sg = _json(capsys, "prefill", "deepseek-v3", *SGLANG_DP, "--prompt-len", "8192")
    rank = rank_budget_tokens("sglang", 8192, 8)
    assert sg["max_num_batched_tokens"] == rank
    assert sg["prompt_steps"] == len(prefill_steps(8192, 1, rank, True))


def test_utilization_and_page_count_fits_llamacpp_run_with_weights_on_the_host(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-Next q4_k_m on an L40S: no slot with every layer on the GPU, one under
    llama-server's default --fit with weights on the host, as `fit` prints it; utilization
    and the page count that run (llamacpp_fit_run), and price none of it."""
    line = ("--gpu", "l40s", "--engine", "llama.cpp", "--weights", "q4_k_m")
    fit = _json(capsys, "fit", "qwen3-next-80b-a3b", *line, "--max-model-len", "32768")
    assert fit["conversations"] >= 1
    dep = Deployment.build(resolve_model("qwen3-next-80b-a3b"), resolve_accelerator("l40s"),
                           "q4_k_m", None, 1, engine="llama.cpp-cuda")
    hosted = default_fit_run(dep, 32768)
    assert hosted is not None
    assert hosted.host_weight_bytes == pytest.approx(fit["offload"]["host_weight_bytes"])
    util = _json(capsys, "utilization", "--model", "qwen3-next-80b-a3b", *line,
                 "--context", "32768", "--running", "1")
    assert util["conversations"] == hosted.held == fit["conversations"]
    assert util["fit_host_weight_bytes"] == hosted.host_weight_bytes
    code, _, err = run_cli(capsys, "page", "qwen3-next-80b-a3b", "--gpu", "l40s", "--engine",
                           "llama.cpp", "--weights", "q4_k_m", "--counts", "1", "--json")
    assert code == 2 and "default --fit runs 1 conversation with" in err
    assert "the page has no host bandwidth to price those steps" in err


def test_decode_explain_names_sglangs_context_length(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "decode", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8",
                           "--engine", "sglang", "--context", "32768", "--explain")
    assert code == 0
    assert f"[started at {settings_knob('sglang', 'max_model_len')} " in out
    assert "started at max_model_len" not in out


def test_fit_explain_llamacpp_accounting_does_not_count_slots(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", "qwen2.5-7b", "--gpu", "rtx-4090", "--engine",
                           "llama.cpp", "--weights", "q4_k_m", "-np", "8", "--max-model-len",
                           "131072", "--explain")
    assert code == 0 and "-np 8" in out
    assert "4 slots" not in out


@pytest.mark.parametrize("layout", [SGLANG_DP, VLLM_DP])
def test_prefill_under_dp_expects_the_ttft_simulate_gives_one_prompt(
        capsys: pytest.CaptureFixture[str], layout: tuple[str, ...]) -> None:
    """One 8,192-token prompt on an idle server with data-parallel attention: prefill's
    expectation is simulate's TTFT (the same rank's steps under the same token budget)."""
    line = ("deepseek-v3", *layout, "--max-model-len", "16384")
    expected = _json(capsys, "prefill", *line, "--prompt-len", "8192")["expected"]["time_s"]
    sim = _json(capsys, "simulate", *line, "--num-requests", "1", "--rate", "0.01",
                "--input-len", "8192", "--output-len", "2")
    assert expected == pytest.approx(sim["ttft_s"]["mean"], rel=1e-9)


def test_a_large_data_parallel_count_reads_with_a_thousands_separator(
        capsys: pytest.CaptureFixture[str]) -> None:
    """-dp 300 over 8 GPUs a rank: the experts span 2,400 GPUs, written as every other
    count is."""
    from tests.conftest import run_cli
    code, out, err = run_cli(capsys, "prefill", "deepseek-v3", "--gpu", "h200", "--num-gpus",
                             "8", "--prompt-len", "4096", "-dp", "300", "--enable-expert-parallel")
    gpus = 300 * 8
    assert code == 0 and f"{gpus:,} GPUs" in out + err and f" {gpus} GPUs" not in out + err
