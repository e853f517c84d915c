"""A sliding_window at or past the model's context never fills (Phi-4-mini's 262,144 over its
131,072 positions; Phi-3.5-mini's and Phi-3-128k's the same): its layers are read as full
attention, the KV a token adds is every layer's, and one note says so. vLLM still registers
them under the window (cache_config.sliding_window), a window group whose request holds every
token and a block more, so its pool is sized as before. Before, the model read "KV per token
0 B" and "at most 32 GiB per sequence"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.config_reader import spec_from_hf_config
from ridgeline.deployment import Deployment
from ridgeline.hardware import resolve_accelerator
from ridgeline.kvcache import kv_footprint
from ridgeline.kvgroups import vllm_kv_groups
from ridgeline.layouts import FULL, SLIDING
from ridgeline.precision import kv_dtype
from tests.conftest import run_cli


def phi4_mini(**changes: Any) -> dict[str, Any]:
    """Phi-4-mini-instruct's sizing fields (its config.json), with ``changes``."""
    config: dict[str, Any] = {
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 3072,
        "num_hidden_layers": 32, "num_attention_heads": 24, "num_key_value_heads": 8,
        "intermediate_size": 8192, "vocab_size": 200064, "tie_word_embeddings": True,
        "max_position_embeddings": 131072, "sliding_window": 262144,
        "torch_dtype": "bfloat16"}
    config.update(changes)
    return config


def test_a_window_past_the_context_is_full_attention_128_kib_a_token() -> None:
    spec = spec_from_hf_config(phi4_mini(), "phi-4-mini")
    assert {layer.mixer for layer in spec.layers} == {FULL}
    assert spec.unfilled_window_tokens == 262144
    assert spec.unfilled_window_layers == tuple(range(32))
    per_token = kv_footprint(spec, 1, kv_dtype("bf16").bytes_per_element).bytes_per_token_growing
    assert per_token == 32 * 8 * 128 * 2 * 2 == 128 * 1024


def test_a_window_equal_to_the_context_never_fills_either() -> None:
    spec = spec_from_hf_config(phi4_mini(sliding_window=131072), "phi-4-mini")
    assert {layer.mixer for layer in spec.layers} == {FULL}


@pytest.mark.parametrize("changes", [
    {"sliding_window": 4096},  # Mistral-7B-v0.1's 4,096 of 32,768: windows fill
    # a YaRN stretch ×4 takes the context to 524,288, past the window
    {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                      "original_max_position_embeddings": 131072}},
])
def test_a_window_some_context_fills_stays_a_window(changes: dict[str, Any]) -> None:
    spec = spec_from_hf_config(phi4_mini(**changes), "phi-4-mini")
    assert {layer.mixer for layer in spec.layers} == {SLIDING}
    assert spec.unfilled_window_tokens == 0 and spec.unfilled_window_note == ""


def test_vllm_still_pages_the_layers_as_one_window_group() -> None:
    """A SlidingWindowSpec request holds min(W − 1 + budget, max_model_len) tokens and a
    block more: at 32,768 tokens, 32,768 ÷ 16 + 1 = 2,049 blocks of 16."""
    spec = spec_from_hf_config(phi4_mini(), "phi-4-mini")
    dep = Deployment.build(spec, resolve_accelerator("h100"), engine="vllm")
    groups = vllm_kv_groups(dep, block_size=16)
    assert groups is not None
    assert (groups.full, groups.windows) == (0, ((262144, 1),))
    assert groups.blocks_per_request(32768, 8192) == 32768 // 16 + 1


def test_the_model_report_says_so_in_one_note(capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(phi4_mini()), "utf-8")
    code, out, _ = run_cli(capsys, "model", str(path))
    assert code == 0
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    assert len(notes) == 1
    assert "sliding_window 262,144" in notes[0] and "131,072 positions" in notes[0]
    assert "KV per token   128 KiB bf16" in out and "windowed" not in out.split("note:")[0]


def test_bundled_windows_are_unchanged() -> None:
    """Gemma-2's 4,096 of 8,192 and Mistral-7B-v0.1's 4,096 of 32,768 stay windows."""
    for alias in ("gemma-2-9b", "mistral-7b"):
        spec = resolve_model(alias)
        assert spec.count(mixer=SLIDING) and spec.unfilled_window_tokens == 0
