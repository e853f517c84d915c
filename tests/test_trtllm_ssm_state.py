"""TensorRT-LLM keeps a hybrid's SSM state at the config's mamba_ssm_cache_dtype, else its
torch_dtype (not mamba_ssm_dtype): one rule (cost.served_footprint) sizes it for the step,
the conversation's bytes and the state fit takes for every seat."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import sequence_bytes_per_gpu
from ridgeline.cost import Seq, batch_shape, served_footprint, state_work
from ridgeline.kvcache import kv_footprint
from ridgeline.trtllm_memory import trtllm_ssm_dtype
from ridgeline.units import MIB
from tests.conftest import run_cli

QWEN35 = "qwen3.5-35b-a3b"  # bf16 weights, mamba_ssm_dtype float32, no mamba_ssm_cache_dtype
NEMOTRON_H = "nemotron-h-56b-base-8k"


def _dep(name: str) -> Deployment:
    return Deployment.build(resolve_model(name), resolve_accelerator("h200"), engine="trtllm")


def _step_state_bytes(dep: Deployment) -> float:
    """One decoding sequence's recurrent state as the step reads it (state_work reads and
    writes it once: half its bytes)."""
    shape = batch_shape(dep, [Seq(1, 1000)])
    return sum(state_work(dep, layer, shape)[1] / 2 for layer in dep.model.layers)


def test_trtllm_reads_mamba_ssm_cache_dtype_not_mamba_ssm_dtype() -> None:
    model = resolve_model(QWEN35)
    assert model.state_dtype == "fp32" and not model.ssm_cache_dtype_named
    assert trtllm_ssm_dtype(model) == model.dtype  # torch_dtype: 'auto'
    named = replace(model, ssm_cache_dtype_named=True)
    assert trtllm_ssm_dtype(named) == named.state_dtype


@pytest.mark.parametrize("name", [QWEN35, NEMOTRON_H])
def test_the_conversations_state_is_the_steps(name: str) -> None:
    """A context's growth is attention alone: the sequence's bytes at 2c less twice at c
    leave minus the states, which equal what the step reads."""
    dep = _dep(name)
    state = 2 * sequence_bytes_per_gpu(dep, 1000) - sequence_bytes_per_gpu(dep, 2000)
    step = _step_state_bytes(dep)
    assert step > 0 and state == pytest.approx(step)
    assert served_footprint(dep, 1).state_bytes == pytest.approx(step)


def test_fits_mamba_cache_caution_sizes_the_steps_state(
        capsys: pytest.CaptureFixture[str]) -> None:
    dep = _dep(QWEN35)
    step = _step_state_bytes(dep)
    as_configured = kv_footprint(dep.model, 1, dep.kv.bytes_per_element).state_bytes
    assert as_configured > 1.5 * step  # the config's fp32 SSM state is not what it keeps
    code, out, err = run_cli(capsys, "fit", QWEN35, "--gpu", "h200", "--engine", "trtllm",
                             "--max-model-len", "8192")
    assert code == 0, err
    caution = next(line for line in out.splitlines() if "recurrent state up front" in line)
    assert f"× {step / MIB:,.1f} MiB" in caution


@pytest.mark.parametrize("name", [QWEN35, NEMOTRON_H, "qwen3-next-80b-a3b", "jamba-1.5-mini"])
def test_the_tensorrt_engine_backend_refuses_a_hybrid_it_builds_no_engine_for(
        capsys: pytest.CaptureFixture[str], name: str) -> None:
    """TensorRT-LLM's TensorRT engine backend builds from tensorrt_llm/models, whose recurrent
    models are pure Mamba and RecurrentGemma: a hybrid is refused in one line naming its
    architecture and the PyTorch backend that serves it (it had been priced as if built),
    while the PyTorch backend still prices it and a model without such layers still builds."""
    from ridgeline.memory import EngineSettings, kv_pool
    from ridgeline.trtllm_memory import engine_backend_refusal
    from tests.conftest import refused_line

    model = resolve_model(name)
    reason = engine_backend_refusal(model)
    assert model.architecture in reason and "--backend pytorch" in reason
    line = refused_line(capsys, "fit", name, "--gpu", "h200", "--engine", "trtllm",
                        "--backend", "tensorrt", "--max-model-len", "8192")
    assert line.endswith(reason)
    with pytest.raises(Exception, match="builds no"):
        kv_pool(_dep(name), EngineSettings(backend="tensorrt"))
    assert kv_pool(_dep(name), EngineSettings(backend="pytorch")).seat_state_bytes > 0
    assert engine_backend_refusal(resolve_model("llama-3.1-8b")) == ""
