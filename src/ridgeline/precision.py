"""Weight formats and KV-cache dtypes: real bits per weight, and the dtype matmuls run at.

A 70B model is 141 / 70.6 / 35.3 GB at 2 / 1 / 0.5 bytes per parameter, but a real
format also stores scales (NVFP4: 4.5 bits) and leaves embeddings, norms and routers at
the checkpoint dtype. ``weight_bytes`` counts both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from ridgeline.catalog import normalise, resolve_name
from ridgeline.datafiles import load_data
from ridgeline.errors import InputError, shorten
from ridgeline.model import ModelSpec
from ridgeline.params import count_params, layers_share
from ridgeline.quantization import (
    CATEGORIES,
    EMBEDDING,
    EXPERT_BIAS,
    EXPERTS,
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
    # the engines whose flash attention reads it (llama.cpp-metal, …); (): every one caching it
    flash_attention_engines: tuple[str, ...] = ()
    # (engine, first build, last build): llama.cpp builds of one of those engines that lack
    # the kernel all the same (Vulkan's iq4_nl, b9106-b10164)
    flash_attention_missing_builds: tuple[tuple[str, int, int], ...] = ()
    # a packed record a token (vLLM's fp8_ds_mla): the elements it holds, which a model's
    # latent must match; 0 for a format of so many bytes an element at any width
    elements_per_token: int = 0

    def cached_by(self, engine: str) -> bool:
        return not self.engines or any(engine.startswith(e) for e in self.engines)

    def read_by_flash_attention_of(self, engine: str, build: int | None = None) -> bool:
        """Whether ``engine``'s flash-attention kernels read this cache at llama.cpp build
        ``build`` (None: the newest modelled): llama.cpp's CUDA build has them for q4_0 and
        q8_0, not q5_1 (ggml-cuda/fattn.cu); Vulkan's for iq4_nl except in b9106-b10164."""
        if self.flash_attention_missing_span(engine, build) is not None:
            return False
        return not self.flash_attention_engines or engine in self.flash_attention_engines

    def flash_attention_missing_span(self, engine: str, build: int | None) -> tuple[int, int] | None:
        """The span of builds (first, last) of ``engine`` that ``build`` falls in and whose
        flash attention reads no such cache, or None."""
        for e, first, last in self.flash_attention_missing_builds:
            if e == engine and build is not None and first <= build <= last:
                return first, last
        return None


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
        row["id"]: KVDtype(row["id"], _bytes_per_element(row), row["source"],
                           tuple(row.get("engines", ())),
                           tuple(row.get("flash_attention_engines", ())),
                           tuple((engine, int(first), int(last)) for engine, (first, last)
                                 in row.get("flash_attention_missing_builds", {}).items()),
                           int(row.get("elements_per_token", 0)))
        for row in load_data("formats.json")["kv"]
    }


def _bytes_per_element(row: Mapping[str, Any]) -> float:
    """A KV row's bytes an element: as given, or a packed record's bytes over the elements
    it holds (fp8_ds_mla: 656 / 576, so 576 elements a token cost its 656 bytes)."""
    if "bytes_per_element" in row:
        return float(row["bytes_per_element"])
    return float(row["bytes_per_token"]) / float(row["elements_per_token"])


@lru_cache(maxsize=4)
def _table(section: str) -> Mapping[str, str]:
    """{normalised name or alias: id} of one section of formats.json, built once (every
    deployment the planner builds names its weight format and cache dtype)."""
    table: dict[str, str] = {}
    for row in load_data("formats.json")[section]:
        for alias in (row["id"], *row.get("aliases", ())):
            table[normalise(alias)] = row["id"]
    return table


STORED_NAMES = ("auto", "stored", "native", "as-stored")


@dataclass(frozen=True)
class WeightMix:
    """Tensor families in different formats: a file type (GGUF 'MXFP4 MoE', llama-quantize's
    IQ2_XXS: IQ2_XXS weights, a Q2_K embedding, a Q5_K output), or what an engine quantizes
    on load (vLLM's experts_int8: the experts, the rest as stored)."""

    id: str
    by_category: tuple[tuple[str, str], ...]  # (category, format id)
    default: str | None  # every other weight category; None: the checkpoint's dtype
    source: str
    # what llama-quantize gives a model of exactly 8 routed experts instead (Mixtral's
    # attn_output at Q5_K: llama_tensor_get_type_impl's n_expert == 8 branches)
    by_category_8_experts: tuple[tuple[str, str], ...] = ()

    def formats_for(self, spec: ModelSpec, base: str) -> dict[str, str]:
        """{category: format id} for this model, ``base`` (the checkpoint's dtype) where the
        mix has no default. An embedding tied to the output is quantized as the output is
        (llama_tensor_get_type_impl: "for arches that share the same tensor between the
        token embeddings and the output")."""
        by_category = dict(self.by_category)
        if spec.moe is not None and spec.moe.num_experts == 8:
            by_category.update(self.by_category_8_experts)
        chosen = {c: by_category.get(c, self.default or base)
                  for c in CATEGORIES if c not in (ROUTER, OTHER, EXPERT_BIAS)}
        if spec.tie_word_embeddings:
            chosen[EMBEDDING] = chosen[LM_HEAD]
        return chosen


