"""Workloads: open-loop arrivals, closed-loop concurrency, length distributions, traces.

Everything is drawn from one seeded ``random.Random``: the same seed, the same requests.
Length specs: ``512`` (fixed), ``uniform:128,1024``, ``normal:512,128``,
``lognormal:512,1.0`` (median, sigma), ``zipf:1.2,4096`` (exponent, maximum),
``file:lengths.txt`` (an empirical distribution: one number per line); every length is 1 to
10,000,000 tokens. A shared prefix (``prefix_groups``, ``prefix_len``) is part of the prompt.
Arrivals: ``poisson`` (exponential gaps), ``gamma`` (gaps of shape ``burstiness``, as
``vllm bench serve --burstiness``: below 1 burstier than Poisson, above 1 steadier; the gaps'
coefficient of variation is 1/√burstiness), ``constant``.
Traces: CSV or JSONL with arrival seconds (or ISO dates, UTC where they carry no offset),
prompt tokens, output tokens; the Azure LLM inference trace layout (TIMESTAMP, ContextTokens,
GeneratedTokens) is read as is.
"""

from __future__ import annotations

import csv
import json
import math
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ridgeline.errors import InputError, shorten
from ridgeline.sim.request import Request
from ridgeline.units import fmt_share, parse_count
from ridgeline.userfiles import json_loads, read_text, refuse_a_column_twice

Sampler = Callable[[random.Random], int]

MAX_LENGTH_TOKENS = 10_000_000  # a prompt or output past any model's context (Llama 4 Scout's)
MAX_LOGNORMAL_SIGMA = 10.0  # e^10 ≈ 22,000× per standard deviation; real loads sit near 1
MAX_ZIPF_EXPONENT = 100.0  # past this every draw is 1
MIN_RATE = 1e-6  # requests per second: one in ~12 days; slower, and the times lose precision
MAX_RATE = 1e6  # requests per second: past any fleet's (plan at 1e300 priced 1e296 GPUs)
# a trace's time past this many seconds is a unix time (2001-09-09): no trace timed from its
# start runs 31 years (``_one_clock``)
UNIX_TIMES_FROM_S = 1e9
MAX_ARRIVAL_S = 1e11  # the year 5000 in unix seconds; float seconds stay exact to 1e-5 s
BURSTINESS = (0.01, 100.0)  # gamma shape: gaps' coefficient of variation 10 down to 0.1
# the length specs' names, as ``name:parameters`` (a fixed length has none)
LENGTH_KINDS = ("uniform", "normal", "lognormal", "zipf", "file")


MAX_CLIPPED_SHARE = 0.05  # a normal spec whose draws fall under one token more often: refused


