"""How each engine took its memory before the KV cache: the budget rows `fit` prints, in
each engine's own terms (vLLM's profiling pass, SGLang's and TensorRT-LLM's fractions,
llama.cpp's compute buffer and slots); the same budget as `--explain` steps is
fit_budget_steps.py's."""

from __future__ import annotations

from collections.abc import Callable

from ridgeline.memory import EngineSettings, KVPool
from ridgeline.model import ModelSpec
from ridgeline.reports.fit_state import fixed_state_size, state_per_request_bytes, state_pool_note
from ridgeline.reports.fit_terms import (
    CUDA_WORDS,
    cache_all_on_host,
    cap_flag,
    is_llamacpp,
    per_gpu,
    runtime_words,
)
from ridgeline.units import GIB, MIB, plural

TRANSFER_ROW = "KV transfer buffer (cache_transceiver_config)"


def reserved_share(p: KVPool) -> str:
    """The budget's reserved row's words for the share of memory the engine lets itself use,
    under the engine's own setting: 'gpu_memory_utilization 0.92' (vLLM), 'mem_fraction_static
    0.88' (SGLang); TensorRT-LLM reserves it all, its fraction taken of what is left (below).
    A whole share keeps its decimal ('1.0'), as a launch flag is written; a derived one
    (SGLang's default after its vision-tower cut, 0.835 × 0.9248) reads to four places, as
    its --explain and a plan's --mem-fraction-static write it ('0.7722')."""
    if p.engine == "trtllm":
        return "all of it; its fraction is of what is left"
    from ridgeline.reports.decode import settings_knob

    share = p.reserved_fraction
    return f"{settings_knob(p.engine, 'gpu_memory_utilization')} " \
        + (f"{share:.1f}" if share == int(share) else f"{round(share, 4):g}")


