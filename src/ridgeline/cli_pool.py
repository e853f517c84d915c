"""CLI: the serving-engine pool flags decode and prefill share (--max-num-seqs,
--max-model-len, --engine-version, the pool switches, --enforce-eager), read into
EngineSettings as fit and simulate size the pool."""

from __future__ import annotations

import argparse
from typing import Any

from ridgeline.cli import engine_sizes, max_model_len_option
from ridgeline.cli_engine import (
    MEMORY_RULES,
    async_scheduling_problem,
    cache_transceiver,
    checked_engine_version,
    decode_context_flag,
    enable_spelling_problem,
    engine_version_flag,
    eplb_settings,
    lora_settings,
    mm_limits,
    pool_switches,
    say_async_caution,
)
from ridgeline.cli_load import drafter, drafts_with_mtp, executor_backend
from ridgeline.errors import InputError
from ridgeline.launch_flags import kv_connector_given, kv_events_given


def pool_max_model_len(args: argparse.Namespace, dep: Any, contexts: list[int],
                       flag: str = "--context", defaulted: bool = False) -> int | None:
    """--max-model-len where given, no shorter than the longest context asked (the engine
    admits no longer request; ``defaulted``: the contexts are the command's default, not
    typed, and the refusal says so). For llama.cpp, as fit takes it, each slot's context (-c
    ÷ -np, what llama-server's -c is cut into): the pool gives each sequence a slot that long."""
    from ridgeline.capacity import SERVING_ENGINES
    from ridgeline.context_length import past_length_refusal

    length = args.max_model_len
    if length is None:
        return None
    if dep.engine not in SERVING_ENGINES and not dep.engine.startswith("llama.cpp"):
        raise InputError("--max-model-len starts a serving engine (vLLM, SGLang, TensorRT-LLM) "
                         f"or sizes llama.cpp's slots; {dep.engine} keeps no KV pool to size")
    if max(contexts) > length and defaulted:  # the user typed no such length
        raise InputError(f"{args.command}'s default {flag} {max(contexts):,} (none was given) "
                         f"is past --max-model-len {length:,}: {dep.engine} admits no longer "
                         f"request; give a {flag} of at most {length:,}, or a --max-model-len "
                         f"of at least {max(contexts):,}")
    problem = past_length_refusal(max(contexts), length, dep.engine, flag)
    if problem:
        raise InputError(problem)
    return int(length)


def engine_pool_settings(args: argparse.Namespace, dep: Any) -> Any:
    """decode's pool settings where any was given (None: the engine's defaults, vLLM's as vllm
    serve sets them, as fit, simulate and plan size it); refused for llama.cpp, which decode
    gives a slot per sequence, but for --engine-version, whose rules (a release's, a build's)
    size every engine's pool as fit sizes it, and -np N, llama-server's slots: at most N run.
    vLLM 0.8 to 0.9.x run a draft model on V0."""
    from ridgeline.drafter_memory import vllm_draft_settings
    from ridgeline.memory import check_block_fits

    settings = _given_pool_settings(args, dep)
    if settings is None:
        return None
    check_block_fits(dep, settings)  # a block past the pool: --block-size's own refusal
    say_async_caution(args, dep, settings)
    return vllm_draft_settings(dep.engine, settings)


