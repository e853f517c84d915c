"""What a calibration holds at the bundled profile's rather than fits, and how it says so.

A decode step's time and a prompt step's show different parameters (DECODE_SIDE and
PROMPT_SIDE): rows of prompt steps alone leave the decode side as bundled, rows of decode
steps alone the prompt side, and each structural term the rows cannot show (calibrate_rows)
stays the bundled one. values_at_prior gives those values before the fit, held_fields names
what the fit then held (the profile records it: EngineProfile.held), held_parameters reads it
back from a calibrated profile, and held_notes words that reading for the profile's source
(one record: the source cannot say held what the record says fitted).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Any

from ridgeline.calibrate_rows import shows_ceiling, shows_expert_prompts, shows_unpacking
from ridgeline.calibrate_space import ParameterSpace
from ridgeline.engines import EngineProfile, has_tiled_experts, prices_moe_layers
from ridgeline.measurements import Measurement

# What only a decode step's time shows, and what only a prompt step's (cost.step_cost): by
# field, in words. A decode step (one new token a sequence) streams the weights and the cache:
# its time is bytes ÷ (rated × bandwidth share, its card group's multiplier, the ceiling in
# series) or the K-quant unpacking, plus the fixed costs a step, a layer, a weight matmul and
# a MoE layer. A prompt step (hundreds of tokens) pays those too, but its time is its arithmetic
# (peak × compute share, its group's multiplier, the dequantization factor, the expert tiles):
# beside it they are a percent or two, and prompt rows fitting them bend them to absorb what
# the arithmetic misses (82 llama-bench pp rows fitted 10.6 ms a step and 174 µs a layer, and
# Llama-3.1-8B's decode on an RTX 4090 went from 131 to 42 tok/s). So rows with decode steps
# (decode, throughput) pin DECODE_SIDE and prompt rows (prefill, TTFT) PROMPT_SIDE; where a
# calibration's rows have none of one kind, that side stands at the bundled profile's.
PROMPT_METRICS = ("prefill_tok_s", "ttft_ms")
DECODE_SIDE = {"bandwidth_efficiency": "bandwidth share",
               "group_bandwidth": "bandwidth by card group",
               "bandwidth_cap_bytes_per_s": "bandwidth ceiling",
               "kquant_ops_per_weight": "K-quant unpacking",
               "step_overhead_s": "cost per step", "layer_overhead_s": "cost per layer",
               "matmul_overhead_s": "cost per weight matmul",
               "moe_layer_overhead_s": "cost per MoE layer"}
PROMPT_SIDE = {"compute_efficiency": "compute share", "group_compute": "compute by card group",
               "dequant_compute": "dequantization factor",
               "expert_tile_tokens": "expert tile width",
               "prefill_layer_overhead_s": "cost per layer of a prompt step"}
ALL_SIDES = {**DECODE_SIDE, **PROMPT_SIDE}
UNPRICED = {"dequant_compute": 1.0}  # a field's value that prices nothing, where not 0 or None


def values_at_prior(prior: EngineProfile, rows: Sequence[Measurement], key: str, *,
                    dequant: bool) -> dict[str, Any]:
    """``prior``'s value, by field, for each parameter ``rows`` cannot pin (DECODE_SIDE
    without a row of decode steps, PROMPT_SIDE without a prompt row, and each structural term
    where the rows cannot show it), to hold there (the fit's start for what it fits)."""
    held: dict[str, Any] = {}
    if all(r.metric in PROMPT_METRICS for r in rows):
        held.update((name, getattr(prior, name)) for name in DECODE_SIDE)
    if not any(r.metric in PROMPT_METRICS for r in rows):
        held.update((name, getattr(prior, name)) for name in PROMPT_SIDE)
    # a prompt step's own cost per layer shows in TTFT rows alone; where they pin it, the
    # prior's is the start of its fit beside a held decode side (ParameterSpace.start)
    held["prefill_layer_overhead_s"] = prior.prefill_layer_overhead_s
    if not dequant:
        held["dequant_compute"] = prior.dequant_compute
    if not shows_ceiling(rows, key):
        held["bandwidth_cap_bytes_per_s"] = prior.bandwidth_cap_bytes_per_s
    if not shows_unpacking(rows, key):
        held["kquant_ops_per_weight"] = prior.kquant_ops_per_weight
    if not (has_tiled_experts(key) and shows_expert_prompts(rows)):
        held["expert_tile_tokens"] = prior.expert_tile_tokens
    if prices_moe_layers(key):  # the fit's start where the rows can pin it (shows_moe_layers)
        held["moe_layer_overhead_s"] = prior.moe_layer_overhead_s
    return held


def held_fields(space: ParameterSpace, given: Collection[str]) -> tuple[str, ...]:
    """The fields a fit in ``space`` held, in ALL_SIDES' order: each of ``given`` (set before
    the fit: values_at_prior, and the cost per weight matmul fit_engine is given) that the
    space does not fit (the compute share among them where no prompt row fits it)."""
    fitted = space.fitted_fields
    return tuple(name for name in ALL_SIDES if name in given and name not in fitted)


NO_DECODE_ROWS = "no decode or throughput rows: a prompt step's time is its arithmetic"
NO_PROMPT_ROWS = "no prompt rows"
# why a structural term stands at the prior's where its side has rows (fit_engine's tests)
NOT_SHOWN = {"matmul_overhead_s": "these rows' models launch alike numbers per layer",
             "moe_layer_overhead_s": "too few decode rows of MoE and of dense models",
             "bandwidth_cap_bytes_per_s": "these rows' cards or models are too alike to show one",
             "kquant_ops_per_weight": "too few decode rows of K-quant weights",
             "dequant_compute": "too few prompt rows of quantized and of unquantized weights",
             "expert_tile_tokens": "too few prompt rows of MoE models",
             "prefill_layer_overhead_s": "no TTFT rows at two prompt lengths or more: one "
                                         "length cannot tell it from the compute share"}


def _shown(name: str, value: float) -> str:
    """A held parameter's value as the profile's source gives it."""
    if name == "bandwidth_cap_bytes_per_s":
        return f"{value / 1e12:.3g} TB/s"
    if name.endswith("_s"):
        return f"{value * 1e6:.3g} µs"
    return f"{value:.3g}" + {"expert_tile_tokens": " tokens",
                             "kquant_ops_per_weight": " operations a weight"}.get(name, "")


def held_notes(profile: EngineProfile, prior: EngineProfile | None) -> str:
    """What a fitted ``profile`` held rather than fitted, and why, for its source: its record
    (EngineProfile.held, read by held_parameters) in words, grouped by why — each side its rows
    could not show in one clause, each structural term with its value. The bundled fit, with
    no prior, holds at most the cost per weight matmul it is given."""
    by_why: dict[str, list[str]] = {}
    for name, why in _held(profile, prior):
        by_why.setdefault(why, []).append(name)
    notes = []
    for why, names in by_why.items():
        if why == NO_DECODE_ROWS:
            notes.append(f"its {_listed(names)} held at the bundled profile's ({why})")
        elif why == NO_PROMPT_ROWS:  # the compute share at the prior's, or pulled towards it
            near = [name for name in names if name == "compute_efficiency"
                    and not compute_at_prior(profile, prior)]
            parts = [f"its {ALL_SIDES[name]} held near "
                     + (f"{prior.compute_efficiency:.3g}" if prior else "the fit's start")
                     for name in near]
            rest = [name for name in names if name not in near]
            if rest:
                parts.append(f"its {_listed(rest)} {'at' if parts else 'held at'} the bundled "
                             "profile's")
            notes.append(" and ".join(parts) + f" ({why})")
        else:
            notes += [f"its {ALL_SIDES[name]} held at {_shown(name, getattr(profile, name))} "
                      f"(the bundled profile's: {why})" for name in names]
    return "".join(f"; {note}" for note in notes)


def compute_at_prior(profile: EngineProfile, prior: EngineProfile | None) -> bool:
    """Whether ``profile``'s compute share is ``prior``'s (a calibration with no prompt row
    holds it there; the bundled fit, ``prior`` itself, pulled its own towards its start, and
    profiles calibrated before 2026-12-06 towards the prior's)."""
    return prior is not None and profile != prior and math.isclose(
        profile.compute_efficiency, prior.compute_efficiency, rel_tol=1e-9)


def compute_hold(profile: EngineProfile, prior: EngineProfile | None) -> str:
    """How a compute share no prompt row fitted stands, in words: "held at the bundled
    profile's", or "held near its prior" (pulled towards it: compute_at_prior)."""
    return "held at the bundled profile's" if compute_at_prior(profile, prior) \
        else "held near its prior"


def _listed(names: Sequence[str]) -> str:
    """Fields in words, the last after "and": bandwidth share, cost per step and cost per
    layer."""
    words = [ALL_SIDES[name] for name in names]
    return ", ".join(words[:-1]) + f" and {words[-1]}" if len(words) > 1 else words[0]


def held_parameters(profile: EngineProfile, prior: EngineProfile | None
                    ) -> tuple[tuple[str, str], ...]:
    """(parameter, why) for each parameter of a calibrated ``profile`` that prices something
    and that its fit held, its rows unable to pin it (EngineProfile.held); the compute share
    first where no prompt row fitted it (at the prior's; a profile calibrated before
    2026-12-06 held it near the prior's, pulled by its rows: compute_at_prior). A profile that
    does not record what it held (written before it was recorded) is read against ``prior``:
    each value equal to the prior's counts as held, a fitted one that landed on it too."""
    return tuple((ALL_SIDES[name], why) for name, why in _held(profile, prior))


def _held(profile: EngineProfile, prior: EngineProfile | None) -> list[tuple[str, str]]:
    """held_parameters by field name: (field, why), the compute share first."""
    held = set(profile.held) if profile.held is not None else _equal_to_prior(profile, prior)
    no_decode = profile.compute_rows is not None and profile.compute_rows == profile.fitted_rows
    said = [("compute_efficiency", NO_PROMPT_ROWS)] if "compute_efficiency" in held else []
    for name in ALL_SIDES:
        if name == "compute_efficiency" or name not in held \
                or getattr(profile, name) in (None, 0.0, {}, UNPRICED.get(name)):
            continue
        why = NO_DECODE_ROWS if no_decode and name in DECODE_SIDE else \
            NO_PROMPT_ROWS if not profile.compute_fitted and name in PROMPT_SIDE else \
            NOT_SHOWN.get(name, "")
        said.append((name, why))
    return said


def _equal_to_prior(profile: EngineProfile, prior: EngineProfile | None) -> set[str]:
    """What an older profile's fit held, as near as its values tell: each field equal to
    ``prior``'s, and the compute share where no prompt row fitted it (nothing, with no prior)."""
    if prior is None:
        return set()
    equal = {name for name in ALL_SIDES if name != "compute_efficiency"
             and getattr(profile, name) == getattr(prior, name)}
    return equal if profile.compute_fitted else equal | {"compute_efficiency"}
