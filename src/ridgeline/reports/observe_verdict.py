"""`ridgeline observe`'s verdict: the running batch on the roofline, the sequences the pool
holds, the wall the engine hits and its lever, and the step ridgeline predicts at that batch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from ridgeline.candidate import ENGINE_KNOB_NAMES
from ridgeline.capacity import max_batch
from ridgeline.catalog import model_entry, normalise
from ridgeline.cost import Seq, decode_batch, step_cost
from ridgeline.deployment import Deployment
from ridgeline.engine_pool import EnginePool, reported_pool
from ridgeline.engines import EngineProfile
from ridgeline.errors import InputError
from ridgeline.floors import decode_floor
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
    SLOTS: "requests wait for a free slot: more slots (-np N with -c sized for N "
           "conversations; `ridgeline fit --parallel N` says whether they fit)",
    CLIENT: "the benchmark client held at most {cap:,.0f} requests in flight "
            "(--max-concurrency {cap:,.0f}): the engine ran all it was sent; raise the cap to "
            "find its own wall",
    RIDGE: "past it no sequence shares another's work: each adds its own arithmetic and KV "
           "read to the step, so more load adds latency more than tokens — more GPUs or "
           "replicas, fp8 matmuls or KV, or a faster card add throughput",
}
# the share of readings (scrapes, log lines; each data-parallel engine's apart) that must
# show a queue before it is a wall: one reading's queue is a prompt that arrived between steps
QUEUED_SHARE = 0.5
NEAR_FULL = 0.9  # seats or a step's token budget this full are what the queue waits on
BELOW_FLOOR = 0.9  # a latency this far under the floor is no rounding of the floor's inputs
# batch ÷ ITL and the generation rate count the same tokens: apart by more than this, one of
# the readings is not what it seems
RATES_APART = 2.0
# lighter formats a server that outruns the described floor may run, heaviest first
LIGHTER_WEIGHTS = {"llama.cpp": ("q8_0", "q6_k", "q5_k_m", "q4_k_m"),
                   "other": ("fp8", "awq-int4")}


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
    def weights_do_not_load(self) -> bool:
        """The deployment as described cannot load its weights (more per GPU than the card
        holds), whether or not the engine reports a pool."""
        return self.modelled_pool.weights_overflow

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
    def readings(self) -> list[tuple[float | None, float]]:
        """(KV usage, waiting) at each reading: each data-parallel engine's at each scrape,
        where the engines report apart (an engine with a queue is judged by its own pool, not
        by the mean of a full one and an idle one); else each scrape's or log line's, the
        window's highest KV usage beside each where the two series do not pair up."""
        o = self.obs
        if o.core_pressure:
            return o.core_pressure
        if o.waiting and len(o.kv_usage) == len(o.waiting):
            return list(zip(o.kv_usage, o.waiting, strict=True))
        kv = max(o.kv_usage) if o.kv_usage else None
        return [(kv, waiting) for waiting in o.waiting] or [(kv, 0.0)]

    @property
    def queued(self) -> tuple[int, int]:
        """(readings with requests waiting, readings)."""
        readings = self.readings
        return sum(1 for _, waiting in readings if waiting > 0), len(readings)

    @property
    def queue_persists(self) -> bool:
        """Requests wait in at least QUEUED_SHARE of the readings (of one engine's share of
        them, with several): a lone reading's queue is a prompt caught between two steps."""
        n, of = self.queued
        engines = self.obs.engines if self.obs.core_pressure else 1  # readings of each apart
        return n > 0 and (of == 1 or n / of >= QUEUED_SHARE / engines)

    @property
    def wall(self) -> str:
        if not self.fits:
            return NO_FIT
        o = self.obs
        readings = self.readings
        swapped = max(o.swapped) if o.swapped else 0.0
        if any(kv is not None and kv >= 0.9 for kv, _ in readings) \
                or (o.preemptions or 0) > 0 or swapped > 0:
            return CAPACITY
        if self.queue_persists:
            if any(kv is not None and kv >= 0.8 for kv, waiting in readings if waiting > 0):
                return CAPACITY
            if self.deployment.engine.startswith("llama.cpp"):
                return SLOTS
            if self.queue_cause != "room":
                return LATENCY
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
    def peak_running(self) -> float:
        return max(self.obs.running) if self.obs.running else self.batch or 0.0

    @property
    def step_budget(self) -> int:
        """The tokens a step takes at most: max_num_batched_tokens (SGLang's
        chunked_prefill_size, TensorRT-LLM's max_num_tokens), the engine's default here."""
        return self.modelled_pool.profile_tokens

    @property
    def queue_cause(self) -> str:
        """What a queue with room in the pool waits on: "seats" where the running batch
        reaches NEAR_FULL of them; "budget" where a step's decodes and the prompt tokens the
        load brings it, on average, reach NEAR_FULL of the step's token budget; "unknown"
        where the source gives no prompt rate over a window to tell; else "room" (both had room: prompts
        that queued for a step or two as they arrived)."""
        if self.peak_running >= NEAR_FULL * self.seats:
            return "seats"
        if self.prompt_ratio is None or self.single_scrape:  # lifetime means: not this instant
            return "unknown"
        used = (self.batch or 0.0) + self.prompt_tokens_per_step
        return "budget" if used >= NEAR_FULL * self.step_budget else "room"

    @property
    def knob_flags(self) -> tuple[str, str]:
        """The server's flags for its seats and its step's token budget."""
        engine = self.deployment.engine
        if engine == "trtllm":  # trtllm-serve spells its flags with underscores
            return "--max_batch_size", "--max_num_tokens"
        seats, budget = ENGINE_KNOB_NAMES.get(engine, ENGINE_KNOB_NAMES["vllm"])
        return (f"--{seats.replace('_', '-')}", f"--{budget.replace('_', '-')}")

    @property
    def seats_label(self) -> str:
        engine = self.deployment.engine
        if engine.startswith("llama.cpp"):
            return "llama-server's slots (-np)"
        return ENGINE_KNOB_NAMES.get(engine, ENGINE_KNOB_NAMES["vllm"])[0]

    @property
    def ridge_batch(self) -> float:
        """The running batch at which the weights every token reads meet the ridge (each
        pipeline stage multiplying one micro-batch of it)."""
        return self.deployment.dense_ridge_batch * micro_batches(self.deployment)

    @property
    def lever(self) -> str:
        seats_flag, budget_flag = self.knob_flags
        running = f"{self.peak_running:,.0f} of {self.seats:,} taken"
        used = round(self.batch or 0.0) + self.prompt_tokens_per_step
        if self.wall == LATENCY:
            cause = self.queue_cause
            if cause == "seats":
                return (f"requests wait while the pool has room and the batch fills its seats "
                        f"({running}): raise {seats_flag}")
            if cause == "budget":
                return (f"requests wait while the pool and the seats have room ({running}) and "
                        f"the steps' token budget is about full (the batch's decodes and the "
                        f"prompt tokens the load brings a step, about {used:,} of "
                        f"{self.step_budget:,} on average): raise {budget_flag}")
            return (f"requests wait while the pool and the seats have room ({running}): the "
                    f"steps' token budget ({budget_flag}, {self.step_budget:,} here) is what "
                    "is left to hold them, but this source gives no prompt rate over a window "
                    "to say how full it runs")
        if self.wall == NEITHER:  # the engine runs all it is sent: below the ridge, load is cheap
            b = self.batch or 0.0
            held = (f"{b:,.0f} running, more than the {self.pool_batch:,} sequences of "
                    f"{self.context:,} tokens its pool holds: their contexts are shorter, or "
                    "share prefixes" if b > self.pool_batch else
                    f"{b:,.0f} of the {self.pool_batch:,} sequences its pool holds")
            n, of = self.queued
            queue = ""
            if n and self.queue_persists:
                queue = (f"requests waited in {n} of {of} readings, but the seats ({running}), "
                         f"the steps' token budget (about {used:,} of {self.step_budget:,} "
                         "tokens a step) and the pool had room: prompts queued for a step as "
                         "they arrived, no wall; ")
            elif n:
                queue = (f"requests waited in only {n} of {of} readings, too few to be a wall "
                         "(a prompt that arrived between steps); ")
            return (f"{queue}neither pool nor queue limits it: it runs all it is sent ({held}), "
                    f"under the ridge near batch {self.ridge_batch:,.0f}, where each added "
                    "sequence shares the weights' read — send more load, or serve it on fewer "
                    "GPUs or replicas")
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
            work = [*work, Seq(chunk, self.chunk_context)]
        cost = step_cost(self.deployment, work, self.profile)
        return cost.time_s * 1e3

    @property
    def chunk_context(self) -> int:
        """The tokens of its prompt already cached when a prompt's chunk runs, on average:
        half the mean prompt where the source gives it, else half the context each running
        request holds (its prompt and part of its output: a little long)."""
        prompt = self.obs.mean_prompt_tokens
        return round((prompt if prompt else self.context) / 2)

    @property
    def prompt_ratio(self) -> tuple[float, str] | None:
        """Prompt tokens the load brings per generated token, and from what: the two rates
        where the source gives both (prompt tok/s ÷ generation tok/s), else a bench's mean
        input ÷ mean output; None with neither."""
        o = self.obs
        if o.prompt_tok_s is not None and o.generation_tok_s:
            return o.prompt_tok_s / o.generation_tok_s, "prompt tok/s ÷ generation tok/s"
        if o.mean_prompt_tokens is not None and o.mean_output_tokens:
            return o.mean_prompt_tokens / o.mean_output_tokens, "mean prompt ÷ mean output"
        return None

    @cached_property  # read by the prediction, the gap and the text: one pool sizing
    def prompt_tokens_per_step(self) -> int:
        """Prompt tokens an average step carries beside its decodes: in a steady state
        prompts arrive at prompt_ratio of them per decode, each step holding the batch's
        share, less prefix-cache hits, capped at the engine's step budget (2,389 prompt tok/s
        beside 831 generated at batch 34: 98 a step)."""
        b, ratio = self.batch, self.prompt_ratio
        if b is None or ratio is None:
            return 0
        share = ratio[0] * (1 - (self.obs.cached_prompt_share or 0.0))  # a hit is not computed
        return max(0, min(round(b * share), self.step_budget - round(b)))

    @property
    def measured_itl_ms(self) -> float | None:
        """The mean time between a request's tokens over the window: the ITL histogram's
        mean, else what the generation rate implies at the running batch (batch ÷ tok/s);
        None from a single scrape (its histogram is the server's lifetime)."""
        if self.single_scrape:
            return None
        itl = self.obs.latency_ms.get("itl", {}).get("mean")
        if itl and not math.isnan(itl):
            return itl
        return self.rate_itl_ms

    @property
    def rate_itl_ms(self) -> float | None:
        """The time a token implied by the running gauge and the generation rate: batch ÷
        generation tok/s (34 running at 831 tok/s: 40.9 ms)."""
        b, rate = self.batch, self.obs.generation_tok_s
        return b / rate * 1e3 if b and rate and not self.single_scrape else None

    @property
    def rates_apart(self) -> float | None:
        """How far the ITL histogram and batch ÷ generation rate disagree (the larger ÷ the
        smaller), where the batch is the engine's gauge; a bench's batch is derived from
        the two, so they cannot."""
        itl = self.obs.latency_ms.get("itl", {}).get("mean")
        implied = self.rate_itl_ms
        if not (itl and implied and self.obs.running) or math.isnan(itl):
            return None
        return max(itl, implied) / min(itl, implied)

    @cached_property
    def floor_itl_ms(self) -> float | None:
        """decode's floor for one micro-batch at the context on the deployment described (no
        engine overhead, every byte at the card's rated bandwidth): no step can be faster."""
        b = self.batch
        if b is None or b < 0.5 or not self.fits:
            return None
        try:
            floor = decode_floor(self.deployment, micro_batch(self.deployment, max(1, round(b))),
                                 self.context)
        except InputError:
            return None
        return floor.step_time_s * 1e3

    @property
    def below_floor(self) -> bool:
        """The latency measured is under BELOW_FLOOR of the floor: the server does not run
        what is described (a lighter weight format, more GPUs, a shorter context)."""
        measured, floor = self.measured_itl_ms, self.floor_itl_ms
        return bool(measured and floor and measured < BELOW_FLOOR * floor)

    @cached_property
    def lighter_weights(self) -> list[tuple[str, float]]:
        """(format, its floor in ms) for the heaviest lighter formats whose floor the
        measured latency clears, first the heaviest; empty where none does or the floor is
        not broken."""
        if not self.below_floor or self.deployment.offload is not None:
            return []
        d, b = self.deployment, max(1, round(self.batch or 1))
        measured = self.measured_itl_ms or 0.0
        llamacpp = d.engine.startswith("llama.cpp")
        out = []
        for name in LIGHTER_WEIGHTS["llama.cpp" if llamacpp else "other"]:
            try:
                lighter = Deployment.build(
                    d.model, d.accelerator, name, d.kv.id, d.num_gpus,
                    1 if llamacpp else d.pipeline_parallel_size, d.engine, d.expert_parallel,
                    d.flash_attention,
                    split_mode="tensor" if llamacpp and d.tensor_parallel_size > 1 else None)
                floor = decode_floor(lighter, micro_batch(lighter, b), self.context)
            except InputError:
                continue
            if floor.step_time_s * 1e3 <= measured:
                out.append((name, floor.step_time_s * 1e3))
        return out[:2]

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
