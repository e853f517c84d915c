"""vLLM's expert parallelism load balancer (--enable-eplb): the redundant experts every
expert-parallel rank holds, which the KV pool loses (engines.json vllm.eplb holds each rule
with its source).

Under --enable-expert-parallel each MoE layer's E experts are dealt whole over the R ranks of
the expert-parallel group (TP × DP). EPLB adds N redundant copies of the busiest ones: the
layer then has E + N physical experts, (E + N) ÷ R a rank, and vLLM insists the division is
exact. The copies are loaded with the weights, so each GPU holds, past its E ÷ R share,

    N ÷ R × one expert's bytes × MoE layers

DeepSeek-V3 (256 experts, 58 MoE layers, fp8-block) on EP8 with 32 redundant: 36 experts a
GPU instead of 32, 4 × 58 × 42.0 MiB = 9.52 GiB. The bytes themselves are ``ep_extra_bytes``'s
(memory.py), the one formula for whole experts on a rank; this module reads the flags and says
what vLLM refuses; SGLang's --ep-num-redundant-experts is read into the same EPLBSettings
(sglang_eplb.py). What the balance buys is priced in the step: with redundant experts the
busiest expert-parallel rank runs 1.109 × the mean routed tokens instead of the stated 1.2
(expert_ranks.ep_imbalance, from TensorRT-LLM's EP32 measurement of DeepSeek-R1), so the expert
matmuls on it shrink by 1.109 ÷ 1.2 = 0.92. What the replicas cost a step is priced too: the
busiest rank reads the physical experts it holds that the step's tokens reach, each token's
expert served by one of its replicas (expert_ranks.busiest_rank_physical_experts), so once every
expert is touched it reads (E + N) ÷ R experts' weights, DeepSeek-V3's 36 instead of 32, 12.5 %
more expert bytes a step, and at one token about as many as without replicas. What the
balancing costs is not: the weights vLLM moves between ranks every step_interval steps
(SGLang every eplb_rebalance_num_iterations), and EPLB without redundant experts, which only
reorders them, keeps the stated factor for want of a figure. SGLang's replicas without
--enable-eplb take no token; the first ranks then serve (E + N) ÷ R experts each, priced as
that layout leaves them (sglang_eplb.sglang_unrouted_caution).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ridgeline.deployment import Deployment
from ridgeline.engine_versions import release_reached
from ridgeline.errors import InputError
from ridgeline.expert_ranks import EP_IMBALANCE, EP_IMBALANCE_EPLB, ep_rank_experts
from ridgeline.flag_json import json_object
from ridgeline.sglang_eplb import FLAG as SGLANG_FLAG
from ridgeline.sglang_eplb import (
    sglang_layout_problem,
    sglang_replicas_source,
    sglang_unpriced_moves,
    sglang_unrouted_caution,
)
from ridgeline.vllm_eplb_weights import eplb_weights_problem
from ridgeline.vllm_memory import parse_version, vllm_data

CONFIG_FLAG = "--eplb-config"
LEGACY_FLAG = "--num-redundant-experts"  # vLLM v0.9.2-v0.11 (deprecated in v0.10.2)


def eplb_data() -> dict[str, Any]:
    """engines.json vllm.eplb: vLLM's refusals in its words, its keys and releases."""
    data: dict[str, Any] = vllm_data()["eplb"]
    return data


@dataclass(frozen=True)
class EPLBSettings:
    """--enable-eplb with its redundant experts, and the flag that gave them: vLLM's
    --eplb-config (--num-redundant-experts before v0.12) or SGLang's
    --ep-num-redundant-experts, whose replicas SGLang loads without --enable-eplb too
    (``enabled`` False: sglang_eplb.py)."""

    num_redundant_experts: int = 0
    spelling: str = CONFIG_FLAG
    enabled: bool = True

    def __post_init__(self) -> None:
        if self.num_redundant_experts < 0:
            raise InputError(f"num_redundant_experts must be 0 or more, got "
                             f"{self.num_redundant_experts} (vLLM's EPLBConfig: ge=0)")

    def describe(self) -> str:
        """'32 redundant experts, EPLB', as fit's weights line names them."""
        n = self.num_redundant_experts
        return (f"{n:,} redundant {'expert' if n == 1 else 'experts'}, "
                + ("EPLB" if self.enabled else "no --enable-eplb"))


