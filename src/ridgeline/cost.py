"""step_cost(deployment, batch): the one function every time in ridgeline comes from.

A batch is a list of sequences, each with new tokens this step and tokens already cached
(decode: 1 new; a prefill chunk: many). Each operator of each layer costs
max(FLOPs ÷ (peak × compute efficiency), bytes ÷ (bandwidth × bandwidth efficiency)),
per tensor-parallel rank; collectives cost α–β over the link; the engine adds a fixed
cost per step, per layer (a step carrying prompt tokens has its own per-layer cost) and, for
the serving engines, per weight matmul the pass launches (launches.py). On a step with prompt
tokens the routed experts' arithmetic takes the engine's MoE prompt slowdown times as long
(engines.moe_prompt_expert_slowdown: vLLM's fused MoE kernels).
With efficiencies of 1 and no overheads this is the article's floor (``floors.py``); the
engine profile turns it into an expectation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import groupby
from typing import NamedTuple

from ridgeline.attention_span import (
    Span,
    decode_keys,
    keys_read,
    layer_span,
    query_key_pairs,
    span_order,
)
from ridgeline.cpu_offload import READ_OP, offload_read_bytes, offload_read_time_s
from ridgeline.decode_context import dcp_exchange_bytes
from ridgeline.deployment import Deployment
from ridgeline.engines import MATVEC_TOKENS, EngineProfile, moe_prompt_expert_slowdown
from ridgeline.errors import InputError
from ridgeline.expert_ranks import (
    busiest_rank_physical_experts,
    busiest_rank_routed_experts,
    ep_imbalance,
    trivial_layout_imbalance,
)
from ridgeline.graph_batches import graph_tokens
from ridgeline.kvcache import (
    LLAMACPP_STATE_BYTES,
    KVFootprint,
    attention_kv_bytes_per_token,
    indexer_bytes_per_token,
    kv_footprint,
    state_bytes_per_sequence,
)
from ridgeline.launches import deployment_matmuls, moe_layers
from ridgeline.layouts import ATTENTION_MIXERS, LINEAR, MAMBA, MOE, NONE
from ridgeline.lora_collectives import LORA_COLLECTIVES, lora_collective_time_s
from ridgeline.lora_step import LORA_OP, lora_step_work
from ridgeline.model import Layer, ModelSpec
from ridgeline.moe import expected_experts_touched
from ridgeline.offload import (
    host_bandwidth_share,
    link_bytes_per_s,
    on_host,
    op_offload_min_batch,
    output_on_host,
    placed_layers,
)
from ridgeline.parallel import all_reduce_time_s, exchange_time_s, pipeline_hops, send_time_s
from ridgeline.params import layer_params
from ridgeline.quantization import (
    ATTENTION,
    EXPERT_BIAS,
    EXPERTS,
    LINEAR_ATTENTION,
    MLP,
    OTHER,
    ROUTER,
    SHARED_EXPERTS,
    SSM,
    head_category,
)
from ridgeline.roofline import decode_attention_intensity
from ridgeline.sparse_attention import (
    indexer_flops_per_pair,
    indexer_logit_bytes_per_pair,
    sparse_latents_read,
    sparse_topk,
)

ACTIVATION_BYTES = 2  # bf16/fp16 activations between kernels
NORM_BYTES = 2  # norms and biases ("other" weights) stay at bf16
# Attention without flash attention (llama.cpp's graph without -fa): per head and query-key
# pair, the f32 scores are written (4 B), read and written by the masked softmax (4 + 4) and
# read again as f16 by the P·V matmul after a conversion (4 + 2 + 2): 20 bytes.
SCORE_BYTES_PER_PAIR = 20
ELEMENTWISE_PASSES = 8  # norms, residual adds, rotary, activation: reads+writes of T×h per layer


@dataclass(frozen=True)
class Seq:
    """One sequence's work this step."""

    new_tokens: int
    context_tokens: int = 0  # already in the KV cache


def decode_batch(batch: int, context: int) -> list[Seq]:
    return [Seq(1, context)] * batch


def mean_decode_context(prompt_tokens: float, output_tokens: float) -> int:
    """The context a request's decode steps average: its prompt and half its output. A
    step's time is linear in its context, so the mean step is the step at the mean context
    (1,000 in, 250 out: 1,125 tokens)."""
    return max(1, int(prompt_tokens + output_tokens / 2))


@dataclass(frozen=True)
class OpCost:
    name: str
    flops: float
    bytes: float
    time_s: float
    bound: str  # compute | memory | link | overhead


@dataclass(frozen=True)
class StepCost:
    ops: tuple[OpCost, ...]
    tokens: int
    sequences: int

    @property
    def time_s(self) -> float:
        return sum(op.time_s for op in self.ops)

    @property
    def flops(self) -> float:
        return sum(op.flops for op in self.ops)

    @property
    def bytes(self) -> float:
        return sum(op.bytes for op in self.ops)

    def share(self, *names: str) -> float:
        """Fraction of the step's time spent in the named operators."""
        return sum(op.time_s for op in self.ops if op.name in names) / self.time_s

    @property
    def bound(self) -> str:
        by: dict[str, float] = {}
        for op in self.ops:
            by[op.bound] = by.get(op.bound, 0.0) + op.time_s
        return max(by, key=lambda k: by[k])


IDEAL = EngineProfile("floor", 1.0, 1.0, 0.0, 0.0, source="the article's floor")


class AttentionLoad(NamedTuple):
    """What a batch asks of the attention layers with one span (attention_span: None, full
    attention; a sliding window's tokens; a Chunk)."""

    window_tokens: Span
    decode_pairs: float  # query-key pairs of one-token (decode) sequences
    prefill_pairs: float  # query-key pairs of multi-token (prefill) sequences
    kv_tokens: float  # cached tokens read plus new tokens written


class BatchShape(NamedTuple):
    """A batch reduced to what its cost depends on: with data-parallel attention, the
    busiest rank's share of it, and the tokens of every rank (what the experts see)."""

    tokens: int
    sequences: int
    attention: tuple[AttentionLoad, ...]
    all_tokens: int = 0  # every data-parallel rank's tokens (0: the same as ``tokens``)
    # a speculative verify batch (1 + drafts tokens a row): every token a decode query, which
    # -dcp's exchange gathers, run as a uniform decode in the CUDA graphs (decode's overhead)
    verify: bool = False
    # data-parallel attention: some rank's tokens this step include prompt tokens, which the
    # experts, run on every rank's tokens together, see (``experts_prompt``)
    any_rank_prompt: bool = False


def batch_shape(dep: Deployment, batch: Sequence[Seq]) -> BatchShape:
    """Reduce a batch to what its cost depends on (decodes summed in bulk: the hot path).
    With data-parallel attention the batch is dealt over the ranks, one sequence each in
    turn, and the step is the first rank's, the busiest (⌈B ÷ N⌉ sequences), its experts
    on every rank's tokens, a prompt step's where any rank's are (``experts_prompt``)."""
    _check_step(batch)
    ranks = dep.data_parallel_size
    rank = batch[::ranks] if ranks > 1 else batch
    shape = rank_shape(attention_windows(dep), [s.context_tokens for s in rank if s.new_tokens == 1],
                       [s for s in rank if s.new_tokens > 1])
    if ranks == 1:
        return shape
    return shape._replace(all_tokens=sum(s.new_tokens for s in batch),
                          any_rank_prompt=any(s.new_tokens > 1 for s in batch))


