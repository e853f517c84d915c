"""`ridgeline profile`: what an engine profile holds, read back from the profile the
predictions run on — the bundled one or a calibration's file — and its refusals."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ridgeline.engines import bundled_profiles
from ridgeline.hardware import resolve_accelerator
from ridgeline.reports.profile import TERMS, priced, term_text
from tests.conftest import cli_json, run_cli


def test_each_term_is_the_bundled_profiles_own_value_in_its_unit(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp-cuda's cost per MoE layer (59.3 µs) and ceiling (3.67 TB/s) as decode uses them."""
    cuda = bundled_profiles()["llama.cpp-cuda"]
    data = cli_json(capsys, "profile", "--engine", "llama.cpp-cuda")
    assert data["origin"] == "bundled" and data["accelerator"] is None
    (shown,) = data["profiles"]
    assert shown["engine"] == "llama.cpp-cuda" and shown["fitted_rows"] == cuda.fitted_rows
    assert shown["source"] == cuda.source and shown["prompt_rows"] == cuda.compute_rows
    for term in TERMS:
        assert shown["terms"][term.field]["value"] == getattr(cuda, term.field)
        assert shown["terms"][term.field]["priced"] == priced(cuda, term)
    code, out, _ = run_cli(capsys, "profile", "--engine", "llama.cpp-cuda")
    assert code == 0
    moe_line = next(line for line in out.splitlines() if "cost per MoE layer" in line)
    assert term_text(cuda.moe_layer_overhead_s, "s") in moe_line
    assert term_text(cuda.moe_layer_overhead_s, "s") == f"{cuda.moe_layer_overhead_s * 1e6:.3g} µs"
    assert term_text(cuda.bandwidth_cap_bytes_per_s or 0, "B/s") in out
    assert "not priced:" in out and "K-quant unpacking" in out.split("not priced:")[1]


def test_without_engine_every_bundled_profile_is_shown(capsys: pytest.CaptureFixture[str]) -> None:
    data = cli_json(capsys, "profile")
    assert {p["engine"] for p in data["profiles"]} == set(bundled_profiles())


