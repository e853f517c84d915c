"""The command line: parse, call the library, render. Bad input exits 2 with one line."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from ridgeline import __version__
from ridgeline.errors import InputError, shorten, shorten_runs
from ridgeline.render import render
from ridgeline.units import GIB, MIB, parse_count, parse_count_list, require_positive

Handler = Callable[[argparse.Namespace], Any]


def _typed(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """Wrap a parser so argparse shows our one-line message."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


MAX_BATCH = 10**6  # sequences in one step: far beyond any engine's max_num_seqs


def _at_most(value: int, most: int | None, what: str) -> int:
    if most is not None and value > most:
        raise InputError(f"{what} must be at most {most:,}, got {value:,}")
    return value


def _positive_count(what: str, most: int | None = None) -> Callable[[str], int]:
    return _typed(lambda t: _at_most(int(require_positive(parse_count(t, what), what)), most, what))


def _step_tokens(text: str) -> int:
    """A step's token budget; SGLang's -1 (chunked prefill off) named as not modelled."""
    if text.strip() == "-1":
        raise argparse.ArgumentTypeError(
            "-1 is SGLang's --chunked-prefill-size for chunked prefill off, which is not "
            "modelled: give the tokens a prefill step may take (its --max-prefill-tokens, 16384 "
            "by default)")
    return _positive_count("max_num_batched_tokens")(text)


def _count(what: str) -> Callable[[str], int]:
    """A whole number ≥ 0 (a prefix length, a draft length)."""
    return _typed(lambda t: parse_count(t, what))


def _plain_float(text: str, refusal: str) -> float:
    """A number as a user writes one: ASCII, no underscores ("１２" and "1_0" are Python's)."""
    try:
        if not text.isascii() or "_" in text:
            raise ValueError
        return float(text)
    except ValueError:
        raise InputError(f"{refusal}, got {text!r}") from None


def _positive_float(what: str, least: float | None = None,
                    most: float | None = None) -> Callable[[str], float]:
    """A positive number; within [least, most] where given (a plausible figure, not 1e-300
    GB/s or 1e290 GiB)."""
    def parse(text: str) -> float:
        value = float(require_positive(_plain_float(text, f"{what} must be a number"), what))
        if (least is not None and value < least) or (most is not None and value > most):
            raise InputError(f"{what} must be between {least or 0:g} and {most or math.inf:g}, "
                             f"got {value:g}")
        return value

    return _typed(parse)


def _share(what: str) -> Callable[[str], float]:
    """A share or a chance, 0 to 1 (amdahl --fraction): written in ASCII digits,
    -0 read as 0 (it printed as "-0")."""
    def parse(text: str) -> float:
        value = _plain_float(text, f"{what} must be a number between 0 and 1")
        if not 0.0 <= value <= 1.0:  # NaN fails it too
            raise InputError(f"{what} must be between 0 and 1, got {shorten(text)}")
        return value + 0.0

    return _typed(parse)


def _percentile(text: str) -> float:
    """A percentile in percent, as simulate and plan read it: from 1 to below 100 (0.9 would
    be p0.9, not p90)."""
    value = _positive_float("percentile")(text)
    if not 1 <= value < 100:
        raise InputError(f"a percentile in percent, from 1 to below 100 (90 for p90), got "
                         f"{value:g}")
    return value


MAX_MEMORY_GIB = 1e6  # a petabyte: past any one device's or host's memory
GBS_RANGE = (0.1, 1e5)  # GB/s of a memory or a link: a slow DIMM to past any HBM


def _count_list(what: str, most: int | None = None) -> Callable[[str], list[int]]:
    def parse(text: str) -> list[int]:
        values = [_at_most(v, most, what) for v in parse_count_list(text, what)]
        twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
        if twice is not None:
            raise InputError(f"{what} lists {twice:,} twice")
        return values

    return _typed(parse)


def _weight_name(text: str) -> str:
    """A weight format, checked when parsed: a misspelt one fails even where it goes unused."""
    from ridgeline.precision import check_weight_choice

    check_weight_choice(text)
    return text


