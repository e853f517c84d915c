"""What SGLang takes out of its KV budget for a multimodal model's runtime buffers, from
v0.5.18: the embedding cache, and a GPU feature-transport pool where one is on.

From 0.5.18 every tensor-parallel rank of a model SGLang counts as multimodal sizes its KV
budget as the free memory less what mem_fraction_static holds back less this reserve
(kv_cache_configurator.py mm_runtime_reservation_gb): the embedding cache,
SGLANG_VLM_CACHE_SIZE_MB (100 MiB by default; --sglang-vlm-cache-size-mb gives the
variable's value), and SGLANG_MM_FEATURE_CACHE_MB (1,024 MiB) where multimodal features travel
through a CUDA IPC or VMM pool (--mm-feature-transport, v0.5.16+; cpu where unset on one
node). Before 0.5.18 both were allocated after the pool was sized, out of the memory the
fraction holds back. From 0.5.20 Qwen3-VL on a Hopper card of 60 GiB or more swaps the two
where neither the variable nor the flag is set: no embedding cache, but a CUDA IPC pool on one
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
                      runtime_total_bytes: float | None = None,
                      vlm_cache_size_mb: int | None = None,
                      feature_transport: str | None = None) -> SGLangMMReserve:
    """SGLang ``version``'s reserve (None: the newest modelled) for ``model`` on each GPU of
    ``accelerator``: from v0.5.18, for a model it counts as multimodal, the embedding cache
    (SGLANG_VLM_CACHE_SIZE_MB, ``vlm_cache_size_mb``; 100 MiB unset: Gemma-3-27B with
    --enable-multimodal on one H100 loses 100 MiB of its pool, 512 MiB at
    --sglang-vlm-cache-size-mb 512) plus, where
    ``feature_transport`` is cuda_ipc or cuda_vmm, the 1,024 MiB feature pool (1,124 MiB).
    From v0.5.20 Qwen3-VL on a Hopper card of at least 60 GiB (nvidia-smi's, where known, else
    ``runtime_total_bytes``) keeps no cache while the variable is unset and, with no cache
    kept and no transport given, turns on a 1,024 MiB CUDA IPC pool on one node (``nodes``
    1), 3,072 MiB at a given --max-running-requests (``max_running_requests``) of 400 or more
    where that pool is CUDA IPC; 0 otherwise."""
    d = sglang_mm_data()
    release = sglang_release(version or str(sglang_data()["newest_checked"]))
    if release < sglang_release(d["from"]) or \
            not sglang_counts_multimodal(model, version, enable_multimodal):
        return SGLangMMReserve()
    q = d["hopper_qwen3_vl"]
    total = runtime_total_bytes or accelerator.memory_bytes
    hopper_rule = release >= sglang_release(q["from"]) \
        and model.architecture in q["architectures"] \
        and accelerator.vendor == "nvidia" and accelerator.family == q["family"] \
        and sglang_gpu_mem_bytes(accelerator, total)[0] / MIB >= q["least_mib"]
    cache_set = vlm_cache_size_mb is not None
    cache = float(vlm_cache_size_mb if vlm_cache_size_mb is not None
                  else q["embedding_cache_mib"] if hopper_rule else d["embedding_cache_mib"])
    transport = feature_transport or "cpu"
    rule_sets_ipc = hopper_rule and feature_transport is None and nodes == 1 and cache == 0
    if rule_sets_ipc:
        transport = "cuda_ipc"
    many = hopper_rule and transport == "cuda_ipc" and cache == 0 and \
        max_running_requests is not None and max_running_requests >= q["many_requests_from"]
    pool = 0.0 if transport not in d["feature_transport_flag"]["gpu_pools"] else float(
        q["many_requests_feature_transport_mib"] if many else d["feature_transport_mib"])
    if not cache + pool:
        return SGLangMMReserve(note=_hopper_off_note(model, q, nodes, cache_set, transport)
                               if hopper_rule else "")
    parts = [f"{cache:,.0f} MiB for the multimodal embedding cache ("
             + ("SGLANG_VLM_CACHE_SIZE_MB as --sglang-vlm-cache-size-mb gives it"
                if cache_set else "SGLANG_VLM_CACHE_SIZE_MB's default")
             + ")"] if cache else []
    if pool:
        why = (f"the CUDA IPC pool SGLang v{q['from']}+ turns on for {model.architecture} on a "
               f"{q['family'].title()} card of {q['least_mib'] // 1024} GiB or more"
               if rule_sets_ipc else f"the --mm-feature-transport {transport} pool")
        parts.append(f"{pool:,.0f} MiB for {why} (SGLANG_MM_FEATURE_CACHE_MB"
                     + (f", 3 GiB at --max-running-requests {max_running_requests:,}"
                        if many else "") + ")")
    off = ", its embedding cache off" if hopper_rule and not cache_set else ""
    return SGLangMMReserve(cache + pool, " and ".join(parts) + off
                           + f", out of the KV budget from SGLang v{d['from']}")


def _hopper_off_note(model: ModelSpec, q: dict[str, Any], nodes: int, cache_set: bool,
                     transport: str) -> str:
    """--explain's line where the Qwen3-VL rule leaves no reserve at all."""
    if nodes > 1 and transport == "cpu":
        return (f"no multimodal reserve: SGLang v{q['from']}+ keeps no embedding cache for "
                f"{model.architecture} on a {q['family'].title()} card, and no CUDA IPC pool "
                "across nodes")
    return (f"no multimodal reserve: SGLang v{q['from']}+ keeps no embedding cache for "
            f"{model.architecture} on a {q['family'].title()} card"
            + (" (--sglang-vlm-cache-size-mb 0)" if cache_set else "")
            + f", and --mm-feature-transport {transport} keeps features on the CPU")


