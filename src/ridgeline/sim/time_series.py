"""The simulator's gauges over time (running batch, waiting queue, KV usage, preemptions),
thinned so memory stays flat however long the run.

One row per instant, at most ``limit`` (2,000): as they fill, the resolution halves. Engines
running side by side (pipeline lanes, sim/lanes.py) are summed into one (``summed_series``)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


@dataclass
class TimeSeries:
    """Running batch, waiting queue, KV usage and preemptions, thinned to ≤ ``limit`` points."""

    limit: int = 2000
    every_s: float = 0.0
    points: list[tuple[float, int, int, float, int]] = field(default_factory=list)

    def add(self, t: float, running: int, waiting: int, usage: float, preemptions: int) -> None:
        """A reading at ``t``; a second at the same instant (a step's start read after the
        arrivals due then, beside the last step's end) replaces the first: one row a time,
        the state that holds from it."""
        if self.points and t == self.points[-1][0]:
            self.points[-1] = (t, running, waiting, usage, preemptions)
            return
        if self.points and t - self.points[-1][0] < self.every_s:
            return
        self.points.append((t, running, waiting, usage, preemptions))
        if len(self.points) >= self.limit:  # halve the resolution, keep memory flat
            self.points = self.points[::2]
            self.every_s = max(self.every_s * 2, (self.points[-1][0] - self.points[0][0])
                               / self.limit)

    def preempted_between(self, start_s: float, end_s: float) -> int:
        """Preemptions from the sample at or before ``start_s`` to the one at or before
        ``end_s`` (to the thinned samples' times)."""
        def count_at(t: float) -> int:
            i = bisect.bisect_right(self.points, t, key=lambda p: p[0])
            return self.points[i - 1][4] if i else 0
        return count_at(end_s) - count_at(start_s)


def summed_series(series: list[TimeSeries]) -> TimeSeries:
    """Engines running side by side as one: at each sampled time the running, waiting and
    preempted counts summed and the KV usage averaged, each engine's last sample standing
    until its next (none before its first)."""
    times = sorted({p[0] for s in series for p in s.points})
    merged = TimeSeries()
    cursors = [0] * len(series)
    for t in times:
        running = waiting = preempted = 0
        usage = 0.0
        for i, s in enumerate(series):
            while cursors[i] + 1 < len(s.points) and s.points[cursors[i] + 1][0] <= t:
                cursors[i] += 1
            if s.points and s.points[cursors[i]][0] <= t:
                _, n, w, u, p = s.points[cursors[i]]
                running, waiting, usage, preempted = running + n, waiting + w, usage + u, \
                    preempted + p
        merged.add(t, running, waiting, usage / len(series), preempted)
    return merged
