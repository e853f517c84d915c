"""CLI: the value types argparse converts flags with. Each refuses a bad value with one line
(a ``ValueError`` turned into argparse's error); a name is checked against its catalog when
parsed, so a misspelt one fails even where it goes unused."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from ridgeline.errors import InputError, shorten
from ridgeline.units import (
    COUNT_EXAMPLES,
    TOKEN_EXAMPLES,
    count_as_typed,
    parse_count,
    parse_count_list,
    require_positive,
)
from ridgeline.units import MAX_BATCH as MAX_BATCH  # the library's cap on a batch, --batch's too


def _typed(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """Wrap a parser so argparse shows our one-line message."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


# data-parallel ranks: past any deployment (the largest published run DP attention over
# hundreds); simulate keeps one scheduler a rank, 10,000 of them ~4 s, 100,000 minutes
MAX_DP_RANKS = 10_000
# tokens cached per sequence where a command that prices a decode step is given none:
# decode's, amdahl's and utilization's alike
DEFAULT_CONTEXT_TOKENS = 2000


def _at_most(value: int, most: int | None, what: str) -> int:
    if most is not None and value > most:
        raise InputError(f"{what} must be at most {count_as_typed(most)}, got {value}")
    return value


def _positive_count(what: str, most: int | None = None, examples: str = TOKEN_EXAMPLES
                    ) -> Callable[[str], int]:
    """A whole number ≥ 1, at most ``most``; a refusal shows ``examples`` (a token length's
    by default, COUNT_EXAMPLES for a count of sequences, requests or GPUs)."""
    return _typed(lambda t: _at_most(int(require_positive(
        parse_count(t, what, examples, positive=True), what)), most, what))


def _how_many(what: str, most: int | None = None) -> Callable[[str], int]:
    """A count of sequences, requests, GPUs (a batch, --num-gpus): ≥ 1."""
    return _positive_count(what, most, COUNT_EXAMPLES)


def _step_tokens(text: str) -> int:
    """A step's token budget; SGLang's -1 (chunked prefill off) named as not modelled."""
    if text.strip() == "-1":
        raise argparse.ArgumentTypeError(
            "-1 is SGLang's --chunked-prefill-size for chunked prefill off, which is not "
            "modelled: give the tokens a prefill step may take (its --max-prefill-tokens, 16384 "
            "by default)")
    return _positive_count("max_num_batched_tokens")(text)


def _count(what: str, examples: str = TOKEN_EXAMPLES) -> Callable[[str], int]:
    """A whole number ≥ 0 (a prefix length, a draft length; COUNT_EXAMPLES for a count of
    requests, a seed)."""
    return _typed(lambda t: parse_count(t, what, examples))


def _plain_float(text: str, refusal: str) -> float:
    """A number as a user writes one: ASCII, no underscores ("１２" and "1_0" are Python's)."""
    try:
        if not text.isascii() or "_" in text:
            raise ValueError
        return float(text)
    except ValueError:
        raise InputError(f"{refusal}, got {text!r}") from None


def _positive_float(what: str, least: float | None = None,
                    most: float | None = None) -> Callable[[str], float]:
    """A positive number; within [least, most] where given (a plausible figure, not 1e-300
    GB/s or 1e290 GiB)."""
    def parse(text: str) -> float:
        value = float(require_positive(_plain_float(text, f"{what} must be a number"), what))
        if (least is not None and value < least) or (most is not None and value > most):
            raise InputError(f"{what} must be between {least or 0:g} and {most or math.inf:g}, "
                             f"got {value:g}")
        return value

    return _typed(parse)


def _share(what: str) -> Callable[[str], float]:
    """A share or a chance, 0 to 1 (amdahl --fraction): written in ASCII digits,
    -0 read as 0 (it printed as "-0")."""
    def parse(text: str) -> float:
        value = _plain_float(text, f"{what} must be a number between 0 and 1")
        if not 0.0 <= value <= 1.0:  # NaN fails it too
            raise InputError(f"{what} must be between 0 and 1, got {shorten(text)}")
        return value + 0.0

    return _typed(parse)


