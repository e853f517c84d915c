"""`ridgeline fit` across engines or accelerators: the same model's capacity under several
engines (each at its own defaults), or on several accelerators under one engine, side by side."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ridgeline.explain import Step
from ridgeline.render import table
from ridgeline.reports.fit_target import target_words
from ridgeline.reports.fit_terms import conversation_size
from ridgeline.side_by_side import NotRun, not_run_dict, weights_by_engine
from ridgeline.units import GIB, plural
from ridgeline.vllm_extensible import profiled_split

if TYPE_CHECKING:
    from ridgeline.reports.fit import FitReport


@dataclass(frozen=True)
class FitComparison:
    """The same model's capacity under several engines (each at its own defaults), or on
    several accelerators under one engine."""

    reports: tuple[FitReport, ...]
    by: str = "engine"  # or "accelerator"
    not_run: tuple[NotRun, ...] = ()  # the engines or cards named that cannot run it, and why

    def _name(self, r: FitReport) -> str:
        d = r.deployment
        return r.pool.engine if self.by == "engine" else d.gpus_label

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(replace(st, label=f"{self._name(r)}: {st.label}")
                     for r in self.reports for st in r.steps)

    def to_dict(self) -> dict[str, Any]:
        if self.by == "engine":
            return {"engines": [r.to_dict() for r in self.reports],
                    **not_run_dict(self.not_run, "engine")}
        return {"accelerators": [{"accelerator": r.deployment.accelerator.id, **r.to_dict()}
                                 for r in self.reports],
                **not_run_dict(self.not_run, "accelerator")}

    def text_lines(self) -> list[str]:
        first = self.reports[0]
        d = first.deployment
        engines = list(dict.fromkeys(r.pool.engine for r in self.reports))
        per_card = self.by == "accelerator" and len(engines) > 1  # each card its own default
        rows = [[self._name(r), *([r.pool.engine] if per_card else []),
                 f"{r.pool.kv_cache_bytes / GIB:,.2f}",
                 # every data-parallel rank's pool, as the conversations count them
                 f"{r.pool.logged_tokens(r.context) * r.deployment.data_parallel_size:,}",
                 # a short conversation in its own unit, as the one-engine text
                 conversation_size(r.per_conversation_bytes, gib=""), f"{r.conversations:,}",
                 f"{r.batch:,}", f"{r.verdict}{target_words(r)}"] for r in self.reports]
        target = f", against a target of {first.target:,}" if first.target else ""
        of = f"conversations of {first.context:,} {plural(first.context, 'token')}"
        weights = weights_by_engine([r.deployment for r in self.reports])
        if self.by == "engine":
            head = (f"{d.model.name} on {d.gpus_label}, weights "
                    f"{weights}: {of} by engine{target}")
            foot = ("each at its own defaults, tokens as each engine counts them; "
                    "`--engine NAME` alone for one engine's breakdown and levers")
        else:
            head = (f"{d.model.name} on {', '.join(engines)}"
                    f"{' (each card its own)' if per_card else ''}, weights {weights}: "
                    f"{of} by accelerator{target}")
            foot = "`--gpu NAME` alone for one card's breakdown and levers"
        from ridgeline.offload import placement_lines

        cautions = caution_lines([(self._name(r), r.cautions) for r in self.reports])
        return [head, "", *table(rows, [self.by, *(["engine"] if per_card else []),
                                        "KV GiB/GPU", "tokens", "GiB/conv/GPU",
                                        "conversations", "batch", "verdict"]),
                *(e.line for e in self.not_run),
                *placement_lines([r.deployment for r in self.reports]), *cautions, "", foot]


def caution_lines(named: list[tuple[str, list[str]]]) -> list[str]:
    """Each column's cautions, 'caution (h100-sxm): …'; one every column of several shares
    (vLLM 0.34's sizing after warm-up on every card) said once, 'caution (each): …'."""
    shared = [c for c in named[0][1] if all(c in cs for _, cs in named[1:])] \
        if len(named) > 1 else []
    merged = _profiled_line(named)
    return [f"caution (each): {c}" for c in shared] + merged + [
        f"caution ({name}): {c}" for name, cs in named for c in cs
        if c not in shared and not (merged and profiled_split(c))]


def _profiled_line(named: list[tuple[str, list[str]]]) -> list[str]:
    """vLLM 0.34's caution on every column, said once with each column's figures under 0.33's
    rules (vllm_extensible.profiled_split); [] where a column lacks it or their words differ."""
    splits = [[split for c in cs if (split := profiled_split(c))] for _, cs in named]
    if len(named) < 2 or any(len(found) != 1 for found in splits) \
            or len({found[0][0] for found in splits}) != 1 \
            or len({found[0][1] for found in splits}) == 1:  # the same: said once already
        return []
    return [f"caution (each): {splits[0][0][0]}" + "; ".join(
        f"{name}: {found[0][1]}" for (name, _), found in zip(named, splits))]
