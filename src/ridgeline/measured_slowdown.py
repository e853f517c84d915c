"""What the measurements say of a plan's cheapest deployment that its pricing leaves out (FP8
and MXFP4 MoE on CDNA3, predict.cdna3_moe_caution): the TPOT such a deployment keeps at the
least, and the cheapest deployment without the caution that holds in simulation ranked first.
"""

from __future__ import annotations

import math

from ridgeline.candidate import Candidate, candidate_deployment, candidate_label
from ridgeline.engines import EngineProfile
from ridgeline.model import ModelSpec
from ridgeline.plan_checks import (
    CheckRuns,
    Layout,
    cheapest,
    likeliest,
    resize,
    simulated,
    simulated_first,
    verify,
)
from ridgeline.serving_load import Load, Slo
from ridgeline.units import fmt_latency, fmt_latency_limit, plural

# A bound on the TPOT a winner on CDNA3's FP8 and MXFP4 MoE paths keeps, from the slowdowns
# validation/serving.csv measured there (predict.CDNA3_MOE_CAUTION): gpt-oss-120b on one MI300X
# under vLLM 0.17 decoded 1.3x slower than priced at 64 concurrent and 1.5x at 256 (1.4x and
# 2.0x before vLLM's MoE prompt steps were priced slower), DeepSeek-R1 on MI325X 1.5-2.1x. Set
# at the low end when that was 1.4x; now inside the range, not under it. Not a fit.
MEASURED_SLOWDOWN_LOW = 1.4
UNCAUTIONED_CHECKS = 3  # candidates without the caution simulated to find one that holds


def moe_caution(model: ModelSpec, c: Candidate, engine: str) -> str:
    """What the measurements say of ``c``'s deployment that its pricing leaves out: FP8 and
    MXFP4 MoE on CDNA3 (predict.cdna3_moe_caution), or ""."""
    from ridgeline.predict import cdna3_moe_caution

    # no version: the caution reads the card and the experts' format, never the state dtype
    return cdna3_moe_caution(candidate_deployment(model, c, engine))


def slowed_tpot_floor_s(c: Candidate) -> float:
    """The TPOT a candidate the CDNA3 MoE caution covers keeps at the least: its simulated
    TPOT at the SLO's percentile (where not simulated, its analytic mean) × the measured
    slowdown's low end, MEASURED_SLOWDOWN_LOW; queueing behind the slower steps only adds.
    gpt-oss-120b on one MI300X at 10 req/s: a simulated p90 of 24.5 ms, at least 34.3 ms.
    NaN where the load has no TPOT (one output token a request)."""
    tpot_s = c.sim_tpot_s if c.verified else c.tpot_s
    return (tpot_s if tpot_s is not None else math.nan) * MEASURED_SLOWDOWN_LOW