def _check_step(batch: Sequence[Seq]) -> None:
    """Refuse an empty step, or a sequence of no new token or of negative cached ones."""
    if not batch:
        raise InputError("a step needs at least one sequence")
    bad = next((s for s in batch if s.new_tokens < 1 or s.context_tokens < 0), None)
    if bad is not None:
        raise InputError(f"a sequence needs ≥1 new token and ≥0 cached ones, got {bad}")


SeqRuns = tuple[tuple[Seq, int], ...]  # a batch as (sequence, how many in a row), in order


def seq_runs(batch: Sequence[Seq]) -> SeqRuns:
    """``batch`` as runs of equal sequences: a decode batch of 300 at one context is one."""
    return tuple((seq, len(list(same))) for seq, same in groupby(batch))


def runs_shape(dep: Deployment, runs: SeqRuns) -> BatchShape:
    """batch_shape of the batch ``runs`` spells, each run visited once where no data-parallel
    ranks deal its sequences apart (the same decodes and chunks, in the same order)."""
    if dep.data_parallel_size > 1:
        return batch_shape(dep, [seq for seq, count in runs for _ in range(count)])
    _check_step([seq for seq, _ in runs])
    decodes: list[int] = []
    chunks: list[Seq] = []
    for seq, count in runs:
        if seq.new_tokens == 1:
            decodes += [seq.context_tokens] * count
        else:
            chunks += [seq] * count
    return rank_shape(attention_windows(dep), decodes, chunks)


def experts_prompt(shape: BatchShape) -> bool:
    """Whether a step's routed experts are priced as a prompt step's (StepRates ``prompt``):
    its batch carries prompt tokens, or, with data-parallel attention, any rank's does. Each
    expert's grouped matmul runs every rank's tokens routed to it in one kernel (vLLM with
    --data-parallel-size and expert parallelism dispatches every DP rank's tokens over its
    DP group before the fused MoE, VLLM_ALL2ALL_BACKEND; SGLang's --enable-dp-attention
    gathers them, dp_attention.py), so one rank's prompt chunk sets the kernel every rank
    waits on: 7 ranks of decodes beside one of a 512-token chunk price their experts at
    moe_prompt_expert_slowdown too. The attention, and a graphed decode's or an eager prompt
    pass's overhead, stay each rank's own. A speculative verify batch is none (graphed)."""
    return (shape.tokens > shape.sequences or shape.any_rank_prompt) and not shape.verify


def rank_shape(windows: tuple[Span, ...], decodes: list[int], chunks: Sequence[Seq]
               ) -> BatchShape:
    """One rank's batch reduced to its shape (``batch_shape``): one-token sequences, each
    given by its cached tokens (``decodes``), and multi-token ``chunks``, under the model's
    attention ``windows`` (``attention_windows``)."""
    def keys(span: Span) -> float:  # a decode sees c + 1 keys (in its window or chunk)
        if span is None:
            return float(sum(decodes) + len(decodes))
        return float(decode_keys(decodes, span))

    return shape_of(windows, len(decodes), keys, chunks)


def decode_kv_tokens(keys: float, decodes: int) -> float:
    """KV tokens decodes touch: each reads its keys and writes its one new token."""
    return keys + decodes


def shape_of(windows: tuple[Span, ...], decodes: int,
             decode_keys: Callable[[Span], float], chunks: Sequence[Seq]) -> BatchShape:
    """A step's shape from ``decodes`` one-token sequences reading ``decode_keys(span)``
    keys in all per attention span (window or chunk), plus multi-token ``chunks``."""
    tokens = decodes + sum(s.new_tokens for s in chunks)
    loads = []
    for w in windows:
        decode_pairs = decode_keys(w)
        kv = decode_kv_tokens(decode_pairs, decodes)
        prefill_pairs = 0.0
        for s in chunks:
            prefill_pairs += query_key_pairs(s.context_tokens, s.new_tokens, w)
            kv += keys_read(s.context_tokens, s.new_tokens, w) + s.new_tokens
        loads.append(AttentionLoad(w, decode_pairs, prefill_pairs, kv))
    return BatchShape(tokens, decodes + len(chunks), tuple(loads))


@lru_cache(maxsize=256)
def attention_windows(dep: Deployment) -> tuple[Span, ...]:
    """The model's distinct attention spans (attention_span.layer_span), full attention
    (None) first, then sliding windows, then chunks. A DeepSeek Sparse Attention model adds
    its index_topk as a window: the keys its queries attend to, counted as a window's are
    (sparse_attention), beside the full span its indexer scores."""
    spans = {layer_span(layer) for layer in dep.model.layers if layer.mixer in ATTENTION_MIXERS}
    topk = sparse_topk(dep.model)
    if topk is not None:
        spans.add(topk)
    return tuple(sorted(spans, key=span_order))


@lru_cache(maxsize=256)
def layer_kinds(dep: Deployment) -> tuple[tuple[Layer, int], ...]:
    """Distinct layers and how many of each: an 80-layer Llama is one kind, 80 times."""
    counts: dict[Layer, int] = {}
    for layer in dep.model.layers:
        counts[layer] = counts.get(layer, 0) + 1
    return tuple(counts.items())


@dataclass(frozen=True)
class StepTerms:
    """A step's work, independent of any engine: (operator, FLOPs, bytes, how many times)
    per rank, the link time of its collectives, and its layer count."""

    work: tuple[tuple[str, float, float, int], ...]
    link: tuple[tuple[str, float], ...]
    layers: int
    tokens: int
    sequences: int
    matmuls: int  # the weight matmuls the pass launches (launches.deployment_matmuls)
    moe_layers: int  # the layers that route to experts (launches.moe_layers)
    # work on layers in host memory: (operator, FLOPs, bytes, count, of those bytes the ones
    # that live there: weights, a cache; what an operator run on the GPU copies over the link)
    host: tuple[tuple[str, float, float, int, float], ...] = ()
    all_tokens: int = 0  # data-parallel attention: every rank's tokens (0: ``tokens``)


