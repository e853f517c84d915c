"""CLI: profile — what an engine profile holds (the bundled ones, or a `calibrate -o` file):
each fitted term with its unit and meaning, the shares by accelerator group, the rows behind it.
A command of its own, as `hardware` and `model` show the other records ridgeline computes
with, not a `calibrate` flag: showing needs neither calibrate's FILE nor its -o."""

from __future__ import annotations

import argparse
from typing import Any

from ridgeline.cli import _output
from ridgeline.cli_types import _engine_name, _not_empty, _typed
from ridgeline.errors import InputError


def cmd_profile(args: argparse.Namespace) -> Any:
    from ridgeline.engine_platforms import engine_platform_problem
    from ridgeline.engines import ENGINES, bundled_profiles, engine_id, load_profile_file
    from ridgeline.hardware import resolve_accelerator
    from ridgeline.reports.profile import profile_report
    from ridgeline.reports.validation import profile_steps

    profiles = bundled_profiles() if args.profile is None else load_profile_file(args.profile)
    origin = "bundled" if args.profile is None else args.profile
    if args.engine is not None:
        key = engine_id(args.engine)
        if key not in profiles:
            raise InputError(f"{origin} holds no profile for {key} (it has "
                             f"{', '.join(sorted(profiles))})")
        chosen = {key: profiles[key]}
    else:  # the order `--engine` lists them in
        chosen = {e: profiles[e] for e in sorted(profiles, key=ENGINES.index)}
    acc = None if args.gpu is None else resolve_accelerator(args.gpu)
    if acc is not None and args.engine is not None:  # refused as decode refuses the pair
        problem = engine_platform_problem(key, acc)
        if problem:
            raise InputError(problem)
    steps = profile_steps(chosen) if args.explain else ()
    return profile_report(origin, tuple(chosen.values()), acc, steps)


def register(sub: Any) -> None:
    p = sub.add_parser("profile", help="an engine profile's fitted terms, shares by card group "
                       "and rows (bundled, or --profile FILE)")
    p.add_argument("--profile", metavar="FILE", type=_not_empty("profile path"),
                   help="engine profiles from `ridgeline calibrate -o` (none: the bundled ones)")
    p.add_argument("--engine", type=_typed(_engine_name),
                   help="only this engine's profile (none: every engine the file holds)")
    p.add_argument("--gpu", metavar="NAME", type=_not_empty("accelerator name"),
                   help="also the shares on this card: its group's, the bandwidth under the "
                   "engine's ceiling, and what it reaches")
    _output(p)
    p.set_defaults(handler=cmd_profile)
