"""Each pool of a prefill/decode split simulated on its share of the load, a request's TTFT
through both read as the percentile of a sum, and the cheapest split that holds.

A split's TTFT is the prefill pool's wait, the prompt's KV hand-off and the decode pool's
first step, drawn independently: ``chained_percentile_s`` sums them as distributions, not
percentiles (two waits each 0.2 s nine times in ten and 1 s otherwise: a p90 of 1.2 s, not
0.4 s). ``PoolRuns`` runs each pool at a replica count once and pairs the runs;
``cheapest_held`` finds, below the first size that holds, the fewest replicas at which some
split holds (Llama-3.1-70B on 2 x H100 under vLLM 0.34: 2P2D on 8 GPUs, where growth found
5P1D on 12).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial

from ridgeline.candidate import Candidate
from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile
from ridgeline.monotone import fewest_holding
from ridgeline.serving_load import Load, Slo
from ridgeline.sim.config import SimConfig
from ridgeline.sim.histogram import sorted_percentile
from ridgeline.sim.metrics import SimResult
from ridgeline.sim.request import Request
from ridgeline.sim.simulator import Simulator

Knobs = tuple[int | None, int | None]  # (max_num_seqs, max_num_batched_tokens); None: default

def handed_off(work: Iterable[Request]) -> Iterator[Request]:
    """Requests as a decode pool receives them: the prompt's KV already there but for the last
    token, which the first step runs to sample the first output token."""
    for r in work:
        r.num_computed = max(0, r.prompt_tokens - 1)
        yield r


GRID = 200  # equal-weight quantiles a latency's distribution is carried in when summed


def quantile_grid(at: Callable[[float], float]) -> list[float]:
    """A distribution as ``GRID`` equal-weight values: its quantiles at the slices' middles,
    ``at`` giving the value at a percentile."""
    return [at(100 * (k + 0.5) / GRID) for k in range(GRID)]


def _sums(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """Every sum of one draw of ``a`` and one of ``b`` (equal-weight values each), sorted."""
    return sorted(x + y for x in a for y in b)


def chained_percentile_s(parts: Sequence[Sequence[float]], percentile: float) -> float:
    """The ``percentile`` of the sum of independent latencies, each given as equal-weight
    values (``quantile_grid``), read as simulate reads a percentile (``sorted_percentile``:
    numpy's linear, as `vllm bench serve` reads its samples). Not their percentiles added:
    two waits each 0.2 s nine times in ten and 1 s otherwise have p90s summing to 0.4 s, but
    a p90 sum of 1.2 s."""
    total: Sequence[float] = sorted(parts[0])
    for part in parts[1:-1]:  # each partial sum carried back to GRID quantiles
        total = carried(total, part)
    ordered = _sums(total, parts[-1]) if len(parts) > 1 else total
    return sorted_percentile(ordered, percentile)


def carried(total: Sequence[float], part: Sequence[float]) -> list[float]:
    """The sum of ``total`` (ascending) and ``part``, equal-weight values each, carried back
    to GRID quantiles (``quantile_grid``): ``chained_percentile_s``'s partial sum."""
    return quantile_grid(partial(sorted_percentile, _sums(total, part)))


def run_pool(dep: Deployment, profile: EngineProfile, config: SimConfig,
         steady: tuple[list[Request], tuple[float, float]], handed: bool = False) -> SimResult:
    """One pool's replica simulated on its share (``Load.steady``): a decode pool's requests
    ``handed`` their prompt's KV (``handed_off``)."""
    work, window = steady
    return Simulator(dep, profile, config).run(handed_off(work) if handed else iter(work),
                                               window_s=window)


def decode_holds(decode: SimResult, slo: Slo) -> bool:
    """Whether a decode pool's run meets the TPOT SLO (and an ITL SLO, its chunks' gaps) and
    held steady."""
    tpot = decode.latency_s_at("tpot", slo.percentile)
    return (math.isnan(tpot) or tpot <= slo.tpot_s) and slo.itl_ok(
        decode.itl_s_at(slo.percentile)) and decode.rec.held_steady


Held = tuple[float, float, float, Knobs, Knobs]  # (TTFT, TPOT, ITL, each pool's knobs)


class PoolRuns:
    """Each pool's runs at a replica count, each knob setting's made once: a prefill pool's
    share depends on its own count alone, and a decode pool's on its own, so every pairing
    of x prefill and y decode replicas reads the same runs (the search below pairs each
    count with several)."""

    def __init__(self, dep: Deployment, profile: EngineProfile,
                 configs: list[tuple[Knobs, SimConfig]], load: Load, slo: Slo, c: Candidate,
                 transfers: list[float]) -> None:
        self.dep, self.profile, self.configs = dep, profile, configs
        self.load, self.slo, self.c, self.transfers = load, slo, c, transfers
        self.prefills: dict[int, list[tuple[Knobs, SimResult]]] = {}
        self.decodes: dict[int, list[tuple[Knobs, SimResult]]] = {}
        self.grids: dict[int, list[float]] = {}  # each run's TTFTs, read once
        # a prefill run's TTFTs and the hand-off summed (``carried``), and each pair's TTFT,
        # each computed once: a run is paired again as the search goes
        self.handed: dict[int, list[float]] = {}
        self.ttfts: dict[tuple[int, int], float] = {}
        self.checked: dict[tuple[int, int], list[Held]] = {}

    def prefill(self, x: int, k: int) -> tuple[Knobs, SimResult]:
        """x prefill replicas at ``configs[k]`` (the settings before it run first)."""
        runs = self.prefills.setdefault(x, [])
        while len(runs) <= k:
            knobs, config = self.configs[len(runs)]
            runs.append((knobs, self._keep(run_pool(self.dep, self.profile, config, self.load.steady(
                x, self.c.ttft_floor_s, first_token_only=True,
                percentile=self.slo.percentile)))))
        return runs[k]

    def decode(self, y: int, k: int) -> tuple[Knobs, SimResult]:
        """y decode replicas at ``configs[k]``, each request handed its prompt's KV."""
        runs = self.decodes.setdefault(y, [])
        _, mean_out = self.load.means()
        while len(runs) <= k:
            knobs, config = self.configs[len(runs)]
            runs.append((knobs, self._keep(run_pool(self.dep, self.profile, config, self.load.steady(
                y, mean_out * self.c.tpot_s, percentile=self.slo.percentile), handed=True))))
        return runs[k]

    def _keep(self, r: SimResult) -> SimResult:
        self.grids[id(r)] = quantile_grid(partial(r.latency_s_at, "ttft"))
        return r

    def held(self, x: int, y: int) -> list[Held]:
        """The pairs of pool settings that meet the SLO at xPyD: the defaults first, each
        other setting where no pair before it held ([] where none does)."""
        if (x, y) in self.checked:
            return self.checked[x, y]
        held: list[Held] = []
        for k in range(len(self.configs)):
            pairs = [(self.prefill(x, i), self.decode(y, j)) for i in range(k + 1)
                     for j in range(k + 1) if k in (i, j)]  # the new setting's pairs
            for (p_knobs, p), (d_knobs, d) in pairs:
                if not (p.rec.held_steady and decode_holds(d, self.slo)):
                    continue
                ttft = self.ttft_s(p, d)
                if ttft <= self.slo.ttft_s:
                    held.append((ttft, d.latency_s_at("tpot", self.slo.percentile),
                                 d.itl_s_at(self.slo.percentile), p_knobs, d_knobs))
            if held:
                break
        self.checked[x, y] = held
        return held

    def ttft_s(self, p: SimResult, d: SimResult) -> float:
        """The SLO's percentile of a request's TTFT through prefill run ``p`` and decode run
        ``d`` (``chained_percentile_s``, the prefill run's part of the sum carried once)."""
        pair = (id(p), id(d))
        if pair not in self.ttfts:
            head = self.handed.get(id(p))
            if head is None:
                head = self.handed[id(p)] = carried(sorted(self.grids[id(p)]), self.transfers)
            self.ttfts[pair] = sorted_percentile(_sums(head, self.grids[id(d)]),
                                                 self.slo.percentile)
        return self.ttfts[pair]

    def prefill_may_hold(self, x: int, fastest: Sequence[SimResult]) -> bool:
        """Whether x prefill replicas, steady, keep the TTFT SLO beside ``fastest`` (the
        decode runs of the most replicas a cheaper split has: no decode pool of it starts
        its first step sooner), at some setting."""
        return any(p.rec.held_steady and self.ttft_s(p, d) <= self.slo.ttft_s
                   for p in self.each(self.prefill, x) for d in fastest)

    def decode_may_hold(self, y: int, fastest: Sequence[SimResult]) -> bool:
        """Whether y decode replicas keep TPOT (and ITL) steady, and the TTFT SLO beside
        ``fastest`` (the prefill runs of the most replicas a cheaper split has), at some
        setting."""
        return any(decode_holds(d, self.slo) and self.ttft_s(p, d) <= self.slo.ttft_s
                   for d in self.each(self.decode, y) for p in fastest)

    def each(self, pool: Callable[[int, int], tuple[Knobs, SimResult]], n: int
              ) -> Iterator[SimResult]:
        """A pool's runs at ``n`` replicas, a setting at a time (lazily: the defaults settle
        most asks)."""
        for k in range(len(self.configs)):
            yield pool(n, k)[1]


def cheapest_held(runs: PoolRuns, x0: int, y0: int, x: int, y: int
                  ) -> tuple[int, int, list[Held]]:
    """Below xPyD (the first size growth found holding), the fewest replicas, from x0
    prefill and y0 decode up, at which some split holds, each total's splits all tried and
    the lowest TTFT kept: growth adds to the pool of the longer wait, and a split the other
    way may hold on fewer GPUs (Llama-3.1-70B on 2 x H100 under vLLM 0.34: 2P1D grew its
    prefill pool to 5P1D, 12 GPUs, where 2P2D holds on 8). Each pool's fewest replicas that
    may hold are bisected first (``fewest_holding``: more replicas share the rate thinner),
    against the other pool at the most replicas a cheaper split gives it; ``x, y`` kept
    where nothing cheaper holds."""
    most_x, most_y = x + y - 1 - y0, x + y - 1 - x0  # either pool's most in a cheaper split
    if most_x < x0 or most_y < y0:
        return x, y, runs.checked[x, y]
    fastest_p = list(runs.each(runs.prefill, most_x))
    fastest_d = list(runs.each(runs.decode, most_y))
    least_x = fewest_holding(partial(runs.prefill_may_hold, fastest=fastest_d), x0, most_x)
    least_y = fewest_holding(partial(runs.decode_may_hold, fastest=fastest_p), y0, most_y)
    for total in range(least_x + least_y, x + y):
        found = [(xi, total - xi, held) for xi in range(least_x, total - least_y + 1)
                 if (held := runs.held(xi, total - xi))]
        if found:
            return min(found, key=lambda f: min(h[0] for h in f[2]))
    return x, y, runs.checked[x, y]