def _kv_name(text: str) -> str:
    from ridgeline.precision import kv_dtype

    kv_dtype(text)  # 'auto' is an alias
    return text


def _name_list(check: Callable[[str], str]) -> Callable[[str], str]:
    """A comma-separated list of names, each checked; returned as given."""

    def parse(text: str) -> str:
        parts = [part.strip() for part in text.split(",")]
        if not all(parts):
            raise InputError(f"empty name in the list {text!r}")
        for part in parts:
            check(part)
        return text

    return _typed(parse)


def _accelerator_name(text: str) -> str:
    from ridgeline.hardware import resolve_accelerator

    resolve_accelerator(text)
    return text


def _engine_name(text: str) -> str:
    from ridgeline.engines import engine_id

    if "," in text:  # a command that compares engines takes _name_list(_engine_name)
        raise InputError(f"this command runs one engine, got {text!r} (`ridgeline fit` "
                         "compares several)")
    engine_id(text)
    return text


def _not_empty(what: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if not text.strip():
            raise InputError(f"{what} is empty")
        return text

    return _typed(parse)


def _one_accelerator() -> Callable[[str], str]:
    """--gpu where a command answers for one card: a comma list is refused, by name."""
    def parse(text: str) -> str:
        if not text.strip():
            raise InputError("accelerator name is empty")
        if "," in text:
            raise InputError(f"--gpu {text}: this command answers for one accelerator (give one "
                             "--gpu); decode, prefill, roofline and fit take several, "
                             "comma-separated")
        return text

    return _typed(parse)


# -- shared option groups ---------------------------------------------------------------
def _output(p: argparse.ArgumentParser, plot: bool = False) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--explain", action="store_true",
                   help="show each formula with its inputs and their sources")
    if plot:
        p.add_argument("--plot", metavar="FILE",
                       help="also draw it: .png/.svg (needs ridgeline[plot]) or .html")


def _model(p: argparse.ArgumentParser, optional: bool = False) -> None:
    p.add_argument("model", metavar="MODEL", nargs="?" if optional else None,
                   help="catalog alias (llama-3.1-70b), HF id, or path to a config.json"
                   + ("; none: list the bundled models" if optional else ""))
    p.add_argument("--fetch", action="store_true",
                   help="download MODEL's config.json from the Hugging Face Hub")


def _gpu(p: argparse.ArgumentParser, required: bool = True, several: bool = False) -> None:
    g = p.add_argument_group("accelerator")
    g.add_argument("--gpu", required=False, metavar="NAME",
                   type=_not_empty("accelerator name") if several else _one_accelerator(),
                   help="catalog id or name (h100, 'NVIDIA H100 80GB HBM3')" +
                   ("" if required else "; optional") +
                   ("; several, comma-separated, side by side" if several else ""))
    g.add_argument("--gpu-file", metavar="FILE", help="an accelerator record in JSON")
    g.add_argument("--peak-tflops", type=_positive_float("peak TFLOP/s"),
                   help="custom accelerator: dense peak TFLOP/s (with --bandwidth-gbs)")
    g.add_argument("--bandwidth-gbs", type=_positive_float("bandwidth GB/s"),
                   help="custom accelerator: memory bandwidth in GB/s")
    g.add_argument("--gpu-memory-gib", type=_positive_float("GPU memory GiB", most=MAX_MEMORY_GIB),
                   help="memory in GiB: a smaller configuration of --gpu (a 32 GB M1 Max; at "
                   "most the catalog's size), or a custom accelerator's (needed with a model)")
    g.add_argument("--num-gpus", "--tensor-parallel-size", dest="num_gpus", default=1,
                   type=_positive_count("number of GPUs"),
                   help="accelerators in one tensor-parallel group (default 1)")
    p.set_defaults(gpu_required=required)


