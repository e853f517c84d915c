"""SGLang's static pool: its default fraction release by release, applied to what its
distributed start-up leaves."""

from __future__ import annotations

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.hardware import VISIBLE_MEMORY_FRACTION
from ridgeline.memory import EngineSettings, kv_pool
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
    assert sglang_memory_defaults(h100, tp=4, version="0.5.9").mem_fraction_static == 0.822
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
    """SGLang carves rest × 0.9 ÷ 1.9 out for whole requests' recurrent state (its SSM state
    in fp32) before the KV cache (mamba_full_memory_ratio, 0.9 from 0.5.3.post3): Qwen3-Next
    at 128K on four H100s holds 9 conversations, not the 17 its whole pool as KV cache had
    read; older releases sized no such pool."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.capacity import held_conversations
    from ridgeline.kvcache import state_bytes_per_sequence, state_elements
    from ridgeline.layouts import LINEAR
    from ridgeline.memory import EngineSettings, kv_pool

    model = resolve_model("qwen3-next-80b-a3b")
    dep = Deployment.build(model, resolve_accelerator("h100"), num_gpus=4, engine="sglang")
    pool = kv_pool(dep, EngineSettings(max_model_len=131072))
    linear = [layer for layer in model.layers if layer.mixer == LINEAR]
    conv, ssm = state_elements(model, linear[0])
    per_request = len(linear) * (conv * 2 + ssm * 4) / 4  # bf16 conv, fp32 SSM, over TP4
    assert per_request > sum(state_bytes_per_sequence(model, layer) for layer in linear) / 4
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


def test_sglang_keeps_the_ssm_state_in_fp32_and_the_conv_state_in_bf16() -> None:
    """SGLang's mamba2_state_dtype (configs/mamba_utils.py): conv state bf16, SSM state fp32
    (--mamba-ssm-dtype's default since PR #10258) unless the config names mamba_ssm_dtype.
    Qwen3-Next names none: a linear layer holds (2·2,048 + 4,096)·3 conv elements at 2 B and
    32·128·128 SSM elements at 4 B, not both at its bf16; Nemotron-H-56B's Mamba layer
    61,440 × 2 + 4,194,304 × 4 B; Qwen3.5 names float32, as SGLang keeps it."""
    from ridgeline import resolve_model
    from ridgeline.kvcache import state_bytes_per_sequence, state_elements
    from ridgeline.sglang_hybrid import sglang_state_dtypes, sglang_state_model

    for name in ("qwen3-next-80b-a3b", "nemotron-h-56b", "qwen3.5-35b-a3b"):
        model = resolve_model(name)
        layer = next(layer for layer in model.layers if layer.mixer in ("linear", "mamba"))
        conv, ssm = state_elements(model, layer)
        assert sglang_state_dtypes(model) == ("bf16", "fp32")
        assert state_bytes_per_sequence(sglang_state_model(model), layer) == conv * 2 + ssm * 4
    next_80b = resolve_model("qwen3-next-80b-a3b")
    assert state_elements(next_80b, next_80b.layers[0]) == ((2 * 2048 + 4096) * 3, 32 * 128 * 128)
    assert sglang_state_model(resolve_model("qwen3.5-35b-a3b")) == resolve_model("qwen3.5-35b-a3b")


def test_sglang_reads_the_configs_mamba_ssm_dtype_not_vllms_key() -> None:
    """PR #18532: a config's mamba_ssm_dtype sets the SSM state's dtype; vLLM's
    mamba_ssm_cache_dtype is not a key SGLang reads, so it keeps fp32 there."""
    import json
    from importlib import resources

    from ridgeline.config_reader import spec_from_hf_config
    from ridgeline.sglang_hybrid import sglang_state_dtypes

    path = resources.files("ridgeline") / "data/models/Qwen--Qwen3-Next-80B-A3B-Thinking.json"
    config = json.loads(path.read_text())
    half = spec_from_hf_config({**config, "mamba_ssm_dtype": "float16"})
    assert sglang_state_dtypes(half) == ("bf16", "fp16")
    vllm_key = spec_from_hf_config({**config, "mamba_ssm_cache_dtype": "bfloat16"})
    assert sglang_state_dtypes(vllm_key) == ("bf16", "fp32")


def test_the_radix_cache_keeps_two_more_state_slots_a_running_request() -> None:
    """max_num_reqs = max_mamba_cache_size // 3 with the radix cache on (its default), // 1
    with --disable-radix-cache (model_runner_kv_cache_mixin.py, 0.5.9)."""
    from ridgeline.sglang_hybrid import sglang_running_cap
    from ridgeline.sglang_memory import sglang_data

    pool = sglang_data()["mamba_pool"]
    assert pool["slots_per_running_request"] == 3
    assert sglang_running_cap(1368) == 456 and sglang_running_cap(2) == 0
    assert sglang_running_cap(1368, radix_cache=False) == 1368


def test_a_hybrids_state_pool_caps_the_running_requests_at_a_third_of_its_slots() -> None:
    """With the radix cache on (SGLang's default) a running request's state slot comes with
    two for cached prefixes: Qwen3-Next at 32K on four H100s runs state_slots // 3 at once;
    --disable-radix-cache (--no-prefix-caching) runs one a slot."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.memory import EngineSettings, kv_pool

    dep = Deployment.build(resolve_model("qwen3-next-80b-a3b"), resolve_accelerator("h100"),
                           num_gpus=4, engine="sglang")
    pool = kv_pool(dep, EngineSettings(max_model_len=32768))
    assert pool.state_slots > 300 and pool.max_num_seqs == pool.state_slots // 3
    off = kv_pool(dep, EngineSettings(max_model_len=32768, prefix_caching=False))
    assert off.max_num_seqs == off.state_slots == pool.state_slots


def test_a_state_pool_too_small_to_run_one_request_does_not_fit() -> None:
    """Two state slots leave SGLang max_running_requests 2 // 3 = 0, and it refuses to start:
    fit says so rather than "fits", and offers no lever that runs no request."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.memory import EngineSettings
    from ridgeline.reports.fit import DOES_NOT_FIT, fit_report

    dep = Deployment.build(resolve_model("qwen3.5-35b-a3b"), resolve_accelerator("h100"),
                           engine="sglang")
    report = fit_report(dep, 2048, EngineSettings(max_model_len=2048,
                                                   gpu_memory_utilization=0.8362))
    assert report.pool.state_slots == 2 and report.conversations >= 1
    assert report.batch == 0 and report.verdict == DOES_NOT_FIT
    assert "runs no request at once" in report.text_lines()[0]
    assert all(lever.batch >= 1 for lever in report.levers)
    off = fit_report(dep, 2048, EngineSettings(max_model_len=2048, gpu_memory_utilization=0.8362,
                                               prefix_caching=False))
    assert off.batch >= 1 and off.verdict != DOES_NOT_FIT
