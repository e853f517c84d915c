"""CLI: a serving engine's own settings as fit and simulate take them — the flags under the
engine's names, and the refusal of one the chosen engine has no use for."""

from __future__ import annotations

import argparse
from typing import Any

from ridgeline.cli_types import _count, _engine_name, _how_many, _positive_float, _typed
from ridgeline.errors import InputError
from ridgeline.units import COUNT_EXAMPLES
from ridgeline.vllm_graphs import MAX_CAPTURE_SIZE

# what --engine lists, after its default (the engines' names engine_id reads)
ENGINE_NAMES = "vllm, sglang, trtllm, llama.cpp-cuda, llama.cpp-metal, …"
ENGINE_DEFAULT = ("default vllm; llama.cpp-metal on Apple silicon, llama.cpp-rocm on the AMD "
                  "GPUs vLLM leaves out, llama.cpp-cuda on the NVIDIA GPUs its release drops "
                  "(V100 from 0.20)")


def engine_flag(p: Any, help_text: str) -> None:
    """--engine, one engine by any of its names, defaulting by the accelerator as decode's
    and fit's do (cli.main: cli_load.default_engine); ``help_text`` says what it decides."""
    p.add_argument("--engine", type=_typed(_engine_name), help=help_text)
    p.set_defaults(engine_by_accelerator=True)


def sizing_flags(g: Any) -> None:
    """The flags that size a hybrid's state pool and the CUDA graphs (sizing_flags.py), under
    each engine's name (fit, simulate, decode and prefill, through cli.engine_sizes)."""
    g.add_argument("--max-mamba-cache-size", type=_how_many("max_mamba_cache_size"),
                   metavar="N", help="SGLang hybrids (Qwen3-Next, Nemotron-H): the state pool "
                   "in requests' states, set rather than carved as mamba_full_memory_ratio's "
                   "share; the KV cache gets the rest (read with the radix cache on from 0.5.7)")
    g.add_argument("--mamba-ssm-dtype", choices=["float32", "bfloat16", "float16"],
                   help="SGLang hybrids: the SSM state's dtype (default float32, or the config's "
                   "mamba_ssm_dtype); bfloat16 halves it (float16 from 0.5.9)")
    g.add_argument("--max-cudagraph-capture-size", "--cuda-graph-max-bs",
                   dest="max_cudagraph_capture_size", metavar="N",
                   type=_how_many("max_cudagraph_capture_size", MAX_CAPTURE_SIZE),
                   help="the largest batch captured in a CUDA graph: vLLM v0.11.1+ (default "
                   "min(2 × max_num_seqs, 512); from v0.13 min(2 × max_num_seqs × (1 + the drafts), "
                   "512)), its graphs' memory; SGLang --cuda-graph-max-bs "
                   "(default by card and TP), 2 MiB a batch of its v0.5.3+ default reserve")
    compilation_flags(g)


def compilation_flags(g: Any) -> None:
    """vLLM's compilation config under its spellings (vllm_compilation.py), which fit,
    simulate, decode and prefill read: the captured sizes, the CUDA-graph mode, torch.compile;
    and SGLang's list of captured sizes, --cuda-graph-bs (apply_cuda_graph_bs)."""
    from ridgeline.vllm_compilation import ConfigPart

    g.add_argument("--compilation-config", "--compilation_config", "-cc", "-O",
                   "--optimization-level", dest="compilation_config", action=ConfigPart,
                   metavar="JSON", help="vLLM: its compilation config ('{\"cudagraph_mode\": "
                   "\"FULL_DECODE_ONLY\"}', or -cc.KEY=VALUE), or -O0 … -O3 (v0.12+): the "
                   "CUDA-graph sizes (cudagraph_capture_sizes, max_cudagraph_capture_size), "
                   "cudagraph_mode (NONE: eager steps, as --enforce-eager) and mode (0: no "
                   "torch.compile); pass_config and custom_ops are ignored, other keys refused")
    g.add_argument("--cudagraph-capture-sizes", nargs="+", type=_how_many("CUDA-graph size"),
                   metavar="N", help="vLLM v0.11.1+: the batch sizes captured in CUDA graphs, "
                   "their count the graphs' memory")
    g.add_argument("--cuda-graph-sizes", nargs="+", type=_how_many("CUDA-graph size"),
                   metavar="N", help="vLLM: --cudagraph-capture-sizes' older spelling (before "
                   "v0.11.1 one value N is the sizes 1, 2, 4, 8, 16, … N)")
    g.add_argument("--cuda-graph-bs", nargs="+", type=_how_many("CUDA-graph batch size"),
                   metavar="N", help="SGLang: the decode batch sizes captured in CUDA graphs "
                   "(a larger batch runs without one, a smaller one padded to the next size); "
                   "its largest is --cuda-graph-max-bs, which its default reserve counts")


