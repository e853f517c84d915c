"""ridgeline: the numbers that decide LLM serving, from a config.json and a spec sheet.

The Python API, in docs/api.md: a ``Deployment`` of a ``ModelSpec`` (``resolve_model``) on
an ``Accelerator`` (``resolve_accelerator``); its ridge (``dense_ridge_flop_per_byte``);
``decode_floor`` and ``prefill_floor``; the engine's KV pool (``kv_pool`` under
``EngineSettings``); the fit verdict (``fit_report``). Bad input raises ``InputError``.
The strings a floor's ``bound`` and a fit's ``verdict`` take are exported as constants
(``MEMORY_BOUND``, ``UNDER_RIDGE``, …), and so are the types EngineSettings' fields and
FitReport's levers hold. The pool's and fit's modules load on first use, so ``import
ridgeline`` stays light.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from ridgeline.catalog import resolve_model
from ridgeline.deployment import Deployment
from ridgeline.errors import InputError
from ridgeline.floors import (
    COMPUTE_BOUND,
    MEMORY_BOUND,
    DecodeFloor,
    PrefillFloor,
    decode_floor,
    prefill_floor,
)
from ridgeline.hardware import Accelerator, resolve_accelerator
from ridgeline.model import ModelSpec
from ridgeline.roofline import ridge_point
from ridgeline.step_work import HOST_LINK_BOUND, HOST_MEMORY_BOUND

if TYPE_CHECKING:
    from ridgeline.engine_spec import EngineSpec
    from ridgeline.memory import EngineSettings, KVPool
    from ridgeline.memory import served_kv_pool as kv_pool
    from ridgeline.reports.fit import FitReport, fit_report
    from ridgeline.reports.fit_levers import Lever
    from ridgeline.reports.fit_verdict import CLEARS_RIDGE, DOES_NOT_FIT, UNDER_RIDGE
    from ridgeline.sglang_lora import SGLangLoRASettings
    from ridgeline.trtllm_transceiver import CacheTransceiver
    from ridgeline.vllm_eplb import EPLBSettings
    from ridgeline.vllm_lora import LoRASettings
    from ridgeline.vllm_mm_limits import MMLimits

__version__ = "0.1.0"

# name -> the module that defines it ("module:name" where it is named otherwise there),
# imported when the name is first read (PEP 562): the engines' pool rules and the fit report
# add some 70 modules a plain import does not need
_LAZY = {
    "EngineSettings": "ridgeline.memory",
    "KVPool": "ridgeline.memory",
    "kv_pool": "ridgeline.memory:served_kv_pool",  # kv_pool, refusing a length it refuses
    "FitReport": "ridgeline.reports.fit",
    "fit_report": "ridgeline.reports.fit",
    # fit's verdicts (FitReport.verdict) and levers (FitReport.levers)
    "DOES_NOT_FIT": "ridgeline.reports.fit_verdict",
    "UNDER_RIDGE": "ridgeline.reports.fit_verdict",
    "CLEARS_RIDGE": "ridgeline.reports.fit_verdict",
    "Lever": "ridgeline.reports.fit_levers",
    # the types EngineSettings' fields take
    "EngineSpec": "ridgeline.engine_spec",  # drafter
    "MMLimits": "ridgeline.vllm_mm_limits",  # mm_limits
    "LoRASettings": "ridgeline.vllm_lora",  # lora, vLLM's
    "SGLangLoRASettings": "ridgeline.sglang_lora",  # lora, SGLang's
    "EPLBSettings": "ridgeline.vllm_eplb",  # eplb
    "CacheTransceiver": "ridgeline.trtllm_transceiver",  # cache_transceiver
}

__all__ = [
    "CLEARS_RIDGE",
    "COMPUTE_BOUND",
    "DOES_NOT_FIT",
    "HOST_LINK_BOUND",
    "HOST_MEMORY_BOUND",
    "MEMORY_BOUND",
    "UNDER_RIDGE",
    "Accelerator",
    "CacheTransceiver",
    "DecodeFloor",
    "Deployment",
    "EPLBSettings",
    "EngineSettings",
    "EngineSpec",
    "FitReport",
    "InputError",
    "KVPool",
    "Lever",
    "LoRASettings",
    "MMLimits",
    "ModelSpec",
    "PrefillFloor",
    "SGLangLoRASettings",
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
    module, _, defined = _LAZY[name].partition(":")
    value = getattr(import_module(module), defined or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
