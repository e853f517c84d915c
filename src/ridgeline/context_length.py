"""The context a model is served at and was trained for: the longest max_model_len each
engine derives from the config (``served_positions``, with rope_scaling's stretch where the
engine applies it), where that number comes from (``positions_label``), and the caution for a
length past it (``trained_context_caution``).
"""

from __future__ import annotations

from ridgeline.model import ModelSpec

# rope types whose factor vLLM does not apply to max_position_embeddings (the config's
# positions already count the stretch): vLLM's _get_and_verify_max_len
_VLLM_UNSCALED_ROPE = ("su", "longrope", "llama3")


def _stated(spec: ModelSpec, engine: str) -> tuple[int | None, str]:
    """The config's own length an engine starts from, before any rope stretch, and its key.
    vLLM takes model_max_length over every other key where a config states one (Command R's
    131,072 over its 8,192 max_position_embeddings: _get_and_verify_max_len); SGLang reads it
    before max_position_embeddings (get_context_length's CONTEXT_LENGTH_KEYS); llama.cpp's
    n_ctx_train is model_max_length only for Cohere's converter (convert_hf_to_gguf's
    CommandR2Model), max_position_embeddings for every other family."""
    stated = spec.model_max_length
    if stated is not None and (not engine.startswith("llama.cpp") or spec.model_type == "cohere"):
        return stated, "model_max_length"
    return spec.max_position_embeddings, "max_position_embeddings"


def _served(spec: ModelSpec, engine: str) -> tuple[int | None, str]:
    """(served_positions, where it comes from for a message)."""
    raw, key = _stated(spec, engine)
    rs = spec.rope_scaling
    plain = (raw, key)
    # Gemma 3's 131,072 positions already count its linear ×8 (its card: a 128K context);
    # vLLM skips its factor by name, and ridgeline takes SGLang to serve the same context
    if rs is None or engine.startswith("llama.cpp") or "gemma3" in spec.architecture.lower():
        return plain
    if engine == "sglang":
        if raw is None or rs.original_positions is not None or rs.type == "llama3":
            return plain
        base, field = raw, key
    elif rs.type in _VLLM_UNSCALED_ROPE:
        return plain
    elif rs.type == "yarn" and rs.original_positions:
        base, field = rs.original_positions, "original_max_position_embeddings"
    elif raw is None:
        return plain
    else:
        base, field = raw, key
    served = int(base * rs.factor)
    if served == raw:
        return plain
    return served, f"{field} {base:,} × rope_scaling {rs.type} factor {rs.factor:g}"


def served_positions(spec: ModelSpec, engine: str) -> int | None:
    """The longest max_model_len an engine derives from the config (its default, and the
    most it accepts without an override), or None where the config states no positions.

    vLLM: model_max_length where the config states one, else max_position_embeddings; with
    rope_scaling of a type other than su/longrope/llama3, that × factor, and for YaRN
    original_max_position_embeddings × factor (vllm/config.py _get_and_verify_max_len), so a
    Qwen3 config given Qwen's YaRN block (factor 4, original 32,768) serves 131,072, and
    Command R (8,192 positions, model_max_length 131,072) serves 131,072; TensorRT-LLM is taken
    to read it as vLLM does (not checked). SGLang (hf_transformers_utils.get_context_length):
    model_max_length before max_position_embeddings, × factor unless the block states
    original_max_position_embeddings or is llama3 — Qwen3 with YaRN stays at 40,960 there
    until --context-length. llama.cpp: n_ctx_train, the config's own positions (Cohere's
    model_max_length, as its converter writes it)."""
    return _served(spec, engine)[0]


def positions_label(spec: ModelSpec, engine: str) -> str:
    """Where served_positions' number comes from, for a message."""
    return _served(spec, engine)[1]


# the engines whose rules for the served context differ (TensorRT-LLM is taken to read the
# config as vLLM does), as a question that names no engine speaks of them
ENGINE_RULES = {"vllm": "vLLM", "sglang": "SGLang", "llama.cpp": "llama.cpp"}


def served_context_caution(spec: ModelSpec, tokens: int, engine: str | None = None) -> str:
    """``tokens`` past the context ``engine`` serves ``spec`` at (served_positions), or "".
    With no engine named (`attention`), against each engine's: past every engine's, the
    caution one engine's would give (Command R past 131,072, its model_max_length in each);
    past only some (a YaRN block vLLM applies and SGLang and llama.cpp do not: Qwen3 with
    YaRN at 131,072 against 40,960), which engines refuse the length and which serve it."""
    if engine is not None:
        return trained_context_caution(spec.name, served_positions(spec, engine), tokens,
                                       positions_label(spec, engine))
    served = {name: _served(spec, e) for e, name in ENGINE_RULES.items()}
    limits = {name: (n, label) for name, (n, label) in served.items() if n}
    if not limits or tokens <= min(n for n, _ in limits.values()):
        return ""
    longest, label = max(limits.values())
    if tokens > longest:
        return trained_context_caution(spec.name, longest, tokens, label)
    refusing = _grouped({k: v for k, v in limits.items() if v[0] < tokens})
    serving = _grouped({k: v for k, v in limits.items() if v[0] >= tokens})
    return (f"{tokens:,} tokens exceed {spec.name}'s context as "
            + " and ".join(f"{names} serve{'s' * (' and ' not in names)} it, {n:,} ({why})"
                           for names, n, why in refusing)
            + ": a longer max_model_len is refused there without an override; "
            + " and ".join(f"{names} serve{'s' * (' and ' not in names)} up to {n:,} ({why})"
                           for names, n, why in serving))


def _grouped(limits: dict[str, tuple[int, str]]) -> list[tuple[str, int, str]]:
    """(engines named together, their context, where it comes from), one per context."""
    groups: dict[tuple[int, str], list[str]] = {}
    for name, limit in limits.items():
        groups.setdefault(limit, []).append(name)
    return [(" and ".join(names), n, why) for (n, why), names in groups.items()]


def trained_context_caution(model: str, limit: int | None, tokens: int,
                            label: str = "max_position_embeddings") -> str:
    """``tokens`` past ``limit`` (max_position_embeddings, or what ``label`` names), or ""."""
    if not limit or tokens <= limit:
        return ""
    return (f"{tokens:,} tokens exceed {model}'s {limit:,}-token context "
            f"({label}): engines refuse a longer max_model_len, and the model "
            "was not trained for it")


def past_length_refusal(context: int, max_model_len: int | None, engine: str,
                        what: str = "--context", length: str = "--max-model-len") -> str:
    """Why ``engine`` runs no ``context``-token request under ``max_model_len`` (None: none
    set, the model's), or "": it admits none longer. decode and prefill refuse their
    --context and --prompt-len so, fit_report its ``context`` (``what`` and ``length`` are
    the names the caller was given them by): 'context 8,192 is past max_model_len 4,096:
    vllm admits no longer request; give a max_model_len of at least 8,192'."""
    if max_model_len is None or context <= max_model_len:
        return ""
    return (f"{what} {context:,} is past {length} {max_model_len:,}: {engine} admits no "
            f"longer request; give a {length} of at least {context:,}")
