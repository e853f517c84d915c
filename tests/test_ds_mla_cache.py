"""vLLM's fp8_ds_mla cache is sized, not refused: DeepSeek's FlashMLA sparse layout keeps one
record a token and layer, the latent in fp8 with a float32 scale per 128 values and the rope
part in bf16 (656 bytes for DeepSeek-V3.2's 512 + 64, where an fp8 latent is 576). vLLM reads
it for a DeepSeek Sparse Attention model (a config with index_topk) only, and stores any fp8
cache of such a model so; a dense MLA model (DeepSeek-V3) or one without MLA is refused as
vLLM finds no backend for it. observe reads the label as those records, not as plain fp8.
Before, --kv-cache-dtype fp8_ds_mla was refused as 'not modelled' for every model, an fp8
DeepSeek-V3.2 was sized at 576 bytes a token and layer, and observe read the label as fp8.

vLLM's --block-size is checked as each release checks it: CacheConfig's BlockSize choices
(1, 8, 16, 32, 64, 128, 256) before v0.18.0, any positive block from it. Before, the list
was checked for every release, so the default vLLM 0.32 refused --block-size 48.

DeepSeek Sparse Attention's indexer keeps its own key a token and layer beside the latent,
fp8 with a float32 scale per 128 values whatever the KV dtype (vLLM's DeepseekV32IndexerCache,
head_dim + head_dim // 128 * 4 bytes: 132 for index_head_dim 128). Before, it was left out:
DeepSeek-V3.2 in fp8_ds_mla was sized at 656 bytes a token and layer, not 788, and fit's
8×H200 pool held 1,208,000 tokens where vLLM's holds about 1,005,632."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ridgeline.datafiles import load_data
from ridgeline.engine_choices import block_size_problem, kv_cache_dtype_problem
from ridgeline.model import ModelSpec
from ridgeline.precision import kv_dtype
from ridgeline.sglang_memory import sglang_data
from ridgeline.vllm_cache_dtype import served_cache_dtype
from ridgeline.vllm_memory import vllm_data
from tests.conftest import refused_line, run_cli


def v32_config() -> dict[str, Any]:
    """deepseek-ai/DeepSeek-V3.2's config.json: DeepSeek-V3's with DeepSeek Sparse
    Attention's indexer fields (its latent, kv_lora_rank 512 and qk_rope_head_dim 64, is
    V3's), no auto_map, and its fp8 block scales in ue8m0 ('scale_fmt'), as a report of the
    checkpoint prints its config.json (code index id 62736905881: every other field, the
    quantization_config's weight_block_size [128, 128] among them, V3's)."""
    config = copy.deepcopy(dict(load_data("models/deepseek-ai--DeepSeek-V3.json")))
    config.pop("auto_map")
    config["quantization_config"]["scale_fmt"] = "ue8m0"
    config.update(model_type="deepseek_v32", architectures=["DeepseekV32ForCausalLM"],
                  index_topk=2048, index_head_dim=128, index_n_heads=64,
                  transformers_version="4.44.2")
    return config


def write(tmp_path: Path, config: dict[str, Any]) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def fp8_ds_mla_bytes(kv_lora_rank: int, qk_rope_head_dim: int) -> int:
    """FlashMLA's sparse record: the latent at 1 byte, a float32 scale per 128 latent
    values, the rope part at 2 bytes (bf16)."""
    return kv_lora_rank * 1 + kv_lora_rank // 128 * 4 + qk_rope_head_dim * 2


def indexer_key_bytes(index_head_dim: int) -> int:
    """The indexer's cached key: fp8 values and a float32 scale per 128 of them."""
    return index_head_dim * 1 + index_head_dim // 128 * 4


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return dict(json.loads(out))


refused = refused_line


