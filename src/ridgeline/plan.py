"""Capacity planning: the cheapest deployment that meets an SLO for a workload.

Search: accelerator × tensor/pipeline parallel size × expert parallelism (MoE) × weight
format × KV dtype × engine knobs (max_num_seqs, max_num_batched_tokens). Each candidate
replica is first sized analytically (``replica_sizing``: ``size_replica``), which prunes
what cannot fit or cannot meet the SLO on its own; replicas cover the rate. The cheapest
candidates are then simulated (``sim/``) in the steady state at their per-replica rate, and
the fewest replicas that meet the SLO at the requested percentile kept. A pipeline-parallel
replica keeps one micro-batch per stage in flight (``sim/lanes.py``).
Disaggregated prefill/decode pools (xPyD) are sized analytically, the KV hand-off priced over
the inter-node link, and the cheapest simulated pool by pool.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from ridgeline.candidate import (
    Candidate,
    parallel_words,
    replica_deployment,
    weight_choices,
    weights_lightest_first,
    weights_name,
)
from ridgeline.capacity import max_batch
from ridgeline.context_length import served_positions
from ridgeline.cost import Seq, decode_batch, mean_decode_context, step_time_s
from ridgeline.deployment import Deployment
from ridgeline.disaggregated import (
    DISAGGREGATED_CHECKS,
    disaggregated_candidates,
    verify_disaggregated,
)
from ridgeline.engines import MIN_GROUP_ROWS, EngineProfile, accelerator_group, profile_for
from ridgeline.errors import InputError
from ridgeline.hardware import Accelerator, engine_devices, resolve_accelerator
from ridgeline.memory import EngineSettings
from ridgeline.model import ModelSpec
from ridgeline.parallel import node_size
from ridgeline.plan_cautions import candidate_cautions
from ridgeline.replica_sizing import covers, launch_length, size_replica, starts_at
from ridgeline.serving_load import Load, Slo
from ridgeline.sim.config import SimConfig, sim_config, v0_scheduling_caution
from ridgeline.sim.metrics import misses_settling
from ridgeline.sim.pipeline import lane_config, run_replica
from ridgeline.stages import micro_batch
from ridgeline.units import plural

RAY_CHUNK = 8  # candidates per Ray task: each takes milliseconds, a task's overhead about as much
DEFAULT_GPUS = ("h100-sxm", "h200-sxm", "b200", "mi300x", "l40s")
CONFIRM_DRAW = 1  # the seed offset of the second draw a check's count must also hold on
# (max_num_seqs, max_num_batched_tokens) tried per configuration, None the engine's default:
# fewer seats bound the batch (and TPOT); a smaller token budget cuts prefill chunks, so
# decodes stall less behind long prompts, at the price of a lower steady-state batch.
ENGINE_KNOBS: tuple[tuple[int | None, int | None], ...] = ((None, None), (64, None), (None, 2048))


def _evaluate(args: tuple[ModelSpec, str, int, int, str, str, tuple[int | None, int | None],
                          bool, Load, Slo, float | None, str | None, str, EngineProfile]
              ) -> Candidate | None:
    (model, gpu, tp, pp, weights, kv, (seqs, budget), ep, load, slo, price, version,
     engine, profile) = args
    acc = resolve_accelerator(gpu)
    try:
        dep = replica_deployment(model, acc, tp, pp, weights, kv, ep, engine=engine)
    except InputError:
        return None
    settings = EngineSettings(max_num_seqs=seqs, max_num_batched_tokens=budget,
                              engine_version=version)
    try:
        max_len = launch_length(dep, settings)
    except InputError:  # a shape this engine version cannot launch (vLLM's PP before 0.5.1)
        return None
    if not max_len:
        return None  # no --max-model-len starts it
    sized = size_replica(dep, profile, load, slo, seqs, budget, version, max_len)
    if sized is None:
        return None
    batch, tpot, ttft, rate, limits = sized
    replicas = max(1, math.ceil(load.rate_req_s / rate * 1.0001))  # past max_gpus too: the
    # plan then says how many the load needs
    group = accelerator_group(acc)
    fitted_here = profile.fitted_groups.get(group, 0)
    calibrated = fitted_here >= MIN_GROUP_ROWS
    why = (f"the {engine} profile has {fitted_here} fitted row{'s' if fitted_here != 1 else ''} on "
           f"{group} accelerators ({profile.source})")
    return Candidate(acc.id, tp, pp, weights, kv, seqs, batch, tpot, ttft, rate, replicas, price,
                     calibrated, why, (profile.band_low, profile.band_high),
                     expert_parallel=ep, max_num_batched_tokens=budget, rate_limits=limits,
                     max_model_len=max_len)


@dataclass(frozen=True)
class PlanResult:
    load: Load
    slo: Slo
    # feasible and priced: verified first, each cheapest first; where a measured caution
    # covers the cheapest, the cheapest without it that held first (``winner``)
    candidates: tuple[Candidate, ...]
    unpriced: tuple[Candidate, ...]
    disaggregated: tuple[Candidate, ...]
    pareto: tuple[tuple[float, float, str], ...]  # (tok/s per GPU, tok/s per user, label)
    searched: int
    mean_output_tokens: float
    closest_miss: str
    engine: str = "vllm"  # whose memory rules sized the pools
    cautions: tuple[str, ...] = ()
    engine_version: str | None = None  # the version whose memory rules sized them
    # the candidates (of ``candidates`` and ``disaggregated``) a measured caution leaves
    # unverified, each with it:
    # their price assumes a speed the measurements have not shown (CDNA3's MoE paths)
    measured_cautions: tuple[tuple[Candidate, str], ...] = ()
    # the candidates (of ``candidates``, ``unpriced`` and ``disaggregated``) whose deployment
    # carries cautions of its own (plan_cautions: TP across nodes, a prompt speed near the
    # TTFT SLO on a borrowed compute share), each with them
    deployment_cautions: tuple[tuple[Candidate, tuple[str, ...]], ...] = ()

    @property
    def winner(self) -> Candidate | None:
        """The first candidate: the cheapest that holds in simulation without a measured
        caution; the cheaper ones a caution leaves unverified are ``cheaper_unverified``.
        Where none without the caution holds, the cheapest, unverified
        (``winner_unverified``)."""
        return self.candidates[0] if self.candidates else None

    @property
    def cheaper_unverified(self) -> tuple[Candidate, ...]:
        """The candidates a measured caution leaves unverified that cost less than the winner,
        in the candidates' order (simulated first, each cheapest first): the alternatives its
        price would undercut, at a speed the measurements have not shown."""
        win = self.winner
        if win is None or win.cost_per_hour is None:
            return ()
        return tuple(c for c in self.candidates[1:] if self.unverified_by(c)
                     and (c.cost_per_hour or 0.0) < win.cost_per_hour)

    def cautions_for(self, c: Candidate) -> tuple[str, ...]:
        """What to say of ``c``'s own deployment (plan_cautions.candidate_cautions), or ()."""
        return next((why for d, why in self.deployment_cautions if d is c), ())

    def unverified_by(self, c: Candidate) -> str:
        """The measured caution that leaves ``c`` (one of ``candidates`` or ``disaggregated``)
        unverified, or ""."""
        return next((why for d, why in self.measured_cautions if d is c), "")

    @property
    def winner_unverified(self) -> bool:
        """Whether the first candidate is the cheapest but unverified, not a winner."""
        return self.winner is not None and bool(self.unverified_by(self.winner))