def apply_cuda_graph_bs(args: argparse.Namespace) -> None:
    """SGLang's --cuda-graph-bs onto the engine settings' captured sizes
    (cudagraph_capture_sizes, the field vLLM's list fills; SGLang's count sequences), sorted
    once each. From 0.5.3 SGLang takes the list's largest as cuda_graph_max_bs whatever
    --cuda-graph-max-bs says (engines.json sglang.cuda_graph_bs_flag); before, a disagreeing
    --cuda-graph-max-bs is refused. Refused under any engine but SGLang."""
    asked = getattr(args, "cuda_graph_bs", None)
    if not asked:
        return
    from ridgeline.engines import engine_id
    from ridgeline.sglang_memory import sglang_data, sglang_release

    engine = getattr(args, "engine", None) or "vllm"
    engines = engine if isinstance(engine, list) else str(engine).split(",")
    if len(engines) > 1:
        raise InputError("--cuda-graph-bs names one engine's settings; compare engines at "
                         "their defaults, or give one --engine")
    name = engine_id(engines[0].strip())
    if name == "vllm":
        raise InputError("--cuda-graph-bs is SGLang's; vLLM lists its captured sizes with "
                         "--cudagraph-capture-sizes (or the compilation config's "
                         "cudagraph_capture_sizes)")
    if name != "sglang":
        raise InputError(f"--cuda-graph-bs is SGLang's; {name} has no such flag")
    sizes = tuple(sorted(set(asked)))
    rule = sglang_data()["cuda_graph_bs_flag"]
    given = getattr(args, "max_cudagraph_capture_size", None)
    version = getattr(args, "engine_version", None)
    if given is not None and given != sizes[-1] and version is not None \
            and sglang_release(version) < sglang_release(rule["largest_wins_from"]):
        raise InputError(f"--cuda-graph-max-bs {given} and --cuda-graph-bs (largest "
                         f"{sizes[-1]}) disagree, which SGLang {version} is not modelled "
                         f"for (from {rule['largest_wins_from']} the list's largest wins): "
                         "give one")
    args.cudagraph_capture_sizes = sizes


def async_scheduling_switch(g: Any) -> None:
    """vLLM's --no-async-scheduling and --async-scheduling, which fit, simulate, decode and
    prefill read: from v0.26 window layers keep blocks for one batch in flight or two, so the
    pool's count (and the concurrency vLLM logs) follows the switch."""
    switch = g.add_mutually_exclusive_group()
    switch.add_argument("--no-async-scheduling", action="store_true",
                        help="vLLM: schedule synchronously (from v0.14 it forms the next batch "
                        "while one runs, so simulate admits an arrival and frees a finished "
                        "request's seat and blocks a step later); v0.26+: window layers keep "
                        "blocks for one batch in flight, not two")
    switch.add_argument("--async-scheduling", action="store_true",
                        help="vLLM: its default from v0.14, as pasted launch lines spell it "
                        "(opt-in on 0.10.0-0.13: priced synchronous there, with a caution; "
                        "refused before 0.10.0, and beside a drafter or pipeline the release "
                        "refuses it with: ngram before 0.33); given, a draft model runs "
                        "asynchronously from 0.16, not 0.28")
    g.add_argument("--vllm-use-ray-v2-executor-backend", type=_ray_v2_env, metavar="0|1",
                   help="vLLM: the environment variable VLLM_USE_RAY_V2_EXECUTOR_BACKEND as the "
                   "server is started with it (not a flag of vLLM's): 0.20-0.32 pick "
                   "--distributed-executor-backend ray's executor by it, and only RayExecutorV2 "
                   "(default 0 on 0.20, 1 from 0.21) schedules asynchronously")


def _ray_v2_env(text: str) -> bool:
    """VLLM_USE_RAY_V2_EXECUTOR_BACKEND as vLLM's envs.py reads it, bool(int(value)): 0 or
    1 here (int() would take ' 2' or '-1' as true too; those are refused)."""
    if text.strip() not in ("0", "1"):
        raise argparse.ArgumentTypeError(
            f"VLLM_USE_RAY_V2_EXECUTOR_BACKEND is 0 or 1, got {text!r}")
    return text.strip() == "1"


def _prefix_caching(g: Any, help_text: str) -> None:
    switch = g.add_mutually_exclusive_group()
    switch.add_argument("--enable-prefix-caching", dest="prefix_caching", action="store_const",
                        const=True, help=help_text + " (default: the engine's)")
    switch.add_argument("--no-prefix-caching", "--no-enable-prefix-caching",
                        "--disable-radix-cache", dest="prefix_caching", action="store_const",
                        const=False, help="the engine without prefix caching (vLLM's "
                        "--no-enable-prefix-caching, SGLang's --disable-radix-cache, "
                        "TensorRT-LLM's kv_cache_config.enable_block_reuse false)")