def sglang_mm_transport_problem(version: str | None, feature_transport: str | None,
                                accelerator: Accelerator, nodes: int,
                                pipeline_parallel_size: int = 1) -> str:
    """Why SGLang ``version`` refuses --mm-feature-transport ``feature_transport`` here, or
    "": the flag came in v0.5.16 (cpu, cuda_ipc; cuda_vmm from v0.5.18); its GPU pools need
    an NVIDIA card, cuda_ipc one node (16 H100s: 2 nodes, refused), cuda_vmm no pipeline."""
    if feature_transport is None:
        return ""
    f = sglang_mm_data()["feature_transport_flag"]
    release = sglang_release(version or str(sglang_data()["newest_checked"]))
    if release < sglang_release(f["from"]):
        return (f"--mm-feature-transport came in SGLang v{f['from']}; v{version} has no such "
                "flag")
    choices = [cs for since, cs in f["choices"].items()
               if release >= sglang_release(since)][-1]
    if feature_transport not in choices:
        return (f"--mm-feature-transport {feature_transport} is not one SGLang "
                f"v{version or sglang_data()['newest_checked']} takes "
                f"({', '.join(choices)})")
    flag = f"--mm-feature-transport={feature_transport}"
    if feature_transport in f["gpu_pools"] and accelerator.vendor != "nvidia":
        return f"SGLang refuses {flag} on {accelerator.id}: it requires NVIDIA CUDA"
    if feature_transport == "cuda_ipc" and nodes > 1:
        return (f"SGLang refuses {flag} across {nodes} nodes: it only supports a single node "
                "(give cpu or cuda_vmm)")
    if feature_transport == "cuda_vmm" and pipeline_parallel_size > 1:
        return f"SGLang refuses {flag} with pipeline stages: it does not support them"
    return ""


def sglang_nodes(dep: Deployment) -> int:
    """The nodes (SGLang's --nnodes) ``dep``'s GPUs take: one host's GPUs (host_gpus: an
    HGX board's 8) a node; 16 H100s: 2."""
    return max(1, math.ceil(dep.num_gpus / host_gpus(dep.accelerator)))
