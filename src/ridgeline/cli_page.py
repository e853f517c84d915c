"""CLI: `ridgeline page`, the interactive roofline page with batch and context sliders."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ridgeline.cli import _output
from ridgeline.cli_output_files import WroteFile
from ridgeline.cli_types import (
    _accelerator_name,
    _count_list,
    _engine_name,
    _kv_name,
    _name_list,
    _not_empty,
    _typed,
    _weight_name,
)
from ridgeline.errors import DoesNotFit, InputError
from ridgeline.served_model import DEFAULT_WEIGHTS_ENTRY
from ridgeline.units import COUNT_EXAMPLES


def cmd_page(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from ridgeline.catalog import resolve_model
    from ridgeline.cli_data import _register_gpu_files
    from ridgeline.page import (
        DEFAULT_GPUS,
        fit_runs_note,
        host_only,
        opening_facts,
        opening_steps,
        page_data,
        page_html,
    )
    if args.model is not None and not args.model.strip():
        raise InputError("model name is empty (leave MODEL out for the three default models)")
    # --json prints the page's data; the HTML is written where -o asks, or unasked without
    # --json (its default name): a JSON answer leaves no file behind that nobody asked for
    output = args.output if args.output is not None or args.json else DEFAULT_OUTPUT
    if output is not None:
        _check_page_output(output)
    models = [args.model] if args.model else ["llama-3.1-70b", "llama-3.1-8b", "gpt-oss-120b"]
    for m in models:  # an unknown name said as itself, not as "no combination computes"
        resolve_model(m, fetchable=False)
    # each --gpu-file's record offered by its id, as validate and calibrate register theirs;
    # beside --gpu's cards where both are given, alone where --gpu is not
    files = list(_register_gpu_files(args, "the picker would offer one card twice")[0]) \
        if args.gpu_file else []
    gpus = [g.strip() for g in args.gpus.split(",")] if args.gpus else \
        [] if files else list(DEFAULT_GPUS)
    gpus += files
    counts = list(args.counts or _default_counts(gpus))
    defaulted = args.engine is None
    if defaulted:
        args.engine = _default_engine(gpus, args.engine_version)
    from ridgeline.cli_engine import checked_engine_version
    from ridgeline.engines import engine_id

    # fit's check of the release (or build), against the engine drawn, before any pricing
    version = checked_engine_version(args.engine_version, engine_id(args.engine))
    gguf = str(args.engine).startswith("llama.cpp")  # GGUF files and llama.cpp's cache types
    offered = f"{DEFAULT_WEIGHTS_ENTRY},q8_0,q4_k_m" if gguf else "as stored,fp8,awq-int4"
    weights = [w.strip() for w in (args.weights or offered).split(",")]
    kvs = [k.strip() for k in (args.kv_dtypes or ("f16,q8_0" if gguf else "bf16,fp8")).split(",")]
    for flag, values, key in (("--gpu", gpus, _gpu_key), ("--weights", weights, _weights_key),
                              ("--kv-dtypes", kvs, _kv_key)):  # --counts refuses its own
        _refuse_twice(flag, values, key)
    # an unqualified 'llama.cpp' is each card's build, as in the comparisons
    profiles = None
    if args.profile:  # a user's calibrated profiles draw the expectation
        from ridgeline.engines import load_profile_file

        profiles = load_profile_file(args.profile)
        asked = engine_id(args.engine)
        if not any(name == asked or (asked.startswith("llama.cpp")
                                     and name.startswith("llama.cpp")) for name in profiles):
            raise InputError(f"{args.profile} holds no profile for {asked} (it has "
                             f"{', '.join(sorted(profiles))}): calibrate on {asked} rows, or "
                             "name one of those with --engine")
    data = page_data(models, gpus, counts, weights, kvs,
                     getattr(args, "engine_asked", None) or args.engine, profiles, version)
    running = [key for key, c in data["combos"].items() if any(any(row) for row in c["fits"])]
    if not running:
        hosted = fit_runs_note(data)  # llama.cpp: --fit's runs with weights on the host
        if hosted:
            raise InputError(f"nothing the page can price: none of the "
                             f"{len(data['combos'])} deployments runs a conversation with "
                             "every layer on the GPU at any of the page's contexts; " + hosted)
        raise DoesNotFit(f"does not fit: none of the {len(data['combos'])} deployments holds "
                         "one conversation at any of the page's contexts (more or larger GPUs, "
                         "or a smaller weight format)")
    if output is not None:
        try:
            Path(output).write_text(page_html(data, "ridgeline: the roofline"), "utf-8")
        except OSError as exc:
            raise InputError(f"cannot write {output}: {exc}") from None
    left = data["left_out"]
    hosts = sum(host_only(c) for c in data["combos"].values())  # counted, not priced
    idle = len(data["combos"]) - len(running) - hosts
    idled = [*([f"{idle} of them hold no conversation at any context"] if idle else []),
             *([f"{hosts} of them run conversations only with weights on the host, under "
                "llama-server's default --fit: counted, not priced"] if hosts else [])]
    drawn = sorted({str(c["engine"]) for c in data["combos"].values()})
    # a llama.cpp build drawn unasked is said, as decode says it (a V100: vLLM 0.32 runs nothing)
    said = (f" on {' and '.join(drawn)} (the cards' default engine, as decode picks it)"
            if defaulted and args.engine != "vllm" else "")
    return WroteFile(output, f"{len(data['combos'])} deployments{said}"
                     + (f" ({'; '.join(idled)})" if idled else "")
                     + (", batch and context sliders; open it in any browser (offline)"
                        if output is not None else ": the page's data under 'page', no HTML "
                        "written (-o FILE.html writes it)")
                     + (f"; {len(left)} picker combination{'s' if len(left) > 1 else ''} "
                        f"cannot run (the page says why; the first, "
                        f"{next(iter(left)).replace('|', ' ')}: {next(iter(left.values()))})"
                        if left else ""), opening_steps(data),
                     (("deployments", len(data["combos"])), ("holding_none", idle),
                      *((("host_only", hosts),) if hosts else ()), ("left_out", len(left)),
                      *opening_facts(data),
                      ("page", data)))  # what the HTML embeds as PAGE, every number on it


def _refuse_twice(flag: str, values: list[str], key: Callable[[str], str]) -> None:
    """Refuse one card, format or dtype given twice, by one name or two of its names ('h100'
    and 'h100-sxm', 'fp8' and 'FP8', 'bf16' and 'bfloat16'): each would be a second picker
    entry, and a second row of every table, for one deployment."""
    seen: dict[str, str] = {}
    for value in values:
        first = seen.get(key(value))
        if first is None:
            seen[key(value)] = value
        else:
            names = value if first == value else f"{first}, {value}"
            raise InputError(f"{flag} names one {_WHAT[flag]} twice ({names}): one of them "
                             "is enough")


_WHAT = {"--gpu": "accelerator", "--weights": "weight format", "--kv-dtypes": "KV dtype"}


def _gpu_key(name: str) -> str:
    from ridgeline.hardware import resolve_accelerator

    return resolve_accelerator(name).id


def _weights_key(name: str) -> str:
    """One key for every name of one entry: the default entry, the stored formats, a GGUF mix,
    a weight format (its record's id)."""
    from ridgeline.catalog import normalise
    from ridgeline.precision import is_stored_format, weight_format, weight_mixes

    if name == DEFAULT_WEIGHTS_ENTRY:
        return name
    if is_stored_format(name):
        return "as stored"
    if normalise(name) in weight_mixes():
        return normalise(name)
    return weight_format(name).id


def _kv_key(name: str) -> str:
    from ridgeline.precision import kv_dtype

    return kv_dtype(name).id


def _check_page_output(output: str) -> None:
    """The page is HTML: refuse another suffix, and an existing file that is not a page
    ridgeline wrote (a profile or a CSV would be lost), before minutes of computing."""
    from pathlib import Path

    out = Path(output).expanduser()
    if out.suffix.lower() not in (".html", ".htm"):
        raise InputError(f"-o takes an .html file (the page is HTML), got {output!r}")
    if not out.exists():
        return
    head = b""
    try:  # a folder, a device or a pipe is no page, and is not opened: a FIFO's open waits
        if out.is_file():
            with out.open("rb") as f:
                head = f.read(200)
    except OSError as exc:
        raise InputError(f"cannot read {output}: {exc}") from None
    if not (out.is_file() and head.lower().startswith(b"<!doctype html>")
            and b"<title>ridgeline" in head):
        raise InputError(f"-o {output} exists and is not a page ridgeline wrote: not "
                         "overwriting it (remove it or choose another name)")


DEFAULT_OUTPUT = "roofline.html"  # the page written where no -o names one, without --json


def _page_weights(text: str) -> str:
    """One --weights entry: a weight format fit's --weights takes, or the default entry."""
    return text if text == DEFAULT_WEIGHTS_ENTRY else _weight_name(text)


def register(sub: Any) -> None:
    from ridgeline.cli_engine import engine_version_flag

    p = sub.add_parser("page", help="an interactive roofline page with batch/context sliders")
    p.add_argument("model", nargs="?", metavar="MODEL",
                   help="catalog model (default: llama-3.1-70b, llama-3.1-8b, gpt-oss-120b)")
    p.add_argument("--gpu", dest="gpus", metavar="GPU", type=_name_list(_accelerator_name),
                   help="accelerators to offer, comma-separated (default: h100-sxm, "
                   "h200-sxm, b200, a100-sxm-80gb, l40s, mi300x)")
    # plan's spelling of its candidate cards, read as --gpu; --help shows the one
    p.add_argument("--gpus", dest="gpus", type=_name_list(_accelerator_name),
                   help=argparse.SUPPRESS)
    p.add_argument("--gpu-file", action="append", metavar="FILE",
                   type=_not_empty("accelerator file path"),
                   help="an accelerator record in JSON (a probed one from `ridgeline measure`, "
                   "`hardware --json`'s form), offered by its id beside --gpu's cards, or alone "
                   "where --gpu is not given; repeatable")
    p.add_argument("--counts", type=_count_list("accelerator count", examples=COUNT_EXAMPLES),
                   help="accelerator counts to offer (default 1,2,4,8; 1 where every card is "
                   "Apple silicon, which runs as one device)")
    p.add_argument("--weights", type=_name_list(_page_weights),
                   help=f"weight formats to offer, each as fit's --weights reads it, and "
                   f"'{DEFAULT_WEIGHTS_ENTRY}', what fit reads with none (default: as stored, "
                   f"fp8, awq-int4; for llama.cpp {DEFAULT_WEIGHTS_ENTRY}, q8_0, q4_k_m: there "
                   f"'{DEFAULT_WEIGHTS_ENTRY}' is the GGUF llama.cpp runs the checkpoint as, "
                   "ggml-org's mxfp4_moe for gpt-oss, and 'as stored' convert_hf_to_gguf.py's "
                   "own output, BF16 from a bf16 checkpoint)")
    p.add_argument("--kv-dtypes", type=_name_list(_kv_name),
                   help="KV dtypes to offer (default: bf16, fp8; for llama.cpp f16, q8_0)")
    p.add_argument("--engine", type=_typed(_engine_name),
                   help="the engine whose calibrated expectation and pool the page draws "
                   "(default vllm; llama.cpp, each card's build, where vLLM runs on none of "
                   "the cards: Apple silicon, as decode defaults them)")
    engine_version_flag(p, "start-up floors and memory rules to follow (a V100 runs under "
                        "vLLM before 0.20, an fp8 cache on a T4 from 0.12 to 0.23)")
    p.add_argument("--profile", metavar="FILE", type=_not_empty("profile path"),
                   help="engine profiles from `ridgeline calibrate` (default: the bundled ones)")
    p.add_argument("-o", "--output", type=_not_empty("output path"),
                   help=f"the HTML file to write (default {DEFAULT_OUTPUT}; with --json none "
                   "unless given: --json prints the page's data)")
    _output(p)
    p.set_defaults(handler=cmd_page)


DEFAULT_COUNTS = (1, 2, 4, 8)


def _default_engine(gpus: list[str], engine_version: str | None = None) -> str:
    """The engine the page draws unasked: vllm, unless every card offered is one the other
    commands default to a llama.cpp build on (cli_load.default_engine: Metal on Apple silicon,
    ROCm on the AMD GPUs vLLM's ROCm build leaves out, CUDA on a card the vLLM release
    --engine-version names runs nothing on), where 'llama.cpp' gives each card its build:
    `page llama-3.1-8b --gpu apple-m3-max-40c` draws llama.cpp-metal, as `decode` does,
    where vllm priced no combination at all; `--gpu v100` llama.cpp-cuda, and vLLM with
    --engine-version 0.19."""
    from ridgeline.cli_load import default_engine

    builds = {default_engine(argparse.Namespace(gpu=g, gpu_file=None,
                                                engine_version=engine_version)) for g in gpus}
    return "llama.cpp" if builds and all(b.startswith("llama.cpp") for b in builds) else "vllm"


def _default_counts(gpus: list[str]) -> tuple[int, ...]:
    """The counts the page offers unasked: 1, 2, 4 and 8, or 1 alone where every card is one
    Apple-silicon GPU (llama.cpp's Metal backend runs one device: Deployment refuses more),
    so its picker offers no combination that cannot run for that reason alone."""
    from ridgeline.hardware import resolve_accelerator

    if gpus and all(resolve_accelerator(g).vendor == "apple" for g in gpus):
        return (1,)
    return DEFAULT_COUNTS
