"""One run of the simulator: the requests still to come, its recorder, and when it stops.

Shared by the step loop (``Simulator.run``) and the pipeline's event loop
(``PipelineSimulator.run``): an open loop's requests arrive at their times, a closed loop's
one as each finishes; after every step the run asks whether it is over — past the step cap
(an error naming the served and offered rates) or, every CHECK_STEPS steps of an open loop
that may stop early, hopelessly behind.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ridgeline.errors import InputError
from ridgeline.sim.metrics import OVERLOAD_SLACK, Recorder
from ridgeline.sim.request import Request

if TYPE_CHECKING:
    from ridgeline.sim.data_parallel import DataParallelSimulator
    from ridgeline.sim.independent_ranks import IndependentRanksSimulator
    from ridgeline.sim.simulator import Simulator

CHECK_STEPS = 50_000  # how often a run that may stop early asks whether it is hopelessly behind
# a run of known length whose steps so far, per request, put the whole past this many times
# the step cap is refused then, not minutes later at the cap: a seeded workload's draws and
# arrivals are alike from first to last, so its first thousands tell its steps a request
# (Llama-3.1-8B on an H100 at 2 req/s of 512/128 tokens: 54 over the first 1,845, 53.8 over
# a whole run of 100,000). Over nine loads on it (40 req/s, 4,000-token outputs at 0.2 req/s,
# lognormal lengths of sigma 1.5 and 2, zipf outputs, gamma arrivals of burstiness 0.1, prefix
# groups, closed loops of 1 and 16), every projection read 0.84-1.03 of the steps the whole
# run took (2026-12-05), heavy-tailed outputs up to 1.67 of it (a rare long output drawn early
# counted once: projected_steps): twice leaves room for what those did not try
PROJECTION_MARGIN = 2.0
MIN_PROJECTION_REQUESTS = 1_000  # done before a projection is read …
MIN_PROJECTION_SHARE = 0.9  # … and this share of those come: the batch's fill behind it
SUGGESTED_SHARE = 0.8  # the share of the cap a refusal's suggested --num-requests projects to


@dataclass(frozen=True)
class CountedRequests:
    """Requests whose number is known before the first is drawn (a seeded workload's), so a
    run can project its steps from its first ones (``Run.over_steps``); iterated afresh each
    time, as the workload is (pipeline lanes each draw their share, and project nothing). A
    trace's times are its own, its first requests no sample of the rest: it is passed bare."""

    requests: Iterable[Request]
    total: int

    def __iter__(self) -> CountedDraws:
        return CountedDraws(iter(self.requests), self.total)


class CountedDraws(Iterator[Request]):
    """One pass over ``CountedRequests``: its requests, how many there are in all, and the
    longest output drawn so far (``projected_steps`` counts it once, not per request)."""

    def __init__(self, requests: Iterator[Request], total: int) -> None:
        self.requests = requests
        self.total = total
        self.longest_output = 0

    def __next__(self) -> Request:
        r = next(self.requests)
        self.longest_output = max(self.longest_output, r.output_tokens)
        return r


class Run:
    """One run's requests and records, for the step loop (``Simulator.run``) and the
    pipeline's event loop alike: its recorder; the requests still to come, an open loop's at
    their arrival times (``arrive_due``), a closed loop's one as each finishes (seats past the
    workload's requests stay empty); the simulated time spent idle; the after-step hook; and
    whether the run stops here (``over_steps``). ``max_in_flight``: an open loop capped, as
    vllm bench serve caps --request-rate with --max-concurrency: a request whose time has come
    while that many are in flight waits for one to leave, client-side, and is sent then, its
    TTFT timed from the send (the benchmark's clock starts inside the semaphore)."""

    def __init__(self, sim: Simulator | DataParallelSimulator | IndependentRanksSimulator,
                 workload: Iterator[Request],
                 closed_loop: int, rec: Recorder, after_step: Callable[[Simulator], None] | None,
                 stop_when_behind: bool, max_in_flight: int = 0) -> None:
        self.sim = sim
        self.rec = rec
        self.closed_loop = closed_loop
        self.after_step = after_step
        self.stop_when_behind = stop_when_behind
        self.next_check = sim.steps + CHECK_STEPS  # the step count at which to ask
        # ``over_steps`` next whether the run is hopelessly behind
        self.draws = workload if isinstance(workload, CountedDraws) else None
        self.total = self.draws.total if self.draws is not None else 0
        self.next_projection = sim.steps + CHECK_STEPS  # … and project the whole run's steps
        self.idle_s = 0.0  # simulated time with nothing to run
        self.source = iter(workload)
        self.pending: Request | None = None  # an open loop's next arrival
        # async scheduling (``Simulator.lagged``): requests come while the engine was busy,
        # held for the batch after next (``arrive_due``); off while a closed loop's first
        # requests are sent, all before the first step
        self.lag = False
        self.held: list[Request] = []
        self.max_in_flight = max_in_flight
        self.in_flight = 0  # sent and not yet finished or refused (a capped open loop's count)
        self.backlog: deque[tuple[Request, float]] = deque()  # come (when), waiting for a
        # seat, client-side
        rec.client.cap = max_in_flight
        if closed_loop:
            for _ in range(closed_loop):
                if not self.send_next():
                    break
        else:
            self.pending = next(self.source, None)
        self.lag = sim.lagged

    @property
    def next_arrival_s(self) -> float:
        """When the batch may next change for an arrival: now while one is held for the next
        step's end (a run of decode steps stops after one), else the next arrival."""
        if self.held:
            return self.sim.now_s
        return self.pending.arrival_s if self.pending is not None else math.inf

    def arrive_due(self) -> None:
        """An open loop's requests whose arrival time has come, in order. Under async
        scheduling (``lag``) on a busy engine the batch about to run was formed as the last
        step began: a request that came during that step is held and joins at the next
        step's end, one step later than the synchronous loop takes it (an idle engine forms
        its batch at once). docs/simulate.md's 8 req/s example: about one decode step more TTFT."""
        sim, pending = self.sim, self.pending
        if not self.held and (pending is None or pending.arrival_s > sim.now_s):
            return  # most steps: nothing held and nobody due (the reads below change nothing)
        formed = self.busy(held=False)  # a batch formed as the last step began
        busy = formed or self.busy()  # … or one to form now, of those held for it
        held, self.held = self.held, []
        for r in held:
            if busy and r.arrival_s >= sim.now_s:  # a closed loop's, sent as this step ended:
                self.held.append(r)  # the batch about to run was formed without it
            elif not sim.arrive(r, self.rec):
                if self.closed_loop:
                    self.send_next()  # a refused one frees its seat at once
                elif self.max_in_flight:
                    self.left(1)
        while pending is not None and pending.arrival_s <= sim.now_s:
            if self.max_in_flight:
                self.rec.client.came(pending.arrival_s)
            if self.max_in_flight and (self.in_flight >= self.max_in_flight or self.backlog):
                self.backlog.append((pending, pending.arrival_s))  # in order: none overtakes
            else:
                self._send(pending, formed)
            pending = next(self.source, None)
            if pending is None and self.max_in_flight:  # the last request came
                self.rec.client.waiting_at_last_arrival = len(self.backlog)
        self.pending = pending

    def _send(self, r: Request, busy: bool) -> None:
        """An open loop's request sent: held a step on a busy engine under async scheduling,
        else arriving now; counted in flight where the loop is capped."""
        if self.max_in_flight:
            self.in_flight += 1
        if busy:
            self.held.append(r)
        elif not self.sim.arrive(r, self.rec) and self.max_in_flight:
            self.left(1)

    def left(self, count: int, busy: bool | None = None) -> None:
        """A capped open loop: ``count`` requests left (finished or refused); the longest
        waiting are sent in their seats, their clocks starting now, together: ``busy`` (else
        the engine's state now) is read before the first is sent, so that one does not hold
        the others back a step."""
        self.in_flight -= count
        if busy is None:
            busy = self.busy()
        while self.backlog and self.in_flight < self.max_in_flight:
            r, came_s = self.backlog.popleft()
            self.rec.client.sent(self.sim.now_s - came_s)
            r.came_s, r.arrival_s = came_s, self.sim.now_s
            self._send(r, busy)

    def busy(self, held: bool = True) -> bool:
        """Under async scheduling, whether the engine has a batch formed or to form, so that a
        request sent now is held for the step after next (``arrive_due``): one formed as the
        last step began (requests running or waiting), or, with ``held``, one it forms now of
        requests sent before now and held for it, ahead of which one sent now cannot go (FCFS:
        a closed loop's requests sent a step apart had joined the queue in reverse order where
        the later send found the running batch empty)."""
        s, now_s = self.sim.scheduler, self.sim.now_s
        return self.lag and bool(s.running or s.waiting
                                 or (held and any(r.arrival_s < now_s for r in self.held)))

    def send_next(self, busy: bool | None = None) -> bool:
        """Closed loop: send the next request now; a rejected one frees its seat at once
        (under async scheduling, on a busy engine, it is held a step: ``arrive_due``; ``busy``
        as read before a group sent together, else the engine's state now).
        False once the workload has no more."""
        if busy is None:
            busy = self.busy()
        while (r := next(self.source, None)) is not None:
            r.arrival_s = self.sim.now_s
            if busy:
                self.held.append(r)
                return True
            if self.sim.arrive(r, self.rec):
                return True
        return False

    def finish(self, finished: list[Request]) -> None:
        """Record the requests a step finished; a closed loop sends the next for each. Those
        sent for one step's finishes go together: on an idle engine all of them join the next
        batch, not only the first (the engine's state is read once, before any is sent)."""
        busy = self.busy()
        for r in finished:
            self.rec.finish(r)
            if self.closed_loop:
                self.send_next(busy)
        if self.max_in_flight and finished:
            self.left(len(finished), busy)

    def idle(self) -> bool:
        """Nothing runs: time passes, idle, to the next arrival; False where none is to come
        (a closed loop's come only as others finish)."""
        if self.closed_loop or self.pending is None:
            return False
        self.idle_s += self.pending.arrival_s - self.sim.now_s
        self.sim.now_s = self.pending.arrival_s  # idle until the next arrival
        return True

    def over_steps(self) -> bool:
        """Past the step cap: an error saying what the engine serves of what is offered; a
        run of known length (``CountedRequests``) projected past PROJECTION_MARGIN times it,
        every CHECK_STEPS steps: an error naming the --num-requests that runs under it.
        Every CHECK_STEPS steps of an open loop that may stop early: True (the recorder marked
        ``stopped_early``) where the engine is hopelessly behind (``Recorder.hopelessly_behind``:
        under half of the arrivals past the fill have left, or, every request come, more than
        half of them wait to start, and at least 1,000 are behind), so that the rest of the run,
        the queue only lengthening or being worked through, is not simulated. No run under
        CHECK_STEPS steps, and none that keeps up, stops early. True at once where the
        recorder has ``missed`` (a check that asks only whether its SLO holds, past it)."""
        sim, rec = self.sim, self.rec
        if sim.steps > sim.config.max_steps:
            raise InputError(step_cap_message(rec, sim.config.max_steps, sim.now_s,
                                              bool(self.closed_loop)))
        if self.total and sim.steps >= self.next_projection:
            self.next_projection = sim.steps + CHECK_STEPS
            self.refuse_past_the_cap()
        if rec.missed:  # a check past its SLO's percentile already (``Recorder.stop_past``)
            return True
        if not self.stop_when_behind or self.closed_loop or sim.steps < self.next_check:
            return False
        self.next_check = sim.steps + CHECK_STEPS
        rec.stop_reading = rec.hopelessly_behind(sim.now_s, self.pending is None
                                                 and not self.held)
        rec.stopped_early = bool(rec.stop_reading)
        return rec.stopped_early

    def refuse_past_the_cap(self) -> None:
        """An InputError where the run, projected from its requests so far, would take more
        than PROJECTION_MARGIN times the step cap (``projected_steps``); none before
        MIN_PROJECTION_REQUESTS are done, nor while fewer than MIN_PROJECTION_SHARE of those
        come are (the batch still filling, or a queue growing: the cap's own error, or the
        early stop, says what the engine serves)."""
        rec, cap = self.rec, self.sim.config.max_steps
        arrived = round(rec.arrivals.total)
        done = rec.completed + sum(rec.rejected.values())
        if done < max(MIN_PROJECTION_REQUESTS, MIN_PROJECTION_SHARE * arrived):
            return
        assert self.draws is not None  # a total is a counted workload's
        projected = projected_steps(self.sim.steps, arrived, self.total,
                                    self.draws.longest_output)
        if projected > PROJECTION_MARGIN * cap:
            raise InputError(projection_message(self.total, projected, arrived, cap))


def projected_steps(steps: int, arrived: int, total: int, longest_output: int = 0) -> float:
    """The steps a run of ``total`` requests takes at the steps a request of those arrived so
    far: 100,000 steps over 1,845 arrived → 54.2 a request, 542 million for 10,000,000
    (the requests in flight counted whole, their steps still to come not: a little under).
    The longest output drawn is counted once, as steps of its own, not as a sample of the
    rest: a 100,000-token output drawn 1 in 5,000 times, the rest 16 tokens, that came 43rd
    (Llama-3.1-8B, H100, 1 req/s) read 100,051 steps over 1,123 arrived as 445,000 for
    5,000, past twice the 158,439 the run takes; (100,051 − 100,000) ÷ 1,123 × 5,000 +
    100,000 = 100,227 (its tokens shared their steps with others: a little under)."""
    longest = min(longest_output, steps)
    return (steps - longest) / arrived * total + longest


def projection_message(total: int, projected: float, arrived: int, cap: int) -> str:
    """A run refused for its projected steps, naming the cap and the --num-requests that runs
    under it, with room for the projection's error (SUGGESTED_SHARE of the cap): 50 million
    of 542 million steps for 10,000,000 requests → 0.8 × 922,000 → 730,000 or fewer (two
    significant figures, rounded down)."""
    fits = int(SUGGESTED_SHARE * total * cap / projected)
    scale = 10 ** max(0, len(str(fits)) - 2)
    each = projected / total
    return (f"--num-requests {total:,} would take about {projected / 1e6:,.0f} million steps "
            f"({each:,.{0 if each >= 10 else 1}f} a request over the first {arrived:,}), "
            f"past the simulator's cap of {cap / 1e6:,.0f} million: give --num-requests "
            f"{max(1, fits // scale * scale):,} or fewer")


def step_cap_message(rec: Recorder, max_steps: int, now_s: float, closed_loop: bool) -> str:
    """Why a run stopped at the step cap, with what the engine served of what arrived and
    what to change: a lower rate where it serves less than is offered, else fewer requests."""
    first, last = rec.arrived_s
    arrived = round(rec.arrivals.total)
    span = now_s - first if math.isfinite(first) else 0.0
    served = rec.completed / span if span > 0 else 0.0
    text = (f"stopped after {max_steps:,} steps, {now_s:,.0f} s simulated: the engine had "
            f"finished {rec.completed:,} of the {arrived:,} requests that had arrived, about "
            f"{served:,.2f} req/s")
    offered = (arrived - 1) / (last - first) if last > first else math.nan  # a burst: none
    if not closed_loop and served < (1 - OVERLOAD_SLACK) * offered:  # (NaN compares False)
        return (text + f" of the {offered:,.2f} req/s offered: its queue grows for as long as "
                "requests arrive; lower --rate (or give fewer --num-requests) for a run that "
                "finishes")
    return text + "; a run this long needs fewer requests: give fewer --num-requests"
