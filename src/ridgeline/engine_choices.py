"""The values an engine's choice flag takes, release by release (data/engine_choices.json):
vLLM's and SGLang's --kv-cache-dtype, refused in one line where the release --engine-version
names (or, without it, the release a run is priced as) would refuse it at start-up; and
llama.cpp's -fa, read in any spelling llama-server reads (enabled, 1, -1).

``ridgeline fit llama-3.1-8b --gpu h100 --engine-version 0.18 --kv-cache-dtype bf16`` stops,
as vllm serve 0.18 does::

    ridgeline: error: vLLM 0.18 refuses --kv-cache-dtype bf16: it takes one of auto, float16,
    bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla (bf16 is ridgeline's name: give
    --kv-dtype bf16, or the engine's bfloat16)

A value the release takes but ridgeline has no cache format for (vLLM's fp8_inc) is refused
as not modelled, rather than sized as another; ridgeline's own --kv-dtype keeps its names.
--block-size is checked so too, for every command that takes it (``block_size_refusal``):
vLLM's BlockSize choices before v0.18.0, any positive block from it; TensorRT-LLM's powers of
two; SGLang's any page; llama.cpp's none. Without the flag, prefix matches in the block the
engine's pool takes (``engine_block_size``: vLLM 0.34's 64 on NVIDIA GPUs, 16 on ROCm).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from ridgeline.datafiles import engine_defaults, load_data
from ridgeline.engine_names import engine_name
from ridgeline.engine_versions import release_before, sized_version
from ridgeline.errors import InputError
from ridgeline.prefix import BLOCK_SETTINGS
from ridgeline.vllm_memory import default_block_size, vllm_accounting

KV_CACHE_DTYPE_FLAG = "--kv-cache-dtype"


@dataclass(frozen=True)
class EngineChoice:
    """One value of an engine's choice flag: the first release that takes it (None: every
    release from the list's checked_from), whether ridgeline sizes it, and why not;
    ``until``, the first release that no longer takes it (SGLang's fp4_e2m1: taken from
    0.5.4.post3, gone from 0.5.21), None while every release read still takes it."""

    value: str
    since: str | None
    modelled: bool
    why: str = ""
    until: str | None = None

    def dropped_by(self, engine: str, release: str) -> bool:
        """Whether ``release`` is ``until`` or later: SGLang 0.5.23 and fp4_e2m1 (until
        0.5.21), not 0.5.20."""
        return self.until is not None and not release_before(engine, release, self.until)


@dataclass(frozen=True)
class ChoiceList:
    """An engine's values for one flag, checked from ``checked_from`` (the oldest release
    whose list was read; earlier releases are not checked); ``read_through``, the newest
    release whose list was read, where values are read only on main (those releases refuse
    them)."""

    engine: str
    checked_from: str
    choices: tuple[EngineChoice, ...]
    read_through: str | None = None

    def taken_by(self, release: str) -> tuple[EngineChoice, ...]:
        """The values ``release`` takes: those with no ``since``, or one it has reached, less
        those dropped by then (``until``: SGLang 0.5.23 has no fp4_e2m1). A value read only
        on main (``since`` "main": its first release not read) is left out; ridgeline
        refuses it as not modelled under any release."""
        return tuple(c for c in self.choices if not c.dropped_by(self.engine, release) and (
            c.since is None or (c.since != "main" and not release_before(self.engine, release,
                                                                         c.since))))

    def refused_by(self, release: str, choice: EngineChoice) -> bool:
        """Whether ``release`` is known to refuse ``choice``: one that came in a later release
        or was dropped by ``release`` (SGLang 0.5.21 and fp4_e2m1; vLLM 0.19 and
        turboquant_k8v4, from 0.20.0), or one read only on main where ``release`` is no later
        than ``read_through`` (none now: vLLM's list was read through 0.34.0, SGLang's through
        0.5.23); a main-only value under a later release is not known."""
        if choice.dropped_by(self.engine, release):
            return True
        if choice.since is None:
            return False
        if choice.since != "main":
            return release_before(self.engine, release, choice.since)
        return self.read_through is not None and not release_before(
            self.engine, self.read_through, release)


@cache
def kv_cache_dtype_choices(engine: str) -> ChoiceList | None:
    """``engine``'s --kv-cache-dtype values, or None for an engine without the flag."""
    row = load_data("engine_choices.json")["kv_cache_dtype"].get(engine)
    if row is None:
        return None
    return ChoiceList(engine, row["checked_from"], tuple(
        EngineChoice(c["value"], c.get("since"), bool(c["modelled"]), c.get("why", ""),
                     c.get("until"))
        for c in row["choices"]), row.get("read_through"))


