"""CLI: llama.cpp's layer placement — -sm, the partial offload flags (-ngl, --n-cpu-moe,
the host's memory and link) and --fit's (-ngl auto, --fit-target, --fit-ctx) — read into a
``HostOffload`` and placed on a deployment; and its RoPE and --override-kv flags, read into a
``RopeLaunch``."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from typing import Any

from ridgeline.cli_types import (
    GBS_RANGE,
    MAX_MEMORY_GIB,
    MEMORY_GIB_RANGE,
    _count,
    _plain_float,
    _positive_count,
    _positive_float,
    _typed,
)
from ridgeline.errors import InputError
from ridgeline.units import COUNT_EXAMPLES, GIB, MIB, ascii_whole


def _split_mode(p: Any) -> None:  # a parser or an argument group
    p.add_argument("--split-mode", "-sm", choices=["layer", "row", "tensor"],
                   help="llama.cpp -sm over several GPUs (default layer: each GPU holds whole "
                   "layers and a step passes them one after another; tensor splits each "
                   "layer's heads and matmuls, priced as tensor parallel; row is not modelled)")


def _offload(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("llama.cpp partial offload (weights in host memory)")
    g.add_argument("-ngl", "--gpu-layers", "--n-gpu-layers", dest="gpu_layers", metavar="N",
                   type=_typed(_gpu_layers),
                   help="layers on the GPU, the output layer first (llama.cpp's -ngl); the "
                   "rest stream from host memory. auto (or -1): what llama.cpp's --fit "
                   "picks; all: every layer. Default: as the build does, auto from b7437 "
                   "(Dec 2025; the newest modelled unless --engine-version names an older "
                   "build), all before it and under -sm tensor")
    g.add_argument("--fit-target", "-fitt", dest="fit_target_mib", metavar="MiB",
                   type=_count("--fit-target MiB"),
                   help="the memory --fit (-ngl auto) leaves free (llama.cpp default 1024)")
    g.add_argument("--fit-ctx", "-fitc", dest="fit_ctx", metavar="N",
                   type=_positive_count("--fit-ctx"),
                   help="under --fit (-ngl auto) with no context given (llama-server's -c 0): "
                   "the shortest context --fit shrinks the trained one to (default 4096)")
    g.add_argument("--n-cpu-moe", "-ncmoe", dest="n_cpu_moe", metavar="N",
                   type=_count("--n-cpu-moe layers", COUNT_EXAMPLES),
                   help="keep the routed experts of the first N layers in host memory")
    g.add_argument("--cpu-moe", "-cmoe", action="store_true",
                   help="keep every layer's routed experts in host memory")
    g.add_argument("--host-bandwidth-gbs", type=_positive_float("host bandwidth GB/s", *GBS_RANGE),
                   metavar="GB/s", help="the host memory's rated bandwidth: channels × 8 B × "
                   "MT/s (dual-channel DDR5-4800: 76.8)")
    g.add_argument("--host-link-gbs", type=_positive_float("host link GB/s", *GBS_RANGE), metavar="GB/s",
                   help="host-to-GPU link per direction (default: the card's PCIe; 7.88 for "
                   "PCIe 3.0 x8): prompt steps copy host weights over it, and vLLM's "
                   "--cpu-offload-gb reads its weights over it every step")
    g.add_argument("--host-memory-gib", type=_positive_float("host memory GiB", *MEMORY_GIB_RANGE),
                   metavar="GiB",
                   help="one host's RAM: refuse a llama.cpp split whose host weights and cache "
                   "overflow it, or a --cpu-offload-gb whose weights the GPUs of one host pin "
                   "past it (8 GPUs a host; 4 on GB200 and MI250X)")
    g.add_argument("--output-layer-last", action="store_true",
                   help="builds before llama.cpp PR #18148 (Dec 2025) and ik_llama.cpp: -ngl N "
                   "is the last N layers; the output layer stays on the host unless N exceeds "
                   "the layer count")
    _rope(p)


    v = p.add_argument_group("vLLM weight offload")
    v.add_argument("--cpu-offload-gb", type=_typed(_offload_gib), metavar="GiB",
                   help="vLLM: GiB of each GPU's layer weights kept in pinned "
                   "host memory (0, the default: none); the KV pool gains them and every step "
                   "reads them over the host link (--host-link-gbs, default the card's PCIe)")


def _rope(p: argparse.ArgumentParser) -> None:
    r = p.add_argument_group("llama.cpp RoPE scaling (the trained context that caps a slot)")
    r.add_argument("--rope-scaling", metavar="TYPE", type=_typed(_rope_type),
                   help="none, linear or yarn (default: the GGUF's); yarn at a scale other than "
                   "the GGUF's lifts n_ctx_train to --yarn-orig-ctx × F (llama.cpp PR #28030). "
                   "A JSON object is vLLM's older --rope-scaling (its rope_scaling block)")
    r.add_argument("--rope-scale", dest="rope_freq_scale", metavar="F",
                   type=_rope_factor("--rope-scale", inverse=True),
                   help="RoPE context scaling factor (rope_freq_scale = 1/F)")
    r.add_argument("--rope-freq-scale", dest="rope_freq_scale", metavar="S",
                   type=_rope_factor("--rope-freq-scale"),
                   help="RoPE frequency scaling factor (the context grows by 1/S)")
    r.add_argument("--yarn-orig-ctx", metavar="N", type=_count("--yarn-orig-ctx"),
                   help="YaRN's original context (default 0: the GGUF's, else n_ctx_train)")
    r.add_argument("--override-kv", metavar="KEY=TYPE:VALUE", action="append",
                   type=_typed(_kv_overrides),
                   help="GGUF metadata to override, repeatable or comma-separated (types int, "
                   "float, bool, str): ARCH.context_length=int:N sets n_ctx_train, the slot "
                   "cap (llama.context_length for Llama and Mistral); other keys are carried "
                   "to the start line, not modelled")
    vllm_context_flags(p)


def vllm_context_flags(p: argparse.ArgumentParser) -> None:
    """vLLM's rope override and its long-context switch: the context a deployment is served
    at past max_position_embeddings (fit, decode, prefill, simulate, utilization, amdahl)."""
    v = p.add_argument_group("vLLM context length")
    v.add_argument("--hf-overrides", metavar="JSON",
                   help="vLLM: its rope keys (rope_parameters or rope_scaling, rope_theta) set "
                   "the model's RoPE scaling, so the context vLLM derives (YaRN factor 4 from "
                   "32,768: 131,072); any other key is refused (edit a copy of config.json)")
    v.add_argument("--vllm-allow-long-max-model-len", type=_env_switch(LONG_LEN_ENV),
                   metavar="0|1",
                   help=f"vLLM: the environment variable {LONG_LEN_ENV} as the server is "
                   "started with it (not a flag of vLLM's): 1 lets --max-model-len past the "
                   "model's positions, priced with a caution (the model is not trained there)")


LONG_LEN_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"


def _env_switch(name: str) -> Any:
    """A vLLM environment variable read as its envs.py reads a switch, bool(int(value)): 0 or 1
    here (int() would take ' 2' or '-1' as true too; those are refused)."""
    def parse(text: str) -> bool:
        if text.strip() not in ("0", "1"):
            raise argparse.ArgumentTypeError(f"{name} is 0 or 1, got {text!r}")
        return text.strip() == "1"

    return parse


def _rope_type(text: str) -> str:
    """--rope-scaling's value, checked as RopeLaunch checks it; a JSON object (vLLM's older
    --rope-scaling) kept as given, checked where the engine is known (vllm_rope.py)."""
    from ridgeline.llamacpp_rope import RopeLaunch

    if text.lstrip().startswith("{"):
        from ridgeline.vllm_rope import json_rope_scaling

        json_rope_scaling(text)
        return text
    return str(RopeLaunch(scaling=text).scaling)


def _rope_factor(flag: str, inverse: bool = False) -> Any:
    """A positive number, checked as RopeLaunch checks it; for ``inverse`` (--rope-scale F)
    its reciprocal, rope_freq_scale, as llama.cpp holds it (rope_scale_freq: 1.0f / F)."""
    from ridgeline.llamacpp_rope import RopeLaunch, rope_scale_freq

    def parse(text: str) -> float:
        value = _plain_float(text, f"{flag} must be a number")
        RopeLaunch(freq_scale=value)  # refuses 0, a negative, inf or NaN
        return rope_scale_freq(value) if inverse else value

    return _typed(parse)


def _kv_overrides(text: str) -> Any:
    """One --override-kv's overrides, checked as llama.cpp checks them."""
    from ridgeline.llamacpp_overrides import parse_overrides

    return parse_overrides(text)


