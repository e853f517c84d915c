"""How SGLang sizes its static KV pool, release by release.

SGLang gives the pool ``mem_fraction_static`` of the memory free after its distributed
start-up (the CUDA context and the tensor-parallel communicators), less the weights; the rest,
1 − mem_fraction_static, holds activations and CUDA graphs. With the flag unset, the fraction
came from a table by tensor-parallel size (to v0.4.7), then from a reserve by card tier and
parallel size (PR #7054, v0.4.7.post1 to v0.5.2), then from a reserve summed from the prefill
chunk, the CUDA-graph batch and the ranks (v0.5.3 on). The rules are data (engines.json
``sglang``), each with its source. sglang_pool.py builds the KVPool from these defaults, a
recurrent hybrid's state pool carved out of it first (sglang_hybrid.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ridgeline.datafiles import load_data
from ridgeline.deployment import Deployment
from ridgeline.errors import InputError
from ridgeline.parallel import LOW_LATENCY_FABRICS
from ridgeline.units import GIB
from ridgeline.vllm_memory import parse_version

TP_TABLE, TIER_RESERVE, RESERVED_MIB = "tp-table", "tier-reserve", "reserved-mib"
ERA_LABELS = {TP_TABLE: "v0.3-v0.4.7, a fraction by TP size",  # .post1 is the next era
              TIER_RESERVE: "v0.4.7.post1-v0.5.2, a reserve by card tier and TP × PP",
              RESERVED_MIB: "v0.5.3+, a reserve for the prefill chunk, graphs and ranks"}


def sglang_data() -> dict[str, Any]:
    data: dict[str, Any] = load_data("engines.json")["sglang"]
    return data


def sglang_release(version: str) -> tuple[int, ...]:
    """A release's order, a .post release after its base and the one before it (0.4.7 <
    0.4.7.post1 < 0.4.8; 0.5.3.post2 < 0.5.3.post3)."""
    post = re.search(r"post(\d+)", version)
    return (*parse_version(version), int(post.group(1)) if post else 0)


def sglang_era(version: str | None) -> str:
    """Which default rule SGLang ``version`` follows (default: the newest)."""
    if version is None:
        return RESERVED_MIB
    d, wanted = sglang_data(), sglang_release(version)
    newest = str(d["newest_checked"])
    if wanted[0] > parse_version(newest)[0]:
        raise InputError(f"SGLang {version} is no release ridgeline knows of (the newest "
                         f"modelled is {newest}; later 0.x releases follow its rules)")
    if wanted < sglang_release(d["legacy_fraction"]["from"]):
        raise InputError(f"SGLang {version} is older than any version ridgeline models (its "
                         f"memory defaults are read from {d['legacy_fraction']['from']} on)")
    if wanted < sglang_release(d["legacy_fraction"]["before"]):
        return TP_TABLE
    if wanted < sglang_release(d["tier_reserve"]["before"]):
        return TIER_RESERVE
    return RESERVED_MIB


@dataclass(frozen=True)
class SGLangMemoryDefaults:
    """What SGLang derives from the card's memory when the flags are unset."""

    chunked_prefill_size: int
    cuda_graph_max_bs: int
    reserved_mib: float  # activations, CUDA graphs and buffers kept out of the static pool
    mem_fraction_static: float
    era: str = RESERVED_MIB


def _below(rows: list[list[Any]], gib: float) -> list[Any]:
    """The first tier row whose bound (GiB; None: no bound) the card is below."""
    return next(row for row in rows if row[0] is None or gib < row[0])


