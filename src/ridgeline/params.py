"""Parameter counts derived from a ModelSpec, by weight category, total and active.

Categories let a weight format quantize what it quantizes (linear layers) and leave the
rest (embeddings, norms, routers) at the checkpoint dtype. "Active" is what one token
touches: every category except the routed experts it was not sent to, i.e. routed experts
count k/E of their parameters. Llama-3.1-70B: 70,553,706,496 total (the figure HF reports).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from ridgeline.layouts import ATTENTION_MIXERS, DENSE, LINEAR, MAMBA, MOE
from ridgeline.model import MLA, Attention, Layer, LinearAttention, Mamba, ModelSpec
from ridgeline.quantization import (
    ATTENTION,
    CATEGORIES,
    EMBEDDING,
    EXPERT_BIAS,
    EXPERTS,
    LINEAR_ATTENTION,
    LM_HEAD,
    MLP,
    OTHER,
    ROUTED,
    ROUTER,
    SHARED_EXPERTS,
    SSM,
)


@dataclass(frozen=True)
class ParamCount:
    by_category: Mapping[str, int] = field(default_factory=dict)
    routed_fraction: float = 1.0  # k/E; 1 for dense models

    @property
    def total(self) -> int:
        return sum(self.by_category.values())

    @property
    def active(self) -> int:
        """Parameters one token uses: routed experts (and their biases) scaled by k/E."""
        routed = sum(self.by_category.get(c, 0) for c in ROUTED)
        return round(self.total - routed + routed * self.routed_fraction)

    @property
    def embedding(self) -> int:
        return self.by_category.get(EMBEDDING, 0)


@lru_cache(maxsize=256)
def count_params(spec: ModelSpec) -> ParamCount:
    """Count every weight of the text model (MTP layers and vision towers excluded)."""
    counts = dict.fromkeys(CATEGORIES, 0)
    h = spec.hidden_size
    counts[EMBEDDING] = spec.vocab_size * h
    counts[EMBEDDING] += spec.learned_positions * h  # GPT-2's wpe: 1,024 × 768 = 786,432
    if not spec.tie_word_embeddings:
        counts[LM_HEAD] = spec.vocab_size * h
    if spec.lm_head_bias:
        counts[OTHER] += spec.vocab_size
    counts[OTHER] += 2 * h if spec.layer_norm else h  # final norm
    for layer in spec.layers:
        for category, n in layer_params(spec, layer).items():
            counts[category] += n
    fraction = spec.moe.routed_fraction if spec.moe else 1.0
    return ParamCount(by_category=counts, routed_fraction=fraction)


def layers_share(spec: ModelSpec, category: str, indices: Iterable[int]) -> float:
    """The share of a category's weights that layers ``indices`` hold (0 where it has none):
    DeepSeek-V3's MLP, in its first 3 dense layers only, all of it in layers 0-2 (1.0)."""
    total = count_params(spec).by_category.get(category, 0)
    if not total:
        return 0.0
    held = sum(layer_params(spec, spec.layers[i])[category] for i in set(indices)
               if 0 <= i < spec.num_layers)
    return held / total


@lru_cache(maxsize=1024)
def layer_params(spec: ModelSpec, layer: Layer) -> dict[str, int]:
    """One layer's weights by category: its mixer, its FFN, its norms."""
    counts = dict.fromkeys(CATEGORIES, 0)
    h = spec.hidden_size
    counts[OTHER] += spec.norms_per_layer * (2 * h if spec.layer_norm else h)
    if layer.mixer in ATTENTION_MIXERS and spec.attention:
        linear, other = attention_params(spec.attention, h)
        counts[ATTENTION] += linear
        counts[OTHER] += other
    elif layer.mixer == LINEAR and spec.linear_attention:
        linear, other = linear_attention_params(spec.linear_attention, h)
        counts[LINEAR_ATTENTION] += linear
        counts[OTHER] += other
    elif layer.mixer == MAMBA and spec.mamba:
        linear, other = mamba_params(spec.mamba, h)
        counts[SSM] += linear
        counts[OTHER] += other
    if layer.ffn == DENSE and spec.dense_mlp:
        mlp = spec.dense_mlp
        counts[MLP] += mlp_params(h, mlp.intermediate_size, mlp.gated)
        if mlp.bias:
            counts[OTHER] += mlp.intermediate_size + h
    elif layer.ffn == MOE and spec.moe:
        moe = spec.moe
        gated = spec.dense_mlp.gated if spec.dense_mlp else True
        counts[EXPERTS] += moe.num_experts * mlp_params(h, moe.expert_intermediate_size, gated)
        counts[SHARED_EXPERTS] += moe.num_shared_experts * mlp_params(
            h, moe.shared_intermediate_size, gated
        )
        counts[ROUTER] += moe.num_experts * h + (h if moe.shared_gate else 0)
        if moe.router_bias:
            counts[OTHER] += moe.num_experts
        if moe.expert_bias:  # gate_up bias (2F) and down bias (h) per expert
            counts[EXPERT_BIAS] += moe.num_experts * (2 * moe.expert_intermediate_size + h)
    return counts


