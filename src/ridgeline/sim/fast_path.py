"""The fast path: the running decodes kept as sums, and runs of decode steps taken at once.

The plain step (``Simulator``, ``fast_path=False``) schedules every running request, times
the exact batch and updates each request — O(batch) per step, the reference. Here the
running decodes are kept as sums (``DecodeSet``), so a step costs O(1) plus the requests
that change (a prefill chunk, an admission, a finish); and while nothing can change the
batch — no arrival due or held, no request finishing or due to free its seat (async
scheduling: ``Simulator._advance`` takes one step then), no prefill running, no block
shortage — k decode steps go at once: contexts grow by one token a step and step time is (close to)
linear in them, so they cost k·(t₀ + t_{k−1})/2 (a run stops where a request fills a
sliding window). A block shortage walks the running requests in order once (O(batch)) to
preempt as the plain step would. Speculative decoding (each request accepts its own number
of drafts a step) and a batch larger than the token budget take the plain step. The two are
checked against each other in the tests.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ridgeline.attention_span import Chunk, decode_keys
from ridgeline.cost import Seq, batch_shape
from ridgeline.llamacpp_batching import pipelined_s, split_ubatches
from ridgeline.sim.decodes import DecodeSet, window_caps
from ridgeline.sim.metrics import Recorder
from ridgeline.sim.request import Request
from ridgeline.sim.scheduler import Scheduled
from ridgeline.sim.token_ratio import CLIP_TOKENS

if TYPE_CHECKING:
    from ridgeline.sim.simulator import Simulator

MAX_FAST_STEPS = 4096


class FastPath:
    """A simulator's running decodes as sums (``decodes``), between ``enter`` and ``leave``:
    ``advance`` takes the next step, or k decode steps at once, on the simulator's clock.
    ``g`` counts the decode steps taken so; a member's counters are written back
    (``DecodeSet.sync``) when the scheduler asks (``sync``) and when it leaves."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.dep, self.config = sim.dep, sim.config
        self.pool, self.scheduler, self.timer = sim.pool, sim.scheduler, sim.timer
        spans = sim.timer.windows
        self.decodes = DecodeSet(sim.config.block_size, sim.config.overhead_blocks,
                                 tuple(w for w in spans if isinstance(w, int)),
                                 CLIP_TOKENS,
                                 sim.pool.cap_blocks(1) if sim.pool.window else 0,
                                 tuple(w for w in spans if isinstance(w, Chunk)),
                                 window_caps(sim.pool),
                                 tuple((w, n) for w, n in sim.pool.window_groups
                                       if w in sim.pool.chunk_sizes))
        self.in_bulk = False  # the running decodes live in self.decodes
        self.g = 0  # decode steps taken in bulk
        self._line = (0.0, 0.0)  # the step-time line of a run of decode steps: (first, slope)
        self._partial: Request | None = None  # in bulk: the one request mid-prefill
        self._unpublished: list[Request] = []  # members holding private prefix copies
        self._stall_s = 0.0  # prefill_first: time the decodes have waited since their last step
        self._stall_joiners: list[Request] = []  # … and those that joined while they waited
        self.ran_nothing = False  # advance's None: its step had nothing to run (no step)

    def sync(self) -> None:
        """Write the running decodes' counters (kept as sums in the fast path) back."""
        if self.in_bulk:
            self.decodes.sync_all(self.g)

    def decoding_held(self) -> int:
        """SGLang's estimate of the running outputs: from the sums in the fast path."""
        if self.in_bulk:
            return self.decodes.held(self.g)
        return self.scheduler.walk_decoding_held()

    def leaving(self, r: Request) -> None:
        """A running request is preempted: out of the summed decodes, its counters written."""
        if self.in_bulk and self.decodes.members.get(r.id) is r:
            self.decodes.sync(r, self.g)
            self.decodes.discard(r, self.g)

    def enter(self) -> bool:
        """Move the running decodes into self.decodes; False if the batch has a shape the
        bulk step does not handle (a prefill that is not the newest request)."""
        running = self.scheduler.running
        partial = None
        for i, r in enumerate(running):
            decoding = r.num_generated and r.to_compute == 1 \
                and r.blocks_held == self.pool.held_for(r, r.num_computed, 1) \
                and r.window_held == self.pool.window_blocks(r.num_computed, 0)
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
                               and r.last_token_s != self.sim.now_s]
        self._partial = partial
        self.in_bulk = True
        return True

    def leave(self) -> None:
        """Hand the running decodes back to the plain step, their counters written."""
        self._stall_s, self._stall_joiners = 0.0, []  # the plain step times gaps per request
        self.decodes.clear(self.g)
        self._unpublished = []
        self._partial = None
        self.in_bulk = False

    def advance(self, next_arrival: float, rec: Recorder) -> list[Request] | None:
        """One step (or k decode steps) with the decodes as sums; None: take the plain
        step instead (more decodes than the token budget holds), or, ``ran_nothing`` set,
        no step at all: the step had nothing to run, as the plain step's empty batch
        (under async scheduling a finish not yet read holds the blocks the only running
        request needed: it is preempted, and a step that preempted admits nobody)."""
        self.ran_nothing = False
        dset, pool, cfg, s, sim = self.decodes, self.pool, self.config, self.scheduler, self.sim
        g, count = self.g, dset.count
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
        grow = pool.need(partial, partial.num_computed + n, n) \
            if partial is not None and n > 0 else 0
        preempted = False
        if partial is None and need > pool.available and s.retract_for_decode():  # SGLang
            preempted, need, count = True, dset.blocks_next_step(g), dset.count
        if need + max(grow, 0) > pool.available:
            preempted = self._preempt_for_step() or preempted  # someone must give up its blocks
            count, partial = dset.count, self._partial
            n = min(partial.to_compute, budget - count) if partial is not None else 0
        elif need:
            pool.take(need)
        chunks: list[Scheduled] = []
        if partial is not None and n > 0:
            pool.grow(partial, partial.num_computed + n)
            s.cache_scheduled(partial, n)  # before the admissions, as the plain step orders it
            chunks.append(Scheduled(partial, n, partial.num_computed))
        if not preempted and not cfg.prefill_first:  # as the plain step: a step that
            s.admit_waiting(budget - count - n, sim.now_s, chunks)  # preempted admits nobody
        s.after_step(not chunks, preempted)  # SGLang's new_token_ratio: decays, or resets
        if s.waiting and count + sum(c.tokens for c in chunks) >= budget:  # the whole budget
            rec.budget_full_steps += 1  # taken, a request waiting (``Scheduler.budget_full``)
        if not count and not chunks:  # nothing to run: no step, no time (``ran_nothing``)
            self.ran_nothing = True
            return None
        if chunks or cfg.ubatch_tokens:
            dt = self._step_time_s(chunks, count)
        elif self.timer.full_attention:  # the decodes alone (most steps): as _step_time_s
            dt = self.timer.bulk_time_s(count, dset.context(g))  # times them, no lists built
        else:
            dt = self.timer.keys_time_s(count, dset.keys(g))
        sim.now_s += dt
        sim.steps += 1
        sim.stepped(sim.now_s - dt)
        self.g = g = g + 1
        dset.step_end_s = sim.now_s
        self._decode_gaps(dt, count, rec, sim.now_s)  # before _publish syncs their tokens
        if self._unpublished:
            self._publish()
        if not chunks:  # (what _chunks_done leaves for none)
            self._partial = None
            return self._close_step()
        done = self._chunks_done(chunks, rec)
        closed = self._close_step()
        return closed + [sim.finish(r) for r in done]

    def _step_time_s(self, chunks: list[Scheduled], count: int) -> float:
        """The time of a step of the ``count`` decodes (at ``self.g``) and ``chunks``."""
        cfg, dset, g = self.config, self.decodes, self.g
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
            for w in keys:  # a one-token prompt reads its context + 1 keys (window or chunk)
                keys[w] += decode_keys(ones, w)
            dt = self.timer.keys_time_s(count + len(ones), keys, prefills)
        if later:  # llama.cpp's further ubatches, pipelined as Simulator.passes_s runs them
            dt = pipelined_s([dt] + [self.timer.time_s(batch_shape(self.dep, part))
                                     for part in later], self.sim.ubatch_stages)
        return dt

    def _prefill_step(self, rec: Recorder) -> list[Request] | None:
        """prefill_first: a step of prompts alone (the one being chunked, then new requests),
        the decodes waiting; None (the plain step) if the prompt cannot get its blocks."""
        pool, s, budget = self.pool, self.scheduler, self.config.max_num_batched_tokens
        chunks: list[Scheduled] = []
        partial = self._partial
        n = min(partial.to_compute, budget) if partial is not None else 0
        if partial is not None:
            if pool.need(partial, partial.num_computed + n, n) > pool.available:
                return None  # a shortage: the plain step preempts
            pool.grow(partial, partial.num_computed + n)
            s.cache_scheduled(partial, n)
            chunks.append(Scheduled(partial, n, partial.num_computed))
        s.admit_waiting(budget - n, self.sim.now_s, chunks)
        if not chunks:
            return None
        if s.budget_full(chunks):  # (the plain step's count, ``Recorder.budget_full_steps``)
            rec.budget_full_steps += 1
        dt = self.sim.passes_s([Seq(c.tokens, c.context) for c in chunks])
        self.sim.now_s += dt
        self.sim.steps += 1
        self.sim.stepped(self.sim.now_s - dt)
        if self.decodes.count:
            self._stall_s += dt
        done = self._chunks_done(chunks, rec)
        members = self.decodes.members
        self._stall_joiners += [c.request for c in chunks if members.get(c.request.id)
                                is c.request]
        return [self.sim.finish(r) for r in done]

    def _decode_gaps(self, dt: float, count: int, rec: Recorder, end_s: float) -> None:
        """The gaps a decode step of ``count`` members ending at ``end_s`` closes: this step,
        and for the members that waited through prompt steps (prefill_first) those too —
        since its last token for one that joined meanwhile."""
        if not self._stall_joiners and not self._stall_s:  # most steps: just this one's gap
            if self.decodes.counted:
                rec.itl(dt, self.decodes.counted)
            return
        members = self.decodes.members
        joiners = [r for r in self._stall_joiners if members.get(r.id) is r]
        stayed = self.decodes.counted - sum(r.counted for r in joiners)  # the window's
        if stayed:
            rec.itl(dt + self._stall_s, stayed)
        for r in joiners:
            rec.itl(end_s - r.last_token_s, r.counted)
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
            self.pool.trim(r)  # a windowed request gives back what its window passed
            if r.num_computed < r.known_tokens:  # more prompt to come next step
                self.pool.register(r)
                if self.config.prefill_first and r.num_generated and r.to_compute == 1:
                    self._join(r)  # a recompute's last token runs with the decodes, as the
                else:  # plain step (prompt steps alone) classes it
                    self._partial = r
                continue
            if r.num_generated == 0:
                r.first_token_s = self.sim.now_s
            else:  # a preempted request's recompute ends in its next token: the gap since
                self.sim.gap(r, rec)  # its last one holds the stall
            r.num_generated += 1
            r.last_token_s = self.sim.now_s
            if r.prefix_group >= 0:
                self.pool.register(r)
            if r.num_generated >= r.output_tokens:
                done.append(r)
            else:
                self._join(r)
        return done

    def _join(self, r: Request) -> None:
        self.decodes.add(r, self.g, self.pool.windowed(r))
        if r.prefix_group >= 0 and len(r.shared) < r.prefix_tokens // self.config.block_size:
            self._unpublished.append(r)

    def _close_step(self) -> list[Request]:
        """Finish the members that are done (their windows filled first, as of this step)."""
        dset = self.decodes
        if dset.windows or dset.caps or dset.chunks or dset.chunk_groups:
            freed = dset.fill_windows(self.g)
            if freed:  # chunk groups at a chunk's start: BlockPool.trim's, in bulk
                self.pool.give_back(freed)
        finishes = dset.finishes
        if not finishes or finishes[0][0] > self.g:  # (most steps: nobody's last token)
            return []
        return [self.sim.finish(r) for r in dset.pop_finished(self.g)]

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
            self.decodes.sync(r, self.g)
            self.pool.register(r)
            if len(r.shared) < r.prefix_tokens // bs:
                keep.append(r)
        self._unpublished = keep

    def _preempt_for_step(self) -> bool:
        """A block shortage, handled as the plain step handles it: the running requests in
        order each take the blocks this step needs, and while the pool cannot give them the
        newest running request is preempted (recompute; its full blocks stay cached). O(batch),
        but only on the steps that run short. True if it preempted."""
        s, pool, g = self.scheduler, self.pool, self.g
        before = s.preemptions
        bs, budget = self.config.block_size, self.config.max_num_batched_tokens
        running, partial = s.running, self._partial
        i = 0
        while i < len(running):
            r = running[i]
            if r is partial:
                n = min(r.to_compute, budget - i)  # the decodes before it took a token each
                need = pool.need(r, r.num_computed + n, n) if n > 0 else 0
            else:  # (a windowed member at its cap takes none; a hybrid's window groups one
                # each while under theirs)
                need = self.decodes.weight_at(r, g) if (r.decode_base + g) % bs == 0 else 0
            while need > pool.available:
                victim = running[-1]
                if victim is partial:
                    self._partial = partial = None
                s.preempt_last()  # a member leaves the sums first (``leaving``)
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
        if not s.waiting or s.seats_taken >= self.config.max_num_seqs or s.batch_full:
            return False
        if not s.fits_reservation(s.waiting[0]):
            return False  # it waits for a finish, which ends any run of steps
        head = s.waiting[0]
        if not s.fits_whole(head, self.config.max_num_batched_tokens - decodes):
            return False  # a context that waits for a step with room for it whole
        return self.pool.could_admit(head, self.config.max_num_batched_tokens - decodes,
                                     self.decodes.blocks_next_step(self.g),
                                     self.config.admission_extra(head.known_tokens))

    def _bulk_steps(self, next_arrival: float) -> int:
        """How many decode steps can run before a finish, a window filling, an arrival or a
        block shortage."""
        if next_arrival <= self.sim.now_s:  # async scheduling: a request held or a finish
            return 1  # retiring ends the run at this step (``Simulator._advance``)
        dset, g = self.decodes, self.g
        k = min(dset.next_change() - g, MAX_FAST_STEPS)
        available = self._run_blocks()
        if dset.growing * ((k - 1) // dset.block_size + 1) > available:  # else surely enough
            while k > 1 and dset.blocks_over(g, k) > available:
                k //= 2
        if k <= 1:
            return 1
        count, timer = dset.count, self.timer
        if timer.full_attention:
            context = dset.context(g)
            t0 = timer.decode_time_s(count, context)
            t_last = timer.decode_time_s(count, context + (k - 1) * count)
        else:  # no member fills a window or starts a chunk inside the run: keys grow linearly
            t0 = timer.keys_time_s(count, dset.keys(g))
            t_last = timer.keys_time_s(count, dset.keys(g + k - 1))
        slope = (t_last - t0) / (k - 1)
        self._line = (t0, slope)
        room = next_arrival - self.sim.now_s
        if room < k * t0 + slope * k * (k - 1) / 2:  # the arrival comes first
            k = min(k, _steps_to_cover(room, t0, slope))
        return max(1, k)

    def _run_blocks(self) -> int:
        """Blocks a run of decode steps may take. While a request waits for a free seat, only
        free ones ahead of the first cached block in the queue: evicting a cached block could
        change what the queue head finds cached, and so whether it could start — the plain
        step would check that every step."""
        s = self.scheduler
        if s.waiting and s.seats_taken < self.config.max_num_seqs:
            return self.pool.free_before_cached()
        return self.pool.available

    def _bulk_decode(self, k: int, rec: Recorder) -> list[Request]:
        dset, g = self.decodes, self.g
        t0, slope = self._line
        t_last = t0 + slope * (k - 1)
        self.pool.take(dset.blocks_over(g, k))
        if self.config.token_ratio:
            self.scheduler.ratio.decay(k)
        if self.scheduler.waiting and dset.count >= self.config.max_num_batched_tokens:
            rec.budget_full_steps += k  # the decodes take the budget whole, a request
            # waiting: each step budget-full, as the plain step counts it
        if self._stall_s or self._stall_joiners:  # the first step's gap holds the prompt
            # steps the decodes waited through
            self._decode_gaps(t0, dset.count, rec, self.sim.now_s + t0)
            rec.itl_line(t0 + slope, t_last, k - 1, dset.counted)
        else:
            rec.itl_line(t0, t_last, k, dset.counted)
        self.sim.now_s += k * (t0 + t_last) / 2
        self.sim.steps += k
        self.sim.stepped(self.sim.now_s - t_last)
        self.g = g + k
        dset.step_end_s = self.sim.now_s
        if self._unpublished:
            self._publish()
        return self._close_step()


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
