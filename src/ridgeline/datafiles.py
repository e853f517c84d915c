"""Reading the JSON files shipped in ``ridgeline/data`` (the one place the core reads files)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def load_data(relative_path: str) -> Any:
    """Parse one JSON file shipped in ``ridgeline/data``."""
    text = resources.files("ridgeline").joinpath(f"data/{relative_path}").read_text("utf-8")
    return json.loads(text)


def data_files(folder: str) -> list[str]:
    """Names of the JSON files in a data folder, sorted."""
    root = resources.files("ridgeline").joinpath(f"data/{folder}")
    return sorted(p.name for p in root.iterdir() if p.name.endswith(".json"))


def model_type_defaults(model_type: str) -> dict[str, Any]:
    """Fields transformers fills in for a model_type when config.json omits them."""
    entry = load_data("model_type_defaults.json").get(model_type, {})
    return {k: v for k, v in entry.items() if not k.startswith("_")}


def engine_defaults(engine: str) -> dict[str, Any]:
    """An engine's block of engines.json (every llama.cpp-… build shares llama.cpp's; {} for
    an engine without one)."""
    key = "llama.cpp" if engine.startswith("llama.cpp") else engine
    data: dict[str, Any] = load_data("engines.json").get(key, {})
    return data
