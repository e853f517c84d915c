"""DeepSeek Sparse Attention's indexer logits, one float32 a scored query-key pair, are priced
and budgeted as vLLM runs them: each step writes a layer's logits and its top-k reads them
back (8 B a pair: 32.0 MB a rank for one decode at 65,536 tokens on DeepSeek-V3.2, TP8), as
activations beside the indexer keys; and from v0.19 vLLM's profile sets aside
VLLM_SPARSE_INDEXER_MAX_LOGITS_MB (512 MiB) in each sparse layer, one layer's at a time, while
the fused-MoE workspace and the step's hidden states are held (vllm_memory.indexer_pass_bytes).

Before, neither was counted: DeepSeek-V3.2's decode attention at 65,536 tokens read 104.0
FLOP/byte (now 99.3), its batch-32 decode floor took 16.19 ms (now 16.40), and fit's pool on
8 × H200 at max_model_len 163,840 held 606,272 tokens (44.23 GiB a GPU; then 588,032, 42.90;
with the indexer's own queries in the pass and its decode logits in the graph pool,
tests/test_indexer_decode_logits.py, 582,848, 42.52)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cost import (
    INDEXER_OP,
    attention_activation_bytes,
    decode_batch,
    indexer_logit_traffic_bytes,
    sparse_decode_read,
    step_cost,
)
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.model import ModelSpec
from ridgeline.step_work import step_work
from ridgeline.units import GIB, MIB
from ridgeline.vllm_memory import (
    indexer_logits_bytes,
    indexer_pass_bytes,
    indexer_query_bytes,
    moe_workspace_bytes,
)
from tests.conftest import run_cli
from tests.test_ds_mla_cache import cli_json, v32_config, write
from tests.test_sparse_attention_commands import INDEXER_KEY_BYTES, LAYERS, TP, V32

HIDDEN = 7168
INDEXER_HEADS, INDEXER_DIM = 64, 128  # config.json index_n_heads, index_head_dim
LOGIT_BYTES = 2 * 4  # a float32 written by the logits kernel, read back by the top-k


def on_h200s(spec: ModelSpec) -> Deployment:
    return Deployment.build(spec, resolve_accelerator("h200"), None, None, TP)


def test_a_v32_decode_writes_and_reads_a_logit_for_every_key_its_indexer_scores() -> None:
    d = on_h200s(V32)
    ops = {op.name: op for op in step_cost(d, decode_batch(1, 65536)).ops}
    keys = 65536 + 1  # the cached keys and the new one's, each scored
    assert ops[INDEXER_OP].bytes == pytest.approx(
        LAYERS * (INDEXER_KEY_BYTES * (keys + 1) + LOGIT_BYTES * keys))
    assert indexer_logit_traffic_bytes(d, decode_batch(1, 65536)) \
        == pytest.approx(LAYERS * LOGIT_BYTES * keys)
    assert indexer_logit_traffic_bytes(d, decode_batch(1, 65536)) / 1e6 \
        == pytest.approx(32.0, abs=0.05)
    # a batch scores each sequence's own keys
    assert indexer_logit_traffic_bytes(d, decode_batch(32, 65536)) \
        == pytest.approx(32 * indexer_logit_traffic_bytes(d, decode_batch(1, 65536)))


def test_the_logits_are_activations_not_cache_traffic() -> None:
    d = on_h200s(V32)
    batch = decode_batch(32, 65536)
    work = step_work(d, batch)
    logits = indexer_logit_traffic_bytes(d, batch) * TP  # each rank scores every key
    ops = step_cost(d, batch).ops
    cache_ops = sum(op.bytes for op in ops if op.name in ("attention", INDEXER_OP)) * TP
    # the KV read is the latents and indexer keys: the ops' bytes less queries and logits
    queries = attention_activation_bytes(d, 32) * TP
    assert work.kv_bytes == pytest.approx(cache_ops - queries - logits)
    assert work.other_bytes > logits
    # about 5 % on a long decode's attention bytes: 8 B beside each 132-byte key
    _, read, _, keys = sparse_decode_read(d, 65536)
    assert LOGIT_BYTES * keys / read == pytest.approx(0.045, abs=0.005)


def test_a_dense_mla_model_moves_no_indexer_logits() -> None:
    d = on_h200s(resolve_model("deepseek-v3"))
    assert indexer_logit_traffic_bytes(d, decode_batch(32, 65536)) == 0
    assert indexer_logits_bytes(d, "0.32") == indexer_pass_bytes(d, 8192, "0.32") == 0


def test_vllm_profiles_512_mib_of_indexer_logits_from_v0_19() -> None:
    d = on_h200s(V32)
    assert indexer_logits_bytes(d, "0.19.0") == indexer_logits_bytes(d, "0.32") == 512 * MIB
    assert indexer_logits_bytes(d, "0.18.1") == 0  # no dummy before VLLM_SPARSE_INDEXER_...
    # beside the step's three hidden-size tensors and the indexer's fp8 queries with their
    # float32 head weights, the dummy's arguments: 8,192 × 3 × 7,168 × 2 B + 8,192 × 64 ×
    # (128 + 4) B + 512 MiB
    queries = 8192 * INDEXER_HEADS * (INDEXER_DIM + 4)
    assert indexer_query_bytes(d, 8192) == queries
    assert queries / MIB == pytest.approx(66, abs=0.01)
    assert indexer_pass_bytes(d, 8192, "0.32") == 8192 * 3 * HIDDEN * 2 + queries + 512 * MIB
    assert indexer_pass_bytes(d, 8192, "0.32") / GIB == pytest.approx(0.89, abs=0.005)
    assert indexer_pass_bytes(d, 8192, "0.18.1") == 0


def test_the_indexer_pass_over_the_moe_workspace_is_v32s_profile_peak() -> None:
    d = on_h200s(V32)
    pool = kv_pool(d, EngineSettings(max_model_len=163840))
    workspace = moe_workspace_bytes(d, pool.profile_tokens, "0.32")
    assert pool.indexer_bytes == indexer_pass_bytes(d, pool.profile_tokens, "0.32")
    assert workspace + pool.indexer_bytes > pool.forward_bytes
    assert pool.activation_bytes == pytest.approx(
        workspace + pool.indexer_bytes + pool.compile_bytes)
    # v0.18 reserved no logits: its peak is the forward pass's or the sampler's
    old = kv_pool(d, EngineSettings(max_model_len=163840, engine_version="0.18.1"))
    assert old.indexer_bytes == 0
    assert old.activation_bytes == max(old.forward_bytes + old.compile_bytes,
                                       old.moe_workspace_bytes + old.sampler_bytes)


def test_fit_names_the_indexer_logits_and_explains_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, v32_config())
    args = ("fit", path, "--gpu", "h200", "--num-gpus", "8", "--max-model-len", "163840")
    code, out, err = run_cli(capsys, *args, "--explain")
    assert code == 0, err
    assert "− activations (8,192-token profile + indexer logits + cold compile)" in out
    assert f"indexer pass = {indexer_pass_bytes(on_h200s(V32), 8192, '0.32') / GIB:.4g} GiB" \
        in out
    assert "66 MiB of the indexer's fp8 queries and float32 head weights + 512 MiB" in out
    assert "max(forward, the MoE workspace + the indexer pass) + cold compile" in out
    data = cli_json(capsys, *args)
    assert data["profile"]["indexer_bytes"] == \
        8192 * 3 * HIDDEN * 2 + 8192 * INDEXER_HEADS * (INDEXER_DIM + 4) + 512 * MIB
