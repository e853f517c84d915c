"""vLLM 0.34's extensible KV cache (vllm_extensible.py): the pool measured after warm-up and
CUDA-graph capture, at gpu_memory_utilization 1.0 unless given, less what the measurement
keeps free; --no-enable-extensible-kv-cache (or --kv-cache-memory-bytes) sizes it as 0.33 did;
the default block is 64 tokens (16 on ROCm's first backend)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.units import GIB, MIB
from ridgeline.vllm_extensible import (
    granule_cut_bytes,
    kept_free_bytes,
    prompt_logprob_step_bytes,
    sizing_margin_bytes,
    start_context_bytes,
)
from tests.conftest import run_cli

S = EngineSettings(max_model_len=8192, engine_version="0.34")


def dep(model: str, gpu: str = "h100", n: int = 1) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), num_gpus=n)


def test_the_docstrings_worked_numbers() -> None:
    llama = dep("llama-3.1-8b")
    assert prompt_logprob_step_bytes(llama, 8192) / GIB == pytest.approx(0.307, abs=0.001)
    assert sizing_margin_bytes(1.84 * GIB, "nvidia") / GIB == pytest.approx(1.38)
    assert sizing_margin_bytes(0.5 * GIB, "nvidia") == GIB  # the floor
    assert sizing_margin_bytes(0.5 * GIB, "amd") == 3 * GIB  # ROCm's floor
    total = llama.accelerator.memory_bytes
    assert kept_free_bytes(total, 1.0, 0.5 * GIB, 1.38 * GIB) / GIB == pytest.approx(1.88)
    assert kept_free_bytes(total, 0.92, 0.5 * GIB, 1.38 * GIB) == 0  # 6.3 GiB left out
    assert granule_cut_bytes(32) == 64 * MIB


def test_llama_8b_on_an_h100_is_the_whole_card_less_the_taken_and_what_is_kept_free() -> None:
    d = dep("llama-3.1-8b")
    pool = kv_pool(d, S)
    assert pool.reserved_fraction == 1.0 and pool.block_size == 64
    taken = pool.weight_bytes + pool.activation_bytes + pool.non_torch_bytes \
        + pool.cuda_graph_bytes + pool.seat_buffer_bytes + pool.kept_free_bytes
    assert pool.pool_bytes == pytest.approx(pool.total_bytes - taken, rel=1e-12)
    # kept free: 0.5 GiB held before the snapshot, 0.75 × its 1.84 GiB peak, 32 granules
    assert pool.kept_free_bytes == pytest.approx(
        start_context_bytes(d) + sizing_margin_bytes(pool.activation_bytes, "nvidia")
        + granule_cut_bytes(32))
    assert start_context_bytes(d) == 0.5 * GIB
    assert start_context_bytes(dep("llama-3.1-8b", n=2)) == 0.75 * GIB
    # the profile's terms are 0.33's: only the fraction, the block and what is kept free move
    old = kv_pool(d, replace(S, engine_version="0.33"))
    assert (old.activation_bytes, old.cuda_graph_bytes, old.seat_buffer_bytes) == (
        pool.activation_bytes, pool.cuda_graph_bytes, pool.seat_buffer_bytes)
    assert pool.pool_bytes - old.pool_bytes == pytest.approx(
        pool.total_bytes * (1 - old.reserved_fraction) - pool.kept_free_bytes, rel=1e-12)
    assert pool.pool_bytes > old.pool_bytes + 4 * GIB  # 54.64 -> 59.03 GiB


def test_switched_off_it_is_0_33s_profile_at_0_92() -> None:
    d = dep("llama-3.1-8b")
    off = kv_pool(d, replace(S, extensible_kv_cache=False))
    old = kv_pool(d, replace(S, engine_version="0.33"))
    assert off.reserved_fraction == old.reserved_fraction == 0.92
    assert off.pool_bytes == old.pool_bytes and off.kept_free_bytes == 0
    assert (off.block_size, old.block_size) == (64, 16)  # the block stays 0.34's


def test_a_fraction_given_keeps_free_only_what_it_does_not_leave_out() -> None:
    """At 0.92 the 6.3 GiB left out of an H100 cover the start-up context and the margin:
    only the granules are cut, so the pool is the profile's less them (vLLM warns the user
    that the fraction withholds memory its measurement does not need)."""
    d = dep("llama-3.1-8b")
    given = kv_pool(d, replace(S, gpu_memory_utilization=0.92))
    off = kv_pool(d, replace(S, gpu_memory_utilization=0.92, extensible_kv_cache=False))
    assert given.kept_free_bytes == granule_cut_bytes(32)
    assert off.pool_bytes - given.pool_bytes == pytest.approx(granule_cut_bytes(32))


def test_rocm_keeps_a_3_gib_floor_and_16_token_blocks() -> None:
    d = dep("llama-3.1-70b", "mi300x")
    pool = kv_pool(d, replace(S, max_model_len=32768))
    layers = len(d.model.layers)
    assert pool.block_size == 16  # ROCM_ATTN's preferred block
    assert pool.kept_free_bytes == pytest.approx(
        start_context_bytes(d) + max(3 * GIB, 0.75 * pool.activation_bytes)
        + granule_cut_bytes(layers))


def test_mla_and_hybrid_blocks_follow_the_default_64() -> None:
    # DeepSeek-V3 on H200: FlashAttention MLA takes the default 64 (16 in 0.33)
    ds = dep("deepseek-v3", "h200", 8)
    assert kv_pool(ds, S).block_size == 64
    assert kv_pool(ds, replace(S, engine_version="0.33")).block_size == 16
    # on B200, FlashInfer MLA takes 32 and 64: 64 from 0.34, its smallest before
    b200 = dep("deepseek-v3", "b200", 8)
    assert kv_pool(b200, S).block_size == 64
    assert kv_pool(b200, replace(S, engine_version="0.33")).block_size == 32
    # Nemotron-H's attention block grows to its Mamba page in steps of the block, now 64
    nemotron = dep("nemotron-h-56b", "h100", 2)
    assert kv_pool(nemotron, S).block_size % 64 == 0
    assert kv_pool(nemotron, replace(S, engine_version="0.33")).block_size % 64 != 0


def test_the_flag_is_refused_where_vllm_refuses_it(capsys: pytest.CaptureFixture[str]) -> None:
    fit = ("fit", "llama-3.1-8b", "--max-model-len", "8192", "--enable-extensible-kv-cache")
    for extra, said in ((("--gpu", "h100", "--engine-version", "0.33"), "came in vLLM 0.34"),
                        (("--gpu", "h100", "--kv-cache-memory-bytes", "20G"),
                         "give one of them"),
                        (("--gpu", "gaudi3", "--engine", "vllm"), "only on CUDA and ROCm"),
                        (("--gpu", "h100", "--engine", "sglang"), "is vLLM's")):
        code, out, err = run_cli(capsys, *fit, *extra)
        assert code == 2 and not out and said in err and len(err.strip().splitlines()) == 1
    code, out, _ = run_cli(capsys, *fit, "--gpu", "h100", "--json")
    assert code == 0 and json.loads(out)["reserved_fraction"] == 1.0


def test_fit_names_the_term_and_cautions_its_calibration(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192",
            "--engine-version", "0.34")
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0 and "− kept free after warm-up" in out
    assert "reserved (gpu_memory_utilization 1.0)" in out
    caution = [line for line in out.splitlines() if "extensible KV cache is unchecked" in line]
    code, older, _ = run_cli(capsys, *argv, "--no-enable-extensible-kv-cache", "--json")
    profiled = json.loads(older)
    assert code == 0
    code, older, _ = run_cli(capsys, *argv, "--no-enable-extensible-kv-cache")
    assert code == 0 and "kept free" not in older
    assert "reserved (gpu_memory_utilization 0.92)" in older
    assert "extensible KV cache is unchecked" not in older
    # one line, said once, naming the pool and conversations 0.33's rules give the same run
    assert len(caution) == 1 and out.count("extensible KV cache is unchecked") == 1
    assert f"give {profiled['pool_bytes_per_gpu'] / GIB:,.2f} GiB per GPU, " \
        f"{profiled['conversations']:,} conversations of 8,192 tokens" in caution[0]
    code, out, _ = run_cli(capsys, *argv, "--json")
    report = json.loads(out)
    assert report["taken_bytes_per_gpu"]["kept_free_after_warmup"] > 0
    code, out, _ = run_cli(capsys, *argv, "--explain")
    assert "kept free after warm-up" in out and "extensible KV cache" in out


def test_the_033_caution_at_no_conversation_says_vllm_would_refuse_to_start(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma-3-27B on one H100 at 131,072 tokens: 0.34's extensible cache holds one, 0.33's
    rules none, which is no slow service but a refusal at start-up: the caution says so with
    the blocks that run's own start-up check asks of its pool; where 0.33's rules hold some
    (8,192 tokens), no such words."""
    argv = ("fit", "gemma-3-27b", "--gpu", "h100", "--max-model-len", "131072")
    out = run_cli(capsys, *argv)[1]
    (caution,) = [line for line in out.splitlines() if "extensible KV cache is unchecked" in line]
    older = json.loads(run_cli(capsys, *argv, "--no-enable-extensible-kv-cache", "--json")[1])
    check = older["start_up_check"]
    assert older["conversations"] == 0 and not check["starts"]
    v033 = json.loads(run_cli(capsys, *argv, "--engine-version", "0.33", "--json")[1])
    assert v033["conversations"] == 0 and not v033["start_up_check"]["starts"]
    assert caution.endswith(
        "0 conversations of 131,072 tokens: under them vLLM 0.33 would refuse to start at "
        "131,072 tokens, its pool short of one such request "
        f"({check['blocks_asked']:,} blocks asked of its {check['pool_blocks']:,})")
    short = run_cli(capsys, "fit", "gemma-3-27b", "--gpu", "h100", "--max-model-len", "8192")[1]
    assert "extensible KV cache is unchecked" in short and "refuse to start" not in short


def test_a_comparison_says_the_caution_once_with_each_cards_profiled_figures(
        capsys: pytest.CaptureFixture[str]) -> None:
    """fit across cards: one line, 'caution (each)', naming each card's pool and conversations
    under 0.33's rules, as each card's own --no-enable-extensible-kv-cache run gives them."""
    argv = ("fit", "llama-3.1-8b", "--max-model-len", "8192", "--engine-version", "0.34")
    code, out, _ = run_cli(capsys, *argv, "--gpu", "h100,h200")
    lines = [line for line in out.splitlines() if "extensible KV cache is unchecked" in line]
    assert code == 0 and len(lines) == 1 and lines[0].startswith("caution (each): ")
    for gpu, label in (("h100", "1 x h100-sxm"), ("h200", "1 x h200-sxm")):
        code, older, _ = run_cli(capsys, *argv, "--gpu", gpu, "--no-enable-extensible-kv-cache",
                                 "--json")
        profiled = json.loads(older)
        assert f"{label}: {profiled['pool_bytes_per_gpu'] / GIB:,.2f} GiB per GPU, " \
            f"{profiled['conversations']:,} conversations" in lines[0]
