"""A GGUF file read as a model: its metadata as the config.json fields ridgeline reads, its
tensor types as the stored weight formats.

llama.cpp's converter writes a config.json's shapes as ``{arch}.*`` keys (ggml docs/gguf.md,
"LLM"; llama.cpp gguf-py constants.py Keys.LLM): ``llama.block_count`` 32 is Llama-3.1-8B's
num_hidden_layers. ``gguf_config`` writes them back as a config dict, so the spec comes from
``spec_from_hf_config`` as every other model's does. The weights are the tensors' own ggml
types: each category's bytes are sum(elements × block bytes ÷ block elements) over its
tensors (``data/ggml_types.json``), stored as the format of its dominant type whose bits per
weight are nearest those bytes (Q4_K attention with Q6_K attn_v: q4_k_s or q4_k_m).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from ridgeline.config_reader import spec_from_hf_config
from ridgeline.datafiles import load_data
from ridgeline.errors import InputError, shorten
from ridgeline.gguf_reader import GgufHeader, SkippedArray, TensorInfo, read_gguf_header
from ridgeline.model import ModelSpec
from ridgeline.precision import weight_formats
from ridgeline.quantization import (
    ATTENTION,
    EMBEDDING,
    EXPERT_BIAS,
    EXPERTS,
    LINEAR_CATEGORIES,
    LM_HEAD,
    MLP,
    OTHER,
    ROUTER,
    SHARED_EXPERTS,
)
from ridgeline.units import plural

# general.architecture -> (HF model_type, architectures[0]); llama.cpp converts Mistral and
# Mixtral to "llama" (a llama with expert_count is read as Mixtral)
ARCHITECTURES = {
    "llama": ("llama", "LlamaForCausalLM"),
    "qwen2": ("qwen2", "Qwen2ForCausalLM"),
    "qwen3": ("qwen3", "Qwen3ForCausalLM"),
    "qwen3moe": ("qwen3_moe", "Qwen3MoeForCausalLM"),
    "gemma2": ("gemma2", "Gemma2ForCausalLM"),
    "gemma3": ("gemma3_text", "Gemma3ForCausalLM"),
    "phi3": ("phi3", "Phi3ForCausalLM"),
    "deepseek2": ("deepseek_v2", "DeepseekV2ForCausalLM"),
    "gpt-oss": ("gpt_oss", "GptOssForCausalLM"),
}
_FLOATS = {"F32": "fp32", "F16": "fp16", "BF16": "bf16"}
WEIGHT_CATEGORIES = (EMBEDDING, LM_HEAD, *LINEAR_CATEGORIES)


@dataclass(frozen=True)
class GgmlType:
    id: int
    name: str
    block_elements: int
    block_bytes: int


@lru_cache(maxsize=1)
def ggml_types() -> dict[int, GgmlType]:
    return {row["id"]: GgmlType(**row) for row in load_data("ggml_types.json")["types"]}


# llama.cpp's gguf-split names its parts "<stem>-00001-of-00004.gguf" (llama_split_path) and
# writes the metadata into the first; every part lists its own tensors, and the first
# carries split.count (gguf-split.cpp LLM_KV_SPLIT_COUNT)
SPLIT_PART = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$",
                        re.IGNORECASE)


def spec_from_gguf(path: Path) -> ModelSpec:
    """The model a .gguf file holds, named for the file; a split GGUF read from all its parts,
    which must lie beside the one given."""
    header, name = whole_gguf(path)
    spec = spec_from_hf_config(gguf_config(header, name), name=name)
    att = spec.attention
    if att is not None and att.mla is not None and not mla_cache_keys(header):
        spec = replace(spec, attention=replace(att, mla=replace(att.mla, latent_cached=False)))
    return replace(spec, stored_formats=tuple(sorted(gguf_stored_formats(header, name).items())))


def mla_cache_keys(header: GgufHeader) -> bool:
    """Whether a deepseek2 GGUF states the heads' widths as key_length_mla/value_length_mla,
    which converters write since llama.cpp's MLA cache (ggml-org/llama.cpp#12801). Current
    llama.cpp reads both as optional (llama_model_deepseek2::load_arch_hparams) and takes MLA
    only where both are non-zero (llama_hparams::is_mla): a file without them loads as the
    PR promised, 'legacy non-MLA GGUF files can still be loaded and used as normal, but they
    won't benefit from the reduced KV-cache size MLA gives', each head's K (key_length,
    qk_nope + qk_rope) and V (value_length) cached (models/deepseek2.cpp's non-MLA branch)."""
    arch = header.metadata.get("general.architecture")
    return all(header.metadata.get(f"{arch}.attention.{key}")
               for key in ("key_length_mla", "value_length_mla"))


def whole_gguf(path: Path) -> tuple[GgufHeader, str]:
    """The header of a GGUF, its metadata and every part's tensors, and the model's name. A
    part of a split file is refused in one line where a sibling part is missing: one part's
    tensors alone would leave whole weight categories uncounted. Each file's tensors must lie
    within it (check_tensor_data); the merged header keeps the first part's sizes."""
    match = SPLIT_PART.match(path.name)
    if match is None:
        header = check_tensor_data(read_gguf_header(path), path.name)
        count = header.metadata.get("split.count", 1)
        if isinstance(count, int) and count > 1:
            raise InputError(f"{path.name} is one of {count} parts of a split GGUF, but its name "
                             "is not llama.cpp's <name>-00001-of-0000N.gguf, so the other "
                             "parts, which hold the rest of the tensors, cannot be found")
        return header, path.stem
    count = int(match["count"])
    if not 1 <= int(match["part"]) <= count:
        raise InputError(f"{path.name}: part {int(match['part'])} of {count} is no part of a "
                         "split GGUF (llama.cpp numbers them 00001-of-0000N)")
    parts = [path.with_name(f"{match['stem']}-{i:05d}-of-{count:05d}{path.suffix}")
             for i in range(1, count + 1)]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise InputError(f"{path.name} is part of a {count}-part GGUF, and {missing[0]} is not "
                         "beside it: every part's tensor list is needed to size the weights")
    headers = [check_tensor_data(read_gguf_header(p), p.name) for p in parts]
    tensors = tuple(t for h in headers for t in h.tensors)
    return replace(headers[0], tensors=tensors), match["stem"]


def check_tensor_data(header: GgufHeader, file_name: str) -> GgufHeader:
    """``header`` as read, where every tensor's data lies within its file; a cut-short file
    (an unfinished download) refused in one line, as llama.cpp's loader refuses it: each
    tensor's data_offset + offset + bytes must not pass the file's size ("tensor '%s' data is
    not within the file bounds, model is corrupted or incomplete", llama_tensor_weight in
    src/llama-model-loader.h). A split GGUF's tensors are checked against their own part."""
    types = ggml_types()  # a type it lacks is refused by name in check_tensors
    ends = [(header.data_offset_bytes + t.offset_bytes + tensor_bytes(t), t)
            for t in header.tensors if t.ggml_type in types]
    past = next((t for end, t in ends if end > header.file_bytes), None)
    if past is None:
        return header
    needed = max(end for end, _ in ends)
    raise InputError(f"{file_name} is truncated: it is {header.file_bytes:,} bytes and its "
                     f"tensors need {needed:,}; "
                     f"tensor {shorten(past.name)!r} is the first past the end, so llama.cpp "
                     "refuses it ('data is not within the file bounds'): download it again")


# llama.cpp's bounds (src/llama-hparams.h): get_key_or_arr refuses a per-layer key of a model
# past LLAMA_MAX_LAYERS blocks ("n > N_MAX"), and load_hparams asserts expert_count ≤
# LLAMA_MAX_EXPERTS (512 since Qwen3-Next; 160, then 256, before)
LLAMA_MAX_LAYERS = 512
LLAMA_MAX_EXPERTS = 512
# the keys llama_model::load_hparams reads with get_key_or_arr(..., hparams.n_layer): a
# number for every layer, or an array of exactly block_count (src/llama-model.cpp)
PER_LAYER_KEYS = ("feed_forward_length", "attention.head_count", "attention.head_count_kv")


class _Meta:
    """The ``{arch}.`` keys of one header, read as whole numbers or refused by name."""

    def __init__(self, header: GgufHeader, arch: str, name: str) -> None:
        self.m, self.arch, self.name = header.metadata, arch, name

    def get(self, key: str) -> Any:
        return self.m.get(f"{self.arch}.{key}")

    def per_layer(self, key: str, value: tuple[Any, ...] | SkippedArray) -> Any:
        """A per-layer array's one value: llama.cpp's get_key_or_arr throws "key %s has wrong
        array length; expected %u, got %u" where its length is not block_count
        (src/llama-model-loader.cpp), and a model whose layers differ is not modelled."""
        length = value.length if isinstance(value, SkippedArray) else len(value)
        if key not in PER_LAYER_KEYS:
            raise InputError(f"{self.name}: {self.arch}.{key} is an array of {length:,}, where "
                             "llama.cpp reads one number")
        layers = self.int_("block_count")
        if length != layers:
            raise InputError(f"{self.name}: {self.arch}.{key} has {length:,} per-layer "
                             f"{plural(length, 'value')} "
                             f"but {self.arch}.block_count is {layers:,}: llama.cpp refuses "
                             "the file ('wrong array length')")
        assert isinstance(value, tuple)  # a skipped array is past any block_count allowed
        if len(set(value)) != 1:
            raise InputError(f"{self.name}: {self.arch}.{key} differs between layers "
                             f"({shorten(repr(value[:8]))}…), which ridgeline does not model")
        return value[0]

    def int_(self, key: str, default: int | None = None) -> int:
        value = self.get(key)
        if isinstance(value, (tuple, SkippedArray)):  # per-layer (head_count_kv)
            value = self.per_layer(key, value)
        if value is None:
            if default is None:
                raise InputError(f"{self.name}: the GGUF has no {self.arch}.{key}")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"{self.name}: {self.arch}.{key} must be a whole number, got "
                             f"{shorten(repr(value))}")
        if key == "block_count" and value > LLAMA_MAX_LAYERS:
            raise InputError(f"{self.name}: {self.arch}.block_count {value:,} is past llama.cpp's "
                             f"{LLAMA_MAX_LAYERS} layers (LLAMA_MAX_LAYERS): the file is corrupt")
        return value


