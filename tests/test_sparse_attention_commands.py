"""Every command tells DeepSeek-V3.2's sparse story as the step cost prices it: roofline's
and the page's decode attention read the 2,048 latents the indexer picks and every cached
token's indexer key, each key's fp32 logit written and read back by the top-k (99.3
FLOP/byte at 65,536 tokens on 8 × H200 at TP8, bf16 cache, where every latent gave 30.2);
attention scores S × 2,048 a head and names the indexer's S × S fp32 logits; kv's explain
adds the 132-byte indexer key to the latent; model reads deepseek_v32 without the 'not
checked' caution (its count, 671,877,944,064, is the checkpoint's tensors
less its block scales and MTP module), shows the fp8 checkpoint as V3's block-wise fp8 and
the fp8 cache as vLLM's fp8_ds_mla records; and the launch count adds the indexer's two
weight matmuls a layer (wq_b and the fused wk_weights_proj).

Before, roofline and the page gave V3.2's decode attention dense MLA's 30.2 at any context,
attention 8.59 GB of scores a head and layer at 65,536 (S × S), kv's explain summed to 1,284
bytes a token and layer from a formula of 1,152, model cautioned that deepseek_v32 was not
checked and put the fp8 cache at 42.18 KiB a token (plain fp8's 576 + 132 bytes a layer,
not fp8_ds_mla's 656 + 132), and a V3.2 step launched V3's 601 weight matmuls, not 723."""

from __future__ import annotations

from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.attention_memory import attention_memory
from ridgeline.cost import (
    INDEXER_OP,
    decode_attention_intensity_at,
    decode_batch,
    sparse_decode_read,
    step_cost,
)
from ridgeline.launches import MLA_MATMULS, mixer_matmuls, step_matmuls
from ridgeline.layouts import FULL
from ridgeline.model import ModelSpec
from ridgeline.page import CONTEXTS, page_data
from ridgeline.params import count_params
from ridgeline.reports.model import model_report
from ridgeline.reports.roofline import roofline_report
from tests.conftest import run_cli
from tests.test_ds_mla_cache import v32_config, write

V32 = ModelSpec.from_hf_config(v32_config(), "v32")
LAYERS = 61
TP = 8
TOPK = 2048
LATENT_BYTES = (512 + 64) * 2  # bf16, one rank's whole copy
INDEXER_KEY_BYTES = 128 + 4  # fp8 values and a float32 scale
FLOPS_PER_LATENT = 128 * 2 * (2 * 512 + 64) / TP  # absorbed MLA, a rank's 16 heads
INDEXER_FLOPS_PER_KEY = 2 * 64 * 128  # every rank the whole indexer
LOGIT_BYTES = 2 * 4  # a key's float32 logit, written by the indexer and read by its top-k


def on_h200s(spec: ModelSpec) -> Deployment:
    return Deployment.build(spec, resolve_accelerator("h200"), "bf16", None, TP)


def test_a_v32_decode_at_64k_reads_2048_latents_and_every_key_at_99_flop_per_byte() -> None:
    flops, nbytes, latents, keys = sparse_decode_read(on_h200s(V32), 65536)
    assert (latents, keys) == (TOPK, 65537)
    assert flops == pytest.approx(FLOPS_PER_LATENT * TOPK + INDEXER_FLOPS_PER_KEY * keys)
    assert nbytes == pytest.approx(LATENT_BYTES * TOPK + (INDEXER_KEY_BYTES + LOGIT_BYTES) * keys)
    assert flops / nbytes == pytest.approx(99.3, abs=0.05)


def test_the_intensity_is_the_step_costs_attention_and_indexer_work() -> None:
    d = on_h200s(V32)
    for context in (8192, 65536):
        flops, nbytes, _, _ = sparse_decode_read(d, context)
        ops = {op.name: op for op in step_cost(d, decode_batch(1, context)).ops}
        step_flops = ops["attention"].flops + ops[INDEXER_OP].flops
        step_bytes = ops["attention"].bytes + ops[INDEXER_OP].bytes
        assert step_flops == pytest.approx(LAYERS * flops)
        # the step also writes the new token's latent and key and moves the query and its
        # output, 13.6 KB a layer: under 0.5 % from 8,192 tokens
        assert step_bytes == pytest.approx(LAYERS * nbytes, rel=5e-3)


def test_up_to_2048_tokens_the_intensity_holds_then_the_indexer_raises_it() -> None:
    d = on_h200s(V32)
    short = [decode_attention_intensity_at(d, c) for c in (0, 1000, TOPK - 1)]
    per_key = (FLOPS_PER_LATENT + INDEXER_FLOPS_PER_KEY) \
        / (LATENT_BYTES + INDEXER_KEY_BYTES + LOGIT_BYTES)
    assert short == pytest.approx([per_key] * 3)
    assert per_key == pytest.approx(39.6, abs=0.05)
    assert decode_attention_intensity_at(d, 8192) < decode_attention_intensity_at(d, 65536)


def test_a_dense_mla_models_intensity_is_unmoved_by_the_context() -> None:
    d = on_h200s(resolve_model("deepseek-v3"))
    assert [decode_attention_intensity_at(d, c) for c in (0, 65536)] \
        == pytest.approx([FLOPS_PER_LATENT / LATENT_BYTES] * 2)
    assert pytest.approx(30.2, abs=0.05) == FLOPS_PER_LATENT / LATENT_BYTES


