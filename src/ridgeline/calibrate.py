"""Fit engine profiles to measurements, and score predictions against them.

The fit minimises a robust loss (Huber on the log ratio predicted/measured) over an
engine's throughput and latency rows, in log-parameter space, by Nelder–Mead. Few
parameters, each physical: bandwidth and compute efficiency, a per-step and a per-layer
overhead (a step carrying prompt tokens gets its own per-layer cost: engines replay CUDA
graphs only for decode-only steps), a multiplier per accelerator group that has enough
rows, an absolute bandwidth ceiling where the rows are matrix-vector steps on cards far
enough apart in bandwidth to show one, a cost per weight matmul where the rows' models
launch different numbers of them per layer, and (llama.cpp) the expert matmuls' tile width
where enough prompt rows are of MoE models and a cost per MoE layer where enough decode rows
are of MoE models and of dense ones. The band is the 10th–90th percentile of the fit's
own ratios measured/predicted. A calibration (`calibrate`, fitted with the bundled profile as
its prior) fits only what its rows pin: rows of prompt steps alone leave the decode side
(DECODE_SIDE) as bundled, rows of decode steps alone the prompt side (PROMPT_SIDE), and each
structural term the rows cannot show stays the bundled one (held_parameters says which).
A row UNREADABLE_PAST_ROOFLINE times past its roofline is refused as unreadable.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ridgeline.cost import kquant_ops
from ridgeline.deployment import Deployment
from ridgeline.engines import (
    MATVEC_TOKENS,
    MAX_BANDWIDTH_BYTES_PER_S,
    MAX_OPS_PER_WEIGHT,
    MAX_OVERHEAD_S,
    MAX_TILE_TOKENS,
    MIN_GROUP_ROWS,
    EngineProfile,
    accelerator_group,
    bundled_profiles,
    engine_id,
    has_alu_matmuls,
    has_fused_projections,
    has_matvec_ceiling,
    has_tiled_experts,
    prices_moe_layers,
)
from ridgeline.errors import InputError
from ridgeline.hardware import resolve_accelerator
from ridgeline.launches import deployment_matmuls
from ridgeline.measurements import KV_METRICS, Measurement, ReadResult
from ridgeline.predict import Prediction, deployment_for, predict, row_engine

START = EngineProfile("start", 0.7, 0.5, 3e-4, 5e-6, source="fit start")
# The bundled fit pools these: CUDA-graph serving engines with a few rows each (vLLM and
# SGLang have no offline-throughput rows, TensorRT-LLM no low-batch decode rows).
SERVING_ENGINES = ("trtllm", "vllm", "sglang")
CAP_START_SHARE = 2.0  # a ceiling's fit starts at this multiple of the fastest card's bandwidth
UNPACK_START_OPS = 20.0  # the unpacking fit starts at this many operations per weight
MATMUL_START_S = 5e-6  # the per-matmul fit starts at this cost
MOE_LAYER_START_S = 20e-6  # the per-MoE-layer fit starts at this cost
TILE_START_TOKENS = 32.0  # the expert tile fit starts at this width
CAP_SPAN = 3.0  # the spread of rated bandwidths, fastest ÷ slowest card, that pins a ceiling
HUBER_DELTA = 0.25  # log-ratio beyond which a row counts linearly (≈ 28% error)
GROUP_PRIOR = 0.002  # a gentle pull of group multipliers towards 1 (squared log)
CLAMP_PULL = 1.0  # the pull of a log efficiency past 0 (the 100 % clamp) back to it
# Without prefill or TTFT rows nothing pins the compute efficiency, and a fit on decode rows
# alone would bend it to absorb other costs: then it is pulled towards the start (squared
# log, worth about one row).
COMPUTE_PRIOR_ROWS = 0.2
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
# An engine that replays another's kernels, launched differently: `measure` times decode steps
# both eager and from a CUDA graph, and prefill eager only, so the graph rows never reach the
# compute roof and their compute efficiency comes from the eager rows (the same cuBLAS calls).
SAME_KERNELS = {"torch-cudagraph": "torch-eager"}


def performance_rows(rows: Iterable[Measurement]) -> list[Measurement]:
    return [r for r in rows if r.metric not in KV_METRICS]


def _deployment(row: Measurement) -> Deployment | None:
    """The row's deployment, or None where the row names something ridgeline cannot build."""
    try:
        return deployment_for(row)
    except InputError:
        return None


def _dequantizes(row: Measurement) -> bool:
    dep = _deployment(row)
    return dep is not None and dep.dequantizes


def _group(row: Measurement) -> str:
    try:
        return accelerator_group(resolve_accelerator(row.gpu))
    except InputError:
        return "other"


def _rated_bytes_per_s(row: Measurement) -> float | None:
    try:
        return resolve_accelerator(row.gpu).memory_bandwidth_bytes_per_s
    except InputError:
        return None


def _dense_bytes_per_layer(row: Measurement) -> float | None:
    """A dense model's weight bytes per layer: what a matrix-vector step streams per layer
    (None for an MoE model, whose steps carry routing and expert launches of their own)."""
    dep = _deployment(row)
    if dep is None or dep.model.is_moe:
        return None
    return dep.weight_bytes / dep.model.num_layers


