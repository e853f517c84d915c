"""The prompts' queue of a replica's sizing: each prompt prefilled as vLLM runs it (chunks of
the budget the running decodes leave, beside them), every drawn prompt at its own length,
and the wait behind the prefill under way (replica_sizing.ChunkedPrefill, length_groups,
prompt_queue_load)."""

from __future__ import annotations

import math
import random

import pytest

from ridgeline.candidate import replica_deployment
from ridgeline.catalog import resolve_model
from ridgeline.cost import Seq, decode_batch, step_time_s
from ridgeline.deployment import Deployment
from ridgeline.engines import profile_for
from ridgeline.hardware import resolve_accelerator
from ridgeline.replica_sizing import (
    PROMPT_QUANTILES,
    ChunkedPrefill,
    length_groups,
    length_quantiles,
    prompt_prefills_s,
    prompt_queue_load,
    size_replica,
)
from ridgeline.serving_load import Load, Slo

VLLM = profile_for("vllm")


def _dep(model: str, gpu: str, tp: int) -> Deployment:
    return replica_deployment(resolve_model(model), resolve_accelerator(gpu), tp, 1, "fp8", "fp8")


def _chunked(dep: Deployment, prompt: int, chunk: int, decodes: int = 0, context: int = 0
             ) -> tuple[float, int]:
    """The prompt's steps summed here, chunk by chunk through step_time_s: (time, steps)."""
    total, done, steps = 0.0, 0, 0
    while done < prompt:
        n = min(chunk, prompt - done)
        total += step_time_s(dep, [*decode_batch(decodes, context), Seq(n, done)],
                             VLLM)
        done, steps = done + n, steps + 1
    return total, steps


def test_a_32k_prompt_is_four_chunks_each_reading_the_keys_before_it() -> None:
    """Llama-3.1-70B fp8 on 2 × H100 with vLLM's 8,192-token budget: a 32,000-token prompt
    runs in four steps, 2.88 s against 2.84 s as one step; beside four decodes of 32,250
    tokens its chunks are 8,188 tokens and no slower (their compute hides the decodes' reads)."""
    dep = _dep("llama-3.1-70b", "h100-sxm", 2)
    own, queue = ChunkedPrefill(dep, VLLM, 8192).times_s(32000)
    summed, steps = _chunked(dep, 32000, 8192)
    assert steps == 4 and own == pytest.approx(summed, rel=1e-12) and queue == own
    whole = step_time_s(dep, [Seq(32000, 0)], VLLM)
    assert round(own, 2) == 2.88 and round(whole, 2) == 2.84
    beside, _ = ChunkedPrefill(dep, VLLM, 8192, 4, 32250).times_s(32000)
    assert beside == pytest.approx(_chunked(dep, 32000, 8188, 4, 32250)[0], rel=1e-12)
    assert own < beside < own * 1.002


def test_small_chunks_beside_long_decodes_take_the_interleaving_factor() -> None:
    """Llama-3.1-8B fp8 on one H100 with a 2,048-token budget: a 32,000-token prompt takes
    0.75 s alone, 0.87 s beside 24 decodes of 32,000 tokens (each step of 2,024 prompt tokens
    waits for their reads): the factor is the ratio of the two sums of steps. What it holds
    the queue for is that, less the decodes' steps beyond its tokens' share of them."""
    dep = _dep("llama-3.1-8b", "h100-sxm", 1)
    alone, _ = _chunked(dep, 32000, 2048)
    beside, steps = _chunked(dep, 32000, 2048 - 24, 24, 32000)
    own, queue = ChunkedPrefill(dep, VLLM, 2048, 24, 32000).times_s(32000)
    assert own == pytest.approx(beside, rel=1e-12)
    assert own / ChunkedPrefill(dep, VLLM, 2048).times_s(32000)[0] == pytest.approx(
        beside / alone, rel=1e-12)
    assert round(alone, 2) == 0.75 and round(beside, 2) == 0.87
    assert round(beside / alone, 2) == 1.16
    decode = step_time_s(dep, decode_batch(24, 32000), VLLM)
    assert queue == pytest.approx(beside - decode * (steps - 32000 / 2024), rel=1e-12)


