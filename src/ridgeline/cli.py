"""The command line: parse, call the library, render. Bad input exits 2 with one line."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from ridgeline import __version__
from ridgeline.catalog import nearest_spelling
from ridgeline.cli_config_file import (
    MOVED_FLAGS,
    command_options,
    config_file_error,
    vllm_dashes,
    with_config_file,
)
from ridgeline.cli_engine import ENGINE_DEFAULT, ENGINE_NAMES, engine_flag, sizing_flags
from ridgeline.cli_load import (
    _say_caution,
    default_engine,
    kv_release_refusal,
    llamacpp_builds_for,
)
from ridgeline.cli_model_arg import model_flag_moved, model_word_moved
from ridgeline.cli_offload import _split_mode
from ridgeline.cli_output_files import refuse_bad_outputs
from ridgeline.cli_spellings import (
    COMMAND_ALIASES,
    NUM_GPUS_FLAGS,
    command_hint,
    model_as_flag_hint,
    refuse_two_gpu_counts,
    refuse_two_spellings,
    taken_as_hint,
    unrecognized_hint,
)
from ridgeline.cli_types import (
    MAX_DP_RANKS,
    MEMORY_FRACTION_RANGE,
    MEMORY_GIB_RANGE,
    _engine_dtype,
    _flash_attn,
    _how_many,
    _kv_name,
    _not_empty,
    _one_accelerator,
    _positive_count,
    _positive_float,
    _quantization_method,
    _step_tokens,
    _typed,
    _weight_name,
)
from ridgeline.errors import DoesNotFit, InputError, shorten_path, shorten_runs
from ridgeline.llamacpp_launch import CacheType, CtxSize
from ridgeline.render import refusal_json, render

Handler = Callable[[argparse.Namespace], Any]



# -- shared option groups ---------------------------------------------------------------
def _output(p: argparse.ArgumentParser, plot: bool = False) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--explain", action="store_true",
                   help="show each formula with its inputs and their sources")
    if plot:
        p.add_argument("--plot", metavar="FILE", type=_not_empty("plot path"),
                       help="also draw it: .png/.svg (needs matplotlib: the checkout's [plot] "
                            "extra) or .html")


def _model(p: argparse.ArgumentParser, optional: bool = False) -> None:
    p.add_argument("model", metavar="MODEL", nargs="?" if optional else None,
                   help="catalog alias (llama-3.1-70b), HF id, or path to a config.json (or "
                   "as --model NAME)"
                   + ("; none: list the bundled models" if optional else ""))
    p.add_argument("--fetch", action="store_true",
                   help="download MODEL's config.json from the Hugging Face Hub")


def _gpu(p: argparse.ArgumentParser, required: bool = True, several: bool = False,
         unnamed: str = "optional") -> None:
    """The accelerator flags; ``unnamed`` says what a command not required to name one
    does without it (moe: the article's H100)."""
    g = p.add_argument_group("accelerator")
    g.add_argument("--gpu", required=False, metavar="NAME",
                   type=_not_empty("accelerator name") if several else _one_accelerator(),
                   help="catalog id or name (h100, 'NVIDIA H100 80GB HBM3')" +
                   ("" if required else f"; {unnamed}") +
                   ("; several, comma-separated, side by side" if several else ""))
    g.add_argument("--gpu-file", metavar="FILE", type=_not_empty("accelerator file path"),
                   help="an accelerator record in JSON")
    g.add_argument("--peak-tflops", type=_positive_float("peak TFLOP/s"), metavar="TFLOPS",
                   help="custom accelerator: dense peak TFLOP/s, read as its bf16 (16-bit) "
                   "matmul rate (with --bandwidth-gbs)")
    g.add_argument("--bandwidth-gbs", type=_positive_float("bandwidth GB/s"), metavar="GB/S",
                   help="custom accelerator: memory bandwidth in GB/s")
    g.add_argument("--gpu-memory-gib", metavar="GIB",
                   type=_positive_float("GPU memory GiB", *MEMORY_GIB_RANGE),
                   help="memory in GiB: a smaller configuration of --gpu (a 32 GB M1 Max; at "
                   "most the catalog's size), or a custom accelerator's (needed with a model)")
    g.add_argument(*NUM_GPUS_FLAGS, dest="num_gpus", default=1,
                   type=_how_many("number of GPUs"),
                   help="accelerators in one tensor-parallel group (default 1; vLLM "
                   "--tensor-parallel-size, SGLang --tp-size or --tp, TensorRT-LLM --tp_size)")
    p.set_defaults(gpu_required=required)


def llamacpp_batch_flag(g: Any) -> None:
    """llama.cpp's -b (n_batch), in its own name and default."""
    g.add_argument("-b", "--batch-size", dest="n_batch", metavar="N",
                   type=_positive_count("batch size"),
                   help="llama.cpp: the logical batch, tokens one llama_decode call takes "
                   "(default 2048); it bounds -ub and how a prompt is cut")


def engine_sizes(g: Any, llamacpp: bool = True, slots: bool | None = None) -> None:
    """The pool's and the scheduler's sizes, under each engine's own name for them (with
    ``llamacpp``, llama.cpp's slots and ubatch too; ``slots``: its slots, -np, alone)."""
    g.add_argument("--gpu-memory-utilization", "--mem-fraction-static",
                   "--kv-cache-free-gpu-mem-fraction", "--kv_cache_free_gpu_memory_fraction",
                   "--free_gpu_memory_fraction", "--kv_cache_free_gpu_mem_fraction",
                   dest="gpu_memory_utilization", metavar="F",
                   type=_positive_float("memory fraction", *MEMORY_FRACTION_RANGE),
                   help="memory share: vLLM of the card, SGLang static, TRT-LLM of what is "
                   "free (trtllm-serve's --kv_cache_free_gpu_memory_fraction, "
                   "trtllm-bench's --kv_cache_free_gpu_mem_fraction)")
    seats_flag(g, llamacpp if slots is None else slots)
    g.add_argument("--max-num-batched-tokens", "--chunked-prefill-size", "--max-num-tokens",
                   "--max_num_tokens", *(("--ubatch-size", "-ub") if llamacpp else ()),
                   dest="max_num_batched_tokens",
                   metavar="N", type=_step_tokens,
                   help="tokens per step: the profiled pass, and the chunk a longer prompt runs "
                   "in (prefill, simulate)"
                   + ("; llama.cpp n_ubatch (-ub)" if llamacpp else ""))
    if llamacpp:
        llamacpp_batch_flag(g)
    g.add_argument("--kv-cache-memory-bytes", "--kv-cache-memory", dest="kv_cache_memory_bytes",
                   metavar="N", type=_positive_count("kv_cache_memory_bytes"),
                   help="vLLM: the KV pool per GPU in bytes (30G = 30 GiB, 30g = 30e9), set "
                   "rather than profiled; gpu_memory_utilization is then ignored")
    g.add_argument("--max-total-tokens", "--kv-cache-max-tokens", dest="max_total_tokens",
                   metavar="N", type=_positive_count("max_total_tokens"),
                   help="SGLang, TensorRT-LLM (kv_cache_config.max_tokens): the most tokens the "
                   "pool holds; the engine keeps the smaller of it and what memory leaves")
    g.add_argument("--block-size", "--page-size", "--tokens-per-block", dest="block_size",
                   type=_how_many("block size"), metavar="N",
                   help="tokens per KV block/page")
    sizing_flags(g)


def seats_flag(g: Any, llamacpp: bool = True) -> None:
    """The seats (max_num_seqs) under each engine's name: vLLM --max-num-seqs, SGLang
    --max-running-requests, TensorRT-LLM --max_batch_size; with ``llamacpp``, llama-server's
    slots (-np). fit, simulate, decode and prefill take it through ``engine_sizes``, observe
    alone."""
    g.add_argument("--max-num-seqs", "--max-running-requests", "--max-batch-size",
                   "--max_batch_size", *(("--parallel", "-np") if llamacpp else ()),
                   dest="max_num_seqs", type=_how_many("max_num_seqs"), metavar="N",
                   help="seats: vLLM, SGLang, TRT-LLM names"
                   + ("; llama.cpp slots (-np)" if llamacpp else ""))


def _cells(text: str) -> int:
    """llama-server's -c: its cells, a whole number; 0 is the model's trained context."""
    from ridgeline.units import parse_count

    return int(_typed(lambda t: parse_count(t, "llama-server -c"))(text))


def max_model_len_option(p: Any, help_text: str, cells: bool = True) -> None:  # or a group
    """--max-model-len as every command that takes it parses it, under each engine's name
    for it (vLLM --max-model-len, SGLang --context-length, TensorRT-LLM --max_seq_len; 32k =
    32,000, 32K = 32,768); llama-server's -c, the cells its -np slots share, is read as
    -c ÷ -np (llamacpp_launch), where ``cells`` (plan sizes no llama.cpp: not there)."""
    p.add_argument("--max-model-len", "--context-length", "--max-seq-len", "--max_seq_len",
                   dest="max_model_len", type=_positive_count("max model length"), metavar="N",
                   help=help_text)
    if not cells:
        return
    p.add_argument("-c", "--ctx-size", dest="ctx_size", action=CtxSize, metavar="N",
                   type=_cells, help=argparse.SUPPRESS)


def _pipeline(p: Any) -> None:  # a parser or an argument group
    p.add_argument("--pipeline-parallel-size", "-pp", "--pp-size", "--pp_size",
                   "--pipeline_parallel_size", dest="pipeline_parallel_size", metavar="PP",
                   type=_how_many("pipeline-parallel size"),
                   help="vLLM/SGLang/TensorRT-LLM: stages of layers, each a tensor-parallel "
                   "group of --num-gpus (PP × TP GPUs in all; default 1); llama.cpp splits "
                   "layers over --num-gpus itself")


def _engine(p: argparse.ArgumentParser) -> None:
    engine_flag(p, f"engine whose calibrated profile gives the expectation ({ENGINE_DEFAULT}): "
                f"{ENGINE_NAMES}")
    p.add_argument("--profile", metavar="FILE", type=_not_empty("profile path"),
                   help="profiles from `ridgeline calibrate`")
    _split_mode(p)
    p.add_argument("--flash-attn", "-fa", choices=["on", "off", "auto"],
                   type=_typed(_flash_attn),
                   help="llama.cpp -fa (default auto: on where supported); off costs the "
                   "attention scores written to memory and read back")


def _formats(p: argparse.ArgumentParser, dtype: bool = False) -> None:
    """--weights (or the engines' --quantization) and --kv-dtype; with ``dtype``, vLLM's and
    SGLang's --dtype, which the deployment reads (cli_load.build_deployment)."""
    weights = p  # both given: a checkpoint quantized with the method, stored in FMT
    weights.add_argument("--weights", metavar="FMT", type=_typed(_weight_name),
                         help="weight format (bf16, fp8, awq-int4, nvfp4, mxfp4, q4_k_m, …, or "
                         "the GGUF mixes mxfp4_moe, iq1_s … iq3_m, tq1_0; Unsloth's UD "
                         "names are refused): a checkpoint stored in FMT; default: as the "
                         "checkpoint stores them")
    weights.add_argument("--quantization", "-q", metavar="METHOD",
                         type=_typed(_quantization_method),
                         help="vLLM's and SGLang's --quantization: fp8 (also ptpc_fp8, "
                         "w8a8_fp8) quantizes a 16-bit checkpoint on load; fbgemm_fp8, "
                         "modelopt, w8a8_int8, modelopt_fp4, modelopt_mixed, mxfp4, awq, gptq (and their "
                         "_marlin kernels) read a checkpoint of that method, as stored (modelopt, "
                         "modelopt_fp4 on a 16-bit model: its ModelOpt export); a mismatch is "
                         "refused as the engines refuse it (--weights sizes any format)")
    if dtype:
        p.add_argument("--dtype", type=_typed(_engine_dtype), metavar="T",
                       help="vLLM's and SGLang's auto, bfloat16, float16 (half): the type an "
                       "unquantized checkpoint runs in (weights a format quantizes keep it)")
    p.add_argument("--kv-dtype", "--kv-cache-dtype", dest="kv_dtype", metavar="D", type=_typed(_kv_name),
                   action=_KvSpelling,
                   help="KV-cache dtype (bf16, fp8, q8_0, …; llama.cpp's -ctk D -ctv D); "
                   "default: the model's dtype (llama.cpp: f16)")
    for side in ("k", "v"):  # llama.cpp's K and V cache types: an equal pair is --kv-dtype
        p.add_argument(f"-ct{side}", f"--cache-type-{side}", dest=f"cache_type_{side}",
                       action=CacheType, type=_typed(_kv_name), metavar="D",
                       help=argparse.SUPPRESS)


class _KvSpelling(argparse._StoreAction):
    """Stores the KV dtype and the spelling it came under: vLLM's and SGLang's
    --kv-cache-dtype takes the engine's own values, checked against the release
    (engine_choices.kv_cache_dtype_problem); ridgeline's --kv-dtype its own names."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from ridgeline.engine_choices import unmodelled_choice_problem

        # an engine's value ridgeline has no cache format for (vLLM's fp8_inc) says so under
        # every command, not only where a deployment is built (kv's, roofline's own sizes):
        # main refuses it once the engine is known, as the release refuses it where that
        # release came before the value (cli_load.kv_release_refusal)
        namespace.kv_dtype_unmodelled = unmodelled_choice_problem(str(values),
                                                                  str(option_string))
        setattr(namespace, self.dest, values)
        namespace.kv_dtype_spelling = option_string


class _Spelled(argparse.Action):
    """Stores the value and the spelling given (``data_parallel_spelling``): SGLang's
    --dp-size is not to be read as vLLM's --data-parallel-size (data_parallel.py)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.data_parallel_spelling = option_string


def data_parallel_flags(p: Any, sglang: bool = True, expert_parallel: bool = True,
                        refused: str = "") -> None:
    """Data-parallel attention in each engine's words (data_parallel.py): vLLM's
    --data-parallel-size N, ranks of --tensor-parallel-size GPUs each; SGLang's --dp-size N
    --enable-dp-attention over its --tp-size GPUs; and the experts' --enable-expert-parallel.
    A command that takes the flags only to refuse them (``refuse_data_parallel``) says why in
    their help (``refused``)."""
    p.add_argument("--data-parallel-size", "-dp", "--dp-size", "--dp", dest="data_parallel_size",
                   metavar="N", type=_how_many("data-parallel size", MAX_DP_RANKS),
                   action=_Spelled,
                   # a refused flag's help says only that: its meaning is another command's
                   help=f"data-parallel attention ranks (vLLM, SGLang): {refused}" if refused else
                   "data-parallel attention: N ranks, each with its own requests and KV "
                   "pool and its own copy of the attention weights, a MoE's experts spread over "
                   "all of them. vLLM --data-parallel-size (-dp): N ranks of --num-gpus "
                   "(--tensor-parallel-size) GPUs each"
                   + ("; SGLang --dp-size with --enable-dp-attention and --engine sglang: "
                      "--num-gpus (its --tp-size) GPUs in all, attention over --num-gpus ÷ N "
                      "(its --dp-size alone runs whole replicas: size one with --num-gpus)"
                      if sglang else "; SGLang's --dp-size is not read here (its replicas: "
                      "size one with --num-gpus)"))
    if sglang:
        p.add_argument("--enable-dp-attention", action="store_true",
                       help="SGLang: attention data-parallel over --dp-size ranks (MoE models)"
                       + (f"; {refused}" if refused else ""))
    if expert_parallel:
        expert_parallel_flags(p)


def expert_parallel_flags(p: Any) -> None:  # a parser or an argument group
    """A MoE's expert parallelism in each engine's words: vLLM's --enable-expert-parallel
    switch (--ep alone; SGLang's --enable-ep-moe, which sets ep_size = tp_size: engines.json
    sglang ep_switch); SGLang's --ep-size (--expert-parallel-size, --ep N) and trtllm-serve's
    --ep_size (--moe_expert_parallel_size), which ridgeline reads at 1 or at every GPU the
    experts run on (cli_load.expert_parallel_asked); ``--ep N`` is read as --ep-size N
    (``_ep_with_size``)."""
    p.add_argument("--enable-expert-parallel", "--ep", "--enable-ep-moe", dest="expert_parallel",
                   action="store_true", help="MoE: each GPU holds whole experts, a share "
                   "of them, instead of a slice of every expert (vLLM's switch; SGLang's "
                   "--ep-size equal to its --tp-size, which its --enable-ep-moe sets)")
    p.add_argument("--ep-size", "--expert-parallel-size", "--ep_size",
                   "--moe_expert_parallel_size", dest="expert_parallel_size", metavar="N",
                   type=_how_many("expert-parallel size"),
                   help="SGLang --ep-size (--ep N), trtllm-serve --ep_size: the GPUs the experts "
                   "are spread over, whole; 1 (each expert sliced over the tensor-parallel GPUs, "
                   "the default) or all of them (--num-gpus, × the data-parallel ranks: "
                   "--enable-expert-parallel), the two layouts modelled")


def refuse_data_parallel(args: argparse.Namespace, command: str, why: str) -> None:
    """A command that takes no data-parallel layout says ``why``, rather than size the
    deployment without the one given."""
    given = [flag for flag, value in (("--data-parallel-size", getattr(args, "data_parallel_size", None)),
                                      ("--enable-dp-attention",
                                       getattr(args, "enable_dp_attention", False) or None))
             if value is not None]
    if given:
        raise InputError(f"{command} takes no {' or '.join(given)}: {why}")


def _deployment_flags(p: argparse.ArgumentParser, several: bool = False) -> None:
    """MODEL on its hardware: the accelerator and its count (with ``several``, cards side by
    side, comma-separated), the pipeline stages, the weight and KV formats."""
    _model(p)
    _gpu(p, several=several)
    _pipeline(p)
    _formats(p, dtype=True)


# -- the parser --------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2, a value that starts like
    a negative number ('-1,2', '-0.5') is a value to check, not an unknown option, and a long
    option is spelled whole: '--bat 8' is not --batch (nor llama.cpp's --swa-full SGLang's
    --swa-full-tokens-ratio), and a later option cannot change what an old spelling means."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # each subcommand's parser is one of these
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\.?\d[\d.,eE+-]*$")

    def format_help(self) -> str:
        """A command's help by concern, each engine's own flags folded (cli_help);
        `ridgeline --help`, the commands, as argparse prints it."""
        if self._subparsers is not None:
            return super().format_help()
        from ridgeline.cli_help import command_help

        return command_help(self)

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None,
                         ) -> tuple[argparse.Namespace, list[str]]:
        self._typed = list(sys.argv[1:] if args is None else args)  # for error's flag names
        return super().parse_known_args(args, namespace)

    def _get_option_tuples(self, option_string: str) -> Any:
        """Python before 3.12 matches a single-dash prefix even without allow_abbrev
        (llama.cpp's -t 8, its threads, read as -tp 8): only a one-letter option with a
        number attached ('-c8192', '-O3') is matched; llama-server's -cram 0 is not -c 'ram'."""
        tuples = super()._get_option_tuples(option_string)
        if self.allow_abbrev or option_string[1:2] in self.prefix_chars:
            return tuples
        return [t for t in tuples
                if t[1] == option_string[:2] and option_string[2:3].isdigit()]

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        """A flag's value written '--' (--batch=--) is refused: Python before 3.13 drops the
        '--' and hands the flag an empty list past its type check, which met the arithmetic
        as a list ("max() arg is an empty sequence", an internal error)."""
        if action.option_strings and "--" in arg_strings and action.nargs not in (
                argparse.PARSER, argparse.REMAINDER):
            raise argparse.ArgumentError(action, "expected a value, got '--' (which ends "
                                                 "the flags)")
        return super()._get_values(action, arg_strings)

    def error(self, message: str) -> NoReturn:
        typed = getattr(self, "_typed", [])
        message = one_spelling(message, typed)
        if message.startswith("the following arguments are required"):
            # kv --max-model-len 8192: kv's length is --context, which it needs; attention
            # llama-3.1-8b: its model is --model
            command = self.prog.split()[-1]
            from ridgeline.launch_flags import model_flag_refusal

            named = model_flag_refusal(typed) if "MODEL" in message else ""
            if named:  # fit -hf ggml-org/gpt-oss-20b-GGUF: llama-server's own model flag
                self.exit(2, f"ridgeline: error: {shorten_runs(named)}\n")
            bare = [w for i, w in enumerate(typed)
                    if not w.startswith("-") and (i == 0 or not typed[i - 1].startswith("-"))]
            message += taken_as_hint(command, typed) or (
                model_as_flag_hint(command, bare) if "--model" in message else "") or (
                self._slip_hint(typed))
        elif message.startswith("argument COMMAND: invalid choice"):
            commands = next(a for a in self._actions  # rooflne: roofline
                            if isinstance(a, argparse._SubParsersAction))
            message += command_hint(next((w for w in typed if not w.startswith("-")), ""),
                                    list(commands.choices))
        elif " invalid choice: " in message:  # plan --engine sglng: sglang
            message += self._choice_hint(message)
        message = file_named(message, getattr(self, "file_flags", {}))
        self.exit(2, f"ridgeline: error: {shorten_runs(message)} (see `{self.prog} --help`)\n")

    def _choice_hint(self, message: str) -> str:
        """"; did you mean sglang?" for a flag's value that is a slip from one of its choices
        ("argument --engine: invalid choice: 'sglng'"), else ""."""
        flag, _, rest = message.removeprefix("argument ").partition(": invalid choice: ")
        action = self._option_string_actions.get(flag.split("/")[0])
        if action is None or not action.choices:
            return ""
        value = rest.split(" (choose from")[0].strip("'")
        near = nearest_spelling(value, [str(c) for c in action.choices])
        return f"; did you mean {near}?" if near else ""

    def _slip_hint(self, typed: Sequence[str]) -> str:
        """"; --contxt: did you mean --context?" for the first flag typed that this command
        does not take, where it is a slip from one it does (kv --contxt 4k was told only
        that --context is required)."""
        flags = self._option_string_actions
        for word in typed:
            flag = word.partition("=")[0]
            if flag.startswith("--") and flag not in flags:
                near = nearest_spelling(flag, list(flags))
                return f"; {flag}: did you mean {near}?" if near else ""
        return ""


