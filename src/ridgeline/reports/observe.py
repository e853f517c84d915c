"""`ridgeline observe`: the batch you are really getting, on the roofline, and which wall."""

from __future__ import annotations

import csv
import io
import math
import statistics
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ridgeline.capacity import max_batch
from ridgeline.catalog import model_entry, normalise
from ridgeline.cost import Seq, decode_batch, mean_decode_context, step_cost
from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile
from ridgeline.errors import InputError
from ridgeline.explain import Step, q, step
from ridgeline.kvgroups import KVGroups, vllm_kv_groups
from ridgeline.memory import EngineSettings, KVPool, kv_pool
from ridgeline.observation import Observation, stats
from ridgeline.render import table
from ridgeline.roofline import (
    arithmetic_share,
    ridge_step,
)
from ridgeline.sglang_memory import sglang_max_running_requests
from ridgeline.stages import micro_batch, micro_batches
from ridgeline.units import GIB

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
class EnginePool:
    """One engine's KV pool in the units the engine counts it: vLLM's blocks
    (cache_config_info), which its hybrid allocator shares among the model's KV-cache groups
    (kvgroups.py), or a token count (SGLang's max_total_num_tokens, vLLM's start-up log).
    Gemma-3-27B's 60,000 blocks of 16 in 7 groups hold 92 sequences of 4,096 tokens
    (decode_blocks: 256 + 6 × 65 = 646 each), not the 234 that 960,000 tokens ÷ 4,096 make."""

    tokens: int  # vLLM's count of the blocks' tokens (blocks ÷ groups × block size), else the
    blocks: int | None = None  # engine's own; blocks where the engine reports them
    block_size: int = 1
    groups: KVGroups | None = None  # the blocks' groups; None: one full-attention group

    def sequences(self, context: int) -> int:
        """Sequences of ``context`` tokens the pool holds, decoding: whole blocks each."""
        if self.blocks is None:
            return self.tokens // context
        if self.groups is not None:
            return self.blocks // self.groups.decode_blocks(context)
        return self.blocks // math.ceil(context / self.block_size)

    def tokens_held(self, share: float) -> int | None:
        """The tokens a request holds when it holds ``share`` of the pool: of a pool of
        several groups, the longest context whose decode_blocks fit its share of the blocks;
        None where no full-attention group grows with the context (a window's stops)."""
        if self.groups is None or self.blocks is None:
            return max(1, round(share * self.tokens))
        if not self.groups.full:
            return None
        held = share * self.blocks
        low, high = 0, int(held) * self.groups.block_size + 1  # decode_blocks(high) > held
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if self.groups.decode_blocks(mid) <= held else (low, mid)
        return max(1, low)

    @property
    def shown(self) -> str:
        """The pool as a sentence's object: '60,000 blocks of 16 shared by 7 KV-cache groups
        (137,136 tokens as vLLM counts them)', or its tokens."""
        if self.groups is None or self.blocks is None:
            return f"{self.tokens:,} tokens"
        return (f"{self.blocks:,} blocks of {self.groups.block_size} shared by "
                f"{self.groups.count} KV-cache groups ({self.tokens:,} tokens as vLLM counts "
                "them)")

    @classmethod
    def modelled(cls, pool: KVPool) -> EnginePool:
        """The modelled pool, counted as the engine counts it."""
        return cls._of(pool.tokens, pool.blocks, pool.block_size, pool.groups)

    @classmethod
    def _of(cls, tokens: int, blocks: int, block_size: int,
            groups: KVGroups | None) -> EnginePool:
        if groups is None or (groups.count == 1 and groups.full == 1):
            return cls(tokens, blocks, block_size)
        return cls(groups.reported_tokens(blocks), blocks, groups.block_size, groups)


