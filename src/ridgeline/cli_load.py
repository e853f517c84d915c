"""CLI: what the flags name, loaded — the model, the accelerator (or the cards a comparison
puts side by side), the deployment, the engine when none is named, its profile and settings.
The library modules are imported inside each function, so ``ridgeline --help`` stays fast."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ridgeline.cli_engine import cache_transceiver, eplb_settings, lora_settings, mm_limits
from ridgeline.cli_offload import host_offload, rope_launch
from ridgeline.errors import InputError
from ridgeline.units import GIB, plural

if TYPE_CHECKING:
    from ridgeline.engine_spec import EngineSpec


def load_model(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from ridgeline.catalog import gguf_refusal, resolve_model

    gguf = args.model.strip().lower().endswith(".gguf")  # a file, never a Hub id
    if gguf and getattr(args, "fetch", False) and not Path(args.model).expanduser().is_file():
        raise InputError(gguf_refusal(args.model))
    if getattr(args, "fetch", False):
        from ridgeline.hub import fetch_model

        if args.model.endswith(".json") or Path(args.model).expanduser().exists():
            raise InputError(f"--fetch downloads a Hub id's config.json; {args.model} is a "
                             "local file: drop --fetch")

        # with its hf_quant_config.json, where it has one
        return launch_rope(args, fetch_model(args.model))
    model = resolve_model(args.model, fetchable=hasattr(args, "fetch"))
    if gguf:
        from ridgeline.gguf_model import gguf_size_caution

        _say_caution(args, gguf_size_caution(Path(args.model).expanduser()))
    return launch_rope(args, model)


def launch_rope(args: argparse.Namespace, model: Any) -> Any:
    """``model`` with the RoPE scaling vLLM's --hf-overrides or JSON --rope-scaling sets
    (vllm_rope.py), refused under another engine; as loaded where neither is given."""
    from ridgeline.engines import engine_id
    from ridgeline.vllm_rope import launch_rope_model

    overrides, scaling = getattr(args, "hf_overrides", None), getattr(args, "rope_scaling", None)
    json_scaling = scaling if isinstance(scaling, str) and scaling.lstrip().startswith("{") \
        else None
    if overrides is None and json_scaling is None:
        return model
    engines = [engine_id(e.strip()) for e in str(getattr(args, "engine", None) or "vllm")
               .split(",")]
    return launch_rope_model(model, overrides, json_scaling, engines,
                             getattr(args, "engine_version", None))


def _say_caution(args: argparse.Namespace, caution: str) -> None:
    """A caution about the inputs, said once on stderr and kept for the report's JSON."""
    said = vars(args).setdefault("cautions_said", [])  # a command may load it twice
    if caution and caution not in said:
        said.append(caution)
        print(f"ridgeline: caution: {caution}", file=sys.stderr)


def load_accelerator(args: argparse.Namespace) -> Any:
    from ridgeline.hardware import (
        custom_accelerator,
        load_accelerator_file,
        resolve_accelerator,
        with_memory_gib,
    )

    if args.gpu_file:
        given = [flag for flag, value in (("--gpu", args.gpu), ("--peak-tflops", args.peak_tflops),
                                          ("--bandwidth-gbs", args.bandwidth_gbs),
                                          ("--gpu-memory-gib", args.gpu_memory_gib)) if value]
        if given:
            raise InputError(f"--gpu-file describes the accelerator; drop {', '.join(given)}")
        return load_accelerator_file(args.gpu_file)
    if args.peak_tflops or args.bandwidth_gbs:
        # a catalog card first: adding the other flag would only meet this refusal next
        if args.gpu and accelerator_known(args.gpu):
            raise InputError(f"--gpu {args.gpu} is a catalog accelerator; --peak-tflops and "
                             "--bandwidth-gbs describe a custom one (name it with --gpu "
                             "something else, or drop them)")
        if not (args.peak_tflops and args.bandwidth_gbs):
            raise InputError("a custom accelerator needs both --peak-tflops and --bandwidth-gbs")
        if args.gpu_memory_gib is None and getattr(args, "model", None):
            raise InputError("a custom accelerator holding a model needs --gpu-memory-gib, its "
                             "memory in GiB (an H100's: 80)")
        # without a model only the peak and bandwidth are read: the memory is a placeholder
        return custom_accelerator(args.gpu or "custom", args.peak_tflops, args.bandwidth_gbs,
                                  args.gpu_memory_gib or 80.0)
    if not args.gpu:
        if args.gpu_required:
            raise InputError("name an accelerator with --gpu (see `ridgeline hardware`)")
        if args.gpu_memory_gib:
            raise InputError("--gpu-memory-gib sizes an accelerator named with --gpu")
        return None
    acc = resolve_accelerator(args.gpu)
    if args.gpu_memory_gib:  # another memory configuration of the same part (a 32 GB M1 Max)
        acc, caution = with_memory_gib(acc, args.gpu_memory_gib)
        _say_caution(args, caution)
    return acc