@lru_cache(maxsize=1)
def weight_mixes() -> dict[str, WeightMix]:
    """Normalised name or alias -> mix."""
    table: dict[str, WeightMix] = {}
    for row in load_data("formats.json").get("mixes", []):
        mix = WeightMix(row["id"], tuple(row["by_category"].items()), row.get("default"),
                        row["source"], tuple(row.get("by_category_8_experts", {}).items()))
        for alias in (row["id"], *row.get("aliases", ())):
            table[normalise(alias)] = mix
    return table


def dynamic_quant_refusal(name: str) -> str:
    """Why an Unsloth dynamic quant name (UD-IQ1_S, UD-Q2_K_XL, Q4_K_XL) cannot be sized, and
    the llama-quantize mix to give instead; "" for any other name. Unsloth picks each
    tensor's type per model (attention and the dense layers at 4–6 bits, the experts lower:
    unsloth.ai/blog/deepseekr1-dynamic), so no formula gives its file's size."""
    key = normalise(name)
    if not (key.startswith("ud-") or key.endswith("-xl")):
        return ""
    base = key.removeprefix("ud-").removesuffix("-xl")
    nearest = (weight_mixes()[base].id if base in weight_mixes()
               else _table("weights").get(base, "q8_0" if base.startswith("q8") else "q4_k_m"))
    return (f"{shorten(name)!r} is an Unsloth dynamic quant, whose per-tensor types Unsloth "
            "picks model by model, so no formula sizes it; give the llama-quantize mix it "
            f"builds on, --weights {nearest} (Unsloth's file is larger: it keeps attention "
            "and the dense layers at more bits)")


def check_weight_choice(name: str) -> None:
    """Refuse a name that is neither 'as stored', a mix, nor a weight format."""
    if not is_stored_format(name) and normalise(name) not in weight_mixes():
        weight_format(name)


def is_stored_format(name: str) -> bool:
    """'auto', 'stored', 'as stored': the checkpoint's own formats, not one format for all."""
    return normalise(name) in STORED_NAMES


def weight_format(name: str) -> WeightFormat:
    """'FP8', 'q4_k_m', 'awq' -> the format record."""
    refusal = dynamic_quant_refusal(name)
    if refusal:
        raise InputError(refusal)
    return weight_formats()[resolve_name(name, _table("weights"), "weight format")]


def kv_dtype(name: str) -> KVDtype:
    return kv_dtypes()[resolve_name(name, _table("kv"), "KV-cache dtype")]


@dataclass(frozen=True)
class WeightPlan:
    """Which format each weight category is stored in, for one model."""

    formats: tuple[tuple[str, str], ...]  # (category, format id)
    label: str  # what the user asked for, e.g. "fp8" or "as stored"
    # (category, share of its weights at ``base``): layers a checkpoint's exclusions leave
    # unquantized in a category it otherwise quantizes (ModelSpec.unquantized_layers)
    unquantized_shares: tuple[tuple[str, float], ...] = ()
    base: str = "bf16"  # the checkpoint dtype those layers stay at

    def format_of(self, category: str) -> WeightFormat:
        """The category's format; where some of its layers stay at ``base``, that format
        with the bits a weight takes on average over the category (mixed_bits_per_weight)."""
        fmt = weight_formats()[dict(self.formats)[category]]
        share = dict(self.unquantized_shares).get(category, 0.0)
        if not share or fmt.id == self.base:
            return fmt
        bits = mixed_bits_per_weight(fmt.bits_per_weight,
                                     weight_formats()[self.base].bits_per_weight, share)
        return replace(fmt, bits_per_weight=bits)


