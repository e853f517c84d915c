"""Reading Prometheus scrapes of a serving engine's /metrics into one Observation: its gauges
at each scrape, its counters and histograms over the window the scrapes span.

Metric names, old and new (looked up in each engine's metrics code):
vLLM ``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``
(V1; V0: ``vllm:gpu_cache_usage_perc``), ``vllm:num_preemptions_total``,
``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``, histograms
``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds`` (older:
``vllm:time_per_output_token_seconds``), ``vllm:e2e_request_latency_seconds``;
``vllm:num_requests_waiting_by_reason`` (its "deferred" share is no queue for the batch),
prompt tokens not computed: ``vllm:prompt_tokens_by_source_total`` (all but
``source="local_compute"``), else ``vllm:prompt_tokens_cached_total``, else
``vllm:prefix_cache_hits_total`` over ``vllm:prefix_cache_queries_total`` (each counts a
blocked request's lookups again; older ``vllm:gpu_prefix_cache_*``),
``vllm:cache_config_info`` (the pool's blocks, as its labels: under data parallelism all
engines' sum), V0's ``vllm:num_requests_swapped``, a drafter's
``vllm:spec_decode_num_drafts_total``, ``vllm:spec_decode_num_draft_tokens_total``,
``vllm:spec_decode_num_accepted_tokens_total`` and its ``…_per_pos_total`` (a verify step
keeps 1 + accepted ÷ drafts);
SGLang ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``, ``sglang:token_usage``,
``sglang:num_retracted_requests_total``, ``sglang:cached_tokens_total``,
``sglang:max_total_num_tokens``, ``sglang:spec_accept_length`` (above 0: a drafter
serves), ``sglang:realtime_tokens_total`` (per step, by mode;
else ``sglang:prompt_tokens_total`` and ``sglang:generation_tokens_total``, which move when a
request finishes; ``sglang:gen_throughput``, a gauge of the last 40 decode steps' rate, is
the rate where no counter gives one, else a cross-check), ``sglang:time_to_first_token_seconds``,
``sglang:inter_token_latency_seconds``, ``sglang:e2e_request_latency_seconds``;
llama-server (``--metrics``) ``llamacpp:requests_processing``, ``llamacpp:requests_deferred``,
``llamacpp:kv_cache_usage_ratio`` and ``llamacpp:kv_cache_tokens`` (older builds: the ratio is
a share of -c), ``llamacpp:prompt_tokens_total``,
``llamacpp:tokens_predicted_total`` and ``llamacpp:tokens_predicted_seconds_total``, the
slots' summed generation time, whose increase per generated token is the mean time between a
slot's tokens (it has no latency histograms);
TensorRT-LLM (trtllm-serve's /prometheus/metrics) ``trtllm_num_requests_running``,
``trtllm_num_requests_waiting``, ``trtllm_kv_cache_utilization`` (iteration stats),
``trtllm_cache_config_info`` (the pool: num_gpu_blocks × block_size; else
``trtllm_kv_cache_max_blocks`` × ``trtllm_kv_cache_tokens_per_block``),
``trtllm_num_paused_requests`` (noted), ``trtllm_prompt_tokens_total``,
``trtllm_generation_tokens_total``,
``trtllm_request_success_total``, ``trtllm_prompt_cached_tokens_total``, histograms
``trtllm_time_to_first_token_seconds``, ``trtllm_time_per_output_token_seconds`` (one per
request), ``trtllm_e2e_request_latency_seconds``.
Over a window every counter is its increase, the lengths a finished request brought too. A
restart of the whole server (``process_start_time_seconds`` moving later, or every core's
counters falling) splits the window into runs, and only one is read, the latest of two scrapes
or more (observe_run.py); one core's restart beside others (a counter or histogram of it that
falls, or a process start labelled with it moving later) counts all of that core's series from
zero after it; SGLang, which exports no process start, shows a restart only by a fall (its
scheduler's CPU and idle seconds from 0.5.20: engine_metrics.SCHEDULER_SECONDS); a fall under a
process start
that holds, and a process start that moves earlier or to before the earlier scrape, are
another server's page, refused; a series missing from a later
scrape gives no window figure (not 0), nor does one absent from the first scrape, whichever
the engine (its start is unknown), unless ``process_start_time_seconds`` says the server
started inside the window: observe_window.py.
"""

from __future__ import annotations

import math
import re
import statistics

from ridgeline.engine_metrics import (
    CACHE_CONFIG,
    CACHED_PROMPT_TOKENS,
    COMPUTED_SOURCE,
    E2E,
    GEN_THROUGHPUT,
    GENERATION_SECONDS,
    GENERATION_TOKENS,
    ITL,
    KV_USAGE,
    LLAMACPP_DECODES,
    LLAMACPP_KV_TOKENS,
    MAX_ACCEPT_LENGTH,
    POOL_TOKENS,
    PREEMPTIONS,
    PREFILL_MODES,
    PREFIX_CACHE_QUERIES,
    PROCESS_START,
    PROMPT_BY_SOURCE,
    PROMPT_TOKENS,
    REALTIME_TOKENS,
    REQUESTS,
    RUNNING,
    SPEC_ACCEPT_LENGTH,
    SPEC_ACCEPTED_PER_POS,
    SPEC_ACCEPTED_TOKENS,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    SWAPPED,
    TRTLLM_CACHE_CONFIG,
    TRTLLM_MAX_BLOCKS,
    TRTLLM_PAUSED,
    TRTLLM_TOKENS_PER_BLOCK,
    TTFT,
    WAITING,
    WAITING_BY_REASON,
)
from ridgeline.errors import InputError, shorten
from ridgeline.observation import (
    COUNTER_RANGE,
    FRACTION_RANGE,
    MAX_COUNT,
    MAX_REQUESTS,
    MAX_TOKENS,
    REQUEST_TOKENS_RANGE,
    REQUESTS_RANGE,
    Observation,
    checked,
)
from ridgeline.observe_run import one_run
from ridgeline.observe_window import (
    CORE_LABELS,
    RANK_LABELS,
    RESTART_SIGNS,
    SERVER_CORE,
    SHARE_LABEL,
    Restarts,
    core_name,
    core_of,
    core_values,
    counter_by_core,
    counter_total,
    find_restarts,
    histogram_window,
    note_restarts,
    ranks_by_core,
    series_present,
    window_increase,
    window_rate,
)
from ridgeline.prometheus import MAX_UNIX_S, Histogram, Scrape
from ridgeline.spec_decode import FEWER_STEPS, drafted_rows, tokens_per_request_step
from ridgeline.vllm_cache_dtype import names_cache_dtype
from ridgeline.vllm_metric_releases import page_names, release_range

