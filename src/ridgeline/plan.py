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
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import pairwise
from statistics import NormalDist
from typing import Any, NamedTuple

from ridgeline.candidate import Candidate, fastest_weights, replica_deployment, weight_choices
from ridgeline.capacity import max_batch, refuses_to_start
from ridgeline.cost import (
    Seq,
    attention_windows,
    decode_batch,
    mean_decode_context,
    shape_of,
    shape_time_s,
    step_time_s,
)
from ridgeline.deployment import Deployment
from ridgeline.disaggregated import (
    DISAGGREGATED_CHECKS,
    disaggregated_candidates,
    verify_disaggregated,
)
from ridgeline.engines import MIN_GROUP_ROWS, EngineProfile, accelerator_group, profile_for
from ridgeline.errors import InputError
from ridgeline.hardware import Accelerator, resolve_accelerator
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.model import ModelSpec, served_positions
from ridgeline.parallel import node_size
from ridgeline.serving_load import Load, Slo
from ridgeline.sim.config import sim_config, v0_scheduling_caution
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


class ReplicaSizing(NamedTuple):
    batch: int
    tpot_s: float  # mean, at that batch
    ttft_floor_s: float
    rate_req_s: float  # the least of the three limits
    # req/s within the TPOT SLO at that batch, through the step's token budget, and with the
    # prompts' queue keeping the TTFT SLO (inf: no TPOT to keep)
    limits: tuple[float, float, float]


PROMPT_QUANTILES = 16  # prompt lengths the decodes' share of the prompts is priced at
PREFILL_KNOTS = 12  # prompt lengths, evenly spaced, a replica's prefills are priced at
LENGTH_GROUPS = 128  # equal-width groups of the load's prompt lengths the prompt queue reads
HEADROOM_BINS = 64  # equal-width bins of the TTFT SLO the prompts' headrooms are summed in
QUEUE_GROUPS = 32  # groups of the prompts' queue times their inner wait is summed over


def length_quantiles(lengths: Sequence[int], n: int) -> list[int]:
    """``lengths`` in ``n`` equal slices, shortest first, each slice's mean: their mean is the
    lengths' mean (a slice's middle would leave out a heavy tail's far end)."""
    ordered = sorted(lengths)
    cuts = [round(i * len(ordered) / n) for i in range(n + 1)]
    return [max(1, round(sum(ordered[a:b]) / (b - a))) for a, b in pairwise(cuts) if b > a]


class ChunkedPrefill:
    """A prompt's prefill as vLLM's scheduler runs it beside ``decodes`` running decodes of
    ``decode_context`` tokens each: the decodes take a token of each step's budget
    (max_num_batched_tokens), the prompt the rest, so it runs in chunks of budget − decodes,
    each attending to the prompt's tokens before it, each step carrying the decodes
    (``decodes`` 0: SGLang's prompt steps, run alone). Two times per prompt (``times_s``):

    - own: its time to its first token when it waits for no other prompt, Σ over its chunks
      of step(decodes + chunk);
    - queue: the time it holds the steps from the prompts behind it, each chunk's
      step(decodes + chunk) − step(decodes), plus its tokens' share of the decodes' step,
      chunk ÷ (budget − decodes) of it: a whole chunk holds its whole step, a short prompt
      packed with others a share.

    Llama-3.1-70B fp8 on 2 × H100, budget 8,192: a 32,000-token prompt is four chunks, 2.91 s
    against 2.87 s as one step (each chunk reads the keys before it), and beside four decodes
    no slower: its compute hides their reads. Llama-3.1-8B fp8 on one H100 with a budget of
    2,048: 0.76 s alone, 0.88 s beside 24 decodes of 32,000 tokens, whose reads each small
    chunk's step waits for (1.16×)."""

    def __init__(self, dep: Deployment, profile: EngineProfile, budget: int, decodes: int = 0,
                 decode_context: int = 0) -> None:
        self.dep, self.profile, self.decodes = dep, profile, decodes
        self.chunk = max(1, budget - decodes)
        self._windows = attention_windows(dep)
        # the decodes' keys per attention window: each reads its context and its new token
        self._keys = {w: float(decodes * (decode_context + 1 if w is None else
                                          min(decode_context + 1, w))) for w in self._windows}
        self.decode_s = self._step_s(()) if decodes else 0.0
        self._full = [0.0]  # _full[k]: the steps of a prompt's first k whole chunks

    def _step_s(self, chunks: Sequence[Seq]) -> float:
        """step_time_s of the decodes and ``chunks``, its shape built in one sum, not B rows."""
        shape = shape_of(self._windows, self.decodes, self._keys.__getitem__, chunks)
        return shape_time_s(self.dep, shape, self.profile)

    def times_s(self, prompt_tokens: int) -> tuple[float, float]:
        """(own, queue) of a prompt of ``prompt_tokens`` tokens."""
        whole, rest = divmod(prompt_tokens, self.chunk)
        full = self._full
        while len(full) <= whole:
            full.append(full[-1] + self._step_s([Seq(self.chunk, (len(full) - 1) * self.chunk)]))
        own = full[whole] + (self._step_s([Seq(rest, whole * self.chunk)]) if rest else 0.0)
        steps = whole + (1 if rest else 0)
        return own, own - self.decode_s * (steps - prompt_tokens / self.chunk)


