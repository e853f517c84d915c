"""The memory budget behind `ridgeline fit --explain`: whose accounting rule sized the pool,
llama.cpp's compute buffer term by term, the activation peak vLLM and TensorRT-LLM profile,
and how each engine keeps a model's window layers."""

from __future__ import annotations

from ridgeline.datafiles import engine_defaults
from ridgeline.deployment import Deployment
from ridgeline.engine_windows import honours_windows, sglang_swa_ratio
from ridgeline.explain import Quantity, Step, q, step
from ridgeline.kvgroups import KVGroups
from ridgeline.layouts import DENSE, MOE
from ridgeline.llamacpp_memory import buffer_terms
from ridgeline.llamacpp_pool import llamacpp_outputs, window_mask_cells
from ridgeline.memory import EngineSettings, KVPool, device_memory_note
from ridgeline.reports.fit_budget import fit_target_words
from ridgeline.reports.fit_weights import weights_note
from ridgeline.units import GIB, MIB
from ridgeline.vllm_memory import indexer_logits_bytes, indexer_query_bytes, mrv2_warmup_copies


def state_blocks_rule(g: KVGroups) -> str:
    """The state blocks a hybrid's request holds in each state group, and why: two in prefix
    caching's align mode, and one more a draft token ("3 state blocks a request (1 without
    prefix caching, 2 for the drafts)")."""
    if not g.draft_blocks:
        return f"{g.state_blocks} state blocks a request (prefix caching, align mode)"
    kept = g.state_blocks - g.draft_blocks
    mode = "without prefix caching" if kept == 1 else "in prefix caching's align mode"
    return f"{g.state_blocks} state blocks a request ({kept} {mode}, {g.draft_blocks} for " \
        "the drafts)"


def manager_off_rule(why: str) -> str:
    """The accounting rule for a window or chunk model vLLM cached in full because its hybrid
    KV-cache manager was off, and ``why`` (KVPool.hybrid_manager_off): Llama-4-Scout on v0.11,
    "window and chunked layers cached in full (the hybrid KV-cache manager off:
    VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0 (its default, v0.10.1 to v0.13); =1,
    --vllm-allow-chunked-local-attn-with-hybrid-kv-cache 1, pages them)"."""
    env = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"
    fix = "; =1, --vllm-allow-chunked-local-attn-with-hybrid-kv-cache 1, pages them" \
        if why.startswith(env) else ""
    return f"window and chunked layers cached in full (the hybrid KV-cache manager off: " \
        f"{why}{fix})"


