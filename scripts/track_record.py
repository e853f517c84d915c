"""Write src/ridgeline/data/track_record.json: every decode and prefill row of
validation/*.csv that the bundled profiles predict, with its optimism (+ where the prediction
promised more than was measured), card, engine, phase and model kind. Predictions print the
record's figure where a card's rows lean one way (track_record.track_record_caution).

Run after anything that moves a prediction (fit_profiles.py, a catalog or model change);
tests/test_track_record.py fails while the bundled file is stale.

    python scripts/track_record.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "src" / "ridgeline" / "data" / "track_record.json"


def current_record() -> dict[str, object]:
    """The record as today's code predicts validation/*.csv."""
    from ridgeline.measurements import read_measurement_files
    from ridgeline.past_roofline import refuse_past_roofline
    from ridgeline.scoring import validate
    from ridgeline.track_record import record_rows

    rows, files = [], []
    for path in sorted((ROOT / "validation").glob("*.csv")):
        read = refuse_past_roofline(read_measurement_files([path]))  # as validate reads it
        rows += read.rows
        files += [f"validation/{path.name}"] * len(read.rows)
    found = record_rows(rows, validate(rows), files)
    return {"_about": "Written by scripts/track_record.py from validation/*.csv: each decode "
                      "and prefill row the bundled profiles predict, with its optimism "
                      "(+ where the prediction promised more than was measured).",
            "rows": [{k: v for k, v in asdict(r).items() if k != "excess_ms" or v is not None}
                     for r in found]}


def record_text(record: dict[str, object]) -> str:
    """The file's text: one row a line."""
    rows = record["rows"]
    assert isinstance(rows, list)
    lines = ",\n  ".join(json.dumps(r) for r in rows)
    return f'{{"_about": {json.dumps(record["_about"])},\n "rows": [\n  {lines}\n ]}}\n'


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 where the bundled file differs from today's record")
    args = parser.parse_args()
    text = record_text(current_record())
    if args.check:
        stale = TARGET.read_text() != text
        print(f"{TARGET.name}: {'stale' if stale else 'current'}")
        return 1 if stale else 0
    TARGET.write_text(text)
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
