"""llama.cpp: the run llama-server's default --fit starts for one context, counted as `fit`
counts it, where no flag says how llama-server was started (the page, utilization).

`fit --max-model-len L` starts llama-server with -c = L × the conversations of L that fit
with every layer on the GPU, at least one (``fit_sequences``), and --fit places the weights
for those cells (llamacpp_fit.fit_placement). Where that keeps every layer on the GPU, the
count is -ngl all's under --fit's margin (capacity.decode_held). Where it moves weights to
the host, the run is another deployment: its conversations are that placement's slots under
the margin (capacity.engine_holds, fit's -np lever and decode's max-batch line), and its
step reads the host's layers at the host's bandwidth, which only --host-bandwidth-gbs gives
(decode and prefill price it; the page and utilization take no such flag, and say so).
Llama-3.1-70B Q4_K_M on an RTX 4090 at 4,096 tokens: -ngl all holds none; --fit runs one
with 18.43 GiB of weights on the host (-ngl 44).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ridgeline.errors import InputError

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.memory import EngineSettings


def fit_sequences(dep: Deployment, settings: EngineSettings, target: int | None,
                  margin_bytes: float | None) -> int:
    """The sequences of ``settings.max_model_len`` tokens --fit places the weights for, as
    `fit` starts llama-server: the conversations of that length its -np slots hold with every
    layer on the GPU and ``margin_bytes`` (None: the default --fit-target) free, at least one
    (sim.config.llamacpp_context), or ``target`` where more. Llama-3.1-8B bf16 on an RTX 4090
    at 8,192 tokens: 4 (llama-server's 4 slots, of the 8 that fit)."""
    from ridgeline.sim.config import llamacpp_context

    length = settings.max_model_len or 1
    cells = llamacpp_context(dep, settings, True, margin_bytes)[0]
    return max(target or 1, cells // length)


@dataclass(frozen=True)
class HostedRun:
    """What llama-server's default --fit runs at ``context`` where it moves weights to the
    host: ``deployment`` placed so, the ``held`` conversations its slots hold (fit's count),
    and the ``host_weight_bytes`` it keeps in host memory."""

    context: int
    held: int
    host_weight_bytes: float
    deployment: Deployment

    @property
    def placement(self) -> str:
        """What --fit placed where, as `fit` says it (HostOffload.describe, fit --json's
        offload.placement): "llama.cpp's --fit: -ngl 44: 43 of 80 layers on the GPU, the
        output layer too"."""
        offload = self.deployment.offload
        return offload.describe(self.deployment.model) if offload is not None else ""

    @property
    def split(self) -> str:
        """``placement`` after its "llama.cpp's --fit: " lead."""
        return self.placement.split(": ", 1)[-1]


def default_fit_run(dep: Deployment, context: int,
                    engine_version: str | None = None) -> HostedRun | None:
    """The run llama-server's default --fit starts for conversations of ``context`` tokens,
    where it moves weights to the host; None where it keeps every layer on the GPU (the
    count is then -ngl all's, capacity.decode_held), where it finds no placement (llama-server
    loads every layer as given), and where it does not run: another engine, a build before
    b7437 (``engine_version``), one memory, -sm tensor, or a placement given. The same
    placement and count `fit --max-model-len` gives at llama-server's defaults (-np 4, the
    default --fit-target), and decode's max-batch line where it sets --fit aside."""
    from ridgeline.capacity import engine_holds
    from ridgeline.llamacpp_fit import (
        default_fit_target_bytes,
        fit_could_offload,
        fit_on_for,
        fit_placement,
    )
    from ridgeline.memory import EngineSettings
    from ridgeline.offload import HostOffload, every_layer_ngl, host_weight_bytes

    if not fit_could_offload(dep) or dep.tensor_parallel_size > 1 \
            or not fit_on_for(engine_version):
        return None
    settings = EngineSettings(max_model_len=context, engine_version=engine_version)
    template = HostOffload(every_layer_ngl(dep.model), 0, 0.0, None, True, None)
    try:
        placed = fit_placement(dep, settings, context, fit_sequences(dep, settings, None, None),
                               template)
    except InputError:  # FitFailed too: no placement, every layer as given
        return None
    if placed.offload is None:
        return None
    held = engine_holds(placed, context, False,
                        EngineSettings(engine_version=engine_version,
                                       fit_target_bytes=default_fit_target_bytes()))
    return HostedRun(context, held or 0, host_weight_bytes(placed), placed)
