"""Reading Prometheus text exposition, as vLLM's and SGLang's /metrics serve it.

``parse_scrape`` turns one scrape into {name: [(labels, value)]}; ``split_scrapes`` cuts a
saved file holding several scrapes, each started by a ``# scrape_time <unix seconds>``
comment (a series twice in one scrape is refused: two scrapes saved without the comment
between them). Histograms are read from their ``_bucket{le=…}``, ``_sum`` and ``_count``
series.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from ridgeline.errors import InputError, shorten

# A sample's value as Go's strconv.ParseFloat reads it (Prometheus' own parser): decimal or
# exponent forms, and Inf, Infinity and NaN in any case, signed or not.
_SAMPLE = re.compile(
    r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>(?:[^}"]|"(?:[^"\\]|\\.)*")*)\})?\s+'
    r"(?P<value>[-+]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|(?i:inf(?:inity)?|nan)))"
    r"(?:\s+(?P<ts>-?\d+(?:\.\d*)?))?"  # a timestamp: ms in Prometheus, s in OpenMetrics
    r'(?:\s*#\s*\{(?:[^}"]|"(?:[^"\\]|\\.)*")*\}\s*\S+(?:\s+\S+)?)?\s*$'  # an exemplar
)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_SCRAPE_MARK = re.compile(r"^#\s*scrape_time\s+([0-9]+(?:\.[0-9]*)?)\s*$")
_SCRAPE_WORD = re.compile(r"^#\s*scrape_time\b")
MAX_LATENCY_S = 1e7  # a request's latency: under four months, as for a bench result
MIN_SCRAPE_GAP_S = 1.0  # Prometheus scrapes every 10-60 s; under a second a rate is noise
MAX_UNIX_S = 1e11  # past the year 5000: a timestamp in milliseconds
# a metric name and the brace that opens its labels: a line meant as a sample, however broken
_MEANT_SAMPLE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\{")
MAX_UNREAD_KEPT = 64  # lines that are not samples, kept for the caller to name

Samples = dict[str, list[tuple[dict[str, str], float]]]


@dataclass(frozen=True)
class Scrape:
    time_s: float | None
    samples: Samples
    unread: tuple[str, ...] = ()  # lines that are not samples (the first few), for the caller

    def label_values(self, label: str) -> list[str]:
        """The distinct values a label takes over every sample, in order of appearance."""
        found = (labels.get(label) for series in self.samples.values() for labels, _ in series)
        return list(dict.fromkeys(v for v in found if v))

    def _total(self, name: str, keep: Callable[[dict[str, str]], bool] | None) -> float | None:
        if name not in self.samples:
            return None
        return sum(v for labels, v in self.samples[name] if keep is None or keep(labels))

    def value(self, *names: str) -> float | None:
        """Sum of a gauge or counter over its label sets; the first name present wins."""
        for name in names:
            if name in self.samples:
                return sum(v for _, v in self.samples[name])
        return None

    def histogram(self, *names: str,
                  keep: Callable[[dict[str, str]], bool] | None = None) -> Histogram | None:
        """The first of ``names`` present, its series summed (only those ``keep`` accepts)."""
        for name in names:
            buckets: dict[float, float] = {}
            for labels, v in self.samples.get(f"{name}_bucket", []):
                if keep is not None and not keep(labels):
                    continue
                le = labels.get("le", "")
                try:
                    edge = float(le)  # "+Inf" included
                except ValueError:
                    edge = math.nan
                if math.isnan(edge):
                    raise InputError(f"{name}_bucket has le={le!r}, not a bucket's edge")
                buckets[edge] = buckets.get(edge, 0.0) + v
            if buckets:
                total = self._total(f"{name}_sum", keep)
                if total is None:  # a mean of 0 ms would be printed from it
                    raise InputError(f"{name}_bucket has no {name}_sum beside it: a histogram "
                                     "is its buckets, _sum and _count together (a file cut "
                                     "short?)")
                count = self._total(f"{name}_count", keep) or buckets.get(math.inf)
                if count is None:
                    raise InputError(f"{name}_bucket has no le=\"+Inf\" bucket and no "
                                     f"{name}_count: nothing counts its observations (a file "
                                     "cut short?)")
                return _checked(Histogram(name, tuple(sorted(buckets.items())), total, count))
        return None


def _checked(h: Histogram) -> Histogram:
    """A histogram whose parts agree: cumulative buckets that never fall, a count equal to
    the +Inf bucket, and a mean inside the buckets that hold every observation."""
    previous = (0.0, 0.0)
    for edge, cumulative in h.buckets:
        if cumulative < previous[1] * (1 - 1e-6):
            raise InputError(f"{h.name}_bucket falls from {previous[1]:g} at le={previous[0]:g} "
                             f"to {cumulative:g} at le={edge:g}: buckets are cumulative")
        previous = (edge, cumulative)
    inf = dict(h.buckets).get(math.inf)
    if inf is not None and abs(inf - h.count) > 1e-6 * max(inf, h.count, 1.0):
        raise InputError(f"{h.name}_count is {h.count:.12g} but its +Inf bucket holds "
                         f"{inf:.12g}: they count the same observations")
    if h.count and h.name.endswith("_seconds") and h.sum / h.count > MAX_LATENCY_S:
        raise InputError(f"{h.name}_sum gives a mean of {h.sum / h.count:g} s over "
                         f"{h.count:g} observations: more than {MAX_LATENCY_S:g} s is not a "
                         "latency")
    finite = [(e, c) for e, c in h.buckets if not math.isinf(e)]
    if h.count and finite and finite[-1][1] >= h.count and h.sum > finite[-1][0] * h.count * (
            1 + 1e-6):
        raise InputError(f"{h.name}_sum gives a mean of {h.sum / h.count:g}, above the "
                         f"le={finite[-1][0]:g} bucket that holds every observation")
    return h


@dataclass(frozen=True)
class Histogram:
    name: str
    buckets: tuple[tuple[float, float], ...]  # (upper edge, cumulative count)
    sum: float
    count: float

    def minus(self, earlier: Histogram | None) -> Histogram:
        """The observations between two scrapes (a counter reset keeps the later one whole)."""
        if earlier is None or self.count < earlier.count:
            return self
        before = dict(earlier.buckets)
        part = Histogram(self.name, tuple((e, c - before.get(e, 0.0)) for e, c in self.buckets),
                         self.sum - earlier.sum, self.count - earlier.count)
        scale = max(self.count, self.sum, 1.0)
        if part.sum < -1e-9 * scale or any(c < -1e-9 * scale for _, c in part.buckets):
            raise InputError(f"{self.name}: between two scrapes its _count rises but its _sum or "
                             "a bucket falls: not one histogram's observations")
        return part

    def checked(self) -> Histogram:
        """This histogram, its parts agreeing (see _checked): a window merged from several
        cores' differences is checked again, as each scrape's was."""
        return _checked(self)

    def plus(self, other: Histogram) -> Histogram:
        """Two windows' observations together (the parts of a window a restart split)."""
        edges = dict(self.buckets)
        for edge, count in other.buckets:
            edges[edge] = edges.get(edge, 0.0) + count
        return Histogram(self.name, tuple(sorted(edges.items())), self.sum + other.sum,
                         self.count + other.count)

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count else math.nan

    def quantile(self, q: float) -> float:
        """Linear interpolation inside the bucket, as Prometheus' histogram_quantile does."""
        if not self.count:
            return math.nan
        rank = q * self.count
        low_edge, low_count = 0.0, 0.0
        for edge, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(edge):  # past every finite edge: its lower bound, if it has one
                    return low_edge if low_count or edge != self.buckets[0][0] else math.nan
                span = cumulative - low_count
                return low_edge + (edge - low_edge) * ((rank - low_count) / span if span else 0)
            low_edge, low_count = edge, cumulative
        return low_edge


