"""`ridgeline fit`'s levers: the changes that would hold more conversations, each with its
number (a smaller cache format, more GPUs, a MoE's GPUs as data-parallel attention, half the
context, smaller weights, llama.cpp's flash attention, slots and host offload, TensorRT-LLM's
seats, a hybrid's state: vLLM without prefix caching, SGLang's state pool sized by
--max-mamba-cache-size), and the fewest GPUs that hold the target when no single lever
does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ridgeline.candidate import parallel_words
from ridgeline.capacity import (
    conversations,
    engine_seat_limit,
    held_conversations,
    past_trained_context,
    seats_that_fit,
)
from ridgeline.data_parallel import layout_label
from ridgeline.decode_context import dcp_layout_problem, dcp_release_problem
from ridgeline.deployment import Deployment
from ridgeline.ds_mla_cache import vllm_stored_cache
from ridgeline.engine_platforms import (
    flash_attention_unsupported,
    kv_platform_problem,
    weights_platform_problem,
)
from ridgeline.engine_versions import llamacpp_build, pipeline_parallel_problem, sized_version
from ridgeline.errors import InputError
from ridgeline.hardware import engine_devices
from ridgeline.llamacpp_fit import run_pool
from ridgeline.llamacpp_tensor import tensor_split_build_problem
from ridgeline.lora_slots import engine_lora_problem
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.monotone import longest_holding
from ridgeline.offload import host_weight_bytes
from ridgeline.parallel import node_size, tp_within_node
from ridgeline.precision import kv_dtype, weight_bytes_by_category, weight_plan
from ridgeline.quantization_gates import deployment_problem
from ridgeline.reports.fit_manager_levers import chunked_levers, manager_levers
from ridgeline.reports.fit_state import most_rank_requests
from ridgeline.reports.fit_state_levers import prefix_caching_lever, state_pool_size_lever
from ridgeline.reports.fit_terms import (
    cap_flag,
    context_lever,
    fp8_kv_words,
    host_cache_unbounded,
    is_llamacpp,
)
from ridgeline.reports.fit_verdict import DOES_NOT_FIT
from ridgeline.served_model import llamacpp_tensor_types
from ridgeline.sglang_nsa import nsa_served, nsa_stored_cache
from ridgeline.units import GIB
from ridgeline.vllm_attention_block import attention_block_problem
from ridgeline.vllm_eplb import eplb_layout_problem
from ridgeline.vllm_eplb_weights import eplb_weights_problem
from ridgeline.vllm_memory import vllm_accounting
from ridgeline.vllm_pool import set_pool_margin_bytes
from ridgeline.vllm_v0_chunking import v0_runs_whole

if TYPE_CHECKING:
    from ridgeline.model import ModelSpec
    from ridgeline.reports.fit import FitReport


@dataclass(frozen=True)
class Lever:
    """One change fit weighs (FitReport.levers), and what it would hold: ``name`` says the
    change in words and flags, ``conversations`` and ``batch`` are the fit's under it,
    ``context`` the tokens a conversation then has (shorter for the context levers),
    ``seats`` the engine's seat limit then (max_num_seqs; batch = min(conversations, seats)).
    Llama-3.1-8B on one H100 under vLLM at 8,192 tokens, 59 conversations: "fp8 KV cache
    (--kv-cache-dtype fp8)" holds 118, "2 GPUs (tensor parallel)" 132."""

    name: str
    conversations: int
    batch: int
    context: int = 0  # the context the lever's conversations are of: shorter for the
    # context levers (half the context, the longest that holds the target)
    seats: int = 0  # the engine's seat limit under the change: batch = min(conversations, it)


# the next smaller format: 16-bit to fp8 (which vLLM and SGLang quantize on load), any 8-bit
# one to 4-bit; a 4-bit format has none
SMALLER_WEIGHTS = {"bf16": "fp8", "fp16": "fp8", "fp8": "awq-int4", "fp8-block": "awq-int4",
                   "int8": "awq-int4", "int8-w8a16": "awq-int4", "bnb-int8": "awq-int4",
                   "gptq-int8": "awq-int4"}
# the smaller formats a flag quantizes a 16-bit checkpoint to as it loads (vLLM's and SGLang's
# --quantization fp8); no engine makes AWQ (or GPTQ) on load, its int4 is another checkpoint.
# bitsandbytes' in-flight 4-bit (-q bitsandbytes) is another format, bnb-nf4, whose
# dequantizing kernels run well below the bytes it reads (predict.BNB_CAUTION): no lever
ON_LOAD_WEIGHTS = frozenset({"fp8"})
SMALLER_GGUF = {"bf16": "q8_0", "fp16": "q8_0", "q8_0": "q4_k_m", "q6_k": "q4_k_m",
                "q5_k_m": "q4_k_m", "q5_k_s": "q4_k_m"}


