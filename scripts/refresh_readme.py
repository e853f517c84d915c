#!/usr/bin/env python3
"""Re-run every `$ ridgeline …` example in README.md and replace its output, so the README's
figures stay true.   python scripts/refresh_readme.py
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BLOCK = re.compile(r"```\n(\$ ridgeline .*?)```", re.S)


def run(command: str) -> str:
    argv = shlex.split(command)
    result = subprocess.run([sys.executable, "-m", "ridgeline", *argv[1:]], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    return (result.stdout + result.stderr).rstrip()


def refresh(block: str) -> str:
    commands = [line[2:] for line in block.splitlines() if line.startswith("$ ridgeline ")]
    return "\n\n".join(f"$ {c}\n{run(c)}" for c in commands) + "\n"


def main() -> int:
    text = README.read_text(encoding="utf-8")
    updated = BLOCK.sub(lambda m: "```\n" + refresh(m.group(1)) + "```", text)
    README.write_text(updated, encoding="utf-8")
    print(f"refreshed {len(BLOCK.findall(text))} example blocks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
