"""A pipeline-parallel vLLM V1 replica: one pool and scheduler, pp micro-batches in flight."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engines import profile_for
from ridgeline.sim.blocks import BlockPool
from ridgeline.sim.config import SimConfig
from ridgeline.sim.pipeline import PipelineSimulator, lane_config, run_replica
from ridgeline.sim.request import RUNNING, Request
from ridgeline.sim.simulator import Simulator
from ridgeline.sim.workload import Workload
from ridgeline.vllm_memory import one_pool

MODEL, H100 = resolve_model("llama-3.1-8b"), resolve_accelerator("h100")
PP1 = Deployment.build(MODEL, H100, "bf16")
PP2 = Deployment.build(MODEL, H100, "bf16", None, 2, 2)
PP4 = Deployment.build(MODEL, H100, "bf16", None, 4, 4)
PROFILE = profile_for("vllm")


def config(blocks: int, seqs: int = 64, budget: int = 2048, spec: int = 0) -> SimConfig:
    return SimConfig(num_blocks=blocks, block_size=16, max_num_seqs=seqs,
                     max_num_batched_tokens=budget, max_model_len=32768, fast_path=False,
                     spec_tokens=spec, spec_acceptance=0.7 if spec else 0.0,
                     spec_draft_cost=0.1 if spec else 0.0)


def test_vllm_v1_keeps_one_pool_and_v0_and_the_other_engines_split_it() -> None:
    c = config(100)
    assert one_pool("vllm") and one_pool("vllm", "0.32") and one_pool("vllm", "0.8.5")
    assert not one_pool("vllm", "0.6.3") and not one_pool("vllm", "0.7.3")
    assert not one_pool("vllm", "0.8.5 V0")
    assert not one_pool("sglang") and not one_pool("trtllm")
    assert lane_config(c, 2, "vllm") is c
    assert lane_config(c, 2, "vllm", "0.6.3").num_blocks == 50
    assert lane_config(c, 2, "sglang").max_num_seqs == 32
    assert lane_config(c, 1, "sglang") is c


def test_a_load_that_fits_the_whole_pool_but_not_a_lane_does_not_preempt_under_v1() -> None:
    """Two long requests (64 + 560 tokens: 39 blocks at their end) and two short ones (5
    blocks) hold 88 of 100 blocks at most: one pool runs them without a preemption. Dealt to
    two lanes of 50 blocks (vLLM V0), the long pair meets in one lane and 78 > 50 preempts."""
    def load() -> list[Request]:
        return [Request(i, 0.0, 64, 560 if i % 2 == 0 else 16) for i in range(4)]

    pool = BlockPool(100, 16)
    assert load()[0].prompt_tokens + load()[0].output_tokens == 624
    assert sum(pool.blocks_for(r.max_cached_tokens) for r in load()) == 88
    v1 = run_replica(PP2, PROFILE, config(100), load())
    v0 = run_replica(PP2, PROFILE, config(100), load(), "0.6.3")
    assert v1.completed == v0.completed == 4
    assert v1.preemptions == 0
    assert v0.preemptions > 0  # the lane split, as it was simulated before for every engine


def test_two_stages_keep_two_equal_micro_batches_in_flight_for_twice_the_rate() -> None:
    """A token budget of eight 512-token prompts fills a micro-batch with eight requests: 16
    users ride in two micro-batches of 8, one behind the other, 8 users in one. The trip is
    the same (TPOT equal), so the pipeline's two in flight serve about twice the tokens."""
    c = replace(config(20000), max_num_batched_tokens=8 * 512)

    def run(users: int) -> tuple[float, float, int]:
        sim = PipelineSimulator(PP2, PROFILE, c)
        rows: list[int] = []
        result = sim.run(iter(Workload(users * 4, "512", "200", float("inf"), seed=0)),
                         closed_loop=users,
                         after_step=lambda _: rows.extend(len(mb.rows) for mb in sim.in_flight))
        return result.output_tok_s, result.percentiles("tpot")["p50"], max(rows), \
            result.rec.hist["tpot"]

    one, tpot_one, rows_one, _ = run(8)
    two, tpot_two, rows_two, tpots = run(16)
    assert rows_one == rows_two == 8
    # half of the 64 requests ride each micro-batch: their p50, at position 31.5 of the 64
    # (vllm bench serve's linear reading), sits midway between the two micro-batches' TPOTs,
    # the first's the one micro-batch's, the second's within 4 % of it
    assert tpot_two == pytest.approx((tpots.low + tpots.high) / 2, rel=2.3e-3)
    assert tpots.low == pytest.approx(tpot_one, rel=0.01)
    assert tpots.high == pytest.approx(tpot_one, rel=0.04)
    assert two / one == pytest.approx(2.0, abs=0.1)