def _vllm_memory_switches(g: Any) -> None:
    """vLLM switches that change what its pool holds (fit and simulate)."""
    async_scheduling_switch(g)
    g.add_argument("--no-enable-chunked-prefill", dest="no_enable_chunked_prefill",
                   action="store_true",
                   help="vLLM: run each prompt whole in one step (V0; V1 from 0.12, earlier "
                   "V1 turns it back on): an unset --max-num-batched-tokens becomes "
                   "max(max-model-len, its default), so the profile's activations grow and "
                   "the pool shrinks; a budget below --max-model-len is refused, as vLLM "
                   "refuses to start")
    g.add_argument("--language-model-only", action="store_true",
                   help="vLLM: a multimodal checkpoint without its vision tower")
    mm_limit_flags(g)
    extensible = g.add_mutually_exclusive_group()
    extensible.add_argument("--enable-extensible-kv-cache", dest="extensible_kv_cache",
                            action="store_const", const=True,
                            help="vLLM v0.34+: size the pool after warm-up and CUDA-graph "
                            "capture from the memory measured free (its default on NVIDIA "
                            "and AMD cards; gpu_memory_utilization unset is 1.0)")
    extensible.add_argument("--no-enable-extensible-kv-cache", dest="extensible_kv_cache",
                            action="store_const", const=False,
                            help="vLLM v0.34+: size the pool from the profile's estimate, as "
                            "0.33 did (gpu_memory_utilization unset is 0.92)")
    hybrid_manager_flags(g)
    g.add_argument("--warm-compile-cache", action="store_true",
                   help="vLLM v0.25.1+ (Model Runner V2): torch.compile's cache from an earlier "
                   "start is found, so the profile carries no cold compile (about 1 GiB more "
                   "pool); default: a first start, as in a fresh container")


def hybrid_manager_flags(g: Any) -> None:
    """vLLM's hybrid KV-cache manager switch, as vllm serve spells it, and the environment
    variable that turns it off for chunked local attention (vllm_hybrid.manager_off_reason),
    which fit, simulate, decode and prefill read: off, a model mixing full attention with
    sliding windows or attention chunks caches every layer in full."""
    switch = g.add_mutually_exclusive_group()
    switch.add_argument("--disable-hybrid-kv-cache-manager",
                        dest="disable_hybrid_kv_cache_manager", action="store_const",
                        const=True, help="vLLM v0.9.1+: one cache type for every layer, window "
                        "and chunked layers (Gemma 3, gpt-oss, Llama 4) cached in full as "
                        "full attention; refused for a Mamba or linear-attention hybrid, "
                        "which vLLM then will not start")
    switch.add_argument("--no-disable-hybrid-kv-cache-manager",
                        dest="disable_hybrid_kv_cache_manager", action="store_const",
                        const=False, help="vLLM v0.9.1+: the manager asked for; v0.13+ stops "
                        "where its own rules turn it off (Llama 4 with "
                        "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0; "
                        "--kv-events-config on v0.13-v0.19), so that is refused; earlier "
                        "releases read it as their default, and turn it off beside "
                        "--kv-transfer-config or --kv-events-config all the same")
    switch.add_argument("--enable-hybrid-kv-cache-manager", nargs=0, action=_EnableSpelling,
                        dest="disable_hybrid_kv_cache_manager",
                        help="vLLM v0.33+: --no-disable-hybrid-kv-cache-manager's other "
                        "spelling, refused for an earlier --engine-version, as its vllm serve "
                        "stops on it")
    g.add_argument("--vllm-allow-chunked-local-attn-with-hybrid-kv-cache",
                   type=_chunked_env, metavar="0|1",
                   help="vLLM: the environment variable "
                   "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE as the server is "
                   "started with it (not a flag of vLLM's; v0.10.1+, default 0 to v0.13, 1 "
                   "from v0.14): 0 runs a chunked-attention model (Llama 4) without the hybrid "
                   "manager, every layer cached in full; 1 pages its chunks")


ENABLE_HYBRID_MANAGER = "--enable-hybrid-kv-cache-manager"


