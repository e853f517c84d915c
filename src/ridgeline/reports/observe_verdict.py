"""`ridgeline observe`'s verdict: the running batch on the roofline, the sequences the pool
holds, the wall the engine hits and its lever, and the step ridgeline predicts at that batch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from ridgeline.capacity import max_batch
from ridgeline.catalog import model_entry, normalise
from ridgeline.cost import Seq, decode_batch, step_cost
from ridgeline.deployment import Deployment
from ridgeline.engine_pool import EnginePool, reported_pool
from ridgeline.engines import EngineProfile
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, KVPool, kv_pool
from ridgeline.observation import Observation
from ridgeline.roofline import arithmetic_share
from ridgeline.sglang_memory import sglang_max_running_requests
from ridgeline.stages import micro_batch, micro_batches

CAPACITY = "capacity"
LATENCY = "latency"
SLOTS = "slots"  # llama-server's: requests wait for a free slot (-np), not for the pool
NEITHER = "neither"
CLIENT = "the client's cap"  # a benchmark run at --max-concurrency: the batch is the client's
RIDGE = "the ridge"
NO_FIT = "does not fit"
LEVERS = {
    NO_FIT: "no prediction: check --model, --gpu, --num-gpus, --weights and --context against "
            "what the engine serves (`ridgeline fit` sizes the pool)",
    CAPACITY: "the KV pool is full: fp8 KV cache, more GPUs, shorter contexts or a smaller "
              "weight format (see `ridgeline fit`)",
    LATENCY: "requests wait while the pool has room: raise --max-num-seqs or "
             "--max-num-batched-tokens, or relax the SLO that caps them",
    SLOTS: "requests wait for a free slot: more slots (-np N with -c sized for N "
           "conversations; `ridgeline fit --parallel N` says whether they fit)",
    CLIENT: "the benchmark client held at most {cap:,.0f} requests in flight "
            "(--max-concurrency {cap:,.0f}): the engine ran all it was sent; raise the cap to "
            "find its own wall",
    RIDGE: "past it no sequence shares another's work: each adds its own arithmetic and KV "
           "read to the step, so more load adds latency more than tokens — more GPUs or "
           "replicas, fp8 matmuls or KV, or a faster card add throughput",
}


@dataclass(frozen=True)
class ObserveVerdict:
    """The figures and the wall, from the observation and the deployment described:
    ObserveReport (reports/observe.py) adds the worked steps and renders them."""

    obs: Observation
    deployment: Deployment
    profile: EngineProfile
    context: int
    context_source: str

    @property
    def batch(self) -> float | None:
        return self.obs.batch

    @property
    def ridge(self) -> float:
        return self.deployment.dense_ridge_flop_per_byte  # the weights every token reads

    @property
    def stage_batch(self) -> float | None:
        """The sequences each pipeline stage multiplies: the running batch split into one
        micro-batch per stage, ⌈batch ÷ stages⌉ as fit rounds (47.5 over PP2: 24); the batch
        itself without a pipeline."""
        b = self.batch
        stages = micro_batches(self.deployment)
        return b if b is None or stages == 1 else math.ceil(b / stages)

    @property
    def fraction(self) -> float | None:
        b = self.stage_batch
        if b is None:
            return None
        bpw = self.deployment.bytes_per_weight_split[0]  # MoE: all but the routed experts
        return arithmetic_share(b, bpw, self.ridge)

    @cached_property  # read by the fit, the seats, the step budget and the text: sized once
    def modelled_pool(self) -> KVPool:
        """The pool the engine's defaults leave on the deployment as described (a live engine
        is a server: vllm serve's defaults, not offline's)."""
        return kv_pool(self.deployment, EngineSettings(max_model_len=self.context))

    @cached_property
    def engine_pool(self) -> EnginePool | None:
        """The pool the engine reports, per engine, for the model served."""
        return reported_pool(self.obs, self.deployment)

    @property
    def weights_overflow(self) -> bool:
        """The deployment as described cannot load its weights (more per GPU than the card
        holds), though the engine reports a pool: it serves on another deployment (more GPUs,
        a smaller format) than --num-gpus and --weights say. Where no pool is reported, the
        modelled pool's own verdict (pool_batch 0) says it."""
        return self.engine_pool is not None and self.modelled_pool.weights_overflow

    @property
    def seats(self) -> int:
        """The sequences the engine runs at once at most: vLLM's max_num_seqs; SGLang's
        max_running_requests, from the pool it reports where it does (512 per context of
        its tokens, 2,048 to 4,096, at most half of them)."""
        reported = self.engine_pool
        if reported is not None and self.deployment.engine == "sglang":
            return sglang_max_running_requests(reported.tokens, self.context)
        return self.modelled_pool.max_num_seqs

    @property
    def pool_batch(self) -> int:
        """Sequences of the context the pool holds, at most the engine's seats: the engine's
        own pool where it reports it (vLLM's blocks, whole blocks a sequence in each of the
        model's KV-cache groups; SGLang's tokens) and the deployment as described can load
        its weights, else modelled. 432,000 tokens in blocks of 16 hold 3,857 sequences of
        100 tokens; vllm serve seats 1,024."""
        reported = self.engine_pool
        if reported is None:
            return max_batch(self.deployment, self.context,
                             EngineSettings(max_model_len=self.context))
        if self.weights_overflow:
            return 0
        return min(self.seats, reported.sequences(self.context))

    @property
    def fits(self) -> bool:
        """The deployment as described loads its weights and holds at least one sequence of
        the context."""
        return self.pool_batch > 0

    @property
    def model_caution(self) -> str | None:
        """A caution when the metrics' model_name label names another model than --model."""
        model = self.deployment.model
        try:
            entry = model_entry(model.name)
        except InputError:  # a config.json: no catalog names to compare
            return None
        others = [m for m in self.obs.model_names if not same_model(m, (entry.id, entry.hf_id))]
        if not others:
            return None
        return (f"the engine labels its metrics model_name={others[0]!r}, not --model "
                f"{entry.id} ({entry.hf_id}): the figures below are for {entry.id}")

    @property
    def wall(self) -> str:
        if not self.fits:
            return NO_FIT
        o = self.obs
        # (KV usage, waiting) readings: each data-parallel engine's at each scrape, where the
        # engines report apart (an engine with a queue is judged by its own pool, not by the
        # mean of a full one and an idle one); else the window's highest of each
        readings = o.core_pressure or [(max(o.kv_usage) if o.kv_usage else None,
                                        max(o.waiting) if o.waiting else 0.0)]
        swapped = max(o.swapped) if o.swapped else 0.0
        if any(kv is not None and kv >= 0.9 for kv, _ in readings) \
                or (o.preemptions or 0) > 0 or swapped > 0:
            return CAPACITY
        queued = [kv for kv, waiting in readings if waiting > 0]
        if queued:
            if any(kv is not None and kv >= 0.8 for kv in queued):
                return CAPACITY
            return SLOTS if self.deployment.engine.startswith("llama.cpp") else LATENCY
        b = self.batch or 0.0
        if o.kind == "bench" and b >= 0.9 * self.pool_batch:
            return CAPACITY
        # a client holding N requests in flight: each spends its first token's wait outside
        # the decoding batch, so the batch reads somewhat under N
        if o.client_concurrency and b >= 0.8 * o.client_concurrency:
            return CLIENT
        if (self.fraction or 0.0) >= 1.0:  # nothing waits, and the batch reads past the ridge
            return RIDGE
        return NEITHER

    @property
    def ridge_batch(self) -> float:
        """The running batch at which the weights every token reads meet the ridge (each
        pipeline stage multiplying one micro-batch of it)."""
        return self.deployment.dense_ridge_batch * micro_batches(self.deployment)

    @property
    def lever(self) -> str:
        if self.wall == NEITHER:  # the engine runs all it is sent: below the ridge, load is cheap
            b = self.batch or 0.0
            held = (f"{b:,.0f} running, more than the {self.pool_batch:,} sequences of "
                    f"{self.context:,} tokens its pool holds: their contexts are shorter, or "
                    "share prefixes" if b > self.pool_batch else
                    f"{b:,.0f} of the {self.pool_batch:,} sequences its pool holds")
            return (f"neither pool nor queue limits it: it runs all it is sent ({held}), under "
                    f"the ridge near batch {self.ridge_batch:,.0f}, where each added sequence "
                    "shares the weights' read — send more load, or serve it on fewer GPUs or "
                    "replicas")
        return LEVERS[self.wall].format(cap=self.obs.client_concurrency or 0.0)

    @property
    def predicted_itl_ms(self) -> float | None:
        b = self.batch
        if b is None or b < 0.5 or not self.fits:
            return None
        micro = micro_batch(self.deployment, max(1, round(b)))  # a token's trip: one micro-batch
        work = decode_batch(micro, self.context)
        chunk = self.prompt_tokens_per_step
        if chunk:  # the prompt work the load spreads over its steps rides in them
            work = [*work, Seq(chunk, round((self.obs.mean_prompt_tokens or 0) / 2))]
        cost = step_cost(self.deployment, work, self.profile)
        return cost.time_s * 1e3

    @cached_property  # read by the prediction, the gap and the text: one pool sizing
    def prompt_tokens_per_step(self) -> int:
        """Prompt tokens an average step carries beside its decodes, where the source says
        how much prompt the load brings per output token: in a steady state prompts arrive
        at prompt tok/s ÷ generation tok/s of them per decode (a bench's mean input ÷ mean
        output), each step holding the batch's share (capped at the engine's step budget)."""
        o, b = self.obs, self.batch
        if b is None or not o.mean_prompt_tokens:
            return 0
        if o.prompt_tok_s and o.generation_tok_s:
            ratio = o.prompt_tok_s / o.generation_tok_s
        elif o.mean_output_tokens:
            ratio = o.mean_prompt_tokens / o.mean_output_tokens
        else:
            return 0
        ratio *= 1 - (o.cached_prompt_share or 0.0)  # a prefix-cache hit is not computed
        budget = self.modelled_pool.profile_tokens
        return max(0, min(round(b * ratio), budget - round(b)))

    def gaps(self) -> dict[str, float]:
        """Predicted ÷ measured − 1; none from a single scrape, whose latency histograms cover
        the server's lifetime and whose batch is one instant's."""
        out: dict[str, float] = {}
        if self.single_scrape:
            return out
        predicted = self.predicted_itl_ms
        measured = self.obs.latency_ms.get("itl", {}).get("mean")
        if predicted and measured and not math.isnan(measured):
            out["itl"] = predicted / measured - 1
        b = self.batch
        if predicted and b and self.obs.generation_tok_s:
            out["generation_tok_s"] = (b / (predicted / 1e3)) / self.obs.generation_tok_s - 1
        return out

    @property
    def single_scrape(self) -> bool:
        """One /metrics scrape: its gauges are an instant, its histograms the server's life."""
        return self.obs.kind == "metrics" and self.obs.duration_s is None


def same_model(label: str, names: tuple[str, ...]) -> bool:
    """Loosely: the label's last path part and one of ``names`` (a catalog id, a Hugging Face
    id) contain each other between hyphens, case aside — 'Llama-3.1-8B-Instruct-FP8' is
    llama-3.1-8b, 'Llama-3.1-405B' is not."""
    mine = f"-{normalise(label.rstrip('/').rsplit('/', 1)[-1])}-"
    for name in names:
        theirs = f"-{normalise(name.rsplit('/', 1)[-1])}-"
        if mine in theirs or theirs in mine:
            return True
    return False
