"""Cohere2 (Command R7B) and EXAONE 4 configs read as transformers reads them: a pattern or
window left out takes the config class's default (model_type_defaults.json), and Command
R7B's parallel block, bias-less LayerNorm and tied embeddings count to its card's 8.03B.
Hand-written configs; every expected figure is worked beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ridgeline.config_reader import spec_from_hf_config
from ridgeline.errors import InputError
from ridgeline.kvcache import attention_kv_bytes_per_token, kv_footprint
from ridgeline.model import ModelSpec
from ridgeline.params import count_params
from ridgeline.units import GIB
from tests.conftest import run_cli

# CohereForAI/c4ai-command-r7b-12-2024's shape (not bundled: shared/model-configs has no
# Cohere config): Embedding(256000, 4096), 32 layers, q 4096 -> 4096, k and v 4096 -> 1024,
# MLP 4096 -> 14336 gated, window 4096 (the printed module tree of its 4-bit copy, transformers'
# cohere2.md). No sliding_window_pattern and no layer_types: the configs this file is about.
R7B: dict[str, Any] = {
    "model_type": "cohere2", "architectures": ["Cohere2ForCausalLM"], "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 256000, "max_position_embeddings": 131072,
    "sliding_window": 4096, "logit_scale": 0.25, "torch_dtype": "bfloat16"}
CONTEXT = 131072
KV_BYTES = 2  # bf16


def spec_of(config: dict[str, Any]) -> ModelSpec:
    return spec_from_hf_config(config, "m")


def global_layers(spec: ModelSpec) -> list[int]:
    return [i for i, layer in enumerate(spec.layers) if layer.mixer == "full"]


def test_a_cohere2_config_without_a_pattern_takes_transformers_default_of_4() -> None:
    """Cohere2Config without layer_types lays layers out by sliding_window_pattern, 4 where
    the key is absent: layer i global where (i + 1) % 4 == 0. It was refused."""
    spec = spec_of(R7B)
    assert global_layers(spec) == [i for i in range(32) if (i + 1) % 4 == 0]
    assert global_layers(spec) == [3, 7, 11, 15, 19, 23, 27, 31]
    assert spec.layers == spec_of({**R7B, "sliding_window_pattern": 4}).layers
    assert {layer.window_tokens for layer in spec.layers if layer.mixer == "sliding"} == {4096}


def test_a_cohere2_config_without_a_window_size_takes_4096() -> None:
    """Cohere2Config's sliding_window defaults to 4096: a config without one was refused
    (no sliding_window for its windowed layers)."""
    spec = spec_of({k: v for k, v in R7B.items() if k != "sliding_window"})
    assert spec.layers == spec_of(R7B).layers


def test_the_private_pattern_does_not_override_cohere2s_default() -> None:
    """transformers never builds Cohere2's layout from _sliding_window_pattern (it reads the
    public key or 4), so neither does ridgeline; layer_types, where given, still rules."""
    private = spec_of({**R7B, "_sliding_window_pattern": 2})
    assert global_layers(private) == global_layers(spec_of(R7B))
    stated = spec_of({**R7B, "_sliding_window_pattern": 2,
                      "layer_types": ["sliding_attention", "full_attention"] * 16})
    assert global_layers(stated) == list(range(1, 32, 2))


def test_exaone4_without_a_pattern_takes_4_and_gives_the_last_layer_no_special_case() -> None:
    """Exaone4Config: sliding_window_pattern 4 by default, layer i global where (i + 1) % 4
    == 0. Ten layers: 3 and 7 global, layer 9 windowed; the letter form "LLLG" (TensorRT-LLM's
    reading) makes the last layer global too."""
    exaone = {**R7B, "model_type": "exaone4", "architectures": ["Exaone4ForCausalLM"],
              "num_hidden_layers": 10}
    assert global_layers(spec_of(exaone)) == [3, 7]
    letters = spec_of({**exaone, "sliding_window_pattern": "LLLG"})
    assert global_layers(letters) == [3, 7, 9]


def test_a_family_without_a_default_pattern_is_refused_when_it_leaves_it_out() -> None:
    """A flat gemma3 config (its text fields outside text_config) has no default here:
    refused by name, not read as every layer windowed."""
    with pytest.raises(InputError, match="leaves it out and gives no layer_types"):
        spec_of({**R7B, "model_type": "gemma3"})


def test_command_r7b_kv_at_128k_with_and_without_windows() -> None:
    """Each layer: 2 (K, V) × 8 heads × 128 × 2 B = 4 KiB a token. At 131,072 tokens the 8
    global layers keep every token, 8 × 4 KiB × 131,072 = 4 GiB, and the 24 windowed keep
    4,096, 24 × 4 KiB × 4,096 = 384 MiB: 4.375 GiB a conversation. With the window set to
    null every layer keeps every token: 32 × 4 KiB × 131,072 = 16 GiB. The global layers
    rotate nothing (Cohere2Attention applies RoPE only on windowed layers), which changes no
    cached byte: each still keeps K and V for every token."""
    spec = spec_of(R7B)
    per_layer = attention_kv_bytes_per_token(spec, KV_BYTES)
    assert per_layer == 2 * 8 * 128 * KV_BYTES
    windowed = kv_footprint(spec, CONTEXT, KV_BYTES)
    expected = 8 * per_layer * CONTEXT + 24 * per_layer * 4096
    assert windowed.bytes_per_sequence == expected
    assert expected / GIB == 4.375
    unwindowed = kv_footprint(spec_of({**R7B, "sliding_window": None}), CONTEXT, KV_BYTES)
    assert unwindowed.bytes_per_sequence == 32 * per_layer * CONTEXT
    assert unwindowed.bytes_per_sequence / GIB == 16
    assert windowed.bytes_per_token_naive * CONTEXT == unwindowed.bytes_per_sequence


def test_a_patternless_cohere2_config_reads_through_the_cli(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(R7B))
    code, out, err = run_cli(capsys, "kv", str(path), "--context", str(CONTEXT),
                             "--memory-gib", "100", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["bytes_per_sequence"] == kv_footprint(spec_of(R7B), CONTEXT,
                                                        KV_BYTES).bytes_per_sequence


def test_command_r7b_counts_its_cards_8_03_billion() -> None:
    """Command R7B: tied embedding 256,000 × 4,096 = 1,048,576,000; a layer's attention
    4,096 × (4,096 + 2 × 1,024) + 4,096 × 4,096 = 41,943,040, gated MLP 3 × 4,096 × 14,336 =
    176,160,768 and one input norm of 4,096 (attention and MLP read it in parallel; Cohere's
    LayerNorm has no bias); a final norm of 4,096: 8,028,033,024, the card's 8.03B (and the
    safetensors count of CohereForAI/aya-expanse-8b, the same shapes). logit_scale multiplies
    the logits by a constant, no weight. It was 9,076,740,096: an untied head and two norms a
    layer."""
    spec = spec_of(R7B)
    h, vocab, layers = 4096, 256000, 32
    attention = h * (h + 2 * 1024) + h * h
    mlp = 3 * h * 14336
    expected = vocab * h + layers * (attention + mlp + h) + h
    assert count_params(spec).total == expected == 8_028_033_024
    assert abs(count_params(spec).total - 8.03e9) <= 0.005e9  # the card's last digit
    assert spec.tie_word_embeddings and spec.parallel_block and spec.norms_per_layer == 1
    assert not spec.layer_norm  # a weight only, as RMSNorm
    assert spec.architecture_caution == ""
    untied = spec_of({**R7B, "tie_word_embeddings": False})
    assert count_params(untied).total - count_params(spec).total == vocab * h


def test_exaone4_counts_its_query_and_key_norms() -> None:
    """Exaone4Attention has an RMSNorm of head_dim on queries and keys: 2 × 128 weights a
    layer beyond a Llama-shaped count of the same fields."""
    exaone = {**R7B, "model_type": "exaone4", "architectures": ["Exaone4ForCausalLM"],
              "tie_word_embeddings": False}
    llama = {**exaone, "model_type": "llama", "architectures": ["LlamaForCausalLM"],
             "sliding_window": None}
    difference = count_params(spec_of(exaone)).total - count_params(spec_of(llama)).total
    assert difference == 32 * 2 * 128


def test_a_cohere2_config_that_states_head_dim_is_read_at_it_as_transformers_reads_it() -> None:
    """Cohere2Config sets head_dim to hidden_size ÷ num_attention_heads, and then the base
    config sets each key config.json gives beyond the class's own, head_dim among them (4.x:
    PretrainedConfig.__init__'s kwargs after the subclass's assignment; 5.x: __post_init__'s);
    Cohere2Attention reads config.head_dim. A stated head_dim rules: 256 beside Command R7B's
    4,096 ÷ 32 = 128 widens q, k, v and o by 128 a head, 2 × 4,096 × 128 × (32 + 8) weights a
    layer, and doubles the KV a token; a stated 128 changes nothing."""
    plain, stated = spec_of(R7B), spec_of({**R7B, "head_dim": 256})
    assert plain.attention is not None and stated.attention is not None
    assert plain.attention.head_dim == R7B["hidden_size"] // R7B["num_attention_heads"] == 128
    assert stated.attention.head_dim == stated.attention.v_head_dim == 256
    wider = count_params(stated).total - count_params(plain).total
    assert wider == 32 * 2 * 4096 * (256 - 128) * (32 + 8)
    assert attention_kv_bytes_per_token(stated, KV_BYTES) == \
        2 * attention_kv_bytes_per_token(plain, KV_BYTES)
    assert spec_of({**R7B, "head_dim": 128}) == plain
