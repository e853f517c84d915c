"""`ridgeline fit`: the KV pool an engine leaves, what it holds, and the capacity verdict.

Two failures people confuse are kept apart: a deployment that does not fit (too few
conversations of this length; no engine tuning rescues it) and one that fits but stays
under the ridge (the batch the pool allows is bandwidth-bound at any load).

FitReport holds the figures; its verdict line (fit_verdict), cautions (fit_cautions), text
(fit_text), JSON (fit_json) and worked steps (fit_steps) each live in their own module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from ridgeline.capacity import (
    admission_gate,
    conversation_bytes,
    engine_seat_limit,
    held_conversations,
    refuses_to_start,
    served_context,
)
from ridgeline.context_length import past_length_refusal
from ridgeline.datafiles import engine_defaults
from ridgeline.dense_ridge import dense_ridge_steps, ridge_batch_step
from ridgeline.deployment import Deployment, require_deployment
from ridgeline.errors import InputError, wrong_kind
from ridgeline.explain import Step
from ridgeline.kvpool import block_past_pool
from ridgeline.llamacpp_fit import run_pool
from ridgeline.memory import EngineSettings, KVPool, require_settings
from ridgeline.monotone import longest_holding
from ridgeline.offload import HostOffload
from ridgeline.record_views import headline_repr
from ridgeline.reports.fit_cautions import fit_cautions, state_capped_seats
from ridgeline.reports.fit_headline_steps import profiled_pool_steps
from ridgeline.reports.fit_json import fit_dict
from ridgeline.reports.fit_levers import Lever, levers
from ridgeline.reports.fit_ranks import rank_steps
from ridgeline.reports.fit_state import most_running_requests, state_shortfall
from ridgeline.reports.fit_steps import (
    conversations_step,
    held_steps,
    pool_step,
    reserved_steps,
    stage_steps,
    start_steps,
    state_pool_steps,
)
from ridgeline.reports.fit_terms import seats_name
from ridgeline.reports.fit_text import fit_text_lines
from ridgeline.reports.fit_verdict import CLEARS_RIDGE, DOES_NOT_FIT, UNDER_RIDGE
from ridgeline.stages import micro_batch, micro_batches
from ridgeline.units import plural, require_count
from ridgeline.vllm_pool import PoolAdvice, vllm_pool_advice_terms


@dataclass(frozen=True)
class FitReport:
    """``fit_report``'s answer: how many conversations of ``context`` tokens the engine's KV
    pool (``pool``) holds at once, the ``batch`` the engine runs of them, and the
    ``verdict``: DOES_NOT_FIT, UNDER_RIDGE (fits, but the batch stays under ``ridge_batch``,
    so decode is bandwidth-bound at any load) or CLEARS_RIDGE. ``levers`` are the changes
    that would hold more (a shorter context, fp8 weights, more GPUs), each with its own
    conversations. Llama-3.1-8B on one H100 under vLLM at 8,192 tokens: 59 conversations,
    "fits, under the ridge" (the ridge batch is 295.3). ``to_dict()`` is fit --json's."""

    deployment: Deployment = field(repr=False)
    settings: EngineSettings = field(repr=False)
    pool: KVPool = field(repr=False)
    context: int
    target: int | None
    conversations: int  # held at once by the pool (of every data-parallel rank)
    per_conversation_bytes: float  # per GPU
    ridge_batch: float  # the batch at which the weights every token reads reach the ridge
    levers: tuple[Lever, ...] = field(repr=False)
    steps: tuple[Step, ...] = field(repr=False)  # --explain's worked steps
    searched: str = ""  # what longest_context found, when it chose the context
    # llama.cpp's --fit, where it places this deployment (-ngl auto, or the build's default):
    # the host it moves weights to and its --fit-target margin (None: the default), so a
    # lever's run (more slots, a shorter context) is placed again as `fit` places that run
    fit_host: HostOffload | None = None
    fit_margin_bytes: float | None = None
    # where the build's default --fit found no placement: what llama-server does instead
    # (cli_offload.FitRun.caution), said among the cautions
    fit_note: str = ""
    # --max-model-len not given, the batch under the ridge at the model's context: the longest
    # context whose batch reaches it (``ridge_context``; 0: none), so the verdict is said to be
    # the full context's, not the card's; None where the context was given or the batch clears
    ridge_context: int | None = None

    def __repr__(self) -> str:
        return headline_repr(self, ("context", "target", "verdict", "conversations", "batch",
                                    "ridge_batch"))

    @property
    def batch(self) -> int:
        """Sequences that can run at once: the pool, then the engine's seat limit (each
        data-parallel rank's); 59 for the 8B above, its 59 conversations under vLLM's 1,024
        seats."""
        return min(self.conversations, engine_seat_limit(self.pool, self.deployment))

    @property
    def expert_ridge_batch(self) -> float:
        """The article's batch at which an MoE model's routed experts reach the ridge: the
        ridge batch at the experts' bytes per weight ÷ (k/E)."""
        if self.deployment.model.moe is None:
            return self.ridge_batch
        return self.deployment.expert_ridge_batch

    @property
    def verdict(self) -> str:
        """One of three strings (exported as ridgeline's DOES_NOT_FIT, UNDER_RIDGE and
        CLEARS_RIDGE): "does not fit" (fewer conversations than the target, or none),
        "fits, under the ridge" (the batch of a stage is below ``ridge_batch``), or "clears
        the ridge"."""
        if self.conversations < max(1, self.target or 1) or self.batch < 1:
            return DOES_NOT_FIT  # (a batch of none: the engine would refuse to start)
        return CLEARS_RIDGE if self.stage_batch >= self.ridge_batch else UNDER_RIDGE

    @property
    def stage_batch(self) -> int:
        """The batch a stage multiplies: under pipeline parallelism one micro-batch of it;
        with data-parallel attention one rank's share, which alone reads its rank's dense
        weights."""
        return self.deployment.rank_sequences(micro_batch(self.deployment, self.batch))

    @property
    def expert_batch(self) -> int:
        """The sequences a step's routed experts see: under pipeline parallelism one
        micro-batch; with data-parallel attention every rank's."""
        return micro_batch(self.deployment, self.batch)

    def batch_label(self) -> str:
        """The batch, and under pipeline parallelism its micro-batches (with data-parallel
        attention, each rank's share)."""
        ranks = self.deployment.data_parallel_size
        if ranks > 1:
            even = self.batch == ranks * self.stage_batch
            return (f"{self.batch:,}: {'' if even else 'up to '}{self.stage_batch:,} on each "
                    f"of {ranks} data-parallel ranks")
        pp = micro_batches(self.deployment)
        if pp == 1:
            return f"{self.batch:,}"
        even = self.batch == pp * self.stage_batch
        return (f"{self.batch:,}: {pp} micro-batches of {'' if even else 'up to '}"
                f"{self.stage_batch:,}, one in each pipeline stage")

    @property
    def cautions(self) -> list[str]:
        """What holds the conversations back besides memory, or makes the context suspect
        (fit_cautions)."""
        return fit_cautions(self)

    @property
    def rank_target(self) -> int:
        """The target's conversations one pool holds: under data-parallel attention the
        busiest rank's share, ⌈target ÷ ranks⌉ (each rank has a pool of its own); else the
        target."""
        return self.deployment.rank_sequences(max(1, self.target or 1))

    @property
    def shortfall_bytes(self) -> float:
        """Extra memory per GPU the target needs (0 when it fits), counted from what is
        left after the weights and the profiling pass, so an overflow counts too; under
        data-parallel attention, the busiest rank's share of it (rank_target)."""
        p = self.pool
        need = max(self.rank_target * self.per_conversation_bytes, self.start_bytes,
                   self.admitted_bytes)
        if p.set_pool_bytes:  # a set pool: the card short of it, or it short of the need
            return max(need, p.set_pool_bytes) - p.rest_bytes if p.overflow_bytes \
                else max(0.0, need - p.pool_bytes)
        if p.state_request_bytes:
            return state_shortfall(self, need)
        held = need + p.slot_cache_bytes  # llama.cpp's slot caches, a fixed size beside it
        if p.capped:  # a token cap binds: the pool short of the need, as far as memory allows
            return max(0.0, held - p.pool_bytes)
        return max(0.0, held / p.free_fraction_of_rest - p.rest_bytes)

    @property
    def most_running_requests(self) -> int:
        """The largest --max-running-requests that leaves room for the target (fit_state)."""
        return most_running_requests(self)

    @property
    def admitted_bytes(self) -> float:
        """What the target needs per GPU under vLLM's whole-prompt admission gate (v0.19+):
        the last one's admission charge beside the others decoding (0 where no gate, or
        where the charge is no more than a decoding request holds)."""
        gate = admission_gate(self.pool, self.context)
        if gate is None:
            return 0.0
        admission, decoding = gate
        return (admission + (self.rank_target - 1) * decoding) * self.pool.page_bytes

    @property
    def never_admitted(self) -> bool:
        """vLLM v0.19 starts, but its gate charges a prompt of the context more blocks than
        the pool holds: no such request is ever admitted (issue #39734)."""
        p = self.pool
        admission = p.admission_blocks(self.context)
        return admission is not None and not self.refused_start and p.blocks < admission

    @property
    def start_blocks(self) -> int | None:
        """Blocks vLLM asks of the pool at start-up for one max_model_len request: its window
        groups at window + the profiled tokens (None: no KV-cache groups)."""
        p = self.pool
        if p.groups is None:
            return None
        return p.request_blocks(self.context)

    @property
    def start_bytes(self) -> float:
        """The start-up requirement in bytes per GPU (0 where it is one conversation's)."""
        blocks = self.start_blocks
        return 0.0 if blocks is None else blocks * self.pool.page_bytes

    @property
    def refused_start(self) -> bool:
        return refuses_to_start(self.pool, self.deployment, self.context)
    def to_dict(self) -> dict[str, Any]:
        return fit_dict(self)

    @property
    def advice(self) -> tuple[float, float] | None:
        """vLLM's start-up advice for --kv-cache-memory-bytes (requested memory, whole card);
        None where vLLM would not get as far as printing it (it logs the advice after
        capturing CUDA graphs, so not where it refuses to start or cannot load)."""
        terms = self.advice_terms
        return None if terms is None else (terms.fit_requested_bytes, terms.fill_device_bytes)

    @property
    def advice_terms(self) -> PoolAdvice | None:
        """The terms behind ``advice`` (the card, the fraction requested, what is taken)."""
        if self.refused_start or self.pool.rest_bytes <= 0 or self.conversations == 0:
            return None
        return vllm_pool_advice_terms(self.deployment, self.pool, self.settings)

    @property
    def launch_cells(self) -> int:
        """The -c llama-server is started with: what --fit placed for, else the batch's."""
        o = self.deployment.offload
        return o.fit_cells if o is not None and o.fit_cells else max(1, self.batch) * self.context

    @property
    def launch_slots(self) -> int:
        """The -np llama-server is started with: the pool's slots (-np given, or raised to the
        target), save where -np was not given and -c holds fewer conversations of the context
        than llama-server's default 4 slots (its -np auto, 4 slots sharing a unified cache:
        llama.cpp PR #16736, PR #17997): then one slot for each that fits, as a fourth slot
        would admit a conversation whose cells are not there and llama-server then fails the
        requests running ('KV cache is full'). gpt-oss-20b on an L4 at 131,072 tokens: -c
        393216 -np 3, where the default 4 would fill the cells."""
        slots = self.pool.max_num_seqs
        if self.settings.max_num_seqs or not 0 < self.batch < slots:
            return slots
        return self.batch if self.launch_cells < (self.batch + 1) * self.context else slots

    @property
    def flash_attention_auto_off(self) -> str:
        """Why llama.cpp's -fa auto resolved to off (Deployment.build kept the words of
        engine_platforms.flash_attention_unsupported), or "": where it resolved on, or where
        --flash-attn off was given."""
        d = self.deployment
        return "" if d.flash_attention else d.flash_attention_auto_off

    def text_lines(self) -> list[str]:
        return fit_text_lines(self)


