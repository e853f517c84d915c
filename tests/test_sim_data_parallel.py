"""simulate under data-parallel attention (sim/data_parallel.py): each rank its own scheduler,
queue and pool, arrivals dealt as the engine deals them, every step all ranks together at
decode's data-parallel price. DeepSeek-V3 as stored on 8 x H200, DP8 + EP8 against TP8."""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import replace
from unittest import mock

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cost import (
    DP_EXCHANGE,
    BatchShape,
    Seq,
    batch_shape,
    decode_batch,
    experts_prompt,
    rank_shape,
    shape_time_s,
    step_cost,
)
from ridgeline.engines import profile_for
from ridgeline.memory import EngineSettings
from ridgeline.reports.simulate_engine import all_ranks
from ridgeline.sim.config import SimConfig, sim_config
from ridgeline.sim.data_parallel import DataParallelSimulator, dispatch_method, rank_config
from ridgeline.sim.pipeline import run_replica
from ridgeline.sim.scheduler import Scheduled
from ridgeline.sim.timer import StepTimer
from ridgeline.sim.workload import Workload
from tests.conftest import run_cli

DP8 = ["deepseek-v3", "--gpu", "h200", "-dp", "8", "--enable-expert-parallel",
       "--max-model-len", "32k"]
SGLANG_DP8 = ["deepseek-v3", "--gpu", "h200", "--engine", "sglang", "--num-gpus", "8",
              "--dp-size", "8", "--enable-dp-attention", "--max-model-len", "32k"]


def deepseek_dp8(engine: str = "vllm") -> Deployment:
    return Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"),
                            num_gpus=1, engine=engine, expert_parallel=True,
                            data_parallel_size=8)


def simulator(engine: str = "vllm") -> DataParallelSimulator:
    dep = deepseek_dp8(engine)
    config = sim_config(dep, EngineSettings(max_model_len=32_000))
    return DataParallelSimulator(dep, profile_for(engine), config)


def simulate_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, "simulate", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_dp8_runs_as_many_32k_requests_at_once_as_fit_holds_and_tp8_far_fewer(
        capsys: pytest.CaptureFixture[str]) -> None:
    load = ["--rate", "inf", "--num-requests", "150", "--input-len", "31000",
            "--output-len", "200"]
    held = {}
    for name, flags in (("dp8", DP8), ("tp8", ["deepseek-v3", "--gpu", "h200", "--num-gpus",
                                               "8", "--max-model-len", "32k"])):
        code, out, _ = run_cli(capsys, "fit", *flags, "--json")
        assert code == 0
        held[name] = (json.loads(out)["conversations"],
                      simulate_json(capsys, *flags, *load)["running"]["max"])
    # each run's most requests at once is what fit holds at 32K (its requests a little
    # shorter, 31,200 tokens at most: a block's rounding may seat one more)
    for fit_holds, ran in held.values():
        assert fit_holds <= ran <= fit_holds * 1.1
    assert held["dp8"][1] > 4 * held["tp8"][1]


def test_itl_at_low_load_is_decodes_dp_step_for_the_same_batch(
        capsys: pytest.CaptureFixture[str]) -> None:
    # eight users, one on each rank: every step is decode's batch of 8 on DP8
    report = simulate_json(capsys, *DP8, "--concurrency", "8", "--num-requests", "40",
                           "--input-len", "1000", "--output-len", "50")
    code, out, _ = run_cli(capsys, "decode", *DP8[:6], "--batch", "8", "--context", "1025",
                           "--json")
    assert code == 0
    decode_s = json.loads(out)["points"][0]["expected"]["time_s"]
    assert report["itl_s"]["p50"] == pytest.approx(decode_s, rel=0.01)


