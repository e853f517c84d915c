"""The article's floors: a decode step and a prefill, bounded by FLOPs or by bytes.

step time = max(FLOPs ÷ peak, (weight bytes read + KV bytes read) ÷ bandwidth).
Llama-3.1-70B at one byte per weight on one H100: 70.5 GB ÷ 3.35 TB/s = 21 ms, 48 tok/s.
The FLOPs and bytes are step_cost's (one owner per formula), summed over the step
(step_work.py); the floor divides the totals once, with no engine inefficiency and no
overhead. N GPUs in tensor parallel split FLOPs, bytes and memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

from ridgeline.attention_span import keys_read
from ridgeline.cost import INDEXER_OP, Seq, decode_batch, decode_kv_tokens, served_footprint
from ridgeline.deployment import Deployment, require_deployment
from ridgeline.expert_ranks import (
    busiest_rank_physical_experts,
    busiest_rank_routed_experts,
    ep_rank_experts,
    trivial_layout_routed_experts,
)
from ridgeline.explain import Quantity, Step, q, step
from ridgeline.kvcache import KVFootprint, indexer_bytes_per_token
from ridgeline.layouts import CHUNKED, FULL, SLIDING
from ridgeline.llamacpp_batching import (
    llamacpp_n_batch,
    llamacpp_n_ubatch,
    pipeline_span,
    pipelined_stages,
)
from ridgeline.moe import expected_experts_touched
from ridgeline.params import count_params
from ridgeline.quantization import ROUTED
from ridgeline.raw_fit import FitCheck, batch_fit
from ridgeline.record_views import headline_repr
from ridgeline.sparse_attention import sparse_latents_read, sparse_topk
from ridgeline.stages import micro_batch, micro_batches
from ridgeline.step_work import (
    HOST_LINK_BOUND,
    HOST_MEMORY_BOUND,
    Work,
    head_params,
    matmul_weights_per_token,
    step_work,
)
from ridgeline.units import GB, fmt_decimal_bytes, plural, require_batch, require_count

if TYPE_CHECKING:
    from ridgeline.capacity import EngineSeats

# What a floor's ``bound`` says binds it, the four strings it takes: its FLOPs at peak, its
# bytes at the GPUs' bandwidth, or (weights in host memory, llama.cpp's offload) the host's
# memory or the link a step copies weights over
COMPUTE_BOUND = "compute"
MEMORY_BOUND = "memory bandwidth"


def bound_label(bound: str) -> str:
    """A table column's one word for what bounds a step: compute, memory, host, link."""
    return "link" if bound == HOST_LINK_BOUND else bound.split()[0]


def repeated_words(dep: Deployment) -> str:
    """What the 'repeated on the TP ranks' FLOPs hold (step_work.repeated_matmul_flops)."""
    return ("what each tensor-parallel rank keeps whole and runs on every token, beyond one "
            f"copy: routers, MLA's down-projections{_indexer_words(dep)}, K/V heads past "
            "their count" + (
                "; and, under expert parallelism, the busiest rank's extra share of the "
                "routed tokens, counted on every rank" if dep.expert_parallel else ""))


def _indexer_words(dep: Deployment) -> str:
    """', the sparse-attention indexer' where the model has one (kept whole on every rank)."""
    return ", the sparse-attention indexer" if sparse_topk(dep.model) is not None else ""


def _activation_words(dep: Deployment) -> str:
    """What a step's activation bytes hold, a sparse model's indexer logits among them
    (cost.indexer_logit_traffic_bytes)."""
    return ("each layer's inputs and outputs, attention's queries and outputs, the logits"
            + (", and the indexer's fp32 logit of each key it scores, written and read back "
               "by its top-k" if sparse_topk(dep.model) is not None else ""))


def _indexer_flop_words(dep: Deployment) -> str:
    """What a sparse model's attention FLOPs hold besides QKᵀ and PV (cost.indexer_flops)."""
    topk = sparse_topk(dep.model)
    if topk is None:
        return ""
    return (f", at most index_topk {topk:,} keys a query, and the indexer's scores of every "
            "cached key (2 × index_n_heads × index_head_dim a pair)")


def _flop_split(dep: Deployment, work: Work, count: str) -> list[Quantity]:
    """The compute time's FLOPs and the terms they add: the weights' matmuls, attention over
    the cache and the rest (a recurrent layer's scan, a LoRA's), so the step's sum repeats
    (Llama-3.1-8B, batch 32 at 16,000 tokens: 480.3 + 268.5 GFLOP = 0.7488 TFLOP)."""
    rest = work.flops - work.weight_flops - work.attention_flops
    return [q("FLOPs", work.flops / 1e12, "TFLOP"),
            q("weight matmuls", (work.weight_flops - work.repeated_flops) / 1e12, "TFLOP",
              f"{count} × 2 × the weights each token passes (the LM head's included)"),
            *([q("repeated on the TP ranks", work.repeated_flops / 1e12, "TFLOP",
                 repeated_words(dep))] if work.repeated_flops else []),
            q("attention FLOPs", work.attention_flops / 1e12, "TFLOP",
              "QKᵀ and PV over each sequence's cache" + _indexer_flop_words(dep)),
            *([q("the rest", rest / 1e12, "TFLOP", "the other operators: recurrent state "
                 "updates, LoRA adapters")]
              if abs(rest) > 1e-9 * work.flops else [])]


def _lora_quantity(work: Work, name: str = "LoRA adapters") -> list[Quantity]:
    """The --explain line for the LoRA adapters' bytes, where they run."""
    if not work.lora_bytes:
        return []
    return [q(name, work.lora_bytes / GB, "GB",
              "the active adapters' A and B, punica's shrink input and buffer and the output "
              "its expand adds into (lora_step.py)")]


