"""The adapters' matmuls in a step under vLLM's or SGLang's LoRA: the "lora adapters" part of
the step cost (cost.step_terms), from the per-GPU shapes lora_slots.engine_lora_modules gives.

vLLM runs each adapted module's base matmul, then punica's two Triton kernels on the same
input (vllm/lora/punica_wrapper/punica_gpu.py add_lora_linear): lora_shrink multiplies each
token's x by its adapter's A of every slice into a float32 buffer (in → rank), lora_expand
the buffer by B and adds it into the base output (rank → out). Per token and module that is
2 FLOPs per element of one adapter's A and B on the GPU, 2·r·(slices × in + out): Llama-3.1-8B's
qkv_proj at rank 64, TP1, 2·64·(3 × 4,096 + 6,144) = 2.36 MFLOP. Each kernel gives every
slot its own thread blocks, which exit where no token of the step maps to it
(lora_shrink_op.py), so a step reads the A and B of the adapters its requests use: with every
request its own, min(batch, max_loras). The embedding's A is looked up by token (F.embedding
over lora_a_stacked_2d, vocal_parallel_embedding.py), only B expanded; the lm_head's run on
the logits rows, as the base head does. A MoE layer's experts run theirs on every (token,
chosen expert) pair, tokens × top_k columns, sorted by adapter then expert (fused_moe.py
moe_lora_align_block_size), so each active adapter reads the A and B of the experts its
share of the tokens touches: moe.py's expected count for tokens ÷ active adapters. SGLang
runs the same A and B per module (its triton sgemm_lora_a and sgemm_lora_b, or the csgmv
backend over chunks of one adapter's tokens), its shrink's buffer in the input's dtype,
written once and read once (engines.json sglang.lora step_source): only the buffer's bytes
differ.

Each adapted module also launches its kernels: two weight matmuls, the A's and the B's, one
launch each whatever its slices (Q, K and V, or gate and up, are an axis of the one grid),
priced as the base model's matmuls are, at the profile's cost per weight matmul
(``lora_launches``; launches.deployment_matmuls adds them): Llama-3.1-8B's 32 layers × 4
modules × 2, the lm_head's 2 and the embedding's one expand, 259 a step, 3.7 ms at vLLM's
14.3 µs. vLLM captures them in its decode CUDA graphs, as it does the base matmuls.
Under --fully-sharded-loras and TP each adapted linear also gathers or all-reduces the
shrink's buffer: the step's "lora collectives", on the link (lora_collectives.py).
"""

from __future__ import annotations

from functools import lru_cache

from ridgeline.deployment import Deployment
from ridgeline.lora_shapes import LoRAModule
from ridgeline.lora_slots import engine_lora_modules
from ridgeline.moe import expected_experts_touched
from ridgeline.sglang_lora import sglang_lora_data

LORA_OP = "lora adapters"  # the step's part (cost.py), as --explain names it
INPUT_BYTES = 2  # x and the base output: fp16 or bf16 (lora_shrink asserts either)
BUFFER_BYTES = 4  # the shrink's buffer: float32 (punica_gpu.py, triton-lang/triton#1387)
# the buffer is zeroed (lora_shrink_op.py output_tensor.zero_()), written by the shrink and
# read by the expand
BUFFER_PASSES = 3
# the expand reads the base output and writes it back (add_inputs=True: kernel_utils.py
# do_expand_kernel loads the tile, adds, stores)
OUTPUT_PASSES = 2
# an adapted module's kernels: vLLM's lora_shrink and lora_expand (punica_gpu.py
# add_lora_linear), each one launch with the slices a grid axis (lora_shrink_op.py,
# lora_expand_op.py: grid (tiles, NUM_SLICES, active LoRAs)); a MoE layer's experts, their
# fused_moe_lora shrink and expand (fused_moe_lora_op.py); SGLang's sgemm_lora_a then
# qkv_lora_b, gate_up_lora_b or sgemm_lora_b (triton), or csgmv's chunked shrink then expand.
# The shrink's zero-fill of its buffer goes uncounted, as the base matmuls' norms do: the
# profile's cost per matmul was fitted with them
LORA_MATMULS = 2
EMBEDDING_MATMULS = 1  # the embedding's A is looked up (F.embedding), only its B expanded


