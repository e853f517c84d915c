"""The step loop: admit arrivals, schedule, time the step through step_cost, advance.

A fast path advances many decode steps at once while nothing can change the batch: no
arrival due, no request finishing, no prefill running, no block shortage. Contexts then
grow by one token per step and step time is (close to) linear in them, so the k steps
cost k·(t₀ + t_{k−1})/2 — checked against the plain loop in the tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ridgeline.cost import BatchShape, Seq, batch_shape, shape_time_s
from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile
from ridgeline.errors import InputError
from ridgeline.sim.blocks import BlockPool
from ridgeline.sim.metrics import Recorder, SimResult
from ridgeline.sim.request import FINISHED, REJECTED, Request
from ridgeline.sim.scheduler import Scheduled, Scheduler, SchedulerConfig

MAX_FAST_STEPS = 4096


@dataclass(frozen=True)
class SimConfig:
    num_blocks: int
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    prefix_caching: bool = True
    spec_tokens: int = 0  # speculative decoding: draft length
    spec_acceptance: float = 0.0  # chance each draft token is accepted
    spec_draft_cost: float = 0.0  # one draft token's cost, as a share of a decode step
    fast_path: bool = True
    max_steps: int = 50_000_000


class Simulator:
    def __init__(self, dep: Deployment, profile: EngineProfile, config: SimConfig) -> None:
        if config.num_blocks < 1:
            raise InputError("does not fit: the KV pool holds no block")
        if config.spec_tokens < 0:
            raise InputError(f"the draft length must be ≥ 0, got {config.spec_tokens}")
        if not 0 <= config.spec_acceptance <= 1:
            raise InputError("the draft acceptance rate is a probability in [0, 1], got "
                             f"{config.spec_acceptance:g}")
        if config.spec_draft_cost < 0:
            raise InputError(f"a draft token's cost must be ≥ 0, got {config.spec_draft_cost:g}")
        self.dep = dep
        self.profile = profile
        self.config = config
        self.pool = BlockPool(config.num_blocks, config.block_size, config.prefix_caching)
        self.scheduler = Scheduler(SchedulerConfig(config.max_num_seqs,
                                                   config.max_num_batched_tokens,
                                                   config.spec_tokens), self.pool)
        self.now_s = 0.0
        self.steps = 0
        a, k = config.spec_acceptance, config.spec_tokens
        # expected tokens per verify step: 1 + a + a² + … + a^k (Leviathan et al. 2023)
        self.tokens_per_step = sum(a**i for i in range(k + 1)) if k else 1.0
        self._carry: dict[int, float] = {}  # fractional accepted tokens per request
        self._line = (0.0, 0.0)  # the fast path's step-time line: (first step, slope)

    # -- arrivals -------------------------------------------------------------------------
    def _reject_reason(self, r: Request) -> str:
        if r.prompt_tokens + r.output_tokens > self.config.max_model_len:
            return (f"prompt + output = {r.prompt_tokens + r.output_tokens} tokens exceeds "
                    f"max_model_len {self.config.max_model_len}")
        need = self.pool.blocks_for(r.max_cached_tokens)
        if need > self.pool.total:
            return f"needs {need} KV blocks, the whole pool has {self.pool.total}"
        return ""

    def run(self, workload: Iterator[Request], closed_loop: int = 0, keep_rows: bool = False,
            after_step: Callable[[Simulator], None] | None = None,
            slo: tuple[float | None, float | None] = (None, None)) -> SimResult:
        """Simulate until every request finished or was rejected.

        closed_loop > 0: keep that many requests in flight, each finish releasing the next
        (``vllm bench serve --max-concurrency``); arrival times in the workload are ignored.
        keep_rows: keep per-request rows for export. after_step: called after every step
        (the invariant tests use it).
        """
        rec = Recorder(self.dep.num_gpus, *slo)
        rec.keep_rows = keep_rows
        pending: Request | None = None
        source = iter(workload)

        def next_request() -> Request | None:
            return next(source, None)

        def admit_next() -> None:
            """Closed loop: send the next request now; a rejected one frees its seat at once."""
            while (r := next_request()) is not None:
                r.arrival_s = self.now_s
                if self._arrive(r, rec):
                    return

        if closed_loop:
            for _ in range(closed_loop):
                admit_next()
        else:
            pending = next_request()
        s = self.scheduler
        while True:
            while pending is not None and pending.arrival_s <= self.now_s:
                self._arrive(pending, rec)
                pending = next_request()
            if not s.running and not s.waiting:
                if closed_loop or pending is None:
                    break
                self.now_s = pending.arrival_s  # idle until the next arrival
                continue
            batch = s.schedule(self.now_s)
            if not batch:
                raise InputError("the engine cannot schedule: a request needs more blocks "
                                 "than the pool frees")  # guarded by _reject_reason
            next_arrival = pending.arrival_s if pending is not None else float("inf")
            k = self._fast_steps(batch, next_arrival) if self.config.fast_path else 1
            finished = self._advance_decodes(batch, k, rec) if k > 1 else self._step(batch, rec)
            rec.sample(self.now_s, len(s.running), len(s.waiting), self.pool.usage,
                       s.preemptions)
            if after_step is not None:
                after_step(self)
            for r in finished:
                rec.finish(r)
                if closed_loop:
                    admit_next()
            if self.steps > self.config.max_steps:
                raise InputError(f"stopped after {self.config.max_steps:,} steps")
        return rec.result(self.now_s, s.preemptions, self.pool.hits, self.steps)

    def _arrive(self, r: Request, rec: Recorder) -> bool:
        reason = self._reject_reason(r)
        if reason:
            r.status, r.reason = REJECTED, reason
            rec.reject(r)
            return False
        self.scheduler.add(r)
        return True

    # -- one step -------------------------------------------------------------------------
    def _time(self, shape: BatchShape, decodes: int) -> float:
        t = shape_time_s(self.dep, shape, self.profile)
        if self.config.spec_tokens and decodes:
            t += self.config.spec_tokens * self.config.spec_draft_cost * t
        return t

    def _step(self, batch: list[Scheduled], rec: Recorder) -> list[Request]:
        shape = batch_shape(self.dep, [Seq(b.tokens, b.context) for b in batch])
        dt = self._time(shape, sum(1 for b in batch if b.tokens > 1 or b.request.num_generated))
        self.now_s += dt
        self.steps += 1
        finished = []
        spec = self.config.spec_tokens
        itl_tokens = 0
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
            else:
                itl_tokens += gained
            r.num_generated += gained
            if r.prefix_group >= 0:
                self.pool.register(r)
            if r.num_generated >= r.output_tokens:
                finished.append(self._finish(r))
        if itl_tokens:
            rec.itl(dt, itl_tokens)
        return finished

    def _accepted(self, r: Request) -> int:
        carry = self._carry.get(r.id, 0.0) + self.tokens_per_step
        whole = int(carry)
        self._carry[r.id] = carry - whole
        return max(1, whole)

    def _finish(self, r: Request) -> Request:
        r.status, r.finish_s = FINISHED, self.now_s
        self.scheduler.running.remove(r)
        self.pool.release(r)
        self._carry.pop(r.id, None)
        return r

    # -- the fast path ----------------------------------------------------------------------
    def _fast_steps(self, batch: list[Scheduled], next_arrival: float) -> int:
        """How many identical decode steps can run before anything changes the batch."""
        s = self.scheduler
        if self.config.spec_tokens or len(batch) != len(s.running):
            return 1
        if any(b.tokens != 1 or b.request.to_compute != 1 or not b.request.num_generated
               for b in batch):
            return 1  # a prefill chunk, or a one-token prompt about to emit its first token
        if s.waiting and len(s.running) < self.config.max_num_seqs:
            head = s.waiting[0]  # could it start next step? then no fast path
            if self.pool.can_allocate(self.pool.blocks_for(head.num_computed + min(
                    head.to_compute, self.config.max_num_batched_tokens - len(batch)))):
                return 1
        k = min(r.output_tokens - r.num_generated for r in s.running)
        k = min(k, MAX_FAST_STEPS)
        # blocks: each request needs a new block when its cache crosses a block boundary
        while k > 1 and self._blocks_needed(k) > self.pool.available:
            k //= 2
        if k <= 1:
            return 1
        t0, t_last = self._decode_times(k)
        slope = (t_last - t0) / (k - 1)
        self._line = (t0, slope)  # step j takes t0 + slope·j: _advance_decodes reuses it
        if next_arrival != float("inf"):
            room = next_arrival - self.now_s
            # steps whose start lies before the arrival: boundaries b_j < arrival
            j = 0
            total = 0.0
            while j < k and total < room:
                total += t0 + slope * j
                j += 1
            k = j
        return max(1, k)

    def _blocks_needed(self, k: int) -> int:
        bs = self.pool.block_size
        return sum(max(0, -(-(r.num_computed + k) // bs) - r.blocks_held)
                   for r in self.scheduler.running)

    def _decode_times(self, k: int) -> tuple[float, float]:
        rs = self.scheduler.running
        first = batch_shape(self.dep, [Seq(1, r.num_computed) for r in rs])
        last = batch_shape(self.dep, [Seq(1, r.num_computed + k - 1) for r in rs])
        return self._time(first, len(rs)), self._time(last, len(rs))

    def _advance_decodes(self, batch: list[Scheduled], k: int, rec: Recorder) -> list[Request]:
        t0, slope = self._line
        t_last = t0 + slope * (k - 1)
        start = self.now_s
        for j in range(k):
            rec.itl(t0 + slope * j, len(batch))
        self.now_s = start + k * (t0 + t_last) / 2
        self.steps += k
        finished = []
        for b in batch:
            r = b.request
            self.pool.grow(r, r.num_computed + k)
            r.num_computed += k
            r.num_generated += k
            self.pool.register(r)
            if r.num_generated >= r.output_tokens:
                finished.append(self._finish(r))
        return finished


def sim_config(dep: Deployment, settings: object | None = None, prefix_caching: bool = True,
               spec_tokens: int = 0, spec_acceptance: float = 0.0,
               spec_draft_cost: float = 0.0, fast_path: bool = True) -> SimConfig:
    """The simulated engine's limits, from the engine-aware memory model."""
    from ridgeline.memory import EngineSettings, kv_pool

    s = settings if isinstance(settings, EngineSettings) else EngineSettings()
    max_len = s.max_model_len or dep.model.max_position_embeddings or 131072
    pool = kv_pool(dep, s)
    return SimConfig(num_blocks=pool.blocks, block_size=pool.block_size,
                     max_num_seqs=pool.max_num_seqs,
                     max_num_batched_tokens=pool.profile_tokens, max_model_len=max_len,
                     prefix_caching=prefix_caching, spec_tokens=spec_tokens,
                     spec_acceptance=spec_acceptance, spec_draft_cost=spec_draft_cost,
                     fast_path=fast_path)
