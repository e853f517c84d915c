"""Two SGLang drafter flags: --speculative-draft-kv-cache-dtype (v0.5.18+), which changes the
draft cache's dtype but not the pool SGLang budgets for it, and --max-running-requests 48 given
beside a drafter, which from v0.5.22 caps the graph batch as any given value does, while the
48 the drafter sets comes after the memory rule and caps nothing."""

from __future__ import annotations

import re

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engine_spec import EngineSpec
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.sglang_drafter import sglang_draft_kv_cache_dtype
from ridgeline.sglang_memory import sglang_data, sglang_speculative_requests
from ridgeline.sglang_pool import sglang_requests_given, sglang_rule, sglang_settings
from tests.conftest import run_cli

DTYPE = sglang_data()["draft_kv_cache_dtype"]
V3_FIT = ("fit", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--engine", "sglang",
          "--max-model-len", "8k", "--speculative-algorithm", "NEXTN",
          "--speculative-num-steps", "3", "--speculative-eagle-topk", "1")


def tokens(out: str) -> int:
    found = re.search(r"holds ([\d,]+) tokens", out)
    assert found, out
    return int(found.group(1).replace(",", ""))


# -- --speculative-draft-kv-cache-dtype ------------------------------------------------------

def test_the_draft_cache_dtype_leaves_the_pool_as_it_was(
        capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang budgets the draft cache at the target's cell whatever its own dtype: the pool
    holds as many tokens with fp8_e4m3 as without, and --explain says why."""
    code, plain, _ = run_cli(capsys, *V3_FIT)
    assert code == 0
    code, fp8, _ = run_cli(capsys, *V3_FIT, "--speculative-draft-kv-cache-dtype", "fp8_e4m3")
    assert code == 0 and tokens(fp8) == tokens(plain)
    code, out, _ = run_cli(capsys, *V3_FIT, "--speculative-draft-kv-cache-dtype", "fp8_e4m3",
                           "--explain")
    assert code == 0 and "--speculative-draft-kv-cache-dtype fp8_e4m3 changes" in out


def test_the_flag_is_refused_before_0_5_18_and_outside_its_choices(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, *V3_FIT, "--speculative-draft-kv-cache-dtype", "fp8_e4m3",
                           "--engine-version", "0.5.17")
    assert code == 2 and f"it came in v{DTYPE['from']}" in err and len(err.splitlines()) == 1
    code, _, err = run_cli(capsys, *V3_FIT, "--speculative-draft-kv-cache-dtype", "fp8")
    assert code == 2 and "not one SGLang takes" in err and len(err.splitlines()) == 1
    for value in DTYPE["choices"]:
        assert sglang_draft_kv_cache_dtype(value, DTYPE["from"]) == value


def test_the_flag_is_sglangs(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm",
                           "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
                           "--speculative-draft-kv-cache-dtype", "fp8_e4m3")
    assert code == 2 and "is SGLang's" in err


# -- --max-running-requests 48 beside a drafter ----------------------------------------------

def v3() -> Deployment:
    return Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"),
                            num_gpus=8, engine="sglang")


def nextn(version: str | None, seats: int | None = None) -> EngineSettings:
    return EngineSettings(draft_mtp=True, drafter=EngineSpec(3, "mtp"), engine_version=version,
                          max_num_seqs=seats)


def test_the_drafters_48_is_marked_as_its_own() -> None:
    default = sglang_speculative_requests("mtp")
    set_by_drafter = sglang_settings(nextn(None))
    given = sglang_settings(nextn(None, default))
    assert set_by_drafter.max_num_seqs == given.max_num_seqs == default
    assert sglang_requests_given(set_by_drafter) is None
    assert sglang_requests_given(given) == default


@pytest.mark.parametrize("version", ["0.5.22", None])
def test_a_given_48_caps_the_graph_batch_the_drafters_does_not(version: str | None) -> None:
    """DeepSeek-V3 on 8 H200s with NEXTN: 48 given caps the tier's graph batch to 48 and
    reserves less, so a larger fraction and pool; the drafter's own 48 leaves the tier's."""
    dep = v3()
    seats = sglang_speculative_requests("mtp", version)
    assert seats is not None
    unset, given = nextn(version), nextn(version, seats)
    total = kv_pool(dep, unset).total_bytes
    unset_rule, _ = sglang_rule(dep, sglang_settings(unset), total)
    given_rule, _ = sglang_rule(dep, sglang_settings(given), total)
    assert given_rule.cuda_graph_max_bs == seats < unset_rule.cuda_graph_max_bs
    assert kv_pool(dep, given).reserved_fraction > kv_pool(dep, unset).reserved_fraction
    assert kv_pool(dep, given).tokens > kv_pool(dep, unset).tokens


def test_before_0_5_22_a_given_48_is_as_the_drafters() -> None:
    dep = v3()
    seats = sglang_speculative_requests("mtp", "0.5.21")
    assert kv_pool(dep, nextn("0.5.21", seats)).tokens == kv_pool(dep, nextn("0.5.21")).tokens


def test_under_dp_attention_the_rule_reads_the_servers_value() -> None:
    """--max-running-requests 256 over 8 data-parallel ranks: each rank runs 32, but the
    memory rule (0.5.22+'s server_args) caps the graph batch at the server's 256, not 32, and
    reserves for 256 graph batches on every rank."""
    dep = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"),
                           num_gpus=8, engine="sglang", data_parallel_size=8,
                           expert_parallel=True)
    given = kv_pool(dep, EngineSettings(max_num_seqs=256))
    assert given.max_num_seqs == 256 // 8
    rule, _ = sglang_rule(dep, EngineSettings(max_num_seqs=256), given.total_bytes)
    assert rule.cuda_graph_max_bs == 256
    assert given.reserved_fraction == rule.mem_fraction_static
    per_rank, _ = sglang_rule(dep, EngineSettings(max_num_seqs=32), given.total_bytes)
    assert given.reserved_fraction < per_rank.mem_fraction_static


def test_the_draft_dtype_without_a_drafter_is_a_caution(
        capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang reads --speculative-draft-kv-cache-dtype only in a draft worker, so without
    --speculative-algorithm it is ignored: the pool as without it, a caution said; its value
    and its release still checked as SGLang's parser checks them."""
    plain_fit = V3_FIT[:V3_FIT.index("--speculative-algorithm")]
    code, plain, _ = run_cli(capsys, *plain_fit)
    assert code == 0
    code, out, err = run_cli(capsys, *plain_fit, "--speculative-draft-kv-cache-dtype", "fp8_e4m3")
    assert code == 0 and tokens(out) == tokens(plain)
    assert "ignored: no drafter" in err
    code, _, err = run_cli(capsys, *plain_fit, "--speculative-draft-kv-cache-dtype", "fp8")
    assert code == 2 and "not one SGLang takes" in err
    code, _, err = run_cli(capsys, *plain_fit, "--speculative-draft-kv-cache-dtype", "fp8_e4m3",
                           "--engine-version", "0.5.17")
    assert code == 2 and f"it came in v{DTYPE['from']}" in err
