"""What SGLang takes out of its KV budget for a multimodal model's runtime buffers: from
v0.5.18 the embedding cache, and a GPU feature-transport pool where one is on; in
v0.5.16-0.5.17 that pool alone.

From 0.5.18 every tensor-parallel rank of a model SGLang counts as multimodal sizes its KV
budget as the free memory less what mem_fraction_static holds back less this reserve
(kv_cache_configurator.py mm_runtime_reservation_gb): the embedding cache,
SGLANG_VLM_CACHE_SIZE_MB (100 MiB by default; --sglang-vlm-cache-size-mb gives the
variable's value), and SGLANG_MM_FEATURE_CACHE_MB (1,024 MiB by default;
--sglang-mm-feature-cache-mb) where multimodal features travel through a CUDA IPC or VMM pool
(--mm-feature-transport, v0.5.16+, or SGLang's own pick: cuda_ipc on one node in v0.5.17,
cuda_vmm across GB200/GB300 nodes for the models that opt in from v0.5.18). Before 0.5.18 the
embedding cache was allocated after the pool was sized, out of the memory the fraction holds
back, but the feature pool lands on the first GPU while the model loads, so the pool loses it
with no reservation. From 0.5.20 Qwen3-VL on a Hopper card of 60 GiB or more swaps the two
where neither the variable nor the flag is set: no embedding cache, but a CUDA IPC pool on one
node. --mm-preprocess-cache-size-mb (v0.5.18+) is host memory and costs the pool nothing; above
0 it keeps that rule's pool off. The rules are data (engines.json sglang.mm_reserve), each with
its source.
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
    transport: str = "cpu"  # --mm-feature-transport as SGLang settles it, where it builds a pool


@dataclass(frozen=True)
class SGLangMMBuffers:
    """SGLang's multimodal buffer settings: SGLANG_VLM_CACHE_SIZE_MB and
    SGLANG_MM_FEATURE_CACHE_MB (None: the variable unset), --mm-feature-transport (None: SGLang
    picks) and --mm-preprocess-cache-size-mb (None: unset; host memory)."""

    vlm_cache_size_mb: int | None = None
    feature_transport: str | None = None
    feature_cache_mb: int | None = None
    preprocess_cache_mb: int | None = None


def sglang_mm_data() -> dict[str, Any]:
    """engines.json sglang.mm_reserve."""
    data: dict[str, Any] = sglang_data()["mm_reserve"]
    return data


def _release(version: str | None) -> tuple[int, ...]:
    return sglang_release(version or str(sglang_data()["newest_checked"]))


def sglang_mm_transport(model: ModelSpec, accelerator: Accelerator, version: str | None = None,
                        enable_multimodal: bool = False, nodes: int = 1,
                        given: str | None = None) -> str:
    """--mm-feature-transport as SGLang ``version`` settles it: ``given``, else its own pick for
    a model it counts as multimodal on an NVIDIA card: cuda_ipc on one node in v0.5.17 (Gemma-3
    with --enable-multimodal on one H100), cuda_vmm from v0.5.18 across nodes of GB200/GB300
    for the model classes that opt in (Qwen3-VL on 8 GB200s: 2 nodes of 4), else cpu."""
    if given is not None:
        return given
    f = sglang_mm_data()["feature_transport_flag"]
    auto, release = f["auto"], _release(version)
    if release < sglang_release(f["from"]) or accelerator.vendor != "nvidia" \
            or not sglang_counts_multimodal(model, version, enable_multimodal):
        return "cpu"
    ipc = auto["cuda_ipc_one_node"]
    if nodes == 1:
        return "cuda_ipc" if sglang_release(ipc["from"]) <= release < \
            sglang_release(ipc["before"]) else "cpu"
    fabric = any(tag in f"{accelerator.id} {accelerator.name}".upper()
                 for tag in auto["device_name_tags"])
    opted_in = [a for since, names in auto["cuda_vmm_architectures"].items()
                if release >= sglang_release(since) for a in names]
    return "cuda_vmm" if fabric and model.architecture in opted_in else "cpu"


def sglang_mm_reserve(model: ModelSpec, accelerator: Accelerator, version: str | None = None,
                      enable_multimodal: bool = False, nodes: int = 1,
                      max_running_requests: int | None = None,
                      runtime_total_bytes: float | None = None,
                      buffers: SGLangMMBuffers = SGLangMMBuffers()) -> SGLangMMReserve:
    """SGLang ``version``'s reserve (None: the newest modelled) for ``model`` on each GPU of
    ``accelerator``: from v0.5.18, for a model it counts as multimodal, the embedding cache
    (SGLANG_VLM_CACHE_SIZE_MB, ``buffers.vlm_cache_size_mb``; 100 MiB unset: Gemma-3-27B with
    --enable-multimodal on one H100 loses 100 MiB of its pool, 512 MiB at
    --sglang-vlm-cache-size-mb 512) plus, where the transport (sglang_mm_transport) is cuda_ipc
    or cuda_vmm, the feature pool (SGLANG_MM_FEATURE_CACHE_MB, ``buffers.feature_cache_mb``;
    1,024 MiB unset: 1,124 MiB); in v0.5.16-v0.5.17 that pool alone (v0.5.17 picks cuda_ipc on
    one node: Gemma-3-27B loses 1,024 MiB).
    From v0.5.20 Qwen3-VL on a Hopper card of at least 60 GiB (nvidia-smi's, where known, else
    ``runtime_total_bytes``) keeps no cache while the variable is unset and, with no cache
    kept (nor --mm-preprocess-cache-size-mb above 0) and no transport given, turns on a 1,024
    MiB CUDA IPC pool on one node (``nodes`` 1), 3,072 MiB at a given --max-running-requests
    (``max_running_requests``) of 400 or more where that pool is CUDA IPC and
    SGLANG_MM_FEATURE_CACHE_MB unset; 0 otherwise."""
    d = sglang_mm_data()
    release, b = _release(version), buffers
    if release < sglang_release(d["feature_transport_flag"]["before_reservation"]["from"]) or \
            not sglang_counts_multimodal(model, version, enable_multimodal):
        return SGLangMMReserve()
    reserving = release >= sglang_release(d["from"])
    q = d["hopper_qwen3_vl"]
    total = runtime_total_bytes or accelerator.memory_bytes
    hopper_rule = release >= sglang_release(q["from"]) \
        and model.architecture in q["architectures"] \
        and accelerator.vendor == "nvidia" and accelerator.family == q["family"] \
        and sglang_gpu_mem_bytes(accelerator, total)[0] / MIB >= q["least_mib"]
    cache_set = b.vlm_cache_size_mb is not None
    cache = float(b.vlm_cache_size_mb if b.vlm_cache_size_mb is not None
                  else q["embedding_cache_mib"] if hopper_rule else d["embedding_cache_mib"])
    retention = cache > 0 or (b.preprocess_cache_mb or 0) > 0
    rule_sets_ipc = hopper_rule and b.feature_transport is None and nodes == 1 and not retention
    transport = "cuda_ipc" if rule_sets_ipc else sglang_mm_transport(
        model, accelerator, version, enable_multimodal, nodes, b.feature_transport)
    many = hopper_rule and transport == "cuda_ipc" and not retention and \
        b.feature_cache_mb is None and \
        max_running_requests is not None and max_running_requests >= q["many_requests_from"]
    pool = 0.0 if transport not in d["feature_transport_flag"]["gpu_pools"] else float(
        b.feature_cache_mb if b.feature_cache_mb is not None
        else q["many_requests_feature_transport_mib"] if many else d["feature_transport_mib"])
    if not reserving:
        cache = 0.0
    if not cache + pool:
        return SGLangMMReserve(note=_hopper_off_note(model, q, nodes, cache_set, transport)
                               if hopper_rule else "", transport=transport)
    parts = [f"{cache:,.0f} MiB for the multimodal embedding cache ("
             + ("SGLANG_VLM_CACHE_SIZE_MB as --sglang-vlm-cache-size-mb gives it"
                if cache_set else "SGLANG_VLM_CACHE_SIZE_MB's default")
             + ")"] if cache else []
    if pool:
        what, opt_out = _pool_why(model, accelerator, q, transport, rule_sets_ipc,
                                  b.feature_transport is not None, nodes)
        parts.append(f"{pool:,.0f} MiB for {what} (SGLANG_MM_FEATURE_CACHE_MB"
                     + (" as --sglang-mm-feature-cache-mb gives it"
                        if b.feature_cache_mb is not None else "")
                     + (f", 3 GiB at --max-running-requests {max_running_requests:,}"
                        if many else "") + opt_out + ")")
    off = ", its embedding cache off" if hopper_rule and not cache_set else ""
    when = (f", out of the KV budget from SGLang v{d['from']}" if reserving else
            f", made on the first GPU while SGLang v{version} loads the model, so its "
            f"profile finds it gone (no reservation before v{d['from']})")
    host = (f"; --mm-preprocess-cache-size-mb {b.preprocess_cache_mb:,} is host memory, not "
            "the pool's") if b.preprocess_cache_mb else ""
    return SGLangMMReserve(cache + pool, " and ".join(parts) + off + when + host, transport)


def _pool_why(model: ModelSpec, accelerator: Accelerator, q: dict[str, Any], transport: str,
              rule_sets_ipc: bool, given: bool, nodes: int) -> tuple[str, str]:
    """Which feature pool --explain names (the Qwen3-VL rule's, the flag's, or SGLang's own
    pick), and how to turn SGLang's pick off."""
    off = "; --mm-feature-transport cpu turns it off"
    if rule_sets_ipc:
        return (f"the CUDA IPC pool SGLang v{q['from']}+ turns on for {model.architecture} on "
                f"a {q['family'].title()} card of {q['least_mib'] // 1024} GiB or more", "")
    if given:
        return f"the --mm-feature-transport {transport} pool", ""
    if transport == "cuda_ipc":
        since = sglang_mm_data()["feature_transport_flag"]["auto"]["cuda_ipc_one_node"]["from"]
        return f"the CUDA IPC pool SGLang v{since} picks on one node", off
    return (f"the CUDA VMM pool SGLang picks for {model.architecture} across {nodes} "
            f"{accelerator.id.upper()} nodes", "; an IMEX channel assumed mounted" + off)


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