def step_terms(dep: Deployment, shape: BatchShape) -> StepTerms:
    """Every operator's FLOPs and bytes for one forward pass of this shape."""
    model = dep.model
    h = model.hidden_size
    tp = dep.tensor_parallel_size
    tokens = shape.tokens
    all_tokens = shape.all_tokens or tokens
    act = tokens * h * ACTIVATION_BYTES
    loads = {a.window_tokens: a for a in shape.attention}
    work: list[tuple[str, float, float, int]] = []
    host: list[tuple[str, float, float, int, float]] = []
    link: dict[str, float] = {}
    rates = attention_rates(dep)
    topk = sparse_topk(model)
    capped = loads[topk] if topk is not None else None  # what a sparse layer attends to
    for layer, where, count in placed_layers(dep):
        ops = list(_token_ops(dep, layer, tokens, all_tokens))
        if layer.mixer in ATTENTION_MIXERS:
            load = loads[layer_span(layer)]
            ops.append(("attention", *_attention_work(dep, load, tokens, capped)))
            if capped is not None:  # the indexer scores every key the layer's queries see
                ops.append((INDEXER_OP, *indexer_work(rates, load)))
        elif layer.mixer in (LINEAR, MAMBA):
            ops.append(("recurrent state", *state_work(dep, layer, shape)))
        for name, f, b in ops:
            if not on_host(where, name):
                work.append((name, f, b, count))
            elif name == "attention":  # its queries and outputs are activations
                kv = attention_kv_bytes(rates, load, capped)
                host.append((name, f, b, count, kv))
            else:  # weights, or a recurrent state; the norms of "elementwise" are negligible
                host.append((name, f, b, count, 0.0 if name == "elementwise" else b))
        if dep.data_parallel_size > 1:
            _add_exchanges(dep, layer, count, act, all_tokens * h * ACTIVATION_BYTES, link)
        elif dep.engine_tensor_parallel_size > 1:  # 1 x MI250 under vLLM: its 2 dies
            reductions = (layer.mixer != NONE) + (layer.ffn != NONE)
            t = count * reductions * all_reduce_time_s(
                act, dep.engine_tensor_parallel_size, dep.accelerator, dep.devices_per_gpu)
            link["tp all-reduce"] = link.get("tp all-reduce", 0.0) + t
        dcp = dep.decode_context_parallel_size
        if dcp > 1 and layer.mixer in ATTENTION_MIXERS:  # queries gathered, outputs scattered:
            # a decode's one query a row (a prefill chunk gathers its cached context instead,
            # unpriced: decode_context.dcp_caution), so the rows, not the tokens; a speculative
            # verify batch's every token is a decode query
            message = dcp_exchange_bytes(dep, tokens if shape.verify else shape.sequences)
            t = count * exchange_time_s(message, dcp, dep.accelerator, dep.devices_per_gpu)
            link[DCP_EXCHANGE] = link.get(DCP_EXCHANGE, 0.0) + t
    rows = shape.sequences  # one logits row per sequence
    work.extend(lora_step_work(dep, tokens, rows))  # vLLM --enable-lora: the adapters' matmuls
    lora_link = lora_collective_time_s(dep, tokens)  # --fully-sharded-loras under TP
    if lora_link:
        link[LORA_COLLECTIVES] = lora_link
    head_reads = head_category(model.tie_word_embeddings)
    head_bytes = _category_bytes(dep, head_reads)
    # SGLang's DP attention splits the LM head over every GPU, each its share of all the
    # ranks' rows: the same FLOPs a GPU as a rank's rows over its own GPUs, fewer weights
    head = ("lm head", 2 * rows * h * model.vocab_size / tp,
            head_bytes / dep.category_ranks(head_reads) + rows * model.vocab_size * 4 / tp, 1)
    if output_on_host(dep):
        host.append((*head, head_bytes / tp))
    else:
        work.append(head)
    if dep.cpu_offload is not None:  # vLLM's --cpu-offload-gb: read over PCIe every pass
        link[CPU_OFFLOAD_READ] = offload_read_time_s(dep, all_tokens)
    if dep.pipeline_parallel_size > 1:
        local, remote = pipeline_hops(tp, dep.pipeline_parallel_size, dep.accelerator)
        link["pipeline send"] = (local * send_time_s(act, dep.accelerator)
                                 + remote * send_time_s(act, dep.accelerator, inter_node=True))
    return StepTerms(tuple(work), tuple((k, v) for k, v in link.items() if v > 0),
                     model.num_layers, tokens, rows, deployment_matmuls(dep), moe_layers(model),
                     tuple(host), all_tokens)


DP_EXCHANGE = "data-parallel exchange"  # the link operator of the ranks' gather and scatter
DCP_EXCHANGE = "dcp exchange"  # -dcp: each attention layer's query gather and output scatter


def _add_exchanges(dep: Deployment, layer: Layer, count: int, act: float, all_act: float,
                   link: dict[str, float]) -> None:
    """A layer's collectives under data-parallel attention: the mixer's all-reduce over its
    rank's TP GPUs; the FFN's over them too where each rank runs it on its own tokens, else
    (the experts; SGLang's dense MLPs) the gather of every rank's tokens and the scatter of
    the outputs over all the GPUs (``exchange_time_s``), of the whole batch's activations."""
    acc, devices = dep.accelerator, dep.devices_per_gpu
    ranks = dep.engine_tensor_parallel_size  # an MI250's dies under vLLM: a rank each
    local = (layer.mixer != NONE) * all_reduce_time_s(act, ranks, acc, devices) \
        if ranks > 1 else 0.0
    if layer.ffn == NONE:
        pass
    elif dep.gathered(EXPERTS if layer.ffn == MOE else MLP):
        t = count * exchange_time_s(all_act, dep.engine_expert_ranks, acc, devices)
        link[DP_EXCHANGE] = link.get(DP_EXCHANGE, 0.0) + t
    elif ranks > 1:
        local += all_reduce_time_s(act, ranks, acc, devices)
    if local:
        link["tp all-reduce"] = link.get("tp all-reduce", 0.0) + count * local


def step_cost(dep: Deployment, batch: Sequence[Seq], profile: EngineProfile = IDEAL,
              verify: bool = False) -> StepCost:
    """Cost of one forward pass over ``batch`` on ``dep`` as ``profile``'s engine runs it
    (``verify``: a speculative verify batch, BatchShape.verify). The terms are
    step_time_s's, remembered: the page's floor and expectation share them."""
    shape = batch_shape(dep, batch)
    if verify:
        shape = shape._replace(verify=True)
    ungraphed, priced = graph_mode(dep, shape, profile)
    terms = _remembered_terms(dep, priced)
    rate = StepRates(dep, profile, experts_prompt(shape))
    ops: dict[str, list[float]] = {}
    for name, flops, nbytes, count in terms.work:
        acc = ops.setdefault(name, [0.0, 0.0, 0.0, 0.0])
        acc[0] += flops * count
        acc[1] += nbytes * count
        compute = rate.compute_s(name, flops, _columns(terms, name))
        acc[2] += max(compute, nbytes / rate.bytes_per_s) * count
        acc[3] += compute * count
    out = [OpCost(name, f, b, t, "compute" if c * 2 > t else "memory")
           for name, (f, b, t, c) in ops.items() if t > 0]
    out += [OpCost(name, 0.0, 0.0, t, "link") if name != CPU_OFFLOAD_READ else
            OpCost(name, 0.0, offload_read_bytes(dep, terms.all_tokens), t, "host")
            for name, t in terms.link]
    host: dict[str, list[float]] = {}
    for name, flops, nbytes, count, time_s, bound in _host_ops(dep, terms, rate):
        acc = host.setdefault(f"{name} ({bound})", [0.0, 0.0, 0.0])
        acc[0] += flops * count
        acc[1] += nbytes * count
        acc[2] += time_s * count
    out += [OpCost(name, f, b, t, "host") for name, (f, b, t) in host.items()]
    overhead = profile.overhead_s(terms.layers, ungraphed, terms.matmuls, terms.moe_layers)
    if overhead > 0:
        out.append(OpCost("overhead", 0.0, 0.0, overhead, "overhead"))
    return StepCost(tuple(out), shape.tokens, terms.sequences)