# a window this long in which a counter moved at every step stands still while requests run
# is no pause between steps: vLLM's engine steps take milliseconds to a second or two (a
# prefill chunk of max_num_batched_tokens), and it counts a request's prompt and first token
# at its first output (vllm/v1/metrics/stats.py IterationStats.update_from_output)
STALL_WINDOW_S = 10.0
# SGLang's gen_throughput gauge and its token counters may differ this much (of the larger)
# before a note says so: a reading covers 40 decode steps, a second or so, and a batch's rate
# moves by this much as requests join and leave it
GEN_THROUGHPUT_SLACK = 0.25
_HISTOGRAMS = tuple(f"{n}{part}" for n in TTFT + ITL + E2E for part in ("_bucket", "_sum",
                                                                          "_count"))
_LIMITS: tuple[tuple[tuple[str, ...], float, float, str], ...] = (
    (RUNNING + WAITING + SWAPPED + (WAITING_BY_REASON, TRTLLM_PAUSED), 0.0, MAX_REQUESTS,
     REQUESTS_RANGE),
    (KV_USAGE, 0.0, 1.0, FRACTION_RANGE),
    ((LLAMACPP_KV_TOKENS, *POOL_TOKENS, TRTLLM_MAX_BLOCKS, TRTLLM_TOKENS_PER_BLOCK), 0.0,
     MAX_TOKENS,
     f"a number of KV cells, 0 to {MAX_TOKENS:g}"),
    (RESTART_SIGNS + _HISTOGRAMS + (LLAMACPP_DECODES,), 0.0, MAX_COUNT, COUNTER_RANGE),
    ((PROCESS_START,), 0.0, MAX_UNIX_S, f"unix seconds, 0 to {MAX_UNIX_S:g}"),
    ((GEN_THROUGHPUT,), 0.0, MAX_TOKENS, f"tokens a second, 0 to {MAX_TOKENS:g}"),
    (SPEC_ACCEPT_LENGTH, 0.0, MAX_ACCEPT_LENGTH,
     f"a verify step's accepted tokens, 0 to {MAX_ACCEPT_LENGTH:g}"),
)
_READ = frozenset(n for names, *_ in _LIMITS for n in names) | set(TTFT + ITL + E2E)


def check_scrape(scrape: Scrape, source: str) -> None:
    """Every sample of the metrics observe reads, within what that metric can hold, and no
    line of theirs unreadable (skipped, it would leave an engine or a reading out)."""
    for line in scrape.unread:
        lead = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line)
        if lead and lead[0].removesuffix("_bucket").removesuffix("_sum").removesuffix(
                "_count") in _READ:
            raise InputError(f"{source}: {shorten(line)!r} is not a Prometheus sample "
                             "(name{labels} value [timestamp])")
    for names, low, high, what in _LIMITS:
        for name in names:
            for _, value in scrape.samples.get(name, []):
                checked(value, source, name, low, high, what)


