"""Each engine's own words in `ridgeline fit`'s output: vLLM's model runner, the flag that
caps a pool's tokens, what an engine calls its seats, and whether the pool is llama.cpp's."""

from __future__ import annotations

from ridgeline.memory import KVPool


def runner_label(p: KVPool) -> str:
    """vLLM's GPU model runner, as the header names it."""
    return "Model Runner V2" if p.runner == "MRV2" else p.runner or "V1"


def cap_flag(p: KVPool) -> str:
    """The engine's own name for the cap on its pool's tokens."""
    return "kv_cache_config.max_tokens" if p.engine == "trtllm" else "--max-total-tokens"


def is_llamacpp(p: KVPool) -> bool:
    return p.engine.startswith("llama.cpp")


def seats_name(p: KVPool) -> str:
    return {"sglang": "max_running_requests", "trtllm": "max_batch_size"}.get(
        p.engine, "slots (-np)" if is_llamacpp(p) else "max_num_seqs")