def rank_params(spec: ModelSpec, layer: Layer, category: str, tensor_parallel_size: int,
                count: int | None = None) -> float:
    """One layer's ``category`` weights that one tensor-parallel rank holds.

    vLLM, SGLang and TensorRT-LLM split a layer's matrices over the ranks but keep some of
    them whole on every rank: the MoE router (a replicated linear), MLA's down-projections
    (q_a, kv_a: DeepSeek-V3's 7,168 × (1,536 + 576) a layer), DeepSeek Sparse Attention's
    indexer (indexer_params), and, with more ranks than KV heads, a K/V head's projections
    (each rank one head, as its cache). ``count``: the
    layer's ``category`` weights where the caller has them (layer_params).
    """
    n = layer_params(spec, layer)[category] if count is None else count
    tp = tensor_parallel_size
    if tp == 1 or not n:
        return float(n)
    if category == ROUTER:
        return float(n)
    att = spec.attention
    if category == ATTENTION and att is not None:
        h = spec.hidden_size
        if att.mla:
            whole = h * (att.mla.q_lora_rank or 0) + h * (att.mla.kv_lora_rank
                                                            + att.mla.qk_rope_head_dim)
            whole += indexer_params(att.mla, h)[0]  # replicated, not split
            return (n - whole) / tp + whole
        kv = 2 * h * att.num_kv_heads * att.head_dim
        return (n - kv) / tp + kv * max(1, att.num_kv_heads // tp) / att.num_kv_heads
    return n / tp


def mlp_params(hidden: int, intermediate: int, gated: bool) -> int:
    """Gated (SwiGLU): gate, up, down = 3 h F; plain: up, down = 2 h F."""
    matrices = 3 if gated else 2
    return matrices * hidden * intermediate


def attention_params(att: Attention, hidden: int) -> tuple[int, int]:
    """(linear weights, small extras) of one attention layer.

    GQA: q = h·n·d (doubled with an output gate), k = v = h·n_kv·d, o = n·d_v·h.
    MLA (DeepSeek-V3): q_a h·r_q, q_b r_q·n·(d_nope+d_rope), kv_a h·(r_kv+d_rope),
    kv_b r_kv·n·(d_nope+d_v), o n·d_v·h; DeepSeek-V3.2 adds its indexer (indexer_params).
    """
    n = att.num_heads
    extra = 0
    if att.mla:
        m = att.mla
        q_dim = n * (m.qk_nope_head_dim + m.qk_rope_head_dim)
        if m.q_lora_rank:
            q = hidden * m.q_lora_rank + m.q_lora_rank * q_dim
            extra += m.q_lora_rank  # q_a_layernorm
        else:
            q = hidden * q_dim
        kv = hidden * (m.kv_lora_rank + m.qk_rope_head_dim)
        kv += m.kv_lora_rank * n * (m.qk_nope_head_dim + m.v_head_dim)
        extra += m.kv_lora_rank  # kv_a_layernorm
        o = n * m.v_head_dim * hidden
        indexer, indexer_extra = indexer_params(m, hidden)
        return q + kv + o + indexer, extra + indexer_extra
    linear = hidden * qkv_out_features(att) + n * att.v_head_dim * hidden
    if att.qkv_bias:
        extra += qkv_out_features(att)
    if att.o_bias:
        extra += hidden
    extra += qk_norm_params(att)
    if att.sinks:
        extra += n
    return linear, extra


# DeepSeek Sparse Attention's lightning indexer, one a layer: wq_b (q_lora_rank → heads ×
# head_dim), wk (hidden → head_dim) and weights_proj (hidden → heads), none with a bias, and
# k_norm, a LayerNorm (weight and bias) over head_dim (vLLM's Indexer, vllm/model_executor/
# models/deepseek_v2.py, ROCm/vllm stored copy 068f8154: ReplicatedLinear each, 'no tensor
# parallel, just replicated'; SGLang's nsa_indexer.py the same; DeepSeek-V3.2-Exp's
# inference/model.py Indexer names them so)
INDEXER_NORM_VECTORS = 2  # k_norm's weight and bias


def indexer_params(mla: MLA, hidden: int) -> tuple[int, int]:
    """(linear weights, small extras) of one layer's indexer; (0, 0) without one (no
    index_topk, or a config that does not give index_n_heads and index_head_dim).
    wq_b r_q·H_i·d_i + wk h·d_i + weights_proj h·H_i; k_norm 2·d_i. DeepSeek-V3.2
    (H_i 64, d_i 128, r_q 1,536, h 7,168): 12,582,912 + 917,504 + 458,752 = 13,959,168 and
    256 a layer, 851.5 M over its 61 layers."""
    heads, dim = mla.index_n_heads, mla.index_head_dim
    if mla.index_topk is None or not heads or not dim:
        return 0, 0
    query_rank = mla.q_lora_rank or hidden  # wq_b reads the query's low-rank latent
    linear = query_rank * heads * dim + hidden * dim + hidden * heads
    return linear, INDEXER_NORM_VECTORS * dim


def qkv_out_features(att: Attention) -> int:
    """The output features of a GQA layer's q, k and v projections, the columns each input
    feature meets: (n (doubled with an output gate) + 2 n_kv) × d, Llama-3.1-70B's
    (64 + 2 × 8) × 128 = 10,240."""
    q_out = att.num_heads * att.head_dim * (2 if att.output_gate else 1)
    return q_out + 2 * att.num_kv_heads * att.head_dim


def qk_norm_params(att: Attention) -> int:
    """The query and key norms' weights in one attention layer (0 without them).

    Shared across heads (Qwen3, Gemma 3): one head_dim vector each, 2 × 128 = 256.
    Per head (Cohere's LayerNorm over (heads, head_dim)): (n + n_kv) × d, Command R+'s
    (96 + 8) × 128 = 13,312.
    """
    if not att.qk_norm:
        return 0
    if att.qk_norm_per_head:
        return (att.num_heads + att.num_kv_heads) * att.head_dim
    return 2 * att.head_dim


def linear_attention_params(la: LinearAttention, hidden: int) -> tuple[int, int]:
    """Gated DeltaNet: in_proj (q, k, v, z, b, a), out_proj; conv1d, dt_bias, A_log, norm."""
    in_proj = hidden * (2 * la.key_dim + 2 * la.value_dim + 2 * la.num_value_heads)
    out_proj = la.value_dim * hidden
    conv_dim = 2 * la.key_dim + la.value_dim
    extra = conv_dim * la.conv_kernel + 2 * la.num_value_heads + la.value_head_dim
    return in_proj + out_proj, extra


def mamba_params(m: Mamba, hidden: int) -> tuple[int, int]:
    """Mamba-1 (Jamba) or Mamba-2 (Nemotron-H) mixer: projections, then small vectors.
    Mamba-2: in_proj h·(2·d_inner + 2·groups·d_state + heads), out_proj d_inner·h; Falcon-H1-7B's
    3,072·(6,144 + 512 + 24) + 3,072² = 29,958,144 a layer."""
    if m.version == 2:
        conv_dim = m.d_inner + 2 * m.n_groups * m.d_state
        in_proj = hidden * (2 * m.d_inner + 2 * m.n_groups * m.d_state + m.num_heads)
        out_proj = m.d_inner * hidden
        extra = conv_dim * m.conv_kernel + (conv_dim if m.conv_bias else 0)
        extra += 3 * m.num_heads  # dt_bias, A_log, D
        extra += m.d_inner if m.gated_norm else 0
        return in_proj + out_proj, extra
    in_proj = hidden * 2 * m.d_inner
    x_proj = m.d_inner * (m.dt_rank + 2 * m.d_state)
    dt_proj = m.dt_rank * m.d_inner
    out_proj = m.d_inner * hidden
    extra = m.d_inner * m.conv_kernel + (m.d_inner if m.conv_bias else 0)
    extra += m.d_inner  # dt_proj bias
    extra += m.d_inner * m.d_state + m.d_inner  # A_log, D
    extra += m.dt_rank + 2 * m.d_state  # Jamba's dt/B/C layernorms
    return in_proj + x_proj + dt_proj + out_proj, extra