def test_deepseek_v32_keeps_656_byte_records_and_132_byte_indexer_keys_in_fp8_ds_mla(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = v32_config()
    record = fp8_ds_mla_bytes(config["kv_lora_rank"], config["qk_rope_head_dim"])
    assert record == 656
    data = cli_json(capsys, "kv", write(tmp_path, config), "--kv-dtype", "fp8_ds_mla",
                    "--context", "8k")
    assert data["kv_dtype"] == "fp8_ds_mla"
    per_layer = record + indexer_key_bytes(config["index_head_dim"])
    assert per_layer == 788
    assert data["bytes_per_token"] == per_layer * config["num_hidden_layers"]  # 48,068
    assert data["bytes_per_sequence"] == per_layer * config["num_hidden_layers"] * 8000


@pytest.mark.parametrize(("flag", "latent_bytes"), [("bfloat16", 576 * 2), ("fp8", 656)])
def test_the_indexer_keeps_132_bytes_a_token_and_layer_beside_any_latent(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str,
        latent_bytes: int) -> None:
    """fit's pool on 8×H200 in whole blocks of the latent and the indexer's key together:
    bf16 (1,152 + 132) × 61 a token, fp8_ds_mla (656 + 132) × 61."""
    config = v32_config()
    data = cli_json(capsys, "fit", write(tmp_path, config), "--gpu", "h200", "-tp", "8",
                    "--max-model-len", "32k", "--kv-cache-dtype", flag)
    per_token = (latent_bytes + indexer_key_bytes(config["index_head_dim"])) \
        * config["num_hidden_layers"]
    block = data["block_size"]
    assert data["kv_cache_groups"]["page_bytes_per_gpu"] == per_token * block
    assert data["tokens"] == data["pool_bytes_per_gpu"] // (per_token * block) * block
    # a dense MLA model (no index_topk) keeps no indexer
    dense = cli_json(capsys, "kv", "deepseek-v3", "--kv-dtype", "bf16", "--context", "8k")
    assert dense["bytes_per_token"] == 576 * 2 * config["num_hidden_layers"]


def test_vllm_sizes_deepseek_v32s_fp8_cache_as_fp8_ds_mla_and_takes_the_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """DeepseekV32ForCausalLM.verify_and_update_config: a cache_dtype starting 'fp8' becomes
    'fp8_ds_mla', so vLLM's pool holds 576/656 of the tokens an fp8 latent would."""
    config = v32_config()
    path = write(tmp_path, config)
    args = ("fit", path, "--gpu", "h200", "-tp", "8", "--max-model-len", "32k")
    fp8 = cli_json(capsys, *args, "--kv-cache-dtype", "fp8")
    packed = cli_json(capsys, *args, "--kv-cache-dtype", "fp8_ds_mla")
    assert fp8["kv_dtype"] == packed["kv_dtype"] == "fp8_ds_mla"
    assert fp8["tokens"] == packed["tokens"]
    record = fp8_ds_mla_bytes(config["kv_lora_rank"], config["qk_rope_head_dim"])
    per_token = (record + indexer_key_bytes(config["index_head_dim"])) \
        * config["num_hidden_layers"]
    # the pool's bytes over each token's records and indexer keys, in whole blocks
    assert packed["tokens"] == packed["pool_bytes_per_gpu"] // (per_token * packed[
        "block_size"]) * packed["block_size"]
    # dense DeepSeek-V3 at fp8 keeps 576 bytes: more tokens in the same pool
    dense = cli_json(capsys, "fit", "deepseek-v3", "--gpu", "h200", "-tp", "8",
                     "--max-model-len", "32k", "--kv-cache-dtype", "fp8")
    assert dense["kv_dtype"] == "fp8"
    assert dense["tokens"] > packed["tokens"]


@pytest.mark.parametrize(("model", "words"), [
    ("deepseek-v3", "deepseek-v3's dense MLA runs on backends that do not read it "
                    "(FlashMLA: auto, fp8, fp8_e4m3)"),
    ("llama-3.1-8b", "no attention backend reads for llama-3.1-8b, a model without an MLA "
                     "latent")])
def test_fp8_ds_mla_is_refused_for_a_model_vllm_has_no_backend_for(
        capsys: pytest.CaptureFixture[str], model: str, words: str) -> None:
    line = refused(capsys, "fit", model, "--gpu", "h200", "-tp", "8", "--max-model-len", "8k",
                   "--kv-cache-dtype", "fp8_ds_mla")
    assert line.startswith("ridgeline: error: vLLM's fp8_ds_mla is DeepSeek's sparse MLA "
                           "cache")
    assert words in line and "not modelled" not in line