@dataclass(frozen=True, kw_only=True)
class _Floor:
    """What a decode step's floor and a prefill's share: a time set by whichever of compute
    and memory takes longer, plus (partial offload) the time on weights in host memory,
    which the GPU waits for; the memory check; the --explain steps."""

    compute_time_s: float  # the FLOPs at the peak of each matmul's dtype, over all GPUs
    memory_time_s: float  # the bytes read at the GPUs' memory bandwidth
    fit: FitCheck = field(repr=False)
    steps: tuple[Step, ...] = field(repr=False)  # --explain's worked steps
    host_time_s: float = 0.0
    host_bound: str = HOST_MEMORY_BOUND
    # the deployment it was priced on, for the engine's check (engine_runs); None: built by hand
    deployment: Deployment | None = field(default=None, repr=False, compare=False)

    @property
    def time_s(self) -> float:
        """The floor in seconds: the slower of compute and memory, plus the host's time
        (Llama-3.1-8B on one H100, batch 32 × 2,000 tokens: max(0.52, 7.02) ms = 7.02 ms)."""
        return max(self.compute_time_s, self.memory_time_s) + self.host_time_s

    @property
    def fits(self) -> bool:
        """Whether the weights and this batch's cache fit the GPUs' memory (``fit``, raw
        capacity before engine overheads). Where not, the times are a step's arithmetic
        only: no engine runs it, and decode's JSON gives its speeds as null."""
        return self.fit.fits

    @property
    def does_not_fit(self) -> str:
        """Why the point cannot run, as decode says it ("does not fit: … short by 8.6 GB"),
        or "" where it fits (FitCheck.does_not_fit)."""
        return self.fit.does_not_fit

    @cached_property
    def engine_seat(self) -> EngineSeats | None:
        """What the deployment's engine, started at its defaults (its default length, the
        model's context; vllm serve's pool), runs of this point's context
        (engine_runs.default_seat); None for a floor built without a deployment."""
        from ridgeline.engine_runs import default_seat

        dep = self.deployment
        return None if dep is None else default_seat(dep, self._context_tokens)

    @property
    def _context_tokens(self) -> int:
        raise NotImplementedError

    @property
    def _sequences(self) -> int:
        raise NotImplementedError

    @property
    def engine_runs(self) -> bool:
        """Whether the engine, started at its defaults, runs this point: it fits, and the
        engine admits its context and seats its batch (engine_runs.seated), as the CLI's
        --json ``engine_runs`` says. Llama-2-7B (4,096 positions) under vLLM on an H100 at
        8,000 tokens fits in memory, but vLLM refuses the length: False, so its ``_if_fits``
        speeds are memory's answer only. With no engine named, vLLM's check."""
        from ridgeline.engine_runs import seated

        return seated(self.fits, self.engine_seat, self._sequences)

    @property
    def engine_none_code(self) -> str:
        """Why not, for a program, as --json's expected_none_code: does_not_fit,
        over_engine_pool or engine_runs_none; "" where it runs."""
        from ridgeline.engine_runs import none_code

        return none_code(self.fits, self.engine_seat, self._sequences)

    @property
    def bound(self) -> str:
        """What sets the time, one of four strings (exported as ridgeline's COMPUTE_BOUND,
        MEMORY_BOUND, HOST_MEMORY_BOUND, HOST_LINK_BOUND): "compute", "memory bandwidth",
        or with weights in host memory "host memory" or "the host link" (the 8B decode
        above: "memory bandwidth")."""
        if self.host_time_s > max(self.compute_time_s, self.memory_time_s):
            return self.host_bound
        return COMPUTE_BOUND if self.compute_time_s > self.memory_time_s else MEMORY_BOUND


@dataclass(frozen=True, repr=False)
class DecodeFloor(_Floor):
    """One decode step's floor (``decode_floor``): ``batch`` sequences, each at ``context``
    tokens, make one token each in ``step_time_s`` seconds, bound by ``bound``; no engine
    overhead. Llama-3.1-8B bf16 on one H100, batch 32 × 2,000: 7.02 ms (memory bandwidth:
    15.0 GB of weights + 8.40 GB of KV cache at 3.35 TB/s), 142.5 tok/s per user, 4,560 in
    all. ``fits`` is False where the weights and cache exceed memory; ``*_if_fits`` are None
    then, as ``decode --json`` gives null."""

    batch: int
    context: int
    flops: float
    weight_bytes_read: float
    kv_bytes_read: float
    activation_bytes: float
    lora_bytes: float = 0.0  # --enable-lora's part (Work.lora_bytes)

    def __repr__(self) -> str:
        return headline_repr(self, ("batch", "context", "step_time_s", "bound",
                                    "per_user_tok_s", "aggregate_tok_s", "fits"))

    @property
    def _context_tokens(self) -> int:
        return self.context

    @property
    def _sequences(self) -> int:
        return self.batch

    @property
    def engine_none_reason(self) -> str:
        """Why the engine, started at its defaults, does not run this step, in decode's words
        (--json's expected_none_reason: 'vllm refuses --max-model-len 8,000, past
        llama-2-7b's 4,096 positions …'); "" where it runs."""
        from ridgeline.engine_runs import decode_none_reason

        seat, dep = self.engine_seat, self.deployment
        if seat is None or dep is None:
            return "" if self.fits else self.does_not_fit
        return decode_none_reason(self.fit, seat, self.batch, self.context, dep.engine)

    @property
    def step_time_s(self) -> float:
        """Seconds a decode step takes at the floor (``time_s``): 7.02e-3 for the 8B above."""
        return self.time_s

    @property
    def per_user_tok_s(self) -> float:
        """Tokens a second each sequence gets, 1 ÷ step_time_s: 142.5 for the 8B above; the
        arithmetic even where the batch does not fit (per_user_tok_s_if_fits: None then)."""
        return 1.0 / self.step_time_s

    @property
    def aggregate_tok_s(self) -> float:
        """Tokens a second over the batch, batch ÷ step_time_s: 4,560 for the 8B above."""
        return self.batch / self.step_time_s

    @property
    def per_user_tok_s_if_fits(self) -> float | None:
        """per_user_tok_s where the batch fits, else None: decode --json's per_user_tok_s
        (Llama-3.1-70B fp8 on one H100 at batch 32 × 2,000 tokens: None, not 36.4)."""
        return self.per_user_tok_s if self.fits else None

    @property
    def aggregate_tok_s_if_fits(self) -> float | None:
        """aggregate_tok_s where the batch fits, else None: decode --json's aggregate_tok_s."""
        return self.aggregate_tok_s if self.fits else None

    @property
    def intensity_flop_per_byte(self) -> float:
        return self.flops / (self.weight_bytes_read + self.kv_bytes_read + self.activation_bytes
                             + self.lora_bytes)

    @property
    def step_peak_flops_per_s(self) -> float:
        """The peak the step's FLOPs reach together, each matmul at its own dtype's as the
        step is priced (Deployment.compute_dtype_of; attention at its cache's): FLOPs ÷ compute
        time, over all the GPUs. DeepSeek-V3 on 8 H200s, batch 64 at 8,192 tokens: its fp8
        matmuls beside a bf16 router, LM head and QKᵀ·PV give 1,215 TFLOP/s a GPU, not fp8's
        1,979."""
        return self.flops / self.compute_time_s if self.compute_time_s else 0.0

    @property
    def fraction_of_peak(self) -> float:
        """The whole step's share of peak: its FLOPs ÷ (step time × the peak they run at),
        i.e. the share of the step its arithmetic keeps the tensor cores busy (compute time
        ÷ step time; 1 where compute bounds it)."""
        peak = self.step_peak_flops_per_s
        return self.flops / (self.step_time_s * peak) if peak else 0.0