def sglang_mm_problem(model: ModelSpec, accelerator: Accelerator, version: str | None,
                      enable_multimodal: bool, nodes: int, pipeline_parallel_size: int = 1,
                      max_running_requests: int | None = None,
                      buffers: SGLangMMBuffers = SGLangMMBuffers()) -> str:
    """Why SGLang ``version`` would not start with these multimodal settings, or "": the
    transport given (sglang_mm_transport_problem), --mm-preprocess-cache-size-mb before
    v0.5.18, the cuda_vmm it picks itself beside pipeline stages (Qwen3-VL on 16 GB200s at
    PP2), and SGLANG_MM_FEATURE_CACHE_MB 0 where it builds a GPU pool."""
    problem = sglang_mm_transport_problem(version, buffers.feature_transport, accelerator, nodes,
                                          pipeline_parallel_size)
    if problem:
        return problem
    d = sglang_mm_data()
    since = d["preprocess_cache_flag"]["from"]
    if buffers.preprocess_cache_mb is not None and _release(version) < sglang_release(since):
        return (f"--mm-preprocess-cache-size-mb came in SGLang v{since}; v{version} has no such "
                "flag")
    transport = sglang_mm_reserve(model, accelerator, version, enable_multimodal, nodes,
                                  max_running_requests, buffers=buffers).transport
    if buffers.feature_transport is None and transport == "cuda_vmm" and \
            pipeline_parallel_size > 1:
        return (f"SGLang v{version or sglang_data()['newest_checked']} picks "
                f"--mm-feature-transport=cuda_vmm for {model.architecture} across {nodes} nodes "
                "and refuses it with pipeline stages (give --mm-feature-transport cpu)")
    if buffers.feature_cache_mb == 0 and transport in d["feature_transport_flag"]["gpu_pools"]:
        return (f"SGLang refuses SGLANG_MM_FEATURE_CACHE_MB 0 for its {transport} feature pool "
                "(the pool size must be positive; give cpu to --mm-feature-transport)")
    return ""


def sglang_nodes(dep: Deployment) -> int:
    """The nodes (SGLang's --nnodes) ``dep``'s GPUs take: one host's GPUs (host_gpus: an
    HGX board's 8) a node; 16 H100s: 2."""
    return max(1, math.ceil(dep.num_gpus / host_gpus(dep.accelerator)))
