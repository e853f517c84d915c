"""The MTP blocks GLM-4.5's and Qwen3.5's GGUFs keep after their layers: llama.cpp places them
as blocks (n_layer_all + 1 slots for -ngl and -ts), loads none of their weights without MTP
drafting, and gives GLM-4.5's a KV cache of its own."""

from __future__ import annotations

from collections import Counter

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engine_windows import token_bytes
from ridgeline.gguf_blocks import (
    gguf_block_count,
    mtp_blocks,
    mtp_cache_blocks,
    mtp_kv_bytes_per_token,
)
from ridgeline.llamacpp_pool import host_cache_bytes, llamacpp_cache_on_gpu
from ridgeline.llamacpp_split import layer_devices, split_devices
from ridgeline.memory import EngineSettings, kv_pool, stage_pools
from ridgeline.offload import HostOffload, every_layer_ngl, gpu_weight_bytes

F16 = 2.0


def glm(gpus: int = 8, offload: HostOffload | None = None,
        engine: str = "llama.cpp-cuda") -> Deployment:
    return Deployment.build(resolve_model("glm-4.5"), resolve_accelerator("h100"), "q4_k_m",
                            None, gpus, engine=engine, offload=offload)


def test_the_gguf_keeps_glm_and_qwen35s_mtp_block_and_only_glms_has_a_cache() -> None:
    """GLM-4.5: 92 layers and its nextn block, 93 blocks, the block's K and V one more layer's
    (2 × 8 KV heads × 128 × 2 B = 4 KiB a cell at f16); Qwen3.5-35B-A3B: 40 and 1, no cache;
    DeepSeek-V3's converter drops its MTP layer."""
    g, q = resolve_model("glm-4.5"), resolve_model("qwen3.5-35b-a3b")
    assert (gguf_block_count(g), mtp_blocks(g), mtp_cache_blocks(g)) == (93, 1, 1)
    assert mtp_kv_bytes_per_token(g, F16) == 2 * 8 * 128 * F16 == 4096
    assert (gguf_block_count(q), mtp_blocks(q), mtp_cache_blocks(q)) == (41, 1, 0)
    assert mtp_kv_bytes_per_token(q, F16) == 0
    assert mtp_blocks(resolve_model("deepseek-v3")) == 0
    assert every_layer_ngl(g) == 94 and every_layer_ngl(resolve_model("llama-3.1-70b")) == 81


def test_ngl_counts_the_mtp_block_first_after_the_output_layer() -> None:
    """GLM-4.5, 93 blocks: -ngl 93 is the output and the last 92 blocks, so the MTP block and
    91 layers, layer 0 on the host; -ngl 2 the output and the MTP block, no layer; before PR
    #18148 -ngl 93 held every block and left the output on the host."""
    n, blocks = 92, 93
    ngl93 = HostOffload(93)
    assert ngl93.first_gpu_block(n, blocks) == 1
    assert (ngl93.repeating_on_gpu(n, blocks), ngl93.mtp_on_gpu(n, blocks)) == (91, 1)
    assert not ngl93.layer_on_gpu(0, n, blocks) and ngl93.output_on_gpu(n, blocks)
    assert ngl93.moves_weights(n, blocks) and not HostOffload(94).moves_weights(n, blocks)
    assert (HostOffload(2).repeating_on_gpu(n, blocks), HostOffload(2).mtp_on_gpu(n, blocks)) \
        == (0, 1)
    legacy = HostOffload(93, output_first=False)
    assert legacy.repeating_on_gpu(n, blocks) == 92 and not legacy.output_on_gpu(n, blocks)
    # without blocks the count is the layers': -ngl 93 was every layer and the output
    assert ngl93.repeating_on_gpu(n) == 92
    assert "91 of 92 layers on the GPU (-ngl counts the GGUF's 1 MTP block too" \
        in ngl93.describe(resolve_model("glm-4.5"))


def test_glms_split_deals_94_slots_and_its_last_gpu_holds_the_mtp_block() -> None:
    """Eight H100s, 94 slots: slot il on GPU ⌊8·il ÷ 94⌋, so 12, 12, 12, 11, 12, 12, 12 blocks
    and on the last layers 83–91, the MTP block (92) and the output (93): 9 layers where 93
    slots had put 10. The block weighs nothing, and its cache is the last GPU's: 10 of the 93
    blocks' caches there."""
    where = layer_devices(93, 8)
    assert len(where) == 94 and where[92] == where[93] == 7
    assert [Counter(where[:92])[d] for d in range(8)] == [12, 12, 12, 11, 12, 12, 12, 9]
    dep = glm()
    devices = split_devices(dep)
    last = devices[-1]
    assert (last.layers, last.mtp_blocks, last.output) == (9, 1, True)
    assert last.describe() == "GPU 8 of 8 (9 layers, the MTP block and the output layer)"
    assert last.growing_share == pytest.approx(10 / 93)
    assert devices[0].growing_share == pytest.approx(12 / 93)
    assert sum(d.growing_share for d in devices) == pytest.approx(1.0)
    assert sum(d.weight_bytes for d in devices) == pytest.approx(gpu_weight_bytes(dep))


def test_glms_cache_counts_its_mtp_block_on_the_split_and_on_the_host() -> None:
    """Every GPU's cells cost its share of 93 blocks' K and V, 93 × 4 KiB in all (Qwen3.5 keeps
    its 40 layers'); -ngl 80 puts blocks 14–92 on the GPUs, so 79 of the 93 caches, and the
    host keeps 14 × 4 KiB a cell."""
    settings = EngineSettings(max_model_len=32768)
    pools = stage_pools(glm(), settings)
    assert sum(p.kv_bytes_per_token for p in pools) == pytest.approx(93 * 4096)
    assert glm(1).kv.bytes_per_element == F16
    assert kv_pool(glm(1), settings).kv_bytes_per_token == pytest.approx(93 * 4096)
    qwen = Deployment.build(resolve_model("qwen3.5-35b-a3b"), resolve_accelerator("h100"),
                            "q4_k_m", None, 1, engine="llama.cpp-cuda")
    assert kv_pool(qwen, settings).kv_bytes_per_token == pytest.approx(token_bytes(qwen))
    partial = glm(1, HostOffload(80, 0, 200e9))
    assert llamacpp_cache_on_gpu(partial)[0] == pytest.approx(79 / 93)
    assert host_cache_bytes(partial, 1000) == pytest.approx(14 * 4096 * 1000)
    # vLLM loads no GGUF: its cache is the layers'
    assert kv_pool(glm(1, engine="vllm"), settings).kv_bytes_per_token \
        < kv_pool(glm(1), settings).kv_bytes_per_token


def test_fit_places_every_block_and_its_ngl_search_reaches_the_mtp_slot() -> None:
    """--fit's 'every layer' is -ngl 94 for GLM-4.5: with the experts of every layer on the
    host it keeps all 93 blocks and the output on the GPU."""
    from ridgeline.llamacpp_fit import fit_placement

    dep = Deployment.build(resolve_model("glm-4.5"), resolve_accelerator("h100"), "q4_k_m",
                           None, 1, engine="llama.cpp-cuda")
    placed = fit_placement(dep, EngineSettings(max_model_len=8192), 8192, 1,
                           HostOffload(every_layer_ngl(dep.model), 0, 200e9))
    assert placed.offload is not None and placed.offload.gpu_layers == 94
    assert placed.offload.repeating_on_gpu(92, 93) == 92