@lru_cache(maxsize=64)
def length_groups(load: Load) -> tuple[tuple[float, int], ...]:
    """The load's drawn prompt lengths in LENGTH_GROUPS equal-width groups from the shortest
    to the longest, each non-empty one's (mean length, prompts): every prompt at about its
    own length (a heavy tail's longest few keep theirs), in a few hundred sums."""
    lengths = [p for p, _ in load.samples()]
    low, high = min(lengths), max(lengths)
    width = (high - low) / LENGTH_GROUPS or 1.0
    sums: dict[int, list[float]] = {}
    for p in lengths:
        group = sums.setdefault(min(LENGTH_GROUPS - 1, int((p - low) / width)), [0.0, 0])
        group[0] += p
        group[1] += 1
    return tuple((total / count, int(count)) for total, count in
                 (sums[i] for i in sorted(sums)))


def prompt_prefills_s(prefill: ChunkedPrefill, groups: Sequence[tuple[float, int]]
                      ) -> list[tuple[float, float, int]]:
    """(own_s, queue_s, prompts) of each group of prompt lengths (``length_groups``): priced
    at PREFILL_KNOTS lengths evenly spaced from the shortest to the longest, linearly
    between (a prefill grows smoothly with its length: its matmuls linearly, its attention
    with the square; a chunk's fixed costs add a step's worth of milliseconds)."""
    low, high = groups[0][0], groups[-1][0]
    knots = sorted({round(low + (high - low) * i / (PREFILL_KNOTS - 1))
                    for i in range(PREFILL_KNOTS)})
    priced = [(k, *prefill.times_s(max(1, k))) for k in knots]
    out, i = [], min(1, len(priced) - 1)
    for length, count in groups:  # shortest first: the knot above each moves up
        while i < len(priced) - 1 and priced[i][0] < length:
            i += 1
        (a, own_a, queue_a), (b, own_b, queue_b) = priced[max(0, i - 1)], priced[i]
        f = (length - a) / (b - a) if b > a else 0.0
        out.append((own_a + f * (own_b - own_a), queue_a + f * (queue_b - queue_a), count))
    return out