def graph_mode(dep: Deployment, shape: BatchShape, profile: EngineProfile = IDEAL
               ) -> tuple[bool, BatchShape]:
    """Whether a step runs without CUDA graphs, and so pays the profile's ungraphed
    (prefill) cost per layer, and the shape its work is priced at. This is the one place a
    step's overhead mode is decided. A step with prompt tokens runs ungraphed. A decode or
    speculative verify step replays its engine's captured graph at the next captured size
    (graph_batches.graph_tokens), its padding rows priced as more tokens through the weight
    matmuls while attention keeps the real rows' loads. A step above the largest size runs
    ungraphed and unpadded. On vLLM's defaults a decode of 33 is priced as 40 rows of matmuls,
    graphed, and a decode of 600 as 600 rows, ungraphed. The floor (``IDEAL``) is no engine's:
    it pads nothing."""
    return _graph_mode(dep, shape, profile.engine == IDEAL.engine)


def _graph_mode(dep: Deployment, shape: BatchShape, floor: bool) -> tuple[bool, BatchShape]:
    """graph_mode, on whether the profile is the floor's: all it reads of one."""
    if shape.tokens > shape.sequences and not shape.verify:
        return True, shape
    if floor:
        return False, shape
    run = graph_tokens(dep, shape.tokens, shape.sequences)
    if run is None:
        return True, shape
    return False, shape._replace(tokens=run) if run > shape.tokens else shape


def shape_time_s(dep: Deployment, shape: BatchShape, profile: EngineProfile = IDEAL) -> float:
    """The time of a step of this shape: step_cost's total, without the breakdown."""
    ungraphed, terms, work, link_s = _step_plan(dep, shape, profile.engine == IDEAL.engine)
    prompt = experts_prompt(shape)
    rate = _step_rates(dep, profile, prompt, moe_prompt_expert_slowdown(profile.engine)
                       if prompt and dep.model.moe is not None else 1.0)
    total = sum(count * rate.op_time_s(name, flops, nbytes, columns)
                for name, flops, nbytes, count, columns in work)
    total += link_s
    total += sum(count * t for _, _, _, count, t, _ in _host_ops(dep, terms, rate))
    return total + profile.overhead_s(terms.layers, ungraphed, terms.matmuls, terms.moe_layers)


def _columns(terms: StepTerms, op: str) -> int:
    """The columns an operator's matmul has: the step's tokens, the LM head's rows; the
    experts', with data-parallel attention, every rank's tokens."""
    if op == "experts" and terms.all_tokens:
        return terms.all_tokens
    return terms.sequences if op == "lm head" else terms.tokens


# where a partial offload's operator runs: step_cost names it "<operator> (<where>)"
IN_HOST_MEMORY, OVER_HOST_LINK, ON_GPU = "host memory", "over the host link", "on the GPU"
# vLLM's --cpu-offload-gb: the layer weights its GPUs read from host memory each pass
CPU_OFFLOAD_READ = f"{READ_OP} ({OVER_HOST_LINK})"

# the operators that multiply by weights (what a prompt step copies over the host link)
WEIGHT_OPS = ("attention projections", "linear attention", "mamba", "router", "experts",
              "shared experts", "mlp", "lm head")


def _host_ops(dep: Deployment, terms: StepTerms, rate: StepRates, share: float | None = None,
              gpu_flops: bool = True) -> list[tuple[str, float, float, int, float, str]]:
    """(name, FLOPs, bytes, count, time, where) of the work on weights in host memory.

    Below the op-offload batch the CPU runs it, bound by the host's memory bandwidth (a
    matvec's arithmetic is no match for a CPU's cores). From it, llama.cpp's CUDA backend
    copies each host weight over the link and multiplies on the GPU, once per ubatch, and the
    operators between those matmuls run there too: attention copies the host layer's KV
    cache (a recurrent layer its state) over the link as the matmuls copy their weights, since
    ggml's scheduler copies every host-buffer input of a GPU operator. ``share`` of the rated
    host bandwidth (None: the share llama.cpp reaches; 1: the floor's); ``gpu_flops`` False
    leaves out the GPU's matmul time (the floor counts every FLOP in its compute term)."""
    if not terms.host:
        return []
    assert dep.offload is not None
    share = host_bandwidth_share() if share is None else share
    host_rate = dep.offload.host_bandwidth_bytes_per_s * share
    ops = []
    if terms.tokens < op_offload_min_batch():
        if not host_rate:
            raise InputError("a step that runs layers on the CPU needs the host memory's "
                             "bandwidth: --host-bandwidth-gbs (channels × 8 B × MT/s: 76.8 "
                             "for dual-channel DDR5-4800)")
        for name, flops, nbytes, count, _ in terms.host:
            ops.append((name, flops, nbytes, count, nbytes / host_rate, IN_HOST_MEMORY))
        return ops
    # a copy reads host memory as it crosses the link: the slower of the two paces it (the
    # host at the share of its rating it delivers, as for the CPU's own reads)
    link = min(link_bytes_per_s(dep), host_rate) if host_rate else link_bytes_per_s(dep)
    for name, flops, nbytes, count, resident in terms.host:
        if resident >= nbytes:  # a weight matmul: copied, then multiplied on the GPU
            gpu = rate.op_time_s(name, flops, nbytes, _columns(terms, name)) if gpu_flops \
                else 0.0
            ops.append((name, flops, nbytes, count, nbytes / link + gpu, OVER_HOST_LINK))
            continue
        # the scheduler keeps what follows an offloaded matmul on the GPU; a cache it reads
        # from host memory crosses the link first
        gpu = rate.op_time_s(name, flops, nbytes - resident, _columns(terms, name)) \
            if gpu_flops else 0.0
        ops.append((name, flops, nbytes - resident, count, gpu, ON_GPU))
        if resident:
            ops.append((name, 0.0, resident, count, resident / link, OVER_HOST_LINK))
    return ops


# A fit prices each row's steps under thousands of trial profiles (calibrate): a step's
# shape and its terms depend on the deployment and the batch alone, so they are remembered
# apart from the profile, and only the rates and the overhead are priced again.
@lru_cache(maxsize=4096)
def _remembered_shape(dep: Deployment, runs: SeqRuns) -> BatchShape:
    return runs_shape(dep, runs)