class _EnableSpelling(argparse.Action):
    """--enable-hybrid-kv-cache-manager: the manager asked for, as
    --no-disable-hybrid-kv-cache-manager, its spelling kept (``hybrid_manager_enable_spelt``)
    for the releases that lack it (enable_spelling_problem)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, False)
        namespace.hybrid_manager_enable_spelt = True


def enable_spelling_problem(args: argparse.Namespace, engine: str, version: str | None) -> str:
    """Why vLLM ``version`` will not take --enable-hybrid-kv-cache-manager, or "": the
    spelling came with EnableDisableAction in v0.33.0 (engines.json
    hybrid_kv_cache_manager_flag.enable_spelling_from); 0.32 and earlier stop on it
    ('unrecognized arguments'). No version: the pasted line is taken from a release with it."""
    if not getattr(args, "hybrid_manager_enable_spelt", False) or engine != "vllm" \
            or version is None:
        return ""
    from ridgeline.vllm_memory import parse_version, vllm_data

    since = str(vllm_data()["hybrid_kv_cache_manager_flag"]["enable_spelling_from"])
    if parse_version(version) >= parse_version(since):
        return ""
    return (f"vLLM {version} has no {ENABLE_HYBRID_MANAGER}: it came in v{since}; write "
            "--no-disable-hybrid-kv-cache-manager, or name that --engine-version or a later one")


def _chunked_env(text: str) -> bool:
    """VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE as vLLM's envs.py reads it,
    bool(int(value)): 0 or 1 here."""
    if text.strip() not in ("0", "1"):
        raise argparse.ArgumentTypeError(
            f"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE is 0 or 1, got {text!r}")
    return text.strip() == "1"


def mm_limit_flags(g: Any) -> None:
    """vLLM's --limit-mm-per-prompt in its three spellings (vllm_mm_limits.py): the JSON
    object, the older 'image=2,video=0', and one dotted flag a modality."""
    g.add_argument("--limit-mm-per-prompt", dest="limit_mm_per_prompt", metavar="JSON",
                   help="vLLM: images (videos) one prompt may carry, '{\"image\":2,\"video\":0}' "
                   "or image=2,video=0: the tower is profiled on no more than max_num_seqs × "
                   "that many images; every modality at 0 serves the model text-only, as "
                   "--language-model-only")
    for modality in ("image", "video", "audio"):
        g.add_argument(f"--limit-mm-per-prompt.{modality}", dest=f"limit_mm_{modality}",
                       metavar="N", help=f"vLLM: --limit-mm-per-prompt's {modality} count, dotted")


def mm_limits(args: argparse.Namespace) -> Any:
    """The MMLimits --limit-mm-per-prompt and its dotted spellings give, or None."""
    from ridgeline.vllm_mm_limits import parse_limits

    return parse_limits(getattr(args, "limit_mm_per_prompt", None),
                        {m: getattr(args, f"limit_mm_{m}", None)
                         for m in ("image", "video", "audio")})


def pool_switches(g: Any, prefix_help: str) -> None:
    """The engines' switches that change what their pool holds, which fit, simulate, decode
    and prefill all read (one launch line runs in each): prefix caching, vLLM's memory
    switches, TensorRT-LLM's backend, SGLang's window ratio and its multimodal switch."""
    _prefix_caching(g, prefix_help)
    _vllm_memory_switches(g)
    lora_flags(g)
    eplb_flags(g)
    _trtllm_backend(g)
    g.add_argument("--swa-full-tokens-ratio", type=_positive_float("swa_full_tokens_ratio"),
                   metavar="R", help="SGLang hybrid-SWA models: window pool ÷ full pool "
                   "(default 0.8); lower holds more long conversations")
    sglang_multimodal(g)


def lora_flags(g: Any) -> None:
    """vLLM's and SGLang's multi-LoRA flags, as vllm serve and sglang.launch_server spell
    them: the slots whose buffers the pool loses (vllm_lora.py, sglang_lora.py); vLLM's
    --max-cpu-loras and --lora-modules and SGLang's --max-loaded-loras, --lora-backend and
    --lora-eviction-policy are read and ignored (launch_flags.json)."""
    g.add_argument("--enable-lora", action="store_true",
                   help="vLLM v0.12+ and SGLang 0.5+: serve LoRA adapters; every adapted layer "
                   "keeps --max-loras (SGLang: --max-loras-per-batch) slots at --max-lora-rank, "
                   "taken from the pool (TensorRT-LLM's is not modelled)")
    g.add_argument("--max-loras", type=_how_many("max_loras"), metavar="N",
                   help="vLLM --enable-lora: adapters one batch may mix, each a GPU slot "
                   "(default 1)")
    g.add_argument("--max-lora-rank", type=_how_many("max_lora_rank"), metavar="R",
                   help="--enable-lora: the rank every slot is sized at; vLLM: 1, 8, 16 "
                   "(default), 32, 64, 128, 256, 320 or 512; SGLang: any, needed (it reads "
                   "the largest from the --lora-paths adapters, which ridgeline does not)")
    g.add_argument("--lora-paths", nargs="+", metavar="NAME=PATH",
                   help="SGLang: the adapters loaded at start (counted, not read); turns "
                   "--enable-lora on, as SGLang does")
    g.add_argument("--max-loras-per-batch", type=_how_many("max_loras_per_batch"),
                   metavar="N", help="SGLang --enable-lora: adapters one batch may mix, each "
                   "a GPU slot (default 8)")
    g.add_argument("--lora-target-modules", nargs="+", metavar="MODULE",
                   help="SGLang --enable-lora: the modules adapted (q_proj … down_proj, "
                   "qkv_proj, gate_up_proj, embed_tokens, lm_head, or all); default: the "
                   "adapters', sized as the attention and MLP linears")
    g.add_argument("--fully-sharded-loras", action="store_true",
                   help="vLLM --enable-lora: shard the A of column-parallel and the B of "
                   "row-parallel layers over tensor parallelism too")
    g.add_argument("--lora-dtype", choices=["auto", "float16", "bfloat16"],
                   help="vLLM --enable-lora: the slots' dtype (auto: the model's; 2 bytes "
                   "either way)")
    g.add_argument("--active-loras", type=_count("active_loras", COUNT_EXAMPLES), metavar="N",
                   help="ridgeline's, with --enable-lora: the distinct adapters a step's batch "
                   "mixes at most, whose A and B the step reads (default: every request its "
                   "own, up to --max-loras; 1: one adapter shared by all; 0: the base model "
                   "alone, whose steps vLLM runs without the adapters' kernels)")


def eplb_flags(g: Any) -> None:
    """vLLM's and SGLang's expert load balancing, as each spells it: --enable-eplb, and the
    redundant experts of vLLM's --eplb-config (v0.10.2+; --eplb-config.num_redundant_experts N
    the same) or older --num-redundant-experts (v0.9.2-v0.11), or of SGLang's
    --ep-num-redundant-experts, whose weights the pool loses (vllm_eplb.py, sglang_eplb.py)."""
    g.add_argument("--enable-eplb", action="store_true",
                   help="vLLM with --enable-expert-parallel, SGLang with --ep-size > 1: "
                   "balance the experts over the "
                   "ranks, keeping the redundant experts --eplb-config names on them; their "
                   "weights come out of the pool (the balancing itself is not priced)")
    g.add_argument("--eplb-config", metavar="JSON",
                   help="vLLM --enable-eplb: its EPLBConfig as a JSON object; "
                   "num_redundant_experts N (default 0) adds N ÷ the expert-parallel ranks "
                   "experts to every GPU's MoE layers, (experts + N) divisible by the ranks")
    g.add_argument("--eplb-config.num_redundant_experts", dest="eplb_redundant_dotted",
                   metavar="N", type=_count("num_redundant_experts", COUNT_EXAMPLES),
                   help="vLLM --enable-eplb: --eplb-config's num_redundant_experts, dotted")
    g.add_argument("--num-redundant-experts", dest="num_redundant_experts", metavar="N",
                   type=_count("num_redundant_experts", COUNT_EXAMPLES),
                   help="vLLM v0.9.2-v0.11 --enable-eplb: the redundant experts, before "
                   "--eplb-config (removed in v0.12: name --engine-version 0.11)")
    g.add_argument("--ep-num-redundant-experts", dest="ep_num_redundant_experts", metavar="N",
                   type=_count("ep_num_redundant_experts", COUNT_EXAMPLES),
                   help="SGLang with --ep-size > 1: N redundant experts, (experts + N) ÷ "
                   "--ep-size on every GPU's MoE layers, loaded with or without --enable-eplb "
                   "(sglang_eplb.py)")


def eplb_settings(args: argparse.Namespace) -> Any:
    """The EPLBSettings --enable-eplb and its flags give, or None without --enable-eplb (where
    vLLM refuses a redundant expert: vllm_eplb.eplb_settings_from)."""
    from ridgeline.vllm_eplb import eplb_settings_from

    return eplb_settings_from(getattr(args, "enable_eplb", False),
                              getattr(args, "eplb_config", None),
                              getattr(args, "num_redundant_experts", None),
                              getattr(args, "eplb_redundant_dotted", None),
                              getattr(args, "ep_num_redundant_experts", None),
                              getattr(args, "engine", None))


SGLANG_LORA_FLAGS = {"lora_paths": "--lora-paths", "max_loras_per_batch": "--max-loras-per-batch",
                     "lora_target_modules": "--lora-target-modules"}
VLLM_LORA_FLAGS = {"max_loras": "--max-loras", "fully_sharded_loras": "--fully-sharded-loras",
                   "lora_dtype": "--lora-dtype"}


def lora_settings(args: argparse.Namespace) -> Any:
    """The LoRA settings --enable-lora and its flags give: SGLang's (sglang_lora.py) where
    the engine is SGLang or its own flags are given, --lora-paths turning LoRA on as SGLang
    does; vLLM's (vllm_lora.py) otherwise. None without LoRA (as vllm serve drops --max-loras
    and the rest without it)."""
    sglang_given = [flag for dest, flag in SGLANG_LORA_FLAGS.items() if getattr(args, dest, None)]
    named = _one_engine(args)
    if sglang_given and named not in (None, "sglang"):
        raise InputError(f"{', '.join(sglang_given)}: SGLang's; {named} has no such setting"
                         + (" (vLLM's are --enable-lora, --max-loras and --max-lora-rank)"
                            if named == "vllm" else ""))
    sglang = named == "sglang" or bool(sglang_given)
    if not (getattr(args, "enable_lora", False) or getattr(args, "lora_paths", None)):
        if getattr(args, "active_loras", None) is not None:
            raise InputError("--active-loras says how many adapters a step mixes: it needs "
                             "--enable-lora")
        idle = [flag for dest, flag in {**VLLM_LORA_FLAGS, "max_lora_rank": "--max-lora-rank",
                                        **SGLANG_LORA_FLAGS}.items() if getattr(args, dest, None)]
        if idle:  # vLLM builds its LoRAConfig only `if self.enable_lora` (arg_utils.py)
            from ridgeline.cli_load import _say_caution

            _say_caution(args, f"{', '.join(idle)} without --enable-lora changes nothing: "
                         f"{'SGLang' if sglang else 'vllm serve'} keeps no adapter slots "
                         "without it, and neither does ridgeline (give --enable-lora to size "
                         "them)")
        return None
    if sglang:
        vllm_given = [flag for dest, flag in VLLM_LORA_FLAGS.items()
                      if getattr(args, dest, None)]
        if vllm_given:
            raise InputError(f"{', '.join(vllm_given)}: vLLM's; SGLang's LoRA flags are "
                             "--max-loras-per-batch, --max-lora-rank and --lora-target-modules")
        from ridgeline.sglang_lora import SGLangLoRASettings

        return SGLangLoRASettings(
            max_loras_per_batch=getattr(args, "max_loras_per_batch", None),
            max_lora_rank=args.max_lora_rank,
            lora_target_modules=tuple(getattr(args, "lora_target_modules", None) or ()),
            lora_paths=len(getattr(args, "lora_paths", None) or ()),
            active_loras=getattr(args, "active_loras", None))
    from ridgeline.vllm_lora import LoRASettings

    return LoRASettings(max_loras=args.max_loras, max_lora_rank=args.max_lora_rank,
                        fully_sharded_loras=args.fully_sharded_loras,
                        lora_dtype=args.lora_dtype or "auto",
                        active_loras=getattr(args, "active_loras", None))


def _one_engine(args: argparse.Namespace) -> str | None:
    """The engine --engine names, where it names one (several: each refuses the other's
    settings; none: vLLM's flags are read as vLLM's)."""
    asked = getattr(args, "engine", None)
    if not isinstance(asked, str) or "," in asked:
        return None
    from ridgeline.engines import engine_id

    return engine_id(asked)


def sglang_multimodal(g: Any) -> None:
    """SGLang's switch for the models it serves text-only by default (fit and simulate)."""
    g.add_argument("--enable-multimodal", action="store_true",
                   help="SGLang: serve Gemma-3 or Llama-4 with their vision tower (text-only "
                   "by default), which cuts its default mem_fraction_static as it does for "
                   "other multimodal models")
    g.add_argument("--sglang-vlm-cache-size-mb", dest="sglang_vlm_cache_size_mb",
                   type=_vlm_cache_mib, metavar="MIB",
                   help="SGLang: the environment variable SGLANG_VLM_CACHE_SIZE_MB as the "
                   "server is started with it (not a flag of SGLang's): the multimodal "
                   "embedding cache, which v0.5.18+ takes out of the pool (default unset: 100 "
                   "MiB; 0 on Qwen3-VL on a Hopper card of 60 GiB or more from v0.5.20, where "
                   "setting it also keeps that rule's CUDA IPC pool off)")
    g.add_argument("--mm-feature-transport", choices=("cpu", "cuda_ipc", "cuda_vmm"),
                   help="SGLang v0.5.16+ (cuda_vmm v0.5.18+): how multimodal features reach "
                   "the GPU; cuda_ipc and cuda_vmm keep a pool on the first GPU "
                   "(SGLANG_MM_FEATURE_CACHE_MB, 1,024 MiB) that comes out of the KV pool "
                   "(default: SGLang's choice: cpu on one node, but cuda_ipc in v0.5.17 and for "
                   "Qwen3-VL on a large Hopper card from v0.5.20; cuda_vmm across GB200/GB300 "
                   "nodes for the models that opt in from v0.5.18)")
    g.add_argument("--sglang-mm-feature-cache-mb", dest="sglang_mm_feature_cache_mb",
                   type=_mm_feature_cache_mib, metavar="MIB",
                   help="SGLang: the environment variable SGLANG_MM_FEATURE_CACHE_MB as the "
                   "server is started with it (not a flag of SGLang's): the cuda_ipc/cuda_vmm "
                   "feature pool (default unset: 1,024 MiB; 3,072 for Qwen3-VL's CUDA IPC pool "
                   "at --max-running-requests 400 or more, which setting it keeps off)")
    g.add_argument("--mm-preprocess-cache-size-mb", dest="mm_preprocess_cache_size_mb",
                   type=_preprocess_cache_mib, metavar="MIB",
                   help="SGLang v0.5.18+: its cache of preprocessed media, in host memory, so "
                   "not taken from the GPU (not priced); above 0 it keeps the CUDA IPC pool "
                   "Qwen3-VL turns on off")