def rope_launch(args: argparse.Namespace, engine: str | None) -> Any:
    """The RoPE and --override-kv flags given, as a ``RopeLaunch`` at the --engine-version
    build; None where none is given; refused for an engine other than llama.cpp."""
    from ridgeline.engine_versions import llamacpp_build
    from ridgeline.llamacpp_rope import RopeLaunch

    scaling, scale = getattr(args, "rope_scaling", None), getattr(args, "rope_freq_scale", None)
    if isinstance(scaling, str) and scaling.lstrip().startswith("{"):
        scaling = None  # vLLM's JSON block: read into the model (cli_load.load_model)
    orig = getattr(args, "yarn_orig_ctx", None)
    overrides = tuple(o for group in getattr(args, "override_kv", None) or () for o in group)
    if scaling is None and scale is None and orig is None and not overrides:
        return None
    other = engine or "vllm"
    if not other.startswith("llama.cpp") and (scaling, scale, orig) != (None, None, None):
        raise InputError(f"--rope-scaling, --rope-scale, --rope-freq-scale and --yarn-orig-ctx "
                         f"are llama.cpp's; for {other} give config.json a rope_scaling block"
                         + (" or --hf-overrides '{\"rope_parameters\": {…}}'"
                            if other == "vllm" else ""))
    if not other.startswith("llama.cpp"):
        raise InputError(f"--override-kv is llama.cpp's (it rewrites a GGUF's metadata); "
                         f"{other} reads config.json")
    version = getattr(args, "engine_version", None)
    return RopeLaunch(scaling, scale, orig or 0, llamacpp_build(version) if version else None,
                      overrides)


