"""CLI: speculative decoding's flags (--spec-tokens, --spec-acceptance, --spec-draft-cost,
--spec-method), as simulate and decode read them, fit the drafter alone and observe the
drafter and its cost (fit, decode and simulate cautioned alike where the pool leaves the
drafter out: ``spec_drafter``); and the engines' own spellings of the drafter (vLLM's --speculative-config,
SGLang's --speculative-algorithm …; engine_spec.py), each read on its own engine into
--spec-tokens and --spec-method."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from ridgeline.cli_types import _count, _plain_float, _share, _typed
from ridgeline.errors import InputError
from ridgeline.units import COUNT_EXAMPLES, parse_count

SPEC_ACCEPTANCE, SPEC_DRAFT_COST = 0.7, 0.05  # the speculative-decoding defaults
# An n-gram drafter runs no model: vLLM's NgramProposer matches the request's own tokens on
# the CPU (vllm/v1/spec_decode/ngram_proposer.py; V0's NGramWorker, "a light drafter without
# need for model"), so it adds no GPU time to the step by default. Model Runner V2 (vLLM
# 0.32+) matches them on the GPU instead, two kernels a step priced from their work
# (vllm_mrv2_drafter.ngram_lookup_s), beside this share
NGRAM_DRAFT_COST = 0.0
# vLLM's names for a drafter made of the checkpoint's own multi-token-prediction layers
# (SpeculativeConfig.method; docs/features/spec_decode: qwen3_next_mtp, deepseek_mtp, and
# mtp, which newer releases map every *_mtp to)
MTP_METHODS = ("mtp", "deepseek_mtp", "qwen3_next_mtp")
FLAG_WORDS = "--speculative-config's"
# llama-server's drafter where --spec-method is not given: a separate draft model (-md), "the
# most used approach" (llama.cpp docs/speculative.md, "Draft Model (draft)"); EAGLE-3 came
# later, as its own --spec-type
LLAMACPP_SPEC_METHOD = "draft-model"


# the engines' spellings: (flags, dest, value type, engine); help on the first of each engine.
# A count is read as every count flag reads one (ASCII digits: int() takes '１' and '1_0')
ENGINE_FLAGS: tuple[tuple[tuple[str, ...], str, Any, str], ...] = (
    (("--speculative-config", "-sc"), "speculative_config", str, "vllm"),
    (("--speculative-model",), "speculative_model", str, "vllm"),
    (("--num-speculative-tokens",), "num_speculative_tokens",
     _count("draft length", COUNT_EXAMPLES), "vllm"),
    (("--ngram-prompt-lookup-max",), "ngram_prompt_lookup_max",
     _count("n-gram length", COUNT_EXAMPLES), "vllm"),
    (("--ngram-prompt-lookup-min",), "ngram_prompt_lookup_min",
     _count("n-gram length", COUNT_EXAMPLES), "vllm"),
    (("--speculative-algorithm",), "speculative_algorithm", str, "sglang"),
    (("--speculative-num-steps",), "speculative_num_steps",
     _count("drafter steps", COUNT_EXAMPLES), "sglang"),
    (("--speculative-eagle-topk",), "speculative_eagle_topk",
     _count("drafter branches", COUNT_EXAMPLES), "sglang"),
    (("--speculative-num-draft-tokens",), "speculative_num_draft_tokens",
     _count("draft tokens", COUNT_EXAMPLES), "sglang"),
    (("--speculative-draft-model-path", "--speculative-draft-model"),
     "speculative_draft_model_path", str, "sglang"),
    (("--speculative-draft-kv-cache-dtype",), "speculative_draft_kv_cache_dtype", str, "sglang"),
)
ENGINE_HELP = {
    "speculative_config": "vLLM's drafter as vllm serve takes it, a JSON object ('{\"method\": "
    "\"deepseek_mtp\", \"num_speculative_tokens\": 2}'; before 0.8.3 --speculative-model M "
    "--num-speculative-tokens K): read as --spec-method and --spec-tokens",
    "speculative_algorithm": "SGLang's drafter (EAGLE, EAGLE3, NEXTN: MTP, STANDALONE) with "
    "--speculative-num-steps S and --speculative-eagle-topk 1: S drafts a step, as --spec-tokens",
}


def _draft_length(text: str) -> int:
    """--spec-tokens K: a draft of at least 1 token, as -sc's num_speculative_tokens is
    (engine_spec.py); 0 is refused, not read as no drafter (leave the flag out for that)."""
    tokens = parse_count(text, "draft length", COUNT_EXAMPLES)
    if tokens < 1:
        raise InputError(f"a draft of at least 1 token, got {tokens} (as -sc's "
                         "num_speculative_tokens; leave --spec-tokens out to run without "
                         "speculative decoding)")
    return tokens


def spec_flags(g: Any, pricing: bool = True) -> None:  # a parser or an argument group
    """The flags; ``pricing`` False (fit) leaves out the acceptance and the drafter's cost."""
    g.add_argument("--spec-tokens", type=_typed(_draft_length), default=0,
                   help="speculative decoding: draft length")
    for flags, dest, kind, _ in ENGINE_FLAGS:
        g.add_argument(*flags, dest=dest, type=kind, metavar=dest.split("_")[-1].upper(),
                       help=ENGINE_HELP.get(dest, argparse.SUPPRESS))
    g.add_argument("--spec-method", choices=("eagle", "draft-model", "ngram", *MTP_METHODS),
                   help="the drafter (default eagle; llama.cpp: draft-model, llama-server's -md): "
                   "vLLM gives each running request the draft length in lookahead slots "
                   "more for eagle (EAGLE, MTP) and "
                   "draft-model, none for ngram; mtp (vLLM's deepseek_mtp, qwen3_next_mtp) "
                   "is priced as eagle, for a checkpoint that ships MTP layers (vLLM's pool holds "
                   "them)")
    if not pricing:
        return
    g.add_argument("--spec-acceptance", type=_share("draft acceptance rate"),
                   help=f"chance each draft token is accepted (default {SPEC_ACCEPTANCE}, "
                   "assumed, not measured: give your drafter's; an ngram drafter accepts about "
                   "none on random-token prompts)")
    draft_cost_flag(g)


