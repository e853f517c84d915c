"""The start-up peak of a 16-bit checkpoint quantized on load (``--quantization fp8``).

An engine that builds every layer at 16 bits, loads the checkpoint into it and only then
quantizes holds each GPU's whole 16-bit share before the weights shrink, so that share, not
the served weights, must fit for it to start (formats.json engine_methods
``loads_16bit_first``: the engines that do, and the release from which one streams instead).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ridgeline.catalog import catalog_model_id
from ridgeline.datafiles import load_data
from ridgeline.engine_names import engine_name
from ridgeline.engine_quantization import EngineMethod, engine_methods
from ridgeline.engine_versions import release_before
from ridgeline.offload import gpu_weight_bytes
from ridgeline.stages import stage_weight_bytes
from ridgeline.units import GIB

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.kvpool import KVPool
    from ridgeline.stages import Stage

LOADED_AS = "bf16"  # the 16-bit type the engine builds the layers in (fp16: the same bytes)


def online_method(dep: Deployment) -> EngineMethod | None:
    """The --quantization METHOD that serves ``dep``'s 16-bit checkpoint in its weight format
    by quantizing it on load (the launch's ``--quantization fp8`` for --weights fp8), or None:
    a quantized checkpoint (loaded as stored), a checkpoint stored in the weight format
    (--weights fp8: ``Deployment.weights_stored``), a format no method quantizes to on load,
    an engine without the flag."""
    if dep.model.stored_format_map or dep.weights_stored:
        return None
    label = dep.weights.label
    rows = [m for m in engine_methods().values()
            if m.online and m.format == label and dep.engine in m.engines]
    return next((m for m in rows if m.method == label), rows[0] if rows else None)


def streams_from(method: EngineMethod, engine: str) -> str | None:
    """The release of ``engine`` from which ``method`` quantizes each weight as it loads ("":
    none modelled does; None: the engine is not known to load 16-bit weights first)."""
    row = next(r for r in load_data("formats.json")["engine_methods"]
               if r["method"] == method.method)
    first: dict[str, str] = row.get("loads_16bit_first", {})
    return first.get(engine)


def loads_16bit_first(dep: Deployment, version: str | None) -> EngineMethod | None:
    """The method of ``dep`` whose engine, at ``version`` (None: the newest modelled), loads
    the 16-bit checkpoint whole before quantizing it; None where it does not."""
    method = online_method(dep)
    if method is None:
        return None
    since = streams_from(method, dep.engine)
    if since is None:
        return None
    if since and (version is None or not release_before(dep.engine, version, since)):
        return None
    return method


def load_peak_bytes(dep: Deployment, version: str | None, weight_bytes: float,
                    stage: Stage | None = None) -> float:
    """The weights one GPU holds at start-up where the engine, at ``version`` (None: the
    newest modelled), loads the 16-bit checkpoint before quantizing it (``sixteen_bit_bytes``),
    or 0 where it loads them as served."""
    if loads_16bit_first(dep, version) is None:
        return 0.0
    return sixteen_bit_bytes(dep, weight_bytes, stage)


def sixteen_bit_bytes(dep: Deployment, weight_bytes: float, stage: Stage | None = None) -> float:
    """One GPU's weights with the quantized layers back at 16 bits: the served
    ``weight_bytes`` plus what they weigh more at 16 bits on this GPU's share (a pipeline
    stage's layers, else 1 / num_gpus). Llama-3.1-70B served in fp8 on one H100: 67.7 GiB
    served, 131.4 GiB at 16 bits."""
    loaded = replace(dep, weights=replace(dep.weights, formats=tuple(
        (c, LOADED_AS if f == dep.weights.label else f) for c, f in dep.weights.formats),
        label=LOADED_AS))
    if stage is not None:  # the first stage's vision tower is the same in both: left out
        extra = stage_weight_bytes(loaded, stage, 0.0) - stage_weight_bytes(dep, stage, 0.0)
    else:
        extra = (gpu_weight_bytes(loaded) - gpu_weight_bytes(dep)) / dep.num_gpus
    return weight_bytes + max(0.0, extra)


def load_peak_reason(pool: KVPool, dep: Deployment, version: str | None) -> str:
    """Why the engine fails to load ``dep``, as a clause: the 16-bit weights it holds before
    quantizing are more than the memory it loads into, and what avoids it."""
    method = loads_16bit_first(dep, version)
    name = engine_name(dep.engine)
    said = f"{name} {version}" if version else name
    fmt = method.format if method else dep.weights.label
    flag = f"--quantization {method.method}" if method else "quantized on load"
    stored = catalog_model_id(f"{dep.model.name}-{fmt}")
    checkpoint = f"a checkpoint stored in {fmt} ({stored})" if stored \
        else f"a checkpoint stored in {fmt}"
    since = streams_from(method, dep.engine) if method else None
    fixes = [f"serve {checkpoint} (--weights {fmt} sizes one)", "spread it over more GPUs"]
    if since:
        fixes.append(f"run vLLM {since} or later, which quantizes each weight as it loads")
    return (f"{said} loads {dep.model.name}'s 16-bit weights before quantizing them to {fmt} "
            f"({flag}): {pool.load_peak_bytes / GIB:,.1f} GiB per GPU at start-up, more than "
            f"the {pool.load_budget_bytes / GIB:,.1f} GiB it loads into, so it runs out of "
            f"memory loading them; {', '.join(fixes[:-1])} or {fixes[-1]}")
