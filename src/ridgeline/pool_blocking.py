"""How often a replica's KV pool turns an arriving prompt away, and the rate that keeps it
rare enough for the TTFT SLO (``pool_rate_req_s``): the planner's fourth limit on a replica's
analytic rate, the one that binds where the pool holds few of the load's requests.

vLLM admits a waiting prompt first come, first served when the pool has its blocks, and a
running request grows a block at a time as it decodes (sim/scheduler.py). With the requests
in flight arriving at random and each holding its prompt and the tokens it has decoded so
far, the tokens held are a compound Poisson sum (M/G/∞, the pool's own waits left out): N
requests, Poisson with mean λ·E[T] (T a request's lifetime), each one of the load's
requests picked in proportion to its lifetime at a uniform point of it. An arrival sees
that sum (Poisson arrivals see time averages) and waits when its prompt does not fit
beside it; such a wait lasts until a request leaves, seconds past any TTFT SLO, and holds
every prompt behind it (``BLOCKED_SHARE_OF_TAIL``).

The sum is computed on POOL_CELLS cells of the pool by Panjer's recursion (exact for the
cells), or as a normal past NORMAL_IN_FLIGHT requests in flight (where Panjer's first term
underflows and the sum is as normal as it gets).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from operator import mul
from statistics import NormalDist

POOL_CELLS = 128  # cells of the pool the held blocks are counted in
DECODE_POINTS = 8  # points of a request's decode its held tokens are read at
NORMAL_IN_FLIGHT = 500.0  # mean requests in flight past which the sum is taken as normal
# The share of the SLO's tail an arrival the pool turns away may take: each such wait holds
# the prompts behind it too, and the prompt queue's own lateness, the refused requests and
# preemptions share the tail. Calibrated on the three pool-bound shapes of
# scripts/bench_plan_sizing.py (Llama-3.1-70B fp8 on one H100 under vLLM): each held in
# simulation where 4.0–6.1 % of arrivals were turned away, and missed at 5.5–11 %, a p90
# SLO's tail being 10 %.
BLOCKED_SHARE_OF_TAIL = 0.5


class PoolLoad:
    """The load as the pool holds it, in cells of ``cell_blocks`` blocks of ``block_tokens``
    tokens: ``held``, the cells one request in flight holds (each of ``requests`` (prompt,
    output) weighted by its lifetime, ``ttft_s`` then output × ``tpot_s``, its tokens read at
    DECODE_POINTS points of its decode), ``prompt``, the cells an arrival's prompt asks for,
    and ``lifetime_s``, a request's mean lifetime. ``reserve_whole``: TensorRT-LLM's
    GUARANTEED_NO_EVICT, which holds a request's whole output's blocks from its admission.
    Each request also holds ``overhead_blocks`` (a hybrid model's state). Distributions are
    lists of probabilities by cell, a value between two cells split between them by its
    distance (the mean kept)."""

    def __init__(self, requests: Sequence[tuple[int, int]], ttft_s: float, tpot_s: float,
                 block_tokens: int, cell_blocks: int, overhead_blocks: int = 0,
                 reserve_whole: bool = False) -> None:
        layout = _layout(tuple(requests), block_tokens)
        per_cell = block_tokens * cell_blocks  # tokens a cell holds (in whole blocks)
        fixed = overhead_blocks / cell_blocks
        size = math.ceil(layout.longest / block_tokens) // cell_blocks + overhead_blocks + 3
        held, prompt = [0.0] * size, [0.0] * size
        # a request's blocks b at b ÷ cell_blocks + fixed cells, each weight w split between
        # the two cells around its place, w − w·frac below and w·frac above; by block count,
        # for every block a request reaches, the lower cell, the fraction past it and a
        # prompt's split (each request's additions in its order: the sums to the last bit)
        cells = [b / cell_blocks + fixed for b in range(layout.top_block + 1)]
        low_of = [int(c) for c in cells]
        frac_of = [c - low for c, low in zip(cells, low_of)]
        prompt_low = [1.0 - 1.0 * f for f in frac_of]
        prompt_high = [1.0 * f for f in frac_of]
        total_s = 0.0
        if reserve_whole:
            for b, o in zip(layout.whole_blocks, layout.outputs):
                low = low_of[b]
                prompt[low] += prompt_low[b]
                prompt[low + 1] += prompt_high[b]
                life_s = ttft_s + o * tpot_s
                total_s += life_s
                frac = frac_of[b]
                held[low] += life_s - life_s * frac
                held[low + 1] += life_s * frac
        else:
            # the prompt's hold: ttft_s at its blocks, split as a prompt's is
            ttft_low = [ttft_s - ttft_s * f for f in frac_of]
            ttft_high = [ttft_s * f for f in frac_of]
            # its decode read at points across it, two a cell it spans (DECODE_POINTS at most):
            # one each where no output spans half a cell
            single = 2 * layout.longest_output < per_cell
            starts = layout.start_blocks
            reads = [d for d, in layout.decode_blocks(1)] if single else starts
            most = 1 if single else min(DECODE_POINTS, 1 + int(2 * layout.longest_output
                                                                / per_cell))
            by_points = [layout.decode_blocks(n) for n in range(1, most + 1)]
            for r, (b, o) in enumerate(zip(starts, layout.outputs)):
                low = low_of[b]
                prompt[low] += prompt_low[b]
                prompt[low + 1] += prompt_high[b]
                held[low] += ttft_low[b]
                held[low + 1] += ttft_high[b]
                decode_s = o * tpot_s
                total_s += ttft_s + decode_s
                if single:
                    b = reads[r]
                    low = low_of[b]
                    frac = frac_of[b]
                    held[low] += decode_s - decode_s * frac
                    held[low + 1] += decode_s * frac
                    continue
                points = min(DECODE_POINTS, 1 + int(2 * o / per_cell))
                weight = decode_s / points
                for b in by_points[points - 1][r]:
                    low = low_of[b]
                    frac = frac_of[b]
                    held[low] += weight - weight * frac
                    held[low + 1] += weight * frac
        self.held = _normalised(held)
        self.prompt = _normalised(prompt)
        self.lifetime_s = total_s / max(1, len(layout.outputs))


class _Layout:
    """What ``PoolLoad`` reads of its requests whatever the pool's cells and the times, in
    blocks of ``block_tokens``: each request's prompt and whole length in blocks, its output,
    and, for a decode read at P points, the blocks each point reaches; the same load's
    requests are laid out once for every candidate pool (``_layout``)."""

    def __init__(self, requests: tuple[tuple[int, int], ...], block_tokens: int) -> None:
        self.requests, self.block_tokens = requests, block_tokens
        self.start_blocks = [-(-p // block_tokens) for p, _ in requests]
        self.whole_blocks = [-(-(p + o) // block_tokens) for p, o in requests]
        self.outputs = [o for _, o in requests]
        self.longest = max((p + o for p, o in requests), default=0)
        self.longest_output = max(self.outputs, default=0)
        self.top_block = max(self.whole_blocks, default=0)
        self._decode: dict[int, list[tuple[int, ...]]] = {}

    def decode_blocks(self, points: int) -> list[tuple[int, ...]]:
        """Each request's blocks at ``points`` points of its decode, point k at
        prompt + output × (k + ½) ÷ points tokens."""
        known = self._decode.get(points)
        if known is None:
            ceil, tokens = math.ceil, self.block_tokens
            known = self._decode[points] = [
                tuple(ceil((p + o * (k + 0.5) / points) / tokens) for k in range(points))
                for p, o in self.requests]
        return known


@lru_cache(maxsize=8)
def _layout(requests: tuple[tuple[int, int], ...], block_tokens: int) -> _Layout:
    """The requests' ``_Layout`` in blocks of ``block_tokens``, once per load and block size."""
    return _Layout(requests, block_tokens)


def _normalised(dist: list[float]) -> list[float]:
    """``dist`` summing to 1, its empty cells past the last dropped."""
    while len(dist) > 1 and not dist[-1]:
        dist.pop()
    total = sum(dist)
    return [w / total for w in dist] if total > 0 else [1.0]


def _moments(dist: Sequence[float]) -> tuple[float, float]:
    """The mean and the mean square of a distribution by cell."""
    return (sum(i * w for i, w in enumerate(dist)),
            sum(i * i * w for i, w in enumerate(dist)))


def blocked_share(in_flight: float, held: Sequence[float], prompt: Sequence[float],
                  pool_cells: int) -> float:
    """The share of arrivals whose prompt (cells by ``prompt``) does not fit in a pool of
    ``pool_cells`` cells beside the requests in flight, Poisson with mean ``in_flight``, each
    holding cells by ``held``: 1 − Σ_c prompt(c)·P(S ≤ pool − c), S's law by Panjer's
    recursion for a compound Poisson sum, g(0) = e^(−m(1 − f(0))),
    g(s) = (m ÷ s)·Σ_j j·f(j)·g(s − j); normal past NORMAL_IN_FLIGHT requests. One H100
    holding 376 blocks of Llama-3.1-70B fp8 at 64 tokens, requests of a lognormal 1,000
    and 250 tokens held 190 ms for the prompt and 40 ms a token: 7 in flight turn 4.4 % of
    the arrivals away (125 cells of 3 blocks)."""
    m = in_flight
    if m * (1 - held[0]) > NORMAL_IN_FLIGHT:
        held_mean, held_square = _moments(held)
        prompt_mean, prompt_square = _moments(prompt)
        variance = m * held_square + prompt_square - prompt_mean ** 2
        room = pool_cells - m * held_mean - prompt_mean
        return 1 - NormalDist().cdf(room / math.sqrt(max(variance, 1e-12)))
    g = [math.exp(-m * (1 - held[0]))]
    if m == 0:  # nothing in flight: S is 0 (each term below m ÷ s × a sum, 0)
        g += [0.0] * pool_cells
    weighted = [j * f for j, f in enumerate(held)][1:]  # j·f(j), j = 1 on
    back = g[::-1]  # g(s − 1), g(s − 2), …, g(0): g read backwards
    for s in range(len(g), pool_cells + 1):
        # Σ_{j=1..top} j·f(j)·g(s − j), top = min(s, len(weighted)): the products end with
        # the shorter of the two
        x = m / s * sum(map(mul, weighted, back))
        g.append(x)
        back.insert(0, x)
    fits, cumulative = 0.0, [0.0] * (pool_cells + 2)
    for s, x in enumerate(g):
        cumulative[s + 1] = cumulative[s] + x  # P(S ≤ s) = cumulative[s + 1]
    for c, w in enumerate(prompt):
        if c <= pool_cells:
            fits += w * cumulative[pool_cells - c + 1]
    return min(1.0, max(0.0, 1 - fits))


def pool_rate_req_s(pool_load: PoolLoad, pool_cells: int, tail: float) -> float:
    """The highest arrival rate at which no more than ``tail`` × BLOCKED_SHARE_OF_TAIL of the
    arrivals find the pool of ``pool_cells`` cells too full for their prompt
    (``blocked_share``): the requests in flight m that allow it, by bisection (the share
    rises with m), over a request's mean lifetime (Little's law). Llama-3.1-70B fp8 on one
    H100 (376 blocks of 64 tokens), lognormal 1,000 / 250-token requests at a 190 ms prefill
    and a 40 ms TPOT, p90: 0.52 req/s, 7.2 requests in flight where the pool holds 13 of the
    mean."""
    target = tail * BLOCKED_SHARE_OF_TAIL
    held, prompt = pool_load.held, pool_load.prompt

    def blocked(m: float) -> float:
        return blocked_share(m, held, prompt, pool_cells)

    if blocked(0.0) > target:  # prompts that do not fit an empty pool (refused at launch)
        return 0.0
    held_mean = max(_moments(held)[0], 1e-9)
    hi = max(1.0, pool_cells / held_mean)  # the mean in flight fills the pool
    while blocked(hi) <= target:
        hi *= 2
        if hi > 1e7:
            return math.inf
    lo = 0.0
    while hi - lo > 5e-3 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if blocked(mid) <= target else (lo, mid)
    return lo / pool_load.lifetime_s if pool_load.lifetime_s > 0 else math.inf