def length_sampler(spec: str, what: str) -> Sampler:
    """Parse a length spec into a function drawing a token count from 1 to MAX_LENGTH_TOKENS.

    Every parameter must be finite and, where it is a length, within that range; draws of the
    unbounded distributions (normal, lognormal) are clipped to it (a request past the model's
    context is refused by the engine either way).
    """
    text = str(spec).strip()
    kind, _, args = text.partition(":")
    if not args:
        try:
            n = parse_count(text, what)  # 512, 2k (2,000), 2K (2,048)
        except InputError:
            if text.startswith("-"):
                raise
            raise InputError(f"{what}: {spec!r} is not a length (512, 2k, uniform:128,1024, …)") \
                from None
        return _fixed(_tokens(n, what, "a fixed length"))
    if kind == "file":
        return _empirical(args, what)
    readable = (f"{what}: cannot read {spec!r} (fixed N, uniform:a,b, normal:mean,sd, "
                "lognormal:median,sigma, zipf:s,max, file:PATH)")
    if kind not in LENGTH_KINDS:  # before its numbers: 'fiel:x.txt' is no bad number
        raise InputError(readable + _kind_hint(kind))
    try:
        values = [float(v) for v in args.split(",")]
    except ValueError:
        raise InputError(f"{what}: bad numbers in {spec!r}") from None
    if len(values) != 2:
        raise InputError(readable)
    a, b = values
    if kind == "uniform":
        lo, hi = _tokens(a, what, "the low end"), _tokens(b, what, "the high end")
        if lo > hi:
            raise InputError(f"{what}: uniform:{lo},{hi} has its low end above its high end")
        return _Uniform(lo, hi)
    if kind == "normal":
        _tokens(a, what, "the mean", whole=False)
        _within(b, 0, MAX_LENGTH_TOKENS, what, "the standard deviation")
        below = 0.5 * (1 + math.erf((0.5 - a) / (b * math.sqrt(2)))) if b > 0 else 0.0
        if below > MAX_CLIPPED_SHARE:
            raise InputError(f"{what}: normal:{_show(a)},{_show(b)} draws under one token "
                             f"{fmt_share(below, bounds=(MAX_CLIPPED_SHARE, 1.0))} of the "
                             f"time; clipped to 1 its mean would not be {_show(a)} (a long "
                             "tail is lognormal:median,sigma)")
        return _Normal(a, b)
    if kind == "lognormal":
        _tokens(a, what, "the median", whole=False)
        _within(b, 0, MAX_LOGNORMAL_SIGMA, what, "sigma")
        return _LogNormal(math.log(a), b)
    if not (math.isfinite(a) and 0 < a <= MAX_ZIPF_EXPONENT):
        raise InputError(f"{what}: the zipf exponent must be above 0 and at most "
                         f"{MAX_ZIPF_EXPONENT:g}, got {a:g}")
    return _Zipf(a, _tokens(b, what, "the maximum"))


def _kind_hint(kind: str) -> str:
    """"; did you mean lognormal:…?" where ``kind`` is a slip from a length spec's name
    (catalog.nearest_spelling: 'lognormall', 'unifrom', 'fiel') or one in capitals
    ('Uniform'), else ""."""
    from ridgeline.catalog import nearest_spelling

    lowered = kind.strip().lower()
    near = lowered if lowered in LENGTH_KINDS else nearest_spelling(lowered, LENGTH_KINDS)
    return f"; did you mean {near}:…?" if near else ""


def _tokens(value: float, what: str, name: str, whole: bool = True) -> int:
    """A length parameter as a token count from 1 to MAX_LENGTH_TOKENS: a whole one where it
    is a length drawn as is (a range's ends, a maximum), any where it is a distribution's
    centre (a mean, a median)."""
    _within(value, 1, MAX_LENGTH_TOKENS, what, name)
    if whole and value != int(value):
        raise InputError(f"{what}: {name} is a token count, a whole number, got {value:g}")
    return int(value)


def _within(value: float, lo: float, hi: float, what: str, name: str) -> None:
    if not (math.isfinite(value) and lo <= value <= hi):
        raise InputError(f"{what}: {name} must be {_show(lo)} to {_show(hi)}, got {value:g}")


def _show(x: float) -> str:
    return f"{x:,.0f}" if x == int(x) else f"{x:g}"


def _fixed(n: int) -> Sampler:
    return lambda rng: n


class _Uniform:
    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi

    def __call__(self, rng: random.Random) -> int:
        return rng.randint(self.lo, self.hi)


class _Normal:
    def __init__(self, mean: float, sd: float) -> None:
        self.mean, self.sd = mean, sd

    def __call__(self, rng: random.Random) -> int:
        return min(MAX_LENGTH_TOKENS, max(1, round(rng.gauss(self.mean, self.sd))))


class _LogNormal:
    """exp(N(mu, sigma)) as random.lognormvariate draws it, clipped to MAX_LENGTH_TOKENS
    before the exponential (a wide sigma would overflow it)."""

    def __init__(self, mu: float, sigma: float) -> None:
        self.mu, self.sigma = mu, sigma

    def __call__(self, rng: random.Random) -> int:
        # min(x, _LOG_MAX), then the token count clipped to 1 .. MAX_LENGTH_TOKENS, written
        # as comparisons: a plan's refused share draws 200,000 of these
        x = rng.normalvariate(self.mu, self.sigma)
        n = round(math.exp(x if x <= _LOG_MAX else _LOG_MAX))
        return n if 1 <= n <= MAX_LENGTH_TOKENS else (1 if n < 1 else MAX_LENGTH_TOKENS)


