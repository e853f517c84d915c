"""vLLM's --limit-mm-per-prompt: the images (videos, audio clips) one prompt may carry, which
set how many dummy images its profiling pass runs the vision tower on, and, at 0 for every
modality the model takes, serve it text-only (engines.json vllm.mm_limits, with sources).

vLLM profiles the tower on min(encoder budget ÷ tokens an image, max_num_seqs × images a
prompt) images, at least one, where images a prompt is max(1, min(the limit, max_model_len ÷
tokens an image)) (MultiModalBudget.get_max_items): Gemma-3-27B (256 tokens an image) with
``--limit-mm-per-prompt '{"image":1}' --max-num-seqs 8`` runs 8 images, not the 32 an 8,192
budget holds. A modality left out keeps vLLM's default of 999. Every modality the model takes
at 0 is what --language-model-only means (MultiModalConfig: "Equivalent to setting
--limit-mm-per-prompt to 0 for every modality"): no tower loaded, none profiled.

Three spellings, as vllm serve reads them: a JSON object ('{"image":2,"video":0}', a count
or {"count": N}), the older 'image=2,video=0', and one dotted flag a modality
(--limit-mm-per-prompt.image 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ridgeline.errors import InputError
from ridgeline.flag_json import json_object
from ridgeline.model import ModelSpec
from ridgeline.units import ascii_whole
from ridgeline.vllm_memory import vllm_data

FLAG = "--limit-mm-per-prompt"


def mm_limits_data() -> dict[str, Any]:
    """engines.json vllm.mm_limits: the default, the modalities, each model's, the sources."""
    data: dict[str, Any] = vllm_data()["mm_limits"]
    return data


def default_limit() -> int:
    """What vLLM allows a modality the flag leaves out (999: get_limit_per_prompt)."""
    return int(mm_limits_data()["default_count"])


@dataclass(frozen=True)
class MMLimits:
    """The per-prompt counts --limit-mm-per-prompt names, modality by modality."""

    counts: tuple[tuple[str, int], ...]

    def count(self, modality: str) -> int:
        """The limit for ``modality``: as named, else vLLM's default (999)."""
        return dict(self.counts).get(modality, default_limit())

    def describe(self) -> str:
        """'image=1, video=0', as fit's lines name it."""
        return ", ".join(f"{m}={n}" for m, n in self.counts)


def _count(modality: str, value: Any) -> int:
    """One modality's count: a whole number, 0 or more, or {"count": N}; the size hints
    (width, height, num_frames, length) change the dummy item, which is not modelled."""
    if isinstance(value, dict):
        hints = sorted(set(value) - {"count"})
        if hints:
            raise InputError(f"{FLAG} {modality}: {', '.join(hints)} set the size of vLLM's "
                             "dummy item, which is not modelled (ridgeline profiles the "
                             "model's largest image): give the count alone")
        value = value.get("count", default_limit())
    if isinstance(value, str) and (whole := ascii_whole(value)) is not None:
        value = whole
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{FLAG} {modality}: the count must be a whole number, got {value!r}")
    if value < 0:
        raise InputError(f"{FLAG} {modality}: the count must be 0 or more (vLLM's "
                         f"BaseDummyOptions count: ge=0), got {value}")
    return value


def parse_limits(text: str | None, dotted: dict[str, Any] | None = None) -> MMLimits | None:
    """The limits of the flag's value ``text`` (JSON, or 'image=2,video=0') and of its dotted
    spellings (``dotted``: modality → count, the later word), None where neither is given.
    InputError, one line, for anything vLLM would not read or ridgeline does not model."""
    given: dict[str, Any] = {}
    if text is not None:
        stripped = text.strip()
        if not stripped:  # it had read as the flag given, printed as the default 'image=999'
            raise InputError(f"{FLAG} is empty: give a JSON object ('{{\"image\": 2}}') or "
                             "modality=count pairs ('image=2,video=0')")
        if stripped.startswith("{"):
            given = json_object(stripped, FLAG, '{"image": 2, "video": 0}')
        else:
            for part in filter(None, (p.strip() for p in stripped.split(","))):
                key, sep, value = part.partition("=")
                if not sep or not key.strip():
                    raise InputError(f"{FLAG} takes a JSON object ('{{\"image\": 2}}') or "
                                     f"modality=count pairs ('image=2,video=0'), got {text!r}")
                given[key.strip()] = value.strip()
    given |= {k: v for k, v in (dotted or {}).items() if v is not None}
    if text is None and not given:
        return None
    modalities = tuple(mm_limits_data()["modalities"])
    unknown = sorted(set(given) - set(modalities))
    if unknown:
        raise InputError(f"{FLAG}: {', '.join(unknown)} is none of vLLM's modalities "
                         f"({', '.join(modalities)})")
    return MMLimits(tuple((m, _count(m, given[m])) for m in modalities if m in given))


def model_modalities(model: ModelSpec) -> tuple[str, ...] | None:
    """The modalities vLLM's implementation of ``model`` takes (its processor's
    get_supported_mm_limits), None where ridgeline has not read it."""
    known = mm_limits_data()["architectures"].get(model.architecture)
    return None if known is None else tuple(known)


def text_model_caution(model: ModelSpec, limits: MMLimits | None) -> str:
    """What --limit-mm-per-prompt does for a model with no tower and no modalities known here
    (a text-only model): nothing in the releases modelled, whose ModelConfig builds no
    multimodal config for it and leaves the flag unread; releases of the 0.9/0.10 era refused
    it at start-up (engines.json vllm.mm_limits text_only_model). '' otherwise."""
    if limits is None or model.vision_item is not None or model.vision_params > 0 \
            or model_modalities(model) is not None:
        return ""
    return (f"{FLAG}: {model.name} ({model.architecture}) takes text alone, so the flag "
            "changes nothing (vLLM leaves it unread for a text-only model; its 0.9/0.10-era "
            "releases refused it: '`limit_mm_per_prompt` is only supported for multimodal "
            "models')")


def serves_text_only(model: ModelSpec, limits: MMLimits | None) -> bool:
    """Whether ``limits`` set every modality ``model`` takes to 0: vLLM then loads no tower
    and profiles none, as --language-model-only. A model without a tower, or no limits: no.
    InputError where the image is off but another modality the model takes stays on (vLLM
    would profile that instead), or where the model's modalities are not known."""
    has_tower = model.vision_item is not None or model.vision_params > 0
    if limits is None or not has_tower or limits.count("image") > 0:
        return False
    takes = model_modalities(model)
    if takes is None:
        raise InputError(f"{FLAG} image=0: which modalities vLLM's {model.architecture} takes "
                         "is not known here, so whether it still loads its tower is not either "
                         "(--language-model-only serves it text-only)")
    left = [m for m in takes if limits.count(m) > 0]
    if left:
        raise InputError(f"{FLAG} with image=0 leaves {', '.join(left)} on: vLLM would profile "
                         f"{model.architecture}'s tower on that instead, which ridgeline does "
                         f"not size (give {left[0]}=0 too, or --language-model-only)")
    return True


def images_per_prompt(limits: MMLimits | None, max_model_len: int, tokens_per_image: int) -> int:
    """The images one prompt may carry: max(1, min(the image limit, max_model_len ÷ tokens an
    image)) (get_max_items); with no length known, the limit. Gemma-3 at 32,768 tokens and no
    flag: min(999, 128) = 128."""
    limit = default_limit() if limits is None else limits.count("image")
    if max_model_len >= 1:
        limit = min(limit, max_model_len // tokens_per_image)
    return max(1, limit)
