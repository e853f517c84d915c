"""`ridgeline utilization`: the share of the arithmetic a running batch uses, against the
ridge, and how many conversations the engine's pool holds at a context."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ridgeline.dense_ridge import dense_ridge_steps, engine_ridge_step
from ridgeline.deployment import Deployment
from ridgeline.engine_metrics import running_metric
from ridgeline.errors import DoesNotFit
from ridgeline.explain import Quantity, Step, q, step
from ridgeline.hardware import Accelerator
from ridgeline.moe import expected_experts_touched
from ridgeline.parallel import cross_node_caution, deployment_cross_node_caution
from ridgeline.reports.expectation import context_caution
from ridgeline.reports.identity import card_identity_json, identity_json
from ridgeline.roofline import (
    arithmetic_share,
    batch_for_intensity,
    expert_intensity,
    first_whole_batch,
    ridge_point,
    ridge_step,
    weight_intensity,
)
from ridgeline.stages import micro_batches, split_batch
from ridgeline.units import GIB, MIB, fmt_share, plural

# the first line's share is the weight matrices' (the article's metric), not the whole step's
WEIGHTS_SHARE_LABEL = "the weight matrices' share of the arithmetic in use"


def billed_scope(moe: bool) -> str:
    """What "N% of the arithmetic you are billed for" counts, said after it (utilization and
    observe alike): the weight matrices' matmuls, not the whole step's; of a MoE, the weights
    every token reads."""
    return (" in the weights every token reads (attention, shared layers; the routed experts "
            "see far fewer tokens each)" if moe else
            " in the weight matrices (their share, not the whole step's)")


@dataclass(frozen=True)
class UtilizationReport:
    accelerator: Accelerator
    compute_dtype: str
    running: int
    bytes_per_weight: float
    kv_batch_limit: int | None
    context: int | None
    model: str | None
    steps: tuple[Step, ...]
    caution: str = ""  # a context past the model's trained one
    experts: str = ""  # an MoE model: what the routed experts' share is
    refusal: str = ""  # why the engine would not start at this context
    micro_batches: int = 1  # pipeline parallel: the running batch split over the stages
    # with a model and a context: the whole decode step's FLOPs over its floor time × the
    # peak they are priced at, each matmul at its own dtype's (DecodeFloor.fraction_of_peak;
    # KV reads, attention and every expert included)
    step_fraction_of_peak: float | None = None
    # an MoE model: experts touched, tokens each, their share of arithmetic, the batch at ridge
    expert_figures: Mapping[str, float] | None = None
    node_caution: str = ""  # tensor parallelism past one node (parallel.cross_node_caution)
    engine: str = "vllm"  # whose pool, seats flag and running gauge the text names
    fit_free_bytes: float = 0.0  # llama.cpp under --fit: the margin its pool leaves free
    num_gpus: int = 1  # the cards whose peak the whole step's share is of
    # the peak the ridge divides: a model's dense matmuls' as the step prices them, blended
    # where they run at several dtypes (Deployment.dense_peak_flops_per_s, peak_at); 0:
    # compute_dtype's catalog peak
    peak_flops_per_s: float = 0.0
    # the dtypes the whole step's share is of their peaks (Deployment.matmuls_label)
    step_peak_dtypes: str = ""
    # data-parallel attention (data_parallel.py): the ranks the running batch is dealt over,
    # each multiplying its own share by its own copy of the dense weights
    data_parallel_size: int = 1
    rank_batch: int = 0  # the busiest rank's share of a stage's batch (Deployment.rank_sequences)
    # llama.cpp where its default --fit moves weights to the host at this context: the
    # weights it keeps there and its placement in fit's words (HostedRun.placement);
    # kv_batch_limit is then that run's count, as `fit` gives it, and the whole step's share
    # is left unpriced (no host bandwidth)
    host_weight_bytes: float = 0.0
    placement: str = ""
    # the deployment as --json names it (reports.identity): with --model its keys, the
    # engine's pool sized at its default release; without, the card's and the engine's
    identity: tuple[tuple[str, Any], ...] = ()

    @property
    def engine_label(self) -> str:
        from ridgeline.engine_names import DISPLAY_NAMES

        return DISPLAY_NAMES.get(self.engine, "llama.cpp")

    @property
    def cautions(self) -> tuple[str, ...]:
        return tuple(c for c in (self.caution, self.node_caution, self.host_caution) if c)

    @property
    def host_caution(self) -> str:
        """Where the count is a run with weights on the host: why no whole-step share is
        given, and where it is priced; "" else."""
        if not self.host_weight_bytes or self.over_pool:
            return ""
        return (f"llama-server's default --fit runs {self.context:,}-token conversations with "
                f"{self.host_weight_bytes / GIB:,.2f} GiB of weights on the host ("
                f"{self.placement.split(': ', 1)[-1]}): their step reads those weights at the "
                "host's bandwidth, which utilization does not take, so the whole step's share "
                "of peak is not given (`ridgeline decode --host-bandwidth-gbs GB/s` prices it)")

    @property
    def ridge(self) -> float:
        a = self.accelerator
        return ridge_point(self.peak_flops_per_s or a.peak(self.compute_dtype),
                           a.memory_bandwidth_bytes_per_s)

    @property
    def stage_batch(self) -> int:
        """The batch one stage multiplies by the dense weights: under pipeline parallelism one
        micro-batch; with data-parallel attention the busiest rank's share, ⌈running ÷ ranks⌉
        (fit's stage_batch)."""
        return self.rank_batch or split_batch(self.running, self.micro_batches)

    @property
    def fraction_of_arithmetic(self) -> float:
        return arithmetic_share(self.stage_batch, self.bytes_per_weight, self.ridge)

    @property
    def times_ridge(self) -> float:
        """The stage batch's weight intensity ÷ the ridge, uncapped: past 1 the weight matmuls
        are compute-bound and the share stops at 100 % (1,000 running at bf16 on an H100:
        1,000 ÷ 295.3 = 3.39)."""
        return weight_intensity(self.stage_batch, self.bytes_per_weight) / self.ridge

    @property
    def over_pool(self) -> bool:
        """The running batch is more than the engine's pool holds at this context: no batch
        the engine runs at once, so no share of the arithmetic to give for it."""
        return not self.refusal and self.kv_batch_limit is not None \
            and self.kv_batch_limit < self.running

    def to_dict(self) -> dict[str, Any]:
        over = self.over_pool
        return {**(dict(self.identity) if self.identity else card_identity_json(
                    self.accelerator, self.num_gpus, self.engine)),
                "running": self.running,
                "stage_batch": self.stage_batch,
                "data_parallel_size": self.data_parallel_size,
                "ridge_flop_per_byte": self.ridge,
                # the text's "ridge batch of N": the first whole batch at or past it
                "first_whole_batch_to_ridge": first_whole_batch(batch_for_intensity(
                    self.ridge, self.bytes_per_weight)),
                "fraction_of_arithmetic": None if over else self.fraction_of_arithmetic,
                # the weight intensity ÷ the ridge before the share's cap at 1: past 1 the
                # weight matmuls are compute-bound
                "times_ridge": None if over else self.times_ridge,
                "past_ridge": None if over else self.times_ridge > 1,
                "bytes_per_weight": self.bytes_per_weight,
                # conversations of context the pool holds, the seats aside, as fit and kv name them
                "conversations": self.kv_batch_limit, "context_len": self.context,
                "experts": None if over else self.experts or None,
                **({"moe": dict(self.expert_figures)}
                   if self.expert_figures and not over else {}),
                "refusal": self.refusal or None,
                "over_pool": over,
                "step_fraction_of_peak": None if over else self.step_fraction_of_peak,
                "step_peak_matmuls": None if over or self.step_fraction_of_peak is None
                else self.step_peak_dtypes,
                **({"fit_host_weight_bytes": self.host_weight_bytes,
                    "fit_placement": self.placement} if self.host_weight_bytes else {}),
                "cautions": list(self.cautions)}

    def _pool_line(self) -> str:
        n = self.kv_batch_limit or 0
        length = {"sglang": "context_length", "trtllm": "max_seq_len"}.get(self.engine,
                                                                          "max_model_len")
        # llama.cpp has no max_model_len: it gives each conversation a slot (-np), as decode does
        started = (f"one slot (-np) of {self.context:,} tokens per conversation"
                   + (f", --fit-target {self.fit_free_bytes / MIB:,.0f} MiB left free"
                      if self.fit_free_bytes else "")
                   + (f", llama-server's default --fit keeping {self.host_weight_bytes / GIB:,.2f}"
                      " GiB of weights on the host"
                      if self.host_weight_bytes else "")
                   if self.engine.startswith("llama.cpp") else
                   f"its {'vllm serve ' if self.engine == 'vllm' else ''}defaults, started at "
                   f"{length} {self.context:,}")
        ranks = self.data_parallel_size
        return (f"{self.engine_label}'s KV pool for {self.model} ({started}, this context) "
                f"holds {n:,} {plural(n, 'conversation')} of {self.context:,} "
                f"{plural(self.context or 0, 'token')}"
                + (f" ({n // ranks:,} on each of {ranks} data-parallel ranks, each its own "
                   "pool)" if ranks > 1 else "")
                + (f": {self.refusal}" if self.refusal else ""))

    def _read_line(self) -> str:
        """Where the engine reports its running batch, and the flag that only caps it."""
        ranks = self.data_parallel_size
        return (f"Read it from {running_source(self.engine)}"
                + (f", summed over the {ranks} data-parallel ranks (each reports its own)"
                   if ranks > 1 else "")
                + f"; {seats_flag(self.engine)} is only a ceiling"
                + (f" ({seats_scope(self.engine, ranks)})" if ranks > 1 else "") + ".")

    def _over_pool_outcome(self, held: int) -> str:
        """What the engine does with more conversations than its pool holds: vLLM preempts
        (SGLang retracts); TensorRT-LLM's default policy never does, queueing instead;
        llama-server has no preemption: its -np slots share one cache (--kv-unified, as
        `ridgeline fit` starts it), a request past the slots waits in its queue for one to
        free, and a conversation that fills its slot stops there (tools/server: with
        --context-shift it drops its oldest tokens instead)."""
        shorter = "the real contexts are shorter (give --context nearer theirs)"
        if self.engine == "trtllm":
            return ("TensorRT-LLM does not preempt (GUARANTEED_NO_EVICT): a request starts only "
                    "with its whole output's blocks free, so those past the pool wait in its "
                    f"queue; or {shorter}")
        if not self.engine.startswith("llama.cpp"):
            return f"expect preemption, or {shorter}"
        return ("llama-server does not preempt: its slots share one cache (-np N "
                "--kv-unified, as `ridgeline fit` starts it), which holds at most "
                f"{held:,} {plural(held, 'conversation')} of {self.context:,} tokens at once; "
                "requests past them wait in its queue, and a conversation that fills its slot "
                f"stops there (--context-shift drops its oldest tokens instead); or {shorter}")

    @property
    def _batch_split_words(self) -> str:
        """What each piece of the running batch multiplies, where it is split: each pipeline
        stage's micro-batch, or each data-parallel rank's share by its own copy of the
        weights; "" where one step multiplies it all."""
        ranks = self.data_parallel_size
        if ranks > 1:
            upto = "" if self.running == self.stage_batch * ranks * self.micro_batches \
                else "up to "
            return (f", each of {ranks} data-parallel ranks multiplying {upto}"
                    f"{self.stage_batch:,} by its own copy of them")
        if self.micro_batches > 1:
            batches = (f"a micro-batch of {self.stage_batch:,}"
                       if self.running % self.micro_batches == 0 else
                       f"micro-batches of up to {self.stage_batch:,}")
            return f", each of {self.micro_batches} pipeline stages multiplying {batches}"
        return ""

    def text_lines(self) -> list[str]:
        if self.over_pool:  # as fit's DOES NOT FIT: the verdict leads, and no share follows
            n = self.kv_batch_limit or 0
            return [f"DOES NOT RUN AT ONCE: {self.running:,} running at {self.context:,} tokens "
                    f"each is more than the {n:,} {plural(n, 'conversation')} the pool holds, "
                    "so there is no share of the arithmetic to give for this batch: "
                    + self._over_pool_outcome(n),
                    self._pool_line(),
                    self._read_line(),
                    *(f"caution: {c}" for c in self.cautions)]
        ranks = self.data_parallel_size
        cards = self.num_gpus // ranks  # with data-parallel attention the step is a rank's
        whose = "the card's" if cards == 1 else f"the {cards} cards'"
        if ranks > 1:
            whose = f"each data-parallel rank's {whose.removeprefix('the ')}"
        ridge_batch = first_whole_batch(batch_for_intensity(self.ridge, self.bytes_per_weight))
        if self.times_ridge > 1:  # the share is capped: say the matmuls are compute-bound
            matmuls = ("the matmuls of the weights every token reads" if self.experts
                       else "the weight matmuls")
            headline = (f"{self.running:,} running is past the ridge batch of {ridge_batch:,} "
                        f"({self.ridge:,.0f} FLOP per byte) on {self.accelerator.id}, "
                        f"{self.times_ridge:,.2f}× the ridge: {matmuls} are compute-bound "
                        f"there, {fmt_share(self.fraction_of_arithmetic, 1)} of the arithmetic "
                        "you are billed for")
        else:
            headline = (f"{self.running:,} running against a ridge batch of {ridge_batch:,} "
                        f"({self.ridge:,.0f} FLOP per byte) on {self.accelerator.id}: "
                        f"{fmt_share(self.fraction_of_arithmetic, 1)} of the arithmetic you are "
                        "billed for")
        lines = [
            headline + billed_scope(bool(self.experts)) + self._batch_split_words,
            *([f"  {self.experts}"] if self.experts else []),
            *([f"  the whole step, its KV reads included, keeps "
               f"{fmt_share(self.step_fraction_of_peak, 1)} "
               + (f"of {whose} peak busy at its floor, each matmul at its own dtype's peak as "
                  f"the step is priced: {self.step_peak_dtypes}"
                  if "(" in self.step_peak_dtypes else  # matmuls at more than one dtype
                  f"of {whose} {self.step_peak_dtypes} peak busy at its floor")
               + " (`ridgeline decode` for the breakdown)"]
              if self.step_fraction_of_peak is not None else []),
        ]
        if self.kv_batch_limit is not None:
            lines.append(self._pool_line())
            if not self.refusal and self.running < self.kv_batch_limit:
                lines.append("  there is room for more: the batch is capped by traffic or by "
                             f"settings ({seats_flag(self.engine)}), not by memory")
        lines.append(self._read_line())
        return lines + [f"caution: {c}" for c in self.cautions]


def seats_flag(engine: str) -> str:
    """The launch flag that caps the engine's running requests: vLLM's --max-num-seqs,
    SGLang's --max-running-requests, trtllm-serve's --max_batch_size (engines.json ``cli``),
    llama-server's slots, -np/--parallel."""
    from ridgeline.datafiles import engine_defaults

    if engine.startswith("llama.cpp"):
        return "-np/--parallel"
    return str(engine_defaults(engine)["cli"]["max_num_seqs"])


def seats_scope(engine: str, ranks: int) -> str:
    """Whose the seats flag is under data-parallel attention (data_parallel.py): SGLang's
    --max-running-requests is the server's, divided by --dp-size on each rank; vLLM's
    --max-num-seqs each engine core's, a rank's."""
    if engine == "sglang":
        return f"the server's, ÷ {ranks} on each rank"
    return "each rank's"


def running_source(engine: str) -> str:
    """Where the engine reports its running batch: its gauge (engine_metrics.running_metric)
    on the endpoint that serves it, and the log line that prints it where there is one."""
    gauge = running_metric(engine)
    if engine == "sglang":
        return f"{gauge} on /metrics (--enable-metrics), or '#running-req: N' in SGLang's log"
    if engine == "trtllm":
        return f"{gauge} on trtllm-serve's /prometheus/metrics (enable_iter_perf_stats: true)"
    if engine.startswith("llama.cpp"):
        return f"{gauge} on llama-server's /metrics (--metrics)"
    return f"{gauge} on /metrics, or 'Running: N reqs' in vLLM's log"


def utilization_report(
    acc: Accelerator, running: int, compute_dtype: str = "bf16", bytes_per_weight: float = 2.0,
    dep: Deployment | None = None, context: int | None = None, tensor_parallel_size: int = 1,
    engine: str | None = None, blend: bool = True,
) -> UtilizationReport:
    """The running batch against the ridge; with ``dep`` and ``context``, against the pool
    ``engine`` holds too (default: llama.cpp's Metal build on Apple silicon, vLLM elsewhere),
    whose seats flag and running gauge the text names. ``tensor_parallel_size`` is the TP
    without a model (``dep``'s with one): past a node it carries the cross-node caution fit,
    decode and simulate give. ``blend``: ``dep``'s dense ridge at its matmuls' blended peak
    (Deployment.dense_peak_flops_per_s); else at ``compute_dtype``'s, as --compute-dtype asks."""
    from ridgeline.capacity import (
        SERVING_ENGINES,
        context_refusal,
        conversation_bytes,
        decode_held,
        decode_pool,
        held_apart_words,
        pool_at_context_note,
        refuses_to_start,
    )
    from ridgeline.llamacpp_fit_run import default_fit_run
    from ridgeline.reports.decode import settings_knob

    if engine is None:
        engine = "llama.cpp-metal" if acc.vendor == "apple" else "vllm"  # no vLLM on Metal
    limit, refusal, fit_free, dense_peak = None, "", 0.0, 0.0
    pool_operands: tuple[Quantity, ...] = ()
    hosted = None  # llama.cpp: the run its default --fit starts with weights on the host
    if dep is not None and context is not None:  # the engine's pool at its defaults
        dep = replace(dep, engine=engine)
        # llama.cpp: where llama-server's default --fit moves weights to the host for this
        # context, its run, counted as `fit` counts it (llamacpp_fit_run); else decode's pool,
        # a slot each, under --fit's margin where it keeps every layer on the GPU
        hosted = default_fit_run(dep, context) if engine.startswith("llama.cpp") else None
        held_dep = dep if hosted is None else hosted.deployment
        pool = decode_pool(held_dep, context)
        if pool.rest_bytes < 0:  # nothing runs: no batch to read against the ridge
            raise DoesNotFit(f"does not fit: {dep.model.name}'s weights "
                             f"({pool.weight_bytes / GIB:,.1f} GiB per GPU) and {engine}'s "
                             f"start-up overheads overflow {dep.num_gpus} x {acc.id} "
                             "(see `ridgeline fit`)")
        refusal = context_refusal(dep, context) or (
            f"{engine} would refuse to start, one {context:,}-token request being more than its "
            "pool (`ridgeline fit` for the levers)" if refuses_to_start(pool, held_dep, context)
            else "")
        limit = decode_held(held_dep, context)  # llama.cpp: a slot each, as decode counts them
        fit_free = pool.fit_free_bytes
        # in blocks too, where the pool is paged: whole blocks divide without the GiB
        # figures' rounding (gpt-oss-120b on an MI300X: 104.6 ÷ 0.07361 reads 1,421, the
        # blocks 1,420)
        blocks = pool.groups.peak_decode_blocks(context) if pool.groups is not None else 0
        per_conversation = conversation_bytes(pool, held_dep, context)
        pool_operands = (q("pool", pool.pool_bytes / GIB, "GiB", "per GPU, at the engine's "
                           "defaults" + (f": {pool.blocks:,} blocks of {pool.block_size:,} "
                                         f"{plural(pool.block_size, 'token')}"
                                         if pool.page_bytes else "")),
                         q("per conversation", per_conversation / GIB,
                           "GiB", f"{context:,} tokens, {dep.kv.id}"
                           + (f": {blocks:,} blocks" if blocks else "")))
        if hosted is not None:  # the count is --fit's run's, weights on the host
            pool_operands += (q("weights on the host", hosted.host_weight_bytes / GIB, "GiB",
                                f"llama-server's default --fit ({hosted.split}), as "
                                "`ridgeline fit` places them"),)
        # each data-parallel rank its own pool (held_conversations: one rank's × the ranks)
        division = int(pool.pool_bytes // per_conversation) * dep.data_parallel_size \
            if per_conversation else 0
        if division != limit:  # the division page's step names where the engine holds fewer
            pool_operands += (q("pool ÷ one conversation", division, "", f"{engine} holds "
                                f"{limit:,}: {held_apart_words(engine)} (`ridgeline fit`)"),)
        if limit == 0:  # the engine runs no conversation this long: no batch to read
            why = refusal or f"one {context:,}-token conversation is more than its pool"
            raise DoesNotFit(f"does not fit: {engine}'s KV pool for {dep.model.name} on "
                             f"{dep.num_gpus} x {acc.id} holds 0 conversations of {context:,} "
                             f"tokens: {why}" + ("" if "`ridgeline fit`" in why else
                                                 " (`ridgeline fit` for the levers)"))
        bytes_per_weight = dep.bytes_per_weight_split[0]  # the weights every token reads
        compute_dtype = dep.dense_compute_dtype
        # blended where its matmuls mix dtypes, unless --compute-dtype names the one
        dense_peak = dep.dense_peak_flops_per_s if blend else 0.0
    # the ridge at the peak the step is priced at (Deployment.peak_at: llama.cpp's CUDA
    # build's fp16 accumulate on a GeForce card), the card's without a model
    from_dense = bool(dense_peak)
    if not from_dense:
        dense_peak = acc.peak(compute_dtype) if dep is None else dep.peak_at(compute_dtype)
    ridge = ridge_point(dense_peak, acc.memory_bandwidth_bytes_per_s)
    stages = 1 if dep is None else micro_batches(dep)
    per_stage = split_batch(running, stages)  # a pipeline's stages each multiply one
    ranks = 1 if dep is None else dep.data_parallel_size
    # with data-parallel attention each rank multiplies its own share by its own copy of the
    # dense weights (the busiest's, as fit's stage batch); the experts see every rank's
    per_rank = per_stage if dep is None else dep.rank_sequences(per_stage)
    ridge_steps = dense_ridge_steps(dep) if from_dense and dep is not None \
        else (ridge_step(acc, compute_dtype),) if dep is None \
        else (engine_ridge_step(dep, compute_dtype),)
    dealt = "" if ranks == 1 else f" ÷ {ranks} data-parallel ranks"
    steps: tuple[Step, ...] = (*ridge_steps,
             step(WEIGHTS_SHARE_LABEL,
                  "min(1, (2 × running ÷ bytes per weight) ÷ ridge)" if stages == 1
                  and ranks == 1
                  else f"min(1, (2 × ⌈running{f' ÷ {stages} micro-batches' if stages > 1 else ''}"
                  f"{dealt}⌉ ÷ bytes per weight) ÷ ridge)",
                  q("fraction", arithmetic_share(per_rank, bytes_per_weight, ridge)),
                  q("running", running, "", "--running (read it from "
                    f"{running_metric(engine)}" + (", every rank's summed" if ranks > 1
                                                  else "") + ")"),
                  *([q("micro-batch", per_stage, "", f"one in each of {stages} pipeline "
                       "stages")] if stages > 1 else []),
                  *([q("a rank's sequences", per_rank, "", f"⌈{per_stage:,}{dealt}⌉, the "
                       "busiest rank's, each rank its own copy of the weights every token "
                       "reads")] if ranks > 1 else []),
                  q("ridge", ridge, "FLOP/byte"), q("bytes per weight", bytes_per_weight, "B")),
             step("ridge batch", "⌈ridge × bytes per weight ÷ 2⌉: the first whole batch at or "
                  "past it", q("batch", first_whole_batch(batch_for_intensity(
                      ridge, bytes_per_weight))),
                  q("ridge", ridge, "FLOP/byte"), q("bytes per weight", bytes_per_weight, "B")))
    times = weight_intensity(per_rank, bytes_per_weight) / ridge
    if times > 1:  # the share above stops at 1: how far past the ridge the batch is
        steps += (step("times the ridge", "(2 × the batch each weight read serves ÷ bytes per "
                       "weight) ÷ ridge, uncapped: past 1 the weight matmuls are compute-bound",
                       q("times", times), q("batch", per_rank),
                       q("ridge", ridge, "FLOP/byte"),
                       q("bytes per weight", bytes_per_weight, "B")),)
    experts = ""
    expert_figures: dict[str, float] | None = None
    if dep is not None and dep.model.moe is not None:
        moe = dep.model.moe
        expert_ridge = ridge_point(dep.peak_at(dep.expert_compute_dtype),
                                   acc.memory_bandwidth_bytes_per_s)
        expert_batch = dep.expert_ridge_batch
        share = expert_intensity(per_stage, dep.model, dep.bytes_per_weight_split[1]) \
            / expert_ridge
        touched = expected_experts_touched(moe.num_experts, moe.experts_per_token, per_stage)
        each = per_stage * moe.experts_per_token / touched if touched else 0.0
        expert_figures = {"experts_touched": touched, "tokens_per_touched_expert": each,
                          "expert_fraction_of_arithmetic": min(1.0, share),
                          "expert_batch_to_ridge": expert_batch}
        experts = (f"the routed experts: {per_stage:,} × {moe.experts_per_token} picks touch "
                   f"{touched:,.1f} of {moe.num_experts}, {each:,.2f} tokens each: "
                   f"{fmt_share(min(1.0, share), 1)} of their arithmetic (they reach the "
                   f"ridge near batch {first_whole_batch(expert_batch):,})")  # roofline's MoE row's
        steps += (step("the routed experts' share of their arithmetic",
                       "min(1, (batch × picks ÷ experts touched) × 2 FLOP ÷ bytes per weight "
                       "÷ ridge)",
                       q("share", min(1.0, share)), q("batch", per_stage),
                       q("picks", moe.experts_per_token, "", "num_experts_per_tok"),
                       q("experts touched", touched, f"of {moe.num_experts}",
                         "1 − (1 − k/E)^B of them, expected"),
                       q("bytes per weight", dep.bytes_per_weight_split[1], "B"),
                       q("ridge", expert_ridge, "FLOP/byte")),
                  step("tokens each touched expert sees", "batch × picks ÷ experts touched",
                       q("tokens each", each), q("batch", per_stage),
                       q("picks", moe.experts_per_token), q("experts touched", touched)),
                  step("the routed experts' ridge batch", "⌈(ridge × bytes per weight ÷ 2) ÷ "
                       "(k/E)⌉: each expert sees k/E of the batch; the first whole batch at or "
                       "past it",
                       q("batch", first_whole_batch(expert_batch)),
                       q("ridge", expert_ridge, "FLOP/byte"),
                       q("bytes per weight", dep.bytes_per_weight_split[1], "B"),
                       q("k/E", moe.routed_fraction, "", "num_experts_per_tok ÷ experts")))
    whole, peak_dtypes = None, ""
    if limit is not None and not refusal and limit < running:  # the pool cannot run it: no
        steps = steps[:len(ridge_steps)]  # share to work out for it (the ridge alone), as the
        # text gives none
    elif dep is not None and context is not None and stages == 1 and running > 0 \
            and hosted is None:  # a run with host layers is priced given the host's bandwidth
        from ridgeline.floors import decode_floor

        f = decode_floor(dep, running, context)
        whole = f.fraction_of_peak
        peak_dtypes = dep.matmuls_label
        steps += (step("the whole step's peak", "step FLOPs ÷ compute time: each matmul at "
                       "its own dtype's peak, as the step is priced",
                       q("peak", f.step_peak_flops_per_s / 1e12, "TFLOP/s",
                         f"{dep.tensor_parallel_size} x {acc.id}"
                         + (" (one data-parallel rank's, whose step it is)" if ranks > 1
                            else "") + f", matmuls at {peak_dtypes}"),
                       q("FLOPs", f.flops / 1e12, "TFLOP", f"batch {running:,} at "
                         f"{context:,} tokens of context"),
                       q("compute time", f.compute_time_s * 1e3, "ms",
                         "`ridgeline decode --explain`")),
                  step("the whole step's share of peak", "step FLOPs ÷ (floor time × the "
                       "step's peak)", q("share", whole),
                       q("FLOPs", f.flops / 1e12, "TFLOP"),
                       q("floor time", f.step_time_s * 1e3, "ms", f"bound by {f.bound}"),
                       q("peak", f.step_peak_flops_per_s / 1e12, "TFLOP/s")))
    if limit is not None and context is not None and engine in SERVING_ENGINES:
        steps += (step("conversations the pool holds", "⌊the engine's KV pool at its defaults "
                       "÷ one conversation's cache⌋ (`ridgeline fit` for the breakdown)",
                       q("conversations", limit), *pool_operands,
                       *([q("data-parallel ranks", dep.data_parallel_size, "", "each its own "
                            "pool: one rank's conversations × the ranks")]
                         if dep is not None and dep.data_parallel_size > 1 else []),
                       q(settings_knob(engine, "max_model_len"), context, "tokens",
                         pool_at_context_note(engine))),)
    report = UtilizationReport(acc, compute_dtype, running, bytes_per_weight, limit, context,
                               dep.model.name if dep else None, steps,
                               context_caution(dep, context) if dep and context
                               and not context_refusal(dep, context) else "", experts, refusal,
                               stages, whole, expert_figures,
                               deployment_cross_node_caution(dep) if dep is not None
                               else cross_node_caution(tensor_parallel_size, 1, acc, engine), engine,
                               fit_free, dep.num_gpus if dep is not None else 1, dense_peak,
                               peak_dtypes, ranks, per_rank if ranks > 1 else 0,
                               identity=tuple((card_identity_json(
                                   acc, tensor_parallel_size, engine) if dep is None
                                   else identity_json(dep)).items()))
    if hosted is None:
        return report
    return replace(report, host_weight_bytes=hosted.host_weight_bytes,
                   placement=hosted.placement)
