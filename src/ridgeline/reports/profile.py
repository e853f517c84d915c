"""`ridgeline profile`: what an engine profile holds — each fitted term with its unit and what
it prices, the share of rated bandwidth and dense peak each accelerator group takes, and the
rows it was fitted on. The bundled profiles (data/profiles.json) or a `calibrate -o` file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ridgeline.calibrate_held import held_parameters
from ridgeline.engine_platforms import engine_platform_problem
from ridgeline.engines import EngineProfile, accelerator_group, bandwidth_group
from ridgeline.explain import Step
from ridgeline.hardware import Accelerator
from ridgeline.render import table
from ridgeline.reports.profile_story import NOTHING_S
from ridgeline.units import plural


@dataclass(frozen=True)
class Term:
    """One fitted coefficient of a profile: its field in the file, the unit its SI value is
    in, and what it prices, in words."""

    field: str
    name: str
    unit: str  # of the value in the file (and --json): s, B/s, fraction, ×, ops/weight, tokens
    meaning: str


TERMS = (
    Term("bandwidth_efficiency", "bandwidth share", "fraction",
         "share of rated memory bandwidth the weight and KV streams reach (before a group's "
         "multiplier)"),
    Term("compute_efficiency", "compute share", "fraction",
         "share of dense peak the matmuls reach (before a group's multiplier)"),
    Term("bandwidth_cap_bytes_per_s", "bandwidth ceiling", "B/s",
         "the most a matrix-vector kernel streams on any card, in series with the share: "
         "1 ÷ reached = 1 ÷ (share × rated) + 1 ÷ ceiling"),
    Term("step_overhead_s", "cost per step", "s", "fixed cost of each forward pass"),
    Term("layer_overhead_s", "cost per layer", "s",
         "fixed cost of each layer of a step (a decode step's, where prompt steps have their own)"),
    Term("prefill_layer_overhead_s", "cost per layer of a prompt step", "s",
         "per layer of a step carrying prompt tokens: its kernels launched one by one, outside "
         "the CUDA graphs decode replays"),
    Term("matmul_overhead_s", "cost per weight matmul", "s",
         "per weight matmul a step launches (a dense Llama layer runs four, a DeepSeek MoE "
         "layer ten)"),
    Term("moe_layer_overhead_s", "cost per MoE layer", "s",
         "per routed-expert layer, beside the cost per layer: the router, top-k and gathers "
         "run as kernels waiting on each other"),
    Term("dequant_compute", "quantized matmul speed", "×",
         "the compute share's multiplier where weights are narrower than their matmuls"),
    Term("kquant_ops_per_weight", "K-quant unpacking", "ops/weight",
         "vector operations unpacking one K-quant weight costs where matmuls run on ALUs"),
    Term("expert_tile_tokens", "expert tile", "tokens",
         "token columns a prompt's expert matmul computes per tile, however few it was routed"),
)
_SECONDS = {t.field for t in TERMS if t.unit == "s"}


def priced(profile: EngineProfile, term: Term) -> bool:
    """Whether the profile prices this term: a ceiling or prompt-layer cost not None, a
    multiplier not 1, an additive term not 0."""
    value: float | None = getattr(profile, term.field)
    if value is None:
        return False
    return value != 1.0 if term.unit == "×" else value != 0.0


def percent(fraction: float) -> str:
    """A share as the text prints it: 0.5814 → "58.1 %"."""
    return f"{fraction * 100:.1f} %"


def term_text(value: float, unit: str) -> str:
    """A term as the text prints it: 5.93e-05 s → "59.3 µs", 4.95e-3 s → "4,954 µs" (whole
    from 1,000 µs, as calibrate prints it), 3.67e12 B/s → "3.67 TB/s", 0.58 fraction →
    "58.1 %"; a fixed cost under 0.1 µs reads "0 µs" (fitted to nothing)."""
    if unit == "s":
        us = value * 1e6
        return "0 µs" if value < NOTHING_S else f"{us:,.0f} µs" if us >= 1e3 else f"{us:.3g} µs"
    if unit == "B/s":
        return f"{value / 1e12:.3g} TB/s"
    if unit == "fraction":
        return percent(value)
    if unit == "×":
        return f"{value:.3g}×"
    return f"{value:.3g} {unit}"


@dataclass(frozen=True)
class GroupShares:
    """The shares a profile gives an accelerator group's cards: its own multiplier where
    fitted, else the group it borrows (``takes``); the ceiling is a card's, not a group's."""

    group: str
    fitted_rows: int
    takes: str  # the group whose multipliers apply (itself where its rows set them)
    bandwidth_share: float
    compute_share: float
    fitted_max_batch: int | None
    max_batch_optimism: float | None

    @classmethod
    def of(cls, profile: EngineProfile, group: str) -> GroupShares:
        takes = profile.group_stand_in(group)
        compute = min(1.0, profile.compute_efficiency * profile.group_compute.get(takes, 1.0))
        return cls(group, profile.fitted_groups.get(group, 0), takes,
                   profile.group_bandwidth_share(takes), compute,
                   profile.fitted_max_batch.get(group), profile.max_batch_optimism.get(group))


def group_shares(profile: EngineProfile) -> tuple[GroupShares, ...]:
    """Every group the profile saw rows of or carries a multiplier for, sorted by name."""
    groups = {*profile.fitted_groups, *profile.group_bandwidth, *profile.group_compute}
    return tuple(GroupShares.of(profile, g) for g in sorted(groups))


@dataclass(frozen=True)
class OnCard:
    """The profile's shares on one card: the bandwidth share under the ceiling, what it reaches."""

    accelerator: Accelerator
    group: str
    bandwidth_share: float
    reached_bytes_per_s: float
    compute_share: float
    bandwidth_story: str
    compute_story: str
    caution: str

    @classmethod
    def of(cls, profile: EngineProfile, acc: Accelerator) -> OnCard:
        share = profile.bandwidth_for(acc)
        return cls(acc, accelerator_group(acc), share, share * acc.memory_bandwidth_bytes_per_s,
                   profile.compute_for(acc), profile.bandwidth_story(acc),
                   profile.compute_story(acc), profile.calibration_caution(acc))


