"""CLI: an engine's config file pasted with its command line, read into ridgeline's flags.

vLLM's ``--config FILE`` (vllm/utils/argparse_utils.py, FlexibleArgumentParser
_pull_args_from_config and load_config_file): each key is a flag, ``tensor-parallel-size: 2``
or ``tensor_parallel_size: 2`` (parse_args turns a flag's underscores into dashes) read as
``--tensor-parallel-size 2``; true is the bare switch, false its ``--no-`` form where the
parser has one (else nothing), a list the flag with each item, a mapping the flag with its
JSON. The file's flags go after the subcommand and the model, before the command line's own:
"maintaining this order will enforce the precedence of cli > config > defaults".

trtllm-serve's ``--extra_llm_api_options FILE``, ``--config FILE`` in later releases
(tensorrt_llm/commands/serve.py: "Path to a YAML file that overwrites the parameters
specified by trtllm-serve"): LLM API arguments (llmapi/llm_args.py), merged over the ones the
flags built by ``llm_args | llm_args_dict`` (llm_utils.update_llm_args_with_extra_dict), so
the file wins, and a ``kv_cache_config`` in it replaces the flags' whole KvCacheConfig,
--kv_cache_free_gpu_memory_fraction with it (1.0 to 1.2; a later main merges the two). The
keys ridgeline models become its flags; the command line's own for the same settings are
dropped, as the engine drops them; a key no LLM API class has is refused as the engine refuses
it, and one that changes only the speed is dropped with a note (fit) or a caution
(trtllm_api_fields).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ridgeline.cli_spellings import refuse_two_keys
from ridgeline.errors import InputError, shorten_path, shorten_runs
from ridgeline.yaml_subset import read_yaml

if TYPE_CHECKING:
    from ridgeline.launch_flags import LaunchFlag

TRTLLM_ONLY = "--extra_llm_api_options"
CONFIG_FLAGS = ("--config", TRTLLM_ONLY)

# LLM API option -> ridgeline's flag for it (trtllm-serve's spelling where it has one)
TRTLLM_FLAGS = {"tensor_parallel_size": "--tp_size", "pipeline_parallel_size": "--pp_size",
                "moe_expert_parallel_size": "--ep_size", "max_batch_size": "--max_batch_size",
                "max_num_tokens": "--max_num_tokens", "max_seq_len": "--max_seq_len",
                "backend": "--backend"}
KV_CACHE_FLAGS = {"free_gpu_memory_fraction": "--kv_cache_free_gpu_memory_fraction",
                  "dtype": "--kv-dtype", "tokens_per_block": "--tokens-per-block",
                  "max_tokens": "--max-total-tokens"}
# options that change nothing ridgeline prices: logging, statistics, the HTTP side, the
# tokenizer, structured-output and reasoning parsers, where the model comes from
TRTLLM_IGNORED = frozenset({
    "print_iter_log", "return_perf_metrics", "perf_metrics_max_requests",
    "enable_iter_perf_stats", "enable_iter_req_stats", "iter_stats_max_iterations",
    "request_stats_max_iterations", "num_postprocess_workers",
    "postprocess_tokenizer_dir", "trust_remote_code", "tokenizer", "tokenizer_mode",
    "skip_tokenizer_init", "revision", "reasoning_parser", "tool_parser",
    "guided_decoding_backend", "otlp_traces_endpoint", "gpus_per_node", "log_level"})
KV_CACHE_IGNORED = frozenset({"event_buffer_max_size", "enable_partial_reuse",
                              "copy_on_partial_reuse"})
CUDA_GRAPH_KEYS = frozenset({"enable_padding", "max_batch_size", "batch_sizes"})
# an option at the value ridgeline already prices is no setting to refuse
TRTLLM_DEFAULTS = {"max_beam_width": 1, "context_parallel_size": 1,
                   "enable_chunked_prefill": False, "enable_attention_dp": False,
                   "enable_autotuner": True, "stream_interval": 1}
# LLM API options no vLLM flag shares: a file with one is trtllm-serve's
TRTLLM_KEYS = frozenset({
    "max_batch_size", "max_num_tokens", "max_seq_len", "moe_expert_parallel_size",
    "kv_cache_config", "cuda_graph_config", "disable_overlap_scheduler", "enable_attention_dp",
    "print_iter_log", "enable_iter_perf_stats", "enable_iter_req_stats", "return_perf_metrics",
    "perf_metrics_max_requests", "iter_stats_max_iterations", "request_stats_max_iterations",
    "num_postprocess_workers", "postprocess_tokenizer_dir", "gpus_per_node", "max_beam_width",
    "context_parallel_size", "moe_config", "build_config", "use_cuda_graph",
    "cuda_graph_batch_sizes", "cache_transceiver_config"})
# flags cli.main reads as MODEL before parsing (SGLang's --model-path, vllm's --model)
MOVED_FLAGS = ("--model", "--model-path")


def with_config_file(argv: Sequence[str], parser: argparse.ArgumentParser
                     ) -> tuple[list[str], dict[str, str], list[str], list[str]]:
    """``argv`` with its --config / --extra_llm_api_options FILE replaced by the flags the
    file's settings are, as the chosen engine reads them (this module's docstring); each
    flag the file gave, to the file and key that gave it ("x.yaml: enable-chunked-prefill"),
    for a refusal of its value, by the parser (cli._Parser.error: a choice it does not
    take) or by the parsed command (launch_note);
    the cautions the file calls for (a model the command line's MODEL overrides); and the
    notes said after the report (an option fit drops: it changes only the speed)."""
    argv = list(argv)
    at = [i for i, token in enumerate(argv) if token.split("=", 1)[0] in CONFIG_FLAGS]
    if not at or not argv or argv[0].startswith("-"):
        return argv, {}, [], []
    if len(at) > 1:
        raise InputError("one config file at a time: --config (or --extra_llm_api_options) "
                         "is given more than once")
    i = at[0]
    flag, _, path = argv[i].partition("=")
    width = 1 if "=" in argv[i] else 2
    if width == 2:
        if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
            raise InputError(f"{flag} needs a YAML file")
        path = argv[i + 1]
    rest = argv[:i] + argv[i + width:]
    command = argv[0]
    options = command_options(parser, command)
    engine = _engine_named(rest)
    if flag == TRTLLM_ONLY and engine != "trtllm":
        raise InputError(f"{TRTLLM_ONLY} is trtllm-serve's: give --engine trtllm to read "
                         f"{shorten_path(path)} as TensorRT-LLM's LLM API options")
    settings = read_yaml(path)
    name = shorten_path(path)
    if engine == "trtllm":
        read = trtllm_tokens(settings, name, command, options, rest)
        return _dropping(rest, read.dests, options) + read.tokens, {}, list(read.cautions), \
            list(read.notes)  # the file wins
    model_given = len(rest) > 1 and not rest[1].startswith("-")
    head = 2 if model_given else 1
    cautions = []
    line_model = rest[1] if model_given else _moved_model(rest)
    if line_model is not None:  # vllm serve's positional model overrides the file's
        # (ServeSubcommand.cmd: model = model_tag), as a --model after the file's does, and
        # SGLang's --model-path the file's model-path (the command line's flags come last)
        for key in _model_keys(settings):  # said where they name different models
            ignored = settings.pop(key)
            if isinstance(ignored, list) and len(ignored) == 1:
                ignored = ignored[0]  # the one value a list of one gives the flag
            if ignored is not None and not _same_model(str(ignored), line_model):
                cautions.append(f"{name} gives {key} {ignored}, which the command line's "
                                f"{line_model} overrides, as the engine's does: pricing "
                                f"{line_model}, not {ignored}")
    if options:  # a command the parser knows: a key it takes no flag for is named here
        _check_vllm_keys(settings, name, command, options)
        refuse_two_keys(settings, name, {k: vllm_tokens({k: v}, options)
                                         for k, v in settings.items()}, options)
    found = (_launch_flag(key, value, name, options) for key, value in settings.items())
    given = {**file_labels(settings, name, options),
             **{tokens[0]: label for _, tokens, label in filter(None, found)}}
    return rest[:head] + vllm_tokens(settings, options) + rest[head:], given, cautions, []  # cli wins


def _same_model(file_model: str, line_model: str) -> bool:
    """Whether the file's model and the command line's are one: the same words, names of one
    catalog entry (llama-3.1-70b, meta-llama/Llama-3.1-70B-Instruct: a variant, its config.json
    the entry's but for token ids), or a base and its tune bundled as two entries with one
    architecture (llama-3.1-8b, meta-llama/Llama-3.1-8B-Instruct). Two models that only share an
    architecture (llama-3.1-70b and llama-3.3-70b, deepseek-v3 and deepseek-r1) stay two."""
    from dataclasses import replace

    from ridgeline.catalog import catalog_model, catalog_model_id, model_entry

    if file_model == line_model:
        return True
    ids = catalog_model_id(file_model), catalog_model_id(line_model)
    if None in ids:
        return False
    if ids[0] == ids[1]:
        return True
    hf = sorted(model_entry(str(i)).hf_id for i in ids)  # the base sorts before its tune
    return hf[1].startswith(hf[0] + "-") and \
        replace(catalog_model(str(ids[0])), name="") == replace(catalog_model(str(ids[1])), name="")


def _model_keys(settings: dict[str, Any]) -> list[str]:
    """The file's keys that name the model: model, model-path or model_path (the flags cli.main
    reads as MODEL)."""
    return [key for key in settings if "--" + key.replace("_", "-") in MOVED_FLAGS]


def _moved_model(argv: Sequence[str]) -> str | None:
    """The model a --model or --model-path flag on the command line names (cli.main reads it
    as MODEL), or None."""
    for i, token in enumerate(argv):
        flag, eq, value = token.partition("=")
        if flag in MOVED_FLAGS:
            return value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return None


def _check_vllm_keys(settings: dict[str, Any], name: str, command: str,
                     options: dict[str, argparse.Action]) -> None:
    """Refuse, by file and key, a key of a vLLM-style config file that ``command`` takes no
    flag for; one of trtllm-serve's LLM API options (kv_cache_config, max_batch_size, ...)
    says the file looks like TensorRT-LLM's and --engine trtllm reads it."""
    for key, value in settings.items():
        flag = "--" + key.replace("_", "-")
        if flag in options or flag in MOVED_FLAGS:
            _check_value(key, value, name, options.get(flag))
        _refuse_not_modelled(key, value, name, options)
        if flag in options or flag in MOVED_FLAGS or value is False or value == []:
            continue  # false and [] add no flag (vllm_tokens), as in vLLM
        if key in TRTLLM_KEYS:
            raise InputError(f"{key} in {name} is a TensorRT-LLM LLM API option, no vLLM "
                             "flag: the file looks like trtllm-serve's config; give --engine "
                             "trtllm to read it as TensorRT-LLM's options")
        raise InputError(f"{key} in {name}: `ridgeline {command}` takes no {flag} (see "
                         f"`ridgeline {command} --help`)")


def file_labels(settings: dict[str, Any], name: str, options: dict[str, argparse.Action]
                ) -> dict[str, str]:
    """Each flag a file's key becomes, to the file and key a refusal names for it:
    {"--scheduling-policy": "serve.yaml: scheduling-policy"}, so that a value the parser
    refuses is said to be the file's (cli._Parser.error), not the command line's."""
    return {tokens[0]: f"{name}: {key}" for key, value in settings.items()
            if (tokens := vllm_tokens({key: value}, options))}


def _check_value(key: str, value: Any, name: str, action: argparse.Action | None) -> None:
    """Refuse, by file and key, a value vLLM's load_config_file would turn into flags the
    parser then refuses without naming the file: null (it would pass the text 'None'), and a
    list (each item a value after the flag) where the flag takes a single value or none (a
    switch: true or false). ``action``: the flag's (None: the model, which cli.main moves)."""
    if value is None:
        raise InputError(f"{key} in {name} is null: give it a value, or leave the key out "
                         "for the default")
    if not isinstance(value, list) or not value:
        return  # [] adds no flag (vllm_tokens)
    nargs = action.nargs if action is not None else None
    if getattr(getattr(action, "record", None), "several", False):
        return  # a launch flag of several values (--served-model-name a b): several_values
    if nargs in ("+", "*", argparse.REMAINDER) or (
            isinstance(nargs, int) and nargs == len(value)) or (
            nargs in (None, "?") and len(value) == 1):
        return
    want = ("true or false" if nargs == 0 else f"{nargs} values" if isinstance(nargs, int)
            else "one value")
    raise InputError(f"{key} in {name} takes {want}, got a list of {len(value)}: "
                     f"{json.dumps(value)}")


def _refuse_not_modelled(key: str, value: Any, name: str,
                         options: dict[str, argparse.Action]) -> None:
    """Refuse, by file and key, a key whose flag the command line would refuse as not modelled
    (launch_flags.refusal): ``compilation-config: {...}`` in x.yaml is "x.yaml:
    compilation-config is not modelled: ...", as --compilation-config is."""
    from ridgeline.launch_flags import refusal

    found = _launch_flag(key, value, name, options)
    if not found:
        return
    record, tokens, given = found
    refused = refusal(record, given, tokens[1] if record.takes_value and len(tokens) > 1
                      else None)
    if refused:
        raise InputError(refused)


def _launch_flag(key: str, value: Any, name: str, options: dict[str, argparse.Action]
                 ) -> tuple[LaunchFlag, list[str], str] | None:
    """The launch flag (launch_flags.py) a file's key is, its tokens, and the key named as a
    refusal names it: "x.yaml: compilation-config", the false switch "x.yaml:
    enable-chunked-prefill: false" (it adds --no-enable-chunked-prefill); None for another key."""
    from ridgeline.launch_flags import LaunchFlag

    tokens = vllm_tokens({key: value}, options)
    record = getattr(options.get(tokens[0]), "record", None) if tokens else None
    if not isinstance(record, LaunchFlag):
        return None
    given = key if tokens[0] == "--" + key.replace("_", "-") else f"{key}: {value}".lower()
    return record, tokens, f"{name}: {given}"


def config_file_error(exc: Exception) -> int:
    """Exit status 2, the file's trouble said in one line as cli.main says any input's."""
    where = f"{shorten_path(exc.filename)}: " if isinstance(exc, OSError) and exc.filename else ""
    text = (exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc)
    print(f"ridgeline: error: {where}{shorten_runs(text)}", file=sys.stderr)
    return 2


def vllm_spelling(flag: str) -> str:
    """A ``--flag`` as vllm serve's FlexibleArgumentParser.parse_args reads it: underscores
    before the first '.' become dashes (vllm/utils/argparse_utils.py, the same in the 0.9.2
    wheel's vllm/utils/__init__.py), so ``--max_model_len`` is ``--max-model-len`` and
    ``--compilation_config.pass_config.x`` is ``--compilation-config.pass_config.x``."""
    head, dot, tail = flag.partition(".")
    return head.replace("_", "-") + dot + tail


def vllm_dashes(argv: Sequence[str], options: dict[str, argparse.Action]) -> list[str]:
    """``argv`` with vllm serve's underscore spellings read as it reads them
    (``vllm_spelling``: ``--enable_expert_parallel``, ``--max_model_len=8192``), where the
    run is vLLM's (no --engine, or --engine vllm) and ``options``, the command's flags, have
    no flag of that spelling themselves: TensorRT-LLM's ``--max_batch_size`` and
    ``--tp_size`` keep their meaning, and under another engine an underscore spelling stays
    unrecognized, as that engine's parser leaves it."""
    engine_given = any(t == "--engine" or t.startswith("--engine=") for t in argv)
    if engine_given and _engine_named(argv) != "vllm":
        return list(argv)
    out: list[str] = []
    for token in argv:
        if token == "--":
            out.extend(argv[len(out):])
            break
        flag, eq, value = token.partition("=")
        dashed = vllm_spelling(flag) if flag.startswith("--") and "_" in flag else flag
        if dashed != flag and flag not in options and dashed.partition(".")[0] in options:
            token = dashed + eq + value
        out.append(token)
    return out


def vllm_tokens(settings: dict[str, Any], options: dict[str, argparse.Action]) -> list[str]:
    """vLLM's load_config_file: ``max_model_len: 8192`` is ["--max-model-len", "8192"]."""
    out: list[str] = []
    for key, value in settings.items():
        flag = vllm_spelling("--" + key)  # FlexibleArgumentParser.parse_args' reading
        if isinstance(value, bool):
            if value:
                out.append(flag)
            elif f"--no-{key}" in options:  # vLLM looks the raw key up
                out.append(f"--no-{key}".replace("_", "-"))
        elif isinstance(value, list):
            out += [flag, *(str(item) for item in value)] if value else []
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        else:
            out += [flag, str(value)]
    return out


@dataclass(frozen=True)
class TrtllmRead:
    """What a trtllm-serve YAML is read into: the flags its settings are, the destinations
    they set (the command line's own for them give way), the cautions it calls for and the
    notes said after the report."""
    tokens: list[str]
    dests: set[str]
    cautions: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def trtllm_tokens(settings: dict[str, Any], name: str, command: str,
                  options: dict[str, argparse.Action],
                  given: Sequence[str] = ()) -> TrtllmRead:
    """The flags a trtllm-serve YAML's settings are, and what they set. Attention DP is
    refused (data_parallel.py); a key no LLM API class has is refused as TensorRT-LLM refuses
    it; one that changes only the speed (trtllm_api_fields.speed_only) is dropped with fit's
    note or another command's caution; another option ridgeline does not model and that
    changes memory or speed is refused by name; TRTLLM_IGNORED ones change neither.
    ``given``: the command line's own tokens."""
    from ridgeline.data_parallel import TRTLLM_ATTENTION_DP
    from ridgeline.trtllm_api_fields import speed_only, speed_only_said, unknown_option

    tokens: list[str] = []
    cautions: list[str] = []
    notes: list[str] = []

    def refuse(key: str, why: str = "not modelled by ridgeline, and it changes the memory or "
               "the speed priced") -> InputError:
        return InputError(f"{key} in {name}: {why}; remove it to price the deployment "
                          "without it")

    def add(key: str, flag: str, *values: Any) -> None:
        if flag not in options:
            raise refuse(key, f"`ridgeline {command}` does not price it (it takes no {flag})")
        tokens.extend([flag, *(str(v).lower() if isinstance(v, bool) else str(v)
                               for v in values)])

    if settings.get("enable_attention_dp") is True:
        raise InputError(f"enable_attention_dp: true in {name}: {TRTLLM_ATTENTION_DP}")
    dropped = _dropped_fraction(settings.get("kv_cache_config"), name, options, given)
    if dropped:
        cautions.append(dropped)
    for key, value in settings.items():
        if key in TRTLLM_IGNORED or TRTLLM_DEFAULTS.get(key, ...) == value:
            continue
        if key in TRTLLM_FLAGS and value is not None:  # null: the default, no flag
            add(key, TRTLLM_FLAGS[key], value)
        elif key == "enable_chunked_prefill" and isinstance(value, bool):
            if value:  # a context past what max_num_tokens leaves runs in chunks
                add(key, "--enable_chunked_prefill")
        elif key == "kv_cache_config" and isinstance(value, dict):
            _kv_cache_tokens(value, add, refuse)
        elif key == "cuda_graph_config" and (value is None or isinstance(value, dict)):
            stray = sorted(set(value or {}) - CUDA_GRAPH_KEYS)
            if stray:
                raise refuse(f"cuda_graph_config.{stray[0]}")
            if value is None:  # no CUDA graphs: its decode steps run eager
                add(key, "--enforce-eager")
        elif key == "disable_overlap_scheduler" and isinstance(value, bool):
            if value:
                add(key, "--disable-overlap-scheduler")
        elif key == "speculative_config" and isinstance(value, dict):
            _spec_tokens(value, add, refuse)
        elif key == "cache_transceiver_config" and isinstance(value, dict):
            add(key, "--cache-transceiver-config", json.dumps(value))  # its transfer buffers
        elif key in ("enable_chunked_prefill", "disable_overlap_scheduler"):
            raise InputError(f"{key} in {name} takes true or false, got "
                             f"{'null' if value is None else repr(value)}")
        elif unknown_option(key, name):
            raise InputError(unknown_option(key, name))
        elif (setting := speed_only(key, value)) is not None:
            said = speed_only_said(setting, name, command)
            (notes if command == "fit" else cautions).append(said)
        else:
            raise refuse(key)
    dests = {options[t].dest for t in tokens if t in options}
    dests |= {a.dest for a in options.values() if _set_by_file(a, settings)}
    return TrtllmRead(tokens, dests, tuple(cautions), tuple(notes))


def _dropped_fraction(kv: Any, name: str, options: dict[str, argparse.Action],
                      given: Sequence[str]) -> str:
    """The caution where the file's kv_cache_config, which replaces the KvCacheConfig
    trtllm-serve builds from its flags (serve.py get_llm_args, then ``llm_args |
    llm_args_dict`` in update_llm_args_with_extra_dict, 1.0 to 1.2), drops a
    --kv_cache_free_gpu_memory_fraction that differs from KvCacheConfig's default (0.9,
    engines.json kv_cache_free_gpu_mem_fraction): priced at the default, as the engine runs;
    "" where the file sets the fraction itself, no flag is given, or the flag's value is the
    default (0.9 beside {dtype: fp8}, as TensorRT-LLM's Llama-3.3-70B guide has it)."""
    from ridgeline.datafiles import engine_defaults

    fraction = options.get("--kv_cache_free_gpu_memory_fraction")
    if not isinstance(kv, dict) or "free_gpu_memory_fraction" in kv or fraction is None:
        return ""
    values = [(token.split("=", 1)[0], token.partition("=")[2] if "=" in token else
               (given[i + 1] if i + 1 < len(given) else ""))
              for i, token in enumerate(given)
              if options.get(token.split("=", 1)[0]) is fraction]
    if not values:
        return ""
    flag, text = values[-1]
    try:  # the flag's own check (a fraction in range), as the parser would make it
        value = fraction.type(text) if callable(fraction.type) else float(text)
    except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
        raise InputError(f"argument {flag}: {exc}") from None
    default = float(engine_defaults("trtllm")["kv_cache_free_gpu_mem_fraction"])
    if value == default:
        return ""
    return (f"kv_cache_config in {name} replaces the KvCacheConfig trtllm-serve builds from "
            f"its flags, so {flag} {text} is dropped for KvCacheConfig's default "
            f"({default:g}), as TensorRT-LLM 1.0 to 1.2 run it: priced at {default:g}; put "
            f"free_gpu_memory_fraction: {text} in the file's kv_cache_config to keep it")


def _kv_cache_tokens(kv: dict[str, Any], add: Any, refuse: Any) -> None:
    """kv_cache_config's fields as flags (``add``), or refused (``refuse``)."""
    for field, value in kv.items():
        key = f"kv_cache_config.{field}"
        if field in KV_CACHE_IGNORED or (value is None and field in KV_CACHE_FLAGS):
            continue
        if field == "dtype":
            if value != "auto":  # auto: the checkpoint's, ridgeline's default
                add(key, KV_CACHE_FLAGS[field], value)
        elif field in KV_CACHE_FLAGS:
            add(key, KV_CACHE_FLAGS[field], value)
        elif field == "enable_block_reuse" and isinstance(value, bool):
            add(key, "--enable-prefix-caching" if value else "--no-prefix-caching")
        else:
            raise refuse(key)


def _spec_tokens(spec: dict[str, Any], add: Any, refuse: Any) -> None:
    """speculative_config as --spec-method and --spec-tokens (``add``), read as
    engine_spec.trtllm_speculative_config reads it, or refused (``refuse``)."""
    from ridgeline.engine_spec import trtllm_speculative_config

    try:
        drafter = trtllm_speculative_config(spec)
    except InputError as exc:
        raise refuse("speculative_config", str(exc)) from None
    add("speculative_config", "--spec-method", drafter.method)
    add("speculative_config", "--spec-tokens", drafter.tokens)


def _set_by_file(action: argparse.Action, settings: dict[str, Any]) -> bool:
    """Whether the file sets ``action``'s setting though it adds no flag for it: a false
    switch (enable_chunked_prefill: false drops the command line's --enable_chunked_prefill),
    a cuda_graph_config kept, and a kv_cache_config, which replaces trtllm-serve's
    whole, --kv_cache_free_gpu_memory_fraction with it."""
    dest = action.dest
    return ((dest == "disable_overlap_scheduler" and "disable_overlap_scheduler" in settings)
            or (dest == "launch_flag_enable_chunked_prefill"
                and "enable_chunked_prefill" in settings)
            or (dest == "enforce_eager" and "cuda_graph_config" in settings)
            or (dest == "gpu_memory_utilization" and "kv_cache_config" in settings))


def _dropping(argv: list[str], dests: set[str], options: dict[str, argparse.Action]) -> list[str]:
    """``argv`` without its flags (and their values) that set one of ``dests``."""
    out: list[str] = []
    skip = False
    for token in argv:
        if skip:
            skip = False
            continue
        action = options.get(token.split("=", 1)[0]) if token.startswith("-") else None
        if action is not None and action.dest in dests:
            skip = "=" not in token and action.nargs != 0
            continue
        out.append(token)
    return out


def command_options(parser: argparse.ArgumentParser, command: str) -> dict[str, argparse.Action]:
    """The flags ``command`` takes, each spelling to its action ({} for no such command)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices.get(command)
            return dict(sub._option_string_actions) if sub is not None else {}
    return {}


def _engine_named(argv: Sequence[str]) -> str | None:
    """The engine --engine names (its id; the last --engine, as argparse takes it), or None:
    none named, or a name the parser will refuse itself."""
    from ridgeline.engines import engine_id

    named = [token.partition("=")[2] if token.startswith("--engine=") else argv[i + 1]
             for i, token in enumerate(argv) if token.startswith("--engine=") or (
                 token == "--engine" and i + 1 < len(argv))]
    try:
        return engine_id(named[-1]) if named else None
    except (InputError, ValueError):
        return None