def load_deployment(args: argparse.Namespace, model: Any = None) -> Any:
    acc = load_accelerator(args)
    if acc is None:
        return None
    from ridgeline.engines import engine_id

    given = getattr(args, "engine", None)  # engine-free commands leave it out
    engine = engine_id(given) if isinstance(given, str) else None
    return build_deployment(args, model or load_model(args), acc, engine)


def served_engine(args: argparse.Namespace) -> str | None:
    """The engine a command that names none by default (roofline, moe, kv) builds its
    deployment for: --engine's; where none was given, the card's default
    (default_engine, where the command defaults by the accelerator) if it is llama.cpp's,
    the only engine that serves the card. None where vLLM's default would be, or where the
    command takes no default: the checkpoint as stored with no engine named, the article's
    arithmetic (no engine's kernel refuses a format; Deployment.build)."""
    from ridgeline.engines import engine_id

    if getattr(args, "engine", None) is None:
        return None
    engine = engine_id(args.engine)
    return None if getattr(args, "engine_defaulted", False) and engine == "vllm" else engine


def named_weights(args: argparse.Namespace) -> str | None:
    """The weight format the flags name where no checkpoint is read (roofline, utilization
    without --model): --weights, or the format --quantization METHOD stands for."""
    from ridgeline.catalog import normalise
    from ridgeline.engine_quantization import method_format
    from ridgeline.precision import weight_mixes

    method = getattr(args, "quantization", None)
    if method and normalise(method_format(method)) in weight_mixes():
        raise InputError(f"--quantization {method} quantizes some of a model's weights (a MoE's "
                         "experts) and leaves the rest, so it has no one size per weight: give "
                         "--model")
    weights = getattr(args, "weights", None)
    if method and weights:
        from ridgeline.engine_quantization import method_with_weights

        return method_with_weights(method, weights)
    return method_format(method) if method else weights


def weights_stored(args: argparse.Namespace) -> bool:
    """Whether the weights are loaded as a checkpoint stores them: all but a 16-bit checkpoint
    quantized on load by -q alone (engine_quantization.loaded_as_stored)."""
    from ridgeline.engine_quantization import loaded_as_stored

    return loaded_as_stored(getattr(args, "quantization", None), getattr(args, "weights", None))


def allow_long_context(args: argparse.Namespace, engine: str | None) -> bool:
    """--vllm-allow-long-max-model-len (VLLM_ALLOW_LONG_MAX_MODEL_LEN): True where 1 under
    vLLM; refused under another engine."""
    allowed = getattr(args, "vllm_allow_long_max_model_len", None)
    if allowed is None:
        return False
    if engine not in (None, "vllm"):
        raise InputError(f"--vllm-allow-long-max-model-len is vLLM's (its environment "
                         f"variable VLLM_ALLOW_LONG_MAX_MODEL_LEN); {engine} has "
                         + ("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN, not modelled"
                            if engine == "sglang" else "none"))
    return bool(allowed)


def served_weights(args: argparse.Namespace, model: Any, acc: Any,
                   engine: str | None) -> str | None:
    """--weights, or what --quantization METHOD serves ``model`` in (as stored where the
    checkpoint is quantized so; refused where vLLM and SGLang refuse it), then --dtype's type
    for an unquantized checkpoint (bfloat16 refused on a card without it). None under
    llama.cpp is the GGUF it runs the checkpoint as (build_deployment says which)."""
    from ridgeline.engine_quantization import dtype_on, method_weights, weights_with_dtype

    method, dtype = getattr(args, "quantization", None), getattr(args, "dtype", None)
    if dtype not in (None, "auto") and (engine or "").startswith("llama.cpp"):
        raise InputError(f"--dtype {dtype} is vLLM's and SGLang's; llama.cpp runs the GGUF's "
                         "own types (--weights)")
    weights = getattr(args, "weights", None)
    if method:
        weights = method_weights(method, weights, model, acc, engine,
                                 getattr(args, "engine_version", None))
    dtype_on(dtype, acc)
    if method and not getattr(args, "weights", None):
        from ridgeline.engine_quantization import modelopt_export_note

        _say_caution(args, modelopt_export_note(method, model))
    return weights_with_dtype(weights, dtype, model)