def measured_slowdown(model: ModelSpec, candidates: tuple[Candidate, ...], load: Load,
                      slo: Slo, max_gpus: int, engine_version: str | None, engine: str,
                      profile: EngineProfile | None, runs: CheckRuns | None = None
                      ) -> tuple[str, tuple[Candidate, ...]]:
    """Where the cheapest candidate carries the CDNA3 MoE caution, what to say of it and the
    candidates reordered: the cheapest without the caution that holds in simulation goes
    first, the winner; the cautioned ones cheaper than it stay in the list, unverified
    (``PlanResult.cheaper_unverified``), each with its TPOT floor (``slowed_tpot_floor_s``).
    Those without it are simulated as ``verify_cheapest`` does, in its order
    (``likeliest``: the cheapest once re-sized by its layout's checks so far), until none is
    left whose analytic price, shrunk as much as simulation has shrunk any, is lower than the
    cheapest that held, or UNCAUTIONED_CHECKS checks that ran the simulator are spent: the
    first to hold need not be the cheapest, where its check added replicas. Where none
    holds, the cheapest stays first, unverified. The candidates simulated here leave the list
    where they missed and stand in it as simulated where they held. ("", as given) where the
    cheapest carries no caution."""
    win = candidates[0] if candidates else None
    caution = moe_caution(model, win, engine) if win else ""
    if not win or not caution:
        return "", candidates
    checks: dict[int, Candidate | None] = {}  # by place in ``candidates``: the check's result
    uncautioned = sorted((i for i, c in enumerate(candidates)
                          if not moe_caution(model, c, engine)),
                         key=lambda i: (*cheapest(candidates[i]), i))
    # what simulation has shown of the sizing so far, as verify_cheapest keeps it: per layout
    # (``resize``), and the most it has shrunk any candidate's analytic count (at most 1)
    moved: dict[Layout, float] = {}
    shrink = 1.0
    for c in candidates:
        if c.verified and c.analytic_replicas:
            shrink = min(shrink, resize(moved, c))
    # the cheapest without the caution that held
    alternative = next((candidates[i] for i in uncautioned if candidates[i].verified), None)
    left = [i for i in uncautioned if not candidates[i].verified]  # cheapest first
    runs = {} if runs is None else runs
    spent = 0  # checks that ran the simulator (``simulated``)
    while spent < UNCAUTIONED_CHECKS:
        best = math.inf if alternative is None else alternative.cost_per_hour or 0.0
        i = likeliest(candidates, left, moved, shrink, best)
        if i is None:
            break
        left.remove(i)
        made = len(runs)
        held = checks[i] = verify(model, candidates[i], load, slo, max_gpus, engine_version,
                                  engine, profile, runs)
        spent += simulated(runs, made)
        if held is None:
            continue
        shrink = min(shrink, resize(moved, held))
        if (held.cost_per_hour or 0.0) < best:
            alternative = held
    kept = [checks.get(i, c) for i, c in enumerate(candidates)]
    floor = slowed_tpot_floor_s(win)
    misses = floor > slo.tpot_s
    how = "simulated p" + f"{slo.percentile:g}" if win.verified else "analytic mean"
    text = (f"the cheapest deployment, {candidate_label(model, win, engine)}, is unverified: "
            f"{caution}. At the "
            f"measured slowdown's low end ({MEASURED_SLOWDOWN_LOW:g}×) its {how} TPOT of "
            f"{fmt_latency(floor / MEASURED_SLOWDOWN_LOW)} would be at least "
            f"{fmt_latency(floor)}, "
            + (f"past the {fmt_latency_limit(slo.tpot_s)} SLO" if misses else
               f"within the {fmt_latency_limit(slo.tpot_s)} SLO before the slower steps' "
               "queueing, "
               "which was not simulated"))
    if alternative is None:  # none held, so none re-sized its layout: tried cheapest first
        tried = len(checks)
        which = ("the only deployment" if len(uncautioned) == 1 else
                 "both deployments" if tried == len(uncautioned) == 2 else
                 f"all {tried} deployments" if tried == len(uncautioned) else
                 f"the {tried} cheapest of the {len(uncautioned)} deployments")
        why = ("no deployment without this caution meets the SLO within the search"
               if not uncautioned else
               f"{which} without this caution {'was' if tried == 1 else 'were'} simulated and "
               "missed the SLO" + ("" if tried == len(uncautioned) else " (the rest are dearer)"))
        return text + "; " + why, (win, *(c for c in kept[1:] if c is not None))
    text += (f"; the cheapest without it: {candidate_label(model, alternative, engine)} = {alternative.gpus} "
             f"{plural(alternative.gpus, 'GPU')}, ${alternative.cost_per_hour or 0.0:,.2f}/h, "
             f"simulated p{slo.percentile:g} TTFT "
             f"{fmt_latency(alternative.sim_ttft_s or 0, ',.0f')}, "
             f"TPOT {fmt_latency(alternative.sim_tpot_s or 0)}"
             + ("" if slo.itl_s is None else f", ITL {fmt_latency(alternative.sim_itl_s or 0)}")
             + ", ranked first")
    others = [c for c in kept if c is not None and c is not alternative]
    return text, (alternative, *simulated_first(others))