def search_space(model: ModelSpec, gpus: Sequence[str], max_gpus: int, engine: str = "vllm"
                 ) -> Iterable[tuple[str, int, int, str, str, tuple[int | None, int | None],
                                     bool]]:
    """Every weight format and KV dtype ``engine`` runs on each card, as ``decode``, ``fit``
    and ``simulate`` take them: a card without fp8 matmul units (A100) runs fp8 weights
    weight-only (W8A16, through FP8 Marlin) and an fp8 cache widened to 16 bits in attention
    (vLLM's FlashInfer and Triton backends), step_cost pricing their matmuls at the 16-bit
    rate on half the bytes; a pair the engine runs on no such card (TensorRT-LLM's fp8 before
    Ada) is left out (``_engine_runs``)."""
    formats = weight_choices(model)
    for gpu in gpus:
        acc = resolve_accelerator(gpu)
        node = node_size(acc)
        for weights in formats:
            for kv in ("bf16", "fp8"):
                if not _engine_runs(model, acc, weights, kv, engine):
                    continue
                for tp, pp in layouts(node, max_gpus):
                    for knobs in ENGINE_KNOBS:
                        for ep in (False, True) if model.moe and tp > 1 else (False,):
                            yield acc.id, tp, pp, weights, kv, knobs, ep


def _engine_runs(model: ModelSpec, acc: Accelerator, weights: str, kv: str, engine: str) -> bool:
    """Whether ``engine`` runs these weights and this cache on ``acc`` at all: a one-GPU
    replica of them builds (``Deployment.build`` refuses a format the engine's kernels do not
    run on the card; what a layout refuses, its own)."""
    try:
        replica_deployment(model, acc, 1, 1, weights, kv, engine=engine)
    except InputError:
        return False
    return True


