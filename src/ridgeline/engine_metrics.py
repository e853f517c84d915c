"""The metric names each engine exports on /metrics, as `observe` reads them (vLLM, SGLang,
llama-server): data shared by the reader and the reports that name a gauge."""

from __future__ import annotations

RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred")
# older llama-server builds: the KV cells in use, beside kv_cache_usage_ratio, which is their
# share of -c (the context it was started with), not of the memory (removed by PR #13660)
LLAMACPP_KV_TOKENS = "llamacpp:kv_cache_tokens"
# vLLM splits its waiting queue by why (vllm/v1/metrics/loggers.py): "capacity" waits for the
# batch; "deferred" for a KV transfer, a LoRA budget or a blocked status
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
            "llamacpp:kv_cache_usage_ratio")
# SGLang's num_retracted_reqs is a gauge (the last interval's); its counter is named
# "requests" (python/sglang/srt/metrics/collector.py)
PREEMPTIONS = ("vllm:num_preemptions_total", "sglang:num_retracted_requests_total")
PROMPT_TOKENS = ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total",
                 "llamacpp:prompt_tokens_total")
GENERATION_TOKENS = ("vllm:generation_tokens_total", "sglang:generation_tokens_total",
                     "llamacpp:tokens_predicted_total")
GENERATION_SECONDS = ("llamacpp:tokens_predicted_seconds_total",)
# SGLang's scheduler counts tokens as each step runs them, by mode; its prompt_tokens_total and
# generation_tokens_total move only when a request finishes (metrics/collector.py)
REALTIME_TOKENS = "sglang:realtime_tokens_total"
PREFILL_MODES = ("prefill_compute", "prefill")  # computed prompt tokens, not cache hits
# prompt tokens served from the prefix cache, which the prompt counters above include:
# vLLM V1's prefix_cache_hits (tokens; vllm/v1/metrics/loggers.py), SGLang's cached_tokens
# (summed over its cache_source label: device, host, storage)
CACHED_PROMPT_TOKENS = ("vllm:prefix_cache_hits_total", "sglang:cached_tokens_total")
# V0's requests swapped out to CPU memory for want of KV blocks (vllm/engine/metrics.py)
SWAPPED = ("vllm:num_requests_swapped",)
# the pool as the engine sized it: vLLM's cache_config_info (labels num_gpu_blocks and
# block_size, value 1), SGLang's max_total_num_tokens
CACHE_CONFIG = "vllm:cache_config_info"
POOL_TOKENS = ("sglang:max_total_num_tokens",)
REQUESTS = ("vllm:request_success_total", "sglang:num_requests_total")
TTFT = ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds")
ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
       "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds")
E2E = ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds")