def mixed_bits_per_weight(quantized_bits: float, base_bits: float, base_share: float) -> float:
    """Bits a weight takes on average where ``base_share`` of a category stays unquantized.

    bits = (1 - base_share) × quantized_bits + base_share × base_bits
    DeepSeek-V3's attention in fp8 blocks (8.00195 bits) with layer 0 of 61 left in bf16:
    60/61 × 8.00195 + 1/61 × 16 = 8.1331 bits.
    """
    return (1 - base_share) * quantized_bits + base_share * base_bits


def weight_plan(spec: ModelSpec, weights: str | None = None) -> WeightPlan:
    """Formats per category: as the checkpoint stores them, or one format the user names.

    A "linear" format covers the linear layers; embeddings, lm_head, norms and routers
    stay at the dtype the engine loads the checkpoint in (unquantized_dtype). A GGUF mix
    ("all") covers every tensor, because its bits per weight is a file average that already
    includes them.
    """
    base = unquantized_dtype(spec, weights)
    chosen: Mapping[str, str]
    shares: tuple[tuple[str, float], ...] = ()
    if weights is None or is_stored_format(weights):
        chosen = spec.stored_format_map
        label = "as stored" if chosen else base
        shares = tuple((c, layers_share(spec, c, layers)) for c, layers in spec.unquantized_layers)
    elif normalise(weights) in weight_mixes():
        mix = weight_mixes()[normalise(weights)]
        problem = experts_mix_problem(spec, mix)
        if problem:
            raise InputError(problem)
        chosen = mix.formats_for(spec, base)
        label = mix.id
    else:
        fmt = weight_format(weights)
        covered = CATEGORIES if fmt.applies_to == "all" else LINEAR_CATEGORIES
        chosen = dict.fromkeys(covered, fmt.id)
        label = fmt.id
    return WeightPlan(tuple((c, chosen.get(c, base)) for c in CATEGORIES), label, shares, base)


def unquantized_dtype(spec: ModelSpec, weights: str | None = None) -> str:
    """The dtype of the tensors ``weights`` leaves unquantized (embedding, lm_head, norms,
    router): the checkpoint's own, but a float32 checkpoint's at 16 bits where a format is
    named, since the engine loads it with --dtype auto (vLLM's _resolve_auto_dtype downcasts
    float32 to the platform's first dtype, bf16 from compute capability 8.0, fp16 before:
    platforms/cuda.py supported_dtypes; the same 2 B). --weights fp32 or fp16 names the
    dtype itself; as stored, the checkpoint's dtype stays (the deployment serves it).
    OLMo-2-7B, fp32, at fp8: its embedding and lm_head, 0.41 B weights each, at 2 B, 7.56 GiB
    of weights, not 9.09 GiB at 4 B."""
    base = spec.dtype if spec.dtype in weight_formats() else "bf16"
    if base != "fp32" or weights is None or is_stored_format(weights):
        return base
    named = normalise(weights)
    return named if named in ("fp32", "fp16") else "bf16"


def experts_mix_problem(spec: ModelSpec, mix: WeightMix, flag: str = "--weights") -> str:
    """Why ``mix`` means nothing on ``spec``, or "": a mix that quantizes a MoE's routed
    experts alone (experts_int8) on a dense model, where vLLM's ExpertsInt8Config leaves every
    linear layer at 16 bits and so serves the checkpoint as it is."""
    if spec.moe is not None or mix.default is not None \
            or {c for c, _ in mix.by_category} != {EXPERTS}:
        return ""
    others = "-q fp8 or bitsandbytes" if flag == "--quantization" else f"{flag} fp8 or bnb-nf4"
    return (f"{flag} {mix.id} quantizes a MoE's routed experts and {spec.name} is dense: "
            "vLLM's ExpertsInt8Config leaves every linear layer unquantized, so it would serve "
            f"the checkpoint as it is; leave out {flag}, or give {others} to quantize it")


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


def compute_format_for(plan: WeightPlan) -> WeightFormat:
    """The narrowest format among the linear weights (lm_head aside), the one whose matmul
    dtype the step takes: gpt-oss as stored, its experts' mxfp4."""
    linear = [c for c in LINEAR_CATEGORIES if c != LM_HEAD]
    fmt = plan.format_of(linear[0])
    for category in linear:
        if plan.format_of(category).bits_per_weight < fmt.bits_per_weight:
            fmt = plan.format_of(category)
    return fmt


def compute_dtype_for(plan: WeightPlan) -> tuple[str, ...]:
    """Matmul dtypes of the format holding most of the linear weights, best first."""
    return compute_format_for(plan).compute_dtypes
