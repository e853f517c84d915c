"""The companion and arithmetic commands: attention's causal worst case,
utilization's flags and pipeline wording, kv's and model's recurrent-state dtype, kv's
caution for a model_type ridgeline has not checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline.attention_memory import attention_memory, causal_keys_read
from ridgeline.catalog import resolve_model
from ridgeline.units import GIB, MIB
from tests.conftest import run_cli

# --- attention: a causal kernel skips the tiles above the diagonal ---


def test_a_causal_kernel_rereads_about_half_the_keys_a_full_mask_would() -> None:
    """64K tokens in 512 tiles of 128 rows: tile i sees (i + 1)·128 keys, 128·(1 + … + 512)
    = 16,809,984 in all, 32,832 a tile: 0.501 of the 65,536 the old figure read per tile."""
    assert causal_keys_read(65_536, 128) == 128 * sum(range(1, 513))
    assert causal_keys_read(65_536, 128) / 512 == 32_832
    # a last tile cut short: 300 tokens are tiles of 128, 128 and 44 rows: 128 + 256 + 300
    assert causal_keys_read(300, 128) == 128 + 256 + 300
    # a window of 100: tile 0 keys 0-127, tile 1 keys 29-255 (227), tile 2 keys 157-299
    assert causal_keys_read(300, 128, window=100) == 128 + (256 - 29) + (300 - 157)
    # chunks of 256: tile 2 starts a chunk at key 256 and sees 256-299
    assert causal_keys_read(300, 128, chunk=256) == 128 + 256 + (300 - 256)


def test_llama_70b_at_64k_rereads_44_tb_not_88_in_text_json_and_explain(
        capsys: pytest.CaptureFixture[str]) -> None:
    """80 layers × (Q, O: 65,536·64 + K, V: 64 heads × 16,809,984 keys) × 256 dims × 2 B."""
    hand = 80 * (65_536 * 64 + 64 * 128 * sum(range(1, 513))) * (128 + 128) * 2
    report = attention_memory(resolve_model("llama-3.1-70b"), 65_536)
    assert report.total_tiled_worst_bytes == hand
    assert round(hand / 1e12, 1) == 44.2
    code, out, _ = run_cli(capsys, "attention", "--model", "llama-3.1-70b", "--context", "64K",
                           "--explain")
    assert code == 0 and "44.2 TB if K and V were re-read" in out and "causal" in out
    assert "keys read per head, full attention = 16,809,984 keys" in out
    assert f"=> total = {hand / 1e9:,.0f} GB" in out
    ratio = report.total_naive_bytes / report.total_tiled_bytes
    assert "naive ÷ tiled: naive traffic ÷ tiled traffic" in out
    assert f"=> ratio = {ratio:,.0f} x" in out
    code, out, _ = run_cli(capsys, "attention", "--model", "llama-3.1-70b", "--context", "64K",
                           "--json")
    assert json.loads(out)["total_tiled_worst_bytes"] == hand


def test_llama4_chunked_layers_reread_from_their_chunks_start(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Scout at 64K: 36 chunked layers (8,192) and 12 full. A chunk holds 64 tiles of 128;
    its tile j sees (j + 1)·128 keys: 8 chunks × 128·(1 + … + 64) = 2,129,920 a head."""
    spec = resolve_model("llama-4-scout")
    chunk_keys = 8 * 128 * sum(range(1, 65))
    assert causal_keys_read(65_536, 128, chunk=8192) == chunk_keys
    att = spec.attention
    assert att is not None
    h, dims = att.num_heads, att.head_dim + att.v_head_dim
    full_keys = 128 * sum(range(1, 513))
    hand = (36 * (65_536 * h + h * chunk_keys) + 12 * (65_536 * h + h * full_keys)) * dims * 2
    assert attention_memory(spec, 65_536).total_tiled_worst_bytes == hand
    code, out, _ = run_cli(capsys, "attention", "--model", "llama-4-scout", "--context", "64K",
                           "--explain")
    assert code == 0
    assert f"keys read per head, chunk 8,192 = {chunk_keys:,} keys  [a layer" in out
    assert "attention layers, chunk 8,192 = 36" in out


