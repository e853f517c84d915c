"""What a vLLM or SGLang release lacks that a deployment asks for, by the first release that
had it: AMD's cards (vLLM's ROCm from 0.2.4), the model's architecture (Qwen3ForCausalLM from
vLLM 0.8.4, DeepseekV3ForCausalLM from 0.6.6, GptOssForCausalLM from 0.10.1), its rope_scaling
type (Llama 3.1's 'llama3' from 0.5.3.post1: engines.json vllm.release_features), its weight
formats (fp8 from vLLM 0.4.1, on AMD's cards 0.5.5; NVFP4 from vLLM 0.9.0 and SGLang
0.4.5.post1; MXFP4 from vLLM 0.10.1: formats.json engine_methods ``since``, ``vendor_since``)
and an fp8 KV cache (vLLM 0.3.0, on AMD's cards 0.4.1: formats.json kv). vLLM 0.1 with
Llama-3.1-8B's fp8 weights on an H100 is refused: no release before 0.5.3.post1 reads its
rope_scaling, none before 0.4.1 its fp8 weights.
quantization_gates.deployment_problem asks ``release_feature_problem``, so fit, decode,
simulate and plan's candidates all meet the same refusal.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from ridgeline.datafiles import engine_defaults, load_data
from ridgeline.engine_names import engine_name
from ridgeline.engine_versions import modelled_version, release_before

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment

# the methods whose own gates read the deployment's layout (quantization_gates: bnb_problem,
# experts_int8_problem), left to them here
_GATED_ELSEWHERE = ("bitsandbytes", "experts_int8")


def _features(engine: str) -> dict[str, Any]:
    """engines.json ``engine``.release_features ({} for an engine without it)."""
    return dict(engine_defaults(engine).get("release_features", {})) \
        if engine in ("vllm", "sglang") else {}


def _since(row: dict[str, Any], engine: str, vendor: str) -> str | None:
    """A formats.json row's first release of ``engine`` on ``vendor``'s cards: its
    ``vendor_since`` where it names the vendor, else its ``since`` (None: not gated)."""
    since = row.get("vendor_since", {}).get(engine, {}).get(vendor) \
        or row.get("since", {}).get(engine)
    return None if since is None else str(since)


@cache
def format_since(engine: str, fmt: str, vendor: str = "") -> tuple[str, str] | None:
    """The first release of ``engine`` that serves weight format ``fmt`` on ``vendor``'s
    cards, and the method that came with it (formats.json engine_methods ``since`` and
    ``vendor_since``, the earliest of the methods that read it): ('0.4.1', 'fp8') for vLLM's
    fp8, ('0.5.5', 'fp8') on AMD's; None where no method that reads it is gated."""
    found = [(since, str(row["method"]))
             for row in load_data("formats.json")["engine_methods"]
             if fmt in row.get("reads", ()) and row["method"] not in _GATED_ELSEWHERE
             and (since := _since(row, engine, vendor)) is not None]
    if not found:
        return None
    first = found[0]
    for since, method in found[1:]:
        if release_before(engine, since, first[0]):
            first = (since, method)
    return first


@cache
def kv_since(engine: str, kv: str, vendor: str = "") -> str | None:
    """The first release of ``engine`` with KV cache dtype ``kv`` on ``vendor``'s cards
    (formats.json kv ``vendor_since``, else ``since``: vLLM's fp8 from 0.3.0, on AMD's from
    0.4.1), or None where every release modelled has it."""
    row: dict[str, Any] = next((r for r in load_data("formats.json")["kv"] if r["id"] == kv), {})
    return _since(row, engine, vendor)


def _later(engine: str, version: str) -> str:
    return f"{engine_name(engine)} {version}"


def vendor_problem(dep: Deployment, version: str | None) -> str:
    """Why ``dep``'s engine at ``version`` runs nothing on its card's vendor, or "": vLLM
    before 0.2.4 on an AMD card (no ROCm)."""
    row = _features(dep.engine).get("vendors", {}).get(dep.accelerator.vendor)
    if row is None or not release_before(dep.engine, version, row["since"]):
        return ""
    return (f"{_later(dep.engine, str(version))} has no {row['what']}: it came in "
            f"v{row['since']}, so it does not run on the {dep.accelerator.id}; name a later "
            "--engine-version, or another card")


def architecture_problem(dep: Deployment, version: str | None) -> str:
    """Why ``dep``'s engine at ``version`` cannot load its model, or "": its architecture
    (config.json architectures) or its rope_scaling type came in a later release (vLLM's
    Qwen3ForCausalLM in 0.8.4; 'llama3' rope in 0.5.3.post1)."""
    features, spec = _features(dep.engine), dep.model
    since = features.get("architectures", {}).get(spec.architecture)
    if since and release_before(dep.engine, version, since):
        return (f"{_later(dep.engine, str(version))} cannot load {spec.name}: its "
                f"architecture {spec.architecture} came in v{since}; name a later "
                "--engine-version")
    rope = spec.rope_scaling.type if spec.rope_scaling else ""
    row = features.get("rope_types", {}).get(rope)
    if row and release_before(dep.engine, version, row["since"]):
        return (f"{_later(dep.engine, str(version))} cannot load {spec.name}: its "
                f"{row['what']} came in v{row['since']}; name a later --engine-version")
    return ""


def format_problem(dep: Deployment, version: str | None) -> str:
    """Why ``dep``'s engine at ``version`` serves none of its weights in a format or its KV
    cache in a dtype, or "": a format whose first method came later (vLLM's fp8 in 0.4.1, on
    AMD's cards in 0.5.5; SGLang's NVFP4 in 0.4.5.post1), an fp8 KV cache before vLLM 0.3.0
    (on AMD's cards 0.4.1)."""
    engine, vendor, card = dep.engine, dep.accelerator.vendor, dep.accelerator.id
    for fmt in dict.fromkeys(f for _, f in dep.weights.formats):
        first = format_since(engine, fmt, vendor)
        if first and release_before(engine, version, first[0]):
            own = first != format_since(engine, fmt)  # the vendor's own, later release
            came = f"runs on {vendor.upper()} cards from" if own else "came in"
            return (f"{_later(engine, str(version))} serves no {fmt} weights"
                    f"{f' on the {card}' if own else ''}: its {first[1]} method {came} "
                    f"v{first[0]}; name a later --engine-version, or another format")
    since = kv_since(engine, dep.kv.id, vendor)
    if since and release_before(engine, version, since):
        own = since != kv_since(engine, dep.kv.id)
        return (f"{_later(engine, str(version))} keeps no {dep.kv.id} KV cache"
                f"{f' on the {card}' if own else ''}: --kv-cache-dtype takes it "
                f"{f'on {vendor.upper()} cards ' if own else ''}from v{since}; name a later "
                "--engine-version, or another --kv-dtype")
    return ""


def release_feature_problem(dep: Deployment, version: str | None = None) -> str:
    """Why ``dep``'s engine at ``version`` (None: the newest modelled, which has all of
    them; a release ridgeline does not model is left to that refusal, check_engine_version)
    lacks what ``dep`` asks for, or "": the card's vendor, the model's architecture or
    rope type, a weight format, the KV dtype, each checked against the first release that had
    it, in that order."""
    if version is None or dep.engine not in ("vllm", "sglang") \
            or modelled_version(dep.engine, version) is None:  # its own refusal says why
        return ""
    return (vendor_problem(dep, version) or architecture_problem(dep, version)
            or format_problem(dep, version))
