"""`ridgeline simulate`'s words for an engine that fell behind its arrivals: the rates offered
and served (``overload_rates``), and the evidence its OVERLOADED and STOPPED EARLY lines give —
the backlog past the batch's filling, the running batch's growth, a burst's queue.

The readings themselves are the simulator's (sim/overload.py, the Recorder's); this module
words them for the text and --json."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from ridgeline.sim.metrics import (
    FILL_LIFETIMES,
    FLOWS_CUT,
    QUEUE_CUT,
    Recorder,
    SimResult,
)
from ridgeline.sim.overload import (
    BURST_READ,
    CAPACITY_READ,
    STOPPED_READ,
    Burst,
    backlog_floor,
    budget_bound,
    growth,
    overload_reading,
)
from ridgeline.sim.scheduler import FULL_BUDGET, FULL_KV, FULL_SEATS

# an overload whose batch no step found full (KV cache, seats, the running requests' token
# budget): what it serves is bounded by its steps' time, not its memory or seats
COMPUTE_BOUND = "compute"


class Overload(NamedTuple):
    """Where the engine fell behind its arrivals (``overload_rates``)."""

    offered_req_s: float
    served_req_s: float
    waiting: int  # when the last request arrived
    reading: str  # which reading (sim.overload.overload_reading)
    grew: str  # "queue", or "batch" where the running batch took the excess on
    saturated_req_s: float | None  # the most it serves, its batch full, where that was read
    tokens_per_request: float  # the completed requests' mean prompt + output (nan: none)
    limit: str  # what held the batch: the fill's (sim.scheduler FULL_*), or COMPUTE_BOUND
    budget_full_share: float = 0.0  # of its steps, those that ran the whole token budget
    # with requests waiting (``Recorder.budget_full_steps``) …
    budget_gain: float | None = None  # … and twice the budget's tokens a second against the
    # budget's (sim.overload.budget_gain; None: not read)

    @property
    def best_served_req_s(self) -> float:
        """The most it was read to serve: the run's rate, or the batch-full replay's where
        that is higher (235.00 beside 219.91 served over a 2,000-request run)."""
        return max(self.served_req_s, self.saturated_req_s or 0.0)

    @property
    def offered_tok_s(self) -> float:
        """Offered req/s × the mean prompt + output tokens a request: 295.08 × 96 = 28,327."""
        return self.offered_req_s * self.tokens_per_request

    @property
    def served_tok_s(self) -> float:
        """``best_served_req_s`` × the mean tokens a request: 235.00 × 96 = 22,560."""
        return self.best_served_req_s * self.tokens_per_request

    @property
    def backlog_req_s(self) -> float:
        """How fast the requests in the engine (running and waiting) grow while they arrive:
        offered − ``best_served_req_s`` (295.08 − 235.00 = 60.1 req/s; runs of 20,000 read
        (15,059 − 11,890) ÷ 50.1 s = 63 past the fill); 0 where it serves as fast (a burst)."""
        return max(0.0, self.offered_req_s - self.best_served_req_s)


def overload_rates(r: SimResult, requests: int, saturated_req_s: float | None = None,
                   budget_gain: float | None = None) -> Overload | None:
    """Offered req/s, req/s the engine served, requests still waiting when the last arrived,
    and the reading, where the engine fell behind the arrivals (``overload_reading``: a queue
    beyond the noise of the arrivals' count, or fewer leaving than arriving past the batch's
    filling, however slight the overload: llama.cpp at 1.05 req/s offered, 0.92 served; an
    offered rate past ``saturated_req_s``, the most it serves with its batch full; a burst's
    long queue); else None. A burst that ends before the batch has filled is read by its
    queue alone. A run cut short offers the requests that had arrived by its end. What grew
    is the queue where 20 or more waited when the last arrived (in a short run,
    ``backlog_floor``), or the reading is of a queue,
    else the running batch, whose steps slow as it grows. What held it: the batch's fill
    (its pool, its seats, its running requests' budget), else the token budget where most
    steps ran it whole with requests waiting and a larger one computes more a second
    (``budget_bound``, ``budget_gain`` read by the caller), else its steps' time."""
    if r.rec.stopped_early:
        requests = round(r.rec.arrivals.total)
    first, last = r.rec.arrived_s
    span = last - first
    if not (math.isfinite(span) and span > 0 and requests > 1):
        return None
    reading = overload_reading(r.rec, saturated_req_s)
    if not reading:
        return None
    waiting = r.rec.waiting_at_arrival
    grew = "queue" if waiting >= backlog_floor(r.rec.arrivals.total) or reading in (
        STOPPED_READ, QUEUE_CUT, BURST_READ) else "batch"
    # what it serves: its completions over the run, busy throughout (the requests started by
    # the last arrival, over the arrivals' span, counted the batch's first filling as service:
    # 171 req/s "taken on" at 1,000 offered, where 44 complete)
    rec = r.rec
    tokens = (rec.prompt_tokens + rec.output_tokens) / rec.completed if rec.completed \
        else math.nan
    # the budget-full share is of the steps each scheduler formed (data-parallel ranks' each)
    steps = r.rank_steps
    limit = rec.fill_reason if rec.fill_observed else FULL_BUDGET \
        if budget_bound(steps, rec.budget_full_steps, budget_gain) else COMPUTE_BOUND
    return Overload((requests - 1) / span, r.request_rate_req_s, waiting, reading, grew,
                    saturated_req_s if reading == CAPACITY_READ else None, tokens, limit,
                    rec.budget_full_steps / steps if steps else 0.0, budget_gain)


def gauges_at(r: SimResult, t: float) -> tuple[int, int]:
    """The running and waiting requests at time t, as the (thinned) time series last read
    them."""
    before = [p for p in r.rec.series.points if p[0] <= t]
    return (before[-1][1], before[-1][2]) if before else (0, 0)


def growth_evidence(r: SimResult) -> str:
    """How the requests in the engine grew over the second half of the arrivals, and the
    running batch with them, as a clause ("" where the arrivals span no time)."""
    g = growth(r.rec)
    if g is None:
        return ""
    running_from, _ = gauges_at(r, g.start_s)
    running_to, _ = gauges_at(r, g.end_s)
    return (f"over the second half of the arrivals ({g.start_s:,.1f}–{g.end_s:,.1f} s), "
            f"{g.arrived:,.0f} arrived and the requests in the engine grew by {g.grown:,.0f} "
            f"(a least-squares line), its running batch from {running_from:,} to "
            f"{running_to:,}")


def burst_line(r: SimResult, b: Burst) -> str:
    """The OVERLOADED line of a burst that outran the engine (``sim.overload.burst``)."""
    service = r.rec.mean_service_s
    cleared = min(b.cleared_s, r.duration_s)
    done = r.rec.departures.count_to(cleared) - r.rec.departures.count_to(b.at_s)
    return (f"OVERLOADED by a burst: when the request arriving at {b.at_s:,.1f} s came, "
            f"{b.waiting:,} of the {b.arrived:,.0f} arrived by then were waiting to start, and "
            f"that queue took until {cleared:,.0f} s to clear, {(cleared - b.at_s) / service:,.0f} "
            f"times a request's mean service time ({service:,.1f} s), the engine working "
            f"through it at about {done / (cleared - b.at_s):,.2f} req/s: the arrivals came faster "
            "than it serves while the burst lasted, and the latencies above are mostly that "
            "queue's wait: spread the burst out, or add replicas (`ridgeline plan` sizes them)")


SHORT_QUEUE_S = 0.05  # a mean queueing under this prints as 0.0 s: no ratio is read to it


def distinct_places(a: float, b: float, most: int = 4) -> int:
    """The decimal places, from one, at which a and b print apart (at most ``most``): 0.24
    and 0.17 s, alike at one place ("0.2 s, 1.4× the 0.2 s"), apart at two."""
    return next((d for d in range(1, most) if f"{a:,.{d}f}" != f"{b:,.{d}f}"), most)


def backlog_evidence(r: SimResult) -> str:
    """How the queue grew, as a clause: of the requests arriving past the batch's filling,
    how many had left by the last arrival, and how much longer the later ones queued than
    the earlier; "" where the backlog test did not read it (a run too short)."""
    behind = r.rec.falls_behind()
    if behind is None:
        return ""
    arrived, left, _ = behind
    start, last = r.rec.steady_s
    text = (f"{since_fill(r.rec)}, up to the last arrival at "
            f"{last:,.1f} s, {arrived:,} requests arrived and {left:,} left the engine, "
            f"{arrived - left:,} fewer")
    trend = r.rec.queue_trend(start, last)
    if trend is not None and trend[1] > trend[0]:
        early, late = trend
        places = distinct_places(late, early) if early >= SHORT_QUEUE_S else 1
        text += (f"; those arriving in the second half of that time queued a mean "
                 f"{late:,.{places}f} s"
                 + (f", {late / early:,.1f}× the {early:,.{places}f} s of those in the first"
                    if early >= SHORT_QUEUE_S else
                    f", where those in the first queued under {SHORT_QUEUE_S:g} s"))
    return text


FILL_WORDS = {FULL_KV: "KV cache full", FULL_SEATS: "every seat taken",
              FULL_BUDGET: "the running requests alone filling the step's token budget"}


def fill_clause(rec: Recorder) -> str:
    """When the batch filled, as the run saw it ("at 38.4 s (KV cache full)", the first step
    that left a request waiting for that: ``Recorder.batch_filled``), or, where it never
    did, the estimate ``Recorder.steady_s`` reads instead ("at ~246.2 s (an estimate, 3 mean
    request lifetimes after the first arrival: no step found the KV cache or the seats
    full)")."""
    start = rec.steady_s[0]
    if rec.fill_observed:
        return f"at {start:,.1f} s ({FILL_WORDS[rec.fill_reason]})"
    return (f"at ~{start:,.1f} s (an estimate, {FILL_LIFETIMES} mean request lifetimes after "
            "the first arrival: no step found the KV cache or the seats full)")


def since_fill(rec: Recorder) -> str:
    """Where the count past the batch's filling starts, as a clause: "once the batch had
    filled at 38.4 s (KV cache full)" where the run saw it fill; where no step did (neither
    its KV cache, its seats nor its token budget), "from ~16.6 s on (3 mean request lifetimes
    after the first arrival, where a fill would be: no step found its batch full)", not a
    fill that never was (Llama-3.2-1B on an L4 at 300 req/s of 32 / 64 tokens, --max-num-seqs 2048, its
    budget shared by decodes and prompts: 1,398 running at most)."""
    if rec.fill_observed:
        return f"once the batch had filled {fill_clause(rec)}"
    return (f"from ~{rec.steady_s[0]:,.1f} s on ({FILL_LIFETIMES} mean request lifetimes after "
            "the first arrival, where a fill would be: no step found its batch full)")


def fill_dict(rec: Recorder) -> dict[str, Any] | None:
    """When the batch filled, for --json: the time, how it was found ("observed", with
    what filled; "estimated", FILL_LIFETIMES mean service times after the first arrival);
    null where neither reads (the arrivals span no time, or none completed)."""
    start = rec.steady_s[0]
    if math.isnan(start):
        return None
    if rec.fill_observed:
        return {"at_s": start, "found": "observed", "by": rec.fill_reason}
    return {"at_s": start, "found": "estimated", "by": None, "lifetimes": FILL_LIFETIMES,
            "mean_service_s": rec.mean_service_s}


def _why_stopped(r: SimResult) -> str:
    """Which reading cut the run short (``Recorder.hopelessly_behind``), as a clause."""
    rec = r.rec
    if rec.stop_reading == FLOWS_CUT:
        return (f"{since_fill(rec)}, fewer than half as many "
                "requests left the engine as arrived, so the rest of the run would only "
                "lengthen the queue")
    return (f"when the last of its {round(rec.arrivals.total):,} requests arrived, "
            f"{rec.waiting_at_arrival:,} were still waiting to start, so the rest of the run "
            "would only work through that queue")
