"""Mamba-2 hybrids under the names Granite-4.0-H and Falcon-H1 give their fields
(mamba_n_heads, mamba_d_head, mamba_n_groups, mamba_d_state, mamba_d_conv), Granite's shared
expert (shared_intermediate_size), and Falcon-H1's parallel layers, attention beside Mamba-2
in every one. Small hand-written configs; every expected figure is worked beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ridgeline import Deployment, resolve_accelerator
from ridgeline.config_reader import spec_from_hf_config
from ridgeline.errors import InputError
from ridgeline.kvcache import kv_footprint, state_elements
from ridgeline.kvgroups import vllm_kv_groups
from ridgeline.layouts import FULL, MAMBA
from ridgeline.model import ModelSpec
from ridgeline.offload import HostOffload
from ridgeline.params import count_params
from ridgeline.stages import pipeline_stages, stage_layers
from tests.conftest import run_cli

H, VOCAB = 64, 100
FALCON_H1 = {"model_type": "falcon_h1", "architectures": ["FalconH1ForCausalLM"],
             "hidden_size": H, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
             "vocab_size": VOCAB, "attn_layer_indices": None, "mamba_d_ssm": 64,
             "mamba_n_heads": 4, "mamba_d_head": 16, "mamba_d_state": 8, "mamba_n_groups": 1,
             "mamba_d_conv": 4, "mamba_conv_bias": True, "mamba_proj_bias": False}
# Granite-4.0-H's shape: Mamba-2 and attention layers, every one with 4 routed experts and a
# shared expert of its own width
GRANITE_H = {"model_type": "granitemoehybrid", "architectures": ["GraniteMoeHybridForCausalLM"],
             "hidden_size": H, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 16, "shared_intermediate_size": 32,
             "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": VOCAB,
             "layer_types": ["mamba", "attention"], "mamba_n_heads": 8, "mamba_d_head": 16,
             "mamba_n_groups": 2, "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_expand": 2,
             "tie_word_embeddings": True}


def spec_of(config: dict[str, Any]) -> ModelSpec:
    return spec_from_hf_config(config, "m")


def mamba2_weights(heads: int, head_dim: int, groups: int, state: int, kernel: int,
                   norm: bool) -> int:
    """One Mamba-2 mixer by hand: in_proj h × (2 d + 2 g n + heads), out_proj d × h, the conv
    over d + 2 g n channels (kernel weights and a bias), dt_bias, A_log and D a head, and the
    gated RMSNorm over d where there is one."""
    d, conv = heads * head_dim, heads * head_dim + 2 * groups * state
    return (H * (2 * d + 2 * groups * state + heads) + d * H + conv * kernel + conv
            + 3 * heads + (d if norm else 0))


def test_falcon_h1_counts_a_mamba2_mixer_beside_attention_in_every_layer() -> None:
    spec = spec_of(FALCON_H1)
    assert spec.parallel_hybrid and spec.decoder_layers == 2 and spec.num_layers == 4
    assert [layer.mixer for layer in spec.layers] == [FULL, MAMBA, FULL, MAMBA]
    m = spec.mamba
    assert m is not None and (m.version, m.num_heads, m.head_dim, m.d_state) == (2, 4, 16, 8)
    attention = H * 64 + 2 * H * 2 * 16 + 64 * H  # q, k and v of 2 KV heads, o
    mlp = 3 * H * 128
    norms = 2 * H  # input_layernorm (both branches read it) and pre_ff_layernorm
    # FalconH1Config's mamba_rms_norm is False: no gated norm
    per_layer = attention + mlp + norms + mamba2_weights(4, 16, 1, 8, 4, norm=False)
    embed_head_final_norm = 2 * VOCAB * H + H
    assert count_params(spec).total == 2 * per_layer + embed_head_final_norm
    with_norm = spec_of({**FALCON_H1, "mamba_rms_norm": True})
    assert count_params(with_norm).total - count_params(spec).total == 2 * 64


def test_falcon_h1_keeps_attention_kv_and_a_mamba2_state_per_layer() -> None:
    spec = spec_of(FALCON_H1)
    conv, ssm = state_elements(spec, spec.layers[1])
    assert (conv, ssm) == ((64 + 2 * 8) * (4 - 1), 4 * 16 * 8)
    kv = kv_footprint(spec, 1000, 2)
    assert kv.bytes_per_token_growing == 2 * 2 * 2 * 16 * 2  # layers × K,V × KV heads × dim × B
    assert kv.state_bytes == 2 * (conv + ssm) * 2  # 2 layers' states at bf16


def test_vllm_groups_falcon_h1s_attention_and_mamba_layers_apart() -> None:
    """vLLM's FalconH1ParallelHybrid registers an attention layer and a MambaMixer2 each: as
    many of one as of the other, so one full-attention group and one state group."""
    dep = Deployment.build(spec_of(FALCON_H1), resolve_accelerator("h100"))
    groups = vllm_kv_groups(dep, 16)
    assert groups is not None
    assert (groups.full, groups.states, groups.layers_per_group) == (1, 1, 2)


def test_a_pipeline_splits_falcon_h1s_decoder_layers_not_its_blocks() -> None:
    """vLLM's make_layers splits the config's 5 layers over 2 stages as (3, 2): 6 and 4
    blocks, where splitting the 10 blocks would cut a layer's attention from its Mamba-2."""
    spec = spec_of({**FALCON_H1, "num_hidden_layers": 5})
    dep = Deployment.build(spec, resolve_accelerator("h100"), num_gpus=2,
                           pipeline_parallel_size=2)
    stages = pipeline_stages(dep)
    assert [s.layers for s in stages] == [2 * n for n in stage_layers(5, 2)] == [6, 4]
    assert stages[0].describe() == "stage 1 of 2 (3 layers and the embedding)"


