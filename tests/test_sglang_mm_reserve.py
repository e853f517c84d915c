"""From v0.5.18 SGLang takes a multimodal model's embedding cache out of every GPU's KV budget
(and, from v0.5.20, Qwen3-VL's CUDA IPC feature pool on a large Hopper card instead)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.model import ModelSpec
from ridgeline.sglang_memory import sglang_data
from ridgeline.sglang_mm_reserve import (
    sglang_mm_reserve,
    sglang_mm_transport_problem,
    sglang_nodes,
)
from tests.conftest import run_cli

MIB = 2**20
D = sglang_data()["mm_reserve"]
QWEN3_VL = D["hopper_qwen3_vl"]


def gemma(num_gpus: int = 1) -> Deployment:
    return Deployment.build(resolve_model("gemma-3-27b-it"), resolve_accelerator("h100"),
                            num_gpus=num_gpus, engine="sglang")


@pytest.mark.parametrize("version", ["0.5.18", "0.5.23", None])
def test_gemma_3s_pool_loses_the_embedding_cache_from_0_5_18(version: str | None) -> None:
    """Gemma-3-27B with --enable-multimodal on one H100: the same fraction as 0.5.17, the pool
    100 MiB (SGLANG_VLM_CACHE_SIZE_MB's default) smaller."""
    before = kv_pool(gemma(), EngineSettings(engine_version="0.5.17", enable_multimodal=True))
    after = kv_pool(gemma(), EngineSettings(engine_version=version, enable_multimodal=True))
    assert before.mm_reserve_bytes == 0
    assert after.mm_reserve_bytes == D["embedding_cache_mib"] * MIB
    assert after.reserved_fraction == before.reserved_fraction
    assert before.pool_bytes - after.pool_bytes == pytest.approx(D["embedding_cache_mib"] * MIB)
    assert after.tokens < before.tokens


def test_a_model_sglang_serves_text_only_keeps_its_pool() -> None:
    """Gemma-3 without --enable-multimodal is text-only to SGLang (mm_disabled_models), and a
    text model has no cache to reserve."""
    assert kv_pool(gemma(), EngineSettings()).mm_reserve_bytes == 0
    llama = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                             num_gpus=1, engine="sglang")
    assert kv_pool(llama, EngineSettings()).mm_reserve_bytes == 0


def test_every_tensor_parallel_rank_reserves_it() -> None:
    pool = kv_pool(gemma(4), EngineSettings(enable_multimodal=True))
    assert pool.mm_reserve_bytes == D["embedding_cache_mib"] * MIB


def qwen3_vl() -> ModelSpec:
    return replace(resolve_model("gemma-3-27b-it"), architecture=QWEN3_VL["architectures"][0])


def test_qwen3_vl_on_a_large_hopper_card_trades_the_cache_for_a_cuda_ipc_pool() -> None:
    """From 0.5.20 (not 0.5.19): no embedding cache, a 1,024 MiB feature pool on one node, 3 GiB
    at a given --max-running-requests of 400, nothing across nodes; an A100 keeps the cache."""
    model, h100 = qwen3_vl(), resolve_accelerator("h100")
    cache = float(D["embedding_cache_mib"])
    assert sglang_mm_reserve(model, h100, "0.5.19").mib == cache
    assert sglang_mm_reserve(model, h100, "0.5.20").mib == D["feature_transport_mib"]
    assert sglang_mm_reserve(model, h100, None, max_running_requests=399).mib == \
        D["feature_transport_mib"]
    assert sglang_mm_reserve(model, h100, None, max_running_requests=400).mib == \
        QWEN3_VL["many_requests_feature_transport_mib"]
    assert sglang_mm_reserve(model, h100, None, nodes=2).mib == 0
    assert sglang_mm_reserve(model, resolve_accelerator("a100"), None).mib == cache


def test_sixteen_h100s_take_two_nodes() -> None:
    assert sglang_nodes(gemma(16)) == 2 and sglang_nodes(gemma(8)) == 1


def test_fit_names_the_reserve_in_its_budget_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("fit", "gemma-3-27b-it", "--gpu", "h100", "--engine", "sglang",
            "--enable-multimodal", "--max-model-len", "8k")
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0 and "− multimodal buffers" in out
    code, out, _ = run_cli(capsys, *argv, "--explain")
    assert code == 0 and "SGLANG_VLM_CACHE_SIZE_MB" in out
    code, out, _ = run_cli(capsys, *argv, "--json")
    taken = json.loads(out)["taken_bytes_per_gpu"]
    assert code == 0 and taken["multimodal_buffers"] == D["embedding_cache_mib"] * MIB


# -- SGLANG_VLM_CACHE_SIZE_MB (--sglang-vlm-cache-size-mb) and --mm-feature-transport ----------

FLAG = D["feature_transport_flag"]
POOL = float(D["feature_transport_mib"])


