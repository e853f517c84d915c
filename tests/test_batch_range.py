"""The caution a decode prediction carries past the largest batch the profile was fitted on for
its card group (EngineProfile.batch_range_caution): what the fit records of its rows
(calibrate.largest_decode_batches), and where decode, plan and simulate say it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ridgeline.calibrate import largest_decode_batches
from ridgeline.candidate import Candidate
from ridgeline.capacity import max_batch
from ridgeline.catalog import resolve_model
from ridgeline.cli import main
from ridgeline.engines import (
    MIN_EDGE_ROWS,
    MIN_GROUP_ROWS,
    OPTIMISTIC_AT_EDGE,
    EngineProfile,
    profile_for,
)
from ridgeline.hardware import resolve_accelerator
from ridgeline.measurements import read_measurement_files, read_measurements
from ridgeline.metric_divisions import priced_decode_batch
from ridgeline.plan_cautions import candidate_cautions
from ridgeline.predict import Prediction, deployment_for, predict, row_engine
from ridgeline.serving_load import Slo
from tests.conftest import CUDA, LOWBATCH, MEASUREMENTS, ROCM, ROOT

MI300X = resolve_accelerator("mi300x")
H100 = resolve_accelerator("h100")
# the files scripts/fit_profiles.py fits
FITTED = (MEASUREMENTS, LOWBATCH, ROCM, CUDA, *sorted((ROOT / "validation" / "h200").glob("*.csv")))


LLAMA_8B = resolve_model("llama-3.1-8b")


def _candidate(gpu: str, batch: int) -> Candidate:
    """A one-GPU candidate as the search sizes one, at ``batch`` (40 ms a token)."""
    return Candidate(gpu, 1, 1, "fp8", "bf16", None, batch, 0.04, 0.2, 1.0, 1, 2.0, True, "",
                     (0.8, 1.2))


def _instinct_to(batch: int, optimism: float) -> EngineProfile:
    """The vllm profile, as if its Instinct rows stopped at ``batch`` and read ``optimism``
    there (its NVIDIA rows at 1,024, exact)."""
    return replace(profile_for("vllm"), fitted_rows=100,
                   fitted_groups={"amd-instinct": 10, "nvidia-datacenter": 90},
                   fitted_max_batch={"amd-instinct": batch, "nvidia-datacenter": 1024},
                   max_batch_optimism={"amd-instinct": optimism, "nvidia-datacenter": 0.0})


def test_a_group_fitted_to_batch_16_cautions_batch_32_and_not_batch_16() -> None:
    profile = _instinct_to(16, 0.216)
    assert profile.batch_range_caution(MI300X, 16) == ""
    said = profile.batch_range_caution(MI300X, 32)
    assert "amd-instinct cards at decode batches up to 16" in said
    assert "prices the mi300x at batch 32" in said
    assert "+21.6% faster than measured" in said and "likely optimistic" in said
    assert profile.batch_range_caution(H100, 32) == ""  # its own group's rows reach 1,024


def test_an_edge_the_fit_reads_about_right_is_not_called_optimistic() -> None:
    said = _instinct_to(16, OPTIMISTIC_AT_EDGE / 2).batch_range_caution(MI300X, 32)
    assert "up to 16" in said and "optimistic" not in said


def test_too_few_rows_on_the_group_leave_it_to_the_calibration_caution() -> None:
    few = replace(_instinct_to(16, 0.2), fitted_rows=90 + MIN_GROUP_ROWS - 1,
                  fitted_groups={"amd-instinct": MIN_GROUP_ROWS - 1, "nvidia-datacenter": 90})
    assert few.calibration_caution(MI300X)
    assert few.batch_range_caution(MI300X, 32) == ""


def test_a_profile_file_keeps_the_record_and_one_written_before_has_none() -> None:
    profile = _instinct_to(16, 0.216)
    loaded = EngineProfile.from_dict(json.loads(json.dumps(profile.to_dict())))
    assert loaded.fitted_max_batch == profile.fitted_max_batch
    assert loaded.max_batch_optimism == profile.max_batch_optimism
    before = {k: v for k, v in profile.to_dict().items()
              if k not in ("fitted_max_batch", "max_batch_optimism")}
    assert EngineProfile.from_dict(before).batch_range_caution(MI300X, 1024) == ""


def test_the_fit_takes_the_largest_decode_batch_not_a_prefills() -> None:
    """A prefill's batch is prompts, not a decode step's; each row counts at the batch its
    prediction priced; the error near the edge is the median of the rows there."""
    row = next(r for r in read_measurements(LOWBATCH).rows if r.gpu == MI300X.id
               and r.metric == "output_throughput_tok_s")
    rows = [replace(row, batch=None), replace(row, batch=16), replace(row, batch=16),
            replace(row, batch=16), replace(row, batch=64, metric="prefill_tok_s")]
    predicted = (100.0, 110.0, 120.0, 150.0, 50.0)
    priced = (1, 16, 16, 16, None)
    predictions = [Prediction(r.id, r.metric, 100.0, p, batch=b)
                   for r, p, b in zip(rows, predicted, priced, strict=True)]
    largest, optimism = largest_decode_batches(rows, predictions)
    assert largest == {"amd-instinct": 16}
    assert optimism == {"amd-instinct": pytest.approx(0.2)}  # 1.1, 1.2, 1.5: the middle one
    assert largest_decode_batches(rows[:1], predictions[:1])[0] == {"amd-instinct": 1}


def test_a_throughput_naming_no_batch_counts_at_the_batch_it_is_priced_at() -> None:
    """TensorRT-LLM's H100 FP8 Llama-3.1-8B 128/128 throughput names no batch: the prediction
    runs the engine's full pool, and the fit's record counts the row there, not at batch 1."""
    row = next(r for r in read_measurements(MEASUREMENTS).rows
               if r.id == "TRT014-H100SXM80GB-FP8-L31-8B-tp1-128-128")
    assert row.batch is None
    prediction = predict(row, {row_engine(row): profile_for("vllm")})
    pool = max_batch(deployment_for(row), (row.input_len or 0) + (row.output_len or 0))
    assert prediction.batch == priced_decode_batch(row, deployment_for(row)) == pool == 2048
    assert largest_decode_batches([row], [prediction])[0] == {"nvidia-datacenter": pool}
    prefill = replace(row, metric="prefill_tok_s", input_len=128)
    assert predict(prefill, {row_engine(row): profile_for("vllm")}).batch is None


def test_the_error_at_the_edge_needs_rows_enough_to_take_a_median_of() -> None:
    """One row far off at the largest batch does not set the group's error there: with fewer
    than MIN_EDGE_ROWS rows at half the edge or more none is recorded, and with enough the
    median of them is, the outlier among them."""
    row = next(r for r in read_measurements(LOWBATCH).rows if r.gpu == MI300X.id
               and r.metric == "output_throughput_tok_s")
    outlier = Prediction(row.id, row.metric, 100.0, 337.0, batch=1280)
    near = [Prediction(row.id, row.metric, 100.0, 100.0 + i, batch=1024)
            for i in range(MIN_EDGE_ROWS - 2)]
    far = Prediction(row.id, row.metric, 100.0, 400.0, batch=256)  # below half the edge
    few = [outlier, *near, far]
    largest, optimism = largest_decode_batches([row] * len(few), few)
    assert largest == {"amd-instinct": 1280} and optimism == {}
    enough = [*few, Prediction(row.id, row.metric, 100.0, 105.0, batch=640)]
    largest, optimism = largest_decode_batches([row] * len(enough), enough)
    near_edge = sorted(p.optimism or 0.0 for p in enough if 2 * (p.batch or 0) >= 1280)
    assert len(near_edge) == MIN_EDGE_ROWS
    assert optimism == {"amd-instinct": pytest.approx(near_edge[len(near_edge) // 2])}
    assert optimism["amd-instinct"] < OPTIMISTIC_AT_EDGE < (outlier.optimism or 0.0)


def test_the_shipped_profiles_record_what_their_fitted_rows_show() -> None:
    """Each bundled profile's record is its fitted rows', priced by itself as the fit priced
    them. The serving profile's Instinct rows stop at batch 16 (docs/plan.md's "all at batch 16
    or less") with one row there, too few to record its error; its NVIDIA datacenter rows
    reach the batch TensorRT-LLM's 128/128 throughputs naming none are priced at, the pool's
    2,048, and read about right there."""
    by_id = {r.id: r for r in read_measurement_files(FITTED).rows}
    for engine in ("vllm", "llama.cpp-cuda", "llama.cpp-rocm", "torch-eager"):
        profile = profile_for(engine)
        rows = [by_id[i] for i in profile.fitted_ids]
        table = {row_engine(r): profile for r in rows}
        largest, optimism = largest_decode_batches(rows, [predict(r, table) for r in rows])
        assert profile.fitted_max_batch == largest
        assert profile.max_batch_optimism == pytest.approx(optimism)
    serving = profile_for("vllm")
    edge = serving.fitted_max_batch["amd-instinct"]
    instinct = [r for r in (by_id[i] for i in serving.fitted_ids) if r.gpu == MI300X.id]
    assert edge == max(r.batch or 1 for r in instinct) == 16  # docs/plan.md: "batch 16 or less"
    assert sum(1 for r in instinct if 2 * (r.batch or 1) >= edge) < MIN_EDGE_ROWS
    assert "amd-instinct" not in serving.max_batch_optimism
    datacenter = [r for r in (by_id[i] for i in serving.fitted_ids) if r.gpu == H100.id]
    assert serving.fitted_max_batch["nvidia-datacenter"] > max(r.batch or 1 for r in datacenter)
    assert serving.max_batch_optimism["nvidia-datacenter"] < OPTIMISTIC_AT_EDGE
    # llama.cpp's rows decode one sequence on every group but NVIDIA's SoCs (DGX Spark: 32)
    llamacpp = {(e, g): b for e in ("llama.cpp-cuda", "llama.cpp-metal", "llama.cpp-rocm",
                                    "llama.cpp-vulkan")
                for g, b in profile_for(e).fitted_max_batch.items() if b > 1}
    assert llamacpp == {("llama.cpp-cuda", "nvidia-soc"): 32}


def test_plan_cautions_an_mi300x_candidate_past_its_fitted_batch() -> None:
    profile, slo = profile_for("vllm"), Slo(2.0, 0.05)
    edge = profile.fitted_max_batch["amd-instinct"]
    past = candidate_cautions(_candidate("mi300x", 2 * edge), "vllm", profile, slo,
                              LLAMA_8B)
    assert profile.batch_range_caution(MI300X, 2 * edge) in past
    within = candidate_cautions(_candidate("mi300x", edge), "vllm", profile, slo,
                              LLAMA_8B)
    assert not any("decode batches up to" in text for text in within)


def _cautions(capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    assert main([*args, "--json"]) == 0
    return list(json.loads(capsys.readouterr().out)["cautions"])


def test_decode_past_the_fitted_batch_says_so_and_within_it_does_not(
        capsys: pytest.CaptureFixture[str]) -> None:
    edge = profile_for("vllm").fitted_max_batch["amd-instinct"]
    decode = ["decode", "llama-3.1-8b", "--gpu", "mi300x", "--context", "2000"]
    past = _cautions(capsys, *decode, "--batch", f"1,{2 * edge}")
    assert profile_for("vllm").batch_range_caution(MI300X, 2 * edge) in past
    assert not any("decode batches up to" in c
                   for c in _cautions(capsys, *decode, "--batch", f"1,{edge}"))


def test_simulate_past_the_fitted_batch_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """A closed loop of 64 holds a running batch of about 64, past the Instinct rows' 16."""
    said = _cautions(capsys, "simulate", "llama-3.1-8b", "--gpu", "mi300x", "--concurrency",
                     "64", "--num-requests", "128", "--input-len", "500", "--output-len", "100")
    assert any("amd-instinct cards at decode batches up to" in c for c in said)
