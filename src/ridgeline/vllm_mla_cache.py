"""Whether a vLLM release caches an MLA model's (DeepSeek-V2/V3/R1, Kimi K2) one compressed
latent a token and layer, or every head's K and V as multi-head attention.

vLLM's MLA cache came in 0.7.1 (engines.json vllm.release_features.mla_latent_cache, read in
the PyPI wheels). Before it, DeepseekV2Attention hands its Attention layer every head's K
(qk_nope_head_dim + qk_rope_head_dim = 192 for DeepSeek-V3) and its V padded to the same
width, the heads split over the tensor-parallel ranks: DeepSeek-V3 in bf16 keeps
2 × 128 × 192 × 2 = 98,304 B a token and layer, 85⅓ × its 1,152-byte latent. Kimi K2's model
type joined the latent in 0.10.0; in 0.7.1 and 0.7.2 a quantization other than fp8 (an AWQ or
GPTQ checkpoint) turned it off.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ridgeline.datafiles import engine_defaults
from ridgeline.engine_versions import release_before
from ridgeline.model import ModelSpec
from ridgeline.precision import WeightPlan

# the weight formats vLLM 0.7.1 and 0.7.2 kept the latent under: unquantized, or fp8
# (ModelConfig.use_mla: quantization None, fp8, or compressed-tensors with fp8 weights)
_LATENT_FORMATS = ("fp32", "bf16", "fp16", "fp8", "fp8-block")


def _rule() -> dict[str, Any]:
    return dict(engine_defaults("vllm")["release_features"]["mla_latent_cache"])


def latent_since(model: ModelSpec) -> str:
    """The first vLLM release that caches ``model``'s MLA latent: '0.7.1' for DeepSeek-V3,
    '0.10.0' for Kimi K2 (model_type kimi_k2); 0.7.1 for a model type not listed."""
    rule = _rule()
    return str(rule["model_types"].get(model.model_type, rule["since"]))


def caches_latent(model: ModelSpec, version: str | None, weights: WeightPlan) -> bool:
    """Whether vLLM ``version`` (None: the newest modelled) caches ``model``'s latent, served
    in ``weights``: from latent_since on, and in 0.7.1 and 0.7.2 only unquantized or in fp8
    (DeepSeek-V3 as stored at 0.7.1: yes; an AWQ DeepSeek-V3 at 0.7.2: no; at 0.7.0: no)."""
    if release_before("vllm", version, latent_since(model)):
        return False
    if release_before("vllm", version, str(_rule()["any_quantization_since"])):
        return all(fmt in _LATENT_FORMATS for _, fmt in weights.formats)
    return True


def per_head_model(model: ModelSpec) -> ModelSpec:
    """``model`` with its MLA cached per head, as vLLM does before its latent cache: each
    head's K at qk_nope + qk_rope and its V padded to that width (DeepSeek-V3: 128 KV heads ×
    (192 + 192)); its weights (MLA's own widths) stay as they are."""
    att = model.attention
    if att is None or att.mla is None:
        return model
    mla = replace(att.mla, latent_cached=False, vllm_heads=True)
    return replace(model, attention=replace(att, mla=mla, v_head_dim=att.head_dim))


def latent_model(model: ModelSpec) -> ModelSpec:
    """``model`` as it was before per_head_model: its latent cached, V at v_head_dim again;
    any other model (a GGUF llama.cpp caches per head included) as it is."""
    att = model.attention
    if att is None or att.mla is None or not att.mla.vllm_heads:
        return model
    mla = replace(att.mla, latent_cached=True, vllm_heads=False)
    return replace(model, attention=replace(att, mla=mla, v_head_dim=mla.v_head_dim))


def vllm_cache_model(model: ModelSpec, version: str | None, weights: WeightPlan) -> ModelSpec:
    """The model as vLLM ``version`` caches it: per_head_model where the release keeps no
    latent for it (caches_latent), else its latent (a deployment laid out at 0.7.0 and asked
    at 0.8.0 is cached as 0.8.0 caches it)."""
    latent = latent_model(model)
    if latent.attention is None or latent.attention.cached_latent is None \
            or caches_latent(latent, version, weights):
        return latent
    return per_head_model(latent)


def per_head_caution(model: ModelSpec) -> str:
    """The caution beside a figure priced with ``model``'s MLA cached per head (per_head_model),
    so a reader knows why an old release's pool holds so few: DeepSeek-V3 at 0.7.0 caches
    128 heads × (192 + 192) = 49,152 values a token and layer where 0.7.1 caches its 576-wide
    latent, 85× fewer; "" for any other model."""
    att = model.attention
    if att is None or att.mla is None or not att.mla.vllm_heads:
        return ""
    mla = att.mla
    heads = 2 * att.num_kv_heads * att.head_dim
    latent = mla.kv_lora_rank + mla.qk_rope_head_dim
    return (f"this vLLM release caches {model.name}'s MLA as every head's K and V "
            f"({att.num_kv_heads} heads × (K {att.head_dim} + V padded to {att.head_dim}) = "
            f"{heads:,} values a token and layer), not its {latent}-wide latent, "
            f"{heads / latent:,.0f}× the cache: the latent came in v{latent_since(model)}")
