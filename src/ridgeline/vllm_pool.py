"""vLLM's KV pool: its batch defaults, the pool its profiling pass leaves, and the
--kv-cache-memory-bytes it advises at start-up.

The pool is total × gpu_memory_utilization − weights − the profile's peak − non-torch
memory − (v0.21+) the CUDA graphs, paged in blocks of block_size tokens
(vllm/v1/worker/gpu_worker.py determine_available_memory; V0 worker.py). What each release
counts in those terms is ``vllm_memory.py``'s, the graphs' sizes ``vllm_graphs.py``'s; its hybrid
KV groups are ``kvgroups.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ridgeline.context_length import served_positions
from ridgeline.datafiles import engine_defaults
from ridgeline.decode_context import dcp_release_problem
from ridgeline.deployment import Deployment
from ridgeline.engine_choices import block_size_problem
from ridgeline.errors import InputError
from ridgeline.hardware import Accelerator, device_memory_bytes, engine_devices, runtime_device
from ridgeline.kvgroups import KERNEL_BLOCK_ALIGNMENT, stage_group_layers, vllm_kv_groups
from ridgeline.kvpool import KVPool
from ridgeline.layouts import CHUNKED, FULL, WINDOW_MIXERS
from ridgeline.served_model import windows_as_full
from ridgeline.stages import Stage
from ridgeline.units import GIB, MIB
from ridgeline.vllm_attention_block import attention_block_problem
from ridgeline.vllm_extensible import (
    extensible_fraction,
    extensible_problem,
    extensible_sizing,
    granule_cut_bytes,
    kept_free_bytes,
    prompt_logprob_step_bytes,
    sizing_margin_bytes,
    start_context_bytes,
    startup_budget_problem,
)
from ridgeline.vllm_graphs import (
    capture_query_len,
    captured_sizes,
    cuda_graph_bytes,
    largest_full_decode,
    sm100_card,
    spec_capture_multiple,
)
from ridgeline.vllm_hybrid import (
    chunks_paged,
    manager_off_reason,
    manager_problem,
    ssm_state_dtype,
    state_blocks,
)
from ridgeline.vllm_memory import (
    VLLMAccounting,
    activation_bytes_per_token,
    compile_transient_bytes,
    default_block_size,
    encoder_profile,
    indexer_decode_logits_bytes,
    indexer_decode_pass_bytes,
    indexer_pass_bytes,
    model_runner,
    moe_workspace_bytes,
    mrv2_sampler_bytes,
    mrv2_state_bytes,
    non_torch_bytes,
    parse_version,
    sampler_peak_bytes,
    vllm_accounting,
)
from ridgeline.vllm_mla_block import mla_block_size
from ridgeline.vllm_mm_limits import images_per_prompt
from ridgeline.vllm_mrv2_drafter import (
    draft_sample_problem,
    drafter_buffer_bytes,
    profile_forward_tokens,
)
from ridgeline.vllm_mxfp4 import mxfp4_padding_bytes
from ridgeline.vllm_v0_chunking import (
    V0_CHUNKED_ABOVE,
    v0_runs_whole,
    v0_whole_reason,
    whole_budget_refusal,
)

if TYPE_CHECKING:
    from ridgeline.memory import EngineSettings

# vLLM V0 (vllm/config.py SchedulerConfig): without chunked prefill it profiles
# max(max_model_len, 2048) tokens; chunked prefill is on by default past 32K tokens of
# context for the models and launches it does not exempt (vllm_v0_chunking.py), with a
# 2,048-token budget from v0.6.5 ("a balance between ITL and TTFT") and 512 before it ("the
# best balance between ITL and TTFT on A100"): read in the PyPI source tarballs, 512 in 0.6.0
# and 0.6.4, 2048 in 0.6.5, 0.6.6, 0.7.0
V0_CHUNK_TOKENS = 2048
V0_EARLY_CHUNK_TOKENS = 512
V0_CHUNK_TOKENS_FROM = (0, 6, 5)
# From v0.10.1 a max_num_seqs left unset defaults to min(the device's default,
# max_num_batched_tokens) (EngineArgs._set_default_args_v1, later
# _set_default_max_num_seqs_and_batched_tokens_args); 0.9.1, 0.9.2 and 0.10.0 took the default
# whole, and SchedulerConfig then refused a budget below it (PyPI source tarballs)
SEATS_CLAMPED_FROM = (0, 10, 1)
# A budget left to the default is lowered to max_num_seqs × max_model_len ("some models, e.g.
# Whisper, have embeddings tied to max length"): V0 from v0.9.0 (SchedulerConfig.__post_init__,
# absent in 0.8.5); V1 from v0.11.1 (EngineArgs._set_default_args, later
# _set_default_max_num_seqs_and_batched_tokens_args; read through 0.34.0). V1 before 0.11.1
# set the device's default on EngineArgs first, so the config's cap never saw it (0.10.1, 0.11.0)
V0_BUDGET_CAPPED_FROM = (0, 9)
V1_BUDGET_CAPPED_FROM = (0, 11, 1)
# vLLM's first release aligning a hybrid's attention block to the block size asked (PR
# #37467, read in the v0.19.1 and v0.20.0 wheels)
HYBRID_ALIGN_ASKED = (0, 20)


def vllm_deployment(dep: Deployment) -> Deployment:
    """``dep`` as vLLM runs it: on a part the runtime lists as several devices (an MI250's two
    64 GiB GCDs, hardware.runtime_device) each device is a GPU of its own and a tensor-parallel
    rank, so 1 x MI250 runs at --tensor-parallel-size 2; any other part as it is."""
    n = engine_devices("vllm", dep.accelerator)
    if n == 1:
        return dep
    return replace(dep, accelerator=runtime_device(dep.accelerator),
                   tensor_parallel_size=dep.tensor_parallel_size * n)


def vllm_batch_defaults(dep: Deployment, usage: str, version: str | None = None
                        ) -> dict[str, int]:
    """vLLM's default max_num_seqs and max_num_batched_tokens for this accelerator at release
    ``version`` (None: the default), by its tier (``vllm_batch_tier``, engines.json
    vllm.batch_defaults): for vllm serve 16,384 tokens on a B200 from v0.28 (8,192 before),
    8,192 on an H100, 2,048 on an L40S or a DGX Spark."""
    table = engine_defaults("vllm")["batch_defaults"]
    return dict(table[vllm_batch_tier(dep, version)][usage])


def vllm_queried_memory_bytes(acc: Accelerator, version: str) -> float:
    """The device total vLLM ``version``'s get_batch_defaults reads for ``acc``: 0 where the
    query fails and it falls back to nothing (a TPU's platform; a GB10's NVML query before
    v0.33, batch_defaults.memory_unknown_until), else the device's total (a DGX Spark: 0 on
    0.32, 121.69 GiB on 0.33). The device is one the runtime lists (an MI250's 64 GiB GCD)."""
    table = engine_defaults("vllm")["batch_defaults"]
    until = table["memory_unknown_until"].get(acc.id)
    if acc.vendor in table["memory_unknown_vendors"] or (
            until is not None and parse_version(version) < parse_version(until)):
        return 0.0
    return device_memory_bytes(acc)


def vllm_batch_tier(dep: Deployment, version: str | None = None) -> str:
    """The batch_defaults tier vLLM ``version`` gives this card's runtime device: "largest"
    from 160 GiB (v0.28 on), "large" from 70 GiB, an A100 aside and a GB10 from v0.33
    (small_from), else "other". A B200 (178.35 GiB): "largest" on 0.32, "large" on 0.27; an
    H100 or H200: "large"; a DGX Spark: "other" on 0.32 (its total unread) and 0.33 alike."""
    table = engine_defaults("vllm")["batch_defaults"]
    release = vllm_accounting(version).version
    acc = runtime_device(dep.accelerator)
    memory = vllm_queried_memory_bytes(acc, release)
    if memory >= table["largest_memory_gib"] * GIB \
            and parse_version(release) >= parse_version(table["largest_from"]):
        return "largest"
    small_from = table["small_from"].get(acc.id)
    kept_small = small_from is not None and parse_version(release) >= parse_version(small_from)
    if memory >= table["large_memory_gib"] * GIB and not acc.id.startswith("a100") \
            and not kept_small:
        return "large"
    return "other"


def v0_chunk_tokens(version: str) -> int:
    """V0's token budget under chunked prefill: 2,048 from v0.6.5, 512 before."""
    return V0_CHUNK_TOKENS if parse_version(version) >= V0_CHUNK_TOKENS_FROM \
        else V0_EARLY_CHUNK_TOKENS


def v0_default_tokens(dep: Deployment, s: EngineSettings, acc: VLLMAccounting,
                      max_model_len: int) -> int:
    """V0's default token budget before any cap (``budget_cap``): max(max_model_len, 2,048)
    where it runs a prompt whole (``v0_runs_whole``), else its chunk budget
    (``v0_chunk_tokens``): Llama-3.1-8B at max_model_len 40,000 on 0.6.4, 512."""
    if v0_runs_whole(dep, s, acc, max_model_len):
        return max(max_model_len, V0_CHUNK_TOKENS)
    return v0_chunk_tokens(acc.version)


def v0_budget_source(dep: Deployment, s: EngineSettings, tokens: int) -> str:
    """Where vLLM's V0 engine takes its default token budget of ``tokens`` from, under
    ``s`` (as chunked_prefill.step_budget names it): its chunk budget, 512 before v0.6.5
    and 2,048 from it, past 32K tokens of context; else max_model_len, a prompt run whole
    (``v0_whole_reason``); one default for vllm serve and the offline LLM class alike."""
    acc = vllm_accounting(s.engine_version)
    length = s.max_model_len or served_positions(dep.model, "vllm") or 0
    default = v0_default_tokens(dep, s, acc, length)
    lowered = f" ({default:,}), lowered to max_num_seqs × max_model_len" if tokens < default \
        else ""
    if v0_runs_whole(dep, s, acc, length):
        held = "max_model_len" if length >= V0_CHUNK_TOKENS else \
            f"max(max_model_len, {V0_CHUNK_TOKENS:,})"
        why = f": {held}, as it runs a prompt whole on its V0 engine " + \
            v0_whole_reason(dep, s, acc, length)
    else:
        since = "v" + ".".join(map(str, V0_CHUNK_TOKENS_FROM))
        why = (f" with its V0 engine's chunked prefill, on past {V0_CHUNKED_ABOVE // 1024}K "
               f"tokens of context: {V0_EARLY_CHUNK_TOKENS:,} before {since}, "
               f"{V0_CHUNK_TOKENS:,} from it")
    return (f"vLLM {acc.version}'s default max_num_batched_tokens{lowered}{why}; the same for "
            "vllm serve and --usage offline")


def vllm_scheduler_budget(dep: Deployment, s: EngineSettings, acc: VLLMAccounting
                          ) -> tuple[int, int]:
    """max_num_seqs and max_num_batched_tokens as vLLM ``acc.version`` sets them: the flags,
    else its defaults; a default budget no more than max_num_seqs × max_model_len (V0 from
    v0.9, V1 from v0.11.1: --max-num-seqs 1 --max-model-len 4096 on an H100 profiles 4,096
    tokens, not 8,192); from v0.10.1 a default max_num_seqs is lowered to a smaller token
    budget (--max-num-batched-tokens 512 on an H100: 512 seats, not 1,024). InputError where
    vLLM refuses to start: a budget below the seats, or (V0 without chunked prefill, or
    --no-enable-chunked-prefill where honoured) below max_model_len. With that flag V1's
    default budget is max(max_model_len, the card's default) before the cap (engines.json
    vllm.chunked_prefill_off): Llama-3.1-8B at 32K on an H100, 32,768, not 8,192."""
    length = s.max_model_len or served_positions(dep.model, "vllm") or 0
    if acc.engine == "V0":  # a whole max_model_len prompt over 256 seqs; chunks past 32K
        seqs = s.max_num_seqs or 256
        whole = v0_runs_whole(dep, s, acc, length)
        tokens = s.max_num_batched_tokens or budget_cap(
            v0_default_tokens(dep, s, acc, length), seqs, length,
            parse_version(acc.version) >= V0_BUDGET_CAPPED_FROM)
        if whole and tokens < length:
            raise InputError(f"--max-num-batched-tokens ({tokens:,}) is below max_model_len "
                             f"({length:,}): vLLM {acc.version} runs a prompt whole on its "
                             f"V0 engine {v0_whole_reason(dep, s, acc, length)}, and refuses "
                             "to start")
    else:
        defaults = vllm_batch_defaults(dep, s.usage, acc.version)
        seqs = s.max_num_seqs or defaults["max_num_seqs"]
        whole = v0_runs_whole(dep, s, acc, length)  # --no-enable-chunked-prefill, honoured
        default = max(length, defaults["max_num_batched_tokens"]) if whole \
            else defaults["max_num_batched_tokens"]
        tokens = s.max_num_batched_tokens or budget_cap(
            default, seqs, length, parse_version(acc.version) >= V1_BUDGET_CAPPED_FROM)
        if whole and tokens < length:
            raise InputError(f"{whole_budget_refusal(tokens, length)} (vLLM {acc.version} "
                             "refuses to start with --no-enable-chunked-prefill)")
        if seats_clamped(s, acc, defaults["max_num_seqs"]):
            seqs = tokens
    if tokens < seqs:  # vLLM's SchedulerConfig refuses this at start-up
        seats = f"--max-num-seqs ({seqs:,})" if s.max_num_seqs else \
            f"vLLM {acc.version}'s default max_num_seqs ({seqs:,}; v0.10.1 and later lower it " \
            "to the budget)"
        budget = "--max-num-batched-tokens" if s.max_num_batched_tokens \
            else "vLLM's default max_num_batched_tokens"
        raise InputError(f"{budget} ({tokens:,}) must be at least {seats}: vLLM refuses to "
                         "start otherwise")
    return seqs, tokens


def budget_cap(default_tokens: int, seqs: int, max_model_len: int, capped: bool) -> int:
    """vLLM's default token budget where the release caps it (``capped``): no more than
    max_num_seqs × max_model_len tokens, what the seats could hold at once (1 seat × 4,096:
    4,096, where an H100's default is 8,192); the default itself where it does not, or no
    length is known."""
    if not capped or max_model_len < 1:
        return default_tokens
    return min(default_tokens, seqs * max_model_len)


def seats_clamped(s: EngineSettings, acc: VLLMAccounting, default_seqs: int) -> bool:
    """Whether vLLM ``acc.version`` lowers its default max_num_seqs to the token budget asked:
    max_num_seqs unset, --max-num-batched-tokens below the default, v0.10.1 or later."""
    return acc.engine == "V1" and s.max_num_seqs is None \
        and s.max_num_batched_tokens is not None and s.max_num_batched_tokens < default_seqs \
        and parse_version(acc.version) >= SEATS_CLAMPED_FROM


def vllm_seats_note(dep: Deployment, s: EngineSettings) -> str:
    """How vLLM came to the seats it runs where it lowered its default to the token budget
    (for --explain), else ""."""
    acc = vllm_accounting(s.engine_version)
    default = vllm_batch_defaults(dep, s.usage, acc.version)["max_num_seqs"]
    if not seats_clamped(s, acc, default):
        return ""
    return (f"vLLM's default of {default:,} lowered to --max-num-batched-tokens: with "
            "max_num_seqs unset it takes min(default, max_num_batched_tokens) (engine/"
            "arg_utils.py, from v0.10.1); earlier releases refuse to start")


def vllm_pool(dep: Deployment, s: EngineSettings, total_bytes: float, weight_bytes: float,
              kv_bytes_per_token: float, stage: Stage | None = None) -> KVPool:
    """vLLM: total × gpu_memory_utilization − weights − the profiling pass's peak (the larger
    of the forward pass over the token budget and the sampler over max_num_seqs requests, a
    vision tower's images held beside them, or the tower's own pass if larger) − non-torch
    memory − (v0.21+) the CUDA-graph estimate, as ``s.engine_version`` counts them; of one
    pipeline ``stage``, its own layers (the sampler on the last, the tower on the first).
    From v0.34 on CUDA and ROCm the same terms are measured after warm-up, at a fraction of
    1.0 unless given, less what that measurement keeps free (vllm_extensible.py)."""
    acc = vllm_accounting(s.engine_version)
    problem = dcp_release_problem(dep, acc.version, acc.engine)
    if problem:
        raise InputError(problem)
    seqs, tokens = vllm_scheduler_budget(dep, s, acc)
    block = s.block_size
    if block is not None and vllm_block_size_problem(block, s.engine_version):
        raise InputError(vllm_block_size_problem(block, s.engine_version))
    problem = "" if block is None else attention_block_problem(
        dep, acc.version, block, "" if s.engine_version is not None
        else f"vLLM {acc.version} (the default --engine-version)")
    if problem:  # no attention backend takes the block asked (vllm_attention_block)
        raise InputError(problem)
    problem = extensible_problem(dep, s, acc)
    if problem:  # --enable-extensible-kv-cache where vLLM has or takes none
        raise InputError(problem)
    extensible = extensible_sizing(dep, s, acc)  # v0.34+: measured after warm-up
    problem = startup_budget_problem(dep, s, acc, extensible)
    if problem:  # --gpu-memory-utilization 1.0 where the profile sizes the pool
        raise InputError(problem)
    fraction = s.gpu_memory_utilization or (extensible_fraction() if extensible
                                            else acc.gpu_memory_utilization)
    if s.kv_cache_memory_bytes is not None:
        if acc.engine == "V0" or parse_version(acc.version) < SET_POOL_FROM:
            raise InputError(f"--kv-cache-memory-bytes came in vLLM v0.10.2 (PR #21489): "
                             f"vLLM {acc.version} sizes its pool only from the profile")
        fraction = 1.0  # vLLM ignores gpu_memory_utilization for a set pool
    method, algorithm = (s.drafter.method, s.drafter.algorithm) if s.drafter is not None \
        else ("", "")
    runner = model_runner(dep, acc, method, algorithm, s.stock_torch_compile)
    compile_peak, state = 0.0, 0.0
    problem = draft_sample_problem(acc.version, runner, s.drafter)
    if problem:
        raise InputError(problem)
    # Model Runner V2 cuts its dummy batch by a slot a request beside a draft model
    run = profile_forward_tokens(tokens, seqs, method) if runner == "MRV2" else tokens
    forward = run * activation_bytes_per_token(dep)
    # only the last pipeline stage samples (and so profiles the sampler)
    sampler = sampler_peak_bytes(dep, seqs, acc) if stage is None or stage.last else 0.0
    item = dep.model.vision_item  # the decoder caps the images: seats × images a prompt
    per_prompt = images_per_prompt(s.mm_limits, s.max_model_len or served_positions(
        dep.model, "vllm") or 0, item.tokens) if item is not None else 0
    encoder, held, images = encoder_profile(dep, tokens, seqs, per_prompt) \
        if acc.engine == "V1" and not s.language_model_only and (stage is None or stage.first) \
        else (0.0, 0.0, 0)
    drafter = 0.0
    # a set pool is checked against the card with the graphs captured after it, whether or
    # not this version's budget counts them
    graphs = cuda_graph_bytes(dep, seqs, acc, s.enforce_eager, stage,
                              s.kv_cache_memory_bytes is not None, s.max_cudagraph_capture_size,
                              tokens, graph_query_len(s, acc.version),
                              graph_multiple(dep, s, acc, runner), s.cudagraph_capture_sizes,
                              s.cudagraph_mode, served_length(dep, s))
    if s.warm_compile_cache and runner != "MRV2":
        raise InputError(f"--warm-compile-cache changes nothing here: vLLM {acc.version} runs "
                         f"{dep.model.name} on its {runner} runner, whose profile ridgeline "
                         "sizes without a cold compile (Model Runner V2, where the logs show "
                         "one, runs dense models from v0.25.1 and every model from v0.29)")
    if runner == "MRV2":  # Model Runner V2's own profile (vllm_memory.py); it builds its
        # sampler, and with it the sampler state, on the last pipeline stage only
        # (v1/worker/gpu/model_runner.py load_model: `if self.is_last_pp_rank`)
        last = stage is None or stage.last
        sampler = mrv2_sampler_bytes(dep, seqs, tokens, acc.mrv2_sampler_warmup, run) \
            if sampler else 0.0
        if not acc.mrv2_encoder_profiled:
            encoder, held, images = 0.0, 0.0, 0
        if not acc.mrv2_graphs_in_budget and s.kv_cache_memory_bytes is None:
            graphs = 0.0
        if acc.mrv2_state_counted and last:
            state = mrv2_state_bytes(dep, seqs, tokens)
        if acc.mrv2_state_counted:  # built with the state, in the runner's constructor
            drafter = drafter_buffer_bytes(dep, s.drafter, seqs, tokens, served_length(dep, s),
                                           last)
        if s.cold_compile:  # not under --enforce-eager or -cc.mode=0, nor a warm cache
            compile_peak = compile_transient_bytes()
    # the tower runs first, its outputs kept; a fused-MoE workspace kept from the first MoE
    # layer on is still held while the sampler runs, and while a later sparse layer's
    # indexer holds its logits
    workspace = moe_workspace_bytes(dep, run, acc.version)
    indexer = indexer_pass_bytes(dep, run, acc.version)
    passes = max(forward, workspace + indexer) if indexer else forward
    peak = max(encoder, held + max(passes + compile_peak, workspace + sampler))
    kept_free = 0.0
    if extensible:  # the pool measured after warm-up and capture (vllm_extensible.py)
        transient = peak - workspace  # the workspace stays allocated: no transient
        if stage is None or stage.last:  # the sizing step's prompt logprobs, past its forward
            peak = max(peak, workspace + prompt_logprob_step_bytes(dep, tokens))
        kept_free = kept_free_bytes(total_bytes, fraction, start_context_bytes(dep),
                                    sizing_margin_bytes(transient, dep.accelerator.vendor)) \
            + granule_cut_bytes(stage.layers if stage is not None else len(dep.model.layers))
    manager = (dep.model, acc.version, s.disable_hybrid_kv_cache_manager,
               s.allow_chunked_local_attn_hybrid, method, s.kv_connector, s.kv_events)
    problem = manager_problem(*manager)
    if problem:  # the manager asked on or off where vLLM will not start
        raise InputError(problem)
    manager_off = manager_off_reason(*manager) if acc.hybrid_allocator else ""
    paged = dep  # before the hybrid allocator, or with it off, a model mixing windows and
    kinds = {layer.mixer for layer in dep.model.layers}  # full attention caches all in full
    if (not acc.hybrid_allocator or manager_off) \
            and FULL in kinds and kinds & set(WINDOW_MIXERS):
        paged = replace(dep, model=windows_as_full(dep.model))
    elif FULL in kinds and CHUNKED in kinds and not chunks_paged(acc.version):
        # 0.9.1-0.9.2: the manager pages sliding windows only, a chunked layer full attention
        paged = replace(dep, model=windows_as_full(dep.model, (CHUNKED,)))
    windows_in_full = paged is not dep  # before the state dtype below replaces it too
    state_dtype = ssm_state_dtype(dep.model, acc.version)
    if state_dtype != dep.model.state_dtype:  # Nemotron-H: vLLM's own SSM cache dtype
        paged = replace(paged, model=replace(paged.model, state_dtype=state_dtype))
    # from v0.20 a hybrid's attention block grows in steps of the block size asked
    # (--block-size), not of 16 (Platform._align_hybrid_block_size, PR #37467)
    default_block = vllm_default_block_size(dep, acc, s.max_model_len or served_positions(
        dep.model, "vllm") or 0, seqs)
    steps = max(KERNEL_BLOCK_ALIGNMENT, s.block_size or default_block) \
        if parse_version(acc.version) >= HYBRID_ALIGN_ASKED else KERNEL_BLOCK_ALIGNMENT
    block = s.block_size or default_block
    if dep.model.attention is not None and dep.model.attention.mla is not None:
        block = mla_block_size(dep, acc.version, s.block_size)[0]  # the MLA kernel's block
    # -dcp N: each rank's block holds every Nth token of N × block_size, so the scheduler
    # counts blocks of N × block_size tokens at the page a rank's block_size costs it
    # (dep.kv_replication already ÷ N; decode_context.py)
    block *= dep.decode_context_parallel_size
    groups = vllm_kv_groups(paged, block, align_state_blocks(dep, acc, s.prefix_caching), steps,
                            draft_state_blocks(dep, s))
    block = groups.block_size if groups else block
    weight_bytes += mxfp4_padding_bytes(dep, stage, acc.version)
    if groups is not None and stage is not None:  # a block holds this stage's largest group
        layers = stage_group_layers(dep, groups.layers_per_group, stage.start, stage.layers)
        layer_page = groups.page_bytes * dep.pipeline_parallel_size / groups.layers_per_group
        groups = replace(groups, page_bytes=layer_page * layers)
    return KVPool("vllm", total_bytes, fraction, weight_bytes, peak, non_torch_bytes(dep, acc),
                  graphs, 1.0, kv_bytes_per_token, block, seqs, tokens, groups, forward, sampler,
                  acc, in_flight_batches=acc.in_flight_batches if runs_async(s, acc, runner)
                  else 1,
                  windows_in_full=windows_in_full,
                  hybrid_manager_off=manager_off if windows_in_full else "", stage=stage,
                  encoder_bytes=encoder,
                  encoder_held_bytes=held, encoder_images=images,
                  encoder_images_per_prompt=per_prompt if images else 0,
                  image_limit=s.mm_limits.count("image") if s.mm_limits else None,
                  seat_buffer_bytes=state, drafter_buffer_bytes=drafter,
                  forward_tokens=run if run != tokens else 0,
                  runner=runner, compile_bytes=compile_peak, moe_workspace_bytes=workspace,
                  indexer_bytes=indexer, kept_free_bytes=kept_free,
                  set_pool_bytes=float(s.kv_cache_memory_bytes or 0))


# vLLM PR #21489 (--kv-cache-memory-bytes and the start-up advice): first released in v0.10.2.
# The PyPI source tarballs of 0.10.1 and 0.10.1.1 hold no kv_cache_memory_bytes; 0.10.2's has
# it (vllm/config/cache.py, engine/arg_utils.py "--kv-cache-memory-bytes", and the worker's
# "as specified by kv_cache_memory_bytes config" log and "--kv-cache-memory=" advice)
SET_POOL_FROM = (0, 10, 2)


def runs_async(s: EngineSettings, acc: VLLMAccounting, runner: str) -> bool:
    """Whether vLLM ``acc.version`` schedules asynchronously under ``s`` on ``runner``, as
    its max_concurrent_batches reads the switch after VllmConfig has turned it off for a
    drafter (engine_scheduling.vllm_async_with_drafter) or its executor (vllm_executor_async_from):
    on 0.32 with an ngram drafter it does not, so a window group keeps blocks for one batch
    in flight, not two; nor on 0.18 under --distributed-executor-backend ray."""
    from ridgeline.engine_scheduling import vllm_async_with_drafter, vllm_executor_async_from

    return s.async_scheduling and not vllm_executor_async_from(
        acc.version, s.distributed_executor_backend, s.ray_v2_executor) and (
        s.drafter is None or vllm_async_with_drafter(
            acc.version, s.drafter.method, runner, s.async_scheduling_given))


def set_pool_margin_bytes() -> float:
    """The margin vLLM leaves below its --kv-cache-memory-bytes advice (redundancy_buffer_memory,
    150 MiB; engines.json vllm.set_pool)."""
    return float(engine_defaults("vllm")["set_pool"]["redundancy_mib"]) * MIB


def served_length(dep: Deployment, s: EngineSettings) -> int:
    """The max_model_len vLLM serves ``dep`` at: --max-model-len, else the model's own
    positions (context_length.served_positions: 163,840 for DeepSeek-V3.2); 0 if unknown."""
    return s.max_model_len or served_positions(dep.model, "vllm") or 0


def full_decode_tokens(dep: Deployment, pool: KVPool, s: EngineSettings) -> int:
    """The most decode tokens (seats × (1 + drafts)) ``pool``'s vLLM runs in a FULL CUDA graph
    under ``s`` (vllm_graphs.largest_full_decode over the sizes it captures); 0 under
    --enforce-eager, PIECEWISE or NONE, and where the pool is not vLLM V1's. 1,024 seats at
    the default cap: 512."""
    acc = pool.accounting
    if pool.engine != "vllm" or acc is None or acc.engine == "V0" or s.enforce_eager:
        return 0
    query = graph_query_len(s, acc.version)
    multiple = graph_multiple(dep, s, acc, pool.runner)
    sizes = captured_sizes(pool.max_num_seqs, s.max_cudagraph_capture_size, pool.profile_tokens,
                           query, multiple, acc.version, s.cudagraph_capture_sizes,
                           s.cudagraph_mode, sm100_card(dep.accelerator))
    return largest_full_decode(pool.max_num_seqs, sizes, max(query, multiple), s.cudagraph_mode)


def indexer_eager_shortfall(dep: Deployment, pool: KVPool, s: EngineSettings,
                            decode_tokens: int) -> tuple[float, float]:
    """(what a DeepSeek Sparse Attention decode of ``decode_tokens`` past the largest FULL
    graph needs in one layer's indexer, the room the profile's peak left it), bytes per GPU;
    (0, 0) where the step runs in a graph (its logits are in the graph pool, counted) or the
    model has no indexer. Eager, its logits come from the caching allocator after the KV
    cache is sized: the room is the activation peak less the MoE workspace, held at run time
    too, and a cold compile, which a warm start never takes. DeepSeek-V3.2 on 8 × H200 at
    163,840 tokens and v0.32, 1,024 seats: 1,024 × (3 × 7,168 × 2 + 64 × 132 + 163,840 × 4) B =
    0.68 GiB in 0.89 GiB of room; drafting one token, 2,048 rows: 1.36 GiB."""
    acc = pool.accounting
    if pool.engine != "vllm" or acc is None or acc.engine == "V0" \
            or not indexer_decode_logits_bytes(dep, 1, 1) \
            or decode_tokens <= full_decode_tokens(dep, pool, s):
        return 0.0, 0.0
    need = indexer_decode_pass_bytes(dep, decode_tokens, served_length(dep, s))
    room = pool.activation_bytes - pool.moe_workspace_bytes - pool.compile_bytes
    return need, room / pool.runtime_devices


def graph_query_len(s: EngineSettings, version: str) -> int:
    """The decode query length vLLM ``version`` scales its default CUDA-graph cap by, for
    the drafter ``s`` gives (capture_query_len): 1 + its drafts from v0.13, else 1."""
    return capture_query_len(s.drafter.tokens if s.drafter is not None else 0, version)


def graph_multiple(dep: Deployment, s: EngineSettings, acc: VLLMAccounting, runner: str
                   ) -> int:
    """The multiple vLLM ``acc.version``'s ``runner`` rounds its captured sizes to for the
    drafter ``s`` gives (spec_capture_multiple): 1 + its drafts from v0.11.1, else 1 (and
    under --enforce-eager, which captures nothing, and under cudagraph_mode PIECEWISE, whose
    decode graphs are not FULL: vLLM rounds only for those)."""
    if s.enforce_eager:
        return 1
    return spec_capture_multiple(s.drafter.tokens if s.drafter is not None else 0, acc.version,
                                 runner, dep.tensor_parallel_size, s.cudagraph_mode)


@dataclass(frozen=True)
class PoolAdvice:
    """The terms of vLLM's start-up advice, per device: the card's memory, the fraction
    requested, and what is taken before the pool (weights, LoRA, the profiled peak, non-torch
    memory, seat and drafter buffers and the CUDA graphs, then the 150 MiB margin)."""

    total_bytes: float
    reserved_fraction: float
    taken_bytes: float  # everything above but the margin, the graphs included
    margin_bytes: float

    @property
    def fit_requested_bytes(self) -> float:
        return max(0.0, self.total_bytes * self.reserved_fraction
                   - (self.taken_bytes + self.margin_bytes))

    @property
    def fill_device_bytes(self) -> float:
        return max(0.0, self.total_bytes - (self.taken_bytes + self.margin_bytes))


def vllm_pool_advice_terms(dep: Deployment, pool: KVPool, settings: EngineSettings
                           ) -> PoolAdvice | None:
    """The --kv-cache-memory-bytes vLLM's V1 worker advises at start-up when the flag is
    unset: to fit the requested memory (total × gpu_memory_utilization), and to fill the card;
    each less the weights, the profiled peak, non-torch memory, the CUDA graphs and a 150 MiB
    margin (engines.json vllm.set_pool). None for another engine, V0, or a pool already set."""
    acc = pool.accounting
    if pool.engine != "vllm" or acc is None or acc.engine == "V0" or pool.set_pool_bytes \
            or parse_version(acc.version) < SET_POOL_FROM:
        return None
    n = pool.runtime_devices  # the flag is per device: a GCD of an MI250
    graphs = pool.cuda_graph_bytes / n or cuda_graph_bytes(
        dep, pool.max_num_seqs, acc, settings.enforce_eager, pool.stage, True,
        settings.max_cudagraph_capture_size, pool.profile_tokens,
        graph_query_len(settings, acc.version), graph_multiple(dep, settings, acc, pool.runner),
        settings.cudagraph_capture_sizes, settings.cudagraph_mode, served_length(dep, settings))
    taken = (pool.weight_bytes + pool.lora_bytes + pool.activation_bytes + pool.non_torch_bytes
             + pool.seat_buffer_bytes + pool.drafter_buffer_bytes) / n + graphs
    return PoolAdvice(pool.total_bytes / n, pool.reserved_fraction, taken,
                      set_pool_margin_bytes())


def vllm_pool_advice(dep: Deployment, pool: KVPool, settings: EngineSettings
                     ) -> tuple[float, float] | None:
    """vLLM's start-up advice (vllm_pool_advice_terms) as (fits the memory requested, fills
    the card), bytes per device."""
    terms = vllm_pool_advice_terms(dep, pool, settings)
    return None if terms is None else (terms.fit_requested_bytes, terms.fill_device_bytes)


def align_state_blocks(dep: Deployment, acc: VLLMAccounting, prefix_caching: bool | None
                       ) -> int:
    """State blocks a request holds per state group (vllm_hybrid.py): two in
    mamba_cache_mode "align" (three for Mamba-2 from v0.32), else one — "all" mode, a state
    per block, is not modelled."""
    return state_blocks(dep.model, prefix_caching, acc.version, acc.linear_state_blocks)


def draft_state_blocks(dep: Deployment, s: EngineSettings) -> int:
    """More state blocks a hybrid's request holds in each state group with a drafter: one a
    draft token, vLLM's MambaSpec num_speculative_blocks = num_speculative_tokens, its
    max_memory_usage_bytes page × (1 + them) without prefix caching and × (2 + them) in
    "align" (vllm/model_executor/layers/mamba/abstract.py get_kv_cache_spec and
    vllm/v1/kv_cache_interface.py, from Qwen3-Next's MTP in v0.10.2 to main; main's
    cache_config.use_replayssm, not modelled, drops them); 0 without one. Qwen3.5-35B-A3B with
    3 MTP drafts on an H100 at 4K: 3 state groups × (2 + 3) + 4 attention blocks = 19 blocks
    a request, not 10. An MTP drafter given no length drafts one a layer (model.mtp_layers)."""
    if s.drafter is None:
        return 0
    return s.drafter.tokens or dep.model.mtp_layers


def vllm_default_block_size(dep: Deployment, acc: VLLMAccounting, max_model_len: int = 0,
                            max_num_seqs: int = 0) -> int:
    """The tokens per KV block vLLM ``acc.version`` takes for ``dep`` where --block-size is not
    given (vllm_memory.default_block_size, by the card's vendor: 0.34 on an H100 64, on an
    MI300X 16, on a Gaudi 3 128, on a TPU v6e at 8,192 tokens 256). An MLA cache's is
    vllm_mla_block.py's."""
    return default_block_size(acc, dep.accelerator.vendor, dep.accelerator.family,
                              max_model_len, max_num_seqs)


def vllm_block_size_problem(block: int, version: str | None = None) -> str:
    """Why vLLM at ``version`` (None: the release a run is priced as) refuses ``block`` as its
    --block-size, or "" where it takes it (engine_choices.block_size_problem: CacheConfig's
    BlockSize choices before v0.18.0, any positive block from it): the pool and prefix
    matching share the rule."""
    return block_size_problem("vllm", version, block)
