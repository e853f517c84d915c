"""The space a profile is fitted in: a vector of logs mapped to an EngineProfile.

The entries, in order: the bandwidth share (where the decode side is fitted), the compute
share, the cost per step and per layer (decode side), a prompt step's own cost per layer, a
multiplier per card group for bandwidth and then for compute, a dequantization factor, and the
structural terms the rows show (a bandwidth ceiling, K-quant unpacking, a cost per weight
matmul, the expert tile width, a cost per MoE layer). What the space does not fit is its base
profile's. Its penalty pulls group multipliers towards 1 and efficiencies back inside 100 %.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ridgeline.engines import (
    MAX_BANDWIDTH_BYTES_PER_S,
    MAX_OPS_PER_WEIGHT,
    MAX_OVERHEAD_S,
    MAX_TILE_TOKENS,
    EngineProfile,
)

GROUP_PRIOR = 0.002  # a gentle pull of group multipliers towards 1 (squared log)
CLAMP_PULL = 1.0  # the pull of a log efficiency past 0 (the 100 % clamp) back to it
# Without prefill or TTFT rows nothing pins the compute efficiency, and a fit on decode rows
# alone would bend it to absorb other costs: then it is pulled towards the start (squared
# log, worth about one row). This pull is the bundled fit's (no prior); a calibration against
# the bundled profile holds its compute share there instead (ParameterSpace.compute):
# serving.csv's 18 vLLM decodes and throughputs of one model overcame the pull, moved its
# 56 % to 33 %, and priced every other model's TTFT 1.6–1.7× slower.
COMPUTE_PRIOR_ROWS = 0.2


@dataclass(frozen=True)
class ParameterSpace:
    """Maps a parameter vector (logs) to a profile; what it does not fit is ``base``'s."""

    base: EngineProfile
    bw_groups: tuple[str, ...]
    compute_groups: tuple[str, ...]
    dequant: bool  # fit a dequantization factor (the data have both kinds of weights)
    prefill_overhead: bool  # fit prefill steps' own per-layer cost (the data have prompts)
    compute_prior: bool = False  # hold compute efficiency near the start (no compute rows)
    # fit the compute share (False: the rows have no prompt and base's is a prior's, held)
    compute: bool = True
    # fit the bandwidth share, the cost per step and the cost per layer (False: the rows have
    # no decode step to pin them, and base's stand: calibrate_held.DECODE_SIDE)
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
        return (*(("bandwidth",) if decode else ()), *(("compute",) if self.compute else ()),
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

    @property
    def fitted_fields(self) -> frozenset[str]:
        """The EngineProfile fields this space fits; every other one is ``base``'s."""
        entries = {"bandwidth_efficiency": self.decode_side, "compute_efficiency": self.compute,
                   "step_overhead_s": self.decode_side, "layer_overhead_s": self.decode_side,
                   "prefill_layer_overhead_s": self.prefill_overhead,
                   "group_bandwidth": bool(self.bw_groups),
                   "group_compute": bool(self.compute_groups),
                   "dequant_compute": self.dequant,
                   "bandwidth_cap_bytes_per_s": self.cap, "kquant_ops_per_weight": self.unpack,
                   "matmul_overhead_s": self.matmul, "expert_tile_tokens": self.tile,
                   "moe_layer_overhead_s": self.moe}
        return frozenset(name for name, fitted in entries.items() if fitted)

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
        groups += CLAMP_PULL * (max(0.0, self._entry(x, "bandwidth") or 0.0) ** 2
                                + max(0.0, compute or 0.0) ** 2)
        if not self.compute_prior or compute is None:
            return groups
        pull = compute - math.log(self.base.compute_efficiency)
        return groups + COMPUTE_PRIOR_ROWS * pull * pull / rows