def layouts(node: int, max_gpus: int) -> list[tuple[int, int]]:
    """The (tensor, pipeline) parallel sizes the search tries on a card with ``node`` GPUs
    a node, fewest GPUs first: TP up to 16, and a pipeline of two stages of full-node TP
    groups; cross-node TP is allowed (and priced), not with a pipeline too."""
    out = []
    for tp in (1, 2, 4, 8, 16):
        for pp in (1, 2):
            if tp * pp > min(max_gpus, 2 * node) or (pp > 1 and tp < min(8, node)):
                continue
            if tp > node and pp > 1:
                continue
            out.append((tp, pp))
    return sorted(out, key=lambda layout: layout[0] * layout[1])


def plan(model: ModelSpec, load: Load, slo: Slo, gpus: Sequence[str] = DEFAULT_GPUS,
         max_gpus: int = 64, prices: dict[str, float] | None = None, workers: int = 2,
         verify: int = 16, executor: str = "process",
         engine_version: str | None = None, engine: str = "vllm",
         profile: EngineProfile | None = None) -> PlanResult:
    """The cheapest deployment of ``model`` meeting ``slo`` for ``load``, each replica's pool
    sized by ``engine``'s memory rules (vLLM, SGLang or TensorRT-LLM) at ``engine_version``
    (default: the newest modelled), its steps timed by ``profile`` (default: the engine's
    bundled one; `calibrate` writes a user's)."""
    profile = profile or profile_for(engine)
    if load.rate_req_s <= 0:
        raise InputError("the request rate must be positive")
    limit = served_positions(model, engine)
    if load.refused_share(limit) > 0.5:
        mean_in, mean_out = load.means()
        raise InputError(f"most requests of this load (mean {mean_in + mean_out:,.0f} tokens) are "
                         f"longer than {model.name}'s {limit:,}-token context: an engine refuses "
                         "them")
    refused = load.refused_share(limit)
    if refused > (100 - slo.percentile) / 100:
        raise InputError(f"{refused:.1%} of the requests are longer than {model.name}'s "
                         f"{limit:,}-token context: an engine refuses them, more than a "
                         f"p{slo.percentile:.10g} SLO lets miss ({100 - slo.percentile:.10g} %)")
    prices = dict(prices or {})
    table = {}
    for gpu in gpus:
        acc = resolve_accelerator(gpu)
        table[acc.id] = prices.get(acc.id, prices.get(gpu, acc.price_per_hour_usd))
    space = list(search_space(model, [resolve_accelerator(g).id for g in gpus], max_gpus,
                              engine))
    sizing = load.for_sizing()
    jobs = [(model, g, tp, pp, w, kv, knobs, ep, sizing, slo, table[g], engine_version,
             engine, profile) for g, tp, pp, w, kv, knobs, ep in space]
    if executor == "ray":
        found = _ray_map(jobs)
    elif workers > 1 and len(jobs) > 16:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            found = list(pool.map(_evaluate, jobs, chunksize=8))
    else:
        found = [_evaluate(j) for j in jobs]
    sized = _covering([c for c in found if c is not None], load, slo)
    feasible = [c for c in sized if c.gpus <= max_gpus]
    beyond = min((c for c in sized if c.gpus > max_gpus), default=None,
                 key=lambda c: (c.gpus, c.cost_per_hour or 0.0))
    priced = sorted((c for c in feasible if c.cost_per_hour is not None), key=_cheapest)
    unpriced = sorted((c for c in feasible if c.cost_per_hour is None), key=lambda c: c.gpus)
    runs: CheckRuns = {}  # the checks' runs, each made once
    verified, rest = _verify_cheapest(model, priced, load, slo, max_gpus, verify, engine_version,
                                      engine, profile, runs)
    _, mean_out = load.means()
    miss = "" if feasible else _closest_miss(model, load, slo, gpus, max_gpus, engine, profile,
                                             beyond)
    split = disaggregated_candidates(model, load, slo, gpus, max_gpus, table, engine_version, engine,
                                     profile)
    checked = [verify_disaggregated(model, c, load, slo, max_gpus, engine_version, engine,
                                    profile)
               for c in split[:DISAGGREGATED_CHECKS]]  # None: no size within max_gpus holds
    split = [c for c in checked if c is not None] + split[DISAGGREGATED_CHECKS:]
    split = _covering(split, load, slo)
    candidates = tuple(verified + rest)
    slowed, candidates = _measured_slowdown(model, candidates, load, slo, max_gpus,
                                            engine_version, engine, profile, runs)
    measured = tuple((c, why) for c, why in ((c, _moe_caution(model, c, engine))
                                             for c in (*candidates, *split)) if why)
    win = candidates[0] if candidates else None
    note = load.transient(win.ttft_floor_s + mean_out * win.tpot_s) if win else ""
    unpriced_best = tuple(_best_per_gpu(unpriced))
    split_sorted = tuple(sorted(split, key=lambda c: (not c.verified, c.cost_per_hour is None,
                                                      c.cost_per_hour or 0.0, c.gpus)))
    own = tuple((c, why) for c, why in ((c, candidate_cautions(c, engine, profile, slo))
                                        for c in (*candidates, *unpriced_best, *split_sorted))
                if why)
    cautions = tuple(c for c in (note, load.thin(slo.percentile, win.sim_requests if win and
                                                  win.sim_requests else None),
                                 slowed,
                                 v0_scheduling_caution(engine, engine_version),
                                 *(next((why for d, why in own if d is win), ()))) if c)
    return PlanResult(load, slo, candidates, unpriced_best, split_sorted,
                      tuple(_pareto(model, feasible, load, engine, profile)), len(jobs), mean_out,
                      miss,
                      engine, cautions, engine_version, measured, own)


