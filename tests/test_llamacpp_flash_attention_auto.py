"""llama.cpp's -fa auto, its default, resolved as llama_context resolves it: on where the
backend has a flash-attention kernel for the model's heads, off (with -fa off's compute buffer,
and no quantized V cache) where it has none. CUDA/ROCm's kernels (ggml-cuda/fattn.cu) take
K = V of 64, 128 or 256, DeepSeek's MLA 576/512, but not a plain 192-wide head (Nemotron-4's);
Vulkan's shaders any K and V widths that are multiples of 8."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.config_reader import spec_from_hf_config
from ridgeline.engine_platforms import auto_flash_attention, flash_attention_unsupported
from tests.conftest import run_cli

# a 24-layer model with Nemotron-4-340B's 192-wide heads, every head its own KV head
HEAD_192 = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 3072,
            "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
            "head_dim": 192, "intermediate_size": 8192, "vocab_size": 32000,
            "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
            "tie_word_embeddings": False}
FIT = ("--engine", "llama.cpp", "--weights", "q4_k_m", "--max-model-len", "8k")


def _config(tmp_path: Path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(HEAD_192))
    return str(path)


def _fit(capsys: pytest.CaptureFixture[str], model: str, gpu: str, *flags: str) -> Any:
    fit = FIT if "--max-model-len" not in flags else FIT[:-2]  # the test's length, given once
    code, out, err = run_cli(capsys, "fit", model, "--gpu", gpu, *fit, *flags, "--json")
    assert code == 0, err
    return json.loads(out)


def _refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    return err


def test_which_heads_the_cuda_kernels_take() -> None:
    """fattn.cu's rule, through the models: Llama's 128 and DeepSeek-V3's MLA (576 with V 512,
    every head on the one latent) run; a plain 192-wide head does not, on CUDA or ROCm (the
    same file); Metal is taken as running it."""
    head_192 = spec_from_hf_config(HEAD_192, name="head-192")
    for engine in ("llama.cpp-cuda", "llama.cpp-rocm"):
        assert auto_flash_attention(resolve_model("llama-3.1-8b"), engine)
        assert auto_flash_attention(resolve_model("deepseek-v3"), engine)
        assert not auto_flash_attention(head_192, engine)
        assert "K 192, V 192" in flash_attention_unsupported(head_192, engine)
    assert auto_flash_attention(head_192, "llama.cpp-metal")
    assert auto_flash_attention(head_192, "vllm")


def test_auto_is_off_where_cuda_has_no_kernel_for_the_heads(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The 192-wide heads on an RTX 4090: auto sizes as -fa off does (the scores and the
    f32 mask in the compute buffer), not as on would."""
    model = _config(tmp_path)
    auto = _fit(capsys, model, "rtx-4090")
    off = _fit(capsys, model, "rtx-4090", "--flash-attn", "off")
    assert auto["flash_attn"] is False
    assert auto.pop("flash_attn_auto_off") == flash_attention_unsupported(
        spec_from_hf_config(HEAD_192, name=Path(model).parent.name), "llama.cpp-cuda")
    assert off.pop("flash_attn_auto_off") is None  # given, not resolved
    assert auto == off
    err = _refusal(capsys, "fit", model, "--gpu", "rtx-4090", *FIT, "--flash-attn", "on")
    assert "-fa on would put attention on the CPU" in err


def test_auto_is_on_where_cuda_has_the_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B's 128-wide heads: auto sizes as -fa on does, and more cache than off."""
    auto = _fit(capsys, "llama-3.1-8b", "rtx-4090")
    on = _fit(capsys, "llama-3.1-8b", "rtx-4090", "--flash-attn", "on")
    off = _fit(capsys, "llama-3.1-8b", "rtx-4090", "--flash-attn", "off")
    assert auto["flash_attn"] is True
    assert auto == on
    assert auto["tokens"] > off["tokens"]


@pytest.mark.parametrize("gpu", ["rtx-4090", "mi300x"])
def test_a_quantized_v_cache_is_refused_where_auto_turns_flash_attention_off(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, gpu: str) -> None:
    """llama.cpp stops at start-up on a q8_0 V cache once auto has turned flash attention off;
    the same cache starts on Llama-3.1-8B, where auto turns it on."""
    model = _config(tmp_path)
    for command in ("fit", "decode"):
        extra = ("--batch", "1", "--context", "4096") if command == "decode" else ()
        err = _refusal(capsys, command, model, "--gpu", gpu, *FIT, "--kv-dtype", "q8_0", *extra)
        assert "-fa auto turns it off" in err and "K 192, V 192" in err
    assert _fit(capsys, "llama-3.1-8b", gpu, "--kv-dtype", "q8_0")["flash_attn"] is True


