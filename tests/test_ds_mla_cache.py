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
was checked for every release, so the default vLLM 0.32 refused --block-size 48."""

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
from ridgeline.vllm_cache_dtype import served_cache_dtype
from tests.conftest import refused_line, run_cli


def v32_config() -> dict[str, Any]:
    """DeepSeek-V3's config with DeepSeek Sparse Attention's indexer fields, as
    DeepSeek-V3.2's config.json adds them (its latent, kv_lora_rank 512 and
    qk_rope_head_dim 64, is V3's)."""
    config = copy.deepcopy(dict(load_data("models/deepseek-ai--DeepSeek-V3.json")))
    config.update(model_type="deepseek_v32", architectures=["DeepseekV32ForCausalLM"],
                  index_topk=2048, index_head_dim=128, index_n_heads=64)
    return config


def write(tmp_path: Path, config: dict[str, Any]) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def fp8_ds_mla_bytes(kv_lora_rank: int, qk_rope_head_dim: int) -> int:
    """FlashMLA's sparse record: the latent at 1 byte, a float32 scale per 128 latent
    values, the rope part at 2 bytes (bf16)."""
    return kv_lora_rank * 1 + kv_lora_rank // 128 * 4 + qk_rope_head_dim * 2


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return dict(json.loads(out))


refused = refused_line


def test_deepseek_v32_keeps_656_bytes_a_token_and_layer_in_fp8_ds_mla(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = v32_config()
    record = fp8_ds_mla_bytes(config["kv_lora_rank"], config["qk_rope_head_dim"])
    assert record == 656
    data = cli_json(capsys, "kv", write(tmp_path, config), "--kv-dtype", "fp8_ds_mla",
                    "--context", "8k")
    assert data["kv_dtype"] == "fp8_ds_mla"
    assert data["bytes_per_token"] == record * config["num_hidden_layers"]  # 40,016
    assert data["bytes_per_sequence"] == record * config["num_hidden_layers"] * 8000


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
    per_token = record * config["num_hidden_layers"]
    # the pool's bytes over each token's records, in whole blocks
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
    assert "packs a latent of 576 elements" in line and "not config's 320" in line


def test_the_flag_is_in_vllms_list_and_modelled() -> None:
    assert kv_cache_dtype_problem("vllm", None, "fp8_ds_mla") == ""
    assert kv_cache_dtype_problem("vllm", "0.11.0", "fp8_ds_mla") == ""
    sglang = kv_cache_dtype_problem("sglang", None, "fp8_ds_mla")
    assert "SGLang 0.5.9" in sglang and "ridgeline's name" not in sglang  # vLLM's, not ours


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