def accounting_quantity(p: KVPool) -> Quantity:
    """Whose memory rule sized the pool, with its source."""
    a = p.accounting
    if a is not None and p.runner == "MRV2":
        rules = ["Model Runner V2 (by default from v0.25.1 for a model that is not MoE or a "
                 "recurrent hybrid, from v0.29 for all): a profiled pass of "
                 "max_num_batched_tokens" + (" carrying a cold torch.compile" if p.compile_bytes
                                             else "") + ", a bf16-logits sampler over "
                 "min(max_num_batched_tokens, max_num_seqs) rows"
                 + (", then its fp32 warm-up pass (v0.33+)" if a.mrv2_sampler_warmup else ""),
                 "the CUDA graphs captured before sizing, then the pool measured after "
                 "warm-up (v0.34's extensible KV cache)" if p.kept_free_bytes
                 else "the CUDA-graph estimate taken from the budget" if p.cuda_graph_bytes
                 else "CUDA graphs captured after sizing",
                 "its sampler state counted in the budget" if p.seat_buffer_bytes
                 else "no sampler state: only the last pipeline stage samples"
                 if a.mrv2_state_counted
                 else "its sampler state left out of the budget (before v0.27)"]
        if p.forward_tokens:
            rules.insert(1, "the forward cut by a slot a dummy request beside a draft model")
        if p.drafter_buffer_bytes:
            rules.append("its drafter's buffers counted in the budget (vllm.mrv2_drafter)")
        if p.hybrid_manager_off:
            rules.append(manager_off_rule(p.hybrid_manager_off))
        if p.groups is not None and p.groups.states and p.groups.state_blocks > 1:
            rules.append(state_blocks_rule(p.groups))
        return q("accounting", f"vLLM {a.version}", "",
                 "; ".join(rules) + f" (engines.json memory_versions, era {a.era}+, and "
                 "vllm.mrv2, each with its source)")
    if a is not None:
        rules = ["V0: one profiled pass" if a.engine == "V0" else
                 f"V1: a profiled pass of max_num_batched_tokens, then the sampler over "
                 f"max_num_seqs ({a.sampler_logit_copies:g} fp32 logit copies)",
                 "the CUDA-graph estimate taken from the budget" if a.graphs_in_budget
                 else "CUDA graphs captured after sizing"]
        g = p.groups
        if p.windows_in_full and p.hybrid_manager_off:  # the manager there, but off
            rules.append(manager_off_rule(p.hybrid_manager_off))
        elif p.windows_in_full and a.hybrid_allocator:  # 0.9.1-0.9.2: windows paged only
            rules.append("chunked layers cached in full beside full attention (the hybrid "
                         "KV-cache manager pages attention chunks from v0.10.0)")
        elif p.windows_in_full:
            rules.append("window layers cached in full beside full attention (" + (
                "the V0 engine has no hybrid KV-cache manager)" if a.engine == "V0" else
                "the hybrid KV-cache manager came in v0.9.1)"))
        if g is not None and g.windows and p.in_flight_batches > 1:
            rules.append(f"window groups sized for {p.in_flight_batches} batches in flight")
        if g is not None and g.states and g.state_blocks > 1:
            rules.append(state_blocks_rule(g))
        if a.tokens_from_concurrency:
            rules.append("tokens logged as maximum concurrency × max_model_len")
        return q("accounting", f"vLLM {a.version}", "",
                 "; ".join(rules) + f" (engines.json memory_versions, era {a.era}+, each rule "
                 "with its source)")
    d = engine_defaults(p.engine)
    if p.engine_era:  # SGLang: the default rule its version follows
        from ridgeline.sglang_memory import ERA_LABELS

        return q("accounting", f"{p.engine} {ERA_LABELS[p.engine_era]}", "",
                 str(d.get("memory_rule", "")))
    return q("accounting", f"{p.engine} {d.get('version', '')}".strip(), "",
             str(d.get("memory_rule", "")))