def test_a_partial_llamacpp_offload_of_a_parallel_hybrid_is_refused() -> None:
    spec = spec_of(FALCON_H1)
    dep = Deployment.build(spec, resolve_accelerator("h100"), engine="llama.cpp",
                           flash_attention=False)  # head_dim 16: no flash-attention kernel
    every = spec.num_layers + 1  # every block and the output layer
    assert dep.offloaded(HostOffload(gpu_layers=every)).offload is not None
    with pytest.raises(InputError, match=r"places m's 2 layers .* lists as 4 blocks"):
        dep.offloaded(HostOffload(gpu_layers=2))


def test_falcon_h1_naming_attention_in_some_layers_only_is_refused() -> None:
    with pytest.raises(InputError, match=r"attn_layer_indices \[1\] is not read"):
        spec_of({**FALCON_H1, "attn_layer_indices": [1]})


def test_falcon_h1s_model_line_names_its_layers_and_blocks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(FALCON_H1))
    code, out, _ = run_cli(capsys, "model", str(path))
    assert code == 0
    assert "2 layers of attention beside Mamba-2 (4 blocks)" in out
    assert "Mamba-2: d_inner 64, d_state 8" in out


def test_granite_h_reads_mamba2_heads_and_its_shared_expert() -> None:
    spec = spec_of(GRANITE_H)
    m, moe = spec.mamba, spec.moe
    assert m is not None and moe is not None
    assert (m.version, m.num_heads, m.head_dim, m.n_groups, m.d_state) == (2, 8, 16, 2, 8)
    assert (moe.num_shared_experts, moe.shared_intermediate_size, moe.shared_gate) == (1, 32, False)
    experts = 4 * 3 * H * 16  # 4 routed experts, gated, of 16
    shared = 3 * H * 32  # the shared_mlp: input_linear h → 2 × 32, output_linear
    router = 4 * H
    attention = H * 64 + 2 * H * 2 * 16 + 64 * H  # 4 heads over 2 KV heads of 16
    layers = (2 * (experts + shared + router + 2 * H)  # every layer's FFN and two norms
              + attention + mamba2_weights(8, 16, 2, 8, 4, norm=True))
    assert count_params(spec).total == layers + VOCAB * H + H  # tied, final norm
    # one token: 2 of the 4 routed experts, all of the shared one
    assert count_params(spec).active == count_params(spec).total - 2 * 2 * 3 * H * 16


def test_granite_h_without_experts_runs_its_shared_mlp_as_the_dense_mlp() -> None:
    """Granite-4.0-H-Micro's shape: num_local_experts 0, so vLLM builds no block_sparse_moe
    and the shared_mlp is the layer's one MLP."""
    spec = spec_of({**GRANITE_H, "num_local_experts": 0})
    assert spec.moe is None and spec.dense_mlp is not None
    assert spec.dense_mlp.intermediate_size == 32 and spec.dense_mlp.gated


def test_nemotron_h_and_granite_spellings_read_the_same_mamba2() -> None:
    nemotron = {**{k: v for k, v in GRANITE_H.items() if not k.startswith("mamba_")},
                "mamba_num_heads": 8, "mamba_head_dim": 16, "n_groups": 2,
                "ssm_state_size": 8, "conv_kernel": 4}
    assert spec_of(nemotron).mamba == spec_of(GRANITE_H).mamba


def test_a_d_head_of_auto_is_d_ssm_over_the_heads() -> None:
    spec = spec_of({**FALCON_H1, "mamba_d_head": "auto"})
    assert spec.mamba is not None and spec.mamba.head_dim == 64 // 4


def test_mamba_d_ssm_that_the_heads_do_not_tile_is_refused() -> None:
    with pytest.raises(InputError, match=r"mamba_d_ssm \(96\) is not mamba_n_heads × "
                                         r"mamba_d_head \(4 × 16\)"):
        spec_of({**FALCON_H1, "mamba_d_ssm": 96})