def _given_pool_settings(args: argparse.Namespace, dep: Any) -> Any:
    from ridgeline.memory import EngineSettings

    version = pool_engine_version(args, dep)
    spelling = enable_spelling_problem(args, dep.engine, version)
    if spelling:  # --enable-hybrid-kv-cache-manager before v0.33
        raise InputError(spelling)
    spec = drafts_asked(args)
    if getattr(args, "async_scheduling", False):  # vLLM's default from 0.14, as fit reads it
        problem = async_scheduling_problem(dep.engine, version)
        if problem:
            raise InputError(problem[0])
    asynchronous = not getattr(args, "no_async_scheduling", False)
    explicit = getattr(args, "async_scheduling", False)
    if not asynchronous and dep.engine != "vllm":
        raise InputError(f"--no-async-scheduling is vLLM's; {dep.engine} has no such setting")
    if getattr(args, "no_enable_chunked_prefill", False) and dep.engine != "vllm":
        raise InputError(f"--no-enable-chunked-prefill is vLLM's; {dep.engine} has no such "
                         "setting")
    given = [f"--{name.replace('_', '-')}" for name in (
        "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "block_size",
        "usage", "kv_cache_memory_bytes", "max_total_tokens", "max_mamba_cache_size",
        "mamba_ssm_dtype", "max_cudagraph_capture_size") if getattr(args, name) is not None]
    # llama-server's -np: its slots, which run at most that many (capacity.engine_seats)
    slots = args.max_num_seqs if dep.engine.startswith("llama.cpp") else None
    given = [flag for flag in given if not (slots and flag == "--max-num-seqs")]
    switches = pool_switch_settings(args)  # fit's and simulate's, as they size the pool
    # --kv-transfer-config's connector and --kv-events-config: they change the pool only on
    # a release before v0.22 (v0.20), which --engine-version names (no version: the newest,
    # which keeps the manager beside them)
    switches["kv_connector"] = kv_connector_given(args)
    switches["kv_events"] = kv_events_given(args)
    if switches.get("lora") is not None:  # as fit refuses it: llama.cpp's slots reach no pool
        from ridgeline.lora_slots import check_engine_lora

        check_engine_lora(dep, switches["lora"], version)
    if not given:
        # an MTP drafter's layer and cache are the pool's too (drafter_memory.py), as fit holds
        # so are a separate drafter's vLLM reads, and SGLang's reserve for any drafter; and
        # vLLM runs a draft model or ngram on a runner of its own choice, holding buffers for
        # it there (vllm_mrv2_drafter), as it does probabilistic drafts' logits
        plain = version is None and asynchronous and not switches.keys() - {"kv_connector", "kv_events"} \
            and not slots \
            and not drafts_with_mtp(args) \
            and not (spec and (dep.engine == "sglang" or getattr(args, "spec_draft_model", "")
                               or getattr(args, "spec_method", None) in ("ngram", "draft-model")
                               or getattr(args, "spec_draft_sample", "")))
        return None if plain else EngineSettings(
            engine_version=version, speculative_decoding=spec, async_scheduling=asynchronous,
            async_scheduling_given=explicit, distributed_executor_backend=executor_backend(args),
            ray_v2_executor=getattr(args, "vllm_use_ray_v2_executor_backend", None),
            draft_mtp=drafts_with_mtp(args), drafter=drafter(args), max_num_seqs=slots,
            **switches)
    if dep.engine.startswith("llama.cpp"):
        raise InputError(llamacpp_pool_refusal(given, dep.engine, version, args.block_size))
    if args.usage is not None and dep.engine != "vllm":
        raise InputError(f"--usage is vLLM's (vllm serve or its offline LLM class); {dep.engine} "
                         "has one set of defaults")
    return EngineSettings(gpu_memory_utilization=args.gpu_memory_utilization,
                          max_num_seqs=args.max_num_seqs,
                          max_num_batched_tokens=args.max_num_batched_tokens,
                          block_size=args.block_size, usage=args.usage or "serve",
                          kv_cache_memory_bytes=args.kv_cache_memory_bytes,
                          max_total_tokens=args.max_total_tokens, engine_version=version,
                          speculative_decoding=spec, async_scheduling=asynchronous,
                          async_scheduling_given=explicit,
                          distributed_executor_backend=executor_backend(args),
                          ray_v2_executor=getattr(args, "vllm_use_ray_v2_executor_backend",
                                                  None),
                          draft_mtp=drafts_with_mtp(args), drafter=drafter(args),
                          max_mamba_cache_size=args.max_mamba_cache_size,
                          mamba_ssm_dtype=args.mamba_ssm_dtype,
                          max_cudagraph_capture_size=args.max_cudagraph_capture_size,
                          **switches)


def llamacpp_pool_refusal(given: list[str], engine: str, version: str | None,
                          block_size: int | None) -> str:
    """Why decode and prefill refuse a serving engine's pool flags under llama.cpp, which they
    give a slot per sequence: --block-size in fit's and simulate's words
    (engine_choices.block_size_refusal), the others by the pool they size."""
    from ridgeline.engine_choices import block_size_refusal

    others = [flag for flag in given if flag != "--block-size"]
    owner = ("vLLM's pool" if others == ["--kv-cache-memory-bytes"] else
             "SGLang's and TensorRT-LLM's pools" if others == ["--max-total-tokens"] else
             "a serving engine's pool (vLLM, SGLang, TensorRT-LLM)")
    problems = [f"{', '.join(others)} {'sizes' if len(others) == 1 else 'size'} {owner}; "
                "decode and prefill give llama.cpp a slot per sequence"] if others else []
    if block_size is not None:
        problems.append(block_size_refusal(engine, version, block_size))
    return "; ".join(problems)


