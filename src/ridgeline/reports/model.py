"""`ridgeline model MODEL`: layers by kind, attention geometry, experts, parameters, bytes."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ridgeline.catalog import ModelEntry, card_params, model_entries
from ridgeline.ds_mla_cache import vllm_stored_cache
from ridgeline.explain import Step, q, step
from ridgeline.kvcache import (
    KVFootprint,
    attention_kv_bytes_per_token,
    indexer_key_bytes,
    kv_footprint,
)
from ridgeline.layouts import ATTENTION_MIXERS, CHUNKED, NONE, WINDOW_MIXERS
from ridgeline.model import ModelSpec
from ridgeline.params import ParamCount, count_params
from ridgeline.precision import (
    WeightPlan,
    kv_dtype,
    weight_bytes,
    weight_bytes_at,
    weight_bytes_by_category,
    weight_plan,
)
from ridgeline.quantization import ROUTED
from ridgeline.render import table
from ridgeline.reports.kv import StateDtypes, served_state, state_step
from ridgeline.units import GB, fmt_binary_bytes, fmt_count, plural

COMMON_FORMATS = ("bf16", "fp8", "int8", "awq-int4", "nvfp4", "mxfp4", "q8_0", "q4_k_m")
BYTES_PER_PARAM = (2.0, 1.0, 0.5)


@dataclass(frozen=True)
class ModelReport:
    spec: ModelSpec
    params: ParamCount
    entry: ModelEntry | None
    weight_gb: dict[str, float]  # format label -> GB
    kv_bf16: KVFootprint
    kv_fp8: KVFootprint
    steps: tuple[Step, ...]
    # the windowed layers' cache of one sequence once every window is full (bf16): the most
    # they ever hold, however long the context (0: no windowed layers)
    windowed_full_bf16: float = 0.0
    state_dtypes: StateDtypes | None = None  # with linear-attention or Mamba layers
    # the format vLLM keeps an fp8 cache in: fp8, or a DeepSeek Sparse Attention model's
    # fp8_ds_mla records (ds_mla_cache.vllm_stored_cache: DeepSeek-V3.2's 656 + 132 bytes)
    kv_fp8_id: str = "fp8"

    def to_dict(self) -> dict[str, Any]:
        s, att, moe = self.spec, self.spec.attention, self.spec.moe
        return {
            "model": s.name,
            "hf_id": self.entry.hf_id if self.entry else None,
            "architecture": s.architecture,
            "num_layers": s.num_layers,
            # a parallel hybrid's (Falcon-H1's) num_hidden_layers; num_layers counts its blocks
            **({"decoder_layers": s.decoder_layers} if s.parallel_hybrid else {}),
            "layers_by_mixer": dict(Counter(layer.mixer for layer in s.layers)),
            "layers_by_ffn": dict(Counter(layer.ffn for layer in s.layers)),
            "hidden_size": s.hidden_size,
            "vocab_size": s.vocab_size,
            "attention": None if att is None else {
                "kind": att.kind, "num_heads": att.num_heads, "num_kv_heads": att.num_kv_heads,
                "group_size": att.group_size, "head_dim": att.head_dim,
                "v_head_dim": att.v_head_dim,
                "mla": None if att.mla is None else vars(att.mla),
            },
            # Llama 4's attention_chunk_size is no sliding window: a query sees its own chunk
            "sliding_window_tokens": sorted({
                layer.window_tokens for layer in s.layers
                if layer.window_tokens and layer.mixer != CHUNKED
            }),
            "attention_chunk_tokens": sorted({
                layer.window_tokens for layer in s.layers
                if layer.window_tokens and layer.mixer == CHUNKED
            }),
            "linear_attention": vars(s.linear_attention) if s.linear_attention else None,
            "mamba": vars(s.mamba) if s.mamba else None,
            "moe": None if moe is None else {
                "routed_experts": moe.num_experts, "experts_per_token": moe.experts_per_token,
                "shared_experts": moe.num_shared_experts,
                "expert_intermediate_size": moe.expert_intermediate_size,
                "routed_fraction": moe.routed_fraction,
            },
            "params_total": self.params.total,
            "params_active": self.params.active,
            "params_active_without_embedding": self.params.active - self.params.embedding,
            "params_by_category": {k: v for k, v in self.params.by_category.items() if v},
            # the model card's figures as counts, and as the card writes them ("72.7B")
            "card_total_params": card_params(self.entry.card_total_params)
            if self.entry else None,
            "card_total_params_label": self.entry.card_total_params if self.entry else None,
            "card_active_params": card_params(self.entry.card_active_params)
            if self.entry else None,
            "card_active_params_label": self.entry.card_active_params if self.entry else None,
            "stored_formats": {c: f for c, f in s.stored_format_map.items()
                               if self.params.by_category.get(c)},  # categories it has
            "checkpoint_dtype": s.dtype,  # of the tensors the stored formats leave as they are
            # {category: layer indices} its exclusions keep at that dtype within a category
            # the stored formats quantize (DeepSeek-style dense first layers left in bf16)
            "unquantized_layers": {c: list(layers) for c, layers in s.unquantized_layers},
            # where the quantization_config came from, where not config.json's own
            "quantization_file": s.quantization_file or None,
            # {engine: KV dtype} its --kv-cache-dtype auto serves, as the checkpoint asks
            "checkpoint_kv_cache_dtypes": dict(s.engine_kv_cache_dtypes),
            # per weight format, in bytes as every other size in --json (the text's GB × 1e9)
            "weight_bytes": {label: gb * GB for label, gb in self.weight_gb.items()},
            "kv_bytes_per_token_bf16": self.kv_bf16.bytes_per_token_growing,
            "kv_bytes_per_token_bf16_naive": self.kv_bf16.bytes_per_token_naive,
            "kv_bytes_per_token_fp8": self.kv_fp8.bytes_per_token_growing,
            # the recurrent states at the dtypes vLLM keeps them in (not bf16 for Nemotron-H)
            "kv_constant_bytes_per_sequence_bf16": self.kv_bf16.state_bytes,
            "state_dtypes": None if self.state_dtypes is None else vars(self.state_dtypes),
            "kv_windowed_bytes_per_sequence_max_bf16": self.windowed_full_bf16,
            "mtp_layers_not_counted": s.mtp_layers,
            "vision_params_not_counted": s.vision_params,
            "max_position_embeddings": s.max_position_embeddings,
            "cautions": [s.architecture_caution] if s.architecture_caution else [],
            "notes": [s.unfilled_window_note] if s.unfilled_window_note else [],
        }

    def text_lines(self) -> list[str]:
        s, p = self.spec, self.params
        title = s.name + (f" ({self.entry.hf_id})" if self.entry else "")
        named = s.architecture or "not named (no architectures or model_type in the config)"
        depth = (f"{s.decoder_layers} layers of attention beside Mamba-2 ({s.num_layers} "
                 "blocks)" if s.parallel_hybrid else f"{s.num_layers} layers")
        lines = [title, f"  architecture   {named}, {depth}, "
                 f"hidden {s.hidden_size}, vocab {s.vocab_size:,}"]
        mixers = Counter(layer.mixer for layer in s.layers)
        ffns = Counter(layer.ffn for layer in s.layers)
        lines.append("  layers         " + ", ".join(_kind_label(k, n, s) for k, n in mixers.items())
                     + " | ffn: " + ", ".join(f"{n} {k}" for k, n in ffns.items()))
        att = s.attention
        if att:
            geometry = (f"{att.kind}: {att.num_heads} query heads, {att.num_kv_heads} KV heads "
                        f"(group {att.group_size}), head_dim {att.head_dim}")
            if att.mla:
                m = att.mla
                geometry = (f"MLA: {att.num_heads} heads, kv_lora_rank {m.kv_lora_rank}, "
                            f"qk_rope_head_dim {m.qk_rope_head_dim}, qk_nope_head_dim "
                            f"{m.qk_nope_head_dim}, v_head_dim {m.v_head_dim}, q_lora_rank "
                            f"{m.q_lora_rank}"
                            + ("" if m.latent_cached else "; each head's K and V cached, as "
                               "llama.cpp runs a GGUF without key_length_mla")
                            + (f"; sparse: index_topk {m.index_topk} keys a query, picked by "
                               f"an indexer of {m.index_n_heads} heads × {m.index_head_dim}"
                               if m.index_topk is not None else ""))
            lines.append(f"  attention      {geometry}")
        if s.linear_attention:
            la = s.linear_attention
            lines.append(f"  linear attn    Gated DeltaNet: {la.num_key_heads} key / "
                         f"{la.num_value_heads} value heads, dims {la.key_head_dim}/"
                         f"{la.value_head_dim}")
        if s.mamba:
            m2 = s.mamba
            lines.append(f"  mamba          Mamba-{m2.version}: d_inner {m2.d_inner}, d_state "
                         f"{m2.d_state}, conv {m2.conv_kernel}")
        if s.moe:
            moe = s.moe
            lines.append(f"  experts        {moe.num_experts} routed, {moe.experts_per_token} per "
                         f"token (k/E = {moe.routed_fraction:.4f}), {moe.num_shared_experts} "
                         f"shared, expert width {moe.expert_intermediate_size}")
        card = ""
        if self.entry:
            card = f"   (card: {self.entry.card_total_params}"
            card += f", {self.entry.card_active_params} active)" if self.entry.card_active_params \
                else ")"
        lines.append(f"  parameters     {fmt_count(p.total)} total ({p.total:,}), "
                     f"{fmt_count(p.active)} active{card}")
        if s.moe:
            lines.append(f"                 {fmt_count(p.active - p.embedding)} active without the "
                         "input embedding (a lookup, not a matmul)")
        if s.mtp_layers:
            lines.append(f"                 {s.mtp_layers} multi-token-prediction layer(s) shipped "
                         "beside the model are not counted")
        if s.vision_params:
            lines.append(f"                 a {fmt_count(s.vision_params)} vision tower is not "
                         f"counted: never read by a text token, though a serving engine loads it "
                         f"({s.vision_tower_bytes / 1e9:,.2f} GB at 16 bits; `fit` adds it)")
        kept = dict(s.unquantized_layers)
        stored = ", ".join(f"{c} {f}" + (f" ({_layer_list(kept[c])} in {s.dtype})"
                                          if c in kept else "")
                           for c, f in s.stored_format_map.items()
                           if p.by_category.get(c)) or s.dtype
        lines.append(f"  stored as      {stored}")
        if s.quantization_file:
            lines.append(f"                 read from ModelOpt's {s.quantization_file} (config.json "
                         "has no quantization_config)")
        if s.engine_kv_cache_dtypes:
            lines.append(f"  checkpoint KV  {_checkpoint_kv_label(s.engine_kv_cache_dtypes)}")
        places = size_places(self.weight_gb.values())
        rows = [[label, f"{gb:,.{places}f} GB"] for label, gb in self.weight_gb.items()]
        lines += ["", *("  " + r for r in table(rows, ["weights in", "size"]))]
        kv, kv8 = self.kv_bf16, self.kv_fp8
        lines.append("")
        lines.append(f"  KV per token   {fmt_binary_bytes(kv.bytes_per_token_growing)} bf16, "
                     f"{fmt_binary_bytes(kv8.bytes_per_token_growing)} fp8 (full-attention layers"
                     + ("" if self.kv_fp8_id == "fp8" else
                        f"; vLLM keeps an fp8 cache as {self.kv_fp8_id} records")
                     + ")")
        kind, span = _span_words(s)
        if kv.bytes_per_token_naive != kv.bytes_per_token_growing:
            lines.append(f"                 naive all-layers figure: "
                         f"{fmt_binary_bytes(kv.bytes_per_token_naive)} bf16; {kind} layers "
                         f"stop growing at their {span}")
        if self.windowed_full_bf16:
            windowed = [layer for layer in s.layers if layer.mixer in WINDOW_MIXERS]
            lines.append(f"  {'chunked' if kind == 'chunked' else 'windowed':<15}at most "
                         f"{fmt_binary_bytes(self.windowed_full_bf16)} bf16 per sequence, once "
                         f"its {len(windowed)} {kind} {plural(len(windowed), 'layer')} hold "
                         f"their {span}s")
        if kv.state_bytes:
            dtypes = f"; {self.state_dtypes.label()}" if self.state_dtypes else ""
            lines.append(f"  state per seq  {fmt_binary_bytes(kv.state_bytes)} constant "
                         f"(linear-attention / SSM layers{dtypes})")
        if s.unfilled_window_note:
            lines.append(f"note: {s.unfilled_window_note}")
        if s.architecture_caution:
            lines.append(f"caution: {s.architecture_caution}")
        return lines


def _checkpoint_kv_label(found: tuple[tuple[str, str], ...]) -> str:
    """'fp8 under vllm, sglang and trtllm --kv-cache-dtype auto': the cache each engine's
    default serves, as the checkpoint's quantization_config asks (checkpoint_kv.py)."""
    by_dtype: dict[str, list[str]] = {}
    for engine, kv in found:
        by_dtype.setdefault(kv, []).append(engine)
    return "; ".join(f"{kv} under {_and(engines)} --kv-cache-dtype auto"
                     for kv, engines in by_dtype.items())


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _span_words(spec: ModelSpec) -> tuple[str, str]:
    """What the model's windowed layers are called and what each holds at most: ("windowed",
    "window"), Llama 4's ("chunked", "chunk"), a query there seeing its own chunk of 8,192
    tokens, no sliding window; a model with both kinds ("windowed or chunked", "window or
    chunk")."""
    kinds = {layer.mixer for layer in spec.layers if layer.mixer in WINDOW_MIXERS}
    if kinds == {CHUNKED}:
        return "chunked", "chunk"
    return ("windowed or chunked", "window or chunk") if CHUNKED in kinds else ("windowed",
                                                                               "window")


