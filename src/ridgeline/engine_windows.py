"""Which engines keep only the window of a sliding-window layer, and what one more token of
context then costs a pool sized in tokens.

- vLLM V1 pages each window group apart (``kvgroups.py``).
- SGLang gives window layers their own pool only for its hybrid-SWA architectures, sized at
  ``swa_full_tokens_ratio`` (0.8) of the full pool's tokens, and not for gpt-oss on
  data-center Blackwell, whose default attention backend (trtllm_mha) turns the pool off;
  every other model stores every token in every layer (Gemma-2 and Gemma-3 explicitly).
- llama.cpp keeps a window cache (window × slots + n_ubatch cells, at most -c) for the architectures it
  gives a window type; a GGUF of any other architecture (Mistral-7B-v0.1 loads as "llama")
  caches every token in every layer.
- TensorRT-LLM sizes its pool as if every layer were full attention, each window size then
  given a fixed share of it: counted here as every layer growing.
The lists are data, with their sources, in ``engines.json``.
"""

from __future__ import annotations

from ridgeline.datafiles import load_data
from ridgeline.deployment import Deployment
from ridgeline.kvcache import attention_kv_bytes_per_token, kv_footprint
from ridgeline.layouts import FULL, WINDOW_MIXERS
from ridgeline.vllm_memory import parse_version


def has_windows(dep: Deployment) -> bool:
    return any(layer.mixer in WINDOW_MIXERS for layer in dep.model.layers)


def honours_windows(dep: Deployment, engine_version: str | None = None) -> bool:
    """Whether ``dep.engine`` (at ``engine_version``; default the newest) caches only the
    window of its window layers."""
    engines = load_data("engines.json")
    if dep.engine == "sglang":
        hybrid = engines["sglang"]["hybrid_swa"]
        arch = dep.model.architecture
        off = hybrid["off_on_trtllm_mha"]  # its default attention backend on sm100
        if arch in off["architectures"] and dep.accelerator.id in off["accelerators"]:
            return False
        since = hybrid["since"].get(arch)
        if since and engine_version and parse_version(engine_version) < parse_version(since):
            return False
        return arch in hybrid["architectures"]
    if dep.engine.startswith("llama.cpp"):
        return dep.model.model_type in engines["llama.cpp"]["swa_model_types"]
    # TensorRT-LLM's PyTorch backend keeps one pool of max_seq_len windows unless
    # kv_cache_config.max_attention_window is set (KvCacheCreator in _torch/pyexecutor/
    # _util.py; only Gemma-4 gets windows of its own): every token in every layer. With
    # windows set, each window size's pool gets an equal share of the memory (from v1.2.0rc2;
    # before it, shares weighted by window), not modelled here
    return dep.engine != "trtllm"


def trtllm_window_caution(dep: Deployment) -> str:
    """What to say where TensorRT-LLM caches every token of ``dep``'s window layers (its
    default: ``honours_windows``), or "": the setting that would keep only the windows,
    kv_cache_config.max_attention_window (variable sliding-window attention, one window per
    layer, given in the --extra_llm_api_options YAML), which ridgeline does not read, since
    the pool it then builds (a share of the memory per window size) is not modelled here.
    Gemma-3-27B: 52 of 62 layers windowed at 1,024 tokens."""
    if dep.engine != "trtllm" or not has_windows(dep):
        return ""
    windowed = [layer for layer in dep.model.layers if layer.mixer in WINDOW_MIXERS]
    sizes = sorted({layer.window_tokens for layer in windowed if layer.window_tokens})
    at = f" at {', '.join(f'{n:,}' for n in sizes)} tokens" if sizes else ""
    return (f"TensorRT-LLM caches every token of {dep.model.name}'s {len(windowed)} of "
            f"{dep.model.num_layers} layers windowed{at}, as sized here, unless "
            "kv_cache_config.max_attention_window (in the --extra_llm_api_options YAML) lists "
            "a window per layer; ridgeline does not read that setting or size the pool it "
            "builds (a share of the memory per window size), so a windowed cache's "
            "conversations are not counted here (`--engine vllm` shows one that keeps only "
            "the windows)")


def sglang_swa_ratio() -> float:
    return float(load_data("engines.json")["sglang"]["hybrid_swa"]["swa_full_tokens_ratio"])


