"""A pasted launch command's other flags: the ones that change neither memory nor speed are
read and named in one note; the ones that change either in a way ridgeline does not price are
refused, one line naming the flag (data/launch_flags.json, with each flag's reason and the
engines' documentation as sources).

``vllm serve MODEL --trust-remote-code --port 8000 --max-model-len 32k`` pasted after
``ridgeline fit`` sizes what ``--max-model-len 32k`` sizes and says, on stderr::

    ridgeline: note: ignored --trust-remote-code, --port 8000 (they change neither memory nor speed)
"""

from __future__ import annotations

import argparse
import json
import math
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from ridgeline.datafiles import load_data
from ridgeline.errors import InputError, shorten
from ridgeline.units import MAX_WHOLE_DIGITS

# the commands a launch line is pasted into
COMMANDS = ("fit", "decode", "prefill", "simulate")


@dataclass(frozen=True)
class LaunchFlag:
    """One launch flag of the engines: its spellings, whether it takes a value, whose it is,
    why it is ignored (or refused), and, for ``v1_only``, that vLLM's V0 engine differs."""

    flags: tuple[str, ...]
    takes_value: bool
    engines: tuple[str, ...]
    why: str
    modelled_away: bool  # True: ignored, it changes nothing priced; False: refused
    v1_only: bool = False
    several: bool = False  # it takes one value or more (vLLM's --served-model-name a b)
    refused_values: tuple[tuple[str, str], ...] = ()  # values that do change memory, and why
    engine_only: bool = False  # refused under an engine that has no such flag
    say_why: bool = False  # the note gives its reason (it changes what this command leaves out)
    # engines whose setting it is: read (its dest set, cli_load.engine_settings), not noted
    read_by: tuple[str, ...] = ()
    # a JSON object's keys and the values ignored; any other value refused for other_values
    json_values: tuple[tuple[str, tuple[str, ...]], ...] = ()
    other_values: str = ""
    # the spellings whose value the engines parse as a number: "int" or "float" (a string
    # otherwise); a value that is none stops the engine's parser, and ridgeline's
    types: tuple[tuple[str, str], ...] = ()
    # the bounds a number spelling's value must lie in, inclusive, where the engines refuse
    # any other (a port: 0-65535); data/launch_flags.json _sources.ranges
    ranges: tuple[tuple[str, tuple[int, int]], ...] = ()
    # the values the engines' parsers take for it, where every release has one list (or,
    # ``choices_any_release``, the values any release read takes, where the list moves)
    choices: tuple[str, ...] = ()
    # the first vLLM release with the flag (--watchdog-config: 0.33.0), refused where
    # --engine-version names an earlier one; "" where every release modelled has it
    since: str = ""
    # it names the model the engine loads (llama-server's -hf REPO, -m FILE): refused, saying
    # to give it as MODEL
    names_model: bool = False
    # it changes the step time alone: fit notes it with its reason; decode, prefill and
    # simulate price without it, in a caution (``launch_note``)
    speed_only: bool = False
    v0_why: str = ""  # what a v1_only flag does on vLLM's V0 engine, where it is refused
    # the one value it is ignored at, the engine's default (vLLM's --watermark 0): any other
    # refused for other_values; "" where every value is ignored
    default_value: str = ""
    choices_any_release: bool = False
    # per engine, the least value it starts with (vLLM's --stream-interval: 1), where its
    # parser reads a smaller one but its config refuses it; data/launch_flags.json minimums
    minimums: tuple[tuple[str, int], ...] = ()

    @property
    def checks_engine(self) -> bool:
        return self.v1_only or self.engine_only

    @property
    def says_why(self) -> bool:
        return self.v1_only or self.say_why or self.speed_only


@cache
def launch_flags() -> tuple[LaunchFlag, ...]:
    """Every flag of data/launch_flags.json, the ignored ones first."""
    data = load_data("launch_flags.json")
    return tuple(LaunchFlag(tuple(r["flags"]), bool(r["value"]), tuple(r["engines"]), r["why"],
                            ignored, bool(r.get("v1_only", False)), bool(r.get("several", False)),
                            tuple(sorted(r.get("refused_values", {}).items())),
                            bool(r.get("engine_only", False)), bool(r.get("say_why", False)),
                            tuple(r.get("read_by", ())),
                            tuple((k, tuple(v)) for k, v in r.get("json_values", {}).items()),
                            r.get("other_values", ""), tuple(sorted(r.get("types", {}).items())),
                            tuple(sorted((k, (int(lo), int(hi)))
                                         for k, (lo, hi) in r.get("ranges", {}).items())),
                            tuple(r.get("choices", ())), r.get("since", ""),
                            bool(r.get("names_model", False)),
                            bool(r.get("speed_only", False)), r.get("v0_why", ""),
                            r.get("default_value", ""),
                            bool(r.get("choices_any_release", False)),
                            tuple(sorted((k, int(v)) for k, v in r.get("minimums", {}).items())))
                 for key, ignored in (("ignored", True), ("not_modelled", False))
                 for r in data[key])


