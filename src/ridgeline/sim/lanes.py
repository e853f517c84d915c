"""A pipeline-parallel engine, simulated as lanes of micro-batches: vLLM V0, SGLang, TensorRT-LLM.

With pp stages the engine keeps pp batches in flight, one per stage, so each stage works
while the others do. A lane is simulated as an engine of its own: 1/pp of the blocks and
seats, every pp-th request (or 1/pp of a closed loop's users), every step the full trip
through all stages; the lanes' outcomes add up to the engine's (``merged``). Bubbles from
unequal micro-batches are not modelled.
- vLLM V0 is this: its virtual engines each schedule from num_gpu_blocks // pp of the cache
  (vllm/core/scheduler.py). vLLM V1 is not: one scheduler and pool (sim/pipeline.py).
- SGLang (python/sglang/srt/managers/scheduler_pp_mixin.py, event_loop_pp) keeps one running
  batch per micro-batch, a request staying in the one it joined, as lanes do, but over one
  KV pool; TensorRT-LLM's PyTorch executor (tensorrt_llm/_torch/pyexecutor/py_executor.py)
  keeps pp micro-batches and schedules around the requests in flight (inflight_req_ids),
  over one KV cache manager. For both the 1/pp split of the pool is this model's
  simplification, and the report says so.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace

from ridgeline.sim.config import SimConfig
from ridgeline.sim.metrics import SimResult
from ridgeline.sim.request import Request
from ridgeline.sim.time_series import summed_series


def pipeline_lane(config: SimConfig, pp: int) -> SimConfig:
    """One of a pipeline-parallel replica's ``pp`` micro-batch lanes: 1/pp of the blocks and
    seats."""
    if pp <= 1:
        return config
    return replace(config, num_blocks=config.num_blocks // pp,
                   max_num_seqs=max(1, config.max_num_seqs // pp))


def lane_requests(requests: Iterable[Request], lane: int, lanes: int,
                  users: int = 0) -> Iterator[Request]:
    """A lane's share of the requests, in arrival order (a seeded workload is iterated afresh
    for each lane, so its requests are its own): every ``lanes``-th from the ``lane``-th; in a
    closed loop of ``users`` dealt round-robin over the lanes, the requests of the users it
    holds (6 users over 4 lanes: 2, 2, 1 and 1, so the first two lanes get two requests of
    every six), so that no lane runs dry while the others still have work."""
    if not users:
        return itertools.islice(iter(requests), lane, None, lanes)
    held = {u % users for u in range(users) if u % lanes == lane}
    return (r for k, r in enumerate(requests) if k % users in held)


def closed_loop_shares(users: int, lanes: int) -> list[int]:
    """A closed loop's users spread over the lanes as evenly as they go (7 over 2: 4, 3)."""
    return [users // lanes + (1 if lane < users % lanes else 0) for lane in range(lanes)]


def merged(results: Sequence[SimResult]) -> SimResult:
    """The lanes as one engine: their requests, histograms and counts added, the run as long
    as the longest lane, the running batch summed over time; steps and busy time are the
    lanes' together (a mean step stays one lane's step, the full trip)."""
    first = results[0]
    rec = first.rec
    for other in results[1:]:
        rec.absorb(other.rec)
    rec.series = summed_series([r.rec.series for r in results])
    rec.running_max = max((p[1] for p in rec.series.points), default=0)  # at the samples
    busy = [r.busy_s for r in results if not math.isnan(r.busy_s)]
    return SimResult(rec, max(r.duration_s for r in results),
                     sum(r.preemptions for r in results),
                     sum(r.prefix_hit_blocks for r in results), sum(r.steps for r in results),
                     sum(busy) if busy else math.nan, first.profile)


def run_lanes(run_one: Callable[[Iterator[Request], int], SimResult],
              requests: Iterable[Request], lanes: int, closed_loop: int = 0) -> SimResult:
    """Run ``lanes`` lanes, each on its share of the requests (``run_one(requests,
    closed_loop)`` simulates one lane), and merge them; one lane is the plain run. A closed
    loop deals each lane the requests of its users (``lane_requests``): fewer users than
    lanes keep only as many lanes busy, and they get every request."""
    if lanes <= 1:
        return run_one(iter(requests), closed_loop)
    shares = [n for n in closed_loop_shares(closed_loop, lanes) if n] if closed_loop \
        else [0] * lanes
    return merged([run_one(lane_requests(requests, lane, lanes, closed_loop), shares[lane])
                   for lane in range(len(shares))])
