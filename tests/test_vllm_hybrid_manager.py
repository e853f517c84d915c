"""vLLM's hybrid KV-cache manager switch (--disable-hybrid-kv-cache-manager) and the variable
that turns it off for chunked local attention (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE,
--vllm-allow-chunked-local-attn-with-hybrid-kv-cache): what each caches, by release, and what
vLLM refuses to start (vllm_hybrid.manager_off_reason, manager_problem)."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import held_conversations
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, KVPool, kv_pool
from ridgeline.vllm_hybrid import chunked_env_default, manager_off_reason, manager_problem
from tests.conftest import run_cli

SCOUT = ("fit", "llama-4-scout", "--gpu", "h100", "--num-gpus", "4", "--max-model-len",
         "131072")
ENV = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"


def scout() -> Deployment:
    return Deployment.build(resolve_model("llama-4-scout"), resolve_accelerator("h100"),
                            num_gpus=4)


def pool(version: str, **switches: bool | None) -> KVPool:
    return kv_pool(scout(), EngineSettings(max_model_len=131072, engine_version=version,
                                           **switches))  # type: ignore[arg-type]


def in_full(p: KVPool) -> int:
    """Conversations of 131,072 tokens a pool caching every layer in full holds: one full
    group, a block per block_size tokens."""
    assert p.groups is not None and p.groups.count == 1 and not p.groups.windows
    return p.blocks // -(-131072 // p.groups.block_size)


def test_scout_on_v0_11_with_the_variable_at_1_pages_its_chunks() -> None:
    """Llama-4-Scout on 4 H100s at 128K on v0.11: by default (the variable "0") vLLM runs
    without the manager and caches every layer in full; started with
    VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 it pages the three chunk groups as
    v0.10.0 and v0.14 do, holding more conversations in the same memory."""
    default, allowed = pool("0.11"), pool("0.11", allow_chunked_local_attn_hybrid=True)
    assert default.windows_in_full and default.hybrid_manager_off.startswith(f"{ENV}=0")
    assert held_conversations(default, scout(), 131072) == in_full(default)
    g = allowed.groups
    assert g is not None and not allowed.windows_in_full and allowed.hybrid_manager_off == ""
    assert (g.full, g.chunks) == (1, (8192,)) and g.windows == ((8192, 3),)
    assert allowed.kv_cache_bytes == default.kv_cache_bytes  # the same memory, paged apart
    assert held_conversations(allowed, scout(), 131072) \
        > held_conversations(default, scout(), 131072)
    # with the variable at 1, v0.11 keeps Scout's groups as v0.10.0 does by default
    assert pool("0.10").groups == g


def test_the_switch_and_the_variable_cache_scout_in_full_from_v0_14() -> None:
    """From v0.14 the variable defaults to "1": Scout's chunks are paged unless the server
    starts with it at 0 or with --disable-hybrid-kv-cache-manager, each of which caches every
    layer in full, as v0.13 did by default."""
    paged = pool("0.14")
    assert paged.groups is not None and paged.groups.chunks and not paged.hybrid_manager_off
    for off, why in ((pool("0.14", allow_chunked_local_attn_hybrid=False), f"{ENV}=0"),
                     (pool("0.14", disable_hybrid_kv_cache_manager=True),
                      "--disable-hybrid-kv-cache-manager")):
        assert off.hybrid_manager_off == why
        assert held_conversations(off, scout(), 131072) == in_full(off) \
            < held_conversations(paged, scout(), 131072)


def test_the_variable_reads_by_release() -> None:
    """0.10.1 to 0.13 read it as "0" when unset, 0.14 on as "1"; 0.10.0 does not read it
    (an EAGLE or MTP drafter beside chunked attention turns the manager off from 0.10.0)."""
    model = resolve_model("llama-4-scout")
    assert not chunked_env_default("0.13") and chunked_env_default("0.14")
    assert manager_off_reason(model, "0.10.0", allow_chunked=False) == ""
    assert manager_off_reason(model, "0.10.1").startswith(f"{ENV}=0 (its default")
    assert manager_off_reason(model, "0.34", drafter_method="eagle").startswith("an EAGLE")
    assert manager_off_reason(resolve_model("llama-3.1-8b"), "0.11", allow_chunked=False) == ""


def test_disabling_the_manager_caches_gemma_3_windows_in_full() -> None:
    """unify_hybrid_kv_cache_specs: Gemma-3-27B's sliding windows become full attention beside
    its full layers, one group, so fewer conversations of 32K fit than the seven groups'."""
    d = Deployment.build(resolve_model("gemma-3-27b"), resolve_accelerator("h100"))
    s = EngineSettings(max_model_len=32768)
    on = kv_pool(d, s)
    off = kv_pool(d, EngineSettings(max_model_len=32768, disable_hybrid_kv_cache_manager=True))
    assert on.groups is not None and on.groups.windows and not on.windows_in_full
    assert off.groups is not None and off.groups.count == 1 and off.windows_in_full
    assert held_conversations(off, d, 32768) < held_conversations(on, d, 32768)