def parse_scrape(text: str, time_s: float | None = None) -> Scrape:
    if "<html" in text[:2000].lower() or "<!doctype" in text[:2000].lower():
        raise InputError("got an HTML page, not Prometheus metrics (is this the /metrics URL?)")
    samples: Samples = {}
    seen: set[tuple[str, frozenset[tuple[str, str]]]] = set()
    bad = 0
    unread: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            bad += 1
            if len(unread) < MAX_UNREAD_KEPT:
                unread.append(line)
            continue
        labels = dict(_LABEL.findall(match.group("labels") or ""))
        series = (match.group("name"), frozenset(labels.items()))
        if series in seen:  # not valid exposition text: two scrapes run together
            raise InputError(f"{match.group('name')} appears twice with the same labels: two "
                             "scrapes saved one after the other? Put a '# scrape_time <unix "
                             "seconds>' line before each")
        seen.add(series)
        value = float(match.group("value"))
        samples.setdefault(match.group("name"), []).append((labels, value))
    if not samples:
        # a line that opens as a sample does (a metric name, then its label set) was meant as
        # one: named, as a page's other samples would name it, not "not a metrics page"
        meant = next((line for line in unread if _MEANT_SAMPLE.match(line)), None)
        if meant is not None:
            raise InputError(f"{shorten(meant)!r} is not a Prometheus sample (name{{labels}} "
                             "value [timestamp])")
        raise InputError("no Prometheus samples found: this is not a metrics page")
    if bad > len(samples) * 4:
        raise InputError(f"{bad} lines are not Prometheus samples: this is not a metrics page")
    return Scrape(time_s, samples, tuple(unread))


