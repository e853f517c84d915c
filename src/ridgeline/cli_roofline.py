"""CLI: roofline and moe — the ridge point and where each part of a step sits against it;
what routing to a few experts does to the bytes a step reads and the batch that reaches
the ridge."""

from __future__ import annotations

import argparse
from typing import Any

from ridgeline.cli import _formats, _gpu, _model, _output
from ridgeline.cli_engine import ENGINE_DEFAULT, ENGINE_NAMES, engine_flag
from ridgeline.cli_load import (
    accelerator_names,
    build_deployment,
    card_id,
    load_accelerator,
    load_model,
    named_weights,
    one_card,
    served_engine,
)
from ridgeline.cli_types import (
    MAX_BATCH,
    _count_list,
    _how_many,
    _not_empty,
    _positive_count,
    _positive_float,
)
from ridgeline.errors import InputError
from ridgeline.side_by_side import run_each
from ridgeline.units import COUNT_EXAMPLES

ROOFLINE_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")  # its --compute-dtype


# --compute-dtype's weights where no --weights names them: tf32 multiplies fp32 weights
_WEIGHTS_AT = {"tf32": "fp32"}


def _element_bytes(args: argparse.Namespace) -> tuple[float, float, str]:
    """Bytes per weight and per KV element named without a model, and where the weights'
    came from. --weights names them; else --compute-dtype's own (an fp8 step is W8A8: it
    reads 1-byte weights, so an H100's fp8 ridge of 591 FLOP/byte is reached at batch
    591 × 1 ÷ 2 = 296, as bf16's 295 is at 2-byte weights); else 2 (bf16). KV: 2."""
    from ridgeline.precision import is_stored_format, kv_dtype, weight_format

    weights = named_weights(args)
    if (weights and is_stored_format(weights)) or args.kv_dtype == "auto":
        raise InputError("'as stored' and 'auto' formats need --model (the checkpoint's formats)")
    kvb = kv_dtype(args.kv_dtype).bytes_per_element if args.kv_dtype else 2.0
    if weights:
        return weight_format(weights).bytes_per_weight, kvb, ""
    dtype = getattr(args, "compute_dtype", None)
    if dtype is None:
        return 2.0, kvb, ""
    fmt = weight_format(_WEIGHTS_AT.get(dtype, dtype))
    return fmt.bytes_per_weight, kvb, (
        f"{fmt.id} weights, {fmt.bytes_per_weight:g} B each, as a step whose matmuls run at "
        f"--compute-dtype {dtype} reads them (--weights names others)")


def _matmul_dtype(args: argparse.Namespace, acc: Any) -> str:
    """The matmul dtype a weight format named without a model runs at on this accelerator
    (fp8 weights on an H100: fp8), as a deployment of it would; bf16 when none is named."""
    from ridgeline.precision import weight_format

    weights = named_weights(args)
    if not weights:
        return "bf16"
    return str(acc.first_supported(weight_format(weights).compute_dtypes))


def cmd_roofline(args: argparse.Namespace) -> Any:
    from dataclasses import replace

    from ridgeline.reports.roofline import roofline_report, served_identity

    names = accelerator_names(args)
    if len(names) > 1:
        from ridgeline.reports.roofline import RooflineComparison

        vars(args).setdefault("cautions_said", [])  # one list the cards share: said once
        reports, not_run = run_each(names, lambda name: cmd_roofline(one_card(args, name)),
                                    card_id)
        return RooflineComparison(tuple(reports), not_run)
    _engine_without_model(args)
    acc = load_accelerator(args)
    dep = _served_deployment(args, acc) if args.model else None
    if dep is not None and args.compute_dtype:
        _weights_run_at(args.compute_dtype, dep)
    bpw, kvb, weights_from = (2.0, 2.0, "") if dep else _element_bytes(args)
    try:
        dtype = args.compute_dtype or (dep.dense_compute_dtype if dep
                                       else _matmul_dtype(args, acc))
        experts = args.compute_dtype or (dep.expert_compute_dtype if dep else dtype)
        report = roofline_report(acc, dtype, args.batch, args.prompt_len, dep, bpw, kvb,
                                 args.intensity, experts, args.num_gpus,
                                 None if dep else _attention_dtype(args, acc), weights_from,
                                 blend=not args.compute_dtype)  # --compute-dtype: judged at it
        if dep is None:
            return report
        return replace(report, identity=served_identity(dep, served_engine(args) is not None))
    except InputError as exc:  # a rate the card lacks: name the flags that pick its own
        fixes = _rate_fixes(args, acc, dep)
        if not fixes:
            raise
        raise InputError(f"{exc}{fixes}") from None


