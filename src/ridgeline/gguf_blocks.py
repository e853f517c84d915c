"""The blocks of a model's GGUF as llama.cpp loads them: the repeating layers, then the
multi-token-prediction (MTP, "nextn") blocks some converters keep.

convert_hf_to_gguf.py writes block_count = num_hidden_layers + the MTP layers for GLM-4.5's
and Qwen3.5's architectures (engines.json gguf_mtp_architectures). llama.cpp loads it as
n_layer_all, the MTP blocks last (n_layer() = n_layer_all − n_layer_nextn, src/llama-hparams.h),
and places every block as it places a layer: -ngl and -ts deal n_layer_all + 1 slots, the
output layer the last (src/llama-model.cpp, load_tensors). What an MTP block then holds,
without MTP drafting (llama_model_params.load_mtp off, llama-server's default):

- no weights: its tensors are created TENSOR_SKIP (src/models/glm4-moe.cpp and
  src/models/qwen35moe.cpp, load_arch_tensors), so a GLM-4.5 Q4_K_M's 93rd block costs
  nothing (builds before load_mtp loaded Qwen3.5's, load_block_mtp; not counted here);
- GLM-4.5's a KV cache all the same: llama_model_glm4_moe::load_arch_hparams sets no
  n_layer_kv_from_start, and llama_kv_cache's constructor (src/llama-kv-cache.cpp) gives
  each of the n_layer_all blocks its K and V (engines.json gguf_mtp_kv_architectures);
  Qwen3.5's hybrid memory bounds its attention layers by n_layer() (src/llama-model.cpp,
  create_memory), so its MTP block keeps none.
"""

from __future__ import annotations

from ridgeline.datafiles import engine_defaults
from ridgeline.kvcache import attention_kv_bytes_per_token
from ridgeline.model import ModelSpec


def gguf_block_count(model: ModelSpec) -> int:
    """n_layer_all: the blocks of the model's GGUF, as convert_hf_to_gguf.py writes
    block_count: the repeating layers, and the MTP (nextn) layers where the architecture's
    converter keeps them (engines.json gguf_mtp_architectures: conversion/glm.py Glm4MoeModel,
    conversion/qwen.py _Qwen35MtpMixin; DeepseekV2Model drops them). llama.cpp loads those as
    blocks n_layer … n_layer_all − 1 (src/llama-hparams.h). GLM-4.5: 92 + 1 = 93."""
    kept = engine_defaults("llama.cpp")["gguf_mtp_architectures"]
    return model.num_layers + (model.mtp_layers if model.architecture in kept else 0)


def mtp_blocks(model: ModelSpec) -> int:
    """The GGUF's MTP blocks, the last ones: GLM-4.5 1, Qwen3.5-35B-A3B 1, DeepSeek-V3 0."""
    return gguf_block_count(model) - model.num_layers


def mtp_cache_blocks(model: ModelSpec) -> int:
    """The MTP blocks llama.cpp gives a KV cache of their own (engines.json
    gguf_mtp_kv_architectures: GLM-4.5's one), each one more full-attention layer's K and V
    per -c cell on the device that holds it; 0 for Qwen3.5's."""
    kv = engine_defaults("llama.cpp")["gguf_mtp_kv_architectures"]
    return mtp_blocks(model) if model.architecture in kv else 0


def mtp_kv_bytes_per_token(model: ModelSpec, kv_bytes_per_element: float) -> float:
    """The cache the MTP blocks add per -c cell: blocks × one attention layer's K and V.
    GLM-4.5 at f16: 1 × 2 × 8 KV heads × 128 × 2 B = 4 KiB, beside its 92 layers' 368."""
    return mtp_cache_blocks(model) * attention_kv_bytes_per_token(model, kv_bytes_per_element)