def test_a_step_of_one_decode_a_rank_is_step_cost_of_the_whole_batch() -> None:
    sim = simulator()
    requests = list(Workload(8, "100", "10", 1.0, "constant", seed=0))
    batches = [[Scheduled(r, 1, 2000)] for r in requests]
    dep = sim.dep
    whole = shape_time_s(dep, batch_shape(dep, decode_batch(8, 2000)), sim.profile)
    assert sim.step_s(batches) == pytest.approx(whole, rel=1e-12)
    # the busiest rank paces the step; an idle rank adds nothing
    heavier = [[Scheduled(requests[0], 512, 0)], *batches[1:]]
    assert sim.step_s(heavier) > sim.step_s(batches)
    alone = shape_time_s(dep, rank_shape(sim.timer.windows, [2000], []), sim.profile)
    assert sim.step_s([batches[0], *[[]] * 7]) == pytest.approx(alone, rel=1e-12)


def test_the_timer_prices_every_ranks_tokens_as_step_cost_does() -> None:
    dep = deepseek_dp8()
    profile = profile_for("vllm")
    shape = rank_shape(StepTimer(dep, profile).windows, [3000] * 4, [Seq(256, 0)])
    gathered: BatchShape = shape._replace(all_tokens=2000)
    timer = StepTimer(dep, profile)
    assert timer.time_s(gathered) == pytest.approx(shape_time_s(dep, gathered, profile))
    assert timer.time_s(gathered) > timer.time_s(shape)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_load_spreads_over_the_ranks_and_they_step_together(engine: str) -> None:
    sim = simulator(engine)
    result = sim.run(iter(Workload(400, "uniform:200,2000", "uniform:20,200", 40.0,
                                   "poisson", seed=3)))
    assert result.completed == 400
    assert sum(sim.dealt) == 400
    if dispatch_method(engine) == "round robin":
        assert set(sim.dealt) == {50}
    else:  # the least loaded: no rank left out, none given twice its share
        assert min(sim.dealt) > 0 and max(sim.dealt) < 2 * 400 / 8
    assert {rank.now_s for rank in sim.ranks} == {sim.now_s}  # idle ranks joined each step
    assert all(not rank.scheduler.running and rank.pool.usage == 0 for rank in sim.ranks)


def test_run_replica_takes_the_data_parallel_simulator() -> None:
    dep = deepseek_dp8()
    config = sim_config(dep, EngineSettings(max_model_len=32_000))
    work = Workload(50, "500", "20", 5.0, "constant", seed=0)
    one = run_replica(dep, profile_for("vllm"), config, work)
    sim = DataParallelSimulator(dep, profile_for("vllm"), config)
    two = sim.run(iter(Workload(50, "500", "20", 5.0, "constant", seed=0)))
    assert one.duration_s == two.duration_s and one.steps == two.steps


def test_sglang_ranks_take_the_servers_chunk_divided(capsys: pytest.CaptureFixture[str]) -> None:
    dep = deepseek_dp8("sglang")
    config = sim_config(dep, EngineSettings(max_model_len=32_000))
    assert rank_config("sglang", config, 8).max_num_batched_tokens \
        == config.max_num_batched_tokens // 8
    assert rank_config("vllm", config, 8).max_num_batched_tokens \
        == config.max_num_batched_tokens
    report = simulate_json(capsys, *SGLANG_DP8, "--rate", "4", "--num-requests", "40")
    dp = report["settings"]["data_parallel"]
    assert dp["data_parallel_size"] == 8 and dp["expert_ranks"] == 8 and "round_robin" in dp["dispatch"]
    assert dp["per_rank"]["max_num_batched_tokens"] == config.max_num_batched_tokens // 8
    assert report["completed"] == 40


def test_the_engine_line_names_the_ranks(capsys: pytest.CaptureFixture[str]) -> None:
    code, text, _ = run_cli(capsys, "simulate", *DP8, "--rate", "4", "--num-requests", "40")
    assert code == 0
    assert "attention DP8 × TP1, experts EP8" in text
    assert "in each of the 8 data-parallel ranks" in text
    assert "waiting × 4 + running" in text
    plain = simulate_json(capsys, "llama-3.1-8b", "--gpu", "h100", "--rate", "4",
                          "--num-requests", "20")
    assert "data_parallel" not in plain["settings"]


