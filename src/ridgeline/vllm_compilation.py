"""vLLM's compilation config, as a pasted launch line gives it, read onto what ridgeline prices.

``--compilation-config '{...}'`` (``-cc`` from v0.12, ``-O`` before v0.13), its dotted keys
(``-cc.cudagraph_mode=FULL_DECODE_ONLY``), the optimization levels ``-O0`` … ``-O3`` (v0.12+;
before, ``-O<n>`` was torch.compile's level) and the capture list ``--cudagraph-capture-sizes``
(``--cuda-graph-sizes``) come down to four things ridgeline already models: which batch sizes
vLLM captures CUDA graphs at (their number prices the graphs' memory, vllm_graphs.py), the
largest, whether any graph is captured at all (none: --enforce-eager's eager steps), and whether
torch.compile runs (Model Runner V2's cold compile in the profile, vllm_pool.py). Keys that
change neither memory nor step time are read and ignored; any other is refused by name. The
rules and their sources are data (engines.json ``vllm.compilation_config``).

``-cc.cudagraph_mode=NONE`` keeps torch.compile: no graphs, eager steps, and on Model Runner V2
the cold compile still in the profile; ``--enforce-eager`` is ``-cc.mode=0`` with it.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from ridgeline.errors import InputError
from ridgeline.flag_json import json_object
from ridgeline.vllm_graphs import MAX_CAPTURE_SIZE
from ridgeline.vllm_memory import parse_version, vllm_data

# the spellings a launch line gives the compilation config under (the parser's, cli_engine.py)
CONFIG_FLAGS = ("--compilation-config", "--compilation_config", "-cc", "-O")
# CompilationMode (vllm/config/compilation.py): the mode key takes its number or its name
MODES_BY_NAME = {"NONE": 0, "STOCK_TORCH_COMPILE": 1, "DYNAMO_TRACE_ONCE": 2, "VLLM_COMPILE": 3}
READ_KEYS = ("cudagraph_capture_sizes", "max_cudagraph_capture_size", "cudagraph_mode",
             "mode", "level")


def rules() -> dict[str, Any]:
    data: dict[str, Any] = vllm_data()["compilation_config"]
    return data


@dataclass(frozen=True)
class CompilationAsked:
    """What a launch line's compilation config sets, in EngineSettings' words: the sizes
    listed (None: vLLM's own list), the largest (None: vLLM's default cap), the CUDA-graph
    mode after vLLM's own resolution (None: the default FULL_AND_PIECEWISE), and whether
    torch.compile runs (None: as the graphs switch implies)."""

    cudagraph_capture_sizes: tuple[int, ...] | None = None
    max_cudagraph_capture_size: int | None = None
    cudagraph_mode: str | None = None
    torch_compile: bool | None = None
    # mode STOCK_TORCH_COMPILE (1): Model Runner V2 sends it to the V1 runner before v0.32
    # (vllm_memory.model_runner, engines.json vllm.mrv2_stock_compile_fallback)
    stock_torch_compile: bool = False
    # the keys read and ignored (engines.json vllm.compilation_config ignored_keys), which the
    # run's note names: pass_config, custom_ops, ...
    ignored: tuple[str, ...] = ()

    @property
    def eager(self) -> bool:
        """No graph captured: every step runs as under --enforce-eager."""
        return self.cudagraph_mode == "NONE"


def dotted_argv(argv: list[str]) -> list[str]:
    """``argv`` with vLLM's dotted spellings as one flag and a ``.key=value`` word that the
    parser's --compilation-config reads (FlexibleArgumentParser's '--json-arg.key value'):
    ``-cc.mode=0`` is ``-cc .mode=0``, ``-O.cudagraph_mode FULL`` is ``-O
    .cudagraph_mode=FULL``; ``-O3`` and ``-O=3`` are ``-O 3``. Other words are kept."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        flag, dot, rest = token.partition(".")
        if dot and flag in CONFIG_FLAGS and rest:
            if "=" not in rest and i < len(argv):  # '-cc.mode 0': its value is the next word
                rest = f"{rest}={argv[i]}"
                i += 1
            out += [flag, "." + rest]
        elif token.startswith("-O") and len(token) > 2 and token[2] not in ".-" \
                and token[2:].lstrip("="):  # -O3, -O=3
            out += ["-O", token[2:].lstrip("=")]
        else:
            out.append(token)
    return out


