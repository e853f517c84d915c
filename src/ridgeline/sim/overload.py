"""Whether an open-loop run outran its engine, read beyond its own counts (``Recorder.overloaded``).

The recorder's readings (a queue beyond the noise of the arrivals' count; fewer leaving than
arriving past the batch's filling, by 5 % and more) miss two overloads:
- a small, sustained one in a run too short to show it: vLLM's batch takes on the excess
  until its pool is full, each step slower as it grows. Llama-3.1-8B on one H100 offered
  46 req/s of 512-token prompts and 128-token answers (44.4 served by runs of 60,000, whose
  queue grows without end) grows its batch over a 2,000-request run, but so may the same
  engine offered 40 req/s over 1,000 requests (by 140 of the 527 arriving over the latter
  half of the arrivals, near-capacity batches swinging widely); only the rate it serves at
  most tells them apart. That rate is read from a replay of the run's own
  requests sent at once (``saturated_req_s``), where the requests in the engine grew beyond
  noise (``growth``);
- a burst the engine works through long after it ended, later arrivals finding no queue: 2,000
  requests in a second to 8 seats, 50 more at 5,000-6,000 s, the queue cleared by 1,100 s
  (``burst``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from itertools import islice

from ridgeline.cost import Seq, rank_shape
from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile
from ridgeline.sim.config import SimConfig
from ridgeline.sim.histogram import Histogram, bin_top
from ridgeline.sim.metrics import (
    FLOWS_CUT,
    OVERLOAD_BACKLOG,
    OVERLOAD_DEVIATIONS,
    QUEUE_CUT,
    Recorder,
    beyond_noise,
)
from ridgeline.sim.pipeline import run_replica
from ridgeline.sim.request import Request
from ridgeline.sim.timer import step_timer

# the readings (``overload_reading``), besides the recorder's queue and flows: a run cut
# short; arrivals past what the engine serves with its batch full; a burst's long queue
STOPPED_READ = "stopped_early"
CAPACITY_READ = "capacity"
BURST_READ = "burst"
GROWTH_SAMPLES = 40  # times at which the requests in the engine are read for their growth
SATURATION_REQUESTS = 4000  # the replay's requests: the run's cycled, or its first, to this
SATURATION_SLACK = 0.03  # an offered rate past the batch-full one by more outpaces it (the
# replay's filling and draining read it 1.4 % and 1.2 % under what long runs offered more
# serve, Llama-3.1-8B on one H100 with 512 / 128 and 1,000 / 300 tokens)
# a burst outran the engine: its queue held this share of the requests come since the queue
# was last empty (they came at least twice as fast as the engine served them), and took this
# many mean service times to clear
BURST_SHARE = 0.5
BURST_LIFETIMES = 10
# a short run backed up where this many Poisson deviations of its arrivals waited as the
# last came (``backing_up``): a gate to the batch-full replay, not the verdict; its arrivals
# outpaced the engine only past ``outpaced``'s OVERLOAD_DEVIATIONS (a healthy run's offered
# rate reads 2.4 times its true one over 20 arrivals about once in 100,000 draws)
GATE_DEVIATIONS = 2.0
# the token budget held an overload back (``budget_bound``): at least this share of its steps
# ran the whole budget with requests waiting (``Recorder.budget_full_steps``), and a step of
# twice the budget computes at least BUDGET_GAIN times the tokens a second (``budget_gain``):
# a larger budget serves more, where a compute-bound step only lengthens with it (Llama-3.1-8B
# on one H100: 10 tokens a step 2.0×, 8,192 about 1.0×)
BUDGET_FULL_SHARE = 0.5
BUDGET_GAIN = 1.25


@dataclass(frozen=True)
class Growth:
    """The requests in the engine (arrived, not yet left: running or waiting) over start_s to
    end_s: how many arrived, and how many more were in it at the end, by a least-squares
    line."""

    start_s: float
    end_s: float
    arrived: float
    grown: float


@dataclass(frozen=True)
class Burst:
    """The longest queue beyond the running batch's room that an arrival joined: at at_s,
    ``waiting`` to start of the ``arrived`` come by then; empty again at cleared_s."""

    at_s: float
    waiting: int
    arrived: float
    cleared_s: float


def least_squares_slope(xs: list[float], ys: list[float]) -> float:
    """Σ(x − x̄)(y − ȳ) ÷ Σ(x − x̄)², the slope of the least-squares line (0: one x)."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0