_LOG_MAX = math.log(MAX_LENGTH_TOKENS)


class _Zipf:
    """P(k) ∝ k^−s for k = 1..n, by rejection from the continuous density ∝ t^−s on
    [1, n + 1): draw t by inverting its CDF, take k = ⌊t⌋, and keep k with probability
    I(1, 2) ÷ (k · I(1, 1 + 1/k)), where I(a, b) = ∫ₐᵇ t^−s dt. That is k^−s over the
    density's mass on [k, k + 1), scaled by its largest value (at k = 1), so every kept k has
    weight k^−s. O(1) memory however large n; most draws are kept (zipf:1.1,1000 keeps 82 %).
    zipf:1.2,4096 draws 1 about 22 % of the time (1 ÷ Σ k^−1.2 = 0.215).
    """

    def __init__(self, s: float, n: int) -> None:
        self.s, self.n = s, n
        self.total = self._mass(math.log(n + 1.0))  # I(1, n + 1)
        self.first = self._mass(math.log(2.0))  # I(1, 2)

    def _mass(self, log_b: float) -> float:
        """I(1, b) from log b: (b^(1−s) − 1) ÷ (1 − s), or log b at s = 1."""
        a = (1.0 - self.s) * log_b
        return log_b if a == 0.0 else math.expm1(a) / (1.0 - self.s)

    def _point(self, mass: float) -> float:
        """The t at which I(1, t) = mass (the inverse of _mass)."""
        if self.s == 1.0:
            return math.exp(mass)
        return math.exp(math.log1p(mass * (1.0 - self.s)) / (1.0 - self.s))

    def __call__(self, rng: random.Random) -> int:
        while True:
            k = min(int(self._point(rng.random() * self.total)), self.n)
            if rng.random() * k * self._mass(math.log1p(1.0 / k)) <= self.first:
                return max(k, 1)


def _empirical(path: str, what: str) -> Sampler:
    try:
        numbers = [float(line) for line in read_text(path, what="a file of lengths").split() if line]
        values = [int(x) for x in numbers]
    except InputError as exc:  # a folder, or past the size bound
        raise InputError(f"{what}: {exc}") from None
    except (OSError, UnicodeDecodeError, ValueError, OverflowError) as exc:
        raise InputError(f"{what}: cannot read lengths from {path} ({exc})") from None
    fraction = next((x for x, n in zip(numbers, values) if x != n), None)
    if fraction is not None:
        raise InputError(f"{what}: {path} holds {fraction:g}; lengths are whole token counts")
    if not values or min(values) < 1 or max(values) > MAX_LENGTH_TOKENS:
        raise InputError(f"{what}: {path} needs lengths from 1 to {MAX_LENGTH_TOKENS:,}, one "
                         "per line")
    return lambda rng: rng.choice(values)


