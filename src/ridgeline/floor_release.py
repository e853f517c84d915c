"""The release a vLLM floor's refusal sends a deployment to, checked against its pool.

A floor (vllm_gpu_floors) knows which releases run fp8 weights, an fp8 cache or anything at
all on a card, not whether the deployment then fits: vLLM 0.14 and 0.15 run fp8 weights on a
T4, but load Llama-3.1-8B's 16-bit weights first (load_peak.py: 15.0 GiB on a 13.3 GiB
budget), so fit says DOES NOT FIT there and 0.16, which quantizes each weight as it loads, is
the first release that serves it. The refusal names the first release sized as fitting under
the flags given, or says that none is.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ridgeline.capacity import holds_one_at
from ridgeline.context_length import served_positions
from ridgeline.engine_versions import sized_version
from ridgeline.vllm_gpu_floors import floor_problem, refusing_floor, running_releases
from ridgeline.vllm_memory import parse_version

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.memory import EngineSettings


def sized_as_fitting(dep: Deployment, settings: EngineSettings, release: str) -> bool:
    """Whether vLLM ``release`` starts ``dep`` (no rule of deployment_problem refuses it
    there: fp8 weights on a T4 before 0.14, where its fp8 cache runs from 0.12) and holds
    one sequence at the max_model_len in force (``settings``'s, else the model's context; 1
    token where fit is to find it, under --target-concurrency): fit's verdict, its recurrent
    states at the release's dtype."""
    from ridgeline.quantization_gates import deployment_problem

    there = dep.with_state_settings(release, settings.mamba_ssm_dtype)
    if deployment_problem(there, release):
        return False
    length = settings.max_model_len or served_positions(dep.model, dep.engine) or 1
    return holds_one_at(there, replace(settings, engine_version=release), length)


def floor_refusal(dep: Deployment, version: str | None, settings: EngineSettings,
                  lever: str | None = None) -> str:
    """The refusal of ``dep`` by the vLLM floor holding at ``version`` (vllm_gpu_floors), its
    way out to a release narrowed to those ``sized_as_fitting`` under ``settings``: unchanged
    where each release that runs it fits; else the first that does and those after it in a
    row ('an
    --engine-version 0.16 or later' for Llama-3.1-8B fp8 on a T4 at 8,192 tokens, 0.14 and
    0.15 loading its 16-bit weights first); or, where none does, no release and a sentence
    that says so. "" where no floor refuses it; ``lever`` as floor_problem's."""
    what = refusing_floor(dep, version)
    if not what:
        return ""
    acc = dep.accelerator
    runs = running_releases(what, acc)
    fitting = [r for r in runs if sized_as_fitting(dep, settings, r)]
    if not runs or fitting == list(runs):
        return floor_problem(what, acc, version, lever)
    if not fitting:
        return (floor_problem(what, acc, version, lever, release_way="")
                + f"; no release that runs it ({runs[0]} to {runs[-1]}) is sized as fitting "
                f"it under these flags either (fit with --engine-version {runs[-1]} says why)")
    first = fitting[0]
    before = runs[runs.index(first) - 1]
    earlier = "" if first == runs[0] else (
        f"; at {runs[0]}" + (f" to {before}" if before != runs[0] else "") + " vLLM refuses "
        f"it or is sized as not fitting it: fit with --engine-version {runs[0]} says why")
    return floor_problem(what, acc, version, lever, release_way=f"an --engine-version "
                         f"{_onwards(first, runs, fitting)} (sized as fitting it under these "
                         f"flags{earlier})")


def _onwards(first: str, runs: tuple[str, ...], fitting: list[str]) -> str:
    """``first`` and the releases after it that fit in a row, in --engine-version's words:
    '0.16 or later' where the row reaches the newest modelled, 'from 0.16 and below 0.24'
    where it ends before (an fp8 cache on a T4 from 0.24), '0.16' where it is one release."""
    last = first
    for release in runs[runs.index(first) + 1:]:
        if release not in fitting or parse_version(release)[1] != parse_version(last)[1] + 1:
            break
        last = release
    if last == sized_version("vllm", None):
        return f"{first} or later"
    if last == first:
        return first
    major, minor = parse_version(last)[:2]
    return f"from {first} and below {major}.{minor + 1}"