def draft_cost_flag(g: Any) -> None:  # a parser or an argument group
    """--spec-draft-cost, as decode and simulate price a drafter and observe its verify step
    (read and checked by ``spec_args``)."""
    g.add_argument("--spec-draft-cost", type=_typed(_draft_cost),
                   help="a drafter pass's cost as a share of the target model's time for "
                   "the same tokens, 0 to 1: one pass over the step's tokens, then drafts − 1 "
                   f"of one token per sampling row (default {SPEC_DRAFT_COST}; "
                   f"{NGRAM_DRAFT_COST:g} for ngram, whose lookup runs on the CPU; vLLM "
                   "0.32+'s Model Runner V2 runs it on the GPU, priced from its kernels' work "
                   "beside this)")


def _draft_cost(text: str) -> float:
    """--spec-draft-cost as typed: ASCII digits (float() takes '１' as 1), -0 read as 0 (it
    printed as "-0"); its range, 0 to 1, is checked with the other speculative flags
    (``spec_args``), in one message for every command."""
    return _plain_float(text, "a drafter pass's cost must be a number, 0 to 1") + 0.0


def spec_args(args: argparse.Namespace) -> None:
    """Read an engine's spelling into --spec-tokens and --spec-method; refuse a speculative
    flag without --spec-tokens; fill in the defaults of the rest."""
    engine_spec_args(args)
    stray = [flag for flag, value in (("--spec-acceptance", getattr(args, "spec_acceptance", None)),
                                      ("--spec-draft-cost", getattr(args, "spec_draft_cost", None)),
                                      ("--spec-method", args.spec_method))
             if value is not None and not args.spec_tokens]
    if stray:
        raise InputError(f"{', '.join(stray)} describe{'s' if len(stray) == 1 else ''} "
                         "speculative decoding: give --spec-tokens N, a draft of at least "
                         "1 token")
    if args.spec_tokens and args.spec_method is None and _llamacpp_only(args):
        args.spec_method = LLAMACPP_SPEC_METHOD
    if hasattr(args, "spec_draft_cost"):  # decode, simulate and observe price the drafter
        from ridgeline.sim.config import check_draft_cost

        default = NGRAM_DRAFT_COST if args.spec_method == "ngram" else SPEC_DRAFT_COST
        args.spec_draft_cost = default if args.spec_draft_cost is None else \
            check_draft_cost(args.spec_draft_cost)
    if hasattr(args, "spec_acceptance"):  # fit and observe: none (observe reads the source's)
        # the default is an assumption a report says it is (spec_acceptance_caution)
        args.spec_acceptance_assumed = args.spec_acceptance is None
        args.spec_acceptance = SPEC_ACCEPTANCE if args.spec_acceptance is None else \
            args.spec_acceptance