def parse_eplb_config(text: str) -> int | None:
    """The num_redundant_experts of vllm serve's --eplb-config JSON object (None unset); its
    other keys (window, interval, logging, async, policy, communicator) are read and left
    alone: they change no memory ridgeline sizes. '{"num_redundant_experts": 32}' → 32."""
    config = json_object(text, CONFIG_FLAG, '{"num_redundant_experts": 32}')
    keys = eplb_data()["config_keys"]
    unknown = sorted(set(config) - set(keys))
    if unknown:
        raise InputError(f"{CONFIG_FLAG}: {', '.join(unknown)} is not one of vLLM's EPLBConfig "
                         f"fields ({', '.join(keys)})")
    count = config.get("num_redundant_experts")
    if count is None:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise InputError(f"{CONFIG_FLAG}: num_redundant_experts must be an integer, 0 or more "
                         f"(vLLM's EPLBConfig: ge=0), got {count!r}")
    return count


def physical_experts(dep: Deployment, eplb: EPLBSettings) -> int:
    """Each MoE layer's experts with the redundant ones: vLLM's global_num_experts, E + N."""
    moe = dep.model.moe
    return (moe.num_experts if moe else 0) + eplb.num_redundant_experts


def local_experts(dep: Deployment, eplb: EPLBSettings) -> int:
    """The experts one expert-parallel rank holds a MoE layer: (E + N) ÷ R (exact, as vLLM
    checks: check_eplb). DeepSeek-V3 on EP8 with 32 redundant: 288 ÷ 8 = 36."""
    return ep_rank_experts(physical_experts(dep, eplb), dep.engine_expert_ranks)


def check_eplb(dep: Deployment, eplb: EPLBSettings, version: str | None) -> None:
    """InputError where vLLM (or its release) does not start with ``eplb``: the layout's
    refusals (eplb_layout_problem), then a spelling its release lacks, then expert weights
    whose quantization method the release runs no EPLB for (vllm_eplb_weights.py)."""
    problem = eplb_layout_problem(dep, eplb) or (
        _release_problem(eplb, version) or eplb_weights_problem(dep, version)
        if dep.engine == "vllm" else "")
    if problem:
        raise InputError(problem)


def eplb_layout_problem(dep: Deployment, eplb: EPLBSettings) -> str:
    """Why vLLM refuses ``eplb`` on ``dep``, or "": another engine (SGLang's own asserts:
    sglang_eplb.py), the other's spelling, a model without experts, no
    --enable-expert-parallel or a single rank (vLLM's words), a total of experts the ranks do
    not divide (vLLM's assert; fit's levers skip a layout that meets it)."""
    if dep.engine == "sglang":  # its own asserts, through the same settings
        return sglang_layout_problem(dep, eplb.num_redundant_experts, eplb.enabled,
                                     eplb.spelling)
    if dep.engine != "vllm":
        asked = "--enable-eplb" if eplb.enabled else eplb.spelling
        return (f"{asked} is modelled for vLLM and SGLang; {dep.engine}'s expert load "
                "balancing is not")
    if eplb.spelling == SGLANG_FLAG:
        return (f"{SGLANG_FLAG} is SGLang's; vLLM's redundant experts are {CONFIG_FLAG} "
                f"'{{\"num_redundant_experts\": {eplb.num_redundant_experts}}}'")
    data = eplb_data()
    moe = dep.model.moe
    if moe is None:
        return f"--enable-eplb balances a MoE's experts: {dep.model.name} has none"
    if not dep.expert_parallel:
        return (f"--enable-eplb: vLLM refuses it without --enable-expert-parallel "
                f"({data['needs_expert_parallel']!r})")
    ranks = dep.engine_expert_ranks
    if ranks < 2:
        said = data["needs_ranks"].format(tp=ranks // dep.data_parallel_size,
                                          dp=dep.data_parallel_size)
        return f"--enable-eplb on one GPU: vLLM refuses it ({said!r})"
    total = physical_experts(dep, eplb)
    if total % ranks:
        said = data["even_refusal"].format(physical=total, ranks=ranks)
        fewest = (-total) % ranks
        return (f"--enable-eplb with {eplb.num_redundant_experts} redundant experts: vLLM "
                f"refuses {moe.num_experts} + {eplb.num_redundant_experts} experts over {ranks} "
                f"ranks ({said!r}); {eplb.num_redundant_experts + fewest} would divide")
    return ""


