"""The running decodes as a handful of sums, so a step costs the same at any batch size.

A decoding request gains one cached token per step. Counting steps globally (g), a
member's cache holds ``base + g`` tokens and its output ``gen + g`` tokens, with base and
gen fixed when it joined; so the batch's total context is ``Σbase + count·g``, its finish
step is known on arrival (a heap keeps the next one), and the blocks it holds,
``Σ ceil((base + g) / block_size)``, follow from how many members share each residue of
base modulo the block size. Members' own counters are written back (``sync``) only when
somebody needs to read them: when they finish, are preempted, or an observer asks.

Sliding windows: a decode reads min(context + 1, window) keys. Per window the set keeps
the members still under it (their count and Σ base) and a heap of the steps at which each
fills it (window − 1 − base); the others read the whole window. Between two such steps
the keys grow linearly, so a run of decode steps may not cross one (``next_change``).

Chunked attention (Llama 4): a decode reads (context mod C) + 1 keys, its own chunk's
(attention_span). Per chunk size the set keeps Σ (base − k·C), k the chunk each member's
cache is in, so the keys are that sum + count·(g + 1); a heap holds the step at which each
member's next chunk starts, where its keys fall back to 1 (k + 1, the sum less C): a run of
decode steps may not cross one either.

A windowed member (vLLM, no full attention: ``BlockPool.held_for``) stops taking blocks once
it holds ``cap`` of them: from the step its cache passes (cap − 1)·block_size tokens it
leaves the residues (a heap of those steps, which a run may not cross either), and holds
min(ceil((base + g) / block_size), cap) blocks. A hybrid's window groups (``window_caps``,
BlockPool.window_blocks) take a block each with the table's next one until they hold their
window's cap: a member's residue counts the blocks it takes at a boundary (its weight), and
the heap of cap steps carries what each window's groups stop taking there. A hybrid's
attention-chunk groups (``chunk_groups``, Llama 4; chunks a whole number of blocks) take a
block each with the table's next one, never capped, and at the step a member's cache reaches
the start of its next chunk give back the chunk's blocks (``fill_windows`` returns them to the
caller, for the pool), as BlockPool.trim does.
"""

from __future__ import annotations

import heapq

from ridgeline.attention_span import Chunk, Span
from ridgeline.sim.blocks import BlockPool
from ridgeline.sim.request import Request


def window_caps(pool: BlockPool) -> tuple[tuple[int, int], ...]:
    """A hybrid's window groups as a decode sees them, (its blocks' cap, groups), one entry per
    cap: Gemma-3-27B's six groups of 1,024 tokens in blocks of 64, ((17, 6),)."""
    caps: dict[int, int] = {}
    for window, groups in pool.window_groups:
        if window in pool.chunk_sizes:
            continue  # its blocks fall back at each chunk: ``chunk_groups``
        cap = pool.window_cap(window, 1)
        caps[cap] = caps.get(cap, 0) + groups
    return tuple(sorted(caps.items()))