def _offload_lever(r: FitReport) -> list[tuple[str, Deployment, int, EngineSettings]]:
    """llama.cpp's ways out when the weights crowd out the cache: for an MoE model the fewest
    layers' experts kept on the host (--n-cpu-moe), and the most GPU layers (-ngl), at which
    the target conversations fit; the rest is streamed from host memory."""
    from ridgeline.offload import HostOffload, every_layer_ngl, host_weight_bytes

    d, s, need = r.deployment, r.settings, max(1, r.target or 1)
    if r.conversations >= need:
        return []
    n, every = d.model.num_layers, every_layer_ngl(d.model)  # every block and the output

    def holds(offload: HostOffload) -> Deployment | None:
        try:
            dep = d.offloaded(offload, check_host=False)
        except InputError:  # --n-cpu-moe over several GPUs: an uneven split
            return None
        pool = kv_pool(dep, replace(s, max_model_len=r.context))
        return dep if conversations(pool, dep, r.context) >= need else None

    levers = []
    from ridgeline.llamacpp_fit import fit_default_since_build, fit_on_for, fit_placement

    try:  # what llama.cpp does by itself since Dec 2025
        fit = fit_placement(d, replace(s, max_model_len=r.context), r.context, need,
                            HostOffload(every))
    except InputError:
        fit = None
    if fit is not None and fit.offload is not None:
        name = "llama.cpp --fit" if fit_on_for(s.engine_version) else \
            f"--fit (b{fit_default_since_build()}+)"  # a build before it has none
        levers.append((f"{name} ({host_weight_bytes(fit) / GIB:,.1f} GiB on host)",
                       fit, r.context, s))
    if d.model.moe is not None:  # experts first: every token still runs its layers on the GPU
        for experts in range(1, n + 1):
            dep = holds(HostOffload(every, experts))
            if dep is not None:
                flag = "--cpu-moe" if experts == n else f"--n-cpu-moe {experts}"
                levers.append((f"{flag} ({host_weight_bytes(dep) / GIB:,.1f} GiB on host)",
                               dep, r.context, s))
                break
    for ngl in range(every - 1, -1, -1):
        dep = holds(HostOffload(ngl))
        if dep is not None:
            levers.append((f"-ngl {ngl} ({host_weight_bytes(dep) / GIB:,.1f} GiB weights on "
                           "host)", dep, r.context, s))
            break
    return levers


def more_devices(d: Deployment) -> str:
    """Twice the deployment's devices, in the card's noun: "2 GPUs", "4 chips" (a TPU)."""
    return f"{2 * d.num_gpus} {d.accelerator.device_noun}s"