def token_bytes(dep: Deployment, swa_ratio: float | None = None,
                engine_version: str | None = None) -> float:
    """Per GPU, what one more token of context costs an engine that sizes its pool in tokens:
    the full-attention layers; with SGLang's hybrid pool also ratio × the window layers
    (``swa_ratio``: its --swa-full-tokens-ratio, default 0.8); where windows are not
    honoured, every attention layer."""
    footprint = kv_footprint(dep.model, 1, dep.kv.bytes_per_element)
    if not has_windows(dep):
        per_token = footprint.bytes_per_token_growing
    elif not honours_windows(dep, engine_version):
        per_token = footprint.bytes_per_token_naive
    elif dep.engine == "sglang":
        windowed = sum(1 for layer in dep.model.layers if layer.mixer in WINDOW_MIXERS)
        ratio = sglang_swa_ratio() if swa_ratio is None else swa_ratio
        per_token = footprint.bytes_per_token_growing + ratio * windowed \
            * attention_kv_bytes_per_token(dep.model, dep.kv.bytes_per_element)
    else:
        per_token = footprint.bytes_per_token_growing
    return per_token * dep.kv_replication / dep.rank_gpus


def sglang_window_pool_words(dep: Deployment, swa_ratio: float | None = None,
                             engine_version: str | None = None) -> str:
    """Where SGLang keeps ``dep``'s window layers in its hybrid-SWA pool, what that pool
    charges a token (``token_bytes``) and why it is more than the window's bytes: the window
    layers' pool holds ``swa_ratio`` (0.8) of the full pool's tokens, whatever the window;
    else "". gpt-oss-120b on one H100: "36 KiB for the 18 full layers + 0.8 × 36 KiB for the
    18 window layers = 64.8 KiB a token"."""
    if dep.engine != "sglang" or not has_windows(dep) \
            or not honours_windows(dep, engine_version):
        return ""
    from ridgeline.units import fmt_binary_bytes

    ratio = sglang_swa_ratio() if swa_ratio is None else swa_ratio
    footprint = kv_footprint(dep.model, 1, dep.kv.bytes_per_element)
    windowed = [layer for layer in dep.model.layers if layer.mixer in WINDOW_MIXERS]
    full_layers = sum(1 for layer in dep.model.layers if layer.mixer == FULL)
    scale = dep.kv_replication / dep.rank_gpus  # one GPU's share, as token_bytes counts it
    window_bytes = attention_kv_bytes_per_token(dep.model, dep.kv.bytes_per_element) \
        * len(windowed) * scale
    sizes = sorted({layer.window_tokens for layer in windowed if layer.window_tokens})
    window = f" {'/'.join(f'{n:,}' for n in sizes)}-token" if sizes else ""
    return (f"SGLang's hybrid-SWA pool holds its window layers at --swa-full-tokens-ratio "
            f"{ratio:g} of the full layers' tokens, not at their{window} window: "
            f"{fmt_binary_bytes(footprint.bytes_per_token_growing * scale)} for the "
            f"{full_layers} full layers + {ratio:g} × {fmt_binary_bytes(window_bytes)} for "
            f"the {len(windowed)} window layers = "
            f"{fmt_binary_bytes(token_bytes(dep, swa_ratio, engine_version))} a token"
            + (" per GPU" if dep.rank_gpus > 1 else ""))


def sglang_window_pool_caution(dep: Deployment, context: int) -> str:
    """kv's caution where SGLang's hybrid-SWA pool charges a conversation more than the
    windows kept (``sglang_window_pool_words``), so that kv's raw count and fit's pool read
    as two counts, not a contradiction: gpt-oss-120b at 131,072 tokens on one H100, 4.504
    GiB kept, 8.100 GiB of SGLang's pool. Else ""."""
    words = sglang_window_pool_words(dep)
    if not words:
        return ""
    from ridgeline.units import GIB

    each = token_bytes(dep) * context / GIB
    return (f"{words}; so a conversation of {context:,} tokens takes {each:,.3f} GiB of "
            "SGLang's pool" + (" per GPU" if dep.rank_gpus > 1 else "")
            + ", a pool of what mem_fraction_static leaves beside the weights: "
            "`ridgeline fit --engine sglang` counts the conversations it holds, this count "
            "the raw memory")
