"""Expert parallelism's ranks: which experts each rank holds, how many a step's tokens make
it read, and how far the busiest rank's routed tokens stand above the mean, which every rank
waits for (the step prices the busiest rank: cost._token_ops, floors.py).

Each MoE layer's E experts are dealt whole over the R expert-parallel ranks, ⌈E ÷ R⌉ at most
a rank. Under vLLM's or SGLang's --enable-eplb, N redundant replicas join them, (E + N) ÷ R a
rank, and each token's expert is served by one of its copies; SGLang's replicas without
--enable-eplb take no token, its first ranks serving (E + N) ÷ R experts each. A rank's read
is a sum of binomials (each expert touched alike and apart), the busiest rank's the expected
maximum over the ranks.
"""

from __future__ import annotations

import collections
import itertools
import math

# The busiest expert-parallel rank's routed tokens over the mean, which every rank waits for.
# Without a load balancer: a stated factor, no source measuring the 2-8 ranks of one node;
# TensorRT-LLM measured far worse at 32 (DeepSeek-R1 on 32 GB200s, decode, a translation set:
# (max − mean) ÷ mean by rank 1.564, averaged over layers and iterations, its Table 1,
# docs/source/blogs/tech_blog/blog4_Scaling_Expert_Parallelism_in_TensorRT-LLM.md), and SGLang
# finds the imbalance growing with the ranks (lmsys.org/blog/2025-05-05-large-scale-ep).
EP_IMBALANCE = 1.2
# With redundant experts a load balancer places (TensorRT-LLM's; vLLM's and SGLang's
# --enable-eplb run DeepSeek's EPLB to the same end): the same TensorRT-LLM run with 32
# redundant experts placed from its own statistics (288 slots, 9 a rank on EP32) measured
# (max − mean) ÷ mean 0.109 (0.115 with 8 a rank on EP36), against 1.564 without. Its
# placement was fitted to the traffic it then served: a best case.
EPLB_IMBALANCE_RATIO = 0.109
EP_IMBALANCE_EPLB = 1 + EPLB_IMBALANCE_RATIO


def ep_imbalance(balanced: bool) -> float:
    """The busiest expert-parallel rank's routed tokens over the mean: EP_IMBALANCE_EPLB
    where EPLB places redundant experts (``balanced``), else the stated EP_IMBALANCE; 1.109
    against 1.2, so a step's expert matmuls on that rank shrink by 1.109 ÷ 1.2 = 0.92."""
    return EP_IMBALANCE_EPLB if balanced else EP_IMBALANCE


