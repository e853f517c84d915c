"""`ridgeline calibrate` says what its profile covers and cautions where a fit is unsafe to use
beyond its rows: one model or one deployment, a bandwidth share no serving engine runs at, no
fixed cost a step."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ridgeline.calibrate_audit import MIN_BANDWIDTH_SHARE, coverage, fit_cautions
from ridgeline.calibrate_rows import rated_bytes_per_s, row_group
from ridgeline.engines import EngineProfile, bundled_profiles
from ridgeline.hardware import resolve_accelerator
from ridgeline.measurements import read_measurement_files
from ridgeline.predict import row_engine
from tests.conftest import run_cli

SERVING = Path(__file__).parent.parent / "validation" / "serving.csv"
MEASUREMENTS = SERVING.with_name("measurements.csv")


def serving_rows(engine: str) -> list:
    return [r for r in read_measurement_files([str(SERVING)]).rows if row_engine(r) == engine]


def test_a_fit_on_one_models_rows_says_so_and_records_its_coverage(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """serving.csv's vLLM rows are all gpt-oss-120b: the fit had been written with no word of
    it. Its bandwidth share was 43 % of rated, under any bundled serving fit, until vLLM's MoE
    prompt slowdown priced the other users' prompt chunks those rows' decode steps wait on
    (the caution's "work the model does not price"): it now fits 59 %, and is not cautioned."""
    out_path = tmp_path / "vllm.json"
    code, out, _ = run_cli(capsys, "calibrate", str(SERVING), "--engine", "vllm", "-o",
                           str(out_path))
    assert code == 0
    rows = serving_rows("vllm")
    models = sorted({r.model for r in rows})
    assert len(models) == 1
    record = json.loads(out_path.read_text())["engines"]["vllm"]
    assert record["coverage"]["models"] == models
    assert len(record["coverage"]["gpus"]) == len({r.gpu for r in rows})
    # the source every command prints beside the profile's expectation names the one model
    assert f"all of {models[0]}" in record["source"]
    assert f"every fitted row is of one model, {models[0]} (MoE)" in out
    assert f"fitted on {len(rows)} rows: 1 model ({models[0]}) on" in out
    share = record["bandwidth_efficiency"]
    assert share == pytest.approx(0.59, abs=0.005)
    assert share >= MIN_BANDWIDTH_SHARE and "bandwidth fitted at" not in out
    code, out, _ = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--profile",
                           str(out_path), "--batch", "8", "--context", "1000")
    assert code == 0 and f"all of {models[0]}" in out


def test_coverage_counts_the_rows_the_profile_was_fitted_on() -> None:
    rows = read_measurement_files([str(SERVING)]).rows
    sglang = [r for r in rows if row_engine(r) == "sglang"]
    profile = replace(bundled_profiles()["sglang"], fitted_ids=tuple(r.id for r in sglang))
    cover = coverage(rows, profile)
    assert cover.models == tuple(sorted({r.model for r in sglang}))
    assert len(cover.models) > 1
    assert len(cover.deployments) == len({(r.model, r.weights_dtype, r.kv_dtype, r.gpu,
                                           r.num_gpus, r.tp) for r in sglang})
    # several models: no one-model caution, and the bundled shares raise none either
    assert fit_cautions({"sglang": profile}, rows) == []


def test_implausible_shares_and_no_fixed_cost_are_cautioned() -> None:
    rows = serving_rows("vllm")
    one = rows[:1]
    bundled = bundled_profiles()["vllm"]
    slow = replace(bundled, bandwidth_efficiency=0.3, step_overhead_s=0.0,
                   layer_overhead_s=0.0, matmul_overhead_s=0.0, moe_layer_overhead_s=0.0,
                   fitted_ids=(one[0].id,), fitted_groups={}, group_bandwidth={})
    cautions = fit_cautions({"vllm": slow}, rows, {"vllm": bundled})
    assert any(c.startswith("vllm: every fitted row is one deployment (") for c in cautions)
    assert any("bandwidth fitted at 30% of rated" in c
               and f"the bundled vllm profile: {bundled.bandwidth_efficiency:.0%}" in c
               for c in cautions)
    assert any("no fixed cost a step fitted" in c for c in cautions)
    # a group multiplier that carries one card group past all of its rated bandwidth
    fast = replace(bundled, bandwidth_efficiency=0.8, fitted_ids=tuple(r.id for r in rows),
                   fitted_groups={"amd-instinct": 8, "nvidia-datacenter": 10},
                   group_bandwidth={"amd-instinct": 1.5})
    cautions = fit_cautions({"vllm": fast}, rows)
    assert any(c.startswith("vllm: bandwidth fitted at 120% of rated on amd-instinct cards")
               for c in cautions)
    assert not any("nvidia-datacenter" in c and "bandwidth" in c for c in cautions)
    assert not any("no fixed cost" in c for c in cautions)