def _release_problem(eplb: EPLBSettings, version: str | None) -> str:
    """Why vLLM ``version`` (None: the newest modelled) lacks ``eplb``'s flags, or ""."""
    data = eplb_data()
    legacy = eplb.spelling == LEGACY_FLAG
    if version is None:
        return (f"{LEGACY_FLAG} is vLLM's spelling before v{data['legacy_until']} (deprecated "
                f"for {CONFIG_FLAG} in v{data['config_since']}): write {CONFIG_FLAG} "
                f"'{{\"num_redundant_experts\": {eplb.num_redundant_experts}}}', or name the "
                "--engine-version that takes it") if legacy else ""
    v = parse_version(version)
    if v < parse_version(data["since"]):
        return (f"vLLM {version}: --enable-eplb is read from v{data['since']} (PR #18343, June "
                "2025); name a later --engine-version")
    if legacy and release_reached(version, data["legacy_until"]):  # '0.12' is 0.12.0
        return (f"vLLM {version} has no {LEGACY_FLAG} ('will be removed in "
                f"v{data['legacy_until']}'): write {CONFIG_FLAG} "
                f"'{{\"num_redundant_experts\": {eplb.num_redundant_experts}}}'")
    if not legacy and eplb.spelling == CONFIG_FLAG and v < parse_version(data["config_since"]):
        return (f"vLLM {version} has no {CONFIG_FLAG} (PR #20562, v{data['config_since']}): "
                f"its spelling is {LEGACY_FLAG} N")
    return ""


def eplb_settings_from(enabled: bool, config_text: str | None, legacy: int | None,
                       dotted: int | None, sglang: int | None = None,
                       engine: str | None = None) -> EPLBSettings | None:
    """The EPLBSettings vllm serve's or SGLang's flags give: None without --enable-eplb, where
    vLLM refuses a redundant expert (its words) and an --eplb-config alone changes nothing;
    SGLang's --ep-num-redundant-experts N alone still loads N replicas (sglang_eplb.py)."""
    given = [(flag, count) for flag, count in (
        (CONFIG_FLAG, None if config_text is None else parse_eplb_config(config_text)),
        (CONFIG_FLAG, dotted), (LEGACY_FLAG, legacy), (SGLANG_FLAG, sglang))
        if count is not None]
    if len(given) > 1:
        raise InputError(f"the redundant experts are given {len(given)} ways "
                         f"({', '.join(sorted({flag for flag, _ in given}))}): give one")
    flag, count = given[0] if given else (SGLANG_FLAG if engine == "sglang" else CONFIG_FLAG, 0)
    if flag == SGLANG_FLAG and not enabled:  # SGLang builds the replicas all the same
        return EPLBSettings(count, flag, enabled=False) if count else None
    if not enabled:
        if count:
            said = eplb_data()["needs_eplb"].format(count=count)
            raise InputError(f"{flag} without --enable-eplb: vLLM refuses it ({said!r})")
        return None
    return EPLBSettings(count, flag)


