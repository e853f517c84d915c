"""What a model drafter takes from SGLang's KV pool from v0.5.14: its weights, and the draft
worker's own cache, sized with the target's.

From 0.5.14 the scheduler loads the target, then the draft worker, and only then sizes the
pools (managers/scheduler.py init_model_worker: init_tp_model_worker, maybe_init_draft_worker,
init_memory_pools); the budget is the GPU's free memory less pre_model_load_memory × (1 −
mem_fraction_static), so whatever is resident, the draft weights included, comes out of it
('Loaded weights (target + draft) can exceed the static budget',
model_runner_kv_cache_mixin.py _profile_available_bytes in 0.5.14; kv_cache_configurator.py
in 0.5.23). The draft worker shares the target's embedding and lm_head (an EAGLE-3 head keeps
its own lm_head) and takes the target's token count for its own pool: the target sizes its
cell as cell × (1 + draft layers ÷ layers) for EAGLE, EAGLE3, NEXTN (run as EAGLE) and
STANDALONE (pool_configurator.py DefaultPoolConfigurator in 0.5.14 and 0.5.23), the draft
layers the checkpoint's num_nextn_predict_layers, else the drafter's hidden layers
(model_runner.py eagle_draft_num_layers; 0.5.23 spec_aux_hidden_state.py). Before 0.5.14 the
target sized its pool before the draft worker loaded, and the default fraction held a reserve
for it (sglang_memory.sglang_speculative_reserve_mib).

From 0.5.18 --speculative-draft-kv-cache-dtype gives the draft worker's cache a dtype of its
own, but the target still budgets it at its own cell × draft layers ÷ layers (pool_configurator
'assumes the draft shares the target's per-layer KV size'), so the pool's tokens are as without
it and an fp8 draft cache beside a bf16 target leaves half its share free
(sglang_draft_kv_cache_dtype; engines.json sglang.draft_kv_cache_dtype).

Counted on a model of full-attention layers alone without a pipeline, where the cell scale is
plain; a drafter named by a config ridgeline cannot read offline is not counted (fit
cautions, cli_spec.spec_drafter). DeepSeek-V3's MTP layer on 8 H200s: 1.53 GiB of weights a
GPU, and 1/61 more cache a token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ridgeline.errors import InputError
from ridgeline.layouts import FULL
from ridgeline.sglang_memory import sglang_data, sglang_release

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.memory import EngineSettings
    from ridgeline.model import ModelSpec

MTP = ("mtp", "deepseek_mtp", "qwen3_next_mtp")  # --spec-method's words for NEXTN


def sglang_drafter_in_pool(version: str | None = None) -> bool:
    """Whether SGLang ``version`` (None: the newest modelled) loads a model drafter before it
    sizes its pool: from v0.5.14 (engines.json sglang.speculative_reserve_mib.before), the
    release that dropped the drafter's reserve from the default mem_fraction_static."""
    since = sglang_data()["speculative_reserve_mib"]["before"]
    return version is None or sglang_release(version) >= sglang_release(since)


def sglang_drafter_problem(dep: Deployment, s: EngineSettings) -> str:
    """Why SGLang's pool leaves ``s.drafter`` out ("" where sglang_drafter_bytes counts it, or
    where it takes nothing from the pool: none, n-gram, or a release before v0.5.14)."""
    d = s.drafter
    if d is None:
        return ""
    return sglang_drafter_left_out(dep.model, d.method, d.draft_model, s.engine_version,
                                   dep.pipeline_parallel_size)


def sglang_drafter_left_out(model: ModelSpec, method: str, draft_model: str = "",
                            version: str | None = None, pp: int = 1) -> str:
    """sglang_drafter_problem from the flags alone: ``method`` (--spec-method's words), the
    drafter named (``draft_model``), SGLang ``version`` and the pipeline's stages ``pp``."""
    from ridgeline.draft_model_memory import read_drafter

    if method == "ngram" or not sglang_drafter_in_pool(version):
        return ""
    if pp > 1:
        return "SGLang's drafter under pipeline parallelism is not sized here"
    if model.attention is None or any(layer.mixer != FULL for layer in model.layers):
        return (f"{model.name} has layers other than full attention, whose pools SGLang "
                "sizes apart, not sized here")
    if method in MTP:
        return "" if model.mtp_layers else f"{model.name} has no MTP layers"
    if not draft_model:
        return "no drafter named: --speculative-draft-model-path, a bundled id or a config.json"
    if read_drafter(draft_model, method) is None:
        return ("its config is neither bundled nor a config.json on this path, and ridgeline "
                "fetches nothing")
    return ""


