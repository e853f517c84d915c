"""llama-server's own launch flags, read as ridgeline's settings, so that a pasted
``llama-server`` line (fit's own start line among them) runs unedited:

- ``-c N`` (``--ctx-size``): the cells all ``-np`` slots share; each slot's conversation is
  ``-c ÷ -np`` (--max-model-len), ``-c 0`` the model's trained context over the slots;
- ``-ctk X -ctv X`` (``--cache-type-k/-v``): one KV dtype, --kv-dtype X; a mixed pair is
  refused, as ridgeline sizes K and V at one type;
- ``-np N`` in decode and prefill: the slots, at most N running; without --batch a batch of
  N (every slot busy), and without decode's --context each slot's ``-c ÷ -np``;
- a bare ``-fa`` (last, before a flag, or before MODEL): on, the switch builds before PR
  #15434 (late August 2025) took.

``fit llama-3.1-8b --engine llama.cpp -c 96000 -np 4 --kv-unified`` sizes what
``--max-model-len 24000 -np 4`` sizes: four slots of 24,000 tokens in 96,000 cells.
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any

from ridgeline.errors import InputError

# llama.cpp common/arg.cpp, '-fa, --flash-attn': a switch (no value) until PR #15434 made it
# on|off|auto (LLAMA_FLASH_ATTN_TYPE_*; WasmEdge PR #4343, bumping to b6343 on 2025-09-01:
# "The type of flash attention is changed from bool to string"); PR #15746 (2025-09-02)
# added 1/0/-1. engine_choices.json keeps the same sources for the values.
BARE_FLASH_ATTN = ("-fa", "--flash-attn")
BARE_FLASH_ATTN_NOTE = ("bare -fa read as -fa on (builds before llama.cpp PR #15434, late "
                        "August 2025, took it as a switch; later ones take on|off|auto)")


def bare_flash_attn(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` with a bare ``-fa`` read as ``-fa=on``, and whether one was: bare where no
    value of llama-server's follows (the last word, a flag, or MODEL: ``fit -fa llama-3.1-8b``
    is -fa on and the model); -fa on|off|auto and its aliases are left as given."""
    from ridgeline.datafiles import load_data

    # on, off, auto, enabled, disabled, 1, 0, -1 (engine_choices.json, as llama-server reads)
    values = load_data("engine_choices.json")["flash_attn"]["llama.cpp"]["values"]
    out: list[str] = []
    bare = False
    for i, token in enumerate(argv):
        following = argv[i + 1] if i + 1 < len(argv) else None
        if token in BARE_FLASH_ATTN and following not in values:
            out.append(f"{token}=on")
            bare = True
        else:
            out.append(token)
    return out, bare


def flash_attn_typo(argv: list[str], extra: list[str]) -> str:
    """The one line for a word after a bare -fa that argparse then found no place for (``fit
    llama-3.1-8b -fa onn``): read as -fa's value mistyped, the value llama-server refuses
    (engine_choices.flash_attn_value); "" where no such word is left over."""
    from ridgeline.engine_choices import flash_attn_value

    for token, following in itertools.pairwise(argv):
        if token in BARE_FLASH_ATTN and following in extra and not following.startswith("-"):
            try:
                flash_attn_value(following)
            except ValueError as exc:
                return f"argument {token}: {exc}"
    return ""


def _llamacpp(engine: Any) -> bool:
    engines = engine if isinstance(engine, list) else [engine]
    return all(isinstance(e, str) and e.startswith("llama.cpp") for e in engines)


def apply_llamacpp_flags(args: argparse.Namespace) -> None:
    """Read -c/--ctx-size and -ctk/-ctv into ``args`` (max_model_len, kv_dtype); an
    InputError where they are given under another engine, a mixed K/V pair, or -c beside
    --max-model-len."""
    _apply_cache_types(args)
    _apply_ctx_size(args)
    _apply_slots(args)


