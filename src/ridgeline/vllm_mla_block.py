"""The KV block vLLM runs an MLA cache (DeepSeek-V3/R1, Kimi-K2) in, release by release:
the block the MLA kernel it picks forces, or the one asked."""

from __future__ import annotations

from ridgeline.deployment import Deployment
from ridgeline.ds_mla_cache import FP8_DS_MLA
from ridgeline.vllm_memory import parse_version, vllm_accounting

# vLLM's KV block for an MLA model (DeepSeek-V3/R1, Kimi-K2), read from every release's source
# on PyPI: 0.8.0–0.17.x vllm/platforms/cuda.py check_and_update_config overwrites the block for
# the MLA kernel it will pick (FlashMLA on Hopper: 64; CUTLASS MLA on B200/GB200, PRs #21626,
# #22738: 128; FlashInfer MLA from 0.15, PR #32339: 64); from 0.18.0 (PR #35122,
# platforms/interface.py update_block_size_for_backend) the backend is picked first and the
# block is the smallest it takes — FlashAttention MLA on Hopper 16 (FlashMLA, fp8 KV: 64),
# FlashInfer MLA on B200 32 — and a --block-size given is never overwritten.
MLA_FORCED_FROM = (0, 8)
CUTLASS_MLA_FROM = (0, 10, 1)
MLA_MULTIPLES_FROM = (0, 11, 1)  # a block that is a multiple of the kernel's is kept
CAPABILITY_FAMILY_FROM = (0, 13)  # B300 (10.3) takes B200's rule (is_device_capability_family)
FLASHINFER_MLA_FROM = (0, 15)
MLA_BACKEND_PICKS_FROM = (0, 18)
SM103 = ("b300",)  # compute capability 10.3 (NVIDIA's CUDA GPUs table); B200, GB200: 10.0
# A DeepSeek Sparse Attention model (index_topk: DeepSeek-V3.2) runs on FlashMLASparse, whose
# kernel blocks are 64 tokens whatever the cache dtype (get_supported_kernel_block_sizes:
# [64], vllm/v1/attention/backends/mla/flashmla_sparse.py). Before 0.18 the platform sets
# every such block to 64, a multiple of it too ('if use_sparse and cache_config.block_size
# != 64: ... Forcing kv cache block size to 64 for FlashMLASparse backend', platforms/cuda.py
# 0.11-0.17, CUDA's MLA branch on any card); from 0.18 the block given is kept and a block no
# multiple of 64 finds no backend on Hopper, FlashMLASparse being its one sparse MLA backend
# (a block asked on Blackwell, where FlashInfer MLA Sparse takes others, is left unchecked)
SPARSE_MLA_BLOCK = 64
# On Blackwell (compute capability 10.x) vLLM 0.18 on picks the sparse backend before the
# block (platforms/cuda.py _get_backend_priorities, major == 10): FlashInfer MLA Sparse
# first at 16 query heads a rank or fewer ('Prefer FlashInfer at low head counts (FlashMLA
# uses padding)', PR #33451), FlashMLASparse first above; FlashInfer MLA Sparse takes
# kernel blocks of 32 and 64 (flashinfer_mla_sparse.py get_supported_kernel_block_sizes:
# [32, 64]), qk_nope_head_dim 128 or 192, and the caches auto, float16, bfloat16, fp8,
# fp8_e4m3 — not fp8_ds_mla, the cache vLLM keeps a DeepSeek-V3.2's fp8 in
# (ds_mla_cache.py), which FlashMLASparse reads. The block is the smallest the backend takes.
FLASHINFER_SPARSE_MAX_HEADS = 16
FLASHINFER_SPARSE_BLOCK = 32
FLASHINFER_SPARSE_NOPE_DIMS = (128, 192)


def sparse_mla(dep: Deployment) -> bool:
    """Whether ``dep``'s model runs vLLM's sparse MLA (a cached latent with index_topk)."""
    attention = dep.model.attention
    latent = attention.cached_latent if attention is not None else None
    return latent is not None and latent.index_topk is not None


def blackwell_sparse_backend(dep: Deployment) -> tuple[str, int]:
    """The sparse MLA backend vLLM 0.18 on picks for ``dep`` on a Blackwell datacenter card
    and the smallest block it takes: FlashInfer MLA Sparse (32) for a bf16 cache at 16 query
    heads a rank or fewer (DeepSeek-V3.2 at TP8: 128 ÷ 8 = 16), else FlashMLASparse (64):
    at TP1 under -dp 8 (128 heads a rank), or in fp8_ds_mla's records."""
    attention = dep.model.attention
    latent = attention.mla if attention is not None else None
    if attention is None or latent is None:
        return "FlashMLASparse", SPARSE_MLA_BLOCK
    heads = attention.num_heads // dep.engine_tensor_parallel_size  # a rank's query heads
    if dep.kv.id != FP8_DS_MLA and heads <= FLASHINFER_SPARSE_MAX_HEADS \
            and latent.qk_nope_head_dim in FLASHINFER_SPARSE_NOPE_DIMS:
        return "FlashInfer MLA Sparse", FLASHINFER_SPARSE_BLOCK
    return "FlashMLASparse", SPARSE_MLA_BLOCK