def test_a_low_share_is_compared_with_the_bundled_share_of_the_same_groups() -> None:
    """A share fitted on NVIDIA datacenter and AMD Instinct rows is set beside what the bundled
    profile gives each of those groups, its group multiplier applied, not its base share."""
    rows = serving_rows("vllm")
    bundled = bundled_profiles()["vllm"]
    groups = {"amd-instinct": 8, "nvidia-datacenter": 10}
    slow = replace(bundled, bandwidth_efficiency=0.3, fitted_ids=tuple(r.id for r in rows),
                   fitted_groups=groups, group_bandwidth={})
    caution = next(c for c in fit_cautions({"vllm": slow}, rows, {"vllm": bundled})
                   if "bandwidth fitted at 30%" in c)
    for group in groups:
        share = bundled.bandwidth_efficiency * bundled.group_bandwidth.get(group, 1.0)
        assert f"{share:.0%} on {group}" in caution
    assert bundled.group_bandwidth.get("nvidia-datacenter", 1.0) != 1.0  # else nothing to tell


def test_a_share_just_past_a_bound_prints_past_it() -> None:
    """validation/measurements.csv fits llama.cpp-cuda's nvidia-workstation share at 1.00014 of
    rated: the caution said "fitted at 100% of rated …, past what the card can move". The
    figure now carries the digits that put it past 100 % (and under 50 % on the low side)."""
    rows = serving_rows("vllm")
    bundled = bundled_profiles()["vllm"]
    base = 0.8
    for multiplier, bound in ((1.0002 / base, 1.0), (0.49996 / base, MIN_BANDWIDTH_SHARE)):
        profile = replace(bundled, bandwidth_efficiency=base, fitted_ids=(rows[0].id,),
                          fitted_groups={"amd-instinct": 8},
                          group_bandwidth={"amd-instinct": multiplier})
        caution = next(c for c in fit_cautions({"vllm": profile}, rows)
                       if "bandwidth fitted at" in c)
        shown = float(caution.split("bandwidth fitted at ")[1].split("%")[0])
        share = base * multiplier
        assert round(share * 100) == bound * 100  # a whole percent would read as the bound
        assert (shown > bound * 100) == (share > bound) and shown != bound * 100
        assert shown == pytest.approx(share * 100, abs=0.01)


def test_a_share_past_rated_that_the_engines_ceiling_holds_under_it_is_not_cautioned() -> None:
    """llama.cpp-cuda's nvidia-workstation share, 0.80 × 1.25 = 100.02 % of rated, runs in
    series with its 3.67 TB/s ceiling: on the slowest card its rows name (an RTX 4000 Ada,
    360 GB/s) the streams reach 91 %, so "past what the card can move" is not said (it was,
    of the share before the ceiling). A share the ceiling cannot hold under rated is still
    cautioned, at the share reached, with the ceiling named."""
    rows = [r for r in read_measurement_files([str(MEASUREMENTS)]).rows
            if row_engine(r) == "llama.cpp-cuda"
            and row_group(r, bandwidth=True) == "nvidia-workstation"]
    bundled = bundled_profiles()["llama.cpp-cuda"]
    cap = bundled.bandwidth_cap_bytes_per_s
    assert cap is not None
    profile = replace(bundled, fitted_ids=tuple(r.id for r in rows),
                      fitted_groups={"nvidia-workstation": len(rows)})
    share = bundled.bandwidth_efficiency * bundled.group_bandwidth["nvidia-workstation"]
    slowest = min(r for r in (rated_bytes_per_s(row) for row in rows) if r is not None)
    assert share > 1.0 and profile.share_under_ceiling(share, slowest) < 1.0

    def past_rated(p: EngineProfile) -> list[str]:
        return [c for c in fit_cautions({"llama.cpp-cuda": p}, rows)
                if "past what the card can move" in c]

    assert not past_rated(profile)
    assert past_rated(replace(profile, bandwidth_cap_bytes_per_s=None))  # no ceiling: said
    high = 1.1 / (1.0 - slowest / cap)  # 1 ÷ (1/high + rated/cap) = 1.1 on the slowest card
    fast = replace(profile, group_bandwidth={
        "nvidia-workstation": high / bundled.bandwidth_efficiency})
    (caution,) = past_rated(fast)
    shown = float(caution.split("bandwidth fitted at ")[1].split("%")[0])
    assert shown == pytest.approx(fast.share_under_ceiling(high, slowest) * 100, abs=0.5)
    assert f"{cap / 1e12:.3g} TB/s ceiling" in caution


def test_a_share_in_series_with_a_ceiling_is_one_over_the_sum_of_inverses() -> None:
    """EngineProfile.share_under_ceiling's worked number: llama.cpp-cuda's 1.0 on an RTX
    A6000 (768 GB/s) under its 3.67 TB/s ceiling reaches 0.827 of rated; no ceiling, 1.0."""
    bundled = bundled_profiles()["llama.cpp-cuda"]
    a6000 = resolve_accelerator("rtx-a6000").memory_bandwidth_bytes_per_s
    assert bundled.share_under_ceiling(1.0, a6000) == pytest.approx(0.827, abs=0.0005)
    assert replace(bundled, bandwidth_cap_bytes_per_s=None).share_under_ceiling(1.0, a6000) == 1.0