def _shows_ceiling(rows: Sequence[Measurement], engine: str) -> bool:
    """Whether the rows pin an absolute bandwidth ceiling: the engine decodes through its own
    matrix-vector kernels (has_matvec_ceiling), and enough of its decode rows are such steps
    (at most MATVEC_TOKENS sequences) on cards whose rated bandwidths differ by CAP_SPAN or
    more (on cards alike a ceiling is only a share). And on the fast cards (at least half the
    fastest one's bandwidth), where a ceiling bites, at least MIN_GROUP_ROWS of them are dense
    models whose bytes per layer differ by CAP_SPAN or more: a ceiling costs bytes ÷ ceiling and
    the per-layer cost layers × cost, so only models of different bytes per layer on the same
    fast cards tell the two apart. (Holding out the source with those rows, S2, the fit
    without this test chose a 1.24 TB/s ceiling over a per-layer cost and read S2's decode
    30 % slow: docs/research/cuda-ceiling-without-s2.md.)"""
    if not has_matvec_ceiling(engine):
        return False
    steps = [(r, b) for r in rows if r.metric == "decode_tok_s_per_user"
             and r.batch is not None and r.batch <= MATVEC_TOKENS
             if (b := _rated_bytes_per_s(r))]
    rated = [b for _, b in steps]
    if len(rated) < MIN_GROUP_ROWS or max(rated) < CAP_SPAN * min(rated):
        return False
    per_layer = [size for r, b in steps if b >= max(rated) / 2
                 if (size := _dense_bytes_per_layer(r))]
    return len(per_layer) >= MIN_GROUP_ROWS and max(per_layer) >= CAP_SPAN * min(per_layer)


def _pinned_groups(chosen: tuple[str, ...], rows: Counter[str]) -> tuple[str, ...]:
    """The groups of ``chosen`` that keep a multiplier. The profile's own value is that of
    the groups without one: where none of those has a row of the multiplier's kind (``rows``
    counts them by group), nothing pins it, so the best-covered group becomes the reference
    instead. Else the global value wanders, its group's multiplier following: the serving
    engines' compute went 0.55 → 1.0 with the datacenter multiplier 1.02 → 0.57, for no
    prompt row of an Instinct card, and moved only the Instinct cards' prompts."""
    if not chosen or any(n for g, n in rows.items() if g not in chosen):
        return chosen
    best = max(chosen, key=lambda g: rows[g])
    return tuple(g for g in chosen if g != best)


def _kquant(row: Measurement) -> bool:
    dep = _deployment(row)
    return dep is not None and bool(kquant_ops(dep))


def _shows_unpacking(rows: Sequence[Measurement], engine: str) -> bool:
    """Whether the rows pin K-quant unpacking: the engine multiplies on the vector ALUs
    (has_alu_matmuls), and enough of its decode rows have K-quant weights."""
    return has_alu_matmuls(engine) and sum(
        1 for r in rows if r.metric == "decode_tok_s_per_user" and _kquant(r)) >= MIN_GROUP_ROWS


def _matmuls_per_layer(row: Measurement) -> float | None:
    dep = _deployment(row)
    return None if dep is None else deployment_matmuls(dep) / dep.model.num_layers


def _shows_matmuls(rows: Sequence[Measurement]) -> bool:
    """Whether the rows pin a cost per weight matmul apart from the cost per layer: at least
    MIN_GROUP_ROWS decode rows of models that launch more matmuls per layer than the fewest
    any row's model launches (a dense GQA layer's four, as a rule)."""
    per_layer = [m for r in rows if r.metric == "decode_tok_s_per_user"
                 and (m := _matmuls_per_layer(r)) is not None]
    return bool(per_layer) and sum(1 for m in per_layer
                                   if m > min(per_layer) + 0.5) >= MIN_GROUP_ROWS


def _moe_prompt(row: Measurement) -> bool:
    if row.metric not in ("prefill_tok_s", "ttft_ms"):
        return False
    dep = _deployment(row)
    return dep is not None and dep.model.moe is not None


def _moe_decode(row: Measurement) -> bool | None:
    """Whether a decode row's model routes to experts (None: not a decode row, or unread)."""
    if row.metric != "decode_tok_s_per_user":
        return None
    dep = _deployment(row)
    return None if dep is None else dep.model.moe is not None


def _shows_moe_layers(rows: Sequence[Measurement]) -> bool:
    """Whether the rows pin a cost per MoE layer apart from the cost per layer: at least
    MIN_GROUP_ROWS decode rows of MoE models and as many of dense ones."""
    kinds = Counter(map(_moe_decode, rows))
    return kinds[True] >= MIN_GROUP_ROWS and kinds[False] >= MIN_GROUP_ROWS


def _shows_expert_prompts(rows: Sequence[Measurement]) -> bool:
    """Whether the rows pin an expert tile width: MIN_GROUP_ROWS prompt rows of MoE models."""
    return sum(map(_moe_prompt, rows)) >= MIN_GROUP_ROWS