def _llamacpp_only(args: argparse.Namespace) -> bool:
    """Whether every engine --engine names is a llama.cpp build (the default engine already
    chosen by cli.main; a list or a comma-separated comparison counts each)."""
    asked = getattr(args, "engine", None)
    names = asked if isinstance(asked, list) else str(asked or "").split(",")
    return all(str(n).strip().startswith("llama.cpp") for n in names) and bool(asked)


def engine_spec_args(args: argparse.Namespace) -> None:
    """The engines' drafter flags, each only on its own engine, read into --spec-tokens and
    --spec-method (an MTP drafter of unstated length: the checkpoint's MTP layers, as vLLM
    drafts); refused beside ridgeline's own --spec-tokens or --spec-method, or with the other
    engine's."""
    from ridgeline.engine_spec import (
        legacy_lookup_required,
        sglang_speculative,
        vllm_speculative_config,
        vllm_speculative_model,
    )

    given = [(flags[0], dest, engine) for flags, dest, _, engine in ENGINE_FLAGS
             if getattr(args, dest, None) is not None]
    if not given:
        return
    owners = {engine for _, _, engine in given}
    if len(owners) > 1:
        raise InputError(f"{given[0][0]} is vLLM's and {next(f for f, _, e in given if e == 'sglang')} "
                         "SGLang's: give one engine's drafter flags")
    if [dest for _, dest, _ in given] == ["speculative_draft_kv_cache_dtype"] \
            and not args.spec_tokens and args.spec_method is None:
        _draft_dtype_alone(args)
        return
    if args.spec_tokens or args.spec_method is not None:
        raise InputError(f"{given[0][0]} states the drafter already: leave out --spec-tokens "
                         "and --spec-method, or give them alone")
    owner = owners.pop()
    _check_engine(args, given[0][0], owner)
    if owner == "vllm":
        version = getattr(args, "engine_version", None)
        if args.speculative_config is not None:
            legacy = next((f for f, _, _ in given if f != "--speculative-config"), None)
            if legacy:
                raise InputError(f"{legacy} is vLLM's older spelling of --speculative-config: "
                                 "give one")
            if version is not None and legacy_lookup_required(version):
                raise InputError(f"vLLM {version} has no --speculative-config (it came in "
                                 "v0.8.2): give --speculative-model M --num-speculative-tokens "
                                 "K, or name a later --engine-version")
            spec = _unnamed_drafter(args, vllm_speculative_config(args.speculative_config))
        elif args.speculative_model is None and args.num_speculative_tokens is None:
            _lookup_alone(args, given[0][0])
            return
        elif args.speculative_model is None and version is None:
            raise InputError("--num-speculative-tokens drafts with --speculative-model M "
                             "(vLLM before 0.8.3); or give --speculative-config")
        else:  # without a model, 0.8.0-0.8.2 read the target's own MTP layers or refuse
            spec = _unnamed_drafter(args, vllm_speculative_model(
                args.speculative_model, args.num_speculative_tokens,
                args.ngram_prompt_lookup_max, args.ngram_prompt_lookup_min, version))
    elif args.speculative_algorithm is None:
        raise InputError(f"{given[0][0]} shapes SGLang's drafter: give --speculative-algorithm")
    else:
        from ridgeline.sglang_drafter import sglang_draft_kv_cache_dtype

        dtype = args.speculative_draft_kv_cache_dtype
        spec = replace(sglang_speculative(
            args.speculative_algorithm, args.speculative_num_steps, args.speculative_eagle_topk,
            args.speculative_num_draft_tokens), draft_model=args.speculative_draft_model_path or "",
            draft_kv_cache_dtype="" if dtype is None else sglang_draft_kv_cache_dtype(
                dtype, getattr(args, "engine_version", None)))
    tokens = spec.tokens
    if not tokens:  # vLLM's MTP drafter without num_speculative_tokens: one per MTP layer
        from ridgeline.cli_load import load_model

        model = load_model(args)
        tokens = model.mtp_layers
        if not tokens:
            raise InputError(f"{given[0][0]} drafts with the checkpoint's multi-token-"
                             f"prediction layers, and {model.name} has none (no "
                             "num_nextn_predict_layers in its config.json)")
    args.spec_tokens, args.spec_method = tokens, spec.method
    args.spec_given_as = ", ".join(f for f, _, _ in given)  # a refusal names what was typed
    # the drafter named and its GPUs, for its memory (cli_load.drafter)
    args.spec_draft_model, args.spec_draft_tp = spec.draft_model, spec.draft_tensor_parallel_size
    args.spec_draft_kv_dtype = spec.draft_kv_cache_dtype  # SGLang's, for its drafter's note
    args.spec_draft_sample = spec.draft_sample_method  # vLLM's, for MRV2's draft logits
    args.spec_algorithm = spec.algorithm  # SGLang's own name, whose release gates it
    args.spec_method_inferred = spec.method_inferred  # vLLM 0.8 to 0.9.x: V0 (drafter_memory)
    for _, dest, _, _ in ENGINE_FLAGS:  # read once: a command reading its flags again per card
        setattr(args, dest, None)  # finds ridgeline's own