# --- utilization: --compute-dtype beside --model, and uneven micro-batches ---


def test_utilization_refuses_a_compute_dtype_its_models_weights_do_not_run_at(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--compute-dtype fp8 beside a bf16 model was dropped (the bf16 ridge, 2.7%, printed as
    if fp8 were read). An engine's matmuls follow the weights: it points to --weights."""
    base = ["utilization", "--gpu", "h100", "--running", "8", "--model", "llama-3.1-8b",
            "--context", "8K"]
    code, out, err = run_cli(capsys, *base, "--compute-dtype", "fp8")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "--weights fp8" in err and "--compute-dtype fp8" in err
    # the dtype the weights run at is no contradiction; --weights fp8 reads the fp8 ridge
    code, out, _ = run_cli(capsys, *base, "--compute-dtype", "bf16", "--json")
    assert code == 0
    bf16 = json.loads(out)
    code, out, _ = run_cli(capsys, *base, "--weights", "fp8", "--compute-dtype", "fp8",
                           "--json")
    fp8 = json.loads(out)
    assert code == 0 and fp8["ridge_flop_per_byte"] == pytest.approx(
        2 * bf16["ridge_flop_per_byte"], rel=0.01)  # 1,979 vs 989.4 TFLOP/s on 3.35 TB/s


def test_utilization_says_micro_batches_of_up_to_where_the_pipeline_splits_unevenly(
        capsys: pytest.CaptureFixture[str]) -> None:
    """8 running over 3 stages are micro-batches of 3, 3 and 2: 'up to 3'; 9 are three of 3."""
    base = ["utilization", "--gpu", "h100", "-pp", "3", "--model", "llama-3.1-8b", "--context",
            "8K", "--running"]
    code, out, _ = run_cli(capsys, *base, "8")
    assert code == 0 and f"micro-batches of up to {-(-8 // 3)}" in out
    assert "a micro-batch of" not in out
    code, out, _ = run_cli(capsys, *base, "9")
    assert code == 0 and f"a micro-batch of {9 // 3}" in out and "up to" not in out


# --- kv and model: Nemotron-H's SSM state as vLLM keeps it ---

NEMOTRON_FP32_STATE = 54 * (61_440 * 2 + 4_194_304 * 4)  # conv bf16, SSM fp32, 54 layers
NEMOTRON_KV_8K = 10 * 2 * 8 * 128 * 2 * 8192  # 10 attention layers, bf16


def test_kv_sizes_nemotron_h_state_in_fp32_as_fit_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM ≥ 0.20 keeps Nemotron-H's SSM state in fp32 (fit's 4,128-token blocks): 870.3 MiB
    a sequence, not 438.3; 40 GiB then holds 40 GiB ÷ (320 MiB + 870.3 MiB) = 34, not 54."""
    argv = ["kv", "nemotron-h-56b", "--context", "8192", "--memory-gib", "40"]
    code, out, _ = run_cli(capsys, *argv, "--json")
    data = json.loads(out)
    assert code == 0 and data["state_bytes_per_sequence"] == NEMOTRON_FP32_STATE
    assert data["state_dtypes"]["ssm"] == "fp32" and data["state_dtypes"]["conv"] == "bf16"
    fits = int(40 * GIB // (NEMOTRON_KV_8K + NEMOTRON_FP32_STATE))
    assert data["conversations"] == fits == 34
    code, out, _ = run_cli(capsys, *argv, "--explain")
    assert "bf16 cache, SSM state fp32, conv state bf16" in out
    assert f"{NEMOTRON_FP32_STATE / MIB:.1f} MiB" in out
    assert "SSM bytes = 4 B  [fp32: vLLM" in out and "conv bytes = 2 B  [bf16]" in out
    # the same per-layer state fit's vLLM pool pages
    code, out, _ = run_cli(capsys, "fit", "nemotron-h-56b", "--gpu", "h200", "--max-model-len",
                           "8192", "--json")
    block = json.loads(out)["block_size"]
    # the attention block grows to the state page in steps of the default block, 64 from
    # vLLM 0.34 (16 before: 4,128)
    assert block == 64 * -(-(NEMOTRON_FP32_STATE // 54) // (64 * 2 * 8 * 128 * 2))  # 4,160


def test_model_reports_nemotron_h_state_at_vllms_dtype_and_names_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "model", "nemotron-h-56b", "--json")
    data = json.loads(out)
    assert code == 0 and data["kv_constant_bytes_per_sequence_bf16"] == NEMOTRON_FP32_STATE
    assert data["state_dtypes"]["ssm"] == "fp32"
    code, out, _ = run_cli(capsys, "model", "nemotron-h-56b", "--explain")
    assert f"{NEMOTRON_FP32_STATE / MIB:.1f} MiB constant" in out
    assert "SSM state fp32, conv state bf16" in out and "SSM bytes = 4 B" in out


def test_a_state_the_config_names_is_kept_and_llama_cpp_keeps_both_in_f32(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3.5-35B-A3B names mamba_ssm_dtype float32, which vLLM keeps: 30 GDN layers of
    conv 3·(2·2,048 + 4,096) = 24,576 bf16 + 32·128·128 = 524,288 fp32 elements. llama.cpp
    (the engine on Apple silicon) keeps both in f32."""
    code, out, _ = run_cli(capsys, "kv", "qwen3.5-35b-a3b", "--context", "8192", "--json")
    assert code == 0 and json.loads(out)["state_bytes_per_sequence"] == \
        30 * (24_576 * 2 + 524_288 * 4)
    code, out, _ = run_cli(capsys, "kv", "qwen3.5-35b-a3b", "--context", "8192", "--gpu",
                           "apple-m3-max-40c", "--json")
    data = json.loads(out)
    assert code == 0 and data["state_bytes_per_sequence"] == 30 * (24_576 + 524_288) * 4
    assert data["state_dtypes"]["conv"] == data["state_dtypes"]["ssm"] == "fp32"
    # a model without recurrent state names none
    code, out, _ = run_cli(capsys, "kv", "llama-3.1-8b", "--context", "8192", "--json")
    assert json.loads(out)["state_dtypes"] is None


