"""The model as an engine serves it: the dtype it serves a checkpoint at, and the
attention windows it keeps apart (llama.cpp only for the architectures it has a window type
for)."""

from __future__ import annotations

from dataclasses import replace

from ridgeline.datafiles import load_data
from ridgeline.layouts import FULL, WINDOW_MIXERS
from ridgeline.model import ModelSpec


def served_dtype(model: ModelSpec) -> str:
    """The dtype an engine serves a checkpoint at, and keeps its KV cache in, by default: a
    float32 checkpoint at 16 bits (vLLM's --dtype "auto" takes the platform's first 16-bit type
    for it, bf16 where the card has it; its docs before v0.5: fp16; SGLang's the same, and
    llama.cpp's converter writes F16 by default), any other as stored."""
    return "bf16" if model.dtype == "fp32" else model.dtype


def llamacpp_attention(model: ModelSpec) -> ModelSpec:
    """The model as llama.cpp runs it: a window only for the architectures it has a window
    type for (engines.json ``swa_model_types``); a GGUF of any other (Mistral-7B-v0.1 loads as
    "llama") caches, and attends over, every token in every layer."""
    if model.model_type in load_data("engines.json")["llama.cpp"]["swa_model_types"]:
        return model
    return windows_as_full(model)


def latent_attention(model: ModelSpec) -> ModelSpec:
    """The model as vLLM or SGLang runs a DeepSeek GGUF that llama.cpp would cache per head
    (one written before llama.cpp's MLA cache, gguf_model.mla_cache_keys): their DeepSeek
    model classes run MLA whatever the weights' file and cache the one latent a token (vLLM
    loads such a GGUF's attn_kv_b into deepseek_v2.py's MLA attention, vllm-project/vllm#13167,
    whose DeepSeek-R1 GGUFs predate the MLA cache keys). Any other model as it is."""
    att = model.attention
    if att is None or att.mla is None or att.mla.latent_cached:
        return model
    return replace(model, attention=replace(att, mla=replace(att.mla, latent_cached=True)))


def windows_as_full(model: ModelSpec) -> ModelSpec:
    """The model with its sliding-window and chunked layers cached, and attended, as full
    attention (an engine that does not keep windows apart)."""
    if not any(layer.mixer in WINDOW_MIXERS for layer in model.layers):
        return model
    return replace(model, layers=tuple(
        replace(layer, mixer=FULL, window_tokens=None) if layer.mixer in WINDOW_MIXERS else layer
        for layer in model.layers))
