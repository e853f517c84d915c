"""DeepSeek Sparse Attention is priced as it runs: a DeepSeek-V3.2 decode reads the 2,048
latents its indexer picks and every cached token's 132-byte indexer key, not every latent;
a prompt attends to at most 2,048 keys a query while the indexer scores every pair
(2 × 64 × 128 FLOPs each, at fp8); and the indexer's weights (wq_b, wk, weights_proj,
k_norm: 13,959,424 a layer, kept whole on every TP rank) are counted.

Before, a V3.2 decode was priced as dense MLA (41.07 GB of KV a step at 65,536 tokens on
8 × H200, TP8, bf16 cache: now 5.37 GB), its prompt's attention over every causal pair
with no indexer, and the model was counted at 671,026,419,200 weights, V3's (now
671,877,944,064: + 851,524,864)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.attention_span import query_key_pairs
from ridgeline.cost import (
    INDEXER_OP,
    Seq,
    batch_shape,
    decode_batch,
    op_compute_dtype,
    shape_time_s,
    step_cost,
)
from ridgeline.engines import profile_for
from ridgeline.layouts import MOE
from ridgeline.model import ModelSpec
from ridgeline.params import count_params, rank_params
from ridgeline.quantization import ATTENTION
from ridgeline.sim.timer import StepTimer
from ridgeline.step_work import step_work
from tests.conftest import refused_line, run_cli
from tests.test_ds_mla_cache import v32_config, write

V32 = ModelSpec.from_hf_config(v32_config(), "v32")
LAYERS = 61
TP = 8  # the latent and the indexer keys: a copy on every rank
LATENT_BYTES = (512 + 64) * 2  # bf16
INDEXER_KEY_BYTES = 128 + 4  # fp8 and a float32 scale
TOPK = 2048


def v32_on_h200s() -> Deployment:
    return Deployment.build(V32, resolve_accelerator("h200"), "bf16", None, TP)


def decode_kv_bytes(dep: Deployment, context: int) -> float:
    return step_work(dep, decode_batch(1, context)).kv_bytes


def test_a_v32_decode_reads_2048_latents_and_every_indexer_key() -> None:
    d = v32_on_h200s()
    for context in (4096, 65536):
        latents = TOPK + 1  # read, and the new token's written
        keys = context + 2  # the cached and the new token's read, the new one's written
        assert decode_kv_bytes(d, context) == pytest.approx(
            LAYERS * TP * (LATENT_BYTES * latents + INDEXER_KEY_BYTES * keys))
    assert decode_kv_bytes(d, 65536) / 1e9 == pytest.approx(5.374, abs=1e-3)


def test_from_4k_to_64k_a_v32_decode_grows_by_its_indexer_keys_alone() -> None:
    d = v32_on_h200s()
    grown = decode_kv_bytes(d, 65536) - decode_kv_bytes(d, 4096)
    assert grown == pytest.approx(LAYERS * TP * INDEXER_KEY_BYTES * (65536 - 4096))


def test_within_2048_keys_a_v32_decode_reads_what_dense_mla_reads() -> None:
    d = v32_on_h200s()
    for context in (0, 1000, TOPK - 1):  # c + 1 ≤ 2,048 keys: the indexer picks them all
        assert decode_kv_bytes(d, context) == pytest.approx(
            LAYERS * TP * (LATENT_BYTES + INDEXER_KEY_BYTES) * (context + 2))


def test_a_dense_mla_model_still_reads_every_latent() -> None:
    d = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"), "bf16",
                         None, TP)
    assert decode_kv_bytes(d, 65536) == pytest.approx(LAYERS * TP * LATENT_BYTES * 65538)
    assert INDEXER_OP not in {op.name for op in step_cost(d, [Seq(8192, 0)]).ops}


def test_a_v32_prompt_attends_to_2048_keys_a_query_and_its_indexer_scores_every_pair() -> None:
    d = v32_on_h200s()
    ops = {op.name: op for op in step_cost(d, [Seq(8192, 0)]).ops}
    attended = query_key_pairs(0, 8192, TOPK)  # min(p + 1, 2,048) keys for the query at p
    assert attended == TOPK * (TOPK + 1) / 2 + (8192 - TOPK) * TOPK
    per_pair = 128 * 2 * (192 + 128) / TP  # the prompt's heads, Q·K and P·V, over the ranks
    assert ops["attention"].flops == pytest.approx(LAYERS * per_pair * attended)
    # every rank runs the whole indexer: 64 heads × 128 dims, 2 FLOPs each, every causal pair
    assert ops[INDEXER_OP].flops == pytest.approx(LAYERS * 2 * 64 * 128 * 8192 * 8193 / 2)
    # every key read and written, and each pair's fp32 logit written and read by the top-k
    assert ops[INDEXER_OP].bytes == pytest.approx(
        LAYERS * (INDEXER_KEY_BYTES * 2 * 8192 + 2 * 4 * 8192 * 8193 / 2))
    assert op_compute_dtype(d, INDEXER_OP) == "fp8"  # DeepGEMM's fp8_mqa_logits


def test_v32_counts_its_indexer_weights_and_every_rank_keeps_them_whole() -> None:
    v3 = resolve_model("deepseek-v3")
    per_layer = (1536 * 64 * 128  # wq_b: the query latent to 64 heads × 128
                 + 7168 * 128  # wk
                 + 7168 * 64  # weights_proj
                 + 2 * 128)  # k_norm's weight and bias
    assert per_layer == 13_959_424
    assert count_params(V32).total - count_params(v3).total == LAYERS * per_layer
    assert count_params(V32).total == 671_877_944_064
    layer = next(x for x in V32.layers if x.ffn == MOE)
    whole = rank_params(V32, layer, ATTENTION, TP) - rank_params(v3, layer, ATTENTION, TP)
    assert whole == pytest.approx(per_layer - 2 * 128)  # the linears; k_norm is a norm


@settings(max_examples=30, deadline=None)
@given(batch=st.lists(st.tuples(st.sampled_from([1, 1, 1, 2, 700]), st.integers(0, 9000)),
                      min_size=1, max_size=16))
def test_the_simulators_timer_prices_a_v32_step_as_step_cost_does(
        batch: list[tuple[int, int]]) -> None:
    d = v32_on_h200s()
    profile = profile_for("vllm")
    timer = StepTimer(d, profile)
    seqs = [Seq(new, ctx) for new, ctx in batch]
    expected = shape_time_s(d, batch_shape(d, seqs), profile)
    assert timer.time_s(batch_shape(d, seqs)) == pytest.approx(expected, rel=1e-12)
    assert timer.windows == (None, TOPK) and not timer.full_attention
    decodes = [s.context_tokens for s in seqs if s.new_tokens == 1]
    keys = {w: float(sum(c + 1 if w is None else min(c + 1, w) for c in decodes))
            for w in timer.windows}
    chunks = [s for s in seqs if s.new_tokens > 1]
    assert timer.keys_time_s(len(decodes), keys, chunks) == pytest.approx(expected)


def test_decode_explain_shows_the_latents_and_the_indexer_keys(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "decode", write(tmp_path, v32_config()), "--gpu", "h200",
                             "--num-gpus", "8", "--context", "65536", "--explain")
    assert code == 0, err
    assert "latents read and written = 2,049" in out
    assert "indexer key per token = 64,416 B" in out
    assert "keys read and written = 65,538" in out
    assert "=> KV read = 5.374 GB" in out


def test_model_counts_the_indexer_and_names_the_sparse_attention(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "model", write(tmp_path, v32_config()))
    assert code == 0, err
    assert "671.9B total (671,877,944,064)" in out
    assert "sparse: index_topk 2048 keys a query, picked by an indexer of 64 heads × 128" in out


@pytest.mark.parametrize("dropped", [("index_head_dim",), ("index_n_heads",),
                                     ("index_n_heads", "index_head_dim")])
def test_a_sparse_config_without_its_indexers_shape_is_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], dropped: tuple[str, ...]) -> None:
    """index_topk with no index_n_heads or index_head_dim: the indexer vLLM and SGLang build
    from both cannot be sized. Before, such a config ran sparse with no indexer at all (no
    weights, no cached keys: its pool too large) and model printed 'an indexer of 64 heads
    × None'."""
    config = v32_config()
    for key in dropped:
        del config[key]
    for command in (["model"], ["decode", "--gpu", "h200", "--num-gpus", "8"]):
        line = refused_line(capsys, command[0], write(tmp_path, config), *command[1:])
        assert f"index_topk is given (DeepSeek Sparse Attention) but {' and '.join(dropped)}" \
            in line, line
