"""The dense ridge of a checkpoint whose matmuls run at several dtypes: the batch at which the
matmuls every token runs take as long as reading their weights, their peaks blended by weight;
a checkpoint at one dtype keeps its one ridge exactly."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.params import count_params
from ridgeline.quantization import (
    ATTENTION,
    EMBEDDING,
    LINEAR_ATTENTION,
    LM_HEAD,
    OTHER,
    ROUTER,
    SHARED_EXPERTS,
)
from ridgeline.roofline import (
    batch_for_intensity,
    blended_peak_flops_per_s,
    first_whole_batch,
    ridge_point,
)

QWEN36 = "qwen3.6-35b-a3b"  # nvidia/Qwen3.6-35B-A3B-NVFP4: fp8 projections, W4A16 the rest


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    data: dict = json.loads(capsys.readouterr().out)
    return data


def crossover_batch(d: Deployment, dtypes: dict[str, str]) -> float:
    """Straight from the config's weights and the catalog's peaks: the batch B at which
    B × Σ 2 FLOP × weights ÷ peak(dtype) over the dense matmul categories equals the dense
    weights' bytes ÷ bandwidth (the routed experts and the input embedding apart; the norms'
    bytes read, their arithmetic none)."""
    acc = d.accelerator
    params = count_params(d.model).by_category
    read_s = sum(d.bytes_by_category[c] for c in (*dtypes, OTHER)) \
        / acc.memory_bandwidth_bytes_per_s
    token_s = sum(2 * params[c] / acc.peak(dtype) for c, dtype in dtypes.items())
    return read_s / token_s


@pytest.mark.parametrize("gpu", ["h200", "b200"])
def test_qwen36_nvfp4_dense_ridge_is_the_crossover_between_its_bf16_and_fp8_ridges(
        gpu: str) -> None:
    """Its attention and linear-attention projections run fp8 GEMMs (66 % of the dense
    matmuls' weights), its shared experts, router and LM head bf16: on an H200 the crossover
    is batch 134, between bf16's 90 and fp8's 180, where the step's one dtype had said 90."""
    acc = resolve_accelerator(gpu)
    d = Deployment.build(resolve_model(QWEN36), acc)
    dtypes = {ATTENTION: "fp8", LINEAR_ATTENTION: "fp8", SHARED_EXPERTS: "bf16",
              ROUTER: "bf16", LM_HEAD: "bf16"}
    assert {c: dt for c, _, dt in d.dense_matmuls} == dtypes
    expected = crossover_batch(d, dtypes)
    # the norms' 0.06 % of the weights count in bytes per weight, not in the matmuls' blend
    assert d.dense_ridge_batch == pytest.approx(expected, rel=1e-3)
    bw, bpw = acc.memory_bandwidth_bytes_per_s, d.bytes_per_weight_split[0]
    bf16, fp8 = (batch_for_intensity(ridge_point(acc.peak(dt), bw), bpw)
                 for dt in ("bf16", "fp8"))
    assert bf16 < d.dense_ridge_batch < fp8
    assert d.dense_blended and d.dense_dtype_label == "fp8+bf16"
    if gpu == "h200":
        assert (first_whole_batch(bf16), first_whole_batch(d.dense_ridge_batch),
                first_whole_batch(fp8)) == (90, 134, 180)


def test_one_rate_blends_to_itself_exactly() -> None:
    """The blend of one peak is that peak, bit for bit (a single-dtype checkpoint's ridge
    unchanged); of two, the weighted harmonic mean: half the weights at 1 and half at 2
    take 0.75 of the time at 1, so 1 ÷ 0.75."""
    assert blended_peak_flops_per_s([(0.3, 989.4e12), (0.7, 989.4e12)]) == 989.4e12
    assert blended_peak_flops_per_s([(1.0, 1.0), (1.0, 2.0)]) == pytest.approx(4 / 3)


@pytest.mark.parametrize(("model", "gpu", "weights"), [
    ("llama-3.1-8b", "h100", None), ("gpt-oss-120b", "b200", None),
    ("qwen3-30b-a3b", "a100", None), ("mixtral-8x7b", "h200", None),
    ("gemma-3-27b", "l40s", None), ("llama-3.1-70b", "a100", "fp8")])
def test_a_checkpoint_at_one_dtype_keeps_its_ridge_exactly(
        model: str, gpu: str, weights: str | None) -> None:
    """Every dense matmul at one peak (gpt-oss's bf16 attention, router and LM head beside
    its fp4 experts; fp8 weights on an A100, all run at bf16): the ridge is that dtype's, ==."""
    acc = resolve_accelerator(gpu)
    d = Deployment.build(resolve_model(model), acc, *([weights] if weights else []))
    assert not d.dense_blended
    assert d.dense_peak_flops_per_s == acc.peak(d.dense_compute_dtype)
    assert d.dense_ridge_batch == batch_for_intensity(
        ridge_point(acc.peak(d.dense_compute_dtype), acc.memory_bandwidth_bytes_per_s),
        d.bytes_per_weight_split[0])


def test_an_fp8_checkpoints_bf16_lm_head_pulls_its_ridge_below_fp8s() -> None:
    """vLLM's fp8 leaves the LM head bf16, and the step prices its matmul at bf16: Llama-3.1-
    70B fp8 on an H200 crosses over where its 68 B fp8 weights and 1 B bf16 ones take as
    long as their reads, under the all-fp8 ridge batch."""
    acc = resolve_accelerator("h200")
    d = Deployment.build(resolve_model("llama-3.1-70b"), acc, "fp8")
    dtypes = {ATTENTION: "fp8", "mlp": "fp8", LM_HEAD: "bf16"}
    assert {c: dt for c, _, dt in d.dense_matmuls} == dtypes
    assert d.dense_ridge_batch == pytest.approx(crossover_batch(d, dtypes), rel=1e-4)
    fp8 = batch_for_intensity(ridge_point(acc.peak("fp8"), acc.memory_bandwidth_bytes_per_s),
                              d.bytes_per_weight_split[0])
    assert d.dense_ridge_batch < fp8


def test_every_command_reads_the_blended_ridge_batch(capsys: pytest.CaptureFixture[str],
                                                     tmp_path) -> None:  # type: ignore[no-untyped-def]
    """fit's verdict, roofline's dense rows, utilization, observe and page all judge
    Qwen3.6-35B-A3B-NVFP4 on an H200 by the one crossover (134), and fit --explain shows
    the weighted sum with each category's dtype."""
    d = Deployment.build(resolve_model(QWEN36), resolve_accelerator("h200"))
    whole = first_whole_batch(d.dense_ridge_batch)
    base = ["--gpu", "h200"]
    fit = run_json(capsys, "fit", QWEN36, *base, "--max-model-len", "8192")
    assert fit["batch_to_ridge"] == d.dense_ridge_batch
    assert fit["first_whole_batch_to_ridge"] == whole
    roof = run_json(capsys, "roofline", *base, "--model", QWEN36, "--batch", "64")
    dense = [p for p in roof["points"] if "dense" in p["name"]]
    assert [p["first_whole_batch_to_ridge"] for p in dense] == [whole, whole]
    assert dense[0]["dtype"] == "fp8+bf16"
    assert dense[0]["peak_flops_per_s"] == d.dense_peak_flops_per_s
    assert dense[0]["fraction_of_peak"] == pytest.approx(64 / d.dense_ridge_batch)
    assert roof["ridge_flop_per_byte"] == pytest.approx(206.1, abs=0.1)  # the card's, at bf16
    util = run_json(capsys, "utilization", *base, "--model", QWEN36, "--running", "64")
    assert util["first_whole_batch_to_ridge"] == whole
    assert util["fraction_of_arithmetic"] == pytest.approx(64 / d.dense_ridge_batch)
    metrics = tmp_path / "metrics.txt"
    metrics.write_text("vllm:num_requests_running 64\n", "utf-8")
    obs = run_json(capsys, "observe", str(metrics), "--model", QWEN36, *base)
    assert obs["first_whole_batch_to_ridge"] == whole
    page = run_json(capsys, "page", QWEN36, *base, "--counts", "1")
    assert page["first_whole_batch_to_ridge"] == whole
    assert page["ridge_flop_per_byte"] == pytest.approx(d.dense_ridge_flop_per_byte)
    bf16 = run_json(capsys, "roofline", *base, "--model", QWEN36, "--compute-dtype", "bf16")
    assert bf16["points"][0]["first_whole_batch_to_ridge"] == 90  # judged at the dtype asked for
    assert main(["fit", QWEN36, *base, "--max-model-len", "8192", "--explain"]) == 0
    out = capsys.readouterr().out
    assert f"the ridge ({whole})" in out
    for line in ("dense matmuls' blended peak", "attention at fp8 = ", "linear_attention at fp8",
                 "lm_head at bf16 = ", "shared_experts at bf16", "blended peak (fp8+bf16)"):
        assert line in out, line
    assert EMBEDDING not in {c for c, _, _ in d.dense_matmuls}
