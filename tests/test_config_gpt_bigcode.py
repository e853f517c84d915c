"""StarCoder's GPTBigCode read as vLLM's gpt_bigcode.py builds it: one K/V head where
multi_query (its config class's default), a two-matrix GELU MLP with biases, biased c_attn and
c_proj, LayerNorms, a learned position table (wpe) and a head tied to the embedding. Before,
the reader took 48 KV heads and a gated MLP: 960 KiB a token and 24.76 B parameters."""

from __future__ import annotations

from typing import Any

import pytest

from ridgeline.config_reader import spec_from_hf_config
from ridgeline.kvcache import kv_footprint
from ridgeline.params import count_params, mlp_params
from ridgeline.precision import kv_dtype


def starcoder(**changes: Any) -> dict[str, Any]:
    """StarCoderBase-15B's sizing fields (bigcode/starcoder config.json), with ``changes``."""
    config: dict[str, Any] = {
        "architectures": ["GPTBigCodeForCausalLM"], "model_type": "gpt_bigcode",
        "n_embd": 6144, "n_head": 48, "n_layer": 40, "n_inner": 24576, "n_positions": 8192,
        "vocab_size": 49152, "multi_query": True, "activation_function": "gelu_pytorch_tanh",
        "layer_norm_epsilon": 1e-05, "torch_dtype": "float32"}
    config.update(changes)
    return config


def test_multi_query_caches_one_kv_head_20_kib_a_token() -> None:
    spec = spec_from_hf_config(starcoder(), "starcoder")
    assert spec.attention is not None and spec.attention.num_kv_heads == 1
    per_token = kv_footprint(spec, 1, kv_dtype("bf16").bytes_per_element).bytes_per_token_growing
    assert per_token == spec.num_layers * 1 * spec.attention.head_dim * 2 * 2  # K and V, 2 B
    assert per_token == 20 * 1024


def test_multi_query_is_the_config_class_default() -> None:
    """GPTBigCodeConfig's multi_query defaults to True: a config without it is one KV head."""
    config = starcoder()
    del config["multi_query"]
    spec = spec_from_hf_config(config, "starcoder")
    assert spec.attention is not None and spec.attention.num_kv_heads == 1


def test_multi_query_false_keeps_a_kv_head_per_query_head() -> None:
    spec = spec_from_hf_config(starcoder(multi_query=False), "starcoder")
    assert spec.attention is not None and spec.attention.num_kv_heads == 48


@pytest.mark.parametrize(("shape", "published"), [
    ({}, 15_517_456_384),  # StarCoderBase-15B
    ({"n_embd": 2048, "n_head": 16, "n_layer": 24, "n_inner": 8192}, 1_137_207_296),  # 1B
])
def test_parameters_match_the_published_counts(shape: dict[str, int], published: int) -> None:
    """The counts a MultiPL-T training-cost script records for StarCoderBase (code index id
    69542685706): ungated MLP, biases, LayerNorms, wpe, tied head."""
    assert count_params(spec_from_hf_config(starcoder(**shape), "starcoder")).total == published


def test_mlp_is_two_matrices_with_biases_and_the_head_is_tied() -> None:
    spec = spec_from_hf_config(starcoder(), "starcoder")
    assert spec.dense_mlp is not None
    assert not spec.dense_mlp.gated and spec.dense_mlp.bias
    assert spec.layer_norm and spec.tie_word_embeddings
    params = count_params(spec).by_category
    assert params["mlp"] == spec.num_layers * mlp_params(6144, 24576, gated=False)
    assert params["lm_head"] == 0
    assert params["embedding"] == (49152 + 8192) * 6144  # wte and wpe


def test_n_inner_null_is_four_times_the_width() -> None:
    spec = spec_from_hf_config(starcoder(n_inner=None), "starcoder")
    assert spec.dense_mlp is not None and spec.dense_mlp.intermediate_size == 4 * 6144


def test_gpt_bigcode_carries_no_unchecked_caution() -> None:
    assert spec_from_hf_config(starcoder(), "starcoder").architecture_caution == ""