def from_scrapes(scrapes: list[Scrape], source: str) -> Observation:
    obs = Observation(source, "metrics")
    for s in scrapes:
        check_scrape(s, source)
        _check_one_engine(s, source)
    if len(scrapes) > 1 and all(s.time_s is not None for s in scrapes):
        scrapes, kept = one_run(scrapes)  # the refusals of two servers' pages before it
        if kept is not None:
            obs.notes.append(kept)
    for s in scrapes:
        obs.model_names += [m for m in s.label_values("model_name") if m not in obs.model_names]
    running_name = next((n for n in RUNNING if n in scrapes[-1].samples), None)
    if running_name is not None:
        maker = re.split(r"[:_]", running_name)[0]  # vllm: sglang: llamacpp: trtllm_
        obs.engine_family = maker.replace("llamacpp", "llama.cpp")
        # vLLM V1 exports each data-parallel engine core's gauges apart (an "engine" label),
        # SGLang each DP-attention rank's ("dp_rank"): the sum of their KV fractions is no
        # fraction, and each core runs its own batch
        for s in scrapes:
            _check_one_server(s, source)
        cores = {core_of(labels) for labels, _ in scrapes[-1].samples[running_name]}
        obs.engines = max(1, len(cores - {(None, None)}))
        obs.engines_share_gpus = obs.engines > 1 and one_tp_group(
            scrapes[-1].samples[running_name])
    k = obs.engines
    if k > 1:
        obs.notes.append(f"{k} data-parallel engines (the 'engine' or 'dp_rank' label): the "
                         "batch, the queue, the KV usage and the token rates are each engine's "
                         "mean, the preemptions all engines' together; the wall is the "
                         "fullest engine's")
    deferred = 0.0
    gap = max((g for s in scrapes if running_name is not None
               and (g := _rank_gap(s.samples.get(running_name, []))) is not None),
              key=lambda g: g[1] - g[0], default=None)
    if gap is not None:
        obs.notes.append(f"{running_name}: ranks of one engine read {gap[0]:,.0f} and "
                         f"{gap[1]:,.0f} running requests (averaged): the ranks of one "
                         "scheduler report the same requests, so their series may come from "
                         "different servers")
    for s in scrapes:
        cells = s.value(LLAMACPP_KV_TOKENS)
        if cells is not None:
            obs.kv_tokens.append(cells)
        for series, names in ((obs.running, RUNNING), (obs.kv_usage, KV_USAGE),
                              (obs.swapped, SWAPPED)):
            value = _gauge(s, names, obs.engine_family)
            if value is not None:
                series.append(value)
        waiting = _gauge_by_core(s, WAITING, obs.engine_family)
        if WAITING_BY_REASON in s.samples and waiting:  # the queue the engine could run:
            by_core = core_values(s.samples[WAITING_BY_REASON],
                                  lambda labels: labels.get("reason") == "deferred", gauge=True)
            held = sum(by_core.values()) / k
            queued = sum(waiting.values()) / len(waiting)
            if held > queued * (1 + 1e-9):  # not KV transfers, LoRA budgets
                raise InputError(f"{source}: {held:,.0f} requests deferred "
                                 f"({WAITING_BY_REASON}) but {queued:,.0f} waiting: "
                                 "the deferred are among the waiting")
            waiting = {core: max(0.0, v - by_core.get(core, 0.0)) for core, v in waiting.items()}
            deferred = max(deferred, held)
        if waiting:
            obs.waiting.append(sum(waiting.values()) / len(waiting))
        if k > 1:  # each engine's own fill and queue: the wall is the fullest engine's
            kv = _gauge_by_core(s, KV_USAGE, obs.engine_family)
            running = _gauge_by_core(s, RUNNING, obs.engine_family)
            if running:
                obs.busiest_running.append(max(running.values()))
            obs.core_pressure += [(kv.get(core), waiting.get(core, 0.0))
                                  for core in dict.fromkeys([*kv, *waiting])]
    _read_pool(scrapes[-1], obs)
    if obs.engine_family == "vllm":
        obs.cache_config_read = any(CACHE_CONFIG in s.samples for s in scrapes)
        obs.vllm_releases = release_range(set().union(*(page_names(s.samples)
                                                        for s in scrapes)))
    accepted = [v for s in scrapes for v in _gauge_by_core(s, SPEC_ACCEPT_LENGTH,
                                                          obs.engine_family).values()]
    if accepted:
        obs.spec_accept_length = max(accepted)
        _read_sglang_accept_length(scrapes, obs)
    if deferred:
        obs.notes.append(f"up to {deferred:,.0f} waiting requests deferred (a KV transfer, a "
                         "LoRA budget: vllm:num_requests_waiting_by_reason) are not counted as "
                         "waiting for the batch")
    copied = next((name for name in KV_USAGE for s in scrapes
                   if any(SHARE_LABEL in labels for labels, _ in s.samples.get(name, []))), None)
    if copied is not None:
        obs.notes.append(f"{copied} comes once per API-server process (a '{SHARE_LABEL}' label: "
                         "vLLM before PR #28792 with --api-server-count > 1, the gauge not yet "
                         "'mostrecent'): each is one process's last reading, the others' 0 or "
                         "stale, so the highest is read, not their sum")
    if not obs.running:
        found = sorted(scrapes[-1].samples)
        if any(n.startswith("trtllm_") for n in found):  # its per-request metrics alone
            raise InputError(f"{source}: TensorRT-LLM's page has no trtllm_num_requests_running:"
                             " trtllm-serve exports its running and waiting requests and KV "
                             "use from iteration stats, with enable_iter_perf_stats: true among "
                             "its LLM API options (TensorRT-LLM 1.1 exported request latencies "
                             "only)")
        bare = _unprefixed_trtllm(scrapes[-1])
        if bare:
            raise InputError(f"{source}: TensorRT-LLM's page without the trtllm_ prefix "
                             f"({', '.join(bare[:3])}: trtllm-serve 1.0 to 1.2, "
                             "tensorrt_llm/metrics/collector.py): it exports request latencies "
                             "only, no running requests or KV use; a release that exports "
                             "trtllm_num_requests_running (with enable_iter_perf_stats: true) "
                             "gives observe a batch")
        raise InputError(f"{source}: no running-requests metric ({' or '.join(RUNNING)}); "
                         f"found {', '.join(found[:6])}, …")
    if _gauge(scrapes[-1], KV_USAGE, obs.engine_family) is None:
        obs.notes.append(f"no KV-usage metric ({', '.join(KV_USAGE)})")
    if not obs.waiting:
        obs.queue_unread = True
        obs.notes.append(f"no waiting-requests metric ({', '.join(WAITING)}): the queue is "
                         "unknown (a scrape or relabelling that drops it hides any queue)")
    first, last = scrapes[0], scrapes[-1]
    timed = first.time_s is not None and last.time_s is not None and last.time_s > first.time_s
    restarts: Restarts = {}
    if timed:
        assert first.time_s is not None and last.time_s is not None
        obs.duration_s = last.time_s - first.time_s
        restarts = find_restarts(scrapes)
        note_restarts(scrapes, restarts, obs)
        # SGLang's per-step counter, by mode, where every scrape has the mode's series (one
        # that appears mid-window, or a mode it lacks, leaves that rate to the completion
        # counters: summed over no series, it had read 0 tok/s)
        live = _per_step(scrapes, PREFILL_MODES)
        decoding = _per_step(scrapes, ("decode",))
        prompt_rate = window_rate(scrapes, (REALTIME_TOKENS,), obs, restarts, PREFILL_MODES) \
            if live else window_rate(scrapes, PROMPT_TOKENS, obs, restarts)
        generation_rate = window_rate(scrapes, (REALTIME_TOKENS,), obs, restarts,
                                      ("decode",)) if decoding else \
            window_rate(scrapes, GENERATION_TOKENS, obs, restarts)
        if obs.engine_family in ("sglang", "llama.cpp", "trtllm") and (
                (not live and prompt_rate is not None)
                or (not decoding and generation_rate is not None)):
            # llama.cpp's server_metrics (tools/server): on_prompt_eval adds a prompt's tokens
            # once the prompt is evaluated, on_prediction the generated ones at slot release
            obs.notes.append(
                "llama-server adds a request's prompt tokens to its counters once the prompt is "
                "evaluated, its generated tokens when it finishes: over a window shorter than "
                "its requests the generation rate reads low (0 if none finished), and high "
                "when several do" if obs.engine_family == "llama.cpp" else
                f"{obs.engine_family} adds a request's tokens to its counters when it "
                "finishes: over a window shorter than its requests the token rates read low "
                "(0 if none finished), and high when several do")
        if live and prompt_rate is not None:
            obs.notes.append(f"prompt tok/s: the prompt tokens SGLang computed ({REALTIME_TOKENS}"
                             f", mode {' or '.join(PREFILL_MODES)}), its prefix-cache hits left "
                             "out (vLLM's prompt rate counts them, beside their share)")
        gauge = _gen_throughput(scrapes, obs) if obs.engine_family == "sglang" else None
        for rate, what, names in ((prompt_rate, "prompt", PROMPT_TOKENS),
                                  (generation_rate if gauge is None else gauge, "generation",
                                   GENERATION_TOKENS)):
            if rate is None and not series_present(scrapes, names):  # else noted as missing
                obs.notes.append(f"no {what}-token counter ({' or '.join(names)}): no {what} "
                                 "rate")
        obs.prompt_tok_s = None if prompt_rate is None else prompt_rate / k
        obs.generation_tok_s = None if generation_rate is None else generation_rate / k
        if gauge is not None:
            _weigh_gen_throughput(obs, gauge, per_step=decoding)
        if obs.engine_family == "llama.cpp":  # its token counters move as requests finish
            steps = window_increase(scrapes, (LLAMACPP_DECODES,), obs, restarts) \
                if series_present(scrapes, (LLAMACPP_DECODES,)) else None
            still = steps == 0
        else:
            still = (obs.engine_family == "vllm" or (live and decoding)) \
                and generation_rate == 0 and not prompt_rate
        if still and obs.running and min(obs.running) > 0 \
                and last.time_s - first.time_s >= STALL_WINDOW_S:
            obs.stalled_s = last.time_s - first.time_s
        elif k > 1 and obs.engine_family == "vllm" and not restarts \
                and last.time_s - first.time_s >= STALL_WINDOW_S:
            obs.stalled_engines = _stalled_cores(scrapes)
        obs.preemptions = window_increase(scrapes, PREEMPTIONS, obs, restarts)  # all engines'
        if obs.preemptions is None and not series_present(scrapes, PREEMPTIONS) \
                and obs.engine_family != "llama.cpp":  # it preempts none
            paused = max((v for s in scrapes for v in _gauge_by_core(
                s, (TRTLLM_PAUSED,), obs.engine_family).values()), default=None)
            obs.notes.append(f"no preemption counter ({' or '.join(PREEMPTIONS)}): SGLang's "
                             "appears at its first retraction; TensorRT-LLM exports none"
                             + ("" if not paused else
                                f", but {TRTLLM_PAUSED} read up to {paused:,.0f} requests "
                                "paused at an iteration (evicted for want of KV blocks): "
                                "the pool preempts"))
    else:
        live = False
        lifetime = counter_total(last, PREEMPTIONS)
        obs.notes.append("a single scrape: no rates; histograms cover the server's lifetime"
                         + (f"; {lifetime:,.0f} preemptions since it started, not read as "
                            "current" if lifetime else ""))
    cached = None if live else _cached_prompt_tokens(scrapes, obs, timed, restarts)
    if cached is not None and cached[1]:
        obs.cached_prompt_share = _cached_share(*cached, obs)
    families: tuple[tuple[str, tuple[str, ...]], ...] = (("ttft", TTFT), ("itl", ITL),
                                                         ("e2e", E2E))
    histograms: dict[str, tuple[str, Histogram]] = {}  # key -> (the name read, its window)
    for key, family in families:
        name = next((n for n in family for s in scrapes if f"{n}_bucket" in s.samples), None)
        if name is None and key == "itl" and _slot_itl(scrapes, obs, timed, restarts):
            continue
        if name is None:
            obs.notes.append(f"no {key} histogram ({' or '.join(family)})")
            continue
        try:
            window = histogram_window(scrapes, name, obs, restarts) if timed \
                else last.histogram(name)
        except InputError as exc:
            raise InputError(f"{source}: {exc}") from None
        if window is None:  # missing from a scrape: noted
            continue
        histograms[key] = name, window
        obs.latency_ms[key] = _hist_ms(window)
        if not window.count:  # present, but no request observed: said, not left blank
            obs.notes.append(f"{name} observed no request " + (
                "in the window" if timed else "since the server started") + f": no {key} figures")
        # said once, with the first histogram that has figures (not only the first read)
        if obs.latency_ms[key] and sum(1 for v in obs.latency_ms.values() if v) == 1:
            obs.notes.append("latency percentiles are interpolated within the histograms' "
                             "buckets, as Prometheus's histogram_quantile does; the means "
                             "are exact")
        if key == "itl" and name.startswith("trtllm_"):
            obs.notes.append("ITL: TensorRT-LLM's time per output token, one observation per "
                             "finished request (its mean): requests weigh alike, whatever "
                             "their length")
    _read_lengths(scrapes, obs, timed, restarts)
    _read_vllm_drafts(scrapes, obs, timed, restarts, histograms)
    return obs


