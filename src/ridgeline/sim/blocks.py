"""Paged KV blocks with prefix caching: allocate, share, free, evict.

Blocks of ``block_size`` tokens come from one pool. A full block of a shared prefix is
registered under its key (group, index) — vLLM hashes the tokens of each full block,
chained on the previous block's hash, so equal prefixes map to equal keys. A cached block
nobody holds stays reusable until an allocation needs the space (LRU eviction, a released
request's blocks queued tail first, as vllm/v1/core/kv_cache_manager.py frees them).
Invariant: held + free + evictable == total.
"""

from __future__ import annotations

from collections import OrderedDict

from ridgeline.sim.request import Request


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = True,
                 overhead_blocks: int = 0) -> None:
        self.total = num_blocks
        self.block_size = block_size
        self.overhead = overhead_blocks  # blocks every request holds besides its tokens
        self.prefix_caching = prefix_caching
        self.free = num_blocks  # blocks holding nothing
        self.held = 0  # blocks some request holds (a shared block counts once)
        self.refs: dict[tuple[int, int], int] = {}  # prefix key -> requests holding it
        self.evictable: OrderedDict[tuple[int, int], None] = OrderedDict()
        self.hits = 0  # prefix blocks reused …
        self.own_hits = 0  # … of them a preempted request's own, found again on its return
        self.version = 0  # bumped whenever a key enters or leaves the cache
        self._prefixes: dict[int, tuple[int, int, list[tuple[int, int]]]] = {}  # memo

    @property
    def available(self) -> int:
        return self.free + len(self.evictable)

    @property
    def usage(self) -> float:
        """Share of the pool held by requests (vllm:kv_cache_usage_perc)."""
        return self.held / self.total if self.total else 0.0

    def blocks_for(self, tokens: int) -> int:
        """Blocks a request caching ``tokens`` tokens holds: its tokens' blocks, plus the
        fixed overhead (window groups, recurrent states) once it holds anything."""
        return -(-tokens // self.block_size) + (self.overhead if tokens > 0 else 0)

    def take(self, n: int) -> None:
        """Hand out ``n`` blocks (the caller checked they are available)."""
        from_free = min(n, self.free)
        self.free -= from_free
        if n > from_free:
            self.version += 1
        for _ in range(n - from_free):  # evict least recently freed cached blocks
            key, _ = self.evictable.popitem(last=False)
            del self.refs[key]
        self.held += n

    def key(self, r: Request, index: int) -> tuple[int, int]:
        """The cache key of r's block ``index``: its prefix group's inside the shared prefix,
        its own beyond (what a preempted request finds again when it comes back)."""
        if r.prefix_group >= 0 and index < r.prefix_tokens // self.block_size:
            return (r.prefix_group, index)
        return (-1 - r.id, index)

    def cached_prefix(self, r: Request) -> list[tuple[int, int]]:
        """The keys of r's leading blocks already in the cache (what admit would reuse)."""
        if not self.prefix_caching or r.shared:
            return []
        memo = self._prefixes.get(r.id)  # a waiting head is asked every step: walk its
        if memo is not None and memo[:2] == (self.version, r.known_tokens):  # blocks only
            return memo[2]  # when the cache's keys changed
        limit = r.known_tokens - 1  # the last token is always computed
        keys = []
        for index in range(limit // self.block_size):
            key = self.key(r, index)
            if key not in self.refs:
                break
            keys.append(key)
        self._prefixes[r.id] = (self.version, r.known_tokens, keys)
        return keys

    def admit(self, r: Request) -> int:
        """Hold the cached blocks r can reuse; return the tokens they cover."""
        keys = self.cached_prefix(r)
        self._prefixes.pop(r.id, None)
        for key in keys:
            if self.refs[key] == 0:
                del self.evictable[key]
                self.held += 1
            self.refs[key] += 1
            r.shared.append(key)
        if keys:  # (most admissions hit nothing: no generator for them)
            self.hits += len(keys)
            self.own_hits += sum(1 for key in keys if key[0] < 0)  # beyond any group's prefix
        return len(keys) * self.block_size

    def could_admit(self, r: Request, budget: int, reserved: int = 0,
                    whole: int | None = None) -> bool:
        """Would r (waiting, holding nothing) get its first chunk's blocks, ``reserved``
        blocks being taken first? admit + grow, without changing anything. ``whole``: vLLM
        v0.19+'s gate, which also asks its whole known sequence's blocks free, with these
        blocks more (its window groups' prefill room, in this table's blocks)."""
        keys = self.cached_prefix(r)
        computed = len(keys) * self.block_size if not r.shared and not r.num_computed \
            else r.num_computed
        new = min(r.known_tokens - computed, budget)
        need = self.blocks_for(computed + new) - len(keys) - len(r.shared)
        if whole is not None:
            need = max(need, self.blocks_for(r.known_tokens) - len(keys) - len(r.shared) + whole)
        reused = sum(1 for key in keys if self.refs[key] == 0)  # leave the evictable list
        return need + reserved <= self.available - reused

    def grow(self, r: Request, tokens: int) -> bool:
        """Give r the blocks to cache ``tokens`` tokens; False (and no change) if it cannot."""
        need = self.blocks_for(tokens) - r.blocks_held
        if need <= 0:
            return True
        if need > self.available:
            return False
        self.take(need)
        r.private_blocks += need
        return True

    def register(self, r: Request, upto_tokens: int | None = None) -> None:
        """Publish r's full blocks (by default those of its shared prefix) for reuse."""
        if not self.prefix_caching:
            return
        if upto_tokens is None:
            if r.prefix_group < 0:
                return
            upto_tokens = min(r.num_computed, r.prefix_tokens)
        for index in range(len(r.shared), upto_tokens // self.block_size):
            key = self.key(r, index)
            if key in self.refs or r.private_blocks == 0:
                break  # another request published it first: r keeps its private copy
            self.version += 1
            self.refs[key] = 1
            r.private_blocks -= 1
            r.shared.append(key)

    def retire(self, r: Request, cached_tokens: int | None = None) -> None:
        """Preemption: release r, but leave its full blocks (of its first ``cached_tokens``;
        default all it computed) cached so that, if nothing evicts them first, it recomputes
        only what was lost (vLLM V1 frees blocks into the prefix cache, it does not wipe
        them)."""
        upto = r.num_computed if cached_tokens is None else min(cached_tokens, r.num_computed)
        self.register(r, upto)
        self.release(r)

    def release(self, r: Request) -> None:
        """Return everything r holds; its shared prefix blocks stay cached if unused."""
        self.free += r.private_blocks
        self.held -= r.private_blocks
        r.private_blocks = 0
        for key in reversed(r.shared):  # tail first: the tail is evicted first, so what
            self.refs[key] -= 1  # survives is still a prefix (vLLM frees in reverse order)
            if self.refs[key] == 0:
                self.evictable[key] = None
                self.held -= 1
        r.shared = []