def budget_rows(p: KVPool, s: EngineSettings, model: ModelSpec | None = None,
                vendor: str | None = None, *, flash_attention: bool, family: str = "",
                device: str = "GPU") -> list[list[str]]:
    """Memory per GPU, then each thing the engine takes before the cache, in its order
    (``model``: whose SGLang state pool, where SGLang set it by the model; ``vendor``: the
    card's, and ``family``, whose runtime names the rows: ROCm's HIP context, RCCL and HIP
    graphs on AMD, a TPU's XLA runtime, a Gaudi's HPU graphs (fit_terms.runtime_words);
    ``device``: the card's noun, "memory per chip" on a TPU;
    ``flash_attention``: the deployment's llama.cpp -fa, which names its compute buffer)."""
    def gib(value: float) -> str:
        return f"{value / GIB:,.2f} GiB"

    words = runtime_words(vendor, family)
    per = per_gpu(p, device)
    graphs = words.graphs

    rows = [[f"memory {per}", gib(p.total_bytes)]]
    if is_llamacpp(p):
        attention = "flash attention" if flash_attention else "no flash attention"
        rows += [["− weights", gib(p.weight_bytes)],
                 ["− GPU runtime context", gib(p.non_torch_bytes)],
                 [f"− compute buffer (n_ubatch {p.profile_tokens:,}; {attention})",
                  gib(p.activation_bytes)]]
        if p.fit_free_bytes:  # --fit keeps it free, moving weights rather than fill it
            rows.append([f"− left free by --fit ({fit_target_words(p)})", gib(p.fit_free_bytes)])
    elif p.engine == "sglang":  # its activations and graphs live in what it holds back
        rows += [[f"reserved ({reserved_share(p)}; activations, {graphs} in the rest)",
                  gib(p.reserved_bytes)],
                 [weights_label(p, s, gib), gib(p.weight_bytes)]]
        if p.lora_bytes and s.lora is not None:  # SGLang's LoRA slots, before the pool
            rows.append([f"− LoRA adapters ({s.lora.describe()})", gib(p.lora_bytes)])
        rows += [[f"− {words.context} and TP communicators"
                  + ("" if words == CUDA_WORDS else f" ({words.collectives})")
                  + " (x the fraction)",
                  gib(p.non_torch_bytes)]]
        if p.mm_reserve_bytes:  # a multimodal model's embedding cache (v0.5.18+), feature pool
            rows.append(["− multimodal buffers (embedding cache, feature pool)",
                         gib(p.mm_reserve_bytes)])
    else:
        rows += [[f"reserved ({reserved_share(p)})", gib(p.reserved_bytes)]
                 ] if not p.set_pool_bytes else []
        rows += [[weights_label(p, s, gib), gib(p.weight_bytes)]]
        if p.lora_bytes and s.lora is not None:  # vLLM --enable-lora, loaded with the weights
            rows.append([f"− LoRA adapters ({s.lora.describe()})", gib(p.lora_bytes)])
        rows += [[f"− {peak_label(p)}", gib(p.activation_bytes)],
                 [f"− non-torch ({words.context}, {words.collectives})",
                  gib(p.non_torch_bytes)],
                 [f"− {graphs}" + ("" if p.cuda_graph_bytes or p.accounting is None
                                   else " (none: --enforce-eager)" if s.enforce_eager
                                   else " (captured after sizing)"), gib(p.cuda_graph_bytes)]]
        if p.seat_buffer_bytes:
            seats = f"{p.max_num_seqs:,} {plural(p.max_num_seqs, 'seat')} × vocab"
            rows.append([f"− runtime buffers and decoder ({seats})"
                         if p.engine_buffers else
                         f"− sampler state ({seats})",
                         gib(p.seat_buffer_bytes)])
        if p.seat_state_bytes:  # TensorRT-LLM to 1.2: every seat's Mamba state, up front
            each = p.seat_state_bytes / max(1, p.max_num_seqs) / 2**20
            rows.append([f"− Mamba state ({p.max_num_seqs:,} {plural(p.max_num_seqs, 'seat')} "
                         f"× {each:,.1f} MiB)", gib(p.seat_state_bytes)])
        if p.drafter_buffer_bytes:  # vLLM Model Runner V2's, for its drafter
            rows.append(["− drafter buffers (Model Runner V2)", gib(p.drafter_buffer_bytes)])
        if p.kept_free_bytes:  # vLLM v0.34+: the extensible cache's measurement after warm-up
            rows.append(["− kept free after warm-up (start-up context, margin, VMM granules)",
                         gib(p.kept_free_bytes)])
    transfer = [f"− {TRANSFER_ROW}" + (f" ({s.cache_transceiver.describe()})"
                                      if s.cache_transceiver is not None else ""),
                gib(p.transfer_buffer_bytes)] if p.transfer_buffer_bytes else []
    if transfer and not p.transfer_after_fraction:  # in the PyTorch backend's profiled peak
        rows.append(transfer)
    # TensorRT-LLM's fraction shares out the memory left: where none is, the line below
    # says how far the weights and buffers overflow it (--json's over_budget_bytes_per_gpu)
    short = p.rest_bytes < 0 and not p.set_pool_bytes and not is_llamacpp(p)
    if p.free_fraction_of_rest != 1.0 and not short:
        rows.append([f"x kv_cache_free_gpu_mem_fraction {p.free_fraction_of_rest:g}", ""])
    if transfer and p.transfer_after_fraction and not short:  # the engine backend's
        rows.append(transfer)  # extraCostMemory
    if p.set_pool_bytes:  # the pool as set; what is left is only the room it must fit
        rows.append(["= room on the card", gib(p.rest_bytes)])
        rows.append(["KV pool (--kv-cache-memory-bytes)", f"{gib(p.set_pool_bytes)} {per}"
                     + (f": {gib(p.overflow_bytes)} more than the room" if p.overflow_bytes
                        else "")])
        return rows
    if short:  # as vLLM logs it: "Available KV cache memory: -2.14 GiB", then it stops
        # ("No available memory for the cache blocks")
        rows.append(["= KV pool (negative: the engine stops at start-up)",
                     f"{gib(p.rest_bytes)} {per}"])
        return rows
    if p.state_request_bytes:  # SGLang's state pool, sized before the KV cache and its cap
        rows.append(["= static pool", f"{gib(p.pool_bytes)} {per}"])
        if p.state_pool_fixed:  # a number of requests, whatever the memory: one product
            rows.append([f"− state pool ({p.state_slots:,} requests' state × "
                         f"{state_per_request_bytes(p) / GIB:,.4f} GiB: "
                         f"{fixed_state_size(s, model)})", gib(p.slot_cache_bytes)])
        else:
            rows.append([f"− state pool ({p.state_slots:,} requests' recurrent state, "
                         f"{state_pool_note(p, s, model)})", gib(p.slot_cache_bytes)])
        over = p.slot_cache_bytes - p.pool_bytes
        stops = "SGLang stops at start-up, 'Not enough memory'"
        rows.append(["= KV pool (none: the state pool is " + gib(over) + " more than the "
                     f"static pool; {stops})" if over > 0 else
                     f"= KV pool (none left: {stops})" if p.tokens < 1 else
                     f"= KV pool, capped at {cap_flag(p)} {p.token_cap:,} (the states leave "
                     f"{gib(p.pool_bytes - p.slot_cache_bytes)})" if p.capped else "= KV pool",
                     f"{gib(p.state_kv_bytes)} {per}"])
        return rows
    if p.headroom_bytes:  # SGLang's drafter headroom, allocated past its profile
        rows.append([f"+ drafter headroom ({p.headroom_tokens:,} tokens past the fraction, "
                     "SGLang v0.4.3.post3-v0.5.6.post2)", gib(p.headroom_bytes)])
    if p.capped:  # --max-total-tokens, below what the memory leaves
        rows.append([f"= KV pool, capped at {cap_flag(p)} {p.token_cap:,} (memory leaves "
                     f"{gib(p.fraction_left_bytes)})",
                     f"{gib(p.pool_bytes)} {per}"])
        return rows
    rows.append(["= left unused (the KV cache is in host memory, with its layers)"
                 if cache_all_on_host(p) else "= KV cache" if is_llamacpp(p) else "= KV pool",
                 f"{gib(p.pool_bytes)} {per}"])
    return rows