class ConfigPart(argparse._AppendAction):
    """Keeps each --compilation-config (-cc, -O) and --optimization-level word with the
    spelling that gave it, for ``compilation_asked`` to read once the release is known."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        seen = list(getattr(namespace, self.dest, None) or [])
        setattr(namespace, self.dest, [*seen, (str(option_string), str(values))])


def compilation_asked(parts: list[tuple[str, str]], sizes_flag: list[int] | None,
                      old_sizes_flag: list[int] | None, version: str | None,
                      enforce_eager: bool = False) -> CompilationAsked:
    """The compilation config the words give (``parts``: spelling and value, in order), with
    --cudagraph-capture-sizes (``sizes_flag``) or --cuda-graph-sizes (``old_sizes_flag``),
    as vLLM ``version`` (default: the newest modelled) reads them; InputError, one line, for
    a spelling the release does not take, bad JSON, or a key ridgeline does not model."""
    r = rules()
    asked = version or str(vllm_data()["default_version"])
    v = parse_version(asked)
    levels = v >= parse_version(r["optimization_levels_from"])
    config: dict[str, Any] = {}
    level: int | None = None
    for spelling, value in parts:
        if spelling == "--optimization-level" or (spelling == "-O" and value.isdigit()):
            level = _level(spelling, value, asked, levels)
            if not levels:  # before v0.12: -O<n> is torch.compile's level n
                config["level"] = level
                level = None
            continue
        _check_spelling(spelling, asked, v)
        config.update(_part(spelling, value))
    given = sorted(set(config) - set(READ_KEYS) - set(r["ignored_keys"]))
    if given:
        raise InputError(f"--compilation-config key {given[0]} is not modelled: it changes "
                         "the compiled model or its graphs in a way ridgeline does not price "
                         f"(read: {', '.join(READ_KEYS)}; ignored: {', '.join(r['ignored_keys'])})")
    _check_pass_config(config.get("pass_config"))
    sizes = _sizes(config, sizes_flag, old_sizes_flag, v)
    largest = config.get("max_cudagraph_capture_size")
    if largest is not None and (not isinstance(largest, int) or isinstance(largest, bool)
                                or largest < 1):
        raise InputError(f"--compilation-config max_cudagraph_capture_size must be a whole "
                         f"number of at least 1, got {largest!r}")
    if largest is not None and largest > MAX_CAPTURE_SIZE:  # its size list: minutes
        raise InputError(f"--compilation-config max_cudagraph_capture_size must be at most "
                         f"{MAX_CAPTURE_SIZE:,} (a batch past any engine's), got {largest:,}")
    if largest is not None and sizes and largest != max(sizes):
        raise InputError(f"--compilation-config max_cudagraph_capture_size {largest} and "
                         f"cudagraph_capture_sizes (largest {max(sizes)}) disagree, and vLLM "
                         "refuses to start ('should be consistent with the max value of "
                         "cudagraph_capture_sizes'): give one")
    mode, compiled = _resolved(config, level if level is not None else
                               int(r["default_level"]), enforce_eager)
    # torch.compile kept without graphs (mode NONE), or graphs kept without it: said; else
    # it is as the graphs switch implies (--enforce-eager: neither)
    stock = not enforce_eager and "mode" in config and _compile_mode(config["mode"]) == 1
    return CompilationAsked(sizes, largest if sizes is None else None,
                            None if mode == "FULL_AND_PIECEWISE" else mode,
                            compiled if compiled == (mode == "NONE") else None, stock,
                            tuple(k for k in r["ignored_keys"] if k in config))


def _level(spelling: str, value: str, version: str, levels: bool) -> int:
    """The level ``-O<n>`` or --optimization-level gives: 0 to 3."""
    if spelling == "--optimization-level" and not levels:
        raise InputError(f"--optimization-level came in vLLM v{rules()['optimization_levels_from']}"
                         f" (PR #26847); vLLM {version} has none")
    if value not in ("0", "1", "2", "3"):
        raise InputError(f"{spelling} takes an optimization level 0, 1, 2 or 3, got {value!r}")
    return int(value)


def _check_spelling(spelling: str, version: str, v: tuple[int, ...]) -> None:
    """-cc came in v0.12 (PR #29557); -O.<key> and -O {json} went in v0.13 (PR #29991)."""
    r = rules()
    if spelling == "-cc" and v < parse_version(r["cc_alias_from"]):
        raise InputError(f"-cc came in vLLM v{r['cc_alias_from']} (PR #29557); vLLM {version} "
                         "spells it -O or --compilation-config")
    if spelling == "-O" and v >= parse_version(r["dotted_O_until"]):
        raise InputError(f"vLLM {version} takes -O for the optimization level alone (-O0 … "
                         f"-O3); -O.<key> and -O '{{...}}' went in v{r['dotted_O_until']} (PR "
                         "#29991): spell it -cc.<key> or --compilation-config")


def _part(spelling: str, value: str) -> dict[str, Any]:
    """One word's keys: a JSON object, or '.key=value' (a dotted spelling, dotted_argv)."""
    if value.startswith("."):
        path, _, text = value[1:].partition("=")
        try:
            read: Any = json.loads(text)
        except ValueError:
            read = text
        keys = path.split(".")
        for key in reversed(keys[1:]):
            read = {key: read}
        return {keys[0]: read}
    return json_object(value, spelling, '{"cudagraph_mode": "FULL_DECODE_ONLY"}')


def _check_pass_config(passes: Any) -> None:
    """pass_config is ignored, but sequence parallelism (and async TP, built on it) keeps
    only captured sizes that the TP size divides: refused."""
    if passes is None:
        return
    if not isinstance(passes, dict):
        raise InputError(f"--compilation-config pass_config takes a JSON object, got {passes!r}")
    for key in ("enable_sp", "fuse_gemm_comms", "enable_sequence_parallelism", "enable_async_tp"):
        if passes.get(key):
            raise InputError(f"--compilation-config pass_config.{key} is not modelled: "
                             "sequence parallelism keeps only the captured sizes the "
                             "tensor-parallel size divides, and changes each step")


def _sizes(config: dict[str, Any], flag: list[int] | None, old_flag: list[int] | None,
           v: tuple[int, ...]) -> tuple[int, ...] | None:
    """The listed sizes: cudagraph_capture_sizes, --cudagraph-capture-sizes, or
    --cuda-graph-sizes (before v0.11.1 one value N is the list 1, 2, 4, 8, 16, … N)."""
    given = [(name, value) for name, value in (
        ("cudagraph_capture_sizes", config.get("cudagraph_capture_sizes")),
        ("--cudagraph-capture-sizes", flag), ("--cuda-graph-sizes", old_flag))
        if value is not None]
    if not given:
        return None
    if len(given) > 1:
        raise InputError(f"{given[0][0]} and {given[1][0]} both list the CUDA-graph sizes: "
                         "give one")
    name, sizes = given[0]
    since = parse_version(rules()["cuda_graph_sizes_list_from"])
    if name == "--cudagraph-capture-sizes" and v < since:
        raise InputError(f"--cudagraph-capture-sizes came in vLLM v{rules()['cuda_graph_sizes_list_from']} "
                         "(PR #26016); before it, --cuda-graph-sizes")
    if not isinstance(sizes, list) or not sizes or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in sizes):
        raise InputError(f"{name} takes a list of whole numbers of at least 1, got {sizes!r}")
    if name == "--cuda-graph-sizes" and len(sizes) == 1 and v < since:
        top = sizes[0]
        sizes = [s for s in (1, 2, 4) if s <= top] + list(range(8, top + 1, 8))
    return tuple(sorted(set(sizes)))


