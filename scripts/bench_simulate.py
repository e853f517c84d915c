#!/usr/bin/env python3
"""Simulator benchmarks (not tests): speed, memory, saturated throughput vs measured, and
how simulate's OVERLOADED verdict reads loads around what the engine serves.

    python scripts/bench_simulate.py [--sizes 10000,100000,1000000] [--skip-speed]
        [--skip-sanity] [--pipeline] [--overload] [--overload-requests 2000] [--seeds 10]

Speed: simulated requests per wall second for a chat-like workload (Llama-3.1-8B on one
H100, vLLM defaults, Poisson arrivals at 8 req/s below saturation, log-normal prompts
around 1,000 tokens and answers around 250), on one core; peak RSS alongside. Then the
same load (20,000 requests) on sliding-window, Mamba-hybrid and KV-bound deployments.
The build (Python, or compiled by scripts/compile_simulator.py) is printed first.
Pipeline (--pipeline): the chat load on two and four stages of one H100 each, vLLM V1 (one
pool, pp micro-batches in flight: sim/pipeline.py's event loop, a step per micro-batch) and
SGLang (lanes, each with the fast path); then a backlog of 100,000-token prompts at 1 req/s
on two stages, stopped early once hopelessly behind (its first checks at 50,000
micro-batches each), whose waiting head keeps thousands of its own blocks cached.
Sanity: each offline max-throughput row of validation/measurements.csv (batch left to the
engine) replayed as 1,000 requests queued at t = 0; simulated output tok/s beside measured.
Overload (--overload): Llama-3.1-8B on one H100, simulate's default lengths (512 / 128,
about 44.4 req/s served once the queue grows), Poisson and gamma arrivals at rates from
well under that to well over, several seeds: each run's verdict from its own readings alone
(``Recorder.overloaded``) and as simulate reads it (sim/overload.py: the batch-full rate
where requests backed up, a burst's long queue), one character per seed.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engines import profile_for
from ridgeline.measurements import read_measurements
from ridgeline.predict import deployment_for
from ridgeline.sim import build
from ridgeline.sim.config import sim_config
from ridgeline.sim.pipeline import run_replica
from ridgeline.sim.request import Request
from ridgeline.sim.simulator import Simulator
from ridgeline.sim.workload import Workload


def speed(sizes: list[int]) -> None:
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16")
    print("| requests | wall s | simulated req/s per wall s | simulated s | peak RSS MiB |")
    print("|---:|---:|---:|---:|---:|")
    for n in sizes:
        sim = Simulator(dep, profile_for("vllm"), sim_config(dep))
        work = Workload(n, "lognormal:1000,0.8", "lognormal:250,0.8", rate=8.0, seed=1)
        start = time.perf_counter()
        result = sim.run(iter(work))
        wall = time.perf_counter() - start
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"| {n:,} | {wall:,.1f} | {n / wall:,.0f} | {result.duration_s:,.0f} | {rss:,.0f} |",
              flush=True)


def other_models(n: int = 20_000) -> None:
    """The same load on models that exercise the other paths: sliding windows, a Mamba
    hybrid, and a KV-bound deployment that preempts."""
    print("| model | GPUs | requests | simulated req/s per wall s | preemptions |")
    print("|---|---:|---:|---:|---:|")
    for name, gpus in (("gpt-oss-120b", 2), ("gemma-3-27b", 1), ("jamba-1.5-mini", 2),
                       ("qwen3-30b-a3b", 1)):
        dep = Deployment.build(resolve_model(name), resolve_accelerator("h100"), None, None, gpus)
        sim = Simulator(dep, profile_for("vllm"), sim_config(dep))
        work = Workload(n, "lognormal:1000,0.8", "lognormal:250,0.8", rate=8.0, seed=1)
        start = time.perf_counter()
        result = sim.run(iter(work))
        wall = time.perf_counter() - start
        print(f"| {name} | {gpus} | {n:,} | {n / wall:,.0f} | {result.preemptions:,} |", flush=True)


def pipelines(n: int = 20_000) -> None:
    model, h100 = resolve_model("llama-3.1-8b"), resolve_accelerator("h100")
    print("| load | engine | pp | requests | wall s | simulated req/s per wall s | steps |")
    print("|---|---|---:|---:|---:|---:|---:|")
    cases = [("chat", "vllm", 2, Workload(n, "lognormal:1000,0.8", "lognormal:250,0.8",
                                          rate=8.0, seed=1)),
             ("chat", "vllm", 4, Workload(n, "lognormal:1000,0.8", "lognormal:250,0.8",
                                          rate=8.0, seed=1)),
             ("chat", "sglang", 2, Workload(n, "lognormal:1000,0.8", "lognormal:250,0.8",
                                            rate=8.0, seed=1)),
             ("backlog", "vllm", 2, Workload(5000, "100000", "10000", rate=1.0, seed=0))]
    for load, engine, pp, work in cases:
        dep = Deployment.build(model, h100, "bf16", None, pp, pp, engine)
        start = time.perf_counter()
        result = run_replica(dep, profile_for(engine), sim_config(dep), work,
                             stop_when_behind=True)
        wall = time.perf_counter() - start
        print(f"| {load} | {engine} | {pp} | {work.num_requests:,} | {wall:,.1f} | "
              f"{work.num_requests / wall:,.0f} | {result.steps:,} |", flush=True)


def sanity() -> None:
    rows = [r for r in read_measurements("validation/measurements.csv").rows
            if r.metric == "output_throughput_tok_s" and r.batch is None]
    print("| row | measured tok/s | simulated tok/s | error |")
    print("|---|---:|---:|---:|")
    for row in rows:
        dep = deployment_for(row)
        config = sim_config(dep)
        isl, osl = row.input_len or 1, row.output_len or 1
        sim = Simulator(dep, profile_for(dep.engine), config)
        reqs = (Request(i, 0.0, isl, osl) for i in range(1000))
        result = sim.run(reqs)
        got = result.output_tok_s
        print(f"| {row.id} | {row.value:,.0f} | {got:,.0f} | {got / row.value - 1:+.0%} |",
              flush=True)


OVERLOAD_RATES = (30.0, 35.0, 38.0, 40.0, 42.0, 44.0, 45.0, 46.0, 47.0, 48.0, 50.0, 55.0)
OVERLOAD_ARRIVALS = (("poisson", {}), ("gamma 0.5", {"arrival": "gamma", "burstiness": 0.5}),
                     ("gamma 2", {"arrival": "gamma", "burstiness": 2.0}))
# a verdict's reading, one character: none, the run's queue, flows past the fill, cut short,
# the batch-full rate, a burst
MARKS = {"": ".", "queue": "Q", "flows": "F", "stopped_early": "S", "capacity": "C",
         "burst": "B"}


def overload(requests: int, seeds: int) -> None:
    """The verdict, with and without the readings beyond the run's own counts, at each rate,
    arrival process and seed (seeds left to right)."""
    from ridgeline.reports.simulate_overload import overload_rates
    from ridgeline.sim.overload import backing_up, saturated_req_s

    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16")
    profile, config = profile_for("vllm"), sim_config(dep)
    legend = ", ".join(f"{mark} {reading or 'none'}" for reading, mark in MARKS.items())
    print(f"OVERLOADED, {requests:,} requests of 512 / 128 tokens, seeds 0-{seeds - 1}: "
          f"{legend}")
    print("| arrivals | req/s | own readings | as simulate reads it | flagged |")
    print("|---|---:|---|---|---:|")
    for name, arrivals in OVERLOAD_ARRIVALS:
        for rate in OVERLOAD_RATES:
            own, read = "", ""
            for seed in range(seeds):
                work = Workload(requests, "512", "128", rate=rate, seed=seed, **arrivals)
                result = run_replica(dep, profile, config, work, stop_when_behind=True)
                rec = result.rec
                saturated = None if rec.overloaded() or not backing_up(rec) \
                    else saturated_req_s(dep, profile, config, work)
                flag = overload_rates(result, requests, saturated)
                own += "Y" if rec.overloaded() else "."
                read += MARKS["" if flag is None else flag.reading]
            print(f"| {name} | {rate:g} | `{own}` | `{read}` | "
                  f"{sum(m != '.' for m in read)}/{seeds} |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-sanity", action="store_true")
    parser.add_argument("--pipeline", action="store_true",
                        help="also time pipeline-parallel replicas (vLLM V1's event loop)")
    parser.add_argument("--overload", action="store_true",
                        help="also sweep simulate's OVERLOADED verdict around capacity")
    parser.add_argument("--overload-requests", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    print(f"simulator build: {build()} (Python {sys.version.split()[0]})\n")
    if not args.skip_speed:
        speed([int(x) for x in args.sizes.split(",")])
        print()
        other_models()
    if not args.skip_sanity:
        print()
        sanity()
    if args.pipeline:
        print()
        pipelines()
    if args.overload:
        print()
        overload(args.overload_requests, args.seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