@dataclass(frozen=True)
class _Space:
    """Maps a parameter vector (logs) to a profile; what it does not fit is ``base``'s."""

    base: EngineProfile
    bw_groups: tuple[str, ...]
    compute_groups: tuple[str, ...]
    dequant: bool  # fit a dequantization factor (the data have both kinds of weights)
    prefill_overhead: bool  # fit prefill steps' own per-layer cost (the data have prompts)
    compute_prior: bool = False  # hold compute efficiency near the start (no compute rows)
    # fit the bandwidth share, the cost per step and the cost per layer (False: the rows have
    # no decode step to pin them, and base's stand: DECODE_SIDE)
    decode_side: bool = True
    # entries after the multipliers, in this order, each where set: an absolute bandwidth
    # ceiling, K-quant unpacking (operations per weight), a cost per weight matmul, the
    # expert matmuls' tile width (tokens), a cost per routed-expert layer
    cap: bool = False
    unpack: bool = False
    matmul: bool = False
    tile: bool = False
    moe: bool = False

    @property
    def _names(self) -> tuple[str, ...]:
        """The entries before the multipliers, in vector order."""
        decode = self.decode_side
        return (*(("bandwidth",) if decode else ()), "compute",
                *(("step", "layer") if decode else ()),
                *(("prefill layer",) if self.prefill_overhead else ()))

    @property
    def _core(self) -> int:
        return len(self._names)

    @property
    def _tail(self) -> tuple[str, ...]:
        return tuple(name for name, on in (("cap", self.cap), ("unpack", self.unpack),
                                           ("matmul", self.matmul), ("tile", self.tile),
                                           ("moe", self.moe)) if on)

    def _extra(self, x: Sequence[float], name: str) -> float | None:
        """The tail entry ``name`` (a log), or None where the space does not fit it."""
        tail = self._tail
        return x[len(x) - len(tail) + tail.index(name)] if name in tail else None

    def _entry(self, x: Sequence[float], name: str) -> float | None:
        """The entry ``name`` before the multipliers (a log), or None where it is not fitted."""
        names = self._names
        return x[names.index(name)] if name in names else None

    def start(self) -> list[float]:
        b = self.base
        layer = math.log(max(b.layer_overhead_s, 1e-8))
        # a prompt step's own cost per layer starts at the decode steps' (a fit of both), or,
        # where the decode side is held, at base's own where it has one
        own = b.prefill_layer_overhead_s
        prompt = math.log(max(own, 1e-8)) if own is not None and not self.decode_side else layer
        start = {"bandwidth": math.log(b.bandwidth_efficiency),
                 "compute": math.log(b.compute_efficiency),
                 "step": math.log(max(b.step_overhead_s, 1e-6)), "layer": layer,
                 "prefill layer": prompt}
        return [*(start[name] for name in self._names),
                *([0.0] * (len(self.bw_groups) + len(self.compute_groups) + self.dequant))]

    def profile(self, x: Sequence[float]) -> EngineProfile:
        n, m, k = len(self.bw_groups), len(self.compute_groups), self._core
        cap, unpack, matmul, tile, moe = (self._extra(x, name)
                                          for name in ("cap", "unpack", "matmul", "tile", "moe"))
        bandwidth, compute, step, layer, prefill = (
            self._entry(x, name) for name in ("bandwidth", "compute", "step", "layer",
                                              "prefill layer"))
        b = self.base
        return replace(
            b,
            bandwidth_efficiency=b.bandwidth_efficiency if bandwidth is None
            else min(1.0, math.exp(bandwidth)),
            compute_efficiency=min(1.0, math.exp(compute)) if compute is not None
            else b.compute_efficiency,
            step_overhead_s=b.step_overhead_s if step is None else math.exp(step),
            layer_overhead_s=b.layer_overhead_s if layer is None else math.exp(layer),
            prefill_layer_overhead_s=b.prefill_layer_overhead_s if prefill is None
            else math.exp(prefill),
            group_bandwidth={g: math.exp(v) for g, v in zip(self.bw_groups, x[k:k + n])}
            if n else b.group_bandwidth,
            group_compute={g: math.exp(v) for g, v in zip(self.compute_groups,
                                                           x[k + n:k + n + m])}
            if m else b.group_compute,
            dequant_compute=min(1.0, math.exp(x[k + n + m])) if self.dequant
            else b.dequant_compute,
            bandwidth_cap_bytes_per_s=b.bandwidth_cap_bytes_per_s if cap is None
            else min(MAX_BANDWIDTH_BYTES_PER_S, math.exp(cap)),
            kquant_ops_per_weight=b.kquant_ops_per_weight if unpack is None
            else min(MAX_OPS_PER_WEIGHT, math.exp(unpack)),
            matmul_overhead_s=b.matmul_overhead_s if matmul is None
            else min(MAX_OVERHEAD_S, math.exp(matmul)),
            expert_tile_tokens=b.expert_tile_tokens if tile is None
            else min(MAX_TILE_TOKENS, math.exp(tile)),
            moe_layer_overhead_s=b.moe_layer_overhead_s if moe is None
            else min(MAX_OVERHEAD_S, math.exp(moe)),
        )

    def penalty(self, x: Sequence[float], rows: int) -> float:
        multipliers = x[self._core:len(x) - len(self._tail)]
        groups = GROUP_PRIOR * sum(v * v for v in multipliers)
        # the efficiencies are clamped at 100 %: past it the loss is flat, and a simplex that
        # wandered there stopped where its other steps had been taken for nothing (a refit
        # read llama.cpp-cuda's rows worse than parameters inside the clamp); a pull back
        compute = self._entry(x, "compute")
        assert compute is not None  # every space fits the compute share
        groups += CLAMP_PULL * (max(0.0, self._entry(x, "bandwidth") or 0.0) ** 2
                                + max(0.0, compute) ** 2)
        if not self.compute_prior:
            return groups
        pull = compute - math.log(self.base.compute_efficiency)
        return groups + COMPUTE_PRIOR_ROWS * pull * pull / rows