def kv_choice_check(args: argparse.Namespace, engine: str | None) -> None:
    """InputError where --kv-cache-dtype (vLLM's and SGLang's spelling) names a value the
    engine's release refuses (SGLang's bare fp8, vLLM's bf16), or any spelling names an
    engine's value ridgeline does not size (vLLM's fp8_inc): engine_choices.py. ridgeline's
    --kv-dtype keeps its own names, and an engine without the flag (TensorRT-LLM, llama.cpp)
    reads it so too."""
    from ridgeline.engine_choices import (
        KV_CACHE_DTYPE_FLAG,
        kv_cache_dtype_problem,
        unmodelled_choice_problem,
    )

    value = getattr(args, "kv_dtype", None)
    if value is None:
        return
    spelling = getattr(args, "kv_dtype_spelling", None) or "--kv-dtype"
    problem = (kv_cache_dtype_problem(engine, getattr(args, "engine_version", None), value)
               if spelling == KV_CACHE_DTYPE_FLAG and engine in ("vllm", "sglang") else "") \
        or unmodelled_choice_problem(value, spelling)
    if problem:
        raise InputError(problem)


def kv_release_refusal(args: argparse.Namespace) -> str:
    """Where --kv-cache-dtype names a value of the engine's (vLLM, SGLang) that ridgeline
    does not size and the engine's release refuses it, having come later or been dropped,
    that release's refusal, the one the user would meet first (vLLM 0.11.0 and
    turboquant_k8v4, SGLang 0.5.3 and 0.5.23 and fp4_e2m1); "" otherwise, and for another
    engine's value (SGLang's fp4_e2m1 under vLLM), which is refused as not modelled, naming
    whose it is."""
    from ridgeline.engine_choices import (
        KV_CACHE_DTYPE_FLAG,
        kv_cache_dtype_choices,
        kv_cache_dtype_problem,
    )
    from ridgeline.engine_versions import check_version_kind
    from ridgeline.engines import engine_id

    asked = getattr(args, "engine", None)
    if not isinstance(asked, str) or getattr(args, "kv_dtype_spelling", None) \
            != KV_CACHE_DTYPE_FLAG:
        return ""
    engine, version = engine_id(asked), getattr(args, "engine_version", None)
    listed = kv_cache_dtype_choices(engine)
    if listed is None or args.kv_dtype not in {c.value for c in listed.choices}:
        return ""
    if version is not None:
        check_version_kind(engine, version)
    return kv_cache_dtype_problem(engine, version, args.kv_dtype)


def build_deployment(args: argparse.Namespace, model: Any, acc: Any, engine: str | None,
                     expert_parallel: bool = False) -> Any:
    """The deployment the flags describe on ``acc`` for ``engine`` (None: no engine named):
    --num-gpus × --pipeline-parallel-size cards, the formats, llama.cpp's knobs; the
    data-parallel ranks and expert parallelism where the command takes them."""
    from ridgeline.deployment import Deployment
    from ridgeline.engine_versions import check_version_kind

    if engine is not None and getattr(args, "engine_version", None) is not None:
        check_version_kind(engine, args.engine_version)  # before any rule reads it
    kv_choice_check(args, engine)
    pp = pipeline_size(args, engine)
    gpus, ranks = data_parallel_layout(args, model, engine, acc)
    ep = expert_parallel_asked(args, gpus * ranks,
                               expert_parallel or bool(getattr(args, "expert_parallel", False)),
                               model.name if model.moe is None else "")
    weights = served_weights(args, model, acc, engine)
    # laid out here, its gates asked below with the release and a floor's way out
    dep = Deployment.laid_out(model, acc, weights,
                           getattr(args, "kv_dtype", None), gpus * pp, pp, engine=engine,
                           expert_parallel=ep,
                           flash_attention=flash_attention(args, engine or "vllm"),
                           offload=host_offload(args, model, engine),
                           split_mode=getattr(args, "split_mode", None),
                           data_parallel_size=ranks,
                           decode_context_parallel_size=getattr(
                               args, "decode_context_parallel_size", None) or 1)
    dep = replace(dep, weights_stored=weights_stored(args),
                  allow_long_context=allow_long_context(args, engine))
    if dep.allow_long_context and getattr(args, "max_model_len", None):
        from ridgeline.capacity import long_context_caution

        _say_caution(args, long_context_caution(dep, args.max_model_len))
    rope = rope_launch(args, engine)
    if rope is not None:
        dep = replace(dep, rope=rope)
    # the settings a hybrid's state dtype follows, so the step reads it as the pool sizes it
    dep = dep.with_state_settings(getattr(args, "engine_version", None),
                                  getattr(args, "mamba_ssm_dtype", None))
    # --enable-lora (vLLM's or SGLang's): the adapters' matmuls in every step, as the pool
    # holds their slots; refused where they are not modelled (its pool checks the same)
    lora = lora_settings(args)
    if lora is not None:
        from ridgeline.lora_slots import check_engine_lora

        check_engine_lora(dep, lora, getattr(args, "engine_version", None))
    dep = dep.with_lora(lora)
    # --enable-eplb with redundant experts: the busiest expert-parallel rank as EPLB leaves
    # it (expert_ranks.ep_imbalance); its replicas and refusals are the pool's (memory.py)
    eplb = eplb_settings(args)
    if eplb is not None:
        dep = dep.with_eplb(eplb.enabled, eplb.num_redundant_experts)
    # the decode graphs the engine captures under the flags (--enforce-eager, vLLM's capture
    # sizes and seats, SGLang's --cuda-graph-max-bs): graph_batches.settings_capture
    from ridgeline.graph_batches import with_cuda_graphs

    dep = with_cuda_graphs(dep, args, asked_drafter(args) if dep.engine == "vllm" else None)
    from ridgeline.quantization_gates import deployment_problem

    problem = deployment_problem(dep, getattr(args, "engine_version", None))
    if problem:
        raise InputError(_floor_refusal(args, dep) or problem)
    from ridgeline.cpu_offload import cpu_offload_from_args, host_memory_problem, runner_problem

    cpu = cpu_offload_from_args(args, engine, ranks)
    if cpu is not None:
        dep = replace(dep, cpu_offload=cpu)
        ram = getattr(args, "host_memory_gib", None)
        problem = (runner_problem(dep, getattr(args, "engine_version", None),
                                  *asked_drafter_words(args))
                   or host_memory_problem(dep, ram * GIB if ram else None))
        if problem:
            raise InputError(problem)
    if ep:
        check_expert_parallel(dep)
    if (engine or "vllm") == "vllm":  # another engine's pool refuses the flag as vLLM's
        from ridgeline.vllm_mm_limits import text_model_caution

        _say_caution(args, text_model_caution(model, mm_limits(args)))
    if weights is None and (engine or "").startswith("llama.cpp"):  # Deployment.build's GGUF
        from ridgeline.served_model import llamacpp_weights_note

        # said once the deployment stands: a refusal is its one line, with no caution before it
        _say_caution(args, llamacpp_weights_note(model))
    return dep


