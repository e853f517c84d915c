"""`ridgeline fit`'s SGLang hybrid state pool: the slots a running request takes, the static
pool a target needs beside the state pool, a state pool set past the static pool (its
overrun), the state pool's JSON, its explain steps (max_running_requests, the shortfall),
and the words the budget rows use for it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ridgeline.data_parallel import server_running_requests
from ridgeline.explain import Quantity, Step, q, step
from ridgeline.memory import EngineSettings, KVPool
from ridgeline.model import ModelSpec
from ridgeline.reports.fit_ranks import each_rank_note
from ridgeline.reports.fit_terms import cap_flag
from ridgeline.sglang_hybrid import (
    sglang_cache_size_honoured,
    sglang_fixed_state_note,
    sglang_radix_cache,
    sglang_slots_per_request,
    sglang_state_ratio,
)
from ridgeline.sglang_memory import sglang_data
from ridgeline.sglang_pool import sglang_own_requests, sglang_settings
from ridgeline.units import GIB, plural

if TYPE_CHECKING:
    from ridgeline.reports.fit import FitReport


def state_per_request_bytes(p: KVPool) -> float:
    """SGLang: one request's recurrent state per GPU, as its state pool holds it."""
    return p.state_request_bytes


def state_pool_note(p: KVPool, s: EngineSettings, model: ModelSpec | None) -> str:
    """How SGLang sized its state pool: the share it carves, or the requests it sets it at."""
    if p.state_pool_fixed:  # a drafter's default max_running_requests sizes it too
        seats = sglang_settings(s).max_num_seqs
        return sglang_fixed_state_note(s.prefix_caching is not False, s.engine_version, model,
                                       seats, s.max_mamba_cache_size,
                                       seats != s.max_num_seqs)
    ratio = f"mamba_full_memory_ratio {sglang_state_ratio(s.engine_version):g}"
    return ratio + (f"; SGLang {s.engine_version} overwrites --max-mamba-cache-size with it "
                    "while its radix cache is on (it reads the flag so from 0.5.7)"
                    if s.max_mamba_cache_size else "")


def set_by_cache_size(s: EngineSettings, model: ModelSpec | None) -> bool:
    """Whether --max-mamba-cache-size set SGLang's state pool (sglang_cache_size_honoured)."""
    return bool(s.max_mamba_cache_size) and sglang_cache_size_honoured(
        s.prefix_caching is not False, s.engine_version, model)


def fixed_state_size(s: EngineSettings, model: ModelSpec | None = None) -> str:
    """What set the requests a fixed SGLang state pool holds: a flag, or its default."""
    if s.max_mamba_cache_size and set_by_cache_size(s, model):
        return f"--max-mamba-cache-size {s.max_mamba_cache_size:,}"
    return (f"--max-running-requests {s.max_num_seqs:,}" if s.max_num_seqs
            else "SGLang's default with its radix cache off")


def running_slots(r: FitReport) -> int:
    """The state slots SGLang keeps per running request (sglang_slots_per_request): a
    carved pool needs at least that many to run one."""
    s = r.settings
    return sglang_slots_per_request(s.prefix_caching is not False, s.engine_version,
                                    r.deployment.model)


def state_static_needed(r: FitReport, need: float) -> float:
    """The static pool an SGLang state pool needs to hold ``need`` bytes of KV cache and
    a slot for each of the target's conversations (state_shortfall)."""
    p, target = r.pool, r.rank_target  # one pool's share of the target
    per = p.state_request_bytes
    if p.state_pool_fixed:
        return need + max(p.state_slots, target) * per
    ratio = sglang_state_ratio(r.settings.engine_version)
    return (1 + ratio) * max(need, max(target, running_slots(r)) * per / ratio)


def state_shortfall(r: FitReport, need: float) -> float:
    """SGLang's hybrid: the static pool the target needs beside its state pool, less the
    one it has. A carved pool takes ratio ÷ (1 + ratio) of the static pool, so that needs
    (1 + ratio) × the larger of the KV cache needed and the target's states ÷ ratio (a
    slot for each conversation, and at least a running request's slots); a pool SGLang
    sets at a number of requests, the KV cache needed beside max(slots, target) states.
    Where --max-total-tokens binds, at least the KV cache the cap withholds."""
    p = r.pool
    short = state_static_needed(r, need) - p.rest_bytes
    if p.capped:
        short = max(short, need - p.state_kv_bytes)
    return max(0.0, short)


