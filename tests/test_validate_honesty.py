"""`validate` and `calibrate` read as a skeptic would: the rows a profile was fitted on kept
apart from those it never saw, the tails beside the medians, no row lost to a quote left
open, and a calibration's error on rows it did not see beside the error on its own."""

from __future__ import annotations

import csv
import importlib.util
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from ridgeline import calibrate_folds, calibrate_moves
from ridgeline.calibrate import fit_profiles
from ridgeline.engines import accelerator_group, bundled_profiles, load_profile_file
from ridgeline.hardware import resolve_accelerator
from ridgeline.measurements import COLUMNS, read_measurements
from ridgeline.predict import predict
from ridgeline.scoring import term_fitted_ids
from tests.conftest import ROOT, run_cli

HEADER = ",".join(COLUMNS)
# a user's own rows of one deployment (Llama-3.1-8B under vLLM on one H100), none of them
# among the rows the bundled profiles were fitted on
MINE = {"model": "llama-3.1-8b", "weights_dtype": "bf16", "kv_dtype": "bf16", "gpu": "h100",
        "num_gpus": "1", "tp": "1", "input_len": "1000", "output_len": "256",
        "context_len": "1256", "unit": "tok/s", "engine": "vllm", "source": "me", "notes": ""}
OWN = [{"id": "mine-b1", "batch": "1", "metric": "decode_tok_s_per_user", "value": "150"},
       {"id": "mine-b8", "batch": "8", "metric": "decode_tok_s_per_user", "value": "140"},
       {"id": "mine-b32", "batch": "32", "metric": "decode_tok_s_per_user", "value": "115"},
       {"id": "mine-ttft", "batch": "1", "metric": "ttft_ms", "value": "45", "unit": "ms",
        "input_len": "2000", "output_len": "1", "context_len": "2000"},
       {"id": "mine-tput", "batch": "64", "metric": "output_throughput_tok_s",
        "value": "5200"}]


def _own_file(tmp_path: Path, rows: list[dict[str, str]], name: str = "mine.csv") -> Path:
    path = tmp_path / name
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        writer.writerows({**MINE, **r} for r in rows)
    return path


def _bundled_rows(count: int) -> list[dict[str, str]]:
    """The first ``count`` TensorRT-LLM TTFT rows of measurements.csv: fitted on by the bundled
    serving profile (its fitted_ids)."""
    with open(ROOT / "validation" / "measurements.csv", encoding="utf-8", newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["metric"] == "ttft_ms"]
    fitted = set(bundled_profiles()["trtllm"].fitted_ids)
    return [r for r in rows if r["id"] in fitted][:count]


