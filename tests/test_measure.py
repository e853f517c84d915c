"""`ridgeline measure` on the CPU with tiny shapes (skipped, saying why, without PyTorch)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from ridgeline.cli import main
from ridgeline.errors import InputError
from ridgeline.model import ModelSpec

torch = pytest.importorskip("torch", reason="PyTorch is an optional extra (ridgeline[measure])")

TINY: dict[str, Any] = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 4096,
}


def build(config: dict[str, Any]) -> Any:
    from ridgeline.torch_model import RandomModel

    return RandomModel.build(ModelSpec.from_hf_config(config, "tiny"))


def test_a_gqa_model_decodes_against_its_cache() -> None:
    model = build(TINY)
    cache = model.kv_cache(batch=3, context=10)
    assert cache[0][0].shape == (3, 2, 11, 16)  # [batch, kv heads, tokens + 1 free, head_dim]
    logits = model.step(torch.zeros(3, 1, dtype=torch.long), cache)
    assert logits.shape == (3, 256)
    prefill = model.step(torch.zeros(1, 12, dtype=torch.long), None)
    assert prefill.shape == (1, 256)


def test_moe_runs_only_the_experts_a_batch_picks() -> None:
    config = {**TINY, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}
    model = build(config)
    assert len(model.layers[0]["experts"]) == 8
    assert model.step(torch.zeros(2, 1, dtype=torch.long), model.kv_cache(2, 5)).shape == (2, 256)


def test_sliding_window_layers_keep_only_their_window() -> None:
    config = {**TINY, "model_type": "mistral", "sliding_window": 8}
    model = build(config)
    assert model.kv_cache(1, 100)[0][0].shape[2] == 8  # window − 1 cached + the new token


def test_mla_and_ssm_models_are_refused_clearly() -> None:
    from ridgeline.catalog import resolve_model
    from ridgeline.torch_model import check_buildable

    for name in ("deepseek-v3", "jamba-1.5-mini"):
        with pytest.raises(InputError, match="not built"):
            check_buildable(resolve_model(name))


def test_probes_measure_something_real() -> None:
    from ridgeline.measure import bandwidth_probes, matmul_probes

    dev = torch.device("cpu")
    bw = bandwidth_probes(torch, dev, 8 * 2**20)
    assert all(p.value > 1e8 for p in bw)  # more than 0.1 GB/s
    mm = matmul_probes(torch, dev, ["float32"], 128, (1, 4))
    assert len(mm) == 3 and all(p.value > 1e6 for p in mm)


def test_the_fp8_probe_runs_scaled_matmuls_or_says_why_not() -> None:
    from ridgeline.measure import fp8_matmul_probes

    probes = fp8_matmul_probes(torch, torch.device("cpu"), 64, (16,))
    if probes[0].value == 0:  # a torch without fp8 kernels on this device
        assert "unsupported" in probes[0].detail
    else:
        assert [p.name for p in probes] == ["float8_e4m3fn matmul 64³", "float8_e4m3fn matmul M=16"]
        assert all(p.value > 0 for p in probes)


def test_the_grid_skips_what_the_device_cannot_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A cache larger than the device's free memory is skipped with its size, not allocated."""
    from ridgeline import measure as m
    from ridgeline.model import ModelSpec
    from ridgeline.torch_model import RandomModel

    spec = ModelSpec.from_hf_config(TINY, "tiny")
    one = RandomModel.cache_bytes(spec, 1, 128, 4)
    assert one == 2 * 2 * 16 * (128 + 1) * 2 * 4  # K and V, 2 heads × 16 dims, 2 layers, fp32
    # room for batch 1 at 128 tokens only
    monkeypatch.setattr(m, "device_memory_bytes", lambda torch, device: 2.0 * one)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    result = m.measure("cpu", True, str(config))
    decode = [r for r in result.rows if r["metric"] != "prefill_tok_s"]
    assert [(r["batch"], r["context_len"]) for r in decode] == [("1", "129")]
    assert sum("the cache needs" in s for s in result.skipped) == 3


def test_measure_writes_rows_that_validate(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    rows = tmp_path / "rows.csv"
    assert main(["measure", "--device", "cpu", "--quick", "--model", str(config), "-o",
                 str(rows)]) == 0
    table = list(csv.DictReader(rows.open()))
    assert {r["metric"] for r in table} == {"decode_tok_s_per_user", "output_throughput_tok_s",
                                            "prefill_tok_s"}
    assert all(r["engine"] == "torch-eager" and float(r["value"]) > 0 for r in table)
    capsys.readouterr()
    record = str(rows).replace(".csv", ".accelerator.json")
    assert main(["validate", str(rows), "--gpu-file", record, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert all(r["predicted"] for r in data["rows"])
