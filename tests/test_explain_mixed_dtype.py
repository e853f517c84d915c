"""decode and prefill --explain's compute time where a step's matmuls run at several dtypes: each
dtype's FLOPs ÷ its own peak, the terms the floor's compute time sums (step_work.step_work's
flops_by_dtype, from cost.op_compute_dtype, the dtype op_slowdown paces each operator at)."""

from __future__ import annotations

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.cost import Seq, decode_batch, op_compute_dtype, op_slowdown, step_cost
from ridgeline.deployment import Deployment
from ridgeline.floors import busy_stages, decode_floor, prefill_floor
from ridgeline.hardware import resolve_accelerator
from ridgeline.step_work import step_work
from tests.conftest import run_cli


def _dep(model: str, gpu: str, weights: str = "as stored", gpus: int = 1) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), weights,
                            num_gpus=gpus)


def _compute_step(floor):  # type: ignore[no-untyped-def]
    return next(s for s in floor.steps if s.label == "compute time")


def test_qwen36_nvfp4_on_h200_compute_time_is_bf16_plus_fp8_divisions() -> None:
    dep = _dep("qwen3.6-35b-a3b-nvfp4", "h200")
    floor = decode_floor(dep, 64, 2000)
    shares = {s.dtype: s for s in step_work(dep, decode_batch(64, 2000)).flops_by_dtype}
    assert list(shares) == ["bf16", "fp8"]  # the step's dtype first
    times = {d: s.flops / (dep.peak_at(d) * dep.tensor_parallel_size) for d, s in shares.items()}
    assert times["bf16"] * 1e3 == pytest.approx(0.2446, abs=5e-5)
    assert times["fp8"] * 1e3 == pytest.approx(0.0830, abs=5e-5)
    assert sum(times.values()) == pytest.approx(floor.compute_time_s, rel=1e-12)
    assert sum(s.flops for s in shares.values()) == pytest.approx(floor.flops, rel=1e-12)
    assert set(shares["fp8"].ops) == {"linear attention", "attention projections"}
    compute = _compute_step(floor)
    assert compute.formula == "bf16 FLOPs ÷ peak bf16 + fp8 FLOPs ÷ peak fp8"
    shown = {x.name: x.value for x in compute.inputs}
    assert shown["bf16 time"] + shown["fp8 time"] == pytest.approx(compute.result.value)
    assert shown["peak fp8"] == pytest.approx(2 * shown["peak bf16"], rel=1e-4)  # Hopper: twice


def test_an_fp8_checkpoint_with_a_bf16_head_divides_each_at_its_own_peak() -> None:
    dep = _dep("llama-3.1-70b", "h100", "fp8", 2)
    floor = decode_floor(dep, 32, 2000)
    compute = _compute_step(floor)
    assert compute.formula == "fp8 FLOPs ÷ peak fp8 + bf16 FLOPs ÷ peak bf16"
    assert "lm head" in next(x for x in compute.inputs if x.name == "bf16 FLOPs").source
    shown = {x.name: x.value for x in compute.inputs}
    assert shown["fp8 time"] + shown["bf16 time"] == pytest.approx(floor.compute_time_s * 1e3)


def test_a_single_dtype_step_keeps_its_one_division() -> None:
    floor = decode_floor(_dep("llama-3.1-8b", "h100"), 32, 16000)
    assert _compute_step(floor).formula == "(weight matmuls + attention FLOPs) ÷ peak"
    shares = step_work(_dep("llama-3.1-8b", "h100"), decode_batch(32, 16000)).flops_by_dtype
    assert [s.dtype for s in shares] == ["bf16"]


@pytest.mark.parametrize(("model", "gpu"), [("gpt-oss-120b", "b200"), ("deepseek-v3", "h200"),
                                             ("qwen3.6-35b-a3b-nvfp4", "h200")])
