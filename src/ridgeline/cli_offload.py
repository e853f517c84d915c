"""CLI: llama.cpp's layer placement — -sm, the partial offload flags (-ngl, --n-cpu-moe,
the host's memory and link) and --fit's (-ngl auto, --fit-target, --fit-ctx) — read into a
``HostOffload`` and placed on a deployment."""

from __future__ import annotations

import argparse
from typing import Any

from ridgeline.cli_types import (
    GBS_RANGE,
    MAX_MEMORY_GIB,
    _count,
    _positive_count,
    _positive_float,
    _typed,
)
from ridgeline.errors import InputError
from ridgeline.units import COUNT_EXAMPLES, GIB, MIB


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
                   "picks, its default since Dec 2025. Default here: all")
    g.add_argument("--fit-target", "-fitt", dest="fit_target_mib", metavar="MiB",
                   type=_count("--fit-target MiB"),
                   help="with -ngl auto: the memory --fit leaves free (llama.cpp default 1024)")
    g.add_argument("--fit-ctx", "-fitc", dest="fit_ctx", metavar="N",
                   type=_positive_count("--fit-ctx"),
                   help="with -ngl auto and no context given (llama-server's -c 0): the "
                   "shortest context --fit shrinks the trained one to (default 4096)")
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
                   "PCIe 3.0 x8): prompt steps copy host weights over it")
    g.add_argument("--host-memory-gib", type=_positive_float("host memory GiB", most=MAX_MEMORY_GIB),
                   metavar="GiB",
                   help="the host's RAM: refuse a split whose host weights and cache overflow it")
    g.add_argument("--output-layer-last", action="store_true",
                   help="builds before llama.cpp PR #18148 (Dec 2025) and ik_llama.cpp: -ngl N "
                   "is the last N layers; the output layer stays on the host unless N exceeds "
                   "the layer count")


AUTO_LAYERS, ALL_LAYERS = "auto", "all"  # -ngl's words


def _gpu_layers(text: str) -> int | str:
    """-ngl: a count, 'all', or 'auto' (llama.cpp's --fit; -1 in its parser)."""
    word = text.strip().lower()
    if word in (AUTO_LAYERS, "-1"):
        return AUTO_LAYERS
    if word == ALL_LAYERS:
        return ALL_LAYERS
    if not word.isdigit():
        raise InputError(f"-ngl takes a number of layers (0, 1, 2, …), auto (or -1) or all; "
                         f"got {text!r}")
    return int(word)


def auto_layers(args: argparse.Namespace) -> bool:
    """Whether -ngl auto asks for llama.cpp's --fit placement."""
    return getattr(args, "gpu_layers", None) == AUTO_LAYERS


def host_offload(args: argparse.Namespace, model: Any, engine: str | None) -> Any:
    """The weights' split between the GPU and host memory the offload flags ask for, or None
    (every weight on the GPU, and for -ngl auto until ``fitted`` places them)."""
    from ridgeline.offload import HostOffload, every_layer_ngl

    ngl, experts = getattr(args, "gpu_layers", None), getattr(args, "n_cpu_moe", None)
    if ngl == ALL_LAYERS and not (engine or "vllm").startswith("llama.cpp"):
        raise InputError(f"-ngl is llama.cpp's; {engine or 'vllm'} keeps every weight on the "
                         "GPU without it")
    every_expert = getattr(args, "cpu_moe", False)
    if getattr(args, "fit_target_mib", None) is not None and not auto_layers(args):
        raise InputError("--fit-target is the margin of llama.cpp's --fit: give -ngl auto")
    if getattr(args, "fit_ctx", None) is not None and not auto_layers(args):
        raise InputError("--fit-ctx is the floor of llama.cpp's --fit: give -ngl auto")
    if ngl == AUTO_LAYERS:
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
        given = [flag for flag, attr in (("--host-bandwidth-gbs", "host_bandwidth_gbs"),
                                         ("--host-link-gbs", "host_link_gbs"),
                                         ("--host-memory-gib", "host_memory_gib"),
                                         ("--output-layer-last", "output_layer_last"))
                 if getattr(args, attr, None)]
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


def fitted(args: argparse.Namespace, dep: Any, settings: Any, context: int,
           sequences: int, check_host: bool = True) -> Any:
    """``dep`` placed as llama.cpp's --fit places it for ``sequences`` × ``context`` cells,
    where -ngl auto asks for that, else as it is; either way a host share (weights and the
    host layers' cache) that overflows --host-memory-gib is refused, unless ``check_host`` is
    False (fit checks it at the -c it prints)."""
    from ridgeline.llamacpp_pool import check_host_memory_for

    if not auto_layers(args):
        if check_host:
            check_host_memory_for(dep, context * sequences)
        return dep
    from ridgeline.llamacpp_fit import fit_placement

    margin = getattr(args, "fit_target_mib", None)
    placed = fit_placement(dep, settings, context, sequences, _host_template(args, dep),
                           None if margin is None else margin * MIB)
    if check_host:
        check_host_memory_for(placed, context * sequences)
    return placed


def fitted_context(args: argparse.Namespace, dep: Any, settings: Any) -> tuple[int, Any]:
    """-ngl auto with no context given: llama-server's -c 0 under --fit (the trained context,
    shrunk to what fits, down to --fit-ctx, before any weight leaves the GPU)."""
    from ridgeline.llamacpp_fit import fit_context
    from ridgeline.llamacpp_pool import check_host_memory_for

    margin = getattr(args, "fit_target_mib", None)
    context, placed = fit_context(dep, settings, _host_template(args, dep),
                                  None if margin is None else margin * MIB,
                                  getattr(args, "fit_ctx", None))
    check_host_memory_for(placed, context)
    return context, placed


def no_fit_ctx(args: argparse.Namespace) -> None:
    """--fit-ctx only where the context is left unset (fit and simulate without
    --max-model-len, as llama-server's -c 0)."""
    if getattr(args, "fit_ctx", None) is not None:
        raise InputError("--fit-ctx is the floor --fit shrinks an unset context to (fit and "
                         "simulate without --max-model-len); here the context is given")


def _host_template(args: argparse.Namespace, dep: Any) -> Any:
    """The host the flags describe, for --fit to place weights on."""
    from ridgeline.offload import HostOffload, every_layer_ngl

    host = getattr(args, "host_bandwidth_gbs", None)
    link = getattr(args, "host_link_gbs", None)
    ram = getattr(args, "host_memory_gib", None)
    return HostOffload(every_layer_ngl(dep.model), 0, (host or 0.0) * 1e9,
                       link * 1e9 if link else None, True, ram * GIB if ram else None)
