"""Rows whose prediction is off by more than a factor of 2 either way: each is marked in
`validate`, with a one-line reason, and the medians are given both with them (the honest
figure) and without the ones that have a reason.

Off by over 2× is predicted ÷ measured past 2 or under ½: an error past +100 % or under
−50 %. The low side counts as the high one does: a TTFT measured at 9× its priced time
(error −89 %) is as far off as one priced at 9× its measurement (+800 %).
A row's reason is, in order: its caveat (what the engine did that the model leaves out, or a
unit slip), else a phrase of its own notes that explains it (EXPLAINING_NOTES), else
"unexplained". Nothing is dropped or refitted here: a marked row stays in every median.
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

# the factor past which a row is marked, either way: predicted ÷ measured over 2 or under ½
FAR_FACTOR = 2.0
# phrases that, in a row's notes, say why its figure is far from what a current build does:
# a build older than the kernel work that made the card fast ("before the CDNA MFMA/MMQ work
# of PR #14624")
EXPLAINING_NOTES = (
    re.compile(r"before the [^;,()|]*?\b(?:work|fix|kernels?)\b[^;,()|]*?PR #\d+"),
)
UNEXPLAINED = "unexplained"


@dataclass(frozen=True)
class OutlierRow:
    """A scored row off by over FAR_FACTOR, and why: ``source`` is "caveat", "notes" or ""
    (none)."""
    id: str
    metric: str
    error: float
    reason: str
    source: str

    @property
    def explained(self) -> bool:
        return bool(self.source)

    @property
    def factor_words(self) -> str:
        """How far off, as a factor of the measurement: "3.0× the measurement" for +200 %,
        "1/9.1 of the measurement" for −89 %."""
        return factor_words(self.error)


def is_far(error: float) -> bool:
    """Whether a row's error (predicted ÷ measured − 1) is off by over FAR_FACTOR either way:
    past +100 % or under −50 %."""
    ratio = 1.0 + error
    return ratio > FAR_FACTOR or ratio < 1.0 / FAR_FACTOR


def factor_words(error: float) -> str:
    """The prediction as a factor of the measurement: "3.0× the measurement" (error +200 %),
    "1/9.1 of the measurement" (−89 %: the measurement 9.1× the prediction)."""
    ratio = 1.0 + error
    if ratio <= 0:
        return "none of the measurement"
    factor = ratio if ratio >= 1.0 else 1.0 / ratio
    digits = 1  # more where one would print the mark itself (2.03× is past 2, "2.0×" is not)
    while f"{factor:.{digits}f}" == f"{FAR_FACTOR:.{digits}f}" and digits < 6:
        digits += 1
    shown = f"{factor:,.{digits}f}"
    return f"{shown}× the measurement" if ratio >= 1.0 else f"1/{shown} of the measurement"


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
    """Each scored row off by over FAR_FACTOR either way (``is_far``), with its reason
    (caveat, notes, or none), in the rows' order."""
    notes = {r.id: r.notes for r in rows}
    out = []
    for p in predictions:
        if p.error is None or not is_far(p.error):
            continue
        quoted = notes_reason(notes.get(p.id, ""))
        if p.caveat:
            out.append(OutlierRow(p.id, p.metric, p.error, p.caveat, "caveat"))
        elif quoted:
            out.append(OutlierRow(p.id, p.metric, p.error, f"notes: '{quoted}'", "notes"))
        else:
            out.append(OutlierRow(p.id, p.metric, p.error, UNEXPLAINED, ""))
    return tuple(out)
