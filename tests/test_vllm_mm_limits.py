"""vLLM's --limit-mm-per-prompt: the images a prompt may carry cap the vision tower's profiled
images at seats × images a prompt; every modality the model takes at 0 is
--language-model-only (no tower loaded, none profiled)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.vllm_memory import encoder_profile
from ridgeline.vllm_mm_limits import images_per_prompt, parse_limits
from tests.conftest import run_cli

# the LLM class: 16,384 tokens, where Gemma-3's tower binds the profile
OFFLINE = EngineSettings(max_model_len=32_768, usage="offline")


def on_h100(name: str) -> Deployment:
    return Deployment.build(resolve_model(name), resolve_accelerator("h100"), None, None, 1)


def test_the_three_spellings_read_alike() -> None:
    json_form = parse_limits('{"image": 2, "video": {"count": 0}}')
    assert json_form == parse_limits("image=2,video=0")
    assert json_form == parse_limits(None, {"image": "2", "video": "0", "audio": None})
    assert json_form is not None and json_form.count("image") == 2
    assert json_form.count("audio") == 999  # left out: vLLM's default
    assert parse_limits(None, {"image": None}) is None


@pytest.mark.parametrize("text", ['{"image": 2', '["image"]', '{"imag": 1}', '{"image": -1}',
                                  '{"image": 1.5}', "image", '{"image": {"count": 1, "width": 512}}'])
def test_what_vllm_would_not_read_is_refused(text: str) -> None:
    with pytest.raises(InputError):
        parse_limits(text)


def test_gemma3_image_0_is_language_model_only() -> None:
    """Gemma-3 takes images alone (its processor's supported limits), so image 0 (with or
    without video 0, which it ignores) serves it text-only: the pool --language-model-only
    leaves, the tower neither loaded nor profiled."""
    d = on_h100("gemma-3-27b")
    text_only = kv_pool(d, replace(OFFLINE, language_model_only=True))
    for spelling in ('{"image": 0}', "image=0,video=0"):
        pool = kv_pool(d, replace(OFFLINE, mm_limits=parse_limits(spelling)))
        assert pool.encoder_images == 0
        assert (pool.weight_bytes, pool.pool_bytes) == (text_only.weight_bytes,
                                                        text_only.pool_bytes)
    assert kv_pool(d, OFFLINE).pool_bytes < text_only.pool_bytes


def test_one_image_a_prompt_caps_the_profile_at_the_seats() -> None:
    """At 8 seats and 16,384 tokens the budget holds 64 Gemma-3 images; one image a prompt
    lets vLLM profile 8 (seats × 1), the default 999 lets all 64 run: the pools differ by the
    tower's profile, as encoder_profile computes it."""
    d = on_h100("gemma-3-27b")
    s = replace(OFFLINE, max_num_seqs=8)
    default, one = kv_pool(d, s), kv_pool(d, replace(s, mm_limits=parse_limits("image=1")))
    assert images_per_prompt(None, 32_768, 256) == 128
    assert (default.encoder_images, one.encoder_images) == (64, 8)
    assert encoder_profile(d, 16_384, 8, 1) == (one.encoder_bytes, one.encoder_held_bytes, 8)
    assert one.weight_bytes == default.weight_bytes  # the tower is still loaded
    # and, sized after warm-up (v0.34), by its share of the margin
    assert one.pool_bytes - default.pool_bytes == pytest.approx(
        default.activation_bytes - one.activation_bytes
        + default.kept_free_bytes - one.kept_free_bytes)
    assert one.pool_bytes > default.pool_bytes


def test_a_tower_that_takes_video_needs_both_off() -> None:
    d = Deployment.build(resolve_model("qwen3.6-35b-a3b"), resolve_accelerator("h100"), None,
                         "fp8", 1)
    s = EngineSettings(max_model_len=131_072, engine_version="0.24.0")
    with pytest.raises(InputError, match="video"):
        kv_pool(d, replace(s, mm_limits=parse_limits("image=0")))
    both = kv_pool(d, replace(s, mm_limits=parse_limits("image=0,video=0")))
    assert both.pool_bytes == kv_pool(d, replace(s, language_model_only=True)).pool_bytes


def test_a_text_only_model_ignores_it_and_other_engines_refuse_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    d = on_h100("llama-3.1-8b")
    s = EngineSettings(max_model_len=8192)
    assert kv_pool(d, replace(s, mm_limits=parse_limits("image=0"))).pool_bytes \
        == kv_pool(d, s).pool_bytes
    code, _, err = run_cli(capsys, "fit", "gemma-3-27b", "--gpu", "h100", "--engine",
                           "sglang", "--limit-mm-per-prompt", "image=1")
    assert code == 2 and "--limit-mm-per-prompt is vLLM's" in err


def test_fit_reads_the_pasted_flag(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("fit", "gemma-3-27b", "--gpu", "h100", "--max-model-len", "32768", "--usage",
            "offline", "--max-num-seqs", "8", "--explain")
    code, out, _ = run_cli(capsys, *args, "--limit-mm-per-prompt.image", "1")
    assert code == 0 and "8 dummy images" in out
    assert "+ 8 images held (--limit-mm-per-prompt image=1)" in out  # the activation line
    assert "at most 8 seats × 1 a prompt (--limit-mm-per-prompt image=1)" in out
    code, out, _ = run_cli(capsys, *args, "--limit-mm-per-prompt", "image=4,video=0")
    assert code == 0 and "32 dummy images" in out  # 8 seats × 4, under the budget's 64


@pytest.mark.parametrize("value", ['{"image": 2', '{"imag": 2}', "image=-1"])
def test_bad_values_exit_2(capsys: pytest.CaptureFixture[str], value: str) -> None:
    code, _, err = run_cli(capsys, "fit", "gemma-3-27b", "--gpu", "h100",
                           "--limit-mm-per-prompt", value)
    assert code == 2 and "--limit-mm-per-prompt" in err and len(err.strip().splitlines()) == 1


def test_processor_overrides_are_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    """--mm-processor-kwargs resizes the dummy image vLLM profiles (Qwen-VL's max_pixels),
    which is not modelled: one line, exit 2."""
    code, _, err = run_cli(capsys, "fit", "gemma-3-27b", "--gpu", "h100",
                           "--mm-processor-kwargs", '{"do_pan_and_scan": true}')
    assert code == 2 and "--mm-processor-kwargs is not modelled" in err