def gaps(kind: str, rate: float, burstiness: float = 1.0) -> Callable[[random.Random], float]:
    """Inter-arrival time sampler at ``rate`` requests per second."""
    if not (math.isfinite(rate) and MIN_RATE <= rate <= MAX_RATE):
        raise InputError(f"request rate must be a finite number from {MIN_RATE:g} to "
                         f"{MAX_RATE:g} per second, got {rate:g}")
    if kind == "poisson":
        return lambda rng: rng.expovariate(rate)
    if kind == "constant":
        return lambda rng: 1.0 / rate
    if kind == "gamma":
        lo, hi = BURSTINESS
        if not (math.isfinite(burstiness) and lo <= burstiness <= hi):
            raise InputError(f"burstiness (the gamma gaps' shape, as vllm bench serve's) must "
                             f"be {lo:g} to {hi:g}, got {burstiness:g}")
        shape = burstiness  # vllm/benchmarks/serve.py: gamma(shape=b, scale=1/(rate·b))
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
        """Requests in arrival order. A group's shared prefix is the first tokens of each
        member's prompt, not added to it: a prompt drawn no longer than the prefix shares all
        of its tokens but the last (vLLM always computes a prompt's last token)."""
        if self.num_requests < 1:
            raise InputError("the number of requests must be at least 1")
        self._check_prefix()
        rng = random.Random(self.seed)
        groups = random.Random(f"{self.seed}:prefix-groups")  # its own stream: the same seed
        # draws the same lengths and arrivals with shared prefixes or without (a paired test)
        prompt = length_sampler(self.input_len, "input length")
        output = length_sampler(self.output_len, "output length")
        gap = None if math.isinf(self.rate) else gaps(self.arrival, self.rate, self.burstiness)
        t = 0.0
        for i in range(self.num_requests):
            p, o = prompt(rng), output(rng)
            group = groups.randrange(self.prefix_groups) if self.prefix_groups else -1
            shared = min(self.prefix_len, p - 1) if group >= 0 else 0
            yield Request(i, t, p, o, group if shared else -1, shared)
            if gap is not None:
                t += gap(rng)

    def _check_prefix(self) -> None:
        if self.prefix_groups < 0 or self.prefix_len < 0:
            raise InputError("prefix groups and prefix length cannot be negative")
        if self.prefix_len and not self.prefix_groups:
            raise InputError(f"a {self.prefix_len:,}-token shared prefix (--prefix-len) needs "
                             "groups of requests to share it (--prefix-groups N)")
        if self.prefix_groups and not self.prefix_len:
            raise InputError(f"{self.prefix_groups:,} prefix groups (--prefix-groups) need the "
                             "length of the prefix they share (--prefix-len N)")
        if self.prefix_len > MAX_LENGTH_TOKENS:
            raise InputError(f"the shared prefix must be at most {MAX_LENGTH_TOKENS:,} tokens, "
                             f"got {self.prefix_len:,}")


def fixed_tokens(spec: str) -> int | None:
    """A length spec's tokens where it is one number ("512"; "2k": 2,000), else None (a
    distribution, a file): what --json gives as ``input_len`` beside the spec itself."""
    text = str(spec).strip()
    if ":" in text:
        return None
    try:
        return parse_count(text, "a length")
    except InputError:
        return None


@dataclass(frozen=True)
class LoadAsked:
    """The load a simulation was asked for, in numbers (simulate --json's
    ``settings.workload``; ``settings.load`` says it in words). ``arrival``: poisson, gamma or
    constant at ``rate_req_s``; "at_once" (--rate inf: every request at time 0); "closed_loop"
    (--concurrency alone: each user sends again when answered); "trace" (replayed from
    ``trace``, its lengths its own). 50 requests of 512 in, 128 out, poisson at 4/s, seed 3:
    prompt_len 512, prompt_len_spec "512", rate_req_s 4.0 (the prompt under prefill's and
    roofline's name for it, prompt_len, whichever flag gave it: --input-len here)."""

    num_requests: int
    arrival: str
    rate_req_s: float | None = None
    input_len_spec: str | None = None
    output_len_spec: str | None = None
    burstiness: float | None = None  # gamma's shape; None for the other processes
    max_concurrency: int | None = None
    seed: int | None = None  # None: a trace's requests are not drawn
    prefix_groups: int = 0
    prefix_len: int = 0
    trace: str | None = None

    def to_dict(self) -> dict[str, object]:
        """Its fields, with each length as a number where its spec is one (else null); the
        prompt's as ``prompt_len``, every command's --json name for it."""
        return {"num_requests": self.num_requests, "arrival": self.arrival,
                "rate_req_s": self.rate_req_s, "burstiness": self.burstiness,
                "max_concurrency": self.max_concurrency,
                "prompt_len": None if self.input_len_spec is None else
                fixed_tokens(self.input_len_spec), "prompt_len_spec": self.input_len_spec,
                "output_len": None if self.output_len_spec is None else
                fixed_tokens(self.output_len_spec),
                "output_len_spec": self.output_len_spec, "seed": self.seed,
                "prefix_groups": self.prefix_groups, "prefix_len": self.prefix_len,
                "trace": self.trace}


_AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_PLAIN = (("arrival_s", "arrival_time", "timestamp", "time", "TIMESTAMP"),
          ("prompt_tokens", "input_tokens", "input_len", "ContextTokens"),
          ("output_tokens", "output_len", "GeneratedTokens"))