def size_replica(dep: Deployment, profile: EngineProfile, load: Load, slo: Slo,
                 max_num_seqs: int | None, max_num_batched_tokens: int | None = None,
                 engine_version: str | None = None) -> ReplicaSizing | None:
    """(batch, mean TPOT, TTFT floor, sustainable rate, its three limits) of one replica, or
    None if it cannot.

    The batch is the largest whose TPOT at the SLO's percentile meets the SLO: each request's
    decode steps cost the decode of the batch it sees, itself and the B others a Poisson
    arrival finds (at the batch's own percentile: B in flight vary by √B), plus its share of
    the prompts that arrive while it decodes, priced over slices of the load's lengths.
    By Little's law B of them arrive, more or fewer by √(B·(1 + cv²)) (cv:
    the prompt lengths' coefficient of variation) over a request of the mean output; a short
    request sees a rougher share, and the percentile is set by the short ones, so the spread
    is scaled by √(mean ÷ the output at the percentile's far end). A prompt shorter than the step's token
    budget is prefilled whole in one step, a longer one in budget-sized chunks; only when
    prompts overlap does every step carry some. Under SGLang, whose prompt steps run alone,
    the decodes wait through each prompt's whole steps (packed with the prompts arriving
    with it when they overlap), not a mixed step's margin. The rate follows from the mean TPOT, capped
    by the prompt and output tokens a step's budget takes and by the prompts' queue within
    the TTFT SLO (``prompt_queue_load``: every drawn prompt at its own length, prefilled in
    chunks of the budget the batch's decodes leave, beside them: ``ChunkedPrefill``); a
    load of one output token per request (no TPOT) is sized by the budget's cap alone."""
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
    # the load's prompts in slices of their lengths, each slice's prefill, for the decodes'
    # share: a prompt's attention grows with its square, so the mean prefill outruns the
    # mean prompt's
    services = [step_time_s(dep, [Seq(length, 0)], profile) for length in
                length_quantiles([p for p, _ in drawn], PROMPT_QUANTILES)]
    prefill_ratio = sum(services) / len(services) / ttft_floor  # mean prefill ÷ mean prompt's
    # A step does at most the token budget (max_num_batched_tokens) of work, and a request
    # brings in + out tokens of it: the most requests a replica can take on, prompts packed.
    prompts = max(1, budget // isl)  # whole prompts a step packs, or one budget-long chunk
    packed = step_time_s(dep, [Seq(min(budget, isl), 0)] * prompts, profile)
    most_rate = lanes * prompts * min(budget, isl) / packed / (isl + osl)
    ctx = mean_decode_context(isl, osl)
    if mean_out < 2:  # one output token each: no TPOT to keep, the prompts are the load
        return ReplicaSizing(lanes, step_time_s(dep, decode_batch(1, ctx), profile), ttft_floor,
                             most_rate, (math.inf, most_rate, math.inf))
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
        # b requests on average (Little's law), but a request decodes beside the others: by
        # Poisson arrivals b of them on average, so its steps carry b + 1
        decode = step_time_s(dep, decode_batch(b + 1, ctx), profile)
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
        per_prompt *= prefill_ratio  # the load's prompts, not one of the mean length
        if not at_percentile:
            return decode + b * per_prompt / osl
        busy = max(b + 1, round(b + 1 + z * math.sqrt(b)))
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
    # every prompt of the load at its own length, prefilled as the engine runs it: in chunks
    # of the budget the batch's decodes leave, beside them (SGLang: alone, the decodes wait)
    prefills = prompt_prefills_s(ChunkedPrefill(dep, profile, budget, 0 if alone else lo, ctx),
                                 length_groups(load))
    queue = prompt_queue_load(prefills, slo.ttft_s, 1 - slo.percentile / 100)
    if queue <= 0:  # more prompts than the percentile spares outlast the TTFT SLO alone
        return None
    held = sum(q * n for _, q, n in prefills) / sum(n for *_, n in prefills)  # a prompt's mean
    limits = (lanes * lo / (osl * mean), most_rate, lanes * queue / held)
    return ReplicaSizing(lanes * lo, mean, ttft_floor, min(limits), limits)


def prompt_queue_load(prompts: Sequence[tuple[float, float, int]], slo_s: float,
                      tail: float) -> float:
    """The largest share of time a replica's prompts can hold its steps (ρ, prompts arriving
    at random) while no more than ``tail`` of them reach their first token past ``slo_s``.
    ``prompts``: (own_s, queue_s, how many) of the load's prompts (``ChunkedPrefill``): a
    prompt's first token comes its own prefill after its wait W for the prompts ahead, late
    alone when its own prefill passes the SLO, else when W outlasts the headroom x left.

    Prompts queue for the steps one after another (M/G/1, Q the queue times): a prompt waits
    with probability ρ, and then the rest R of the prefill under way (density
    P(Q > r) ÷ E[Q]) and the queue's other rests, a sum distributed as W again:
    P(W > x) = ρ·P(R + W > x). The inner W is taken exponential with the Pollaczek–Khinchine
    mean E[R] ÷ (1 − ρ) (E[R] = E[Q²] ÷ 2E[Q]); the rest is exact, so
    P(R + W > x) = P(R > x) + ρ·(m ÷ E[Q])·(E[e^(−(x − Q)⁺/m)] − e^(−x/m)), m = E[R] ÷ (1 − ρ):
    exact for exponential prefills, and for one long prompt length (a prefill's rest uniform
    on its length) nearly every prompt that waits is late. A 32k-token prompt taking 2.91 s
    against a p90 3 s SLO leaves a replica prefilling about a tenth of the time. Headrooms
    are summed in HEADROOM_BINS bins of the SLO."""
    n = sum(count for *_, count in prompts)
    queue = sorted((q, count) for _, q, count in prompts)
    mean = sum(q * count for q, count in queue) / n
    rest = sum(q * q * count for q, count in queue) / n / (2 * mean)  # E[R]
    alone = sum(count for own, _, count in prompts if own >= slo_s) / n
    bins: dict[int, list[float]] = {}  # headroom bin: [prompts, Σ headroom]
    for own, _, count in prompts:
        if own < slo_s:
            room = slo_s - own
            b = bins.setdefault(min(HEADROOM_BINS - 1, int(room / slo_s * HEADROOM_BINS)),
                                [0.0, 0.0])
            b[0] += count
            b[1] += count * room
    rooms = sorted((total / count, count) for count, total in bins.values())
    # P(R > x) = E[(Q − x)⁺] ÷ E[Q] at each headroom, the queue times above it summed once
    beyond, above, held, i = [], float(n), mean * n, 0  # prompts and Σ queue time with Q ≥ x
    for x, _ in rooms:
        while i < len(queue) and queue[i][0] < x:
            above -= queue[i][1]
            held -= queue[i][0] * queue[i][1]
            i += 1
        beyond.append(((held - x * above) / (mean * n), above))

    # the queue times in QUEUE_GROUPS groups for the inner wait's term (an integral over
    # them, smooth in each), each its mean
    size = max(1, math.ceil(len(queue) / QUEUE_GROUPS))
    groups = [(sum(q * c for q, c in part) / sum(c for _, c in part), sum(c for _, c in part))
              for part in (queue[k:k + size] for k in range(0, len(queue), size))]

    def late(rho: float) -> float:
        m = rest / (1 - rho)  # the inner wait's mean, given one
        # E[e^(−(x − Q)⁺/m)] − e^(−x/m), summed without cancelling: a Q ≥ x gives
        # 1 − e^(−x/m), a Q < x gives e^(−(x − Q)/m)·(1 − e^(−Q/m)) (below, kept as x grows)
        total, below, last, j = 0.0, 0.0, 0.0, 0
        for (x, count), (past, above) in zip(rooms, beyond):
            below *= math.exp(-(x - last) / m)
            last = x
            while j < len(groups) and groups[j][0] < x:
                q, c = groups[j]
                below -= c * math.exp(-(x - q) / m) * math.expm1(-q / m)
                j += 1
            inner = (below - above * math.expm1(-x / m)) / n
            total += count * (past + rho * m / mean * inner)
        return alone + rho * total / n

    # late() rises with ρ: the largest ρ whose tail is within ``tail``, by regula falsi
    # (Illinois: the end that stays put has its excess halved), a few evaluations, not dozens
    lo, hi = 0.0, 1.0 - 1e-9
    f_lo, f_hi = late(lo) - tail, late(hi) - tail
    if f_lo > 0:  # more than the tail are late with no queue at all
        return 0.0
    if f_hi <= 0:
        return hi
    side = 0
    for _ in range(100):  # a dozen, as a rule
        if hi - lo <= 1e-7:
            break
        mid = min(max((lo * f_hi - hi * f_lo) / (f_hi - f_lo), lo + 1e-9), hi - 1e-9)
        f_mid = late(mid) - tail
        if f_mid <= 0:
            lo, f_lo = mid, f_mid
            f_hi, side = (f_hi / 2, 1) if side == 1 else (f_hi, 1)
        else:
            hi, f_hi = mid, f_mid
            f_lo, side = (f_lo / 2, -1) if side == -1 else (f_lo, -1)
        if abs(f_mid) < 1e-9 * tail:
            break
    return lo


def _evaluate(args: tuple[ModelSpec, str, int, int, str, str, tuple[int | None, int | None],
                          bool, Load, Slo, int, float | None, str | None, str, int,
                          EngineProfile]
              ) -> Candidate | None:
    (model, gpu, tp, pp, weights, kv, (seqs, budget), ep, load, slo, max_gpus, price, version,
     engine, max_len, profile) = args
    acc = resolve_accelerator(gpu)
    try:
        dep = replica_deployment(model, acc, tp, pp, weights, kv, ep, engine=engine)
    except InputError:
        return None
    launch = EngineSettings(max_model_len=max_len, max_num_seqs=seqs,
                            max_num_batched_tokens=budget, engine_version=version)
    try:
        pool = kv_pool(dep, launch)
    except InputError:  # a shape this engine version cannot launch (vLLM's PP before 0.5.1)
        return None
    if refuses_to_start(pool, dep, max_len):
        return None  # the launch command's --max-model-len would not start
    sized = size_replica(dep, profile, load, slo, seqs, budget, version)
    if sized is None:
        return None
    batch, tpot, ttft, rate, limits = sized
    replicas = max(1, math.ceil(load.rate_req_s / rate * 1.0001))
    if replicas * tp * pp > max_gpus:
        return None
    group = accelerator_group(acc)
    fitted_here = profile.fitted_groups.get(group, 0)
    calibrated = fitted_here >= MIN_GROUP_ROWS
    why = (f"the {engine} profile has {fitted_here} fitted row{'s' if fitted_here != 1 else ''} on "
           f"{group} accelerators ({profile.source})")
    return Candidate(acc.id, tp, pp, weights, kv, seqs, batch, tpot, ttft, rate, replicas, price,
                     calibrated, why, (profile.band_low, profile.band_high),
                     expert_parallel=ep, max_num_batched_tokens=budget, rate_limits=limits)


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
                for tp, pp in layouts(node, max_gpus):
                    for knobs in ENGINE_KNOBS:
                        for ep in (False, True) if model.moe and tp > 1 else (False,):
                            yield acc.id, tp, pp, weights, kv, knobs, ep


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
    space = list(search_space(model, [resolve_accelerator(g).id for g in gpus], max_gpus))
    sizing = load.for_sizing()
    max_len = load.max_model_len(limit)  # the launch command's, for every candidate
    jobs = [(model, g, tp, pp, w, kv, knobs, ep, sizing, slo, max_gpus, table[g], engine_version,
             engine, max_len, profile) for g, tp, pp, w, kv, knobs, ep in space]
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
                                      engine, profile)
    _, mean_out = load.means()
    miss = "" if feasible else _closest_miss(model, load, slo, gpus, max_gpus, engine, profile)
    split = disaggregated_candidates(model, load, slo, gpus, max_gpus, table, engine_version, engine,
                                     profile)
    checked = [verify_disaggregated(model, c, load, slo, max_gpus, engine_version, engine,
                                    profile)
               for c in split[:DISAGGREGATED_CHECKS]]  # None: no size within max_gpus holds
    split = [c for c in checked if c is not None] + split[DISAGGREGATED_CHECKS:]
    candidates = tuple(verified + rest)
    win = candidates[0] if candidates else None
    note = load.transient(win.ttft_floor_s + mean_out * win.tpot_s) if win else ""
    cautions = tuple(c for c in (note, load.thin(slo.percentile, win.sim_requests if win and
                                                  win.sim_requests else None),
                                 _winner_caution(model, win, engine),
                                 v0_scheduling_caution(engine, engine_version)) if c)
    return PlanResult(load, slo, candidates, tuple(_best_per_gpu(unpriced)),
                      tuple(sorted(split, key=lambda c: (not c.verified, c.cost_per_hour is None,
                                                         c.cost_per_hour or 0.0, c.gpus))),
                      tuple(_pareto(model, feasible, load, engine, profile)), len(jobs), mean_out,
                      miss,
                      engine, cautions, engine_version)