def eplb_json(dep: Deployment, eplb: EPLBSettings | None, extra_bytes: float
              ) -> dict[str, Any] | None:
    """fit --json's record of --enable-eplb: the counts, and ``extra_bytes`` (the pool's
    redundant_expert_bytes, inside its weights) per GPU; None without EPLB."""
    if eplb is None:
        return None
    return {"num_redundant_experts": eplb.num_redundant_experts,
            "physical_experts": physical_experts(dep, eplb),
            "expert_parallel_ranks": dep.engine_expert_ranks,
            "experts_per_rank": local_experts(dep, eplb),
            "redundant_expert_bytes_per_gpu": extra_bytes}


def replicas_note(dep: Deployment, eplb: EPLBSettings) -> str:
    """Where fit's redundant-experts line comes from: the experts a rank holds with and
    without them, and vLLM's rule."""
    moe = dep.model.moe
    ranks, n = dep.engine_expert_ranks, eplb.num_redundant_experts
    if dep.engine == "sglang":
        source = sglang_replicas_source()
    else:
        source = ("vLLM's global_num_experts = num_experts + num_redundant_experts, "
                  "local = global ÷ EP size: fused_moe/layer.py")
    name = eplb.spelling if eplb.spelling == SGLANG_FLAG else \
        f"{eplb.spelling} num_redundant_experts"
    return (f"{name} {n:,}: each MoE layer's "
            f"{moe.num_experts if moe else 0:,} + {n:,} = {physical_experts(dep, eplb):,} "
            f"physical experts over {ranks} expert-parallel ranks, "
            f"{local_experts(dep, eplb):,} a rank instead of "
            f"{ep_rank_experts(moe.num_experts if moe else 0, ranks):,}, loaded with the "
            f"weights ({source})")


def eplb_step_caution(eplb: EPLBSettings) -> str:
    """The line a priced step carries under --enable-eplb: its memory is sized; with redundant
    experts to place, its busiest expert-parallel rank is priced as EPLB leaves it
    (expert_ranks.ep_imbalance: 1.109 × the mean routed tokens, not the stated 1.2), reading the
    replicas it holds that the step's tokens reach (expert_ranks.busiest_rank_physical_experts);
    SGLang's replicas without --enable-eplb as their layout leaves the first ranks
    (sglang_eplb.sglang_unrouted_caution); without redundant experts as without EPLB. The
    weights EPLB moves are not priced."""
    unpriced = sglang_unpriced_moves(eplb.enabled) if eplb.spelling == SGLANG_FLAG else (
        "vLLM's rearrangement every step_interval steps (the expert weights it moves between "
        "ranks) is not priced")
    name = f"{'--enable-eplb' if eplb.enabled else SGLANG_FLAG} ({eplb.describe()})"
    if eplb.enabled and eplb.num_redundant_experts:
        return (f"{name}: their weights are sized, and each step prices the busiest "
                f"expert-parallel rank at {EP_IMBALANCE_EPLB:g} × the mean routed tokens "
                f"instead of ridgeline's stated {EP_IMBALANCE:g} (TensorRT-LLM's DeepSeek-R1 on "
                f"EP32 with 32 redundant experts placed from the traffic it served: a best "
                f"case), reading the replicas it holds that the step's tokens reach (all its "
                f"(experts + {eplb.num_redundant_experts:,}) ÷ ranks once every expert is "
                f"touched); {unpriced}")
    if eplb.spelling == SGLANG_FLAG and eplb.num_redundant_experts:
        return (f"{name}: their weights are sized; "
                f"{sglang_unrouted_caution(eplb.num_redundant_experts)}")
    return (f"{name}: their weights are sized, but each step is priced as without EPLB (the "
            f"busiest expert-parallel rank at ridgeline's stated {EP_IMBALANCE:g} × the mean "
            f"tokens: without redundant experts EPLB only reorders the experts, for which no "
            f"source gives a figure); {unpriced}")
