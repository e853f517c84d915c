"""ridgeline: the numbers that decide LLM serving, from a config.json and a spec sheet.

The Python API, in docs/api.md: a ``Deployment`` of a ``ModelSpec`` (``resolve_model``) on
an ``Accelerator`` (``resolve_accelerator``); its ridge (``dense_ridge_flop_per_byte``);
``decode_floor`` and ``prefill_floor``; the engine's KV pool (``kv_pool`` under
``EngineSettings``); the fit verdict (``fit_report``). Bad input raises ``InputError``.
The pool's and fit's modules load on first use, so ``import ridgeline`` stays light.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from ridgeline.catalog import resolve_model
from ridgeline.deployment import Deployment
from ridgeline.errors import InputError
from ridgeline.floors import DecodeFloor, PrefillFloor, decode_floor, prefill_floor
from ridgeline.hardware import Accelerator, resolve_accelerator
from ridgeline.model import ModelSpec
from ridgeline.roofline import ridge_point

if TYPE_CHECKING:
    from ridgeline.memory import EngineSettings, KVPool, kv_pool
    from ridgeline.reports.fit import FitReport, fit_report

__version__ = "0.1.0"

# name -> the module that defines it, imported when the name is first read (PEP 562): the
# engines' pool rules and the fit report add some 70 modules a plain import does not need
_LAZY = {
    "EngineSettings": "ridgeline.memory",
    "KVPool": "ridgeline.memory",
    "kv_pool": "ridgeline.memory",
    "FitReport": "ridgeline.reports.fit",
    "fit_report": "ridgeline.reports.fit",
}

__all__ = [
    "Accelerator",
    "DecodeFloor",
    "Deployment",
    "EngineSettings",
    "FitReport",
    "InputError",
    "KVPool",
    "ModelSpec",
    "PrefillFloor",
    "__version__",
    "decode_floor",
    "fit_report",
    "kv_pool",
    "prefill_floor",
    "resolve_accelerator",
    "resolve_model",
    "ridge_point",
]


def __getattr__(name: str) -> object:
    """A lazily exported name (``_LAZY``), imported once and kept."""
    if name not in _LAZY:
        raise AttributeError(f"module 'ridgeline' has no attribute {name!r}")
    value = getattr(import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
