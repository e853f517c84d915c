"""ModelSpec: what the arithmetic needs from a Hugging Face ``config.json``.

``ModelSpec.from_hf_config(dict)`` reads the geometry of attention (MHA, GQA, MQA, MLA),
the kind of every layer (full, sliding-window, chunked, linear-attention, Mamba), the MoE
layout and the stored weight format. It does no I/O; ``catalog.py`` reads files.
Parameter counts live in ``params.py``, KV bytes in ``kvcache.py``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from ridgeline.datafiles import data_files, load_data, model_type_defaults
from ridgeline.errors import InputError, shorten
from ridgeline.layouts import (
    CHUNKED,
    LINEAR,
    MAMBA,
    MOE,
    NONE,
    SLIDING,
    ffn_kinds,
    mixer_kinds,
)
from ridgeline.quantization import stored_formats

# Architectures whose MLP is two matrices (up, down) rather than gated SwiGLU/GeGLU (three).
# Far above any real model (Llama-3.1-405B has 126 layers); a config that claims more is
# malformed, and building its layer list would exhaust memory.
MAX_LAYERS = 10_000
MAX_FIELD = 2**31 - 1  # any count or size in a config: past int32, no checkpoint holds it
_UNGATED_MLP = {"gptj", "falcon", "nemotron_h", "gpt2", "gpt_neox", "opt", "bloom", "starcoder2"}
# Architectures normalised with LayerNorm (weight + bias) rather than RMSNorm (weight only).
_LAYER_NORM = {"gptj", "falcon", "gpt2", "gpt_neox", "opt", "bloom", "starcoder2"}
# Gemma 2/3 put a norm before and after both attention and MLP: four per layer.
_FOUR_NORMS = {"gemma2", "gemma3", "gemma3_text"}
_QK_NORM = {"qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text", "gemma3",
            "gemma3_text", "qwen3_5", "qwen3_5_text"}
_OUTPUT_GATED_ATTENTION = {"qwen3_next"}
# Architectures whose attention projections always carry biases (GPT-2's Conv1D layers;
# GPT-NeoX's come from attention_bias, true by default: model_type_defaults.json)
_ATTENTION_BIAS = {"gpt2"}
# Architectures whose two-matrix MLP always carries biases (nn.Linear's, Conv1D's)
_MLP_BIAS = {"gptj", "gpt2", "gpt_neox"}
# Not read field by field: OPT (ffn_dim, a position table offset by 2, a projection when
# word_embed_proj_dim differs) and BLOOM (ALiBi, an FFN of 4 × hidden named by no field, an
# embedding LayerNorm); left out of the checked set so a readable one carries the caution
_UNCHECKED_UNGATED = {"opt", "bloom"}
# model_types whose layout ridgeline reads field by field and has checked against a real
# config's parameter count (the bundled ones, their multimodal and base variants, and the
# Llama-shaped families; GPT-2 small 124,439,808 and Pythia-160m 162,322,944, the published
# totals); any other is read as a decoder of the fields it has, with a caution
KNOWN_MODEL_TYPES = {
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next",
    "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "gemma2", "gemma3",
    "gemma3_text", "phi3", "deepseek_v3", "kimi_k2", "glm4_moe", "gpt_oss", "gptj", "falcon",
    "jamba", "nemotron_h", "llama4", "llama4_text", *(_UNGATED_MLP - _UNCHECKED_UNGATED),
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
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "bf16": "bf16",
           "fp16": "fp16", "fp32": "fp32", "half": "fp16", "float": "fp32"}


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


def _same_family(architecture: str, model_type: str) -> bool:
    """Whether an architecture's name is its model_type's, as transformers names its classes
    (Gemma3ForCausalLM for gemma3_text, GPTNeoXForCausalLM for gpt_neox, GPT2LMHeadModel
    for gpt2; not Qwen2MoeForCausalLM for qwen2)."""
    family = architecture.split("For", 1)[0].split("LMHead", 1)[0].replace("_", "").lower()
    return bool(family) and model_type.replace("_", "").lower().startswith(family)


@dataclass(frozen=True)
class MLA:
    """DeepSeek-style multi-head latent attention: one compressed latent per token is cached."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class RopeScaling:
    """config.json's rope_scaling: its type, factor and (YaRN, Llama 3) the positions it was
    trained at before the stretch. Engines read a serving context from it (served_positions)."""

    type: str
    factor: float
    original_positions: int | None