def _kind_label(kind: str, n: int, spec: ModelSpec) -> str:
    windows = sorted({layer.window_tokens for layer in spec.layers
                      if layer.mixer == kind and layer.window_tokens})
    word = "chunk" if kind == CHUNKED else "window"  # a chunk is no sliding window
    suffix = f" ({word} {', '.join(str(w) for w in windows)})" if windows else ""
    names = {"full": "full attention", "sliding": "sliding-window", "chunked": "chunked attention",
             "linear": "linear attention", "mamba": "Mamba", "none": "MLP-only"}
    return f"{n} {names.get(kind, kind)}{suffix}"


def model_report(spec: ModelSpec) -> ModelReport:
    params = count_params(spec)
    entry = next((e for e in model_entries() if e.id == spec.name), None)
    weight_gb: dict[str, float] = {}
    plans = {"as stored": weight_plan(spec)} if spec.stored_formats else {}
    plans.update({fmt: weight_plan(spec, fmt) for fmt in COMMON_FORMATS})
    for label, plan in plans.items():
        weight_gb[label] = weight_bytes(spec, plan) / GB
    at = {bpp: weight_bytes_at(params.total, bpp) for bpp in BYTES_PER_PARAM}
    for bpp, nbytes in at.items():
        weight_gb[f"{bpp:g} B/param (all)"] = nbytes / GB
    served, dtypes = served_state(spec)  # the states as vLLM keeps them (kv's rule)
    kv_bf16 = kv_footprint(served, 1, kv_dtype("bf16").bytes_per_element)
    fp8 = vllm_stored_cache(kv_dtype("fp8"), spec)  # DeepSeek-V3.2's: fp8_ds_mla
    kv_fp8 = kv_footprint(served, 1, fp8.bytes_per_element)
    longest = max((layer.window_tokens or 0 for layer in spec.layers
                   if layer.mixer in WINDOW_MIXERS), default=0)
    windowed = kv_footprint(spec, longest, kv_dtype("bf16").bytes_per_element).windowed_bytes \
        if longest else 0.0
    categories = [q(c, n, "params", "config.json") for c, n in
                  params.by_category.items() if n]
    steps = [step("total parameters", "Σ over categories (embedding, attention, MLP, experts, …)",
                  q("total", params.total / 1e9, "B params"), *categories)]
    steps += [_format_step(spec, label, plan) for label, plan in plans.items()]
    for bpp, nbytes in at.items():
        steps.append(step(f"weights at {bpp:g} B/param", "total parameters × bytes per parameter",
                          q("weights", nbytes / GB, "GB"),
                          q("total", params.total / 1e9, "B params"),
                          q("bytes per parameter", bpp, "B", "the article's round formats")))
    if spec.moe:
        routed = sum(params.by_category.get(c, 0) for c in ROUTED)
        # whole counts: in billions to four figures the difference misreads (DeepSeek-V3:
        # 671 − 653.9 × 0.96875 = 37.53, against the 37.55 the counts give)
        steps.append(step("active parameters", "total − routed experts × (1 − k/E)",
                          q("active", params.active, "params"),
                          q("total", params.total, "params"),
                          q("routed experts", routed, "params", "their weights (and biases)"),
                          q("k/E", spec.moe.routed_fraction, "", "num_experts_per_tok / experts")))
    att = spec.attention
    for name, kv in (("bf16", kv_bf16), (fp8.id, kv_fp8)):  # the two the output prints
        element = q("bytes per element", kv_dtype(name).bytes_per_element, "B", name)
        if att and not att.cached_latent and att.v_head_dim != att.head_dim:
            # DeepSeek's heads cached whole (a GGUF without key_length_mla): K 192, V 128
            steps.append(step(f"KV bytes per token ({name})",
                              "KV heads × (K head_dim + V head_dim) × full layers × bytes",
                              q("KV per token", kv.bytes_per_token_growing, "B"),
                              q("KV heads", att.num_kv_heads, "", "num_key_value_heads"),
                              q("K head_dim", att.head_dim, "", "config.json"),
                              q("V head_dim", att.v_head_dim, "", "config.json"),
                              q("full-attention layers", spec.count(mixer="full")), element))
        elif att and not att.cached_latent:
            steps.append(step(f"KV bytes per token ({name})",
                              "2 (K,V) × KV heads × head_dim × full layers × bytes",
                              q("KV per token", kv.bytes_per_token_growing, "B"),
                              q("KV heads", att.num_kv_heads, "", "num_key_value_heads"),
                              q("head_dim", att.head_dim, "", "head_dim or hidden/heads"),
                              q("full-attention layers", spec.count(mixer="full")), element))
        elif att and att.mla:
            mla = att.mla
            indexer = indexer_key_bytes(mla.index_head_dim) \
                if mla.index_topk is not None and mla.index_head_dim else 0
            steps.append(step(f"KV bytes per token ({name})",
                              "(kv_lora_rank + qk_rope_head_dim) × layers × bytes"
                              + (" + indexer key × layers" if indexer else ""),
                              q("KV per token", kv.bytes_per_token_growing, "B"),
                              q("kv_lora_rank", mla.kv_lora_rank, "", "config.json"),
                              q("qk_rope_head_dim", mla.qk_rope_head_dim, "", "config.json"),
                              *([q("indexer key", indexer, "B", "index_head_dim fp8 + a "
                                   "float32 scale per 128 (DeepseekV32IndexerCache)")]
                                if indexer else []),
                              q("layers", spec.count(mixer="full")), element))
    if spec.moe:  # the line under the parameters
        steps.append(step("active parameters without the input embedding",
                          "active − embedding (a lookup, not a matmul)",
                          q("active", params.active - params.embedding, "params"),
                          q("active", params.active, "params", "the step above"),
                          q("embedding", params.embedding, "params", "config.json")))
    steps += _window_steps(spec, kv_bf16, windowed, longest)
    states = state_step(served, dtypes)
    steps += [states] if states else []
    return ModelReport(spec, params, entry, weight_gb, kv_bf16, kv_fp8, tuple(steps),
                       windowed, dtypes if states else None, fp8.id)


