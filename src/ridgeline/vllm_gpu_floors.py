"""Where a vLLM release runs nothing, no fp8 weights, or no fp8 KV cache on an older NVIDIA
card, by release (engines.json vllm.gpu_floors, each rule with the wheels and source lines
it was read from).

A rule names what it gates (``engine``, ``fp8_weights``, ``fp8_kv``), the compute capability
(x 10) below which the release refuses it, and the releases it holds in: ``from`` the first,
``until`` the first it no longer does (none: to the newest modelled, which is what a run
without --engine-version is priced as). vLLM 0.34 on a T4 (7.5): fp8 weights run weight-only
through FP8 Marlin (Fp8Config's floor 7.5 since 0.14), an fp8 cache does not (FlashInfer,
which read it there, needs 8.0 from 0.24; Triton refuses fp8 below 8.9); on a V100 (7.0) the
PyPI wheels from 0.20 carry no kernels at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from ridgeline.datafiles import engine_defaults
from ridgeline.engine_quantization import NVIDIA_FAMILY_CAPABILITY
from ridgeline.engine_versions import release_before, sized_version
from ridgeline.vllm_memory import parse_version

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.hardware import Accelerator

FP8_WEIGHT_FORMATS = ("fp8", "fp8-block")  # engine_platforms.FP8_FORMATS: Fp8Config's
# what each rule refuses, in the refusal's words, and the way out in another format
GATED = {"engine": ("does not run", "--engine llama.cpp-cuda"),
         "fp8_weights": ("runs no fp8 weights", "--weights fp16, awq-int4 or gptq-int4"),
         "fp8_kv": ("keeps no fp8 KV cache", "--kv-dtype fp16")}


@dataclass(frozen=True)
class GpuFloor:
    """One release span's floor: below ``min_capability`` (x 10) ``what`` is refused."""

    what: str
    min_capability: int
    since: str | None  # the first release it holds in (None: every release before ``until``)
    until: str | None  # the first release it no longer holds in (None: the newest)
    why: str  # the reason, in the refusal's words
    source: str

    def holds_at(self, version: str | None) -> bool:
        """Whether this floor holds at ``version`` (None: the newest modelled release)."""
        if self.since is not None and release_before("vllm", version, self.since):
            return False
        return self.until is None or (version is not None
                                      and release_before("vllm", version, self.until))


@cache
def gpu_floors() -> tuple[GpuFloor, ...]:
    rows = engine_defaults("vllm")["gpu_floors"]["rules"]
    return tuple(GpuFloor(r["what"], int(r["min_capability"]), r.get("from"), r.get("until"),
                          r["why"], r["source"]) for r in rows)


def _capability(tenths: int) -> str:
    """75 -> '7.5'."""
    return f"{tenths // 10}.{tenths % 10}"


def _holding_floor(what: str, acc: Accelerator, version: str | None) -> GpuFloor | None:
    """The floor of ``what`` holding at ``version`` that ``acc`` is below, or None: an NVIDIA
    card of a family whose highest compute capability is below it; a card of no family the
    table knows, and other vendors, are taken at their word."""
    has = NVIDIA_FAMILY_CAPABILITY.get(acc.family) if acc.vendor == "nvidia" else None
    if has is None:
        return None
    return next((f for f in gpu_floors() if f.what == what and f.holds_at(version)
                 and has[1] < f.min_capability), None)