def _whole_mib(name: str, example: str, text: str) -> int:
    """A whole number of MiB, 0 or more, as SGLang's EnvInt or int flag reads it (int() would
    take '１' and '1_0', which are refused)."""
    if not text.strip().isascii() or not text.strip().isdigit():
        raise argparse.ArgumentTypeError(
            f"{name} must be a whole number of MiB, 0 or more, such as {example}, "
            f"got {text!r}")
    return int(text)


def _vlm_cache_mib(text: str) -> int:
    """SGLANG_VLM_CACHE_SIZE_MB: '100' is 100 MiB; '1k' is refused."""
    return _whole_mib("SGLANG_VLM_CACHE_SIZE_MB", "100 or 0", text)


def _mm_feature_cache_mib(text: str) -> int:
    """SGLANG_MM_FEATURE_CACHE_MB: '2048' is 2,048 MiB (0 is refused later where a pool is
    built)."""
    return _whole_mib("SGLANG_MM_FEATURE_CACHE_MB", "1024 or 3072", text)


def _preprocess_cache_mib(text: str) -> int:
    """--mm-preprocess-cache-size-mb: '256' is 256 MiB of host memory; '-1' is refused, as
    SGLang refuses it ('must be non-negative')."""
    return _whole_mib("--mm-preprocess-cache-size-mb", "256 or 0", text)