def _resolved(config: dict[str, Any], level: int, enforce_eager: bool) -> tuple[str, bool]:
    """The CUDA-graph mode and whether torch.compile runs, as VllmConfig.__post_init__
    resolves them: --enforce-eager turns both off; the level's defaults fill what the config
    leaves unset; a mode with piecewise graphs (PIECEWISE, FULL_AND_PIECEWISE) captures
    nothing without vLLM's own compile (mode 3)."""
    defaults = rules()["level_defaults"][str(level)]
    mode = _compile_mode(config.get("mode", config.get("level", defaults["mode"])))
    graphs = config.get("cudagraph_mode", defaults["cudagraph_mode"])
    names = rules()["modes"]
    if not isinstance(graphs, str) or graphs.upper() not in names:
        raise InputError(f"--compilation-config cudagraph_mode is one of {', '.join(names)}; "
                         f"got {graphs!r}")
    graphs = graphs.upper()
    if enforce_eager:
        return "NONE", False
    if graphs in ("PIECEWISE", "FULL_AND_PIECEWISE") and mode != 3:
        graphs = "NONE"
    return graphs, mode != 0


def _compile_mode(value: Any) -> int:
    """torch.compile's mode (or the older level): 0 to 3, or its name."""
    if isinstance(value, str) and value.upper() in MODES_BY_NAME:
        return MODES_BY_NAME[value.upper()]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 3:
        return value
    raise InputError(f"--compilation-config mode is 0 to 3 (NONE, STOCK_TORCH_COMPILE, "
                     f"DYNAMO_TRACE_ONCE, VLLM_COMPILE), got {value!r}")