def _winner_caution(model: ModelSpec, win: Candidate | None, engine: str) -> str:
    """What the measurements say of the winner's deployment that its pricing leaves out:
    FP8 and MXFP4 MoE on CDNA3 (predict.cdna3_moe_caution), or ""."""
    from ridgeline.predict import cdna3_moe_caution

    if win is None or win.disaggregated:
        return ""
    caution = cdna3_moe_caution(replica_deployment(
        model, resolve_accelerator(win.accelerator), win.tp, win.pp, win.weights, win.kv,
        win.expert_parallel, engine))
    return f"the winner: {caution}" if caution else ""


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
                     engine: str = "vllm", profile: EngineProfile | None = None
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
        checked = _verify(model, c, load, slo, max_gpus, engine_version, engine, profile)
        if checked is not None:
            verified.append(checked)
            best = min(best, checked.cost_per_hour or 0.0)
            shrink = min(shrink, checked.replicas / c.replicas)
    else:
        rest = []
    verified.sort(key=lambda c: (c.cost_per_hour or 0.0, c.gpus))
    return verified, rest


def _verify(model: ModelSpec, c: Candidate, load: Load, slo: Slo,
            max_gpus: int, engine_version: str | None = None, engine: str = "vllm",
            profile: EngineProfile | None = None) -> Candidate | None:
    """Simulate one replica at its share of the rate; add replicas until the SLO holds."""
    acc = resolve_accelerator(c.accelerator)
    dep = replica_deployment(model, acc, c.tp, c.pp, c.weights, c.kv, c.expert_parallel, engine=engine)
    settings = EngineSettings(max_num_seqs=c.max_num_seqs,
                              max_num_batched_tokens=c.max_num_batched_tokens,
                              max_model_len=load.max_model_len(served_positions(model,
                                                                                engine)),
                              engine_version=engine_version)
    if refuses_to_start(kv_pool(dep, settings), dep, settings.max_model_len or 0):
        return None  # the launch command's --max-model-len would not start
    engine_config = sim_config(dep, settings)
    config = lane_config(engine_config, c.pp, engine, engine_version)
    if config.num_blocks < 1:  # a lane whose pool holds no block cannot run a request
        return None
    profile = profile or profile_for(engine)
    lifetime = c.ttft_floor_s + load.means()[1] * c.tpot_s
    checked: dict[tuple[int, int], bool] = {}
    runs: dict[int, tuple[float, float, int, int, tuple[float, float]]] = {}  # the first draw's

    def holds(replicas: int, draw: int = 0) -> bool:
        """Whether ``replicas`` replicas meet the SLO in the steady state, on the load's
        requests or (``draw`` n) on another draw of them (memoised)."""
        if (replicas, draw) not in checked:
            drawn = replace(load, seed=load.seed + draw) if draw else load
            work, window = drawn.steady(replicas, lifetime)  # a replica's share
            result = run_replica(dep, profile, engine_config, work, engine_version,
                                 window_s=window)
            ttft, tpot = (result.latency_s_at(name, slo.percentile) for name in ("ttft", "tpot"))
            checked[replicas, draw] = ttft <= slo.ttft_s and (
                math.isnan(tpot) or tpot <= slo.tpot_s) \
                and result.rec.keeps_up  # a queue that grows misses the SLO, given time
            if not draw:
                runs[replicas] = (ttft, tpot, len(work), work[0].id if load.trace else 0,
                                  window)
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
    ttft, tpot, count, first, window = runs[high]
    return replace(c, replicas=high, verified=True, sim_ttft_s=ttft, sim_tpot_s=tpot,
                   analytic_replicas=c.replicas, sim_requests=count, sim_first=first,
                   sim_window_s=window if math.isfinite(window[0]) else None)