def growth(rec: Recorder) -> Growth | None:
    """How the requests in the engine grew over the latter half of the arrivals, fitted by
    least squares at GROWTH_SAMPLES + 1 times (less noisy than its two ends); None where the
    arrivals span no time. Llama-3.1-8B on one H100 at 46 req/s, 512 / 128 tokens, 2,000
    requests, seed 2: 163 more of the 1,012 arriving over 21.6-43.1 s."""
    first, last = rec.arrived_s
    if not first < last:
        return None
    start = (first + last) / 2
    times = [start + (last - start) * i / GROWTH_SAMPLES for i in range(GROWTH_SAMPLES + 1)]
    held = [rec.arrivals.count_to(t) - rec.departures.count_to(t) for t in times]
    arrived = rec.arrivals.count_to(last) - rec.arrivals.count_to(start)
    return Growth(start, last, arrived, least_squares_slope(times, held) * (last - start))


def grows(rec: Recorder) -> Growth | None:
    """``growth`` where it is beyond the Poisson noise of the count that arrived in it
    (OVERLOAD_DEVIATIONS deviations, and at least OVERLOAD_BACKLOG): of 1,012, 80."""
    g = growth(rec)
    if g is None or g.grown < max(OVERLOAD_BACKLOG, OVERLOAD_DEVIATIONS * math.sqrt(g.arrived)):
        return None
    return g


def backlog_floor(arrived: float, deviations: float = OVERLOAD_DEVIATIONS) -> float:
    """The fewest requests that read as a backlog of ``arrived``: OVERLOAD_BACKLOG, or in a
    run too short for that many (under 64 arrivals) ``deviations`` Poisson deviations of the
    count, as many as the noise of so few arrivals leaves beyond doubt: of 30, 13.7. Without
    it a run of ~30 requests could never be called overloaded, however far behind (30
    requests of 50,000 tokens at 1 req/s to one H100, which serves 0.32)."""
    return min(OVERLOAD_BACKLOG, deviations * math.sqrt(max(arrived, 0.0)))


def backing_up(rec: Recorder) -> bool:
    """Whether requests backed up in the engine: they grew beyond noise over the latter half
    of the arrivals (``grows``), or OVERLOAD_BACKLOG were waiting to start when the last came
    (its batch full: 5,000 requests at 48 req/s, seed 5, the batch at its pool's edge and the
    queue swinging, grew by 40 of the 2,442 arriving over that half, within noise, and left
    194 waiting); in a short run, ``backlog_floor`` at GATE_DEVIATIONS waiting (a gate to
    the batch-full rate's reading, whose own bar, ``outpaced``'s unserved count, is the
    stricter: 20 requests at 1 req/s of 50,000 tokens, 11 waiting of 20, 8.9 the gate)."""
    return rec.waiting_at_arrival >= backlog_floor(rec.arrivals.total, GATE_DEVIATIONS) \
        or grows(rec) is not None


def offered_req_s(rec: Recorder) -> float:
    """Requests per second over the arrivals' span (nan: none)."""
    first, last = rec.arrived_s
    return (rec.arrivals.total - 1) / (last - first) if last > first else math.nan


def outpaced(rec: Recorder, saturated: float) -> bool:
    """Whether the arrivals came faster than the engine serves with its batch full
    (``saturated`` req/s, ``saturated_req_s``) by more than SATURATION_SLACK, enough to leave
    OVERLOAD_BACKLOG unserved over their span (a short run's ``backlog_floor``), while
    requests backed up (``backing_up``). The 46 req/s run, 46.36 offered: 43.46 served at
    most. 30 requests of 50,000 tokens at 1 req/s: 0.33 at most, 19.4 unserved over 29 s."""
    first, last = rec.arrived_s
    offered = offered_req_s(rec)
    return saturated > 0 and offered > (1 + SATURATION_SLACK) * saturated \
        and (offered - saturated) * (last - first) >= backlog_floor(rec.arrivals.total) \
        and backing_up(rec)


def burst(rec: Recorder) -> Burst | None:
    """The longest queue beyond the running batch's room (``Recorder.queued``), where it was
    beyond the noise of the arrivals' count by then (``beyond_noise``), held BURST_SHARE of
    the requests come since the queue was last empty (a queue that wanders near capacity
    builds slowly: llama.cpp's 4 slots offered 0.92 req/s, what they serve, reach 45 to 105
    waiting, 232 to 1,761 come since none did), and took more than BURST_LIFETIMES mean service
    times to clear: the arrivals outran the engine while they came so fast, however light the
    rest of the run. 2,000 requests in the first second to 8 seats of Llama-3.1-8B on one
    H100, 50 more over 5,000-6,000 s: 1,992 waiting at 1.0 s, cleared at 1,096 s, 249 service
    times of 4.4 s; else None."""
    excess, waiting, at_s, arrived, since_empty = rec.peak_queue
    if not (beyond_noise(excess, arrived) and waiting >= BURST_SHARE * since_empty):
        return None
    cleared = rec.peak_cleared_s if not math.isnan(rec.peak_cleared_s) else math.inf
    if not cleared - at_s > BURST_LIFETIMES * rec.mean_service_s:  # (NaN compares False)
        return None
    return Burst(at_s, waiting, arrived, cleared)