def llamacpp_pool_step(dep: Deployment, p: KVPool, s: EngineSettings) -> Step:
    model, n_ubatch = dep.model, p.profile_tokens
    outputs = llamacpp_outputs(p.max_num_seqs, s.engine_version)
    device = p.split_device
    output = device is None or device.output  # the logits: its GPU's only
    copies = 1 if device is None else device.mask_copies
    inputs = 1 if device is None else device.input_copies  # 4 on a pipelined split
    window = window_mask_cells(dep, device, p.max_num_seqs, n_ubatch, s.max_model_len)
    fixed, peak, scores_per_cell, mask_per_cell = buffer_terms(
        model, n_ubatch, dep.flash_attention, outputs, output, copies, input_copies=inputs,
        window_cells=window)
    received = (f" + {inputs} copies × n_ubatch {n_ubatch} × hidden {model.hidden_size:,} × 4 B "
                "received (a pipelined split keeps 4 of each input)" if inputs > 1 else "")
    window_note = (f" + {inputs} × window mask {window:,} cells × n_ubatch {n_ubatch} × "
                   f"{2 if dep.flash_attention else 4} B" if window else "")
    cells = p.context_cells  # the -c its buffer is sized at (of a split, the binding GPU's)
    scores = cells * scores_per_cell
    heads = model.attention.num_heads if model.attention else 0
    scores_q = q("scores", scores / GIB, "GiB",
                 "flash attention: none materialised" if dep.flash_attention else
                 "none: no layer on this GPU reads the -c cells" if not copies else
                 f"{cells:,} cells × n_ubatch {n_ubatch} × {heads} heads × 4 B")
    mask_dtype = f"{2 if dep.flash_attention else 4} B"
    mask_note = (f"{cells:,} cells × n_ubatch {n_ubatch} × {mask_dtype}" if copies == 1 else
                 "none: no layer on this GPU reads the -c cells" if not copies else
                 f"{copies} copies × {cells:,} cells × n_ubatch {n_ubatch} × {mask_dtype} "
                 "(a pipelined layer split keeps 4 copies of each input)")
    if outputs is None:  # builds before PR #23861
        buffer = [q("compute buffer", p.activation_bytes / GIB, "GiB",
                    "max(logits, scores) + 4 × n_ubatch × hidden × 4 B (builds before #23861)"
                    + received),
                  q("logits", peak / GIB, "GiB",
                    f"vocab {model.vocab_size:,} × n_ubatch {n_ubatch} × 4 B"), scores_q]
    else:
        buffer = [q("compute buffer", p.activation_bytes / GIB, "GiB",
                    "slots' logits + 2 hidden tensors + max(FFN products, scores) + mask"),
                  q("slots' logits and hidden", fixed / GIB, "GiB",
                    (f"{outputs} × vocab {model.vocab_size:,} × 4 B + " if output else
                     "no logits (the output layer's GPU holds them) + ")
                    + f"2 × n_ubatch {n_ubatch} × hidden {model.hidden_size:,} × 4 B"
                    + received + window_note),
                  q("FFN products", peak / GIB, "GiB",
                    f"gate, up and their product: 3 × n_ubatch {n_ubatch} × n_ff × 4 B"),
                  scores_q,
                  q("mask", cells * mask_per_cell / GIB, "GiB", mask_note)]
    formula = "total − weights − runtime context − compute buffer"
    margin = [q("left free by --fit", p.fit_free_bytes / GIB, "GiB",
                f"{fit_target_words(p)}: --fit keeps it free, so a longer -c or more slots "
                "make it move (more) weights to the host rather than fill it (common/fit.cpp: "
                "each device's target is its free memory less the margin)")] \
        if p.fit_free_bytes else []
    if margin:
        formula += " − left free by --fit"
    # what is left is negative where the weights, the runtime and the buffer already overflow
    # the card: the cache then gets nothing (KVPool.fraction_left_bytes), and fit does not fit
    left = p.rest_bytes
    over = [] if left >= 0 else [
        q("what is left", left / GIB, "GiB",
          f"{formula}: the weights, runtime context and compute buffer already exceed the "
          f"memory by {-left / GIB:,.2f} GiB, so the KV cache gets 0")]
    return step(
        "KV cache per GPU", formula if left >= 0 else f"max(0, {formula})",
        q("KV cache", p.pool_bytes / GIB, "GiB",
          "" if left >= 0 else "none: what is left is negative"),
        q("total", p.total_bytes / GIB, "GiB",
          device_memory_note(dep.accelerator)),
        q("weights per GPU", p.weight_bytes / GIB, "GiB", weights_note(dep, p)),
        q("runtime context", p.non_torch_bytes / GIB, "GiB",
          "HIP (ROCm) context, libraries" if dep.engine == "llama.cpp-rocm"
          else "Vulkan context, libraries" if dep.accelerator.vendor == "amd"
          else "CUDA/Metal context, libraries"),
        *buffer, *margin,
        q("cells", cells, "", "the -c llama-server starts (slots × context), which its "
          "buffer is reserved for: the cache is in host memory, where -c may reach "
          f"{p.host_cells:,} cells" if device is None and p.host_cells > cells else
          "the most whose KV and compute buffer share what is left"
          + ("" if device is None else " on the GPU that binds: -c is one number for every "
             "GPU of the split")),
        accounting_quantity(p) if s.engine_version is None else
        q("accounting", f"{p.engine} build {s.engine_version}", "",
          str(engine_defaults(p.engine).get("memory_rule", ""))),
        *over)


