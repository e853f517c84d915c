"""How each engine schedules, by release, where the simulator follows it: vLLM's
--long-prefill-token-threshold, V1's one queue of free and cached blocks, vLLM's async
scheduling and SGLang's overlap scheduler, and the V0 scheduling it does not model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ridgeline.errors import InputError

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.memory import EngineSettings
    from ridgeline.vllm_memory import VLLMAccounting

# --long-prefill-token-threshold came with V0's concurrent partial prefills (vLLM PR #10235,
# merged in February 2025 after v0.7.2 was cut): v0.7.3 is the first release that parses it
LONG_PREFILL_FLAG_FROM = (0, 7, 3)
# V1's scheduler first cut a request's tokens to it in v0.8.3 (PR #15419); 0.8.0-0.8.2 fell
# back to the V0 engine when it was set, where it marks the prompts --max-long-partial-prefills
# holds back (V0's partial-prefill scheduler, which the simulator does not model)
LONG_PREFILL_V1_FROM = (0, 8, 3)
# vLLM V1 first waived --long-prefill-token-threshold for a request alone (running or
# waiting) in v0.31.0: "nobody to starve" (v1/core/sched/scheduler.py; 0.30.0 caps it too)
LONE_PREFILL_UNCAPPED_FROM = (0, 31)
# from v0.27 SchedulerConfig refuses a threshold above max_model_len whatever else is set
# (read in 0.27.1; 0.26.0 checks it only with --max-num-partial-prefills above 1)
THRESHOLD_CHECKED_FROM = (0, 27)


def long_prefill_threshold(engine: str, version: str | None, threshold: int | None,
                           max_model_len: int) -> tuple[int, bool]:
    """vLLM's --long-prefill-token-threshold as the simulator runs it: (the most tokens a
    request takes a step, 0 for no cap; whether a request alone is held to it). Its V1
    scheduler cuts each request's tokens to it from v0.8.3 (v1/core/sched/scheduler.py), and
    from v0.31 lets a request alone take the whole budget.
    InputError for another engine, before v0.7.3 (no such flag), where vLLM runs V0 with it
    (0.7.3-0.8.2, or VLLM_USE_V1=0: partial prefills the simulator does not model), or where
    vLLM refuses it (v0.27+: above max_model_len)."""
    if threshold is None:
        return 0, False
    if engine != "vllm":
        raise InputError(f"--long-prefill-token-threshold is vLLM's; {engine} has no such "
                         "setting")
    from ridgeline.vllm_memory import parse_version, vllm_accounting

    accounting = vllm_accounting(version)
    wanted = parse_version(accounting.version)
    if wanted < LONG_PREFILL_FLAG_FROM:
        raise InputError(f"vLLM {accounting.version} has no --long-prefill-token-threshold "
                         "(it came in v0.7.3, PR #10235) and refuses to start with it")
    if accounting.engine == "V0" or wanted < LONG_PREFILL_V1_FROM:
        raise InputError(f"vLLM {accounting.version} runs its V0 engine with "
                         "--long-prefill-token-threshold, where the flag marks the long prompts "
                         "--max-long-partial-prefills holds back (V0's partial-prefill "
                         "scheduler, which the simulator does not model); V1 caps each "
                         "request's tokens a step at it from v0.8.3 (give --engine-version "
                         "0.8.3 or later)")
    if threshold > max_model_len and wanted >= THRESHOLD_CHECKED_FROM:
        raise InputError(f"--long-prefill-token-threshold ({threshold:,}) cannot be above "
                         f"max_model_len ({max_model_len:,}): vLLM refuses to start")
    return threshold, wanted < LONE_PREFILL_UNCAPPED_FROM


def v1_free_queue(engine: str, version: str | None) -> bool:
    """Whether free and cached blocks leave one least-recently-used queue: vLLM's V1 block
    pool (an idle cached prefix is evicted in turn, free blocks or not); V0's allocator, as
    the other engines', hands out never-cached blocks before it evicts a cached one."""
    if engine != "vllm":
        return False
    from ridgeline.vllm_memory import vllm_accounting

    return vllm_accounting(version).engine != "V0"


