"""One flag under two of its spellings, given two different values.

Every engine names a setting its own way, and ridgeline takes each name (--gpu and --gpus,
--kv-dtype and --kv-cache-dtype, --max-num-seqs and --max_batch_size). argparse keeps the
last value given and says nothing, so ``plan --gpu h100 --gpus h200`` would plan for the
H200 alone, and a config file with both ``tp: 8`` and ``tensor_parallel_size: 4`` would be
read at whichever key came last. Both are refused here, naming the two spellings, and so is
one spelling given twice with different values (``roofline --gpu h100 --gpu a100`` would
show the A100 alone, where ``--gpu h100,a100`` was meant): a flag that stores one value
takes one; the same value twice passes, a flag that collects (``--override-kv``, action
append) is repeated as it should be, and a config file's value under the command line's
stays overridden, as vllm serve overrides it.

A flag a command does not take, where it takes the figure under another name (``kv
--max-model-len``: kv's --context) or another command takes that flag, is named so in the
refusal (``unrecognized_hint``), rather than argparse's bare "unrecognized arguments"; a
flag no command takes, and a command no one has, get the nearest spelling there is
(``--batc``: --batch; ``rooflne``: roofline; ``gpus``, a word for what it lists:
hardware), as an unknown model or card does.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ridgeline.catalog import nearest_spelling
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
    read, or a flag without one, is left for the flag's own error. One spelling given twice
    is compared too (``--num-gpus 8 --num-gpus 4`` is refused, ``--tp 4 --tp 4`` passes)."""
    given: list[tuple[str, str, int]] = []  # (spelling, value, count) in the order typed
    for i, token in enumerate(argv):
        flag, eq, value = token.partition("=")
        if flag in NUM_GPUS_FLAGS:
            if not eq:
                value = argv[i + 1] if i + 1 < len(argv) else ""
            count = _gpu_count(value)
            if count is not None:
                given.append((flag, value, count))
    for flag, value, count in given[1:]:
        first, said, kept = given[0]
        if count != kept:
            lead = _twice(first, said, flag, value, " (the GPUs in a tensor-parallel group)")
            raise InputError(f"{lead}: give it once; for more GPUs than one group, add "
                             "--data-parallel-size or --pipeline-parallel-size")


