"""`ridgeline fit --json`: the pool, what it holds, the verdict and its levers as one object."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ridgeline.capacity import context_refusal
from ridgeline.cpu_offload import cpu_offload_json
from ridgeline.load_peak import load_peak_reason
from ridgeline.reports.fit_levers import Lever, more_gpus
from ridgeline.reports.fit_offload import host_bytes, host_cache, host_kv_share
from ridgeline.reports.fit_ranks import ranks_dict
from ridgeline.reports.fit_state import state_pool_dict
from ridgeline.reports.fit_target import least_seats, seats_bind, target_met, target_met_with
from ridgeline.reports.fit_terms import cache_all_on_host, host_cache_unbounded, is_llamacpp
from ridgeline.reports.fit_verdict import DOES_NOT_FIT, VERDICT_CODES
from ridgeline.reports.fit_weights import vision_bytes_in_pool
from ridgeline.reports.identity import identity_json
from ridgeline.roofline import first_whole_batch
from ridgeline.sglang_lora import SGLangLoRASettings
from ridgeline.vllm_eplb import eplb_json

if TYPE_CHECKING:
    from ridgeline.kvpool import KVPool
    from ridgeline.reports.fit import FitReport


def fit_dict(r: FitReport) -> dict[str, Any]:
    p = r.pool
    refusal = context_refusal(r.deployment, r.context)
    dcp = r.deployment.decode_context_parallel_size
    # the release whose rules sized the pool: vLLM's accounting names its own
    version = r.settings.engine_version if p.accounting is None else p.accounting.version
    more = more_gpus(r)
    lever = target_met_with(r)
    out = {
        **identity_json(r.deployment, version),
        "admission_blocks": p.admission_blocks(r.context),
        # a GPU is a card, as --num-gpus counts it; where the engine runs it as several
        # devices (vLLM on an MI250: 2 dies, a tensor-parallel rank each) every *_per_gpu
        # figure adds its devices'
        "runtime_devices_per_gpu": p.runtime_devices,
        "decode_context_parallel_size": dcp,
        "binding_stage": None if p.stage is None else {
            "index": p.stage.index, "layers": p.stage.layers,
            "describe": p.stage.describe()},
        # the launch limit, --max-model-len, under its own name (the conversations below
        # are of this length; other commands' context_len is a conversation's length)
        "max_model_len": r.context,
        "memory_bytes_per_gpu": p.total_bytes, "reserved_fraction": p.reserved_fraction,
        "reserved_bytes_per_gpu": p.reserved_bytes,
        # TensorRT-LLM: the pool is this share of what is left (kv_cache_free_gpu_mem_fraction)
        "free_fraction_of_rest": p.free_fraction_of_rest,
        # vLLM's "Available KV cache memory", 0 where nothing is left: how far the weights
        # and the engine's buffers then overflow the reserved memory is over_budget (the
        # text's negative KV pool; vLLM logs it as a negative "Available KV cache memory")
        "available_kv_bytes_per_gpu": max(0.0, p.rest_bytes * p.free_fraction_of_rest)
        if not p.set_pool_bytes else p.pool_bytes,
        "over_budget_bytes_per_gpu": over_budget_bytes(p),
        # SGLang's hybrids: the static pool their state pool is carved from (state_pool)
        "pool_bytes_per_gpu": p.pool_bytes, "pool_bytes_total": p.pool_bytes
        * r.deployment.num_gpus,
        # the engine's own token figure, as its start-up log gives it (vLLM v0.24+: maximum
        # concurrency × max_model_len, which, for a max_model_len off the block size, is not
        # the slots below: Llama-3.1-8B on an H100 at 17 tokens, 237,787 logged in 447,600)
        "tokens": p.logged_tokens(r.context),
        # the pool's token slots, blocks × block_size (a hybrid's KV-cache groups share them)
        "token_slots_per_gpu": p.blocks * p.block_size,
        # llama.cpp -ngl 0: every cell in host memory, the pool above the GPU memory left
        # unused (the text's "left unused"), holding none of them
        "kv_cache_on_host": cache_all_on_host(p),
        "kv_cache_bytes_per_gpu": p.kv_cache_bytes,  # the KV cache itself, everywhere
        "blocks_per_gpu": p.blocks, "vllm_max_concurrency": None if p.groups is None
        else p.concurrency(r.context),
        # the scheduler's block: -dcp N deals it over N ranks, each holding its own
        # --block-size share (vLLM's per-rank block, block_size_per_dcp_rank)
        "block_size": p.block_size, "block_size_per_dcp_rank": p.block_size // dcp,
        "conversations": r.conversations,
        # -ngl 0 without --host-memory-gib: the conversations are the GPU mask's count, which
        # no host's RAM reaches; the RAM, not given, bounds them (fit_terms)
        "host_cache_unbounded": host_cache_unbounded(p, r.deployment),
        # the batch it runs, min(conversations, max_num_seqs), under decode's, prefill's and
        # observe's name; --target-concurrency under its flag's name
        "max_num_seqs": p.max_num_seqs, "engine_max_batch": r.batch, "target_concurrency": r.target,
        # the seats, not the pool, cap what runs at once (engine_max_batch < conversations):
        # the text's headline then leads with engine_max_batch
        "seats_bind": seats_bind(r),
        # the target run at once as launched (null: no target); where the pool holds it but
        # the seats run fewer, the flag's values that run it, from the target's seats to the
        # most whose conversations all fit (each data-parallel rank's), the text's "met only
        # with --max-num-seqs 300 to 309", else null; fits stays true there: a flag, not
        # the memory, stands between the launch and the target
        "target_met": target_met(r), "target_met_with": None if lever is None else {
            "flag": lever.flag, "min_value": least_seats(r), "max_value": lever.seats},
        "batch_to_ridge": r.ridge_batch,
        # the verdict: whether the deployment fits, its code and its prose (fit_verdict)
        "fits": r.verdict != DOES_NOT_FIT, "verdict_code": VERDICT_CODES[r.verdict],
        "verdict": r.verdict,
        # the text's "(the ridge N)": the first whole batch at or past batch_to_ridge
        "first_whole_batch_to_ridge": first_whole_batch(r.ridge_batch),
        "stage_batch": r.stage_batch,  # under pipeline parallelism: a micro-batch
        "expert_batch_to_ridge": r.expert_ridge_batch if r.deployment.model.moe else None,
        "shortfall_bytes_per_gpu": None if refusal else r.shortfall_bytes,  # no memory
        "refusal": refusal or None,  # rescues a length the engine refuses
        # a 16-bit checkpoint quantized on load by an engine that loads it whole first: the
        # weights a GPU holds at start-up (None: loaded as served) and, where they overrun
        # the memory it loads into, why it fails (load_peak.py)
        "load_peak_bytes_per_gpu": p.load_peak_bytes or None,
        "load_refusal": load_peak_reason(p, r.deployment, r.settings.engine_version)
        if p.load_overflow else None,
        "per_conversation_bytes_per_gpu": r.per_conversation_bytes,
        "offload": None if r.deployment.offload is None else {
            "placement": r.deployment.offload.describe(r.deployment.model),
            "host_weight_bytes": host_bytes(r.deployment),
            # the growing KV cache's share in host memory, and its bytes at llama-server -c
            "host_kv_share": host_kv_share(r.deployment),
            "host_cache_bytes": host_cache(r)},
        **cpu_offload_json(r.deployment),
        "taken_bytes_per_gpu": {"weights": p.weight_bytes, "activations": p.activation_bytes,
                          "non_torch": p.non_torch_bytes, "cuda_graphs": p.cuda_graph_bytes,
                          # TRT-LLM's engine runtime and decoder; vLLM MRV2's sampler state
                          "seat_buffers": p.seat_buffer_bytes,
                          # TRT-LLM to 1.2: a hybrid's recurrent state for every seat
                          "seat_state": p.seat_state_bytes,
                          # vLLM MRV2's buffers for its drafter (vllm_mrv2_drafter)
                          "drafter_buffers": p.drafter_buffer_bytes,
                          "lora_adapters": p.lora_bytes,  # the LoRA slots (vLLM, SGLang)
                          # SGLang v0.5.18+: a multimodal model's embedding cache
                          "multimodal_buffers": p.mm_reserve_bytes,
                          # vLLM v0.34+'s extensible KV cache: kept free past the budget
                          "kept_free_after_warmup": p.kept_free_bytes,
                          # TRT-LLM cache_transceiver_config's send and receive buffers
                          "kv_transfer_buffer": p.transfer_buffer_bytes,
                          # llama.cpp under --fit, whether or not it moved weights: the
                          # --fit-target it leaves free, taken before the cache (absent
                          # elsewhere, and at --fit-target 0)
                          **({"left_free_by_fit": p.fit_free_bytes} if p.fit_free_bytes
                             else {})},
        "lora": None if r.settings.lora is None else {
            # one set of keys for both engines (SGLang: --max-loras-per-batch as max_loras)
            "max_loras": r.settings.lora.slots, "max_lora_rank": r.settings.lora.rank,
            "fully_sharded_loras": r.settings.lora.fully_sharded_loras,
            # SGLang's: the modules sized, and whether the adapters' files would name them
            **({"target_modules": sorted(r.settings.lora.targets),
                "target_modules_inferred": r.settings.lora.targets_inferred}
               if isinstance(r.settings.lora, SGLangLoRASettings) else {}),
            "bytes_per_gpu": p.lora_bytes},
        # vLLM --enable-eplb: its redundant experts, whose bytes are among the weights'
        "eplb": eplb_json(r.deployment, r.settings.eplb, p.redundant_expert_bytes),
        "slot_cache_bytes_per_gpu": p.slot_cache_bytes,
        # vLLM --kv-cache-memory-bytes: the pool as set, the room the card leaves it, and
        # (unset) the values vLLM's start-up log advises
        "max_total_tokens": {"cap": p.token_cap, "binds": p.capped} if p.token_cap
        else None,
        "kv_cache_memory_bytes": {
            # the room 0 where the weights and buffers overflow the card (over_budget)
            "set": p.set_pool_bytes, "room_bytes_per_gpu": max(0.0, p.rest_bytes),
            "overflow_bytes_per_gpu": p.overflow_bytes} if p.set_pool_bytes else None,
        "vllm_advice": None if r.advice is None else {
            "kv_cache_memory_bytes_requested": int(r.advice[0]),
            # the flag is per device: the whole card, or one die of an MI250
            "kv_cache_memory_bytes_device": int(r.advice[1])},
        "llama_server_c": r.launch_cells if is_llamacpp(p) and r.batch else None,
        # the -np of the start line: the conversations that fit where fewer than the default
        "llama_server_np": r.launch_slots if is_llamacpp(p) and r.batch else None,
        "flash_attn": r.deployment.flash_attention if is_llamacpp(p) else None,
        # why -fa auto resolved to off, where it did (not where --flash-attn off was given)
        "flash_attn_auto_off": r.flash_attention_auto_off or None,
        "profile": {"tokens": p.profile_tokens, "forward_bytes": p.forward_bytes,
                    # the forward's own tokens: fewer beside MRV2's draft model
                    "forward_tokens": p.forward_tokens_run,
                    "sampler_bytes": p.sampler_bytes,
                    # vLLM MRV2: a cold torch.compile, inside the activations
                    "compile_bytes": p.compile_bytes,
                    # vLLM v0.19+: a sparse layer's indexer logits beside the hidden states
                    "indexer_bytes": p.indexer_bytes},
        "model_runner": p.runner or None,  # vLLM: V0, V1 or MRV2 (Model Runner V2)
        # TensorRT-LLM: the backend that sized it; SGLang: its default rule's era
        "backend": (r.settings.backend or "pytorch") if p.engine == "trtllm" else None,
        "engine_era": p.engine_era or None,
        "levers": [lever_dict(lv) for lv in r.levers],
        # where it does not fit and no lever alone holds the target: the fewest GPUs of this
        # card that do (the text's "none alone is enough; 4 GPUs … hold 3"), null else
        "gpus_needed": None if more is None else more.to_dict(),
        "longest_context_search": r.searched or None,
        # --max-model-len not given and the batch under the ridge at the model's context: the
        # longest context whose batch reaches it (0: none); null otherwise
        "ridge_max_model_len": r.ridge_context,
        "cautions": r.cautions,
        "start_up_check": None if p.groups is None else {
            "blocks_asked": r.start_blocks, "pool_blocks": p.blocks,
            "starts": not r.refused_start,
            "window_batches_in_flight": p.in_flight_batches,
            "state_blocks_per_request": p.groups.state_blocks},
        "vision_tower_bytes_per_gpu": vision_bytes_in_pool(r.deployment, p),
        "drafter_weight_bytes_per_gpu": p.drafter_weight_bytes,
        # vLLM: why its hybrid KV-cache manager was off where that cached window or chunked
        # layers in full (--disable-hybrid-kv-cache-manager, VLLM_ALLOW_CHUNKED_…=0), or null
        "hybrid_kv_cache_manager_off": p.hybrid_manager_off or None,
        "kv_cache_groups": None if p.groups is None else {
            "layers_per_group": p.groups.layers_per_group, "full": p.groups.full,
            "windows": [{"tokens": w, "groups": g} for w, g in p.groups.windows],
            "states": p.groups.states, "page_bytes_per_gpu": p.groups.page_bytes,
            "blocks_per_conversation": p.groups.peak_decode_blocks(r.context)},
    }
    out.update(ranks_dict(r))  # data-parallel attention: every rank's figures
    if p.state_request_bytes:  # SGLang's hybrid: only where there is a state pool
        out["state_pool"] = state_pool_dict(r)
    return out


def over_budget_bytes(p: KVPool) -> float:
    """What the weights and the engine's buffers take beyond the memory it reserves, before
    any cache (the text's negative "KV pool"; llama.cpp's "alone overflow its ..."), 0 where
    they fit: Llama-3.1-70B bf16 on one H100 under vLLM at 8,192 tokens, 63.74 GiB (a pool
    set by --kv-cache-memory-bytes overruns the card by this and the pool together)."""
    return max(0.0, -p.rest_bytes)


def lever_dict(lever: Lever) -> dict[str, Any]:
    """One lever as --json gives it, under fit's top-level names: its conversations, the
    batch the engine runs under it (``engine_max_batch``, min(conversations, seats)), the
    launch limit it is at (``max_model_len``: half the context's is 4,096 for fit's 8,192)
    and the engine's seats under it (``max_num_seqs``). Llama-3.1-8B on an H100 at 8,192
    tokens under vLLM: "fp8 KV cache (--kv-cache-dtype fp8)" 118 conversations, batch 118."""
    return {"name": lever.name, "conversations": lever.conversations,
            "engine_max_batch": lever.batch, "max_model_len": lever.context,
            "max_num_seqs": lever.seats}