def overlapped_scheduling(engine: str, settings: object, pipeline_parallel_size: int,
                          spec_tokens: int = 0, spec_method: str = "eagle",
                          runner: str = "", mamba_cached: bool = False) -> bool:
    """Whether the engine forms its next batch while one runs (engines.json, with sources):
    vLLM from v0.14 unless --no-async-scheduling, with a drafter as its release and ``runner``
    allow (``vllm_async_with_drafter``; --async-scheduling given keeps a draft model from
    v0.16), and not under --distributed-executor-backend ray on 0.14-0.20 (nor on 0.21-0.32
    with VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0: ``vllm_executor_async_from``), nor on 0.16 where
    ``mamba_cached`` (prefix caching keeps recurrent state: ``vllm_mamba_prefix_async_off``);
    SGLang from v0.4.0 unless --disable-overlap-schedule, and never with speculative decoding;
    TensorRT-LLM's PyTorch backend (from v0.20, the newest modelled) unless
    --disable-overlap-scheduler, speculative decoding with an EAGLE/MTP drafter or a draft
    model but not n-gram, and never its TensorRT engine backend.
    None overlaps under pipeline parallelism here (vLLM's and TensorRT-LLM's pipelines keep
    their own micro-batches in flight, sim/pipeline.py; SGLang turns overlap off; vLLM's
    Model Runner V2 keeps one batch more, not modelled: vllm.async_scheduling)."""
    from ridgeline.datafiles import engine_defaults
    from ridgeline.memory import EngineSettings

    s = settings if isinstance(settings, EngineSettings) else EngineSettings()
    if pipeline_parallel_size > 1:
        return False
    if engine == "vllm":
        from ridgeline.vllm_memory import parse_version, vllm_accounting

        rule = engine_defaults("vllm")["async_scheduling"]
        version = vllm_accounting(s.engine_version).version
        return s.async_scheduling and not mamba_cached and parse_version(
            version) >= parse_version(rule["default_from"]) and not vllm_executor_async_from(
                version, s.distributed_executor_backend, s.ray_v2_executor) and (
                not spec_tokens or vllm_async_with_drafter(
                    version, spec_method, runner, s.async_scheduling_given))
    if engine == "sglang":
        from ridgeline.sglang_memory import sglang_release

        rule = engine_defaults("sglang")["overlap_schedule"]
        old = s.engine_version is not None and \
            sglang_release(s.engine_version) < sglang_release(rule["default_from"])
        return s.overlap_schedule and not old and (
            not spec_tokens or rule["with_speculative_decoding"])
    if engine == "trtllm":
        from ridgeline.trtllm_memory import default_backend

        rule = engine_defaults("trtllm")["overlap_scheduler"]
        return s.overlap_scheduler and (s.backend or default_backend()) in rule["backends"] \
            and (not spec_tokens or spec_method in rule["spec_methods"])
    return False


def vllm_async_with_drafter(version: str, spec_method: str, runner: str = "",
                            explicit: bool = False) -> bool:
    """Whether vLLM ``version`` keeps async scheduling on with a --spec-method
    ``spec_method`` drafter on ``runner`` ("MRV2", "V1"; "" read as V1), as
    engines.json vllm.async_scheduling dates it. Its default (``explicit`` False): an EAGLE/MTP
    head from v0.14, a draft model from v0.28, on Model Runner V2 any drafter from v0.33
    (ngram too), and any drafter on any runner from v0.34; ngram on 0.32: off; on 0.33's
    MRV2: on. --async-scheduling given (``explicit``) runs a draft model from v0.16
    (explicit_spec_methods_from): on 0.20 the default turns it off, the flag keeps it on;
    where it is False vLLM raises instead (``vllm_async_conflict``)."""
    from ridgeline.datafiles import engine_defaults
    from ridgeline.vllm_memory import parse_version

    rule = engine_defaults("vllm")["async_scheduling"]
    release = parse_version(version)
    if release >= parse_version(rule["any_drafter_from"]) or (
            runner == "MRV2" and release >= parse_version(rule["v1_runner_only_from"])):
        return True
    table = rule["explicit_spec_methods_from" if explicit else "spec_methods_from"]
    since = table.get(spec_method)
    return since is not None and release >= parse_version(since)


