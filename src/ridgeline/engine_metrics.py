"""The metric names each engine exports on /metrics, as `observe` reads them (vLLM, SGLang,
llama-server, TensorRT-LLM's trtllm-serve at /prometheus/metrics): data shared by the reader
and the reports that name a gauge."""

from __future__ import annotations

# TensorRT-LLM (tensorrt_llm/metrics/collector.py): its running and waiting gauges are the
# executor's numActiveRequests and numQueuedRequests, its KV utilization used ÷ max blocks, all
# from iteration stats (trtllm-serve with enable_iter_perf_stats: true); its token counters and
# histograms move when a request finishes (return_perf_metrics: true)
RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing",
           "trtllm_num_requests_running")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred",
           "trtllm_num_requests_waiting")
# older llama-server builds: the KV cells in use, beside kv_cache_usage_ratio, which is their
# share of -c (the context it was started with), not of the memory (removed by PR #13660)
LLAMACPP_KV_TOKENS = "llamacpp:kv_cache_tokens"
# vLLM splits its waiting queue by why (vllm/v1/metrics/loggers.py): "capacity" waits for the
# batch; "deferred" for a KV transfer, a LoRA budget or a blocked status
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
            "llamacpp:kv_cache_usage_ratio", "trtllm_kv_cache_utilization")
# SGLang's num_retracted_reqs is a gauge (the last interval's); its counter is named
# "requests" (python/sglang/srt/metrics/collector.py)
PREEMPTIONS = ("vllm:num_preemptions_total", "sglang:num_retracted_requests_total")
PROMPT_TOKENS = ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total",
                 "llamacpp:prompt_tokens_total", "trtllm_prompt_tokens_total")
GENERATION_TOKENS = ("vllm:generation_tokens_total", "sglang:generation_tokens_total",
                     "llamacpp:tokens_predicted_total", "trtllm_generation_tokens_total")
GENERATION_SECONDS = ("llamacpp:tokens_predicted_seconds_total",)
# llama-server's llama_decode() calls, one a step of its slots (tools/server
# server_metrics::on_decoded: n_decode_total++), whatever finished: the one counter of it that
# moves at every step
LLAMACPP_DECODES = "llamacpp:n_decode_total"
# SGLang's scheduler counts tokens as each step runs them, by mode; its prompt_tokens_total and
# generation_tokens_total move only when a request finishes (metrics/collector.py)
REALTIME_TOKENS = "sglang:realtime_tokens_total"
PREFILL_MODES = ("prefill_compute", "prefill")  # computed prompt tokens, not cache hits
# SGLang's generated tokens a second of one scheduler (a DP rank), a gauge: its tokens over
# the last decode_log_interval decode steps (default 40) ÷ the time they took, set at each
# such tick (scheduler_components/metrics_reporter.py: 'last_gen_throughput =
# num_generated_tokens / gap_latency'; the gauge 'The generation throughput (token/s)',
# multiprocess_mode "mostrecent", observability/metrics_collector.py; metrics/collector.py in
# earlier releases; read in the 0.5.23 wheel). A reading is the rate just before its scrape,
# a window's readings the scrapes after the first (as SPEC_ACCEPT_LENGTH's). From 0.5.23 it
# decays to 0 past 30 s without a tick (GEN_THROUGHPUT_STALENESS_SECONDS); earlier releases
# hold the last tick's rate while no decode runs
GEN_THROUGHPUT = "sglang:gen_throughput"
# prompt tokens served from the prefix cache, which the prompt counters above include, the
# first present read: vLLM's prompt_tokens_cached (each prompt's once); its prefix_cache_hits
# (older: gpu_prefix_cache_hits, deprecated in 0.9.2, gone in 0.12; vllm/v1/metrics/loggers.py),
# which counts a waiting request's lookup again at every step it fails to be scheduled;
# SGLang's cached_tokens (summed over its cache_source label: device, host, storage);
# TensorRT-LLM's prompt_cached_tokens
CACHED_PROMPT_TOKENS = ("vllm:prompt_tokens_cached_total", "vllm:prefix_cache_hits_total",
                        "vllm:gpu_prefix_cache_hits_total", "sglang:cached_tokens_total",
                        "trtllm_prompt_cached_tokens_total")
# vLLM's prefix-cache lookups, in the hits' unit (tokens; V0's blocks): each recounted with
# its hits at every step a request waits, so hits ÷ queries stays a share where hits ÷ prompt
# tokens grows with the queue (vLLM's own log divides them for its "Prefix cache hit rate")
PREFIX_CACHE_QUERIES = {"vllm:prefix_cache_hits_total": "vllm:prefix_cache_queries_total",
                        "vllm:gpu_prefix_cache_hits_total": "vllm:gpu_prefix_cache_queries_total"}