def _floor_refusal(args: argparse.Namespace, dep: Any) -> str:
    """Where a vLLM floor is what refuses ``dep`` (the refusal deployment_problem gave), that
    refusal with its way out to the first release sized as fitting under the flags given
    (floor_release.py: fp8 weights on a T4 from 0.16, 0.14 and 0.15 loading the 16-bit
    weights first); "" where another rule refuses it."""
    from ridgeline.floor_release import floor_refusal
    from ridgeline.quantization_gates import deployment_problem
    from ridgeline.vllm_gpu_floors import gpu_floor_problem

    version = getattr(args, "engine_version", None)
    floor = gpu_floor_problem(dep, version)
    if not floor or floor != deployment_problem(dep, version):
        return ""
    try:
        settings = engine_settings(args)
    except AttributeError:  # a command without the pool's flags (roofline, kv): its defaults
        from ridgeline.memory import EngineSettings

        settings = EngineSettings(max_model_len=getattr(args, "max_model_len", None))
    if getattr(args, "target_concurrency", None) and settings.max_model_len is None:
        settings = replace(settings, max_model_len=1)  # fit finds the context: one that starts
    return floor_refusal(dep, version, settings)


def data_parallel_layout(args: argparse.Namespace, model: Any, engine: str | None,
                         acc: Any = None) -> tuple[int, int]:
    """(GPUs of one data-parallel rank, ranks) as the engine reads its flags: vLLM's
    --data-parallel-size N ranks of --tensor-parallel-size (--num-gpus) GPUs; SGLang's --dp-size
    N with --enable-dp-attention over its --tp-size (--num-gpus) GPUs in all, so N must divide
    them; its --dp-size alone (whole replicas) and its spelling read as vLLM's are refused
    (data_parallel.py). Without the flags, (--num-gpus, 1). A DeepSeek Sparse Attention
    model under SGLang 0.5.3–0.5.5 on ``acc``, an NVIDIA GPU, runs DP attention over every
    GPU whatever the flags say (sglang_nsa.nsa_layout), and fit says so."""
    from ridgeline.data_parallel import (
        sglang_replicas_problem,
        spelling_problem,
        trtllm_problem,
    )

    ranks = getattr(args, "data_parallel_size", None)
    switch = bool(getattr(args, "enable_dp_attention", False))
    gpus = int(args.num_gpus)
    if engine == "trtllm" and (switch or (ranks or 1) > 1):  # one answer, however spelled
        raise InputError(trtllm_problem(model, ranks or 1))
    if engine == "sglang" and acc is not None:
        from ridgeline.sglang_nsa import nsa_layout, nsa_layout_caution

        version = getattr(args, "engine_version", None)
        forced = nsa_layout(model, acc, gpus, pipeline_size(args, engine), version)
        if forced is not None:
            _say_caution(args, nsa_layout_caution(model, gpus, version, ranks, switch))
            return forced
    if switch and ranks is None:
        raise InputError("--enable-dp-attention splits attention over --dp-size ranks: give "
                         "--dp-size N")
    if switch and engine != "sglang":
        raise InputError(f"--enable-dp-attention is SGLang's switch; "
                         f"{engine or 'vllm'}'s data-parallel attention is "
                         "--data-parallel-size alone, each rank --tensor-parallel-size GPUs")
    if ranks is None or ranks == 1:  # SGLang: dp_size 1 turns DP attention off
        return gpus, 1
    spelling = spelling_problem(getattr(args, "data_parallel_spelling", None), ranks, engine)
    if spelling:
        raise InputError(spelling)
    if engine == "sglang":
        if not switch:
            raise InputError(sglang_replicas_problem(ranks, gpus))
        if gpus % ranks:
            raise InputError(f"SGLang's --tp-size (--num-gpus {gpus}) is every GPU of the "
                             f"server, its attention split over --tp-size ÷ --dp-size: {ranks} "
                             f"ranks do not divide {gpus:,} GPUs (it asserts tp_size % dp_size "
                             "== 0)")
        return gpus // ranks, ranks
    return gpus, ranks


