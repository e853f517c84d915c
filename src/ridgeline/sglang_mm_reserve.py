"""What SGLang takes out of its KV budget for a multimodal model's runtime buffers, from
v0.5.18: the embedding cache, and a GPU feature-transport pool where one is on.

From 0.5.18 every tensor-parallel rank of a model SGLang counts as multimodal sizes its KV
budget as the free memory less what mem_fraction_static holds back less this reserve
(kv_cache_configurator.py mm_runtime_reservation_gb): the embedding cache,
SGLANG_VLM_CACHE_SIZE_MB (100 MiB by default; the environment variable is not read here), and
SGLANG_MM_FEATURE_CACHE_MB (1,024 MiB) where multimodal features travel through a CUDA IPC or
VMM pool (--mm-feature-transport, cpu by default). Before 0.5.18 the cache was allocated after
the pool was sized, out of the memory the fraction holds back. From 0.5.20 Qwen3-VL on a
Hopper card of 60 GiB or more swaps the two: no embedding cache, but a CUDA IPC pool on one
node. The rules are data (engines.json sglang.mm_reserve), each with its source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ridgeline.deployment import Deployment
from ridgeline.hardware import Accelerator
from ridgeline.model import ModelSpec
from ridgeline.parallel import host_gpus
from ridgeline.sglang_memory import (
    sglang_counts_multimodal,
    sglang_data,
    sglang_gpu_mem_bytes,
    sglang_release,
)

MIB = 2**20


@dataclass(frozen=True)
class SGLangMMReserve:
    """The MiB one GPU's KV budget loses for a multimodal model's buffers, and what they are."""

    mib: float = 0.0
    note: str = ""  # for --explain; "" where there is no reserve


def sglang_mm_data() -> dict[str, Any]:
    """engines.json sglang.mm_reserve."""
    data: dict[str, Any] = sglang_data()["mm_reserve"]
    return data


def sglang_mm_reserve(model: ModelSpec, accelerator: Accelerator, version: str | None = None,
                      enable_multimodal: bool = False, nodes: int = 1,
                      max_running_requests: int | None = None,
                      runtime_total_bytes: float | None = None) -> SGLangMMReserve:
    """SGLang ``version``'s reserve (None: the newest modelled) for ``model`` on each GPU of
    ``accelerator``: from v0.5.18, for a model it counts as multimodal, the 100 MiB embedding
    cache (Gemma-3-27B with --enable-multimodal on one H100: 100 MiB fewer for its pool);
    from v0.5.20 Qwen3-VL on a Hopper card of at least 60 GiB (nvidia-smi's, where known,
    else ``runtime_total_bytes``) keeps no cache but a 1,024 MiB CUDA IPC pool on one node
    (``nodes`` 1), 3,072 MiB at a given --max-running-requests (``max_running_requests``) of
    400 or more, and nothing across nodes; 0 otherwise."""
    d = sglang_mm_data()
    release = sglang_release(version or str(sglang_data()["newest_checked"]))
    if release < sglang_release(d["from"]) or \
            not sglang_counts_multimodal(model, version, enable_multimodal):
        return SGLangMMReserve()
    q = d["hopper_qwen3_vl"]
    total = runtime_total_bytes or accelerator.memory_bytes
    if release >= sglang_release(q["from"]) and model.architecture in q["architectures"] \
            and accelerator.vendor == "nvidia" and accelerator.family == q["family"] \
            and sglang_gpu_mem_bytes(accelerator, total)[0] / MIB >= q["least_mib"]:
        if nodes > 1:
            return SGLangMMReserve(note=f"no multimodal reserve: SGLang v{q['from']}+ keeps no "
                                   f"embedding cache for {model.architecture} on a "
                                   f"{q['family'].title()} card, and no CUDA IPC pool across "
                                   "nodes")
        many = max_running_requests is not None and \
            max_running_requests >= q["many_requests_from"]
        mib = float(q["many_requests_feature_transport_mib"] if many
                    else d["feature_transport_mib"])
        return SGLangMMReserve(mib, (
            f"{mib:,.0f} MiB for the CUDA IPC feature-transport pool SGLang v{q['from']}+ "
            f"turns on for {model.architecture} on a {q['family'].title()} card of "
            f"{q['least_mib'] // 1024} GiB or more (SGLANG_MM_FEATURE_CACHE_MB"
            + (f", 3 GiB at --max-running-requests {max_running_requests:,}" if many else "")
            + "), its embedding cache off, out of the KV budget"))
    mib = float(d["embedding_cache_mib"])
    return SGLangMMReserve(mib, (
        f"{mib:,.0f} MiB for the multimodal embedding cache (SGLANG_VLM_CACHE_SIZE_MB's "
        f"default; the variable is not read), out of the KV budget from SGLang v{d['from']}"))


def sglang_nodes(dep: Deployment) -> int:
    """The nodes (SGLang's --nnodes) ``dep``'s GPUs take: one host's GPUs (host_gpus: an
    HGX board's 8) a node; 16 H100s: 2."""
    return max(1, math.ceil(dep.num_gpus / host_gpus(dep.accelerator)))
