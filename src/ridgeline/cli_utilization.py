"""CLI: utilization — the running batch an engine reports against the ridge, and, with
--model, against the batch its KV pool seats."""

from __future__ import annotations

import argparse
from typing import Any

from ridgeline.cli import _formats, _gpu, _output, _pipeline, data_parallel_flags
from ridgeline.cli_engine import ENGINE_DEFAULT, ENGINE_NAMES, decode_context_flag, engine_flag
from ridgeline.cli_load import load_accelerator, load_deployment
from ridgeline.cli_offload import vllm_context_flags
from ridgeline.cli_roofline import _element_bytes, _matmul_dtype
from ridgeline.cli_types import DEFAULT_CONTEXT_TOKENS, _count, _not_empty, _positive_count
from ridgeline.errors import InputError
from ridgeline.hardware import compute_dtype_fix
from ridgeline.units import COUNT_EXAMPLES

UTILIZATION_DTYPES = ("bf16", "fp16", "fp8", "int8", "fp4")  # its --compute-dtype


def cmd_utilization(args: argparse.Namespace) -> Any:
    from ridgeline.engine_platforms import engine_platform_problem
    from ridgeline.engines import engine_id
    from ridgeline.reports.utilization import utilization_report

    acc = load_accelerator(args)
    engine = engine_id(args.engine)
    problem = engine_platform_problem(engine, acc)
    if problem:  # the pool is sized only with --model: the engine must run on the card anyway
        raise InputError(problem)
    dep = load_deployment(args) if args.model else None
    if dep is None and args.pipeline_parallel_size:
        raise InputError("--pipeline-parallel-size splits the running batch over a model's "
                         "layer stages: give --model")
    if dep is None and (args.kv_dtype or args.context):
        raise InputError("--kv-dtype and --context size a model's KV pool: give --model")
    if dep is None and (args.hf_overrides is not None
                        or args.vllm_allow_long_max_model_len is not None):
        raise InputError("--hf-overrides and --vllm-allow-long-max-model-len set the context "
                         "a model is served at: give --model")
    if dep is None and (args.decode_context_parallel_size or args.expert_parallel
                        or args.expert_parallel_size or args.data_parallel_size
                        or args.enable_dp_attention):
        raise InputError("-dcp, --data-parallel-size (--dp-size, --enable-dp-attention), "
                         "--enable-expert-parallel and --ep-size lay out a model's KV pool, "
                         "attention and experts over the GPUs: give --model")
    if dep is not None and args.compute_dtype not in (None, dep.dense_compute_dtype):
        # an engine's matmuls run at the dtype its weights are served in: fp8 matmuls on bf16
        # weights is no deployment, so the flag would price one that does not exist
        formats = {"fp4": "nvfp4 or mxfp4"}.get(args.compute_dtype, args.compute_dtype)
        raise InputError(f"--compute-dtype {args.compute_dtype} with --model: an engine runs "
                         f"{dep.model.name}'s matmuls at the dtype its weights are served in "
                         f"({dep.dense_compute_dtype}, weights {dep.weights.label}); serve it "
                         f"quantized with --weights {formats} instead")
    if args.compute_dtype and not acc.has(args.compute_dtype):  # as roofline refuses it
        try:
            acc.resolve_dtype(args.compute_dtype)  # a fallback it runs at is no refusal
        except InputError as exc:
            fix = compute_dtype_fix(acc, UTILIZATION_DTYPES)
            raise InputError(f"{exc}; give {fix}" if fix else str(exc)) from None
    bpw = 2.0 if dep else _element_bytes(args)[0]
    dtype = args.compute_dtype or (dep.dense_compute_dtype if dep else _matmul_dtype(args, acc))
    context = (args.context or DEFAULT_CONTEXT_TOKENS) if dep else None  # decode's default
    return utilization_report(acc, args.running, dtype, bpw, dep, context,
                              tensor_parallel_size=args.num_gpus,  # --num-gpus: TP (× -pp)
                              engine=engine, blend=args.compute_dtype is None)


def register(sub: Any) -> None:

    p = sub.add_parser("utilization", help="the running batch an engine reports vs the ridge")
    _gpu(p)
    _pipeline(p)
    p.add_argument("--running", type=_count("running requests", COUNT_EXAMPLES), required=True,
                   help="the engine's running requests: vllm:num_requests_running (or N in "
                   "vLLM's 'Running: N reqs'), sglang:num_running_reqs, "
                   "trtllm_num_requests_running, llamacpp:requests_processing; with "
                   "data-parallel attention the server's, every rank's gauge summed (decode's "
                   "--batch)")
    p.add_argument("--compute-dtype", choices=UTILIZATION_DTYPES,
                   help="the peak the ridge divides (default: the weights' matmul dtype)")
    p.add_argument("--model", type=_not_empty("model name"),
                   help="compare with the batch this model's KV budget allows (or give it "
                   "first, as MODEL)")
    p.add_argument("--fetch", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--context", type=_positive_count("context length"),
                   help="with --model: tokens each running request holds (default "
                   f"{DEFAULT_CONTEXT_TOKENS}, as decode's)")
    engine_flag(p, f"engine whose pool (at its defaults, with --model), seats flag and running "
                f"gauge the advice names ({ENGINE_DEFAULT}): {ENGINE_NAMES}")
    data_parallel_flags(p)  # the deployment fit and decode size, as fit's launch line says it
    decode_context_flag(p)
    vllm_context_flags(p)  # a context past the model's positions, as fit and decode serve it
    _formats(p)
    _output(p)
    p.set_defaults(handler=cmd_utilization)
