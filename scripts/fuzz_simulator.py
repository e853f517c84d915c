#!/usr/bin/env python3
"""The simulator's fast path against its plain step loop on random engines and loads.

    python scripts/fuzz_simulator.py [--cases 400] [--start 0] [--spec]
    python scripts/fuzz_simulator.py --ranks [--cases 200]

Each case draws a model (dense, MoE, Mamba hybrid, two sliding-window models), an engine's
policy (vLLM, TensorRT-LLM with whole contexts, SGLang, llama.cpp), a pool
(30 to 20,000 blocks of 16 or 32 tokens, with or without a fixed per-request charge), seats,
a token budget and a workload (lengths, arrival process, prefix groups), async scheduling
(vLLM's, SGLang's and TensorRT-LLM's overlap; not llama.cpp's) or not, and a quarter of the
cases a burst of one-token outputs at 200 req/s on a pool of 30 or 60 blocks (a prompt
preempted beside a finish not yet read); runs both paths and compares durations, counts and
every percentile. Prints the cases beyond 0.5 % and the worst relative difference.
``--spec`` adds speculative decoding to a quarter of the cases. ``--chunked N`` runs every
case on Llama-4-Scout with its attention chunk cut to N tokens (8,192 in its config), so that
the running decodes start new chunks inside the runs of decode steps (sim/decodes.py).

``--ranks``: a dense model's data-parallel ranks (sim/independent_ranks.py, 2 to 4 of them,
vLLM's dispatch, async scheduling or not) against each rank alone: every request's TTFT,
TPOT and end-to-end in the data-parallel run equal those of a plain simulator given that
rank's requests, on the plain step and on the fast path alike (to 1e-9), for the same draws
of pools, seats, budgets and loads; a quarter of the cases a closed loop, checked for the
fast path against the plain step only where the one engine's fast path is itself exact.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from copy import deepcopy
from dataclasses import replace

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.layouts import CHUNKED
from ridgeline.model import ModelSpec
from ridgeline.sim.config import SimConfig
from ridgeline.sim.metrics import Recorder, SimResult
from ridgeline.sim.request import Request
from ridgeline.sim.simulator import Simulator
from ridgeline.sim.workload import Workload

MODELS = ("llama-3.1-8b", "gemma-3-27b", "gpt-oss-20b", "jamba-1.5-mini", "qwen3-30b-a3b")
METRICS = ("ttft", "tpot", "e2e", "itl", "queue")


def difference(a: SimResult, b: SimResult) -> float:
    """The largest relative difference of duration and percentiles (1.0 for a mismatch)."""
    if a.completed != b.completed or a.rejected != b.rejected:
        return 1.0
    worst = abs(a.duration_s / b.duration_s - 1) if b.duration_s else 0.0
    for name in METRICS:
        fast, slow = a.percentiles(name), b.percentiles(name)
        for key, value in slow.items():
            if value == value and value > 0:
                worst = max(worst, abs(fast[key] / value - 1))
            elif (value != value) != (fast[key] != fast[key]):
                worst = 1.0
    return worst


def run(dep: Deployment, config: SimConfig, work: Workload) -> SimResult | str:
    try:
        return Simulator(dep, profile_for("vllm"), config).run(iter(work))
    except InputError as exc:
        return str(exc)


def rows(result: SimResult) -> dict[int, tuple[float, ...]]:
    """Each finished request's (TTFT, TPOT, end-to-end), by id."""
    return {row[0]: tuple(row[4:7]) for row in result.rec.rows}


def rows_difference(a: dict[int, tuple[float, ...]], b: dict[int, tuple[float, ...]]) -> float:
    """The largest relative difference of ``b``'s requests' latencies in ``a`` (1.0 for one
    missing, or NaN in one only)."""
    worst = 0.0
    for i, theirs in b.items():
        mine = a.get(i)
        if mine is None:
            return 1.0
        for x, y in zip(mine, theirs):
            if y == y and y:
                worst = max(worst, abs(x / y - 1))
            elif (x != x) != (y != y):
                return 1.0
    return worst