def window_rule(dep: Deployment, s: EngineSettings) -> str:
    """How this engine keeps the model's window layers (``engine_windows.py``)."""
    if dep.engine == "trtllm":
        return ("TensorRT-LLM counts its blocks as if every layer were full attention, then "
                "splits them among the window sizes' pools: every layer counted growing")
    if not honours_windows(dep, s.engine_version):
        return f"{dep.engine} keeps no window for {dep.model.architecture}: every layer grows"
    if dep.engine == "sglang":
        ratio = s.swa_full_tokens_ratio or sglang_swa_ratio()
        return (f"window layers in SGLang's hybrid-SWA pool at {ratio:g} of the full pool's "
                "tokens (--swa-full-tokens-ratio)")
    return ("window layers cached per slot (window × slots + n_ubatch cells, at most the -c "
            "of slots × context), apart from -c")



def forward_widths(dep: Deployment) -> str:
    """What the forward pass's per-token peak holds besides three hidden-size tensors."""
    moe = dep.model.moe
    if moe is None or not any(layer.ffn == MOE for layer in dep.model.layers):
        return "3 × intermediate ÷ TP"
    dense = "the larger of 3 × intermediate ÷ TP and " if dep.model.dense_mlp and any(
        layer.ffn == DENSE for layer in dep.model.layers) else ""
    shared = " + 3 × shared ÷ TP" if moe.num_shared_experts else ""
    return (f"{dense}top-{moe.experts_per_token} × (max(2 × expert intermediate ÷ TP, hidden) "
            f"+ expert intermediate ÷ TP){shared}")