def test_roofline_places_v32s_decode_attention_at_its_prompt_lens_context() -> None:
    d = on_h200s(V32)
    for prompt, intensity in ((1000, 39.6), (65536, 99.3)):
        report = roofline_report(d.accelerator, d.dense_compute_dtype, 64, prompt, d)
        point = next(p for p in report.points if p.name == "decode attention")
        assert point.intensity == pytest.approx(decode_attention_intensity_at(d, prompt))
        assert point.intensity == pytest.approx(intensity, abs=0.05)
    assert f"the {TOPK:,} latents its indexer picks" in point.note
    assert "the indexer scores 65,537 keys at fp8" in point.note


def test_roofline_cli_shows_the_sparse_row_and_explains_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "roofline", "--gpu", "h200", "--num-gpus", "8", "--model",
                             write(tmp_path, v32_config()), "--prompt-len", "65536",
                             "--explain")
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.startswith("decode attention "))
    assert row.split()[2] == "99.3"
    assert "latents read = 2,048" in out and "keys scored = 65,537" in out
    assert "caution" not in out  # deepseek_v32 is a checked model_type


def test_the_page_gives_v32_an_attention_intensity_per_context(tmp_path: Path) -> None:
    path = write(tmp_path, v32_config())
    data = page_data([path, "deepseek-v3"], ["h200"], [TP], ["as stored"], ["bf16"])
    v32, v3 = (data["combos"][f"{m}|h200|{TP}|as stored|bf16"]["att_int"]
               for m in (path, "deepseek-v3"))
    d = on_h200s(V32)
    assert v32 == pytest.approx([decode_attention_intensity_at(d, c) for c in CONTEXTS])
    assert v32 == sorted(v32) and v32[-1] > 2 * v32[0]
    assert v3 == pytest.approx([FLOPS_PER_LATENT / LATENT_BYTES] * len(CONTEXTS))


def test_attention_scores_2048_keys_a_query_and_names_the_indexers_logits() -> None:
    sparse = attention_memory(V32, 65536)
    dense = attention_memory(resolve_model("deepseek-v3"), 65536)
    assert sparse.per_head_per_layer_bytes == 65536 * TOPK * 2
    assert dense.per_head_per_layer_bytes == 65536 * 65536 * 2
    assert sparse.indexer_logit_bytes == 65536 * 65536 * 4 * LAYERS  # fp32, every layer
    assert sparse.indexer_logit_bytes / 1e12 == pytest.approx(1.048, abs=1e-3)
    # a tiled kernel's reads are dense MLA's: the step cost's sparse prefill reads every latent
    assert sparse.total_tiled_bytes == dense.total_tiled_bytes
    assert "indexer logits       1.05 TB" in "\n".join(sparse.text_lines())
    assert dense.index_topk is None and dense.indexer_logit_bytes == 0


def test_kv_explain_adds_the_indexer_key_to_the_latent(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "kv", write(tmp_path, v32_config()), "--context", "65536",
                             "--explain")
    assert code == 0, err
    assert "(kv_lora_rank + qk_rope_head_dim) × bytes + indexer key" in out
    assert "indexer key = 132 B" in out
    assert f"=> per layer = {LATENT_BYTES + INDEXER_KEY_BYTES:,} B" in out
    assert "caution" not in out


def test_model_reads_deepseek_v32_as_a_checked_type() -> None:
    assert V32.architecture_caution == ""
    # the checkpoint's tensors, less the fp8 block scales and the MTP module: what is counted
    assert count_params(V32).total == 685_396_921_376 - 41_591_584 - 13_477_385_728


def test_model_shows_v32s_fp8_checkpoint_as_v3s_block_wise_fp8() -> None:
    v3 = resolve_model("deepseek-v3")
    assert V32.stored_format_map == v3.stored_format_map
    assert set(V32.stored_format_map.values()) == {"fp8-block"}


def test_model_puts_v32s_fp8_cache_in_fp8_ds_mla_records(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = model_report(V32)
    per_token = (656 + INDEXER_KEY_BYTES) * V32.count(mixer=FULL)
    assert report.kv_fp8.bytes_per_token_growing == pytest.approx(per_token)
    code, out, err = run_cli(capsys, "model", write(tmp_path, v32_config()))
    assert code == 0, err
    assert "46.94 KiB fp8 (full-attention layers; vLLM keeps an fp8 cache as fp8_ds_mla " \
        "records)" in out
    assert "caution" not in out
    assert model_report(resolve_model("deepseek-v3")).kv_fp8_id == "fp8"


def test_a_v32_layer_launches_its_indexers_two_weight_matmuls() -> None:
    layer = V32.layers[0]
    assert mixer_matmuls(V32, layer) == MLA_MATMULS + 2
    v3 = resolve_model("deepseek-v3")
    assert mixer_matmuls(v3, v3.layers[0]) == MLA_MATMULS
    assert step_matmuls(V32) - step_matmuls(v3) == 2 * LAYERS
    assert (step_matmuls(v3), step_matmuls(V32)) == (601, 723)