@lru_cache(maxsize=16384)
def _remembered_terms(dep: Deployment, shape: BatchShape) -> StepTerms:
    return step_terms(dep, shape)


@lru_cache(maxsize=16384)
def _step_plan(dep: Deployment, shape: BatchShape, floor: bool
               ) -> tuple[bool, StepTerms, tuple[tuple[str, float, float, int, int], ...], float]:
    """What shape_time_s prices whatever the profile's values: whether the step runs
    ungraphed and its terms at the shape it is priced at (graph_mode, which reads only
    whether the profile is the floor's), each operator's work with its matmul's columns, and
    its collectives' link time. A fit prices one shape under hundreds of trial profiles: this
    is done once."""
    ungraphed, priced = _graph_mode(dep, shape, floor)
    terms = _remembered_terms(dep, priced)
    work = tuple((name, flops, nbytes, count, _columns(terms, name))
                 for name, flops, nbytes, count in terms.work)
    return ungraphed, terms, work, sum(t for _, t in terms.link)


@lru_cache(maxsize=65536)
def _cached_time(dep: Deployment, runs: SeqRuns, profile: EngineProfile) -> float:
    return shape_time_s(dep, _remembered_shape(dep, runs), profile)


def step_time_s(dep: Deployment, batch: Sequence[Seq], profile: EngineProfile = IDEAL) -> float:
    """step_cost(...).time_s without building the per-operator breakdown (the fit's inner loop).
    Remembered by the batch's runs of equal sequences (``seq_runs``): a planner's decode
    batch of hundreds at one context is hashed, compared and reduced once, not once a
    sequence."""
    return _cached_time(dep, seq_runs(batch), profile)


# the weight category each weight matmul multiplies by (the LM head: the embedding when tied)
OP_CATEGORIES = {"attention projections": ATTENTION, "linear attention": LINEAR_ATTENTION,
                 "mamba": SSM, "router": ROUTER, "experts": EXPERTS,
                 "shared experts": SHARED_EXPERTS, "mlp": MLP}


@lru_cache(maxsize=4096)  # per operator of each deployment: the page asks 190,000 times
def op_compute_dtype(dep: Deployment, op: str) -> str:
    """The dtype one operator's matmuls run at: a weight matmul's category's
    (Deployment.compute_dtype_of), attention's QKᵀ and PV at its cache's, LoRA's at bf16 or
    fp16, any other at the step's compute dtype ("mlp (host memory)" is the mlp).
    nvidia/Qwen3.6-35B-A3B-NVFP4 on an H200: "attention" fp8, "experts" and "lm head" bf16."""
    base = op.split(" (")[0]
    if base == "attention":  # QKᵀ and PV multiply the cache: at its rate, not the weights'
        return dep.attention_compute_dtype
    if base == INDEXER_OP:
        return dep.indexer_compute_dtype
    if base == LORA_OP:  # punica's kernels take fp16/bf16 inputs and adapters, whatever the
        # base weights' format (lora_shrink asserts it)
        return dep.accelerator.first_supported(("bf16", "fp16"))
    category = head_category(dep.model.tie_word_embeddings) if base == "lm head" \
        else OP_CATEGORIES.get(base)
    if category and dep.bytes_by_category.get(category):
        return dep.compute_dtype_of(category)
    return dep.compute_dtype


@lru_cache(maxsize=4096)  # per operator of each deployment: the page asks 190,000 times
def op_slowdown(dep: Deployment, op: str) -> float:
    """How much slower than the step's compute dtype one operator's matmuls run, below 1
    where faster: peak at the step's dtype ÷ peak at the operator's (op_compute_dtype; 1 at
    the step's own). Qwen3.6-35B-A3B-NVFP4's fp8 attention in its bf16 step on an H200: ½."""
    if op.split(" (")[0] == "attention":  # its scores' fp32 accumulation counted in
        return dep.attention_slowdown
    dtype = op_compute_dtype(dep, op)
    if dtype == dep.compute_dtype:
        return 1.0
    return dep.peak_at(dep.compute_dtype) / dep.peak_at(dtype)


def kquant_ops(dep: Deployment) -> tuple[str, ...]:
    """The weight matmuls whose weights are K-quants (the LM head: the embedding when tied)."""
    head = head_category(dep.model.tie_word_embeddings)
    return tuple(op for op, category in (*OP_CATEGORIES.items(), ("lm head", head))
                 if dep.bytes_by_category.get(category)
                 and dep.weights.format_of(category).k_quant)


def expert_tile_waste(tokens_per_expert: float, tile_tokens: float) -> float:
    """How many times its FLOPs an expert matmul costs when each expert a step touches gets
    fewer of its tokens than the kernel's tile is wide: 16 tokens in 64-column tiles, 4×."""
    return max(1.0, tile_tokens / max(tokens_per_expert, 1e-9))


class StepRates:
    """Per-rank peak and bandwidth after the engine's efficiencies; a weight matmul that runs
    at another dtype than the step's (an fp8 one in a W4A16 step) gets its own peak, and one of
    K-quant weights, where the engine unpacks them on the vector ALUs, a floor of its
    weights × the profile's operations per weight ÷ the fp16 peak. ``prompt``: the rates of
    a step that carries prompt tokens, whose routed experts' arithmetic takes the engine's
    moe_prompt_expert_slowdown times as long."""

    def __init__(self, dep: Deployment, profile: EngineProfile, prompt: bool = False) -> None:
        acc = dep.accelerator
        peak, slowdowns, kquant = _deployment_rates(dep)
        self.flops_per_s = peak * profile.compute_for(acc)
        if dep.dequantizes:
            self.flops_per_s *= profile.dequant_compute
        self.bytes_per_s = acc.memory_bandwidth_bytes_per_s * profile.bandwidth_for(acc)
        self.op_flops_per_s = {op: self.flops_per_s / factor for op, factor in slowdowns}
        unpack = profile.kquant_ops_per_weight
        self.unpack_s_per_weight = {op: unpack / dep.peak_at("fp16")
                                    for op in kquant} if unpack else {}
        self.moe = dep.model.moe
        self.expert_tile = profile.expert_tile_tokens if self.moe is not None else 0.0
        self.expert_slowdown = moe_prompt_expert_slowdown(profile.engine) \
            if prompt and self.moe is not None else 1.0

    def flops_rate(self, op: str) -> float:
        return self.op_flops_per_s.get(op, self.flops_per_s)

    def compute_s(self, op: str, flops: float, columns: int) -> float:
        """An operator's arithmetic: its FLOPs at its rate, or, for a K-quant weight matmul
        the engine unpacks, its weights' unpacking if longer (2 FLOPs per weight per column:
        the weights one column multiplies, each unpacked once per step); the routed experts' on
        a prompt step, the engine's slowdown times it (moe_prompt_expert_slowdown)."""
        compute = flops / self.op_flops_per_s.get(op, self.flops_per_s)  # flops_rate's
        if op == "experts":
            compute *= self.expert_slowdown
            if self.moe is not None and self.expert_tile and columns > MATVEC_TOKENS:
                moe = self.moe
                touched = expected_experts_touched(moe.num_experts, moe.experts_per_token,
                                                   columns)
                compute *= expert_tile_waste(columns * moe.experts_per_token / touched,
                                             self.expert_tile)
        unpack = self.unpack_s_per_weight.get(op)
        return max(compute, flops / (2 * columns) * unpack) if unpack else compute

    def op_time_s(self, op: str, flops: float, nbytes: float, columns: int) -> float:
        """Per-rank work (the caller has already divided by the TP degree): the longer of its
        arithmetic and its memory traffic. columns: the tokens (the LM head: the rows)."""
        return max(self.compute_s(op, flops, columns), nbytes / self.bytes_per_s)


