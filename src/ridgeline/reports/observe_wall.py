"""`ridgeline observe`'s wall check: the running batch on the roofline, the queue the readings
show, the wall the engine hits (the pool, the seats or the step's token budget, llama-server's
slots, the benchmark client's cap, the ridge, none, or unknown without a batch to trust) and
the lever that moves it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ridgeline.candidate import ENGINE_KNOB_NAMES
from ridgeline.reports.observe_floor import ObservedFloor
from ridgeline.roofline import arithmetic_share, first_whole_batch
from ridgeline.stages import micro_batches

CAPACITY = "capacity"
LATENCY = "latency"
SLOTS = "slots"  # llama-server's: requests wait for a free slot (-np), not for the pool
NEITHER = "neither"
# neither the pool nor the ridge, on a page with no waiting-requests gauge: a queue on the
# seats or the step's token budget (the latency wall) cannot be ruled out
QUEUE_UNKNOWN = "neither, the queue unknown"
CLIENT = "the client's cap"  # a benchmark run at --max-concurrency: the batch is the client's
RIDGE = "the ridge"
NO_FIT = "does not fit"
# requests ran at every reading while the tokens the engine counts at every step stood still
# (Observation.stalled_s): no batch is being served to set against the pool or the ridge
STALLED = "stalled"
# a source with no running batch (a bench without ITL or latencies), or one read from an ITL
# whose unit is in doubt (ObservedFloor.unit_suspect)
UNKNOWN = "unknown"
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
    UNKNOWN: "the source gives no running batch to set against the pool, the seats or the "
             "ridge",
}
UNIT_DOUBT = ("the running batch, output tok/s × a mean ITL whose unit is in doubt (the caution "
              "below), is not set against the pool, the seats or the ridge")
# the share of readings (scrapes, log lines; each data-parallel engine's apart) that must
# show a queue before it is a wall: one reading's queue is a prompt that arrived between steps
QUEUED_SHARE = 0.5
NEAR_FULL = 0.9  # seats or a step's token budget this full are what the queue waits on
KV_FULL = 0.9  # a reading of the KV pool this full is the capacity wall
KV_QUEUED = 0.8  # this full beside a queue, or beside preemptions, it is too
# preemptions against the requests that finished over the window past which the pool filled
# often enough to be the wall, whatever the readings saw (one in twenty requests preempted)
PREEMPTED_SHARE = 0.05


@dataclass(frozen=True)
class ObservedWall(ObservedFloor):
    """The floor check, with the batch on the roofline and the wall it meets (none read off a
    batch whose ITL is likely in another unit)."""

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

    @property
    def ridge_batch(self) -> float:
        """The running batch at which the weights every token reads meet the ridge (each
        pipeline stage multiplying one micro-batch of it)."""
        return self.deployment.dense_ridge_batch * micro_batches(self.deployment)

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
    def kv_peak(self) -> float | None:
        """The fullest the readings saw the KV pool (None without a KV reading)."""
        return max((kv for kv, _ in self.readings if kv is not None), default=None)

    @property
    def preemptions_fill_pool(self) -> bool:
        """Preemptions say the pool filled, as the wall: where the readings saw it at least
        KV_QUEUED full or saw no KV at all, or where they came often (PREEMPTED_SHARE of the
        requests that finished, or however many where the source does not count those)
        however empty the readings caught it. One preemption among 60 finished requests while
        every reading shows 30% is a burst between readings."""
        preempted, peak = self.obs.preemptions or 0.0, self.kv_peak
        if not preempted:
            return False
        if peak is None or peak >= KV_QUEUED:
            return True
        finished = self.obs.finished_requests
        return finished is None or preempted >= PREEMPTED_SHARE * finished

    @property
    def preemption_remark(self) -> str | None:
        """What preemptions that did not make the wall say: the pool filled between readings,
        too rarely to be the wall."""
        preempted, peak = self.obs.preemptions or 0.0, self.kv_peak
        if not preempted or self.preemptions_fill_pool or peak is None:
            return None
        return (f"{preempted:,.0f} {'preemption' if preempted == 1 else 'preemptions'} in the "
                f"window against {self.obs.finished_requests or 0.0:,.0f} finished requests, "
                f"though the readings saw the KV pool at most {peak:.0%} full: it filled "
                "between readings, too rarely to be the wall (scrape more often to catch it)")

    @property
    def wall(self) -> str:
        if not self.fits:
            return NO_FIT
        o = self.obs
        if o.stalled_s is not None:
            return STALLED
        readings = self.readings
        swapped = max(o.swapped) if o.swapped else 0.0
        peak = self.kv_peak
        if (peak is not None and peak >= KV_FULL) or self.preemptions_fill_pool or swapped > 0:
            return CAPACITY
        if self.queue_persists:
            if any(kv is not None and kv >= KV_QUEUED for kv, waiting in readings if waiting > 0):
                return CAPACITY
            if self.deployment.engine.startswith("llama.cpp"):
                return SLOTS
            if self.queue_cause != "room" or self.pinned_count is not None:
                return LATENCY
        if self.batch is None or self.unit_suspect:
            return UNKNOWN
        b = self.batch
        if o.kind == "bench" and b >= 0.9 * self.pool_batch:
            return CAPACITY
        # a client holding N requests in flight: each spends its first token's wait outside
        # the decoding batch, so the batch reads somewhat under N
        if o.client_concurrency and b >= 0.8 * o.client_concurrency:
            return CLIENT
        if (self.fraction or 0.0) >= 1.0:  # nothing waits, and the batch reads past the ridge
            return RIDGE
        return QUEUE_UNKNOWN if o.queue_unread else NEITHER

    @property
    def pinned_batch(self) -> int | None:
        """The running count where it reads one whole value at every reading (two or more)
        while requests wait at every one, under NEAR_FULL of the seats modelled and with the
        pool not full: the mark of a seat cap the server was started with (vLLM's
        --max-num-seqs 256: running 256 and 256, waiting 50 and 60, KV 40 %), which the seats
        modelled (1,024) do not know. None elsewhere."""
        return self.pinned_count if self.wall == LATENCY else None

    @property
    def pinned_count(self) -> int | None:
        """``pinned_batch``'s readings alone, before the wall is read (which a queue behind
        a pinned batch makes the latency wall, its lever the seats: a queue the pool, the
        seats modelled and the step's budget all have room for waits on a cap they lack)."""
        running = self.obs.running
        n, of = self.queued
        if len(running) < 2 or n < of or of < 2:
            return None
        pinned = running[0]
        if pinned < 2 or pinned != int(pinned) or any(r != pinned for r in running):
            return None
        return int(pinned) if pinned < NEAR_FULL * self.seats else None

    @property
    def pinned_caution(self) -> str | None:
        """The caution ``pinned_batch`` gives, naming the flag to describe the cap with."""
        pinned = self.pinned_batch
        if pinned is None:
            return None
        flag = self.knob_flags[0]
        return (f"the running batch read {pinned:,} at every reading while requests waited at "
                f"every one: a batch pinned at one count with a queue behind it is a seat cap, "
                f"not the {self.seats:,} seats modelled; if the server runs {flag} {pinned:,}, "
                f"give {flag} {pinned:,} and the wall reads the seats")

    @property
    def stalled_lever(self) -> str:
        """What a window without a token says (Observation.stalled_s): 32 requests running at
        every reading of 60 s in which vLLM counted no token is an engine that took no step
        (a stuck collective, a dead worker), or a page that stopped changing; not a wall of
        the pool, the seats or the ridge, nor a lever of theirs."""
        o = self.obs
        low = min(o.running) if o.running else 0.0
        counters = {"vllm": "vLLM's prompt and generation tokens",
                    "llama.cpp": "llama-server's llama_decode() calls (llamacpp:n_decode_total)"
                    }.get(o.engine_family or "", "SGLang's realtime_tokens_total")
        # vLLM counts a prompt's tokens at its first output: chunks of one long enough to
        # outlast the window move nothing; SGLang's and llama-server's move at each chunk
        prefill = ("; a prompt whose prefill outlasts the window, run alone, is the one load "
                   "that does this" if o.engine_family == "vllm" else "")
        return (f"{low:,.0f} or more requests ran at every reading, but {counters}, which move "
                f"at every engine step, did not move in {o.stalled_s or 0.0:,.0f} s: the "
                "engine took no step (hung: a stuck collective or a dead worker; see its log "
                "and /health), or the page no longer changes (a cached or frozen exporter)"
                + prefill)

    @property
    def peak_running(self) -> float:
        o = self.obs  # one engine's seats: the busiest data-parallel engine's batch
        return max(o.busiest_running or o.running) if o.running else self.batch or 0.0

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
    def seat_cap_words(self) -> str:
        """The seats named as the cap on the running batch, as decode words llama-server's
        ("given a slot each (-np; llama-server's default runs 4)"): "llama-server's slots
        (-np; its default runs 4)", or (-np 8) where given; "max_num_seqs (1,024)"."""
        if self.deployment.engine.startswith("llama.cpp"):
            from ridgeline.datafiles import engine_defaults

            given = self.engine_settings.max_num_seqs
            return "llama-server's slots (" + (
                f"-np {given:,}" if given is not None else
                f"-np; its default runs {int(engine_defaults(self.deployment.engine)['n_parallel'])}"
            ) + ")"
        return f"{self.seats_label} ({self.seats:,})"

    @property
    def seats_label(self) -> str:
        engine = self.deployment.engine
        if engine.startswith("llama.cpp"):
            return "llama-server's slots (-np)"
        name = ENGINE_KNOB_NAMES.get(engine, ENGINE_KNOB_NAMES["vllm"])[0]
        return f"{name}, SGLang's default with a drafter" if self.set_seats is not None \
            and self.engine_settings.max_num_seqs is None else name

    @property
    def lever(self) -> str:
        seats_flag, budget_flag = self.knob_flags
        running = f"{self.peak_running:,.0f} of {self.seats:,} taken"
        used = round(self.batch or 0.0) + self.prompt_tokens_per_step
        if self.wall == LATENCY:
            cause = self.queue_cause
            if cause == "room" and self.pinned_batch is not None:
                return (f"requests wait while the pool, the {self.seats:,} seats modelled and "
                        f"the steps' token budget (about {used:,} of {self.step_budget:,} "
                        f"tokens a step) have room, beside a batch pinned at "
                        f"{self.pinned_batch:,}: a seat cap the description lacks (the caution "
                        f"below) holds them; raise {seats_flag}")
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
        if self.wall in (NEITHER, QUEUE_UNKNOWN):  # under the ridge, load is cheap
            # each engine's pool is the one sized: the busiest engine's batch is what fills it
            b = self.obs.busiest_batch or 0.0
            shown = f"{b:,.1f}" if 0 < b < 0.5 else f"{b:,.0f}"  # a bench's 0.3 is not 0
            busiest = (f"the busiest of {self.obs.engines} engines, " if b != (self.batch or 0.0)
                       else "")
            # where the seats cap the count, they are named, not the pool (``seat_capped``)
            holds = (f"it runs at once, capped by {self.seat_cap_words}" if self.seat_capped
                     else "its pool holds")
            over = ("the server runs more than that (--max-num-seqs gives its count)"
                    if self.seat_capped else "their contexts are shorter, or share prefixes")
            held = (f"{busiest}{b:,.0f} running, more than the {self.pool_batch:,} sequences "
                    f"of {self.context:,} tokens {holds}: {over}" if b > self.pool_batch else
                    f"{busiest}{shown} of the {self.pool_batch:,} sequences {holds}")
            ridge = (f"under the ridge (reached at batch {first_whole_batch(self.ridge_batch):,}), "
                     "where each added sequence shares the weights' read")
            if self.wall == QUEUE_UNKNOWN:
                return (f"no limit from the pool ({held}), and the batch is {ridge}; but the "
                        "page has no waiting-requests metric, so a queue for the seats or the "
                        "steps' token budget would go unseen: if none waits, it runs all it is "
                        "sent — send more load, or serve it on fewer GPUs or replicas")
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
            return (f"{queue}no limit from the pool or the queue: it runs all it is sent ({held}), "
                    f"{ridge} — send more load, or serve it on fewer GPUs or replicas")
        cap = self.obs.client_concurrency or 0.0
        if self.wall == CAPACITY:
            peak, o = self.kv_peak, self.obs
            swapped = max(o.swapped) if o.swapped else 0.0
            if peak is not None and peak < KV_QUEUED and not swapped:  # preemptions alone
                return (f"the KV pool filled between readings: {o.preemptions:,.0f} preemptions"
                        + (f" against {o.finished_requests:,.0f} finished requests"
                           if o.finished_requests else "")
                        + f", though the readings saw it at most {peak:.0%} full; "
                        + LEVERS[CAPACITY].removeprefix("the KV pool is full: "))
        if self.wall == STALLED:
            return self.stalled_lever
        if self.wall == UNKNOWN:
            unknown = UNIT_DOUBT if self.unit_suspect else LEVERS[UNKNOWN]
            return unknown + (f"; the benchmark client held at most {cap:,.0f} requests in "
                              "flight (--max-concurrency)" if cap else "")
        return LEVERS[self.wall].format(cap=cap)