def expert_parallel_asked(args: argparse.Namespace, expert_ranks: int, switch: bool,
                          dense: str = "") -> bool:
    """Whether the flags ask for expert parallelism: vLLM's --enable-expert-parallel
    (``switch``), or SGLang's --ep-size / trtllm-serve's --ep_size N. ridgeline models the
    experts sliced over a stage's ``expert_ranks`` GPUs (TP × data-parallel ranks; N = 1, the
    engines' default) or whole, spread over all of them (N = ``expert_ranks``: SGLang's usual
    --ep-size equal to --tp-size); N between, groups of experts each tensor-parallel inside
    (moe_tp_size = TP ÷ N), is refused; so is any N past 1 for a ``dense`` model (its name),
    which has no experts to spread, as --enable-expert-parallel is refused for it."""
    size = getattr(args, "expert_parallel_size", None)
    if size is None:
        return switch
    if size == 1 and switch:
        raise InputError("--ep-size 1 keeps every expert sliced over the GPUs, and "
                         "--enable-expert-parallel spreads them whole: give one")
    if size > 1 and dense:
        raise InputError(f"--ep-size {size:,} spreads a MoE's experts: {dense} is dense")
    if size in (1, expert_ranks):
        return bool(size > 1)
    if expert_ranks == 1:
        raise InputError(f"--ep-size {size:,}: the experts run on 1 GPU, so their one group "
                         "is --ep-size 1 (the default); spreading them over "
                         f"{size:,} takes --num-gpus {size:,} (--tp-size), --ep-size equal "
                         "to it")
    raise InputError(f"--ep-size {size}: ridgeline models a MoE's experts sliced over the "
                     f"{expert_ranks:,} {plural(expert_ranks, 'GPU')} that run them (--ep-size "
                     f"1, the default) or whole, spread over all of them (--ep-size "
                     f"{expert_ranks:,}, as --enable-expert-parallel); {size:,} groups of "
                     "experts, each tensor-parallel inside, is not modelled")


def check_expert_parallel(dep: Any) -> None:
    """Refuse expert parallelism where there is nothing to spread, or no engine to spread it."""
    if dep.model.moe is None:
        raise InputError(f"--enable-expert-parallel spreads a MoE's experts: {dep.model.name} "
                         "is dense")
    if dep.engine.startswith("llama.cpp"):
        raise InputError(f"--enable-expert-parallel: {dep.engine} has no expert parallelism "
                         "(its -sm splits layers or tensors; --cpu-moe/--n-cpu-moe place "
                         "experts on the host)")
    if dep.engine_expert_ranks < 2:  # 1 x MI250 under vLLM: 2 dies, 2 ranks
        raise InputError(one_rank_refusal(dep.engine))


def one_rank_refusal(engine: str) -> str:
    """Why --enable-expert-parallel on one rank is refused, in ``engine``'s own words (SGLang
    and TensorRT-LLM had read vLLM's)."""
    why = {"vllm": "vLLM's expert parallelism is off at TP × DP = 1",
           "sglang": "SGLang's --ep-size divides its --tp-size, 1",
           "trtllm": "TensorRT-LLM's --ep_size divides its --tp_size, 1"}.get(engine)
    return ("--enable-expert-parallel spreads the experts over the tensor-parallel GPUs: with "
            "one there is nothing to spread" + (f" ({why})" if why else ""))


def accelerator_known(name: str) -> bool:
    from ridgeline.hardware import resolve_accelerator

    try:
        resolve_accelerator(name)
    except InputError:
        return False
    return True


def accelerator_names(args: argparse.Namespace) -> list[str]:
    """--gpu read as a list: decode and fit put several cards side by side."""
    names = [name.strip() for name in (args.gpu or "").split(",")]
    if len(names) > 1 and not all(names):
        raise InputError(f"--gpu {args.gpu!r} has an empty name between its commas")
    if len(names) > 1:
        from ridgeline.hardware import resolve_accelerator

        ids = [resolve_accelerator(name).id for name in names]
        for i, card in enumerate(ids):
            if card in ids[:i]:
                raise InputError(f"an accelerator is named twice in --gpu: "
                                 f"{names[ids.index(card)]!r} and {names[i]!r} are both {card}")
    return names