def test_a_latent_of_another_width_is_refused(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    config = v32_config()
    config["kv_lora_rank"] = 256
    line = refused(capsys, "kv", write(tmp_path, config), "--kv-dtype", "fp8_ds_mla",
                   "--context", "8k")
    assert "packs a latent of 576 elements" in line and f"not {tmp_path.name}'s 320" in line


def test_the_flag_is_in_vllms_list_and_modelled() -> None:
    assert kv_cache_dtype_problem("vllm", None, "fp8_ds_mla") == ""
    assert kv_cache_dtype_problem("vllm", "0.11.0", "fp8_ds_mla") == ""
    sglang = kv_cache_dtype_problem("sglang", None, "fp8_ds_mla")
    newest = sglang_data()["newest_checked"]
    assert f"SGLang {newest}" in sglang and "ridgeline's name" not in sglang  # vLLM's, not ours


def test_observe_reads_the_label_as_its_records_not_as_fp8() -> None:
    v32 = ModelSpec.from_hf_config(v32_config(), "v32")
    served = served_cache_dtype("fp8_ds_mla", v32)
    assert served is not None and served.id == "fp8_ds_mla"
    assert served.bytes_per_element * 576 == fp8_ds_mla_bytes(512, 64)
    assert served.bytes_per_element != kv_dtype("fp8").bytes_per_element
    # a label no vLLM writes for a dense model names no cache it keeps
    dense = ModelSpec.from_hf_config(dict(load_data("models/deepseek-ai--DeepSeek-V3.json")),
                                     "v3")
    assert served_cache_dtype("fp8_ds_mla", dense) is None


@pytest.mark.parametrize(("version", "block", "refusal"), [
    ("0.17.0", 48, True), ("0.17.0", 256, False), ("0.17.0", 1, False),
    ("0.11.0", 7, True), ("0.18.0", 48, False), ("0.18.0", 7, False), (None, 48, False)])
def test_vllms_block_size_is_checked_as_each_release_checks_it(
        version: str | None, block: int, refusal: bool) -> None:
    assert bool(block_size_problem("vllm", version, block)) is refusal


def test_the_default_release_takes_any_positive_block_and_0_17_refuses_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = ("fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k", "--block-size",
            "48")
    assert cli_json(capsys, *args)["block_size"] == 48
    line = refused(capsys, *args, "--engine-version", "0.17.0")
    assert line == ("ridgeline: error: vLLM 0.17.0's --block-size is one of 1, 8, 16, 32, 64, "
                    "128, 256; got 48 (from v0.18.0, any block of 1 token or more)")
    row = load_data("engine_choices.json")["block_size"]["vllm"]
    assert row["source"] and row["choices_until"] == "0.18.0"


# DeepSeek Sparse Attention runs on FlashMLASparse, kernel blocks of 64 tokens whatever the
# cache dtype (get_supported_kernel_block_sizes: [64]); before 0.18 vLLM's platform sets any
# such block to 64 ('Forcing kv cache block size to 64 for FlashMLASparse backend'), from 0.18
# the block given is kept and one off 64 finds no backend on Hopper. Before, a bf16
# DeepSeek-V3.2 on an H200 was paged in dense MLA's 16-token blocks, 0.17.0 kept a 128 asked,
# and --block-size 48 was sized.
SPARSE_BLOCK = 64


@pytest.mark.parametrize(("extra", "block"), [
    ((), SPARSE_BLOCK), (("--kv-cache-dtype", "fp8"), SPARSE_BLOCK),
    (("--engine-version", "0.17.0", "--block-size", "128"), SPARSE_BLOCK),
    (("--engine-version", "0.17.0", "--block-size", "8"), SPARSE_BLOCK),
    (("--block-size", "128"), 128)])
def test_a_sparse_mla_model_is_paged_in_flashmla_sparse_blocks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...],
        block: int) -> None:
    data = cli_json(capsys, "fit", write(tmp_path, v32_config()), "--gpu", "h200", "-tp", "8",
                    "--max-model-len", "8k", *extra)
    assert data["block_size"] == block
    assert data["token_slots_per_gpu"] == data["blocks_per_gpu"] * block


@pytest.mark.parametrize("command", [
    ("fit", "--max-model-len", "8k"), ("decode", "--context", "8k", "--batch", "4"),
    ("simulate", "--max-model-len", "8k", "--rate", "2", "--num-requests", "20")])
