"""A hybrid's recurrent state as vLLM pages it: each rank's share of the conv channels and
heads (a single Mamba-2 group kept whole on every rank), a conv column and a state block more
a draft token under speculative decoding, and Llama 4's attention chunks charged as chunks,
not as sliding windows (vllm/model_executor/layers/mamba/mamba_utils.py
MambaStateShapeCalculator, layers/mamba/abstract.py get_kv_cache_spec, v1/kv_cache_interface.py
MambaSpec and ChunkedLocalAttentionSpec)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.config_reader import spec_from_hf_config
from ridgeline.engine_spec import EngineSpec
from ridgeline.kvcache import extra_state_groups, state_bytes_per_sequence, state_elements
from ridgeline.kvgroups import full_layers_keep_groups, vllm_kv_groups
from ridgeline.layouts import CHUNKED, FULL, LINEAR, MAMBA
from ridgeline.memory import EngineSettings, kv_pool
from tests.conftest import run_cli
from tests.test_mamba2_hybrids import GRANITE_H


def dep(model: str, n: int = 1) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator("h100"), None, None, n)


def test_a_rank_keeps_its_share_of_a_gated_deltanet_state_and_a_column_a_draft() -> None:
    model = resolve_model("qwen3-next-80b-a3b-thinking")
    la = model.linear_attention
    assert la is not None
    layer = next(layer for layer in model.layers if layer.mixer == LINEAR)
    conv, ssm = state_elements(model, layer)
    conv4, ssm4 = state_elements(model, layer, 4, speculative_tokens=2)
    assert conv4 == conv // (la.conv_kernel - 1) // 4 * (la.conv_kernel - 1 + 2)
    assert ssm4 == ssm // 4
    # without drafts the four ranks hold exactly the one sequence's state between them
    assert 4 * state_bytes_per_sequence(model, layer, tensor_parallel_size=4) \
        == state_bytes_per_sequence(model, layer)


def test_a_single_mamba2_group_is_kept_whole_on_every_rank() -> None:
    one_group = spec_from_hf_config({**GRANITE_H, "mamba_n_groups": 1}, "m")
    m = one_group.mamba
    assert m is not None and m.n_groups == 1
    layer = next(layer for layer in one_group.layers if layer.mixer == MAMBA)
    assert extra_state_groups(1, 2) == 1 and extra_state_groups(8, 4) == 0
    conv2, _ = state_elements(one_group, layer, 2)
    # each of the 2 ranks: half the channels, and the whole group's B and C
    assert conv2 == (m.d_inner // 2 + 2 * m.d_state) * (m.conv_kernel - 1)
    assert 2 * conv2 > state_elements(one_group, layer)[0]


def test_mtp_drafts_add_a_state_block_a_draft_in_every_state_group() -> None:
    d = dep("qwen3.5-35b-a3b")
    plain = kv_pool(d, EngineSettings(max_model_len=4000))
    drafting = kv_pool(d, EngineSettings(max_model_len=4000, drafter=EngineSpec(3, "mtp")))
    g, gd = plain.groups, drafting.groups
    assert g is not None and gd is not None and g.states == gd.states == 3
    assert gd.draft_blocks == 3 and gd.state_blocks == g.state_blocks + 3
    own = -(-4000 // gd.block_size)
    assert gd.blocks_per_request(4000, 8192) == gd.full * own + gd.states * gd.state_blocks
    # the same pool's blocks hold about half the requests: 10 blocks a request, then 19
    assert drafting.concurrency(4000) < 0.65 * plain.concurrency(4000)


def test_an_mtp_drafter_given_no_length_drafts_one_a_layer() -> None:
    d = dep("qwen3.5-35b-a3b")
    assert d.model.mtp_layers == 1
    pool = kv_pool(d, EngineSettings(max_model_len=4000, drafter=EngineSpec(0, "mtp")))
    assert pool.groups is not None and pool.groups.draft_blocks == 1


def test_the_draft_columns_grow_the_hybrid_block_on_qwen3_next_at_tp4() -> None:
    """vLLM 0.11.0 (blocks grown in steps of 16, prefix caching off for hybrids): the
    attention block grows until one page holds a rank's state, conv columns included."""
    d = dep("qwen3-next-80b-a3b-thinking", 4)
    version = EngineSettings(max_model_len=4000, engine_version="0.11.0")
    plain = kv_pool(d, version)
    drafting = kv_pool(d, replace(version, drafter=EngineSpec(2, "mtp")))
    assert plain.groups is not None and drafting.groups is not None
    layer = next(layer for layer in d.model.layers if layer.mixer == LINEAR)
    for pool, drafts in ((plain, 0), (drafting, 2)):
        g = pool.groups
        assert g is not None
        state = state_bytes_per_sequence(d.model, layer, tensor_parallel_size=4,
                                         speculative_tokens=drafts)
        assert g.state_layer_bytes == state
        assert g.block_size == 16 * -(-state // (16 * g.attention_token_bytes))
        assert g.state_blocks == 1 + drafts  # no prefix caching: one, and one a draft
    assert drafting.block_size > plain.block_size


def test_llama4_chunks_take_no_extra_block_where_a_sliding_window_does() -> None:
    d = dep("llama-4-scout", 4)
    assert any(layer.mixer == CHUNKED for layer in d.model.layers)
    g = vllm_kv_groups(d, 64)
    assert g is not None and g.chunks == (8192,) and g.windows == ((8192, 3),)
    # shorter than a chunk: every group holds the request's own blocks, as full attention
    own = -(-4000 // 64)
    assert g.blocks_per_request(4000, 8192) == (g.full + 3) * own
    # longer: a chunk and the prefill budget, cdiv(8,192 + 8,192, 64) = 256 a group
    assert g.blocks_per_request(128_000, 8192) == -(-128_000 // 64) + 3 * 256
    assert g.capped_prompt_blocks(128_000, 8192) == g.blocks_per_request(128_000, 8192)
    # the same layers as sliding windows would take one more block a group
    sliding = replace(g, chunks=())
    assert sliding.blocks_per_request(128_000, 8192) == g.blocks_per_request(128_000, 8192) + 3


def test_fit_says_the_drafts_hold_state_blocks(capsys) -> None:  # type: ignore[no-untyped-def]
    args = ("fit", "qwen3.5-35b-a3b", "--gpu", "h100", "--max-model-len", "4k",
            "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 3}')
    code, out, _ = run_cli(capsys, *args, "--json")
    assert code == 0
    check = json.loads(out)["start_up_check"]
    assert check["state_blocks_per_request"] == 5  # align mode's 2, and 3 drafts
    code, out, _ = run_cli(capsys, *args)
    assert code == 0
    assert "--no-enable-prefix-caching (4 state blocks a request, not 5" in out


def test_a_hybrids_mtp_layer_widens_its_groups_as_vllm_forms_them() -> None:
    """vLLM pages the drafter's full-attention layer with the target's: Qwen3-Next's groups of
    12 become groups of 13, one full and three state groups still, so the pool's page grows
    as the groups formed over the widened model say; a 1 + 1 hybrid would be regrouped."""
    d = dep("qwen3-next-80b-a3b-thinking", 4)
    full = next(layer for layer in d.model.layers if layer.mixer == FULL)
    assert full_layers_keep_groups(d.model, 1)
    widened = replace(d, model=replace(d.model, layers=(*d.model.layers, full)))
    g, gw = vllm_kv_groups(d, 64), vllm_kv_groups(widened, 64)
    assert g is not None and gw is not None
    assert (gw.full, gw.states, gw.layers_per_group) == (g.full, g.states, g.layers_per_group + 1)
    plain = kv_pool(d, EngineSettings(max_model_len=32768))
    drafting = kv_pool(d, EngineSettings(max_model_len=32768, draft_mtp=True,
                                         drafter=EngineSpec(1, "mtp")))
    assert plain.groups is not None and drafting.groups is not None
    assert drafting.block_size == plain.block_size
    assert drafting.groups.page_bytes == pytest.approx(
        plain.groups.page_bytes * gw.page_bytes / g.page_bytes)
    assert drafting.drafter_weight_bytes > 0
    assert not full_layers_keep_groups(spec_from_hf_config(GRANITE_H, "m"), 1)
