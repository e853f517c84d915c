"""llama.cpp's ``--fit``: the placement it picks when the weights and the cache overflow a GPU.

Since PR #16653 (merged December 2025; in build 7437) llama.cpp starts with ``--fit on`` and
``-ngl auto``: it projects the memory of the whole model on the GPU and, when that leaves less
than ``--fit-target`` (1024 MiB) free, changes what the user did not set. A context the user
set is kept (ridgeline always has one). Then:

- a dense model keeps the output layer and the last layers on the GPU, as many as fit
  (``-ngl`` lowered, whole layers, back to front);
- an MoE model whose dense weights fit with every expert on the host keeps every layer on
  the GPU and moves the routed experts of the *last* layers to the host, as few as it must
  (``--n-cpu-moe N`` moves the *first* N; for a model of alike layers the cost is the same).
  When even the dense weights overflow, it lowers ``-ngl`` with every GPU layer's experts on
  the host.

The fit also tries to keep a third or two thirds of one more layer's experts on the GPU (its
"partial layer"); ridgeline leaves that layer's experts on the host, so the placement is at
most one layer's experts more pessimistic than llama.cpp's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ridgeline.datafiles import load_data
from ridgeline.errors import InputError
from ridgeline.units import MIB

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.memory import EngineSettings
    from ridgeline.offload import HostOffload


def fit_constants() -> dict[str, Any]:
    """The --fit block of engines.json: its margin, minimum context and sources."""
    return dict(load_data("engines.json")["llama.cpp"]["fit"])


def default_fit_target_bytes() -> float:
    """--fit-target: the memory --fit leaves free on each device."""
    return float(fit_constants()["target_mib"]) * MIB


def holds(dep: Deployment, settings: EngineSettings, context: int, sequences: int,
          margin_bytes: float) -> bool:
    """Whether ``sequences`` conversations of ``context`` cells fit with ``margin_bytes`` free."""
    from ridgeline.memory import conversations, device_memory_bytes, kv_pool

    total = device_memory_bytes(dep.accelerator) - margin_bytes
    if total <= 0:
        return False
    pool = kv_pool(dep, replace(settings, max_model_len=context), total_bytes=total)
    return pool.rest_bytes >= 0 and conversations(pool, dep, context) >= sequences


def _most(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """The largest n in [lo, hi] with ok(n), for ok true below some point and false above."""
    if not ok(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def fit_placement(dep: Deployment, settings: EngineSettings, context: int, sequences: int,
                  template: HostOffload, margin_bytes: float | None = None) -> Deployment:
    """``dep`` as llama.cpp's --fit would place it for ``sequences`` × ``context`` cells: whole
    when it fits, else with the layers or experts --fit moves to the host. ``template`` carries
    the host's bandwidth, link and RAM. Raises "does not fit" when even every layer on the
    host leaves the GPU short (the compute buffer alone), or the host's RAM overflows."""
    if not dep.engine.startswith("llama.cpp"):
        raise InputError(f"-ngl auto is llama.cpp's --fit; {dep.engine} keeps every weight on "
                         "the GPU")
    margin = default_fit_target_bytes() if margin_bytes is None else margin_bytes
    whole = replace(dep, offload=None)
    if holds(whole, settings, context, sequences, margin):
        return whole
    n = dep.model.num_layers

    def placed(gpu_layers: int, expert_layers: int) -> Deployment:
        offload = replace(template, gpu_layers=gpu_layers, cpu_expert_layers=expert_layers,
                          experts_last=True, chosen_by_fit=True)
        return dep.offloaded(offload)

    def fits(candidate: Deployment) -> bool:
        return holds(candidate, settings, context, sequences, margin)

    if dep.model.moe is not None and fits(placed(n + 1, n)):
        fewest = n - (_most(0, n, lambda k: fits(placed(n + 1, n - k))) or 0)
        return placed(n + 1, fewest)
    experts = n if dep.model.moe is not None else 0
    most = _most(0, n + 1, lambda ngl: fits(placed(ngl, experts)))
    if most is None:
        raise InputError(f"does not fit: with every layer of {dep.model.name} in host memory "
                         f"the GPU still cannot hold the compute buffer and the cache's "
                         f"{sequences * context:,} cells with {margin / MIB:,.0f} MiB free "
                         "(--fit fails; a smaller -c or -ub)")
    return placed(most, experts)


def fit_note(margin_bytes: float | None) -> str:
    """One line on what the placement came from."""
    margin = default_fit_target_bytes() if margin_bytes is None else margin_bytes
    return (f"placed as llama.cpp's --fit places it (-ngl auto, {margin / MIB:,.0f} MiB left "
            f"free; {fit_constants()['since']})")

