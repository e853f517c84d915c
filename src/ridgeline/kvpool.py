"""KVPool: one GPU's KV pool, the memory taken before it, and what the pool holds.

Each engine's builder fills one in (vllm_pool.py, sglang_pool.py, trtllm_memory.py,
llamacpp_pool.py); memory.kv_pool keeps the pipeline stage, or the GPU of a layer split, that
binds. Its properties turn what is left into blocks, tokens and vLLM's 'Maximum concurrency'.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ridgeline.engine_names import engine_name
from ridgeline.kvgroups import KVGroups
from ridgeline.llamacpp_split import SplitDevice
from ridgeline.record_views import headline_repr
from ridgeline.stages import Stage
from ridgeline.units import GIB, require_count
from ridgeline.vllm_memory import VLLMAccounting, parse_version, vllm_data


@dataclass(frozen=True)
class KVPool:
    """The KV pool of one GPU and everything that was taken before it (``kv_pool``), in
    bytes per GPU: the card's ``total_bytes``, less the weights, the profiled activations,
    CUDA graphs and the rest each engine takes, leaves ``pool_bytes``, paged into ``blocks``
    of ``block_size`` tokens. Llama-3.1-8B bf16 on one H100 under vLLM 0.34 at
    max_model_len 8,192: 79.18 GiB, less 14.96 GiB of weights, 1.84 of activations and
    0.72 of CUDA graphs (and 0.15 outside torch), leaves 59.03 GiB: 7,555 blocks of 64,
    483,520 tokens at 128 KiB a token. ``tokens`` counts the pool's block slots; the token
    figure the engine logs, and ``fit`` prints, is ``logged_tokens(max_model_len)``, which
    differs for windowed and hybrid models."""

    engine: str
    total_bytes: float  # bytes per GPU, as the runtime reports it (device_memory_bytes)
    reserved_fraction: float  # gpu_memory_utilization / mem_fraction_static / …
    weight_bytes: float  # per GPU
    activation_bytes: float
    non_torch_bytes: float
    cuda_graph_bytes: float
    free_fraction_of_rest: float  # TRT-LLM: its fraction applies to what is left
    kv_bytes_per_token: float  # per GPU, full-attention (growing) layers
    block_size: int
    max_num_seqs: int
    profile_tokens: int
    # vLLM V1: the hybrid allocator's groups and page
    groups: KVGroups | None = field(default=None, repr=False)
    forward_bytes: float = 0.0  # the profiled forward pass's activations (vLLM)
    sampler_bytes: float = 0.0  # the profiled sampler's buffers (vLLM); activations = the larger
    # vLLM: the version whose accounting applies
    accounting: VLLMAccounting | None = field(default=None, repr=False)
    slot_cache_bytes: float = 0.0  # llama.cpp: window and recurrent caches sized by slots
    slot_bytes_each: float = 0.0  # of those, what one more slot adds (its window and state)
    # llama.cpp: what one more cell of -c adds to the compute buffer (its mask, and scores
    # where they are the larger part: llamacpp_memory.buffer_bytes_per_cell)
    buffer_bytes_per_cell: float = 0.0
    host_cells: int = 0  # llama.cpp with every growing layer on the host (or, of a layer
    # split, on other GPUs): the -c cells the GPU's compute buffer (its mask grows with -c)
    # still leaves room for
    context_cells: int = 0  # llama.cpp: the -c cells its compute buffer is sized at
    windows_apart: bool = False  # llama.cpp, SGLang: a conversation costs tokens x context
    in_flight_batches: int = 1  # vLLM v0.26+ under async scheduling: window groups keep 2
    windows_in_full: bool = False  # vLLM before v0.9.1: a window+full model cached in full
    # vLLM: why its hybrid KV-cache manager was off where that cached windows or chunks in
    # full ("--disable-hybrid-kv-cache-manager", "VLLM_ALLOW_CHUNKED_…=0 …"); "" otherwise
    hybrid_manager_off: str = ""
    stage: Stage | None = None  # pipeline parallel: the stage whose pool binds (stages.py)
    split_device: SplitDevice | None = None  # llama.cpp -sm layer: the GPU whose cells bind
    encoder_bytes: float = 0.0  # vLLM: the vision tower's profiled peak (encoder_profile)
    encoder_held_bytes: float = 0.0  # … its outputs, held through the text pass and sampler
    encoder_images: int = 0  # … the dummy images it ran
    # … the images one prompt may carry, which (× seats) cap them; the --limit-mm-per-prompt
    # image count that set it (None: not given, vLLM's 999)
    encoder_images_per_prompt: int = 0
    image_limit: int | None = None
    # buffers kept for every seat from start-up: TensorRT-LLM's engine backend (its runtime
    # and decoder), vLLM's Model Runner V2 (its sampler state, counted from v0.27)
    seat_buffer_bytes: float = 0.0
    # TensorRT-LLM 0.x-1.2: the recurrent (Mamba / linear-attention) state its Python Mamba
    # cache manager allocates for every max_batch_size seat before the KV budget is measured
    # (trtllm_memory.seat_state_bytes); 0 for a model without such layers, or another engine
    seat_state_bytes: float = 0.0
    # vLLM Model Runner V2: what it holds for the drafter from start-up (an n-gram drafter's
    # token ids, a draft model's speculator, probabilistic drafts' logits: vllm_mrv2_drafter)
    drafter_buffer_bytes: float = 0.0
    # vLLM Model Runner V2 beside a draft model: the tokens its profile's forward runs, fewer
    # than profile_tokens by one a dummy request (0: profile_tokens)
    forward_tokens: int = 0
    runner: str = ""  # vLLM: the GPU model runner whose profile sized it (V0, V1, MRV2)
    compile_bytes: float = 0.0  # vLLM MRV2: a cold torch.compile's transient in the peak
    moe_workspace_bytes: float = 0.0  # vLLM: the fused-MoE workspace held through the sampler
    # vLLM v0.19+: a sparse layer's indexer in the profile, its logits dummy beside the
    # step's hidden states (vllm_memory.indexer_pass_bytes), over the MoE workspace
    indexer_bytes: float = 0.0
    engine_era: str = ""  # SGLang: which of its default rules sized it (sglang_memory.py)
    # vLLM --kv-cache-memory-bytes: the pool as set (0: sized from the profile). vLLM skips
    # its memory check then, so rest_bytes is the room the card leaves it (fraction 1)
    set_pool_bytes: float = 0.0
    # SGLang --max-total-tokens, TensorRT-LLM max_tokens: the pool holds at most this many
    # tokens (0: no cap), whatever memory is left
    token_cap: int = 0
    # SGLang 0.4.3.post3-0.5.6.post2 with a drafter: tokens it allocates past what its profile
    # sized, before the cap (sglang_memory.sglang_drafter_headroom_tokens)
    headroom_tokens: int = 0
    # SGLang's hybrid (recurrent-state) models: the requests its state pool holds, carved out
    # of the pool before the KV cache (slot_cache_bytes); 0: no such pool
    state_slots: int = 0
    # … set at a number of requests (its radix cache off: --max-running-requests or 512)
    # whatever the memory, not carved as mamba_full_memory_ratio's share
    state_pool_fixed: bool = False
    # … one request's recurrent state per GPU; 0: no state pool (a pool of 0 slots is still
    # one: it runs no request)
    state_request_bytes: float = 0.0
    # TensorRT-LLM: the part of kv_bytes_per_token its MTP drafter's layers cache
    # (drafter_memory.py), which a conversation holds beside the model's own
    drafter_kv_bytes_per_token: float = 0.0
    # the part of weight_bytes a drafter's weights take (its MTP layers, a draft model or an
    # EAGLE head: drafter_memory.drafter_bytes), loaded beside the model's
    drafter_weight_bytes: float = 0.0
    # vLLM on a part the runtime lists as several devices (an MI250's two GCDs): the devices
    # whose own pools, one tensor-parallel rank each, this one adds up (across_devices)
    runtime_devices: int = 1
    # vLLM --enable-lora: the adapters' stacked A and B buffers, loaded with the weights and
    # taken before the cache (vllm_lora.py)
    lora_bytes: float = 0.0
    # vLLM --enable-eplb: of weight_bytes, what the redundant experts add past the
    # checkpoint's share (vllm_eplb.py); in weight_bytes, as vLLM counts them
    redundant_expert_bytes: float = 0.0
    # TensorRT-LLM cache_transceiver_config: the KV transfer buffers (trtllm_transceiver.py),
    # in the PyTorch backend's profiled peak (before its fraction), or, on the TensorRT engine
    # backend, taken from what the fraction leaves (``transfer_after_fraction``)
    transfer_buffer_bytes: float = 0.0
    transfer_after_fraction: bool = False
    # llama.cpp under --fit: the memory it leaves free on the device (--fit-target, default
    # 1024 MiB), taken before the cache like a buffer, so the cells the pool holds are those a
    # run at this placement allocates without --fit moving a layer (another one) to the host
    # (llamacpp_fit.fit_pool)
    fit_free_bytes: float = 0.0
    # vLLM, SGLang serving a 16-bit checkpoint quantized on load where the engine builds the
    # layers at 16 bits and quantizes after loading (load_peak.py): the weights this GPU
    # holds at start-up, before they shrink to weight_bytes (0: loaded as served)
    load_peak_bytes: float = 0.0
    # SGLang serving a model it counts as multimodal: the embedding cache (v0.5.18+) and any
    # GPU feature-transport pool (v0.5.16+) its KV budget loses (sglang_mm_reserve.py)
    mm_reserve_bytes: float = 0.0
    # vLLM v0.34+'s extensible KV cache: what its measurement after warm-up keeps free past
    # total × gpu_memory_utilization (the memory held before its start-up snapshot and its
    # margin, beyond what 1 − the fraction leaves) and the VMM granules it rounds to
    # (vllm_extensible.kept_free_bytes, granule_cut_bytes); 0 where the profile sizes the pool
    kept_free_bytes: float = 0.0

    def __repr__(self) -> str:
        return headline_repr(self, ("engine", "blocks", "block_size", "tokens", "pool_bytes",
                                    "weight_bytes", "total_bytes"))

    def across_devices(self, n: int) -> KVPool:
        """The pool of a part the runtime lists as ``n`` devices, each a tensor-parallel rank
        that sizes this pool for itself: every byte n times, the blocks, tokens and seats the
        same (each device holds its share of every token)."""
        if n == 1:
            return self
        groups = None if self.groups is None \
            else replace(self.groups, page_bytes=self.groups.page_bytes * n)
        return replace(
            self, total_bytes=self.total_bytes * n, weight_bytes=self.weight_bytes * n,
            activation_bytes=self.activation_bytes * n, non_torch_bytes=self.non_torch_bytes * n,
            cuda_graph_bytes=self.cuda_graph_bytes * n,
            kv_bytes_per_token=self.kv_bytes_per_token * n, groups=groups,
            forward_bytes=self.forward_bytes * n, sampler_bytes=self.sampler_bytes * n,
            slot_cache_bytes=self.slot_cache_bytes * n, slot_bytes_each=self.slot_bytes_each * n,
            buffer_bytes_per_cell=self.buffer_bytes_per_cell * n,
            encoder_bytes=self.encoder_bytes * n, encoder_held_bytes=self.encoder_held_bytes * n,
            seat_buffer_bytes=self.seat_buffer_bytes * n,
            seat_state_bytes=self.seat_state_bytes * n, compile_bytes=self.compile_bytes * n,
            drafter_buffer_bytes=self.drafter_buffer_bytes * n,
            moe_workspace_bytes=self.moe_workspace_bytes * n, indexer_bytes=self.indexer_bytes * n,
            set_pool_bytes=self.set_pool_bytes * n,
            state_request_bytes=self.state_request_bytes * n,
            drafter_weight_bytes=self.drafter_weight_bytes * n, lora_bytes=self.lora_bytes * n,
            redundant_expert_bytes=self.redundant_expert_bytes * n,
            transfer_buffer_bytes=self.transfer_buffer_bytes * n,
            fit_free_bytes=self.fit_free_bytes * n, load_peak_bytes=self.load_peak_bytes * n,
            mm_reserve_bytes=self.mm_reserve_bytes * n,
            kept_free_bytes=self.kept_free_bytes * n, runtime_devices=n)

    @property
    def forward_tokens_run(self) -> int:
        """The tokens the profiled forward ran: ``forward_tokens`` where a drafter cut them,
        else the scheduler's budget (``profile_tokens``)."""
        return self.forward_tokens or self.profile_tokens

    @property
    def engine_buffers(self) -> bool:
        """TensorRT-LLM's engine backend: runtime buffers and decoder kept for every seat."""
        return self.engine == "trtllm" and self.seat_buffer_bytes > 0

    @property
    def kv_share(self) -> float:
        """The binding pipeline stage's cache-holding layers over an even split's (1 without a
        pipeline)."""
        return 1.0 if self.stage is None else self.stage.kv_share

    @property
    def weights_overflow(self) -> bool:
        """The weights alone take more than the card holds: the engine could not load them."""
        return self.weight_bytes > self.total_bytes

    @property
    def load_budget_bytes(self) -> float:
        """The memory the engine loads its weights into: vLLM's gpu_memory_utilization × the
        card (what it is told it may use); SGLang's card less what its CUDA context and
        distributed start-up took before the load (mem_fraction_static sizes the pool after
        the load and does not bound it). 80 GB H100: vLLM 0.92 × 79.18 = 72.85 GiB."""
        if self.engine == "sglang" and self.reserved_fraction:
            return self.total_bytes - self.non_torch_bytes / self.reserved_fraction
        return self.reserved_bytes

    @property
    def load_overflow(self) -> bool:
        """The 16-bit weights a checkpoint quantized on load holds at start-up
        (``load_peak_bytes``) are more than the memory the engine loads into: it runs out of
        memory loading them, whatever the served weights leave."""
        return self.load_peak_bytes > self.load_budget_bytes

    @property
    def reserved_bytes(self) -> float:
        """The memory the engine lets itself use: the card's total × its reserved fraction
        (vLLM's gpu_memory_utilization, SGLang's mem_fraction_static; 1 for llama.cpp)."""
        return self.total_bytes * self.reserved_fraction

    @property
    def rest_bytes(self) -> float:
        """The reserved memory less everything taken before the cache; negative when the
        weights and the profiling pass already overflow it."""
        budget = self.reserved_bytes
        before = 0.0 if self.transfer_after_fraction else self.transfer_buffer_bytes
        return budget - self.weight_bytes - self.lora_bytes - self.activation_bytes \
            - self.non_torch_bytes - self.cuda_graph_bytes - self.seat_buffer_bytes - before \
            - self.seat_state_bytes \
            - self.fit_free_bytes - self.mm_reserve_bytes - self.drafter_buffer_bytes \
            - self.kept_free_bytes

    @property
    def fraction_left_bytes(self) -> float:
        """What the fraction (TensorRT-LLM's) leaves the cache, less the transfer buffers
        where they come after it; never negative."""
        after = self.transfer_buffer_bytes if self.transfer_after_fraction else 0.0
        return max(0.0, self.rest_bytes * self.free_fraction_of_rest - after)

    @property
    def pool_bytes(self) -> float:
        """The KV pool per GPU: what is left (× TensorRT-LLM's fraction), or the pool set by
        --kv-cache-memory-bytes — none where that overflows the card, which runs out of memory
        rather than serve."""
        if self.set_pool_bytes:
            return 0.0 if self.overflow_bytes else self.set_pool_bytes
        left = self.fraction_left_bytes + self.headroom_bytes
        # SGLang's hybrid: the static pool its state pool is carved from; the cap binds on the
        # KV cache beside it (state_kv_bytes)
        return min(left, self.capped_bytes) if self.token_cap and not self.state_request_bytes \
            else left

    @property
    def headroom_bytes(self) -> float:
        """The memory of SGLang's ``headroom_tokens``, allocated past its profile (out of what
        mem_fraction_static holds back); none where the profile leaves the pool nothing."""
        if not self.headroom_tokens or self.rest_bytes <= 0:
            return 0.0
        return self.headroom_tokens * self.page_bytes / self.block_size

    @property
    def capped_bytes(self) -> float:
        """The memory a token cap (--max-total-tokens) allows: its whole blocks."""
        return self.token_cap // self.block_size * self.page_bytes

    @property
    def capped(self) -> bool:
        """Whether the token cap, not the memory, sized the pool (SGLang's hybrid: the KV
        cache beside its state pool)."""
        left = self.fraction_left_bytes + self.headroom_bytes
        if self.state_request_bytes:
            left = max(0.0, left - self.slot_cache_bytes)
        return bool(self.token_cap) and self.capped_bytes < left

    @property
    def state_kv_bytes(self) -> float:
        """SGLang's hybrid: the KV cache beside its state pool, what the static pool leaves
        after the states (none where they fill it), at most --max-total-tokens' whole pages:
        SGLang takes the states from the uncapped rest, then caps the tokens
        (handle_max_mamba_cache, then min(profiled, max_total_tokens))."""
        kv = max(0.0, self.pool_bytes - self.slot_cache_bytes)
        return min(kv, self.capped_bytes) if self.token_cap else kv

    @property
    def kv_cache_bytes(self) -> float:
        """The KV cache itself per GPU, what a pool's size means wherever one is printed or
        compared: SGLang's hybrid, what its state pool leaves of the static pool
        (state_kv_bytes); any other, the pool (pool_bytes)."""
        return self.state_kv_bytes if self.state_request_bytes else self.pool_bytes

    @property
    def overflow_bytes(self) -> float:
        """How far a pool set by --kv-cache-memory-bytes overruns the room the card leaves it
        (0 when it fits, or when the pool was sized from the profile)."""
        return max(0.0, self.set_pool_bytes - self.rest_bytes) if self.set_pool_bytes else 0.0

    @property
    def page_bytes(self) -> float:
        """One block's memory per GPU."""
        if self.groups is not None:
            return self.groups.page_bytes
        return self.kv_bytes_per_token * self.block_size

    @property
    def blocks(self) -> int:
        """Blocks of the growing cache (llama.cpp: -c cells, beside its slot-sized caches)."""
        page = self.page_bytes
        if not page:
            return self.host_cells
        if self.state_request_bytes:
            return int(self.state_kv_bytes // page)
        return max(0, int((self.pool_bytes - self.slot_cache_bytes) // page))

    @property
    def tokens(self) -> int:
        """Tokens of cache the pool holds, counted as vLLM did before v0.24 (blocks ÷ groups ×
        block_size, so every group counted as growing); llama.cpp's cells. For the figure
        the engine logs, and ``fit`` prints, read ``logged_tokens(max_model_len)``: the same
        for a full-attention model (Llama-3.1-8B on an H100: 483,520), not for a windowed or
        hybrid one (gpt-oss-20b at 8,192 tokens: 1,299,328 here, 1,294,272 logged)."""
        if self.groups is not None:
            return self.groups.reported_tokens(self.blocks)
        return self.blocks * self.block_size

    def logged_tokens(self, max_model_len: int) -> int:
        """The engine's own token figure ("GPU KV cache size"), the one ``fit`` prints: from
        vLLM v0.24 its maximum concurrency × max_model_len, before it ``tokens``.
        ``max_model_len`` is a positive whole number (0, -5, nan and '8192' are refused)."""
        max_model_len = require_count(max_model_len, "max_model_len")
        if self.groups is not None and self.accounting is not None \
                and self.accounting.tokens_from_concurrency:
            return int(self.concurrency(max_model_len) * max_model_len)
        return self.tokens

    @property
    def window_budget_tokens(self) -> int:
        """The prefill tokens a window group must keep blocks for, on top of its window:
        max_num_batched_tokens per batch in flight (vLLM v0.26+ async scheduling: two)."""
        return self.profile_tokens * self.in_flight_batches

    def request_blocks(self, max_model_len: int) -> int:
        """The most blocks one max_model_len request holds, as vLLM's start-up check and its
        'Maximum concurrency' count them (0 without KV-cache groups)."""
        if self.groups is None:
            return 0
        return self.groups.blocks_per_request(max_model_len, self.window_budget_tokens)

    def admission_blocks(self, prompt_tokens: int) -> int | None:
        """Free blocks vLLM's admission gate asks before it admits a prompt of
        ``prompt_tokens`` tokens (scheduler_reserve_full_isl, on from v0.19): v0.19's charged
        every window group the whole prompt, later ones its prompt's blocks up to the start-up
        check's charge (KVGroups.capped_prompt_blocks: Gemma-3-27B at 512 tokens, 56); None
        where no such gate runs (other engines, vLLM before v0.19, no KV-cache groups)."""
        rule = self.admission_rule
        if rule is None or self.groups is None:
            return None
        if rule == "whole":
            return self.groups.whole_prompt_blocks(prompt_tokens)
        return self.groups.capped_prompt_blocks(prompt_tokens, self.window_budget_tokens)

    @property
    def admission_rule(self) -> str | None:
        """Which admission gate vLLM runs (scheduler_reserve_full_isl): "whole" (v0.19, every
        window group charged the whole prompt), "capped" (v0.20+, a window group at most its
        admission cap), None where none runs (other engines, vLLM before v0.19, V0, no
        KV-cache groups)."""
        a = self.accounting
        if self.engine != "vllm" or self.groups is None or a is None or a.engine == "V0":
            return None
        rule = vllm_data()["full_prompt_admission"]
        version = parse_version(a.version)
        if version < parse_version(str(rule["from"])):
            return None
        return "whole" if version < parse_version(str(rule["windows_capped_from"])) \
            else "capped"

    def concurrency(self, max_model_len: int) -> float:
        """Full-length sequences that fit (vLLM's 'Maximum concurrency'): tokens ÷
        max_model_len, or with groups blocks ÷ the blocks one such request holds."""
        if self.groups is not None:
            return self.blocks / self.request_blocks(max_model_len)
        return self.tokens / max_model_len


def block_past_pool(pool: KVPool, block: int | None) -> str:
    """Why the --block-size asked (``block``; None: the engine's own) leaves ``pool`` not one
    block where a smaller one would fit, or "": one block per GPU more than the pool keeps for
    blocks (not where the weights, their load or a set pool overrun the card: fit names
    that). No engine starts so: vLLM finds its cache short of one request ('To serve at
    least one request with the models's max seq len …', _check_enough_kv_cache_memory in
    v1/core/kv_cache_utils.py, a request holding one block at least), SGLang rounds its
    tokens down to whole pages, none ('Not enough memory. Please try to increase
    --mem-fraction-static.'), TensorRT-LLM holds no block to start with
    (capacity.refuses_to_start). Llama-3.1-8B on one H100 under vLLM 0.34: one block of
    1,000,000 tokens is 122.07 GiB, past the 59.03 GiB pool."""
    if block is None or pool.block_size != block or not pool.page_bytes or pool.blocks \
            or pool.weights_overflow or pool.load_overflow or pool.overflow_bytes:
        return ""
    room = pool.state_kv_bytes if pool.state_request_bytes \
        else pool.pool_bytes - pool.slot_cache_bytes
    if room < pool.page_bytes / block:  # not a token's room: no block fits, and fit says why
        return ""
    engine = engine_name(pool.engine)
    return (f"--block-size {block:,}: one block is {pool.page_bytes / GIB:,.2f} GiB a GPU, more "
            f"than the whole KV pool ({room / GIB:,.2f} GiB), which holds no block, and "
            f"{engine} does not start so; give a smaller --block-size")
