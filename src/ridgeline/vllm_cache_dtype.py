"""The KV dtype a vLLM server's cache_config_info ``cache_dtype`` label stands for: its
--kv-cache-dtype as vLLM spells it, auto resolved as the engine resolves it (the model's dtype,
or the fp8 cache a checkpoint asks for where the label does not show it: checkpoint_kv.py)."""

from __future__ import annotations

from ridgeline.checkpoint_kv import label_hides_checkpoint_kv
from ridgeline.ds_mla_cache import packed_cache_problem
from ridgeline.errors import InputError
from ridgeline.model import ModelSpec
from ridgeline.precision import KVDtype, kv_dtype

# vLLM's cache_dtype spellings that name no KV dtype of formats.json, as the fp8 cache they
# store, one byte an element (vllm/config/cache.py CacheDType: "auto", "bfloat16", "fp8",
# "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", vLLM 0.16): fp8_inc is Intel Neural
# Compressor's FP8 cache (Gaudi). fp8_ds_mla, DeepSeek's FlashMLA layout, is formats.json's
# own (656 bytes a token for 576 elements: ds_mla_cache.py), and read as that
VLLM_FP8_CACHE_DTYPES = ("fp8_inc",)


def served_cache_dtype(label: str, model: ModelSpec) -> KVDtype | None:
    """The KV dtype a vLLM server's cache_config_info ``cache_dtype`` label stands for: auto
    the model's own dtype, or the checkpoint's fp8 where the label hides it
    (``label_hides_checkpoint_kv``: a compressed-tensors kv_cache_scheme); fp8_inc vLLM's
    one-byte fp8; else the dtype it names (fp8_ds_mla: its 656-byte records a token). None
    where the label names none ridgeline knows, or one this model cannot keep (fp8_ds_mla
    beside a dense latent). 'auto' for Llama-3.1-8B is bf16, 2 bytes an element; for a
    checkpoint with a compressed-tensors kv_cache_scheme, fp8, 1 byte."""
    name = label.strip().lower()
    if name == "auto":
        hidden = label_hides_checkpoint_kv(model.quant_method, model.kv_cache_dtype)
        # a float32 checkpoint vLLM serves in bf16 (its --dtype auto)
        name = model.kv_cache_dtype if hidden else {"fp32": "bf16"}.get(model.dtype, model.dtype)
    elif name in VLLM_FP8_CACHE_DTYPES:
        name = "fp8"
    try:
        cache = kv_dtype(name)
    except InputError:
        return None
    return None if packed_cache_problem(cache, model) else cache


def names_cache_dtype(label: str) -> bool:
    """Whether a cache_dtype label names a cache: 'auto', vLLM's fp8 spellings, or a KV
    dtype of formats.json ('fp8_e4m3', 'bfloat16'); 'None', '' or 'q4' name none."""
    name = label.strip().lower()
    if name == "auto" or name in VLLM_FP8_CACHE_DTYPES:
        return True
    try:
        kv_dtype(name)
    except InputError:
        return False
    return True


def auto_words(label: str, model: ModelSpec) -> str:
    """What vLLM's 'auto' stands for with this checkpoint, in the words a caution gives it:
    the model's own dtype; the fp8 cache a compressed-tensors kv_cache_scheme sets, though the
    label reads auto; or, where the label reads auto for a ModelOpt checkpoint's fp8 KV, the
    model's dtype of a vLLM that left it aside (one that resolves it labels fp8_e4m3)."""
    checkpoint_kv = model.kv_cache_dtype
    if not checkpoint_kv:
        return "'auto' is the model's own dtype"
    if label_hides_checkpoint_kv(model.quant_method, checkpoint_kv):
        return (f"its 'auto' is the {checkpoint_kv} cache the checkpoint's kv_cache_scheme sets "
                "as the model loads, after vLLM wrote the label")
    if label.strip().lower() == "auto":
        return (f"'auto' is the model's own dtype here: this vLLM left the checkpoint's "
                f"{checkpoint_kv} KV (kv_cache_quant_algo) aside, as releases did before "
                "PR #30785 resolved it; one that resolves it labels fp8_e4m3")
    return f"'auto' serves the checkpoint's {checkpoint_kv} KV"