def _held_at_prior(start: EngineProfile, prior: EngineProfile, rows: Sequence[Measurement],
                   key: str, *, dequant: bool) -> EngineProfile:
    """``start`` with ``prior``'s value for each parameter ``rows`` cannot pin (DECODE_SIDE
    without a row of decode steps, PROMPT_SIDE without a prompt row, and each structural term
    where the rows cannot show it); the compute share is then held near the prior's (the
    fit's penalty), not at it."""
    held: dict[str, Any] = {}
    if all(r.metric in PROMPT_METRICS for r in rows):
        held.update((name, getattr(prior, name)) for name in DECODE_SIDE)
    if not any(r.metric in PROMPT_METRICS for r in rows):
        held.update((name, getattr(prior, name)) for name in PROMPT_SIDE)
    # a prompt step's own cost per layer shows in TTFT rows alone; where they pin it, the
    # prior's is the start of its fit beside a held decode side (_Space.start)
    held["prefill_layer_overhead_s"] = prior.prefill_layer_overhead_s
    if not dequant:
        held["dequant_compute"] = prior.dequant_compute
    if not _shows_ceiling(rows, key):
        held["bandwidth_cap_bytes_per_s"] = prior.bandwidth_cap_bytes_per_s
    if not _shows_unpacking(rows, key):
        held["kquant_ops_per_weight"] = prior.kquant_ops_per_weight
    if not (has_tiled_experts(key) and _shows_expert_prompts(rows)):
        held["expert_tile_tokens"] = prior.expert_tile_tokens
    if prices_moe_layers(key):  # the fit's start where the rows can pin it (_shows_moe_layers)
        held["moe_layer_overhead_s"] = prior.moe_layer_overhead_s
    return replace(start, **held)


NO_DECODE_ROWS = "no decode or throughput rows: a prompt step's time is its arithmetic"
NO_PROMPT_ROWS = "no prompt rows"
# why a structural term stands at the prior's where its side has rows (fit_engine's tests)
NOT_SHOWN = {"matmul_overhead_s": "these rows' models launch alike numbers per layer",
             "moe_layer_overhead_s": "too few decode rows of MoE and of dense models",
             "bandwidth_cap_bytes_per_s": "these rows' cards or models are too alike to show one",
             "kquant_ops_per_weight": "too few decode rows of K-quant weights",
             "dequant_compute": "too few prompt rows of quantized and of unquantized weights",
             "expert_tile_tokens": "too few prompt rows of MoE models",
             "prefill_layer_overhead_s": "no TTFT rows"}


def _shown(name: str, value: float) -> str:
    """A held parameter's value as the profile's source gives it."""
    if name == "bandwidth_cap_bytes_per_s":
        return f"{value / 1e12:.3g} TB/s"
    if name.endswith("_s"):
        return f"{value * 1e6:.3g} µs"
    return f"{value:.3g}" + {"expert_tile_tokens": " tokens",
                             "kquant_ops_per_weight": " operations a weight"}.get(name, "")


def _held_notes(fitted: EngineProfile, space: _Space, prior: EngineProfile | None, *,
                prompt_rows: bool) -> str:
    """What the fit held rather than fitted, and why, for the profile's source (the bundled
    fit, with no prior, holds only the cost per weight matmul it is given)."""
    def term(name: str) -> str:
        return (f"its {ALL_SIDES[name]} held at {_shown(name, getattr(fitted, name))} (the "
                f"bundled profile's: {NOT_SHOWN[name]})")

    notes = []
    if prior is not None and not space.decode_side:
        notes.append("its bandwidth share (with its multipliers by card group and its ceiling) "
                     "and its costs per step, per layer, per weight matmul and per MoE layer "
                     f"held at the bundled profile's ({NO_DECODE_ROWS})")
    else:
        tried = {"matmul_overhead_s": space.matmul, "moe_layer_overhead_s": space.moe,
                 "bandwidth_cap_bytes_per_s": space.cap, "kquant_ops_per_weight": space.unpack}
        notes += [term(name) for name, fits in tried.items() if not fits
                  and getattr(fitted, name) and (prior is not None or name == "matmul_overhead_s")]
    if prior is not None and not prompt_rows:
        notes.append(f"its compute share held near {prior.compute_efficiency:.3g} and its "
                     "compute multipliers by card group, dequantization factor, expert tile "
                     "width and prompt steps' cost per layer at the bundled profile's "
                     f"({NO_PROMPT_ROWS})")
    elif prior is not None:
        if not space.prefill_overhead and fitted.prefill_layer_overhead_s is not None:
            notes.append("its prompt steps' cost per layer held at the bundled profile's "
                         f"({NOT_SHOWN['prefill_layer_overhead_s']})")
        notes += [term(name) for name, fits in (("dequant_compute", space.dequant),
                                                ("expert_tile_tokens", space.tile))
                  if not fits and getattr(fitted, name) not in (0.0, UNPRICED.get(name))]
    return "".join(f"; {note}" for note in notes)


def held_parameters(profile: EngineProfile, prior: EngineProfile | None
                    ) -> tuple[tuple[str, str], ...]:
    """(parameter, why) for each parameter of a calibrated ``profile`` that prices something
    and stands at ``prior``'s value, its rows unable to pin it (fit_engine's prior); the
    compute share first where no prompt row fitted it (held near the prior's, not at it)."""
    if prior is None:
        return ()
    no_decode = profile.compute_rows is not None and profile.compute_rows == profile.fitted_rows
    held = [] if profile.compute_fitted else [(ALL_SIDES["compute_efficiency"], NO_PROMPT_ROWS)]
    for name, words in ALL_SIDES.items():
        value = getattr(profile, name)
        if name == "compute_efficiency" or value != getattr(prior, name) \
                or value in (None, 0.0, {}, UNPRICED.get(name)):
            continue
        why = NO_DECODE_ROWS if no_decode and name in DECODE_SIDE else \
            NO_PROMPT_ROWS if not profile.compute_fitted and name in PROMPT_SIDE else \
            NOT_SHOWN.get(name, "")
        held.append((words, why))
    return tuple(held)


def _huber(r: float) -> float:
    a = abs(r)
    return 0.5 * a * a if a <= HUBER_DELTA else HUBER_DELTA * (a - 0.5 * HUBER_DELTA)


