"""Whether an attention backend vLLM picks takes the KV block asked (--block-size) for a model
without MLA on an NVIDIA card, from v0.18.0, where CacheConfig takes any block of 1 token or
more (engine_choices.block_size_problem) and the backend is picked with the block given.

vLLM's selector (platforms/cuda.py) tries FlashAttention, FlashInfer, Triton attention, then
FlexAttention (FlashInfer first on data-center Blackwell), keeping the first whose
validate_configuration passes; AttentionBackend.supports_block_size takes a block that is a
multiple of one of the backend's get_supported_kernel_block_sizes (vllm/v1/attention/
backend.py). FlashAttention and Triton attention declare MultipleOf(16); FlashInfer [16, 32,
64], then MultipleOf(16) (PR #36241), so a block of 48 runs on FlashInfer in 16-token kernel
blocks (v1/worker/utils.py select_common_block_size) with the pool paged in blocks of 48 as
asked: the split changes no memory, so nothing more is modelled. FlexAttention keeps the base
class's MultipleOf(1), any block, but only auto, float16 and bfloat16 caches and no attention
sinks (supports_sink: False; flex_attention.py, docs.vllm.ai v0.18.1; later releases not read).
So a block that is no multiple of 16 runs on FlexAttention with a 16-bit cache, and vLLM
finds no backend for it with an fp8 cache or a model with sinks (gpt-oss), refused here.
Nor does a block under 16 tokens run there: FlexAttention's Triton kernel does not compile for
it (its BLOCK_N floor is 16; vllm-project/vllm issue #41339, 'block_size < 16 silently falls
back to FLEX_ATTENTION, then crashes in Triton compilation', on the first forward pass), and
from PR #41363 (merged 2026-04-30) its get_supported_kernel_block_sizes is MultipleOf(16),
so the selector refuses it ('FLEX_ATTENTION: [block_size not supported]'). That PR also turns
away a block over 16 that is no multiple of it (24) with a 16-bit cache; the release it came
in is not read, so such a block is still taken here.

MLA blocks are vllm_mla_block.py's (a DeepSeek Sparse Attention model's refusal is its
sparse_block_problem, returned here); a hybrid's attention block, grown to its state pages, is
left unchecked, as are other vendors' backends.
"""

from __future__ import annotations

from ridgeline.deployment import Deployment
from ridgeline.layouts import FULL, WINDOW_MIXERS
from ridgeline.vllm_memory import parse_version
from ridgeline.vllm_mla_block import sparse_block_problem

BACKEND_PICKS_BLOCK_FROM = (0, 18)  # PR #35122: the block given is read by the selector
KERNEL_BLOCK_MULTIPLE = 16  # FlashAttention, FlashInfer, Triton attention: MultipleOf(16)
FLEX_CACHE_BYTES = 2  # FlexAttention's caches: auto, float16, bfloat16
FLEX_MIN_BLOCK = 16  # its Triton kernel's smallest block (issue #41339, PR #41363)


def attention_block_problem(dep: Deployment, version: str, block: int, said: str = "") -> str:
    """Why vLLM ``version`` finds no attention backend for ``dep`` paged in blocks of
    ``block`` tokens, or "": a block no multiple of 16 with an fp8 cache or sinks, or one
    under 16 with any cache (Llama-3.1-8B on an H100 with --block-size 24 and an fp8 cache, or
    --block-size 8); a DeepSeek Sparse Attention model's block off 64 on Hopper
    (vllm_mla_block.sparse_block_problem); ``said`` names the release as the caller's
    refusals do (default: 'vLLM ``version``')."""
    sparse = sparse_block_problem(dep, version, block, said)
    if sparse:  # DeepSeek Sparse Attention's one backend (vllm_mla_block)
        return sparse
    attention = dep.model.attention
    acc = dep.accelerator
    if parse_version(version) < BACKEND_PICKS_BLOCK_FROM or acc.vendor != "nvidia" \
            or block % KERNEL_BLOCK_MULTIPLE == 0 or attention is None \
            or attention.mla is not None \
            or any(layer.mixer not in (FULL, *WINDOW_MIXERS) for layer in dep.model.layers):
        return ""
    flex_lacks = ([f"keeps no {dep.kv.id} cache"] if dep.kv.bytes_per_element < FLEX_CACHE_BYTES
                  else []) + (["reads no attention sinks"] if attention.sinks else []) \
        + ([f"takes none under {FLEX_MIN_BLOCK} (its Triton kernel does not compile)"]
           if block < FLEX_MIN_BLOCK else [])
    if not flex_lacks:
        return ""  # FlexAttention runs it
    return (f"{said or f'vLLM {version}'} finds no attention backend for --block-size {block} "
            f"with {dep.model.name} on {acc.id}: FlashAttention, FlashInfer and Triton "
            f"attention take blocks of a multiple of {KERNEL_BLOCK_MULTIPLE} tokens, and "
            f"FlexAttention, which takes any block of {FLEX_MIN_BLOCK} tokens or more, "
            f"{' and '.join(flex_lacks)}; give a "
            f"--block-size that is a multiple of {KERNEL_BLOCK_MULTIPLE}")
