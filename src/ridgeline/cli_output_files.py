"""CLI: the files a command writes — refused, before any work, where one is an input of the
same command or cannot be written (a folder, or in a folder that does not exist) — and the
report that one was written."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any

from ridgeline.errors import InputError

# the options that write a file, by attribute: none may name a file the command reads
# (calibrate -o over its rows, simulate --export over its --trace, --plot over --gpu-file)
OUTPUT_OPTIONS = {"output": "-o", "plot": "--plot", "export": "--export",
                  "emit_measurements": "--emit-measurements"}


def refuse_bad_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any work, an output no write can make (``refuse_unwritable_output``)
    and one that is one of the command's inputs: every other option's value that names a
    file (``file:PATH`` as a length takes it, a model's folder as its config.json) is
    compared with it as the file system sees them, so that ``./sub/../rows.csv``, a link and
    a hard link are the same file."""
    given = vars(args)
    for key, flag in OUTPUT_OPTIONS.items():
        output = given.get(key)
        if not isinstance(output, str):
            continue
        refuse_unwritable_output(output)
        for other, value in given.items():
            if other in OUTPUT_OPTIONS:
                continue
            for name in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(name, str) and _same_file(output, name):
                    raise InputError(f"{flag} {output} is the input {name}: not "
                                     "overwriting it (choose another name)")


def refuse_unwritable_output(output: str) -> None:
    """Refuse, before any work, an output file no write can make: a folder's name, or a file
    in a folder that does not exist: every output option (OUTPUT_OPTIONS: -o, --plot,
    --export, --emit-measurements), checked before any command runs (``refuse_bad_outputs``),
    and --plot's own check (plots.check_target)."""
    from pathlib import Path

    if not output.strip():  # Path("") is the working folder
        raise InputError("output path is empty")
    out = Path(output).expanduser()
    if out.is_dir():
        raise InputError(f"cannot write {output}: a folder, not a file")
    folder = out.resolve().parent
    if not folder.is_dir():
        raise InputError(f"cannot write {output}: no folder {folder}")


def _same_file(output: str, name: str) -> bool:
    from pathlib import Path

    path = Path(name.removeprefix("file:")).expanduser()
    try:
        if path.is_dir():  # a model's folder is read as its config.json
            path = path / "config.json"
        return path.exists() and os.path.samefile(Path(output).expanduser(), path)
    except (OSError, ValueError):  # no such output yet, a name too long, a NUL in it
        return False


@dataclass(frozen=True)
class WroteFile:
    path: str | None  # None: nothing written (`page --json` without -o prints its data)
    what: str
    steps: tuple[Any, ...] = ()
    facts: tuple[tuple[str, Any], ...] = ()  # what --json adds: counts, the opening view

    def to_dict(self) -> dict[str, Any]:
        return {"wrote": self.path, "what": self.what, **dict(self.facts)}

    def text_lines(self) -> list[str]:
        if "\n" in self.what:
            return self.what.splitlines()
        return [f"wrote {self.path}: {self.what}"]