def test_validate_keeps_the_rows_its_profile_was_fitted_on_apart(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two published TTFT rows the bundled profile was fitted on beside a user's five: each
    row says whether it is in sample, the 'fit' table splits each metric so, and the count
    under the tables says how many are in sample."""
    path = _own_file(tmp_path, OWN)
    published = _bundled_rows(2)
    with open(path, "a", encoding="utf-8", newline="") as handle:
        csv.DictWriter(handle, COLUMNS).writerows(published)
    code, out, _ = run_cli(capsys, "validate", str(path), "--json")
    data = json.loads(out)
    fitted = {r["id"] for r in published}
    assert code == 0 and {r["id"]: r["in_sample"] for r in data["rows"]} == {
        r["id"]: r["id"] in fitted for r in data["rows"]}
    assert data["in_sample_rows"] == len(fitted)
    split = {s["group"]: s["rows"] for s in data["summary"]["fit"]}
    assert split["ttft_ms: in sample"] == len(fitted)
    assert split["ttft_ms: out of sample"] == 1  # the user's own TTFT row
    assert sum(split.values()) == sum(s["rows"] for s in data["summary"]["metric"])
    code, out, _ = run_cli(capsys, "validate", str(path))
    assert f"in sample: {len(fitted)} of the {len(data['rows'])} scored rows" in out
    assert "metric: in or out of its profile's fit" in out
    # the rows' table marks each row as --json's in_sample does, in its last column
    lines = out.splitlines()
    assert lines[0].split()[-1] == "fit" and lines[len(data["rows"]) + 1].startswith("fit: in")
    marks = {line.split()[0]: line.split()[-1] for line in lines[1:len(data["rows"]) + 1]}
    assert marks == {r["id"]: "in" if r["in_sample"] else "out" for r in data["rows"]}


def test_validate_on_a_users_own_rows_says_none_is_in_sample(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "validate", str(_own_file(tmp_path, OWN)))
    assert code == 0 and "out of sample: no scored row is among those their profile " \
        "(or a term fitted beside it) was fitted on" in out
    assert "in or out of its profile's fit" not in out  # one kind of row: no split to show
    assert out.splitlines()[0].split()[-1] == "error"  # nor a 'fit' column in the rows' table


def test_validate_on_rows_all_in_sample_says_so_under_the_table_not_row_by_row(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The rows' 'fit' column shows only where in- and out-of-sample rows mix, as the 'fit'
    table does: where every row is in sample, the line under the tables says so for all."""
    published = _bundled_rows(2)
    path = tmp_path / "published.csv"
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        writer.writerows(published)
    code, out, _ = run_cli(capsys, "validate", str(path))
    assert code == 0 and out.splitlines()[0].split()[-1] == "error"
    assert f"in sample: all {len(published)} scored rows are among those" in out


def test_validate_summary_gives_the_worst_row_and_the_shares_within_10_and_25_percent(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Recomputed from the rows it prints: each metric's median, worst and shares within
    10 % and 25 % |error|, and each card's accelerator group."""
    data = json.loads(run_cli(capsys, "validate", str(_own_file(tmp_path, OWN)), "--json")[1])
    by_metric: dict[str, list[float]] = {}
    for r in data["rows"]:
        by_metric.setdefault(r["metric"], []).append(abs(r["predicted"] / r["measured"] - 1))
    for s in data["summary"]["metric"]:
        errors = by_metric[s["group"]]
        assert s["median_abs_error"] == pytest.approx(statistics.median(errors))
        assert s["max_abs_error"] == pytest.approx(max(errors))
        assert s["within_10_percent"] == pytest.approx(
            sum(e <= 0.10 for e in errors) / len(errors))
        assert s["within_25_percent"] == pytest.approx(
            sum(e <= 0.25 for e in errors) / len(errors))
    family = accelerator_group(resolve_accelerator("h100"))
    assert [(s["group"], s["rows"]) for s in data["summary"]["family"]] == [(family, len(OWN))]


def test_a_quote_never_closed_is_refused_not_read_as_one_row(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A notes cell opened with '"' and never closed had swallowed every row under it: two
    rows read as one, scored, and nothing said. Now it is refused, naming the line; a notes
    cell quoted over two lines is still read."""
    path = _own_file(tmp_path, OWN[:2])
    lines = path.read_text("utf-8").splitlines()
    path.write_text("\n".join([lines[0], lines[1] + '"open', lines[2]]) + "\n", "utf-8")
    code, out, err = run_cli(capsys, "validate", str(path))
    assert code == 2 and not out and "line 2: a quote opened in its 'notes' cell is never " \
        "closed" in err and len(err.strip().splitlines()) == 1
    path.write_text("\n".join([lines[0], lines[1] + '"two\nlines"', lines[2]]) + "\n", "utf-8")
    assert [r.id for r in read_measurements(path).rows] == ["mine-b1", "mine-b8"]


def test_calibrate_shows_the_error_on_rows_each_fit_did_not_see(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Five rows, five folds: each row predicted by the profile fitted on the other four, as
    calibrate fits (the bundled profile the prior). The median of those errors is the 'held
    out' figure, apart from the in-sample 'after'."""
    path = _own_file(tmp_path, OWN)
    out_file = tmp_path / "p.json"
    code, out, _ = run_cli(capsys, "calibrate", str(path), "-o", str(out_file), "--json")
    data = json.loads(out)
    rows = read_measurements(path).rows
    errors: dict[str, list[float]] = {}
    for row in rows:
        refit = fit_profiles([r for r in rows if r.id != row.id], priors=bundled_profiles())
        p = predict(row, refit)
        assert p.error is not None
        errors.setdefault(row.metric, []).append(abs(p.error))
    held = {s["group"]: s for s in data["held_out"]}
    assert code == 0 and data["held_out_runs"] == [
        {"engine": "vllm", "folds": len(rows), "rows": len(rows), "unscored": [], "reason": None}]
    for metric, values in errors.items():
        assert held[metric]["median_abs_error"] == pytest.approx(statistics.median(values))
    after = {s["group"]: s["median_abs_error"] for s in data["after"]}
    assert after["decode_tok_s_per_user"] != held["decode_tok_s_per_user"]["median_abs_error"]
    # calibrate_folds' worked figures: TTFT and output throughput, in sample and held out
    assert calibrate_folds.__doc__ is not None
    doc = " ".join(calibrate_folds.__doc__.split())
    for metric in ("ttft_ms", "output_throughput_tok_s"):
        assert f"{after[metric]:.1%}".replace("%", " %") in doc
        assert f"{held[metric]['median_abs_error']:.1%}".replace("%", " %") in doc


def test_calibrate_says_how_far_the_profile_moved_from_the_bundled_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The shares each profile gives the rows' card, read from the file it wrote, and its
    predictions of the rows over the bundled ones'."""
    path = _own_file(tmp_path, OWN)
    out_file = tmp_path / "p.json"
    code, out, _ = run_cli(capsys, "calibrate", str(path), "-o", str(out_file), "--json")
    data = json.loads(out)
    fitted = load_profile_file(str(out_file))["vllm"]
    bundled = bundled_profiles()["vllm"]
    h100 = resolve_accelerator("h100")
    moved = {m["what"]: m for m in data["moved"]["vllm"]}
    bandwidth = moved["bandwidth share on h100-sxm"]
    assert code == 0 and bandwidth["bundled"] == pytest.approx(bundled.bandwidth_for(h100),
                                                               abs=1e-3)
    assert bandwidth["fitted"] == pytest.approx(fitted.bandwidth_for(h100), abs=1e-3)
    rows = read_measurements(path).rows
    ratios = []
    for row in rows:
        new, old = predict(row, {"vllm": fitted}), predict(row, None)
        assert new.predicted is not None and old.predicted is not None
        ratios.append(old.predicted / new.predicted if row.metric == "ttft_ms"
                      else new.predicted / old.predicted)
    assert data["prediction_shift"]["vllm"]["median"] == pytest.approx(statistics.median(ratios))
    assert calibrate_moves.__doc__ is not None  # its worked figures, as computed here
    assert f"from {bandwidth['bundled']:.0%} to {bandwidth['fitted']:.0%}".replace(
        "%", " %") in " ".join(calibrate_moves.__doc__.split())
    assert f"×{statistics.median(ratios):.2f}" in calibrate_moves.__doc__
    code, text, _ = run_cli(capsys, "calibrate", str(path), "-o", str(out_file))
    assert "moved from the bundled profile: bandwidth share on h100-sxm " \
        f"{bundled.bandwidth_for(h100):.0%} → {fitted.bandwidth_for(h100):.0%}" in text


def test_calibrate_on_as_many_rows_as_parameters_holds_none_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Three decode rows fit three parameters exactly (the bandwidth share and the costs per
    step and per layer; the compute share stands at the bundled one, no prompt row pinning
    it); a fold of two cannot be fitted, so no row is held out, and the report says so rather
    than print an in-sample figure as one."""
    path = _own_file(tmp_path, OWN[:3])
    code, out, _ = run_cli(capsys, "calibrate", str(path), "-o", str(tmp_path / "p.json"))
    assert code == 0 and "vllm: not held out: each of its 3 folds leaves too few rows" in out
    table = [line for line in out.splitlines() if line.startswith("decode_tok_s_per_user")]
    assert table and table[0].split()[-1] == "-"


def _script(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rows_a_term_beside_the_profiles_was_fitted_on_are_in_sample(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The host's bandwidth share under offload and vLLM's MoE prompt slowdown are fitted by
    scripts of their own, on rows no profile was fitted on: engines.json records those rows
    (each rule's fitted_ids) as the scripts choose them, and validate counts them in sample."""
    offload = {r.id for r in _script("fit_offload").FIT}
    slowdown = {r.id for r in _script("fit_moe_prompt_slowdown").vllm_rows()}
    assert term_fitted_ids("llama.cpp-cuda") == offload
    assert term_fitted_ids("vllm") == slowdown
    code, out, _ = run_cli(capsys, "validate", str(ROOT / "validation" / "offload.csv"),
                           str(ROOT / "validation" / "moe_prefill.csv"), "--json")
    inside = {r["id"] for r in json.loads(out)["rows"] if r["in_sample"]}
    assert code == 0 and inside == offload | slowdown


def test_an_engines_kv_capacity_rows_are_summarised_apart_from_its_speed_rows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """validation/measurements.csv's vLLM rows are all KV-capacity rows: the engine table
    names them so, never as 'vllm' (read as its speed), and each engine's and card's speed
    groups hold only speed rows, whose median is the step-cost model's own."""
    data = json.loads(run_cli(capsys, "validate", str(ROOT / "validation" / "measurements.csv"),
                              "--json")[1])
    kv = {"kv_cache_tokens", "kv_cache_gib", "gpu_blocks", "max_concurrency"}
    engines = {s["group"]: s for s in data["summary"]["engine"]}
    vllm_rows = [r for r in data["rows"] if r["engine"] == "vllm"]
    assert vllm_rows and all(r["metric"] in kv for r in vllm_rows)
    assert "vllm" not in engines
    assert engines["vllm: KV capacity"]["rows"] == len(vllm_rows)
    for column, name in (("engine", "engine"), ("gpu", "gpu")):
        for s in data["summary"][column]:
            base = s["group"].removesuffix(": KV capacity")
            capacity = base != s["group"]
            members = [r for r in data["rows"] if r[name] == base and r["predicted"] is not None
                       and (r["metric"] in kv) == capacity]
            assert s["rows"] == len(members) > 0
    text = run_cli(capsys, "validate", str(ROOT / "validation" / "measurements.csv"),
                   "--summary")[1]
    assert "KV-capacity rows" in text


def test_the_cross_validation_scores_every_validation_file_and_names_the_unseen_rows() -> None:
    """docs/accuracy.md (scripts/crossval.py) scores every CSV in validation/, fitting only
    those fit_profiles.py fits; each target line gives its rows' count on every row, on the
    shared set and on the never-fitted files, so a verdict 'met' on the shared set's 14 TTFTs
    cannot hide moe_prefill.csv's: those read apart, with the file named."""
    from ridgeline.predict import Prediction

    crossval = _script("crossval")
    fit_profiles = _script("fit_profiles")
    on_disk = {p.name for p in (ROOT / "validation").glob("*.csv")}
    assert {p.name for p in crossval.CSVS} == on_disk
    assert set(crossval.FITTED) == {p.name for p in fit_profiles.CSVS
                                    if p.parent.name == "validation"}
    file_of = {r.id: name for name in ("measurements.csv", "moe_prefill.csv")
               for r in read_measurements(ROOT / "validation" / name).rows
               if r.metric == "ttft_ms"}
    rows = {r.id: r for name in ("measurements.csv", "moe_prefill.csv")
            for r in read_measurements(ROOT / "validation" / name).rows if r.id in file_of}
    shared = [i for i in rows if file_of[i] == "measurements.csv"]
    unseen = [i for i in rows if file_of[i] == "moe_prefill.csv"]
    assert shared and unseen
    # the shared set's TTFTs within 5 %, the never-fitted ones 2x off: every row misses 15 %
    preds = [Prediction(i, "ttft_ms", 100.0, 105.0) for i in shared] + \
            [Prediction(i, "ttft_ms", 100.0, 200.0) for i in unseen]
    (line,) = crossval._targets(preds, rows, file_of)
    assert f"shared set alone 5.0% over {len(shared)} rows — met" in line
    assert f"never fitted (moe_prefill.csv) 100.0% over {len(unseen)} rows — NOT met" in line
    assert f"every row {'100.0%' if len(unseen) > len(shared) else '5.0%'}" in line
