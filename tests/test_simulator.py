"""The simulated engine: invariants (property-based), the fast path, workloads, the CLI."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.cost import Seq, batch_shape
from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.sim.blocks import BlockPool
from ridgeline.sim.config import SimConfig, sim_config
from ridgeline.sim.decodes import DecodeSet
from ridgeline.sim.histogram import Histogram, bin_index
from ridgeline.sim.request import FINISHED, Request
from ridgeline.sim.scheduler import Scheduler, SchedulerConfig
from ridgeline.sim.simulator import Simulator
from ridgeline.sim.workload import Workload, length_sampler, read_trace

DEP = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16")
PROFILE = profile_for("vllm")


def small_config(blocks: int, seqs: int = 64, budget: int = 2048, fast: bool = True,
                 overhead: int = 0) -> SimConfig:
    return SimConfig(num_blocks=blocks, block_size=16, max_num_seqs=seqs,
                     max_num_batched_tokens=budget, max_model_len=32768, fast_path=fast,
                     overhead_blocks=overhead)


def prefill_first_scheduler(blocks: int, block_size: int, token_ratio: bool, seqs: int = 8,
                            budget: int = 512) -> Scheduler:
    """SGLang's scheduling on a pool of ``blocks``, with or without its admission estimate."""
    return Scheduler(SchedulerConfig(seqs, budget, prefill_first=True, token_ratio=token_ratio),
                     BlockPool(blocks, block_size))


def check_invariants(sim: Simulator) -> None:
    pool, s = sim.pool, sim.scheduler
    assert pool.held + pool.free + len(pool.evictable) == pool.total  # blocks conserved
    held = sum(r.private_blocks for r in s.running) + sum(
        1 for n in pool.refs.values() if n > 0)
    assert held == pool.held
    ids = [r.id for r in s.running] + [r.id for r in s.waiting]
    assert len(ids) == len(set(ids))  # no request in two queues
    for r in s.running:
        assert r.num_computed <= r.known_tokens  # tokens conserved
        # its token blocks cover its cache, the fixed charge (window/state groups) besides
        assert (r.blocks_held - pool.overhead) * pool.block_size >= r.num_computed
    assert len(s.running) <= sim.config.max_num_seqs


workloads = st.builds(
    Workload,
    num_requests=st.integers(1, 60),
    input_len=st.sampled_from(["64", "uniform:1,700", "lognormal:200,1.0"]),
    output_len=st.sampled_from(["1", "uniform:1,300", "zipf:1.1,400"]),
    rate=st.sampled_from([2.0, 50.0, float("inf")]),
    arrival=st.sampled_from(["poisson", "gamma", "constant"]),
    burstiness=st.sampled_from([0.5, 1.0, 3.0]),
    seed=st.integers(0, 10_000),
).flatmap(lambda w: st.sampled_from([(0, 0), (3, 100), (3, 300)]).map(
    lambda prefix: replace(w, prefix_groups=prefix[0], prefix_len=prefix[1])))


@settings(max_examples=60, deadline=None)
@given(workload=workloads, blocks=st.sampled_from([40, 200, 5000]),
       overhead=st.sampled_from([0, 0, 3]))
def test_invariants_hold_after_every_step(workload: Workload, blocks: int, overhead: int) -> None:
    sim = Simulator(DEP, PROFILE, small_config(blocks, overhead=overhead))
    result = sim.run(iter(workload), after_step=check_invariants)
    # every arrived request finishes or is reported with its reason
    assert result.completed + result.rejected == workload.num_requests
    assert sim.pool.held == 0


@settings(max_examples=25, deadline=None)
@given(workload=workloads)
def test_the_same_seed_gives_identical_results(workload: Workload) -> None:
    a = Simulator(DEP, PROFILE, small_config(300)).run(iter(workload))
    b = Simulator(DEP, PROFILE, small_config(300)).run(iter(workload))
    assert a.percentiles("ttft") == b.percentiles("ttft") or workload.num_requests == 0
    assert a.duration_s == b.duration_s and a.preemptions == b.preemptions


FAST_MODELS = {m: Deployment.build(resolve_model(m), resolve_accelerator("h100"), "bf16")
               for m in ("llama-3.1-8b", "qwen3-30b-a3b", "jamba-1.5-mini", "gemma-3-27b")}


@settings(max_examples=60, deadline=None)
@given(workload=workloads, model=st.sampled_from(sorted(FAST_MODELS)),
       blocks=st.sampled_from([30, 60, 400, 20000]), overhead=st.sampled_from([0, 0, 2]),
       seqs=st.sampled_from([4, 64]), budget=st.sampled_from([256, 2048]),
       block_size=st.sampled_from([16, 32]))
def test_fast_path_agrees_with_the_step_loop_within_half_a_percent(
        workload: Workload, model: str, blocks: int, overhead: int, seqs: int, budget: int,
        block_size: int) -> None:
    """Dense, MoE, a Mamba hybrid and a sliding-window model, with pools tight enough to
    preempt, chunked prefills, few seats, a fixed per-request charge (vLLM's window and
    state groups)."""
    dep = FAST_MODELS[model]

    def config(fast: bool) -> SimConfig:
        return replace(small_config(blocks, seqs, budget, fast, overhead), block_size=block_size)

    fast_sim = Simulator(dep, PROFILE, config(True))
    fast = fast_sim.run(iter(workload))
    slow = Simulator(dep, PROFILE, config(False)).run(iter(workload))
    assert fast.completed == slow.completed and fast.rejected == slow.rejected
    assert fast.duration_s == pytest.approx(slow.duration_s, rel=0.005)
    assert fast.output_tok_s == pytest.approx(slow.output_tok_s, rel=0.005)
    for name in ("ttft", "tpot", "e2e", "itl", "queue"):
        for key, value in slow.percentiles(name).items():
            assert fast.percentiles(name)[key] == pytest.approx(value, rel=0.005, nan_ok=True)
    assert fast_sim.bulk_steps == fast.steps  # every step on the summed path


def test_the_fast_path_takes_many_steps_per_loop() -> None:
    w = Workload(300, "lognormal:1000,0.8", "lognormal:250,0.8", rate=8.0, seed=1)
    sim = Simulator(DEP, PROFILE, small_config(20000))
    loops = []
    result = sim.run(iter(w), after_step=lambda s: loops.append(s.steps))
    assert len(loops) * 3 < result.steps  # most steps went several at a time
    assert sim.bulk_steps == result.steps


@settings(max_examples=200, deadline=None)
@given(contexts=st.lists(st.integers(1, 3000), max_size=40), g=st.integers(-500, 5000),
       later=st.integers(0, 300), k=st.integers(1, 400), block_size=st.sampled_from([1, 16, 64]))
