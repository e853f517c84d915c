"""scripts/gpu_session.sh rehearsed with measuring stood in for: its plan comes first and a
refused model stops it before the device; every validate its log prints runs, against the
record of the device the rows name; rows that do not validate together exit 1."""

from __future__ import annotations

import csv
import inspect
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
from tests.test_measure import TINY, stand_in_measure

ROOT = Path(__file__).resolve().parent.parent
# the python the script runs: `-m ridgeline` with measure stood in for, the rest as python;
# test_measure's stand-in written into it (importing that module would import pytest in each
# of the session's processes, a fifth of their time)
STAND_IN = f"""import os, sys
args = sys.argv[1:]
if args[:2] != ["-m", "ridgeline"]:
    os.execv(sys.executable, [sys.executable, *args])
from typing import Any
from ridgeline import measure
from ridgeline.cli import main
{inspect.getsource(stand_in_measure)}
measure.measure = stand_in_measure
sys.exit(main(args[2:]))
"""


def run_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The script run with measuring stood in for on two tiny models (the first with probes,
    the second steps only), named as the script names catalog models (no folder: it names
    files by them); ``env`` overrides its settings. The run and its $OUT."""
    runner = tmp_path / "stand-in.py"
    runner.write_text(STAND_IN)
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {runner} \"$@\"\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "first.json").write_text(json.dumps(TINY))
    (tmp_path / "second.json").write_text(json.dumps({**TINY, "num_hidden_layers": 3}))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    settings = {"OUT": str(out), "DEVICE": "cuda", "QUICK": "--quick", "MODEL": "first.json",
                "EXTRA": "second.json:1,4:128", "PYTHON": str(python),
                "PYTHONPATH": str(Path(ridgeline.__file__).resolve().parents[1]), **env}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_session.sh")],
                          env={**os.environ, **settings}, capture_output=True, text=True,
                          timeout=300, check=False)
    return done, out


@pytest.mark.skipif(shutil.which("bash") is None, reason="the script is bash")
@pytest.mark.parametrize(("device", "card", "verdict"), [
    # a GPU session (measure --card) named by an alias, read as its catalog id, h200-sxm (the
    # catalog id itself, the script's default, runs in the last test below)
    ("cuda", "h200", "validate-catalog.json"),
    ("cpu", "", "validate-probed.json"),  # the CPU rehearsal: no catalog card is a CPU
])
def test_every_validate_the_session_prints_runs_against_the_named_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        device: str, card: str, verdict: str) -> None:
    """measure runs under its own id (it refuses the catalog's) with --card, which writes the
    rows again naming the catalog's card: each validate the log prints names rows with the
    record of the id they hold (measure's own rows and the probed record), or the card's copy
    alone (its spec sheet), never a record no row names; the end validates every model's
    card copy (on a CPU, no card: its own rows against its probed record)."""
    done, out = run_session(tmp_path, monkeypatch, DEVICE=device, GPU_ID=card)
    card = resolve_accelerator(card).id if card else card  # the files name the catalog id
    log = (out / "log.txt").read_text()
    assert done.returncode == 0, log
    assert log.count("dry run (nothing measured") == 2  # each model's plan, before measuring
    commands = [shlex.split(line[line.index("ridgeline validate"):])
                for line in log.splitlines() if ": ridgeline validate " in line]
    # with a card, each model's validate against the probes and against the card; without,
    # against the probes only
    assert len(commands) == (4 if card else 2)
    measured_id = f"measured-{card or device}"
    for argv in commands:
        rows = list(csv.DictReader(open(argv[2], newline="")))  # noqa: SIM115
        if "--gpu-file" in argv:
            record = json.loads(Path(argv[argv.index("--gpu-file") + 1]).read_text())
            assert {r["gpu"] for r in rows} == {record["id"]} == {measured_id}
        else:
            assert card and {resolve_accelerator(r["gpu"]).id for r in rows} == {card}
        assert main([*argv[1:], "--json"]) == 0
        checked = json.loads(capsys.readouterr().out)
        assert checked["rows"] and all(r["predicted"] for r in checked["rows"])
        assert not any("not used" in note for note in checked["notes"])
    summary = json.loads((out / verdict).read_text())
    models = {r["model"] for r in summary["rows"]}
    assert {r["gpu"] for r in summary["rows"]} == {card or measured_id} and len(models) == 2


@pytest.mark.skipif(shutil.which("bash") is None, reason="the script is bash")
def test_the_plan_comes_first_and_a_refused_model_stops_the_session_before_the_device(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DRY_RUN prints each model's plan and measures nothing; a model measure would refuse,
    in any place of EXTRA, stops the session at its plan, before the first model is
    measured (no rows, no device record)."""
    done, out = run_session(tmp_path, monkeypatch, DRY_RUN="1")
    assert done.returncode == 0, done.stdout
    assert done.stdout.count("dry run (nothing measured") == 2
    assert sorted(p.name for p in out.iterdir()) == ["log.txt"]
    done, out = run_session(tmp_path, monkeypatch, EXTRA="second.json:1:128 no-such-model:1:128")
    assert done.returncode == 1 and "unknown model 'no-such-model'" in done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["log.txt"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="the script is bash")
def test_a_session_whose_rows_do_not_validate_together_exits_1_keeping_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first model measured again as an extra gives rows of the same ids in two files,
    which validate refuses together: the session says so in its exit status (the log's last
    line is still its end), and every file measure wrote stays."""
    done, out = run_session(tmp_path, monkeypatch, EXTRA="first.json:1,4:128")
    assert done.returncode == 1 and "ids must be unique" in done.stdout
    assert done.stdout.splitlines()[-1].startswith("done ")
    assert (out / "measured-h200-sxm-first.json-rows.h200-sxm.csv").exists()
