"""StepTimer: step_cost's time for one deployment and engine, remembered for a simulator.

The simulator asks for millions of step times whose batches differ only in their
contexts; this keeps what does not depend on them per token and row count.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from ridgeline.attention_span import Span, layer_span
from ridgeline.cost import (
    DCP_EXCHANGE,
    IDEAL,
    INDEXER_OP,
    AttentionLoad,
    BatchShape,
    Seq,
    StepRates,
    attention_flops_bytes,
    attention_rates,
    attention_windows,
    decode_kv_tokens,
    graph_mode,
    indexer_work,
    layer_kinds,
    rank_shape,
    shape_of,
    shape_time_s,
    state_work,
    step_terms,
)
from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile
from ridgeline.launches import deployment_matmuls, moe_layers
from ridgeline.layouts import ATTENTION_MIXERS, LINEAR, MAMBA
from ridgeline.sparse_attention import sparse_topk

# The step shapes whose CUDA-graph decision the timer remembers (``_mode``) before it starts
# over: every (tokens, rows) a run meets had been kept, 99,167 of them after 200,000 chat
# requests, so memory grew with the run (46 MiB at 100,000 requests, 84 at a million, against
# 30 flat before); the decode shapes that recur are met again at once.
MODES_REMEMBERED = 1 << 15


class StepTimer:
    """shape_time_s of one deployment and engine, for a simulator's millions of steps.

    A step's weight matmuls, elementwise work and collectives depend on its token count
    alone (under LoRA its rows too: ``_adapter_rows``), and the LM head on its sequence
    count alone: both are computed once per count from step_terms and remembered. Only
    attention and recurrent state read the batch's contexts; they are evaluated on every
    call. Equal to shape_time_s (tested).
    """

    def __init__(self, dep: Deployment, profile: EngineProfile = IDEAL) -> None:
        self.dep, self.profile = dep, profile
        # partial offload: steps priced whole by shape_time_s (its host terms), not remembered
        self._exact = dep.offload is not None
        rate = self._rate = StepRates(dep, profile)
        self._prompt_rate = StepRates(dep, profile, prompt=True)  # its experts' own rate
        # whether a prompt step's experts cost more (a MoE on an engine with a slowdown):
        # where not, every step's context-free work is remembered under one key
        self._prompt_priced = self._prompt_rate.expert_slowdown != rate.expert_slowdown
        self._p, self._w = rate.flops_per_s, rate.bytes_per_s
        self._pa = rate.flops_rate("attention")  # QKᵀ and PV at the cache's rate
        self._pi = rate.flops_rate(INDEXER_OP)  # a sparse model's indexer, fp8
        layers, matmuls, routed = dep.model.num_layers, deployment_matmuls(dep), \
            moe_layers(dep.model)
        self._overhead = (profile.overhead_s(layers, False, matmuls, routed),
                          profile.overhead_s(layers, True, matmuls, routed))
        kinds = layer_kinds(dep)
        self._attention = [(layer_span(layer), n) for layer, n in kinds
                           if layer.mixer in ATTENTION_MIXERS]
        self._states = [(layer, n) for layer, n in kinds if layer.mixer in (LINEAR, MAMBA)]
        # (tokens, experts priced as a prompt step's: cost.experts_prompt, adapter rows)
        self._by_tokens: dict[tuple[int, bool, int], float] = {}
        self._by_rows: dict[int, float] = {}
        # (a rank's tokens, every rank's, experts priced as a prompt step's, adapter rows)
        self._by_gathered: dict[tuple[int, int, bool, int], float] = {}
        self._by_queries: dict[int, float] = {}  # -dcp's exchange by its query tokens
        # (tokens, rows, graphed) -> (ungraphed, tokens its matmuls run): cost.graph_mode's
        self._modes: dict[tuple[int, int, bool | None], tuple[bool, int]] = {}
        self.modes_remembered = MODES_REMEMBERED
        self._rates = attention_rates(dep)
        self.windows = attention_windows(dep)
        self._topk = sparse_topk(dep.model)  # a sparse layer attends to its window's load
        self.full_attention = all(w is None for w in self.windows)
        self._attention_layers = sum(n for _, n in self._attention)
        self._decode_base: dict[int, tuple[float, int]] = {}
        # a data-parallel rank's decode step: (its decodes, every rank's) -> its time by context
        self._rank_decode: dict[tuple[int, int, bool], Callable[[int], float]] = {}
        # every attention layer of one kind, full attention: a decode step's time is
        # decode_time_s's, its context-free part remembered (``rows_time_s``)
        self._one_full = self.windows == (None,) and [w for w, _ in self._attention] == [None]

    def _terms_time(self, tokens: int, rows: int, per_row: bool, all_tokens: int = 0,
                    prompt: bool = False) -> float:
        zero = tuple(AttentionLoad(w, 0.0, 0.0, 0.0) for w in self.windows)
        terms = step_terms(self.dep, BatchShape(tokens, rows, zero, all_tokens))
        context_free = [(name, flops, nbytes, count) for name, flops, nbytes, count in terms.work
                        if (name == "lm head") == per_row
                        and name not in ("attention", INDEXER_OP, "recurrent state")]
        rate = self._prompt_rate if prompt else self._rate
        total: float = sum(count * rate.op_time_s(name, f, b, rows if per_row else tokens)
                           for name, f, b, count in context_free)
        # the collectives go with the tokens; -dcp's exchange with its queries (dcp_exchange_s)
        return total + sum(t for name, t in terms.link if name != DCP_EXCHANGE and not per_row)

    def dcp_exchange_s(self, queries: int) -> float:
        """-dcp's exchange over every attention layer for ``queries`` query tokens on the
        decode path (as cost.step_terms prices it for a shape: its rows, or a verify shape's
        tokens): a plain decode's one a row, a speculative verify row's 1 + drafts, which
        vLLM's MLA decode kernels take as one uniform decode (reorder_batch_threshold
        1 + num_speculative_tokens), every query gathered and every output scattered."""
        if self.dep.decode_context_parallel_size == 1:
            return 0.0
        t = self._by_queries.get(queries)
        if t is None:
            zero = tuple(AttentionLoad(w, 0.0, 0.0, 0.0) for w in self.windows)
            terms = step_terms(self.dep, BatchShape(1, queries, zero))
            t = self._by_queries[queries] = sum(
                t for name, t in terms.link if name == DCP_EXCHANGE)
        return t

    def _adapter_rows(self, rows: int) -> int:
        """The rows a step's per-token terms are priced at: 1, but the step's own where a
        request names a LoRA adapter, whose part reads the adapters of min(rows, slots) and
        runs the lm_head's on the logits rows (lora_step.lora_step_work)."""
        lora = self.dep.lora
        return rows if lora is not None and lora.active(rows) else 1

    def _mode(self, tokens: int, rows: int, graphed: bool | None) -> tuple[bool, int]:
        """Whether the step runs without CUDA graphs, and the tokens its weight matmuls run
        (padded up to a captured size): cost.graph_mode's decision, remembered. graphed
        False: a prompt step's overhead, unpadded; True: a speculative verify batch."""
        key = (tokens, rows, graphed)
        mode = self._modes.get(key)
        if mode is None:
            if graphed is False:
                mode = (True, tokens)
            else:
                ungraphed, priced = graph_mode(self.dep, BatchShape(
                    tokens, rows, (), verify=bool(graphed)), self.profile)
                mode = (ungraphed, priced.tokens)
            if len(self._modes) >= self.modes_remembered:  # a long run meets more shapes
                self._modes.clear()
            self._modes[key] = mode
        return mode

    def _context_free(self, tokens: int, rows: int, graphed: bool | None = None,
                      all_tokens: int = 0, any_rank_prompt: bool = False) -> float:
        """Everything but attention: per-token and per-row work, overheads, state. graphed:
        a decode step's overhead (CUDA graphs) or a prompt step's; by default, whether every
        row has one token, and a decode above the engine's largest captured batch runs
        ungraphed, one below it padded (``_mode``). all_tokens: with data-parallel attention,
        every rank's tokens, which the gathered layers and the exchange run on (0:
        ``tokens``); any_rank_prompt: some rank's include prompt tokens, the experts priced as
        a prompt step's (cost.experts_prompt), the overhead still this rank's own."""
        prompt = tokens > rows if graphed is None else not graphed
        experts = (prompt or (any_rank_prompt and not graphed)) and self._prompt_priced
        real = tokens
        ungraphed, tokens = self._mode(tokens, rows, graphed)
        adapters = self._adapter_rows(rows)
        if all_tokens and all_tokens != tokens:
            fixed = self._by_gathered.get((tokens, all_tokens, experts, adapters))
            if fixed is None:
                fixed = self._by_gathered[(tokens, all_tokens, experts, adapters)] = \
                    self._terms_time(tokens, adapters, False, all_tokens, experts)
        elif (fixed := self._by_tokens.get((tokens, experts, adapters))) is None:
            fixed = self._by_tokens[(tokens, experts, adapters)] = self._terms_time(
                tokens, adapters, per_row=False, prompt=experts)
        head = self._by_rows.get(rows)
        if head is None:
            head = self._by_rows[rows] = self._terms_time(1, rows, per_row=True)
        # a verify batch's every token is a decode query; a prompt chunk's row gathers one
        head += self.dcp_exchange_s(real if graphed else rows)
        total = fixed + head + self._overhead[ungraphed]
        if self._states:
            p, w = self._p, self._w
            shape = BatchShape(tokens, rows, ())
            for layer, count in self._states:
                flops, nbytes = state_work(self.dep, layer, shape)
                total += count * max(flops / p, nbytes / w)
        return total

    def time_s(self, shape: BatchShape, graphed: bool | None = None) -> float:
        """The step's time; graphed: a speculative verify batch (1 + drafts tokens a row),
        which vLLM runs as a uniform decode in its CUDA graphs (gpu_model_runner.py)."""
        graphed = True if shape.verify else graphed
        if self._exact:
            return shape_time_s(self.dep, shape._replace(verify=True) if graphed else shape,
                                self.profile)
        total = self._context_free(shape.tokens, shape.sequences, graphed, shape.all_tokens,
                                   shape.any_rank_prompt)
        tokens = self._mode(shape.tokens, shape.sequences, graphed)[1]  # padding's queries
        p, w = self._pa, self._w
        if self._attention:
            loads = {a.window_tokens: a for a in shape.attention}
            capped = loads[self._topk] if self._topk is not None else None
            for window, count in self._attention:
                flops, nbytes = attention_flops_bytes(self._rates, loads[window], tokens, capped)
                total += count * max(flops / p, nbytes / w)
                if capped is not None:  # a sparse layer's indexer, at its own rate
                    flops, nbytes = indexer_work(self._rates, loads[window])
                    total += count * max(flops / self._pi, nbytes / w)
        return total

    def decode_time_s(self, decodes: int, decode_context: int) -> float:
        """bulk_time_s with no chunks (full attention): a simulator's decode-only steps, the
        context-free part remembered per batch size."""
        if self._exact:
            return self.bulk_time_s(decodes, decode_context)
        remembered = self._decode_base.get(decodes)
        if remembered is None:  # (the context-free time, the tokens its matmuls run)
            remembered = self._decode_base[decodes] = (self._context_free(decodes, decodes),
                                                       self._mode(decodes, decodes, None)[1])
        base, tokens = remembered
        keys = float(decode_context + decodes)
        load = AttentionLoad(None, keys, 0.0, decode_kv_tokens(keys, decodes))
        flops, nbytes = attention_flops_bytes(self._rates, load, tokens)
        return base + self._attention_layers * max(flops / self._pa, nbytes / self._w)

    def rows_time_s(self, decodes: list[int], chunks: Sequence[Seq]) -> float:
        """time_s of one rank's step of one-token sequences, each given by its cached tokens
        (``decodes``), and multi-token ``chunks``: a step of decodes alone under one kind of
        full attention as decode_time_s times it (the same terms, summed the same way)."""
        if not chunks and self._one_full:
            return self.decode_time_s(len(decodes), sum(decodes))
        return self.time_s(rank_shape(self.windows, decodes, chunks))

    def rank_decode_time_s(self, decodes: int, decode_context: int, all_tokens: int) -> float:
        """time_s of one data-parallel rank's step of ``decodes`` one-token sequences whose
        cached contexts sum to ``decode_context`` (full attention), every rank's step decodes
        alone, ``all_tokens`` of them: the shape rank_shape gives the rank's rows, the same
        integers summed, so the same time to the last digit."""
        return self.rank_decode_times(decodes, all_tokens)(decode_context)

    def rank_decode_times(self, decodes: int, all_tokens: int, any_rank_prompt: bool = False
                          ) -> Callable[[int], float]:
        """``rank_decode_time_s`` of ``decodes`` and ``all_tokens`` as a function of the summed
        context, what does not depend on it read once: a run of lock-step decode steps
        (sim/data_parallel.py) asks each busy rank's every step. any_rank_prompt: another
        rank's batch has a prompt chunk (the shape's ``any_rank_prompt``)."""
        key = (decodes, all_tokens, any_rank_prompt)
        times = self._rank_decode.get(key)
        if times is None:
            times = self._rank_decode[key] = self._rank_decode_times(*key)
        return times

    def _rank_decode_times(self, decodes: int, all_tokens: int, any_rank_prompt: bool
                           ) -> Callable[[int], float]:
        if self._exact:
            def exact_s(decode_context: int) -> float:
                keys = float(decode_context + decodes)
                return self.time_s(shape_of(self.windows, decodes, lambda _: keys, ())._replace(
                    all_tokens=all_tokens, any_rank_prompt=any_rank_prompt))
            return exact_s
        # time_s's terms for that shape, summed in its order, the context-free part remembered
        base = self._context_free(decodes, decodes, None, all_tokens, any_rank_prompt)
        if not self._attention:
            return lambda decode_context: base
        rates, pa, w = self._rates, self._pa, self._w
        tokens = self._mode(decodes, decodes, None)[1]
        counts = [count for _, count in self._attention]  # (full attention: each reads the load)

        def time_s(decode_context: int) -> float:
            keys = float(decode_context + decodes)
            load = AttentionLoad(None, keys, 0.0, decode_kv_tokens(keys, decodes))
            flops, nbytes = attention_flops_bytes(rates, load, tokens)
            term = max(flops / pa, nbytes / w)
            total = base
            for count in counts:
                total += count * term
            return total
        return time_s

    def keys_time_s(self, decodes: int, keys: Mapping[Span, float],
                    chunks: Sequence[Seq] = ()) -> float:
        """time_s of ``decodes`` one-token sequences reading ``keys[span]`` keys in all
        per attention span (a window or a chunk capping each sequence's), plus ``chunks``."""
        return self.time_s(shape_of(self.windows, decodes, keys.__getitem__, chunks))

    def bulk_time_s(self, decodes: int, decode_context: int, chunks: Sequence[Seq] = ()) -> float:
        """time_s of ``decodes`` one-token sequences whose cached contexts sum to
        ``decode_context``, plus multi-token ``chunks``: what a simulator that keeps its
        decodes as a count and a sum can ask. Full attention (a window needs keys_time_s);
        decodes alone under one kind of it: decode_time_s (``rows_time_s``: the same terms)."""
        if not chunks and self._one_full and not self._exact:
            return self.decode_time_s(decodes, decode_context)
        keys = float(decode_context + decodes)
        return self.time_s(shape_of(self.windows, decodes, lambda _: keys, chunks))


