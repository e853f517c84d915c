"""CLI: hardware and model — the bundled accelerators and models, or one record with
its sources."""

from __future__ import annotations

import argparse
from typing import Any

from ridgeline.cli import _model, _output
from ridgeline.cli_load import load_model
from ridgeline.cli_types import _not_empty
from ridgeline.errors import InputError


def cmd_hardware(args: argparse.Namespace) -> Any:
    from ridgeline.hardware import load_accelerator_file, resolve_accelerator
    from ridgeline.reports.hardware import HardwareRecords, hardware_list, hardware_record

    if args.gpu is not None:  # --gpu NAME, as every other command spells it
        if args.name is not None and args.name != args.gpu:
            raise InputError(f"NAME ({args.name!r}) and --gpu ({args.gpu!r}) both name the "
                             "accelerator: give one")
        args.name = args.gpu
    if args.gpu_file and args.name is not None:
        raise InputError(f"NAME ({args.name!r}) and --gpu-file both name the accelerator: give one")
    if args.gpu_file:
        return hardware_record(load_accelerator_file(args.gpu_file))
    if args.name is not None:
        names = [name.strip() for name in args.name.split(",")]
        if len(names) > 1:  # h100,h200: each record in turn, as roofline takes a list
            if not all(names):
                raise InputError(f"{args.name!r} has an empty name between its commas")
            cards = [resolve_accelerator(name) for name in names]
            ids = [card.id for card in cards]
            if len(set(ids)) < len(ids):
                twice = next(card for i, card in enumerate(ids) if card in ids[:i])
                raise InputError(f"{args.name!r} names {twice} twice")
            return HardwareRecords(tuple(hardware_record(card) for card in cards))
        return hardware_record(resolve_accelerator(args.name))
    return hardware_list()


def cmd_model(args: argparse.Namespace) -> Any:
    from ridgeline.reports.model import model_list, model_report

    if args.model is None:
        if args.fetch:
            raise InputError("--fetch reads a MODEL from the Hugging Face Hub: name one")
        return model_list()
    return model_report(load_model(args))


def register(sub: Any) -> None:

    p = sub.add_parser("hardware", help="the accelerator catalog, or one record with sources")
    p.add_argument("name", nargs="?", metavar="NAME",
                   help="an accelerator id or alias, or several comma-separated (none: the "
                   "whole catalog)")
    p.add_argument("--gpu", metavar="NAME", type=_not_empty("accelerator name"),
                   help="the same as NAME")
    p.add_argument("--gpu-file", metavar="FILE", type=_not_empty("accelerator file path"),
                   help="show a record from a JSON file")
    _output(p)
    p.set_defaults(handler=cmd_hardware)

    p = sub.add_parser("model", help="layers, attention geometry, experts, params, bytes "
                       "(no MODEL: the bundled models; `models` is the same command)")
    _model(p, optional=True)
    _output(p)
    p.set_defaults(handler=cmd_model)
