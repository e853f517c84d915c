"""llama.cpp's ``--fit``: the placement it picks when the weights and the cache overflow a GPU.

Since PR #16653 (merged December 2025; in build 7437) llama.cpp starts with ``--fit on`` and
``-ngl auto`` (``fit_on_by_default``: ridgeline places a deployment given no -ngl so for
those builds, the newest modelled among them): it projects the memory of the whole model on
the GPU and, when that leaves less than ``--fit-target`` (1024 MiB) free, changes what the
user did not set. A context the user set is kept; llama-server's default ``-c 0`` (the
trained context, as --fit reads it: YaRN's cap where the launch lifts it) is first shrunk,
down to ``--fit-ctx`` (``fit_context``). Then:

- a dense model keeps the output layer and the last layers on the GPU, as many as fit
  (``-ngl`` lowered, whole layers, back to front);
- an MoE model whose dense weights fit with every expert on the host keeps every layer on
  the GPU and moves the routed experts of the *last* layers to the host, as few as it must
  (``--n-cpu-moe N`` moves the *first* N; for a model of alike layers the cost is the same).
  When even the dense weights overflow, it lowers ``-ngl`` with every GPU layer's experts on
  the host.

The fit also tries to keep a third or two thirds of one more layer's experts on the GPU (its
"partial layer"); ridgeline leaves that layer's experts on the host, so the placement is at
most one layer's experts more pessimistic than llama.cpp's.

A run under --fit leaves the margin free, not cached, whether or not --fit moved weights: a
longer -c or more slots there make --fit move a layer (another one) to the host
(common/fit.cpp: each device's target is its free memory less the margin, and a layer stays
only while the projected use is within it), so `fit` sizes that run's pool with the margin as
a buffer of its own (``fit_pool``).

Over several GPUs the fit also writes -ts, filling the devices back to front with whole layers
(src/llama.cpp, llama_params_fit_impl, step 3; it refuses a -ts the user set). ridgeline
prices the -ngl it finds under the default split's per-GPU counts
(llamacpp_split.layer_devices), so over several GPUs its -ngl can be a layer or so off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ridgeline.datafiles import load_data
from ridgeline.errors import DoesNotFit, InputError
from ridgeline.hardware import device_memory_bytes
from ridgeline.llamacpp_rope import loaded_n_ctx_train
from ridgeline.monotone import longest_holding
from ridgeline.units import MIB

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.kvpool import KVPool
    from ridgeline.memory import EngineSettings
    from ridgeline.offload import HostOffload


def fit_could_offload(dep: Deployment, engine: str | None = None) -> bool:
    """Whether llama.cpp's --fit could keep layers in host memory here: a llama.cpp build
    (``engine``, else the deployment's) on a discrete card (not Apple's unified memory, not a
    GB10's) with no placement given."""
    acc = dep.accelerator
    return ((engine or dep.engine).startswith("llama.cpp") and dep.offload is None
            and acc.vendor != "apple" and acc.form != "soc")


def fit_constants() -> dict[str, Any]:
    """The --fit block of engines.json: its margin, minimum context and sources."""
    return dict(load_data("engines.json")["llama.cpp"]["fit"])


def fit_default_since_build() -> int:
    """The first llama.cpp build that starts with --fit on and -ngl auto (PR #16653)."""
    return int(fit_constants()["default_since_build"])


def fit_on_by_default(build: int | None) -> bool:
    """Whether llama-server ``build`` (None: the newest modelled) places the weights with
    --fit when no -ngl is given: from b7437 on; an older build keeps every layer on the GPU
    (-ngl's default, every block and the output layer)."""
    return build is None or build >= fit_default_since_build()


def fit_on_for(version: str | None) -> bool:
    """``fit_on_by_default`` for an --engine-version as typed (b7437, 7437; None or empty:
    the newest modelled). The one place the flag's text becomes that answer: -ngl auto's
    refusal, the default placement, fit's lever and the does-not-fit hint all ask here. A
    version that names no build (check_version_kind refuses it first) has no --fit."""
    from ridgeline.engine_versions import llamacpp_build

    if not version:
        return True
    build = llamacpp_build(version)
    return build is not None and fit_on_by_default(build)


def default_fit_host(dep: Deployment, version: str | None = None) -> HostOffload | None:
    """The host llama-server's own --fit places ``dep``'s weights for, where it starts with
    it though no placement is given (cli_offload.fit_by_default): a llama.cpp build with --fit
    on by default (``fit_on_for(version)``: b7437 on, None the newest modelled), split by layer
    (-sm tensor, ``dep``'s tensor parallelism, starts with --fit off), with no weights placed
    by flags (-ngl N, --n-cpu-moe: ``dep.offload``); None otherwise. The host is the one no
    flag describes: every layer's slot on the GPU to start from, no bandwidth rated. Its
    margin (--fit-target's default, 1 GiB a device) is what fit keeps free: Llama-3.1-8B
    under llama.cpp on an H100 at 8,192 tokens holds 63 conversations with it, 64 without."""
    from ridgeline.offload import HostOffload, every_layer_ngl

    if not dep.engine.startswith("llama.cpp") or dep.tensor_parallel_size > 1 \
            or dep.offload is not None or not fit_on_for(version):
        return None
    return HostOffload(every_layer_ngl(dep.model), 0, 0.0, None, True, None)


def fit_hint(version: str | None) -> str:
    """What moves weights to the host where the whole model does not fit, for llama.cpp
    ``version`` (a build; None: the newest modelled): its default --fit, priced once the
    host's bandwidth is given; before b7437, a later build's."""
    if fit_on_for(version):
        return ("llama-server's default --fit would keep layers in host memory: "
                "--host-bandwidth-gbs GB/s prices that")
    return (f"a build from b{fit_default_since_build()} would keep layers in host memory with "
            "its --fit (-ngl auto --host-bandwidth-gbs GB/s), or -ngl N here")


# how the caution begins where the build's default --fit was set aside for -ngl all
# (cli_offload.FitRun.caution): the reports then drop their shorter hint (no_expectation)
SET_ASIDE_LEAD = "answered with every layer on the GPU"


class FitFailed(DoesNotFit):
    """--fit finds no placement: the GPU cannot hold even what stays on it."""


def unplaced_caution(failed: str) -> str:
    """What llama-server does where --fit finds no placement (``failed``: FitFailed's words):
    it warns and loads the model as given, every layer on the GPU and no margin kept
    (common/common.cpp ignores common_fit_params' result, b7437 on); the -c --fit shrank a
    -c 0 to before it failed stays (``unplaced_context``)."""
    return (f"llama.cpp's --fit finds no placement ({failed.removeprefix('does not fit: ')}): "
            "llama-server warns and starts as given, every layer on the GPU and no "
            "--fit-target kept free, as answered here (-ngl all)")


def unplaced_context(dep: Deployment, min_context: int | None = None) -> int:
    """The -c llama-server's -c 0 runs at where --fit finds no placement (``fit_context``
    raised FitFailed): --fit-ctx, to which --fit shrank the trained context before it failed
    to place the layers (llama_params_fit changes cparams.n_ctx in place, and the failure
    leaves it: "context size is always modified when set to 0"); the trained context as
    --fit reads it where that is no longer than the floor (--fit leaves it unchanged).
    mixtral-8x7b q8_0 on an apple-m4-pro-20c: 4,096."""
    floor = default_fit_min_context() if min_context is None else min_context
    resolved = fit_resolved_context(dep)[1] or floor
    return resolved if resolved <= floor else floor


def default_fit_target_bytes() -> float:
    """--fit-target: the memory --fit leaves free on each device."""
    return float(fit_constants()["target_mib"]) * MIB


def fit_pool(dep: Deployment, settings: EngineSettings,
             margin_bytes: float | None = None) -> KVPool:
    """llama.cpp's pool on each GPU with ``margin_bytes`` (--fit-target; None: its default
    1024 MiB) left free, as --fit judges a placement: the memory the card reports, less the
    margin as a buffer of its own (KVPool.fit_free_bytes), the compute buffer sized at the
    cells the rest holds. llama-3.1-8b on an rtx-4090 at -ngl 16 with --fit-target 16000:
    15.62 GiB left free, and room for at least the 4,096 cells --fit placed for, one cell
    past it being what moves another layer."""
    from ridgeline.memory import kv_pool

    margin = default_fit_target_bytes() if margin_bytes is None else margin_bytes
    total = device_memory_bytes(dep.accelerator)
    pool = kv_pool(dep, settings, total_bytes=total - margin)
    return replace(pool, total_bytes=total, fit_free_bytes=margin)


def run_pool(dep: Deployment, settings: EngineSettings, fit_on: bool,
             margin_bytes: float | None = None) -> KVPool:
    """The pool a run of ``dep`` allocates: under --fit (``fit_on``, or a placement --fit
    chose) the card less its margin (``fit_pool``), whether or not --fit moved weights, since
    more cells there make --fit move a layer rather than fill the margin; else the whole card
    (-ngl given: --fit stops, and no margin is kept)."""
    from ridgeline.memory import kv_pool

    if fit_on or placed_by_fit(dep):
        return fit_pool(dep, settings, margin_bytes)
    return kv_pool(dep, settings)


def whole_fit_margin(dep: Deployment, settings: EngineSettings, context: int,
                     sequences: int = 1) -> float | None:
    """The margin llama-server's default --fit keeps free with every layer of ``dep`` on the
    GPU, for ``sequences`` × ``context`` cells: its default --fit-target, where the build
    ``settings`` names starts with --fit on (b7437 on), splits by layer (-sm tensor starts
    with it off), is given no placement, and keeps every layer on the GPU (``holds``); None
    where it is off or would move weights, whose run is then priced as -ngl all's. What
    decode's pool reads where no flag says how llama-server was started (the page,
    utilization)."""
    if not dep.engine.startswith("llama.cpp") or dep.offload is not None \
            or dep.tensor_parallel_size > 1 or not fit_on_for(settings.engine_version):
        return None
    margin = default_fit_target_bytes()
    return margin if holds(dep, settings, context, sequences, margin) else None


def placed_by_fit(dep: Deployment) -> bool:
    """Whether llama.cpp's --fit placed ``dep`` (moved weights to the host for its -c): its
    pool then leaves --fit-target free (``fit_pool``), since a longer -c or more slots make
    --fit move another layer rather than fill the margin."""
    return dep.offload is not None and dep.offload.chosen_by_fit


def holds(dep: Deployment, settings: EngineSettings, context: int, sequences: int,
          margin_bytes: float) -> bool:
    """Whether ``sequences`` conversations of ``context`` cells fit with ``margin_bytes`` free."""
    from ridgeline.capacity import conversations

    if device_memory_bytes(dep.accelerator) - margin_bytes <= 0:
        return False
    pool = fit_pool(dep, replace(settings, max_model_len=context), margin_bytes)
    return pool.rest_bytes >= 0 and conversations(pool, dep, context) >= sequences


def _most(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """The largest n in [lo, hi] with ok(n), for ok true below some point and false above;
    None where ok(lo) is false."""
    return longest_holding(ok, lo, hi) if ok(lo) else None


def fit_placement(dep: Deployment, settings: EngineSettings, context: int, sequences: int,
                  template: HostOffload, margin_bytes: float | None = None) -> Deployment:
    """``dep`` as llama.cpp's --fit would place it for ``sequences`` × ``context`` cells: whole
    when it fits, else with the layers or experts --fit moves to the host. ``template`` carries
    the host's bandwidth, link and RAM. Raises "does not fit" when even every layer on the
    host leaves the GPU short (the compute buffer alone), or the host's RAM overflows."""
    if not dep.engine.startswith("llama.cpp"):
        raise InputError(f"-ngl auto is llama.cpp's --fit; {dep.engine} keeps every weight on "
                         "the GPU")
    margin = default_fit_target_bytes() if margin_bytes is None else margin_bytes
    acc = dep.accelerator
    if margin >= device_memory_bytes(acc):
        which = "the default --fit-target" if margin_bytes is None else "--fit-target"
        raise InputError(f"{which} {margin / MIB:,.0f} MiB is all of {acc.id}'s "
                         f"{device_memory_bytes(acc) / MIB:,.0f} MiB: nothing is left to fit into")
    whole = replace(dep, offload=None)
    if holds(whole, settings, context, sequences, margin):
        return whole
    if acc.one_memory:
        raise FitFailed(f"does not fit: {dep.model.name} and {sequences * context:,} cells "
                         f"of cache, with {margin / MIB:,.0f} MiB left free (--fit-target), "
                         f"overflow {acc.id}, whose GPU and CPU share one memory, so "
                         "llama.cpp's --fit has nowhere to move weights")
    from ridgeline.offload import every_layer_ngl

    n, every = dep.model.num_layers, every_layer_ngl(dep.model)  # every block and the output

    def placed(gpu_layers: int, expert_layers: int) -> Deployment:
        offload = replace(template, gpu_layers=gpu_layers, cpu_expert_layers=expert_layers,
                          experts_last=True, chosen_by_fit=True,
                          fit_cells=sequences * context)
        return dep.offloaded(offload, check_host=False)  # the caller checks the one picked

    def fits(candidate: Deployment) -> bool:
        return holds(candidate, settings, context, sequences, margin)

    if dep.model.moe is not None and fits(placed(every, n)):
        fewest = n - (_most(0, n, lambda k: fits(placed(every, n - k))) or 0)
        return placed(every, fewest)
    experts = n if dep.model.moe is not None else 0
    most = _most(0, every, lambda ngl: fits(placed(ngl, experts)))
    if most is None:
        raise FitFailed(f"does not fit: with every layer of {dep.model.name} in host memory "
                         f"the GPU still cannot hold the compute buffer and the cache's "
                         f"{sequences * context:,} cells with {margin / MIB:,.0f} MiB free "
                         "(--fit fails; a smaller -c or -ub)")
    return placed(most, experts)


def default_fit_min_context() -> int:
    """--fit-ctx: the shortest context --fit shrinks an unset one to."""
    return int(fit_constants()["min_ctx"])


CONTEXT_ALIGN = 256  # --fit rounds a context it shrinks down to a multiple of this


def fit_resolved_context(dep: Deployment) -> tuple[int | None, int | None]:
    """(n_ctx_train as the model loads, n_ctx_train as --fit reads it): what llama-server's
    -c 0 allocates without --fit, and what --fit sets -c 0 to. --fit's probe reads
    n_ctx_train after building its probe context, so from PR #28030 on it reads YaRN's cap
    (capacity.served_context, the one cap). gpt-oss-20b under --rope-scaling yarn
    --rope-scale 2: (131,072, 8,192)."""
    from ridgeline.capacity import served_context

    loaded = loaded_n_ctx_train(dep.model, dep.engine, dep.rope)
    # llama.cpp at b10751 (PR #28030, merged 2026-08-30, after PR #27496 of 2026-08-21):
    # - src/llama-context.cpp (ggml-org/llama.cpp 001d906a6d86): the llama_context
    #   constructor sets cparams.n_ctx = params.n_ctx == 0 ? hparams.n_ctx_train : n_ctx and
    #   sizes the cache there; llama_init_from_model only then, after `new llama_context`,
    #   logs 'custom YaRN scaling detected' and sets model->hparams.n_ctx_train =
    #   n_ctx_orig_yarn / rope_freq_scale. So -c 0 with --fit off is the loaded length.
    # - common/fit.cpp common_get_device_memory_data (6d0892ba065b and later): loads a probe
    #   model, calls llama_init_from_model on it, then reads hp_n_ctx_train =
    #   llama_model_n_ctx_train(model): the lifted value.
    # - common_params_fit_impl since PR #27496 ('fit: also take into account n_streams',
    #   merged 2026-08-21; read in forks' copies of common/fit.cpp that carry it, the stored
    #   ggml-org copy predating it): for n_ctx == 0 it sets cparams->n_ctx = hp_nct x
    #   n_streams first ("llama_context would use only hp_nct in total for n_ctx == 0, resolve
    #   the context before measuring anything else"; 1 stream: llama-server's auto -np turns
    #   on kv_unified), then judges "no changes needed" on the probe built at n_ctx 0, the
    #   loaded length, without measuring again; a shrink interpolates n_ctx_min..hp_nct by
    #   the memory measured at that loaded length.
    # - tools/server/server-context.cpp n_ctx_slot(): min(n_ctx_seq, llama_model_n_ctx_train).
    return loaded, served_context(dep)[0] or loaded


def fit_context(dep: Deployment, settings: EngineSettings, template: HostOffload,
                margin_bytes: float | None = None,
                min_context: int | None = None) -> tuple[int, Deployment]:
    """llama-server's defaults: -c 0 and --fit on. --fit sets -c to n_ctx_train as it reads
    it (``fit_resolved_context``: YaRN's cap where the launch lifts it) when the whole model
    fits at the length the probe allocated (the loaded one); else it shrinks -c between
    --fit-ctx and that cap in proportion to the memory that fits (the longest loaded-scale
    context, a multiple of 256, mapped onto the cap's span); else --fit-ctx with weights moved
    to the host. Returns (context, placed deployment)."""
    margin = default_fit_target_bytes() if margin_bytes is None else margin_bytes
    floor = default_fit_min_context() if min_context is None else min_context
    loaded, resolved = fit_resolved_context(dep)
    if not loaded or not resolved:
        raise InputError(f"{dep.model.name} states no trained context "
                         "(max_position_embeddings): give --max-model-len")
    whole = replace(dep, offload=None)
    if holds(whole, settings, loaded, 1, margin):
        return resolved, whole  # no change needed; a lifted -c allocates at start or fails
    if resolved <= floor:
        return resolved, fit_placement(dep, settings, resolved, 1, template, margin_bytes)
    low = -(-floor // CONTEXT_ALIGN)
    most = _most(low, loaded // CONTEXT_ALIGN, lambda m: holds(
        whole, settings, m * CONTEXT_ALIGN, 1, margin)) if low <= loaded // CONTEXT_ALIGN else None
    if most is not None:
        # linear interpolation between --fit-ctx and the cap, by the share of the loaded
        # span's memory that fits: the longest context that fits, where nothing is lifted
        share = floor + (resolved - floor) * (most * CONTEXT_ALIGN - floor) // (loaded - floor)
        return max(share - share % CONTEXT_ALIGN, floor), whole
    if holds(whole, settings, floor, 1, margin):
        return floor, whole
    return floor, fit_placement(dep, settings, floor, 1, template, margin_bytes)


def context_story(dep: Deployment, context: int, unplaced: bool = False) -> str:
    """One line on the context --fit chose for llama-server's -c 0, and why; where the
    launch's YaRN lifts n_ctx_train, that --fit reads the lifted cap, not the GGUF's length.
    ``unplaced``: --fit found no placement, and the -c it left stands (``unplaced_context``)."""
    from ridgeline.capacity import served_context

    loaded, resolved = fit_resolved_context(dep)
    trained = resolved or context
    head = f"llama-server's default -c 0 under --fit: -c {context:,}"
    lifted = ("" if loaded in (None, trained) else
              f" ({served_context(dep)[1]}: --fit reads n_ctx_train after its probe context "
              f"applies the YaRN flags, PR #28030, not the {loaded:,} loaded"
              + (", and judged the memory at that length" if trained > (loaded or 0) else "")
              + ")")
    if unplaced and context >= trained:
        return f"{head}, the trained context, which --fit leaves as it finds no placement{lifted}"
    if unplaced:
        return (f"{head}, its floor (--fit-ctx): --fit shrinks the trained {trained:,} that far, "
                f"then finds no placement for the layers and leaves -c there{lifted}")
    if context >= trained:
        return f"{head}, the trained context{lifted}"
    if dep.offload is None and lifted:
        return (f"{head}, the trained {trained:,} shrunk by the share of the {loaded:,} "
                f"loaded that fits on the GPU{lifted}")
    if dep.offload is None:
        return f"{head}, the trained {trained:,} shrunk to what fits on the GPU"
    return (f"{head}, its floor (--fit-ctx): the trained {trained:,} is shrunk that far and "
            f"the model still does not fit whole, so weights move to the host{lifted}")