def _stalled_cores(scrapes: list[Scrape]) -> list[str]:
    """The data-parallel engines ('engine 1') whose vLLM generation counter reads the same
    at the window's first and last scrape while the engine ran requests at every reading
    (STALL_WINDOW_S: the counter moves at every step of the engine's): engine 1 at 30
    running and 48,000 tokens throughout, beside engine 0 moving, is one hung engine that
    the mean batch and rates of the two hide."""
    first = counter_by_core(scrapes[0], GENERATION_TOKENS) or {}
    last = counter_by_core(scrapes[-1], GENERATION_TOKENS) or {}
    running = [_gauge_by_core(s, RUNNING, "vllm") for s in scrapes]
    return [core_name(core) for core, was in first.items()
            if core != SERVER_CORE and last.get(core) == was
            and all(r.get(core, 0.0) > 0 for r in running)]


def _gen_throughput(scrapes: list[Scrape], obs: Observation) -> float | None:
    """SGLang's generated tokens a second of one scheduler (engine_metrics GEN_THROUGHPUT),
    its readings inside the window (the scrapes after the first: each is the rate over the
    decode steps just before its scrape, so the first one's ended as the window began)
    averaged over the readings and the DP ranks; kept in obs.gen_throughput_tok_s. None
    where a scrape after the first lacks it: a window figure is never read off part of it."""
    readings = [_gauge(s, (GEN_THROUGHPUT,), "sglang") for s in scrapes[1:]]
    if not readings or None in readings:
        return None
    obs.gen_throughput_tok_s = statistics.fmean(r for r in readings if r is not None)
    return obs.gen_throughput_tok_s


def _weigh_gen_throughput(obs: Observation, gauge: float, per_step: bool) -> None:
    """SGLang's gauge against its counters' generation rate (each engine's): the rate where
    no counter gives one (1,500 tok/s from readings 1,400 and 1,600), else a note where the
    two are more than GEN_THROUGHPUT_SLACK apart, saying which to trust: its
    generation_tokens_total moves only when a request finishes (a window of a few long
    requests reads 0, or several finishing at once far too high), realtime_tokens_total at
    every step as the gauge does (then they differ only by the stretches they cover)."""
    how = (f"{GEN_THROUGHPUT}, the mean of its readings after the first scrape (each the rate "
           "over the decode steps just before it)")
    counted = obs.generation_tok_s
    if counted is None:
        obs.generation_tok_s = gauge
        obs.notes.append(f"generation tok/s: {how}, as no generation-token counter gives a "
                         "window figure")
        return
    if abs(gauge - counted) <= GEN_THROUGHPUT_SLACK * max(gauge, counted):
        return
    obs.notes.append(
        f"{how} reads {gauge:,.0f} tok/s, the token counters {counted:,.0f}: " + (
            f"both count tokens as the steps run ({REALTIME_TOKENS}), so the gauge's readings, "
            "each of a short stretch before a scrape, miss how the rate moved between them"
            if per_step else
            f"{GENERATION_TOKENS[1]} moves only when a request finishes, so over this window "
            "the gauge's per-step rate is the closer to what the batch generated (the figures "
            "above use the counters)"))


def _read_sglang_accept_length(scrapes: list[Scrape], obs: Observation) -> None:
    """SGLang's tokens a verify step keeps: the mean of its spec_accept_length readings above
    0 (0: no drafter, or none of its steps yet). Each reading is the mean over the logging
    interval before its scrape (engine_metrics SPEC_ACCEPT_LENGTH), so of two or more scrapes
    only those after the first are the window's: the first one's interval ended as the window
    began (readings 3.0, then 2.0 and 2.4: 2.2, not 2.47). One scrape: its own reading."""
    inside = scrapes[1:] if len(scrapes) > 1 else scrapes
    drafted = [v for s in inside for v in _gauge_by_core(s, SPEC_ACCEPT_LENGTH,
                                                         obs.engine_family).values() if v > 0]
    if drafted:
        obs.spec_tokens_per_step = statistics.fmean(drafted)
    elif len(scrapes) > 1 and obs.spec_accept_length:
        obs.notes.append(f"{SPEC_ACCEPT_LENGTH[0]} reads above 0 only at the first scrape (the "
                         "interval before the window): no drafted step reported inside the "
                         "window, so no acceptance length read")


