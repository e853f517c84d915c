"""The first line of a decode or prefill report where some of its points do not run: how many
the memory refuses, how many the engine refuses though they fit (vLLM would refuse to start at
its default max_model_len, or runs fewer at once), the engine's reason first, then the worst
shortfall past the memory. Decode counts batch × context points, prefill prompts.

Llama-3.1-70B at fp8 on one H100, batch 1 and 32 at 2,000 tokens: 'DOES NOT FIT on vLLM 0.34
at any of the 2 points: vLLM … would refuse to start …; and batch 32 at 2,000 tokens does not
fit in memory: 72.7 GB of weights + …'. Wording holds each report's nouns, and the two clauses
the reports still say differently: where the engine's reasons differ, decode names the first and
counts the rest, prefill counts the rows (its reasons carry each prompt's length).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ridgeline.units import GB

if TYPE_CHECKING:
    from ridgeline.raw_fit import FitCheck


@dataclass(frozen=True)
class Row:
    """One point of a report as its first line counts it."""

    where: str  # how the line names it: "batch 32 at 2,000 tokens", "8,000 tokens"
    fit: FitCheck  # the memory's verdict on it
    runs: bool  # the engine, started as the report starts it, runs it (engine_runs.seated)
    # ranks the rows past the memory, the largest named: decode's shortfall in bytes (its
    # worst), prefill's prompt tokens (its longest)
    size: float
    reason: str = ""  # why the engine does not run it where it fits the memory
    held: bool = False  # the engine runs some of this length at once, only not this many
    # the engine refuses this row itself, not its launch (TensorRT-LLM's prompt past
    # max_num_tokens, chunked prefill off): it DOES NOT RUN, though a shorter one would
    turned_away: bool = False


@dataclass(frozen=True)
class Wording:
    """How a report names its rows, and the clause decode and prefill say differently."""

    noun: str  # one row: "point", "prompt"
    any_of: str  # "at any of" (the 2 points), "for any of" (the 2 prompts)
    worst: str  # the row past the memory the line names: "worst", "longest"
    # where the weights alone are past the memory: 'at any batch', 'whatever the prompt'
    whatever: str
    # the engine's reasons where they differ: decode names the first and counts the rest
    # ('; the engine refuses 1 more (the table)'); prefill only counts the rows ('the engine
    # refuses 2 that fit the memory (under the table)')
    names_first_reason: bool


DECODE = Wording("point", "at any of", "worst", "at any batch", names_first_reason=True)
PREFILL = Wording("prompt", "for any of", "longest", "whatever the prompt",
                  names_first_reason=False)


def refusal_headline(rows: Sequence[Row], on: str, words: Wording, hint: str = "") -> str:
    """The report's first line where a row does not run ("" where every one runs), ``on`` the
    engine as priced ('vLLM 0.34'), ``hint`` said once after a reason where no refused row
    runs any sequence of its length ('(`ridgeline fit` for the breakdown)'; "" where the
    reasons carry it). One row leads with its own verdict: the memory's DOES NOT FIT, or the
    engine's (point_refusal)."""
    unfit = [r for r in rows if not r.fit.fits]
    refused = [r for r in rows if r.fit.fits and not r.runs]
    if len(rows) == 1:
        return rows[0].fit.headline() if unfit else \
            point_refusal(rows[0], on, hint) if refused else ""
    if refused:
        return _refused_headline(len(rows), unfit, refused, on, words, hint)
    if not unfit:
        return ""
    worst = max(unfit, key=lambda r: r.size)
    n, out = len(rows), len(unfit)
    if out == n:  # none runs: say so, not just the worst row
        alone = (f"; the weights alone, {worst.fit.weight_bytes / GB:,.1f} GB, exceed the "
                 f"memory {words.whatever}" if worst.fit.kv_room_bytes < 0 else "")
        return (f"DOES NOT FIT {words.any_of} the {n} {words.noun}s; the {words.worst}, "
                f"{worst.where}: {_shortfall(worst)}{alone}")
    return (f"{_count(out, n, words.noun)} not fit; the {words.worst}, {worst.where}: "
            + _shortfall(worst))


def point_refusal(row: Row, on: str, hint: str = "") -> str:
    """The verdict a row that fits the memory but that the engine would not run leads with,
    as fit's DOES NOT FIT leads: the engine's refusal (Llama-3.1-8B at 200,000 tokens: 'DOES
    NOT FIT on vLLM 0.34: vllm refuses --max-model-len 200,000, past …'), or, where it runs
    fewer of this length at once, that the batch does not run at once (as utilization's DOES
    NOT RUN AT ONCE), or, where the engine turns the row itself away, DOES NOT RUN (TensorRT-LLM
    and a prompt past max_num_tokens), ``hint`` after a refusal to start."""
    verdict = "DOES NOT RUN AT ONCE" if row.held else "DOES NOT RUN" if row.turned_away else \
        "DOES NOT FIT"
    return f"{verdict} on {on}: {row.reason}" + (
        "" if row.held or row.turned_away or not hint else f" {hint}")


def _refused_headline(n: int, unfit: list[Row], refused: list[Row], on: str, words: Wording,
                      hint: str) -> str:
    """Where the engine refuses rows that fit the memory: how many rows do not run, the
    engine's reason (once where every refused row has the same: a refusal to start at the
    default max_model_len), then the worst memory shortfall."""
    out = len(refused) + len(unfit)
    reasons = list(dict.fromkeys(r.reason for r in refused))
    none_held = not any(r.held or r.turned_away for r in refused)
    if out == n:
        lead = (f"{'DOES NOT FIT' if none_held else 'DOES NOT RUN'} on {on} {words.any_of} "
                f"the {n} {words.noun}s")
    else:
        lead = f"{_count(out, n, words.noun)} not run on {on}"
    if len(reasons) == 1 or words.names_first_reason:
        why = reasons[0] + (f" {hint}" if none_held and hint else "")
        if len(reasons) > 1:
            why += f"; the engine refuses {len(reasons) - 1} more (the table)"
    else:
        why = f"the engine refuses {len(refused)} that fit the memory (under the table)"
    if not unfit:
        return f"{lead}: {why}"
    worst = max(unfit, key=lambda r: r.size)
    return f"{lead}: {why}; " + (
        f"the {words.worst} of the {len(unfit)} past the memory, {worst.where}: "
        if len(unfit) > 1 else f"and {worst.where} does not fit in memory: ") + _shortfall(worst)


def _count(out: int, n: int, noun: str) -> str:
    """'1 of 2 points does', '2 of 3 prompts do': the verb agrees with the count."""
    return f"{out} of {n} {noun}s {'does' if out == 1 else 'do'}"


def _shortfall(row: Row) -> str:
    """The memory's verdict on a row past it, without its DOES NOT FIT."""
    return row.fit.headline().removeprefix("DOES NOT FIT: ")
