"""The KV pool's limit on a replica's analytic rate (pool_blocking, replica_sizing's
pool_limit_req_s): the share of arrivals a pool turns away, against a Monte Carlo of the
same sum; the rate that keeps it within the tail; and a pool-bound replica (Llama-3.1-70B
fp8 on one H100) sized near what the simulated check needs."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from ridgeline.candidate import Candidate, replica_deployment
from ridgeline.catalog import resolve_model
from ridgeline.engines import profile_for
from ridgeline.hardware import resolve_accelerator
from ridgeline.plan_checks import verify
from ridgeline.pool_blocking import (
    BLOCKED_SHARE_OF_TAIL,
    NORMAL_IN_FLIGHT,
    PoolLoad,
    blocked_share,
    pool_rate_req_s,
)
from ridgeline.replica_sizing import size_replica
from ridgeline.reports.plan import _binding
from ridgeline.serving_load import Load, Slo

VLLM = profile_for("vllm")
LOAD = Load(10, "lognormal:1000,0.8", "lognormal:250,0.8")
SLO = Slo(1.0, 0.05)


def _monte_carlo(in_flight: float, held: list[float], prompt: list[float], pool_cells: int,
                 trials: int = 40000) -> float:
    """The share turned away, drawn: a Poisson count of requests, each holding cells by
    ``held``, and an arrival's prompt by ``prompt``, past ``pool_cells``."""
    rng = random.Random(7)
    cells_held, cells_prompt = range(len(held)), range(len(prompt))
    turned = 0
    for _ in range(trials):
        n, bound, product = 0, math.exp(-in_flight), rng.random()
        while product >= bound:
            n += 1
            product *= rng.random()
        total = sum(rng.choices(cells_held, held, k=n)) if n else 0
        turned += total + rng.choices(cells_prompt, prompt)[0] > pool_cells
    return turned / trials


def _pool_load() -> PoolLoad:
    """The load as one H100's pool of Llama-3.1-70B fp8 holds it: 376 blocks of 64 tokens
    in 125 cells of 3, a 190 ms prefill and 40 ms a token."""
    return PoolLoad(LOAD.samples(), 0.19, 0.040, 64, 3)


def test_the_pools_turned_away_share_is_the_compound_poisson_sums_tail() -> None:
    pool = _pool_load()
    for in_flight in (2.0, 7.0, 10.0):
        exact = blocked_share(in_flight, pool.held, pool.prompt, 125)
        drawn = _monte_carlo(in_flight, pool.held, pool.prompt, 125)
        assert exact == pytest.approx(drawn, abs=0.006)
    assert blocked_share(2.0, pool.held, pool.prompt, 125) \
        < blocked_share(7.0, pool.held, pool.prompt, 125)


def test_past_many_requests_in_flight_the_sum_is_read_as_a_normal() -> None:
    """Either side of NORMAL_IN_FLIGHT the two readings of one sum agree (a pool of many
    short requests: 1-cell requests, about 500 of them in a pool of 525)."""
    held, prompt = [0.0, 1.0], [0.0, 1.0]
    below = blocked_share(NORMAL_IN_FLIGHT * 0.999, held, prompt, 525)
    above = blocked_share(NORMAL_IN_FLIGHT * 1.001, held, prompt, 525)
    assert 0.05 < below < 0.95
    assert above == pytest.approx(below, abs=0.02)


def test_the_pools_rate_turns_away_its_share_of_the_tail() -> None:
    pool = _pool_load()
    rate = pool_rate_req_s(pool, 125, 0.1)
    in_flight = rate * pool.lifetime_s
    at = blocked_share(in_flight, pool.held, pool.prompt, 125)
    assert at == pytest.approx(0.1 * BLOCKED_SHARE_OF_TAIL, rel=0.01)
    assert blocked_share(in_flight * 1.05, pool.held, pool.prompt, 125) > at
    assert pool_rate_req_s(pool, 125, 0.01) < rate  # a p99 SLO's tail: a lower rate
    # the docstrings' worked numbers
    assert (round(rate, 2), round(in_flight, 1)) == (0.52, 7.2)
    assert round(blocked_share(7.0, pool.held, pool.prompt, 125), 3) == 0.044


