"""One observation of a running engine, whatever it was read from (/metrics, a log, a
benchmark's JSON), and the bounds every reading must lie within."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from ridgeline.errors import InputError
from ridgeline.vllm_metric_releases import ReleaseRange

MAX_REQUESTS = 10_000_000  # running or waiting: far past any engine's max_num_seqs
MAX_COUNT = 1e18  # a counter or a histogram series: tokens, requests, seconds
# What each metric may hold (the bounds included; NaN never): a value outside is a broken
# exporter or a hand-edited file, and the arithmetic downstream would turn it into nonsense.
REQUESTS_RANGE = f"a number of requests, 0 to {MAX_REQUESTS:,}"
MAX_TOKENS = 1e9  # a request's tokens, or a server's KV cells in use: past any context
REQUEST_TOKENS_RANGE = f"a request's tokens, 0 to {MAX_TOKENS:g}"
FRACTION_RANGE = "the fraction of the KV pool in use, 0 to 1"
COUNTER_RANGE = f"a counter, 0 to {MAX_COUNT:g}"


@dataclass
class Observation:
    source: str
    kind: str  # metrics | log | bench
    running: list[float] = field(default_factory=list)
    waiting: list[float] = field(default_factory=list)
    kv_usage: list[float] = field(default_factory=list)  # 0–1
    # a /metrics page with no waiting-requests gauge at any scrape: the queue was never read,
    # so an empty ``waiting`` is no empty queue
    queue_unread: bool = False
    preemptions: float | None = None
    prompt_tok_s: float | None = None
    generation_tok_s: float | None = None
    # SGLang's gen_throughput gauge over the window: its readings after the first scrape,
    # averaged (each engine's); None for other engines, or where a scrape lacks it
    gen_throughput_tok_s: float | None = None
    latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)  # ttft/itl/e2e
    mean_prompt_tokens: float | None = None
    mean_output_tokens: float | None = None
    duration_s: float | None = None
    notes: list[str] = field(default_factory=list)
    model_names: list[str] = field(default_factory=list)  # as the engine labels its metrics
    engine_family: str | None = None  # vllm, sglang or llama.cpp: whose metric names these are
    engines: int = 1  # vLLM data-parallel engine cores (the "engine" label): figures are each's
    # the engines are SGLang's DP-attention ranks of one tensor-parallel group (each
    # dp_rank's series with tp_ranks of its own): they share the GPUs described, not each its own
    engines_share_gpus: bool = False
    kv_tokens: list[float] = field(default_factory=list)  # llama-server's cells in use (older)
    swapped: list[float] = field(default_factory=list)  # vLLM V0: requests swapped out to CPU
    # data-parallel engines: each engine's (KV usage, waiting) at each scrape
    core_pressure: list[tuple[float | None, float]] = field(default_factory=list)
    # data-parallel engines: the busiest engine's running requests at each reading (empty
    # with one engine, or where the source gives only their mean): what fills its own pool
    busiest_running: list[float] = field(default_factory=list)
    pool_tokens: float | None = None  # each engine's pool, as the engine reports it
    pool_block_size: int | None = None  # vLLM's block size, from cache_config_info
    # vLLM's --kv-cache-dtype as the server runs it, from cache_config_info ("auto": the
    # model's dtype; "fp8", "fp8_e4m3", …)
    cache_dtype: str | None = None
    # vLLM's --gpu-memory-utilization and --kv-cache-memory-bytes as the server was started,
    # from cache_config_info's labels (None where a label reads "None", vLLM's default)
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    cached_prompt_share: float | None = None  # of the prompt tokens, served by the prefix cache
    client_concurrency: float | None = None  # a benchmark client's cap on requests in flight
    finished_requests: float | None = None  # requests that finished over the window
    estimated_batch: float | None = None  # a bench's batch as its reader settled it
    # SGLang's largest accepted length a verify step over the scrapes (>0: a drafter serves)
    spec_accept_length: float | None = None
    # the tokens a verify step kept a request on average over the window, the bonus token
    # included: SGLang's spec_accept_length readings above 0 inside the window (the scrapes
    # after the first; a single scrape's own), their mean; a vLLM bench's
    # spec_decode_acceptance_length; vLLM's 1 + accepted ÷ drafts over the window (its /metrics
    # counters, or its log's SpecDecoding lines, weighted by their draft tokens). None where
    # the source says none (no drafter, or unread)
    spec_tokens_per_step: float | None = None
    # the tokens a request's decode step kept over the window, every decode step counted,
    # drafted or not (spec_decode.tokens_per_request_step): vLLM's generation and accepted
    # tokens, from its /metrics counters, its log's throughputs or a bench result's counts.
    # None where the source gives only an acceptance length (SGLang's gauge, an older bench
    # result), which counts the drafted steps alone
    spec_tokens_per_request_step: float | None = None
    # the share of a request's decode steps that drafted (vLLM's drafts over the decode steps
    # its generation and accepted tokens leave, at most 1), the draft tokens a drafting step
    # proposed on average (its draft tokens over its drafts: below the drafter's length where
    # an n-gram match ran short, or near max_model_len), and which counts gave them; None
    # where the source gives no counts (SGLang, an older bench result, a log), a verify step
    # then priced as if every row drafted its whole draft
    spec_drafted_share: float | None = None
    spec_drafts_per_draft: float | None = None
    spec_drafted_source: str | None = None
    # the draft tokens vLLM's drafter proposed over the window (the increase of
    # vllm:spec_decode_num_draft_tokens_total, or its log's "Drafted: N tokens" summed; a single
    # scrape's since start): above 0, a drafter serves. None where the source has no drafter's
    spec_draft_tokens: float | None = None
    # the launch as the source states it (a vLLM log's version line and its args): the
    # release, and the seats (max_num_seqs) where given; None where it does not say
    engine_version: str | None = None
    max_num_seqs: int | None = None
    # vLLM's releases its page's metric names allow (vllm_metric_releases), None where no
    # name bounds them; whether the page carried vllm:cache_config_info (the pool read from
    # it: the release need not be inferred); the release sized from the range where it was
    vllm_releases: ReleaseRange | None = None
    cache_config_read: bool = False
    engine_version_inferred: str | None = None
    # the window, in seconds, over which a token counter the engine moves at every step
    # (vLLM's prompt and generation counters; SGLang's realtime_tokens_total) did not move
    # while every reading ran requests: a hung engine, or a page that no longer changes.
    # None where the counters moved, or move only as requests finish
    stalled_s: float | None = None
    # data-parallel engines ('engine 1') whose generation counter stood still over that
    # window while each ran requests at every reading, the others' moving: one engine hung
    stalled_engines: list[str] = field(default_factory=list)

    @property
    def spec_tokens_per_decode_step(self) -> float | None:
        """What a drafting server's step is divided by for a token's time: the tokens a
        request's decode step kept over all its steps where the source counts them
        (spec_tokens_per_request_step), else the acceptance length, which counts the steps
        that drafted alone (an n-gram window of 1.5 tokens a step, 2.0 an acceptance length:
        1.5); None without either."""
        return self.spec_tokens_per_request_step or self.spec_tokens_per_step

    @property
    def batch(self) -> float | None:
        """The running batch: the mean the engine reported, else the one a bench's reader
        settled (Little's law; observe_bench), else output tok/s × the mean ITL."""
        if self.running:
            return statistics.fmean(self.running)
        if self.estimated_batch is not None:
            return self.estimated_batch
        itl = self.latency_ms.get("itl", {}).get("mean")
        if self.generation_tok_s and itl and not math.isnan(itl):
            return self.generation_tok_s * itl / 1e3
        return None

    @property
    def busiest_batch(self) -> float | None:
        """The batch one engine's pool and seats hold: the busiest data-parallel engine's
        running requests at each reading, their mean (engines at 60 and 20: 60, where
        ``batch`` is 40); ``batch`` where the engines are one, or not reported apart."""
        return statistics.fmean(self.busiest_running) if self.busiest_running else self.batch

    @property
    def batch_source(self) -> str:
        """Where ``batch`` comes from, as --explain names it: the running gauge, else a
        bench's Little's law with its product (2,091.5 tok/s × 28.0 ms = 58.6)."""
        if self.running:
            return "running requests, mean over the window"
        cap = self.client_concurrency
        if self.estimated_batch is not None and self.estimated_batch == cap:
            return (f"the client's cap of {cap:,.0f} requests in flight (max_concurrency): "
                    "Little's law read past it")
        if self.estimated_batch is not None:
            return ("Little's law on requests: request_throughput × (mean end-to-end − mean "
                    "TTFT)")
        itl = self.latency_ms.get("itl", {}).get("mean")
        return (f"Little's law: output tok/s × mean ITL = {self.generation_tok_s or 0.0:,.1f} "
                f"tok/s × {itl or 0.0:,.1f} ms")


def stats(values: list[float]) -> dict[str, float]:
    """A gauge's readings: their mean, p50, p90 and max, each percentile interpolated between
    the two readings about rank q × (n − 1), as numpy's default and Prometheus's
    quantile_over_time take it (two scrapes, 120 and 128 running: p50 124, not 128)."""
    if not values:
        return {}
    ordered = sorted(values)

    def pick(q: float) -> float:
        rank = q * (len(ordered) - 1)
        low = math.floor(rank)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)

    return {"mean": statistics.fmean(values), "p50": pick(0.5), "p90": pick(0.9),
            "max": ordered[-1]}


# -- reading ----------------------------------------------------------------------------


def checked(value: float, source: str, name: str, low: float, high: float, what: str) -> float:
    """``value`` when it lies in [low, high]; else an error naming the source and the metric."""
    if not low <= value <= high:  # NaN fails both
        raise InputError(f"{source}: {name} is {value:g}; it must be {what}")
    return value


def seconds(ms: float | None) -> float | None:
    """A latency read or predicted in milliseconds as --json gives every latency, in seconds
    (9.1 ms: 0.0091); None stays None."""
    return None if ms is None else ms / 1e3


def latencies_s(latency_ms: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """``Observation.latency_ms`` in seconds, each latency's mean and percentiles divided by
    1,000, its ``count`` (of requests or tokens) kept: ITL mean 18.0 ms, 25,500 tokens reads
    {"mean": 0.018, "count": 25500}."""
    return {kind: {k: v if k == "count" else v / 1e3 for k, v in figures.items()}
            for kind, figures in latency_ms.items()}