def floor_time_s(dep: Deployment, batch: list[Seq]) -> float:
    """Any step's floor, as decode_floor times one: the slower of its arithmetic at peak and
    its bytes at bandwidth, plus what the host moves."""
    work = step_work(dep, batch)
    return max(work.paced_flops / dep.peak_flops_per_s,
               work.gpu_bytes / dep.bandwidth_bytes_per_s) + work.host_time_s


ATTENTION_PEAK_NOTE = ("QKᵀ at fp32 accumulate, the catalog's rate (llama.cpp asks its "
                       "scores for fp32), PV at the step's: the two blended by their FLOPs")


def _mixed_compute_step(dep: Deployment, work: Work, compute_s: float, rank: str,
                        busy: float = 1.0, busy_note: str = "") -> Step:
    """--explain's compute time where matmuls run at several dtypes: each dtype's FLOPs ÷ its
    own peak, summed (nvidia/Qwen3.6-35B-A3B-NVFP4 on an H200, batch 64 at 2,000 tokens:
    0.2420 TFLOP ÷ 989.4 TFLOP/s + 0.1642 TFLOP ÷ 1,979 TFLOP/s = 0.2446 + 0.0830 ms). A
    prompt's peaks count × ``busy`` pipeline stages (busy_stages), ``busy_note`` saying so."""
    acc, tp = dep.accelerator, dep.tensor_parallel_size
    terms: list[Quantity] = []
    for share in work.flops_by_dtype:
        peak = share.peak_flops_per_s * tp * busy
        names = ", ".join("QKᵀ and PV" if n == "attention" else
                          "the indexer's scores" if n == INDEXER_OP else n for n in share.ops)
        note = ATTENTION_PEAK_NOTE if share.label else dep.peak_note_at(share.dtype)
        terms += [q(f"{share.name} FLOPs", share.flops / 1e12, "TFLOP",
                    (f"the step's dtype: {names}" if share.name == dep.compute_dtype
                     else names) or "none"),
                  q(f"peak {share.name}", peak / 1e12, "TFLOP/s",
                    f"{tp} x {acc.id}{rank}: "  # as the bandwidth is counted
                    + "; ".join(filter(None, (acc.source_of("peak_flops"), note))) + busy_note),
                  q(f"{share.name} time", share.flops / peak * 1e3, "ms")]
    return step("compute time", " + ".join(f"{s.name} FLOPs ÷ peak {s.name}"
                                           for s in work.flops_by_dtype),
                q("compute time", compute_s * 1e3, "ms"), *terms)


def decode_floor(dep: Deployment, batch: int, context: int,
                 explain: bool = True) -> DecodeFloor:
    """One decode step for ``batch`` sequences, each with ``context`` tokens cached
    (``trip_floor``); under a serving engine's pipeline parallelism the batch runs as
    micro-batches, one in each stage, so a token's step is one micro-batch's trip through
    every stage (the floor of ⌈batch ÷ PP⌉ sequences) while the memory check is the whole
    batch's and ``aggregate_tok_s`` the whole batch over the trip, as decode prices it:
    Llama-3.1-70B in bf16 on 2 stages of 2 H100s, batch 32 at 2,000 tokens, a trip of 16
    steps in 22.3 ms, not the whole batch's 23.9.
    ``batch`` and ``context`` are whole numbers (an int, numpy's int64 or 8.0); a fraction
    is refused, and so is a batch past MAX_BATCH (--batch's cap) or a ``dep`` that is no
    Deployment."""
    dep = require_deployment(dep)
    batch = require_batch(batch)
    context = require_count(context, "context length")
    micro = micro_batch(dep, batch)
    trip = trip_floor(dep, micro, context, explain, fit_batch=batch)
    if micro == batch:
        return trip
    return replace(trip, batch=batch, steps=() if not explain else (
        step("micro-batch", "⌈batch ÷ pipeline stages⌉: each stage multiplies one at a time, "
             "the others in flight in the other stages; the steps below are one "
             "micro-batch's trip through every stage", q("micro-batch", micro),
             q("batch", batch), q("stages", micro_batches(dep))),
        *(st for st in trip.steps if st.label != "aggregate speed"),
        step("aggregate speed", "batch ÷ a micro-batch's trip (every stage busy with one)",
             q("aggregate", batch / trip.step_time_s, "tok/s"), q("batch", batch),
             q("trip", trip.step_time_s * 1e3, "ms"))))


