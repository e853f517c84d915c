"""`calibrate` fits only what its rows can pin: rows of prompt steps alone leave the decode side
(calibrate_held.DECODE_SIDE) as bundled, rows of decode steps alone the prompt side (PROMPT_SIDE),
and it says what it held, as the profile records it (EngineProfile.held), not by comparing values
with the bundled profile's. `validate` and `calibrate` refuse a row orders of magnitude past its
deployment's roofline as unreadable, as they refuse a negative one."""

from __future__ import annotations

import csv
import json
import statistics
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from ridgeline.calibrate import SERVING_ENGINES, fit_engine, fit_profiles
from ridgeline.calibrate_held import (
    ALL_SIDES,
    DECODE_SIDE,
    NO_PROMPT_ROWS,
    NOT_SHOWN,
    PROMPT_SIDE,
    held_notes,
    held_parameters,
)
from ridgeline.cost import IDEAL
from ridgeline.engines import EngineProfile, profile_for
from ridgeline.errors import InputError
from ridgeline.measurements import Measurement, ReadResult, read_measurements
from ridgeline.past_roofline import UNREADABLE_PAST_ROOFLINE, refuse_past_roofline, times_past
from ridgeline.predict import deployment_for, predict
from ridgeline.reports.validation import CalibrationReport
from tests.conftest import LOWBATCH, MEASUREMENTS, ROOT, SERVING, run_cli

PIPELINE = ROOT / "validation" / "pipeline.csv"  # six llama-bench pp rows, Llama-2-7B F16
H200 = ROOT / "validation" / "h200" / "2026-11-29-run1.csv"  # `ridgeline measure`'s rows


def _rows(engine: str, *metrics: str) -> list[Measurement]:
    return [r for r in read_measurements(MEASUREMENTS).rows
            if r.engine == engine and r.metric in metrics]


@cache
def _decode_fit() -> EngineProfile:
    """llama.cpp-cuda calibrated on 32 of its llama-bench tg rows, the bundled profile its prior."""
    decode = _rows("llama.cpp-cuda", "decode_tok_s_per_user")[:32]
    return fit_engine(decode, "llama.cpp-cuda", prior=profile_for("llama.cpp-cuda"))


@cache
def _one_model_fit() -> EngineProfile:
    """vLLM fitted with no prior (as the bundled fit is) on decode and throughput rows of one
    model at six batches: they cannot tell a cost per matmul from a cost per layer, so the fit
    keeps the one it is given, the bundled profile's (fit_profiles' held_matmul_s)."""
    rows = [r for r in read_measurements(LOWBATCH).rows
            if r.engine == "vllm" and "nightly-L3-8B" in r.id]
    rows = [replace(r, id=f"{r.id}-{i}", batch=b, value=r.value * b / 8 * (0.97 + 0.01 * i))
            for i, b in enumerate((1, 2, 4, 8, 16, 32)) for r in rows]
    return fit_profiles(rows)["vllm"]


def _said_held(profile: EngineProfile) -> set[str]:
    """The parameters a profile's source says its fit held, by their words (longest first,
    so that "cost per layer" is not found inside "cost per layer of a prompt step")."""
    notes = profile.source.partition("; ")[2]
    said = set()
    for words in sorted(ALL_SIDES.values(), key=len, reverse=True):
        if words in notes:
            said.add(words)
            notes = notes.replace(words, "")
    return said


def _decode_s(capsys: pytest.CaptureFixture[str], *profile: str) -> float:
    """Llama-2-7B F16's expected decode step on an A100 PCIe under llama.cpp's CUDA build."""
    code, out, _ = run_cli(capsys, "decode", "llama-2-7b", "--gpu", "a100-pcie-80gb", "--engine",
                           "llama.cpp-cuda", "--weights", "fp16", "--batch", "1", "--context",
                           "512", "--json", *profile)
    assert code == 0
    return float(json.loads(out)["points"][0]["expected"]["time_s"])


