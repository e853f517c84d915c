"""The simulated engine's limits: the pool, block size, batch caps, and speculative decoding,
from the engine-aware memory model (``sim_config``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ridgeline.chunked_prefill import chunks_prefill
from ridgeline.context_length import served_positions
from ridgeline.deployment import Deployment
from ridgeline.engine_scheduling import (
    long_prefill_threshold,
    overlapped_scheduling,
    v1_free_queue,
    vllm_mamba_prefix_async_off,
)
from ridgeline.errors import InputError


def tokens_per_step(drafts: int, acceptance: float) -> float:
    """Tokens a speculative verify step streams on average: 1 + a + a² + … + a^k, the
    target model's own token and each draft kept only while all before it were (Leviathan
    et al. 2023); 1 without drafts."""
    return sum(acceptance**i for i in range(drafts + 1)) if drafts else 1.0


def acceptance_for_tokens(drafts: int, tokens: float) -> float:
    """The acceptance rate at which ``drafts`` drafts keep ``tokens`` a verify step on
    average: tokens_per_step inverted, by bisection, as it rises with the rate from 1 (none
    kept) to drafts + 1 (all). An engine's observed acceptance length (SGLang's
    spec_accept_length, vLLM bench's spec_decode_acceptance_length: the bonus token
    included) read this way prices the step as --spec-acceptance would: 3 drafts keeping
    2.533 tokens a step, tokens_per_step(3, 0.7), accept at 0.7."""
    if not drafts or not 1 <= tokens <= drafts + 1:  # NaN fails too
        raise InputError(f"{drafts} draft{'s' if drafts != 1 else ''} keep 1 to {drafts + 1} "
                         f"tokens a verify step, not {tokens:g}")
    if tokens in (1, drafts + 1):  # none kept, or all
        return float(tokens > 1)
    low, high = 0.0, 1.0
    for _ in range(60):  # 2^-60 of the rate: past a float's precision of it
        mid = (low + high) / 2
        low, high = (mid, high) if tokens_per_step(drafts, mid) < tokens else (low, mid)
    return (low + high) / 2


MAX_DRAFT_TOKENS = 128  # past any proposer's draft length (EAGLE, n-gram, suffix decoding)


def check_spec(drafts: int, acceptance: float, draft_cost: float) -> None:
    """A draft length, acceptance rate and drafter cost speculative decoding can have, or an
    InputError saying which is not."""
    if not 0 <= drafts <= MAX_DRAFT_TOKENS:
        raise InputError(f"the draft length must be 0 to {MAX_DRAFT_TOKENS}, got {drafts}")
    if not 0 <= acceptance <= 1:
        raise InputError("the draft acceptance rate is a probability in [0, 1], got "
                         f"{acceptance:g}")
    check_draft_cost(draft_cost)


def check_draft_cost(draft_cost: float) -> float:
    """A drafter pass's cost (--spec-draft-cost) speculative decoding can have, or an
    InputError: a share of the target's time, 0 to 1."""
    if not 0 <= draft_cost <= 1:  # NaN fails both
        raise InputError("a drafter pass's cost is a share of the target's time for the "
                         "same tokens, 0 to 1 (a drafter as slow as the target gains "
                         f"nothing), got {draft_cost:g}")
    return draft_cost


def spec_step_s(target_s: float, one_token_s: float, drafts: int, draft_cost: float,
                drafted_s: float | None = None) -> float:
    """A speculative step's time: the target's pass (``target_s``), its drafter's pass over
    the same tokens at ``draft_cost`` of the target's time for them without what a drafter
    never does (``drafted_s``, None: ``target_s``; less --cpu-offload-gb's host-link read),
    then drafts − 1 drafter passes of one token for each row that samples (``one_token_s``:
    the target's time for that, so reckoned, 0 for none). EAGLE's 3 drafts at 0.05 after a
    20 ms verify and a 15 ms one-token pass: 20 + 1 + 1.5 = 22.5 ms."""
    if not drafts or not draft_cost:
        return target_s
    t = target_s + draft_cost * (target_s if drafted_s is None else drafted_s)
    if one_token_s and drafts > 1:
        t += (drafts - 1) * draft_cost * one_token_s
    return t

