"""A pipeline-parallel vLLM V1 replica: one scheduler and one KV pool, pp micro-batches in flight.

What vLLM V1 does, read in its source (vllm-project/vllm on GitHub):
- vllm/v1/engine/core.py: ``EngineCore`` keeps a ``batch_queue`` of
  ``vllm_config.max_concurrent_batches`` scheduled batches; ``step_with_batch_queue``
  schedules a new batch whenever the queue has room (filling it comes before reading
  outputs), and otherwise blocks on the oldest batch's output and hands it to
  ``scheduler.update_from_output``. One ``Scheduler``, one KV cache manager: no per-stage pool.
- ``max_concurrent_batches`` is ``pipeline_parallel_size``: a property of the executor in
  earlier releases (vllm/v1/executor/multiproc_executor.py, ray_distributed_executor.py), of
  ``VllmConfig`` in the newest (vllm/config/vllm.py: "PP requires PP-size concurrent batches
  to fill the pipeline").
- vllm/v1/core/sched/scheduler.py: ``_update_after_schedule`` advances a request's
  ``num_computed_tokens`` when it is scheduled, "allowing us to schedule the prefill request
  again immediately in the next scheduling step"; a request with nothing left to compute
  until its output returns is skipped ("num_new_tokens == 0 … PP>1 and we have already
  scheduled all prompt tokens but they are not finished yet"). So a request whose in-flight
  step samples a token (a decode, its last prompt chunk) is not scheduled again until that
  step's output is back, while a long prompt's chunks may fill consecutive micro-batches.
- ``max_num_seqs`` caps the running requests of the whole engine, not of a micro-batch, and
  nothing balances the micro-batches (vLLM issues #27462, #41682): the first batch takes all
  it can, and a load whose prompts all fit one token budget can leave the pipeline half empty.
- The newest source also allows async scheduling with PP (a batch queue of pp + 1 under Model
  Runner V2); earlier releases disabled it for pp > 1 ("Async scheduling is not yet supported
  with pipeline_parallel_size > 1 and will be disabled"). The synchronous queue is modelled.

The model: micro-batches are formed by the one scheduler from the requests not in flight,
whenever fewer than pp are in flight: after a batch is sent, on an output's return, or on an
arrival while nothing is in flight. With nothing it can schedule, the core blocks on the
oldest batch's output (``future.result()``) and reads its input queue only after, so a
request arriving meanwhile waits for that batch to land. A micro-batch's
trip is the step cost of its batch on the pipeline-parallel deployment (what a lane's step
cost before: all stages, their hand-offs between), split evenly into pp stage times; it
enters each stage once that stage is free, so a new one starts at stage 0 a stage time after
the last (two equal decode micro-batches of B on a 2-stage trip of T: 2B tokens every T).
vLLM V0 (virtual engines, num_gpu_blocks // pp each: vllm/core/scheduler.py), SGLang and
TensorRT-LLM are still simulated as lanes (sim/lanes.py, ``run_replica``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile
from ridgeline.errors import InputError
from ridgeline.sim.config import SimConfig
from ridgeline.sim.lanes import pipeline_lane, run_lanes
from ridgeline.sim.metrics import Recorder, SimResult
from ridgeline.sim.request import RUNNING, Request
from ridgeline.sim.scheduler import Scheduled
from ridgeline.sim.simulator import Simulator
from ridgeline.stages import micro_batches
from ridgeline.vllm_memory import one_pool


def lane_config(config: SimConfig, pp: int, engine: str, version: str | None = None) -> SimConfig:
    """What each of the replica's schedulers runs with: the whole pool and seats for one pool
    (vLLM V1), a lane's 1/pp of them otherwise (``pipeline_lane``)."""
    return config if pp <= 1 or one_pool(engine, version) else pipeline_lane(config, pp)


@dataclass
class MicroBatch:
    """A scheduled batch in the pipeline: its rows, whether each samples a token on its
    return, each request's preemption count when scheduled (a later one means it was
    preempted in flight, its work lost), and when it leaves the last stage."""

    rows: list[Scheduled]
    samples: list[bool]
    epochs: list[int]
    end_s: float


