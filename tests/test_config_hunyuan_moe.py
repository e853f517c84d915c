"""Tencent Hunyuan's MoE configs (model_type hunyuan_v1_moe) read as vLLM's hunyuan_v1.py reads
them: a per-layer list whose entries are all one number (Hunyuan-A13B's moe_topk [8] × 32) is
that number, lists that differ are refused; shared experts under num_shared_expert, of the dense
intermediate_size, only where use_mixed_mlp_moe; a num_experts of 1 is a dense model; cross-layer
attention (use_cla) is refused. Hunyuan-A13B counts to its card's 80B total, 13B active."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ridgeline.config_reader import spec_from_hf_config
from ridgeline.layouts import DENSE, MOE
from ridgeline.params import count_params
from tests.conftest import config_refused as refused

LAYERS = 32
# tencent/Hunyuan-A13B-Instruct's config.json as an MLX Swift test fixture quotes it (code index
# id 55421597645; model_type there "hunyuan", the checkpoint's own "hunyuan_v1_moe")
A13B: dict[str, Any] = {
    "architectures": ["HunYuanMoEV1ForCausalLM"], "model_type": "hunyuan_v1_moe",
    "attention_bias": False, "attention_head_dim": 128, "hidden_size": 4096,
    "intermediate_size": 3072, "moe_intermediate_size": [3072] * LAYERS,
    "moe_topk": [8] * LAYERS, "num_attention_heads": 32, "num_experts": 64,
    "num_hidden_layers": LAYERS, "num_key_value_heads": 8, "num_shared_expert": [1] * LAYERS,
    "rms_norm_eps": 1e-05, "rope_scaling": {"alpha": 1000.0, "factor": 1.0, "type": "dynamic"},
    "rope_theta": 10000.0, "tie_word_embeddings": True, "use_cla": False,
    "use_mixed_mlp_moe": True, "use_qk_norm": True, "vocab_size": 128167,
    "torch_dtype": "bfloat16"}


def test_lists_alike_in_every_layer_read_as_their_entry() -> None:
    spec = spec_from_hf_config(A13B, "m")
    assert spec.moe is not None and spec.attention is not None
    assert spec.moe.experts_per_token == A13B["moe_topk"][0]
    assert spec.moe.expert_intermediate_size == A13B["moe_intermediate_size"][0]
    assert spec.moe.num_shared_experts == A13B["num_shared_expert"][0]
    assert spec.moe.shared_intermediate_size == A13B["intermediate_size"]
    assert [layer.ffn for layer in spec.layers] == [MOE] * LAYERS
    assert spec.attention.qk_norm and spec.attention.head_dim == A13B["attention_head_dim"]


def test_hunyuan_a13b_counts_its_cards_80b_and_13b_active() -> None:
    """Tied embedding 128,167 × 4,096; a layer's attention 4,096 × (4,096 + 2 × 1,024) +
    4,096 × 4,096, its two QK norms of 128 and two layer norms of 4,096; 65 MLPs (64 routed, 1
    shared) of 3 × 4,096 × 3,072 and a router of 64 × 4,096; a final norm: 80,393,183,232,
    the card's 80B total; 8 + 1 MLPs a token: 12.2B active without the embedding, its 13B."""
    spec = spec_from_hf_config(A13B, "m")
    h, vocab, mlp = 4096, 128167, 3 * 4096 * 3072
    layer = h * (h + 2 * 1024) + h * h + 2 * 128 + 2 * h + 65 * mlp + 64 * h
    counts = count_params(spec)
    assert counts.total == vocab * h + LAYERS * layer + h
    assert abs(counts.total - 80e9) / 80e9 < 0.01
    assert 12e9 < counts.active - vocab * h < 13.5e9


def test_shared_experts_need_use_mixed_mlp_moe() -> None:
    spec = spec_from_hf_config({**A13B, "use_mixed_mlp_moe": False}, "m")
    assert spec.moe is not None and spec.moe.num_shared_experts == 0


def test_one_expert_is_a_dense_model() -> None:
    """Hunyuan-7B: num_experts 1, moe_topk [1] × 32: vLLM builds a dense MLP (_is_moe)."""
    config = {**A13B, "model_type": "hunyuan_v1_dense", "num_experts": 1,
              "moe_topk": [1] * LAYERS, "use_mixed_mlp_moe": False, "intermediate_size": 14336}
    config.pop("moe_intermediate_size")
    spec = spec_from_hf_config(config, "m")
    assert spec.moe is None and [layer.ffn for layer in spec.layers] == [DENSE] * LAYERS
    assert spec.dense_mlp is not None and spec.dense_mlp.intermediate_size == 14336


@pytest.mark.parametrize(("extra", "named"), [
    ({"moe_topk": [8] * (LAYERS - 1)}, "per-layer MoE lists are not read"),  # not one a layer
    ({"moe_topk": [8] * 31 + [4]}, "per-layer MoE lists are not read"),
    ({"use_cla": True, "cla_share_factor": 2}, "use_cla shares each layer's K and V"),
])
def test_layouts_not_read_are_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                      extra: dict[str, Any], named: str) -> None:
    assert named in refused(capsys, tmp_path, {**A13B, **extra})
