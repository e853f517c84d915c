"""CLI: a command's --help by concern — what to compute, the model, the accelerator, the
engine's common settings, the output — with each engine's own flags folded to one line.

decode takes ~100 flags, half of them one engine's own (vLLM's --limit-mm-per-prompt.audio,
TensorRT-LLM's --cache-transceiver-config); argparse's help printed them all, 480 lines, its
usage alone 60. The flags are grouped here as the help is printed, not where they are
registered, so the parse is the one the commands always had: decode's --help is a summary of
75 lines, --help-engine sglang opens SGLang's own flags in full, --help-all prints every flag
and spelling (431 lines)."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from typing import Any

from ridgeline.cli_usage import short_usage, shown_actions
from ridgeline.engine_names import DISPLAY_NAMES

COMPUTE = "what to compute"
MODEL = "model and weights"
ACCELERATOR = "accelerator and parallelism"
ENGINE = "engine (common)"
OUTPUT = "output"
HELP = "help"

# each engine's own flags: the --help-engine value, and the section's title
ENGINES = {**DISPLAY_NAMES, "llama.cpp": "llama.cpp"}

# a flag's section by its dest; a dest not here goes by the engine its help names first
# (``section_of``), else to what to compute, where each command's own flags belong
_SECTIONS: dict[str, tuple[str, ...]] = {
    MODEL: ("model", "fetch", "weights", "quantization", "dtype", "kv_dtype"),
    ACCELERATOR: ("gpu", "gpu_file", "gpus", "peak_tflops", "bandwidth_gbs", "gpu_memory_gib",
                  "memory_gib", "num_gpus", "pipeline_parallel_size", "data_parallel_size",
                  "expert_parallel", "expert_parallel_size", "host_bandwidth_gbs",
                  "host_link_gbs", "host_memory_gib"),
    ENGINE: ("engine", "profile", "engine_version", "gpu_memory_utilization", "max_num_seqs",
             "max_num_batched_tokens", "max_model_len", "block_size", "max_total_tokens",
             "enforce_eager", "prefix_caching", "max_cudagraph_capture_size", "enable_lora",
             "max_lora_rank", "active_loras", "enable_eplb", "spec_tokens", "spec_method",
             "spec_acceptance", "spec_draft_cost", "ignore_eos"),
    OUTPUT: ("json", "explain", "plot", "export", "output", "emit_measurements"),
    "vllm": ("kv_cache_memory_bytes", "usage", "decode_context_parallel_size",
             "no_async_scheduling", "async_scheduling", "no_enable_chunked_prefill",
             "language_model_only", "limit_mm_per_prompt", "limit_mm_image", "limit_mm_video",
             "limit_mm_audio", "extensible_kv_cache", "disable_hybrid_kv_cache_manager",
             "vllm_allow_chunked_local_attn_with_hybrid_kv_cache", "warm_compile_cache",
             "compilation_config",
             "cudagraph_capture_sizes", "cuda_graph_sizes", "cpu_offload_gb", "max_loras",
             "fully_sharded_loras", "lora_dtype", "eplb_config", "eplb_redundant_dotted",
             "num_redundant_experts", "speculative_config", "long_prefill_token_threshold"),
    "sglang": ("enable_dp_attention", "max_mamba_cache_size", "mamba_ssm_dtype", "cuda_graph_bs",
               "lora_paths", "max_loras_per_batch", "lora_target_modules",
               "ep_num_redundant_experts", "swa_full_tokens_ratio", "enable_multimodal",
               "sglang_vlm_cache_size_mb", "mm_feature_transport", "sglang_mm_feature_cache_mb",
               "mm_preprocess_cache_size_mb", "speculative_algorithm",
               "disable_overlap_schedule"),
    "trtllm": ("backend", "cache_transceiver_config", "disable_overlap_scheduler"),
    "llama.cpp": ("gpu_layers", "fit_target_mib", "fit_ctx", "n_cpu_moe", "cpu_moe",
                  "output_layer_last", "rope_scaling", "rope_freq_scale", "yarn_orig_ctx",
                  "override_kv", "split_mode", "flash_attn", "n_batch", "ubatch_size"),
}
_SECTION_OF = {dest: section for section, dests in _SECTIONS.items() for dest in dests}
_OPENING_ENGINE = re.compile(r"(vLLM|SGLang|TensorRT-LLM|llama\.cpp)\b")  # "SGLang: …"
_ENGINE_KEYS = {title: key for key, title in ENGINES.items()}

# each command's examples, printed at the end of its --help; tests/test_cli_help.py parses
# every one and runs those that need no file, server or device of the reader's own
EXAMPLES: dict[str, tuple[str, ...]] = {
    "hardware": ("ridgeline hardware", "ridgeline hardware h100,mi300x --explain"),
    "model": ("ridgeline model llama-3.1-70b",
              "ridgeline model ./my-model/config.json --json"),
    "roofline": ("ridgeline roofline --gpu h100,a100,l40s",
                 "ridgeline roofline --gpu h100 --model llama-3.1-70b --batch 32"),
    "moe": ("ridgeline moe qwen3.6-35b-a3b --gpu h100 --batch 1,32,200",),
    "kv": ("ridgeline kv llama-3.1-70b --context 128K --gpu h100 --num-gpus 2",
           "ridgeline kv llama-3.1-8b --context 32k --memory-gib 40"),
    "decode": ("ridgeline decode llama-3.1-70b --gpu h100 --weights fp8 --batch 1,32 "
               "--context 2000",
               "ridgeline decode llama-3.1-8b --gpu h100,mi300x --batch 1,64 --context 8k "
               "--max-model-len 8192"),
    "prefill": ("ridgeline prefill llama-3.1-8b --gpu h100 --prompt-len 1000,8000",),
    "utilization": ("ridgeline utilization --gpu h100 --running 8 --model llama-3.1-8b "
                    "--context 8k",),
    "fit": ("ridgeline fit llama-3.1-8b --gpu h100 --max-model-len 8192",
            "ridgeline fit llama-3.1-70b --gpu h100 --num-gpus 2 --target-concurrency 32"),
    "simulate": ("ridgeline simulate llama-3.1-8b --gpu h100 --rate 4",
                 "ridgeline simulate llama-3.1-8b --gpu h100 --concurrency 64 "
                 "--slo-ttft-ms 500 --slo-tpot-ms 50"),
    "plan": ("ridgeline plan llama-3.1-8b --rate 10 --slo-ttft-ms 500 --slo-tpot-ms 50 "
             "--gpus h100",),
    "observe": ("ridgeline observe http://localhost:8000/metrics --model llama-3.1-8b "
                "--gpu h100 --duration 60s",
                "ridgeline observe vllm-server.log --model llama-3.1-8b --gpu h100"),
    "page": ("ridgeline page llama-3.1-8b --gpu h100 -o roofline.html",),
    "measure": ("ridgeline measure --device cuda --quick --card h100 -o rows.csv --dry-run",
                "ridgeline measure --device cuda --quick --card h100 -o rows.csv"),
    "validate": ("ridgeline validate rows.h100-sxm.csv",
                 "ridgeline validate validation/measurements.csv --explain"),
    "calibrate": ("ridgeline calibrate rows.h100-sxm.csv -o my-profile.json",),
    "profile": ("ridgeline profile --engine llama.cpp-cuda",
                "ridgeline profile --engine vllm --gpu mi300x --json",
                "ridgeline profile --profile my-profile.json"),
    "amdahl": ("ridgeline amdahl --fraction 0.18 --speedup 2",
               "ridgeline amdahl --model llama-3.1-70b --gpu h100 --num-gpus 8 --op attention "
               "--batch 32 --context 32k --speedup 2"),
    "evalstats": ("ridgeline evalstats --pct-a 39.02 --pct-b 47.56 --n 164",
                  "ridgeline evalstats --discordant 15,2"),
    "prefix": ("ridgeline prefix --tokens-a 1,2,3,4,5 --tokens-b 1,2,3,4,6 --block-size 2",),
    "attention": ("ridgeline attention --model llama-3.1-8b --context 64K",),
}

# a help longer than this many flags is summarized (decode, prefill, fit, simulate: ~100
# each); one longer than FOLDED_ABOVE_FLAGS keeps every common flag in full but folds each
# engine's own flags to a line (plan's 34: vLLM's hybrid KV-cache manager switches); the
# rest (observe's 29) are printed whole
SUMMARIZED_ABOVE_FLAGS = 50
FOLDED_ABOVE_FLAGS = 30


def section_of(action: argparse.Action) -> str:
    """The section a flag is listed in: its dest's (``_SECTIONS``), else the engine its help
    opens with ("SGLang: …" is SGLang's), else what to compute."""
    if isinstance(action, (argparse._HelpAction, _HelpAll, _HelpEngine)):
        return HELP
    if action.dest in _SECTION_OF:
        return _SECTION_OF[action.dest]
    opening = _OPENING_ENGINE.match(str(action.help or ""))
    return _ENGINE_KEYS[opening.group(1)] if opening else COMPUTE


def summarized(parser: argparse.ArgumentParser) -> bool:
    """Whether a command's --help is a summary: one of more than SUMMARIZED_ABOVE_FLAGS flags
    (decode's 101, 53 of them one engine's own), not counting the help flags."""
    return _flag_count(parser) > SUMMARIZED_ABOVE_FLAGS


def folds_engines(parser: argparse.ArgumentParser) -> bool:
    """Whether a command's --help folds each engine's own flags to a line: a summary's, or
    one of more than FOLDED_ABOVE_FLAGS flags (plan's 34), its common flags in full."""
    return _flag_count(parser) > FOLDED_ABOVE_FLAGS


def _flag_count(parser: argparse.ArgumentParser) -> int:
    """The flags and arguments a help lists, but the help flags."""
    return sum(section_of(a) != HELP for a in shown_actions(parser))


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter, with a flag's spellings sharing one metavar, a long list of them
    wrapped, and the flags in ``brief`` summarized: the first spelling, the help's first line."""

    def __init__(self, prog: str, brief: Iterable[argparse.Action] = ()) -> None:
        self._brief = {id(a) for a in brief}  # a summary's help column is further in, as its
        super().__init__(prog, max_help_position=32 if self._brief else 24)  # flags are longer
        self._summarizing = False

    def _format_action(self, action: argparse.Action) -> str:
        self._summarizing = id(action) in self._brief
        try:
            return super()._format_action(action)
        finally:
            self._summarizing = False

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings:
            return super()._format_action_invocation(action)
        spellings = action.option_strings[:1] if id(action) in self._brief \
            else action.option_strings
        value = "" if action.nargs == 0 else " " + self._format_args(
            action, self._get_default_metavar_for_optional(action))
        words = [f"{s}," for s in spellings[:-1]] + [spellings[-1] + value]
        lines, line = [], ""
        for word in words:  # wrapped under the first spelling, one section's indent in
            if line and len(line) + 1 + len(word) > self._width - self._current_indent:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
        return ("\n" + " " * (self._current_indent + 4)).join(lines)

    def _split_lines(self, text: str, width: int) -> list[str]:
        if not self._summarizing:
            return super()._split_lines(text, width)
        lines = super()._split_lines(text, width - 1)
        return lines[:1] if len(lines) < 2 else [lines[0].rstrip(";,: …") + "…"]


def _engine_line(key: str, actions: list[argparse.Action]) -> str:
    """'  vLLM (26 flags): --help-engine vllm', the line an engine's own flags fold to."""
    return f"  {ENGINES[key]} ({len(actions)} flag{'' if len(actions) == 1 else 's'}): " \
        f"--help-engine {key}"


def command_help(parser: argparse.ArgumentParser, engine: str | None = None,
                 everything: bool = False) -> str:
    """A command's help, by section: where it is ``summarized``, the common sections a line a
    flag and each engine's own flags folded to one line, but ``engine``'s, in full (where it
    ``folds_engines`` alone, plan's, the common sections in full and the engines folded); with
    ``everything`` (--help-all) or a short help, every flag in full. decode: 480 lines in
    argparse's own help, 75 summarized, 431 in full."""
    sections: dict[str, list[argparse.Action]] = {}
    for action in shown_actions(parser):
        sections.setdefault(section_of(action), []).append(action)
    common = [COMPUTE, MODEL, ACCELERATOR, ENGINE]
    summary = not everything and summarized(parser)
    folded = [k for k in ENGINES if k in sections and k != engine] \
        if not everything and folds_engines(parser) else []
    brief = [a for k in (*common, OUTPUT) for a in sections.get(k, ())] if summary else []
    formatter = _Formatter(parser.prog, brief)
    formatter.add_usage(short_usage(parser, formatter._width), [], [])
    formatter.add_text(parser.description)
    for key in (*common, *[k for k in ENGINES if k not in folded], OUTPUT, HELP):
        if sections.get(key):
            formatter.start_section(ENGINES.get(key, key))
            formatter.add_arguments(sections[key])
            formatter.end_section()
    text = formatter.format_help()
    if folded:
        lines = ["each engine's own flags, folded (--help-all prints every flag):"]
        lines += [_engine_line(k, sections[k]) for k in folded]
        text = text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
    if parser.epilog:
        ending = _Formatter(parser.prog)
        ending.add_text(parser.epilog)
        text = text.rstrip("\n") + "\n\n" + ending.format_help()
    if engine is not None and engine not in sections:  # kv --help-engine vllm
        command = parser.prog.split()[-1]
        text = (text.rstrip("\n") + f"\n\n{command} takes no flags of {ENGINES[engine]}'s own: "
                f"its --engine {engine} is sized by the common flags above\n")
    examples = EXAMPLES.get(parser.prog.split()[-1], ())
    if examples:  # as typed: one command a line, not rewrapped
        text = text.rstrip("\n") + "\n\nexamples:\n" + "".join(f"  {e}\n" for e in examples)
    return text


class _HelpAll(argparse.Action):
    """--help-all: every flag, every spelling, in full."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                         nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        parser._print_message(command_help(parser, everything=True), sys.stdout)
        parser.exit()


class _HelpEngine(argparse.Action):
    """--help-engine ENGINE: the summary, with that engine's own flags in full."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                         **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        parser._print_message(command_help(parser, engine=str(values)), sys.stdout)
        parser.exit()


def add_help_flags(parser: argparse.ArgumentParser) -> None:
    """--help-all, and where the command takes an engine's own flags, --help-engine; where
    the help is ``summarized``, -h (argparse's own) said to be the summary, and where it
    ``folds_engines``, to fold them."""
    summary, folds = summarized(parser), folds_engines(parser)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) and folds:
            action.help = ("this summary: a line a flag, each engine's own flags folded"
                           if summary else "this help, each engine's own flags folded")
    engines = [k for k in ENGINES if any(section_of(a) == k for a in shown_actions(parser))]
    parser.add_argument("--help-all", action=_HelpAll,
                        help="every flag and every spelling of it, in full" if folds else
                        "as --help, which is whole here")
    if engines:  # every engine, as every --engine takes them: one of them may own no flag
        # here (kv's own flags are SGLang's alone), which its help then says
        parser.add_argument("--help-engine", action=_HelpEngine, metavar="ENGINE",
                            choices=list(ENGINES),
                            help=("the summary, with one engine's own flags in full: "
                                  if summary else "one engine's own flags in full: "
                                  if folds else "as --help, which is whole here: ")
                            + ", ".join(ENGINES))
