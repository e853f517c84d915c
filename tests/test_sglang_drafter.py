"""SGLang v0.5.14+ loads a model drafter before it sizes its pool: the draft weights and the
draft worker's cache come out of the pool (sglang_drafter.py); before 0.5.14 the default
fraction's reserve held them and the pool is as it was."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.draft_model_memory import drafter_weight_bytes_per_gpu, read_drafter
from ridgeline.drafter_memory import mtp_weight_bytes_per_gpu
from ridgeline.engine_spec import EngineSpec
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.sglang_drafter import sglang_drafter_in_pool, sglang_drafter_left_out
from tests.conftest import run_cli

GIB = 2**30
NEXTN = EngineSettings(draft_mtp=True, drafter=EngineSpec(3, "mtp"))
V3_FIT = ("deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--engine", "sglang",
          "--max-model-len", "32k", "--speculative-algorithm", "NEXTN",
          "--speculative-num-steps", "3", "--speculative-eagle-topk", "1")
# an EAGLE-3 head for Llama-3.1-8B: one decoder layer, its own 32,000-row lm_head
EAGLE3_8B = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
             "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
             "num_key_value_heads": 8, "num_hidden_layers": 1, "vocab_size": 128256,
             "draft_vocab_size": 32000, "max_position_embeddings": 2048,
             "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def v3_sglang() -> Deployment:
    return Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"),
                            num_gpus=8, engine="sglang")


@pytest.mark.parametrize(("version", "held"), [
    ("0.5.13", False), ("0.5.14", True), ("0.5.23", True), (None, True), ("0.5.9", False)])
def test_the_drafter_loads_before_the_pool_from_0_5_14(version: str | None, held: bool) -> None:
    assert sglang_drafter_in_pool(version) is held


@pytest.mark.parametrize("version", ["0.5.14", "0.5.23", None])
def test_deepseek_v3s_mtp_layer_comes_out_of_the_pool_on_8_h200s(version: str | None) -> None:
    """The docstring's case: 1.53 GiB of the MTP layer's weights a GPU, and a cell 62/61 the
    target's (one draft layer over 61), the pool's tokens that much fewer."""
    dep, model = v3_sglang(), resolve_model("deepseek-v3")
    plain = kv_pool(dep, EngineSettings(engine_version=version))
    drafting = kv_pool(dep, replace(NEXTN, engine_version=version))
    assert drafting.drafter_weight_bytes == pytest.approx(mtp_weight_bytes_per_gpu(dep))
    assert drafting.drafter_weight_bytes / GIB == pytest.approx(1.53, abs=0.005)
    assert drafting.weight_bytes - plain.weight_bytes == pytest.approx(
        drafting.drafter_weight_bytes)
    assert drafting.kv_bytes_per_token == pytest.approx(
        plain.kv_bytes_per_token * (model.num_layers + model.mtp_layers) / model.num_layers)
    assert drafting.drafter_kv_bytes_per_token == pytest.approx(
        plain.kv_bytes_per_token / 61)
    # the same fraction (no reserve from 0.5.14), less the draft weights, at the larger cell
    assert drafting.reserved_fraction == plain.reserved_fraction
    assert plain.pool_bytes - drafting.pool_bytes == pytest.approx(
        drafting.drafter_weight_bytes)
    assert drafting.tokens < plain.tokens


def test_before_0_5_14_the_pool_holds_no_drafter_and_the_reserve_stands() -> None:
    """0.5.13: the draft worker loads after the pool, into the 4 GiB the default holds back."""
    dep = v3_sglang()
    plain = kv_pool(dep, EngineSettings(engine_version="0.5.13"))
    drafting = kv_pool(dep, replace(NEXTN, engine_version="0.5.13"))
    assert (drafting.weight_bytes, drafting.kv_bytes_per_token) == (
        plain.weight_bytes, plain.kv_bytes_per_token)
    assert drafting.drafter_weight_bytes == drafting.drafter_kv_bytes_per_token == 0
    assert drafting.reserved_fraction < plain.reserved_fraction


def test_an_eagle3_head_read_offline_comes_out_of_llama_8bs_pool(tmp_path: Path) -> None:
    """Llama-3.1-8B with an EAGLE-3 head at TP2: the head's weights as vLLM holds them (the
    embedding the target's, its own lm_head), and one draft layer over the target's 32."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(EAGLE3_8B))
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                           num_gpus=2, engine="sglang")
    plain = kv_pool(dep)
    drafting = kv_pool(dep, EngineSettings(drafter=EngineSpec(3, "eagle", str(path),
                                                              algorithm="EAGLE3")))
    head = read_drafter(str(path), "eagle")
    assert head is not None
    assert drafting.weight_bytes - plain.weight_bytes == pytest.approx(
        drafter_weight_bytes_per_gpu(dep, head, 2))
    assert drafting.drafter_kv_bytes_per_token == pytest.approx(plain.kv_bytes_per_token / 32)
    assert drafting.tokens < plain.tokens


def test_what_stays_left_out_is_said(tmp_path: Path) -> None:
    model = resolve_model("deepseek-v3")
    assert sglang_drafter_left_out(model, "mtp") == ""
    assert sglang_drafter_left_out(model, "mtp", version="0.5.13") == ""  # the reserve's
    assert sglang_drafter_left_out(model, "ngram") == ""
    assert "no drafter named" in sglang_drafter_left_out(model, "eagle")
    assert "fetches nothing" in sglang_drafter_left_out(model, "eagle", "someone/head")
    assert "pipeline" in sglang_drafter_left_out(model, "mtp", pp=2)
    assert "has no MTP layers" in sglang_drafter_left_out(resolve_model("llama-3.1-8b"), "mtp")


def test_fit_drops_the_caution_where_the_pool_holds_the_drafter_and_explains_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "fit", *V3_FIT, "--explain")
    assert code == 0, err
    assert "caution" not in err
    pool = kv_pool(v3_sglang(), NEXTN)
    assert f"+ {pool.drafter_weight_bytes / GIB:,.2f} GiB of the drafter's weights" in out
    assert f"drafter's cache a token = {pool.drafter_kv_bytes_per_token / 1024:,.3f} KiB" in out
    # before 0.5.14 the reserve's caution, unchanged; an EAGLE head not named is still said
    _, _, old = run_cli(capsys, "fit", *V3_FIT, "--engine-version", "0.5.13")
    assert "SGLang loads them after sizing its pool" in old
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang",
                           "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
                           "--speculative-eagle-topk", "1", "--max-model-len", "8k")
    assert code == 0, err
    assert "SGLang v0.5.14+ loads them before sizing its pool, which they come out of, but no " \
        "drafter named" in err
