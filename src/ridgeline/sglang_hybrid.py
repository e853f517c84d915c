"""How SGLang keeps a recurrent hybrid's states, release by release: the state pool it sizes
before the KV cache (a share of the static pool, mamba_full_memory_ratio, or a number of
requests where its radix cache is off), the slots each running request takes in it, and the
dtypes the states are kept in. The rules are data (engines.json ``sglang.mamba_pool``), each
with its source."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ridgeline.deployment import Deployment
from ridgeline.kvcache import kv_footprint
from ridgeline.kvpool import KVPool
from ridgeline.model import ModelSpec
from ridgeline.sglang_memory import sglang_data, sglang_release

if TYPE_CHECKING:
    from ridgeline.memory import EngineSettings


def sglang_state_ratio(version: str | None = None) -> float:
    """mamba_full_memory_ratio in SGLang ``version`` (default: the newest): a recurrent
    hybrid's state pool ÷ its KV cache, 0.2 in 0.5.3.post2 and 0.9 from 0.5.3.post3
    (engines.json sglang.mamba_pool)."""
    pool = sglang_data()["mamba_pool"]
    row = next((row for row in pool["mamba_full_memory_ratio_by_release"]
                if _between(version, row)), None)
    return float(pool["mamba_full_memory_ratio"] if row is None else row["ratio"])


def sglang_state_dtypes(model: ModelSpec, ssm_flag: str | None = None) -> tuple[str, str]:
    """(conv, SSM) dtypes of the recurrent states SGLang keeps for a hybrid (mamba2_state_dtype,
    engines.json sglang.mamba_pool): the conv state in bf16, the SSM state as --mamba-ssm-dtype
    (``ssm_flag``) says, else fp32 unless the config names mamba_ssm_dtype (PR #18532); not
    the model's own dtype, which vLLM keeps. Qwen3-Next's linear layer at TP1: 24,576 × 2 +
    524,288 × 4 B = 2,146,304 B, not 1,097,728 (with bfloat16, 24,576 × 2 + 524,288 × 2 B).
    A config naming mamba_ssm_dtype equal to its torch_dtype reads here as naming none."""
    pool = sglang_data()["mamba_pool"]
    if ssm_flag is not None:
        return str(pool["conv_state_dtype"]), sglang_ssm_dtype(ssm_flag)
    named = model.state_dtype != model.dtype and not model.ssm_cache_dtype_named
    return str(pool["conv_state_dtype"]), model.state_dtype if named else str(pool["ssm_state_dtype"])


def sglang_ssm_dtypes(version: str | None = None) -> dict[str, str]:
    """--mamba-ssm-dtype's choices in SGLang ``version`` (default: the newest), each with the
    dtype ridgeline names it: float32 and bfloat16 from 0.5.2, float16 too from 0.5.9
    (engines.json sglang.mamba_pool.mamba_ssm_dtype)."""
    rule = sglang_data()["mamba_pool"]["mamba_ssm_dtype"]
    release = sglang_release(version or str(sglang_data()["newest_checked"]))
    choices = dict(rule["choices"])
    for row in rule["choices_by_release"]:
        if release >= sglang_release(str(row["from"])):
            choices.update(row["choices"])
    return choices


def sglang_ssm_dtype(flag: str) -> str:
    """The dtype --mamba-ssm-dtype ``flag`` names (bfloat16: bf16), whichever release."""
    return sglang_ssm_dtypes()[flag]


def sglang_state_model(model: ModelSpec, ssm_flag: str | None = None) -> ModelSpec:
    """``model`` with its states at SGLang's dtypes (sglang_state_dtypes, under
    --mamba-ssm-dtype ``ssm_flag``), for sizing and reading them; its weights are not this
    copy's to price."""
    conv, ssm = sglang_state_dtypes(model, ssm_flag)
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


def sglang_cache_size_honoured(radix_cache: bool = True, version: str | None = None,
                               model: ModelSpec | None = None) -> bool:
    """Whether SGLang ``version`` (default: the newest) sizes the state pool at
    --max-mamba-cache-size: from 0.5.7 always; before, only with its radix cache off
    (sglang_radix_cache), the ratio's carve overwriting it with the cache on (engines.json
    sglang.mamba_pool.max_mamba_cache_size)."""
    rule = sglang_data()["mamba_pool"]["max_mamba_cache_size"]
    release = sglang_release(version or str(sglang_data()["newest_checked"]))
    return release >= sglang_release(str(rule["honoured_with_radix_from"])) \
        or not sglang_radix_cache(radix_cache, version, model)


