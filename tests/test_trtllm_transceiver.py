"""TensorRT-LLM's KV transfer buffers (cache_transceiver_config, trtllm_transceiver.py): a
split pool's YAML as plan prints it is read by fit, whose pool loses exactly the send and
receive buffers CacheTransBufferManager::preAllocBufferSize sizes, computed here from the
model's own KV bytes per token; and plan sized its split pools with the same buffers."""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from ridgeline.candidate import Candidate
from ridgeline.catalog import resolve_model
from ridgeline.datafiles import engine_defaults
from ridgeline.plan import PlanResult
from ridgeline.reports.plan_commands import PlanCommands
from ridgeline.reports.trtllm_command import yaml_text
from ridgeline.serving_load import Load
from ridgeline.yaml_subset import parse_yaml
from tests.conftest import run_cli

LOAD = Load(2.0, "2000", "200")  # a 2,000-token prompt: not whole 32-token blocks
MODEL_ID = "llama-3.1-8b"
MAX_LEN = 16384
MIB = 2**20


def _split() -> Candidate:
    return Candidate("h100-sxm", 1, 1, "bf16", "bf16", None, 64, 0.02, 0.3, 1.0, 3, 2.0, False,
                     "", (1.0, 1.0), disaggregated="1P2D", prefill_replicas=1,
                     max_model_len=MAX_LEN, pool_knobs=((None, None), (64, None)))


def _ctx_pool(tmp_path: Path) -> tuple[list[str], str, dict[str, Any]]:
    """The context pool's command as pasted after `ridgeline fit` (plan's own, its files
    written beside it), the YAML it names, and that YAML's settings."""
    result = cast(PlanResult, SimpleNamespace(engine="trtllm", engine_version=None, load=LOAD))
    launch = PlanCommands(resolve_model(MODEL_ID), MODEL_ID, result, MAX_LEN)
    commands, _ = launch.pool_launch(_split())
    for name, text in launch.pool_files(_split()).items():
        (tmp_path / name).write_text(text)
    words = shlex.split(commands["prefill"])
    words = words[len(engine_defaults("trtllm")["cli"]["launch"].split()):]
    name = words[words.index("--extra_llm_api_options") + 1]
    return words, name, parse_yaml((tmp_path / name).read_text(), name)


def _fit(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "fit", *argv, "--gpu", "h100", "--engine", "trtllm",
                             "--json")
    assert code == 0, err
    found: dict[str, Any] = json.loads(out)
    return found


def _kv_bytes_per_token() -> int:
    """Llama-3.1-8B's bf16 cache, from its config: layers × KV heads × head_dim × K and V × 2 B."""
    model = resolve_model(MODEL_ID)
    a = model.attention
    return model.num_layers * a.num_kv_heads * a.head_dim * 2 * 2


def test_a_pasted_ctx_pool_loses_exactly_its_send_and_receive_buffers(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: Any) -> None:
    """Plan's context pool YAML carries max_tokens_in_buffer at the longest prompt in whole
    blocks (2,000 -> 2,016); fit reads it, and its pool is the one without the key less
    0.9 × 2 buffers of (min(max_seq_len, 2,016) + one 32-token block) × 128 KiB."""
    words, name, config = _ctx_pool(tmp_path)
    monkeypatch.chdir(tmp_path)
    buffer_tokens = config["cache_transceiver_config"]["max_tokens_in_buffer"]
    assert buffer_tokens % 32 == 0 and 0 <= buffer_tokens - LOAD.longest_prompt(MAX_LEN) < 32
    with_key = _fit(capsys, *words)
    bare = {k: v for k, v in config.items() if k != "cache_transceiver_config"}
    (tmp_path / "bare.yaml").write_text(yaml_text(bare))
    without = _fit(capsys, *[("bare.yaml" if w == name else w) for w in words])
    max_seq_len = int(words[words.index("--max_seq_len") + 1])
    window = math.ceil(max_seq_len / 32) * 32
    expected = 2 * (min(window, buffer_tokens) + 32) * _kv_bytes_per_token()  # send + receive
    assert with_key["taken_bytes_per_gpu"]["kv_transfer_buffer"] == pytest.approx(expected)
    assert without["taken_bytes_per_gpu"]["kv_transfer_buffer"] == 0
    fraction = float(words[words.index("--kv_cache_free_gpu_memory_fraction") + 1])
    assert without["pool_bytes_per_gpu"] - with_key["pool_bytes_per_gpu"] \
        == pytest.approx(fraction * expected)
    code, out, err = run_cli(capsys, "fit", *words, "--gpu", "h100", "--engine", "trtllm")
    assert code == 0, err
    assert "− KV transfer buffer (cache_transceiver_config) (backend DEFAULT, " \
           f"max_tokens_in_buffer {buffer_tokens:,})" in out


