"""`ridgeline simulate`: what users see under a load — percentiles, rates, goodput, batch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ridgeline.candidate import ENGINE_KNOB_NAMES
from ridgeline.cpu_offload import cpu_offload_json, cpu_offload_note
from ridgeline.data_parallel import independent_ranks
from ridgeline.deployment import Deployment
from ridgeline.engine_versions import engine_release
from ridgeline.explain import Quantity, Step, q, step
from ridgeline.render import table
from ridgeline.reports.profile_story import matmul_qs, overhead_formula, overhead_q, share_qs
from ridgeline.reports.simulate_cautions import batch_past_fit, itl_mean_past_p99
from ridgeline.reports.simulate_engine import _engine_line, _policy, _ranks_together, all_ranks
from ridgeline.reports.simulate_overload import (
    COMPUTE_BOUND,
    Overload,
    _why_stopped,
    backlog_evidence,
    burst_line,
    fill_dict,
    gauges_at,
    growth_evidence,
    overload_rates,
)
from ridgeline.serving_load import SLO_PERCENTILE, itl_kept
from ridgeline.sim.config import SimConfig
from ridgeline.sim.histogram import Histogram
from ridgeline.sim.metrics import ClientWaits, SimResult
from ridgeline.sim.overload import BURST_READ, burst, growth
from ridgeline.sim.scheduler import FULL_BUDGET
from ridgeline.sim.workload import LoadAsked
from ridgeline.units import (
    fmt_latency,
    fmt_latency_limit,
    latency_figure,
    latency_unit,
    plural,
)


def _client_lines(client: ClientWaits, served_req_s: float) -> list[str]:
    """A capped open loop's client: the requests that waited for a seat, and, where a backlog
    stood when the last came, that the cap held the load back."""
    if not client.cap or not client.waited:
        return []
    lines = [f"client: {client.waited:,} of {client.requests:,} requests came while "
             f"{client.cap:,} were in flight and waited for a seat (mean "
             f"{client.wait_sum_s / client.waited:,.2f} s, longest {client.wait_max_s:,.2f} s) "
             "before they were sent; the latencies above start at the send, as vllm bench "
             "serve's clock does"]
    if client.behind:  # a trace's burst at one instant comes at no finite rate
        come = (f"at {client.offered_req_s:,.2f} req/s" if math.isfinite(client.offered_req_s)
                else "all at once")
        lines.append(f"HELD BACK BY THE CAP: when the last request came, "
                     f"{client.waiting_at_last_arrival:,} waited for a seat: requests come "
                     f"{come} and {client.cap:,} in flight serve "
                     f"{served_req_s:,.2f} req/s, so the waits grow with a longer run (a "
                     "higher --max-concurrency, or fewer requests a second, reads the engine)")
    return lines


def _finite_or_none(x: float) -> float | None:
    """x for --json, null where it is not a number (no request completed)."""
    return x if math.isfinite(x) else None


def _bound_clause(o: Overload, budget_tokens: int, engine: str, ranks: int = 1) -> str:
    """What bounds an overload whose batch never filled, as a clause ending "; " ("" where
    it filled): the token budget (``FULL_BUDGET``: most steps ran it whole, and a larger one
    computes more a second), else its steps' time, said with how many steps the budget
    filled where any did (a compute-bound step only lengthens with a larger budget). Under
    data parallelism (``ranks``), of the ranks' steps, each at a rank's ``budget_tokens``."""
    if o.limit not in (COMPUTE_BOUND, FULL_BUDGET) or (o.limit == FULL_BUDGET
                                                      and o.budget_gain is None):
        return ""
    knob = ENGINE_KNOB_NAMES.get(engine, ENGINE_KNOB_NAMES["vllm"])[1]
    share = f"{o.budget_full_share:.0%}" if o.budget_full_share < 0.995 else ">99%"
    steps = "its ranks' steps" if ranks > 1 else "its steps"
    full = (f"{share} of {steps} ran their whole {budget_tokens:,}-token budget (decodes and "
            "prompt chunks) with requests still waiting")
    gain = "" if o.budget_gain is None else \
        f"a step of twice the budget computes {o.budget_gain:.2f}× the tokens a second"
    if o.limit == FULL_BUDGET:
        return (f"token-budget-bound: {full}, and {gain}, so the budget, not its KV cache, "
                f"its seats or the GPU's compute, sets what it serves: raise "
                f"--max-num-batched-tokens (the engine's {knob}); ")
    if o.budget_full_share > 0 and o.budget_gain is not None:
        return (f"compute-bound: {full}, but {gain}, so a larger budget would lengthen its "
                "steps about as much: its steps are too slow for the arrivals rather than its "
                "memory short; ")
    return ("compute-bound: no step found its KV cache, its seats or its token budget full, "
            "its steps too slow for the arrivals rather than its memory short; ")


def _offered_past_served(o: Overload, budget_tokens: int, engine: str, ranks: int = 1) -> str:
    """The overload in tokens and its growth, as a clause ending "; " ("" where no request
    completed, or it serves as fast as they come): offered tok/s past served, the requests in
    the engine growing by the difference, TTFT with them where they queue (where the running
    batch took them on, its steps slow instead, and the clause after says when TTFT follows:
    Llama-3.1-8B on an H100 at 20 req/s of 2,000 / 300 tokens held TTFT at p99 0.25 s beside
    "TTFT grows without bound"); where no step found its batch full (``COMPUTE_BOUND``), said
    to be its steps' time, not its memory or seats. Llama-3.2-1B on an L4 at 300 req/s of 32
    / 64 tokens, --max-num-seqs 2048: "offered 28,327 tok/s (prompt + output) > served 22,560
    tok/s, so the requests in the engine grow by ~60.1 req/s …"."""
    if not (math.isfinite(o.tokens_per_request) and o.backlog_req_s > 0):
        return ""
    bound = _bound_clause(o, budget_tokens, engine, ranks)
    return (f"offered {o.offered_tok_s:,.0f} tok/s (prompt + output) > served "
            f"{o.served_tok_s:,.0f} tok/s, so the requests in the engine grow by "
            f"~{o.backlog_req_s:,.1f} req/s for as long as they arrive"
            + (" and TTFT grows without bound" if o.grew == "queue" else "")
            + f"; {bound}")


