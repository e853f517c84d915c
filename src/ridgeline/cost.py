"""step_cost(deployment, batch): the one function every time in ridgeline comes from.

A batch is a list of sequences, each with new tokens this step and tokens already cached
(decode: 1 new; a prefill chunk: many). Each operator of each layer costs
max(FLOPs ÷ (peak × compute efficiency), bytes ÷ (bandwidth × bandwidth efficiency)),
per tensor-parallel rank; collectives cost α–β over the link; the engine adds a fixed
cost per step and per layer. With efficiencies of 1 and no overheads this is the
article's floor (``floors.py``); the engine profile turns it into an expectation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile
from ridgeline.errors import InputError
from ridgeline.kvcache import attention_kv_bytes_per_token, state_bytes_per_sequence
from ridgeline.layouts import ATTENTION_MIXERS, LINEAR, MAMBA, MOE, NONE
from ridgeline.model import Layer
from ridgeline.moe import expected_experts_touched
from ridgeline.parallel import all_reduce_time_s, all_to_all_time_s, send_time_s
from ridgeline.params import layer_params
from ridgeline.quantization import (
    ATTENTION,
    EMBEDDING,
    EXPERTS,
    LINEAR_ATTENTION,
    LM_HEAD,
    MLP,
    OTHER,
    ROUTER,
    SHARED_EXPERTS,
    SSM,
)

ACTIVATION_BYTES = 2  # bf16/fp16 activations between kernels
ELEMENTWISE_PASSES = 8  # norms, residual adds, rotary, activation: reads+writes of T×h per layer


@dataclass(frozen=True)
class Seq:
    """One sequence's work this step."""

    new_tokens: int
    context_tokens: int = 0  # already in the KV cache


def decode_batch(batch: int, context: int) -> list[Seq]:
    return [Seq(1, context)] * batch


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


@dataclass(frozen=True)
class StepTerms:
    """A step's work, independent of any engine: (operator, FLOPs, bytes, how many times)
    per rank, the link time of its collectives, and its layer count."""

    work: tuple[tuple[str, float, float, int], ...]
    link: tuple[tuple[str, float], ...]
    layers: int
    tokens: int
    sequences: int


@lru_cache(maxsize=65536)
def step_terms(dep: Deployment, batch: tuple[Seq, ...]) -> StepTerms:
    """Every operator's FLOPs and bytes for one forward pass over ``batch``."""
    if not batch:
        raise InputError("a step needs at least one sequence")
    for s in batch:
        if s.new_tokens < 1 or s.context_tokens < 0:
            raise InputError(f"a sequence needs ≥1 new token and ≥0 cached ones, got {s}")
    tokens = sum(s.new_tokens for s in batch)
    work: dict[tuple[str, float, float], int] = {}
    link: dict[str, float] = {}

    def add(name: str, flops: float, nbytes: float) -> None:
        key = (name, flops, nbytes)
        work[key] = work.get(key, 0) + 1

    def add_link(name: str, time_s: float) -> None:
        if time_s > 0:
            link[name] = link.get(name, 0.0) + time_s

    model = dep.model
    h = model.hidden_size
    tp = dep.tensor_parallel_size
    act = tokens * h * ACTIVATION_BYTES
    for layer in model.layers:
        for name, flops, nbytes in _layer_ops(dep, layer, batch, tokens):
            add(name, flops, nbytes)
        add("elementwise", 0.0, ELEMENTWISE_PASSES * act / tp)
        if tp > 1:
            reductions = (layer.mixer != NONE) + (layer.ffn != NONE)
            add_link("tp all-reduce", reductions * all_reduce_time_s(act, tp, dep.accelerator))
        if layer.ffn == MOE and dep.expert_parallel and tp > 1 and model.moe:
            dispatch = tokens * model.moe.experts_per_token * h * ACTIVATION_BYTES
            add_link("ep all-to-all", 2 * all_to_all_time_s(dispatch, tp, dep.accelerator))
    rows = len(batch)  # one logits row per sequence
    head_bytes = _category_bytes(dep, LM_HEAD if not model.tie_word_embeddings else EMBEDDING)
    add("lm head", 2 * rows * h * model.vocab_size / tp,
        head_bytes / tp + rows * model.vocab_size * 4 / tp)
    if dep.pipeline_parallel_size > 1:
        hops = dep.pipeline_parallel_size - 1
        add_link("pipeline send", hops * send_time_s(act, dep.accelerator))
    return StepTerms(tuple((n, f, b, c) for (n, f, b), c in work.items()),
                     tuple(link.items()), model.num_layers, tokens, rows)


def step_cost(dep: Deployment, batch: Sequence[Seq], profile: EngineProfile = IDEAL) -> StepCost:
    """Cost of one forward pass over ``batch`` on ``dep`` as ``profile``'s engine runs it."""
    terms = step_terms(dep, tuple(batch))
    rate = _Rates(dep, profile)
    ops: dict[str, list[float]] = {}
    for name, flops, nbytes, count in terms.work:
        acc = ops.setdefault(name, [0.0, 0.0, 0.0, 0.0])
        acc[0] += flops * count
        acc[1] += nbytes * count
        compute, memory = flops / rate.flops_per_s, nbytes / rate.bytes_per_s
        acc[2] += max(compute, memory) * count
        acc[3] += compute * count
    out = [OpCost(name, f, b, t, "compute" if c * 2 > t else "memory")
           for name, (f, b, t, c) in ops.items() if t > 0]
    out += [OpCost(name, 0.0, 0.0, t, "link") for name, t in terms.link]
    overhead = profile.step_overhead_s + profile.layer_overhead_s * terms.layers
    if overhead > 0:
        out.append(OpCost("overhead", 0.0, 0.0, overhead, "overhead"))
    return StepCost(tuple(out), terms.tokens, terms.sequences)


