"""The KV pool a live engine reports, in the units it counts it (vLLM's blocks shared by its
KV-cache groups, or tokens), and the context each running request holds, read off its fill."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from ridgeline.deployment import Deployment
from ridgeline.errors import InputError
from ridgeline.kvgroups import KVGroups, vllm_kv_groups
from ridgeline.memory import EngineSettings, KVPool, kv_pool
from ridgeline.observation import Observation


@dataclass(frozen=True)
class EnginePool:
    """One engine's KV pool in the units the engine counts it: vLLM's blocks
    (cache_config_info), which its hybrid allocator shares among the model's KV-cache groups
    (kvgroups.py), or a token count (SGLang's max_total_num_tokens, vLLM's start-up log).
    Gemma-3-27B's 60,000 blocks of 16 in 7 groups hold 92 sequences of 4,096 tokens
    (decode_blocks: 256 + 6 × 65 = 646 each), not the 234 that 960,000 tokens ÷ 4,096 make."""

    tokens: int  # vLLM's count of the blocks' tokens (blocks ÷ groups × block size), else the
    blocks: int | None = None  # engine's own; blocks where the engine reports them
    block_size: int = 1
    groups: KVGroups | None = None  # the blocks' groups; None: one full-attention group

    def sequences(self, context: int) -> int:
        """Sequences of ``context`` tokens the pool holds, decoding: whole blocks each."""
        if self.blocks is None:
            return self.tokens // context
        if self.groups is not None:
            return self.blocks // self.groups.peak_decode_blocks(context)
        return self.blocks // math.ceil(context / self.block_size)

    def block_division(self, context: int) -> str:
        """The division ``sequences`` does, where whole blocks round it: 'in whole blocks of
        16: 27,975 blocks ÷ 583 a sequence' (Llama-3.1-8B's 447,600-token pool on an H100 at
        9,325 tokens: 47, not the 48 its tokens ÷ the context make); "" for a token count."""
        if self.blocks is None or self.block_size < 2:
            return ""
        need = self.groups.peak_decode_blocks(context) if self.groups is not None \
            else math.ceil(context / self.block_size)
        return (f"in whole blocks of {self.block_size}: {self.blocks:,} blocks ÷ {need:,} a "
                "sequence" + (f" over its {self.groups.count} KV-cache groups"
                              if self.groups is not None else ""))

    def tokens_held(self, share: float) -> int | None:
        """The tokens a request holds when it holds ``share`` of the pool: of a pool of
        several groups, the longest context whose decode_blocks fit its share of the blocks
        (peak_decode_blocks, monotone: an attention chunk's group charged a whole chunk, as
        the blocks alone do not tell where in its chunk a request is); None where no
        full-attention group grows with the context (a window's stops)."""
        if self.groups is None or self.blocks is None:
            return max(1, round(share * self.tokens))
        if not self.groups.full:
            return None
        held = share * self.blocks
        low, high = 0, int(held) * self.groups.block_size + 1  # its blocks(high) > held
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if self.groups.peak_decode_blocks(mid) <= held \
                else (low, mid)
        return max(1, low)

    @property
    def shown(self) -> str:
        """The pool as a sentence's object: '60,000 blocks of 16 shared by 7 KV-cache groups
        (137,136 tokens as vLLM counts them)', or its tokens."""
        if self.groups is None or self.blocks is None:
            return f"{self.tokens:,} tokens"
        return (f"{self.blocks:,} blocks of {self.groups.block_size} shared by "
                f"{self.groups.count} KV-cache groups ({self.tokens:,} tokens as vLLM counts "
                "them)")

    @classmethod
    def modelled(cls, pool: KVPool) -> EnginePool:
        """The modelled pool, counted as the engine counts it."""
        return cls._of(pool.tokens, pool.blocks, pool.block_size, pool.groups)

    @classmethod
    def _of(cls, tokens: int, blocks: int, block_size: int,
            groups: KVGroups | None) -> EnginePool:
        if groups is None or (groups.count == 1 and groups.full == 1):
            return cls(tokens, blocks, block_size)
        return cls(groups.reported_tokens(blocks), blocks, groups.block_size, groups)


def reported_pool(obs: Observation, dep: Deployment) -> EnginePool | None:
    """The pool the source reports for one engine, for the model served; None where it
    reports none, or only a vLLM log's token count for a model of several KV-cache groups,
    which the log counts one way before v0.24 and another after (engines.json)."""
    if obs.pool_tokens is None:
        return None
    size = obs.pool_block_size
    if size is None:
        if obs.kind == "log" and _several_groups(dep):
            return None
        return EnginePool(int(obs.pool_tokens))
    blocks = int(obs.pool_tokens // size)
    # V0 (it swaps; V1 does not), TensorRT-LLM: one block table for every layer
    if obs.swapped or obs.engine_family == "trtllm":
        return EnginePool(blocks * size, blocks, size)
    try:
        modelled = kv_pool(dep, EngineSettings()).groups
    except InputError:
        modelled = None
    groups = vllm_kv_groups(dep, size, modelled.state_blocks if modelled else 1)
    return EnginePool._of(blocks * size, blocks, size, groups)


def fill_pool(obs: Observation, dep: Deployment, settings: EngineSettings | None = None
              ) -> tuple[EnginePool, str] | None:
    """The pool a KV fill is a share of, and whose it is: the engine's reported one, else
    the one the engine's defaults (and the server's ``settings``: its drafter) leave on the
    deployment described; None where none can be sized."""
    pool = reported_pool(obs, dep)
    if pool is not None:
        return pool, "the engine's reported"
    try:
        return EnginePool.modelled(kv_pool(dep, settings or EngineSettings())), "the modelled"
    except InputError:
        return None


def _several_groups(dep: Deployment) -> bool:
    groups = vllm_kv_groups(dep, 16)
    return groups is not None and groups.count > 1


LOG_POOL_UNREAD = ("the start-up log's 'GPU KV cache size' is not read as the pool: with "
                   "several KV-cache groups vLLM logs it as blocks ÷ groups × block size "
                   "before v0.24 and as maximum concurrency × max_model_len after; the pool "
                   "is modelled")


def context_from_kv_usage(obs: Observation, dep: Deployment,
                          settings: EngineSettings | None = None) -> tuple[int, str] | None:
    """The tokens each running request holds, read off the KV cache's fill: usage × the
    pool (the engine's where it reports it, else its defaults on the deployment described,
    under the server's ``settings``, started at the context read: fill_at_context)
    ÷ running requests, a pool of several KV-cache groups turned into tokens through them
    (EnginePool.tokens_held). None without both gauges, or with an idle engine."""
    if obs.engine_family == "llama.cpp" or dep.engine.startswith("llama.cpp"):
        # its usage ratio is a share of -c, which /metrics does not give: its cells in use do
        if not (obs.kv_tokens and obs.running and statistics.fmean(obs.running) >= 1):
            return None
        cells, running = statistics.fmean(obs.kv_tokens), statistics.fmean(obs.running)
        return max(1, round(cells / running)), (f"llama-server's {cells:,.0f} KV cells in use "
                                                f"over {running:,.1f} busy slots")
    read = fill_at_context(obs, dep, settings)
    if read is None:
        return None
    pool, whose, tokens = read
    usage, running = statistics.fmean(obs.kv_usage), statistics.fmean(obs.running)
    return tokens, (f"from the KV cache's fill: {usage:.0%} of {whose} pool of {pool.shown} "
                    f"over {running:,.1f} running requests")


FILL_ROUNDS = 8  # re-sizings of a modelled pool at the context its fill gives, at most


def fill_at_context(obs: Observation, dep: Deployment, settings: EngineSettings | None = None
                    ) -> tuple[EnginePool, str, int] | None:
    """The pool the KV fill is read against, whose it is, and the tokens a running request
    holds by it. A modelled pool is started at the context it gives, as observe prices the
    rest (ObservedPool.modelled_settings): where the pool depends on max_model_len (vLLM V0
    profiles a max_model_len-token step), one sized at the model's default length gave the
    context, and another, at that context, the sequences it allows. Re-sized until the two
    agree (FILL_ROUNDS at most). None without both gauges, or with an idle engine."""
    if not obs.kv_usage or not obs.running:
        return None
    usage, running = statistics.fmean(obs.kv_usage), statistics.fmean(obs.running)
    if usage <= 0 or running < 1:
        return None
    settings = settings or EngineSettings()
    read: tuple[EnginePool, str, int] | None = None
    at = settings
    for _ in range(FILL_ROUNDS):
        filled = fill_pool(obs, dep, at)
        if filled is None or not filled[0].tokens:
            break
        pool, whose = filled
        tokens = pool.tokens_held(usage / running)
        if tokens is None:
            break
        read = pool, whose, tokens
        if reported_pool(obs, dep) is not None or tokens == at.max_model_len:
            break
        at = replace(settings, max_model_len=tokens)
    return read
