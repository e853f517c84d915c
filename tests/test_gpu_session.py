"""scripts/gpu_session.sh rehearsed with measuring stood in for: every `next:` its log prints
runs, and validates rows against the record of the device they name."""

from __future__ import annotations

import csv
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import ridgeline
from ridgeline.cli import main
from ridgeline.hardware import resolve_accelerator
from tests.test_measure import TINY

ROOT = Path(__file__).resolve().parent.parent
# the python the script runs: `-m ridgeline` with measure stood in for, the rest as python
STAND_IN = f"""import os, sys
args = sys.argv[1:]
if args[:2] != ["-m", "ridgeline"]:
    os.execv(sys.executable, [sys.executable, *args])
sys.path.insert(0, {str(ROOT)!r})
from ridgeline import measure
from ridgeline.cli import main
from tests.test_measure import stand_in_measure
measure.measure = stand_in_measure
sys.exit(main(args[2:]))
"""


@pytest.mark.skipif(shutil.which("bash") is None, reason="the script is bash")
def test_every_next_step_the_session_prints_validates_against_the_named_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """measure runs under its own id (it refuses the catalog's), and the rows are re-carded
    to the catalog's card: each `next:` names rows with the record of the id they hold
    (measure's own rows and the probed record), or the re-carded copy alone (the catalog's
    card), never a record no row names."""
    runner = tmp_path / "stand-in.py"
    runner.write_text(STAND_IN)
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {runner} \"$@\"\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    # tiny models, named as the script names catalog models (no folder: it names files by them)
    (tmp_path / "first.json").write_text(json.dumps(TINY))
    (tmp_path / "second.json").write_text(json.dumps({**TINY, "num_hidden_layers": 3}))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "DEVICE": "cpu", "QUICK": "--quick",
           "MODEL": "first.json", "EXTRA": "second.json:1,4:128", "PYTHON": str(python),
           "PYTHONPATH": str(Path(ridgeline.__file__).resolve().parents[1])}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_session.sh")], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    log = (out / "log.txt").read_text()
    assert done.returncode == 0, log
    nexts = [shlex.split(line.split("next: ", 1)[1]) for line in log.splitlines()
             if "next: " in line]
    assert len(nexts) == 4  # each model's measure, and its re-carded copy
    for argv in nexts:
        assert argv[:2] == ["ridgeline", "validate"]
        rows = list(csv.DictReader(open(argv[2], newline="")))  # noqa: SIM115
        if "--gpu-file" in argv:
            record = json.loads(Path(argv[argv.index("--gpu-file") + 1]).read_text())
            assert {r["gpu"] for r in rows} == {record["id"]} == {"measured-h200-sxm"}
        else:
            assert {resolve_accelerator(r["gpu"]).id for r in rows} == {"h200-sxm"}
        assert main([*argv[1:], "--json"]) == 0
        checked = json.loads(capsys.readouterr().out)
        assert checked["rows"] and all(r["predicted"] for r in checked["rows"])
        assert not any("not used" in note for note in checked["notes"])
    summary = json.loads((out / "validate-catalog.json").read_text())
    assert {r["gpu"] for r in summary["rows"]} == {"h200-sxm"}