def fit_target_words(p: KVPool) -> str:
    """The margin llama.cpp's --fit left free, as its flag: '--fit-target 16,000 MiB'."""
    return f"--fit-target {p.fit_free_bytes / MIB:,.0f} MiB"


def weights_label(p: KVPool, s: EngineSettings, gib: Callable[[float], str]) -> str:
    """The weights row, naming what --enable-eplb's (vLLM's or SGLang's) redundant experts
    add of it: '− weights (9.52 GiB of it: 32 redundant experts, EPLB)'."""
    if not p.redundant_expert_bytes or s.eplb is None:
        return "− weights"
    return f"− weights ({gib(p.redundant_expert_bytes)} of it: {s.eplb.describe()})"


def peak_label(p: KVPool) -> str:
    limit = "" if p.image_limit is None else f", --limit-mm-per-prompt image={p.image_limit}"
    if p.encoder_images and p.encoder_bytes >= p.activation_bytes:
        return f"vision tower profile ({p.encoder_images} dummy images{limit})"
    held = (f" + {p.encoder_images} images held ({limit[2:]})" if limit else " + images held") \
        if p.encoder_held_bytes else ""
    if p.engine_buffers and p.activation_bytes > p.forward_bytes:
        return f"engine activations (the lm_head's output for {p.max_num_seqs:,} seats)"
    passes = p.moe_workspace_bytes + p.indexer_bytes if indexer_binds(p) else p.forward_bytes
    if p.accounting is not None and p.moe_workspace_bytes + p.sampler_bytes \
            > passes + p.compile_bytes:
        ws = " + MoE workspace" if p.moe_workspace_bytes else ""
        if p.runner == "MRV2":
            rows = min(p.max_num_seqs, p.profile_tokens)
            logits = "bf16 logits and their fp32 warm-up pass" \
                if p.accounting.mrv2_sampler_warmup else "bf16 logits"
            return f"sampler peak ({rows:,} requests' {logits}){ws}{held}"
        return f"sampler peak ({p.max_num_seqs:,} requests' fp32 logits){ws}{held}"
    cold = " + a cold torch.compile" if p.compile_bytes else ""
    if indexer_binds(p):  # the MoE workspace beneath them is in fit --explain
        cold = " + cold compile" if p.compile_bytes else ""
        return f"activations ({p.forward_tokens_run:,}-token profile + indexer logits{cold}){held}"
    return f"activations ({p.forward_tokens_run:,}-token profile{cold}){held}"


def indexer_binds(p: KVPool) -> bool:
    """Whether a sparse layer's indexer pass (its logits beside the hidden states, over the
    MoE workspace) is the forward's peak in vLLM's profile, not the MLP's activations."""
    return bool(p.indexer_bytes) \
        and p.moe_workspace_bytes + p.indexer_bytes > p.forward_bytes