def test_summed_decodes_take_the_blocks_each_request_would(
        contexts: list[int], g: int, later: int, k: int, block_size: int) -> None:
    decodes = DecodeSet(block_size)
    requests = []
    for i, ctx in enumerate(contexts):
        r = Request(i, 0.0, ctx, 10_000, num_computed=ctx, num_generated=1)
        decodes.add(r, g)
        requests.append(r)
    now = g + later
    per_request = sum(-(-(r.num_computed + later + k) // block_size)
                      - -(-(r.num_computed + later) // block_size) for r in requests)
    assert decodes.blocks_over(now, k) == per_request
    assert decodes.context(now) == sum(r.num_computed + later for r in requests)
    for r in requests:
        decodes.sync(r, now)
    assert [r.num_computed for r in requests] == [c + later for c in contexts]


def decoding(decodes: DecodeSet, contexts: list[int]) -> dict[int, Request]:
    """One decoding request per context, added to ``decodes`` at step 0; by id."""
    members = {}
    for i, ctx in enumerate(contexts):
        r = Request(i, 0.0, max(ctx, 1), 10_000, num_computed=ctx, num_generated=1)
        decodes.add(r, 0)
        members[i] = r
    return members


@settings(max_examples=150, deadline=None)
@given(contexts=st.lists(st.integers(0, 600), min_size=1, max_size=30),
       window=st.sampled_from([1, 16, 128, 512]), moves=st.lists(
           st.tuples(st.integers(0, 40), st.integers(0, 29)), max_size=12))
def test_summed_decodes_read_what_each_window_keeps(
        contexts: list[int], window: int, moves: list[tuple[int, int]]) -> None:
    """Keys per window equal Σ min(context + 1, window) member by member, through steps,
    windows filling and members leaving (finish or preemption)."""
    decodes = DecodeSet(16, windows=(window,))
    members = decoding(decodes, contexts)
    g = 0
    for steps, leaver in moves:
        assert decodes.next_change() > g
        g += min(steps, decodes.next_change() - g)  # a run never crosses a window's filling
        decodes.fill_windows(g)
        if leaver in members:
            decodes.discard(members.pop(leaver), g)
        contexts_now = [r.decode_base + g for r in members.values()]
        keys = decodes.keys(g)
        assert keys[None] == sum(c + 1 for c in contexts_now)
        assert keys[window] == sum(min(c + 1, window) for c in contexts_now)


@settings(max_examples=200, deadline=None)
@given(first=st.floats(1e-4, 1.0), growth=st.floats(1.0, 1.2), n=st.integers(1, 500),
       weight=st.integers(1, 64))
def test_a_line_of_samples_lands_in_the_bins_one_at_a_time_would(
        first: float, growth: float, n: int, weight: int) -> None:
    last = first * growth if n > 1 else first
    line, one_by_one = Histogram(), Histogram()
    line.add_line(first, last, n, weight)
    step = (last - first) / (n - 1) if n > 1 else 0.0
    for j in range(n):
        one_by_one.add(first + step * j, weight)
    assert line.total == one_by_one.total
    assert line.sum == pytest.approx(one_by_one.sum)
    moved = sum(abs(line.counts.get(i, 0) - one_by_one.counts.get(i, 0))
                for i in set(line.counts) | set(one_by_one.counts))
    assert moved <= 2 * weight  # at most a sample on a bin edge rounds the other way


@settings(max_examples=300, deadline=None)
@given(value=st.one_of(st.floats(0.0, 1e-6), st.floats(1e-7, 1e4),
                       st.sampled_from([0.0, 1e-7, 1e-3, 0.05, 1.0])))
def test_a_sample_lands_in_the_bin_the_slo_checks_read(value: float) -> None:
    """Histogram.add bins inline (its hot path): the bin it counts a sample in is
    bin_index's, by which the recorder compares a latency with its SLO (``_count_miss``)."""
    h = Histogram()
    h.add(value, 3.0)
    assert h.counts == {bin_index(value): 3.0}


def test_a_percentile_never_leaves_the_samples_range() -> None:
    """128 requests of 47.0822 s each: every percentile is 47.0822 s, not its bin's centre
    (which sat below every sample, under the mean)."""
    h = Histogram()
    for _ in range(128):
        h.add(47.0822)
    assert h.percentile(50) == h.percentile(99) == 47.0822 == pytest.approx(h.mean)
    h.add_line(1.0, 2.0, 11)
    assert h.percentile(0.1) >= 1.0 and h.percentile(100) <= 47.0822


def test_admission_is_predicted_without_side_effects() -> None:
    pool = BlockPool(20, 16)
    first = Request(0, 0.0, 200, 5, prefix_group=1, prefix_tokens=192)
    pool.admit(first)
    assert pool.grow(first, 200)
    first.num_computed = 200
    pool.register(first)
    pool.release(first)  # its 12 prefix blocks stay cached, evictable
    second = Request(1, 0.0, 260, 5, prefix_group=1, prefix_tokens=192)
    before = (pool.free, dict(pool.refs), list(pool.evictable))
    # 12 cached + 5 new blocks: fits in 20 only because the cached ones are reused
    assert pool.could_admit(second, budget=4096)
    assert not pool.could_admit(second, budget=4096, reserved=4)
    assert (pool.free, dict(pool.refs), list(pool.evictable)) == before
    second.num_computed = pool.admit(second)
    assert pool.grow(second, 260)


def test_a_request_longer_than_the_pool_is_rejected_with_a_reason() -> None:
    sim = Simulator(DEP, PROFILE, small_config(10))  # 160 tokens of cache
    result = sim.run(iter([Request(0, 0.0, 500, 10), Request(1, 0.0, 50, 10)]))
    assert result.completed == 1 and result.rejected == 1
    assert "KV blocks" in next(iter(result.rec.rejected))


def test_preemption_stays_on_the_summed_path_and_matches_the_step_loop() -> None:
    w = Workload(40, "300", "200", seed=3)
    fast_sim = Simulator(DEP, PROFILE, small_config(120))
    fast = fast_sim.run(iter(w))
    slow = Simulator(DEP, PROFILE, small_config(120, fast=False)).run(iter(w))
    assert fast.preemptions == slow.preemptions > 0
    assert fast_sim.bulk_steps == fast.steps  # no step fell back to the per-request loop
    assert fast.duration_s == pytest.approx(slow.duration_s, rel=1e-9)


def test_a_full_pool_preempts_and_recomputes() -> None:
    sim = Simulator(DEP, PROFILE, small_config(60))
    result = sim.run(iter(Workload(20, "200", "300", seed=3)))
    assert result.preemptions > 0 and result.completed == 20


def test_shared_prefixes_hit_the_prefix_cache() -> None:
    w = Workload(50, "1200", "20", rate=20, prefix_groups=2, prefix_len=1024, seed=1)
    hit = Simulator(DEP, PROFILE, small_config(5000)).run(iter(w))
    off = Simulator(DEP, PROFILE, replace(small_config(5000), prefix_caching=False)).run(iter(w))
    assert hit.prefix_hit_blocks > 0
    assert hit.percentiles("ttft")["p50"] < off.percentiles("ttft")["p50"]


def test_prefix_cache_reuses_only_full_blocks_and_never_the_last_token() -> None:
    pool = BlockPool(100, 16)
    first = Request(0, 0.0, 40, 5, prefix_group=1, prefix_tokens=32)
    assert pool.admit(first) == 0
    assert pool.grow(first, 40)
    first.num_computed = 40
    pool.register(first)
    second = Request(1, 0.0, 33, 5, prefix_group=1, prefix_tokens=32)
    assert pool.admit(second) == 32  # two full blocks
    third = Request(2, 0.0, 32, 5, prefix_group=1, prefix_tokens=32)
    assert pool.admit(third) == 16  # all prefix: the last token must be computed


def test_closed_loop_keeps_the_concurrency() -> None:
    sim = Simulator(DEP, PROFILE, small_config(20000))
    result = sim.run(iter(Workload(200, "100", "50", seed=2)), closed_loop=16)
    assert result.completed == 200
    assert result.running_batch["max"] == 16


def test_a_rejected_request_frees_its_closed_loop_seat_at_once() -> None:
    sim = Simulator(DEP, PROFILE, small_config(10))  # 160 tokens of cache
    too_long = [Request(i, 0.0, 500, 10) for i in range(4)]
    fits = [Request(4 + i, 0.0, 50, 10) for i in range(6)]
    result = sim.run(iter(too_long + fits), closed_loop=2)
    assert (result.rejected, result.completed) == (4, 6)  # none left stranded


def test_speculative_decoding_generates_more_tokens_per_step() -> None:
    w = Workload(8, "100", "200", seed=1)
    plain = Simulator(DEP, PROFILE, small_config(5000)).run(iter(w))
    spec = Simulator(DEP, PROFILE, replace(small_config(5000), spec_tokens=3,
                                           spec_acceptance=0.8)).run(iter(w))
    assert spec.steps < plain.steps and spec.percentiles("tpot")["p50"] < plain.percentiles(
        "tpot")["p50"]


def test_length_specs_and_bad_ones() -> None:
    import random
    rng = random.Random(0)
    assert length_sampler("42", "x")(rng) == 42
    assert 1 <= length_sampler("uniform:1,5", "x")(rng) <= 5
    assert length_sampler("zipf:1.5,100", "x")(rng) <= 100
    for bad in ("0", "abc", "uniform:5,1", "normal:1"):
        with pytest.raises(InputError):
            length_sampler(bad, "x")


def test_traces_in_plain_and_azure_layouts(tmp_path: Path) -> None:
    plain = tmp_path / "t.csv"
    plain.write_text("arrival_s,prompt_tokens,output_tokens\n0.5,100,20\n0.0,50,10\n")
    assert [(r.arrival_s, r.prompt_tokens) for r in read_trace(str(plain))] == [(0.0, 50),
                                                                                (0.5, 100)]
    azure = tmp_path / "azure.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n")
    reqs = read_trace(str(azure))
    assert reqs[1].arrival_s == pytest.approx(4.315, abs=0.01) and reqs[1].output_tokens == 109
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text('{"timestamp": 1, "input_len": 10, "output_len": 2}\n')
    assert read_trace(str(jsonl))[0].prompt_tokens == 10
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="no column"):
        read_trace(str(bad))


def test_sim_config_comes_from_the_engine_pool() -> None:
    config = sim_config(DEP)
    assert config.max_num_seqs == 1024 and config.max_num_batched_tokens == 8192
    assert config.num_blocks * config.block_size > 160_000


def test_simulate_cli_reports_percentiles_goodput_and_settings(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "requests.csv"
    code = main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "5", "--num-requests",
                 "50", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50", "--export", str(out),
                 "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["completed"] == 50 and data["goodput_req_s"] > 0
    assert data["goodput_over"] == "simulated_time"
    assert set(data["ttft_s"]) == {"p50", "p90", "p95", "p99", "mean"}
    # no SLO: nothing to meet, no goodput (it read as every request good)
    assert main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "5",
                 "--num-requests", "20", "--json"]) == 0
    unjudged = json.loads(capsys.readouterr().out)
    assert unjudged["goodput_req_s"] is None and unjudged["good_requests"] is None
    assert data["settings"]["max_num_seqs"] == 1024
    assert len(out.read_text().splitlines()) == 51


