"""KV-cache bytes: per token by layer kind, per sequence at a context, conversations that fit.

Full-attention layers grow with context; sliding-window and chunked layers stop at their
window; MLA caches one latent (kv_lora_rank + qk_rope_head_dim) per token per layer;
linear-attention and Mamba layers hold a constant state per sequence.
Llama-3.1-70B in bf16: 2 (K,V) x 8 heads x 128 dims x 80 layers x 2 B = 320 KiB per token.
"""

from __future__ import annotations

from dataclasses import dataclass

from ridgeline.layouts import ATTENTION_MIXERS, FULL, LINEAR, MAMBA, WINDOW_MIXERS
from ridgeline.model import Layer, ModelSpec
from ridgeline.units import require_count

_STATE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


# DeepSeek Sparse Attention's indexer caches one key a token and layer in fp8 with a float32
# scale per 128 values, whatever --kv-cache-dtype says: vLLM's Indexer builds
# DeepseekV32IndexerCache(head_dim=head_dim + head_dim // quant_block_size * 4,
# dtype=torch.uint8) with quant_block_size = 128 ('fp8 naive cache', vllm/model_executor/
# models/deepseek_v2.py), 128 + 4 = 132 bytes for DeepSeek-V3.2's index_head_dim 128
INDEXER_QUANT_BLOCK = 128
INDEXER_SCALE_BYTES = 4  # float32
INDEXER_VALUE_BYTES = 1  # fp8


