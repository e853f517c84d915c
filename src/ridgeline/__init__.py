"""ridgeline: the numbers that decide LLM serving, from a config.json and a spec sheet."""

from __future__ import annotations

from ridgeline.catalog import resolve_model
from ridgeline.deployment import Deployment
from ridgeline.errors import InputError
from ridgeline.floors import decode_floor, prefill_floor
from ridgeline.hardware import Accelerator, resolve_accelerator
from ridgeline.model import ModelSpec

__version__ = "0.1.0"

__all__ = [
    "Accelerator",
    "Deployment",
    "InputError",
    "ModelSpec",
    "__version__",
    "decode_floor",
    "prefill_floor",
    "resolve_accelerator",
    "resolve_model",
]
