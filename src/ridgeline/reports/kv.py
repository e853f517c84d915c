"""`ridgeline kv MODEL --context N [--gpu G [--engine E]]`: cache bytes by layer kind, per
sequence, and how many fit (on a card, as its engine keeps them)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ridgeline.context_length import served_context_caution
from ridgeline.explain import Step, q, step
from ridgeline.kvcache import (
    LLAMACPP_STATE_BYTES,
    KVFootprint,
    attention_kv_bytes_per_token,
    cached_tokens,
    conversations_that_fit,
    indexer_bytes_per_token,
    kv_footprint,
    state_bytes_per_element,
    state_bytes_per_sequence,
    state_elements,
)
from ridgeline.layouts import ATTENTION_MIXERS, CHUNKED, FULL, LINEAR, MAMBA, SLIDING
from ridgeline.model import ModelSpec
from ridgeline.precision import KVDtype
from ridgeline.render import table
from ridgeline.reports.identity import IDENTITY_KEYS
from ridgeline.units import (
    GB,
    GIB,
    binary_unit,
    fmt_binary_bytes,
    fmt_decimal_bytes,
    plural,
)


@dataclass(frozen=True)
class StateDtypes:
    """The dtypes an engine keeps a model's recurrent (conv and SSM) states in, and why."""

    conv: str
    ssm: str
    rule: str  # where they come from: an engine's rule, the config, the checkpoint
    element_bytes: float | None = None  # both states at this size (llama.cpp), else by dtype

    def label(self) -> str:
        return f"SSM state {self.ssm}, conv state {self.conv}"


def served_state(spec: ModelSpec, engine: str = "vllm") -> tuple[ModelSpec, StateDtypes]:
    """The model with its recurrent states at the dtypes ``engine`` keeps them in: llama.cpp
    both in f32; TensorRT-LLM the SSM state as trtllm_memory.trtllm_ssm_dtype says
    (Nemotron-H's bf16); vLLM (its newest modelled release, as `fit` defaults to) the SSM
    state as vllm_hybrid.ssm_state_dtype says (Nemotron-H's in fp32 from v0.20: 4,194,304 × 4
    B a layer, not × 2), the conv state at the model's dtype."""
    if engine.startswith("llama.cpp"):
        return spec, StateDtypes("fp32", "fp32", "llama.cpp keeps both states in f32",
                                 LLAMACPP_STATE_BYTES)
    if engine == "sglang":
        from ridgeline.sglang_hybrid import sglang_state_dtypes, sglang_state_model

        conv, ssm = sglang_state_dtypes(spec)
        return sglang_state_model(spec), StateDtypes(
            conv, ssm, "SGLang's mamba2_state_dtype: the conv state in bf16, the SSM state in "
            "fp32 unless the config names mamba_ssm_dtype")
    from ridgeline.cost import served_state_model
    from ridgeline.vllm_memory import vllm_accounting

    if engine == "trtllm":
        served = served_state_model(spec, engine)
        return served, StateDtypes(
            served.dtype, served.state_dtype, "TensorRT-LLM's mamba_ssm_cache_dtype 'auto': "
            "the config's mamba_ssm_cache_dtype, else its torch_dtype")
    served = served_state_model(spec, "vllm")
    if served.state_dtype != spec.state_dtype:
        rule = (f"vLLM {vllm_accounting().version} keeps {spec.model_type}'s SSM state in "
                f"{served.state_dtype} (the config names no mamba_ssm_cache_dtype)")
        spec = served
    elif spec.state_dtype != spec.dtype:
        rule = "the config's mamba_ssm_cache_dtype / mamba_ssm_dtype, which vLLM keeps"
    else:
        rule = "the checkpoint's dtype, which vLLM keeps"
    return spec, StateDtypes(spec.dtype, spec.state_dtype, rule)


_STATE_RULES = {  # kvcache.state_elements, in words: (conv state, SSM state)
    LINEAR: ("(2·key_dim + value_dim)·(conv kernel − 1)", "value heads·key dim·value dim"),
    f"{MAMBA}2": ("(d_inner + 2·groups·d_state)·(conv kernel − 1)", "heads·head_dim·d_state"),
    f"{MAMBA}1": ("d_inner·(conv kernel − 1)", "d_inner·d_state"),
}


