"""How vLLM V1 pages the KV cache: layers in groups of one cache type and equal page size.

vLLM's hybrid KV-cache manager (vllm/v1/core/kv_cache_utils.py, v0.9.1–v0.11; design doc
docs/design/hybrid_kv_cache_manager.md) keeps one pool of equal-sized blocks for every
layer type:
- layers are sorted by cache type — full attention, each sliding window or chunk size,
  recurrent state (Mamba, linear attention) — and cut into groups of equal layer count:
  the smallest type's count, or the largest's when it is under 1.5× the smallest; the last
  group of a type is padded with empty layers;
- a block holds ``block_size`` tokens of every layer of one group, so all groups share
  one page size. With recurrent layers the attention block grows (in steps of 16 tokens)
  until one layer's page holds a whole state, and the state is padded to that page
  (vllm/model_executor/models/config.py, HybridAttentionMambaModelConfig);
- a request holds, per full-attention group, a block per ``block_size`` tokens; per window
  group, its own tokens' blocks while it is shorter than the window, then the blocks
  covering its window (and, while a prefill chunk runs, the chunk): at most
  ceil(min(window − 1 + max_num_batched_tokens, max_model_len) ÷ block_size) + 1 (v0.26
  under async scheduling: two chunks in flight, the caller's ``budget_tokens``); per
  attention-chunk group (Llama 4), the blocks from the start of the chunk its next token is
  in (``chunk_blocks``: a whole chunk's at most, one block just past a boundary); per state
  group, however long the request, one block without prefix caching, and with it in
  mamba_cache_mode "align" two (the running state and the last block-aligned one), three
  for Mamba-2 layers from v0.32 (a prefill checkpoint: MambaSpec.max_memory_usage_bytes, 2
  + num_prefill_checkpoint_blocks; vllm_hybrid.py);
- the pool has ``memory ÷ page`` blocks; vLLM's "Maximum concurrency" is the blocks ÷ those
  one max_model_len request holds, summed over the groups
  (get_max_concurrency_for_kv_cache_config), and it reports ``blocks ÷ groups × block_size``
  tokens as its "GPU KV cache size" (v0.24+ logs max concurrency × max_model_len instead,
  ``KVPool.logged_tokens``; a v0.11 log of Gemma-3-4B and a v0.26 log of Gemma-3-27B are
  reproduced in the tests).
A model with one cache type is one group (plain paged attention).
"""

from __future__ import annotations

from dataclasses import dataclass

from ridgeline.deployment import Deployment
from ridgeline.kvcache import attention_kv_bytes_per_token, state_bytes_per_sequence
from ridgeline.layouts import CHUNKED, FULL, LINEAR, MAMBA, WINDOW_MIXERS
from ridgeline.model import Layer, ModelSpec

KERNEL_BLOCK_ALIGNMENT = 16  # attention blocks grow for Mamba pages in steps of 16 tokens
PAD_TO_LARGEST = 1.5  # group by the largest type when it has under 1.5× the smallest's layers


