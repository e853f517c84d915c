"""CLI: measurements and pictures — validate, calibrate, measure, page."""

from __future__ import annotations

import argparse
import math
import re
import shlex
import sys
from typing import TYPE_CHECKING, Any

from ridgeline.cli import _output
from ridgeline.cli_output_files import WroteFile
from ridgeline.cli_types import (
    MAX_BATCH,
    _accelerator_name,
    _count_list,
    _engine_name,
    _kv_name,
    _name_list,
    _positive_float,
    _typed,
    _weight_name,
)
from ridgeline.errors import InputError, shorten

if TYPE_CHECKING:
    from pathlib import Path


# fewer rows than this for an engine: its in-sample figures say little about new rows (a
# profile sets at least five numbers: two shares, the step's, a layer's and a prompt layer's)
FEW_ROWS = 12


def _device_id(text: str) -> str:
    """A measured device's id: one word a measurements row can name (h200-run1)."""
    if not text.strip():
        raise InputError("gpu id is empty")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", text):
        raise InputError(f"gpu id {shorten(text)!r}: use letters, digits, '-', '_' and '.' "
                         "(at most 64), as an accelerator id is written (h200-run1)")
    return text


def cmd_page(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from ridgeline.catalog import resolve_model
    from ridgeline.page import DEFAULT_GPUS, opening_facts, opening_steps, page_data, page_html

    if args.model is not None and not args.model.strip():
        raise InputError("model name is empty (leave MODEL out for the three default models)")
    _check_page_output(args.output)
    models = [args.model] if args.model else ["llama-3.1-70b", "llama-3.1-8b", "gpt-oss-120b"]
    for m in models:  # an unknown name said as itself, not as "no combination computes"
        resolve_model(m, fetchable=False)
    gpus = [g.strip() for g in args.gpu.split(",")] if args.gpu else list(DEFAULT_GPUS)
    counts = list(args.counts)
    gguf = str(args.engine).startswith("llama.cpp")  # GGUF files and llama.cpp's cache types
    weights = [w.strip() for w in (args.weights or ("as stored,q8_0,q4_k_m" if gguf else
                                                    "as stored,fp8,awq-int4")).split(",")]
    kvs = [k.strip() for k in (args.kv_dtypes or ("f16,q8_0" if gguf else "bf16,fp8")).split(",")]
    for flag, values in (("--gpu", gpus), ("--counts", counts), ("--weights", weights),
                         ("--kv-dtypes", kvs)):
        if len(set(values)) < len(values):
            raise InputError(f"{flag} names something twice")
    # an unqualified 'llama.cpp' is each card's build, as in the comparisons
    profiles = None
    if args.profile:  # a user's calibrated profiles draw the expectation
        from ridgeline.engines import engine_id, load_profile_file

        profiles = load_profile_file(args.profile)
        asked = engine_id(args.engine)
        if not any(name == asked or (asked.startswith("llama.cpp")
                                     and name.startswith("llama.cpp")) for name in profiles):
            raise InputError(f"{args.profile} holds no profile for {asked} (it has "
                             f"{', '.join(sorted(profiles))}): calibrate on {asked} rows, or "
                             "name one of those with --engine")
    data = page_data(models, gpus, counts, weights, kvs,
                     getattr(args, "engine_asked", None) or args.engine, profiles)
    running = [key for key, c in data["combos"].items() if any(any(row) for row in c["fits"])]
    if not running:
        raise InputError(f"does not fit: none of the {len(data['combos'])} deployments holds "
                         "one conversation at any of the page's contexts (more or larger "
                         "GPUs, or a smaller weight format)")
    try:
        Path(args.output).write_text(page_html(data, "ridgeline: the roofline"), "utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {args.output}: {exc}") from None
    left = data["left_out"]
    idle = len(data["combos"]) - len(running)
    return WroteFile(args.output, f"{len(data['combos'])} deployments"
                     + (f" ({idle} of them hold no conversation at any context)" if idle else "")
                     + ", batch and context sliders; open it in any browser (offline)"
                     + (f"; {len(left)} picker combination{'s' if len(left) > 1 else ''} "
                        f"cannot run (the page says why; the first, "
                        f"{next(iter(left)).replace('|', ' ')}: {next(iter(left.values()))})"
                        if left else ""), opening_steps(data),
                     (("deployments", len(data["combos"])), ("holding_none", idle),
                      ("left_out", len(left)), *opening_facts(data)))

def _check_page_output(output: str) -> None:
    """The page is HTML: refuse another suffix, and an existing file that is not a page
    ridgeline wrote (a profile or a CSV would be lost), before minutes of computing."""
    from pathlib import Path

    out = Path(output).expanduser()
    if out.suffix.lower() not in (".html", ".htm"):
        raise InputError(f"-o takes an .html file (the page is HTML), got {output!r}")
    if not out.exists():
        return
    try:
        with out.open("rb") as f:
            head = f.read(200)
    except OSError as exc:
        raise InputError(f"cannot read {output}: {exc}") from None
    if not (out.is_file() and head.lower().startswith(b"<!doctype html>")
            and b"<title>ridgeline" in head):
        raise InputError(f"-o {output} exists and is not a page ridgeline wrote: not "
                         "overwriting it (remove it or choose another name)")


def _torch_device(text: str) -> str:
    """cpu, mps, cuda or cuda:N: checked before minutes of measuring, not after."""
    import re

    if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", text.strip()):
        raise InputError(f"unknown device {text!r}: use cpu, cuda, cuda:N or mps")
    return text.strip()


def _register_gpu_files(args: argparse.Namespace) -> None:
    from ridgeline.catalog import normalise
    from ridgeline.hardware import load_accelerator_file, register

    seen: dict[str, str] = {}
    for path in args.gpu_file or []:
        record = load_accelerator_file(path)
        key = normalise(record.id)  # 'Lab Card' and 'lab-card' name one record
        if key in seen:
            raise InputError(f"--gpu-file {path} and {seen[key]} both hold the id "
                             f"{record.id!r}: rows naming it would take one of them")
        seen[key] = path
        register(record)

def cmd_measure(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from ridgeline.catalog import resolve_model
    from ridgeline.measure import (
        accelerator_record,
        measure,
        measured_record,
        record_path,
        write_record,
        write_rows,
    )
    from ridgeline.torch_model import check_buildable

    # what can be refused before minutes of measuring: the model, and whether it is built
    check_buildable(resolve_model(args.model, fetchable=False), args.fp8)
    if args.gpu_id:
        from ridgeline.hardware import catalog_id_named

        taken = catalog_id_named(args.gpu_id)
        if taken:
            raise InputError(f"--gpu-id {args.gpu_id} is the catalog's {taken}: the measured "
                             f"record needs an id of its own (e.g. my-{taken})")
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
    memory: float | None = None
    if result.probes:
        memory = args.memory_gib * 2**30 if args.memory_gib else result.memory_bytes
        if memory is None:
            raise InputError(f"{args.device}: the runtime reports no memory size; give "
                             f"--memory-gib (the rows are written, to {args.output})")
        write_record(accelerator_record(result, memory), record)
    rated = None
    if args.rated_gpu:
        from ridgeline.hardware import resolve_accelerator

        rated = resolve_accelerator(args.rated_gpu)
    lines = [f"{result.device_name} ({args.device})"]
    for p in result.probes:
        unit = "GB/s" if "bandwidth" in p.name else "TFLOP/s"
        value = p.value / 1e9 if unit == "GB/s" else p.value / 1e12
        line = f"  {p.name:<28} {value:>10,.2f} {unit}  ({p.detail})"
        if rated and unit == "GB/s":
            line += f"  rated {rated.memory_bandwidth_bytes_per_s / 1e9:,.0f} GB/s"
        lines.append(line)
    if memory is not None:
        lines.append(f"  memory recorded {memory / 2**30:,.1f} GiB ("
                     + ("--memory-gib" if args.memory_gib else "as the runtime reports it")
                     + ")")
    lines += [f"  skipped: {s}" for s in result.skipped]
    validate = (f"ridgeline validate {shlex.quote(args.output)} --gpu-file "
                f"{shlex.quote(str(record))}")
    if memory is not None:
        lines.append(f"wrote {len(result.rows)} rows to {args.output} and the measured device "
                     f"to {record}; next: {validate}")
    else:  # the rows name a device no catalog holds: validate needs a record of it
        earlier = measured_record(record)
        lines.append(f"wrote {len(result.rows)} rows to {args.output} (no probes: no device "
                     "record); " + (f"an earlier run's record is beside them; next: {validate}"
                                    if earlier and earlier.get("id") == result.gpu_id else
                                    f"to validate them, give --gpu-file a record of "
                                    f"{result.gpu_id} (a run without --skip-probes writes one)"))
    return WroteFile(args.output, "\n".join(lines))


def _check_measure_output(output: str, out: Path, record: Path | None) -> None:
    """Before minutes of measuring: the CSV's folder exists, and neither the CSV nor the
    device record beside it (``record``; None with --skip-probes) is a file this command did
    not write (a measurements file or a catalog record would be lost)."""
    from ridgeline.measure import measured_record, wrote_rows

    if out.is_dir() or not out.parent.is_dir():
        raise InputError(f"-o {output}: " + ("a folder, not a CSV file" if out.is_dir()
                                             else "its folder does not exist"))
    if out.exists() and not wrote_rows(out):
        raise InputError(f"-o {output} exists and is not rows `ridgeline measure` wrote: not "
                         "overwriting it (remove it or choose another name)")
    if record is not None and record.exists() and measured_record(record) is None:
        raise InputError(f"{record} (the device record beside -o {output}) exists and is not "
                         "one `ridgeline measure` wrote: not overwriting it (remove it or "
                         "choose another name)")

def _require_rows(files: list[str], errors: tuple[str, ...], rows: tuple[Any, ...]) -> None:
    if not rows:
        raise InputError(f"{', '.join(files)}: no readable rows" + (
            f" ({len(errors)} unreadable: " + "; ".join(errors[:3]) + ")" if errors
            else " (a header and nothing under it)"))


def _check_output(output: str) -> dict[str, Any]:
    """Refuse to write the profile over a file that is not a profile (an input is refused
    before, as for every command: cli_output_files.refuse_writing_over_input); the profiles an
    existing profile file holds, by engine (none for a new file)."""
    import json
    from pathlib import Path

    out = Path(output).expanduser()
    if not out.exists():
        return {}
    try:
        data = json.loads(out.read_text("utf-8")) if out.stat().st_size < 2**24 else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        data = None
    if not (isinstance(data, dict) and isinstance(data.get("engines"), dict)):
        raise InputError(f"-o {output} exists and is not a profile JSON: not overwriting it "
                         "(remove it or choose another name)")
    return dict(data["engines"])


def cmd_validate(args: argparse.Namespace) -> Any:
    from dataclasses import replace

    from ridgeline.engines import load_profile_file
    from ridgeline.measurements import read_measurement_files
    from ridgeline.past_roofline import beyond_roofline, refuse_past_roofline
    from ridgeline.predict import row_engine
    from ridgeline.reports.validation import ValidationReport, prediction_steps
    from ridgeline.scoring import validate

    _register_gpu_files(args)
    result = refuse_past_roofline(read_measurement_files(args.file))  # absurd rows: unreadable
    _require_rows(args.file, result.errors, result.rows)
    profiles = load_profile_file(args.profile) if args.profile else None
    predictions = validate(result.rows, profiles)
    # a row faster than its deployment's roofline is scored, and flagged: calibrate leaves
    # such rows out (a card named wrong, speculative decoding)
    past = {r.id: floor for r, floor in beyond_roofline(result.rows)}
    predictions = [p if p.id not in past else replace(
        p, caveat="; ".join(c for c in (p.caveat, f"measured past the roofline's "
                                       f"{past[p.id]:,.4g}: " + (
                                           "a TTFT under a millisecond: seconds written as ms?"
                                           if p.metric == "ttft_ms" and p.measured < 1 else
                                           "is the card right? speculative decoding?")
                                       + " (calibrate leaves it out)") if c))
        for p in predictions]
    if all(p.predicted is None for p in predictions):
        raise InputError(f"{', '.join(args.file)}: no row could be predicted: "
                         + "; ".join(f"{p.id}: {p.reason}" for p in predictions[:3]))
    steps = prediction_steps(result.rows, predictions, profiles) if args.explain else ()
    notes: tuple[str, ...] = ()
    if profiles and not {row_engine(r) for r in result.rows} & set(profiles):
        notes = (f"{args.profile} holds {', '.join(sorted(profiles))}, and no row here is of "
                 f"{'that engine' if len(profiles) == 1 else 'those engines'}: every row was "
                 "read with the bundled profiles",)
    return ValidationReport(result.rows, tuple(predictions), result.errors, not args.summary,
                            steps, args.strict, notes)

def cmd_calibrate(args: argparse.Namespace) -> Any:
    import json
    from pathlib import Path

    from ridgeline.calibrate import fit_profiles
    from ridgeline.calibrate_audit import coverage, fit_cautions
    from ridgeline.calibrate_held import held_parameters
    from ridgeline.engines import bundled_profiles, engine_id
    from ridgeline.measurements import performance_rows, read_measurement_files
    from ridgeline.past_roofline import beyond_roofline, refuse_past_roofline
    from ridgeline.predict import row_engine
    from ridgeline.reports.validation import (
        CalibrationReport,
        prediction_steps,
        profile_steps,
    )
    from ridgeline.scoring import error_stats, validate
    from ridgeline.units import plural

    existing = _check_output(args.output)
    _register_gpu_files(args)
    result = refuse_past_roofline(read_measurement_files(args.file))  # absurd rows: unreadable
    files = ", ".join(args.file)
    _require_rows(args.file, result.errors, result.rows)
    # rows faster than their deployment's roofline cannot be fitted: named and left out
    beyond = beyond_roofline(result.rows)
    dropped = {id(r) for r, _ in beyond}
    rows = [r for r in result.rows if id(r) not in dropped]
    skipped = tuple(f"{r.id}: {r.value:,.4g} {r.unit} is past the roofline's {floor:,.4g} for "
                    f"{r.model} on {r.num_gpus} x {r.gpu} (is the card right? speculative "
                    "decoding?)" for r, floor in beyond)
    if not rows:
        raise InputError(f"{files}: every row is past its roofline ({skipped[0]})")
    # rows the model cannot predict (an unknown model or card, a deployment that does not fit)
    # cannot steer the fit: named and left out, as the fit leaves them
    unpredicted = {p.id: p.reason for p in validate(performance_rows(rows))
                   if p.predicted is None}
    skipped += tuple(f"{row_id}: no prediction ({reason})"
                     for row_id, reason in unpredicted.items())
    rows = [r for r in rows if r.id not in unpredicted]
    if not rows:
        raise InputError(f"{files}: no row can be predicted ({skipped[0]})")
    if args.strict and (result.errors or skipped):  # for CI: nothing written from a partial set
        n, m = len(result.errors), len(skipped)
        raise InputError(f"--strict: {n} {plural(n, 'row')} unreadable and {m} left out "
                         f"(past the roofline, or with no prediction), no profile written: "
                         f"{(*result.errors, *skipped)[0]}")
    engines = list(dict.fromkeys(args.engine)) if args.engine else None  # each fitted once
    if engines:  # named engines the rows do not hold: say which the rows do hold
        held = sorted({row_engine(r) for r in rows})
        missing = [e for e in dict.fromkeys(engine_id(e) for e in engines) if e not in held]
        if missing:
            raise InputError(f"{files}: no rows of {', '.join(missing)} (its engines: "
                             f"{', '.join(held)})")
    # the output is checked before the fit, not after it
    out_dir = Path(args.output).resolve().parent
    if not out_dir.is_dir():
        raise InputError(f"cannot write {args.output}: no folder {out_dir}")
    profiles = fit_profiles(rows, engines,
                            lambda line: print(f"calibrate: {line}", file=sys.stderr, flush=True),
                            priors=bundled_profiles())  # where the rows pin nothing, as bundled
    if not profiles:
        raise InputError(f"{files}: no throughput or latency rows to fit")
    kept = {e: p for e, p in existing.items() if e not in profiles}  # other engines' fits
    data = {"_about": f"ridgeline profile fitted on {files}",
            "engines": {**kept, **{e: {**p.to_dict(), "coverage": coverage(rows, p).to_dict()}
                                   for e, p in profiles.items()}}}
    try:
        Path(args.output).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {args.output}: {exc}") from None

    def by_metric(preds: list[Any]) -> tuple[Any, ...]:
        return tuple(error_stats(preds, lambda p: p.metric))

    scored = [r for r in rows if row_engine(r) in profiles]  # the engines this run refitted
    bundled = validate(scored)
    before = by_metric(bundled)
    refitted = validate(scored, profiles)
    after = by_metric(refitted)
    far = [p for p in bundled if p.predicted is not None and p.error is not None
           and not 0.2 <= p.predicted / p.measured <= 5]
    cautions = [f"{len(far)} {plural(len(far), 'row')} read more than 5× off the bundled "
                f"prediction ({', '.join(p.id for p in far[:3])}{', …' if len(far) > 3 else ''}): "
                "a unit slipped (ms written as tok/s, seconds as ms)? the wrong card or model?"
                ] if far else []
    if kept:
        cautions.append(f"{args.output} held profiles for {', '.join(sorted(kept))}: kept beside "
                        "this run's (remove the file to start afresh)")
    cautions += [f"{engine}: {name} efficiency fitted at 100 % of rated, which no engine reaches: "
                "are the rows from a faster card than they name?"
                for engine, p in profiles.items()
                for name, value in (("bandwidth", p.bandwidth_efficiency),
                                    ("compute", p.compute_efficiency)) if value >= 0.999
                and f"{name} share" not in dict(held_parameters(p, bundled_profiles().get(engine)))]
    worse = {s.group: s for s in before}

    def squared_log(preds: list[Any]) -> float:  # the fit's objective, near enough
        logs = [math.log(p.predicted / p.measured) ** 2 for p in preds
                if p.predicted and p.measured]
        return sum(logs) / len(logs) if logs else 0.0

    closer = squared_log(refitted) < squared_log(bundled)
    cautions += [f"{s.group}: this profile misses its own rows by {s.median_abs_error:.1%} "
                 f"(median) against the bundled profile's {worse[s.group].median_abs_error:.1%}"
                 + (": it fits them closer on the whole (mean squared log error "
                    f"{squared_log(bundled):.4f} → {squared_log(refitted):.4f}), a few far rows "
                    "pulling it; where the bundled profile already reads them this well, keep it"
                    if closer else ": the rows disagree with each other (one condition "
                    "measured far apart?)")
                 for s in after if s.group in worse
                 and s.median_abs_error > worse[s.group].median_abs_error]
    few = {e: p.fitted_rows for e, p in profiles.items() if p.fitted_rows < FEW_ROWS}
    cautions += [f"{engine}: fitted on {n} {plural(n, 'row')}: the 'after' column is how far "
                 "the profile bends to its own rows, not its error on new ones; hold some rows "
                 "out of the file and score them with `ridgeline validate --profile`"
                 for engine, n in few.items()]
    cautions += fit_cautions(profiles, rows, bundled_profiles())
    # --explain: each profile's formula and coefficients, then every row through it
    steps = (*profile_steps(profiles), *prediction_steps(scored, refitted, profiles)) \
        if args.explain else ()
    return CalibrationReport(profiles, before, after, args.output, steps=steps,
                             unreadable=tuple(result.errors), skipped=skipped,
                             cautions=tuple(cautions),
                             coverage={e: coverage(rows, p) for e, p in profiles.items()})


def _measurement_files(p: argparse.ArgumentParser, together: str) -> None:
    """validate's and calibrate's inputs: measurement CSVs, ``together`` one set, and the
    accelerator records their rows name."""
    p.add_argument("file", metavar="FILE", nargs="+",
                   help=f"CSVs in the format of validation/README.md ({together} together)")
    p.add_argument("--gpu-file", action="append", metavar="FILE",
                   help="accelerator records the rows refer to (e.g. from `measure`)")


def register(sub: Any) -> None:

    p = sub.add_parser("page", help="an interactive roofline page with batch/context sliders")
    p.add_argument("model", nargs="?", metavar="MODEL",
                   help="catalog model (default: llama-3.1-70b, llama-3.1-8b, gpt-oss-120b)")
    p.add_argument("--gpu", type=_name_list(_accelerator_name),
                   help="accelerators to offer, comma-separated")
    p.add_argument("--counts", default=[1, 2, 4, 8], type=_count_list("accelerator count"),
                   help="accelerator counts to offer (default 1,2,4,8)")
    p.add_argument("--weights", type=_name_list(_weight_name),
                   help="weight formats to offer (default: as stored, fp8, awq-int4; for "
                   "llama.cpp as stored, q8_0, q4_k_m)")
    p.add_argument("--kv-dtypes", type=_name_list(_kv_name),
                   help="KV dtypes to offer (default: bf16, fp8; for llama.cpp f16, q8_0)")
    p.add_argument("--engine", default="vllm", type=_typed(_engine_name),
                   help="the engine whose calibrated expectation and pool the page draws "
                   "(default vllm)")
    p.add_argument("--profile", metavar="FILE",
                   help="engine profiles from `ridgeline calibrate` (default: the bundled ones)")
    p.add_argument("-o", "--output", default="roofline.html",
                   help="the HTML file to write (default roofline.html)")
    _output(p)
    p.set_defaults(handler=cmd_page)

    p = sub.add_parser("measure", help="measure this device: bandwidth, matmuls, model steps")
    p.add_argument("--device", default="cpu", type=_typed(_torch_device),
                   help="cpu, cuda, cuda:1, mps")
    p.add_argument("--quick", action="store_true", help="a small grid (minutes, not tens)")
    p.add_argument("--batches", type=_count_list("batch", MAX_BATCH),
                   help="decode batches, comma-separated (default 1,8,32,64,128,256; 1,4 quick)")
    p.add_argument("--contexts", type=_count_list("context"),
                   help="contexts in tokens (default 512,2048,8192,32768; 128,512 quick)")
    p.add_argument("--fp8", action="store_true",
                   help="linear weights in fp8 e4m3, run by torch._scaled_mm (W8A8, as an FP8 "
                   "checkpoint); the LM head and the cache stay in --dtype")
    p.add_argument("--skip-probes", action="store_true",
                   help="only the model's steps (no bandwidth or matmul probes, no device record)")
    p.add_argument("--model", default="llama-3.2-1b",
                   help="catalog model or config.json, built with random weights")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"],
                   help="the model's weights, activations and cache (default float32 on a CPU, "
                   "bfloat16 on a GPU)")
    p.add_argument("--gpu-id", type=_typed(_device_id),
                   help="id for the measured device in the rows (letters, digits, - _ .)")
    p.add_argument("--memory-gib", type=_positive_float("memory GiB"),
                   help="device memory to record (default: what CUDA or Metal reports, or "
                   "the machine's RAM on a CPU)")
    p.add_argument("--rated-gpu", type=_typed(_accelerator_name),
                   help="catalog accelerator to compare the probes with")
    p.add_argument("-o", "--output", required=True, metavar="rows.csv",
                   help="measurements CSV to write (validation/README.md's format)")
    _output(p)
    p.set_defaults(handler=cmd_measure)

    p = sub.add_parser("validate", help="predict every row of measurements CSVs, with errors")
    _measurement_files(p, "scored")
    p.add_argument("--profile", metavar="FILE", help="engine profiles from `ridgeline calibrate`")
    p.add_argument("--summary", action="store_true", help="only the error tables")
    p.add_argument("--strict", action="store_true",
                   help="exit 2 when a row is unreadable or has no prediction (for CI)")
    _output(p, plot=True)
    p.set_defaults(handler=cmd_validate)

    p = sub.add_parser("calibrate", help="fit engine profiles to your own measurements")
    _measurement_files(p, "fitted")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="profile JSON to write")
    p.add_argument("--engine", action="append", type=_typed(_engine_name),
                   help="fit only this engine (repeatable)")
    p.add_argument("--strict", action="store_true",
                   help="exit 2, writing nothing, when a row is unreadable or past its roofline "
                   "(for CI)")
    _output(p)
    p.set_defaults(handler=cmd_calibrate)
