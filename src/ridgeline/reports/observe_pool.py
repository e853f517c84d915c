"""`ridgeline observe`'s pool check: the KV pool the engine reports, or the one the deployment
described leaves, its seats, and the sequences of the context it holds — whether the
deployment described fits at all."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

from ridgeline.capacity import decode_held, max_batch, max_batch_terms
from ridgeline.data_parallel import rank_settings
from ridgeline.deployment import Deployment
from ridgeline.engine_pool import EnginePool, reported_pool
from ridgeline.engines import EngineProfile
from ridgeline.memory import EngineSettings, KVPool, kv_pool
from ridgeline.observation import Observation
from ridgeline.sglang_memory import sglang_max_running_requests, sglang_speculative_requests
from ridgeline.sglang_pool import sglang_settings
from ridgeline.vllm_cache_dtype import served_cache_dtype

# the engine's reported pool and the one modelled for the deployment described part past
# this share: over the held-out p90 error of the pool's tokens, 8.9 % (docs/accuracy.md,
# kv_cache_tokens), so a gap this wide says the server runs other settings or another
# deployment than described, not the model's scatter
POOL_APART = 0.10


@dataclass(frozen=True)
class ObservedPool:
    """The observation beside the deployment described, and the pool they hold: the first of
    ObserveVerdict's checks (reports/observe_verdict.py)."""

    obs: Observation
    deployment: Deployment
    profile: EngineProfile
    context: int
    context_source: str
    # the server's settings as its launch flags give them: its drafter (observe's
    # --speculative-algorithm …, --spec-tokens), or none
    engine_settings: EngineSettings = field(default_factory=EngineSettings)

    @property
    def batch(self) -> float | None:
        return self.obs.batch

    @property
    def drafting_by_metrics(self) -> bool:
        """The engine's metrics show a drafter serving that no flag describes: SGLang's
        sglang:spec_accept_length above 0 (its seats then SGLang's default with a drafter);
        vLLM's draft tokens growing over the window (vllm:spec_decode_num_draft_tokens_total,
        or its log's SpecDecoding lines; its seats are its own). Its memory is unknown."""
        if self.engine_settings.drafter is not None:
            return False
        if self.deployment.engine == "sglang":
            return bool(self.obs.spec_accept_length)
        return self.deployment.engine == "vllm" and bool(self.obs.spec_draft_tokens)

    @cached_property
    def modelled_settings(self) -> EngineSettings:
        """The settings the modelled pool is sized under: the engine's serving defaults at the
        context, with the drafter its flags give; where only SGLang's metrics show one,
        max_running_requests its default with a drafter (48 for every algorithm from
        0.5.3), as SGLang sets it before anything reads it, and no drafter memory."""
        s = replace(self.engine_settings, max_model_len=self.context)
        if self.drafting_by_metrics and s.max_num_seqs is None \
                and self.deployment.engine == "sglang":
            s = replace(s, max_num_seqs=sglang_speculative_requests("eagle", s.engine_version))
        return s

    @cached_property  # read by the fit, the seats, the step budget and the text: sized once
    def modelled_pool(self) -> KVPool:
        """The pool the engine's defaults leave on the deployment as described (a live engine
        is a server: vllm serve's defaults, not offline's), its drafter's where one serves."""
        return kv_pool(self.deployment, self.modelled_settings)

    @property
    def set_seats(self) -> int | None:
        """SGLang's max_running_requests per data-parallel rank where it is set rather than
        derived from the pool's tokens (its default with a drafter: 48 // --dp-size); None
        elsewhere."""
        if self.deployment.engine != "sglang":
            return None
        s = sglang_settings(self.modelled_settings)
        if s.max_num_seqs is None:
            return None
        return rank_settings(self.deployment, s, drafted=True).max_num_seqs

    @cached_property
    def engine_pool(self) -> EnginePool | None:
        """The pool the engine reports, per engine, for the model served."""
        return reported_pool(self.obs, self.deployment)

    @property
    def pool_apart(self) -> tuple[EnginePool, EnginePool] | None:
        """The reported pool and the modelled one, both counted as the engine counts them,
        where their tokens part by more than POOL_APART of the modelled: Llama-3.1-70B fp8 on
        4 H100s, KV fp8, models 84,780 blocks of 16; an engine reporting 60,000 was started
        otherwise (--gpu-memory-utilization, --kv-cache-memory-bytes) or serves another
        deployment (--kv-cache-dtype, --tensor-parallel-size). None where either is missing
        or the weights as described do not load (weights_overflow says that)."""
        reported = self.engine_pool
        if reported is None or self.weights_do_not_load:
            return None
        modelled = EnginePool.modelled(self.modelled_pool)
        if modelled.tokens <= 0:
            return None
        if abs(reported.tokens - modelled.tokens) <= POOL_APART * modelled.tokens:
            return None
        return reported, modelled

    @property
    def cache_dtype_apart(self) -> str | None:
        """vLLM's cache_dtype label where its bytes per element are not the KV dtype
        described: a server at --kv-cache-dtype fp8 observed as bf16 (its pool twice the
        tokens modelled, its steps reading half the KV priced); vLLM's fp8_inc read as its
        fp8, fp8_ds_mla as its 656-byte records, and 'auto' as vLLM resolves it
        (vllm_cache_dtype.served_cache_dtype: the model's 16-bit dtype, or the fp8 cache a
        compressed-tensors kv_cache_scheme sets after the label was written). None where the
        label is missing, unknown (a note says so, observe_metrics._read_pool), or of the
        same size."""
        label = self.obs.cache_dtype
        if label is None:
            return None
        served = served_cache_dtype(label, self.deployment.model)
        if served is None or served.bytes_per_element == self.deployment.kv.bytes_per_element:
            return None
        return label

    @property
    def weights_overflow(self) -> bool:
        """The deployment as described cannot load its weights (more per GPU than the card
        holds), though the engine reports a pool: it serves on another deployment (more GPUs,
        a smaller format) than --num-gpus and --weights say. Where no pool is reported, the
        modelled pool's own verdict (pool_batch 0) says it."""
        return self.engine_pool is not None and self.modelled_pool.weights_overflow

    @property
    def weights_do_not_load(self) -> bool:
        """The deployment as described cannot load its weights (more per GPU than the card
        holds), whether or not the engine reports a pool."""
        return self.modelled_pool.weights_overflow

    @property
    def slots_unstated(self) -> bool:
        """llama-server with no -np given (observe's --max-num-seqs/--parallel): its slots
        are whatever it was started with, not its default 4 (a server running 14 has 14 or
        more), so the pool is counted as decode, utilization and the page count it, a slot
        each (``slot_batch``)."""
        return self.deployment.engine.startswith("llama.cpp") \
            and self.engine_settings.max_num_seqs is None and self.engine_pool is None

    @cached_property
    def slot_batch(self) -> int:
        """llama.cpp's conversations of the context, a slot each, under its default --fit
        margin where that keeps every layer on the GPU: capacity.decode_held, the count
        decode, utilization, the page and fit's -np lever give (gpt-oss-20b on an RTX 4090
        at 32,000 tokens: 14, where -np 4 would read 4)."""
        return decode_held(self.deployment, self.context)

    @property
    def seats(self) -> int:
        """The sequences the engine runs at once at most: vLLM's max_num_seqs; SGLang's
        max_running_requests, from the pool it reports where it does (512 per context of
        its tokens, 2,048 to 4,096, at most half of them), or as a drafter sets it (48), as
        fit and simulate seat it; llama-server's slots, its -np where given, else as many as
        its pool holds (``slot_batch``)."""
        reported = self.engine_pool
        if reported is not None and self.deployment.engine == "sglang":
            return sglang_max_running_requests(reported.tokens, self.context, self.set_seats)
        if self.slots_unstated:
            return self.slot_batch
        return self.modelled_pool.max_num_seqs

    @property
    def pool_batch(self) -> int:
        """Sequences of the context the pool holds, at most the engine's seats: the engine's
        own pool where it reports it (vLLM's blocks, whole blocks a sequence in each of the
        model's KV-cache groups; SGLang's tokens) and the deployment as described can load
        its weights, else modelled. 432,000 tokens in blocks of 16 hold 3,857 sequences of
        100 tokens; vllm serve seats 1,024."""
        reported = self.engine_pool
        if self.slots_unstated:
            return self.slot_batch
        if reported is None:
            return max_batch(self.deployment, self.context, self.modelled_settings)
        if self.weights_overflow:
            return 0
        return min(self.seats, reported.sequences(self.context))

    @property
    def pool_sequences(self) -> int:
        """Sequences of the context the KV pool alone holds, the seats aside: the engine's own
        pool where it reports it, else the modelled one (``max_batch_terms``); 0 where the
        deployment as described cannot load its weights."""
        reported = self.engine_pool
        if reported is None:
            return max(0, max_batch_terms(self.deployment, self.context,
                                          self.modelled_settings)[1])
        return 0 if self.weights_overflow else reported.sequences(self.context)

    @property
    def seat_capped(self) -> bool:
        """Whether the seats, not the pool, cap ``pool_batch``: the pool holds more sequences
        of the context than the engine runs at once (llama-server's 4 default slots on an RTX
        4090 at 2,000 tokens, Llama-3.1-8B Q4_K_M, whose pool holds 76). Not where
        llama-server's slots are not given: they are counted as many as the pool holds, a
        slot each (``slot_batch``), so the pool is the cap."""
        return self.fits and not self.slots_unstated and self.pool_sequences > self.pool_batch

    @property
    def pool_division(self) -> str:
        """The block division behind ``pool_batch`` where whole blocks round it and the seats
        do not cap it (EnginePool.block_division), so the printed count can be redone; ""
        elsewhere."""
        if self.weights_overflow or self.pool_batch >= self.seats:
            return ""
        pool = self.engine_pool or EnginePool.modelled(self.modelled_pool)
        if pool.sequences(self.context) != self.pool_batch:  # counted another way: no sum
            return ""
        return pool.block_division(self.context)

    @property
    def fits(self) -> bool:
        """The deployment as described loads its weights and holds at least one sequence of
        the context."""
        return self.pool_batch > 0
