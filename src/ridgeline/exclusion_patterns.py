"""The modules a checkpoint's exclusion list names, each key read the way vLLM reads it.

A quantization_config names what it leaves unquantized module by module, and each method
matches the names its own way against a layer's prefix ('model.layers.0.mlp.gate_up_proj'):

- ModelOpt's exclude_modules are fnmatch wildcards: vLLM modelopt.py
  ModelOptQuantConfigBase.is_layer_excluded, ``fnmatch(prefix, wildcard_pattern)``; so
  '*mlp.gate*' takes gate_proj and gate_up_proj as well as the router 'mlp.gate'.
- compressed-tensors' ignore: the name itself, or a regex after 're:' matched from the
  start (vLLM compressed_tensors/utils.py should_ignore_layer -> check_equal_or_regex_match,
  ``re.match``).
- modules_to_not_convert: a piece of the prefix (vLLM awq.py is_layer_skipped_awq,
  ``any(module_name in prefix …)``), except under fp8, where vLLM's Fp8Config takes them as
  its ignored_layers, named whole (quant_utils.py is_layer_skipped, ``prefix in
  ignored_layers``).
- bitsandbytes' llm_int8_skip_modules: one dotted component of the prefix, or its leading
  components (vLLM bitsandbytes.py is_layer_skipped_bnb).

Names are matched against one probe per kind of linear module in each layer (PROBE_MODULES),
under the prefixes Hugging Face checkpoints use, so a pattern is read by what it matches,
not by the words it contains.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from functools import lru_cache

WILDCARD = "wildcard"  # ModelOpt exclude_modules
EQUAL_OR_RE = "equal-or-re"  # compressed-tensors ignore; fp8's modules_to_not_convert
PIECE = "piece"  # modules_to_not_convert (AWQ, GPTQ, MXFP4 …)
COMPONENT = "component"  # bitsandbytes llm_int8_skip_modules

# a decoder layer's linear modules, by the names HF checkpoints give them (Llama, Qwen,
# DeepSeek's MLA, Mixtral's block_sparse_moe, Qwen3-Next's linear_attn, Mamba's mixer)
PROBE_MODULES = (
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "self_attn.qkv_proj", "self_attn.q_a_proj", "self_attn.q_b_proj",
    "self_attn.kv_a_proj_with_mqa", "self_attn.kv_b_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "mlp.gate_up_proj",
    "mlp.gate",
    "mlp.experts.0.gate_proj", "mlp.experts.0.up_proj", "mlp.experts.0.down_proj",
    "block_sparse_moe.experts.0.w1", "block_sparse_moe.experts.0.w2",
    "block_sparse_moe.experts.0.w3", "block_sparse_moe.gate",
    "mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj",
    "mlp.shared_experts.down_proj",
    "mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj", "mlp.shared_expert.down_proj",
    "mlp.shared_expert_gate",
    "linear_attn.in_proj_qkvz", "linear_attn.in_proj_ba", "linear_attn.in_proj_qkv",
    "linear_attn.in_proj_z", "linear_attn.out_proj",
    "mixer.in_proj", "mixer.out_proj",
)
PROBE_PREFIXES = ("model.layers.", "model.language_model.layers.", "language_model.model.layers.")

_LITERAL_LAYER = re.compile(r"layers\.(\d+)\.")


def module_matches(pattern: str, syntax: str, name: str) -> bool:
    """Whether an exclusion ``pattern``, read as ``syntax`` says, names module ``name``."""
    if syntax == WILDCARD:
        return fnmatchcase(name, pattern)
    if syntax == EQUAL_OR_RE:
        return bool(re.match(pattern[3:], name)) if pattern.startswith("re:") else name == pattern
    if syntax == PIECE:
        return pattern in name
    parts = name.split(".")
    return pattern in parts or any(".".join(parts[:i]) == pattern for i in range(1, len(parts)))


@lru_cache(maxsize=4096)
def matched_probes(pattern: str, syntax: str, num_layers: int) -> tuple[tuple[int, str], ...]:
    """(layer index, probe module) of each probe ``pattern`` names over ``num_layers`` layers:
    ('model.layers.0.mlp*', wildcard) -> (0, 'mlp.gate_proj'), (0, 'mlp.gate'), …. A literal
    name that gives its layer ('model.layers.0.mlp.down_proj') is tried on that layer alone; a
    pattern with no digit ('*mlp.gate*') on layer 0, and read the same in every layer; any
    other on every layer ('model.layers.1*' names layers 1 and 10-19)."""
    literal = syntax in (PIECE, COMPONENT) or (syntax == EQUAL_OR_RE
                                               and not pattern.startswith("re:"))
    named = literal_layer(pattern) if literal else None
    layers: range | tuple[int, ...]
    everywhere = named is None and not any(ch.isdigit() for ch in pattern)
    if named is not None:
        layers = (named,) if named < num_layers else ()
    elif everywhere:
        layers = (0,)
    else:
        layers = range(num_layers)
    found = {(i, module) for i in layers for module in PROBE_MODULES
             if any(module_matches(pattern, syntax, f"{prefix}{i}.{module}")
                    for prefix in PROBE_PREFIXES)}
    if everywhere:
        found = {(i, module) for _, module in found for i in range(num_layers)}
    return tuple(sorted(found))


def literal_layer(pattern: str) -> int | None:
    """The layer a pattern names as 'layers.N.', or None: where no probe matches it, the
    name's own words still tell its category, and this its layer."""
    named = _LITERAL_LAYER.search(pattern)
    return int(named.group(1)) if named else None