@dataclass(frozen=True)
class ProfileView:
    profile: EngineProfile
    groups: tuple[GroupShares, ...]
    on_card: OnCard | None
    refused: str = ""  # why the engine does not run on --gpu's card, as decode refuses it

    def to_dict(self) -> dict[str, Any]:
        p = self.profile
        card = self.on_card
        return {
            "engine": p.engine, "source": p.source, "fitted_rows": p.fitted_rows,
            "prompt_rows": p.compute_rows, "held": None if p.held is None else list(p.held),
            "band_low": p.band_low, "band_high": p.band_high,
            "terms": {t.field: {"value": getattr(p, t.field), "unit": t.unit,
                                "priced": priced(p, t), "meaning": t.meaning} for t in TERMS},
            "groups": {g.group: {"fitted_rows": g.fitted_rows, "takes": g.takes,
                                 "bandwidth_share": g.bandwidth_share,
                                 "compute_share": g.compute_share,
                                 "fitted_max_batch": g.fitted_max_batch,
                                 "max_batch_optimism": g.max_batch_optimism}
                       for g in self.groups},
            "refused_on_accelerator": self.refused or None,
            "on_accelerator": None if card is None else {
                "accelerator": card.accelerator.id, "group": card.group,
                "bandwidth_group": bandwidth_group(card.accelerator),
                "bandwidth_share": card.bandwidth_share,
                "reached_bandwidth_bytes_per_s": card.reached_bytes_per_s,
                "compute_share": card.compute_share, "bandwidth_story": card.bandwidth_story,
                "compute_story": card.compute_story, "caution": card.caution or None},
        }

    def text_lines(self) -> list[str]:
        p = self.profile
        prompt = "" if p.compute_rows is None else \
            f"; {p.compute_rows:,} prompt (prefill/TTFT) {plural(p.compute_rows, 'row')} set " \
            "the compute share" if p.compute_rows else \
            "; no prompt rows: the compute share is its prior's"
        lines = [f"{p.engine}: {p.source}{prompt}"]
        # its record, as calibrate words it: the held terms that price something, by name
        held = [name for name, _ in held_parameters(p, None)] if p.held else []
        if held:
            lines.append(f"  held at the prior's value (its rows could not pin them): "
                         f"{', '.join(held)}")
        rows = [[t.name, term_text(getattr(p, t.field), t.unit),
                 t.meaning + ("; fitted to nothing" if t.unit == "s"
                              and getattr(p, t.field) < NOTHING_S else "")]
                for t in TERMS if priced(p, t)]
        rows.append(["band", f"×{p.band_low:.2f}–×{p.band_high:.2f}",
                     "p10–p90 of measured ÷ predicted rate over its rows"])
        name_w = max(len(r[0]) for r in rows)
        value_w = max(len(r[1]) for r in rows)
        lines += [f"  {name.ljust(name_w)}  {value.rjust(value_w)}  {meaning}"
                  for name, value, meaning in rows]
        # a prompt step with no cost per layer of its own pays the decode steps' (per_layer_s)
        unpriced = [t.name + (" (a prompt step pays the cost per layer)"
                              if t.field == "prefill_layer_overhead_s" else "")
                    for t in TERMS if not priced(p, t)]
        if unpriced:
            lines.append(f"  not priced: {', '.join(unpriced)}")
        if self.groups:
            grows = [[g.group, f"{g.fitted_rows:,}", percent(g.bandwidth_share),
                      percent(g.compute_share),
                      "-" if g.fitted_max_batch is None else f"{g.fitted_max_batch:,}",
                      "" if g.takes == g.group else f"{g.takes}'s"]
                     for g in self.groups]
            lines.append("  by accelerator group (a card's bandwidth share is also under the "
                         "ceiling where there is one: --gpu):")
            lines += ["    " + line for line in
                      table(grows, ["group", "rows", "bandwidth share", "compute share",
                                    "largest decode batch", "shares"], left=1)]
        if self.refused:
            lines.append(f"  not on this card: {self.refused}")
        card = self.on_card
        if card is not None:
            acc = card.accelerator
            lines += [f"  on {acc.id} ({card.group}): bandwidth share {percent(card.bandwidth_share)}"
                      f" of {acc.memory_bandwidth_bytes_per_s / 1e12:.3g} TB/s rated = "
                      f"{card.reached_bytes_per_s / 1e12:.3g} TB/s ({card.bandwidth_story}); "
                      f"compute share {percent(card.compute_share)} ({card.compute_story})"]
            if card.caution:
                lines.append(f"  caution: {card.caution}")
        return lines