def _covering(cands: list[Candidate], load: Load, slo: Slo) -> list[Candidate]:
    """The candidates whose --max-model-len refuses no more of the load than the SLO spares
    (``covers``), each with the share it refuses; a pool shrunk below the model's context
    can refuse some (the candidates' workers see the load's means alone)."""
    out = []
    for c in cands:
        if c.max_model_len and not covers(load, slo, c.max_model_len):
            continue
        out.append(replace(c, refused_share=load.refused_share(c.max_model_len)))
    return out


# The low end of the slowdown validation/serving.csv measured on CDNA3's FP8 and MXFP4 MoE
# paths (predict.CDNA3_MOE_CAUTION: gpt-oss-120b on one MI300X under vLLM 0.17 decoded 1.4x
# slower than priced at 64 concurrent, 2.0x at 256; DeepSeek-R1 on MI325X 1.5-2.1x): a bound
# on the TPOT such a winner keeps, not a fit.
MEASURED_SLOWDOWN_LOW = 1.4
UNCAUTIONED_CHECKS = 3  # candidates without the caution simulated to find one that holds


def _moe_caution(model: ModelSpec, c: Candidate, engine: str) -> str:
    """What the measurements say of ``c``'s deployment that its pricing leaves out: FP8 and
    MXFP4 MoE on CDNA3 (predict.cdna3_moe_caution), or ""."""
    from ridgeline.predict import cdna3_moe_caution

    return cdna3_moe_caution(replica_deployment(
        model, resolve_accelerator(c.accelerator), c.tp, c.pp, c.weights, c.kv,
        c.expert_parallel, engine))


def slowed_tpot_floor_s(c: Candidate) -> float:
    """The TPOT a candidate the CDNA3 MoE caution covers keeps at the least: its simulated
    TPOT at the SLO's percentile (where not simulated, its analytic mean) × the measured
    slowdown's low end, MEASURED_SLOWDOWN_LOW; queueing behind the slower steps only adds.
    gpt-oss-120b on one MI300X at 10 req/s: a simulated p90 of 24.5 ms, at least 34.3 ms.
    NaN where the load has no TPOT (one output token a request)."""
    tpot_s = c.sim_tpot_s if c.verified else c.tpot_s
    return (tpot_s if tpot_s is not None else math.nan) * MEASURED_SLOWDOWN_LOW


