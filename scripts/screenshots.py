#!/usr/bin/env python3
"""Regenerate the README's pictures: the roofline page (headless Chromium) and the
validate plot (matplotlib).

    python scripts/screenshots.py        # writes docs/page.png and docs/validate.png
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.browser import FLAGS, chromium_path  # noqa: E402

from ridgeline.cli import main  # noqa: E402


def run() -> int:
    docs = ROOT / "docs"
    docs.mkdir(exist_ok=True)
    main(["validate", str(ROOT / "validation" / "measurements.csv"), "--summary", "--plot",
          str(docs / "validate.png")])
    exe = chromium_path()
    if exe is None:
        print("no Chromium: the page screenshot was not made", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "roofline.html"
        main(["page", "llama-3.1-70b", "-o", str(page)])
        subprocess.run([exe, *FLAGS, f"--user-data-dir={tmp}/profile",
                        f"--screenshot={docs / 'page.png'}", "--window-size=1000,1500",
                        page.as_uri()], check=True, capture_output=True, timeout=120)
    return 0


if __name__ == "__main__":
    sys.exit(run())