def check_cards(args: argparse.Namespace) -> None:
    """The cards --gpu names (one, or several side by side) or --gpu-file holds, read before
    the model loads, so that an unknown one is refused before a --fetch download, in the one
    line load_accelerator gives it later. A custom card (--peak-tflops, --bandwidth-gbs) is
    left to load_accelerator, which reads the model's memory flag beside it."""
    from ridgeline.hardware import resolve_accelerator

    names = accelerator_names(args)  # several: each resolved, one named twice refused
    if getattr(args, "gpu_file", None):
        load_accelerator(args)  # the record, or the flags that clash with it; no caution said
    elif len(names) == 1 and names[0] and not (getattr(args, "peak_tflops", None)
                                               or getattr(args, "bandwidth_gbs", None)):
        resolve_accelerator(names[0])


def one_card(args: argparse.Namespace, name: str) -> argparse.Namespace:
    """The arguments with --gpu narrowed to one of the cards a comparison names: with no
    --engine, that card's own default engine (llama.cpp-metal on an M2 Max beside vllm on an
    H100); an unqualified 'llama.cpp' as that card's build."""
    one = argparse.Namespace(**{**vars(args), "gpu": name})
    if getattr(args, "engine_defaulted", False):
        one.engine = one.engine_asked = default_engine(one)
        return one
    asked = getattr(args, "engine_asked", None)
    if asked is not None:
        one.engine = llamacpp_builds_for(one, asked)
    return one


def card_engines(args: argparse.Namespace) -> list[str]:
    """The engines a command runs, as named: --engine's, comma-separated; with none named,
    each card's own default, once each (vllm and llama.cpp-metal for an H100 beside an M2
    Max)."""
    names = accelerator_names(args) if getattr(args, "engine_defaulted", False) else []
    if len(names) > 1:
        return list(dict.fromkeys(one_card(args, name).engine for name in names))
    return [name.strip() for name in args.engine.split(",")]


def card_id(name: str) -> str:
    """The catalog id of a card a comparison names ('h100' is h100-sxm): what its rows and
    a card left out of them are called."""
    from ridgeline.hardware import resolve_accelerator

    return resolve_accelerator(name).id


def _named_accelerator(args: argparse.Namespace) -> Any:
    """The accelerator the command names, or None (a bad --gpu or --gpu-file is the
    command's to report, with its own words)."""
    from ridgeline.hardware import load_accelerator_file, resolve_accelerator

    try:
        path = getattr(args, "gpu_file", None)
        if isinstance(path, list):  # calibrate takes several
            path = path[0] if path else None
        if path:
            return load_accelerator_file(path)
        if getattr(args, "gpu", None):
            return resolve_accelerator(accelerator_names(args)[0])
    except InputError:
        pass
    return None


def _vendor(args: argparse.Namespace) -> str:
    """The vendor of the accelerator the command names, or ""."""
    acc = _named_accelerator(args)
    return (acc.vendor or "") if acc is not None else ""


def default_engine(args: argparse.Namespace) -> str:
    """The engine when none is named: engine_platforms.default_engine for the first card
    --gpu names, at --engine-version (llama.cpp-metal on Apple silicon, llama.cpp-rocm on the
    AMD GPUs vLLM's ROCm build leaves out, llama.cpp-cuda on the NVIDIA GPUs the vLLM release
    has no kernels for, vLLM elsewhere); vLLM where no card is named. A comparison gives each
    card its own (``one_card``)."""
    from ridgeline.engine_platforms import default_engine as card_default

    acc = _named_accelerator(args)
    if acc is None:
        return "vllm"
    return card_default(acc, getattr(args, "engine_version", None))


def llamacpp_builds_for(args: argparse.Namespace, asked: Any) -> Any:
    """--engine as given (a name, or a repeated flag's list): an unqualified 'llama.cpp' as
    the build for the accelerator's vendor (Metal on a Mac, ROCm on AMD), as the default
    engine picks; a named build as given."""
    from ridgeline.engines import llamacpp_build, names_plain_llamacpp

    names = asked if isinstance(asked, list) else [asked]
    if not any(isinstance(n, str) and names_plain_llamacpp(n) for n in names):
        return asked
    vendor = _vendor(args)
    built = [llamacpp_build(n, vendor) for n in names]
    return built if isinstance(asked, list) else built[0]


def flash_attention(args: argparse.Namespace, engine: str) -> bool | None:
    """--flash-attn, llama.cpp's switch: on, off, or None for auto, its default, which
    Deployment.build resolves as llama.cpp does; refused for other engines (always on)."""
    flag = getattr(args, "flash_attn", None)
    if flag and not engine.startswith("llama.cpp"):
        raise InputError(f"--flash-attn is llama.cpp's switch; {engine} has no such flag")
    if not engine.startswith("llama.cpp"):
        return True
    return None if flag in (None, "auto") else flag == "on"


