"""vLLM's profiling pass runs a fixed-size vision tower on dummy images before the text pass
and holds their outputs through it: the peak the KV pool is sized after."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.units import GIB
from ridgeline.vllm_memory import encoder_profile
from tests.conftest import run_cli

OFFLINE = EngineSettings(max_model_len=32_768, usage="offline")  # the LLM class: 16,384 tokens


def gemma(n: int = 1) -> Deployment:
    return Deployment.build(resolve_model("gemma-3-27b"), resolve_accelerator("h100"), None,
                            None, n)


def test_gemma3_images_fill_the_encoder_budget() -> None:
    """SigLIP at 896 px: 4,096 patches an image, 256 tokens after pooling; each patch holds
    2 B × (2 × 4,304 + 3 × 1,152) = 24,128 B at the MLP."""
    tower, held, images = encoder_profile(gemma(), 16_384)
    assert images == 16_384 // 256 == 64
    assert tower == 64 * 4096 * 24_128
    assert held == 64 * 256 * 5376 * 2
    assert encoder_profile(gemma(), 2048)[2] == 8
    assert encoder_profile(gemma(), 100)[2] == 1  # the budget is at least one image
    assert encoder_profile(gemma(2), 2048)[0] == 8 * 4096 * 2 * (4304 + 3 * 1152)  # TP halves
    llama = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                             None, None, 1)
    assert encoder_profile(llama, 8192) == (0.0, 0.0, 0)  # no tower


def test_the_tower_binds_the_offline_profile_and_shrinks_the_pool() -> None:
    pool = kv_pool(gemma(), OFFLINE)
    assert pool.encoder_images == 64 and pool.activation_bytes == pool.encoder_bytes
    assert pool.encoder_bytes > pool.encoder_held_bytes + max(pool.forward_bytes,
                                                              pool.sampler_bytes)
    # vllm serve at V1's rules (8,192 tokens, 1,024 seats): the images held beside the sampler
    served = kv_pool(gemma(), replace(OFFLINE, usage="serve", engine_version="0.24"))
    assert served.activation_bytes == pytest.approx(served.encoder_held_bytes
                                                    + served.sampler_bytes)
    text_only = kv_pool(gemma(), replace(OFFLINE, language_model_only=True))
    assert text_only.encoder_images == 0
    # 3.5 GiB (a cold compile's 1 GiB among them) against 5.9
    assert text_only.activation_bytes < pool.activation_bytes - 2 * GIB
    v0 = kv_pool(gemma(), replace(OFFLINE, engine_version="0.8.5 V0"))
    assert v0.encoder_images == 0  # the V0 pass is not sized with it


def test_fit_names_the_tower_when_it_binds(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", "gemma-3-27b", "--gpu", "h100", "--max-model-len",
                           "32768", "--usage", "offline", "--explain")
    assert code == 0 and "vision tower profile (64 dummy images)" in out
    assert "vision tower = " in out and "images held = " in out


def test_a_tower_of_any_size_is_profiled_at_its_processors_largest_image() -> None:
    """Qwen3.5's processor takes up to 16,777,216 pixels (4,096²), a token per 32 × 32 (patch
    16, merge 2): 16,384 tokens of 65,536 patches, the budget vLLM logs for it; one such image
    fills any budget up to 16,384 tokens. On the v0.24 RTX 5090 log of Qwen3.6 (one seat, so
    a small sampler) the tower's pass is the peak."""
    model = resolve_model("qwen3.6-35b-a3b")
    item = model.vision_item
    assert item is not None and (item.tokens, item.patches) == (16_384, 65_536)
    d = Deployment.build(model, resolve_accelerator("rtx-5090"), None, "fp8", 1)
    tower, _, images = encoder_profile(d, 8192)
    assert images == 1 and tower == 65_536 * 2 * (2 * 4304 + 3 * 1152)
    s = EngineSettings(max_model_len=131_072, max_num_seqs=1, max_num_batched_tokens=8192,
                       engine_version="0.24.0", prefix_caching=True)
    pool = kv_pool(d, s)
    assert pool.activation_bytes == pool.encoder_bytes == tower
    assert kv_pool(d, replace(s, language_model_only=True)).encoder_images == 0


# Llama-4-Scout's vision modules, parameter by parameter, as a published module table prints
# them (SOURCES.md: find_string id 41112263523); a layer's rows repeat for 34 layers
LLAMA4_EMBED_PARAMS = (1408, 812_416, 827_904, 1408, 1408, 1408, 1408)  # class, positions,
# patch embedding, layernorm_pre and _post (weight, bias)
LLAMA4_LAYER_PARAMS = (1_982_464, 1408) * 4 + (7_929_856, 5632, 7_929_856, 1408) + (1408,) * 4
LLAMA4_HEAD_PARAMS = (23_068_672, 16_777_216, 20_971_520)  # adapter fc1, fc2; projector


@pytest.mark.parametrize("name", ["llama-4-scout", "llama-4-maverick"])
def test_llama4_tower_counts_the_published_modules(name: str) -> None:
    """Llama-4's tower (34 layers of 1,408, a pixel-shuffle adapter and a projector into
    the 5,120-wide text model): 871,932,416 parameters, the module table's sum; the same
    tower in Scout and Maverick, loaded beside the text model and never read by a token."""
    published = sum(LLAMA4_EMBED_PARAMS) + 34 * sum(LLAMA4_LAYER_PARAMS) \
        + sum(LLAMA4_HEAD_PARAMS)
    model = resolve_model(name)
    assert model.vision_params == published
    assert not model.architecture_caution  # its vision_config is read


def test_llama4_is_profiled_at_its_most_tiles() -> None:
    """vLLM's dummy image is 16 tiles of 336² (the processor's max_patches) and a global
    tile: 17 × (24² patches + a class token) through the tower, 17 × 24² ÷ 4 (the pixel
    shuffle at 0.5) tokens to the text model; an 8,192-token budget holds three."""
    model = resolve_model("llama-4-scout")
    item = model.vision_item
    assert item is not None and (item.patches, item.tokens) == (17 * 577, 17 * 144)
    d = Deployment.build(model, resolve_accelerator("h100"), None, None, 4)
    tower, held, images = encoder_profile(d, 8192)
    assert images == 8192 // (17 * 144) == 3
    assert tower == 3 * 17 * 577 * 2 * (2 * 5632 / 4 + 3 * 1408)
    assert held == 3 * 17 * 144 * 5120 * 2


def test_llama4_pool_gives_up_its_tower() -> None:
    """vllm serve loads the tower, a quarter on each of four H100s, and profiles it: the
    pool is smaller than --language-model-only's by at least the tower's share."""
    d = Deployment.build(resolve_model("llama-4-scout"), resolve_accelerator("h100"), None,
                         None, 4)
    s = EngineSettings(max_model_len=131_072)
    served, text_only = kv_pool(d, s), kv_pool(d, replace(s, language_model_only=True))
    share = d.model.vision_tower_bytes / 4
    assert served.weight_bytes - text_only.weight_bytes == pytest.approx(share)
    assert served.encoder_images == 3 and text_only.encoder_images == 0
    assert text_only.pool_bytes - served.pool_bytes >= share
