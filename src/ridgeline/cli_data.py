"""CLI: measurement CSVs — validate scores every row against its prediction, calibrate fits
engine profiles to them. `page` and `measure` live in cli_page and cli_measure."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from ridgeline.cli import _output
from ridgeline.cli_types import _engine_name, _not_empty, _typed
from ridgeline.errors import InputError

# fewer rows than this for an engine: its in-sample figures say little about new rows (a
# profile sets at least five numbers: two shares, the step's, a layer's and a prompt layer's)
FEW_ROWS = 12


def _register_gpu_files(args: argparse.Namespace,
                        clash: str = "rows naming it would take one of them"
                        ) -> tuple[dict[str, str], dict[str, str]]:
    """Register each --gpu-file's record, by its id and aliases; its path by the record's
    id, and each alias left to the catalog (hardware.register) with what it is there.
    ``clash``: what two records of one id would do, as the refusal says it."""
    from ridgeline.catalog import normalise
    from ridgeline.hardware import load_accelerator_file, register

    seen: dict[str, str] = {}
    records: dict[str, str] = {}
    shadowed: dict[str, str] = {}
    for path in args.gpu_file or []:
        record = load_accelerator_file(path)  # its id checked by measure's rule
        key = normalise(record.id)  # 'LAB-card' and 'lab-card' name one record
        if key in seen:
            raise InputError(f"--gpu-file {path} and {seen[key]} both hold the id "
                             f"{record.id!r}: {clash}")
        seen[key] = path
        for alias, catalog_id in register(record):
            shadowed[normalise(alias)] = (f"the catalog's {catalog_id} and an alias of "
                                          f"--gpu-file {path}'s {record.id}")
        records[record.id] = path
    return records, shadowed


def _refuse_shadowed_aliases(shadowed: dict[str, str], rows: tuple[Any, ...]) -> None:
    """Refuse rows naming a --gpu-file record's alias that the catalog answers to: they would
    read the catalog's card, the record's alias unread (a record copied from `hardware
    --json` keeps the catalog's aliases; no row naming one, nothing is in doubt)."""
    from ridgeline.catalog import normalise

    row = next((r for r in rows if normalise(r.gpu) in shadowed), None)
    if row is not None:
        raise InputError(f"{row.id}: its gpu {row.gpu!r} is {shadowed[normalise(row.gpu)]}: "
                         "name the record's id in the rows, or drop the alias from it")


def _unnamed_gpu_files(records: dict[str, str], rows: tuple[Any, ...]) -> tuple[str, ...]:
    """A --gpu-file record no row names changes nothing: each row reads the card it names
    (`measure`'s rows name the id given with --gpu-id, the record's, unless renamed)."""
    from ridgeline.hardware import resolve_accelerator

    def card(name: str) -> str:  # the id a row's accelerator resolves to, or its own name
        try:
            return resolve_accelerator(name).id
        except InputError:
            return name

    named = sorted({card(r.gpu) for r in rows})
    return tuple(f"--gpu-file {path}: no row names its id {record_id!r} (the rows name "
                 f"{', '.join(named[:3])}{', …' if len(named) > 3 else ''}), so it was not used"
                 for record_id, path in records.items() if record_id not in named)


def _require_rows(files: list[str], errors: tuple[str, ...], rows: tuple[Any, ...]) -> None:
    if not rows:
        raise InputError(f"{', '.join(files)}: no readable rows" + (
            f" ({len(errors)} unreadable: " + "; ".join(errors[:3])
            + ("; …" if len(errors) > 3 else "") + ")" if errors
            else " (a header and nothing under it)"))


def _check_output(output: str) -> dict[str, Any]:
    """Refuse to write the profile over a file that is not a profile (an input, a folder or
    a missing folder is refused before, as for every command: cli_output_files.
    refuse_bad_outputs); the profiles an
    existing profile file holds, by engine (none for a new file)."""
    import json
    from pathlib import Path

    out = Path(output).expanduser()
    if not out.exists():
        return {}
    try:  # a device or a pipe (/dev/full, a FIFO) is no profile, and is not read: it never ends
        data = json.loads(out.read_text("utf-8")) \
            if out.is_file() and out.stat().st_size < 2**24 else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        data = None
    if not (isinstance(data, dict) and isinstance(data.get("engines"), dict)):
        raise InputError(f"-o {output} exists and is not a profile JSON: not overwriting it "
                         "(remove it or choose another name)")
    return dict(data["engines"])


def _profile_notes(path: str, profiles: dict[str, Any], rows: list[Any]) -> tuple[str, ...]:
    """Which rows ``path``'s profiles priced, and how many of them each was fitted on (its
    fitted_ids): their errors are in sample, how far it bends to them, not its error on new
    rows; the other engines' rows were read with the bundled profiles."""
    from ridgeline.predict import row_engine
    from ridgeline.units import plural

    by_engine: dict[str, list[str]] = {}
    for r in rows:
        by_engine.setdefault(row_engine(r), []).append(r.id)
    notes = []
    for engine, ids in sorted(by_engine.items()):
        if engine in profiles:
            fitted = set(profiles[engine].fitted_ids)
            same = sum(1 for i in ids if i in fitted)
            many = "all" if same == len(ids) else f"{same:,}"
            notes.append(f"{path} priced the {len(ids):,} {engine} {plural(len(ids), 'row')}"
                         + (f"; {many} of them among the {len(fitted):,} it was fitted on: "
                            "their errors are in sample (how far it bends to its own rows), "
                            "not its error on new ones" if same else ""))
    others = sorted(e for e in by_engine if e not in profiles)
    if others:
        notes.append(f"the {', '.join(others)} rows were read with the bundled profiles")
    return tuple(notes)


def cmd_validate(args: argparse.Namespace) -> Any:
    from dataclasses import replace

    from ridgeline.engines import load_profile_file
    from ridgeline.measurements import KV_METRICS, performance_rows, read_measurement_files
    from ridgeline.past_roofline import beyond_roofline, refuse_past_roofline, why_past_roofline
    from ridgeline.predict import row_engine
    from ridgeline.reports.validation import ValidationReport, prediction_steps
    from ridgeline.scoring import fitted_row_ids, validate
    from ridgeline.unit_slips import slipped_rows

    records, shadowed = _register_gpu_files(args)
    result = refuse_past_roofline(read_measurement_files(args.file))  # absurd rows: unreadable
    _refuse_shadowed_aliases(shadowed, result.rows)
    _require_rows(args.file, result.errors, result.rows)
    profiles = load_profile_file(args.profile) if args.profile else None
    predictions = validate(result.rows, profiles)
    # a row far off in the direction of a unit slip is scored (the slip is a guess, and a row
    # far off for a real reason must show in the summary) and says which slip it looks like
    slips = slipped_rows(result.rows, [p.predicted for p in predictions])
    predictions = [p if p.id not in slips else replace(p, caveat="; ".join(
        c for c in (p.caveat, f"{slips[p.id]} (still scored"
                    + ("" if p.metric in KV_METRICS else "; calibrate leaves it out") + ")")
        if c)) for p in predictions]
    # a row faster than its deployment's roofline is scored, and flagged: calibrate leaves
    # such rows out (a card named wrong, speculative decoding)
    past = {r.id: (r, floor) for r, floor in beyond_roofline(result.rows)}
    predictions = [p if p.id not in past else replace(
        p, caveat="; ".join(c for c in (p.caveat, f"measured past the roofline's "
                                       f"{past[p.id][1]:,.4g} {past[p.id][0].unit}: "
                                       f"{why_past_roofline(past[p.id][0])}"
                                       " (calibrate leaves it out)") if c))
        for p in predictions]
    if all(p.predicted is None for p in predictions):  # a --gpu-file no row names first
        raise InputError(f"{', '.join(args.file)}: no row could be predicted: "
                         + "; ".join((*_unnamed_gpu_files(records, result.rows),
                                      *(f"{p.id}: {p.reason}" for p in predictions[:3]))))
    steps = prediction_steps(result.rows, predictions, profiles) if args.explain else ()
    notes = _unnamed_gpu_files(records, result.rows)
    if profiles and not {row_engine(r) for r in result.rows} & set(profiles):
        notes += (f"{args.profile} holds {', '.join(sorted(profiles))}, and no row here is of "
                 f"{'that engine' if len(profiles) == 1 else 'those engines'}: every row was "
                 "read with the bundled profiles",)
    elif profiles:
        notes += _profile_notes(args.profile, profiles, performance_rows(result.rows))
    return ValidationReport(result.rows, tuple(predictions), result.errors, not args.summary,
                            steps, args.strict, notes, tuple(slips.items()),
                            fitted_row_ids(result.rows, profiles))


def _refuse_unreadable_fit(engine: str, profile: Any, files: str) -> None:
    """Refuse a fitted profile that --profile would refuse to read (engines.EngineProfile.
    from_dict: a share of a rated figure under 1 %, the rows 100× slower than the card):
    such rows are no engine's measure, and the file would fail at its first use."""
    from ridgeline.engines import EngineProfile

    try:
        EngineProfile.from_dict(profile.to_dict(), f"{engine}'s fit")
    except InputError as exc:
        raise InputError(f"{files}: no profile written: {exc} (the rows run over 100× "
                         "slower than their cards' rated figures allow)") from None


def cmd_calibrate(args: argparse.Namespace) -> Any:
    import json
    from pathlib import Path

    from ridgeline.calibrate import fit_profiles
    from ridgeline.calibrate_audit import coverage, fit_cautions
    from ridgeline.calibrate_folds import held_out
    from ridgeline.calibrate_held import held_parameters
    from ridgeline.calibrate_moves import prediction_shift, profile_moves
    from ridgeline.engines import bundled_profiles, engine_id
    from ridgeline.measurements import performance_rows, read_measurement_files
    from ridgeline.past_roofline import beyond_roofline, refuse_past_roofline, why_past_roofline
    from ridgeline.predict import row_engine
    from ridgeline.reports.validation import (
        CalibrationReport,
        prediction_steps,
        profile_steps,
    )
    from ridgeline.scoring import error_stats, fitted_row_ids, validate
    from ridgeline.unit_slips import slipped_rows
    from ridgeline.units import plural

    existing = _check_output(args.output)
    records, shadowed = _register_gpu_files(args)
    result = refuse_past_roofline(read_measurement_files(args.file))  # absurd rows: unreadable
    _refuse_shadowed_aliases(shadowed, result.rows)
    files = ", ".join(args.file)
    _require_rows(args.file, result.errors, result.rows)
    # rows faster than their deployment's roofline cannot be fitted: named and left out
    beyond = beyond_roofline(result.rows)
    dropped = {id(r) for r, _ in beyond}
    rows = [r for r in result.rows if id(r) not in dropped]
    skipped = tuple(f"{r.id}: {r.value:,.4g} {r.unit} is past the roofline's {floor:,.4g} {r.unit} for "
                    f"{r.model} on {r.num_gpus} x {r.gpu} ({why_past_roofline(r)})"
                    for r, floor in beyond)
    if not rows:
        raise InputError(f"{files}: every row is past its roofline ({skipped[0]})")
    # rows the model cannot predict (an unknown model or card, a deployment that does not fit)
    # cannot steer the fit: named and left out, as the fit leaves them
    priced = list(zip(performance_rows(rows), validate(performance_rows(rows)), strict=True))
    unpredicted = {p.id: p.reason for _, p in priced if p.predicted is None}
    skipped += tuple(f"{row_id}: no prediction ({reason})"
                     for row_id, reason in unpredicted.items())
    # rows far off the bundled prediction in the direction of a unit slip (a TPOT in ms
    # written as tok/s): a fit would bend to them, so they are named and left out too
    slipped = slipped_rows([r for r, _ in priced], [p.predicted for _, p in priced])
    skipped += tuple(f"{row_id}: {words}" for row_id, words in slipped.items())
    rows = [r for r in rows if r.id not in unpredicted and r.id not in slipped]
    if not rows:
        raise InputError(f"{files}: no row can be predicted ("
                         + "; ".join((*_unnamed_gpu_files(records, result.rows), skipped[0]))
                         + ")")
    if args.strict and (result.errors or skipped):  # for CI: nothing written from a partial set
        n, m = len(result.errors), len(skipped)
        raise InputError(f"--strict: {n} {plural(n, 'row')} unreadable and {m} left out "
                         f"(past the roofline, a unit slip, or with no prediction), no profile "
                         f"written: "
                         f"{(*result.errors, *skipped)[0]}")
    engines = list(dict.fromkeys(args.engine)) if args.engine else None  # each fitted once
    if engines:  # named engines the rows do not hold: say which the rows do hold
        held = sorted({row_engine(r) for r in rows})
        missing = [e for e in dict.fromkeys(engine_id(e) for e in engines) if e not in held]
        if missing:
            raise InputError(f"{files}: no rows of {', '.join(missing)} (its engines: "
                             f"{', '.join(held)})")
    def progress(line: str) -> None:
        print(f"calibrate: {line}", file=sys.stderr, flush=True)

    profiles = fit_profiles(rows, engines, progress,
                            priors=bundled_profiles())  # where the rows pin nothing, as bundled
    if not profiles:
        raise InputError(f"{files}: no throughput or latency rows to fit")
    for e, p in profiles.items():  # a fit past what a profile may hold is not written
        _refuse_unreadable_fit(e, p, files)
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
    # each fitted row predicted by its engine refitted without it: the error on a new row
    folds = held_out(rows, profiles, bundled_profiles(), progress)
    held_stats = by_metric([p for h in folds for p in h.predictions])
    base = bundled_profiles()
    moves = {e: profile_moves(p, base[e], rows) for e, p in profiles.items() if e in base}
    shifts = {}
    for e, p in profiles.items():  # the rows it was fitted on, as the bundled and it price them
        ids = set(p.fitted_ids)
        mine = [i for i, r in enumerate(scored) if r.id in ids]
        shift = prediction_shift([bundled[i] for i in mine], [refitted[i] for i in mine])
        if shift is not None:
            shifts[e] = shift
    far = [p for p in bundled if p.predicted is not None and p.error is not None
           and not 0.2 <= p.predicted / p.measured <= 5]
    cautions = [f"{len(far)} {plural(len(far), 'row')} read more than 5× off the bundled "
                f"prediction ({', '.join(p.id for p in far[:3])}{', …' if len(far) > 3 else ''}): "
                "a unit slipped (ms written as tok/s, seconds as ms)? the wrong card or model?"
                ] if far else []
    if kept:
        cautions.append(f"{args.output} held profiles for {', '.join(sorted(kept))}: kept beside "
                        "this run's (remove the file to start afresh)")
    # (a bandwidth share at 100 %: fit_cautions, which judges it under the engine's ceiling)
    cautions += [f"{engine}: compute efficiency fitted at 100 % of rated, which no engine "
                 "reaches: are the rows from a faster card than they name?"
                 for engine, p in profiles.items() if p.compute_efficiency >= 0.999
                 and "compute share" not in dict(held_parameters(p, base.get(engine)))]
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
                 "the profile bends to its own rows, not its error on new ones (the 'held out' "
                 "column's); measure more, or score rows it never saw with "
                 "`ridgeline validate --profile`"
                 for engine, n in few.items()]
    seen = fitted_row_ids(scored)  # rows the bundled profile was fitted on: its 'before' too
    cautions += [f"{len(seen)} of these rows are among those the bundled profiles were fitted "
                 "on: the 'before' figures are in sample too"] if seen else []
    cautions += [f"{s.group}: held out, this profile misses its rows by {s.median_abs_error:.1%}"
                 f" (median) against the bundled profile's {worse[s.group].median_abs_error:.1%}"
                 ": on rows it has not seen it would do no better than the bundled one; keep "
                 "that, or measure more" for s in held_stats if s.group in worse
                 and s.median_abs_error >= worse[s.group].median_abs_error]
    cautions += fit_cautions(profiles, rows, bundled_profiles())
    cautions += _unnamed_gpu_files(records, result.rows)
    # --explain: each profile's formula and coefficients, then every row through it
    steps = (*profile_steps(profiles), *prediction_steps(scored, refitted, profiles)) \
        if args.explain else ()
    return CalibrationReport(profiles, before, after, args.output, steps=steps,
                             unreadable=tuple(result.errors), skipped=skipped,
                             cautions=tuple(cautions),
                             coverage={e: coverage(rows, p) for e, p in profiles.items()},
                             held_out=folds, held_out_stats=held_stats, moves=moves,
                             shifts=shifts)


