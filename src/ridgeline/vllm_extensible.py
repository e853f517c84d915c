"""vLLM 0.34's extensible KV cache: the pool sized from the memory measured after warm-up.

From v0.34, on CUDA and ROCm, vLLM reserves the cache's address space at start-up and commits
its pages only after warm-up and CUDA-graph capture (v1/worker/extensible_kv_cache.py). Its
profile still runs, as 0.33's, but sizes only the reservation; the pool is then

    min(total × gpu_memory_utilization − non_kv_used, headroom − margin) − max(peak, growth)

where gpu_memory_utilization is 1.0 unless given, non_kv_used is everything resident after
warm-up (weights, non-torch growth, seat buffers, workspaces and the graphs as captured),
headroom the memory free at the start-up snapshot less it, margin max(1 GiB, 0.75 × the
transient peak) (3 GiB floor on ROCm), peak the allocated transient of the profile and
warm-up steps and growth torch's reservation growth over the sizing steps; the result is cut
to whole blocks whose per-layer segments map whole VMM granules. ridgeline writes it as
0.33's budget at the new fraction, less what the headroom term keeps free past it
(``kept_free_bytes``). The constants are engines.json ``vllm.extensible_kv_cache``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ridgeline.datafiles import load_data
from ridgeline.deployment import Deployment
from ridgeline.units import GIB, MIB, plural
from ridgeline.vllm_memory import ACTIVATION_BYTES, VLLMAccounting, parse_version

if TYPE_CHECKING:
    from ridgeline.memory import EngineSettings


def extensible_rule() -> dict[str, Any]:
    """engines.json ``vllm.extensible_kv_cache``: the constants, with their sources."""
    rule: dict[str, Any] = load_data("engines.json")["vllm"]["extensible_kv_cache"]
    return rule


def extensible_problem(dep: Deployment, s: EngineSettings, acc: VLLMAccounting) -> str:
    """Why vLLM ``acc.version`` refuses --[no-]enable-extensible-kv-cache as ``s`` gives it,
    or "": a release before v0.34 has no such flag ('unrecognized arguments'); on a card that
    is not CUDA or ROCm, or with --kv-cache-memory-bytes, vLLM stops on --enable-…
    ('enable_extensible_kv_cache: it is only supported on CUDA and ROCm', config/vllm.py)."""
    if s.extensible_kv_cache is None:
        return ""
    since = str(extensible_rule()["from"])
    if parse_version(acc.version) < parse_version(since):
        flag = "enable" if s.extensible_kv_cache else "no-enable"
        return (f"--{flag}-extensible-kv-cache came in vLLM {since}: vLLM {acc.version} has "
                "no such flag and sizes its pool from the profile")
    if not s.extensible_kv_cache:
        return ""
    if dep.accelerator.vendor not in extensible_rule()["vendors"]:
        return (f"--enable-extensible-kv-cache: vLLM {acc.version} supports the extensible KV "
                f"cache only on CUDA and ROCm, not on {dep.accelerator.id}, and stops")
    if s.kv_cache_memory_bytes is not None:
        return (f"--enable-extensible-kv-cache with --kv-cache-memory-bytes: vLLM {acc.version} "
                "sizes the extensible cache from measured memory, which a set pool overrides, "
                "and stops; give one of them")
    why = connector_unsupported(s.kv_connector, dep.accelerator.vendor)
    if why:
        return (f"--enable-extensible-kv-cache with {s.kv_connector}: vLLM {acc.version} "
                f"stops, as {why}")
    return ""


def connector_unsupported(connector: str, vendor: str) -> str:
    """Why vLLM 0.34 cannot run the extensible KV cache beside ``connector`` on a ``vendor``
    card, or "" (config/vllm.py _resolve_extensible_kv_cache, by the connector's
    kv_cache_access: engines.json ``connector_access``): one that shares the cache through
    legacy CUDA IPC (LMCacheMPConnector) anywhere, and on ROCm one that registers it with UCX
    or RDMA (NixlConnector, MooncakeConnector)."""
    access = extensible_rule()["connector_access"].get(connector, [])
    if "legacy_ipc" in access:
        return f"{connector} shares the KV cache through legacy CUDA IPC"
    if vendor == "amd" and access:
        return f"on ROCm, UCX and RDMA cannot yet register the driver-mapped memory {connector} needs"
    return ""


def connector_keeps_off(connector: str, vendor: str) -> bool:
    """Whether vLLM 0.34 leaves the extensible KV cache off beside ``connector`` on a
    ``vendor`` card when --[no-]enable-extensible-kv-cache is not given, on the common host:
    where it is unsupported (``connector_unsupported``), and on NVIDIA beside a connector that
    exports the cache as FABRIC handles (NixlConnector), which needs an IMEX channel that
    hosts outside multi-node NVLink systems lack (with one it stays on: ridgeline cannot see
    the host, and sizes for the host without)."""
    if connector_unsupported(connector, vendor):
        return True
    return vendor == "nvidia" and "exports_fabric" in \
        extensible_rule()["connector_access"].get(connector, [])


def extensible_sizing(dep: Deployment, s: EngineSettings, acc: VLLMAccounting) -> bool:
    """Whether vLLM ``acc.version`` sizes ``dep``'s pool with the extensible KV cache: its
    default from v0.34 on an NVIDIA or AMD card, unless --no-enable-extensible-kv-cache,
    --kv-cache-memory-bytes or the KV connector (``connector_keeps_off``: a split's
    NixlConnector, unless --enable-extensible-kv-cache is given on NVIDIA) turns it off (then
    the profile sizes it, as in 0.33)."""
    vendor = dep.accelerator.vendor
    return acc.extensible_kv_cache and s.extensible_kv_cache is not False \
        and s.kv_cache_memory_bytes is None and vendor in extensible_rule()["vendors"] \
        and not (s.extensible_kv_cache is None and connector_keeps_off(s.kv_connector, vendor))


def profiled_settings(s: EngineSettings) -> EngineSettings:
    """``s`` with the extensible KV cache switched off, as 0.33's rules size the same run
    (--no-enable-extensible-kv-cache), for the comparisons fit and plan give: a whole-card
    --gpu-memory-utilization, which those rules refuse at start-up
    (``startup_budget_problem``), read as unset (the release's default, 0.92)."""
    from dataclasses import replace

    asked = s.gpu_memory_utilization
    return replace(s, extensible_kv_cache=False,
                   gpu_memory_utilization=None if asked is not None and asked >= 1.0 else asked)


def extensible_fraction() -> float:
    """The gpu_memory_utilization the extensible KV cache reads where none is given: 1.0
    (CacheConfig.resolved_gpu_memory_utilization; 0.92 otherwise)."""
    return float(extensible_rule()["gpu_memory_utilization"])


def start_context_bytes(dep: Deployment) -> float:
    """The memory a GPU holds before vLLM's start-up snapshot (CUDA context, cuBLAS handles,
    NCCL's buffers at TP > 1), which the headroom term keeps out of the pool: an estimate,
    0.5 GiB at TP1 and 0.75 GiB past it (the start-up lines of 0.10-0.31 logs: 0.41-0.96 GiB)."""
    rule = extensible_rule()
    key = "start_context_tp_gib" if dep.tensor_parallel_size > 1 else "start_context_gib"
    return float(rule[key]) * GIB


STARTUP_CHECK_FROM = "0.9.2"  # the oldest wheel read with request_memory's check (V1 gpu_worker)


def startup_budget_problem(dep: Deployment, s: EngineSettings, acc: VLLMAccounting,
                           extensible: bool) -> str:
    """Why vLLM ``acc.version`` stops at start-up at the --gpu-memory-utilization ``s`` gives,
    or "": where the profile sizes the pool (not ``extensible``), its worker refuses a budget,
    total × the fraction, past the memory free at its start-up snapshot ('Free memory on
    device … on startup is less than desired GPU memory utilization': V1 gpu_worker.py
    init_device in the 0.9.2 and 0.10.0 wheels, v1/worker/utils.py request_memory in 0.34.0's,
    skipped there under the extensible cache). The CUDA context alone holds memory before that
    snapshot (``start_context_bytes``), so 1.0 always stops; below it the context is an
    estimate, and nothing is refused. NVIDIA and AMD cards (the GPU worker's) only."""
    asked = s.gpu_memory_utilization
    if asked is None or asked < 1.0 or extensible or acc.engine != "V1" \
            or parse_version(acc.version) < parse_version(STARTUP_CHECK_FROM) \
            or dep.accelerator.vendor not in extensible_rule()["vendors"]:
        return ""
    if acc.extensible_kv_cache and connector_keeps_off(s.kv_connector, dep.accelerator.vendor) \
            and s.extensible_kv_cache is None and s.kv_cache_memory_bytes is None:
        sizing = (f"beside {s.kv_connector} vLLM {acc.version} keeps its extensible KV cache "
                  "off (without an IMEX channel on NVIDIA) and sizes the pool from its profile")
    else:
        sizing = f"vLLM {acc.version} sizes the pool from its profile"
    return (f"--gpu-memory-utilization {asked}: {sizing}, and stops at start-up: it asks "
            f"the whole {dep.accelerator.id}, more than is free once the CUDA context holds "
            "its share ('Free memory on device … is less than desired GPU memory "
            f"utilization'); give less, as its default {acc.gpu_memory_utilization:g}")


def sizing_margin_bytes(transient_peak_bytes: float, vendor: str) -> float:
    """The margin the headroom term keeps below the memory free after warm-up:
    max(1 GiB, 0.75 × the transient peak), a 3 GiB floor on ROCm (KV_CACHE_MARGIN_FLOOR_BYTES,
    KV_CACHE_MARGIN_FRACTION). A 1.84 GiB peak on an H100: 0.75 × 1.84 = 1.38 GiB."""
    rule = extensible_rule()
    floor = rule["margin_floor_rocm_gib"] if vendor == "amd" else rule["margin_floor_gib"]
    return max(float(floor) * GIB, float(rule["margin_fraction"]) * transient_peak_bytes)


def prompt_logprob_step_bytes(dep: Deployment, tokens: int) -> float:
    """The sizing warm-up's prompt-logprob stage: the step's hidden states (tokens × hidden ×
    2 B) beside one chunk of the model's bf16 logits, at most 1,024 rows × vocab × 2 B
    (prompt_logprob.py CHUNK_SIZE; top-k and a log-softmax gather on it, no fp32 copy).
    Llama-3.1-8B at 8,192 tokens: 8,192 × 4,096 × 2 + 1,024 × 128,256 × 2 B = 0.31 GiB."""
    rows = min(tokens, int(extensible_rule()["logprob_chunk_rows"]))
    model = dep.model
    return float(ACTIVATION_BYTES * (tokens * model.hidden_size + rows * model.vocab_size))


def kept_free_bytes(total_bytes: float, fraction: float, context_bytes: float,
                    margin_bytes: float) -> float:
    """What the headroom term keeps free past the budget total × gpu_memory_utilization: the
    memory held before the start-up snapshot and the margin, less what 1 − the fraction
    already leaves, never below 0. An H100 (79.18 GiB) at 1.0 with 0.5 GiB held and a 1.38 GiB
    margin: 1.88 GiB; at 0.92 (6.33 GiB left out): 0."""
    return max(0.0, context_bytes + margin_bytes - total_bytes * (1.0 - fraction))


def granule_cut_bytes(segments: int) -> float:
    """The most the pool loses to whole VMM granules: each of its ``segments`` (one a
    cache-holding layer) maps whole 2 MiB granules (blocks_within, physical_bytes_for), so
    at most one granule a segment; Llama-3.1-8B's 32 layers: 64 MiB."""
    return segments * float(extensible_rule()["granule_mib"]) * MIB


def extensible_caution(version: str, profiled_pool_gib: float, profiled_conversations: int,
                        context: int, per_gpu: str = "per GPU") -> str:
    """What `fit` says, once, of a pool vLLM ``version`` sizes with its extensible KV cache:
    its rule is read from the code but no start-up log has checked it, so the line gives what
    0.33's rules (--no-enable-extensible-kv-cache: the profile sizes it) make of the same run,
    ``profiled_pool_gib`` per GPU holding ``profiled_conversations`` of ``context`` tokens
    (``per_gpu``: the rows' own words, "per GPU (2 dies added)" on an MI250).
    Llama-3.1-8B on an H100 at 8,000 tokens: 59.03 GiB and 60 here, 54.64 GiB and 55 so."""
    return (f"vLLM {version}'s extensible KV cache is unchecked against a start-up log; "
            f"0.33's rules (--no-enable-extensible-kv-cache){PROFILED_GIVE}"
            f"{profiled_pool_gib:,.2f} GiB {per_gpu}, {profiled_conversations:,} "
            f"{plural(profiled_conversations, 'conversation')} of "
            f"{context:,} {plural(context, 'token')}")


PROFILED_GIVE = " give "  # between extensible_caution's words and its figures


def profiled_split(caution: str) -> tuple[str, str] | None:
    """extensible_caution's words and its figures, which a comparison says once and per card
    ('caution (each): …give 2 x h100-sxm: 37.16 GiB per GPU, …; 2 x h200-sxm: …'); None for
    another caution."""
    words, given, figures = caution.partition(PROFILED_GIVE)
    if not given or "extensible KV cache is unchecked" not in words:
        return None
    return words + given, figures


def launch_fraction(acc: VLLMAccounting, vendor: str, connector: str = "") -> float:
    """The gpu_memory_utilization vLLM ``acc.version`` takes unset on a ``vendor`` card, which
    a launch line writes out so that its pool is the one sized: 1.0 where the extensible KV
    cache sizes it (v0.34+, NVIDIA and AMD), else the release's default (0.92 from v0.20),
    as beside a ``connector`` that keeps the cache off (``connector_keeps_off``: a split's
    NixlConnector; at 1.0 vLLM would refuse to start, request_memory)."""
    measured = acc.extensible_kv_cache and vendor in extensible_rule()["vendors"] \
        and not connector_keeps_off(connector, vendor)
    return extensible_fraction() if measured else acc.gpu_memory_utilization
