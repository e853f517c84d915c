"""One renderer for every answer: text, ``--json``, or ``--explain``."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from ridgeline import __version__
from ridgeline.errors import DoesNotFit
from ridgeline.explain import Step, step_dict
from ridgeline.reports import Report


def _clean(value: Any) -> Any:
    """JSON has no infinity: write null for it, keep everything else."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _stamped(data: dict[str, Any], input_cautions: Sequence[str],
             notes: Sequence[str]) -> dict[str, Any]:
    """Every --json object as it leaves: ``ridgeline_version`` first (the one place it is
    added), the command line's own cautions put first among the report's ``cautions``, and
    its notes (the flags read and ignored, said on stderr too) first among ``notes``, a list
    on every object but a card record (docs/json.md)."""
    out: dict[str, Any] = {"ridgeline_version": __version__, **data}
    if input_cautions:
        out["cautions"] = [*input_cautions, *(data.get("cautions") or [])]
    own = data.get("notes")
    if not isinstance(own, str):  # a card record's notes (hardware NAME) stay its own string,
        out["notes"] = [*notes, *(own or [])]  # as --gpu-file reads the record back
    return out


def render(report: Report, as_json: bool = False, explain: bool = False,
           input_cautions: Sequence[str] = (), notes: Sequence[str] = ()) -> str:
    """The report as text or one JSON object. ``input_cautions``: what the command line's own
    reading cautioned (a card resized by --gpu-memory-gib), said on stderr for text and put
    first among the JSON's cautions, so a reader of either learns it; ``notes``: the
    launch-line notes (cli.main says them on stderr after the report), kept in the JSON's
    ``notes`` too."""
    if as_json:
        data = report.to_dict()
        if isinstance(data, dict):
            data = _stamped(data, input_cautions, notes)
        if explain:
            own = _own_explain(report)
            stepped = getattr(report, "explain_step_dicts", None)
            data["explain"] = (stepped() if stepped else own()) if own else _step_dicts(report)
        return json.dumps(_clean(data), indent=2)
    lines = report.text_lines()
    if explain:
        lines.append("")
        lines.append("How each number was computed:")
        own = _own_explain(report)
        detail = own() if own else _step_lines(report)
        lines.extend("  " + line for line in detail)
        if not detail:  # a listing or a file written: no arithmetic of its own to show
            lines.append("  no worked steps for this output: each figure above says where it comes from")
    return "\n".join(lines)


def refusal_json(refusal: DoesNotFit, message: str, input_cautions: Sequence[str] = (),
                 notes: Sequence[str] = ()) -> str:
    """Under --json, a refusal that is an answer (simulate's, utilization's or amdahl's
    "does not fit", simulate's "the engine refused every request") as the one object every
    such answer has: ``{"fits": false, "error": {"code": "does_not_fit", "message": …}}``,
    stamped as every report is. Bad input prints no JSON (exit 2, one stderr line)."""
    data = {"fits": False, "error": {"code": refusal.code, "message": message},
            "cautions": []}
    return json.dumps(_clean(_stamped(data, input_cautions, notes)), indent=2)


def _own_explain(report: Report) -> Any:
    """A report's own explanation (free text: evalstats, prefix) where it has no Step objects;
    None where it has steps, which render as every command's do."""
    return None if getattr(report, "steps", ()) else getattr(report, "explain_lines", None)


def _groups(report: Report) -> tuple[tuple[str, tuple[Step, ...]], ...]:
    """A report's working in headed blocks (``step_groups``: one per point of a decode
    sweep) where it has several; else none, and its steps are one block."""
    groups = getattr(report, "step_groups", ())
    return tuple(groups) if len(groups) > 1 else ()


def _step_lines(report: Report) -> list[str]:
    """The --explain text: the steps, or each block under its heading."""
    groups = _groups(report)
    if not groups:
        return [line for s in report.steps for line in s.lines()]
    return [line for heading, steps in groups
            for line in (f"{heading}:", *("  " + text for s in steps for text in s.lines()))]


def _step_dicts(report: Report) -> list[dict[str, Any]]:
    """The --explain JSON: one object per step, each naming its block where there are
    several ("point": "batch 32 at 2,000 tokens of context")."""
    groups = _groups(report)
    if not groups:
        return [step_dict(s) for s in report.steps]
    return [{"point": heading, **step_dict(s)} for heading, steps in groups for s in steps]


def table(rows: list[list[str]], header: list[str], left: int = 1) -> list[str]:
    """The first ``left`` columns (words) left-aligned, the others (figures) right-aligned."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def fmt(row: list[str]) -> str:
        cells = [str(c).ljust(widths[i]) if i < left else str(c).rjust(widths[i])
                 for i, c in enumerate(row)]
        return "  ".join(cells).rstrip()

    return [fmt(header), *(fmt(r) for r in rows)]
