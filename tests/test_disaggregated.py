"""xPyD pools: a TTFT chained through two pools is the percentile of the sum, not the sum of
the percentiles; the pools are sized in either KV cache format."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.disaggregated import disaggregated_candidates
from ridgeline.plan_cautions import prompt_cap_note
from ridgeline.search_space import ENGINE_KNOBS
from ridgeline.serving_load import Load, Slo
from ridgeline.split_runs import GRID, chained_percentile_s, quantile_grid


def test_percentiles_do_not_add() -> None:
    """Two waits each 0.2 s nine times in ten and 1 s the tenth (0.91 / 0.09): each p90 is
    0.2 s, so their p90s add to 0.4 s, but one request in six waits the long one somewhere,
    and the sum's p90 is 1.2 s."""
    wait = [0.2] * round(0.91 * GRID) + [1.0] * round(0.09 * GRID)
    assert sorted(wait)[int(0.9 * GRID) - 1] == 0.2
    assert chained_percentile_s((wait, wait), 90) == pytest.approx(1.2)
    assert chained_percentile_s((wait, wait), 50) == pytest.approx(0.4)


def test_the_chained_percentile_matches_sampled_sums() -> None:
    """Three independent exponential waits (means 0.1, 0.02 and 0.05 s): the grid's p90 of
    their sum against 200,000 sampled sums."""
    rng = random.Random(7)
    means = (0.1, 0.02, 0.05)
    grids = [quantile_grid(lambda q, m=m: -m * math.log(1 - q / 100)) for m in means]
    sums = sorted(sum(rng.expovariate(1 / m) for m in means) for _ in range(200_000))
    assert chained_percentile_s(grids, 90) == pytest.approx(sums[int(0.9 * len(sums))],
                                                            rel=0.02)


def test_the_pools_may_keep_an_fp8_cache() -> None:
    """On a card with fp8, the split is sized in whichever cache format needs fewer GPUs,
    and its line names the format."""
    model = resolve_model("llama-3.1-70b")
    load = Load(10.0, "lognormal:1000,0.8", "lognormal:250,0.8")
    slo = Slo(1.0, 0.05, 90)
    found = disaggregated_candidates(model, load, slo, ["mi300x"], 64, {"mi300x": 1.85})
    assert found and found[0].kv == "fp8"  # half the cache a token: one decode replica, not 2
    bf16_only = disaggregated_candidates(model, load, slo, ["a100-sxm-80gb"], 64, {},
                                         engine="trtllm")
    assert bf16_only and all(c.kv == "bf16" for c in bf16_only)  # TRT-LLM: no fp8 cache on Ampere
    assert f"KV {found[0].kv}" in found[0].label_for("vllm")