def _measured_slowdown(model: ModelSpec, candidates: tuple[Candidate, ...], load: Load,
                       slo: Slo, max_gpus: int, engine_version: str | None, engine: str,
                       profile: EngineProfile | None, runs: CheckRuns | None = None
                       ) -> tuple[str, tuple[Candidate, ...]]:
    """Where the cheapest candidate carries the CDNA3 MoE caution, what to say of it and the
    candidates reordered: the cheapest without the caution that holds in simulation goes
    first, the winner; the cautioned ones cheaper than it stay in the list, unverified
    (``PlanResult.cheaper_unverified``), each with its TPOT floor (``slowed_tpot_floor_s``).
    Those without it are simulated cheapest first as ``_verify_cheapest`` does, until the
    next one's analytic price, shrunk as much as simulation has shrunk any, is no lower than
    the cheapest that held, or UNCAUTIONED_CHECKS checks are spent: the first to hold need
    not be the cheapest, where its check added replicas. Where none holds, the cheapest stays
    first, unverified. The candidates simulated here leave the list where they missed and
    stand in it as simulated where they held. ("", as given) where the cheapest carries no
    caution."""
    win = candidates[0] if candidates else None
    caution = _moe_caution(model, win, engine) if win else ""
    if not win or not caution:
        return "", candidates
    checks: dict[int, Candidate | None] = {}  # by place in ``candidates``: the check's result
    uncautioned = sorted((i for i, c in enumerate(candidates)
                          if not _moe_caution(model, c, engine)),
                         key=lambda i: (candidates[i].cost_per_hour or 0.0, candidates[i].gpus))
    # the most simulation has shrunk a candidate's analytic count so far
    shrink = min((c.replicas / c.analytic_replicas for c in candidates
                  if c.verified and c.analytic_replicas), default=1.0)
    alternative: Candidate | None = None  # the cheapest without the caution that held
    for i in uncautioned:  # cheapest first
        c = candidates[i]
        best = math.inf if alternative is None else alternative.cost_per_hour or 0.0
        if c.verified:
            held: Candidate | None = c
        elif len(checks) >= UNCAUTIONED_CHECKS or (c.cost_per_hour or 0.0) * shrink >= best:
            break
        else:
            held = checks[i] = _verify(model, c, load, slo, max_gpus, engine_version, engine,
                                       profile, runs)
            if held is not None:
                shrink = min(shrink, held.replicas / c.replicas)
        if held is not None and (held.cost_per_hour or 0.0) < best:
            alternative = held
    kept = [checks.get(i, c) for i, c in enumerate(candidates)]
    floor = slowed_tpot_floor_s(win)
    misses = floor > slo.tpot_s
    how = "simulated p" + f"{slo.percentile:g}" if win.verified else "analytic mean"
    text = (f"the cheapest deployment, {_label(model, win, engine)}, is unverified: {caution}. At the "
            f"measured slowdown's low end ({MEASURED_SLOWDOWN_LOW:g}×) its {how} TPOT of "
            f"{floor / MEASURED_SLOWDOWN_LOW * 1e3:,.1f} ms would be at least "
            f"{floor * 1e3:,.1f} ms, "
            + (f"past the {slo.tpot_s * 1e3:g} ms SLO" if misses else
               f"within the {slo.tpot_s * 1e3:g} ms SLO before the slower steps' queueing, "
               "which was not simulated"))
    if alternative is None:
        tried = len(checks)
        which = ("the only deployment" if len(uncautioned) == 1 else
                 "both deployments" if tried == len(uncautioned) == 2 else
                 f"all {tried} deployments" if tried == len(uncautioned) else
                 f"the {tried} cheapest of the {len(uncautioned)} deployments")
        why = ("no deployment without this caution meets the SLO within the search"
               if not uncautioned else
               f"{which} without this caution {'was' if tried == 1 else 'were'} simulated and "
               "missed the SLO" + ("" if tried == len(uncautioned) else " (the rest are dearer)"))
        return text + "; " + why, (win, *(c for c in kept[1:] if c is not None))
    text += (f"; the cheapest without it: {_label(model, alternative, engine)} = {alternative.gpus} "
             f"{plural(alternative.gpus, 'GPU')}, ${alternative.cost_per_hour or 0.0:,.2f}/h, "
             f"simulated p{slo.percentile:g} TTFT {(alternative.sim_ttft_s or 0) * 1e3:,.0f} ms, "
             f"TPOT {(alternative.sim_tpot_s or 0) * 1e3:,.1f} ms, ranked first")
    others = [c for c in kept if c is not None and c is not alternative]
    return text, (alternative, *_simulated_first(others))


def _simulated_first(cands: list[Candidate]) -> list[Candidate]:
    """The simulated candidates, cheapest first, then the rest, cheapest first: the order
    ``_verify_cheapest`` leaves them in."""
    return sorted(cands, key=lambda c: (not c.verified, *_cheapest(c)))


def _cheapest(c: Candidate) -> tuple[float, int, int, bool]:
    """The order candidates rank in: cheapest, then fewest GPUs, then, at the same price
    and count, the fewest nodes a replica spans and tensor parallelism kept inside a node (a
    serving engineer's choice: one launch a replica, all-reduces on NVLink; TP8 × PP2
    before TP16, whose all-reduces cross the network, priced at its 400 Gb/s)."""
    return c.cost_per_hour or 0.0, c.gpus, c.replica_nodes, c.tp_crosses_nodes


def _label(model: ModelSpec, c: Candidate, engine: str) -> str:
    return c.label_for(engine, weights_name(model, c.weights))


