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
        self.c = merged
        if decoder:  # model_type is a name, as every other field has its type
            for kind in (config.get("model_type"), merged.get("model_type")):
                if kind is not None and not isinstance(kind, str):
                    raise InputError(f"{name}: model_type must be a string, got "
                                     f"{shorten(repr(kind))}")
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