def levers(r: FitReport) -> list[Lever]:
    d, s = r.deployment, r.settings
    if host_cache_unbounded(r.pool, d):  # each count would be the GPU mask's; the headline
        return []  # asks for --host-memory-gib, which makes them the RAM's
    gguf = is_llamacpp(r.pool)
    options: list[tuple[str, Deployment, int, EngineSettings]] = []
    small_kv = ("q8_0", "q8_0 KV cache (-ctk q8_0 -ctv q8_0)") if gguf else (
        "fp8", f"fp8 KV cache ({fp8_kv_words(r.pool, s.engine_version)})")
    # vLLM and SGLang keep DeepSeek-V3.2's fp8 cache in fp8_ds_mla's records (ds_mla_cache.py,
    # sglang_nsa.py)
    small_cache = kv_dtype(small_kv[0])
    smaller_kv = replace(d, kv=vllm_stored_cache(small_cache, d.model)
                         if d.engine == "vllm" else nsa_stored_cache(small_cache, d.model)
                         if d.engine == "sglang" and nsa_served(d.model, d.accelerator)
                         else small_cache)
    # flash attention can be turned on only where the backend has a kernel for the heads
    fa_runs = gguf and not flash_attention_unsupported(d.model, d.engine)
    if gguf and not d.flash_attention and not fa_runs:  # f16 is the only cache that starts
        smaller_kv = d
    elif gguf and not d.flash_attention:  # a quantized V cache needs flash attention to start
        small_kv = (small_kv[0], "q8_0 KV cache (-fa on -ctk q8_0 -ctv q8_0)")
        smaller_kv = replace(smaller_kv, flash_attention=True)
    if d.kv.bytes_per_element > smaller_kv.kv.bytes_per_element and not \
            tensor_split_build_problem(smaller_kv, _llamacpp_build(s)) and not \
            kv_platform_problem(small_cache if smaller_kv.kv.elements_per_token  # the flag's
                                else smaller_kv.kv, d.accelerator, d.engine):  # refused there
        options.append((small_kv[1], smaller_kv, r.context, s))
    doubled = d.tensor_parallel_size * 2
    if d.accelerator.vendor == "apple" or (d.accelerator.form == "soc"
                                           and not d.accelerator.link_kind):
        pass  # one GPU per machine (a Mac, a Strix Halo box) and no link: no second to add
    elif d.data_parallel_size > 1:
        options += _offered(_rank_levers, d, r.context, s)
    elif gguf and d.offload is None:  # llama.cpp's default split: more stages of layers
        more = replace(d, pipeline_parallel_size=d.pipeline_parallel_size * 2) \
            if d.pipeline_parallel_size > 1 or d.tensor_parallel_size == 1 \
            else replace(d, tensor_parallel_size=doubled)
        options.append((f"{more_devices(d)} ("
                        f"{'layer split' if more.pipeline_parallel_size > 1 else '-sm tensor'})",
                        more, r.context, s))
    elif d.offload is None and doubled <= node_size(d.accelerator) \
            and not deployment_problem(replace(d, tensor_parallel_size=doubled), s.engine_version):
        wider = replace(d, tensor_parallel_size=doubled)
        options.append((f"{more_devices(d)} ({_split_words(wider)})", wider, r.context, s))
    elif d.offload is None and 2 * d.pipeline_parallel_size <= d.model.num_layers \
            and not deployment_problem(replace(d, pipeline_parallel_size=2 *
                                               d.pipeline_parallel_size), s.engine_version):
        # past one node's NVLink domain, or where the weights refuse more tensor-parallel
        # ranks (a pre-quantized bitsandbytes checkpoint: 'Please try with pipeline
        # parallelism'): more pipeline stages, as vLLM's docs advise
        more = replace(d, pipeline_parallel_size=2 * d.pipeline_parallel_size)
        options.append((f"{more_devices(d)} ({_split_words(more)})", more, r.context, s))
    options += _offered(_dp_attention_lever, d, r.context, s)
    within = tp_within_node(d.tensor_parallel_size, d.pipeline_parallel_size,
                            node_size(d.accelerator))
    if d.data_parallel_size > 1:
        pass  # no pipeline stages under data-parallel attention: _rank_levers splits ranks
    elif not gguf and d.offload is None and within is not None \
            and within[1] <= d.model.num_layers:
        # TP past one node's NVLink domain: the same GPUs as a node's TP × stages, the
        # layout the cross-node caution names (parallel.cross_node_caution)
        split = replace(d, tensor_parallel_size=within[0], pipeline_parallel_size=within[1])
        options.append((f"the same {d.num_gpus} GPUs as {_split_words(split)}", split,
                        r.context, s))
    half = max(1, r.context // 2)
    halved = _placed_for_context(r, half)
    if halved is not None:
        options.append((f"half the context ({r.context // 2:,} tokens"
                        f"{_moved_words(d, halved)})", halved, half, s))
    options += _offered(_smaller_weights_lever, d, r.context, s, gguf)
    if fa_runs and not d.flash_attention:
        options.append(("flash attention (-fa on)", replace(d, flash_attention=True), r.context, s))
    if gguf:
        options += _offered(_slots_lever, r)
    if r.pool.seat_state_bytes:
        options += _offered(state_seats_lever, r)
    elif r.pool.engine_buffers:
        options += _offered(_seats_lever, r)
    options += _offered(_more_seats_lever, r)
    if d.engine == "vllm" and not r.pool.set_pool_bytes:
        options += _offered(_budget_levers, r)
    options += _offered(prefix_caching_lever, r)
    options += _offered(manager_levers, r)
    options += _offered(chunked_levers, r)
    options += _offered(_dcp_lever, r)
    options += _offered(_state_slots_lever, r)
    options += _offered(state_pool_size_lever, r)
    options += _offered(_pool_flag_levers, r)
    options += _offered(_longest_context_lever, r)
    if gguf and d.offload is None and d.tensor_parallel_size == 1 \
            and not d.accelerator.one_memory:
        options += _offered(_offload_lever, r)
    if d.cpu_offload is not None:  # vLLM's --cpu-offload-gb: more of it, where none is held
        from ridgeline.reports.fit_offload import cpu_offload_lever

        options += _offered(cpu_offload_lever, r)
    levers = []
    for name, dep, context, settings in options:
        settings = _draft_tp_follows(d, dep, settings)
        if deployment_problem(dep, settings.engine_version):
            continue  # a lever the release refuses to start (an fp8 cache on a V100, vLLM 0.19)
        if dcp_layout_problem(dep.model, dep.engine, dep.engine_tensor_parallel_size,
                              dep.decode_context_parallel_size):
            continue  # a lever's new TP that -dcp no longer divides
        if settings.eplb is not None and eplb_layout_problem(dep, settings.eplb):
            continue  # a lever's new EP size the redundant experts no longer divide
        if settings.eplb is not None and eplb_weights_problem(dep, settings.engine_version):
            continue  # a lever's weights whose MoE method the release runs no EPLB for
        if settings.lora is not None and engine_lora_problem(dep, settings.lora,
                                                             settings.engine_version):
            continue  # a lever's layout whose LoRA slots are not sized (SGLang's tables at TP2)
        if dep.engine == "vllm" and settings.block_size and attention_block_problem(
                dep, str(sized_version("vllm", settings.engine_version)),
                settings.block_size):
            continue  # a lever's fp8 cache that no backend pages in the block asked
        try:
            pool = run_pool(dep, replace(settings, max_model_len=context),
                            r.fit_host is not None, r.fit_margin_bytes)
        except InputError:  # -dcp the release refuses (with an fp8 MLA cache before 0.25),
            # or more data-parallel ranks than SGLang's server-wide --max-running-requests or
            # --max-mamba-cache-size has requests for (rank_settings): no way out. The
            # user's own layout was sized above, so a refusal here is the lever's alone and
            # never the report's
            continue
        n = held_conversations(pool, dep, context)
        seats = engine_seat_limit(pool, dep)
        lever = Lever(name, n, min(n, seats), context, seats)
        if lever.batch and (lever.conversations > r.conversations or lever.batch > r.batch):
            levers.append(lever)  # one that gains nothing, or runs nothing, is no way out
    return levers


def _offered(builder: Callable[..., list[tuple[str, Deployment, int, EngineSettings]]],
             *args: Any) -> list[tuple[str, Deployment, int, EngineSettings]]:
    """A lever builder's options, or none where sizing one is refused (an InputError from a
    pool it prices): the user's own layout was sized already, so a refusal there is the
    lever's alone and never aborts the report, as the lever loop skips a priced one."""
    try:
        return builder(*args)
    except InputError:
        return []


def _slots_lever(r: FitReport) -> list[tuple[str, Deployment, int, EngineSettings]]:
    """-np K, K the most slots that each hold a conversation (capacity.llamacpp_slots, the
    count decode gives, a slot per sequence): more slots where the pool holds more
    conversations than -np; fewer where the window and state caches llama-server sizes for
    every slot, idle or not, leave it fewer conversations than slots (gemma-2-9b at 8,192
    tokens on an M1 Pro's 21.33 GiB: -np 4 holds none beside 2.71 GiB of window caches,
    -np 1 holds one). None where K is -np or no slot holds one."""
    from ridgeline.capacity import llamacpp_slots

    slots = r.pool.max_num_seqs
    most = llamacpp_slots(r.deployment, r.context, r.settings, r.fit_host is not None,
                          r.fit_margin_bytes)
    if most in (0, slots):
        return []
    s = replace(r.settings, max_num_seqs=most)
    placed = _placed_for_context(r, r.context, s)
    if placed is None:
        return []
    # --fit places -np K's slots' caches as a run with it does
    unified = " --kv-unified" if most > slots else ""
    return [(f"{most} slot{'s' if most > 1 else ''} (-np {most}{unified}"
             f"{_moved_words(r.deployment, placed)})", placed, r.context, s)]


def _placed_for_context(r: FitReport, context: int,
                        settings: EngineSettings | None = None) -> Deployment | None:
    """The deployment as it would run at ``context`` with ``settings`` (default: the
    report's; the slots lever's more -np): as it is, or, where llama.cpp's --fit places it
    (it placed this one, or the report's ``fit_host`` says --fit is on), placed again for
    that run's -c, as `fit --max-model-len … -np …` places it (cli_offload.launch_fitted:
    -c = the context × the slots whose conversations fit with every layer on the GPU, at
    least one, or × the target). Keeping the first placement would hold two half-length
    conversations a run at that length never starts with, or price 50 slots' window and
    state caches on weights --fit then moves to the host. None where --fit finds no
    placement."""
    d = r.deployment
    fitted = d.offload is not None and d.offload.chosen_by_fit
    template = d.offload if fitted else r.fit_host
    if template is None:
        return d
    from ridgeline.llamacpp_fit import fit_placement
    from ridgeline.sim.config import llamacpp_context

    whole = replace(d, offload=None)
    settings = replace(settings or r.settings, max_model_len=context)
    try:
        sequences = max(r.target or 1, llamacpp_context(whole, settings, True,
                                                        r.fit_margin_bytes)[0] // context)
        return fit_placement(whole, settings, context, sequences, template,
                             r.fit_margin_bytes)
    except InputError:
        return None


def _moved_words(d: Deployment, placed: Deployment) -> str:
    """What a lever's run placed again by --fit (``_placed_for_context``) keeps on the host,
    where more than the report's own placement: "; --fit keeps 3.58 GiB of weights on the
    host"; else ""."""
    def host(dep: Deployment) -> float:
        return host_weight_bytes(dep) if dep.offload is not None else 0.0

    more = host(placed)
    return f"; --fit keeps {more / GIB:,.2f} GiB of weights on the host" \
        if more > host(d) else ""


def _draft_tp_follows(d: Deployment, dep: Deployment, s: EngineSettings) -> EngineSettings:
    """``s`` for a lever's ``dep``: a draft model's draft_tensor_parallel_size given as the
    target's (``d``'s engine TP, the one size vLLM's V1 runs it at) follows the lever's TP, so
    more GPUs are not refused for a split the user did not ask; V0's 1 (each rank the whole
    draft model) stays 1."""
    drafter = s.drafter
    if drafter is None or d.engine != "vllm" \
            or drafter.draft_tensor_parallel_size != d.engine_tensor_parallel_size \
            or (drafter.draft_tensor_parallel_size == 1
                and vllm_accounting(s.engine_version).engine != "V1"):
        return s
    return replace(s, drafter=replace(drafter,
                                      draft_tensor_parallel_size=dep.engine_tensor_parallel_size))


def _smaller_weights_lever(d: Deployment, context: int, s: EngineSettings, gguf: bool
                           ) -> list[tuple[str, Deployment, int, EngineSettings]]:
    """The next smaller weight format (SMALLER_WEIGHTS, SMALLER_GGUF), where the card runs it.
    A checkpoint whose quantization_config (or GGUF file) fixes its format, bitsandbytes, AWQ,
    GPTQ, fp8, compressed-tensors alike, is served as stored: a smaller format is another
    checkpoint, which the lever says, and none is offered past the smallest (a 4-bit one). A
    16-bit checkpoint served smaller (--weights fp8, quantized on load) says it alike where
    the next format is none a flag makes on load (ON_LOAD_WEIGHTS: awq-int4); under llama.cpp
    every format is the GGUF file's, none made on load, so every such lever says it (q8_0 to
    q4_k_m: another file)."""
    stored = stored_weight_format(d.model)
    current = stored if d.weights.label == "as stored" else d.weights.label
    fmt = (SMALLER_GGUF if gguf else SMALLER_WEIGHTS).get(current)
    if fmt is None:
        return []
    plan = weight_plan(d.model, fmt)
    if d.engine.startswith("llama.cpp"):  # the router, norms and biases F32, as Deployment's
        plan = llamacpp_tensor_types(plan)
    if weights_platform_problem(plan, d.accelerator, d.engine, True):
        return []
    name, this = f"{fmt} weights", ""
    sixteen = weight_plan(d.model).label  # the catalog config's own 16-bit type
    if stored or gguf:  # no flag turns a quantized checkpoint into another format, nor
        # llama-server a GGUF file's tensor types: any other is another file (llama-quantize
        # writes one, from a 16-bit GGUF)
        this = stored or current
    elif d.weights_stored and current != sixteen:  # --weights fp8 on a 16-bit config: a
        # checkpoint stored in fp8 (cli --weights: no 16-bit load peak), whose next format is
        # another checkpoint; the catalog's own is 16-bit, which the words say
        this = f"{sixteen} in the catalog, sized as stored in {current} by --weights {current}"
    elif fmt not in ON_LOAD_WEIGHTS:  # a 16-bit checkpoint already quantized on load
        # (-q fp8): the next format is no flag either
        this = f"{sixteen}, quantized to {current} on load"
    if this:
        name += f" (a different {'GGUF file' if gguf else 'checkpoint'}; this one is {this})"
    # a different checkpoint loads as stored; the 16-bit one served smaller is quantized on
    # load (-q fp8), with the 16-bit load peak where the engine has one (load_peak.py)
    return [(name, replace(d, weights=plan, weights_stored=bool(this)), context, s)]


def stored_weight_format(spec: ModelSpec) -> str:
    """The format a quantized checkpoint stores most of its weight bytes in: DeepSeek-V3's
    'fp8-block', a bitsandbytes 4-bit checkpoint's 'bnb-nf4', gpt-oss's 'mxfp4' (its
    experts); "" for a 16-bit checkpoint, whose format a flag picks."""
    stored = spec.stored_format_map
    if not stored:
        return ""
    by_bytes = weight_bytes_by_category(spec, weight_plan(spec))
    return stored[max(stored, key=lambda c: by_bytes.get(c, 0.0))]


def _dcp_lever(r: FitReport) -> list[tuple[str, Deployment, int, EngineSettings]]:
    """vLLM's -dcp N for an MLA model that TP copies onto every rank: N = TP, each sequence's
    latent dealt over all of them, N times the tokens (DeepSeek-V3, Kimi-K2 at TP8: 8×),
    where the release runs it (decode_context.py). N counts vLLM's ranks: on 4 x MI250, its
    --tensor-parallel-size 8 over the dies, -dcp 8."""
    d, s = r.deployment, r.settings
    att = d.model.attention
    n = d.engine_tensor_parallel_size
    if d.engine != "vllm" or n == 1 or d.decode_context_parallel_size > 1 or att is None \
            or att.mla is None or dcp_layout_problem(d.model, d.engine, n, n):
        return []
    dealt = replace(d, decode_context_parallel_size=n)
    acc = vllm_accounting(s.engine_version)
    if dcp_release_problem(dealt, acc.version, acc.engine):
        return []
    dies = f", over {n} dies" if n > d.tensor_parallel_size else ""
    return [(f"-dcp {n} (each sequence's KV dealt over the {n} TP ranks{dies})", dealt,
             r.context, s)]


def _rank_levers(d: Deployment, context: int, s: EngineSettings
                 ) -> list[tuple[str, Deployment, int, EngineSettings]]:
    """Data-parallel attention's ways to more GPUs, each a layout the flags take (no pipeline
    stages under it): twice the ranks (a pool each, a MoE's experts spread thinner), twice
    each rank's GPUs within a node (its attention and share of the experts split further),
    and a rank whose tensor parallelism spans nodes as more ranks of a node each (the same
    GPUs, every rank's all-reduce inside a node)."""
    node, tp = node_size(d.accelerator), d.tensor_parallel_size
    out = []
    more = replace(d, data_parallel_size=2 * d.data_parallel_size)
    out.append((f"{more_devices(d)} ({_ranks_label(more)})", more, context, s))
    wider = replace(d, tensor_parallel_size=2 * tp)
    if 2 * tp <= node and not deployment_problem(wider, s.engine_version):
        out.append((f"{more_devices(d)} ({_ranks_label(wider)})", wider, context, s))
    within = tp_within_node(tp, d.data_parallel_size, node)
    if within is not None and not deployment_problem(
            replace(d, tensor_parallel_size=within[0]), s.engine_version):
        split = replace(d, tensor_parallel_size=within[0], data_parallel_size=within[1])
        out.append((f"the same {d.num_gpus} GPUs as {_ranks_label(split)}", split, context,
                    s))
    return out


def _dp_attention_lever(d: Deployment, context: int, s: EngineSettings
                        ) -> list[tuple[str, Deployment, int, EngineSettings]]:
    """A MoE's tensor-parallel GPUs run as data-parallel attention instead: as many ranks of
    one GPU each, every rank its own requests' cache in a pool of its own and its own copy of
    the attention, the experts spread over all of them (data_parallel.py), in the engine's
    flags: vLLM --tensor-parallel-size 1 --data-parallel-size N --enable-expert-parallel (on
    an MI250 a rank is a card's two dies, vLLM's -tp 2, which the lever names beside fit's
    --num-gpus 1, a card), SGLang --tp-size N --dp-size N
    --enable-dp-attention with --ep-size N. Where the engine's version has expert parallelism
    (expert_parallel_problem); none under pipeline stages."""
    from ridgeline.data_parallel import DATA_PARALLEL_ENGINES, data_parallel_problem
    from ridgeline.engine_versions import expert_parallel_problem

    ranks = d.tensor_parallel_size
    if d.model.moe is None or d.engine not in DATA_PARALLEL_ENGINES or ranks < 2 \
            or d.data_parallel_size > 1 or d.pipeline_parallel_size > 1 or d.offload is not None \
            or expert_parallel_problem(d.engine, s.engine_version):
        return []
    dp = replace(d, tensor_parallel_size=1, data_parallel_size=ranks, expert_parallel=True)
    if data_parallel_problem(dp, ranks, True):
        return []
    devices = engine_devices(d.engine, d.accelerator)  # vLLM: a rank is a card's dies
    flags = (f"--dp-size {ranks} --enable-dp-attention" if d.engine == "sglang"  # --tp-size kept
             else f"--num-gpus 1 -dp {ranks}") + " --enable-expert-parallel"
    # --num-gpus counts cards, as fit reads it again; vLLM's own -tp counts the dies
    dies = (f", over {ranks * devices} dies: vLLM's -tp {devices} -dp {ranks}"
            if devices > 1 else "")
    return [(f"DP attention ({flags}{dies})", dp, context, s)]


def _split_words(d: Deployment, layout: str = "") -> str:
    """A lever's tensor and pipeline split over cards: 'tensor parallel', 'TP4 × PP2' (or
    ``layout`` where given); where the engine runs each card as several devices, in the ranks
    it launches, as plan's labels say them (candidate.parallel_words): vLLM on 4 x MI250
    'TP8 over 8 dies', its --tensor-parallel-size 8."""
    tp, pp = d.tensor_parallel_size, d.pipeline_parallel_size
    devices = engine_devices(d.engine, d.accelerator)
    if devices > 1:
        return parallel_words(tp, pp, devices)
    return layout or ("tensor parallel" if pp == 1 else f"TP{tp} × PP{pp}")


def _ranks_label(d: Deployment) -> str:
    """'attention DP16 × TP1' (a dense model's 'DP4 × TP2'): the ranks and each one's GPUs,
    in the ranks the engine launches (vLLM on 8 x MI250: 'attention DP8 × TP2 over 16
    dies')."""
    return _dies_layout(d).split(",")[0]


def _dies_layout(d: Deployment) -> str:
    """data_parallel.layout_label in the engine's ranks, each card's devices counted."""
    return layout_label(d, engine_devices(d.engine, d.accelerator))


def _llamacpp_build(s: EngineSettings) -> int | None:
    """The llama.cpp build --engine-version names, None for the newest modelled."""
    return llamacpp_build(s.engine_version) if s.engine_version else None


MOST_GPUS = 64  # how far gpus_needed looks


@dataclass(frozen=True)
class MoreGpus:
    """gpus_needed's answer: the deployment that holds the target, or none within reach
    (``num_gpus`` None), with the sentence the text gives."""

    text: str
    accelerator: str
    num_gpus: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    conversations: int | None = None  # what it holds at this context and format

    def to_dict(self) -> dict[str, object]:
        """--json's ``gpus_needed``: the found deployment's figures, null where none is."""
        return {"found": self.num_gpus is not None, **vars(self)}


def more_gpus(r: FitReport) -> MoreGpus | None:
    """gpus_needed where the text gives it: a deployment that does not fit (at a context the
    model was trained for) and no lever alone holds the target; None else."""
    if r.verdict != DOES_NOT_FIT or past_trained_context(r.deployment, r.context) \
            or any(lv.conversations >= max(1, r.target or 1) for lv in r.levers):
        return None
    return gpus_needed(r)


def _found(d: Deployment, held: int, text: str) -> MoreGpus:
    return MoreGpus(text, d.accelerator.id, d.num_gpus, d.tensor_parallel_size,
                    d.pipeline_parallel_size, d.data_parallel_size, held)


def gpus_needed(r: FitReport) -> MoreGpus:
    """The fewest GPUs of this card that hold the target at this context and format, doubling
    tensor parallelism within a node and pipeline stages past it: Llama-3.1-70B bf16 at its
    131,072 tokens under vLLM, where one H100 holds none, 4 GPUs (tensor parallel) hold 3."""
    d, target = r.deployment, max(1, r.target or 1)
    if d.data_parallel_size > 1:
        return _ranks_needed(r)
    if d.accelerator.vendor == "apple":  # one device a machine: more are refused (deployment)
        return _larger_mac(r)
    node = 1 if is_llamacpp(r.pool) else node_size(d.accelerator)
    tp, pp = d.tensor_parallel_size, d.pipeline_parallel_size
    while tp * pp < MOST_GPUS:
        if tp < node and not deployment_problem(
                replace(d, tensor_parallel_size=2 * tp, pipeline_parallel_size=pp),
                r.settings.engine_version):
            tp *= 2
        elif 2 * pp <= d.model.num_layers and not deployment_problem(
                replace(d, tensor_parallel_size=tp, pipeline_parallel_size=2 * pp),
                r.settings.engine_version):
            pp *= 2
        else:
            staged = pipeline_parallel_problem(d.engine, r.settings.engine_version, 2 * pp)
            if staged and tp >= node:  # vLLM 0.4: a node's GPUs are the most it runs
                return MoreGpus(f"not {tp * pp} GPUs of {d.accelerator.id} hold "
                                f"{_wanted(target)} at this context and weight format, and "
                                f"more would need pipeline stages: {staged}", d.accelerator.id)
            break
        more = replace(d, tensor_parallel_size=tp, pipeline_parallel_size=pp)
        try:
            pool = run_pool(more, replace(_draft_tp_follows(d, more, r.settings),
                                          max_model_len=r.context),
                            r.fit_host is not None, r.fit_margin_bytes)
            held = held_conversations(pool, more, r.context)
        except InputError:  # a split the engine or the model refuses
            continue
        if held >= target:
            layout = ", ".join(more.layout_parts) if more.pipeline_parallel_size > 1 else ""
            return _found(more, held, f"{more.num_gpus} GPUs of {d.accelerator.id} ("
                          f"{_split_words(more, layout)}) hold {held:,} at this context and "
                          "weight format")
    return _none_hold(d, target)


def _larger_mac(r: FitReport) -> MoreGpus:
    """gpus_needed on Apple silicon, where llama.cpp's Metal backend runs one device and
    several Macs over RPC are not modelled: the Mac of the catalog with the least memory
    that holds the target at this context and format (at one size, the faster), as fit
    sizes its pool. Llama-3.1-70B Q4_K_M at 128K on an apple-m4-max-32c (36 GiB): one
    conversation takes 40 GiB beside 39 GiB of weights; a 128 GiB Mac holds it."""
    from ridgeline.hardware import catalog

    d, target = r.deployment, max(1, r.target or 1)
    larger = sorted((a for a in catalog().values()
                     if a.vendor == "apple" and a.memory_bytes > d.accelerator.memory_bytes),
                    key=lambda a: (a.memory_bytes, -a.memory_bandwidth_bytes_per_s, a.id))
    lead = (f"more GPUs are not a lever on {d.accelerator.id}: llama.cpp's Metal backend runs "
            "one device (several Macs over RPC are not modelled); ")
    wanted = "one conversation" if target == 1 else f"{target:,}"
    for a in larger:
        bigger = replace(d, accelerator=a)
        try:
            held = held_conversations(run_pool(bigger, replace(r.settings, max_model_len=r.context),
                                               r.fit_host is not None, r.fit_margin_bytes),
                                      bigger, r.context)
        except InputError:  # a format this chip's kernels refuse
            continue
        if held >= target:
            return _found(bigger, held, lead + f"a Mac with more memory: {a.id} "
                          f"({a.memory_gib:,.0f} GiB) holds {held:,} at this context and "
                          "weight format")
    most = max((a for a in catalog().values() if a.vendor == "apple"),
               key=lambda a: a.memory_bytes)
    return MoreGpus(lead + f"not even the catalog's largest Mac, {most.id} "
                    f"({most.memory_gib:,.0f} GiB), holds {wanted} at this context and weight "
                    "format: a smaller format and a shorter context", d.accelerator.id)


def _ranks_needed(r: FitReport) -> MoreGpus:
    """gpus_needed for data-parallel attention: the fewest ranks (doubling) that hold the
    target."""
    d, target = r.deployment, max(1, r.target or 1)
    ranks = d.data_parallel_size
    while 2 * ranks * d.rank_gpus <= MOST_GPUS:
        ranks *= 2
        more = replace(d, data_parallel_size=ranks)
        try:
            held = held_conversations(kv_pool(more, replace(r.settings,
                                                            max_model_len=r.context)),
                                      more, r.context)
        except InputError as exc:  # a server-wide count too few for this many ranks
            return MoreGpus(f"not {more.num_gpus} GPUs of {d.accelerator.id} as {ranks} "
                            f"ranks: {exc}", d.accelerator.id)
        if held >= target:
            return _found(more, held, f"{more.num_gpus} GPUs of {d.accelerator.id} "
                          f"({_dies_layout(more)}) hold {held:,} at this context and weight "
                          "format")
    return _none_hold(d, target)


def _wanted(target: int) -> str:
    """The target as gpus_needed's sentences name it: 'one conversation', '12'."""
    return "one conversation" if target == 1 else f"{target:,}"


def _none_hold(d: Deployment, target: int) -> MoreGpus:
    """gpus_needed's answer when no count up to MOST_GPUS holds ``target`` conversations."""
    return MoreGpus(f"not even {MOST_GPUS} GPUs of {d.accelerator.id} hold {_wanted(target)} "
                    "at this context and weight format: a larger card, a smaller format and a "
                    "shorter context together", d.accelerator.id)


FULLER_BUDGET = 0.95  # a fraction vLLM users run at where nothing else shares the card
SMALLER_PROFILE_TOKENS = 2048  # max_num_batched_tokens: the profiling pass's activations


def _budget_levers(r: FitReport) -> list[tuple[str, Deployment, int, EngineSettings]]:
    """vLLM's own settings, the first a serving engineer tries: a fuller memory budget, and a
    smaller step (its profiling pass reserves activations for max_num_batched_tokens)."""
    s, out = r.settings, []
    if r.pool.reserved_fraction < FULLER_BUDGET:
        out.append((f"--gpu-memory-utilization {FULLER_BUDGET:g}", r.deployment, r.context,
                    replace(s, gpu_memory_utilization=FULLER_BUDGET)))
    if r.pool.profile_tokens > SMALLER_PROFILE_TOKENS and not v0_runs_whole(
            r.deployment, s, vllm_accounting(s.engine_version), r.context) \
            and (s.max_num_seqs or 0) <= SMALLER_PROFILE_TOKENS:  # vLLM would refuse a budget
        # below the context it runs whole (V0's, or --no-enable-chunked-prefill), or below
        # the --max-num-seqs given (SchedulerConfig: max_num_batched_tokens >= max_num_seqs)
        out.append((f"--max-num-batched-tokens {SMALLER_PROFILE_TOKENS}", r.deployment, r.context,
                    replace(s, max_num_batched_tokens=SMALLER_PROFILE_TOKENS)))
    return out


def _pool_flag_levers(r: FitReport) -> list[tuple[str, Deployment, int, EngineSettings]]:
    """A pool the user sized: vLLM's --kv-cache-memory-bytes at the most the card holds
    (its own 'fill the card' figure, less its 150 MiB margin), and the token cap lifted."""
    p, s, out = r.pool, r.settings, []
    if p.set_pool_bytes:  # the flag is per device (of an MI250, a GCD)
        n = p.runtime_devices
        room = int(p.rest_bytes / n - set_pool_margin_bytes())
        if room > 0 and room != int(p.set_pool_bytes / n):
            out.append((f"--kv-cache-memory-bytes {room} ({room / GIB:,.2f} GiB, the card's "
                        "room)", r.deployment, r.context, replace(s, kv_cache_memory_bytes=room)))
    if p.capped:
        out.append((f"{cap_flag(p)} unset (the memory's own pool)", r.deployment, r.context,
                    replace(s, max_total_tokens=None)))
    return out


def _state_slots_lever(r: FitReport) -> list[tuple[str, Deployment, int, EngineSettings]]:
    """SGLang's state pool set at a number of requests (its radix cache off: the flag or
    512), whatever the memory, where that leaves the target no room or too few slots: the
    largest --max-running-requests that holds it (FitReport.most_running_requests, the bound
    the overrun headline names)."""
    p, need = r.pool, max(1, r.target or 1)
    if not p.state_pool_fixed or r.conversations >= need:
        return []
    most, rank_most = r.most_running_requests, most_rank_requests(r)  # the server's, a pool's
    if rank_most < r.rank_target or rank_most == p.state_slots:
        return []
    return [(f"--max-running-requests {most:,}", r.deployment, r.context,
             replace(r.settings, max_num_seqs=most))]


def _longest_context_lever(r: FitReport) -> list[tuple[str, Deployment, int, EngineSettings]]:
    """Where the target does not fit: the longest context at which it does (what vLLM's
    start-up error names, 'the estimated maximum model length is …'), in the engine's own
    setting (fit_terms.context_lever)."""
    from ridgeline.capacity import past_trained_context

    d, s, target = r.deployment, r.settings, max(1, r.target or 1)
    if r.conversations >= target or past_trained_context(d, r.context) or r.context < 2:
        return []

    def holds(context: int) -> bool:  # and runs: a pool of no seats runs none
        pool = kv_pool(d, replace(s, max_model_len=context))
        return pool.max_num_seqs >= 1 and held_conversations(pool, d, context) >= target

    if not holds(1):
        return []
    low = longest_holding(holds, 1, r.context - 1)
    if low < r.context // SHORTEST_CONTEXT_SHARE:  # 32 tokens for an 8K ask is no way out
        return []
    return [(context_lever(r.pool, low, target), d, low, s)]


SHORTEST_CONTEXT_SHARE = 16  # a context lever shorter than 1/16 of the ask is not offered


def _more_seats_lever(r: FitReport) -> list[tuple[str, Deployment, int, EngineSettings]]:
    """Where the seats, not the pool, cap the batch (--max-num-seqs 1 beside a pool of 55
    conversations): the most seats whose conversations all fit, in the engine's own flag
    (utilization.seats_flag). More seats can take memory (vLLM's sampler rows and graph
    sizes, TensorRT-LLM's engine buffers), so the conversations held fall as seats rise; the
    count is where the two cross, found by bisection between the seats it has and the
    conversations they leave (llama-3.1-8b on an H100 at 64 tokens: 5,558 seats, all of
    them held, not the 4,673 that one step of seats := held gave). Under data-parallel
    attention the flag is each rank's, its seats × ranks held (DeepSeek-V3 on 8 H200s, DP8,
    at 4,096 tokens with --max-num-seqs 16: 150 a rank, not the 1,128 all ranks hold).
    llama-server's slots have their own lever."""
    from ridgeline.reports.utilization import seats_flag

    if is_llamacpp(r.pool) or r.batch >= r.conversations \
            or r.batch < engine_seat_limit(r.pool, r.deployment):
        return []

    ranks = r.deployment.data_parallel_size  # the flag is each rank's, the pool every rank's

    def holds(seats: int) -> bool:
        s = replace(r.settings, max_num_seqs=seats, max_model_len=r.context)
        try:
            return held_conversations(kv_pool(r.deployment, s), r.deployment,
                                      r.context) >= seats * ranks
        except InputError:  # more seats than the engine starts with (vLLM: past its step's
            return False  # tokens, max_num_batched_tokens): that flag alone does not give them

    # the batch's seats hold
    seats = longest_holding(holds, r.pool.max_num_seqs, r.conversations // ranks)
    if seats <= r.pool.max_num_seqs:
        return []
    flag = seats_flag(r.deployment.engine).split("/")[0]
    return [(f"{flag} {seats:,}", r.deployment, r.context,
             replace(r.settings, max_num_seqs=seats))]


def state_seats_lever(r: FitReport) -> list[tuple[str, Deployment, int, EngineSettings]]:
    """TensorRT-LLM to 1.2 holds every seat's recurrent state from start-up
    (trtllm_memory.seat_state_bytes): the most seats whose conversations all fit beside
    their states (fewer seats free memory for the cache, more run more at once), found by
    bisection; none where it is no fewer than the seats the deployment has, or where one
    seat does not fit. Nemotron-H-56B fp8 on one H100 at 8,192 tokens: 2,048 seats want
    876.7 GiB, --max_batch_size 42 runs 42."""
    seats = r.pool.max_num_seqs
    best = seats_that_fit(r.deployment, replace(r.settings, max_model_len=r.context),
                          r.context, seats)
    if not best or best >= seats:
        return []
    return [(f"--max_batch_size {best:,}", r.deployment, r.context,
             replace(r.settings, max_num_seqs=best))]


def _seats_lever(r: FitReport) -> list[tuple[str, Deployment, int, EngineSettings]]:
    """TensorRT-LLM's engine backend keeps vocabulary-sized buffers for every seat: as many
    seats as the conversations that then fit (a power of two, as engines are built), where that
    is fewer than it has."""
    seats = r.pool.max_num_seqs
    want = max(r.conversations, r.target or 1, 1)
    for _ in range(4):  # fewer seats free memory for more conversations: settle the count
        fewer = 1 << (want - 1).bit_length()
        if fewer >= seats:
            return []
        s = replace(r.settings, max_num_seqs=fewer, max_model_len=r.context)
        held = held_conversations(kv_pool(r.deployment, s), r.deployment, r.context)
        if held <= fewer:
            break
        want = held
    return [(f"{fewer:,} seats (--max_batch_size {fewer})", r.deployment, r.context,
             replace(r.settings, max_num_seqs=fewer))]
