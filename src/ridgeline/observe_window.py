"""A metric's series over a window of scrapes, engine core by engine core: which core and rank a
series belongs to, the restarts the window holds, a series missing from a scrape or absent
from the first, and a counter's increase and a histogram's observations over the window, as
Prometheus' rate() takes each series. `observe` (observe.py) reads its rates, lengths and
latencies through them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from ridgeline.engine_metrics import (
    CACHED_PROMPT_TOKENS,
    E2E,
    EAGER_PREFIXES,
    GENERATION_SECONDS,
    GENERATION_TOKENS,
    ITL,
    PREEMPTIONS,
    PREFIX_CACHE_QUERIES,
    PROCESS_START,
    PROMPT_BY_SOURCE,
    PROMPT_TOKENS,
    REALTIME_TOKENS,
    REQUESTS,
    SCHEDULER_SECONDS,
    SPEC_COUNTERS,
    TTFT,
)
from ridgeline.errors import InputError
from ridgeline.observation import Observation
from ridgeline.prometheus import Histogram, Scrape

# the counters, and the histograms' counts, whose fall is a restart of their engine (a _sum or
# bucket that falls while its _count rises is no restart but a broken histogram: refused)
RESTART_SIGNS = (PREEMPTIONS + PROMPT_TOKENS + GENERATION_TOKENS + GENERATION_SECONDS
                 + REQUESTS + CACHED_PROMPT_TOKENS + tuple(PREFIX_CACHE_QUERIES.values())
                 + (REALTIME_TOKENS, PROMPT_BY_SOURCE) + SPEC_COUNTERS + SCHEDULER_SECONDS
                 + tuple(f"{n}_count" for n in TTFT + ITL + E2E))

# Labels of a metric's series in one server's scrape: a data-parallel core's own batch
# ("engine": vLLM V1; "dp_rank": SGLang's DP attention), ranks of one core that report the
# same requests (SGLang's schedulers: the tensor, pipeline, expert and context ranks), and
# the process of prometheus_client's multiprocess mode ("pid"). That client sums a counter's
# processes and drops the label; a gauge in its default "all" mode keeps one series per
# process, each that process's last value — vLLM's kv_cache_usage_perc until PR #28792
# (Nov 2025): with --api-server-count 8, one pid read 0.653 and seven 0.0 — so a gauge's
# copies are read at their highest, and only a counter's (a hand-merged file) added.
CORE_LABELS = ("engine", "dp_rank")
RANK_LABELS = ("tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank", "attn_cp_rank", "cp_rank")
SHARE_LABEL = "pid"
RESTART_MOVE_S = 1.0  # a process start that moves later by more than this is a new process
# the scraper's clock (scrape_time) and the server's (its process start) may part by this
CLOCK_SKEW_S = 60.0


def core_of(labels: dict[str, str]) -> tuple[str | None, ...]:
    return tuple(labels.get(label) for label in CORE_LABELS)


SERVER_CORE = core_of({})  # a series with no core label: the server's one engine, or process


def ranks_by_core(series: list[tuple[dict[str, str], float]],
                  keep: Callable[[dict[str, str]], bool] = lambda _: True,
                  gauge: bool = False) -> dict[tuple[str | None, ...], list[float]]:
    """A metric's values per data-parallel core, one per rank: a gauge's process copies at
    their highest, a counter's added (CORE_LABELS' comment)."""
    cores: dict[tuple[str | None, ...], dict[tuple[str | None, ...], float]] = {}
    for labels, v in series:
        if keep(labels):
            ranks = cores.setdefault(core_of(labels), {})
            rank = tuple(labels.get(label) for label in RANK_LABELS)
            was = ranks.get(rank)
            ranks[rank] = v if was is None else max(was, v) if gauge else was + v
    return {core: list(ranks.values()) for core, ranks in cores.items()}


def core_values(series: list[tuple[dict[str, str], float]],
                keep: Callable[[dict[str, str]], bool] = lambda _: True,
                gauge: bool = False) -> dict[tuple[str | None, ...], float]:
    """A metric's value per data-parallel core: its process copies as ranks_by_core reads
    them, its ranks (which report the same requests, or export the same counters)
    averaged."""
    return {core: sum(ranks) / len(ranks)
            for core, ranks in ranks_by_core(series, keep, gauge).items()}


def counter_by_core(scrape: Scrape, names: tuple[str, ...], modes: tuple[str, ...] = (),
                    label: str = "mode") -> dict[tuple[str | None, ...], float] | None:
    """A counter per core, each core's ranks counted once; only its series whose ``label``
    (SGLang's mode, vLLM's source) is one of ``modes``, if given. The first name present
    wins."""
    for name in names:
        if name in scrape.samples:
            return core_values(scrape.samples[name],
                               lambda labels: not modes or labels.get(label) in modes)
    return None


def counter_total(scrape: Scrape, names: tuple[str, ...], modes: tuple[str, ...] = (),
                  label: str = "mode") -> float | None:
    """A counter summed over the cores."""
    cores = counter_by_core(scrape, names, modes, label)
    return None if cores is None else sum(cores.values())


# (scrape pair, core) -> the series that fell between the two scrapes: that core restarted
Restarts = dict[tuple[int, tuple[str | None, ...]], list[str]]


def process_start_s(scrape: Scrape, core: tuple[str | None, ...] | None = None
                    ) -> float | None:
    """When the serving process started (PROCESS_START, unix seconds): the earliest of its
    series, so that every process exporting one had started by then; of ``core``, if given,
    the earliest of its own series (a start labelled with its engine or dp_rank), else of
    the server's (no core label); None without one."""
    by_core = starts_by_core(scrape)
    if core is None:
        return min(by_core.values()) if by_core else None
    return by_core.get(core, by_core.get(SERVER_CORE))