def overload_reading(rec: Recorder, saturated: float | None = None) -> str:
    """Which reading calls the run overloaded (simulate's OVERLOADED), "" where none does:
    STOPPED_READ (cut short, ``Recorder.hopelessly_behind``), the recorder's queue
    (QUEUE_CUT) or flows past the fill (FLOWS_CUT) (``Recorder.overloaded``), CAPACITY_READ
    (``outpaced``, where the batch-full rate was read) or BURST_READ (``burst``). Never a
    closed loop, nor arrivals spanning no time."""
    first, last = rec.arrived_s
    if rec.closed_loop or not first < last:
        return ""
    if rec.overloaded():
        if rec.stopped_early:
            return STOPPED_READ
        return QUEUE_CUT if beyond_noise(rec.waiting_at_arrival, rec.arrivals.total) \
            else FLOWS_CUT
    if saturated is not None and outpaced(rec, saturated):
        return CAPACITY_READ
    return BURST_READ if burst(rec) is not None else ""


def budget_gain(dep: Deployment, profile: EngineProfile, budget_tokens: int) -> float:
    """How many times the prompt tokens a second a step of twice the token budget computes
    against a step of the budget: 2·t(B) ÷ t(2B), one chunk from an empty context, on the
    simulator's step timer. Near 2 where a step of B tokens is bound by reading the weights
    (Llama-3.1-8B on one H100, B = 10: twice the tokens in about the same time), near 1 where
    it is compute-bound (B = 8,192). Under data parallelism, of one rank's step at its own
    budget (``rank_budget_tokens``: SGLang's the server's over the ranks): a dense model's
    rank alone, an engine of its own (sim/independent_ranks.py); a MoE's ranks each running
    such a chunk together, the experts on every rank's tokens (sim/data_parallel.py), as the
    ranks of an engine its budget holds back all fill theirs (Qwen3-30B-A3B on two H100s,
    DP2 with expert parallelism, B = 512: 1.15, where one rank's chunk beside idle ones
    reads 1.35)."""
    from ridgeline.data_parallel import independent_ranks, rank_budget_tokens

    ranks = dep.data_parallel_size
    budget_tokens = rank_budget_tokens(dep.engine, budget_tokens, ranks)
    if independent_ranks(dep):
        dep, ranks = replace(dep, data_parallel_size=1), 1
    timer = step_timer(dep, profile)

    def step_s(tokens: int) -> float:
        shape = rank_shape(timer.windows, [], [Seq(tokens, 0)])
        return timer.time_s(shape if ranks == 1 else shape._replace(
            all_tokens=ranks * tokens, any_rank_prompt=True))

    one, two = step_s(budget_tokens), step_s(2 * budget_tokens)
    return 2 * one / two if two > 0 else 1.0


def budget_bound(steps: int, budget_full_steps: int, gain: float | None) -> bool:
    """Whether the token budget held the engine back: BUDGET_FULL_SHARE of its ``steps`` ran
    it whole with requests waiting, and twice the budget computes BUDGET_GAIN times the tokens
    a second (``budget_gain``; None: not read)."""
    return gain is not None and steps > 0 and budget_full_steps >= BUDGET_FULL_SHARE * steps \
        and gain >= BUDGET_GAIN


def saturated_req_s(dep: Deployment, profile: EngineProfile, config: SimConfig,
                    requests: Iterable[Request], version: str | None = None) -> float:
    """The requests per second the engine serves of these requests' lengths with its batch as
    full as its pool and seats allow: SATURATION_REQUESTS of them (cycled where fewer) sent at
    t = 0, read at its best (``best_rate``). Llama-3.1-8B on one H100, vLLM defaults: 43.7
    req/s of 512 / 128 tokens, where 20,000 requests offered 48 serve 44.2 over the second
    half of their arrivals, and 16.6 of 1,000 / 300."""
    lengths = [(r.prompt_tokens, r.output_tokens, r.prefix_group, r.prefix_tokens)
               for r in islice(requests, SATURATION_REQUESTS)]  # the replay's; no more
    if not lengths:
        return 0.0
    replay = [Request(i, 0.0, *lengths[i % len(lengths)]) for i in range(SATURATION_REQUESTS)]
    result = run_replica(dep, profile, config, replay, version)
    return best_rate(result.rec.departures, result.rec.longest_wait_s)


def best_rate(departures: Histogram, started_s: float) -> float:
    """The most requests finished per second since t = 0, read at the top of each bin of
    ``departures`` from ``started_s`` (the last request's start) on: at the burst's end where
    its last batch finishes together (every length alike), earlier where a few long requests
    finish alone, each step light, which the end would read as slow (log-normal lengths:
    several per cent under what open-loop runs serve)."""
    seen, best = 0.0, 0.0
    for index in sorted(departures.counts):
        seen += departures.counts[index]
        top = bin_top(index)
        if top >= started_s:
            best = max(best, seen / top)
    return best
