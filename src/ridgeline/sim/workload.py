"""Workloads: open-loop arrivals, closed-loop concurrency, length distributions, traces.

Everything is drawn from one seeded ``random.Random``: the same seed, the same requests.
Length specs: ``512`` (fixed), ``uniform:128,1024``, ``normal:512,128``,
``lognormal:512,1.0`` (median, sigma), ``zipf:1.2,4096`` (exponent, maximum),
``file:lengths.txt`` (an empirical distribution: one number per line).
Arrivals: ``poisson`` (exponential gaps), ``gamma`` (gaps with coefficient of variation
``burstiness``; > 1 is burstier than Poisson), ``constant``.
Traces: CSV or JSONL with arrival seconds, prompt tokens, output tokens; the Azure LLM
inference trace layout (TIMESTAMP, ContextTokens, GeneratedTokens) is read as is.
"""

from __future__ import annotations

import bisect
import csv
import json
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ridgeline.errors import InputError
from ridgeline.sim.request import Request

Sampler = Callable[[random.Random], int]


def length_sampler(spec: str, what: str) -> Sampler:
    """Parse a length spec into a function drawing a positive token count."""
    text = str(spec).strip()
    kind, _, args = text.partition(":")
    if not args:
        try:
            n = int(text)
        except ValueError:
            raise InputError(f"{what}: {spec!r} is not a length (512, uniform:128,1024, …)") \
                from None
        if n < 1:
            raise InputError(f"{what} must be at least 1, got {n}")
        return lambda rng: n
    if kind == "file":
        return _empirical(args, what)
    try:
        values = [float(v) for v in args.split(",")]
    except ValueError:
        raise InputError(f"{what}: bad numbers in {spec!r}") from None
    if kind == "uniform" and len(values) == 2 and 1 <= values[0] <= values[1]:
        lo, hi = int(values[0]), int(values[1])
        return lambda rng: rng.randint(lo, hi)
    if kind == "normal" and len(values) == 2 and values[1] >= 0:
        mean, sd = values
        return lambda rng: max(1, round(rng.gauss(mean, sd)))
    if kind == "lognormal" and len(values) == 2 and values[0] > 0 and values[1] >= 0:
        mu, sigma = math.log(values[0]), values[1]
        return lambda rng: max(1, round(rng.lognormvariate(mu, sigma)))
    if kind == "zipf" and len(values) == 2 and values[0] > 0 and values[1] >= 1:
        return _zipf(values[0], int(values[1]))
    raise InputError(f"{what}: cannot read {spec!r} (fixed N, uniform:a,b, normal:mean,sd, "
                     "lognormal:median,sigma, zipf:s,max, file:PATH)")


def _zipf(s: float, maximum: int) -> Sampler:
    weights = [1.0 / k**s for k in range(1, maximum + 1)]
    cumulative, total = [], 0.0
    for w in weights:
        total += w
        cumulative.append(total)
    return lambda rng: bisect.bisect_left(cumulative, rng.random() * total) + 1


def _empirical(path: str, what: str) -> Sampler:
    try:
        values = [int(float(line)) for line in Path(path).read_text().split() if line]
    except (OSError, ValueError) as exc:
        raise InputError(f"{what}: cannot read lengths from {path} ({exc})") from None
    if not values or min(values) < 1:
        raise InputError(f"{what}: {path} needs positive lengths, one per line")
    return lambda rng: rng.choice(values)


def gaps(kind: str, rate: float, burstiness: float = 1.0) -> Callable[[random.Random], float]:
    """Inter-arrival time sampler at ``rate`` requests per second."""
    if not rate > 0:
        raise InputError(f"request rate must be positive, got {rate}")
    if kind == "poisson":
        return lambda rng: rng.expovariate(rate)
    if kind == "constant":
        return lambda rng: 1.0 / rate
    if kind == "gamma":
        if not burstiness > 0:
            raise InputError("burstiness must be positive")
        shape = 1.0 / burstiness**2
        scale = 1.0 / (rate * shape)
        return lambda rng: rng.gammavariate(shape, scale)
    raise InputError(f"unknown arrival process {kind!r} (poisson, gamma, constant)")


@dataclass(frozen=True)
class Workload:
    """A seeded synthetic workload; iterate it for requests in arrival order."""

    num_requests: int
    input_len: str = "512"
    output_len: str = "128"
    rate: float = float("inf")  # requests per second; inf: all at time 0 (offline)
    arrival: str = "poisson"
    burstiness: float = 1.0
    prefix_groups: int = 0
    prefix_len: int = 0
    seed: int = 0

    def __iter__(self) -> Iterator[Request]:
        if self.num_requests < 1:
            raise InputError("the number of requests must be at least 1")
        rng = random.Random(self.seed)
        prompt = length_sampler(self.input_len, "input length")
        output = length_sampler(self.output_len, "output length")
        gap = None if math.isinf(self.rate) else gaps(self.arrival, self.rate, self.burstiness)
        t = 0.0
        for i in range(self.num_requests):
            p, o = prompt(rng), output(rng)
            group = rng.randrange(self.prefix_groups) if self.prefix_groups else -1
            if group >= 0:
                p = max(p, self.prefix_len + 1)
            yield Request(i, t, p, o, group, self.prefix_len if group >= 0 else 0)
            if gap is not None:
                t += gap(rng)


_AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_PLAIN = (("arrival_s", "arrival_time", "timestamp", "time", "TIMESTAMP"),
          ("prompt_tokens", "input_tokens", "input_len", "ContextTokens"),
          ("output_tokens", "output_len", "GeneratedTokens"))


def read_trace(path: str) -> list[Request]:
    """Requests from a CSV or JSONL trace, arrival times relative to the first."""
    file = Path(path).expanduser()
    try:
        text = file.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read trace {path} ({exc})") from None
    if file.suffix == ".jsonl":
        try:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: not JSON lines ({exc.msg}, line {exc.lineno})") from None
    else:
        rows = list(csv.DictReader(text.splitlines()))
    if not rows or not isinstance(rows[0], dict):
        raise InputError(f"{path}: no trace rows")
    columns = [_column(rows[0], names, path) for names in _PLAIN]
    out = []
    for i, row in enumerate(rows):
        try:
            t = _seconds(row[columns[0]])
            p, o = int(float(row[columns[1]])), int(float(row[columns[2]]))
        except (KeyError, TypeError, ValueError):
            raise InputError(f"{path}: row {i + 1} is malformed") from None
        if p < 1 or o < 1:
            raise InputError(f"{path}: row {i + 1} needs positive token counts")
        out.append((t, p, o))
    out.sort()
    start = out[0][0]
    return [Request(i, t - start, p, o) for i, (t, p, o) in enumerate(out)]


def _column(row: dict[str, object], names: tuple[str, ...], path: str) -> str:
    for name in names:
        if name in row:
            return name
    raise InputError(f"{path}: no column among {', '.join(names)} (Azure layout: "
                     f"{', '.join(_AZURE)})")


def _seconds(value: object) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        return datetime.fromisoformat(text.replace(" ", "T")[:26]).timestamp()
