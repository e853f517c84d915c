"""SGLang's expert load balancing: --enable-eplb and the redundant experts of
--ep-num-redundant-experts, read into the EPLBSettings vLLM's are, so one formula sizes both
engines' replicas (engines.json sglang.eplb holds each rule with its source).

SGLang builds each MoE layer with n_routed + N physical experts and deals them whole over its
--ep-size ranks, (n_routed + N) ÷ ep_size a rank (FusedMoE asserts the division is exact). The
replicas are loaded with the weights whether or not --enable-eplb moves them, so the pool
loses them either way. DeepSeek-V3 on --tp 8 --ep-size 8 with 32 redundant: 36 experts a GPU
instead of 32, the same 9.52 GiB vLLM's EPLB adds (memory.ep_extra_bytes, the one formula).
SGLang refuses --enable-eplb at ep_size 1 with a bare assert; ridgeline says so in one line.

Without --enable-eplb SGLang sends no token to the replicas (sglang_unrouted_caution): its
trivial layout deals physical slot s, a copy of expert s mod E, to rank s ÷ ((E + N) ÷ R),
so the replicas sit on the last ranks and the first ranks serve (E + N) ÷ R experts each, 36
of DeepSeek-V3's 256 on EP8 with 32 redundant where 32 is the mean. The step prices that
rank: 1.125 × the tokens, and the reads of the 36 it serves.
"""

from __future__ import annotations

from typing import Any

from ridgeline.deployment import Deployment
from ridgeline.expert_ranks import EP_IMBALANCE
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
    are priced: expert_ranks.busiest_rank_physical_experts); without it nothing moves, and the
    layout its replicas leave is priced (sglang_unrouted_caution), so ""."""
    if not enabled:
        return ""
    every = sglang_eplb_data()["rebalance_num_iterations"]
    return (f"SGLang's rebalancing every eplb_rebalance_num_iterations ({every:,}) steps is "
            f"not priced")


def sglang_unrouted_caution(redundant_experts: int) -> str:
    """How a step prices SGLang's replicas without --enable-eplb. Without --enable-eplb (or
    an --init-expert-location) ep_dispatch_algorithm stays unset, so
    ExpertLocationDispatchInfo.init_new returns None and select_experts maps no logical
    expert to a replica (topk_ids_logical_to_physical returns the ids it is given): expert
    i runs as physical i. The trivial layout makes physical i a copy of i mod E
    (ExpertLocationMetadata.init_trivial) and deals the slots in order, so the replicas, on
    the last ranks, take no token, and the first ranks serve (E + N) ÷ R experts each:
    their share of the tokens, (E + N) ÷ E × the mean on top of the stated skew, at most
    all of them, R × the mean (expert_ranks.trivial_layout_imbalance), and of the reads
    (expert_ranks.busiest_rank_routed_experts). engines.json sglang.eplb.without_eplb_source
    names each source."""
    n = f"{redundant_experts:,}"
    return (f"without --enable-eplb SGLang routes no token to the {n} replicas, which its "
            f"trivial layout keeps on the last ranks, so each step prices the busiest "
            f"expert-parallel rank serving (experts + {n}) ÷ ranks experts: ridgeline's stated "
            f"{EP_IMBALANCE:g} × (experts + {n}) ÷ experts the mean routed tokens (at most "
            f"all of them, ranks × the mean), reading "
            f"the experts it serves that the step touches (all of them once every expert is)")


def sglang_replicas_source() -> str:
    """The rule fit's --explain cites for SGLang's redundant experts."""
    return ("SGLang's num_experts = n_routed_experts + ep_num_redundant_experts, "
            "num_local_experts = num_experts // moe_ep_size: fused_moe_triton/layer.py")