def latency_table(rows: dict[str, dict[str, float]],
                  columns: tuple[str, ...] = ("mean", "p50", "p90", "p95", "p99")) -> list[str]:
    """The latencies' table, each row's ``columns`` (seconds) in one unit named in its
    corner: ms, or seconds where an entry reaches 100 s (an overloaded run's TTFT of
    4,144.8 s beside a TPOT of 0.1126 s, not 4,144,765.8 ms), never a unit per row."""
    unit = latency_unit(row[k] for row in rows.values() for k in columns)
    return table([[label, *(latency_figure(row[k], unit) for k in columns)]
                  for label, row in rows.items()], [unit, *columns])


def run_seconds(x: float) -> str:
    """A run's simulated time as the summary line prints it: tenths of a second, or three
    significant figures under one second, so that a short run's rates (requests ÷ this)
    can be repeated from it rather than read as a division by 0.0 s."""
    return f"{x:,.1f}" if x >= 1 else f"{x:.3g}"


def _ms_or_never(x: float) -> str:
    """A latency at a percentile: "never" where more were rejected than the percentile spares,
    "none" where no request has one (TPOT of 1-token outputs)."""
    if math.isnan(x):
        return "none (no request had a second token)"
    return "never (too many rejected)" if math.isinf(x) else fmt_latency(x)


def _share(n: int, total: int) -> str:
    """n of total as a percentage that reads 0% or 100% only when it is exactly that."""
    if not total or n in (0, total):
        return "0%" if not n or not total else "100%"
    pct = 100 * n / total
    return "<0.1%" if pct < 0.1 else ">99.9%" if pct > 99.9 else f"{pct:.1f}%"


FEW_IN_WINDOW = 30  # a --window with fewer completed requests is cautioned


def _none_because(seconds: float) -> str | None:
    """Why a latency at a percentile is not a number, as --json writes it null: 'never'
    (more requests rejected than the percentile spares), 'none' (no request has one)."""
    if math.isinf(seconds):
        return "never"
    return "none" if math.isnan(seconds) else None


