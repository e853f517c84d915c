"""Sliding-window layers as each engine caches them: vLLM and llama.cpp (for the architectures
it gives a window) keep only the window; SGLang sizes a window pool at 0.8 of the full pool's
tokens for its hybrid-SWA architectures and stores every token elsewhere."""

from __future__ import annotations

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import conversation_bytes
from ridgeline.engine_windows import honours_windows, sglang_swa_ratio, token_bytes
from ridgeline.kvcache import attention_kv_bytes_per_token
from ridgeline.memory import EngineSettings, kv_pool


def _dep(model: str, engine: str, gpus: int = 1) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator("h100"), num_gpus=gpus,
                            engine=engine)


def test_sglang_sizes_gpt_oss_window_pool_at_four_fifths_of_the_full_pool() -> None:
    """18 full + 18 window layers: one more token of context costs 18 + 0.8 × 18 layers."""
    dep = _dep("gpt-oss-120b", "sglang")
    layer = attention_kv_bytes_per_token(dep.model, dep.kv.bytes_per_element)
    assert honours_windows(dep) and sglang_swa_ratio() == 0.8
    assert token_bytes(dep) == pytest.approx((18 + 0.8 * 18) * layer)
    pool = kv_pool(dep, EngineSettings(max_model_len=32768))
    assert conversation_bytes(pool, dep, 32768) == pytest.approx(32768 * token_bytes(dep))


@pytest.mark.parametrize(("model", "engine"), [("gemma-3-27b", "sglang"),
                                               ("mistral-7b", "llama.cpp-cuda"),
                                               ("mistral-7b", "sglang")])
def test_where_an_engine_keeps_no_window_every_layer_grows_with_the_context(
        model: str, engine: str) -> None:
    dep = _dep(model, engine)
    layers = sum(1 for layer in dep.model.layers if layer.mixer != "none")
    assert not honours_windows(dep)
    assert token_bytes(dep) == pytest.approx(
        layers * attention_kv_bytes_per_token(dep.model, dep.kv.bytes_per_element))


def test_the_same_model_holds_more_long_conversations_where_windows_are_kept() -> None:
    """Gemma-3-27B at 32K on an H100: vLLM pages 10 full layers and 52 windows of 1,024;
    SGLang (no hybrid pool for Gemma-3) stores 62 full layers."""
    fits = {}
    for engine in ("vllm", "sglang", "llama.cpp-cuda"):
        dep = _dep("gemma-3-27b", engine)
        pool = kv_pool(dep, EngineSettings(max_model_len=32768))
        fits[engine] = pool.pool_bytes / conversation_bytes(pool, dep, 32768)
    assert fits["vllm"] > 4 * fits["sglang"] and fits["llama.cpp-cuda"] > 4 * fits["sglang"]


def test_a_smaller_swa_ratio_holds_more_long_conversations_on_sglang() -> None:
    from ridgeline.capacity import conversations
    from ridgeline.errors import InputError

    dep = _dep("gpt-oss-120b", "sglang", gpus=2)
    held = {r: conversations(kv_pool(dep, EngineSettings(max_model_len=32768,
                                                          swa_full_tokens_ratio=r)), dep, 32768)
            for r in (0.8, 0.2)}
    # 18 + 0.8 × 18 layers per token against 18 + 0.2 × 18
    assert held[0.2] / held[0.8] == pytest.approx(32.4 / 21.6, rel=0.05)
    with pytest.raises(InputError, match="SGLang's"):
        kv_pool(_dep("gpt-oss-120b", "vllm", gpus=2), EngineSettings(swa_full_tokens_ratio=0.2))
    with pytest.raises(InputError, match=r"\(0, 1\]"):
        EngineSettings(swa_full_tokens_ratio=1.5)
    # Gemma-3 gets no hybrid pool on SGLang: the ratio would be dropped, so it is refused
    with pytest.raises(InputError, match="hybrid-SWA pool, which Gemma3ForConditionalGeneration"):
        kv_pool(_dep("gemma-3-27b", "sglang"), EngineSettings(swa_full_tokens_ratio=0.2))


def test_sglang_turns_gpt_oss_window_pool_off_on_data_center_blackwell() -> None:
    """trtllm_mha, SGLang's default attention backend on sm100, has no window pool for
    gpt-oss: there every layer grows; on an H100 the hybrid pool applies."""
    model = resolve_model("gpt-oss-120b")
    b200 = Deployment.build(model, resolve_accelerator("b200"), engine="sglang")
    h100 = Deployment.build(model, resolve_accelerator("h100"), engine="sglang")
    assert not honours_windows(b200) and honours_windows(h100)
    assert token_bytes(b200) == pytest.approx(token_bytes(h100) * 36 / (18 + 0.8 * 18))


def test_sglang_before_v0_5_9_gave_gpt_oss_no_window_pool() -> None:
    dep = _dep("gpt-oss-120b", "sglang", gpus=2)
    assert not honours_windows(dep, "0.5.6") and honours_windows(dep, "0.5.9")
    old, new = (kv_pool(dep, EngineSettings(max_model_len=32768, engine_version=v))
                for v in ("0.5.6", "0.5.9"))
    assert old.kv_bytes_per_token == pytest.approx(new.kv_bytes_per_token * 36 / 32.4)


def test_trtllm_fit_names_the_window_setting_it_does_not_read(
        capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM caches Gemma-3's window layers whole unless
    kv_cache_config.max_attention_window is set, which ridgeline does not size: fit says so,
    with the layers and their window, and says nothing of it for a model without windows or
    under an engine that keeps only the windows."""
    from ridgeline.engine_windows import trtllm_window_caution
    from tests.conftest import run_cli

    dep = _dep("gemma-3-27b", "trtllm")
    windowed = [layer for layer in dep.model.layers if layer.window_tokens
                and layer.mixer != "full"]
    caution = trtllm_window_caution(dep)
    assert f"{len(windowed)} of {dep.model.num_layers} layers windowed" in caution
    assert f"at {windowed[0].window_tokens:,} tokens" in caution
    _, out, _ = run_cli(capsys, "fit", "gemma-3-27b", "--gpu", "h100", "--engine", "trtllm",
                        "--max-model-len", "32768")
    assert "kv_cache_config.max_attention_window" in out
    assert trtllm_window_caution(_dep("llama-3.1-8b", "trtllm")) == ""
    assert trtllm_window_caution(_dep("gemma-3-27b", "vllm")) == ""
