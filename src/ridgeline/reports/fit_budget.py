"""How each engine took its memory before the KV cache: the budget rows `fit` prints and
the steps `--explain` shows, in each engine's own terms (vLLM's profiling pass, SGLang's and
TensorRT-LLM's fractions, llama.cpp's compute buffer and slots)."""

from __future__ import annotations

from ridgeline.datafiles import engine_defaults
from ridgeline.deployment import Deployment
from ridgeline.engine_windows import honours_windows, sglang_swa_ratio
from ridgeline.explain import Quantity, Step, q, step
from ridgeline.layouts import DENSE, MOE
from ridgeline.llamacpp_memory import buffer_terms
from ridgeline.llamacpp_pool import llamacpp_outputs, window_mask_cells
from ridgeline.memory import EngineSettings, KVPool, device_memory_note
from ridgeline.model import ModelSpec
from ridgeline.sglang_memory import sglang_fixed_state_note, sglang_state_ratio
from ridgeline.stages import stage_tp_copies_bytes, stage_weight_bytes
from ridgeline.units import GIB


def runner_label(p: KVPool) -> str:
    """vLLM's GPU model runner, as the header names it."""
    return "Model Runner V2" if p.runner == "MRV2" else p.runner or "V1"


def accounting_quantity(p: KVPool) -> Quantity:
    """Whose memory rule sized the pool, with its source."""
    a = p.accounting
    if a is not None and p.runner == "MRV2":
        rules = ["Model Runner V2 (by default from v0.25.1 for a model that is not MoE or a "
                 "recurrent hybrid, from v0.29 for all): a profiled pass of "
                 "max_num_batched_tokens" + (" carrying a cold torch.compile" if p.compile_bytes
                                             else "") + ", a bf16-logits sampler over "
                 "min(max_num_batched_tokens, max_num_seqs) rows",
                 "the CUDA-graph estimate taken from the budget" if p.cuda_graph_bytes
                 else "CUDA graphs captured after sizing",
                 "its sampler state counted in the budget" if p.seat_buffer_bytes
                 else "its sampler state left out of the budget (before v0.27)"]
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
        if p.windows_in_full and a.hybrid_allocator:  # the manager there, off for chunks
            rules.append("chunked-attention layers cached in full (the hybrid KV-cache manager "
                         "off for chunked attention by default, v0.10.1 to v0.13: "
                         "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 pages them)")
        elif p.windows_in_full:
            rules.append("window layers cached in full beside full attention (the hybrid "
                         "KV-cache manager came in v0.10)")
        if g is not None and g.windows and p.in_flight_batches > 1:
            rules.append(f"window groups sized for {p.in_flight_batches} batches in flight")
        if g is not None and g.states and g.state_blocks > 1:
            rules.append(f"{g.state_blocks} state blocks a request (prefix caching, align mode)")
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
        model, n_ubatch, s.flash_attn, outputs, output, copies, input_copies=inputs,
        window_cells=window)
    received = (f" + {inputs} copies × n_ubatch {n_ubatch} × hidden {model.hidden_size:,} × 4 B "
                "received (a pipelined split keeps 4 of each input)" if inputs > 1 else "")
    window_note = (f" + {inputs} × window mask {window:,} cells × n_ubatch {n_ubatch} × "
                   f"{2 if s.flash_attn else 4} B" if window else "")
    cells = p.context_cells  # the -c its buffer is sized at (of a split, the binding GPU's)
    scores = cells * scores_per_cell
    heads = model.attention.num_heads if model.attention else 0
    scores_q = q("scores", scores / GIB, "GiB",
                 "flash attention: none materialised" if s.flash_attn else
                 "none: no layer on this GPU reads the -c cells" if not copies else
                 f"{cells:,} cells × n_ubatch {n_ubatch} × {heads} heads × 4 B")
    mask_dtype = f"{2 if s.flash_attn else 4} B"
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
    return step(
        "KV cache per GPU", "total − weights − runtime context − compute buffer",
        q("KV cache", p.pool_bytes / GIB, "GiB"),
        q("total", p.total_bytes / GIB, "GiB",
          device_memory_note(dep.accelerator)),
        q("weights per GPU", p.weight_bytes / GIB, "GiB", weights_note(dep, p)),
        q("runtime context", p.non_torch_bytes / GIB, "GiB",
          "HIP (ROCm) context, libraries" if dep.engine == "llama.cpp-rocm"
          else "Vulkan context, libraries" if dep.accelerator.vendor == "amd"
          else "CUDA/Metal context, libraries"),
        *buffer,
        q("cells", cells, "", "the most whose KV and compute buffer share what is left"
          + ("" if device is None else " on the GPU that binds: -c is one number for every "
             "GPU of the split")),
        accounting_quantity(p) if s.engine_version is None else
        q("accounting", f"{p.engine} build {s.engine_version}", "",
          str(engine_defaults(p.engine).get("memory_rule", ""))))


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