def test_simulate_refuses_a_deployment_that_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "llama-3.1-70b", "--gpu", "l4", "--rate", "1"])
    assert code == 2 and "does not fit" in capsys.readouterr().err


def test_finished_requests_are_marked() -> None:
    sim = Simulator(DEP, PROFILE, small_config(500))
    seen: list[Request] = []
    sim.run(iter([Request(0, 0.0, 10, 3)]), after_step=lambda s: seen.extend(s.scheduler.running))
    assert seen[0].status == FINISHED


def test_a_one_token_prompt_gets_a_first_token_time_on_the_fast_path() -> None:
    w = [Request(0, 0.0, 300, 50), Request(1, 0.5, 1, 40)]
    for fast in (True, False):
        result = Simulator(DEP, PROFILE, small_config(2000, fast=fast)).run(iter(w))
        assert result.percentiles("ttft")["mean"] > 0


@pytest.mark.parametrize("knob", [{"spec_tokens": -2}, {"spec_acceptance": 1.5},
                                  {"spec_acceptance": -0.1}, {"spec_draft_cost": -1.0}])
def test_impossible_speculative_settings_are_refused(knob: dict[str, float]) -> None:
    with pytest.raises(InputError, match="draft"):
        Simulator(DEP, PROFILE, replace(small_config(100), **knob))


def test_the_running_batch_is_labelled_with_the_engines_own_gauge(
        capsys: pytest.CaptureFixture[str]) -> None:
    from ridgeline.cli import main

    gauges = {"vllm": "(vllm:num_requests_running)", "sglang": "(sglang:num_running_reqs)",
              "trtllm": "(trtllm_num_requests_running)"}
    for engine, label in gauges.items():
        assert main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", engine, "--rate",
                     "2", "--num-requests", "5"]) == 0
        out = capsys.readouterr().out
        assert label in out
        assert engine == "vllm" or "vllm:" not in out


def test_busy_time_leaves_out_the_idle_gaps_between_arrivals() -> None:
    sim = Simulator(DEP, PROFILE, small_config(500))
    result = sim.run(iter([Request(0, 0.0, 100, 10), Request(1, 1000.0, 100, 10)]))
    assert result.duration_s > 1000 and 0 < result.busy_s < 1
    assert result.profile is PROFILE


SIMULATE = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "20", "--num-requests", "60",
            "--max-model-len", "4096", "--input-len", "uniform:100,8000", "--output-len", "64"]


def test_rejections_are_summarised_with_their_share_not_listed_one_by_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SIMULATE, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    n = data["rejected"]
    assert 10 < n < 60 and len(data["rejected_reasons"]) == 1  # one reason, not one per request
    assert main(SIMULATE) == 0
    lines = capsys.readouterr().out.splitlines()
    rejected = [line for line in lines if "rejected" in line or "exceeds" in line]
    assert rejected == [f"rejected {n} of 60 requests ({n / 60:.1%}) before they ran:",
                        f"  {n}: prompt + output exceeds max_model_len 4,096 (first: "
                        f"{data['rejected_first']['prompt + output exceeds max_model_len 4,096']})"]


def test_goodput_is_shown_against_all_requests_not_only_the_completed(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SIMULATE, "--slo-ttft-ms", "100000", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    good, completed = data["good_requests"], data["completed"]
    assert good == completed < 60  # every completed request met the SLO, some were refused
    assert main([*SIMULATE, "--slo-ttft-ms", "100000"]) == 0
    out = capsys.readouterr().out
    assert f"({good} requests: 100% of completed, {good / 60:.1%} of all 60)" in out


def test_simulate_explains_percentiles_goodput_and_the_step_time_model(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SIMULATE, "--slo-ttft-ms", "2000", "--slo-tpot-ms", "50", "--json",
                 "--explain"]) == 0
    data = json.loads(capsys.readouterr().out)
    steps = {s["label"]: s for s in data["explain"]}
    assert set(steps) == {"TTFT percentiles", "TPOT percentiles", "TTFT p90", "TTFT p99",
                          "TPOT p90", "TPOT p99", "request rate", "goodput",
                          "step time", "output token rate", "output token rate per GPU",
                          "total token rate", "TTFT mean", "TPOT mean", "ITL mean",
                          "end-to-end mean", "queueing mean", "running batch, mean"}
    rate = steps["output token rate"]
    tokens, span = (q["value"] for q in rate["inputs"])
    assert rate["result"]["value"] == pytest.approx(tokens / span) \
        == pytest.approx(data["output_tok_s"])
    assert steps["output token rate per GPU"]["result"]["value"] == pytest.approx(
        data["output_tok_s_per_gpu"])
    assert steps["TTFT percentiles"]["result"]["value"] == pytest.approx(
        data["ttft_s"]["p50"] * 1e3)
    assert steps["TPOT percentiles"]["result"]["value"] == pytest.approx(
        data["tpot_s"]["p50"] * 1e3)
    assert steps["goodput"]["result"]["value"] == pytest.approx(data["goodput_req_s"])
    mean_step = steps["step time"]["result"]["value"]
    assert mean_step == pytest.approx(data["busy_s"] / data["steps"] * 1e3)
    assert any("vllm profile" in q["source"] for q in steps["step time"]["inputs"])
    assert main([*SIMULATE, "--explain"]) == 0
    text = capsys.readouterr().out
    explained = text.split("How each number was computed:")[1]
    assert "TTFT percentiles: first token time − arrival" in explained
    assert "goodput" not in explained  # no SLO given, none to explain


def test_the_report_says_the_shared_prefix_is_inside_the_prompt(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "requests.csv"
    assert main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "10", "--num-requests",
                 "30", "--prefix-groups", "3", "--prefix-len", "1000", "--input-len", "500",
                 "--export", str(out)]) == 0
    text = capsys.readouterr().out
    assert "27 of the 30 requests follow an earlier request of their group" in text
    assert "a completed request's prefix is a mean 499 of its mean 500 prompt tokens" in text
    assert "each prompt shared but its last token by 3 groups (--prefix-len 1,000 is past the " \
        "500-token prompts)" in text
    assert {line.split(",")[2] for line in out.read_text().splitlines()[1:]} == {"500"}


def test_a_run_shorter_than_the_steady_state_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import run_cli

    base = ("simulate", "llama-3.1-8b", "--gpu", "h100-sxm", "--weights", "fp8", "--kv-dtype",
            "fp8", "--input-len", "lognormal:1000,0.8", "--output-len", "lognormal:300,0.8")
    code, out, _ = run_cli(capsys, *base, "--rate", "15", "--num-requests", "300")
    assert code == 0 and "filling up and draining" in out and "--num-requests" in out
    # twice what the engine serves (about 20.5 req/s) is no warm-up: its batch grew by 174 of
    # the 193 arriving over the second half, and it is OVERLOADED (it had read as a warm-up)
    code, out, _ = run_cli(capsys, *base, "--rate", "40", "--num-requests", "400")
    assert code == 0 and "OVERLOADED" in out and "filling up" not in out
    code, out, _ = run_cli(capsys, *base, "--rate", "4", "--num-requests", "1000")
    assert code == 0 and "filling up" not in out
    code, out, _ = run_cli(capsys, *base, "--concurrency", "8", "--num-requests", "40")
    assert code == 0 and "filling up" not in out  # a closed loop holds its batch from the start


def test_a_trace_arriving_all_at_once_is_a_burst(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import run_cli

    trace = tmp_path / "same.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n5,1000,200\n5,800,150\n")
    code, out, _ = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--trace",
                           str(trace))
    assert code == 0 and "filling up and draining" in out


def test_simulate_takes_one_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import run_cli

    code, out, err = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "rtx-3090,rtx-4090",
                             "--rate", "1")
    assert code == 2 and "one --gpu" in err and not out


def test_fast_path_frees_a_steps_finished_prompts_after_its_decodes() -> None:
    """Found by a random draw of the test above: the summed path freed the prompts that end
    in a step before that step's finished decodes, the plain step after them (its batch lists
    the running decodes first), so a tight pool evicted another group's prefix blocks first
    and request 10 hit 112 cached tokens instead of 176."""
    workload = Workload(11, "lognormal:200,1.0", "zipf:1.1,400", math.inf, "poisson", 0.5, 3,
                        300, 986)
    dep = FAST_MODELS["gemma-3-27b"]

    def config(fast: bool) -> SimConfig:
        return replace(small_config(60, 64, 2048, fast, 2), block_size=16)

    fast = Simulator(dep, PROFILE, config(True)).run(iter(workload))
    slow = Simulator(dep, PROFILE, config(False)).run(iter(workload))
    assert fast.percentiles("ttft")["p90"] == pytest.approx(slow.percentiles("ttft")["p90"],
                                                            rel=0.005)


