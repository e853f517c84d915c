"""`validate` and `calibrate` on measurements they cannot use: absurd figures, repeated ids, a
file with nothing to score or fit, and an output that would destroy an input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ridgeline.measurements import COLUMNS, parse_row, read_measurements
from tests.conftest import LOWBATCH, run_cli

HEADER = ",".join(COLUMNS)
ROW = {"id": "r1", "model": "llama-3.1-8b", "weights_dtype": "bf16", "kv_dtype": "bf16",
       "gpu": "h100", "num_gpus": "1", "tp": "1", "batch": "8", "input_len": "0",
       "output_len": "128", "context_len": "1024", "metric": "decode_tok_s_per_user",
       "value": "50", "unit": "tok/s", "engine": "vllm", "source": "x", "notes": "y"}


@pytest.fixture
def fit_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """`calibrate` without its held-out folds (each a refit of its own), for a test whose
    claims are about what is refused, left out or written (test_validate_honesty.py pins the
    folds)."""
    from ridgeline import calibrate_folds

    monkeypatch.setattr(calibrate_folds, "HELD_OUT_MAX_ROWS", 0)


def line(**changes: str) -> str:
    return ",".join({**ROW, **changes}[c] for c in COLUMNS)


def csv_file(tmp_path: Path, *lines: str, name: str = "rows.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join([HEADER, *lines]) + "\n", encoding="utf-8")
    return path


LLAMA_8B_CONFIG = "meta-llama--Llama-3.1-8B.json"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    return run_cli(capsys, *args)


@pytest.mark.parametrize(("column", "text", "message"), [
    ("value", "1e300", "value must be a positive number from 1e-09 to below 1e+15, got '1e300'"),
    ("value", "nan", "value must be a positive number"),
    ("value", "inf", "value must be a positive number"),
    ("batch", "1000000000", "batch must be ≤ 1,000,000, got 1,000,000,000"),
    ("input_len", "200000000", "input_len must be ≤ 100,000,000"),
    ("output_len", "200000000", "output_len must be ≤ 100,000,000"),
    ("context_len", "200000000", "context_len must be ≤ 100,000,000"),
    ("num_gpus", "200000", "num_gpus must be ≤ 100,000"),
])
def test_absurd_figures_are_refused_when_a_row_is_read(tmp_path: Path, column: str, text: str,
                                                       message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_row({**ROW, column: text})
    result = read_measurements(csv_file(tmp_path, line(**{column: text}), line(id="ok")))
    assert [r.id for r in result.rows] == ["ok"]
    assert len(result.errors) == 1 and result.errors[0].startswith(f"r1: {message}")


def test_the_largest_figures_allowed_are_still_read() -> None:
    row = parse_row({**ROW, "batch": "1000000", "context_len": "100000000",
                     "num_gpus": "100000", "value": "9.9e14"})
    assert (row.batch, row.context_len, row.num_gpus) == (1_000_000, 100_000_000, 100_000)


def test_a_billion_batch_row_is_refused_before_any_prediction(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = csv_file(tmp_path, line(batch="1000000000"))
    code, _, err = run(capsys, "calibrate", str(path), "-o", str(tmp_path / "p.json"))
    assert code == 2 and "r1: batch must be ≤ 1,000,000" in err
    assert not (tmp_path / "p.json").exists()


def test_an_id_given_twice_in_a_file_is_an_error_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = csv_file(tmp_path, line(), line(value="60"))
    code, out, err = run(capsys, "validate", str(path))
    assert code == 2 and out == ""
    assert err == f"ridgeline: error: {path}: id 'r1' is on lines 2 and 3; ids must be unique\n"


def test_the_same_file_named_twice_is_an_error(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = csv_file(tmp_path, line())
    code, _, err = run(capsys, "validate", str(path), str(path))
    assert code == 2 and "is named twice" in err


def test_a_csv_exported_with_a_byte_order_mark_is_read(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "excel.csv"
    path.write_text("\ufeff" + HEADER + "\n" + line() + "\n", encoding="utf-8")
    assert [r.id for r in read_measurements(path).rows] == ["r1"]
    code, out, _ = run(capsys, "validate", str(path))
    assert code == 0 and "1 row scored" in out


def test_validate_with_nothing_scored_exits_2_with_the_reasons(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = csv_file(tmp_path, line(model="nobody/nothing-7b"),
                    line(id="r2", model="nobody/nothing-7b"))
    code, _, err = run(capsys, "validate", str(path))
    assert code == 2 and len(err.splitlines()) == 1
    assert f"{path}: no row could be predicted: r1: unknown model" in err and "r2: " in err


def test_a_row_without_a_prediction_keeps_its_reason_out_of_the_table(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the reason once stood in the error column, widening every row to its length
    path = csv_file(tmp_path, line(), *(line(id=f"x{i}", model="nobody/nothing-7b")
                                        for i in range(5)))
    code, out, _ = run(capsys, "validate", str(path))
    table = out.split("\n\n")[0].splitlines()
    assert code == 0 and all(len(row) == len(table[0]) for row in table)
    assert "† no prediction:" in out
    assert "x0, x1, x2 and 2 more: unknown model 'nobody/nothing-7b'" in out


@pytest.mark.parametrize(("argv", "kind"), [
    (["validate", "{d}"], "a measurements CSV file"),
    (["calibrate", "{d}", "-o", "{d}/p.json"], "a measurements CSV file"),
    (["validate", str(LOWBATCH), "--gpu-file", "{d}"], "an accelerator JSON file"),
    (["decode", "llama-3.1-8b", "--gpu", "h100", "--profile", "{d}"], "a profile JSON file"),
    (["decode", "llama-3.1-8b", "--gpu-file", "{d}"], "an accelerator JSON file"),
    (["page", "llama-3.1-8b", "--gpu", "h100", "--profile", "{d}", "-o", "{d}/p.html"],
     "a profile JSON file"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--config", "{d}"], "a YAML file"),
    (["simulate", "llama-3.1-8b", "--gpu", "h100", "--trace", "{d}"], "a trace file"),
    (["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "1", "--input-len", "file:{d}"],
     "a file of lengths"),
    (["observe", "{d}", "--model", "llama-3.1-8b", "--gpu", "h100"], "a metrics scrape"),
])
def test_a_folder_given_for_a_file_is_called_a_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], kind: str) -> None:
    """validate /tmp said "/tmp is not a readable CSV file ([Errno 21] Is a directory:
    '/tmp')"; every argument that reads a file says a folder is one, in one line, exit 2."""
    code, _, err = run(capsys, *(a.replace("{d}", str(tmp_path)) for a in argv))
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"{tmp_path} is a folder, not {kind}" in err and "Errno" not in err


