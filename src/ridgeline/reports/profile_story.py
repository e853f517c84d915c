"""How an engine profile's figures read in --explain: its shares of peak and bandwidth on a
card, and its fitted fixed costs. decode, prefill and simulate give one account of them."""

from __future__ import annotations

from ridgeline.cost import kquant_ops
from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile, moe_prompt_expert_slowdown
from ridgeline.explain import Quantity, q
from ridgeline.launches import deployment_matmuls, fuses_shared_expert, moe_layers
from ridgeline.model_types import KNOWN_MODEL_TYPES

NOTHING_S = 1e-7  # a fitted fixed cost under 0.1 µs: the fit drove it to nothing


def overhead_q(name: str, seconds: float, source: str) -> Quantity:
    """A fitted fixed cost in µs; one the fit drove to (next to) nothing reads as 0."""
    if seconds < NOTHING_S:
        return q(name, 0.0, "µs", f"{source}: fitted to nothing (the data need no such cost)")
    return q(name, seconds * 1e6, "µs", source)


def share_qs(profile: EngineProfile, dep: Deployment) -> list[Quantity]:
    """The compute share and the bandwidth share a step reaches on this card, and where the
    engine unpacks this deployment's K-quant weights on its ALUs, what that costs; for a MoE
    model, the expert tile and the MoE prompt slowdown where the engine has them."""
    src = f"{profile.engine} profile"
    acc = dep.accelerator
    out = [q("compute share", profile.compute_for(acc), "",
             f"{src}: {profile.compute_story(acc)}; {profile.source}"),
           q("bandwidth share", profile.bandwidth_for(acc), "",
             f"{src}: {profile.bandwidth_story(acc)}")]
    ops = kquant_ops(dep)
    if profile.kquant_ops_per_weight and ops:
        out.append(q("K-quant unpacking", profile.kquant_ops_per_weight, "ops per weight",
                     f"{src}: {', '.join(ops)} take at least weights × this ÷ the "
                     f"{dep.peak_at('fp16') / 1e12:,.4g} TFLOP/s fp16 peak (the GPU's ALUs)"))
    if profile.expert_tile_tokens and dep.model.moe is not None:
        out.append(q("expert tile", profile.expert_tile_tokens, "tokens",
                     f"{src}: a prompt step runs each expert over the tokens routed to it in "
                     "tiles this wide; an expert given fewer pays for the whole tile"))
    slowdown = moe_prompt_expert_slowdown(profile.engine)
    if slowdown != 1.0 and dep.model.moe is not None:
        out.append(q("MoE prompt slowdown", slowdown, "×",
                     f"engines.json {profile.engine}.moe_prompt_expert_slowdown: a step with "
                     "prompt tokens prices the routed experts' arithmetic at the compute share "
                     "÷ this (its fused MoE kernels; fitted on validation/moe_prefill.csv)"))
    return out


def matmul_qs(profile: EngineProfile, dep: Deployment) -> list[Quantity]:
    """Where the profile prices weight matmuls: how many a pass launches, and each one's cost."""
    if not profile.matmul_overhead_s:
        return []
    folded = "" if not fuses_shared_expert(dep) else \
        "; TensorRT-LLM runs the shared expert on a stream of its own" if dep.engine == "trtllm" \
        else "; SGLang runs the shared expert inside the routed experts' matmuls"
    if dep.model.model_type not in KNOWN_MODEL_TYPES:  # its layers as ridgeline reads them
        folded += f"; counted from the layers read from an unchecked {dep.model.model_type!r}"
    # launches.py counts vLLM's model files; under another engine that count stands in
    others = {"sglang": "SGLang's, which writes these layers alike",
              "trtllm": "TensorRT-LLM's, not counted apart"}
    other = others.get(dep.engine, f"{dep.engine}'s, not counted apart")
    stand_in = "" if dep.engine == "vllm" else f", standing in for {other}"
    return [q("weight-matmul launches", deployment_matmuls(dep), "",
              f"per pass, as vLLM's model files launch them{stand_in}{folded} (launches.py)"),
            overhead_q("per matmul", profile.matmul_overhead_s, f"{profile.engine} profile")]


def moe_layer_qs(profile: EngineProfile, dep: Deployment) -> list[Quantity]:
    """Where the profile prices routed-expert layers and the model has them: how many, and
    each one's cost."""
    routed = moe_layers(dep.model)
    if not profile.moe_layer_overhead_s or not routed:
        return []
    return [q("MoE layers", routed, "", "layers whose feed-forward block routes to experts"),
            overhead_q("per MoE layer", profile.moe_layer_overhead_s,
                       f"{profile.engine} profile: the routing's graph nodes")]


def overhead_formula(profile: EngineProfile) -> str:
    """The fixed costs' formula, as --explain writes it."""
    return "per step + layers × per layer" + (
        " + weight-matmul launches × per matmul" if profile.matmul_overhead_s else "") + (
        " + MoE layers × per MoE layer" if profile.moe_layer_overhead_s else "")
