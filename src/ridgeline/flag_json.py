"""A launch flag's JSON object, as vllm serve reads one (--speculative-config, --eplb-config,
--limit-mm-per-prompt, --compilation-config; TensorRT-LLM's --cache-transceiver-config, the
YAML's mapping): the one reader, so every such flag refuses text
that is not an object in the same one line, with an example of what it takes."""

from __future__ import annotations

import json
from typing import Any

from ridgeline.errors import InputError


def json_object(text: str, flag: str, example: str) -> dict[str, Any]:
    """``text`` read as a JSON object, else InputError naming ``flag`` and showing ``example``:
    '{"num_redundant_experts": 32}' → {'num_redundant_experts': 32}; '32' and '{bad' refused."""
    try:
        found = json.loads(text)
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise InputError(f"{flag} takes a JSON object, as vllm serve does ('{example}'), "
                         f"got {text!r}")
    return found