def engine_sizes(g: Any, llamacpp: bool = True) -> None:
    """The pool's and the scheduler's sizes, under each engine's own name for them (with
    ``llamacpp``, llama.cpp's slots and ubatch too)."""
    g.add_argument("--gpu-memory-utilization", "--mem-fraction-static",
                   "--kv-cache-free-gpu-mem-fraction", dest="gpu_memory_utilization",
                   type=_positive_float("memory fraction"), metavar="F",
                   help="memory share: vLLM of the card, SGLang static, TRT-LLM of what is free")
    g.add_argument("--max-num-seqs", "--max-running-requests", "--max-batch-size",
                   *(("--parallel",) if llamacpp else ()),
                   dest="max_num_seqs", type=_positive_count("max_num_seqs"), metavar="N",
                   help="seats: vLLM, SGLang, TRT-LLM names"
                   + ("; llama.cpp slots (-np)" if llamacpp else ""))
    g.add_argument("--max-num-batched-tokens", "--chunked-prefill-size", "--max-num-tokens",
                   *(("--ubatch-size",) if llamacpp else ()), dest="max_num_batched_tokens",
                   metavar="N", type=_step_tokens,
                   help="tokens per step (the profiled pass)"
                   + ("; llama.cpp n_ubatch (-ub)" if llamacpp else ""))
    g.add_argument("--kv-cache-memory-bytes", "--kv-cache-memory", dest="kv_cache_memory_bytes",
                   metavar="N", type=_positive_count("kv_cache_memory_bytes"),
                   help="vLLM: the KV pool per GPU in bytes (30G = 30 GiB, 30g = 30e9), set "
                   "rather than profiled; gpu_memory_utilization is then ignored")
    g.add_argument("--max-total-tokens", "--kv-cache-max-tokens", dest="max_total_tokens",
                   metavar="N", type=_positive_count("max_total_tokens"),
                   help="SGLang, TensorRT-LLM (kv_cache_config.max_tokens): the most tokens the "
                   "pool holds; the engine keeps the smaller of it and what memory leaves")
    g.add_argument("--block-size", "--page-size", "--tokens-per-block", dest="block_size",
                   type=_positive_count("block size"), metavar="N",
                   help="tokens per KV block/page")


def max_model_len_option(p: Any, help_text: str) -> None:  # a parser or an argument group
    """--max-model-len as every command that takes it parses it (vLLM's name; 32k = 32,000,
    32K = 32,768)."""
    p.add_argument("--max-model-len", type=_positive_count("max model length"), metavar="N",
                   help=help_text)


def _pipeline(p: Any) -> None:  # a parser or an argument group
    p.add_argument("--pipeline-parallel-size", "-pp", dest="pipeline_parallel_size", metavar="PP",
                   type=_positive_count("pipeline-parallel size"),
                   help="vLLM/SGLang/TensorRT-LLM: stages of layers, each a tensor-parallel "
                   "group of --num-gpus (PP × TP GPUs in all; default 1); llama.cpp splits "
                   "layers over --num-gpus itself")


def pipeline_size(args: argparse.Namespace, engine: str | None) -> int:
    """The pipeline stages asked for (1 by default), refused for llama.cpp, whose layer split
    is --num-gpus with -sm layer."""
    pp = getattr(args, "pipeline_parallel_size", None)
    if pp is None:
        return 1
    if engine is not None and engine.startswith("llama.cpp"):
        raise InputError("--pipeline-parallel-size is vLLM's, SGLang's and TensorRT-LLM's: "
                         "llama.cpp splits the layers over --num-gpus itself (-sm layer, its "
                         "default)")
    return int(pp)


