"""--explain's working for two figures fit prints outside its pool's steps: the longest
--max-model-len whose batch reaches the ridge (the under-the-ridge verdict's "at 1,600 tokens
or fewer"), and the pool vLLM 0.33's rules size beside the extensible KV cache's (the
caution's "0.33's rules give 54.64 GiB per GPU")."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ridgeline.capacity import conversation_bytes, engine_seat_limit, held_conversations
from ridgeline.explain import Step, q, step
from ridgeline.memory import kv_pool
from ridgeline.roofline import first_whole_batch

if TYPE_CHECKING:
    from ridgeline.reports.fit import FitReport


def ridge_context_step(r: FitReport) -> Step | None:
    """The longest context whose batch reaches the ridge: the pool's blocks hold the ridge
    batch's conversations of ⌊blocks ÷ ridge batch⌋ blocks each, so ⌊blocks ÷ ridge batch⌋
    × block size tokens. Llama-3.1-8B bf16 on an H100 under vLLM: ⌊7,555 ÷ 296⌋ × 64 =
    1,600. None where that is not the length fit's search found (a pool that changes with
    --max-model-len, conversations not counted in blocks, seats under the ridge batch)."""
    p, ridge = r.pool, first_whole_batch(r.ridge_batch)
    if not r.ridge_context or not p.block_size or p.blocks <= 0 \
            or engine_seat_limit(p, r.deployment) < ridge:
        return None
    longest = p.blocks // ridge * p.block_size
    if longest != r.ridge_context:
        return None
    return step("longest context whose batch reaches the ridge",
                "⌊pool blocks ÷ ridge batch⌋ × block size: each of the ridge batch's "
                "conversations in an equal share of the blocks (fit at that --max-model-len "
                "holds the ridge batch; a token more, a block more each, and it does not)",
                q("context", longest, "tokens"),
                q("pool blocks", p.blocks, "blocks", "blocks the pool holds, above"),
                q("ridge batch", ridge, "", "the ridge batch step's, whole"),
                q("block size", p.block_size, "tokens"))


def profiled_pool_steps(r: FitReport) -> tuple[Step, ...]:
    """What vLLM 0.33's rules (--no-enable-extensible-kv-cache: the profile sizes the pool)
    make of this run, the caution's figures: its pool step and its conversations.
    Llama-3.1-8B on an H100 at 131,072 tokens: 79.18 × 0.92 − 14.96 − … = 54.64 GiB, 3."""
    from ridgeline.reports.fit_steps import conversations_step, pool_step
    from ridgeline.vllm_extensible import profiled_settings

    d, p = r.deployment, r.pool
    if p.engine != "vllm" or not p.kept_free_bytes or p.accounting is None:
        return ()
    s = profiled_settings(r.settings)
    profiled = kv_pool(d, s)
    n = held_conversations(profiled, d, r.context)
    rules = "under 0.33's rules (--no-enable-extensible-kv-cache)"
    pool = pool_step(d, profiled, s)
    held = conversations_step(d, profiled, s, r.context, n // d.data_parallel_size,
                              conversation_bytes(profiled, d, r.context))
    return (replace(pool, label=f"{pool.label}, {rules}"),
            replace(held, label=f"{held.label}, {rules}"))
