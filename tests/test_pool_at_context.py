"""page, amdahl and utilization start the engine's pool at max_model_len = the context asked.
That is the pool `vllm serve` (SGLang, trtllm-serve) holds conversations of that length in at
the model's longer default too, on the releases these commands price: the profiled step is the
scheduler's token budget, not max_model_len; only the start-up check reads the longer one.
Each command's --explain says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import held_conversations, pool_at_context_note, refuses_to_start
from ridgeline.context_length import served_positions
from ridgeline.memory import EngineSettings, kv_pool
from tests.conftest import run_cli


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize(("model", "gpu", "n"), [("llama-3.1-8b", "h100", 1),
                                                 ("qwen3-30b-a3b", "h100", 1),
                                                 ("gpt-oss-120b", "h100", 2)])
def test_a_pool_at_the_context_holds_what_the_models_default_holds(
        model: str, gpu: str, n: int, engine: str) -> None:
    dep = Deployment.build(resolve_model(model), resolve_accelerator(gpu), None, None, n,
                           engine=engine)
    default = served_positions(dep.model, engine)
    assert default is not None
    for context in (1024, 8192):
        at_context = kv_pool(dep, EngineSettings(max_model_len=context))
        at_default = kv_pool(dep, EngineSettings(max_model_len=default))
        assert held_conversations(at_context, dep, context) == \
            held_conversations(at_default, dep, context) > 0


def test_what_differs_is_the_start_up_check_at_the_longer_default() -> None:
    dep = Deployment.build(resolve_model("gemma-3-27b"), resolve_accelerator("h100"), None,
                           None, 1)
    default = served_positions(dep.model, "vllm")
    assert default is not None
    # vLLM 0.33's 0.92 budget (0.34's whole-card pool holds one such request)
    at = EngineSettings(max_model_len=default, engine_version="0.33")
    assert refuses_to_start(kv_pool(dep, at), dep, default)
    assert not refuses_to_start(kv_pool(dep, EngineSettings(max_model_len=2048)), dep, 2048)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_the_note_says_a_start_up_refusal_only_for_the_engine_that_refuses(engine: str) -> None:
    """Gemma-3-27B on one H100 at its 131,072-token default: no engine's pool holds one request
    that long (vLLM's at 0.33's 0.92 budget); vLLM refuses to start, SGLang and TensorRT-LLM
    start anyway (capacity.py refuses_to_start), and the note says which."""
    dep = Deployment.build(resolve_model("gemma-3-27b"), resolve_accelerator("h100"), None,
                           None, 1, engine=engine)
    default = served_positions(dep.model, engine)
    assert default is not None
    pool = kv_pool(dep, EngineSettings(max_model_len=default,
                                       engine_version="0.33" if engine == "vllm" else None))
    assert pool.tokens < default
    note = pool_at_context_note(engine)
    assert ("must also fit one request of that default to start" in note) \
        == refuses_to_start(pool, dep, default)
    assert engine in note


def test_page_amdahl_and_utilization_say_the_pool_assumes_max_model_len_is_the_context(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    note = pool_at_context_note("vllm")
    for argv in (("utilization", "--gpu", "h100", "--running", "32", "--model", "llama-3.1-8b",
                  "--context", "2048"),
                 ("amdahl", "--model", "llama-3.1-8b", "--gpu", "h100", "--batch", "8",
                  "--context", "2048"),
                 ("page", "llama-3.1-8b", "--gpu", "h100", "--counts", "1", "-o",
                  str(tmp_path / "p.html"))):
        code, out, err = run_cli(capsys, *argv, "--explain")
        assert code == 0, err
        assert note in out
        code, out, _ = run_cli(capsys, *argv)
        assert code == 0 and note not in out
