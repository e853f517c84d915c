"""A hybrid's recurrent state follows the engine settings its pool reads: SGLang's
--mamba-ssm-dtype and vLLM's --engine-version (Nemotron-H's SSM state bf16 before v0.20, fp32
from it) size the step's state reads and decode's fits line as they size the pool
(cost.served_state_model, bound to the deployment by Deployment.with_state_settings)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.candidate import (
    Candidate,
    candidate_deployment,
    replica_deployment,
    weights_lightest_first,
)
from ridgeline.capacity import max_batch
from ridgeline.cost import Seq, decode_batch, mean_decode_context, served_footprint, step_time_s
from ridgeline.engines import profile_for
from ridgeline.floors import decode_floor
from ridgeline.kvgroups import KERNEL_BLOCK_ALIGNMENT
from ridgeline.measurements import Measurement, parse_row
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.observe import read_source
from ridgeline.plan import plan
from ridgeline.predict import deployment_for, predict
from ridgeline.reports.decode import describe_settings
from ridgeline.reports.observe import observe_report
from ridgeline.serving_load import Load, Slo
from ridgeline.vllm_memory import vllm_accounting
from ridgeline.vllm_pool import vllm_default_block_size
from tests.conftest import run_cli

FIXTURES = Path(__file__).parent / "fixtures"

NEXT = "qwen3-next-80b-a3b-thinking"  # SGLang: 36 linear-attention layers
NEMOTRON_H = "nemotron-h-56b-base-8k"  # vLLM: its SSM state's dtype moved in v0.20
TP = 4
OLD_VLLM = "0.19.0"  # before v0.20: the config's bf16 (engines.json nemotron_h_ssm_cache_dtype)


def decode_point(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "decode", *argv, "--gpu", "h200", "--batch", "1", "--json")
    assert code == 0, err
    point: dict[str, Any] = json.loads(out)["points"][0]
    return point


def fits_state_bytes(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...],
                     context: int) -> float:
    """The states alone on decode's fits line: twice its cache at ``context`` less its cache
    at twice that (the attention cache grows with the context, the states do not)."""
    def kv(c: int) -> float:
        return float(decode_point(capsys, *argv, "--context", str(c))["kv_bytes"])

    return 2 * kv(context) - kv(2 * context)


def sglang_argv(flag: str | None) -> tuple[str, ...]:
    return (NEXT, "--tp-size", str(TP), "--engine", "sglang",
            *(("--mamba-ssm-dtype", flag) if flag else ()))


def vllm_argv(version: str | None) -> tuple[str, ...]:
    return (NEMOTRON_H, "--engine", "vllm", *(("--engine-version", version) if version else ()))


@pytest.mark.parametrize("flag", [None, "bfloat16"])
def test_sglangs_fits_line_holds_the_state_its_pool_sizes_under_mamba_ssm_dtype(
        capsys: pytest.CaptureFixture[str], flag: str | None) -> None:
    state_bytes = fits_state_bytes(capsys, sglang_argv(flag), 8_000)
    dep = Deployment.build(resolve_model(NEXT), resolve_accelerator("h200"), num_gpus=TP,
                           engine="sglang").with_state_settings(None, flag)
    pool = kv_pool(dep, EngineSettings(max_model_len=32_768, mamba_ssm_dtype=flag))
    assert pool.state_request_bytes > 0 and pool.kv_share == 1.0
    assert state_bytes / TP == pytest.approx(pool.state_request_bytes)
    assert served_footprint(dep, 1).state_bytes / TP == pytest.approx(pool.state_request_bytes)


def test_a_bf16_ssm_state_makes_sglangs_step_read_less(
        capsys: pytest.CaptureFixture[str]) -> None:
    fp32 = decode_point(capsys, *sglang_argv(None), "--context", "4000")
    bf16 = decode_point(capsys, *sglang_argv("bfloat16"), "--context", "4000")
    assert bf16["kv_bytes"] < fp32["kv_bytes"]
    assert bf16["kv_bytes_read"] < fp32["kv_bytes_read"]
    assert bf16["step_time_s"] < fp32["step_time_s"]


@pytest.mark.parametrize("version", [OLD_VLLM, None])
def test_vllms_fits_line_holds_the_state_its_pool_pages_at_each_release(
        capsys: pytest.CaptureFixture[str], version: str | None) -> None:
    """vLLM pages a hybrid's state in its attention block, grown in steps of 16 tokens (of its
    default block, 64, from v0.34) until one layer's page holds it: the page is the smallest
    such one for the fits line's state."""
    model = resolve_model(NEMOTRON_H)
    state_layers = sum(1 for layer in model.layers if layer.mixer == "mamba")
    per_layer = fits_state_bytes(capsys, vllm_argv(version), 2_000) / state_layers
    dep = Deployment.build(model, resolve_accelerator("h200"),
                           engine="vllm").with_state_settings(version, None)
    groups = kv_pool(dep, EngineSettings(engine_version=version, max_model_len=8192)).groups
    assert groups is not None and groups.states
    token_bytes = groups.page_bytes / groups.layers_per_group / groups.block_size
    step = vllm_default_block_size(dep, vllm_accounting(version)) \
        if version is None else KERNEL_BLOCK_ALIGNMENT
    assert (groups.block_size - step) * token_bytes < per_layer <= groups.block_size * token_bytes
    assert served_footprint(dep, 1).state_bytes == pytest.approx(per_layer * state_layers)


