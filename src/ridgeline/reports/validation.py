"""`ridgeline validate FILE` and `ridgeline calibrate FILE -o profile.json`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ridgeline.calibrate import ErrorStats, error_stats
from ridgeline.engines import EngineProfile
from ridgeline.explain import Step
from ridgeline.measurements import Measurement
from ridgeline.predict import Prediction
from ridgeline.render import table


def _stats_rows(stats: Sequence[ErrorStats]) -> list[list[str]]:
    return [[s.group, str(s.rows), f"{s.median_abs_error:.1%}", f"{s.p90_abs_error:.1%}",
             f"{s.median_signed_error:+.1%}"] for s in stats]


@dataclass(frozen=True)
class ValidationReport:
    rows: tuple[Measurement, ...]
    predictions: tuple[Prediction, ...]
    read_errors: tuple[str, ...]
    show_rows: bool = True
    steps: tuple[Step, ...] = ()

    def _by(self, column: str) -> list[ErrorStats]:
        lookup = {r.id: r for r in self.rows}
        return error_stats(self.predictions, lambda p: str(getattr(lookup[p.id], column)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": [{"id": p.id, "metric": p.metric, "measured": p.measured,
                      "predicted": p.predicted, "low": p.low, "high": p.high,
                      "error": p.error, "reason": p.reason or None,
                      "caveat": p.caveat or None}
                     for p in self.predictions],
            "summary": {column: [vars(s) for s in self._by(column)]
                        for column in ("metric", "engine", "gpu")},
            "read_errors": list(self.read_errors),
        }

    def text_lines(self) -> list[str]:
        lines: list[str] = []
        if self.show_rows:
            rows = [[p.id, p.metric, f"{p.measured:,.4g}",
                     "-" if p.predicted is None else f"{p.predicted:,.4g}",
                     p.reason if p.error is None else f"{p.error:+.1%}" + (" *" if p.caveat
                                                                            else "")]
                    for p in self.predictions]
            lines += [*table(rows, ["id", "metric", "measured", "predicted", "error"]), ""]
            caveats: dict[str, list[str]] = {}  # one line per caveat, with the rows it covers
            for p in self.predictions:
                if p.caveat and p.error is not None:
                    caveats.setdefault(p.caveat, []).append(p.id)
            if caveats:
                lines.append("* still scored; the engine did something the model leaves out:")
                lines += [f"  {ids[0] if len(ids) == 1 else f'{len(ids)} rows ({ids[0]}, …)'}: "
                          f"{caveat}" for caveat, ids in caveats.items()]
                lines.append("")
        for column, title in (("metric", "metric"), ("engine", "engine"), ("gpu", "accelerator")):
            lines += table(_stats_rows(self._by(column)),
                           [title, "rows", "median |err|", "p90 |err|", "median err"])
            lines.append("")
        unpredicted = sum(1 for p in self.predictions if p.predicted is None)
        lines.append(f"{len(self.predictions) - unpredicted} rows scored, {unpredicted} without a "
                     f"prediction (reason given), {len(self.read_errors)} unreadable")
        lines += [f"  unreadable: {e}" for e in self.read_errors]
        return lines


@dataclass(frozen=True)
class CalibrationReport:
    profiles: Mapping[str, EngineProfile]
    before: tuple[ErrorStats, ...]
    after: tuple[ErrorStats, ...]
    output: str
    steps: tuple[Step, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"output": self.output,
                "profiles": {e: p.to_dict() for e, p in self.profiles.items()},
                "before": [vars(s) for s in self.before], "after": [vars(s) for s in self.after]}

    def text_lines(self) -> list[str]:
        lines = [f"wrote {self.output}"]
        for engine, p in self.profiles.items():
            groups = ", ".join(f"{g} x{v:.2f}" for g, v in p.group_bandwidth.items())
            lines.append(f"  {engine}: bandwidth {p.bandwidth_efficiency:.0%}, compute "
                         f"{p.compute_efficiency:.0%}, {p.step_overhead_s * 1e6:,.0f} µs/step, "
                         f"{p.layer_overhead_s * 1e6:,.1f} µs/layer"
                         + (f" ({p.prefill_layer_overhead_s * 1e6:,.1f} in a prefill step)"
                            if p.prefill_layer_overhead_s is not None else "")
                         + (f"; bandwidth by group: {groups}" if groups else "")
                         + f"; band {p.band_low:.2f}–{p.band_high:.2f}")
        lines.append("")
        before = {s.group: s for s in self.before}
        rows = [[s.group, str(s.rows), f"{before[s.group].median_abs_error:.1%}"
                 if s.group in before else "-", f"{s.median_abs_error:.1%}"] for s in self.after]
        lines += table(rows, ["metric", "rows", "before (bundled)", "after (this profile)"])
        lines.append(f"use it with --profile {self.output}")
        return lines