@dataclass(frozen=True)
class ProfileReport:
    origin: str  # "bundled" or the file's path
    views: tuple[ProfileView, ...]
    steps: tuple[Step, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        card = next((v.on_card for v in self.views if v.on_card is not None), None)
        return {"origin": self.origin,
                "accelerator": None if card is None else card.accelerator.id,
                "profiles": [v.to_dict() for v in self.views]}

    def text_lines(self) -> list[str]:
        where = "the bundled profiles (src/ridgeline/data/profiles.json)" \
            if self.origin == "bundled" else self.origin
        lines = [f"{len(self.views)} engine profile{'' if len(self.views) == 1 else 's'} "
                 f"from {where}; step time = per step + layers × per layer (+ matmuls, MoE "
                 "layers) + Σ max(FLOPs ÷ (peak × compute share), bytes ÷ (bandwidth × "
                 "bandwidth share))"]
        for view in self.views:
            lines += ["", *view.text_lines()]
        return lines


def profile_report(origin: str, profiles: tuple[EngineProfile, ...],
                   acc: Accelerator | None = None,
                   steps: tuple[Step, ...] = ()) -> ProfileReport:
    """The report of these profiles (and, with ``acc``, their shares on that card, or why an
    engine does not run on it: engine_platform_problem, decode's refusal)."""
    views = []
    for p in profiles:
        refused = "" if acc is None else engine_platform_problem(p.engine, acc)
        on_card = None if acc is None or refused else OnCard.of(p, acc)
        views.append(ProfileView(p, group_shares(p), on_card, refused))
    return ProfileReport(origin, tuple(views), steps)