def floor_problem(what: str, acc: Accelerator, version: str | None = None,
                  lever: str | None = None, release_way: str | None = None) -> str:
    """Why vLLM at ``version`` refuses ``what`` on ``acc``, or "": a floor holding at that
    release the card is below (the t4's 7.5 against 0.32's 8.0 for an fp8 cache:
    ``_holding_floor``). Its way out is ``lever`` (None: GATED's, "" none: plan sizes no
    llama.cpp), or a release that runs it (``release_way``: None the releases no floor
    refuses it in, as --engine-version takes them; "" none, a caller saying what instead)."""
    floor = _holding_floor(what, acc, version)
    if floor is None:
        return ""
    has = NVIDIA_FAMILY_CAPABILITY[acc.family]
    low, high = (_capability(c) for c in has)
    span = low if low == high else f"{low} to {high}"
    verb, default = GATED[what]
    runs = _releases_running(what, has[1])
    if release_way is None:
        release_way = f"an --engine-version {runs}" if runs else ""
    ways = [w for w in (default if lever is None else lever, release_way) if w]
    release = version or f"{sized_version('vllm', None)} (the release priced without " \
                         "--engine-version)"
    return (f"vLLM {release} {verb} on the {acc.id} ({acc.family} family, compute capability "
            f"{span}; it needs {_capability(floor.min_capability)} or more): {floor.why}"
            + (f"; give {', or '.join(ways)}" if ways else ""))


def _releases_running(what: str, capability: int) -> str:
    """The releases no floor of ``what`` refuses a card of ``capability`` in, among those
    read (engines.json vllm.gpu_floors.read_from on), in --engine-version's words:
    'from 0.12 and below 0.24' for an fp8 cache on a T4; "" where none."""
    read_from = str(engine_defaults("vllm")["gpu_floors"]["read_from"])
    rules = [f for f in gpu_floors() if f.what == what]
    bounds = sorted({read_from, *(b for f in rules for b in (f.since, f.until)
                                  if b is not None and not release_before("vllm", b, read_from))},
                    key=parse_version)
    spans = []
    for start, end in zip(bounds, [*bounds[1:], None]):
        if any(f.holds_at(start) and capability < f.min_capability for f in rules):
            continue
        spans.append(f"{start} or later" if end is None else f"from {start} and below {end}")
    return " or ".join(spans)


def running_releases(what: str, acc: Accelerator) -> tuple[str, ...]:
    """The minor releases (x.y) no floor of ``what`` refuses ``acc`` in, oldest first, from
    the first read (vllm.gpu_floors.read_from, 0.11) to the newest modelled (0.34): fp8
    weights on a T4 0.14 … 0.34; () for a card of no family the table knows."""
    has = NVIDIA_FAMILY_CAPABILITY.get(acc.family) if acc.vendor == "nvidia" else None
    if has is None:
        return ()
    first = parse_version(str(engine_defaults("vllm")["gpu_floors"]["read_from"]))
    newest = parse_version(str(sized_version("vllm", None)))
    minors = [f"{first[0]}.{m}" for m in range(first[1], newest[1] + 1)] \
        if first[0] == newest[0] else []
    return tuple(r for r in minors if not any(
        f.what == what and f.holds_at(r) and has[1] < f.min_capability for f in gpu_floors()))


def refusing_floor(dep: Deployment, version: str | None = None) -> str:
    """What of ``dep`` a vLLM floor at ``version`` refuses on its card ("engine",
    "fp8_weights", "fp8_kv", GATED's keys), the first as ``gpu_floor_problem`` asks them, or
    "" where none does (another engine too)."""
    if dep.engine != "vllm":
        return ""
    asked = ("engine",
             *(("fp8_weights",) if {f for _, f in dep.weights.formats}
               & set(FP8_WEIGHT_FORMATS) else ()),
             *(("fp8_kv",) if dep.kv.id.startswith("fp8") else ()))
    return next((w for w in asked if _holding_floor(w, dep.accelerator, version)), "")


def gpu_floor_problem(dep: Deployment, version: str | None = None,
                      engine_lever: str | None = None, format_lever: str | None = None) -> str:
    """Why vLLM at ``version`` does not start ``dep`` on its card, or "": the release's
    wheels carry no kernels for it (``engine``, its way out ``engine_lever``: floor_problem's
    ``lever``), its fp8 weights (``fp8_weights``) or its fp8 KV cache (``fp8_kv``) are below
    the release's floor there (engines.json vllm.gpu_floors; their way out ``format_lever``:
    None GATED's flag, "" a release alone, as plan, which takes no --weights, says it)."""
    what = refusing_floor(dep, version)
    if not what:
        return ""
    return floor_problem(what, dep.accelerator, version,
                         engine_lever if what == "engine" else format_lever)
