"""One flag under two of its spellings, given two different values.

Every engine names a setting its own way, and ridgeline takes each name (--gpu and --gpus,
--kv-dtype and --kv-cache-dtype, --max-num-seqs and --max_batch_size). argparse keeps the
last value given and says nothing, so ``plan --gpu h100 --gpus h200`` would plan for the
H200 alone, and a config file with both ``tp: 8`` and ``tensor_parallel_size: 4`` would be
read at whichever key came last. Both are refused here, naming the two spellings; the same
spelling given twice stays argparse's (the last wins, as every shell tool), and a config
file's value under the command line's stays overridden, as vllm serve overrides it.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from ridgeline.errors import InputError

# one flag under each engine's name for it: GPUs in a tensor-parallel group
NUM_GPUS_FLAGS = ("--num-gpus", "--tensor-parallel-size", "-tp", "--tp-size", "--tp",
                  "--tp_size", "--tensor_parallel_size")

_UNREAD = object()  # a value the flag's own type refuses: its own error says so
_NOT_ONE_VALUE = (argparse._AppendAction, argparse._StoreConstAction, argparse._CountAction,
                  argparse._HelpAction, argparse._VersionAction, argparse._ExtendAction)


def refuse_two_gpu_counts(argv: Sequence[str]) -> None:
    """InputError where the tensor-parallel size is given twice with different values
    (``--num-gpus 8 --tp 4``): the spellings are one flag, and argparse would keep the last
    without a word, though the user may mean 8 GPUs in all at TP4. A --config file's value
    is not the user's typing: the command line overrides it, as vllm serve does. Values are
    compared as the flag reads them (``--tp 4 --num-gpus 4.0`` is one count); one it cannot
    read, or a flag without one, is left for the flag's own error."""
    given: list[tuple[str, str, int]] = []
    for i, token in enumerate(argv):
        flag, eq, value = token.partition("=")
        if flag in NUM_GPUS_FLAGS:
            if not eq:
                value = argv[i + 1] if i + 1 < len(argv) else ""
            count = _gpu_count(value)
            if count is not None:
                given.append((flag, value, count))
    for flag, value, count in given[1:]:
        if count != given[0][2]:
            raise InputError(f"{given[0][0]} {given[0][1]} and {flag} {value} are one flag "
                             "(the GPUs in a tensor-parallel group): give it once; for more "
                             "GPUs than one group, add --data-parallel-size or "
                             "--pipeline-parallel-size")


def _gpu_count(value: str) -> int | None:
    """A count as the flag reads it ('08' and '8.0' are 8), or None where it reads none."""
    from ridgeline.cli_types import _how_many

    try:
        return int(_how_many("number of GPUs")(value))
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return None


def refuse_two_spellings(argv: Sequence[str], options: Mapping[str, argparse.Action]) -> None:
    """InputError where one of the command's one-value flags is given under two of its
    spellings with values it reads differently (``--gpu h100 --gpus h200``; ``--max-model-len
    8k --context-length 8000`` read alike, and pass). ``options``: the command's flags, each
    spelling to its action. The GPU count has its own refusal (refuse_two_gpu_counts); a
    launch flag ridgeline only notes (launch_flags.py) is left to its note."""
    seen: dict[str, tuple[str, str, Any]] = {}
    for i, token in enumerate(argv):
        if token == "--":
            break
        flag, eq, value = token.partition("=")
        action = options.get(flag) if flag.startswith("-") else None
        if action is None or not _one_value(action):
            continue
        if not eq:
            if i + 1 >= len(argv):
                continue
            value = argv[i + 1]
        read = _read(action, value)
        if read is _UNREAD:
            continue
        first = seen.setdefault(action.dest, (flag, value, read))
        if first[0] != flag and first[2] != read:
            raise InputError(f"{first[0]} {first[1]} and {flag} {value} are one flag, given "
                             "twice with different values: give it once")


def refuse_two_keys(settings: Mapping[str, Any], name: str,
                    flags: Mapping[str, list[str]], options: Mapping[str, argparse.Action]
                    ) -> None:
    """InputError where a config file sets one flag under two of its keys with different
    values (``tp: 8`` and ``tensor_parallel_size: 4`` in x.yaml). ``flags``: each key's
    tokens as the file's reader turns them into flags."""
    seen: dict[str, tuple[str, list[str]]] = {}
    for key in settings:
        tokens = flags.get(key) or []
        action = options.get(tokens[0]) if tokens else None
        if action is None or getattr(action, "record", None) is not None:
            continue
        first = seen.setdefault(action.dest, (key, tokens[1:]))
        if first[0] != key and first[1] != tokens[1:]:
            raise InputError(f"{first[0]} and {key} in {name} set one flag, given "
                             "twice with different values: give it once")


def _one_value(action: argparse.Action) -> bool:
    """A flag that stores one value and is not the GPU count or a noted launch flag (its
    spellings may be one action's or, as plan's --gpu beside --gpus, two with one dest)."""
    return (action.nargs is None
            and not isinstance(action, _NOT_ONE_VALUE) and action.dest != "num_gpus"
            and getattr(action, "record", None) is None)


def _read(action: argparse.Action, value: str) -> Any:
    """``value`` as the flag reads it, or _UNREAD where its type refuses it."""
    if action.type is None:
        return value
    try:
        return action.type(value)  # type: ignore[operator]
    except (argparse.ArgumentTypeError, InputError, ValueError, TypeError):
        return _UNREAD
