"""How SGLang sizes its static KV pool, release by release.

SGLang gives the pool ``mem_fraction_static`` of the memory free after its distributed
start-up (the CUDA context and the tensor-parallel communicators), less the weights; the rest,
1 − mem_fraction_static, holds activations and CUDA graphs. With the flag unset, the fraction
came from a table by tensor-parallel size (to v0.4.7), then from a reserve by card tier and
parallel size (PR #7054, v0.4.7.post1 to v0.5.2), then from a reserve summed from the prefill
chunk, the CUDA-graph batch and the ranks (v0.5.3 on). The rules are data (engines.json
``sglang``), each with its source. ``sglang_pool`` builds the KVPool, a recurrent hybrid's
state pool carved out of it first (``sglang_state_pool``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ridgeline.context_length import served_positions
from ridgeline.datafiles import engine_defaults, load_data
from ridgeline.deployment import Deployment
from ridgeline.engine_windows import has_windows
from ridgeline.errors import InputError
from ridgeline.kvcache import kv_footprint
from ridgeline.kvpool import KVPool
from ridgeline.model import ModelSpec
from ridgeline.parallel import LOW_LATENCY_FABRICS
from ridgeline.stages import Stage
from ridgeline.units import GIB
from ridgeline.vllm_memory import parse_version

if TYPE_CHECKING:
    from ridgeline.memory import EngineSettings

TP_TABLE, TIER_RESERVE, RESERVED_MIB = "tp-table", "tier-reserve", "reserved-mib"
ERA_LABELS = {TP_TABLE: "v0.3-v0.4.7, a fraction by TP size",  # .post1 is the next era
              TIER_RESERVE: "v0.4.7.post1-v0.5.2, a reserve by card tier and TP × PP",
              RESERVED_MIB: "v0.5.3+, a reserve for the prefill chunk, graphs and ranks"}


def sglang_data() -> dict[str, Any]:
    data: dict[str, Any] = load_data("engines.json")["sglang"]
    return data


def sglang_state_ratio(version: str | None = None) -> float:
    """mamba_full_memory_ratio in SGLang ``version`` (default: the newest): a recurrent
    hybrid's state pool ÷ its KV cache, 0.2 in 0.5.3.post2 and 0.9 from 0.5.3.post3
    (engines.json sglang.mamba_pool)."""
    pool = sglang_data()["mamba_pool"]
    row = next((row for row in pool["mamba_full_memory_ratio_by_release"]
                if _between(version, row)), None)
    return float(pool["mamba_full_memory_ratio"] if row is None else row["ratio"])


def sglang_state_dtypes(model: ModelSpec) -> tuple[str, str]:
    """(conv, SSM) dtypes of the recurrent states SGLang keeps for a hybrid (mamba2_state_dtype,
    engines.json sglang.mamba_pool): the conv state in bf16, the SSM state in fp32 unless the
    config names mamba_ssm_dtype (PR #18532); not the model's own dtype, which vLLM keeps.
    Qwen3-Next's linear layer at TP1: 24,576 × 2 + 524,288 × 4 B = 2,146,304 B, not 1,097,728.
    A config naming mamba_ssm_dtype equal to its torch_dtype reads here as naming none."""
    pool = sglang_data()["mamba_pool"]
    named = model.state_dtype != model.dtype and not model.ssm_cache_dtype_named
    return str(pool["conv_state_dtype"]), model.state_dtype if named else str(pool["ssm_state_dtype"])


def sglang_state_model(model: ModelSpec) -> ModelSpec:
    """``model`` with its states at SGLang's dtypes (sglang_state_dtypes), for sizing and
    reading them; its weights are not this copy's to price."""
    conv, ssm = sglang_state_dtypes(model)
    if (conv, ssm) == (model.dtype, model.state_dtype):
        return model
    return replace(model, dtype=conv, state_dtype=ssm)


def sglang_running_cap(state_slots: int, radix_cache: bool = True, version: str | None = None,
                       model: ModelSpec | None = None) -> int:
    """The requests SGLang ``version`` (default: the newest) runs at once beside a state pool
    of ``state_slots`` requests: slots ÷ sglang_slots_per_request, 3 with its radix cache on
    (the default: two more slots a request for the cached prefixes' states), 1 with it off
    (engines.json sglang.mamba_pool): 1,368 slots run 456."""
    return state_slots // sglang_slots_per_request(radix_cache, version, model)


def sglang_radix_cache(radix_cache: bool = True, version: str | None = None,
                       model: ModelSpec | None = None) -> bool:
    """Whether SGLang ``version`` (default: the newest) keeps its radix cache for ``model``:
    as asked, except that releases before 0.5.6.post1 turned it off for the architectures
    its mamba2_config names (Nemotron-H, Falcon-H1: Mamba-2), whatever the flags; gated
    DeltaNet's (Qwen3-Next) kept it, and so did Jamba's Mamba-1 layers (engines.json
    sglang.mamba_pool.radix_cache_off_for_mamba)."""
    if not radix_cache:
        return False
    rule = sglang_data()["mamba_pool"]["radix_cache_off_for_mamba"]
    if model is None or model.mamba is None or model.architecture not in rule["architectures"]:
        return True
    return not _between(version, rule)


def sglang_slots_per_request(radix_cache: bool = True, version: str | None = None,
                             model: ModelSpec | None = None) -> int:
    """The state slots SGLang ``version`` (default: the newest) sets aside per running request
    (sglang_running_cap): 3 with the radix cache on, but 5 in 0.5.7 (which added the extra
    buffer's two slots under the default no_buffer strategy too); 1 with it off, as asked or,
    before 0.5.6.post1, for a model with Mamba layers (sglang_radix_cache)."""
    pool = sglang_data()["mamba_pool"]
    if not sglang_radix_cache(radix_cache, version, model):
        return int(pool["slots_per_running_request_no_radix"])
    row = next((row for row in pool["slots_per_running_request_by_release"]
                 if _between(version, row)), None)
    return int(pool["slots_per_running_request"] if row is None else row["slots"])


def sglang_fixed_state_slots(radix_cache: bool = True, version: str | None = None,
                             model: ModelSpec | None = None,
                             max_running_requests: int | None = None) -> int | None:
    """The state slots SGLang ``version`` (default: the newest) gives a hybrid without carving
    mamba_full_memory_ratio's share: with the radix cache off (sglang_radix_cache), before
    0.5.9 --max-running-requests or 512 whatever the memory, from 0.5.9 --max-running-requests
    where given; None where it carves (engines.json sglang.mamba_pool.state_pool_radix_off)."""
    if sglang_radix_cache(radix_cache, version, model):
        return None
    rule = sglang_data()["mamba_pool"]["state_pool_radix_off"]
    if _between(version, rule):
        return max_running_requests or int(rule["slots"])
    return max_running_requests


def sglang_fixed_state_note(radix_cache: bool = True, version: str | None = None,
                            model: ModelSpec | None = None,
                            max_running_requests: int | None = None) -> str:
    """Why SGLang ``version`` (default: the newest) gives the state pool a number of requests
    rather than a share of memory (sglang_fixed_state_slots), in words: "SGLang 0.5.6 sizes
    the state pool at --max-running-requests, default 512, with its radix cache off (…)"."""
    pool = sglang_data()["mamba_pool"]
    engine = f"SGLang {version}" if version else "SGLang"
    size = (f"--max-running-requests {max_running_requests}" if max_running_requests
            else f"--max-running-requests, default {int(pool['state_pool_radix_off']['slots'])},")
    forced = pool["radix_cache_off_for_mamba"]
    why = (f"turned off for a model with Mamba-2 layers before {forced['before']}"
           if radix_cache and not sglang_radix_cache(radix_cache, version, model)
           else "--disable-radix-cache, --no-prefix-caching here")
    return f"{engine} sizes the state pool at {size} with its radix cache off ({why})"


def _between(version: str | None, rule: dict[str, Any]) -> bool:
    """Whether SGLang ``version`` (default: the newest checked) is one of ``rule``'s
    releases: from its "from" up to, not including, its "before"."""
    release = sglang_release(version or str(sglang_data()["newest_checked"]))
    return sglang_release(str(rule["from"])) <= release < sglang_release(str(rule["before"]))


def sglang_release(version: str) -> tuple[int, ...]:
    """A release's order, a .post release after its base and the one before it (0.4.7 <
    0.4.7.post1 < 0.4.8; 0.5.3.post2 < 0.5.3.post3)."""
    post = re.search(r"post(\d+)", version)
    return (*parse_version(version), int(post.group(1)) if post else 0)


def sglang_era(version: str | None) -> str:
    """Which default rule SGLang ``version`` follows (default: the newest)."""
    if version is None:
        return RESERVED_MIB
    d, wanted = sglang_data(), sglang_release(version)
    newest = str(d["newest_checked"])
    if wanted[0] > parse_version(newest)[0]:
        raise InputError(f"SGLang {version} is no release ridgeline knows of (the newest "
                         f"modelled is {newest}; later 0.x releases follow its rules)")
    if wanted < sglang_release(d["legacy_fraction"]["from"]):
        raise InputError(f"SGLang {version} is older than any version ridgeline models (its "
                         f"memory defaults are read from {d['legacy_fraction']['from']} on)")
    if wanted < sglang_release(d["legacy_fraction"]["before"]):
        return TP_TABLE
    if wanted < sglang_release(d["tier_reserve"]["before"]):
        return TIER_RESERVE
    return RESERVED_MIB


@dataclass(frozen=True)
class SGLangMemoryDefaults:
    """What SGLang derives from the card's memory when the flags are unset."""

    chunked_prefill_size: int
    cuda_graph_max_bs: int
    reserved_mib: float  # activations, CUDA graphs and buffers kept out of the static pool
    mem_fraction_static: float
    era: str = RESERVED_MIB


def _below(rows: list[list[Any]], gib: float) -> list[Any]:
    """The first tier row whose bound (GiB; None: no bound) the card is below."""
    return next(row for row in rows if row[0] is None or gib < row[0])


def sglang_memory_defaults(total_bytes: float, tp: int = 1, pp: int = 1,
                           chunked_prefill_size: int | None = None,
                           version: str | None = None) -> SGLangMemoryDefaults:
    """SGLang ``version``'s defaults for a card of ``total_bytes``: the prefill chunk and
    CUDA-graph batch by memory tier, then the memory it reserves for them and
    ``mem_fraction_static`` = (memory − reserved) ÷ memory (before v0.4.7.post1: a table by
    tensor-parallel size)."""
    d = sglang_data()
    gpu_mib = total_bytes / 2**20
    era = sglang_era(version)
    if era == TP_TABLE:
        rows = d["legacy_fraction"]["rows"]
        fraction = float(next(f for least, f in rows if tp >= least))
        small = gpu_mib < 25_000  # below it: shorter chunks and fewer graph batches
        chunk = chunked_prefill_size or (2048 if small else 8192)
        graphs = (8 if tp < 4 else 80) if small else 160
        return SGLangMemoryDefaults(chunk, graphs, gpu_mib * (1 - fraction), fraction, era)
    if era == TIER_RESERVE:
        t = d["tier_reserve"]
        gib = gpu_mib / 1024
        _, base, per_rank = _below(t["rows"], gib)
        reserved = (base + per_rank * tp * pp) * 1024
        chunk = chunked_prefill_size or int(_below(t["chunked_prefill_size"], gib)[1])
        graphs = int(t["cuda_graph_max_bs_below_35_gib"][tp >= 4]) if gib < 35 \
            else int(t["cuda_graph_max_bs"])
        return SGLangMemoryDefaults(chunk, graphs, reserved,
                                    round((gpu_mib - reserved) / gpu_mib, 3), era)
    tier = _below(d["memory_tiers"]["rows"], gpu_mib / 1024)
    _, tier_chunk, graphs_small_tp, graphs_large_tp = tier
    chunk = chunked_prefill_size or int(tier_chunk)
    graphs = int(graphs_small_tp if tp < 4 else graphs_large_tp)
    r = d["reserved_mib"]
    reserved = (r["base"] + r["per_prefill_token"] * max(chunk, r["min_prefill_tokens"])
                + r["per_graph_batch"] * graphs + r["per_8_ranks"] * tp * pp / 8)
    if gpu_mib > r["floor_above_gib"] * 1024:
        reserved = max(reserved, r["floor_mib"])
    return SGLangMemoryDefaults(chunk, graphs, reserved, round((gpu_mib - reserved) / gpu_mib, 3),
                                era)


def sglang_startup_bytes(dep: Deployment) -> float:
    """What SGLang's distributed start-up holds before it measures the memory its fraction
    applies to: the CUDA context, and at TP > 1 the communicators (NCCL and custom all-reduce
    buffers: 1.25 GiB on eight NVLink H100s, 0.13 on four PCIe cards, logged as "mem
    usage=… GB", SGLang's GB being GiB)."""
    s = sglang_data()["startup"]
    gib = float(s["context_gib"])
    if dep.tensor_parallel_size > 1:
        nvlink = (dep.accelerator.link_kind or "").lower().startswith(LOW_LATENCY_FABRICS)
        gib += float(s["communicators_gib_nvlink" if nvlink else "communicators_gib_pcie"])
    return gib * GIB


def sglang_requests_asked(capacity_tokens: int, context_len: int, given: int | None = None,
                          version: str | None = None) -> int:
    """The requests SGLang sizes its request pool for (max_num_reqs), before it halves the
    token capacity: 512 per context_len of its token capacity, clamped to 2,048–4,096, or
    the value given. Before v0.5 one more (the request pool's spare slot)."""
    rule = sglang_data()["max_running_requests"]
    seats = given or min(max(int(capacity_tokens / context_len * rule["per_context"]),
                             rule["least"]), rule["most"])
    if given is None and version is not None and parse_version(version) < (0, 5):
        seats += 1
    return int(seats)


def sglang_max_running_requests(capacity_tokens: int, context_len: int,
                                given: int | None = None, version: str | None = None) -> int:
    """SGLang's max_running_requests: the requests it asks (sglang_requests_asked), at most
    half the capacity, and at least one."""
    return max(1, min(sglang_requests_asked(capacity_tokens, context_len, given, version),
                      capacity_tokens // 2))


def past_checked(version: str | None) -> str:
    """A caution where SGLang ``version`` is newer than the newest whose rules were read, or
    ""."""
    d = sglang_data()
    if version is None or parse_version(version) <= parse_version(d["newest_checked"]):
        return ""
    return (f"SGLang {version} is newer than {d['newest_checked']}, the newest whose memory "
            f"defaults ridgeline has read: {d['newest_checked_note']}")


def sglang_pool(dep: Deployment, s: EngineSettings, total_bytes: float, weight_bytes: float,
                kv_bytes_per_token: float, stage: Stage | None) -> KVPool:
    """SGLang: mem_fraction_static × (the card − what its distributed start-up takes) − the
    weights, in pages of page_size tokens; a hybrid's state pool carved out first
    (sglang_state_pool), then max_running_requests from the tokens left (sglang_own_requests)."""
    d = engine_defaults("sglang")
    rule = sglang_memory_defaults(total_bytes, dep.tensor_parallel_size,
                                  dep.pipeline_parallel_size,
                                  s.max_num_batched_tokens, s.engine_version)
    tokens = rule.chunked_prefill_size
    fraction = s.gpu_memory_utilization or rule.mem_fraction_static
    # SGLang keeps activations and CUDA graphs in the memory it holds back, and applies
    # its fraction to what its distributed start-up leaves
    pool = KVPool("sglang", total_bytes, fraction, weight_bytes, 0.0,
                  fraction * sglang_startup_bytes(dep), 0.0, 1.0, kv_bytes_per_token,
                  s.block_size or int(d["page_size"]), 1, tokens,
                  windows_apart=has_windows(dep), stage=stage, engine_era=rule.era,
                  token_cap=s.max_total_tokens or 0)
    pool = sglang_state_pool(dep, pool, s)
    seats = sglang_own_requests(dep, pool, s)
    if pool.state_request_bytes:  # the state pool keeps slots for the radix cache's too
        seats = min(seats, sglang_running_cap(pool.state_slots, s.prefix_caching is not False,
                                              s.engine_version, dep.model))
    return replace(pool, max_num_seqs=seats)


def sglang_own_requests(dep: Deployment, pool: KVPool, s: EngineSettings) -> int:
    """max_running_requests as SGLang derives it from its KV cache's tokens (or takes it
    from --max-running-requests), before a state pool caps it (sglang_max_running_requests);
    where a state pool leaves the KV cache no token, the requests it asked for its request
    pool (max_num_reqs): it stops ('Not enough memory') before it halves the tokens."""
    context = s.max_model_len or served_positions(dep.model, dep.engine) or 131072
    if pool.state_request_bytes and pool.tokens < 1:
        return sglang_requests_asked(pool.tokens, context, s.max_num_seqs, s.engine_version)
    return sglang_max_running_requests(pool.tokens, context, s.max_num_seqs, s.engine_version)


def sglang_state_pool(dep: Deployment, pool: KVPool, s: EngineSettings) -> KVPool:
    """SGLang's state pool for a hybrid with recurrent-state layers, sized first: rest ×
    mamba_full_memory_ratio ÷ (1 + ratio) as whole requests' states (the ratio 0.2 in
    0.5.3.post2, 0.9 from 0.5.3.post3), or, where SGLang sets it instead (its radix cache off:
    before 0.5.9 --max-running-requests or 512, from 0.5.9 --max-running-requests where
    given; sglang_fixed_state_slots), that many requests' states whatever the memory; the KV
    cache gets the rest (under --max-total-tokens, at most the cap: the states come out of
    the uncapped rest), and where a set pool leaves it nothing SGLang stops at start-up
    (engines.json sglang.mamba_pool). A carved pool of 0 slots is still a state pool: SGLang
    runs no request beside it. The pool unchanged for other models and older releases."""
    rule, version = sglang_data()["mamba_pool"], s.engine_version
    if version is not None and sglang_release(version) < sglang_release(str(rule["from"])):
        return pool
    per_request = kv_footprint(sglang_state_model(dep.model), 1, dep.kv.bytes_per_element) \
        .state_bytes / dep.tensor_parallel_size * pool.kv_share
    if not per_request:
        return pool
    pool = replace(pool, state_request_bytes=per_request, windows_apart=True)
    fixed = sglang_fixed_state_slots(s.prefix_caching is not False, version, dep.model,
                                     s.max_num_seqs)
    if fixed is not None:
        return replace(pool, state_slots=fixed, slot_cache_bytes=fixed * per_request,
                       state_pool_fixed=True)
    ratio = sglang_state_ratio(version)  # of the static pool, before any token cap
    slots = max(0, int(pool.pool_bytes * ratio / (1 + ratio) // per_request))
    return replace(pool, state_slots=slots, slot_cache_bytes=slots * per_request)
