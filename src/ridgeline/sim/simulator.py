"""The step loop: admit arrivals, schedule, time the step through step_cost, advance.

Two ways to advance, checked against each other in the tests: the plain step
(``fast_path=False``), here — schedule every running request, time the exact batch, update
each request, O(batch) per step, the reference; and the fast path (sim/fast_path.py), the
running decodes kept as sums and runs of decode steps taken at once. A run's requests and
when it stops are its ``Run`` (sim/run.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ridgeline.chunked_prefill import refuses_whole_prompt, whole_prompt_refusal
from ridgeline.cost import Seq, batch_shape
from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile
from ridgeline.errors import DoesNotFit, InputError
from ridgeline.llamacpp_batching import pipelined_s, pipelined_stages, split_ubatches
from ridgeline.sim.blocks import BlockPool
from ridgeline.sim.config import (
    SimConfig,
    check_spec,
    spec_step_s,
    tokens_per_step,
)
from ridgeline.sim.fast_path import FastPath
from ridgeline.sim.metrics import Recorder, SimResult, run_recorder
from ridgeline.sim.request import FINISHED, REJECTED, Request
from ridgeline.sim.run import Run
from ridgeline.sim.scheduler import Scheduled, Scheduler, SchedulerConfig
from ridgeline.sim.timer import StepTimer, drafter_timer, step_timer


class Simulator:
    def __init__(self, dep: Deployment, profile: EngineProfile, config: SimConfig) -> None:
        if config.num_blocks < 1:
            raise DoesNotFit("does not fit: the KV pool holds no block")
        check_spec(config.spec_tokens, config.spec_acceptance, config.spec_draft_cost)
        if config.token_ratio and not config.prefill_first:
            raise InputError("SGLang's admission estimate (token_ratio) goes with its "
                             "prefill-first steps (prefill_first)")
        self.dep = dep
        self.profile = profile
        self.config = config
        self.pool = BlockPool(config.num_blocks, config.block_size, config.prefix_caching,
                              config.overhead_blocks, config.lru_free_queue,
                              config.window_cap_tokens, config.window_gate_blocks,
                              config.window_groups, config.window_chunks)
        self.scheduler = Scheduler(SchedulerConfig(config.max_num_seqs,
                                                   config.max_num_batched_tokens,
                                                   config.spec_tokens, config.reserve_full,
                                                   config.prefill_first, config.token_ratio,
                                                   config.ignore_eos, config.admission_extra,
                                                   config.cache_on_schedule,
                                                   config.chunked_prefill,
                                                   config.spec_lookahead_tokens,
                                                   config.max_model_len
                                                   if config.positions_capped else 0,
                                                   config.long_prefill_token_threshold,
                                                   config.long_prefill_alone),
                                   self.pool)
        self.now_s = 0.0
        self.steps = 0
        self.tokens_per_step = tokens_per_step(config.spec_tokens, config.spec_acceptance)
        self._carry: dict[int, float] = {}  # fractional accepted tokens per request
        # async scheduling (vLLM) or the overlap scheduler (SGLang): the next batch is formed
        # as one starts, so an arrival joins a step late (``Run.arrive_due``) and a finish is
        # read a step late: its seat and blocks held (``retiring``) to the next step's end
        self.lagged = config.async_scheduling
        self.retiring: list[Request] = []
        self._step_s = (-1.0, -1.0)  # the latest step's start and end (``formed_s``)
        self.timer = step_timer(dep, profile)
        self.drafter = drafter_timer(dep, profile, self.timer)
        # llama.cpp: the stages a step's ubatches (one llama_decode call) overlap over, as
        # prefill prices them (llamacpp_batching.pipelined_s); 1 runs them in turn
        self.ubatch_stages = pipelined_stages(dep) if config.ubatch_tokens else 1
        # the queue and batch room an arrival's reading takes (``_note_queue``): this
        # engine's own, or a dense model's data-parallel ranks' summed, each an engine of its
        # own behind one front end (sim/independent_ranks.py)
        self.queue_reader: Callable[[], tuple[int, float]] = self.queue_room
        self.fast = FastPath(self)  # the running decodes as sums (sim/fast_path.py)
        self.scheduler.sync = self.fast.sync
        self.scheduler.leaving = self.fast.leaving
        self.scheduler.decoding_held = self.fast.decoding_held
        self.scheduler.formed_at = self.formed_s
        # the fast path runs a prompt's chunks at the whole budget: with a threshold on
        # them, every step is the plain one; so too with attention-chunk groups, whose
        # blocks the summed decodes do not follow (BlockPool.bulk_decodes)
        self._bulk = config.fast_path and not config.spec_tokens \
            and not config.long_prefill_token_threshold and self.pool.bulk_decodes
        # a step runs as one pass (no llama.cpp ubatches) on one data-parallel rank: its time
        # is the timer's for the step's shape (``_time``)
        self._one_pass = not config.ubatch_tokens and dep.data_parallel_size == 1

    @property
    def bulk_steps(self) -> int:
        """Steps taken with the running decodes kept as sums (the rest: the plain step)."""
        return self.fast.g

    # -- arrivals -------------------------------------------------------------------------
    def _reject_reason(self, r: Request) -> tuple[str, str]:
        """Why the engine would refuse r, as (the reason, r's own numbers); ("", "") if not."""
        if r.prompt_tokens + r.output_tokens > self.config.max_model_len:
            return (f"prompt + output exceeds max_model_len {self.config.max_model_len:,}",
                    f"request {r.id}, {r.prompt_tokens + r.output_tokens:,} tokens")
        slots = r.max_cached_tokens + self.config.spec_tokens + self.config.spec_lookahead_tokens
        if self.config.positions_capped:  # vLLM: no slot past max_model_len
            slots = min(slots, self.config.max_model_len)
        # a verify step caches its drafts too (and lookahead); TensorRT-LLM admits a request
        # only with its whole life reserved, the never-fed last token's slot included; a
        # hybrid's window groups hold a prompt chunk's tokens beside their window
        chunk = min(r.prompt_tokens, self.config.max_num_batched_tokens)
        need = max(self.pool.peak_blocks_for(slots, chunk), self.scheduler.reservation(r))
        if need > self.pool.total:
            return (f"needs more KV blocks than its pool's {self.pool.total:,}",
                    f"request {r.id}, {need:,} blocks")
        return "", ""

    def run(self, workload: Iterator[Request], closed_loop: int = 0, keep_rows: bool = False,
            after_step: Callable[[Simulator], None] | None = None,
            slo: tuple[float | None, ...] = (None, None),
            window_s: tuple[float, float] | None = None,
            stop_when_behind: bool = False, stop_past: int | tuple[int, int] | None = None,
            max_in_flight: int = 0) -> SimResult:
        """Simulate until every request finished or was rejected.

        closed_loop > 0: keep that many requests in flight, each finish releasing the next
        (``vllm bench serve --max-concurrency``); arrival times in the workload are ignored.
        keep_rows: keep per-request rows for export. after_step: called after every step
        (the invariant tests use it). window_s: (from, until) seconds of arrival whose
        requests' latencies count (the steady state, past the warm-up and before the drain).
        stop_when_behind: an open loop may stop early, its recorder marked ``stopped_early``,
        once the engine is hopelessly behind (``Run.over_steps``). stop_past: stop once more
        than this many of the window's requests passed ``slo`` in TTFT or in TPOT (or, a
        pair, than its second of their streamed chunks passed ``slo``'s third, the ITL), the
        recorder marked ``missed`` (``Recorder.stop_past``). max_in_flight > 0: an open loop
        whose arrivals wait, client-side, while that many are in flight (``Run``).
        """
        run = self._begin(workload, closed_loop, keep_rows, after_step, slo, window_s,
                          stop_when_behind, stop_past, max_in_flight)
        rec, s = run.rec, self.scheduler
        while True:
            if self.retiring and not s.running:  # no batch in flight beside them: the
                self._release(self.retiring)  # engine waits for their output, and frees them
                self.retiring = []
            run.arrive_due()
            if not s.running and not s.waiting:
                s.ratio.reset()  # SGLang's estimate starts over when the engine is idle
                if not run.idle():
                    break
                continue
            start_s, steps, waiting, usage, preempted = self.now_s, self.steps, len(s.waiting), \
                self.pool.usage, s.preemptions
            finished = self._advance(run.next_arrival_s, rec)
            # those that ran: the running set now and those that finished at its end
            rec.ran(start_s, self.now_s, self.steps - steps, len(s.running) + len(finished),
                    waiting, usage, preempted)
            if self._stepped(run, finished):
                break
        return self._result(run)

    # -- a run's frame, shared with the pipeline's event loop (sim/pipeline.py) ---------------
    def _begin(self, workload: Iterator[Request], closed_loop: int, keep_rows: bool,
               after_step: Callable[[Simulator], None] | None,
               slo: tuple[float | None, ...], window_s: tuple[float, float] | None,
               stop_when_behind: bool, stop_past: int | tuple[int, int] | None = None,
               max_in_flight: int = 0) -> Run:
        """A run's recorder and requests (``run``'s arguments), its first requests sent."""
        rec = run_recorder(self.dep.num_gpus, slo, keep_rows, stop_past, window_s, closed_loop)
        return Run(self, workload, closed_loop, rec, after_step, stop_when_behind,
                   max_in_flight)

    def _stepped(self, run: Run, finished: list[Request]) -> bool:
        """After a step (in the pipeline, a micro-batch's output back): the gauges read, the
        after-step hook called, the finished recorded (a closed loop sending the next for
        each); True where the run stops here (``Run.over_steps``)."""
        s = self.scheduler
        run.rec.sample(self.now_s, len(s.running), len(s.waiting), self.pool.usage,
                       s.preemptions)
        if s.full and not run.rec.fill_reason:  # the batch's first filling, seen now
            run.rec.batch_filled(self.now_s, s.full)
        if run.after_step is not None:
            self._hook(run)
        if finished:
            run.finish(finished)
        return run.over_steps()

    def _hook(self, run: Run) -> None:
        """The run's after-step hook, if any, the running decodes' counters written back
        first."""
        if run.after_step is not None:
            self.fast.sync()
            run.after_step(self)

    def _result(self, run: Run) -> SimResult:
        s, rec = self.scheduler, run.rec
        rec.readmit_hit_blocks = self.pool.own_hits
        return rec.result(self.now_s, s.preemptions, self.pool.hits, self.steps,
                          self.now_s - run.idle_s, self.profile)

    def arrive(self, r: Request, rec: Recorder) -> bool:
        """r comes: recorded, then refused with its reason or queued, the queue it joined
        noted (``Recorder.waiting_at_arrival``); False if refused."""
        rec.arrive(r)
        reason, detail = self._reject_reason(r)
        if reason:
            r.status, r.reason = REJECTED, reason
            rec.reject(r, detail)
            self._note_queue(rec)
            return False
        budget = self.config.max_num_batched_tokens
        if refuses_whole_prompt(r.prompt_tokens, budget, self.config.chunked_prefill):
            rec.over_budget_prompts += 1  # the engine would need chunked prefill
            if self.config.refuse_past_budget:  # … and refuses it (SimConfig)
                r.status, r.reason = REJECTED, whole_prompt_refusal(self.dep.engine, budget)
                rec.reject(r, f"request {r.id}, {r.prompt_tokens:,} prompt tokens")
                self._note_queue(rec)
                return False
        r.queued_s = max(self.formed_s(self.now_s), r.arrival_s)
        self.scheduler.add(r)
        self._note_queue(rec)
        return True

    def stepped(self, start_s: float) -> None:
        """A step ran from ``start_s`` to now (``formed_s`` reads it)."""
        self._step_s = (start_s, self.now_s)

    def formed_s(self, now_s: float) -> float:
        """When the batch scheduled to run from ``now_s`` was formed, as the engine stamps a
        request taken in, or scheduled, then (vLLM's QUEUED and SCHEDULED events): now, or
        under async scheduling, on an engine busy through the step that ends now, as that
        step began (vLLM's step_with_batch_queue schedules batch k+1 as batch k starts, and
        takes in new requests between the two; a request arriving during step k is taken in
        and scheduled as step k+1 begins, and runs in step k + 2)."""
        start_s, end_s = self._step_s
        return start_s if self.lagged and end_s == now_s else now_s

    def _note_queue(self, rec: Recorder) -> None:
        """The queue an arrival joined, and the room the running batch had then
        (``queue_reader``: this engine's, or a dense model's ranks' together)."""
        rec.queued(self.now_s, *self.queue_reader())

    def queue_room(self) -> tuple[int, float]:
        """The requests waiting to start, and those the running batch could still take: the
        seats under max_num_seqs, or the pool's free share at the running requests' mean
        hold (703 running at 90.9 % of the pool: 70 more), whichever is fewer."""
        s, usage = self.scheduler, self.pool.usage
        running = len(s.running)
        room = float(self.config.max_num_seqs - running)
        if usage > 0:
            room = min(room, running * (1 - usage) / usage)
        return len(s.waiting), max(0.0, room)

    def _advance(self, next_arrival: float, rec: Recorder) -> list[Request]:
        """Run one step, or several identical decode steps; return who finished. Requests
        that finished a step earlier under async scheduling (``retiring``) held their seats
        and blocks through it — the batch was formed before their finish was read — and
        leave at its end: one step, not a run of them."""
        retiring, self.retiring = self.retiring, []
        if retiring:
            next_arrival = self.now_s
        finished = self._take_step(next_arrival, rec)
        if finished is None and retiring:  # nothing to run beside them (the pool short, the
            self._release(retiring)  # batch empty): the engine waits for their output first
            retiring = []
            finished = self._take_step(next_arrival, rec)
        if finished is None:
            raise InputError("the engine cannot schedule: a request needs more blocks "
                             "than the pool frees")  # guarded by _reject_reason
        if retiring:
            self._release(retiring)
        return finished

    def _release(self, retiring: list[Request]) -> None:
        """Finished requests' seats and blocks freed, a step after their finish (async)."""
        for r in retiring:
            self.pool.release(r)
        self.scheduler.seats_held -= len(retiring)
        self.scheduler.batch_full = False

    def _take_step(self, next_arrival: float, rec: Recorder) -> list[Request] | None:
        """One step, or a run of decode steps; None where the scheduler found nothing to
        run."""
        fast = self.fast
        if self._bulk and (fast.in_bulk or fast.enter()):
            finished = fast.advance(next_arrival, rec)
            if finished is not None:
                return finished
            fast.leave()
            if fast.ran_nothing:  # as the plain step's empty batch: nothing scheduled again
                return None
        batch = self.scheduler.schedule(self.now_s)
        if self.scheduler.waiting and self.scheduler.budget_full(batch):
            rec.budget_full_steps += 1
        return self._step(batch, rec) if batch else None

    # -- one step -------------------------------------------------------------------------
    def passes_s(self, seqs: list[Seq], graphed: bool | None = None,
                 timer: StepTimer | None = None) -> float:
        """A batch's time on ``timer`` (None: the target's): one pass, or for llama.cpp one
        per ubatch, pipelined over a layer split's stages where llama.cpp pipelines it."""
        parts = split_ubatches(seqs, self.config.ubatch_tokens) if self.config.ubatch_tokens \
            else [seqs]
        timer = timer or self.timer
        return pipelined_s([timer.time_s(batch_shape(self.dep, part), graphed)
                            for part in parts], self.ubatch_stages)

    def _time(self, batch: list[Scheduled]) -> float:
        """The step's time, and with speculative decoding its drafter's: one pass over the
        step's tokens (an EAGLE head or draft model reads what the target read), then
        drafts − 1 passes of one token for each row that samples, each pass at
        ``spec_draft_cost`` of the target's time for the same tokens; on Model Runner V2 an
        n-gram drafter's GPU lookup over the rows that sample (``spec_gpu_lookup``), at their
        mean context."""
        k, c = self.config.spec_tokens, self.config.spec_draft_cost
        if not k and self._one_pass:  # the hot path: one pass, its shape read off the rows
            decodes: list[int] = []
            chunks: list[Seq] = []
            for b in batch:
                if b.tokens == 1:
                    decodes.append(b.context)
                else:
                    chunks.append(Seq(b.tokens, b.context))
            return self.timer.rows_time_s(decodes, chunks)
        verify = k > 0 and all(b.request.num_generated and b.tokens == 1 + k for b in batch)
        seqs = [Seq(b.tokens, b.context) for b in batch]
        t = self.passes_s(seqs, True if verify else None)
        if k and c:
            sampling = [Seq(1, b.context + b.tokens) for b in batch
                        if b.context + b.tokens >= b.request.known_tokens]
            one = self.drafter.time_s(batch_shape(self.dep, sampling)) \
                if sampling and k > 1 else 0.0
            drafted = t if self.drafter is self.timer else \
                self.passes_s(seqs, True if verify else None, self.drafter)
            t = spec_step_s(t, one, k, c, drafted)
        if k and self.config.spec_gpu_lookup:
            sampled = [b.context + b.tokens for b in batch
                       if b.context + b.tokens >= b.request.known_tokens]
            if sampled:
                from ridgeline.vllm_mrv2_drafter import ngram_lookup_s

                t += ngram_lookup_s(self.dep, self.profile, len(sampled),
                                    round(sum(sampled) / len(sampled)),
                                    self.config.max_model_len, k)
        return t

    def _step(self, batch: list[Scheduled], rec: Recorder) -> list[Request]:
        return self.apply(batch, self._time(batch), rec)

    def apply(self, batch: list[Scheduled], dt: float, rec: Recorder) -> list[Request]:
        """``batch`` ran for ``dt`` seconds (its own step's time, or under data-parallel
        attention the step all the ranks took together): each request advanced, its tokens
        streamed; returns who finished."""
        started_s = self.now_s
        self.now_s += dt
        self.steps += 1
        self.stepped(started_s)
        finished: list[Request] = []
        spec = self.config.spec_tokens
        streamed = 0  # requests whose token(s) came out a step after their last ones
        for b in batch:
            r = b.request
            if r.known_tokens - r.num_computed == 1:  # decode: the fed token + accepted drafts
                gained = self._accepted(r) if spec else 1
                gained = min(gained, r.output_tokens - r.num_generated)
                r.num_computed += gained
            else:
                r.num_computed += b.tokens
                if r.num_computed < r.known_tokens:  # a prefill chunk, more to come
                    self.pool.trim(r)
                    self.pool.register(r)
                    continue
                gained = 1
            if r.num_generated == 0:
                r.first_token_s = self.now_s
            elif r.last_token_s == started_s:
                streamed += r.counted  # it had a token from the step before: the gap is dt, one
                # streamed chunk however many drafts it accepted (vllm bench serve: one ITL
                # per chunk)
            else:  # back from preemption, or left out of a step the budget ran out in
                self.gap(r, rec)
            self._credit(r, gained, finished)
        if streamed:
            rec.itl(dt, streamed)
        return finished

    def apply_decodes(self, decodes: list[Request], dt: float, rec: Recorder) -> list[Request]:
        """``apply`` of ``Scheduler.decodes_only``'s batch (each running request's one token,
        no drafts, a pool without windows: nothing to trim), its steps written out."""
        started_s = self.now_s
        self.now_s = now_s = started_s + dt
        self.steps += 1
        self.stepped(started_s)
        finished: list[Request] = []
        streamed = 0
        pool = self.pool
        for r in decodes:
            r.num_computed += 1
            if r.last_token_s == started_s:
                streamed += r.counted
            else:
                self.gap(r, rec)
            r.num_generated += 1  # (``_credit``'s)
            r.last_token_s = now_s
            if r.prefix_group >= 0:
                pool.register(r)
            if r.num_generated >= r.output_tokens:
                finished.append(self.finish(r))
        if streamed:
            rec.itl(dt, streamed)
        return finished

    def _credit(self, r: Request, gained: int, finished: list[Request]) -> None:
        """``gained`` tokens out for ``r`` now: its full blocks published to the prefix cache
        (a shared prefix's), and ``r`` finished (into ``finished``) once its output is done."""
        r.num_generated += gained
        r.last_token_s = self.now_s
        self.pool.trim(r)  # a windowed request gives back what its window passed
        if r.prefix_group >= 0:
            self.pool.register(r)
        if r.num_generated >= r.output_tokens:
            finished.append(self.finish(r))

    def gap(self, r: Request, rec: Recorder) -> None:
        """An inter-token gap that is not just this step: the client waited since r's last
        token (a preemption's stall, or steps r sat out), as `vllm bench serve` times it."""
        rec.itl(self.now_s - r.last_token_s, r.counted)

    def _accepted(self, r: Request) -> int:
        carry = self._carry.get(r.id, 0.0) + self.tokens_per_step
        whole = int(carry)
        self._carry[r.id] = carry - whole
        return max(1, whole)

    def finish(self, r: Request) -> Request:
        """r's last token is out: it leaves the running batch; its seat and blocks come free
        now, or under async scheduling (``lagged``) at the end of the next step, whose batch
        was formed before this one's output was read (vLLM: update_from_output of batch k
        runs after batch k+1 is scheduled)."""
        r.status, r.finish_s = FINISHED, self.now_s
        self.scheduler.remove(r)
        self._carry.pop(r.id, None)
        if self.lagged:
            self.retiring.append(r)
            self.scheduler.seats_held += 1
        else:
            self.pool.release(r)
        return r
