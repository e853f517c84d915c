"""Capacity planning: the cheapest deployment that meets an SLO for a workload.

Search: accelerator × tensor/pipeline parallel size × expert parallelism (MoE) × weight
format × KV dtype × engine knobs (max_num_seqs, max_num_batched_tokens). Each candidate
replica is first sized analytically — the largest batch whose TPOT at the SLO's percentile
(B decodes, and the prompts that arrive while a request decodes, both with their Poisson
spread; ``size_replica``) meets the SLO and fits the KV pool and the token budget — which
prunes what cannot fit or cannot meet the SLO on its own; replicas cover the rate. The
cheapest candidates are then simulated (``sim/``) in the steady state at their per-replica
rate, and the fewest replicas that meet the SLO at the requested percentile kept. A
pipeline-parallel replica keeps one micro-batch per stage in flight (``sim/lanes.py``).
Disaggregated prefill/decode pools (xPyD) are sized analytically, the KV hand-off priced over
the inter-node link, and the cheapest simulated pool by pool.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from functools import lru_cache
from statistics import NormalDist
from typing import Any

from ridgeline.cost import Seq, decode_batch, mean_decode_context, step_time_s
from ridgeline.deployment import Deployment
from ridgeline.engines import MIN_GROUP_ROWS, EngineProfile, accelerator_group, profile_for
from ridgeline.errors import InputError
from ridgeline.hardware import Accelerator, resolve_accelerator
from ridgeline.kvcache import kv_footprint
from ridgeline.memory import EngineSettings, kv_pool, max_batch, refuses_to_start
from ridgeline.model import ModelSpec
from ridgeline.parallel import INTER_NODE_BYTES_PER_S, node_size
from ridgeline.sim.config import sim_config
from ridgeline.sim.lanes import pipeline_lane, run_lanes
from ridgeline.sim.metrics import STEADY_LIFETIMES
from ridgeline.sim.request import Request
from ridgeline.sim.simulator import Simulator
from ridgeline.sim.workload import Workload, length_sampler, read_trace
from ridgeline.stages import micro_batch
from ridgeline.units import usd_per_million_tokens

RAY_CHUNK = 8  # candidates per Ray task: each takes milliseconds, a task's overhead about as much
DEFAULT_GPUS = ("h100-sxm", "h200-sxm", "b200", "mi300x", "l40s")
# At least this many requests per checked replica: some 1,200 arrive in the window, so the
# keep-up test's two Poisson deviations (2/√n) come to 6 % — a queue growing that fast is
# caught (with 400, a 10 % overload of a short-lived load passed: plan audit, 2026-11-30) …
SIM_REQUESTS = 1600
MAX_SIM_REQUESTS = 6000  # … and up to this many, to reach the steady state
TAIL_REQUESTS = 10  # a trace's requests past the SLO's percentile, fewest to rest it on
# A check's arrivals span STEADY_SPANS request lifetimes (analytic TTFT + output × TPOT); the
# latencies counted are of those arriving after WARMUP_SPANS lifetimes and at least one before
# the last arrival: a short run measures the batch still filling up (or draining) and reads
# an overloaded replica as fine (Llama-3.1-8B on one H100 at 40 req/s: p90 TPOT 43 ms over
# 400 requests, 69 ms over 4,000, where it serves 18 req/s).
STEADY_SPANS = 10
WARMUP_SPANS = 2
CONFIRM_DRAW = 1  # the seed offset of the second draw a check's count must also hold on
# (max_num_seqs, max_num_batched_tokens) tried per configuration, None the engine's default:
# fewer seats bound the batch (and TPOT); a smaller token budget cuts prefill chunks, so
# decodes stall less behind long prompts, at the price of a lower steady-state batch.
ENGINE_KNOBS: tuple[tuple[int | None, int | None], ...] = ((None, None), (64, None), (None, 2048))
DISAGGREGATED_CHECKS = 2  # cheapest xPyD candidates checked by simulating both pools


@dataclass(frozen=True)
class Slo:
    ttft_s: float
    tpot_s: float
    percentile: float = 90.0


@dataclass(frozen=True)
class Load:
    rate: float  # requests per second
    input_len: str
    output_len: str
    seed: int = 0
    trace: tuple[tuple[float, int, int], ...] = ()  # (arrival s, prompt, output), if replayed
    trace_path: str = ""  # … and the file they came from

    @classmethod
    def from_trace(cls, path: str, seed: int = 0) -> Load:
        """A recorded load: its mean rate and lengths for sizing, its requests for checking."""
        rows = tuple((r.arrival_s, r.prompt_tokens, r.output_tokens) for r in read_trace(path))
        span = rows[-1][0] - rows[0][0]
        if len(rows) < 2 or span <= 0:
            raise InputError(f"{path}: a trace needs at least two requests at different times")
        load = cls((len(rows) - 1) / span, path, path, seed, rows)
        mean_in, mean_out = load.means()
        return replace(load, input_len=f"{path} (mean {mean_in:,.0f})",
                       output_len=f"mean {mean_out:,.0f}", trace_path=path)

    def samples(self) -> list[tuple[int, int]]:
        """(prompt, output) of every request of a trace, or of 2,000 drawn from the load."""
        return list(_samples(self))

    def means(self) -> tuple[float, float]:
        drawn = self.samples()
        n = len(drawn)
        return sum(p for p, _ in drawn) / n, sum(o for _, o in drawn) / n

    def max_model_len(self, limit: int | None = None) -> int:
        """The --max-model-len to run it with: the longest request sampled (of a trace, the
        longest of all), so the engine refuses none, capped at the model's context ``limit``."""
        longest = max(p + o for p, o in self.samples()) + 16
        return min(longest, limit) if limit else longest

    def refused_share(self, limit: int | None) -> float:
        """The share of requests longer than the model's context: an engine refuses them."""
        if not limit:
            return 0.0
        drawn = self.samples()
        return sum(p + o > limit for p, o in drawn) / len(drawn)

    def for_sizing(self) -> Load:
        """The same means without the trace rows (what the candidate workers need)."""
        if not self.trace:
            return self
        mean_in, mean_out = self.means()
        return Load(self.rate, str(max(1, round(mean_in))), str(max(1, round(mean_out))),
                    self.seed)

    def share(self, replicas: int, first_token_only: bool = False,
              count: int = SIM_REQUESTS) -> Iterator[Request]:
        """What one of ``replicas`` replicas receives: its share of the synthetic load, or
        every replicas-th request of the trace (round-robin), ``count`` of them."""
        if not self.trace:
            return iter(Workload(count, self.input_len,
                                 "1" if first_token_only else self.output_len,
                                 self.rate / replicas, seed=self.seed))
        rows = self.trace[:count * replicas:replicas]
        return (Request(i, t, p, 1 if first_token_only else o) for i, (t, p, o) in enumerate(rows))

    def steady(self, replicas: int, lifetime_s: float, first_token_only: bool = False
               ) -> tuple[list[Request], tuple[float, float]]:
        """One replica's share, long enough to reach the steady state, and the arrival window
        whose latencies count: past the warm-up, and (set from the requests' own arrivals)
        ending before the last of them, so that it holds no drain."""
        rate = self.rate / replicas
        life = max(lifetime_s, 1e-3)
        count = int(min(MAX_SIM_REQUESTS, max(SIM_REQUESTS, math.ceil(rate * STEADY_SPANS * life))))
        if self.trace:
            count = min(count, -(-len(self.trace) // replicas))
        work = list(self.share(replicas, first_token_only, count))
        start, span = work[0].arrival_s, work[-1].arrival_s - work[0].arrival_s
        warm, tail = min(WARMUP_SPANS * life, 0.3 * span), min(life, 0.2 * span)
        window = _inward(start + warm, start + span - tail)  # short figures for a command
        if self.trace and sum(window[0] <= r.arrival_s <= window[1] for r in work) < count / 2:
            window = (-math.inf, math.inf)  # a burst: no steady part to keep (plan says so)
        return work, window

    def transient(self, lifetime_s: float) -> str:
        """What to say of a trace too short, or too bursty, to reach a steady state, or ""."""
        if not self.trace:
            return ""
        span = self.trace[-1][0] - self.trace[0][0]
        if span >= STEADY_LIFETIMES * lifetime_s:
            return ""
        return (f"the trace's arrivals span {span:,.1f} s, under {STEADY_LIFETIMES} request "
                f"lifetimes ({lifetime_s:,.1f} s): the checks read its batch filling up and "
                "draining, lighter than a steady load of the same rate")

    def thin(self, percentile: float) -> str:
        """What to say of a trace with too few requests past ``percentile`` to rest a
        percentile on (fewer than TAIL_REQUESTS), or ""."""
        if not self.trace:
            return ""
        tail = len(self.trace) * (1 - percentile / 100)
        if tail >= TAIL_REQUESTS:
            return ""
        return (f"the trace holds {len(self.trace):,} requests: {tail:,.1f} of them lie past "
                f"p{percentile:g}, too few to rest that percentile on (record at least "
                f"{math.ceil(TAIL_REQUESTS / (1 - percentile / 100)):,})")


def _inward(low: float, high: float) -> tuple[float, float]:
    """(low, high) rounded inward to four figures of their span (23.45, 105.5): short to
    print in a command line, and never wider than asked."""
    if not high > low:
        return low, high
    digits = 3 - math.floor(math.log10(high - low))
    quantum = 10.0 ** -digits
    return (round(math.ceil(low / quantum - 1e-9) * quantum, digits),  # 1e-9: 0.072 is
            round(math.floor(high / quantum + 1e-9) * quantum, digits))  # 7,200 quanta


@lru_cache(maxsize=32)
def _samples(load: Load) -> tuple[tuple[int, int], ...]:
    if load.trace:
        return tuple((p, o) for _, p, o in load.trace)
    rng = random.Random(load.seed)
    draw_in, draw_out = length_sampler(load.input_len, "input"), length_sampler(
        load.output_len, "output")
    n = 2000
    prompts = [draw_in(rng) for _ in range(n)]
    return tuple(zip(prompts, [draw_out(rng) for _ in range(n)]))


@dataclass(frozen=True)
class Candidate:
    accelerator: str
    tp: int
    pp: int
    weights: str
    kv: str
    max_num_seqs: int | None
    batch: int  # per replica, analytic
    tpot_s: float  # analytic mean at that batch (its percentile meets the SLO)
    ttft_floor_s: float
    replica_rate: float  # requests/s one replica sustains within the TPOT SLO
    replicas: int
    price_per_gpu_hour: float | None
    calibrated: bool
    calibration_note: str
    band: tuple[float, float]
    verified: bool = False
    sim_ttft_s: float | None = None
    sim_tpot_s: float | None = None
    disaggregated: str = ""  # "xPyD" when prefill and decode pools are split
    prefill_replicas: int = 0  # x of xPyD (replicas counts both pools)
    expert_parallel: bool = False  # MoE experts spread over the TP ranks
    analytic_replicas: int = 0  # simulated ones: the count the analytic sizing gave
    max_num_batched_tokens: int | None = None  # None: the engine's default
    # simulated ones: the check that held — its requests and arrival window (seconds)
    sim_requests: int = 0
    sim_window_s: tuple[float, float] | None = None

    @property
    def gpus(self) -> int:
        return self.replicas * self.tp * self.pp

    @property
    def cost_per_hour(self) -> float | None:
        return None if self.price_per_gpu_hour is None else self.gpus * self.price_per_gpu_hour

    def cost_per_million_tokens(self, output_tok_s: float) -> float | None:
        return usd_per_million_tokens(self.cost_per_hour, output_tok_s)

    @property
    def label(self) -> str:
        split = f" × PP{self.pp}" if self.pp > 1 else ""
        split += " EP" if self.expert_parallel else ""
        seqs = f", max_num_seqs {self.max_num_seqs}" if self.max_num_seqs else ""
        if self.max_num_batched_tokens:
            seqs += f", max_num_batched_tokens {self.max_num_batched_tokens}"
        if self.disaggregated:
            return (f"{self.disaggregated} pools of {self.tp} x {self.accelerator} (TP{self.tp}, "
                    f"{self.weights})")
        return (f"{self.replicas} replica{'s' if self.replicas > 1 else ''} of "
                f"{self.tp * self.pp} x {self.accelerator} (TP{self.tp}{split}, {self.weights}, "
                f"KV {self.kv}{seqs})")


def _deployment(model: ModelSpec, acc: Accelerator, c_tp: int, pp: int, weights: str,
                kv: str, expert_parallel: bool = False, engine: str = "vllm") -> Deployment:
    w = None if weights == "as stored" else weights
    return Deployment.build(model, acc, w, kv, c_tp * pp, pp, engine, expert_parallel)


def size_replica(dep: Deployment, profile: EngineProfile, load: Load, slo: Slo,
                 max_num_seqs: int | None, max_num_batched_tokens: int | None = None,
                 engine_version: str | None = None) -> tuple[int, float, float, float] | None:
    """(batch, mean TPOT, TTFT floor, sustainable rate) of one replica, or None if it cannot.

    The batch is the largest whose TPOT at the SLO's percentile meets the SLO: each request's
    decode steps cost the decode of the batch (at the batch's own percentile: arrivals are
    Poisson, so B requests in flight vary by √B) plus its share of the prompts that arrive
    while it decodes. By Little's law B of them arrive, more or fewer by √(B·(1 + cv²)) (cv:
    the prompt lengths' coefficient of variation) over a request of the mean output; a short
    request sees a rougher share, and the percentile is set by the short ones, so the spread
    is scaled by √(mean ÷ the output at the percentile's far end). A prompt shorter than the step's token
    budget is prefilled whole in one step, a longer one in budget-sized chunks; only when
    prompts overlap does every step carry some. Under SGLang, whose prompt steps run alone,
    the decodes wait through each prompt's whole steps (packed with the prompts arriving
    with it when they overlap), not a mixed step's margin. The rate follows from the mean TPOT, capped
    by the prompt and output tokens a step's budget takes; a load of one output token per
    request (no TPOT) is sized by that cap alone."""
    drawn = load.samples()
    mean_in, mean_out = load.means()
    isl, osl = max(1, round(mean_in)), max(1, round(mean_out))
    cv2 = sum((p - mean_in) ** 2 for p, _ in drawn) / len(drawn) / mean_in ** 2
    settings = EngineSettings(max_model_len=isl + osl, max_num_seqs=max_num_seqs,
                              max_num_batched_tokens=max_num_batched_tokens,
                              engine_version=engine_version)
    lanes = dep.pipeline_parallel_size  # micro-batches in flight, one per stage
    cap = max_batch(dep, isl + osl, settings) // lanes
    if cap < 1:
        return None
    budget = kv_pool(dep, settings).profile_tokens
    ttft_floor = step_time_s(dep, [Seq(isl, 0)], profile)
    if ttft_floor > slo.ttft_s:
        return None
    # A step does at most the token budget (max_num_batched_tokens) of work, and a request
    # brings in + out tokens of it: the most requests a replica can take on, prompts packed.
    prompts = max(1, budget // isl)  # whole prompts a step packs, or one budget-long chunk
    packed = step_time_s(dep, [Seq(min(budget, isl), 0)] * prompts, profile)
    most_rate = lanes * prompts * min(budget, isl) / packed / (isl + osl)
    ctx = mean_decode_context(isl, osl)
    if mean_out < 2:  # one output token each: no TPOT to keep, the prompts are the load
        return lanes, step_time_s(dep, decode_batch(1, ctx), profile), ttft_floor, most_rate
    # B decodes and the B·in/out prompt tokens that keep B requests flowing share the budget:
    # B·(1 + in/out) ≤ budget, one request at least
    cap = min(cap, max(1, budget * osl // (isl + osl)))
    z = NormalDist().inv_cdf(slo.percentile / 100)
    outs = sorted(o for _, o in drawn)  # the output at the SLO's far end: p10 for a p90 SLO
    short = max(1, outs[int((1 - slo.percentile / 100) * (len(outs) - 1))])

    alone = dep.engine == "sglang"  # prompt steps run alone, the decodes waiting
    chunks_alone = math.ceil(isl / budget)
    prompt_alone = chunks_alone * step_time_s(dep, [Seq(math.ceil(isl / chunks_alone), 0)],
                                              profile)

    def tpot(b: int, at_percentile: bool = True) -> float:
        decode = step_time_s(dep, decode_batch(b, ctx), profile)
        chunks = math.ceil(isl / max(1, budget - b))
        if alone:  # each prompt's steps (whole, or in budget-long chunks) are the decodes'
            # wait; prompts arriving together share a step (packed: its weights read once)
            per_prompt = min(prompt_alone, packed / prompts * chunks_alone) \
                if b * chunks_alone >= osl else prompt_alone
        elif b * chunks >= osl:  # prompts overlap: each step carries B·in/out prompt tokens
            spread = max(1, round(b * isl / osl))
            with_prompt = step_time_s(dep, [*decode_batch(b, ctx), Seq(spread, 0)], profile)
            per_prompt = (with_prompt - decode) * osl / b
        else:  # now and then a step carries one prompt's chunk
            chunk = max(1, round(isl / chunks))
            with_chunk = step_time_s(dep, [*decode_batch(b, ctx), Seq(chunk, 0)], profile)
            per_prompt = chunks * (with_chunk - decode)
        if not at_percentile:
            return decode + b * per_prompt / osl
        busy = max(b, round(b + z * math.sqrt(b)))
        arrivals = b + z * math.sqrt(b * (1 + cv2) * osl / short)
        return step_time_s(dep, decode_batch(busy, ctx), profile) + arrivals * per_prompt / osl

    if tpot(1) > slo.tpot_s:
        return None
    lo, hi = 1, cap
    while lo < hi:  # largest batch whose percentile TPOT meets the SLO
        mid = (lo + hi + 1) // 2
        if tpot(mid) <= slo.tpot_s:
            lo = mid
        else:
            hi = mid - 1
    mean = tpot(lo, at_percentile=False)
    return lanes * lo, mean, ttft_floor, min(lanes * lo / (osl * mean), most_rate)


def _evaluate(args: tuple[ModelSpec, str, int, int, str, str, tuple[int | None, int | None],
                          bool, Load, Slo, int, float | None, str | None, str, int]
              ) -> Candidate | None:
    (model, gpu, tp, pp, weights, kv, (seqs, budget), ep, load, slo, max_gpus, price, version,
     engine, max_len) = args
    acc = resolve_accelerator(gpu)
    try:
        dep = _deployment(model, acc, tp, pp, weights, kv, ep, engine=engine)
    except InputError:
        return None
    launch = EngineSettings(max_model_len=max_len, max_num_seqs=seqs,
                            max_num_batched_tokens=budget, engine_version=version)
    if refuses_to_start(kv_pool(dep, launch), dep, max_len):
        return None  # the launch command's --max-model-len would not start
    profile = profile_for(engine)
    sized = size_replica(dep, profile, load, slo, seqs, budget, version)
    if sized is None:
        return None
    batch, tpot, ttft, rate = sized
    replicas = max(1, math.ceil(load.rate / rate * 1.0001))
    if replicas * tp * pp > max_gpus:
        return None
    group = accelerator_group(acc)
    fitted_here = profile.fitted_groups.get(group, 0)
    calibrated = fitted_here >= MIN_GROUP_ROWS
    why = (f"the {engine} profile has {fitted_here} fitted row{'s' if fitted_here != 1 else ''} on "
           f"{group} accelerators ({profile.source})")
    return Candidate(acc.id, tp, pp, weights, kv, seqs, batch, tpot, ttft, rate, replicas, price,
                     calibrated, why, (profile.band_low, profile.band_high),
                     expert_parallel=ep, max_num_batched_tokens=budget)


@dataclass(frozen=True)
class PlanResult:
    load: Load
    slo: Slo
    candidates: tuple[Candidate, ...]  # feasible, cheapest first (priced), verified first
    unpriced: tuple[Candidate, ...]
    disaggregated: tuple[Candidate, ...]
    pareto: tuple[tuple[float, float, str], ...]  # (tok/s per GPU, tok/s per user, label)
    searched: int
    mean_output_tokens: float
    closest_miss: str
    engine: str = "vllm"  # whose memory rules sized the pools
    cautions: tuple[str, ...] = ()
    engine_version: str | None = None  # the version whose memory rules sized them

    @property
    def winner(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None


def weight_choices(model: ModelSpec) -> list[str]:
    """The weight formats a plan serves: a quantized checkpoint as stored (it is the file the
    serve command names; re-quantizing it is another checkpoint), a bf16 one as is or at fp8."""
    return ["as stored"] if model.stored_formats else ["bf16", "fp8"]


def fastest_weights(model: ModelSpec, acc: Accelerator) -> str:
    """The lightest of weight_choices this card runs: fp8 where it has fp8 matmuls."""
    choices = weight_choices(model)
    return "fp8" if "fp8" in choices and acc.has("fp8") else choices[0]


def search_space(model: ModelSpec, gpus: Sequence[str], max_gpus: int
                 ) -> Iterable[tuple[str, int, int, str, str, tuple[int | None, int | None],
                                     bool]]:
    formats = weight_choices(model)
    for gpu in gpus:
        acc = resolve_accelerator(gpu)
        node = node_size(acc)
        for weights in formats:
            if weights == "fp8" and not acc.has("fp8"):
                continue
            for kv in ("bf16", "fp8"):
                if kv == "fp8" and not acc.has("fp8"):
                    continue
                for tp in (1, 2, 4, 8, 16):
                    for pp in (1, 2):
                        if tp * pp > min(max_gpus, 2 * node) or (pp > 1 and tp < min(8, node)):
                            continue
                        if tp > node and pp > 1:
                            continue  # cross-node TP is allowed (and priced), not with PP too
                        for knobs in ENGINE_KNOBS:
                            for ep in (False, True) if model.moe and tp > 1 else (False,):
                                yield acc.id, tp, pp, weights, kv, knobs, ep


def plan(model: ModelSpec, load: Load, slo: Slo, gpus: Sequence[str] = DEFAULT_GPUS,
         max_gpus: int = 64, prices: dict[str, float] | None = None, workers: int = 2,
         verify: int = 16, executor: str = "process",
         engine_version: str | None = None, engine: str = "vllm") -> PlanResult:
    """The cheapest deployment of ``model`` meeting ``slo`` for ``load``, each replica's pool
    sized by ``engine``'s memory rules (vLLM, SGLang or TensorRT-LLM) at ``engine_version``
    (default: the newest modelled)."""
    if load.rate <= 0:
        raise InputError("the request rate must be positive")
    limit = model.max_position_embeddings
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
    space = list(search_space(model, [resolve_accelerator(g).id for g in gpus], max_gpus))
    sizing = load.for_sizing()
    max_len = load.max_model_len(limit)  # the launch command's, for every candidate
    jobs = [(model, g, tp, pp, w, kv, knobs, ep, sizing, slo, max_gpus, table[g], engine_version,
             engine, max_len) for g, tp, pp, w, kv, knobs, ep in space]
    if executor == "ray":
        found = _ray_map(jobs)
    elif workers > 1 and len(jobs) > 16:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            found = list(pool.map(_evaluate, jobs, chunksize=8))
    else:
        found = [_evaluate(j) for j in jobs]
    feasible = [c for c in found if c is not None]
    priced = sorted((c for c in feasible if c.cost_per_hour is not None),
                    key=lambda c: (c.cost_per_hour or 0.0, c.gpus))
    unpriced = sorted((c for c in feasible if c.cost_per_hour is None), key=lambda c: c.gpus)
    verified, rest = _verify_cheapest(model, priced, load, slo, max_gpus, verify, engine_version,
                                      engine)
    _, mean_out = load.means()
    miss = "" if feasible else _closest_miss(model, load, slo, gpus, max_gpus, engine)
    split = _disaggregated(model, load, slo, gpus, max_gpus, table, engine_version, engine)
    checked = [_verify_disaggregated(model, c, load, slo, max_gpus, engine_version, engine)
               for c in split[:DISAGGREGATED_CHECKS]]  # None: no size within max_gpus holds
    split = [c for c in checked if c is not None] + split[DISAGGREGATED_CHECKS:]
    candidates = tuple(verified + rest)
    win = candidates[0] if candidates else None
    note = load.transient(win.ttft_floor_s + mean_out * win.tpot_s) if win else ""
    cautions = tuple(c for c in (note, load.thin(slo.percentile)) if c)
    return PlanResult(load, slo, candidates, tuple(_best_per_gpu(unpriced)),
                      tuple(sorted(split, key=lambda c: (not c.verified, c.cost_per_hour is None,
                                                         c.cost_per_hour or 0.0, c.gpus))),
                      tuple(_pareto(model, feasible, load, engine)), len(jobs), mean_out, miss,
                      engine, cautions, engine_version)


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


def _verify_cheapest(model: ModelSpec, priced: list[Candidate], load: Load, slo: Slo,
                     max_gpus: int, limit: int, engine_version: str | None = None,
                     engine: str = "vllm"
                     ) -> tuple[list[Candidate], list[Candidate]]:
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
        checked = _verify(model, c, load, slo, max_gpus, engine_version, engine)
        if checked is not None:
            verified.append(checked)
            best = min(best, checked.cost_per_hour or 0.0)
            shrink = min(shrink, checked.replicas / c.replicas)
    else:
        rest = []
    verified.sort(key=lambda c: (c.cost_per_hour or 0.0, c.gpus))
    return verified, rest


def _verify(model: ModelSpec, c: Candidate, load: Load, slo: Slo,
            max_gpus: int, engine_version: str | None = None, engine: str = "vllm"
            ) -> Candidate | None:
    """Simulate one replica at its share of the rate; add replicas until the SLO holds."""
    acc = resolve_accelerator(c.accelerator)
    dep = _deployment(model, acc, c.tp, c.pp, c.weights, c.kv, c.expert_parallel, engine=engine)
    settings = EngineSettings(max_num_seqs=c.max_num_seqs,
                              max_num_batched_tokens=c.max_num_batched_tokens,
                              max_model_len=load.max_model_len(model.max_position_embeddings),
                              engine_version=engine_version)
    if refuses_to_start(kv_pool(dep, settings), dep, settings.max_model_len or 0):
        return None  # the launch command's --max-model-len would not start
    config = pipeline_lane(sim_config(dep, settings), c.pp)
    profile = profile_for(engine)
    lifetime = c.ttft_floor_s + load.means()[1] * c.tpot_s
    checked: dict[tuple[int, int], bool] = {}
    runs: dict[int, tuple[float, float, int, tuple[float, float]]] = {}  # the first draw's

    def holds(replicas: int, draw: int = 0) -> bool:
        """Whether ``replicas`` replicas meet the SLO in the steady state, on the load's
        requests or (``draw`` n) on another draw of them (memoised)."""
        if (replicas, draw) not in checked:
            drawn = replace(load, seed=load.seed + draw) if draw else load
            work, window = drawn.steady(replicas, lifetime)  # a replica's share, over its lanes
            result = run_lanes(lambda lane, _: Simulator(dep, profile, config).run(
                lane, window=window), work, c.pp)
            ttft, tpot = (result.latency_at(name, slo.percentile) for name in ("ttft", "tpot"))
            checked[replicas, draw] = ttft <= slo.ttft_s and (
                math.isnan(tpot) or tpot <= slo.tpot_s) \
                and result.rec.keeps_up  # a queue that grows misses the SLO, given time
            if not draw:
                runs[replicas] = (ttft, tpot, len(work), window)
        return checked[replicas, draw]

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
    ttft, tpot, count, window = runs[high]
    return replace(c, replicas=high, verified=True, sim_ttft_s=ttft, sim_tpot_s=tpot,
                   analytic_replicas=c.replicas, sim_requests=count,
                   sim_window_s=window if math.isfinite(window[0]) else None)


def _handed_off(work: Iterable[Request]) -> Iterator[Request]:
    """Requests as a decode pool receives them: the prompt's KV already there but for the last
    token, which the first step runs to sample the first output token."""
    for r in work:
        r.num_computed = max(0, r.prompt_tokens - 1)
        yield r


def handoff_s(dep: Deployment, prompt_tokens: int) -> float:
    """Moving one prompt's KV cache from a prefill replica to a decode replica: its bytes over
    the inter-node link, one link per tensor-parallel rank."""
    kv = kv_footprint(dep.model, prompt_tokens, dep.kv.bytes_per_element).bytes_per_sequence
    return kv / (INTER_NODE_BYTES_PER_S * dep.tensor_parallel_size)


def _verify_disaggregated(model: ModelSpec, c: Candidate, load: Load, slo: Slo,
                          max_gpus: int, engine_version: str | None = None,
                          engine: str = "vllm") -> Candidate | None:
    """Simulate both pools of an xPyD candidate, growing the one that misses, until the SLO
    holds: TTFT = prefill pool's TTFT + KV hand-off + the decode pool's first step (their
    percentiles added, an upper bound); TPOT from the decode pool."""
    acc = resolve_accelerator(c.accelerator)
    dep = _deployment(model, acc, c.tp, 1, c.weights, c.kv, engine=engine)
    mean_in, _ = load.means()
    config = sim_config(dep, EngineSettings(max_model_len=load.max_model_len(
        model.max_position_embeddings),
                                            engine_version=engine_version))
    profile = profile_for(engine)
    transfer_s = handoff_s(dep, max(1, round(mean_in)))
    x, y = c.prefill_replicas, c.replicas - c.prefill_replicas
    _, mean_out = load.means()
    while (x + y) * c.tp <= max_gpus:  # each pool in its steady state (Load.steady)
        work, window = load.steady(x, c.ttft_floor_s, first_token_only=True)
        prefill = Simulator(dep, profile, config).run(iter(work), window=window)
        work, window = load.steady(y, mean_out * c.tpot_s)
        decode = Simulator(dep, profile, config).run(_handed_off(work), window=window)
        first = prefill.latency_at("ttft", slo.percentile)
        joined = decode.latency_at("ttft", slo.percentile)
        ttft, tpot = first + transfer_s + joined, decode.latency_at("tpot", slo.percentile)
        tpot_ok = (math.isnan(tpot) or tpot <= slo.tpot_s) and decode.rec.keeps_up
        ttft_ok = ttft <= slo.ttft_s and prefill.rec.keeps_up  # a growing queue misses, given time
        if ttft_ok and tpot_ok:
            return replace(c, replicas=x + y, prefill_replicas=x, disaggregated=f"{x}P{y}D",
                           verified=True, sim_ttft_s=ttft, sim_tpot_s=tpot)
        grow_x = not ttft_ok and (not first < joined or not prefill.rec.keeps_up)
        grow_y = not tpot_ok or (not ttft_ok and not joined <= first)
        if not (grow_x or grow_y):
            return None
        x += max(1, x // 4) if grow_x else 0
        y += max(1, y // 4) if grow_y else 0
    return None


def _disaggregated(model: ModelSpec, load: Load, slo: Slo, gpus: Sequence[str], max_gpus: int,
                   prices: dict[str, float | None], engine_version: str | None = None,
                   engine: str = "vllm"
                   ) -> list[Candidate]:
    """xPyD: x prefill replicas sized for the prompt rate, y decode replicas for TPOT alone
    (none for a load of one output token per request: there is no decode to split off)."""
    mean_in, mean_out = load.means()
    if mean_out < 2:
        return []
    isl, osl = max(1, round(mean_in)), max(1, round(mean_out))
    out: list[Candidate] = []
    profile = profile_for(engine)
    for gpu in gpus:
        acc = resolve_accelerator(gpu)
        weights = fastest_weights(model, acc)
        best: Candidate | None = None
        for tp in (1, 2, 4, 8):
            try:
                dep = _deployment(model, acc, tp, 1, weights, "bf16", engine=engine)
            except InputError:
                continue
            cap = max_batch(dep, isl + osl, EngineSettings(max_model_len=isl + osl,
                                                           engine_version=engine_version))
            if cap < 1:
                continue
            prefill_s = step_time_s(dep, [Seq(isl, 0)], profile)
            transfer_s = handoff_s(dep, isl)
            if prefill_s + transfer_s > slo.ttft_s:
                continue
            # prefill pool: keep utilisation ≤ 0.7 so queueing leaves TTFT within the SLO
            x = max(1, math.ceil(load.rate * prefill_s / 0.7))
            lo, hi = 1, cap
            ctx = mean_decode_context(isl, osl)
            if step_time_s(dep, decode_batch(1, ctx), profile) > slo.tpot_s:
                continue
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if step_time_s(dep, decode_batch(mid, ctx), profile) <= slo.tpot_s:
                    lo = mid
                else:
                    hi = mid - 1
            tpot = step_time_s(dep, decode_batch(lo, ctx), profile)
            y = max(1, math.ceil(load.rate / (lo / (osl * tpot))))
            if (x + y) * tp > max_gpus:
                continue
            c = Candidate(acc.id, tp, 1, weights, "bf16", None, lo, tpot,
                          prefill_s + transfer_s, lo / (osl * tpot), x + y,
                          prices.get(acc.id), False, profile.source,
                          (profile.band_low, profile.band_high), disaggregated=f"{x}P{y}D",
                          prefill_replicas=x)
            if best is None or c.gpus < best.gpus:
                best = c
        if best is not None:
            out.append(best)
    return sorted(out, key=lambda c: (c.cost_per_hour is None, c.cost_per_hour or 0.0, c.gpus))


def _pareto(model: ModelSpec, feasible: list[Candidate], load: Load,
            engine: str = "vllm") -> list[tuple[float, float, str]]:
    """Non-dominated (tok/s per GPU, tok/s per user) points over batch, per configuration."""
    mean_in, mean_out = load.means()
    ctx = mean_decode_context(mean_in, mean_out)
    points = []
    seen = set()
    profile = profile_for(engine)
    for c in feasible:
        key = (c.accelerator, c.tp, c.pp, c.weights, c.kv, c.expert_parallel)
        if key in seen:
            continue
        seen.add(key)
        dep = _deployment(model, resolve_accelerator(c.accelerator), c.tp, c.pp, c.weights, c.kv,
                          c.expert_parallel, engine=engine)
        b = 1
        while b <= max(1, c.batch):
            # a pipeline's batch runs as micro-batches: a token's step is one's trip
            t = step_time_s(dep, decode_batch(micro_batch(dep, b), ctx), profile)
            ep = " EP" if c.expert_parallel else ""
            pp = f" × PP{c.pp}" if c.pp > 1 else ""
            points.append((b / t / dep.num_gpus, 1 / t, f"{c.accelerator} TP{c.tp}{pp}{ep} "
                                                       f"{c.weights}, KV {c.kv}, b{b}"))
            b *= 2
    points.sort(key=lambda p: (-p[1], -p[0]))
    frontier, best = [], -1.0
    for p in points:
        if p[0] > best:
            frontier.append(p)
            best = p[0]
    return frontier


def _closest_miss(model: ModelSpec, load: Load, slo: Slo, gpus: Sequence[str],
                  max_gpus: int, engine: str = "vllm") -> str:
    mean_in, mean_out = load.means()
    context = round(mean_in + mean_out)
    best: tuple[float, str] | None = None
    profile = profile_for(engine)
    for gpu in gpus:
        acc = resolve_accelerator(gpu)
        for tp in (n for n in (8, 4, 2, 1) if n <= max_gpus):  # the most the limit allows
            try:
                dep = _deployment(model, acc, tp, 1, fastest_weights(model, acc), "bf16",
                                  engine=engine)
            except InputError:
                continue
            if max_batch(dep, context, EngineSettings(max_model_len=context)) < 1:
                break  # the widest group does not hold the model: no narrower one will
            ttft = step_time_s(dep, [Seq(max(1, round(mean_in)), 0)], profile)
            tpot = step_time_s(dep, decode_batch(1, mean_decode_context(mean_in, mean_out)), profile)
            miss = max(ttft / slo.ttft_s, tpot / slo.tpot_s)
            text = (f"{tp} x {acc.id}: TTFT ≥ {ttft * 1e3:,.0f} ms, TPOT ≥ {tpot * 1e3:,.1f} ms "
                    "even unloaded")
            if miss <= 1:
                text = (f"{tp} x {acc.id} meets the SLO unloaded (TTFT {ttft * 1e3:,.0f} ms, "
                        f"TPOT {tpot * 1e3:,.1f} ms), but no batch sustaining "
                        f"{load.rate:g} req/s within {max_gpus} GPU{'s' if max_gpus > 1 else ''} "
                        "keeps the p"
                        f"{slo.percentile:g} latencies under it: the load is the miss")
            if best is None or miss < best[0]:
                best = (miss, text)
            break
    if best is None:
        return (f"does not fit: no group of up to {min(8, max_gpus)} GPUs "
                f"({', '.join(gpus)}) holds {model.name} with room for one request")
    return best[1]
