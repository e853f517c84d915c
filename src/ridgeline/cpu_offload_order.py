"""The parameters vLLM's --cpu-offload-gb moves, whole, in the order it moves them.

vLLM does not cut a tensor at the budget: for each decoder layer, and within it for each
parameter in registration order, it checks the running total against the budget *before*
moving the parameter, then moves all of it. So the last parameter moved overshoots the GiB
asked by up to its own size, and each GPU keeps that much less on the GPU (and reads that
much more over the host link every step). The rule is the same from its first release to
the UVA offloader of later ones (below). Llama-3.1-8B on an RTX 4090 at 4 GiB: nine layers
and the qkv, o and gate_up projections of the tenth are under 4 GiB, so its down_proj (112
MiB) moves too: 4.06 GiB offloaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from ridgeline.layouts import ATTENTION_MIXERS, LINEAR, MAMBA
from ridgeline.params import layer_params, rank_params
from ridgeline.quantization import (
    ATTENTION,
    EXPERT_BIAS,
    EXPERTS,
    LINEAR_ATTENTION,
    MLP,
    OTHER,
    ROUTED,
    ROUTER,
    SHARED_EXPERTS,
    SSM,
)

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.model import Layer, ModelSpec

# A decoder layer's parameters register mixer first, then its FFN, then its norms
# (LlamaDecoderLayer, DeepseekV2DecoderLayer: self_attn, mlp, input_layernorm,
# post_attention_layernorm); an MoE block, as its SharedFusedMoE releases build it
# (deepseek_v2.py, qwen3_next.py, nemotron_h.py), its router, then its shared experts, then
# the routed experts' FusedMoE. Earlier releases built some blocks' experts first; the order
# moves only where the ask stops, inside one layer, by at most a shared expert's bytes.
CATEGORY_ORDER = (ATTENTION, LINEAR_ATTENTION, SSM, MLP, ROUTER, SHARED_EXPERTS, EXPERTS,
                  EXPERT_BIAS, OTHER)


@dataclass(frozen=True)
class RankTensor:
    """One parameter of a decoder layer as one GPU holds it: vLLM's name for it, its bytes
    (a quantized weight's scales counted with it), and whether it is a routed expert's."""

    name: str
    bytes: float
    routed: bool = False


def _pieces(spec: ModelSpec, layer: Layer, category: str) -> list[tuple[str, int | None, bool]]:
    """A category's parameters in one layer, in vLLM's order: (name, weights over all ranks,
    kept whole on every rank). None: the category's rest, whatever the others leave of it
    (so the pieces add up to layer_params exactly)."""
    h = spec.hidden_size
    att = spec.attention
    if category == ATTENTION and att is not None and layer.mixer in ATTENTION_MIXERS:
        if att.mla:  # DeepseekV2MLAAttention: q_a and kv_a fused, kept whole on every rank
            m = att.mla
            kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim)
            q_out = att.num_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
            first = ([("fused_qkv_a_proj", h * m.q_lora_rank + kv_a, True),
                      ("q_b_proj", m.q_lora_rank * q_out, False)] if m.q_lora_rank else
                     [("kv_a_proj_with_mqa", kv_a, True), ("q_proj", h * q_out, False)])
            return [*first, ("kv_b_proj", None, False),
                    ("o_proj", att.num_heads * m.v_head_dim * h, False)]
        # QKVParallelLinear: q, k and v one tensor (K/V heads past their count repeat in it)
        return [("qkv_proj", None, False), ("o_proj", att.num_heads * att.v_head_dim * h, False)]
    la = spec.linear_attention
    if category == LINEAR_ATTENTION and la is not None and layer.mixer == LINEAR:
        return [("in_proj_qkvz", h * (2 * la.key_dim + 2 * la.value_dim), False),
                ("in_proj_ba", h * 2 * la.num_value_heads, False), ("out_proj", None, False)]
    mamba = spec.mamba
    if category == SSM and mamba is not None and layer.mixer == MAMBA:
        if mamba.version == 2:
            return [("in_proj", None, False), ("out_proj", mamba.d_inner * h, False)]
        return [("in_proj", h * 2 * mamba.d_inner, False),
                ("x_proj", mamba.d_inner * (mamba.dt_rank + 2 * mamba.d_state), False),
                ("dt_proj", mamba.dt_rank * mamba.d_inner, False), ("out_proj", None, False)]
    if category == MLP and spec.dense_mlp is not None:  # MergedColumnParallelLinear gate_up
        return [("gate_up_proj" if spec.dense_mlp.gated else "up_proj", None, False),
                ("down_proj", h * spec.dense_mlp.intermediate_size, False)]
    moe = spec.moe
    if category == EXPERTS and moe is not None:  # FusedMoE: every expert's w13, then w2
        return [("experts.w13_weight", None, False),
                ("experts.w2_weight", moe.num_experts * h * moe.expert_intermediate_size, False)]
    if category == SHARED_EXPERTS and moe is not None:
        return [("shared_experts.gate_up_proj", None, False),
                ("shared_experts.down_proj",
                 moe.num_shared_experts * h * moe.shared_intermediate_size, False)]
    names = {ROUTER: "gate", EXPERT_BIAS: "experts biases", OTHER: "norms and biases"}
    return [(names.get(category, category), None, False)]


@lru_cache(maxsize=1024)
def layer_rank_tensors(dep: Deployment, layer: Layer) -> tuple[RankTensor, ...]:
    """One decoder layer's parameters on one GPU of its stage, in the order vLLM offloads
    them; they add up to cpu_offload.layer_bytes_per_gpu. Llama-3.1-70B in bf16 on one GPU:
    qkv_proj 160 MiB, o_proj 128, gate_up_proj 896, down_proj 448, the norms 32 KiB. An MI250
    under vLLM: one die's tensors × its 2 dies (Deployment.gpu_params), what each die keeps
    whole twice."""
    spec = dep.model
    out: list[RankTensor] = []
    counts = {c: n for c, n in layer_params(spec, layer).items() if n}
    devices = dep.devices_per_gpu  # an MI250's dies under vLLM: a rank each
    for category in sorted(counts, key=CATEGORY_ORDER.index):
        n = counts[category]
        ranks = dep.category_ranks(category) * devices
        bpw = dep.weights.format_of(category).bytes_per_weight
        pieces = _pieces(spec, layer, category)
        # the rest: what rank_params gives the category on one rank, less the named pieces
        named = sum((count if whole else count / ranks) for _, count, whole in pieces
                    if count is not None)
        rest = rank_params(spec, layer, category, ranks, n) - named
        for name, count, whole in pieces:
            params = rest if count is None else (count if whole else count / ranks)
            out.append(RankTensor(name, devices * params * bpw, category in ROUTED))
    return tuple(out)


def offload_walk(dep: Deployment, layers: Sequence[Layer], budget_bytes: float
                 ) -> tuple[float, float]:
    """(routed, other) bytes one GPU moves to host memory from ``layers`` (its stage's,
    first to last) at ``budget_bytes``: each parameter whole while the total moved so far is
    under the budget, so the last one may overshoot it by up to its own size; every layer,
    and no more, where the budget is larger. The check comes before the move, per module
    and per parameter, in every release: maybe_offload_to_cpu in
    vllm/model_executor/models/utils.py from v0.5.3 (PR #6496), UVAOffloader
    ._maybe_offload_to_cpu in vllm/model_executor/offloader/uva.py in later releases
    (per-parameter offloading: the loop leaves once the count has reached the maximum, and
    adds each moved parameter's numel × element size after moving it). Each worker keeps its
    own count over its own shards, so this is per GPU; a card run as two devices (an MI250X)
    keeps two, each over half the card's shards against the flag's GiB, which stop where one
    walk over the card's shards against twice the flag does."""
    moved = routed = 0.0
    for layer in layers:
        if moved >= budget_bytes:  # the module-level check
            break
        for tensor in layer_rank_tensors(dep, layer):
            if moved >= budget_bytes:  # the per-parameter check, before the move
                break
            moved += tensor.bytes
            routed += tensor.bytes if tensor.routed else 0.0
    return routed, moved - routed