def _window_steps(spec: ModelSpec, kv: KVFootprint, windowed_bytes: float,
                  longest: int) -> list[Step]:
    """The windowed model's two extra KV figures: every attention layer counted as full (the
    naive figure), and the windowed layers' cache once their windows are full (Gemma-3-27B:
    52 layers × 8 KiB × 1,024 tokens = 416 MiB)."""
    if kv.bytes_per_token_naive == kv.bytes_per_token_growing and not windowed_bytes:
        return []
    per_layer = attention_kv_bytes_per_token(spec, kv_dtype("bf16").bytes_per_element)
    attention = sum(1 for layer in spec.layers if layer.mixer in ATTENTION_MIXERS)
    layers = [layer for layer in spec.layers if layer.mixer in WINDOW_MIXERS]
    windows = Counter(min(layer.window_tokens or longest, longest) for layer in layers)
    return [step("naive all-layers KV per token", "per layer × attention layers (windowed "
                 "counted as full)", q("naive", kv.bytes_per_token_naive / 2**10, "KiB"),
                 q("per layer", per_layer, "B", "bf16"), q("attention layers", attention)),
            *([step("windowed layers' cache, windows full", "Σ windowed layers × per layer × "
                    "their window", q("windowed", windowed_bytes / 2**20, "MiB"),
                    q("per layer", per_layer, "B", "bf16"),
                    *(q(f"layers of a {w:,}-token window", n) for w, n in windows.items()))]
              if windowed_bytes else [])]


