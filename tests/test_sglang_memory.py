"""SGLang's static pool: its default fraction release by release, applied to what its
distributed start-up leaves."""

from __future__ import annotations

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.memory import VISIBLE_MEMORY_FRACTION, EngineSettings, kv_pool
from ridgeline.sglang_memory import (
    RESERVED_MIB,
    TIER_RESERVE,
    TP_TABLE,
    sglang_era,
    sglang_memory_defaults,
    sglang_startup_bytes,
)
from ridgeline.units import GIB

H100_SMI_MIB = 81_559  # nvidia-smi's memory.total for an H100 80GB


def sglang(model: str, gpu: str = "h100", n: int = 1, weights: str | None = None) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), weights, None, n,
                            engine="sglang")


def test_each_release_follows_its_own_default_rule() -> None:
    assert sglang_era("0.4.6") == sglang_era("0.4.7") == TP_TABLE  # 0.4.7 kept the table
    assert sglang_era("0.4.7.post1") == sglang_era("0.5.2") == TIER_RESERVE
    assert sglang_era("0.5.3") == sglang_era(None) == RESERVED_MIB
    card = H100_SMI_MIB * 2**20
    # the table by TP size; PR #7054's reserve of 9.5 + TP/2 GiB on an 80 GB card (an H100
    # TP8 log of 2025 solves to 0.831); v0.5.3's 512 + 1.5 × 8,192 + 2 × 512 + 1,024 MiB
    assert sglang_memory_defaults(card, tp=8, version="0.4.6").mem_fraction_static == 0.81
    assert sglang_memory_defaults(card, tp=8, version="0.5.2").mem_fraction_static == 0.831
    # v0.5.3's summed reserve on the card ridgeline sizes an H100 as: 0.822 at TP4
    h100 = resolve_accelerator("h100").memory_bytes * VISIBLE_MEMORY_FRACTION
    assert sglang_memory_defaults(h100, tp=4).mem_fraction_static == 0.822
    # the middle era's reserve grows with the ranks
    assert sglang_memory_defaults(card, tp=1, version="0.5.2").mem_fraction_static \
        > sglang_memory_defaults(card, tp=8, version="0.5.2").mem_fraction_static


def test_the_fraction_applies_after_the_communicators() -> None:
    """The CUDA context alone at TP1; NCCL and custom all-reduce beside it at TP > 1, more
    over NVLink than over PCIe."""
    assert sglang_startup_bytes(sglang("llama-3.1-8b")) / GIB == pytest.approx(0.45)
    nvlink = sglang_startup_bytes(sglang("llama-3.1-70b", n=4))
    pcie = sglang_startup_bytes(sglang("llama-3.1-70b", "l40s", n=4))
    assert nvlink / GIB == pytest.approx(1.7) and pcie / GIB == pytest.approx(0.58)


def test_the_tp4_qwen3_log_is_within_four_percent() -> None:
    """vLLM #21348 quotes SGLang at mem_fraction_static 0.93 on 4 H100s: K and V 8.23 GB
    each per rank for Qwen3-235B-A22B-FP8 (367,404 tokens). Sized on the 79.18 GiB an
    H100's runtime reports (the log gives no total), the pool reads +3.4 %."""
    pool = kv_pool(sglang("qwen3-235b-a22b", n=4, weights="fp8"),
                   EngineSettings(gpu_memory_utilization=0.93))
    assert pool.pool_bytes / GIB == pytest.approx(16.46, rel=0.04)
    # charging the communicators outside the fraction, as a flat context, read +8 %
    flat = pool.total_bytes * 0.93 - pool.weight_bytes - 0.4 * GIB
    assert flat / GIB > 16.46 * 1.08


def test_fit_json_names_the_sglang_version_its_header_shows(
        capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from ridgeline.cli import main

    assert main(["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k", "--engine",
                 "sglang", "--engine-version", "0.5.3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["engine_version"] == "0.5.3" and data["engine_era"] == "reserved-mib"


def test_fit_does_not_list_sglang_activations_it_keeps_outside_the_fraction(
        capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang's activations and CUDA graphs live in the 1 − mem_fraction_static it holds
    back: the breakdown says so instead of printing them as 0 GiB taken from the pool."""
    from ridgeline.cli import main

    assert main(["fit", "llama-3.1-8b", "--gpu", "rtx-5090", "--max-model-len", "32k",
                 "--engine", "sglang", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "activations, CUDA graphs in the rest" in out
    assert "− activations" not in out and "forward pass =" not in out
    assert "SGLang holds back" in out


def test_a_recurrent_hybrid_gets_its_state_pool_first() -> None:
    """SGLang carves rest × 0.9 ÷ 1.9 out for whole requests' recurrent state before the KV
    cache (mamba_full_memory_ratio, 0.9 from 0.5.3.post3): Qwen3-Next at 128K on four H100s
    holds 9 conversations, not the 17 its whole pool as KV cache had read; older releases
    sized no such pool."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.capacity import held_conversations
    from ridgeline.kvcache import state_bytes_per_sequence
    from ridgeline.layouts import LINEAR
    from ridgeline.memory import EngineSettings, kv_pool

    model = resolve_model("qwen3-next-80b-a3b")
    dep = Deployment.build(model, resolve_accelerator("h100"), num_gpus=4, engine="sglang")
    pool = kv_pool(dep, EngineSettings(max_model_len=131072))
    per_request = sum(state_bytes_per_sequence(model, layer) for layer in model.layers
                      if layer.mixer == LINEAR) / 4
    assert pool.state_slots == int(pool.pool_bytes * 0.9 / 1.9 // per_request)
    assert pool.slot_cache_bytes == pool.state_slots * per_request
    assert pool.blocks == int((pool.pool_bytes - pool.slot_cache_bytes)
                              // (pool.kv_bytes_per_token * pool.block_size))
    assert held_conversations(pool, dep, 131072) == 9
    old = kv_pool(dep, EngineSettings(max_model_len=131072, engine_version="0.5.2"))
    assert old.state_slots == 0 and old.slot_cache_bytes == 0


def test_a_recurrent_hybrids_shortfall_counts_its_state_pools_share() -> None:
    """The state pool takes 0.9 ÷ 1.9 of whatever the static pool holds, so 32 conversations
    of Qwen3-Next at 128K need 1.9 × their KV cache in the pool, not the KV cache alone."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.memory import EngineSettings
    from ridgeline.reports.fit import fit_report

    dep = Deployment.build(resolve_model("qwen3-next-80b-a3b"), resolve_accelerator("h100"),
                           num_gpus=4, engine="sglang")
    report = fit_report(dep, 131072, EngineSettings(max_model_len=131072), target=32)
    p = report.pool
    assert report.shortfall_bytes == pytest.approx(
        32 * report.per_conversation_bytes * 1.9 / p.free_fraction_of_rest - p.rest_bytes)
