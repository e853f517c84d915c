"""MODEL, one way for every command, settled before the parse: those that take it first (fit,
kv, moe, plan, …) take ``--model NAME`` too, moved to where MODEL goes (as a pasted ``vllm
serve --model`` or SGLang ``--model-path`` is); those that take it as ``--model`` (roofline,
utilization) take it first too, moved to their --model. Either way the model given twice is
taken once where the two agree, and refused where they differ."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ridgeline.cli_config_file import MOVED_FLAGS  # the flags read as MODEL: --model(-path)
from ridgeline.errors import InputError


def takes_model_first(parser: argparse.ArgumentParser, command: str) -> bool:
    """Whether ``command`` takes MODEL as its first word (a positional named ``model``):
    fit, kv, moe, plan, model, page; not roofline or utilization, whose model is --model."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices.get(command)
            return sub is not None and any(a.dest == "model" and not a.option_strings
                                           for a in sub._actions)
    return False


def model_flag_moved(argv: Sequence[str], parser: argparse.ArgumentParser
                     ) -> tuple[list[str], bool]:
    """``argv`` with its first --model or --model-path value moved to where MODEL goes, for a
    command that takes MODEL first (``kv --model qwen3-32b --context 4k``), and whether one
    was; where MODEL was also typed first and names the same model, it is kept once."""
    out = list(argv)
    if not out or not takes_model_first(parser, out[0]):
        return out, False
    for i, token in enumerate(out):
        flag, _, value = token.partition("=")
        if flag in MOVED_FLAGS:
            if not value and i + 1 < len(out):
                value = out.pop(i + 1)
            out.pop(i)
            if len(out) > 1 and out[1] == value:  # MODEL typed as well, the same: once
                out.pop(1)
            out.insert(1, value)
            return out, True
    return out, False


# the commands whose model is --model that take it first too, as MODEL (the others whose model
# is --model take another word first: observe its source)
MODEL_FIRST_TOO = ("roofline", "utilization")


def model_word_moved(argv: Sequence[str]) -> list[str]:
    """``argv`` with MODEL, typed first to a command whose model is --model (``roofline
    qwen3-32b --gpu h100``), given as its --model; kept once where --model names it too, and
    refused (InputError) where --model names another."""
    out = list(argv)
    if len(out) < 2 or out[0] not in MODEL_FIRST_TOO or out[1].startswith("-"):
        return out
    word = out.pop(1)
    given = [token.partition("=")[2] if "=" in token else
             (out[i + 1] if i + 1 < len(out) else "")
             for i, token in enumerate(out) if token.partition("=")[0] == "--model"]
    other = next((g for g in given if g != word), None)
    if other is not None:
        raise InputError(f"the model is given twice: {word} as MODEL and {other} by --model; "
                         "give it once")
    return out if given else [out[0], "--model", word, *out[1:]]
