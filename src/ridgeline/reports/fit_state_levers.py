"""`ridgeline fit`'s levers on a hybrid's recurrent state (Mamba, linear attention): vLLM
without prefix caching, whose "align" mode holds several state blocks a request, and SGLang's
state pool set by --max-mamba-cache-size at the slots its KV cache can run, each where it
holds more than the pool as given (fit_levers re-runs the pool with the flag)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ridgeline.capacity import engine_seat_limit, held_conversations
from ridgeline.deployment import Deployment
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.monotone import longest_holding
from ridgeline.reports.fit_state import set_by_cache_size
from ridgeline.sglang_hybrid import sglang_cache_size_honoured, sglang_slots_per_request
from ridgeline.sizing_flags import check_sizing_flags
from ridgeline.units import plural
from ridgeline.vllm_memory import vllm_accounting
from ridgeline.vllm_pool import align_state_blocks, draft_state_blocks

if TYPE_CHECKING:
    from ridgeline.reports.fit import FitReport


def prefix_caching_lever(r: FitReport) -> list[tuple[str, Deployment, int, EngineSettings]]:
    """vLLM's hybrid (Mamba or linear-attention layers) with prefix caching on: its
    mamba_cache_mode "align" holds several state blocks a request in every state group (the
    running state and the last block-aligned one, and from v0.32 a Mamba-2 layer's prefill
    checkpoint: vllm_hybrid.state_blocks, MambaSpec.max_memory_usage_bytes), where without
    prefix caching ("none") it holds one. --no-enable-prefix-caching, vLLM's spelling, gives
    every prefix-cache hit up for them. Nemotron-H-56B on 2 H100s at 8K: 9 conversations, 23
    without it."""
    d, s = r.deployment, r.settings
    if d.engine != "vllm" or s.prefix_caching is False:
        return []
    blocks = align_state_blocks(d, vllm_accounting(s.engine_version), s.prefix_caching)
    if blocks <= 1:  # no state groups, or "all" mode (a state per block, not modelled)
        return []
    drafts = draft_state_blocks(d, s)  # a block a draft token either way
    held = f"{1 + drafts} state blocks" if drafts else "1 state block"
    return [(f"--no-enable-prefix-caching ({held} a request, not {blocks + drafts}; no "
             "prefix-cache hits)", d, r.context, replace(s, prefix_caching=False))]


def state_pool_size_lever(r: FitReport) -> list[tuple[str, Deployment, int, EngineSettings]]:
    """SGLang's hybrid whose state pool holds other than the slots its KV cache can run:
    --max-mamba-cache-size at the running requests' slots where the batch is largest. The
    flag sets the state pool at that many requests' states (// --dp-size a rank) and gives
    the KV cache the rest (SGLang 0.5.7+ model_runner_kv_cache_mixin.py handle_max_mamba_cache;
    before 0.5.7 read only with the radix cache off: engines.json
    sglang.mamba_pool.max_mamba_cache_size), and a running request takes
    sglang_slots_per_request of them (3 with the radix cache), so B running requests a rank
    need 3 × B slots; the largest B whose pool, sized so, still runs B is found by bisection
    over the flag, each pool as fit prices it. Qwen3-Next-80B on 4 H100s at 65K: the default
    ratio carves 701 slots and leaves the KV cache 18 conversations; --max-mamba-cache-size
    99 runs 33. Not where --max-running-requests (or its default, the radix cache off)
    fixes the pool: fit_levers._state_slots_lever's."""
    d, s, p = r.deployment, r.settings, r.pool
    if d.engine != "sglang" or not p.state_request_bytes \
            or (p.state_pool_fixed and not set_by_cache_size(s, d.model)):
        return []
    radix = s.prefix_caching is not False
    if not sglang_cache_size_honoured(radix, s.engine_version, d.model):
        return []
    each, ranks = sglang_slots_per_request(radix, s.engine_version, d.model), d.data_parallel_size

    def sized(running: int) -> EngineSettings:  # the server's flag: a rank's slots × ranks
        return replace(s, max_model_len=r.context, max_mamba_cache_size=each * running * ranks)

    def runs(running: int) -> bool:  # a rank's running requests, every one with its slots
        try:
            check_sizing_flags(d, sized(running))
            pool = kv_pool(d, sized(running))
        except InputError:
            return False
        return min(held_conversations(pool, d, r.context),
                   engine_seat_limit(pool, d)) >= running * ranks

    most = int(p.pool_bytes // (each * p.state_request_bytes))  # the static pool all states
    if most < 1 or not runs(1):
        return []
    running = longest_holding(runs, 1, most)
    flag = each * running * ranks
    if flag == p.state_slots * ranks:
        return []
    a_rank = " a rank" if ranks > 1 else ""
    return [(f"--max-mamba-cache-size {flag} ({running:,} running × {each} state "
             f"{plural(each, 'slot')}{a_rank}, not {p.state_slots:,})", d, r.context,
             sized(running))]