def peak_quantities(dep: Deployment, p: KVPool) -> list[Quantity]:
    cut = f" (max_num_batched_tokens {p.profile_tokens:,} less a slot for each of " \
        f"{min(p.max_num_seqs, p.profile_tokens):,} dummy requests, which a draft model's " \
        "speculator asks of Model Runner V2)" if p.forward_tokens else ""
    forward = q("forward pass", p.forward_bytes / GIB, "GiB",
                f"{p.forward_tokens_run} tokens{cut} × 2 B × ({forward_widths(dep)} + 3 × hidden)"
                + ("; the top-k term: vLLM's fused-MoE caches" if dep.model.moe else ""))
    if p.engine_buffers:
        from ridgeline.trtllm_memory import lm_head_output_bytes

        head = lm_head_output_bytes(dep.model, p.max_num_seqs, dep.tensor_parallel_size) \
            if p.stage is None or p.stage.last else 0.0
        return [forward, q("lm_head output", head / GIB, "GiB",
                           f"{p.max_num_seqs:,} seats × vocab {dep.model.vocab_size:,} ÷ TP × "
                           "2 B (the engine's generation profile), if larger"),
                q("engine activations", p.activation_bytes / GIB, "GiB", "the larger of the two")]
    if p.accounting is None:
        return [forward]
    rows = min(p.max_num_seqs, p.profile_tokens)
    sampler = q("sampler", p.sampler_bytes / GIB, "GiB",
                "none: only the last pipeline stage samples" if p.stage and not p.stage.last
                else f"{rows:,} requests' bf16 logits (min(tokens, seats) × vocab "
                f"{dep.model.vocab_size:,} × 2 B) beside the step's hidden states ("
                f"{p.forward_tokens_run:,} tokens × hidden {dep.model.hidden_size:,} × 2 B; Model "
                + (f"Runner V2's warm-up sampler pass, vLLM {p.accounting.era}+: every sampling "
                   f"feature on, so {mrv2_warmup_copies():g} fp32 copies of the logits, "
                   f"{rows:,} × vocab × 4 B each)" if p.accounting.mrv2_sampler_warmup
                   else "Runner V2's greedy dummy sampler: no fp32 copy)")
                if p.runner == "MRV2"
                else f"{p.accounting.sampler_logit_copies:g} × {p.max_num_seqs} requests × "
                f"vocab {dep.model.vocab_size:,} × 4 B (vLLM {p.accounting.era}+ sampler)")
    cold = [q("cold compile", p.compile_bytes / GIB, "GiB",
              "torch.compile runs inside the profiled window on a first start: about 1 GiB in "
              "both cold Model Runner V2 logs of 8B models, but how it grows with the model is "
              "not known (0.47 GiB a GPU for a 32B TP2 in vLLM #54383, tens of GiB for a MoE "
              "in #54122), so a first start's pool is uncertain by that much; "
              "--warm-compile-cache leaves it out")] if p.compile_bytes else []
    workspace = [q("MoE workspace", p.moe_workspace_bytes / GIB, "GiB",
                   f"{p.forward_tokens_run:,} tokens × top-{dep.model.moe.experts_per_token} × 2 B × "
                   "(max(expert intermediate ÷ TP, hidden) + max(2 × expert intermediate ÷ TP, "
                   "hidden)): the fused-MoE kernel's two buffers, kept from the first MoE layer "
                   "on, so still held while the sampler runs (vLLM's WorkspaceManager)")] \
        if p.moe_workspace_bytes and dep.model.moe else []
    indexer = [q("indexer pass", p.indexer_bytes / GIB, "GiB",
                 f"{p.forward_tokens_run:,} tokens × 3 × hidden {dep.model.hidden_size:,} × 2 B + "
                 f"{indexer_query_bytes(dep, p.forward_tokens_run) / MIB:,.0f} MiB of the indexer's "
                 "fp8 queries and float32 head weights + "
                 f"{indexer_logits_bytes(dep, p.accounting.version) / MIB:,.0f} MiB: a sparse "
                 "layer's indexer sets aside VLLM_SPARSE_INDEXER_MAX_LOGITS_MB of fp32 logits "
                 "in the profile (v0.19+), one layer's at a time, beside the step's hidden "
                 "states" + (" and over the MoE workspace" if workspace else ""))] \
        if p.indexer_bytes else []
    passes = f"max(forward, {'the MoE workspace + ' if workspace else ''}the indexer pass)" \
        if indexer else "forward"
    if not p.encoder_images:
        return [forward, *cold, *workspace, *indexer, sampler,
                q("activation peak", p.activation_bytes / GIB, "GiB",
                  f"the larger of {passes}{' + cold compile' if cold else ''} and "
                  f"{'the MoE workspace + ' if workspace else ''}the sampler")]
    item = dep.model.vision_item
    assert item is not None
    return [forward, *cold, *workspace, *indexer, sampler,
            q("vision tower", p.encoder_bytes / GIB, "GiB",
              f"{p.encoder_images} dummy images (max(max_num_batched_tokens, {item.tokens}) ÷ "
              f"{item.tokens} tokens an image{_image_cap(p)}) × {item.patches:,} patches × 2 B × (2 × "
              f"intermediate {item.intermediate_size:,} ÷ TP + 3 × hidden {item.hidden_size:,})"
              "; run first"),
            q("images held", p.encoder_held_bytes / GIB, "GiB",
              f"{p.encoder_images} × {item.tokens} tokens × hidden {dep.model.hidden_size:,} × "
              "2 B, kept through the text pass and the sampler"),
            q("activation peak", p.activation_bytes / GIB, "GiB",
              f"max(vision tower, images held + the larger of {passes} and "
              + ("the MoE workspace + " if workspace else "") + "sampler)")]


def _image_cap(p: KVPool) -> str:
    """The decoder's cap on the tower's dummy images, as the vision line says it: ', at most
    8 seats × 1 a prompt (--limit-mm-per-prompt image=1)'; "" where it does not bind."""
    per = p.encoder_images_per_prompt
    if not per or p.encoder_images < p.max_num_seqs * per:
        return ""
    why = f" (--limit-mm-per-prompt image={p.image_limit})" \
        if p.image_limit is not None and p.image_limit <= per else " (max_model_len's)"
    return f", at most {p.max_num_seqs:,} seats × {per:,} a prompt{why}"