# the timers one planning search's simulations share (``SharedTimers``), innermost last
_SHARED: list[dict[tuple[Deployment, EngineProfile], StepTimer]] = []


class SharedTimers:
    """Within ``with SharedTimers():``, every simulator of one deployment and profile reads one
    StepTimer (``step_timer``), its remembered context-free times computed once for them all:
    a plan's checks simulate each candidate at several replica counts and draws, and a
    data-parallel replica runs a simulator a rank. A StepTimer holds nothing but what
    step_cost gives for its deployment and profile, so sharing it changes no time. Outside,
    each simulator keeps its own (nothing outlives the search)."""

    def __enter__(self) -> SharedTimers:
        _SHARED.append({})
        return self

    def __exit__(self, *exc: object) -> None:
        _SHARED.pop()


def step_timer(dep: Deployment, profile: EngineProfile) -> StepTimer:
    """The StepTimer of ``dep`` under ``profile``: the one the search shares
    (``SharedTimers``), or a new one."""
    if not _SHARED:
        return StepTimer(dep, profile)
    timers = _SHARED[-1]
    timer = timers.get((dep, profile))
    if timer is None:
        timer = timers[(dep, profile)] = StepTimer(dep, profile)
    return timer


def drafter_timer(dep: Deployment, profile: EngineProfile, timer: StepTimer) -> StepTimer:
    """The timer a speculative drafter's passes are a share of: the target's (``timer``), less
    --cpu-offload-gb's host-link read, which an EAGLE head or draft model, its weights on the
    GPU, never makes."""
    if dep.cpu_offload is None:
        return timer
    return step_timer(replace(dep, cpu_offload=None), profile)
