"""Analytical sizing of one replica, for the capacity planner's search (``plan``).

A candidate replica is sized analytically: the largest batch whose TPOT at the SLO's
percentile (B decodes, and the prompts that arrive while a request decodes, both with their
Poisson spread; ``size_replica``) meets the SLO and fits the KV pool and the token budget,
and the rate it sustains, capped by the prompt and output tokens a step's budget takes and
by the prompts' queue within the TTFT SLO (``prompt_queue_load``: every drawn prompt at its
own length, prefilled in chunks beside the batch's decodes, ``ChunkedPrefill``) and by the KV
pool's room for arriving prompts (``pool_limit_req_s``). What cannot
fit or cannot meet the SLO on its own sizes to None, which prunes it from the search. An ITL
SLO caps the batch where a gap at its percentile, a decode step or one carrying a prompt's
chunk, passes it, and prunes where a lone decode step does; the simulated checks judge it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from itertools import pairwise
from statistics import NormalDist
from typing import NamedTuple

from ridgeline.attention_span import keys_read
from ridgeline.capacity import (
    context_refusal,
    engine_seat_limit,
    held_conversations,
    holds_one_at,
    max_batch,
    seats_that_fit,
)
from ridgeline.context_length import served_positions
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
from ridgeline.engines import EngineProfile
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.monotone import longest_holding
from ridgeline.pool_blocking import POOL_CELLS, PoolLoad, pool_rate_req_s
from ridgeline.serving_load import Load, Slo

MODEL_LEN_STEP = 256  # a --max-model-len shrunk below the model's context: a multiple of this
DEFAULT_CONTEXT = 131072  # a model whose config states no positions (as sim_config takes it)


def model_context(dep: Deployment) -> int:
    """The --max-model-len the engine starts with by default: the model's own context."""
    return served_positions(dep.model, dep.engine) or DEFAULT_CONTEXT


def starts_at(dep: Deployment, settings: EngineSettings, max_model_len: int) -> bool:
    """Whether a launch at --max-model-len ``max_model_len`` serves a request that long: the
    model takes that length (context_refusal) and the pool holds one such sequence
    (capacity.holds_one_at, fit's verdict). SGLang and TensorRT-LLM start past their pool
    but refuse a request longer than it, so the planner launches them no longer than it
    holds, as `fit` counts (its lever "--context-length N (the longest that holds 1)")."""
    if context_refusal(dep, max_model_len):
        return False
    return holds_one_at(dep, settings, max_model_len)


def state_seats(dep: Deployment, settings: EngineSettings, load: Load) -> int | None:
    """The max_batch_size a TensorRT-LLM replica of a hybrid model launches with where its
    default seats' recurrent state, which releases to 1.2 allocate up front
    (trtllm_memory.seat_state_bytes), leaves no room for one of the load's mean requests
    (prompt and output): the most seats whose pool holds as many such requests (0: not one);
    None where the default seats start (or the model keeps no state). Nemotron-H-56B fp8 on
    one H100, 1,000 + 250 tokens: 2,048 seats want 876.7 GiB, so 49 (KV fp8)."""
    pool = kv_pool(dep, settings)
    if not pool.seat_state_bytes:
        return None
    mean_in, mean_out = load.means()
    context = max(1, math.ceil(mean_in + mean_out))
    if pool.rest_bytes > 0 and held_conversations(pool, dep, context) >= 1:
        return None
    return seats_that_fit(dep, settings, context, pool.max_num_seqs)