def test_the_json_keeps_one_ranks_settings_and_adds_every_ranks(
        capsys: pytest.CaptureFixture[str]) -> None:
    """num_blocks, max_num_seqs and max_num_batched_tokens are one rank's, as fit --json gives
    max_num_seqs and as each rank's scheduler runs them; data_parallel adds the ranks' together
    (all_ranks), and the text says both: 28,740 blocks a rank at 32K, 229,920 in all. SGLang's
    budget is its --chunked-prefill-size, the flag's, which it divides over the ranks."""
    report = simulate_json(capsys, *DP8, "--rate", "4", "--num-requests", "40")
    settings = report["settings"]
    dp = settings["data_parallel"]
    assert settings["num_gpus"] == dp["data_parallel_size"] == 8
    for key in ("num_blocks", "max_num_seqs", "max_num_batched_tokens"):
        assert settings[key] == dp["per_rank"][key]
        assert dp[f"{key}_all_ranks"] == 8 * settings[key]
    config = rank_config("vllm", sim_config(deepseek_dp8(), EngineSettings(max_model_len=32_768)),
                         8)
    assert all_ranks(config, 8) == (dp["num_blocks_all_ranks"], dp["max_num_seqs_all_ranks"],
                                    dp["max_num_batched_tokens_all_ranks"])
    assert (settings["num_blocks"], dp["num_blocks_all_ranks"]) == (9_125, 73_000)  # of 64
    fit = json.loads(run_cli(capsys, "fit", *DP8, "--json")[1])
    assert fit["max_num_seqs"] == settings["max_num_seqs"]
    assert fit["data_parallel"]["max_num_seqs_all_ranks"] == dp["max_num_seqs_all_ranks"]
    code, text, _ = run_cli(capsys, "simulate", *DP8, "--rate", "4", "--num-requests", "40")
    assert code == 0
    assert f"engine: {settings['num_blocks']:,} KV blocks" in text
    assert f"the 8 ranks together: {dp['num_blocks_all_ranks']:,} KV blocks" in text
    assert "running batch, the 8 ranks together" in text
    sglang = simulate_json(capsys, *SGLANG_DP8, "--rate", "4", "--num-requests", "40")
    whole = sim_config(deepseek_dp8("sglang"), EngineSettings(max_model_len=32_768))
    assert sglang["settings"]["max_num_batched_tokens"] == whole.max_num_batched_tokens
    assert sglang["settings"]["data_parallel"]["per_rank"]["max_num_batched_tokens"] \
        == whole.max_num_batched_tokens // 8
    assert sglang["settings"]["data_parallel"]["num_blocks_all_ranks"] \
        == 8 * sglang["settings"]["num_blocks"]
    # SGLang's ranks together in its own words: tokens (its max_total_num_tokens), not blocks
    code, text, _ = run_cli(capsys, "simulate", *SGLANG_DP8, "--rate", "4", "--num-requests",
                            "40")
    assert code == 0
    all_tokens = sglang["settings"]["data_parallel"]["num_blocks_all_ranks"] \
        * sglang["settings"]["block_size"]
    assert f"the 8 ranks together: {all_tokens:,} tokens, max_running_requests" in text


@pytest.mark.parametrize("argv, words", [
    (["deepseek-v3", "--gpu", "h200", "--dp", "8", "--rate", "1"], "--dp is SGLang's flag"),
    (["deepseek-v3", "--gpu", "h200", "-dp", "8", "--enable-dp-attention", "--rate", "1"],
     "SGLang's switch"),
    (["deepseek-v3", "--gpu", "h200", "--engine", "sglang", "--num-gpus", "8", "--dp-size",
      "8", "--rate", "1"], "8 whole replicas"),
    (["deepseek-v3", "--gpu", "h200", "--engine", "trtllm", "-dp", "8", "--rate", "1"],
     "attention data parallelism (enable_attention_dp) is not modelled"),
    ([*DP8, "--rate", "1", "--spec-tokens", "2"], "not simulated yet"),
])
def test_bad_data_parallel_input_is_one_line_and_exit_2(
        capsys: pytest.CaptureFixture[str], argv: list[str], words: str) -> None:
    code, _, err = run_cli(capsys, "simulate", *argv)
    assert code == 2
    assert words in err and err.count("\n") == 1