class PipelineSimulator(Simulator):
    """vLLM V1 with ``stages`` pipeline stages: the plain step's scheduling and accounting,
    event by event (a micro-batch scheduled, or one's output back), at most ``stages`` in
    flight."""

    def __init__(self, dep: Deployment, profile: EngineProfile, config: SimConfig,
                 stages: int | None = None) -> None:
        super().__init__(dep, profile, config)
        self.lagged = False  # the pipeline's batch queue is its own (its outputs read in turn)
        self.stages = stages or dep.pipeline_parallel_size
        self.stage_free_s = [0.0] * self.stages  # when each stage finishes its last batch
        self.in_flight: deque[MicroBatch] = deque()
        # the last batch sent holds every running request, each waiting on its token, and
        # none waits to start: until a batch lands the scheduler has nothing to schedule
        self.all_in_flight = False

    def run(self, workload: Iterator[Request], closed_loop: int = 0, keep_rows: bool = False,
            after_step: Callable[[Simulator], None] | None = None,
            slo: tuple[float | None, ...] = (None, None),
            window_s: tuple[float, float] | None = None,
            stop_when_behind: bool = False, stop_past: int | tuple[int, int] | None = None,
            max_in_flight: int = 0) -> SimResult:
        """As ``Simulator.run``; ``after_step`` is called after every event."""
        run = self._begin(workload, closed_loop, keep_rows, after_step, slo, window_s,
                          stop_when_behind, stop_past, max_in_flight)
        rec, s = run.rec, self.scheduler
        while True:
            run.arrive_due()
            room = len(self.in_flight) < self.stages
            if room and (s.running or s.waiting) and not (self.all_in_flight and not s.waiting):
                batch = s.schedule(self.now_s)
                if s.waiting and s.budget_full(batch):
                    rec.budget_full_steps += 1
                if batch:
                    self._launch(batch)
                    self._hook(run)
                    if run.over_steps():
                        break
                    continue
            if self.in_flight:  # nothing to schedule: V1 blocks on the oldest batch's output,
                # and a request that arrives meanwhile waits for it (the core reads its input
                # queue between steps)
                done_s = self.in_flight[0].end_s
                self._wait_until(done_s, rec)
                finished = self._land(self.in_flight.popleft(), rec)
                # the gauges read as V1 reads them: on an output's return
                if self._stepped(run, finished):
                    break
                continue
            if s.running or s.waiting:
                raise InputError("the engine cannot schedule: a request needs more blocks "
                                 "than the pool frees")  # guarded by _reject_reason
            if not run.idle():
                break
        return self._result(run)

    def _wait_until(self, t: float, rec: Recorder) -> None:
        """Time passes to t, the running gauge held at its last reading."""
        s = self.scheduler
        rec.ran(self.now_s, t, 1, len(s.running), len(s.waiting), self.pool.usage,
                s.preemptions)
        self.now_s = t

    def _launch(self, batch: list[Scheduled]) -> None:
        """Send a scheduled batch down the pipeline: its requests' tokens count as computed
        now (V1's _update_after_schedule), and it takes one stage time in each stage."""
        samples, epochs = [], []
        for b in batch:
            r = b.request
            known = r.prompt_tokens + r.num_generated  # (r.known_tokens, on the hot path)
            sample = b.context + b.tokens >= known  # a decode, or its last chunk
            r.num_computed = known if sample else r.num_computed + b.tokens
            samples.append(sample)
            epochs.append(r.preemptions)
        self.all_in_flight = len(batch) == len(self.scheduler.running) and all(samples)
        stage_s = self._time(batch) / self.stages  # the trip, evenly over the stages
        t = self.now_s
        for k in range(self.stages):
            t = max(t, self.stage_free_s[k]) + stage_s
            self.stage_free_s[k] = t
        self.in_flight.append(MicroBatch(batch, samples, epochs, t))
        self.steps += 1

    def _land(self, mb: MicroBatch, rec: Recorder) -> list[Request]:
        """A micro-batch's output is back (now): each sampling row's token(s), as the plain
        step counts them; rows preempted in flight are dropped (recomputed)."""
        self.all_in_flight = False  # its rows have their tokens: each may be scheduled again
        finished: list[Request] = []
        spec, now = self.config.spec_tokens, self.now_s
        gaps: list[float] = []  # each streaming row's gap since its last token, in row order
        for b, sample, epoch in zip(mb.rows, mb.samples, mb.epochs):
            r = b.request
            if r.preemptions != epoch or r.status != RUNNING:
                continue
            if not sample:  # a prompt chunk, more to come
                self.pool.trim(r)
                self.pool.register(r)
                continue
            generated = r.num_generated
            gained = self._accepted(r) if spec and b.context == r.prompt_tokens + generated - 1 \
                else 1  # a decode's drafts
            if gained > r.output_tokens - generated:
                gained = r.output_tokens - generated
            r.num_computed += gained - 1  # accepted drafts are cached; the new token is not
            if generated == 0:
                r.first_token_s = now
            elif r.counted:  # the window's requests' chunks only, as their TTFT
                gaps.append(now - r.last_token_s)
            self._credit(r, gained, finished)
        if gaps:
            rec.itl_each(gaps)
        return finished


