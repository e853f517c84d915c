"""plan with data-parallel attention: a MoE's DP layouts searched beside tensor parallelism,
the winner's launch in the engine's flags and a simulate command that reruns its check."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import pytest

from ridgeline.candidate import Candidate, replica_deployment
from ridgeline.catalog import resolve_model
from ridgeline.cli import main
from ridgeline.engines import profile_for
from ridgeline.hardware import resolve_accelerator
from ridgeline.replica_sizing import size_replica
from ridgeline.search_space import data_parallel_layouts, data_parallel_space, search_space
from ridgeline.serving_load import Load, Slo

DEEPSEEK = resolve_model("deepseek-v3")
H200 = resolve_accelerator("h200-sxm")
# 16,000-token prompts, 8,000-token answers: TP8's MLA cache, whole on each of its 8 GPUs,
# holds about 58 of them, so one TP8 replica sustains under 0.2 req/s and two are 16 GPUs
LONG = ["deepseek-v3", "--gpus", "h200-sxm", "--rate", "0.2", "--input-len", "16000",
        "--output-len", "8000", "--slo-ttft-ms", "30000", "--slo-tpot-ms", "150",
        "--max-gpus", "8", "--workers", "1"]


def _replica(tp: int, ranks: int, engine: str = "vllm") -> Candidate:
    """A DeepSeek-V3 replica of ``ranks`` data-parallel ranks of ``tp`` H200s, experts EP."""
    return Candidate("h200-sxm", tp, 1, "as stored", "fp8", None, 64, 0.05, 1.0, 0.5, 1,
                     H200.price_per_hour_usd, True, "", (1.0, 1.0), expert_parallel=True,
                     data_parallel=ranks)


def test_deepseek_v3_plans_data_parallel_attention_where_tp8s_pool_is_too_small(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *LONG, "--no-dp", "--json"]) == 1  # TP8 alone: two replicas, 16 GPUs
    assert json.loads(capsys.readouterr().out)["winner"] is None
    assert main(["plan", *LONG, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    win = data["winner"]
    assert win["verified"] and win["data_parallel_size"] > 1 and win["expert_parallel"]
    assert win["tensor_parallel_size"] * win["data_parallel_size"] == 8 and win["replicas"] == 1
    launch = data["commands"]["vllm"].split()
    assert launch[launch.index("--tensor-parallel-size") + 1] == str(win["tensor_parallel_size"])
    assert launch[launch.index("--data-parallel-size") + 1] == str(win["data_parallel_size"])
    assert "--enable-expert-parallel" in launch
    # the check command reruns the same run: its p90s are the check's
    argv = shlex.split(data["check_command"])[1:]
    assert argv[argv.index("--data-parallel-size") + 1] == str(win["data_parallel_size"])
    assert main([*argv, "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["completed"] == win["sim_requests"] and sim["keeps_up"] is True
    assert sim["at_percentile"]["ttft_s"] == pytest.approx(win["sim_ttft_s"], rel=1e-12)
    assert sim["at_percentile"]["tpot_s"] == pytest.approx(win["sim_tpot_s"], rel=1e-12)
    assert sim["window_s"] == win["sim_window_s"]


def test_a_data_parallel_replica_is_sized_with_each_ranks_own_pool() -> None:
    """DP4 × TP2 keeps each rank's requests' cache on its own two GPUs, where TP8 copies it
    to all eight: more conversations, and more of this long-context load a replica takes."""
    load, slo = Load(0.2, "16000", "8000").for_sizing(), Slo(30.0, 0.15)
    tp8, dp4 = (size_replica(replica_deployment(DEEPSEEK, H200, tp, 1, "as stored", "fp8", True,
                                                "vllm", data_parallel_size=ranks),
                             profile_for("vllm"), load, slo, None, 2048)
                for tp, ranks in ((8, 1), (2, 4)))
    assert tp8 is not None and dp4 is not None
    assert dp4.batch > 2 * tp8.batch
    assert dp4.rate_req_s > load.rate_req_s > tp8.rate_req_s


def test_a_ranks_decodes_wait_through_the_other_ranks_prompt_steps() -> None:
    """The ranks step together, so a rank's decodes wait through every rank's prompt steps
    that fall apart from its own: N of them for rare prompts, one where every step has one."""
    from ridgeline.replica_sizing import lockstep_factor

    assert lockstep_factor(8, 0.1) == pytest.approx(5.7, abs=0.01)
    assert lockstep_factor(8, 1e-9) == pytest.approx(8.0)
    assert lockstep_factor(8, 1.0) == lockstep_factor(1, 0.1) == 1.0


def test_a_dense_model_gets_no_data_parallel_candidates() -> None:
    from ridgeline.plan import plan

    llama = resolve_model("llama-3.1-8b")
    assert not list(data_parallel_space(llama, ["h100-sxm", "h200-sxm"], 64, "vllm"))
    load, slo = Load(4.0, "lognormal:800,0.6", "lognormal:200,0.6"), Slo(0.5, 0.05, 90)
    searched = plan(llama, load, slo, ["h100-sxm"], 2, workers=1)  # one H100 holds the load
    assert searched == plan(llama, load, slo, ["h100-sxm"], 2, workers=1, data_parallel=False)
    assert searched.searched == len(list(search_space(llama, ["h100-sxm"], 2)))


def test_data_parallel_layouts_are_a_moes_on_the_engines_that_run_them() -> None:
    node = 8
    layouts = data_parallel_layouts(node, 64)
    assert layouts and all(tp * ranks <= node and ranks >= 2 and tp in (1, 2)
                           for tp, ranks in layouts)
    assert (1, node) in layouts  # MLA's cache whole on each GPU: one rank a GPU holds most
    assert all(tp * ranks <= 4 for tp, ranks in data_parallel_layouts(node, 4))
    assert not data_parallel_layouts(1, 64)  # a one-GPU card has no ranks to split
    space = list(data_parallel_space(DEEPSEEK, ["h200-sxm"], 8, "sglang"))
    assert {(tp, ranks) for _, tp, _, _, _, ranks in space} == set(layouts)
    assert not list(data_parallel_space(DEEPSEEK, ["h200-sxm"], 8, "trtllm"))


def test_a_data_parallel_launch_is_in_each_engines_own_flags() -> None:
    from ridgeline.hardware import device_memory_bytes
    from ridgeline.reports.launch_commands import command_line
    from ridgeline.sglang_memory import sglang_gpu_mem_bytes, sglang_memory_defaults

    c = _replica(1, 8)
    assert "(attention DP8 × TP1, experts EP8," in c.label and c.gpus == 8
    vllm = command_line("vllm", "deepseek-ai/DeepSeek-V3", c, 32768).split()
    assert vllm[vllm.index("--tensor-parallel-size") + 1] == "1"
    assert vllm[vllm.index("--data-parallel-size") + 1] == "8"
    assert "--enable-expert-parallel" in vllm
    sglang = command_line("sglang", "deepseek-ai/DeepSeek-V3", c, 32768).split()
    # SGLang's --tp-size is every GPU, attention over --tp-size ÷ --dp-size of them
    assert sglang[sglang.index("--tp-size") + 1] == "8"
    assert sglang[sglang.index("--dp-size") + 1] == "8"
    assert "--enable-dp-attention" in sglang and sglang[sglang.index("--ep-size") + 1] == "8"
    # its memory share is the DP-attention rule's, which holds back more for its buffers
    memory, _ = sglang_gpu_mem_bytes(H200, device_memory_bytes(H200))
    rule = sglang_memory_defaults(memory, 8, 1, None, None, 8)
    plain = sglang_memory_defaults(memory, 8, 1, None, None, 1)
    fraction = float(sglang[sglang.index("--mem-fraction-static") + 1])
    assert fraction == rule.mem_fraction_static < plain.mem_fraction_static


def test_an_sglang_data_parallel_check_command_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from ridgeline.reports.plan_commands import check_line

    c = replace(_replica(1, 8), verified=True, sim_window_s=(0.0, 30.0), sim_requests=40)
    line = check_line("deepseek-v3", Load(0.5, "2000", "100"), Slo(5.0, 0.2), "sglang", None,
                      c, 32768)
    argv = shlex.split(line)[1:]
    assert argv[argv.index("--num-gpus") + 1] == "8"  # its --tp-size: every GPU
    assert argv[argv.index("--dp-size") + 1] == "8" and "--enable-dp-attention" in argv
    assert main([*argv, "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["completed"] == c.sim_requests


def test_plan_pins_no_data_parallel_layout(capsys: pytest.CaptureFixture[str]) -> None:
    for flags in (["-dp", "8"], ["--dp-size", "8", "--enable-dp-attention", "--engine",
                                  "sglang"]):
        assert main(["plan", *LONG, *flags]) == 2
        err = capsys.readouterr().err
        assert "--no-dp" in err and "ridgeline simulate" in err and len(err.splitlines()) == 1
