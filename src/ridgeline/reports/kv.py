"""`ridgeline kv MODEL --context N`: cache bytes by layer kind, per sequence, and how many fit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ridgeline.explain import Step, q, step
from ridgeline.kvcache import (
    KVFootprint,
    attention_kv_bytes_per_token,
    cached_tokens,
    conversations_that_fit,
    kv_footprint,
    state_bytes_per_sequence,
)
from ridgeline.layouts import ATTENTION_MIXERS, CHUNKED, FULL, LINEAR, MAMBA, SLIDING
from ridgeline.model import ModelSpec
from ridgeline.precision import KVDtype
from ridgeline.render import table
from ridgeline.units import GB, GIB, fmt_binary_bytes


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
    trained_context: int | None = None  # max_position_embeddings
    bytes_per_token_now: float | None = None  # what the next token adds (windows still filling)

    @property
    def cautions(self) -> list[str]:
        from ridgeline.model import trained_context_caution

        caution = trained_context_caution(self.model, self.trained_context, self.context)
        return [caution] if caution else []

    @property
    def bytes_per_sequence(self) -> float:
        return self.footprint.stored_bytes(self.replication)

    @property
    def conversations(self) -> int | None:
        if self.budget_bytes is None:
            return None
        return conversations_that_fit(self.budget_bytes, self.bytes_per_sequence)

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
            "model": self.model, "kv_dtype": self.kv_dtype, "context": self.context,
            "bytes_per_token": f.bytes_per_token_growing,
            "bytes_per_token_naive": f.bytes_per_token_naive,
            "windowed_bytes_per_sequence": f.windowed_bytes,
            "state_bytes_per_sequence": f.state_bytes,
            "bytes_per_sequence": self.bytes_per_sequence,
            "tp_replication": self.replication,
            "layer_kinds": [vars(r) for r in self.rows],
            # what the cache has left (0 when the weights alone overflow), and by how much
            # they overflow it
            "budget_bytes": None if self.budget_bytes is None else max(0.0, self.budget_bytes),
            "weights_overflow_bytes": None if self.budget_bytes is None
            else max(0.0, -self.budget_bytes),
            "budget": self.budget_label,
            "conversations_that_fit": self.conversations,
            "fits": None if self.conversations is None else self.conversations > 0,
            "shortfall_bytes": self.shortfall_bytes,
            "bytes_per_token_now": self.bytes_per_token_now,
            "cautions": self.cautions,
        }

    def text_lines(self) -> list[str]:
        f = self.footprint
        lines = [f"{self.model}, {self.kv_dtype} cache, {self.context:,} tokens of context", ""]
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
        lines.append(f"per sequence at {self.context:,}: {self.bytes_per_sequence / GB:,.3f} GB "
                     f"({self.bytes_per_sequence / GIB:,.3f} GiB)")
        if self.replication != 1:
            lines.append(f"  includes ×{self.replication:g} for KV replicated across "
                         "tensor-parallel ranks" + (" (the recurrent state shards: once)"
                                                    if self.footprint.state_bytes else ""))
        if self.budget_bytes is not None:
            lines.append(f"budget: {self.budget_label}")
            if self.budget_bytes < 0:
                lines.append(f"DOES NOT FIT: the weights alone exceed the memory by "
                             f"{-self.budget_bytes / 1e9:,.1f} GB")
            elif not self.conversations:
                lines.append(f"DOES NOT FIT: one {self.context:,}-token conversation needs "
                             f"{self.bytes_per_sequence / 1e9:,.1f} GB, the memory beside the "
                             f"weights holds {self.budget_bytes / 1e9:,.1f} GB: short by "
                             f"{(self.shortfall_bytes or 0.0) / 1e9:,.1f} GB")
            lines.append(f"conversations of {self.context:,} tokens that fit: "
                         f"{self.conversations:,} (raw memory, before any engine's overheads; "
                         "`ridgeline fit` sizes an engine's KV pool)")
        return lines + [f"caution: {c}" for c in self.cautions]


_NAMES = {FULL: "full attention", SLIDING: "sliding window", CHUNKED: "chunked attention",
          LINEAR: "linear attention", MAMBA: "Mamba"}


def kv_report(
    spec: ModelSpec, context: int, kv: KVDtype, budget_bytes: float | None = None,
    budget_label: str = "", replication: float = 1.0,
) -> KVReport:
    footprint = kv_footprint(spec, context, kv.bytes_per_element)
    per_layer = attention_kv_bytes_per_token(spec, kv.bytes_per_element)
    rows = []
    for kind, name in _NAMES.items():
        layers = [layer for layer in spec.layers if layer.mixer == kind]
        if not layers:
            continue
        if kind in (LINEAR, MAMBA):
            state = sum(state_bytes_per_sequence(spec, layer) for layer in layers)
            rows.append(LayerKindRow(name, len(layers), 0.0, 0, state))
            continue
        kept = cached_tokens(layers[0], context)
        label = name
        if spec.attention and spec.attention.mla:
            label = "MLA latent"
        rows.append(LayerKindRow(label, len(layers), per_layer * len(layers), kept,
                                 per_layer * len(layers) * kept))
    att = spec.attention
    steps: list[Step] = []
    if att and att.mla:
        steps.append(step("KV bytes per token per layer", "(kv_lora_rank + qk_rope_head_dim) × bytes",
                          q("per layer", per_layer, "B"),
                          q("kv_lora_rank", att.mla.kv_lora_rank, "", "config.json"),
                          q("qk_rope_head_dim", att.mla.qk_rope_head_dim, "", "config.json"),
                          q("bytes per element", kv.bytes_per_element, "B", kv.source)))
    elif att:
        steps.append(step("KV bytes per token per layer", "2 (K,V) × KV heads × head_dim × bytes",
                          q("per layer", per_layer, "B"),
                          q("KV heads", att.num_kv_heads, "", "num_key_value_heads"),
                          q("head_dim", att.head_dim, "", "config.json"),
                          q("bytes per element", kv.bytes_per_element, "B", kv.source)))
    windowed = [r for r in rows if r.bytes_per_token
                and r.kind in (_NAMES[SLIDING], _NAMES[CHUNKED])]
    states = sum(r.bytes_at_context for r in rows if not r.bytes_per_token)
    steps.append(step("bytes per sequence",
                      "(per layer × (full layers × context + window layers × their window)) × "
                      "TP copies + recurrent states",
                      q("per sequence", footprint.stored_bytes(replication) / GB, "GB"),
                      q("per layer", per_layer, "B", "per token, the step above"),
                      q("full-attention layers", spec.count(mixer=FULL)),
                      q("context", context, "tokens"),
                      *(q(f"{r.kind} layers", r.layers, "", f"each keeps {r.tokens_kept:,} "
                          "tokens (its window, or the context if shorter)") for r in windowed),
                      q("TP copies", replication, "", "KV heads (an MLA latent: all of it) "
                        "copied where tensor parallelism outnumbers them"),
                      q("recurrent states", states / GB, "GB", "fixed per sequence, sharded "
                        "over the ranks, not copied")))
    if budget_bytes is not None:
        steps.append(step("conversations that fit", "floor(budget ÷ bytes per sequence)",
                          q("conversations", conversations_that_fit(
                              budget_bytes, footprint.stored_bytes(replication))),
                          q("budget", budget_bytes / GB, "GB", budget_label)))
    # the next token grows every layer whose cache has not yet filled its window
    now = sum(per_layer for layer in spec.layers if layer.mixer in ATTENTION_MIXERS
              and cached_tokens(layer, context + 1) > cached_tokens(layer, context))
    return KVReport(spec.name, kv.id, context, footprint, tuple(rows), budget_bytes,
                    budget_label, replication, tuple(steps), spec.max_position_embeddings,
                    now)