def _twice(first: str, said: str, flag: str, value: str, what: str = "") -> str:
    """The two values a refusal names: '--tp 8 and --num-gpus 4 are one flag' (``what``
    says what it sets), or, under one spelling, '--num-gpus is given twice with different
    values, 8 and 4'."""
    if first == flag:
        return f"{flag}{what} is given twice with different values, {said} and {value}"
    return f"{first} {said} and {flag} {value} are one flag{what}"


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
    8k --context-length 8000`` read alike, and pass, as do ``--kv-dtype FP8 --kv-cache-dtype
    fp8``), or under one spelling twice (``--gpu h100 --gpu a100``; ``--batch 8 --batch 8``
    passes): every value given is compared with the first. ``options``: the command's flags,
    each spelling to its action; one that collects its values (action append) is not
    compared. The GPU count has its own refusal (refuse_two_gpu_counts); a launch flag
    ridgeline only notes (launch_flags.py) is left to its note."""
    given: dict[str, list[tuple[str, str, Any]]] = {}  # dest: (spelling, value, read) each
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
        if read is not _UNREAD:
            given.setdefault(action.dest, []).append((flag, value,
                                                      _compared(action.dest, read)))
    for dest, (first, *others) in given.items():
        flag, value, read = first
        for other, said, other_read in others:
            if other_read == read:
                continue
            lead = _twice(flag, value, other, said)
            if flag != other:
                lead += ", given twice with different values"
            joined = f"{value},{said}"
            both = (f"; for both side by side, {flag} {joined}" if dest in ("gpu", "gpus")
                    and _read(options[flag], joined) is not _UNREAD else "")
            raise InputError(f"{lead}: give it once{both}")


def refuse_two_keys(settings: Mapping[str, Any], name: str,
                    flags: Mapping[str, list[str]], options: Mapping[str, argparse.Action]
                    ) -> None:
    """InputError where a config file sets one flag under two of its keys with different
    values (``tp: 8`` and ``tensor_parallel_size: 4`` in x.yaml). ``flags``: each key's
    tokens as the file's reader turns them into flags; a key's one value is compared as its
    flag reads it (``max_model_len: 8000`` beside ``context_length: 8k`` is one length)."""
    seen: dict[str, tuple[str, Any]] = {}
    for key in settings:
        tokens = flags.get(key) or []
        action = options.get(tokens[0]) if tokens else None
        if action is None or getattr(action, "record", None) is not None:
            continue
        read = _read(action, tokens[1]) if len(tokens) == 2 else _UNREAD
        value = tokens[1:] if read is _UNREAD else _compared(action.dest, read)
        first = seen.setdefault(action.dest, (key, value))
        if first[0] != key and first[1] != value:
            raise InputError(f"{first[0]} and {key} in {name} set one flag, given "
                             "twice with different values: give it once")


def _one_value(action: argparse.Action) -> bool:
    """A flag that stores one value and is not the GPU count or a noted launch flag (its
    spellings may be one action's or, as plan's --gpu beside --gpus, two with one dest)."""
    return (action.nargs is None
            and not isinstance(action, _NOT_ONE_VALUE) and action.dest != "num_gpus"
            and getattr(action, "record", None) is None)


def _read(action: argparse.Action, value: str) -> Any:
    """``value`` as the flag reads it, or _UNREAD where its type or its choices refuse it
    (argparse's own error says so: ``-sm LAYER`` is no split mode, not a second one)."""
    read: Any = value
    if action.type is not None:
        try:
            read = action.type(value)  # type: ignore[operator]
        except (argparse.ArgumentTypeError, InputError, ValueError, TypeError):
            return _UNREAD
    if action.choices is not None and read not in action.choices:
        return _UNREAD
    return read


def _compared(dest: str, read: Any) -> Any:
    """What two spellings' values are compared by, where the flag keeps the name as typed
    and reads it later: a card by its catalog record (plan's ``--gpu H100`` and ``--gpus
    h100-sxm`` are one card), a KV dtype without case (the catalog reads ``FP8`` as fp8), a
    --speculative-config as the JSON it parses to (spacing aside)."""
    try:
        if dest in ("gpus", "gpu"):
            from ridgeline.hardware import resolve_accelerator

            return tuple(resolve_accelerator(name.strip()) for name in str(read).split(","))
        if dest == "kv_dtype":
            return str(read).strip().lower()
        if dest == "speculative_config":
            return json.loads(read)
    except (InputError, ValueError, TypeError):
        pass  # the flag's own check names it
    return read


_LENGTH_FLAGS = ("--max-model-len", "--context-length", "--max-seq-len", "--max_seq_len")
_PROMPT_FLAGS = ("--input-len", "--random-input-len")
# flags plan does not take because it searches their values itself (search_space.py)
_SEARCHED_BY_PLAN = ("--quantization", "-q", *NUM_GPUS_FLAGS, "--pipeline-parallel-size",
                     "-pp", "--max-num-seqs", "--max-num-batched-tokens",
                     "--enable-expert-parallel")
_PLAN_SEARCHES = ("plan takes no {flag}: it searches the layouts and engine settings itself "
                  "(--weights and --kv-dtype narrow its formats, --min-context or "
                  "--max-model-len its launch length); `ridgeline fit` or `simulate` sizes one "
                  "deployment")
# {command: {a flag it does not take: what to say of it, the flag it takes for that figure}}
_TAKEN_AS: dict[str, dict[str, str]] = {
    "kv": dict.fromkeys(_LENGTH_FLAGS, "kv takes no {flag}: give the same figure as --context "
                        "(the tokens each conversation holds)"),
    # a max_model_len is a ceiling: as a typical length it prices every request at the longest
    **{command: {flag: f"{{command}} takes no {{flag}} (a ceiling, not the length each request "
                       f"holds); its --context is {what}"
                 for flag in _LENGTH_FLAGS}
       for command, what in (("utilization", "the tokens each running request holds (default "
                                             "2000)"),
                             ("amdahl", "the tokens cached per sequence (default 2000)"),
                             ("observe", "the typical tokens per sequence (default: from the "
                                         "source, else 2000)"))},
    **{command: {flag: "{command} takes no {flag}: give the same figure as --prompt-len (the "
                       "prompt's tokens)"
                 for flag in _PROMPT_FLAGS}
       for command in ("prefill", "roofline")},
    "fit": {"--context": "fit takes the conversation's length as --max-model-len (the longest "
                         "request the pool must hold)"},
    "simulate": {"--prompt-len": "simulate takes no --prompt-len: give the same figure as "
                                 "--input-len (each request's prompt tokens)"},
    "page": {**dict.fromkeys(("--kv-dtype", "--kv-cache-dtype"), "page takes its KV dtypes "
                             "as --kv-dtypes (those its picker offers, comma-separated)"),
             **dict.fromkeys(NUM_GPUS_FLAGS, "page takes its GPU counts as --counts (those its "
                             "picker offers, comma-separated)")},
    "plan": {"--prompt-len": "plan takes no --prompt-len: give the same figure as --input-len "
                             "(each request's prompt tokens)",
             **dict.fromkeys(_SEARCHED_BY_PLAN, _PLAN_SEARCHES)},
}


# words typed for a command that no slip of its spelling reaches: what it answers about
# (`ridgeline gpus` lists no GPUs; `hardware` does)
_COMMAND_WORDS = {**dict.fromkeys(("gpu", "gpus", "accelerator", "accelerators", "card",
                                   "cards", "device", "devices", "hw"), "hardware"),
                  "models": "model", "sim": "simulate"}


# the commands taken under a second name: `models` lists the bundled models, as `hardware`
# (a plural in all but form) lists the cards
COMMAND_ALIASES = {"models": "model"}


def command_hint(typed: str, commands: Sequence[str]) -> str:
    """"; did you mean hardware?" for a command no one has, where ``typed`` is a slip from one
    of ``commands`` (rooflne: roofline) or a word for what one answers (gpus: hardware), else
    ""."""
    near = nearest_spelling(typed, commands) or _COMMAND_WORDS.get(typed.lower())
    return f"; did you mean {near}?" if near in commands else ""


def taken_as_hint(command: str, typed: Sequence[str]) -> str:
    """"; kv takes no --max-model-len: give the same figure as --context (…)" for the first
    flag in ``typed``
    that ``command`` takes under another name (_TAKEN_AS), else ""."""
    for word in typed:
        flag = word.partition("=")[0]
        taken = _TAKEN_AS.get(command, {}).get(flag)
        if taken:
            return "; " + taken.format(command=command, flag=flag)
    return ""


def model_as_flag_hint(command: str, words: Sequence[str]) -> str:
    """"; roofline takes the model as --model llama-3.1-8b" for the first of ``words`` (bare
    words, no flag's value) that names a model, for a command that takes its model as a
    flag (roofline, utilization, amdahl, attention, observe; the others take MODEL first);
    else ""."""
    from ridgeline.catalog import catalog_model_id

    for word in words:
        if catalog_model_id(word) or word.lower().endswith((".json", ".gguf")):
            return f"; {command} takes the model as --model {word}"
    return ""


def unrecognized_hint(command: str, extra: Sequence[str],
                      commands: Mapping[str, argparse.ArgumentParser]) -> str:
    """What to say after "unrecognized arguments: …" for the first flag in ``extra``:
    the flag ``command`` takes for its figure (_TAKEN_AS), else the commands that take the
    flag itself (``roofline --context``: decode's, prefill's, …), else nothing."""
    if command not in commands:  # `ridgeline --foo`: no command to name one for
        return ""
    flags = [word.partition("=")[0] for word in extra if word.startswith("-") and word != "--"]
    if "--model" in commands[command]._option_string_actions:
        named = model_as_flag_hint(command, [w for w in extra if not w.startswith("-")])
        if named:  # roofline llama-3.1-8b: roofline's model is --model
            return named
    if not flags:
        return ""
    flag = flags[0]
    if flag in commands[command]._option_string_actions:  # decode -- MODEL --gpu h100: said
        # to be "a flag of `hardware`, …, not of `decode`"
        return (f"; `{command}` takes {flag}, but not after a bare '--', which ends the "
                "flags: drop the '--'")
    taken = taken_as_hint(command, flags[:1])
    if taken:
        return taken
    takers = [name for name, sub in commands.items()
              if name != command and flag in sub._option_string_actions]
    if not takers:
        near = nearest_spelling(flag, list(commands[command]._option_string_actions))
        return f"; did you mean {near}?" if near else ""
    shown = ", ".join(f"`{name}`" for name in takers[:4]) + (", …" if len(takers) > 4 else "")
    return f"; {flag} is a flag of {shown}, not of `{command}`"
