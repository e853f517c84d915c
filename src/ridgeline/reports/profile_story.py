"""How an engine profile's figures read in --explain: its shares of peak and bandwidth on a
card, and its fitted fixed costs. decode, prefill and simulate give one account of them."""

from __future__ import annotations

from ridgeline.engines import MATVEC_TOKENS, EngineProfile
from ridgeline.explain import Quantity, q
from ridgeline.hardware import Accelerator

NOTHING_S = 1e-7  # a fitted fixed cost under 0.1 µs: the fit drove it to nothing


def overhead_q(name: str, seconds: float, source: str) -> Quantity:
    """A fitted fixed cost in µs; one the fit drove to (next to) nothing reads as 0."""
    if seconds < NOTHING_S:
        return q(name, 0.0, "µs", f"{source}: fitted to nothing (the data need no such cost)")
    return q(name, seconds * 1e6, "µs", source)


def share_qs(profile: EngineProfile, acc: Accelerator,
             tokens: int | None = None) -> list[Quantity]:
    """The compute share and the bandwidth share a step of ``tokens`` tokens reaches. None:
    steps of every size (a simulation); where the engine has a ceiling on matrix-vector
    steps, their share comes first, then a larger step's."""
    src = f"{profile.engine} profile"
    out = [q("compute share", profile.compute_for(acc), "",
             f"{src}: {profile.compute_story(acc)}; {profile.source}")]
    sizes = [tokens] if tokens is not None else (
        [1, MATVEC_TOKENS + 1] if profile.bandwidth_cap_bytes_per_s is not None
        else [MATVEC_TOKENS + 1])
    for size in sizes:
        name = "bandwidth share" + (f", steps of ≤ {MATVEC_TOKENS} tokens"
                                    if tokens is None and size <= MATVEC_TOKENS else "")
        out.append(q(name, profile.bandwidth_for(acc, size), "",
                     f"{src}: {profile.bandwidth_story(acc, size)}"))
    return out