def test_calibrate_with_no_predictable_row_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = csv_file(tmp_path, *(line(id=f"r{i}", model="nobody/nothing-7b") for i in range(6)))
    out = tmp_path / "p.json"
    code, _, err = run(capsys, "calibrate", str(path), "-o", str(out))
    assert code == 2 and f"{path}: no row can be predicted (r0: no prediction (unknown model" in err
    assert not out.exists()


def test_calibrate_needs_as_many_rows_as_the_fit_has_parameters(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The bandwidth share, a per-step and a per-layer overhead (two decode rows, no prompt:
    the compute share is held at the bundled one): three numbers that two rows leave free (one
    row used to be reproduced exactly, with a band of 1.00–1.00)."""
    path = csv_file(tmp_path, line(), line(id="r2", batch="16", value="45"))
    out = tmp_path / "p.json"
    code, _, err = run(capsys, "calibrate", str(path), "-o", str(out))
    assert code == 2 and "engine vllm: 2 predictable throughput or latency rows" in err
    assert "fit sets 3 parameters: it needs at least 3 (measure more)" in err
    assert not out.exists()


@pytest.mark.usefixtures("fit_only")
def test_calibrate_offers_engine_only_where_the_rows_hold_another_engine(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Too few rows of the one engine a file holds: the refusal had also said "or name the
    other engines with --engine", where there is none to name. It says so only beside rows of
    another engine, which --engine then fits alone."""
    rows = [line(id=f"s{i}", engine="sglang", batch=str(2 ** i), value=str(v))
            for i, v in enumerate((120, 115, 105, 95, 80, 60))]
    path = csv_file(tmp_path, line(), line(id="r2", batch="16", value="45"), *rows)
    code, _, err = run(capsys, "calibrate", str(path), "-o", str(tmp_path / "p.json"))
    assert code == 2 and "engine vllm: 2 predictable throughput or latency rows" in err
    assert "(measure more, or name the other engines with --engine)" in err
    code, _, _ = run(capsys, "calibrate", str(path), "-o", str(tmp_path / "p.json"),
                     "--engine", "sglang")
    assert code == 0


@pytest.mark.parametrize("spelling", ["same", "dotted"])
def test_calibrate_refuses_to_write_over_its_input(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        spelling: str) -> None:
    path = csv_file(tmp_path, *(line(id=f"r{i}", batch=str(2 ** i)) for i in range(6)))
    before = path.read_text()
    monkeypatch.chdir(tmp_path)
    output = "rows.csv" if spelling == "same" else "./sub/../rows.csv"
    (tmp_path / "sub").mkdir()
    code, _, err = run(capsys, "calibrate", "rows.csv", "-o", output)
    assert code == 2 and f"-o {output} is the input rows.csv" in err
    assert path.read_text() == before


@pytest.mark.usefixtures("fit_only")
def test_calibrate_refuses_to_overwrite_a_file_that_is_not_a_profile(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = csv_file(tmp_path, *(line(id=f"r{i}", batch=str(2 ** i)) for i in range(6)))
    other = tmp_path / "notes.txt"
    other.write_text("my notes\n")
    code, _, err = run(capsys, "calibrate", str(rows), "-o", str(other))
    assert code == 2 and "exists and is not a profile JSON" in err
    assert other.read_text() == "my notes\n"
    profile = tmp_path / "old.json"
    profile.write_text(json.dumps({"engines": {}}))
    assert run(capsys, "calibrate", str(rows), "-o", str(profile))[0] == 0
    assert "vllm" in json.loads(profile.read_text())["engines"]


def test_the_bundled_files_still_read_whole() -> None:
    result = read_measurements(LOWBATCH)
    assert result.rows and not result.errors


def test_calibrate_needs_distinct_conditions_not_repeats(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Four repeats of one setting are one equation: the fit's four parameters stay free."""
    path = csv_file(tmp_path, *(line(id=f"r{i}", value=str(v))
                                for i, v in enumerate((50, 51, 49, 50))))
    out = tmp_path / "p.json"
    code, _, err = run(capsys, "calibrate", str(path), "-o", str(out))
    assert code == 2 and "its 4 rows measure 1 distinct condition" in err and not out.exists()


@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_a_file_of_only_unreadable_rows_says_when_it_names_only_the_first_three(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    """Four rows, none readable: the one-line error counted four and named three, as if the
    list were whole; the fourth's absence is marked."""
    rows = [line(id=f"bad{i}", value="-1") for i in range(4)]
    path = csv_file(tmp_path, *rows)
    code, _, err = run(capsys, command, str(path), *(["-o", str(tmp_path / "p.json")]
                                                      if command == "calibrate" else []))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "4 unreadable: bad0" in err and "bad2" in err and "bad3" not in err
    assert err.rstrip().endswith("; …)")
    code, _, err = run(capsys, command, csv_file(tmp_path, *rows[:3]).as_posix(),
                       *(["-o", str(tmp_path / "p.json")] if command == "calibrate" else []))
    assert code == 2 and "…" not in err  # all three named: nothing left out


@pytest.mark.usefixtures("fit_only")
def test_calibrate_leaves_out_rows_past_the_roofline_and_names_unreadable_ones(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B at batch 1 on an H100 reads 16 GB a token: at most ~210 tok/s. A row of 240
    (an H200 run named h100) no efficiency can fit: it is named and left out; a row of -150 is
    named as unreadable; the profile written loads."""
    rows = [line(id=f"r{i}", batch=str(2 ** i), value=str(v))
            for i, v in enumerate((120, 115, 105, 95, 80, 60))]
    path = csv_file(tmp_path, *rows, line(id="fast", batch="1", context_len="128", value="240"),
                    line(id="neg", value="-150"))
    out = tmp_path / "p.json"
    code, text, _ = run(capsys, "calibrate", str(path), "-o", str(out))
    assert code == 0 and "left out: fast: 240 tok/s is past the roofline's" in text
    assert "unreadable: neg" in text
    profile = json.loads(out.read_text())["engines"]["vllm"]
    assert profile["band_low"] <= 1 <= profile["band_high"]
    code, _, _ = run(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--profile", str(out))
    assert code == 0
    strict = tmp_path / "strict.json"
    code, _, err = run(capsys, "calibrate", str(path), "-o", str(strict), "--strict")
    assert code == 2 and "--strict: 1 row unreadable and 1 left out (past the roofline" in err
    assert not strict.exists()
    every = csv_file(tmp_path, line(id="fast", batch="1", context_len="128", value="5000"),
                     name="fast.csv")
    code, _, err = run(capsys, "calibrate", str(every), "-o", str(tmp_path / "q.json"))
    assert code == 2 and "every row is past its roofline" in err


def test_a_context_shorter_than_its_own_prompt_and_output_is_unreadable(
        tmp_path: Path) -> None:
    """context_len is the sequence at the phase's end: 99 tokens cannot hold a 610-token
    prompt and 422 outputs (an audit found such a row scored). A TTFT row ends at its
    prompt, and a KV-capacity row's context_len is max_model_len, so neither is held to it."""
    path = csv_file(tmp_path,
                    line(id="short", input_len="610", output_len="422", context_len="99"),
                    line(id="ttft", input_len="1024", output_len="1", context_len="1024",
                         metric="ttft_ms", unit="ms", batch="1"),
                    line(id="kv", input_len="610", output_len="422", context_len="99",
                         metric="kv_cache_tokens", unit="tokens", value="100000"),
                    line(id="deep", input_len="512", output_len="0", context_len="4608"))
    result = read_measurements(path)
    assert [r.id for r in result.rows] == ["ttft", "kv", "deep"]
    (error,) = result.errors
    assert error.startswith("short:") and "context_len 99 is shorter than the 1,032 tokens" \
        in error


def test_a_calibration_on_few_rows_says_its_figures_are_in_sample(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Four rows fitted 'from 15 % to 0.6 %' had read as the profile's error; it is how far
    the profile bends to its own rows. And a profile fitted on these cards alone does not
    tell `decode` to calibrate on them."""
    path = csv_file(tmp_path, *(line(id=f"b{b}", batch=str(b), value=str(v))
                                for b, v in ((1, 120), (4, 110), (16, 95), (64, 60))))
    out_file = tmp_path / "p.json"
    code, out, _ = run(capsys, "calibrate", str(path), "-o", str(out_file))
    assert code == 0 and "(in sample: how far it bends to them)" in out
    assert "vllm: fitted on 4 rows: the 'after' column is how far the profile bends" in out
    code, out, err = run(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "8",
                         "--context", "2000", "--profile", str(out_file))
    assert code == 0 and "calibrate on this one" not in out + err


def test_validate_says_when_a_profile_serves_no_row(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "sglang.json"
    profile.write_text(json.dumps({"engines": {"sglang": {
        "engine": "sglang", "bandwidth_efficiency": 0.7, "compute_efficiency": 0.5,
        "step_overhead_s": 0.0, "layer_overhead_s": 1e-5}}}), encoding="utf-8")
    path = csv_file(tmp_path, line())
    code, out, _ = run(capsys, "validate", str(path), "--profile", str(profile))
    assert code == 0 and "no row here is of that engine: every row was read with the " \
        "bundled profiles" in out
    code, out, _ = run(capsys, "validate", str(path))
    assert "note:" not in out


def test_a_relative_config_path_is_read_beside_the_csv(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    bundled = Path(__file__).parent.parent / "src/ridgeline/data/models" / LLAMA_8B_CONFIG
    (folder / "config.json").write_text(bundled.read_text(encoding="utf-8"), encoding="utf-8")
    path = csv_file(folder, line(model="config.json"))
    monkeypatch.chdir(tmp_path)  # not the CSV's folder
    (row,) = read_measurements(path).rows
    assert row.model == str(folder / "config.json")
    code, out, _ = run(capsys, "validate", str(path))
    assert code == 0 and "1 row scored" in out


def test_calibrate_strict_refuses_a_row_without_a_prediction_as_its_help_says(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--strict's help named unreadable rows and rows past the roofline; it also refuses a row
    no prediction reads (an unknown card), and now says so."""
    rows = csv_file(tmp_path, line(id="a"), line(id="b", gpu="no-such-card"))
    out = tmp_path / "p.json"
    code, _, err = run(capsys, "calibrate", str(rows), "-o", str(out), "--strict")
    assert code == 2 and "no prediction" in err and not out.exists()
    code, text, _ = run(capsys, "calibrate", "--help")
    strict_help = " ".join(text.split("  --strict")[1].split("\n  -")[0].split())
    assert "without a prediction" in strict_help


def test_calibrate_says_one_row_not_one_rows(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "calibrate", str(csv_file(tmp_path, line())), "-o",
                       str(tmp_path / "p.json"))
    assert code == 2  # one row cannot pin a profile's parameters …
    assert "fitting vllm on 1 row (1 of 1)" in err  # … and the progress line counts it right


@pytest.mark.usefixtures("fit_only")
@pytest.mark.parametrize(("ttft_ms", "why"), [
    ("0.5", "a TTFT under a millisecond: seconds written as ms?"),
    ("5", "is the card right? was the prompt served from a prefix cache?")])
def test_a_ttft_past_its_roofline_gets_one_reason_in_validate_and_calibrate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], ttft_ms: str, why: str) -> None:
    """A 1,024-token prompt of Llama-3.1-8B on an H100 takes at least 16 ms (its arithmetic at
    the rated peak). validate had said "seconds written as ms?" of 0.5 ms where calibrate,
    leaving the same row out, asked "speculative decoding?", which drafts output tokens, never
    the prompt; a 5 ms TTFT got that question from both. Now both give the TTFT's reason."""
    rows = [line(id=f"r{i}", batch=str(2 ** i), value=str(v))
            for i, v in enumerate((120, 115, 105, 95, 80, 60))]
    ttft = line(id="t", batch="1", input_len="1024", output_len="1", context_len="1024",
                metric="ttft_ms", value=ttft_ms, unit="ms")
    path = csv_file(tmp_path, *rows, ttft)
    code, text, _ = run(capsys, "validate", str(path))
    assert code == 0 and "t: measured past the roofline's" in text
    assert f": {why} (calibrate leaves it out)" in text and "speculative" not in text
    code, text, _ = run(capsys, "calibrate", str(path), "-o", str(tmp_path / "p.json"))
    assert code == 0 and "left out: t: " in text
    assert f"({why})" in text and "speculative" not in text


@pytest.mark.usefixtures("fit_only")
def test_the_roofline_figure_a_row_is_set_against_carries_its_unit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A TTFT past its roofline (5 ms for a 1,024-token prompt, flagged) and one a hundred
    times past it (0.05 ms, unreadable), and a decode rate as far past: each message gives the
    roofline's figure in the row's unit ("the roofline's 30.84 ms", "222.8 tok/s"); they had
    printed a bare 30.84 (an audit found)."""
    rows = [line(id=f"r{i}", batch=str(2 ** i), value=str(v))
            for i, v in enumerate((120, 115, 105, 95, 80, 60))]
    ttft = {"batch": "1", "input_len": "1024", "output_len": "1", "context_len": "1024",
            "metric": "ttft_ms", "unit": "ms"}
    path = csv_file(tmp_path, *rows, line(id="t", value="5", **ttft),
                    line(id="u", value="0.05", **ttft), line(id="d", batch="1", value="1e6"))
    figure = r"the roofline's [\d,.]+(e[+-]\d+)? "
    code, text, _ = run(capsys, "validate", str(path))
    assert code == 0
    assert re.search(rf"t: measured past {figure}ms: ", text)
    assert re.search(rf"unreadable: u: 0.05 ms is [\d,]+× faster than {figure}ms for ", text)
    assert re.search(rf"unreadable: d: 1e\+06 tok/s is [\d,]+× faster than {figure}tok/s for ",
                     text)
    code, text, _ = run(capsys, "calibrate", str(path), "-o", str(tmp_path / "p.json"))
    assert code == 0 and re.search(rf"left out: t: 5 ms is past {figure}ms for ", text)


def test_validate_says_which_rows_a_profile_priced_and_which_it_was_fitted_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`validate --profile` printed the same tables with or without the profile, and nothing
    said which rows it priced, or that scoring the rows it was fitted on measures how far it
    bends to them (the calibrate report calls that 'in sample'). Now a note says both, and
    which engines' rows kept the bundled profiles."""
    train = csv_file(tmp_path, *(line(id=f"b{b}", batch=str(b), value=str(v))
                                 for b, v in ((1, 120), (4, 110), (16, 95), (64, 60))),
                     name="train.csv")
    held = csv_file(tmp_path, line(id="h8", batch="8", value="104"),
                    line(id="h32", batch="32", value="80"),
                    line(id="s1", batch="1", value="118", engine="sglang"), name="held.csv")
    out = tmp_path / "p.json"
    assert run(capsys, "calibrate", str(train), "-o", str(out))[0] == 0
    code, text, _ = run(capsys, "validate", str(train), "--profile", str(out))
    assert code == 0 and f"note: {out} priced the 4 vllm rows; all of them among the 4 it " \
        "was fitted on: their errors are in sample" in text
    code, text, _ = run(capsys, "validate", str(held), "--profile", str(out), "--json")
    assert code == 0 and json.loads(text)["notes"] == [
        f"{out} priced the 2 vllm rows", "the sglang rows were read with the bundled profiles"]


@pytest.mark.parametrize(("mark", "name"), [(";", "semicolons"), ("\t", "tabs")])
def test_a_csv_split_by_another_separator_is_named_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], mark: str, name: str) -> None:
    """A spreadsheet set to a comma decimal saves its CSV with semicolons: its header is one
    column, and the refusal had listed all sixteen columns as missing. It says what happened."""
    path = tmp_path / "rows.csv"
    path.write_text("\n".join(t.replace(",", mark) for t in (HEADER, line())) + "\n",
                    encoding="utf-8")
    code, _, err = run(capsys, "validate", str(path))
    assert code == 2 and f"the columns split by {name}: save it with commas" in err
    assert "missing columns" not in err
    code, _, err = run(capsys, "calibrate", str(path), "-o", str(tmp_path / "p.json"))
    assert code == 2 and f"the columns split by {name}" in err


def test_a_gpu_file_whose_id_no_row_names_is_said_first_when_nothing_is_predicted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A lab's card described with --gpu-file as 'L20' while its rows name 'lab-l20': every row
    was refused as an unknown card with "--gpu-file adds a card's record", to a user who had
    given one, and the note that the file was not used came only after a run that scored.
    Now the refusal says first that no row names the record's id."""
    from ridgeline import hardware

    monkeypatch.setattr(hardware, "_USER", {})  # the card this test registers, forgotten after
    card = tmp_path / "l20.json"
    card.write_text(json.dumps({
        "id": "L20", "name": "NVIDIA L20", "vendor": "nvidia", "form": "datacenter",
        "memory_size": 48, "memory_unit": "GiB", "memory_bytes": 48 * 2**30,
        "memory_bandwidth_bytes_per_s": 864e9, "peak_flops": {"bf16": 119.5e12},
        "sources": ["a lab's notes"]}))
    path = csv_file(tmp_path, *(line(id=f"r{i}", gpu="lab-l20", batch=str(2 ** i))
                                for i in range(6)))
    said = f"--gpu-file {card}: no row names its id 'L20' (the rows name lab-l20)"
    code, _, err = run(capsys, "validate", str(path), "--gpu-file", str(card))
    assert code == 2 and f"{path}: no row could be predicted: {said}" in err
    code, _, err = run(capsys, "calibrate", str(path), "--gpu-file", str(card), "-o",
                       str(tmp_path / "p.json"))
    assert code == 2 and f"{path}: no row can be predicted ({said}" in err
