"""vLLM V1's scheduling, in its own words.

Each step has one token budget, ``max_num_batched_tokens``, shared by decodes and
chunked prefills. Running requests go first, in order: each asks for what it has left to
compute (one token in decode, 1 + draft tokens with speculative decoding; the rest of
its prompt, cut to the budget, in prefill). If the pool has no block for a running
request, the most recently admitted running request is preempted — its blocks freed, its
tokens to be recomputed — until it fits. Then, unless this step preempted, waiting requests
are admitted first come, first served while budget, ``max_num_seqs`` seats and blocks last;
the first one that cannot get its blocks stops admission (vllm/v1/core/sched/scheduler.py).
A request's full prefix blocks enter the prefix cache as they are scheduled (allocate_slots →
cache_blocks), so one admitted later in the same step already hits them. A running request with
nothing to compute — its token still in flight down a pipeline (sim/pipeline.py) — is skipped,
as V1 skips one whose num_new_tokens is 0.

With --long-prefill-token-threshold a request takes at most that many tokens a step, the
rest of the budget left to the requests behind it (vLLM from v0.31 waives it for a request
that is alone). Near max_model_len a verify step's drafts are cut to the positions left,
and the lookahead slots end at max_model_len.

Simplified: one token budget and no separate limit on partial prefills; no priority
scheduling; preempted requests recompute (V1's only mode), never swap. TensorRT-LLM's default
capacity policy (``reserve_full``) admits a request only with its whole output's blocks
reserved, and so never preempts; without chunked prefill (its default) a context runs whole
within what the step's max_num_tokens has left, or waits. SGLang's (``prefill_first``) runs a
step of prompts alone whenever there is one to run, the running decodes waiting, and a step of
decodes otherwise; it admits by its new_token_ratio estimate (``token_ratio``,
sim/token_ratio.py); short of blocks for a decode step it retracts the request with the
fewest outputs (ties: the longest prompt) until the rest fit, keeping one, and a retracted
request queues at the back. Both publish a prompt's blocks only once it is computed (after
the step).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ridgeline.sim.blocks import BlockPool
from ridgeline.sim.request import RUNNING, WAITING, Request
from ridgeline.sim.token_ratio import PAGE_TOKENS, NewTokenRatio, held_for_output

# what first stopped the running batch growing, a request left waiting (``Scheduler.full``):
FULL_KV = "kv_cache"  # the pool: a waiting request found no blocks (or its reservation, or
# SGLang's admission estimate, refused it), or a running request was preempted for them
FULL_SEATS = "seats"  # every seat taken (max_num_seqs, SGLang's max_running_requests …)
FULL_BUDGET = "token_budget"  # the running requests alone fill a step's token budget
# ranks that filled differently read as the last of these: the pool over seats over budget
FULL_ORDER = (FULL_BUDGET, FULL_SEATS, FULL_KV)


def _nothing() -> None:
    return None


def _ignore(r: Request) -> None:
    return None


def _no_gate(prompt_tokens: int) -> int | None:
    return None


def _at_once(now_s: float) -> float:
    return now_s


@dataclass
class SchedulerConfig:
    max_num_seqs: int
    max_num_batched_tokens: int
    spec_tokens: int = 0  # draft tokens verified per decode step
    # TensorRT-LLM's default capacity policy, GUARANTEED_NO_EVICT: a request starts only if
    # the blocks of its prompt and whole output fit beside every running request's, so a
    # started request is never paused (tensorrt_llm/llmapi SchedulerConfig)
    reserve_full: bool = False
    # SGLang's default: a step is a prefill batch whenever one can be built (the prompt being
    # chunked, or new requests), else a decode batch; enable_mixed_chunk is off by default
    # (python/sglang/srt/managers/scheduler.py, get_next_batch_to_run)
    prefill_first: bool = False
    # SGLang's admission: a request starts only if its prompt and clipped output fit beside
    # the running requests' remaining outputs scaled by new_token_ratio (``token_ratio``); a
    # refusal stops admission until a running request leaves, and a retracted request waits
    # at the back of the queue (python/sglang/srt/managers/schedule_policy.py, PrefillAdder)
    token_ratio: bool = False
    # requests sent with ignore_eos: SGLang holds their remaining output whole (ratio 1)
    ignore_eos: bool = False
    # vLLM v0.19+: the blocks its whole-prompt gate asks beyond a request's own, for a prompt
    # of so many tokens (None: no gate; SimConfig.admission_extra)
    admission_extra: Callable[[int], int | None] = _no_gate
    # vLLM V1 publishes a request's full blocks when they are scheduled (allocate_slots ends in
    # cache_blocks), so a request admitted later in the same step hits them; SGLang inserts
    # into its radix tree after the forward (cache_unfinished_req), TensorRT-LLM stores a
    # context's blocks once it is computed: False, published after the step
    cache_on_schedule: bool = True
    # TensorRT-LLM's default, enable_chunked_prefill False: a context request runs whole,
    # within what the step's max_num_tokens has left, or waits (one longer than the whole
    # budget could not run at all: it is chunked here, and the report cautions it)
    chunked_prefill: bool = True
    # vLLM V1, an EAGLE, MTP or draft-model proposer: a running request's blocks also cover
    # this many slots past the step's tokens (allocate_slots' num_lookahead_tokens)
    lookahead_tokens: int = 0
    # vLLM V1: no step takes a running request's positions past max_model_len − 1 (its
    # verify step's drafts cut short near the end), nor its slots past max_model_len (the
    # lookahead with them; scheduler.py, kv_cache_manager.allocate_slots): 0, no cap
    max_model_len: int = 0
    # vLLM --long-prefill-token-threshold: a request takes at most this many tokens a step
    # (0: off); from v0.31 not while it is the only request running or waiting
    long_prefill_tokens: int = 0
    long_prefill_alone: bool = False  # True: the cap holds for a lone request too (< v0.31)


@dataclass
class Scheduled:
    request: Request
    tokens: int  # new tokens this step
    context: int  # tokens already cached before it


class Scheduler:
    def __init__(self, config: SchedulerConfig, pool: BlockPool) -> None:
        self.config = config
        self.pool = pool
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        # finished requests whose seats are not yet free: under async scheduling a finish
        # is read a step late (``Simulator.finish``), so its seat counts until then
        self.seats_held = 0
        self.preemptions = 0
        self.reserved_blocks = 0  # reserve_full: the running requests' blocks at their end
        self.ratio = NewTokenRatio()  # token_ratio: SGLang's estimate of outputs to come …
        self.batch_full = False  # … and its flag: a refusal waits for a running one to leave
        self.sync: Callable[[], None] = _nothing  # brings the running requests' counters up
        # to date (the simulator's fast path keeps its decodes as sums) …
        self.leaving: Callable[[Request], None] = _ignore  # … and takes a preempted one out
        self.decoding_held: Callable[[], int] = self.walk_decoding_held
        # what first stopped the batch growing (FULL_KV, FULL_SEATS, FULL_BUDGET), "" until
        # then: set once, the step's end read by the run's loop (``Recorder.batch_filled``)
        self.full = ""
        # when the batch scheduled at a time was formed (``Simulator.formed_s``): then, here
        self.formed_at: Callable[[float], float] = _at_once

    @property
    def seats_taken(self) -> int:
        """Seats under max_num_seqs in use: the running requests, and the finished ones not
        yet released (async scheduling)."""
        return len(self.running) + self.seats_held

    def reservation(self, r: Request) -> int:
        """Under reserve_full, the blocks of r's whole life, its last verify step's drafts too:
        TensorRT-LLM reserves ceil((prompt + max_new_tokens) ÷ tokens_per_block)
        (KVCacheManager::getRemainingBlocksToCompletion), the never-fed last token's slot
        included."""
        if not self.config.reserve_full:
            return 0
        return self.pool.blocks_for(r.max_cached_tokens + 1 + self.config.spec_tokens)

    def fits_reservation(self, r: Request) -> bool:
        """Under reserve_full, whether r's whole life fits beside the running requests'."""
        return self.reserved_blocks + self.reservation(r) <= self.pool.total

    def walk_decoding_held(self) -> int:
        """Σ clipped remaining output of the running requests that decode (the simulator's
        fast path counts them from its sums instead)."""
        return sum(held_for_output(q) for q in self.running
                   if q.num_generated and q.to_compute <= 1)

    def fits_ratio(self, r: Request, prefilling: int = 0) -> bool:
        """Under token_ratio, SGLang's admission test for waiting r: its prompt still to
        compute, its clipped output and a page, below the free and evictable cache (its own
        cached prefix locked) less the running requests' clipped remaining outputs — scaled
        by new_token_ratio for those decoding (whole, for ignore_eos requests), whole for
        those still in their prompt (``prefilling``: SGLang reserves an admitted request's
        whole output; under prefill_first they are the step's prompts, none when the head is
        asked before a step). A request's max_new_tokens is taken to be its output (a client
        that sets max_tokens to it). With nothing running the test is waived: SGLang caps a
        request's output at what the pool holds."""
        if not self.config.token_ratio or not self.running:
            return True
        decoding = self.decoding_held()
        pool = self.pool
        blocks, locked = pool.prefix_hit(r)
        cached = blocks * pool.block_size if not r.shared and not r.num_computed \
            else r.num_computed
        ratio = 1.0 if self.config.ignore_eos else self.ratio.value
        room = (pool.available - locked) * pool.block_size - decoding * ratio - prefilling
        return r.known_tokens - cached + held_for_output(r) + PAGE_TOKENS < room

    def after_step(self, decoded: bool, preempted: bool) -> None:
        """Under token_ratio: a decode step lowers the ratio; a step that preempted sets it
        from the survivors' outputs."""
        if not self.config.token_ratio:
            return
        if preempted:
            self.sync()
            self.ratio.retracted(q for q in self.running
                                 if q.num_generated and q.to_compute <= 1)
        elif decoded:
            self.ratio.decay()

    def remove(self, r: Request) -> None:
        """r leaves the running batch (finished), its reservation with it."""
        self.running.remove(r)
        self.reserved_blocks -= self.reservation(r)
        self.batch_full = False

    def add(self, r: Request) -> None:
        self.waiting.append(r)

    def preempt_last(self) -> Request:
        """Preempt the newest running request: its blocks freed (full ones stay cached), its
        tokens to be recomputed, first in the queue."""
        return self.preempt(self.running[-1])

    def retract_for_decode(self) -> bool:
        """Under token_ratio, before a decode step: while the pool cannot give every decoding
        request its next token's blocks, retract the one with the fewest outputs (ties: the
        longest prompt), keeping one, as SGLang's retract_decode does. True if it did."""
        if not self.config.token_ratio:
            return False
        self.sync()
        pool, spec = self.pool, self.config.spec_tokens
        decoding = [q for q in self.running if q.num_generated and q.to_compute <= 1]

        def need(q: Request) -> int:
            return max(0, pool.blocks_for(q.num_computed + 1 + spec) - q.blocks_held)

        short = sum(need(q) for q in decoding) - pool.available
        retracted = False
        while short > 0 and len(decoding) > 1:
            victim = min(decoding, key=lambda q: (q.num_generated, -q.prompt_tokens))
            decoding.remove(victim)
            short -= need(victim)  # it asks for no block now …
            available = pool.available
            self.preempt(victim)
            short -= pool.available - available  # … and gives back what it held
            retracted = True
        return retracted

    def preempt(self, victim: Request) -> Request:
        """Preempt a running request: its blocks freed (full ones stay cached), its tokens to
        be recomputed, first in the queue (SGLang: last)."""
        self.leaving(victim)
        self.running.remove(victim)
        self.reserved_blocks -= self.reservation(victim)
        # vLLM frees every full block into the prefix cache; SGLang's radix tree holds the
        # prompt (inserted as it was prefilled), and the decoded tokens' KV is freed
        self.pool.retire(victim, victim.prompt_tokens if self.config.token_ratio else None)
        victim.num_computed = 0
        victim.status = WAITING
        victim.preemptions += 1
        self.preemptions += 1
        self.full = self.full or FULL_KV
        self.batch_full = False
        if self.config.token_ratio:  # SGLang: a retracted request queues behind the rest
            self.waiting.append(victim)
        else:
            self.waiting.appendleft(victim)
        return victim

    def prefill_ready(self, budget: int) -> bool:
        """prefill_first: is there a prompt to run — one being chunked, or a waiting request
        that could start with this budget?"""
        return any(r.to_compute > 1 or not r.num_generated for r in self.running) \
            or self.head_ready(budget)

    def head_ready(self, budget: int) -> bool:
        """Could the waiting queue's head start now with this budget (a seat, its blocks)?
        Under token_ratio, a head that cannot is refused as SGLang refuses it."""
        if not self.waiting:
            return False
        ready = self.seats_taken < self.config.max_num_seqs \
            and self.fits_reservation(self.waiting[0]) and not self.batch_full \
            and self._room_for(self.waiting[0], budget)
        if not ready and not self.full:
            self.full = self.why_full(budget)
        return ready

    def cache_scheduled(self, r: Request, tokens: int) -> None:
        """vLLM V1 (cache_on_schedule): r was given blocks for ``tokens`` more tokens this
        step; publish the full blocks of its group's prefix among them now, as allocate_slots
        does (cache_blocks up to num_computed + num_new_tokens), so that a request admitted
        after it in this step hits them. Eight users of one 800-token prefix starting
        together: the first computes 1,000 tokens, the other seven 200 each."""
        if self.config.cache_on_schedule and r.prefix_group >= 0 \
                and r.num_computed < r.prefix_tokens:  # a chunk inside its prefix (a decode
            # keeping a private copy retries after the step, as before)
            self.pool.register(r, min(r.num_computed + tokens, r.prefix_tokens))

    def fits_whole(self, r: Request, budget: int) -> bool:
        """Without chunked prefill (TensorRT-LLM's default), whether waiting r's context —
        its prompt less its cached prefix — runs whole within ``budget``. A context longer
        than the whole max_num_tokens could never run so: it is let through, to be chunked."""
        if self.config.chunked_prefill:
            return True
        pool = self.pool
        cached = pool.prefix_hit(r)[0] * pool.block_size if not r.shared \
            and not r.num_computed else r.num_computed
        tokens = r.known_tokens - cached
        return tokens <= budget or tokens > self.config.max_num_batched_tokens

    def _room_for(self, r: Request, budget: int, prefilling: int = 0) -> bool:
        """Whether r gets its first chunk's blocks (and, under token_ratio, passes SGLang's
        test; without chunked prefill, runs whole within ``budget``); under token_ratio a
        refusal with requests running sets the batch full."""
        if not self.fits_whole(r, budget):
            return False
        if self.pool.could_admit(r, budget, whole=self.config.admission_extra(r.known_tokens)) \
                and self.fits_ratio(r, prefilling):
            return True
        if self.config.token_ratio:
            self.batch_full = bool(self.running)
        return False

    def long_prefill_cap(self) -> int:
        """The most tokens a request takes this step under --long-prefill-token-threshold,
        0 for no cap: the threshold, unless (vLLM v0.31+) the request is alone, running or
        waiting, with nobody to hold back."""
        cap = self.config.long_prefill_tokens
        # (a finish not yet read under async scheduling is still in vLLM's running list)
        if cap and not self.config.long_prefill_alone \
                and self.seats_taken + len(self.waiting) <= 1:
            return 0
        return cap

    def schedule(self, now_s: float) -> list[Scheduled]:
        budget = self.config.max_num_batched_tokens
        only = None  # prefill_first: "prefill" (prompts alone) or "decode" (decodes alone)
        if self.config.prefill_first:
            only = "prefill" if self.prefill_ready(budget) else "decode"
        retracted = only == "decode" and self.retract_for_decode()
        out, left, preempted = self._run_running(budget, only)
        preempted = preempted or retracted
        if not preempted and only != "decode":  # a step that preempted runs the running
            self.admit_waiting(left, now_s, out)  # requests only
        decoded = only == "decode"
        if only == "prefill" and not out:  # a prompt that could not get its blocks leaves
            retracted = self.retract_for_decode()  # the step to the decodes
            out, _, again = self._run_running(budget, "decode")
            preempted, decoded = preempted or again or retracted, True
        self.after_step(decoded, preempted)
        return out

    def budget_full(self, batch: list[Scheduled]) -> bool:
        """Whether ``batch`` took the step's whole token budget, decodes and prompt chunks
        together, with a request still waiting: the budget, not the pool or the seats, held
        it back this step (10 tokens a step, four decodes and a 512-token prompt's 6-token
        chunk, the next prompt waiting)."""
        return bool(self.waiting) and bool(batch) \
            and sum(b.tokens for b in batch) >= self.config.max_num_batched_tokens

    def _run_running(self, budget: int, only: str | None) -> tuple[list[Scheduled], int, bool]:
        """The running requests in order, each its tokens within the budget, preempting the
        newest while the pool is short; ``only`` a prefill or a decode step's. Returns the
        batch, the budget left and whether anyone was preempted."""
        out: list[Scheduled] = []
        spec, lookahead = self.config.spec_tokens, self.config.lookahead_tokens
        max_len, cap = self.config.max_model_len, self.long_prefill_cap()
        preempted = False
        running, need = self.running, self.pool.need
        publish = self.config.cache_on_schedule  # (``cache_scheduled``: prefix groups only)
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            n = r.prompt_tokens + r.num_generated - r.num_computed
            if n <= 0:  # its token is in flight (a pipeline, sim/pipeline.py): V1 skips it
                i += 1
                continue
            if only is not None and (only == "decode") != (n == 1 and r.num_generated > 0):
                i += 1  # a prefill step runs no decode, a decode step no prompt
                continue
            if n == 1:
                n += spec
            if 0 < cap < n:
                n = cap
            if n > budget:
                n = budget
            slots = r.num_computed + n + lookahead
            if max_len:  # vLLM: positions up to max_model_len − 1, slots up to max_model_len
                n = min(n, max(1, max_len - 1 - r.num_computed))
                slots = min(r.num_computed + n + lookahead, max_len)
            if need(r, slots, slots - r.num_computed) <= 0:
                if publish and r.prefix_group >= 0:
                    self.cache_scheduled(r, n)
                out.append(Scheduled(r, n, r.num_computed))  # its blocks have room
                budget -= n
                i += 1
                continue
            while not self.pool.grow(r, slots):
                preempted = True
                victim = self.preempt_last()
                if victim is r:
                    break
            if r.status != RUNNING:
                break  # r itself was preempted: nothing behind it can run either
            self.cache_scheduled(r, n)
            out.append(Scheduled(r, n, r.num_computed))
            budget -= n
            i += 1
        return out, budget, preempted

    def decodes_only(self) -> tuple[list[Request], int] | None:
        """``schedule``'s batch, where nobody waits and every running request decodes, on
        vLLM's steps (no drafts, lookahead or prefill-first) over a pool without windows:
        each running request's one token, the blocks it crosses into taken in running order,
        without ``_run_running``'s asks of each. Returns the requests (each ``Scheduled(r, 1,
        r.num_computed)``) and their contexts' sum; None where one is not a decode, the budget
        leaves some out, or the pool is short (``schedule`` preempts): nothing changed then.
        A data-parallel rank's step beside another rank's prompt chunk (sim/data_parallel.py)."""
        running, cfg, pool = self.running, self.config, self.pool
        if self.waiting or len(running) > cfg.max_num_batched_tokens or cfg.prefill_first \
                or cfg.spec_tokens or cfg.lookahead_tokens or pool.window or pool.window_groups:
            return None
        max_len, bs, overhead = cfg.max_model_len, pool.block_size, pool.overhead
        short: list[tuple[Request, int]] = []  # (a decode crossing into a block, its slots)
        blocks = context = 0
        for r in running:
            c = r.num_computed
            if r.prompt_tokens + r.num_generated - c != 1 or not r.num_generated \
                    or (r.prefix_group >= 0 and c < r.prefix_tokens):  # (``cache_scheduled``)
                return None
            context += c
            slots = min(c + 1, max_len) if max_len else c + 1  # (``_run_running``'s cap)
            # ``BlockPool.need``: its table's blocks (``table_blocks``, slots > 0) less its own
            need = -(-slots // bs) + overhead - r.private_blocks - len(r.shared)
            if need > 0:
                blocks += need
                short.append((r, slots))
        if blocks > pool.available:
            return None
        for r, slots in short:  # in running order, as the walk takes them
            pool.grow(r, slots)
        return list(running), context

    def admit_waiting(self, budget: int, now_s: float, out: list[Scheduled]) -> int:
        """Admit waiting requests first come, first served while budget, seats and blocks
        last; append them to ``out`` and return the budget left. A request that cannot get
        its blocks is not touched: its cached prefix keeps its place in the eviction order
        (vLLM's allocate_slots checks before it claims cached blocks)."""
        if not self.waiting:  # most steps: nobody waits, nothing to admit or explain
            return budget
        prefilling = sum(held_for_output(x.request) for x in out  # the step's prompts
                         if not (x.request.num_generated and x.request.to_compute <= 1)) \
            if self.config.token_ratio else 0
        cap = self.long_prefill_cap()
        while self.waiting and budget > 0 and self.seats_taken < self.config.max_num_seqs \
                and not self.batch_full:
            r = self.waiting[0]
            take = min(budget, cap) if cap else budget  # the most its first chunk takes
            if not (self.fits_reservation(r) and self._room_for(r, take, prefilling)):
                break
            prefilling += held_for_output(r) if self.config.token_ratio else 0
            if not r.shared and r.num_computed == 0:
                r.num_computed = self.pool.admit(r)
            n = min(r.to_compute, take)
            self.pool.grow(r, r.num_computed + n)
            self.cache_scheduled(r, n)
            self.waiting.popleft()
            r.status = RUNNING
            if r.first_scheduled_s < 0:
                r.first_scheduled_s = now_s
                r.scheduled_s = max(self.formed_at(now_s), r.queued_s)
            self.running.append(r)
            self.reserved_blocks += self.reservation(r)
            out.append(Scheduled(r, n, r.num_computed))
            budget -= n
        if self.waiting and not self.full:
            self.full = self.why_full(min(budget, cap) if cap else budget)
        return budget

    def note_full_beside(self, decodes: int) -> None:
        """Where a step of ``decodes`` running decodes alone leaves the queue's head waiting
        (no seat, or the batch full), ``full`` as that step's ``schedule`` reads it, once:
        ``head_ready``'s reading of the whole budget (prefill-first), or ``admit_waiting``'s of
        what the decodes left. A data-parallel run of lock-step decode steps takes them
        without scheduling (sim/data_parallel.py)."""
        if not self.waiting or self.full:
            return
        budget = self.config.max_num_batched_tokens
        if self.config.prefill_first:
            self.full = self.why_full(budget)
            return
        budget -= decodes
        cap = self.long_prefill_cap()
        self.full = self.why_full(min(budget, cap) if cap else budget)

    def why_full(self, budget: int) -> str:
        """Why the waiting queue's head did not start with ``budget`` tokens left in the
        step, where the running batch is full (FULL_SEATS, FULL_BUDGET, FULL_KV); "" where it
        is not: the step's budget went to prompts, or a context waits for a step with room
        for it whole. DeepSeek-V3 on eight H200s at 10 req/s of 2,000 + 1,000 tokens, at
        38.4 s: 367 running, the pool 99.9 % full, the head's prompt short of blocks: FULL_KV."""
        cfg = self.config
        if self.seats_taken >= cfg.max_num_seqs:
            return FULL_SEATS
        if not cfg.prefill_first and len(self.running) * (1 + cfg.spec_tokens) \
                >= cfg.max_num_batched_tokens:  # (SGLang's prompts have a step of their own)
            return FULL_BUDGET
        if budget <= 0:
            return ""
        head = self.waiting[0]
        if self.batch_full or not self.fits_reservation(head):
            return FULL_KV
        return FULL_KV if self.fits_whole(head, budget) else ""
