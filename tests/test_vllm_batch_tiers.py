"""vLLM's batch-default tiers by release (engines.json vllm.batch_defaults): from v0.28 a
device of 160 GiB or more (B200, MI300X) takes 16,384 tokens and 1,024 seats for vllm serve
as well as offline; a GB10 takes the small budgets on every release, before v0.33 because
its NVML memory query fails (read as 0 bytes), from v0.33 by its compute-capability test."""

from __future__ import annotations

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.datafiles import engine_defaults
from ridgeline.hardware import device_memory_bytes
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.units import GIB
from ridgeline.vllm_pool import vllm_batch_defaults, vllm_batch_tier, vllm_queried_memory_bytes

TABLE = engine_defaults("vllm")["batch_defaults"]


def dep(gpu: str, model: str = "llama-3.1-8b") -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), None, None, 1)


@pytest.mark.parametrize("gpu", ["b200", "b300", "gb200", "mi300x", "mi325x", "mi355x"])
def test_a_card_of_160_gib_or_more_takes_the_largest_budgets_from_0_28(gpu: str) -> None:
    d = dep(gpu)
    assert device_memory_bytes(d.accelerator) >= TABLE["largest_memory_gib"] * GIB
    for usage in ("serve", "offline"):
        assert vllm_batch_defaults(d, usage, "0.28") == TABLE["largest"][usage]
        assert vllm_batch_defaults(d, usage, "0.27") == TABLE["large"][usage]
    assert vllm_batch_defaults(d, "serve") == TABLE["largest"]["serve"]  # the default release
    assert TABLE["largest"]["serve"]["max_num_batched_tokens"] \
        > TABLE["large"]["serve"]["max_num_batched_tokens"]


def test_an_h100_and_an_h200_stay_on_the_70_gib_tier() -> None:
    for gpu in ("h100", "h200"):
        assert vllm_batch_tier(dep(gpu), "0.34") == "large"
    assert vllm_batch_tier(dep("a100"), "0.34") == "other"


def test_a_b200s_pool_is_profiled_at_the_largest_budget_on_0_28_not_on_0_27() -> None:
    d = dep("b200", "llama-3.1-70b")
    new, old = (kv_pool(d, EngineSettings(engine_version=v, max_model_len=8192))
                for v in ("0.28", "0.27"))
    assert new.profile_tokens == TABLE["largest"]["serve"]["max_num_batched_tokens"]
    assert old.profile_tokens == TABLE["large"]["serve"]["max_num_batched_tokens"]
    assert new.activation_bytes > old.activation_bytes


def test_a_gb10_takes_the_small_budgets_on_every_release() -> None:
    gb10 = dep("gb10")
    assert vllm_queried_memory_bytes(gb10.accelerator, "0.32") == 0  # its NVML query fails
    assert vllm_queried_memory_bytes(gb10.accelerator, "0.33") \
        == device_memory_bytes(gb10.accelerator) >= TABLE["large_memory_gib"] * GIB
    for version in ("0.20", "0.32", "0.33", "0.34"):
        assert vllm_batch_tier(gb10, version) == "other"
    assert vllm_batch_defaults(gb10, "serve") == TABLE["other"]["serve"]