@lru_cache(maxsize=1024)
def _step_rates(dep: Deployment, profile: EngineProfile, prompt: bool,
                expert_slowdown: float) -> StepRates:
    """StepRates, built once per deployment, profile, kind of step and the experts' prompt
    slowdown it reads (moe_prompt_expert_slowdown: scripts/fit_moe_prompt_slowdown.py prices
    the rows with it set to 1, and a rate remembered from another value would be stale): the
    planner prices thousands of steps on a few hundred deployments (StepRates is read, never
    changed)."""
    return StepRates(dep, profile, prompt)


@lru_cache(maxsize=256)
def _deployment_rates(dep: Deployment) -> tuple[float, tuple[tuple[str, float], ...],
                                                tuple[str, ...]]:
    """What StepRates takes from the deployment alone, whatever the profile: the peak at the
    step's compute dtype, (operator, slowdown) for each operator whose matmuls run at another
    rate (op_slowdown), and the K-quant weight matmuls (kquant_ops)."""
    ops = (*OP_CATEGORIES, "lm head", "attention", INDEXER_OP, *((LORA_OP,) if dep.lora else ()))
    slowdowns = tuple((op, factor) for op in ops if (factor := op_slowdown(dep, op)) != 1.0)
    return dep.peak_at(dep.compute_dtype), slowdowns, kquant_ops(dep)


@lru_cache(maxsize=4096)
def _category_bytes_per_layer(dep: Deployment, layer: Layer, category: str) -> float:
    n = layer_params(dep.model, layer)[category]
    return n * dep.weights.format_of(category).bytes_per_weight


def _category_bytes(dep: Deployment, category: str) -> float:
    return dep.bytes_by_category[category]


@lru_cache(maxsize=16384)
def _token_ops(dep: Deployment, layer: Layer, tokens: int,
               all_tokens: int | None = None) -> tuple[tuple[str, float, float], ...]:
    """(name, FLOPs, bytes) per TP rank of one layer's weight matmuls and elementwise work;
    with data-parallel attention, per GPU, a category gathered over the ranks
    (``Deployment.gathered``) on ``all_tokens``, every rank's, over all their GPUs."""
    model, tp = dep.model, dep.tensor_parallel_size
    params = layer_params(model, layer)
    ops: list[tuple[str, float, float]] = []
    everyone = tokens if all_tokens is None else all_tokens

    def linear(name: str, category: str, active_fraction: float = 1.0,
               read_fraction: float = 1.0, with_category: str = "") -> None:
        n = params[category]
        if n:
            # the share one GPU holds: 1/TP, but for what the ranks keep whole (the router,
            # MLA's down-projections, K/V heads past their count), on each of an MI250's dies
            share = dep.gpu_params(layer, category, n) / n
            nbytes = _category_bytes_per_layer(dep, layer, category)
            if with_category:  # weights read alongside, with no matmul of their own
                nbytes += _category_bytes_per_layer(dep, layer, with_category)
            seen = everyone if dep.gathered(category) else tokens
            ops.append((name, 2 * seen * n * active_fraction * share,
                        nbytes * read_fraction * share))

    if layer.mixer in ATTENTION_MIXERS:
        linear("attention projections", ATTENTION)
    elif layer.mixer == LINEAR:
        linear("linear attention", LINEAR_ATTENTION)
    elif layer.mixer == MAMBA:
        linear("mamba", SSM)
    if layer.ffn == MOE and model.moe:
        moe = model.moe
        # the experts see every data-parallel rank's tokens (all of them without DP)
        touched = expected_experts_touched(moe.num_experts, moe.experts_per_token, everyone)
        linear("router", ROUTER)
        # expert parallelism: the busiest rank holds more than its share of the tokens, and
        # reads more than its share of the experts a step touches (each rank whole experts;
        # under TP + EP the MoE output is all-reduced as under TP, no all-to-all: vLLM runs
        # all-to-all kernels only with data parallelism, priced in step_terms); under EPLB
        # it also reads the replicas it holds that the step's tokens reach, (E + N) ÷ R
        # experts where every one is touched; SGLang's replicas without --enable-eplb take
        # no token, and the first ranks serve (E + N) ÷ R experts each: their share of the
        # tokens and of the reads, × (E + N) ÷ E on top of the stated skew
        ranks = dep.engine_expert_ranks  # vLLM's EP ranks are an MI250's dies
        ep = dep.expert_parallel and ranks > 1
        idle = dep.unrouted_redundant_experts
        skew = ep_imbalance(dep.eplb_balanced) if ep else 1.0  # less under EPLB's replicas
        if ep and idle:
            # at most all the tokens, R × the mean: one rank serving every expert (E + N ≥
            # E·R, Mixtral's 8 + 8 on 2 ranks) takes them all, with no skew left to state
            skew = min(ranks, skew * trivial_layout_imbalance(moe.num_experts, idle, ranks))
            busiest = busiest_rank_routed_experts(moe.num_experts, idle, ranks, touched)
        elif ep:
            busiest = busiest_rank_physical_experts(moe.num_experts,
                                                    dep.eplb_redundant_experts, ranks, touched)
        read = busiest * ranks / moe.num_experts if ep else touched / moe.num_experts
        linear("experts", EXPERTS, moe.routed_fraction * skew, read, EXPERT_BIAS)
        linear("shared experts", SHARED_EXPERTS)
    else:
        linear("mlp", MLP)
    activations = ELEMENTWISE_PASSES * tokens * model.hidden_size * ACTIVATION_BYTES
    ops.append(("elementwise", 0.0, (params[OTHER] * NORM_BYTES + activations) / tp))
    return tuple(ops)


def _attention_work(dep: Deployment, load: AttentionLoad, tokens: int,
                    capped: AttentionLoad | None = None) -> tuple[float, float]:
    """FLOPs and KV bytes of one attention layer over the batch, per TP rank.

    Each sequence's new queries attend to its cached and new keys (causal; under a window
    the last W, under chunked attention their own chunk's: attention_span); the keys they
    see are read once and the new tokens' K and V written. MLA decode uses the absorbed weights: every
    head works in the latent space. A DeepSeek Sparse Attention layer attends to ``capped``
    (index_topk keys a query) and its indexer scores all of ``load`` (sparse_attention).
    """
    return attention_flops_bytes(attention_rates(dep), load, tokens, capped)


