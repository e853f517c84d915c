"""Speculative decoding as the engines spell it, read into ridgeline's draft length and drafter
(--spec-tokens K, --spec-method): what a pasted launch line's drafter flags ask for, or a
one-line refusal where ridgeline prices something else.

- vLLM ``--speculative-config`` (``-sc``), a JSON object (vllm/config/speculative.py
  SpeculativeConfig; docs/features/spec_decode): ``method`` one of ngram, eagle, eagle3,
  draft_model, mtp and the per-model ``*_mtp`` names (deepseek_mtp, qwen3_next_mtp, …), with
  ``num_speculative_tokens``; from 0.4.1 until 0.8.3 (PR #15466 removed them) also as
  ``--speculative-model M --num-speculative-tokens K`` (``[ngram]`` as M for n-gram lookup).
- SGLang ``--speculative-algorithm`` EAGLE, EAGLE3, NEXTN (the checkpoint's MTP layers, run as
  EAGLE), STANDALONE (a small draft model) or NGRAM, ``--speculative-num-steps S`` drafter
  passes, ``--speculative-eagle-topk`` branches each, ``--speculative-num-draft-tokens`` the
  tree's tokens (python/sglang/srt/server_args.py; docs advanced_features/speculative_decoding):
  topk 1 is a chain of S drafts, which ridgeline prices; a wider tree it does not.
- TensorRT-LLM ``speculative_config`` (the LLM API's YAML): ``decoding_type`` MTP
  (``num_nextn_predict_layers``), Eagle/Eagle3, NGram or DraftTarget (``max_draft_len``).

``vllm_speculative_config('{"method": "deepseek_mtp", "num_speculative_tokens": 2}')`` is
``EngineSpec(2, "mtp")``, as ``--spec-method mtp --spec-tokens 2``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ridgeline.errors import InputError
from ridgeline.flag_json import json_object

FLAG = "--speculative-config"
# SpeculativeConfig keys read: the method, the draft length, the drafter named and the GPUs
# it is split over (whose config, read offline, sizes its memory: draft_model_memory.py); the
# rest (its precision, limits and logging) change neither memory nor step time as priced
VLLM_KEYS_READ = ("method", "num_speculative_tokens", "model", "prompt_lookup_max",
                  "prompt_lookup_min", "draft_tensor_parallel_size", "quantization",
                  "max_model_len", "revision", "code_revision", "disable_logprobs",
                  "disable_log_stats", "draft_sample_method")
# SpeculativeConfig.draft_sample_method's values (config/speculative.py DraftSampleMethod,
# 'greedy' the default in 0.29.0 to 0.34.0): 'probabilistic' keeps the drafts' logits, which
# Model Runner V2 holds for every seat (vllm_mrv2_drafter.draft_logits_bytes)
DRAFT_SAMPLE_METHODS = ("greedy", "probabilistic")
# the drafter names vLLM reads as n-gram lookup ("[ngram]" the 0.4.1-0.8.2 flag's spelling)
NGRAM_MODELS = ("[ngram]", "ngram")
VLLM_METHODS = {"ngram": "ngram", "eagle": "eagle", "eagle3": "eagle",
                "draft_model": "draft-model", "mtp": "mtp"}
SGLANG_ALGORITHMS = {"EAGLE": "eagle", "EAGLE3": "eagle", "NEXTN": "mtp",
                     "STANDALONE": "draft-model"}
# vLLM 0.4.1-0.8.x's flags for the keys 0.8.2 builds --speculative-config's JSON of
# (EngineArgs.create_speculative_config): an error names the flag the user gave
LEGACY_FLAGS = {"model": "--speculative-model", "num_speculative_tokens": "--num-speculative-tokens",
                "prompt_lookup_max": "--ngram-prompt-lookup-max",
                "prompt_lookup_min": "--ngram-prompt-lookup-min"}
TRTLLM_TYPES = {"mtp": "mtp", "eagle": "eagle", "eagle3": "eagle", "ngram": "ngram",
                "drafttarget": "draft-model"}
# the speculative_config fields read: the type, its draft length, where its drafter lies
TRTLLM_KEYS_READ = frozenset({"decoding_type", "max_draft_len", "num_nextn_predict_layers",
                              "speculative_model_dir", "speculative_model", "eagle3_one_model"})


@dataclass(frozen=True)
class EngineSpec:
    """A drafter as ridgeline prices it: ``tokens`` drafts a step (0: the checkpoint's MTP
    layers, as vLLM defaults an MTP drafter's length), proposed by ``method`` (--spec-method's
    words); ``draft_model`` the separate drafter named, where one is, split over
    ``draft_tensor_parallel_size`` GPUs (vLLM's key; 0: the target's tensor-parallel size)."""

    tokens: int
    method: str
    draft_model: str = ""
    draft_tensor_parallel_size: int = 0
    # the engine's own name where it gave one: SGLang's EAGLE3, whose release gates it;
    # vLLM's eagle3, which its Model Runner V2 gates under pipeline parallelism
    algorithm: str = ""
    # vLLM's --speculative-config named no method (nor model "[ngram]"): vLLM inferred it,
    # after the 0.8 to 0.9.x engine oracle had sent it to V0 (drafter_memory.vllm_v1_methods)
    method_inferred: bool = False
    # SGLang v0.5.18+ --speculative-draft-kv-cache-dtype, as given ("": unset, the draft cache
    # in --kv-cache-dtype's); its pool budgets the draft cache at the target's cell either way
    # (sglang_drafter.sglang_draft_kv_cache_dtype)
    draft_kv_cache_dtype: str = ""
    # vLLM --speculative-config's draft_sample_method as given ("": unset, greedy)
    draft_sample_method: str = ""


def vllm_speculative_config(text: str, flags: Mapping[str, str] | None = None) -> EngineSpec:
    """vLLM's --speculative-config JSON. Without a method vLLM infers one: ngram from
    ``model`` "[ngram]" (read here from the prompt_lookup keys too, with no model, which 0.8.0
    to 0.10.x read as the target's MTP layers where they take those: vllm_unnamed_drafts_mtp,
    applied by cli_spec once the model and release are known), from the drafter's name
    an EAGLE or EAGLE-3 head or a draft model (``vllm_method_named``), and with no ``model``
    (read here as the checkpoint's own MTP layers) none from 0.11, which refuses it
    (``vllm_unnamed_drafter_problem``); ``method_inferred`` says so, but for model "[ngram]",
    which vLLM 0.8 to 0.9.x's engine oracle read as ngram. ``flags`` maps a key to the older
    flag it was given as (LEGACY_FLAGS), for the errors to name."""
    config = json_object(text, FLAG, '{"method": "eagle", "num_speculative_tokens": 3}')
    unread = [key for key in config if key not in VLLM_KEYS_READ]
    if unread:
        raise InputError(f"{FLAG}'s {unread[0]!r} is not modelled: ridgeline reads "
                         + ", ".join(VLLM_KEYS_READ))
    model = config.get("model")
    if model is not None and not isinstance(model, str):
        raise InputError(f"{FLAG}'s model names the drafter, a string; got {model!r}")
    method = config.get("method")
    inferred = method is None and model not in NGRAM_MODELS
    if method is None:
        # the lookup keys mean n-gram lookup only with no model: a model named sets them to 0
        # (SpeculativeConfig.__post_init__'s else branch, read in 0.8.0-0.8.4 and 0.10.x)
        lookup = model is None and ("prompt_lookup_max" in config
                                    or "prompt_lookup_min" in config)
        method = ("ngram" if model in NGRAM_MODELS or lookup else
                  "mtp" if model is None else vllm_method_named(model))
        if method in ("dflash", "dspark"):
            raise InputError(f"{_named('model', flags)} {model!r} names a {method} drafter, as vLLM "
                             f"reads its name; {method} is not modelled: ridgeline prices "
                             f"{', '.join(VLLM_METHODS)}")
    draft_tp = config.get("draft_tensor_parallel_size")
    if draft_tp is not None and (isinstance(draft_tp, bool) or not isinstance(draft_tp, int)
                                 or draft_tp < 1):
        raise InputError(f"{FLAG}'s draft_tensor_parallel_size is a number of GPUs, at least "
                         f"1; got {draft_tp!r}")
    sample = config.get("draft_sample_method", "")
    if sample != "" and sample not in DRAFT_SAMPLE_METHODS:
        raise InputError(f"{FLAG}'s draft_sample_method is one of "
                         f"{', '.join(DRAFT_SAMPLE_METHODS)}; got {sample!r}")
    if _vllm_method(method) == "ngram":
        _check_lookup(config, flags)
    return EngineSpec(_vllm_tokens(config.get("num_speculative_tokens"), method, flags),
                      _vllm_method(method), "" if model in (None, *NGRAM_MODELS) else model,
                      draft_tp or 0, "eagle3" if method == "eagle3" else "",
                      method_inferred=inferred, draft_sample_method=sample)


def _named(key: str, flags: Mapping[str, str] | None, its: bool = False) -> str:
    """How an error names a --speculative-config key: the older flag it was given as
    (``flags``: --ngram-prompt-lookup-min for prompt_lookup_min), else the key as the JSON's
    ("--speculative-config's prompt_lookup_min"; ``its``: "its prompt_lookup_max")."""
    if flags and key in flags:
        return flags[key]
    return f"its {key}" if its else f"{FLAG}'s {key}"


def _check_lookup(config: Mapping[str, Any], flags: Mapping[str, str] | None = None) -> None:
    """An n-gram drafter's prompt_lookup_min and prompt_lookup_max as vLLM checks them: each a
    whole number of at least 1, one unset taking the other's value (5 both unset), the min
    no more than the max, else ValueError at start-up (SpeculativeConfig.__post_init__ in
    0.8.2-0.8.4: 'prompt_lookup_min=... must be <= prompt_lookup_max=...'; the same test in
    0.14.0's config/speculative.py and 0.34.0's v1/worker/gpu/spec_decode/ngram/config.py)."""
    given = {key: config[key] for key in ("prompt_lookup_min", "prompt_lookup_max")
             if config.get(key) is not None}
    for key, value in given.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{_named(key, flags)} is an n-gram length of at least 1 token; "
                             f"got {value!r}")
    least = given.get("prompt_lookup_min", given.get("prompt_lookup_max", 5))
    most = given.get("prompt_lookup_max", least)
    if least > most:
        raise InputError(f"{_named('prompt_lookup_min', flags)} ({least}) is above "
                         f"{_named('prompt_lookup_max', flags, its=True)} ({most}): vLLM "
                         "refuses to start")


def vllm_method_named(model: str) -> str:
    """The method vLLM reads from a drafter's name where --speculative-config gives none:
    "eagle-" in it an EAGLE head, "eagle3" an EAGLE-3 head, "dflash" and "dspark" those
    drafters, else a draft model (SpeculativeConfig.__post_init__ read in 0.10.2-0.32.0,
    dflash from 0.20, dspark from 0.25; the same matches in 0.34.0's speculator configs;
    0.8.5 took "eagle3-" for eagle): yuhuili/EAGLE-LLaMA3-Instruct-8B eagle,
    AngelSlim/Qwen3-8B_eagle3 eagle3, meta-llama/Llama-3.2-1B draft_model. vLLM reads the
    checkpoint too (an MTP or Medusa config.json; from 0.34 the speculator its architecture
    declares), which this does not."""
    name = model.lower()
    return next((method for key, method in (("eagle-", "eagle"), ("eagle3", "eagle3"),
                                            ("dflash", "dflash"), ("dspark", "dspark"))
                 if key in name), "draft_model")


def vllm_unnamed_drafter_problem(version: str, model_type: str, legacy: bool = False) -> str:
    """Why vLLM ``version`` refuses a --speculative-config naming neither model nor method
    (num_speculative_tokens alone) for a ``model_type`` target, or "": from v0.11 every
    target ('num_speculative_tokens was provided but without speculative model'); 0.8.0 to
    0.10.x a target outside their MTP list (deepseek_v3; mimo from 0.9.2; ernie4_5_moe and
    qwen3_next from 0.10.2), which drafts with its own MTP layers (engines.json
    vllm.speculative_unnamed); releases before 0.8.0, unread, are not refused. ``legacy``:
    said of 0.8.0-0.8.2's --num-speculative-tokens without --speculative-model, which
    SpeculativeConfig reads alike (0.8.0-0.8.1 maybe_create_spec_config, 0.8.2 the dict it
    builds of them)."""
    from ridgeline.vllm_memory import parse_version, vllm_data

    rule = vllm_data()["speculative_unnamed"]
    release = parse_version(version)
    rows = [r for r in rule["mtp_model_types"] if parse_version(r["from"]) <= release]
    if not rows or model_type in rows[-1]["types"]:
        return ""
    takes = rows[-1]["types"]
    why = f"; it takes the target's own MTP layers only for {', '.join(takes)}" if takes \
        else ""
    if legacy:  # 0.8.0-0.8.2's own flags
        return (f"vLLM {version} refuses --num-speculative-tokens without --speculative-model "
                f"(a ValueError at start-up: no speculative model{why}): give "
                "--speculative-model M, [ngram] for n-gram lookup")
    return (f"vLLM {version} refuses {FLAG} with num_speculative_tokens but neither model nor "
            f"method (a ValueError at start-up: no speculative model{why}): name the drafter, "
            "\"method\": \"mtp\" for the checkpoint's MTP layers or a \"model\"")


def vllm_unnamed_drafts_mtp(version: str, model_type: str) -> bool:
    """Whether vLLM ``version`` drafts with a ``model_type`` target's own MTP layers where
    --speculative-config names neither model nor method: 0.8.0 to 0.10.x for the types they
    list (deepseek_v3 from 0.8.0: vllm_unnamed_drafter_problem), prompt_lookup_min and
    prompt_lookup_max beside num_speculative_tokens included. SpeculativeConfig.__post_init__
    sets the model to the target before it looks at prompt_lookup keys, so with no method
    "ngram" it builds the draft from the target's config, reads its deepseek_mtp model type
    as method deepseek_mtp and sets both lookup keys to 0 (engines.json
    vllm.speculative_unnamed.prompt_lookup_source): DeepSeek-V3 on 0.9.2 given
    {"prompt_lookup_max": 4, "num_speculative_tokens": 1} drafts with its MTP layer."""
    from ridgeline.vllm_memory import parse_version, vllm_data

    rule = vllm_data()["speculative_unnamed"]
    release = parse_version(version)
    rows = [r for r in rule["mtp_model_types"] if parse_version(r["from"]) <= release]
    return bool(rows) and model_type in rows[-1]["types"]


def vllm_speculative_model(model: str | None, tokens: int | None,
                           lookup_max: int | None = None, lookup_min: int | None = None,
                           version: str | None = None) -> EngineSpec:
    """vLLM 0.4.1 to 0.8.2: --speculative-model M (``[ngram]`` for n-gram lookup),
    --num-speculative-tokens K and --ngram-prompt-lookup-max/-min, read as the JSON
    ``{"model": M, "num_speculative_tokens": K, "prompt_lookup_max": ...}`` 0.8.2 builds of
    them (EngineArgs.create_speculative_config). Before 0.8.2 (``version``; None: as 0.8.2)
    they went to SpeculativeConfig.maybe_create_spec_config whole, which for ``[ngram]``
    raises without --ngram-prompt-lookup-max ('ngram_prompt_lookup_max=None must be > 0')
    and takes the min as 1 where unset (vllm/config.py in the 0.8.0 and 0.8.1 wheels; 0.8.2
    sets both to 5, or one to the other): --speculative-model [ngram]
    --num-speculative-tokens 3 --ngram-prompt-lookup-max 4 on 0.8.0 is EngineSpec(3, "ngram")."""
    config: dict[str, Any] = {"num_speculative_tokens": tokens}
    if model is not None:
        config["model"] = model
    if model in NGRAM_MODELS and version is not None and legacy_lookup_required(version):
        if lookup_max is None:
            raise InputError(f"vLLM {version} refuses --speculative-model {model} without "
                             "--ngram-prompt-lookup-max (a ValueError at start-up: "
                             "'ngram_prompt_lookup_max=None must be > 0'; 0.8.2 defaults it "
                             "to 5): give --ngram-prompt-lookup-max N")
        lookup_min = 1 if lookup_min is None else lookup_min
    for key, value in (("prompt_lookup_max", lookup_max), ("prompt_lookup_min", lookup_min)):
        if value is not None:
            config[key] = value
    return vllm_speculative_config(json.dumps(config), LEGACY_FLAGS)


def legacy_lookup_required(version: str) -> bool:
    """Whether vLLM ``version`` predates --speculative-config (engines.json
    vllm.speculative_legacy.config_flag_from, 0.8.2), so its n-gram drafter needs
    --ngram-prompt-lookup-max: 0.8.1 True, 0.8.2 False."""
    from ridgeline.vllm_memory import parse_version, vllm_accounting, vllm_data

    first = str(vllm_data()["speculative_legacy"]["config_flag_from"])
    return parse_version(vllm_accounting(version).version) < parse_version(first)


def _vllm_method(method: Any) -> str:
    name = str(method)
    if name.endswith("_mtp"):  # deepseek_mtp, qwen3_next_mtp, …: newer releases call them mtp
        return "mtp"
    if name not in VLLM_METHODS:
        raise InputError(f"{FLAG}'s method {name!r} is not modelled: ridgeline prices "
                         f"{', '.join(VLLM_METHODS)} (and the *_mtp names)")
    return VLLM_METHODS[name]


def _vllm_tokens(tokens: Any, method: Any, flags: Mapping[str, str] | None = None) -> int:
    if tokens is None:
        if _vllm_method(method) == "mtp":
            return 0  # vLLM drafts as many as the checkpoint has MTP layers
        if flags and "num_speculative_tokens" in flags:
            raise InputError(f"give {flags['num_speculative_tokens']} K beside "
                             f"{flags.get('model', FLAG)}: the draft length")
        raise InputError(f"{FLAG}: give num_speculative_tokens, the draft length")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise InputError(f"{_named('num_speculative_tokens', flags)} is a draft length of at "
                         f"least 1 token; got {tokens!r}")
    return tokens


def sglang_speculative(algorithm: str, num_steps: int | None, topk: int | None,
                       num_draft_tokens: int | None) -> EngineSpec:
    """SGLang's flags: ``num_steps`` drafter passes of ``topk`` branches each. With topk 1
    the draft is a chain of num_steps tokens, verified as num_steps + 1 (SGLang sets
    --speculative-num-draft-tokens so); a wider tree, or NGRAM's (its
    --speculative-ngram-max-bfs-breadth), is refused. Without --speculative-num-steps SGLang
    picks the three by model; ridgeline asks for them."""
    name = algorithm.upper()
    if name == "NGRAM":
        raise InputError("--speculative-algorithm NGRAM drafts a tree of n-gram matches, which "
                         "ridgeline does not price: give --spec-method ngram --spec-tokens K "
                         "for a chain of K drafts")
    if name not in SGLANG_ALGORITHMS:
        raise InputError(f"--speculative-algorithm {algorithm} is not modelled: ridgeline "
                         f"prices {', '.join(SGLANG_ALGORITHMS)}")
    if num_steps is None:
        raise InputError(f"--speculative-algorithm {algorithm}: give --speculative-num-steps "
                         "S (and --speculative-eagle-topk 1), the draft length SGLang would "
                         "otherwise choose by model")
    if num_steps < 1:
        raise InputError(f"--speculative-num-steps is at least 1; got {num_steps}")
    if topk not in (None, 1):
        raise InputError(f"--speculative-eagle-topk {topk} drafts a tree of {topk} branches a "
                         "step, which ridgeline does not price: give --speculative-eagle-topk "
                         "1, a chain")
    if num_draft_tokens is not None and num_draft_tokens != num_steps + 1:
        raise InputError(f"--speculative-num-draft-tokens {num_draft_tokens} with topk 1 is "
                         f"--speculative-num-steps + 1 ({num_steps + 1}), as SGLang sets it")
    return EngineSpec(num_steps, SGLANG_ALGORITHMS[name], algorithm=name)


def trtllm_speculative_config(config: Mapping[str, Any]) -> EngineSpec:
    """TensorRT-LLM's speculative_config (its LLM API YAML, as --extra_llm_api_options gives
    it): MTP drafts num_nextn_predict_layers tokens; Eagle, Eagle3, NGram and DraftTarget
    max_draft_len; speculative_model_dir names an Eagle or DraftTarget drafter."""
    stray = sorted(set(config) - TRTLLM_KEYS_READ)
    if stray:
        raise InputError(f"speculative_config's {stray[0]} is not read: ridgeline prices a "
                         "drafter by its decoding_type and draft length, no more")
    kind = config.get("decoding_type")
    if not isinstance(kind, str) or kind.lower() not in TRTLLM_TYPES:  # a list is no name
        raise InputError(f"speculative_config's decoding_type {kind!r} is not modelled: "
                         "ridgeline prices MTP, Eagle, Eagle3, NGram and DraftTarget")
    key = "num_nextn_predict_layers" if kind.lower() == "mtp" else "max_draft_len"
    tokens = config.get(key)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise InputError(f"speculative_config's {key} is a draft length of at least 1 "
                         f"token; got {tokens!r}")
    return EngineSpec(tokens, TRTLLM_TYPES[kind.lower()],
                      str(config.get("speculative_model_dir") or config.get("speculative_model")
                          or ""))
