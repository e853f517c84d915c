#!/usr/bin/env python3
"""Re-run every `$ ridgeline …` example in README.md and docs/*.md and replace its output, so
the figures they show stay true; then check the figures pinned in their prose (prose_pins.py),
which only a person rewrites.

    python scripts/refresh_readme.py            rewrite the outputs in place
    python scripts/refresh_readme.py --check    rewrite nothing; exit 1 naming each stale block
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

import prose_pins

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```\n(\$ ridgeline .*?)```", re.S)


def run(command: str) -> str:
    argv = shlex.split(command)
    result = subprocess.run([sys.executable, "-m", "ridgeline", *argv[1:]], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    return (result.stdout + result.stderr).rstrip()


def refresh(block: str) -> str:
    commands = [line[2:] for line in block.splitlines() if line.startswith("$ ridgeline ")]
    return "\n\n".join(f"$ {c}\n{run(c)}" for c in commands) + "\n"


def refreshed(text: str) -> tuple[str, list[str]]:
    """The document with every example block's output re-run, and the first command of each
    block whose output changed."""
    stale: list[str] = []

    def replace(match: re.Match[str]) -> str:
        new = refresh(match.group(1))
        if new != match.group(1):
            stale.append(match.group(1).splitlines()[0])
        return "```\n" + new + "```"

    return BLOCK.sub(replace, text), stale


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="report stale blocks and exit 1 instead of rewriting them")
    args = parser.parse_args()
    all_stale: list[str] = []
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        if not BLOCK.search(text):
            continue
        updated, stale = refreshed(text)
        name = document.relative_to(ROOT)
        all_stale += [f"{name}: {first}" for first in stale]
        if not args.check and updated != text:
            document.write_text(updated, encoding="utf-8")
        print(f"{name}: {len(BLOCK.findall(text))} example blocks, {len(stale)} stale", flush=True)
    count, stale_figures = prose_pins.check(DOCUMENTS)
    print(f"prose: {count} pinned figures, {len(stale_figures)} stale", flush=True)
    if stale_figures:
        print("stale figures in prose (rewrite the sentence and its pin):\n  "
              + "\n  ".join(stale_figures), file=sys.stderr)
    if args.check and all_stale:
        print("stale example output:\n  " + "\n  ".join(all_stale), file=sys.stderr)
    return 1 if stale_figures or (args.check and all_stale) else 0


if __name__ == "__main__":
    sys.exit(main())