def test_vllm_before_v0_20_reads_a_smaller_state(capsys: pytest.CaptureFixture[str]) -> None:
    old = decode_point(capsys, *vllm_argv(OLD_VLLM), "--context", "4000")
    new = decode_point(capsys, *vllm_argv(None), "--context", "4000")
    assert old["kv_bytes"] < new["kv_bytes"]
    assert old["kv_bytes_read"] < new["kv_bytes_read"]
    assert old["step_time_s"] < new["step_time_s"]


def test_the_cached_step_time_keys_on_the_state_settings() -> None:
    """Two deployments differing only in the state's settings are two cache entries."""
    dep = Deployment.build(resolve_model(NEMOTRON_H), resolve_accelerator("h200"), engine="vllm")
    batch = [Seq(1, 4000)] * 8
    new = step_time_s(dep, batch)
    old = step_time_s(dep.with_state_settings(OLD_VLLM, None), batch)
    assert old < new
    assert step_time_s(dep.with_state_settings(None, None), batch) == new


# -- the paths that build a deployment of their own: plan's closest miss and candidates,
# observe's lighter-weight floors, decode's settings text -----------------------------------

MISS = re.compile(r"(\d+) x (\S+) \(TP(\d+)\): TTFT ≥ [\d,]+ ms, TPOT ≥ ([\d.]+) ms")


def closest_miss_at(version: str | None) -> tuple[int, str, float]:
    """(TP, card, TPOT in ms) of plan's closest miss for Nemotron-H on vLLM at ``version``,
    under a 1 ms TPOT no card keeps."""
    result = plan(resolve_model(NEMOTRON_H), Load(10, "2000", "500"), Slo(0.01, 0.001),
                  ["h200-sxm"], max_gpus=2, workers=1, engine_version=version)
    assert result.winner is None
    found = MISS.match(result.closest_miss)
    assert found, result.closest_miss
    return int(found.group(3)), found.group(2), float(found.group(4))


