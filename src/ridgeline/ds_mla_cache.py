"""vLLM's fp8_ds_mla cache (formats.json): which models it serves, and the fp8 cache vLLM
keeps in it.

fp8_ds_mla is DeepSeek's FlashMLA sparse layout, one packed record a token and layer: the
512-element latent in fp8 with a float32 scale per 128 values, and the 64-element rope part
in bf16 (512 + 4 × 4 + 64 × 2 = 656 bytes for DeepSeek-V3.2, where an fp8 latent would be
576). vLLM reads it on its sparse MLA backend only (FlashMLASparseBackend: is_mla, is_sparse,
head size 576, supported_kv_cache_dtypes auto, bfloat16, fp8_ds_mla and fp8 as its alias),
which runs DeepSeek Sparse Attention models (a config with index_topk); for such a model any
fp8 cache is stored so (DeepseekV32ForCausalLM.verify_and_update_config, vllm/model_executor/
models/config.py: a cache_dtype starting 'fp8' becomes 'fp8_ds_mla'). A dense MLA model
(DeepSeek-V3: FlashMLA lists auto, fp8, fp8_e4m3) or one without MLA (FlashAttention's fp8
path reads fp8 and fp8_e4m3 only: get_fp8_dtype_for_flashattn, 'Unrecognized FP8 dtype') has
no backend that reads it.
"""

from __future__ import annotations

from ridgeline.model import MLA, ModelSpec
from ridgeline.precision import KVDtype, kv_dtype

FP8_DS_MLA = "fp8_ds_mla"


def sparse_latent(model: ModelSpec) -> MLA | None:
    """The cached MLA latent of a DeepSeek Sparse Attention model (index_topk set), or None."""
    latent = model.attention.cached_latent if model.attention is not None else None
    return latent if latent is not None and latent.index_topk is not None else None


def packed_cache_problem(cache: KVDtype, model: ModelSpec) -> str:
    """Why ``model`` cannot keep ``cache``, a packed record a token (vLLM's fp8_ds_mla), or "":
    it has no MLA latent, a dense one, or a latent of other width than the record packs
    (kv_lora_rank + qk_rope_head_dim = 576 for DeepSeek-V3.2)."""
    if not cache.elements_per_token:
        return ""
    latent = model.attention.cached_latent if model.attention is not None else None
    said = f"vLLM's {cache.id} is DeepSeek's sparse MLA cache"
    if latent is None:
        return (f"{said}, which no attention backend reads for {model.name}, a model "
                "without an MLA latent; give --kv-cache-dtype fp8")
    if latent.index_topk is None:
        return (f"{said}, read only by its sparse MLA backend, which runs DeepSeek Sparse "
                f"Attention models (a config with index_topk: DeepSeek-V3.2); {model.name}'s "
                "dense MLA runs on backends that do not read it (FlashMLA: auto, fp8, "
                "fp8_e4m3): give --kv-cache-dtype fp8")
    width = latent.kv_lora_rank + latent.qk_rope_head_dim
    if width != cache.elements_per_token:
        return (f"{said}: its record packs a latent of {cache.elements_per_token} elements "
                f"(FlashMLASparse's one head size), not {model.name}'s {width} "
                f"(kv_lora_rank {latent.kv_lora_rank} + qk_rope_head_dim "
                f"{latent.qk_rope_head_dim})")
    return ""


def vllm_stored_cache(cache: KVDtype, model: ModelSpec) -> KVDtype:
    """The cache vLLM keeps where asked for ``cache``: a DeepSeek Sparse Attention model's fp8
    cache (fp8, fp8_e4m3, fp8_e5m2) in fp8_ds_mla's 656-byte records, any other as asked."""
    if cache.id == "fp8" and sparse_latent(model) is not None:
        packed = kv_dtype(FP8_DS_MLA)
        if not packed_cache_problem(packed, model):
            return packed
    return cache
