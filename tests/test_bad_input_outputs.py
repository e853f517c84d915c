"""Bad input (audit): an output option that names one of the command's own inputs is refused,
one line and exit 2, before any work; the input is left as it was."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent
ACCELERATORS = ROOT / "src/ridgeline/data/accelerators/datacenter.json"
MODELS = ROOT / "src/ridgeline/data/models"
FIXTURES = Path(__file__).parent / "fixtures"


def h100_record(tmp_path: Path, name: str = "mine.html") -> Path:
    """The catalog's H100 SXM as a --gpu-file record, under ``name``."""
    record = next(r for r in json.loads(ACCELERATORS.read_text("utf-8")) if r["id"] == "h100-sxm")
    path = tmp_path / name
    path.write_text(json.dumps({**record, "id": "my-h100", "aliases": []}), "utf-8")
    return path


def refused(capsys: pytest.CaptureFixture[str], path: Path, flag: str, *argv: str) -> str:
    """Run ``argv``; assert exit 2, one line naming ``flag`` and the input, ``path`` intact."""
    before = path.read_bytes()
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, (argv, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"{flag} " in err and "is the input" in err, err
    assert path.read_bytes() == before
    return err


def test_plot_over_the_gpu_file_is_refused(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    record = h100_record(tmp_path)
    refused(capsys, record, "--plot", "decode", "llama-3.1-8b", "--gpu-file", str(record),
            "--plot", str(record))


def test_plot_over_the_models_config_is_refused_by_any_spelling(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's folder is read as its config.json; a relative, dotted or linked spelling
    of the same file is the same file."""
    folder = tmp_path / "llama"
    folder.mkdir()
    config = folder / "config.html"  # a suffix --plot draws, on the file the model reads
    config.write_text((MODELS / "meta-llama--Llama-3.2-1B.json").read_text("utf-8"), "utf-8")
    (folder / "config.json").symlink_to(config)
    monkeypatch.chdir(tmp_path)
    refused(capsys, config, "--plot", "kv", "llama", "--context", "4k", "--plot",
            "./llama/../llama/config.html")
    link = tmp_path / "link.html"
    os.link(config, link)  # a hard link: another name, one file
    refused(capsys, config, "--plot", "fit", "llama/config.html", "--gpu", "h100",
            "--plot", str(link))


def test_export_over_the_trace_is_refused(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,200,20\n", "utf-8")
    refused(capsys, trace, "--export", "simulate", "llama-3.1-8b", "--gpu", "h100",
            "--trace", str(trace), "--export", str(trace))


def test_export_over_a_length_file_is_refused(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("100\n200\n", "utf-8")
    refused(capsys, lengths, "--export", "simulate", "llama-3.1-8b", "--gpu", "h100", "--rate",
            "2", "--num-requests", "5", "--input-len", f"file:{lengths}", "--export",
            str(lengths))


def test_emit_measurements_over_the_observed_source_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = tmp_path / "bench.json"
    bench.write_bytes((FIXTURES / "vllm_bench.json").read_bytes())
    refused(capsys, bench, "--emit-measurements", "observe", str(bench), "--model",
            "llama-3.1-8b", "--gpu", "h100", "--emit-measurements", str(bench))


def test_calibrate_over_its_gpu_file_is_refused(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """-o was compared with the rows only; the --gpu-file beside them is an input too."""
    record = h100_record(tmp_path, "card.json")
    rows = tmp_path / "rows.csv"
    rows.write_text("id\n", "utf-8")
    refused(capsys, record, "-o", "calibrate", str(rows), "--gpu-file", str(record), "-o",
            str(record))


def test_an_output_that_is_not_an_input_is_still_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = h100_record(tmp_path, "card.json")
    plot = tmp_path / "old.html"
    plot.write_text("an earlier chart", "utf-8")
    code, _, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu-file", str(record),
                           "--plot", str(plot))
    assert code == 0, err
    assert plot.read_text("utf-8").startswith("<!doctype html>")


def test_a_missing_output_folder_is_said_in_one_wording_by_every_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """page said it after computing, with Python's errno text; measure said "its folder does
    not exist"; --plot "--plot PATH: no folder": now each says calibrate's and observe's words
    (cli_output_files.refuse_unwritable_output; calibrate's is pinned in test_calibrate)."""
    folder = tmp_path / "none"
    for name, argv in (
        ("p.html", ["page", "llama-3.1-8b", "--gpu", "h100", "-o"]),
        ("rows.csv", ["measure", "--quick", "--skip-probes", "-o"]),
        ("out.csv", ["observe", str(FIXTURES / "vllm_bench.json"), "--model", "llama-3.1-8b",
                     "--gpu", "h100", "--emit-measurements"]),
        ("chart.html", ["decode", "llama-3.1-8b", "--gpu", "h100", "--plot"]),
    ):
        code, out, err = run_cli(capsys, *argv, str(folder / name))
        assert (code, out) == (2, ""), argv
        assert err.strip().endswith(f"cannot write {folder / name}: no folder {folder}"), err


def test_export_into_a_missing_folder_is_refused_before_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """--export's folder is checked before any request is simulated, not after the run."""
    import ridgeline.sim.pipeline as pipeline

    def no_run(*_: object, **__: object) -> None:
        raise AssertionError("the run started before --export's folder was checked")

    monkeypatch.setattr(pipeline, "run_replica", no_run)
    missing = tmp_path / "no-such-folder" / "rows.csv"
    code, out, err = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--rate",
                             "2", "--num-requests", "5", "--export", str(missing))
    assert code == 2 and not out
    assert err.strip() == (f"ridgeline: error: cannot write {missing}: no folder "
                           f"{missing.parent}")