# --- kv: the caution model and decode give for a model_type not checked ---


def test_kv_cautions_a_model_type_ridgeline_has_not_checked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ridgeline.datafiles import load_data

    config = dict(load_data("models/meta-llama--Llama-2-7b-hf.json"))
    config.update(model_type="frobnicator", architectures=["FrobForCausalLM"])
    path = tmp_path / "frob.json"
    path.write_text(json.dumps(config))
    code, out, _ = run_cli(capsys, "model", str(path), "--json")
    (caution,) = json.loads(out)["cautions"]
    assert code == 0 and "model_type 'frobnicator'" in caution
    code, out, _ = run_cli(capsys, "kv", str(path), "--context", "100", "--memory-gib", "1",
                           "--json")
    assert code == 0 and json.loads(out)["cautions"] == [caution]
    code, out, _ = run_cli(capsys, "kv", str(path), "--context", "100", "--memory-gib", "1")
    assert f"caution: {caution}" in out
    code, out, _ = run_cli(capsys, "kv", "llama-2-7b", "--context", "100", "--json")
    assert json.loads(out)["cautions"] == []


def test_utilization_stops_where_no_conversation_runs_and_warns_past_the_pool(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A context no pool holds is no running batch: one line, exit 2 (as amdahl). A batch
    past the pool, where some conversations fit, still reads, with its preemption warning."""
    code, out, err = run_cli(capsys, "utilization", "--gpu", "h100", "--running", "8",
                             "--model", "llama-3.1-8b", "--context", "10000000")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "does not fit: vllm's KV pool for llama-3.1-8b on 1 x h100-sxm holds 0 " \
        "conversations of 10,000,000 tokens" in err
    code, out, _ = run_cli(capsys, "utilization", "--gpu", "h100", "--running", "300",
                           "--model", "llama-3.1-8b", "--context", "8K")
    assert code == 0 and "preemption" in out