def starts_by_core(scrape: Scrape) -> dict[tuple[str | None, ...], float]:
    """The earliest PROCESS_START of each core's series (engine="1": 1,764,500,030), the
    server's own (no core label) under SERVER_CORE."""
    found: dict[tuple[str | None, ...], float] = {}
    for labels, v in scrape.samples.get(PROCESS_START, []):
        core = core_of(labels)
        found[core] = min(v, found.get(core, v))
    return found


def moved_starts(before: Scrape, after: Scrape) -> list[tuple[str | None, ...]]:
    """The cores whose process start (starts_by_core) moves later by more than
    RESTART_MOVE_S between two scrapes: a new process. SERVER_CORE among them is the
    server's own process (a start with no core label), every core's restart; an engine's
    own (engine="1", 1,764,400,000 s to 1,764,500,030 s) is that engine's alone."""
    was, now = starts_by_core(before), starts_by_core(after)
    return [core for core, start in now.items()
            if core in was and start > was[core] + RESTART_MOVE_S]


def find_restarts(scrapes: list[Scrape]) -> Restarts:
    """Each interval (index of its first scrape) in which an engine core restarted, with the
    series that fell: any series of a counter, or a histogram's count, of the core that goes
    down; or the process's start time (PROCESS_START) moving later: for every core where it
    is the server's (no core label), for that core alone where it is the core's own
    (engine="1": one data-parallel engine restarted, the others run on, moved_starts). A
    restart resets every series of the core at once (vLLM's, SGLang's and llama-server's
    metrics live in the engine process), so all of them count from zero after it — not only
    those that happen to have fallen below their old value: a counter at 50,000 that restarts
    and passes it by the next scrape would otherwise be subtracted across it."""
    found: Restarts = {}
    for i, (before, after) in enumerate(itertools.pairwise(scrapes)):
        for name in RESTART_SIGNS:
            was = {frozenset(labels.items()): v for labels, v in before.samples.get(name, [])}
            for labels, value in after.samples.get(name, []):
                old = was.get(frozenset(labels.items()))
                if old is not None and value < old:
                    fell = found.setdefault((i, core_of(labels)), [])
                    family = name.removesuffix("_count") if name.endswith("_count") else name
                    if family not in fell:
                        fell.append(family)
        _refuse_earlier_start(scrapes, i)
        _refuse_start_before_scrape(scrapes, i)
        for moved in moved_starts(before, after):
            cores = dict.fromkeys(core_of(labels) for name in RESTART_SIGNS
                                  for labels, _ in after.samples.get(name, []))
            for core in [moved] if moved != SERVER_CORE else cores or [SERVER_CORE]:
                fell = found.setdefault((i, core), [])
                if PROCESS_START not in fell:
                    fell.append(PROCESS_START)
        for (j, core), fell in found.items():
            if j == i and PROCESS_START not in fell:
                _refuse_fall_under_held_start(scrapes, i, core, fell)
                _refuse_held_counter(scrapes, i, core, fell)
    return found


def window_at(scrapes: list[Scrape], i: int) -> str:
    """'between the scrapes 0 s and 30 s into the window': the interval after scrape ``i``."""
    start = scrapes[0].time_s or 0.0
    return (f"between the scrapes {(scrapes[i].time_s or 0.0) - start:,.0f} s and "
            f"{(scrapes[i + 1].time_s or 0.0) - start:,.0f} s into the window")