def test_a_released_requests_tail_is_evicted_first_so_its_prefix_survives() -> None:
    """vLLM frees a request's blocks in reverse order: an allocation that evicts one of
    them takes the last, and the request comes back to a two-block prefix, not to none."""
    pool = BlockPool(4, 16)
    r = Request(0, 0.0, 48, 5)
    assert pool.admit(r) == 0 and pool.grow(r, 48)
    r.num_computed = 48
    pool.retire(r)  # preempted: its three full blocks stay cached
    pool.take(2)  # the free block, then one cached block
    assert pool.cached_prefix(r) == [(-1, 0), (-1, 1)]


def test_a_step_that_preempts_admits_nobody() -> None:
    """vLLM V1 visits the waiting queue only in a step that preempted nothing: the victim
    is not re-admitted into the blocks it has just given up (it had thrashed)."""

    pool = BlockPool(5, 16, prefix_caching=False)
    s = Scheduler(SchedulerConfig(max_num_seqs=64, max_num_batched_tokens=32), pool)
    a, b = Request(0, 0.0, 16, 40), Request(1, 0.0, 64, 5)
    s.add(a)
    s.add(b)
    assert [(x.request, x.tokens) for x in s.schedule(0.0)] == [(a, 16), (b, 16)]
    a.num_computed, a.num_generated, b.num_computed = 16, 1, 16
    assert [(x.request, x.tokens) for x in s.schedule(0.1)] == [(a, 1), (b, 31)]
    a.num_computed, a.num_generated, b.num_computed = 17, 2, 47
    step = s.schedule(0.2)  # b needs a fourth block, the pool is full: b is preempted
    assert [(x.request, x.tokens) for x in step] == [(a, 1)]
    assert list(s.waiting) == [b] and s.preemptions == 1
    assert pool.could_admit(b, 31)  # it would have got back in at once


@pytest.mark.parametrize("fast", [True, False])
def test_inter_token_gaps_add_up_to_each_requests_decode_time(fast: bool) -> None:
    """ITL is what a streaming client times between tokens: under preemption a request's
    gaps include its stall, so (without speculation) they sum to finish − first token and
    their mean is the token-weighted TPOT."""
    w = Workload(40, "300", "200", seed=3)
    requests = list(w)
    sim = Simulator(DEP, PROFILE, small_config(120, fast=fast))
    result = sim.run(iter(requests))
    assert result.preemptions > 0 and result.completed == 40
    itl = result.rec.hist["itl"]
    assert itl.total == sum(r.output_tokens - 1 for r in requests)
    assert itl.sum == pytest.approx(sum(r.finish_s - r.first_token_s for r in requests),
                                    rel=1e-9)


def test_a_speculative_step_charges_one_drafter_pass_over_a_prompt_and_graphs_verify() -> None:
    """The drafter reads a prompt once (not drafts × the target's prefill), then drafts − 1
    one-token passes for each sampling row; a verify batch (1 + drafts tokens a row) runs
    as a graphed decode, at the decode step's overhead."""
    from ridgeline.cost import batch_shape
    from ridgeline.sim.timer import StepTimer

    k, c = 3, 0.05
    config = replace(small_config(5000), spec_tokens=k, spec_acceptance=0.7, spec_draft_cost=c)
    sim = Simulator(DEP, PROFILE, config)
    sim.run(iter([prompt := Request(0, 0.0, 2000, 5)]))
    timer = StepTimer(DEP, PROFILE)
    prefill = timer.time_s(batch_shape(DEP, [Seq(2000, 0)]))
    draft = timer.time_s(batch_shape(DEP, [Seq(1, 2000)]))
    assert prompt.first_token_s == pytest.approx(prefill * (1 + c) + (k - 1) * c * draft)
    verify = batch_shape(DEP, [Seq(1 + k, 2000)])
    graphed, eager = timer.time_s(verify, graphed=True), timer.time_s(verify)
    layers = DEP.model.num_layers
    assert eager - graphed == pytest.approx(PROFILE.overhead_s(layers, True)
                                            - PROFILE.overhead_s(layers, False))


def test_tensorrt_llm_reserves_each_requests_whole_output_and_never_preempts() -> None:
    """GUARANTEED_NO_EVICT, TensorRT-LLM's default: a request starts only with the blocks of
    its prompt and whole output free beside the running requests' reservations. On a pool
    that vLLM's admission overfills (and then preempts), it runs fewer at once and none is
    paused."""
    w = Workload(40, "300", "200", seed=3)
    vllm = Simulator(DEP, PROFILE, small_config(120)).run(iter(w))
    trt_sim = Simulator(DEP, PROFILE, replace(small_config(120), reserve_full=True))
    peak = []
    trt = trt_sim.run(iter(w), after_step=lambda s: peak.append(
        sum(s.pool.blocks_for(r.max_cached_tokens) for r in s.scheduler.running)))
    assert vllm.preemptions > 0 and trt.preemptions == 0 and trt.completed == 40
    assert max(peak) <= 120 and trt.running_batch["max"] == 120 // 32  # 499 tokens: 32 blocks
    plain = Simulator(DEP, PROFILE, replace(small_config(120, fast=False), reserve_full=True))
    assert plain.run(iter(w)).duration_s == pytest.approx(trt.duration_s, rel=1e-9)
    assert sim_config(replace(DEP, engine="trtllm")).reserve_full
    assert not sim_config(DEP).reserve_full


@pytest.mark.parametrize(("blocks", "block_size", "w"), [
    (120, 16, Workload(60, "lognormal:400,0.8", "lognormal:120,0.8", rate=20, seed=5)),
    (5000, 16, Workload(60, "lognormal:400,0.8", "lognormal:120,0.8", rate=20, seed=5)),
    (150, 32, Workload(77, "uniform:1,700", "uniform:1,300", rate=float("inf"),
                       arrival="constant", prefix_groups=3, prefix_len=100, seed=72)),
    (30, 16, Workload(34, "1", "uniform:1,300", rate=float("inf"), arrival="constant",
                      seed=219))])
def test_sglang_runs_prompt_steps_alone_on_both_paths(blocks: int, block_size: int,
                                                      w: Workload) -> None:
    """SGLang's default scheduling: a step of prompts whenever one can run, the decodes
    waiting, else a step of decodes. The summed path agrees with the step loop, and every
    request's gaps (the waits through prompt steps included) sum to its decode time — with
    shared prefixes too, whose publication syncs a member's last token (fuzz case 72)."""
    budget = {150: 2048, 30: 16}.get(blocks, 512)  # 16: a recompute chunked to its last token
    config = replace(small_config(blocks, budget=budget), prefill_first=True,
                     block_size=block_size)
    results = []
    for fast in (True, False):
        requests = list(w)
        result = Simulator(DEP, PROFILE, replace(config, fast_path=fast)).run(iter(requests))
        itl, done = result.rec.hist["itl"], [r for r in requests if r.status == FINISHED]
        assert itl.total == sum(r.output_tokens - 1 for r in done)
        assert itl.sum == pytest.approx(sum(r.finish_s - r.first_token_s for r in done))
        results.append(result)
    fast_result, plain_result = results
    assert fast_result.duration_s == pytest.approx(plain_result.duration_s, rel=1e-9)
    assert fast_result.preemptions == plain_result.preemptions


def test_a_prompt_step_runs_no_decode_under_prefill_first() -> None:

    pool = BlockPool(100, 16)
    s = Scheduler(SchedulerConfig(64, 64, prefill_first=True), pool)
    a, b = Request(0, 0.0, 16, 40), Request(1, 0.0, 100, 5)
    s.add(a)
    assert [(x.request, x.tokens) for x in s.schedule(0.0)] == [(a, 16)]
    a.num_computed, a.num_generated = 16, 1
    s.add(b)  # b's prompt runs alone, in chunks, while a waits
    assert [(x.request, x.tokens) for x in s.schedule(0.1)] == [(b, 64)]
    b.num_computed = 64
    assert [(x.request, x.tokens) for x in s.schedule(0.2)] == [(b, 36)]
    b.num_computed, b.num_generated = 100, 1
    assert [(x.request, x.tokens) for x in s.schedule(0.3)] == [(a, 1), (b, 1)]


