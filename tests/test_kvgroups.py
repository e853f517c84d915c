"""vLLM V1's KV-cache groups: hybrid models paged the way the engine pages them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import conversations, sequence_bytes_per_gpu
from ridgeline.cli import main
from ridgeline.kvcache import attention_kv_bytes_per_token, state_bytes_per_sequence
from ridgeline.kvgroups import vllm_kv_groups
from ridgeline.layouts import FULL, MAMBA
from ridgeline.memory import EngineSettings, KVPool, kv_pool
from ridgeline.sim.config import sim_config


def dep(model: str, n: int = 1, gpu: str = "h200") -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), None, None, n)


def test_a_full_attention_model_is_one_group_of_every_layer() -> None:
    d = dep("llama-3.1-8b")
    g = vllm_kv_groups(d, 16)
    assert g is not None
    assert (g.full, g.windows, g.states, g.layers_per_group) == (1, (), 0, 32)
    # a block holds 16 tokens of all 32 layers: the plain paged-attention page
    assert g.page_bytes == 16 * 32 * attention_kv_bytes_per_token(d.model, 2)
    pool = kv_pool(d)
    assert pool.tokens == pool.blocks * pool.block_size  # 64 a block from v0.34, 16 before
    assert pool.concurrency(8192) == pool.tokens / 8192


def test_gemma_3_groups_by_its_ten_full_layers_and_pads_the_last_window_group() -> None:
    """52 sliding + 10 full layers: groups of 10, so six window groups (the last holding
    2 layers and 8 padding) beside one full group (vLLM hybrid_kv_cache_manager.md)."""
    g = vllm_kv_groups(dep("gemma-3-27b"), 16)
    assert g is not None
    assert (g.layers_per_group, g.full, g.windows, g.states) == (10, 1, ((1024, 6),), 0)
    # decoding at 32K: 2,048 full blocks + 6 × (64 + 1) window blocks
    assert g.decode_blocks(32_768) == 2048 + 6 * 65
    # vLLM's max usage also covers a prefill chunk in the window: 8,192-token budget
    assert g.blocks_per_request(32_768, 8192) == 2048 + 6 * (-(-(1023 + 8192) // 16) + 1)
    assert g.reported_tokens(7_000) == 7_000 // 7 * 16


def test_a_real_vllm_log_of_a_hybrid_model_is_reproduced() -> None:
    """vLLM (~v0.11) serving google/gemma-3-4b-it on an A100 logged "Add 1 padding layers,
    may waste at most 3.45% KV cache memory", "GPU KV cache size: 317,136 tokens" and
    "Maximum concurrency for 3,072 tokens per request: 102.78x" (kvcached issue #215). The
    pool size was not logged, but both figures follow from one block count: the groups
    reproduce them together, and the padding."""
    g = vllm_kv_groups(dep("gemma-3-4b", gpu="a100"), 16)
    assert g is not None
    padding = g.layers_per_group * sum(n for _, n in g.windows) - 29  # 29 sliding layers
    assert padding == 1 and round(padding / 29 * 100, 2) == 3.45
    blocks = next(b for b in range(100_000, 200_000) if g.reported_tokens(b) == 317_136)
    assert round(blocks / g.blocks_per_request(3072, 8192), 2) == 102.78


def test_equal_counts_group_by_the_larger_type_and_near_equal_ones_too() -> None:
    gpt = vllm_kv_groups(dep("gpt-oss-120b", 2), 16)
    assert gpt is not None and (gpt.layers_per_group, gpt.full, gpt.windows) == (18, 1, ((128, 1),))
    # 12 sliding + 13 full (gpt-oss-20b with one extra full layer, as an EAGLE head adds):
    # under 1.5× apart, so groups of 13, the sliding group padded with one layer
    model = resolve_model("gpt-oss-20b")
    extra = next(layer for layer in model.layers if layer.mixer == FULL)
    plus_one = Deployment.build(replace(model, layers=(*model.layers, extra)),
                                resolve_accelerator("h200"), None, None, 1)
    g = vllm_kv_groups(plus_one, 16)
    assert g is not None and (g.layers_per_group, g.full, g.windows) == (13, 1, ((128, 1),))


def test_mamba_hybrids_enlarge_the_attention_block_to_hold_a_state_page() -> None:
    """Jamba-1.5-Mini: a Mamba layer's state is 311,296 B (bf16), an attention layer's
    token 4,096 B; blocks grow in steps of 16 until 16·k·4,096 ≥ 311,296: k = 5, 80 tokens.
    4 attention + 28 Mamba layers: groups of 4, seven state groups of one page each."""
    d = dep("jamba-1.5-mini", 2)
    mamba = next(layer for layer in d.model.layers if layer.mixer == MAMBA)
    assert state_bytes_per_sequence(d.model, mamba) == 311_296
    g = vllm_kv_groups(d, 16)
    assert g is not None
    assert (g.block_size, g.layers_per_group, g.full, g.states) == (80, 4, 1, 7)
    assert g.decode_blocks(1000) == 13 + 7  # ceil(1000 / 80) full blocks + one per state group
    pool = kv_pool(d, EngineSettings(engine_version="0.33"))
    assert pool.block_size == 80
    # from v0.34 the steps are its default block, 64: 64 · 2 · 4,096 ≥ 311,296, 128 tokens
    assert kv_pool(d).block_size == 128
    # padding the state to the page costs little against counting raw bytes
    per_request = g.decode_blocks(8192) * g.page_bytes
    assert per_request == pytest.approx(sequence_bytes_per_gpu(d, 8192), rel=0.06)


def test_a_sliding_window_model_holds_its_window_not_its_context() -> None:
    d = dep("mistral-7b")
    pool = kv_pool(d, EngineSettings(max_model_len=32_768))
    g = pool.groups
    assert g is not None and (g.full, g.windows) == (0, ((4096, 1),))
    # decoding, a request holds its window's blocks; vLLM v0.19+ admits a 32K prompt only
    # with its start-up charge free (window + the tokens in flight), so the last one admitted
    # finds the others decoding
    admission = pool.request_blocks(32_768)
    window = 4096 // pool.block_size + 1  # 65 blocks of 64 (257 of 16 before v0.34)
    assert conversations(pool, d, 32_768) == 1 + (pool.blocks - admission) // window
    v18 = kv_pool(d, EngineSettings(max_model_len=32_768, engine_version="0.18"))
    assert conversations(v18, d, 32_768) == v18.blocks // (256 + 1)  # no gate before v0.19
    # vLLM's logged concurrency charges a prefill chunk inside the window: from v0.26, under
    # async scheduling, two batches of max_num_batched_tokens (8,192 on an H200)
    b = pool.block_size
    assert pool.concurrency(32_768) == pool.blocks / (-(-(4095 + 2 * 8192) // b) + 1)
    one_batch = kv_pool(d, EngineSettings(max_model_len=32_768, async_scheduling=False))
    assert one_batch.concurrency(32_768) == pool.blocks / (-(-(4095 + 8192) // b) + 1)
    v25 = kv_pool(d, EngineSettings(max_model_len=32_768, engine_version="0.25.1"))
    assert v25.concurrency(32_768) == v25.blocks / (-(-(4095 + 8192) // 16) + 1)


def test_a_v0_26_log_of_gemma_3_with_two_batches_in_flight_is_reproduced() -> None:
    """vLLM v0.26.0 serving Gemma-3-27B (fp8 weights and KV) on an L40S at 65,536 tokens,
    max_num_batched_tokens 2,048, logged a 10.56 GiB pool, "188,347 tokens" and "2.87x"
    (medgemma hosting notes; validation/hybrid.csv). With two batches in flight a request
    asks 4,096 full blocks + 6 window groups × 321; one batch would give 3.29x."""
    d = Deployment.build(resolve_model("gemma-3-27b"), resolve_accelerator("l40s"), "fp8",
                         "fp8", 1)
    s = EngineSettings(max_model_len=65_536, gpu_memory_utilization=0.92, max_num_seqs=4,
                       engine_version="0.26.0")
    pool = kv_pool(d, s)
    assert pool.profile_tokens == 2048 and pool.request_blocks(65_536) == 4096 + 6 * 321
    # the pool the log implies: 10.56 GiB of 0.625 MiB pages (10 layers × 16 tokens × 4 KiB)
    assert pool.page_bytes == 10 * 16 * 2 * 16 * 128
    def holding(blocks: float, settings: EngineSettings) -> KVPool:
        """The pool of a card sized so that it holds ``blocks``."""
        p = kv_pool(d, settings)
        taken = p.weight_bytes + p.activation_bytes + p.non_torch_bytes + p.cuda_graph_bytes \
            + p.seat_buffer_bytes
        return kv_pool(d, settings, total_bytes=(blocks * p.page_bytes + taken) / 0.92)

    logged = holding(17_307.5, s)
    assert logged.blocks == 17_307 and round(logged.pool_bytes / 2**30, 2) == 10.56
    assert round(logged.concurrency(65_536), 2) == 2.87
    assert logged.logged_tokens(65_536) == 188_347  # v0.24+: concurrency × max_model_len
    older = holding(17_307.5, replace(s, engine_version="0.23"))
    assert older.logged_tokens(65_536) == 17_307 // 7 * 16  # blocks ÷ groups × block size
    assert round(older.concurrency(65_536), 2) == 3.29


def test_the_simulator_charges_window_and_state_groups_per_request() -> None:
    gemma = sim_config(dep("gemma-3-27b"), EngineSettings(max_model_len=32_768))
    # the window groups grow with each request beside its one full group (sim/blocks.py)
    assert (gemma.overhead_blocks, gemma.window_groups) == (0, ((1024, 6),))
    jamba = sim_config(dep("jamba-1.5-mini", 2), EngineSettings(engine_version="0.26"))
    assert (jamba.block_size, jamba.overhead_blocks) == (80, 7)
    # from v0.28 prefix caching is on for it by default, in align mode: two state blocks
    assert sim_config(dep("jamba-1.5-mini", 2)).overhead_blocks == 2 * 7
    llama = sim_config(dep("llama-3.1-8b"))
    assert llama.overhead_blocks == 0


def test_a_sliding_window_only_model_can_be_simulated(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "mistral-7b", "--gpu", "h100", "--rate", "4", "--num-requests", "40",
                 "--input-len", "500", "--output-len", "50"]) == 0
    assert "completed 40 of 40" in capsys.readouterr().out


def test_simulate_json_states_the_per_request_charge(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["simulate", "jamba-1.5-mini", "--gpu", "h200", "--num-gpus", "2", "--rate", "4",
                 "--num-requests", "20", "--engine-version", "0.26", "--json"]) == 0
    settings = json.loads(capsys.readouterr().out)["settings"]
    assert (settings["block_size"], settings["overhead_blocks_per_request"]) == (80, 7)


def test_fit_json_carries_the_groups(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["fit", "gemma-3-27b", "--gpu", "h200", "--max-model-len", "32k", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    groups, block = report["kv_cache_groups"], report["block_size"]
    assert groups["windows"] == [{"tokens": 1024, "groups": 6}]
    # 32,000 tokens: 500 full blocks of 64, and each window group's 1,024 ÷ 64 + 1
    assert groups["blocks_per_conversation"] == -(-32_000 // block) + 6 * (1024 // block + 1)


def test_fit_prints_the_token_count_and_concurrency_vllm_logs(
        capsys: pytest.CaptureFixture[str]) -> None:
    """v0.24+ logs tokens as its maximum concurrency × max_model_len; v0.23 as blocks ÷
    groups × block size. fit prints whichever the version asked logs, with the concurrency."""
    import json

    d = dep("gemma-3-27b")
    for version in ("0.23", "0.26"):
        pool = kv_pool(d, EngineSettings(max_model_len=32_000, engine_version=version))
        assert main(["fit", "gemma-3-27b", "--gpu", "h200", "--max-model-len", "32k",
                     "--engine-version", version, "--json"]) == 0
        tokens = json.loads(capsys.readouterr().out)["tokens"]
        assert tokens == pool.logged_tokens(32_000)
        assert main(["fit", "gemma-3-27b", "--gpu", "h200", "--max-model-len", "32k",
                     "--engine-version", version]) == 0
        assert (f"holds {tokens:,} tokens as vLLM logs them (its maximum concurrency "
                f"{pool.concurrency(32_000):,.2f}x") in capsys.readouterr().out
    assert tokens == int(pool.concurrency(32_000) * 32_000)
    assert pool.tokens == pool.blocks // 7 * 16 != tokens


def test_prefix_caching_keeps_two_state_blocks_for_a_linear_attention_hybrid() -> None:
    """vLLM v0.15+ with prefix caching asked for runs Qwen3.5/3.6 in mamba_cache_mode
    "align": each of the 3 state groups holds 2 blocks per request. A v0.24.0 log of
    Qwen3.6-35B-A3B NVFP4 on an RTX 5090 (fp8 KV, 131,072 tokens, 'enable_prefix_caching':
    True; club-3090 #612): 5.98 GiB, "567,978 tokens", "4.33x" = 299 blocks ÷ (63 + 3 × 2)."""
    d = Deployment.build(resolve_model("qwen3.6-35b-a3b"), resolve_accelerator("rtx-5090"),
                         None, "fp8", 1)
    s = EngineSettings(max_model_len=131_072, max_num_seqs=1, max_num_batched_tokens=8192,
                       engine_version="0.24.0", prefix_caching=True)
    pool = kv_pool(d, s)
    assert pool.block_size == 2096 and pool.request_blocks(131_072) == 63 + 3 * 2
    assert pool.groups is not None and pool.groups.decode_blocks(131_072) == 63 + 3 * 2
    taken = pool.weight_bytes + pool.activation_bytes + pool.non_torch_bytes \
        + pool.cuda_graph_bytes
    logged = kv_pool(d, s, total_bytes=(299.2 * pool.page_bytes + taken) / 0.92)  # v0.20+
    assert logged.blocks == 299 and round(logged.pool_bytes / 2**30, 2) == 5.98
    assert round(logged.concurrency(131_072), 2) == 4.33
    assert logged.logged_tokens(131_072) == 567_978
    # prefix caching off, or before v0.15 (no align mode): one state block each
    off = kv_pool(d, replace(s, prefix_caching=False), logged.total_bytes)
    assert off.request_blocks(131_072) == 66 == kv_pool(
        d, replace(s, engine_version="0.14"), logged.total_bytes).request_blocks(131_072)
    # a v0.18 log of Qwen3.5-35B-A3B on a GB10 (1,056-token blocks, 262,144 tokens) read
    # "729,696 tokens" (blocks ÷ 4 groups × 1,056) and "10.85x": 249 full + 3 × 2 state
    gb10 = kv_pool(Deployment.build(resolve_model("qwen3.5-35b-a3b"),
                                    resolve_accelerator("dgx-spark-gb10"), "fp8", None, 1),
                   EngineSettings(max_model_len=262_144, engine_version="0.18.1",
                                  prefix_caching=True))
    assert gb10.block_size == 1056 and gb10.request_blocks(262_144) == 249 + 3 * 2
    blocks = [b for b in range(2000, 4000) if b // 4 * 1056 == 729_696]
    assert any(round(b / (249 + 3 * 2), 2) == 10.85 for b in blocks)
    assert not any(round(b / (249 + 3), 2) == 10.85 for b in blocks)  # one block each: no


def test_mamba_hybrids_keep_one_state_block() -> None:
    """Before v0.28 Mamba layers are left at one block (vLLM's "all" mode, a state per block,
    where a model supports it, is not modelled); Jamba's groups are unchanged by prefix
    caching. From v0.28 prefix caching runs them in align mode: two."""
    d = dep("jamba-1.5-mini", 2)
    old = EngineSettings(engine_version="0.26")
    on, off = kv_pool(d, replace(old, prefix_caching=True)), kv_pool(d, old)
    assert on.groups == off.groups and on.groups is not None and on.groups.state_blocks == 1
    now = kv_pool(d).groups
    assert now is not None and now.state_blocks == 2


def test_before_the_hybrid_allocator_a_window_and_full_model_caches_in_full() -> None:
    """vLLM v0.10 brought the hybrid KV-cache manager (PR #17996); before it Gemma-3's 52
    sliding layers cached the whole context beside its 10 full ones: one group of 62 layers.
    A model of windows alone (Mistral-7B-v0.1) kept its window."""
    d = dep("gemma-3-27b")
    old = kv_pool(d, EngineSettings(max_model_len=32_768, engine_version="0.9"))
    new = kv_pool(d, EngineSettings(max_model_len=32_768, engine_version="0.10"))
    assert old.windows_in_full and not new.windows_in_full
    assert old.groups is not None and (old.groups.full, old.groups.windows) == (1, ())
    assert old.groups.layers_per_group == 62
    assert conversations(old, d, 32_768) < conversations(new, d, 32_768) / 4
    mistral = kv_pool(dep("mistral-7b"), EngineSettings(max_model_len=32_768,
                                                        engine_version="0.9"))
    assert mistral.groups is not None and mistral.groups.windows == ((4096, 1),)


def test_fit_says_a_window_only_model_s_tokens_are_vllm_s_logged_figure(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Mistral-7B caches only its 4,096-token window: vLLM logs the tokens its maximum
    concurrency implies, several times what the blocks hold, and fit says which it prints."""
    from ridgeline.cli import main

    assert main(["fit", "mistral-7b", "--gpu", "a100-sxm-40gb", "--max-model-len", "32k"]) == 0
    out = capsys.readouterr().out
    assert "tokens as vLLM logs them (its maximum concurrency" in out
    assert "shared by 1 KV-cache group (0 full, 1 windowed, 0 state)" in out


def test_v0_19_never_admits_a_long_prompt_its_window_groups_are_charged_whole(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM v0.19's admission gate charged every window group the whole prompt (issue
    #39734): Gemma-3-27B at 32K on an H100 asks 7 × 2,048 blocks of a pool of fewer, so such
    a request waits forever; v0.20 charges a window its window and a prefill's room."""
    from tests.conftest import run_cli

    argv = ["fit", "gemma-3-27b", "--gpu", "h100", "--max-model-len", "32768"]
    code, out, _ = run_cli(capsys, *argv, "--engine-version", "0.19")
    assert code == 0 and out.startswith("DOES NOT FIT: not even one conversation")
    assert "admission gate charges a 32,768-token prompt 14,336 blocks" in out
    assert "waits forever" in out
    code, out, _ = run_cli(capsys, *argv, "--engine-version", "0.20")
    assert out.startswith("fits")