def vllm_async_conflict(version: str, spec_method: str, runner: str,
                        pipeline_parallel_size: int, executor_backend: str | None = None,
                        ray_v2: bool | None = None) -> str:
    """What vLLM ``version`` raises on where --async-scheduling is given explicitly beside a
    --spec-method ``spec_method`` drafter ("" none), a pipeline, or an executor without async
    scheduling, on ``runner`` ("MRV2", "V1"), as engines.json vllm.async_scheduling records it
    (explicit_spec_methods_from, explicit_pipeline_refused, executors_without_async), or "":
    ngram on 0.32 and a draft model on 0.15 are refused, a draft model on 0.16 runs; a
    pipeline of 2 on 0.14, or on 0.33's V1 runner, is refused; so is ray on 0.20, not on 0.21."""
    from ridgeline.datafiles import engine_defaults
    from ridgeline.vllm_memory import in_releases

    if vllm_executor_async_from(version, executor_backend, ray_v2):
        return f"--distributed-executor-backend {executor_backend}" + (
            f" under VLLM_USE_RAY_V2_EXECUTOR_BACKEND={int(ray_v2)}" if ray_v2 is not None
            and not vllm_executor_async_from(version, executor_backend) else "")

    on_runner = f" on its {runner} model runner" if runner == "V1" and version_from(
        version, "v1_runner_only_from") else ""
    if spec_method and not vllm_async_with_drafter(version, spec_method, runner, explicit=True):
        return f"--spec-method {spec_method}{on_runner}"
    rule = engine_defaults("vllm")["async_scheduling"]
    if pipeline_parallel_size > 1 and any(
            in_releases(version, r) and r["runner"] in ("", runner)
            for r in rule["explicit_pipeline_refused"]):
        return f"pipeline parallelism (--pipeline-parallel-size {pipeline_parallel_size})" \
            + on_runner
    return ""


def vllm_executor_async_from(version: str, executor_backend: str | None,
                             ray_v2: bool | None = None) -> str:
    """The first release whose ``executor_backend`` (vLLM's --distributed-executor-backend;
    None: its own choice, mp or uni on one node) has async scheduling, where vLLM
    ``version``'s has none, as engines.json vllm.async_scheduling.executors_without_async
    dates it, else "": ray on 0.18 gives "0.21" (RayDistributedExecutor until RayExecutorV2
    became ray's default), ray on 0.21 and mp on any release "". ``ray_v2``: the
    VLLM_USE_RAY_V2_EXECUTOR_BACKEND the server starts with (None unset), which 0.20-0.32
    read (``ray_v2_env``): 1 on 0.20 gives "", 0 on 0.25 "0.33" (the old executor again)."""
    from ridgeline.datafiles import engine_defaults
    from ridgeline.vllm_memory import in_releases

    rule = engine_defaults("vllm")["async_scheduling"]
    until = next((r["until"] for r in rule["executors_without_async"]
                  if r["backend"] == executor_backend and in_releases(version, r)), "")
    env = rule["ray_v2_env"]
    if executor_backend != "ray" or ray_v2 is None or not in_releases(version, env):
        return until
    return "" if ray_v2 else until or str(env["until"])


def ray_v2_env_caution(version: str, executor_backend: str | None,
                       ray_v2: bool | None) -> str:
    """What to say where VLLM_USE_RAY_V2_EXECUTOR_BACKEND (``ray_v2``, as
    --vllm-use-ray-v2-executor-backend gives it) changes nothing priced, else "": vLLM
    ``version`` outside 0.20-0.32 does not read it (engines.json ray_v2_env), and no
    release reads it without --distributed-executor-backend ray."""
    if ray_v2 is None:
        return ""
    from ridgeline.datafiles import engine_defaults
    from ridgeline.vllm_memory import in_releases

    env = engine_defaults("vllm")["async_scheduling"]["ray_v2_env"]
    if not in_releases(version, env):
        return (f"{env['name']}={int(ray_v2)} ignored: vLLM {version} does not read it "
                f"(vLLM {env['from']} reads it; {env['until']} dropped it)")
    if executor_backend != "ray":
        return (f"{env['name']}={int(ray_v2)} ignored: it picks the executor of "
                "--distributed-executor-backend ray alone")
    return ""