@pytest.mark.parametrize("policy", [{}, {"reserve_full": True}, {"prefill_first": True}])
def test_speculation_caches_its_drafts_within_what_admission_promised(
        policy: dict[str, bool]) -> None:
    """A verify step caches 1 + drafts tokens: a lone request whose last step's drafts pass
    the pool is refused at arrival (it had stopped the run, 'cannot schedule'), and a
    reservation counts them (TensorRT-LLM had preempted with speculation on)."""
    spec = replace(small_config(2), spec_tokens=4, spec_acceptance=0.7, **policy)
    result = Simulator(DEP, PROFILE, spec).run(iter([Request(0, 0.0, 31, 2)]))
    assert result.rejected == 1 and "KV blocks" in next(iter(result.rec.rejected))
    if policy.get("reserve_full"):
        w = Workload(40, "300", "197", seed=3)
        tight = replace(small_config(93), spec_tokens=4, spec_acceptance=0.7, **policy)
        assert Simulator(DEP, PROFILE, tight).run(iter(w)).preemptions == 0


def test_a_short_prompt_is_not_priced_as_a_graphed_verify_step() -> None:
    """Under speculation only a batch of verify rows (1 + drafts tokens each) is graphed: a
    prompt of as few tokens pays a prompt step's overhead."""
    from ridgeline.cost import batch_shape
    from ridgeline.sim.scheduler import Scheduled

    sim = Simulator(DEP, PROFILE, replace(small_config(100), spec_tokens=4))
    prompt = Request(0, 0.0, 3, 5)
    decode = Request(1, 0.0, 100, 5, num_computed=100, num_generated=1)
    timer = sim.timer
    assert sim.config.spec_draft_cost == 0  # the target's time alone
    assert sim._time([Scheduled(prompt, 3, 0)]) == timer.time_s(batch_shape(DEP, [Seq(3, 0)]))
    verify = timer.time_s(batch_shape(DEP, [Seq(5, 100)]), graphed=True)
    assert sim._time([Scheduled(decode, 5, 100)]) == verify
    assert timer.time_s(batch_shape(DEP, [Seq(5, 100)])) > verify
    assert timer.time_s(batch_shape(DEP, [Seq(3, 0)]), graphed=True) < sim._time(
        [Scheduled(prompt, 3, 0)])


def test_llama_server_runs_an_iteration_of_up_to_n_batch_tokens_as_ubatches() -> None:
    """llama-server fills one llama_decode call up to -b (2,048) and runs it as -ub (512)
    ubatches: a 2,000-token prompt is one iteration of four passes, and a running slot gets
    one token in it, not one per ubatch."""
    from ridgeline.llamacpp_batching import split_ubatches

    assert split_ubatches([Seq(1, 100), Seq(2000, 0)], 512) == [
        [Seq(1, 100), Seq(511, 0)], [Seq(512, 511)], [Seq(512, 1023)], [Seq(465, 1535)]]
    dep = replace(DEP, engine="llama.cpp-cuda")
    config = sim_config(dep)
    assert (config.max_num_batched_tokens, config.ubatch_tokens) == (2048, 512)
    for fast in (True, False):
        sim = Simulator(dep, profile_for("llama.cpp-cuda"), replace(config, fast_path=fast))
        slot, prompt = Request(0, 0.0, 10, 400), Request(1, 0.5, 2000, 5)
        seen: list[tuple[int, int, float]] = []
        def note(s: Simulator, seen: list[tuple[int, int, float]] = seen,
                 slot: Request = slot, prompt: Request = prompt) -> None:
            seen.append((slot.num_generated, prompt.num_computed, s.now_s))

        sim.run(iter([slot, prompt]), after_step=note)
        step = next(i for i, (_, computed, _) in enumerate(seen) if computed)
        assert seen[step][1] == 2000 and seen[step][0] == seen[step - 1][0] + 1
        passes = sum(sim.timer.time_s(batch_shape(dep, part)) for part in split_ubatches(
            [Seq(1, 10 + seen[step - 1][0] - 1), Seq(2000, 0)], 512))
        assert seen[step][2] - seen[step - 1][2] == pytest.approx(passes)


def test_a_window_counts_the_latencies_of_the_requests_arriving_in_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "requests.csv"
    argv = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "6", "--num-requests", "400",
            "--input-len", "lognormal:800,0.5", "--output-len", "lognormal:150,0.5",
            "--slo-ttft-ms", "60", "--slo-tpot-ms", "12", "--export", str(out), "--json"]
    assert main([*argv, "--window", "10,50"]) == 0
    data = json.loads(capsys.readouterr().out)
    import csv

    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 400  # the export keeps every request, in the window or not
    inside = [r for r in rows if 10 <= float(r["arrival_s"]) <= 50]
    assert data["windowed_requests"] == len(inside) < 400 and data["window_s"] == [10, 50]
    ttfts = sorted(float(r["ttft_s"]) for r in inside)
    assert data["ttft_s"]["mean"] == pytest.approx(sum(ttfts) / len(ttfts), rel=1e-9)
    good = sum(float(r["ttft_s"]) <= 0.06 and float(r["tpot_s"]) <= 0.012 for r in inside)
    assert 0 < good < len(inside)  # the SLO splits them: the count below is not trivial
    assert data["good_requests"] == good
    assert data["goodput_req_s"] == pytest.approx(good / 40)  # over the window's 40 s
    assert data["keeps_up"] is True
    assert main(argv) == 0  # no window: every request's latencies
    whole = json.loads(capsys.readouterr().out)
    assert whole["window_s"] is None and whole["keeps_up"] is None
    assert whole["ttft_s"]["mean"] == pytest.approx(
        sum(float(r["ttft_s"]) for r in rows) / 400, rel=1e-9)


def test_a_window_says_whether_the_engine_keeps_up(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--num-requests", "3000",
            "--input-len", "1000", "--output-len", "250", "--window", "20,80"]
    assert main([*argv, "--rate", "30"]) == 0  # past what one H100 serves (~19 req/s)
    text = capsys.readouterr().out
    assert "IT DOES NOT KEEP UP" in text and "the queue grew by" in text
    assert main([*argv, "--rate", "8"]) == 0
    assert "  it keeps up" in capsys.readouterr().out


def test_a_window_that_keeps_up_within_the_noise_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B on one H100 at 15 req/s (uniform 200-2,000 / 50-400 tokens, 1,500
    requests, seed 0), window 20-80 s: 940 arrived, 895 finished, the running batch 89 → 133.
    The excess is within the noise the verdict allows (``keep_up_slack``), and a run of 6,000
    at that rate holds level, so the engine keeps up; but the line had said only "it keeps
    up", the batch's rise unexplained. It says the verdict rests on the noise, and by how
    much the count moved against it."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.engines import profile_for
    from ridgeline.sim.config import sim_config
    from ridgeline.sim.pipeline import run_replica
    from ridgeline.sim.workload import Workload

    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16")
    work = Workload(1500, "uniform:200,2000", "uniform:50,400", rate=15, seed=0)
    rec = run_replica(dep, profile_for("vllm"), sim_config(dep), work,
                      window_s=(20.0, 80.0)).rec
    excess = rec.window_growth[0]
    assert 0 < excess <= rec.keep_up_slack and rec.keeps_up and not rec.batch_took_arrivals
    assert main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--num-requests", "1500",
                 "--input-len", "uniform:200,2000", "--output-len", "uniform:50,400",
                 "--rate", "15", "--window", "20,80"]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    start, end = rec.running_at_window
    assert line.startswith("  it keeps up within the noise: ")
    assert (f"{rec.windowed:,} arrived in it ({excess:,} more, within the "
            f"{rec.keep_up_slack:,.0f} that a count of {rec.windowed:,} may move by as noise)"
            ) in line and f"running batch went {start} → {end}" in line


def test_a_window_over_a_batch_still_filling_keeps_up(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Long-tailed answers fill the running batch slowly: over 5–20 s more requests arrive
    than finish, the excess taken into the running batch, none left waiting. That is no
    growing queue; the arrivals' excess over the finishes is the batch's rise plus the
    queue's, the queue's read from the gauges as the window opens and closes."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.engines import profile_for
    from ridgeline.sim.config import sim_config
    from ridgeline.sim.pipeline import run_replica
    from ridgeline.sim.workload import Workload

    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16")
    work = Workload(300, "lognormal:1000,0.8", "lognormal:200,0.8", rate=12, seed=0)
    low, high = 5.0, 20.0
    rec = run_replica(dep, profile_for("vllm"), sim_config(dep), work,
                      window_s=(low, high)).rec
    grew, filled, queued = rec.window_growth
    assert grew == rec.windowed - rec.finished_in_window > 0.1 * rec.windowed  # fewer finished
    assert filled == rec.running_at_window[1] - rec.running_at_window[0] == grew - queued

    def waiting_at(t: float) -> int:
        return [p for p in rec.series.points if p[0] <= t][-1][2]
    assert abs(queued - (waiting_at(high) - waiting_at(low))) <= 3  # arrivals between readings
    assert rec.keeps_up
    assert not rec.held_steady  # a plan's check asks for a steady state: a filling batch is not
    assert main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "12", "--num-requests",
                 "300", "--input-len", "lognormal:1000,0.8", "--output-len",
                 "lognormal:200,0.8", "--window", "5,20"]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    start, end = rec.running_at_window
    assert line.startswith("  it keeps up, its running batch still filling:")
    assert f"running batch went {start} → {end}" in line
    assert f"({grew:,} more, past the {rec.keep_up_slack:,.0f} that a count" in line