def _read_vllm_drafts(scrapes: list[Scrape], obs: Observation, timed: bool,
                      restarts: Restarts, histograms: dict[str, tuple[str, Histogram]]
                      ) -> None:
    """vLLM's drafter over the window, where its counters are exported (engine_metrics
    SPEC_DRAFTS …): the tokens a verify step keeps, 1 + accepted ÷ drafts (600 drafts keeping
    900 tokens: 2.5), as vLLM's own log and PromQL take it; from one scrape, the server's
    lifetime, as a single scrape's other counters are. vLLM times its ITL histogram once a
    request's step, whatever tokens the step kept (vllm/v1/metrics/stats.py: one
    inter_token_latencies_iter entry per output), so where drafts are read its readings are
    divided by the tokens an ITL reading covered (_tokens_per_itl_reading; else by the tokens
    a verify step keeps), to the time a token took, as SGLang's are."""
    if not series_present(scrapes, SPEC_DRAFT_TOKENS + SPEC_DRAFTS):
        return

    def count(names: tuple[str, ...], keep: tuple[str, ...] = (),
              label: str = "mode") -> float | None:
        if timed:
            return window_increase(scrapes, names, obs, restarts, keep, label)
        return counter_total(scrapes[-1], names, keep, label)

    drafted = count(SPEC_DRAFT_TOKENS)
    drafts, accepted = count(SPEC_DRAFTS), count(SPEC_ACCEPTED_TOKENS)
    obs.spec_draft_tokens = drafted if drafted is not None else drafts
    span = "over the window" if timed else "since the server started (a single scrape)"
    if drafts is None or accepted is None:
        if not series_present(scrapes, SPEC_DRAFTS):  # before PR #16665: no drafts counter
            obs.notes.append(f"{SPEC_DRAFT_TOKENS[0]} without {SPEC_DRAFTS[0]} (vLLM before "
                             "PR #16665, about 0.8.5): a drafter serves, but the tokens a verify step keeps "
                             "are not read")
        return
    if not drafts:
        obs.notes.append(f"{SPEC_DRAFTS[0]} did not move {span}: a drafter is configured, "
                         "but no step drafted")
        return
    if drafted is not None and accepted > drafted:
        raise InputError(f"{obs.source}: {SPEC_ACCEPTED_TOKENS[0]} rose {accepted:,.0f} {span}, "
                         f"past the {drafted:,.0f} of {SPEC_DRAFT_TOKENS[0]}: a drafter accepts "
                         "only tokens it drafted, so these are not one server's counters")
    kept = checked(1 + accepted / drafts, obs.source,
                   f"1 + {SPEC_ACCEPTED_TOKENS[0]} ÷ {SPEC_DRAFTS[0]}", 1.0, MAX_ACCEPT_LENGTH,
                   f"a verify step's kept tokens, 1 to {MAX_ACCEPT_LENGTH:g}")
    obs.spec_tokens_per_step = kept
    positions = sorted({labels["position"] for s in scrapes
                        for labels, _ in s.samples.get(SPEC_ACCEPTED_PER_POS[0], [])
                        if labels.get("position", "").isdigit()}, key=int)
    rates = [count(SPEC_ACCEPTED_PER_POS, (p,), "position") for p in positions]
    shown = ", ".join(f"{r / drafts:.2f}" for r in rates if r is not None) \
        if rates and None not in rates else ""
    obs.notes.append(f"a drafter: {drafts:,.0f} drafts {span} kept {accepted:,.0f} of "
                     + (f"{drafted:,.0f} ({drafted / drafts:,.1f} a draft: its "
                        "num_speculative_tokens, where every draft is whole) "
                        if drafted is not None else "their ")
                     + f"draft tokens, {kept:,.2f} tokens a verify step (1 + accepted ÷ "
                     f"drafts, the bonus token in: {SPEC_ACCEPTED_TOKENS[0]}, {SPEC_DRAFTS[0]})"
                     + (f"; accepted at each draft position {shown}" if shown else ""))
    generated = count(GENERATION_TOKENS)
    ttft = histograms.get("ttft")
    _read_request_steps(obs, generated, accepted, drafts, None if ttft is None
                        else ttft[1].count, span, drafted)
    itl = obs.latency_ms.get("itl")
    if itl and obs.engine_family == "vllm":
        measured, how = _tokens_per_itl_reading(generated, histograms)
        every = obs.spec_tokens_per_request_step
        tokens = measured or obs.spec_tokens_per_decode_step or kept
        obs.latency_ms["itl"] = {k: v if k == "count" else v / tokens for k, v in itl.items()}
        by = (f"the {kept:,.2f} tokens a verify step keeps (1 + accepted ÷ drafts: {how}; a "
              "step that proposed no draft, as an n-gram drafter's without a match, keeps 1 "
              "token and is no draft, so where such steps are many this reads low)"
              if measured is None and every is None else
              f"the {every:,.2f} tokens a request's decode step kept over all its steps "
              f"({how}; read off the generation and accepted tokens instead)"
              if measured is None else
              f"the {measured:,.2f} tokens an ITL reading covered {span} ({how}; 1 + "
              f"accepted ÷ drafts, {kept:,.2f}, counts only the steps that drafted: one that "
              "proposed none, as an n-gram drafter's without a match, keeps 1 token and is "
              "no draft)")
        obs.notes.append(f"ITL: vLLM times a request's steps, not its tokens (one reading an "
                         f"output, whatever tokens it kept): each divided by {by}, the mean "
                         "exact, the percentiles a step's over its mean tokens")
        if measured and every and abs(measured / every - 1) > FEWER_STEPS:
            # one token a decode step besides the accepted: each step is one ITL reading
            obs.notes.append(f"the ITL readings cover {measured:,.2f} tokens each, the counters "
                             f"{every:,.2f} a step (generation less first less accepted tokens "
                             "leave one a step): they should agree, so the counters and the "
                             "histogram may not be one server's, or requests stopped inside "
                             "accepted drafts")


def _read_request_steps(obs: Observation, generated: float | None, accepted: float,
                        drafts: float, first: float | None, span: str,
                        draft_tokens: float | None = None) -> None:
    """The tokens a request's decode step kept over all its steps, drafted or not
    (spec_decode.tokens_per_request_step): vLLM's generation tokens, less a first token for
    each TTFT reading, over those less the accepted drafts. vLLM adds every output's new
    tokens to generation_tokens (vllm/v1/metrics/stats.py IterationStats.update_from_output),
    a request's first among them, and counts accepted only tokens a step kept, so what is
    left is one token a decode step, whether it drafted or not. Without a TTFT histogram the
    first tokens count as steps (a request's output of 200 tokens reads one step in 200 too
    many). Left unset, with a note, where the counters leave fewer steps than drafts (past
    FEWER_STEPS: not one server's) or none; where they leave a few fewer (a request that
    stopped inside accepted drafts, which vLLM trims from its output but counts accepted),
    every step drafted: the acceptance length. The share of the steps that drafted, and the
    draft tokens a drafting step proposed, price the verify step (spec_decode.drafted_rows)."""
    if generated is None:
        obs.notes.append(f"no {GENERATION_TOKENS[0]} {span}: the steps that drafted nothing "
                         "are not counted, and a token's time is divided by the acceptance "
                         "length, which leaves them out")
        return
    try:
        per_step = tokens_per_request_step(generated, accepted, first or 0.0)
    except ValueError as exc:
        obs.notes.append(f"{GENERATION_TOKENS[0]} and {SPEC_ACCEPTED_TOKENS[0]} {span}: {exc}, "
                         "so the tokens a request's step kept over all its steps are not read")
        return
    steps = generated - (first or 0.0) - accepted
    if drafts > steps * (1 + FEWER_STEPS):
        obs.notes.append(f"{GENERATION_TOKENS[0]} {span} leaves {steps:,.0f} decode steps once "
                         f"the {accepted:,.0f} accepted tokens are taken off, fewer than the "
                         f"{drafts:,.0f} drafts: not one server's counters, so the tokens a "
                         "request's step kept over all its steps are not read")
        return
    kept = 1 + accepted / drafts
    obs.spec_tokens_per_request_step = min(per_step, kept)
    _read_drafted_rows(obs, steps, drafts, draft_tokens,
                       f"{SPEC_DRAFTS[0]} ÷ the decode steps {span} (generation less "
                       "first less accepted tokens)")
    whose = (f"less the {first:,.0f} first tokens of its TTFT readings" if first is not None
             else "each request's first token counted as a step (no TTFT histogram)")
    obs.notes.append(f"a drafter: {obs.spec_tokens_per_request_step:,.2f} tokens a request's "
                     f"decode step over all its steps ({generated:,.0f} generation tokens "
                     f"{span}, {whose}, over those less the {accepted:,.0f} accepted), against "
                     f"{kept:,.2f} over the steps that drafted: {min(drafts, steps):,.0f} of "
                     f"{steps:,.0f} steps drafted ({min(1.0, drafts / steps):.0%}), the rest "
                     "proposing none (an n-gram drafter without a match, a request near "
                     "max_model_len) and keeping 1 token")


