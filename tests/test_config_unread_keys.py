"""What a config gives that the reader leaves alone is named, not hidden: the caution for a
model_type ridgeline has not checked lists the sizing-looking keys no reader looked up
(Falcon-H1's mamba_d_ssm, Granite-4.0-H's shared_intermediate_size, Llama-3.2-Vision's
cross_attention_layers), not bookkeeping (architectures, *_token_id, torch_dtype); and a MoE
config whose experts ridgeline cannot read is refused naming the keys (ERNIE-4.5-VL's
moe_num_experts, Hunyuan's per-layer lists), one line, exit 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ridgeline.config_fields import sizing_looking
from ridgeline.config_reader import spec_from_hf_config
from tests.conftest import config_refused as refused


def decoder(model_type: str, **extra: Any) -> dict[str, Any]:
    """A small Llama-shaped decoder under ``model_type``, with ``extra`` keys."""
    return {"architectures": ["XForCausalLM"], "model_type": model_type, "hidden_size": 1024,
            "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8,
            "intermediate_size": 4096, "vocab_size": 32000, "torch_dtype": "bfloat16",
            "bos_token_id": 1, "eos_token_id": 2, "transformers_version": "4.57.0",
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
            "use_cache": True, **extra}


def test_the_caution_names_the_sizing_keys_left_unread() -> None:
    spec = spec_from_hf_config(decoder("frobnic", mamba_d_ssm=3072, mamba_n_heads=24,
                                       cross_attention_layers=[1, 3]), "m")
    assert spec.unread_keys == ("mamba_d_ssm", "mamba_n_heads", "cross_attention_layers")
    caution = spec.architecture_caution
    assert "mamba_d_ssm, mamba_n_heads and cross_attention_layers" in caution
    for bookkeeping in ("bos_token_id", "transformers_version", "torch_dtype", "use_cache",
                        "rms_norm_eps", "rope_theta", "hidden_act", "architectures"):
        assert bookkeeping not in caution


def test_a_config_with_nothing_unread_keeps_the_general_caution() -> None:
    spec = spec_from_hf_config(decoder("frobnic"), "m")
    assert spec.unread_keys == ()
    assert "a part those fields do not describe" in spec.architecture_caution


def test_a_long_list_is_cut_with_a_count() -> None:
    extra = {f"frob_layers_{i}": i + 1 for i in range(9)}
    caution = spec_from_hf_config(decoder("frobnic", **extra), "m").architecture_caution
    assert "frob_layers_5 and 3 more" in caution and "frob_layers_6" not in caution


def test_a_checked_model_type_carries_no_caution_for_unread_keys() -> None:
    config = decoder("llama", architectures=["LlamaForCausalLM"], frob_size=3)
    spec = spec_from_hf_config(config, "m")
    assert spec.unread_keys == ("frob_size",) and spec.architecture_caution == ""


@pytest.mark.parametrize(("key", "value", "looks"), [
    ("multi_query", True, True), ("mamba_d_state", 256, True), ("moe_topk", [8, 8], True),
    ("multi_query", False, False), ("pad_token_id", 0, False), ("image_token_index", 5, False),
    ("layer_norm_epsilon", 1e-5, False), ("activation_function", "gelu", False),
    ("no_rope_layers", [1, 0], False), ("_name_or_path", "x", False)])
def test_sizing_looking(key: str, value: Any, looks: bool) -> None:
    assert sizing_looking(key, value) is looks




def test_an_expert_count_under_an_unread_key_is_named(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """ERNIE-4.5-VL's moe_num_experts, one a modality (ernie4_5_moe's own is read:
    test_config_ernie_moe.py)."""
    config = decoder("ernie4_5_moe_vl", moe_num_experts=[64, 64], moe_k=6,
                     moe_layer_start_index=[1, 1])
    err = refused(capsys, tmp_path, config)
    assert "counts them in moe_num_experts, which ridgeline does not read" in err
    assert "moe_k, moe_layer_start_index" in err


def test_per_layer_moe_lists_are_refused_as_such(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    """Lists whose entries differ (one entry alike in every layer reads as that entry:
    test_config_hunyuan_moe.py)."""
    config = decoder("hunyuan_v1_moe", num_experts=64, moe_topk=[8, 8, 8, 4],
                     moe_intermediate_size=[3072, 3072, 1536, 3072],
                     num_shared_expert=[1, 1, 1, 0])
    err = refused(capsys, tmp_path, config)
    assert "moe_topk, moe_intermediate_size and num_shared_expert are lists" in err
    assert "per-layer MoE lists are not read" in err
