"""Tensor, pipeline and expert parallelism: how work splits, and what the collectives cost.

Collectives follow the α–β model: each of the ring's steps pays a latency α and moves
its share of the message at the link's per-direction bandwidth β.
A ring all-reduce over n ranks takes 2(n−1) steps of bytes/n each, after a fixed launch:
t = t0 + 2(n−1)·(α + bytes / (n·β)) (Patarasuk & Yuan 2009; NCCL's ring algorithm). Inside an
NVLink or Infinity Fabric domain, serving engines send small messages (a decode step's
activations) through one- or two-shot kernels instead: a fixed latency plus the same bytes,
t = 8 µs + 2·(n−1)/n · bytes / β, whichever is faster.
"""

from __future__ import annotations

import collections
import itertools
import math

from ridgeline.hardware import Accelerator

# Per-step latency of a collective, by link kind. NVLink, Infinity Fabric and ICI are
# order-of-magnitude figures (small messages there go through shot kernels, below). PCIe:
# NCCL all-reduces on PCIe-only machines took 13-17 µs at 8-16 KB on 2 GPUs (one machine),
# and 15-33 µs on 4 and 19-71 µs on 8 at 8-64 KB (nccl-tests and SGLang's tuner on RTX PRO
# 6000 Blackwell, V100 over a PLX switch, RTX 2080 Ti, 3090 and 4090; docs/collectives.md):
# t0 + 2(n−1)·α with t0 = 8 µs and α = 2.5 µs gives 13, 23 and 43 µs.
LINK_LATENCY_S = {"nvlink": 3e-6, "infinity-fabric": 5e-6, "pcie": 2.5e-6, "ici": 5e-6}
RING_LAUNCH_S = 8e-6  # t0: NCCL's kernel launch and completion, what the shot kernels pay too
DEFAULT_LATENCY_S = 10e-6
PCIE4_X16_BYTES_PER_S = 32e9  # when a card's record has no link figure
# Between nodes: one 400 Gb/s InfiniBand/RoCE NIC per GPU, per direction, ~5 µs per hop.
INTER_NODE_BYTES_PER_S = 50e9
INTER_NODE_LATENCY_S = 5e-6
# GPUs that share one NVLink/Infinity Fabric domain; NVL72 racks make 72 GB200s one domain.
# cards one fabric domain joins: a GB200 NVL72 rack; a GH200 alone; an MI250/MI250X host's 4
# OAMs, each linked to the other three (OLCF's Frontier user guide: 4 MI250X a node; a 4 x MI250
# host's `rocm-smi --shownodesbw`, huggingface/optimum-amd docs/source/amdgpu/perf_hardware.mdx)
NODE_SIZE = {"gb200": 72, "gh200": 1, "mi250": 4, "mi250x": 4}
DEFAULT_NODE_SIZE = 8
# Serving engines all-reduce small messages inside an NVLink / Infinity Fabric domain with
# one- or two-shot kernels (every rank reads its peers' buffers directly), not a ring: a
# fixed ~8 µs whatever the TP degree. vLLM's custom all-reduce on H100 measured 8.5–11.8 µs
# for 512 B–32 KB at TP 2/4/8 (SGLang PR #2904, without CUDA graphs; SGLang's own 3.7–7.8 µs).
LOW_LATENCY_ALL_REDUCE_S = 8e-6
LOW_LATENCY_FABRICS = ("nvlink", "infinity-fabric")
MESH_FABRICS = ("infinity-fabric",)  # point-to-point links, one a peer, not switched
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


def node_size(acc: Accelerator) -> int:
    return NODE_SIZE.get(acc.id, DEFAULT_NODE_SIZE)


def host_gpus(acc: Accelerator) -> int:
    """The ``acc`` one operating-system host carries, whose RAM pins what they offload: the
    catalog's ``host_gpus`` (a GB200 compute tray: 4, of an NVLink domain of 72), else a
    DGX/HGX board's 8, or fewer where the NVLink domain is smaller (a GH200: 1)."""
    return acc.host_gpus or min(DEFAULT_NODE_SIZE, node_size(acc))


