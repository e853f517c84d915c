"""`ridgeline measure --dry-run`: the grid a run would time, what it would skip and a floor on
its steps' time, worked out before any device is touched (PyTorch is not imported).

The skips known in advance are the grid's own (measure.plan_grid) against the memory known
without the device: --memory-gib, else --card's spec sheet, else a CPU's RAM; the floor is
the article's (floors.py) at --card's rated figures, times the steps each point runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ridgeline.errors import InputError
from ridgeline.measure import DTYPE_BYTES, GridPoint, grid_axes, plan_grid
from ridgeline.params import count_params
from ridgeline.precision import weight_bytes_at

if TYPE_CHECKING:
    from ridgeline.hardware import Accelerator
    from ridgeline.model import ModelSpec

# the steps each point runs (measure._decode_point, _graph_row; device_probes.timed_s and
# graph_replay): eager decode 1 warm-up + 3 timed; a graph's side-stream warm-up, 2 replays
# of warm-up and 10 timed (its capture launches nothing); a prefill 1 + 3
EAGER_STEPS = 1 + 3
GRAPH_STEPS = 1 + 2 + 10
PREFILL_STEPS = 1 + 3
ROOM_SHARE = 0.85  # of the memory beside the weights, as measure leaves of what CUDA reports free
_SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}


@dataclass(frozen=True)
class MeasurePlan:
    device: str  # as asked: cpu, cuda:1, mps
    model: str  # the model's name
    dtype: str  # the weights' and cache's torch dtype
    fp8: bool
    probes: bool
    points: tuple[GridPoint, ...]
    skipped: tuple[str, ...]
    graphs: bool  # decode also replayed from a CUDA graph (a GPU's run)
    moe: bool  # graphs hang on torch._grouped_mm, which only the run can try
    weights_bytes: float
    memory_bytes: float | None  # None: only the device can say
    memory_from: str  # "--memory-gib", "h200-sxm's spec sheet", "this machine's RAM"
    card: str  # the catalog card the floor is priced on ("" : none)
    floor_s: float | None  # the timed steps at the card's rated figures (None: no card)

    @property
    def steps(self) -> int:
        """Model steps the grid runs, warm-ups included."""
        decode = EAGER_STEPS + (GRAPH_STEPS if self.graphs else 0)
        return sum(PREFILL_STEPS if p.prefill else decode for p in self.points)


def plan_measure(spec: ModelSpec, device: str, dtype: str | None, quick: bool,
                 batches: tuple[int, ...] | None, contexts: tuple[int, ...] | None,
                 probes: bool, fp8: bool, card: Accelerator | None,
                 memory_bytes: float | None, memory_from: str) -> MeasurePlan:
    """What ``measure`` would do with these flags: its grid, the points ``memory_bytes``
    (minus the weights, × 0.85) cannot hold, and with ``card`` the steps' floor. Llama-3.2-1B
    in bf16, --quick on an H200: 4 decode points and 2 prefills, 76 steps, a floor of 0.04 s
    (the probes, the model's build and CUDA's start-up come on top: tens of seconds)."""
    kind = device.split(":")[0]
    dt = dtype or ("float32" if kind == "cpu" else "bfloat16")
    weights = weight_bytes_at(count_params(spec).total, DTYPE_BYTES.get(dt, 2))
    if memory_bytes is not None and weights > memory_bytes:
        raise InputError(f"does not fit: {spec.name}'s {weights / 1e9:,.1f} GB of {dt} "
                         f"weights exceed the device's {memory_bytes / 1e9:,.1f} GB "
                         "(a smaller --model, or --dtype)")
    room = float("inf") if memory_bytes is None else ROOM_SHARE * (memory_bytes - weights)
    element = 4 if dt == "float32" else 2
    points, skipped = plan_grid(spec, *grid_axes(quick, batches, contexts), room, element)
    graphs = kind == "cuda"
    plan = MeasurePlan(device, spec.name, dt, fp8, probes, tuple(points), tuple(skipped),
                       graphs, spec.moe is not None, weights, memory_bytes, memory_from,
                       card.id if card else "", None)
    if card is None or not points:
        return plan
    return MeasurePlan(**{**plan.__dict__, "floor_s": _floor_s(spec, card, plan)})


def _floor_s(spec: ModelSpec, card: Accelerator, plan: MeasurePlan) -> float | None:
    """The grid's steps at ``card``'s rated bandwidth and peak (decode_floor, prefill_floor),
    each point's floor times the steps it runs; None where the card cannot price the model."""
    from ridgeline.deployment import Deployment
    from ridgeline.floors import decode_floor, prefill_floor

    kv = _SHORT.get(plan.dtype, plan.dtype)
    try:
        dep = Deployment.build(spec, card, weights="fp8" if plan.fp8 else kv, kv=kv)
        decode = EAGER_STEPS + (GRAPH_STEPS if plan.graphs else 0)
        return sum(prefill_floor(dep, p.context).time_s * PREFILL_STEPS if p.prefill else
                   decode_floor(dep, p.batch, p.context, explain=False).step_time_s * decode
                   for p in plan.points)
    except InputError:
        return None
