"""A dense model's data-parallel ranks simulated each on its own clock: vLLM runs them as
independent engines behind one front end.

vLLM (vllm/v1/engine/core.py, run_engine_core): ``if data_parallel and
vllm_config.model_config.is_moe: engine_core = DPEngineCoreProc(...)``, else "Non-MoE DP
ranks are completely independent, so treat like DP=1" (an EngineCoreProc with
data_parallel_size 1): no dummy pass, no forward pass aligned with another rank's (its docs,
serving/data_parallel_deployment.md: only a MoE's ranks align theirs). The front end still
deals each request to the rank with the lowest waiting × 4 + running (core_client.py,
DPLBAsyncMPClient; ``sim.data_parallel.least_loaded``), read here at the arrival's instant.
SGLang's --dp-size over a dense model starts whole replicas, which simulate refuses
(data_parallel.data_parallel_problem), so the dense case is vLLM's.

The event loop: of the ranks with work, the one whose clock is earliest takes its next step
(``Simulator._advance``: its own batch priced alone, one rank's step, no other rank's tokens
and no exchange), its clock moving to the step's end; an arrival due before that clock is
dealt first, and an idle rank given one starts at its arrival. A step is taken whole as it
begins, but what it shows the others (its finishes, the running gauge) is read at its end,
every rank's ends in time order: the run's gauges are the ranks' summed at each end, and its
steps and busy time the ranks' summed (a mean step stays one rank's), as the pipeline's lanes
sum theirs (sim/lanes.py), and an arrival's queue (the overload readings) every rank's
summed. Async scheduling holds an arrival on the rank it is dealt to: where that rank had
work after the step it is in, it joins at the end of the rank's next step (``Run.arrive_due``'s
rule, a rank's own). With the fast path (sim/fast_path.py) a rank takes a run of decode
steps up to the step an open loop's next arrival comes in, as one engine does; a closed
loop's arrivals follow any rank's finish, so its ranks step one at a time. Each rank serves
its requests as the rank alone serves them (to rounding, either path), and two ranks each
given 100 identical requests serve them in one rank's time: twice one rank's throughput
(tests/test_sim_independent_ranks.py; scripts/fuzz_simulator.py --ranks).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace

from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile
from ridgeline.sim.config import SimConfig
from ridgeline.sim.data_parallel import (
    ROUND_ROBIN,
    AllRanks,
    dispatch_method,
    least_loaded,
    rank_config,
)
from ridgeline.sim.histogram import Histogram
from ridgeline.sim.metrics import Recorder, SimResult, run_recorder
from ridgeline.sim.request import Request
from ridgeline.sim.run import Run
from ridgeline.sim.simulator import Simulator


class RankClock:
    """One rank in the event loop: its ``Simulator`` (whose ``now_s`` is its clock: the end of
    the step it runs, or of its last), what that step shows at its end (the requests it
    finished; the running gauge, KV usage and preemptions after it), the arrivals async
    scheduling holds for it (each with the rank's step count it waits past), its busy time,
    and when it last woke from idle."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.stepping = False  # a step taken whose end is not yet read
        self.finished: list[Request] = []
        # (running, KV usage, preemptions) after the step in flight, read at its end …
        self.after: tuple[int, float, int] = (0, 0.0, 0)
        self.shown: tuple[int, float, int] = (0, 0.0, 0)  # … and as last read
        self.held: list[tuple[int, Request]] = []
        # whether it had work left as its step in flight (or just read) was taken: under
        # async scheduling every arrival during that step is held or not by it alone, as one
        # engine reads its state once at the step's end (``Run.arrive_due``), not by an
        # earlier arrival of the same step that joined its queue
        self.busy_after = False
        # the inter-token gaps the step in flight streams, counted at its end: a run cut
        # short there (``Run.over_steps``) counts none of a step still running
        self.itl = Histogram()
        self.busy_s = 0.0
        self.woken_s = -math.inf

    @property
    def has_work(self) -> bool:
        s = self.sim.scheduler
        return bool(s.running or s.waiting or self.held or self.sim.retiring)


class IndependentRanksSimulator:
    """N ranks of a dense model's data-parallel deployment, each a ``Simulator`` with one
    rank's pool and seats (``config``: sim_config's, sized per rank) stepping on its own
    clock; arrivals dealt as the engine deals them (``dispatch_method``)."""

    def __init__(self, dep: Deployment, profile: EngineProfile, config: SimConfig) -> None:
        self.dep, self.profile = dep, profile
        n = dep.data_parallel_size
        # each rank's own fast path (``fast_path``): its runs of decode steps end at the next
        # arrival, where they may (``_step``)
        rank = replace(rank_config(dep.engine, config, n), fast_path=config.fast_path)
        # each rank an engine of its own, as vLLM sets a dense rank's data_parallel_size to 1:
        # its step prices its own batch whole (a DP deployment's step shape deals the batch
        # over the ranks, cost.batch_shape)
        alone = replace(dep, data_parallel_size=1)
        self.ranks = [RankClock(Simulator(alone, profile, rank)) for _ in range(n)]
        self.scheduler = AllRanks([r.sim for r in self.ranks])
        for r in self.ranks:  # an arrival's queue read over every rank (``AllRanks.queue_room``)
            r.sim.queue_reader = self.scheduler.queue_room
        # the run's step cap (``Run.over_steps``) counts every rank's steps: each rank its own
        self.config = replace(rank, max_steps=config.max_steps * n)
        self.method = dispatch_method(dep.engine)
        self.now_s = 0.0
        self.lag = config.async_scheduling  # held here, a rank's own (``_holds``) …
        self.lagged = False  # … so the run holds none
        self._turn = 0  # round robin: the rank the next arrival goes to
        self.dealt = [0] * n  # arrivals each rank was given
        self._mark_s: float | None = None  # the last step end read (the gauges' since then)
        self._runs = False  # a rank may take a run of decode steps (``_step``)

    @property
    def steps(self) -> int:
        """Every rank's steps, summed."""
        return sum(r.sim.steps for r in self.ranks)

    # -- dispatch ---------------------------------------------------------------------------
    def pick_rank(self) -> int:
        """The rank the next arrival goes to: the next in turn (SGLang), or the lowest
        waiting × 4 + running at this instant (vLLM): a rank's batch in flight running until
        its step ends, its held arrivals waiting."""
        if self.method == ROUND_ROBIN:
            rank, self._turn = self._turn, (self._turn + 1) % len(self.ranks)
            return rank
        return least_loaded([(len(r.sim.scheduler.waiting) + len(r.held),
                              len(r.sim.scheduler.running) + len(r.finished))
                             for r in self.ranks])

    def arrive(self, r: Request, rec: Recorder) -> bool:
        """r comes: dealt to a rank, which records it and queues or refuses it now, or under
        async scheduling holds it a step (``_holds``); an idle rank's clock starts now."""
        index = self.pick_rank()
        self.dealt[index] += 1
        rank = self.ranks[index]
        sim = rank.sim
        if not rank.stepping and not rank.has_work:
            sim.now_s = rank.woken_s = self.now_s
        if not sim._reject_reason(r)[0]:
            if self._holds(rank):
                rank.held.append((sim.steps, r))
                return True
            if rank.stepping and rank.held:  # it joins at the step's end, after those held
                rank.held.append((sim.steps - 1, r))  # for it (``Run.arrive_due``: the held
                return True  # first)
        clock, sim.now_s = sim.now_s, self.now_s  # its queue noted at this instant
        try:
            return sim.arrive(r, rec)
        finally:
            sim.now_s = clock

    def _holds(self, rank: RankClock) -> bool:
        """Async scheduling: whether an arrival now waits a step on ``rank`` — it had work
        after its step in flight (or the one just read), so the batch it runs next was formed
        as that step began; not where it woke from idle at this instant, forming its batch
        now. A refused one is refused at once."""
        if not self.lag or (not rank.stepping and rank.woken_s == self.now_s):
            return False
        return rank.busy_after

    # -- the loop ---------------------------------------------------------------------------
    def run(self, workload: Iterator[Request], closed_loop: int = 0, keep_rows: bool = False,
            slo: tuple[float | None, ...] = (None, None),
            window_s: tuple[float, float] | None = None,
            stop_when_behind: bool = False, stop_past: int | tuple[int, int] | None = None,
            max_in_flight: int = 0) -> SimResult:
        """Simulate until every request finished or was rejected (``Simulator.run``'s
        arguments)."""
        rec = run_recorder(self.dep.num_gpus, slo, keep_rows, stop_past, window_s, closed_loop)
        run = Run(self, workload, closed_loop, rec, None, stop_when_behind, max_in_flight)
        # an open loop's arrivals are known ahead: a rank's run of decode steps may go on to
        # the next (its batch, queue and the dispatch's reading of it unchanged until then);
        # a closed loop's, or a capped one's, follow any rank's finish: a step at a time. A
        # run that may stop at any finish (``stop_past``) also steps one at a time, so that
        # what it counts at the cut is the steps ended by then (a run hopelessly behind,
        # cut every CHECK_STEPS steps, leaves out the run each other rank has in flight)
        self._runs = not closed_loop and not max_in_flight and stop_past is None
        while True:
            rank = self._next()
            due_s = rank.sim.now_s if rank is not None else math.inf
            if run.next_arrival_s < due_s:  # an arrival comes first
                if rank is None:
                    run.idle()  # every rank idle until it
                else:
                    self.now_s = run.next_arrival_s
                run.arrive_due()
                continue
            if rank is None:
                break  # nothing runs, nothing is to come
            self.now_s = due_s
            if rank.stepping:
                finished = self._read(rank, rec)
                if finished:
                    run.finish(finished)
                if run.over_steps():
                    break
            sim, s = rank.sim, rank.sim.scheduler
            if sim.retiring and not s.running:  # nothing in flight beside them: their
                sim._release(sim.retiring)  # output read, they leave
                sim.retiring = []
            self._release_held(rank, rec)
            run.arrive_due()
            if s.running or s.waiting:
                self._step(rank, rec, run.next_arrival_s)
            else:
                s.ratio.reset()  # SGLang's estimate, a rank's own, starts over when idle
        sims = [r.sim for r in self.ranks]
        rec.readmit_hit_blocks = sum(sim.pool.own_hits for sim in sims)
        return rec.result(self.now_s, self.scheduler.preemptions,
                          sum(sim.pool.hits for sim in sims), self.steps,
                          sum(r.busy_s for r in self.ranks), self.profile)

    def _next(self) -> RankClock | None:
        """The rank with a step to read or work to start whose clock is earliest (the first
        on a tie); None where none has."""
        best: RankClock | None = None
        for rank in self.ranks:
            if (rank.stepping or rank.has_work) and (best is None
                                                     or rank.sim.now_s < best.sim.now_s):
                best = rank
        return best

    def _step(self, rank: RankClock, rec: Recorder, next_arrival_s: float) -> None:
        """``rank`` takes its next step now (its own batch, its own time), or with the fast
        path a run of decode steps up to the step the next arrival comes in
        (``Simulator._advance``: none where it holds an arrival, or where arrivals follow
        finishes), its clock moving to the step's end, where what it shows is read
        (``_read``): a rank's runs are the ones it would take alone, which match its plain
        steps as closely as one engine's fast path does (tests/test_sim_independent_ranks.py,
        scripts/fuzz_simulator.py --ranks)."""
        sim = rank.sim
        if self._mark_s is None:
            self._mark_s = self.now_s  # the gauges start with the first step
        start_s = sim.now_s
        until_s = next_arrival_s if self._runs and not rank.held else start_s
        run_itl, rec.hist["itl"] = rec.hist["itl"], rank.itl  # the step's gaps held …
        try:
            rank.finished = sim._advance(until_s, rec)
        finally:
            rec.hist["itl"] = run_itl
        rank.busy_s += sim.now_s - start_s
        rank.after = (len(sim.scheduler.running), sim.pool.usage, sim.scheduler.preemptions)
        rank.busy_after = bool(sim.scheduler.running or sim.scheduler.waiting)
        rank.stepping = True

    def _read(self, rank: RankClock, rec: Recorder) -> list[Request]:
        """``rank``'s step ends now: the gauges, every rank's summed, held since the last end
        read (``Recorder.ran``), then read with this rank's after its step (``sample``);
        returns the requests it finished."""
        waiting = len(self.scheduler.waiting)
        if self._mark_s is not None:
            rec.ran(self._mark_s, self.now_s, 1, 0, waiting, *self._shown()[1:])
        rank.stepping = False
        rank.shown = rank.after
        rec.hist["itl"].absorb(rank.itl)  # … counted at its end
        rank.itl = Histogram()
        finished, rank.finished = rank.finished, []
        running, usage, preempted = self._shown()
        rec.sample(self.now_s, running, waiting, usage, preempted)
        if not rec.fill_reason:  # every rank's batch full: the engine's, seen now
            rec.batch_filled(self.now_s, self.scheduler.full)
        self._mark_s = self.now_s
        return finished

    def _shown(self) -> tuple[int, float, int]:
        """The gauges as the ranks' last step ends read them: the running requests and
        preemptions summed, the pools' usage the mean (each holds the same blocks)."""
        shown = [r.shown for r in self.ranks]
        return (sum(s[0] for s in shown), sum(s[1] for s in shown) / len(shown),
                sum(s[2] for s in shown))

    def _release_held(self, rank: RankClock, rec: Recorder) -> None:
        """Async scheduling: the arrivals ``rank`` held join its queue, past the step they
        waited for, or at once where it has no work left (none is refused: ``arrive`` holds
        only what the rank takes)."""
        if not rank.held:
            return
        s = rank.sim.scheduler
        idle = not (s.running or s.waiting)
        keep: list[tuple[int, Request]] = []
        for steps, r in rank.held:
            if idle or rank.sim.steps > steps:
                rank.sim.arrive(r, rec)
            else:
                keep.append((steps, r))
        rank.held = keep