def test_a_short_prompt_packed_with_others_holds_a_share_of_its_step() -> None:
    """A 1,000-token prompt beside 100 decodes waits one whole mixed step for its first
    token, but holds the queue for its own work and 1,000/8,092 of the decodes' step."""
    dep = _dep("llama-3.1-8b", "h100-sxm", 1)
    own, queue = ChunkedPrefill(dep, VLLM, 8192, 100, 1200).times_s(1000)
    mixed = step_time_s(dep, [*decode_batch(100, 1200), Seq(1000, 0)], VLLM)
    decode = step_time_s(dep, decode_batch(100, 1200), VLLM)
    assert own == pytest.approx(mixed, rel=1e-12)
    assert queue == pytest.approx(mixed - decode + 1000 / 8092 * decode, rel=1e-12)
    assert queue < own - decode / 2


def _lindley_late(prompts: list[tuple[float, float]], rho: float, slo_s: float,
                  n: int = 200_000) -> float:
    """The share of first tokens past ``slo_s`` in a random queue (Lindley's recursion) of
    prompts drawn from (own, queue) pairs, at load ρ."""
    rng = random.Random(11)
    mean = sum(q for _, q in prompts) / len(prompts)
    wait, late, held = 0.0, 0, 0.0
    for _ in range(n):
        wait = max(0.0, wait + held - rng.expovariate(rho / mean))
        own, held = rng.choice(prompts)
        late += wait + own > slo_s
    return late / n


@pytest.mark.parametrize(("prompts", "slo_s", "within"), [
    ([(2.0, 2.0)], 2.5, 0.03),  # one long length: the exponential tail had 12 % late
    ([(2.907, 2.907)], 3.0, 0.03),  # the 32k prompt against a 3 s SLO
    ([(t, t) for t in (random.Random(3).expovariate(2.0) for _ in range(400))], 2.0, 0.04),
    ([(t, t) for t in (0.8 * random.Random(4).lognormvariate(0.0, 0.5) for _ in range(400))],
     3.0, 0.1),  # ρ ≈ 0.74: the inner wait taken exponential is rougher
])
def test_the_prompt_queue_keeps_a_random_queues_late_share_to_the_tail(
        prompts: list[tuple[float, float]], slo_s: float, within: float) -> None:
    """At the share of time prompt_queue_load returns, a random queue of the same prompts
    has a tenth of its first tokens late: a prompt that waits waits the rest of the prefill
    under way, uniform on one length's prefill (nearly every such prompt is late when the
    headroom is short), exponential for exponential prefills."""
    rho = prompt_queue_load([(own, queue, 1) for own, queue in prompts], slo_s, 0.1)
    assert 0.0 < rho < 1.0
    assert _lindley_late(prompts, rho, slo_s) == pytest.approx(0.1, rel=within)


def test_a_32k_prompt_against_a_3_s_slo_leaves_a_replica_prefilling_a_tenth_of_the_time() -> None:
    dep = _dep("llama-3.1-70b", "h100-sxm", 2)
    own, queue = ChunkedPrefill(dep, VLLM, 8192, 4, 32250).times_s(32000)
    rho = prompt_queue_load([(own, queue, 1)], 3.0, 0.1)
    # nearly every prompt that finds another prefilling is late: ρ × (1 − headroom ÷ prefill)
    assert rho * (1 - (3.0 - own) / queue) == pytest.approx(0.1, rel=0.01)


def test_prompts_late_alone_count_however_their_slice_averages() -> None:
    """3 % of the prompts past a 2 s SLO on their own are more than a p98 spares, though
    the mean of the slice they fall in is well under it."""
    assert prompt_queue_load([(1.0, 1.0, 97), (2.5, 2.5, 3)], 2.0, 0.02) == 0.0
    assert prompt_queue_load([(1.0, 1.0, 97), (2.5, 2.5, 3)], 2.0, 0.04) > 0.0
    assert prompt_queue_load([(1.045, 1.045, 100)], 2.0, 0.02) > 0.0  # their mean


