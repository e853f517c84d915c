"""CLI: `ridgeline measure`, this device's bandwidth, matmuls and model steps as
measurement rows (and a record of the device) that validate and calibrate read."""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING, Any

from ridgeline.cli import _output
from ridgeline.cli_types import (
    MAX_BATCH,
    MEMORY_GIB_RANGE,
    _accelerator_name,
    _count_list,
    _not_empty,
    _positive_float,
    _typed,
)
from ridgeline.errors import InputError
from ridgeline.units import COUNT_EXAMPLES

if TYPE_CHECKING:
    from pathlib import Path


def _torch_device(text: str) -> str:
    """cpu, mps, cuda or cuda:N: checked before minutes of measuring, not after."""
    import re

    if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", text.strip()):
        raise InputError(f"unknown device {text!r}: use cpu, cuda, cuda:N or mps")
    return text.strip()


def _check_fp8_device(device: str) -> None:
    """--fp8 is measured on a CUDA device only (sm_89+, checked once torch can ask the card).
    A CPU's torch._scaled_mm is a reference loop: 0.024-0.030 GFLOP/s on a 2-core Xeon VM
    (torch 2.13.0+cpu, 2026-12-05), so one decode step of Llama-3.2-1B's 0.97 B linear
    weights (1.95 GFLOP) takes 70-80 s and its 64-token prefill over an hour. And only an
    sm_89+ GPU is given an fp8 probe (device_probes.probe_device), so anywhere else the
    rows' record has no fp8 peak and `validate` prices none of them."""
    if device.startswith("cuda"):
        return
    slow = ("; a CPU's torch._scaled_mm is a reference loop (over a minute for one decode step "
            "of a 1B model)" if device == "cpu" else "")
    raise InputError(f"--fp8 needs an sm_89+ GPU (--device cuda): on {device} no fp8 peak is "
                     f"probed, so no row could be priced{slow}")


def cmd_measure(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from ridgeline.catalog import resolve_model
    from ridgeline.measure import (
        accelerator_record,
        earlier_record,
        measure,
        record_path,
        write_record,
        write_rows,
    )
    from ridgeline.reports.measure import MeasureReport
    from ridgeline.torch_model import check_buildable

    # what can be refused before minutes of measuring: the model, and whether it is built
    check_buildable(resolve_model(args.model, fetchable=False), args.fp8)
    if args.fp8:
        _check_fp8_device(args.device)
    if args.gpu_id is not None:  # the rule a --gpu-file record's id meets (check_record_id)
        from ridgeline.hardware import check_record_id

        check_record_id(args.gpu_id, "--gpu-id")
    if args.rated_gpu:
        from ridgeline.hardware import resolve_accelerator

        resolve_accelerator(args.rated_gpu)
    if args.skip_probes and args.memory_gib:
        raise InputError("--memory-gib sizes the device record, which --skip-probes does not "
                         "write")
    out = Path(args.output).expanduser()
    record = record_path(out)
    _check_measure_output(args.output, out, None if args.skip_probes else record)
    result = measure(args.device, args.quick, args.model, args.dtype, args.gpu_id,
                     tuple(args.batches or ()), tuple(args.contexts or ()), not args.skip_probes,
                     args.fp8)
    write_rows(result.rows, out)
    written: dict[str, Any] | None = None
    if result.probes:
        memory = args.memory_gib * 2**30 if args.memory_gib else result.memory_bytes
        if memory is None:
            raise InputError(f"{args.device}: the runtime reports no memory size; give "
                             f"--memory-gib (the rows are written, to {args.output})")
        written = accelerator_record(result, memory)
        write_record(written, record)
    rated = None
    if args.rated_gpu:
        from ridgeline.hardware import resolve_accelerator

        rated = resolve_accelerator(args.rated_gpu)
    # the next step: the rows against the record of the device they name (this run's, or,
    # without probes, an earlier run's of the same id); none where no such record is known
    earlier = None if written else earlier_record(out, result.gpu_id)
    named = record if written else earlier
    validate = (f"ridgeline validate {shlex.quote(args.output)} --gpu-file "
                f"{shlex.quote(str(named))}" if named else "")
    return MeasureReport(args.device, result, args.output, written, str(record),
                         bool(args.memory_gib), rated, validate, str(earlier or ""))


def _check_measure_output(output: str, out: Path, record: Path | None) -> None:
    """Before minutes of measuring (the CSV's folder checked with every output, before any
    command: cli_output_files): neither the CSV nor the device record beside it (``record``;
    None with --skip-probes) is a file this command did not write (a measurements file or a
    catalog record would be lost)."""
    from ridgeline.measure import measured_record, wrote_rows

    if out.exists() and not wrote_rows(out):
        raise InputError(f"-o {output} exists and is not rows `ridgeline measure` wrote: not "
                         "overwriting it (remove it or choose another name)")
    if record is not None and record.exists() and measured_record(record) is None:
        raise InputError(f"{record} (the device record beside -o {output}) exists and is not "
                         "one `ridgeline measure` wrote: not overwriting it (remove it or "
                         "choose another name)")


def register(sub: Any) -> None:
    p = sub.add_parser("measure", help="measure this device: bandwidth, matmuls, model steps")
    p.add_argument("--device", default="cpu", type=_typed(_torch_device),
                   help="cpu, cuda, cuda:1, mps (default cpu: a GPU is measured only when "
                   "named)")
    p.add_argument("--quick", action="store_true", help="a small grid (minutes, not tens)")
    p.add_argument("--batches", type=_count_list("batch", MAX_BATCH, COUNT_EXAMPLES),
                   help="decode batches, comma-separated (default 1,8,32,64,128,256; 1,4 quick)")
    p.add_argument("--contexts", type=_count_list("context"),
                   help="contexts in tokens (default 512,2048,8192,32768; 128,512 quick)")
    p.add_argument("--fp8", action="store_true",
                   help="linear weights in fp8 e4m3, run by torch._scaled_mm (W8A8, as an FP8 "
                   "checkpoint; an sm_89+ GPU only); the LM head and the cache stay in --dtype")
    p.add_argument("--skip-probes", action="store_true",
                   help="only the model's steps (no bandwidth or matmul probes, no device record)")
    p.add_argument("--model", default="llama-3.2-1b",
                   help="catalog model or config.json, built with random weights (default "
                   "llama-3.2-1b)")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"],
                   help="the model's weights, activations and cache (default float32 on a CPU, "
                   "bfloat16 on a GPU)")
    p.add_argument("--gpu-id",
                   help="id for the measured device in the rows (letters, digits, - _ .; "
                   "default: measured-cpu, measured-cuda or measured-mps)")
    p.add_argument("--memory-gib", type=_positive_float("memory GiB", *MEMORY_GIB_RANGE),
                   help="device memory to record (default: what CUDA or Metal reports, or "
                   "the machine's RAM on a CPU)")
    p.add_argument("--rated-gpu", type=_typed(_accelerator_name),
                   help="catalog accelerator whose rated bandwidth and dense matmul peaks are "
                   "printed beside the probes, with the share each reached")
    p.add_argument("-o", "--output", required=True, metavar="rows.csv",
                   type=_not_empty("output path"),
                   help="measurements CSV to write (validation/README.md's format)")
    _output(p)
    p.set_defaults(handler=cmd_measure)