@pytest.mark.usefixtures("simulate_once")  # one run for its --json and its text
def test_a_batch_that_grows_because_the_engine_is_overloaded_does_not_keep_up(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A small model on a large card, with seats to spare, takes an overload into its running
    batch rather than its queue: 300 req/s of 1,000-token answers to Llama-3.2-1B on an H200,
    which serves a fraction of them. Its queue barely moves, yet the run is OVERLOADED, so
    the window does not keep up, as the text says too."""
    argv = ["simulate", "llama-3.2-1b", "--gpu", "h200", "--input-len", "200", "--output-len",
            "1000", "--num-requests", "1500", "--rate", "300", "--window", "1,4",
            "--max-num-seqs", "4096"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["overloaded"]["grew"] == "batch"
    assert out["overloaded"]["served_req_s"] < out["overloaded"]["offered_req_s"] / 2
    assert out["keeps_up"] is False
    assert main(argv) == 0
    assert "IT DOES NOT KEEP UP" in capsys.readouterr().out


@pytest.mark.usefixtures("simulate_once")  # one run for its --json and its text
def test_a_run_the_engine_falls_behind_says_it_is_overloaded(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Without a window too: 100 req/s offered to one H100 (about 20 served) is OVERLOADED,
    with both rates and the queue left when the last request arrived, and no advice to run
    longer; 5 req/s is not."""
    argv = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--num-requests", "1500",
            "--input-len", "1000", "--output-len", "200"]
    assert main([*argv, "--rate", "100", "--json"]) == 0
    swamped = json.loads(capsys.readouterr().out)["overloaded"]
    assert swamped["offered_req_s"] > 90 and swamped["served_req_s"] < 40
    assert swamped["waiting_at_last_arrival"] > 300
    # what it serves is the engine's, not the load's: ten times the rate, the same service
    # (it read the batch's first filling as service, and rose with the rate offered)
    assert main([*argv, "--rate", "1000", "--json"]) == 0
    flooded = json.loads(capsys.readouterr().out)["overloaded"]
    assert flooded["served_req_s"] == pytest.approx(swamped["served_req_s"], rel=0.05)
    assert main([*argv, "--rate", "100"]) == 0
    text = capsys.readouterr().out
    assert "OVERLOADED: requests arrive at" in text and "spans about ten" not in text
    assert main([*argv[:5], "300", *argv[6:], "--rate", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["overloaded"] is None


@pytest.mark.parametrize(("window", "said"), [
    ("5,3", "0 ≤ FROM < UNTIL"), ("nan,3", "0 ≤ FROM < UNTIL"), ("-1,3", "0 ≤ FROM < UNTIL"),
    ("1,2,3", "FROM,UNTIL"), ("a,b", "FROM,UNTIL"), ("5000,6000", "no completed request"),
])
def test_a_bad_window_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], window: str, said: str
) -> None:
    from tests.conftest import run_cli

    code, _, err = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "3",
                           "--num-requests", "50", "--window", window)
    assert code == 2 and said in err and len(err.strip().splitlines()) == 1


def test_expert_parallel_spreads_a_moes_experts_and_a_dense_model_refuses_it(
    capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "2", "--rate", "4",
            "--num-requests", "100", "--json"]
    assert main(argv) == 0
    sliced = json.loads(capsys.readouterr().out)
    assert main([*argv, "--enable-expert-parallel"]) == 0
    spread = json.loads(capsys.readouterr().out)
    assert spread["settings"]["expert_parallel"] and not sliced["settings"]["expert_parallel"]
    assert spread["tpot_s"]["mean"] != sliced["tpot_s"]["mean"]  # the step is priced apart
    code = main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "3",
                 "--enable-expert-parallel"])
    assert code == 2 and "is dense" in capsys.readouterr().err
    code = main(["simulate", "qwen3-30b-a3b", "--gpu", "h100", "--rate", "3",
                 "--enable-expert-parallel"])  # one GPU: nothing to spread
    assert code == 2 and "with one there is nothing to spread" in capsys.readouterr().err


def test_an_expert_parallel_pool_holds_the_busiest_ranks_whole_experts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Mixtral's 8 experts over 16 GPUs: vLLM puts one whole expert on each of eight, an
    eighth of the experts' bytes where slicing puts a sixteenth, so the pool is smaller."""
    argv = ["simulate", "mixtral-8x22b", "--gpu", "h100", "--num-gpus", "16", "--rate", "1",
            "--num-requests", "10", "--json"]
    assert main(argv) == 0
    sliced = json.loads(capsys.readouterr().out)["settings"]["num_blocks"]
    assert main([*argv, "--enable-expert-parallel"]) == 0
    spread = json.loads(capsys.readouterr().out)["settings"]["num_blocks"]
    assert 0.6 < spread / sliced < 0.8


def test_sglangs_new_token_ratio_decays_and_restarts_as_sglang_sets_it() -> None:
    from ridgeline.sim.token_ratio import DECAY_STEPS, INIT_RATIO, MIN_RATIO, NewTokenRatio

    ratio = NewTokenRatio()
    assert ratio.value == 0.7 and pytest.approx(0.098) == MIN_RATIO
    ratio.decay(300)  # halfway down in 300 of its 600 decode steps
    assert ratio.value == pytest.approx((0.7 + 0.098) / 2)
    one_by_one = NewTokenRatio()
    for _ in range(300):
        one_by_one.decay()
    assert one_by_one.value == ratio.value  # a run of k steps at once: the same, bit for bit
    ratio.decay(DECAY_STEPS)
    assert ratio.value == MIN_RATIO  # floored
    survivors = [Request(0, 0.0, 100, 500, num_generated=100),
                 Request(1, 0.0, 100, 300, num_generated=280)]
    ratio.retracted(survivors)  # (380 + 2 × 20) ÷ (800 + 1)
    assert ratio.value == pytest.approx(420 / 801)
    ratio.retracted([Request(2, 0.0, 10, 30, num_generated=29)])
    assert ratio.value == 1.0  # capped
    ratio.reset()
    assert ratio.value == INIT_RATIO


def test_sglang_admits_by_its_estimate_of_the_running_outputs_and_waits_for_a_leave() -> None:
    """A request starts only if its prompt, clipped output and a page fit below the free
    cache less the running decodes' remaining outputs × new_token_ratio; a refusal holds
    admission until a running request leaves. vLLM's rule admits the same request (its
    first chunk's blocks are free)."""

    def scheduler(token_ratio: bool) -> tuple[Scheduler, Request, Request]:
        s = prefill_first_scheduler(1000, 1, token_ratio, seqs=64, budget=4096)
        pool = s.pool
        running = Request(0, 0.0, 100, 600)
        s.add(running)
        s.schedule(0.0)
        running.num_computed, running.num_generated = 100, 1  # decoding, 599 to go
        pool.grow(running, 101)
        late = Request(1, 0.0, 300, 300)
        s.add(late)
        return s, running, late

    s, running, late = scheduler(True)
    # room: 899 free − 599 × 0.7 = 479.7; asked 300 + 300 + 1 = 601
    assert [x.request for x in s.schedule(0.1)] == [running]  # a decode step
    assert s.batch_full and s.waiting[0] is late
    s.ratio.decay(600)  # even at the floor (599 × 0.098 = 58.7 held) it waits for a leave
    assert [x.request for x in s.schedule(0.2)] == [running]
    s.remove(running)
    s.pool.release(running)
    assert [x.request for x in s.schedule(0.3)] == [late]  # the leave reopens admission
    s, running, late = scheduler(False)
    assert [x.request for x in s.schedule(0.1)] == [late]  # vLLM's rule: its blocks are free


def test_sglangs_estimate_trades_a_smaller_batch_for_fewer_retractions() -> None:
    """At a load past what the engine serves, admitting by the estimate holds room for the
    running outputs: a smaller batch, and a fraction of the retractions that admitting by
    free blocks alone makes (4 against 183 here). Both paths agree."""
    w = Workload(300, "lognormal:300,0.5", "lognormal:150,0.8", rate=200.0, seed=5)
    config = replace(small_config(600, seqs=128), prefill_first=True)
    estimate = [Simulator(DEP, PROFILE, replace(config, token_ratio=True, fast_path=fast)).run(
        iter(w)) for fast in (True, False)]
    blocks_only = Simulator(DEP, PROFILE, config).run(iter(w))
    assert estimate[0].duration_s == pytest.approx(estimate[1].duration_s, rel=1e-9)
    assert estimate[0].preemptions == estimate[1].preemptions < blocks_only.preemptions
    assert estimate[0].preemptions * 10 < blocks_only.preemptions
    assert estimate[0].running_batch["mean"] < blocks_only.running_batch["mean"]
    assert sim_config(replace(DEP, engine="sglang")).token_ratio
    assert not sim_config(DEP).token_ratio


