"""What ridgeline knows of each transformers ``model_type``: the ones it reads field by field
and has checked, the ones it refuses (not decoder-only LLMs), and the per-family layout facts a
config does not state (a two-matrix MLP, LayerNorm, four norms a layer, QK norm, biases).
``config_reader.py`` reads a config by these; ``ModelSpec.architecture_caution`` names a
model_type or architecture outside them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from ridgeline.datafiles import data_files, load_data
from ridgeline.errors import InputError

# Architectures whose MLP is two matrices (up, down) rather than gated SwiGLU/GeGLU (three).
# GPTBigCode (StarCoder): c_fc and c_proj with a GELU between (vLLM's gpt_bigcode.py GPTBigMLP)
UNGATED_MLP = {"gptj", "falcon", "nemotron_h", "gpt2", "gpt_neox", "opt", "bloom", "starcoder2",
               "gpt_bigcode"}
# Architectures normalised with LayerNorm (weight + bias) rather than RMSNorm (weight only).
# Cohere's and Cohere2's LayerNorm centres like one but carries no bias (transformers
# CohereLayerNorm, Cohere2LayerNorm: a weight only), so each counts as RMSNorm's h a norm and
# is not listed.
LAYER_NORM = {"gptj", "falcon", "gpt2", "gpt_neox", "opt", "bloom", "starcoder2", "gpt_bigcode"}
# Architectures whose attention and MLP both read one input norm and add to the residual
# together: one norm a layer (GPT-J, Falcon; Cohere's and Cohere2's decoder layers have only
# their input_layernorm)
PARALLEL_BLOCK = {"gptj", "falcon", "cohere", "cohere2"}
# Gemma 2/3 put a norm before and after both attention and MLP: four per layer.
FOUR_NORMS = {"gemma2", "gemma3", "gemma3_text"}
# Architectures with an RMSNorm of head_dim on each query and key head (q_norm, k_norm):
# 2 × head_dim weights a layer (EXAONE 4: transformers' Exaone4Attention)
QK_NORM = {"qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text", "gemma3",
           "gemma3_text", "qwen3_5", "qwen3_5_text", "exaone4"}
# Architectures whose query and key norms, where use_qk_norm turns them on, weigh every head
# apart: (heads + KV heads) × head_dim a layer, not 2 × head_dim (transformers CohereAttention:
# CohereLayerNorm over (num_attention_heads, head_dim) and (num_key_value_heads, head_dim);
# Command R+)
PER_HEAD_QK_NORM = frozenset({"cohere"})
OUTPUT_GATED_ATTENTION = {"qwen3_next"}
# Parallel hybrids: every decoder layer runs attention and a Mamba-2 mixer side by side on one
# input norm, sums them, then runs its MLP (transformers' FalconH1Config: layers_block_type
# "hybrid" for every layer; vLLM falcon_h1.py FalconH1ParallelHybrid, whose Attention and
# MambaMixer2 each register a cache layer of their own). Read as two blocks a layer, the
# attention with the MLP, then the Mamba-2: the layers vLLM's hybrid KV-cache manager groups.
PARALLEL_HYBRID = frozenset({"falcon_h1"})
# Architectures whose attention projections always carry biases (GPT-2's Conv1D layers;
# GPTBigCode's c_attn and c_proj, bias=True in vLLM's gpt_bigcode.py; GPT-NeoX's come from
# attention_bias, true by default: model_type_defaults.json)
ATTENTION_BIAS = {"gpt2", "gpt_bigcode"}
# Architectures that add a learned position table (wpe, n_positions rows) to the token
# embedding: GPT-2 and GPTBigCode (vLLM's gpt_bigcode.py: nn.Embedding(max_position_embeddings,
# hidden))
LEARNED_POSITIONS = frozenset({"gpt2", "gpt_bigcode"})
# Architectures whose two-matrix MLP always carries biases (nn.Linear's, Conv1D's)
MLP_BIAS = {"gptj", "gpt2", "gpt_neox", "gpt_bigcode"}
# Not read field by field: OPT (ffn_dim, a position table offset by 2, a projection when
# word_embed_proj_dim differs) and BLOOM (ALiBi, an FFN of 4 × hidden named by no field, an
# embedding LayerNorm); left out of the checked set so a readable one carries the caution
_UNCHECKED_UNGATED = {"opt", "bloom"}
# model_types whose layout ridgeline reads field by field and has checked against a real
# config's parameter count (the bundled ones, their multimodal and base variants, and the
# Llama-shaped families; GPT-2 small 124,439,808 and Pythia-160m 162,322,944, the published
# totals, Command R7B's 8,028,033,024, its card's 8.03B, and the Cohere family's safetensors
# counts as leaderboard request files list them: Command R 34.981B, Command R+ 103.811B,
# Aya Expanse 8.028B and 32.296B; DeepSeek-V3.2, V3 with DeepSeek Sparse Attention's indexer
# (params.indexer_params): 671,877,944,064, the tensors of deepseek-ai/DeepSeek-V3.2's 163
# safetensors files, 685,396,921,376 elements in all, less their 41,591,584 fp8 block scales
# and the 13,477,385,728 of its MTP module (layer 61, with its embedding and head copies), as
# a listing of the checkpoint's tensors gives them (code index id 62736905881); StarCoder's
# GPTBigCode, multi-query, tied: StarCoderBase-15B 15,517,456,384 and StarCoderBase-1B
# 1,137,207,296, the counts a MultiPL-T training-cost script records (code index id
# 69542685706)); any other is read as a decoder of the fields it has, with a caution
KNOWN_MODEL_TYPES = {
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next",
    "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "gemma2", "gemma3",
    "gemma3_text", "phi3", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe", "gpt_oss",
    "gptj", "falcon", "jamba", "nemotron_h", "llama4", "llama4_text", "cohere", "cohere2",
    # checked against their cards: Falcon-H1-7B 7.586B (card 7.59B), Granite-4.0-H-Small
    # 32.21B (IBM's 32B; 32.19B counted from the checkpoint's tensors)
    "falcon_h1", "granitemoehybrid",
    # ERNIE-4.5-21B-A3B: 21,825,437,888, the Hub's safetensors total for
    # baidu/ERNIE-4.5-21B-A3B-Thinking (code index id 43094890567), 3.09B active
    "ernie4_5_moe",
    *(UNGATED_MLP - _UNCHECKED_UNGATED),
}
# model_types that are not decoder-only LLMs (transformers' names, "-" read as "_"): refused
ENCODER_TYPES = {
    "bert", "roberta", "xlm_roberta", "distilbert", "albert", "electra", "deberta",
    "deberta_v2", "modernbert", "camembert", "mpnet", "clip", "clip_text_model",
    "clip_vision_model", "siglip", "siglip_text_model", "siglip_vision_model", "vit",
    "wav2vec2", "hubert",
}
ENCODER_DECODER_TYPES = {"t5", "mt5", "umt5", "longt5", "bart", "mbart", "pegasus", "marian",
                         "whisper", "led", "encoder_decoder"}
RECURRENT_TYPES = {"mamba", "mamba2", "falcon_mamba", "rwkv", "rwkv5", "rwkv6", "rwkv7"}
# Decoders some of whose layers cross-attend to an image's encoder states, a cache per image
# beside the text's KV (Llama-3.2-Vision: 8 of its 40 text layers, cross_attention_layers):
# not modelled, and vLLM serves them no more ("MllamaForConditionalGeneration": "0.10.2" in
# _PREVIOUSLY_SUPPORTED_MODELS, vllm/model_executor/models/registry.py: removed with V0's
# encoder-decoder runner, PR #24907; V1 never ran it)
CROSS_ATTENTION_TYPES = {"mllama", "mllama_text_model"}
# MoE configs whose experts have a width of their own, moe_intermediate_size, beside the dense
# layers' intermediate_size (transformers' Qwen2Moe/Qwen3Moe/Qwen3Next/Qwen3.5-MoE,
# DeepseekV2/V3, Glm4Moe, Ernie4_5_Moe config classes; Kimi-K2 ships DeepSeek-V3's, and
# DeepSeek-V3.2's config.json has V3's fields). Mixtral, gpt-oss, Llama 4, Jamba and others
# size their experts by intermediate_size itself.
OWN_EXPERT_WIDTH = frozenset({
    "qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_vl_moe",
    "qwen3_vl_moe_text", "deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe",
    "glm4v_moe", "ernie4_5_moe"})


@cache
def bundled_architectures() -> frozenset[tuple[str, str]]:
    """The (model_type, architecture) pairs the bundled configs name (ridgeline/data/models)."""
    pairs: set[tuple[str, str]] = set()
    for name in data_files("models"):
        config = load_data(f"models/{name}")
        kind = config.get("model_type")
        for architecture in config.get("architectures") or ():
            if isinstance(kind, str) and isinstance(architecture, str):
                pairs.add((kind, architecture))
    return frozenset(pairs)


def same_family(architecture: str, model_type: str) -> bool:
    """Whether an architecture's name is its model_type's, as transformers names its classes
    (Gemma3ForCausalLM for gemma3_text, GPTNeoXForCausalLM for gpt_neox, GPT2LMHeadModel
    for gpt2; not Qwen2MoeForCausalLM for qwen2)."""
    family = architecture.split("For", 1)[0].split("LMHead", 1)[0].replace("_", "").lower()
    return bool(family) and model_type.replace("_", "").lower().startswith(family)


def _types_named_by(architecture: str) -> set[str]:
    """The refused model_types a transformers class name starts with, for a config without
    model_type: "BertForMaskedLM" → {"bert"}, "XLMRobertaModel" → {"xlm_roberta"}; a
    decoder's ("LlamaForCausalLM") → none."""
    stem = re.split(r"For[A-Z]|Model$|Encoder", architecture)[0].lower()
    return {t for t in ENCODER_TYPES | ENCODER_DECODER_TYPES | RECURRENT_TYPES
            if stem and t.replace("_", "") == stem}