# DeepSeek Sparse Attention's indexer: its scores of the cached keys, an operator of its own
# (vLLM runs them as DeepGEMM's fp8_mqa_logits / fp8_paged_mqa_logits before the attention)
INDEXER_OP = "indexer"


class AttentionRates(NamedTuple):
    """Per TP rank and attention layer (attention_rates)."""

    decode_flops_per_pair: float
    prefill_flops_per_pair: float
    kv_bytes_per_token: float  # read or written by the attention: K and V, or the latent
    query_bytes_per_token: float  # activations per new token: Q in, O out
    score_bytes_per_pair: float  # scores written and read back (0 with flash attention)
    # DeepSeek Sparse Attention: the indexer's FLOPs per query-key pair it scores, its
    # key's bytes per token read or written, and its logits' bytes per pair scored
    indexer_flops_per_pair: float = 0.0
    indexer_bytes_per_token: float = 0.0
    indexer_logit_bytes_per_pair: float = 0.0


def attention_flops_bytes(rates: AttentionRates, load: AttentionLoad, tokens: int,
                          capped: AttentionLoad | None = None) -> tuple[float, float]:
    """One attention layer's FLOPs and bytes under ``load``, from attention_rates; with
    ``capped`` (a DeepSeek Sparse Attention model) its queries attend to capped's pairs (the
    indexer's work is indexer_work's)."""
    attended = load if capped is None else capped
    flops = rates.decode_flops_per_pair * attended.decode_pairs \
        + rates.prefill_flops_per_pair * attended.prefill_pairs
    return flops, attention_kv_bytes(rates, load, capped) \
        + rates.query_bytes_per_token * tokens + _scores(rates, attended)


def indexer_work(rates: AttentionRates, load: AttentionLoad) -> tuple[float, float]:
    """The indexer's FLOPs and bytes in one layer: every query-key pair of the full span
    scored, 2 × H_i × d_i each (sparse_attention.indexer_flops_per_pair), every key read and
    the new ones written, and each pair's fp32 logit written and read back by the top-k
    (indexer_logit_bytes_per_pair). A decode at 65,536 cached tokens on DeepSeek-V3.2:
    65,537 × 16,384 = 1.07 GFLOP and 65,538 × 132 + 65,537 × 8 = 9.17 MB a layer."""
    pairs = load.decode_pairs + load.prefill_pairs
    return (rates.indexer_flops_per_pair * pairs,
            rates.indexer_bytes_per_token * load.kv_tokens
            + rates.indexer_logit_bytes_per_pair * pairs)


def sparse_decode_read(dep: Deployment, context: int) -> tuple[float, float, int, int]:
    """What one decode after ``context`` cached tokens reads in one attention layer of a
    DeepSeek Sparse Attention model, per TP rank, at attention_rates' rates: (FLOPs, bytes,
    latents attended, indexer keys scored). The attention over the min(c + 1, k) latents
    its indexer picks and the indexer's scores of all c + 1 keys, their fp32 logits written
    and read back; the new token's write and the query's activations aside, as
    roofline.decode_attention_intensity leaves them. DeepSeek-V3.2 at TP8, bf16 cache, 65,536
    tokens: (34,816 × 2,048 + 16,384 × 65,537) FLOPs ÷ (1,152 × 2,048 + (132 + 8) × 65,537)
    bytes = 99.3 FLOP/byte, where dense MLA's every latent gave 30.2."""
    topk = sparse_topk(dep.model)
    if topk is None:
        raise ValueError(f"{dep.model.name} has no sparse attention (index_topk)")
    rates = attention_rates(dep)
    latents = keys_read(context, 1, topk)  # min(c + 1, k), its own key among them
    keys = context + 1  # the indexer scores every cached key and the new one
    flops = rates.decode_flops_per_pair * latents + rates.indexer_flops_per_pair * keys
    nbytes = rates.kv_bytes_per_token * latents \
        + (rates.indexer_bytes_per_token + rates.indexer_logit_bytes_per_pair) * keys
    return flops, nbytes, latents, keys


def decode_attention_intensity_at(dep: Deployment, context: int) -> float:
    """Decode attention's FLOP per byte after ``context`` cached tokens: a DeepSeek Sparse
    Attention model's from sparse_decode_read (DeepSeek-V3.2 at TP8, bf16: 99.3 at 65,536),
    any other's roofline.decode_attention_intensity, the same at every context (DeepSeek-V3
    30.2)."""
    if sparse_topk(dep.model) is not None:
        flops, nbytes, _, _ = sparse_decode_read(dep, context)
        return flops / nbytes
    return decode_attention_intensity(dep.model, dep.kv.bytes_per_element,
                                      dep.engine_tensor_parallel_size)


def attention_kv_bytes(rates: AttentionRates, load: AttentionLoad,
                       capped: AttentionLoad | None = None) -> float:
    """One attention layer's cache traffic: bytes per token × the tokens read and written;
    a DeepSeek Sparse Attention layer (``capped``) reads its latents at the capped decodes
    (sparse_attention.sparse_latents_read). DeepSeek-V3.2 in bf16, a decode at 65,536
    tokens: 1,152 × 2,049 = 2.36 MB a layer (its indexer keys: indexer_work)."""
    if capped is None:
        return rates.kv_bytes_per_token * load.kv_tokens
    return rates.kv_bytes_per_token * sparse_latents_read(load.kv_tokens, load.decode_pairs,
                                                          capped.decode_pairs)


def _scores(rates: AttentionRates, load: AttentionLoad) -> float:
    """Score bytes one attention layer writes and reads back: per pair × query-key pairs."""
    return rates.score_bytes_per_pair * (load.decode_pairs + load.prefill_pairs)


@lru_cache(maxsize=256)
def attention_rates(dep: Deployment) -> AttentionRates:
    """Per TP rank and attention layer: FLOPs per decode and per prefill query-key pair,
    bytes per KV token read or written, activation bytes per new token (Q in, O out),
    bytes per query-key pair of scores written and read back (0 with flash attention), and
    a DeepSeek Sparse Attention model's indexer: FLOPs per pair, bytes per key, logit bytes
    per pair. vLLM keeps the indexer whole on every rank ('no tensor parallel, just
    replicated'), scoring the keys its cache holds: × the cache's copies ÷ TP, as the cache."""
    att = dep.model.attention
    if att is None:
        return AttentionRates(0.0, 0.0, 0.0, 0.0, 0.0)
    tp = dep.tensor_parallel_size
    copies = dep.kv_replication / tp  # of each token's cache, on one rank
    indexer_token = indexer_bytes_per_token(dep.model) * copies
    kv_token = attention_kv_bytes_per_token(dep.model, dep.kv.bytes_per_element) * copies \
        - indexer_token
    per_pair = att.num_heads * 2 * (att.head_dim + att.v_head_dim)
    decode_per_pair = per_pair
    latent = att.cached_latent  # absorbed MLA: every head reads the latent twice (K, V)
    indexer_per_pair = logit_per_pair = 0.0
    if latent:
        decode_per_pair = att.num_heads * 2 * (2 * latent.kv_lora_rank + latent.qk_rope_head_dim)
        indexer_per_pair = indexer_flops_per_pair(latent) * copies
        logit_per_pair = indexer_logit_bytes_per_pair(latent) * copies
    queries = 2 * att.num_heads * att.head_dim * ACTIVATION_BYTES
    scores = 0.0 if dep.flash_attention else att.num_heads * SCORE_BYTES_PER_PAIR
    return AttentionRates(decode_per_pair / tp, per_pair / tp, kv_token, queries / tp,
                          scores / tp, indexer_per_pair, indexer_token, logit_per_pair)


