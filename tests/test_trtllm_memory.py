"""TensorRT-LLM's memory before the cache: the TensorRT engine backend's runtime buffers and
decoder, sized by max_batch_size × vocabulary; the PyTorch backend keeps none."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.trtllm_memory import engine_buffer_bytes, lm_head_output_bytes
from ridgeline.units import GIB
from tests.conftest import run_cli


def trt(model: str = "llama-3.1-8b", gpu: str = "rtx-5090", weights: str | None = "fp8",
        kv: str | None = "fp8", n: int = 1) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), weights, kv, n,
                            engine="trtllm")


def test_the_engine_backend_keeps_four_fp32_vocabulary_buffers_a_seat() -> None:
    """Llama-3.1-8B (vocab 128,256) at the default 2,048 seats: 4 × 4 B × 128,256 × 2,048 =
    3.91 GiB of logits, penalty and top-k buffers, then the top-k scratch and 15 [seat,
    max_seq_len] buffers at 2,048 tokens."""
    model = resolve_model("llama-3.1-8b")
    buffers = engine_buffer_bytes(model, 2048, 2048)
    assert buffers / GIB == pytest.approx(4.27, abs=0.01)
    assert engine_buffer_bytes(model, 256, 2048) == pytest.approx(buffers / 8)  # per seat
    # the [seat, max_seq_len] state grows with the length the engine was built for
    assert engine_buffer_bytes(model, 2048, 16_384) / GIB == pytest.approx(4.27 + 1.64, abs=0.01)
    # a stage before the last keeps the runtime's share, a quarter of the vocabulary buffers
    assert engine_buffer_bytes(model, 2048, 2048, decoder=False) / GIB == pytest.approx(1.07,
                                                                                       abs=0.01)
    # half the lm_head's output on each of two tensor-parallel ranks
    assert lm_head_output_bytes(model, 2048, 2) == pytest.approx(
        lm_head_output_bytes(model, 2048, 1) / 2)


def test_the_buffers_reproduce_the_log_they_were_read_from() -> None:
    """TensorRT-LLM #1188: a 151,936-token vocabulary at 2,048 seats and max_seq_len 32,768
    logged 2.66 GB of runtime buffers and 5.76 GB of decoder (8.42 in all)."""
    model = resolve_model("qwen2.5-7b")
    assert model.vocab_size == 152_064  # Qwen2.5 pads #1188's 151,936 to a multiple of 128
    logged = (2.66 + 5.76) * GIB
    assert engine_buffer_bytes(model, 2048, 32_768) == pytest.approx(logged, rel=0.02)


def test_the_rtx_5090_engine_log_is_within_three_percent_and_pytorch_keeps_nothing() -> None:
    """TensorRT-LLM #4275 (0.19, the TensorRT engine): 31.84 GiB, 17.83 free after the engine,
    its buffers and the decoder, 16.05 GiB of cache (263,008 tokens) — 20.6 GiB if the
    buffers were left out."""
    settings = EngineSettings(max_model_len=2048, max_num_batched_tokens=1024,
                              backend="tensorrt")
    engine = kv_pool(trt(), settings, 31.84 * GIB)
    assert engine.pool_bytes / GIB == pytest.approx(16.05, rel=0.03)
    assert engine.tokens == pytest.approx(263_008, rel=0.03)
    pytorch = kv_pool(trt(), EngineSettings(max_model_len=2048, max_num_batched_tokens=1024),
                      31.84 * GIB)
    assert pytorch.seat_buffer_bytes == 0.0
    assert pytorch.pool_bytes / GIB > 20


def test_fewer_seats_free_the_buffers_and_fit_offers_them(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "rtx-5090", "--engine",
                           "trtllm", "--weights", "fp8", "--kv-dtype", "fp8",
                           "--max-model-len", "2048", "--backend", "tensorrt", "--json")
    assert code == 0
    report = json.loads(out)
    held = report["conversations"]
    assert report["taken_bytes_per_gpu"]["seat_buffers"] > 4 * GIB
    seats = [lv for lv in report["levers"] if "--max_batch_size" in lv["name"]]
    assert seats and seats[0]["conversations"] > held
    assert int(seats[0]["name"].split()[0].replace(",", "")) >= seats[0]["engine_max_batch"]


def test_backend_is_tensorrt_llms_alone(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100",
                           "--max-model-len", "4096", "--backend", "tensorrt")
    assert code == 2 and "--backend is TensorRT-LLM's" in err and err.count("\n") == 1
    with pytest.raises(InputError):
        EngineSettings(backend="onnx")


def test_only_the_last_pipeline_stage_holds_the_decoder() -> None:
    """TensorRT-LLM builds its decoder on the last pipeline rank (createDecoder): at PP2 the
    first stage keeps the runtime's buffers only, and no lm_head output."""
    from ridgeline.memory import stage_pools

    d = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), None,
                         None, 2, 2, engine="trtllm")
    first, last = stage_pools(d, EngineSettings(max_model_len=8192, max_num_batched_tokens=1024,
                                                backend="tensorrt"))
    assert last.seat_buffer_bytes > 3 * first.seat_buffer_bytes > 0
    assert first.activation_bytes == first.forward_bytes < last.activation_bytes