def apply_compilation(args: argparse.Namespace) -> None:
    """Set ``args``' engine settings from the compilation config the launch line gave (none
    given: nothing changes): the graphs switch (--enforce-eager where nothing is captured),
    the sizes, the largest and torch.compile. Refused under an engine other than vLLM."""
    parts = getattr(args, "compilation_config", None) or []
    sizes = getattr(args, "cudagraph_capture_sizes", None)
    old = getattr(args, "cuda_graph_sizes", None)
    if not (parts or sizes or old):
        return
    from ridgeline.engines import engine_id

    asked = getattr(args, "engine", None) or "vllm"
    engines = asked if isinstance(asked, list) else str(asked).split(",")
    given = parts[0][0] if parts else ("--cudagraph-capture-sizes" if sizes
                                       else "--cuda-graph-sizes")
    if len(engines) > 1:  # fit's comparison (--engine vllm,sglang) runs each at its defaults
        raise InputError(f"{given} names one engine's settings; compare engines at their "
                         "defaults, or give one --engine")
    for engine in engines:
        if engine_id(engine.strip()) != "vllm":
            raise InputError(f"{given} is vLLM's; {engine_id(engine.strip())} has no such flag")
    found = compilation_asked(parts, sizes, old, getattr(args, "engine_version", None),
                              bool(getattr(args, "enforce_eager", False)))
    if found.max_cudagraph_capture_size is not None:
        flag = getattr(args, "max_cudagraph_capture_size", None)
        if flag is not None and flag != found.max_cudagraph_capture_size:
            raise InputError(f"--max-cudagraph-capture-size {flag} and the compilation "
                             "config's max_cudagraph_capture_size "
                             f"{found.max_cudagraph_capture_size} disagree: give one")
        args.max_cudagraph_capture_size = found.max_cudagraph_capture_size
    if found.cudagraph_capture_sizes is not None \
            and getattr(args, "max_cudagraph_capture_size", None) not in (
                None, max(found.cudagraph_capture_sizes)):
        raise InputError(f"--max-cudagraph-capture-size {args.max_cudagraph_capture_size} and "
                         f"the listed CUDA-graph sizes (largest "
                         f"{max(found.cudagraph_capture_sizes)}) disagree, and vLLM refuses "
                         "to start: give one")
    if found.ignored:  # named in the run's note (launch_flags.launch_note)
        args.compilation_ignored = (given, found.ignored)
    args.cudagraph_capture_sizes = found.cudagraph_capture_sizes
    args.cudagraph_mode = None if found.eager else found.cudagraph_mode
    args.torch_compile = found.torch_compile
    args.stock_torch_compile = found.stock_torch_compile or None
    if found.eager:  # no graph: --enforce-eager's switch, which every command reads
        args.enforce_eager = True