@dataclass(frozen=True)
class SimConfig:
    num_blocks: int
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    prefix_caching: bool = True
    overhead_blocks: int = 0  # blocks each request holds besides its tokens' (hybrid models)
    spec_tokens: int = 0  # speculative decoding: draft length
    spec_acceptance: float = 0.0  # chance each draft token is accepted
    spec_draft_cost: float = 0.0  # a drafter pass's time ÷ the target's for the same tokens
    # vLLM V1 with an EAGLE, MTP or draft-model proposer: slots a running request is given
    # beyond the step's tokens, for the drafter's next proposals (Scheduler
    # num_lookahead_tokens = the draft length; 0 for n-gram and the other engines)
    spec_lookahead_tokens: int = 0
    # an n-gram drafter Model Runner V2 runs on the GPU (vLLM 0.32+): each step with drafts
    # pays its lookup's kernels (vllm_mrv2_drafter.ngram_lookup_s); False: the CPU's lookup
    spec_gpu_lookup: bool = False
    fast_path: bool = True
    max_steps: int = 50_000_000
    reserve_full: bool = False  # TensorRT-LLM's GUARANTEED_NO_EVICT: whole output reserved
    prefill_first: bool = False  # SGLang: prompt steps alone, decodes waiting (no mixed chunk)
    token_ratio: bool = False  # SGLang: admission by new_token_ratio (sim/token_ratio.py) …
    ignore_eos: bool = False  # … the running outputs held whole (ignore_eos requests)
    ubatch_tokens: int = 0  # llama.cpp: a step (-b tokens) runs as passes of this many (-ub)
    # vLLM v0.19+ (scheduler_reserve_full_isl): a waiting request starts only with its whole
    # known sequence's blocks free, and its window groups' admission charge beyond what the
    # fixed charge counts: (window tokens, groups) with the tokens in flight a window keeps
    # (0: v0.19, which charged a window group the whole prompt), over the full groups
    whole_prompt_gate: bool = False
    gate_windows: tuple[tuple[int, int], ...] = ()
    gate_chunks: tuple[int, ...] = ()  # … of them, attention chunks (no block more)
    gate_in_flight: int = 0
    gate_full_groups: int = 1
    gate_fixed_blocks: int = 0  # the window groups' blocks the fixed charge already counts
    # vLLM V1, a model with no full attention: a request holds its blocks of the last this
    # many tokens (SlidingWindowManager.remove_skipped_blocks frees those the window passed;
    # sim/blocks.py), 0: all it cached; and v0.20+'s gate asks at most this many blocks of
    # the whole prompt (a window's room with a step's tokens), 0: the whole prompt's
    window_cap_tokens: int = 0
    window_gate_blocks: int = 0
    # vLLM V1, a hybrid with one full-attention group: its window groups, (window tokens,
    # groups), each holding a request's blocks of its window beside the table, growing with
    # the request (sim/blocks.py); () where they are a fixed charge in ``overhead_blocks``
    window_groups: tuple[tuple[int, int], ...] = ()
    # … of them, the attention chunks (Llama 4's 8,192): a chunk group holds the blocks of
    # the request's current chunk, freed at each chunk boundary (kvgroups.chunk_blocks)
    window_chunks: tuple[int, ...] = ()
    # vLLM V1: a request's full prefix blocks enter the prefix cache when they are scheduled,
    # not when computed (SGLang, TensorRT-LLM, llama.cpp: after the step; SchedulerConfig)
    cache_on_schedule: bool = True
    # vLLM V1: free and cached blocks share one LRU queue (block_pool.py); SGLang's radix
    # tree and the others evict a cached block only when no free one is left
    lru_free_queue: bool = True
    # TensorRT-LLM's default is off (enable_chunked_prefill): contexts run whole
    chunked_prefill: bool = True
    # without chunked prefill, refuse a prompt longer than the step's whole token budget, as
    # TensorRT-LLM's LLM API refuses it ("The sum of prompt length (…), query length (0)
    # should not exceed max_num_tokens (…)", llmapi/llm.py _check_arguments): simulate's
    # runs; False chunks it as if chunked prefill were on (plan's first check reads how many
    # there were, and checks again with it on)
    refuse_past_budget: bool = False
    # vLLM V1: a running request's positions and slots end at max_model_len (a verify step's
    # drafts and the lookahead cut short near it: SchedulerConfig.max_model_len)
    positions_capped: bool = False
    # vLLM --long-prefill-token-threshold: the most tokens a request takes a step (0: off),
    # and whether a request alone is held to it too (before v0.31)
    long_prefill_token_threshold: int = 0
    long_prefill_alone: bool = False
    # vLLM's async scheduling, SGLang's and TensorRT-LLM's overlap schedulers
    # (``overlapped_scheduling``): batch k+1 is formed as batch k starts, so on a busy engine
    # an arrival joins a step later (``Run.arrive_due``) and a finished request's seat and
    # blocks come free at the end of the next step (``Simulator.finish``); the synchronous
    # loop where False
    async_scheduling: bool = False

    def admission_extra(self, prompt_tokens: int) -> int | None:
        """Blocks of this table the gate asks beyond a request's own for a prompt of
        ``prompt_tokens`` tokens (None: no gate): each window group's cdiv(prompt, block
        size), from v0.20 at most its admission cap, cdiv(min(window − 1 + the tokens in
        flight, max_model_len), block size) + 1 (get_num_blocks_to_allocate with
        apply_admission_cap, SlidingWindowSpec.max_admission_blocks_per_request, v0.34); an
        attention chunk's cdiv(min(chunk + the tokens in flight, max_model_len), block size)
        (ChunkedLocalAttentionSpec's, KVGroups.window_cap_blocks).
        Gemma-3-27B on an H100 (six groups of 1,024 tokens, blocks of 64, two batches of 8,192
        tokens in flight): 6 × 8 = 48 for a 512-token prompt, 6 × 273 = 1,638 for a
        32,000-token one."""
        if not self.whole_prompt_gate:
            return None
        bs, need = self.block_size, 0
        for window, groups in self.gate_windows:
            blocks = -(-prompt_tokens // bs)
            if self.gate_in_flight and window in self.gate_chunks:
                blocks = min(blocks, -(-min(window + self.gate_in_flight,
                                            self.max_model_len) // bs))
            elif self.gate_in_flight:
                room = min(window - 1 + self.gate_in_flight, self.max_model_len)
                blocks = min(blocks, -(-room // bs) + 1)
            need += groups * blocks
        return max(0, -(-(need - self.gate_fixed_blocks) // self.gate_full_groups))


SPEC_METHODS = ("eagle", "draft-model", "ngram")  # --spec-method: the drafter kinds


def spec_lookahead_tokens(engine: str, spec_method: str, spec_tokens: int) -> int:
    """The lookahead slots vLLM V1's scheduler gives each running request beyond the step's
    tokens (num_lookahead_tokens): the draft length for a drafter that runs a model (EAGLE,
    MTP, a draft model: use_eagle() or uses_draft_model()), none for n-gram lookup or
    another engine."""
    if spec_method not in SPEC_METHODS:
        raise ValueError(f"speculative method must be one of {', '.join(SPEC_METHODS)}, "
                         f"got {spec_method!r}")
    return spec_tokens if engine == "vllm" and spec_method != "ngram" else 0


def sim_config(dep: Deployment, settings: object | None = None,
               spec_tokens: int = 0, spec_acceptance: float = 0.0,
               spec_draft_cost: float = 0.0, fast_path: bool = True,
               cells: int | None = None, spec_method: str = "eagle",
               long_prefill_tokens: int | None = None) -> SimConfig:
    """The simulated engine's limits, from the engine-aware memory model. ``cells``:
    llama-server's -c as --fit chose it (it allocates that many, and no more), where no
    placement carries it (the model fitted whole). Prompts are reused as the settings ask,
    by default as the engine does (vLLM: not for a hybrid with recurrent state before v0.28).
    ``long_prefill_tokens``: vLLM's --long-prefill-token-threshold (None: unset)."""
    from ridgeline.memory import EngineSettings, kv_pool

    s = settings if isinstance(settings, EngineSettings) else EngineSettings()
    prefix_caching = s.prefix_caching is not False
    if dep.engine == "vllm":
        from ridgeline.vllm_hybrid import prefix_caching as vllm_prefix_caching
        from ridgeline.vllm_memory import vllm_accounting

        version = vllm_accounting(s.engine_version).version
        prefix_caching = vllm_prefix_caching(dep.model, s.prefix_caching, version)
    from ridgeline.capacity import served_context
    from ridgeline.llamacpp_rope import loaded_n_ctx_train
    from ridgeline.vllm_mrv2_drafter import gpu_lookup_len

    # llama-server's -c 0: n_ctx_train as --override-kv loads it, each slot capped at
    # n_ctx_train as the launch's YaRN then leaves it (served_context: gpt-oss's 4,096 × 2)
    max_len = s.max_model_len or min(filter(None, (
        loaded_n_ctx_train(dep.model, dep.engine, dep.rope), served_context(dep)[0])),
        default=131072)
    pool = kv_pool(dep, s)
    blocks, block_size, overhead, window = pool.blocks, pool.block_size, 0, 0
    window_groups: tuple[tuple[int, int], ...] = ()
    window_chunks: tuple[int, ...] = ()
    g = pool.groups
    if g is not None and (g.windows or g.states):
        # The simulator grows one block table; vLLM's other groups are counted per request
        # in units of that table's blocks: a state group's one page, a fixed charge; a
        # window group's blocks of its window of the request's tokens, growing with it
        # beside the table, where there is one full group of the table's block size
        # (``window_groups``, vLLM V1's SlidingWindowManager: sim/blocks.py; Gemma-3,
        # gpt-oss, Cohere2), else its blocks once its window is full, charged from the
        # start (conservative for short requests; an attention chunk's group at its most, a
        # whole chunk's: peak_decode_blocks). A model with no full attention grows one
        # table for its window groups, capped in vLLM at the window (the largest, where they
        # differ) as its SlidingWindowManager frees the blocks the window passed
        # (``window_cap``; elsewhere uncapped, conservative past the window); a state-only
        # model holds one block per request.
        fixed = g.peak_decode_blocks(max_len) - g.full * -(-max_len // g.block_size)
        if g.full == 1 and g.windows and g.block_size == block_size and dep.engine == "vllm" \
                and pool.accounting is not None and pool.accounting.engine != "V0":
            window_groups, overhead = g.windows, g.states * g.state_blocks
            window_chunks = g.chunks
        elif g.full:
            blocks, overhead = blocks // g.full, -(-fixed // g.full)
        elif g.windows:
            growing = sum(n for _, n in g.windows)
            blocks, overhead = blocks // growing, -(-g.states // growing)
            window = window_cap(dep.engine, g.windows, pool.accounting is not None
                                and pool.accounting.engine != "V0")
        else:
            blocks, block_size = blocks // g.states, max_len
    if dep.engine == "trtllm" and g is None:  # its recurrent state's blocks, as fit counts
        from ridgeline.capacity import state_blocks

        overhead = state_blocks(pool, dep)
    if dep.offload is not None and dep.offload.fit_cells:  # llama-server's -c, and no more
        cells = min(cells or dep.offload.fit_cells, dep.offload.fit_cells)
    if cells:
        blocks = min(blocks, cells // block_size)
    gate: dict[str, object] = {}
    admission = pool.admission_blocks(max_len)  # vLLM v0.19+: its whole-prompt gate
    if admission is not None and g is not None and g.full and g.block_size == block_size:
        capped = pool.admission_rule == "capped"  # v0.20+: a window's own room
        fixed = 0 if window_groups else g.peak_decode_blocks(max_len) \
            - g.full * -(-max_len // g.block_size) - g.states * g.state_blocks
        gate = {"whole_prompt_gate": True, "gate_windows": g.windows, "gate_chunks": g.chunks,
                "gate_in_flight": pool.window_budget_tokens if capped else 0,
                "gate_full_groups": g.full, "gate_fixed_blocks": fixed}
    elif admission is not None:  # windows alone: the whole prompt (v0.19), or a window's
        gate = {"whole_prompt_gate": True}  # room (v0.20+, where the table is capped)
        if window and pool.admission_rule == "capped":
            gate["window_gate_blocks"] = -(-(window - 1 + pool.window_budget_tokens)
                                           // block_size) + 1
    budget, ubatch = pool.profile_tokens, 0
    threshold, alone = long_prefill_threshold(dep.engine, s.engine_version,
                                              long_prefill_tokens, max_len)
    if dep.engine.startswith("llama.cpp"):  # llama-server fills one llama_decode call up to
        from ridgeline.llamacpp_batching import llamacpp_n_batch  # -b, runs it as -ub ubatches

        budget = s.n_batch or llamacpp_n_batch()
        ubatch = min(pool.profile_tokens, budget)
    return SimConfig(num_blocks=blocks, block_size=block_size,
                     max_num_seqs=pool.max_num_seqs, overhead_blocks=overhead,
                     max_num_batched_tokens=budget, max_model_len=max_len,
                     ubatch_tokens=ubatch,
                     prefix_caching=prefix_caching, spec_tokens=spec_tokens,
                     window_cap_tokens=window, window_groups=window_groups,
                     window_chunks=window_chunks,
                     spec_acceptance=spec_acceptance, spec_draft_cost=spec_draft_cost,
                     spec_lookahead_tokens=spec_lookahead_tokens(dep.engine, spec_method,
                                                                 spec_tokens),
                     spec_gpu_lookup=bool(spec_tokens) and bool(gpu_lookup_len(
                         dep, s, spec_method, max_len)),
                     fast_path=fast_path, reserve_full=dep.engine == "trtllm",
                     prefill_first=dep.engine == "sglang", token_ratio=dep.engine == "sglang",
                     cache_on_schedule=dep.engine == "vllm",
                     lru_free_queue=v1_free_queue(dep.engine, s.engine_version),
                     chunked_prefill=chunks_prefill(dep, s.enable_chunked_prefill)
                     and not runs_whole_asked(dep, s),
                     positions_capped=dep.engine == "vllm",
                     long_prefill_token_threshold=threshold, long_prefill_alone=alone,
                     async_scheduling=overlapped_scheduling(
                         dep.engine, s, dep.pipeline_parallel_size, spec_tokens, spec_method,
                         vllm_runner(dep, s, spec_method if spec_tokens else ""),
                         vllm_mamba_prefix_async_off(dep, s)),
                     **gate)  # type: ignore[arg-type]


def vllm_runner(dep: Deployment, s: object, spec_method: str) -> str:
    """The model runner vLLM runs ``dep`` on under ``s`` with a --spec-method ``spec_method``
    drafter ("" none): vllm_memory.model_runner ("MRV2" for Llama-3.1-8B on 0.32, with an
    ngram drafter too; "V1" on 0.24); "" for another engine."""
    if dep.engine != "vllm":
        return ""
    from ridgeline.vllm_memory import model_runner, vllm_accounting

    drafter = getattr(s, "drafter", None)
    return model_runner(dep, vllm_accounting(getattr(s, "engine_version", None)), spec_method,
                        drafter.algorithm if drafter is not None else "",
                        bool(getattr(s, "stock_torch_compile", False)))


def window_cap(engine: str, windows: tuple[tuple[int, int], ...], v1: bool = True) -> int:
    """The window (tokens) a window-only model's requests hold their blocks for in the
    simulator's one table, or 0 (uncapped). vLLM V1's SlidingWindowManager frees, before
    each allocate_slots, the blocks before (num_computed_tokens − sliding_window + 1)
    (remove_skipped_blocks, vllm/v1/core/single_type_kv_cache_manager.py): the largest
    window, where they differ, bounds every group's. vLLM's V0 engine (``v1`` False) and
    the other engines: uncapped (no cited rule here; SGLang's SWA pool serves hybrids, with
    full layers, and `fit` counts a window-only model's whole context there)."""
    if engine != "vllm" or not v1 or not windows:
        return 0
    return max(w for w, _ in windows)


def runs_whole_asked(dep: Deployment, s: object) -> bool:
    """Whether vLLM runs each prompt whole because the launch said --no-enable-chunked-prefill
    and the release honours it (vllm_v0_chunking.v1_honours_off): its scheduler then admits a
    waiting prompt only while the step's budget left holds it whole, and stops there
    (vllm/v1/core/sched/scheduler.py: 'if not self.scheduler_config.enable_chunked_prefill
    and num_new_tokens > token_budget: break'), as the simulator runs TensorRT-LLM's contexts
    (SimConfig.chunked_prefill False). V0's own whole prompts, unasked, keep V1's scheduling,
    which simulate says it uses for V0 (engine_scheduling.v0_scheduling_caution)."""
    if dep.engine != "vllm" or not getattr(s, "no_chunked_prefill", False):
        return False
    from ridgeline.vllm_memory import vllm_accounting
    from ridgeline.vllm_v0_chunking import v1_honours_off

    return v1_honours_off(vllm_accounting(getattr(s, "engine_version", None)))


def llamacpp_context(dep: Deployment, settings: object | None = None, fit_on: bool = False,
                     fit_margin_bytes: float | None = None) -> tuple[int, str]:
    """llama-server's -c, the cells of its unified cache, where --fit does not choose it: for
    --max-model-len L, L × slots, or L × the conversations of L that fit where fewer do (as
    `fit` starts it: L 8192 and 4 slots are -c 32768 -np 4 --kv-unified; Qwen2.5-32B Q4_K_M
    on an RTX 4090, 2 conversations, -c 16384); else its default -c 0, the model's trained
    context (131,072 cells for Llama-3.1-8B). It allocates that many cells, and no more.
    Under --fit (``fit_on``) the conversations that fit are counted with its --fit-target
    (``fit_margin_bytes``; None: the default) left free, as `fit` counts them: past them --fit
    moves weights to the host rather than fill the margin (llamacpp_fit.run_pool).
    Returns (cells, how they were chosen)."""
    from ridgeline.capacity import conversations
    from ridgeline.llamacpp_fit import run_pool
    from ridgeline.memory import EngineSettings

    s = settings if isinstance(settings, EngineSettings) else EngineSettings()
    if s.max_model_len:
        pool = run_pool(dep, s, fit_on, fit_margin_bytes)
        slots = pool.max_num_seqs
        held = max(1, min(slots, conversations(pool, dep, s.max_model_len)))
        how = f"{slots} {'slot' if slots == 1 else 'slots'}" if held == slots else \
            f"the {held} of its {slots} slots that fit, as `fit` starts it"
        return s.max_model_len * held, f"--max-model-len {s.max_model_len:,} × {how}"
    from ridgeline.llamacpp_rope import loaded_n_ctx_train

    trained = loaded_n_ctx_train(dep.model, dep.engine, dep.rope)  # n_ctx_train, as loaded
    if not trained:
        raise InputError(f"{dep.model.name} states no trained context "
                         "(max_position_embeddings) for llama-server's -c 0: give --max-model-len")
    return trained, "its default -c 0, the model's trained context" + (
        " as --override-kv sets it" if trained != served_positions(dep.model, dep.engine) else "")


def start_refusal(dep: Deployment, settings: object, config: SimConfig,
                  cells: tuple[int, str] | None = None) -> str | None:
    """Why the engine behind ``config`` would not start, as the user would read it, or None:
    no KV pool beside the weights (or why, where it is a set pool past its room or SGLang's
    state pool); a context the model cannot take; a serving engine's start-up check
    failed at the max_model_len in force, given or its default, the model's whole context
    (capacity.start_check, as decode and prefill make it); llama.cpp: a -c (``cells``, from
    ``llamacpp_context``) whose cache does not fit beside the weights (llama-server allocates
    it whole at start-up, or fails)."""
    from ridgeline.capacity import context_refusal, no_sequence_reason, start_check
    from ridgeline.memory import EngineSettings, kv_pool

    s = settings if isinstance(settings, EngineSettings) else EngineSettings()
    where = f"{dep.num_gpus} x {dep.accelerator.id}"
    from ridgeline.llamacpp_fit import fit_could_offload, fit_hint

    pool = kv_pool(dep, s)
    if pool.load_overflow:  # the 16-bit checkpoint quantized on load overruns the load
        return f"does not fit on {where}: " + no_sequence_reason(
            pool, dep, config.max_model_len) + " (see `ridgeline fit`)"
    if config.num_blocks < 1:
        hint = "; " + fit_hint(s.engine_version) if fit_could_offload(dep) else ""
        if pool.weights_overflow or pool.overflow_bytes or pool.state_request_bytes:
            # a cause to name, as fit names it for every engine: weights over the card, a
            # --kv-cache-memory-bytes pool, SGLang's states
            return f"does not fit on {where}: " + no_sequence_reason(
                pool, dep, config.max_model_len) + f" (see `ridgeline fit`{hint})"
        return f"does not fit: {dep.model.name} leaves no KV pool on {where} (see " \
               f"`ridgeline fit`{hint})"
    if cells is not None and dep.engine.startswith("llama.cpp"):
        room = kv_pool(dep, s).blocks
        if cells[0] > room:
            return (f"does not fit on {where}: llama-server's -c {cells[0]:,} ({cells[1]}) "
                    f"needs more KV cells than the {room:,} {dep.model.name} leaves beside "
                    "its weights; give a smaller --max-model-len or fewer slots (--parallel)"
                    + (f"; {fit_hint(s.engine_version)} (see `ridgeline fit`)"
                       if fit_could_offload(dep) else
                       ", or -ngl auto (--fit shrinks -c 0 to what fits; see `ridgeline fit`)"))
    refusal = context_refusal(dep, s.max_model_len) if s.max_model_len else ""
    if refusal:
        return refusal
    check = start_check(dep, s)
    if check is not None and check.refused:
        small = too_small_pool(dep, s)  # no length worth serving starts it: say so, not one
        return "does not fit: " + (replace(check, longest=0) if small else check).clause(
            dep.engine) + small
    if config.max_num_seqs < 1:  # SGLang with too few state slots runs no request (a hang)
        return (f"does not fit on {where}: "
                + no_sequence_reason(kv_pool(dep, s), dep, config.max_model_len)
                + " (see `ridgeline fit`)")
    return None


SHORT_REQUEST_TOKENS = 512  # a pool that cannot start at this --max-model-len serves nothing


def too_small_pool(dep: Deployment, settings: object) -> str:
    """Where the engine would refuse to start even at --max-model-len SHORT_REQUEST_TOKENS,
    so that no length worth serving rescues it, a clause saying so (what the pool holds),
    to follow a refusal; else "". Llama-3.1-70B in fp8 on one H100 at vLLM's defaults: a
    0.01 GiB pool, 32 tokens."""
    from ridgeline.capacity import refuses_to_start
    from ridgeline.memory import EngineSettings, kv_pool
    from ridgeline.units import GIB

    s = settings if isinstance(settings, EngineSettings) else EngineSettings()
    short = replace(s, max_model_len=SHORT_REQUEST_TOKENS)
    pool = kv_pool(dep, short)
    if not refuses_to_start(pool, dep, SHORT_REQUEST_TOKENS):
        return ""
    return (f", and no --max-model-len worth serving starts it: its pool holds "
            f"{pool.tokens:,} tokens ({pool.kv_cache_bytes / GIB:,.2f} GiB per GPU), under one "
            f"{SHORT_REQUEST_TOKENS:,}-token request")