def test_a_window_past_the_last_arrival_reads_no_keep_up_and_rates_its_arrivals_only(
    capsys: pytest.CaptureFixture[str]
) -> None:
    """A window reaching into the drain holds the backlog finishing: an overloaded engine
    would read as keeping up there, and goodput over the empty tail would shrink."""
    base = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "5", "--num-requests",
            "200", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50", "--json"]
    assert main([*base, "--window", "10,1000"]) == 0
    past = json.loads(capsys.readouterr().out)
    assert past["keeps_up"] is None  # not read
    assert main([*base, "--window", "10,30"]) == 0
    inside = json.loads(capsys.readouterr().out)
    assert 3 < past["goodput_req_s"] < 7 and 3 < inside["goodput_req_s"] < 7  # ~5 req/s
    assert main([*base[:-1], "--window", "10,1000"]) == 0
    text = capsys.readouterr().out
    assert "runs past the last arrival" in text and "it keeps up:" not in text
    assert main([*base[:-1], "--window", "0,0.5"]) == 0
    text = capsys.readouterr().out
    assert "only " in text and "too few to read whether" in text  # a handful: cautioned
    assert main([*base, "--window", "0,0.5"]) == 0
    assert json.loads(capsys.readouterr().out)["keeps_up"] is None


def test_simulate_reads_any_percentile_with_the_rejected_as_misses(
    capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "llama-2-7b", "--gpu", "h100", "--rate", "4", "--num-requests", "300",
            "--input-len", "lognormal:1500,0.8", "--output-len", "100", "--max-model-len",
            "4096", "--json"]
    assert main([*argv, "--percentile", "75"]) == 0
    data = json.loads(capsys.readouterr().out)
    at, answered = data["at_percentile"], data["completed"]
    assert data["rejected"] == at["rejected_counted"] > 0
    # p75 of answered + rejected, the rejected last: the answered ones' p(75 × all ÷ answered)
    share = 75 * (answered + data["rejected"]) / answered
    assert data["ttft_s"]["p50"] < at["ttft_s"] and share < 100
    assert main([*argv, "--percentile", "99.9"]) == 0
    never = json.loads(capsys.readouterr().out)["at_percentile"]
    assert never["ttft_s"] is None and never["ttft_none_because"] == "never"
    from tests.conftest import run_cli

    code, _, err = run_cli(capsys, *argv, "--percentile", "0")
    assert code == 2 and "percentile" in err


def test_expert_parallelism_is_refused_where_it_does_nothing(
        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "2", "--rate", "3",
                 "--engine", "llama.cpp", "--split-mode", "tensor", "--enable-expert-parallel"])
    assert code == 2 and "no expert parallelism" in capsys.readouterr().err


def test_ignore_eos_holds_sglangs_running_outputs_whole() -> None:
    """sglang.bench_serving sends ignore_eos: SGLang then holds each running request's whole
    remaining output (ratio 1), so it admits fewer than by new_token_ratio, and retracts
    nothing."""
    w = Workload(300, "lognormal:300,0.5", "lognormal:150,0.8", rate=200.0, seed=5)
    config = replace(small_config(600, seqs=128), prefill_first=True, token_ratio=True)
    ratio = Simulator(DEP, PROFILE, config).run(iter(w))
    whole = [Simulator(DEP, PROFILE, replace(config, ignore_eos=True, fast_path=fast)).run(
        iter(w)) for fast in (True, False)]
    assert whole[0].duration_s == pytest.approx(whole[1].duration_s, rel=1e-9)
    assert whole[0].running_batch["mean"] < ratio.running_batch["mean"]
    assert whole[0].preemptions == 0 < ratio.preemptions


def test_sglang_frees_a_retracted_requests_decoded_tokens_and_keeps_its_prompt_cached() -> None:
    def retired(token_ratio: bool) -> int:
        s = prefill_first_scheduler(100, 16, token_ratio)
        pool = s.pool
        r = Request(0, 0.0, 64, 200)
        s.add(r)
        s.schedule(0.0)
        r.num_computed, r.num_generated = 64 + 63, 64  # 4 prompt blocks, 4 of decoded tokens
        pool.grow(r, r.num_computed)
        s.preempt_last()
        return len(pool.evictable)

    assert retired(False) == 7  # vLLM: every full block cached
    assert retired(True) == 4  # SGLang: the prompt's


def test_the_ratio_after_a_retraction_stands_below_the_floor_until_a_decode_step() -> None:
    from ridgeline.sim.token_ratio import MIN_RATIO, NewTokenRatio

    ratio = NewTokenRatio()
    ratio.retracted([Request(0, 0.0, 10, 4000, num_generated=100)])  # 120 ÷ 4,001
    assert ratio.value == pytest.approx(120 / 4001) and ratio.value < MIN_RATIO
    ratio.decay()
    assert ratio.value == MIN_RATIO


def test_sglang_retracts_the_fewest_outputs_first_the_longest_prompt_on_a_tie() -> None:
    """Short of blocks for a decode step, SGLang retracts the running request with the fewest
    outputs (ties: the longest prompt) until the rest fit, keeping one — not vLLM's newest:
    here the newest has the most outputs (a request readmitted after a retraction)."""
    s = prefill_first_scheduler(97, 1, True)
    pool = s.pool
    a, c, b = Request(0, 0.0, 10, 100), Request(1, 0.0, 20, 100), Request(2, 0.0, 10, 100)
    for r, generated in ((a, 5), (c, 5), (b, 50)):
        r.num_generated, r.num_computed, r.status = generated, r.prompt_tokens + generated - 1, \
            "running"
        pool.grow(r, r.num_computed)
        s.running.append(r)
    assert pool.available == 0  # three decodes ask a block each
    assert s.retract_for_decode()
    assert s.running == [a, b] and list(s.waiting) == [c]  # c: 5 outputs, the longer prompt
    assert pool.available >= 2 and len(pool.evictable) == 20  # its prompt stays cached
    lone = prefill_first_scheduler(14, 1, True)
    a2 = Request(3, 0.0, 10, 100, num_generated=5, num_computed=14, status="running")
    lone.pool.grow(a2, 14)
    lone.running.append(a2)
    assert not lone.retract_for_decode() and lone.running == [a2]  # one always stays


@given(st.lists(st.tuples(st.integers(1, 60), st.integers(0, 40), st.integers(0, 30)),
                min_size=1, max_size=25), st.integers(1, 12), st.integers(0, 80))
@settings(max_examples=60, deadline=None)
def test_the_summed_decodes_hold_what_each_member_has_left_clipped(
        members: list[tuple[int, int, int]], clip: int, steps: int) -> None:
    """SGLang's estimate of the running outputs — Σ min(output left, clip) — kept as sums
    (ends, and a heap of the steps at which each member comes under the clip) reads what a
    walk over the members reads, at every step, members joining and leaving."""
    from ridgeline.sim.decodes import DecodeSet

    dset = DecodeSet(16, clip_tokens=clip)
    reqs = []
    for i, (output, generated, joined_at) in enumerate(members):
        r = Request(i, 0.0, 10, output + generated + 1, num_generated=generated + 1,
                    num_computed=10 + generated)
        reqs.append((joined_at, r))
    live: list[Request] = []
    for g in range(steps + 1):
        live += [r for joined_at, r in reqs if joined_at == g]
        for joined_at, r in reqs:
            if joined_at == g:
                dset.add(r, g)
        if g % 7 == 3 and live:  # the oldest leaves early (a preemption)
            dset.discard(live.pop(0), g)
        for r in [r for r in live if r.output_tokens <= r.decode_gen + g]:  # finished
            live.remove(r)
            dset.discard(r, g)
        assert dset.held(g) == sum(min(r.output_tokens - (r.decode_gen + g), clip)
                                   for r in live)


# --- whether the simulated engine starts at all (sim/config.start_refusal) ---


def test_an_engine_whose_pool_holds_the_context_starts() -> None:
    from ridgeline.memory import EngineSettings
    from ridgeline.sim.config import start_refusal

    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                           engine="vllm")
    settings = EngineSettings(max_model_len=8192)
    assert start_refusal(dep, settings, sim_config(dep, settings)) is None


