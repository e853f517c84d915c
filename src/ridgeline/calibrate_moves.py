"""How far a calibration moved an engine from its bundled profile: the shares its rows' cards
reach and the fixed costs (profile_moves), and what that does to the rows' predictions
(prediction_shift).

A base bandwidth share alone misleads: the bundled serving profile's 75 % on NVIDIA's
datacenter cards is a base times a card group's multiplier, while a fit on one card has no
groups. So the shares compared are those each profile gives the rows' own cards
(EngineProfile.bandwidth_for, compute_for), cards that moved alike named together: five rows
of Llama-3.1-8B under vLLM on an H100 (tests/test_validate_honesty.py's) moved its bandwidth
share from 75 % to 100 % and its compute share from 56 % to 81 %, and its predictions of
those rows ×1.21 faster at the median.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ridgeline.engines import EngineProfile
from ridgeline.errors import InputError
from ridgeline.hardware import Accelerator, resolve_accelerator
from ridgeline.measurements import UNITS, Measurement
from ridgeline.predict import Prediction

# a share or cost that moved by less than this share of its bundled value is not named
MOVED = 0.02
# a fixed cost that moved by less than this is not named (a fit's 5e-12 s is 0)
MOVED_S = 0.5e-6


@dataclass(frozen=True)
class Move:
    what: str  # "bandwidth share on h100-sxm", "cost per step"
    bundled: float  # a share (0–1), or seconds
    fitted: float
    share: bool  # True: a share of a rated figure; False: seconds

    @property
    def shown(self) -> str:
        """'bandwidth share on h100-sxm 75% → 100%', 'cost per step 0.0 → 355.6 µs'."""
        if self.share:
            return f"{self.what} {self.bundled:.0%} → {self.fitted:.0%}"
        return f"{self.what} {self.bundled * 1e6:,.1f} → {self.fitted * 1e6:,.1f} µs"


def profile_moves(fitted: EngineProfile, bundled: EngineProfile,
                  rows: Sequence[Measurement]) -> tuple[Move, ...]:
    """The shares each profile gives the cards of ``fitted``'s rows (most rows first), then its
    fixed costs, each that moved by at least MOVED of its bundled value (MOVED_S for a cost)."""
    ids = set(fitted.fitted_ids)
    counts: dict[str, int] = {}
    for r in rows:
        if r.id in ids:
            counts[r.gpu] = counts.get(r.gpu, 0) + 1
    cards: dict[str, Accelerator] = {}  # by catalog id, however the rows name it
    for name in sorted(counts, key=lambda n: -counts[n]):
        try:
            acc = resolve_accelerator(name)
        except InputError:  # pragma: no cover - fitted rows were predicted
            continue
        cards.setdefault(acc.id, acc)
    moves: list[Move] = []
    for kind, share in (("bandwidth", EngineProfile.bandwidth_for),
                        ("compute", EngineProfile.compute_for)):
        pairs: dict[tuple[float, float], list[str]] = {}  # cards that moved alike, named once
        for card_id, acc in cards.items():
            pair = (round(share(bundled, acc), 3), round(share(fitted, acc), 3))
            pairs.setdefault(pair, []).append(card_id)
        moves += [Move(f"{kind} share on {', '.join(ids)}", b, f, True)
                  for (b, f), ids in pairs.items()]
    moves += [Move(what, b, f, False) for what, b, f in (
        ("cost per step", bundled.step_overhead_s, fitted.step_overhead_s),
        ("cost per layer", bundled.layer_overhead_s, fitted.layer_overhead_s),
        # a prompt step's own, where either profile has one (else it is the cost per layer's)
        *((("cost per layer of a prompt step", bundled.per_layer_s(True),
             fitted.per_layer_s(True)),)
          if (bundled.prefill_layer_overhead_s, fitted.prefill_layer_overhead_s) != (None, None)
          else ()),
        ("cost per weight matmul", bundled.matmul_overhead_s, fitted.matmul_overhead_s),
        ("cost per MoE layer", bundled.moe_layer_overhead_s, fitted.moe_layer_overhead_s))]
    return tuple(m for m in moves if abs(m.fitted - m.bundled) >= max(
        MOVED * abs(m.bundled), 0.0 if m.share else MOVED_S) and m.fitted != m.bundled)


@dataclass(frozen=True)
class Shift:
    rows: int
    median: float  # the new prediction ÷ the bundled one, as a speed, at the median
    low: float  # the least of them
    high: float  # the most

    @property
    def shown(self) -> str:
        """'its predictions of these 5 rows run ×1.19 the bundled ones' speed at the median
        (×1.05 to ×1.32)'."""
        return (f"its predictions of these {self.rows} rows run ×{self.median:.2f} the bundled "
                f"ones' speed at the median (×{self.low:.2f} to ×{self.high:.2f})")


def prediction_shift(bundled: Sequence[Prediction], refitted: Sequence[Prediction]
                     ) -> Shift | None:
    """How the refitted profile's predictions of the same rows compare with the bundled
    profile's, as speeds (a time's ratio turned over: a TTFT of 45 ms where the bundled
    profile priced 60 is ×1.33): the ratio's median and range (None where no row has both)."""
    ratios = sorted((b.predicted / a.predicted if UNITS.get(a.metric) == "ms"
                     else a.predicted / b.predicted)
                    for b, a in zip(bundled, refitted, strict=True)
                    if a.predicted and b.predicted and a.id == b.id)
    if not ratios:
        return None
    return Shift(len(ratios), statistics.median(ratios), ratios[0], ratios[-1])
