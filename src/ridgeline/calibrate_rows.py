"""What a calibration's rows can pin, row by row and together.

Each row is read through the deployment it names (row_deployment: None where ridgeline cannot
build it) and its card group. Together they show a structural term only where enough rows of
the right kind differ in the way that term prices: a bandwidth ceiling (shows_ceiling), K-quant
unpacking (shows_unpacking), a cost per weight matmul (shows_matmuls), a cost per MoE layer
(shows_moe_layers), an expert tile width (shows_expert_prompts), a prompt step's own cost per
layer (shows_prompt_layers); and a card group keeps its own multiplier only beside a group that
pins the profile's own value (pinned_groups).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ridgeline.cost import kquant_ops
from ridgeline.deployment import Deployment
from ridgeline.engines import (
    MATVEC_TOKENS,
    MIN_GROUP_ROWS,
    accelerator_group,
    bandwidth_group,
    has_alu_matmuls,
    has_matvec_ceiling,
)
from ridgeline.errors import InputError
from ridgeline.hardware import resolve_accelerator
from ridgeline.launches import deployment_matmuls
from ridgeline.measurements import Measurement
from ridgeline.predict import deployment_for

CAP_SPAN = 3.0  # the spread of rated bandwidths, fastest ÷ slowest card, that pins a ceiling


def row_deployment(row: Measurement) -> Deployment | None:
    """The row's deployment, or None where the row names something ridgeline cannot build."""
    try:
        return deployment_for(row)
    except InputError:
        return None


def dequantizes(row: Measurement) -> bool:
    dep = row_deployment(row)
    return dep is not None and dep.dequantizes


def row_group(row: Measurement, bandwidth: bool = False) -> str:
    """The row's card group (bandwidth: its bandwidth_group, whose decode multiplier it pins)."""
    try:
        acc = resolve_accelerator(row.gpu)
    except InputError:
        return "other"
    return bandwidth_group(acc) if bandwidth else accelerator_group(acc)


def rated_bytes_per_s(row: Measurement) -> float | None:
    try:
        return resolve_accelerator(row.gpu).memory_bandwidth_bytes_per_s
    except InputError:
        return None


def _dense_bytes_per_layer(row: Measurement) -> float | None:
    """A dense model's weight bytes per layer: what a matrix-vector step streams per layer
    (None for an MoE model, whose steps carry routing and expert launches of their own)."""
    dep = row_deployment(row)
    if dep is None or dep.model.is_moe:
        return None
    return dep.weight_bytes / dep.model.num_layers


def shows_ceiling(rows: Sequence[Measurement], engine: str) -> bool:
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
             if (b := rated_bytes_per_s(r))]
    rated = [b for _, b in steps]
    if len(rated) < MIN_GROUP_ROWS or max(rated) < CAP_SPAN * min(rated):
        return False
    per_layer = [size for r, b in steps if b >= max(rated) / 2
                 if (size := _dense_bytes_per_layer(r))]
    return len(per_layer) >= MIN_GROUP_ROWS and max(per_layer) >= CAP_SPAN * min(per_layer)


def _kquant(row: Measurement) -> bool:
    dep = row_deployment(row)
    return dep is not None and bool(kquant_ops(dep))


def shows_unpacking(rows: Sequence[Measurement], engine: str) -> bool:
    """Whether the rows pin K-quant unpacking: the engine multiplies on the vector ALUs
    (has_alu_matmuls), and enough of its decode rows have K-quant weights."""
    return has_alu_matmuls(engine) and sum(
        1 for r in rows if r.metric == "decode_tok_s_per_user" and _kquant(r)) >= MIN_GROUP_ROWS


def _matmuls_per_layer(row: Measurement) -> float | None:
    dep = row_deployment(row)
    return None if dep is None else deployment_matmuls(dep) / dep.model.num_layers


def shows_matmuls(rows: Sequence[Measurement]) -> bool:
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
    dep = row_deployment(row)
    return dep is not None and dep.model.moe is not None


def _moe_decode(row: Measurement) -> bool | None:
    """Whether a decode row's model routes to experts (None: not a decode row, or unread)."""
    if row.metric != "decode_tok_s_per_user":
        return None
    dep = row_deployment(row)
    return None if dep is None else dep.model.moe is not None


def shows_moe_layers(rows: Sequence[Measurement]) -> bool:
    """Whether the rows pin a cost per MoE layer apart from the cost per layer: at least
    MIN_GROUP_ROWS decode rows of MoE models and as many of dense ones."""
    kinds = Counter(map(_moe_decode, rows))
    return kinds[True] >= MIN_GROUP_ROWS and kinds[False] >= MIN_GROUP_ROWS


def shows_expert_prompts(rows: Sequence[Measurement]) -> bool:
    """Whether the rows pin an expert tile width: MIN_GROUP_ROWS prompt rows of MoE models."""
    return sum(map(_moe_prompt, rows)) >= MIN_GROUP_ROWS


def shows_prompt_layers(rows: Sequence[Measurement]) -> bool:
    """Whether the rows pin a prompt step's own cost per layer apart from the compute share:
    time-to-first-token rows at two prompt lengths or more. A TTFT is the prompt's arithmetic
    ÷ (peak × compute share) plus layers × that cost; at one length any split of it fits, and
    the fit took the compute share to its 100 % clamp: one 2,048-token TTFT of Llama-3.1-8B
    on an L20 fitted 2.3 ms a layer, and a 128-token prompt then read 95 ms, where the bundled
    profile says 34 (tests/test_calibrate_held.py)."""
    return len({r.input_len for r in rows if r.metric == "ttft_ms"}) >= 2


def pinned_groups(chosen: tuple[str, ...], rows: Counter[str]) -> tuple[str, ...]:
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
