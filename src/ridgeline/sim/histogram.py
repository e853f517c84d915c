"""The log histogram every simulated distribution is kept in: memory stays flat at a million
requests, and a percentile is good to a bin's width (0.23%).

1,000 bins a decade above 0.1 µs (``_LOW``), each 10^(1/1000) = 1.0023 times the last; a
percentile never falls outside the smallest and largest sample seen. The arrivals and the
departures are counted in one too: sim/overload.py reads a rate at each bin's top."""

from __future__ import annotations

import math
from collections.abc import Sequence

_BINS_PER_DECADE = 1000
_LOW = 1e-7  # seconds


_LOG_LOW = math.log10(_LOW)
_log10 = math.log10  # (a module global: one lookup, not two, in ``Histogram.add``)


def linear_position(q: float, count: float) -> float:
    """Where `vllm bench serve` reads the q-th percentile of ``count`` sorted samples
    (numpy.percentile's default, linear): the 0-based position q/100 × (count − 1), between
    the two samples either side. p90 of 10 samples: 8.1, 9.1 s of 1 … 10 s."""
    return q / 100 * (count - 1)


def sorted_percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile of equal-weight ``values`` in ascending order, read as
    ``Histogram.percentile`` reads its samples: the value at ``linear_position``, plus its
    fraction of the step to the next. Of 1 … 10 s, p90 is 9.1 s. NaN: no value."""
    if not values:
        return math.nan
    position = min(max(linear_position(q, len(values)), 0.0), len(values) - 1.0)
    below = math.floor(position)
    low, fraction = values[below], position - below
    return low if not fraction else low + fraction * (values[below + 1] - low)


def bin_index(value: float) -> int:
    """The histogram bin a value falls in (bins equal in log10, from _LOW; 0 below it): the
    recorder compares a request's TTFT and TPOT with the SLO's by bin, as the histogram
    counts them."""
    return int((math.log10(value) - _LOG_LOW) * _BINS_PER_DECADE) if value > _LOW else 0


def bin_top(index: int) -> float:
    """The upper edge of a histogram bin: the least value of the next."""
    return _LOW * 10 ** ((index + 1) / _BINS_PER_DECADE)


class Histogram:
    """Log-binned weighted samples: percentiles within a bin width (0.23%), and never
    outside the smallest and largest sample seen (all equal samples: that value)."""

    def __init__(self) -> None:
        self.counts: dict[int, float] = {}
        self.total = 0.0
        self.sum = 0.0
        self.low = math.inf
        self.high = -math.inf

    def add(self, value: float, weight: float = 1.0) -> None:
        # comparisons for min/max, and bin_index written out: a few adds per request and
        # step, the simulator's most frequent call (4.5 million in the plan tests)
        index = int((_log10(value) - _LOG_LOW) * _BINS_PER_DECADE) if value > _LOW else 0
        counts = self.counts
        counts[index] = counts.get(index, 0.0) + weight
        self.total += weight
        self.sum += value * weight
        if value < self.low:
            self.low = value
        if value > self.high:
            self.high = value

    def add_each(self, values: list[float]) -> None:
        """Each of ``values`` at weight 1, in order: what as many ``add`` calls leave, a run
        of equal values binned once (a pipeline's micro-batch streams its rows' tokens
        together, most a gap equal to the others')."""
        counts, total, summed, low, high = self.counts, self.total, self.sum, self.low, self.high
        last, index = math.nan, 0
        for value in values:
            if value != last:  # (NaN is never equal: binned each time)
                index, last = bin_index(value), value
            counts[index] = counts.get(index, 0.0) + 1.0
            total += 1.0
            summed += value  # value × 1.0, exactly
            if value < low:
                low = value
            if value > high:
                high = value
        self.total, self.sum, self.low, self.high = total, summed, low, high

    def add_line(self, first: float, last: float, n: int, weight: float = 1.0) -> None:
        """n samples evenly spaced from first to last (first ≤ last), each of ``weight``:
        one update per bin they cross, not per sample (the simulator's fast path)."""
        if n < 1:
            return
        lo = bin_index(first)
        hi = bin_index(last)
        self.total += n * weight
        self.sum += (first + last) / 2 * n * weight
        self.low = min(self.low, first)
        self.high = max(self.high, last)
        counts = self.counts
        if lo == hi:
            counts[lo] = counts.get(lo, 0.0) + n * weight
            return
        step = (last - first) / (n - 1)
        placed = 0
        for index in range(lo, hi):  # samples below the next bin's lower edge
            edge = bin_top(index)
            below = min(n, max(placed, math.ceil((edge - first) / step)))
            if below > placed:
                counts[index] = counts.get(index, 0.0) + (below - placed) * weight
                placed = below
        counts[hi] = counts.get(hi, 0.0) + (n - placed) * weight

    def percentile(self, q: float) -> float:
        """The q-th percentile as `vllm bench serve` reads its latencies (numpy.percentile's
        default, linear): the samples sorted, the value at position q/100 × (n − 1),
        interpolated between the two samples either side (``at_position``). NaN: no sample.
        Of 10 samples 1 … 10 s, p90 is 9.1 s (nearest rank read 9 s); of 100, p99 is 99.01."""
        if not self.total:
            return math.nan
        return self.at_position(linear_position(q, self.total))

    def at_position(self, position: float) -> float:
        """The value at ``position`` (0-based, fractional) in the sorted samples, a weight w
        counting as w samples: the sample at floor(position) plus the position's fraction of
        the step to the next (numpy's linear interpolation). A sample is its bin's centre,
        kept within the smallest and largest seen, and is exactly those at the two ends. NaN:
        no sample."""
        if not self.total:
            return math.nan
        position = min(max(position, 0.0), max(self.total - 1, 0.0))
        below = math.floor(position)
        low = self._sample(below)
        fraction = position - below
        return low if not fraction else low + fraction * (self._sample(below + 1) - low)

    def reading(self, q: float) -> tuple[float, float, float]:
        """What ``percentile(q)`` reads, for --explain: the position (q/100 × (n − 1), within
        the samples), the sample at its floor and the one after (the last sample: itself),
        so that percentile = low + (position − ⌊position⌋) × (next − low). Of 10 samples
        1 … 10 s, p90: (8.1, 9, 10), 9.1 s. NaNs: no sample."""
        if not self.total:
            return math.nan, math.nan, math.nan
        position = min(max(linear_position(q, self.total), 0.0), max(self.total - 1, 0.0))
        below = math.floor(position)
        return position, self._sample(below), self._sample(below + 1)

    def _sample(self, rank: int) -> float:
        """The sample at 0-based ``rank`` in sorted order, to its bin: the first bin whose
        running count passes it (the first and the last sample exact)."""
        if rank <= 0:
            return self.low
        if rank >= self.total - 1:
            return self.high
        seen = 0.0
        for index in sorted(self.counts):
            seen += self.counts[index]
            if seen > rank:
                centre = _LOW * 10 ** ((index + 0.5) / _BINS_PER_DECADE)
                return min(max(centre, self.low), self.high)
        return self.high

    def count_to(self, value: float) -> float:
        """The samples at or below ``value``, to its bin (0.23%): the bin holding it counts
        whole."""
        top = bin_index(value)
        return sum(count for index, count in self.counts.items() if index <= top)

    @property
    def mean(self) -> float:
        return self.sum / self.total if self.total else math.nan

    def absorb(self, other: Histogram) -> None:
        """Add another histogram's samples to this one."""
        for index, count in other.counts.items():
            self.counts[index] = self.counts.get(index, 0.0) + count
        self.total += other.total
        self.sum += other.sum
        self.low = min(self.low, other.low)
        self.high = max(self.high, other.high)