def gguf_config(header: GgufHeader, name: str) -> dict[str, Any]:
    """The config.json fields a GGUF's metadata states: llama.block_count 32 ->
    num_hidden_layers 32, and so on; an architecture not mapped is refused by name."""
    arch = header.metadata.get("general.architecture")
    if not isinstance(arch, str):
        raise InputError(f"{name}: the GGUF has no general.architecture")
    if arch not in ARCHITECTURES:
        raise InputError(f"{name}: GGUF architecture {shorten(arch)!r} is not one ridgeline "
                         f"reads a model from ({', '.join(ARCHITECTURES)})")
    m = _Meta(header, arch, name)
    model_type, class_name = ARCHITECTURES[arch]
    hidden = m.int_("embedding_length")
    heads = m.int_("attention.head_count")
    names = {t.name for t in header.tensors}
    config: dict[str, Any] = {
        "model_type": model_type,
        "architectures": [class_name],
        "hidden_size": hidden,
        "num_hidden_layers": m.int_("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": m.int_("attention.head_count_kv", heads),
        "head_dim": _head_dim(m, hidden, heads),
        "max_position_embeddings": m.int_("context_length"),
        "vocab_size": _vocab_size(header, m),
        "tie_word_embeddings": "output.weight" not in names,  # tied: no output tensor
        "torch_dtype": _dtype(header),
        "rope_scaling": _rope_scaling(m),
    }
    if m.get("feed_forward_length") is not None:
        config["intermediate_size"] = m.int_("feed_forward_length")
    window = m.int_("attention.sliding_window", 0)
    config["sliding_window"] = window or None
    if arch in ("qwen2", "qwen3", "qwen3moe"):
        config["use_sliding_window"] = False
    experts = _experts(m)
    if arch == "llama" and experts:
        config.update(model_type="mixtral", architectures=["MixtralForCausalLM"])
    if experts:
        config.update(num_local_experts=experts, num_experts=experts, n_routed_experts=experts,
                      num_experts_per_tok=m.int_("expert_used_count"))
    if arch in ("qwen3moe", "deepseek2"):
        config["moe_intermediate_size"] = m.int_("expert_feed_forward_length")
    if arch == "gpt-oss":
        config.update(intermediate_size=m.int_("expert_feed_forward_length"),
                      attention_bias=True)
    if arch == "deepseek2":
        config.update(_deepseek_fields(m, names, mla_cache_keys(header)))
    check_tensors(header, config, name, m.int_("attention.value_length", config["head_dim"]))
    return config


def _head_dim(m: _Meta, hidden: int, heads: int) -> int:
    """{arch}.attention.key_length, else embedding_length ÷ head_count, as llama.cpp sets
    n_embd_head_k (src/llama-model.cpp); a split that leaves a remainder is refused, as a
    config.json's is, rather than floored (64 ÷ 3 read as 21)."""
    if m.get("attention.key_length") is not None or heads < 1 or hidden % heads == 0:
        return m.int_("attention.key_length", hidden // max(heads, 1))
    raise InputError(f"{m.name}: {m.arch}.embedding_length ({hidden:,}) is not a multiple of "
                     f"{m.arch}.attention.head_count ({heads:,}) and "
                     f"{m.arch}.attention.key_length is not given")


def _experts(m: _Meta) -> int:
    """expert_count, checked as llama_model::load_hparams asserts (src/llama-model.cpp):
    at most LLAMA_MAX_EXPERTS, expert_used_count at most expert_count and above 0 with
    experts, 0 without (a GGML_ASSERT there: the process aborts)."""
    experts = m.int_("expert_count", 0)
    used = m.int_("expert_used_count", 0)
    if experts > LLAMA_MAX_EXPERTS:
        raise InputError(f"{m.name}: {m.arch}.expert_count {experts:,} is past llama.cpp's "
                         f"{LLAMA_MAX_EXPERTS} (LLAMA_MAX_EXPERTS)")
    if experts and not 0 < used <= experts:
        raise InputError(f"{m.name}: {m.arch}.expert_used_count is {used:,} of "
                         f"{experts:,} experts; llama.cpp needs 1 to expert_count")
    if not experts and used:
        raise InputError(f"{m.name}: {m.arch}.expert_used_count is {used:,} but the GGUF states "
                         "no expert_count; llama.cpp needs both or neither")
    return experts


def check_tensors(header: GgufHeader, config: Mapping[str, Any], name: str,
                  value_dim: int) -> None:
    """The tensor infos' own consistency, as llama.cpp refuses a file that breaks it:
    gguf_init_from_file (ggml/src/gguf.cpp) refuses a duplicate name, a type id that is no
    ggml type ("has invalid ggml type %d"), and a row (ne[0]) not a whole number of the
    type's blocks; llama_model_loader refuses a tensor of a block past block_count ("wrong
    number of tensors") and one whose shape is not the one hparams give ("tensor '%s' has
    wrong shape; expected …"): token_embd/output rows of embedding_length, and attn_q/attn_k/
    attn_v of embedding_length × heads × head size, and the dense FFN's ffn_gate/ffn_up of
    embedding_length × feed_forward_length (Phi-3's fused ffn_up twice that) and ffn_down the
    transpose, which ridgeline's sizes rest on. A file with no tensors (a vocab-only GGUF)
    and a block without a tensor the others hold (missing_block_tensor) are refused too:
    llama_model_loader stops at the first 'missing tensor'."""
    if not header.tensors:
        raise InputError(f"{name}: the file holds no tensors, only metadata (a vocab-only "
                         "GGUF, as convert_hf_to_gguf.py --vocab-only writes): no weights to "
                         "price, and llama.cpp loads no model from it")
    types = ggml_types()
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    heads, kv_heads, head_dim = (config["num_attention_heads"], config["num_key_value_heads"],
                                 config["head_dim"])
    shapes = {"token_embd.weight": hidden, "output.weight": hidden}
    seen: set[str] = set()
    for t in header.tensors:
        label = f"{name}: tensor {shorten(t.name)!r}"
        if t.name in seen:
            raise InputError(f"{label} is listed twice; llama.cpp refuses the file")
        seen.add(t.name)
        kind = types.get(t.ggml_type)
        if kind is None:
            raise InputError(f"{label} has ggml type {t.ggml_type}, not one ridgeline knows "
                             "(data/ggml_types.json): a newer or forked llama.cpp's, or a "
                             "corrupt header")
        if t.dims and t.dims[0] % kind.block_elements:
            raise InputError(f"{label} rows of {t.dims[0]:,} are no whole number of {kind.name} "
                             f"blocks of {kind.block_elements}; llama.cpp refuses the file")
        if t.name.startswith("blk."):
            block = t.name.split(".")[1]
            if block.isdigit() and int(block) >= layers:
                raise InputError(f"{label} is of block {int(block)}, past block_count "
                                 f"{layers}; llama.cpp refuses the file")
        expected = shapes.get(t.name)
        if expected is not None and t.dims and t.dims[0] != expected:
            raise InputError(f"{label} has rows of {t.dims[0]:,}, not embedding_length "
                             f"{expected:,}: the file is not the model its metadata states")
        part = t.name.split(".")[2] if t.name.count(".") == 3 else ""
        width = {"attn_q": heads * head_dim, "attn_k": kv_heads * head_dim,
                 "attn_v": kv_heads * value_dim}.get(part)
        if (width and t.name.endswith(".weight") and config["model_type"] not in
                ("deepseek_v2", "deepseek_v3") and t.dims[:2] != (hidden, width)):
            raise InputError(f"{label} is {' × '.join(map(str, t.dims))}, not {hidden:,} × "
                             f"{width:,} (embedding_length × heads × head size): the file is "
                             "not the model its metadata states")
        ffn = _ffn_shape(part, hidden, config)
        if ffn and t.name.endswith(".weight") and t.dims[:2] != ffn:
            raise InputError(f"{label} is {' × '.join(map(str, t.dims))}, not "
                             f"{' × '.join(f'{d:,}' for d in ffn)} (embedding_length and "
                             "feed_forward_length): the file is not the model its metadata "
                             "states")
    missing = missing_block_tensor(header.tensors, layers)
    if missing:
        raise InputError(f"{name}: block {missing.split('.')[1]} has no tensor {missing!r}, "
                         "which the other blocks hold; llama.cpp refuses the file ('missing "
                         "tensor')")


def _ffn_shape(part: str, hidden: int, config: Mapping[str, Any]) -> tuple[int, int] | None:
    """The shape llama.cpp creates a dense FFN tensor with (src/llama-model.cpp,
    load_tensors): ffn_gate and ffn_up {n_embd, n_ff}, ffn_down {n_ff, n_embd}; Phi-3's
    fused gate-and-up ffn_up {n_embd, 2 × n_ff}. None for another tensor, or where the GGUF
    states no feed_forward_length. Llama-3.1-8B: ffn_up 4,096 × 14,336."""
    ff = config.get("intermediate_size")
    if not ff or part not in ("ffn_gate", "ffn_up", "ffn_down"):
        return None
    if part == "ffn_down":
        return ff, hidden
    return hidden, 2 * ff if part == "ffn_up" and config["model_type"] == "phi3" else ff


def missing_block_tensor(tensors: Iterable[TensorInfo], layers: int) -> str:
    """The first tensor a block of the ``layers`` lacks, or "": every block holds each
    attention tensor any block holds (blk.N.attn_*: their set is the same in every layer of
    the architectures read here) and, where any holds one, a down projection (ffn_down,
    dense or of the experts: DeepSeek's dense leading blocks and its MoE ones differ beyond
    it). Llama-3.1-8B with blk.31 cut out: 'blk.31.attn_norm.weight'."""
    held: dict[int, set[str]] = {i: set() for i in range(layers)}
    attention: dict[str, None] = {}  # in the file's order
    for t in tensors:
        parts = t.name.split(".", 2)
        if parts[0] != "blk" or len(parts) < 3 or not parts[1].isdigit() \
                or int(parts[1]) >= layers:
            continue
        held[int(parts[1])].add(parts[2])
        if parts[2].startswith("attn_"):
            attention.setdefault(parts[2])
    down = any(s.startswith("ffn_down") for suffixes in held.values() for s in suffixes)
    for block, suffixes in held.items():
        lacking = [s for s in attention if s not in suffixes]
        if down and not any(s.startswith("ffn_down") for s in suffixes):
            lacking.append("ffn_down.weight")
        if lacking:
            return f"blk.{block}.{lacking[0]}"
    return ""


def _deepseek_fields(m: _Meta, names: set[str], mla: bool) -> dict[str, Any]:
    """MLA and the shared experts. Converters since llama.cpp's MLA cache write the heads'
    own widths as key_length_mla / value_length_mla (key_length is then the latent's); a file
    without them (``mla`` False) states them as key_length / value_length and is run with
    each head's K and V cached (mla_cache_keys). llama.cpp's loader then wants each block's
    unsplit attn_kv_b, with the keys attn_k_b and attn_v_b (llama_model_deepseek2::
    load_arch_tensors), so a file with the wrong ones stops at load ('missing tensor')."""
    want, other = ("attn_k_b", "attn_kv_b") if mla else ("attn_kv_b", "attn_k_b")
    if any(f".{other}." in n for n in names) and not any(f".{want}." in n for n in names):
        missing = next(n for n in sorted(names) if f".{other}." in n).replace(other, want)
        state = "states" if mla else "lacks"
        raise InputError(f"{m.name}: the GGUF {state} {m.arch}.attention.key_length_mla but has "
                         f"{other}, not {want}: llama.cpp stops at load with \"missing tensor "
                         f"'{missing}'\"" + ("" if mla else " (a file from before its MLA "
                                              "cache's converter: convert it again)"))
    rope = m.int_("rope.dimension_count")
    key = m.int_("attention.key_length_mla", 0) or m.int_("attention.key_length")
    # DeepSeek-V3's sigmoid gate (expert_gating_func 2) and its e_score_correction_bias
    v3 = m.int_("expert_gating_func", 0) == 2 or any(n.endswith("exp_probs_b.bias") for n in names)
    return {
        "model_type": "deepseek_v3" if v3 else "deepseek_v2",
        "architectures": ["DeepseekV3ForCausalLM" if v3 else "DeepseekV2ForCausalLM"],
        "q_lora_rank": m.int_("attention.q_lora_rank", 0) or None,
        "kv_lora_rank": m.int_("attention.kv_lora_rank"),
        "qk_rope_head_dim": rope,
        "qk_nope_head_dim": key - rope,
        "v_head_dim": m.int_("attention.value_length_mla", 0) or m.int_("attention.value_length"),
        "n_shared_experts": m.int_("expert_shared_count", 0),
        "first_k_dense_replace": m.int_("leading_dense_block_count", 0),
        "topk_method": "noaux_tc" if v3 else "greedy",
    }


def _vocab_size(header: GgufHeader, m: _Meta) -> int:
    """{arch}.vocab_size where written, else the token list's length, else token_embd's rows."""
    if m.get("vocab_size") is not None:
        return m.int_("vocab_size")
    tokens = header.array_length("tokenizer.ggml.tokens")
    if tokens:
        return tokens
    for t in header.tensors:
        if t.name == "token_embd.weight" and len(t.dims) == 2:
            return t.dims[1]
    raise InputError(f"{m.name}: the GGUF states no vocabulary (no tokenizer.ggml.tokens, no "
                     "token_embd.weight)")


def _dtype(header: GgufHeader) -> str:
    """The 16-bit type the file keeps unquantized matrices in (BF16 where any is), else F16,
    llama.cpp's converter default."""
    types = ggml_types()
    kinds = {types[t.ggml_type].name for t in header.tensors
             if t.ggml_type in types and len(t.dims) >= 2}
    return "bfloat16" if "BF16" in kinds else "float32" if kinds == {"F32"} else "float16"


def _rope_scaling(m: _Meta) -> dict[str, Any] | None:
    kind = m.get("rope.scaling.type")
    if not isinstance(kind, str) or kind in ("", "none"):
        return None
    factor = m.get("rope.scaling.factor")
    rope: dict[str, Any] = {"rope_type": kind, "factor": factor if factor else 1.0}
    original = m.get("rope.scaling.original_context_length")
    if original:
        rope["original_max_position_embeddings"] = original
    return rope


def tensor_category(name: str) -> str:
    """A tensor's weight category by llama.cpp's names: 'blk.0.ffn_up_exps.weight' ->
    experts, 'blk.0.attn_v.weight' -> attention, 'output.weight' -> lm_head."""
    if name == "token_embd.weight":
        return EMBEDDING
    if name == "output.weight":
        return LM_HEAD
    part = name.split(".")[2] if name.startswith("blk.") and name.count(".") >= 2 else name
    if "norm" in part or part in ("attn_sinks", "exp_probs_b"):
        return OTHER
    if part.startswith("ffn_gate_inp"):
        return ROUTER
    if name.endswith(".bias"):
        return EXPERT_BIAS if part.endswith("_exps") else OTHER
    if part.endswith("_exps"):
        return EXPERTS
    if part.endswith("_shexp"):
        return SHARED_EXPERTS
    if part.startswith("attn_"):
        return ATTENTION
    if part.startswith("ffn_"):
        return MLP
    return OTHER


def tensor_bytes(tensor: TensorInfo) -> int:
    """elements ÷ block elements × block bytes: a 4096 × 4096 Q4_K matrix is 65,536 blocks of
    144 bytes = 9,437,184 bytes (4.5 bits a weight)."""
    kind = ggml_types().get(tensor.ggml_type)
    if kind is None:
        raise InputError(f"tensor {shorten(tensor.name)!r} has ggml type {tensor.ggml_type}, "
                         "not one ridgeline knows (data/ggml_types.json)")
    return tensor.num_elements // kind.block_elements * kind.block_bytes


def gguf_weight_bytes(header: GgufHeader) -> dict[str, int]:
    """{category: bytes} of the file's tensors, exactly as stored."""
    totals: Counter[str] = Counter()
    for t in header.tensors:
        totals[tensor_category(t.name)] += tensor_bytes(t)
    return dict(totals)


SIZE_CAUTION_FRACTION = 0.02  # past this the stored formats misstate the file's weights


def gguf_size_caution(path: Path) -> str:
    """Where a category mixes tensor types (an Unsloth dynamic quant: some ffn_down at Q4_K
    among IQ1_S experts), its one stored format, the dominant type's, misstates the bytes;
    say by how much where the matmul weights' total is off by more than 2 %, else ""."""
    from ridgeline.precision import weight_bytes_by_category, weight_plan

    header, name = whole_gguf(path)
    spec = spec_from_gguf(path)
    exact = gguf_weight_bytes(header)
    modelled = weight_bytes_by_category(spec, weight_plan(spec))
    cats = [c for c in WEIGHT_CATEGORIES if exact.get(c)]
    stored = sum(exact[c] for c in cats)
    priced = sum(modelled.get(c, 0.0) for c in cats)
    if not stored or abs(priced - stored) <= SIZE_CAUTION_FRACTION * stored:
        return ""
    mixed = [c for c in cats
             if abs(modelled.get(c, 0.0) - exact[c]) > SIZE_CAUTION_FRACTION * exact[c]]
    return (f"{name}'s matmul weights are {stored / 1e9:.2f} GB as stored, and ridgeline prices "
            f"them at {priced / 1e9:.2f} GB ({(priced - stored) / stored:+.1%}): each category "
            "is read as one format, its main tensor type's, and "
            f"{', '.join(mixed) or 'its categories'} mix types in this file")


def gguf_stored_formats(header: GgufHeader, name: str) -> Mapping[str, str]:
    """{category: format id} for the matmul weights (embedding, lm_head, the linear layers):
    the format of the category's dominant ggml type (most elements) whose bits per weight lie
    nearest the category's exact bits. A tied lm_head is the embedding's."""
    elements: dict[str, Counter[str]] = {}
    stored: Counter[str] = Counter()
    types = ggml_types()
    for t in header.tensors:
        category = tensor_category(t.name)
        if category not in WEIGHT_CATEGORIES:
            continue
        kind = types.get(t.ggml_type)
        elements.setdefault(category, Counter())[kind.name if kind else str(t.ggml_type)] \
            += t.num_elements
        stored[category] += tensor_bytes(t)
    formats = {}
    for category, by_type in elements.items():
        count = sum(by_type.values())
        if count:
            bits = stored[category] * 8 / count
            formats[category] = format_for(by_type.most_common(1)[0][0], bits, category, name)
    if EMBEDDING in formats and LM_HEAD not in formats:
        formats[LM_HEAD] = formats[EMBEDDING]
    return formats


def format_for(ggml_name: str, bits_per_weight: float, category: str, name: str) -> str:
    """Q8_0 -> q8_0; Q4_K at 4.6 bits -> q4_k_s (nearest of q4_k-block 4.5, q4_k_s 4.58 and
    q4_k_m 4.84); IQ2_XXS -> iq2_xxs-block."""
    if ggml_name in _FLOATS:
        return _FLOATS[ggml_name]
    family = ggml_name.lower()
    # the type on its own (q4_k-block, iq2_xxs-block) or a file type built on it (q4_k_m)
    candidates = [f for f in weight_formats().values()
                  if f.id in (family, f"{family}-block") or f.id.startswith(family + "_")]
    if not candidates:
        raise InputError(f"{name}: its {category} weights are {ggml_name}, a ggml type "
                         "ridgeline has no weight format for")
    return min(candidates, key=lambda f: abs(f.bits_per_weight - bits_per_weight)).id