def test_each_operators_pace_is_its_dtypes_peak_against_the_steps(model: str, gpu: str) -> None:
    dep = _dep(model, gpu)
    for op in step_cost(dep, decode_batch(8, 2048)).ops:
        ratio = dep.peak_at(dep.compute_dtype) / dep.peak_at(op_compute_dtype(dep, op.name))
        assert op_slowdown(dep, op.name) == pytest.approx(ratio, rel=1e-15)


def test_decode_explain_prints_each_dtypes_division(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "decode", "qwen3.6-35b-a3b-nvfp4", "--gpu", "h200",
                           "--batch", "64", "--explain")
    assert code == 0
    assert "  compute time: bf16 FLOPs ÷ peak bf16 + fp8 FLOPs ÷ peak fp8" in out
    assert "      fp8 time = 0.083 ms" in out and "      bf16 time = 0.2446 ms" in out


@pytest.mark.parametrize(("model", "gpu", "gpus", "pp", "weights"),
                         [("qwen3.6-35b-a3b-nvfp4", "h200", 1, 1, "as stored"),
                          ("deepseek-v3", "h200", 8, 1, "as stored"),
                          ("llama-3.1-70b", "h100", 4, 2, "fp8")])
def test_prefill_explain_divides_each_dtype_at_its_own_peak(model: str, gpu: str, gpus: int,
                                                            pp: int, weights: str) -> None:
    dep = Deployment.build(resolve_model(model), resolve_accelerator(gpu), weights,
                           num_gpus=gpus, pipeline_parallel_size=pp, engine="vllm")
    floor = prefill_floor(dep, 8192, chunk_tokens=2048)
    busy = busy_stages(dep, 8192, chunk_tokens=2048)  # vLLM V1 pipelines a prompt's chunks
    shares = step_work(dep, [Seq(8192, 0)]).flops_by_dtype
    assert len(shares) > 1
    peaks = {s.dtype: dep.peak_at(s.dtype) * dep.tensor_parallel_size * busy for s in shares}
    compute = _compute_step(floor)
    assert compute.formula == " + ".join(f"{s.dtype} FLOPs ÷ peak {s.dtype}" for s in shares)
    shown = {x.name: x.value for x in compute.inputs}
    for s in shares:
        assert shown[f"{s.dtype} FLOPs"] == pytest.approx(s.flops / 1e12)
        assert shown[f"peak {s.dtype}"] == pytest.approx(peaks[s.dtype] / 1e12)
        assert shown[f"{s.dtype} time"] == pytest.approx(s.flops / peaks[s.dtype] * 1e3)
    assert sum(s.flops / peaks[s.dtype] for s in shares) == pytest.approx(
        floor.compute_time_s, rel=1e-12)
    time = next(s for s in floor.steps if s.label == "prefill time")
    assert time.formula.startswith("max(compute time, bytes ÷ bandwidth)")
    assert "step dtype's pace" not in str(floor.steps)


def test_a_single_dtype_prefill_keeps_its_one_division() -> None:
    floor = prefill_floor(_dep("llama-3.1-8b", "h100"), 8192)
    assert not any(s.label == "compute time" for s in floor.steps)
    time = next(s for s in floor.steps if s.label == "prefill time")
    assert time.formula == "max(FLOPs ÷ peak, bytes ÷ bandwidth)"


def test_prefill_explain_counts_each_peak_over_the_busy_stages(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "prefill", "llama-3.1-8b", "--gpu", "rtx-4090", "--num-gpus",
                           "2", "--engine", "llama.cpp", "--prompt-len", "8192", "--explain")
    assert code == 0
    compute = out[out.index("  compute time: "):out.index("  prefill time: ")]
    # attention's QKᵀ and PV at their own blend of fp16's two rates (QKᵀ accumulating in fp32)
    assert compute.startswith("  compute time: bf16 FLOPs ÷ peak bf16 + fp16 attention FLOPs ÷ "
                              "peak fp16 attention")
    peaks = [line for line in compute.splitlines() if line.strip().startswith("peak ")]
    assert len(peaks) == 2 and all("pipeline stages busy on average" in p for p in peaks)
    assert "step dtype's pace" not in out
