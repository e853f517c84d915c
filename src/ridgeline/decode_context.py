"""vLLM's decode context parallelism (--decode-context-parallel-size, -dcp N): each sequence's
KV cache dealt out token by token over N ranks of the tensor-parallel group (token i on rank
i mod N), so that a cache TP copies onto every rank (MLA's one latent head; GQA's KV heads
past num_kv_heads ranks) is held once per N ranks instead.

Read in vLLM's PyPI source tarballs (0.10.1.1, 0.10.2, 0.11.0, 0.11.1, 0.12.0 … 0.32.0):
- the flag came in v0.10.2 (PR #23734; 0.10.1.1 has none); engine/arg_utils.py asserts
  tensor_parallel_size % decode_context_parallel_size == 0 (the DCP group reuses TP's GPUs);
- the V1 worker asserts every attention layer returns the softmax LSE for decode
  (gpu_model_runner.py "DCP requires attention impls to return the softmax lse"): in 0.10.2
  only FlashMLA, FlashAttention MLA and CUTLASS MLA do (Hopper, datacenter Blackwell); Triton
  MLA from 0.11.0; FlashAttention and FlashInfer, so GQA, from 0.11.1 (PR #24864); FlashInfer
  MLA, which 0.15–0.24 pick on a B200 for DeepSeek's and Kimi's MLA, from 0.25.0;
- GQA (config/model.py verify_with_parallel_config, 0.11.1 through 0.32): TP above the KV
  heads, N at most TP ÷ KV heads (the copies TP makes of each head), and N dividing the query
  heads per KV head;
- the MLA decode path asserted "DCP not support fp8 kvcache now." from 0.10.2 through 0.24.x;
- window layers: SlidingWindowSpec asserts "DCP not support sliding window." (through 0.32);
- the pool: each rank sizes its blocks as before; the scheduler's KV manager works in blocks
  of block_size × N tokens (kv_cache_manager.py, single_type_kv_cache_manager.py), and
  kv_cache_utils.py logs the tokens × N ("Multiplying the GPU KV cache size by the
  dcp_world_size N."; from 0.12 "… by the cp_world_size N (pcp_world_size 1 * dcp_world_size
  N)."; from 0.24 the count is max concurrency × max_model_len, each request ÷ N);
- a decode step, per attention layer: the queries all-gathered over the N ranks (head dim),
  attention over each rank's 1/N of the cache, the partial outputs reduce-scattered after an
  LSE all-gather (attention/ops/common.py cp_lse_ag_out_rs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ridgeline.layouts import FULL, NONE
from ridgeline.vllm_memory import parse_version

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.hardware import Accelerator
    from ridgeline.kvpool import KVPool
    from ridgeline.model import ModelSpec

# PR #23734 (FlashMLA, FlashAttention MLA, CUTLASS MLA): v0.10.2's highlights list 'Support
# Decode Context Parallel (DCP) for MLA (#23734)' (code index id 66898794207); the 0.10.1.1
# sdist has no flag
DCP_FROM = (0, 10, 2)
TRITON_MLA_FROM = (0, 11)  # Triton MLA returns the LSE (the MLA kernel off Hopper and B200)
# GQA: PR #24864 (FlashAttention) was merged on 2025-10-14 (commit ea97940d; listed in vLLM's
# weekly summary of 2025-10-17, code index id 8307325905), after v0.11.0 was out (released
# 2025-10-02, its highlights in code index id 66898794207 do not name it; coreweave/ml-containers
# PR #109 ships 0.11.0 on 2025-10-09), so v0.11.1 is the first release with it; PR #25438 added
# FlashInfer on top of it (docs.vllm.ai v0.11.2 flashinfer.py has its BatchDCPPrefillWrapper)
GQA_FROM = (0, 11, 1)
FLASHINFER_MLA_FROM = (0, 15)  # vllm_mla_block.py: B200's MLA kernel for DeepSeek and Kimi
FLASHINFER_MLA_LSE_FROM = (0, 25)  # … returns the LSE
FP8_MLA_FROM = (0, 25)  # 0.10.2–0.24.x: "DCP not support fp8 kvcache now."
CP_LOG_FROM = (0, 12)  # the log line names the cp_world_size (pcp × dcp)
FLAG = "--decode-context-parallel-size"


def dcp_layout_problem(model: ModelSpec, engine: str | None, tensor_parallel_size: int,
                       size: int) -> str:
    """Why ``size`` DCP ranks cannot run ``model`` at ``tensor_parallel_size`` whatever the
    release, or "": another engine, N not dividing TP, window layers, recurrent layers,
    GQA heads TP does not copy N times (Qwen3-235B's 4 KV heads at TP8: N up to 2)."""
    if size == 1:
        return ""
    if engine != "vllm":
        return (f"{FLAG} is vLLM's (-dcp); {engine or 'the engine-free arithmetic'} is not "
                "modelled with it")
    tp = tensor_parallel_size
    if tp % size:
        return (f"{FLAG} {size} does not divide --tensor-parallel-size {tp}: vLLM's DCP "
                "groups reuse the tensor-parallel GPUs (it asserts tp_size % dcp_size == 0)")
    att = model.attention
    mixers = {layer.mixer for layer in model.layers}
    if att is None or any(layer.window_tokens for layer in model.layers) \
            or mixers - {FULL, NONE}:
        return (f"{FLAG}: {model.name} has window or recurrent layers, which vLLM's DCP does "
                "not shard (SlidingWindowSpec asserts \"DCP not support sliding window.\"); "
                "ridgeline models it for full-attention models only")
    if att.mla:
        return ""
    kv = att.num_kv_heads
    if tp <= kv or size > tp // kv:
        copies = (f"which TP{tp} copies {tp // kv} times" if tp // kv > 1 else
                  f"which TP{tp} does not copy (one head a rank)" if tp == kv else
                  f"which TP{tp} splits, {kv // tp} a rank, without copies")
        return (f"{FLAG} {size}: {model.name} has {kv} KV heads, {copies}, and vLLM's DCP for "
                "GQA shards only the copies "
                f"(it asks tp_size > KV heads and dcp_size ≤ tp_size ÷ KV heads = "
                f"{tp // kv})")
    per_kv = att.num_heads // kv
    if per_kv % size:
        return (f"{FLAG} {size} does not divide {model.name}'s {per_kv} query heads per KV "
                "head, as vLLM requires for GQA")
    return ""


def dcp_release_problem(dep: Deployment, version: str, engine: str) -> str:
    """Why vLLM ``version`` (its ``engine``, V0 or V1) cannot run ``dep``'s DCP, or "": before
    v0.10.2, on V0, GQA before v0.11.1 or off NVIDIA, MLA off Hopper and B200 before v0.11
    (Triton MLA), B200's FlashInfer MLA before v0.25, an fp8 MLA cache before v0.25."""
    size = dep.decode_context_parallel_size
    if size == 1:
        return ""
    v = parse_version(version)
    if v < DCP_FROM:
        return (f"{FLAG} came in vLLM v{release_name(DCP_FROM)} (PR #23734); vLLM {version} has "
                "no such flag")
    if engine == "V0":
        return (f"{FLAG} is vLLM's V1 engine's (v0.10.2, PR #23734); the V0 engine asked "
                "(VLLM_USE_V1=0) has no DCP")
    att, acc = dep.model.attention, dep.accelerator
    assert att is not None  # dcp_layout_problem refused a model without attention
    if not att.mla:
        if v < GQA_FROM:
            return (f"{FLAG} for GQA (no MLA) came in vLLM v{release_name(GQA_FROM)} (PR #24864, "
                    f"FlashAttention); vLLM {version} shards only an MLA cache")
        if acc.vendor != "nvidia":
            return (f"{FLAG} for GQA needs vLLM's FlashAttention or FlashInfer backend, whose "
                    f"decode returns the softmax LSE DCP merges by; {acc.id}'s backends do not")
        return ""
    fast = fast_mla_kernel(acc)
    if not fast and v < TRITON_MLA_FROM:
        return (f"{FLAG} on {acc.id}: vLLM {version} runs MLA there on Triton MLA, which "
                "returns no softmax LSE for DCP to merge by until v0.11.0 (v0.10.2 has it on "
                "FlashMLA and CUTLASS MLA: Hopper, B200)")
    if acc.form == "datacenter" and acc.family == "blackwell" and att.mla.qk_nope_head_dim \
            == 128 and FLASHINFER_MLA_FROM <= v < FLASHINFER_MLA_LSE_FROM:
        return (f"{FLAG} on {acc.id}: vLLM {version} runs {dep.model.name}'s MLA on FlashInfer "
                "MLA, which returns no softmax LSE for DCP to merge by until v0.25.0, and "
                "vLLM stops at start-up (another --attention-backend is not modelled)")
    if dep.kv.bytes_per_element < 2 and v < FP8_MLA_FROM:
        return (f"{FLAG} with an fp8 MLA cache: vLLM {version} asserts \"DCP not support fp8 "
                "kvcache now.\" (lifted in v0.25.0); use --kv-dtype auto")
    return ""


def release_name(release: tuple[int, ...]) -> str:
    """A release tuple as vLLM names it: (0, 11, 1) is "0.11.1"."""
    return ".".join(str(part) for part in release)


def fast_mla_kernel(acc: Accelerator) -> bool:
    """Hopper and datacenter Blackwell, where vLLM v0.10.2 ran MLA on a kernel returning the
    LSE DCP needs (FlashMLA, CUTLASS MLA); elsewhere Triton MLA (vllm_mla_block.py)."""
    return acc.vendor == "nvidia" and (acc.family == "hopper" or (
        acc.family == "blackwell" and acc.form == "datacenter"))


def dcp_exchange_bytes(dep: Deployment, tokens: int) -> float:
    """Bytes one attention layer's DCP exchange moves for ``tokens`` queries: the queries of
    the N ranks' heads gathered (MLA's absorbed query, kv_lora_rank + rope dims a head;
    GQA's head_dim), the same size of partial outputs reduce-scattered back; the LSEs are
    one number a head. DeepSeek-V3 at TP8 DCP8, 64 decodes: 64 × 128 heads × 576 × 2 B ≈
    9.4 MB, priced as one all-reduce of it (parallel.exchange_time_s). N counts the engine's
    ranks (an MI250's dies), so the heads are a rank's of its --tensor-parallel-size."""
    att = dep.model.attention
    if dep.decode_context_parallel_size == 1 or att is None:
        return 0.0
    heads = att.num_heads / dep.engine_tensor_parallel_size * dep.decode_context_parallel_size
    width = att.mla.kv_lora_rank + att.mla.qk_rope_head_dim if att.mla else att.head_dim
    return tokens * heads * width * 2  # bf16 activations


def dcp_log_line(pool: KVPool, size: int) -> str:
    """The line vLLM logs as it multiplies its pool's tokens by ``size`` DCP ranks, or ""
    (no DCP; v0.24 and later count the tokens from the concurrency, each request ÷ N)."""
    acc = pool.accounting
    if size == 1 or acc is None or acc.tokens_from_concurrency:
        return ""
    said = (f"cp_world_size {size} (pcp_world_size 1 * dcp_world_size {size})"
            if parse_version(acc.version) >= CP_LOG_FROM else f"dcp_world_size {size}")
    return f"Multiplying the GPU KV cache size by the {said}."


def dcp_caution(dep: Deployment) -> str:
    """What the step cost leaves out of -dcp, or "" without it: each attention layer's query
    gather and output scatter are priced (``dcp_exchange_bytes``), not a prefill's gather of
    its cached context from the N ranks, nor the piecewise CUDA graphs some releases fall
    back to under DCP."""
    n = dep.decode_context_parallel_size
    if n == 1:
        return ""
    return (f"-dcp {n}: each rank reads 1/{n} of every sequence's cache, and each attention "
            "layer's gather of the queries and scatter of the outputs over the DCP ranks is "
            "priced as one all-reduce of the gathered queries; a prefill chunk's gather of "
            "its cached context from the ranks, and any CUDA graphs vLLM drops under DCP, are "
            "not priced")