def refusal(record: LaunchFlag, given: str, value: Any = None) -> str | None:
    """The one line refusing ``record`` given as ``given`` (the flag, or a config file's key)
    with ``value``: a flag not modelled, or a value of an ignored one that changes memory
    (--load-format bitsandbytes); None where it is read and ignored."""
    if record.names_model:  # noted beside MODEL; without it, the parser's error says why
        return None
    if not record.modelled_away:
        return f"{given} is not modelled: {record.why}"
    if record.json_values and not _json_matches(record.json_values, value):
        return f"{given} {value} is not modelled: {record.other_values}"
    if record.default_value and not _is_default(record.default_value, value):
        return f"{given} {value} is not modelled: {record.other_values}"
    why = dict(record.refused_values).get(str(value).lower())
    return f"{given} {value} is not modelled: {why}" if why else None


_WHOLE = re.compile(rf"\s*[+-]?[0-9]{{1,{MAX_WHOLE_DIGITS}}}\s*", re.ASCII)
_NUMBER_WORDS = {"int": "a whole number", "float": "a finite number"}


def type_problem(record: LaunchFlag, given: str, value: Any) -> str | None:
    """The one line refusing ``value`` for ``given`` (a spelling of ``record``) where the
    engines parse it as a number it is not (--port 80OO, --swap-space nan, --seed ''), as
    their own parsers stop such a launch line; None where it reads, or the flag takes a
    string. ASCII only, as a user types a number (Python's int() also reads '８')."""
    wanted = dict(record.types).get(given)
    if wanted is None:
        return None
    text = str(value)
    if wanted == "int":
        fits = _WHOLE.fullmatch(text) is not None
    else:
        try:
            fits = text.isascii() and "_" not in text and math.isfinite(float(text))
        except ValueError:
            fits = False
    parsers = "parser reads" if len(record.engines) == 1 else "parsers read"
    if not fits:
        return (f"{given} takes {_NUMBER_WORDS[wanted]} ({wanted}, as "
                f"{_owners(record.engines)} {parsers} it), got {shorten(repr(text))}")
    return range_problem(record, given, text)


def range_problem(record: LaunchFlag, given: str, text: str) -> str | None:
    """The one line refusing a number outside the bounds the engines keep for ``given``
    (--port 99999: the server binds it, and Python's socket refuses a port past 65535,
    "bind(): port must be 0-65535."); None where it lies within them, or has none."""
    bounds = dict(record.ranges).get(given)
    if bounds is None:
        return None
    low, high = bounds
    number = int(text)
    if low <= number <= high:
        return None
    engines = "the engine binds" if len(record.engines) == 1 else "the engines bind"
    return (f"{given} {number} is out of range: {engines} it, and a port is {low}-{high} "
            f"(Python's socket: 'bind(): port must be {low}-{high}.')")


def choice_problem(record: LaunchFlag, given: str, value: Any) -> str | None:
    """The one line refusing a value the engines' parser has no choice for (vLLM's
    --uvicorn-log-level verbose: 'invalid choice'), matched exactly as argparse matches;
    None where it is one, or the flag takes any string."""
    if not record.choices or str(value) in record.choices:
        return None
    which = ", in one release or another," if record.choices_any_release else ""
    return (f"{given} {shorten(repr(str(value)))} is no choice of {_owners(record.engines)}: "
            f"it takes{which} {', '.join(record.choices)}")


def minimum_problem(record: LaunchFlag, given: str, value: str,
                    engines: list[str]) -> str | None:
    """The one line refusing a number below the least an engine of the run starts with
    (vLLM's --stream-interval 0: its SchedulerConfig's ge=1 stops vllm serve, though argparse
    read the int; SGLang keeps no bound), or None."""
    try:
        number = int(value.strip())
    except ValueError:  # not a whole number: type_problem's to refuse
        return None
    for engine, least in record.minimums:
        if engine in engines and number < least:
            return (f"{given} {number} is out of range: {_owners((engine,))} config takes "
                    f"{least} or more, and its server stops at start-up on less")
    return None


def _is_default(default: str, value: Any) -> bool:
    """Whether ``value`` is the flag's ``default``: as numbers where both read as one (0.0 and
    0 for --watermark's 0), else as given."""
    try:
        return float(str(value)) == float(default)
    except ValueError:
        return str(value) == default