def pool_switch_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The pool switches given (cli_engine.pool_switches), in EngineSettings' names: the
    ones left at their defaults are left out, so a run without them is sized as before."""
    given = {name: getattr(args, name, None) for name in (
        "prefix_caching", "swa_full_tokens_ratio", "backend", "extensible_kv_cache",
        "sglang_vlm_cache_size_mb", "mm_feature_transport", "sglang_mm_feature_cache_mb",
        "mm_preprocess_cache_size_mb", "disable_hybrid_kv_cache_manager")}
    given["allow_chunked_local_attn_hybrid"] = getattr(  # the env var, as fit reads it
        args, "vllm_allow_chunked_local_attn_with_hybrid_kv_cache", None)
    given |= {name: True for name in ("language_model_only", "enable_multimodal",
                                      "warm_compile_cache") if getattr(args, name, False)}
    if getattr(args, "no_enable_chunked_prefill", False):  # vLLM: each prompt whole
        given["no_chunked_prefill"] = True
    given["lora"] = lora_settings(args)  # --enable-lora (vLLM's or SGLang's): its slots
    given["eplb"] = eplb_settings(args)  # vLLM --enable-eplb: its redundant experts
    given |= {name: getattr(args, name, None)  # vLLM's compilation config (vllm_compilation)
              for name in ("cudagraph_capture_sizes", "cudagraph_mode", "torch_compile",
                           "stock_torch_compile")}
    given["mm_limits"] = mm_limits(args)  # vLLM --limit-mm-per-prompt: the tower's images
    given["cache_transceiver"] = cache_transceiver(args)  # TRT-LLM: its KV transfer buffers
    return {name: value for name, value in given.items() if value is not None}


def drafts_asked(args: argparse.Namespace) -> bool:
    """Whether a drafter is configured (decode's --spec-tokens; prefill has none), as
    simulate's settings say it: vLLM's V0 engine then leaves chunked prefill off past 32K
    tokens of context, so its pool is profiled at a whole max_model_len (vllm_v0_chunking)."""
    return bool(getattr(args, "spec_tokens", 0))


def pool_engine_version(args: argparse.Namespace, dep: Any) -> str | None:
    """--engine-version, checked against ``dep.engine`` before anything is priced, with fit's
    one-line errors (its spelling as EngineSettings reads it, then the engine's own check)."""
    return checked_engine_version(getattr(args, "engine_version", None), dep.engine)


def eplb_step_note(args: argparse.Namespace) -> str:
    """decode's and prefill's line for --enable-eplb, or ""."""
    eplb = eplb_settings(args)
    if eplb is None:
        return ""
    from ridgeline.vllm_eplb import eplb_step_caution

    return eplb_step_caution(eplb)


def add_pool_flags(p: Any) -> None:
    """decode's and prefill's serving-engine pool settings (the seats a context gets)."""
    g = p.add_argument_group("serving engine's pool (the engine's own names; default: the "
                             "engine's defaults, vLLM's as vllm serve sets them)")
    engine_sizes(g, llamacpp=False, slots=True)  # -np: llama-server's slots; -ub is prefill's
    max_model_len_option(g, "the longest request the engine admits, which its pool must hold "
                         "one of to start (vLLM --max-model-len, SGLang --context-length, "
                         "TensorRT-LLM max_seq_len; default: the model's context, as each "
                         "defaults it); llama.cpp: each slot's context, -c ÷ -np, as fit "
                         "takes it (default: a slot of each context asked)")
    g.add_argument("--usage", choices=["serve", "offline"],
                   help="vLLM usage context whose defaults size the pool: vllm serve "
                   "(default), or the offline LLM class (a batch run)")
    engine_version_flag(g, MEMORY_RULES, v0=True)
    decode_context_flag(g)
    pool_switches(g, "prompt reuse between requests, as fit and simulate size the pool with "
                  "it: vLLM runs a hybrid with recurrent state without it by default before "
                  "v0.28, and with it a linear-attention hybrid keeps two state blocks per "
                  "request")


def add_eager_flag(p: Any) -> None:
    """decode's and prefill's --enforce-eager (SGLang's --disable-cuda-graph)."""
    p.add_argument("--enforce-eager", "--disable-cuda-graph", dest="enforce_eager",
                   action="store_true", help="without CUDA graphs (vLLM --enforce-eager, SGLang "
                   "--disable-cuda-graph, TensorRT-LLM's cuda_graph_config: null): decode steps "
                   "launch every kernel (a prefill step's per-layer cost; a prompt runs without "
                   "graphs anyway), and vLLM's pool keeps the graphs' memory")