def _lookup_alone(args: argparse.Namespace, flag: str) -> None:
    """--ngram-prompt-lookup-max or -min with neither --speculative-model nor
    --num-speculative-tokens: vLLM 0.8.0-0.8.2 build no drafter of it (maybe_create_spec_config
    and create_speculative_config return None), so a caution, and no drafter."""
    from ridgeline.cli_load import _say_caution

    _check_engine(args, flag, "vllm")
    _say_caution(args, f"{flag} ignored: no drafter (vLLM reads it only beside "
                 "--speculative-model [ngram] and --num-speculative-tokens)")
    args.ngram_prompt_lookup_max = args.ngram_prompt_lookup_min = None  # read once


def _draft_dtype_alone(args: argparse.Namespace) -> None:
    """--speculative-draft-kv-cache-dtype without a drafter: SGLang's parser still checks the
    value (v0.5.18+, its choices), and nothing reads it without --speculative-algorithm (the
    draft worker alone does: mem_cache/kv_cache_dtype.py configure_kv_cache_dtype's
    is_draft_worker, 0.5.18-0.5.23), so a caution, and no drafter."""
    from ridgeline.cli_load import _say_caution
    from ridgeline.sglang_drafter import sglang_draft_kv_cache_dtype

    _check_engine(args, "--speculative-draft-kv-cache-dtype", "sglang")
    dtype = sglang_draft_kv_cache_dtype(args.speculative_draft_kv_cache_dtype,
                                        getattr(args, "engine_version", None))
    _say_caution(args, f"--speculative-draft-kv-cache-dtype {dtype} ignored: no drafter "
                 "(SGLang reads it only beside --speculative-algorithm)")
    args.speculative_draft_kv_cache_dtype = None  # read once, as the drafter's flags are