def test_a_group_without_rows_takes_its_vendors_best_covered_groups_shares(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The bundled vllm profile saw Instinct and NVIDIA datacenter rows: a Radeon takes the
    Instinct cards' shares, and the command says so on the card as decode prices it."""
    vllm = bundled_profiles()["vllm"]
    data = cli_json(capsys, "profile", "--engine", "vllm", "--gpu", "rx-7900-xtx")
    groups = data["profiles"][0]["groups"]
    assert set(groups) == set(vllm.fitted_groups)
    for name, group in groups.items():
        assert group["takes"] == name and group["fitted_rows"] == vllm.fitted_groups[name]
        assert group["bandwidth_share"] == vllm.group_bandwidth_share(name)
    card = data["profiles"][0]["on_accelerator"]
    radeon = resolve_accelerator("rx-7900-xtx")
    assert card["group"] == "amd-radeon" and card["bandwidth_share"] == vllm.bandwidth_for(radeon)
    assert vllm.group_stand_in("amd-radeon") == "amd-instinct"
    assert card["bandwidth_share"] == groups["amd-instinct"]["bandwidth_share"]
    assert card["caution"] == vllm.calibration_caution(radeon) and card["caution"]


def test_a_cards_reached_bandwidth_is_its_share_under_the_ceiling(
        capsys: pytest.CaptureFixture[str]) -> None:
    """An H100 PCIe's 2 TB/s reaches about 1.1 under llama.cpp-cuda: less than its group's
    share alone gives, the ceiling in series."""
    cuda = bundled_profiles()["llama.cpp-cuda"]
    pcie = resolve_accelerator("h100-pcie")
    data = cli_json(capsys, "profile", "--engine", "llama.cpp", "--gpu", "h100-pcie")
    card = data["profiles"][0]["on_accelerator"]
    rated = pcie.memory_bandwidth_bytes_per_s
    assert card["reached_bandwidth_bytes_per_s"] == pytest.approx(cuda.bandwidth_for(pcie) * rated)
    group_share = data["profiles"][0]["groups"][card["group"]]["bandwidth_share"]
    assert card["reached_bandwidth_bytes_per_s"] < group_share * rated
    assert data["accelerator"] == pcie.id


def test_a_calibrated_file_is_shown_as_written(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    mine = replace(bundled_profiles()["sglang"], layer_overhead_s=4.2e-5, held=("compute_efficiency",),
                   source="fitted on 12 rows (mine)")
    path = tmp_path / "my-profile.json"
    path.write_text(json.dumps({"engines": {"sglang": mine.to_dict()}}), "utf-8")
    data = cli_json(capsys, "profile", "--profile", str(path))
    (shown,) = data["profiles"]
    assert data["origin"] == str(path) and shown["source"] == mine.source
    assert shown["terms"]["layer_overhead_s"]["value"] == mine.layer_overhead_s
    assert shown["held"] == ["compute_efficiency"]
    code, out, _ = run_cli(capsys, "profile", "--profile", str(path), "--explain")
    assert code == 0 and "held at the prior's value" in out and "sglang profile" in out


@pytest.mark.parametrize(("argv", "words"), [
    (["--engine", "vllmm"], "unknown engine"),
    (["--engine", "vllm", "--gpu", "h1000000"], "h1000000"),
    (["--profile", "{missing}"], "no such profile file"),
    (["--profile", "{not_json}"], "is not a profile JSON file"),
    (["--profile", "{no_engines}"], "expected {\"engines\""),
    (["--profile", "{sglang_only}", "--engine", "vllm"], "holds no profile for vllm"),
])
def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          argv: list[str], words: str) -> None:
    files = {"missing": tmp_path / "missing.json", "not_json": tmp_path / "rows.csv",
             "no_engines": tmp_path / "card.json", "sglang_only": tmp_path / "mine.json"}
    files["not_json"].write_text("id,model\n1,x\n", "utf-8")
    files["no_engines"].write_text(json.dumps({"id": "my-card"}), "utf-8")
    files["sglang_only"].write_text(
        json.dumps({"engines": {"sglang": bundled_profiles()["sglang"].to_dict()}}), "utf-8")
    argv = [a.format(**{k: str(v) for k, v in files.items()}) for a in argv]
    code, out, err = run_cli(capsys, "profile", *argv)
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and words in err, err


@pytest.mark.parametrize(("engine", "gpu"), [("trtllm", "mi300x"), ("vllm", "apple-m2-max-30c"),
                                             ("llama.cpp-metal", "h100")])
def test_an_engine_on_a_card_it_does_not_run_on_is_refused_as_decode_refuses_it(
        capsys: pytest.CaptureFixture[str], engine: str, gpu: str) -> None:
    """profile --gpu had priced TensorRT-LLM's shares on an MI300X, which decode refuses: now
    the same one-line refusal, and without --engine the card's line says so for that engine."""
    code, out, decode_err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", gpu,
                                    "--engine", engine)
    assert code == 2
    code, out, err = run_cli(capsys, "profile", "--engine", engine, "--gpu", gpu)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert err == decode_err
    data = cli_json(capsys, "profile", "--gpu", gpu)
    views = {v["engine"]: v for v in data["profiles"]}
    reason = err.strip().removeprefix("ridgeline: error: ")
    assert views[engine]["refused_on_accelerator"] == reason
    assert views[engine]["on_accelerator"] is None
    runs = [v for v in views.values() if v["refused_on_accelerator"] is None]
    assert runs and all(v["on_accelerator"] is not None for v in runs)
    code, out, _ = run_cli(capsys, "profile", "--gpu", gpu)
    assert code == 0 and f"  not on this card: {reason}" in out


def test_a_calibrated_profile_names_what_it_held_in_words_and_each_cost_plainly(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A calibration of offload rows fitted 4,954 µs a step: profile printed "4.95e+03 µs",
    listed the held terms by field name (kquant_ops_per_weight among them, which it also said
    it does not price), and said "1 prompt ... rows". Now the cost reads as calibrate prints
    it, the held terms by the names the rest of the output uses, only those it prices, and
    an unpriced prompt-step layer cost says what a prompt step pays instead."""
    from ridgeline.calibrate_held import ALL_SIDES

    cuda = bundled_profiles()["llama.cpp-cuda"]
    held = ("bandwidth_cap_bytes_per_s", "kquant_ops_per_weight", "prefill_layer_overhead_s")
    mine = replace(cuda, step_overhead_s=4.9536e-3, held=held, compute_rows=1,
                   source="fitted on 4 rows (mine)")
    assert mine.kquant_ops_per_weight == 0 and mine.prefill_layer_overhead_s is None
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"engines": {"llama.cpp-cuda": mine.to_dict()}}), "utf-8")
    code, out, _ = run_cli(capsys, "profile", "--profile", str(path))
    assert code == 0 and "e+0" not in out
    step_line = next(line for line in out.splitlines() if "cost per step" in line)
    assert f"{mine.step_overhead_s * 1e6:,.0f} µs" in step_line  # calibrate's "4,954 µs/step"
    held_line = next(line for line in out.splitlines() if "held at the prior's value" in line)
    assert held_line.endswith(f": {ALL_SIDES['bandwidth_cap_bytes_per_s']}")
    unpriced = out.split("not priced: ")[1].splitlines()[0]
    assert "cost per layer of a prompt step (a prompt step pays the cost per layer)" in unpriced
    assert "1 prompt (prefill/TTFT) row set the compute share" in out
