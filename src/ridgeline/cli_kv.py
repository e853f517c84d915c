"""CLI: kv — a model's KV-cache bytes by layer kind, and the conversations of a context
that fit in a budget given or in what a deployment's weights leave on its cards, as --engine
(or the card's own llama.cpp) keeps them."""

from __future__ import annotations

import argparse
from typing import Any

from ridgeline.cli import _formats, _gpu, _model, _output, data_parallel_flags
from ridgeline.cli_engine import ENGINE_DEFAULT, ENGINE_NAMES, engine_flag
from ridgeline.cli_load import (
    build_deployment,
    kv_choice_check,
    load_accelerator,
    load_model,
    served_engine,
)
from ridgeline.cli_types import MEMORY_GIB_RANGE, _positive_count, _positive_float
from ridgeline.errors import InputError


def cmd_kv(args: argparse.Namespace) -> Any:
    from dataclasses import replace

    from ridgeline.ds_mla_cache import packed_cache_problem, vllm_stored_cache
    from ridgeline.engine_choices import KV_CACHE_DTYPE_FLAG
    from ridgeline.engine_platforms import kv_kept_nowhere_problem
    from ridgeline.engine_windows import honours_windows, sglang_window_pool_caution
    from ridgeline.kvcache import kv_replication
    from ridgeline.precision import kv_dtype
    from ridgeline.raw_fit import device_fit
    from ridgeline.reports.kv import kv_report
    from ridgeline.reports.roofline import served_identity
    from ridgeline.served_model import served_dtype, windows_as_full
    from ridgeline.units import GIB

    model = load_model(args)
    # --engine's, or the card's own where it is llama.cpp (Apple silicon, Vega 20, MI100,
    # RDNA2): the memory is counted as it runs there, as decode and fit count it (its input
    # embedding on the host, windows only for the architectures it keeps them for, its f16
    # cache); None: vLLM's card, the checkpoint as stored
    engine = served_engine(args)
    if engine is None:  # --kv-cache-dtype read as vLLM's flag, as fit reads it by default
        kv_choice_check(args, "vllm")  # (vLLM's nvfp4 is not modelled; bf16 is bfloat16)
    # and kept as vLLM keeps it: DeepSeek-V3.2's fp8 in fp8_ds_mla's records, as fit sizes it
    vllm_flag = engine is None \
        and getattr(args, "kv_dtype_spelling", None) == KV_CACHE_DTYPE_FLAG
    kv = kv_dtype(args.kv_dtype or served_dtype(model))
    if vllm_flag:
        kv = vllm_stored_cache(kv, model)
    problem = packed_cache_problem(kv, model)  # fp8_ds_mla's records fit one latent width
    if problem:
        raise InputError(problem)
    budget, label, replication = None, "", 1.0
    dep: Any = None
    given = [flag for flag, value in (("--gpu", args.gpu), ("--gpu-file", args.gpu_file),
                                      ("--peak-tflops", args.peak_tflops))
             if value is not None]
    if args.memory_gib is not None and given:
        raise InputError(f"--memory-gib is the budget itself; {', '.join(given)} would size "
                         "another: give one")
    if args.memory_gib is not None and args.num_gpus != 1:
        raise InputError("--memory-gib is the whole budget for the cache alone, over every "
                         "GPU: drop --num-gpus, or give --gpu to split a card's memory")
    if args.memory_gib is None and not given and args.num_gpus != 1:
        raise InputError("--num-gpus splits an accelerator's memory: give --gpu")
    if args.data_parallel_size is not None and not given:
        raise InputError("--data-parallel-size splits accelerators' memory into ranks: give "
                         "--gpu")
    if engine is not None and not given:
        raise InputError(f"--engine {getattr(args, 'engine_asked', None) or args.engine} "
                         "keeps the cache as that engine does on a card (its cache dtype, "
                         "windows and states, the weights beside them): give --gpu"
                         + (" instead of --memory-gib" if args.memory_gib is not None else ""))
    weights_flag = next((f"{flag} {value}" for flag, value in (
        ("--weights", args.weights), ("--quantization", getattr(args, "quantization", None)))
        if value is not None), None)
    if weights_flag and not given:  # the cache alone: a format there would change nothing
        raise InputError(f"{weights_flag} sizes the weights beside the cache on a card, and "
                         + ("--memory-gib is the cache's budget alone"
                            if args.memory_gib is not None else "no card is named")
                         + ": give --gpu, or drop it")
    if args.memory_gib is not None:
        budget, label = args.memory_gib * GIB, f"{args.memory_gib:g} GiB given, for the cache alone"
    else:
        acc = load_accelerator(args)
        dep = None if acc is None else build_deployment(args, model, acc, engine)
        if dep is not None:
            problem = "" if engine is not None else kv_kept_nowhere_problem(dep.kv,
                                                                             dep.accelerator)
            if problem:  # no engine named: still a cache some engine keeps on this card
                raise InputError(problem)
            model = dep.model
            if engine is not None and not honours_windows(dep):
                # SGLang outside its hybrid-SWA architectures and TensorRT-LLM keep every
                # token in every window layer, as fit prices their pools (engine_windows)
                model = windows_as_full(model)
            # the weights on the GPUs against the memory the engine finds, as decode and fit
            room = device_fit(dep)
            budget = room.kv_room_bytes
            label = (f"{dep.num_gpus} x {dep.accelerator.id} ({room.capacity_bytes / 1e9:,.1f} "
                     + ("GB as the runtime reports it" if dep.accelerator.runtime_total_bytes
                        else f"GB usable: {room.capacity_basis}")
                     + f") − {room.weight_bytes / 1e9:,.1f} GB of "
                     f"weights ({dep.weights.label}"
                     + (f", as {dep.engine} holds them" if engine is not None else "")
                     + (f": {dep.weight_bytes / 1e9:,.1f} GB, and "
                        f"{dep.tp_copies_bytes / 1e9:,.1f} GB more: "
                        + ("each data-parallel rank's own copy of all but the experts, and "
                           "what every tensor-parallel rank keeps whole"
                           if dep.data_parallel_size > 1 else
                           "the copies of what every tensor-parallel rank keeps whole")
                        if dep.tp_copies_bytes >= 0.05e9  # shown as 0.1 GB or more
                        else "") + ")"
                     + (f"; a serving engine also loads the {room.vision_bytes / 1e9:,.2f} GB "
                        "vision tower, left out here" if room.vision_bytes else ""))
            # a conversation's cache is copied over its own rank's GPUs only, each of an
            # MI250's dies a rank under vLLM (as the weights' copies above count them)
            replication = kv_replication(model, dep.num_gpus // dep.data_parallel_size
                                         * dep.devices_per_gpu)
            # the cache the engine keeps on this card (fp16 where it lacks bf16)
            kv = vllm_stored_cache(dep.kv, model) if vllm_flag else dep.kv
            dep = replace(dep, kv=kv)  # --json's kv_dtype names it (served_identity)
    report = kv_report(model, args.context, kv, budget, label, replication, engine or "vllm",
                       ranks=1 if dep is None else dep.data_parallel_size,
                       rank_gpus=1 if dep is None else dep.num_gpus // dep.data_parallel_size)
    if dep is None:
        return replace(report, cache_alone=args.memory_gib is not None)
    return replace(report, identity=served_identity(dep, engine is not None),
                   engine_pool_caution=sglang_window_pool_caution(dep, args.context))


def register(sub: Any) -> None:

    p = sub.add_parser("kv", help="KV-cache bytes by layer kind and conversations that fit")
    _model(p)
    p.add_argument("--context", type=_positive_count("context length"), required=True,
                   help="tokens each conversation holds (128k, 4096, …)")
    p.add_argument("--memory-gib", type=_positive_float("memory GiB", *MEMORY_GIB_RANGE),
                   help="a KV budget in GiB (instead of --gpu)")
    _gpu(p, required=False,
         unnamed="optional: without it or --memory-gib, the cache alone, no budget")
    data_parallel_flags(p, expert_parallel=False)  # SGLang's read with --engine sglang
    _formats(p)
    engine_flag(p, "with --gpu: the engine that keeps the cache and the weights beside it, as "
                "fit reads them (llama.cpp: the GGUF, its f16 cache, windows only where it "
                f"keeps them, f32 recurrent states) ({ENGINE_DEFAULT}): {ENGINE_NAMES}")
    _output(p, plot=True)
    p.set_defaults(handler=cmd_kv)
