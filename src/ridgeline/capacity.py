"""What an engine's KV pool holds: conversations of a context at once, the batch it runs,
and the refusals (a pool short of one sequence, a length past the model's positions, a
start-up check failed at the max_model_len in force) that fit, decode, prefill,
utilization, simulate and the planner all give alike."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import lru_cache

from ridgeline.context_length import positions_label, served_positions
from ridgeline.datafiles import engine_defaults
from ridgeline.deployment import Deployment
from ridgeline.kvcache import KVFootprint
from ridgeline.load_peak import load_peak_reason
from ridgeline.memory import EngineSettings, KVPool, kv_pool
from ridgeline.monotone import longest_holding
from ridgeline.units import GIB, plural


def sequence_bytes_per_gpu(dep: Deployment, context: int) -> float:
    """One conversation's cache on one GPU: full layers × context, windows, states at the
    dtypes the engine keeps them in (cost.served_footprint, as the step reads them), spread
    over the GPUs of the data-parallel rank that holds it."""
    from ridgeline.cost import served_footprint  # the step-cost module: heavy

    footprint: KVFootprint = served_footprint(dep, context)
    return footprint.stored_bytes(dep.kv_replication) / dep.rank_gpus


def conversation_bytes(pool: KVPool, dep: Deployment, context: int) -> float:
    """One conversation's cache on one GPU as the engine holds it: vLLM's blocks of every
    group (windows, padded states and layers), else the bytes themselves."""
    if pool.groups is not None:
        return pool.groups.peak_decode_blocks(context) * pool.page_bytes
    if pool.windows_apart and pool.kv_bytes_per_token:  # windows sized apart (slots, ratio)
        return pool.kv_bytes_per_token * context
    if pool.host_cells:  # -ngl left every growing layer, and its cache, on the host
        return 0.0
    per_seq = sequence_bytes_per_gpu(dep, context) * pool.kv_share \
        + pool.drafter_kv_bytes_per_token * context
    blocks = reserved_blocks(pool, context)  # TensorRT-LLM's, whole
    if not blocks:
        return per_seq
    state = state_bytes_per_gpu(dep) * pool.kv_share  # its blocks apart, not per token
    return (per_seq - state) * blocks * pool.block_size / context \
        + state_blocks(pool, dep) * pool.page_bytes


def state_bytes_per_gpu(dep: Deployment) -> float:
    """One conversation's recurrent (linear-attention / SSM) state on one GPU, at the dtypes
    the engine keeps it in: the same whatever the context."""
    from ridgeline.cost import served_footprint  # the step-cost module: heavy

    return served_footprint(dep, 1).state_bytes / dep.rank_gpus


def state_blocks(pool: KVPool, dep: Deployment) -> int:
    """TensorRT-LLM's recurrent state for one request in whole blocks of its pool, where its
    hybrid cache manager keeps the state inside the KV pool, a block a request
    (CppMambaHybridCacheManager, PR #12185, merged after 1.2): fit counts a conversation so
    and simulate charges each request so (sim_config's overhead blocks). Nemotron-H-56B fp8
    on one H100: 438 MiB of state, 351 blocks of 1.25 MiB. The releases ridgeline models
    (to 1.2) hold every seat's state apart, before the pool (KVPool.seat_state_bytes), and
    this is 0 there, as for another engine, a model without recurrent layers, or a pool
    that holds windows apart."""
    if pool.engine != "trtllm" or pool.windows_apart or not pool.page_bytes \
            or pool.seat_state_bytes:  # to 1.2: every seat's state held apart, up front
        return 0
    state = state_bytes_per_gpu(dep) * pool.kv_share
    return int(-(-state // pool.page_bytes)) if state > 0 else 0


def reserved_blocks(pool: KVPool, context: int) -> int:
    """TensorRT-LLM's blocks for one request of ``context`` tokens (prompt + max_new_tokens):
    GUARANTEED_NO_EVICT reserves them whole, ceil(context ÷ tokens_per_block)
    (KVCacheManager::getRemainingBlocksToCompletion; 8,335 tokens: 261 blocks of 32, not
    260.47); 0 for the other engines, whose conversations are counted otherwise."""
    if pool.engine != "trtllm" or pool.block_size <= 1 or context <= 0:
        return 0
    return -(-context // pool.block_size)


def admission_gate(pool: KVPool, context: int) -> tuple[int, int] | None:
    """(blocks vLLM v0.19+ asks free to admit a prompt of ``context`` tokens, blocks such a
    request holds decoding) where the first is more (window groups keep a prefill's room);
    None where no gate runs or it asks no more than a decoding request holds."""
    admission = pool.admission_blocks(context)
    if admission is None or pool.groups is None:
        return None
    decoding = pool.groups.peak_decode_blocks(context)
    return (admission, decoding) if admission > decoding else None


def conversations(pool: KVPool, dep: Deployment, context: int) -> int:
    """Conversations of ``context`` tokens the pool holds at once, decoding: each charged the
    most it holds on its way to ``context`` (a chunk group its whole chunk, though past a
    chunk boundary vLLM has freed the chunk before), so conversations growing together to
    ``context`` fit at every step and the count never rises with the context."""
    if pool.groups is not None:
        held = pool.blocks // pool.groups.peak_decode_blocks(context)
        gate = admission_gate(pool, context)
        if gate is not None:  # the last admitted finds the others decoding
            admission, decoding = gate
            held = 0 if pool.blocks < admission \
                else min(held, 1 + (pool.blocks - admission) // decoding)
        return held
    if pool.windows_apart:  # tokens of the growing pool; windows held apart
        if pool.host_cells:  # the growing cache all in host memory (-ngl)
            return pool.host_cells // context if pool.rest_bytes >= pool.slot_cache_bytes else 0
        if not pool.kv_bytes_per_token:
            return pool.max_num_seqs if pool.rest_bytes >= pool.slot_cache_bytes else 0
        held = pool.tokens // context
        if pool.state_request_bytes:  # SGLang's state pool: a request a slot (0 slots: none)
            held = min(held, pool.state_slots)
        if pool.slot_bytes_each:
            # llama.cpp: each conversation needs a slot, and each slot its window and state
            # cache: at most what the cache holds with one slot per conversation (-np N); a
            # cell given up frees its KV and its row of the compute buffer's mask
            cell = pool.kv_bytes_per_token + pool.buffer_bytes_per_cell
            cache = pool.tokens * cell + pool.max_num_seqs * pool.slot_bytes_each
            held = min(held, int(cache // (context * cell + pool.slot_bytes_each)))
        return held
    per_seq = conversation_bytes(pool, dep, context)
    return int(pool.kv_cache_bytes // per_seq) if per_seq else 0


SGLANG_LEAST_TOKENS = 7  # max_req_input_len = min(context − 1, tokens − 1) − 5 must be > 0


def refuses_to_start(pool: KVPool, dep: Deployment, max_model_len: int) -> bool:
    """Whether the engine refuses a pool that cannot hold one max_model_len sequence (vLLM:
    'To serve at least one request with the model's max seq len … more than the available
    KV cache memory'); a model without full attention holds any length in its windows.
    SGLang starts anyway, capping a request at the pool (its max_req_len = min(context_len − 1,
    max_total_num_tokens − 1), asserting only that something is left). TensorRT-LLM starts
    too, with a block, trimming max_seq_len to what its pool holds (KVCacheManager: 'maxAttention
    Window and maxSequenceLen are too large for at least one sequence to fit in kvCache. They
    are reduced to …'; fail_fast_on_attention_window_too_large is off by default). Any
    engine fails first where the 16-bit weights it loads before quantizing are more than the
    memory it loads into (``KVPool.load_overflow``, load_peak.py)."""
    if pool.load_overflow:
        return True
    if pool.groups is not None:
        return pool.concurrency(max_model_len) < 1
    if pool.engine == "sglang":
        return pool.tokens < SGLANG_LEAST_TOKENS
    if pool.engine == "trtllm":
        return pool.tokens < 1
    return pool.tokens < max_model_len and bool(dep.model.count(mixer="full"))


def no_sequence_reason(pool: KVPool, dep: Deployment, context: int) -> str:
    """Why the engine runs no sequence of ``context`` tokens, as a clause after "cannot hold
    one …": weights larger than the card, the pool --kv-cache-memory-bytes set overrunning the
    card, no pool left beside the weights, SGLang's state pool, SGLang capping a request at its
    pool, a vLLM pool short of one sequence, or a refusal to start."""
    if pool.load_overflow:  # the 16-bit checkpoint quantized on load: the load runs out first
        return load_peak_reason(pool, dep, pool.accounting.version if pool.accounting else None)
    whole = _every_layer_words(dep)
    if pool.weights_overflow:
        return (f"its weights alone ({pool.weight_bytes / GIB:,.2f} GiB per GPU) are more than "
                f"the card's {pool.total_bytes / GIB:,.2f} GiB, so {dep.engine} could not load "
                f"them{whole}")
    if pool.overflow_bytes:
        return (f"its --kv-cache-memory-bytes pool ({pool.set_pool_bytes / GIB:,.2f} GiB) "
                f"overruns the room the card leaves ({max(0.0, pool.rest_bytes) / GIB:,.2f} "
                "GiB): vLLM would run out of memory")
    if pool.rest_bytes <= 0 and pool.seat_state_bytes:  # TensorRT-LLM to 1.2, a hybrid
        return (f"TensorRT-LLM reserves Mamba state for every one of --max_batch_size "
                f"{pool.max_num_seqs:,} seats ({pool.seat_state_bytes / GIB:,.1f} GiB per GPU), "
                f"which overruns the memory by {-pool.rest_bytes / GIB:,.2f} GiB, so it would "
                "refuse to start: fewer seats leave room")
    if pool.rest_bytes <= 0:  # SGLang: a static pool of nothing, its states carved from none
        budget = pool.total_bytes * pool.reserved_fraction
        return (f"the weights and what {dep.engine} takes before its cache overrun the "
                f"{budget / GIB:,.2f} GiB it reserves by {-pool.rest_bytes / GIB:,.2f} GiB, "
                "leaving no KV pool, so it would refuse to start")
    if pool.engine == "sglang" and pool.state_request_bytes:  # SGLang's hybrid state pool
        from ridgeline.sglang_memory import sglang_data

        rule = sglang_data()["mamba_pool"]
        if pool.max_num_seqs < 1:
            return (f"its state pool's {pool.state_slots:,} slots are fewer than one running "
                    "request takes, so max_running_requests is 0 and SGLang would refuse to "
                    f"start ('{rule['no_running_request']}')")
        if pool.tokens < 1 and pool.slot_cache_bytes > pool.pool_bytes > 0:
            return (f"its state pool ({pool.state_slots:,} requests' states, "
                    f"{pool.slot_cache_bytes / GIB:,.2f} GiB) is more than the "
                    f"{pool.pool_bytes / GIB:,.2f} GiB static pool, so SGLang would refuse to "
                    f"start ('{rule['state_pool_radix_off']['overrun']}')")
    if pool.engine == "sglang" and not refuses_to_start(pool, dep, context):
        return (f"SGLang starts, but caps a request at its pool's {pool.tokens - 1:,} tokens "
                "(max_req_len)")
    full_only = pool.groups is None or not (pool.groups.windows or pool.groups.states)
    if pool.engine == "vllm" and full_only and pool.tokens < context:
        # a pool left, but short of one sequence: what it holds says by how much (a hybrid's
        # token count is no sequence's length, so it says nothing there)
        return (f"its KV pool holds {pool.tokens:,} {plural(pool.tokens, 'token')} "
                f"({pool.pool_bytes / GIB:,.2f} GiB per GPU), less than one such sequence, so "
                "it would refuse to start")
    if pool.engine.startswith("llama.cpp") and 0 < pool.tokens < context:
        # llama-server allocates -c cells at start-up, and stops where they do not fit
        lead = f"{whole.strip()}, " if whole else ""
        return (f"{lead}the {pool.pool_bytes / GIB:,.2f} GiB per GPU left for its cache holds "
                f"{pool.tokens:,} {plural(pool.tokens, 'cell')}, fewer than one such sequence, "
                "so llama-server would fail to allocate it at start-up")
    return "it would refuse to start"


def _every_layer_words(dep: Deployment) -> str:
    """Where llama.cpp's pool is answered with every layer on a discrete card (decode's
    -ngl all: cli_offload.FitRun.caution), the words that say so, since the build's default
    --fit would move layers to the host instead; "" else."""
    if dep.engine.startswith("llama.cpp") and dep.offload is None \
            and not dep.accelerator.one_memory:
        return " with every layer on the GPU"
    return ""


def served_context(dep: Deployment) -> tuple[int | None, str]:
    """The longest context the engine serves ``dep`` at, and where it comes from: the
    config's (served_positions); for llama.cpp, n_ctx_train as the launch leaves it
    (llamacpp_rope: --override-kv ARCH.context_length sets it, then YaRN at a new scale lifts
    it, from PR #28030's build on). The one cap the refusal, fit's longest context and the
    start checks read."""
    limit = served_positions(dep.model, dep.engine)
    label = positions_label(dep.model, dep.engine)
    if dep.rope is not None and dep.engine.startswith("llama.cpp"):
        from ridgeline.llamacpp_rope import launch_n_ctx_train

        return launch_n_ctx_train(dep.model, dep.rope, limit, label)
    return limit, label


def past_trained_context(dep: Deployment, context: int) -> bool:
    """A context no sequence of which the engine serves: a serving engine (vLLM, SGLang,
    TRT-LLM) refuses a max_model_len past the model's max_position_embeddings; llama.cpp
    allocates a -c past n_ctx_train with a warning, but llama-server caps each slot at
    n_ctx_train and rejects a longer request (server-context.cpp's load_model, "the slot
    context (…) exceeds the training context of the model (…) - capping", since cd5e3b57;
    still so in b10754, llama.cpp issues #17459 and #22140, PR #22145 closed unmerged), an
    n_ctx_train the launch's YaRN flags may lift (served_context). vLLM under
    VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (``Deployment.allow_long_context``) serves past it, with
    a warning (long_context_caution)."""
    if dep.allow_long_context and dep.engine == "vllm":
        return False
    limit = served_context(dep)[0]
    return limit is not None and context > limit


def long_context_caution(dep: Deployment, context: int) -> str:
    """Where VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 lets vLLM take ``context`` past the model's
    positions, what vLLM warns of, as a caution; "" otherwise. vLLM's
    _get_and_verify_max_len: 'VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution.
    If the model uses relative position encoding (RoPE), positions exceeding
    derived_max_model_len lead to nan.'"""
    if not (dep.allow_long_context and dep.engine == "vllm"):
        return ""
    limit, label = served_context(dep)
    if limit is None or context <= limit:
        return ""
    return (f"--max-model-len {context:,} is past {dep.model.name}'s {limit:,} positions "
            f"({label}), taken under VLLM_ALLOW_LONG_MAX_MODEL_LEN=1: memory and speed are "
            "priced, but positions past the model's limit are unvalidated (vLLM warns that "
            "RoPE positions past it can give nan, absolute ones a CUDA out-of-bounds error); "
            "a rope_scaling block (--hf-overrides) stretches the limit instead")


def context_refusal(dep: Deployment, context: int) -> str:
    """Why the engine refuses this max_model_len outright (past the model's positions), or
    "": one message for decode, prefill, fit and simulate."""
    if not past_trained_context(dep, context):
        return ""
    limit, label = served_context(dep)
    if dep.engine.startswith("llama.cpp"):
        # What lifts the cap: n_ctx_train is the GGUF's ARCH.context_length, which
        # --override-kv rewrites; and since llama.cpp PR #28030 (merged 2026-08-30, fixing
        # issue #17459) YaRN at a scale other than the GGUF's (llamacpp_rope, which
        # served_context applies). The condition reads YaRN only: linear leaves it.
        from ridgeline.llamacpp_overrides import CONTEXT_KEY, KvOverride, gguf_architecture
        from ridgeline.llamacpp_rope import RopeLaunch, unlifted_reason

        lifted = limit != served_positions(dep.model, dep.engine)
        key = f"{gguf_architecture(dep.model) or 'ARCH'}.{CONTEXT_KEY}"
        # the override the advice names, put first (llama.cpp keeps the first of a key): under
        # the launch's YaRN from the GGUF's original context (or --yarn-orig-ctx) it leaves
        # the cap, which YaRN sets from that base, not from n_ctx_train
        rope = dep.rope or RopeLaunch()
        advised = replace(dep, rope=replace(rope, kv_overrides=(
            KvOverride(key, "int", str(context)), *rope.kv_overrides)))
        override = (f"--override-kv {key}=int:{context} lifts it, as does YaRN in builds from "
                    "PR #28030 (--rope-scaling yarn --rope-scale F: the cap becomes "
                    "--yarn-orig-ctx, else the GGUF's original or trained length, × F)"
                    if (served_context(advised)[0] or 0) >= context else
                    "the launch's YaRN sets the cap from its original context, whatever "
                    f"--override-kv {key} says: a larger --rope-scale lifts it")
        return (f"llama-server caps each slot at {dep.model.name}'s {limit or 0:,} trained "
                f"tokens (n_ctx_train, {label + ' under the launch' if lifted else 'its ' + label}"
                ") whatever -c, and "
                f"rejects a {context:,}-token conversation ('the request exceeds the available "
                f"context size'); {override}, for a model not trained that long"
                + unlifted_reason(dep.model, dep.rope, limit or 0))
    # in the engine's own flag (engines.json cli.max_len: SGLang's --context-length,
    # trtllm-serve's --max_seq_len), and ridgeline's, which the user changes, where they differ
    flag = engine_defaults(dep.engine).get("cli", {}).get("max_len", "--max-model-len")
    ours = "" if flag == "--max-model-len" else " (ridgeline's --max-model-len)"
    # a rope scaling the model's card documents first (Qwen3's YaRN), then the unsafe override
    from ridgeline.vllm_rope import card_rope_advice

    card = card_rope_advice(dep.model, context) if dep.engine == "vllm" else ""
    return (f"{dep.engine} refuses {flag} {context:,}{ours}, past {dep.model.name}'s "
            f"{limit or 0:,} positions ({label})" + (f"; {card}" if card else "")
            + (f"; {'else ' if card else ''}VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 "
               "(--vllm-allow-long-max-model-len 1) overrides it, for a model not trained that "
               "long" if dep.engine == "vllm" else
               "; SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 lets --context-length past it"
               if dep.engine == "sglang" else ""))


def seats_that_fit(dep: Deployment, settings: EngineSettings, context: int, most: int) -> int:
    """The largest seat count (max_num_seqs, TensorRT-LLM's max_batch_size) up to ``most``
    whose pool holds that many conversations of ``context`` tokens, 0 where one seat's does
    not: where every seat holds memory from start-up (TensorRT-LLM's Mamba state to 1.2,
    trtllm_memory.seat_state_bytes) the conversations held fall as seats rise, and this is
    where the two cross. Nemotron-H-56B fp8 on one H100 under TensorRT-LLM at 8,192 tokens:
    28 (2,048 seats want 876.7 GiB of state)."""
    def holds(n: int) -> bool:
        pool = kv_pool(dep, replace(settings, max_num_seqs=n))
        return held_conversations(pool, dep, context) >= n

    return longest_holding(holds, 1, most) if most >= 1 and holds(1) else 0


def held_conversations(pool: KVPool, dep: Deployment, context: int,
                       max_model_len: int | None = None) -> int:
    """Conversations of ``context`` tokens the engine holds at once, started at
    ``max_model_len`` (``context`` unless given): none where it refuses to start or refuses
    the length; with llama.cpp's --fit placement, no more than the -c it placed for; with
    data-parallel attention, one rank's pool × the ranks. What fit,
    utilization, the page and the planner give (each started at its own context), and decode
    and simulate through ``engine_seats`` and ``start_check``."""
    length = context if max_model_len is None else max_model_len
    if refuses_to_start(pool, dep, length) or past_trained_context(dep, length):
        return 0
    if pool.engine == "trtllm" and pool.groups is None and context > pool.tokens \
            and dep.model.count(mixer="full"):  # past max_seq_len, trimmed to the pool's blocks
        return 0
    held = conversations(pool, dep, context)
    if dep.offload is not None and dep.offload.fit_cells:  # llama-server allocates -c, no more
        held = min(held, dep.offload.fit_cells // context)
    return held * dep.data_parallel_size


def engine_holds(dep: Deployment, context: int, enforce_eager: bool = False,
                 settings: EngineSettings | None = None) -> int | None:
    """Sequences of ``context`` tokens the deployment's engine runs at once, as ``decode``
    and ``prefill`` ask (the engine's defaults, vLLM's vllm serve's, or the ``settings``
    given, sized for this context); llama.cpp given one slot per sequence (llamacpp_slots,
    fit's -np lever too), its pool under --fit less the margin --fit keeps free
    (``settings.fit_target_bytes``); None for an engine without a memory model."""
    if dep.engine in ("vllm", "sglang", "trtllm"):
        base = settings or EngineSettings()
        return max_batch(dep, context, replace(base, max_model_len=context,
                                               enforce_eager=enforce_eager or base.enforce_eager))
    if dep.engine.startswith("llama.cpp"):
        return _slots_kept_free(dep, context, _one_slot(dep, context, settings))
    return None


def engine_none_reason(dep: Deployment, context: int, enforce_eager: bool = False,
                       settings: EngineSettings | None = None) -> str:
    """Why ``engine_holds`` finds no sequence of ``context`` tokens, under the same settings
    (``no_sequence_reason``)."""
    if dep.engine in ("vllm", "sglang", "trtllm"):
        base = settings or EngineSettings()
        s = replace(base, max_model_len=context, enforce_eager=enforce_eager or base.enforce_eager)
        return no_sequence_reason(kv_pool(dep, s), dep, context)
    return no_sequence_reason(_slot_pool(dep, context, settings), dep, context)


def decode_pool_settings(dep: Deployment, context: int,
                         engine_version: str | None = None) -> EngineSettings:
    """The defaults decode sizes ``dep``'s KV pool under for sequences of ``context`` tokens
    (engine_holds), at ``engine_version`` (None: the newest modelled): a serving engine
    started at that max_model_len; llama.cpp given one slot of that context per sequence,
    not llama-server's default 4 slots, less the margin its default --fit keeps free where
    that keeps every layer on the GPU (whole_fit_margin)."""
    if dep.engine.startswith("llama.cpp"):
        from ridgeline.llamacpp_fit import whole_fit_margin

        one = _one_slot(dep, context, EngineSettings(engine_version=engine_version))
        return replace(one, fit_target_bytes=whole_fit_margin(dep, one, context))
    return EngineSettings(max_model_len=context, engine_version=engine_version)


@lru_cache(maxsize=1024)
def decode_pool(dep: Deployment, context: int, engine_version: str | None = None) -> KVPool:
    """The pool ``dep``'s engine holds sequences of ``context`` tokens in under decode's
    defaults (decode_pool_settings) at ``engine_version``: the page's and utilization's, as
    decode sizes it. Remembered: the page asks for each combination's pool at each context
    twice (its own, and decode_held's), and a pool is frozen."""
    settings = decode_pool_settings(dep, context, engine_version)
    if dep.engine.startswith("llama.cpp"):
        return _slot_pool(dep, context, settings)
    return kv_pool(dep, settings)


def decode_held(dep: Deployment, context: int, engine_version: str | None = None) -> int:
    """Conversations of ``context`` tokens ``dep``'s engine holds under decode's defaults
    (decode_pool_settings) at ``engine_version``, as the page and utilization give them
    beside decode: llama.cpp a slot each (llamacpp_slots), another engine its pool's
    (held_conversations; its seats apart)."""
    if dep.engine.startswith("llama.cpp"):
        return _slots_kept_free(dep, context,
                                decode_pool_settings(dep, context, engine_version))
    return held_conversations(decode_pool(dep, context, engine_version), dep, context)


def decode_seats(dep: Deployment, context: int, engine_version: str | None = None
                 ) -> EngineSeats:
    """What ``dep``'s engine runs of ``context`` tokens under decode's defaults
    (decode_pool_settings) at ``engine_version``, as engine_seats gives it to decode: the
    count decode_held gives with what caps it (a serving engine's seats, max_num_seqs, or
    its pool), and, where it runs none, why (a length past the model's positions, weights
    past the card). A serving engine started at max_model_len = ``context``; llama.cpp a
    slot each, less the margin its default --fit keeps free. The page's reasons: vLLM 0.6
    runs 256 of Llama-3.1-8B's 512-token conversations on an H100, its max_num_seqs, where
    its pool would hold 876."""
    settings = decode_pool_settings(dep, context, engine_version)
    if dep.engine.startswith("llama.cpp"):  # engine_holds gives each its slot of ``context``
        return engine_seats(dep, context,
                            settings=replace(settings, max_num_seqs=None, max_model_len=None))
    return engine_seats(dep, context, settings=settings, max_model_len=context)


def held_apart_words(engine: str) -> str:
    """Why ``engine``'s count (decode_held) is not its pool ÷ one conversation, as the page's
    and utilization's steps say it: llama.cpp sizes each slot's window and state cache and
    logits row (llamacpp_slots); another engine admits, starts or places fewer."""
    if engine.startswith("llama.cpp"):
        return ("as many slots as each hold one, every slot's window and state cache and "
                "logits row counted (decode's count, fit's -np lever)")
    return "what it admits, starts with or places holds fewer"


def _one_slot(dep: Deployment, context: int, settings: EngineSettings | None) -> EngineSettings:
    """llama.cpp given one slot of ``context`` cells (-np 1, -c context), at the build
    ``settings`` names (--engine-version; default the newest modelled), under its --fit
    margin where ``settings`` carries one."""
    return EngineSettings(max_model_len=context, max_num_seqs=1,
                          engine_version=settings.engine_version if settings else None,
                          fit_target_bytes=settings.fit_target_bytes if settings else None)


def _held_in_slots(dep: Deployment, context: int, settings: EngineSettings) -> int:
    """Conversations of ``context`` tokens the pool of llama-server's -np N slots holds
    (``settings.max_num_seqs``, each a slot of ``context`` cells: N slots' window caches and
    logits rows, as `fit -np N` sizes them), under --fit less its margin where ``settings``
    carries one. llama-3.1-8b q4_k_m on an RTX 4090 at 24,000 tokens, -np 4, under the
    default --fit: 6 (of which -np 4 runs 4)."""
    from ridgeline.llamacpp_fit import run_pool

    s = replace(_one_slot(dep, context, settings), max_num_seqs=settings.max_num_seqs)
    return held_conversations(run_pool(dep, s, s.fit_target_bytes is not None,
                                       s.fit_target_bytes), dep, context)


def slot_search_terms(dep: Deployment, context: int, settings: EngineSettings | None,
                      held: int) -> EngineSeats:
    """llama.cpp's ``held`` sequences of ``context`` tokens, a slot each (llamacpp_slots),
    with the two counts that make ``held`` the most: the pool of ``held`` slots holds at
    least ``held`` conversations, the pool of one slot more fewer than its slots
    (llama-3.1-8b q4_k_m on an H100 at 2,000 tokens under the default --fit: 297 slots
    hold 297, 298 hold 297)."""
    def holds(slots: int) -> int:
        return _held_in_slots(dep, context, replace(settings or EngineSettings(),
                                                    max_num_seqs=slots))

    return EngineSeats(context, held, slots_pool_held=holds(held),
                       more_slots_pool_held=holds(held + 1)
                       if held < MAX_LLAMACPP_SLOTS else None)


def _slot_pool(dep: Deployment, context: int, settings: EngineSettings | None) -> KVPool:
    """llama.cpp's pool for one slot of ``context`` cells (``_one_slot``): under --fit the
    card less its margin, as `fit` sizes that run (llamacpp_fit.run_pool), else the whole
    card. llama-3.1-8b bf16 on an RTX 4090 at 8,192 tokens: 9 sequences with -ngl all, 8
    under the default --fit's 1,024 MiB."""
    from ridgeline.llamacpp_fit import run_pool

    s = _one_slot(dep, context, settings)
    return run_pool(dep, s, s.fit_target_bytes is not None, s.fit_target_bytes)


def _slots_kept_free(dep: Deployment, context: int, settings: EngineSettings) -> int:
    """llamacpp_slots under --fit where ``settings`` keep its margin free
    (``fit_target_bytes``), else on the whole card."""
    return llamacpp_slots(dep, context, settings, settings.fit_target_bytes is not None,
                          settings.fit_target_bytes)


MAX_LLAMACPP_SLOTS = 1 << 24  # a bound for -np where nothing on the GPU grows with a slot


def llamacpp_slots(dep: Deployment, context: int, settings: EngineSettings, fit_on: bool,
                   margin_bytes: float | None = None) -> int:
    """The most slots llama-server starts with (-np N --kv-unified, -c N × ``context``) that
    each hold a conversation of ``context`` tokens: the largest N whose pool, sized with N
    slots' window and state caches and N logits rows in the compute buffer (outputs per slot,
    PR #23861) and the window mask they read, holds N (``held_conversations``); 0 where one
    slot holds none. The one count decode (a slot per sequence, ``engine_holds``) and fit's
    -np lever give: a pool sized for one slot and divided by a conversation misses what each
    further slot adds to the compute buffer (gpt-oss-20b on an H100 at 4,096 tokens: 666 so,
    660 at -np 660, each slot's logits row 0.77 MiB). ``fit_on`` and ``margin_bytes``:
    the pool under --fit, less its margin (llamacpp_fit.run_pool). A pool holds no more as
    slots are added, so N − held(N) only grows: a search over N finds it."""
    from ridgeline.llamacpp_fit import run_pool

    base = replace(settings, max_model_len=context)

    def held(slots: int) -> int:
        pool = run_pool(dep, replace(base, max_num_seqs=slots), fit_on, margin_bytes)
        return held_conversations(pool, dep, context)

    first = held(1)
    if first < 1:
        return 0
    low, high = 1, min(first, MAX_LLAMACPP_SLOTS)  # one slot's count: a guess, either side
    if held(high) >= high:
        low = high
        while high < MAX_LLAMACPP_SLOTS:  # more slots than one slot's count may hold
            high = min(2 * high, MAX_LLAMACPP_SLOTS)
            if held(high) < high:
                break
            low = high
        else:
            return low
    return longest_holding(lambda slots: held(slots) >= slots, low, high)


def max_batch(dep: Deployment, context: int, settings: EngineSettings | None = None) -> int:
    """Sequences of ``context`` tokens the engine runs at once: the pool, then its seat limit
    (no ``settings``: vLLM's offline LLM class's defaults, a batch run's)."""
    return max(0, min(max_batch_terms(dep, context, settings)))


def max_batch_terms(dep: Deployment, context: int, settings: EngineSettings | None = None
                    ) -> tuple[int, int]:
    """max_batch's two terms: the engine's seat limit, and the conversations its pool holds."""
    s = settings or EngineSettings(max_model_len=context, usage="offline")
    pool = kv_pool(dep, s)
    return (engine_seat_limit(pool, dep),
            held_conversations(pool, dep, context, s.max_model_len or context))


def engine_seat_limit(pool: KVPool, dep: Deployment) -> int:
    """The requests the engine runs at once whatever its pool holds: its max_num_seqs (or
    its own name for it), each data-parallel rank's."""
    return pool.max_num_seqs * dep.data_parallel_size


SERVING_ENGINES = ("vllm", "sglang", "trtllm")  # each sizes its pool for a max_model_len


# what each serving engine does at start-up with a pool short of one max_model_len request
# (refuses_to_start): vLLM refuses; SGLang and TensorRT-LLM start, holding a request to the pool
_START_AT_DEFAULT = {
    "vllm": "but must also fit one request of that default to start",
    "sglang": "and starts even where one request of that default does not fit, capping a "
              "request at what its pool holds",
    "trtllm": "and starts even where one request of that default does not fit, trimming "
              "max_seq_len to what its pool holds"}


def pool_at_context_note(engine: str) -> str:
    """--explain's word on the max_model_len page, amdahl and utilization start ``engine``'s
    pool at: the context asked. They price the newest release, whose profiled step is the
    scheduler's token budget, not max_model_len, so the pool holds as many conversations at
    the model's longer default; only the start-up check (one request that long) differs, and
    only vLLM refuses to start on it (``refuses_to_start``)."""
    return ("the pool assumes max_model_len = this context; started at the model's longer "
            f"default, {engine} holds as many conversations of this length "
            f"{_START_AT_DEFAULT[engine]} (`ridgeline fit` checks it)")


def start_refusal_clause(engine: str, length: int, defaulted: bool, longest: int) -> str:
    """The start-up refusal as decode, prefill and simulate word it: ``engine`` refuses to start
    at ``length`` (``defaulted``: its default, the model's context), and where some shorter
    length starts (``longest`` > 0), the longest."""
    where = (f"its default max_model_len, the model's {length:,} tokens" if defaulted
             else f"--max-model-len {length:,}")
    return (f"{engine} would refuse to start at {where}, its KV pool holding less than one such "
            "sequence" + (f": give --max-model-len ≤ {longest:,}" if longest else ""))


@dataclass(frozen=True)
class StartCheck:
    """A serving engine's start-up check at the max_model_len in force: ``length``, the given
    one or (``defaulted``) the model's context; whether it ``refused``; and where it did, the
    longest max_model_len that starts (0: none)."""

    length: int
    defaulted: bool
    refused: bool
    longest: int = 0

    def clause(self, engine: str) -> str:
        return start_refusal_clause(engine, self.length, self.defaulted, self.longest)


def start_check(dep: Deployment, settings: EngineSettings,
                max_model_len: int | None = None) -> StartCheck | None:
    """The start-up check of a serving engine (SERVING_ENGINES) started at ``max_model_len``,
    else ``settings.max_model_len``, else its default, the model's context (served_positions),
    under ``settings``: refuses_to_start on the pool sized at that length. None for an engine
    without one (llama.cpp), a model that states no context, or a length the model refuses
    (context_refusal says why). The one check decode, prefill and simulate make."""
    given = max_model_len or settings.max_model_len
    length = given or served_positions(dep.model, dep.engine)
    if dep.engine not in SERVING_ENGINES or length is None or past_trained_context(dep, length):
        return None
    s = replace(settings, max_model_len=length)
    refused = refuses_to_start(kv_pool(dep, s), dep, length)
    return StartCheck(length, not given, refused, longest_start(dep, s) if refused else 0)


def start_trim_caution(dep: Deployment, settings: EngineSettings,
                       max_model_len: int | None = None) -> str:
    """Where SGLang or TensorRT-LLM starts at a max_model_len (start_check's) its pool cannot
    hold one sequence of, what it trims a request to, or "": TensorRT-LLM reduces
    max_seq_len to the pool (refuses_to_start), SGLang caps max_req_len at it; a longer
    request is refused. Llama-3.1-70B bf16 on 2 x H100 under trtllm: 131,072 trimmed to the
    pool's 71,008 tokens."""
    check = start_check(dep, settings, max_model_len)
    if dep.engine not in ("sglang", "trtllm") or check is None or check.refused:
        return ""
    pool = kv_pool(dep, replace(settings, max_model_len=check.length))
    if pool.groups is not None or not dep.model.count(mixer="full") \
            or pool.tokens >= check.length:
        return ""
    asked = "its default, the model's context" if check.defaulted else "as given"
    if dep.engine == "trtllm":
        return (f"trtllm starts at max_seq_len {check.length:,} ({asked}) by reducing it to the "
                f"{pool.tokens:,} tokens its KV pool holds (its log: 'maxAttentionWindow and "
                "maxSequenceLen are too large for at least one sequence to fit in kvCache. They "
                "are reduced to …'): a longer request is refused")
    return (f"sglang starts at context_len {check.length:,} ({asked}) but caps a request at "
            f"the {pool.tokens - 1:,} tokens its KV pool holds (max_req_len = "
            "min(context_len − 1, max_total_num_tokens − 1)): a longer request is refused")


def holds_one_at(dep: Deployment, settings: EngineSettings, max_model_len: int) -> bool:
    """Whether the engine started at ``max_model_len`` under ``settings`` holds one sequence
    that long: fit's verdict (held_conversations ≥ 1), and the launch the planner may print.
    Stricter than starting (refuses_to_start) for SGLang and TensorRT-LLM, which start short
    of it but serve no request longer than their pool: SGLang's scheduler sets max_req_len =
    min(context_len − 1, max_total_num_tokens − 1) and asserts only that it is positive
    (sgl-project/sglang, python/sglang/srt/managers/scheduler.py), then refuses a longer prompt
    at admission ('Input length (…) exceeds the maximum allowed length (…)',
    python/sglang/srt/managers/utils.py validate_input_length; sglang issue #4048: DeepSeek-R1
    on 8 GPUs started at --context-length 163840 refused a 160,062-token prompt at 59,862);
    TensorRT-LLM reduces max_seq_len to its pool. A launch past the pool advertises a context
    it does not serve. DeepSeek-V3 on 4 x B200 under SGLang (chunked_prefill_size 2048): its
    141,089-token pool holds one at 141,056, none at the model's 163,840."""
    s = replace(settings, max_model_len=max_model_len)
    return held_conversations(kv_pool(dep, s), dep, max_model_len) >= 1


def longest_start(dep: Deployment, settings: EngineSettings) -> int:
    """The longest max_model_len at which the engine starts and holds one such sequence
    (what `ridgeline fit --target-concurrency 1` finds, and vLLM's start-up error names as
    'the estimated maximum model length'), up to the model's context; 0 where none does."""
    def starts(length: int) -> bool:
        return holds_one_at(dep, settings, length)

    limit = served_context(dep)[0] or settings.max_model_len or 1
    return longest_holding(starts, 1, limit) if starts(1) else 0


@dataclass(frozen=True)
class EngineSeats:
    """What an engine runs of one context, started as it would be: ``held`` sequences at once
    (None: an engine without a memory model); where none, why (``why_none``)."""

    context: int
    held: int | None
    # the length a serving engine starts at; llama.cpp: each slot's, where given (else None)
    max_model_len: int | None = None
    defaulted: bool = False  # max_model_len is the engine's default, the model's context
    refusal: str = ""  # a whole clause: the engine refuses this context or max_model_len
    none_reason: str = ""  # else, why the pool holds none (no_sequence_reason)
    longest: int = 0  # where the start-up check fails: the longest max_model_len that starts
    seat_limited: bool = False  # ``held`` is the engine's seat limit (max_num_seqs), not its pool's
    # a serving engine that runs some: held = min(seat_limit, pool_held), max_batch's terms
    seat_limit: int | None = None
    pool_held: int | None = None
    # llama.cpp given a slot per sequence (llamacpp_slots): the conversations the pool of
    # ``held`` slots holds (at least ``held``) and of one slot more (fewer than that slot count)
    slots_pool_held: int | None = field(default=None, compare=False)
    more_slots_pool_held: int | None = field(default=None, compare=False)
    # llama.cpp with -np not given: ``seat_limit`` is llama-server's default slots
    # (default_slots), ``pool_held`` the slots the pool would hold a sequence each
    default_slots: bool = False

    @property
    def start_refused(self) -> bool:
        """The engine fails its start-up check at ``max_model_len``, where a shorter one, no
        shorter than the context, would start: the refusal --max-model-len fixes."""
        return self.held == 0 and self.longest >= self.context > 0

    def why_none(self, engine: str, one: str) -> str:
        """Why ``engine`` (its name, as the report words it) runs none of ``one`` ("sequence of
        2,000 tokens"), a clause that names it; "" where it runs some."""
        if self.held != 0:
            return ""
        if self.refusal:
            return self.refusal
        if self.start_refused:
            return start_refusal_clause(engine, self.max_model_len or 0, self.defaulted,
                                        self.longest)
        return f"{engine} cannot hold one {one} beside these weights: {self.none_reason}"


def default_slots(seat: EngineSeats, engine: str) -> EngineSeats:
    """``seat`` as llama-server runs it where -np was not given (``seat_limit`` unset: a slot
    a sequence, llamacpp_slots): at most its default 4 slots, as vLLM's rows stop at
    max_num_seqs. llama.cpp PR #16736 ('By default, start the server using 4 slots and
    unified KV cache'), PR #17997 ('-np, --parallel N ... default: -1, -1 = auto'; engines.json
    n_parallel). ``pool_held`` keeps the slots the pool holds, which --parallel N raises the
    cap to: gpt-oss-20b on an RTX 4090 at 8,192 tokens runs 4, its pool holding 57."""
    if not engine.startswith("llama.cpp") or seat.seat_limit is not None or not seat.held:
        return seat
    default = int(engine_defaults(engine)["n_parallel"])
    if seat.held <= default:
        return seat
    return replace(seat, held=default, seat_limited=True, seat_limit=default,
                   pool_held=seat.held, default_slots=True)


def slots_placed_for(engine: str, max_num_seqs: int | None, batch: int) -> int:
    """The sequences of ``batch`` llama-server runs at once, which its --fit places the
    weights for: at most -np (``max_num_seqs``), else its default 4 slots (default_slots);
    another engine's whole ``batch``. gpt-oss-20b decode at batch 8 without -np: 4."""
    if not engine.startswith("llama.cpp"):
        return batch
    return min(batch, max_num_seqs or int(engine_defaults(engine)["n_parallel"]))


def suggested_max_model_len(seats: Iterable[EngineSeats], max_model_len: int | None) -> int:
    """The --max-model-len a refused start suggests (EngineSeats.longest, the longest that
    starts), which decode and prefill price the same points at; 0 where every seat starts, or
    the length is the one given. Llama-3.1-8B on an RTX 4090 at vLLM's default 131,072:
    40,192."""
    longest = max((s.longest for s in seats if s.start_refused), default=0)
    return 0 if longest == max_model_len else longest


def _slot_seats(dep: Deployment, context: int, slot_tokens: int, enforce_eager: bool,
                settings: EngineSettings | None) -> EngineSeats:
    """llama.cpp's sequences of ``context`` tokens in slots of ``slot_tokens`` each (fit's
    --max-model-len: -c ÷ -np): as many as slots that long fit, one sequence a slot; none
    past the slot, which llama-server does not let a sequence outgrow. With -np N
    (``settings.max_num_seqs``, decode's and prefill's from a pasted line), at most N, in a
    pool sized for N slots (``seat_limited`` where it holds more)."""
    if context > slot_tokens:
        return EngineSeats(context, 0, slot_tokens, refusal=(
            f"{dep.engine}'s slots of {slot_tokens:,} tokens (--max-model-len, -c ÷ -np) hold "
            f"no sequence of {context:,}"))
    held: int | None
    if settings is not None and settings.max_num_seqs:  # -np N: N run, in a pool sized for N
        slots, pool = settings.max_num_seqs, _held_in_slots(dep, slot_tokens, settings)
        if pool:
            return EngineSeats(context, min(slots, pool), slot_tokens, seat_limited=pool > slots,
                               seat_limit=slots, pool_held=pool)
        held = 0
    else:  # decode's default: a slot per sequence, as many as fit
        held = engine_holds(dep, slot_tokens, enforce_eager, settings)
    if held:
        return replace(slot_search_terms(dep, slot_tokens, settings, held),
                       context=context, max_model_len=slot_tokens)
    if held is None:
        return EngineSeats(context, held, slot_tokens)
    return EngineSeats(context, 0, slot_tokens, refusal=context_refusal(dep, slot_tokens),
                       none_reason=engine_none_reason(dep, slot_tokens, enforce_eager, settings))


def engine_seats(dep: Deployment, context: int, enforce_eager: bool = False,
                 settings: EngineSettings | None = None,
                 max_model_len: int | None = None) -> EngineSeats:
    """Sequences of ``context`` tokens the engine runs at once, as decode and prefill ask: a
    serving engine started at ``max_model_len``, else at its default, the model's context
    (served_positions), under ``settings`` (default vllm serve's), its pool checked as
    it checks it at start-up (max_batch, start_check); llama.cpp given a slot per sequence
    (engine_holds). Llama-3.1-70B in bf16 on 2 x H100, offline: 9 of 1,100 tokens at
    max_model_len 10,448, none at the default 131,072 (vLLM refuses to start)."""
    if max_model_len and dep.engine.startswith("llama.cpp"):
        return _slot_seats(dep, context, max_model_len, enforce_eager, settings)
    length = max_model_len or served_positions(dep.model, dep.engine)
    if dep.engine.startswith("llama.cpp") and settings is not None and settings.max_num_seqs:
        # -np N without -c: slots of the context asked, as decode gives each sequence
        return replace(_slot_seats(dep, context, context, enforce_eager, settings),
                       max_model_len=None)
    if dep.engine not in SERVING_ENGINES or length is None:
        held = engine_holds(dep, context, enforce_eager, settings)
        if held and dep.engine.startswith("llama.cpp"):
            return slot_search_terms(dep, context, settings, held)
        if held != 0:
            return EngineSeats(context, held)
        return EngineSeats(context, 0, refusal=context_refusal(dep, context),
                           none_reason=engine_none_reason(dep, context, enforce_eager, settings))
    defaulted = max_model_len is None
    base = settings or EngineSettings()
    s = replace(base, max_model_len=length, enforce_eager=enforce_eager or base.enforce_eager)
    if context > length:  # a request past max_model_len is rejected, whatever the pool
        return EngineSeats(context, 0, length, defaulted, context_refusal(dep, context) or (
            f"{dep.engine} admits no sequence past its --max-model-len {length:,}"))
    seat_limit, pool_held = max_batch_terms(dep, context, s)
    held = max(0, min(seat_limit, pool_held))
    if held:
        # the pool holds more than run: max_num_seqs (the seats), not memory, caps the batch
        limited = pool_held > held
        return EngineSeats(context, held, length, defaulted, seat_limited=limited,
                           seat_limit=seat_limit, pool_held=pool_held)
    refusal = context_refusal(dep, length)
    check = None if refusal or length <= context else start_check(dep, s)
    return EngineSeats(context, 0, length, defaulted, refusal,
                       "" if refusal else no_sequence_reason(kv_pool(dep, s), dep, context),
                       check.longest if check and check.refused else 0)