@dataclass(frozen=True)
class Attention:
    num_heads: int
    num_kv_heads: int
    head_dim: int  # per head, for Q and K
    v_head_dim: int
    qkv_bias: bool
    o_bias: bool
    qk_norm: bool
    output_gate: bool  # Qwen3-Next/3.5: q_proj also emits a sigmoid gate (2x width)
    sinks: bool  # gpt-oss: one learned sink logit per head
    mla: MLA | None

    @property
    def group_size(self) -> int:
        """Query heads per KV head (GQA group); MLA: every head reads the one latent."""
        return self.num_heads if self.mla else self.num_heads // self.num_kv_heads

    @property
    def kind(self) -> str:
        if self.mla:
            return "MLA"
        if self.num_kv_heads == 1:
            return "MQA"
        return "MHA" if self.num_kv_heads == self.num_heads else "GQA"


@dataclass(frozen=True)
class LinearAttention:
    """Gated DeltaNet (Qwen3-Next, Qwen3.5/3.6): a constant-size state per sequence."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim


@dataclass(frozen=True)
class Mamba:
    """Mamba (v1, Jamba) or Mamba-2 (Nemotron-H) mixer: conv state + SSM state per sequence."""

    version: int
    d_inner: int
    d_state: int
    conv_kernel: int
    num_heads: int  # Mamba-2 heads; 0 for v1
    head_dim: int
    n_groups: int
    dt_rank: int  # v1 only
    conv_bias: bool
    proj_bias: bool


@dataclass(frozen=True)
class DenseMLP:
    intermediate_size: int
    gated: bool
    bias: bool


@dataclass(frozen=True)
class MoE:
    num_experts: int  # routed
    experts_per_token: int
    expert_intermediate_size: int
    num_shared_experts: int
    shared_intermediate_size: int  # per shared expert
    shared_gate: bool  # Qwen: sigmoid gate on the shared expert (hidden -> 1)
    expert_bias: bool  # gpt-oss experts carry biases
    router_bias: bool

    @property
    def routed_fraction(self) -> float:
        """Experts per token / routed experts: 8/256 = 0.031 for Qwen3.6-35B-A3B."""
        return self.experts_per_token / self.num_experts


VISION_BYTES_PER_PARAM = 2  # a vision tower stays at 16 bits


@dataclass(frozen=True)
class Layer:
    mixer: str  # full | sliding | chunked | linear | mamba | none
    ffn: str  # dense | moe | none
    window_tokens: int | None = None  # sliding window or attention chunk, in tokens


@dataclass(frozen=True)
class VisionItem:
    """One image of a fixed-size vision tower (Gemma-3's SigLIP at 896 px): the patches it
    runs through the tower and the tokens it gives the text model."""

    patches: int  # (image_size / patch_size)²: 4,096 for Gemma-3
    hidden_size: int  # the tower's width
    intermediate_size: int  # its MLP's
    tokens: int  # mm_tokens_per_image after pooling: 256 for Gemma-3


@dataclass(frozen=True)
class ModelSpec:
    name: str
    architecture: str
    model_type: str
    hidden_size: int
    vocab_size: int
    tie_word_embeddings: bool
    layers: tuple[Layer, ...]
    attention: Attention | None
    linear_attention: LinearAttention | None
    mamba: Mamba | None
    dense_mlp: DenseMLP | None
    moe: MoE | None
    layer_norm: bool  # LayerNorm (weight+bias) rather than RMSNorm
    norms_per_layer: int
    parallel_block: bool  # GPT-J/Falcon: attention and MLP share one input norm
    lm_head_bias: bool
    max_position_embeddings: int | None
    dtype: str  # checkpoint storage dtype: bf16, fp16, fp32
    state_dtype: str  # dtype of SSM / linear-attention recurrent state
    stored_formats: tuple[tuple[str, str], ...]  # (weight category, format id), as stored
    mtp_layers: int  # multi-token-prediction layers shipped beside the model, not counted
    # a multimodal checkpoint's vision tower and projector: loaded by a serving engine beside
    # the text model, never read by a text token (vision_params.py)
    vision_params: int = 0
    ssm_cache_dtype_named: bool = False  # the config names mamba_ssm_cache_dtype
    vision_item: VisionItem | None = None  # a fixed-size tower's image, as engines profile it
    rope_scaling: RopeScaling | None = None  # config.json's rope_scaling, where it has one
    learned_positions: int = 0  # GPT-2's wpe: rows of a learned position table (n_positions)

    def __hash__(self) -> int:
        # Cheap and consistent with equality (equal specs share these); the full field
        # hash walks every layer, and specs are dict keys in every cache of the cost model.
        return hash((self.name, self.num_layers, self.hidden_size, self.vocab_size))

    @property
    def stored_format_map(self) -> dict[str, str]:
        """{weight category: format id} for the categories the checkpoint quantizes."""
        return dict(self.stored_formats)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def architecture_caution(self) -> str:
        """A caution where the model_type is not one ridgeline knows, or where its
        architecture is not one a bundled config names (engines pick the implementation by
        architecture, ridgeline reads the layout by model_type), or ""."""
        if self.model_type in KNOWN_MODEL_TYPES:
            if self.architecture.endswith("ForConditionalGeneration") and not self.vision_params:
                return (f"{self.name} names the multimodal {self.architecture}, but its config "
                        "carries no vision_config: the vision tower a serving engine loads "
                        "and profiles beside the text model is not counted (a text-only "
                        "launch: vLLM's --language-model-only; else give the full config)")
            if not self.architecture or _same_family(self.architecture, self.model_type) \
                    or (self.model_type, self.architecture) in bundled_architectures():
                return ""
            return (f"{self.name} names architecture {self.architecture!r}, which no config "
                    f"ridgeline ships names: it is read as a {self.model_type} model, the "
                    "layout its model_type gives; an engine picks its implementation by "
                    "architecture, and may run it otherwise (or not at all)")
        kind = f"model_type {self.model_type!r}" if self.model_type else "no model_type"
        return (f"{self.name} has {kind}, which ridgeline has not checked: it is read as a "
                "decoder of the fields its config gives (RMSNorm, gated MLP), and a part "
                "those fields do not describe is not counted")

    @property
    def vision_tower_bytes(self) -> float:
        """The vision tower and projector a serving engine loads beside the text model, at the
        checkpoint's 16 bits (quantized checkpoints leave them out of their quantization)."""
        return self.vision_params * VISION_BYTES_PER_PARAM

    def count(self, mixer: str | None = None, ffn: str | None = None) -> int:
        """Layers of a kind: count(mixer="sliding"), count(ffn="moe")."""
        return sum(
            1 for layer in self.layers
            if (mixer is None or layer.mixer == mixer) and (ffn is None or layer.ffn == ffn)
        )

    @property
    def is_moe(self) -> bool:
        return self.moe is not None and self.count(ffn="moe") > 0

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any], name: str = "model") -> ModelSpec:
        """Build a spec from a parsed config.json; raise InputError naming what is wrong."""
        if not isinstance(config, Mapping):
            raise InputError(f"{name}: config must be a JSON object, got {type(config).__name__}")
        return _Reader(config, name).spec()