def cap_flag(p: KVPool) -> str:
    """The engine's own name for the cap on its pool's tokens."""
    return "kv_cache_config.max_tokens" if p.engine == "trtllm" else "--max-total-tokens"


def is_llamacpp(p: KVPool) -> bool:
    return p.engine.startswith("llama.cpp")


def seats_name(p: KVPool) -> str:
    return {"sglang": "max_running_requests", "trtllm": "max_batch_size"}.get(
        p.engine, "slots (-np)" if is_llamacpp(p) else "max_num_seqs")


def state_per_request_bytes(p: KVPool) -> float:
    """SGLang: one request's recurrent state per GPU, as its state pool holds it."""
    return p.state_request_bytes


def state_pool_note(p: KVPool, s: EngineSettings, model: ModelSpec | None) -> str:
    """How SGLang sized its state pool: the share it carves, or the requests it sets it at."""
    if p.state_pool_fixed:
        return sglang_fixed_state_note(s.prefix_caching is not False, s.engine_version, model,
                                       s.max_num_seqs)
    return f"mamba_full_memory_ratio {sglang_state_ratio(s.engine_version):g}"


def fixed_state_size(s: EngineSettings) -> str:
    """What set the requests a fixed SGLang state pool holds: the flag, or its default."""
    return (f"--max-running-requests {s.max_num_seqs:,}" if s.max_num_seqs
            else "SGLang's default with its radix cache off")


def budget_rows(p: KVPool, s: EngineSettings, model: ModelSpec | None = None,
                vendor: str | None = None) -> list[list[str]]:
    """Memory per GPU, then each thing the engine takes before the cache, in its order
    (``model``: whose SGLang state pool, where SGLang set it by the model; ``vendor``: the
    card's, whose runtime names the rows: ROCm's HIP context, RCCL and HIP graphs on AMD)."""
    def gib(value: float) -> str:
        return f"{value / GIB:,.2f} GiB"

    amd = vendor == "amd"
    graphs = "HIP graphs" if amd else "CUDA graphs"

    rows = [["memory per GPU", gib(p.total_bytes)]]
    if is_llamacpp(p):
        attention = "flash attention" if s.flash_attn else "no flash attention"
        rows += [["− weights", gib(p.weight_bytes)],
                 ["− GPU runtime context", gib(p.non_torch_bytes)],
                 [f"− compute buffer (n_ubatch {p.profile_tokens:,}; {attention})",
                  gib(p.activation_bytes)]]
    elif p.engine == "sglang":  # its activations and graphs live in what it holds back
        rows += [[f"reserved (x {p.reserved_fraction:g}; activations, {graphs} in the rest)",
                  gib(p.total_bytes * p.reserved_fraction)],
                 ["− weights", gib(p.weight_bytes)],
                 [("− HIP context and TP communicators (RCCL)" if amd else
                   "− CUDA context and TP communicators") + " (x the fraction)",
                  gib(p.non_torch_bytes)]]
    else:
        rows += [[f"reserved (x {p.reserved_fraction:g})", gib(p.total_bytes * p.reserved_fraction)]
                 ] if not p.set_pool_bytes else []
        rows += [["− weights", gib(p.weight_bytes)],
                 [f"− {peak_label(p)}", gib(p.activation_bytes)],
                 ["− non-torch (HIP context, RCCL)" if amd else
                  "− non-torch (CUDA context, NCCL)", gib(p.non_torch_bytes)],
                 [f"− {graphs}" + ("" if p.cuda_graph_bytes or p.accounting is None
                                   else " (captured after sizing)"), gib(p.cuda_graph_bytes)]]
        if p.seat_buffer_bytes:
            rows.append([f"− runtime buffers and decoder ({p.max_num_seqs:,} seats × vocab)"
                         if p.engine_buffers else
                         f"− sampler state ({p.max_num_seqs:,} seats × vocab)",
                         gib(p.seat_buffer_bytes)])
    if p.free_fraction_of_rest != 1.0:
        rows.append([f"x kv_cache_free_gpu_mem_fraction {p.free_fraction_of_rest:g}", ""])
    if p.set_pool_bytes:  # the pool as set; what is left is only the room it must fit
        rows.append(["= room on the card", gib(p.rest_bytes)])
        rows.append(["KV pool (--kv-cache-memory-bytes)", f"{gib(p.set_pool_bytes)} per GPU"
                     + (f": {gib(p.overflow_bytes)} more than the room" if p.overflow_bytes
                        else "")])
        return rows
    if p.rest_bytes < 0 and not is_llamacpp(p):  # as vLLM logs it: "Available KV cache
        # memory: -2.14 GiB", then it stops ("No available memory for the cache blocks")
        rows.append(["= KV pool (negative: the engine stops at start-up)",
                     f"{gib(p.rest_bytes * p.free_fraction_of_rest)} per GPU"])
        return rows
    if p.state_request_bytes:  # SGLang's state pool, sized before the KV cache and its cap
        rows.append(["= static pool", f"{gib(p.pool_bytes)} per GPU"])
        if p.state_pool_fixed:  # a number of requests, whatever the memory: one product
            rows.append([f"− state pool ({p.state_slots:,} requests' state × "
                         f"{state_per_request_bytes(p) / GIB:,.4f} GiB: "
                         f"{fixed_state_size(s)})", gib(p.slot_cache_bytes)])
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
                     f"{gib(p.state_kv_bytes)} per GPU"])
        return rows
    if p.capped:  # --max-total-tokens, below what the memory leaves
        rows.append([f"= KV pool, capped at {cap_flag(p)} {p.token_cap:,} (memory leaves "
                     f"{gib(max(0.0, p.rest_bytes * p.free_fraction_of_rest))})",
                     f"{gib(p.pool_bytes)} per GPU"])
        return rows
    rows.append(["= KV cache" if is_llamacpp(p) else "= KV pool",
                 f"{gib(p.pool_bytes)} per GPU"])
    return rows


