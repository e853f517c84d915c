"""The planner's analytic search, made quicker, answers to the last bit as before: PoolLoad
laid out once per load and block size (pool_blocking._layout) against its rule written out
request by request, blocked_share's Panjer sums against the plain recursion, and the
sizing's remembered pieces (chunked_prefills_s, queue_load, track_record.record_leaning)
against the functions they remember."""

from __future__ import annotations

import math
from operator import mul

import pytest

from ridgeline.candidate import replica_deployment
from ridgeline.catalog import resolve_model
from ridgeline.engines import bundled_twins, moe_prompt_expert_slowdown, profile_for
from ridgeline.hardware import resolve_accelerator
from ridgeline.pool_blocking import DECODE_POINTS, PoolLoad, blocked_share
from ridgeline.replica_sizing import (
    ChunkedPrefill,
    chunked_prefills_s,
    length_groups,
    prompt_prefills_s,
    prompt_queue_load,
    queue_load,
)
from ridgeline.serving_load import Load
from ridgeline.track_record import bundled_record, leaning, record_leaning

LOAD = Load(10, "lognormal:1000,0.8", "lognormal:250,0.8")


def _by_request(requests: list[tuple[int, int]], ttft_s: float, tpot_s: float,
                block_tokens: int, cell_blocks: int, overhead_blocks: int = 0,
                reserve_whole: bool = False) -> tuple[list[float], list[float], float]:
    """PoolLoad's rule, one request after another: each weight at its blocks ÷ cell_blocks
    (plus the overhead's cells), split between the two cells around it."""
    per_cell = block_tokens * cell_blocks
    fixed = overhead_blocks / cell_blocks
    longest = max((p + o for p, o in requests), default=0)
    size = math.ceil(longest / block_tokens) // cell_blocks + overhead_blocks + 3
    held, prompt = [0.0] * size, [0.0] * size
    total_s = 0.0

    def add(dist: list[float], cells: float, weight: float) -> None:
        low = int(cells)
        frac = cells - low
        dist[low] += weight - weight * frac
        dist[low + 1] += weight * frac

    for p, o in requests:
        decode_s = o * tpot_s
        life_s = ttft_s + decode_s
        total_s += life_s
        whole = -(-(p + o) // block_tokens) / cell_blocks + fixed
        start = -(-p // block_tokens) / cell_blocks + fixed
        add(prompt, whole if reserve_whole else start, 1.0)
        if reserve_whole:
            add(held, whole, life_s)
            continue
        add(held, start, ttft_s)
        points = min(DECODE_POINTS, 1 + int(2 * o / per_cell))
        for k in range(points):
            add(held, math.ceil((p + o * (k + 0.5) / points) / block_tokens) / cell_blocks
                + fixed, decode_s / points)

    def normalised(dist: list[float]) -> list[float]:
        while len(dist) > 1 and not dist[-1]:
            dist.pop()
        total = sum(dist)
        return [w / total for w in dist] if total > 0 else [1.0]

    return normalised(held), normalised(prompt), total_s / max(1, len(requests))


@pytest.mark.parametrize("geometry", [
    (0.19, 0.040, 64, 3, 0, False),  # one H100 of Llama-3.1-70B fp8: 8 decode points each
    (0.19, 0.040, 64, 206, 0, False),  # a large pool: one point each
    (0.2, 0.031, 16, 40, 0, False),  # between: 1 to 8 points
    (0.3, 0.025, 16, 7, 5, False),  # a hybrid model's state blocks beside each request
    (0.19, 0.040, 64, 3, 5, True),  # GUARANTEED_NO_EVICT: the whole request from admission
])
def test_a_pool_load_is_its_request_by_request_rule_to_the_last_bit(
        geometry: tuple[float, float, int, int, int, bool]) -> None:
    requests = LOAD.samples()
    load = PoolLoad(requests, *geometry)
    assert (load.held, load.prompt, load.lifetime_s) == _by_request(requests, *geometry)


def test_a_pool_load_of_one_length_and_of_none_follows_the_rule() -> None:
    same = [(1000, 250)] * 50
    for geometry in ((0.2, 0.04, 16, 3), (0.2, 0.04, 64, 300)):
        load = PoolLoad(same, *geometry)
        assert (load.held, load.prompt, load.lifetime_s) == _by_request(same, *geometry)
    empty = PoolLoad([], 0.2, 0.04, 16, 3)
    assert (empty.held, empty.prompt, empty.lifetime_s) == ([1.0], [1.0], 0.0)


def _panjer(in_flight: float, held: list[float], prompt: list[float], pool_cells: int
            ) -> float:
    """blocked_share's sum by the plain recursion, g(s) from g(0) on for every s."""
    m = in_flight
    g = [math.exp(-m * (1 - held[0]))]
    weighted = [j * f for j, f in enumerate(held)][1:]
    for s in range(1, pool_cells + 1):
        top = min(s, len(weighted))
        g.append(m / s * sum(map(mul, weighted, reversed(g[s - top:s]))))
    cumulative = [0.0]
    for x in g:
        cumulative.append(cumulative[-1] + x)
    fits = 0.0
    for c, w in enumerate(prompt):
        if c <= pool_cells:
            fits += w * cumulative[pool_cells - c + 1]
    return min(1.0, max(0.0, 1 - fits))


def test_the_blocked_share_is_the_plain_recursions_to_the_last_bit() -> None:
    load = PoolLoad(LOAD.samples(), 0.19, 0.040, 64, 3)
    for in_flight in (0.0, 0.5, 3.0, 7.2, 40.0):
        assert blocked_share(in_flight, load.held, load.prompt, 125) \
            == _panjer(in_flight, load.held, load.prompt, 125)


def test_the_sizings_remembered_prefills_and_queue_are_the_functions_own() -> None:
    dep = replica_deployment(resolve_model("llama-3.1-8b"), resolve_accelerator("h100-sxm"),
                             1, 1, "fp8", "fp8")
    vllm = profile_for("vllm")
    groups = length_groups(LOAD)
    remembered = chunked_prefills_s(dep, vllm, 8192, 24, 1125, groups)
    direct = prompt_prefills_s(ChunkedPrefill(dep, vllm, 8192, 24, 1125), groups)
    assert remembered == tuple(direct)
    assert chunked_prefills_s(dep, vllm, 8192, 24, 1125, groups) is remembered
    assert chunked_prefills_s(dep, vllm, 2048, 24, 1125, groups) != remembered
    assert queue_load(remembered, 1.0, 0.1) == prompt_queue_load(direct, 1.0, 0.1) > 0


def test_the_remembered_leaning_is_the_records_own() -> None:
    """record_leaning against track_record.leaning over the engines the rule names: every
    twin of the profile, for a MoE's prompt rows only those whose routed experts are priced
    as its engine's."""
    vllm = profile_for("vllm")
    twins = frozenset(bundled_twins(vllm))
    own = moe_prompt_expert_slowdown(vllm.engine)
    priced_alike = frozenset(e for e in twins if moe_prompt_expert_slowdown(e) == own)
    assert priced_alike < twins  # the prompt rows of a MoE read fewer engines
    for card, phase, moe in (("h100-sxm", "decode", False), ("b300", "decode", True),
                             ("b200", "prefill", True), ("mi300x", "prefill", False)):
        engines = priced_alike if phase == "prefill" and moe else twins
        assert record_leaning(vllm, card, phase, moe) \
            == leaning(bundled_record(), card, engines, phase, moe)