class _Reader:
    """Reads one config; nested ``text_config`` overrides the top level."""

    def __init__(self, config: Mapping[str, Any], name: str, defaults: bool = True,
                 decoder: bool = True) -> None:
        self.name = name
        self.raw = config
        merged: dict[str, Any] = {k: v for k, v in config.items() if k != "vision_config"}
        text = config.get("text_config")
        if text is not None:
            if not isinstance(text, Mapping):
                raise InputError(f"{name}: text_config must be a JSON object")
            merged.pop("text_config")
            outer_type = merged.get("model_type")
            merged.update(text)
            merged["outer_model_type"] = outer_type
        self.c = merged
        if decoder:  # model_type is a name, as every other field has its type
            for kind in (config.get("model_type"), merged.get("model_type")):
                if kind is not None and not isinstance(kind, str):
                    raise InputError(f"{name}: model_type must be a string, got "
                                     f"{shorten(repr(kind))}")
        self.model_type = str(self.c.get("model_type") or "")
        if decoder:  # a vision tower's config is an encoder's, read as one
            self._refuse_non_decoders(str(config.get("model_type") or ""))
        for key, value in (model_type_defaults(self.model_type) if defaults else {}).items():
            self.c.setdefault(key, value)

    def _refuse_non_decoders(self, outer_type: str) -> None:
        """An encoder, an encoder-decoder or a pure recurrent model is not a decoder LLM
        with a KV cache growing a token at a time: refused, by name, not read as one."""
        kinds = {t.replace("-", "_") for t in (self.model_type, outer_type) if t}
        architecture = ""
        if not kinds:  # no model_type: transformers' class name starts with it (BertForMaskedLM)
            architecture = _first(self.c.get("architectures")) or ""
            kinds = _types_named_by(architecture)
        if self.c.get("is_encoder_decoder") is True or kinds & ENCODER_DECODER_TYPES:
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
        raise InputError(f"{self.name}: {named} is {what}"
                         + ("" if "recurrent" in what else
                            ", not a decoder-only LLM, which is what ridgeline sizes"))

    # -- typed field access -------------------------------------------------------------
    def int_(self, *keys: str, default: int | None = None, minimum: int = 1,
             maximum: int = MAX_FIELD) -> int:
        for key in keys:
            value = self.c.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                isinstance(value, float) and (not math.isfinite(value) or value != int(value))
            ):
                raise InputError(f"{self.name}: {key} must be a whole number, got "
                                 f"{shorten(repr(value))}")
            if value < minimum:
                raise InputError(f"{self.name}: {key} must be at least {minimum}, got "
                                 f"{shorten(repr(value))}")
            if value > maximum:
                raise InputError(f"{self.name}: {key} must be at most {maximum:,}, got "
                                 f"{shorten(repr(value))}")
            return int(value)
        if default is None:
            raise InputError(f"{self.name}: config has no {' or '.join(keys)}")
        return default

    def opt_int(self, *keys: str, minimum: int = 1) -> int | None:
        if all(self.c.get(key) is None for key in keys):
            return None
        return self.int_(*keys, minimum=minimum)

    def bool_(self, key: str, default: bool = False) -> bool:
        value = self.c.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InputError(f"{self.name}: {key} must be true or false, got {value!r}")
        return value

    # -- the spec -----------------------------------------------------------------------
    def spec(self) -> ModelSpec:
        hidden = self.int_("hidden_size", "n_embd", "d_model")
        num_layers = self.int_("num_hidden_layers", "n_layer", "num_layers", maximum=MAX_LAYERS)
        vocab = self.int_("vocab_size", "padded_vocab_size")
        mixers = self._mixers(num_layers)
        ffns = self._ffns(num_layers, mixers)
        windows = self._windows(mixers)
        layers = tuple(Layer(m, f, w) for m, f, w in zip(mixers, ffns, windows, strict=False))
        needs_attention = any(m not in (LINEAR, MAMBA, NONE) for m in mixers)
        attention = self._attention(hidden) if needs_attention else None
        moe = self._moe() if MOE in ffns else None
        dense = self._dense_mlp(hidden) if "dense" in ffns else None
        dtype_raw = self.c.get("torch_dtype") or self.c.get("dtype") or "bfloat16"
        if str(dtype_raw).removeprefix("torch.") not in _DTYPES:
            raise InputError(f"{self.name}: torch_dtype {dtype_raw!r} is not a dtype a checkpoint "
                             f"is stored in ({', '.join(sorted(set(_DTYPES)))})")
        dtype_raw = str(dtype_raw).removeprefix("torch.")
        dtype = _DTYPES[dtype_raw]
        cache_named = self.c.get("mamba_ssm_cache_dtype")
        state_named = cache_named or self.c.get("mamba_ssm_dtype")
        state_dtype = _DTYPES.get(str(state_named or dtype_raw), dtype)
        return ModelSpec(
            name=self.name,
            architecture=_first(self.c.get("architectures")) or self.model_type,
            model_type=self.model_type,
            hidden_size=hidden,
            vocab_size=vocab,
            tie_word_embeddings=self._tied(),
            layers=layers,
            attention=attention,
            linear_attention=self._linear_attention() if LINEAR in mixers else None,
            mamba=self._mamba(hidden) if MAMBA in mixers else None,
            dense_mlp=dense,
            moe=moe,
            layer_norm=self.model_type in _LAYER_NORM,
            norms_per_layer=self._norms_per_layer(),
            parallel_block=self.model_type in ("gptj", "falcon") or self.bool_("parallel_attn"),
            lm_head_bias=self.model_type == "gptj",
            max_position_embeddings=self.opt_int(
                "max_position_embeddings", "n_positions", "max_sequence_length"
            ),
            rope_scaling=self._rope_scaling(),
            dtype=dtype,
            state_dtype=state_dtype,
            ssm_cache_dtype_named=str(cache_named) in _DTYPES,
            stored_formats=tuple(
                sorted(stored_formats(self.c.get("quantization_config"), self.name).items())
            ),
            mtp_layers=self.int_(
                "num_nextn_predict_layers", "mtp_num_hidden_layers", default=0, minimum=0
            ),
            vision_params=self.vision_params(hidden),
            vision_item=self.vision_item(),
            learned_positions=self.int_("n_positions", "max_position_embeddings")
            if self.model_type == "gpt2" else 0,
        )

    def vision_item(self) -> VisionItem | None:
        """The image a serving engine profiles the tower with: a fixed-size tower's
        (vision_config's image_size and patch_size, the top-level mm_tokens_per_image), or,
        for a tower that takes any size (Qwen's), the processor's largest image
        (model_type_defaults.json vision_max_pixels, over (patch × spatial merge)² pixels a
        token); None without a tower, or for one whose largest image is not known."""
        vision, tokens = self.raw.get("vision_config"), self.raw.get("mm_tokens_per_image")
        if not isinstance(vision, Mapping):
            return None
        v = _Reader(vision, f"{self.name} vision_config", defaults=False, decoder=False)
        outer = self.raw.get("model_type")  # the multimodal wrapper's, not its text model's
        max_pixels = model_type_defaults(str(outer or self.model_type)).get("vision_max_pixels")
        try:
            if isinstance(tokens, int) and tokens >= 1:
                side = v.int_("image_size") // v.int_("patch_size")
                patches = side * side
            elif isinstance(max_pixels, int):
                merge = v.int_("spatial_merge_size")
                tokens = max_pixels // (v.int_("patch_size") * merge) ** 2
                patches = tokens * merge * merge
            else:
                return None
            return VisionItem(patches, v.int_("hidden_size"), v.int_("intermediate_size"),
                              tokens)
        except InputError:
            return None

    def vision_params(self, text_hidden: int) -> int:
        """The vision tower's parameters, from vision_config (0 without one)."""
        vision = self.raw.get("vision_config")
        if vision is None:
            return 0
        if not isinstance(vision, Mapping):
            raise InputError(f"{self.name}: vision_config must be a JSON object")
        try:
            return vit_params(_Reader(vision, f"{self.name} vision_config", defaults=False,
                                      decoder=False),
                              text_hidden)
        except InputError:  # a tower described in a layout not read here: left uncounted
            return 0

    def _tied(self) -> bool:
        default = self.model_type in ("gemma2", "gemma3", "gemma3_text", "falcon", "gpt2")
        return self.bool_("tie_word_embeddings", default)

    def _norms_per_layer(self) -> int:
        if self.model_type in _FOUR_NORMS:
            return 4
        if self.model_type == "nemotron_h" or self.model_type in ("gptj", "falcon"):
            return 1
        return 2

    def _mixers(self, num_layers: int) -> list[str]:
        mixers = mixer_kinds(self.c, self.model_type, num_layers, self.name)
        if len(mixers) != num_layers:
            raise InputError(
                f"{self.name}: the layer pattern describes {len(mixers)} layers "
                f"but num_hidden_layers is {num_layers}"
            )
        return mixers

    def _ffns(self, num_layers: int, mixers: list[str]) -> list[str]:
        return ffn_kinds(self.c, self.model_type, num_layers, mixers, self.name)

    def _windows(self, mixers: list[str]) -> list[int | None]:
        windows: list[int | None] = []
        for mixer in mixers:
            if mixer == SLIDING:
                windows.append(self.int_("sliding_window", "sliding_window_size"))
            elif mixer == CHUNKED:
                windows.append(self.int_("attention_chunk_size"))
            else:
                windows.append(None)
        return windows

    def _attention(self, hidden: int) -> Attention:
        heads = self.int_("num_attention_heads", "n_head", "num_heads")
        if self.model_type == "falcon" and self.c.get("num_kv_heads") is None:
            multi_query = self.bool_("multi_query", True)
            new_arch = self.bool_("new_decoder_architecture")
            kv_heads = 1 if multi_query and not new_arch else heads
        else:
            kv_heads = self.int_("num_key_value_heads", "num_kv_heads", "n_head_kv", default=heads)
        if kv_heads > heads:
            raise InputError(f"{self.name}: num_key_value_heads ({kv_heads}) exceeds "
                             f"num_attention_heads ({heads}): each KV head serves one or more "
                             "query heads")
        if heads % kv_heads:
            raise InputError(
                f"{self.name}: num_attention_heads ({heads}) is not a multiple of "
                f"num_key_value_heads ({kv_heads})"
            )
        mla = None
        if self.c.get("kv_lora_rank") is None and "qk_rope_head_dim" in self.c:
            # DeepSeek's attention without the latent: heads of qk_nope + qk_rope dimensions
            # for K and v_head_dim for V, not hidden ÷ heads; not modelled
            raise InputError(f"{self.name}: kv_lora_rank is missing or null, but the config "
                             "has qk_rope_head_dim: DeepSeek's attention without its latent KV "
                             "(MLA) is not modelled; give kv_lora_rank")
        if self.c.get("kv_lora_rank") is not None:
            mla = MLA(
                q_lora_rank=self.opt_int("q_lora_rank"),
                kv_lora_rank=self.int_("kv_lora_rank"),
                qk_nope_head_dim=self.int_("qk_nope_head_dim"),
                qk_rope_head_dim=self.int_("qk_rope_head_dim"),
                v_head_dim=self.int_("v_head_dim"),
            )
        default_head = hidden // heads
        if mla is None and hidden % heads and self.c.get("head_dim") is None:
            raise InputError(
                f"{self.name}: hidden_size ({hidden}) is not a multiple of "
                f"num_attention_heads ({heads}) and head_dim is not given"
            )
        head_dim = (
            mla.qk_nope_head_dim + mla.qk_rope_head_dim
            if mla
            else self.int_("head_dim", "attention_head_dim", default=default_head)
        )
        bias = self.model_type in _ATTENTION_BIAS or self.bool_("attention_bias") \
            or self.bool_("bias")
        qkv_bias = bias or self.model_type == "qwen2"
        o_bias = bias and self.model_type not in ("glm4_moe", "qwen2")
        return Attention(
            num_heads=heads,
            num_kv_heads=heads if mla else kv_heads,
            head_dim=head_dim,
            v_head_dim=mla.v_head_dim if mla else head_dim,
            qkv_bias=qkv_bias,
            o_bias=o_bias,
            qk_norm=self.model_type in _QK_NORM or (self.bool_("use_qk_norm")
            and self.model_type not in ("llama4", "llama4_text")),  # Llama 4: weightless L2 norm
            output_gate=self.bool_("attn_output_gate", self.model_type in _OUTPUT_GATED_ATTENTION),
            sinks=self.model_type == "gpt_oss",
            mla=mla,
        )

    def _linear_attention(self) -> LinearAttention:
        key_heads = self.int_("linear_num_key_heads")
        value_heads = self.int_("linear_num_value_heads")
        if value_heads % key_heads:  # vLLM and transformers: num_v_heads // num_k_heads each
            raise InputError(f"{self.name}: linear_num_value_heads ({value_heads}) is not a "
                             f"multiple of linear_num_key_heads ({key_heads}): each key head "
                             "serves a whole number of value heads")
        return LinearAttention(
            num_key_heads=key_heads,
            num_value_heads=value_heads,
            key_head_dim=self.int_("linear_key_head_dim"),
            value_head_dim=self.int_("linear_value_head_dim"),
            conv_kernel=self.int_("linear_conv_kernel_dim", default=4),
        )

    def _mamba(self, hidden: int) -> Mamba:
        if self.c.get("mamba_num_heads") is not None:  # Mamba-2 (Nemotron-H)
            heads = self.int_("mamba_num_heads")
            head_dim = self.int_("mamba_head_dim")
            groups = self.int_("n_groups", default=1)
            if heads % groups:  # each group's B and C serve heads ÷ groups heads
                raise InputError(f"{self.name}: mamba_num_heads ({heads}) is not a multiple "
                                 f"of n_groups ({groups}): each group of B/C states serves a "
                                 "whole number of heads")
            return Mamba(
                version=2, d_inner=heads * head_dim, d_state=self.int_("ssm_state_size"),
                conv_kernel=self.int_("conv_kernel", default=4), num_heads=heads,
                head_dim=head_dim, n_groups=groups, dt_rank=0,
                conv_bias=self.bool_("use_conv_bias", True),
                proj_bias=self.bool_("mamba_proj_bias"),
            )
        expand = self.int_("mamba_expand", "expand", default=2)
        d_inner = expand * hidden
        dt_rank = self.c.get("mamba_dt_rank", "auto")
        return Mamba(
            version=1, d_inner=d_inner, d_state=self.int_("mamba_d_state", "state_size"),
            conv_kernel=self.int_("mamba_d_conv", "conv_kernel", default=4), num_heads=0,
            head_dim=0, n_groups=1,
            dt_rank=math.ceil(hidden / 16) if dt_rank == "auto" else self.int_("mamba_dt_rank"),
            conv_bias=self.bool_("mamba_conv_bias", True),
            proj_bias=self.bool_("mamba_proj_bias"),
        )

    def _dense_mlp(self, hidden: int) -> DenseMLP:
        if self.model_type in ("llama4", "llama4_text"):
            size = self.int_("intermediate_size_mlp")
        elif self.model_type in ("gptj", "falcon", "gpt2"):  # n_inner null: 4 × hidden
            size = self.int_("n_inner", "ffn_hidden_size", default=4 * hidden)
        else:
            size = self.int_("intermediate_size", "n_inner", "ffn_hidden_size")
        return DenseMLP(
            intermediate_size=size,
            gated=self.model_type not in _UNGATED_MLP,
            bias=self.model_type in _MLP_BIAS or self.bool_("mlp_bias"),
        )

    def _rope_scaling(self) -> RopeScaling | None:
        """rope_scaling, checked as the engines read it: a JSON object with a type (vLLM
        refuses one without), a positive factor (1 where absent), and YaRN's original
        positions as a whole number."""
        rs = self.c.get("rope_scaling")
        if rs is None:
            return None
        if not isinstance(rs, Mapping):
            raise InputError(f"{self.name}: rope_scaling must be a JSON object, got "
                             f"{shorten(repr(rs))}")
        kind = rs.get("rope_type", rs.get("type"))
        if not isinstance(kind, str) or not kind:
            raise InputError(f"{self.name}: rope_scaling has no type or rope_type")
        factor = rs.get("factor")
        if factor is None:
            factor = 1.0
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) \
                or not math.isfinite(factor) or factor <= 0:
            raise InputError(f"{self.name}: rope_scaling's factor must be a positive number, "
                             f"got {shorten(repr(factor))}")
        original = _Reader({"original_max_position_embeddings":
                            rs.get("original_max_position_embeddings")}, self.name,
                           defaults=False).opt_int("original_max_position_embeddings")
        if kind == "yarn" and original is None and self.c.get("max_position_embeddings") is None:
            raise InputError(f"{self.name}: rope_scaling yarn has no "
                             "original_max_position_embeddings")
        base = original or self.opt_int("max_position_embeddings") or 1
        if base * factor > MAX_FIELD:
            raise InputError(f"{self.name}: rope_scaling's factor {factor:g} stretches "
                             f"{base:,} positions past {MAX_FIELD:,}")
        return RopeScaling(kind, float(factor), original)

    def _moe(self) -> MoE:
        experts = self.int_("n_routed_experts", "num_local_experts", "num_experts")
        per_token = self.int_("num_experts_per_tok", "experts_per_token", "moe_topk")
        if per_token > experts:
            raise InputError(
                f"{self.name}: num_experts_per_tok ({per_token}) exceeds the {experts} experts"
            )
        if self.model_type in _OWN_EXPERT_WIDTH and self.c.get("moe_intermediate_size") is None:
            raise InputError(f"{self.name}: a {self.model_type} config sizes its experts by "
                             "moe_intermediate_size, and this one has none (its "
                             "intermediate_size is the dense layers' width)")
        expert_size = self.int_("moe_intermediate_size", "intermediate_size")
        shared_size = self.int_("shared_expert_intermediate_size", default=0, minimum=0)
        if shared_size:  # Qwen: one shared expert of its own width
            shared, per_shared = 1, shared_size
        elif self.model_type in ("llama4", "llama4_text"):
            shared, per_shared = 1, expert_size
        else:
            shared = self.int_("n_shared_experts", "num_shared_experts", default=0, minimum=0)
            per_shared = expert_size
        return MoE(
            num_experts=experts,
            experts_per_token=per_token,
            expert_intermediate_size=expert_size,
            num_shared_experts=shared,
            shared_intermediate_size=per_shared if shared else 0,
            shared_gate=bool(shared_size),
            expert_bias=self.model_type == "gpt_oss",
            # gpt-oss: router bias; DeepSeek-V3/Kimi-K2/GLM-4.5: e_score_correction_bias
            router_bias=self.model_type in ("gpt_oss", "glm4_moe")
            or self.c.get("topk_method") == "noaux_tc",
        )


