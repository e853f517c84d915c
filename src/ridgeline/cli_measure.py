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


# the GPUs whose torch._scaled_mm runs fp8 e4m3 (device_probes.fp8_format): the help, the
# refusals and the probe's own check say the same
FP8_GPUS = "an sm_89+ NVIDIA (Ada, Hopper, Blackwell) or an AMD MI300, MI350 or RDNA4"


def _check_fp8_device(device: str) -> None:
    """--fp8 is measured on a GPU only (an sm_89+ NVIDIA, an AMD MI300+: which one, and its
    e4m3, is asked of the card once torch can: device_probes.fp8_format). A CPU's
    torch._scaled_mm is a reference loop: 0.024-0.030 GFLOP/s on a 2-core Xeon VM
    (torch 2.13.0+cpu, 2026-12-05), so one decode step of Llama-3.2-1B's 0.97 B linear
    weights (1.95 GFLOP) takes 70-80 s and its 64-token prefill over an hour. And only such
    a GPU is given an fp8 probe (device_probes.probe_device), so anywhere else the
    rows' record has no fp8 peak and `validate` prices none of them."""
    if device.startswith("cuda"):
        return
    slow = ("; a CPU's torch._scaled_mm is a reference loop (over a minute for one decode step "
            "of a 1B model)" if device == "cpu" else "")
    raise InputError(f"--fp8 needs an fp8 GPU (--device cuda: {FP8_GPUS}): on {device} no "
                     f"fp8 peak is probed, so no row could be priced{slow}")


def _check_fp8_card(card: Any) -> None:
    """--fp8 with a --card whose catalog record has no fp8 peak (an A100, a V100, a T4, an
    MI250): the card has no fp8 matmuls, so the run would stop at its first fp8 matmul and no
    row the dry run lists could be written, nor priced against that spec sheet."""
    if card.has("fp8"):
        return
    peaks = ", ".join(d for d in card.peak_flops)
    raise InputError(f"--fp8: {card.id} has no fp8 matmuls (its catalog peaks: {peaks}); "
                     f"--fp8 needs {FP8_GPUS}")


# the catalog vendors whose cards each --device runs on (no catalog record is a CPU)
CARD_VENDORS = {"cuda": ("nvidia", "amd"), "mps": ("apple",), "cpu": ()}


def _check_card_device(device: str, card_id: str, vendor: str) -> None:
    """--card names the catalog card this device is: rows measured on a CPU are no card's
    (the catalog has no CPU), an Apple card is measured under --device mps, an NVIDIA or AMD
    one under cuda (ROCm's torch answers to cuda too); any other pairing is refused."""
    vendors = CARD_VENDORS[device.split(":")[0]]
    if vendor not in vendors:
        runs = (" or ".join(f"{VENDOR_WORDS.get(v, v)}" for v in vendors) + " card"
                if vendors else "no catalog card (the catalog has no CPU)")
        raise InputError(f"--card {card_id} is {VENDOR_WORDS.get(vendor, vendor)} card, but "
                         f"--device {device} measures {runs}: the rows would be priced "
                         "against another device's spec sheet")


VENDOR_WORDS = {"nvidia": "an NVIDIA", "amd": "an AMD", "apple": "an Apple",
                "google": "a Google", "intel": "an Intel"}


