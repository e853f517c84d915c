"""Where no deployment meets the SLO: the group nearest it unloaded, over every card and layout
of the search that holds the model, or why none launches or holds it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ridgeline.candidate import (
    Candidate,
    candidate_label,
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
from ridgeline.memory import EngineSettings
from ridgeline.model import ModelSpec
from ridgeline.parallel import node_size
from ridgeline.plan_checks import CheckRun, Missed
from ridgeline.quantization_gates import single_rank_checkpoint
from ridgeline.search_space import ENGINE_KNOBS, layouts
from ridgeline.serving_load import Load, Slo
from ridgeline.units import plural


def _holding(model: ModelSpec, acc: Accelerator, tp: int, pp: int, context: int,
             engine: str, version: str | None = None) -> tuple[bool, Deployment | None]:
    """(whether any TP``tp`` × PP``pp`` group of ``acc`` builds, the first the search could launch
    whose pool holds one request of ``context`` tokens or None): the lightest weights first,
    then the search's other formats, fp8 KV first, each with the search's
    engine knobs (vLLM's default 1,024 seats can leave no pool where 64 leave one); built,
    sized and its states kept as ``version`` does them, as the search's replicas are."""
    built = False
    for weights in weights_lightest_first(model):
        for kv in ("fp8", "bf16"):
            try:
                dep = replica_deployment(model, acc, tp, pp, weights, kv, engine=engine,
                                         version=version)
            except InputError:
                continue
            built = True
            for seqs, tokens in ENGINE_KNOBS:
                settings = EngineSettings(max_model_len=context, max_num_seqs=seqs,
                                          max_num_batched_tokens=tokens, engine_version=version)
                try:
                    held = max_batch(dep, context, settings)
                except InputError:  # a shape this release cannot launch (vLLM's PP before 0.5.1)
                    break
                if held >= 1:
                    return True, dep
    return built, None


def _first_refusal(model: ModelSpec, gpus: Sequence[str], engine: str,
                   version: str | None = None) -> str:
    """Why one GPU of the first card cannot launch ``model`` under ``engine`` at ``version``:
    the build's own one-line refusal (an MI250's two GCDs split falcon-7b's 71 heads at TP2
    under vLLM)."""
    try:
        replica_deployment(model, resolve_accelerator(gpus[0]), 1, 1,
                           weights_lightest_first(model)[0], "bf16", engine=engine,
                           version=version)
    except InputError as e:
        return str(e)
    return "every layout's build refuses it"


def _unloaded_miss(ttft_s: float, tpot_s: float, slo: Slo) -> str:
    """Both latencies unloaded, then which of them misses the SLO: "TTFT ≥ 7 ms, TPOT ≥ 2.5 ms
    even unloaded: TPOT misses its 1 ms SLO; TTFT is within its 10 ms", not both as if both
    missed."""
    text = f"TTFT ≥ {ttft_s * 1e3:,.0f} ms, TPOT ≥ {tpot_s * 1e3:,.1f} ms even unloaded"
    return text + _which_misses(ttft_s, tpot_s, slo)


def _which_misses(ttft_s: float, tpot_s: float, slo: Slo) -> str:
    """Which latency misses its SLO, as a tail to their figures: ": TPOT misses its 1 ms SLO;
    TTFT is within its 10 ms", ", past both SLOs (10 ms and 1 ms)", or "" (neither; a TPOT of
    NaN, 1-token outputs, misses none)."""
    limits = {"TTFT": slo.ttft_s * 1e3, "TPOT": slo.tpot_s * 1e3}
    over = {"TTFT": ttft_s > slo.ttft_s, "TPOT": tpot_s > slo.tpot_s}
    if all(over.values()):
        return f", past both SLOs ({limits['TTFT']:,g} ms and {limits['TPOT']:,g} ms)"
    if not any(over.values()):
        return ""
    miss, meet = ("TTFT", "TPOT") if over["TTFT"] else ("TPOT", "TTFT")
    return f": {miss} misses its {limits[miss]:,g} ms SLO; {meet} is within its {limits[meet]:,g} ms"


def simulated_miss(model: ModelSpec, missed: Missed, slo: Slo,
                   max_gpus: int, engine: str) -> str:
    """Where the analytic sizing found deployments within ``max_gpus`` but each one's check
    missed at every count it could run: the nearest, the least of its simulated TTFT ÷ its
    SLO and TPOT ÷ its SLO (the worse of the two), at the most replicas it ran, and which
    latency missed; "" where none was simulated. (A p99 TTFT SLO of 30 ms for Llama-3.1-8B
    at 10 req/s on two H100s: the queue's wait puts each layout's p99 past it.)"""
    def worse(run: CheckRun) -> float:
        tpot = 0.0 if math.isnan(run.tpot_s) else run.tpot_s / slo.tpot_s
        return max(run.ttft_s / slo.ttft_s, tpot)

    if not missed:
        return ""
    c, run = min(missed, key=lambda seen: worse(seen[1]))  # of equal misses, the first checked
    no_tpot = math.isnan(run.tpot_s)  # 1-token outputs: a TTFT alone
    tpot = "n/a (1-token outputs)" if no_tpot else f"{run.tpot_s * 1e3:,.1f} ms"
    why = (f": TTFT misses its {slo.ttft_s * 1e3:,g} ms SLO" if run.ttft_s > slo.ttft_s
           else "") if no_tpot else _which_misses(run.ttft_s, run.tpot_s, slo)
    why = why or (", within the SLO, but the run missed: its queue grew, or the engine "
                  "refused requests")
    return (f"{candidate_label(model, c, engine)}, as many replicas as --max-gpus "
            f"{max_gpus} allows, came nearest in simulation: p{slo.percentile:g} TTFT "
            f"{run.ttft_s * 1e3:,.0f} ms, TPOT {tpot}{why}")


def closest_miss(model: ModelSpec, load: Load, slo: Slo, gpus: Sequence[str],
                 max_gpus: int, engine: str = "vllm", profile: EngineProfile | None = None,
                 beyond: Candidate | None = None, engine_version: str | None = None) -> str:
    """The group nearest the SLO unloaded (the least of TTFT ÷ its SLO and TPOT ÷ its SLO, the
    worse of the two), over every card and every layout of the search that holds the model;
    where one meets it unloaded the load is the miss, and ``beyond``, the fewest GPUs the
    analytic sizing found past ``max_gpus``, says how many it needs. Each group is built,
    sized and priced at ``engine_version`` as the search's replicas are: a hybrid's states at
    the dtype that release keeps them in (Nemotron-H's fp16 before vLLM 0.20)."""
    mean_in, mean_out = load.means()
    context = round(mean_in + mean_out)
    best: tuple[float, int, str] | None = None  # (miss, GPUs, text)
    profile = profile or profile_for(engine)
    any_built = False
    for gpu in gpus:
        acc = resolve_accelerator(gpu)
        for tp, pp in layouts(node_size(acc), max_gpus, not single_rank_checkpoint(model, engine)):
            built, dep = _holding(model, acc, tp, pp, context, engine, engine_version)
            any_built = any_built or built
            if dep is None:
                continue  # no such split, or none holds one request
            ttft = step_time_s(dep, [Seq(max(1, round(mean_in)), 0)], profile)
            tpot = step_time_s(dep, decode_batch(1, mean_decode_context(mean_in, mean_out)), profile)
            miss = max(ttft / slo.ttft_s, tpot / slo.tpot_s)
            group = f"{tp * pp} x {acc.id} ({parallel_words(tp, pp, engine_devices(engine, acc))})"
            text = f"{group}: {_unloaded_miss(ttft, tpot, slo)}"
            if miss <= 1:
                text = (f"{group} meets the SLO unloaded (TTFT {ttft * 1e3:,.0f} ms, "
                        f"TPOT {tpot * 1e3:,.1f} ms), but no batch sustaining "
                        f"{load.rate_req_s:g} req/s within {max_gpus} GPU{'s' if max_gpus > 1 else ''} "
                        "keeps the p"
                        f"{slo.percentile:g} latencies under it: the load is the miss")
                if beyond is not None:
                    text += (f"; it needs about {beyond.gpus:,} GPUs "
                             f"({candidate_label(model, beyond, engine)}, "
                             "sized analytically): raise --max-gpus")
            # the nearest; of equal misses (all meeting it unloaded), the fewest GPUs
            if best is None or (max(miss, 1.0), tp * pp) < (max(best[0], 1.0), best[1]):
                best = (miss, tp * pp, text)
    if best is None:
        widest = max((tp * pp for gpu in gpus for tp, pp in
                      layouts(node_size(resolve_accelerator(gpu)), max_gpus,
                              not single_rank_checkpoint(model, engine))), default=1)
        if not any_built:  # no layout launches at all: a split, not memory, is the miss
            why = _first_refusal(model, gpus, engine, engine_version)
            return (f"no group of up to {widest} {plural(widest, 'GPU')} ({', '.join(gpus)}) "
                    f"launches {model.name} under {engine}: {why}")
        return (f"does not fit: no group of up to {widest} {plural(widest, 'GPU')} "
                f"({', '.join(gpus)}) holds {model.name} with room for one request")
    return best[2]