# MoE configs whose experts have a width of their own, moe_intermediate_size, beside the dense
# layers' intermediate_size (transformers' Qwen2Moe/Qwen3Moe/Qwen3Next/Qwen3.5-MoE,
# DeepseekV2/V3, Glm4Moe config classes; Kimi-K2 ships DeepSeek-V3's). Mixtral, gpt-oss,
# Llama 4, Jamba and others size their experts by intermediate_size itself.
_OWN_EXPERT_WIDTH = frozenset({
    "qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_vl_moe",
    "qwen3_vl_moe_text", "deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe", "glm4v_moe"})


def _types_named_by(architecture: str) -> set[str]:
    """The refused model_types a transformers class name starts with, for a config without
    model_type: "BertForMaskedLM" → {"bert"}, "XLMRobertaModel" → {"xlm_roberta"}; a
    decoder's ("LlamaForCausalLM") → none."""
    stem = re.split(r"For[A-Z]|Model$|Encoder", architecture)[0].lower()
    return {t for t in ENCODER_TYPES | ENCODER_DECODER_TYPES | RECURRENT_TYPES
            if stem and t.replace("_", "") == stem}


def _first(value: Any) -> str | None:
    if isinstance(value, list) and value:
        return str(value[0])
    return None


def vit_params(v: _Reader, text_hidden: int) -> int:
    """A vision transformer's weights: per layer the attention (4 h² and biases), the MLP
    (2 h i and biases) and two LayerNorms; the patch embedding (channels × temporal patch ×
    patch² × h), the position table and a final LayerNorm; and the projector into the text
    model, through a spatial merge of m² patches where there is one (in = h m²: in² + in × out)
    or straight (h × out). Gemma-3's SigLIP: 423 M (the So400m tower, 428 M); Qwen3.5's: 447 M."""
    h = v.int_("embed_dim", "hidden_size")  # Qwen2-VL: embed_dim is the tower's width
    ratio = v.c.get("mlp_ratio")
    inner = v.int_("intermediate_size", default=int(h * ratio) if isinstance(
        ratio, (int, float)) and not isinstance(ratio, bool) and 0 < ratio < 64 else None)
    layers = v.int_("num_hidden_layers", "depth")
    patch = v.int_("patch_size")
    channels = v.int_("in_channels", "in_chans", "num_channels", default=3)
    temporal = v.int_("temporal_patch_size", default=1)
    image = v.opt_int("image_size")
    positions = v.int_("num_position_embeddings", default=(image // patch) ** 2 if image else 0,
                       minimum=0)
    merge = v.int_("spatial_merge_size", default=1)
    out = v.int_("out_hidden_size", default=text_hidden)
    per_layer = 4 * h * h + 4 * h + 2 * h * inner + inner + h + 4 * h
    embed = channels * temporal * patch * patch * h + h + positions * h + 2 * h
    width = h * merge * merge
    # straight: Gemma-3's RMSNorm (a weight, no bias) then h × out
    projector = (width * width + width + width * out + out) if merge > 1 else h * out + h
    return layers * per_layer + embed + projector


# rope types whose factor vLLM does not apply to max_position_embeddings (the config's
# positions already count the stretch): vLLM's _get_and_verify_max_len
_VLLM_UNSCALED_ROPE = ("su", "longrope", "llama3")


def _served(spec: ModelSpec, engine: str) -> tuple[int | None, str]:
    """(served_positions, where it comes from for a message)."""
    raw, rs = spec.max_position_embeddings, spec.rope_scaling
    plain = (raw, "max_position_embeddings")
    # Gemma 3's 131,072 positions already count its linear ×8 (its card: a 128K context);
    # vLLM skips its factor by name, and ridgeline takes SGLang to serve the same context
    if rs is None or engine.startswith("llama.cpp") or "gemma3" in spec.architecture.lower():
        return plain
    if engine == "sglang":
        if raw is None or rs.original_positions is not None or rs.type == "llama3":
            return plain
        base, field = raw, "max_position_embeddings"
    elif rs.type in _VLLM_UNSCALED_ROPE:
        return plain
    elif rs.type == "yarn" and rs.original_positions:
        base, field = rs.original_positions, "original_max_position_embeddings"
    elif raw is None:
        return plain
    else:
        base, field = raw, "max_position_embeddings"
    served = int(base * rs.factor)
    if served == raw:
        return plain
    return served, f"{field} {base:,} × rope_scaling {rs.type} factor {rs.factor:g}"


def served_positions(spec: ModelSpec, engine: str) -> int | None:
    """The longest max_model_len an engine derives from the config (its default, and the
    most it accepts without an override), or None where the config states no positions.

    vLLM: with rope_scaling of a type other than su/longrope/llama3, max_position_embeddings
    × factor, and for YaRN original_max_position_embeddings × factor (vllm/config.py
    _get_and_verify_max_len), so a Qwen3 config given Qwen's YaRN block (factor 4, original
    32,768) serves 131,072; TensorRT-LLM is taken to read it as vLLM does (not checked).
    SGLang (hf_transformers_utils.get_context_length): × factor, unless the block states
    original_max_position_embeddings or is llama3 — Qwen3 with YaRN stays at 40,960 there
    until --context-length. llama.cpp: n_ctx_train, the config's own positions."""
    return _served(spec, engine)[0]


def positions_label(spec: ModelSpec, engine: str) -> str:
    """Where served_positions' number comes from, for a message."""
    return _served(spec, engine)[1]


def trained_context_caution(model: str, limit: int | None, tokens: int,
                            label: str = "max_position_embeddings") -> str:
    """``tokens`` past ``limit`` (max_position_embeddings, or what ``label`` names), or ""."""
    if not limit or tokens <= limit:
        return ""
    return (f"{tokens:,} tokens exceed {model}'s {limit:,}-token context "
            f"({label}): engines refuse a longer max_model_len, and the model "
            "was not trained for it")