def sglang_overlap(g: Any) -> None:
    """SGLang's switch for its overlap scheduler (simulate)."""
    g.add_argument("--disable-overlap-schedule", action="store_true",
                   help="SGLang: schedule synchronously (from v0.4.0 it forms the next batch "
                   "while one runs, so an arrival joins and a finished request's seat and "
                   "blocks come free a step later)")


def trtllm_overlap(g: Any) -> None:
    """TensorRT-LLM's switch for its PyTorch backend's overlap scheduler (simulate)."""
    g.add_argument("--disable-overlap-scheduler", action="store_true",
                   help="TensorRT-LLM (disable_overlap_scheduler: true in --extra_llm_api_options): "
                   "schedule synchronously (from v0.20 its PyTorch backend forms the next batch "
                   "while one runs, so an arrival joins and a finished request's seat and "
                   "blocks come free a step later); the TensorRT engine backend has none")


def _trtllm_backend(g: Any) -> None:
    """TensorRT-LLM's backend, which decides what it allocates before the cache."""
    g.add_argument("--backend", choices=["pytorch", "tensorrt"],
                   help="TensorRT-LLM (trtllm-serve --backend): pytorch (default from v1.0) or "
                   "tensorrt, the prebuilt engine (default before v1.0), whose runtime and "
                   "decoder keep vocabulary-sized buffers for every max_batch_size seat")
    g.add_argument("--cache-transceiver-config", dest="cache_transceiver_config",
                   metavar="JSON", help="TensorRT-LLM (cache_transceiver_config in "
                   "--extra_llm_api_options): a disaggregated pool's KV hand-off, as "
                   "'{\"backend\": \"DEFAULT\", \"max_tokens_in_buffer\": 8192}'; its send and "
                   "receive buffers come out of the KV cache's memory")