def _unnamed_drafter(args: argparse.Namespace, spec: Any) -> Any:
    """``spec``, a --speculative-config with neither model nor method (read here as the
    checkpoint's MTP layers, or ngram beside prompt_lookup keys), as the release asked reads
    it: refused where it refuses it (engine_spec.vllm_unnamed_drafter_problem); the
    checkpoint's MTP layers, with a caution, where prompt_lookup keys alone meet a target
    0.8.0 to 0.10.x draft with their own MTP layers (engine_spec.vllm_unnamed_drafts_mtp:
    DeepSeek-V3 on 0.9.2 drafts with its MTP layer, not by n-gram lookup)."""
    if not spec.method_inferred or spec.draft_model:
        return spec
    from ridgeline.cli_load import _say_caution, load_model
    from ridgeline.engine_spec import vllm_unnamed_drafter_problem, vllm_unnamed_drafts_mtp
    from ridgeline.vllm_memory import vllm_accounting

    version = vllm_accounting(getattr(args, "engine_version", None)).version
    model = load_model(args)
    legacy = getattr(args, "speculative_config", None) is None  # 0.8.0-0.8.2's own flags
    problem = vllm_unnamed_drafter_problem(version, model.model_type, legacy)
    if problem:
        raise InputError(problem)
    if spec.method != "ngram" or not vllm_unnamed_drafts_mtp(version, model.model_type):
        return spec
    keys = "--ngram-prompt-lookup-max/-min without --speculative-model" if legacy else \
        f"{FLAG_WORDS} prompt_lookup keys without a method"
    fix = "--speculative-model [ngram]" if legacy else "\"method\": \"ngram\""
    _say_caution(args, f"vLLM {version} reads {keys} as no drafter named: {model.name} "
                 f"({model.model_type}) drafts with its own MTP layers (deepseek_mtp) and the "
                 f"lookup keys are dropped; priced as mtp (give {fix} for n-gram lookup)")
    return replace(spec, method="mtp")


def _check_engine(args: argparse.Namespace, flag: str, owner: str) -> None:
    from ridgeline.engines import engine_id

    asked = getattr(args, "engine", None) or "vllm"
    names = asked if isinstance(asked, list) else str(asked).split(",")
    other = next((engine_id(n.strip()) for n in names if engine_id(n.strip()) != owner), None)
    if other:
        word = {"vllm": "vLLM's", "sglang": "SGLang's"}[owner]
        raise InputError(f"{flag} is {word}; {other} has no such flag (give --spec-tokens K "
                         "and --spec-method for any engine)")


def spec_method(args: argparse.Namespace, model: Any) -> str:
    """--spec-method as the simulator prices it (default eagle). An MTP drafter is an
    EAGLE-like head: one decoder layer fed the target's last hidden state and the sampled
    token, proposing one token a pass, so it is priced as eagle, the same lookahead slots and
    the same async scheduling; it is refused for a checkpoint without MTP layers
    (config.json's num_nextn_predict_layers or mtp_num_hidden_layers: DeepSeek-V3 has 1,
    Llama 3.1 none). ``model`` is read only for an MTP method."""
    from ridgeline.sim.config import SPEC_METHODS

    method = args.spec_method or SPEC_METHODS[0]
    if method not in MTP_METHODS:
        return str(method)
    if not model.mtp_layers:
        raise InputError(f"--spec-method {method} drafts with the checkpoint's multi-token-"
                         f"prediction layers, and {model.name} has none (no "
                         "num_nextn_predict_layers in its config.json): give eagle for an "
                         "EAGLE head, or draft-model")
    return SPEC_METHODS[0]