def _measurement_files(p: argparse.ArgumentParser, together: str) -> None:
    """validate's and calibrate's inputs: measurement CSVs, ``together`` one set, and the
    accelerator records their rows name."""
    p.add_argument("file", metavar="FILE", nargs="+", type=_not_empty("measurements path"),
                   help=f"CSVs in the format of validation/README.md ({together} together)")
    p.add_argument("--gpu-file", action="append", metavar="FILE",
                   type=_not_empty("accelerator file path"),
                   help="accelerator records the rows refer to (e.g. from `measure`; "
                   "repeatable)")


def register(sub: Any) -> None:
    p = sub.add_parser("validate", help="predict every row of measurements CSVs, with errors")
    _measurement_files(p, "scored")
    p.add_argument("--profile", metavar="FILE", type=_not_empty("profile path"),
                   help="engine profiles from `ridgeline calibrate` (rows of an engine it "
                   "does not hold: the bundled profiles)")
    p.add_argument("--summary", action="store_true",
                   help="the error tables without the rows' table; rows with no prediction, "
                   "unit slips and rows off by over 2× either way still named under them (--json: "
                   "rows only those with no prediction, rows_left_out how many scored rows "
                   "it leaves out)")
    p.add_argument("--strict", action="store_true",
                   help="after the report, exit 2 when a row is unreadable or has no "
                   "prediction (for CI)")
    _output(p, plot=True)
    p.set_defaults(handler=cmd_validate)

    p = sub.add_parser("calibrate", help="fit engine profiles to your own measurements, "
                       "scored on them before, after and held out")
    _measurement_files(p, "fitted")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="profile JSON to write; an existing profile file keeps its other "
                   "engines' profiles beside this run's (any other file is not overwritten)",
                   type=_not_empty("output path"))
    p.add_argument("--engine", action="append", type=_typed(_engine_name),
                   help="fit only this engine (repeatable)")
    p.add_argument("--strict", action="store_true",
                   help="exit 2, writing nothing, when a row is unreadable, past its roofline, "
                   "far off in the direction of a unit slip or without a prediction (for CI)")
    _output(p)
    p.set_defaults(handler=cmd_calibrate)