def ep_rank_experts(num_experts: int, ranks: int) -> int:
    """The most experts one expert-parallel rank holds: vLLM's determine_expert_map gives each
    ⌊E ÷ R⌋ and the remainder to the first ranks (Mixtral's 8 over 16 GPUs: one whole expert
    on each of eight)."""
    return -(-num_experts // ranks)


def busiest_rank_experts(num_experts: int, ranks: int, touched: float) -> float:
    """The experts the busiest of ``ranks`` expert-parallel ranks reads in a step, expected,
    when a step touches ``touched`` of ``num_experts``: each rank holds up to ⌈E ÷ R⌉, each
    touched alike and apart (probability touched ÷ E), and the step waits for the rank that
    touched most, E[max of R binomials] = Σₖ (1 − F(k)^R) (F from _binomial_pmf, which does not
    underflow where nearly all are touched). One token's 8 of 128 experts on 8 ranks: 1 a rank
    on average, 2.5 on the busiest."""
    held = ep_rank_experts(num_experts, ranks)
    p = min(1.0, max(0.0, touched / num_experts))
    if p in (0.0, 1.0):
        return held * p
    holding = min(ranks, num_experts)  # ranks that hold any
    return sum(1 - min(1.0, cdf) ** holding
               for cdf in itertools.accumulate(_binomial_pmf(held, p)[:held]))


def replica_touch_probability(touched_fraction: float, copies: int) -> float:
    """The chance a step touches one of a logical expert's ``copies`` physical replicas, when
    it touches the logical expert with probability ``touched_fraction``: each of its tokens
    goes to one replica, which (vLLM's EPLB: a uniform random pick, torch.rand_like ×
    logical_replica_count in FusedMoE.select_experts of v0.10-era layer.py; since then the
    token's flattened position modulo the replica count, eplb_map_to_physical in
    fused_moe/router/base_router.py) sends each replica 1 ÷ c of the expert's tokens. Thinning
    a Poisson count by 1 ÷ c leaves a replica untouched with (1 − p)^(1/c): 1 − (1 − p)^(1/c).
    A DeepSeek-V3 token's 8 of 256 experts (p = 1/32) on one of 2 replicas: 0.0157, half p."""
    p = min(1.0, max(0.0, touched_fraction))
    return 1.0 - float((1.0 - p) ** (1.0 / copies))


def physical_experts_touched(num_experts: int, redundant: int, touched: float) -> float:
    """The physical experts a step reads over all the expert-parallel ranks, expected, when it
    touches ``touched`` of ``num_experts`` logical experts and EPLB holds ``redundant``
    replicas beside them, dealt as busiest_rank_physical_experts deals them (N experts with a
    second copy under even load; past N = E, c or c + 1 copies each): each copy of an expert
    with c copies touched with replica_touch_probability, so more than ``touched`` where a
    step's tokens reach two copies of one expert; ``touched`` itself without replicas, all
    E + N once every expert is touched. DeepSeek-V3 at batch 64 (222.4 of 256 touched) with
    32 replicas: 235.5."""
    if redundant <= 0:
        return touched
    p = min(1.0, max(0.0, touched / num_experts))
    copies, more = divmod(num_experts + redundant, num_experts)  # ``more`` carry copies + 1
    return ((num_experts - more) * copies * replica_touch_probability(p, copies)
            + more * (copies + 1) * replica_touch_probability(p, copies + 1))


# A binomial term below this is taken as 0: far under any figure printed, and the sum of two
# binomials skips their empty tails (a rank of 384 experts: under half the work)
NEGLIGIBLE_PROBABILITY = 1e-18


def _binomial_pmf(n: int, p: float) -> list[float]:
    """P(X = k) for k = 0..n of X ~ Binomial(n, p): the term at the mode from its logarithm,
    the rest by the ratio of successive terms outward from it, stopping where they fall under
    NEGLIGIBLE_PROBABILITY (0 past there), the whole scaled to sum to 1 (else the peak's
    rounding would enter every 1 − F(k) past the tail). Starting from (1 − p)^n instead would
    start at 0 where that underflows (under 1e-308: 256 experts a rank at p = 0.95), leaving
    every term 0 and the busiest rank at all it holds."""
    if p <= 0.0:
        return [1.0] + [0.0] * n
    if p >= 1.0:
        return [0.0] * n + [1.0]
    q = 1.0 - p
    mode = min(n, int((n + 1) * p))
    pmf = [0.0] * (n + 1)
    peak = math.exp(math.lgamma(n + 1) - math.lgamma(mode + 1) - math.lgamma(n - mode + 1)
                    + mode * math.log(p) + (n - mode) * math.log1p(-p))
    pmf[mode] = peak
    term, k = peak, mode
    while k < n and term >= NEGLIGIBLE_PROBABILITY:  # up: P(k + 1) = P(k) (n − k) p ÷ (k + 1) q
        term *= (n - k) / (k + 1) * p / q
        k += 1
        pmf[k] = term if term >= NEGLIGIBLE_PROBABILITY else 0.0
    term, k = peak, mode
    while k > 0 and term >= NEGLIGIBLE_PROBABILITY:  # down: P(k − 1) = P(k) k q ÷ (n − k + 1) p
        term *= k / (n - k + 1) * q / p
        k -= 1
        pmf[k] = term if term >= NEGLIGIBLE_PROBABILITY else 0.0
    total = math.fsum(pmf)
    return [t / total for t in pmf]


def _sum_pmf(a: list[float], b: list[float]) -> list[float]:
    """The distribution of X + Y, X and Y independent with pmfs ``a`` and ``b`` (their zero
    terms skipped)."""
    out = [0.0] * (len(a) + len(b) - 1)
    kept = [(j, y) for j, y in enumerate(b) if y]
    for i, x in enumerate(a):
        if x:
            for j, y in kept:
                out[i + j] += x * y
    return out


def busiest_rank_physical_experts(num_experts: int, redundant: int, ranks: int,
                                  touched: float) -> float:
    """The physical experts the busiest of ``ranks`` expert-parallel ranks reads in a step,
    expected, when EPLB holds ``redundant`` replicas beside the ``num_experts`` logical ones
    ((E + N) ÷ R a rank, vllm_eplb.py) and a step touches ``touched`` logical experts. Under
    ridgeline's even routing, DeepSeek's EPLB (replicate_experts: each replica to the expert
    with the most load per copy) gives N experts a second copy (past N = E, each expert
    c = ⌊(E + N) ÷ E⌋ copies and (E + N) mod E of them c + 1) and packs every rank to the
    same load (balanced_packing), so a rank holds its share of the fewer- and of the
    more-copied experts' slots, those the ranks cannot share evenly one each on the first
    ranks; a replica is touched with
    replica_touch_probability, the rank's read is the sum of the two binomials, and the step
    waits for the rank that read most, E[max over ranks] = Σₖ (1 − Πᵣ Fᵣ(k)), as
    busiest_rank_experts without replicas (which this is for N = 0). Every expert touched: all
    (E + N) ÷ R, DeepSeek-V3 on EP8 with 32 redundant 36 where busiest_rank_experts gives 32;
    one token's 8 of 256 experts: 28 one-copy and 8 replica slots a rank, still 1 expected a
    rank, 2.548 on the busiest against 2.544 without replicas."""
    if redundant <= 0:
        return busiest_rank_experts(num_experts, ranks, touched)
    physical = num_experts + redundant
    held = ep_rank_experts(physical, ranks)
    p = min(1.0, max(0.0, touched / num_experts))
    if p in (0.0, 1.0):
        return held * p
    copies, more = divmod(physical, num_experts)  # ``more`` experts carry copies + 1
    crowded = more * (copies + 1)  # their slots, dealt as evenly as the ranks allow
    few, extra_ranks = divmod(crowded, ranks)
    cdfs: list[tuple[list[float], int]] = []
    for slots, count in ((few, ranks - extra_ranks), (few + 1, extra_ranks)):
        if count == 0:
            continue
        slots = min(slots, held)
        pmf = _sum_pmf(_binomial_pmf(held - slots, replica_touch_probability(p, copies)),
                       _binomial_pmf(slots, replica_touch_probability(p, copies + 1)))
        cdfs.append((list(itertools.accumulate(pmf)), count))
    return sum(1 - math.prod(min(1.0, cdf[k]) ** count for cdf, count in cdfs)
               for k in range(held))


def trivial_layout_routed_experts(num_experts: int, redundant: int, ranks: int
                                  ) -> tuple[int, ...]:
    """Each expert-parallel rank's experts that take tokens when SGLang holds ``redundant``
    replicas without --enable-eplb. Its trivial layout puts physical slot s on rank
    s ÷ L (L = (E + N) ÷ R a rank, _compute_gpu_id_of_physical_expert) holding logical
    expert s mod E (ExpertLocationMetadata.init_trivial), and with no dispatch algorithm
    (ep_dispatch_algorithm stays None without --enable-eplb or an --init-expert-location)
    select_experts leaves logical i as physical i, so only a rank's slots below E take
    tokens: min(L, E − r·L), at least 0. DeepSeek-V3 on EP8 with 32 redundant: 36 on ranks
    0-6 and 4 on rank 7, whose 32 replicas take none."""
    held = ep_rank_experts(num_experts + redundant, ranks)
    return tuple(min(held, max(0, num_experts - rank * held)) for rank in range(ranks))


def trivial_layout_imbalance(num_experts: int, redundant: int, ranks: int) -> float:
    """The busiest expert-parallel rank's routed tokens over the mean that SGLang's trivial
    layout alone leaves under even routing (trivial_layout_routed_experts): the rank that
    serves most experts takes that many E-ths of the tokens, the mean rank 1 ÷ R of them,
    max × R ÷ E. DeepSeek-V3 on EP8 with 32 redundant: 36 × 8 ÷ 256 = 1.125, (E + N) ÷ E
    wherever (E + N) ÷ R ≤ E; 1 with no replica and R dividing E."""
    return max(trivial_layout_routed_experts(num_experts, redundant, ranks)) \
        * ranks / num_experts


def busiest_rank_routed_experts(num_experts: int, redundant: int, ranks: int,
                                touched: float) -> float:
    """The experts the busiest expert-parallel rank reads in a step, expected, under SGLang's
    trivial layout without --enable-eplb (trivial_layout_routed_experts: rank r serves aᵣ
    experts, its replicas none), when a step touches ``touched`` of the E logical experts:
    each touched alike and apart (probability touched ÷ E), rank r reads Binomial(aᵣ, p),
    and the step waits for the rank that read most, E[max] = Σₖ (1 − Πᵣ Fᵣ(k)), as
    busiest_rank_experts (which this is for N = 0). Every expert touched: the 36 a
    DeepSeek-V3 EP8 rank with 32 redundant serves, not 32; one token's 8 of 256: 2.66 on
    the busiest against 2.544 without replicas, 7 of its ranks serving 36 where plain EP's 8
    hold 32 (a simulation of uniform routing: 2.67)."""
    if redundant <= 0:
        return busiest_rank_experts(num_experts, ranks, touched)
    served = trivial_layout_routed_experts(num_experts, redundant, ranks)
    p = min(1.0, max(0.0, touched / num_experts))
    if p in (0.0, 1.0):
        return max(served) * p
    cdfs = [(list(itertools.accumulate(_binomial_pmf(count, p))), ranks_serving)
            for count, ranks_serving in collections.Counter(served).items()]
    return sum(1 - math.prod(min(1.0, cdf[min(k, len(cdf) - 1)]) ** n for cdf, n in cdfs)
               for k in range(max(served)))
