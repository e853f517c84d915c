"""Whether a fitted profile is safe beyond its rows: what those rows span, and the cautions.

coverage says which models, cards and deployments a profile was fitted on; fit_cautions warns
of a fit on one deployment or one model, of a bandwidth share no serving engine runs at (the
share a stream reaches, under the engine's ceiling where it has one), of no fixed cost a step,
and of fixed costs ten times the bundled ones or more, naming the rows that pull them
(far_cost_caution; none of them said of a value held at the bundled profile's).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ridgeline.calibrate_held import ALL_SIDES, held_parameters
from ridgeline.calibrate_rows import rated_bytes_per_s, row_deployment, row_group
from ridgeline.engines import EngineProfile
from ridgeline.measurements import Measurement
from ridgeline.predict import predicted_value
from ridgeline.units import fmt_share, plural


@dataclass(frozen=True)
class Coverage:
    """What a profile's fitted rows span: their models, cards and deployments (a model, its
    weights and KV formats, a card and how many). A fit on one of each prices that one; on
    another, its shares and costs are a guess."""

    models: tuple[str, ...]
    gpus: tuple[str, ...]
    deployments: tuple[str, ...]
    moe: tuple[bool, ...] = ()  # each model's, where the catalog knows it

    @property
    def shown(self) -> str:
        """'1 model (openai/gpt-oss-120b) on 2 cards (h100-sxm, mi300x), 4 deployments'."""
        def named(items: tuple[str, ...], noun: str) -> str:
            listed = ", ".join(items[:4]) + (", …" if len(items) > 4 else "")
            return f"{len(items)} {noun}{'' if len(items) == 1 else 's'} ({listed})"
        n = len(self.deployments)
        return (f"{named(self.models, 'model')} on {named(self.gpus, 'card')}, {n} "
                f"deployment{'' if n == 1 else 's'}")

    def to_dict(self) -> dict[str, list[str]]:
        return {"models": list(self.models), "gpus": list(self.gpus),
                "deployments": list(self.deployments)}


def coverage(rows: Sequence[Measurement], profile: EngineProfile) -> Coverage:
    """The coverage of the rows ``profile`` was fitted on (its fitted_ids among ``rows``)."""
    ids = set(profile.fitted_ids)
    mine = [r for r in rows if r.id in ids]
    models: dict[str, bool | None] = {}
    gpus, deployments = [], []
    for r in mine:
        dep = row_deployment(r)
        gpu = dep.accelerator.id if dep is not None else r.gpu
        models.setdefault(r.model, None if dep is None else dep.model.moe is not None)
        gpus.append(gpu)
        deployments.append(f"{r.model} {r.weights_dtype}/KV {r.kv_dtype} on {r.num_gpus} x {gpu}"
                           + (f" TP{r.tp}" if r.tp != r.num_gpus else ""))
    return Coverage(tuple(sorted(models)), tuple(sorted(set(gpus))),
                    tuple(sorted(set(deployments))),
                    tuple(moe for _, moe in sorted(models.items()) if moe is not None))


# a serving engine's decode streams reach more than this share of the rated bandwidth on
# every card the bundled profiles were fitted on (58 % for vLLM, SGLang and TensorRT-LLM
# together, 74–94 % for llama.cpp's CUDA, ROCm and Metal builds)
MIN_BANDWIDTH_SHARE = 0.5
FULL_SHARE = 0.999  # a reached share at least this: all of rated, at the fit's 100 % clamp
NO_FIXED_COST_S = 1e-9  # a step's fixed cost under this is none


def fit_cautions(profiles: Mapping[str, EngineProfile], rows: Sequence[Measurement],
                 bundled: Mapping[str, EngineProfile] | None = None) -> list[str]:
    """What makes a fitted profile unsafe to use beyond its rows: a fit on one deployment
    or one model, a bandwidth share no serving engine runs at (under MIN_BANDWIDTH_SHARE of
    rated, or all of it reached, on a card group the rows are on), no fixed cost a step
    (neither said of a value held at the bundled profile's: held_parameters), and fixed
    costs far from the bundled ones (far_cost_caution)."""
    out = []
    for engine, p in profiles.items():
        cover, prior = coverage(rows, p), (bundled or {}).get(engine)
        if len(cover.deployments) == 1:
            out.append(f"{engine}: every fitted row is one deployment ({cover.deployments[0]}): "
                       "its shares and costs are that deployment's; on another model or card "
                       "(--profile in plan, decode, simulate) they may be far off — add rows "
                       "of other deployments, or keep this profile to that one")
        elif len(cover.models) == 1:
            kind = "" if not cover.moe else " (MoE)" if cover.moe[0] else " (dense)"
            out.append(f"{engine}: every fitted row is of one model, {cover.models[0]}{kind}, "
                       f"on {', '.join(cover.gpus)}: its shares and costs are that model's; on "
                       "another (--profile in plan, decode, simulate) they may be far off — add "
                       "rows of other models, or keep this profile to that one")
        held = dict(held_parameters(p, prior))  # the bundled profile's values: not fitted
        # (low or high, share %, the ceiling it was held under) → groups
        shares: dict[tuple[str, str, str], list[str]] = {}
        # the groups its rows are on (fitted_groups); a profile without that count, every
        # group it holds a multiplier for: a group carried from the priors was not fitted
        fitted_on = [] if "bandwidth share" in held else \
            sorted(set(p.fitted_groups) or set(p.group_bandwidth)) or [""]
        for group in fitted_on:
            share = p.bandwidth_efficiency * p.group_bandwidth.get(group, 1.0)
            if share < MIN_BANDWIDTH_SHARE:
                shares.setdefault(("low", fmt_share(share, bounds=(MIN_BANDWIDTH_SHARE,)), ""),
                                  []).append(group)
                continue
            # judged by what a stream reaches: a share of 100 % in series with a ceiling
            # reaches less (llama.cpp-cuda's bundled 100 % on GeForce cards, 78.5 % on a 4090)
            reached, ceiling = reached_share(p, share, group, rows)
            if reached > 1.0:
                shares.setdefault(("high", fmt_share(reached, bounds=(1.0,)), ceiling),
                                  []).append(group)
            elif reached >= FULL_SHARE:
                shares.setdefault(("full", "100 %", ceiling), []).append(group)
        for (side, pct, ceiling), groups in shares.items():  # pct on its side of the bound: 100.02%
            where = f" on {' and '.join(groups)} cards" if any(groups) else ""
            bundled_share = f" (the bundled {engine} profile: {bundled_shares(prior, groups)})" \
                if prior is not None else ""
            if side == "full":
                out.append(f"{engine}: bandwidth efficiency fitted at 100 % of rated{where}"
                           f"{ceiling}, every byte the card is rated for{bundled_share}: are "
                           "the rows from a faster card than they name?")
                continue
            out.append(f"{engine}: bandwidth fitted at {pct} of rated{where}{ceiling}, " + (
                f"under {MIN_BANDWIDTH_SHARE:.0%}{bundled_share}: the rows may have run "
                "another deployment than they name (card, weights, GPUs), or work the model "
                "does not price" if side == "low" else
                "past what the card can move: are the rows from a faster card than they "
                "name?"))
        fixed = (p.step_overhead_s, p.layer_overhead_s, p.matmul_overhead_s,
                 p.moe_layer_overhead_s)
        if max(fixed) < NO_FIXED_COST_S and "cost per step" not in held:
            out.append(f"{engine}: no fixed cost a step fitted (0 µs a step, a layer and a weight "
                       "matmul), which every engine pays (scheduling, kernel launches): the rows "
                       "cannot tell it from the bandwidth share — add rows at batch 1 and at "
                       "large batches")
        if prior is not None:
            out += far_cost_caution(engine, p, prior, rows)
    return out


# a fixed cost fitted this many times the bundled profile's (or, beside one, under its
# FAR_COST-th), and this far from it: 0.1 → 2 µs a layer prices next to nothing
FAR_COST = 10.0
FAR_COST_MIN_S = 10e-6
PRICED_S = 0.5e-6  # a bundled cost under this prices nothing (a fit's 5e-12 s): no ratio
# a row the fit reads this much closer (|ln(predicted ÷ measured)|) than the bundled costs
# would, the rest of the fit kept: one of the rows that pull those costs
PULLING = 0.05
FIXED_COSTS = ("step_overhead_s", "layer_overhead_s", "prefill_layer_overhead_s",
               "matmul_overhead_s", "moe_layer_overhead_s")


def far_costs(p: EngineProfile, prior: EngineProfile) -> dict[str, tuple[float, float]]:
    """Each fixed cost (seconds, by field) ``p`` fitted FAR_COST times ``prior``'s or more,
    at least FAR_COST_MIN_S over it, and beside one such, each under its FAR_COST-th (the
    fit's trade: offload.csv's cost per layer 55.1 → 0.0 µs as its cost per step rose):
    (bundled, fitted). A cost the bundled profile does not price (under PRICED_S, or None) is
    a new term, not a move; one fallen alone makes steps cheaper, which the fit's other
    cautions judge (no fixed cost a step)."""
    up, down = {}, {}
    for name in FIXED_COSTS:
        bundled, fitted = getattr(prior, name), getattr(p, name)
        if bundled is None or bundled < PRICED_S or fitted is None \
                or abs(fitted - bundled) < FAR_COST_MIN_S:
            continue
        if fitted >= bundled * FAR_COST:
            up[name] = (bundled, fitted)
        elif fitted <= bundled / FAR_COST:
            down[name] = (bundled, fitted)
    return {name: moved for name in FIXED_COSTS
            if (moved := up.get(name) or (down.get(name) if up else None)) is not None}


def pulling_rows(engine: str, p: EngineProfile, restored: EngineProfile,
                 rows: Sequence[Measurement]) -> list[str]:
    """The ids of ``p``'s fitted rows that ``restored`` (``p`` with some values set back to
    the bundled profile's) reads at least PULLING worse, the most pulled first."""
    ids = set(p.fitted_ids)
    pulls = []
    for r in rows:
        if r.id not in ids or r.value <= 0:
            continue
        fitted = predicted_value(r, {engine: p})
        bundled = predicted_value(r, {engine: restored})
        if fitted and bundled:
            pull = abs(math.log(bundled / r.value)) - abs(math.log(fitted / r.value))
            if pull >= PULLING:
                pulls.append((-pull, r.id))
    return [row_id for _, row_id in sorted(pulls)]


def far_cost_caution(engine: str, p: EngineProfile, prior: EngineProfile,
                     rows: Sequence[Measurement]) -> list[str]:
    """A caution where the fit moved fixed costs FAR_COST times from the bundled profile's,
    naming the rows that pull them (pulling_rows): every step priced with the profile pays
    them, another model's and card's too. validation/offload.csv's 14 llama.cpp-cuda rows fit
    4,953.6 µs a step against 12.0, pulled by its one decode of Qwen3-30B-A3B with experts in
    host memory (--n-cpu-moe 36), which the bundled costs read 32 % fast and the fitted 19 %;
    with them, Llama-3.2-1B's decode on an RTX 4090 ran 2.6× slower than bundled."""
    far = far_costs(p, prior)
    if not far:
        return []
    moved = ", ".join(f"{ALL_SIDES[name]} {b * 1e6:,.1f} → {f * 1e6:,.1f} µs ("
                      + (f"×{f / b:,.0f}" if f > b else f"÷{b / f:,.0f}" if f >= 0.05e-6
                         else "to 0") + ")" for name, (b, f) in far.items())
    back: dict[str, Any] = {name: bundled for name, (bundled, _) in far.items()}
    pulled = pulling_rows(engine, p, replace(p, **back), rows)
    named = ", ".join(pulled[:3]) + (f" and {len(pulled) - 3} more" if len(pulled) > 3 else "")
    costs, them = plural(len(far), "cost"), "it" if len(far) == 1 else "them"
    one = len(pulled) == 1
    steps = "prompt step" if set(far) == {"prefill_layer_overhead_s"} else "step"
    return [f"{engine}: {moved} from the bundled profile: every {steps} this profile prices "
            f"pays {them}, another model's and card's too; " + (
                f"pulled by {named} (read worse with the bundled {costs}): is "
                f"{'its' if one else 'their'} time spent on what the model does not price a "
                "step (weights streamed from host memory, a busy card)? leave "
                f"{'it' if one else 'them'} out, or keep this profile to "
                f"{'its' if one else 'their'} deployments"
                if pulled else f"no row reads much worse with the bundled {costs}: the rows "
                f"cannot pin {them}; keep the bundled profile for other deployments")]


def reached_share(p: EngineProfile, share: float, group: str,
                  rows: Sequence[Measurement]) -> tuple[float, str]:
    """The share of rated bandwidth ``p`` lets a decode stream reach on the slowest card of
    ``group`` its rows were measured on (every fitted row's for the group ""), where the
    engine's ceiling is in series with ``share`` (EngineProfile.share_under_ceiling), and the
    words that say so ("" without a ceiling, or with no row's card known): a share past 1 the
    ceiling holds under it moves no more than the card can. llama.cpp-cuda's 100.02 % of rated
    on nvidia-workstation cards, under its 3.67 TB/s ceiling on the slowest its
    measurements.csv rows name (an RTX 4000 Ada's 360 GB/s): 1 ÷ (1/1.0002 + 0.098) = 91 %."""
    cap = p.bandwidth_cap_bytes_per_s
    if cap is None:
        return share, ""
    ids = set(p.fitted_ids)
    cards = {(rated, r.gpu) for r in rows if r.id in ids
             and (not group or group in (row_group(r), row_group(r, bandwidth=True)))
             and (rated := rated_bytes_per_s(r)) is not None}
    if not cards:
        return share, ""
    rated, card = min(cards)  # the slowest card: the one the ceiling holds back least
    reached = p.share_under_ceiling(share, rated)
    return reached, (f" ({fmt_share(share, bounds=(1.0,))} in series with the "
                     f"{cap / 1e12:.3g} TB/s ceiling, on {card})")


def bundled_shares(prior: EngineProfile, groups: list[str]) -> str:
    """The bandwidth share the bundled profile gives each of ``groups``, its group multiplier
    applied, as a fitted share is to be compared: "75% on nvidia-datacenter, 58% on amd-…"."""
    by_share: dict[int, list[str]] = {}
    for group in groups:
        share = prior.bandwidth_efficiency * prior.group_bandwidth.get(group, 1.0)
        by_share.setdefault(round(share * 100), []).append(group)
    if len(by_share) == 1:
        return f"{next(iter(by_share))}%"
    return ", ".join(f"{pct}% on {' and '.join(g)}" for pct, g in by_share.items())