def test_a_block_off_64_finds_no_backend_for_a_sparse_mla_model_from_0_18(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]) -> None:
    name, *rest = command
    line = refused(capsys, name, write(tmp_path, v32_config()), "--gpu", "h200", "-tp", "8",
                   *rest, "--block-size", "48")
    default = vllm_data()["default_version"]
    assert line == (f"ridgeline: error: vLLM {default} (the default --engine-version) finds no "
                    f"attention backend for --block-size 48 with {tmp_path.name} on h200-sxm: "
                    "a DeepSeek "
                    "Sparse Attention model runs on FlashMLASparse, whose kernel blocks are 64 "
                    "tokens; give a --block-size that is a multiple of 64")


@pytest.mark.parametrize("flag", ["fp8", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("card", [(), ("--gpu", "h200", "--num-gpus", "8")])
def test_kv_without_an_engine_keeps_vllms_fp8_as_fit_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str,
        card: tuple[str, ...]) -> None:
    """kv without --engine reads --kv-cache-dtype as vLLM's flag, so DeepSeek-V3.2's fp8 is
    kept in fp8_ds_mla's records there too. Before, kv sized it as plain fp8 (576 + 132 bytes
    a token and layer) while fit sized 656 + 132."""
    config = v32_config()
    data = cli_json(capsys, "kv", write(tmp_path, config), "--kv-cache-dtype", flag,
                    "--context", "8k", *card)
    assert data["kv_dtype"] == "fp8_ds_mla"
    record = fp8_ds_mla_bytes(config["kv_lora_rank"], config["qk_rope_head_dim"])
    assert data["bytes_per_token"] == (record + indexer_key_bytes(config["index_head_dim"])) \
        * config["num_hidden_layers"]
    # ridgeline's own --kv-dtype fp8 names the plain fp8 latent, no engine's record
    plain = cli_json(capsys, "kv", write(tmp_path, config), "--kv-dtype", "fp8", "--context",
                     "8k")
    assert plain["kv_dtype"] == "fp8"


# On Blackwell vLLM 0.18 on picks DeepSeek-V3.2's sparse backend before its block
# (platforms/cuda.py _get_backend_priorities, major == 10): FlashInfer MLA Sparse (kernel
# blocks 32 and 64; no fp8_ds_mla) at 16 query heads a rank or fewer, FlashMLASparse (64)
# otherwise; before 0.18 the platform forces 64. Before, every unasked block on a B200 from
# 0.18 was dense FlashInfer MLA's 32: -dp 8 (128 heads a rank) and the fp8_ds_mla cache too.
@pytest.mark.parametrize(("extra", "flashinfer"), [
    (("--num-gpus", "8"), True),
    (("--num-gpus", "4"), False),
    (("--num-gpus", "1", "-dp", "8", "--enable-expert-parallel"), False),
    (("--num-gpus", "8", "--kv-cache-dtype", "fp8"), False)])
def test_deepseek_v32_on_blackwell_is_paged_in_the_blocks_of_the_sparse_backend_vllm_picks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...],
        flashinfer: bool) -> None:
    from ridgeline.vllm_mla_block import (
        FLASHINFER_SPARSE_BLOCK,
        FLASHINFER_SPARSE_MAX_HEADS,
        SPARSE_MLA_BLOCK,
    )

    config = v32_config()
    data = cli_json(capsys, "fit", write(tmp_path, config), "--gpu", "b200",
                    "--max-model-len", "8k", "--engine-version", "0.33", *extra)
    heads = config["num_attention_heads"] // data["tensor_parallel_size"]
    assert (heads <= FLASHINFER_SPARSE_MAX_HEADS and data["kv_dtype"] != "fp8_ds_mla") \
        is flashinfer
    assert data["block_size"] == (FLASHINFER_SPARSE_BLOCK if flashinfer else SPARSE_MLA_BLOCK)
    old = cli_json(capsys, "fit", write(tmp_path, config), "--gpu", "b200",
                   "--max-model-len", "8k", "--engine-version", "0.17.0", *extra)
    assert old["block_size"] == SPARSE_MLA_BLOCK
    # from v0.34 both backends take its default block, 64
    new = cli_json(capsys, "fit", write(tmp_path, config), "--gpu", "b200",
                   "--max-model-len", "8k", *extra)
    assert new["block_size"] == SPARSE_MLA_BLOCK