@dataclass(frozen=True)
class KVGroups:
    """vLLM's KV-cache groups for one deployment, per GPU."""

    block_size: int  # tokens per block (enlarged for Mamba hybrids)
    layers_per_group: int
    page_bytes: float  # one block of one group, per GPU
    full: int  # groups of full-attention layers
    windows: tuple[tuple[int, int], ...]  # (window or chunk tokens, groups)
    states: int  # groups of recurrent-state layers
    state_blocks: int = 1  # blocks each state group holds per request (vllm_hybrid.py)
    draft_blocks: int = 0  # of them, one a draft token (vllm_pool.draft_state_blocks)
    # what sets a hybrid's block: one recurrent layer's state (conv + SSM, at the dtypes vLLM
    # keeps them in) per sequence per GPU, one attention layer's bytes per token per GPU, and
    # the step the block grows in; 0 where nothing grew it (no state, or no attention)
    state_layer_bytes: float = 0.0
    attention_token_bytes: float = 0.0
    alignment: int = 0
    chunks: tuple[int, ...] = ()  # the windows that are attention chunks (Llama 4's 8,192)

    @property
    def count(self) -> int:
        return self.full + sum(g for _, g in self.windows) + self.states

    def blocks_per_request(self, tokens: int, budget_tokens: int) -> int:
        """The most blocks one request of ``tokens`` tokens holds (vLLM's
        max_memory_usage_bytes of each group, in blocks)."""
        bs = self.block_size
        n = self.full * -(-tokens // bs)
        for window, groups in self.windows:
            n += groups * self.window_cap_blocks(window, budget_tokens, tokens)
        return n + self.states * self.state_blocks

    def window_cap_blocks(self, window: int, budget_tokens: int, tokens: int) -> int:
        """The most blocks one request of ``tokens`` tokens holds in a group of ``window``:
        a sliding window cdiv(min(window − 1 + budget_tokens, tokens), block_size) + 1, a block
        more for a window that starts mid-block (SlidingWindowSpec); an attention chunk
        cdiv(min(chunk + budget_tokens, tokens), block_size), its chunks starting on a block
        (ChunkedLocalAttentionSpec.max_memory_usage_bytes, v0.10 to main, where
        max_admission_blocks_per_request shares it). Llama-4 Scout's 8,192-token chunks at
        4,000 tokens in blocks of 64: 63, not a sliding window's 64."""
        bs = self.block_size
        if window in self.chunks:
            return -(-min(window + budget_tokens, tokens) // bs)
        return -(-min(window - 1 + budget_tokens, tokens) // bs) + 1

    def whole_prompt_blocks(self, tokens: int) -> int:
        """Blocks vLLM v0.19's admission gate charged a prompt of ``tokens`` tokens: every
        attention group, window groups too, its whole length (issue #39734)."""
        attention = self.full + sum(g for _, g in self.windows)
        return attention * -(-tokens // self.block_size) + self.states * self.state_blocks

    def capped_prompt_blocks(self, tokens: int, budget_tokens: int) -> int:
        """Blocks vLLM v0.20+'s admission gate charges a prompt of ``tokens`` tokens: each
        attention group cdiv(tokens, block_size), a window group at most its admission cap,
        cdiv(min(window − 1 + budget_tokens, max_model_len), block_size) + 1
        (get_num_blocks_to_allocate with apply_admission_cap; the cap is the start-up
        check's, SlidingWindowSpec.max_admission_blocks_per_request, v0.29 and v0.34 alike;
        a prompt is no longer than max_model_len, so the cap binds only past window − 1 +
        budget_tokens). Gemma-3-27B (one full and six 1,024-token window groups, blocks of
        64) at 512 tokens: 8 + 6 × 8 = 56, not the start-up check's 8 + 6 × 9 = 62."""
        bs = self.block_size
        own = -(-tokens // bs)
        n = self.full * own
        for window, groups in self.windows:  # the cap binds only past the window's room
            n += groups * min(own, self.window_cap_blocks(window, budget_tokens,
                                                          window + budget_tokens))
        return n + self.states * self.state_blocks

    def decode_blocks(self, tokens: int) -> int:
        """Blocks a request of ``tokens`` tokens holds while it decodes: a window group its
        tokens' blocks, cdiv(tokens, block_size), until the window's cap, cdiv(window − 1,
        block_size) + 1 (vLLM's SlidingWindowManager allocates cdiv(num_tokens, block_size)
        less the blocks remove_skipped_blocks freed, none while the request is inside its
        window; v0.29 and v0.34 alike), no prefill chunk; a chunk group the blocks of its
        current chunk (``chunk_blocks``), fewer again after each chunk boundary;
        sim/blocks.py's window_blocks. Gemma-3-27B (one full and six 1,024-token window
        groups, blocks of 64): 8 + 6 × 8 = 56 at 512 tokens, 128 + 6 × 17 = 230 at 8,192."""
        bs = self.block_size
        own = -(-tokens // bs)
        n = self.full * own
        for window, groups in self.windows:
            held = chunk_blocks(tokens, 1, window, bs) if window in self.chunks \
                else min(own, -(-(window - 1) // bs) + 1)
            n += groups * held
        return n + self.states * self.state_blocks

    def peak_decode_blocks(self, tokens: int) -> int:
        """A bound on the blocks a request holds while it decodes up to ``tokens`` tokens:
        its ``decode_blocks`` but for a chunk group, charged its most, a whole chunk's,
        min(cdiv(tokens, block_size), chunk ÷ block_size) (a block more where a chunk starts
        mid-block). Monotone in ``tokens``, as a fixed charge or a search wants it.
        Llama-4-Scout (one full and three 8,192-token chunk groups, blocks of 16) at 100,000
        tokens: 6,250 + 3 × 512 = 7,786, where it holds 6,250 + 3 × 106 = 6,568."""
        bs = self.block_size
        own = -(-tokens // bs)
        n = self.full * own
        for window, groups in self.windows:
            cap = (window // bs if window % bs == 0 else -(-(window - 1) // bs) + 1) \
                if window in self.chunks else -(-(window - 1) // bs) + 1
            n += groups * min(own, cap)
        return n + self.states * self.state_blocks

    def reported_tokens(self, blocks: int) -> int:
        """vLLM's logged "GPU KV cache size": blocks ÷ groups × block_size."""
        return blocks // self.count * self.block_size if self.count else 0


def chunk_blocks(tokens: int, new: int, chunk_tokens: int, block_size: int) -> int:
    """Blocks a chunked-local-attention group (Llama 4's attention_chunk_size) holds for a
    request caching ``tokens`` tokens while it computes the last ``new``: cdiv(tokens,
    block_size) − ⌊⌊(tokens − new) ÷ chunk⌋ · chunk ÷ block_size⌋, the blocks wholly before
    the chunk of its first new token freed (vLLM's ChunkedLocalAttentionManager,
    vllm/v1/core/single_type_kv_cache_manager.py: remove_skipped_blocks before each
    allocate_slots, v0.10.0 to v0.34.0; ``new`` 0: what it keeps between steps).
    Llama-4-Scout's 8,192-token chunks in blocks of 16, decoding at 100,000 tokens: 6,250 −
    6,144 = 106 (a sliding window of 8,192 would hold 513)."""
    if tokens <= 0:
        return 0
    start = max(tokens - new, 0) // chunk_tokens * chunk_tokens
    return -(-tokens // block_size) - start // block_size


def _layer_kind(layer: Layer) -> tuple[str, int] | None:
    """The cache type a layer's group is formed by: full attention, a window of so many
    tokens, or recurrent state; None for a layer that caches nothing."""
    if layer.mixer == FULL:
        return (FULL, 0)
    if layer.mixer in WINDOW_MIXERS and layer.window_tokens:
        return ("chunk" if layer.mixer == CHUNKED else "window", layer.window_tokens)
    if layer.mixer in (LINEAR, MAMBA):
        return ("state", 0)
    return None


def _layer_kinds(model: ModelSpec) -> list[tuple[str, int] | None]:
    """Each layer's cache type (``_layer_kind``), a sliding window the context never fills
    (ModelSpec.unfilled_window_tokens) kept as vLLM keeps it: its layers attend as full ones,
    but vLLM registers them under the config's sliding_window (a SlidingWindowSpec, the
    model-level window of cache_config.sliding_window), a window group whose request holds
    min(window − 1 + max_num_batched_tokens, max_model_len) tokens and a block more, every
    token it has (Phi-4-mini's 262,144 at max_model_len 32,768: 513 blocks of 64, not 512)."""
    unfilled = set(model.unfilled_window_layers)
    return [("window", model.unfilled_window_tokens) if i in unfilled else _layer_kind(layer)
            for i, layer in enumerate(model.layers)]


def cache_kinds(model: ModelSpec) -> set[tuple[str, int]]:
    """The cache types a model's layers form groups by (``_layer_kinds``): more than one is
    the hybrid vLLM's hybrid KV cache manager keeps apart (full attention beside windows or
    recurrent state)."""
    return {kind for kind in _layer_kinds(model) if kind is not None}


def group_counts(types: dict[tuple[str, int], int]) -> tuple[int, dict[tuple[str, int], int]]:
    """vLLM's cut of layers, ``types`` of them of each cache type, into groups of equal layer
    count: the smallest type's count, or the largest's when it is under 1.5× the smallest,
    and how many groups each type fills (the last one padded)."""
    fewest, most = min(types.values()), max(types.values())
    per_group = most if most < PAD_TO_LARGEST * fewest else fewest
    return per_group, {key: -(-n // per_group) for key, n in types.items()}


def full_layers_keep_groups(model: ModelSpec, more_full: int) -> bool:
    """Whether ``more_full`` more full-attention layers (an MTP drafter's, which vLLM pages
    with the target's) leave ``model``'s groups as they are but for the full layers' own,
    each group one layer wider: Qwen3-Next's 12 + 1 full layers beside 36 linear-attention
    ones, groups of 13 and still one full and three state groups, so its page grows by
    13/12 as a full-attention model's does."""
    types: dict[tuple[str, int], int] = {}
    for kind in _layer_kinds(model):
        if kind is not None:
            types[kind] = types.get(kind, 0) + 1
    full = types.get((FULL, 0), 0)
    if not full:
        return False
    per_group, groups = group_counts(types)
    grown_per, grown = group_counts({**types, (FULL, 0): full + more_full})
    return per_group == full and grown_per == full + more_full and grown == groups


def stage_group_layers(dep: Deployment, per_group: int, start: int, count: int) -> int:
    """The most layers of one KV-cache group on the pipeline stage holding layers
    [start, start + count): vLLM forms the groups over the whole model, each type's layers
    in order, ``per_group`` a group, and sizes each stage's block by its largest group
    (_project_kv_cache_groups_to_worker, get_kv_cache_config_from_groups). gpt-oss-120b at
    PP4: nine layers a stage, five of one kind, so five layers a page, not 4.5."""
    seen: dict[tuple[str, int], int] = {}
    held: dict[tuple[tuple[str, int], int], int] = {}
    for index, kind in enumerate(_layer_kinds(dep.model)):
        if kind is None:
            continue
        group = (kind, seen.get(kind, 0) // per_group)
        seen[kind] = seen.get(kind, 0) + 1
        if start <= index < start + count:
            held[group] = held.get(group, 0) + 1
    return max(held.values(), default=0)


def vllm_kv_groups(dep: Deployment, block_size: int, state_blocks: int = 1,
                   alignment: int = KERNEL_BLOCK_ALIGNMENT,
                   speculative_tokens: int = 0) -> KVGroups | None:
    """The groups vLLM V1 forms for ``dep``, each state group holding ``state_blocks`` blocks
    per request and one more a draft token (``speculative_tokens``: MambaSpec's
    num_speculative_blocks), a hybrid's attention block grown in steps of ``alignment``
    tokens until its page holds a state (one rank's, as vLLM shapes it with those drafts:
    kvcache.state_elements); None for a model with no cache at all."""
    model = dep.model
    tp = dep.tensor_parallel_size
    types: dict[tuple[str, int], int] = {}
    state_rank = 0.0  # one recurrent layer's state per sequence on one TP rank
    for layer, key in zip(model.layers, _layer_kinds(model), strict=True):
        if key is None:
            continue
        if key[0] == "state":
            state_rank = max(state_rank, state_bytes_per_sequence(
                model, layer, tensor_parallel_size=tp, speculative_tokens=speculative_tokens))
        types[key] = types.get(key, 0) + 1
    if not types:
        return None
    per_token_rank = attention_kv_bytes_per_token(model, dep.kv.bytes_per_element) \
        * dep.kv_replication / tp  # one attention layer, one token, one TP rank
    attention = any(kind != "state" for kind, _ in types)
    if state_rank and attention and per_token_rank:
        step = alignment * per_token_rank
        block_size = max(block_size, alignment * int(-(-state_rank // step)))
    per_group, groups = group_counts(types)
    layer_page_rank = block_size * per_token_rank if attention else state_rank
    pp = dep.pipeline_parallel_size  # a GPU holds 1/pp of the layers: page per GPU
    return KVGroups(
        block_size=block_size,
        layers_per_group=per_group,
        page_bytes=per_group * layer_page_rank / pp,
        full=groups.get((FULL, 0), 0),
        windows=tuple(sorted((w, g) for (kind, w), g in groups.items()
                             if kind in ("window", "chunk"))),
        states=groups.get(("state", 0), 0),
        state_blocks=state_blocks + (speculative_tokens if state_rank else 0),
        draft_blocks=speculative_tokens if state_rank else 0,
        state_layer_bytes=state_rank if attention and per_token_rank else 0.0,
        attention_token_bytes=per_token_rank if state_rank else 0.0,
        alignment=alignment if state_rank and attention and per_token_rank else 0,
        chunks=tuple(sorted(w for kind, w in groups if kind == "chunk")),
    )
