"""What an MTP drafter adds to vLLM's pool: the checkpoint's own multi-token-prediction layers,
loaded beside the model (--speculative-config '{"method": "deepseek_mtp", …}', --spec-method
mtp), their weights held and their cache paged in the same blocks as the target's.

Each MTP layer (DeepSeek-V3 §2.2; config.json's num_nextn_predict_layers) is one decoder layer
like the model's last (DeepSeek-V3's: MLA and a MoE block), plus eh_proj, a 2h × h projection
of [embedding; hidden state], and two RMSNorms of h; the embedding and lm_head are the target's
(vLLM's EAGLE proposer shares them, v1/spec_decode/eagle.py load_model). vLLM pages the
drafter's attention layers with the target's (its KV cache spec lists every attention layer
the engine built), so a token's cache grows by one layer's per MTP layer. DeepSeek-V3 (61
layers, 1 MTP) on 8 GPUs: 11.7 GB of weights, about 1.6 GB a GPU (eh_proj whole on each),
and 1/61 more cache a token.

Counted for vLLM on a model of full-attention layers alone (DeepSeek-V3, GLM-4.5, MiMo); a
hybrid's MTP layer (Qwen3-Next) joins vLLM's grouped pages, which are not sized here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ridgeline.kvcache import attention_kv_bytes_per_token
from ridgeline.layouts import FULL
from ridgeline.params import layer_params
from ridgeline.quantization import EMBEDDING, OTHER

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.kvpool import KVPool
    from ridgeline.model import ModelSpec


def mtp_counted(engine: str, model: ModelSpec) -> bool:
    """Whether the pool counts ``model``'s MTP drafter: vLLM's, of a model whose every layer is
    full attention, with MTP layers."""
    return engine == "vllm" and model.mtp_layers > 0 and model.attention is not None \
        and all(layer.mixer == FULL for layer in model.layers)


def mtp_weight_bytes_per_gpu(dep: Deployment) -> float:
    """One GPU's share of the MTP layers: each category of the last decoder layer over the
    GPUs it is split over (experts over the expert ranks); eh_proj whole on every GPU at the
    embedding's format, a plain nn.Linear in vLLM's DeepSeekMultiTokenPredictorLayer
    (model_executor/models/deepseek_mtp.py), not a tensor-parallel one; the norms whole."""
    model, plan = dep.model, dep.weights
    layer = sum(n * plan.format_of(c).bytes_per_weight / dep.category_ranks(c)
                for c, n in layer_params(model, model.layers[-1]).items() if n)
    h = model.hidden_size
    eh_proj = 2 * h * h * plan.format_of(EMBEDDING).bytes_per_weight
    norms = 2 * h * plan.format_of(OTHER).bytes_per_weight  # enorm, hnorm
    return model.mtp_layers * (layer + eh_proj + norms)


def mtp_kv_bytes_per_token(dep: Deployment, kv_replication: float, rank_gpus: int) -> float:
    """One GPU's cache a token for the MTP layers: one attention layer's each, stored and
    split as the target's (``kv_replication`` copies over ``rank_gpus``)."""
    per_layer = attention_kv_bytes_per_token(dep.model, dep.kv.bytes_per_element)
    return dep.model.mtp_layers * per_layer * kv_replication / rank_gpus


def with_mtp_cache(pool: KVPool, bytes_per_token: float) -> KVPool:
    """``pool`` with each token's cache grown by the MTP layers' ``bytes_per_token``: on a model
    of full-attention layers alone vLLM keeps one group, whose page grows as the token does."""
    grown = (pool.kv_bytes_per_token + bytes_per_token) / pool.kv_bytes_per_token
    groups = None if pool.groups is None else replace(
        pool.groups, page_bytes=pool.groups.page_bytes * grown)
    return replace(pool, kv_bytes_per_token=pool.kv_bytes_per_token + bytes_per_token,
                   groups=groups)