def _read_drafted_rows(obs: Observation, steps: float, drafts: float,
                       draft_tokens: float | None, source: str) -> None:
    """The share of the decode steps that drafted and the draft tokens a drafting step
    proposed (spec_decode.drafted_rows), with the counts they came from (``source``); left
    unset, with a note, where the draft tokens are fewer than the drafts."""
    try:
        obs.spec_drafted_share, obs.spec_drafts_per_draft = drafted_rows(steps, drafts,
                                                                         draft_tokens)
    except ValueError as exc:
        obs.notes.append(f"{exc}: not one server's counters, so the verify step is priced as "
                         "if every row drafted its whole draft")
        return
    obs.spec_drafted_source = source


def _tokens_per_itl_reading(generated: float | None,
                            histograms: dict[str, tuple[str, Histogram]]
                            ) -> tuple[float | None, str]:
    """The tokens one reading of vLLM's ITL histogram covered, measured: (generation tokens
    − TTFT readings) ÷ ITL readings (65,500 tokens, 500 first tokens, 26,000 readings: 2.5),
    and how it was read; (None, why not) where the counters do not give it. vLLM adds every
    output's new tokens to generation_tokens and times each output once: a request's first in
    the TTFT histogram (the one token its prefill sampled), every later one in the ITL
    histogram (vllm/v1/metrics/stats.py IterationStats.update_from_output, is_prefilling only
    for a request's first output: vllm/v1/engine/output_processor.py), whether or not that
    step verified a draft (vllm/v1/core/sched/scheduler.py counts a draft only where the
    request had draft tokens scheduled)."""
    itl, ttft = histograms.get("itl"), histograms.get("ttft")
    if generated is None or itl is None or ttft is None:
        missing = [name for name, found in ((GENERATION_TOKENS[0], generated), (TTFT[0], ttft),
                                            (ITL[0], itl)) if found is None]
        return None, f"no reading of {' or '.join(missing)}"
    (ttft_name, first), (itl_name, later) = ttft, itl
    if not later.count:
        return None, f"{itl_name} has no reading"
    tokens = (generated - first.count) / later.count
    how = (f"{GENERATION_TOKENS[0]} {generated:,.0f}, less one first token for each of the "
           f"{first.count:,.0f} {ttft_name} readings, over the {later.count:,.0f} of {itl_name}")
    if not 1.0 <= tokens <= MAX_ACCEPT_LENGTH:  # each later output brings a token or more
        return None, f"{how} is {tokens:,.2f}, outside 1 to {MAX_ACCEPT_LENGTH:g}"
    return tokens, how


# TensorRT-LLM's metric names before they took the trtllm_ prefix (trtllm-serve 1.0 to 1.2:
# collector.py at commit 89fd9b7; a page as vllm-project/aibrix #2004 quotes it,
# 'e2e_request_latency_seconds{engine_type=...}'): its per-request histograms and counter
_UNPREFIXED_TRTLLM = ("request_success_total", "time_to_first_token_seconds_count",
                      "time_per_output_token_seconds_count", "e2e_request_latency_seconds_count",
                      "request_queue_time_seconds_count")


def _unprefixed_trtllm(scrape: Scrape) -> list[str]:
    """TensorRT-LLM's unprefixed names the scrape holds where they are its (an
    engine_type="trtllm" label, or two of them together), else []."""
    present = [n for n in _UNPREFIXED_TRTLLM if n in scrape.samples]
    labelled = any(labels.get("engine_type") == "trtllm"
                   for n in present for labels, _ in scrape.samples[n])
    return present if labelled or len(present) >= 2 else []


def _per_step(scrapes: list[Scrape], modes: tuple[str, ...]) -> bool:
    """Whether every scrape has a series of SGLang's per-step token counter in one of
    ``modes``."""
    return all(any(labels.get("mode") in modes for labels, _ in
                   s.samples.get(REALTIME_TOKENS, [])) for s in scrapes)


def _read_lengths(scrapes: list[Scrape], obs: Observation, timed: bool,
                  restarts: Restarts) -> None:
    """The mean prompt and output of a finished request: the window's prompt and generation
    tokens over its finished requests, as the rates are taken (the server's lifetime would
    mix in traffic long gone: 50,000 prompt and 30,000 output tokens over 100 requests is
    500 and 300); the lifetime's only from a single scrape. None where a counter gives no
    window figure (missing from a scrape): a length is never read off a part of the window."""
    if timed:
        prompt, gen, total = (window_increase(scrapes, names, obs, restarts)
                              for names in (PROMPT_TOKENS, GENERATION_TOKENS, REQUESTS))
        obs.finished_requests = total
    else:
        prompt, gen, total = (counter_total(scrapes[-1], names)
                              for names in (PROMPT_TOKENS, GENERATION_TOKENS, REQUESTS))
    if prompt is None or gen is None or total is None:
        return
    if not total:
        if timed:
            obs.notes.append("no request finished in the window: no mean prompt and output "
                             "length from the counters")
        return
    for attr, value, name in (("mean_prompt_tokens", prompt, PROMPT_TOKENS[0]),
                              ("mean_output_tokens", gen, GENERATION_TOKENS[0])):
        setattr(obs, attr, checked(value / total, obs.source, f"{name} ÷ requests", 0.0,
                                   MAX_TOKENS, REQUEST_TOKENS_RANGE))


