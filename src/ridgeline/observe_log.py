"""vLLM's periodic stats lines, read into an Observation: the batch, the queue, KV usage and
token rates as the server logged them, per data-parallel engine where each logs its own line
(vllm/v1/metrics/loggers.py; V0's vllm/engine/metrics.py)."""

from __future__ import annotations

import re
import statistics

from ridgeline.errors import InputError
from ridgeline.observation import (
    COUNTER_RANGE,
    FRACTION_RANGE,
    MAX_COUNT,
    MAX_REQUESTS,
    REQUESTS_RANGE,
    Observation,
    checked,
)

MAX_ENGINES = 4096  # data-parallel engines one log line may aggregate
# vLLM's periodic stats line, V0 and V1 (vllm/v1/metrics/loggers.py): "N Engines
# Aggregated: " sums DP engines (--aggregate-engine-logging); "Deferred" and "Preemptions"
# appear, when non-zero, in builds since Nov 2025 (PR #28522).
STATS_LINE = re.compile(
    r"(?:(?P<engines>\d+) Engines Aggregated: )?"
    r"Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, Avg generation throughput: "
    r"(?P<gen>[\d.]+) tokens/s, Running: (?P<running>\d+) reqs,(?P<v0> Swapped: "
    r"(?P<swapped>\d+) reqs,)? "
    r"(?:Pending|Waiting): (?P<waiting>\d+) reqs,(?: Deferred: (?P<deferred>\d+) reqs,)?"
    r"(?: Preemptions: (?P<preempted>\d+),)? GPU KV cache usage: (?P<kv>[\d.]+)%"
    r"(?:, (?:GPU )?[Pp]refix cache hit rate: (?P<hit>[\d.]+)%)?")
# V1's per-engine lines under data parallelism, when not aggregated: "Engine 000: Avg …"
_LOG_ENGINE = re.compile(r"Engine (\d+): Avg prompt throughput")
_LOG_ENGINE_TAIL = re.compile(r"Engine (\d+): $")  # the line's text before STATS_LINE's match
# a vLLM log line's time: "INFO 11-20 10:00:00 [loggers.py:236] …" (month-day, no year)
_LOG_TIME = re.compile(r"\b(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b")
ROUND_S = 2.0  # one logging round's lines, every engine's, written within this of the first
# V0 warns at the 1st, 51st, 101st … preemption (vllm/core/scheduler.py), with the total so
# far; builds before that throttle warned at every one, with no total
_V0_PREEMPTED = re.compile(r"is preempted by .*?total_num_cumulative_preemption=(\d+)")


def _log_number(match: re.Match[str], group: str, field: str, source: str, text: str) -> float:
    """A stats line's number, or the file refused naming its line and field ('1.2.3')."""
    try:
        return float(match[group])
    except ValueError:
        line = text.count("\n", 0, match.start()) + 1
        raise InputError(f"{source}, line {line}: {field} reads {match[group]!r}, not a "
                         "number") from None