def test_the_q8_0_lever_is_not_offered_where_flash_attention_cannot_run(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """fit's levers turn flash attention on for a q8_0 cache; with no kernel for the heads
    neither that lever nor '-fa on' is offered."""
    code, out, _ = run_cli(capsys, "fit", _config(tmp_path), "--gpu", "rtx-4090", *FIT)
    assert code == 0
    levers = out.split("levers:")[1]
    assert "q8_0" not in levers and "-fa on" not in levers


def test_fits_flash_attention_lever_under_fa_off_gains_where_the_heads_have_a_kernel(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Under -fa off, the lever turns flash attention on in the deployment as well as the
    settings: its smaller compute buffer holds more than -fa off's (the lever had vanished
    when only the settings turned it on, the deployment's off winning)."""
    off = _fit(capsys, "llama-3.1-8b", "rtx-4090", "--flash-attn", "off",
               "--max-model-len", "32000")
    on = _fit(capsys, "llama-3.1-8b", "rtx-4090", "--flash-attn", "on",
              "--max-model-len", "32000")
    lever = [x for x in off["levers"] if x["name"] == "flash attention (-fa on)"]
    assert lever and lever[0]["conversations"] == on["conversations"] > off["conversations"]


def test_fit_says_why_auto_turned_flash_attention_off(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The launch line's -fa off comes with the reason where auto resolved it (the kernel
    list's words, as the refusal of -fa on gives them); not where --flash-attn off was given,
    and not for Llama-3.1-8B, where auto resolves on."""
    model = _config(tmp_path)

    def said(name: str, *flags: str) -> list[str]:
        code, out, err = run_cli(capsys, "fit", name, "--gpu", "rtx-4090", *FIT, *flags)
        assert code == 0, err
        return [line for line in out.splitlines() if "-fa auto turns" in line]

    auto = said(model)
    assert len(auto) == 1 and "K 192, V 192" in auto[0]
    reason = _fit(capsys, model, "rtx-4090")["flash_attn_auto_off"]
    assert auto[0].endswith(reason)
    assert said(model, "--flash-attn", "off") == []
    assert said("llama-3.1-8b") == []
    assert _fit(capsys, "llama-3.1-8b", "rtx-4090")["flash_attn_auto_off"] is None


# a 26-layer model with 100-wide heads, a width no multiple of 8
HEAD_100 = {**HEAD_192, "hidden_size": 3200, "num_hidden_layers": 26, "num_attention_heads": 32,
            "num_key_value_heads": 32, "head_dim": 100}
VULKAN = ("--engine", "llama.cpp-vulkan", "--weights", "q4_k_m", "--max-model-len", "8k")


def test_vulkan_runs_heads_that_are_multiples_of_8_and_no_others(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """ggml-vulkan's supports_op takes any K and V width that is a multiple of 8: Llama's
    128, DeepSeek-V3's MLA 576/512 and the 192-wide heads CUDA has no kernel for run, so auto
    stays on; 100-wide heads do not, so auto resolves off and -fa on is refused."""
    head_192 = spec_from_hf_config(HEAD_192, name="head-192")
    for model in (resolve_model("llama-3.1-8b"), resolve_model("deepseek-v3"), head_192):
        assert auto_flash_attention(model, "llama.cpp-vulkan"), model.name
    assert not auto_flash_attention(head_192, "llama.cpp-cuda")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(HEAD_100))
    head_100 = spec_from_hf_config(HEAD_100, name=path.parent.name)  # its folder's
    why = flash_attention_unsupported(head_100, "llama.cpp-vulkan")
    assert "K 100, V 100" in why and "multiples of 8" in why
    code, out, err = run_cli(capsys, "fit", str(path), "--gpu", "rtx-4090", *VULKAN, "--json")
    assert code == 0, err
    auto = json.loads(out)
    assert auto["flash_attn"] is False and auto["flash_attn_auto_off"] == why
    code, out, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "rtx-4090", *VULKAN,
                             "--json")
    assert code == 0 and json.loads(out)["flash_attn"] is True
    err = _refusal(capsys, "fit", str(path), "--gpu", "rtx-4090", *VULKAN, "--flash-attn", "on")
    assert why in err and "-fa on would put attention on the CPU" in err