def test_tokens_per_block_is_a_power_of_two_above_one(capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM's KV blocks hold a power of two tokens, more than one (its KV cache
    docs): 64 sizes a pool of 64-token blocks, 48 and 1 are refused in one line."""
    pool = kv_pool(trt(), EngineSettings(max_model_len=8192, block_size=64))
    assert pool.block_size == 64 and pool.tokens == pool.blocks * 64
    for bad in ("48", "1"):
        code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine",
                               "trtllm", "--max-model-len", "8192", "--tokens-per-block", bad)
        assert code == 2 and "power of two" in err and err.count("\n") == 1


@pytest.mark.parametrize("model", ["mistral-7b", "gemma-2-9b"])
def test_window_layers_are_counted_growing_alike_in_fit_and_simulate(model: str) -> None:
    """TensorRT-LLM counts its blocks as if every layer were full attention. Mistral-7B, all
    window layers, held no block at all (its full layers' cost per token is 0), and Gemma-2's
    simulated pool left its window layers out: 42 running where fit found 27."""
    from ridgeline.capacity import conversations
    from ridgeline.kvcache import kv_footprint
    from ridgeline.sim.config import sim_config

    dep = Deployment.build(resolve_model(model), resolve_accelerator("h100"), None, None, 1,
                           engine="trtllm")
    settings = EngineSettings(max_model_len=8192)
    pool = kv_pool(dep, settings)
    every_layer = kv_footprint(dep.model, 1, dep.kv.bytes_per_element).bytes_per_token_naive
    assert pool.kv_bytes_per_token == every_layer > 0
    assert pool.tokens > 0 and conversations(pool, dep, 8192) == pool.tokens // 8192
    config = sim_config(dep, settings)
    assert config.num_blocks * config.block_size == pool.tokens


def test_explain_credits_the_free_fraction_flag_not_the_reserved_fraction(
        capsys: pytest.CaptureFixture[str]) -> None:
    """TRT-LLM reserves the whole card (1.0) and applies kv_cache_free_gpu_mem_fraction to
    what the weights and activations leave: --explain's reserved fraction is not the flag's,
    and its free fraction is."""
    dep = trt("llama-3.1-8b", "h100", None, None)
    pool = kv_pool(dep, EngineSettings(max_model_len=8192, gpu_memory_utilization=0.5))
    assert pool.reserved_fraction == 1.0 and pool.free_fraction_of_rest == 0.5
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "trtllm",
                           "--max-model-len", "8192",
                           "--kv_cache_free_gpu_memory_fraction", "0.5", "--explain")
    assert code == 0
    reserved = [line for line in out.splitlines() if "reserved fraction = 1 " in line]
    assert reserved and all("[the flag]" not in line for line in reserved)
    assert any("free fraction of the rest = 0.5" in line for line in out.splitlines())


def test_fit_and_simulate_hold_whole_blocks_as_guaranteed_no_evict_reserves_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM reserves ceil((prompt + max_new_tokens) ÷ 32) blocks a request: Llama-3.1-8B
    on an H100 at 4,097 tokens takes 129 of the pool's 14,510 blocks, so 112 run at once, not
    the 113 the bytes alone divide into; fit, its lever and simulate count alike."""
    def fit(length: int) -> dict:
        code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine",
                               "trtllm", "--max-model-len", str(length), "--json")
        assert code == 0
        return json.loads(out)

    report = fit(4097)
    assert report["block_size"] == 32
    assert report["conversations"] == report["blocks_per_gpu"] // 129 == 112
    assert fit(4096)["conversations"] == report["blocks_per_gpu"] // 128
    code, out, _ = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--engine",
                           "trtllm", "--max-model-len", "4097", "--rate", "inf",
                           "--num-requests", "120", "--input-len", "4000", "--output-len", "97",
                           "--json")
    assert code == 0
    assert json.loads(out)["running"]["max"] == 112


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-r1", "kimi-k2", "glm-4.5",
                                  "gpt-oss-20b", "llama-4-scout", "gemma-3-4b"])
