"""CLI: a command's usage line: its positionals, then what a run needs, each choice as its
alternatives, the rest left to the help's sections. `ridgeline decode --help` said
`--gpu NAME` where a card record (--gpu-file) or a custom card's figures serve as well, and
`plan`'s left out its load (--rate or --trace); each line now gives the ways."""

from __future__ import annotations

import argparse
import re


def shown_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The flags and arguments a help lists: all but the hidden ones (a pasted launch line's
    no-ops, llama.cpp's -c refused with its translation)."""
    return [a for a in parser._actions if a.help != argparse.SUPPRESS]


def short_usage(parser: argparse.ArgumentParser, width: int = 0) -> str:
    """'ridgeline decode MODEL (--gpu NAME | --gpu-file FILE | --peak-tflops TFLOPS
    --bandwidth-gbs GB/S --gpu-memory-gib GIB) [options]': the positionals, the options a run
    needs (argparse's required ones, a required choice of flags as its alternatives, and
    where the command requires an accelerator, each way to give one: ``_accelerator_choice``),
    the rest left to the sections below; wrapped under the first word past the command
    where longer than ``width`` (the help's "usage: " included; 0: one line)."""
    formatter = argparse.HelpFormatter(parser.prog)
    words = [formatter._format_args(a, formatter._get_default_metavar_for_positional(a))
             for a in shown_actions(parser) if not a.option_strings]
    choices = [g for g in parser._mutually_exclusive_groups if g.required]
    for action in shown_actions(parser):
        group = next((g for g in choices if action in g._group_actions), None)
        if group is not None:  # plan's load: (--rate RATE | --trace FILE), at its first flag
            if action is group._group_actions[0]:
                words.append("(" + " | ".join(_flag(a) for a in group._group_actions
                                              if a.help != argparse.SUPPRESS) + ")")
        elif action.dest == "gpu" and parser.get_default("gpu_required") is True:
            words.append(_accelerator_choice(parser))
        elif action.option_strings and action.required:
            words.append(_flag(action))
    return _wrapped(parser.prog, [*words, "[options]"], width)


def _flag(action: argparse.Action) -> str:
    """An option as a usage line writes it: its first spelling and its value's metavar."""
    formatter = argparse.HelpFormatter("")
    return f"{action.option_strings[0]} " + formatter._format_args(
        action, formatter._get_default_metavar_for_optional(action))


def _accelerator_choice(parser: argparse.ArgumentParser) -> str:
    """The ways a command that requires an accelerator takes one, those it has: a catalog
    card (--gpu NAME), a record (--gpu-file FILE), a custom card's peak and bandwidth (with
    its memory where the command requires a model, as cli_load.load_accelerator asks)."""
    dests = {a.dest: a for a in shown_actions(parser)}
    ways = [["gpu"], ["gpu_file"], ["peak_tflops", "bandwidth_gbs"]]
    model = dests.get("model")
    if model is not None and model.required:  # a model's custom card needs its memory
        ways[2].append("gpu_memory_gib")
    shown = [" ".join(_flag(dests[d]) for d in way) for way in ways
             if all(d in dests for d in way)]
    return shown[0] if len(shown) == 1 else "(" + " | ".join(shown) + ")"


def _wrapped(prog: str, words: list[str], width: int) -> str:
    """``prog`` and ``words`` on one line, or where "usage: " and they pass ``width``, on
    lines wrapped between words (a choice's alternatives between its bars), each further
    line under the first word past ``prog``."""
    line = " ".join([prog, *words])
    if not width or len("usage: ") + len(line) <= width:
        return line
    indent = " " * (len("usage: ") + len(prog) + 1)
    pieces = [p for w in words for p in re.split(r"(?<=\|) ", w)]  # "(a |", "b)"
    lines: list[str] = []
    current = prog
    for piece in pieces:
        start = 0 if lines else len("usage: ")
        if current != prog and start + len(current) + 1 + len(piece) > width:
            lines.append(current)
            current = indent + piece
        else:
            current = f"{current} {piece}"
    return "\n".join([*lines, current])