def cmd_measure(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from ridgeline.catalog import resolve_model
    from ridgeline.measure import RowsWriter, card_rows_path, record_path
    from ridgeline.torch_model import check_buildable

    # what can be refused before minutes of measuring: the model, and whether it is built
    spec = resolve_model(args.model, fetchable=False)
    check_buildable(spec, args.fp8)
    if args.fp8:
        _check_fp8_device(args.device)
    if args.gpu_id is not None:  # the rule a --gpu-file record's id meets (check_record_id)
        from ridgeline.hardware import check_record_id

        check_record_id(args.gpu_id, "--gpu-id")
    rated = card = None
    if args.card or args.rated_gpu:
        from ridgeline.hardware import resolve_accelerator

        card = resolve_accelerator(args.card) if args.card else None
        rated = resolve_accelerator(args.rated_gpu) if args.rated_gpu else card
    if card is not None:
        _check_card_device(args.device, card.id, card.vendor)
        if args.fp8:
            _check_fp8_card(card)
    if args.skip_probes and args.memory_gib:
        raise InputError("--memory-gib sizes the device record, which --skip-probes does not "
                         "write")
    out = Path(args.output).expanduser()
    record = record_path(out)
    card_path = card_rows_path(out, card.id) if card else None
    _check_measure_output(args.output, out, None if args.skip_probes else record, card_path)
    if args.dry_run:
        return _dry_run(args, spec, card, card_path)
    writer = RowsWriter(out, card.id if card else "", card_path)
    try:
        result = _measure(args, writer)
    finally:
        writer.close()
    writer.finish(result.rows)
    return _report(args, result, out, record, card, card_path, rated)


def _measure(args: argparse.Namespace, writer: Any) -> Any:
    """The minutes of measuring, each row written as it is measured: where they stop (a
    crash, Ctrl-C, a refusal after some points) the rows timed so far stay in -o, and
    stderr says how many."""
    import sys

    from ridgeline.measure import measure

    try:
        return measure(args.device, args.quick, args.model, args.dtype, args.gpu_id,
                       tuple(args.batches or ()), tuple(args.contexts or ()),
                       not args.skip_probes, args.fp8, sink=writer.add)
    except InputError as exc:
        if writer.written:
            raise InputError(f"{exc} (the {writer.written} rows measured before it are in "
                             f"{args.output})") from None
        raise
    except BaseException:
        if writer.written:
            print(f"ridgeline: measuring stopped; the {writer.written} rows measured before "
                  f"it are in {args.output}", file=sys.stderr)
        raise


def _report(args: argparse.Namespace, result: Any, out: Path, record: Path, card: Any,
            card_path: Path | None, rated: Any) -> Any:
    """The device record beside the rows, and the answer: what was measured and written,
    and the validate to run next."""
    from ridgeline.measure import accelerator_record, earlier_record, write_record
    from ridgeline.reports.measure import MeasureReport

    written: dict[str, Any] | None = None
    if result.probes:
        memory = args.memory_gib * 2**30 if args.memory_gib else result.memory_bytes
        if memory is None:
            raise InputError(f"{args.device}: the runtime reports no memory size; give "
                             f"--memory-gib (the rows are written, to {args.output})")
        written = accelerator_record(result, memory)
        write_record(written, record)
    # the rows against the record of the device they name (this run's, or, without probes,
    # an earlier run's of the same id); none where no such record is known
    earlier = None if written else earlier_record(out, result.gpu_id)
    named = record if written else earlier
    validate = (f"ridgeline validate {shlex.quote(args.output)} --gpu-file "
                f"{shlex.quote(str(named))}" if named else "")
    # with --card, the same rows as the catalog card's: against its spec sheet, the one the
    # bundled torch profiles were fitted on
    card_validate = f"ridgeline validate {shlex.quote(str(card_path))}" if card_path else ""
    return MeasureReport(args.device, result, args.output, written, str(record),
                         bool(args.memory_gib), rated, validate, str(earlier or ""),
                         card_id=card.id if card else "",
                         card_rows_path=str(card_path or ""), card_command=card_validate)


def _dry_run(args: argparse.Namespace, spec: Any, card: Any, card_path: Path | None) -> Any:
    """--dry-run: the plan, from the flags alone (no PyTorch, no device)."""
    from ridgeline.device_probes import host_ram_bytes
    from ridgeline.measure_plan import plan_measure
    from ridgeline.reports.measure import MeasurePlanReport

    if args.memory_gib:
        memory, source = args.memory_gib * 2**30, "--memory-gib"
    elif card is not None:
        memory, source = card.memory_bytes, f"{card.id}'s spec sheet"
    elif args.device == "cpu":
        memory, source = host_ram_bytes(), "this machine's RAM"
    else:
        memory, source = None, ""
    plan = plan_measure(spec, args.device, args.dtype, args.quick,
                        tuple(args.batches or ()) or None, tuple(args.contexts or ()) or None,
                        not args.skip_probes, args.fp8, card, memory, source)
    return MeasurePlanReport(plan, args.quick, args.output, str(card_path or ""))


def _check_measure_output(output: str, out: Path, record: Path | None,
                          card_rows: Path | None = None) -> None:
    """Before minutes of measuring (the CSV's folder checked with every output, before any
    command: cli_output_files): neither the CSV, the device record beside it (``record``;
    None with --skip-probes) nor --card's copy of the rows (``card_rows``) is a file this
    command did not write (a measurements file or a catalog record would be lost)."""
    from ridgeline.measure import measured_record, wrote_rows

    # the rows are CSV: a suffix that names another format (x.json, rows.txt) is refused, as
    # page's -o and validate's --plot refuse theirs; a name without one, or whose last dot
    # opens a number rather than a format (run.2024), is taken as it is (record_path)
    if out.suffix[1:].isalpha() and out.suffix.lower() != ".csv":
        raise InputError(f"-o takes a .csv file (the rows are CSV), got {output!r}")
    if out.exists() and not wrote_rows(out):
        raise InputError(f"-o {output} exists and is not rows `ridgeline measure` wrote: not "
                         "overwriting it (remove it or choose another name)")
    if card_rows is not None and card_rows.exists() and not wrote_rows(card_rows):
        raise InputError(f"{card_rows} (--card's copy of the rows, beside -o {output}) exists "
                         "and is not rows `ridgeline measure` wrote: not overwriting it "
                         "(remove it or choose another name)")
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
                   f"checkpoint; on {FP8_GPUS} only); the LM head and the cache stay in "
                   "--dtype")
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
    p.add_argument("--card", type=_typed(_accelerator_name),
                   help="the catalog accelerator this device is (h100, h200): the rows are "
                   "also written naming it (rows.h200-sxm.csv), which validate scores against "
                   "its spec sheet, the one the bundled torch profiles were fitted on; its "
                   "rated figures are printed beside the probes unless --rated-gpu names "
                   "another")
    p.add_argument("--rated-gpu", type=_typed(_accelerator_name),
                   help="catalog accelerator whose rated bandwidth and dense matmul peaks are "
                   "printed beside the probes, with the share each reached")
    p.add_argument("--dry-run", action="store_true",
                   help="print the grid, what it will skip and a floor on its time (with "
                   "--card), touching no device and importing no PyTorch")
    p.add_argument("-o", "--output", required=True, metavar="rows.csv",
                   type=_not_empty("output path"),
                   help="measurements CSV to write (validation/README.md's format)")
    _output(p)
    p.set_defaults(handler=cmd_measure)