def dealt(ranks: list[list[Seq]]) -> list[Seq]:
    """Each rank's sequences as one batch in the order cost.batch_shape deals it (one a rank
    in turn): rank i's k-th at k × N + i. Every rank as many."""
    return [seq for row in zip(*ranks) for seq in row]


def chunk_beside_decodes(chunk_rank: int) -> list[list[Seq]]:
    """DP8, 128 rows a rank: rank 0 the busiest's decodes at 30,000 tokens of context, the
    others at 1,000; one row of ``chunk_rank`` a 1,024-token prompt chunk instead."""
    ranks = [[Seq(1, 30_000 if i == 0 else 1_000)] * 128 for i in range(8)]
    ranks[chunk_rank] = [Seq(1024, 0), *ranks[chunk_rank][1:]]
    return ranks


def op_time_s(dep: Deployment, batch: list[Seq], name: str, slowdown: bool = True) -> float:
    """An operator's time in step_cost (``slowdown`` False: vLLM's MoE prompt slowdown 1)."""
    with nullcontext() if slowdown else mock.patch("ridgeline.cost.moe_prompt_expert_slowdown",
                                                   return_value=1.0):
        return next(op.time_s for op in step_cost(dep, batch, profile_for("vllm")).ops
                    if op.name == name)


def test_another_ranks_prompt_chunk_prices_the_busiest_ranks_experts_as_a_prompt_steps() -> None:
    """The experts run every rank's tokens in one kernel: a 1,024-token chunk on rank 1, beside
    rank 0's decodes, prices them as the same chunk on rank 0 does (vLLM's
    moe_prompt_expert_slowdown, over twice their unslowed time); rank 0's attention and
    its exchange do not move."""
    dep = deepseek_dp8()
    elsewhere, own = dealt(chunk_beside_decodes(1)), dealt(chunk_beside_decodes(0))
    assert batch_shape(dep, elsewhere).tokens == batch_shape(dep, elsewhere).sequences
    assert op_time_s(dep, elsewhere, "experts") == op_time_s(dep, own, "experts")
    assert op_time_s(dep, elsewhere, "experts") > 2 * op_time_s(dep, elsewhere, "experts",
                                                                slowdown=False)
    for name in ("attention", "attention projections", DP_EXCHANGE):
        assert op_time_s(dep, elsewhere, name) == op_time_s(dep, elsewhere, name, False)


def test_the_simulators_dp_step_prices_every_ranks_experts_at_any_ranks_prompt() -> None:
    """sim.step_s of those ranks' batches is step_cost's time of the whole: rank 0's, its long
    decodes the slowest once its experts take the prompt price (194 ms; 162 ms at the decode
    price, where rank 1's 119 ms left it); the timer keeps the shape with and without another
    rank's prompt apart, each shape_time_s's."""
    sim = simulator()
    ranks = chunk_beside_decodes(1)
    requests = iter(Workload(8 * 128, "100", "10", 1.0, "constant", seed=0))
    batches = [[Scheduled(next(requests), s.new_tokens, s.context_tokens) for s in rank]
               for rank in ranks]
    dep, profile = sim.dep, sim.profile
    assert sim.step_s(batches) == pytest.approx(step_cost(dep, dealt(ranks), profile).time_s,
                                                rel=1e-12)
    busiest = batch_shape(dep, dealt(ranks))
    assert busiest.any_rank_prompt and not experts_prompt(busiest._replace(any_rank_prompt=False))
    timer = StepTimer(dep, profile)
    for shape in (busiest, busiest._replace(any_rank_prompt=False), busiest):
        assert timer.time_s(shape) == pytest.approx(shape_time_s(dep, shape, profile), rel=1e-12)
    assert timer.time_s(busiest) > timer.time_s(busiest._replace(any_rank_prompt=False))