def cache_transceiver(args: argparse.Namespace) -> Any:
    """The CacheTransceiver --cache-transceiver-config gives (trtllm_transceiver), or None."""
    text = getattr(args, "cache_transceiver_config", None)
    if text is None:
        return None
    from ridgeline.trtllm_transceiver import parse_transceiver

    return parse_transceiver(text)


# what fit, decode and prefill take from --engine-version: the release's pool sizing
MEMORY_RULES = "memory rules to follow, any release within an era"


def _usage_and_version(g: Any, rules: str, v0: bool = False) -> None:
    """--usage (vLLM's usage context), --engine-version (``engine_version_flag``) and -dcp."""
    g.add_argument("--usage", choices=["serve", "offline"],
                   help="vLLM usage context: vllm serve (default) or the offline LLM class")
    engine_version_flag(g, rules, v0)
    decode_context_flag(g)


def decode_context_flag(g: Any) -> None:
    """vLLM's --decode-context-parallel-size (-dcp), which fit, decode, prefill and simulate
    take (decode_context.py)."""
    g.add_argument("--decode-context-parallel-size", "-dcp", metavar="N",
                   dest="decode_context_parallel_size", type=_how_many("DCP size"),
                   help="vLLM v0.10.2+ (-dcp): deal each sequence's KV cache over N of the "
                   "--tensor-parallel-size ranks, token by token, so the copies TP keeps "
                   "(MLA's latent on every rank) hold N times the tokens; N divides vLLM's "
                   "--tensor-parallel-size, whose ranks are an MI250's dies (2 a card)")


def engine_version_flag(g: Any, rules: str, v0: bool = False) -> None:
    """--engine-version, whose help says what the command takes from the release (``rules``:
    "memory rules to follow") and, with ``v0``, how to name vLLM's V0 engine (fit, simulate,
    decode and prefill)."""
    from ridgeline.datafiles import engine_defaults
    from ridgeline.engine_versions import release_text
    from ridgeline.sglang_memory import sglang_data
    from ridgeline.vllm_memory import vllm_data

    vllm = vllm_data()
    trt = engine_defaults("trtllm")["releases"]
    default = "the newest modelled" if vllm["default_version"] == vllm["newest_checked"] \
        else f"the newest modelled (vLLM {vllm['default_version']})"
    g.add_argument("--engine-version", metavar="V", type=release_text,
                   help=f"engine version whose {rules}: vLLM 0.1 ... {vllm['newest_checked']}"
                   + (" (add V0 for VLLM_USE_V1=0, up to 0.10)" if v0 else "")
                   + f", SGLang 0.3 ... {sglang_data()['newest_checked']}, TensorRT-LLM "
                   f"{trt['from']} ... {trt['newest']} (1.0.0rc6 too; its defaults are one "
                   f"across them), llama.cpp a build (b9400); default: {default}")


def checked_engine_version(version: str | None, engine: str) -> str | None:
    """--engine-version, checked against ``engine`` before anything is priced, with fit's
    one-line errors (its spelling as EngineSettings reads it, then the engine's own check);
    None where none was given."""
    if version is None:
        return None
    from ridgeline.engine_versions import check_engine_version
    from ridgeline.memory import EngineSettings

    check_engine_version(engine, version)  # what the engine takes (check_version_kind)
    EngineSettings(engine_version=version)  # its spelling, as fit's settings read it
    return str(version)