def _ray_map(jobs: list[tuple[Any, ...]]) -> list[Candidate | None]:
    """Evaluate candidates on a Ray cluster (``pip install 'ridgeline[ray]'``): the one at
    ``RAY_ADDRESS``, or one started on this machine; one task per chunk of candidates."""
    try:
        import ray
    except ImportError:
        raise InputError("--executor ray needs Ray: pip install 'ridgeline[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"))
    remote = ray.remote(_evaluate_chunk)
    chunks = [jobs[i:i + RAY_CHUNK] for i in range(0, len(jobs), RAY_CHUNK)]
    return [c for part in ray.get([remote.remote(chunk) for chunk in chunks]) for c in part]


def _evaluate_chunk(jobs: list[tuple[Any, ...]]) -> list[Candidate | None]:
    return [_evaluate(job) for job in jobs]


def _best_per_gpu(cands: list[Candidate]) -> list[Candidate]:
    best: dict[str, Candidate] = {}
    for c in cands:
        if c.accelerator not in best or c.gpus < best[c.accelerator].gpus:
            best[c.accelerator] = c
    return sorted(best.values(), key=lambda c: c.gpus)


class CheckRun(NamedTuple):
    """One run of a check (``_verify``): whether the SLO held, the TTFT and TPOT it read at
    the SLO's percentile, its requests, the first one's number (a trace's) and its window."""

    held: bool
    ttft_s: float
    tpot_s: float
    requests: int
    first: int
    window_s: tuple[float, float]


# a plan's check runs, by (replica, its engine's config, request lifetime, replicas, draw)
CheckRuns = dict[tuple[Deployment, SimConfig, float, int, int], CheckRun]


def _verify_cheapest(model: ModelSpec, priced: list[Candidate], load: Load, slo: Slo,
                     max_gpus: int, limit: int, engine_version: str | None = None,
                     engine: str = "vllm", profile: EngineProfile | None = None,
                     runs: CheckRuns | None = None) -> tuple[list[Candidate], list[Candidate]]:
    """Simulate candidates cheapest first until the next one's analytic price, shrunk as much
    as simulation has shrunk any checked so far, is no lower than the cheapest that held,
    or ``limit`` candidates are spent. Returns the verified ones, cheapest first, and those
    left unsimulated."""
    verified: list[Candidate] = []
    best, shrink = math.inf, 1.0  # shrink: the lowest simulated / analytic replicas seen
    for i, c in enumerate(priced):
        if i >= limit or (c.cost_per_hour or 0.0) * shrink >= best:
            rest = priced[i:]
            break
        checked = _verify(model, c, load, slo, max_gpus, engine_version, engine, profile, runs)
        if checked is not None:
            verified.append(checked)
            best = min(best, checked.cost_per_hour or 0.0)
            shrink = min(shrink, checked.replicas / c.replicas)
    else:
        rest = []
    verified.sort(key=_cheapest)
    return verified, rest