def read_trace(path: str) -> list[Request]:
    """Requests from a CSV or JSONL trace, arrival times relative to the first, numbered in
    arrival order (rows at one instant in the file's: an export's ids replay as they were).

    Each row needs a finite arrival time ≥ 0 (seconds, or an ISO date: UTC unless it gives an
    offset) and whole token counts from 1 to MAX_LENGTH_TOKENS; a row that has not is
    refused, naming its line.
    """
    file = Path(path).expanduser()
    try:
        text = read_text(file, what="a trace file")
    except FileNotFoundError:
        raise InputError(f"no such trace file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read trace {path} ({getattr(exc, 'strerror', None) or exc})"
                         ) from None
    rows: list[tuple[int, object]] = []  # (line number, row)
    if file.suffix == ".json":  # one JSON array of rows
        if not text.strip():
            raise InputError(f"{path} is empty: a .json trace is an array of rows")
        try:
            data = json_loads(text, str(path))
        except InputError:  # nested too deeply: said as it is
            raise
        except ValueError as exc:
            raise InputError(f"{path}: not JSON ({shorten(str(exc))})") from None
        if not isinstance(data, list):
            raise InputError(f"{path}: a .json trace is an array of rows (or use .jsonl, a row "
                             "per line)")
        rows = list(enumerate(data, 1))
    elif file.suffix == ".jsonl":
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append((number, json_loads(line, f"{path}, line {number}")))
                except json.JSONDecodeError as exc:
                    raise InputError(f"{path}, line {number}: not JSON ({exc.msg})") from None
                except InputError:  # nested too deeply: said as it is
                    raise
                except ValueError as exc:  # a number past 4,300 digits
                    raise InputError(f"{path}, line {number}: {shorten(str(exc))}") from None
    else:
        reader = csv.DictReader(text.splitlines())
        try:
            rows = [(reader.line_num, row) for row in reader]
        except csv.Error as exc:  # a field past the csv module's 131,072 characters, on
            # the line after the last it read whole (the header's: line 1, not 0)
            raise InputError(f"{path}, line {reader.line_num + 1}: {exc}") from None
        refuse_a_column_twice((name.strip() for name in reader.fieldnames or ()), path)
    header = getattr(reader, "fieldnames", None) if file.suffix not in (".json", ".jsonl") \
        else None
    if not rows and header:  # a header alone: name the columns it lacks, else the rows
        for names in _PLAIN:
            _column(dict.fromkeys(header, ""), names, path)
        raise InputError(f"{path}: a header and no trace rows under it")
    if not rows:
        raise InputError(f"{path}: no trace rows")
    if not isinstance(rows[0][1], dict):  # [1, 2, 3]: rows, but not objects
        raise InputError(f"{path}, line {rows[0][0]}: trace rows must be objects "
                         f"({{\"arrival_s\": …, \"prompt_tokens\": …, \"output_tokens\": …}}), "
                         f"got {type(rows[0][1]).__name__}")
    columns = [_column(rows[0][1], names, path) for names in _PLAIN]
    out = []
    lines: dict[float, int] = {}  # the first line of each arrival time (``_one_clock``)
    first_date: tuple[int, bool] | None = None  # the first row's line, and a date?
    for number, row in rows:
        try:
            if not isinstance(row, dict):
                raise ValueError("not an object")
            extra = row.get(None) if None in row else None  # csv: values past the header's
            if isinstance(extra, list) and any(str(v).strip() for v in extra):
                raise ValueError(f"more values than the {len(row) - 1} columns of the header")
            if any(row.get(c) is None for c in columns):
                missing = next(c for c in columns if row.get(c) is None)
                raise ValueError(f"no {missing} value")
            t, dated = _seconds(row.get(columns[0]))
            first_date = first_date or (number, dated)
            if dated != first_date[1]:  # 5 beside 2023-11-16 was read as 53 years before it
                ways = ("a date", "seconds") if dated else ("seconds", "a date")
                raise ValueError(f"arrival time {row.get(columns[0])!r} is {ways[0]}, but line "
                                 f"{first_date[0]}'s is {ways[1]}: a trace writes every time "
                                 "one way")
            p = _trace_tokens(row.get(columns[1]), "prompt tokens")
            o = _trace_tokens(row.get(columns[2]), "output tokens")
        except ValueError as exc:
            raise InputError(f"{path}, line {number}: {exc}") from None
        out.append((t, p, o))
        lines.setdefault(t, number)
    out.sort(key=lambda row: row[0])  # stable: rows at one instant keep the file's order
    if first_date is not None and not first_date[1]:
        _one_clock(out[0][0], out[-1][0], lines, path)
    start = out[0][0]
    return [Request(i, t - start, p, o) for i, (t, p, o) in enumerate(out)]


