"""--explain's working behind a serving engine's start-up refusal: the longest --max-model-len
that starts ("give --max-model-len ≤ 12,032"), and the conversations its pool holds there
("pool holds = 5"), which decode and prefill print beside the refusal; and the engine check a
refused point's working gives beside the floor's arithmetic."""

from __future__ import annotations

from dataclasses import replace

from ridgeline.capacity import held_conversations
from ridgeline.deployment import Deployment
from ridgeline.explain import Step, q, step
from ridgeline.memory import EngineSettings, KVPool, kv_pool
from ridgeline.units import GIB, MIB


def _pool_at(dep: Deployment, settings: EngineSettings, length: int) -> KVPool:
    return kv_pool(dep, replace(settings, max_model_len=length))


def _block(pool: KVPool) -> tuple[float, int] | None:
    """One block's bytes per GPU and its tokens, where the pool is whole blocks of one kind
    that every token fills (vLLM V1's one full-attention group, or a pool without groups,
    windows held apart or cells on the host); None for any other, whose working differs."""
    if pool.slot_cache_bytes or pool.windows_apart or pool.host_cells:
        return None
    g = pool.groups
    if g is None:
        return (pool.page_bytes, pool.block_size) if pool.kv_bytes_per_token > 0 else None
    return (g.page_bytes, g.block_size) if g.count == g.full == 1 else None


def longest_start_step(dep: Deployment, settings: EngineSettings, longest: int) -> Step | None:
    """The longest --max-model-len L that starts: the pool sized at L holds L tokens
    (⌊pool ÷ one block⌋ × block size ≥ L), the pool sized at L + 1 fewer than L + 1.
    Llama-3.1-70B fp8 (KV bf16) on an H100 under vllm serve: 3.674 GiB ÷ 20 MiB (64 tokens ×
    327,680 B) = 188 blocks, 12,032 tokens at L = 12,032 and at 12,033: L = 12,032. None
    where the pool is not whole blocks of one kind (_block)."""
    at, past = _pool_at(dep, settings, longest), _pool_at(dep, settings, longest + 1)
    block, later = _block(at), _block(past)
    if block is None or later != block or not at.tokens >= longest > past.tokens - 1:
        return None
    page, size = block
    return step("longest --max-model-len that starts",
                "the longest L whose KV pool, sized at max_model_len L, holds L tokens: pool "
                "tokens = ⌊pool ÷ one block⌋ × block size, at least L at L, fewer than L + 1 "
                "at L + 1",
                q("max_model_len", longest, "tokens"),
                q("pool at L", at.pool_bytes / GIB, "GiB", f"per GPU, sized at max_model_len "
                  f"{longest:,} (`ridgeline fit` gives its breakdown)"),
                q("pool at L + 1", past.pool_bytes / GIB, "GiB",
                  f"sized at max_model_len {longest + 1:,}"),
                q("one block", page / MIB, "MiB", f"{size:,} tokens × "
                  f"{page / size:,.0f} B a token, per GPU"),
                q("block size", size, "tokens"),
                q("pool tokens at L", at.tokens, "tokens"),
                q("pool tokens at L + 1", past.tokens, "tokens"))


def pool_holds_step(dep: Deployment, settings: EngineSettings, length: int, context: int
                    ) -> Step | None:
    """The conversations of ``context`` tokens the pool sized at max_model_len ``length``
    holds: ⌊⌊pool ÷ one block⌋ ÷ ⌈context ÷ block size⌉⌋. Llama-3.1-70B fp8 (KV bf16) on an
    H100 at 12,032 tokens: 188 blocks ÷ 32 a conversation of 2,000 tokens = 5. None where the
    count is not that division (_block; data-parallel ranks, an admission gate)."""
    pool = _pool_at(dep, settings, length)
    block = _block(pool)
    if block is None or dep.data_parallel_size != 1:
        return None
    page, size = block
    blocks, each = int(pool.pool_bytes // page), -(-context // size)
    held = blocks // each
    if held != held_conversations(pool, dep, context, length):
        return None
    return step(f"conversations the KV pool holds at {context:,} tokens",
                "⌊pool blocks ÷ a conversation's blocks⌋, pool blocks = ⌊pool ÷ one block⌋, "
                "a conversation's blocks = ⌈context ÷ block size⌉",
                q("pool holds", held, "conversations"),
                q("pool", pool.pool_bytes / GIB, "GiB", f"per GPU, sized at max_model_len "
                  f"{length:,}"),
                q("one block", page / MIB, "MiB", f"{size:,} tokens, per GPU"),
                q("block size", size, "tokens"),
                q("context", context, "tokens"))


def refusal_steps(dep: Deployment, settings: EngineSettings, longest: int,
                  contexts: list[int]) -> tuple[Step, ...]:
    """The longest --max-model-len that starts, then at it the conversations of each context
    the pool holds (those no longer than it), where each is the division shown."""
    steps = (longest_start_step(dep, settings, longest),
             *(pool_holds_step(dep, settings, longest, c) for c in contexts if c <= longest))
    return tuple(s for s in steps if s is not None)


def engine_check_step(engine: str, asked: int, held: int, what: str, reason: str) -> Step:
    """Why a point that fits the memory is not run: the ``asked`` sequences (or prompts,
    ``what``) against the ``held`` the ``engine`` runs at once at its length, beside the
    memory check, with the reason the text's first line gives (the floor's speeds above it
    are the arithmetic's, which the table and --json leave out there). Llama-3.1-70B fp8 (KV bf16)
    on an H100 under vllm serve, batch 1 at 2,000 tokens: 1 asked, 0 run (vLLM won't start
    at the model's 131,072 tokens), so it does not run."""
    return step("engine check", f"{what} asked, at most the {what} {engine} runs at once at "
                "this length: more, so it does not run (the floor's speeds above are the "
                "arithmetic's alone)",
                q(f"{engine} runs it", "no", "", reason),
                q(f"{what} asked", asked),
                q(f"{what} {engine} runs at once", held))