def _starts(scrape: Scrape) -> dict[frozenset[tuple[str, str]], float]:
    """Each PROCESS_START series of a scrape, by its labels."""
    return {frozenset(labels.items()): v for labels, v in scrape.samples.get(PROCESS_START, [])}


def _refuse_earlier_start(scrapes: list[Scrape], i: int) -> None:
    """Refuse a process start (PROCESS_START, one series by its labels) that moves earlier
    by more than RESTART_MOVE_S between scrapes ``i`` and ``i + 1``: a process cannot start
    before it did, so the later page is another server's (a load balancer in front of
    replicas answers each scrape from any of them). Read as one run, the replica's lower
    counters were taken for a restart and the next page's for another: Llama-3.1-8B on one
    H100 read 194,600 generation tok/s."""
    before = _starts(scrapes[i])
    for labels, now in _starts(scrapes[i + 1]).items():
        was = before.get(labels)
        if was is not None and now < was - RESTART_MOVE_S:
            raise InputError(
                f"{PROCESS_START} moves earlier {window_at(scrapes, i)}, from {was:,.0f} s to "
                f"{now:,.0f} s ({was - now:,.0f} s before): a process cannot start before it "
                "did, so the scrapes are not one server's run (pages of two servers, as a "
                "load balancer in front of replicas answers them): scrape one server's own "
                "/metrics")


def _refuse_start_before_scrape(scrapes: list[Scrape], i: int) -> None:
    """Refuse a process start that moves later between scrapes ``i`` and ``i + 1`` yet lies
    before scrape ``i`` (by more than CLOCK_SKEW_S): the process that answered the later
    scrape was already running when another answered the earlier one, so it is no restart but
    a second server (a replica started after the first, behind one load balancer). Read as a
    restart, its lifetime's counts were taken as the window's."""
    before, after = scrapes[i], scrapes[i + 1]
    was, moved = starts_by_core(before), moved_starts(before, after)
    now = starts_by_core(after)
    late = [core for core in moved if before.time_s is not None
            and now[core] < before.time_s - CLOCK_SKEW_S]
    if not late or before.time_s is None:
        return
    started, now_s = was[late[0]], now[late[0]]
    raise InputError(
        f"{PROCESS_START} moves later {window_at(scrapes, i)}"
        + (f" ({core_name(late[0])})" if core_name(late[0]) else "")
        + f", to {now_s:,.0f} s, yet that is "
        f"{before.time_s - now_s:,.0f} s before the earlier scrape, which a process started at "
        f"{started:,.0f} s answered: no restart, so the scrapes are not one server's run (pages "
        "of two servers, as a load balancer in front of replicas answers them): scrape one "
        "server's own /metrics")


def _refuse_fall_under_held_start(scrapes: list[Scrape], i: int, core: tuple[str | None, ...],
                                  fell: list[str]) -> None:
    """Refuse a counter's fall between scrapes ``i`` and ``i + 1`` where the core's process
    start (PROCESS_START: its own, else the server's) holds within RESTART_MOVE_S: no process
    restarted, and vLLM's, SGLang's and llama-server's counters only fall with theirs, so the
    fall is another server's page or a reset nothing explains. So too under data parallelism:
    vLLM counts every engine's metrics in its API server (vllm/v1/engine/async_llm.py, the
    output handler's record(engine_idx=...)), whose start is the one exported, so an engine
    core's own restart leaves them whole. Read as a restart, every other counter of the core
    counted from zero: vllm:generation_tokens_total falling alone under a held start read
    492,000 prompt tok/s for Llama-3.1-8B on one H100, a step of 253 ms."""
    was, held = process_start_s(scrapes[i], core), process_start_s(scrapes[i + 1], core)
    if was is None or held is None or abs(held - was) > RESTART_MOVE_S:
        return
    raise InputError(
        f"{fell[0]} went down {window_at(scrapes, i)}"
        + (f" ({core_name(core)})" if core_name(core) else "")
        + f" while {PROCESS_START} stayed at {held:,.0f} s: no process restarted, so this is no "
        "restart; the scrapes are not one server's run (an edited file, pages of two servers, "
        "a counter reset nothing explains): give scrapes of one")