def lora_step_work(dep: Deployment, tokens: int, rows: int
                   ) -> tuple[tuple[str, float, float, int], ...]:
    """(LORA_OP, FLOPs, bytes, modules) per kind of adapted module on one GPU for a step of
    ``tokens`` tokens in ``rows`` requests (the lm_head's columns): the active adapters' A
    and B (``LoRASettings.active``), the input the shrink reads, its buffer, the output the
    expand adds into. () without --enable-lora, or where no request names an adapter
    (--active-loras 0): vLLM then skips the kernels (lora_kernel_metadata.py no_lora_flag_cpu,
    checked inside lora_shrink and lora_expand)."""
    lora = dep.lora
    if lora is None:
        return ()
    active = lora.active(rows)
    if not active:
        return ()
    return tuple((LORA_OP, *_work(dep, m, active, tokens, rows), m.count)
                 for m in step_modules(dep))


def _work(dep: Deployment, m: LoRAModule, active: int, tokens: int, rows: int
          ) -> tuple[float, float]:
    """``module_work`` on the module's columns: the logits rows for the lm_head, tokens ×
    top_k for a MoE layer's experts (with the experts each adapter's tokens touch), the
    step's tokens elsewhere; the shrink's buffer as the engine keeps it (lora_buffer)."""
    buffer_bytes, buffer_passes = lora_buffer(dep.engine)
    if m.experts == 1:
        return module_work(m, active, rows if m.name == "lm_head" else tokens,
                           buffer_bytes=buffer_bytes, buffer_passes=buffer_passes)
    moe = dep.model.moe
    assert moe is not None
    touched = expected_experts_touched(m.experts, moe.experts_per_token, tokens / active)
    return module_work(m, active, tokens * moe.experts_per_token, touched,
                       buffer_bytes=buffer_bytes, buffer_passes=buffer_passes)


def lora_launches(dep: Deployment) -> int:
    """The LoRA matmul kernels a forward pass launches on one GPU where a request names an
    adapter: ``LORA_MATMULS`` per adapted module (the embedding's ``EMBEDDING_MATMULS``) over
    every layer. 0 without --enable-lora or with --active-loras 0 (no_lora_flag_cpu: vLLM
    launches none). Llama-3.1-8B: 32 × 4 × 2 + 2 + 1 = 259."""
    lora = dep.lora
    if lora is None or not lora.active(1):
        return 0
    return sum(m.count * (EMBEDDING_MATMULS if m.name == "embed_tokens" else LORA_MATMULS)
               for m in step_modules(dep))


@lru_cache(maxsize=256)
def step_modules(dep: Deployment) -> tuple[LoRAModule, ...]:
    """The modules of the deployment's own settings, once a deployment (the step's hot path)."""
    assert dep.lora is not None
    return engine_lora_modules(dep, dep.lora)


def lora_buffer(engine: str) -> tuple[int, int]:
    """The shrink's buffer between A and B: bytes an element and passes over it (vLLM's
    punica: float32, zeroed, written, read; SGLang's: the input's dtype, written, read)."""
    if engine == "sglang":
        data = sglang_lora_data()
        return int(data["buffer_bytes"]), int(data["buffer_passes"])
    return BUFFER_BYTES, BUFFER_PASSES


def module_work(m: LoRAModule, active: int, columns: int, experts_read: float = 1.0,
                buffer_bytes: int = BUFFER_BYTES, buffer_passes: int = BUFFER_PASSES
                ) -> tuple[float, float]:
    """One module's FLOPs and bytes over ``columns`` tokens (a MoE layer's: routed pairs)
    with ``active`` adapters, each reading ``experts_read`` experts' A and B, the shrink's
    buffer ``buffer_passes`` passes of ``buffer_bytes`` an element: the embedding's A looked
    up by row, not read whole, and not multiplied."""
    e = m.element_bytes
    if m.name == "embed_tokens":
        weights = float(active * m.b_elements * e + columns * m.a_rank * e)  # B; A rows looked up
        flops = 2.0 * columns * m.b_elements
        shrink_in = 0.0  # the looked-up rows are the expand's input
    else:
        weights = active * experts_read * (m.a_elements + m.b_elements) * e
        flops = 2.0 * columns * (m.a_elements + m.b_elements)
        # x read once: its slices, one grid, re-read it from the L2 (a lower bound)
        shrink_in = m.input_width * INPUT_BYTES
    buffer = buffer_passes * m.slices * m.a_rank * buffer_bytes if shrink_in else 0.0
    out = OUTPUT_PASSES * m.output_width * INPUT_BYTES
    return flops, weights + columns * (shrink_in + buffer + out)