def fit_engine(rows: Sequence[Measurement], engine: str,
               base: EngineProfile | None = None,
               family: Iterable[str] | None = None, *, strict: bool = False,
               held_matmul_s: float = 0.0,
               prior: EngineProfile | None = None) -> EngineProfile:
    """Fit one engine's profile to its performance rows (KV rows are memory, not speed).

    family: engines whose rows are fitted together into this one profile (the bundled fit
    pools the CUDA-graph serving engines, which have too few rows each).
    strict: refuse fewer predictable rows than the fit has parameters (`calibrate` on a
    user's file); the cross-validation folds fit the few rows a held-out group leaves.
    held_matmul_s: the cost per weight matmul to keep where the rows cannot pin one (their
    models all launch about as many per layer); 0 leaves it to the cost per layer.
    prior: the profile whose values stand where the rows cannot pin them (`calibrate` passes
    the bundled one): with no decode or throughput rows, all of DECODE_SIDE; with no prompt
    rows, PROMPT_SIDE (the compute share held near it, the rest at it); with no
    time-to-first-token rows, its prompt steps' own cost per layer; and each structural term
    (ceiling, unpacking, tile width, dequantization, costs per matmul and per MoE layer) the
    rows cannot show. Without it, the fixed start stands there, as the bundled fit wants
    (reproducible, whatever is bundled).
    """
    key = engine_id(engine)
    members = {engine_id(e) for e in family} | {key} if family is not None else {key}
    mine = [r for r in performance_rows(rows) if row_engine(r) in members]
    if not mine:
        raise InputError(f"no throughput or latency rows for engine {engine!r} to fit")
    start = base or START  # a fixed start: the fit is reproducible, whatever is bundled
    start = replace(start, engine=key, group_bandwidth={}, group_compute={},
                    matmul_overhead_s=held_matmul_s if has_fused_projections(key) else 0.0)
    mine = _predictable(mine, {m: start for m in members}, key)
    groups = Counter(_group(r) for r in mine)
    decode_groups = Counter(_group(r) for r in mine if r.metric == "decode_tok_s_per_user")
    compute_groups = Counter(_group(r) for r in mine if r.metric in ("prefill_tok_s", "ttft_ms"))
    bw = tuple(sorted(g for g, n in decode_groups.items() if n >= MIN_GROUP_ROWS))
    cg = tuple(sorted(g for g, n in compute_groups.items() if n >= MIN_GROUP_ROWS))
    if len(bw) == len({g for g in groups}) and bw:
        bw = bw[1:]  # one group is the reference: the global efficiency is its value
    if len(cg) == len({g for g in groups}) and cg:
        cg = cg[1:]
    cg, bw = _pinned_groups(cg, compute_groups), _pinned_groups(bw, decode_groups)
    compute_rows = [r for r in mine if r.metric in PROMPT_METRICS]
    decode_side = len(compute_rows) < len(mine)  # a row with decode steps pins DECODE_SIDE
    quantized = sum(1 for r in compute_rows if _dequantizes(r))
    dequant = MIN_GROUP_ROWS <= quantized <= len(compute_rows) - MIN_GROUP_ROWS
    # a prefill step's own per-layer cost shows in time-to-first-token at batch 1
    prefill = any(r.metric == "ttft_ms" for r in mine)
    if prior is not None:  # what the rows cannot pin stands at the prior's (held_parameters)
        start = _held_at_prior(start, prior, mine, key, dequant=dequant)
    space = _Space(start, bw, cg, dequant, prefill, compute_prior=not compute_rows,
                   decode_side=decode_side or prior is None)
    parameters = len(space.start())
    if strict and len(mine) < parameters:  # the rows would not pin the parameters
        raise InputError(f"engine {key}: {len(mine)} predictable throughput or latency "
                         f"row{'' if len(mine) == 1 else 's'}, but its fit sets {parameters} "
                         f"parameters: it needs at least {parameters} (measure more, or name "
                         "the other engines with --engine)")
    conditions = len({condition(r) for r in mine})
    if strict and conditions < parameters:  # repeats of one setting pin one equation
        raise InputError(f"engine {key}: its {len(mine)} rows measure {conditions} distinct "
                         f"condition{'' if conditions == 1 else 's'} (model, GPU, batch, "
                         f"lengths, metric), but its fit sets {parameters} parameters: measure "
                         f"at least {parameters} different ones (batches, prompt lengths)")

    def loss_in(within: _Space) -> Callable[[Sequence[float]], float]:
        def loss(x: Sequence[float]) -> float:
            profile = within.profile(x)
            table = {m: profile for m in members}
            total = 0.0
            for row in mine:
                p = predict(row, table)
                if p.predicted is None:
                    continue
                total += _huber(math.log(p.predicted / p.measured))
            return total / len(mine) + within.penalty(x, len(mine))
        return loss

    def kept_if_better(narrow: _Space, best: list[float], wide: _Space,
                       start: float) -> tuple[_Space, list[float]]:
        """``wide`` (``narrow`` and one more parameter, its log starting at ``start``) fitted
        from ``best``, where it lowers the loss; else ``narrow`` and ``best`` as they were."""
        tried = _minimise(loss_in(wide), [*best, start])
        if loss_in(wide)(tried) < loss_in(narrow)(best):
            return wide, tried
        return narrow, best

    best = _minimise(loss_in(space), space.start())
    # The ceiling is structure, not a free knob: a matrix-vector kernel keeps a bounded
    # number of bytes in flight. It is fitted for an engine with such kernels where enough
    # rows are such steps on cards far enough apart to show it, from the fit without it,
    # and dropped only where it buys nothing; the engine pays it on every step (pricing it
    # on steps of at most 8 tokens alone was tried: a batch-9 step then ran faster than a
    # batch-8 one, and llama.cpp-cuda held out by source went from 11.4 % to 16.1 %). (Akaike's
    # criterion was tried: holding out the source with the datacenter rows, it rejected a
    # ceiling, 3.30 TB/s, that the full fit puts at 3.73 TB/s.)
    if _shows_ceiling(mine, key):
        fastest = max(b for b in map(_rated_bytes_per_s, mine) if b)
        space, best = kept_if_better(space, best, replace(space, cap=True),
                                     math.log(CAP_START_SHARE * fastest))
    # Unpacking a K-quant weight is arithmetic too: where the matmuls run on the vector ALUs
    # (Metal), a matrix-vector step of K-quant weights takes at least weights × operations
    # per weight ÷ the fp16 peak. Fitted where enough decode rows have K-quant weights,
    # from the fit so far, and kept where it lowers the loss.
    if _shows_unpacking(mine, key):
        space, best = kept_if_better(space, best, replace(space, unpack=True),
                                     math.log(UNPACK_START_OPS))
    # A kernel's ramp and tail: where the rows' models launch different numbers of weight
    # matmuls per layer (a DeepSeek layer ten, a Llama layer four), a cost per matmul beside
    # the cost per layer, from the fit so far, kept where it lowers the loss.
    if has_fused_projections(key) and _shows_matmuls(mine):
        space, best = kept_if_better(space, best, replace(space, matmul=True),
                                     math.log(MATMUL_START_S))
    # A prompt's experts in llama.cpp run one at a time over the tokens routed to each, in
    # tiles of a fixed number of columns: where enough prompt rows are of MoE models, the tile
    # width, from the fit so far, kept where it lowers the loss.
    if has_tiled_experts(key) and _shows_expert_prompts(mine):
        space, best = kept_if_better(space, best, replace(space, tile=True),
                                     math.log(TILE_START_TOKENS))
    # A routed-expert layer runs more of llama.cpp's graph nodes than a dense one: where
    # enough decode rows are of MoE models and enough of dense ones, a cost per MoE layer
    # beside the cost per layer, from the fit so far, kept where it lowers the loss
    if prices_moe_layers(key) and _shows_moe_layers(mine):
        space, best = kept_if_better(space, best, replace(space, moe=True),
                                     math.log(MOE_LAYER_START_S))
    fitted = space.profile(best)
    table = {m: fitted for m in members}
    ratios = sorted(p.measured / p.predicted for p in (predict(r, table) for r in mine)
                    if p.predicted)
    # the band brackets the expectation itself (the loader's rule: band_low ≤ 1 ≤ band_high)
    held = _held_notes(fitted, space, prior, prompt_rows=bool(compute_rows))
    low, high = min(1.0, _quantile(ratios, 0.1)), max(1.0, _quantile(ratios, 0.9))
    if prior is not None:  # a user's rows measure the fit's own error, not a new model's or
        # card's: the band is at least the bundled profile's, fitted on many of each
        low, high = min(low, prior.band_low), max(high, prior.band_high)
        held += "; its band at least the bundled profile's"
    return replace(fitted, band_low=low, band_high=high,
                   fitted_rows=len(mine), fitted_ids=tuple(r.id for r in mine),
                   fitted_groups=dict(sorted(groups.items())),
                   source=_fit_source(mine) + held, compute_rows=len(compute_rows))


