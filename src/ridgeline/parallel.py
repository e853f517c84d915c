"""Tensor, pipeline and expert parallelism: how work splits, and what the collectives cost.

Collectives follow the α–β model: each of the ring's steps pays a latency α and moves
its share of the message at the link's per-direction bandwidth β.
A ring all-reduce over n ranks takes 2(n−1) steps of bytes/n each:
t = 2(n−1)·(α + bytes / (n·β)) (Patarasuk & Yuan 2009; NCCL's ring algorithm).
"""

from __future__ import annotations

from ridgeline.hardware import Accelerator

# Per-step latency of a collective, by link kind: order-of-magnitude figures for NCCL rings
# (NVLink ~ a few µs per hop; PCIe and Ethernet-style fabrics slower). Not fitted.
LINK_LATENCY_S = {"nvlink": 3e-6, "infinity-fabric": 5e-6, "pcie": 10e-6, "ici": 5e-6}
DEFAULT_LATENCY_S = 10e-6
PCIE4_X16_BYTES_PER_S = 32e9  # when a card's record has no link figure


def link_latency_s(acc: Accelerator) -> float:
    kind = (acc.link_kind or "").lower()
    for prefix, latency in LINK_LATENCY_S.items():
        if kind.startswith(prefix):
            return latency
    return DEFAULT_LATENCY_S


def link_bandwidth(acc: Accelerator) -> float:
    return acc.link_bytes_per_s or PCIE4_X16_BYTES_PER_S


def all_reduce_time_s(message_bytes: float, ranks: int, acc: Accelerator) -> float:
    """Ring all-reduce: 8 ranks, 16 MB over 450 GB/s NVLink -> 14·(3 µs + 16e6/(8·450e9)) ≈ 104 µs."""
    if ranks <= 1 or message_bytes <= 0:
        return 0.0
    steps = 2 * (ranks - 1)
    return steps * (link_latency_s(acc) + message_bytes / (ranks * link_bandwidth(acc)))


def all_to_all_time_s(message_bytes: float, ranks: int, acc: Accelerator) -> float:
    """Expert-parallel dispatch or combine: each rank sends (n−1)/n of its tokens away."""
    if ranks <= 1 or message_bytes <= 0:
        return 0.0
    return (ranks - 1) * (link_latency_s(acc) + message_bytes / (ranks * link_bandwidth(acc)))


def send_time_s(message_bytes: float, acc: Accelerator) -> float:
    """Point-to-point activation hand-off between pipeline stages."""
    if message_bytes <= 0:
        return 0.0
    return link_latency_s(acc) + message_bytes / link_bandwidth(acc)
