"""Where no deployment meets the SLO: the group nearest it unloaded, over every card and layout
of the search that holds the model, or why none launches or holds it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from ridgeline.candidate import (
    Candidate,
    candidate_deployment,
    candidate_label,
    kv_choices,
    parallel_words,
    replica_deployment,
    weights_lightest_first,
)
from ridgeline.capacity import max_batch
from ridgeline.cost import Seq, decode_batch, mean_decode_context, step_time_s
from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile, profile_for
from ridgeline.errors import InputError
from ridgeline.hardware import Accelerator, engine_devices, resolve_accelerator
from ridgeline.model import ModelSpec
from ridgeline.parallel import node_size
from ridgeline.plan_checks import CheckRun, Missed
from ridgeline.plan_constraints import NO_CONSTRAINTS, PlanConstraints
from ridgeline.quantization_gates import single_rank_checkpoint
from ridgeline.replica_sizing import starts_at
from ridgeline.search_space import ENGINE_KNOBS, layouts, offered
from ridgeline.serving_load import Load, Slo
from ridgeline.units import fmt_latency, fmt_req_rate, plural


@dataclass(frozen=True)
class Miss:
    """A NO DEPLOYMENT's closest miss: the sentence the text prints (``text``) and, for --json,
    the group it names with its latencies. ``kind``: ``unloaded`` (a lone request misses),
    ``load`` (it meets the SLO unloaded, the load within --max-gpus is the miss),
    ``simulated`` (its check missed; the latencies at the SLO's percentile),
    ``over_ceiling`` (it meets the SLO, above --max-cost-per-hour-usd: ``ceiling_miss``), or
    ``does_not_fit`` / ``does_not_launch`` (no group: its keys None). Llama-3.1-70B on 2 x
    l40s (TP2), TTFT 274 ms and TPOT 61.7 ms unloaded against SLOs of 200 ms and 10 ms: kind
    unloaded, missed ("TTFT", "TPOT")."""

    text: str
    kind: str
    accelerator: str | None = None
    num_gpus: int | None = None  # one replica's group: TP × PP (× data-parallel ranks)
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None  # None: 1-token outputs have none
    itl_s: float | None = None  # None: no ITL SLO given (or 1-token outputs)
    missed: tuple[str, ...] = ()  # the latencies past their SLOs: TTFT, TPOT, ITL
    gpus_needed: int | None = None  # the load's miss: the fewest GPUs, past --max-gpus

    def to_dict(self) -> dict[str, Any]:
        """--json's ``closest_miss_figures``: every field but the sentence."""
        data = asdict(self)
        del data["text"]
        data["missed"] = list(self.missed)
        return data


def _group_miss(text: str, kind: str, acc: str, tp: int, pp: int, ttft_s: float,
                tpot_s: float, itl_s: float, slo: Slo, gpus_needed: int | None = None,
                data_parallel: int = 1) -> Miss:
    """A miss that names a TP``tp`` × PP``pp`` group of ``acc`` (``data_parallel`` such ranks a
    replica): its latencies (NaN, 1-token outputs, as None; the ITL only under an ITL SLO)
    and which of them miss ``slo``."""
    def seconds(v: float) -> float | None:
        return None if math.isnan(v) else v

    return Miss(text, kind, acc, tp * pp * data_parallel, tp, pp, ttft_s, seconds(tpot_s),
                None if slo.itl_s is None else seconds(itl_s),
                tuple(_over(_latencies(slo, ttft_s, tpot_s, itl_s), slo)), gpus_needed)


def _formats(model: ModelSpec, engine: str,
             constraints: PlanConstraints) -> list[tuple[str, str]]:
    """The (weights, KV dtype) pairs the search sizes ``model`` in that ``constraints`` admit
    (--weights, --kv-dtype): the lightest weights first, fp8 KV first."""
    return [(weights, kv) for weights in weights_lightest_first(model)
            for kv in reversed(kv_choices(model, engine))
            if constraints.admits_formats(weights, kv)]


def _launch_length(context: int, constraints: PlanConstraints) -> int:
    """The --max-model-len a group must start at to count as holding: --max-model-len's,
    else a request of ``context`` tokens at --min-context at least (0: neither given, the
    pool need only hold the request)."""
    if constraints.max_model_len:
        return constraints.max_model_len
    return max(context, constraints.min_context) if constraints.min_context else 0


def _holding(model: ModelSpec, acc: Accelerator, tp: int, pp: int, context: int,
             engine: str, version: str | None = None,
             constraints: PlanConstraints = NO_CONSTRAINTS) -> tuple[bool, Deployment | None]:
    """(whether any TP``tp`` × PP``pp`` group of ``acc`` builds, the first the search could launch
    whose pool holds one request of ``context`` tokens or None): of the formats
    ``constraints`` admit (--weights, --kv-dtype), the lightest weights first, then the
    others, fp8 KV first, each with the search's
    engine knobs (vLLM's default 1,024 seats can leave no pool where 64 leave one) and
    launch switches (``PlanConstraints.launch_settings``); built,
    sized and its states kept as ``version`` does them, as the search's replicas are. Where
    `plan --max-model-len` fixed every launch, or --min-context set the shortest, a group
    holds only where the pool started at that length (``_launch_length``) holds one request
    that long (``starts_at``, the search's own test): Llama-3.1-70B in fp8 on one H100 holds
    a 1,250-token request, but started at 65,536 it holds none."""
    built = False
    length = _launch_length(context, constraints)
    switches = constraints.launch_settings  # the hybrid manager's, as every launch's
    for weights, kv in _formats(model, engine, constraints):
        if not offered(acc, weights, kv):  # as the search leaves it out (a TPU's fp8)
            continue
        try:
            dep = replica_deployment(model, acc, tp, pp, weights, kv, engine=engine,
                                     version=version)
        except InputError:
            continue
        built = True
        for seqs, tokens in ENGINE_KNOBS:
            settings = replace(switches, max_model_len=length or context, max_num_seqs=seqs,
                               max_num_batched_tokens=tokens, engine_version=version)
            try:
                held = (starts_at(dep, settings, length) if length
                        else max_batch(dep, context, settings) >= 1)
            except InputError:  # a shape this release cannot launch (vLLM's PP before 0.5.1)
                break
            if held:
                return True, dep
    return built, None


def _first_refusal(model: ModelSpec, gpus: Sequence[str], engine: str,
                   version: str | None = None,
                   constraints: PlanConstraints = NO_CONSTRAINTS) -> str:
    """Why one GPU of the first card cannot launch ``model`` under ``engine`` at ``version``
    in the lightest weights and the first KV dtype ``constraints`` admit: the build's own
    one-line refusal (an MI250's two GCDs split falcon-7b's 71 heads at TP2 under vLLM)."""
    weights = next(w for w in weights_lightest_first(model)
                   if any(constraints.admits_formats(w, kv) for kv in kv_choices(model, engine)))
    kv = next(k for k in kv_choices(model, engine) if constraints.admits_formats(weights, k))
    try:
        replica_deployment(model, resolve_accelerator(gpus[0]), 1, 1, weights, kv,
                           engine=engine, version=version)
    except InputError as e:
        return str(e)
    return "every layout's build refuses it"


def _unloaded_miss(ttft_s: float, tpot_s: float, slo: Slo) -> str:
    """The latencies unloaded, then which of them misses the SLO: "TTFT ≥ 7 ms, TPOT ≥ 2.5 ms
    even unloaded: TPOT misses its 1 ms SLO; TTFT is within its 10 ms", not both as if both
    missed. An ITL SLO's ITL unloaded is the TPOT's figure: a lone request's every gap is
    one decode step."""
    itl = "" if slo.itl_s is None else f", ITL ≥ {fmt_latency(tpot_s)}"
    text = (f"TTFT ≥ {fmt_latency(ttft_s, ',.0f')}, TPOT ≥ {fmt_latency(tpot_s)}{itl} even "
            "unloaded")
    return text + _which_misses(_latencies(slo, ttft_s, tpot_s, tpot_s), slo)


def _latencies(slo: Slo, ttft_s: float, tpot_s: float, itl_s: float) -> dict[str, float]:
    """The latencies ``slo`` judges, by name: TTFT and TPOT, and ITL where it has an ITL SLO."""
    named = {"TTFT": ttft_s, "TPOT": tpot_s}
    return named if slo.itl_s is None else named | {"ITL": itl_s}


def _limits_s(slo: Slo) -> dict[str, float]:
    """``slo``'s limits by the names ``_latencies`` gives."""
    return {"TTFT": slo.ttft_s, "TPOT": slo.tpot_s, "ITL": slo.itl_s or math.inf}


def _worst_ratio(latencies_s: dict[str, float], slo: Slo) -> float:
    """The worst of the latencies ÷ their SLOs (one with none, NaN, counts 0)."""
    limits = _limits_s(slo)
    return max(0.0 if math.isnan(v) else v / limits[name] for name, v in latencies_s.items())


def _and(words: Sequence[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _over(latencies_s: dict[str, float], slo: Slo) -> list[str]:
    """The latencies past their SLOs, by name (NaN, 1-token outputs' TPOT, is none)."""
    limits = _limits_s(slo)
    return [name for name, v in latencies_s.items() if not math.isnan(v) and v > limits[name]]


def _which_misses(latencies_s: dict[str, float], slo: Slo) -> str:
    """Which latencies miss their SLOs, as a tail to their figures: ": TPOT misses its 1 ms
    SLO; TTFT is within its 10 ms", ", past both SLOs (10 ms and 1 ms)", ": TPOT and ITL miss
    their 40 ms and 20 ms SLOs; TTFT is within its 500 ms", or "" (none; a latency of NaN,
    1-token outputs, is left out)."""
    limits = _limits_s(slo)
    named = [name for name, v in latencies_s.items() if not math.isnan(v)]
    over = _over(latencies_s, slo)
    within = [name for name in named if name not in over]

    def ms(names: list[str]) -> str:
        return _and([fmt_latency(limits[name], ",g", ",g") for name in names])

    if not over:
        return ""
    if len(over) > 1 and not within:
        return f", past {'both' if len(over) == 2 else 'all three'} SLOs ({ms(over)})"
    text = (f": {over[0]} misses its {ms(over)} SLO" if len(over) == 1 else
            f": {_and(over)} miss their {ms(over)} SLOs")
    if within:
        text += (f"; {within[0]} is within its {ms(within)}" if len(within) == 1 else
                 f"; {_and(within)} are within their {ms(within)}")
    return text


def simulated_miss(model: ModelSpec, missed: Missed, slo: Slo,
                   max_gpus: int, engine: str) -> Miss | None:
    """Where the analytic sizing found deployments within ``max_gpus`` but each one's check
    missed at every count it could run: the nearest, the least of its simulated TTFT ÷ its
    SLO and TPOT ÷ its SLO (and ITL ÷ its SLO, where given: the worst of them), at the most
    replicas it ran, and which latency missed; None where none was simulated. (A p99 TTFT SLO
    of 30 ms for Llama-3.1-8B at 10 req/s on two H100s: the queue's wait puts each layout's
    p99 past it.)"""
    def worse(run: CheckRun) -> float:
        return _worst_ratio(_latencies(slo, run.ttft_s, run.tpot_s, run.itl_s), slo)

    if not missed:
        return None
    c, run = min(missed, key=lambda seen: worse(seen[1]))  # of equal misses, the first checked
    no_tpot = math.isnan(run.tpot_s)  # 1-token outputs: a TTFT alone
    tpot = "n/a (1-token outputs)" if no_tpot else fmt_latency(run.tpot_s)
    itl = "" if slo.itl_s is None else ", ITL " + (
        "n/a (1-token outputs)" if math.isnan(run.itl_s) else fmt_latency(run.itl_s))
    why = _which_misses(_latencies(slo, run.ttft_s, run.tpot_s, run.itl_s), slo)
    why = why or (", within the SLO, but the run missed: its queue grew, or the engine "
                  "refused requests")
    text = (f"{candidate_label(model, c, engine)}, as many replicas as --max-gpus "
            f"{max_gpus} allows, came nearest in simulation: p{slo.percentile:g} TTFT "
            f"{fmt_latency(run.ttft_s, ',.0f')}, TPOT {tpot}{itl}{why}")
    return _group_miss(text, "simulated", c.accelerator, c.tp, c.pp, run.ttft_s, run.tpot_s,
                       run.itl_s, slo, data_parallel=c.data_parallel)


def ceiling_miss(model: ModelSpec, c: Candidate, ceiling_usd_h: float, slo: Slo,
                 engine: str) -> Miss:
    """Where --max-cost-per-hour-usd left no deployment that meets the SLO: ``c``, the
    cheapest above it that does, with its price and latencies (simulated where its check
    held, else the analytic sizing's), kind ``over_ceiling``, nothing missed but the price:
    Llama-3.1-70B at 10 req/s under a $9/h ceiling, 5 x MI300X at $9.25/h."""
    gpus = f"{c.gpus:,} {'GPU' if c.gpus == 1 else 'GPUs'}"
    ttft, tpot = (c.sim_ttft_s, c.sim_tpot_s) if c.verified else (c.ttft_floor_s, c.tpot_s)
    seen = (f"simulated: p{slo.percentile:g} TTFT {fmt_latency(ttft or 0.0, ',.0f')}, TPOT "
            + ("n/a (1-token outputs)" if tpot is None or math.isnan(tpot)
               else fmt_latency(tpot)) if c.verified else "analytic: not simulated")
    text = (f"the cheapest that meets the SLO is {candidate_label(model, c, engine)} = {gpus} "
            f"at ${c.cost_per_hour or 0.0:,.2f}/h, over the ${ceiling_usd_h:,.2f}/h ceiling "
            f"(--max-cost-per-hour-usd) ({seen})")
    return Miss(text, "over_ceiling", c.accelerator, c.replica_gpus, c.tp, c.pp,
                ttft, None if tpot is None or math.isnan(tpot) else tpot,
                None if slo.itl_s is None or c.sim_itl_s is None or math.isnan(c.sim_itl_s)
                else c.sim_itl_s)


def closest_miss(model: ModelSpec, load: Load, slo: Slo, gpus: Sequence[str],
                 max_gpus: int, engine: str = "vllm", profile: EngineProfile | None = None,
                 beyond: Candidate | None = None, engine_version: str | None = None,
                 constraints: PlanConstraints = NO_CONSTRAINTS) -> Miss:
    """The group nearest the SLO unloaded (the least of TTFT ÷ its SLO and TPOT ÷ its SLO, the
    worse of the two, or of the three with an ITL SLO's ITL ÷ it), over every card and every
    layout of the search that holds the model; where one meets it unloaded the load is the
    miss, and ``beyond``, the fewest GPUs the analytic sizing found past ``max_gpus``, says
    how many it needs. Each group is built,
    sized and priced at ``engine_version`` as the search's replicas are: a hybrid's states at
    the dtype that release keeps them in (Nemotron-H's fp16 before vLLM 0.20), under the
    search's ``constraints``: only the formats --weights and --kv-dtype admit, and where
    `plan --max-model-len` fixed every launch, or --min-context set the shortest, judged
    started there as the search judges its replicas (``_holding``). Llama-3.1-70B within one
    H100 misses nearest on it in fp8 weights; under --weights bf16, or --min-context 100,000,
    no group within it fits."""
    mean_in, mean_out = load.means()
    context = round(mean_in + mean_out)
    best: tuple[float, int, Miss] | None = None  # (miss, GPUs, the miss)
    profile = profile or profile_for(engine)
    any_built = False
    for gpu in gpus:
        acc = resolve_accelerator(gpu)
        for tp, pp in layouts(node_size(acc), max_gpus, not single_rank_checkpoint(model, engine)):
            built, dep = _holding(model, acc, tp, pp, context, engine, engine_version,
                                  constraints)
            any_built = any_built or built
            if dep is None:
                continue  # no such split, or none holds one request
            ttft = step_time_s(dep, [Seq(max(1, round(mean_in)), 0)], profile)
            tpot = step_time_s(dep, decode_batch(1, mean_decode_context(mean_in, mean_out)), profile)
            # unloaded, a request's every gap is one decode step: its ITL is the TPOT's figure
            miss = _worst_ratio(_latencies(slo, ttft, tpot, tpot), slo)
            group = f"{tp * pp} x {acc.id} ({parallel_words(tp, pp, engine_devices(engine, acc))})"
            found = _group_miss(f"{group}: {_unloaded_miss(ttft, tpot, slo)}", "unloaded",
                                acc.id, tp, pp, ttft, tpot, tpot, slo)
            if miss <= 1:
                found = _group_miss(_load_miss(group, ttft, tpot, load, slo, max_gpus), "load",
                                    acc.id, tp, pp, ttft, tpot, tpot, slo)
            # the nearest; of equal misses (all meeting it unloaded), the fewest GPUs
            if best is None or (max(miss, 1.0), tp * pp) < (max(best[0], 1.0), best[1]):
                best = (miss, tp * pp, found)
    if best is None:
        widest = max((tp * pp for gpu in gpus for tp, pp in
                      layouts(node_size(resolve_accelerator(gpu)), max_gpus,
                              not single_rank_checkpoint(model, engine))), default=1)
        if not any_built:  # no layout launches at all: a split, not memory, is the miss
            why = _first_refusal(model, gpus, engine, engine_version, constraints)
            return Miss(f"no group of up to {widest} {plural(widest, 'GPU')} ({', '.join(gpus)}) "
                        f"launches {model.name}{_kept(constraints)} under {engine}: {why}",
                        "does_not_launch")
        return Miss(f"does not fit: no group of up to {widest} {plural(widest, 'GPU')} "
                    f"({', '.join(gpus)}) holds {model.name}{_kept(constraints)} with room for "
                    f"one request{_started(constraints)}", "does_not_fit")
    if beyond is not None and best[0] <= 1:  # the load is the miss: one deployment, priced
        return _beyond(model, beyond, load, slo, max_gpus, engine, profile, engine_version)
    return best[2]


def _kept(constraints: PlanConstraints) -> str:
    """The formats --weights and --kv-dtype kept the search to, as a miss says them
    (" in bf16 weights, KV bf16"), or ""."""
    kept = [f"{'/'.join(constraints.weights)} weights"] if constraints.weights else []
    kept += [f"KV {'/'.join(constraints.kv_dtypes)}"] if constraints.kv_dtypes else []
    return f" in {', '.join(kept)}" if kept else ""


def _started(constraints: PlanConstraints) -> str:
    """Where a launch had to start (--max-model-len, --min-context), as a miss says it, or
    ""."""
    if constraints.max_model_len:
        return (f" at --max-model-len {constraints.max_model_len:,} (fit: 0 conversations of "
                "that length)")
    if constraints.min_context:
        return f" at --min-context {constraints.min_context:,} or longer"
    return ""


def _load_miss(group: str, ttft_s: float, tpot_s: float, load: Load, slo: Slo,
               max_gpus: int) -> str:
    """``group`` meets the SLO unloaded at ``ttft_s`` and ``tpot_s`` (its ITL the TPOT's
    figure), but the load within ``max_gpus`` misses it."""
    itl = "" if slo.itl_s is None else f", ITL {fmt_latency(tpot_s)}"
    return (f"{group} meets the SLO unloaded (TTFT {fmt_latency(ttft_s, ',.0f')}, "
            f"TPOT {fmt_latency(tpot_s)}{itl}), but no batch sustaining "
            f"{fmt_req_rate(load.rate_req_s)} req/s within {max_gpus} "
            f"{plural(max_gpus, 'GPU')} keeps the p{slo.percentile:g} latencies under it: "
            "the load is the miss")


def _beyond(model: ModelSpec, c: Candidate, load: Load, slo: Slo, max_gpus: int, engine: str,
            profile: EngineProfile, version: str | None) -> Miss:
    """Where the load is the miss: ``c``, the fewest GPUs the analytic sizing found past
    ``max_gpus``, as one deployment, its group's latencies unloaded and its price (98 replicas
    of 2 x GB200 at 200 req/s: 196 GPUs, paid as three 72-GPU racks), not the nearest group
    of another card beside it."""
    dep = candidate_deployment(model, c, engine, version)
    mean_in, mean_out = load.means()
    ttft = step_time_s(dep, [Seq(max(1, round(mean_in)), 0)], profile)
    tpot = step_time_s(dep, decode_batch(1, mean_decode_context(mean_in, mean_out)), profile)
    group = (f"{c.replica_gpus} x {c.accelerator} "
             f"({parallel_words(c.tp, c.pp, engine_devices(engine, resolve_accelerator(c.accelerator)))})")
    rented = "" if c.rented_gpus == c.gpus else \
        f", paid as {c.rented_gpus:,} in {c.rental_gpus}-GPU units"
    price = ("no price (pass --price GPU=USD)" if c.cost_per_hour is None
             else f"${c.cost_per_hour:,.2f}/h")
    text = (_load_miss(group, ttft, tpot, load, slo, max_gpus)
            + f"; it needs about {c.gpus:,} GPUs ({candidate_label(model, c, engine)}"
            f"{rented}, {price}, sized analytically, not simulated): raise --max-gpus")
    return _group_miss(text, "load", c.accelerator, c.tp, c.pp, ttft, tpot, tpot, slo, c.gpus,
                       c.data_parallel)