def engine_choice_values() -> frozenset[str]:
    """Every value some engine's --kv-cache-dtype takes (vLLM's fp8_inc), which the flag's
    parse lets through to ``kv_cache_dtype_problem`` rather than refuse as no dtype at all."""
    return frozenset(c.value for engine in ("vllm", "sglang")
                     for c in (kv_cache_dtype_choices(engine) or ChoiceList(engine, "", ())).choices)


def block_size_problem(engine: str, version: str | None, block: int) -> str:
    """Why ``engine`` at ``version`` (None: the release a run is priced as, vLLM 0.34) refuses
    ``block`` as its --block-size, or "": before vLLM 0.18.0 one of CacheConfig's BlockSize
    choices (1, 8, 16, 32, 64, 128, 256), from it any whole number above 0 (block_size: int,
    gt=0). An engine without a list here is not checked."""
    row = load_data("engine_choices.json")["block_size"].get(engine)
    release = sized_version(engine, version)
    if row is None or release is None or not release_before(engine, release,
                                                            row["choices_until"]):
        return ""
    # a choice a later release added (vLLM's 256, from 0.11.0) is none of an earlier one's
    choices = [c for c in row["choices"]
               if not release_before(engine, release, row.get("choices_from", {}).get(str(c)))]
    if block in choices:
        return ""
    said = f"{engine_name(engine)} {release}" + ("" if version is not None
                                                 else " (the default --engine-version)")
    added = [f"{c} from v{row['choices_from'][str(c)]}" for c in row["choices"]
             if c not in choices]
    return (f"{said}'s --block-size is one of {', '.join(map(str, choices))}; got "
            f"{block} ({''.join(a + '; ' for a in added)}from v{row['choices_until']}, any "
            "block of 1 token or more)")


def tokens_per_block_problem(block: int) -> str:
    """Why TensorRT-LLM refuses ``block`` as its tokens_per_block (a power of two greater than
    1: docs/source/features/kvcache.md), or "" where it takes it: the pool and prefix
    matching share the rule."""
    if block >= 2 and not block & (block - 1):
        return ""
    return f"TensorRT-LLM's tokens_per_block must be a power of two greater than 1; got {block}"


def block_size_refusal(engine: str, version: str | None, block: int) -> str:
    """Why ``engine`` at ``version`` (None: the release a run is priced as) refuses ``block``
    as its --block-size (--page-size, --tokens-per-block), or "": vLLM's list before v0.18.0
    (``block_size_problem``), TensorRT-LLM's powers of two (``tokens_per_block_problem``),
    llama.cpp's single-token cells (it has no such flag); SGLang takes any page_size. fit,
    simulate, prefix, decode and prefill refuse a flag by it alike (``ridgeline prefix --engine-version 0.17
    --block-size 24`` as ``ridgeline simulate`` does); a block no attention backend takes
    for the model (vllm_attention_block) or past the pool (kvpool.block_past_pool) needs
    the deployment, which prefix has not."""
    if engine.startswith("llama.cpp"):  # decode's and prefill's refusal too (cli_pool)
        return ("--block-size sizes a serving engine's blocks (vLLM's block_size, SGLang's "
                "page_size, TensorRT-LLM's tokens_per_block); llama.cpp caches single-token "
                "cells")
    if engine == "trtllm":
        return tokens_per_block_problem(block)
    return block_size_problem(engine, version, block)


