"""`ridgeline observe`'s floor check: decode's floor at the observed batch on the deployment
described, a measured latency under it (the server runs something lighter than described), and
the lighter weight formats whose floor the measurement clears."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ridgeline.deployment import Deployment
from ridgeline.errors import InputError
from ridgeline.floors import decode_floor
from ridgeline.reports.observe_latency import ObservedLatency
from ridgeline.stages import micro_batch

BELOW_FLOOR = 0.9  # a latency this far under the floor is no rounding of the floor's inputs
# lighter formats a server that outruns the described floor may run, heaviest first
LIGHTER_WEIGHTS = {"llama.cpp": ("q8_0", "q6_k", "q5_k_m", "q4_k_m"),
                   "other": ("fp8", "awq-int4")}


@dataclass(frozen=True)
class ObservedFloor(ObservedLatency):
    """The latency check, with the floor no step can beat and what a measurement under it means."""

    @cached_property
    def floor_itl_ms(self) -> float | None:
        """decode's floor for one micro-batch at the context on the deployment described (no
        engine overhead, every byte at the card's rated bandwidth): no step can be faster."""
        b = self.batch
        if b is None or b < 0.5 or not self.fits:
            return None
        try:
            floor = decode_floor(self.deployment, micro_batch(self.deployment, max(1, round(b))),
                                 self.context)
        except InputError:
            return None
        return floor.step_time_s * 1e3

    @property
    def below_floor(self) -> bool:
        """The latency measured is under BELOW_FLOOR of the floor: the server does not run
        what is described (a lighter weight format, more GPUs, a shorter context)."""
        measured, floor = self.measured_itl_ms, self.floor_itl_ms
        return bool(measured and floor and measured < BELOW_FLOOR * floor)

    @cached_property
    def lighter_weights(self) -> list[tuple[str, float]]:
        """(format, its floor in ms) for the heaviest lighter formats whose floor the
        measured latency clears, first the heaviest; empty where none does or the floor is
        not broken."""
        if not self.below_floor or self.deployment.offload is not None:
            return []
        d, b = self.deployment, max(1, round(self.batch or 1))
        measured = self.measured_itl_ms or 0.0
        llamacpp = d.engine.startswith("llama.cpp")
        out = []
        for name in LIGHTER_WEIGHTS["llama.cpp" if llamacpp else "other"]:
            try:
                lighter = Deployment.build(
                    d.model, d.accelerator, name, d.kv.id, d.num_gpus,
                    1 if llamacpp else d.pipeline_parallel_size, d.engine, d.expert_parallel,
                    d.flash_attention,
                    split_mode="tensor" if llamacpp and d.tensor_parallel_size > 1 else None)
                floor = decode_floor(lighter, micro_batch(lighter, b), self.context)
            except InputError:
                continue
            if floor.step_time_s * 1e3 <= measured:
                out.append((name, floor.step_time_s * 1e3))
        return out[:2]
