"""SGLang's expert load balancing: --enable-eplb and the redundant experts of
--ep-num-redundant-experts, read into the EPLBSettings vLLM's are, so one formula sizes both
engines' replicas (engines.json sglang.eplb holds each rule with its source).

SGLang builds each MoE layer with n_routed + N physical experts and deals them whole over its
--ep-size ranks, (n_routed + N) ÷ ep_size a rank (FusedMoE asserts the division is exact). The
replicas are loaded with the weights whether or not --enable-eplb moves them, so the pool
loses them either way. DeepSeek-V3 on --tp 8 --ep-size 8 with 32 redundant: 36 experts a GPU
instead of 32, the same 9.52 GiB vLLM's EPLB adds (memory.ep_extra_bytes, the one formula).
SGLang refuses --enable-eplb at ep_size 1 with a bare assert; ridgeline says so in one line.
"""

from __future__ import annotations

from typing import Any

from ridgeline.deployment import Deployment
from ridgeline.sglang_memory import sglang_data

FLAG = "--ep-num-redundant-experts"


def sglang_eplb_data() -> dict[str, Any]:
    """engines.json sglang.eplb: SGLang's asserts in its words, and where each is."""
    data: dict[str, Any] = sglang_data()["eplb"]
    return data


def sglang_layout_problem(dep: Deployment, redundant_experts: int, enabled: bool,
                          spelling: str) -> str:
    """Why SGLang does not start with these redundant experts on ``dep``, or "": vLLM's
    spelling, a model without experts, --enable-eplb at --ep-size 1 (SGLang's assert), a
    total of experts its --ep-size does not divide (FusedMoE's assert); and the replicas
    without --enable-eplb at --ep-size 1, which SGLang runs and ridgeline does not model."""
    data = sglang_eplb_data()
    if spelling != FLAG and redundant_experts:
        return (f"{spelling} is vLLM's; SGLang's redundant experts are {FLAG} "
                f"{redundant_experts}")
    moe = dep.model.moe
    if moe is None:
        return f"{FLAG} and --enable-eplb balance a MoE's experts: {dep.model.name} has none"
    ranks = dep.engine_expert_ranks if dep.expert_parallel else 1
    if ranks < 2 and enabled:
        return (f"--enable-eplb at --ep-size 1: SGLang refuses it ({data['needs_ep_size']!r}); "
                "give --ep-size equal to --tp-size")
    if ranks < 2:  # SGLang starts: n_routed + N experts, each sliced over the TP ranks
        return (f"{FLAG} {redundant_experts} at --ep-size 1 is not modelled (SGLang slices "
                f"all {moe.num_experts} + {redundant_experts} experts over the TP ranks); give "
                "--ep-size equal to --tp-size, where each rank holds whole experts")
    total = moe.num_experts + redundant_experts
    if total % ranks:
        fewest = (-total) % ranks
        return (f"{FLAG} {redundant_experts}: SGLang refuses {moe.num_experts} + "
                f"{redundant_experts} = {total} experts over --ep-size {ranks} "
                f"({data['even_refusal']!r}); {redundant_experts + fewest} would divide")
    return ""


def sglang_unpriced_moves(enabled: bool) -> str:
    """What of SGLang's balancing the step leaves unpriced: its rebalancing every
    eplb_rebalance_num_iterations (1,000) passes under --enable-eplb (the replicas' reads
    are priced: parallel.busiest_rank_physical_experts); without it, the layout its replicas
    leave. Without --enable-eplb (or --init-expert-location) ep_dispatch_algorithm stays
    unset, so select_experts maps no logical expert to a replica (topk.py: only with an
    ExpertLocationDispatchInfo) and expert i is physical i; the trivial layout makes physical
    i a copy of i mod E (ExpertLocationMetadata.init_trivial), so the replicas, on the last
    ranks, take no token, and the first ranks hold (E + N) ÷ R experts that do."""
    if not enabled:
        return ("without --enable-eplb SGLang routes no token to the replicas, whose trivial "
                "layout leaves the first ranks (experts + N) ÷ ranks experts that take tokens "
                "each, more than their share: not priced")
    every = sglang_eplb_data()["rebalance_num_iterations"]
    return (f"SGLang's rebalancing every eplb_rebalance_num_iterations ({every:,}) steps is "
            f"not priced")


def sglang_replicas_source() -> str:
    """The rule fit's --explain cites for SGLang's redundant experts."""
    return ("SGLang's num_experts = n_routed_experts + ep_num_redundant_experts, "
            "num_local_experts = num_experts // moe_ep_size: fused_moe_triton/layer.py")