def test_the_micro_batches_are_not_balanced() -> None:
    """vLLM V1 caps the engine's running requests, not a micro-batch's, and balances nothing
    (issues #27462, #41682): sixteen 200-token prompts fit one budget, so the first
    micro-batch takes them all and the second stage idles while they decode. Each user still
    gets a token a trip, and a decode's trip barely grows with its batch, so their rate is
    about that of the same users split over two micro-batches by a smaller budget."""
    def run(budget: int) -> tuple[float, int, int]:
        sim = PipelineSimulator(PP2, PROFILE, replace(config(20000), max_num_batched_tokens=budget))
        in_flight: list[int] = []
        rows: list[int] = []

        def note(s: Simulator) -> None:
            in_flight.append(len(sim.in_flight))
            rows.extend(len(mb.rows) for mb in sim.in_flight)

        result = sim.run(iter(Workload(64, "200", "200", float("inf"), seed=0)), closed_loop=16,
                         after_step=note)
        return result.output_tok_s, max(in_flight), max(rows)

    lumped, in_flight_lumped, rows_lumped = run(4096)
    split, in_flight_split, rows_split = run(1600)
    assert (in_flight_lumped, rows_lumped) == (1, 16)
    assert (in_flight_split, rows_split) == (2, 8)
    assert split / lumped == pytest.approx(1.0, abs=0.1)


def test_a_long_prompts_chunks_fill_consecutive_micro_batches() -> None:
    """V1 counts a chunk computed when it is scheduled, so the next chunk of the same prompt
    goes in the next micro-batch, a stage later: four 1,024-token chunks on four stages take
    well under the four trips one after another that a lane takes."""
    c = config(2000, budget=1024)

    def ttft(sim: Simulator) -> float:
        return sim.run(iter([Request(0, 0.0, 4096, 2)])).percentiles("ttft")["p50"]

    pipelined, lane = ttft(PipelineSimulator(PP4, PROFILE, c)), ttft(Simulator(PP4, PROFILE, c))
    assert pipelined < 0.6 * lane


def check_in_flight(sim: PipelineSimulator) -> None:
    """A request's rows in flight, oldest first: prompt chunks, each where the last ended,
    and at most one row that samples, the newest; so a decode is never in two micro-batches.
    Blocks conserved; at most pp micro-batches in flight."""
    pool, s = sim.pool, sim.scheduler
    assert len(sim.in_flight) <= sim.stages
    assert pool.held + pool.free + len(pool.evictable) == pool.total
    rows: dict[int, list[tuple[int, int, bool]]] = {}
    for mb in sim.in_flight:
        for b, sample, epoch in zip(mb.rows, mb.samples, mb.epochs):
            r = b.request
            if r.preemptions == epoch and r.status == RUNNING:  # not preempted in flight
                rows.setdefault(r.id, []).append((b.context, b.tokens, sample))
    running = {r.id: r for r in s.running}
    for rid, mine in rows.items():
        r = running[rid]
        assert not any(sample for _, _, sample in mine[:-1])  # sampling: only the newest
        for (c0, n0, _), (c1, _, _) in pairwise(mine):
            assert c1 == c0 + n0  # consecutive chunks
        last_context, last_tokens, last_sample = mine[-1]
        assert r.num_computed == (r.known_tokens if last_sample else last_context + last_tokens)
    for r in s.running:
        assert r.num_computed <= r.known_tokens
        assert (r.blocks_held - pool.overhead) * pool.block_size >= r.num_computed