def state_step(spec: ModelSpec, dtypes: StateDtypes) -> Step | None:
    """The recurrent states of one sequence, each layer kind's elements at their dtypes."""
    conv_bytes, ssm_bytes = state_bytes_per_element(spec, dtypes.element_bytes)
    inputs, total = [], 0.0
    for kind in (LINEAR, MAMBA):
        layers = [layer for layer in spec.layers if layer.mixer == kind]
        if not layers:
            continue
        conv, ssm = state_elements(spec, layers[0])
        total += sum(state_bytes_per_sequence(spec, layer, dtypes.element_bytes)
                     for layer in layers)
        conv_rule, ssm_rule = _STATE_RULES[kind if kind == LINEAR or spec.mamba is None
                                           else f"{kind}{spec.mamba.version}"]
        inputs += [q(f"{_NAMES[kind]} layers", len(layers)),
                   q("conv elements", conv, "a layer", conv_rule),
                   q("SSM elements", ssm, "a layer", ssm_rule)]
    if not inputs:
        return None
    unit, factor = binary_unit(total)  # the unit the tables print it in (37.69 MiB)
    return step("recurrent states per sequence",
                "layers × (conv elements × conv bytes + SSM elements × SSM bytes)",
                q("states", total / factor, unit, f"{total / GB:.4g} GB"), *inputs,
                q("conv bytes", conv_bytes, "B", dtypes.conv),
                q("SSM bytes", ssm_bytes, "B", f"{dtypes.ssm}: {dtypes.rule}"))


@dataclass(frozen=True)
class LayerKindRow:
    kind: str
    layers: int
    bytes_per_token: float  # per layer-kind total, while the layer still grows
    tokens_kept: int
    bytes_at_context: float  # per sequence