SHORTEST_CONTEXT = 1024  # where a failed search reports: a short conversation


def longest_context(dep: Deployment, settings: EngineSettings, target: int,
                    fit_host: HostOffload | None = None,
                    fit_margin_bytes: float | None = None) -> FitReport:
    """The fit at the longest context at which ``target`` conversations still fit at once
    (bisection: the pool shrinks, or stays, as conversations grow), up to the model's
    max_position_embeddings; where none does, the fit at a short conversation says by how
    much it falls short. Under llama.cpp's --fit (``fit_host``) the search keeps every layer
    on the GPU and its margin free, as a run at the context found is not moved; on one memory
    (a Mac's, a GB10's), where --fit has nowhere to move weights, a context the margin leaves
    no room for is judged as llama-server loads it (``unplaced_report``)."""
    limit = served_context(dep)[0] or 1 << 20

    def report_at(context: int, report_for: Callable[..., FitReport] = fit_report) -> FitReport:
        report = report_for(dep, context, settings, target, fit_host, fit_margin_bytes)
        if fit_host is None or not dep.accelerator.one_memory or report.conversations >= target:
            return report
        return unplaced_report(report) or report

    def holds(context: int) -> bool:  # the conversations alone: no levers sized
        return report_at(context, counted_report).conversations >= target

    if not holds(1):
        short = report_at(min(SHORTEST_CONTEXT, limit))
        return replace(short, searched=f"no context holds {target:,} "
                       f"{plural(target, 'conversation')} at once; "
                       f"at {short.context:,} tokens:")
    low = longest_holding(holds, 1, limit)
    report = report_at(low)
    cap = "" if low != limit else " (the model's limit)" if served_context(dep)[0] \
        else " (as far as the search goes: the config states no context length)"
    seats = engine_seat_limit(report.pool, dep)
    if seats < target:  # the pool holds them, but the engine's seats run fewer at once
        return replace(report, searched=_seats_short_words(report, target, seats,
                                                             f"{low:,} tokens{cap}"))
    return replace(report, searched=f"longest context at which {target:,} "
                   f"{plural(target, 'conversation')} {'fits' if target == 1 else 'fit'} at "
                   f"once: {low:,} tokens{cap}")


