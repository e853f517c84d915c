"""Which kind each layer is, read from the many ways configs say it.

Mixers: ``full`` attention, ``sliding`` window, ``chunked`` local attention (Llama 4),
``linear`` attention (Gated DeltaNet), ``mamba``, or ``none`` (an MLP-only block).
FFNs: ``dense``, ``moe`` or ``none``. The rules follow each architecture's transformers
implementation, cited beside each branch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ridgeline.errors import InputError

FULL = "full"
SLIDING = "sliding"
CHUNKED = "chunked"
LINEAR = "linear"
MAMBA = "mamba"
NONE = "none"
DENSE = "dense"
MOE = "moe"

MIXERS = (FULL, SLIDING, CHUNKED, LINEAR, MAMBA, NONE)
ATTENTION_MIXERS = (FULL, SLIDING, CHUNKED)
WINDOW_MIXERS = (SLIDING, CHUNKED)  # attention that keeps at most a window of tokens

_LAYER_TYPE_NAMES = {
    "full_attention": FULL,
    "attention": FULL,
    "global": FULL,
    "sliding_attention": SLIDING,
    "sliding_window": SLIDING,
    "local": SLIDING,
    "chunked_attention": CHUNKED,
    "linear_attention": LINEAR,
    "mamba": MAMBA,
}
# Nemotron-H hybrid_override_pattern: M = Mamba-2, * = attention, - = MLP, E = MoE.
_PATTERN = {"M": (MAMBA, NONE), "*": (FULL, NONE), "-": (NONE, DENSE), "E": (NONE, MOE)}


# transformers families whose config builds windowed and global layers from
# sliding_window_pattern where it has no layer_types; each one's default where the key is
# absent (Gemma 3's 6, Cohere2's and EXAONE 4's 4) comes from model_type_defaults.json
_PATTERN_TYPES = frozenset({"gemma3", "gemma3_text", "cohere2", "exaone4"})
# the fields that say where windows are, as this module and config_reader read them
_WINDOW_FIELDS_READ = {"sliding_window", "sliding_window_size", "sliding_window_pattern",
                       "_sliding_window_pattern", "use_sliding_window", "max_window_layers"}


def mixer_kinds(c: Mapping[str, Any], model_type: str, n: int, name: str) -> list[str]:
    """The token mixer of each of the n layers."""
    _refuse_unread_window_fields(c, name)
    if c.get("hybrid_override_pattern") is not None:
        pattern = str(c["hybrid_override_pattern"])
        _check_pattern(pattern, name)
        return [_PATTERN[ch][0] for ch in pattern]
    if model_type == "nemotron_h":  # no all-attention reading: transformers' class default
        # pattern is 52 layers long, so HF and vLLM take a layout the config never states
        raise InputError(f"{name}: a nemotron_h config names each layer's kind (Mamba-2, "
                         "attention, MLP) in hybrid_override_pattern, and this one has none")
    layer_types = c.get("layer_types")
    cycle = c.get("layer_types_cycle")  # model_type_defaults.json: gpt-oss's repeat
    if layer_types is None and isinstance(cycle, list) and cycle:
        layer_types = [cycle[i % len(cycle)] for i in range(n)]
    if layer_types is not None:
        if not isinstance(layer_types, list):
            raise InputError(f"{name}: layer_types must be a list")
        kinds = []
        for entry in layer_types:
            if not isinstance(entry, str) or entry not in _LAYER_TYPE_NAMES:
                raise InputError(f"{name}: unknown layer type {entry!r} in layer_types")
            kinds.append(_LAYER_TYPE_NAMES[entry])
        return kinds
    if c.get("attn_layer_period") is not None:  # Jamba: attention where i % period == offset
        period = _positive(c, "attn_layer_period", name)
        offset = _offset(c, "attn_layer_offset", period, name)
        return [FULL if i % period == offset else MAMBA for i in range(n)]
    if c.get("full_attention_interval") is not None:  # Qwen3-Next: every k-th layer full
        k = _positive(c, "full_attention_interval", name)
        return [FULL if (i + 1) % k == 0 else LINEAR for i in range(n)]
    if model_type in ("gemma2",):  # Gemma 2: sliding on even layers, global on odd
        return [SLIDING if (i + 1) % 2 else FULL for i in range(n)]
    if model_type in _PATTERN_TYPES or _pattern_field(c) is not None:
        # Gemma 3 (5 local, then 1 global), Cohere2 (Command R7B) and EXAONE 4 (3, then 1):
        # transformers' configs build layer_types as "full_attention" where
        # (i + 1) % sliding_window_pattern == 0, else "sliding_attention"
        if "sliding_window" in c and c["sliding_window"] is None \
                and c.get("sliding_window_size") is None:
            return [FULL] * n  # windowed layers with no window attend to everything
        return _pattern_mixers(c, model_type, n, name)
    if c.get("attention_chunk_size") is not None:  # Llama 4: RoPE layers chunked, NoPE global
        rope = _no_rope_layers(c, n, name)
        return [CHUNKED if uses_rope else FULL for uses_rope in rope]
    if "use_sliding_window" in c:  # Qwen2/3: layers from max_window_layers on, when enabled
        window, _ = c.get("sliding_window"), c.get("max_window_layers")  # moot when not
        if not c.get("use_sliding_window") or window is None:
            return [FULL] * n
        first = _int(c, "max_window_layers", name, 0)
        return [SLIDING if i >= first else FULL for i in range(n)]
    if c.get("sliding_window") is not None:  # Mistral v0.1: every layer
        return [SLIDING] * n
    return [FULL] * n


EXPERT_COUNT_KEYS = ("n_routed_experts", "num_local_experts", "num_experts")
# The MoE sizes config_reader reads as one value for every MoE layer; a config that gives one
# a layer (Hunyuan-A13B's moe_topk, moe_intermediate_size, num_shared_expert: 32 entries each)
_MOE_SIZE_KEYS = frozenset({*EXPERT_COUNT_KEYS, "num_experts_per_tok", "experts_per_token",
                            "moe_topk", "moe_intermediate_size", "n_shared_experts",
                            "num_shared_experts", "num_shared_expert",
                            "shared_expert_intermediate_size"})
# ERNIE-4.5's text MoE: experts counted in moe_num_experts, moe_k of them a token, routed in
# the layers from moe_layer_start_index to moe_layer_end_index (transformers'
# Ernie4_5_MoeConfig, whose attribute_map reads num_experts as moe_num_experts; vLLM's
# model_executor/models/ernie45_moe.py). Its VL sibling, a list of each (text, vision), is not.
ERNIE_MOE_TYPES = frozenset({"ernie4_5_moe"})
# Tencent Hunyuan's families (transformers' HunYuanMoEV1Config, HunYuanDenseV1Config; vLLM's
# model_executor/models/hunyuan_v1.py): MoE sizes given one a layer (moe_topk,
# moe_intermediate_size, num_shared_expert), every layer MoE where num_experts > 1
# (hunyuan_v1.py _is_moe), dense of intermediate_size otherwise
HUNYUAN_TYPES = frozenset({"hunyuan_v1_moe", "hunyuan_v1_dense"})
# architectures whose every checkpoint routes to experts: an expert count of 0 is a broken config
_MOE_TYPES = {"mixtral", "gpt_oss", "qwen3_next", "deepseek_v2", "deepseek_v3", "deepseek_v32",
              "kimi_k2", "llama4", "llama4_text", "dbrx", "jamba", "olmoe", "phimoe", "granitemoe"}


def routes_to_experts(model_type: str) -> bool:
    return model_type in _MOE_TYPES or "moe" in model_type.split("_")


def ffn_kinds(
    c: Mapping[str, Any], model_type: str, n: int, mixers: list[str], name: str
) -> list[str]:
    """The feed-forward block of each layer: dense, moe or none."""
    if c.get("hybrid_override_pattern") is not None:
        return [_PATTERN[ch][1] for ch in str(c["hybrid_override_pattern"])]
    _refuse_moe_lists(c, name)
    if model_type in HUNYUAN_TYPES and c.get("num_experts") == 1:  # vLLM: _is_moe is > 1
        return [DENSE] * n
    if model_type in ERNIE_MOE_TYPES and any(c.get(k) is not None
                                             for k in ("moe_num_experts", "num_experts")):
        return _ernie_moe_layers(c, n, name)
    experts = c.get("n_routed_experts") or c.get("num_local_experts") or c.get("num_experts")
    if (not experts or experts is True) and routes_to_experts(model_type):
        _refuse_unread_expert_count(c, model_type, name)
        given = next((f"{k} is {c[k]!r}" for k in EXPERT_COUNT_KEYS if k in c), "")
        raise InputError(f"{name}: a {model_type} model routes each token to experts, but "
                         f"{given or 'the config gives no expert count'} "
                         f"({', '.join(EXPERT_COUNT_KEYS)})")
    if not experts or experts is True:
        return [DENSE] * n
    if c.get("expert_layer_period") is not None:  # Jamba
        period = _positive(c, "expert_layer_period", name)
        offset = _offset(c, "expert_layer_offset", period, name)
        return [MOE if i % period == offset else DENSE for i in range(n)]
    if c.get("first_k_dense_replace") is not None:  # DeepSeek-V3, Kimi-K2, GLM-4.5
        first = _int(c, "first_k_dense_replace", name)
        freq = _int(c, "moe_layer_freq", name, 1, minimum=1)
        return [MOE if i >= first and i % freq == 0 else DENSE for i in range(n)]
    if model_type in ("llama4", "llama4_text") and c.get("moe_layers") is not None:
        return [MOE if i in _moe_layers(c, n, name) else DENSE for i in range(n)]
    if c.get("interleave_moe_layer_step") is not None:  # Llama 4
        step = _positive(c, "interleave_moe_layer_step", name)
        return [MOE if (i + 1) % step == 0 else DENSE for i in range(n)]
    if c.get("decoder_sparse_step") is not None or c.get("mlp_only_layers") is not None:
        step = _int(c, "decoder_sparse_step", name, 1, minimum=1)  # Qwen MoE
        only = c.get("mlp_only_layers") or []
        if not isinstance(only, list) or not all(isinstance(i, int) for i in only):
            raise InputError(f"{name}: mlp_only_layers must be a list of layer numbers")
        dense_only = set(only)
        return [
            MOE if i not in dense_only and (i + 1) % step == 0 else DENSE for i in range(n)
        ]
    return [MOE] * n  # Mixtral, gpt-oss: every layer


def _ernie_moe_layers(c: Mapping[str, Any], n: int, name: str) -> list[str]:
    """ERNIE-4.5's layers: layer i routes to experts where moe_layer_start_index ≤ i ≤
    moe_layer_end_index and (i + 1) % moe_layer_interval == 0 (vLLM's ernie45_moe.py
    Ernie4_5_MoeDecoderLayer; transformers' Ernie4_5_MoeDecoderLayer alike), the rest run the
    dense MLP of intermediate_size. An end of -1, null or absent is the last layer
    (Ernie4_5_MoeConfig: num_hidden_layers - 1 for -1, its default). ERNIE-4.5-21B-A3B, start
    1 of 28 layers: layer 0 dense, 27 MoE; -300B-A47B, start 3 of 54: 3 dense, 51 MoE. An
    interval other than 1 is refused: SGLang's ernie4.py picks (i - start) % interval == 0,
    vLLM (i + 1) % interval == 0, and the two lay such a model out differently."""
    # a whole number of experts (the VL sibling's list, one a modality, is not read); the
    # config may name it num_experts, which Ernie4_5_MoeConfig's attribute_map reads so
    _int(c, "num_experts" if c.get("moe_num_experts") is None else "moe_num_experts", name,
         minimum=1)
    start = _int(c, "moe_layer_start_index", name, 1)
    end_given = c.get("moe_layer_end_index")
    end = n - 1 if end_given in (None, -1) else _int(c, "moe_layer_end_index", name)
    interval = _int(c, "moe_layer_interval", name, 1, minimum=1)
    if interval != 1:
        raise InputError(f"{name}: moe_layer_interval {interval} is not read: engines place "
                         "an ERNIE-4.5 model's MoE layers differently for any interval but 1 "
                         "(vLLM where (i + 1) % interval == 0, SGLang where (i - "
                         "moe_layer_start_index) % interval == 0)")
    if start > min(end, n - 1):
        raise InputError(f"{name}: moe_layer_start_index {start} is past moe_layer_end_index "
                         f"{min(end, n - 1)}: no layer routes to experts (vLLM refuses it: "
                         "'No Ernie4_5_MoeMoE layer found')")
    return [MOE if start <= i <= end else DENSE for i in range(n)]


def uniform_moe_lists(c: Mapping[str, Any], model_type: str, n: int) -> dict[str, int]:
    """A Hunyuan config's per-layer MoE lists whose entries are one whole number, one entry a
    layer, each as that number: Hunyuan-A13B's moe_topk [8] × 32 reads as 8, its
    moe_intermediate_size [3072] × 32 as 3072 (vLLM's hunyuan_v1.py takes entry layer_id of
    each). A list whose entries differ, or of another length, is left to _refuse_moe_lists."""
    if model_type not in HUNYUAN_TYPES:
        return {}
    return {k: v[0] for k, v in c.items() if k in _MOE_SIZE_KEYS and isinstance(v, list)
            and len(v) == n and all(type(e) is int for e in v) and len(set(v)) == 1}


def _refuse_moe_lists(c: Mapping[str, Any], name: str) -> None:
    """A config that gives its MoE sizes one a layer (Hunyuan-A13B's moe_topk [8, 8, …]) is
    refused by name: per-layer MoE lists are not read."""
    lists = [k for k, v in c.items() if k in _MOE_SIZE_KEYS and isinstance(v, list)]
    if lists:
        named = lists[0] if len(lists) == 1 else f"{', '.join(lists[:-1])} and {lists[-1]}"
        raise InputError(f"{name}: {named} {'is a list' if len(lists) == 1 else 'are lists'}, "
                         "one entry a layer: per-layer MoE lists are not read (ridgeline "
                         "sizes every MoE layer by one value of each)")


def _refuse_unread_expert_count(c: Mapping[str, Any], model_type: str, name: str) -> None:
    """A MoE config that counts its experts under a key ridgeline does not read (ERNIE-4.5's
    moe_num_experts, beside its moe_k and moe_layer_start_index) is refused naming that key."""
    other = [k for k, v in c.items() if k.endswith("num_experts") and k not in EXPERT_COUNT_KEYS
             and v not in (None, False, 0, [])]
    if not other:
        return
    more = [k for k in c if k.startswith("moe_") and k not in (*other,
            "moe_intermediate_size")][:3]
    nor = f", nor {', '.join(more)}" if more else ""
    raise InputError(f"{name}: a {model_type} model routes each token to experts, and its "
                     f"config counts them in {other[0]}, which ridgeline does not read (it "
                     f"reads {', '.join(EXPERT_COUNT_KEYS)}){nor}")


def _pattern_field(c: Mapping[str, Any]) -> Any:
    """sliding_window_pattern, or the private ``_sliding_window_pattern`` transformers 4.53 and
    later save beside layer_types (google/gemma-3-270m's config.json). A family with a default
    pattern has it filled in before this reads (model_type_defaults.json), so there, as in
    transformers, the private copy never sets the layout."""
    value = c.get("sliding_window_pattern")
    return c.get("_sliding_window_pattern") if value is None else value


def _pattern_mixers(c: Mapping[str, Any], model_type: str, n: int, name: str) -> list[str]:
    """The layers sliding_window_pattern lays out. A whole number k: every k-th layer global,
    the rest windowed (transformers' Gemma 3, Cohere2, EXAONE 4 configs). A string of L and G
    (EXAONE 4's "LLLG"): layer i windowed where its letter, pattern[i % len], is L, the last
    layer global whatever its letter (TensorRT-LLM's modeling_exaone4 check_is_sliding). A
    config that leaves the key out has its family's default by now (model_type_defaults.json);
    one that sets it to null, or a family without a default, is refused rather than read as
    every layer windowed (transformers' configs fail on a null: the layout divides by it)."""
    value = _pattern_field(c)
    if value is None:
        given = "sets it to null" if "sliding_window_pattern" in c else "leaves it out"
        raise InputError(f"{name}: a {model_type} config puts a global layer among windowed "
                         f"ones every sliding_window_pattern layers, and this one {given} and "
                         "gives no layer_types: give one or the other")
    if isinstance(value, str) and value and set(value) <= {"L", "G"}:
        return [SLIDING if i != n - 1 and value[i % len(value)] == "L" else FULL
                for i in range(n)]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name}: sliding_window_pattern must be a whole number ≥ 1 (every "
                         f"k-th layer global) or a string of L (windowed) and G (global), got "
                         f"{value!r}: give layer_types, one entry a layer, for any other layout")
    return [FULL if (i + 1) % value == 0 else SLIDING for i in range(n)]


def _refuse_unread_window_fields(c: Mapping[str, Any], name: str) -> None:
    """A field that says something of windowed layers ridgeline does not read (MiMo-V2's
    hybrid_layer_pattern, its swa_num_key_value_heads) would leave the cache misread: which
    layers keep a window, or their shape. Refused by name."""
    unread = sorted(k for k, v in c.items() if k not in _WINDOW_FIELDS_READ
                    and v not in (None, False, 0, "", [])
                    and ("window" in k or "swa" in k.split("_") or k == "hybrid_layer_pattern"))
    if unread:
        fields = "the window field" + ("s" if len(unread) > 1 else "")
        raise InputError(f"{name}: ridgeline does not read {fields} {', '.join(unread)}, so "
                         "it cannot tell which layers keep a window, or what each holds (it "
                         f"reads layer_types, {', '.join(sorted(_WINDOW_FIELDS_READ))})")


def _no_rope_layers(c: Mapping[str, Any], n: int, name: str) -> list[bool]:
    """Whether each Llama-4 layer uses RoPE (and so chunked attention): the explicit
    no_rope_layers flags where given (transformers' Llama4TextConfig and vLLM's llama4.py read
    is_nope = no_rope_layers[i] == 0; an empty list means the default), else every
    no_rope_layer_interval-th layer (4) is NoPE and global."""
    flags = c.get("no_rope_layers")
    if not flags:
        interval = _int(c, "no_rope_layer_interval", name, 4, minimum=1)
        return [(i + 1) % interval != 0 for i in range(n)]
    if not isinstance(flags, list) or any(type(f) is not int or f not in (0, 1)
                                          for f in flags):
        raise InputError(f"{name}: no_rope_layers must be a list of 0 (NoPE) and 1 (RoPE) "
                         "flags, one a layer")
    if len(flags) != n:
        raise InputError(f"{name}: no_rope_layers has {len(flags)} flags but "
                         f"num_hidden_layers is {n}")
    return [f == 1 for f in flags]


def _moe_layers(c: Mapping[str, Any], n: int, name: str) -> set[int]:
    """Llama 4's explicit moe_layers: the numbers of the layers that route to experts
    (transformers' Llama4TextConfig, in place of interleave_moe_layer_step's rule)."""
    layers = c.get("moe_layers")
    if not isinstance(layers, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n for i in layers):
        raise InputError(f"{name}: moe_layers must be a list of layer numbers from 0 to "
                         f"{n - 1}")
    return set(layers)


def _positive(c: Mapping[str, Any], key: str, name: str) -> int:
    return _int(c, key, name, minimum=1)


def _int(c: Mapping[str, Any], key: str, name: str, default: int | None = None,
         minimum: int = 0) -> int:
    value = c.get(key)
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{name}: {key} must be a whole number ≥ {minimum}, got {value!r}")
    return value


def _check_pattern(pattern: str, name: str) -> None:
    unknown = sorted(set(pattern) - set(_PATTERN))
    if unknown:
        raise InputError(f"{name}: hybrid_override_pattern has unknown layer codes {unknown}")


def _offset(c: Mapping[str, Any], key: str, period: int, name: str) -> int:
    """A Jamba layer offset: within its period, or no layer of the kind would be picked."""
    offset = _int(c, key, name, 0)
    if offset >= period:
        raise InputError(f"{name}: {key} {offset} must be below its period {period} (layer i "
                         f"is picked where i % period == offset)")
    return offset