def test_plans_closest_miss_prices_the_state_the_release_keeps() -> None:
    """Under --engine-version 0.19.0 the closest miss reads Nemotron-H's fp16 state, as the
    search's replicas (replica_deployment at the version) do: its TPOT is the smaller. The
    group is the first the search holds (the lightest weights, fp8 KV), its TPOT that
    replica's batch-1 step at the load's mean decode context."""
    tp, gpu, old_ms = closest_miss_at(OLD_VLLM)
    new_tp, _, new_ms = closest_miss_at(None)
    assert tp == new_tp and old_ms < new_ms
    load = Load(10, "2000", "500")
    ctx = mean_decode_context(*load.means())
    acc = resolve_accelerator(gpu)
    lightest = weights_lightest_first(resolve_model(NEMOTRON_H))[0]
    for version, shown in ((OLD_VLLM, old_ms), (None, new_ms)):
        first = replica_deployment(resolve_model(NEMOTRON_H), acc, tp, 1, lightest, "fp8",
                                   version=version)
        ms = step_time_s(first, decode_batch(1, ctx), profile_for("vllm")) * 1e3
        assert f"{ms:,.1f}" == f"{shown:,.1f}"


def test_a_candidates_deployment_carries_the_version_its_search_sized_it_at() -> None:
    model = resolve_model(NEMOTRON_H)
    c = Candidate("h200-sxm", 2, 1, "fp8", "fp8", 64, 8, 0.01, 0.1, 1.0, 1, None, True, "",
                  (0.9, 1.1))
    old = candidate_deployment(model, c, "vllm", OLD_VLLM)
    assert old == replica_deployment(model, resolve_accelerator("h200-sxm"), 2, 1, "fp8", "fp8",
                                     version=OLD_VLLM)
    batch = decode_batch(8, 4000)
    assert step_time_s(old, batch) < step_time_s(candidate_deployment(model, c, "vllm"), batch)


def test_observes_lighter_weight_floors_keep_the_state_of_the_deployment_observed() -> None:
    """A bench's 28 ms a token under Nemotron-H's bf16 floor on two A100s at vLLM 0.19.0: the
    lighter formats' floors it names are priced with that release's fp16 state too."""
    model, acc = resolve_model(NEMOTRON_H), resolve_accelerator("a100-80gb")
    dep = Deployment.build(model, acc, engine="vllm",
                           num_gpus=2).with_state_settings(OLD_VLLM, None)
    report = observe_report(read_source(str(FIXTURES / "vllm_bench.json")), dep,
                            profile_for("vllm"), None, EngineSettings(engine_version=OLD_VLLM))
    assert report.below_floor and report.lighter_weights and report.batch is not None
    for name, ms in report.lighter_weights:
        lighter = Deployment.build(model, acc, name, dep.kv.id, 2, engine="vllm")
        old, new = (decode_floor(d, round(report.batch), report.context).step_time_s * 1e3
                    for d in (lighter.with_state_settings(OLD_VLLM, None), lighter))
        assert ms == pytest.approx(old) and old < new


@pytest.mark.parametrize("flag", ["bfloat16", "float16"])
def test_decodes_settings_text_names_the_ssm_dtype_it_sized_the_pool_with(
        capsys: pytest.CaptureFixture[str], flag: str) -> None:
    """decode's engine_max_batch[].settings names --mamba-ssm-dtype where given (it said
    "defaults"), and the batch it reports is the pool's under that flag."""
    def engine_max_batch(flag: str | None) -> dict[str, Any]:
        code, out, err = run_cli(capsys, "decode", *sglang_argv(flag), "--gpu", "h200",
                                 "--batch", "1", "--context", "30000", "--json")
        assert code == 0, err
        found: dict[str, Any] = json.loads(out)["engine_max_batch"][0]
        return found

    given, default = engine_max_batch(flag), engine_max_batch(None)
    assert default["settings"] == "defaults"
    assert given["settings"] == describe_settings(EngineSettings(mamba_ssm_dtype=flag), "sglang")
    assert f"mamba_ssm_dtype {flag}" in given["settings"]
    dep = Deployment.build(resolve_model(NEXT), resolve_accelerator("h200"), num_gpus=TP,
                           engine="sglang")
    for held, dtype in ((given, flag), (default, None)):
        assert held["engine_max_batch"] == max_batch(dep.with_state_settings(None, dtype), 30_000,
                                          EngineSettings(mamba_ssm_dtype=dtype))
    assert given["engine_max_batch"] >= default["engine_max_batch"]


