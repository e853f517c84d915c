"""TensorRT-LLM's LLM API options as a trtllm-serve YAML gives them: which keys exist, and
which of them change only the speed.

trtllm-serve's ``--extra_llm_api_options`` (``--config``) YAML is merged over the flags'
arguments and handed to the LLM API (tensorrt_llm/commands/serve.py, then
llmapi/llm_utils.update_llm_args_with_extra_dict); its argument classes derive from
BaseLlmArgs (tensorrt_llm/llmapi/llm_args.py), whose pydantic model_config sets
``extra="forbid"``, so a key that is no field stops the start-up ("Extra inputs are not
permitted"). LLM_API_FIELDS are the fields of BaseLlmArgs, TorchLlmArgs and TrtLlmArgs, read
in three stored 1.x revisions of llm_args.py: one from 1.0's line (cuda_graph_config beside
enable_trtllm_sampler, enable_mixed_sampler and connector_config), one with sampler_type and
kv_connector_config, and one of 1.2's (custom_tokenizer, sparse_attention_config,
layer_wise_benchmarks_config); joined with 0.20's PyTorch options ridgeline names elsewhere
(use_cuda_graph, cuda_graph_batch_sizes), use_torch_sampler (the sampler switch between
enable_trtllm_sampler and sampler_type, which TensorRT-LLM's own tests pass to LLM(...):
test_generate_with_return_logits, use_torch_sampler=use_torch_sampler) and the key
trtllm-serve takes out of the file before the LLM API reads it
(disagg_cluster). A field any of them has is counted, so a key refused as none is in none.
"""

from __future__ import annotations

from typing import Any

LLM_API_FIELDS = frozenset({
    # BaseLlmArgs
    "model", "tokenizer", "tokenizer_mode", "custom_tokenizer", "skip_tokenizer_init",
    "trust_remote_code", "tensor_parallel_size", "dtype", "revision", "tokenizer_revision",
    "model_kwargs", "pipeline_parallel_size", "context_parallel_size", "gpus_per_node",
    "moe_cluster_parallel_size", "moe_tensor_parallel_size", "moe_expert_parallel_size",
    "enable_attention_dp", "enable_lm_head_tp_in_adp", "pp_partition", "cp_config",
    "load_format", "enable_lora", "lora_config", "kv_cache_config", "enable_chunked_prefill",
    "guided_decoding_backend", "batched_logits_processor", "iter_stats_max_iterations",
    "request_stats_max_iterations", "peft_cache_config", "scheduler_config",
    "cache_transceiver_config", "sparse_attention_config", "speculative_config",
    "max_batch_size", "max_input_len", "max_seq_len", "max_beam_width", "max_num_tokens",
    "gather_generation_logits", "num_postprocess_workers", "postprocess_tokenizer_dir",
    "reasoning_parser", "decoding_config", "mpi_session", "otlp_traces_endpoint", "backend",
    "return_perf_metrics", "perf_metrics_max_requests", "orchestrator_type", "env_overrides",
    # TorchLlmArgs (the PyTorch backend, trtllm-serve's default from 1.0)
    "build_config", "garbage_collection_gen0_threshold", "cuda_graph_config",
    "attention_dp_config", "disable_overlap_scheduler", "moe_config", "nvfp4_gemm_config",
    "attn_backend", "sampler_type", "sampler_force_async_worker", "enable_iter_perf_stats",
    "enable_iter_req_stats", "print_iter_log", "batch_wait_timeout_ms",
    "batch_wait_timeout_iters", "batch_wait_max_tokens_ratio", "torch_compile_config",
    "enable_autotuner", "enable_layerwise_nvtx_marker", "enable_min_latency", "stream_interval",
    "force_dynamic_quantization", "allreduce_strategy", "checkpoint_loader",
    "checkpoint_format", "kv_connector_config", "mm_encoder_only", "ray_worker_extension_cls",
    "ray_placement_config", "enable_sleep", "use_cute_dsl_blockscaling_mm",
    "use_cute_dsl_blockscaling_bmm", "disable_flashinfer_sampling", "max_stats_len",
    "layer_wise_benchmarks_config", "enable_mixed_sampler", "enable_trtllm_sampler",
    "use_torch_sampler", "connector_config",
    # TrtLlmArgs (--backend tensorrt)
    "enable_tqdm", "workspace", "fail_fast_on_attention_window_too_large",
    "enable_build_cache", "extended_runtime_perf_knob_config", "calib_config", "quant_config",
    "embedding_parallel_mode", "fast_build", "enable_prompt_adapter",
    "max_prompt_adapter_token", "batching_type", "normalize_log_probs",
    # 0.20's PyTorch options, and trtllm-serve's own key (serve.py pops it)
    "use_cuda_graph", "cuda_graph_batch_sizes", "disagg_cluster",
})

# moe_config.backend values that bring memory of their own: WIDEEP, the wide expert-parallel
# MoE, with its all-to-all workspaces and load balancer's expert slots
MOE_BACKENDS_WITH_MEMORY = frozenset({"WIDEEP"})


def unknown_option(key: str, file_name: str) -> str:
    """The refusal of a key no LLM API argument class has, or "" for one it has: 'bogus_key
    in x.yml: TensorRT-LLM has no such option ...'."""
    if key in LLM_API_FIELDS:
        return ""
    return (f"{key} in {file_name}: TensorRT-LLM has no such option: its LLM API refuses "
            "unknown keys (BaseLlmArgs: extra='forbid'), so trtllm-serve would not start; "
            "remove it, or check its spelling")


def speed_only(key: str, value: Any) -> tuple[str, str] | None:
    """The setting as said, and why it changes the speed and not the memory; None for a
    setting that is not speed-only: enable_autotuner: false (each tunable op keeps its
    default kernel; its field says 'the performance may significantly degrade'),
    stream_interval N (how many steps between streamed responses: the CPU's work per token),
    moe_config with only a backend other than WIDEEP (which MoE kernels run)."""
    if key == "enable_autotuner" and value is False:
        return ("enable_autotuner: false", "each tunable op keeps its default kernel, which "
                "TensorRT-LLM says may run significantly slower")
    if key == "stream_interval" and isinstance(value, int) and not isinstance(value, bool):
        return (f"stream_interval: {value}", "it sets how many steps pass between streamed "
                "responses, the CPU's work per token")
    if key == "moe_config" and isinstance(value, dict) and set(value) == {"backend"} \
            and str(value["backend"]).upper() not in MOE_BACKENDS_WITH_MEMORY:
        return f"moe_config.backend: {value['backend']}", "it picks the MoE kernels that run"
    return None


def speed_only_said(setting: tuple[str, str], file_name: str, command: str) -> str:
    """The line said of a speed-only option (``speed_only``'s): fit's note (it prices memory
    alone, so the option is dropped), another command's caution (its speeds are those of
    TensorRT-LLM's default)."""
    said, why = setting
    if command == "fit":
        return f"ignored {file_name}: {said} ({why}; fit prices memory, which it leaves alone)"
    return (f"{file_name}: {said} is not modelled ({why}): the speeds here are those of "
            "TensorRT-LLM's default")