@dataclass(frozen=True)
class KVReport:
    model: str
    kv_dtype: str
    context: int
    footprint: KVFootprint
    rows: tuple[LayerKindRow, ...]
    budget_bytes: float | None
    budget_label: str
    replication: float
    steps: tuple[Step, ...]
    context_caution: str = ""  # a context past the one the engine serves the model at
    bytes_per_token_now: float | None = None  # what the next token adds (windows still filling)
    state_dtypes: StateDtypes | None = None  # with linear-attention or Mamba layers
    architecture_caution: str = ""  # a model_type ridgeline has not checked
    ranks: int = 1  # data-parallel ranks, each holding its own conversations in its memory
    rank_gpus: int = 1  # the GPUs one sequence's cache is spread over (one rank's)
    # with a card, the deployment as --json names it, every answer's keys
    # (reports.roofline's served_identity: the engine None on vLLM's card where --engine was
    # not given, the checkpoint as stored); without one, those keys null but model, kv_dtype
    identity: tuple[tuple[str, Any], ...] = ()
    cache_alone: bool = False  # the budget is --memory-gib's, for the cache alone: no weights
    engine_pool_caution: str = ""  # where the engine's pool charges a token more than kept here
    # the model as counted here (its states at the engine's dtypes, every token in every window
    # layer where the engine keeps no window), so that --plot's curve is this report's at
    # every context; its states' element bytes as kv_footprint takes them
    spec: ModelSpec | None = field(default=None, repr=False, compare=False)
    state_element_bytes: float | None = field(default=None, repr=False, compare=False)

    @property
    def cautions(self) -> list[str]:
        return [c for c in (self.context_caution, self.architecture_caution,
                            self.engine_pool_caution) if c]

    @property
    def context_refused(self) -> bool:
        """A budget was named and the context is past the one engines serve the model at:
        no engine starts with it, so the count is the memory's arithmetic, not a fit."""
        return self.budget_bytes is not None and bool(self.context_caution)

    @property
    def bytes_per_sequence(self) -> float:
        return self.footprint.stored_bytes(self.replication)

    @property
    def _copies_words(self) -> str:
        return tp_copies_words(any(r.kind == MLA_LATENT for r in self.rows))

    @property
    def copied(self) -> str:
        """What tensor parallelism copies: MLA's one latent (no KV heads to copy), else the
        KV heads the ranks outnumber."""
        return "the latent's" if any(r.kind == MLA_LATENT for r in self.rows) \
            else "the KV heads'"

    @property
    def conversations(self) -> int | None:
        if self.budget_bytes is None:
            return None
        return rank_conversations(self.budget_bytes, self.bytes_per_sequence, self.ranks)

    @property
    def shortfall_bytes(self) -> float | None:
        """Where not one conversation fits: what one needs beyond the budget (beyond the
        memory itself where the weights alone overflow); 0 where one fits."""
        if self.budget_bytes is None:
            return None
        return max(0.0, self.bytes_per_sequence - self.budget_bytes) if not self.conversations \
            else 0.0

    def to_dict(self) -> dict[str, Any]:
        f = self.footprint
        return {
            **dict.fromkeys(IDENTITY_KEYS), **dict(self.identity),
            "model": self.model, "kv_dtype": self.kv_dtype, "context_len": self.context,
            "bytes_per_token": f.bytes_per_token_growing,
            "bytes_per_token_naive": f.bytes_per_token_naive,
            "windowed_bytes_per_sequence": f.windowed_bytes,
            "state_bytes_per_sequence": f.state_bytes,
            "state_dtypes": None if self.state_dtypes is None else vars(self.state_dtypes),
            "bytes_per_sequence": self.bytes_per_sequence,
            # one GPU's share, as the text gives it (a data-parallel rank's GPUs)
            "bytes_per_sequence_per_gpu": self.bytes_per_sequence / self.rank_gpus,
            "tp_replication": self.replication,
            "layer_kinds": [vars(r) for r in self.rows],
            # what the cache has left (0 when the weights alone overflow), and by how much
            # they overflow it
            "budget_bytes": None if self.budget_bytes is None else max(0.0, self.budget_bytes),
            "weights_overflow_bytes": None if self.budget_bytes is None
            else max(0.0, -self.budget_bytes),
            "budget": self.budget_label,
            "conversations": self.conversations,
            "fits": None if self.conversations is None
            else self.conversations > 0 and not self.context_refused,
            "context_refused": self.context_refused,
            "shortfall_bytes": self.shortfall_bytes,
            "bytes_per_token_now": self.bytes_per_token_now,
            "cautions": self.cautions,
        }

    def verdict(self) -> str:
        """DOES NOT FIT, where a card or --memory-gib was given: first for a context engines
        refuse (llama-3.1-8b at 200,000 tokens, past its 131,072: the count below is the
        memory's arithmetic only), then by how much the memory falls short where not one
        conversation fits (the weights alone overflowing the card, or one conversation's cache
        the memory beside them, or the budget given for the cache alone); empty where one fits
        or no budget was named."""
        if self.budget_bytes is None:
            return ""
        if self.context_refused:
            memory = self._memory_verdict()
            return (f"DOES NOT FIT: {self.context_caution}; the count below is the memory's "
                    "arithmetic only" + (memory.replace("DOES NOT FIT:", "\nnor does the "
                                                        "memory hold one:", 1)))
        return self._memory_verdict()

    def _memory_verdict(self) -> str:
        assert self.budget_bytes is not None
        if self.budget_bytes < 0:
            return (f"DOES NOT FIT: the weights alone exceed the memory by "
                    f"{-self.budget_bytes / 1e9:,.1f} GB")
        if not self.conversations:
            room = ("the budget given holds" if self.cache_alone else
                    "the memory beside the weights holds")
            return (f"DOES NOT FIT: one {self.context:,}-token conversation needs "
                    f"{self.bytes_per_sequence / 1e9:,.1f} GB, {room} "
                    f"{self.budget_bytes / 1e9:,.1f} GB: short by "
                    f"{(self.shortfall_bytes or 0.0) / 1e9:,.1f} GB")
        return ""

    def text_lines(self) -> list[str]:
        f = self.footprint
        state = f", {self.state_dtypes.label()}" if self.state_dtypes else ""
        tokens = plural(self.context, "token")
        verdict = self.verdict()  # on line 1, as fit's, decode's and roofline's
        lines = verdict.splitlines()
        lines += [f"{self.model}, {self.kv_dtype} cache{state}, {self.context:,} {tokens} of "
                  "context", ""]
        rows = [[r.kind, str(r.layers), fmt_binary_bytes(r.bytes_per_token),
                 f"{r.tokens_kept:,}" if r.kind not in ("linear attention", "Mamba") else "state",
                 fmt_binary_bytes(r.bytes_at_context)] for r in self.rows]
        lines += table(rows, ["layer kind", "layers", "per token", "tokens kept", "per sequence"])
        lines.append("")
        now = self.bytes_per_token_now
        lines.append(f"per token (growing): {fmt_binary_bytes(f.bytes_per_token_growing)}"
                     + (f" once the windows are full ({fmt_binary_bytes(now)} a token at "
                        f"{self.context:,}, its windows still filling)"
                        if now is not None and now != f.bytes_per_token_growing else "")
                     + (f"   naive all-layers figure: {fmt_binary_bytes(f.bytes_per_token_naive)}"
                        if f.bytes_per_token_naive != f.bytes_per_token_growing else ""))
        n = self.rank_gpus
        over = "a data-parallel rank's " if self.ranks > 1 else ""
        lines.append(f"per sequence at {self.context:,}: {_sequence_bytes(self.bytes_per_sequence)}"
                     + (f" over {over}{n} GPUs" if n > 1 else "")
                     + (f", incl. {self.copied} replication ×{self.replication:g}"
                        if self.replication != 1 else ""))
        if n > 1:  # the total is every GPU's share added up, copies included: say one GPU's
            lines.append(f"  {_sequence_bytes(self.bytes_per_sequence / n)} on each GPU"
                         + (f"; ×{self.replication:g}: {self._copies_words}"
                            + (" (the recurrent state shards: once)"
                               if self.footprint.state_bytes else "")
                            if self.replication != 1 else ""))
        if self.budget_bytes is not None:
            lines.append(f"budget: {self.budget_label}")
            held = " the memory holds (arithmetic only: engines refuse this context)" \
                if self.context_refused else " that fit"
            lines.append(f"conversations of {self.context:,} {tokens}{held}: "
                         f"{self.conversations:,}"
                         + (f" ({self.ranks} data-parallel ranks of "
                            f"{(self.conversations or 0) // self.ranks:,}, each in its own "
                            "memory)" if self.ranks > 1 else "")
                         + " (raw memory and each conversation's exact bytes, before any "
                         "engine's overheads or its whole blocks; `ridgeline fit` sizes an "
                         "engine's KV pool and counts its blocks)")
        said = self.context_caution if self.context_refused else ""  # on line 1 already
        return lines + [f"caution: {c}" for c in self.cautions if c != said]