# -- validate: a vLLM row's state at the release it ran --------------------------------------

def nemotron_row(notes: str) -> Measurement:
    """Nemotron-H decoding 8 sequences at 4,000 tokens on two H200s under vLLM."""
    return parse_row({"id": "n1", "model": NEMOTRON_H, "weights_dtype": "bf16",
                      "kv_dtype": "bf16", "gpu": "h200", "num_gpus": "2", "tp": "2",
                      "batch": "8", "input_len": "3500", "output_len": "1000",
                      "context_len": "4500", "metric": "decode_tok_s_per_user",
                      "value": "40", "unit": "tok/s", "engine": "vllm", "source": "x",
                      "notes": notes})


def test_a_vllm_rows_state_is_priced_at_the_release_its_notes_name() -> None:
    """v0.19.0 kept Nemotron-H's SSM state in fp16, v0.20.0 in fp32: the older release's row
    reads half the state bytes a step, so it is priced faster; a row naming no release is
    priced at the newest modelled, v0.20's rule."""
    old, new, plain = (nemotron_row(n) for n in (f"engine: vLLM v{OLD_VLLM}",
                                                  "engine: vLLM v0.20.0", ""))
    assert deployment_for(old).state_engine_version == OLD_VLLM
    assert served_footprint(deployment_for(old), 1).state_bytes \
        < served_footprint(deployment_for(new), 1).state_bytes
    priced = [predict(r).predicted for r in (old, new, plain)]
    assert None not in priced
    assert priced[0] > priced[1] == priced[2]  # tok/s: fewer state bytes, a shorter step


@pytest.mark.parametrize("notes", ["engine: vLLM v1.2.0",  # no release ridgeline knows of
                                   "engine: vLLM version not stated, 10.03 s a run"])
def test_a_vllm_row_naming_a_release_no_rule_covers_is_priced_not_refused(notes: str) -> None:
    """A version check_engine_version refuses (a later major, a number the notes' reader took
    for one) leaves the state at the engine's defaults, as a row naming none: validate had
    refused the row for it, 'vLLM 10.03 is no release ridgeline knows of'."""
    named, plain = nemotron_row(notes), nemotron_row("")
    assert named.engine_version() is not None
    assert deployment_for(named) == deployment_for(plain)
    assert predict(named).predicted == predict(plain).predicted is not None


def test_plans_own_cautions_read_no_state_so_take_no_version(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """plan_cautions builds a candidate's deployment without --engine-version: what it says of
    Nemotron-H on two MI300Xs at a batch of 512 (past the profile's fitted batches there) is
    the same where that deployment keeps v0.19.0's fp16 state."""
    import ridgeline.plan_cautions as plan_cautions

    model = resolve_model(NEMOTRON_H)
    c = Candidate("mi300x", 2, 1, "fp8", "fp8", 64, 512, 0.01, 0.1, 1.0, 1, None, True, "",
                  (0.9, 1.1))
    slo, profile = Slo(0.5, 0.05), profile_for("vllm")
    default = plan_cautions.candidate_cautions(c, "vllm", profile, slo, model)
    assert any("batch 512" in why for why in default)
    monkeypatch.setattr(plan_cautions, "candidate_deployment",
                        lambda m, cand, engine: candidate_deployment(m, cand, engine, OLD_VLLM))
    assert plan_cautions.candidate_cautions(c, "vllm", profile, slo, model) == default


def test_the_notes_version_is_read_within_the_sentence_engine_opens() -> None:
    """eager.csv's vLLM #45709 row says 'engine: vLLM version not stated in the text read.'
    and gives its TPOT (10.03 ms) in a later sentence: no version, where the reader had taken
    the TPOT for vLLM 10.03; a version in that sentence is still read."""
    assert nemotron_row("engine: vLLM version not stated in the text read. value = "
                        "1000 / tpot_ms (10.03 ms)").engine_version() is None
    assert nemotron_row("engine: vLLM v0.10.2 (V1). 10.03 ms").engine_version() == "0.10.2"