def _apply_slots(args: argparse.Namespace) -> None:
    """decode's and prefill's point from a llama-server line: where --batch is absent, -np
    N's slots all busy (a batch of N, the most it runs); where decode's --context is
    absent, each slot's conversation -c ÷ -np (fit's length). Each reading said in
    ``args.llamacpp_read``, the note after the report."""
    if getattr(args, "command", None) not in ("decode", "prefill") \
            or not _llamacpp(getattr(args, "engine", None)):
        return
    read: list[str] = []
    slots = getattr(args, "max_num_seqs", None)
    if slots and getattr(args, "batch", 0) is None:
        args.batch = [slots] if args.command == "decode" else slots
        one = "a sequence" if args.command == "decode" else "a prompt"
        read.append(f"batch {slots:,}: {one} in each of -np {slots:,}'s slots (--batch "
                    "prices fewer)")
    cells = getattr(args, "ctx_size", None)
    if cells is not None and args.command == "decode" and args.context is None:
        args.context = [args.max_model_len]
        from ridgeline.datafiles import engine_defaults

        engine = args.engine[0] if isinstance(args.engine, list) else args.engine
        over = f"-c {cells} ÷ -np {slots}" if slots else \
            f"-c {cells} ÷ the default {engine_defaults(str(engine))['n_parallel']} slots"
        read.append(f"--context {args.max_model_len:,}: each slot's conversation, {over} "
                    "(--context prices another)")
    args.llamacpp_read = read


def _apply_cache_types(args: argparse.Namespace) -> None:
    """-ctk X -ctv X as --kv-dtype X; a pair that differs (or one alone: the other stays
    llama.cpp's f16) refused naming it."""
    given = getattr(args, "cache_types", None)
    if not given:
        return
    spellings = " ".join(f"{flag} {value}" for flag, value in given.values())
    if not _llamacpp(getattr(args, "engine", None)):
        raise InputError(f"{spellings}: llama.cpp's K and V cache types; give --kv-dtype (or "
                         "the engine's --kv-cache-dtype), or --engine llama.cpp")
    types = {side: value for side, (_, value) in given.items()}
    if set(types) != {"k", "v"} or types["k"] != types["v"]:
        k, v = types.get("k", "f16"), types.get("v", "f16")
        raise InputError(f"{spellings}: K cache {k}, V cache {v}; ridgeline sizes K and V at "
                         f"one type: give -ctk and -ctv the same type (or --kv-dtype)")
    kv = types["k"]
    if getattr(args, "kv_dtype", None) not in (None, kv):
        raise InputError(f"{spellings} and --kv-dtype {args.kv_dtype} disagree: give one")
    args.kv_dtype = kv


def _apply_ctx_size(args: argparse.Namespace) -> None:
    """-c N over the slots (-np, else the build's default 4) as --max-model-len; -c 0 the
    model's trained context over them."""
    cells = getattr(args, "ctx_size", None)
    if cells is None:
        return
    flag = getattr(args, "ctx_size_spelling", "-c")
    engine = getattr(args, "engine", None)
    if not _llamacpp(engine):
        raise InputError(f"{flag} is llama-server's cache for all its -np slots together; "
                         f"{engine or 'vllm'} has none: give --max-model-len, one request's "
                         "longest length (or --engine llama.cpp)")
    if getattr(args, "max_model_len", None) is not None:
        raise InputError(f"{flag} {cells} and --max-model-len both set the context: "
                         f"{flag} is read as -np slots of {flag} ÷ -np tokens each; give one")
    from ridgeline.datafiles import engine_defaults

    first = str(engine[0] if isinstance(engine, list) else engine)
    slots = getattr(args, "max_num_seqs", None) or int(engine_defaults(first)["n_parallel"])
    if cells == 0:
        cells = _trained_context(args, first, flag)
    from ridgeline.llamacpp_pool import per_slot_context

    length = per_slot_context(cells, slots)
    if length < 1:
        raise InputError(f"{flag} {cells} over -np {slots} slots leaves each none: give "
                         "at least one cell a slot")
    args.max_model_len = length


def _trained_context(args: argparse.Namespace, engine: str, flag: str) -> int:
    """-c 0: the model's trained context (n_ctx_train), as llama-server allocates it."""
    from ridgeline.cli_load import load_model
    from ridgeline.context_length import served_positions

    trained = served_positions(load_model(args), engine)
    if not trained:
        raise InputError(f"{flag} 0 is the model's trained context, and {args.model} states "
                         "none (max_position_embeddings): give -c N")
    return int(trained)


class CtxSize(argparse.Action):
    """Stores llama-server's -c/--ctx-size (its cells, 0: the trained context) and the
    spelling given; ``apply_llamacpp_flags`` reads it once the engine is known."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.ctx_size_spelling = option_string


class CacheType(argparse.Action):
    """Stores llama.cpp's -ctk/-ctv (--cache-type-k/-v) by side, K or V, with the spelling
    given; ``apply_llamacpp_flags`` reads an equal pair as --kv-dtype."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        side = "k" if str(option_string) in ("-ctk", "--cache-type-k") else "v"
        given = dict(getattr(namespace, "cache_types", None) or {})
        given[side] = (option_string, values)
        namespace.cache_types = given