def cross_node_caution(tp: int, acc: Accelerator, engine: str, ranks: int = 1,
                       devices: int = 1) -> str:
    """What to say of tensor parallelism past one node, or "": every all-reduce then crosses
    the network between nodes, priced so; vLLM's docs advise TP inside a node and PP across
    (llama.cpp splits layers, not tensors, unless -sm tensor asks). Under data-parallel
    attention (``ranks`` of ``tp`` GPUs each), which takes no pipeline stages, more ranks of
    a node each keep them inside one. ``tp`` counts the engine's ranks, ``devices`` a card
    (vLLM on MI250s: TP32 is 16 cards, 2 nodes of 8, each node TP16)."""
    cards = node_size(acc)
    node = cards * devices
    if tp <= node or engine.startswith("llama.cpp"):
        return ""
    nodes = -(-tp // node)
    if ranks > 1:
        flags = (f"--dp-size {ranks * nodes}, the same --tp-size" if engine == "sglang" else
                 f"--data-parallel-size {ranks * nodes} --tensor-parallel-size {node}")
        remedy = f"DP{ranks * nodes} × TP{node} ({flags}) keeps each rank's all-reduces"
    else:
        remedy = f"TP{node} × PP{nodes} (-pp {nodes}) keeps them"
    dies = f" ({node} dies)" if devices > 1 else ""
    return (f"TP{tp} spans {nodes} nodes of {cards} {acc.id}{dies}: every all-reduce crosses the "
            f"network between them (priced at {INTER_NODE_BYTES_PER_S * 8 / 1e9:,.0f} Gb/s; "
            f"`--explain` shows its share); {remedy} inside a node")


def link_latency_s(acc: Accelerator) -> float:
    kind = (acc.link_kind or "").lower()
    for prefix, latency in LINK_LATENCY_S.items():
        if kind.startswith(prefix):
            return latency
    return DEFAULT_LATENCY_S


def interconnect_bytes_per_s(acc: Accelerator, peers: int | None = None) -> float:
    """What one GPU moves per second to ``peers`` others of its node (all of them by default).
    NVLink runs through switches, so any peers get it all; AMD's Infinity Fabric is a full
    mesh of point-to-point links, one a peer, so a GPU reaches only the links to the peers
    it talks to: an MI300X's 448 GB/s a direction is 7 links of 64, one between a TP2 pair."""
    total = acc.link_bytes_per_s or PCIE4_X16_BYTES_PER_S
    links = node_size(acc) - 1
    if peers is None or not (acc.link_kind or "").lower().startswith(MESH_FABRICS) \
            or links < 1:
        return total
    return total * min(peers, links) / links


def _ring(message_bytes: float, ranks: int, latency_s: float, bytes_per_s: float,
          passes: int = 2) -> float:
    """A ring collective: the launch, then ``passes`` × (n−1) steps of bytes/n (an
    all-reduce's reduce-scatter and all-gather: 2; an all-gather alone: 1)."""
    return RING_LAUNCH_S + passes * (ranks - 1) * (latency_s
                                                   + message_bytes / (ranks * bytes_per_s))


def _shots(message_bytes: float, ranks: int, bytes_per_s: float) -> float:
    """One- or two-shot all-reduce: a fixed latency, and each rank moves 2(n−1)/n of the bytes."""
    return LOW_LATENCY_ALL_REDUCE_S + 2 * (ranks - 1) / ranks * message_bytes / bytes_per_s


def all_reduce_time_s(message_bytes: float, ranks: int, acc: Accelerator,
                      devices: int = 1) -> float:
    """All-reduce of ``message_bytes`` over ``ranks``: a ring, 8 ranks, 16 MB over 450 GB/s
    NVLink -> 8 µs + 14·(3 µs + 16e6/(8·450e9)) ≈ 112 µs; inside NVLink the shot kernels'
    8 µs + 2·7/8·16e6/450e9 ≈ 70 µs, and for a decode step's 16 KB 8 µs against the ring's
    50 µs. Four PCIe cards, 64 KB: 8 µs + 6·(2.5 µs + 64e3/(4·32e9)) ≈ 26 µs.

    ``ranks`` counts the engine's ranks, ``devices`` of them to a card (vLLM on an MI250:
    its 2 dies, die_link_bytes_per_s). Beyond one node it is hierarchical: a ring inside
    each node, then one across the nodes over the inter-node network (the slower leg sets
    the price of cross-node TP).
    """
    return _hierarchical(message_bytes, ranks, acc, devices, passes=2, shots=True)


def all_gather_time_s(message_bytes: float, ranks: int, acc: Accelerator,
                      devices: int = 1) -> float:
    """All-gather over ``ranks`` into ``message_bytes``, the gathered tensor (each rank
    brings bytes/n): NCCL's ring, the all-gather half of a ring all-reduce, n−1 steps of
    bytes/n after the launch, t0 + (n−1)·(α + bytes/(n·β)). vLLM sends its all-gathers
    through NCCL (DeviceCommunicatorBase.all_gather: torch.distributed.all_gather_into_tensor);
    the shot kernels are its all-reduce's alone. Two H100s over NVLink, a decode's 8 KB:
    8 µs + (3 µs + 8e3/(2·450e9)) ≈ 11 µs. Beyond one node, a ring in each node then one
    across them, as all_reduce_time_s; ``devices`` as there."""
    return _hierarchical(message_bytes, ranks, acc, devices, passes=1, shots=False)


def _hierarchical(message_bytes: float, ranks: int, acc: Accelerator, devices: int,
                  passes: int, shots: bool) -> float:
    """A ring inside each node over its cards' reach (``shots``: the one-shot kernels where
    cheaper, on a low-latency fabric), then one across the nodes over the inter-node network;
    ``passes`` rings of n−1 steps (all-reduce 2, all-gather 1)."""
    if ranks <= 1 or message_bytes <= 0:
        return 0.0
    cards = -(-ranks // devices)
    local_cards = min(cards, node_size(acc))
    local = min(ranks, local_cards * devices)
    reach = rank_link_bytes_per_s(acc, local_cards, devices)
    t = _ring(message_bytes, local, link_latency_s(acc), reach, passes)
    if shots and local > 1 and (acc.link_kind or "").lower().startswith(LOW_LATENCY_FABRICS):
        t = min(t, _shots(message_bytes, local, reach))
    nodes = -(-cards // local_cards)
    if nodes > 1:
        t += _ring(message_bytes, nodes, INTER_NODE_LATENCY_S, INTER_NODE_BYTES_PER_S, passes)
    return t


def rank_link_bytes_per_s(acc: Accelerator, cards: int, devices: int = 1) -> float:
    """What one rank of a collective over ``cards`` of a node moves to its neighbours per
    second, ``devices`` ranks to a card: a card's reach to the others (interconnect_bytes_per
    _s); for the dies of an MI250 under vLLM, the slowest leg of their ring, which crosses
    both the in-package link between a card's dies (die_link_bytes_per_s, 200 GB/s a
    direction) and the card's links to the other cards of its board (host_gpus: 4 OAMs, one
    Infinity Fabric hive), each die its share. 4 x MI250, 8 dies: 300 GB/s × 3/3 peers ÷ 2
    dies = 150 GB/s, under the dies' 200; 2 x MI250: 300 × 1/3 ÷ 2 = 50; one card: 200."""
    if devices == 1:
        return interconnect_bytes_per_s(acc, cards - 1)
    card = acc.link_bytes_per_s or PCIE4_X16_BYTES_PER_S
    die = acc.die_link_bytes_per_s or card
    if cards <= 1:
        return die
    peers = max(1, min(host_gpus(acc), node_size(acc)) - 1)
    return min(die, card * min(cards - 1, peers) / peers / devices)


def exchange_time_s(message_bytes: float, ranks: int, acc: Accelerator,
                    devices: int = 1) -> float:
    """Data-parallel attention's exchange around a MoE layer: every rank's tokens gathered to
    all ``ranks`` GPUs before it, its outputs reduce-scattered after (vLLM's default
    allgather_reducescatter backend; SGLang's gather and scatter), ``message_bytes`` the whole
    batch's activations. An all-gather and a reduce-scatter are the two halves of a ring
    all-reduce, so the pair is priced as one all-reduce of them: DeepSeek-V3's 512 tokens
    (7.3 MB) over 8 H200s, 8 µs + 2·7/8 · 7.3e6/450e9 ≈ 37 µs a layer. ``devices``: as
    all_reduce_time_s."""
    return all_reduce_time_s(message_bytes, ranks, acc, devices)


def send_time_s(message_bytes: float, acc: Accelerator, inter_node: bool = False) -> float:
    """Point-to-point activation hand-off between pipeline stages."""
    if message_bytes <= 0:
        return 0.0
    if inter_node:
        return INTER_NODE_LATENCY_S + message_bytes / INTER_NODE_BYTES_PER_S
    return link_latency_s(acc) + message_bytes / interconnect_bytes_per_s(acc, 1)


def pipeline_hops(tp: int, pp: int, acc: Accelerator) -> tuple[int, int]:
    """(hops inside a node, hops between nodes) for pp stages of tp GPUs each."""
    if pp <= 1:
        return 0, 0
    per_node = max(1, node_size(acc) // tp)  # stages that fit in one node
    inter = (pp - 1) // per_node if per_node < pp else 0
    return pp - 1 - inter, inter


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