def test_a_dense_model_and_a_moe_without_data_parallelism_are_priced_as_before() -> None:
    """Llama-3.1-70B on vLLM DP2 × TP4 has no experts: another rank's prompt moves nothing.
    Qwen3-30B-A3B on one H100 has no other rank: its decode step stays a decode step's."""
    llama = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"), None,
                             None, 4, 1, "vllm", data_parallel_size=2)
    batch = dealt([[Seq(1, 8000)] * 16, [Seq(2048, 0), *[Seq(1, 8000)] * 15]])
    shape = batch_shape(llama, batch)
    assert shape.any_rank_prompt
    plain = shape._replace(any_rank_prompt=False)
    timer = StepTimer(llama, profile_for("vllm"))
    assert timer.time_s(shape) == timer.time_s(plain) == pytest.approx(
        shape_time_s(llama, plain, profile_for("vllm")), rel=1e-12)
    qwen = Deployment.build(resolve_model("qwen3-30b-a3b"), resolve_accelerator("h100"), "bf16",
                            None, 1, engine="vllm")
    decodes = decode_batch(64, 1500)
    assert not batch_shape(qwen, [Seq(2048, 0), *decodes]).any_rank_prompt
    assert op_time_s(qwen, decodes, "experts") == op_time_s(qwen, decodes, "experts", False)


# -- what the ranks' one recorder reads of them together --------------------------------------

def qwen_dp2(**settings: int) -> tuple[Deployment, SimConfig]:
    dep = Deployment.build(resolve_model("qwen3-30b-a3b"), resolve_accelerator("h100"),
                           engine="vllm", expert_parallel=True, data_parallel_size=2)
    return dep, sim_config(dep, EngineSettings(max_model_len=4096, **settings))


def test_an_arrivals_queue_is_every_ranks_not_the_one_it_was_dealt_to() -> None:
    """Ten requests at once to two lock-step ranks: each rank holds five, the deployment
    ten waiting as the last arrives (``Recorder.waiting_at_arrival``, the overload readings'
    queue), as the independent ranks read it. It read the last rank's five."""
    from ridgeline.sim.metrics import Recorder
    from ridgeline.sim.request import Request

    dep, config = qwen_dp2()
    sim = DataParallelSimulator(dep, profile_for("vllm"), config)
    rec = Recorder(dep.num_gpus)
    for i in range(10):
        assert sim.arrive(Request(i, 0.0, 500, 50), rec)
    assert [len(rank.scheduler.waiting) for rank in sim.ranks] == [5, 5]
    assert rec.waiting_at_arrival == len(sim.scheduler.waiting) == 10


def test_lock_step_ranks_count_their_budget_full_steps_alike_either_path() -> None:
    """Two lock-step ranks under a 4-token budget, 20 + 400-token requests at 40/s: each
    rank's steps run the budget whole with requests waiting, counted rank by rank over the
    ranks' own steps (``SimResult.rank_steps``: each busy rank's, where ``steps`` counts each
    lock-step once); a run of decode steps taken without scheduling (four decodes a rank, the
    budget's all, the queue waiting) counts them as its plain steps do."""
    dep, config = qwen_dp2(max_num_batched_tokens=4)
    counts = []
    for fast in (True, False):
        sim = DataParallelSimulator(dep, profile_for("vllm"), replace(config, fast_path=fast))
        result = sim.run(iter(Workload(40, "20", "400", 40.0, seed=3)))
        assert result.rank_steps == sum(rank.steps for rank in sim.ranks) > result.steps
        assert (sim.bulk_steps > result.steps / 2) is fast  # most steps in runs
        counts.append((result.rec.budget_full_steps, result.rank_steps, result.steps,
                       result.duration_s))
    assert counts[0] == counts[1]
    full, rank_steps, _, _ = counts[0]
    assert full > 0.5 * rank_steps