def run_replica(dep: Deployment, profile: EngineProfile, config: SimConfig,
                requests: Iterable[Request], version: str | None = None, closed_loop: int = 0,
                keep_rows: bool = False, slo: tuple[float | None, ...] = (None, None),
                window_s: tuple[float, float] | None = None,
                stop_when_behind: bool = False, stop_past: int | tuple[int, int] | None = None,
                max_in_flight: int = 0) -> SimResult:
    """One replica of ``dep`` with the engine's whole ``config``: pipeline-parallel vLLM V1
    as one pool with pp micro-batches in flight, V0 and the other engines as pp lanes each
    with 1/pp of it (``lane_config``), no pipeline as the plain simulator. stop_when_behind:
    an open loop may be cut short once hopelessly behind (``Simulator.run``); stop_past: a
    run stops once more than this many of the window's requests passed ``slo`` (each lane
    on its own count: fewer than the replica's). Data parallelism: its ranks, each with
    ``config``'s pool and seats, a MoE's stepping together (sim/data_parallel.py), a dense
    model's each on its own clock (sim/independent_ranks.py). max_in_flight:
    an open loop capped at that many in flight (vllm bench serve's --max-concurrency beside a
    --request-rate or a trace's times), refused over pipeline lanes. llama.cpp's layer split
    (its stages: --num-gpus) runs no lanes: the whole batch passes from GPU to GPU
    (stages.micro_batches), so 4 slots on 8 GPUs are one batch of 4, not 8 lanes of one
    sequence each at batch 1's step time."""
    pp = micro_batches(dep)
    if dep.data_parallel_size > 1:  # each rank its own pool: a MoE's stepping together,
        # a dense model's each on its own clock
        from ridgeline.data_parallel import independent_ranks
        from ridgeline.sim.data_parallel import DataParallelSimulator
        from ridgeline.sim.independent_ranks import IndependentRanksSimulator

        ranks = IndependentRanksSimulator if independent_ranks(dep) else \
            DataParallelSimulator
        return ranks(dep, profile, config).run(
            iter(requests), closed_loop=closed_loop, keep_rows=keep_rows, slo=slo,
            window_s=window_s, stop_when_behind=stop_when_behind, stop_past=stop_past,
            max_in_flight=max_in_flight)
    if pp > 1 and one_pool(dep.engine, version):
        return PipelineSimulator(dep, profile, config, pp).run(
            iter(requests), closed_loop=closed_loop, keep_rows=keep_rows, slo=slo,
            window_s=window_s, stop_when_behind=stop_when_behind, stop_past=stop_past,
            max_in_flight=max_in_flight)
    lane = lane_config(config, pp, dep.engine, version)
    if max_in_flight and pp > 1:
        raise InputError(f"arrivals capped at {max_in_flight} in flight (--max-concurrency "
                         f"beside --request-rate or --trace) are not modelled over "
                         f"{dep.engine}'s {pp} pipeline lanes: drop --max-concurrency, or "
                         "drop --request-rate for a closed loop")

    def run_one(work: Iterator[Request], users: int) -> SimResult:
        return Simulator(dep, profile, lane).run(work, closed_loop=users, keep_rows=keep_rows,
                                                 slo=slo, window_s=window_s,
                                                 stop_when_behind=stop_when_behind,
                                                 stop_past=stop_past, max_in_flight=max_in_flight)

    return run_lanes(run_one, requests, pp, closed_loop)