def pipeline_size(args: argparse.Namespace, engine: str | None) -> int:
    """The pipeline stages asked for (1 by default), refused for llama.cpp, whose layer split
    is --num-gpus with -sm layer."""
    pp = getattr(args, "pipeline_parallel_size", None)
    if pp is None:
        return 1
    if engine is not None and engine.startswith("llama.cpp"):
        raise InputError("--pipeline-parallel-size is vLLM's, SGLang's and TensorRT-LLM's: "
                         "llama.cpp splits the layers over --num-gpus itself (-sm layer, its "
                         "default)")
    return int(pp)


def load_profile(args: argparse.Namespace) -> Any:
    from ridgeline.engines import chosen_profile

    profile = chosen_profile(args.engine, getattr(args, "profile", None))
    return profile.without_cuda_graphs() if getattr(args, "enforce_eager", False) else profile


def drafts_with_mtp(args: argparse.Namespace) -> bool:
    """Whether the drafter is the checkpoint's MTP layers (--spec-method mtp, or an engine's
    spelling of it), whose weights and cache the pool holds."""
    from ridgeline.cli_spec import MTP_METHODS

    return bool(getattr(args, "spec_tokens", 0)) and getattr(args, "spec_method", None) in MTP_METHODS


def drafter(args: argparse.Namespace) -> Any:
    """The drafter the flags give (engine_spec.EngineSpec), whose memory the pool may hold:
    its length, --spec-method (default eagle), and the drafter an engine's flags named and the
    GPUs it is split over; None without --spec-tokens."""
    from ridgeline.engine_spec import EngineSpec

    tokens = getattr(args, "spec_tokens", 0)
    if not tokens:
        return None
    return EngineSpec(tokens, getattr(args, "spec_method", None) or "eagle",
                      getattr(args, "spec_draft_model", "") or "",
                      getattr(args, "spec_draft_tp", 0) or 0,
                      getattr(args, "spec_algorithm", "") or "",
                      bool(getattr(args, "spec_method_inferred", False)),
                      getattr(args, "spec_draft_kv_dtype", "") or "",
                      getattr(args, "spec_draft_sample", "") or "")


def asked_drafter(args: argparse.Namespace) -> EngineSpec | None:
    """The drafter the flags ask for, whether or not cli_spec.spec_args has read vLLM's
    --speculative-config (--speculative-model) into --spec-tokens yet (simulate and observe
    build the deployment first): its drafts and method (--spec-method, default eagle); None
    without one. vLLM's default CUDA-graph cap counts the drafts, and its V1 runner rounds
    each captured size to 1 + them (graph_batches.settings_capture)."""
    from ridgeline.engine_spec import EngineSpec, vllm_speculative_config, vllm_speculative_model

    if getattr(args, "spec_tokens", 0):  # given, or read already
        return EngineSpec(int(args.spec_tokens), getattr(args, "spec_method", None) or "eagle")
    if getattr(args, "speculative_config", None) is not None:
        return vllm_speculative_config(args.speculative_config)
    if getattr(args, "speculative_model", None) is not None:
        return vllm_speculative_model(args.speculative_model,
                                      getattr(args, "num_speculative_tokens", None),
                                      getattr(args, "ngram_prompt_lookup_max", None),
                                      getattr(args, "ngram_prompt_lookup_min", None))
    return None


def asked_drafts(args: argparse.Namespace) -> int:
    """The drafts a request's step verifies as the flags ask for them (asked_drafter); 0
    without a drafter."""
    drafter = asked_drafter(args)
    return drafter.tokens if drafter is not None else 0


def asked_drafter_words(args: argparse.Namespace) -> tuple[str, str]:
    """The drafter's --spec-method words and vLLM's own method name ("eagle3"; else "") as
    the flags ask for it, whether or not cli_spec.spec_args has read vLLM's
    --speculative-config (--speculative-model) into them yet; ("", "") without a drafter."""
    from ridgeline.engine_spec import vllm_speculative_config, vllm_speculative_model

    spec = None
    if getattr(args, "speculative_config", None) is not None:
        spec = vllm_speculative_config(args.speculative_config)
    elif getattr(args, "speculative_model", None) is not None:
        spec = vllm_speculative_model(args.speculative_model,
                                      getattr(args, "num_speculative_tokens", None),
                                      getattr(args, "ngram_prompt_lookup_max", None),
                                      getattr(args, "ngram_prompt_lookup_min", None))
    if spec is not None:
        return spec.method, spec.algorithm
    if not getattr(args, "spec_tokens", 0):
        return "", ""
    return (getattr(args, "spec_method", None) or "eagle",
            getattr(args, "spec_algorithm", "") or "")