def _refuse_held_counter(scrapes: list[Scrape], i: int, core: tuple[str | None, ...],
                         fell: list[str]) -> None:
    """Refuse a fall between scrapes ``i`` and ``i + 1`` that is no restart: a restart resets
    every counter of the core to zero, so one that holds the same value above zero across it
    (vllm:prompt_tokens_total at 102,400 in both) says the engine went on counting, and the
    counter that fell comes from elsewhere (an edited file, another server's page). Read as a
    restart, the held counter would count from zero: its whole value taken as the window's
    (10,240 prompt tok/s from a counter that never moved). A process start that moved later
    is a restart whatever else held."""
    before, after = scrapes[i], scrapes[i + 1]
    for name in RESTART_SIGNS:
        was = {frozenset(labels.items()): v for labels, v in before.samples.get(name, [])
               if core_of(labels) == core}
        for labels, value in after.samples.get(name, []):
            if value > 0 and was.get(frozenset(labels.items())) == value:
                raise InputError(
                    f"{fell[0]} went down {window_at(scrapes, i)} while {name} "
                    f"stayed at {value:,.0f}" + (f" ({core_name(core)})" if core_name(core)
                                                  else "")
                    + ": a restart resets every counter of the engine, so this is none; the "
                    "scrapes are not one server's run (an edited file, or pages of two "
                    "servers): give scrapes of one")


def note_restarts(scrapes: list[Scrape], restarts: Restarts, obs: Observation) -> None:
    start = scrapes[0].time_s or 0.0
    for (i, core), signs in restarts.items():
        fell = [name for name in signs if name != PROCESS_START]
        shown = ", ".join(fell[:3]) + (", …" if len(fell) > 3 else "")
        why = "; ".join([f"{shown} went down"] * bool(fell)
                        + [f"{PROCESS_START} moved later"] * (PROCESS_START in signs))
        obs.notes.append(
            f"{core_name(core) or 'the engine'} restarted between the scrapes "
            f"{(scrapes[i].time_s or 0.0) - start:,.0f} s and "
            f"{(scrapes[i + 1].time_s or 0.0) - start:,.0f} s into the window ({why}): every "
            "counter and histogram of it counts from zero after the restart, its work between "
            "the earlier scrape and the restart unseen")


def core_name(core: tuple[str | None, ...]) -> str:
    """'engine 1' or 'dp_rank 1' for a data-parallel core's labels; '' for a server's one."""
    return ", ".join(f"{label} {value}" for label, value in zip(CORE_LABELS, core, strict=True)
                     if value is not None)


def _note(obs: Observation, note: str) -> None:
    if note not in obs.notes:
        obs.notes.append(note)


def series_present(scrapes: list[Scrape], names: tuple[str, ...]) -> bool:
    return any(n in s.samples for n in names for s in scrapes)


def started_inside_s(scrapes: list[Scrape], j: int,
                     core: tuple[str | None, ...] | None = None) -> float | None:
    """Seconds into the window the server that answered scrape ``j`` started (``core``'s own
    process, where its start is labelled with it), where its process start (PROCESS_START)
    lies after the first scrape and by scrape ``j``: all it counted is then the window's.
    None without a start time, with one before the window, or with one after scrape ``j``
    (the scrapes' clock and the server's disagree)."""
    first, then = scrapes[0].time_s, scrapes[j].time_s
    started = process_start_s(scrapes[j], core)
    if first is None or then is None or started is None or not first < started <= then:
        return None
    return started - first


def _series_spans(scrapes: list[Scrape], name: str, sample: str,
                  keep: Callable[[dict[str, str]], bool], obs: Observation) -> bool:
    """Whether every series (label set, a histogram's buckets as one) of ``sample`` that
    ``keep`` accepts spans the window (_spans_window), each apart: a counter summed over its
    series would take one born mid-window (TensorRT-LLM's finished_reason="length" at its
    first such request) as an increase of its whole value."""
    present = [dict.fromkeys(frozenset((k, v) for k, v in labels.items() if k != "le")
                             for labels, _ in s.samples.get(sample, []) if keep(labels))
               for s in scrapes]
    series = list(dict.fromkeys(key for keys in present for key in keys))
    values: dict[str, set[str]] = {}
    for key in series:
        for k, v in key:
            values.setdefault(k, set()).add(v)
    varying = [k for k in sorted(values) if len(values[k]) > 1 and k not in CORE_LABELS]
    for key in series:
        labels = dict(key)
        whose = ", ".join(part for part in [core_name(core_of(labels))] + [
            f"{k}={labels[k]}" for k in varying if k in labels] if part)
        if not _spans_window(scrapes, name + (f" ({whose})" if whose else ""),
                             [key in keys for keys in present], obs, core_of(labels)):
            return False
    return True