def indexer_key_bytes(index_head_dim: int) -> int:
    """One token's indexer key in one layer: fp8 values plus a float32 scale per 128."""
    return (index_head_dim * INDEXER_VALUE_BYTES
            + index_head_dim // INDEXER_QUANT_BLOCK * INDEXER_SCALE_BYTES)


def indexer_bytes_per_token(spec: ModelSpec) -> int:
    """One token's indexer key in one attention layer of a DeepSeek Sparse Attention model
    (a cached latent with index_topk and index_head_dim: 132 bytes for DeepSeek-V3.2), 0 for
    any other model."""
    latent = spec.attention.cached_latent if spec.attention is not None else None
    if latent is None or latent.index_topk is None or not latent.index_head_dim:
        return 0
    return indexer_key_bytes(latent.index_head_dim)


def attention_kv_bytes_per_token(spec: ModelSpec, kv_bytes_per_element: float) -> float:
    """One attention layer's cache per token: MLA latent (and, for a DeepSeek Sparse
    Attention model, its indexer's key: DeepSeek-V3.2 in fp8_ds_mla 656 + 132 = 788 bytes),
    or K and V of every KV head."""
    att = spec.attention
    if att is None:
        return 0.0
    latent = att.cached_latent
    if latent:
        return (latent.kv_lora_rank + latent.qk_rope_head_dim) * kv_bytes_per_element \
            + indexer_bytes_per_token(spec)
    k = att.num_kv_heads * att.head_dim
    v = att.num_kv_heads * att.v_head_dim
    return (k + v) * kv_bytes_per_element


# llama.cpp keeps both recurrent states (conv and SSM) in f32 whatever the model's dtype:
# llama_memory_recurrent / llama_memory_hybrid are created with GGML_TYPE_F32 for both (src/
# llama-model.cpp, create_memory)
LLAMACPP_STATE_BYTES = 4.0


def _rank_share(total: int, tensor_parallel_size: int) -> float:
    """One rank's share of ``total`` channels or heads: a whole number where the ranks divide
    it (vLLM's divide() asserts they do; tensor_parallel.py refuses a size that does not)."""
    whole, rest = divmod(total, tensor_parallel_size)
    return whole if not rest else total / tensor_parallel_size


def extra_state_groups(n_groups: int, tensor_parallel_size: int) -> int:
    """Mamba-2 groups vLLM adds so that every rank holds the groups its heads read: none where
    the ranks divide the groups, else ranks − groups (MambaStateShapeCalculator.
    extra_groups_for_head_shards, vllm/model_executor/layers/mamba/mamba_utils.py, v0.10–main;
    only a single group is split otherwise, tensor_parallel.py). Granite-4.0-H's one group at
    TP4: 3 more, every rank keeping the whole group."""
    return 0 if n_groups % tensor_parallel_size == 0 else tensor_parallel_size - n_groups


def state_elements(spec: ModelSpec, layer: Layer, tensor_parallel_size: int = 1,
                   speculative_tokens: int = 0) -> tuple[float, float]:
    """(conv state, SSM state) elements of one linear-attention or Mamba layer, per sequence,
    on one of ``tensor_parallel_size`` ranks; (0, 0) for any other layer.

    Gated DeltaNet: conv state (2·key_dim + value_dim)·(kernel−1) + S state nv·dk·dv.
    Mamba-2: conv (d_inner + 2·groups·d_state)·(kernel−1) + SSM heads·head_dim·d_state;
    Nemotron-H-56B: 3·(16,384 + 2·8·256) = 61,440 and 256·64·256 = 4,194,304.
    Split over the ranks as vLLM's MambaStateShapeCalculator shapes them: each rank its share
    of the conv channels and of the heads, a Mamba-2 layer's groups first padded to the ranks
    (``extra_state_groups``); and with ``speculative_tokens`` drafts a step, a Gated DeltaNet or
    Mamba-2 conv state keeps that many more columns (kernel − 1 + num_spec:
    gated_delta_net_state_shape, mamba2_state_shape). Qwen3-Next at TP4 with 2 MTP drafts:
    8,192 ÷ 4 × 5 = 10,240 conv elements a rank, not 6,144.
    """
    tp = tensor_parallel_size
    if layer.mixer == LINEAR and spec.linear_attention:
        la = spec.linear_attention
        return (_rank_share(2 * la.key_dim + la.value_dim, tp)
                * (la.conv_kernel - 1 + speculative_tokens),
                _rank_share(la.num_value_heads, tp) * la.key_head_dim * la.value_head_dim)
    if layer.mixer == MAMBA and spec.mamba:
        m = spec.mamba
        if m.version == 2:
            groups = m.n_groups + extra_state_groups(m.n_groups, tp)
            return (_rank_share(m.d_inner + 2 * groups * m.d_state, tp)
                    * (m.conv_kernel - 1 + speculative_tokens),
                    _rank_share(m.num_heads, tp) * m.head_dim * m.d_state)
        return (_rank_share(m.d_inner, tp) * (m.conv_kernel - 1),
                _rank_share(m.d_inner, tp) * m.d_state)
    return 0, 0


def state_bytes_per_element(spec: ModelSpec, element_bytes: float | None = None
                            ) -> tuple[float, float]:
    """(conv, SSM) bytes per state element: both ``element_bytes`` where the engine fixes
    them (llama.cpp), else the conv state at the model's dtype and the SSM state at its
    state dtype (bf16 and fp32 for a config naming mamba_ssm_dtype float32)."""
    return (element_bytes or _STATE_BYTES.get(spec.dtype, 2),
            element_bytes or _STATE_BYTES.get(spec.state_dtype, 2))


def state_bytes_per_sequence(spec: ModelSpec, layer: Layer,
                             element_bytes: float | None = None, tensor_parallel_size: int = 1,
                             speculative_tokens: int = 0) -> float:
    """Constant recurrent state of one linear-attention or Mamba layer, per sequence (on one of
    ``tensor_parallel_size`` ranks, with ``speculative_tokens`` drafts a step): conv
    elements × conv bytes + SSM elements × SSM bytes (state_elements, state_bytes_per_element).
    Nemotron-H-56B with its SSM state in fp32: 61,440 × 2 + 4,194,304 × 4 = 16,900,096 B.
    """
    conv_elems, ssm_elems = state_elements(spec, layer, tensor_parallel_size, speculative_tokens)
    conv, state = state_bytes_per_element(spec, element_bytes)
    return conv_elems * conv + ssm_elems * state


def cached_tokens(layer: Layer, context: int) -> int:
    """Tokens a layer keeps: all of them, or at most its window."""
    if layer.mixer in WINDOW_MIXERS and layer.window_tokens:
        return min(context, layer.window_tokens)
    return context if layer.mixer == FULL else 0


@dataclass(frozen=True)
class KVFootprint:
    """What one sequence's cache costs, split by layer kind."""

    bytes_per_token_growing: float  # full-attention layers: grows with every token
    bytes_per_token_naive: float  # every attention layer counted as full
    windowed_bytes: float  # sliding/chunked layers at this context (capped at the window)
    state_bytes: float  # linear-attention / SSM layers, constant
    context: int
    bytes_per_element: float

    @property
    def bytes_per_sequence(self) -> float:
        return self.bytes_per_token_growing * self.context + self.windowed_bytes + self.state_bytes

    def stored_bytes(self, replication: float) -> float:
        """The sequence's cache summed over the tensor-parallel ranks: the attention KV ×
        ``replication`` (KV heads copied where TP exceeds them, MLA's latent on every rank);
        recurrent states shard with their heads, so they count once."""
        attention = self.bytes_per_token_growing * self.context + self.windowed_bytes
        return attention * replication + self.state_bytes


def kv_footprint(spec: ModelSpec, context: int, kv_bytes_per_element: float,
                 state_element_bytes: float | None = None) -> KVFootprint:
    """One sequence at ``context`` tokens: gpt-oss-120b bf16 grows 36 KiB per token, not 72.
    Recurrent states as state_bytes_per_sequence keeps them (``state_element_bytes``: both
    states at that size, as llama.cpp keeps them). A fraction of a token (2000.5) is
    refused, as decode_floor refuses it: a cache holds whole tokens."""
    context = require_count(context, "context length")
    per_layer = attention_kv_bytes_per_token(spec, kv_bytes_per_element)
    growing = windowed = state = 0.0
    attention_layers = 0
    for layer in spec.layers:
        if layer.mixer in ATTENTION_MIXERS:
            attention_layers += 1
        if layer.mixer == FULL:
            growing += per_layer
        elif layer.mixer in WINDOW_MIXERS:
            windowed += per_layer * cached_tokens(layer, context)
        else:
            state += state_bytes_per_sequence(spec, layer, state_element_bytes)
    return KVFootprint(
        bytes_per_token_growing=growing,
        bytes_per_token_naive=per_layer * attention_layers,
        windowed_bytes=windowed,
        state_bytes=state,
        context=context,
        bytes_per_element=kv_bytes_per_element,
    )


def kv_replication(spec: ModelSpec, tensor_parallel_size: int) -> float:
    """Total cache stored over TP ranks ÷ one copy.

    KV heads split across ranks; with more ranks than KV heads each rank keeps one head,
    so heads are replicated (vLLM: max(1, n_kv // tp) heads per rank). MLA's latent is
    not split by head: every rank keeps all of it.
    """
    att = spec.attention
    if att is None or tensor_parallel_size == 1:
        return 1.0
    if att.cached_latent:
        return float(tensor_parallel_size)
    per_rank = max(1, att.num_kv_heads // tensor_parallel_size)
    return per_rank * tensor_parallel_size / att.num_kv_heads


def conversations_that_fit(budget_bytes: float, bytes_per_sequence: float) -> int:
    """Whole sequences a KV budget holds: 0 when the budget is negative."""
    if budget_bytes <= 0 or bytes_per_sequence <= 0:
        return 0
    return int(budget_bytes // bytes_per_sequence)
