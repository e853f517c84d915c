"""A Hugging Face ``config.json`` read into a ModelSpec: ``spec_from_hf_config(dict)``.

It reads the geometry of attention (MHA, GQA, MQA, MLA), the kind of every layer (full,
sliding-window, chunked, linear-attention, Mamba; ``layouts.py``), the MoE layout, the stored
weight format (``quantization.py``) and the vision tower (``vision_tower.py``), each field
through ``config_fields.py``, and refuses a config it cannot read in one line. It does no
I/O; ``catalog.py`` reads files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ridgeline.checkpoint_kv import engine_checkpoint_kv
from ridgeline.config_fields import MAX_FIELD, ConfigFields
from ridgeline.datafiles import model_type_defaults
from ridgeline.errors import InputError, shorten
from ridgeline.layouts import (
    CHUNKED,
    ERNIE_MOE_TYPES,
    FULL,
    HUNYUAN_TYPES,
    LINEAR,
    MAMBA,
    MOE,
    NONE,
    SLIDING,
    ffn_kinds,
    mixer_kinds,
    uniform_moe_lists,
)
from ridgeline.model import (
    MLA,
    Attention,
    DenseMLP,
    Layer,
    LinearAttention,
    Mamba,
    ModelSpec,
    MoE,
    RopeScaling,
)
from ridgeline.model_types import (
    ATTENTION_BIAS,
    FOUR_NORMS,
    LAYER_NORM,
    LEARNED_POSITIONS,
    MLP_BIAS,
    OUTPUT_GATED_ATTENTION,
    OWN_EXPERT_WIDTH,
    PARALLEL_BLOCK,
    PARALLEL_HYBRID,
    PER_HEAD_QK_NORM,
    QK_NORM,
    UNGATED_MLP,
    first_architecture,
)
from ridgeline.params import layers_share
from ridgeline.quantization import checkpoint_algo, checkpoint_method, stored_layout
from ridgeline.units import plural
from ridgeline.vision_tower import vision_config, vision_item, vision_params

# Granite MoE families whose shared_mlp is the whole FFN where they route to no experts
GRANITE_SHARED_MLP = frozenset({"granitemoehybrid", "granitemoeshared"})
# Far above any real model (Llama-3.1-405B has 126 layers); a config that claims more is
# malformed, and building its layer list would exhaust memory.
MAX_LAYERS = 10_000
# torch_dtype's spellings (torch. prefix dropped), each with the dtype id it names
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "bf16": "bf16",
           "fp16": "fp16", "fp32": "fp32", "half": "fp16", "float": "fp32"}
# rope_scaling types an engine builds a rotary embedding for: vLLM's get_rope
# (model_executor/layers/rotary_embedding/__init__.py; any other is "Unknown RoPE scaling
# type"), with the legacy su and mrope its config patch renames (longrope, default)
ROPE_TYPES = ("default", "linear", "dynamic", "ntk", "yarn", "deepseek_yarn",
              "deepseek_llama_scaling", "longrope", "llama3", "mllama4", "xdrope", "openpangu",
              "su", "mrope")


def spec_from_hf_config(config: Mapping[str, Any], name: str = "model") -> ModelSpec:
    """Build a spec from a parsed config.json; raise InputError naming what is wrong."""
    if not isinstance(config, Mapping):
        raise InputError(f"{name}: config must be a JSON object, got {type(config).__name__}")
    other = _other_checkpoint_file(config)
    if other:
        raise InputError(f"{name}: this is {other}, not the model's config.json (it has no "
                         "hidden_size or num_hidden_layers)")
    return _SpecReader(config, name).spec()


# The other JSON files of a Hugging Face checkpoint, by a key each alone writes
_OTHER_FILES = (("weight_map", "a safetensors index (model.safetensors.index.json)"),
                ("added_tokens", "a tokenizer (tokenizer.json)"),
                ("tokenizer_class", "a tokenizer's settings (tokenizer_config.json)"),
                ("peft_type", "a LoRA adapter's settings (adapter_config.json)"),
                ("image_processor_type", "an image processor's settings "
                                         "(preprocessor_config.json)"),
                ("do_sample", "the sampling defaults (generation_config.json)"),
                ("memory_bandwidth_bytes_per_s", "an accelerator record (--gpu-file takes it)"))


def _with_stored_layout(spec: ModelSpec, qc: Any) -> ModelSpec:
    """``spec`` with the formats its quantization_config stores each category in: one its
    exclusions name in every layer that holds it (DeepSeek's MLP, only in its 3 dense
    layers, named in all 3) stays at the dtype; one they name in some of its layers keeps
    its format, and those layers go to unquantized_layers."""
    formats, named = stored_layout(qc, spec.name, spec.num_layers)
    kept = {c: f for c, f in formats.items() if layers_share(spec, c, named.get(c, ())) < 1}
    partly = tuple((c, tuple(sorted(named[c]))) for c in sorted(kept)
                   if c in named and layers_share(spec, c, named[c]) > 0)
    return replace(spec, stored_formats=tuple(sorted(kept.items())), unquantized_layers=partly)


def _other_checkpoint_file(config: Mapping[str, Any]) -> str:
    """What another file of the checkpoint handed in as its config.json is, or "": only
    where the JSON names no model geometry at all (no text_config either)."""
    if any(k in config for k in ("hidden_size", "n_embd", "d_model", "num_hidden_layers",
                                 "n_layer", "num_layers", "text_config")):
        return ""
    return next((what for key, what in _OTHER_FILES if key in config), "")


class _SpecReader(ConfigFields):
    """One config's fields, assembled into a ModelSpec."""

    def spec(self) -> ModelSpec:
        hidden = self.int_("hidden_size", "n_embd", "d_model")
        num_layers = self.int_("num_hidden_layers", "n_layer", "num_layers", maximum=MAX_LAYERS)
        vocab = self.int_("vocab_size", "padded_vocab_size")
        self.c.update(uniform_moe_lists(self.c, self.model_type, num_layers))
        self._refuse_cross_layer_attention()
        mixers = self._mixers(num_layers)
        ffns = self._ffns(num_layers, mixers)
        windows = self._windows(mixers)
        unfilled = self._unfilled_window(mixers, windows)
        unfilled_layers = tuple(i for i, m in enumerate(mixers) if m == SLIDING and unfilled)
        if unfilled:  # a window the context never fills: full attention (_unfilled_window)
            windows = [None if m == SLIDING else w for m, w in zip(mixers, windows, strict=True)]
            mixers = [FULL if m == SLIDING else m for m in mixers]
        layers = tuple(Layer(m, f, w) for m, f, w in zip(mixers, ffns, windows, strict=False))
        parallel = self.model_type in PARALLEL_HYBRID
        if parallel:
            layers = self._parallel_blocks(layers)
        mixers = [layer.mixer for layer in layers]
        needs_attention = any(m not in (LINEAR, MAMBA, NONE) for m in mixers)
        attention = self._attention(hidden) if needs_attention else None
        moe = self._moe() if MOE in ffns else None
        dense = self._dense_mlp(hidden) if "dense" in ffns else None
        # null is absent; 0, "", [] or {} is no dtype, not bf16 (``or`` took them for absent)
        dtype_raw = next((self.c[k] for k in ("torch_dtype", "dtype")
                          if self.c.get(k) is not None), "bfloat16")
        if not isinstance(dtype_raw, str) or dtype_raw.removeprefix("torch.") not in _DTYPES:
            raise InputError(f"{self.name}: torch_dtype {shorten(repr(dtype_raw))} is not a dtype "
                             f"a checkpoint is stored in ({', '.join(sorted(set(_DTYPES)))})")
        dtype_raw = dtype_raw.removeprefix("torch.")
        dtype = _DTYPES[dtype_raw]
        cache_named = self.c.get("mamba_ssm_cache_dtype")
        state_named = cache_named or self.c.get("mamba_ssm_dtype")
        state_dtype = _DTYPES.get(str(state_named or dtype_raw), dtype)
        spec = ModelSpec(
            name=self.name,
            architecture=first_architecture(self.c) or self.model_type,
            architectures_named=first_architecture(self.c) is not None,
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
            layer_norm=self.model_type in LAYER_NORM,
            norms_per_layer=self._norms_per_layer(),
            parallel_block=self.model_type in PARALLEL_BLOCK or self.bool_("parallel_attn"),
            lm_head_bias=self.model_type == "gptj",
            max_position_embeddings=self.opt_int(
                "max_position_embeddings", "n_positions", "max_sequence_length"
            ),
            rope_scaling=self._rope_scaling(),
            dtype=dtype,
            state_dtype=state_dtype,
            ssm_cache_dtype_named=str(cache_named) in _DTYPES,
            mtp_layers=self.int_(
                "num_nextn_predict_layers", "mtp_num_hidden_layers", default=0, minimum=0
            ),
            vision_params=vision_params(self, hidden),
            vision_config=vision_config(self),
            vision_item=vision_item(self),
            learned_positions=self.int_("n_positions", "max_position_embeddings")
            if self.model_type in LEARNED_POSITIONS else 0,
            model_max_length=self.opt_int("model_max_length"),
            unfilled_window_tokens=unfilled,
            unfilled_window_layers=unfilled_layers,
            quant_method=checkpoint_method(self.c.get("quantization_config")),
            quant_algo=checkpoint_algo(self.c.get("quantization_config")),
            engine_kv_cache_dtypes=engine_checkpoint_kv(self.c.get("quantization_config")),
            stored_formats=(),
            parallel_hybrid=parallel,
        )
        spec = _with_stored_layout(spec, self.c.get("quantization_config"))
        return replace(spec, unread_keys=self.unread())

    def _refuse_cross_layer_attention(self) -> None:
        """Hunyuan's use_cla: a layer of each cla_share_factor computes K and V and the rest
        reuse them (vLLM's hunyuan_v1.py HunYuanCrossAttention), fewer cached layers than
        ridgeline counts; refused where it shares (Hunyuan-A13B's use_cla is false)."""
        if self.model_type in HUNYUAN_TYPES and self.bool_("use_cla") \
                and self.int_("cla_share_factor", default=1) > 1:
            raise InputError(f"{self.name}: use_cla shares each layer's K and V with the next "
                             f"{self.int_('cla_share_factor') - 1} (cross-layer attention), "
                             "a cache ridgeline does not model")

    def _parallel_blocks(self, layers: tuple[Layer, ...]) -> tuple[Layer, ...]:
        """A parallel hybrid's layers as two blocks each: the layer's attention with its MLP,
        then a Mamba-2 block with no MLP (model_types.PARALLEL_HYBRID). Its one input norm and
        its pre-MLP norm are then one norm a block (_norms_per_layer). A config that names
        attention in some layers only (attn_layer_indices) is not read so: refused."""
        named = self.c.get("attn_layer_indices")
        if named not in (None, []):
            raise InputError(f"{self.name}: a {self.model_type} model runs attention beside "
                             "Mamba-2 in every layer; attn_layer_indices "
                             f"{shorten(repr(named))} is not read (give null)")
        mamba = Layer(MAMBA, NONE)
        return tuple(block for layer in layers for block in (layer, mamba))

    def _tied(self) -> bool:
        """tie_word_embeddings; where the config leaves it out or sets it to null, the
        family's transformers default (model_type_defaults.json: Gemma 2/3, Falcon, GPT-2,
        Cohere, Cohere2 tie), else untied (LlamaConfig's and most decoders' False)."""
        default = model_type_defaults(self.model_type).get("tie_word_embeddings", False)
        return self.bool_("tie_word_embeddings", default is True)

    def _norms_per_layer(self) -> int:
        if self.model_type in FOUR_NORMS:
            return 4
        if self.model_type == "nemotron_h" or self.model_type in PARALLEL_BLOCK \
                or self.model_type in PARALLEL_HYBRID:
            return 1
        return 2

    def _mixers(self, num_layers: int) -> list[str]:
        mixers = mixer_kinds(self.c, self.model_type, num_layers, self.name)
        if len(mixers) != num_layers:
            raise InputError(
                f"{self.name}: the layer pattern describes {len(mixers)} "
                f"{plural(len(mixers), 'layer')} "
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

    def _unfilled_window(self, mixers: list[str], windows: list[int | None]) -> int:
        """The sliding window no context of this model fills, or 0: one at or past the
        longest context the config gives (max_position_embeddings, model_max_length, either
        stretched by rope_scaling's factor). Phi-4-mini's sliding_window 262,144 against its
        131,072 positions: its layers attend to, and cache, every token, as full attention
        does (llama.cpp turned the Phi family's windows off for this, one "equal to the
        context size - so technically there is no SWA": ggml-org/llama.cpp#13676)."""
        sliding = {w for m, w in zip(mixers, windows, strict=True) if m == SLIDING and w}
        positions = self.opt_int("max_position_embeddings", "n_positions",
                                 "max_sequence_length")
        if len(sliding) != 1 or positions is None:
            return 0
        rope = self._rope_scaling()
        factor = max(1.0, rope.factor) if rope else 1.0
        longest = max(positions, self.opt_int("model_max_length") or 0,
                      int(max(positions, rope.original_positions or 0) * factor) if rope
                      else 0)
        window = sliding.pop()
        return window if window >= longest else 0

    def _attention(self, hidden: int) -> Attention:
        heads = self.int_("num_attention_heads", "n_head", "num_heads")
        if self.model_type == "falcon" and self.c.get("num_kv_heads") is None:
            multi_query = self.bool_("multi_query", True)
            new_arch = self.bool_("new_decoder_architecture")
            kv_heads = 1 if multi_query and not new_arch else heads
        elif self.model_type == "gpt_bigcode":  # StarCoder: one K/V head where multi_query
            # (vLLM's gpt_bigcode.py: total_num_kv_heads = 1; else one per query head)
            kv_heads = 1 if self.bool_("multi_query", True) else heads
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
                index_topk=self.opt_int("index_topk"),
                index_head_dim=self.opt_int("index_head_dim"),
                index_n_heads=self.opt_int("index_n_heads"),
            )
            missing = [key for key in ("index_n_heads", "index_head_dim")
                       if mla.index_topk is not None and getattr(mla, key) is None]
            if missing:  # vLLM's and SGLang's indexers read both from the config
                raise InputError(f"{self.name}: index_topk is given (DeepSeek Sparse Attention) "
                                 f"but {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'}"
                                 " not: its indexer's weights and cached keys cannot be sized; "
                                 "give both (DeepSeek-V3.2: index_n_heads 64, index_head_dim 128)")
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
        bias = self.model_type in ATTENTION_BIAS or self.bool_("attention_bias") \
            or self.bool_("bias")
        qkv_bias = bias or self.model_type == "qwen2" or self._ernie_bias()
        o_bias = bias and self.model_type not in ("glm4_moe", "qwen2")
        return Attention(
            num_heads=heads,
            num_kv_heads=heads if mla else kv_heads,
            head_dim=head_dim,
            v_head_dim=mla.v_head_dim if mla else head_dim,
            qkv_bias=qkv_bias,
            o_bias=o_bias,
            qk_norm=self.model_type in QK_NORM or (self.bool_("use_qk_norm")
            and self.model_type not in ("llama4", "llama4_text")),  # Llama 4: weightless L2 norm
            output_gate=self.bool_("attn_output_gate", self.model_type in OUTPUT_GATED_ATTENTION),
            sinks=self.model_type == "gpt_oss",
            mla=mla,
            qk_norm_per_head=self.model_type in PER_HEAD_QK_NORM,
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
        if any(self.c.get(k) is not None for k in ("mamba_num_heads", "mamba_n_heads")):
            return self._mamba2(hidden)
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

    def _mamba2(self, hidden: int) -> Mamba:
        """A Mamba-2 mixer under Nemotron-H's names (mamba_num_heads, mamba_head_dim, n_groups,
        ssm_state_size, conv_kernel) or Granite-4.0-H's and Falcon-H1's (mamba_n_heads,
        mamba_d_head, mamba_n_groups, mamba_d_state, mamba_d_conv; transformers'
        GraniteMoeHybridConfig and FalconH1Config, whose d_head "auto" is d_inner ÷ heads, d_inner
        being mamba_d_ssm or mamba_expand × hidden). Falcon-H1-7B: 24 heads of 128, d_state 256."""
        heads = self.int_("mamba_num_heads", "mamba_n_heads")
        d_ssm = self.opt_int("mamba_d_ssm")
        # mamba_d_ssm, where given, is the width (FalconH1Config reads mamba_expand only
        # without it); mamba_chunk_size is the scan kernel's chunk, no tensor's shape
        for known in ("mamba_expand", "mamba_chunk_size"):
            self.c.get(known)
        if self.c.get("mamba_head_dim") is None and self.c.get("mamba_d_head") == "auto":
            head_dim = (d_ssm or self.int_("mamba_expand", default=2) * hidden) // heads
        else:
            head_dim = self.int_("mamba_head_dim", "mamba_d_head")
        if d_ssm is not None and d_ssm != heads * head_dim:  # FalconH1Config refuses it so
            raise InputError(f"{self.name}: mamba_d_ssm ({d_ssm}) is not mamba_n_heads × "
                             f"mamba_d_head ({heads} × {head_dim}): the Mamba-2 heads must "
                             "tile its width")
        groups = self.int_("n_groups", "mamba_n_groups", default=1)
        if heads % groups:  # each group's B and C serve heads ÷ groups heads
            heads_key, groups_key = (self._named("mamba_num_heads", "mamba_n_heads"),
                                     self._named("n_groups", "mamba_n_groups"))
            raise InputError(f"{self.name}: {heads_key} ({heads}) is not a multiple of "
                             f"{groups_key} ({groups}): each group of B/C states serves a "
                             "whole number of heads")
        conv_bias = self._named("use_conv_bias", "mamba_conv_bias")
        return Mamba(
            version=2, d_inner=heads * head_dim,
            d_state=self.int_("ssm_state_size", "mamba_d_state"),
            conv_kernel=self.int_("conv_kernel", "mamba_d_conv", default=4), num_heads=heads,
            head_dim=head_dim, n_groups=groups, dt_rank=0,
            conv_bias=self.bool_(conv_bias, True),
            proj_bias=self.bool_("mamba_proj_bias"),
            gated_norm=self.bool_("mamba_rms_norm", self.model_type != "falcon_h1"),
        )

    def _named(self, *keys: str) -> str:
        """The first of ``keys`` the config gives (not null), else the first."""
        return next((k for k in keys if self.c.get(k) is not None), keys[0])

    def _dense_mlp(self, hidden: int) -> DenseMLP:
        if self.model_type in ("llama4", "llama4_text"):
            size = self.int_("intermediate_size_mlp")
        elif self.model_type in ("gptj", "falcon", "gpt2", "gpt_bigcode"):  # n_inner null: 4 h
            size = self.int_("n_inner", "ffn_hidden_size", default=4 * hidden)
        elif self.model_type in GRANITE_SHARED_MLP:
            # no experts (Granite-4.0-H-Micro): the shared_mlp is the layer's one MLP (vLLM
            # granitemoehybrid.py builds block_sparse_moe only for num_local_experts > 0)
            size = self.int_("shared_intermediate_size")
        else:
            size = self.int_("intermediate_size", "n_inner", "ffn_hidden_size")
        return DenseMLP(
            intermediate_size=size,
            gated=self.model_type not in UNGATED_MLP,
            bias=self.model_type in MLP_BIAS or self.bool_("mlp_bias") or self._ernie_bias(),
        )

    def _ernie_bias(self) -> bool:
        """ERNIE-4.5's use_bias: biases on q, k, v and the dense layers' MLP, none on o_proj
        or the experts (vLLM's ernie45_moe.py: qkv_bias and the dense Ernie4_5_MoeMLP read
        it; o_proj, FusedMoE and the shared experts take no bias). False in its configs."""
        return self.model_type in ERNIE_MOE_TYPES and self.bool_("use_bias")

    def _rope_scaling(self) -> RopeScaling | None:
        """config.json's rope_scaling, checked as the engines read it (read_rope_scaling)."""
        return read_rope_scaling(self.c.get("rope_scaling"), self.name,
                                 self.opt_int("max_position_embeddings"))

    def _moe(self) -> MoE:
        # ERNIE-4.5 counts them in moe_num_experts, moe_k a token (layouts.ERNIE_MOE_TYPES)
        experts = self.int_("n_routed_experts", "num_local_experts", "num_experts",
                            "moe_num_experts")
        per_token = self.int_("num_experts_per_tok", "experts_per_token", "moe_topk", "moe_k")
        if per_token > experts:
            raise InputError(
                f"{self.name}: num_experts_per_tok ({per_token}) exceeds the {experts} experts"
            )
        if self.model_type in OWN_EXPERT_WIDTH and self.c.get("moe_intermediate_size") is None:
            raise InputError(f"{self.name}: a {self.model_type} config sizes its experts by "
                             "moe_intermediate_size, and this one has none (its "
                             "intermediate_size is the dense layers' width)")
        expert_size = self.int_("moe_intermediate_size", "intermediate_size")
        shared_size = self.int_("shared_expert_intermediate_size", default=0, minimum=0)
        granite_shared = self.int_("shared_intermediate_size", default=0, minimum=0)
        if shared_size:  # Qwen: one shared expert of its own width
            shared, per_shared = 1, shared_size
        elif granite_shared:  # Granite MoE (Granite-4.0-H): shared_mlp, ungated by a router
            shared, per_shared = 1, granite_shared  # (vLLM granitemoehybrid.py: 0 is none)
        elif self.model_type in ("llama4", "llama4_text"):
            shared, per_shared = 1, expert_size
        elif self.model_type in HUNYUAN_TYPES:  # vLLM hunyuan_v1.py: where use_mixed_mlp_moe,
            # one shared_mlp of intermediate_size × num_shared_expert, the dense width
            mixed = self.bool_("use_mixed_mlp_moe")
            shared = self.int_("num_shared_expert", default=1, minimum=0) if mixed else 0
            per_shared = self.int_("intermediate_size")
        else:  # ERNIE-4.5's moe_num_shared_experts: vLLM builds them as one MLP of
            # moe_intermediate_size × that many (ernie45_moe.py), the same weights and FLOPs
            shared = self.int_("n_shared_experts", "num_shared_experts",
                               "moe_num_shared_experts", default=0, minimum=0)
            per_shared = expert_size
        return MoE(
            num_experts=experts,
            experts_per_token=per_token,
            expert_intermediate_size=expert_size,
            num_shared_experts=shared,
            shared_intermediate_size=per_shared if shared else 0,
            shared_gate=bool(shared_size),
            expert_bias=self.model_type == "gpt_oss",
            # gpt-oss: router bias; DeepSeek-V3/Kimi-K2/GLM-4.5: e_score_correction_bias, as
            # ERNIE-4.5 (vLLM's ernie45_moe.py gives every MoE layer's gate one, unasked)
            router_bias=self.model_type in ("gpt_oss", "glm4_moe", *ERNIE_MOE_TYPES)
            or self.c.get("topk_method") == "noaux_tc",
        )


def read_rope_scaling(rs: Any, name: str, max_positions: int | None,
                      key: str = "rope_scaling") -> RopeScaling | None:
    """A rope_scaling block (config.json's, or one a launch flag sets: vllm_rope.py), checked
    as the engines read it: a JSON object with a type (vLLM refuses one without), a positive
    factor (1 where absent), and YaRN's original positions as a whole number; ``key`` names
    it in a refusal. Qwen's YaRN block, factor 4 from 32,768: RopeScaling('yarn', 4.0, 32768)."""
    if rs is None:
        return None
    if not isinstance(rs, Mapping):
        raise InputError(f"{name}: {key} must be a JSON object, got {shorten(repr(rs))}")
    kind = rs.get("rope_type", rs.get("type"))
    if not isinstance(kind, str) or not kind:
        raise InputError(f"{name}: {key} has no type or rope_type")
    if kind not in ROPE_TYPES:  # its stretch of the context is unknown; engines refuse it
        raise InputError(f"{name}: {key} type {shorten(repr(kind))} is not one "
                         f"engines build (vLLM's: {', '.join(ROPE_TYPES)}; any other it "
                         "refuses: 'Unknown RoPE scaling type')")
    factor = rs.get("factor")
    if factor is None:
        factor = 1.0
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) \
            or not math.isfinite(factor) or factor <= 0:
        raise InputError(f"{name}: {key}'s factor must be a positive number, "
                         f"got {shorten(repr(factor))}")
    original = ConfigFields({"original_max_position_embeddings":
                             rs.get("original_max_position_embeddings")}, name,
                            defaults=False).opt_int("original_max_position_embeddings")
    if kind == "yarn" and original is None and max_positions is None:
        raise InputError(f"{name}: {key} yarn has no original_max_position_embeddings")
    base = original or max_positions or 1
    if base * factor > MAX_FIELD:
        raise InputError(f"{name}: {key}'s factor {factor:g} stretches "
                         f"{base:,} positions past {MAX_FIELD:,}")
    return RopeScaling(kind, float(factor), original)