def _percentile(text: str) -> float:
    """A percentile in percent, as simulate and plan read it: from 1 to below 100 (0.9 would
    be p0.9, not p90); 0, a negative, nan and inf get that range, not "must be positive"."""
    value = _plain_float(text, "a percentile in percent, from 1 to below 100 (90 for p90)")
    if not 1 <= value < 100:  # nan fails it too
        raise InputError(f"a percentile in percent, from 1 to below 100 (90 for p90), got "
                         f"{value:g}")
    return value


MAX_MEMORY_GIB = 1e6  # a petabyte: past any one device's or host's memory
# about a MiB: below any device's or host's memory (the catalog's least is 8 GiB); 1e-308 GiB had
# divided into -inf and inf GiB (SGLang's reserve, TensorRT-LLM's shortfall)
MEMORY_GIB_RANGE = (1e-3, MAX_MEMORY_GIB)
# a share of memory an engine may take: 0.1% of the card up to all of it (vLLM's
# gpu_memory_utilization, le=1); 1e-308 had divided into a shortfall of inf GiB
MEMORY_FRACTION_RANGE = (1e-3, 1.0)
GBS_RANGE = (0.1, 1e5)  # GB/s of a memory or a link: a slow DIMM to past any HBM


def _count_list(what: str, most: int | None = None, examples: str = TOKEN_EXAMPLES
                ) -> Callable[[str], list[int]]:
    def parse(text: str) -> list[int]:
        values = [_at_most(v, most, what) for v in parse_count_list(text, what, examples)]
        twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
        if twice is not None:
            raise InputError(f"{what} lists {twice:,} twice")
        return values

    return _typed(parse)


def _weight_name(text: str) -> str:
    """A weight format, checked when parsed: a misspelt one fails even where it goes unused."""
    from ridgeline.precision import check_weight_choice

    check_weight_choice(text)
    return text


def _quantization_method(text: str) -> str:
    """vLLM's and SGLang's --quantization METHOD, checked when parsed; returned as given."""
    from ridgeline.engine_quantization import engine_method

    return engine_method(text).method


def _engine_dtype(text: str) -> str:
    from ridgeline.engine_quantization import engine_dtype

    return engine_dtype(text)


def _flash_attn(text: str) -> str:
    """llama.cpp's -fa: on, off or auto, or an alias llama-server reads (enabled, 1, -1)."""
    from ridgeline.engine_choices import flash_attn_value

    return flash_attn_value(text)


def _kv_name(text: str) -> str:
    """A KV dtype: ridgeline's name ('auto' is an alias), or a value some engine's
    --kv-cache-dtype takes (vLLM's fp8_inc), which the deployment checks against the engine's
    release (engine_choices.kv_cache_dtype_problem) and refuses where it is not modelled."""
    from ridgeline.engine_choices import engine_choice_values
    from ridgeline.precision import kv_dtype

    if text not in engine_choice_values():
        kv_dtype(text)
    return text


def _name_list(check: Callable[[str], str]) -> Callable[[str], str]:
    """A comma-separated list of names, each checked; returned as given."""

    def parse(text: str) -> str:
        parts = [part.strip() for part in text.split(",")]
        if not all(parts):
            raise InputError(f"empty name in the list {text!r}")
        for part in parts:
            check(part)
        return text

    return _typed(parse)


def _accelerator_name(text: str) -> str:
    from ridgeline.hardware import resolve_accelerator

    resolve_accelerator(text)
    return text


def _engine_name(text: str) -> str:
    from ridgeline.engines import engine_id

    if "," in text:  # a command that compares engines takes _name_list(_engine_name)
        raise InputError(f"this command runs one engine, got {text!r} (`ridgeline fit` "
                         "compares several)")
    engine_id(text)
    return text


def _not_empty(what: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if not text.strip():
            raise InputError(f"{what} is empty")
        return text

    return _typed(parse)


def _one_accelerator() -> Callable[[str], str]:
    """--gpu where a command answers for one card: a comma list is refused, by name."""
    def parse(text: str) -> str:
        if not text.strip():
            raise InputError("accelerator name is empty")
        if "," in text:
            raise InputError(f"--gpu {text}: this command answers for one accelerator (give one "
                             "--gpu); decode, prefill, roofline and fit take several, "
                             "comma-separated")
        return text

    return _typed(parse)