@pytest.mark.parametrize(("model", "version", "disable", "words"), [
    # state beside attention does not unify: vLLM raises at start-up
    ("qwen3-next-80b-a3b", "0.34", True,
     "cannot start qwen3-next-80b-a3b without the hybrid KV-cache manager"),
    # explicitly enabled where the variable (0 on 0.13) turns it off: 'explicitly enabled'
    ("llama-4-scout", "0.13", False,
     "refuses --no-disable-hybrid-kv-cache-manager"),
    # the flag came in v0.9.1
    ("llama-3.1-8b", "0.9.0", True,
     "has no --disable-hybrid-kv-cache-manager: it came in v0.9.1"),
])
def test_what_vllm_will_not_start_is_refused(model: str, version: str, disable: bool,
                                             words: str) -> None:
    spec = resolve_model(model)
    assert words in manager_problem(spec, version, disable)
    d = Deployment.build(spec, resolve_accelerator("h100"), num_gpus=4)
    with pytest.raises(InputError, match=words):
        kv_pool(d, EngineSettings(max_model_len=32768, engine_version=version,
                                  disable_hybrid_kv_cache_manager=disable))


def test_an_explicit_enable_before_v0_13_is_the_default() -> None:
    """Before v0.13 the field is a bool defaulting to False: --no-disable-… restates it, and
    the variable's default still turns the manager off for Scout (no error)."""
    model = resolve_model("llama-4-scout")
    assert manager_problem(model, "0.12", disable=False) == ""
    assert pool("0.12", disable_hybrid_kv_cache_manager=False).blocks == pool("0.12").blocks
    assert manager_problem(model, "0.13", disable=False, allow_chunked=True) == ""


def test_fit_json_and_explain_say_why_scout_is_cached_in_full(
        capsys: pytest.CaptureFixture[str]) -> None:
    """fit reads both: --json names why the manager was off (null where it ran), --explain
    says it in the accounting row, and the conversations are the pool's."""
    code, out, _ = run_cli(capsys, *SCOUT, "--engine-version", "0.11", "--json")
    default = json.loads(out)
    code2, out2, _ = run_cli(capsys, *SCOUT, "--engine-version", "0.11", "--json",
                             "--vllm-allow-chunked-local-attn-with-hybrid-kv-cache", "1")
    allowed = json.loads(out2)
    assert code == code2 == 0
    assert default["hybrid_kv_cache_manager_off"].startswith(f"{ENV}=0")
    assert allowed["hybrid_kv_cache_manager_off"] is None
    assert default["conversations"] == held_conversations(pool("0.11"), scout(), 131072)
    assert allowed["conversations"] == held_conversations(
        pool("0.11", allow_chunked_local_attn_hybrid=True), scout(), 131072)
    assert allowed["verdict"] == default["verdict"] == "fits, under the ridge"
    code, out, _ = run_cli(capsys, *SCOUT, "--engine-version", "0.14", "--explain",
                           "--disable-hybrid-kv-cache-manager")
    assert code == 0 and "cached in full (the hybrid KV-cache manager off: " \
        "--disable-hybrid-kv-cache-manager)" in out


def test_decode_and_simulate_read_the_switches(capsys: pytest.CaptureFixture[str]) -> None:
    """decode's pool and simulate's pool follow the same switches as fit's."""
    held = held_conversations(pool("0.11", allow_chunked_local_attn_hybrid=True), scout(),
                              131072)
    code, out, _ = run_cli(capsys, "decode", "llama-4-scout", "--gpu", "h100", "--num-gpus",
                           "4", "--context", "131072", "--max-model-len", "131072",
                           "--engine-version", "0.11",
                           "--vllm-allow-chunked-local-attn-with-hybrid-kv-cache", "1")
    assert code == 0 and f"runs at most {held} sequences at 131,072 tokens" in out
    code, out, _ = run_cli(capsys, "simulate", "llama-4-scout", "--gpu", "h100", "--num-gpus",
                           "4", "--max-model-len", "131072", "--engine-version", "0.11",
                           "--rate", "1", "--num-requests", "4", "--input-len", "1000",
                           "--output-len", "10", "--json",
                           "--vllm-allow-chunked-local-attn-with-hybrid-kv-cache", "1")
    assert code == 0 and json.loads(out)["conversations"] == held


def test_other_engines_refuse_the_switches_and_a_release_without_the_variable_is_cautioned(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine",
                           "sglang", "--disable-hybrid-kv-cache-manager")
    assert code == 2 and "is vLLM's; sglang has no such setting" in err
    code, _, err = run_cli(capsys, *SCOUT, "--engine-version", "0.10.0",
                           "--vllm-allow-chunked-local-attn-with-hybrid-kv-cache", "1")
    assert code == 0 and f"{ENV}=1 ignored: vLLM 0.10.0 does not read it" in err
    code, _, err = run_cli(capsys, *SCOUT, "--vllm-allow-chunked-local-attn-with-hybrid-kv-cache",
                           "2")
    assert code == 2 and "is 0 or 1" in err