def sglang_draft_layers(dep: Deployment, s: EngineSettings) -> int:
    """The draft layers SGLang scales its cell by: the checkpoint's num_nextn_predict_layers
    for NEXTN (DeepSeek-V3: 1), else the named drafter's hidden layers (an EAGLE-3 head of
    Llama-3.1-8B: 1); 0 where sglang_drafter_problem leaves it out."""
    from ridgeline.draft_model_memory import read_drafter

    d = s.drafter
    if d is None or d.method == "ngram" or not sglang_drafter_in_pool(s.engine_version) \
            or sglang_drafter_problem(dep, s):
        return 0
    if d.method in MTP:
        return dep.model.mtp_layers
    drafter = read_drafter(d.draft_model, d.method)
    return drafter.model.num_layers if drafter is not None else 0


def sglang_drafter_bytes(dep: Deployment, s: EngineSettings,
                         kv_bytes_per_token: float) -> tuple[float, float]:
    """What the drafter takes from one GPU of SGLang's pool: its weights, and its cache a
    token, the target's ``kv_bytes_per_token`` × draft layers ÷ layers, as SGLang scales its
    cell (the drafter's own attention shape is not read: SGLang assumes the target's). The MTP
    layers as vLLM holds them (drafter_memory.mtp_weight_bytes_per_gpu: eh_proj whole on each
    GPU, a ReplicatedLinear in SGLang's deepseek_nextn.py too); a separate head or draft model
    at the target's tensor-parallel size (draft_model_memory.drafter_weight_bytes_per_gpu).
    (0, 0) where it is left out."""
    from ridgeline.draft_model_memory import drafter_weight_bytes_per_gpu, read_drafter
    from ridgeline.drafter_memory import mtp_weight_bytes_per_gpu

    layers = sglang_draft_layers(dep, s)
    d = s.drafter
    if not layers or d is None:
        return 0.0, 0.0
    kv = kv_bytes_per_token * layers / dep.model.num_layers
    if d.method in MTP:
        return mtp_weight_bytes_per_gpu(dep), kv
    drafter = read_drafter(d.draft_model, d.method)
    if drafter is None:
        return 0.0, 0.0
    return drafter_weight_bytes_per_gpu(dep, drafter, dep.tensor_parallel_size), kv


def sglang_draft_kv_cache_dtype(value: str, version: str | None = None) -> str:
    """--speculative-draft-kv-cache-dtype ``value`` as SGLang ``version`` (None: the newest
    modelled) takes it: one of its choices (auto, fp8_e5m2, fp8_e4m3, bf16, bfloat16), from
    v0.5.18, the release that brought the flag; any other value, or an earlier release,
    refused as SGLang's parser refuses it (engines.json sglang.draft_kv_cache_dtype)."""
    d = sglang_data()["draft_kv_cache_dtype"]
    if version is not None and sglang_release(version) < sglang_release(d["from"]):
        raise InputError(f"SGLang {version} has no --speculative-draft-kv-cache-dtype: it came "
                         f"in v{d['from']} (leave it out: the draft cache then follows "
                         "--kv-cache-dtype; or name a later --engine-version)")
    if value not in d["choices"]:
        raise InputError(f"--speculative-draft-kv-cache-dtype {value} is not one SGLang "
                         f"takes ({', '.join(d['choices'])})")
    return value


def sglang_draft_kv_note(dtype: str) -> str:
    """What --speculative-draft-kv-cache-dtype (``dtype``; "" unset) changes in SGLang's pool:
    nothing, since the target budgets the draft cache at its own cell; "" where unset."""
    if not dtype:
        return ""
    return (f"; --speculative-draft-kv-cache-dtype {dtype} changes the draft cache's dtype, not "
            "this share: SGLang budgets it at the target's cell, a smaller draft cache "
            "leaving its difference free")