def file_named(message: str, file_flags: dict[str, tuple[str, str]]) -> str:
    """A refusal of a flag's value that a --config file gave, said as the file's key: "argument
    --kv-cache-dtype: unknown …" → "serve.yaml: kv-cache-dtype: unknown …", "--scheduling-policy
    'nan' is no choice …" → "serve.yaml: scheduling-policy 'nan' is no choice …" (as a bound
    from the file is named: launch_flags.launch_note). ``file_flags``: each flag the file
    gave, to its label and, where the command line gives the flag too, the file's value,
    which the message must quote to be the file's; any other message as it is."""
    found = re.match(r"(?:argument )?(-{1,2}[\w.-]+)(?=[: ])", message)
    if found is None or found.group(1) not in file_flags:
        return message
    label, value = file_flags[found.group(1)]
    if value and repr(value) not in message:  # the command line's value, not the file's
        return message
    return label + message[found.end():]


def one_spelling(message: str, typed: Sequence[str]) -> str:
    """argparse names a flag by all its spellings ('--num-gpus/--tensor-parallel-size/-tp/…'),
    a run too long to read; the error keeps the one the user typed, else the first."""
    def pick(m: re.Match[str]) -> str:
        spellings = m.group().split("/")
        return next((s for s in spellings
                     if any(t == s or t.startswith(f"{s}=") for t in typed)), spellings[0])

    return re.sub(r"(?<!\S)-[\w-]+(?:/-[\w-]+)+", pick, message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ridgeline",
        description="LLM serving arithmetic from a config.json and a spec sheet.",
        epilog="`ridgeline COMMAND --help` gives a command's flags, with examples. First try:\n"
               "  ridgeline decode llama-3.1-70b --gpu h100 --weights fp8 --batch 1,32 "
               "--context 2000",
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the example on a line
    )
    parser.add_argument("--version", action="version", version=f"ridgeline {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")


    from ridgeline import (
        cli_catalog,
        cli_data,
        cli_decode,
        cli_fit,
        cli_kv,
        cli_measure,
        cli_observe,
        cli_page,
        cli_plan,
        cli_prefill,
        cli_profile,
        cli_roofline,
        cli_simulate,
        cli_utilization,
    )
    from ridgeline.cli_companion import add_companion_commands

    # the order `ridgeline --help` lists the commands in
    for module in (cli_catalog, cli_roofline, cli_kv, cli_decode, cli_prefill, cli_utilization,
                   cli_fit, cli_simulate, cli_plan, cli_observe, cli_page, cli_measure, cli_data,
                   cli_profile):
        module.register(sub)

    add_companion_commands(sub, _output, _typed)
    from ridgeline.launch_flags import COMMANDS, add_launch_flags

    for name in COMMANDS:  # a pasted launch line's flags that change nothing, and the rest
        add_launch_flags(sub.choices[name])
    from ridgeline.cli_help import add_help_flags

    for command in sub.choices.values():  # every flag is added: the sections can be told
        add_help_flags(command)
    for listed in sub._choices_actions:  # `ridgeline CMD --help` opens with what it answers,
        sub.choices[listed.dest].description = listed.help  # the line `ridgeline --help` gives
    return parser