def engine_block_size(engine: str, version: str | None = None, vendor: str = "") -> int:
    """The tokens per cached block ``engine`` matches where none is given (engines.json): vLLM
    ``version``'s block_size on a card of ``vendor`` ("" read as NVIDIA), as its pool takes it
    (vllm_memory.default_block_size: 0.34 64, 16 on ROCm and before 0.34), SGLang's page_size
    1, TensorRT-LLM's tokens_per_block 32. A model's kernel may set another (an MLA cache's:
    vllm_mla_block.py, trtllm_memory.flash_mla_block), which `ridgeline prefix` takes from
    the pool where --model names the model."""
    if engine not in BLOCK_SETTINGS:
        raise InputError(f"{engine}: prefix models the block caches vLLM, SGLang and "
                         "TensorRT-LLM share between requests; llama-server keeps each slot's "
                         f"own last prompt instead (give --engine {', '.join(BLOCK_SETTINGS)})")
    if engine == "vllm":
        return default_block_size(vllm_accounting(version), vendor or "nvidia")
    return int(engine_defaults(engine)[BLOCK_SETTINGS[engine]])


def block_source(engine: str, version: str | None = None, card: str = "",
                 vendor: str = "") -> str:
    """Whose default ``engine_block_size`` gave, in words: "vLLM 0.34's default on NVIDIA
    GPUs", "vLLM 0.34's default on mi300x", "SGLang's default"."""
    if engine != "vllm":
        return f"{engine_name(engine)}'s default"
    where = card or ("ROCm" if vendor == "amd" else "NVIDIA GPUs")
    asked = vllm_accounting(version).version
    newest = vllm_newer_than_read(asked)
    if newest:  # no default of a release ridgeline has not read: the newest read's, said so
        return f"vLLM {newest}'s default on {where}, the newest release read, taken for {asked}"
    return f"vLLM {asked}'s default on {where}"


def vllm_newer_than_read(version: str | None) -> str:
    """The newest vLLM release ridgeline has read (engines.json newest_checked, 0.34) where
    ``version`` is a later minor one (0.99, which vllm_accounting prices at 0.34's rules),
    else "" (0.34.1, a patch of it, is read as it)."""
    from ridgeline.vllm_memory import parse_version, vllm_data

    newest = str(vllm_data()["newest_checked"])
    if version is None or parse_version(version)[:2] <= parse_version(newest)[:2]:
        return ""
    return newest


def flash_attn_value(text: str) -> str:
    """llama.cpp's -fa value as ridgeline keeps it, on, off or auto, from any spelling
    llama-server reads ('enabled', '1', '-1': data/engine_choices.json flash_attn); a
    ValueError naming them for any other, as llama-server stops ('unknown value for
    --flash-attn')."""
    values: dict[str, str] = load_data("engine_choices.json")["flash_attn"]["llama.cpp"][
        "values"]
    if text in values:
        return values[text]
    aliases = ", ".join(v for v in values if v not in values.values())
    raise ValueError(f"llama.cpp's -fa takes on, off or auto (or {aliases}), got {text!r}")


def kv_cache_dtype_problem(engine: str, version: str | None, value: str,
                           flag: str = KV_CACHE_DTYPE_FLAG) -> str:
    """Why ``engine`` at ``version`` (None: the release a run is priced as) refuses
    ``value`` for --kv-cache-dtype, or why ridgeline does not size it; "" where it is read.
    The engines match the value exactly (argparse's choices, vLLM's Literal), so 'BF16' and
    'fp8' under SGLang are refused as the engines refuse them. A value ridgeline does not size
    that came after ``version`` (vLLM 0.11.0's turboquant_k8v4, SGLang 0.5.3's fp4_e2m1) or
    was dropped by it (SGLang 0.5.23's fp4_e2m1, gone from 0.5.21) is refused as that
    release refuses it, the refusal the user would meet first."""
    listed = kv_cache_dtype_choices(engine)
    if listed is None:
        return ""
    release = sized_version(engine, version)
    if release is None or release_before(engine, release, listed.checked_from):
        return ""
    name = engine_name(engine)
    known = {c.value: c for c in listed.choices}
    taken = listed.taken_by(release)
    choice = known.get(value)
    if choice is not None and not choice.modelled and not listed.refused_by(release, choice):
        return _unmodelled(engine, choice, flag)
    if choice is not None and choice in taken:
        return ""
    said = f"{name} {release}" if version is not None else \
        f"{name} {release} (the default --engine-version)"
    later = ""
    if choice is not None and choice.dropped_by(engine, release):
        later = _dropped(name, choice)
    elif choice is not None and choice.since:
        came = f"in v{choice.since}" if choice.since != "main" else \
            f"after v{listed.read_through}"
        later = (f"; {value} came {came}, so name that --engine-version or a later one"
                 if choice.modelled else
                 f"; {value} came {came}, and ridgeline does not size it under any release: "
                 f"{name}'s {value} is {choice.why}")
    hint = "" if choice is not None else _ridgeline_name_hint(engine, value, taken, flag)
    return (f"{said} refuses {flag} {value}: it takes one of "
            f"{', '.join(c.value for c in taken)}{later}{hint}")