def _spans_window(scrapes: list[Scrape], series: str, seen: list[bool],
                  obs: Observation, core: tuple[str | None, ...] | None = None) -> bool:
    """Whether a series' readings give a window figure, with a note where they do not: one
    missing from a scrape after it appeared has an unknown increase (not 0); one absent from
    the first scrape has an unknown start (its first value may hold counts from before the
    window, whether its engine exports it from start-up or makes it at its first increment:
    engine_metrics.EAGER_PREFIXES), so it counts from zero only where the server's process
    started inside the window (started_inside_s)."""
    first = seen.index(True)
    if not all(seen[first:]):
        gap = seen.index(False, first) + 1
        _note(obs, f"{series} is missing from scrape {gap} of {len(seen)}: what it "
                   "counted over the window is unknown, so it is not read (not taken as 0)")
        return False
    if first:
        started = started_inside_s(scrapes, first, core)
        if started is not None:
            _note(obs, f"{series} first appears mid-window, after the server's process "
                       f"started {started:,.0f} s into it ({PROCESS_START}): counted from zero")
            return True
        if series.startswith(EAGER_PREFIXES):
            _note(obs, f"{series} is missing from the first scrape, though "
                       f"{series.split(':')[0]} exports it from start-up: the window has no "
                       "start for it (its first value would be the server's lifetime), so it "
                       "is not read")
        else:
            _note(obs, f"{series} is missing from the first scrape: the window has no start "
                       "for it (the engine makes a series at its first increment, but nothing "
                       f"says that came inside the window: no {PROCESS_START} after the first "
                       "scrape), so it is not read (not counted from zero)")
        return False
    return True


def histogram_window(scrapes: list[Scrape], name: str, obs: Observation,
                     restarts: Restarts) -> Histogram | None:
    """A histogram's observations over the window, scrape to scrape and core by core, as
    window_increase counts a counter: after a restart of a core (find_restarts) its later
    histogram is whole, the other cores' subtracted; None (noted) where a core's histogram
    does not span the window (_series_spans). The sum is checked as each scrape's histogram
    is: one core's +Inf bucket with no _count of its own (a broken exporter) passes in the
    scrape it shares, not in the window."""
    if not _series_spans(scrapes, name, f"{name}_bucket", lambda _: True, obs):
        return None
    cores = list(dict.fromkeys(core_of(labels) for s in scrapes
                               for labels, _ in s.samples.get(f"{name}_bucket", [])))
    window: Histogram | None = None
    for core in cores:
        hists = [s.histogram(name, keep=_of_core(core)) for s in scrapes]
        for i, (before, after) in enumerate(itertools.pairwise(hists)):
            if after is not None:
                part = after if (i, core) in restarts else after.minus(before)
                window = part if window is None else window.plus(part)
    return None if window is None else window.checked()


def _of_core(core: tuple[str | None, ...]) -> Callable[[dict[str, str]], bool]:
    """Whether a series belongs to ``core``."""
    return lambda labels: core_of(labels) == core


def window_increase(scrapes: list[Scrape], names: tuple[str, ...], obs: Observation,
                    restarts: Restarts, modes: tuple[str, ...] = (),
                    label: str = "mode") -> float | None:
    """A counter's increase over the window (only its series whose ``label`` is one of
    ``modes``, if given), core by core as Prometheus' rate() takes each series: after a
    restart of the core (find_restarts: any of its series fell) it counts from zero. None where
    no scrape has it, or where one of its series does not span the window (_series_spans:
    missing from a later scrape; absent from the first, unless the server started inside the
    window) — never 0 for what was not read."""
    name = next((n for n in names for s in scrapes if n in s.samples), None)
    if name is None:
        return None
    if not _series_spans(scrapes, name, name,
                         lambda labels: not modes or labels.get(label) in modes, obs):
        return None
    values = [counter_by_core(s, names, modes, label) or {} for s in scrapes]
    total = 0.0
    for i, (before, after) in enumerate(itertools.pairwise(values)):
        for core, value in after.items():
            was = before.get(core)
            if was is None or (i, core) in restarts:
                total += value
            elif value < was:  # a series of it gone (no fall of its own): counted from zero
                _note(obs, f"{name} went down mid-window (a restart): counted from zero")
                total += value
            else:
                total += value - was
    return total


def window_rate(scrapes: list[Scrape], names: tuple[str, ...], obs: Observation,
                restarts: Restarts, modes: tuple[str, ...] = ()) -> float | None:
    increase = window_increase(scrapes, names, obs, restarts, modes)
    if increase is None or not obs.duration_s:
        return None
    return increase / obs.duration_s
