"""The KV block vLLM runs an MLA cache (DeepSeek-V3/R1, Kimi-K2) in, release by release:
the block the MLA kernel it picks forces, or the one asked."""

from __future__ import annotations

from ridgeline.deployment import Deployment
from ridgeline.vllm_memory import parse_version

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


def mla_block_size(dep: Deployment, version: str, asked: int | None) -> tuple[int, str]:
    """The tokens per KV block vLLM ``version`` runs ``dep``'s MLA cache in, and why (empty
    where it is simply the one asked, or vLLM's default 16). Triton MLA (Ampere, Ada, GeForce
    Blackwell, ROCm without AITER) takes any block."""
    v, acc, default = parse_version(version), dep.accelerator, 16
    mla = dep.model.attention.mla if dep.model.attention is not None else None
    fp8 = dep.kv.bytes_per_element < 2
    hopper = acc.vendor == "nvidia" and acc.family == "hopper"
    b200 = acc.vendor == "nvidia" and acc.family == "blackwell" and acc.form == "datacenter" \
        and (acc.id not in SM103 or v >= CAPABILITY_FAMILY_FROM)
    if v < MLA_FORCED_FROM or not (hopper or b200):
        return asked or default, ""
    if v >= MLA_BACKEND_PICKS_FROM:
        if asked:
            return asked, ""
        if hopper:
            return (64, f"vLLM {version} runs an fp8 MLA cache on FlashMLA, whose blocks are "
                    "64 tokens") if fp8 else (default, "")
        if mla is not None and mla.qk_nope_head_dim != 128:
            return 128, f"vLLM {version} runs this MLA cache on CUTLASS MLA, in blocks of 128"
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