def _weights_run_at(dtype: str, dep: Any) -> None:
    """--compute-dtype narrower than --model's weights is refused: no engine multiplies
    2-byte weights at fp8 (a W16A8 step); vLLM quantizes the checkpoint first (-q fp8), and
    then each weight reads 1 byte, so llama-3.1-70b's bf16 at --compute-dtype fp8 would put
    the H100's ridge at batch 591 where the fp8 step it names reaches it at 296. Narrower
    weights than the dtype (int4 at fp8, W4A8) pass; so does a wider dtype (bf16 of fp8)."""
    from ridgeline.params import count_params
    from ridgeline.precision import weight_format
    from ridgeline.quantization import LINEAR_CATEGORIES

    own = weight_format(_WEIGHTS_AT.get(dtype, dtype))  # the weights a step at dtype reads
    if own.bits_per_weight >= 16:
        return
    params = count_params(dep.model).by_category
    wide = {c: dep.weights.format_of(c) for c in LINEAR_CATEGORIES if params.get(c)}
    wide = {c: f for c, f in wide.items() if dtype not in f.compute_dtypes
            and int(f.bits_per_weight) > int(own.bits_per_weight)}
    if wide:
        formats = " and ".join(sorted({f.id for f in wide.values()}))
        online = " (vLLM's -q fp8 quantizes them at load)" if own.id == "fp8" else ""
        raise InputError(
            f"--compute-dtype {dtype} multiplies {own.id} weights, and {dep.model.name}'s "
            f"{' and '.join(c.replace('_', ' ') for c in wide)} weights are {formats}: no engine runs "
            f"{dtype} matmuls on them unquantized; add --weights {own.id}{online}, or leave "
            "--compute-dtype out for their own dtype")


def _served_deployment(args: argparse.Namespace, acc: Any) -> Any:
    """--model on the card as --engine serves it, built as fit and decode build theirs
    (cli_load.build_deployment), so the dense ridge batch is the one their verdicts use
    (gpt-oss-20b on an H100 under llama.cpp: ggml-org's mxfp4_moe GGUF, Q8_0 attention at
    1.06 bytes a weight, 158, not the stored bf16's 296); the engine cli_load.served_engine's:
    with no --engine, the card's default (llama.cpp's GGUF where only llama.cpp serves it:
    gpt-oss-120b on an M2 Max, 19, not 34)."""
    return build_deployment(args, load_model(args), acc, served_engine(args))


def _engine_without_model(args: argparse.Namespace) -> None:
    """An --engine named without --model is refused: the engine reads a checkpoint (the GGUF
    llama.cpp runs for it), and without one --weights alone gives the bytes per weight."""
    if args.model is None and not getattr(args, "engine_defaulted", False):
        raise InputError(f"--engine {getattr(args, 'engine_asked', None) or args.engine} "
                         "places --model's checkpoint as that engine serves it (llama.cpp: "
                         "the GGUF fit reads): give --model, or --weights alone for the bytes "
                         "per weight without one")


def _attention_dtype(args: argparse.Namespace, acc: Any) -> str:
    """Without a model, the dtype decode attention multiplies the cache at: the cache's
    (bf16 by default), whatever the weights' matmuls run at (fp8 weights, bf16 cache: bf16)."""
    from ridgeline.deployment import cache_matmul_dtypes
    from ridgeline.precision import kv_dtype

    kv_id = kv_dtype(args.kv_dtype).id if args.kv_dtype else "bf16"
    return str(acc.first_supported(cache_matmul_dtypes(kv_id)))


