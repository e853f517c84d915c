"""A hybrid's recurrent state follows the engine settings its pool reads: SGLang's
--mamba-ssm-dtype and vLLM's --engine-version (Nemotron-H's SSM state bf16 before v0.20, fp32
from it) size the step's state reads and decode's fits line as they size the pool
(cost.served_state_model, bound to the deployment by Deployment.with_state_settings)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cost import Seq, served_footprint, step_time_s
from ridgeline.kvgroups import KERNEL_BLOCK_ALIGNMENT
from ridgeline.memory import EngineSettings, kv_pool
from tests.conftest import run_cli

NEXT = "qwen3-next-80b-a3b-thinking"  # SGLang: 36 linear-attention layers
NEMOTRON_H = "nemotron-h-56b-base-8k"  # vLLM: its SSM state's dtype moved in v0.20
TP = 4
OLD_VLLM = "0.19.0"  # before v0.20: the config's bf16 (engines.json nemotron_h_ssm_cache_dtype)


def decode_point(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "decode", *argv, "--gpu", "h200", "--batch", "1", "--json")
    assert code == 0, err
    point: dict[str, Any] = json.loads(out)["points"][0]
    return point


def fits_state_bytes(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...],
                     context: int) -> float:
    """The states alone on decode's fits line: twice its cache at ``context`` less its cache
    at twice that (the attention cache grows with the context, the states do not)."""
    def kv(c: int) -> float:
        return float(decode_point(capsys, *argv, "--context", str(c))["kv_bytes"])

    return 2 * kv(context) - kv(2 * context)


def sglang_argv(flag: str | None) -> tuple[str, ...]:
    return (NEXT, "--tp-size", str(TP), "--engine", "sglang",
            *(("--mamba-ssm-dtype", flag) if flag else ()))


def vllm_argv(version: str | None) -> tuple[str, ...]:
    return (NEMOTRON_H, "--engine", "vllm", *(("--engine-version", version) if version else ()))


@pytest.mark.parametrize("flag", [None, "bfloat16"])
def test_sglangs_fits_line_holds_the_state_its_pool_sizes_under_mamba_ssm_dtype(
        capsys: pytest.CaptureFixture[str], flag: str | None) -> None:
    state_bytes = fits_state_bytes(capsys, sglang_argv(flag), 8_000)
    dep = Deployment.build(resolve_model(NEXT), resolve_accelerator("h200"), num_gpus=TP,
                           engine="sglang").with_state_settings(None, flag)
    pool = kv_pool(dep, EngineSettings(max_model_len=32_768, mamba_ssm_dtype=flag))
    assert pool.state_request_bytes > 0 and pool.kv_share == 1.0
    assert state_bytes / TP == pytest.approx(pool.state_request_bytes)
    assert served_footprint(dep, 1).state_bytes / TP == pytest.approx(pool.state_request_bytes)


def test_a_bf16_ssm_state_makes_sglangs_step_read_less(
        capsys: pytest.CaptureFixture[str]) -> None:
    fp32 = decode_point(capsys, *sglang_argv(None), "--context", "4000")
    bf16 = decode_point(capsys, *sglang_argv("bfloat16"), "--context", "4000")
    assert bf16["kv_bytes"] < fp32["kv_bytes"]
    assert bf16["kv_bytes_read"] < fp32["kv_bytes_read"]
    assert bf16["step_time_s"] < fp32["step_time_s"]


@pytest.mark.parametrize("version", [OLD_VLLM, None])
def test_vllms_fits_line_holds_the_state_its_pool_pages_at_each_release(
        capsys: pytest.CaptureFixture[str], version: str | None) -> None:
    """vLLM pages a hybrid's state in its attention block, grown in steps of 16 tokens until
    one layer's page holds it: the page is the smallest such one for the fits line's state."""
    model = resolve_model(NEMOTRON_H)
    state_layers = sum(1 for layer in model.layers if layer.mixer == "mamba")
    per_layer = fits_state_bytes(capsys, vllm_argv(version), 2_000) / state_layers
    dep = Deployment.build(model, resolve_accelerator("h200"),
                           engine="vllm").with_state_settings(version, None)
    groups = kv_pool(dep, EngineSettings(engine_version=version, max_model_len=8192)).groups
    assert groups is not None and groups.states
    token_bytes = groups.page_bytes / groups.layers_per_group / groups.block_size
    assert (groups.block_size - KERNEL_BLOCK_ALIGNMENT) * token_bytes < per_layer \
        <= groups.block_size * token_bytes
    assert served_footprint(dep, 1).state_bytes == pytest.approx(per_layer * state_layers)


def test_vllm_before_v0_20_reads_a_smaller_state(capsys: pytest.CaptureFixture[str]) -> None:
    old = decode_point(capsys, *vllm_argv(OLD_VLLM), "--context", "4000")
    new = decode_point(capsys, *vllm_argv(None), "--context", "4000")
    assert old["kv_bytes"] < new["kv_bytes"]
    assert old["kv_bytes_read"] < new["kv_bytes_read"]
    assert old["step_time_s"] < new["step_time_s"]


def test_the_cached_step_time_keys_on_the_state_settings() -> None:
    """Two deployments differing only in the state's settings are two cache entries."""
    dep = Deployment.build(resolve_model(NEMOTRON_H), resolve_accelerator("h200"), engine="vllm")
    batch = [Seq(1, 4000)] * 8
    new = step_time_s(dep, batch)
    old = step_time_s(dep.with_state_settings(OLD_VLLM, None), batch)
    assert old < new
    assert step_time_s(dep.with_state_settings(None, None), batch) == new