class DecodeSet:
    def __init__(self, block_size: int, overhead_blocks: int = 0,
                 windows: tuple[int, ...] = (), clip_tokens: int = 1 << 62,
                 cap_blocks: int = 0, chunks: tuple[Chunk, ...] = (),
                 window_caps: tuple[tuple[int, int], ...] = (),
                 chunk_groups: tuple[tuple[int, int], ...] = ()) -> None:
        self.joins = 0  # numbers each joining: a heap entry is live while its number is
        self.block_size = block_size
        self.overhead = overhead_blocks  # fixed blocks per request (see BlockPool)
        self.windows = windows  # sliding-window sizes of the model's attention layers
        self.chunks = chunks  # and the chunks of its chunked ones
        self.clip = clip_tokens  # the most of a member's remaining output ``held`` counts
        self.cap = cap_blocks  # the most blocks a windowed member holds (0: none is capped)
        self.window_caps = window_caps  # a hybrid's window groups: (their cap, groups)
        self.chunk_groups = chunk_groups  # … its chunk groups: (chunk tokens, groups)
        self.chunk_weight = sum(groups for _, groups in chunk_groups)
        self.step_end_s = 0.0  # when the latest step ended: every member's latest token
        self._reset()

    def _reset(self) -> None:
        self.count = 0
        self.counted = 0  # … of them, requests whose chunks the ITL keeps (``Request.counted``)
        self.base_sum = 0  # Σ (cached tokens − g) over members
        self.residues = [0] * self.block_size  # blocks members take, by base mod block_size …
        self.growing = 0  # … all of them: the blocks the members still growing take
        # (step it stops, join, blocks it stops taking there, request) heap
        self.caps: list[tuple[int, int, int, Request]] = []
        self.finishes: list[tuple[int, int, Request]] = []  # (last step, join, request) heap
        self.members: dict[int, Request] = {}
        self.under = {w: [0, 0] for w in self.windows}  # members under window w: count, Σ base
        self.fills: dict[int, list[tuple[int, int, Request]]] = {w: [] for w in self.windows}
        self.offsets = {c: 0 for c in self.chunks}  # Σ (base − the first token of its chunk) …
        self.crossings: dict[Chunk, list[tuple[int, int, Request]]] = {
            c: [] for c in self.chunks}  # … and the steps members start their next chunk
        # the steps a member's cache reaches its next chunk of a chunk group, where the group
        # gives back the chunk's blocks
        self.releases: dict[int, list[tuple[int, int, Request]]] = {
            size: [] for size, _ in self.chunk_groups}
        self.end_sum = 0  # Σ finish step (output − gen) over members: remaining = end − g …
        self.clipped = [0, 0]  # … members with more than ``clip`` to go: count, Σ end …
        self.unclips: list[tuple[int, int, Request]] = []  # … and the step each comes under

    def add(self, r: Request, g: int, windowed: bool = False) -> None:
        """r decodes from step g on: it holds the blocks for its cache, one token to feed
        (``windowed``: at most ``cap`` of them)."""
        base = r.num_computed - g
        r.decode_base, r.decode_gen, r.decode_from = base, r.num_generated - g, g
        self.joins += 1
        r.decode_join = join = self.joins
        end = g + r.output_tokens - r.num_generated
        heapq.heappush(self.finishes, (end, join, r))
        self.members[r.id] = r
        self.count += 1
        self.counted += r.counted
        self.base_sum += base
        self.end_sum += end
        r.decode_clipped = end - g > self.clip
        if r.decode_clipped:
            self.clipped[0] += 1
            self.clipped[1] += end
            heapq.heappush(self.unclips, (end - self.clip, join, r))
        r.decode_window = windowed and self.cap > 0
        weight = self.weight_at(r, g)
        if weight:
            self.residues[base % self.block_size] += weight
            self.growing += weight
            if r.decode_window and self._cap_step(r) <= end:  # (one that finishes first
                heapq.heappush(self.caps, (self._cap_step(r), join, 1, r))  # never gets there)
            for cap, groups in self.window_caps:
                step = self._step_at(r, cap)
                if g < step <= end:
                    heapq.heappush(self.caps, (step, join, groups, r))
        for w in self.windows:
            fills = w - 1 - base  # from this step on it reads the whole window
            if g < fills:
                under = self.under[w]
                under[0] += 1
                under[1] += base
                heapq.heappush(self.fills[w], (fills, join, r))
        for c in self.chunks:
            size = c.tokens
            start = (base + g) // size * size  # the first token of its chunk
            self.offsets[c] += base - start
            heapq.heappush(self.crossings[c], (start + size - base, join, r))
        for size, _ in self.chunk_groups:  # its cache at the next chunk's start
            heapq.heappush(self.releases[size], ((base + g) // size * size + size - base,
                                                 join, r))

    def _cap_step(self, r: Request) -> int:
        """The step from which windowed r takes no block: its cache past (cap − 1) blocks."""
        return self._step_at(r, self.cap)

    def _step_at(self, r: Request, cap: int) -> int:
        """The step from which member r's cache is past (cap − 1) blocks."""
        return (cap - 1) * self.block_size - r.decode_base + 1

    def growing_at(self, r: Request, g: int) -> bool:
        """Whether member r still takes a block when its last one fills, at step g."""
        return not r.decode_window or g < self._cap_step(r)

    def weight_at(self, r: Request, g: int) -> int:
        """The blocks member r takes when its last one fills, at step g: its table's one
        (none for a windowed member at its cap) and one for each hybrid window group still
        under its cap."""
        weight = (1 if self.growing_at(r, g) else 0) + self.chunk_weight
        for cap, groups in self.window_caps:
            if g < self._step_at(r, cap):
                weight += groups
        return weight

    def held(self, g: int) -> int:
        """Σ min(remaining output, clip) over the members at step g (SGLang's estimate of the
        running outputs): the unclipped ones' ends − their count·g, plus clip for each other."""
        heap, clipped = self.unclips, self.clipped
        while heap and heap[0][0] <= g:
            _, join, r = heapq.heappop(heap)
            if self._live(r, join) and r.decode_clipped:
                r.decode_clipped = False
                clipped[0] -= 1
                clipped[1] -= r.output_tokens - r.decode_gen
        n, ends = clipped
        return self.end_sum - ends - (self.count - n) * g + self.clip * n

    def context(self, g: int) -> int:
        """Cached tokens of all members at step g."""
        return self.base_sum + self.count * g

    def keys(self, g: int) -> dict[Span, float]:
        """Keys the members' decodes read at step g, per attention span (None: full)."""
        out: dict[Span, float] = {None: float(self.context(g) + self.count)}
        for w, (n, base) in self.under.items():
            out[w] = float(base + n * (g + 1) + w * (self.count - n))
        for c, offset in self.offsets.items():
            out[c] = float(offset + self.count * (g + 1))
        return out

    def next_change(self) -> int:
        """The next step a member finishes, fills a window or starts a chunk (entries may be
        stale: early)."""
        if not self.windows and not self.caps and not self.chunks and not self.chunk_groups:
            return self.finishes[0][0] if self.finishes else 1 << 62
        tops = [heap[0][0] for heap in self.fills.values() if heap]
        tops += [heap[0][0] for heap in self.crossings.values() if heap]
        tops += [heap[0][0] for heap in self.releases.values() if heap]
        if self.caps:
            tops.append(self.caps[0][0])
        if self.finishes:
            tops.append(self.finishes[0][0])
        return min(tops, default=1 << 62)

    def fill_windows(self, g: int) -> int:
        """Members whose window is full by step g read the whole window from now on; members
        whose next chunk starts by step g read from its start; windowed members at their cap
        by step g take no more blocks. Returns the blocks chunk groups give back, their
        members' caches at a chunk's start by step g (a whole chunk's a group)."""
        caps = self.caps
        while caps and caps[0][0] <= g:
            _, join, blocks, r = heapq.heappop(caps)
            if self._live(r, join):
                self.residues[r.decode_base % self.block_size] -= blocks
                self.growing -= blocks
        for w, heap in self.fills.items():
            under = self.under[w]
            while heap and heap[0][0] <= g:
                _, join, r = heapq.heappop(heap)
                if self._live(r, join):
                    under[0] -= 1
                    under[1] -= r.decode_base
        for c, crossings in self.crossings.items():
            size = c.tokens
            while crossings and crossings[0][0] <= g:
                step, join, r = heapq.heappop(crossings)
                if self._live(r, join):
                    self.offsets[c] -= size
                    heapq.heappush(crossings, (step + size, join, r))
        freed = 0
        for (size, groups), releases in zip(self.chunk_groups, self.releases.values(),
                                            strict=True):
            while releases and releases[0][0] <= g:
                step, join, r = heapq.heappop(releases)
                if self._live(r, join):
                    freed += groups * (size // self.block_size)
                    heapq.heappush(releases, (step + size, join, r))
        return freed

    def blocks_over(self, g: int, k: int) -> int:
        """New blocks the members take in steps g … g+k−1. A member holds
        ceil((base + g) / block_size) blocks and takes one at each step that starts with its
        last block exactly full — every block_size steps from j₀ = −(base + g) mod block_size — so
        k = q·block_size + m steps give each q, plus one to those with j₀ < m: the members
        whose residue lies in one run of m classes."""
        bs = self.block_size
        q, m = divmod(k, bs)
        if not m:
            return self.growing * q
        first = (-g - m + 1) % bs  # residues (−g − j) mod bs for j < m: first … first+m−1
        end = first + m
        r = self.residues
        partial = sum(r[first:end]) if end <= bs else sum(r[first:]) + sum(r[:end - bs])
        return self.growing * q + partial

    def blocks_next_step(self, g: int) -> int:
        """Members whose cache fills its last block exactly: they need one more to go on."""
        return self.residues[-g % self.block_size]

    def sync(self, r: Request, g: int) -> None:
        """Write r's counters as they stand at step g."""
        r.num_computed = r.decode_base + g
        r.num_generated = r.decode_gen + g
        if g > r.decode_from:  # it has had a token from each step since it joined
            r.last_token_s = self.step_end_s
        blocks = -(-r.num_computed // self.block_size)
        window = sum(groups * min(blocks, cap) for cap, groups in self.window_caps) \
            if r.num_computed > 0 else 0
        for size, groups in self.chunk_groups:  # its current chunk's (none at its start)
            window += groups * (blocks - r.num_computed // size * size // self.block_size)
        if r.decode_window and blocks > self.cap:
            blocks = self.cap
        r.window_held = window
        r.private_blocks = blocks + self.overhead + window - len(r.shared)

    def sync_all(self, g: int) -> None:
        for r in self.members.values():
            self.sync(r, g)

    def pop_finished(self, g: int) -> list[Request]:
        """Members whose last token came out by step g, in finishing order, synced. Entries
        of requests that left early (preempted) or came back later are stale: skipped."""
        out = []
        while self.finishes and self.finishes[0][0] <= g:
            _, join, r = heapq.heappop(self.finishes)
            if not self._live(r, join):
                continue
            self._remove(r, g)
            self.sync(r, g)
            out.append(r)
        return out

    def _live(self, r: Request, join: int) -> bool:
        """Is this heap entry r's current one? (not left, nor left and come back since)"""
        return r.decode_join == join and self.members.get(r.id) is r

    def discard(self, r: Request, g: int) -> None:
        """Take r out at step g before it finishes (preemption); its heap entries go stale."""
        self._remove(r, g)

    def _remove(self, r: Request, g: int) -> None:
        del self.members[r.id]
        self.count -= 1
        self.counted -= r.counted
        base = r.decode_base
        self.base_sum -= base
        weight = self.weight_at(r, g)
        if weight:
            self.residues[base % self.block_size] -= weight
            self.growing -= weight
        end = r.output_tokens - r.decode_gen
        self.end_sum -= end
        if r.decode_clipped:
            r.decode_clipped = False
            self.clipped[0] -= 1
            self.clipped[1] -= end
        for w in self.windows:
            if g < w - 1 - base:  # still under its window
                under = self.under[w]
                under[0] -= 1
                under[1] -= base
        for c in self.chunks:  # its chunk as of step g (the steps to g filled: fill_windows)
            self.offsets[c] -= base - (base + g) // c.tokens * c.tokens

    def clear(self, g: int) -> None:
        """Hand every member back to the plain step, its counters synced."""
        self.sync_all(g)
        self._reset()