def most_rank_requests(r: FitReport) -> int:
    """The most requests one pool's state pool can be set at (SGLang sets it at that many
    with its radix cache off) and leave room for its share of the target's conversations
    (rank_target: the whole target without data parallelism): floor((static pool − target ×
    per conversation) ÷ state per request); below that share where none does."""
    p, need = r.pool, r.rank_target
    per = p.state_request_bytes
    return int((p.pool_bytes - need * r.per_conversation_bytes) // per) if per else 0


def most_running_requests(r: FitReport) -> int:
    """The largest --max-running-requests whose state pool leaves room for the target's
    conversations (most_rank_requests): under data-parallel attention the server's flag,
    which SGLang divides over the ranks, so each rank's most × the ranks (Qwen3-Next on 4
    H100s at DP4, a target of 40: 111 a rank, --max-running-requests 444)."""
    return server_running_requests(r.deployment, most_rank_requests(r))


def running_requests_for(r: FitReport, conversations: int) -> int:
    """The --max-running-requests that gives each pool a state slot for its share of
    ``conversations`` (the server's flag: under data-parallel attention ⌈conversations ÷
    ranks⌉ × the ranks)."""
    d = r.deployment
    return server_running_requests(d, d.rank_sequences(conversations))


def state_overrun(p: KVPool) -> bool:
    """SGLang set its state pool at a number of requests (its radix cache off) and their
    states take the whole static pool: the KV cache gets no token, and SGLang stops at
    start-up ('Not enough memory')."""
    return p.state_pool_fixed and p.pool_bytes > 0 and p.tokens < 1


def state_overrun_reason(r: FitReport) -> str:
    """The state pool SGLang sets past the static pool: the one product, its refusal,
    and the --max-running-requests that leaves room for the target."""
    p, s, model = r.pool, r.settings, r.deployment.model
    per, need = state_per_request_bytes(p), max(1, r.target or 1)
    most, rank_most = most_running_requests(r), most_rank_requests(r)
    d = r.deployment
    refusal = str(sglang_data()["mamba_pool"]["state_pool_radix_off"]["overrun"])
    target = f"{need:,} {plural(need, 'conversation')} of {r.context:,} tokens"
    a_rank = (f" ({rank_most:,} requests and {r.rank_target:,} conversations a rank)"
              if d.data_parallel_size > 1 else "")
    return (f"{state_pool_note(p, s, model)}, whatever the memory: {p.state_slots:,} "
            f"requests' recurrent state × {per / GIB:,.4f} GiB = "
            f"{p.slot_cache_bytes / GIB:,.2f} GiB per GPU{each_rank_note(d)}, more than the "
            f"{p.pool_bytes / GIB:,.2f} GiB static pool, which leaves the KV cache "
            f"nothing, so it would refuse to start ('{refusal}'); "
            + ("a smaller --max-mamba-cache-size leaves the KV cache room"
               if set_by_cache_size(s, model) else
               f"--max-running-requests {most:,} or fewer leaves room for {target}{a_rank}"
               if rank_most >= r.rank_target
               else f"no --max-running-requests leaves room for {target}"))


def state_pool_dict(r: FitReport) -> dict[str, Any]:
    """SGLang's state pool: carved (mamba_full_memory_ratio's share of the static pool) or
    set at a number of requests (its radix cache off), with why, and what it leaves."""
    p, s, model = r.pool, r.settings, r.deployment.model
    radix = sglang_radix_cache(s.prefix_caching is not False, s.engine_version, model)
    ratio = sglang_state_ratio(s.engine_version)
    engine = f"SGLang {s.engine_version}" if s.engine_version else "SGLang"
    return {
        "sized": "fixed" if p.state_pool_fixed else "carved",
        "mamba_full_memory_ratio": None if p.state_pool_fixed else ratio,
        "slots": p.state_slots,
        "why": state_pool_note(p, s, model) if p.state_pool_fixed else
        f"{engine} carves mamba_full_memory_ratio {ratio:g} ÷ {1 + ratio:g} of the static "
        "pool, in whole requests' states (floor(static pool × ratio ÷ (1 + ratio) ÷ state "
        "per request))",
        "radix_cache": radix,
        "slots_per_running_request": sglang_slots_per_request(
            s.prefix_caching is not False, s.engine_version, model),
        "bytes_per_request_per_gpu": p.state_request_bytes,
        "bytes_per_gpu": p.slot_cache_bytes,
        "static_pool_bytes_per_gpu": p.pool_bytes,
        "kv_cache_bytes_per_gpu": p.state_kv_bytes,
        # a set pool past the static pool: SGLang stops at start-up ('Not enough memory')
        "overrun_bytes_per_gpu": max(0.0, p.slot_cache_bytes - p.pool_bytes),
        **_ranks_state(r),
    }


def _ranks_state(r: FitReport) -> dict[str, Any]:
    """Under data-parallel attention, what the state pool's figures are: each rank's (its
    slots and bytes), and the --max-running-requests that leaves room for the target, the
    server's (most_running_requests); nothing without data parallelism."""
    ranks = r.deployment.data_parallel_size
    if ranks == 1:
        return {}
    return {"data_parallel_size": ranks, "per": "data-parallel rank",
            "slots_all_ranks": r.pool.state_slots * ranks,
            "most_running_requests": most_running_requests(r)
            if r.pool.state_pool_fixed else None}


def drafter_seats_note(r: FitReport) -> str:
    """", SGLang's default with a drafter" where SGLang's drafter set max_running_requests
    (sglang_settings: --max-running-requests unset); else ""."""
    if r.pool.engine != "sglang" or r.settings.max_num_seqs is not None \
            or sglang_settings(r.settings).max_num_seqs is None:
        return ""
    return ", SGLang's default with a drafter"


def running_step(r: FitReport) -> Step:
    """SGLang's max_running_requests beside a state pool: its own (from the KV cache's
    tokens, or the flag), at most the state slots over the slots a running request takes."""
    p, s, d = r.pool, sglang_settings(r.settings), r.deployment
    radix = s.prefix_caching is not False
    per = sglang_slots_per_request(radix, s.engine_version, d.model)
    own = sglang_own_requests(d, p, s)
    context = s.max_model_len or r.context
    rule = sglang_data()["max_running_requests"]
    drafted = drafter_seats_note(r)
    flag = f"max_running_requests {s.max_num_seqs:,}{drafted}" if drafted else \
        f"--max-running-requests {s.max_num_seqs:,}" if s.max_num_seqs else \
        (f"clamp(int({p.tokens:,} tokens ÷ {context:,} × {rule['per_context']:,}), "
         f"{rule['least']:,}, {rule['most']:,})")
    own_note = (f"{flag}: the request pool SGLang asks; it stops ('Not enough memory') before "
                "it halves the tokens" if p.tokens < 1 else
                f"{flag}, as given (SGLang halves the tokens only for its own default)"
                if s.max_num_seqs else f"min({flag}, {p.tokens:,} tokens // 2), at least 1")
    on = sglang_radix_cache(radix, s.engine_version, d.model)
    per_note = ("a running request's state and two for its radix cache's" if on and per == 3
                else f"SGLang {s.engine_version}: a running request's state and four more (the "
                "extra buffer's two under its default strategy too)" if on else
                "its radix cache off: a running request's state alone")
    return step("max_running_requests", "min(SGLang's own, state slots // slots per running "
                "request)", q("max_running_requests", p.max_num_seqs),
                q("SGLang's own", own, "", own_note), q("state slots", p.state_slots),
                q("slots per running request", per, "", per_note))


def state_shortfall_step(r: FitReport) -> Step:
    """The static pool the target needs beside SGLang's state pool, less the one it has (and
    where --max-total-tokens binds, at least the KV cache the cap withholds)."""
    p, s, need = r.pool, r.settings, r.rank_target
    common = (q("shortfall", r.shortfall_bytes / GIB, "GiB"), q("target", need),
              q("per conversation", r.per_conversation_bytes / GIB, "GiB"))
    per = q("state per request", p.state_request_bytes / GIB, "GiB")
    static = q("static pool", p.rest_bytes / GIB, "GiB",
               "negative: what comes before it overflows the fraction" if p.rest_bytes < 0
               else "")
    if p.state_pool_fixed:
        formula = ("target × per conversation + max(state slots, target) × state per request "
                   "− the static pool")
        inputs: tuple[Quantity, ...] = (*common, q("state slots", p.state_slots), per, static)
        why = "each conversation a slot"
    else:
        formula = ("(1 + ratio) × max(target × per conversation, max(target, slots per running "
                   "request) × state per request ÷ ratio) − the static pool")
        inputs = (*common, q("slots per running request", running_slots(r)), per,
                  q("ratio", sglang_state_ratio(s.engine_version), "",
                    "mamba_full_memory_ratio"), static)
        why = ("the state pool takes ratio ÷ (1 + ratio) of it; each conversation a slot, and "
               "one running request its slots")
    if p.capped:
        return step("shortfall per GPU", f"max({formula}, target × per conversation − KV "
                    f"cache) ({why}; {cap_flag(p)} binds on the KV cache)", *inputs,
                    q("KV cache", p.state_kv_bytes / GIB, "GiB", "the cap's, above"))
    return step("shortfall per GPU", f"{formula} ({why})", *inputs)
