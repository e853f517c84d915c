"""A config.json's fields as typed values, each bad one refused in one line naming it.

``ConfigFields`` merges a multimodal config's ``text_config`` over its top level, fills the
fields transformers defaults for the model_type (``model_type_defaults.json``), refuses a
model that is not a decoder-only LLM (``model_types.py``), and reads whole numbers within
bounds (``int_``, ``opt_int``) and booleans (``bool_``). ``config_reader.py`` builds a
ModelSpec from them; ``vision_tower.py`` reads a vision_config with them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ridgeline.datafiles import model_type_defaults
from ridgeline.errors import InputError, shorten
from ridgeline.model_types import refuse_non_decoders

MAX_FIELD = 2**31 - 1  # any count or size in a config: past int32, no checkpoint holds it


class MissingField(InputError):
    """A field the config does not give at all (absent or null), as against one it gives
    malformed: a reader that leaves a layout it cannot read uncounted catches this alone."""


class _ReadFields(dict[str, Any]):
    """A config's fields that remember each key looked up (``get``, ``[]``, ``in``), so that
    what no reader asked for can be named (``ConfigFields.unread``)."""

    def __init__(self, fields: Mapping[str, Any]) -> None:
        super().__init__(fields)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.read.add(key)
        return super().__contains__(key)


# Keys every transformers config carries that size nothing: the library's own bookkeeping
# and generation defaults (PretrainedConfig), and flags of numerics, not of shapes
_BOOKKEEPING = frozenset({
    "architectures", "transformers_version", "torch_dtype", "dtype", "model_type", "auto_map",
    "use_cache", "return_dict", "output_attentions", "output_hidden_states", "torchscript",
    "is_decoder", "tie_encoder_decoder", "use_bfloat16", "pretraining_tp", "id2label",
    "label2id", "task_specific_params", "max_length", "min_length", "num_beams",
    "num_beam_groups", "num_return_sequences", "no_repeat_ngram_size", "top_k",
    "chunk_size_feed_forward", "scale_attn_weights", "attention_softmax_in_fp32",
    "scale_attention_softmax_in_fp32", "use_return_dict", "use_flash_attn", "tokenizer_class",
    "norm_topk_prob",
})
# Name parts of keys that tune numerics, training or positions, never a tensor's shape (RoPE
# has no weights: Llama 4's and SmolLM3's no_rope_layers leave every layer's size alone)
_NUMERICS_PARTS = ("dropout", "pdrop", "eps", "epsilon", "initializer", "init_", "token_id",
                   "token_index", "scale", "temperature", "theta", "clip", "rope", "rotary")


def sizing_looking(key: str, value: Any) -> bool:
    """Whether an unread config key may size something: a whole number, a true flag, or a
    non-empty list or object, under a name that is not bookkeeping (architectures,
    transformers_version, *_token_id, torch_dtype, dropout, epsilon...). StarCoder's
    multi_query: true is; its layer_norm_epsilon and activation_function are not."""
    if key.startswith("_") or key in _BOOKKEEPING or any(p in key for p in _NUMERICS_PARTS):
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value > 0
    return isinstance(value, (list, Mapping)) and bool(value)


class ConfigFields:
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
        self.given = tuple(merged)  # the config's own keys, before any default
        self.c = _ReadFields(merged)
        # model_type is a name, as every other field has its type: a vision_config's too
        # (its [] met a set of names as an internal error)
        for kind in (config.get("model_type"), merged.get("model_type")):
            if kind is not None and not isinstance(kind, str):
                raise InputError(f"{name}: model_type must be a string, got "
                                 f"{shorten(repr(kind))}")
        if decoder:
            for classes in (config.get("architectures"), merged.get("architectures")):
                # a list of class names, as transformers writes it: a bare string would be
                # read as no architecture, and an encoder named by it not refused
                if classes is not None and not (isinstance(classes, list) and all(
                        isinstance(c, str) for c in classes)):
                    raise InputError(f"{name}: architectures must be a list of class names "
                                     f"(\"LlamaForCausalLM\"), got {shorten(repr(classes))}")
        self.model_type = str(self.c.get("model_type") or "")
        if decoder:  # a vision tower's config is an encoder's, read as one
            refuse_non_decoders(name, self.c, self.model_type,
                                str(config.get("model_type") or ""))
        for key, value in (model_type_defaults(self.model_type) if defaults else {}).items():
            self.c.setdefault(key, value)

    def unread(self) -> tuple[str, ...]:
        """The config's own keys no reader has looked up so far that may size something
        (``sizing_looking``), in the config's order."""
        return tuple(k for k in self.given if k not in self.c.read
                     and sizing_looking(k, dict.get(self.c, k)))

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
            raise MissingField(f"{self.name}: config has no {' or '.join(keys)}")
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