def test_the_variable_sizes_the_embedding_cache_from_0_5_18() -> None:
    """Gemma-3-27B on one H100: 512 MiB set is 512 MiB out of the pool (412 more than the
    default's), 0 none; before 0.5.18 the cache is not taken from the pool at all."""
    model, h100 = resolve_model("gemma-3-27b-it"), resolve_accelerator("h100")
    for mib in (0, 512):
        assert sglang_mm_reserve(model, h100, None, True, vlm_cache_size_mb=mib).mib == mib
        assert sglang_mm_reserve(model, h100, "0.5.17", True, vlm_cache_size_mb=mib).mib == 0
    default = kv_pool(gemma(), EngineSettings(enable_multimodal=True))
    big = kv_pool(gemma(), EngineSettings(enable_multimodal=True, sglang_vlm_cache_size_mb=512))
    assert default.pool_bytes - big.pool_bytes == \
        pytest.approx((512 - D["embedding_cache_mib"]) * MIB)


def test_the_variable_set_keeps_qwen3_vls_cache_and_its_ipc_pool_off() -> None:
    """Qwen3-VL on an H100 from 0.5.20: the variable set, even to its default 100, keeps that
    cache and no CUDA IPC pool; set to 0, the pool the rule turns on (3 GiB at 400 requests)."""
    model, h100 = qwen3_vl(), resolve_accelerator("h100")
    default = float(D["embedding_cache_mib"])
    assert sglang_mm_reserve(model, h100, vlm_cache_size_mb=int(default)).mib == default
    assert sglang_mm_reserve(model, h100, vlm_cache_size_mb=0).mib == POOL
    assert sglang_mm_reserve(model, h100, vlm_cache_size_mb=0, max_running_requests=400).mib \
        == QWEN3_VL["many_requests_feature_transport_mib"]
    assert sglang_mm_reserve(model, h100, "0.5.19", vlm_cache_size_mb=0).mib == 0


def test_the_transport_adds_its_pool_or_takes_qwen3_vls_away() -> None:
    """cuda_ipc or cuda_vmm adds the 1,024 MiB pool to any multimodal model's cache; cpu given
    to Qwen3-VL on an H100 leaves neither; cuda_ipc beside a kept cache is 1,024 MiB even at
    400 requests (the 3 GiB needs no cache kept)."""
    gemma3, h100 = resolve_model("gemma-3-27b-it"), resolve_accelerator("h100")
    cache = float(D["embedding_cache_mib"])
    for transport in FLAG["gpu_pools"]:
        assert sglang_mm_reserve(gemma3, h100, None, True,
                                 feature_transport=transport).mib == cache + POOL
    assert sglang_mm_reserve(gemma3, h100, None, True, feature_transport="cpu").mib == cache
    assert sglang_mm_reserve(gemma3, h100, "0.5.17", True, feature_transport="cuda_ipc").mib == 0
    model = qwen3_vl()
    assert sglang_mm_reserve(model, h100, feature_transport="cpu").mib == 0
    assert sglang_mm_reserve(model, h100, feature_transport="cuda_ipc",
                             max_running_requests=400).mib == \
        QWEN3_VL["many_requests_feature_transport_mib"]
    assert sglang_mm_reserve(model, h100, feature_transport="cuda_ipc", vlm_cache_size_mb=512,
                             max_running_requests=400).mib == 512 + POOL


def test_the_transports_sglang_refuses_are_refused() -> None:
    h100, amd = resolve_accelerator("h100"), resolve_accelerator("mi300x")
    before = "0.5.15"
    assert "came in SGLang v" + FLAG["from"] in sglang_mm_transport_problem(
        before, "cpu", h100, 1)
    assert "not one SGLang v0.5.17 takes" in sglang_mm_transport_problem(
        "0.5.17", "cuda_vmm", h100, 1)
    assert sglang_mm_transport_problem("0.5.18", "cuda_vmm", h100, 1) == ""
    assert "single node" in sglang_mm_transport_problem(None, "cuda_ipc", h100, 2)
    assert sglang_mm_transport_problem(None, "cuda_vmm", h100, 2) == ""
    assert "pipeline" in sglang_mm_transport_problem(None, "cuda_vmm", h100, 1, 2)
    assert "NVIDIA" in sglang_mm_transport_problem(None, "cuda_ipc", amd, 1)
    assert sglang_mm_transport_problem(None, "cpu", amd, 1) == ""


def test_fit_reads_both_and_refuses_them_elsewhere(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("fit", "gemma-3-27b-it", "--gpu", "h100", "--engine", "sglang",
            "--enable-multimodal", "--max-model-len", "8k", "--json")
    code, out, _ = run_cli(capsys, *argv, "--sglang-vlm-cache-size-mb", "512",
                           "--mm-feature-transport", "cuda_ipc")
    taken = json.loads(out)["taken_bytes_per_gpu"]
    assert code == 0 and taken["multimodal_buffers"] == (512 + POOL) * MIB
    for flags in (("--mm-feature-transport", "cuda_vmm", "--engine-version", "0.5.17"),
                  ("--mm-feature-transport", "cuda_ipc", "--num-gpus", "16"),
                  ("--sglang-vlm-cache-size-mb", "1k")):
        code, _, err = run_cli(capsys, *argv, *flags)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm",
                           "--sglang-vlm-cache-size-mb", "0")
    assert code == 2 and "SGLang's" in err
    code, out, _ = run_cli(capsys, "fit", "--help-engine", "sglang")  # SGLang's flags in full
    assert "environment variable SGLANG_VLM_CACHE_SIZE_MB" in " ".join(out.split())