def launch_length(dep: Deployment, settings: EngineSettings) -> int:
    """The --max-model-len a replica launches with: the model's context, the engine's
    default, where the pool holds one such sequence (``starts_at``; a paged pool reserves
    nothing per request by it); else the longest multiple of MODEL_LEN_STEP it holds one of;
    0 where none. Llama-3.1-8B on one H100 starts at its 131,072; Llama-3.1-70B in fp8 on one
    starts at no length worth serving; DeepSeek-V3 on 4 x B200 under SGLang
    (chunked_prefill_size 2048) at 141,056, not the 163,840 SGLang would start at."""
    context = model_context(dep)
    if starts_at(dep, settings, context):
        return context
    # in steps of MODEL_LEN_STEP (step 0 "starts": no length is the answer where none does)
    steps = longest_holding(lambda k: k == 0 or starts_at(dep, settings, k * MODEL_LEN_STEP),
                            0, (context - 1) // MODEL_LEN_STEP)
    return steps * MODEL_LEN_STEP


def launch_at(dep: Deployment, settings: EngineSettings, fixed: int = 0) -> int:
    """The --max-model-len a replica launches with where `plan --max-model-len` fixes it at
    ``fixed``: that length where the pool started at it holds one such request (``starts_at``,
    fit's verdict at `fit --max-model-len`), else 0 (it does not launch there); none fixed
    (0), the planner's own (``launch_length``). Llama-3.1-70B in fp8 on one H100 starts at
    no length worth serving: at 8,192 it does."""
    if not fixed:
        return launch_length(dep, settings)
    return fixed if starts_at(dep, settings, fixed) else 0


def pool_at_launch(dep: Deployment, settings: EngineSettings, max_model_len: int
                   ) -> tuple[int, int, int]:
    """What `fit --max-model-len L` reports of a replica launched at ``max_model_len`` under
    ``settings`` (its knobs), by fit's own functions: the pool's tokens as the engine logs
    them (``KVPool.logged_tokens``), the conversations of that length it holds
    (``held_conversations``) and the engine's seats (``engine_seat_limit``). Llama-3.1-8B in
    fp8 with an fp8 cache on one H100 under vLLM 0.34 at 8,192: 1,073,600 tokens, 131
    conversations, 1,024 seats."""
    pool = kv_pool(dep, replace(settings, max_model_len=max_model_len))
    return (pool.logged_tokens(max_model_len), held_conversations(pool, dep, max_model_len),
            engine_seat_limit(pool, dep))


def covers(load: Load, slo: Slo, max_model_len: int) -> bool:
    """Whether a launch at ``max_model_len`` refuses no more of the load's requests than the
    SLO's percentile spares (a refused request is a miss)."""
    return load.refused_share(max_model_len) <= (100 - slo.percentile) / 100


class ReplicaSizing(NamedTuple):
    batch: int
    tpot_s: float  # mean, at that batch
    ttft_floor_s: float
    rate_req_s: float  # the least of the four limits
    # req/s within the TPOT SLO at that batch, through the step's token budget, with the
    # prompts' queue keeping the TTFT SLO (inf: no TPOT to keep), and with the KV pool turning
    # few enough arrivals away for it (``pool_limit_req_s``)
    limits: tuple[float, float, float, float]


PROMPT_QUANTILES = 16  # prompt lengths the decodes' share of the prompts is priced at
PREFILL_KNOTS = 12  # prompt lengths, evenly spaced, a replica's prefills are priced at
LENGTH_GROUPS = 128  # equal-width groups of the load's prompt lengths the prompt queue reads
HEADROOM_BINS = 64  # equal-width bins of the TTFT SLO the prompts' headrooms are summed in
QUEUE_GROUPS = 32  # groups of the prompts' queue times their inner wait is summed over


def every_rank(dep: Deployment, batch: list[Seq]) -> list[Seq]:
    """``batch`` on each of ``dep``'s data-parallel ranks alike: each sequence once a rank, in
    the order ``cost.batch_shape`` deals them (rank 0 gets ``batch`` itself), so a step is
    priced with one rank's batch and the gathered layers on every rank's tokens. The sizing
    reads a data-parallel replica as that many lanes evenly loaded (the simulation deals
    the arrivals as the engine does); ``batch`` itself without data parallelism."""
    ranks = dep.data_parallel_size
    return batch if ranks == 1 else [s for s in batch for _ in range(ranks)]


def rank_budget(dep: Deployment, profile_tokens: int) -> int:
    """One data-parallel rank's step token budget: vLLM's --max-num-batched-tokens is each
    rank's; SGLang divides its --chunked-prefill-size over --dp-size (as
    sim.data_parallel.rank_config does); the whole budget without data parallelism."""
    ranks = dep.data_parallel_size
    return max(1, profile_tokens // ranks) if dep.engine == "sglang" and ranks > 1 \
        else profile_tokens


def lockstep_factor(ranks: int, busy: float) -> float:
    """How many times its own prompts' steps a data-parallel rank's decodes wait through,
    the ranks stepping together: a step is as long as its slowest rank's, so any rank's
    prompt chunk holds every rank's decodes. With each rank's steps carrying a prompt at
    share p (``busy``), a step carries one on some rank at 1 − (1 − p)^N: the factor is
    that ÷ p, N for rare prompts, 1 where every step carries one. 8 ranks at p = 0.1:
    5.7."""
    p = min(1.0, busy)
    if ranks == 1 or p >= 1.0:
        return 1.0
    if p <= 0.0:
        return float(ranks)
    return (1 - (1 - p) ** ranks) / p


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

    Llama-3.1-70B fp8 on 2 × H100, budget 8,192: a 32,000-token prompt is four chunks, 2.88 s
    against 2.84 s as one step (each chunk reads the keys before it), and beside four decodes
    no slower: its compute hides their reads. Llama-3.1-8B fp8 on one H100 with a budget of
    2,048: 0.75 s alone, 0.87 s beside 24 decodes of 32,000 tokens, whose reads each small
    chunk's step waits for (1.16×)."""

    def __init__(self, dep: Deployment, profile: EngineProfile, budget: int, decodes: int = 0,
                 decode_context: int = 0) -> None:
        self.dep, self.profile, self.decodes = dep, profile, decodes
        self.chunk = max(1, budget - decodes)
        self._windows = attention_windows(dep)
        # the decodes' keys per attention span: each reads its context and its new token
        # (in its window or chunk)
        self._keys = {w: float(decodes * keys_read(decode_context, 1, w))
                      for w in self._windows}
        self.decode_s = self._step_s(()) if decodes else 0.0
        self._full = [0.0]  # _full[k]: the steps of a prompt's first k whole chunks

    def _step_s(self, chunks: Sequence[Seq]) -> float:
        """step_time_s of the decodes and ``chunks``, its shape built in one sum, not B rows;
        with data-parallel attention every rank's alike (``every_rank``)."""
        shape = shape_of(self._windows, self.decodes, self._keys.__getitem__, chunks)
        ranks = self.dep.data_parallel_size
        if ranks > 1:
            shape = shape._replace(all_tokens=shape.tokens * ranks)
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
def drawn_lengths(load: Load) -> tuple[float, tuple[int, ...], tuple[int, ...]]:
    """What ``size_replica`` reads of the load's drawn requests, the same for every candidate:
    the prompts' squared coefficient of variation, the outputs sorted, and the prompts'
    PROMPT_QUANTILES slice means (``length_quantiles``)."""
    drawn = load.samples()
    mean_in = load.means()[0]
    cv2 = sum((p - mean_in) ** 2 for p, _ in drawn) / len(drawn) / mean_in ** 2
    return (cv2, tuple(sorted(o for _, o in drawn)),
            tuple(length_quantiles([p for p, _ in drawn], PROMPT_QUANTILES)))


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


@lru_cache(maxsize=256)
def chunked_prefills_s(dep: Deployment, profile: EngineProfile, budget: int, decodes: int,
                       decode_context: int, groups: tuple[tuple[float, int], ...]
                       ) -> tuple[tuple[float, float, int], ...]:
    """``prompt_prefills_s`` of the ``ChunkedPrefill`` beside ``decodes`` decodes, once per
    replica shape: candidates that differ in a knob the prefills do not read (max_num_seqs,
    where their batches come out alike) price the same prompts."""
    return tuple(prompt_prefills_s(ChunkedPrefill(dep, profile, budget, decodes,
                                                  decode_context), groups))


@lru_cache(maxsize=256)
def queue_load(prompts: tuple[tuple[float, float, int], ...], slo_s: float,
               tail: float) -> float:
    """``prompt_queue_load``, once per distinct prompts' prefills and SLO."""
    return prompt_queue_load(prompts, slo_s, tail)


def size_replica(dep: Deployment, profile: EngineProfile, load: Load, slo: Slo,
                 max_num_seqs: int | None, max_num_batched_tokens: int | None = None,
                 engine_version: str | None = None, max_model_len: int | None = None,
                 switches: EngineSettings | None = None) -> ReplicaSizing | None:
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
    chunks of the budget the batch's decodes leave, beside them: ``ChunkedPrefill``) and by
    the KV pool, which turns few enough arrivals away at it (``pool_limit_req_s``, priced
    again at the smaller batch a pool that binds leaves: Llama-3.1-70B fp8 on one H100 at
    lognormal 1,000 / 250-token requests, 0.55 req/s where the batch's TPOT allows 0.94); a
    load of one output token per request (no TPOT) is sized by the budget's cap alone.
    The pool is the one started at ``max_model_len`` (default: ``launch_length``), its
    batch counted in sequences of the load's mean length. Data-parallel attention's ranks
    are sized as lanes, each its own pool's share, seats and token budget, every step priced
    with each rank running the same batch (``every_rank``). An ITL SLO (``Slo.itl_s``) prunes
    a replica whose lone request's decode step, the least a gap can be, passes it, and caps
    the batch where its gap at the percentile passes it: a decode step where fewer of the
    steps carry another prompt's chunk (b × chunks ÷ output of them) than the percentile
    spares, else such a step (at p99, 1,000-token prompts and 250-token answers each in one
    chunk: a batch of 2 at most before every gap past p99 is a mixed step's). At a batch of
    1 it caps no further: the checks decide below it. ``switches``: the launch's settings
    beside those knobs (`plan --disable-hybrid-kv-cache-manager`:
    PlanConstraints.launch_settings; None: the engine's defaults)."""
    mean_in, mean_out = load.means()
    isl, osl = max(1, round(mean_in)), max(1, round(mean_out))
    cv2, outs, quantiles = drawn_lengths(load)
    settings = replace(switches or EngineSettings(), max_num_seqs=max_num_seqs,
                       max_num_batched_tokens=max_num_batched_tokens,
                       engine_version=engine_version)
    launch = launch_length(dep, settings) if max_model_len is None else max_model_len
    if not launch or (max_model_len is None and not covers(load, slo, launch)):
        return None
    settings = replace(settings, max_model_len=launch)  # SGLang's seats follow it
    # micro-batches in flight, one per stage; data-parallel attention's ranks, each a lane
    # of its own requests, its own pool and its own token budget (``every_rank``)
    lanes = dep.pipeline_parallel_size * dep.data_parallel_size
    cap = max_batch(dep, isl + osl, settings) // lanes
    if cap < 1:
        return None
    budget = rank_budget(dep, kv_pool(dep, settings).profile_tokens)
    ttft_floor = step_time_s(dep, [Seq(isl, 0)], profile)  # alone: the other ranks idle

    def step_s(batch: list[Seq]) -> float:
        """A step of ``batch`` on every data-parallel rank alike (``every_rank``)."""
        return step_time_s(dep, every_rank(dep, batch), profile)

    if ttft_floor > slo.ttft_s:
        return None
    # the load's prompts in slices of their lengths, each slice's prefill, for the decodes'
    # share: a prompt's attention grows with its square, so the mean prefill outruns the
    # mean prompt's
    services = [step_s([Seq(length, 0)]) for length in quantiles]
    # mean prefill ÷ mean prompt's (on every rank alike: ``step_s``)
    prefill_ratio = sum(services) / len(services) / (
        step_s([Seq(isl, 0)]) if dep.data_parallel_size > 1 else ttft_floor)
    # A step does at most the token budget (max_num_batched_tokens) of work, and a request
    # brings in + out tokens of it: the most requests a replica can take on, prompts packed.
    prompts = max(1, budget // isl)  # whole prompts a step packs, or one budget-long chunk
    packed = step_s([Seq(min(budget, isl), 0)] * prompts)
    most_rate = lanes * prompts * min(budget, isl) / packed / (isl + osl)
    ctx = mean_decode_context(isl, osl)
    if mean_out < 2:  # one output token each: no TPOT to keep, the prompts are the load
        return ReplicaSizing(lanes, step_s(decode_batch(1, ctx)), ttft_floor,
                             most_rate, (math.inf, most_rate, math.inf, math.inf))
    if slo.itl_s is not None and step_s(decode_batch(1, ctx)) > slo.itl_s:
        return None  # a lone request's every gap is one decode step: past the ITL SLO unloaded
    # B decodes and the B·in/out prompt tokens that keep B requests flowing share the budget:
    # B·(1 + in/out) ≤ budget, one request at least
    cap = min(cap, max(1, budget * osl // (isl + osl)))
    z = NormalDist().inv_cdf(slo.percentile / 100)
    # the output at the SLO's far end: p10 for a p90 SLO (``outs``: sorted)
    short = max(1, outs[int((1 - slo.percentile / 100) * (len(outs) - 1))])

    alone = dep.engine == "sglang"  # prompt steps run alone, the decodes waiting
    chunks_alone = math.ceil(isl / budget)
    prompt_alone = chunks_alone * step_s([Seq(math.ceil(isl / chunks_alone), 0)])

    def tpot(b: int, at_percentile: bool = True) -> float:
        # b requests on average (Little's law), but a request decodes beside the others: by
        # Poisson arrivals b of them on average, so its steps carry b + 1
        decode = step_s(decode_batch(b + 1, ctx))
        chunks = math.ceil(isl / max(1, budget - b))
        if alone:  # each prompt's steps (whole, or in budget-long chunks) are the decodes'
            # wait; prompts arriving together share a step (packed: its weights read once)
            per_prompt = min(prompt_alone, packed / prompts * chunks_alone) \
                if b * chunks_alone >= osl else prompt_alone
        elif b * chunks >= osl:  # prompts overlap: each step carries B·in/out prompt tokens
            spread = max(1, round(b * isl / osl))
            with_prompt = step_s([*decode_batch(b, ctx), Seq(spread, 0)])
            per_prompt = (with_prompt - decode) * osl / b
        else:  # now and then a step carries one prompt's chunk
            chunk = max(1, round(isl / chunks))
            with_chunk = step_s([*decode_batch(b, ctx), Seq(chunk, 0)])
            per_prompt = chunks * (with_chunk - decode)
        per_prompt *= prefill_ratio  # the load's prompts, not one of the mean length
        # the share of a rank's steps that carry a prompt: each request brings one prompt
        # of its steps' worth every osl decode steps
        busy = 1.0 if not alone and b * chunks >= osl else \
            b * (chunks_alone if alone else chunks) / osl
        # (each such step priced with every rank's chunk in it, ``step_s``: on the high side)
        per_prompt *= lockstep_factor(dep.data_parallel_size, busy)
        if not at_percentile:
            return decode + b * per_prompt / osl
        busy = max(b + 1, round(b + 1 + z * math.sqrt(b)))
        arrivals = b + z * math.sqrt(b * (1 + cv2) * osl / short)
        return step_s(decode_batch(busy, ctx)) + arrivals * per_prompt / osl

    def itl(b: int) -> float:
        # a gap at the SLO's percentile, b in flight: the decode step of b + 1 where fewer of
        # a rank's steps carry another prompt's chunk than the percentile spares (each
        # request brings its prompt's chunks every osl steps; any rank's chunk holds every
        # rank), else such a step (SGLang: a chunk's step alone, then the decodes')
        chunks = chunks_alone if alone else math.ceil(isl / max(1, budget - b))
        carrying = 1 - (1 - min(1.0, b * chunks / osl)) ** dep.data_parallel_size
        decode = step_s(decode_batch(b + 1, ctx))
        if carrying <= 1 - slo.percentile / 100:
            return decode
        if alone:
            return decode + prompt_alone / chunks_alone
        return step_s([*decode_batch(b + 1, ctx), Seq(min(isl, max(1, budget - b)), 0)])

    if tpot(1) > slo.tpot_s:
        return None
    # the largest batch whose percentile TPOT meets the SLO …
    lo = longest_holding(lambda b: tpot(b) <= slo.tpot_s, 1, cap)
    itl_slo_s = slo.itl_s
    if itl_slo_s is not None and itl(lo) > itl_slo_s:
        # … and whose ITL does (1 at least: the checks decide below it)
        lo = longest_holding(lambda b: itl(b) <= itl_slo_s, 1, lo - 1)
    mean = tpot(lo, at_percentile=False)
    # every prompt of the load at its own length, prefilled as the engine runs it: in chunks
    # of the budget the batch's decodes leave, beside them (SGLang: alone, the decodes wait)
    prefills = chunked_prefills_s(dep, profile, budget, 0 if alone else lo, ctx,
                                  length_groups(load))
    queue = queue_load(prefills, slo.ttft_s, 1 - slo.percentile / 100)
    if queue <= 0:  # more prompts than the percentile spares outlast the TTFT SLO alone
        return None
    held = sum(q * n for _, q, n in prefills) / sum(n for *_, n in prefills)  # a prompt's mean
    pool = pool_limit_req_s(dep, settings, load, ttft_floor, mean, 1 - slo.percentile / 100)
    # where the pool binds, its requests decode in a smaller batch than ``lo``, each step
    # quicker, each request held for less: priced once more at that batch (Little's law)
    in_flight = math.ceil(pool / lanes * (ttft_floor + osl * mean))
    if in_flight < lo:
        pool = pool_limit_req_s(dep, settings, load, ttft_floor,
                                tpot(max(1, in_flight), at_percentile=False),
                                1 - slo.percentile / 100)
    limits = (lanes * lo / (osl * mean), most_rate, lanes * queue / held, pool)
    return ReplicaSizing(lanes * lo, mean, ttft_floor, min(limits), limits)


def pool_limit_req_s(dep: Deployment, settings: EngineSettings, load: Load, ttft_s: float,
                     tpot_s: float, tail: float) -> float:
    """The replica's rate at which its KV pool, as the simulator runs it (``sim_config``,
    a pipeline lane's or a data-parallel rank's), turns few enough arrivals away for the
    TTFT SLO's ``tail`` (``pool_blocking.pool_rate_req_s``): each of the load's requests
    that the launch (``settings.max_model_len``) serves held for ``ttft_s`` and its output
    × ``tpot_s``; the pool's lanes (data-parallel ranks, a pipeline's lanes where each has a
    pool of its own) each take their share. Llama-3.1-70B fp8 on one H100 at lognormal
    1,000 / 250-token requests, p90, as ``size_replica`` prices it (at the batch the pool
    leaves): 0.55 req/s, where the batch's TPOT alone allows 0.94."""
    from ridgeline.sim.config import sim_config
    from ridgeline.sim.pipeline import lane_config
    from ridgeline.vllm_memory import one_pool

    pp = dep.pipeline_parallel_size
    config = lane_config(sim_config(dep, settings), pp, dep.engine, settings.engine_version)
    if config.num_blocks < 1:
        return 0.0
    cell_blocks = max(1, math.ceil(config.num_blocks / POOL_CELLS))
    held = served_pool_load(load, config.max_model_len, ttft_s, tpot_s, config.block_size,
                            cell_blocks, config.overhead_blocks, config.reserve_full)
    if held is None:
        return 0.0
    lanes = dep.data_parallel_size * (1 if pp <= 1 or one_pool(dep.engine, settings.engine_version)
                                      else pp)
    return lanes * pool_rate_req_s(held, config.num_blocks // cell_blocks, tail)


@lru_cache(maxsize=256)
def served_pool_load(load: Load, max_model_len: int, ttft_s: float, tpot_s: float,
                     block_tokens: int, cell_blocks: int, overhead_blocks: int,
                     reserve_whole: bool) -> PoolLoad | None:
    """The ``PoolLoad`` of the load's drawn requests a launch at ``max_model_len`` serves
    (None: not one), once per distinct input: a candidate's second pricing, and another
    candidate's pool of the same geometry and times, read it again (a PoolLoad is not
    changed once built)."""
    served = served_requests(load, max_model_len)
    if not served:
        return None
    return PoolLoad(served, ttft_s, tpot_s, block_tokens, cell_blocks, overhead_blocks,
                    reserve_whole)


@lru_cache(maxsize=16)
def served_requests(load: Load, max_model_len: int) -> tuple[tuple[int, int], ...]:
    """The load's drawn (prompt, output) requests a launch at ``max_model_len`` serves, in
    their drawn order: one tuple for every candidate launched at that length."""
    return tuple((p, o) for p, o in load.samples() if p + o <= max_model_len)


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
    on its length) nearly every prompt that waits is late. A 32k-token prompt taking 2.88 s
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