def condition(row: Measurement) -> tuple[object, ...]:
    """What a row measured, apart from its value: repeats of one condition are one equation."""
    return (row.model, row.weights_dtype, row.kv_dtype, row.gpu, row.num_gpus, row.tp,
            row.batch, row.input_len, row.output_len, row.context_len, row.metric)


LOWER_IS_FASTER = ("ttft_ms",)
ROOFLINE_SLACK = 1.05  # a row this much past the roofline is not this deployment's
# A row this many times past its deployment's roofline is no measurement of it: unreadable.
# Nothing real gets there: speculative decoding's published speed-ups reach about 6× (EAGLE-3,
# 6.5× at best), and a step verifying k drafted tokens streams the weights once for at most
# k + 1 tokens, so even 32 drafts, every one accepted, stay under 33× the one-token roofline;
# a card or model named wrong is off by its bandwidth or size ratio (an RTX 4090 named for a
# B200: 8×; a 70B model for an 8B one, ~9×). Unit slips and typos land far past it: seconds
# written as ms are 1,000× off, and 1e12 tok/s for Llama-3.1-8B on an H100 is nine orders of
# magnitude past its roofline of 223.
UNREADABLE_PAST_ROOFLINE = 100.0


def _rooflines(rows: Sequence[Measurement]) -> list[tuple[Measurement, float]]:
    """(row, the roofline's figure) for each performance row that has one: its metric on
    its deployment with efficiencies of 1 and no overheads (cost.IDEAL)."""
    from ridgeline.cost import IDEAL

    table = {row_engine(r): replace(IDEAL, engine=row_engine(r)) for r in rows}
    figures = ((row, predict(row, table).predicted) for row in performance_rows(rows))
    return [(row, floor) for row, floor in figures if floor is not None]


def times_past(row: Measurement, floor: float) -> float:
    """How many times faster than the roofline's ``floor`` the row was measured (under 1:
    slower, as every engine is)."""
    return floor / row.value if row.metric in LOWER_IS_FASTER else row.value / floor