def from_log(text: str, source: str) -> Observation:
    obs = Observation(source, "log")
    prompt: list[float] = []
    gen: list[float] = []
    preempted: list[float] = []
    hits: list[float] = []
    lines: list[tuple[str | None, float | None]] = []  # each stats line's engine and time
    v0 = False
    for match in STATS_LINE.finditer(text):
        lines.append(_log_engine_and_time(text, match))
        def number(group: str, field: str, m: re.Match[str] = match) -> float:
            return _log_number(m, group, field, source, text)

        # an aggregated line sums its engines' batches and rates (and averages KV usage)
        k = int(checked(number("engines", "Engines Aggregated") if match.group("engines")
                        else 1.0, source, "Engines Aggregated", 1.0, MAX_ENGINES,
                        f"a number of engines, 1 to {MAX_ENGINES:,}"))
        obs.engines = max(obs.engines, k)
        obs.running.append(checked(number("running", "Running"), source, "Running", 0.0,
                                   MAX_REQUESTS * k, REQUESTS_RANGE) / k)
        obs.waiting.append(checked(number("waiting", "Waiting"), source, "Waiting", 0.0,
                                   MAX_REQUESTS * k, REQUESTS_RANGE) / k)
        kv = number("kv", "GPU KV cache usage") / 100
        obs.kv_usage.append(checked(kv, source, "GPU KV cache usage (as a fraction)", 0.0, 1.0,
                                    FRACTION_RANGE))
        for series, group, name in ((prompt, "prompt", "Avg prompt throughput"),
                                    (gen, "gen", "Avg generation throughput")):
            series.append(checked(number(group, name), source, name, 0.0, MAX_COUNT,
                                  f"tokens per second, 0 to {MAX_COUNT:g}") / k)
        if match.group("preempted"):
            preempted.append(checked(number("preempted", "Preemptions"), source, "Preemptions",
                                     0.0, MAX_COUNT, COUNTER_RANGE))
        if match.group("swapped"):
            obs.swapped.append(checked(number("swapped", "Swapped"), source, "Swapped", 0.0,
                                       MAX_REQUESTS * k, REQUESTS_RANGE) / k)
        if match.group("hit"):
            hits.append(checked(number("hit", "Prefix cache hit rate") / 100, source,
                                "Prefix cache hit rate (as a fraction)", 0.0, 1.0,
                                "a share of the prompt tokens, 0 to 1"))
        v0 = v0 or bool(match.group("v0"))
    if hits:  # the share of queried prompt tokens the cache held, over each line's interval
        obs.cached_prompt_share = statistics.fmean(hits)
    if obs.engines > 1:
        obs.notes.append(f"'{obs.engines} Engines Aggregated' lines: the batch, the queue and "
                         "the token rates are each engine's mean, the preemptions all "
                         "engines' together")
    apart = len(set(_LOG_ENGINE.findall(text)))
    if apart > 1 and obs.engines == 1:  # each line one engine's: their means are per engine
        rounds = _per_engine_rounds(obs, lines, prompt, gen)
        obs.notes.append(f"{obs.engines} data-parallel engines, a stats line each ('Engine "
                         "000: …'): the batch, the queue and the token rates are each engine's "
                         f"mean over the log's {rounds} logging rounds, a round without an "
                         "engine's line read as that engine idle (vLLM logs an idle engine at "
                         "debug level), the preemptions all engines' together")
    warned = [checked(float(n), source, "total_num_cumulative_preemption", 0.0, MAX_COUNT,
                      COUNTER_RANGE) for n in _V0_PREEMPTED.findall(text)]
    if preempted:
        obs.preemptions = sum(preempted)
    elif warned:  # V0 warns every 50th: its running total is the count
        obs.preemptions = float(max(warned))
        obs.notes.append(f"preemptions: V0's running total, {max(warned):,} when last warned "
                         "(it warns at every 50th)")
    elif v0 or "is preempted by" in text:  # V0 warns at the first one (early builds at each)
        obs.preemptions = float(text.count("is preempted by"))
    else:
        obs.preemptions = None
        obs.notes.append("preemptions: not in these stats lines (vLLM logs them, when any, "
                         "from Nov 2025 on)")
    obs.prompt_tok_s = statistics.fmean(prompt)
    obs.generation_tok_s = statistics.fmean(gen)
    obs.notes.append(f"{len(lines)} periodic stats lines")
    return obs


def _log_engine_and_time(text: str, match: re.Match[str]) -> tuple[str | None, float | None]:
    """A stats line's engine ('Engine 001: ' before it, else None) and its time of year in
    seconds (months counted as 31 days: only its gaps matter), else None."""
    head = text[text.rfind("\n", 0, match.start()) + 1:match.start()]
    engine = _LOG_ENGINE_TAIL.search(head)
    stamp = _LOG_TIME.search(head)
    at = None
    if stamp:
        month, day, hour, minute, second = (int(g) for g in stamp.groups())
        at = (((month * 31 + day) * 24 + hour) * 60 + minute) * 60.0 + second
    return (engine[1] if engine else None), at


def _per_engine_rounds(obs: Observation, lines: list[tuple[str | None, float | None]],
                       prompt: list[float], gen: list[float]) -> int:
    """Each data-parallel engine's mean over the log's logging rounds, where each line is one
    engine's (V1 without --aggregate-engine-logging): vLLM logs every engine's line together
    each interval, an idle engine's at debug level, so a round without an engine's line is
    that engine idle (0 running, waiting, KV, tokens), not missing. Engine 000 logging 6 rounds
    at 1,000 tok/s and engine 001 one: (6,000 + 1,000) ÷ 6 rounds ÷ 2 engines = 583 tok/s each,
    1,167 in all — not the lines' mean of 1,000 × 2. A round ends where an engine logs again
    or the clock moves past ROUND_S from its first line. Rewrites the observation's series as
    each round's mean over the engines, with each engine's (KV usage, waiting) for the wall;
    returns the number of rounds."""
    engines = sorted({engine for engine, _ in lines if engine is not None})
    rounds: list[dict[str, int]] = []  # each round: engine -> its line's index
    start: float | None = None
    alone = sum(1 for engine, _ in lines if engine is None)
    if alone:  # another server's (V0, one engine): no engine's round to count it in
        obs.notes.append(f"{alone:,} stats {'line' if alone == 1 else 'lines'} without an "
                         "'Engine NNN:' prefix among the engines' left out: another server's?")
    for i, (engine, at) in enumerate(lines):
        if engine is None:
            continue
        late = at is not None and start is not None and not 0 <= at - start < ROUND_S
        if not rounds or engine in rounds[-1] or late:
            rounds.append({})
            start = at
        rounds[-1][engine] = i
    series = (obs.running, obs.waiting, obs.kv_usage, prompt, gen)
    old = [list(values) for values in series]
    for values in series:
        values.clear()
    n = len(engines)
    for members in rounds:
        for values, was in zip(series, old, strict=True):
            values.append(sum(was[i] for i in members.values()) / n)
        obs.core_pressure += [(old[2][members[e]], old[1][members[e]]) if e in members
                              else (0.0, 0.0) for e in engines]
    obs.engines = n
    return len(rounds)