# vLLM's prompt tokens by where their KV came from (label "source"): computed here
# (local_compute), the prefix cache (local_cache_hit), a KV transfer (external_kv_transfer)
PROMPT_BY_SOURCE = "vllm:prompt_tokens_by_source_total"
COMPUTED_SOURCE = "local_compute"
# V0's requests swapped out to CPU memory for want of KV blocks (vllm/engine/metrics.py)
SWAPPED = ("vllm:num_requests_swapped",)
# the pool as the engine sized it: vLLM's cache_config_info (labels num_gpu_blocks and
# block_size, value 1; under data parallelism the frontend's num_gpu_blocks is the sum of its
# engines' — vllm/v1/engine/utils.py wait_for_engine_startup, "Sum values from all engines in
# DP case" — on every engine's series), SGLang's max_total_num_tokens
CACHE_CONFIG = "vllm:cache_config_info"
POOL_TOKENS = ("sglang:max_total_num_tokens",)
# TensorRT-LLM's pool as its KV cache manager sized it: trtllm_cache_config_info, with vLLM's
# label names num_gpu_blocks and block_size (TRT-LLM PR #12545's config-info gauges, and #12564
# as kubernetes-sigs/gateway-api-inference-extension #2713 and #2739 read it), else its
# iteration stats' max blocks × tokens per block (tensorrt_llm/metrics/collector.py, commit
# 050f80d: kv_cache_max_blocks, kv_cache_tokens_per_block)
TRTLLM_CACHE_CONFIG = "trtllm_cache_config_info"
TRTLLM_MAX_BLOCKS = "trtllm_kv_cache_max_blocks"
TRTLLM_TOKENS_PER_BLOCK = "trtllm_kv_cache_tokens_per_block"
# the requests its scheduler paused at the last iteration (inflight batching stats'
# numPausedRequests: under the MAX_UTILIZATION policy, evicted for want of KV blocks), a gauge:
# no count over a window, as vLLM's preemption counter gives
TRTLLM_PAUSED = "trtllm_num_paused_requests"
# SGLang's mean accepted length a verify step over its last logging interval: 0 without a
# drafter (scheduler_metrics_mixin.py: 'if self.spec_algorithm.is_none(): spec_accept_length
# = 0'), above 0 once a drafter's step has run — the sign a drafter serves
SPEC_ACCEPT_LENGTH = ("sglang:spec_accept_length",)
MAX_ACCEPT_LENGTH = 1024.0  # tokens a verify step keeps: far past any draft tree's
# vLLM V1's drafter counters (vllm/v1/spec_decode/metrics.py SpecDecodingProm; prometheus_client
# adds "_total"): made per engine at start-up, and only where a drafter is configured. Each
# verify step of a request is one draft (SpecDecodingStats.observe_draft: num_drafts += 1, its
# draft tokens and the accepted ones added, position i counted where i+1 or more were kept), so
# a step keeps 1 + accepted ÷ drafts tokens, the bonus token in ("Conventionally, mean
# acceptance length includes the bonus token", its log line's figure). Draft and accepted
# tokens since PR #15151 (Mar 2025), drafts and the per-position counter (label "position")
# since PR #16665 (Apr 2025; v0.8.5 by its merge date)
SPEC_DRAFTS = ("vllm:spec_decode_num_drafts_total",)
SPEC_DRAFT_TOKENS = ("vllm:spec_decode_num_draft_tokens_total",)
SPEC_ACCEPTED_TOKENS = ("vllm:spec_decode_num_accepted_tokens_total",)
SPEC_ACCEPTED_PER_POS = ("vllm:spec_decode_num_accepted_tokens_per_pos_total",)
SPEC_COUNTERS = SPEC_DRAFTS + SPEC_DRAFT_TOKENS + SPEC_ACCEPTED_TOKENS + SPEC_ACCEPTED_PER_POS
REQUESTS = ("vllm:request_success_total", "sglang:num_requests_total",
            "trtllm_request_success_total")
TTFT = ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds",
        "trtllm_time_to_first_token_seconds")
# TensorRT-LLM's time_per_output_token: one observation per finished request, its mean
ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
       "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds",
       "trtllm_time_per_output_token_seconds")
E2E = ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds",
       "trtllm_e2e_request_latency_seconds")
# Engines that export every counter and histogram they have from start-up: vLLM's
# PrometheusStatLogger makes each engine core's series (every finished reason, every source)
# when it starts; llama-server prints each metric on every /metrics request. SGLang and
# TensorRT-LLM make a labelled series at its first increment (prometheus_client's .labels()
# on first use). Either way a series absent from the first scrape has no known start in the
# window (a lazily made one may also have been left out of that scrape, or be another
# process's), so it gives no window figure — unless PROCESS_START puts the server's start
# inside the window. The prefixes only word the note.
EAGER_PREFIXES = ("vllm:", "llamacpp:")
# prometheus_client's process collector (the default registry; not in multiprocess mode):
# the serving process's start, unix seconds. A start after the first scrape is a server that
# started inside the window, all its counts the window's; a start that moves between two
# scrapes is a restart, whether or not a counter fell
PROCESS_START = "process_start_time_seconds"
# SGLang exports no PROCESS_START: its /metrics is prometheus_client's multiprocess collector
# alone (sglang/srt/utils/common.py add_prometheus_middleware, 0.5.23: a CollectorRegistry
# with MultiProcessCollector, no process collector), and nothing else there is a time stamp
# (sglang:startup_time_seconds is how long start-up took, by phase). From 0.5.20 each
# scheduler counts its own CPU and idle seconds (sglang/srt/observability/metrics_collector.py,
# fed by the scheduler loop whether or not requests finish): a restart resets them with the
# process, so they fall at a restart that leaves the token counters at 0 or passing their old
# values, where a fall is the only sign SGLang gives
SCHEDULER_SECONDS = ("sglang:scheduler_process_cpu_seconds_total",
                     "sglang:scheduler_idle_seconds_total")


def running_metric(engine: str) -> str:
    """The engine's own gauge of its running batch (``RUNNING``), or "": vLLM's
    vllm:num_requests_running, SGLang's sglang:num_running_reqs, llama-server's
    llamacpp:requests_processing, trtllm-serve's trtllm_num_requests_running."""
    prefix = "llamacpp" if engine.startswith("llama.cpp") else engine
    return next((m for m in RUNNING if m.startswith((prefix + ":", prefix + "_"))), "")