def sglang_fixed_state_slots(radix_cache: bool = True, version: str | None = None,
                             model: ModelSpec | None = None,
                             max_running_requests: int | None = None,
                             max_mamba_cache_size: int | None = None) -> int | None:
    """The state slots SGLang ``version`` (default: the newest) gives a hybrid without carving
    mamba_full_memory_ratio's share: --max-mamba-cache-size where it reads it
    (sglang_cache_size_honoured); else with the radix cache off (sglang_radix_cache), before
    0.5.9 --max-running-requests or 512 whatever the memory, from 0.5.9 --max-running-requests
    where given; None where it carves (engines.json sglang.mamba_pool.state_pool_radix_off)."""
    if max_mamba_cache_size and sglang_cache_size_honoured(radix_cache, version, model):
        return max_mamba_cache_size
    if sglang_radix_cache(radix_cache, version, model):
        return None
    rule = sglang_data()["mamba_pool"]["state_pool_radix_off"]
    if _between(version, rule):
        return max_running_requests or int(rule["slots"])
    return max_running_requests


def sglang_fixed_state_note(radix_cache: bool = True, version: str | None = None,
                            model: ModelSpec | None = None,
                            max_running_requests: int | None = None,
                            max_mamba_cache_size: int | None = None,
                            drafted: bool = False) -> str:
    """Why SGLang ``version`` (default: the newest) gives the state pool a number of requests
    rather than a share of memory (sglang_fixed_state_slots), in words: "SGLang 0.5.6 sizes
    the state pool at --max-running-requests, default 512, with its radix cache off (…)";
    ``drafted``: max_running_requests is the default a drafter sets, not a flag."""
    pool = sglang_data()["mamba_pool"]
    engine = f"SGLang {version}" if version else "SGLang"
    if max_mamba_cache_size and sglang_cache_size_honoured(radix_cache, version, model):
        return f"{engine} sizes the state pool at --max-mamba-cache-size {max_mamba_cache_size:,}"
    size = (f"max_running_requests {max_running_requests} (its default with a drafter)"
            if max_running_requests and drafted else
            f"--max-running-requests {max_running_requests}" if max_running_requests
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


def sglang_state_pool(dep: Deployment, pool: KVPool, s: EngineSettings) -> KVPool:
    """SGLang's state pool for a hybrid with recurrent-state layers, sized first: rest ×
    mamba_full_memory_ratio ÷ (1 + ratio) as whole requests' states (the ratio 0.2 in
    0.5.3.post2, 0.9 from 0.5.3.post3), or, where SGLang sets it instead (its radix cache off:
    before 0.5.9 --max-running-requests or 512, from 0.5.9 --max-running-requests where
    given; or --max-mamba-cache-size: sglang_fixed_state_slots), that many requests' states
    (each at --mamba-ssm-dtype where given) whatever the memory; the KV
    cache gets the rest (under --max-total-tokens, at most the cap: the states come out of
    the uncapped rest), and where a set pool leaves it nothing SGLang stops at start-up
    (engines.json sglang.mamba_pool). A carved pool of 0 slots is still a state pool: SGLang
    runs no request beside it. The pool unchanged for other models and older releases."""
    rule, version = sglang_data()["mamba_pool"], s.engine_version
    if version is not None and sglang_release(version) < sglang_release(str(rule["from"])):
        return pool
    per_request = kv_footprint(sglang_state_model(dep.model, s.mamba_ssm_dtype), 1,
                               dep.kv.bytes_per_element).state_bytes \
        / dep.tensor_parallel_size * pool.kv_share
    if not per_request:
        return pool
    pool = replace(pool, state_request_bytes=per_request, windows_apart=True)
    fixed = sglang_fixed_state_slots(s.prefix_caching is not False, version, dep.model,
                                     s.max_num_seqs, s.max_mamba_cache_size)
    if fixed is not None:
        return replace(pool, state_slots=fixed, slot_cache_bytes=fixed * per_request,
                       state_pool_fixed=True)
    ratio = sglang_state_ratio(version)  # of the static pool, before any token cap
    slots = max(0, int(pool.pool_bytes * ratio / (1 + ratio) // per_request))
    return replace(pool, state_slots=slots, slot_cache_bytes=slots * per_request)