def test_plan_says_when_a_split_undercuts_the_winner(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A verified xPyD split cheaper than the co-located winner is named as such, with the
    hand-off it needs."""
    from tests.conftest import run_cli

    code, out, _ = run_cli(capsys, "plan", "llama-3.1-70b", "--rate", "10", "--input-len",
                           "lognormal:1000,0.8", "--output-len", "lognormal:250,0.8",
                           "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50", "--gpus", "mi300x",
                           "--max-gpus", "8", "--workers", "1")  # one node: 5 GPUs win
    assert code == 0
    win = float(out.split("winner: ")[1].split("$")[1].split("/h")[0])
    splits = [line for line in out.splitlines() if line.startswith("disaggregated, ")
              and "simulated" in line]
    costs = [float(line.split("$")[1].split("/h")[0]) for line in splits]
    cheaper = [c for c in costs if c < win]
    assert ("costs less than the winner" in out) == bool(cheaper)


def test_a_latency_summed_with_itself_thrice_is_carried_in_quantiles() -> None:
    """Three draws of the same wait (one list passed three times): the p90 of their sum, where
    a third of the draws take the long wait at least once."""
    wait = [0.2] * round(0.91 * GRID) + [1.0] * round(0.09 * GRID)
    assert chained_percentile_s((wait, wait, wait), 90) == pytest.approx(1.4)
    assert chained_percentile_s((wait,), 90) == pytest.approx(0.2)


def test_a_pairs_ttft_read_again_is_the_chained_percentile() -> None:
    """PoolRuns carries a prefill run's TTFTs and the hand-off summed once and keeps each
    pair's TTFT: Llama-3.1-8B's 1P1D on one H100 each, read twice, is the chained percentile
    of the three distributions, to the bit."""
    from ridgeline.candidate import replica_deployment
    from ridgeline.disaggregated import handoff_s, pool_configs
    from ridgeline.engines import profile_for
    from ridgeline.hardware import resolve_accelerator
    from ridgeline.split_runs import PoolRuns

    load, slo = Load(4.0, "lognormal:800,0.6", "lognormal:200,0.6"), Slo(0.5, 0.05, 90)
    model = resolve_model("llama-3.1-8b")
    sized = next(c for c in disaggregated_candidates(model, load, slo, ["h100-sxm"], 8,
                                                     {"h100-sxm": 2.99}))
    dep = replica_deployment(model, resolve_accelerator("h100-sxm"), sized.tp, 1,
                             sized.weights, sized.kv)
    transfers = [handoff_s(dep, p) for p in (200, 800, 3000)]
    runs = PoolRuns(dep, profile_for("vllm"), pool_configs(dep, load, sized.max_model_len,
                                                           None), load, slo, sized, transfers)
    (_, p), (_, d) = runs.prefill(1, 0), runs.decode(1, 0)
    chained = chained_percentile_s((runs.grids[id(p)], transfers, runs.grids[id(d)]), 90)
    assert runs.ttft_s(p, d) == chained and runs.ttft_s(p, d) == chained
    assert chained > max(transfers)  # the waits are summed, not only the hand-off


# DeepSeek-V3's 8,000-token prompts on B200s: TP4 pools whose KV pool holds four such
# conversations at vLLM's default 1,024 seats (the previous session's 1P3D at p90 TTFT 1.5 s)
LONG = Load(2.0, "8000", "250")
LONG_SLO = Slo(3.0, 0.05, 90)
# from vLLM 0.28 a B200 profiles a 16,384-token budget (its 160 GiB tier), and a TP4 pool at
# the defaults holds too little for 8,000-token prompts: the split below is sized at 5,000,
# TP4 pools with an fp8 cache whose defaults need more decode replicas than their knobs
SPLIT = Load(2.0, "5000", "250")


# the release whose 0.92 budget keeps DeepSeek-V3's pools on 4 x B200 tight (0.34 sizes the
# whole card after warm-up: 197,248 tokens at the default seats, where the knobs matter less);
# the last before a B200's default seats capture CUDA graphs to 1,024 tokens (0.28: 83 sizes,
# which leave 0.32's pool at those seats nothing)
TIGHT = "0.27"


@pytest.fixture(scope="module")
def deepseek_split() -> tuple[Any, Any]:
    """The cheapest DeepSeek-V3 split on B200s for SPLIT, as sized, and as checked, under vLLM
    0.27 (TIGHT), whose 0.92 budget leaves the pools tight enough for the knobs to matter."""
    from ridgeline.disaggregated import verify_disaggregated

    model = resolve_model("deepseek-v3")
    sized = disaggregated_candidates(model, SPLIT, LONG_SLO, ["b200"], 64, {"b200": 6.0},
                                     TIGHT)[0]
    return sized, verify_disaggregated(model, sized, SPLIT, LONG_SLO, 64, TIGHT)


def test_fewer_seats_leave_a_pool_more_kv_cache() -> None:
    """vLLM sizes its CUDA graphs and sampler by max_num_seqs: DeepSeek-V3 on 4 x B200 starts
    with 27,648 tokens of KV pool at the default 1,024 seats, 61,952 at 64 (pool_configs), at
    max_model_len 4,096 under vLLM 0.27 (TIGHT), whose sampler peak at 1,024 seats leaves too
    little for more."""
    from ridgeline.candidate import replica_deployment
    from ridgeline.disaggregated import pool_configs, pool_transceiver
    from ridgeline.hardware import resolve_accelerator
    from ridgeline.memory import EngineSettings, kv_pool

    dep = replica_deployment(resolve_model("deepseek-v3"), resolve_accelerator("b200"), 4, 1,
                             "as stored", "bf16")
    configs = dict(pool_configs(dep, LONG, 4096, TIGHT))
    tokens = {k: c.num_blocks * c.block_size for k, c in configs.items()}
    assert set(configs) <= set(ENGINE_KNOBS) and {(None, None), (64, None)} <= set(configs)
    for (seqs, budget), config in configs.items():  # the pool kv_pool sizes at those knobs
        pool = kv_pool(dep, EngineSettings(max_num_seqs=seqs, max_num_batched_tokens=budget,
                                           max_model_len=4096, engine_version=TIGHT,
                                           cache_transceiver=pool_transceiver(dep, LONG, 4096)))
        assert tokens[seqs, budget] == pool.tokens
        assert config.max_num_seqs == pool.max_num_seqs == (seqs or pool.max_num_seqs)
    assert (tokens[(None, None)], tokens[(64, None)]) == (27_648, 61_952)  # the docstring's


def test_each_pool_launches_at_the_knobs_that_hold_it_on_the_fewest_gpus(
        deepseek_split: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """At the engine's defaults the decode pool queues its hand-offs for KV blocks, and the
    split grows a decode replica; each pool at its own knobs holds on fewer GPUs, its TTFT no
    worse than both pools at the defaults at that size."""
    import ridgeline.disaggregated as disaggregated

    sized, checked = deepseek_split
    monkeypatch.setattr(disaggregated, "ENGINE_KNOBS", ((None, None),))
    at_defaults = disaggregated.verify_disaggregated(resolve_model("deepseek-v3"), sized, SPLIT,
                                                     LONG_SLO, 64, TIGHT)
    assert checked is not None and at_defaults is not None
    assert at_defaults.pool_knobs == ((None, None), (None, None))
    assert checked.gpus < at_defaults.gpus
    assert checked.sim_ttft_s is not None and checked.sim_ttft_s <= LONG_SLO.ttft_s
    assert all(knobs in ENGINE_KNOBS for knobs in checked.pool_knobs)
    # both pools at the defaults, at the size the knobs held at: a TTFT no shorter
    same = replace(sized, replicas=checked.replicas, prefill_replicas=checked.prefill_replicas)
    defaults_there = disaggregated.verify_disaggregated(resolve_model("deepseek-v3"), same,
                                                        SPLIT, LONG_SLO, checked.gpus, TIGHT)
    assert defaults_there is None or (defaults_there.sim_ttft_s or 0.0) >= checked.sim_ttft_s


def test_a_split_prints_each_pools_launch_at_its_knobs(deepseek_split: tuple[Any, Any]) -> None:
    """Each pool's command carries the knobs its check held with; the label names them."""
    from ridgeline.reports.launch_commands import command_line

    _, checked = deepseek_split
    model = resolve_model("deepseek-v3")
    for pool, (seqs, budget), count in (
            (checked.pool(True), checked.pool_knobs[0], checked.prefill_replicas),
            (checked.pool(False), checked.pool_knobs[1],
             checked.replicas - checked.prefill_replicas)):
        command = command_line("vllm", "deepseek-ai/DeepSeek-V3", pool, checked.max_model_len,
                               model=model)
        assert pool.replicas == count and not pool.disaggregated
        assert ("--max-num-seqs" in command) == bool(seqs)
        assert ("--max-num-batched-tokens" in command) == bool(budget)
        if seqs:
            assert f"--max-num-seqs {seqs}" in command
            assert f"max_num_seqs {seqs}" in checked.label_for("vllm")


def test_a_trtllm_splits_pool_commands_come_with_the_yaml_they_name() -> None:
    """trtllm-serve keeps an fp8 KV cache only through its YAML (kv_cache_config), and a
    split's pools hand prompts over through its cache_transceiver_config: each pool's command
    names its own file (the context servers' without the overlap scheduler), the disaggregated
    server's disagg_config.yaml lists every replica, and the plan prints the files (and the
    FP8 checkpoint the commands' MODEL must be) beside them, in text and in --json."""
    from types import SimpleNamespace
    from typing import cast

    from ridgeline.candidate import Candidate
    from ridgeline.plan import PlanResult
    from ridgeline.reports.plan_commands import PlanCommands
    from ridgeline.reports.plan_lists import PlanLists
    from ridgeline.reports.trtllm_command import trtllm_launch
    from ridgeline.yaml_subset import parse_yaml

    model = resolve_model("llama-3.1-70b")
    split = Candidate("h100-sxm", 4, 1, "fp8", "fp8", None, 64, 0.02, 0.3, 1.0, 3, 2.0, False,
                      "", (1.0, 1.0), disaggregated="1P2D", prefill_replicas=1,
                      max_model_len=32768, pool_knobs=((None, None), (64, None)))
    result = cast(PlanResult, SimpleNamespace(engine="trtllm", engine_version=None, load=LONG))
    launch = PlanCommands(model, "meta-llama/Llama-3.1-70B", result, 32768)
    commands, extra = launch.pool_launch(split)
    files = {name: parse_yaml(text, name) for name, text in launch.pool_files(split).items()}
    named = {role: commands[role].split("--extra_llm_api_options ")[1].split()[0]
             for role in ("prefill", "decode")}
    ctx, gen = files[named["prefill"]], files[named["decode"]]
    assert named["prefill"] != named["decode"]
    assert ctx["disable_overlap_scheduler"] is True and "disable_overlap_scheduler" not in gen
    for config in (ctx, gen):  # the buffer holds the longest prompt, as the docs advise
        assert config["cache_transceiver_config"]["max_tokens_in_buffer"] \
            == LONG.longest_prompt(32768)
        assert config["kv_cache_config"]["dtype"] == "fp8"
    servers = files[commands["router"].split("-c ")[1]]
    assert servers["context_servers"]["num_instances"] == split.prefill_replicas
    assert len(servers["generation_servers"]["urls"]) == split.replicas - split.prefill_replicas
    for role, key in (("prefill", "context_servers"), ("decode", "generation_servers")):
        assert all(f"--port {url.split(':')[1]}" in commands[role] for url in servers[key]["urls"])
    # the same flags as a single pool's replica, the file apart
    single = trtllm_launch("meta-llama/Llama-3.1-70B", split.pool(True), 32768, model)
    assert commands["prefill"].startswith(single.command.split(" --extra_llm_api_options")[0])
    assert single.note in extra
    lines = PlanLists(model, result).pool_lines(split, launch.pool_launch)
    assert f"  router: {commands['router']}" in lines
    rest = [line.strip() for line in lines[len(commands):]]
    assert rest[:len(extra)] == [e.strip() for e in extra]
    # past them, at most the context servers' prompt limit (plan_cautions.prompt_cap_note)
    assert rest[len(extra):] == ([f"(prefill pool: {note})"] if (note := prompt_cap_note(
        "trtllm", LONG, split, split.pool_knobs[0][1] if split.pool_knobs else None)) else [])


def test_the_split_checked_is_the_cheapest_that_holds_from_its_sizes() -> None:
    """Llama-3.1-70B on 2 x H100 at the docs' chat load, under vLLM's default release (0.34,
    whose pools admit every hand-off at once): sized 2P1D, it misses TTFT, and growth adds
    prefill replicas (the longer wait) up to 5P1D, though 2P2D holds on fewer GPUs. No split
    from the sizes up on fewer replicas than the one checked holds, each checked on its own
    with no room to grow."""
    from ridgeline.disaggregated import verify_disaggregated

    model = resolve_model("llama-3.1-70b")
    load = Load(10.0, "lognormal:1000,0.8", "lognormal:250,0.8")
    slo = Slo(1.0, 0.05, 90)
    sized = disaggregated_candidates(model, load, slo, ["h100-sxm"], 64, {"h100-sxm": 2.99})[0]
    checked = verify_disaggregated(model, sized, load, slo, 64)
    assert checked is not None and checked.verified
    x0, y0 = sized.prefill_replicas, sized.replicas - sized.prefill_replicas
    assert checked.prefill_replicas >= x0 and checked.replicas - checked.prefill_replicas >= y0
    assert checked.sim_ttft_s is not None and checked.sim_ttft_s <= slo.ttft_s
    assert checked.sim_tpot_s is not None and checked.sim_tpot_s <= slo.tpot_s
    fewer = [(x, n - x) for n in range(x0 + y0, checked.replicas) for x in range(x0, n - y0 + 1)]
    assert fewer  # the sizes themselves missed
    for x, y in fewer:
        alone = replace(sized, replicas=x + y, prefill_replicas=x)
        assert verify_disaggregated(model, alone, load, slo, alone.gpus) is None, (x, y)


def test_a_trtllm_hybrids_split_launches_the_seats_its_state_leaves_room_for() -> None:
    """TensorRT-LLM to 1.2 holds every seat's Mamba state from start-up: Nemotron-H-56B fp8
    at the default 2,048 seats wants 876.7 GiB on one H100, so no split on H100s started and
    none was offered. Its pools now launch at the seats a single pool's replica would
    (disaggregated.pool_seats, as replica_sizing.state_seats caps them): the pool at that
    --max_batch_size holds as many of the load's mean requests, and every knob the check
    tries, the one it launches included, stays within them."""
    from ridgeline.candidate import replica_deployment
    from ridgeline.capacity import held_conversations
    from ridgeline.disaggregated import pool_configs, pool_seats, verify_disaggregated
    from ridgeline.hardware import resolve_accelerator
    from ridgeline.memory import EngineSettings, kv_pool

    model = resolve_model("nemotron-h-56b")
    load, slo = Load(10.0, "1000", "250"), Slo(2.0, 0.05, 90)
    found = disaggregated_candidates(model, load, slo, ["h100-sxm"], 64, {}, engine="trtllm")
    assert found, "no split offered on H100s"
    c = found[0]
    dep = replica_deployment(model, resolve_accelerator(c.accelerator), c.tp, 1, c.weights,
                             c.kv, engine="trtllm")
    seats = pool_seats(dep, load, None)
    assert seats is not None and 1 <= seats < 2048 and c.max_num_seqs == seats
    assert c.pool_knobs == ((seats, None), (seats, None))
    context = 1250  # the load's mean request, prompt and output
    settings = EngineSettings(max_model_len=c.max_model_len)
    assert held_conversations(kv_pool(dep, settings), dep, context) < 1  # the defaults: none
    held = held_conversations(kv_pool(dep, replace(settings, max_num_seqs=seats)), dep, context)
    assert held >= seats
    assert all(knobs[0] is not None and knobs[0] <= seats
               for knobs, _ in pool_configs(dep, load, c.max_model_len, None, seats))
    checked = verify_disaggregated(model, c, load, slo, 64, engine="trtllm")
    assert checked is not None and checked.pool_knobs
    assert all(knobs[0] is not None and knobs[0] <= seats for knobs in checked.pool_knobs)
    assert pool_seats(replace(dep, engine="vllm"), load, None) is None  # TensorRT-LLM's alone