def peak_label(p: KVPool) -> str:
    if p.encoder_images and p.encoder_bytes >= p.activation_bytes:
        return f"vision tower profile ({p.encoder_images} dummy images)"
    held = " + images held" if p.encoder_held_bytes else ""
    if p.engine_buffers and p.activation_bytes > p.forward_bytes:
        return f"engine activations (the lm_head's output for {p.max_num_seqs:,} seats)"
    if p.accounting is not None and p.moe_workspace_bytes + p.sampler_bytes \
            > p.forward_bytes + p.compile_bytes:
        ws = " + MoE workspace" if p.moe_workspace_bytes else ""
        if p.runner == "MRV2":
            rows = min(p.max_num_seqs, p.profile_tokens)
            return f"sampler peak ({rows:,} requests' bf16 logits){ws}{held}"
        return f"sampler peak ({p.max_num_seqs:,} requests' fp32 logits){ws}{held}"
    cold = " + a cold torch.compile" if p.compile_bytes else ""
    return f"activations ({p.profile_tokens:,}-token profile{cold}){held}"


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
    forward = q("forward pass", p.forward_bytes / GIB, "GiB",
                f"{p.profile_tokens} tokens × 2 B × ({forward_widths(dep)} + 3 × hidden)"
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
                f"{p.profile_tokens:,} tokens × hidden {dep.model.hidden_size:,} × 2 B; Model "
                "Runner V2's greedy dummy sampler: no fp32 copy)" if p.runner == "MRV2"
                else f"{p.accounting.sampler_logit_copies:g} × {p.max_num_seqs} requests × "
                f"vocab {dep.model.vocab_size:,} × 4 B (vLLM {p.accounting.era}+ sampler)")
    cold = [q("cold compile", p.compile_bytes / GIB, "GiB",
              "torch.compile runs inside the profiled window on a first start: about 1 GiB in "
              "both cold Model Runner V2 logs of 8B models, but how it grows with the model is "
              "not known (0.47 GiB a GPU for a 32B TP2 in vLLM #54383, tens of GiB for a MoE "
              "in #54122), so a first start's pool is uncertain by that much; "
              "--warm-compile-cache leaves it out")] if p.compile_bytes else []
    workspace = [q("MoE workspace", p.moe_workspace_bytes / GIB, "GiB",
                   f"{p.profile_tokens:,} tokens × top-{dep.model.moe.experts_per_token} × 2 B × "
                   "(max(expert intermediate ÷ TP, hidden) + max(2 × expert intermediate ÷ TP, "
                   "hidden)): the fused-MoE kernel's two buffers, kept from the first MoE layer "
                   "on, so still held while the sampler runs (vLLM's WorkspaceManager)")] \
        if p.moe_workspace_bytes and dep.model.moe else []
    if not p.encoder_images:
        return [forward, *cold, *workspace, sampler,
                q("activation peak", p.activation_bytes / GIB, "GiB",
                  f"the larger of forward{' + cold compile' if cold else ''} and "
                  f"{'the MoE workspace + ' if workspace else ''}the sampler")]
    item = dep.model.vision_item
    assert item is not None
    return [forward, *cold, *workspace, sampler,
            q("vision tower", p.encoder_bytes / GIB, "GiB",
              f"{p.encoder_images} dummy images (max(max_num_batched_tokens, {item.tokens}) ÷ "
              f"{item.tokens} tokens an image) × {item.patches:,} patches × 2 B × (2 × "
              f"intermediate {item.intermediate_size:,} ÷ TP + 3 × hidden {item.hidden_size:,})"
              "; run first"),
            q("images held", p.encoder_held_bytes / GIB, "GiB",
              f"{p.encoder_images} × {item.tokens} tokens × hidden {dep.model.hidden_size:,} × "
              "2 B, kept through the text pass and the sampler"),
            q("activation peak", p.activation_bytes / GIB, "GiB",
              "max(vision tower, images held + the larger of forward and "
              + ("the MoE workspace + " if workspace else "") + "sampler)")]