def step_time_s(dep: Deployment, batch: Sequence[Seq], profile: EngineProfile = IDEAL) -> float:
    """step_cost(...).time_s without building the per-operator breakdown (the fit's inner loop)."""
    terms = step_terms(dep, tuple(batch))
    rate = _Rates(dep, profile)
    p, w = rate.flops_per_s, rate.bytes_per_s
    total = sum(count * max(flops / p, nbytes / w) for _, flops, nbytes, count in terms.work)
    total += sum(t for _, t in terms.link)
    return total + profile.step_overhead_s + profile.layer_overhead_s * terms.layers


class _Rates:
    """Per-rank peak and bandwidth after the engine's efficiencies."""

    def __init__(self, dep: Deployment, profile: EngineProfile) -> None:
        acc = dep.accelerator
        self.flops_per_s = acc.peak(dep.compute_dtype) * profile.compute_for(acc)
        self.bytes_per_s = acc.memory_bandwidth_bytes_per_s * profile.bandwidth_for(acc)

    def time(self, flops: float, nbytes: float) -> float:
        """Per-rank work: the caller has already divided by the TP degree."""
        return max(flops / self.flops_per_s, nbytes / self.bytes_per_s)



@lru_cache(maxsize=4096)
def _category_bytes_per_layer(dep: Deployment, layer: Layer, category: str) -> float:
    n = layer_params(dep.model, layer)[category]
    return n * dep.weights.format_of(category).bytes_per_weight


def _category_bytes(dep: Deployment, category: str) -> float:
    return dep.bytes_by_category[category]


def _layer_ops(
    dep: Deployment, layer: Layer, batch: Sequence[Seq], tokens: int
) -> list[tuple[str, float, float]]:
    """(name, FLOPs, bytes) per TP rank for one layer."""
    model, tp = dep.model, dep.tensor_parallel_size
    params = layer_params(model, layer)
    ops: list[tuple[str, float, float]] = []

    def linear(name: str, category: str, active_fraction: float = 1.0,
               read_fraction: float = 1.0) -> None:
        n = params[category]
        if n:
            ops.append((name, 2 * tokens * n * active_fraction / tp,
                        _category_bytes_per_layer(dep, layer, category) * read_fraction / tp))

    if layer.mixer in ATTENTION_MIXERS:
        linear("attention projections", ATTENTION)
        ops.append(("attention", *_attention_work(dep, layer, batch)))
    elif layer.mixer == LINEAR:
        linear("linear attention", LINEAR_ATTENTION)
        ops.append(("recurrent state", *_state_work(dep, layer, batch)))
    elif layer.mixer == MAMBA:
        linear("mamba", SSM)
        ops.append(("recurrent state", *_state_work(dep, layer, batch)))
    if layer.ffn == MOE and model.moe:
        moe = model.moe
        touched = expected_experts_touched(moe.num_experts, moe.experts_per_token, tokens)
        linear("router", ROUTER)
        linear("experts", EXPERTS, moe.routed_fraction, touched / moe.num_experts)
        linear("shared experts", SHARED_EXPERTS)
    else:
        linear("mlp", MLP)
    small = params[OTHER] * 2  # norms and biases, bf16
    if small:
        ops.append(("elementwise", 0.0, small / tp))
    return ops


def _attention_work(dep: Deployment, layer: Layer, batch: Sequence[Seq]) -> tuple[float, float]:
    """FLOPs and KV bytes of one attention layer over the batch, per TP rank.

    Each sequence's n new queries attend to its cached and new keys (causal, capped at
    the window); its cache is read once and the new tokens' K and V written.
    """
    att = dep.model.attention
    if att is None:
        return 0.0, 0.0
    kv_token = attention_kv_bytes_per_token(dep.model, dep.kv.bytes_per_element)
    kv_token *= dep.kv_replication / dep.tensor_parallel_size
    window = layer.window_tokens
    flops = kv_bytes = 0.0
    for s in batch:
        n, c = s.new_tokens, s.context_tokens
        pairs = _pairs(c, n, window)
        if att.mla and n == 1:  # decode reads the latent: absorbed weights
            per_pair = att.num_heads * 2 * (2 * att.mla.kv_lora_rank + att.mla.qk_rope_head_dim)
        else:
            per_pair = att.num_heads * 2 * (att.head_dim + att.v_head_dim)
        flops += per_pair * pairs
        read = min(c + n, window) if window else c + n
        kv_bytes += kv_token * (read + n)
        kv_bytes += 2 * n * att.num_heads * att.head_dim * ACTIVATION_BYTES / dep.num_gpus
    return flops / dep.tensor_parallel_size, kv_bytes


def _pairs(cached: int, new: int, window: int | None) -> float:
    """Query-key pairs when ``new`` queries follow ``cached`` keys, causal, window-capped."""
    if window is None:
        return new * cached + new * (new + 1) / 2
    total = 0.0
    # keys seen by query i (1-based): min(cached + i, window)
    free = max(0, min(new, window - cached))  # queries before the window fills
    total += free * cached + free * (free + 1) / 2
    total += (new - free) * window
    return total


def _state_work(dep: Deployment, layer: Layer, batch: Sequence[Seq]) -> tuple[float, float]:
    """Linear-attention / SSM recurrence: read and write each sequence's state once."""
    state = state_bytes_per_sequence(dep.model, layer) / dep.tensor_parallel_size
    tokens = sum(s.new_tokens for s in batch)
    flops = 4.0 * tokens * state / 2  # a multiply-add per state element per token (bf16 view)
    return flops, 2 * state * len(batch)
