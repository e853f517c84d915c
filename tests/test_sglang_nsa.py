"""SGLang's own set-up of a DeepSeek Sparse Attention model (DeepSeek-V3.2; "DeepSeek NSA" in
server_args._handle_model_specific_adjustments), as fit sizes it on an NVIDIA GPU: its pages
are 64 tokens whatever --page-size says; --kv-cache-dtype auto is bfloat16 on Hopper and
fp8_e4m3 on Blackwell, an fp8_e4m3 cache kept in FlashMLA's 656-byte records (vLLM's
fp8_ds_mla), fp8_e5m2 refused as SGLang asserts; and from 0.5.3 to 0.5.5 (before PR #13646's
pure TP) every GPU is an attention DP rank, dp_size = tp_size, whatever the flags say.
Before, fit paged V3.2 under SGLang in single tokens, ran it as plain TP with the latent on
all 8 GPUs in every release, and sized fp8_e4m3 as a 576-byte latent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ridgeline import resolve_model
from ridgeline.candidate import replica_deployment
from ridgeline.datafiles import load_data
from ridgeline.hardware import resolve_accelerator
from ridgeline.plan import plan
from ridgeline.serving_load import Load, Slo
from ridgeline.sglang_nsa import nsa_layout_problem
from tests.conftest import refused_line
from tests.test_ds_mla_cache import (
    cli_json,
    fp8_ds_mla_bytes,
    indexer_key_bytes,
    v32_config,
    write,
)

NSA = load_data("engines.json")["sglang"]["nsa"]
FORCED = NSA["dp_attention_forced"]
INSIDE = "0.5.4"  # a release between FORCED["from"] and FORCED["before"]


def sglang_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str], gpu: str,
               *extra: str) -> dict[str, Any]:
    return cli_json(capsys, "fit", write(tmp_path, v32_config()), "--gpu", gpu, "--num-gpus",
                    "8", "--engine", "sglang", "--max-model-len", "32k", *extra)


def per_token_bytes(latent_bytes: int) -> int:
    config = v32_config()
    return (latent_bytes + indexer_key_bytes(config["index_head_dim"])) \
        * config["num_hidden_layers"]


@pytest.mark.parametrize("asked", [(), ("--page-size", "16")])
def test_sglang_pages_deepseek_v32_in_64_token_pages_whatever_is_asked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], asked: tuple[str, ...]) -> None:
    data = sglang_fit(tmp_path, capsys, "h200", *asked)
    assert data["block_size"] == NSA["page_size"] == 64
    assert data["tokens"] % NSA["page_size"] == 0
    # the newest release runs it as asked: plain TP8, one rank
    assert data["data_parallel"] is None and data["tensor_parallel_size"] == 8
    # dense DeepSeek-V3 keeps SGLang's single-token pages
    dense = cli_json(capsys, "fit", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8",
                     "--engine", "sglang", "--max-model-len", "32k")
    assert dense["block_size"] == load_data("engines.json")["sglang"]["page_size"] == 1


@pytest.mark.parametrize(("gpu", "cache", "latent_bytes"), [
    ("h200", "bf16", 576 * 2),
    ("b200", "fp8_ds_mla", fp8_ds_mla_bytes(512, 64))])
def test_sglangs_auto_cache_is_bf16_on_hopper_and_656_byte_fp8_records_on_blackwell(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], gpu: str, cache: str,
        latent_bytes: int) -> None:
    data = sglang_fit(tmp_path, capsys, gpu)
    assert data["kv_dtype"] == cache
    assert data["per_conversation_bytes_per_gpu"] == per_token_bytes(latent_bytes) \
        * data["max_model_len"]


def test_sglangs_fp8_e4m3_is_kept_in_656_byte_records_and_fp8_e5m2_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = sglang_fit(tmp_path, capsys, "h200", "--kv-cache-dtype", "fp8_e4m3")
    assert data["kv_dtype"] == "fp8_ds_mla"
    record = fp8_ds_mla_bytes(v32_config()["kv_lora_rank"], v32_config()["qk_rope_head_dim"])
    assert data["per_conversation_bytes_per_gpu"] == per_token_bytes(record) * data["max_model_len"]
    # bf16's fp8 lever is priced in the same records: the flag's own run
    bf16 = sglang_fit(tmp_path, capsys, "h200")
    lever = next(x for x in bf16["levers"] if x["name"].startswith("fp8 KV cache"))
    assert lever["conversations"] == data["conversations"]
    line = refused_line(capsys, "fit", write(tmp_path, v32_config()), "--gpu", "h200",
                        "--num-gpus", "8", "--engine", "sglang", "--max-model-len", "32k",
                        "--kv-cache-dtype", "fp8_e5m2")
    assert "bfloat16 or fp8_e4m3 only" in line and "not fp8_e5m2" in line


@pytest.mark.parametrize("flags", [(), ("--dp-size", "2", "--enable-dp-attention")])
def test_sglang_0_5_3_to_0_5_5_runs_deepseek_v32_with_dp_attention_over_every_gpu(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...]) -> None:
    forced = sglang_fit(tmp_path, capsys, "h200", "--engine-version", INSIDE, *flags)
    asked = sglang_fit(tmp_path, capsys, "h200", "--engine-version", INSIDE, "--dp-size",
                       "8", "--enable-dp-attention")
    assert forced["data_parallel"]["data_parallel_size"] == 8 and forced["tensor_parallel_size"] == 1
    for key in ("tokens", "conversations", "pool_bytes_per_gpu", "block_size"):
        assert forced[key] == asked[key]
    assert any("dp_size = tp_size = 8" in c for c in forced["cautions"])
    # each GPU keeps its own requests' latents: more conversations than plain TP8, whose 8
    # GPUs each hold every conversation's
    plain = sglang_fit(tmp_path, capsys, "h200", "--engine-version", FORCED["before"])
    assert plain["data_parallel"] is None
    assert forced["conversations"] > plain["conversations"]


def test_the_forced_layout_over_pipeline_stages_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused_line(capsys, "fit", write(tmp_path, v32_config()), "--gpu", "h200",
                        "--num-gpus", "8", "--engine", "sglang", "--engine-version", INSIDE,
                        "-pp", "2", "--max-model-len", "32k")
    assert "dp_size = tp_size" in line and "--pipeline-parallel-size 1" in line


def test_the_rule_carries_its_source() -> None:
    assert NSA["_source"] and NSA["_about"]
    assert FORCED["from"] < INSIDE < FORCED["before"]
    assert NSA["kv_cache_dtypes"] == ["bfloat16", "fp8_e4m3"]


def test_docs_fit_md_quotes_the_forced_layouts_pool_as_fit_sizes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, v32_config())
    args = ("fit", path, "--gpu", "h200", "--num-gpus", "8", "--engine", "sglang")
    forced = cli_json(capsys, *args, "--engine-version", INSIDE)
    plain = cli_json(capsys, *args, "--engine-version", FORCED["before"])
    text = " ".join((Path(__file__).parents[1] / "docs" / "fit.md").read_text().split())
    assert (f"{forced['tokens']:,} tokens on each rank, {forced['conversations']} "
            f"conversations of {forced['max_model_len']:,} where plain TP8 holds "
            f"{plain['conversations']}") in text


def test_plan_under_a_forcing_release_launches_only_one_gpu_ranks(tmp_path: Path) -> None:
    """Before: plan under SGLang 0.5.4 proposed 'TP8' (and 'attention DP4 × TP2', and TP8
    disaggregated pools), priced as plain TP, which that release launches as DP8 × TP1. Every
    layout the search sizes is read, unsimulated (verify=0: the layouts are the search's, and
    a check adds replicas, never a wider rank)."""
    path = write(tmp_path, v32_config())
    result = plan(resolve_model(path), Load(2.0, "2000", "500"), Slo(3.0, 0.1), ["h200"],
                  max_gpus=16, workers=1, verify=0, engine="sglang", engine_version=INSIDE)
    assert result.candidates
    for c in [*result.candidates, *result.disaggregated]:
        assert c.tp == 1 and c.pp == 1, c
    assert result.winner is not None and result.winner.data_parallel == 8
    # the release past the rule searches plain TP again
    dep = replica_deployment(resolve_model(path), resolve_accelerator("h200"), 8, 1,
                             "as stored", "bf16", engine="sglang", version=FORCED["before"])
    assert dep.tensor_parallel_size == 8
    assert "each GPU a rank of its own" in nsa_layout_problem(dep, INSIDE)


def test_fits_levers_under_a_forcing_release_offer_no_wider_ranks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: 'attention DP8 × TP2' on 16 GPUs, which SGLang 0.5.4 runs as DP16 × TP1."""
    forced = sglang_fit(tmp_path, capsys, "h200", "--engine-version", INSIDE)
    names = [lever["name"] for lever in forced["levers"]]
    assert "16 GPUs (attention DP16 × TP1)" in names
    assert not any("× TP2" in name for name in names), names


def test_plan_no_dp_under_a_forcing_release_is_refused_by_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: 'does not fit: no group of up to 16 GPUs (h200) holds DeepSeek-V3.2', where
    the release's forced DP attention, not memory, leaves --no-dp nothing to launch."""
    line = refused_line(capsys, "plan", write(tmp_path, v32_config()), "--engine", "sglang",
                        "--engine-version", INSIDE, "--gpus", "h200", "--rate", "2",
                        "--slo-ttft-ms", "3000", "--slo-tpot-ms", "100", "--no-dp")
    assert "dp_size = tp_size" in line and "drop --no-dp" in line
