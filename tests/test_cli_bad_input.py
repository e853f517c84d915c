"""Bad input (audit of every command's options): an output path that is a device or a pipe is
refused without being read, and a refusal says each thing once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ridgeline
from ridgeline.cli import main
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent


def run_guarded(*argv: str) -> subprocess.CompletedProcess[str]:
    """The command in a child process with a time limit: the bug these pin was a run that
    never ended (a device's read is endless, a FIFO's open waits for a writer)."""
    env = {**os.environ, "PYTHONPATH": str(Path(ridgeline.__file__).parents[1])}
    env.pop("RIDGELINE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "ridgeline", *argv], capture_output=True,
                          text=True, env=env, timeout=60)


def not_a_file(tmp_path: Path, kind: str, name: str) -> Path:
    """An existing path that is no regular file: /dev/full, or a FIFO nobody writes."""
    if kind == "fifo":
        target = tmp_path / name
        os.mkfifo(target)
        return target
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    return Path("/dev/full")


def refused_unread(run: subprocess.CompletedProcess[str], words: str) -> None:
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, run.stderr
    assert words in run.stderr, run.stderr


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_measure_refuses_an_output_that_is_a_device_or_a_pipe(tmp_path: Path,
                                                              kind: str) -> None:
    """-o /dev/full ran until killed: the check for rows measure wrote read the device."""
    target = not_a_file(tmp_path, kind, "rows.csv")
    refused_unread(run_guarded("measure", "--quick", "-o", str(target)),
                   f"-o {target} exists and is not rows `ridgeline measure` wrote")


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_calibrate_refuses_an_output_that_is_a_device_or_a_pipe(tmp_path: Path,
                                                                kind: str) -> None:
    """-o /dev/full ran until killed: the check for a profile to keep read the device."""
    target = not_a_file(tmp_path, kind, "profile.json")
    refused_unread(run_guarded("calibrate", str(ROOT / "validation" / "lowbatch.csv"),
                               "--engine", "trtllm", "-o", str(target)),
                   f"-o {target} exists and is not a profile JSON")


def test_page_refuses_an_output_that_is_a_pipe(tmp_path: Path) -> None:
    """-o on a FIFO waited for ever in the open that looks for a page ridgeline wrote."""
    target = not_a_file(tmp_path, "fifo", "page.html")
    refused_unread(run_guarded("page", "llama-3.2-1b", "--gpu", "h100", "-o", str(target)),
                   f"-o {target} exists and is not a page ridgeline wrote")


def test_simulate_points_to_fit_once_where_no_pool_is_left(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A card too small for the weights said "(see `ridgeline fit`) (see `ridgeline fit`)":
    the refusal's own pointer, and again where no lever rescues the pool."""
    code, out, err = run_cli(capsys, "simulate", "llama-3.2-1b", "--gpu", "h100",
                             "--gpu-memory-gib", "1.5", "--rate", "2", "--num-requests", "5")
    assert code == 2 and not out and "Traceback" not in err, err
    refusal = err.splitlines()[-1]
    assert refusal.startswith("ridgeline: error: does not fit on 1 x h100-sxm: its weights "
                              "alone"), err
    assert refusal.count("`ridgeline fit") == 1, refusal


def test_a_config_naming_no_architecture_says_so(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A config with neither architectures nor model_type is read as a generic decoder, and
    `model` says its architecture is not named rather than printing a blank."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
        "intermediate_size": 11008, "vocab_size": 32000, "max_position_embeddings": 4096}))
    assert main(["model", str(config)]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line.startswith("  architecture   not named")