def _cached_prompt_tokens(scrapes: list[Scrape], obs: Observation, timed: bool,
                          restarts: Restarts) -> tuple[float, float, str] | None:
    """(prompt tokens not computed here, the tokens they are a share of, what those are),
    over the window or, from one scrape, the server's lifetime: vLLM's prompt tokens by
    source where it exports them (all but local_compute: its prefix cache and KV transfers);
    else vLLM's prefix-cache hits against its queries, both recounted at each step a
    request waits (40 % of 10,000 prompt tokens cached, each looked up twice: 8,000 hits of
    20,000 queries, 0.4 — against the prompt tokens, 0.8); else a cached-tokens counter
    against the prompt counter; None without any."""
    def count(names: tuple[str, ...], keep: tuple[str, ...] = ()) -> float | None:
        if timed:
            return window_increase(scrapes, names, obs, restarts, keep, label="source")
        return counter_total(scrapes[-1], names, keep, label="source")

    by_source = (PROMPT_BY_SOURCE,)
    if any(PROMPT_BY_SOURCE in s.samples for s in scrapes):
        everything, computed = count(by_source), count(by_source, (COMPUTED_SOURCE,))
        if everything is not None and computed is not None:
            moved = count(by_source, ("external_kv_transfer",)) or 0.0
            if moved:
                obs.notes.append(f"{moved / everything:.0%} of the prompt tokens came by KV "
                                 f"transfer ({PROMPT_BY_SOURCE}): counted with the prefix "
                                 "cache's as not computed here")
            return everything - computed, everything, "the prompt tokens"
    name = next((n for n in CACHED_PROMPT_TOKENS for s in scrapes if n in s.samples), None)
    if name is None:
        return None
    queries = PREFIX_CACHE_QUERIES.get(name)
    if queries is not None and any(queries in s.samples for s in scrapes):
        hits, asked = count((name,)), count((queries,))
        if hits is not None and asked is not None:
            return hits, asked, f"the lookups ({queries})"
    cached, prompted = count((name,)), count(PROMPT_TOKENS)
    if cached is None or prompted is None:
        return None
    return cached, prompted, "the prompt tokens that include them"


def one_tp_group(series: list[tuple[dict[str, str], float]]) -> bool:
    """Whether the cores of a metric's series are SGLang's DP-attention ranks of one
    tensor-parallel group: each a dp_rank whose series carry tp_ranks no other has
    (dp_rank = tp_rank // attention TP size: sglang/srt/layers/dp_attention.py
    compute_dp_attention_world_info; --tp 8 --dp 4 --enable-dp-attention: dp_rank 1 is
    tp_rank 2, and 3), so the ranks share the GPUs of --tp. SGLang's --dp without DP
    attention launches replicas whose tp_ranks each count from 0 (every dp_rank tp_rank 0):
    each its own GPUs, as vLLM's engines are."""
    ranks: dict[str | None, set[str]] = {}
    for labels, _ in series:
        if "dp_rank" not in labels or "tp_rank" not in labels or "engine" in labels:
            return False
        ranks.setdefault(labels["dp_rank"], set()).add(labels["tp_rank"])
    return len(ranks) > 1 and sum(map(len, ranks.values())) == len(set().union(*ranks.values()))


def _rank_gap(series: list[tuple[dict[str, str], float]]) -> tuple[float, float] | None:
    """The widest gap between ranks of one core (lowest, highest) where they disagree past
    what scraping them a moment apart explains (more than 2 and a half apart), or None."""
    worst = None
    for ranks in ranks_by_core(series, gauge=True).values():
        lo, hi = min(ranks), max(ranks)
        if hi - lo > 2 and hi > 1.5 * lo and (worst is None or hi - lo > worst[1] - worst[0]):
            worst = (lo, hi)
    return worst


def _gauge(scrape: Scrape, names: tuple[str, ...], family: str | None) -> float | None:
    """A gauge per core, the cores' values averaged (a gauge with no core label is the one
    engine's). The first name of the engine family's present wins."""
    values = list(_gauge_by_core(scrape, names, family).values())
    return sum(values) / len(values) if values else None


def _gauge_by_core(scrape: Scrape, names: tuple[str, ...], family: str | None
                   ) -> dict[tuple[str | None, ...], float]:
    """A gauge's value per core (empty where the scrape has none of ``names``)."""
    prefix = {"llama.cpp": "llamacpp"}.get(family or "", family or "")
    for name in names:
        if name in scrape.samples and name.startswith(prefix):
            return core_values(scrape.samples[name], gauge=True)
    return {}


def _check_one_engine(scrape: Scrape, source: str) -> None:
    """One engine's running gauge: two engines' metrics in one scrape (files run together)
    would be read as the first's, the other's model name and counters beside it."""
    present = [name for name in RUNNING if name in scrape.samples]
    if len(present) > 1:
        raise InputError(f"{source}: one scrape holds {' and '.join(present)}: two engines' "
                         "metrics; observe reads one server's scrape at a time; save one file "
                         "per server")


def _check_one_server(scrape: Scrape, source: str) -> None:
    """The running gauge's series differ only by the labels one server's cores and ranks
    carry: a federated scrape (instance, job) or several models summed would be no batch."""
    known = {*CORE_LABELS, *RANK_LABELS, SHARE_LABEL}
    for name in RUNNING + WAITING + KV_USAGE:
        series = [labels for labels, _ in scrape.samples.get(name, [])]
        for label in sorted({key for labels in series for key in labels} - known):
            values = list(dict.fromkeys(labels.get(label, "") for labels in series))
            if len(values) > 1:
                shown = ", ".join(values[:3]) + (", …" if len(values) > 3 else "")
                raise InputError(f"{source}: {name} has series for {len(values)} values of "
                                 f"'{label}' ({shown}): observe reads one server's scrape at a "
                                 "time; save one file per server")


def _cached_share(cached: float, prompted: float, of: str, obs: Observation) -> float | None:
    """The share of prompt tokens the prefix cache served, ``cached`` ÷ ``prompted``; None
    (with a note) where the hits outrun what includes them: the two counters are not one
    server's, or a preempted request's hits were counted twice over."""
    if cached > prompted * 1.05:
        obs.notes.append(f"prefix-cache hits outrun {of} ({cached / prompted:,.1f}×): not read "
                         "(every prompt token priced as computed)")
        return None
    return min(1.0, cached / prompted)