def _seats_short_words(r: FitReport, target: int, seats: int, context: str) -> str:
    """The search's line where the pool holds ``target`` conversations at the context found
    but the engine's seats run fewer at once, as the caution below it says (fit_cautions):
    Llama-3.1-8B on an H100, 10,000 conversations in the pool at 32 tokens, vLLM's
    max_num_seqs running 1,024 of them."""
    from ridgeline.engine_names import engine_name
    from ridgeline.reports.utilization import seats_flag

    d = r.deployment
    ranks = d.data_parallel_size
    name = seats_name(r.pool) + (f", {seats // ranks:,} on each of {ranks} data-parallel "
                                 "ranks" if ranks > 1 else "")
    flag = seats_flag(d.engine).split("/")[0]
    remedy = (f"its state pool's slots set it, which {flag} cannot raise (caution below)"
              if state_capped_seats(r) else f"raise {flag}")
    return (f"longest context at which {target:,} {plural(target, 'conversation')} "
            f"{'fits' if target == 1 else 'fit'} in the pool: {context}, but "
            f"{engine_name(d.engine)} runs at most {seats:,} at once ({name}): {remedy}")


def unplaced_report(r: FitReport) -> FitReport | None:
    """``r`` (placed by llama.cpp's --fit, its margin kept free) as llama-server starts where
    --fit finds no placement for its target × context: it warns and loads every layer as given,
    with no margin kept (llamacpp_fit.unplaced_caution), as `fit --max-model-len` answers that
    run (cli_offload.fitted_run); None where --fit places it. Where the margin leaves too
    little room on one memory, the whole card may still hold the target: mixtral-8x7b q8_0 on
    an apple-m4-pro-20c holds one 10,730-token conversation so, 2,601 tokens with the margin."""
    from ridgeline.llamacpp_fit import FitFailed, fit_placement, unplaced_caution

    if r.fit_host is None:
        return None
    try:
        fit_placement(r.deployment, r.settings, r.context, max(1, r.target or 1), r.fit_host,
                      r.fit_margin_bytes)
    except FitFailed as failed:
        whole = fit_report(r.deployment, r.context, r.settings, r.target, None)
        return replace(whole, fit_note=unplaced_caution(str(failed)))
    return None


