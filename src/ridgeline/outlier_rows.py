"""Rows whose prediction is off by more than 100 %: each is marked in `validate`, with a
one-line reason, and the medians are given both with them (the honest figure) and without the
ones that have a reason.

A row's reason is, in order: its caveat (what the engine did that the model leaves out, or a
unit slip), else a phrase of its own notes that explains it (EXPLAINING_NOTES), else
"unexplained". Nothing is dropped or refitted here: a row past 100 % stays in every median.
Example: rocm.csv's `ROCM-LLMTRK-mi300x-L2-7B-Q4_0-fa0-pp512` measured 1,334 tok/s where
11,976 is priced, +797.5 %; its notes say "before the CDNA MFMA/MMQ work of PR #14624", the
llama.cpp build it ran predating the MI300X matrix kernels the profile prices.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ridgeline.measurements import Measurement
from ridgeline.predict import Prediction

# |error| (predicted ÷ measured − 1) past which a row is marked: the prediction is more than
# twice the measurement
PAST_ERROR = 1.0
# phrases that, in a row's notes, say why its figure is far from what a current build does:
# a build older than the kernel work that made the card fast ("before the CDNA MFMA/MMQ work
# of PR #14624")
EXPLAINING_NOTES = (
    re.compile(r"before the [^;,()|]*?\b(?:work|fix|kernels?)\b[^;,()|]*?PR #\d+"),
)
UNEXPLAINED = "unexplained"


@dataclass(frozen=True)
class OutlierRow:
    """A scored row past PAST_ERROR, and why: ``source`` is "caveat", "notes" or "" (none)."""
    id: str
    metric: str
    error: float
    reason: str
    source: str

    @property
    def explained(self) -> bool:
        return bool(self.source)


def notes_reason(notes: str) -> str:
    """The phrase of a row's notes that explains a far-off figure, or "":
    "… build d5cb8684 (3891), Oct 2024 (before the CDNA MFMA/MMQ work of PR #14624) …"
    gives "before the CDNA MFMA/MMQ work of PR #14624"."""
    for pattern in EXPLAINING_NOTES:
        found = pattern.search(notes)
        if found:
            return found.group(0)
    return ""


def outlier_rows(rows: Sequence[Measurement], predictions: Sequence[Prediction]
                 ) -> tuple[OutlierRow, ...]:
    """Each scored row whose |error| is past PAST_ERROR, with its reason (caveat, notes, or
    none), in the rows' order."""
    notes = {r.id: r.notes for r in rows}
    out = []
    for p in predictions:
        if p.error is None or abs(p.error) <= PAST_ERROR:
            continue
        quoted = notes_reason(notes.get(p.id, ""))
        if p.caveat:
            out.append(OutlierRow(p.id, p.metric, p.error, p.caveat, "caveat"))
        elif quoted:
            out.append(OutlierRow(p.id, p.metric, p.error, f"notes: '{quoted}'", "notes"))
        else:
            out.append(OutlierRow(p.id, p.metric, p.error, UNEXPLAINED, ""))
    return tuple(out)