def _read_pool(scrape: Scrape, obs: Observation) -> None:
    """The pool per engine as the engine sized it, where its metrics say: vLLM's
    cache_config_info (num_gpu_blocks × block_size, from its labels: blocks, which the report
    shares among the model's KV-cache groups), SGLang's max_total_num_tokens. Under data
    parallelism vLLM's frontend adds up its engines' blocks and labels every engine's series
    with that sum (vllm/v1/engine/utils.py wait_for_engine_startup; some builds label one
    series engine=""), so it is divided by the engines the running gauge shows: 20,000 blocks
    over 2 engines are 10,000 each. A size that gives no pool (None before the engine has
    profiled it, 0, NaN, a label left out) or a cache_dtype naming no cache is noted, one line
    each: the check it feeds is skipped, not failed."""
    if obs.engine_family == "trtllm":
        _read_trtllm_pool(scrape, obs)
        return
    for labels, _ in scrape.samples.get(CACHE_CONFIG, [])[:1]:
        _read_cache_dtype(labels.get("cache_dtype"), obs)
        _read_memory_labels(labels, obs)
        raw = {key: labels.get(key) for key in ("num_gpu_blocks", "block_size")}
        blocks, size = _blocks_and_size(raw)
        k = obs.engines
        if 0 < blocks <= MAX_TOKENS and 0 < size <= 4096 and blocks // k:
            if k > 1:
                obs.notes.append(f"{CACHE_CONFIG}: num_gpu_blocks={blocks:,} is the {k} "
                                 f"data-parallel engines' sum (vLLM adds them up at start-up): "
                                 f"{blocks // k:,} blocks each")
            obs.pool_tokens, obs.pool_block_size = float(blocks // k * size), size
            return
        shown = ", ".join(f"{key}={value!r}" if value is not None else f"no {key}"
                          for key, value in raw.items())
        obs.notes.append(f"{CACHE_CONFIG}: {shown}: no pool size read (the engine had not "
                         "sized its pool, or the labels are not its): the modelled pool sizes "
                         "the batch, and the reported pool's check against it is skipped")
        return
    values = list(_gauge_by_core(scrape, POOL_TOKENS, obs.engine_family).values())
    if values and min(values) > 0:
        obs.pool_tokens = min(values)
    elif values:
        obs.notes.append(f"{POOL_TOKENS[0]} is {min(values):g}: no pool size read: the "
                         "modelled pool sizes the batch, and the reported pool's check "
                         "against it is skipped")


def _blocks_and_size(raw: dict[str, str | None]) -> tuple[int, int]:
    """A cache_config_info's num_gpu_blocks and block_size labels as numbers; (0, 0) where
    either is not a whole number ("None" before the engine has profiled its pool, "nan", "")."""
    try:
        return int(raw["num_gpu_blocks"] or ""), int(raw["block_size"] or "")
    except ValueError:
        return 0, 0


def _read_trtllm_pool(scrape: Scrape, obs: Observation) -> None:
    """TensorRT-LLM's pool as its KV cache manager sized it (engine_metrics
    TRTLLM_CACHE_CONFIG): trtllm_cache_config_info's num_gpu_blocks × block_size, else
    trtllm_kv_cache_max_blocks × trtllm_kv_cache_tokens_per_block (2,000 blocks of 32:
    64,000 tokens), read as vLLM's cache_config_info is: blocks of the block size, whole
    blocks a sequence. A size that gives no pool is noted, and the pool modelled."""
    for labels, _ in scrape.samples.get(TRTLLM_CACHE_CONFIG, [])[:1]:
        raw = {key: labels.get(key) for key in ("num_gpu_blocks", "block_size")}
        blocks, size = _blocks_and_size(raw)
        what = TRTLLM_CACHE_CONFIG + ": " + ", ".join(
            f"{key}={value!r}" if value is not None else f"no {key}" for key, value in raw.items())
        break
    else:
        blocks_read = _gauge(scrape, (TRTLLM_MAX_BLOCKS,), obs.engine_family)
        size_read = _gauge(scrape, (TRTLLM_TOKENS_PER_BLOCK,), obs.engine_family)
        if blocks_read is None and size_read is None:
            return
        blocks, size = (int(v) if v is not None and v == int(v) else 0
                        for v in (blocks_read, size_read))
        what = f"{TRTLLM_MAX_BLOCKS} {blocks_read}, {TRTLLM_TOKENS_PER_BLOCK} {size_read}"
    if 0 < blocks <= MAX_TOKENS and 0 < size <= 4096:
        obs.pool_tokens, obs.pool_block_size = float(blocks * size), size
        return
    obs.notes.append(f"{what}: no pool size read: the modelled pool sizes the batch, and the "
                     "reported pool's check against it is skipped")


def _read_memory_labels(labels: dict[str, str], obs: Observation) -> None:
    """vLLM's memory settings as the server was started, from cache_config_info's labels
    (vllm/config/cache.py CacheConfig.metrics_info: every field as str(value)):
    gpu_memory_utilization ("0.9"; "None" from v0.34 where not given, its default then 1.0
    with the extensible KV cache) and kv_cache_memory_bytes ("None" unless given). The pool
    is modelled under them (cli_observe.server_settings): a server started at 0.9 observed
    as 0.34's default 1.0 read an 11 % gap that was no gap. A value no flag takes is noted and
    left out."""
    for key, low, high in (("gpu_memory_utilization", 0.0, 1.0),
                           ("kv_cache_memory_bytes", 1.0, MAX_COUNT)):
        label = labels.get(key)
        if label is None or label == "None":
            continue
        try:
            value = float(label)
        except ValueError:
            value = math.nan
        if not low < value <= high or (key == "kv_cache_memory_bytes" and value % 1):
            obs.notes.append(f"{CACHE_CONFIG}: {key}={label!r} is no setting vLLM takes: not "
                             "read (the pool is modelled at the engine's default)")
        elif key == "gpu_memory_utilization":
            obs.gpu_memory_utilization = value
        else:
            obs.kv_cache_memory_bytes = int(value)


def _read_cache_dtype(label: str | None, obs: Observation) -> None:
    """vLLM's cache_dtype label (its --kv-cache-dtype), kept where it names a cache vLLM
    keeps (vllm_cache_dtype.names_cache_dtype); a note where it is missing or names none,
    since the KV dtype described is then not checked against the server's."""
    if label and names_cache_dtype(label):
        obs.cache_dtype = label
        return
    shown = f"cache_dtype={label!r} names no KV cache dtype" if label else "no cache_dtype"
    obs.notes.append(f"{CACHE_CONFIG}: {shown}: the KV dtype described is not checked "
                     "against the server's")


def _slot_itl(scrapes: list[Scrape], obs: Observation, timed: bool,
              restarts: Restarts) -> bool:
    """llama-server: the mean time between a slot's tokens, its summed generation seconds per
    generated token (over the window, or the server's lifetime from one scrape)."""
    last = scrapes[-1]
    seconds, tokens = last.value(*GENERATION_SECONDS), last.value(*GENERATION_TOKENS)
    if seconds is None or tokens is None:
        return False
    if timed:
        seconds = window_increase(scrapes, GENERATION_SECONDS, obs, restarts)
        tokens = window_increase(scrapes, GENERATION_TOKENS, obs, restarts)
    if not seconds or not tokens:
        return False
    obs.latency_ms["itl"] = {"mean": seconds / tokens * 1e3}
    obs.notes.append("ITL: llama-server's generation seconds per generated token (mean only)")
    return True


def _hist_ms(h: Histogram) -> dict[str, float]:
    if not h.count:
        return {}
    shown = {"mean": h.mean * 1e3, "p50": h.quantile(0.5) * 1e3, "p90": h.quantile(0.9) * 1e3,
             "p99": h.quantile(0.99) * 1e3}  # a histogram with no finite bucket: the mean only
    return {**{k: v for k, v in shown.items() if not math.isnan(v)}, "count": h.count}