def trip_floor(dep: Deployment, batch: int, context: int, explain: bool = True,
               fit_batch: int | None = None) -> DecodeFloor:
    """One pass of ``batch`` sequences, each with ``context`` tokens cached, through every
    stage (decode_floor's step, but for pipeline parallelism's micro-batches; its memory
    check ``fit_batch``'s, the whole batch's, where given);
    ``explain`` False leaves its --explain steps out (the same figures, no words: the page
    prices 11 batches at 5 contexts for each of its hundreds of combinations and shows none).
    Llama-3.1-70B, fp8 weights, on one H100: batch 1 at 2,000 tokens steps in 21.3 ms (47
    tok/s); batch 32 takes 27.5 ms, but its 21.0 GB of cache beside 72.7 GB of weights does
    not fit in 85.0 GB, so ``fits`` is False and ``per_user_tok_s_if_fits`` None (the floor's
    arithmetic stays in ``step_time_s`` and ``per_user_tok_s``, as decode's text shows it).
    ``batch`` and ``context`` are whole numbers (an int, numpy's int64 or 8.0); a fraction
    is refused."""
    batch = require_count(batch, "batch")
    context = require_count(context, "context length")
    fit_batch = batch if fit_batch is None else fit_batch
    footprint = served_footprint(dep, context)  # states as the step reads them
    work = step_work(dep, decode_batch(batch, context))
    compute_s = work.paced_flops / dep.peak_flops_per_s
    memory_s = work.gpu_bytes / dep.bandwidth_bytes_per_s
    fit = batch_fit(dep, fit_batch, footprint.stored_bytes(dep.kv_replication))
    floor = DecodeFloor(batch, context, work.flops, work.weight_bytes, work.kv_bytes,
                        work.other_bytes, work.lora_bytes, compute_time_s=compute_s,
                        memory_time_s=memory_s, fit=fit, steps=(),
                        host_time_s=work.host_time_s, host_bound=work.host_bound,
                        deployment=dep)
    if not explain:
        return floor
    acc = dep.accelerator
    step_s = floor.time_s
    ranks = dep.data_parallel_size  # with data-parallel attention the step is one rank's
    count = "batch" if ranks == 1 else "a rank's sequences"
    rank = "" if ranks == 1 else " (one data-parallel rank's)"
    flop_terms = _flop_split(dep, work, count)
    steps = (
        _weight_step(dep, work, batch) if ranks == 1 else _rank_weight_step(dep, work, batch),
        _kv_step(dep, work, footprint, batch),
        step("memory time", "(weights + KV + activations" + (
             " + LoRA adapters" if work.lora_bytes else "") + (
             " − what the host reads or copies" if work.host_bytes or work.link_bytes else "")
             + ") ÷ bandwidth",
             q("memory time", memory_s * 1e3, "ms"), q("bytes", work.gpu_bytes / GB, "GB"),
             q("of which activations", work.other_bytes / GB, "GB", _activation_words(dep)),
             *_lora_quantity(work, "of which LoRA adapters"),
             *([q("host's share", (work.host_bytes + work.link_bytes
                                   if work.hbm_spared_bytes is None else work.hbm_spared_bytes)
                  / GB, "GB",
                  ("the weights read that --cpu-offload-gb keeps in host memory: read over "
                   "the host link (host time below)" if dep.cpu_offload.in_place else
                   "none: V0 copies the offloaded layers over the host link (host time "
                   "below) into HBM, and the kernels read them there")
                  if dep.cpu_offload is not None else
                  "the layers in host memory: read by the CPU (host time below)")]
               if work.host_bytes or work.link_bytes else []),
             q("bandwidth", dep.bandwidth_bytes_per_s / 1e12, "TB/s",
               f"{dep.tensor_parallel_size} x {acc.id}{rank}: "
               f"{acc.source_of('memory_bandwidth_bytes_per_s')}" + (
                   f"; the step passes {dep.pipeline_parallel_size} stages of layers one "
                   "after another" if dep.pipeline_parallel_size > 1 else ""))),
        step("compute time", "(" + " + ".join(t.name for t in flop_terms[1:]) + ") ÷ peak",
             q("compute time", compute_s * 1e3, "ms"), *flop_terms,
             q(f"peak {dep.compute_dtype}", dep.peak_flops_per_s / 1e12, "TFLOP/s",
               f"{dep.tensor_parallel_size} x {acc.id}{rank}: "  # as the bandwidth is counted
               + "; ".join(filter(None, (acc.source_of("peak_flops"), dep.peak_note)))))
        if work.paced_flops == work.flops else _mixed_compute_step(dep, work, compute_s, rank),
        *_host_steps(dep, work),
        step("step time", "max(compute time, memory time)" + (
             " + host time" if work.host_bytes or dep.cpu_offload else ""),
             q("step", step_s * 1e3, "ms"),
             q("compute time", compute_s * 1e3, "ms"), q("memory time", memory_s * 1e3, "ms"),
             *([q("host time", work.host_time_s * 1e3, "ms")]
               if work.host_bytes or dep.cpu_offload else [])),
        step("per-user speed", "1 ÷ step time", q("per user", 1 / step_s, "tok/s"),
             q("step", step_s * 1e3, "ms")),
        step("aggregate speed", "batch ÷ step time", q("aggregate", batch / step_s, "tok/s"),
             q("batch", batch), q("step", step_s * 1e3, "ms")),
    )
    return replace(floor, steps=steps)


@dataclass(frozen=True, repr=False)
class PrefillFloor(_Floor):
    """A prompt's floor (``prefill_floor``), the TTFT lower bound: ``batch`` prompts of
    ``prompt_len`` tokens take ``time_s`` seconds, bound by ``bound`` (a long prompt is
    compute-bound: 2 FLOPs for each weight a token passes, at peak). Llama-3.1-8B bf16 on
    one H100, one 2,048-token prompt: 29.7 TFLOP at 989.4 TFLOP/s, 30.0 ms (compute), 68,252
    tokens a second."""

    prompt_len: int
    batch: int
    flops: float
    bytes_moved: float
    weight_bytes_read: float

    def __repr__(self) -> str:
        return headline_repr(self, ("prompt_len", "batch", "time_s", "bound", "tokens_per_s",
                                    "fits"))

    @property
    def _context_tokens(self) -> int:
        return self.prompt_len

    @property
    def _sequences(self) -> int:
        return self.batch

    @property
    def engine_none_reason(self) -> str:
        """Why the engine, started at its defaults, does not run these prompts at once, in
        prefill's words (--json's expected_none_reason); "" where it runs."""
        from ridgeline.engine_runs import prefill_none_reason

        seat, dep = self.engine_seat, self.deployment
        if dep is None:
            return "" if self.fits else self.does_not_fit
        return prefill_none_reason(self.fit, seat, self.batch, self.prompt_len, dep.engine)

    @property
    def tokens_per_s(self) -> float:
        """Prompt tokens a second, batch × prompt_len ÷ time_s."""
        return self.batch * self.prompt_len / self.time_s

    @property
    def intensity_flop_per_byte(self) -> float:
        """Over every byte moved, activations included."""
        return self.flops / self.bytes_moved

    @property
    def weight_intensity_flop_per_byte(self) -> float:
        """FLOPs per byte of weights read: the article's '≈ prompt length'."""
        return self.flops / self.weight_bytes_read