def first_architecture(config: Mapping[str, Any]) -> str | None:
    """The first of a config's ``architectures``, where it lists one."""
    value = config.get("architectures")
    if isinstance(value, list) and value:
        return str(value[0])
    return None


def refuse_non_decoders(name: str, config: Mapping[str, Any], model_type: str,
                        outer_type: str) -> None:
    """An encoder, an encoder-decoder or a pure recurrent model is not a decoder LLM
    with a KV cache growing a token at a time: refused, by name, not read as one."""
    kinds = {t.replace("-", "_") for t in (model_type, outer_type) if t}
    architecture = ""
    if not kinds:  # no model_type: transformers' class name starts with it (BertForMaskedLM)
        architecture = first_architecture(config) or ""
        kinds = _types_named_by(architecture)
    if kinds & CROSS_ATTENTION_TYPES:
        raise InputError(f"{name}: model_type {min(kinds & CROSS_ATTENTION_TYPES)!r} "
                         "(Llama-3.2-Vision) cross-attends to each image's encoder states in "
                         "its cross_attention_layers, a cache ridgeline does not model; vLLM "
                         "served MllamaForConditionalGeneration until v0.10.2 and no longer")
    if config.get("is_encoder_decoder") is True or kinds & ENCODER_DECODER_TYPES:
        what = "an encoder-decoder model"
    elif kinds & ENCODER_TYPES:
        what = "an encoder (no causal decoder, no KV cache to serve)"
    elif kinds & RECURRENT_TYPES:
        what = ("a pure recurrent (state-space) model: ridgeline sizes decoders with "
                "attention, hybrids with Mamba or linear attention among them (Jamba, "
                "Nemotron-H, Qwen3-Next)")
    else:
        return
    kind = min(kinds) if kinds else ""
    if not architecture:
        named = f"model_type {kind!r}" if kind else "its config (is_encoder_decoder: true)"
    elif kind:
        named = f"architecture {architecture!r} (a {kind} model; the config has no model_type)"
    else:
        named = f"architecture {architecture!r} (is_encoder_decoder: true)"
    raise InputError(f"{name}: {named} is {what}"
                     + ("" if "recurrent" in what else
                        ", not a decoder-only LLM, which is what ridgeline sizes"))
