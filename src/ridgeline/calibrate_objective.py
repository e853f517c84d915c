"""The fit's objective, and the structural terms a fit tries beside its core parameters.

The loss is the mean Huber loss of ln(predicted ÷ measured) over an engine's rows (robust:
past HUBER_DELTA a row counts linearly, so a few far rows do not steer the fit), plus the
parameter space's penalty (calibrate_space). Each structural term the rows show (a bandwidth
ceiling, K-quant unpacking, a cost per weight matmul, the expert tile width, a cost per MoE
layer: calibrate_rows says which they show) is fitted from the fit so far, at a fixed start,
and kept only where it lowers the loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from ridgeline.calibrate_rows import (
    rated_bytes_per_s,
    shows_ceiling,
    shows_expert_prompts,
    shows_matmuls,
    shows_moe_layers,
    shows_unpacking,
)
from ridgeline.calibrate_space import ParameterSpace
from ridgeline.engines import EngineProfile, has_fused_projections, has_tiled_experts, prices_moe_layers
from ridgeline.measurements import Measurement
from ridgeline.nelder_mead import minimise
from ridgeline.predict import predicted_value

CAP_START_SHARE = 2.0  # a ceiling's fit starts at this multiple of the fastest card's bandwidth
UNPACK_START_OPS = 20.0  # the unpacking fit starts at this many operations per weight
MATMUL_START_S = 5e-6  # the per-matmul fit starts at this cost
MOE_LAYER_START_S = 20e-6  # the per-MoE-layer fit starts at this cost
TILE_START_TOKENS = 32.0  # the expert tile fit starts at this width
HUBER_DELTA = 0.25  # log-ratio beyond which a row counts linearly (≈ 28% error)


def _huber(r: float) -> float:
    a = abs(r)
    return 0.5 * a * a if a <= HUBER_DELTA else HUBER_DELTA * (a - 0.5 * HUBER_DELTA)


@dataclass(frozen=True)
class Objective:
    """The fit's loss: the mean Huber loss of ln(predicted ÷ measured) over the rows, with
    every engine of ``members`` on the profile (each under its own name: member_table), plus
    the space's penalty."""

    rows: Sequence[Measurement]
    members: frozenset[str]

    def of(self, within: ParameterSpace) -> Callable[[Sequence[float]], float]:
        """The loss of a parameter vector of ``within``."""
        return partial(self.loss, within)

    def loss(self, within: ParameterSpace, x: Sequence[float]) -> float:
        profile = within.profile(x)
        table = member_table(profile, self.members)
        total = 0.0
        for row in self.rows:
            predicted = predicted_value(row, table)
            if predicted is None:
                continue
            total += _huber(math.log(predicted / row.value))
        return total / len(self.rows) + within.penalty(x, len(self.rows))


def member_table(profile: EngineProfile, members: Iterable[str]) -> dict[str, EngineProfile]:
    """``profile`` for each engine of ``members``, named for it, as the bundled profiles are
    given (scripts/fit_profiles.py): a rule keyed by the engine's name (vLLM's
    moe_prompt_expert_slowdown) reaches its own rows in the fit as it will when bundled."""
    return {m: profile if profile.engine == m else replace(profile, engine=m) for m in members}


def kept_if_better(objective: Objective, narrow: ParameterSpace, best: list[float],
                    wide: ParameterSpace, start: float) -> tuple[ParameterSpace, list[float]]:
    """``wide`` (``narrow`` and one more parameter, its log starting at ``start``) fitted
    from ``best``, where it lowers the loss; else ``narrow`` and ``best`` as they were."""
    tried = minimise(objective.of(wide), [*best, start])
    if objective.of(wide)(tried) < objective.of(narrow)(best):
        return wide, tried
    return narrow, best


def with_structure(objective: Objective, space: ParameterSpace, best: list[float],
                    key: str) -> tuple[ParameterSpace, list[float]]:
    """The space and the fit (``best`` in ``space`` so far) with each structural term the
    rows show, fitted from the fit before it and kept where it lowers the loss."""
    mine = objective.rows
    # The ceiling is structure, not a free knob: a matrix-vector kernel keeps a bounded
    # number of bytes in flight. It is fitted for an engine with such kernels where enough
    # rows are such steps on cards far enough apart to show it, from the fit without it,
    # and dropped only where it buys nothing; the engine pays it on every step (pricing it
    # on steps of at most 8 tokens alone was tried: a batch-9 step then ran faster than a
    # batch-8 one, and llama.cpp-cuda held out by source went from 11.4 % to 16.1 %). (Akaike's
    # criterion was tried: holding out the source with the datacenter rows, it rejected a
    # ceiling, 3.30 TB/s, that the full fit puts at 3.73 TB/s.)
    if shows_ceiling(mine, key):
        fastest = max(b for b in map(rated_bytes_per_s, mine) if b)
        space, best = kept_if_better(objective, space, best, replace(space, cap=True),
                                      math.log(CAP_START_SHARE * fastest))
    # Unpacking a K-quant weight is arithmetic too: where the matmuls run on the vector ALUs
    # (Metal), a matrix-vector step of K-quant weights takes at least weights × operations
    # per weight ÷ the fp16 peak. Fitted where enough decode rows have K-quant weights,
    # from the fit so far, and kept where it lowers the loss.
    if shows_unpacking(mine, key):
        space, best = kept_if_better(objective, space, best, replace(space, unpack=True),
                                      math.log(UNPACK_START_OPS))
    # A kernel's ramp and tail: where the rows' models launch different numbers of weight
    # matmuls per layer (a DeepSeek layer ten, a Llama layer four), a cost per matmul beside
    # the cost per layer, from the fit so far, kept where it lowers the loss.
    if has_fused_projections(key) and shows_matmuls(mine):
        space, best = kept_if_better(objective, space, best, replace(space, matmul=True),
                                      math.log(MATMUL_START_S))
    # A prompt's experts in llama.cpp run one at a time over the tokens routed to each, in
    # tiles of a fixed number of columns: where enough prompt rows are of MoE models, the tile
    # width, from the fit so far, kept where it lowers the loss.
    if has_tiled_experts(key) and shows_expert_prompts(mine):
        space, best = kept_if_better(objective, space, best, replace(space, tile=True),
                                      math.log(TILE_START_TOKENS))
    # A routed-expert layer runs more of llama.cpp's graph nodes than a dense one: where
    # enough decode rows are of MoE models and enough of dense ones, a cost per MoE layer
    # beside the cost per layer, from the fit so far, kept where it lowers the loss
    if prices_moe_layers(key) and shows_moe_layers(mine):
        space, best = kept_if_better(objective, space, best, replace(space, moe=True),
                                      math.log(MOE_LAYER_START_S))
    return space, best