@dataclass(frozen=True)
class SimulateReport:
    deployment: Deployment
    config: SimConfig
    result: SimResult
    requests: int
    load: str
    slo_ttft_s: float | None
    slo_tpot_s: float | None
    cautions: tuple[str, ...] = ()  # what the step times leave out
    percentile: float | None = None  # --percentile: also read there, rejections as misses
    lanes: int = 1  # pipeline parallel: micro-batch lanes, each with ``config`` (sim/lanes.py)
    engine_config: SimConfig | None = None  # … and the engine's whole pool and seats
    micro_batches: int = 1  # … or vLLM V1: one pool, this many in flight (sim/pipeline.py)
    engine_version: str | None = None  # whose memory rules sized the pool (vLLM: its release)
    usage: str | None = None  # vLLM's usage context: serve (vllm serve) or offline (LLM class)
    model_runner: str | None = None  # vLLM's: V0, V1 or MRV2 (Model Runner V2)
    saturated_req_s: float | None = None  # the most it serves of these requests, batch full
    budget_gain: float | None = None  # twice the token budget's tokens a second over its own
    dispatch: str = ""  # data-parallel attention: how arrivals are dealt over the ranks
    slo_itl_s: float | None = None  # --slo-itl-ms: the run's ITL at the percentile, plan's way
    # fit's count: conversations of max_model_len tokens at once (all ranks), which the
    # running batch may pass (``batch_past_fit``); None: not read
    fit_conversations: int | None = None
    context_asked: bool = False  # --max-model-len given: the batch past fit's count is told
    load_asked: LoadAsked | None = None  # ``load`` in numbers (settings.workload)

    def to_dict(self) -> dict[str, Any]:
        r, d = self.result, self.deployment
        c = self.engine_config or self.config  # the engine's, not a pipeline lane's
        lanes = {"per_lane": {"num_blocks": self.config.num_blocks,
                              "max_num_seqs": self.config.max_num_seqs},
                 "lanes_summed": ["steps", "busy_s"]} if self.lanes > 1 else {}
        # a dense model's ranks, each on its own clock: their steps and busy time summed
        summed = {"ranks_summed": ["steps", "busy_s"]} if independent_ranks(d) else {}
        # the top-level pool, seats and budget are the engine's settings as fit --json gives
        # them (a rank's pool and seats; SGLang's budget the flag it divides over the ranks);
        # data_parallel adds every rank's together
        blocks, seqs, budget = all_ranks(self.config, d.data_parallel_size)
        ranks = {"data_parallel": {
            "data_parallel_size": d.data_parallel_size, "gpus_per_rank": d.rank_gpus,
            "expert_ranks": d.expert_ranks, "dispatch": self.dispatch,
            "per_rank": {"num_blocks": self.config.num_blocks,
                         "max_num_seqs": self.config.max_num_seqs,
                         "max_num_batched_tokens": self.config.max_num_batched_tokens},
            "num_blocks_all_ranks": blocks, "max_num_seqs_all_ranks": seqs,
            "max_num_batched_tokens_all_ranks": budget, **summed}} \
            if d.data_parallel_size > 1 else {}
        return {**lanes,
            "settings": {**ranks, "model": d.model.name, "accelerator": d.accelerator.id,
                         "num_gpus": d.num_gpus, "engine": d.engine,
                         "engine_version": self.engine_version, "usage": self.usage,
                         "model_runner": self.model_runner, "weights": d.weights.label,
                         "kv_dtype": d.kv.id, "load": self.load,
                         "workload": None if self.load_asked is None else
                         self.load_asked.to_dict(),
                         "expert_parallel": d.expert_parallel, "pipeline_lanes": self.lanes,
                         "micro_batches_in_flight": self.micro_batches,
                         "split": ("layer" if d.pipeline_parallel_size > 1 else "tensor")
                         if d.num_gpus > 1 else None,
                         "offload": None if d.offload is None else {
                             "placement": d.offload.describe(d.model),
                             "gpu_layers": d.offload.gpu_layers,
                             "cpu_expert_layers": d.offload.cpu_expert_layers,
                             "experts_last": d.offload.experts_last,
                             "chosen_by_fit": d.offload.chosen_by_fit},
                         **cpu_offload_json(d),
                         "decode_context_parallel_size": d.decode_context_parallel_size,
                         # the scheduler's block; each -dcp rank holds its own share of it
                         "num_blocks": c.num_blocks, "block_size": c.block_size,
                         # SGLang's pool in tokens, its start-up log's max_total_num_tokens,
                         # under fit's name for that figure
                         **({"tokens": c.num_blocks * c.block_size}
                            if d.engine == "sglang" else {}),
                         "block_size_per_dcp_rank":
                             c.block_size // d.decode_context_parallel_size,
                         "overhead_blocks_per_request": c.overhead_blocks,
                         "max_num_seqs": c.max_num_seqs,
                         "max_num_batched_tokens": c.max_num_batched_tokens,
                         **({"long_prefill_token_threshold": c.long_prefill_token_threshold}
                            if c.long_prefill_token_threshold else {}),
                         "ubatch_tokens": c.ubatch_tokens or None,
                         "capacity_policy": _policy(c),
                         "async_scheduling": c.async_scheduling,
                         "max_model_len": c.max_model_len, "prefix_caching": c.prefix_caching,
                         "spec_tokens": c.spec_tokens,  # no drafter: no acceptance to give
                         "spec_acceptance": c.spec_acceptance if c.spec_tokens else None,
                         # in seconds, as every latency in --json (the flags take ms)
                         "slo_ttft_s": self.slo_ttft_s, "slo_tpot_s": self.slo_tpot_s,
                         **({} if self.slo_itl_s is None else {"slo_itl_s": self.slo_itl_s})},
            "requests": self.requests, "completed": r.completed, "rejected": r.rejected,
            "rejected_reasons": dict(r.rec.rejected),
            "rejected_first": dict(r.rec.rejected_first),
            # no SLO given: nothing to meet, so no goodput (it read as every request good)
            "good_requests": r.good if self._has_slo else None,
            "prompt_tokens_mean": r.rec.prompt_tokens / r.completed if r.completed else None,
            "shared_prefix_tokens_mean": (r.rec.shared_prefix_tokens / r.rec.grouped
                                          if r.rec.grouped else None),
            # requests arriving after another of their prefix group: the ones that can reuse it
            "prefix_followers": r.rec.prefix_followers if r.rec.grouped_arrived else None,
            "cautions": list(self.cautions),
            "duration_s": r.duration_s, "steps": r.steps, "busy_s": r.busy_s,
            "ttft_s": r.percentiles("ttft"), "tpot_s": r.percentiles("tpot"),
            "itl_s": r.percentiles("itl"), "e2e_s": r.percentiles("e2e"),
            "queue_s": r.percentiles("queue"),
            "request_rate_req_s": r.request_rate_req_s, "output_tok_s": r.output_tok_s,
            "output_tok_s_per_gpu": r.output_tok_s / d.num_gpus,
            "output_tokens": r.rec.output_tokens,  # output_tok_s's count, over the run
            # vllm bench serve's total token throughput: prompts (whole, prefix-cache hits
            # included) and outputs of the completed requests, over the same span
            "total_tok_s": r.total_tok_s, "prompt_tokens": r.rec.prompt_tokens,
            # the span the four rates above are over, as the text's "over the whole run":
            # the simulated time (duration_s), the fill and the drain included, a --window or not
            "rates_over": "simulated_time", "rates_over_s": r.duration_s,
            "goodput_req_s": r.goodput_req_s if self._has_slo else None,
            # goodput's denominator: the window's span of arrivals, or the simulated time; a
            # window's is another span than the rates', and its goodput may pass their
            # request rate (the drain's slow finishes are outside it)
            "goodput_over": None if not self._has_slo else
            "window_arrivals" if self.has_window else "simulated_time",
            "goodput_over_s": None if not self._has_slo else self._goodput_span_s,
            "at_percentile": None if self.percentile is None else {
                "percentile": self.percentile, "ttft_s": r.latency_s_at("ttft", self.percentile),
                "tpot_s": r.latency_s_at("tpot", self.percentile),
                # what a null above means: never reached (more rejected than the percentile
                # spares), or none to have (1-token outputs have no TPOT)
                **{f"{name}_none_because": _none_because(r.latency_s_at(name, self.percentile))
                   for name in ("ttft", "tpot")},
                "rejected_counted": r.rec.windowed_rejected},
            "window_s": list(r.rec.window_s) if self.has_window else None,
            **({} if self.itl_verdict is None else {"itl_slo": self.itl_verdict}),
            "windowed_requests": r.rec.windowed if self.has_window else None,
            "keeps_up": self.kept_up,
            "client_cap": None if not r.rec.client.cap else {
                "max_in_flight": r.rec.client.cap, "offered_req_s": r.rec.client.offered_req_s,
                "waited": r.rec.client.waited, "wait_mean_s": r.rec.client.wait_sum_s
                / r.rec.client.waited if r.rec.client.waited else 0.0,
                "wait_max_s": r.rec.client.wait_max_s,
                "waiting_at_last_arrival": r.rec.client.waiting_at_last_arrival,
                "held_back": r.rec.client.behind},
            # when the batch filled: seen by the run, or its estimate (null: neither read)
            "batch_filled": fill_dict(r.rec),
            "overloaded": None if (o := self.overloaded) is None else {
                "offered_req_s": o.offered_req_s, "served_req_s": o.served_req_s,
                # offered: the arrivals over their span, first to last; served: the rates'
                "offered_over": "arrivals", "served_over": "simulated_time",
                "waiting_at_last_arrival": o.waiting, "reading": o.reading, "grew": o.grew,
                "saturated_req_s": o.saturated_req_s,
                # the same in tokens (prompt + output: the completed requests' mean a
                # request), the served side the most it was read to serve, and how fast the
                # requests in the engine grow: offered − that most
                "tokens_per_request": _finite_or_none(o.tokens_per_request),
                "offered_tok_s": _finite_or_none(o.offered_tok_s),
                "served_tok_s": _finite_or_none(o.served_tok_s),
                "backlog_req_s": o.backlog_req_s,
                # what held the batch: the fill's ("kv_cache", "seats", "token_budget"), or
                # "compute" where no step found it full (its steps' time bounds what it serves)
                "limit": o.limit, **self._backlog_dict(),
                **self._growth_dict(o)},
            "stopped_early": {"at_s": r.duration_s, "steps": r.steps,
                              "unfinished": self.requests - r.completed - r.rejected,
                              "reading": r.rec.stop_reading, "reason": _why_stopped(r)}
            if r.rec.stopped_early else None,
            # the requests in the running batch (mean, max), under observe's and utilization's
            # name, vLLM's own (its num_requests_running gauge)
            "running": r.running_batch, "preemptions": r.preemptions,
            # fit's conversations of max_model_len tokens at once, under fit's name, which the
            # running batch may pass (shorter requests, admitted on their prompt): not a cap
            "conversations": self.fit_conversations,
            "prefix_cache_hit_blocks": r.prefix_hit_blocks,
            "prefix_cache_hit_blocks_readmitted": r.rec.readmit_hit_blocks,
            "time_series": [{"t_s": t, "running": n, "waiting": w, "kv_usage": u,
                             "preemptions": p} for t, n, w, u, p in r.rec.series.points],
        }

    def _backlog_dict(self) -> dict[str, Any]:
        """The backlog test's counts and the queueing trend, for --json (empty where the
        test did not read the run)."""
        rec = self.result.rec
        behind = rec.falls_behind()
        if behind is None:
            return {}
        start, last = rec.steady_s
        trend = rec.queue_trend(start, last)
        return {"past_fill_s": [start, last], "arrived_past_fill": behind[0],
                "left_past_fill": behind[1],
                "queue_mean_s_halves": None if trend is None else list(trend)}

    def _growth_dict(self, o: Overload) -> dict[str, Any]:
        """The requests in the engine over the second half of the arrivals, and a burst's
        queue, for --json (each null where not read)."""
        r = self.result
        g = growth(r.rec)
        found = burst(r.rec) if o.reading == BURST_READ else None
        return {"growth": None if g is None else {
                    "from_s": g.start_s, "until_s": g.end_s, "arrived": g.arrived,
                    "grown": g.grown, "running": [gauges_at(r, g.start_s)[0],
                                                  gauges_at(r, g.end_s)[0]]},
                "burst": None if found is None else {
                    "at_s": found.at_s, "waiting": found.waiting, "arrived": found.arrived,
                    "cleared_s": _finite_or_none(found.cleared_s),
                    "mean_service_s": r.rec.mean_service_s}}

    def text_lines(self) -> list[str]:
        r, c, d = self.result, self.config, self.deployment
        layout = "".join(f"{part}; " for part in d.layout_parts)  # one parenthesis
        # the release the pool was sized as, named where none was given too, as fit's header
        engine = engine_release(d.engine, self.engine_version)
        lines = [f"{d.model.name} on {d.num_gpus} x {d.accelerator.id} ({layout}{engine}"
                 f", weights {d.weights.label}, KV {d.kv.id}"
                 + (", experts spread over the GPUs (EP)" if d.expert_parallel else "")
                 + (f"; {d.offload.describe(d.model)}" if d.offload else "")
                 + cpu_offload_note(d) + f"): {self.load}",
                 _engine_line(c, d.engine, (self.engine_config or c).async_scheduling)
                 + (f" — in each of {self.lanes} pipeline lanes (a micro-batch "
                                    "per stage in flight), the requests dealt among them in "
                                    "turn; their outcomes added up" if self.lanes > 1 else "")
                 + (f" — one pool and scheduler for up to {self.micro_batches} micro-batches "
                    "in flight, each through every stage (vLLM V1's batch queue)"
                    if self.micro_batches > 1 else "")
                 + (f" — in each of the {d.data_parallel_size} data-parallel ranks (its own "
                    f"scheduler, queue and pool), arrivals dealt {self.dispatch}; "
                    + ("the ranks step together, an idle one joining with a dummy pass; "
                       if not independent_ranks(d) else
                       "each rank steps on its own clock, as vLLM runs a dense model's ranks; ")
                    + _ranks_together(c, d.data_parallel_size, d.engine)
                    if d.data_parallel_size > 1 else ""),
                 ""]
        lines += latency_table({label: r.percentiles(name) for name, label in (
            ("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "end-to-end"),
            ("queue", "queueing"))})
        skewed = itl_mean_past_p99(r.percentiles("itl"), r.preemptions)
        if skewed:  # a mean past the p99 reads as a misprint unless said
            lines.append(skewed)
        batch = r.running_batch
        lines += [
            "",
            f"completed {r.completed:,} of {self.requests:,} {plural(self.requests, 'request')} "
            f"in {run_seconds(r.duration_s)} s ({r.steps:,} "
            + (("micro-batch" if r.steps == 1 else "micro-batches") if self.micro_batches > 1
               else plural(r.steps, "step"))
            + (f", the {d.data_parallel_size} ranks' summed" if independent_ranks(d) else "")
            + "): "
            f"{r.request_rate_req_s:,.2f} req/s, {r.output_tok_s:,.0f} output "
            f"tok/s ({r.output_tok_s / d.num_gpus:,.0f} per GPU), {r.total_tok_s:,.0f} total "
            "tok/s (prompt + output, as vllm bench serve's Total Token throughput)"
            + ("; over the run until it stopped early" if r.rec.stopped_early else
               "; over the whole run, the fill and the drain included"
               + (" (the window's goodput below is per second of its arrivals)"
                  if self.has_window else " (`--window` reads the steady state)")),
            "running batch"
            + (f", the {d.data_parallel_size} ranks together" if d.data_parallel_size > 1
               else "")
            + f"{_running_metric(d.engine)}: mean {batch['mean']:,.1f}, max "
            f"{batch['max']:,.0f}; preemptions {r.preemptions:,}; prefix-cache hits "
            + (f"{r.prefix_hit_blocks:,} tokens" if c.block_size == 1 else
               f"{r.prefix_hit_blocks:,} blocks ({r.prefix_hit_blocks * c.block_size:,} tokens)")
            + _readmitted(r.rec.readmit_hit_blocks, r.prefix_hit_blocks, c.block_size),
        ]
        swamped = self.overloaded
        found = burst(r.rec) if swamped is not None and swamped.reading == BURST_READ else None
        if found is not None:
            lines.append(burst_line(r, found))
        elif swamped is not None:
            lines.append(self._overload_line(swamped))
        lines += _client_lines(r.rec.client, r.request_rate_req_s)
        if r.rec.stopped_early:
            unfinished = self.requests - r.completed - r.rejected
            lines.append(f"STOPPED EARLY at {r.duration_s:,.0f} s simulated ({r.steps:,} "
                         f"steps): {_why_stopped(r)}; {unfinished:,} of the "
                         f"{self.requests:,} "
                         "requests did not finish here (queued, running or yet to arrive), and "
                         f"the latencies above are of the {r.completed:,} that did, mostly the "
                         "first to arrive, so they read short of a full run's")
        past_fit = batch_past_fit(d.engine, batch["max"], self.fit_conversations,
                                  (self.engine_config or self.config).max_model_len,
                                  r.preemptions, self.context_asked)
        if past_fit:
            lines.append(past_fit)
        if batch["max"] == 0 and r.completed:
            lines.append("  (the gauge is read after each step, once the requests it finished "
                         "have left, as vLLM's scheduler reads it: a 1-token request leaves "
                         "within the step that prefills it)")
        rec = r.rec
        if rec.grouped:
            cached = (self.engine_config or self.config).prefix_caching
            find = ("whose prefix they can find cached" if cached else
                    "whose prefix they would find cached, but prefix caching is off: each "
                    "computes its prompt whole")
            lines.append(f"shared prefixes: {rec.prefix_followers:,} of the "
                         f"{rec.grouped_arrived:,} requests follow an earlier request of their "
                         f"group (the others are their group's first), {find}; a completed "
                         "request's prefix is a mean "
                         f"{rec.shared_prefix_tokens / rec.grouped:,.0f} of its mean "
                         f"{rec.grouped_prompt_tokens / rec.grouped:,.0f} prompt tokens (the "
                         "prefix is part of the prompt; a shorter prompt shares all but its "
                         "last token)")
        lines += self._window_lines()
        if self.percentile is not None:
            lines.append(self._percentile_line())
        if self.has_window and (self.slo_ttft_s is not None or self.slo_tpot_s is not None):
            low, high = rec.measured_window_s
            lines.append(f"goodput: {r.goodput_req_s:,.2f} req/s meet the SLO ({r.good:,} requests "
                         f"over the window's {high - low:,.6g} s of arrivals: "
                         f"{_share(r.good, rec.windowed)} of the {rec.windowed:,} completed in "
                         "it)")
        elif self.slo_ttft_s is not None or self.slo_tpot_s is not None:
            lines.append(f"goodput: {r.goodput_req_s:,.2f} req/s meet the SLO ({r.good:,} requests: "
                         f"{_share(r.good, r.completed)} of completed, "
                         f"{_share(r.good, self.requests)} of all {self.requests:,})")
        if self.slo_itl_s is not None:
            lines.append(self._itl_slo_line())
        return lines + self._rejected_lines() + [f"caution: {c}" for c in self.cautions]

    def _overload_line(self, o: Overload) -> str:
        """OVERLOADED: the rates, the evidence, and what grows — the queue, or the running
        batch that took the excess on (each step slower as it grows)."""
        r = self.result
        evidence = [e for e in (backlog_evidence(r),
                                growth_evidence(r) if o.grew == "batch" else "") if e]
        waiting = f"{o.waiting:,} still waiting when the last arrived"
        # the replay's rate is a ceiling only where it is above the run's: the run's own, its
        # drain in its span, can read a little higher (12.44 served beside 12.33 "at most")
        most = "" if o.saturated_req_s is None else (
            f", {o.saturated_req_s:,.2f} "
            + ("at most" if o.saturated_req_s >= o.served_req_s else "with its batch full")
            + " (these requests sent at once, its batch as full as its pool and seats allow)")
        grows = ("the queue grows for as long as they arrive" if o.grew == "queue" else
                 "the running batch takes on the excess, each step slower as it grows, until "
                 + ("its steps' token budget, its seats or its pool stop it"
                    if o.limit == COMPUTE_BOUND else "its pool is full")
                 + " and the queue grows, TTFT with it, without bound")
        return (f"OVERLOADED: requests arrive at {o.offered_req_s:,.2f} req/s and the engine "
                f"serves about {o.served_req_s:,.2f} req/s, busy throughout{most}: "
                + _offered_past_served(o, self._rank_budget_tokens, self.deployment.engine,
                                       self.deployment.data_parallel_size)
                + (f"{'; '.join(evidence)} ({waiting})" if evidence else waiting)
                + f"; {grows}, so the latencies above grow with the run's length, not towards "
                "a steady state: lower the rate, or add replicas (`ridgeline plan` sizes them)")

    def _percentile_line(self) -> str:
        """--percentile: the latencies there, the rejected counted as misses (plan's reading)."""
        r, p = self.result, self.percentile
        assert p is not None
        ttft, tpot = r.latency_s_at("ttft", p), r.latency_s_at("tpot", p)
        n = r.rec.windowed_rejected
        counted = (f", the {n:,} rejected counted as misses (as plan reads its checks)" if n
                   else "")
        return f"p{p:.10g}{counted}: TTFT {_ms_or_never(ttft)}, TPOT {_ms_or_never(tpot)}"

    @property
    def itl_verdict(self) -> dict[str, Any] | None:
        """--slo-itl-ms: the run's ITL at the percentile (--percentile, else plan's default)
        and whether it keeps the SLO, judged as plan judges a check (``itl_kept``); None
        without one. Where no chunk followed a first (1-token outputs) there is no ITL to
        judge: ``itl_s`` and ``met`` are null, not measured, rather than a pass."""
        if self.slo_itl_s is None:
            return None
        p = SLO_PERCENTILE if self.percentile is None else self.percentile
        itl = self.result.itl_s_at(p)
        measured = not math.isnan(itl)
        return {"percentile": p, "itl_s": itl if measured else None,
                "slo_itl_s": self.slo_itl_s,
                "met": itl_kept(itl, self.slo_itl_s) if measured else None,
                "chunks": self.result.rec.hist["itl"].total}

    def _itl_slo_line(self) -> str:
        v = self.itl_verdict
        assert v is not None and self.slo_itl_s is not None
        whose = "the window's" if self.has_window else "the run's"
        if v["itl_s"] is None:
            return (f"ITL SLO: not measured: none of {whose} requests streamed a chunk after "
                    "its first token (1-token outputs have no inter-token gap), so the "
                    f"{fmt_latency_limit(self.slo_itl_s)} ITL SLO is neither met nor "
                    "missed")
        reading = fmt_latency(v["itl_s"]) + (" ≤ " if v["met"] else " > ") + \
            fmt_latency_limit(self.slo_itl_s)
        return (f"ITL SLO: p{v['percentile']:.10g} ITL {reading}: "
                + ("met" if v["met"] else "MISSED")
                + f" (over the {v['chunks']:,.0f} streamed chunks of {whose} requests, as plan "
                "judges a check; the run's, not a request's, so goodput leaves it out)")

    @property
    def overloaded(self) -> Overload | None:
        return overload_rates(self.result, self.requests, self.saturated_req_s,
                              self.budget_gain)

    @property
    def _rank_budget_tokens(self) -> int:
        """The token budget one scheduler's step runs under: the engine's (a pipeline lane's
        is its engine's whole), or a data-parallel rank's (``config``, sim.data_parallel.
        rank_config: SGLang's the server's over the ranks)."""
        if self.deployment.data_parallel_size > 1:
            return self.config.max_num_batched_tokens
        return (self.engine_config or self.config).max_num_batched_tokens

    @property
    def _has_slo(self) -> bool:
        return self.slo_ttft_s is not None or self.slo_tpot_s is not None

    @property
    def _goodput_span_s(self) -> float:
        """The seconds goodput is per: the window's span of arrivals (measured_window_s), or
        the simulated time without a window."""
        r = self.result
        if not self.has_window:
            return r.duration_s
        low, high = r.rec.measured_window_s
        return high - low

    @property
    def has_window(self) -> bool:
        """Whether --window chose the requests whose latencies count."""
        return math.isfinite(self.result.rec.window_s[0])

    @property
    def kept_up(self) -> bool | None:
        """Whether the engine kept up with the window's arrivals; None where that cannot be
        read (no window, one reaching into the drain, or too few requests in it). A running
        batch that took the window's excess arrivals on is one filling, unless the run is
        OVERLOADED: then it grows because the engine serves less than arrives (Llama-3.2-1B on
        an H200 at 300 req/s of 200 / 1,000 tokens, --max-num-seqs 4096, serves about 78: no
        request of the 1,422 arriving over 3-8 s finished in it, the batch 914 → 2,318)."""
        rec = self.result.rec
        if self.has_window and (rec.stopped_early or rec.client.behind):
            return False  # cut short, hopelessly behind; or the client's cap held it back
        if not self.has_window or rec.runs_past_arrivals or rec.windowed < FEW_IN_WINDOW:
            return None
        if rec.keeps_up and rec.batch_took_arrivals and self.overloaded is not None:
            return False  # its batch grows as the run's OVERLOADED line says, not one filling
        return rec.keeps_up

    def _window_lines(self) -> list[str]:
        """Which requests the percentiles are of, and whether the engine kept up."""
        if not self.has_window:
            return []
        rec = self.result.rec
        low, high = rec.window_s
        lines = [f"window: the latencies above (ITL their streamed chunks') are of the "
                 f"{rec.windowed:,} completed requests arriving {low:,.6g}–{high:,.6g} s; the "
                 "others warm the engine up and drain it"]
        if rec.windowed < FEW_IN_WINDOW and not rec.stopped_early:
            lines.append(f"  only {rec.windowed:,} requests arrived in it: percentiles and "
                         "goodput resting on so few are noise")
        if rec.stopped_early:
            lines.append("  IT DOES NOT KEEP UP: the run was stopped early, the engine "
                         "hopelessly behind (STOPPED EARLY above)")
        elif rec.runs_past_arrivals:
            first, last = rec.measured_window_s
            lines.append(f"  the window runs past the last arrival ({rec.arrived_s[1]:,.6g} s): "
                         "it holds the drain, where an overloaded engine's backlog "
                         "finishes, so whether it keeps up is not read; goodput is over "
                         f"{first:,.6g}–{last:,.6g} s")
        elif self.kept_up is None:
            lines.append(f"  {rec.windowed:,} requests arrived in the window: too few to read "
                         "whether the engine keeps up")
        elif self.kept_up:
            lines.append(f"  it keeps up{self._keep_up_caveat()}: {rec.finished_in_window:,} "
                         f"requests finished in the window, {rec.windowed:,} arrived in it"
                         f"{self._excess_clause()}{self._growth_clause()}")
        else:
            lines.append(f"  IT DOES NOT KEEP UP: {rec.finished_in_window:,} requests finished in "
                         f"the window, {rec.windowed:,} arrived in it{self._growth_clause()}, "
                         "and a longer run reads longer latencies")
        return lines

    def _keep_up_caveat(self) -> str:
        """What qualifies "it keeps up" where more arrived in the window than finished in it:
        within the noise (``keep_up_slack``), so the counts alone cannot tell a steady state
        from a slow rise; or past it, the running batch taking the excess on, still filling
        (``batch_took_arrivals``; under overload ``kept_up`` is False instead). "" where no
        more arrived than finished."""
        rec = self.result.rec
        if rec.window_growth[0] <= 0:
            return ""
        return ", its running batch still filling" if rec.batch_took_arrivals \
            else " within the noise"

    def _excess_clause(self) -> str:
        """The arrivals' excess over the finishes against the noise the verdict allows the
        window's count (``keep_up_slack``: the larger of 3 % and two Poisson deviations); ""
        where no more arrived than finished. Llama-3.1-8B on one H100 at 15 req/s, 1,500
        requests, window 20-80 s (seed 0): 940 arrived, 895 finished, 45 under the 61
        allowed, the batch 89 → 133; 6,000 requests at that rate, window 20-380 s: 5,455
        arrived, 5,456 finished, the batch 89 → 85, so the rise was the draw's."""
        rec = self.result.rec
        excess = rec.window_growth[0]
        if excess <= 0:
            return ""
        slack = rec.keep_up_slack
        side = "past" if rec.batch_took_arrivals else "within"
        return (f" ({excess:,} more, {side} the {slack:,.0f} that a count of {rec.windowed:,} "
                "may move by as noise)")

    def _growth_clause(self) -> str:
        """Where the window's arrivals beyond its finishes went: into the running batch (its
        value as the window opened, and as it closed) and into the waiting queue."""
        rec = self.result.rec
        queued = rec.window_growth[2]
        start, end = rec.running_at_window
        grew = f"the queue grew by {queued:,}" if queued > 0 else "the queue did not grow"
        return f"; the running batch went {start:,} → {end:,} over it, {grew}"

    def _rejected_lines(self) -> list[str]:
        """One line for the count, one for each of the two commonest reasons."""
        r = self.result
        if not r.rejected:
            return []
        lines = [f"rejected {r.rejected:,} of {self.requests:,} requests "
                 f"({_share(r.rejected, self.requests)}) before they ran:"]
        reasons = sorted(r.rec.rejected.items(), key=lambda item: -item[1])
        for reason, n in reasons[:2]:
            first = r.rec.rejected_first.get(reason)
            lines.append(f"  {n:,}: {reason}" + (f" (first: {first})" if first else ""))
        if len(reasons) > 2:
            lines.append(f"  {sum(n for _, n in reasons[2:]):,}: {len(reasons) - 2} other "
                         "reasons (--json lists them)")
        return lines

    @property
    def steps(self) -> tuple[Step, ...]:
        """How the percentiles, rates and goodput come from the simulated requests, and where
        the step times come from."""
        r, d = self.result, self.deployment
        ttft, tpot = r.percentiles("ttft"), r.percentiles("tpot")
        hist = r.rec.hist
        out = [
            step("TTFT percentiles", "first token time − arrival, one value per completed "
                 "request, the first token time the end of the engine step that made it (no "
                 "HTTP server, tokenizer or detokenizer: a client such as `vllm bench serve` "
                 "measures that much more); the p-th percentile as `vllm bench serve` reads "
                 "it (numpy.percentile, linear): the values sorted, the one at position "
                 "p/100 × (n − 1), between the two either side; the values are kept binned "
                 "in a log histogram of 0.23%-wide bins, each read as its bin's centre, so a "
                 "figure is numpy's on the exact values to within 0.12 %; p95, and ITL's, "
                 "end-to-end's and the queue's percentiles, are read the same way",
                 _ms_q("TTFT p50", ttft["p50"]),
                 q("requests measured", hist["ttft"].total, "",
                   "completed, arriving in the window" if self.has_window else "completed"),
                 *_reading_qs(hist["ttft"], 50)),
            *_percentile_steps("TTFT", hist["ttft"], ttft),
            step("TPOT percentiles", "(finish − first token) ÷ (output tokens − 1), one value "
                 "per completed request with more than one output token; percentiles as for TTFT",
                 _ms_q("TPOT p50", tpot["p50"]),
                 q("requests measured", hist["tpot"].total, "", "completed, output > 1 token"),
                 *_reading_qs(hist["tpot"], 50)),
            *_percentile_steps("TPOT", hist["tpot"], tpot),
            step("request rate", "completed requests ÷ simulated time",
                 q("request rate", r.request_rate_req_s, "req/s"), q("completed", r.completed),
                 q("simulated time", r.duration_s, "s", "first arrival to last finish")),
            step("output token rate", "output tokens ÷ simulated time",
                 q("output tokens per second", r.output_tok_s, "tok/s"),
                 q("output tokens", r.rec.output_tokens, "", "every token the run generated"),
                 q("simulated time", r.duration_s, "s", "first arrival to last finish")),
            step("total token rate", "(prompt tokens + output tokens) ÷ simulated time, "
                 "each completed request's prompt counted whole, as sent (vllm bench serve's "
                 "Total Token throughput; a prefix-cache hit does not shrink it)",
                 q("total tokens per second", r.total_tok_s, "tok/s"),
                 q("prompt tokens", r.rec.prompt_tokens, "", "the completed requests'"),
                 q("output tokens", r.rec.output_tokens),
                 q("simulated time", r.duration_s, "s", "first arrival to last finish")),
            step("output token rate per GPU", "output tokens per second ÷ GPUs",
                 q("per GPU", r.output_tok_s / d.num_gpus, "tok/s"),
                 q("output tokens per second", r.output_tok_s, "tok/s"),
                 q("GPUs", d.num_gpus)),
        ]
        if self.has_window and (self.slo_ttft_s is not None or self.slo_tpot_s is not None):
            low, high = r.rec.measured_window_s
            out.append(step(
                "goodput", "requests arriving in the window that completed and met every SLO "
                "given ÷ the window's length", q("goodput", r.goodput_req_s, "req/s"),
                q("met the SLO", r.good, "requests", "TTFT ≤ SLO and TPOT ≤ SLO"),
                q("window", high - low, "s", f"--window {r.rec.window_s[0]:g},"
                  f"{r.rec.window_s[1]:g}, as far as arrivals reach")))
        elif self.slo_ttft_s is not None or self.slo_tpot_s is not None:
            out.append(step(
                "goodput", "completed requests that met every SLO given ÷ simulated time "
                "(a rejected request met none)", q("goodput", r.goodput_req_s, "req/s"),
                q("met the SLO", r.good, "requests", "TTFT ≤ SLO and TPOT ≤ SLO"),
                q("completed", r.completed, "requests"),
                q("all requests", self.requests, "requests", f"{r.rejected:,} rejected"),
                *([] if self.slo_ttft_s is None else [_ms_q("TTFT SLO", self.slo_ttft_s)]),
                *([] if self.slo_tpot_s is None else [_ms_q("TPOT SLO", self.slo_tpot_s)]),
                q("simulated time", r.duration_s, "s")))
        v = self.itl_verdict
        if v is not None and self.slo_itl_s is not None:
            out.append(step(
                "ITL SLO", f"the p{v['percentile']:.10g} of the gaps between streamed chunks "
                "(one per request per step that streamed its tokens), over the chunks of the "
                + ("requests arriving in the window" if self.has_window else "run's requests")
                + " ≤ the SLO, as plan judges a check; the run's, not a request's: goodput "
                "leaves it out", _ms_q(f"p{v['percentile']:.10g} ITL",
                                       math.nan if v["itl_s"] is None else v["itl_s"]),
                _ms_q("ITL SLO", self.slo_itl_s),
                q("streamed chunks", v["chunks"], "", "after each request's first token"
                  if v["itl_s"] is not None else "none after a first token: the ITL SLO is "
                  "not measured, neither met nor missed")))
        profile = r.profile
        if profile is not None and r.steps:
            src = f"{profile.engine} profile"
            out.append(step(
                "step time", "each step's batch through step_cost: Σ operators max(FLOPs ÷ "
                "(peak × compute share), bytes ÷ (bandwidth × bandwidth share)) + collectives + "
                f"{overhead_formula(profile)}; the mean is busy time ÷ steps"
                + (f" (a step here is a micro-batch's trip through the {self.micro_batches} "
                   "stages, one stage time in each; with several in flight, busy time ÷ "
                   "micro-batches is the interval between them)"
                   if self.micro_batches > 1 else ""),
                _ms_q("mean step" if self.micro_batches == 1 else
                      "mean interval between micro-batches", r.busy_s / r.steps),
                q("busy time", r.busy_s, "s", "simulated time less the idle gaps"
                  + (f", summed over the {self.lanes} pipeline lanes" if self.lanes > 1 else "")
                  + (f", summed over the {d.data_parallel_size} ranks, each on its own clock"
                     if independent_ranks(d) else "")),
                q("steps", r.steps, "", f"summed over the {d.data_parallel_size} ranks"
                  if independent_ranks(d) else ""),
                *share_qs(profile, d),
                overhead_q("per step", profile.step_overhead_s, src),
                overhead_q("per layer", profile.layer_overhead_s, f"{src}, decode steps"),
                *([] if profile.prefill_layer_overhead_s is None else [
                    overhead_q("per layer with prompt tokens", profile.prefill_layer_overhead_s,
                               f"{src}: no CUDA graph")]),
                q("layers", d.model.num_layers, "", "config.json num_hidden_layers"),
                *matmul_qs(profile, d)))
        return (*out, *self._mean_steps())

    def _mean_steps(self) -> tuple[Step, ...]:
        """The table's mean column, each Σ ÷ count over the values its percentiles rank (an
        ITL gap counted once per token it spans), and the running batch's time-weighted mean
        (Llama-3.1-70B on 4 H100 at 2 req/s: mean TTFT 209.3 ms, a batch of 12.1)."""
        r = self.result
        out = []
        for name, label, counted in (
                ("ttft", "TTFT", "requests"), ("tpot", "TPOT", "requests"),
                ("itl", "ITL", "token gaps"), ("e2e", "end-to-end", "requests"),
                ("queue", "queueing", "requests")):
            h = r.rec.hist[name]
            if not h.total:
                continue
            out.append(step(f"{label} mean", f"Σ {label} ÷ {counted} measured (the table's "
                            "mean column)", _ms_q(f"{label} mean", h.mean),
                            q(f"Σ {label}", h.sum, "s"), q(f"{counted} measured", h.total)))
        from ridgeline.engine_metrics import running_metric  # as _running_metric

        rec = r.rec
        start = rec.arrived_s[0] if math.isfinite(rec.arrived_s[0]) else 0.0
        if r.duration_s > start:
            out.append(step(
                "running batch, mean", "Σ over the steps of running requests × step time ÷ "
                "(last finish − first arrival): the time-weighted mean of "
                + (running_metric(self.deployment.engine) or "the running batch"),
                q("mean running batch", r.running_batch["mean"]),
                q("request-seconds running", rec.running_request_s, "s",
                  "each step's running requests × its time, summed"),
                q("span", r.duration_s - start, "s", "first arrival to last finish")))
        return tuple(out)


def _readmitted(own: int, hits: int, block_size: int) -> str:
    """Which of the prefix-cache hits were preempted requests finding their own blocks again
    (recomputing only what was evicted), not a prefix shared with another request, or ""."""
    if not own:
        return ""
    share = "all" if own == hits else f"{own:,}"
    unit = "" if block_size == 1 or own == hits else " blocks"
    return f", {share}{unit} of them preempted requests finding their own blocks again"


def _reading_qs(h: Histogram, p: int) -> list[Quantity]:
    """The p-th percentile's reading (Histogram.reading): its position among the sorted
    values and the values either side, in ms; none where nothing was measured."""
    position, low, high = h.reading(p)
    if math.isnan(position):
        return []
    return [q("position", position, "", f"{p}/100 × (requests measured − 1)"),
            _ms_q("value at ⌊position⌋", low), _ms_q("next value", high)]


def _percentile_steps(name: str, h: Histogram, values: dict[str, float]) -> list[Step]:
    """The p90 and p99 of ``name`` (TTFT, TPOT), read as its p50 step reads it: value at
    ⌊position⌋ + the position's fraction × (next value − it). 200 TTFTs: p90 at position
    179.1."""
    if not h.total:
        return []
    return [step(f"{name} p{p}", "value at ⌊position⌋ + (position − ⌊position⌋) × (next value "
                 "− value at ⌊position⌋), position = p/100 × (requests measured − 1) "
                 f"(as the {name} p50's)", _ms_q(f"{name} p{p}", values[f"p{p}"]),
                 q("p", p), q("requests measured", h.total), *_reading_qs(h, p))
            for p in (90, 99)]


def _ms_q(name: str, seconds: float) -> Quantity:
    return q(name, "-" if math.isnan(seconds) else seconds * 1e3, "ms")


def _running_metric(engine: str) -> str:
    """The engine's own gauge of the running batch, as `observe` reads it, or ""."""
    from ridgeline.engine_metrics import running_metric

    name = running_metric(engine)
    return f" ({name})" if name else ""