def sparse_block_problem(dep: Deployment, version: str, block: int, said: str = "") -> str:
    """Why vLLM ``version`` (0.18 on) finds no backend for a DeepSeek Sparse Attention model
    on a Hopper card in blocks of ``block`` tokens (DeepSeek-V3.2 with --block-size 48), or
    ""; ``said`` names the release as the caller's refusals do."""
    acc = dep.accelerator
    if parse_version(version) < MLA_BACKEND_PICKS_FROM or not sparse_mla(dep) \
            or acc.vendor != "nvidia" or acc.family != "hopper" \
            or block % SPARSE_MLA_BLOCK == 0:
        return ""
    return (f"{said or f'vLLM {version}'} finds no attention backend for --block-size {block} "
            f"with {dep.model.name} on {acc.id}: a DeepSeek Sparse Attention model runs on "
            f"FlashMLASparse, whose kernel blocks are {SPARSE_MLA_BLOCK} tokens; give a "
            f"--block-size that is a multiple of {SPARSE_MLA_BLOCK}")


def mla_block_size(dep: Deployment, version: str, asked: int | None) -> tuple[int, str]:
    """The tokens per KV block vLLM ``version`` runs ``dep``'s MLA cache in, and why (empty
    where it is simply the one asked, or vLLM's default: 16, 64 from v0.34). Triton MLA
    (Ampere, Ada, GeForce Blackwell, ROCm without AITER) takes any block. From v0.18 an
    unasked block is the default where the backend takes it, else its smallest
    (get_preferred_block_size): from v0.34 64 on FlashAttention MLA, FlashMLA, FlashInfer MLA
    and the sparse backends, CUTLASS MLA's 128 alone above it."""
    v, acc = parse_version(version), dep.accelerator
    default = vllm_accounting(version).block_size
    mla = dep.model.attention.mla if dep.model.attention is not None else None
    fp8 = dep.kv.bytes_per_element < 2
    hopper = acc.vendor == "nvidia" and acc.family == "hopper"
    b200 = acc.vendor == "nvidia" and acc.family == "blackwell" and acc.form == "datacenter" \
        and (acc.id not in SM103 or v >= CAPABILITY_FAMILY_FROM)
    if v < MLA_FORCED_FROM or not (hopper or b200):
        return asked or default, ""
    if sparse_mla(dep) and (v < MLA_BACKEND_PICKS_FROM or (hopper and not asked)):
        if v >= MLA_BACKEND_PICKS_FROM or asked == SPARSE_MLA_BLOCK:
            return SPARSE_MLA_BLOCK, ("" if asked else f"vLLM {version} runs this sparse MLA "
                                      f"cache on FlashMLASparse, whose blocks are "
                                      f"{SPARSE_MLA_BLOCK} tokens")
        return SPARSE_MLA_BLOCK, (f"vLLM {version} runs this sparse MLA cache on "
                                  f"FlashMLASparse and sets its blocks to {SPARSE_MLA_BLOCK} "
                                  "tokens" + (f", not the {asked} asked" if asked else ""))
    if v >= MLA_BACKEND_PICKS_FROM:
        if asked:
            return asked, ""
        if sparse_mla(dep):  # Blackwell: Hopper's sparse blocks are set above
            name, block = blackwell_sparse_backend(dep)
            if default % block == 0:  # the default, where the backend takes it (v0.34+)
                return default, ""
            return block, (f"vLLM {version} runs this sparse MLA cache on {acc.id} on {name}, "
                           f"whose smallest block is {block} tokens")
        if hopper:
            return (64, f"vLLM {version} runs an fp8 MLA cache on FlashMLA, whose blocks are "
                    "64 tokens") if fp8 else (default, "")
        if mla is not None and mla.qk_nope_head_dim != 128:
            return 128, f"vLLM {version} runs this MLA cache on CUTLASS MLA, in blocks of 128"
        if default % 32 == 0:  # FlashInfer MLA takes 32 and 64: the default 64 (v0.34+)
            return default, ""
        return 32, (f"vLLM {version} runs MLA on {acc.id} on FlashInfer MLA, whose smallest "
                    "block is 32 tokens")
    kernel, name = 64, "FlashMLA"
    if b200:
        if v < CUTLASS_MLA_FROM:
            return asked or default, ""
        kernel, name = 128, "CUTLASS MLA"
        if v >= FLASHINFER_MLA_FROM and mla is not None and mla.qk_nope_head_dim == 128:
            kernel, name = 64, "FlashInfer MLA"
            if asked == 32:
                return asked, ""
    if asked and (asked == kernel or (v >= MLA_MULTIPLES_FROM and asked % kernel == 0)):
        return asked, ""
    return kernel, (f"vLLM {version} runs MLA on {acc.id} on {name} and sets its blocks to "
                    f"{kernel} tokens" + (f", not the {asked} asked" if asked else ""))
