"""The serving engines as their projects spell them, for prose: ids ("vllm") stay in flags,
--json and data files; sentences say "vLLM", "SGLang", "TensorRT-LLM"."""

from __future__ import annotations

# engine id -> the project's own spelling (vLLM's docs, SGLang's, TensorRT-LLM's)
DISPLAY_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}


def engine_name(engine: str) -> str:
    """The engine as its project spells it ("trtllm" -> "TensorRT-LLM"); any other id (a
    llama.cpp build: "llama.cpp-cuda") as given."""
    return DISPLAY_NAMES.get(engine, engine)