def reported_pool(obs: Observation, dep: Deployment) -> EnginePool | None:
    """The pool the source reports for one engine, for the model served; None where it
    reports none, or only a vLLM log's token count for a model of several KV-cache groups,
    which the log counts one way before v0.24 and another after (engines.json)."""
    if obs.pool_tokens is None:
        return None
    size = obs.pool_block_size
    if size is None:
        if obs.kind == "log" and _several_groups(dep):
            return None
        return EnginePool(int(obs.pool_tokens))
    blocks = int(obs.pool_tokens // size)
    if obs.swapped:  # V0 (it swaps; V1 does not): one block table for every layer
        return EnginePool(blocks * size, blocks, size)
    try:
        modelled = kv_pool(dep, EngineSettings()).groups
    except InputError:
        modelled = None
    groups = vllm_kv_groups(dep, size, modelled.state_blocks if modelled else 1)
    return EnginePool._of(blocks * size, blocks, size, groups)


def _several_groups(dep: Deployment) -> bool:
    groups = vllm_kv_groups(dep, 16)
    return groups is not None and groups.count > 1


LOG_POOL_UNREAD = ("the start-up log's 'GPU KV cache size' is not read as the pool: with "
                   "several KV-cache groups vLLM logs it as blocks ÷ groups × block size "
                   "before v0.24 and as maximum concurrency × max_model_len after; the pool "
                   "is modelled")


@dataclass(frozen=True)
class ObserveReport:
    obs: Observation
    deployment: Deployment
    profile: EngineProfile
    context: int
    context_source: str
    steps: tuple[Step, ...] = field(default=())

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

    def to_dict(self) -> dict[str, Any]:
        o, pool = self.obs, self.engine_pool
        return {
            "source": o.source, "kind": o.kind, "duration_s": o.duration_s,
            "running": stats(o.running), "waiting": stats(o.waiting),
            "kv_usage": stats(o.kv_usage), "preemptions": o.preemptions,
            "prompt_tok_s": o.prompt_tok_s, "generation_tok_s": o.generation_tok_s,
            "latency_ms": o.latency_ms, "engines": o.engines, "swapped": stats(o.swapped),
            "cached_prompt_share": o.cached_prompt_share,
            "pool_tokens_reported": None if pool is None else pool.tokens,
            "pool_blocks_reported": None if pool is None else pool.blocks,
            "kv_cache_groups": None if pool is None or pool.groups is None
            else pool.groups.count,
            "prompt_tokens_per_step": self.prompt_tokens_per_step,
            "batch": self.batch, "stage_batch": self.stage_batch,
            "ridge_flop_per_byte": self.ridge, "fits": self.fits,
            "fraction_of_arithmetic": self.fraction, "pool_batch": self.pool_batch,
            "context": self.context, "context_source": self.context_source,
            "wall": self.wall, "lever": self.lever,
            "predicted_itl_ms": self.predicted_itl_ms, "gap": self.gaps(), "notes": o.notes,
            "model_names": o.model_names, "caution": self.model_caution,
        }

    def text_lines(self) -> list[str]:
        o, d = self.obs, self.deployment
        lines = [f"{o.kind} from {o.source}" + (f", {o.duration_s:,.0f} s window"
                                                 if o.duration_s else "")]
        caution = self.model_caution
        if caution:
            lines.append(f"caution: {caution}")
        rows = []
        for label, values, fmt in (("running", o.running, "{:,.1f}"),
                                   ("waiting", o.waiting, "{:,.1f}"),
                                   ("swapped", o.swapped if any(o.swapped) else [], "{:,.1f}"),
                                   ("KV usage", o.kv_usage, "{:.0%}")):
            s = stats(values)
            if s:
                rows.append([label, *(fmt.format(s[k]) for k in ("mean", "p50", "p90", "max"))])
        if rows:
            lines += table(rows, ["", "mean", "p50", "p90", "max"])
        rates = []
        each = f" per engine ({o.engines} engines: {{:,.0f}} in all)" if o.engines > 1 else ""
        if o.prompt_tok_s is not None:
            cached = o.cached_prompt_share
            rates.append(f"prompt {o.prompt_tok_s:,.0f} tok/s" + each.format(
                o.prompt_tok_s * o.engines) + (f" ({cached:.0%} from the prefix cache)"
                                               if cached else ""))
        if o.generation_tok_s is not None:
            rates.append(f"generation {o.generation_tok_s:,.0f} tok/s" + each.format(
                o.generation_tok_s * o.engines))
        if o.preemptions is not None:
            rates.append(f"preemptions {o.preemptions:,.0f}" + (" (all engines)"
                                                                 if o.engines > 1 else ""))
        if rates:
            lines.append(", ".join(rates))
        for key, label in (("ttft", "TTFT"), ("itl", "ITL/TPOT"), ("e2e", "end-to-end")):
            v = o.latency_ms.get(key)
            if v:
                lines.append(f"{label:<11} " + ", ".join(f"{k} {x:,.1f} ms" for k, x in v.items()
                                                          if k != "count"))
        b, frac = self.batch, self.fraction
        lines.append("")
        if b is None:
            lines.append("no running batch in this source")
        else:
            stages = micro_batches(d)
            lines.append(f"batch {b:,.1f} against a ridge of {self.ridge:,.0f} on "
                         f"{d.gpus_label}: {frac:.1%} of the arithmetic you "
                         "are billed for" + (" in the weights every token reads (attention, "
                                             "shared layers; the routed experts see far "
                                             "fewer tokens each)" if d.model.moe else "")
                         + (f", each of {stages} pipeline stages multiplying a micro-batch of "
                            f"{self.stage_batch:,.0f}" if stages > 1 else ""))
        reported = self.engine_pool
        if self.fits:
            pool = (f"the engine's pool of {reported.shown}, as its "
                    + ("log" if o.kind == "log" else "metrics") + " report it"
                    + (f", at most its {self.seats:,} seats" if self.pool_batch == self.seats
                       else "") if reported is not None else None)
            lines.append(f"the KV pool allows {self.pool_batch:,} sequences of "
                         f"{self.context:,} tokens ({self.context_source}"
                         + (f"; {pool}" if pool else "") + ")")
        elif self.weights_overflow:
            p = self.modelled_pool
            lines.append(f"{d.model.name} does not fit on {d.gpus_label} as described: the "
                         f"weights alone, {p.weight_bytes / GIB:,.1f} GiB per GPU, exceed the "
                         f"card's {p.total_bytes / GIB:,.1f} GiB; yet the engine reports a live "
                         f"pool of {reported.shown if reported else ''}, so --num-gpus or "
                         "--weights are probably not what the server runs")
        else:
            lines.append(f"{d.model.name} does not fit on {d.gpus_label} as "
                         f"described: the KV pool holds no sequence of {self.context:,} tokens "
                         f"({self.context_source})")
        lines.append(f"wall: {self.wall} — {self.lever}")
        predicted = self.predicted_itl_ms
        gaps = self.gaps()
        if predicted:
            measured = o.latency_ms.get("itl", {}).get("mean")
            chunk = self.prompt_tokens_per_step
            line = (f"ridgeline predicts {predicted:,.1f} ms per token at this batch ({d.engine}"
                    + (f"; each step a decode of the batch and the {chunk:,} prompt tokens the "
                       "load brings per step, on average" if chunk else "") + ")")
            if "itl" in gaps and measured:
                line += f"; measured {measured:,.1f} ms: {gaps['itl']:+.0%}"
            elif measured and self.single_scrape:
                line += (f"; not set against the scrape's {measured:,.1f} ms, the mean over the "
                         "server's lifetime (scrape twice for a window)")
            lines.append(line)
        lines += [f"note: {n}" for n in o.notes]
        return lines

    @property
    def single_scrape(self) -> bool:
        """One /metrics scrape: its gauges are an instant, its histograms the server's life."""
        return self.obs.kind == "metrics" and self.obs.duration_s is None

    def measurement_rows(self, model_id: str) -> str:
        """What was observed, as rows `ridgeline calibrate` reads: none from a single scrape,
        whose lifetime latency would be paired with one instant's batch, nor for a deployment
        that does not fit as described (the row would price another than the server runs)."""
        o, d = self.obs, self.deployment
        out = io.StringIO()
        columns = ["id", "model", "weights_dtype", "kv_dtype", "gpu", "num_gpus", "tp", "batch",
                   "input_len", "output_len", "context_len", "metric", "value", "unit", "engine",
                   "source", "notes"]
        writer = csv.writer(out)
        writer.writerow(columns)
        itl = o.latency_ms.get("itl", {}).get("mean")
        b = self.batch
        if itl and b and not math.isnan(itl) and not self.single_scrape and self.fits:
            weights = d.weights.label
            if weights == "as stored":  # the checkpoint's own format, as validate names it
                stored = d.model.stored_format_map
                weights = d.weights.format_of(max(
                    stored, key=lambda c: d.bytes_by_category.get(c, 0.0))).id if stored \
                    else d.model.dtype
            writer.writerow([f"observed-{d.accelerator.id}-b{round(b)}", model_id, weights,
                             d.kv.id, d.accelerator.id, d.num_gpus, d.tensor_parallel_size,
                             max(1, round(b)), "", "", self.context, "decode_tok_s_per_user",
                             f"{1e3 / itl:.4g}", "tok/s", d.engine, f"observe {o.source}",
                             f"per-user decode speed at the observed running batch "
                             f"(context {self.context_source})"])
        return out.getvalue()


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


def context_from_kv_usage(obs: Observation, dep: Deployment) -> tuple[int, str] | None:
    """The tokens each running request holds, read off the KV cache's fill: usage × the
    pool (the engine's where it reports it, else vLLM's defaults on the deployment described)
    ÷ running requests, a pool of several KV-cache groups turned into tokens through them
    (EnginePool.tokens_held). None without both gauges, or with an idle engine."""
    if obs.engine_family == "llama.cpp" or dep.engine.startswith("llama.cpp"):
        # its usage ratio is a share of -c, which /metrics does not give: its cells in use do
        if not (obs.kv_tokens and obs.running and statistics.fmean(obs.running) >= 1):
            return None
        cells, running = statistics.fmean(obs.kv_tokens), statistics.fmean(obs.running)
        return max(1, round(cells / running)), (f"llama-server's {cells:,.0f} KV cells in use "
                                                f"over {running:,.1f} busy slots")
    if not obs.kv_usage or not obs.running:
        return None
    usage, running = statistics.fmean(obs.kv_usage), statistics.fmean(obs.running)
    if usage <= 0 or running < 1:
        return None
    pool = reported_pool(obs, dep)
    whose = "the engine's reported"
    if pool is None:
        whose = "the modelled"
        try:
            pool = EnginePool.modelled(kv_pool(dep, EngineSettings()))
        except InputError:
            return None
    if not pool.tokens:
        return None
    tokens = pool.tokens_held(usage / running)
    if tokens is None:
        return None
    return tokens, (f"from the KV cache's fill: {usage:.0%} of {whose} pool of {pool.shown} "
                    f"over {running:,.1f} running requests")


# the reported pool's KV fill is read instead of the counters' mean where it says a running
# request holds more than this many times the mean: a lifetime's mix, or a running set that
# long requests dominate (each stays in it for as many steps as it has output tokens)
FILL_OVER_MEAN = 2.0


def observe_report(obs: Observation, dep: Deployment, profile: EngineProfile,
                   context: int | None) -> ObserveReport:
    if obs.kind == "log" and obs.pool_tokens is not None and reported_pool(obs, dep) is None \
            and LOG_POOL_UNREAD not in obs.notes:
        obs.notes.append(LOG_POOL_UNREAD)
    if context is None:
        held = context_from_kv_usage(obs, dep)
        if obs.mean_prompt_tokens is not None and obs.mean_output_tokens is not None:
            context = mean_decode_context(obs.mean_prompt_tokens, obs.mean_output_tokens)
            source = "mean prompt + half the mean output, from the source"
            counted = ObserveReport(obs, dep, profile, context, source)
            if held is not None and not counted.weights_overflow:
                # the live fill of the pool says what each running request holds where the
                # counters' mean cannot be right: the running batch could not be held at it
                # (shared prefixes, cached once, counted in every prompt), or the fill of the
                # pool the engine reports holds far more a request (a mix the mean misreads:
                # a full pool beside one "allowing" several times the batch). A modelled
                # pool's fill is only as good as the deployment described, so a mere
                # disagreement with it is not read as the counters' fault
                if (obs.batch or 0.0) > counted.pool_batch:
                    source = (f"{held[1]}; the counters' mean of {context:,} tokens would hold "
                              f"only {counted.pool_batch:,} of the {obs.batch:,.1f} running")
                    context = held[0]
                elif counted.engine_pool is not None and held[0] > FILL_OVER_MEAN * context:
                    source = (f"{held[1]}; {held[0] / context:,.1f}× the counters' mean of "
                              f"{context:,} tokens")
                    context = held[0]
        elif held is not None:
            context, source = held
        else:
            context, source = 2000, "assumed: pass --context"
    else:
        source = "given"
    report = ObserveReport(obs, dep, profile, context, source)
    reported = report.engine_pool
    b = report.batch
    steps: tuple[Step, ...] = ()
    if b is not None:
        stages = micro_batches(dep)
        steps = (ridge_step(dep.accelerator, dep.dense_compute_dtype),
                 step("share of the arithmetic in use",
                      "(2 × batch ÷ bytes per weight) ÷ ridge" if stages == 1 else
                      f"(2 × ⌈batch ÷ {stages} micro-batches⌉ ÷ bytes per weight) ÷ ridge",
                      q("fraction", report.fraction or 0.0),
                      q("batch", b, "", "running requests, mean over the window"),
                      *([q("micro-batch", report.stage_batch or 0, "",
                           f"one in each of {stages} pipeline stages")] if stages > 1 else []),
                      q("bytes per weight", dep.bytes_per_weight_split[0], "B",
                        "the weights every token reads" + (" (all but the routed experts)"
                                                           if dep.model.moe else "")),
                      q("ridge", report.ridge, "FLOP/byte")),
                 step("tokens each running request holds", "as its source says",
                      q("context", context, "tokens", source)),
                 step("sequences the pool holds", "the pool's tokens ÷ the context (vLLM: "
                      "whole blocks a sequence in each KV-cache group; at most its seats)",
                      q("pool batch", report.pool_batch),
                      q("pool", reported.tokens if reported is not None
                        else report.modelled_pool.tokens,
                        "tokens", f"as the engine reports it: {reported.shown}"
                        if reported is not None
                        else "modelled: the engine's defaults on this deployment"),
                      q("context", context, "tokens"),
                      q("seats", report.seats, "", "max_num_seqs (SGLang: "
                        "max_running_requests)")))
        predicted = report.predicted_itl_ms
        if predicted is not None:
            steps += (step("the engine's step at this batch", "step_cost(the batch's decodes at "
                           "the context + the prompt tokens a step carries), one micro-batch",
                           q("predicted ITL", predicted, "ms", f"{profile.engine} profile"),
                           q("batch", b, "", "running requests, mean over the window"),
                           q("context", context, "tokens"),
                           q("prompt tokens per step", report.prompt_tokens_per_step, "",
                             "prompt tok/s ÷ generation tok/s × batch, less prefix-cache "
                             "hits, within the step budget")),)
    return ObserveReport(obs, dep, profile, context, source, steps)