def _join_negative_values(argv: Sequence[str]) -> list[str]:
    """'--max-model-len -8k' as '--max-model-len=-8k': argparse takes a value that starts
    with '-' and is not a plain number for an option, so the flag's own check, which says
    what is wrong with a negative size, would never see it."""
    out: list[str] = []
    for token in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] \
                and re.fullmatch(r"-\.?\d.*", token):
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


def _ep_with_size(argv: Sequence[str]) -> list[str]:
    """SGLang's '--ep 8' (its alias of --ep-size) as '--ep-size=8': ridgeline's --ep alone is
    vLLM's --enable-expert-parallel switch, which takes no value."""
    out: list[str] = []
    for token in argv:
        if out and out[-1] == "--ep" and re.fullmatch(r"\d+", token):
            out[-1] = f"--ep-size={token}"
        elif token.startswith("--ep="):
            out.append("--ep-size=" + token.removeprefix("--ep="))
        else:
            out.append(token)
    return out


_PARSERS: list[argparse.ArgumentParser] = []  # the one main() reuses (``command_parser``)


def command_parser() -> argparse.ArgumentParser:
    """build_parser's parser, built once a process: a parse leaves it as it was (its values
    go to a fresh namespace; _Parser notes only the words typed, afresh each time), and
    building it costs ~16 ms, which an in-process caller calling main() often (the tests,
    thousands of times) paid on every call. ``_PARSERS.clear()`` builds it again (a test
    that swaps a command's handler)."""
    if not _PARSERS:
        _PARSERS.append(build_parser())
    return _PARSERS[0]