def busy_stages(dep: Deployment, tokens: int, ubatch: int | None = None,
                chunk_tokens: int | None = None, n_batch: int | None = None) -> float:
    """The pipeline stages a prompt keeps busy on average: where llama.cpp pipelines its
    layer split (llamacpp_batching.pipelined_stages) the ubatches of one llama_decode call (k
    of them) over pp stages, pp·k ÷ (k + pp − 1); one ubatch, one stage, or a split llama.cpp
    does not pipeline (-ngl short of every block, --n-cpu-moe) passes them one at a time.
    vLLM V1 sends a prompt's next chunk (``chunk_tokens``, its step budget) while the last is
    in the pipeline (chunked_prefill.pipelined_steps_s): k chunks, the same pp·k ÷ (k + pp − 1)."""
    # SGLang, TensorRT-LLM (and vLLM V0): a micro-batch passes the stages one after another
    # (a request's next chunk waits for its last to leave the pipeline); the other requests'
    # batches in flight raise throughput, not this prompt's TTFT
    pp = dep.pipeline_parallel_size
    if chunk_tokens and pp > 1 and tokens > chunk_tokens:
        from ridgeline.vllm_memory import one_pool  # the simulator's rule for it

        if one_pool(dep.engine, dep.state_engine_version):
            k = tokens / chunk_tokens  # a short last chunk counts for its share
            return k / pipeline_span(k, 1.0, pp)
    stages = pipelined_stages(dep)
    if stages <= 1:
        return 1.0
    size = ubatch or llamacpp_n_ubatch()  # a short last ubatch counts for its share
    k = max(1.0, min(tokens / size, max(1, (n_batch or llamacpp_n_batch()) // size)))
    return k / pipeline_span(k, 1.0, stages)  # k ubatch-times of work over the span


def prefill_floor(dep: Deployment, prompt_len: int, batch: int = 1,
                  ubatch: int | None = None, chunk_tokens: int | None = None,
                  n_batch: int | None = None) -> PrefillFloor:
    """Prefill ``batch`` prompts of ``prompt_len`` tokens in one pass: the TTFT floor. Over
    a layer split llama.cpp pipelines (``busy_stages``) the ubatches (``ubatch`` tokens,
    llama.cpp's -ub) of one call (``n_batch`` tokens, -b: 2,048 by default) are pipelined, a
    stage apart: with k of them over pp stages, pp·k ÷ (k + pp − 1) of the GPUs are busy on
    average; over one it does not pipeline, one. Llama-3.1-8B bf16 on one H100, one prompt
    of 2,048 tokens: 29.7 TFLOP at 989.4 TFLOP/s, a 30.0 ms floor, compute-bound."""
    dep = require_deployment(dep)
    prompt_len = require_count(prompt_len, "prompt length")
    batch = require_batch(batch)  # at most MAX_BATCH, as --batch: the list below is built
    footprint = served_footprint(dep, prompt_len)  # states as the step reads them
    work = step_work(dep, [Seq(prompt_len, 0)] * batch)
    stages = busy_stages(dep, prompt_len * batch, ubatch, chunk_tokens, n_batch)
    # the stages' arithmetic overlaps; their reads do not lower the floor: the first ubatch
    # alone passes every stage's weights one stage after another (and each further ubatch
    # reads them again), so the weights once at one stage's bandwidth stay a lower bound
    peak, bandwidth = dep.peak_flops_per_s * stages, dep.bandwidth_bytes_per_s
    compute_s = work.paced_flops / peak
    memory_s = work.gpu_bytes / bandwidth
    fit = batch_fit(dep, batch, footprint.stored_bytes(dep.kv_replication))
    body = matmul_weights_per_token(dep)
    matmuls = 2 * body * batch * prompt_len
    head = 2 * head_params(dep) * batch
    repeated = work.repeated_flops
    tp = dep.tensor_parallel_size
    single = work.paced_flops == work.flops  # else each dtype's FLOPs ÷ its own peak
    ranks = dep.data_parallel_size
    rank = "" if ranks == 1 else " (one data-parallel rank's)"
    in_tp = (" in tensor parallel" if tp > 1 else "") + rank
    busy = _stages_peak_note(dep, stages)
    flops_step = _rank_prefill_flops(dep, work, prompt_len, batch) if ranks > 1 else \
        step("FLOPs", "2 × params per token × tokens + 2 × LM head params × prompts + "
             + ("the matmuls the TP ranks repeat + " if repeated else "")
             + "attention and the rest", q("FLOPs", work.flops / 1e12, "TFLOP"),
             q("tokens", batch * prompt_len),
             q("params per token", body / 1e9, "B params",
               "the matmuls' weights a token passes, without the LM head and the norms"),
             q("LM head params", head_params(dep) / 1e9, "B params",
               "on each prompt's last token"), q("prompts", batch),
             *([q("repeated on the TP ranks", repeated / 1e12, "TFLOP", repeated_words(dep))]
               if repeated else []),
             q("attention and the rest", (work.flops - matmuls - head - repeated) / 1e12,
               "TFLOP", "causal QKᵀ and PV over the prompt" + _indexer_flop_words(dep)
               + ", the recurrent state"
               + (", the LoRA adapters' shrink and expand" if work.lora_bytes else "")))
    steps = (
        flops_step,
        step("bytes", "weights read once + KV written and read back + activations"
             + (" + LoRA adapters" if work.lora_bytes else ""),
             q("bytes", work.bytes / GB, "GB"),
             q("weights read", work.weight_bytes / GB, "GB", _weights_read_source(dep, work)),
             q("KV traffic", work.kv_bytes / GB, "GB", "each token's K and V written, then "
               "read by the queries after it"),
             q("activations", work.other_bytes / GB, "GB", _activation_words(dep)),
             *_lora_quantity(work)),
        step("weight intensity", "FLOPs ÷ weight bytes read",
             q("intensity", work.flops / work.weight_bytes, "FLOP/byte"),
             q("FLOPs", work.flops / 1e12, "TFLOP"),
             q("weights read", work.weight_bytes / GB, "GB")),
        *_host_steps(dep, work),
        *([] if single else [_mixed_compute_step(dep, work, compute_s, in_tp, stages, busy)]),
        step("prefill time", ("max(FLOPs ÷ peak, bytes ÷ bandwidth)" if single else
                              "max(compute time, bytes ÷ bandwidth)")
             + (" + host time" if work.host_bytes or dep.cpu_offload else ""),
             q("time", (max(compute_s, memory_s) + work.host_time_s) * 1e3, "ms"),
             q("FLOPs", work.flops / 1e12, "TFLOP", "the step above") if single else
             q("compute time", compute_s * 1e3, "ms", "the step above"),
             # the bytes the GPUs' memory moves: the step above's, less what the host serves
             q("bytes", work.gpu_bytes / GB, "GB", "the step above" if work.gpu_bytes ==
               work.bytes else "the step above's, less the bytes the host serves"),
             *([q(f"peak {dep.compute_dtype}", peak / 1e12, "TFLOP/s",
                  f"{tp} x {dep.accelerator.id}{in_tp}: "
                  f"{dep.accelerator.source_of('peak_flops')}"
                  + (f"; {dep.peak_note}" if dep.peak_note else "") + busy)]
               if single else []),
             q("bandwidth", bandwidth / 1e12, "TB/s",
               f"{tp} x {dep.accelerator.id}{rank}: "  # as the peak is counted
               + dep.accelerator.source_of("memory_bandwidth_bytes_per_s")
               + ("; one stage at a time" if stages > 1 else ""))),
    )
    time_s = max(compute_s, memory_s) + work.host_time_s
    steps += (
        step("throughput", "prompts × prompt length ÷ prefill time",
             q("throughput", batch * prompt_len / time_s, "tok/s"), q("prompts", batch),
             q("prompt length", prompt_len, "tokens"), q("time", time_s * 1e3, "ms")),
        step("intensity over all bytes", "FLOPs ÷ bytes",
             q("intensity", work.flops / work.bytes, "FLOP/byte"),
             q("FLOPs", work.flops / 1e12, "TFLOP"), q("bytes", work.bytes / GB, "GB")),
    )
    return PrefillFloor(prompt_len, batch, work.flops, work.bytes, work.weight_bytes,
                        compute_time_s=compute_s, memory_time_s=memory_s, fit=fit,
                        steps=steps, host_time_s=work.host_time_s, host_bound=work.host_bound,
                        deployment=dep)


def _stages_peak_note(dep: Deployment, stages: float) -> str:
    """What a prompt's peak says of its pipeline stages: counted × the ``stages`` busy on
    average (busy_stages) where a call's ubatches or vLLM V1's chunks pipeline over them,
    else the stages one after another (llama.cpp's layer split says why); "" on one stage."""
    pp = dep.pipeline_parallel_size
    if pipelined_stages(dep) > 1 or stages > 1:
        pieces = ("the ubatches of a call" if pipelined_stages(dep) > 1
                  else "vLLM V1's chunks of the prompt")
        return (f"; the peak counted × {stages:.2g} of {pp} pipeline stages busy on average: "
                f"{pieces} pipelined over them")
    if pp > 1 and dep.engine.startswith("llama.cpp"):
        return (f"; its {pp} stages one after another, as llama.cpp runs a layer split short "
                "of every block and the output on the GPUs, or with --n-cpu-moe")
    return f"; its {pp} pipeline stages one after another" if pp > 1 else ""


def _rank_prefill_flops(dep: Deployment, work: Work, prompt_len: int, batch: int) -> Step:
    """A prefill's FLOPs under data-parallel attention (data_parallel.py): the busiest rank's
    step, as decode's (cost.batch_shape deals the prompts over the ranks, one each in turn).
    Its ⌈prompts ÷ ranks⌉ prompts pass its own copy of the weights every token reads on its
    own GPUs (a lone prompt runs on one rank, the others idle); the routed experts run every
    rank's tokens, gathered, split over all the GPUs, a GPU's share of them counted here."""
    ranks, tp = dep.data_parallel_size, dep.tensor_parallel_size
    own = dep.rank_sequences(batch)
    rest = work.flops - work.weight_flops - work.attention_flops
    gpus = f"{tp} {plural(tp, 'GPU')}"
    whose = "its GPU's" if tp == 1 else f"its {tp} GPUs'"
    experts = (f"; and {whose} share of the routed experts on every rank's "
               f"{batch * prompt_len:,} tokens, spread over all {dep.num_gpus}"
               if dep.model.moe is not None else "")
    return step("FLOPs", "one data-parallel rank's step: its weight matmuls + attention + "
                "the rest", q("FLOPs", work.flops / 1e12, "TFLOP"),
                q("prompts", batch, "", f"dealt over {ranks} data-parallel ranks, one each "
                  f"in turn: the busiest runs ⌈{batch:,} ÷ {ranks}⌉ = {own:,}, each rank a "
                  "prompt of its own (none is split over the ranks)"),
                q("weight matmuls", work.weight_flops / 1e12, "TFLOP",
                  f"its {own:,} × {prompt_len:,} tokens × 2 × its own copy of the weights "
                  f"every token passes, over its {gpus} (the LM head's included){experts}"),
                q("attention FLOPs", work.attention_flops / 1e12, "TFLOP",
                  "causal QKᵀ and PV over its prompts"),
                *([q("the rest", rest / 1e12, "TFLOP", "the other operators: recurrent "
                     "state updates, LoRA adapters")] if abs(rest) > 1e-9 * work.flops else []))


def _weight_step(dep: Deployment, work: Work, batch: int) -> Step:
    """A decode step's weight bytes: every weight once; for an MoE model the weights every
    token reads, plus the share of the routed experts the batch's tokens touch."""
    result = q("weights read", work.weight_bytes / GB, "GB")
    moe = dep.model.moe
    copies = dep.tp_copies_bytes
    kept = (" + what the tensor-parallel ranks each keep whole",) if copies else ()
    tp = dep.engine_tensor_parallel_size  # an MI250's dies under vLLM: a rank each
    copies_term = (q("copies kept whole", copies / GB, "GB",
                     f"{tp - 1} more copies of what each of the {tp} tensor-parallel ranks"
                     f"{dep.dies_note} "
                     "holds and reads whole: routers, MLA's down-projections"
                     f"{_indexer_words(dep)}, K/V heads past their count"),) if copies else ()
    if moe is None:
        return step("weight bytes read", "params a step can read × bytes per weight"
                    + "".join(kept), result,
                    q("params a step can read", dep.params_a_step_reads / 1e9, "B params",
                      f"{dep.params_read_note}, config.json"),
                    q("bytes per weight (average read)", dep.bytes_per_weight, "B",
                      f"{dep.weights.label}, with the layers it leaves as the checkpoint keeps "
                      "them (lm_head, norms)"), *copies_term)
    counts = count_params(dep.model).by_category
    routed = sum(counts.get(c, 0) for c in ROUTED)
    dense_bpw, expert_bpw = dep.bytes_per_weight_split
    dense = dep.params_a_step_reads - routed
    share = (work.weight_bytes - copies - dense * dense_bpw) / (routed * expert_bpw)
    touched = expected_experts_touched(moe.num_experts, moe.experts_per_token, batch)
    ranks = dep.engine_expert_ranks  # vLLM's EP ranks are an MI250's dies
    busiest = ""
    if dep.expert_parallel and ranks > 1:
        # the step waits on the rank that touched most of its experts, as cost prices it: the
        # share is that rank's read, as if every rank read as much (not touched ÷ E)
        # (under EPLB of its (E + N) ÷ R physical experts, the replicas with them)
        # (SGLang's replicas without --enable-eplb: of the experts its rank serves, the
        # replicas on the last ranks taking no token)
        redundant, idle = dep.eplb_redundant_experts, dep.unrouted_redundant_experts
        if idle:
            most = busiest_rank_routed_experts(moe.num_experts, idle, ranks, touched)
            held = max(trivial_layout_routed_experts(moe.num_experts, idle, ranks))
            physical = (f"each holding ({moe.num_experts} + {idle} redundant) ÷ {ranks}, no "
                        "token reaching the replicas (the last ranks') without --enable-eplb, ")
        else:
            most = busiest_rank_physical_experts(moe.num_experts, redundant, ranks, touched)
            held = ep_rank_experts(moe.num_experts + redundant, ranks)
            physical = (f"each holding ({moe.num_experts} + {redundant} redundant under EPLB) "
                        f"÷ {ranks}, " if redundant else "")
        busiest = (f"; under expert parallelism the step waits on the busiest of {ranks} "
                   f"ranks, {physical}{most:,.2f} of its {held} experts read: {most:,.2f} × "
                   f"{ranks} ÷ {moe.num_experts}")
    return step("weight bytes read", "params every token reads × their bytes per weight + "
                "routed expert params × share touched × theirs" + "".join(kept), result,
                q("params every token reads", dense / 1e9, "B params",
                  "all but the routed experts and the input embedding"),
                q("every-token bytes per weight", dense_bpw, "B", dep.weights.label),
                q("routed expert params", routed / 1e9, "B params", "config.json"),
                q("share touched", share, "", f"{touched:,.1f} of {moe.num_experts} experts a "
                  f"layer expected under {batch:,} {plural(batch, 'token')} × {moe.experts_per_token} "
                  f"routed each{busiest}"),
                q("expert bytes per weight", expert_bpw, "B"), *copies_term)


def _kv_step(dep: Deployment, work: Work, footprint: KVFootprint, batch: int) -> Step:
    """A decode step's KV bytes: each sequence reads its full-attention layers' cache and the
    new token's K and V and writes the new token's (KV per token × context + 2: Llama-3.1-70B
    in bf16, 327,680 B × 2,002 = 656 MB at 2,000 tokens), plus what its window layers and
    recurrent states move; × the sequences (a data-parallel rank's, the busiest's)."""
    ranks, context = dep.data_parallel_size, footprint.context
    seqs = dep.rank_sequences(batch)
    count = "batch" if ranks == 1 else "a rank's sequences"
    per_sequence = work.kv_bytes / seqs
    per_token = footprint.bytes_per_token_growing * dep.kv_replication  # over the TP copies
    tokens = decode_kv_tokens(context + 1, 1)  # the c + 1 keys read, the new token written
    rest = per_sequence - per_token * tokens  # window layers, recurrent states
    sequences = (q("batch", batch) if ranks == 1 else
                 q(count, seqs, "", f"⌈batch {batch:,} ÷ {ranks} data-parallel ranks⌉"))
    topk = sparse_topk(dep.model)
    if topk is not None:
        return _sparse_kv_step(dep, work, context, topk, count, sequences, per_sequence)
    holds = (f"the cache holds {fmt_decimal_bytes(footprint.stored_bytes(dep.kv_replication))}"
             + (f", ×{dep.kv_replication:g} for the copies the "
                f"TP{dep.engine_tensor_parallel_size} ranks{dep.dies_note} each keep and read "
                "(one copy: "
                f"{fmt_decimal_bytes(footprint.stored_bytes(1.0))})"
                if dep.kv_replication > 1 else ""))
    result = q("KV read", work.kv_bytes / GB, "GB")
    if not per_token:  # no full-attention layer: no cache that grows with the context
        return step("KV bytes read", f"{count} × KV traffic per sequence", result, sequences,
                    q("KV traffic per sequence", per_sequence / 1e6, "MB",
                      f"its {context:,}-token {dep.kv.id} cache and the new token's K and V "
                      "read (window layers: the window), the new token's written"
                      + (", its recurrent state read and written" if footprint.state_bytes
                         else "") + f"; {holds}"))
    growing = (q("KV per token", per_token, "B", _kv_per_token_source(dep)),
               q("tokens read and written", tokens, "", f"the {context:,} cached and the new "
                 "token's K and V read, the new token's written"))
    if abs(rest) <= 1e-9 * per_sequence:
        return step("KV bytes read", f"{count} × KV per token × tokens read and written",
                    result, sequences, *growing,
                    q("KV traffic per sequence", per_sequence / 1e6, "MB",
                      f"KV per token × tokens; {holds}"))
    kinds = {layer.mixer for layer in dep.model.layers if layer.mixer in (SLIDING, CHUNKED)}
    local = "chunked layers'" if kinds == {CHUNKED} else "window layers'"
    others = " and ".join(filter(None, (local if footprint.windowed_bytes else "",
                                        "recurrent states'" if footprint.state_bytes else "")))
    reach = " and ".join(filter(None, (
        "a window layer's cache up to its window" if SLIDING in kinds else "",
        "a chunked layer's cache from its chunk's start (the context mod the chunk)"
        if CHUNKED in kinds else "")))
    return step("KV bytes read", f"{count} × (KV per token × tokens read and written + the "
                f"{others} traffic)", result, sequences, *growing,
                q(f"{others} traffic", rest / 1e6, "MB", "per sequence: " + " and ".join(
                    filter(None, (f"{reach} and the new token's K and V read, the new token's "
                                  "written" if footprint.windowed_bytes else "",
                                  "a recurrent layer's state read and written"
                                  if footprint.state_bytes else "")))),
                q("KV traffic per sequence", per_sequence / 1e6, "MB", holds))


def _sparse_kv_step(dep: Deployment, work: Work, context: int, topk: int, count: str,
                    sequences: Quantity, per_sequence: float) -> Step:
    """A DeepSeek Sparse Attention model's decode KV bytes (sparse_attention): each sequence
    reads the min(c + 1, k) latents its indexer picks and every key's indexer key, and writes
    the new token's of both. DeepSeek-V3.2 in bf16 at TP8 and 65,536 tokens: 562,176 B ×
    2,049 + 64,416 B × 65,538 = 5.37 GB, where dense MLA read 41.1 GB."""
    layers = dep.model.count(mixer=FULL)
    indexer = indexer_bytes_per_token(dep.model) * layers * dep.kv_replication
    latent = served_footprint(dep, context).bytes_per_token_growing * dep.kv_replication \
        - indexer
    keys = decode_kv_tokens(context + 1, 1)
    latents = sparse_latents_read(keys, context + 1, keys_read(context, 1, topk))
    copies = f" × {dep.kv_replication:g} TP copies" if dep.kv_replication > 1 else ""
    return step("KV bytes read", f"{count} × (latent per token × latents read and written + "
                "indexer key per token × keys read and written)",
                q("KV read", work.kv_bytes / GB, "GB"), sequences,
                q("latent per token", latent, "B", _kv_per_token_source(dep)),
                q("latents read and written", latents, "", f"min({context:,} + 1, index_topk "
                  f"{topk:,}) the indexer picks, the new token's written (DeepSeek Sparse "
                  "Attention: dense MLA reads all the cached ones)"),
                q("indexer key per token", indexer, "B", f"{indexer_bytes_per_token(dep.model)} "
                  f"B (index_head_dim fp8 + a float32 scale per 128) × {layers} layers{copies}"),
                q("keys read and written", keys, "", f"the indexer scores the {context:,} "
                  "cached and the new token's keys; the new token's written"),
                q("KV traffic per sequence", per_sequence / 1e6, "MB",
                  "latents and indexer keys"))


def _kv_per_token_source(dep: Deployment) -> str:
    """How a token's cache in the full-attention layers adds up: '2 (K and V) × 8 KV heads ×
    128 dims × 80 full-attention layers × 2 B (bf16)'."""
    att = dep.model.attention
    assert att is not None  # a model with full-attention layers has their geometry
    layers = dep.model.count(mixer=FULL)
    element = f"{dep.kv.bytes_per_element:g} B ({dep.kv.id})"
    copies = (f" × {dep.kv_replication:g} TP copies" if dep.kv_replication > 1 else "")
    latent = att.cached_latent
    if latent:
        return (f"({latent.kv_lora_rank} + {latent.qk_rope_head_dim}) latent × {layers} "
                f"full-attention layers × {element}{copies}")
    dims = (f"2 (K and V) × {att.num_kv_heads} KV heads × {att.head_dim} dims"
            if att.head_dim == att.v_head_dim else
            f"{att.num_kv_heads} KV heads × ({att.head_dim} K + {att.v_head_dim} V dims)")
    return f"{dims} × {layers} full-attention layers × {element}{copies}"


def _rank_weight_step(dep: Deployment, work: Work, batch: int) -> Step:
    """A decode step's weight bytes under data-parallel attention: one rank's own copy of all
    but the routed experts, read by its share of the batch alone, and its GPUs' share of the
    experts every rank's tokens touch (data_parallel.py)."""
    experts = work.expert_weight_bytes
    ranks, tp = dep.data_parallel_size, dep.tensor_parallel_size
    own = q("a rank's own weights", (work.weight_bytes - experts) / GB, "GB",
            f"all but the routed experts, each rank a copy over its {tp} "
            f"GPU{'s' if tp > 1 else ''}, read for its ⌈{batch:,} ÷ {ranks}⌉ = "
            f"{dep.rank_sequences(batch):,} sequences")
    moe = dep.model.moe
    if moe is None:
        return step("weight bytes read", "a rank's own weights (a dense model's ranks are "
                    "replicas)", q("weights read", work.weight_bytes / GB, "GB"), own)
    touched = expected_experts_touched(moe.num_experts, moe.experts_per_token, batch)
    spread = "each whole, the busiest's" if dep.expert_parallel else "a slice of each"
    return step("weight bytes read", "a rank's own weights + its GPUs' share of the routed "
                "experts every rank's tokens touch", q("weights read", work.weight_bytes / GB,
                                                        "GB"), own,
                q("its share of the experts", experts / GB, "GB",
                  f"{touched:,.1f} of {moe.num_experts} experts a layer expected under the "
                  f"whole batch's {batch:,} {plural(batch, 'token')} × "
                  f"{moe.experts_per_token} routed each, spread over {dep.expert_ranks} GPUs "
                  f"({spread})"))


def _weights_read_source(dep: Deployment, work: Work) -> str:
    """How the weights a step read add up: every weight once, or the experts' share."""
    every = dep.params_a_step_reads * dep.bytes_per_weight
    if abs(work.weight_bytes - dep.tp_copies_bytes - every) <= 1e-3 * every:
        # five digits each, so the product repeats to the step's four (69.52 × 1.0149 =
        # 70.56 GB; at four, 69.5 × 1.015 gave 70.54); "bytes" spelt out beside "B params"
        return (f"{dep.params_a_step_reads / 1e9:,.5g} B params ({dep.params_read_note}) "
                f"× {dep.bytes_per_weight:.5g} bytes a weight on average ({dep.weights.label})"
                + (f" + {dep.tp_copies_bytes / GB:,.3g} GB the TP ranks each keep whole"
                   if dep.tp_copies_bytes else ""))
    return "Σ params × bytes per weight; of the routed experts, those the tokens touch"


def _host_steps(dep: Deployment, work: Work) -> tuple[Step, ...]:
    """The explanation of a partial offload's host time, or nothing without one."""
    if dep.cpu_offload is not None:
        from ridgeline.cpu_offload import stage_offloads
        from ridgeline.offload import host_link_bytes_per_s

        per_stage = [split.bytes for split in stage_offloads(dep)]
        moved = sum(per_stage)
        share = work.link_bytes / (moved * dep.tensor_parallel_size) if moved else 1.0
        staged = dep.pipeline_parallel_size > 1
        bytes_name = "offloaded bytes, a GPU of each stage" if staged else "offloaded bytes a GPU"
        return (step("host time", f"{bytes_name} ÷ host link" if share >= 1 else
                     f"{bytes_name} × share read ÷ host link",
                     q("host time", work.host_time_s * 1e3, "ms"),
                     q(bytes_name, moved / GB, "GB",
                       "--cpu-offload-gb × 2^30, at most the layers' weights" + (
                           " of each stage, the stages read one after another: "
                           + " + ".join(f"{b / GB:,.4g}" for b in per_stage) + " GB"
                           if staged else "")),
                     *([q("share read", share, "",
                          "read in place: the non-expert weights of the layers offloaded "
                          "first (from layer 0 up), and the routed experts the step's "
                          "tokens touch")] if share < 1 else []),
                     q("host link", host_link_bytes_per_s(
                         dep.accelerator, dep.cpu_offload.link_bytes_per_s) / 1e9, "GB/s",
                       "--host-link-gbs or the card's PCIe")),)
    if not (work.host_bytes or work.link_bytes) or dep.offload is None:
        return ()
    from ridgeline.offload import link_bytes_per_s

    memory = [q("bytes in host memory", work.host_bytes / GB, "GB", "read by the CPU"),
              q("host bandwidth", dep.offload.host_bandwidth_bytes_per_s / 1e9, "GB/s",
                "--host-bandwidth-gbs")] if work.host_bytes else []
    link = [q("bytes over the link", work.link_bytes / GB, "GB", "host weights copied to the "
              "GPU for a step of 32 tokens or more"),
            q("host link", link_bytes_per_s(dep) / 1e9, "GB/s", "--host-link-gbs or the "
              "card's PCIe")] if work.link_bytes else []
    return (step("host time", "bytes in host memory ÷ host bandwidth + bytes over the link ÷ "
                 "link", q("host time", work.host_time_s * 1e3, "ms"), *memory, *link,
                 q("placement", dep.offload.describe(dep.model))),)