def _verify(model: ModelSpec, c: Candidate, load: Load, slo: Slo,
            max_gpus: int, engine_version: str | None = None, engine: str = "vllm",
            profile: EngineProfile | None = None, runs: CheckRuns | None = None
            ) -> Candidate | None:
    """Simulate one replica at its share of the rate; add replicas until the SLO holds.
    ``runs``: the runs already made for this load, SLO, profile and version (``CheckRuns``),
    which another candidate's knobs may repeat (on an A100 vLLM's default token budget is
    2,048: --max-num-batched-tokens 2048 launches the same engine)."""
    acc = resolve_accelerator(c.accelerator)
    dep = replica_deployment(model, acc, c.tp, c.pp, c.weights, c.kv, c.expert_parallel, engine=engine)
    settings = EngineSettings(max_num_seqs=c.max_num_seqs,
                              max_num_batched_tokens=c.max_num_batched_tokens,
                              engine_version=engine_version)
    max_len = c.max_model_len or launch_length(dep, settings)
    if not max_len or not starts_at(dep, settings, max_len) or not covers(load, slo, max_len):
        return None  # the launch command's --max-model-len would not start, or refuses the load
    settings = replace(settings, max_model_len=max_len)
    engine_config = sim_config(dep, settings)
    config = lane_config(engine_config, c.pp, engine, engine_version)
    if config.num_blocks < 1:  # a lane whose pool holds no block cannot run a request
        return None
    profile = profile or profile_for(engine)
    lifetime = c.ttft_floor_s + load.means()[1] * c.tpot_s
    runs = {} if runs is None else runs

    def run(replicas: int, draw: int = 0) -> CheckRun:
        """``replicas`` replicas in the steady state, on the load's requests or (``draw`` n)
        on another draw of them; each run once (a run of another candidate's, where it
        launches the same engine on the same requests)."""
        key = (dep, engine_config, lifetime, replicas, draw)
        if key not in runs:
            drawn = replace(load, seed=load.seed + draw) if draw else load
            work, window = drawn.steady(replicas, lifetime,  # a replica's share
                                        percentile=slo.percentile)
            result = run_replica(dep, profile, engine_config, work, engine_version,
                                 slo=(slo.ttft_s, slo.tpot_s), window_s=window,
                                 stop_past=misses_settling(work, window, slo.percentile))
            ttft, tpot = (result.latency_s_at(name, slo.percentile) for name in ("ttft", "tpot"))
            held = not result.rec.missed and ttft <= slo.ttft_s and (
                math.isnan(tpot) or tpot <= slo.tpot_s) \
                and result.rec.keeps_up  # a queue that grows misses the SLO, given time
            runs[key] = CheckRun(held, ttft, tpot, len(work), work[0].id if load.trace else 0,
                                 window)
        return runs[key]

    def holds(replicas: int, draw: int = 0) -> bool:
        """Whether ``replicas`` replicas meet the SLO (``run``)."""
        return run(replicas, draw).held

    low, high = 0, c.replicas  # the most replicas known to miss, a count to try
    while not holds(high):  # too few: grow by a quarter until the SLO holds
        low, high = high, high + max(1, high // 4)
        if high * c.tp * c.pp > max_gpus:
            return None
    if low == 0:  # the analytic count holds: fewer may (it sizes at the capacity edge)
        low = max(0, high - max(1, high // 4))
        while low and holds(low):
            high, low = low, max(0, low - max(1, low // 4))
    while high - low > 1:  # the fewest between a miss and a hold
        mid = (low + high) // 2
        low, high = (low, mid) if holds(mid) else (mid, high)
    # At the capacity edge one short run's percentile swings (p90 TTFT from 4.8 to 20 s
    # between stretches of one long run): another draw of the requests must hold too. A
    # trace has one draw.
    while not (holds(high) and (bool(load.trace) or holds(high, CONFIRM_DRAW))):
        high += 1
        if high * c.tp * c.pp > max_gpus:
            return None
    _, ttft, tpot, count, first, window = run(high)
    return replace(c, replicas=high, verified=True, sim_ttft_s=ttft, sim_tpot_s=tpot,
                   max_model_len=max_len, refused_share=load.refused_share(max_len),
                   analytic_replicas=c.replicas, sim_requests=count, sim_first=first,
                   sim_window_s=window if math.isfinite(window[0]) else None)


def _pareto(model: ModelSpec, feasible: list[Candidate], load: Load,
            engine: str = "vllm", profile: EngineProfile | None = None
            ) -> list[tuple[float, float, str]]:
    """Non-dominated (tok/s per GPU, tok/s per user) points over batch, per configuration."""
    mean_in, mean_out = load.means()
    ctx = mean_decode_context(mean_in, mean_out)
    points = []
    profile = profile or profile_for(engine)
    widest: dict[tuple[str, int, int, str, str, bool], Candidate] = {}  # the largest SLO
    for c in feasible:  # batch of each configuration, over its engine knobs
        key = (c.accelerator, c.tp, c.pp, c.weights, c.kv, c.expert_parallel)
        if key not in widest or c.batch > widest[key].batch:
            widest[key] = c
    for c in widest.values():
        dep = replica_deployment(model, resolve_accelerator(c.accelerator), c.tp, c.pp, c.weights,
                                 c.kv, c.expert_parallel, engine=engine)
        top = max(1, c.batch)
        batches = [1 << k for k in range(top.bit_length()) if 1 << k < top] + [top]
        for b in batches:  # 1, 2, 4, … and the batch that meets the SLO
            # a pipeline's batch runs as micro-batches: a token's step is one's trip
            t = step_time_s(dep, decode_batch(micro_batch(dep, b), ctx), profile)
            points.append((b / t / dep.num_gpus, 1 / t, f"{c.accelerator} "
                           f"{c.parallel_for(engine)} {c.weights}, KV {c.kv}, b{b}"))
    points.sort(key=lambda p: (-p[1], -p[0]))
    frontier, best = [], -1.0
    for p in points:
        if p[0] > best:
            frontier.append(p)
            best = p[0]
    return frontier


def _holding(model: ModelSpec, acc: Accelerator, tp: int, pp: int, context: int,
             engine: str) -> tuple[bool, Deployment | None]:
    """(whether any TP``tp`` × PP``pp`` group of ``acc`` builds, the first the search could launch
    whose pool holds one request of ``context`` tokens or None): the lightest weights first,
    then the search's other formats, fp8 KV first, each with the search's
    engine knobs (vLLM's default 1,024 seats can leave no pool where 64 leave one)."""
    built = False
    for weights in weights_lightest_first(model):
        for kv in ("fp8", "bf16"):
            try:
                dep = replica_deployment(model, acc, tp, pp, weights, kv, engine=engine)
            except InputError:
                continue
            built = True
            for seqs, tokens in ENGINE_KNOBS:
                settings = EngineSettings(max_model_len=context, max_num_seqs=seqs,
                                          max_num_batched_tokens=tokens)
                if max_batch(dep, context, settings) >= 1:
                    return True, dep
    return built, None


def _first_refusal(model: ModelSpec, gpus: Sequence[str], engine: str) -> str:
    """Why one GPU of the first card cannot launch ``model`` under ``engine``: the build's
    own one-line refusal (an MI250's two GCDs split falcon-7b's 71 heads at TP2 under vLLM)."""
    try:
        replica_deployment(model, resolve_accelerator(gpus[0]), 1, 1,
                           weights_lightest_first(model)[0], "bf16", engine=engine)
    except InputError as e:
        return str(e)
    return "every layout's build refuses it"


def _closest_miss(model: ModelSpec, load: Load, slo: Slo, gpus: Sequence[str],
                  max_gpus: int, engine: str = "vllm", profile: EngineProfile | None = None,
                  beyond: Candidate | None = None) -> str:
    """The group nearest the SLO unloaded (the least of TTFT ÷ its SLO and TPOT ÷ its SLO, the
    worse of the two), over every card and every layout of the search that holds the model;
    where one meets it unloaded the load is the miss, and ``beyond``, the fewest GPUs the
    analytic sizing found past ``max_gpus``, says how many it needs."""
    mean_in, mean_out = load.means()
    context = round(mean_in + mean_out)
    best: tuple[float, int, str] | None = None  # (miss, GPUs, text)
    profile = profile or profile_for(engine)
    any_built = False
    for gpu in gpus:
        acc = resolve_accelerator(gpu)
        for tp, pp in layouts(node_size(acc), max_gpus):
            built, dep = _holding(model, acc, tp, pp, context, engine)
            any_built = any_built or built
            if dep is None:
                continue  # no such split, or none holds one request
            ttft = step_time_s(dep, [Seq(max(1, round(mean_in)), 0)], profile)
            tpot = step_time_s(dep, decode_batch(1, mean_decode_context(mean_in, mean_out)), profile)
            miss = max(ttft / slo.ttft_s, tpot / slo.tpot_s)
            group = f"{tp * pp} x {acc.id} ({parallel_words(tp, pp, engine_devices(engine, acc))})"
            text = (f"{group}: TTFT ≥ {ttft * 1e3:,.0f} ms, TPOT ≥ {tpot * 1e3:,.1f} ms "
                    "even unloaded")
            if miss <= 1:
                text = (f"{group} meets the SLO unloaded (TTFT {ttft * 1e3:,.0f} ms, "
                        f"TPOT {tpot * 1e3:,.1f} ms), but no batch sustaining "
                        f"{load.rate_req_s:g} req/s within {max_gpus} GPU{'s' if max_gpus > 1 else ''} "
                        "keeps the p"
                        f"{slo.percentile:g} latencies under it: the load is the miss")
                if beyond is not None:
                    text += (f"; it needs about {beyond.gpus:,} GPUs ({_label(model, beyond, engine)}, "
                             "sized analytically): raise --max-gpus")
            # the nearest; of equal misses (all meeting it unloaded), the fewest GPUs
            if best is None or (max(miss, 1.0), tp * pp) < (max(best[0], 1.0), best[1]):
                best = (miss, tp * pp, text)
    if best is None:
        widest = max((tp * pp for gpu in gpus for tp, pp in
                      layouts(node_size(resolve_accelerator(gpu)), max_gpus)), default=1)
        if not any_built:  # no layout launches at all: a split, not memory, is the miss
            return (f"no group of up to {widest} {plural(widest, 'GPU')} ({', '.join(gpus)}) "
                    f"launches {model.name} under {engine}: {_first_refusal(model, gpus, engine)}")
        return (f"does not fit: no group of up to {widest} {plural(widest, 'GPU')} "
                f"({', '.join(gpus)}) holds {model.name} with room for one request")
    return best[2]
