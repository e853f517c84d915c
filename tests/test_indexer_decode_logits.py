"""DeepSeek Sparse Attention's decode logits under vLLM: one float32 row of max_model_len for
each decode token, a layer at a time (fp8_paged_mqa_logits), never made by the profiling pass.
A decode batch up to the largest FULL CUDA graph runs inside the graph pool, so vLLM's graph
estimate (v0.21+) measures them in its first, largest capture: the pool of DeepSeek-V3.2 on
8 × H200 at max_model_len 163,840 loses 512 × 163,840 × 4 B = 320 MiB a GPU to them (42.90 →
42.52 GiB with the indexer's queries in the profile's pass, 588,032 → 582,848 tokens). A batch
past that graph runs eagerly and takes them from the memory the profile's peak left after the
KV cache, which fit cautions about where they outgrow it: 1,024 seats drafting one MTP token,
2,048 rows, 1.35 GiB where 0.89 GiB was left (docs/research/vllm-v32-indexer-decode-logits.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.units import GIB, MIB
from ridgeline.vllm_graphs import captured_sizes, cuda_graph_bytes, largest_full_decode
from ridgeline.vllm_memory import (
    indexer_decode_logits_bytes,
    indexer_decode_pass_bytes,
    indexer_query_bytes,
    vllm_accounting,
)
from ridgeline.vllm_pool import full_decode_tokens, indexer_eager_shortfall
from tests.conftest import run_cli
from tests.test_ds_mla_cache import v32_config, write
from tests.test_sparse_attention_commands import TP, V32

CONTEXT = 163840  # DeepSeek-V3.2's max_position_embeddings
HIDDEN = 7168
FP32 = 4
MTP = '{"method": "mtp", "num_speculative_tokens": 1}'


def on_h200s(model: str | None = None) -> Deployment:
    spec = V32 if model is None else resolve_model(model)
    return Deployment.build(spec, resolve_accelerator("h200"), None, None, TP)


def test_a_decode_token_takes_a_float32_row_of_max_model_len() -> None:
    d = on_h200s()
    assert indexer_decode_logits_bytes(d, 1024, CONTEXT) == 1024 * CONTEXT * FP32
    assert indexer_decode_logits_bytes(d, 1024, CONTEXT) / GIB == pytest.approx(0.625)
    assert indexer_decode_logits_bytes(on_h200s("deepseek-v3"), 1024, CONTEXT) == 0
    # the step's pass: three hidden-size tensors, the indexer's queries, the logits
    assert indexer_decode_pass_bytes(d, 1024, CONTEXT) == \
        1024 * 3 * HIDDEN * 2 + indexer_query_bytes(d, 1024) + 1024 * CONTEXT * FP32


def test_the_largest_full_decode_graph_is_the_largest_size_the_seats_fill() -> None:
    assert largest_full_decode(1024, captured_sizes(1024)) == 512  # the default cap
    assert largest_full_decode(8, captured_sizes(8)) == 8  # cap 16, decode graphs to 8
    assert largest_full_decode(1024, captured_sizes(1024), mode="PIECEWISE") == 0
    decode_only = captured_sizes(256, mode="FULL_DECODE_ONLY")
    assert largest_full_decode(256, decode_only, mode="FULL_DECODE_ONLY") == decode_only[-1]


def test_vllms_graph_estimate_holds_the_largest_decode_graphs_logits() -> None:
    d, acc = on_h200s(), vllm_accounting("0.32")
    plain = cuda_graph_bytes(d, 1024, acc, False)
    assert cuda_graph_bytes(d, 1024, acc, False, max_model_len=CONTEXT) - plain \
        == 512 * CONTEXT * FP32
    assert (512 * CONTEXT * FP32) / MIB == 320
    # piecewise graphs run the indexer eagerly; a dense model has none
    assert cuda_graph_bytes(d, 1024, acc, False, mode="PIECEWISE", max_model_len=CONTEXT) \
        == cuda_graph_bytes(d, 1024, acc, False, mode="PIECEWISE")
    dense = on_h200s("deepseek-v3")
    assert cuda_graph_bytes(dense, 1024, acc, False, max_model_len=CONTEXT) \
        == cuda_graph_bytes(dense, 1024, acc, False)


def test_the_pool_gives_the_graphs_their_logits() -> None:
    d = on_h200s()
    s = EngineSettings(max_model_len=CONTEXT)
    pool = kv_pool(d, s)
    acc = vllm_accounting("0.32")
    assert full_decode_tokens(d, pool, s) == 512
    assert pool.cuda_graph_bytes == pytest.approx(
        cuda_graph_bytes(d, pool.max_num_seqs, acc, False) + 512 * CONTEXT * FP32)
    piecewise = EngineSettings(max_model_len=CONTEXT, cudagraph_mode="PIECEWISE")
    assert kv_pool(d, piecewise).cuda_graph_bytes == pytest.approx(
        cuda_graph_bytes(d, pool.max_num_seqs, acc, False, mode="PIECEWISE"))
    # before v0.21 the graphs are captured after the pool is sized: nothing taken
    old = kv_pool(d, EngineSettings(max_model_len=CONTEXT, engine_version="0.20.0"))
    assert old.cuda_graph_bytes == 0


def test_an_eager_decode_past_the_graphs_is_checked_against_the_profiles_room() -> None:
    d = on_h200s()
    s = EngineSettings(max_model_len=CONTEXT)
    pool = kv_pool(d, s)
    assert indexer_eager_shortfall(d, pool, s, 512) == (0.0, 0.0)  # in a graph: counted
    need, room = indexer_eager_shortfall(d, pool, s, 1024)
    assert need == indexer_decode_pass_bytes(d, 1024, CONTEXT)
    assert room == pool.activation_bytes - pool.moe_workspace_bytes - pool.compile_bytes
    assert need < room  # 0.68 GiB in the 0.89 GiB the indexer's profiled pass left
    need, room = indexer_eager_shortfall(d, pool, s, 2048)
    assert need > room
    assert need / GIB == pytest.approx(1.35, abs=0.005)


def test_fit_cautions_where_an_eager_decode_outgrows_the_room(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, v32_config())
    args = ("fit", path, "--gpu", "h200", "--num-gpus", "8", "--max-model-len", str(CONTEXT))
    code, out, err = run_cli(capsys, *args, "--explain")
    assert code == 0, err
    assert f"+ 320 MiB of indexer logits (512 decode tokens × max_model_len {CONTEXT:,} × 4 B" \
        in out
    assert "runs past vLLM's largest FULL CUDA graph" not in out + err
    code, out, err = run_cli(capsys, *args, "--speculative-config", MTP)
    assert code == 0, err
    said = out + err
    assert "a decode of all 1,024 seats × 2 tokens (short requests) runs past vLLM's " \
        "largest FULL CUDA graph" in said
    assert f"2,048 × max_model_len {CONTEXT:,} × 4 B" in said
    code, out, err = run_cli(capsys, *args, "--max-cudagraph-capture-size", "2048",
                             "--speculative-config", MTP)
    assert code == 0, err
    assert "largest FULL CUDA graph" not in out + err