def beyond_roofline(rows: Sequence[Measurement]) -> list[tuple[Measurement, float]]:
    """The rows measured faster than the roofline lets their deployment run (a card named
    wrong, speculative decoding): (row, the roofline's figure). An engine cannot beat it, so
    no efficiency up to 100 % fits them."""
    return [(row, floor) for row, floor in _rooflines(rows)
            if (row.value * ROOFLINE_SLACK < floor if row.metric in LOWER_IS_FASTER
                else row.value > floor * ROOFLINE_SLACK)]


def refuse_past_roofline(result: ReadResult) -> ReadResult:
    """``result`` with each row UNREADABLE_PAST_ROOFLINE or more times past its deployment's
    roofline moved from its rows to its errors, named with why (as a negative value is):
    `validate` would score it at −100 % and `calibrate` would have to leave it out."""
    impossible = {row.id: (row, floor) for row, floor in _rooflines(result.rows)
                  if times_past(row, floor) >= UNREADABLE_PAST_ROOFLINE}
    if not impossible:
        return result
    errors = tuple(
        f"{row.id}: {row.value:,.4g} {row.unit} is {times_past(row, floor):,.0f}× faster than "
        f"the roofline's {floor:,.4g} for {row.model} on {row.num_gpus} x {row.gpu}; nothing "
        f"real runs {UNREADABLE_PAST_ROOFLINE:g}× past its roofline, speculative decoding "
        "included (a unit slip? a typo?)" for row, floor in impossible.values())
    return ReadResult(tuple(r for r in result.rows if r.id not in impossible),
                      result.errors + errors)


def _predictable(rows: Sequence[Measurement], table: Mapping[str, EngineProfile],
                 engine: str) -> list[Measurement]:
    """The rows the model predicts (an unknown model, or one that does not fit its GPUs, cannot
    steer the fit); an InputError with the first reasons when it predicts none."""
    predictions = [predict(r, table) for r in rows]
    usable = [r for r, p in zip(rows, predictions, strict=True) if p.predicted is not None]
    if not usable:
        reasons = "; ".join(f"{p.id}: {p.reason}" for p in predictions[:3])
        raise InputError(f"no row could be predicted for engine {engine}: {reasons}")
    return usable


def source_keys(keys: Iterable[str]) -> str:
    """Source keys in reading order, runs of one letter joined: L1–L16, R1–R3, S5."""
    def split(key: str) -> tuple[str, int | None]:
        head = key.rstrip("0123456789")
        return (head, int(key[len(head):])) if head != key else (key, None)

    parts: list[str] = []
    run: list[tuple[str, int]] = []

    def close() -> None:
        if run:
            (head, first), (_, last) = run[0], run[-1]
            if last - first > 1:
                parts.append(f"{head}{first}–{head}{last}")
            else:
                parts.extend(f"{head}{n}" for n in range(first, last + 1))
            run.clear()

    for key in sorted(set(keys), key=lambda k: (split(k)[0], split(k)[1] or -1, k)):
        head, number = split(key)
        if number is not None and run and run[-1][0] == head and run[-1][1] == number - 1:
            run.append((head, number))
            continue
        close()
        if number is None:
            parts.append(key)
        else:
            run.append((head, number))
    close()
    return ", ".join(parts)


def _fit_source(rows: Sequence[Measurement]) -> str:
    sources = source_keys(r.source_key for r in rows)
    engines = sorted({row_engine(r) for r in rows})
    models = sorted({r.model for r in rows})
    # a fit on one model says so wherever its source is shown (decode, plan, simulate)
    alone = f", all of {models[0]}" if len(models) == 1 else ""
    if len(engines) > 1:
        return (f"fitted on {len(rows)} rows of {', '.join(engines)} together{alone} "
                f"({sources})")
    return f"fitted on {len(rows)} rows{alone} ({sources})"


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
        dep = _deployment(r)
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
NO_FIXED_COST_S = 1e-9  # a step's fixed cost under this is none


