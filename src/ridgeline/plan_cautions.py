"""What plan says of a candidate's own deployment that its price takes on trust: tensor
parallelism across nodes (every all-reduce on the network), a TTFT near its SLO on a card
whose prompt speed borrows another card group's compute share, and a decode batch past the
largest the profile was fitted on for the card's group."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ridgeline.candidate import Candidate, candidate_deployment
from ridgeline.chunked_prefill import refuses_whole_prompt
from ridgeline.datafiles import engine_defaults
from ridgeline.deployment import Deployment
from ridgeline.engine_names import engine_name
from ridgeline.engines import MIN_GROUP_ROWS, EngineProfile, accelerator_group
from ridgeline.hardware import Accelerator, engine_devices, resolve_accelerator
from ridgeline.memory import EngineSettings
from ridgeline.model import ModelSpec
from ridgeline.parallel import cross_node_caution
from ridgeline.serving_load import Load, Slo
from ridgeline.units import fmt_latency, fmt_latency_limit

# How much slower a card's prompts may run than priced where its compute share is another
# group's. An MI300X's dense bf16 peak is 1.32x an H100's (1,307 against 989 TFLOP/s), so the
# H100s' share prices its prompts 1.32x faster: `prefill llama-3.1-8b --gpu h100,mi300x
# --prompt-len 8192` read 251.8 ms against 192.0 (1.31x), where vLLM's ROCm GEMMs and
# attention reach a smaller share of peak and run prefill about even with an H100's. No
# Instinct prompt row in the profile's data says which; 1.3 spans the gap. (The caution names
# the row's own card and engine: the gap was seen on that one pair.)
PROMPT_SHARE_UNCERTAINTY = 1.3
# the serving engines as their projects write them, for the text


def borrowed_compute_group(profile: EngineProfile, acc: Accelerator) -> str:
    """The card group whose fitted compute share prices ``acc``'s prompts, where the card's
    own group has rows enough to count as calibrated (MIN_GROUP_ROWS, so no other caution
    says so) but no compute multiplier of its own, and is not the group the share was fitted
    on (the most rows); else "". The bundled profiles: "nvidia-datacenter" for an MI300X
    (10 Instinct rows, every prompt row NVIDIA's), "" for an H100."""
    group = profile.stand_in_group(acc)
    rows = profile.fitted_groups
    if group in profile.group_compute or rows.get(accelerator_group(acc), 0) < MIN_GROUP_ROWS:
        return ""
    others = {g: n for g, n in rows.items() if g != group}
    if not others:
        return ""
    reference = max(others, key=lambda g: (others[g], g))
    return reference if others[reference] >= rows.get(group, 0) else ""


def ttft_estimate_s(c: Candidate) -> tuple[float, str]:
    """(the TTFT the candidate is judged on, what it is): its simulated one at the SLO's
    percentile, else the analytic floor, a lower bound (a prompt's prefill unloaded, and for
    split pools its KV hand-off)."""
    if c.verified and c.sim_ttft_s is not None:
        return c.sim_ttft_s, "simulated"
    return c.ttft_floor_s, "analytic floor"


def prompt_share_caution(c: Candidate, profile: EngineProfile, slo: Slo, engine: str) -> str:
    """Where ``c`` runs on a card whose prompt speed borrows another group's compute share
    (``borrowed_compute_group``) and its TTFT × PROMPT_SHARE_UNCERTAINTY passes the SLO, what
    to say of it, in its own card's and ``engine``'s names; else "". One MI300X at a simulated
    p90 TTFT of 1,700 ms against a 2 s SLO: 2,210 ms at 1.3x, past it."""
    acc = resolve_accelerator(c.accelerator)
    reference = borrowed_compute_group(profile, acc)
    ttft_s, how = ttft_estimate_s(c)
    if not reference or ttft_s * PROMPT_SHARE_UNCERTAINTY <= slo.ttft_s:
        return ""
    name = f"{how} p{slo.percentile:.10g} TTFT" if how == "simulated" else f"TTFT's {how}"
    return (f"{acc.id}'s prompt speed borrows the compute share the {profile.engine} profile "
            f"fitted on {reference} cards (none of its own for {accelerator_group(acc)}), "
            f"which {engine_name(engine)} on the {acc.name} may not reach; at "
            f"{PROMPT_SHARE_UNCERTAINTY:g}x its {name} of {fmt_latency(ttft_s, ',.0f')} would "
            f"be {fmt_latency(ttft_s * PROMPT_SHARE_UNCERTAINTY, ',.0f')}, past the "
            f"{fmt_latency_limit(slo.ttft_s)} SLO (a prompt measured on the card, `ridgeline "
            "calibrate`, settles it)")


def candidate_cautions(c: Candidate, engine: str, profile: EngineProfile,
                       slo: Slo, model: ModelSpec,
                       engine_version: str | None = None) -> tuple[str, ...]:
    """What to say of ``c``'s deployment itself: TP across nodes (parallel.cross_node_caution,
    as fit, decode, prefill and simulate say it), a TTFT within the borrowed compute share's
    uncertainty of the SLO (``prompt_share_caution``), a decode batch past the largest the
    profile was fitted on for its card group (EngineProfile.batch_range_caution), the
    step-cost model's record on its card (track_record_caution, as simulate says it), and a
    launch length the engine trims to its pool (``launch_trim_caution``)."""
    from ridgeline.track_record import track_record_caution

    acc = resolve_accelerator(c.accelerator)
    devices = engine_devices(engine, acc)  # vLLM's TP counts an MI250's dies
    dep = candidate_deployment(model, c, engine)  # no version: nothing here reads the state
    return tuple(why for why in (cross_node_caution(c.engine_tp(engine), c.pp, acc, engine,
                                                    devices=devices,
                                                    num_layers=model.num_layers),
                                 prompt_share_caution(c, profile, slo, engine),
                                 profile.batch_range_caution(acc, c.batch),
                                 track_record_caution(dep, "prefill", profile),
                                 track_record_caution(dep, "decode", profile),
                                 launch_trim_caution(c, engine, model, engine_version),
                                 split_extensible_caution(c, engine, engine_version)) if why)


def split_extensible_caution(c: Candidate, engine: str, engine_version: str | None) -> str:
    """What a vLLM split on NVIDIA cards says of its pools' sizing where the release has the
    extensible KV cache (v0.34): its NixlConnector keeps that off on a host without an IMEX
    channel, which ridgeline assumes (vllm_extensible.connector_keeps_off), so the pools are
    sized from the profile at the release's default fraction, as the launch lines write it;
    on a host with one the cache stays on, its pool measured within the same fraction. ""
    elsewhere (on AMD the connector always keeps it off: nothing depends on the host)."""
    from ridgeline.disaggregated import split_connector
    from ridgeline.vllm_extensible import connector_keeps_off, connector_unsupported
    from ridgeline.vllm_memory import vllm_accounting

    vendor = resolve_accelerator(c.accelerator).vendor
    connector = split_connector(engine, vendor)
    if not c.disaggregated or not connector or connector_unsupported(connector, vendor) \
            or not connector_keeps_off(connector, vendor):
        return ""
    acc = vllm_accounting(engine_version)
    if not acc.extensible_kv_cache:
        return ""
    fraction = f"{acc.gpu_memory_utilization:g}"
    return (f"pools sized with vLLM {acc.version}'s extensible KV cache off, at {fraction}, as "
            f"its {connector} leaves it on a host without an IMEX channel (most; with one it "
            f"stays on, measured within the same {fraction})")


def launch_trim_caution(c: Candidate, engine: str, model: ModelSpec,
                        engine_version: str | None = None) -> str:
    """Where ``c``'s launch line starts SGLang or TensorRT-LLM at a context (--context-length,
    --max_seq_len: ``c.max_model_len``) longer than its KV pool holds, what the engine trims a
    request to (capacity.start_trim_caution, as simulate, decode and prefill say it); "" for
    vLLM, which refuses to start there instead, and for a split's pools. The search launches
    no longer than the pool holds (replica_sizing.starts_at, fit's verdict), so this guards a
    candidate built otherwise: DeepSeek-V3 on 4 x B200 under SGLang at chunked_prefill_size
    2048 started at 163,840 is capped at the 141,088 tokens its pool holds."""
    from ridgeline.capacity import start_trim_caution

    if engine not in ("sglang", "trtllm") or c.disaggregated or not c.max_model_len:
        return ""
    settings = c.engine_settings(engine_version)
    dep = candidate_deployment(model, c, engine, engine_version)
    return start_trim_caution(dep, replace(settings, max_model_len=c.max_model_len),
                              c.max_model_len)


def streamed_load_note(c: Candidate | None, engine: str, model: ModelSpec,
                       engine_version: str | None = None) -> str:
    """Where the winner ``c``, planned for the newest release (no --engine-version), serves
    a 16-bit checkpoint with --quantization METHOD that loads only because that release
    quantizes each weight as it loads (vLLM from 0.16 for fp8: load_peak.py), the release
    its launch line needs: an earlier one loads the 16-bit weights whole first and runs out
    of memory. Llama-3.1-70B
    in fp8 on one H100: 131.4 GiB at 16 bits against vLLM's 72.8 GiB. "" where the 16-bit
    weights fit too, or no such method serves it."""
    from ridgeline.load_peak import online_method, sixteen_bit_bytes, streams_from
    from ridgeline.memory import kv_pool
    from ridgeline.units import GIB

    if c is None or c.disaggregated or engine_version is not None:  # a release named
        return ""
    dep = candidate_deployment(model, c, engine)
    method = online_method(dep)
    if method is None or not streams_from(method, engine):
        return ""
    since = streams_from(method, engine)
    pool = kv_pool(dep, c.engine_settings())
    peak = sixteen_bit_bytes(dep, pool.weight_bytes, pool.stage)
    if peak <= pool.load_budget_bytes:
        return ""
    name = engine_name(engine)
    return (f"the launch's --quantization {method.method} loads only on {name} {since} or later, "
            f"which quantizes each weight as it loads; an earlier release loads "
            f"{model.name}'s 16-bit weights first ({peak / GIB:,.1f} GiB per GPU, more than "
            f"the {pool.load_budget_bytes / GIB:,.1f} GiB it loads into) and runs out of "
            "memory: give --engine-version to plan for an earlier one")


def data_parallel_winner_cautions(c: Candidate | None, engine: str,
                                  model: ModelSpec) -> tuple[str, ...]:
    """What a data-parallel attention winner's check assumed, as its printed simulate check
    says it (data_parallel_cautions of a stepping run, its arrivals dealt as ``engine`` deals
    them: a MoE's exchange between the ranks priced as the engine's default backend
    included), or ()."""
    if c is None or c.data_parallel == 1:
        return ()
    from ridgeline.data_parallel import data_parallel_cautions
    from ridgeline.sim.data_parallel import dispatch_label

    # no version: these sentences read the layout, never the state dtype
    return data_parallel_cautions(candidate_deployment(model, c, engine), True,
                                  dispatch_label(engine))


def chunked_prefill_note(win: Candidate | None, engine: str, load: Load) -> str:
    """Where the winner's load holds prompts longer than the step budget its launch line
    prints (TensorRT-LLM's --max_num_tokens, a context run whole by default): that its check
    chunked them, and that the line's YAML turns enable_chunked_prefill on to run them so
    (``Candidate.enable_chunked_prefill``); "" elsewhere."""
    if win is None or not win.enable_chunked_prefill:
        return ""
    d = engine_defaults(engine)
    budget = win.max_num_batched_tokens or int(d["max_num_tokens"])
    longest = load.longest_prompt(win.max_model_len) if win.max_model_len else 0
    reach = f"the load's prompts reach {longest:,} tokens, past" if longest > budget \
        else "some of the load's prompts are longer than"
    return (f"{reach} max_num_tokens {budget:,}: TensorRT-LLM runs a context "
            "whole unless enable_chunked_prefill is on, so the check ran them in chunks and "
            f"the trtllm-serve line's {d['cli']['config_file']} sets enable_chunked_prefill: "
            "true")


def mla_unchunked_caution(win: Candidate | None, engine: str, load: Load,
                          model: ModelSpec) -> str:
    """Where the winner's load holds prompts longer than its TensorRT-LLM step budget and the
    engine turns enable_chunked_prefill off again for its MLA model on its card
    (chunked_prefill.trtllm_mla_unchunked: DeepSeek-V3 on an L40S), so that the check, which
    chunked them, ran prompts the engine would not: what to say; "" elsewhere."""
    from ridgeline.chunked_prefill import trtllm_mla_unchunked

    # no version: TensorRT-LLM takes none (with_state_settings keeps vLLM's alone)
    if win is None or engine != "trtllm" or not win.max_model_len \
            or not trtllm_mla_unchunked(candidate_deployment(model, win, engine)):
        return ""
    budget = win.max_num_batched_tokens or int(engine_defaults(engine)["max_num_tokens"])
    longest = load.longest_prompt(win.max_model_len)
    if longest <= budget and not win.sim_over_budget:
        return ""
    # the check's draws (sim_over_budget) may hold a prompt longer than every one of the
    # sizing's samples (longest_prompt), which then is no longer than the budget: said as
    # chunked_prefill_note says it, not as the samples' longest reaching past it
    reach = f"the load's prompts reach {longest:,} tokens, past" if longest > budget \
        else "some of the load's prompts are longer than"
    return (f"{reach} max_num_tokens {budget:,}, "
            "and TensorRT-LLM turns enable_chunked_prefill off again for an MLA model outside "
            f"SM 90/100/103/120 ({model.name} on {win.accelerator}): it would not run them, "
            "which the check ran in chunks (a --max_num_tokens past the longest prompt runs them whole)")


def prompt_cap_note(engine: str, load: Load, c: Candidate, budget: int | None) -> str:
    """Where ``c`` launches TensorRT-LLM with enable_chunked_prefill off (as its check ran)
    and a --max_seq_len past its --max_num_tokens (``budget``; None: the default 8,192): that
    trtllm-serve refuses a prompt longer than max_num_tokens (llm.py _check_arguments, HTTP
    400 'should not exceed max_num_tokens'), that this load has none such (plan checks a
    load with one chunked, and its line turns chunked prefill on), and the YAML key that
    serves them; "" elsewhere. Qwen3-Next on one H100: --max_num_tokens 2,048 under
    --max_seq_len 92,160, the load's longest prompt 1,000."""
    if engine != "trtllm" or c.enable_chunked_prefill or not c.max_model_len:
        return ""
    budget = budget or int(engine_defaults("trtllm")["max_num_tokens"])
    if not refuses_whole_prompt(c.max_model_len, budget, chunked=False):  # none it admits
        return ""
    longest = load.longest_prompt(c.max_model_len)
    return (f"--max_num_tokens {budget:,} with enable_chunked_prefill off, as checked: "
            f"trtllm-serve refuses a prompt longer than {budget:,} tokens under "
            f"--max_seq_len {c.max_model_len:,} (HTTP 400, 'should not exceed "
            f"max_num_tokens'); this load's longest prompt is {longest:,}, so it refuses "
            "none; enable_chunked_prefill: true in the YAML serves longer ones in chunks, "
            "not checked here")


# How far past the TPOT SLO the winner's simulated ITL must reach before plan says so unasked:
# TPOT is each request's mean gap, so a p95 TPOT of 46 ms can hide gaps of 212 ms (a decode
# step that waits out another request's 2,000-token prompt; Llama-3.1-70B on MI300Xs at 20
# req/s). Twice the SLO is a stall a streaming reader sees, not the mean's noise.
ITL_STALL_FACTOR = 2.0


def itl_stall_note(win: Candidate | None, slo: Slo) -> str:
    """Where no ITL SLO was given and the winner's simulated ITL at the SLO's percentile
    (``Candidate.sim_itl_s``, simulate's ITL row at that percentile) is at least
    ``ITL_STALL_FACTOR`` × the TPOT SLO: that streaming stalls while TPOT passes (p95 ITL
    211.6 ms against a 50 ms TPOT SLO, 4.2×); "" elsewhere."""
    if win is None or not win.verified or slo.itl_s is not None or win.sim_itl_s is None \
            or not win.sim_itl_s >= ITL_STALL_FACTOR * slo.tpot_s:  # NaN: 1-token outputs
        return ""
    return (f"the winner's simulated p{slo.percentile:g} ITL is {fmt_latency(win.sim_itl_s)}, "
            f"{win.sim_itl_s / slo.tpot_s:.1f}× the {fmt_latency_limit(slo.tpot_s)} TPOT SLO: "
            "TPOT is "
            "each request's mean gap between tokens, ITL each gap a streaming user waits "
            "(here a decode step that shares its batch with other requests' prompts); "
            "--slo-itl-ms sizes for it, and the check command's simulate prints its ITL row")



def extensible_kv_caution(c: Candidate, engine: str, model: ModelSpec, load: Load,
                          engine_version: str | None = None) -> str:
    """``extensible_shortfall_caution`` of ``c``'s replica as its launch and check start it,
    against the batch the plan counts on (every lane's), for the load's mean request; "" for
    another engine or a split's pools. Where the row launches short of the model's context
    (its pool holds no longer request), the caution says the length is the row's own, so that
    it reads beside another row's longer launch line. Llama-3.1-70B on one H100 at fp8, KV
    fp8, --max-model-len 34,560: 0.33's rules give 1.64 GiB per GPU and would not start at
    that length, against the batch of 17 the plan counts on."""
    from ridgeline.replica_sizing import launch_length, model_context

    if engine != "vllm" or c.disaggregated or not c.max_model_len:
        return ""
    dep = candidate_deployment(model, c, engine, engine_version)
    settings = replace(c.engine_settings(engine_version), max_model_len=c.max_model_len)
    mean_in, mean_out = load.means()
    request = max(1, round(mean_in)) + max(1, round(mean_out))  # as the sizing counts them
    context = model_context(dep)

    def own() -> str:  # read only where the caution is said: launch_length searches
        return f"this row's own --max-model-len: the longest its pool starts at, short of " \
            f"{model.name}'s {context:,}" if c.max_model_len < context \
            and launch_length(dep, settings) == c.max_model_len else ""

    return extensible_shortfall_caution(dep, settings, request,
                                        c.batch * c.pp * c.data_parallel,
                                        "a replica's batch counts on here", own)


def release_before(version: str) -> str:
    """The minor release before ``version``: "0.33" before "0.34"."""
    major, minor = (int(part) for part in version.split(".")[:2])
    return f"{major}.{minor - 1}"


NEEDS_RELEASE = "so it needs vLLM {} or later"  # the caution's words a launch header repeats


def needs_release(cautions: tuple[str, ...]) -> str:
    """The release a row's extensible-KV caution says its launch or batch needs, as its
    launch line's header repeats it ("needs vLLM 0.34 or later: see the caution"); ""
    where none says so."""
    head, _, tail = NEEDS_RELEASE.partition("{}")
    said = next((c for c in cautions if head in c), "")
    if not said:
        return ""
    release = said.split(head, 1)[1].split(tail, 1)[0]
    return f"needs vLLM {release} or later: see the caution"


def extensible_shortfall_caution(dep: Deployment, settings: EngineSettings,
                                 request_tokens: int, counted: int, what: str,
                                 length_note: Callable[[], str] | None = None) -> str:
    """Where vLLM 0.34+'s extensible KV cache sizes ``dep``'s pool at ``settings`` (no start-up
    log has checked it) and 0.33's rules (--no-enable-extensible-kv-cache: the profile sizes
    it) hold fewer requests of ``request_tokens`` than the ``counted`` ``what`` names (no more
    than the extensible pool holds: DeepSeek-V3's analytic 4 × 240 at 24,000 tokens is past
    either pool, which the checks' runs never reach), fit's
    caution (vllm_extensible.extensible_caution, as `ridgeline fit` says it of the same
    launch) with that shortfall, and the release it therefore needs: what the release before
    the extensible cache (0.33, its own accounting at its default fraction) holds, or that it
    does not start at that length; else "". ``length_note``: what the length is, said beside
    it ("this row's own --max-model-len: ..."; "": nothing), read only where the caution is
    said. Plan says it of its rows
    (``extensible_kv_caution``), simulate of its run's largest batch. DeepSeek-V3 on 4 x B200,
    KV fp8, at 163,840: 14.46 GiB per GPU here, 2.39 under 0.33's rules, and vLLM 0.33
    itself (1.44 GiB) does not start."""
    from ridgeline.capacity import held_conversations
    from ridgeline.errors import InputError
    from ridgeline.memory import kv_pool
    from ridgeline.reports.fit_terms import per_gpu
    from ridgeline.units import GIB, plural
    from ridgeline.vllm_extensible import extensible_caution, extensible_rule, profiled_settings

    length = settings.max_model_len
    if dep.engine != "vllm" or not length:
        return ""
    pool = kv_pool(dep, settings)
    if not pool.kept_free_bytes or pool.accounting is None:  # the profile sizes it
        return ""
    profiled = kv_pool(dep, profiled_settings(settings))
    held = held_conversations(profiled, dep, request_tokens, length)
    # no more than the extensible pool itself holds: past it the batch is its pool's
    counted = min(counted, held_conversations(pool, dep, request_tokens, length))
    if held >= counted:
        return ""
    version = pool.accounting.version
    words = extensible_caution(version, profiled.pool_bytes / GIB,
                               held_conversations(profiled, dep, length), length,
                               per_gpu(profiled))
    note = length_note() if length_note is not None else ""
    if note:
        words += f" ({note})"
    words += (f"; they hold {held:,} {plural(held, 'request')} of {request_tokens:,} tokens, "
              f"fewer than the {counted:,} {what}")
    since = str(extensible_rule()["from"])
    before = release_before(since)
    try:  # the release before, as it sizes the same launch at its own default fraction
        prior = kv_pool(dep, replace(settings, engine_version=before, extensible_kv_cache=None,
                                     gpu_memory_utilization=None))
    except InputError:  # a setting that release does not take: no figure to give
        prior = None
    if prior is not None:
        prior_held = held_conversations(prior, dep, request_tokens, length)
        outcome = f"does not start at --max-model-len {length:,}" \
            if not held_conversations(prior, dep, length) else \
            f"holds {prior_held:,} {plural(prior_held, 'request')} of {request_tokens:,} tokens"
        sized = f"vLLM {before} sizes {prior.pool_bytes / GIB:,.2f} GiB {per_gpu(prior)} and " \
            f"{outcome}"
        words += f"; {sized}" if prior_held >= counted else \
            f"; {NEEDS_RELEASE.format(since)}, its extensible KV cache on: {sized}"
    return words + f"; a start-up log's KV cache line checks vLLM {version}'s figure"


def calibration(profile: EngineProfile, acc: Accelerator, engine: str) -> tuple[bool, str]:
    """Whether ``profile`` was fitted on rows enough of ``acc``'s card group (MIN_GROUP_ROWS),
    and the words for it: "the vllm profile has 0 fitted rows on intel-gaudi accelerators
    (...)" for a Gaudi 3."""
    group = accelerator_group(acc)
    fitted_here = profile.fitted_groups.get(group, 0)
    return fitted_here >= MIN_GROUP_ROWS, (
        f"the {engine} profile has {fitted_here} fitted row{'s' if fitted_here != 1 else ''} "
        f"on {group} accelerators ({profile.source})")
