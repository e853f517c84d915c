"""ModelSpec: what the arithmetic needs from a Hugging Face ``config.json``.

The spec's parts: the geometry of attention (MHA, GQA, MQA, MLA), the kind of every layer
(full, sliding-window, chunked, linear-attention, Mamba), the MoE layout and the stored weight
format. Frozen records with derived properties; ``ModelSpec.from_hf_config(dict)`` builds
one (the reading is ``config_reader.py``), ``catalog.py`` reads the files. Parameter counts
live in ``params.py``, KV bytes in ``kvcache.py``, the context an engine serves in
``context_length.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ridgeline.model_types import KNOWN_MODEL_TYPES, bundled_architectures, same_family


@dataclass(frozen=True)
class MLA:
    """DeepSeek-style multi-head latent attention: one compressed latent per token is cached."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    # False: the weights are MLA's but each head's decompressed K (qk_nope + qk_rope) and V
    # are cached, as llama.cpp runs a DeepSeek GGUF written without key_length_mla (before
    # its MLA cache, ggml-org/llama.cpp#12801; gguf_model._deepseek_fields)
    latent_cached: bool = True
    # True: cached per head as vLLM before its MLA cache (0.7.1) runs it, each V padded to K's
    # width in the Attention's v_head_dim (vllm_mla_cache.per_head_model), which a later
    # release's deployment of it undoes (vllm_mla_cache.vllm_cache_model)
    vllm_heads: bool = False
    # DeepSeek Sparse Attention (DeepSeek-V3.2): the tokens its indexer keeps for each query;
    # vLLM runs such a model on its sparse MLA backends, as it tells one by this field
    # (is_v32 = hasattr(hf_config, "index_topk"), vllm/model_executor/models/config.py)
    index_topk: int | None = None
    # its indexer's key width (config.json index_head_dim: 128 for DeepSeek-V3.2), whose keys
    # are cached beside the latent for every token (kvcache.indexer_key_bytes)
    index_head_dim: int | None = None
    # its indexer's query heads (config.json index_n_heads: 64 for DeepSeek-V3.2), which score
    # every cached key (params.indexer_params, sparse_attention.indexer_flops_per_pair)
    index_n_heads: int | None = None


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
    # Cohere (Command R+): the q and k norms weigh each head apart, (heads + KV heads) ×
    # head_dim weights, where the others share one head_dim vector each
    qk_norm_per_head: bool = False

    @property
    def cached_latent(self) -> MLA | None:
        """The MLA whose one latent per token is what the cache holds; None where each KV
        head's K and V are cached (no MLA, or MLA cached per head: MLA.latent_cached)."""
        return self.mla if self.mla is not None and self.mla.latent_cached else None

    @property
    def group_size(self) -> int:
        """Query heads per KV head (GQA group); MLA: every head reads the one latent."""
        return self.num_heads if self.cached_latent else self.num_heads // self.num_kv_heads

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
    """Mamba (v1, Jamba) or Mamba-2 (Nemotron-H, Granite-4.0-H, Falcon-H1) mixer: conv state +
    SSM state per sequence."""

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
    # Mamba-2's gated RMSNorm over d_inner before out_proj: Nemotron-H's and Granite-4.0-H's
    # always; Falcon-H1's where its config sets mamba_rms_norm (FalconH1Config: False)
    gated_norm: bool = True


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
class VisionConfig:
    """The depth and width a multimodal config's vision_config names under the usual keys,
    num_hidden_layers and hidden_size (None where it names neither: Qwen's towers give
    depth), as an engine reads them off the config: Gemma-3's SigLIP, 27 and 1,152."""

    num_hidden_layers: int | None
    hidden_size: int | None