def _sized_and_simulated(load: Load, slo: Slo) -> tuple[float, list[float], int, Candidate]:
    """Llama-3.1-70B fp8 (cache fp8) on one H100 under vLLM, as bench_plan_sizing sizes and
    checks it: (rate, its limits, analytic replicas, the checked candidate)."""
    model = resolve_model("llama-3.1-70b")
    dep = replica_deployment(model, resolve_accelerator("h100-sxm"), 1, 1, "fp8", "fp8")
    sized = size_replica(dep, VLLM, load, slo, None)
    assert sized is not None
    replicas = math.ceil(load.rate_req_s / sized.rate_req_s)
    c = Candidate("h100-sxm", 1, 1, "fp8", "fp8", None, sized.batch, sized.tpot_s,
                  sized.ttft_floor_s, sized.rate_req_s, replicas, None, True, "", (1.0, 1.0))
    checked = verify(model, replace(c, rate_limits=sized.limits), load, slo, 4096)
    assert checked is not None
    return sized.rate_req_s, list(sized.limits), replicas, checked


def test_a_pool_bound_replica_is_sized_near_what_its_simulation_needs() -> None:
    """One H100 holds 13 of the load's mean requests: the batch's TPOT alone allows about
    0.94 req/s, at which the simulated pool queues prompts for tens of seconds; the pool's
    limit binds, and the count it sizes is within 15 % of the simulated one (it had been
    11 against 19)."""
    rate, limits, analytic, checked = _sized_and_simulated(LOAD, SLO)
    simulated = checked.replicas
    assert rate == limits[3] < limits[0]  # the pool binds, under the TPOT's bound
    assert (round(limits[3], 2), round(limits[0], 2)) == (0.55, 0.94)  # the worked numbers
    assert abs(math.log(analytic / simulated)) < 0.15
    # the batch's TPOT alone would have sized under two thirds of the simulated count
    assert math.ceil(LOAD.rate_req_s / limits[0]) < 2 / 3 * simulated
    # plan's text names what binds
    assert _binding(checked).startswith("; capped by the KV pool's room for arriving prompts")


def test_a_replica_whose_pool_holds_many_requests_is_not_capped_by_it() -> None:
    """Llama-3.1-8B fp8 on one H100 holds hundreds of the load's requests, their sum near
    its mean: the pool's limit is above the batch's TPOT bound, which sizes it."""
    dep = replica_deployment(resolve_model("llama-3.1-8b"), resolve_accelerator("h100-sxm"),
                             1, 1, "fp8", "fp8")
    sized = size_replica(dep, VLLM, Load(200, "lognormal:1000,0.8", "lognormal:300,0.8"),
                         Slo(1.0, 0.05), None)
    assert sized is not None
    assert sized.rate_req_s == min(sized.limits[:3]) < sized.limits[3]


def test_a_requests_weight_is_split_between_the_cells_around_it() -> None:
    """PoolLoad's distributions against the rule its docstring states, built by hand: one
    request of a 100-token prompt and 40 outputs, blocks of 16 tokens, cells of 2 blocks,
    its prompt's 7 blocks at 3.5 cells (half in cell 3, half in 4), held for its TTFT there
    and its 1 s of decode read at 3 points (two a 32-token cell its 40 outputs span, plus
    one): 106.7, 120 and 133.3 tokens, 7, 8 and 9 blocks, at 3.5, 4 and 4.5 cells, a third
    each; the same request with GUARANTEED_NO_EVICT holds its whole 9 blocks (4.5 cells)
    all its life."""
    load = PoolLoad([(100, 40)], ttft_s=0.5, tpot_s=0.025, block_tokens=16, cell_blocks=2)
    assert load.prompt == [0.0, 0.0, 0.0, 0.5, 0.5]
    life = 0.5 + 40 * 0.025
    third = 1.0 / 3
    assert load.held == pytest.approx([0, 0, 0, (0.25 + third / 2) / life,
                                       (0.25 + third / 2 + third + third / 2) / life,
                                       third / 2 / life])
    assert load.lifetime_s == pytest.approx(life)
    whole = PoolLoad([(100, 40)], 0.5, 0.025, 16, 2, reserve_whole=True)
    assert whole.prompt == whole.held == [0.0, 0.0, 0.0, 0.0, 0.5, 0.5]


def test_the_served_requests_pool_load_is_built_once_per_input() -> None:
    """replica_sizing.served_pool_load: the requests a launch serves, the same record read
    again for the same input (a candidate priced twice), its figures PoolLoad's own; a
    launch too short for any request has none."""
    from ridgeline.replica_sizing import served_pool_load

    args = (LOAD, 4096, 0.2, 0.04, 16, 3, 0, False)
    first = served_pool_load(*args)
    assert first is not None and served_pool_load(*args) is first
    served = [(p, o) for p, o in LOAD.samples() if p + o <= 4096]
    fresh = PoolLoad(served, 0.2, 0.04, 16, 3)
    assert (first.held, first.prompt, first.lifetime_s) == (
        fresh.held, fresh.prompt, fresh.lifetime_s)
    assert served_pool_load(LOAD, 1, 0.2, 0.04, 16, 3, 0, False) is None