def _pareto(model: ModelSpec, feasible: list[Candidate], load: Load,
            engine: str = "vllm", profile: EngineProfile | None = None
            ) -> list[tuple[float, float, str]]:
    """Non-dominated (tok/s per GPU, tok/s per user) points over batch, per configuration."""
    mean_in, mean_out = load.means()
    ctx = mean_decode_context(mean_in, mean_out)
    points = []
    seen = set()
    profile = profile or profile_for(engine)
    for c in feasible:
        key = (c.accelerator, c.tp, c.pp, c.weights, c.kv, c.expert_parallel)
        if key in seen:
            continue
        seen.add(key)
        dep = replica_deployment(model, resolve_accelerator(c.accelerator), c.tp, c.pp, c.weights, c.kv,
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


def _holding(model: ModelSpec, acc: Accelerator, tp: int, pp: int, context: int,
             engine: str) -> tuple[bool, Deployment | None]:
    """(whether any TP``tp`` × PP``pp`` group of ``acc`` builds, the first the search could launch
    whose pool holds one request of ``context`` tokens or None): the fastest weights first,
    then the search's other formats, fp8 KV where the card has it, each with the search's
    engine knobs (vLLM's default 1,024 seats can leave no pool where 64 leave one)."""
    fastest = fastest_weights(model, acc)
    built = False
    for weights in [fastest, *(w for w in weight_choices(model) if w != fastest)]:
        for kv in ("fp8", "bf16") if acc.has("fp8") else ("bf16",):
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


def _closest_miss(model: ModelSpec, load: Load, slo: Slo, gpus: Sequence[str],
                  max_gpus: int, engine: str = "vllm", profile: EngineProfile | None = None
                  ) -> str:
    mean_in, mean_out = load.means()
    context = round(mean_in + mean_out)
    best: tuple[float, str] | None = None
    profile = profile or profile_for(engine)
    for gpu in gpus:
        acc = resolve_accelerator(gpu)
        # the search's layouts, the most GPUs the limit allows first
        short_at = 0  # the GPUs of a group that built and held no request
        for tp, pp in reversed(layouts(node_size(acc), max_gpus)):
            if tp * pp < short_at:
                break  # the widest groups do not hold the model: no narrower one will
            built, dep = _holding(model, acc, tp, pp, context, engine)
            if not built:
                continue  # no such split (heads that do not divide by tp)
            if dep is None:
                short_at = tp * pp
                continue
            ttft = step_time_s(dep, [Seq(max(1, round(mean_in)), 0)], profile)
            tpot = step_time_s(dep, decode_batch(1, mean_decode_context(mean_in, mean_out)), profile)
            miss = max(ttft / slo.ttft_s, tpot / slo.tpot_s)
            group = f"{tp * pp} x {acc.id}" + (f" (TP{tp} × PP{pp})" if pp > 1 else "")
            text = (f"{group}: TTFT ≥ {ttft * 1e3:,.0f} ms, TPOT ≥ {tpot * 1e3:,.1f} ms "
                    "even unloaded")
            if miss <= 1:
                text = (f"{group} meets the SLO unloaded (TTFT {ttft * 1e3:,.0f} ms, "
                        f"TPOT {tpot * 1e3:,.1f} ms), but no batch sustaining "
                        f"{load.rate_req_s:g} req/s within {max_gpus} GPU{'s' if max_gpus > 1 else ''} "
                        "keeps the p"
                        f"{slo.percentile:g} latencies under it: the load is the miss")
            if best is None or miss < best[0]:
                best = (miss, text)
            break
    if best is None:
        widest = max((tp * pp for gpu in gpus for tp, pp in
                      layouts(node_size(resolve_accelerator(gpu)), max_gpus)), default=1)
        return (f"does not fit: no group of up to {widest} {plural(widest, 'GPU')} "
                f"({', '.join(gpus)}) holds {model.name} with room for one request")
    return best[1]