def _rate_fixes(args: argparse.Namespace, acc: Any, dep: Any) -> str:
    """For a card without a rate roofline's rows need (an fp32-only --gpu-file): the flags
    that pick rates it has, as a clause to the refusal; "" where it has them. Decode
    attention multiplies the cache at the cache's dtype, whatever --compute-dtype says."""
    from ridgeline.deployment import cache_matmul_dtypes
    from ridgeline.hardware import compute_dtype_fix
    from ridgeline.precision import kv_dtype

    def runs(dtypes: tuple[str, ...]) -> bool:
        try:
            acc.first_supported(dtypes)
        except InputError:
            return False
        return True

    fixes = []
    try:
        matmul = args.compute_dtype or (dep.dense_compute_dtype if dep else _matmul_dtype(args, acc))
    except InputError:
        matmul = None
    rates = compute_dtype_fix(acc, ROOFLINE_DTYPES)  # utilization's refusal words it so too
    if (matmul is None or not runs((matmul,))) and rates:
        fixes.append(rates)
    kv_id = dep.kv.id if dep else (kv_dtype(args.kv_dtype).id if args.kv_dtype else "bf16")
    fits = [k for k in ("bf16", "fp16", "fp8", "fp32") if runs(cache_matmul_dtypes(k))]
    if not runs(cache_matmul_dtypes(kv_id)) and fits:
        fixes.append(f"--kv-dtype {' or '.join(fits)} (decode attention multiplies the cache "
                     f"at its own dtype, {kv_id} here, whatever --compute-dtype says)")
    return f"; give {' and '.join(fixes)}" if fixes else ""


def cmd_moe(args: argparse.Namespace) -> Any:
    """Routing's arithmetic for MODEL as --engine serves it on the card, built as roofline
    builds its deployment (_served_deployment): the experts' format the engine runs, the
    peak it runs their matmuls at; without --engine, the card's default as roofline's."""
    from dataclasses import replace

    from ridgeline.reports.moe import moe_report
    from ridgeline.reports.roofline import served_identity

    if not args.gpu and not args.gpu_file and not args.peak_tflops:
        args.gpu = "h100-sxm"  # the article's card
    dep = _served_deployment(args, load_accelerator(args))
    report = moe_report(dep, args.batch)
    return replace(report, identity=served_identity(dep, served_engine(args) is not None))


def register(sub: Any) -> None:

    p = sub.add_parser("roofline", help="ridge point and where each part of a step sits")
    _gpu(p, several=True)
    p.add_argument("--compute-dtype", choices=ROOFLINE_DTYPES,
                   help="the peak the ridge divides (default: the weights' matmul dtype)")
    p.add_argument("--batch", type=_how_many("batch", MAX_BATCH), default=1,
                   help="decode batch: tokens sharing each read of the weights (default 1)")
    p.add_argument("--prompt-len", type=_positive_count("prompt length"), default=4000,
                   help="prefill prompt tokens (default 4000)")
    # 1e-3 to 1e9 FLOP/byte: an fp32 vector add's 1/12 to a million-token prefill's, wide;
    # 1e308 had printed a 400-digit row
    p.add_argument("--intensity", type=_positive_float("intensity", 1e-3, 1e9),
                   help="also show the attainable FLOP/s at this many FLOP per byte")
    p.add_argument("--model", type=_not_empty("model name"),
                   help="place this model's attention and experts on the roofline (or give "
                   "it first, as MODEL)")
    p.add_argument("--fetch", action="store_true", help=argparse.SUPPRESS)
    engine_flag(p, "with --model: the engine whose reading of the checkpoint is placed, as fit "
                f"reads it (llama.cpp: the GGUF it runs) ({ENGINE_DEFAULT}): {ENGINE_NAMES}")
    _formats(p)
    _output(p)
    p.set_defaults(handler=cmd_roofline)

    p = sub.add_parser("moe", help="routed fraction, experts touched, bytes a step reads")
    _model(p)
    _gpu(p, required=False, unnamed="default h100-sxm, the article's card")
    _formats(p)
    engine_flag(p, "the engine whose reading of the checkpoint routes, as fit reads it "
                "(llama.cpp: the GGUF it runs; vLLM: its kernels' formats and rates on the "
                f"card) ({ENGINE_DEFAULT}): {ENGINE_NAMES}")
    p.add_argument("--batch", type=_count_list("batch", MAX_BATCH, COUNT_EXAMPLES),
                   help="tokens in the decode step: one or a list, 1,16,64, the table's rows "
                   "(default: 1, 8, 32, 128, 512, 2048)")
    _output(p, plot=True)
    p.set_defaults(handler=cmd_moe)