def check_engine_flags(args: argparse.Namespace, engine: str) -> None:
    """Refuse an engine setting the chosen engine has no use for, rather than drop it."""
    from ridgeline.engine_choices import block_size_refusal

    problems = []
    if engine.startswith("llama.cpp") and args.gpu_memory_utilization is not None:
        problems.append("--gpu-memory-utilization: llama.cpp has no memory fraction; it "
                        "allocates the cache -c asks for (--max-model-len × --parallel)")
    if args.block_size is not None:  # as prefix refuses it (vLLM's list, TRT-LLM's powers of 2)
        problems.append(block_size_refusal(
            engine, checked_engine_version(args.engine_version, engine), args.block_size))
    if args.usage is not None and engine != "vllm":
        problems.append(f"--usage is vLLM's usage context (vllm serve or the LLM class); "
                        f"{engine} has none")
    if getattr(args, "enforce_eager", False) and engine == "trtllm" \
            and getattr(args, "backend", None) == "tensorrt":
        problems.append("--enforce-eager is TensorRT-LLM's PyTorch backend with "
                        "cuda_graph_config: null; the TensorRT engine backend (--backend "
                        "tensorrt) graphs only with extended_runtime_perf_knob_config."
                        "cuda_graph_mode, off by default, and makes no eager PyTorch launches "
                        "to price")
    if getattr(args, "async_scheduling", False):
        problems.extend(async_scheduling_problem(engine, args.engine_version))
    if getattr(args, "no_enable_chunked_prefill", False) and engine != "vllm":
        problems.append(f"--no-enable-chunked-prefill is vLLM's; {engine} has no such flag")
    if getattr(args, "extensible_kv_cache", None) is not None and engine != "vllm":
        problems.append(f"--{'' if args.extensible_kv_cache else 'no-'}enable-extensible-kv-"
                        f"cache is vLLM's; {engine} has no such flag")
    problems.append(enable_spelling_problem(args, engine, args.engine_version))
    if any(problems):
        raise InputError("; ".join(p for p in problems if p))


def say_async_caution(args: argparse.Namespace, dep: Any, settings: Any) -> None:
    """Say where vLLM's default turns async scheduling off for the drafter asked (it warns,
    and ridgeline prices the run synchronous: engine_scheduling.vllm_async_caution), as fit,
    simulate, decode and prefill read one launch line; and where
    --vllm-use-ray-v2-executor-backend changes nothing (engine_scheduling.ray_v2_env_caution),
    or --vllm-allow-chunked-local-attn-with-hybrid-kv-cache (vllm_hybrid.chunked_env_caution)."""
    if dep.engine != "vllm" or settings is None:
        return
    from ridgeline.cli_load import _say_caution
    from ridgeline.engine_scheduling import (
        ray_v2_env_caution,
        vllm_async_caution,
        vllm_opt_in_async_caution,
    )
    from ridgeline.memory import kv_pool
    from ridgeline.vllm_memory import vllm_accounting

    opt_in = vllm_opt_in_async_caution(settings)
    if opt_in:
        from ridgeline.memory import kv_pool

        kv_pool(dep, settings)  # the pair the release refuses (a pipeline, a drafter) first
        _say_caution(args, opt_in)
    env = ray_v2_env_caution(vllm_accounting(settings.engine_version).version,
                             settings.distributed_executor_backend, settings.ray_v2_executor)
    if env:
        _say_caution(args, env)
    from ridgeline.vllm_hybrid import chunked_env_caution

    chunked = chunked_env_caution(dep.model, vllm_accounting(settings.engine_version).version,
                                  settings.allow_chunked_local_attn_hybrid)
    if chunked:
        _say_caution(args, chunked)
    caution = vllm_async_caution(dep, settings)
    if caution:
        kv_pool(dep, settings)  # the pool's own refusal (a drafter the release lacks) first
        _say_caution(args, caution)


def async_scheduling_problem(engine: str, version: str | None) -> list[str]:
    """--async-scheduling where no engine run takes it: another engine's run, or a vLLM
    release before the flag (engines.json vllm.async_scheduling flag_from: 0.9.2 has none);
    0.10.0-0.13, where it was opt-in, are priced synchronous with a caution
    (engine_scheduling.vllm_opt_in_async_caution). Beside a drafter or a pipeline the
    release raises on, the pool refuses it (memory.stage_pools:
    engine_scheduling.vllm_async_problem)."""
    if engine != "vllm":
        return [f"--async-scheduling is vLLM's; {engine} has no such flag"]
    from ridgeline.datafiles import engine_defaults
    from ridgeline.vllm_memory import parse_version, vllm_accounting

    since = engine_defaults("vllm")["async_scheduling"]["flag_from"]
    release = vllm_accounting(version).version
    if parse_version(release) < parse_version(since):
        return [f"vLLM {release} has no --async-scheduling (it came in v{since}, opt-in until "
                "v0.14 made it the default): drop it, or name a later --engine-version"]
    return []