def ranks_case(seed: int) -> float:
    """One ``--ranks`` case: the largest difference of a rank's requests' latencies in the
    data-parallel run from the rank alone's, on either path (an open loop), or of the fast
    path's from the plain step's (a closed loop, where the one engine's fast path is exact
    for its workload; else 0)."""
    from ridgeline.sim.independent_ranks import IndependentRanksSimulator

    rng = random.Random(seed)
    model = rng.choice(("llama-3.1-8b", "gemma-3-27b"))
    dep = Deployment.build(resolve_model(model), resolve_accelerator("h100"), "bf16",
                           engine="vllm", data_parallel_size=rng.choice([2, 3, 4]))
    groups = rng.choice([0, 0, 3])
    work = list(Workload(rng.randint(1, 300),
                         rng.choice(["64", "uniform:1,700", "lognormal:200,1.0", "900"]),
                         rng.choice(["1", "uniform:1,300", "zipf:1.1,400"]),
                         rate=rng.choice([1.0, 20.0, 200.0, float("inf")]),
                         arrival=rng.choice(["poisson", "gamma", "constant"]),
                         prefix_groups=groups, prefix_len=rng.choice([100, 300]) if groups else 0,
                         seed=seed))
    config = SimConfig(num_blocks=rng.choice([60, 150, 400, 3000, 20000]), block_size=16,
                       max_num_seqs=rng.choice([4, 16, 64]),
                       max_num_batched_tokens=rng.choice([512, 2048, 8192]),
                       max_model_len=32768, async_scheduling=rng.choice([True, False]))
    closed = rng.choice([0, 0, 0, 8])
    alone_dep = replace(dep, data_parallel_size=1)
    profile = profile_for("vllm")
    worst = 0.0
    results = []
    for fast in (False, True):
        cfg = replace(config, fast_path=fast)
        sim = IndependentRanksSimulator(dep, profile, cfg)
        dealt: dict[int, Simulator] = {}  # which rank each request went to
        for rank in sim.ranks:
            rank.sim.arrive = _noting(rank.sim, dealt)  # type: ignore[method-assign]
        result = sim.run(iter(deepcopy(work)), keep_rows=True, closed_loop=closed)
        results.append(result)
        if closed:
            continue  # a closed loop's sends follow every rank's finishes: no rank alone
        for rank in sim.ranks:
            mine = [deepcopy(r) for r in work if dealt.get(r.id) is rank.sim]
            if mine:
                alone = Simulator(alone_dep, profile, cfg).run(iter(mine), keep_rows=True)
                worst = max(worst, rows_difference(rows(result), rows(alone)))
    if closed:
        one = [Simulator(alone_dep, profile, replace(config, fast_path=fast)).run(
            iter(deepcopy(work)), keep_rows=True, closed_loop=closed) for fast in (False, True)]
        if rows_difference(rows(one[1]), rows(one[0])) <= 1e-9:
            worst = rows_difference(rows(results[1]), rows(results[0]))
    return worst


def _noting(sim: Simulator, dealt: dict[int, Simulator]) -> Callable[..., bool]:
    """``sim.arrive``, noting in ``dealt`` that each request came to ``sim``."""
    arrive = sim.arrive

    def noted(r: Request, rec: Recorder) -> bool:
        dealt.setdefault(r.id, sim)
        return arrive(r, rec)
    return noted


