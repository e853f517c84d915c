"""decode's memory check as the engine serves the deployment (raw_fit.as_served): the vision
tower noted only where the engine loads it, as fit's pool holds it, and a drafter's weights and
cache counted where fit's pool counts them (a cross-command audit's findings)."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engine_spec import EngineSpec
from ridgeline.kvcache import attention_kv_bytes_per_token
from ridgeline.memory import EngineSettings, kv_pool, loaded_vision_bytes
from ridgeline.units import GB
from tests.conftest import run_cli

SCOUT = ("llama-4-scout", "--gpu", "h100", "--num-gpus", "4", "--batch", "8",
         "--context", "64k", "--max-model-len", "65536")
V3 = ("deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--max-model-len", "32768",
      "--context", "32000")
MTP = ("--spec-method", "mtp", "--spec-tokens", "1")


def _json(capsys: pytest.CaptureFixture[str], command: str, *argv: str) -> dict:
    code, out, err = run_cli(capsys, command, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def _text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, "decode", *argv)
    assert code == 0, err
    return out


def test_decode_notes_no_vision_tower_where_fit_loads_none(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-4-Scout under --language-model-only: fit's pool holds no tower, so decode's
    memory check no longer says a serving engine loads its 1.74 GB; served whole, both do."""
    tower = resolve_model("llama-4-scout").vision_tower_bytes
    served = _json(capsys, "fit", *SCOUT[:5], "--max-model-len", "65536")
    text_only = _json(capsys, "fit", *SCOUT[:5], "--max-model-len", "65536",
                      "--language-model-only")
    assert served["vision_tower_bytes_per_gpu"] > 0
    assert not text_only["vision_tower_bytes_per_gpu"]
    said = f"loads the {tower / GB:.2f} GB vision tower"
    assert said in _text(capsys, *SCOUT)
    assert "vision tower" not in _text(capsys, *SCOUT, "--language-model-only")
    assert "vision tower" not in _text(capsys, *SCOUT, "--limit-mm-per-prompt.image", "0")


def test_the_tower_an_engine_loads_is_the_one_its_pool_holds() -> None:
    """memory.loaded_vision_bytes is the pool's own: every GPU's share of it, added up, is the
    tower, on vLLM served whole; none text-only, none for Llama-4 on SGLang without
    --enable-multimodal (its mllama4 builds no vision_model), none on llama.cpp."""
    model, h100 = resolve_model("llama-4-scout"), resolve_accelerator("h100")
    vllm = Deployment.build(model, h100, num_gpus=4, engine="vllm")
    assert loaded_vision_bytes(vllm, EngineSettings()) == model.vision_tower_bytes
    assert loaded_vision_bytes(vllm, EngineSettings(language_model_only=True)) == 0
    sglang = Deployment.build(model, h100, num_gpus=4, engine="sglang")
    assert loaded_vision_bytes(sglang, EngineSettings()) == 0
    assert loaded_vision_bytes(sglang, EngineSettings(enable_multimodal=True)) \
        == model.vision_tower_bytes
    whole = kv_pool(vllm, EngineSettings(max_model_len=65536))
    text_only = kv_pool(vllm, EngineSettings(max_model_len=65536, language_model_only=True))
    assert (whole.weight_bytes - text_only.weight_bytes) * 4 == pytest.approx(
        model.vision_tower_bytes)


def test_decode_counts_an_mtp_drafter_as_fit_holds_it(capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 on 8 H200s drafting with its MTP layer: fit's pool holds the layer's
    weights on every GPU and one more layer's latent a token; decode's memory check counts
    the same, so 28 conversations of 32,000 tokens, which fit beside the model alone, no
    longer do."""
    plain = _json(capsys, "decode", *V3, "--batch", "28")["points"][0]
    drafting = _json(capsys, "decode", *V3, "--batch", "28", *MTP)["points"][0]
    dep = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"),
                           num_gpus=8)
    pool = kv_pool(dep, EngineSettings(max_model_len=32768, draft_mtp=True,
                                       drafter=EngineSpec(1, "mtp")))
    weights = pool.drafter_weight_bytes * 8
    cache = attention_kv_bytes_per_token(dep.model, dep.kv.bytes_per_element) * 8 * 28 * 32000
    assert drafting["weight_bytes"] - plain["weight_bytes"] == pytest.approx(weights)
    assert drafting["kv_bytes"] - plain["kv_bytes"] == pytest.approx(cache)
    assert drafting["drafter_bytes"] == pytest.approx(weights + cache)
    assert plain["fits"] and not drafting["fits"]
    assert plain["drafter_bytes"] == 0
    out = _text(capsys, *V3, "--batch", "28", *MTP)
    assert f"the drafter's {(weights + cache) / GB:,.1f} GB of weights and cache included" in out


def test_a_hybrid_mtp_drafter_is_counted_in_decode_as_fit_holds_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-Next's MTP layer, full attention, joins vLLM's full-attention group (13 layers a
    group beside 36 linear-attention ones, still 1 full and 3 state groups): fit's pool holds
    its weights and a layer's more cache a token, and decode's check counts the same, with no
    caution that it is left out."""
    args = ("qwen3-next-80b-a3b", "--gpu", "h100", "--num-gpus", "4", "--max-model-len",
            "32768", "--context", "32000", "--batch", "32")
    plain = _json(capsys, "decode", *args)["points"][0]
    code, out, err = run_cli(capsys, "decode", *args, "--json", "--spec-method",
                             "qwen3_next_mtp", "--spec-tokens", "2")
    assert code == 0, err
    drafting = json.loads(out)["points"][0]
    dep = Deployment.build(resolve_model("qwen3-next-80b-a3b"), resolve_accelerator("h100"),
                           num_gpus=4)
    pool = kv_pool(dep, EngineSettings(max_model_len=32768, draft_mtp=True,
                                       drafter=EngineSpec(2, "mtp")))
    assert pool.drafter_weight_bytes > 0
    assert drafting["weight_bytes"] - plain["weight_bytes"] == pytest.approx(
        pool.drafter_weight_bytes * 4)
    cache = attention_kv_bytes_per_token(dep.model, dep.kv.bytes_per_element) \
        * dep.kv_replication * 32 * 32000
    assert drafting["kv_bytes"] - plain["kv_bytes"] == pytest.approx(cache)
    assert "not in this pool" not in err


def test_a_deployment_that_does_not_fit_names_the_tower_it_would_also_load(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma-3-27B at batch 64 of 32,000 tokens on one H100: short by its weights and cache,
    and by its SigLIP tower more, which the headline had left unsaid where it did not fit."""
    argv = ("decode", "gemma-3-27b", "--gpu", "h100", "--batch", "64", "--context", "32000")
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    tower = resolve_model("gemma-3-27b").vision_tower_bytes
    head = out.splitlines()[0]
    assert head.startswith("DOES NOT FIT") and tower > 0
    assert f"also loads the {tower / GB:.2f} GB vision tower, short by that much more" in head
    code, out, err = run_cli(capsys, *argv, "--language-model-only")
    assert code == 0, err
    assert "vision tower" not in out.splitlines()[0]