def chunked_prefill_asked(args: argparse.Namespace) -> bool:
    """Whether TensorRT-LLM's enable_chunked_prefill is on: --enable_chunked_prefill (or
    --enable-chunked-prefill, vLLM's spelling of its own flag, which its V1 engine ignores),
    or ``enable_chunked_prefill: true`` in --extra_llm_api_options (cli_config_file.py)."""
    from ridgeline.engines import engine_id

    asked = getattr(args, "engine", None)
    return bool(getattr(args, "launch_flag_enable_chunked_prefill", None)) \
        and isinstance(asked, str) and engine_id(asked) == "trtllm"


def executor_backend(args: argparse.Namespace) -> str | None:
    """vLLM's --distributed-executor-backend as given on a pasted launch line (launch_flags.json
    reads it for vLLM: ray has no async scheduling on some releases), else None."""
    value = getattr(args, "launch_flag_distributed_executor_backend", None)
    return str(value) if value is not None else None


def llamacpp_n_batch_asked(args: argparse.Namespace) -> int | None:
    """-b (--batch-size) where given, refused for an engine that is not llama.cpp."""
    n_batch = getattr(args, "n_batch", None)
    engine = str(getattr(args, "engine", None) or "vllm")
    if n_batch is not None and not all(e.strip().startswith("llama.cpp")
                                       for e in engine.split(",")):
        raise InputError(f"-b (--batch-size) is llama.cpp's logical batch; {engine} takes its "
                         "step's tokens as --max-num-batched-tokens")
    return n_batch


def engine_settings(args: argparse.Namespace) -> Any:
    from ridgeline.launch_flags import kv_connector_given, kv_events_given
    from ridgeline.memory import EngineSettings

    return EngineSettings(
        gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
        n_batch=llamacpp_n_batch_asked(args), block_size=args.block_size,
        enforce_eager=args.enforce_eager,
        usage=args.usage or "serve",
        engine_version=getattr(args, "engine_version", None),
        async_scheduling=not getattr(args, "no_async_scheduling", False),
        async_scheduling_given=getattr(args, "async_scheduling", False),
        distributed_executor_backend=executor_backend(args),
        ray_v2_executor=getattr(args, "vllm_use_ray_v2_executor_backend", None),
        overlap_schedule=not getattr(args, "disable_overlap_schedule", False),
        overlap_scheduler=not getattr(args, "disable_overlap_scheduler", False),
        enable_chunked_prefill=chunked_prefill_asked(args),
        no_chunked_prefill=getattr(args, "no_enable_chunked_prefill", False),
        extensible_kv_cache=getattr(args, "extensible_kv_cache", None),
        disable_hybrid_kv_cache_manager=getattr(args, "disable_hybrid_kv_cache_manager", None),
        allow_chunked_local_attn_hybrid=getattr(
            args, "vllm_allow_chunked_local_attn_with_hybrid_kv_cache", None),
        kv_connector=kv_connector_given(args), kv_events=kv_events_given(args),
        prefix_caching=getattr(args, "prefix_caching", None),
        speculative_decoding=bool(getattr(args, "spec_tokens", 0)),
        draft_mtp=drafts_with_mtp(args), drafter=drafter(args),
        language_model_only=getattr(args, "language_model_only", False),
        mm_limits=mm_limits(args),
        enable_multimodal=getattr(args, "enable_multimodal", False),
        sglang_vlm_cache_size_mb=getattr(args, "sglang_vlm_cache_size_mb", None),
        mm_feature_transport=getattr(args, "mm_feature_transport", None),
        sglang_mm_feature_cache_mb=getattr(args, "sglang_mm_feature_cache_mb", None),
        mm_preprocess_cache_size_mb=getattr(args, "mm_preprocess_cache_size_mb", None),
        swa_full_tokens_ratio=getattr(args, "swa_full_tokens_ratio", None),
        backend=getattr(args, "backend", None),
        warm_compile_cache=getattr(args, "warm_compile_cache", False),
        kv_cache_memory_bytes=getattr(args, "kv_cache_memory_bytes", None),
        max_total_tokens=getattr(args, "max_total_tokens", None),
        max_mamba_cache_size=getattr(args, "max_mamba_cache_size", None),
        mamba_ssm_dtype=getattr(args, "mamba_ssm_dtype", None),
        max_cudagraph_capture_size=getattr(args, "max_cudagraph_capture_size", None),
        cudagraph_capture_sizes=getattr(args, "cudagraph_capture_sizes", None),
        cudagraph_mode=getattr(args, "cudagraph_mode", None),
        torch_compile=getattr(args, "torch_compile", None),
        stock_torch_compile=bool(getattr(args, "stock_torch_compile", False)),
        lora=lora_settings(args), eplb=eplb_settings(args),
        cache_transceiver=cache_transceiver(args))
