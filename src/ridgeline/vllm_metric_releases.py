"""The vLLM releases a /metrics page can come from, bounded by the metric names it carries.

vLLM renames a metric by adding the new name beside the old, hiding the old one a minor
release later (back only under --show-hidden-metrics-for-version X.Y), and removing it the
release after (its metrics deprecation policy, as PR #29330 quotes it). So an old name on a
page caps the release, and a new one floors it. Each bound below was read in
vllm/v1/metrics/loggers.py and vllm/engine/metrics.py (V0) of the release wheels 0.10.0,
0.10.1, 0.10.2, 0.11.0, 0.11.1, 0.12.0, 0.13.0 and 0.32.0–0.34.0; releases between 0.13 and
0.32 were not read. Where a page names no cache_config_info and no --engine-version is given,
observe sizes the pool at the newest release the names allow (cli_observe.launched): a V0
page is not sized as 0.34 (block size 64, utilization 1.0: 11 % more pool on an H100).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ridgeline.vllm_memory import parse_version


@dataclass(frozen=True)
class NameBound:
    """One metric name's bound on the release: present (and ``without`` absent), the page is
    from ``first`` or later and ``last`` or earlier (None: that side unbounded)."""

    name: str
    first: str | None
    last: str | None
    why: str  # where it was read, in a few words
    without: str = ""  # a name that must be absent for the bound to hold
    engine: str = ""  # "V0" where only the V0 engine exports the name


GPU_CACHE = "vllm:gpu_cache_usage_perc"
KV_CACHE = "vllm:kv_cache_usage_perc"
TPOT = "vllm:time_per_output_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
BOUNDS = (
    NameBound(GPU_CACHE, None, "0.11", "shown by default through 0.10.2, only under "
              "--show-hidden-metrics-for-version 0.10 in 0.11, gone in 0.12.0 (PR #29330)"),
    NameBound("vllm:gpu_prefix_cache_hits_total", None, "0.11", "as gpu_cache_usage_perc: "
              "hidden in 0.11, gone in 0.12.0 (PR #29330)"),
    NameBound(GPU_CACHE, None, "0.10", f"without {KV_CACHE}, which V1 exports beside it from "
              "0.10.0 at the latest (PR #18354) and V0 never: V0 (0.10 its last), or V1 "
              "before 0.10", without=KV_CACHE),
    NameBound(TPOT, None, "0.10.1", f"without {ITL}, which 0.10.2 added beside it in V1 and "
              "V0 (PR #24110)", without=ITL),
    NameBound(TPOT, None, "0.13", "shown by default through 0.11, only under "
              "--show-hidden-metrics-for-version 0.11 in 0.12 and 0.13, removed by PR #32661 "
              "(January 2026; none in 0.32.0)"),
    NameBound(ITL, "0.10.2", None, "added in 0.10.2 (PR #24110)"),
    NameBound("vllm:num_requests_swapped", None, "0.9", "V0's alone (V1 never swapped), "
              "hidden from 0.9 (PR #15458), gone from 0.10.0's V0", engine="V0"),
)


@dataclass(frozen=True)
class ReleaseRange:
    """The releases a page's names allow: from ``first`` to ``last`` (None: unbounded on
    that side), ``engine`` "V0" where a name only V0 exports is present, and the bounds that
    set them."""

    first: str | None
    last: str | None
    engine: str
    bounds: tuple[NameBound, ...]

    @property
    def consistent(self) -> bool:
        """False where the names contradict each other (a floor past the cap)."""
        return self.first is None or self.last is None or \
            parse_version(self.first) <= cap_key(self.last)

    @property
    def newest(self) -> str | None:
        """The release to size at: the cap, with V0 named where only V0 exports a name
        ('0.9 V0'); None without a cap or where the names contradict each other."""
        if self.last is None or not self.consistent:
            return None
        return f"{self.last} V0" if self.engine else self.last

    def text(self) -> str:
        """'0.10.2 to 0.11', '0.10.1 or earlier', '0.10.2 or later'."""
        if self.first and self.last:
            return f"{self.first} to {self.last}"
        return f"{self.last} or earlier" if self.last else f"{self.first} or later"

    def reasons(self) -> str:
        """The names that set the range and why each bounds it, '; '-joined
        ('vllm:inter_token_latency_seconds: 0.10.2 or later, added in 0.10.2 (PR #24110)')."""
        return "; ".join(f"{b.name}" + (f" without {b.without}" if b.without else "")
                         + (f": {b.last} or earlier, " if b.last else f": {b.first} or later, ")
                         + b.why for b in self.bounds)


def release_range(names: set[str]) -> ReleaseRange | None:
    """The releases the metric ``names`` of a page allow (histograms by their base name), or
    None where no name bounds them. A page with gpu_cache_usage_perc and
    time_per_output_token_seconds, no kv_cache_usage_perc nor inter_token_latency_seconds:
    0.10.1 or earlier. Only the tightest bound on each side is kept."""
    held = [b for b in BOUNDS if b.name in names and not (b.without and b.without in names)]
    if not held:
        return None
    caps = [b for b in held if b.last is not None]
    floors = [b for b in held if b.first is not None]
    cap = min(caps, key=lambda b: cap_key(str(b.last)), default=None)
    floor = max(floors, key=lambda b: parse_version(str(b.first)), default=None)
    kept = tuple(b for b in (floor, cap) if b is not None)
    return ReleaseRange(None if floor is None else floor.first,
                        None if cap is None else cap.last,
                        "V0" if any(b.engine for b in held) else "", kept)


def cap_key(last: str) -> tuple[int, ...]:
    """A cap as the newest release it allows: '0.11' is every 0.11.x, past 0.11.2;
    '0.10.1' that release alone."""
    parts = parse_version(last)
    return parts if last.count(".") > 1 else (*parts[:2], 10**9)


def page_names(names: Iterable[str]) -> set[str]:
    """A scrape's metric names, with each histogram's base name beside its series'
    (vllm:inter_token_latency_seconds for …_bucket, _sum, _count)."""
    held = set(names)
    return held | {name.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
                   for name in held}