class NotSearched(argparse.Action):
    """--cpu-offload-gb on plan, refused in one line: its search keeps every weight on the
    GPUs."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        parser.error(f"{option_string}: plan searches deployments that keep every weight on "
                     "the GPUs; price one with vLLM's weight offload through fit, decode, "
                     "prefill or simulate")


def _offload_gib(text: str) -> float:
    """--cpu-offload-gb: GiB, 0 (vLLM's default: nothing offloaded) up to MAX_MEMORY_GIB."""
    value = _plain_float(text, "--cpu-offload-gb takes GiB per GPU, e.g. 4")
    if not 0.0 <= value <= MAX_MEMORY_GIB:  # NaN fails it too
        raise InputError(f"--cpu-offload-gb must be between 0 and {MAX_MEMORY_GIB:g} GiB, "
                         f"got {text}")
    return value + 0.0


AUTO_LAYERS, ALL_LAYERS = "auto", "all"  # -ngl's words


def _gpu_layers(text: str) -> int | str:
    """-ngl: a count, 'all', or 'auto' (llama.cpp's --fit; -1 in its parser)."""
    word = text.strip().lower()
    if word in (AUTO_LAYERS, "-1"):
        return AUTO_LAYERS
    if word == ALL_LAYERS:
        return ALL_LAYERS
    layers = ascii_whole(word)
    if layers is None:
        raise InputError(f"-ngl takes a number of layers (0, 1, 2, …), auto (or -1) or all; "
                         f"got {text!r}")
    return layers


def auto_layers(args: argparse.Namespace, engine: str | None = None) -> bool:
    """Whether llama.cpp's --fit places the weights: -ngl auto asks for it, or (``engine``
    named) the build's default does (``fit_by_default``)."""
    return getattr(args, "gpu_layers", None) == AUTO_LAYERS or (
        engine is not None and fit_by_default(args, engine))


def fit_by_default(args: argparse.Namespace, engine: str | None) -> bool:
    """Whether llama-server places the weights with its --fit though no -ngl is given: a
    llama.cpp build that starts with --fit on (b7437 on; --engine-version, else the newest
    modelled), split by layer (-sm tensor starts with -fit off), with no --n-cpu-moe or
    --cpu-moe (an -ot rule, which stops the fit). An older build keeps every layer on the GPU."""
    from ridgeline.llamacpp_fit import fit_on_for

    if not (engine or "").startswith("llama.cpp") or getattr(args, "split_mode", None) == "tensor":
        return False
    if getattr(args, "gpu_layers", None) is not None or getattr(args, "cpu_moe", False) \
            or getattr(args, "n_cpu_moe", None) is not None:
        return False
    return fit_on_for(getattr(args, "engine_version", None))


def host_offload(args: argparse.Namespace, model: Any, engine: str | None) -> Any:
    """The weights' split between the GPU and host memory the offload flags ask for, or None
    (every weight on the GPU, and for -ngl auto until ``fitted_run`` places them)."""
    from ridgeline.offload import HostOffload, every_layer_ngl

    ngl, experts = getattr(args, "gpu_layers", None), getattr(args, "n_cpu_moe", None)
    if ngl == ALL_LAYERS and not (engine or "vllm").startswith("llama.cpp"):
        raise InputError(f"-ngl is llama.cpp's; {engine or 'vllm'} keeps every weight on the "
                         "GPU without it")
    if ngl == AUTO_LAYERS and not (engine or "vllm").startswith("llama.cpp"):
        # every command's refusal (simulate's went on, every weight on the GPU, exit 0)
        raise InputError(f"-ngl auto is llama.cpp's --fit; {engine or 'vllm'} keeps every "
                         "weight on the GPU")
    every_expert = getattr(args, "cpu_moe", False)
    fit = auto_layers(args, engine)
    if getattr(args, "fit_target_mib", None) is not None and not fit:
        raise InputError("--fit-target is the margin of llama.cpp's --fit: give -ngl auto")
    if getattr(args, "fit_ctx", None) is not None and not fit:
        raise InputError("--fit-ctx is the floor of llama.cpp's --fit: give -ngl auto")
    if ngl == AUTO_LAYERS:
        from ridgeline.engine_versions import llamacpp_build
        from ridgeline.llamacpp_fit import fit_default_since_build, fit_on_for

        version = getattr(args, "engine_version", None)
        if (engine or "").startswith("llama.cpp") and not fit_on_for(version):
            raise InputError(f"-ngl auto is llama.cpp's --fit, which came in "
                             f"b{fit_default_since_build()} (PR #16653); "
                             f"b{llamacpp_build(version or '')} has no --fit: "
                             "give -ngl N or a later --engine-version")
        if experts is not None or every_expert:
            raise InputError("--fit places the experts itself (and stops when -ot or "
                             "--n-cpu-moe is set): drop --n-cpu-moe/--cpu-moe, or give -ngl N")
        if getattr(args, "output_layer_last", False):
            raise InputError("--fit came after llama.cpp PR #18148: --output-layer-last does "
                             "not apply to -ngl auto")
        return None
    if ngl == ALL_LAYERS:
        ngl = None
    if ngl is None and experts is None and not every_expert:
        if fit and getattr(args, "output_layer_last", False):
            raise InputError("--output-layer-last is -ngl N's rule before llama.cpp PR "
                             "#18148: give -ngl N (--fit places the output layer first)")
        if fit:  # the host --fit places weights on (_host_template)
            return None
        given = [flag for flag, attr in (("--host-bandwidth-gbs", "host_bandwidth_gbs"),
                                         ("--host-link-gbs", "host_link_gbs"),
                                         ("--host-memory-gib", "host_memory_gib"),
                                         ("--output-layer-last", "output_layer_last"))
                 if getattr(args, attr, None)
                 and not (attr in ("host_link_gbs", "host_memory_gib")
                          and getattr(args, "cpu_offload_gb", None))]
        if given:
            verb = "describes" if len(given) == 1 else "describe"
            raise InputError(f"{', '.join(given)} {verb} a partial offload: give -ngl N, "
                             "--n-cpu-moe N or --cpu-moe")
        return None
    if experts is not None and every_expert:
        raise InputError("--cpu-moe keeps every layer's experts on the host; drop --n-cpu-moe")
    layers = model.num_layers
    host = getattr(args, "host_bandwidth_gbs", None)
    link = getattr(args, "host_link_gbs", None)
    ram = getattr(args, "host_memory_gib", None)
    return HostOffload(every_layer_ngl(model) if ngl is None else ngl,  # n_layer_all + 1
                       layers if every_expert else (experts or 0),
                       (host or 0.0) * 1e9, link * 1e9 if link else None,
                       not getattr(args, "output_layer_last", False),
                       ram * GIB if ram else None)


@dataclass(frozen=True)
class FitRun:
    """A run placed as ``fitted_run`` places it, for ``sequences`` × ``context`` cells."""

    deployment: Any
    context: int
    sequences: int
    # --fit-target (or its default) where --fit was asked to place the run; None where it was
    # not (-ngl or an -ot rule given, a build before it, -sm tensor)
    fit_target_bytes: float | None = None
    # the placement the build's default --fit would pick, set aside (``default_kept``): it
    # moves weights to the host, and no --host-bandwidth-gbs prices them
    set_aside: Any = None
    # why --fit (-ngl auto typed, or the build's default: the same -ngl -1 to llama-server)
    # found no placement (FitFailed's words): llama-server only warns, and loads the model as
    # given (common/common.cpp ignores common_fit_params' result), every layer on the GPU,
    # with no margin kept
    unplaced: str = ""

    @property
    def margin_bytes(self) -> float | None:
        """The memory --fit keeps free in this run, which its pool leaves uncached
        (llamacpp_fit.run_pool); None where --fit does not place it (not asked, set aside, or
        no placement found: every layer as given)."""
        return None if self.set_aside is not None or self.unplaced else self.fit_target_bytes

    def caution(self) -> str:
        """What the answer leaves out where the build's default --fit was set aside: the run
        answered for is -ngl all's (priced, or "does not fit" where it holds no sequence),
        where llama-server's default would move weights; "" else."""
        if self.unplaced:
            from ridgeline.llamacpp_fit import unplaced_caution

            return unplaced_caution(self.unplaced)
        if self.set_aside is None:
            return ""
        from ridgeline.llamacpp_fit import SET_ASIDE_LEAD
        from ridgeline.offload import host_weight_bytes
        from ridgeline.units import plural

        # the card named: a side-by-side decode gives each card's cautions in one list
        return (f"{SET_ASIDE_LEAD} ({self.deployment.gpus_label}; -ngl "
                f"all, which stops --fit): llama-server's default --fit, keeping "
                f"{(self.fit_target_bytes or 0.0) / MIB:,.0f} MiB free (--fit-target), would "
                f"move {host_weight_bytes(self.set_aside) / GIB:,.2f} GiB of weights to the "
                f"host for {self.sequences:,} {plural(self.sequences, 'sequence')} of "
                f"{self.context:,} tokens; --host-bandwidth-gbs GB/s prices that")


def fitted_run(args: argparse.Namespace, dep: Any, settings: Any, context: int,
               sequences: int, check_host: bool = True, priced: bool = True) -> FitRun:
    """``dep`` placed as llama.cpp's --fit places it for ``sequences`` × ``context`` cells,
    where -ngl auto or the build's default asks for that, else as it is; either way a host
    share (weights and the host layers' cache) that overflows --host-memory-gib is refused,
    unless ``check_host`` is False (fit checks it at the -c it prints). ``dep`` stays whole
    where --fit finds no placement (llama-server warns and loads it as given, -ngl auto typed
    or not), and under the build's default where --fit moves weights to the host and a
    ``priced`` step needs the host's bandwidth, not given (``default_kept``). With the
    margin --fit keeps free in that run, and the placement the build's default --fit would
    pick where it was set aside (``FitRun``)."""
    from ridgeline.llamacpp_pool import check_host_memory_for

    if not auto_layers(args, dep.engine):
        if check_host:
            check_host_memory_for(dep, context * sequences)
        return FitRun(dep, context, sequences)
    from ridgeline.llamacpp_fit import FitFailed, default_fit_target_bytes, fit_placement

    given = margin_bytes(args)
    margin = default_fit_target_bytes() if given is None else given
    try:
        placed = fit_placement(dep, settings, context, sequences, _host_template(args, dep),
                               given)
    except FitFailed as failed:
        kept = fitted_run(_no_fit(args), dep, settings, context, sequences, check_host, priced)
        return replace(kept, fit_target_bytes=margin, unplaced=str(failed))
    if default_kept(args, placed, priced):
        kept = fitted_run(_no_fit(args), dep, settings, context, sequences, check_host, priced)
        # where -ngl all holds no sequence either, the answer is "does not fit", and the
        # caution says what --fit would have run instead
        return replace(kept, fit_target_bytes=margin, set_aside=placed)
    if check_host:
        check_host_memory_for(placed, context * sequences)
    return FitRun(placed, context, sequences, margin)


def fit_settings(settings: Any, run: FitRun) -> Any:
    """``settings`` (None: the engine's defaults) for a ``run`` --fit places, with the margin
    it keeps free, so its pool is sized as `fit` sizes it; as they are where --fit does not
    place it."""
    if run.margin_bytes is None:
        return settings
    from ridgeline.memory import EngineSettings

    return replace(settings or EngineSettings(), fit_target_bytes=run.margin_bytes)


def launch_fitted(args: argparse.Namespace, dep: Any, settings: Any,
                  target: int | None = None, check_host: bool = True,
                  priced: bool = True) -> Any:
    """``dep`` at --max-model-len L (``settings.max_model_len``) placed for the -c llama-server
    is started with, as ``fitted_run`` places it: L × the slots whose conversations fit with every
    layer on the GPU, at least one (sim/config.llamacpp_context), or L × ``target`` where
    more. -c is one cache the -np slots share (--kv-unified), so the slots past those that
    fit still run, sharing its cells, and no weight leaves the GPU to make room for them.
    The one sizing rule for -ngl auto typed and for the build's default --fit: `fit` prints
    this -c and -ngl, and `simulate` runs them."""
    return launch_fitted_run(args, dep, settings, target, check_host, priced).deployment


def launch_fitted_run(args: argparse.Namespace, dep: Any, settings: Any,
                      target: int | None = None, check_host: bool = True,
                      priced: bool = True) -> FitRun:
    """``launch_fitted``'s run (``fitted_run``): its deployment, --fit's margin, and the
    placement the build's default would pick where it was set aside."""
    sequences = target or 1
    if auto_layers(args, dep.engine):
        from ridgeline.llamacpp_fit_run import fit_sequences

        sequences = fit_sequences(dep, settings, target, margin_bytes(args))
    return fitted_run(args, dep, settings, settings.max_model_len, sequences, check_host,
                      priced)


def fit_seats(args: argparse.Namespace, run: FitRun, settings: Any, cells: list[int],
              contexts: list[int], max_model_len: int | None = None) -> Any:
    """llama.cpp's max batch at each of ``contexts`` as llama-server's default --fit starts it,
    where ``run`` (the answer's, priced) set that --fit aside for every layer on the GPU or
    --fit found no placement; None where --fit places ``run`` (its own seats are the
    answer). For each context C, the run `fit --max-model-len` ``cells`` [i] starts
    (``launch_fitted_run`` under ``settings``, unpriced, as fit calls it) and its slots under
    --fit's margin (capacity.engine_seats: llamacpp_slots, fit's -np lever): one count for the
    deployment and context, whatever batches decode or prefill are asked. Gives the seats, the
    weights each run keeps on the host, and the settings they were sized under, in decode's
    words (reports.decode.describe_settings)."""
    if run.set_aside is None and not run.unplaced:
        return None
    from ridgeline.capacity import engine_seats
    from ridgeline.cli_pool import engine_pool_settings
    from ridgeline.memory import EngineSettings
    from ridgeline.offload import host_weight_bytes
    from ridgeline.reports.decode import describe_settings

    dep = run.deployment  # every layer on the GPU, as the answer's run
    seats, hosted, described = [], [], ""
    for c, cell in zip(contexts, cells):
        launch = launch_fitted_run(args, dep, replace(settings, max_model_len=cell),
                                   check_host=False, priced=False)
        pool = fit_settings(engine_pool_settings(args, dep), launch)
        seats.append(engine_seats(launch.deployment, c, args.enforce_eager, pool,
                                  max_model_len))
        hosted.append(host_weight_bytes(launch.deployment))
        described = described or describe_settings(pool or EngineSettings(), dep.engine,
                                                   max_model_len)
    return tuple(seats), tuple(hosted), described


def set_aside_caution(args: argparse.Namespace, dep: Any, settings: Any) -> str:
    """simulate's word where --fit at --max-model-len L was set aside for every layer on the
    GPU (the build's default), or found no placement (-ngl auto typed too: llama-server loads
    every layer as given), as decode and prefill say it (FitRun.caution); "" elsewhere (-c 0:
    ``fit_launch``)."""
    if not settings.max_model_len or not auto_layers(args, dep.engine):
        return ""
    return launch_fitted_run(args, dep, settings, check_host=False).caution()


def default_kept(args: argparse.Namespace, placed: Any, priced: bool) -> bool:
    """Whether the build's default --fit placement stays unpriced: it moved weights to the
    host, and a step time needs the host's bandwidth, which no flag gave (the answer is then
    the whole model's verdict, with a hint to give it)."""
    return (priced and not auto_layers(args) and placed.offload is not None
            and not placed.offload.host_bandwidth_bytes_per_s)


def _no_fit(args: argparse.Namespace) -> argparse.Namespace:
    """The flags with -ngl all: every layer on the GPU, as before --fit."""
    return argparse.Namespace(**{**vars(args), "gpu_layers": ALL_LAYERS})


def fitted_context(args: argparse.Namespace, dep: Any, settings: Any) -> tuple[int, Any]:
    """-ngl auto (or the build's default) with no context given: llama-server's -c 0 under
    --fit (the trained context, shrunk to what fits, down to --fit-ctx, before any weight
    leaves the GPU)."""
    from ridgeline.llamacpp_fit import fit_context
    from ridgeline.llamacpp_pool import check_host_memory_for

    margin = getattr(args, "fit_target_mib", None)
    context, placed = fit_context(dep, settings, _host_template(args, dep),
                                  None if margin is None else margin * MIB,
                                  getattr(args, "fit_ctx", None))
    check_host_memory_for(placed, context)
    return context, placed


def fitted_context_run(args: argparse.Namespace, dep: Any, settings: Any) -> FitRun:
    """``fitted_context``'s run (one sequence of the -c --fit chose), with its margin; where
    --fit finds no placement, llama-server's as it then starts: at the -c --fit shrank -c 0 to
    before it failed (llamacpp_fit.unplaced_context), every layer on the GPU as given, no
    margin kept, and why (FitRun.unplaced)."""
    from ridgeline.llamacpp_fit import FitFailed, default_fit_target_bytes, unplaced_context

    given = margin_bytes(args)
    margin = default_fit_target_bytes() if given is None else given
    try:
        context, placed = fitted_context(args, dep, settings)
    except FitFailed as failed:
        return FitRun(replace(dep, offload=None),
                      unplaced_context(dep, getattr(args, "fit_ctx", None)), 1, margin,
                      unplaced=str(failed))
    return FitRun(placed, context, 1, margin)


def fit_launch(args: argparse.Namespace, dep: Any,
               settings: Any) -> tuple[int, Any, str, str] | None:
    """simulate's llama-server under --fit, -ngl auto typed or the build's default alike,
    where it changes what runs: (-c, the deployment placed, how -c was chosen, what --fit
    left undone: FitRun.caution), or None where the whole model stands as with every layer on
    the GPU (it fits; or at --max-model-len L --fit finds no placement, which
    ``set_aside_caution`` says; or, by default only, a weight moved to the host needs
    --host-bandwidth-gbs). No context given: -c 0 shrunk to what fits, or weights moved, or,
    where --fit finds no placement, the -c it shrank to with every layer as given
    (``fitted_context_run``); --max-model-len L: ``launch_fitted``'s -c and placement, those
    `fit` prints."""
    from ridgeline.llamacpp_rope import loaded_n_ctx_train
    from ridgeline.sim.config import llamacpp_context

    if not settings.max_model_len:
        run = fitted_context_run(args, dep, settings)
        context, placed = run.context, run.deployment
        if run.unplaced:
            return context, placed, "--fit", run.caution()
        # -c 0 without --fit is the loaded n_ctx_train; --fit's differs where the launch's
        # YaRN lifts it (llamacpp_fit.fit_resolved_context), and then it changes what runs
        loaded = loaded_n_ctx_train(dep.model, dep.engine, dep.rope) or context
        if (placed.offload is None and context == loaded) or default_kept(args, placed, True):
            return None
        return context, placed, "--fit", ""
    no_fit_ctx(args)
    placed = launch_fitted(args, dep, settings, check_host=False)
    if placed.offload is None:
        return None
    return (placed.offload.fit_cells, placed,
            f"{llamacpp_context(dep, settings, True, margin_bytes(args))[1]}, placed by --fit",
            "")


def no_fit_ctx(args: argparse.Namespace) -> None:
    """--fit-ctx only where the context is left unset (fit and simulate without
    --max-model-len, as llama-server's -c 0)."""
    if getattr(args, "fit_ctx", None) is not None:
        raise InputError("--fit-ctx is the floor --fit shrinks an unset context to (fit and "
                         "simulate without --max-model-len); here the context is given")


def fit_host(args: argparse.Namespace, dep: Any) -> dict[str, Any]:
    """fit_report's ``fit_host`` and ``fit_margin_bytes``: the host llama.cpp's --fit moves
    weights to and its margin, where --fit places ``dep`` (-ngl auto, or the build's
    default), so a lever's run is placed again as `fit` places that run; else none (every
    layer as placed, not fit_report's default)."""
    if not auto_layers(args, dep.engine):
        return {"fit_host": None}
    return {"fit_host": _host_template(args, dep), "fit_margin_bytes": margin_bytes(args)}


def margin_bytes(args: argparse.Namespace) -> float | None:
    """--fit-target in bytes, or None for its default."""
    margin = getattr(args, "fit_target_mib", None)
    return None if margin is None else margin * MIB


def _host_template(args: argparse.Namespace, dep: Any) -> Any:
    """The host the flags describe, for --fit to place weights on."""
    from ridgeline.offload import HostOffload, every_layer_ngl

    host = getattr(args, "host_bandwidth_gbs", None)
    link = getattr(args, "host_link_gbs", None)
    ram = getattr(args, "host_memory_gib", None)
    return HostOffload(every_layer_ngl(dep.model), 0, (host or 0.0) * 1e9,
                       link * 1e9 if link else None, True, ram * GIB if ram else None)