def slots_for_target(dep: Deployment, settings: EngineSettings,
                     target: int | None) -> EngineSettings:
    """llama-server started for the target: -np target where the default slots are fewer and
    -np was not given, each slot with its own window and recurrent cache (a target past the
    default 4 slots is not held by 4). Other engines' seats do not size memory."""
    if not dep.engine.startswith("llama.cpp") or not target or settings.max_num_seqs:
        return settings
    default = int(engine_defaults(dep.engine).get("n_parallel", 1))
    return replace(settings, max_num_seqs=target) if target > default else settings


def ridge_context(r: FitReport) -> int:
    """The longest context, up to ``r``'s, whose batch reaches the ridge, fit run with that
    --max-model-len sizing it (bisection: a shorter context holds as many conversations or
    more); 0 where none does. Llama-3.1-70B fp8, KV fp8, on one MI300X: 5 conversations of
    131,072 tokens are under the ridge (247); 296 of 2,500 clear it."""
    def clears(context: int) -> bool:
        return counted_report(r.deployment, context, replace(r.settings, max_model_len=context),
                              r.target, r.fit_host, r.fit_margin_bytes).verdict == CLEARS_RIDGE

    return longest_holding(clears, 1, r.context) if clears(1) else 0


# fit_report's fit_host left out: llama-server's own --fit where the build starts with it
BUILD_DEFAULT: Final = "build default"


