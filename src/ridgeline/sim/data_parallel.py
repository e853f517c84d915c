"""Data-parallel attention simulated: N ranks, each its own scheduler, KV pool and queue,
stepping together because the MoE layers join every rank's tokens. A dense model's ranks,
which vLLM runs as independent engines, step each on its own clock (sim/independent_ranks.py).

What the engines do, read in their source:
- Dispatch. SGLang's DataParallelController (python/sglang/srt/managers/
  data_parallel_controller.py) sends each request to the next rank in turn under its default
  ``--load-balance-method round_robin`` (``round_robin_scheduler``: ``round_robin_counter``
  advanced modulo the ranks). vLLM's front end (vllm/v1/engine/core_client.py,
  ``DPLBAsyncMPClient.get_core_engine_for_request``) picks the rank with the lowest
  ``waiting * 4 + running``, ties to the first, from counts its DP coordinator
  (vllm/v1/engine/coordinator.py) publishes about every 100 ms, bumping the chosen rank's
  waiting count in between; here the counts are read exact at each arrival.
- Lock-step. A MoE's ranks run each forward pass together: an idle rank runs a dummy pass
  (vLLM: DPEngineCoreProc's busy loop, "we are in a running state and so must execute a
  dummy pass", ``execute_dummy_batch``) or an idle batch (SGLang: ``prepare_mlp_sync_batch``
  gathers every rank's batch, ``get_idle_batch`` for a rank with none), so a step lasts as
  long as its slowest rank's.

The ranks keep one recorder, read as one engine's: an arrival's queue is every rank's
(``AllRanks.queue_room``, as the overload readings take it); a step that ran a rank's whole
token budget with requests waiting counts rank by rank (``Recorder.budget_full_steps``), a
share of the ranks' own steps (``AllRanks.rank_steps``, ``SimResult.rank_steps``), as a
dense model's independent ranks count theirs.

The step's time is decode's pricing of a data-parallel step (cost.step_terms): each rank's
attention and own weights on its own batch, the gathered layers and the exchange on every
rank's tokens; the step is the slowest rank's such time. A rank that is idle adds nothing.

A run of lock-step decode steps (``_bulk_decode``): while every rank's batch is its running
decodes alone and nothing can change it — no arrival due or held, no finish, no admission
possible (a rank's queue empty, or its seats full), no block short, no finish read late
(async scheduling) — the steps are taken without scheduling: each step's time priced from
each rank's count and summed context (integers, so the shape is the plain step's exactly),
the blocks the decodes cross into taken in the order the plain step takes them, the gauges,
ITL and step records written step by step as the plain step writes them, and the requests'
counters written back once at the run's end; a queue's head left waiting read as the plain
step reads it (``Scheduler.note_full_beside``). Full attention only (a window caps each
decode's keys: the plain step). In a plain step, a rank whose batch can only be its running
decodes (another rank's prompt chunk ends the run: 8 steps of each 16,000-token prompt at a
budget of 2,048) takes them without the scheduler's walk (``Scheduler.decodes_only``), priced
from their count and summed context (``StepTimer.rank_decode_times``). The same figures to
the last digit; checked against the plain step (``fast_path=False``) in the tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from ridgeline.cost import Seq, rank_shape
from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile
from ridgeline.errors import InputError
from ridgeline.sim.config import SimConfig
from ridgeline.sim.metrics import Recorder, SimResult, run_recorder
from ridgeline.sim.request import Request
from ridgeline.sim.run import Run
from ridgeline.sim.scheduler import FULL_ORDER, Scheduled
from ridgeline.sim.simulator import Simulator
from ridgeline.sim.timer import step_timer

ROUND_ROBIN, LEAST_LOADED = "round robin", "least loaded"
WAITING_WEIGHT = 4  # vLLM's score: waiting × 4 + running


def dispatch_method(engine: str) -> str:
    """How ``engine`` deals arrivals over its data-parallel ranks by default: SGLang in turn,
    vLLM to the least loaded."""
    return ROUND_ROBIN if engine == "sglang" else LEAST_LOADED


def dispatch_label(engine: str) -> str:
    """How the report words ``dispatch_method``."""
    if dispatch_method(engine) == ROUND_ROBIN:
        return "in turn (SGLang's default --load-balance-method round_robin)"
    return ("to the rank with the least waiting × 4 + running (vLLM's front end, its counts "
            "read at each arrival)")


def least_loaded(counts: list[tuple[int, int]]) -> int:
    """The rank vLLM's front end deals the next arrival to, of each rank's (waiting,
    running): the lowest waiting × 4 + running, the first on a tie. (2, 1) scores 9 and
    (0, 8) 8: the second."""
    scores = [WAITING_WEIGHT * waiting + running for waiting, running in counts]
    return scores.index(min(scores))


def rank_config(engine: str, config: SimConfig, ranks: int) -> SimConfig:
    """What each rank's scheduler runs with: ``config`` (sim_config's pool and seats are a
    rank's already), taking plain steps (the ranks' runs of decode steps go together, in
    ``DataParallelSimulator._bulk_decode``); SGLang's token budget a rank's share, as its
    server_args divides --chunked-prefill-size by --dp-size under DP attention (8,192 over 8
    ranks: 1,024 each)."""
    from ridgeline.data_parallel import rank_budget_tokens

    return replace(config, fast_path=False, max_num_batched_tokens=rank_budget_tokens(
        engine, config.max_num_batched_tokens, ranks))


class AllRanks:
    """The ranks' queues read as one engine's, as the run and its gauges read them."""

    def __init__(self, ranks: list[Simulator]) -> None:
        self.ranks = ranks

    @property
    def running(self) -> list[Request]:
        return [r for rank in self.ranks for r in rank.scheduler.running]

    @property
    def waiting(self) -> list[Request]:
        return [r for rank in self.ranks for r in rank.scheduler.waiting]

    @property
    def preemptions(self) -> int:
        return sum(rank.scheduler.preemptions for rank in self.ranks)

    def queue_room(self) -> tuple[int, float]:
        """The queue an arrival joined and the room the running batches had, every rank's
        summed (``Simulator.queue_room``): the overload readings (``Recorder.queued``) are
        the deployment's, not the one rank's the arrival was dealt to."""
        rooms = [rank.queue_room() for rank in self.ranks]
        return sum(w for w, _ in rooms), sum(room for _, room in rooms)

    @property
    def rank_steps(self) -> int:
        """The steps the ranks' schedulers formed a batch for, summed (a lock-step rank's
        dummy pass is none): what ``Recorder.budget_full_steps``, counted rank by rank, is a
        share of."""
        return sum(rank.steps for rank in self.ranks)

    @property
    def full(self) -> str:
        """What stopped the ranks' batches growing (``Scheduler.full``), once every rank's
        has filled ("" until then: arrivals dealt to the others still start): of ranks that
        filled differently, the reason latest in FULL_ORDER (the pool over the seats)."""
        reasons = [rank.scheduler.full for rank in self.ranks]
        return max(reasons, key=FULL_ORDER.index) if all(reasons) else ""


class DataParallelSimulator:
    """N ranks of a data-parallel deployment, each a ``Simulator`` with one rank's pool and
    seats (``config``: sim_config's, sized per rank), stepped together. Arrivals are dealt
    as the engine deals them (``dispatch_method``); each step every rank with work schedules
    its own batch and all of them advance by the slowest rank's time (``step_s``)."""

    def __init__(self, dep: Deployment, profile: EngineProfile, config: SimConfig) -> None:
        if config.spec_tokens:
            raise InputError("speculative decoding with data-parallel attention is not "
                             "simulated yet: drop --spec-tokens, or simulate without "
                             "data parallelism")
        if config.ubatch_tokens:
            raise InputError("data-parallel attention runs on vLLM and SGLang, whose steps are "
                             "one pass")
        self.dep, self.profile = dep, profile
        self.config = rank_config(dep.engine, config, dep.data_parallel_size)
        self.ranks = [Simulator(dep, profile, self.config)
                      for _ in range(dep.data_parallel_size)]
        self.scheduler = AllRanks(self.ranks)
        for rank in self.ranks:  # an arrival's queue read over every rank (``queue_room``)
            rank.queue_reader = self.scheduler.queue_room
        self.timer = step_timer(dep, profile)
        self.method = dispatch_method(dep.engine)
        self.now_s = 0.0
        self.steps = 0
        self.lagged = self.config.async_scheduling
        self._turn = 0  # round robin: the rank the next arrival goes to
        self.dealt = [0] * len(self.ranks)  # arrivals each rank was given
        # runs of lock-step decode steps taken without scheduling (``_bulk_decode``)
        self.bulk = config.fast_path and self.timer.full_attention \
            and not config.spec_lookahead_tokens and not self.ranks[0].pool.window \
            and not self.ranks[0].pool.window_groups  # (a table's blocks alone: every pool's)
        self.bulk_steps = 0  # steps taken so
        self._bulk_misses = 0  # consecutive tries that found a step that is not one …
        self._bulk_next = 0  # … and the step count before which not to try again
        # the steps the running prompt the last try met has left, at least (0: none met)
        self._prompt_steps = 0

    # -- dispatch ---------------------------------------------------------------------------
    def pick_rank(self) -> int:
        """The rank the next arrival goes to: the next in turn (SGLang), or the lowest
        waiting × 4 + running, the first on a tie (vLLM)."""
        if self.method == ROUND_ROBIN:
            rank, self._turn = self._turn, (self._turn + 1) % len(self.ranks)
            return rank
        return least_loaded([(len(rank.scheduler.waiting), len(rank.scheduler.running))
                             for rank in self.ranks])

    def arrive(self, r: Request, rec: Recorder) -> bool:
        """r comes: dealt to a rank, which records it and queues or refuses it."""
        index = self.pick_rank()
        self.dealt[index] += 1
        rank = self.ranks[index]
        rank.now_s = self.now_s
        return rank.arrive(r, rec)

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
        s = self.scheduler
        while True:
            for rank in self.ranks:
                if rank.retiring and not rank.scheduler.running:  # nothing in flight beside
                    rank._release(rank.retiring)  # them: their output read, they leave
                    rank.retiring = []
                if not rank.scheduler.running and not rank.scheduler.waiting:
                    rank.scheduler.ratio.reset()  # SGLang's estimate, a rank's own
            run.arrive_due()
            running, waiting = s.running, s.waiting
            if not running and not waiting:
                if not run.idle():
                    break
                continue
            if self.bulk and self.steps >= self._bulk_next:
                taken = self._bulk_decode(run, rec)
                if taken < 0:
                    break  # the run is over (``Run.over_steps``)
                if taken:
                    continue
            start_s, usage, preempted = self.now_s, self.usage, s.preemptions
            finished = self._advance(rec)
            rec.ran(start_s, self.now_s, 1, len(s.running) + len(finished), len(waiting),
                    usage, preempted)
            rec.sample(self.now_s, len(s.running), len(s.waiting), self.usage, s.preemptions)
            if not rec.fill_reason:  # every rank's batch full: the engine's, seen now
                rec.batch_filled(self.now_s, s.full)
            if finished:
                run.finish(finished)
            if run.over_steps():
                break
        rec.readmit_hit_blocks = sum(rank.pool.own_hits for rank in self.ranks)
        return rec.result(self.now_s, s.preemptions, sum(rank.pool.hits for rank in self.ranks),
                          self.steps, self.now_s - run.idle_s, self.profile, s.rank_steps)

    @property
    def usage(self) -> float:
        """The ranks' pools' mean usage (each holds the same blocks)."""
        return sum(rank.pool.usage for rank in self.ranks) / len(self.ranks)

    def _advance(self, rec: Recorder) -> list[Request]:
        """One step of every rank together: each with work schedules its batch (a finished
        request held a step under async scheduling leaving first where it has nothing else
        to run, as ``Simulator._advance``), every rank's batch advances by ``step_s``, an idle
        rank running its dummy pass meanwhile; returns who finished."""
        batches: list[list[Scheduled]] = []
        # each rank's batch where it is its running decodes alone (``_schedule``): them and
        # their contexts' sum, its ``batches`` entry left empty
        decoding: list[tuple[list[Request], int] | None] = []
        held: list[list[Request]] = []
        for rank in self.ranks:
            rank.now_s = self.now_s
            retiring, rank.retiring = rank.retiring, []
            batch, decodes = self._schedule(rank, rec)
            if not batch and decodes is None and retiring:
                rank._release(retiring)
                retiring = []
                batch, decodes = self._schedule(rank, rec)
            if not batch and decodes is None and (rank.scheduler.running
                                                  or rank.scheduler.waiting):
                raise InputError("the engine cannot schedule: a request needs more blocks "
                                 "than its rank's pool frees")  # guarded by _reject_reason
            batches.append(batch)
            decoding.append(decodes)
            held.append(retiring)
        if not any(batches) and not any(decoding):
            raise InputError("the engine cannot schedule: nothing to run")
        dt = self.step_s(batches, decoding)
        finished: list[Request] = []
        for rank, batch, decodes, retiring in zip(self.ranks, batches, decoding, held):
            if decodes is not None:
                finished += rank.apply_decodes(decodes[0], dt, rec)
            elif batch:
                finished += rank.apply(batch, dt, rec)
            else:  # an idle rank joins the step with a dummy pass
                rank.now_s += dt
                rank.stepped(rank.now_s - dt)
            if retiring:
                rank._release(retiring)
        self.now_s += dt
        self.steps += 1
        return finished

    def _decode_lanes(self, run: Run) -> list[Lane] | None:
        """Every busy rank's running decodes (``Lane``) if the next step is lock-step decodes
        alone that a run may take (see ``_bulk_decode``); None where it is not."""
        self._prompt_steps = 0
        if run.held or run.next_arrival_s <= self.now_s:
            return None  # an arrival joins at the next step
        lanes: list[Lane] = []
        now_s = self.now_s
        for rank in self.ranks:
            s = rank.scheduler
            running = s.running
            if rank.retiring:
                return None  # a finish read late leaves after the next step
            if not running:
                if s.waiting:
                    return None
                continue
            cfg = s.config
            budget = cfg.max_num_batched_tokens
            if len(running) > budget:
                return None  # the budget leaves some decodes out
            if s.waiting and not (s.seats_taken >= cfg.max_num_seqs or s.batch_full
                                  or (not cfg.prefill_first and len(running) >= budget)):
                return None  # the queue's head might start: the plain step asks each step
            pool = rank.pool
            bs, overhead = pool.block_size, pool.overhead
            lane = Lane(rank)
            for r in running:
                c = r.num_computed
                if not r.num_generated or r.prompt_tokens + r.num_generated - c != 1 \
                        or r.last_token_s != now_s \
                        or r.private_blocks + len(r.shared) != -(-c // bs) + overhead:
                    # a prompt (its chunks take a budget's tokens a step at most), or a
                    # decode that sat out a step, or holds other than its table's blocks
                    # (``BlockPool.blocks_for``, no windows; c > 0)
                    self._prompt_steps = -(-(r.prompt_tokens - c) // budget) \
                        if not r.num_generated else 0
                    return None
                if r.prefix_group >= 0 and pool.prefix_caching \
                        and len(r.shared) < r.prefix_tokens // bs:
                    return None  # a private copy of its prefix, published when it can be
                lane.context += c
                lane.left = min(lane.left, r.output_tokens - r.num_generated)
                # it needs a block at the step j where c + j fills its last one
                needs = lane.needs.get(c % bs)
                if needs is None:
                    lane.needs[c % bs] = [r]
                else:
                    needs.append(r)
            lanes.append(lane)
        return lanes or None

    def _bulk_decode(self, run: Run, rec: Recorder) -> int:
        """Lock-step decode steps, each one as the plain step (``_advance``) would take it and
        record it, until one might not be: a finish (its step is the plain one), an arrival
        due, a rank short of blocks. Returns the steps taken, −1 where the run is over."""
        lanes = self._decode_lanes(run)
        if lanes is None:
            self._missed()
            return 0
        steps = min(lane.left for lane in lanes) - 1  # the step a request finishes in: plain
        s = self.scheduler
        running = sum(lane.count for lane in lanes)
        waiting = sum(len(rank.scheduler.waiting) for rank in self.ranks)
        preempted = s.preemptions
        # the lanes whose decodes take the whole budget with a request waiting: each step of
        # theirs budget-full, as the plain step counts it (``_schedule``)
        budget_full = sum(1 for lane in lanes if lane.rank.scheduler.waiting
                          and lane.count >= lane.rank.config.max_num_batched_tokens)
        bs = lanes[0].block_size  # (every rank's pool alike)
        # the blocks taken at step j: the lanes' decodes of residue −j mod bs, lane by lane
        takes: dict[int, list[tuple[Lane, list[Request]]]] = {}
        for lane in lanes:
            for residue, needs in lane.needs.items():
                takes.setdefault(-residue % bs, []).append((lane, needs))
        # each lane's step time by its summed context; the busy lanes' streamed chunks (ITL)
        times = [(self.timer.rank_decode_times(lane.count, running), lane.context, lane.count)
                 for lane in lanes]
        counted = [lane.counted for lane in lanes if lane.counted]
        ratios = [lane.rank.scheduler for lane in lanes if lane.rank.config.token_ratio]
        arrival_s = run.next_arrival_s  # (nothing arrives nor is held during the run)
        j = 0
        over = False
        usage = self.usage  # the pools' usage after each step is the next one's at its start
        dt = 0.0
        try:
            while j < steps:
                take = takes.get(j % bs)
                if take is not None:
                    if any(len(needs) > lane.pool.available for lane, needs in take):
                        break  # a rank short of blocks preempts: the plain step
                    for lane, needs in take:  # one block each, in running order
                        lane.pool.next_block_each(needs)
                if not j:  # the queues' heads left waiting, read as each step reads them
                    for lane in lanes:
                        lane.rank.scheduler.note_full_beside(lane.count)
                start_s, start_usage = self.now_s, usage
                dt = 0.0
                for time_s, context, count in times:
                    t = time_s(context + j * count)
                    if t > dt:
                        dt = t
                for scheduler in ratios:
                    scheduler.after_step(True, False)  # (SGLang's: prefill-first)
                for chunks in counted:  # each busy rank's streamed chunks
                    rec.itl(dt, chunks)
                self.now_s += dt
                self.steps += 1
                j += 1
                if take is not None:
                    usage = self.usage
                rec.ran(start_s, self.now_s, 1, running, waiting, start_usage, preempted)
                rec.sample(self.now_s, running, waiting, usage, preempted)
                rec.budget_full_steps += budget_full
                if j == 1 and not rec.fill_reason:  # every rank's batch full: seen now
                    rec.batch_filled(self.now_s, s.full)
                if run.over_steps():
                    over = True
                    break
                if arrival_s <= self.now_s:
                    break
        finally:
            self._written(lanes, j, dt)
        if j:
            self._bulk_misses = 0
        else:
            self._missed()
        return -1 if over else j

    def _missed(self) -> None:
        """No run of steps here: the next tries come 1, 3, 7, then every 15 steps (each asks
        every running request; a run, when it comes, is what the plain steps would take).
        Where the try met a prompt, the next comes when its last chunk can have run, none
        sooner (a 16,000-token prompt at a budget of 2,048: 8 steps), and the backoff starts
        over: a run of decodes may start then. When to try changes no figure, only how many
        steps are taken one at a time (DeepSeek-V3 DP4, 16,000/8,000 at 0.2/s: 24,530 → 19,784)."""
        if self._prompt_steps:
            self._bulk_misses = 0
            self._bulk_next = self.steps + self._prompt_steps
            return
        self._bulk_misses = min(self._bulk_misses + 1, 4)
        self._bulk_next = self.steps + (1 << self._bulk_misses) - 1

    def _written(self, lanes: list[Lane], steps: int, last_s: float) -> None:
        """A run of ``steps`` lock-step decode steps over, the last ``last_s`` long: each
        rank's clock, step count and decodes' counters brought up to date."""
        if not steps:
            return
        self.bulk_steps += steps
        for rank in self.ranks:
            rank.now_s = self.now_s  # as each step sets it, and adds the step's time
            rank.stepped(self.now_s - last_s)
        for lane in lanes:
            lane.rank.steps += steps
            for r in lane.rank.scheduler.running:
                r.num_computed += steps
                r.num_generated += steps
                r.last_token_s = self.now_s

    def _schedule(self, rank: Simulator, rec: Recorder
                  ) -> tuple[list[Scheduled], tuple[list[Request], int] | None]:
        """The rank's batch; or, where it is its running decodes alone, taken so where nothing
        else can run (``Scheduler.decodes_only``, the fast path: a rank's step beside
        another's prompt chunk), none and those decodes with their contexts' sum. A batch
        that took the rank's whole token budget with a request still waiting on it counts
        (``Recorder.budget_full_steps``), rank by rank, as one engine's step does."""
        s = rank.scheduler
        if not s.running and not s.waiting:
            return [], None
        if self.bulk and not s.waiting:
            decodes = s.decodes_only()
            if decodes is not None:
                return [], decodes  # (nobody waits: not budget-full)
        batch = s.schedule(rank.now_s)
        if s.waiting and s.budget_full(batch):
            rec.budget_full_steps += 1
        return batch, None

    def step_s(self, batches: list[list[Scheduled]],
               decoding: list[tuple[list[Request], int] | None] | None = None) -> float:
        """The ranks' step together: the slowest rank's time, each rank's attention and own
        weights on its own batch, the gathered layers and the exchange on every rank's
        tokens (cost.step_terms, decode's data-parallel pricing), the experts a prompt
        step's on every rank where any rank has a prompt chunk (cost.experts_prompt). Eight
        ranks of one decode each are decode's batch of 8 on DP8. ``decoding``: the ranks
        whose batch is decodes alone (``_schedule``), priced from their count and summed
        context (``StepTimer.rank_decode_times``: the same terms, full attention)."""
        every = sum(b.tokens for batch in batches for b in batch)
        any_prompt = any(b.tokens != 1 for batch in batches for b in batch)
        if decoding is not None:
            every += sum(len(decodes[0]) for decodes in decoding if decodes is not None)
        slowest = 0.0
        for i, batch in enumerate(batches):
            decodes = decoding[i] if decoding is not None else None
            if decodes is not None:
                times = self.timer.rank_decode_times(len(decodes[0]), every, any_prompt)
                slowest = max(slowest, times(decodes[1]))
                continue
            if not batch:
                continue
            decode_contexts = [b.context for b in batch if b.tokens == 1]
            chunks = [Seq(b.tokens, b.context) for b in batch if b.tokens != 1]
            shape = rank_shape(self.timer.windows, decode_contexts, chunks)._replace(
                all_tokens=every, any_rank_prompt=any_prompt)
            slowest = max(slowest, self.timer.time_s(shape))
        return slowest


class Lane:
    """One busy rank in a run of lock-step decode steps (``DataParallelSimulator.
    _bulk_decode``): its decodes' count and summed context as the run began, the fewest
    tokens any of them has left, and its decodes by the residue of their context modulo the
    block size (those of residue −j take a block at the run's step j), in running order."""

    def __init__(self, rank: Simulator) -> None:
        self.rank = rank
        self.pool = rank.pool
        self.block_size = rank.pool.block_size
        self.count = len(rank.scheduler.running)
        self.counted = sum(r.counted for r in rank.scheduler.running)  # the ITL keeps theirs
        self.context = 0
        self.left = 1 << 62
        self.needs: dict[int, list[Request]] = {}