def vllm_mamba_prefix_async_off(dep: Deployment, s: EngineSettings) -> bool:
    """Whether vLLM at ``s``'s release has no async scheduling for ``dep``'s model because
    prefix caching keeps its Mamba or linear-attention state (mamba_cache_mode other than
    "none", vllm_hybrid.cache_mode), as engines.json vllm.async_scheduling
    .mamba_prefix_caching_refused dates it: 0.16 alone (its default turns async scheduling
    off, --async-scheduling raises); Qwen3-Next with --enable-prefix-caching on 0.16: True,
    on 0.15 or 0.17 False, and without prefix caching (0.16's default for a hybrid) False."""
    if dep.engine != "vllm":
        return False
    from ridgeline.datafiles import engine_defaults
    from ridgeline.vllm_hybrid import cache_mode
    from ridgeline.vllm_memory import in_releases, vllm_accounting

    version = vllm_accounting(s.engine_version).version
    rule = engine_defaults("vllm")["async_scheduling"]["mamba_prefix_caching_refused"]
    return in_releases(version, rule) and cache_mode(dep.model, s.prefix_caching,
                                                     version) != "none"


def version_from(version: str, key: str) -> bool:
    """Whether vLLM ``version`` is at or past engines.json vllm.async_scheduling's ``key``."""
    from ridgeline.datafiles import engine_defaults
    from ridgeline.vllm_memory import parse_version

    return parse_version(version) >= parse_version(
        engine_defaults("vllm")["async_scheduling"][key])


def vllm_async_problem(dep: Deployment, s: EngineSettings) -> str:
    """Why vLLM at EngineSettings ``s``'s release refuses --async-scheduling given beside
    ``s``'s drafter, its executor or Deployment ``dep``'s pipeline (``vllm_async_conflict``),
    or "": vLLM 0.32 raises ValueError at start-up beside an ngram drafter, 0.18 beside
    --distributed-executor-backend ray, where its default only turns async scheduling off;
    0.16 beside prefix caching of a hybrid's state (``vllm_mamba_prefix_async_off``)."""
    acc, method, runner = _vllm_run(dep, s)
    if vllm_mamba_prefix_async_off(dep, s):
        return (f"--async-scheduling with prefix caching of {dep.model.name}'s recurrent state "
                f"(mamba_cache_mode {_mode(dep, s)}): vLLM {acc.version} refuses the pair at "
                "start-up ('async scheduling is not compatible with prefix caching for Mamba "
                "models'; its default turns async scheduling off there instead): drop "
                "--async-scheduling or --enable-prefix-caching")
    conflict = vllm_async_conflict(acc.version, method, runner, dep.pipeline_parallel_size,
                                   s.distributed_executor_backend, s.ray_v2_executor)
    if not conflict:
        return ""
    default = "its default turns async scheduling off there instead" if version_from(
        acc.version, "default_from") else "async scheduling is opt-in there, off by default"
    return (f"--async-scheduling with {conflict}: vLLM {acc.version} refuses the pair at "
            f"start-up ({default}): drop --async-scheduling")


def vllm_opt_in_async_caution(s: EngineSettings) -> str:
    """What to say where --async-scheduling is given on a vLLM release that had it opt-in
    (v0.10.0 to v0.13: engines.json vllm.async_scheduling flag_from, default_from), or "":
    ridgeline models async scheduling from 0.14, its default, so ``--engine-version 0.11.2
    --async-scheduling`` (the 0.11.2 recipes' ``async-scheduling: true``) is priced as
    0.11.2 runs without it, one batch in flight, and says so."""
    if not s.async_scheduling_given:
        return ""
    from ridgeline.vllm_memory import vllm_accounting

    version = vllm_accounting(s.engine_version).version
    if version_from(version, "default_from") or not version_from(version, "flag_from"):
        return ""
    from ridgeline.datafiles import engine_defaults

    since = engine_defaults("vllm")["async_scheduling"]["default_from"]
    return (f"--async-scheduling on vLLM {version} (opt-in there; the default from v{since}) "
            f"is not priced before v{since}: priced synchronous, one batch in flight, so the "
            "CPU time it would hide behind each step is counted")


