"""`ridgeline calibrate` says what its profile covers and cautions where a fit is unsafe to use
beyond its rows: one model or one deployment, a bandwidth share no serving engine runs at, no
fixed cost a step."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from ridgeline.calibrate_audit import (
    FAR_COST,
    FAR_COST_MIN_S,
    MIN_BANDWIDTH_SHARE,
    PRICED_S,
    PULLING,
    bundled_shares,
    coverage,
    far_costs,
    fit_cautions,
)
from ridgeline.calibrate_rows import rated_bytes_per_s, row_group
from ridgeline.engines import EngineProfile, bundled_profiles
from ridgeline.hardware import resolve_accelerator
from ridgeline.measurements import read_measurement_files
from ridgeline.predict import predict, row_engine
from tests.conftest import cli_json, run_cli

SERVING = Path(__file__).parent.parent / "validation" / "serving.csv"
MEASUREMENTS = SERVING.with_name("measurements.csv")


def serving_rows(engine: str) -> list:
    return [r for r in read_measurement_files([str(SERVING)]).rows if row_engine(r) == engine]


def test_a_fit_on_one_models_rows_says_so_and_records_its_coverage(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """serving.csv's vLLM rows are all gpt-oss-120b: the fit had been written with no word of
    it. Its bandwidth share was 43 % of rated, under any bundled serving fit, until vLLM's MoE
    prompt slowdown priced the other users' prompt chunks those rows' decode steps wait on
    (the caution's "work the model does not price"); it then fitted 59 %, with the compute
    share pulled from 56 % to 33 % to price those chunks slower. With the compute share held
    at the bundled one (no prompt row), the bandwidth share takes the rest, 49 %: cautioned."""
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
    assert record["compute_efficiency"] == bundled_profiles()["vllm"].compute_efficiency
    assert share == pytest.approx(0.49, abs=0.005)
    assert share < MIN_BANDWIDTH_SHARE and f"bandwidth fitted at {share:.0%} of rated" in out
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


def test_a_full_share_under_the_engines_ceiling_is_judged_by_what_it_reaches() -> None:
    """A llama.cpp-cuda fit at 100 % of rated on an RTX 4090 was cautioned "which no engine
    reaches", though the bundled profile gives GeForce cards 100 % too: in series with the
    3.67 TB/s ceiling a 4090's streams reach 78.5 %. The caution now reads the share reached,
    and stands where nothing holds it under rated (no ceiling)."""
    rows = [r for r in read_measurement_files([str(MEASUREMENTS)]).rows
            if row_engine(r) == "llama.cpp-cuda" and r.gpu == "rtx-4090"
            and r.metric == "decode_tok_s_per_user"]
    bundled = bundled_profiles()["llama.cpp-cuda"]
    cap = bundled.bandwidth_cap_bytes_per_s
    assert rows and cap is not None
    full = replace(bundled, bandwidth_efficiency=1.0, group_bandwidth={},
                   fitted_ids=tuple(r.id for r in rows), fitted_groups={"nvidia-geforce": 9})
    rated = resolve_accelerator("rtx-4090").memory_bandwidth_bytes_per_s
    assert full.share_under_ceiling(1.0, rated) < 0.8  # what a 4090 reaches under the ceiling

    def at_full(p: EngineProfile) -> list[str]:
        return [c for c in fit_cautions({"llama.cpp-cuda": p}, rows,
                                        {"llama.cpp-cuda": bundled})
                if "fitted at 100 % of rated" in c]

    assert not at_full(full)
    (caution,) = at_full(replace(full, bandwidth_cap_bytes_per_s=None))
    assert caution.startswith("llama.cpp-cuda: bandwidth efficiency fitted at 100 % of rated "
                              "on nvidia-geforce cards")
    assert f"the bundled llama.cpp-cuda profile: {bundled_shares(bundled, ['nvidia-geforce'])}" \
        in caution


def test_far_costs_are_ten_times_the_bundled_ones_and_a_fall_only_beside_a_rise() -> None:
    """A fixed cost counts as moved far at FAR_COST times the bundled one, not under; a cost
    the bundled profile does not price has no ratio; a cost fallen to its tenth is named
    beside a risen one (the fit's trade), not alone."""
    bundled = bundled_profiles()["llama.cpp-cuda"]
    step, layer = bundled.step_overhead_s, bundled.layer_overhead_s
    assert step > 0 and layer > FAR_COST_MIN_S
    under = replace(bundled, step_overhead_s=step * FAR_COST * 0.9 + FAR_COST_MIN_S)
    assert under.step_overhead_s < step * FAR_COST and far_costs(under, bundled) == {}
    risen = replace(bundled, step_overhead_s=step * FAR_COST + FAR_COST_MIN_S)
    assert set(far_costs(risen, bundled)) == {"step_overhead_s"}
    fallen = replace(bundled, layer_overhead_s=layer / FAR_COST / 2)
    assert far_costs(fallen, bundled) == {}
    traded = replace(risen, layer_overhead_s=fallen.layer_overhead_s)
    assert set(far_costs(traded, bundled)) == {"step_overhead_s", "layer_overhead_s"}
    serving = bundled_profiles()["vllm"]
    unpriced = replace(serving, layer_overhead_s=100e-6)  # the bundled fit's is next to 0
    assert serving.layer_overhead_s < PRICED_S and far_costs(unpriced, serving) == {}


def test_calibrate_cautions_a_cost_per_step_hundreds_of_times_the_bundled_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """validation/offload.csv's 14 llama.cpp-cuda rows fit a cost per step of about 5 ms
    against the bundled 12 µs, with no word of it, and a 1B model's decode then ran at a
    third of the bundled speed. Now a caution names the cost, its move, and the rows that
    pull it: those the fit reads closer than the bundled costs would, the rest kept."""
    from ridgeline import calibrate_folds

    monkeypatch.setattr(calibrate_folds, "HELD_OUT_MAX_ROWS", 0)  # the fit, not its folds
    offload = SERVING.with_name("offload.csv")
    out_path = tmp_path / "off.json"
    report = cli_json(capsys, "calibrate", str(offload), "-o", str(out_path))
    bundled = bundled_profiles()["llama.cpp-cuda"]
    fitted = EngineProfile.from_dict(json.loads(out_path.read_text())["engines"]["llama.cpp-cuda"])
    assert fitted.step_overhead_s >= FAR_COST * bundled.step_overhead_s
    (caution,) = [c for c in report["cautions"] if "from the bundled profile: every" in c]
    assert caution.startswith(f"llama.cpp-cuda: cost per step {bundled.step_overhead_s * 1e6:,.1f}"
                              f" → {fitted.step_overhead_s * 1e6:,.1f} µs")
    restored = replace(fitted, step_overhead_s=bundled.step_overhead_s,
                       layer_overhead_s=bundled.layer_overhead_s)
    rows = read_measurement_files([str(offload)]).rows
    pulls = {}
    for r in rows:
        now, then = (predict(r, {"llama.cpp-cuda": p}).predicted for p in (fitted, restored))
        assert now is not None and then is not None
        pulls[r.id] = abs(math.log(then / r.value)) - abs(math.log(now / r.value))
    pulling = [i for i, pull in pulls.items() if pull >= PULLING]
    assert pulling and all(i in caution for i in pulling)
    assert not any(i in caution for i, pull in pulls.items() if pull < 0)


def test_a_prompt_steps_layer_cost_is_said_moved_only_where_a_profile_has_its_own() -> None:
    """llama.cpp's prompt steps have no cost per layer of their own: they pay the cost per
    layer. A fit that moved it had said so twice ("cost per layer 55.1 → 0.0 µs, cost per
    layer of a prompt step 55.1 → 0.0 µs"); now once. vLLM's prompt steps have their own, and
    a fit that moves it says so."""
    from ridgeline.calibrate_moves import profile_moves

    cuda = bundled_profiles()["llama.cpp-cuda"]
    assert cuda.prefill_layer_overhead_s is None
    moved = [m.what for m in profile_moves(replace(cuda, layer_overhead_s=0.0), cuda, [])]
    assert moved == ["cost per layer"]
    vllm = bundled_profiles()["vllm"]
    assert vllm.prefill_layer_overhead_s is not None
    fitted = replace(vllm, prefill_layer_overhead_s=vllm.prefill_layer_overhead_s * 3)
    assert [m.what for m in profile_moves(fitted, vllm, [])] == ["cost per layer of a prompt step"]


def test_one_row_held_out_is_one_row() -> None:
    """A 4-row llama.cpp-cuda file held out one row (the other folds too few to fit) and
    said "1 rows held out each row apart"."""
    from ridgeline.calibrate_folds import HeldOut

    row = serving_rows("vllm")[0]
    one = HeldOut("vllm", 4, (predict(row),), ("a", "b", "c"))
    assert one.shown.startswith("vllm: 1 row held out each row apart, each refitted")
    two = HeldOut("vllm", 4, (predict(row), predict(row)), ("a", "b"))
    assert two.shown.startswith("vllm: 2 rows held out each row apart")