def fit_cautions(profiles: Mapping[str, EngineProfile], rows: Sequence[Measurement],
                 bundled: Mapping[str, EngineProfile] | None = None) -> list[str]:
    """What makes a fitted profile unsafe to use beyond its rows: a fit on one deployment
    or one model, a bandwidth share no serving engine runs at (under MIN_BANDWIDTH_SHARE of
    rated, or over all of it, on a card group the rows are on), and no fixed cost a step
    (neither said of a value held at the bundled profile's: held_parameters)."""
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
        shares: dict[tuple[str, int], list[str]] = {}  # (low or high, share %) → groups
        fitted_on = [] if "bandwidth share" in held else sorted(p.fitted_groups) or [""]
        for group in fitted_on:
            share = p.bandwidth_efficiency * p.group_bandwidth.get(group, 1.0)
            if share < MIN_BANDWIDTH_SHARE:
                shares.setdefault(("low", round(share * 100)), []).append(group)
            elif share > 1.0 and p.bandwidth_efficiency < 0.999:  # ≥ 0.999: cmd_calibrate's
                shares.setdefault(("high", round(share * 100)), []).append(group)
        for (side, pct), groups in shares.items():
            where = f" on {' and '.join(groups)} cards" if any(groups) else ""
            bundled_share = f" (the bundled {engine} profile: {prior.bandwidth_efficiency:.0%})" \
                if prior is not None else ""
            out.append(f"{engine}: bandwidth fitted at {pct}% of rated{where}, " + (
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
    return out


def fit_profiles(rows: Sequence[Measurement], engines: Iterable[str] | None = None,
                 progress: Callable[[str], None] | None = None,
                 priors: Mapping[str, EngineProfile] | None = None) -> dict[str, EngineProfile]:
    """A profile per engine that has performance rows, at least as many as it has parameters
    (InputError otherwise); ``progress`` hears of each engine as its fit starts; ``priors``
    (by engine) stand where an engine's rows cannot pin a value (fit_engine's prior)."""
    performance = performance_rows(rows)
    names = sorted({row_engine(r) for r in performance})
    if engines is not None:
        names = [engine_id(e) for e in engines if engine_id(e) in names]
    fitted: dict[str, EngineProfile] = {}
    for i, name in enumerate(sorted(names, key=lambda n: n in SAME_KERNELS), 1):
        if progress is not None:  # the kernels' owners first
            n = sum(row_engine(r) == name for r in performance)
            progress(f"fitting {name} on {n} rows ({i} of {len(names)})")
        fitted[name] = fit_same_kernels(rows, name, fitted.get(SAME_KERNELS.get(name, "")),
                                        strict=True, held_matmul_s=_bundled_matmul_s(name),
                                        prior=(priors or {}).get(name))
    return {name: fitted[name] for name in names}


def _bundled_matmul_s(engine: str) -> float:
    """The bundled profile's cost per weight matmul, kept by a user's calibration whose rows
    cannot pin one (a file of one model): else the cost per layer would absorb it, and a
    DeepSeek layer's ten matmuls would cost a Llama layer's four."""
    bundled = bundled_profiles().get(engine)
    return bundled.matmul_overhead_s if bundled is not None else 0.0


def fit_same_kernels(rows: Sequence[Measurement], engine: str,
                     owner: EngineProfile | None, *, strict: bool = False,
                     held_matmul_s: float = 0.0,
                     prior: EngineProfile | None = None) -> EngineProfile:
    """fit_engine, with the compute efficiency pulled towards ``owner``'s (the engine whose
    kernels this one replays, SAME_KERNELS) where this engine's rows cannot pin it."""
    if owner is None:
        return fit_engine(rows, engine, strict=strict, held_matmul_s=held_matmul_s, prior=prior)
    owned = replace(prior, compute_efficiency=owner.compute_efficiency) if prior else None
    profile = fit_engine(rows, engine, replace(START, compute_efficiency=owner.compute_efficiency),
                         strict=strict, held_matmul_s=held_matmul_s, prior=owned)
    return replace(profile, source=f"{profile.source}; compute efficiency from {owner.engine}'s "
                                   "rows (the same kernels) where its own have no prefill")


def _minimise(loss: Callable[[Sequence[float]], float], x0: Sequence[float]) -> list[float]:
    """Nelder–Mead from x0 in broad steps, then again in fine ones from where it stopped."""
    best = nelder_mead(loss, x0, step=0.5, iterations=400)
    return nelder_mead(loss, best, step=0.15, iterations=300)


def nelder_mead(f: Callable[[Sequence[float]], float], x0: Sequence[float],
                step: float = 0.5, iterations: int = 300) -> list[float]:
    """Minimise f from x0 (Nelder & Mead 1965; standard coefficients 1, 2, 0.5, 0.5)."""
    n = len(x0)
    simplex = [list(x0)] + [[x + (step if i == j else 0.0) for j, x in enumerate(x0)]
                            for i in range(n)]
    values = [f(p) for p in simplex]
    for _ in range(iterations):
        order = sorted(range(n + 1), key=lambda i: values[i])
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if abs(values[-1] - values[0]) < 1e-10:
            break
        centroid = [sum(p[j] for p in simplex[:-1]) / n for j in range(n)]
        worst = simplex[-1]
        reflect = [c + (c - w) for c, w in zip(centroid, worst)]
        fr = f(reflect)
        if fr < values[0]:
            expand = [c + 2 * (c - w) for c, w in zip(centroid, worst)]
            fe = f(expand)
            simplex[-1], values[-1] = (expand, fe) if fe < fr else (reflect, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflect, fr
        else:
            contract = [c + 0.5 * (w - c) for c, w in zip(centroid, worst)]
            fc = f(contract)
            if fc < values[-1]:
                simplex[-1], values[-1] = contract, fc
            else:
                best = simplex[0]
                simplex = [best] + [[b + 0.5 * (x - b) for b, x in zip(best, p)]
                                    for p in simplex[1:]]
                values = [values[0]] + [f(p) for p in simplex[1:]]
    return simplex[min(range(n + 1), key=lambda i: values[i])]


def _quantile(values: Sequence[float], q: float) -> float:
    if not values:
        return 1.0
    position = q * (len(values) - 1)
    low, high = math.floor(position), math.ceil(position)
    return values[low] + (values[high] - values[low]) * (position - low)


@dataclass(frozen=True)
class ErrorStats:
    group: str
    rows: int
    median_abs_error: float
    p90_abs_error: float
    median_bias: float  # + where the prediction promises more: faster, or more capacity


def error_stats(predictions: Sequence[Prediction], key: Callable[[Prediction], str]
                ) -> list[ErrorStats]:
    """Median and p90 |error| per group of predictions that have a prediction, and the
    median bias, read the same way for times, rates and capacities (Prediction.optimism)."""
    groups: dict[str, list[float]] = {}
    optimism: dict[str, list[float]] = {}
    for p in predictions:
        if p.error is not None and p.optimism is not None:  # both exist with a prediction
            groups.setdefault(key(p), []).append(p.error)
            optimism.setdefault(key(p), []).append(p.optimism)
    out = []
    for group, errors in sorted(groups.items()):
        absolute = sorted(abs(e) for e in errors)
        out.append(ErrorStats(group, len(errors), statistics.median(absolute),
                              _quantile(absolute, 0.9), statistics.median(optimism[group])))
    return out


def validate(rows: Sequence[Measurement],
             profiles: Mapping[str, EngineProfile] | None = None) -> list[Prediction]:
    return [predict(row, profiles) for row in rows]