def vllm_async_caution(dep: Deployment, s: EngineSettings) -> str:
    """What to say where vLLM at EngineSettings ``s``'s release turns its default async
    scheduling off for ``s``'s drafter, with a warning (``vllm_async_default_off``), or "":
    on 0.32 with an ngram drafter the run is priced synchronous (--async-scheduling refused),
    on 0.20 with a draft model too (--async-scheduling keeps it on there), on 0.14-0.20
    under --distributed-executor-backend ray (``vllm_executor_async_from``: refused there too;
    0.21-0.32 too with VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0), and on 0.16 with prefix caching
    of a hybrid's recurrent state (``vllm_mamba_prefix_async_off``)."""
    if not s.async_scheduling or s.async_scheduling_given:
        return ""
    from ridgeline.vllm_memory import vllm_accounting

    version = vllm_accounting(s.engine_version).version
    backend = s.distributed_executor_backend
    until = vllm_executor_async_from(version, backend, s.ray_v2_executor)
    env = "" if vllm_executor_async_from(version, backend) \
        else f" under VLLM_USE_RAY_V2_EXECUTOR_BACKEND={int(bool(s.ray_v2_executor))}"
    if vllm_mamba_prefix_async_off(dep, s):
        return (f"vLLM {version} turns async scheduling off for prefix caching of "
                f"{dep.model.name}'s recurrent state (mamba_cache_mode {_mode(dep, s)}), with a "
                "warning (--async-scheduling makes it refuse to start): priced synchronous, "
                "one batch in flight")
    if version_from(version, "default_from") and until:
        return (f"vLLM {version} turns async scheduling off with --distributed-executor-backend "
                f"{backend}{env}, whose executor has none before {until}, with a warning "
                "(--async-scheduling makes it refuse to start): priced synchronous, one batch "
                "in flight")
    if s.drafter is None:
        return ""
    acc, method, runner = _vllm_run(dep, s)
    off = vllm_async_default_off(acc.version, method, runner)
    if not off:
        return ""
    given = "keeps it on" if vllm_async_with_drafter(acc.version, method, runner, True) \
        else "makes it refuse to start"
    return (f"vLLM {acc.version} turns async scheduling off with {off}, with a warning "
            f"(--async-scheduling {given}): priced synchronous, one batch in flight")


def _mode(dep: Deployment, s: EngineSettings) -> str:
    """The mamba_cache_mode vLLM at ``s``'s release runs ``dep``'s model in, quoted."""
    from ridgeline.vllm_hybrid import cache_mode
    from ridgeline.vllm_memory import vllm_accounting

    return repr(cache_mode(dep.model, s.prefix_caching, vllm_accounting(s.engine_version).version))


def _vllm_run(dep: Deployment, s: EngineSettings) -> tuple[VLLMAccounting, str, str]:
    """vLLM's accounting for ``s``'s release, ``s``'s drafter method ("" none), and the
    model runner ``dep`` gets with it (vllm_memory.model_runner)."""
    from ridgeline.vllm_memory import model_runner, vllm_accounting

    acc = vllm_accounting(s.engine_version)
    method = s.drafter.method if s.drafter is not None else ""
    algorithm = s.drafter.algorithm if s.drafter is not None else ""
    return acc, method, model_runner(dep, acc, method, algorithm, s.stock_torch_compile)


def vllm_async_default_off(version: str, spec_method: str, runner: str) -> str:
    """Where vLLM ``version``'s default turns async scheduling off for a --spec-method
    ``spec_method`` drafter on ``runner`` (it warns 'Async scheduling not supported with
    ngram-based speculative decoding and will be disabled'), the drafter as its flag, else "":
    "--spec-method ngram" on 0.32, "" on 0.34 or before 0.14 (synchronous anyway)."""
    if not spec_method or not version_from(version, "default_from") \
            or vllm_async_with_drafter(version, spec_method, runner):
        return ""
    return f"--spec-method {spec_method}"


def v0_scheduling_caution(engine: str, version: str | None) -> str:
    """What to say where the vLLM ``version`` asked schedules with its V0 engine, which the
    simulator does not model, or ""."""
    if engine != "vllm" or not version:
        return ""
    from ridgeline.vllm_memory import vllm_accounting

    if vllm_accounting(version).engine != "V0":
        return ""
    return (f"vLLM {version} schedules with its V0 engine (prompts before decodes; V1 became "
            "the default in 0.8.0): the pool is sized by its rules, the steps are scheduled by "
            "V1's (one token budget, running requests first in admission order)")
