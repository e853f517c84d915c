"""vLLM's launch-time RoPE scaling: the rope keys of ``--hf-overrides`` and the JSON
``--rope-scaling`` of its older releases, read into the model's rope_scaling as config.json's
own block is read, so the context vLLM derives from it (context_length.served_positions) is
the launch's.

vLLM's docs (features/context_extension) serve Qwen3 at 131,072 tokens with::

    vllm serve Qwen/Qwen3-0.6B --max-model-len 131072 --hf-overrides \\
      '{"rope_parameters": {"factor": 4.0, "original_max_position_embeddings": 32768,
        "rope_theta": 1000000, "rope_type": "yarn"}}'

(transformers 5's name; its v0.10.2 example sets ``rope_scaling`` and ``rope_theta`` at the
top level), and its releases before that took ``--rope-scaling '{"rope_type":"yarn",…}'``
(the docs' note: "The --rope-scaling parameter used in older versions of vLLM is no longer
supported"). YaRN factor 4 from 32,768 positions: 131,072, where Qwen3's own 40,960 refuse it.
Any other key of --hf-overrides changes config.json's fields in ways not read here, and is
refused by name.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from ridgeline.config_reader import read_rope_scaling
from ridgeline.errors import InputError, shorten
from ridgeline.flag_json import json_object
from ridgeline.model import ModelSpec

# the --hf-overrides keys read: the scaling block under either name, and the base frequency,
# which changes no size or cost priced
ROPE_BLOCKS = ("rope_parameters", "rope_scaling")
ROPE_KEYS = (*ROPE_BLOCKS, "rope_theta")
HF_OVERRIDES = "--hf-overrides"
ROPE_NAMES = {"yarn": "YaRN"}  # a rope_type as its paper spells it, for a message
ROPE_SCALING = "--rope-scaling"
EXAMPLE = '{"rope_parameters": {"rope_type": "yarn", "factor": 4.0, …}}'  # the docs' form
# the first release without vLLM's --rope-scaling: PR #28006 ('Remove deprecated
# --rope-scaling and --rope-theta', merged 2025-11-04) removed it. Read in the release wheels:
# vllm/engine/arg_utils.py of 0.11.0 registers model_group.add_argument("--rope-scaling", ...)
# (line 541; vllm/config/model.py line 403 warns "`--rope-scaling` will be removed in a future
# release", moving it into hf_overrides), while 0.11.1's, 0.12.0's and 0.13.0's have neither
# the flag nor EngineArgs.rope_scaling, so their vllm serve stops at 'unrecognized
# arguments' (as gpustack issue #4236 saw on 0.13.0; its answer: --hf-overrides
# '{"rope_scaling": {…}}').
ROPE_SCALING_REMOVED_IN = "0.11.1"


def hf_overrides_rope(text: str) -> dict[str, Any]:
    """The RoPE block --hf-overrides ``text`` sets ({} where it sets only rope_theta);
    any key but ROPE_KEYS refused by name, since it changes config.json in ways not read."""
    value = json_object(text, HF_OVERRIDES, EXAMPLE)
    others = [k for k in value if k not in ROPE_KEYS]
    if others:
        raise InputError(f"{HF_OVERRIDES} key{'s' if len(others) > 1 else ''} "
                         f"{', '.join(map(repr, others))} {'are' if len(others) > 1 else 'is'} "
                         f"not modelled: only {', '.join(ROPE_KEYS)} are read; for the rest "
                         "edit a copy of config.json and give its path as MODEL")
    blocks = [k for k in ROPE_BLOCKS if k in value]
    if len(blocks) > 1:
        raise InputError(f"{HF_OVERRIDES} sets both {' and '.join(blocks)}: give one")
    block = value[blocks[0]] if blocks else {}
    if block is None:
        return {"rope_type": "default"}
    if not isinstance(block, dict):
        raise InputError(f"{HF_OVERRIDES}: {blocks[0]} must be a JSON object, got "
                         f"{shorten(repr(block))}")
    return block


def json_rope_scaling(text: str) -> dict[str, Any]:
    """vLLM's --rope-scaling JSON (its releases before --hf-overrides took rope keys), as the
    block it sets."""
    return json_object(text, ROPE_SCALING, '{"rope_type": "yarn", "factor": 4.0, …}')


def with_launch_rope(spec: ModelSpec, block: dict[str, Any], flag: str) -> ModelSpec:
    """``spec`` with the rope_scaling ``block`` a launch flag sets, checked as config.json's
    is; a block of rope_type default (rope_theta alone) leaves no scaling, as vLLM builds a
    plain rotary embedding then. An empty block leaves ``spec`` as it is."""
    if not block:
        return spec
    if block.get("rope_type", block.get("type")) == "default":
        return replace(spec, rope_scaling=None)
    found = read_rope_scaling(block, flag, spec.max_position_embeddings,
                              key="its rope block")
    return replace(spec, rope_scaling=found)


def card_rope_advice(spec: ModelSpec, context: int) -> str:
    """The --hf-overrides that lets vLLM serve ``context`` tokens with the rope scaling
    ``spec``'s model card documents (the catalog's card_rope_scaling: Qwen3-32B's YaRN, factor
    4 over 32,768, serves 131,072 where its 40,960 positions refuse 50,000), or "" where the
    card documents none, the launch's own scaling already reaches as far, or the card's does
    not reach ``context``."""
    from ridgeline.catalog import catalog_model_id, model_entry
    from ridgeline.context_length import served_positions

    model_id = catalog_model_id(spec.name)
    block = dict(model_entry(model_id).card_rope_scaling) if model_id else {}
    if not block:
        return ""
    scaled = served_positions(with_launch_rope(spec, block, HF_OVERRIDES), "vllm") or 0
    if scaled < context or scaled <= (served_positions(spec, "vllm") or 0):
        return ""
    override = json.dumps({"rope_scaling": block}, separators=(",", ":"))
    kind = str(block.get("rope_type", block.get("type", "rope")))
    return (f"{HF_OVERRIDES} '{override}' (the {ROPE_NAMES.get(kind, kind)} scaling "
            f"{spec.name}'s model card documents, to {scaled:,} positions) serves it")


def launch_rope_model(spec: ModelSpec, hf_overrides: str | None, rope_scaling: str | None,
                      engines: list[str], version: str | None = None) -> ModelSpec:
    """``spec`` as vLLM serves it under --hf-overrides' rope keys or a JSON --rope-scaling
    (None: not given), refused under any engine but vLLM, with both given, and the JSON
    --rope-scaling where ``version`` is a release that removed it."""
    given = [(f, t) for f, t in ((HF_OVERRIDES, hf_overrides), (ROPE_SCALING, rope_scaling))
             if isinstance(t, str)]
    if not given:
        return spec
    if len(given) > 1:
        raise InputError(f"{HF_OVERRIDES} and a JSON {ROPE_SCALING} both set the rope "
                         "scaling: give one")
    flag, text = given[0]
    others = sorted({e for e in engines if e != "vllm"})
    if others:
        what = ("a JSON --rope-scaling is vLLM's (llama.cpp's takes none, linear or yarn)"
                if flag == ROPE_SCALING else f"{HF_OVERRIDES} is vLLM's")
        raise InputError(f"{what}; for {', '.join(others)} give config.json a rope_scaling "
                         "block (a copy, as MODEL)")
    if flag == ROPE_SCALING and _removed_at(version):
        raise InputError(f"vLLM {version} has no {ROPE_SCALING}: it was removed in "
                         f"v{ROPE_SCALING_REMOVED_IN} (PR #28006); give "
                         f"{HF_OVERRIDES} '{{\"rope_scaling\": {{…}}}}' with the same block, or "
                         "name an earlier --engine-version")
    block = hf_overrides_rope(text) if flag == HF_OVERRIDES else json_rope_scaling(text)
    return with_launch_rope(spec, block, flag)


def _removed_at(version: str | None) -> bool:
    """Whether vLLM ``version`` is one that refuses --rope-scaling (None: a line naming no
    release, taken to come from one that had it)."""
    from ridgeline.engine_versions import release_before

    if version is None:
        return False
    try:
        return not release_before("vllm", version, ROPE_SCALING_REMOVED_IN)
    except InputError:  # no version of vLLM's: refused where the version is checked
        return False