_NAMES = {FULL: "full attention", SLIDING: "sliding window", CHUNKED: "chunked attention",
          LINEAR: "linear attention", MAMBA: "Mamba"}


MLA_LATENT = "MLA latent"  # the row of a model whose cache is one latent a token (DeepSeek)


def tp_copies_words(latent: bool) -> str:
    """Why the tensor-parallel ranks hold more than one copy of the cache
    (kvcache.kv_replication): an MLA latent is not split by head, so every rank keeps all of
    it; GQA's KV heads are copied only where the ranks outnumber them."""
    if latent:
        return "the MLA latent is not split by head: every tensor-parallel rank keeps all of it"
    return "KV heads copied where tensor parallelism outnumbers them"


def rank_conversations(budget_bytes: float, per_sequence_bytes: float, ranks: int) -> int:
    """Conversations a budget over ``ranks`` data-parallel ranks holds: each rank keeps its
    own in its share of the memory, ranks × floor(budget ÷ ranks ÷ bytes per sequence), so a
    conversation never spans two ranks (DeepSeek-V3 fp8 on 8 H200s at 32K: 8 × 21 = 168,
    where one pool of all of it would read 175)."""
    return ranks * conversations_that_fit(budget_bytes / ranks, per_sequence_bytes)


def kv_report(
    spec: ModelSpec, context: int, kv: KVDtype, budget_bytes: float | None = None,
    budget_label: str = "", replication: float = 1.0, engine: str = "vllm", ranks: int = 1,
    rank_gpus: int = 1,
) -> KVReport:
    """One sequence's cache by layer kind; recurrent states at the dtypes ``engine`` keeps
    them in (served_state)."""
    spec, dtypes = served_state(spec, engine)
    footprint = kv_footprint(spec, context, kv.bytes_per_element, dtypes.element_bytes)
    per_layer = attention_kv_bytes_per_token(spec, kv.bytes_per_element)
    rows = []
    for kind, name in _NAMES.items():
        layers = [layer for layer in spec.layers if layer.mixer == kind]
        if not layers:
            continue
        if kind in (LINEAR, MAMBA):
            state = sum(state_bytes_per_sequence(spec, layer, dtypes.element_bytes)
                        for layer in layers)
            rows.append(LayerKindRow(name, len(layers), 0.0, 0, state))
            continue
        kept = cached_tokens(layers[0], context)
        label = name
        if spec.attention and spec.attention.cached_latent:
            label = MLA_LATENT
        rows.append(LayerKindRow(label, len(layers), per_layer * len(layers), kept,
                                 per_layer * len(layers) * kept))
    att = spec.attention
    steps: list[Step] = []
    indexer = indexer_bytes_per_token(spec)  # a DeepSeek Sparse Attention model's keys
    if att and att.mla and att.cached_latent:
        steps.append(step("KV bytes per token per layer", "(kv_lora_rank + qk_rope_head_dim) × bytes"
                          + (" + indexer key" if indexer else ""),
                          q("per layer", per_layer, "B"),
                          q("kv_lora_rank", att.mla.kv_lora_rank, "", "config.json"),
                          q("qk_rope_head_dim", att.mla.qk_rope_head_dim, "", "config.json"),
                          q("bytes per element", kv.bytes_per_element, "B", kv.source),
                          *([q("indexer key", indexer, "B", "DeepSeek Sparse Attention's "
                               "indexer caches index_head_dim fp8 values and a float32 scale "
                               "per 128 a token, whatever the cache's dtype "
                               "(DeepseekV32IndexerCache)")] if indexer else [])))
    elif att and att.v_head_dim != att.head_dim:  # DeepSeek's heads cached whole: K 192, V 128
        steps.append(step("KV bytes per token per layer",
                          "KV heads × (K head_dim + V head_dim) × bytes",
                          q("per layer", per_layer, "B"),
                          q("KV heads", att.num_kv_heads, "", "num_key_value_heads"),
                          q("K head_dim", att.head_dim, "", "config.json"),
                          q("V head_dim", att.v_head_dim, "", "config.json"),
                          q("bytes per element", kv.bytes_per_element, "B", kv.source)))
    elif att:
        steps.append(step("KV bytes per token per layer", "2 (K,V) × KV heads × head_dim × bytes",
                          q("per layer", per_layer, "B"),
                          q("KV heads", att.num_kv_heads, "", "num_key_value_heads"),
                          q("head_dim", att.head_dim, "", "config.json"),
                          q("bytes per element", kv.bytes_per_element, "B", kv.source)))
    steps += [st for r in rows if r.bytes_per_token for st in _row_steps(r, per_layer)]
    windowed = [r for r in rows if r.bytes_per_token
                and r.kind in (_NAMES[SLIDING], _NAMES[CHUNKED])]
    states = sum(r.bytes_at_context for r in rows if not r.bytes_per_token)
    states_step = state_step(spec, dtypes)
    steps += [states_step] if states_step else []
    steps.append(step("bytes per sequence",
                      "(per layer × (full layers × context + window layers × their window)) × "
                      "TP copies + recurrent states",
                      q("per sequence", footprint.stored_bytes(replication) / GB, "GB",
                        _in_gib(footprint.stored_bytes(replication))),
                      q("per layer", per_layer, "B", "per token, the first step"),
                      q("full-attention layers", spec.count(mixer=FULL)),
                      q("context", context, "tokens"),
                      *(q(f"{r.kind} layers", r.layers, "", f"each keeps {r.tokens_kept:,} "
                          "tokens (its window, or the context if shorter)") for r in windowed),
                      q("TP copies", replication, "",
                        tp_copies_words(bool(att and att.cached_latent))),
                      q("recurrent states", states / GB, "GB", "fixed per sequence, sharded "
                        "over the ranks, not copied" + (f"; {dtypes.label()}" if states_step
                                                        else ""))))
    per_sequence = footprint.stored_bytes(replication)
    if rank_gpus > 1:  # the text's one GPU's share, copies included
        steps.append(step("per sequence on each GPU", "per sequence ÷ GPUs",
                          q("on each GPU", per_sequence / rank_gpus / GB, "GB",
                            _in_gib(per_sequence / rank_gpus)),
                          q("per sequence", per_sequence / GB, "GB", "the step above"),
                          q("GPUs", rank_gpus, "", "a data-parallel rank's" if ranks > 1
                            else "")))
    if budget_bytes is not None:
        sequence = q("bytes per sequence", per_sequence / GB, "GB", "the step above")
        if ranks == 1:
            steps.append(step("conversations that fit", "floor(budget ÷ bytes per sequence)",
                              q("conversations", conversations_that_fit(
                                  budget_bytes, per_sequence)),
                              q("budget", budget_bytes / GB, "GB", budget_label), sequence))
        else:
            steps.append(step("conversations that fit", "ranks × floor(budget ÷ ranks ÷ bytes "
                              "per sequence): each data-parallel rank holds its own",
                              q("conversations", rank_conversations(
                                  budget_bytes, per_sequence, ranks)),
                              q("ranks", ranks),
                              q("budget", budget_bytes / GB, "GB", budget_label), sequence))
    # the next token grows every layer whose cache has not yet filled its window
    now = sum(per_layer for layer in spec.layers if layer.mixer in ATTENTION_MIXERS
              and cached_tokens(layer, context + 1) > cached_tokens(layer, context))
    return KVReport(spec.name, kv.id, context, footprint, tuple(rows), budget_bytes,
                    budget_label, replication, tuple(steps),
                    served_context_caution(spec, context, engine),
                    now, dtypes if states_step else None, spec.architecture_caution, ranks,
                    rank_gpus, spec=spec, state_element_bytes=dtypes.element_bytes)