def _engine(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", type=_typed(_engine_name),
                   help="engine whose calibrated profile gives the expectation (default vllm; "
                   "llama.cpp-metal on Apple silicon, llama.cpp-rocm on the AMD GPUs vLLM leaves "
                   "out): vllm, sglang, trtllm, llama.cpp-cuda, "
                   "llama.cpp-metal, …")
    p.set_defaults(engine_by_accelerator=True)
    p.add_argument("--profile", metavar="FILE", help="profiles from `ridgeline calibrate`")
    _split_mode(p)
    p.add_argument("--flash-attn", choices=["on", "off", "auto"],
                   help="llama.cpp -fa (default auto: on where supported); off costs the "
                   "attention scores written to memory and read back")


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
                   type=_count("--n-cpu-moe layers"),
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
    from ridgeline.offload import HostOffload

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
    return HostOffload(layers + 1 if ngl is None else ngl,
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
    from ridgeline.offload import HostOffload

    host = getattr(args, "host_bandwidth_gbs", None)
    link = getattr(args, "host_link_gbs", None)
    ram = getattr(args, "host_memory_gib", None)
    return HostOffload(dep.model.num_layers + 1, 0, (host or 0.0) * 1e9,
                       link * 1e9 if link else None, True, ram * GIB if ram else None)


def _formats(p: argparse.ArgumentParser) -> None:
    p.add_argument("--weights", metavar="FMT", type=_typed(_weight_name),
                   help="weight format (bf16, fp8, awq-int4, nvfp4, mxfp4, q4_k_m, …, or the "
                   "GGUF mix mxfp4_moe); default: as the checkpoint stores them")
    p.add_argument("--kv-dtype", "--kv-cache-dtype", dest="kv_dtype", metavar="D", type=_typed(_kv_name),
                   help="KV-cache dtype (bf16, fp8, q8_0, …); default: the model's dtype "
                   "(llama.cpp: f16)")


def _deployment_flags(p: argparse.ArgumentParser, several: bool = False) -> None:
    """MODEL on its hardware: the accelerator and its count (with ``several``, cards side by
    side, comma-separated), the pipeline stages, the weight and KV formats."""
    _model(p)
    _gpu(p, several=several)
    _pipeline(p)
    _formats(p)


# -- resolution helpers --------------------------------------------------------------
def load_model(args: argparse.Namespace) -> Any:
    from ridgeline.catalog import resolve_model

    if getattr(args, "fetch", False):
        from pathlib import Path

        from ridgeline.config_reader import spec_from_hf_config
        from ridgeline.hub import fetch_config

        if args.model.endswith(".json") or Path(args.model).expanduser().exists():
            raise InputError(f"--fetch downloads a Hub id's config.json; {args.model} is a "
                             "local file: drop --fetch")

        return spec_from_hf_config(fetch_config(args.model), name=args.model)
    return resolve_model(args.model, fetchable=hasattr(args, "fetch"))


def load_accelerator(args: argparse.Namespace) -> Any:
    from ridgeline.hardware import (
        custom_accelerator,
        load_accelerator_file,
        resolve_accelerator,
        with_memory_gib,
    )

    if args.gpu_file:
        given = [flag for flag, value in (("--gpu", args.gpu), ("--peak-tflops", args.peak_tflops),
                                          ("--bandwidth-gbs", args.bandwidth_gbs),
                                          ("--gpu-memory-gib", args.gpu_memory_gib)) if value]
        if given:
            raise InputError(f"--gpu-file describes the accelerator; drop {', '.join(given)}")
        return load_accelerator_file(args.gpu_file)
    if args.peak_tflops or args.bandwidth_gbs:
        if not (args.peak_tflops and args.bandwidth_gbs):
            raise InputError("a custom accelerator needs both --peak-tflops and --bandwidth-gbs")
        if args.gpu and accelerator_known(args.gpu):
            raise InputError(f"--gpu {args.gpu} is a catalog accelerator; --peak-tflops and "
                             "--bandwidth-gbs describe a custom one (name it with --gpu "
                             "something else, or drop them)")
        if args.gpu_memory_gib is None and getattr(args, "model", None):
            raise InputError("a custom accelerator holding a model needs --gpu-memory-gib, its "
                             "memory in GiB (an H100's: 80)")
        # without a model only the peak and bandwidth are read: the memory is a placeholder
        return custom_accelerator(args.gpu or "custom", args.peak_tflops, args.bandwidth_gbs,
                                  args.gpu_memory_gib or 80.0)
    if not args.gpu:
        if args.gpu_required:
            raise InputError("name an accelerator with --gpu (see `ridgeline hardware`)")
        if args.gpu_memory_gib:
            raise InputError("--gpu-memory-gib sizes an accelerator named with --gpu")
        return None
    acc = resolve_accelerator(args.gpu)
    if args.gpu_memory_gib:  # another memory configuration of the same part (a 32 GB M1 Max)
        acc, caution = with_memory_gib(acc, args.gpu_memory_gib)
        said = vars(args).setdefault("cautions_said", [])  # a command may load it twice
        if caution and caution not in said:
            said.append(caution)
            print(f"ridgeline: caution: {caution}", file=sys.stderr)
    return acc


def load_deployment(args: argparse.Namespace, model: Any = None) -> Any:
    acc = load_accelerator(args)
    if acc is None:
        return None
    from ridgeline.engines import engine_id

    given = getattr(args, "engine", None)  # engine-free commands leave it out
    engine = engine_id(given) if isinstance(given, str) else None
    return build_deployment(args, model or load_model(args), acc, engine)


def build_deployment(args: argparse.Namespace, model: Any, acc: Any, engine: str | None,
                     expert_parallel: bool = False) -> Any:
    """The deployment the flags describe on ``acc`` for ``engine`` (None: no engine named):
    --num-gpus × --pipeline-parallel-size cards, the formats, llama.cpp's knobs."""
    from ridgeline.deployment import Deployment

    pp = pipeline_size(args, engine)
    return Deployment.build(model, acc, getattr(args, "weights", None),
                            getattr(args, "kv_dtype", None), args.num_gpus * pp, pp, engine=engine,
                            expert_parallel=expert_parallel,
                            flash_attention=flash_attention(args, engine or "vllm"),
                            offload=host_offload(args, model, engine),
                            split_mode=getattr(args, "split_mode", None))


def accelerator_known(name: str) -> bool:
    from ridgeline.hardware import resolve_accelerator

    try:
        resolve_accelerator(name)
    except InputError:
        return False
    return True


def accelerator_names(args: argparse.Namespace) -> list[str]:
    """--gpu read as a list: decode and fit put several cards side by side."""
    names = [name.strip() for name in (args.gpu or "").split(",")]
    if len(names) > 1 and not all(names):
        raise InputError(f"--gpu {args.gpu!r} has an empty name between its commas")
    if len(names) > 1:
        from ridgeline.hardware import resolve_accelerator

        ids = [resolve_accelerator(name).id for name in names]
        for i, card in enumerate(ids):
            if card in ids[:i]:
                raise InputError(f"an accelerator is named twice in --gpu: "
                                 f"{names[ids.index(card)]!r} and {names[i]!r} are both {card}")
    return names


def one_card(args: argparse.Namespace, name: str) -> argparse.Namespace:
    """The arguments with --gpu narrowed to one of the cards a comparison names (and an
    unqualified 'llama.cpp' to that card's build)."""
    one = argparse.Namespace(**{**vars(args), "gpu": name})
    asked = getattr(args, "engine_asked", None)
    if asked is not None:
        one.engine = llamacpp_builds_for(one, asked)
    return one


def card_id(name: str) -> str:
    """The catalog id of a card a comparison names ('h100' is h100-sxm): what its rows and
    a card left out of them are called."""
    from ridgeline.hardware import resolve_accelerator

    return resolve_accelerator(name).id


def _named_accelerator(args: argparse.Namespace) -> Any:
    """The accelerator the command names, or None (a bad --gpu or --gpu-file is the
    command's to report, with its own words)."""
    from ridgeline.hardware import load_accelerator_file, resolve_accelerator

    try:
        path = getattr(args, "gpu_file", None)
        if isinstance(path, list):  # calibrate takes several
            path = path[0] if path else None
        if path:
            return load_accelerator_file(path)
        if getattr(args, "gpu", None):
            return resolve_accelerator(accelerator_names(args)[0])
    except InputError:
        pass
    return None


def _vendor(args: argparse.Namespace) -> str:
    """The vendor of the accelerator the command names, or ""."""
    acc = _named_accelerator(args)
    return (acc.vendor or "") if acc is not None else ""


def default_engine(args: argparse.Namespace) -> str:
    """The engine when none is named: llama.cpp's Metal build on Apple silicon (vLLM has no
    Metal backend), its ROCm build on the AMD GPUs vLLM's ROCm build leaves out (Vega 20,
    MI100, RDNA2), vLLM elsewhere."""
    from ridgeline.deployment import VLLM_NO_ROCM_FAMILIES

    acc = _named_accelerator(args)
    if acc is None:
        return "vllm"
    if acc.vendor == "apple":
        return "llama.cpp-metal"
    if acc.vendor == "amd" and acc.family in VLLM_NO_ROCM_FAMILIES:
        return "llama.cpp-rocm"
    return "vllm"


def llamacpp_builds_for(args: argparse.Namespace, asked: Any) -> Any:
    """--engine as given (a name, or a repeated flag's list): an unqualified 'llama.cpp' as
    the build for the accelerator's vendor (Metal on a Mac, ROCm on AMD), as the default
    engine picks; a named build as given."""
    from ridgeline.engines import llamacpp_build, names_plain_llamacpp

    names = asked if isinstance(asked, list) else [asked]
    if not any(isinstance(n, str) and names_plain_llamacpp(n) for n in names):
        return asked
    vendor = _vendor(args)
    built = [llamacpp_build(n, vendor) for n in names]
    return built if isinstance(asked, list) else built[0]


def flash_attention(args: argparse.Namespace, engine: str) -> bool:
    """--flash-attn, llama.cpp's switch: on unless turned off; refused for other engines."""
    flag = getattr(args, "flash_attn", None)
    if flag and not engine.startswith("llama.cpp"):
        raise InputError(f"--flash-attn is llama.cpp's switch; {engine} has no such flag")
    return bool(flag != "off")


# -- handlers ----------------------------------------------------------------------------


def load_profile(args: argparse.Namespace) -> Any:
    from ridgeline.engines import chosen_profile

    profile = chosen_profile(args.engine, getattr(args, "profile", None))
    return profile.without_cuda_graphs() if getattr(args, "enforce_eager", False) else profile


def engine_settings(args: argparse.Namespace) -> Any:
    from ridgeline.memory import EngineSettings

    return EngineSettings(
        gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size, enforce_eager=args.enforce_eager,
        usage=args.usage or "serve",
        engine_version=getattr(args, "engine_version", None),
        async_scheduling=not getattr(args, "no_async_scheduling", False),
        prefix_caching=getattr(args, "prefix_caching", None),
        language_model_only=getattr(args, "language_model_only", False),
        flash_attn=getattr(args, "flash_attn", None) != "off",
        swa_full_tokens_ratio=getattr(args, "swa_full_tokens_ratio", None),
        backend=getattr(args, "backend", None),
        warm_compile_cache=getattr(args, "warm_compile_cache", False),
        kv_cache_memory_bytes=getattr(args, "kv_cache_memory_bytes", None),
        max_total_tokens=getattr(args, "max_total_tokens", None))


# the options that write a file, by attribute: none may name a file the command reads
# (calibrate -o over its rows, simulate --export over its --trace, --plot over --gpu-file)
OUTPUT_OPTIONS = {"output": "-o", "plot": "--plot", "export": "--export",
                  "emit_measurements": "--emit-measurements"}


def refuse_writing_over_input(args: argparse.Namespace) -> None:
    """Refuse, before any work, an output that is one of the command's inputs: every other
    option's value that names a file (``file:PATH`` as a length takes it, a model's folder
    as its config.json) is compared with it as the file system sees them, so that
    ``./sub/../rows.csv``, a link and a hard link are the same file."""
    given = vars(args)
    for key, flag in OUTPUT_OPTIONS.items():
        output = given.get(key)
        if not isinstance(output, str):
            continue
        for other, value in given.items():
            if other in OUTPUT_OPTIONS:
                continue
            for name in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(name, str) and _same_file(output, name):
                    raise InputError(f"{flag} {output} is the input {name}: not "
                                     "overwriting it (choose another name)")


def _same_file(output: str, name: str) -> bool:
    from pathlib import Path

    path = Path(name.removeprefix("file:")).expanduser()
    try:
        if path.is_dir():  # a model's folder is read as its config.json
            path = path / "config.json"
        return path.exists() and os.path.samefile(Path(output).expanduser(), path)
    except (OSError, ValueError):  # no such output yet, a name too long, a NUL in it
        return False


@dataclass(frozen=True)
class WroteFile:
    path: str
    what: str
    steps: tuple[Any, ...] = ()
    facts: tuple[tuple[str, Any], ...] = ()  # what --json adds: counts, the opening view

    def to_dict(self) -> dict[str, Any]:
        return {"wrote": self.path, "what": self.what, **dict(self.facts)}

    def text_lines(self) -> list[str]:
        if "\n" in self.what:
            return self.what.splitlines()
        return [f"wrote {self.path}: {self.what}"]


# -- the parser --------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2, a value that starts like
    a negative number ('-1,2', '-0.5') is a value to check, not an unknown option, and a long
    option is spelled whole: '--bat 8' is not --batch (nor llama.cpp's --swa-full SGLang's
    --swa-full-tokens-ratio), and a later option cannot change what an old spelling means."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # each subcommand's parser is one of these
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\.?\d[\d.,eE+-]*$")

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"ridgeline: error: {shorten_runs(message)} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ridgeline",
        description="LLM serving arithmetic from a config.json and a spec sheet.",
    )
    parser.add_argument("--version", action="version", version=f"ridgeline {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")


    from ridgeline import (
        cli_arithmetic,
        cli_data,
        cli_fit,
        cli_observe,
        cli_plan,
        cli_simulate,
    )
    from ridgeline.cli_companion import add_companion_commands

    for module in (cli_arithmetic, cli_fit, cli_simulate, cli_plan, cli_observe, cli_data):
        module.register(sub)

    add_companion_commands(sub, _output, _typed)
    return parser


