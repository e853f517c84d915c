"""`ridgeline plan`: cheapest deployment meeting an SLO, runners-up, Pareto, commands."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from ridgeline.candidate import Candidate
from ridgeline.catalog import resolve_model
from ridgeline.cli import main
from ridgeline.closest_miss import simulated_miss
from ridgeline.errors import InputError
from ridgeline.plan import PlanResult, plan
from ridgeline.plan_checks import CheckRun
from ridgeline.serving_load import Load, Slo
from ridgeline.vllm_extensible import extensible_fraction

MODEL = resolve_model("llama-3.1-8b")
LOAD = Load(4.0, "lognormal:800,0.6", "lognormal:200,0.6")
SLO = Slo(0.5, 0.05, 90)
# two priced cards to rank, and one the catalog gives no price
CARDS = ("h100-sxm", "l40s", "h200-nvl")


@cache
def _load_plan(*gpus: str) -> PlanResult:
    """The module's load planned on ``gpus`` in one process, searched once for every test
    that reads it (a plan is a function of its arguments, and a PlanResult is frozen)."""
    return plan(MODEL, LOAD, SLO, list(gpus), workers=1)


@cache
def _searched(*gpus: str) -> PlanResult:
    """As _load_plan, its rows left unsimulated (``verify=0``), for the tests that read what
    the search settles before any check: the Pareto frontier (drawn from every candidate
    sized, ``plan._pareto``), the formats searched, the card the cheapest row is on."""
    return plan(MODEL, LOAD, SLO, list(gpus), workers=1, verify=0)


def test_the_winner_is_the_cheapest_and_its_simulation_meets_the_slo() -> None:
    result = _load_plan(*CARDS)
    win = result.winner
    assert win is not None and win.verified
    assert win.sim_ttft_s is not None and win.sim_ttft_s <= SLO.ttft_s
    assert win.sim_tpot_s is not None and win.sim_tpot_s <= SLO.tpot_s
    costs = [c.cost_per_hour for c in result.candidates if c.verified]
    assert costs == sorted(costs)  # type: ignore[type-var]


@pytest.mark.usefixtures("splits_unchecked")  # the co-located checks' budget
def test_no_unsimulated_candidate_is_cheaper_than_the_winner() -> None:
    # Candidates are simulated until none is left whose analytic price, shrunk as much as
    # simulation shrank any checked one, could beat the best simulated one.
    # the MI300X alone: the default cards' winner, after as many checks (three)
    model, gpus = resolve_model("llama-3.1-70b"), ["mi300x"]
    load = Load(5.0, "2000", "300")
    result = plan(model, load, Slo(2.0, 0.05, 90), gpus, workers=1)
    win = result.winner
    assert win is not None and win.verified
    analytic = [c.cost_per_hour for c in result.candidates if not c.verified]
    assert all(cost is not None and win.cost_per_hour is not None and cost >= win.cost_per_hour
               for cost in analytic)
    assert sum(c.verified for c in result.candidates) > 1  # a budget of one binds here
    capped = plan(model, load, Slo(2.0, 0.05, 90), gpus, workers=1, verify=1)
    assert sum(c.verified for c in capped.candidates) <= 1


def test_a_price_override_changes_the_ranking() -> None:
    base = _load_plan(*CARDS)
    assert base.winner is not None
    # the ranking the search settles before any check: the price enters it there (a check
    # changes a candidate's replicas, not its card's price)
    loser = "l40s" if base.winner.accelerator == "h100-sxm" else "h100-sxm"
    cheap = plan(MODEL, LOAD, SLO, CARDS, prices={loser: 0.01}, workers=1, verify=0)
    assert cheap.winner is not None and cheap.winner.accelerator == loser


def test_unpriced_accelerators_get_a_break_even_instead_of_a_rank() -> None:
    result = _load_plan(*CARDS)
    assert [c.accelerator for c in result.unpriced] == ["h200-nvl"]
    assert all(c.accelerator != "h200-nvl" for c in result.candidates)


def test_an_impossible_slo_is_answered_with_the_closest_miss() -> None:
    result = plan(resolve_model("llama-3.1-70b"), Load(50, "4000", "500"), Slo(0.01, 0.002),
                  ["h100-sxm"], workers=1)
    assert result.winner is None and "even unloaded" in result.closest_miss
    # the closest miss stays within --max-gpus: 2 GPUs here, never the 8 an unbounded search takes
    capped = plan(resolve_model("llama-3.1-70b"), Load(50, "4000", "500"), Slo(0.01, 0.002),
                  ["h100-sxm"], max_gpus=2, workers=1)
    assert capped.closest_miss.startswith("2 x h100-sxm")


def test_a_closest_miss_of_minutes_reads_in_seconds_beside_its_slo_in_ms() -> None:
    """A check whose queue ran away: a p90 TTFT of 4,144.8 s is no longer written as
    4,144,766 ms, and the SLO it misses, given in ms, stays in ms beside it."""
    slo = Slo(1.0, 0.05, 90)
    c = Candidate("l4", 1, 1, "bf16", "bf16", None, 16, 0.02, 0.05, 1.0, 1, 0.8, True, "",
                  (1.0, 1.0))
    run = CheckRun(False, 4144.7658, 0.1126, 1171, 0, (1.0, 9.0))
    miss = simulated_miss(resolve_model("llama-3.1-8b"), [(c, run)], slo, 1, "vllm")
    assert miss is not None and miss.missed == ("TTFT", "TPOT")
    assert f"p90 TTFT {run.ttft_s:,.1f} s, TPOT {run.tpot_s * 1e3:,.1f} ms" in miss.text
    assert f"{slo.ttft_s * 1e3:,g} ms and {slo.tpot_s * 1e3:,g} ms" in miss.text
    assert f"{run.ttft_s * 1e3:,.0f}" not in miss.text


@pytest.mark.usefixtures("plan_once")  # one search for its text and --json
def test_a_plan_no_deployment_meets_exits_1_after_printing_its_answer(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The answer is no, which is not bad input (2): exit 1, the report (or --json) printed."""
    argv = ["plan", "llama-3.1-70b", "--rate", "10", "--slo-ttft-ms", "1000", "--slo-tpot-ms",
            "3", "--gpus", "b200", "--max-gpus", "8", "--workers", "1"]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert "NO DEPLOYMENT within the limits meets this SLO" in out and "closest: " in out
    assert not err
    assert main([*argv, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["winner"] is None and data["closest_miss"]
    assert data["verdict"] == "none" and data["held_splits"] == []
    assert main([*argv[:-4], "--price", "b200=nan"]) == 2  # bad input keeps its own status


def test_the_pareto_frontier_is_non_dominated() -> None:
    frontier = _searched("h100-sxm").pareto
    assert len(frontier) >= 3
    for a in frontier:
        assert not any(b[0] > a[0] and b[1] > a[1] for b in frontier)


def test_plan_cli_prints_engine_commands_with_real_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "llama-3.1-8b", "--rate", "4", "--slo-ttft-ms", "500", "--slo-tpot-ms",
                 "50", "--gpus", "h100", "--max-gpus", "1", "--workers", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    vllm = data["commands"]["vllm"]
    assert vllm.startswith("vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size")
    # v0.34 sizes the pool after warm-up from the whole card: the line says so
    assert f"--gpu-memory-utilization {extensible_fraction()}" in vllm and "--max-model-len" in vllm
    assert list(data["commands"]) == ["vllm"]  # the engine whose pools were sized
    win = data["winner"]
    assert win["usd_per_million_output_tokens"] > 0
    # dollars named as hardware's price_per_hour_usd and decode's usd_per_million_... are
    assert win["cost_per_hour_usd"] == pytest.approx(win["num_gpus"] * win["price_per_gpu_hour_usd"])
    assert not {"cost_per_hour", "price_per_gpu_hour", "cost_per_million_output_tokens"} & set(win)
    # the frontier says at what context its decode figures hold: the default 1,000 in, 250 out
    assert data["pareto_context_len"] == 1000 + 250 // 2


@pytest.mark.usefixtures("unsimulated")  # each engine's launch line, as the search sizes it
def test_plan_sizes_pools_as_the_named_engine_does(capsys: pytest.CaptureFixture[str]) -> None:
    from ridgeline.candidate import replica_deployment
    from ridgeline.capacity import max_batch
    from ridgeline.hardware import resolve_accelerator
    from ridgeline.memory import EngineSettings

    # Llama-3.1-8B on one card: the claim is each engine's launch line, not the size
    args = ["plan", "llama-3.1-8b", "--rate", "2", "--slo-ttft-ms", "3000", "--slo-tpot-ms",
            "60", "--gpus", "h100", "--max-gpus", "1", "--workers", "1", "--json"]
    commands = {}
    for engine in ("vllm", "sglang", "trtllm"):
        assert main([*args, "--engine", engine]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["winner"] is not None
        commands[engine] = data["commands"]
    assert list(commands["sglang"]) == ["sglang"] and "--tp-size" in commands["sglang"]["sglang"]
    assert list(commands["trtllm"]) == ["trtllm"]  # trtllm-serve's line, its PyTorch backend
    assert commands["trtllm"]["trtllm"].startswith("trtllm-serve ")
    # SGLang's static fraction leaves a smaller pool than vLLM's 0.9 on the same card
    acc = resolve_accelerator("h100")
    seats = {e: max_batch(replica_deployment(MODEL, acc, 1, 1, "bf16", "bf16", engine=e), 4096,
                          EngineSettings(max_model_len=4096)) for e in ("vllm", "sglang")}
    assert seats["sglang"] < seats["vllm"]
    assert main([*args, "--engine", "sglang", "--engine-version", "b9400"]) == 2
    assert "llama.cpp build" in capsys.readouterr().err


def test_bad_plan_inputs_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "llama-3.1-8b", "--rate", "4", "--slo-ttft-ms", "500", "--slo-tpot-ms",
                 "50", "--price", "h100=cheap"]) == 2
    assert "--price" in capsys.readouterr().err
    with pytest.raises(InputError):
        plan(MODEL, Load(0.0, "10", "10"), SLO)


def test_ray_executor_without_ray_says_which_extra(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        import ray  # noqa: F401
        pytest.skip("ray is installed")
    except ImportError:
        pass
    assert main(["plan", "llama-3.1-8b", "--rate", "4", "--slo-ttft-ms", "500", "--slo-tpot-ms",
                 "50", "--gpus", "h100", "--executor", "ray"]) == 2
    err = capsys.readouterr().err  # the checkout's extra: no `ridgeline` on PyPI is ours
    assert "pip install -e '.[ray]'" in err and "ridgeline[" not in err


def test_ray_executor_finds_what_the_process_pool_finds() -> None:
    ray = pytest.importorskip("ray")  # the optional extra: skipped where it is not installed
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = plan(MODEL, LOAD, SLO, CARDS, executor="ray")
    finally:
        ray.shutdown()
    local = _load_plan(*CARDS)  # the one process's plan, searched once
    assert on_ray.searched == local.searched
    assert on_ray.candidates == local.candidates and on_ray.winner is not None


def test_the_worker_pool_plans_what_one_process_plans() -> None:
    """With two workers the candidates are sized in the worker processes while the plan's own
    process runs both disaggregated checks; the plan is the one a single process makes, sizing
    first, the checked splits included."""
    local = _load_plan(*CARDS)  # the one process's plan, searched once
    assert sum(c.verified for c in local.disaggregated) == 2  # both checks ran and held
    assert plan(MODEL, LOAD, SLO, CARDS, workers=2) == local


def test_a_pipeline_stage_keeps_its_own_micro_batch_in_flight() -> None:
    from ridgeline import Deployment, resolve_accelerator
    from ridgeline.engines import profile_for
    from ridgeline.replica_sizing import size_replica
    from ridgeline.sim.config import sim_config
    from ridgeline.sim.lanes import pipeline_lane

    model = resolve_model("llama-3.1-70b")
    slo, load = Slo(2.0, 0.1), Load(4.0, "1000", "200")
    h100 = resolve_accelerator("h100")
    tp8 = Deployment.build(model, h100, "fp8", "bf16", 8, 1, "vllm")
    pp2 = Deployment.build(model, h100, "fp8", "bf16", 16, 2, "vllm")
    one = size_replica(tp8, profile_for("vllm"), load, slo, None)
    two = size_replica(pp2, profile_for("vllm"), load, slo, None)
    assert one is not None and two is not None
    # Two stages of the same TP8 group: twice the KV, two batches in flight, each a longer trip.
    assert two[0] % 2 == 0 and two[0] > one[0]
    assert two[3] > 1.8 * one[3]  # the second stage adds throughput, not only memory
    lane = pipeline_lane(sim_config(pp2), 2)
    assert lane.num_blocks == sim_config(pp2).num_blocks // 2


def test_disaggregated_pools_are_simulated_and_meet_the_slo() -> None:
    result = _load_plan(*CARDS)  # the split checks run whatever the budget
    split = result.disaggregated[0]
    assert split.verified and split.disaggregated.endswith("D")
    assert split.sim_ttft_s is not None and split.sim_ttft_s <= SLO.ttft_s
    assert split.sim_tpot_s is not None and split.sim_tpot_s <= SLO.tpot_s
    assert 0 < split.prefill_replicas < split.replicas
    # each pool's launch is printed under the split at the knobs its check held with
    from ridgeline.reports.plan import PlanReport

    report = PlanReport(MODEL, "meta-llama/Llama-3.1-8B", result, 4096)
    text = "\n".join(report.text_lines())
    rows = {r["label"]: r for r in report.to_dict()["disaggregated"]}
    commands = rows[report.lists.label(split)]["pool_commands"]
    for name, (seqs, budget), count in (
            ("prefill", split.pool_knobs[0], split.prefill_replicas),
            ("decode", split.pool_knobs[1], split.replicas - split.prefill_replicas)):
        command = commands[name]
        assert f"  {name} pool, {count} replica{'s' if count > 1 else ''}: {command}" in text
        assert ("--max-num-seqs" in command) == bool(seqs)
        assert ("--max-num-batched-tokens" in command) == bool(budget)
        assert all(f" {v} " in command + " " for v in (seqs, budget) if v)
    # and the router that ties the pools into one deployment, the same in --json
    router = rows[report.lists.label(split)]["router_command"]
    assert router and f"  router: {router}" in text
    # and what its host placeholders stand for, the text's line under them
    note = rows[report.lists.label(split)]["router_note"]
    assert note and "PREFILL_HOST" in note and f"    {note}\n" in text + "\n"


def test_a_decode_pool_receives_the_prompt_cached() -> None:
    from ridgeline import Deployment, resolve_accelerator
    from ridgeline.engines import profile_for
    from ridgeline.sim.config import sim_config
    from ridgeline.sim.simulator import Simulator
    from ridgeline.sim.workload import Workload
    from ridgeline.split_runs import handed_off

    dep = Deployment.build(MODEL, resolve_accelerator("h100"), "bf16")
    work = Workload(50, "4000", "50", rate=1.0, seed=3)
    full = Simulator(dep, profile_for("vllm"), sim_config(dep)).run(iter(work))
    joined = Simulator(dep, profile_for("vllm"), sim_config(dep)).run(handed_off(work))
    assert joined.completed == full.completed == 50
    # Its first token costs a decode step, not a 4,000-token prefill.
    assert joined.percentiles("ttft")["p50"] < full.percentiles("ttft")["p50"] / 5


def test_plan_replays_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.csv"
    rows = [f"{i * 0.25:.2f},{800 + 40 * (i % 5)},{150 + 10 * (i % 3)}" for i in range(200)]
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    load = Load.from_trace(str(trace))
    assert load.rate_req_s == pytest.approx(4.0)  # 199 gaps over 49.75 s
    assert load.means() == pytest.approx((880.0, 159.95))
    assert load.refused_share(960 + 170) == 0 and load.refused_share(960 + 169) > 0
    assert [r.arrival_s for r in load.share(4)][:3] == [0.0, 1.0, 2.0]  # round-robin
    assert main(["plan", "llama-3.1-8b", "--trace", str(trace), "--slo-ttft-ms", "500",
                 "--slo-tpot-ms", "50", "--gpus", "h100", "--max-gpus", "1", "--workers", "1",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    win = data["winner"]
    assert win["verified"] and data["rate_req_s"] == pytest.approx(4.0)
    if win["replicas"] == 1:  # one replica replays the whole trace: simulate --trace reruns it
        import shlex

        check = data["check_command"]
        assert f"--trace {trace}" in check
        assert main([*shlex.split(check)[1:], "--json"]) == 0
        sim = json.loads(capsys.readouterr().out)
        assert sim["at_percentile"]["ttft_s"] == pytest.approx(win["sim_ttft_s"], rel=1e-12)
    with pytest.raises(SystemExit) as exit_:  # one load or the other
        main(["plan", "llama-3.1-8b", "--trace", str(trace), "--rate", "3", "--slo-ttft-ms",
              "500", "--slo-tpot-ms", "50"])
    assert exit_.value.code == 2


def test_moe_models_are_searched_with_and_without_expert_parallelism() -> None:
    from ridgeline.candidate import Candidate
    from ridgeline.reports.launch_commands import command_line
    from ridgeline.search_space import search_space

    moe = resolve_model("qwen3-30b-a3b")
    space = list(search_space(moe, ["h100-sxm"], 8))
    assert {s[-1] for s in space if s[1] > 1} == {False, True}
    assert not any(s[-1] for s in space if s[1] == 1)  # one GPU has nothing to spread
    assert not any(s[-1] for s in search_space(MODEL, ["h100-sxm"], 8))  # dense: never
    c = Candidate("h100-sxm", 4, 1, "bf16", "bf16", None, 64, 0.02, 0.1, 5.0, 1, 2.99, False,
                  "", (1.0, 1.0), expert_parallel=True)
    assert "(TP4 EP," in c.label
    assert "--enable-expert-parallel" in command_line("vllm", "Qwen/Qwen3-30B-A3B", c, 4096)
    sglang = command_line("sglang", "Qwen/Qwen3-30B-A3B", c, 4096, "0.5.9")
    # SGLang 0.5.9 at TP4: 512 + 1.5 × 8,192 + 2 × 512 + 1,024 × 4 ÷ 8 = 14,336 MiB held of
    # the 81,559 MiB nvidia-smi shows (not the runtime's 81,080, which gives 0.823); from
    # 0.5.10 its prefill CUDA graphs hold 464 MiB more (test_sglang_memory_eras.py)
    smi_mib = 81_559
    fraction = round((smi_mib - (512 + 1.5 * 8192 + 2 * 512 + 1024 * 4 / 8)) / smi_mib, 3)
    assert "--ep-size 4" in sglang and f"--mem-fraction-static {fraction}" in sglang
    assert fraction == 0.824


def test_the_token_budget_caps_a_prefill_heavy_replica() -> None:
    from ridgeline import Deployment, resolve_accelerator
    from ridgeline.capacity import max_batch
    from ridgeline.engines import profile_for
    from ridgeline.memory import EngineSettings, kv_pool
    from ridgeline.replica_sizing import size_replica

    dep = Deployment.build(MODEL, resolve_accelerator("h200"), "bf16")
    settings = EngineSettings(max_model_len=4050)
    budget = kv_pool(dep, settings).profile_tokens
    sized = size_replica(dep, profile_for("vllm"), Load(1.0, "4000", "50"), Slo(5.0, 1.0), None)
    assert sized is not None
    # Memory would seat more, but each step must also carry 80 prompt tokens per decode.
    assert max_batch(dep, 4050, settings) > budget * 50 // 4050 == sized[0]


def test_the_token_budget_is_a_searched_knob_and_reaches_the_launch_flags() -> None:
    from ridgeline.candidate import Candidate
    from ridgeline.reports.launch_commands import command_line
    from ridgeline.search_space import ENGINE_KNOBS, search_space

    budgets = {knobs[1] for *_, knobs, _ep in search_space(MODEL, ["h100-sxm"], 8)}
    assert budgets == {b for _, b in ENGINE_KNOBS} and None in budgets and len(budgets) > 1
    c = Candidate("h100-sxm", 1, 1, "bf16", "bf16", None, 64, 0.02, 0.1, 5.0, 1, 2.99, False,
                  "", (1.0, 1.0), max_num_batched_tokens=2048)
    assert "--max-num-batched-tokens 2048" in command_line("vllm", "m", c, 4096)
    assert "--chunked-prefill-size 2048" in command_line("sglang", "m", c, 4096)
    assert "max_num_batched_tokens 2048" in c.label


def test_the_kv_hand_off_is_the_prompt_cache_over_the_inter_node_links() -> None:
    from ridgeline import Deployment, resolve_accelerator
    from ridgeline.disaggregated import handoff_s

    one = Deployment.build(MODEL, resolve_accelerator("h100"), "bf16")
    two = Deployment.build(MODEL, resolve_accelerator("h100"), "bf16", num_gpus=2)
    # Llama-3.1-8B keeps 128 KiB per token (32 layers × 8 KV heads × 128 × 2 × 2 bytes);
    # 1,000 tokens over a 400 Gb/s (50 GB/s) link take 2.6 ms, half that over two links.
    assert handoff_s(one, 1000) == pytest.approx(1000 * 131_072 / 50e9)
    assert handoff_s(two, 1000) == pytest.approx(handoff_s(one, 1000) / 2)


def test_a_winner_off_the_fitted_accelerators_says_how_few_rows_it_rests_on() -> None:
    from ridgeline.engines import accelerator_group, profile_for
    from ridgeline.hardware import resolve_accelerator

    result = plan(MODEL, LOAD, SLO, ["tpu-v5p"], workers=1, verify=0)
    win = result.winner
    assert win is not None and not win.calibrated
    rows = profile_for("vllm").fitted_groups.get(accelerator_group(resolve_accelerator("tpu-v5p")),
                                                 0)
    assert f"has {rows} fitted row" in win.calibration_note
    h100 = _searched("h100-sxm").winner
    assert h100 is not None and h100.calibrated


def test_the_engine_version_sizes_the_replicas_pool() -> None:
    # Llama-3.1-8B on an H100 at 30K-token prompts is KV-bound: vLLM 0.10's sort-based
    # sampler profile (4.8 GiB at 1,024 seats) leaves room for one conversation fewer than
    # the v0.21 accounting (a lighter sampler, the CUDA-graph estimate).
    from ridgeline import Deployment, resolve_accelerator
    from ridgeline.engines import profile_for
    from ridgeline.replica_sizing import size_replica

    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"))
    load, slo = Load(2.0, "30000", "500"), Slo(60.0, 0.5, 90)
    v021 = size_replica(dep, profile_for("vllm"), load, slo, None, engine_version="0.21")
    older = size_replica(dep, profile_for("vllm"), load, slo, None, engine_version="0.10")
    newest = size_replica(dep, profile_for("vllm"), load, slo, None)  # v0.34: the whole card
    assert v021 is not None and older is not None and newest is not None
    assert older[0] == v021[0] - 1 and newest[0] > v021[0]
    assert main(["plan", "llama-3.1-8b", "--rate", "1", "--slo-ttft-ms", "1000",
                 "--slo-tpot-ms", "50", "--engine-version", "soon"]) == 2


def test_runners_up_are_other_shapes_cheapest_first() -> None:
    from ridgeline.reports.plan import PlanReport

    result = _load_plan(*CARDS)
    assert result.winner is not None
    report = PlanReport(MODEL, "meta-llama/Llama-3.1-8B", result, 4096)
    shapes = [(c.accelerator, c.tp, c.pp, c.weights, c.expert_parallel)
              for c in [result.winner, *report.lists.runners_up()]]
    assert len(shapes) == len(set(shapes)) > 2  # no knob-only variants of one deployment
    costs = [c.cost_per_hour for c in report.lists.runners_up()]
    assert costs == sorted(costs)


def test_a_model_no_group_holds_is_a_does_not_fit_not_a_latency() -> None:
    """DeepSeek-V3's weights overflow 2 x RTX 4090: the miss is memory, not its floors."""
    result = plan(resolve_model("deepseek-v3"), Load(1.0, "1000", "200"), Slo(2.0, 0.1),
                  gpus=["rtx-4090"], max_gpus=2, workers=1)
    assert result.winner is None and result.closest_miss.startswith("does not fit")


def test_a_miss_under_the_floors_is_blamed_on_the_load() -> None:
    """A TPOT SLO 3 % above the unloaded TPOT of the widest split (4 x H100: 28 heads do not
    split 8 ways): it meets the SLO alone, and no split does under 50 req/s."""
    from ridgeline.candidate import replica_deployment, weights_lightest_first
    from ridgeline.cost import decode_batch, mean_decode_context, step_time_s
    from ridgeline.engines import profile_for
    from ridgeline.hardware import resolve_accelerator

    model, h100 = resolve_model("qwen2.5-7b"), resolve_accelerator("h100")
    dep = replica_deployment(model, h100, 4, 1, weights_lightest_first(model)[0], "bf16",
                             engine="vllm")
    floor = step_time_s(dep, decode_batch(1, mean_decode_context(1000, 200)),
                        profile_for("vllm"))
    result = plan(model, Load(50.0, "1000", "200"), Slo(1.0, 1.03 * floor),
                  gpus=["h100"], workers=1, max_gpus=8)
    assert result.winner is None and "the load is the miss" in result.closest_miss


def test_a_model_that_fits_with_the_searchs_knobs_is_no_does_not_fit() -> None:
    """Llama-3.1-70B fp8 on one H100: vLLM's default 1,024 seats leave no pool at 0.92, 64
    seats (a knob the search tries) leave one, and the winner at 0.5 req/s runs so. At 1
    req/s the miss is the load, not the memory."""
    model, load_at = resolve_model("llama-3.1-70b"), (0.5, 1.0)
    found = [plan(model, Load(rate, "1000", "250"), Slo(1.0, 0.05), gpus=["h100-sxm"],
                  max_gpus=1, workers=1, engine_version="0.33")  # sized from the profile
             for rate in load_at]
    assert found[0].winner is not None
    assert found[1].winner is None and "the load is the miss" in found[1].closest_miss


def test_a_lengths_refused_share_is_what_the_checks_draws_refuse() -> None:
    """The share of a drawn load past a length is read from its distributions: the checks'
    own draws (eight seeds, over 10,000 requests) refuse about as many."""
    chat = Load(20.0, "lognormal:1000,0.8", "lognormal:300,0.8")
    length = 6144
    past = drawn = 0
    for draw in range(8):
        work, _ = replace(chat, seed=draw).steady(1, 60.0)
        drawn += len(work)
        past += sum(r.prompt_tokens + r.output_tokens > length for r in work)
    share = chat.refused_share(length)
    assert drawn > 10_000 and past > 10
    assert share == pytest.approx(past / drawn, rel=0.5)
    assert chat.refused_share(2 * length) < share / 4 and chat.refused_share(None) == 0
    with pytest.raises(InputError, match="longer than gpt-j-6b's 2,048-token context"):
        plan(resolve_model("gpt-j-6b"), Load(1.0, "4000", "200"), Slo(2.0, 0.1),
             gpus=["h100"], workers=1)


# -- the steady state -------------------------------------------------------------------
def _steady_p90(rate: float, requests: int | None = None) -> tuple[float, float]:
    """p90 TTFT and TPOT of one Llama-3.1-8B fp8 replica on an H100 at ``rate`` req/s: over
    ``requests`` requests from time 0, or (None) over the steady window plan checks."""
    from ridgeline.deployment import Deployment
    from ridgeline.engines import profile_for
    from ridgeline.hardware import resolve_accelerator
    from ridgeline.memory import EngineSettings
    from ridgeline.sim.config import sim_config
    from ridgeline.sim.simulator import Simulator

    dep = Deployment.build(MODEL, resolve_accelerator("h100-sxm"), "fp8", "fp8", engine="vllm")
    load = Load(rate, "lognormal:1000,0.8", "lognormal:300,0.8")
    config = sim_config(dep, EngineSettings(max_model_len=131072))
    if requests is None:
        work, window = load.steady(1, 12.0)  # a request lives about 12 s here
        result = Simulator(dep, profile_for("vllm"), config).run(work, window_s=window)
    else:
        result = Simulator(dep, profile_for("vllm"), config).run(load.share(1, count=requests))
    return result.percentiles("ttft")["p90"], result.percentiles("tpot")["p90"]


def test_a_short_run_reads_an_overloaded_replica_as_fine_and_the_steady_run_does_not() -> None:
    """At 40 req/s one H100 serves 18: 400 requests end before the batch has filled."""
    _, short_tpot = _steady_p90(40.0, requests=400)
    _, steady_tpot = _steady_p90(40.0)
    assert short_tpot < 0.05 < steady_tpot


def test_the_steady_window_skips_the_warm_up_and_the_drain() -> None:
    load = Load(10.0, "1000", "200")
    from ridgeline.serving_load import SIM_REQUESTS

    work, (start, end) = load.steady(2, 4.0)  # 5 req/s a replica, a 4 s lifetime
    arrivals = [r.arrival_s for r in work]
    assert len(arrivals) == SIM_REQUESTS  # 5 × 10 lifetimes × 4 s = 200, under the floor
    span = arrivals[-1]
    assert start == pytest.approx(8.0) and end == pytest.approx(span - 4.0, rel=0.05)
    _, (start, end) = Load(1000.0, "1000", "200").steady(1, 60.0)
    assert end > start > 0  # capped at MAX_SIM_REQUESTS: the window shrinks with the span


def test_latencies_outside_the_window_are_not_counted() -> None:
    from ridgeline.sim.metrics import Recorder
    from ridgeline.sim.request import Request

    rec = Recorder(1)
    rec.window_s = (10.0, 20.0)
    for i, arrival in enumerate((5.0, 15.0, 25.0)):
        r = Request(i, arrival, 100, 10)
        r.first_token_s, r.first_scheduled_s = arrival + 0.1 * (i + 1), arrival
        r.finish_s, r.num_generated = arrival + 1.0, 10
        rec.finish(r)
    assert rec.completed == 3 and rec.hist["ttft"].total == 1
    assert rec.hist["ttft"].mean == pytest.approx(0.2)


@pytest.mark.usefixtures("splits_unchecked")  # the winner is one pool's, whatever they hold
def test_the_winner_has_the_fewest_replicas_that_hold_in_the_steady_state() -> None:
    """Fewer replicas than the analytic count are tried too: the check finds the edge."""
    from dataclasses import replace

    from ridgeline.candidate import replica_deployment
    from ridgeline.engines import profile_for
    from ridgeline.hardware import resolve_accelerator
    from ridgeline.memory import EngineSettings
    from ridgeline.sim.config import sim_config
    from ridgeline.sim.lanes import pipeline_lane
    from ridgeline.sim.simulator import Simulator

    load, slo = Load(60.0, "lognormal:1000,0.8", "lognormal:300,0.8"), Slo(1.0, 0.05, 90)
    # within the three GPUs the full search's winner takes (three one-card replicas)
    win = plan(MODEL, load, slo, ["h100-sxm"], workers=1, max_gpus=3).winner
    assert win is not None and win.verified and win.analytic_replicas
    dep = replica_deployment(MODEL, resolve_accelerator(win.accelerator), win.tp, win.pp, win.weights,
                      win.kv, win.expert_parallel, engine="vllm")
    config = pipeline_lane(sim_config(dep, EngineSettings(
        max_num_seqs=win.max_num_seqs, max_num_batched_tokens=win.max_num_batched_tokens,
        max_model_len=win.max_model_len)), win.pp)
    lifetime = win.ttft_floor_s + load.means()[1] * win.tpot_s

    def p90(replicas: int, seed: int = 0) -> tuple[float, float]:
        work, window = replace(load, seed=seed).steady(replicas, lifetime)
        result = Simulator(dep, profile_for("vllm"), config).run(iter(work), window_s=window)
        return result.latency_s_at("ttft", 90), result.latency_s_at("tpot", 90)

    ttft, tpot = p90(win.replicas)
    assert (ttft, tpot) == (win.sim_ttft_s, win.sim_tpot_s)
    assert ttft <= slo.ttft_s and tpot <= slo.tpot_s
    if win.replicas > 1:  # one fewer misses on one of the two draws
        assert any(ttft > slo.ttft_s or tpot > slo.tpot_s
                   for ttft, tpot in (p90(win.replicas - 1), p90(win.replicas - 1, 1)))


def test_a_rejected_request_is_a_miss_and_any_percentile_is_read() -> None:
    from ridgeline.sim.metrics import Recorder, SimResult
    from ridgeline.sim.request import Request

    rec = Recorder(1)
    for i in range(100):
        r = Request(i, float(i), 100, 10)
        r.first_token_s, r.first_scheduled_s = i + (i + 1) / 1000, float(i)
        r.finish_s, r.num_generated = i + 1.0, 10
        rec.finish(r)
    result = SimResult(rec, 100.0, 0, 0, 100)
    assert result.latency_s_at("ttft", 99.9) > result.latency_s_at("ttft", 99) > \
        result.latency_s_at("ttft", 90)  # p99.9 is read, not rounded to p90
    assert result.latency_s_at("ttft", 75) == pytest.approx(0.075, rel=0.02)
    for i in range(20):  # 20 of 120 never answered: past p83
        r = Request(100 + i, 50.0, 100_000, 10)
        r.reason = "too long"
        rec.reject(r)
    assert result.latency_s_at("ttft", 90) == float("inf")
    assert result.latency_s_at("ttft", 50) == pytest.approx(0.060, rel=0.02)


def test_a_windowed_check_counts_the_rejections_of_its_window_only() -> None:
    """A check's percentile counts as misses the rejected requests arriving in its window,
    not the warm-up's and the drain's too (30 rejected in a run, 22 in the window, had read
    the window's TTFT at p97.9 for a p90 SLO, not p95.8)."""
    from ridgeline.sim.metrics import Recorder, SimResult
    from ridgeline.sim.request import Request

    rec = Recorder(1)
    rec.window_s = (10.0, 90.0)
    for i in range(100):
        r = Request(i, float(i), 100, 10)
        r.first_token_s, r.first_scheduled_s = i + (i % 50 + 1) / 1000, float(i)
        r.finish_s, r.num_generated = i + 1.0, 10
        rec.finish(r)
    for t in (5.0, 50.0, 95.0, 96.0):  # one rejection inside the window, three outside
        r = Request(1000 + int(t), t, 100_000, 10)
        r.reason = "too long"
        rec.reject(r)
    result = SimResult(rec, 100.0, 0, 0, 100)
    assert rec.windowed == 81 and rec.windowed_rejected == 1
    # the window's 81 TTFTs and its one rejection sorted last: p90 at position 0.9 × 81 =
    # 72.9 of the 82, between the 73rd and 74th TTFT (vllm bench serve's linear reading); with
    # all four rejections, 0.9 × 84 = 75.6
    ttfts = sorted((i % 50 + 1) / 1000 for i in range(10, 91))
    expected = ttfts[72] + 0.9 * (ttfts[73] - ttfts[72])
    assert result.latency_s_at("ttft", 90) == pytest.approx(expected, rel=1.2e-3)
    assert expected != pytest.approx(ttfts[75] + 0.6 * (ttfts[76] - ttfts[75]), rel=1e-2)


def test_a_short_trace_is_planned_with_a_caution(tmp_path: Path) -> None:
    trace = tmp_path / "two.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,1000,200\n1,800,150\n")
    result = plan(MODEL, Load.from_trace(str(trace)), SLO, ["h100-sxm"], max_gpus=1, workers=1)
    assert result.winner is not None and result.winner.verified
    assert any("under 5 request lifetimes" in c for c in result.cautions)
    assert any("holds 2 requests" in c and "p90" in c for c in result.cautions)


def test_a_trace_with_few_requests_past_the_percentile_is_cautioned(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    rows = [f"{i * 0.25:.2f},800,150" for i in range(200)]
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    load = Load.from_trace(str(trace))
    assert load.thin(90) == ""  # 20 requests past p90
    assert "2.0 of them lie past p99" in load.thin(99) and "at least 1,000" in load.thin(99)
    assert Load(4.0, "800", "150").thin(99.9) == ""  # a synthetic load draws enough …
    synthetic = Load(4.0, "800", "150").thin(99.99, simulated=1600)  # … unless its check
    assert "0.16 of them lie past p99.99" in synthetic and "100,000" in synthetic  # read few


def test_simulate_cautions_a_percentile_its_requests_cannot_carry(
        capsys: pytest.CaptureFixture[str]) -> None:
    """1,600 requests leave 0.16 past p99.99: that figure is nearly the slowest request's."""
    argv = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "5", "--num-requests",
            "1600", "--input-len", "500", "--output-len", "50", "--percentile"]
    assert main([*argv, "99.99"]) == 0
    out = capsys.readouterr().out
    assert "too few to rest that percentile on" in out and "--num-requests 100,000" in out
    assert main([*argv, "90"]) == 0
    assert "too few" not in capsys.readouterr().out


@pytest.mark.parametrize(("requests", "percentile"), [(100, 90), (50, 80), (200, 95)])
def test_exactly_ten_past_the_percentile_rest_it_without_a_caution(
        requests: int, percentile: float, capsys: pytest.CaptureFixture[str]) -> None:
    """TAIL_REQUESTS (10) past the percentile are the fewest that rest it, as tail_requests
    counts them: 100 × (1 − 0.9) is 9.999… in floating point, so 100 requests at p90 had been
    cautioned as too few, the caution asking for 101 where tail_requests asks 100."""
    from ridgeline.serving_load import TAIL_REQUESTS, tail_caution, tail_requests

    assert tail_requests(percentile) == requests
    assert requests * (1 - percentile / 100) != TAIL_REQUESTS  # the float the caution read
    assert tail_caution(requests, percentile, "held", "{n}") == ""
    fewer = tail_caution(requests - 1, percentile, "held", "at least {n}")
    assert fewer.endswith(f"(at least {requests})")
    assert main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "5", "--num-requests",
                 str(requests), "--input-len", "500", "--output-len", "50", "--percentile",
                 f"{percentile:g}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cautions"] == []


def test_prompts_with_one_output_token_are_sized_by_prefill() -> None:
    """Classification-style load: no TPOT to keep; a 10,000-token prompt needs more than one
    step's token budget, and one H100 still takes 1 req/s."""
    result = plan(MODEL, Load(1.0, "10000", "1"), Slo(5.0, 0.1, 90), ["h100-sxm"], max_gpus=1,
                  workers=1)
    win = result.winner
    assert win is not None and win.verified and win.replicas == 1
    assert win.sim_tpot_s is not None and win.sim_tpot_s != win.sim_tpot_s  # NaN: no TPOT


@pytest.mark.usefixtures("unsimulated")  # the cards searched
def test_the_default_accelerators_are_those_the_engine_runs_on(
        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "llama-3.1-8b", "--rate", "2", "--input-len", "1000", "--output-len",
                 "200", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50", "--engine", "trtllm",
                 "--max-gpus", "1", "--workers", "1", "--json"])  # one GPU: every card holds it
    out = capsys.readouterr().out
    assert code == 0 and "mi300x" not in out  # TensorRT-LLM runs on NVIDIA only


def test_a_winner_no_simulation_reached_says_so(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """With a budget of one check that misses, the cheapest remaining candidate is shown as
    the answer only with a NOT SIMULATED line. (The check is made to miss: on this load the
    candidate whose check missed, 3 × 2 H100s, is now sized with its longest prompts, 0.85 %
    of which outlast the p99 250 ms TTFT alone, and is no longer the cheapest.)"""
    import ridgeline.measured_slowdown as measured_slowdown
    import ridgeline.plan as planning
    import ridgeline.plan_checks as plan_checks
    from ridgeline.reports.plan import PlanReport

    checked = []

    def misses(*args: Any, **kwargs: Any) -> None:
        checked.append(args[1])
        args[-1][(len(args[-1]),) * 5] = None  # it ran the simulator: one more of the runs
        return None

    for checks in (plan_checks, measured_slowdown):  # every caller of the check
        monkeypatch.setattr(checks, "verify", misses)
    # nor are the split pools checked (None: no size held): not this claim's answer, and at
    # 20 req/s their simulations were most of its time
    monkeypatch.setattr(planning, "verify_disaggregated", lambda *args, **kwargs: None)
    # within 8 GPUs: the cheapest remaining (2 × TP4) is the whole search's
    result = plan(MODEL, Load(20.0, "lognormal:2000,1.0", "lognormal:300,0.8"),
                  Slo(0.25, 0.012, 99), ["h100-sxm"], workers=1, verify=1, max_gpus=8)
    assert len(checked) == 1
    if result.winner is None:
        pytest.skip("no candidate sized: nothing to show")
    assert not result.winner.verified
    report = PlanReport(MODEL, "meta-llama/Llama-3.1-8B", result, 8192)
    assert "NOT SIMULATED" in "\n".join(report.text_lines())
    assert any("was not reached" in c for c in report.to_dict()["cautions"])


def test_more_refused_requests_than_the_percentile_spares_is_refused_up_front() -> None:
    load = Load(1.0, "lognormal:500,1.0", "200")  # about 10 % past gpt-j-6b's 2,048 tokens
    with pytest.raises(InputError, match="more than a p99 SLO lets miss"):
        plan(resolve_model("gpt-j-6b"), load, Slo(2.0, 0.1, 99), gpus=["h100"], workers=1)


def test_one_token_outputs_state_no_tpot_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "llama-3.1-8b", "--rate", "10", "--input-len", "1000", "--output-len",
                 "1", "--slo-ttft-ms", "500", "--slo-tpot-ms", "40", "--gpus", "h100", "--workers",
                 "1", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["winner"]["tpot_s"] is None


def test_no_candidate_has_a_launch_vllm_would_refuse() -> None:
    """Long prompts on L40S: a replica whose pool cannot hold the launch's --max-model-len is
    not a candidate, analytic or simulated. (Every candidate the search sizes, unsimulated:
    a check changes a candidate's replicas and figures, not its launch, so the simulated
    rows are among these.)"""
    from ridgeline.candidate import replica_deployment
    from ridgeline.capacity import refuses_to_start
    from ridgeline.hardware import resolve_accelerator
    from ridgeline.memory import EngineSettings, kv_pool

    model, load = resolve_model("llama-3.1-70b"), Load(0.3, "lognormal:8000,0.8", "200")
    result = plan(model, load, Slo(20.0, 0.15), gpus=["l40s"], workers=1, verify=0)
    assert result.candidates
    for c in result.candidates:
        dep = replica_deployment(model, resolve_accelerator(c.accelerator), c.tp, c.pp, c.weights,
                          c.kv, c.expert_parallel)
        settings = EngineSettings(max_model_len=c.max_model_len, max_num_seqs=c.max_num_seqs,
                                  max_num_batched_tokens=c.max_num_batched_tokens)
        assert not refuses_to_start(kv_pool(dep, settings), dep, c.max_model_len), c.label


@pytest.mark.usefixtures("unsimulated")  # unpriced rows are priced by no check
def test_a_plan_met_only_by_unpriced_cards_says_no_priced_deployment(
        capsys: pytest.CaptureFixture[str]) -> None:
    from ridgeline.cli import main

    assert main(["plan", "llama-3.1-8b", "--slo-ttft-ms", "500", "--slo-tpot-ms", "40",
                 "--rate", "5", "--gpus", "rtx-3060", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "NO PRICED DEPLOYMENT within the limits" in out and "feasible but unpriced" in out


@pytest.mark.usefixtures("plan_once")  # one search for its text and --json
def test_an_unpriced_answer_lists_its_single_pools_before_the_splits_and_names_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Gaudi 3 has no catalog price: one card meets the SLO alone, and 1P1D pools of two
    held as well. The one-card replica (the answer) comes first, right under NO PRICED
    DEPLOYMENT, and the two-card split pools are introduced as splits, not listed under
    the headline as if they were it."""
    import json

    from ridgeline.cli import main

    args = ["plan", "llama-3.1-8b", "--slo-ttft-ms", "500", "--slo-tpot-ms", "40", "--rate", "2",
            "--gpus", "gaudi3", "--workers", "1"]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "unpriced" and data["unpriced"] and data["held_splits"]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("NO PRICED DEPLOYMENT within the limits meets this SLO.")
    assert lines[at + 1].startswith("feasible but unpriced (pass --price GPU=USD): ")
    assert data["unpriced"][0]["label"] in lines[at + 1]
    split = lines.index("split prefill and decode pools also held:")
    assert split > at + 1 and lines[split + 1].startswith("  1P1D pools of ")


def test_pareto_points_name_the_kv_format_their_figures_assume() -> None:
    result = _searched("h100-sxm")
    kv = {c.kv for c in result.candidates}
    assert all(any(f", KV {k}, b" in p.label for k in kv) for p in result.pareto)


@pytest.mark.usefixtures("splits_unchecked")  # the winner's counts
def test_plan_explain_shows_the_analytic_and_the_simulated_replica_counts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """At 4 req/s of 4,000-token prompts one MI300X replica's analytic rate (about 4.05 req/s,
    its prompts' queue) covers the load, but its simulated p90 TTFT misses 80 ms: two
    replicas are kept. (The MI300X alone, up to the two its answer takes: the winner where the
    default cards are searched, at the same counts.)"""
    from ridgeline.cli import main

    assert main(["plan", "llama-3.1-8b", "--rate", "4", "--input-len", "4000", "--output-len",
                 "200", "--slo-ttft-ms", "80", "--slo-tpot-ms", "30", "--workers", "1",
                 "--gpus", "mi300x", "--max-gpus", "2", "--explain"]) == 0
    out = capsys.readouterr().out
    analytic = out.split("replicas, analytic:")[1].split("=> replicas = ")[1].split()[0]
    simulated = out.split("replicas, simulated:")[1].split("=> replicas = ")[1].split()[0]
    assert int(analytic) < int(simulated)
    assert "p90 TTFT = " in out.split("replicas, simulated:")[1] and "[SLO 80 ms]" in out


def test_a_check_that_cannot_keep_up_with_its_arrivals_fails_however_its_window_reads(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """An overloaded replica's queue grows: over a window of ten lifetimes its TTFT may still
    read under the SLO, but fewer requests finish in the window than arrive in it. A plan
    whose every check reads so finds no verified winner, however good its latencies."""
    from ridgeline.sim.metrics import Recorder
    from ridgeline.sim.request import Request

    rec = Recorder(1)
    rec.window_s = (50.0, 99.875)  # to the last arrival: it holds no drain
    for i in range(400):  # 400 arrive in the window, 180 finish inside it
        r = Request(i, 50 + i / 8, 10, 2)
        r.first_token_s = r.first_scheduled_s = r.arrival_s + 0.1
        r.finish_s = r.arrival_s + (0.2 if i < 180 else 200)
        r.num_generated = 2
        rec.finish(r)
    assert (rec.windowed, rec.finished_in_window) == (400, 180) and not rec.keeps_up
    # one GPU, short answers: a check that never keeps up simulates every replica count up to
    # the most within --max-gpus, for each candidate checked
    argv = ["plan", "llama-3.1-8b", "--rate", "4", "--input-len", "500", "--output-len",
            "50", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50", "--engine", "vllm",
            "--gpus", "h100", "--workers", "1", "--max-gpus", "1", "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["winner"]["verified"]
    monkeypatch.setattr(Recorder, "keeps_up", property(lambda self: False))
    # a budget of one check: the cheapest candidate's, which now reads as failing (every
    # check past it would read so too, each simulating every count within --max-gpus)
    import functools

    import ridgeline.plan as planning

    monkeypatch.setattr(planning, "plan", functools.partial(planning.plan, verify=1))
    main(argv)
    assert not (json.loads(capsys.readouterr().out).get("winner") or {}).get("verified")


def test_the_winners_check_command_reruns_its_check(capsys: pytest.CaptureFixture[str]) -> None:
    import shlex

    assert main(["plan", "llama-3.1-8b", "--rate", "6", "--input-len", "lognormal:800,0.6",
                 "--output-len", "lognormal:200,0.6", "--slo-ttft-ms", "300", "--slo-tpot-ms",
                 "30", "--gpus", "h100", "--max-gpus", "1", "--workers", "1", "--seed", "3",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    win, check = data["winner"], data["check_command"]
    assert win["verified"] and check.startswith("ridgeline simulate llama-3.1-8b ")
    argv = shlex.split(check)[1:]
    assert argv[argv.index("--seed") + 1] == "3"
    assert main([*argv, "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["completed"] == win["sim_requests"] and sim["keeps_up"] is True
    # the same run: its p90s are the check's
    assert sim["ttft_s"]["p90"] == pytest.approx(win["sim_ttft_s"], rel=1e-12)
    assert sim["tpot_s"]["p90"] == pytest.approx(win["sim_tpot_s"], rel=1e-12)
    assert sim["window_s"] == win["sim_window_s"]
    assert sim["at_percentile"]["ttft_s"] == pytest.approx(win["sim_ttft_s"], rel=1e-12)


def test_a_check_that_rejects_requests_reruns_with_them_counted_as_misses(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Prompts past Llama-2-7B's 4,096-token context are rejected; plan counts those of its
    check's window as misses, and the check command's --percentile reads the same (the table's
    p90, of the answered requests only, is lower)."""
    import shlex

    assert main(["plan", "llama-2-7b", "--rate", "5", "--input-len", "lognormal:1000,0.8",
                 "--output-len", "200", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "60",
                 "--gpus", "mi300x", "--max-gpus", "1", "--workers", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)  # (one card holds it: no split pools to check)
    win, check = data["winner"], data["check_command"]
    assert main([*shlex.split(check)[1:], "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    at = sim["at_percentile"]
    assert sim["rejected"] > at["rejected_counted"] > 0  # the window's, not the whole run's
    assert at["ttft_s"] == pytest.approx(win["sim_ttft_s"], rel=1e-12)
    assert at["tpot_s"] == pytest.approx(win["sim_tpot_s"], rel=1e-12)
    assert sim["ttft_s"]["p90"] < at["ttft_s"]


def test_a_check_command_is_given_only_where_simulate_can_rerun_it() -> None:
    from dataclasses import replace

    from ridgeline.candidate import Candidate
    from ridgeline.reports.plan_commands import check_line

    c = Candidate("h100-sxm", 4, 1, "bf16", "fp8", 128, 64, 0.02, 0.1, 5.0, 3, 2.99, True,
                  "", (1.0, 1.0), verified=True, expert_parallel=True, sim_requests=900,
                  sim_window_s=(12.5, 80.0), max_num_batched_tokens=2048)
    line = check_line("qwen3-30b-a3b", Load(9.0, "1000", "250"), SLO, "sglang", "0.4", c, 4096)
    for flags in ("--num-gpus 4", "--kv-dtype fp8", "--engine sglang", "--engine-version 0.4",
                  "--enable-expert-parallel", "--max-num-seqs 128",
                  "--max-num-batched-tokens 2048", "--max-model-len 4096", "--rate 3 ",
                  "--num-requests 900", "--window 12.5,80", "--slo-ttft-ms 500",
                  "--slo-tpot-ms 50"):
        assert flags in line
    assert check_line("m", Load(10.0, "1000", "250"), SLO, "vllm", None, replace(c, replicas=3),
                      4096).count("--rate 3.33333 ") == 1  # the share the check ran at
    # (Load.share_rate: 6 significant digits, not 3.3333333333333335)
    assert "--num-gpus 4 --pipeline-parallel-size 2 " in check_line(
        "m", LOAD, SLO, "vllm", None, replace(c, pp=2), 4096)
    assert not check_line("m", LOAD, SLO, "vllm", None, replace(c, verified=False), 4096)
    assert not check_line("m", LOAD, SLO, "vllm", None, replace(c, disaggregated="1P1D"), 4096)


@pytest.mark.parametrize(("gpu", "tp"), [("h100-sxm", 1), ("h100-sxm", 2)])
def test_sglangs_analytic_sizing_counts_its_prompt_steps_whole(gpu: str, tp: int) -> None:
    """SGLang runs prompt steps alone, the decodes waiting through each whole step (weights
    read and all), not at a mixed step's margin: sized so, the analytic replica count of a
    MoE serving short prompts is the simulated one (it had been half: 3 against 6, 1 against
    2), and it asks for more than vLLM's sizing of the same shape."""
    import math

    from ridgeline.candidate import Candidate, replica_deployment
    from ridgeline.engines import profile_for
    from ridgeline.hardware import resolve_accelerator
    from ridgeline.plan_checks import verify
    from ridgeline.replica_sizing import size_replica

    moe, load, slo = resolve_model("qwen3-30b-a3b"), Load(30, "200", "1000"), Slo(0.5, 0.02)
    counts = {}
    for engine in ("sglang", "vllm"):
        dep = replica_deployment(moe, resolve_accelerator(gpu), tp, 1, "fp8", "fp8", engine=engine)
        sized = size_replica(dep, profile_for(engine), load, slo, None)
        assert sized is not None
        batch, mean_tpot, floor, rate = sized[:4]
        counts[engine] = replicas = math.ceil(load.rate_req_s / rate * 1.0001)
        if engine == "sglang":
            c = Candidate(gpu, tp, 1, "fp8", "fp8", None, batch, mean_tpot, floor, rate,
                          replicas, None, True, "", (1.0, 1.0))
            checked = verify(moe, c, load, slo, 64, engine="sglang")
            assert checked is not None and checked.replicas == replicas
    assert counts["sglang"] > counts["vllm"]


def test_a_checks_count_must_hold_on_a_second_draw_of_the_requests(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """At the capacity edge one short run's p90 swings, so the fewest replicas that hold must
    hold on another draw of the requests too: where the second draw misses at that count,
    the check takes one more replica (the reported figures stay the first draw's)."""
    from dataclasses import replace

    from ridgeline.plan_checks import verify

    load, slo = Load(12, "lognormal:1000,0.6", "lognormal:250,0.6"), Slo(0.5, 0.04)
    c = _sized(MODEL, "l40s", 1, 1, "fp8", "fp8", load, slo)
    first = verify(MODEL, c, load, slo, 64)
    assert first is not None
    steady, seen = Load.steady, []

    def second_draw_overloaded(self: Load, replicas: int, lifetime_s: float,
                               first_token_only: bool = False, percentile: float = 0.0) -> Any:
        seen.append((self.seed, replicas))
        if self.seed == 1 and replicas == first.replicas:  # this draw misses at that count
            self = replace(self, rate_req_s=self.rate_req_s * 3)
        return steady(self, replicas, lifetime_s, first_token_only, percentile)

    monkeypatch.setattr(Load, "steady", second_draw_overloaded)
    bumped = verify(MODEL, c, load, slo, 64)
    assert bumped is not None and bumped.replicas == first.replicas + 1
    assert (1, bumped.replicas) in seen and (0, bumped.replicas) in seen


def test_a_pipeline_candidates_check_reruns_with_simulate_pp(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A PP2 replica is checked as simulate -pp runs it (its share of the load dealt to two
    micro-batch lanes), so its check command gives back the check's own figures."""
    import shlex

    from ridgeline.plan_checks import verify
    from ridgeline.reports.plan_commands import check_line

    model = resolve_model("llama-3.1-70b")
    load, slo = Load(4, "lognormal:800,0.6", "lognormal:200,0.6"), Slo(1.0, 0.08)
    c = _sized(model, "h100-sxm", 2, 2, "fp8", "bf16", load, slo)
    checked = verify(model, c, load, slo, 64)
    assert checked is not None and checked.verified
    line = check_line("llama-3.1-70b", load, slo, "vllm", None, checked,
                      checked.max_model_len)  # as plan sizes it
    assert "--pipeline-parallel-size 2" in line
    assert main([*shlex.split(line)[1:], "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["settings"]["micro_batches_in_flight"] == 2
    assert sim["completed"] + sim["rejected"] == checked.sim_requests
    assert sim["at_percentile"]["ttft_s"] == pytest.approx(checked.sim_ttft_s, rel=1e-12)
    assert sim["at_percentile"]["tpot_s"] == pytest.approx(checked.sim_tpot_s, rel=1e-12)


def _sized(model: Any, gpu: str, tp: int, pp: int, weights: str, kv: str, load: Load,
           slo: Slo) -> Any:
    """A candidate as plan's analytic sizing gives it, unchecked."""
    import math

    from ridgeline.candidate import Candidate, replica_deployment
    from ridgeline.engines import profile_for
    from ridgeline.hardware import resolve_accelerator
    from ridgeline.replica_sizing import size_replica

    dep = replica_deployment(model, resolve_accelerator(gpu), tp, pp, weights, kv)
    sized = size_replica(dep, profile_for("vllm"), load, slo, None)
    batch, tpot, floor, rate = sized[:4] if sized else (0, 0.0, 0.0, 1.0)
    return Candidate(gpu, tp, pp, weights, kv, None, batch, tpot, floor, rate,
                     math.ceil(load.rate_req_s / rate), None, True, "", (1.0, 1.0))



def test_a_cdna3_moe_winner_carries_the_measured_gap() -> None:
    # gpt-oss-120b's MXFP4 experts on one MI300X: validation/serving.csv measured 1.4-2.1x
    # slower than priced, and the plan that picks that card says so
    # (one card a replica: the caution follows the winner's card, and one of either holds it)
    moe = resolve_model("gpt-oss-120b")
    # unsimulated: the caution is the winner's card's, whatever its check reads
    on_amd = plan(moe, Load(1.0, "500", "200"), SLO, ["mi300x"], max_gpus=1, workers=1,
                  verify=0)
    assert on_amd.winner is not None and on_amd.winner.accelerator == "mi300x"
    assert any("CDNA3" in c for c in on_amd.cautions)
    on_nvidia = plan(moe, Load(1.0, "500", "200"), SLO, ["h200-sxm"], max_gpus=1, workers=1,
                     verify=0)
    assert not any("CDNA3" in c for c in on_nvidia.cautions)


def test_the_prompt_queue_load_keeps_the_late_first_tokens_to_the_tail() -> None:
    """Prompts of lognormal prefill times queue one after another: at the share returned, a
    random queue (Lindley's recursion) has a tenth of its first tokens, each its own prefill
    plus its wait, past the SLO. Less room, less load; with more than a tenth of the prompts
    past the SLO alone, none; short prompts barely bind."""
    import random

    from ridgeline.replica_sizing import prompt_queue_load

    rng = random.Random(5)
    services = [0.8 * rng.lognormvariate(0.0, 0.5) for _ in range(64)]
    slo, tail = 3.0, 0.1
    rho = prompt_queue_load([(t, t, 1) for t in services], slo, tail)
    assert 0.2 < rho < 0.8
    mean = sum(services) / len(services)
    wait, late, n = 0.0, 0, 200_000
    for _ in range(n):
        gap = rng.expovariate(rho / mean)
        service = rng.choice(services)
        late += wait + service > slo
        wait = max(0.0, wait + service - gap)
    assert late / n == pytest.approx(tail, rel=0.2)
    assert prompt_queue_load([(t, t, 1) for t in services], slo / 2, tail) < rho
    # half the prompts late alone
    assert prompt_queue_load([(2.0, 2.0, 1), (4.0, 4.0, 1)], slo, tail) == 0.0
    assert prompt_queue_load([(0.05, 0.05, 8)], 1.0, tail) > 0.9


def test_prompt_lengths_are_priced_in_slices_that_keep_their_mean() -> None:
    """A heavy tail's far end stays in: each slice's mean, not its middle (the middle of the
    top sixteenth of a lognormal σ 1 sits well under its mean)."""
    from ridgeline.replica_sizing import length_quantiles

    lengths = [1, 2, 3, 4, 5, 6, 7, 100]
    assert length_quantiles(lengths, 4) == [2, 4, 6, 54]
    assert sum(length_quantiles(lengths, 4)) / 4 == pytest.approx(sum(lengths) / 8, rel=0.05)
    assert length_quantiles([500] * 10, 16) == [500] * 10  # no empty slice
    assert length_quantiles([7], 16) == [7]


def test_an_engine_version_without_pipeline_parallelism_drops_those_shapes() -> None:
    """vLLM 0.4 had no pipeline parallelism (it came in 0.5.1): plan searches its TP shapes
    and leaves out the TP × PP ones it would otherwise try, rather than refusing the run."""
    # Llama 3: vLLM 0.4 cannot load 3.1 (its rope_scaling came in 0.5.3.post1)
    result = plan(resolve_model("llama-3-70b"), Load(4.0, "1000", "200"), Slo(1.0, 0.05),
                  gpus=["h100-sxm"], max_gpus=16, workers=1, engine_version="0.4.0",
                  verify=0)  # the shapes searched, before any check
    assert result.winner is not None
    assert all(c.pp == 1 for c in (result.winner, *result.candidates))


def _slow_profile(tmp_path: Path) -> Path:
    """The bundled vLLM profile with its bandwidth share halved: a user's calibration on a
    cluster whose decode runs at half the bundled expectation."""
    from dataclasses import replace

    from ridgeline.engines import profile_for

    slow = replace(profile_for("vllm"), bandwidth_efficiency=profile_for("vllm")
                   .bandwidth_efficiency / 2, source="test: half the bandwidth")
    path = tmp_path / "slow.json"
    path.write_text(json.dumps({"engines": {"vllm": slow.to_dict()}}))
    return path


# one search for its text and --json; the winner is a single pool's, whatever the splits hold
@pytest.mark.usefixtures("plan_once", "splits_unchecked")
def test_plan_and_page_take_a_calibrated_profile(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`calibrate` exists to size deployments: plan times its candidates with the user's
    profile, says so, and its check command carries it; the page draws with it."""
    slow = _slow_profile(tmp_path)
    argv = ["plan", "llama-3.1-8b", "--rate", "20", "--slo-ttft-ms", "500", "--slo-tpot-ms",
            "20", "--gpus", "h100-sxm", "--workers", "1", "--json"]
    assert main(argv) == 0
    bundled = json.loads(capsys.readouterr().out)
    assert main([*argv, "--profile", str(slow)]) == 0
    mine = json.loads(capsys.readouterr().out)
    assert mine["profile_file"] == str(slow) and bundled["profile_file"] is None
    assert mine["winner"] != bundled["winner"]  # half the bandwidth: a dearer deployment
    assert mine["winner"]["cost_per_hour_usd"] >= bundled["winner"]["cost_per_hour_usd"]
    assert main([*argv[:-1], "--profile", str(slow)]) == 0
    text = capsys.readouterr().out
    assert f"steps timed by the profile in {slow}" in text
    assert f"--profile {slow}" in text  # the simulate check reruns it on the same profile
    page = tmp_path / "p.html"
    assert main(["page", "llama-3.1-8b", "--gpu", "h100", "--counts", "1", "--profile",
                 str(slow), "-o", str(page)]) == 0
    plain = tmp_path / "q.html"
    assert main(["page", "llama-3.1-8b", "--gpu", "h100", "--counts", "1", "-o",
                 str(plain)]) == 0
    assert page.read_text() != plain.read_text()


def test_a_long_trace_is_checked_on_its_heaviest_stretch() -> None:
    """8,000 requests, the last 2,000 arriving 30 times as fast: a check of 1,600 requests
    takes them from the burst, not from the calm start, and numbers them by their place."""
    calm = [(i * 0.5, 1000, 250) for i in range(6000)]
    burst = [(3000 + i / 60, 1000, 250) for i in range(2000)]
    load = Load(2.67, "trace", "trace", 0, tuple(calm + burst), "t.csv")
    first = load.heaviest(1, 1600)
    assert first >= 6000 - 1  # inside the burst (a calm request's gap may lead it)
    work, (low, high) = load.steady(1, 10.0)
    counted = [r for r in work if low <= r.arrival_s <= high]  # the rest load the engine
    assert counted[0].id == first and counted[0].arrival_s >= 2999
    assert len(counted) == 1600
    # dealt round-robin to two replicas, a replica's share holds every other request
    assert load.heaviest(2, 800) >= 3000 - 1
    assert Load(2.67, "t", "t", 0, tuple(calm[:100]), "t.csv").heaviest(1, 1600) == 0


def test_the_closest_miss_looks_at_the_layouts_the_search_tried(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-405B on L40S: the search holds it on 16 (TP16, or TP8 × PP2), so a TPOT it
    cannot reach is the miss, not "does not fit" (closest looked only as far as TP8)."""
    assert main(["plan", "llama-3.1-405b", "--rate", "1", "--slo-ttft-ms", "1000",
                 "--slo-tpot-ms", "40", "--gpus", "l40s", "--workers", "1"]) == 1  # the answer: no
    out = capsys.readouterr().out
    assert "closest: 16 x l40s" in out and "TPOT ≥" in out and "does not fit" not in out
    assert main(["plan", "llama-3.1-405b", "--rate", "1", "--slo-ttft-ms", "1000",
                 "--slo-tpot-ms", "40", "--gpus", "l40s", "--max-gpus", "4", "--workers",
                 "1"]) == 1
    assert "no group of up to 4 GPUs (l40s) holds llama-3.1-405b" in capsys.readouterr().out


@pytest.mark.usefixtures("splits_unchecked")  # one replica's sizing
def test_the_rate_a_replica_is_sized_at_says_which_limit_binds(
        capsys: pytest.CaptureFixture[str]) -> None:
    """32k-token prompts on one H100: the batch's TPOT allows more than the prompts' queue
    within the TTFT SLO; --explain lists the four limits, and the rate is their least (it
    showed batch ÷ (output × TPOT) alone, a sum whose inputs did not give its result)."""
    assert main(["plan", "llama-3.1-8b", "--rate", "2", "--input-len", "32000",
                 "--output-len", "50", "--slo-ttft-ms", "5000", "--slo-tpot-ms", "100",
                 "--gpus", "h100", "--workers", "1", "--json", "--explain",
                 "--max-gpus", "2"]) == 0  # up to the winner's two one-card replicas
    data = json.loads(capsys.readouterr().out)
    rate = next(s for s in data["explain"] if s["label"] == "one replica's rate")
    shown = {i["name"]: i["value"] for i in rate["inputs"]}
    tpot_rate = shown["batch"] / (shown["output tokens (mean)"] * shown["TPOT"] / 1e3)
    assert shown["batch ÷ (output × TPOT)"] == pytest.approx(tpot_rate, rel=1e-3)
    limits = [shown["batch ÷ (output × TPOT)"], shown["the step's token budget"],
              shown["the prompts' queue"], shown["the KV pool"]]
    assert rate["result"]["value"] == pytest.approx(min(limits)) and min(limits) < tpot_rate
    # reports.plan._binding's worked number: the queue allows 1.08 req/s a replica, and binds
    # (1.22 when each prompt was priced as one step, not in chunks of the budget)
    assert round(shown["the prompts' queue"], 2) == 1.08
    assert rate["result"]["value"] == pytest.approx(shown["the prompts' queue"])


def test_a_local_config_launches_from_its_folder_and_a_v0_version_is_cautioned(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`vllm serve cfg.json` cannot start: an engine loads a folder (config and weights) or
    a Hub id. And a V0 release's plan says its scheduling is not what was simulated."""
    from ridgeline.catalog import model_entry
    from ridgeline.datafiles import load_data

    # Qwen2.5: vLLM 0.6.3 has no Qwen3ForCausalLM (it came in 0.8.4)
    config = load_data(f"models/{model_entry('qwen2.5-7b').file}")
    (tmp_path / "config.json").write_text(json.dumps(config), "utf-8")
    assert main(["plan", str(tmp_path / "config.json"), "--rate", "2", "--slo-ttft-ms", "1000",
                 "--slo-tpot-ms", "50", "--gpus", "h100", "--engine-version", "0.6.3",
                 "--max-gpus", "1", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert f"vllm serve {tmp_path} --tensor-parallel-size" in out
    assert "vLLM 0.6.3 schedules with its V0 engine" in out
    assert "save the file there as config.json" not in out
    # a file named otherwise: the folder served holds no config.json the engine would read
    (tmp_path / "config.json").rename(tmp_path / "qwen.json")
    assert main(["plan", str(tmp_path / "qwen.json"), "--rate", "2", "--slo-ttft-ms", "1000",
                 "--slo-tpot-ms", "50", "--gpus", "h100", "--max-gpus", "1", "--workers", "1",
                 "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert f"the launch commands serve {tmp_path}, qwen.json's folder: an engine reads a " \
        "model folder's config.json beside its weights, so save the file there as " \
        "config.json (or give the folder, or the Hub id)" in notes


def test_plan_takes_gpu_as_every_other_command_spells_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`--gpu h100,a100` is read as `--gpus h100,a100` (every other command's spelling, which
    plan had refused as an unrecognized argument); --help shows the one spelling."""
    from ridgeline.cli import build_parser

    parser = build_parser()
    base = ["plan", "llama-3.1-8b", "--rate", "5", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50"]
    plural = parser.parse_args([*base, "--gpus", "h100,a100"])
    single = parser.parse_args([*base, "--gpu", "h100,a100"])
    assert single.gpus == plural.gpus and vars(single) == vars(plural)
    with pytest.raises(SystemExit):
        parser.parse_args(["plan", "--help"])
    shown = capsys.readouterr().out
    assert "--gpus GPUS" in shown and "--gpu " not in shown and "--gpu," not in shown


def test_the_closest_miss_names_the_latency_that_misses_not_the_one_within_its_slo() -> None:
    """TTFT 7 ms meets a 10 ms SLO; only TPOT's 2.5 ms misses the 1 ms one, and the line says
    so, where it had stopped at "TTFT ≥ 7 ms, TPOT ≥ 2.5 ms even unloaded" as if both missed."""
    result = plan(resolve_model("llama-3.1-8b"), Load(0.5, "1000", "250"), Slo(0.010, 0.001),
                  ["b200"], workers=1)
    assert result.winner is None
    assert result.closest_miss == ("8 x b200 (TP8): TTFT ≥ 7 ms, TPOT ≥ 2.5 ms even unloaded: "
                                   "TPOT misses its 1 ms SLO; TTFT is within its 10 ms")


def test_a_trtllm_hybrids_launch_carries_seats_whose_state_fits(
        capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM to 1.2 holds every seat's recurrent state from start-up: Nemotron-H-56B fp8
    on one H100 at the default 2,048 seats wants 876.7 GiB. The plan launches such a replica at
    the most seats whose pool holds as many of the load's mean requests (replica_sizing.state_seats),
    and fit, at that launch line's settings, finds it fits; it had launched 2,048 seats."""
    from ridgeline import Deployment, resolve_accelerator
    from ridgeline.capacity import held_conversations
    from ridgeline.memory import EngineSettings, kv_pool
    from ridgeline.replica_sizing import state_seats

    load = Load(2.0, "1000", "250")
    dep = Deployment.build(resolve_model("nemotron-h-56b"), resolve_accelerator("h100"),
                           "fp8", kv="fp8", engine="trtllm")
    seats = state_seats(dep, EngineSettings(), load)
    assert seats is not None and 1 < seats < 2048
    held = held_conversations(kv_pool(dep, EngineSettings(max_num_seqs=seats)), dep, 1250)
    assert held >= seats
    result = plan(resolve_model("nemotron-h-56b"), load, Slo(2.0, 0.05, 90), ["h100-sxm"],
                  max_gpus=2, workers=1, engine="trtllm", verify=0)  # the launch it sizes
    win = result.winner
    assert win is not None and win.max_num_seqs is not None and win.max_num_seqs < 2048
    code, out, _ = run_fit(capsys, win)
    assert code == 0 and not out.startswith("DOES NOT FIT")


def run_fit(capsys: pytest.CaptureFixture[str], win: Any) -> tuple[int, str, str]:
    """fit at a plan candidate's launch settings (Nemotron-H-56B under TensorRT-LLM)."""
    code = main(["fit", "nemotron-h-56b", "--gpu", win.accelerator, "--num-gpus",
                 str(win.tp), "--weights", win.weights, "--kv-dtype",
                 win.kv, "--engine", "trtllm", "--max_batch_size", str(win.max_num_seqs),
                 "--max-model-len", str(win.max_model_len)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.usefixtures("splits_unchecked")  # the single-pool winner's launch and check
def test_a_trtllm_launch_under_its_max_seq_len_says_longer_prompts_are_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    """trtllm-serve with enable_chunked_prefill off refuses a prompt past --max_num_tokens
    (llm.py _check_arguments), whatever --max_seq_len says: the plan, checked so, says where
    its line's max_seq_len is longer, with this load's longest prompt and the YAML key."""
    code = main(["plan", "qwen3-next-80b-a3b", "--gpus", "h100", "--engine", "trtllm",
                 "--rate", "2", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "50",
                 "--max-gpus", "2", "--workers", "1"])
    out = capsys.readouterr().out
    assert code == 0
    note = next(line for line in out.splitlines() if "with enable_chunked_prefill off" in line)
    assert "this load's longest prompt is 1,000" in note
    assert "enable_chunked_prefill: true" in note


def test_a_cheaper_deployment_that_held_on_the_first_draw_alone_is_named_with_its_seed(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-32B at 0.5 req/s of 8,000 / 500 tokens on A100-40GBs, p90 TTFT 5 s, TPOT 60 ms:
    one TP4 replica ($5.16/h) holds on seed 0 (p90 TPOT 58.3 ms) but not on the second draw
    (60.0 ms), so the plan pays for 8 GPUs. It said nothing of it, and an engineer who ran
    the check command's seed on the TP4 replica found it passing. It now names it, its price
    under the winner's, by how much the second draw missed, and the --seed that shows it."""
    args = ["plan", "qwen3-32b", "--gpus", "a100-sxm-40gb", "--max-gpus", "8",
            "--max-model-len", "32768", "--weights", "bf16", "--kv-dtype", "bf16", "--rate",
            "0.5", "--input-len", "8000", "--output-len", "500", "--slo-ttft-ms", "5000",
            "--slo-tpot-ms", "60", "--workers", "1"]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    edge, win = data["second_draw_miss"], data["winner"]
    assert edge["cost_per_hour_usd"] < win["cost_per_hour_usd"]
    assert edge["first_draw"]["held"] and not edge["second_draw"]["held"]
    assert edge["first_draw"]["sim_tpot_s"] <= 0.060 < edge["second_draw"]["sim_tpot_s"]
    assert edge["missed_by_s"]["TPOT"] == pytest.approx(edge["second_draw"]["sim_tpot_s"] - 0.060)
    assert "--seed 0" in edge["check_command"] and "--seed 1" in edge["second_draw_command"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert f"held on one draw only: {edge['label']}" in text
    assert f"    the second draw: {edge['second_draw_command']}" in text
