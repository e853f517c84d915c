"""ERNIE-4.5's MoE configs (model_type ernie4_5_moe) read as transformers' Ernie4_5_MoeConfig
and vLLM's ernie45_moe.py read them: experts counted in moe_num_experts, moe_k a token,
moe_num_shared_experts of moe_intermediate_size each, MoE layers from moe_layer_start_index to
moe_layer_end_index, the rest dense of intermediate_size; each key left out takes the config
class's default (model_type_defaults.json). ERNIE-4.5-21B-A3B counts to its checkpoint's
21,825,437,888 parameters. Hand-written configs; every expected figure is worked beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ridgeline.config_reader import spec_from_hf_config
from ridgeline.layouts import DENSE, MOE
from ridgeline.params import count_params
from tests.conftest import config_refused as refused

# baidu/ERNIE-4.5-21B-A3B-PT's shape: the defaults of transformers' Ernie4_5_MoeConfig, whose
# docstring says they yield that model (configuration_ernie4_5_moe.py, code index id
# 3189717316), as Huawei MindIE's ERNIE MoE test config also gives them (moe_layer_end_index 27,
# code index id 20156564511)
A3B: dict[str, Any] = {
    "architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe",
    "hidden_size": 2560, "intermediate_size": 12288, "num_hidden_layers": 28,
    "num_attention_heads": 20, "num_key_value_heads": 4, "vocab_size": 103424,
    "max_position_embeddings": 131072, "hidden_act": "silu", "use_bias": False,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "moe_num_experts": 64,
    "moe_num_shared_experts": 2, "moe_layer_start_index": 1, "moe_layer_end_index": 27,
    "moe_intermediate_size": 1536, "moe_k": 6, "moe_layer_interval": 1}


def small(**extra: Any) -> dict[str, Any]:
    """A 6-layer ERNIE MoE config with ``extra`` keys over it (None drops a key)."""
    config = {**A3B, "hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 6,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
              "moe_num_experts": 8, "moe_k": 2, "moe_num_shared_experts": 1,
              "moe_intermediate_size": 128, "moe_layer_end_index": -1, **extra}
    return {k: v for k, v in config.items() if v is not None}


def ffns(config: dict[str, Any]) -> list[str]:
    return [layer.ffn for layer in spec_from_hf_config(config, "m").layers]


def test_the_experts_are_read_from_ernies_own_keys() -> None:
    spec = spec_from_hf_config(small(), "m")
    moe, config = spec.moe, small()
    assert moe is not None and spec.dense_mlp is not None
    assert moe.num_experts == config["moe_num_experts"]
    assert moe.experts_per_token == config["moe_k"]
    assert moe.num_shared_experts == config["moe_num_shared_experts"]
    assert moe.expert_intermediate_size == config["moe_intermediate_size"]
    assert moe.shared_intermediate_size == config["moe_intermediate_size"]
    assert moe.router_bias and not moe.shared_gate  # gate.e_score_correction_bias, no gate
    assert spec.dense_mlp.intermediate_size == config["intermediate_size"]


@pytest.mark.parametrize(("extra", "dense"), [
    ({}, {0}),  # start 1, end -1: the last layer
    ({"moe_layer_end_index": None}, {0}),  # absent: Ernie4_5_MoeConfig's -1
    ({"moe_layer_start_index": 3, "moe_layer_end_index": 4}, {0, 1, 2, 5}),
    ({"moe_layer_start_index": 0, "moe_layer_end_index": 99}, set()),
])
def test_moe_layers_run_from_the_start_index_to_the_end_index(
        extra: dict[str, Any], dense: set[int]) -> None:
    config = small(**extra)
    kinds = ffns(config)
    assert kinds == [DENSE if i in dense else MOE for i in range(config["num_hidden_layers"])]


def test_keys_left_out_take_transformers_defaults() -> None:
    """Ernie4_5_MoeConfig: moe_k 6, moe_num_shared_experts 2, moe_layer_start_index 1,
    tie_word_embeddings True."""
    config = small(moe_k=None, moe_num_shared_experts=None, moe_layer_start_index=None,
                   moe_layer_interval=None, tie_word_embeddings=None)
    spec = spec_from_hf_config(config, "m")
    assert spec.moe is not None
    assert (spec.moe.experts_per_token, spec.moe.num_shared_experts) == (6, 2)
    assert ffns(config)[:2] == [DENSE, MOE] and spec.tie_word_embeddings


def test_num_experts_is_read_as_moe_num_experts() -> None:
    """Ernie4_5_MoeConfig's attribute_map reads num_experts as moe_num_experts."""
    config = small(moe_num_experts=None, num_experts=16)
    spec = spec_from_hf_config(config, "m")
    assert spec.moe is not None and spec.moe.num_experts == 16
    assert ffns(config)[0] == DENSE


def test_use_bias_puts_biases_on_qkv_and_the_dense_mlp() -> None:
    plain, biased = (spec_from_hf_config(small(use_bias=b), "m") for b in (False, True))
    assert plain.attention is not None and biased.attention is not None
    assert biased.attention.qkv_bias and not biased.attention.o_bias
    assert not plain.attention.qkv_bias
    assert biased.dense_mlp is not None and biased.dense_mlp.bias


def test_ernie_4_5_21b_a3b_counts_its_checkpoints_parameters() -> None:
    """Tied embedding 103,424 × 2,560 = 264,765,440; a layer's attention 2,560 × (2,560 + 2 ×
    512) + 2,560 × 2,560 = 15,728,640 and two norms of 2,560; layer 0's dense MLP 3 × 2,560 ×
    12,288 = 94,371,840; each of 27 MoE layers 66 experts (64 routed, 2 shared) of 3 × 2,560 ×
    1,536 = 11,796,480, a router of 64 × 2,560 and 64 correction biases; a final norm of
    2,560: 21,825,437,888, the safetensors total the Hub lists for
    baidu/ERNIE-4.5-21B-A3B-Thinking (same shapes: BF16 21,821,012,480 + F32 4,425,408; code
    index id 43094890567), the card's 21B total and 3B active."""
    spec = spec_from_hf_config(A3B, "m")
    h, vocab, expert = 2560, 103424, 3 * 2560 * 1536
    layer = h * (h + 2 * 512) + h * h + 2 * h
    moe = 66 * expert + 64 * h + 64
    expected = vocab * h + 28 * layer + 3 * h * 12288 + 27 * moe + h
    counts = count_params(spec)
    assert counts.total == expected == 21_825_437_888
    assert [i for i, layer in enumerate(spec.layers) if layer.ffn == DENSE] == [0]
    active_matmul = counts.active - vocab * h  # the embedding is a lookup
    assert 2.9e9 < active_matmul < 3.2e9
    assert spec.architecture_caution == ""


def test_an_interval_engines_lay_out_differently_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = refused(capsys, tmp_path, small(moe_layer_interval=2))
    assert "moe_layer_interval 2 is not read" in err and "SGLang" in err


def test_a_start_past_the_end_is_refused(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    err = refused(capsys, tmp_path, small(moe_layer_start_index=4, moe_layer_end_index=3))
    assert "no layer routes to experts" in err


@pytest.mark.parametrize("extra", [{"moe_num_experts": 0}, {"moe_num_experts": [8, 8]}])
def test_an_expert_count_that_is_not_a_whole_number_of_experts_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: dict[str, Any]) -> None:
    err = refused(capsys, tmp_path, small(**extra))
    assert "moe_num_experts must be a whole number" in err