def _join_negative_values(argv: Sequence[str]) -> list[str]:
    """'--max-model-len -8k' as '--max-model-len=-8k': argparse takes a value that starts
    with '-' and is not a plain number for an option, so the flag's own check, which says
    what is wrong with a negative size, would never see it."""
    out: list[str] = []
    for token in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] \
                and re.fullmatch(r"-\.?\d.*", token):
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(
        _join_negative_values(sys.argv[1:] if argv is None else argv))
    if extra:  # name the command whose --help lists what it takes
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        owner = commands.choices.get(getattr(args, "command", None) or "", parser)
        owner.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        if getattr(args, "engine_by_accelerator", False) and args.engine is None:
            args.engine = default_engine(args)
        if getattr(args, "engine", None) is not None:
            args.engine_asked = args.engine  # a comparison picks each card's llama.cpp build
            args.engine = llamacpp_builds_for(args, args.engine)
        if getattr(args, "plot", None):
            from ridgeline.plots import check_target

            check_target(args.plot)
        refuse_writing_over_input(args)
        report = args.handler(args)
        print(render(report, as_json=args.json, explain=args.explain,
                     input_cautions=vars(args).get("cautions_said", ())))
        if getattr(args, "plot", None):  # after the report: a chart that cannot be drawn
            from ridgeline.plots import save  # (or a missing extra) leaves the report standing
            from ridgeline.reports.charts import chart_for

            chart = chart_for(report)
            save(chart, args.plot)
            print(f"wrote {args.plot}: {chart.title}", file=sys.stderr)  # stdout: the report
        failure = getattr(report, "failure", "")
        if failure:  # the report stands, and the run still fails (validate --strict)
            print(f"ridgeline: error: {failure}", file=sys.stderr)
            return 2
        if getattr(report, "exit_status", 0):  # the report stands, and its answer is no
            return int(report.exit_status)  # (plan: no deployment meets the SLO): exit 1
    except (InputError, ValueError) as exc:
        print(f"ridgeline: error: {shorten_runs(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a path the command was given: too long, a loop, unwritable
        where = f"{shorten(str(exc.filename))}: " if exc.filename else ""
        print(f"ridgeline: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except RecursionError:  # json refuses nothing for depth; Python's stack does
        print("ridgeline: error: an input file is nested too deeply to be a config, record, "
              "profile or metrics file", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ridgeline: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, not bad input: one line, exit 1 (RIDGELINE_DEBUG=1 re-raises)
        if os.environ.get("RIDGELINE_DEBUG"):
            raise
        print(f"ridgeline: internal error ({type(exc).__name__}: {exc}); please report it, "
              "with RIDGELINE_DEBUG=1 for the traceback", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