def spec_drafter(args: argparse.Namespace, model: Any, engines: list[str]) -> None:
    """The drafter, as fit, decode and simulate read it (an MTP one refused for a checkpoint
    without MTP layers), with a caution where its weights and cache are not in the pool: vLLM
    and TensorRT-LLM hold an MTP drafter's (drafter_memory.py), vLLM a separate drafter whose
    config it can read offline (draft_model_memory.py); SGLang before v0.5.14 loads any drafter
    after sizing its pool, into the memory it holds back, and from v0.5.14 before, its weights
    and cache in the pool where sglang_drafter.py reads them; an n-gram drafter holds
    nothing."""

    spec_args(args)
    if not args.spec_tokens:
        return
    spec_method(args, model)
    method = args.spec_method or "eagle"
    from ridgeline.engine_versions import speculative_problem

    for engine in engines:  # refused before any caution on it
        problem = speculative_problem(engine, getattr(args, "engine_version", None), method,
                                      getattr(args, "spec_algorithm", "") or "")
        if not problem and engine == "vllm" and method != "draft-model":  # 0.9.x V1's raise
            from ridgeline.cli_load import drafter as engine_spec
            from ridgeline.drafter_memory import vllm_drafter_problem

            problem = vllm_drafter_problem(getattr(args, "engine_version", None),
                                           engine_spec(args))
        if problem:
            raise InputError(problem)
    from ridgeline.cli_load import _say_caution

    named = getattr(args, "spec_draft_model", "") or ""
    if "vllm" in engines and getattr(args, "spec_method_inferred", False) and named:
        _say_caution(args, f"--speculative-config names {named} without a method: vLLM "
                     "detects it from the drafter's checkpoint too (an MTP or Medusa "
                     "config.json; from 0.34 the speculator its architecture declares), which "
                     "ridgeline does not read; priced as "
                     f"{getattr(args, 'spec_algorithm', '') or method}, as vLLM reads its name "
                     "(give the method to be sure)")
    if method == "ngram":
        return
    reasons = [_drafter_left_out(args, model, e, method) for e in engines]
    why = next((r for r in reasons if r), "")
    if not why:
        return
    name = getattr(args, "spec_draft_model", "") or ""
    kind = "draft model's" if method == "draft-model" else f"{method} drafter's"
    drafter = (f"the MTP layers' ({model.mtp_layers})" if method in MTP_METHODS else
               f"the {kind}" + (f" ({name})" if name else ""))
    caution = f"{drafter} weights and cache are not in this pool ({why})" + (
        "" if why.startswith("SGLang") else ": the engine holds them beside the model")
    _say_caution(args, caution)


def _drafter_left_out(args: argparse.Namespace, model: Any, engine: str, method: str) -> str:
    """Why ``engine``'s pool leaves the drafter out; "" where it holds it."""
    from ridgeline.draft_model_memory import drafter_problem, read_drafter
    from ridgeline.drafter_memory import mtp_counted

    if engine == "sglang":
        from ridgeline.sglang_drafter import sglang_drafter_in_pool, sglang_drafter_left_out
        from ridgeline.sglang_memory import sglang_data

        version = getattr(args, "engine_version", None)
        if sglang_drafter_in_pool(version):  # v0.5.14+: they come out of the pool
            why = sglang_drafter_left_out(model, method, getattr(args, "spec_draft_model", "")
                                          or "", version,
                                          getattr(args, "pipeline_parallel_size", 1) or 1)
            return (f"SGLang v0.5.14+ loads them before sizing its pool, which they come out "
                    f"of, but {why}") if why else ""
        held = sglang_data()["speculative_reserve_mib"]  # as sglang_speculative_reserve_mib
        return ("SGLang loads them after sizing its pool, a cache of the pool's tokens of "
                "their own, into the memory mem_fraction_static holds back: its default holds "
                f"{held['model_drafter'] / 1024:g} GiB more for a drafter from "
                f"v{held['from']} ({held['model_drafter_doubled'] / 1024:g} GiB from "
                f"v{held['model_drafter_doubled_from']}), {held['standalone'] / 1024:g} GiB for "
                f"STANDALONE from v{held['standalone_from']} until v{held['before']}; whether "
                "they fit there is not checked")
    if method in MTP_METHODS:
        backend = getattr(args, "backend", None)
        if mtp_counted(engine, model, backend):
            return ""
        if engine == "trtllm" and backend == "tensorrt":
            return "TensorRT-LLM runs MTP on its PyTorch backend only"
        if engine == "vllm":
            return ("a hybrid's MTP layer is sized only beside full attention and recurrent "
                    "layers it does not regroup")
        if engine == "trtllm":
            return "a hybrid's MTP layer joins TensorRT-LLM's layer mask, not sized here"
        return f"{engine}'s drafter memory is not modelled"
    if engine != "vllm":
        return f"{engine}'s separate drafter memory is not modelled"
    name = getattr(args, "spec_draft_model", "") or ""
    if not name:
        return "no drafter named: --speculative-config's model, a bundled id or a config.json"
    drafter = read_drafter(name, method)
    if drafter is None:
        return ("its config is neither bundled nor a config.json on this path, and ridgeline "
                "fetches nothing")
    return drafter_problem(engine, model, drafter)