def test_prompt_rows_alone_leave_every_decode_parameter_and_decode_as_bundled(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """pipeline.csv's prompt rows had refitted the cost per step (472 µs) and the bandwidth share
    (22 %) from prompt steps, and Llama-2-7B's decode on that A100 went from 70.5 to 30.8 tok/s
    with no word said. Now the decode side stands as bundled, and calibrate says so."""
    out = tmp_path / "pp.json"
    code, text, _ = run_cli(capsys, "calibrate", str(PIPELINE), "-o", str(out), "--json",
                            "--explain")
    assert code == 0
    report = json.loads(text)
    fitted = EngineProfile.from_dict(json.loads(out.read_text())["engines"]["llama.cpp-cuda"])
    bundled = profile_for("llama.cpp-cuda")
    assert {name: getattr(fitted, name) for name in DECODE_SIDE} \
        == {name: getattr(bundled, name) for name in DECODE_SIDE}
    assert fitted.compute_efficiency != bundled.compute_efficiency  # the prompt side is fitted
    assert _decode_s(capsys, "--profile", str(out)) == pytest.approx(_decode_s(capsys))
    held = {h["parameter"]: h["why"] for h in report["held"]["llama.cpp-cuda"]}
    assert {"bandwidth share", "cost per step", "cost per layer"} <= set(held)
    assert held["bandwidth share"].startswith("no decode or throughput rows")
    shown = {i["name"]: i for i in report["explain"][0]["inputs"]}
    assert shown["bandwidth share"]["source"].startswith("the bundled profile's: no decode")
    assert shown["compute share"]["source"] == "fitted"
    code, text, _ = run_cli(capsys, "calibrate", str(PIPELINE), "-o", str(out))
    assert "held at the bundled profile's (no decode or throughput rows" in text
    assert "bandwidth share, bandwidth by card group, bandwidth ceiling, cost per step" in text
    assert "fitted at 22%" not in text  # no caution about a share it did not fit


def test_ttft_rows_alone_fit_a_serving_engines_prompt_side_and_hold_its_decode_side() -> None:
    """TensorRT-LLM's TTFT rows had pushed the serving profile's bandwidth share to the 100 %
    bound and its throughput rows 21 % optimistic; now they fit the compute share and a prompt
    step's own cost per layer, and leave every decode-side parameter as bundled."""
    rows = _rows("trtllm", "ttft_ms")
    bundled = profile_for("trtllm")
    fitted = fit_engine(rows, "trtllm", family=SERVING_ENGINES, prior=bundled)
    for name in DECODE_SIDE:
        assert getattr(fitted, name) == getattr(bundled, name), name
    assert fitted.prefill_layer_overhead_s != bundled.prefill_layer_overhead_s
    assert fitted.compute_efficiency != bundled.compute_efficiency
    assert "held at the bundled profile's (no decode or throughput rows" in fitted.source


def test_decode_rows_alone_keep_the_prompt_side_and_barely_move_prompt_predictions() -> None:
    """llama-bench tg rows alone had dropped the compute multipliers by card group (a GeForce
    prompt ×1.38), the dequantization factor and the expert tile width, and the pp rows of the
    same machines went from 12.0 % to 18.8 % median error (this subset moved them by 11 % at the
    median, 257 % at worst). Now the prompt side stands as bundled, and a prompt step moves only
    by what it shares with decode steps: the bandwidth share, the costs per step and per layer."""
    bundled = profile_for("llama.cpp-cuda")
    fitted = _decode_fit()
    assert fitted.bandwidth_efficiency != bundled.bandwidth_efficiency  # the decode side is fitted
    for name in PROMPT_SIDE:  # the compute share with them: no prompt row pins it
        assert getattr(fitted, name) == getattr(bundled, name), name
    moved = []
    for row in _rows("llama.cpp-cuda", "prefill_tok_s"):
        card = deployment_for(row).accelerator
        streams = fitted.bandwidth_for(card) / bundled.bandwidth_for(card)  # its bytes' rate
        arithmetic = fitted.compute_for(card) / bundled.compute_for(card)  # held: 1
        prompt = predict(row, {"llama.cpp-cuda": fitted}).predicted
        before = predict(row, {"llama.cpp-cuda": bundled}).predicted
        assert prompt is not None and before is not None
        moved.append(abs(prompt / before - 1))
        # a long prompt's attention without flash attention streams its scores: it moves
        # with the bandwidth, its arithmetic with the compute share (held), and the rest with
        # the fixed costs, under 1 % of a prompt step
        assert moved[-1] <= abs(streams - 1) + abs(arithmetic - 1) + 0.01, row.id
    # 1.4 % at the median: the bandwidth share and the fixed costs move them by that
    assert statistics.median(moved) < 0.015


def test_throughput_rows_alone_hold_the_compute_share_at_the_bundled_one_and_ttft_with_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """serving.csv's 18 vLLM rows (decode and output throughput, no prompt row) had pulled the
    compute share from 56 % to 33 % past its soft prior, while calibrate said it was "held near
    its prior", and a 70B model's 8,000-token TTFT went from 623 to 999 ms. Now a calibration
    with no prompt row holds it at the bundled profile's, says so, and TTFT moves only with the
    decode side a prompt step shares (the bandwidth share)."""
    from ridgeline import calibrate_folds

    monkeypatch.setattr(calibrate_folds, "HELD_OUT_MAX_ROWS", 0)  # the fit, not its folds
    out = tmp_path / "sv.json"
    code, text, _ = run_cli(capsys, "calibrate", str(SERVING), "--engine", "vllm", "-o",
                            str(out))
    assert code == 0
    bundled = profile_for("vllm")
    fitted = EngineProfile.from_dict(json.loads(out.read_text())["engines"]["vllm"])
    assert fitted.compute_rows == 0 and "compute_efficiency" in (fitted.held or ())
    assert fitted.compute_efficiency == bundled.compute_efficiency
    assert fitted.bandwidth_efficiency != bundled.bandwidth_efficiency  # the decode side fitted
    line = next(x for x in text.splitlines() if x.startswith("  vllm: "))
    assert f"compute {bundled.compute_efficiency:.0%} (held at the bundled profile's" in line
    moved = next((x for x in text.splitlines() if "moved from the bundled profile" in x), "")
    assert "compute share" not in moved
    ttft = []
    for profile in ((), ("--profile", str(out))):
        code, text, _ = run_cli(capsys, "prefill", "llama-3.1-70b", "--gpu", "h100",
                                "--num-gpus", "4", "--engine", "vllm", "--prompt-len", "8000",
                                "--json", *profile)
        assert code == 0
        ttft.append(json.loads(text)["expected"]["time_s"])
    assert ttft[1] / ttft[0] == pytest.approx(1.0, abs=0.05)


def test_decode_rows_alone_record_the_prompt_side_held_and_calibrate_reads_the_record() -> None:
    """What the fit held is the profile's own record: read against any prior (or none), the
    prompt side is said held, for want of prompt rows, and the fitted decode side is not."""
    fitted = _decode_fit()
    assert fitted.held is not None and set(PROMPT_SIDE) <= set(fitted.held)
    assert not {"bandwidth_efficiency", "step_overhead_s", "layer_overhead_s"} & set(fitted.held)
    said = dict(held_parameters(fitted, profile_for("llama.cpp-cuda")))
    assert said == dict(held_parameters(fitted, None))  # the record, not the prior, says it
    assert said == dict(held_parameters(fitted, profile_for("vllm")))
    for name, words in PROMPT_SIDE.items():
        if name in ("compute_efficiency", "group_compute", "dequant_compute"):  # each prices
            assert said[words] == NO_PROMPT_ROWS, name  # something in the bundled profile
    assert DECODE_SIDE["bandwidth_efficiency"] not in said


def test_a_fitted_value_landing_on_the_priors_is_not_said_held() -> None:
    """Comparing values had called a fitted share that landed on the bundled one held; a
    profile written before the record is still read that way, and only that one."""
    fitted = _decode_fit()
    fitted_here = ("bandwidth_efficiency", "step_overhead_s", "layer_overhead_s")
    landed = replace(profile_for("llama.cpp-cuda"),
                     **{name: getattr(fitted, name) for name in fitted_here})
    said = dict(held_parameters(fitted, landed))
    assert not {DECODE_SIDE[name] for name in fitted_here} & set(said)
    older = dict(held_parameters(replace(fitted, held=None), landed))
    assert {DECODE_SIDE[name] for name in fitted_here} <= set(older)


def test_a_profiles_record_of_what_it_held_round_trips_and_an_older_file_still_loads() -> None:
    fitted = _decode_fit()
    data = json.loads(json.dumps(fitted.to_dict()))
    assert data["held"] == list(fitted.held or ())
    assert EngineProfile.from_dict(data).held == fitted.held
    older = {k: v for k, v in data.items() if k != "held"}  # written before the record
    loaded = EngineProfile.from_dict(older)
    assert loaded.held is None and "held" not in loaded.to_dict()
    bundled = profile_for("llama.cpp-cuda")  # read by comparison: the prompt side still held
    assert held_parameters(loaded, bundled) == held_parameters(fitted, bundled)
    with pytest.raises(InputError, match="'held' names 'bandwidth'"):
        EngineProfile.from_dict({**data, "held": ["bandwidth"]})


def test_calibrate_cautions_a_bandwidth_share_fitted_at_100_percent_like_the_bundled_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`measure`'s torch-eager rows on an H200 fit the bandwidth share at its 100 % clamp, where
    the bundled profile has it: calibrate had said it held (for no reason given) and kept its
    caution back. Now it is fitted, and cautioned."""
    from ridgeline import calibrate_folds

    # the fit and its cautions, without the held-out folds' refits (test_validate_honesty's)
    monkeypatch.setattr(calibrate_folds, "HELD_OUT_MAX_ROWS", 0)
    out = tmp_path / "p.json"
    # torch-eager alone: its fit reads no other engine's (torch-cudagraph's reads its compute
    # share, calibrate.SAME_KERNELS, not the reverse), so the file's other engine is not fitted
    code, text, _ = run_cli(capsys, "calibrate", str(H200), "--gpu-file",
                            str(H200.with_suffix(".accelerator.json")), "-o", str(out), "--json",
                            "--engine", "torch-eager")
    assert code == 0
    report = json.loads(text)
    eager = report["profiles"]["torch-eager"]
    assert eager["bandwidth_efficiency"] == profile_for("torch-eager").bandwidth_efficiency
    assert "bandwidth_efficiency" not in eager["held"]
    assert "bandwidth share" not in {h["parameter"] for h in report["held"]["torch-eager"]}
    assert any(c.startswith("torch-eager: bandwidth efficiency fitted at 100 %")
               for c in report["cautions"])
    written = json.loads(out.read_text())["engines"]["torch-eager"]
    assert EngineProfile.from_dict(written).held == tuple(eager["held"])


def _roofline(row: Measurement) -> float:
    """The row's metric with efficiencies of 1 and no overheads."""
    floor = predict(row, {row.engine: replace(IDEAL, engine=row.engine)}).predicted
    assert floor is not None
    return floor


def test_a_row_past_the_unreadable_bound_is_refused_and_one_within_it_kept() -> None:
    decode = _rows("llama.cpp-cuda", "decode_tok_s_per_user")[0]
    ttft = _rows("trtllm", "ttft_ms")[0]
    rows = []
    for row, faster in ((decode, lambda v, k: v * k), (ttft, lambda v, k: v / k)):
        floor = _roofline(row)
        for k in (UNREADABLE_PAST_ROOFLINE / 2, UNREADABLE_PAST_ROOFLINE * 2):
            rows.append(replace(row, id=f"{row.id}-{k:g}", value=faster(floor, k)))
    kept = refuse_past_roofline(ReadResult(tuple(rows), ("x: an earlier error",)))
    assert [r.id for r in kept.rows] == [rows[0].id, rows[2].id]
    assert kept.errors[0] == "x: an earlier error" and len(kept.errors) == 3
    assert kept.errors[1].startswith(f"{rows[1].id}: ")
    assert times_past(rows[3], _roofline(ttft)) == pytest.approx(UNREADABLE_PAST_ROOFLINE * 2)


def _with_rows(tmp_path: Path, source: Path, *extra: dict[str, str]) -> Path:
    with source.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        rows, fields = list(reader), reader.fieldnames
    assert fields is not None
    path = tmp_path / "rows.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows([*rows, *extra])
    return path


ABSURD = {"id": "k", "model": "llama-3.1-8b", "weights_dtype": "bf16", "kv_dtype": "bf16",
          "gpu": "h100", "num_gpus": "1", "tp": "1", "batch": "1", "input_len": "0",
          "output_len": "128", "context_len": "128", "metric": "decode_tok_s_per_user",
          "value": "1e12", "unit": "tok/s", "engine": "vllm", "source": "x", "notes": ""}


def test_validate_names_a_decode_of_a_trillion_tokens_a_second_unreadable(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It had been scored at −100 % (past the roofline, "speculative decoding?") and dragged
    the file's p90; now it is skipped with why, as a negative value is, and --strict fails."""
    path = _with_rows(tmp_path, PIPELINE, ABSURD)
    code, text, _ = run_cli(capsys, "validate", str(path), "--json")
    assert code == 0
    report = json.loads(text)
    assert "k" not in {r["id"] for r in report["rows"]}
    (error,) = report["read_errors"]
    assert error.startswith("k: 1e+12 tok/s is ") and "past its roofline" in error
    code, text, _ = run_cli(capsys, "validate", str(path))
    assert "unreadable: k: 1e+12 tok/s" in text
    code, _, err = run_cli(capsys, "validate", str(path), "--strict")
    assert code == 2 and "1 row unreadable" in err


def test_calibrate_names_a_row_orders_past_its_roofline_unreadable(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _with_rows(tmp_path, PIPELINE, ABSURD)
    code, text, _ = run_cli(capsys, "calibrate", str(path), "-o", str(tmp_path / "p.json"))
    assert code == 0
    assert "  unreadable: k: 1e+12 tok/s is " in text and "left out: k" not in text


def test_a_fit_with_no_prior_records_the_matmul_cost_it_keeps_and_its_source_reads_it() -> None:
    """A fit with no prior keeps the cost per weight matmul it is given where its rows cannot
    pin one: its source said so ("held at 14.4 µs") while its record said nothing held, and
    calibrate's reading of the profile (held_parameters) missed it. Now the record holds it,
    and the source words the record: the same profile with nothing recorded says nothing."""
    profile = _one_model_fit()
    assert profile.matmul_overhead_s == profile_for("vllm").matmul_overhead_s > 0
    assert profile.held == ("matmul_overhead_s",)
    assert held_parameters(profile, None) == ((ALL_SIDES["matmul_overhead_s"],
                                               NOT_SHOWN["matmul_overhead_s"]),)
    assert _said_held(profile) == {ALL_SIDES["matmul_overhead_s"]}
    assert held_notes(profile, None) and held_notes(profile, None) in profile.source
    assert held_notes(replace(profile, held=()), None) == ""


@pytest.mark.parametrize("fit", ["one model, no prior", "decode rows", "TTFT rows"])
def test_a_fits_source_says_held_exactly_what_its_record_holds(fit: str) -> None:
    """The source had worded what was held from the fit's parameter space, apart from the
    record: TTFT rows alone had it say a bandwidth ceiling and a cost per MoE layer held for a
    serving engine that prices neither, and llama.cpp's decode rows alone a prompt step's own
    cost per layer held where the engine has none. Now each parameter the source names held is one
    held_parameters reads from the record, and each one it reads is named."""
    if fit == "TTFT rows":
        prior: EngineProfile | None = profile_for("trtllm")
        profile = fit_engine(_rows("trtllm", "ttft_ms"), "trtllm", family=SERVING_ENGINES,
                             prior=prior)
    elif fit == "decode rows":
        prior, profile = profile_for("llama.cpp-cuda"), _decode_fit()
    else:
        prior, profile = None, _one_model_fit()
    read = {words for words, _ in held_parameters(profile, prior)}
    assert read and _said_held(profile) == read


def test_calibrates_text_skips_the_compute_share_by_name_not_by_place() -> None:
    """The text says on the profile's own line that its compute share was held near its prior,
    and had dropped the first held parameter for it, whatever that was: a profile with no
    prompt rows whose record holds its cost per weight matmul but not the compute share (a fit
    with no prior) lost the matmul's line. Now the compute share is left out by name."""
    profile = _one_model_fit()
    assert not profile.compute_fitted and "compute_efficiency" not in (profile.held or ())
    text = CalibrationReport({"vllm": profile}, (), (), "p.json").text_lines()
    assert "(held near its prior: no prefill or TTFT row to fit it)" in text[1]
    assert f"    held at the bundled profile's ({NOT_SHOWN['matmul_overhead_s']}): " \
           f"{ALL_SIDES['matmul_overhead_s']}" in text
    decode = CalibrationReport({"llama.cpp-cuda": _decode_fit()}, (), (), "p.json").text_lines()
    assert not any(ALL_SIDES["compute_efficiency"] in line for line in decode[2:])
    assert any(line.startswith(f"    held at the bundled profile's ({NO_PROMPT_ROWS})")
               for line in decode)


def test_calibrates_text_calls_a_grouped_bandwidth_share_a_base() -> None:
    """A fit with a group multiplier: the headline share is the base the groups scale, not
    the engine's overall share, and each group's own share is printed beside its factor
    (the share bandwidth_for prices a card of that group at)."""
    from ridgeline.hardware import resolve_accelerator

    profile = replace(profile_for("sglang"), bandwidth_efficiency=0.39,
                      group_bandwidth={"nvidia-datacenter": 1.77})
    line = CalibrationReport({"sglang": profile}, (), (), "p.json").text_lines()[1]
    h100 = resolve_accelerator("h100")
    assert profile.stand_in_group(h100) == "nvidia-datacenter"
    assert "bandwidth 39% (a base, times each group's factor below" in line
    assert f"nvidia-datacenter x1.77 = {profile.bandwidth_for(h100):.0%}" in line
    plain = CalibrationReport({"sglang": replace(profile, group_bandwidth={})}, (), (),
                              "p.json").text_lines()[1]
    assert "a base" not in plain and "by group" not in plain


def _l40s_row(row_id: str, batch: int, prompt: int, metric: str, value: float) -> Measurement:
    from ridgeline.measurements import parse_row

    output = 1 if metric == "ttft_ms" else 256
    return parse_row({
        "id": row_id, "model": "meta-llama/Llama-3.1-8B", "weights_dtype": "bf16",
        "kv_dtype": "bf16", "gpu": "l40s", "num_gpus": "1", "tp": "1", "batch": str(batch),
        "input_len": str(prompt), "output_len": str(output),
        "context_len": str(prompt + (0 if metric == "ttft_ms" else output)), "metric": metric,
        "value": f"{value:.6g}", "unit": "ms" if metric == "ttft_ms" else "tok/s",
        "engine": "vllm", "source": "U1 mine", "notes": ""})


def _ttft_ms(profile: EngineProfile, prompt: int) -> float:
    predicted = predict(_l40s_row("t", 1, prompt, "ttft_ms", 1.0), {"vllm": profile}).predicted
    assert predicted is not None
    return predicted


@pytest.mark.parametrize("lengths", [(2048,), (2048, 2048)])
def test_ttft_rows_at_one_prompt_length_hold_a_prompt_steps_cost_per_layer(
        lengths: tuple[int, ...]) -> None:
    """A TTFT at one prompt length is the prompt's arithmetic plus each layer's fixed cost,
    and any split of it fits, so the fit's was arbitrary: a user's one 2,048-token TTFT on an
    L20 (a --gpu-file card) beside decode rows took the compute share to its 100 % clamp and a
    prompt step's cost per layer to 2.3 ms, and a 128-token prompt then read 95 ms against the
    bundled 34; these L40S rows took it to 2.6 µs. Now the cost per layer is held at the
    bundled profile's until the TTFT rows differ in length, and the profile says why."""
    bundled = profile_for("vllm")
    rows = [_l40s_row(f"d{b}", b, 128, "decode_tok_s_per_user", 1.0) for b in (1, 4, 16, 32, 64)]
    rows = [replace(r, value=predict(r, {"vllm": bundled}).predicted * 1.1) for r in rows]
    rows += [replace(_l40s_row(f"t{i}", 1, n, "ttft_ms", 1.0),
                     value=_ttft_ms(bundled, n) * (0.72 - 0.01 * i))
             for i, n in enumerate(lengths)]
    fitted = fit_engine(rows, "vllm", family=SERVING_ENGINES, prior=bundled)
    assert fitted.prefill_layer_overhead_s == bundled.prefill_layer_overhead_s
    assert "prefill_layer_overhead_s" in (fitted.held or ())
    assert NOT_SHOWN["prefill_layer_overhead_s"] in fitted.source
    assert fitted.compute_efficiency < 0.95  # the share took the TTFT, not the clamp
    assert _ttft_ms(fitted, 128) < _ttft_ms(bundled, 128)  # faster, as the row measured


def test_ttft_rows_at_two_prompt_lengths_fit_a_prompt_steps_cost_per_layer() -> None:
    """Two lengths tell the compute share (it grows with the prompt) from a cost per layer (it
    does not): both fitted, the two TTFTs met."""
    bundled = profile_for("vllm")
    rows = [replace(_l40s_row(f"t{n}", 1, n, "ttft_ms", 1.0), value=_ttft_ms(bundled, n) * f)
            for n, f in ((1024, 0.75), (4096, 0.65))]
    fitted = fit_engine(rows, "vllm", family=SERVING_ENGINES, prior=bundled)
    assert "prefill_layer_overhead_s" not in (fitted.held or ())
    for r in rows:
        assert predict(r, {"vllm": fitted}).predicted == pytest.approx(r.value, rel=0.02)


def test_a_users_one_ttft_on_their_own_card_leaves_short_prompts_as_bundled(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The session docs/validate.md tells of: an L20 described with --gpu-file (lab-l20: 864
    GB/s, 119.5 dense bf16 TFLOPS), five decode rows of Llama-3.1-8B under vLLM and one of
    Qwen2.5-7B, and one 2,048-token TTFT of 330 ms (the bundled profile: 460). The fit had
    taken the compute share to 100 % and a prompt step's cost per layer to 2.3 ms, and
    `prefill --prompt-len 128 --profile` then read 95.5 ms against the bundled 33.5. Now that
    cost is the bundled 87.9 µs, the compute share takes the TTFT (78 %), and the short prompt
    reads faster than bundled, as the one measured prompt ran."""
    from ridgeline import hardware

    monkeypatch.setattr(hardware, "_USER", {})  # the card this test registers, forgotten after
    card = tmp_path / "l20.json"
    card.write_text(json.dumps({
        "id": "lab-l20", "name": "NVIDIA L20 (a lab's)", "vendor": "nvidia",
        "form": "datacenter", "memory_size": 48, "memory_unit": "GiB",
        "memory_bytes": 48 * 2**30, "memory_bandwidth_bytes_per_s": 864e9,
        "peak_flops": {"bf16": 119.5e12, "fp16": 119.5e12}, "sources": ["a lab's notes"]}))
    header = ("id,model,weights_dtype,kv_dtype,gpu,num_gpus,tp,batch,input_len,output_len,"
              "context_len,metric,value,unit,engine,source,notes")
    lines = [f"b{b},meta-llama/Llama-3.1-8B,bf16,bf16,lab-l20,1,1,{b},128,512,640,"
             f"decode_tok_s_per_user,{v},tok/s,vllm,ME lab,"
             for b, v in ((1, 44.8), (4, 44.3), (16, 42.1), (32, 39.2), (64, 33.5))]
    lines += ["q1,Qwen/Qwen2.5-7B,bf16,bf16,lab-l20,1,1,1,128,512,640,decode_tok_s_per_user,"
              "48,tok/s,vllm,ME lab,",
              "t2k,meta-llama/Llama-3.1-8B,bf16,bf16,lab-l20,1,1,1,2048,1,2048,ttft_ms,330,ms,"
              "vllm,ME lab,"]
    rows = tmp_path / "l20.csv"
    rows.write_text("\n".join([header, *lines]) + "\n", encoding="utf-8")
    out = tmp_path / "p.json"
    code, text, _ = run_cli(capsys, "calibrate", str(rows), "--gpu-file", str(card), "-o",
                            str(out))
    assert code == 0 and f"({NOT_SHOWN['prefill_layer_overhead_s']}): cost per layer of a " \
        "prompt step" in text
    fitted = EngineProfile.from_dict(json.loads(out.read_text())["engines"]["vllm"])
    assert fitted.prefill_layer_overhead_s == profile_for("vllm").prefill_layer_overhead_s
    assert fitted.compute_efficiency == pytest.approx(0.78, abs=0.01)

    def ttft_ms(*profile: str) -> float:
        code, text, _ = run_cli(capsys, "prefill", "llama-3.1-8b", "--gpu-file", str(card),
                                "--engine", "vllm", "--prompt-len", "128", "--json", *profile)
        assert code == 0
        return float(json.loads(text)["expected"]["time_s"]) * 1e3

    assert ttft_ms("--profile", str(out)) < ttft_ms() == pytest.approx(33.5, abs=0.1)