def _one_clock(first_s: float, last_s: float, lines: dict[float, int], path: str) -> None:
    """Refuse arrivals in seconds that mix a clock from the trace's start with unix times: the
    earliest under UNIX_TIMES_FROM_S, the latest past it, a gap no recording has (a row at 0
    before 1700000002: 54 years, replayed as 0.00 req/s)."""
    if first_s < UNIX_TIMES_FROM_S <= last_s:
        raise InputError(f"{path}, line {lines[last_s]}: arrival {last_s:.10g} s reads as a unix "
                         f"time, but line {lines[first_s]}'s {first_s:.10g} s as seconds from the "
                         "start: unix times mixed with seconds? (a trace writes every time one "
                         "way)")


def _trace_tokens(value: object, name: str) -> int:
    try:
        n = float(str(value).strip())
    except ValueError:
        raise ValueError(f"{name} {value!r} is not a number") from None
    if not (math.isfinite(n) and n == int(n) and 1 <= n <= MAX_LENGTH_TOKENS):
        raise ValueError(f"{name} must be a whole number from 1 to {MAX_LENGTH_TOKENS:,}, got "
                         f"{value!r}")
    return int(n)


def _column(row: dict[str, object], names: tuple[str, ...], path: str) -> str:
    for name in names:
        for key in row:  # "arrival_s, prompt_tokens": a space after the comma is not a name
            if isinstance(key, str) and key.strip() == name:
                return key
    found = ", ".join(str(k).strip() for k in row if k is not None)
    raise InputError(f"{path}: no column among {', '.join(names)} (Azure layout: "
                     f"{', '.join(_AZURE)}); its columns: {found}")


def _iso_date(text: str) -> datetime:
    """An ISO date as Python 3.10's fromisoformat reads it: 'T' between date and time, the
    fraction cut or padded to 6 digits (Azure's traces write 7, or 2), a 'Z' as +00:00; an
    offset kept ("2023-11-16 18:15:46.68+00:00" had been cut at 26 characters, mid-offset).
    A date without an offset is UTC, not the machine's local time: a replay must not change
    with TZ (a naive 01:30 and a 03:30 on 2023-03-12 were 1 h apart in New York, 2 h in UTC,
    and a naive stamp beside a 'Z' one moved by the machine's offset)."""
    text = re.sub(r"\.(\d+)", lambda m: "." + (m.group(1) + "00000")[:6],
                  text.replace(" ", "T", 1), count=1)
    date = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    return date if date.tzinfo is not None else date.replace(tzinfo=timezone.utc)


def _seconds(value: object) -> tuple[float, bool]:
    """Arrival seconds from a number or a date (finite and not negative), and whether it was
    a date."""
    dated = False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        t = float(value)
    else:
        text = str(value).strip()
        try:
            t = float(text)
        except ValueError:
            try:
                t, dated = _iso_date(text).timestamp(), True
            except (ValueError, OverflowError, OSError):
                raise ValueError(f"arrival time {value!r} is neither seconds nor a date") \
                    from None
    if not (math.isfinite(t) and 0 <= t <= MAX_ARRIVAL_S):
        raise ValueError(f"arrival time must be seconds from 0 to {MAX_ARRIVAL_S:g} (the year "
                         f"5000 as a unix time: not milliseconds), got {value!r}")
    return t, dated