def unix_seconds(t: float) -> str:
    """A scrape's time as its line gives it, to the millisecond (1764953600.5 reads
    '1,764,953,600.5 s'): :g's six digits gave every time of the same day as 1.76495e+09."""
    return f"{t:,.3f}".rstrip("0").rstrip(".") + " s"


def split_scrapes(text: str) -> list[Scrape]:
    """One or several scrapes from a saved file, in time order."""
    chunks: list[tuple[float | None, list[str]]] = [(None, [])]
    for line in text.splitlines():
        mark = _SCRAPE_MARK.match(line.strip())
        if mark:
            seconds = float(mark.group(1))
            if seconds > MAX_UNIX_S:
                raise InputError(f"scrape_time {mark.group(1)} is past the year 5000: unix "
                                 "seconds, not milliseconds")
            chunks.append((seconds, []))
        elif _SCRAPE_WORD.match(line.strip()):
            raise InputError(f"{line.strip()[:80]!r}: a scrape_time is unix seconds, such as "
                             "'# scrape_time 1764500000'")
        else:
            chunks[-1][1].append(line)
    times = [t for t, lines in chunks if t is not None]
    for earlier, later in itertools.pairwise(times):
        if later - earlier < MIN_SCRAPE_GAP_S:
            sign = "+" if later >= earlier else ""
            raise InputError(f"scrape_time {unix_seconds(later)} follows "
                             f"{unix_seconds(earlier)} ({sign}{unix_seconds(later - earlier)}): "
                             f"scrapes go forward in time, at least {MIN_SCRAPE_GAP_S:g} s apart "
                             "for a rate")
    scrapes = [parse_scrape("\n".join(lines), t) for t, lines in chunks
               if any(x.strip() and not x.startswith("#") for x in lines)]
    if not scrapes:
        raise InputError("no Prometheus samples found")
    untimed = [i for i, s in enumerate(scrapes, 1) if s.time_s is None]
    if len(scrapes) > 1 and untimed:
        raise InputError(f"scrape {untimed[0]} of {len(scrapes)} has no '# scrape_time <unix "
                         "seconds>' line before it: rates need every scrape's time")
    return scrapes
