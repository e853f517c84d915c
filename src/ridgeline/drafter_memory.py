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

TensorRT-LLM's PyTorch backend holds them the same way (the one-model MTP path, its default):
the MTP layers are modules of the model (models/modeling_speculative.py MTPForCausalLM: one
layer where the checkpoint ships one, rerun for every draft, MTP-Eagle; else one per draft),
loaded before the KV cache is sized, and its KV cache manager adds get_num_spec_layers =
num_nextn_predict_layers layers, one per draft, on the last pipeline stage
(speculative/utils.py; pyexecutor/resource_manager.py get_pp_layers). Its eh_proj is
row-parallel over the tensor-parallel GPUs (modeling_deepseekv3.py DeepseekV3MTP). DeepSeek-V3
drafting 3 on 8 GPUs: one layer's weights, three layers more cache a token (64/61).

Counted for vLLM and TensorRT-LLM on a model of full-attention layers alone (DeepSeek-V3,
GLM-4.5, MiMo), and for vLLM on a hybrid whose MTP layer, full attention, joins its full
group without reshaping the groups (Qwen3-Next, Qwen3.5: a page 13/12 and 11/10 as large);
a hybrid's MTP layer joins TensorRT-LLM's layer mask, which is not sized here. SGLang loads
them as a draft worker of their own, after its pool is sized before v0.5.14 (sglang_memory.py's
reserve), before it from v0.5.14 (sglang_drafter.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ridgeline.errors import InputError
from ridgeline.kvcache import attention_kv_bytes_per_token
from ridgeline.layouts import FULL
from ridgeline.params import layer_params
from ridgeline.quantization import EMBEDDING, OTHER

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.engine_spec import EngineSpec
    from ridgeline.kvpool import KVPool
    from ridgeline.memory import EngineSettings
    from ridgeline.model import ModelSpec


def mtp_counted(engine: str, model: ModelSpec, backend: str | None = None) -> bool:
    """Whether the pool counts ``model``'s MTP drafter: vLLM's, or TensorRT-LLM's PyTorch
    backend's (``backend``; MTP has no TensorRT engine path: MTPDecodingConfig
    supports_backend), of a model whose every layer is full attention, with MTP layers; and
    vLLM's on a hybrid whose MTP layers (full attention: Qwen3-Next's, Qwen3.5's) widen its
    groups without changing them (kvgroups.full_layers_keep_groups), its page growing by
    them as a full-attention model's does."""
    if engine == "trtllm":
        from ridgeline.trtllm_memory import default_backend

        if (backend or default_backend()) != "pytorch":
            return False
    if model.mtp_layers <= 0 or model.attention is None:
        return False
    if all(layer.mixer == FULL for layer in model.layers):
        return engine in ("vllm", "trtllm")
    from ridgeline.kvgroups import full_layers_keep_groups
    from ridgeline.layouts import LINEAR, MAMBA

    # recurrent layers beside full attention alone: a window model's MTP layer may be a
    # window layer, not read here
    mixers = {layer.mixer for layer in model.layers}
    return engine == "vllm" and mixers <= {FULL, LINEAR, MAMBA} and len(mixers) > 1 \
        and full_layers_keep_groups(model, model.mtp_layers)


def mtp_held_layers(engine: str, model: ModelSpec, drafts: int) -> int:
    """The MTP layers whose weights the engine holds: vLLM builds the checkpoint's; TensorRT-LLM
    one where the checkpoint ships one (rerun ``drafts`` times), else one per draft."""
    if engine == "trtllm" and drafts:
        return 1 if model.mtp_layers == 1 else drafts
    return model.mtp_layers


def mtp_cached_layers(engine: str, model: ModelSpec, drafts: int) -> int:
    """The MTP layers the engine caches a token for: vLLM the ones it builds, TensorRT-LLM one
    per draft (``drafts``, its num_nextn_predict_layers)."""
    return drafts if engine == "trtllm" and drafts else model.mtp_layers


def mtp_weight_bytes_per_gpu(dep: Deployment, drafts: int = 0) -> float:
    """One GPU's share of the MTP layers: each category of the last decoder layer over the
    GPUs it is split over (experts over the expert ranks); eh_proj at the embedding's format,
    whole on every GPU in vLLM (a plain nn.Linear in its DeepSeekMultiTokenPredictorLayer,
    model_executor/models/deepseek_mtp.py), row-parallel in TensorRT-LLM; the norms whole.
    ``drafts``: TensorRT-LLM's draft length, which sets the layers it holds."""
    model, plan = dep.model, dep.weights
    layer = sum(n * plan.format_of(c).bytes_per_weight / dep.category_ranks(c)
                for c, n in layer_params(model, model.layers[-1]).items() if n)
    h = model.hidden_size
    eh_proj = 2 * h * h * plan.format_of(EMBEDDING).bytes_per_weight
    if dep.engine == "trtllm":
        eh_proj /= dep.tensor_parallel_size
    norms = 2 * h * plan.format_of(OTHER).bytes_per_weight  # enorm, hnorm
    return mtp_held_layers(dep.engine, model, drafts) * (layer + eh_proj + norms)


def mtp_kv_bytes_per_token(dep: Deployment, kv_replication: float, rank_gpus: int,
                           drafts: int = 0) -> float:
    """One GPU's cache a token for the MTP layers: one attention layer's each, stored and
    split as the target's (``kv_replication`` copies over ``rank_gpus``)."""
    per_layer = attention_kv_bytes_per_token(dep.model, dep.kv.bytes_per_element)
    layers = mtp_cached_layers(dep.engine, dep.model, drafts)
    return layers * per_layer * kv_replication / rank_gpus


def drafter_bytes(dep: Deployment, s: EngineSettings) -> tuple[float, float]:
    """What the drafter adds to one GPU of ``dep.engine``'s pool: its weights, and its cache a
    token. The MTP layers of vLLM and TensorRT-LLM (above); a separate drafter vLLM reads
    (draft_model_memory.py); nothing where neither is counted (fit cautions)."""
    from ridgeline.draft_model_memory import (
        drafter_kv_bytes_per_token,
        drafter_problem,
        drafter_weight_bytes_per_gpu,
        read_drafter,
    )

    drafts = s.drafter.tokens if s.drafter is not None else 0
    if s.draft_mtp:
        if not mtp_counted(dep.engine, dep.model, s.backend):
            return 0.0, 0.0
        # vLLM's split as the target's; TensorRT-LLM's on the last stage's GPUs alone
        gpus = dep.rank_gpus if dep.engine == "vllm" else dep.tensor_parallel_size
        return (mtp_weight_bytes_per_gpu(dep, drafts),
                mtp_kv_bytes_per_token(dep, dep.kv_replication, gpus, drafts))
    d = s.drafter
    if d is None or dep.engine != "vllm" or not d.draft_model \
            or d.method not in ("eagle", "draft-model"):
        return 0.0, 0.0
    tp = dep.tensor_parallel_size  # a split vLLM refuses is refused, read or not
    if d.method == "draft-model" and (problem := vllm_drafter_problem(s.engine_version)):
        raise InputError(problem)
    if d.method == "draft-model" and d.draft_tensor_parallel_size:
        tp = draft_model_tp(d.draft_tensor_parallel_size, tp, s.engine_version)
    drafter = read_drafter(d.draft_model, d.method)
    if drafter is None or drafter_problem(dep.engine, dep.model, drafter):
        return 0.0, 0.0
    return (drafter_weight_bytes_per_gpu(dep, drafter, tp),
            drafter_kv_bytes_per_token(drafter, dep.kv.bytes_per_element, tp))


def drafter_rank_bytes(dep: Deployment, s: EngineSettings) -> tuple[float, float]:
    """drafter_bytes over one data-parallel rank's GPUs (every GPU without data
    parallelism): its weights on the tensor-parallel GPUs of the stage that drafts, and its
    cache a token over the GPUs drafter_bytes splits it over (vLLM's MTP cache over TP × PP,
    as the target's). DeepSeek-V3's MTP layer on 8 H200s: 8 × 1.53 GiB and 1/61 more cache
    a token."""
    weights, kv = drafter_bytes(dep, s)
    kv_gpus = dep.rank_gpus if s.draft_mtp and dep.engine == "vllm" \
        else dep.tensor_parallel_size
    return weights * dep.tensor_parallel_size, kv * kv_gpus


def vllm_v1_methods(version: str) -> tuple[str, ...] | None:
    """The drafters (--spec-method's words) vLLM ``version``'s V1 engine ran, or None outside
    0.8 to 0.9.x, where _is_v1_supported_oracle chose the engine: with VLLM_USE_V1=1 ("0.9.0
    V1") the ones it let through, unset the ones it kept on V1 (engines.json
    vllm.speculative_v0_fallback): none by default in 0.8.x, ngram and EAGLE in 0.9.0, and
    MTP (deepseek_mtp) too from 0.9.1; "0.8.5 V1" runs ngram and EAGLE."""
    from ridgeline.vllm_memory import engine_named, in_releases, parse_version, vllm_data

    record = vllm_data()["speculative_v0_fallback"]
    if not in_releases(version, record):
        return None
    era = [e for e in record["v1_methods"]
           if parse_version(e["from"]) <= parse_version(version)][-1]
    return tuple(era["opt_in" if engine_named(version) == "V1" else "default"])


def _oracle_method(drafter: EngineSpec) -> str:
    """``drafter``'s method as the 0.8 to 0.9.x oracle read it: "" where --speculative-config
    named none (vLLM inferred it later), any MTP name as "mtp"."""
    if drafter.method_inferred:
        return ""
    return "mtp" if drafter.method.endswith("mtp") else drafter.method


def vllm_draft_engine_version(version: str | None, drafter: EngineSpec | None) -> str | None:
    """The engine vLLM ``version`` runs ``drafter`` on, as an --engine-version: on a release
    whose default was V1 before v0.10.0 a drafter its oracle did not keep on V1
    (``vllm_v1_methods``: a draft model always; in 0.8.x any; MTP in 0.9.0; one whose
    --speculative-config named no method) runs on V0, so "0.9.2" is "0.9.2 V0"; anything else
    as given (a version naming its engine, VLLM_USE_V1 set, is kept: "0.9.2 V1" is refused
    where the oracle raised)."""
    from ridgeline.vllm_memory import engine_named, vllm_accounting

    if version is None or drafter is None or engine_named(version):
        return version
    kept = vllm_v1_methods(version)
    if kept is not None and _oracle_method(drafter) not in kept \
            and vllm_accounting(version).engine == "V1":
        return f"{version.strip()} V0"
    return version


def vllm_draft_settings(engine: str, s: EngineSettings) -> EngineSettings:
    """``s`` with the engine vLLM runs its drafter on (``vllm_draft_engine_version``); a
    drafter the release's V1 engine raised on under VLLM_USE_V1=1 is refused
    (``vllm_drafter_problem``)."""
    if engine != "vllm":
        return s
    if s.drafter is not None and s.drafter.method != "draft-model" \
            and (problem := vllm_drafter_problem(s.engine_version, s.drafter)):
        raise InputError(problem)
    version = vllm_draft_engine_version(s.engine_version, s.drafter)
    return s if version == s.engine_version else replace(s, engine_version=version)


def vllm_drafter_problem(version: str | None, drafter: EngineSpec | None = None) -> str:
    """Why vLLM ``version`` runs no ``drafter`` (default: a separate draft model), or "". A
    draft model: its V1 engine refused one from v0.10.0, when V0 went, until the release whose
    DraftModelProposer brought it back (engines.json vllm.draft_model_refused: read refusing
    in 0.13.0 and 0.14.0, running in 0.16.0; 0.15.0 unread, priced). Any drafter on 0.8 to
    0.9.x with VLLM_USE_V1=1 ("0.9.2 V1") that the oracle did not let through
    (``vllm_v1_methods``) raises where the default falls back to V0. A release run on its V0
    engine ("0.10.1 V0") runs one; no version: the newest modelled, which runs one."""
    from ridgeline.vllm_memory import engine_named, in_releases, vllm_accounting, vllm_data

    method = "draft-model" if drafter is None else _oracle_method(drafter)
    kept = None if version is None else vllm_v1_methods(version)
    if version is not None and engine_named(version) == "V1" and kept is not None \
            and method not in kept:
        fix = (f"leave VLLM_USE_V1 unset, where it falls back to V0, or give --engine-version "
               f"'{version.split()[0]} V0'")
        if method == "draft-model":
            return (f"vLLM {version} runs no separate draft model with VLLM_USE_V1=1 (it "
                    "raises 'VLLM_USE_V1=1 is not supported with Speculative Decoding'): "
                    + fix)
        what = (f"method {'deepseek_mtp' if method == 'mtp' else method}" if method else
                f"a --speculative-config naming no method ({drafter.method if drafter else ''}, "
                "inferred after the check)")
        return (f"vLLM {version} raises 'VLLM_USE_V1=1 is not supported with Speculative "
                f"Decoding' for {what}, which its V1 engine did not take: "
                + ("" if method else "name the method, or ") + fix)
    gap = vllm_data()["draft_model_refused"]
    if method != "draft-model" or version is None \
            or vllm_accounting(version).engine != "V1" or not in_releases(version, gap):
        return ""
    return (f"vLLM {version} runs no separate draft model (its V1 engine raises 'Speculative "
            f"decoding with draft model is not supported yet' from v{gap['from']} until "
            f"v{gap['until']}): name an EAGLE head, MTP or ngram, or another --engine-version")


def draft_model_tp(draft_tensor_parallel_size: int, tensor_parallel_size: int,
                   version: str | None = None) -> int:
    """The GPUs vLLM ``version`` splits a draft model over, as draft_tensor_parallel_size
    asks: V0 takes 1 (each rank loads the whole draft model) or the target's
    (SpeculativeConfig: 'cannot be other value than 1 or target model tensor_parallel_size');
    V1's DraftModelProposer only the target's (v1/spec_decode/draft_model.py
    _raise_if_draft_tp_mismatch, read in 0.16.0 to 0.32.0: TP-1 ranks would share one compile
    cache). Anything else is refused as vLLM refuses it. (An EAGLE head always runs at the
    target's size: the proposer loads it with the target's config.)"""
    from ridgeline.vllm_memory import vllm_accounting

    draft, tp = draft_tensor_parallel_size, tensor_parallel_size
    if vllm_accounting(version).engine == "V1":
        if draft != tp:
            raise InputError(f"draft_tensor_parallel_size {draft} is not the target's "
                             f"tensor-parallel size ({tp}): vLLM's V1 engine runs a draft model "
                             "only at the target's, and refuses any other")
    elif draft not in (1, tp):
        raise InputError(f"draft_tensor_parallel_size {draft} is neither 1 nor the target's "
                         f"tensor-parallel size ({tp}), which vLLM refuses")
    return draft


def with_mtp_cache(pool: KVPool, bytes_per_token: float) -> KVPool:
    """``pool`` with each token's cache grown by the drafter's ``bytes_per_token`` (its MTP
    layers', or a draft model's): on a model of full-attention layers alone vLLM keeps one
    group, whose page grows as the token does; TensorRT-LLM's blocks grow as its tokens do."""
    grown = (pool.kv_bytes_per_token + bytes_per_token) / pool.kv_bytes_per_token
    groups = None if pool.groups is None else replace(
        pool.groups, page_bytes=pool.groups.page_bytes * grown)
    return replace(pool, kv_bytes_per_token=pool.kv_bytes_per_token + bytes_per_token,
                   groups=groups)