def test_plan_sized_its_split_pools_with_the_buffer_it_prints(tmp_path: Path) -> None:
    """The transceiver disaggregated.py sizes a TensorRT-LLM pool with is the one the pool's
    printed YAML carries, so the plan's pools and the pasted ones agree."""
    from ridgeline.candidate import replica_deployment
    from ridgeline.disaggregated import pool_transceiver
    from ridgeline.hardware import resolve_accelerator
    from ridgeline.trtllm_transceiver import parse_transceiver

    _, _, config = _ctx_pool(tmp_path)
    dep = replica_deployment(resolve_model(MODEL_ID), resolve_accelerator("h100-sxm"), 1, 1,
                             "bf16", "bf16", engine="trtllm")
    printed = parse_transceiver(json.dumps(config["cache_transceiver_config"]))
    assert printed is not None and pool_transceiver(dep, LOAD, MAX_LEN) == printed
    vllm = replica_deployment(resolve_model(MODEL_ID), resolve_accelerator("h100-sxm"), 1, 1,
                              "bf16", "bf16", engine="vllm")
    assert pool_transceiver(vllm, LOAD, MAX_LEN) is None


@pytest.mark.parametrize("backend, after_fraction", [("pytorch", False), ("tensorrt", True)])
def test_without_max_tokens_in_buffer_the_default_512_mib_buffers_are_taken(
        capsys: pytest.CaptureFixture[str], backend: str, after_fraction: bool) -> None:
    """No max_tokens_in_buffer: TRTLLM_KVCACHE_TRANSFER_BUFFER_SIZE's default, 512 MiB, a
    buffer; the PyTorch backend loses them inside its profile (× the fraction), the engine
    backend after the fraction (its extraCostMemory), whole."""
    argv = (MODEL_ID, "--backend", backend, "--max-model-len", str(MAX_LEN))
    plain = _fit(capsys, *argv)
    given = _fit(capsys, *argv, "--cache-transceiver-config", '{"backend": "UCX"}')
    assert given["taken_bytes_per_gpu"]["kv_transfer_buffer"] == 2 * 512 * MIB
    lost = plain["pool_bytes_per_gpu"] - given["pool_bytes_per_gpu"]
    assert lost == pytest.approx(2 * 512 * MIB * (1.0 if after_fraction else 0.9))


@pytest.mark.parametrize("value, named", [
    ('{"backend": "TCP", "max_tokens_in_buffer": 2048}', "backend must be one of"),
    ('{"backend": "NIXL", "max_tokens_in_buffer": 2000}', "not a multiple of tokens_per_block"),
    ('{"backend": "NIXL", "transceiver_runtime": "PYTHON"}', "transceiver_runtime"),
    ('{"backend": "NIXL", "kv_cache_bounce_size_mb": 64}', "kv_cache_bounce_size_mb"),
    ("backend: NIXL", "takes a JSON object"),
])
def test_a_transceiver_ridgeline_cannot_price_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str], value: str, named: str) -> None:
    code, out, err = run_cli(capsys, "fit", MODEL_ID, "--gpu", "h100", "--engine", "trtllm",
                             "--cache-transceiver-config", value)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert named in err


def test_a_bad_backend_in_the_yaml_exits_2(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    path = tmp_path / "ctx.yaml"
    path.write_text(yaml_text({"cache_transceiver_config": {"backend": "TCP"}}))
    code, out, err = run_cli(capsys, "fit", MODEL_ID, "--gpu", "h100", "--engine", "trtllm",
                             "--extra_llm_api_options", str(path))
    assert code == 2 and not out and "cache_transceiver_config.backend" in err


def test_another_engine_has_no_transceiver(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "fit", MODEL_ID, "--gpu", "h100", "--engine", "vllm",
                             "--cache-transceiver-config", '{"backend": "UCX"}')
    assert code == 2 and not out and "TensorRT-LLM's" in err