def _note_file_flags(parser: argparse.ArgumentParser, from_file: dict[str, str],
                     line: Sequence[str], argv: Sequence[str]) -> None:
    """Tell each command's parser which flags a --config file gave, so that its error names
    the file and key for a value it refuses (_Parser.error). A flag the command line gives
    too is read twice, the file's value first (``argv``: the file's flags come before the
    line's): the error is the file's only where it quotes the file's value. The parser is
    reused across calls (command_parser): each call sets it afresh, empty without a file."""
    typed = {word.partition("=")[0] for word in line if word.startswith("-")}
    marks: dict[str, tuple[str, str]] = {}
    for flag, label in from_file.items():
        at = argv.index(flag) if flag in argv else -1
        value = argv[at + 1] if flag in typed and 0 <= at < len(argv) - 1 else ""
        marks[flag] = (label, value)
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for sub in commands.choices.values():
        sub.file_flags = marks


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMAND_ALIASES:  # `ridgeline models`: `model`
        argv[0] = COMMAND_ALIASES[argv[0]]
    try:
        from ridgeline.launch_flags import COMMANDS

        if argv and argv[0] in COMMANDS:  # a pasted vllm serve's --max_model_len, as it reads it
            argv = vllm_dashes(argv, command_options(parser, argv[0]))
        argv = model_word_moved(argv)  # roofline MODEL: its --model
        refuse_two_gpu_counts(argv)  # before a --config file's flags join the user's
        if argv and not argv[0].startswith("-"):
            options = command_options(parser, argv[0])
            if "--ep-size" in options:  # SGLang's --ep 8, its --ep-size (_ep_with_size)
                options["--ep"] = options["--ep-size"]
            refuse_two_spellings(argv, options)
    except InputError as exc:
        print(f"ridgeline: error: {shorten_runs(str(exc))}", file=sys.stderr)
        return 2
    line = argv
    try:  # an engine's --config YAML, as its flags (cli_config_file)
        argv, from_file, file_cautions, file_notes = with_config_file(argv, parser)
    except (InputError, ValueError, OSError) as exc:
        return config_file_error(exc)
    _note_file_flags(parser, from_file, line, argv)
    argv, moved = model_flag_moved(argv, parser)
    from ridgeline.launch_flags import several_values

    try:
        argv = several_values(argv)  # vllm serve MODEL --served-model-name a b
    except InputError as exc:  # names before MODEL that run into it
        print(f"ridgeline: error: {shorten_runs(str(exc))}", file=sys.stderr)
        return 2
    from ridgeline.vllm_compilation import dotted_argv

    argv = dotted_argv(argv)  # vllm serve's -cc.KEY=VALUE, -O3 (vllm_compilation)
    from ridgeline.llamacpp_launch import BARE_FLASH_ATTN_NOTE, apply_llamacpp_flags, bare_flash_attn

    typed, (argv, bare_fa) = argv, bare_flash_attn(argv)  # builds before Sep 2025: a switch
    args, extra = parser.parse_known_args(_ep_with_size(_join_negative_values(argv)))
    if extra:  # name the command whose --help lists what it takes
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        owner = commands.choices.get(getattr(args, "command", None) or "", parser)
        from ridgeline.llamacpp_launch import flash_attn_typo

        if flash_attn_typo(typed, extra):  # -fa onn: a value mistyped, not MODEL
            owner.error(flash_attn_typo(typed, extra))
        if moved and getattr(args, "model", None) is not None:
            flag, eq, again = extra[0].partition("=")
            if flag in MOVED_FLAGS:  # a second --model or --model-path, not a MODEL
                again = again if eq else (extra[1] if len(extra) > 1 else "")
                owner.error(f"the model is given twice: {args.model} and {again} by "
                            f"--model-path (or --model) and {flag}; give it once")
            if not extra[0].startswith("-"):  # an unknown flag is named as one, below
                owner.error(f"the model is given twice: {args.model} by --model-path (or "
                            f"--model) and {extra[0]} as MODEL; give it once")
        hint = unrecognized_hint(getattr(args, "command", None) or "", extra, commands.choices)
        owner.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    notes: list[str] = []  # said on stderr after the report, and kept in its JSON's notes
    try:
        for caution in file_cautions:  # said before the report, kept for its JSON
            _say_caution(args, caution)
        if getattr(args, "engine_by_accelerator", False) and args.engine is None:
            args.engine = default_engine(args)  # the first card's; one_card gives each its own
            args.engine_defaulted = True
        if getattr(args, "engine", None) is not None:
            args.engine_asked = args.engine  # a comparison picks each card's llama.cpp build
            args.engine = llamacpp_builds_for(args, args.engine)
        apply_llamacpp_flags(args)  # llama-server's -c over -np, -ctk X -ctv X
        if getattr(args, "kv_dtype_unmodelled", ""):  # _KvSpelling: not sized by ridgeline
            raise InputError(kv_release_refusal(args) or args.kv_dtype_unmodelled)
        from ridgeline.vllm_compilation import apply_compilation

        apply_compilation(args)  # vLLM's compilation config, as the engine settings it sets
        from ridgeline.cli_engine import apply_cuda_graph_bs

        apply_cuda_graph_bs(args)  # SGLang's --cuda-graph-bs, the same settings' sizes
        if getattr(args, "plot", None):
            from ridgeline.plots import check_target

            check_target(args.plot)
        refuse_bad_outputs(args)
        from ridgeline.launch_flags import launch_note

        # the flags read and ignored, the bare -fa's reading, and decode's and prefill's batch
        # and context read from -np and -c (llamacpp_launch); then a config file's options
        # fit drops (cli_config_file)
        note = "; ".join(n for n in (launch_note(args, from_file),
                                     BARE_FLASH_ATTN_NOTE if bare_fa else "",
                                     *vars(args).get("llamacpp_read", ())) if n)
        notes = [n for n in (note, *file_notes) if n]
        report = args.handler(args)
        print(render(report, as_json=args.json, explain=args.explain,
                     input_cautions=vars(args).get("cautions_said", ()), notes=notes))
        for said in notes:  # stderr too: stdout is the report alone
            print(f"ridgeline: note: {said}", file=sys.stderr)
        if getattr(args, "plot", None):  # after the report: a chart that cannot be drawn
            from ridgeline.plots import save  # (or a missing extra) leaves the report standing
            from ridgeline.reports.charts import chart_for

            chart = chart_for(report)
            save(chart, args.plot)
            print(f"wrote {args.plot}: {chart.title}", file=sys.stderr)  # stdout: the report
        failure = getattr(report, "failure", "")
        if failure:  # the report stands, and the run still fails (validate --strict)
            print(f"ridgeline: error: {failure}", file=sys.stderr)
            return 2
        if getattr(report, "exit_status", 0):  # the report stands, and its answer is no
            return int(report.exit_status)  # (plan: no deployment meets the SLO): exit 1
    except (InputError, ValueError) as exc:
        message = shorten_runs(str(exc))
        if isinstance(exc, DoesNotFit) and getattr(args, "json", False):  # an answer: said
            print(refusal_json(exc, message, vars(args).get("cautions_said", ()), notes))
        print(f"ridgeline: error: {message}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a path the command was given: too long, a loop, unwritable
        where = f"{shorten_path(exc.filename)}: " if exc.filename else ""
        print(f"ridgeline: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except RecursionError:  # json refuses nothing for depth; Python's stack does
        print("ridgeline: error: an input file is nested too deeply to be a config, record, "
              "profile or metrics file", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ridgeline: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, not bad input: one line, exit 1 (RIDGELINE_DEBUG=1 re-raises)
        if os.environ.get("RIDGELINE_DEBUG"):
            raise
        print(f"ridgeline: internal error ({type(exc).__name__}: {exc}); please report it, "
              "with RIDGELINE_DEBUG=1 for the traceback", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
