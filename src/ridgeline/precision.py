"""Weight formats and KV-cache dtypes: real bits per weight, and the dtype matmuls run at.

A 70B model is 141 / 70.6 / 35.3 GB at 2 / 1 / 0.5 bytes per parameter, but a real
format also stores scales (NVFP4: 4.5 bits) and leaves embeddings, norms and routers at
the checkpoint dtype. ``weight_bytes`` counts both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from ridgeline.catalog import normalise, resolve_name
from ridgeline.datafiles import load_data
from ridgeline.model import ModelSpec
from ridgeline.params import count_params
from ridgeline.quantization import (
    CATEGORIES,
    EXPERT_BIAS,
    LINEAR_CATEGORIES,
    LM_HEAD,
    OTHER,
    ROUTER,
)


@dataclass(frozen=True)
class WeightFormat:
    id: str
    bits_per_weight: float
    applies_to: str  # "linear" or "all"
    compute_dtypes: tuple[str, ...]
    source: str

    @property
    def bytes_per_weight(self) -> float:
        return self.bits_per_weight / 8

    @property
    def k_quant(self) -> bool:
        """A GGUF K-quant (q2_k … q6_k, and their _s/_m/_l mixes): 256-weight super-blocks
        whose sub-block scales and mins are packed in 6 or 4 bits, so a kernel spends more
        arithmetic unpacking each weight than for Q4_0 or Q8_0 (ggml-common.h block_q4_K)."""
        return self.id.startswith("q") and "_k" in self.id


@dataclass(frozen=True)
class KVDtype:
    id: str
    bytes_per_element: float
    source: str
    engines: tuple[str, ...] = ()  # the engines that cache in it (a prefix: "llama.cpp"); (): all

    def cached_by(self, engine: str) -> bool:
        return not self.engines or any(engine.startswith(e) for e in self.engines)


@lru_cache(maxsize=1)
def weight_formats() -> dict[str, WeightFormat]:
    return {
        row["id"]: WeightFormat(
            id=row["id"], bits_per_weight=float(row["bits_per_weight"]),
            applies_to=row["applies_to"], compute_dtypes=tuple(row["compute_dtypes"]),
            source=row["source"],
        )
        for row in load_data("formats.json")["weights"]
    }


@lru_cache(maxsize=1)
def kv_dtypes() -> dict[str, KVDtype]:
    return {
        row["id"]: KVDtype(row["id"], float(row["bytes_per_element"]), row["source"],
                           tuple(row.get("engines", ())))
        for row in load_data("formats.json")["kv"]
    }


def _table(section: str) -> dict[str, str]:
    table: dict[str, str] = {}
    for row in load_data("formats.json")[section]:
        for alias in (row["id"], *row.get("aliases", ())):
            table[normalise(alias)] = row["id"]
    return table


STORED_NAMES = ("auto", "stored", "native", "as-stored")


@dataclass(frozen=True)
class WeightMix:
    """Tensor families in different formats: a file type (GGUF 'MXFP4 MoE'), or what an
    engine quantizes on load (vLLM's experts_int8: the experts, the rest as stored)."""

    id: str
    by_category: tuple[tuple[str, str], ...]  # (category, format id)
    default: str | None  # every other weight category; None: the checkpoint's dtype
    source: str


@lru_cache(maxsize=1)
def weight_mixes() -> dict[str, WeightMix]:
    """Normalised name or alias -> mix."""
    table: dict[str, WeightMix] = {}
    for row in load_data("formats.json").get("mixes", []):
        mix = WeightMix(row["id"], tuple(row["by_category"].items()), row.get("default"),
                        row["source"])
        for alias in (row["id"], *row.get("aliases", ())):
            table[normalise(alias)] = mix
    return table


def check_weight_choice(name: str) -> None:
    """Refuse a name that is neither 'as stored', a mix, nor a weight format."""
    if not is_stored_format(name) and normalise(name) not in weight_mixes():
        weight_format(name)


def is_stored_format(name: str) -> bool:
    """'auto', 'stored', 'as stored': the checkpoint's own formats, not one format for all."""
    return normalise(name) in STORED_NAMES


def weight_format(name: str) -> WeightFormat:
    """'FP8', 'q4_k_m', 'awq' -> the format record."""
    return weight_formats()[resolve_name(name, _table("weights"), "weight format")]


def kv_dtype(name: str) -> KVDtype:
    return kv_dtypes()[resolve_name(name, _table("kv"), "KV-cache dtype")]


@dataclass(frozen=True)
class WeightPlan:
    """Which format each weight category is stored in, for one model."""

    formats: tuple[tuple[str, str], ...]  # (category, format id)
    label: str  # what the user asked for, e.g. "fp8" or "as stored"

    def format_of(self, category: str) -> WeightFormat:
        return weight_formats()[dict(self.formats)[category]]


def weight_plan(spec: ModelSpec, weights: str | None = None) -> WeightPlan:
    """Formats per category: as the checkpoint stores them, or one format the user names.

    A "linear" format covers the linear layers; embeddings, lm_head, norms and routers
    stay at the checkpoint dtype. A GGUF mix ("all") covers every tensor, because its
    bits per weight is a file average that already includes them.
    """
    base = spec.dtype if spec.dtype in weight_formats() else "bf16"
    chosen: Mapping[str, str]
    if weights is None or is_stored_format(weights):
        chosen = spec.stored_format_map
        label = "as stored" if chosen else base
    elif normalise(weights) in weight_mixes():
        mix = weight_mixes()[normalise(weights)]
        chosen = {c: dict(mix.by_category).get(c, mix.default or base)
                  for c in CATEGORIES if c not in (ROUTER, OTHER, EXPERT_BIAS)}
        label = mix.id
    else:
        fmt = weight_format(weights)
        covered = CATEGORIES if fmt.applies_to == "all" else LINEAR_CATEGORIES
        chosen = dict.fromkeys(covered, fmt.id)
        label = fmt.id
    return WeightPlan(tuple((c, chosen.get(c, base)) for c in CATEGORIES), label)


def weight_bytes_by_category(spec: ModelSpec, plan: WeightPlan) -> dict[str, float]:
    params = count_params(spec).by_category
    return {c: params.get(c, 0) * plan.format_of(c).bytes_per_weight for c in CATEGORIES}


def weight_bytes(spec: ModelSpec, plan: WeightPlan) -> float:
    """Bytes the weights occupy: Llama-3.1-70B in bf16 = 141.1 GB."""
    return sum(weight_bytes_by_category(spec, plan).values())


def weight_bytes_at(params: float, bytes_per_param: float) -> float:
    """Weights at one round size per parameter, the article's reckoning: params × bytes per
    parameter (Llama-3.1-70B's 70.55B at 2 B = 141.1 GB; the article's round 70B, 140)."""
    return params * bytes_per_param


def compute_dtype_for(plan: WeightPlan) -> tuple[str, ...]:
    """Matmul dtypes of the format holding most of the linear weights, best first."""
    linear = [c for c in LINEAR_CATEGORIES if c != LM_HEAD]
    fmt = plan.format_of(linear[0])
    for category in linear:
        if plan.format_of(category).bits_per_weight < fmt.bits_per_weight:
            fmt = plan.format_of(category)
    return fmt.compute_dtypes