def test_length_groups_keep_every_prompt_near_its_own_length() -> None:
    load = Load(4, "lognormal:24000,0.5", "300")
    lengths = [p for p, _ in load.samples()]
    groups = length_groups(load)
    width = (max(lengths) - min(lengths)) / 128
    assert sum(n for _, n in groups) == len(lengths)
    assert sum(m * n for m, n in groups) == pytest.approx(sum(lengths), rel=1e-12)
    assert groups[-1][0] >= max(lengths) - width and groups[0][0] <= min(lengths) + width
    assert len(length_groups(Load(1, "32000", "500"))) == 1


def test_the_queue_reads_every_prompt_not_sixteen_slices() -> None:
    """Llama-3.1-8B fp8 on one H100, lognormal 24,000-token prompts against a p90 2 s TTFT:
    the longest sixteenth's mean prefill is under 2 s, but 2 % of the prompts pass it alone;
    priced at their own lengths (interpolated between knots: within 8 % of each exact
    prefill, 1.5 % on the mean) the queue allows less than the sixteen slices' means say."""
    dep = _dep("llama-3.1-8b", "h100-sxm", 1)
    load = Load(4, "lognormal:24000,0.5", "300")
    prefill = ChunkedPrefill(dep, VLLM, 8192, 11, 27400)
    priced = prompt_prefills_s(prefill, length_groups(load))
    exact = [prefill.times_s(round(m)) for m, _ in length_groups(load)]
    assert max(abs(p[0] / e[0] - 1) for p, e in zip(priced, exact)) < 0.08  # kinks: a step
    assert sum(p[0] * p[2] for p in priced) == pytest.approx(
        sum(e[0] * p[2] for p, e in zip(priced, exact)), rel=0.015)
    slices = [prefill.times_s(n) for n in
              length_quantiles([p for p, _ in load.samples()], PROMPT_QUANTILES)]
    assert max(own for own, _ in slices) < 2.0
    late_alone = sum(n for own, _, n in priced if own >= 2.0) / sum(n for *_, n in priced)
    assert 0.01 < late_alone < 0.04
    every = prompt_queue_load(priced, 2.0, 0.1) / (
        sum(q * n for _, q, n in priced) / sum(n for *_, n in priced))
    sixteen = prompt_queue_load([(own, queue, 1) for own, queue in slices], 2.0, 0.1) / (
        sum(q for _, q in slices) / len(slices))
    assert every < 0.95 * sixteen  # req/s: 0.67 against 0.73


def test_long_prompt_loads_size_the_replicas_their_simulation_needs() -> None:
    """The two long-prompt loads of scripts/bench_plan_sizing.py: lognormal 24,000-token
    prompts at 4 req/s on 2 × H100 size 3 replicas (2 before; at 2 the simulated p90 TTFT is
    2.5 s against 2 s), and Llama-3.1-70B's 32,000-token prompts at 2 req/s 56 (53 before;
    the simulation needs 58–69 across draws)."""
    from ridgeline.context_length import served_positions
    from ridgeline.memory import EngineSettings
    from ridgeline.sim.config import sim_config
    from ridgeline.sim.simulator import Simulator

    load, slo = Load(4, "lognormal:24000,0.5", "300"), Slo(2.0, 0.04)
    dep = _dep("llama-3.1-8b", "h100-sxm", 2)
    sized = size_replica(dep, VLLM, load, slo, None)
    assert sized is not None and math.ceil(4 / sized.rate_req_s) == 3
    assert sized.rate_req_s == sized.limits[2]  # the prompts' queue binds
    settings = EngineSettings(max_model_len=served_positions(dep.model, "vllm"))
    work, window = load.steady(2, sized.ttft_floor_s + 300 * sized.tpot_s)
    two = Simulator(dep, VLLM, sim_config(dep, settings)).run(
        iter(work), window_s=window)
    assert two.latency_s_at("ttft", 90) > 2.0
    long = size_replica(_dep("llama-3.1-70b", "h100-sxm", 2), VLLM,
                        Load(2, "32000", "500"), Slo(3.0, 0.06), None)
    assert long is not None and math.ceil(2 / long.rate_req_s) == 56