def _json_matches(wanted: tuple[tuple[str, tuple[str, ...]], ...], value: Any) -> bool:
    """Whether ``value`` is a JSON object whose every ``wanted`` key has one of its values:
    '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' for kv_connector NixlConnector."""
    try:
        found = json.loads(str(value))
    except ValueError:
        return False
    return isinstance(found, dict) and all(found.get(k) in ok for k, ok in wanted)


class _Ignored(argparse.Action):
    """Reads the flag (and its value) and keeps it for the note (``launch_note``), or refuses
    it at once, saying what it changes (``refusal``); a flag some engine reads as its setting
    (``read_by``) also sets its dest, True for a switch."""

    def __init__(self, *args: Any, record: LaunchFlag, **kwargs: Any) -> None:
        self.record = record
        super().__init__(*args, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        refused = type_problem(self.record, str(option_string), values) or \
            choice_problem(self.record, str(option_string), values) or \
            refusal(self.record, str(option_string), values)
        if refused:
            parser.error(refused)
        given = f"{option_string} {values}" if self.record.takes_value else str(option_string)
        if self.record.read_by:
            setattr(namespace, self.dest, values if self.record.takes_value else True)
        seen = list(getattr(namespace, "launch_flags_ignored", None) or [])
        namespace.launch_flags_ignored = [*seen, (given, self.record)]


def add_launch_flags(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` every launch flag it does not take under the same spelling itself
    (simulate's --seed stays its own), hidden from --help (the README lists them)."""
    own = set(parser._option_string_actions)
    for record in launch_flags():
        spellings = [f for f in record.flags if f not in own]
        if not spellings:
            continue
        parser.add_argument(*spellings, dest="launch_flag_" + spellings[0].lstrip("-")
                            .replace("-", "_"), nargs=None if record.takes_value else 0,
                            action=_Ignored,
                            record=record, default=None, help=argparse.SUPPRESS)


def model_flag_refusal(typed: list[str]) -> str:
    """The one line for a launch line whose model is named only by llama-server's own flag
    (-hf ggml-org/gpt-oss-20b-GGUF, -m model.gguf), where MODEL is missing; "" where none is
    typed."""
    for record in launch_flags():
        for i, word in enumerate(typed):
            flag, eq, value = word.partition("=")
            if record.names_model and flag in record.flags:
                value = value if eq else (typed[i + 1] if i + 1 < len(typed) else "")
                return f"{flag} {value} names the GGUF llama-server loads; {record.why}"
    return ""


def several_values(argv: list[str]) -> list[str]:
    """A flag that takes several values (vLLM's --served-model-name a b), its values joined
    into one ('--served-model-name=a b') where MODEL came first, as in ``vllm serve MODEL``;
    given before MODEL it takes one, so that MODEL stays MODEL (as SGLang and trtllm-serve
    read it), and more words before the next flag are refused: vllm serve would take MODEL
    for a name too (nargs='+'), and which word is MODEL cannot be told."""
    several = {f for r in launch_flags() if r.several for f in r.flags}
    if len(argv) < 2 or argv[0] not in COMMANDS:
        return argv
    if argv[1].startswith("-"):
        _refuse_names_before_model(argv, several)
        return argv
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if token in several:
            values = []
            while i < len(argv) and not argv[i].startswith("-"):
                values.append(argv[i])
                i += 1
            token = f"{token}={' '.join(values)}" if values else token
        out.append(token)
    return out


def _refuse_names_before_model(argv: list[str], several: set[str]) -> None:
    """InputError where a several-valued flag, before MODEL, runs into more than one name and
    MODEL: ``fit --served-model-name a b MODEL``."""
    for i, token in enumerate(argv):
        flag, eq, value = token.partition("=")
        if flag not in several:
            continue
        words = [value] if eq else []
        for later in argv[i + 1:]:
            if later.startswith("-"):
                break
            words.append(later)
        if len(words) > 2:
            raise InputError(f"{flag} {' '.join(words)}: before MODEL, vllm serve takes every "
                             f"word up to the next flag for a name, MODEL too, and which is "
                             f"MODEL cannot be told; give MODEL first: ridgeline {argv[0]} MODEL "
                             f"{flag} {' '.join(words[:-1])}")


def launch_note(args: argparse.Namespace, from_file: dict[str, str] | None = None) -> str:
    """The one line naming the flags read and ignored, or "" where none was given; an
    InputError where one changes nothing only on vLLM's V1 engine (--enable-chunked-prefill)
    and the run is on its V0 engine or on another engine (``engine_refusal``); nothing of a
    flag the engine reads as its setting (``read_by``: TensorRT-LLM's --enable_chunked_prefill,
    cli_load.chunked_prefill_asked); an InputError for a flag the vLLM release --engine-version
    names has removed (--swap-space from 0.18.0: data/removed_flags.json) or not yet added
    (--watchdog-config before 0.33.0: the record's ``since``). A flag that changes the step
    time alone (``speed_only``: --stream-interval 20) is named in fit's note, and said in a
    caution by decode, prefill and simulate, which price the run without it. ``from_file``:
    a flag a config file gave, to its file and key (cli_config_file.with_config_file), which
    the refusal names for the flag."""
    _refuse_removed_own(args, from_file or {})
    given = getattr(args, "launch_flags_ignored", None) or []
    kept = "; ".join(filter(None, (_compilation_kept(args), _chunking_kept(args))))
    if not given:
        return f"ignored {kept}" if kept else ""
    engines = _engines(args)
    given = [(text, record) for text, record in given  # read as a setting: nothing to say
             if not set(engines) <= set(record.read_by)]
    for text, record in given:
        flag = text.split()[0]
        v0 = args.engine_version if record.v1_only and "vllm" in engines and _on_v0(args) \
            else None
        named = (from_file or {}).get(flag, flag)
        refused = engine_refusal(record, named, engines, v0) or \
            _removed(args, engines, flag, named) or _added(args, engines, record, named) or \
            minimum_problem(record, named, text.partition(" ")[2], engines)
        if refused:
            raise InputError(refused)
    if getattr(args, "command", None) != "fit":  # a step's time is priced: say so
        from ridgeline.cli_load import _say_caution

        for text, record in given:
            if record.speed_only:
                _say_caution(args, f"{text} is not priced: {record.why}")
        given = [(text, record) for text, record in given if not record.speed_only]
    speed = [text for text, record in given if record.speed_only]  # fit's, or none
    given = [(text, record) for text, record in given if not record.speed_only]
    plain = [text for text, record in given if not record.says_why and not record.names_model]
    parts = ([f"{', '.join(plain)} ({'it changes' if len(plain) == 1 else 'they change'} "
              "neither memory nor speed)"] if plain else []) + \
        [f"{text} ({record.why})" for text, record in given if record.says_why] + \
        [f"{text} (the GGUF llama-server loads: MODEL names what is priced)"
         for text, record in given if record.names_model] + \
        ([f"{', '.join(speed)} ({'it changes' if len(speed) == 1 else 'they change'} the step "
          "time, not the memory fit sizes)"] if speed else []) + \
        ([kept] if kept else [])
    return "ignored " + "; ".join(parts) if parts else ""


def _compilation_kept(args: argparse.Namespace) -> str:
    """What to say of a vLLM compilation config's keys read and ignored (vllm_compilation:
    ``-cc.pass_config.fuse_norm_quant=true``, ``custom_ops``), or ""."""
    flag, keys = getattr(args, "compilation_ignored", None) or ("", ())
    if not keys:
        return ""
    return (f"{flag}'s {', '.join(keys)} (the compiler's fusion passes, its kernel choices or "
            "where it writes: the profile's memory and the step ridgeline prices are the same)")


def _chunking_kept(args: argparse.Namespace) -> str:
    """What to say of vLLM's --no-enable-chunked-prefill, read by fit, decode, prefill and
    simulate, where the release asked turns chunked prefill back on (V1 before 0.12:
    vllm_v0_chunking.chunking_kept_note), or "" (another engine refuses it; a comparison of
    engines refuses one engine's setting: cli_fit.ENGINE_KNOBS)."""
    asked = getattr(args, "engine", None) or "vllm"
    if not getattr(args, "no_enable_chunked_prefill", False) or not isinstance(asked, str) \
            or asked != "vllm":
        return ""
    from ridgeline.vllm_memory import vllm_accounting
    from ridgeline.vllm_v0_chunking import chunking_kept_note

    return chunking_kept_note(vllm_accounting(getattr(args, "engine_version", None)))


def engine_refusal(record: LaunchFlag, given: str, engines: list[str],
                   v0_version: str | None = None) -> str | None:
    """The one line refusing ``record``, given as ``given`` (the flag, or a config file's key
    as ``refusal`` names it), on ``engines``: a flag of another engine (--disable-overlap-
    schedule under vLLM), or one ignored only on vLLM's V1 engine where ``v0_version`` (the
    --engine-version) runs V0; None where it is read and ignored."""
    if not record.checks_engine:  # a flag that changes nothing does so under any engine
        return None
    others = [e for e in engines if e not in record.engines]
    if others:
        return f"{given} is {_owners(record.engines)}; {others[0]} has no such flag"
    if record.v1_only and v0_version:
        return (f"{given} is not modelled on vLLM's V0 engine (--engine-version {v0_version}): "
                + (record.v0_why or "there it decides whether a prompt runs whole; from 0.8 "
                   "V1 always chunks"))
    return None


def _engines(args: argparse.Namespace) -> list[str]:
    """The engines --engine names (vLLM where none is; a comparison's list, or its
    comma-separated names, each)."""
    from ridgeline.engines import engine_id

    asked = getattr(args, "engine", None) or "vllm"
    return [engine_id(str(e).strip()) for e in (asked if isinstance(asked, list)
                                                else str(asked).split(","))]


def _refuse_removed_own(args: argparse.Namespace, from_file: dict[str, str]) -> None:
    """InputError for a removed vLLM flag the command reads as its own, as decode, simulate
    and fit read --speculative-model and --num-speculative-tokens (cli_spec.py), where the
    release --engine-version names has removed it (0.8.3, PR #15466): refused before any of
    them is read, as vllm serve of that release refuses it at once."""
    from ridgeline.engine_versions import removed_flags

    for flag in removed_flags("vllm"):
        if getattr(args, flag.lstrip("-").replace("-", "_"), None) is not None \
                and getattr(args, "engine_version", None):
            refused = _removed(args, _engines(args), flag, from_file.get(flag, flag))
            if refused:
                raise InputError(refused)


def _removed(args: argparse.Namespace, engines: list[str], flag: str, named: str) -> str:
    """Why the vLLM release --engine-version names refuses ``flag``, one it removed
    (--swap-space from 0.18.0: engine_versions.removed_flag_problem), or ""; without
    --engine-version the flag is read as before."""
    if "vllm" not in engines:
        return ""
    from ridgeline.engine_versions import removed_flag_problem

    return removed_flag_problem("vllm", getattr(args, "engine_version", None), flag, named)


def _added(args: argparse.Namespace, engines: list[str], record: LaunchFlag,
           named: str) -> str:
    """Why the vLLM release --engine-version names refuses ``named``, a flag a later release
    added (--watchdog-config, from 0.33.0: launch_flags.json 'since'), as its vllm serve
    stops ('unrecognized arguments'), or ""; without --engine-version the pasted line is taken
    to come from a release that has the flag, as a removed flag is (``_removed``)."""
    from ridgeline.engine_versions import release_before

    version = getattr(args, "engine_version", None)
    if "vllm" not in engines or not record.since or not version:
        return ""
    try:
        if not release_before("vllm", version, record.since):
            return ""
    except InputError:  # no version of vLLM's: refused where the version is checked
        return ""
    return (f"vLLM {version} has no {named}: it came in v{record.since}; leave it out, or "
            "name that --engine-version or a later one")


def _owners(engines: tuple[str, ...]) -> str:
    names = {"vllm": "vLLM's", "sglang": "SGLang's", "trtllm": "TensorRT-LLM's"}
    owned = [names.get(e, e) for e in engines]
    return owned[0] if len(owned) == 1 else ", ".join(owned[:-1]) + " and " + owned[-1]


def _on_v0(args: argparse.Namespace) -> bool:
    version = getattr(args, "engine_version", None)
    if not version:
        return False
    from ridgeline.vllm_memory import vllm_accounting

    return bool(vllm_accounting(version).engine == "V0")


def kv_connector_given(args: argparse.Namespace) -> str:
    """The kv_connector of vLLM's --kv-transfer-config as given on a pasted launch line
    (NixlConnector or MooncakeConnector, the values read: launch_flags.json ``json_values``),
    "" where none was: with it vLLM v0.9.1-v0.21 turn the hybrid KV cache manager off, which
    the pool of a model with sliding-window, chunked or recurrent layers beside full
    attention then shows (vllm_hybrid.connector_off_reason)."""
    for text, record in getattr(args, "launch_flags_ignored", None) or []:
        if "--kv-transfer-config" in record.flags:
            found = json.loads(text.split(None, 1)[1])  # checked as JSON when it was read
            return str(found.get("kv_connector", ""))
    return ""


def kv_events_given(args: argparse.Namespace) -> bool:
    """Whether vLLM's --kv-events-config is on a pasted launch line, whatever its value: vLLM
    v0.9.1-v0.19 then turn the hybrid KV cache manager off (its check is 'kv_events_config
    is not None'; vllm_hybrid.events_off_reason)."""
    return any("--kv-events-config" in record.flags
               for _, record in getattr(args, "launch_flags_ignored", None) or [])
