"""vLLM before its MLA cache (0.7.1) keeps DeepSeek-V3's attention per head (vllm_mla_cache.py):
fit sized DeepSeek-V3 under vLLM 0.7.0 with the 576-wide latent, a pool of 629,440 tokens on
8 x H200 at 32K, where the 0.7.0 wheel caches 128 heads × (192 K + 192 padded V): 59,008."""

from __future__ import annotations

import json

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.datafiles import engine_defaults
from ridgeline.deployment import Deployment
from ridgeline.hardware import resolve_accelerator
from ridgeline.kvcache import attention_kv_bytes_per_token
from ridgeline.model import ModelSpec
from ridgeline.params import count_params
from ridgeline.vllm_mla_cache import latent_since
from tests.conftest import run_cli

RULE = engine_defaults("vllm")["release_features"]["mla_latent_cache"]
BEFORE = "0.7.0"  # the release read before RULE["since"] (0.7.1)


def build(model: str, version: str | None, weights: str | None = None) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator("h200"), weights=weights,
                            num_gpus=8, engine="vllm", engine_version=version)


def per_head_bytes(spec: ModelSpec, element_bytes: float) -> float:
    """Every head's K (qk_nope + qk_rope) and its V padded to that width, as vLLM 0.7.0 caches
    them (DeepseekV2Attention pads v to qk_head_dim)."""
    att = spec.attention
    assert att is not None and att.mla is not None
    return 2 * att.num_heads * (att.mla.qk_nope_head_dim + att.mla.qk_rope_head_dim) \
        * element_bytes


def latent_bytes(spec: ModelSpec, element_bytes: float) -> float:
    att = spec.attention
    assert att is not None and att.mla is not None
    return (att.mla.kv_lora_rank + att.mla.qk_rope_head_dim) * element_bytes


def test_deepseek_v3_cached_per_head_before_the_mla_release() -> None:
    spec = resolve_model("deepseek-v3")
    dep = build("deepseek-v3", BEFORE)
    element = dep.kv.bytes_per_element
    assert attention_kv_bytes_per_token(dep.model, element) == per_head_bytes(spec, element)
    assert dep.kv_replication == 1.0  # 128 heads split over 8 ranks, not a latent on each
    # the weights are MLA's still: the same parameters as the newest release loads
    assert count_params(dep.model) == count_params(build("deepseek-v3", None).model)


@pytest.mark.parametrize("version", [RULE["since"], None])
def test_deepseek_v3_latent_from_the_mla_release(version: str | None) -> None:
    spec = resolve_model("deepseek-v3")
    dep = build("deepseek-v3", version)
    element = dep.kv.bytes_per_element
    assert attention_kv_bytes_per_token(dep.model, element) == latent_bytes(spec, element)
    assert dep.model == build("deepseek-v3", None).model


def test_quantized_checkpoint_per_head_until_the_quantization_test_left() -> None:
    """0.7.1 and 0.7.2 turned MLA off for a quantization other than fp8 (AWQ, GPTQ)."""
    last = "0.7.2"
    assert RULE["any_quantization_since"] == "0.7.3"
    spec = resolve_model("deepseek-v3")
    awq = build("deepseek-v3", last, "awq-int4")
    element = awq.kv.bytes_per_element
    assert attention_kv_bytes_per_token(awq.model, element) == per_head_bytes(spec, element)
    later = build("deepseek-v3", RULE["any_quantization_since"], "awq-int4")
    assert attention_kv_bytes_per_token(later.model, element) == latent_bytes(spec, element)
    fp8 = build("deepseek-v3", RULE["since"])  # its own fp8 blocks: the latent
    assert attention_kv_bytes_per_token(fp8.model, element) == latent_bytes(spec, element)


def test_kimi_k2_latent_from_its_model_type_release() -> None:
    spec = resolve_model("kimi-k2")
    assert latent_since(spec) == RULE["model_types"]["kimi_k2"] == "0.10.0"
    before = build("kimi-k2", "0.9.2")
    element = before.kv.bytes_per_element
    assert attention_kv_bytes_per_token(before.model, element) == per_head_bytes(spec, element)
    after = build("kimi-k2", "0.10.0")
    assert attention_kv_bytes_per_token(after.model, element) == latent_bytes(spec, element)


def test_fit_pool_holds_the_per_head_cache(capsys: pytest.CaptureFixture[str]) -> None:
    """fit's pool at 0.7.0 holds as many tokens fewer as its cache per token per GPU is
    larger: 16 of the 128 heads on each rank against the whole latent on each."""
    tokens = {}
    for version in (BEFORE, RULE["since"]):
        code, out, err = run_cli(capsys, "fit", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8",
                                 "--engine-version", version, "--max-model-len", "32768",
                                 "--json")
        assert code == 0, err
        data = json.loads(out)
        tokens[version] = data["tokens"]
        assert data["kv_cache_groups"]["layers_per_group"] == resolve_model("deepseek-v3").num_layers
    spec = resolve_model("deepseek-v3")
    per_gpu_ratio = per_head_bytes(spec, 2) / 8 / latent_bytes(spec, 2)
    assert tokens[RULE["since"]] / tokens[BEFORE] == pytest.approx(per_gpu_ratio, rel=0.01)


def test_a_later_release_undoes_the_per_head_cache() -> None:
    """A deployment laid out at 0.7.0 and asked at a later release (floor_release's way out)
    is cached as that release caches it, and back."""
    before, newest = build("deepseek-v3", BEFORE), build("deepseek-v3", None)
    assert before.with_state_settings(RULE["since"], None).model == newest.model
    assert newest.with_state_settings(BEFORE, None).model == before.model


@pytest.mark.parametrize("command", [
    ("fit", "--max-model-len", "32768"),
    ("decode", "--batch", "8", "--context", "8192", "--max-model-len", "32768"),
    ("prefill", "--prompt-len", "4096", "--max-model-len", "32768"),
])
def test_a_figure_priced_with_the_per_head_cache_says_so(
        capsys: pytest.CaptureFixture[str], command: tuple[str, ...]) -> None:
    """An old release's pool holds ~85x fewer tokens: each command that prices it names the
    per-head cache and the release the latent came in; the latent's release says nothing."""
    from tests.conftest import run_cli

    name, *flags = command
    said = {}
    for version in ("0.7.0", "0.7.1"):
        code, out, err = run_cli(capsys, name, "deepseek-v3", "--gpu", "h200", "--num-gpus",
                                 "8", *flags, "--engine-version", version, "--json")
        assert code == 0, err
        said[version] = [c for c in json.loads(out)["cautions"] if "every head's K and V" in c]
    assert len(said["0.7.0"]) == 1 and "came in v0.7.1" in said["0.7.0"][0]
    assert said["0.7.1"] == []
