"""The dtype a serving engine multiplies an MXFP4 checkpoint's experts at (gpt-oss): not the
format's own FP4, which a tensor core reaches only with FP4 activations too, but the
activation dtype the engine's default MoE kernel feeds it. vLLM keeps bf16 activations on
every card; SGLang and TensorRT-LLM quantize them to MXFP8 on Blackwell, the FP8 rate
(engines.json <engine>.mxfp4_moe_matmul, with the source lines)."""

from __future__ import annotations

from ridgeline.datafiles import engine_defaults
from ridgeline.hardware import Accelerator, blackwell_generation


def mxfp4_moe_matmul_dtypes(engine: str, acc: Accelerator) -> tuple[str, ...] | None:
    """The dtypes, best first, ``engine``'s default MXFP4 MoE kernel multiplies at on ``acc``
    (the first the card runs wins): vLLM on a B200, ('bf16', 'fp16'), 2,250 TFLOP/s where
    the format's fp4 would say 9,000; SGLang on a B200, fp8 first, 4,500. None for an engine
    with no such rule (llama.cpp's builds pick their kernels by ggml type)."""
    rule = engine_defaults(engine).get("mxfp4_moe_matmul")
    if not rule:
        return None
    generation = blackwell_generation(acc)
    dtypes = rule.get(f"{generation}_dtypes") if generation else None
    return tuple(dtypes or rule["dtypes"])
