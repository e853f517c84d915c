"""The model as an engine serves it: the dtype it serves a checkpoint at, the GGUF llama.cpp
runs a checkpoint as, and the attention windows it keeps apart (llama.cpp only for the
architectures it has a window type for)."""

from __future__ import annotations

from dataclasses import replace

from ridgeline.datafiles import load_data
from ridgeline.layouts import FULL, WINDOW_MIXERS
from ridgeline.model import ModelSpec
from ridgeline.precision import WeightPlan


def served_dtype(model: ModelSpec) -> str:
    """The dtype an engine serves a checkpoint at, and keeps its KV cache in, by default: a
    float32 checkpoint at 16 bits (vLLM's --dtype "auto" takes the platform's first 16-bit type
    for it, bf16 where the card has it; its docs before v0.5: fp16; SGLang's the same), any
    other as stored. llama.cpp's converter keeps a 16-bit checkpoint's own type
    (llamacpp_gguf_dtype: Llama-3.1-8B's bf16 as a BF16 GGUF)."""
    return "bf16" if model.dtype == "fp32" else model.dtype


# The GGUF llama.cpp users run an MXFP4 checkpoint (gpt-oss) as, where no --weights names one.
# convert_hf_to_gguf.py (GptOssModel) copies the MXFP4 expert blocks into GGML MXFP4 tensors
# (repack_mxfp4; dequant_model is skipped for quant_method "mxfp4"), writes every other tensor
# at --outtype (its default, auto, BF16 from the checkpoint's bf16 tensors: llamacpp_gguf_dtype;
# norms, biases and sinks F32) and labels the file MOSTLY_MXFP4_MOE.
# The published file, ggml-org/gpt-oss-120b-GGUF (what llama.cpp's own benches/dgx-spark.md
# runs), has the rest at Q8_0 too, llama-quantize's MXFP4_MOE mix: 59.02 GiB in llama-bench,
# against 60.87 GiB for a 16-bit (F16) conversion (community.frame.work "Will the AI Max+ 395 128GB be
# able to run gpt-oss-120b", post 26: token_embd, attention and output Q8_0 in ggml-org's file).
LLAMACPP_MXFP4_GGUF = "mxfp4_moe"
# what --weights stored (the checkpoint's own formats) is under llama.cpp for such a checkpoint
LLAMACPP_STORED_GGUF = ("convert_hf_to_gguf.py's own output, MXFP4 experts and BF16 for "
                        "the rest")
# In a list of weight formats to offer (the page's --weights), the weights the engine reads
# where no --weights is given: under llama.cpp llamacpp_weights' GGUF, which no stored
# spelling names there ("as stored" is LLAMACPP_STORED_GGUF, as fit reads --weights stored).
DEFAULT_WEIGHTS_ENTRY = "default"


def llamacpp_gguf_dtype(model: ModelSpec) -> str:
    """The 16-bit type convert_hf_to_gguf.py writes a checkpoint's unquantized tensors in at its
    default --outtype, auto (engines.json gguf_16bit, with its source): the checkpoint's own
    where that is bf16 or fp16 (Llama-3.1-8B: bf16, a BF16 GGUF), fp16 for any other (a float32
    checkpoint). A file converted before auto was the default is F16: --weights fp16."""
    rule = load_data("engines.json")["llama.cpp"]["gguf_16bit"]["auto_outtype"]
    return str(rule.get(model.dtype, rule["other"]))


def llamacpp_tensor_types(plan: WeightPlan) -> WeightPlan:
    """``plan`` as a GGUF stores it: the tensors convert_hf_to_gguf.py writes F32 whatever
    --outtype, and llama-quantize leaves so (engines.json gguf_f32, with its source lines: the
    MoE router, ffn_gate_inp; norms and biases; gpt-oss's per-expert biases), at fp32, every
    other category as planned. Qwen3-30B-A3B's router, 48 layers × 128 experts × 2,048 =
    12.6 M weights, is 50.3 MB in its BF16 GGUF, not 25.2."""
    f32 = set(load_data("engines.json")["llama.cpp"]["gguf_f32"]["categories"])
    return replace(plan, formats=tuple((c, "fp32" if c in f32 else f) for c, f in plan.formats))


def llamacpp_weights(model: ModelSpec) -> str | None:
    """The weight format llama.cpp runs ``model`` at where none is named: a checkpoint whose
    quantization_config says quant_method "mxfp4" as ggml-org's GGUF of it (mxfp4_moe: MXFP4
    experts, Q8_0 for the rest); None (as stored) for any other, a GGUF file included."""
    return LLAMACPP_MXFP4_GGUF if model.quant_method == "mxfp4" else None


def llamacpp_weights_note(model: ModelSpec) -> str:
    """The line that says which GGUF llama.cpp is assumed to run, or "" where none is assumed."""
    if llamacpp_weights(model) is None:
        return ""
    return (f"llama.cpp runs a GGUF, not the Hugging Face checkpoint: {model.name} is read as "
            f"ggml-org's conversion, --weights {LLAMACPP_MXFP4_GGUF} (MXFP4 experts, Q8_0 for "
            f"the rest); --weights stored for {LLAMACPP_STORED_GGUF}, or "
            "--weights another GGUF type (q8_0, q4_k_m, …)")


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


def windows_as_full(model: ModelSpec, mixers: tuple[str, ...] = WINDOW_MIXERS) -> ModelSpec:
    """The model with its sliding-window and chunked layers (those of ``mixers``) cached, and
    attended, as full attention (an engine that does not keep windows apart)."""
    if not any(layer.mixer in mixers for layer in model.layers):
        return model
    return replace(model, layers=tuple(
        replace(layer, mixer=FULL, window_tokens=None) if layer.mixer in mixers else layer
        for layer in model.layers))
