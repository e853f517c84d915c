"""Tensor, pipeline and expert parallelism: how work splits, and what the collectives cost
(which experts an expert-parallel rank holds and reads: expert_ranks.py).

Collectives follow the α–β model: each of the ring's steps pays a latency α and moves
its share of the message at the link's per-direction bandwidth β.
A ring all-reduce over n ranks takes 2(n−1) steps of bytes/n each, after a fixed launch:
t = t0 + 2(n−1)·(α + bytes / (n·β)) (Patarasuk & Yuan 2009; NCCL's ring algorithm). Inside an
NVLink or Infinity Fabric domain, serving engines send small messages (a decode step's
activations) through one- or two-shot kernels instead: a fixed latency plus the same bytes,
t = 8 µs + 2·(n−1)/n · bytes / β, whichever is faster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ridgeline.hardware import Accelerator

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment

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
def node_size(acc: Accelerator) -> int:
    return NODE_SIZE.get(acc.id, DEFAULT_NODE_SIZE)


def host_gpus(acc: Accelerator) -> int:
    """The ``acc`` one operating-system host carries, whose RAM pins what they offload: the
    catalog's ``host_gpus`` (a GB200 compute tray: 4, of an NVLink domain of 72), else a
    DGX/HGX board's 8, or fewer where the NVLink domain is smaller (a GH200: 1)."""
    return acc.host_gpus or min(DEFAULT_NODE_SIZE, node_size(acc))


def tp_within_node(tp: int, outer: int, node: int) -> tuple[int, int] | None:
    """The same TP × ``outer`` GPUs with tensor parallelism inside one node of ``node``: (node,
    outer × tp ÷ node), ``outer`` the pipeline stages (or data-parallel ranks) of TP ``tp``
    each. TP16 × PP4 on 8-GPU nodes: TP8 × PP8, still 64 GPUs. None where TP already fits a
    node, or a node's GPUs do not divide it (TP12 on nodes of 8)."""
    if tp <= node or tp % node:
        return None
    return node, outer * tp // node


def cross_node_caution(tp: int, pp: int, acc: Accelerator, engine: str, ranks: int = 1,
                       devices: int = 1, num_layers: int | None = None) -> str:
    """What to say of tensor parallelism past one node, or "": every all-reduce then crosses
    the network between nodes, priced so; vLLM's docs advise TP inside a node and PP across
    (llama.cpp splits layers, not tensors, unless -sm tensor asks). The remedy keeps the GPUs
    (tp_within_node, fit's lever too): TP16 × PP4 of H100s as TP8 × PP8, unless that is more
    stages than ``num_layers``. Under data-parallel attention (``ranks`` of ``tp`` GPUs
    each), which takes no pipeline stages, more ranks of a node each keep them inside one.
    ``tp`` counts the engine's ranks, ``devices`` a card (vLLM on MI250s: TP32 is 16 cards,
    2 nodes of 8, each node TP16)."""
    cards = node_size(acc)
    node = cards * devices
    if tp <= node or engine.startswith("llama.cpp"):
        return ""
    nodes = -(-tp // node)
    split = tp_within_node(tp, ranks if ranks > 1 else pp, node)
    if split is None or (ranks == 1 and num_layers is not None and split[1] > num_layers):
        remedy = (f"a TP that divides a node's {node}, with "
                  + ("more data-parallel ranks" if ranks > 1 else "pipeline stages")
                  + " across nodes, keeps them")
    elif ranks > 1:
        flags = (f"--dp-size {split[1]}, the same --tp-size" if engine == "sglang" else
                 f"--data-parallel-size {split[1]} --tensor-parallel-size {node}")
        remedy = f"DP{split[1]} × TP{node} ({flags}) keeps each rank's all-reduces"
    else:
        remedy = f"TP{node} × PP{split[1]} (-tp {node} -pp {split[1]}) keeps them"
    dies = f" ({node} dies)" if devices > 1 else ""
    return (f"TP{tp} spans {nodes} nodes of {cards} {acc.id}{dies}: every all-reduce crosses the "
            f"network between them (priced at {INTER_NODE_BYTES_PER_S * 8 / 1e9:,.0f} Gb/s; "
            f"`--explain` shows its share); {remedy} inside a node")


def deployment_cross_node_caution(dep: Deployment) -> str:
    """cross_node_caution of ``dep``'s whole layout, as fit, decode, prefill and simulate say
    it: the TP ranks its engine launches (vLLM's two an MI250, a node of 4 its 8 dies), its
    pipeline stages, data-parallel ranks and layers."""
    return cross_node_caution(dep.engine_tensor_parallel_size, dep.pipeline_parallel_size,
                              dep.accelerator, dep.engine, dep.data_parallel_size,
                              dep.devices_per_gpu, dep.model.num_layers)


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
