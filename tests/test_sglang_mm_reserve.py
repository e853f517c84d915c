"""From v0.5.18 SGLang takes a multimodal model's embedding cache out of every GPU's KV budget
(and, from v0.5.20, Qwen3-VL's CUDA IPC feature pool on a large Hopper card instead)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.model import ModelSpec
from ridgeline.sglang_memory import sglang_data
from ridgeline.sglang_mm_reserve import (
    SGLangMMBuffers,
    sglang_mm_problem,
    sglang_mm_reserve,
    sglang_mm_transport,
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
    """Gemma-3-27B with --enable-multimodal on one H100: the same fraction as 0.5.16, the pool
    100 MiB (SGLANG_VLM_CACHE_SIZE_MB's default) smaller."""
    before = kv_pool(gemma(), EngineSettings(engine_version="0.5.16", enable_multimodal=True))
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
        cache = SGLangMMBuffers(vlm_cache_size_mb=mib)
        assert sglang_mm_reserve(model, h100, None, True, buffers=cache).mib == mib
        assert sglang_mm_reserve(model, h100, "0.5.16", True, buffers=cache).mib == 0
    default = kv_pool(gemma(), EngineSettings(enable_multimodal=True))
    big = kv_pool(gemma(), EngineSettings(enable_multimodal=True, sglang_vlm_cache_size_mb=512))
    assert default.pool_bytes - big.pool_bytes == \
        pytest.approx((512 - D["embedding_cache_mib"]) * MIB)


def test_the_variable_set_keeps_qwen3_vls_cache_and_its_ipc_pool_off() -> None:
    """Qwen3-VL on an H100 from 0.5.20: the variable set, even to its default 100, keeps that
    cache and no CUDA IPC pool; set to 0, the pool the rule turns on (3 GiB at 400 requests)."""
    model, h100 = qwen3_vl(), resolve_accelerator("h100")
    default = float(D["embedding_cache_mib"])
    kept, none = SGLangMMBuffers(int(default)), SGLangMMBuffers(0)
    assert sglang_mm_reserve(model, h100, buffers=kept).mib == default
    assert sglang_mm_reserve(model, h100, buffers=none).mib == POOL
    assert sglang_mm_reserve(model, h100, max_running_requests=400, buffers=none).mib \
        == QWEN3_VL["many_requests_feature_transport_mib"]
    assert sglang_mm_reserve(model, h100, "0.5.19", buffers=none).mib == 0


def test_the_transport_adds_its_pool_or_takes_qwen3_vls_away() -> None:
    """cuda_ipc or cuda_vmm adds the 1,024 MiB pool to any multimodal model's cache; cpu given
    to Qwen3-VL on an H100 leaves neither; cuda_ipc beside a kept cache is 1,024 MiB even at
    400 requests (the 3 GiB needs no cache kept)."""
    gemma3, h100 = resolve_model("gemma-3-27b-it"), resolve_accelerator("h100")
    cache = float(D["embedding_cache_mib"])
    for transport in FLAG["gpu_pools"]:
        assert sglang_mm_reserve(gemma3, h100, None, True,
                                 buffers=SGLangMMBuffers(feature_transport=transport)).mib == \
            cache + POOL
    cpu, ipc = SGLangMMBuffers(feature_transport="cpu"), SGLangMMBuffers(feature_transport="cuda_ipc")
    assert sglang_mm_reserve(gemma3, h100, None, True, buffers=cpu).mib == cache
    model = qwen3_vl()
    assert sglang_mm_reserve(model, h100, buffers=cpu).mib == 0
    assert sglang_mm_reserve(model, h100, max_running_requests=400, buffers=ipc).mib == \
        QWEN3_VL["many_requests_feature_transport_mib"]
    assert sglang_mm_reserve(model, h100, max_running_requests=400, buffers=SGLangMMBuffers(
        512, "cuda_ipc")).mib == 512 + POOL


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


# -- the pool before the reservation, SGLang's own pick, and the two sizes ---------------------

AUTO = FLAG["auto"]


def qwen3_5(num_gpus: int, gpu: str = "gb200", pp: int = 1) -> Deployment:
    return Deployment.build(resolve_model("qwen3.5-35b-a3b"), resolve_accelerator(gpu),
                            num_gpus=num_gpus, pipeline_parallel_size=pp, engine="sglang")


def test_0_5_16_and_0_5_17_lose_the_feature_pool_without_reserving_it() -> None:
    """The pool lands on the first GPU while the model loads, so 0.5.16-0.5.17 lose it from the
    KV pool though they reserve nothing: cuda_ipc given in 0.5.16, and 0.5.17's own pick on one
    node (cpu given turns it off; 16 H100s are 2 nodes, where it picks cpu). The embedding cache
    is still not theirs to lose."""
    gemma3, h100 = resolve_model("gemma-3-27b-it"), resolve_accelerator("h100")
    ipc = SGLangMMBuffers(512, "cuda_ipc")
    assert sglang_mm_reserve(gemma3, h100, "0.5.16", True).mib == 0
    assert sglang_mm_reserve(gemma3, h100, "0.5.16", True, buffers=ipc).mib == POOL
    assert sglang_mm_reserve(gemma3, h100, "0.5.17", True).mib == POOL
    assert sglang_mm_reserve(gemma3, h100, "0.5.17", True, nodes=2).mib == 0
    assert sglang_mm_reserve(gemma3, h100, "0.5.17", True,
                             buffers=SGLangMMBuffers(512, "cpu")).mib == 0
    assert sglang_mm_reserve(gemma3, h100, "0.5.15", True, buffers=ipc).mib == 0
    assert sglang_mm_reserve(gemma3, h100, "0.5.17").mib == 0  # text-only without the flag
    cpu = kv_pool(gemma(), EngineSettings(engine_version="0.5.17", enable_multimodal=True,
                                          mm_feature_transport="cpu"))
    picked = kv_pool(gemma(), EngineSettings(engine_version="0.5.17", enable_multimodal=True))
    assert cpu.pool_bytes - picked.pool_bytes == pytest.approx(POOL * MIB)
    assert "no reservation before v" + D["from"] in sglang_mm_reserve(
        gemma3, h100, "0.5.17", True).note


def test_sglang_picks_cuda_vmm_across_gb200_nodes_for_the_models_that_opt_in() -> None:
    """Qwen3.5-35B-A3B on 8 GB200s (2 trays of 4): cuda_vmm from 0.5.18, so its pool joins the
    cache; one tray, 16 H100s, Gemma-3 (not opted in) or 0.5.17 pick cpu."""
    q = resolve_model("qwen3.5-35b-a3b")
    gb200, h100 = resolve_accelerator("gb200"), resolve_accelerator("h100")
    assert q.architecture in AUTO["cuda_vmm_architectures"][AUTO["cuda_vmm_multi_node_from"]]
    assert sglang_nodes(qwen3_5(8)) == 2 and sglang_nodes(qwen3_5(4)) == 1
    assert sglang_mm_transport(q, gb200, None, nodes=2) == "cuda_vmm"
    assert sglang_mm_transport(q, gb200, "0.5.17", nodes=2) == "cpu"
    assert sglang_mm_transport(q, gb200, None, nodes=1) == "cpu"
    assert sglang_mm_transport(q, h100, None, nodes=2) == "cpu"
    assert sglang_mm_transport(resolve_model("gemma-3-27b-it"), gb200, None, True, 2) == "cpu"
    assert sglang_mm_transport(q, gb200, None, nodes=2, given="cpu") == "cpu"
    cache = float(D["embedding_cache_mib"])
    assert kv_pool(qwen3_5(8), EngineSettings()).mm_reserve_bytes == (cache + POOL) * MIB
    assert kv_pool(qwen3_5(4), EngineSettings()).mm_reserve_bytes == cache * MIB
    assert "IMEX" in sglang_mm_reserve(q, gb200, nodes=2).note


def test_sglang_refuses_its_own_cuda_vmm_pick_beside_pipeline_stages() -> None:
    q, gb200 = resolve_model("qwen3.5-35b-a3b"), resolve_accelerator("gb200")
    assert "pipeline stages" in sglang_mm_problem(q, gb200, None, False, 2, 2)
    assert sglang_mm_problem(q, gb200, None, False, 2, 2, None,
                             SGLangMMBuffers(feature_transport="cpu")) == ""
    assert sglang_mm_problem(q, gb200, None, False, 2, 1) == ""
    with pytest.raises(InputError, match="pipeline stages"):
        kv_pool(qwen3_5(8, pp=2), EngineSettings())


def test_the_feature_cache_variable_sizes_the_pool_and_keeps_qwen3_vls_3_gib_off() -> None:
    """SGLANG_MM_FEATURE_CACHE_MB set: that many MiB for any GPU pool, even the one Qwen3-VL
    turns on at 400 requests (whose 3 GiB needs the variable unset); 0 refused where a GPU pool
    is built, harmless where none is."""
    gemma3, h100 = resolve_model("gemma-3-27b-it"), resolve_accelerator("h100")
    cache = float(D["embedding_cache_mib"])
    assert sglang_mm_reserve(gemma3, h100, None, True, buffers=SGLangMMBuffers(
        None, "cuda_vmm", 2048)).mib == cache + 2048
    assert sglang_mm_reserve(gemma3, h100, "0.5.16", True, buffers=SGLangMMBuffers(
        None, "cuda_ipc", 2048)).mib == 2048
    model = qwen3_vl()
    for mib in (512, 1024, 2048):
        assert sglang_mm_reserve(model, h100, max_running_requests=400, buffers=SGLangMMBuffers(
            0, None, mib)).mib == mib
    assert "positive" in sglang_mm_problem(gemma3, h100, None, True, 1, buffers=SGLangMMBuffers(
        None, "cuda_ipc", 0))
    assert "positive" in sglang_mm_problem(model, h100, None, False, 1, buffers=SGLangMMBuffers(
        0, None, 0))
    assert sglang_mm_problem(gemma3, h100, None, True, 1, buffers=SGLangMMBuffers(
        None, "cpu", 0)) == ""


def test_the_preprocess_cache_is_host_memory_but_turns_qwen3_vls_pool_off() -> None:
    """--mm-preprocess-cache-size-mb (v0.5.18+) costs no GPU memory: Gemma-3's reserve stays the
    cache; above 0 it is retention, so Qwen3-VL on an H100 keeps no CUDA IPC pool (0 does)."""
    gemma3, h100 = resolve_model("gemma-3-27b-it"), resolve_accelerator("h100")
    host = SGLangMMBuffers(preprocess_cache_mb=4096)
    assert sglang_mm_reserve(gemma3, h100, None, True, buffers=host).mib == \
        sglang_mm_reserve(gemma3, h100, None, True).mib
    assert "host memory" in sglang_mm_reserve(gemma3, h100, None, True, buffers=host).note
    model = qwen3_vl()
    assert sglang_mm_reserve(model, h100, buffers=host).mib == 0
    assert sglang_mm_reserve(model, h100, buffers=SGLangMMBuffers(preprocess_cache_mb=0)).mib \
        == POOL
    since = D["preprocess_cache_flag"]["from"]
    assert f"came in SGLang v{since}" in sglang_mm_problem(gemma3, h100, "0.5.17", True, 1,
                                                           buffers=host)


def test_fit_reads_the_two_new_settings(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("fit", "gemma-3-27b-it", "--gpu", "h100", "--engine", "sglang",
            "--enable-multimodal", "--max-model-len", "8k", "--json")
    code, out, _ = run_cli(capsys, *argv, "--sglang-mm-feature-cache-mb", "2048",
                           "--mm-feature-transport", "cuda_ipc",
                           "--mm-preprocess-cache-size-mb", "512")
    taken = json.loads(out)["taken_bytes_per_gpu"]
    assert code == 0 and taken["multimodal_buffers"] == (D["embedding_cache_mib"] + 2048) * MIB
    for flags in (("--sglang-mm-feature-cache-mb", "0", "--mm-feature-transport", "cuda_ipc"),
                  ("--sglang-mm-feature-cache-mb", "1k"),
                  ("--mm-preprocess-cache-size-mb", "-1"),
                  ("--mm-preprocess-cache-size-mb", "64", "--engine-version", "0.5.17")):
        code, _, err = run_cli(capsys, *argv, *flags)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
    for flag in ("--sglang-mm-feature-cache-mb", "--mm-preprocess-cache-size-mb"):
        code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine",
                               "vllm", flag, "64")
        assert code == 2 and "SGLang's" in err
    code, out, _ = run_cli(capsys, "fit", "--help-engine", "sglang")
    assert "in host memory" in " ".join(out.split())
