"""fit's count of a hybrid's window groups for a conversation shorter than the window: vLLM's
SlidingWindowManager holds cdiv(tokens, block_size) blocks a group until the window fills
(nothing skipped yet), its admission gate charges min(cdiv(prompt), the admission cap) a
group, and its logged 'Maximum concurrency' alone charges the start-up cap
(max_memory_usage_bytes). fit, decode's batch and the simulator count alike."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import admission_gate, conversations
from ridgeline.cli import main
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.sim.blocks import BlockPool
from ridgeline.sim.config import sim_config
from ridgeline.sim.request import Request

GEMMA = Deployment.build(resolve_model("gemma-3-27b"), resolve_accelerator("h100"), "bf16")
SHORT = EngineSettings(max_model_len=512)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def test_a_conversation_inside_its_window_holds_its_own_blocks_in_each_group() -> None:
    pool = kv_pool(GEMMA, SHORT)
    g = pool.groups
    assert g is not None and g.full == 1 and g.windows == ((1024, 6),)
    bs = g.block_size
    own = cdiv(512, bs)
    assert g.decode_blocks(512) == (1 + 6) * own  # not 8 + 6 × 9
    assert pool.admission_blocks(512) == g.decode_blocks(512)  # no gate beyond it
    assert admission_gate(pool, 512) is None
    held = conversations(pool, GEMMA, 512)
    assert held == pool.blocks // g.decode_blocks(512)
    # vLLM's logged figure still charges each window group its start-up cap, a block more
    charged = own + 6 * (cdiv(min(1023 + pool.window_budget_tokens, 512), bs) + 1)
    assert pool.request_blocks(512) == charged
    assert pool.concurrency(512) == pool.blocks / charged
    assert held > int(pool.concurrency(512))


def test_past_its_window_a_conversation_holds_the_window_s_cap() -> None:
    g = kv_pool(GEMMA, EngineSettings(max_model_len=8192)).groups
    assert g is not None
    bs = g.block_size
    cap = cdiv(1023, bs) + 1
    assert g.decode_blocks(8192) == cdiv(8192, bs) + 6 * cap
    assert g.decode_blocks(1024) == 7 * cdiv(1024, bs)  # at the window: nothing skipped yet
    assert g.decode_blocks(1025) == cdiv(1025, bs) + 6 * cap


@pytest.mark.parametrize("length", [1, 63, 64, 65, 512, 1023, 1024, 1025, 1088, 8192, 32_000])
def test_fit_and_the_simulator_count_a_conversation_alike(length: int) -> None:
    """The blocks a request of ``length`` tokens holds decoding, and those the gate charges
    its prompt, are fit's and the simulator's alike."""
    settings = EngineSettings(max_model_len=32_768)
    pool = kv_pool(GEMMA, settings)
    config = sim_config(GEMMA, settings)
    g = pool.groups
    assert g is not None and config.window_groups == g.windows
    sim_pool = BlockPool(config.num_blocks, config.block_size, window_groups=config.window_groups)
    assert sim_pool.blocks_for(length) == g.decode_blocks(length)
    gate = config.admission_extra(length)
    assert gate is not None
    assert cdiv(length, config.block_size) + gate == pool.admission_blocks(length)


def test_fit_s_conversations_are_the_simulator_s_requests_held_at_once() -> None:
    """At --max-model-len 512 the simulator's pool holds, at once, as many 512-token requests
    (each at its last token) as fit counts conversations."""
    pool = kv_pool(GEMMA, SHORT)
    config = sim_config(GEMMA, SHORT)
    sim_pool = BlockPool(config.num_blocks, config.block_size, window_groups=config.window_groups)
    held = 0
    while True:
        r = Request(held, 0.0, prompt_tokens=511, output_tokens=1)
        if not sim_pool.grow(r, 512):
            break
        held += 1
    assert held == conversations(pool, GEMMA, 512) == pool.blocks // pool.groups.decode_blocks(512)  # type: ignore[union-attr]


def test_fit_json_counts_a_short_conversation_s_window_blocks(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "gemma-3-27b", "--gpu", "h100", "--max-model-len", "512", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    per = out["kv_cache_groups"]["blocks_per_conversation"]
    assert per == 7 * cdiv(512, out["block_size"])
    assert out["admission_blocks"] == per
    assert out["conversations"] == out["blocks_per_gpu"] // per
    assert out["conversations"] > int(out["vllm_max_concurrency"])