def sglang_memory_defaults(total_bytes: float, tp: int = 1, pp: int = 1,
                           chunked_prefill_size: int | None = None,
                           version: str | None = None) -> SGLangMemoryDefaults:
    """SGLang ``version``'s defaults for a card of ``total_bytes``: the prefill chunk and
    CUDA-graph batch by memory tier, then the memory it reserves for them and
    ``mem_fraction_static`` = (memory − reserved) ÷ memory (before v0.4.7.post1: a table by
    tensor-parallel size)."""
    d = sglang_data()
    gpu_mib = total_bytes / 2**20
    era = sglang_era(version)
    if era == TP_TABLE:
        rows = d["legacy_fraction"]["rows"]
        fraction = float(next(f for least, f in rows if tp >= least))
        small = gpu_mib < 25_000  # below it: shorter chunks and fewer graph batches
        chunk = chunked_prefill_size or (2048 if small else 8192)
        graphs = (8 if tp < 4 else 80) if small else 160
        return SGLangMemoryDefaults(chunk, graphs, gpu_mib * (1 - fraction), fraction, era)
    if era == TIER_RESERVE:
        t = d["tier_reserve"]
        gib = gpu_mib / 1024
        _, base, per_rank = _below(t["rows"], gib)
        reserved = (base + per_rank * tp * pp) * 1024
        chunk = chunked_prefill_size or int(_below(t["chunked_prefill_size"], gib)[1])
        graphs = int(t["cuda_graph_max_bs_below_35_gib"][tp >= 4]) if gib < 35 \
            else int(t["cuda_graph_max_bs"])
        return SGLangMemoryDefaults(chunk, graphs, reserved,
                                    round((gpu_mib - reserved) / gpu_mib, 3), era)
    tier = _below(d["memory_tiers"]["rows"], gpu_mib / 1024)
    _, tier_chunk, graphs_small_tp, graphs_large_tp = tier
    chunk = chunked_prefill_size or int(tier_chunk)
    graphs = int(graphs_small_tp if tp < 4 else graphs_large_tp)
    r = d["reserved_mib"]
    reserved = (r["base"] + r["per_prefill_token"] * max(chunk, r["min_prefill_tokens"])
                + r["per_graph_batch"] * graphs + r["per_8_ranks"] * tp * pp / 8)
    if gpu_mib > r["floor_above_gib"] * 1024:
        reserved = max(reserved, r["floor_mib"])
    return SGLangMemoryDefaults(chunk, graphs, reserved, round((gpu_mib - reserved) / gpu_mib, 3),
                                era)


def sglang_startup_bytes(dep: Deployment) -> float:
    """What SGLang's distributed start-up holds before it measures the memory its fraction
    applies to: the CUDA context, and at TP > 1 the communicators (NCCL and custom all-reduce
    buffers: 1.25 GiB on eight NVLink H100s, 0.13 on four PCIe cards, logged as "mem
    usage=… GB", SGLang's GB being GiB)."""
    s = sglang_data()["startup"]
    gib = float(s["context_gib"])
    if dep.expert_ranks > 1:  # its --tp-size, data-parallel attention's ranks included
        nvlink = (dep.accelerator.link_kind or "").lower().startswith(LOW_LATENCY_FABRICS)
        gib += float(s["communicators_gib_nvlink" if nvlink else "communicators_gib_pcie"])
    return gib * GIB


def sglang_requests_asked(capacity_tokens: int, context_len: int, given: int | None = None,
                          version: str | None = None) -> int:
    """The requests SGLang sizes its request pool for (max_num_reqs), before it halves the
    token capacity: 512 per context_len of its token capacity, clamped to 2,048–4,096, or
    the value given. Before v0.5 one more (the request pool's spare slot)."""
    rule = sglang_data()["max_running_requests"]
    seats = given or min(max(int(capacity_tokens / context_len * rule["per_context"]),
                             rule["least"]), rule["most"])
    if given is None and version is not None and parse_version(version) < (0, 5):
        seats += 1
    return int(seats)


def sglang_max_running_requests(capacity_tokens: int, context_len: int,
                                given: int | None = None, version: str | None = None) -> int:
    """SGLang's max_running_requests: the requests it asks (sglang_requests_asked), at most
    half the capacity, and at least one."""
    return max(1, min(sglang_requests_asked(capacity_tokens, context_len, given, version),
                      capacity_tokens // 2))


def past_checked(version: str | None) -> str:
    """A caution where SGLang ``version`` is newer than the newest whose rules were read, or
    ""."""
    d = sglang_data()
    if version is None or parse_version(version) <= parse_version(d["newest_checked"]):
        return ""
    return (f"SGLang {version} is newer than {d['newest_checked']}, the newest whose memory "
            f"defaults ridgeline has read: {d['newest_checked_note']}")