def _chunks_of(model: ModelSpec, tokens: int) -> ModelSpec:
    """``model`` with its chunked-attention layers' chunk cut to ``tokens``."""
    return replace(model, layers=tuple(replace(layer, window_tokens=tokens)
                                       if layer.mixer == CHUNKED else layer
                                       for layer in model.layers))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=400)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--spec", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="list every case past 1e-6")
    parser.add_argument("--chunked", type=int, metavar="N",
                        help="Llama-4-Scout with its attention chunk cut to N tokens")
    parser.add_argument("--ranks", action="store_true",
                        help="a dense model's data-parallel ranks against each rank alone")
    args = parser.parse_args()
    if args.ranks:
        cases = range(args.start, args.start + args.cases)
        failed = [(seed, diff) for seed in cases if (diff := ranks_case(seed)) > 1e-9]
        for seed, diff in failed:
            print(f"case {seed}: {diff:.2e}")
        print(f"{args.cases} cases from {args.start}: {len(failed)} beyond 1e-9")
        return 1 if failed else 0
    models = MODELS if not args.chunked else ("llama-4-scout",)
    deps = {m: Deployment.build(resolve_model(m), resolve_accelerator("h100"), "bf16")
            for m in models} if not args.chunked else {
        "llama-4-scout": Deployment.build(_chunks_of(resolve_model("llama-4-scout"),
                                                     args.chunked),
                                          resolve_accelerator("h100"), "bf16", num_gpus=4)}
    worst, beyond = 0.0, 0
    for seed in range(args.start, args.start + args.cases):
        rng = random.Random(seed)
        model = rng.choice(models)
        work = Workload(rng.randint(1, 80),
                        rng.choice(["64", "uniform:1,700", "lognormal:200,1.0", "900"]),
                        rng.choice(["1", "uniform:1,300", "zipf:1.1,400"]),
                        rate=rng.choice([1.0, 20.0, float("inf")]),
                        arrival=rng.choice(["poisson", "gamma", "constant"]),
                        prefix_groups=rng.choice([0, 0, 3]), prefix_len=rng.choice([0, 100, 300]),
                        seed=seed)
        # groups need a prefix length and a length needs groups, else both paths refuse the
        # case alike (over half the draws before): 100 tokens for groups drawn with none
        work = replace(work, prefix_len=(work.prefix_len or 100) if work.prefix_groups else 0)
        spec = rng.choice([0, 0, 0, 2]) if args.spec else 0
        fast_config = SimConfig(num_blocks=rng.choice([30, 60, 150, 400, 3000, 20000]),
                                block_size=rng.choice([16, 16, 32]),
                                max_num_seqs=rng.choice([4, 16, 64]),
                                max_num_batched_tokens=rng.choice([256, 512, 2048]),
                                max_model_len=32768, overhead_blocks=rng.choice([0, 0, 1, 3]),
                                spec_tokens=spec, spec_acceptance=0.6, spec_draft_cost=0.05,
                                # the engines' capacity policies: vLLM, TensorRT-LLM (its
                                # contexts whole), SGLang, llama.cpp; all but vLLM publish a
                                # prompt's blocks after the step
                                **rng.choice([{}, {"reserve_full": True, "chunked_prefill": False,
                                                   "cache_on_schedule": False},
                                              {"prefill_first": True, "cache_on_schedule": False},
                                              {"prefill_first": True, "token_ratio": True,
                                               "cache_on_schedule": False},
                                              {"ubatch_tokens": rng.choice([64, 128]),
                                               "cache_on_schedule": False}]))
        # drawn after the rest, so that a seed keeps the draws it had before these
        fast_config = replace(fast_config, async_scheduling=rng.choice([False, True])
                              and not fast_config.ubatch_tokens)  # llama.cpp: no overlap
        if rng.random() < 0.25:  # one-token outputs in a burst on a tiny pool
            work = replace(work, num_requests=rng.randint(50, 300), output_len="1",
                           rate=200.0, arrival=rng.choice(["poisson", "gamma"]))
            fast_config = replace(fast_config, num_blocks=rng.choice([30, 60]))
        slow_config = replace(fast_config, fast_path=False)
        a, b = run(deps[model], fast_config, work), run(deps[model], slow_config, work)
        if isinstance(a, str) or isinstance(b, str):
            if a != b:
                print(f"case {seed} {model}: one path failed: {a!r} / {b!r}")
                beyond += 1
            continue
        diff = difference(a, b)
        worst = max(worst, diff)
        if diff > (0.005 if not args.verbose else 1e-6):
            beyond += 1
            print(f"case {seed} {model} {fast_config}: {diff:.2%}")
    limit = "1e-6" if args.verbose else "0.5 %"
    print(f"{args.cases} cases from {args.start}: {beyond} beyond {limit}, worst {worst:.2e}")
    return 1 if beyond else 0


if __name__ == "__main__":
    sys.exit(main())
