#!/usr/bin/env python3
"""Re-run the command pinned beside each figure the docs' prose quotes, and compare.

A figure in a sentence (not in a `$ ridgeline …` block, which refresh_readme.py re-runs) is
pinned by an HTML comment next to it, which Markdown does not show:

    <!-- pin: ridgeline fit llama-3.1-8b --gpu h100 --max-model-len 4096 --json | conversations = 118 -->

After the `|` come one or more checks, `;` between them. `PATH = VALUE` reads the command's
JSON: PATH is keys and list indices joined by dots (`engines.0.conversations`), VALUE a number
as the prose writes it, the JSON figure rounded to the digits written (`8.6` holds for
8.5612; `33,760` for 33760), a unit after it scaling the JSON's seconds, bytes, bytes per
second or fraction (`33.11 ms`, `59.3 µs`, `59.03 GiB`, `70.6 GB`, `3.7 TB/s`, `14.8 %`), or
a word compared as it stands (`true`, `vllm`). A pin fails where the figure moved, the field
is gone or the command fails. A command without `--json` takes `contains "TEXT"` on what it
prints, stderr included, so a refusal's words can be pinned too. Identical commands run once, side by side.

    python scripts/prose_pins.py             check every pin in README.md and docs/*.md
    python scripts/prose_pins.py FILE...     check the pins of these files only
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PIN = re.compile(r"<!--\s*pin:(.*?)-->", re.S)
# checks split at `;`, but not inside a `contains "…"` text
CHECK = re.compile(r'\s*(contains\s+"[^"]*"|[^;\s][^;]*)')
NUMBER = re.compile(r"-?[\d,]*\d(\.\d+)?")
# a unit after the number scales the JSON's SI figure to the prose's: 33.11 ms for 0.03311 s
UNITS = {"ms": 1e3, "µs": 1e6, "GiB": 2.0**-30, "GB": 1e-9, "TB/s": 1e-12, "%": 1e2}


@dataclass(frozen=True)
class Check:
    path: str  # dotted JSON path, or "" with `contains`
    expected: str  # as the pin writes it

    @property
    def contains(self) -> bool:
        return not self.path


@dataclass(frozen=True)
class Pin:
    document: str
    line: int
    command: str  # `ridgeline …` as the pin writes it
    checks: tuple[Check, ...]


def parse_check(text: str) -> Check:
    """`conversations = 118` → Check("conversations", "118"); `contains "9 conv"` → Check("", "9 conv")."""
    text = text.strip()
    if text.startswith("contains "):
        quoted = text[len("contains "):].strip()
        if len(quoted) < 2 or quoted[0] != '"' or quoted[-1] != '"':
            raise ValueError(f'`contains` wants a "quoted" text: {text!r}')
        return Check("", quoted[1:-1])
    path, equals, expected = text.partition("=")
    if not equals or not path.strip() or not expected.strip() or " " in path.strip():
        raise ValueError(f"a check reads `PATH = VALUE` or `contains \"TEXT\"`: {text!r}")
    return Check(path.strip(), expected.strip().strip('"'))


def pins(text: str, document: str) -> list[Pin]:
    """Every pin in a document's text, each with the line it sits on."""
    found = []
    for match in PIN.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        command, bar, body = match.group(1).partition("|")
        command = " ".join(command.split())
        if not bar or not command.startswith("ridgeline "):
            raise ValueError(f"{document}:{line}: a pin reads `ridgeline … | CHECK; CHECK`")
        checks = tuple(parse_check(part) for part in CHECK.findall(body) if part.strip())
        if not checks:
            raise ValueError(f"{document}:{line}: a pin without a check")
        if any(c.contains for c in checks) == ("--json" in shlex.split(command)):
            raise ValueError(f"{document}:{line}: `PATH = VALUE` reads a --json command, "
                             "`contains` a text one")
        found.append(Pin(document, line, command, checks))
    return found


def run(command: str) -> tuple[int, str, str]:
    argv = shlex.split(command)
    result = subprocess.run([sys.executable, "-m", "ridgeline", *argv[1:]], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    return result.returncode, result.stdout, result.stderr


def lookup(data: object, path: str) -> object:
    """The value at a dotted path: `levers.0.conversations` → data["levers"][0]["conversations"]."""
    for key in path.split("."):
        if isinstance(data, list) and key.lstrip("-").isdigit():
            data = data[int(key)]
        elif isinstance(data, dict) and key in data:
            data = data[key]
        else:
            raise KeyError(key)
    return data


def agrees(actual: object, expected: str) -> bool:
    """Whether a JSON value reads as the prose writes it: 59.03 for 59.0292 (two digits
    written, two kept), 118 for 118.05, `21.26 ms` for 0.0212611, `true` for True, a word
    for itself."""
    number, _, unit = expected.partition(" ")
    if NUMBER.fullmatch(number) and (not unit or unit in UNITS) \
            and isinstance(actual, (int, float)) and not isinstance(actual, bool):
        digits = len(number.partition(".")[2])
        scaled = float(actual) * UNITS.get(unit, 1.0)
        return round(scaled, digits) == float(number.replace(",", ""))
    if isinstance(actual, bool) or actual is None:
        return json.dumps(actual) == expected
    return str(actual) == expected


def failures(pin: Pin, output: tuple[int, str, str]) -> list[str]:
    """What a pin's command now says where it differs from the figures pinned."""
    where = f"{pin.document}:{pin.line}: {pin.command}"
    code, stdout, stderr = output
    if pin.checks[0].contains:
        return [f"{where}\n    does not print {c.expected!r}" for c in pin.checks
                if c.expected not in stdout + stderr]
    if code != 0:
        return [f"{where}\n    exit {code}: {stderr.strip().splitlines()[-1] if stderr.strip() else ''}"]
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError as error:
        return [f"{where}\n    its output is not JSON ({error})"]
    found = []
    for check in pin.checks:
        try:
            actual = lookup(data, check.path)
        except (KeyError, IndexError):
            found.append(f"{where}\n    {check.path}: no such field")
            continue
        if not agrees(actual, check.expected):
            found.append(f"{where}\n    {check.path} = {actual!r}, the prose says {check.expected}")
    return found


def check(documents: list[Path]) -> tuple[int, list[str]]:
    """Every pin in these documents, run: how many figures they pin, and what each stale one
    says."""
    all_pins: list[Pin] = []
    for document in documents:
        name = str(document.relative_to(ROOT)) if document.is_relative_to(ROOT) else str(document)
        all_pins += pins(document.read_text(encoding="utf-8"), name)
    # the slow ones first (plan's simulated checks, then simulate), so none starts last
    commands = sorted({pin.command for pin in all_pins},
                      key=lambda c: (not c.startswith("ridgeline plan"),
                                     not c.startswith("ridgeline simulate"), c))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        outputs = dict(zip(commands, pool.map(run, commands)))
    stale = [f for pin in all_pins for f in failures(pin, outputs[pin.command])]
    return sum(len(pin.checks) for pin in all_pins), stale


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="documents (default: README.md, docs/*.md)")
    args = parser.parse_args()
    documents = [f.resolve() for f in args.files] or DOCUMENTS
    try:
        count, stale = check(documents)
    except (ValueError, OSError) as error:
        print(f"prose_pins: {error}", file=sys.stderr)
        return 2
    print(f"{count} pinned figures, {len(stale)} stale", flush=True)
    if stale:
        print("stale figures in prose:\n  " + "\n  ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