def test_vllm_left_at_its_default_length_refuses_where_the_pool_is_short_of_it() -> None:
    """An A10G's 24 GB leave Llama-3.1-8B less than one 131,072-token sequence; a stated
    8K length starts."""
    from ridgeline.memory import EngineSettings
    from ridgeline.sim.config import start_refusal

    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("a10g"),
                           engine="vllm")
    default = start_refusal(dep, EngineSettings(), sim_config(dep, EngineSettings()))
    assert default is not None and "default max_model_len, the model's 131,072" in default
    short = EngineSettings(max_model_len=8192)
    assert start_refusal(dep, short, sim_config(dep, short)) is None


def test_weights_that_leave_no_pool_say_so_before_anything_else() -> None:
    from ridgeline.memory import EngineSettings
    from ridgeline.sim.config import start_refusal

    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"),
                           engine="vllm")  # 141 GB of bf16 weights on one 80 GB card
    settings = EngineSettings(max_model_len=8192)
    refusal = start_refusal(dep, settings, sim_config(dep, settings))
    assert refusal is not None and refusal.startswith("does not fit on 1 x h100-sxm: its "
                                                      "weights alone")  # as fit says it


@pytest.mark.parametrize("load", [["--concurrency", "8"], ["--rate", "4"], ["--rate", "0.5"]])
def test_the_running_batch_is_littles_law(capsys: pytest.CaptureFixture[str],
                                          load: list[str]) -> None:
    """The gauge, as vLLM sets it after each step, averages each request's time on the engine
    (end-to-end less its queueing) summed over the run, within the step it takes a newcomer
    to show: near 8 at a closed loop of 8 users, whatever the steps do between finishes and
    admissions (a run of identical decode steps reads the full batch after each of them)."""
    from ridgeline.cli import main

    assert main(["simulate", "llama-3.1-8b", "--gpu", "h100", *load, "--num-requests", "400",
                 "--input-len", "lognormal:500,0.5", "--output-len", "lognormal:100,0.5",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    on_engine_s = d["completed"] * (d["e2e_s"]["mean"] - d["queue_s"]["mean"])
    first = min(p["t_s"] for p in d["time_series"])
    littles = on_engine_s / (d["duration_s"] - first)
    assert littles * 0.95 < d["running"]["mean"] <= littles * 1.001
    if load[0] == "--concurrency":
        assert d["running"]["max"] == 8 and d["running"]["mean"] > 7.6


def test_the_json_export_is_strict_json_and_speculation_is_named(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """One-token requests have no TPOT: the JSON export writes null, which every parser
    reads (a bare NaN is not JSON); a speculative run says how many tokens a step streams."""
    from ridgeline.cli import main
    from ridgeline.sim.config import tokens_per_step

    out = tmp_path / "r.json"
    assert main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--num-requests",
                 "10", "--output-len", "1", "--export", str(out)]) == 0
    rows = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"bare {c}"))
    assert rows and all(r["tpot_s"] is None for r in rows)
    assert main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--num-requests",
                 "10", "--spec-tokens", "3", "--spec-acceptance", "0.7"]) == 0
    assert tokens_per_step(3, 0.7) == pytest.approx(1 + 0.7 + 0.49 + 0.343)
    assert "a step streams 2.53 tokens on average" in capsys.readouterr().out


def test_the_export_holds_every_request_the_rejected_with_why(tmp_path: Path) -> None:
    """Requests longer than --max-model-len are refused: the CSV keeps them, in id order,
    with no latencies and the reason."""
    import csv

    from ridgeline.cli import main

    out = tmp_path / "r.csv"
    assert main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--num-requests",
                 "20", "--input-len", "uniform:1000,6000", "--max-model-len", "4096",
                 "--export", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert [int(r["id"]) for r in rows] == list(range(20))
    rejected = [r for r in rows if r["status"].startswith("rejected")]
    assert rejected and all(r["ttft_s"] == "" and int(r["prompt_tokens"]) + 128 > 4096
                            for r in rejected)
    assert all(r["status"] == "finished" for r in rows if r not in rejected)


def test_an_export_with_rejected_requests_replays_as_a_trace(tmp_path: Path) -> None:
    """The export's arrival_s, prompt_tokens and output_tokens are a trace's own columns: a
    refused request keeps the output it asked for (it had read 0 there, which the trace
    reader refuses), so the export replays, the same requests refused."""
    import csv

    from ridgeline.cli import main

    out, again = tmp_path / "r.csv", tmp_path / "again.csv"
    run = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "4096"]
    assert main([*run, "--rate", "2", "--num-requests", "20", "--input-len",
                 "uniform:1000,6000", "--output-len", "200", "--export", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    rejected = [r for r in rows if r["status"].startswith("rejected")]
    assert rejected and all(int(r["output_tokens"]) == 200 for r in rejected)
    assert main([*run, "--trace", str(out), "--export", str(again)]) == 0
    replayed = list(csv.DictReader(again.open()))
    assert [(r["prompt_tokens"], r["output_tokens"], r["status"]) for r in replayed] == \
        [(r["prompt_tokens"], r["output_tokens"], r["status"]) for r in rows]


def test_shared_prefixes_leave_the_same_seeds_lengths_and_arrivals() -> None:
    """With and without --prefix-groups the same seed draws the same requests, so the two
    runs compare prefix caching alone."""
    from ridgeline.sim.workload import Workload

    plain = list(Workload(50, "lognormal:800,0.5", "200", rate=3.0, seed=7))
    grouped = list(Workload(50, "lognormal:800,0.5", "200", rate=3.0, seed=7,
                            prefix_groups=4, prefix_len=300))
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in plain] == \
        [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in grouped]
    assert len({r.prefix_group for r in grouped}) > 1


def test_a_v0_vllm_is_simulated_with_a_caution_on_its_scheduler(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The pool follows vLLM 0.4's rules; the steps follow V1's scheduler, and it says so."""
    # Llama 3: vLLM 0.4 cannot load 3.1 (its rope_scaling came in 0.5.3.post1)
    argv = ["simulate", "llama-3-8b", "--gpu", "h100", "--rate", "2", "--num-requests", "50"]
    assert main([*argv, "--engine-version", "0.4.0"]) == 0
    assert "schedules with its V0 engine" in capsys.readouterr().out
    assert main([*argv, "--engine-version", "0.10"]) == 0
    assert "V0 engine" not in capsys.readouterr().out


def test_vllm_v0_19_admits_a_prompt_only_with_its_whole_blocks_free() -> None:
    """scheduler_reserve_full_isl: beside a decode holding three of five blocks, a 64-token
    prompt whose first chunk fits the two free blocks, but not its four, waits; before v0.19
    its first chunk got it in."""
    def step(gate: bool) -> list[tuple[int, int]]:
        pool = BlockPool(5, 16, prefix_caching=False)
        config = SchedulerConfig(max_num_seqs=64, max_num_batched_tokens=17,
                                 admission_extra=(lambda n: 0) if gate else (lambda n: None))
        s = Scheduler(config, pool)
        a, b = Request(0, 0.0, 17, 40), Request(1, 0.0, 64, 5)
        s.add(a)
        assert [(x.request.id, x.tokens) for x in s.schedule(0.0)] == [(0, 17)]
        pool.grow(a, 48)  # a's cache grown to three blocks, decoding
        a.num_computed, a.num_generated = 17, 1
        s.add(b)
        return [(x.request.id, x.tokens) for x in s.schedule(0.1)]

    assert step(gate=False) == [(0, 1), (1, 16)]  # one block for its first 16 tokens
    assert step(gate=True) == [(0, 1)]


def test_sim_config_charges_the_window_groups_admission_room() -> None:
    """Gemma-3-27B at 32K on an H100: one full group and six window groups of 1,024 tokens; a
    32K prompt's gate asks each window group cdiv(1,023 + the tokens in flight, block) + 1
    blocks, a short one its own blocks (the window groups grow with a request: none is in its
    own charge); v0.19 asked the whole prompt of each, and v0.18 asked nothing more than the
    first chunk."""
    from ridgeline.memory import EngineSettings, kv_pool

    dep = Deployment.build(resolve_model("gemma-3-27b"), resolve_accelerator("h100"))
    newest = EngineSettings(max_model_len=32_768)
    config, pool = sim_config(dep, newest), kv_pool(dep, newest)
    assert config.whole_prompt_gate and config.gate_full_groups == 1
    flight = pool.window_budget_tokens
    b = config.block_size
    assert config.admission_extra(32_768) == 6 * (-(-(1023 + flight) // b) + 1)
    assert config.admission_extra(100) == 6 * -(-100 // b)  # a short prompt: its own blocks
    old = sim_config(dep, EngineSettings(max_model_len=32_768, engine_version="0.19"))
    assert old.admission_extra(32_768) == 6 * 2048
    assert sim_config(dep, EngineSettings(max_model_len=32_768, engine_version="0.18")) \
        .admission_extra(32_768) is None