def weights_note(dep: Deployment, pool: KVPool) -> str:
    """Where the weights per GPU differ from the checkpoint's share: vLLM's padded MXFP4
    experts; llama.cpp's input embedding (and -ngl's host layers) in host memory."""
    from ridgeline.vllm_memory import (
        HOPPER_SCALES_FREED_FROM,
        mxfp4_kernel,
        mxfp4_padding_bytes,
        parse_version,
    )

    whole = _kept_whole_note(dep, pool)
    share = f"{checkpoint_share_bytes(dep, pool) / GIB:,.2f} GiB of {dep.weights.label} " \
        "weights per GPU" + (f" of {pool.stage.describe()}" if pool.stage else "") + whole
    vision = vision_bytes_in_pool(dep, pool)
    if vision > 0:
        share += (f" + {vision / GIB:,.2f} GiB of vision tower ("
                  + ("--language-model-only leaves it out" if pool.engine == "vllm"
                     else "the engine loads it") + ")")
    padding = mxfp4_padding_bytes(dep, pool.stage, _version(pool)) \
        if pool.engine == "vllm" else 0.0
    if padding:
        kernel = mxfp4_kernel(dep.accelerator, parse_version(_version(pool) or "0.0"))
        if kernel != "triton-hopper":
            return (f"{share} + {padding / GIB:,.2f} GiB: vLLM pads the MXFP4 experts to its "
                    f"{kernel} kernel's tile")
        kept = parse_version(_version(pool) or "0.0") < HOPPER_SCALES_FREED_FROM
        return (f"{share} + {padding / GIB:,.2f} GiB: vLLM's Hopper kernels hold the MXFP4 "
                "experts' scales swizzled and padded, their biases in fp32"
                + (", and the loaded scales beside them (until v0.25)" if kept else ""))
    if vision > 0 or pool.stage is not None:
        return share
    if pool.split_device is not None:  # llama.cpp -sm layer: the binding GPU's own layers
        return (f"{pool.weight_bytes / GIB:,.2f} GiB of {dep.weights.label} weights on "
                f"{pool.split_device.describe()}: llama.cpp counts the output layer as one "
                "more layer to split, the last")
    if is_llamacpp(pool) and pool.weight_bytes < dep.weight_bytes / dep.num_gpus:
        return (f"{share}, less what stays in host memory: the input embedding"
                + (" and -ngl's host layers" if dep.offload is not None else ""))
    return f"{dep.weights.label}, the checkpoint's share{whole}"


def _kept_whole_note(dep: Deployment, pool: KVPool) -> str:
    """What of the weights per GPU each tensor-parallel rank keeps whole, where it shows."""
    tp = dep.tensor_parallel_size
    if tp == 1 or is_llamacpp(pool):
        return ""
    extra = stage_tp_copies_bytes(dep, pool.stage) / tp
    if extra < 0.005 * GIB:
        return ""
    att = dep.model.attention
    what = [name for name, held in (
        ("the MoE routers", dep.model.moe is not None),
        ("MLA's q_a/kv_a down-projections", att is not None and att.mla is not None),
        ("a K/V head's projections (more ranks than KV heads)",
         att is not None and att.mla is None and tp > att.num_kv_heads)) if held]
    return f", {extra / GIB:,.2f} GiB of it kept whole on every rank: {', '.join(what)}"


def _version(pool: KVPool) -> str | None:
    return None if pool.accounting is None else pool.accounting.version


def vision_bytes_in_pool(dep: Deployment, pool: KVPool) -> float:
    """The vision tower's bytes per GPU among the pool's weights (0 where the engine leaves it
    out: llama.cpp, vLLM --language-model-only)."""
    from ridgeline.vllm_memory import mxfp4_padding_bytes

    if is_llamacpp(pool):
        return 0.0
    extra = pool.weight_bytes - checkpoint_share_bytes(dep, pool) \
        - (mxfp4_padding_bytes(dep, pool.stage, _version(pool)) if pool.engine == "vllm"
           else 0.0)
    return max(0.0, extra)


def checkpoint_share_bytes(dep: Deployment, pool: KVPool) -> float:
    """The checkpoint's weights on one GPU of the pool's deployment (of its binding pipeline
    stage), before a vision tower or padding."""
    if pool.stage is None:
        return (dep.weight_bytes + dep.tp_copies_bytes) / dep.num_gpus
    return stage_weight_bytes(dep, pool.stage, 0.0)