def _layer_list(layers: tuple[int, ...]) -> str:
    """(0, 1, 2, 7) -> 'layers 0-2, 7'; (0,) -> 'layer 0': what a checkpoint keeps
    unquantized, in runs."""
    runs: list[list[int]] = []
    for i in layers:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    word = "layer" if len(layers) == 1 else "layers"
    return f"{word} " + ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _format_step(spec: ModelSpec, label: str, plan: WeightPlan) -> Step:
    """One row of the weights table: each category's parameters at its format's bytes per
    weight, summed (a "linear" format leaves embeddings, lm_head and norms as stored)."""
    params = count_params(spec).by_category
    by = weight_bytes_by_category(spec, plan)
    return step(f"weights in {label}", "Σ over categories of params × that category's "
                "bytes per weight", q("weights", sum(by.values()) / GB, "GB"),
                *(q(c, by[c] / GB, "GB", f"{params[c]:,} params × "
                    f"{plan.format_of(c).bytes_per_weight:.6g} B ({plan.format_of(c).id})")
                  for c in by if params.get(c)))


@dataclass(frozen=True)
class ModelList:
    """The bundled models, one line each."""

    entries: tuple[ModelEntry, ...]
    specs: tuple[ModelSpec, ...]
    steps: tuple[Step, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"models": [{"id": e.id, "hf_id": e.hf_id, "architecture": s.architecture,
                            "kind": _kind(s),
                            "card_total_params": card_params(e.card_total_params),
                            "card_total_params_label": e.card_total_params,
                            "card_active_params": card_params(e.card_active_params),
                            "card_active_params_label": e.card_active_params}
                           for e, s in zip(self.entries, self.specs)]}

    def text_lines(self) -> list[str]:
        rows = [[e.id, e.hf_id, _kind(s),
                 e.card_total_params + (f" ({e.card_active_params} active)"
                                        if e.card_active_params else "")]
                for e, s in zip(self.entries, self.specs)]
        return [*table(rows, ["id", "Hugging Face id", "kind", "parameters (card)"], left=3), "",
                f"{len(rows)} bundled models; `ridgeline model ID` shows one, and any other "
                "config.json is read from a path or, with --fetch, from the Hub."]


def _kind(spec: ModelSpec) -> str:
    """'dense', 'MoE 128 × 8', with the attention kinds a hybrid mixes."""
    mixers = sorted({layer.mixer for layer in spec.layers} - {NONE})  # MLP-only layers
    moe = spec.moe
    kind = f"MoE {moe.num_experts} × {moe.experts_per_token}" if moe else "dense"
    return kind if mixers == ["full"] else f"{kind}; {' + '.join(mixers)}"


def model_list() -> ModelList:
    from ridgeline.catalog import catalog_model

    entries = tuple(sorted(model_entries(), key=lambda e: e.id))
    return ModelList(entries, tuple(catalog_model(e.id) for e in entries))


def size_places(sizes_gb: Iterable[float]) -> int:
    """Decimals that give the table's smallest size three figures, one at least: a 70B
    model's 35.3 GB at 0.5 B/param keeps one; Llama-3.2-1B's 0.618 GB takes three, where one
    would print its awq-int4 and mxfp4 sizes (1.031 and 1.042 GB) both as 1.0."""
    smallest = min((gb for gb in sizes_gb if gb > 0), default=10.0)
    return max(1, 2 - math.floor(math.log10(smallest)))