workloads = st.builds(
    Workload,
    num_requests=st.integers(1, 40),
    input_len=st.sampled_from(["64", "uniform:1,1500", "lognormal:300,1.0"]),
    output_len=st.sampled_from(["1", "uniform:1,200", "zipf:1.1,300"]),
    rate=st.sampled_from([2.0, 50.0, float("inf")]),
    seed=st.integers(0, 10_000),
).flatmap(lambda w: st.sampled_from([(0, 0), (3, 100)]).map(
    lambda prefix: replace(w, prefix_groups=prefix[0], prefix_len=prefix[1])))


@settings(max_examples=40, deadline=None)
@given(workload=workloads, blocks=st.sampled_from([60, 300, 5000]),
       dep=st.sampled_from([PP2, PP4]), budget=st.sampled_from([256, 2048]),
       spec=st.sampled_from([0, 0, 2]), users=st.sampled_from([0, 0, 5]))
def test_a_request_is_never_scheduled_while_its_token_is_in_flight(
        workload: Workload, blocks: int, dep: Deployment, budget: int, spec: int,
        users: int) -> None:
    sim = PipelineSimulator(dep, PROFILE, config(blocks, budget=budget, spec=spec))
    result = sim.run(iter(workload), closed_loop=users,
                     after_step=lambda _: check_in_flight(sim))
    assert result.completed + result.rejected == workload.num_requests
    assert sim.pool.held == 0 and not sim.in_flight


@settings(max_examples=40, deadline=None)
@given(workload=workloads, blocks=st.sampled_from([40, 300, 5000]),
       budget=st.sampled_from([256, 2048]), spec=st.sampled_from([0, 0, 3]),
       users=st.sampled_from([0, 0, 5]))
def test_one_stage_is_the_plain_step_loop_exactly(workload: Workload, blocks: int,
                                                  budget: int, spec: int, users: int) -> None:
    """The event loop with one stage in flight reproduces the plain step, number for number:
    preemptions, prefix hits, speculative decoding, closed loops."""
    c = config(blocks, budget=budget, spec=spec)
    plain = Simulator(PP1, PROFILE, c).run(iter(workload), closed_loop=users)
    events = PipelineSimulator(PP1, PROFILE, c, 1).run(iter(workload), closed_loop=users)
    assert (events.completed, events.rejected, events.steps, events.preemptions,
            events.prefix_hit_blocks) == (plain.completed, plain.rejected, plain.steps,
                                          plain.preemptions, plain.prefix_hit_blocks)
    assert (events.duration_s, events.busy_s) == (plain.duration_s, plain.busy_s)
    assert events.running_batch == plain.running_batch
    for name in ("ttft", "tpot", "itl", "e2e", "queue"):
        assert events.percentiles(name) == pytest.approx(plain.percentiles(name), nan_ok=True)


def test_without_a_pipeline_a_replica_runs_as_before() -> None:
    """run_replica at pp 1 is the plain simulator's run (what simulate ran before)."""
    c = replace(config(3000), fast_path=True)
    w = Workload(80, "lognormal:600,0.8", "lognormal:150,0.8", 6.0, seed=4)
    before = Simulator(PP1, PROFILE, c).run(iter(w), keep_rows=True)
    now = run_replica(PP1, PROFILE, c, w, keep_rows=True)
    assert now.rec.rows == before.rec.rows and now.steps == before.steps
    assert now.duration_s == before.duration_s and now.preemptions == before.preemptions


def test_a_request_arriving_while_the_core_waits_on_a_batch_joins_after_it_lands() -> None:
    """vLLM V1's core, with nothing to schedule, blocks on the oldest batch's output and reads
    new requests only after: a request arriving mid-trip is scheduled when that batch lands,
    not at its arrival (the simulator had started it at once, reading TTFT a trip low)."""
    trip_s = PipelineSimulator(PP2, PROFILE, config(1000)).run(
        iter([Request(0, 0.0, 64, 4)])).percentiles("ttft")["p50"]  # a prompt's trip alone
    sim = PipelineSimulator(PP2, PROFILE, config(1000))
    launched: dict[int, float] = {}

    def note(s: Simulator) -> None:
        for mb in sim.in_flight:
            for b in mb.rows:
                launched.setdefault(b.request.id, s.now_s)

    sim.run(iter([Request(0, 0.0, 64, 4), Request(1, trip_s / 2, 64, 4)]), after_step=note)
    assert launched[0] == 0.0
    assert launched[1] >= trip_s * 0.99  # when the first batch's output is back, not at half
