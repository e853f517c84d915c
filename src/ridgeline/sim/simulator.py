"""The step loop: admit arrivals, schedule, time the step through step_cost, advance.

Two ways to advance, checked against each other in the tests:
- the plain step (``fast_path=False``): schedule every running request, time the exact
  batch, update each request — O(batch) per step, the reference;
- the fast path: the running decodes are kept as sums (``DecodeSet``), so a step costs
  O(1) plus the requests that change (a prefill chunk, an admission, a finish); and while
  nothing can change the batch — no arrival due, no request finishing, no prefill running,
  no block shortage — k decode steps go at once: contexts grow by one token a step and
  step time is (close to) linear in them, so they cost k·(t₀ + t_{k−1})/2 (a run stops
  where a request fills a sliding window). A block shortage walks the running requests
  in order once (O(batch)) to preempt as the plain step would. Speculative decoding (each
  request accepts its own number of drafts a step) and a batch larger than the token
  budget take the plain step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from ridgeline.cost import Seq, batch_shape
from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile
from ridgeline.errors import InputError
from ridgeline.sim.blocks import BlockPool
from ridgeline.sim.config import SimConfig, tokens_per_step
from ridgeline.sim.decodes import DecodeSet
from ridgeline.sim.metrics import OVERLOAD_SLACK, Recorder, SimResult
from ridgeline.sim.request import FINISHED, REJECTED, Request
from ridgeline.sim.scheduler import Scheduled, Scheduler, SchedulerConfig
from ridgeline.sim.timer import StepTimer
from ridgeline.sim.token_ratio import CLIP_TOKENS

MAX_FAST_STEPS = 4096
CHECK_STEPS = 50_000  # how often a run that may stop early asks whether it is hopelessly behind


MAX_DRAFT_TOKENS = 128  # past any proposer's draft length (EAGLE, n-gram, suffix decoding)


class Simulator:
    def __init__(self, dep: Deployment, profile: EngineProfile, config: SimConfig) -> None:
        if config.num_blocks < 1:
            raise InputError("does not fit: the KV pool holds no block")
        if not 0 <= config.spec_tokens <= MAX_DRAFT_TOKENS:
            raise InputError(f"the draft length must be 0 to {MAX_DRAFT_TOKENS}, got "
                             f"{config.spec_tokens}")
        if not 0 <= config.spec_acceptance <= 1:
            raise InputError("the draft acceptance rate is a probability in [0, 1], got "
                             f"{config.spec_acceptance:g}")
        if config.token_ratio and not config.prefill_first:
            raise InputError("SGLang's admission estimate (token_ratio) goes with its "
                             "prefill-first steps (prefill_first)")
        if not 0 <= config.spec_draft_cost <= 1:  # NaN fails both
            raise InputError("a drafter pass's cost is a share of the target's time for the "
                             "same tokens, 0 to 1 (a drafter as slow as the target gains "
                             f"nothing), got {config.spec_draft_cost:g}")
        self.dep = dep
        self.profile = profile
        self.config = config
        self.pool = BlockPool(config.num_blocks, config.block_size, config.prefix_caching,
                              config.overhead_blocks)
        self.scheduler = Scheduler(SchedulerConfig(config.max_num_seqs,
                                                   config.max_num_batched_tokens,
                                                   config.spec_tokens, config.reserve_full,
                                                   config.prefill_first, config.token_ratio,
                                                   config.ignore_eos, config.admission_extra,
                                                   config.cache_on_schedule,
                                                   config.chunked_prefill),
                                   self.pool)
        self.scheduler.sync = self._sync_decodes
        self.scheduler.leaving = self._leave_decodes
        self.scheduler.decoding_held = self._decoding_held
        self.now_s = 0.0
        self.steps = 0
        self.tokens_per_step = tokens_per_step(config.spec_tokens, config.spec_acceptance)
        self._carry: dict[int, float] = {}  # fractional accepted tokens per request
        self._line = (0.0, 0.0)  # the fast path's step-time line: (first step, slope)
        self.timer = StepTimer(dep, profile)
        self.decodes = DecodeSet(config.block_size, config.overhead_blocks,
                                 tuple(w for w in self.timer.windows if w is not None),
                                 CLIP_TOKENS)
        self._bulk = config.fast_path and not config.spec_tokens
        self._in_bulk = False  # the running decodes live in self.decodes
        self._partial: Request | None = None  # in bulk: the one request mid-prefill
        self._g = 0  # decode steps taken in bulk
        self._unpublished: list[Request] = []  # members holding private prefix copies
        self._stall_s = 0.0  # prefill_first: time the decodes have waited since their last step
        self._stall_joiners: list[Request] = []  # … and those that joined while they waited
        self._next_check = CHECK_STEPS  # the step count at which to ask ``_over_steps`` next

    def _sync_decodes(self) -> None:
        """Write the running decodes' counters (kept as sums in the fast path) back."""
        if self._in_bulk:
            self.decodes.sync_all(self._g)

    def _decoding_held(self) -> int:
        """SGLang's estimate of the running outputs: from the sums in the fast path."""
        if self._in_bulk:
            return self.decodes.held(self._g)
        return self.scheduler.walk_decoding_held()

    def _leave_decodes(self, r: Request) -> None:
        """A running request is preempted: out of the summed decodes, its counters written."""
        if self._in_bulk and self.decodes.members.get(r.id) is r:
            self.decodes.sync(r, self._g)
            self.decodes.discard(r, self._g)

    @property
    def bulk_steps(self) -> int:
        """Steps taken with the running decodes kept as sums (the rest: the plain step)."""
        return self._g

    # -- arrivals -------------------------------------------------------------------------
    def _reject_reason(self, r: Request) -> tuple[str, str]:
        """Why the engine would refuse r, as (the reason, r's own numbers); ("", "") if not."""
        if r.prompt_tokens + r.output_tokens > self.config.max_model_len:
            return (f"prompt + output exceeds max_model_len {self.config.max_model_len:,}",
                    f"request {r.id}, {r.prompt_tokens + r.output_tokens:,} tokens")
        need = self.pool.blocks_for(r.max_cached_tokens + self.config.spec_tokens)
        if need > self.pool.total:  # a verify step caches its drafts too
            return (f"needs more KV blocks than its pool's {self.pool.total:,}",
                    f"request {r.id}, {need:,} blocks")
        return "", ""

    def run(self, workload: Iterator[Request], closed_loop: int = 0, keep_rows: bool = False,
            after_step: Callable[[Simulator], None] | None = None,
            slo: tuple[float | None, float | None] = (None, None),
            window_s: tuple[float, float] | None = None,
            stop_when_behind: bool = False) -> SimResult:
        """Simulate until every request finished or was rejected.

        closed_loop > 0: keep that many requests in flight, each finish releasing the next
        (``vllm bench serve --max-concurrency``); arrival times in the workload are ignored.
        keep_rows: keep per-request rows for export. after_step: called after every step
        (the invariant tests use it). window_s: (from, until) seconds of arrival whose
        requests' latencies count (the steady state, past the warm-up and before the drain).
        stop_when_behind: an open loop may stop early, its recorder marked ``stopped_early``,
        once the engine is hopelessly behind (``_over_steps``).
        """
        run = self._begin(workload, closed_loop, keep_rows, after_step, slo, window_s,
                          stop_when_behind)
        rec, s = run.rec, self.scheduler
        while True:
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
               slo: tuple[float | None, float | None], window_s: tuple[float, float] | None,
               stop_when_behind: bool) -> Run:
        """A run's recorder and requests (``run``'s arguments), its first requests sent."""
        self._next_check = self.steps + CHECK_STEPS
        rec = Recorder(self.dep.num_gpus, *slo)
        rec.keep_rows = keep_rows
        if window_s is not None:
            rec.window_s = window_s
        rec.closed_loop = closed_loop > 0
        return Run(self, workload, closed_loop, rec, after_step, stop_when_behind)

    def _stepped(self, run: Run, finished: list[Request]) -> bool:
        """After a step (in the pipeline, a micro-batch's output back): the gauges read, the
        after-step hook called, the finished recorded (a closed loop sending the next for
        each); True where the run stops here (``_over_steps``)."""
        s = self.scheduler
        run.rec.sample(self.now_s, len(s.running), len(s.waiting), self.pool.usage,
                       s.preemptions)
        if run.after_step is not None:
            self._hook(run)
        if finished:
            run.finish(finished)
        return self._over_steps(run)

    def _hook(self, run: Run) -> None:
        """The run's after-step hook, if any, the running decodes' counters written back
        first."""
        if run.after_step is not None:
            self.decodes.sync_all(self._g)
            run.after_step(self)

    def _result(self, run: Run) -> SimResult:
        s, rec = self.scheduler, run.rec
        rec.readmit_hit_blocks = self.pool.own_hits
        return rec.result(self.now_s, s.preemptions, self.pool.hits, self.steps,
                          self.now_s - run.idle_s, self.profile)

    def _over_steps(self, run: Run) -> bool:
        """Past the step cap: an error saying what the engine serves of what is offered.
        Every CHECK_STEPS steps of an open loop that may stop early: True (the recorder marked
        ``stopped_early``) where the engine is hopelessly behind (``Recorder.hopelessly_behind``:
        under half of the arrivals past the fill have left, or, every request come, more than
        half of them wait to start, and at least 1,000 are behind), so that the rest of the run,
        the queue only lengthening or being worked through, is not simulated. No run under CHECK_STEPS
        steps, and none that keeps up, stops early."""
        rec = run.rec
        if self.steps > self.config.max_steps:
            raise InputError(step_cap_message(rec, self.config.max_steps, self.now_s,
                                              bool(run.closed_loop)))
        if not run.stop_when_behind or run.closed_loop or self.steps < self._next_check:
            return False
        self._next_check = self.steps + CHECK_STEPS
        rec.stop_reading = rec.hopelessly_behind(self.now_s, run.pending is None)
        rec.stopped_early = bool(rec.stop_reading)
        return rec.stopped_early

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
        if not self.config.chunked_prefill and r.prompt_tokens > \
                self.config.max_num_batched_tokens:  # the engine would need chunked prefill
            rec.over_budget_prompts += 1
        self.scheduler.add(r)
        self._note_queue(rec)
        return True

    def _note_queue(self, rec: Recorder) -> None:
        """The queue an arrival joined, and the requests the running batch could still take
        then: the seats under max_num_seqs, or the pool's free share at the running requests'
        mean hold (703 running at 90.9 % of the pool: 70 more), whichever is fewer."""
        s, usage = self.scheduler, self.pool.usage
        running = len(s.running)
        room = float(self.config.max_num_seqs - running)
        if usage > 0:
            room = min(room, running * (1 - usage) / usage)
        rec.queued(self.now_s, len(s.waiting), max(0.0, room))

    def _advance(self, next_arrival: float, rec: Recorder) -> list[Request]:
        """Run one step, or several identical decode steps; return who finished."""
        if self._bulk and (self._in_bulk or self._enter_bulk()):
            finished = self._bulk_advance(next_arrival, rec)
            if finished is not None:
                return finished
            self._leave_bulk()
        batch = self.scheduler.schedule(self.now_s)
        if not batch:
            raise InputError("the engine cannot schedule: a request needs more blocks "
                             "than the pool frees")  # guarded by _reject_reason
        return self._step(batch, rec)

    # -- the running decodes as sums ------------------------------------------------------
    def _enter_bulk(self) -> bool:
        """Move the running decodes into self.decodes; False if the batch has a shape the
        bulk step does not handle (a prefill that is not the newest request)."""
        running = self.scheduler.running
        partial = None
        for i, r in enumerate(running):
            decoding = r.num_generated and r.to_compute == 1 \
                and r.blocks_held == self.pool.blocks_for(r.num_computed)
            if not decoding:
                if i != len(running) - 1:
                    return False
                partial = r
        for r in running:
            if r is not partial:
                self._join(r)
        # a member whose last token came before the last step (it sat out a prompt step, or
        # the budget) has its own gap at the first decode step
        self._stall_joiners = [r for r in running if r is not partial
                               and r.last_token_s != self.now_s]
        self._partial = partial
        self._in_bulk = True
        return True

    def _leave_bulk(self) -> None:
        self._stall_s, self._stall_joiners = 0.0, []  # the plain step times gaps per request
        self.decodes.clear(self._g)
        self._unpublished = []
        self._partial = None
        self._in_bulk = False

    def _bulk_advance(self, next_arrival: float, rec: Recorder) -> list[Request] | None:
        """One step (or k decode steps) with the decodes as sums; None: take the plain
        step instead (more decodes than the token budget holds)."""
        dset, pool, cfg, s = self.decodes, self.pool, self.config, self.scheduler
        g, count = self._g, dset.count
        budget = cfg.max_num_batched_tokens
        if count > min(budget, cfg.ubatch_tokens or budget):
            return None  # the decodes alone fill a step (or, for llama.cpp, a ubatch)
        partial = self._partial
        if cfg.prefill_first and (partial is not None or s.head_ready(budget)):  # the decodes
            # are members, the partial the one prompt running: O(1), not a scan of the batch
            return self._prefill_step(rec)
        if partial is None and count and not self._could_admit(count):
            k = self._bulk_steps(next_arrival)
            if k > 1:
                return self._bulk_decode(k, rec)
        need = dset.blocks_next_step(g)
        n = min(partial.to_compute, budget - count) if partial is not None else 0
        grow = pool.blocks_for(partial.num_computed + n) - partial.blocks_held \
            if partial is not None and n > 0 else 0
        preempted = False
        if partial is None and need > pool.available and s.retract_for_decode():  # SGLang
            preempted, need, count = True, dset.blocks_next_step(g), dset.count
        if need + max(grow, 0) > pool.available:
            preempted = self._preempt_for_step() or preempted  # someone must give up its blocks
            count, partial = dset.count, self._partial
            n = min(partial.to_compute, budget - count) if partial is not None else 0
        else:
            pool.take(need)
        chunks: list[Scheduled] = []
        if partial is not None and n > 0:
            pool.grow(partial, partial.num_computed + n)
            s.cache_scheduled(partial, n)  # before the admissions, as the plain step orders it
            chunks.append(Scheduled(partial, n, partial.num_computed))
        if not preempted and not cfg.prefill_first:  # as the plain step: a step that
            s.admit_waiting(budget - count - n, self.now_s, chunks)  # preempted admits nobody
        s.after_step(not chunks, preempted)  # SGLang's new_token_ratio: decays, or resets
        pieces = [Seq(c.tokens, c.context) for c in chunks]
        later: list[list[Seq]] = []
        if cfg.ubatch_tokens:  # llama.cpp: the decodes lead the first ubatch, prompts follow
            first, *later = split_ubatches([Seq(1, 0)] * count + pieces, cfg.ubatch_tokens)
            pieces = first[count:]
        ones = [s.context_tokens for s in pieces if s.new_tokens == 1]  # one-token prompts
        prefills = [s for s in pieces if s.new_tokens > 1]
        if self.timer.full_attention:
            dt = self.timer.bulk_time_s(count + len(ones), dset.context(g) + sum(ones), prefills)
        else:
            keys = dset.keys(g)
            for w in keys:  # a one-token prompt reads its context + 1 keys, window-capped
                keys[w] += sum(c + 1 if w is None else min(c + 1, w) for c in ones)
            dt = self.timer.keys_time_s(count + len(ones), keys, prefills)
        dt += sum(self.timer.time_s(batch_shape(self.dep, part)) for part in later)
        self.now_s += dt
        self.steps += 1
        self._g = g = g + 1
        dset.step_end_s = self.now_s
        self._decode_gaps(dt, count, rec, self.now_s)  # before _publish syncs their tokens
        if self._unpublished:
            self._publish()
        done = self._chunks_done(chunks, rec)
        closed = self._close_step()
        return closed + [self._finish(r) for r in done]

    def _prefill_step(self, rec: Recorder) -> list[Request] | None:
        """prefill_first: a step of prompts alone (the one being chunked, then new requests),
        the decodes waiting; None (the plain step) if the prompt cannot get its blocks."""
        pool, s, budget = self.pool, self.scheduler, self.config.max_num_batched_tokens
        chunks: list[Scheduled] = []
        partial = self._partial
        n = min(partial.to_compute, budget) if partial is not None else 0
        if partial is not None:
            if pool.blocks_for(partial.num_computed + n) - partial.blocks_held > pool.available:
                return None  # a shortage: the plain step preempts
            pool.grow(partial, partial.num_computed + n)
            s.cache_scheduled(partial, n)
            chunks.append(Scheduled(partial, n, partial.num_computed))
        s.admit_waiting(budget - n, self.now_s, chunks)
        if not chunks:
            return None
        dt = self._passes_s([Seq(c.tokens, c.context) for c in chunks])
        self.now_s += dt
        self.steps += 1
        if self.decodes.count:
            self._stall_s += dt
        done = self._chunks_done(chunks, rec)
        members = self.decodes.members
        self._stall_joiners += [c.request for c in chunks if members.get(c.request.id)
                                is c.request]
        return [self._finish(r) for r in done]

    def _decode_gaps(self, dt: float, count: int, rec: Recorder, end_s: float) -> None:
        """The gaps a decode step of ``count`` members ending at ``end_s`` closes: this step,
        and for the members that waited through prompt steps (prefill_first) those too —
        since its last token for one that joined meanwhile."""
        members = self.decodes.members
        joiners = [r for r in self._stall_joiners if members.get(r.id) is r]
        if count - len(joiners):
            rec.itl(dt + self._stall_s, count - len(joiners))
        for r in joiners:
            rec.itl(end_s - r.last_token_s, 1)
        self._stall_s, self._stall_joiners = 0.0, []

    def _chunks_done(self, chunks: list[Scheduled], rec: Recorder) -> list[Request]:
        """The step's prompt chunks advanced: the one still prefilling kept as the partial,
        a finished prompt's first token, a recompute's next; those not done join the decodes.
        Returns the requests whose last token this was (freed after the decodes, as the plain
        step frees them: its batch lists the running decodes first)."""
        done = []
        self._partial = None
        for c in chunks:
            r = c.request
            r.num_computed += c.tokens
            if r.num_computed < r.known_tokens:  # more prompt to come next step
                self.pool.register(r)
                if self.config.prefill_first and r.num_generated and r.to_compute == 1:
                    self._join(r)  # a recompute's last token runs with the decodes, as the
                else:  # plain step (prompt steps alone) classes it
                    self._partial = r
                continue
            if r.num_generated == 0:
                r.first_token_s = self.now_s
            else:  # a preempted request's recompute ends in its next token: the gap since
                self._gap(r, rec)  # its last one holds the stall
            r.num_generated += 1
            r.last_token_s = self.now_s
            if r.prefix_group >= 0:
                self.pool.register(r)
            if r.num_generated >= r.output_tokens:
                done.append(r)
            else:
                self._join(r)
        return done

    def _join(self, r: Request) -> None:
        self.decodes.add(r, self._g)
        if r.prefix_group >= 0 and len(r.shared) < r.prefix_tokens // self.config.block_size:
            self._unpublished.append(r)

    def _close_step(self) -> list[Request]:
        """Finish the members that are done (their windows filled first, as of this step)."""
        if self.decodes.windows:
            self.decodes.fill_windows(self._g)
        done = self.decodes.pop_finished(self._g)
        return [self._finish(r) for r in done]

    def _publish(self) -> None:
        """Like the plain step, and before the step's prefill chunks publish theirs (the
        running decodes come first in its batch): members that keep private copies of their
        group's prefix, because another request published it first, publish them once the
        published copy has been evicted."""
        keep = []
        bs = self.config.block_size
        members = self.decodes.members
        for r in self._unpublished:
            if members.get(r.id) is not r:
                continue  # finished or preempted: it joins again (and is listed) if it returns
            self.decodes.sync(r, self._g)
            self.pool.register(r)
            if len(r.shared) < r.prefix_tokens // bs:
                keep.append(r)
        self._unpublished = keep

    def _preempt_for_step(self) -> bool:
        """A block shortage, handled as the plain step handles it: the running requests in
        order each take the blocks this step needs, and while the pool cannot give them the
        newest running request is preempted (recompute; its full blocks stay cached). O(batch),
        but only on the steps that run short. True if it preempted."""
        s, pool, g = self.scheduler, self.pool, self._g
        before = s.preemptions
        bs, budget = self.config.block_size, self.config.max_num_batched_tokens
        running, partial = s.running, self._partial
        i = 0
        while i < len(running):
            r = running[i]
            if r is partial:
                n = min(r.to_compute, budget - i)  # the decodes before it took a token each
                need = pool.blocks_for(r.num_computed + n) - r.blocks_held if n > 0 else 0
            else:
                need = 1 if (r.decode_base + g) % bs == 0 else 0
            while need > pool.available:
                victim = running[-1]
                if victim is partial:
                    self._partial = partial = None
                s.preempt_last()  # a member leaves the sums first (_leave_decodes)
                if victim is r:
                    return True  # nothing behind it is left to run
            if need > 0:
                if r is partial:
                    pool.grow(r, r.num_computed + min(r.to_compute, budget - i))
                else:
                    pool.take(need)
            i += 1
        return s.preemptions > before

    def _could_admit(self, decodes: int) -> bool:
        """Could the head of the queue start next step? (then steps go one at a time)"""
        s = self.scheduler
        if not s.waiting or len(s.running) >= self.config.max_num_seqs or s.batch_full:
            return False
        if not s.fits_reservation(s.waiting[0]):
            return False  # it waits for a finish, which ends any run of steps
        head = s.waiting[0]
        if not s.fits_whole(head, self.config.max_num_batched_tokens - decodes):
            return False  # a context that waits for a step with room for it whole
        return self.pool.could_admit(head, self.config.max_num_batched_tokens - decodes,
                                     self.decodes.blocks_next_step(self._g),
                                     self.config.admission_extra(head.known_tokens))

    def _bulk_steps(self, next_arrival: float) -> int:
        """How many decode steps can run before a finish, a window filling, an arrival or a
        block shortage."""
        dset, g = self.decodes, self._g
        k = min(dset.next_change() - g, MAX_FAST_STEPS)
        available = self._run_blocks()
        if dset.count * ((k - 1) // dset.block_size + 1) > available:  # else surely enough
            while k > 1 and dset.blocks_over(g, k) > available:
                k //= 2
        if k <= 1:
            return 1
        count, timer = dset.count, self.timer
        if timer.full_attention:
            context = dset.context(g)
            t0 = timer.decode_time_s(count, context)
            t_last = timer.decode_time_s(count, context + (k - 1) * count)
        else:  # no member fills a window inside the run: keys grow linearly
            t0 = timer.keys_time_s(count, dset.keys(g))
            t_last = timer.keys_time_s(count, dset.keys(g + k - 1))
        slope = (t_last - t0) / (k - 1)
        self._line = (t0, slope)
        room = next_arrival - self.now_s
        if room < k * t0 + slope * k * (k - 1) / 2:  # the arrival comes first
            k = min(k, _steps_to_cover(room, t0, slope))
        return max(1, k)

    def _run_blocks(self) -> int:
        """Blocks a run of decode steps may take. While a request waits for a free seat, only
        free ones: evicting a cached block could change what the queue head finds cached,
        and so whether it could start — the plain step would check that every step."""
        s = self.scheduler
        if s.waiting and len(s.running) < self.config.max_num_seqs:
            return self.pool.free
        return self.pool.available

    def _bulk_decode(self, k: int, rec: Recorder) -> list[Request]:
        dset, g = self.decodes, self._g
        t0, slope = self._line
        t_last = t0 + slope * (k - 1)
        self.pool.take(dset.blocks_over(g, k))
        if self.config.token_ratio:
            self.scheduler.ratio.decay(k)
        if self._stall_s or self._stall_joiners:  # the first step's gap holds the prompt
            # steps the decodes waited through
            self._decode_gaps(t0, dset.count, rec, self.now_s + t0)
            rec.itl_line(t0 + slope, t_last, k - 1, dset.count)
        else:
            rec.itl_line(t0, t_last, k, dset.count)
        self.now_s += k * (t0 + t_last) / 2
        self.steps += k
        self._g = g + k
        dset.step_end_s = self.now_s
        if self._unpublished:
            self._publish()
        return self._close_step()

    # -- one step -------------------------------------------------------------------------
    def _passes_s(self, seqs: list[Seq], graphed: bool | None = None) -> float:
        """A batch's time: one pass, or for llama.cpp one per ubatch."""
        parts = split_ubatches(seqs, self.config.ubatch_tokens) if self.config.ubatch_tokens \
            else [seqs]
        return sum(self.timer.time_s(batch_shape(self.dep, part), graphed) for part in parts)

    def _time(self, batch: list[Scheduled]) -> float:
        """The step's time, and with speculative decoding its drafter's: one pass over the
        step's tokens (an EAGLE head or draft model reads what the target read), then
        drafts − 1 passes of one token for each row that samples, each pass at
        ``spec_draft_cost`` of the target's time for the same tokens."""
        k, c = self.config.spec_tokens, self.config.spec_draft_cost
        verify = k > 0 and all(b.request.num_generated and b.tokens == 1 + k for b in batch)
        t = self._passes_s([Seq(b.tokens, b.context) for b in batch], True if verify else None)
        if k and c:
            sampling = [Seq(1, b.context + b.tokens) for b in batch
                        if b.context + b.tokens >= b.request.known_tokens]
            t += c * t
            if sampling and k > 1:
                t += (k - 1) * c * self.timer.time_s(batch_shape(self.dep, sampling))
        return t

    def _step(self, batch: list[Scheduled], rec: Recorder) -> list[Request]:
        dt = self._time(batch)
        started_s = self.now_s
        self.now_s += dt
        self.steps += 1
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
                    self.pool.register(r)
                    continue
                gained = 1
            if r.num_generated == 0:
                r.first_token_s = self.now_s
            elif r.last_token_s == started_s:
                streamed += 1  # it had a token from the step before: the gap is dt, one
                # streamed chunk however many drafts it accepted (vllm bench serve: one ITL
                # per chunk)
            else:  # back from preemption, or left out of a step the budget ran out in
                self._gap(r, rec)
            self._credit(r, gained, finished)
        if streamed:
            rec.itl(dt, streamed)
        return finished

    def _credit(self, r: Request, gained: int, finished: list[Request]) -> None:
        """``gained`` tokens out for ``r`` now: its full blocks published to the prefix cache
        (a shared prefix's), and ``r`` finished (into ``finished``) once its output is done."""
        r.num_generated += gained
        r.last_token_s = self.now_s
        if r.prefix_group >= 0:
            self.pool.register(r)
        if r.num_generated >= r.output_tokens:
            finished.append(self._finish(r))

    def _gap(self, r: Request, rec: Recorder) -> None:
        """An inter-token gap that is not just this step: the client waited since r's last
        token (a preemption's stall, or steps r sat out), as `vllm bench serve` times it."""
        rec.itl(self.now_s - r.last_token_s, 1)

    def _accepted(self, r: Request) -> int:
        carry = self._carry.get(r.id, 0.0) + self.tokens_per_step
        whole = int(carry)
        self._carry[r.id] = carry - whole
        return max(1, whole)

    def _finish(self, r: Request) -> Request:
        r.status, r.finish_s = FINISHED, self.now_s
        self.scheduler.remove(r)
        self.pool.release(r)
        self._carry.pop(r.id, None)
        return r


class Run:
    """One run's requests and records, for the step loop (``Simulator.run``) and the
    pipeline's event loop alike: its recorder; the requests still to come, an open loop's at
    their arrival times (``arrive_due``), a closed loop's one as each finishes (seats past the
    workload's requests stay empty); the simulated time spent idle; the after-step hook, and
    whether the run may stop early."""

    def __init__(self, sim: Simulator, workload: Iterator[Request], closed_loop: int,
                 rec: Recorder, after_step: Callable[[Simulator], None] | None,
                 stop_when_behind: bool) -> None:
        self.sim = sim
        self.rec = rec
        self.closed_loop = closed_loop
        self.after_step = after_step
        self.stop_when_behind = stop_when_behind
        self.idle_s = 0.0  # simulated time with nothing to run
        self.source = iter(workload)
        self.pending: Request | None = None  # an open loop's next arrival
        if closed_loop:
            for _ in range(closed_loop):
                if not self.send_next():
                    break
        else:
            self.pending = next(self.source, None)

    @property
    def next_arrival_s(self) -> float:
        return self.pending.arrival_s if self.pending is not None else math.inf

    def arrive_due(self) -> None:
        """An open loop's requests whose arrival time has come, in order."""
        sim, pending = self.sim, self.pending
        while pending is not None and pending.arrival_s <= sim.now_s:
            sim.arrive(pending, self.rec)
            pending = next(self.source, None)
        self.pending = pending

    def send_next(self) -> bool:
        """Closed loop: send the next request now; a rejected one frees its seat at once.
        False once the workload has no more."""
        while (r := next(self.source, None)) is not None:
            r.arrival_s = self.sim.now_s
            if self.sim.arrive(r, self.rec):
                return True
        return False

    def finish(self, finished: list[Request]) -> None:
        """Record the requests a step finished; a closed loop sends the next for each."""
        for r in finished:
            self.rec.finish(r)
            if self.closed_loop:
                self.send_next()

    def idle(self) -> bool:
        """Nothing runs: time passes, idle, to the next arrival; False where none is to come
        (a closed loop's come only as others finish)."""
        if self.closed_loop or self.pending is None:
            return False
        self.idle_s += self.pending.arrival_s - self.sim.now_s
        self.sim.now_s = self.pending.arrival_s  # idle until the next arrival
        return True


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


def split_ubatches(batch: list[Seq], size: int) -> list[list[Seq]]:
    """A llama.cpp batch cut, in order, into ubatches of at most ``size`` tokens, a prompt
    split where a ubatch fills (its second part continuing the first's context)."""
    parts: list[list[Seq]] = [[]]
    room = size
    for s in batch:
        left, context = s.new_tokens, s.context_tokens
        while left:
            if not room:
                parts.append([])
                room = size
            take = min(left, room)
            parts[-1].append(Seq(take, context))
            left, context, room = left - take, context + take, room - take
    return parts


def _steps_to_cover(room_s: float, t0: float, slope: float) -> int:
    """The fewest steps, the j-th taking t0 + slope·j, whose total reaches room_s."""
    if room_s <= 0:
        return 0
    if slope == 0:
        m = math.ceil(room_s / t0)
    else:  # slope/2·m² + (t0 − slope/2)·m − room = 0
        b = t0 - slope / 2
        m = math.ceil((-b + math.sqrt(b * b + 2 * slope * room_s)) / slope)
    m = max(m, 1)
    while m > 1 and (m - 1) * t0 + slope * (m - 1) * (m - 2) / 2 >= room_s:
        m -= 1
    while m * t0 + slope * m * (m - 1) / 2 < room_s:
        m += 1
    return m
