"""The one run of a server a window of scrapes is read over: where the whole server restarted
between two scrapes (its process start moving later, or every engine core's counters falling),
the scrapes on either side are two runs, and observe reads one of them — the latest run of two
or more scrapes — rather than counting from zero across the restart. Counted across it, a rate
divides the new run's counts by the whole window, the unseen time between the last scrape
before the crash and the crash included, and mixes two runs that may have served other
settings (another pool, another --max-num-seqs).
"""

from __future__ import annotations

import itertools

from ridgeline.engine_metrics import PROCESS_START
from ridgeline.errors import InputError
from ridgeline.observe_window import (
    RESTART_SIGNS,
    SERVER_CORE,
    Restarts,
    core_of,
    find_restarts,
    moved_starts,
    starts_by_core,
    window_at,
)
from ridgeline.prometheus import Scrape

MIN_RUN_SCRAPES = 2  # a rate needs two scrapes of one run


def server_restarts(scrapes: list[Scrape], restarts: Restarts) -> dict[int, str]:
    """Each interval (index of its first scrape) in which the whole server restarted, with
    what said so: its own process start moved later (one with no core label:
    find_restarts marks every core), or every engine core whose counters the later scrape
    holds restarted (one core's restart beside others that run on, by its counters or by a
    process start labelled with it, leaves the others' counts whole: observe_window counts
    it apart)."""
    found: dict[int, str] = {}
    for i in sorted({i for i, _ in restarts}):
        signs = {core: fell for (j, core), fell in restarts.items() if j == i}
        if SERVER_CORE in moved_starts(scrapes[i], scrapes[i + 1]):
            found[i] = f"{PROCESS_START} moved later"
            continue
        cores = {core_of(labels) for name in RESTART_SIGNS
                 for labels, _ in scrapes[i + 1].samples.get(name, [])}
        if cores and cores <= signs.keys():
            fell = list(dict.fromkeys(name for names in signs.values() for name in names
                                      if name != PROCESS_START))
            moved = any(PROCESS_START in names for names in signs.values())
            found[i] = "; ".join(
                [", ".join(fell[:2]) + (", …" if len(fell) > 2 else "") + " went down"] * bool(fell)
                + [f"{PROCESS_START} moved later"] * moved)
    return found


def restarted_at(scrapes: list[Scrape], i: int, why: str) -> str:
    """When the server restarted between scrapes ``i`` and ``i + 1`` and what said so
    (``why``), as the words after "the server restarted": the time its own PROCESS_START
    gives where that moved ('10 s into the window (process_start_time_seconds 1,764,900,000
    → 1,764,900,110), between the scrapes 0 s and 30 s into the window'), else the interval
    and ``why``. vLLM exports PROCESS_START from prometheus_client's default registry (its
    process collector) with one API server, none under --api-server-count > 1 (a
    multiprocess registry: vllm/v1/metrics/prometheus.py get_prometheus_registry,
    vllm/entrypoints/cli/serve.py, 0.34.0); SGLang never (engine_metrics.PROCESS_START): its
    restarts show only by counters that fall."""
    between = window_at(scrapes, i)
    was = starts_by_core(scrapes[i]).get(SERVER_CORE)
    start = starts_by_core(scrapes[i + 1]).get(SERVER_CORE)
    if was is None or start is None or SERVER_CORE not in moved_starts(scrapes[i],
                                                                        scrapes[i + 1]):
        return f"{between} ({why})"
    into = start - (scrapes[0].time_s or 0.0)
    fell = why.removesuffix(f"{PROCESS_START} moved later").removesuffix("; ")
    return (f"{into:,.0f} s into the window ({PROCESS_START} {was:,.0f} → {start:,.0f}), "
            f"{between}" + (f" ({fell})" if fell else ""))


def one_run(scrapes: list[Scrape]) -> tuple[list[Scrape], str | None]:
    """The scrapes of one run of the server, and a note saying which were kept where it
    restarted: the scrapes after its last restart where two or more follow it, else the run
    before it, of two or more; refused where no run has two. Scrapes at 0, 30, 60 and 90 s
    with a restart between 30 and 60 s: the two at 60 and 90 s, a 30 s window."""
    cuts = server_restarts(scrapes, find_restarts(scrapes))
    if not cuts:
        return scrapes, None
    edges = [0, *(i + 1 for i in cuts), len(scrapes)]
    runs = list(itertools.pairwise(edges))  # [first, end) of each run
    kept = next((run for run in reversed(runs) if run[1] - run[0] >= MIN_RUN_SCRAPES), None)
    times = [(s.time_s or 0.0) - (scrapes[0].time_s or 0.0) for s in scrapes]
    others = f" (one of {len(cuts)} restarts in the window)" if len(cuts) > 1 else ""
    if kept is None:
        last = max(cuts)
        raise InputError(
            f"the server restarted {restarted_at(scrapes, last, cuts[last])}{others}, and no "
            f"run of it has {MIN_RUN_SCRAPES} scrapes to give a rate (counted across a "
            "restart, a rate takes in the unseen time before it and mixes two runs): scrape "
            f"it {MIN_RUN_SCRAPES} times or more after the restart")
    first, end = kept
    span = f"{times[first]:,.0f} s to {times[end - 1]:,.0f} s"
    if end == len(scrapes):
        at = first - 1
        note = (f"the server restarted {restarted_at(scrapes, at, cuts[at])}{others}: read "
                f"the {end - first} scrapes after it ({span}), not counted across it (the "
                "unseen time before the restart, and a run perhaps of other settings)")
    else:
        at = end - 1
        note = (f"the server restarted {restarted_at(scrapes, at, cuts[at])}{others}, with "
                f"fewer than {MIN_RUN_SCRAPES} scrapes after it: read the {end - first} "
                f"scrapes before it ({span}), not counted across it")
    return scrapes[first:end], note