def test_the_engine_backend_refuses_an_architecture_its_model_map_lacks(
        capsys: pytest.CaptureFixture[str], name: str) -> None:
    """trtllm-build and --backend tensorrt build from tensorrt_llm/models' MODEL_MAP, whose one
    MLA model is DeepseekV2ForCausalLM: DeepSeek-V3/R1 and Kimi K2 (DeepseekV3ForCausalLM),
    GLM-4.5, gpt-oss and the multimodal Llama 4 and Gemma 3 are refused in one line naming
    the architecture and the PyTorch backend (they had been priced as if built), which still
    prices them."""
    from ridgeline.datafiles import engine_defaults
    from ridgeline.trtllm_memory import engine_backend_refusal
    from tests.conftest import refused_line

    model = resolve_model(name)
    built = engine_defaults("trtllm")["engine_backend_models"]["architectures"]
    assert model.architecture not in built
    reason = engine_backend_refusal(model)
    assert f"builds no {model.architecture} ({model.name})" in reason
    assert "--backend pytorch" in reason
    mla = model.attention is not None and model.attention.mla is not None
    assert ("DeepseekV2ForCausalLM" in reason) == mla
    argv = ("fit", name, "--gpu", "h200", "--num-gpus", "8", "--engine", "trtllm",
            "--max-model-len", "8192")
    assert refused_line(capsys, *argv, "--backend", "tensorrt").endswith(reason)
    code, _, err = run_cli(capsys, *argv, "--backend", "pytorch")
    assert code == 0, err


def test_the_engine_backend_builds_what_its_model_map_takes() -> None:
    """Llama, Mistral, Mixtral, Qwen2/3 (MoE too), Gemma 2, Phi-3, GPT-J and Falcon are in
    MODEL_MAP: their engine-backend pools are still priced, with the engine's buffers."""
    from ridgeline.trtllm_memory import engine_backend_refusal

    for name in ("llama-3.1-8b", "mistral-7b", "mixtral-8x7b", "qwen2.5-7b", "qwen3-30b-a3b",
                 "gemma-2-9b", "phi-4", "gpt-j-6b", "falcon-7b"):
        assert engine_backend_refusal(resolve_model(name)) == "", name
    engine = kv_pool(trt("qwen3-30b-a3b", "h200"), EngineSettings(backend="tensorrt"))
    torch = kv_pool(trt("qwen3-30b-a3b", "h200"), EngineSettings(backend="pytorch"))
    assert engine.tokens < torch.tokens  # the engine's vocabulary buffers come first


def test_a_config_without_architectures_has_no_engine_model_to_pick() -> None:
    """get_trtllm_model_class reads config.json's architectures[0]: an empty list is refused,
    pointing at the config and the PyTorch backend."""
    from dataclasses import replace

    from ridgeline.trtllm_memory import engine_backend_refusal

    model = replace(resolve_model("llama-3.1-8b"), architectures_named=False)
    reason = engine_backend_refusal(model)
    assert "lists none" in reason and "--backend pytorch" in reason
    with pytest.raises(InputError, match="lists none"):
        kv_pool(Deployment.build(model, resolve_accelerator("h200"), engine="trtllm"),
                EngineSettings(backend="tensorrt"))