def _row_steps(r: LayerKindRow, per_layer: float) -> tuple[Step, Step]:
    """A table row's per-token and per-sequence figures, each in the binary unit the table
    prints it in: its layers' bytes a token, and those over the tokens its layers keep
    (Llama-3.1-70B's 80 full-attention layers at 4,096 B: 320 KiB a token, 9.766 GiB at
    32,000 tokens; Gemma-3-27B's 52 window layers at 64K: 416 MiB, not 0.4062 GiB)."""
    token_unit, token_factor = binary_unit(r.bytes_per_token)
    sequence_unit, sequence_factor = binary_unit(r.bytes_at_context)
    return (step(f"{r.kind}: per token", "per layer × layers",
                 q("per token", r.bytes_per_token / token_factor, token_unit),
                 q("per layer", per_layer, "B"), q("layers", r.layers)),
            step(f"{r.kind}: per sequence", "per token × tokens kept",
                 q("per sequence", r.bytes_at_context / sequence_factor, sequence_unit),
                 q("per token", r.bytes_per_token / token_factor, token_unit),
                 q("tokens kept", r.tokens_kept, "tokens", "the context, or the layers' window "
                   "where shorter")))


def _in_gib(n_bytes: float) -> str:
    """The same bytes in GiB, as the text prints them beside GB."""
    return f"{n_bytes / GIB:,.4g} GiB (÷ 2^30)"


def _sequence_bytes(n_bytes: float) -> str:
    """A sequence's cache in GB and GiB to four significant figures, at most three places
    (Llama-3.1-8B's 17.18 GB (16.00 GiB) at 131,072 tokens, 274.9 GB (256.0 GiB) at 2M, not
    274.878 beside the other lines' 274.9); below a megabyte, where three places read 0.000, in the unit
    that shows it (one token of Llama-3.1-8B: 131 kB (128 KiB))."""
    if n_bytes >= 1e6:
        return f"{_four_figures(n_bytes / GB)} GB ({_four_figures(n_bytes / GIB)} GiB)"
    return f"{fmt_decimal_bytes(n_bytes)} ({fmt_binary_bytes(n_bytes)})"


def _four_figures(value: float) -> str:
    """``value`` to four significant figures, trailing zeros kept, at most three places:
    42.95, 256.0, 0.537, 1,024."""
    places = 3 - math.floor(math.log10(value)) if value > 0 else 3
    return f"{value:,.{min(3, max(0, places))}f}"