@dataclass(frozen=True)
class ModelSpec:
    """A model as its config.json describes it (``from_hf_config``; ``resolve_model`` reads a
    catalog alias, a Hugging Face id or a path): its layers, attention geometry, MoE and
    stored weight formats, no weights. Llama-3.1-8B reads as 32 layers of width 4,096, GQA
    with 32 query heads over 8 KV heads of 128, and 131,072 positions; params.count_params
    gives it 8.03 B parameters, the embedding and the untied LM head 0.53 B each."""

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
    parallel_block: bool  # GPT-J/Falcon/Cohere/Cohere2: attention and MLP share one input norm
    lm_head_bias: bool
    max_position_embeddings: int | None
    dtype: str  # checkpoint storage dtype: bf16, fp16, fp32
    state_dtype: str  # dtype of SSM / linear-attention recurrent state
    stored_formats: tuple[tuple[str, str], ...]  # (weight category, format id), as stored
    mtp_layers: int  # multi-token-prediction layers shipped beside the model, not counted
    # a multimodal checkpoint's vision tower and projector: loaded by a serving engine beside
    # the text model, never read by a text token (vision_tower.py)
    vision_params: int = 0
    vision_config: VisionConfig | None = None  # None: the config has no vision_config
    ssm_cache_dtype_named: bool = False  # the config names mamba_ssm_cache_dtype
    vision_item: VisionItem | None = None  # a fixed-size tower's image, as engines profile it
    rope_scaling: RopeScaling | None = None  # config.json's rope_scaling, where it has one
    learned_positions: int = 0  # GPT-2's wpe: rows of a learned position table (n_positions)
    # config.json's model_max_length, where it states one: Command R's 131,072 beside its
    # 8,192 max_position_embeddings, the context engines serve it at (context_length.py)
    model_max_length: int | None = None
    # quantization_config's quant_method ("" unquantized): what vLLM and SGLang match a
    # --quantization METHOD against (engine_quantization.quantized_weights)
    quant_method: str = ""
    # its quant_algo ("" where none): ModelOpt's FP8, NVFP4 or MIXED_PRECISION, which the
    # engines serve as modelopt, modelopt_fp4 or modelopt_mixed
    quant_algo: str = ""
    # (engine, KV dtype) for each engine whose default KV dtype follows the quantization_config
    # and finds a cache in it: vLLM's, SGLang's and TensorRT-LLM's auto, each read its own way
    # (checkpoint_kv.engine_checkpoint_kv)
    engine_kv_cache_dtypes: tuple[tuple[str, str], ...] = ()
    # the file the quantization_config was read from where config.json has none: ModelOpt's
    # hf_quant_config.json beside it, as the engines read it then (modelopt_sidecar.py); ""
    # where it is config.json's own, or there is none
    quantization_file: str = ""
    # (weight category, layer indices) a checkpoint keeps at its dtype in a category it
    # otherwise quantizes, its exclusions naming some layers only (DeepSeek's and GLM's first
    # dense layers in bf16): precision.weight_plan sizes those layers' share at the dtype
    unquantized_layers: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # a sliding_window at or past the model's longest context, which no sequence fills, and
    # the layers it named: read as full attention (Phi-4-mini's 262,144 over its 131,072
    # positions; config_reader._unfilled_window), 0 and () where none
    unfilled_window_tokens: int = 0
    unfilled_window_layers: tuple[int, ...] = ()
    # the config's keys that may size something and that no reader looked up
    # (config_fields.sizing_looking): named in the caution for a model_type not checked
    unread_keys: tuple[str, ...] = ()
    # whether config.json lists any architectures: where it does not, ``architecture`` holds
    # the model_type, and an engine has no class name to pick its implementation by
    architectures_named: bool = True
    # a parallel hybrid (Falcon-H1, model_types.PARALLEL_HYBRID): ``layers`` lists each decoder
    # layer as two blocks, attention with the MLP and then Mamba-2, so num_layers is twice the
    # config's num_hidden_layers (decoder_layers)
    parallel_hybrid: bool = False

    @property
    def kv_cache_dtype(self) -> str:
        """The KV cache vLLM's --kv-cache-dtype auto serves for this checkpoint ('fp8': ModelOpt's
        kv_cache_quant_algo FP8, a compressed-tensors kv_cache_scheme; '' none:
        checkpoint_kv.checkpoint_kv_dtype)."""
        return dict(self.engine_kv_cache_dtypes).get("vllm", "")

    def __repr__(self) -> str:
        """The headline, not the layers one by one: ModelSpec(name='llama-3.1-8b',
        architecture='LlamaForCausalLM', num_layers=32, hidden_size=4096, …)."""
        attention = self.attention.kind if self.attention is not None else None
        return (f"ModelSpec(name={self.name!r}, architecture={self.architecture!r}, "
                f"model_type={self.model_type!r}, num_layers={self.num_layers}, "
                f"hidden_size={self.hidden_size}, attention={attention!r}, "
                f"is_moe={self.is_moe}, max_position_embeddings="
                f"{self.max_position_embeddings}, dtype={self.dtype!r})")

    def __hash__(self) -> int:
        # Cheap and consistent with equality (equal specs share these); the full field
        # hash walks every layer, and specs are dict keys in every cache of the cost model.
        return hash((self.name, self.num_layers, self.hidden_size, self.vocab_size))

    @classmethod
    def from_hf_config(cls, config: Any, name: str = "model") -> ModelSpec:
        """The spec a Hugging Face config.json (already parsed) describes. config_reader.py
        does the reading; it builds this type, so it is imported here, when called: the one
        import from a spec module back to its reader, kept so the constructor lives on the
        type (STYLE.md); library code calls config_reader.spec_from_hf_config."""
        from ridgeline.config_reader import spec_from_hf_config
        return spec_from_hf_config(config, name)

    @property
    def stored_format_map(self) -> dict[str, str]:
        """{weight category: format id} for the categories the checkpoint quantizes."""
        return dict(self.stored_formats)

    @property
    def num_layers(self) -> int:
        """Blocks of one mixer each: a parallel hybrid's decoder layer counts two."""
        return len(self.layers)

    @property
    def decoder_layers(self) -> int:
        """The config's num_hidden_layers: Falcon-H1-7B's 44, which num_layers lists as 88
        blocks (44 attention with the MLP, 44 Mamba-2)."""
        return self.num_layers // 2 if self.parallel_hybrid else self.num_layers

    @property
    def architecture_caution(self) -> str:
        """A caution where the model_type is not one ridgeline knows, where the config lists
        no architectures, or where its architecture is not one a bundled config names
        (engines pick the implementation by architecture, ridgeline reads the layout by
        model_type), or ""."""
        if self.model_type in KNOWN_MODEL_TYPES:
            if not self.architectures_named:
                # vLLM 0.34 (transformers_utils/config.py get_config) fills an empty list
                # with transformers' base class for the model_type (LlamaModel, which its
                # registry serves as an embedding model), or warns that it expects
                # --hf-overrides '{"architectures": [...]}'
                return (f"{self.name}'s config lists no architectures: it is priced as a "
                        f"{self.model_type} model, the layout its model_type gives; an engine "
                        "picks its implementation by architecture (vLLM fills in the base "
                        "class or asks for --hf-overrides), so name the one it is served as")
            if self.architecture.endswith("ForConditionalGeneration") and not self.vision_params:
                return (f"{self.name} names the multimodal {self.architecture}, but its config "
                        "carries no vision_config: the vision tower a serving engine loads "
                        "and profiles beside the text model is not counted (a text-only "
                        "launch: vLLM's --language-model-only; else give the full config)")
            if not self.architecture or same_family(self.architecture, self.model_type) \
                    or (self.model_type, self.architecture) in bundled_architectures():
                return ""
            return (f"{self.name} names architecture {self.architecture!r}, which no config "
                    f"ridgeline ships names: it is read as a {self.model_type} model, the "
                    "layout its model_type gives; an engine picks its implementation by "
                    "architecture, and may run it otherwise (or not at all)")
        kind = f"model_type {self.model_type!r}" if self.model_type else "no model_type"
        named = "" if self.architectures_named else " and lists no architectures"
        return (f"{self.name} has {kind}{named}, which ridgeline has not checked: it is priced "
                f"from its config's fields as {self.read_as}; " + (
                    f"it leaves unread {_listed(self.unread_keys)}, and any part "
                    f"{'they describe' if len(self.unread_keys) > 1 else 'it describes'} is "
                    "not counted" if self.unread_keys else
                    "a part those fields do not describe (MoE, MLA, windowed or recurrent "
                    "layers its model_type alone would name) is not counted"))

    @property
    def unfilled_window_note(self) -> str:
        """What became of a sliding_window no context fills, or "": Phi-4-mini's 262,144 over
        its 131,072 positions, its 32 layers priced as full attention."""
        if not self.unfilled_window_tokens:
            return ""
        n = len(self.unfilled_window_layers)
        positions = self.max_position_embeddings or 0
        layers = f"{n} windowed layers are" if n != 1 else "1 windowed layer is"
        return (f"{self.name}'s sliding_window {self.unfilled_window_tokens:,} is at or past "
                f"its {positions:,} positions, so no window ever fills: its {layers} priced "
                "as full attention, every token kept (llama.cpp turned the Phi family's "
                "windows off for such a window, ggml-org/llama.cpp#13676); vLLM still pages "
                "them as a window group, which holds every token of a request and a block more")

    @property
    def read_as(self) -> str:
        """The decoder this spec prices, in words: Llama-3.1-8B's config reads as "a dense
        decoder of 32 layers of width 4,096, 32 query heads over 8 KV heads of 128, RMSNorm,
        a gated MLP of 14,336"."""
        kind = "an MoE" if self.is_moe else "a dense"
        parts = [f"{kind} decoder of {self.num_layers:,} layers of width {self.hidden_size:,}"
                 if not self.parallel_hybrid else
                 f"{kind} decoder of {self.decoder_layers:,} layers of width "
                 f"{self.hidden_size:,}, each attention beside Mamba-2"]
        a = self.attention
        if a is not None:
            parts.append(f"MLA over {a.num_heads} heads" if a.mla else
                         f"{a.num_heads} query heads over {a.num_kv_heads} KV heads of "
                         f"{a.head_dim}")
        windowed = self.count(mixer="sliding") + self.count(mixer="chunked")
        if windowed:
            parts.append(f"{windowed} windowed layers")
        parts.append("LayerNorm" if self.layer_norm else "RMSNorm")
        if self.moe is not None and self.is_moe:
            parts.append(f"{self.moe.num_experts} experts, {self.moe.experts_per_token} a token")
        if self.dense_mlp is not None and self.count(ffn="dense"):
            gated = "gated" if self.dense_mlp.gated else "two-matrix"
            parts.append(f"a {gated} MLP of {self.dense_mlp.intermediate_size:,}")
        return ", ".join(parts)

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


# the unread keys a caution names before it counts the rest
_LISTED_KEYS = 6


def _listed(keys: tuple[str, ...]) -> str:
    """The first few of ``keys``, then a count: Falcon-H1's nine mamba_* keys as "its
    config's keys mamba_d_conv, mamba_d_head, …, mamba_n_groups and 3 more"."""
    shown = list(keys[:_LISTED_KEYS])
    more = len(keys) - len(shown)
    if more:
        shown.append(f"{more} more")
    words = shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"
    return f"its config's key{'s' if len(keys) > 1 else ''} {words}"
