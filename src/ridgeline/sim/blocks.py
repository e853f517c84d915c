"""Paged KV blocks with prefix caching: allocate, share, free, evict.

Blocks of ``block_size`` tokens come from one pool. A full block of a shared prefix is
registered under its key (group, index) — vLLM hashes the tokens of each full block,
chained on the previous block's hash, so equal prefixes map to equal keys. A cached block
nobody holds stays reusable until it is evicted. With ``lru`` (vLLM V1: block_pool.py keeps
free and cached blocks in one free_block_queue, get_new_blocks pops its head, free_blocks
appends a released request's blocks tail first) never-used blocks go first, then every freed
block, plain or cached, in the order it was freed: an idle cached prefix is evicted once the
blocks freed before it are handed out, even with plain free blocks behind it. Without it
(SGLang's radix tree, the others) plain free blocks all go before any cached one is evicted.
Invariant: held + free + evictable == total.

Sliding windows (``window_tokens``, vLLM V1 with no full-attention layer): vLLM's
SlidingWindowManager.remove_skipped_blocks frees, before each allocate_slots, the blocks
wholly before (computed − window + 1) (vllm/v1/core/single_type_kv_cache_manager.py), so
such a request holds ceil((computed + new) ÷ block_size) − floor((computed − window + 1) ÷
block_size) blocks, at most ``cap_blocks(new)``: it grows to that cap (``held_for``), and
after each step gives back what its next token does not need (``trim``). Prefix caching
with windows, decided conservatively: a request that reuses or shares cached blocks (its
own after a preemption, a prefix group's) keeps them all, uncapped, and a request that has
freed blocks past its window publishes none of them when preempted, so it recomputes the
whole of its tokens (vLLM keeps freed blocks cached and finds a window's worth again).

Hybrids (``window_groups``: full attention beside sliding windows, one full group): the table
is the full group's, and each window group holds, beside it, the blocks of its own window of
the request's tokens, min(ceil(tokens ÷ block_size), its window's cap) — growing with the
request as vLLM's SlidingWindowManager allocates cdiv(num_tokens, block_size) less the blocks
remove_skipped_blocks freed (get_num_blocks_to_allocate, v0.29 and v0.34 alike), and given
back after each step down to what the next token needs (``trim``). These blocks are the
request's own (``Request.window_held``): never cached nor shared (conservative where vLLM
would find a shared prefix's window blocks cached). Gemma-3-27B (six window groups of 1,024
tokens, blocks of 64): a 512 + 128-token request holds 10 + 6 × 10 = 70 blocks, not 10 + 6 × 17.
A group of attention chunks (``chunk_sizes``, Llama 4's 8,192 tokens) holds instead the blocks
from the start of the chunk its first new token is in (kvgroups.chunk_blocks, vLLM's
ChunkedLocalAttentionManager), growing with the table's and given back, all but what the next
token needs, when the request crosses into a new chunk: Llama-4-Scout's three chunk groups in
blocks of 16 hold 3 × 512 blocks just before 98,304 tokens and 3 × 106 at 100,000, where a
sliding window of 8,192 would keep 3 × 513. The summed decodes (sim/decodes.py) follow it,
handing a member's chunk back here at the chunk's end (``give_back``), where a chunk is a whole
number of blocks; one that is not runs every step the plain way (``bulk_decodes``).

The cached prefix of a waiting request is asked for every step it waits at the queue's head
(could it start?), and is remembered between asks (``CachedPrefix``). A key entering or
leaving the cache, or the evictable list, marks only the prefixes it could change: a shared
prefix's key those of its group's members, a request's own key its owner's from that block
on. A head whose own cached blocks are evicted one at a time is walked again one block, not
its thousands (a 100,000-token prompt preempted under vLLM V1's pipeline: 0.4 ms a step).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict, deque

from ridgeline.kvgroups import chunk_blocks
from ridgeline.sim.request import Request


class CachedPrefix:
    """A request's leading blocks found in the cache (their keys) and which of them some
    request holds (their indices, ascending; the rest sit on the evictable list), as of the
    pool's ``version`` and the request's ``known_tokens``."""

    def __init__(self, known_tokens: int) -> None:
        self.known_tokens = known_tokens
        self.version = -1
        self.keys: list[tuple[int, int]] = []
        self.held: list[int] = []

    def cut(self, blocks: int) -> None:
        """Keep the first ``blocks`` blocks: those after may have changed."""
        del self.keys[blocks:]
        del self.held[bisect_left(self.held, blocks):]


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = True,
                 overhead_blocks: int = 0, lru: bool = False, window_tokens: int = 0,
                 gate_cap_blocks: int = 0,
                 window_groups: tuple[tuple[int, int], ...] = (),
                 chunk_sizes: tuple[int, ...] = ()) -> None:
        self.total = num_blocks
        self.block_size = block_size
        self.overhead = overhead_blocks  # blocks every request holds besides its tokens
        self.prefix_caching = prefix_caching
        self.lru = lru  # one queue for free and cached blocks (vLLM V1), else free ones first
        self.window = window_tokens  # a windowed request holds its last window (0: all)
        self.gate_cap = gate_cap_blocks  # vLLM v0.20+'s gate: a window's room (0: uncapped)
        # a hybrid's window groups, (window tokens, groups), each growing beside the table
        self.window_groups = window_groups
        self.chunk_sizes = chunk_sizes  # … of them, attention chunks (kvgroups.chunk_blocks)
        self.free = num_blocks  # blocks holding nothing …
        self._fresh = num_blocks  # … of them at the queue's head (never used; without lru, all)
        self._freed: deque[list[int]] = deque()  # … the rest (lru): [stamp, blocks] runs
        self._stamp = 0  # counts releases: a run's or a cached block's place in the queue
        self.held = 0  # blocks some request holds (a shared block counts once)
        self.refs: dict[tuple[int, int], int] = {}  # prefix key -> requests holding it
        self.evictable: OrderedDict[tuple[int, int], int] = OrderedDict()  # key -> stamp
        self.hits = 0  # prefix blocks reused …
        self.own_hits = 0  # … of them a preempted request's own, found again on its return
        self.version = 0  # bumped whenever a key of a shared prefix enters or leaves the cache
        # or the evictable list …
        self._group_changed: dict[int, int] = {}  # … the version of each group's last change
        self._own_low: dict[int, int] = {}  # request id -> the lowest index of its own blocks
        # changed since its CachedPrefix was last brought up to date
        self._prefixes: dict[int, CachedPrefix] = {}  # by request id

    @property
    def available(self) -> int:
        return self.free + len(self.evictable)

    @property
    def usage(self) -> float:
        """Share of the pool held by requests (vllm:kv_cache_usage_perc)."""
        return self.held / self.total if self.total else 0.0

    def table_blocks(self, tokens: int) -> int:
        """Blocks of the table a request caching ``tokens`` tokens holds: its tokens' blocks,
        plus the fixed overhead (recurrent states; a hybrid's window groups where they are
        charged whole) once it holds anything."""
        return -(-tokens // self.block_size) + (self.overhead if tokens > 0 else 0)

    def blocks_for(self, tokens: int, new: int = 1) -> int:
        """Blocks a request caching ``tokens`` tokens holds while it computes the last ``new``
        (by default one, a decode's): its table's, and a hybrid's window groups'."""
        return self.table_blocks(tokens) + self.window_blocks(tokens, new)

    def peak_blocks_for(self, tokens: int, new: int = 1) -> int:
        """A bound on the blocks a request caching up to ``tokens`` tokens, ``new`` at a step,
        holds at any step: ``blocks_for``, a chunk group charged as a window of its chunk's
        size would hold, never less than its chunk (``window_cap``)."""
        if not self.chunk_sizes:
            return self.blocks_for(tokens, new)
        own = -(-tokens // self.block_size) if tokens > 0 else 0
        return self.table_blocks(tokens) + sum(
            groups * min(own, self.window_cap(window, new)) for window, groups in self.window_groups)

    def window_cap(self, window: int, new: int) -> int:
        """The most blocks a request attending through a ``window``-token window holds while
        it computes ``new`` tokens: ceil((c + new) ÷ bs) − floor((c − window + 1) ÷ bs) peaks at
        ceil((new + window − 2) ÷ bs) + 1 (a decode's, new 1: kvgroups.decode_blocks'). 1,024
        tokens in blocks of 64: 17 for a decode, 33 for a 1,024-token chunk."""
        return -(-(max(new, 1) + window - 2) // self.block_size) + 1

    def cap_blocks(self, new: int) -> int:
        """``window_cap`` of the window a window-only model's table is capped at."""
        return self.window_cap(self.window, new)

    def window_blocks(self, tokens: int, new: int = 1) -> int:
        """Blocks a hybrid's window groups hold for a request caching ``tokens`` tokens while
        it computes the last ``new`` (0: what it keeps between steps): each group its tokens'
        blocks, at most its window's cap (``window_cap``), a chunk group those of its current
        chunk (kvgroups.chunk_blocks); 0 without window groups. Gemma-3-27B's six groups of
        1,024 tokens in blocks of 64: 60 for 640 tokens, 6 × 17 = 102 once a decode passes
        its window."""
        if not self.window_groups or tokens <= 0:
            return 0
        own = -(-tokens // self.block_size)
        return sum(groups * (chunk_blocks(tokens, new, window, self.block_size)
                             if window in self.chunk_sizes
                             else min(own, self.window_cap(window, new)))
                   for window, groups in self.window_groups)

    @property
    def bulk_decodes(self) -> bool:
        """Whether the summed decodes (sim/decodes.py) hold what this pool's requests hold:
        not with an attention chunk that starts mid-block (its blocks would fall back by a
        chunk's share of a block)."""
        return all(size % self.block_size == 0 for size in self.chunk_sizes)

    def window_growing(self, tokens: int) -> bool:
        """Whether a decoding request caching ``tokens`` tokens has a window group still under
        its cap, which takes a block with its table's next one (a chunk group always may: it
        grows with the table until its chunk ends)."""
        own = -(-tokens // self.block_size)
        return bool(self.chunk_sizes) or any(own < self.window_cap(window, 1)
                                             for window, _ in self.window_groups)

    def windowed(self, r: Request) -> bool:
        """Whether r's blocks stop at its window: a window is set and r holds no cached
        block, nor will publish its group's prefix (see the module's note)."""
        return self.window > 0 and not r.shared and (r.prefix_group < 0
                                                     or not self.prefix_caching)

    def held_for(self, r: Request, tokens: int, new: int) -> int:
        """Blocks r holds caching ``tokens`` tokens while it computes the last ``new``:
        ``blocks_for``, or for a windowed request at most ``cap_blocks(new)`` of its tokens'."""
        if self.window and tokens > 0 and self.windowed(r):
            return min(-(-tokens // self.block_size), self.cap_blocks(new)) + self.overhead
        return self.blocks_for(tokens, new)

    def need(self, r: Request, tokens: int, new: int) -> int:
        """Blocks r must take to cache ``tokens`` tokens while it computes the last ``new``
        (0: it holds them): a hybrid's table and window groups each short of what they need
        (neither lends the other its surplus), else ``held_for`` less what r holds."""
        if self.window_groups and tokens > 0:
            table = self.table_blocks(tokens) - (r.blocks_held - r.window_held)
            return max(table, 0) + max(self.window_blocks(tokens, new) - r.window_held, 0)
        return max(self.held_for(r, tokens, new) - r.blocks_held, 0)

    def trim(self, r: Request) -> None:
        """After a step: a windowed r gives back the blocks its window has passed, down to
        what its next token needs (vLLM frees them at its next allocate_slots), onto the
        free queue's tail; a hybrid's window groups theirs."""
        if r.num_computed <= 0:
            return
        if self.window_groups:
            surplus = r.window_held - self.window_blocks(r.num_computed, 0)
            if surplus > 0:
                r.window_held -= surplus
                self._give_back(r, surplus)
            return
        if not self.window:
            return
        surplus = r.blocks_held - self.held_for(r, r.num_computed, 1)
        if surplus <= 0 or not self.windowed(r):
            return
        self._give_back(r, surplus)

    def _give_back(self, r: Request, surplus: int) -> None:
        """``surplus`` of r's private blocks go back, onto the free queue's tail."""
        self.give_back(surplus)
        r.private_blocks -= surplus

    def give_back(self, surplus: int) -> None:
        """``surplus`` private blocks go back, onto the free queue's tail (the summed decodes'
        chunk groups at a chunk's start, their members' counters written later)."""
        self._stamp += 1
        if self.lru:
            self._freed.append([self._stamp, surplus])
            self._stamp += 1
        else:
            self._fresh += surplus
        self.free += surplus
        self.held -= surplus

    def trimmed(self, r: Request) -> bool:
        """Whether windowed r has freed blocks past its window (its leading blocks are gone)."""
        return self.window > 0 and self.windowed(r) \
            and -(-r.num_computed // self.block_size) > self.cap_blocks(1)

    def take(self, n: int) -> None:
        """Hand out ``n`` blocks (the caller checked they are available): the queue's head
        first, evicting the cached blocks found there."""
        left = n - min(n, self._fresh)
        self._fresh -= n - left
        self.free -= n - left
        freed, evictable = self._freed, self.evictable
        while left:
            if freed and (not evictable or freed[0][0] < next(iter(evictable.values()))):
                run = freed[0]
                got = min(left, run[1])
                run[1] -= got
                if not run[1]:
                    freed.popleft()
                self.free -= got
                left -= got
            else:  # evict the least recently freed cached block
                key, _ = evictable.popitem(last=False)
                del self.refs[key]
                self._changed(key)
                left -= 1
        self.held += n

    def free_before_cached(self) -> int:
        """The free blocks ahead of the first cached one in the queue: how many can be handed
        out without evicting anything."""
        if not self.evictable:
            return self.free
        first, blocks = next(iter(self.evictable.values())), self._fresh
        for stamp, run in self._freed:
            if stamp > first:
                break
            blocks += run
        return blocks

    def key(self, r: Request, index: int) -> tuple[int, int]:
        """The cache key of r's block ``index``: its prefix group's inside the shared prefix,
        its own beyond (what a preempted request finds again when it comes back)."""
        if r.prefix_group >= 0 and index < r.prefix_tokens // self.block_size:
            return (r.prefix_group, index)
        return (-1 - r.id, index)

    def _changed(self, key: tuple[int, int]) -> None:
        """``key`` entered or left the cache, or the evictable list: a shared prefix's key
        changes every member's CachedPrefix, a request's own key its owner's from there on."""
        group, index = key
        if group >= 0:
            self.version += 1
            self._group_changed[group] = self.version
            return
        owner = -1 - group
        if owner in self._prefixes and index < self._own_low.get(owner, index + 1):
            self._own_low[owner] = index

    def cached_prefix(self, r: Request) -> list[tuple[int, int]]:
        """The keys of r's leading blocks already in the cache (what admit would reuse)."""
        if not self.prefix_caching or r.shared:
            return []
        return list(self._cached(r).keys)

    def prefix_hit(self, r: Request) -> tuple[int, int]:
        """(r's leading blocks already in the cache, how many of them no request holds):
        what admit would reuse, and how many of those it takes off the evictable list."""
        if not self.prefix_caching or r.shared:
            return 0, 0
        cached = self._cached(r)
        return len(cached.keys), len(cached.keys) - len(cached.held)

    def _cached(self, r: Request) -> CachedPrefix:
        """r's CachedPrefix brought up to date: kept up to the first block that may have
        changed since (none of its group's may have), walked on from there."""
        cached = self._prefixes.get(r.id)
        low = self._own_low.pop(r.id, None)
        if cached is None or cached.known_tokens != r.known_tokens or (
                r.prefix_group >= 0
                and self._group_changed.get(r.prefix_group, -1) > cached.version):
            cached = self._prefixes[r.id] = CachedPrefix(r.known_tokens)
        elif low is not None and low < len(cached.keys):
            cached.cut(low)
        keys, held, refs = cached.keys, cached.held, self.refs
        for index in range(len(keys), (r.known_tokens - 1) // self.block_size):  # the last
            key = self.key(r, index)  # token is always computed
            holders = refs.get(key)
            if holders is None:
                break
            if holders:
                held.append(index)
            keys.append(key)
        cached.version = self.version
        return cached

    def admit(self, r: Request) -> int:
        """Hold the cached blocks r can reuse; return the tokens they cover."""
        keys = self.cached_prefix(r)
        self._prefixes.pop(r.id, None)
        self._own_low.pop(r.id, None)
        for key in keys:
            if self.refs[key] == 0:
                del self.evictable[key]
                self.held += 1
                self._changed(key)
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
        cached, reused = self.prefix_hit(r)  # reused blocks leave the evictable list
        computed = cached * self.block_size if not r.shared and not r.num_computed \
            else r.num_computed
        new = min(r.known_tokens - computed, budget)
        if self.window and not cached and self.windowed(r):
            need = self.held_for(r, computed + new, new)
        else:
            need = self.blocks_for(computed + new, new) - cached - len(r.shared)
        if whole is not None:  # (``whole`` counts a hybrid's window groups)
            own = self.table_blocks(r.known_tokens)
            if self.gate_cap and r.known_tokens > 0:  # v0.20+: a window's room, not the prompt
                own = min(-(-r.known_tokens // self.block_size), self.gate_cap) + self.overhead
            need = max(need, own - cached - len(r.shared) + whole)
        return need + reserved <= self.available - reused

    def next_block_each(self, requests: list[Request]) -> None:
        """Each of ``requests``, decodes whose last block is full, takes its table's next one:
        ``grow`` by one token on a pool without windows, the blocks handed out in their order
        (the caller checked they are available)."""
        self.take(len(requests))
        for r in requests:
            r.private_blocks += 1

    def grow(self, r: Request, tokens: int) -> bool:
        """Give r the blocks to cache ``tokens`` tokens; False (and no change) if it cannot."""
        new = tokens - r.num_computed
        need = self.need(r, tokens, new)
        if need <= 0:
            return True
        if need > self.available:
            return False
        self.take(need)
        r.private_blocks += need
        if self.window_groups:
            r.window_held = max(r.window_held, self.window_blocks(tokens, new))
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
            if key in self.refs or r.private_blocks == r.window_held:
                break  # another request published it first: r keeps its private copy
            self.refs[key] = 1
            self._changed(key)
            r.private_blocks -= 1
            r.shared.append(key)

    def retire(self, r: Request, cached_tokens: int | None = None) -> None:
        """Preemption: release r, but leave its full blocks (of its first ``cached_tokens``;
        default all it computed) cached so that, if nothing evicts them first, it recomputes
        only what was lost (vLLM V1 frees blocks into the prefix cache, it does not wipe
        them). A request that has freed blocks past its window publishes none (conservative)."""
        upto = r.num_computed if cached_tokens is None else min(cached_tokens, r.num_computed)
        if not self.trimmed(r):
            self.register(r, upto)
        self.release(r)

    def release(self, r: Request) -> None:
        """Return everything r holds; its shared prefix blocks stay cached if unused."""
        self._stamp += 1
        if r.private_blocks:  # the tail: queued before the shared blocks
            if self.lru:
                self._freed.append([self._stamp, r.private_blocks])
                self._stamp += 1
            else:
                self._fresh += r.private_blocks
        self.free += r.private_blocks
        self.held -= r.private_blocks
        r.private_blocks = r.window_held = 0
        for key in reversed(r.shared):  # tail first: the tail is evicted first, so what
            self.refs[key] -= 1  # survives is still a prefix (vLLM frees in reverse order)
            if self.refs[key] == 0:
                self.evictable[key] = self._stamp
                self.held -= 1
                self._changed(key)
        r.shared = []