def _fit_host_kind(fit_host: object) -> HostOffload | Literal["build default"] | None:
    """fit_report's ``fit_host`` where it is one it takes (a HostOffload, BUILD_DEFAULT or
    None), else the refusal of its kind: fit_host=5 or "yes" are not read as --fit on."""
    if fit_host is None or isinstance(fit_host, HostOffload):
        return fit_host
    if fit_host == BUILD_DEFAULT:
        return BUILD_DEFAULT
    raise wrong_kind(fit_host, "fit_host", f"a HostOffload (llama.cpp's --fit placement), "
                     f"{BUILD_DEFAULT!r} (the build's default) or None (-ngl all)")


def fit_report(dep: Deployment, context: int, settings: EngineSettings | None = None,
               target: int | None = None,
               fit_host: HostOffload | Literal["build default"] | None = BUILD_DEFAULT,
               fit_margin_bytes: float | None = None) -> FitReport:
    """The report for ``dep`` at ``context`` tokens a conversation, under ``settings`` (None:
    the engine's defaults, max_model_len ``context``); ``fit_host`` (and ``fit_margin_bytes``)
    where llama.cpp's --fit places the deployment (cli_offload.fit_host), which its levers'
    runs are placed by again: left out, the build's default as `fit` starts it with no
    placement flags (llamacpp_fit.default_fit_host at ``settings.engine_version``: --fit on,
    its margin kept free, from b7437); None, every layer as placed (-ngl all). A deployment
    whose weights --fit would move to the host is placed by `fit` (-ngl auto), not here.
    Llama-3.1-8B on one H100 under vLLM at 8,192 tokens: 59 conversations, ``verdict``
    "fits, under the ridge" (the ridge batch is 296); under llama.cpp, 63 (64 with -ngl all)."""
    report = counted_report(dep, context, settings, target, fit_host, fit_margin_bytes,
                            worked=True)
    report = replace(report, levers=tuple(levers(report)))
    return replace(report, steps=(*report.steps, *held_steps(report),
                                  *profiled_pool_steps(report)))


def counted_report(dep: Deployment, context: int, settings: EngineSettings | None = None,
                   target: int | None = None,
                   fit_host: HostOffload | Literal["build default"] | None = BUILD_DEFAULT,
                   fit_margin_bytes: float | None = None, worked: bool = False) -> FitReport:
    """``fit_report`` without its levers: the pool, the conversations it holds and so the
    verdict, all a search over contexts reads (``ridge_context``, ``longest_context``), at a
    fraction of the cost (the levers size a pool for each change they try); with ``worked``,
    the worked steps of the pool and the ridge too (fit_report's, before the levers'), else
    none. The same refusals as fit_report's. Llama-3.1-8B on one H100 under vLLM at 8,192
    tokens: 59 conversations, no levers."""
    dep = require_deployment(dep)
    context = require_count(context, "context length")
    settings = require_settings(settings)
    problem = past_length_refusal(context, settings.max_model_len, dep.engine, "context",
                                  "max_model_len")  # as decode refuses --context past it
    if problem:
        raise InputError(problem)
    fit_host = _fit_host_kind(fit_host)
    if isinstance(fit_host, str):
        from ridgeline.llamacpp_fit import default_fit_host

        fit_host = default_fit_host(dep, settings.engine_version)
    s = slots_for_target(dep, replace(settings, max_model_len=settings.max_model_len or context),
                         target)
    pool = run_pool(dep, s, fit_host is not None, fit_margin_bytes)
    past = block_past_pool(pool, s.block_size)  # the block asked, before a lever sizes another
    if past:
        raise InputError(past)
    per_seq = conversation_bytes(pool, dep, context)
    n = held_conversations(pool, dep, context)
    # the ridge only where a step can be timed, as decode and simulate time it: a record with
    # no rate for the cache's attention matmuls (fp32 alone, a bf16 cache) is refused there
    dep.attention_compute_dtype  # noqa: B018 (raises, naming the peaks the record has)
    ridge_batch = dep.dense_ridge_batch
    ranks = dep.data_parallel_size
    steps = () if not worked else (
        *stage_steps(dep, s, pool),
        *reserved_steps(dep, pool, s),
        pool_step(dep, pool, s),
        *state_pool_steps(dep, pool, s),
        conversations_step(dep, pool, s, context, n // ranks, per_seq),
        *rank_steps(dep, n),
        *start_steps(pool, dep, context),
        *dense_ridge_steps(dep),
        ridge_batch_step(dep),
    )
    return FitReport(dep, s, pool, context, target, n, per_seq, ridge_batch, (), steps,
                     fit_host=fit_host, fit_margin_bytes=fit_margin_bytes)