def unmodelled_choice_problem(value: str, flag: str = KV_CACHE_DTYPE_FLAG) -> str:
    """Why ``value``, one some engine's --kv-cache-dtype takes but ridgeline has no cache
    format for (vLLM's fp8_inc, SGLang's fp4_e2m1), is not sized, under whichever spelling
    and engine it came; "" for any other value, and for one of ridgeline's own names (its
    nvfp4, TensorRT-LLM's cache, beside vLLM's value of that name)."""
    from ridgeline.precision import kv_dtype

    try:
        kv_dtype(value)
        return ""
    except InputError:
        pass
    for engine in ("vllm", "sglang"):
        listed = kv_cache_dtype_choices(engine)
        for choice in listed.choices if listed else ():
            if choice.value == value and not choice.modelled:
                return _unmodelled(engine, choice, flag)
    return ""


def _dropped(name: str, choice: EngineChoice) -> str:
    """The tail of a release's refusal of a value it no longer takes: where it was taken and
    what to name instead (SGLang's fp4_e2m1, taken from v0.5.4.post3 until v0.5.21)."""
    taken = (f"from v{choice.since} " if choice.since and choice.since != "main" else "") + \
        f"until v{choice.until}"
    if not choice.modelled:
        return (f"; {choice.value} was taken {taken}, and ridgeline does not size it under "
                f"any release: {name}'s {choice.value} is {choice.why}")
    return (f"; {choice.value} was taken {taken}, so name an --engine-version before "
            f"v{choice.until}")


def _unmodelled(engine: str, choice: EngineChoice, flag: str) -> str:
    return (f"{flag} {choice.value} is not modelled: {engine_name(engine)}'s {choice.value} "
            f"is {choice.why}")


def _ridgeline_name_hint(engine: str, value: str, taken: tuple[EngineChoice, ...],
                         flag: str = KV_CACHE_DTYPE_FLAG) -> str:
    """What to give instead: the engine's own value where ``value`` is one but for its case
    or spaces (Auto, 'fp8_e4m3 '); where it is ridgeline's name for a cache (bf16, fp16, fp8
    under SGLang), ridgeline's flag and the engine's spelling of it, or, for a cache the
    engine does not keep (q8_0, int8 under vLLM), the caches it keeps; "" otherwise, and for
    another engine's own value (vLLM's fp8_ds_mla under SGLang)."""
    from ridgeline.errors import InputError
    from ridgeline.precision import kv_dtype, kv_dtypes

    same = [c.value for c in taken if c.value == value.strip().lower()]
    if same:
        return f" (the engine reads its values exactly: give {flag} {same[0]})"
    try:
        cache = kv_dtype(value)
    except InputError:
        return ""
    if not cache.cached_by(engine):
        if value in engine_choice_values():  # another engine's own value (fp8_ds_mla)
            return ""
        # a packed record a token (fp8_ds_mla) serves one model family: not offered for any
        keeps = ", ".join(k for k, d in kv_dtypes().items()
                          if d.cached_by(engine) and not d.elements_per_token)
        return (f" ({value} is ridgeline's name for a cache {engine_name(engine)} does not "
                f"keep; it keeps {keeps})")
    spelled = [c.value for c in taken if c.modelled and c.value != "auto"
               and kv_dtype(c.value).id == cache.id]
    engine_word = f", or the engine's {', '.join(spelled)}" if spelled else ""
    return f" ({value} is ridgeline's name: give --kv-dtype {value}{engine_word})"