def attention_activation_bytes(dep: Deployment, tokens: int) -> float:
    """Bytes per TP rank the attention layers move besides the cache: each new token's query
    in and output out, in every attention layer (in the attention operator's bytes)."""
    layers = sum(count for layer, count in layer_kinds(dep) if layer.mixer in ATTENTION_MIXERS)
    return attention_rates(dep).query_bytes_per_token * tokens * layers


def indexer_logit_traffic_bytes(dep: Deployment, batch: Sequence[Seq]) -> float:
    """Bytes per TP rank a step's indexer logits move, activations rather than cache (in the
    indexer operator's bytes): logit bytes per pair × the pairs each sparse layer scores, over
    the attention layers; 0 for a model without an indexer. DeepSeek-V3.2, one decode at
    65,536 tokens, TP8: 8 B × 65,537 × 61 layers = 32.0 MB a rank."""
    rates = attention_rates(dep)
    if not rates.indexer_logit_bytes_per_pair:
        return 0.0
    loads = {a.window_tokens: a for a in batch_shape(dep, batch).attention}
    return sum(count * rates.indexer_logit_bytes_per_pair
               * (loads[layer_span(layer)].decode_pairs + loads[layer_span(layer)].prefill_pairs)
               for layer, count in layer_kinds(dep) if layer.mixer in ATTENTION_MIXERS)


def host_floor_s(dep: Deployment, batch: Sequence[Seq]) -> float:
    """The time a step spends moving what lives in host memory, at the rated host bandwidth
    and link: the floor's share of a partial offload (its FLOPs are in the compute term)."""
    terms = step_terms(dep, batch_shape(dep, batch))
    ops = _host_ops(dep, terms, StepRates(dep, IDEAL), 1.0, gpu_flops=False)
    return sum(count * t for *_, count, t, _ in ops) + offload_read_time_s(dep, terms.all_tokens)


def score_bytes(dep: Deployment, batch: Sequence[Seq]) -> float:
    """Bytes per TP rank the attention scores of a step write and read back: heads ×
    query-key pairs × SCORE_BYTES_PER_PAIR over every attention layer, 0 with flash attention."""
    rates = attention_rates(dep)
    if not rates.score_bytes_per_pair:
        return 0.0
    loads = {a.window_tokens: a for a in batch_shape(dep, batch).attention}
    topk = sparse_topk(dep.model)  # a sparse layer's scores: the pairs it attends to
    return sum(count * _scores(rates, loads[layer_span(layer) if topk is None else topk])
               for layer, count in layer_kinds(dep) if layer.mixer in ATTENTION_MIXERS)


@lru_cache(maxsize=64)
def served_state_model(model: ModelSpec, engine: str, engine_version: str | None = None,
                       mamba_ssm_dtype: str | None = None) -> ModelSpec:
    """The model with its SSM state at the dtype the engine keeps it in under its settings,
    by the rules its pool sizes it with: vLLM (ssm_state_dtype at ``engine_version``, default
    its newest modelled release: Nemotron-H's in fp32 from v0.20, fp16 before), SGLang
    (sglang_state_model: --mamba-ssm-dtype ``mamba_ssm_dtype`` where given, else fp32 unless
    the config names mamba_ssm_dtype) or TensorRT-LLM (trtllm_ssm_dtype: the config's
    mamba_ssm_cache_dtype, else its torch_dtype, so Qwen3.5's mamba_ssm_dtype fp32 is bf16
    there; ridgeline takes no flag for it); llama.cpp's is served_state's."""
    if engine == "sglang":
        from ridgeline.sglang_hybrid import sglang_state_model

        return sglang_state_model(model, mamba_ssm_dtype)
    if engine == "trtllm":
        from ridgeline.trtllm_memory import trtllm_ssm_dtype

        dtype = trtllm_ssm_dtype(model)
        return model if dtype == model.state_dtype else replace(model, state_dtype=dtype)
    if engine != "vllm":
        return model
    from ridgeline.vllm_hybrid import ssm_state_dtype
    from ridgeline.vllm_memory import vllm_accounting

    dtype = ssm_state_dtype(model, vllm_accounting(engine_version).version)
    return model if dtype == model.state_dtype else replace(model, state_dtype=dtype)


def served_state(dep: Deployment) -> tuple[ModelSpec, float | None]:
    """The model with its recurrent states at the dtypes the deployment's engine keeps them
    in under the settings it carries (served_state_model at ``dep.state_engine_version`` and
    ``dep.mamba_ssm_dtype``), and the one element size llama.cpp keeps both in (f32,
    LLAMACPP_STATE_BYTES; None elsewhere): what a step reads and writes, and what the fit
    line holds, as each engine's pool sizes them."""
    fixed = LLAMACPP_STATE_BYTES if dep.engine.startswith("llama.cpp") else None
    return served_state_model(dep.model, dep.engine, dep.state_engine_version,
                              dep.mamba_ssm_dtype), fixed


def served_footprint(dep: Deployment, context: int) -> KVFootprint:
    """One sequence's cache at ``context`` tokens as the deployment's engine keeps it: the
    attention cache at the KV dtype, the recurrent states as ``served_state`` says, which the
    fit line sizes a batch by and the step reads. Qwen3-Next-80B's 36 linear-attention layers
    under SGLang (conv state bf16, SSM state fp32): 36 × 2,146,304 B = 77.3 MB a sequence, not
    the 39.5 MB its bf16 config alone gives."""
    model, fixed = served_state(dep)
    return kv_footprint(model, context, dep.kv.bytes_per_element, fixed)


def state_work(dep: Deployment, layer: Layer, shape: BatchShape) -> tuple[float, float]:
    """Linear-attention / SSM recurrence: read and write each sequence's state once, at the
    dtypes the engine keeps it in, each rank its share (a single Mamba-2 group on every rank:
    kvcache.state_elements)."""
    model, fixed = served_state(dep)
    state = state_bytes_per_sequence(model, layer, fixed, dep.tensor_parallel_size)
    # 2 FLOP per state byte a token: an fp32 element's 8, a bf16 one's 4, near the 5-7 a
    # recurrence does per element (GDN: decay, Sᵀk, the k⊗v update and Sᵀq; Mamba2: decay,
    # B·x update, C·h readout; each a multiply or a multiply-add)
    flops = 2.0 * shape.tokens * state
    return flops, 2 * state * shape.sequences
