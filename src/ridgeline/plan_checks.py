"""The planner's checks: a candidate replica simulated in the steady state at its share of the
rate, replicas added until the SLO holds on two draws of the requests (``verify``), the
candidates checked until a cheaper one cannot turn up (``verify_cheapest``), the one likeliest
to win next, as its layout's checks so far re-size it (``likeliest``), whether a check ran the
simulator or was answered from runs already made (``simulated``: only the first costs a
search's budget), and the order candidates rank in (``cheapest``: the price, then the
headroom).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

from ridgeline.candidate import Candidate, candidate_deployment
from ridgeline.chunked_prefill import refuses_whole_prompt
from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile, profile_for
from ridgeline.model import ModelSpec
from ridgeline.replica_sizing import covers, launch_length, starts_at
from ridgeline.serving_load import Load, Slo
from ridgeline.sim.config import SimConfig, sim_config
from ridgeline.sim.metrics import itl_misses_settling, misses_settling
from ridgeline.sim.pipeline import lane_config, run_replica
from ridgeline.sim.request import Request

CONFIRM_DRAW = 1  # the seed offset of the second draw a check's count must also hold on


def simulated_first(cands: list[Candidate]) -> list[Candidate]:
    """The simulated candidates, cheapest first, then the rest, cheapest first: the order
    ``verify_cheapest`` leaves them in."""
    return sorted(cands, key=lambda c: (not c.verified, *cheapest(c)))


# the order candidates rank in (``cheapest``): $/h, GPUs, nodes a replica spans, TP across
# nodes, minus the analytic capacity
Rank = tuple[float, int, int, bool, float]


def cheapest(c: Candidate) -> Rank:
    """The order candidates rank in: cheapest, then fewest GPUs, then, at the same price
    and count, the fewest nodes a replica spans and tensor parallelism kept inside a node (a
    serving engineer's choice: one launch a replica, all-reduces on NVLink; TP8 × PP2
    before TP16, whose all-reduces cross the network, priced at its 400 Gb/s), then the most
    headroom, the highest analytic capacity (``Candidate.capacity_req_s``): of two that cost
    the same, the one sustaining more of a rise in the load (Llama-3.1-8B at 20 req/s on one
    H100, $2.99/h either way: fp8 weights with a bf16 KV cache, 26.1 req/s, before bf16
    weights with an fp8 cache, 21.1)."""
    return c.cost_per_hour or 0.0, c.gpus, c.replica_nodes, c.tp_crosses_nodes, \
        -c.capacity_req_s


def settling(work: list[Request], window_s: tuple[float, float],
              slo: Slo) -> int | tuple[int, int]:
    """Where a check's run may stop (``Simulator.run``'s stop_past): past the requests whose
    TTFT or TPOT settle the SLO's percentile, and with an ITL SLO, past the chunks whose gaps
    settle the ITL's (``itl_misses_settling``), whichever comes first."""
    requests = misses_settling(work, window_s, slo.percentile)
    if slo.itl_s is None:
        return requests
    return requests, itl_misses_settling(work, window_s, slo.percentile)


class CheckRun(NamedTuple):
    """One run of a check (``verify``): whether the SLO held, the TTFT and TPOT it read at
    the SLO's percentile, its requests, the first one's number (a trace's), its window, the
    prompts longer than the step budget of an engine that runs contexts whole, and its ITL
    at the percentile (``SimResult.itl_s_at``: the window's requests' streamed chunks)."""

    held: bool
    ttft_s: float
    tpot_s: float
    requests: int
    first: int
    window_s: tuple[float, float]
    over_budget: int = 0
    itl_s: float = math.nan


# what the checks of one candidate tell of another's sizing (``_layout``): card, TP, PP,
# data-parallel ranks, expert parallelism, weight format, cache dtype
Layout = tuple[str, int, int, int, bool, str, str]

# a plan's check runs, by (replica, its engine's config, request lifetime, replicas, draw)
CheckRuns = dict[tuple[Deployment, SimConfig, float, int, int], CheckRun]
# the checks that held at no count within max_gpus: each candidate at the most replicas it
# was run at, and that count's run that missed (closest_miss.simulated_miss reads them)
Missed = list[tuple[Candidate, CheckRun]]


class SecondDraw(NamedTuple):
    """A count that held on the load's requests but missed on ``CONFIRM_DRAW``'s other draw
    of them, so the check went on to more replicas (or, at the most within max_gpus, missed):
    ``candidate`` at that count, its first draw's run and its second's. Qwen3-32B at 0.5 req/s
    on one TP4 A100-40GB replica: p90 TPOT 58.3 ms on seed 0, 60.0 ms on seed 1, against a
    60 ms SLO."""

    candidate: Candidate
    first: CheckRun
    second: CheckRun


# every such count the checks met (``verify``'s ``edges``), in the order met
SecondDraws = list[SecondDraw]


def second_draw_miss(edges: SecondDraws, win: Candidate | None) -> SecondDraw | None:
    """Of ``edges``, the cheapest that costs less than ``win`` (any, where there is no winner
    or it has no price), fewest GPUs first at one price; None where there is none: the
    deployment an engineer who reran plan's check command on it would find holding."""
    limit = math.inf if win is None or win.cost_per_hour is None else win.cost_per_hour
    cheaper = [e for e in edges if e.candidate.cost_per_hour is not None
               and e.candidate.cost_per_hour < limit]
    return min(cheaper, key=lambda e: cheapest(e.candidate), default=None)


def verify_cheapest(model: ModelSpec, priced: list[Candidate], load: Load, slo: Slo,
                    max_gpus: int, limit: int, engine_version: str | None = None,
                    engine: str = "vllm", profile: EngineProfile | None = None,
                    runs: CheckRuns | None = None, missed: Missed | None = None,
                    edges: SecondDraws | None = None) -> tuple[list[Candidate], list[Candidate]]:
    """Simulate candidates until none is left whose analytic price, shrunk as much as
    simulation has shrunk any checked so far, is lower than the cheapest that held, or
    ``limit`` checks that ran the simulator are spent (a check answered wholly from the runs
    already made, a knob set to the engine's default, costs none: ``simulated``). Of those
    left, the one checked next is ``likeliest``'s, so that the budget goes first to the
    candidates the checks so far leave likeliest to win, not to the engine knob variants of
    a layout simulation has already found to need more replicas. A check that held at no
    count says little of its variants (another max_num_seqs may hold at a few replicas) and
    re-sizes none. At one price the verified rank as the search ranked them, whatever order
    they were checked in.
    Returns the verified ones, cheapest first, and those left unsimulated, cheapest first;
    those that held at no count are added to ``missed``, and the counts that held on the
    first draw alone to ``edges`` (``verify``)."""
    verified: list[tuple[int, Candidate]] = []  # each with its place in ``priced``
    best, shrink = math.inf, 1.0  # shrink: the lowest simulated / analytic replicas seen
    best_rank: Rank | None = None  # the first that held as ``cheapest`` ranks them
    moved: dict[Layout, float] = {}  # per layout, the lowest simulated / analytic replicas
    left = list(range(len(priced)))  # the places of those not checked, cheapest first
    runs = {} if runs is None else runs
    spent = 0  # checks that ran the simulator; each pass takes one place off ``left``
    while spent < limit:
        i = likeliest(priced, left, moved, shrink, best, best_rank)
        if i is None:
            break
        left.remove(i)
        c = priced[i]
        made = len(runs)
        checked = verify(model, c, load, slo, max_gpus, engine_version, engine, profile, runs,
                         missed=missed, edges=edges)
        spent += simulated(runs, made)
        if checked is None:  # no count within max_gpus held: that says little of a variant's
            continue  # (another max_num_seqs may hold at a few replicas)
        verified.append((i, checked))
        best = min(best, checked.cost_per_hour or 0.0)
        best_rank = min(best_rank or cheapest(checked), cheapest(checked))
        shrink = min(shrink, resize(moved, checked))
    # at one price, as the search ranked them: the order they were checked in leaves no trace
    verified.sort(key=lambda held: (*cheapest(held[1]), held[0]))
    return [c for _, c in verified], [priced[i] for i in left]


def simulated(runs: CheckRuns, made: int) -> bool:
    """Whether a check ran the simulator: ``runs`` holds more than the ``made`` it held
    before. One answered wholly from runs already made (vLLM's default token budget on an
    A100 is 2,048, so --max-num-batched-tokens 2048 launches the same engine on the same
    requests), or refused before any run (a --max-model-len that would not start), did not,
    and costs a search's budget nothing."""
    return len(runs) > made


def likeliest(cands: Sequence[Candidate], left: list[int], moved: dict[Layout, float],
              shrink: float, best: float, best_rank: Rank | None = None) -> int | None:
    """Of the places ``left`` in ``cands`` (cheapest first), the one to check next: of those
    whose analytic price, shrunk by ``shrink``, is lower than ``best`` (the cheapest that
    held), or that tie it and may outrank it (``outranks``: ``best_rank`` the first that
    held as ``cheapest`` ranks it), the cheapest once re-sized by its layout's checks
    (``resized_cost``), the first left at one price; None where none is. Both searches,
    ``verify_cheapest`` and ``measured_slowdown``'s for a deployment without a caution, check
    in this order."""
    open_ = [(resized_cost(cands[i], moved, shrink), k, i) for k, i in enumerate(left)
             if (cands[i].cost_per_hour or 0.0) * shrink < best
             or outranks(cands[i], best, best_rank, moved)]
    return min(open_)[2] if open_ else None


def outranks(c: Candidate, best: float, best_rank: Rank | None,
             moved: dict[Layout, float]) -> bool:
    """Whether unchecked ``c`` costs what the cheapest that held costs (``best``) and, at its
    analytic count, ranks before it in ``cheapest``'s order (fewer GPUs or nodes, or more
    headroom), its layout not yet checked (``moved``: a knob variant of a layout that held
    says little new). Llama-3.1-70B at 1 req/s on H100s: TP1 sizes at one $2.99 replica and
    holds at two, $5.98; TP2 sizes at one replica of 2 GPUs, $5.98, with 4.52 req/s of
    capacity against TP1's 2 × 1.16 = 2.32, so it is checked too and, holding at one, wins."""
    if best_rank is None or _layout(c) in moved:
        return False
    rank = cheapest(c)
    return math.isclose(rank[0], best, rel_tol=1e-9) and rank[1:] < best_rank[1:]


def resize(moved: dict[Layout, float], held: Candidate) -> float:
    """What the check of ``held`` (a candidate that held in simulation) says of its layout's
    sizing: its simulated / analytic replicas, kept in ``moved`` where it is its layout's
    lowest so far (``resized_cost`` reads it), and returned."""
    ratio = held.replicas / (held.analytic_replicas or held.replicas)
    layout = _layout(held)
    moved[layout] = min(moved.get(layout, math.inf), ratio)
    return ratio


def resized_cost(c: Candidate, moved: dict[Layout, float], shrink: float) -> float:
    """``c``'s price once its analytic replicas are re-sized by what simulation has shown:
    by the lowest simulated / analytic ratio its layout's checks that held read (``moved``),
    else by ``shrink``, the lowest any check read (at most 1: a layout not yet checked may
    hold at its analytic count)."""
    ratio = moved.get(_layout(c), shrink)
    return (c.cost_per_hour or 0.0) * ratio


def _layout(c: Candidate) -> Layout:
    """What the checks of one candidate tell of another's sizing: its card, parallel layout,
    weight format and cache dtype, the engine knobs apart (their variants sized by the same
    rules, their analytic counts off by about as much; a cache dtype halves the pool, which
    moves the count of long prompts' replicas apart)."""
    return c.accelerator, c.tp, c.pp, c.data_parallel, c.expert_parallel, c.weights, c.kv


def verify(model: ModelSpec, c: Candidate, load: Load, slo: Slo,
           max_gpus: int, engine_version: str | None = None, engine: str = "vllm",
           profile: EngineProfile | None = None, runs: CheckRuns | None = None,
           chunked: bool = False, missed: Missed | None = None,
           edges: SecondDraws | None = None) -> Candidate | None:
    """Simulate one replica at its share of the rate; add replicas until the SLO holds.
    ``runs``: the runs already made for this load, SLO, profile and version (``CheckRuns``),
    which another candidate's knobs may repeat (on an A100 vLLM's default token budget is
    2,048: --max-num-batched-tokens 2048 launches the same engine). TensorRT-LLM, which runs
    a context whole by default, is checked with enable_chunked_prefill on where the load
    holds a prompt longer than max_num_tokens (``chunked``: one its check drew), as the
    launch plan prints then turns it on. A check that holds at no count within ``max_gpus``
    adds ``c`` at the most replicas it ran, with that count's run that missed, to ``missed``;
    a count that held on the first draw but not the second is added to ``edges``
    (``SecondDraw``), read from the runs made: it costs no run."""
    dep = candidate_deployment(model, c, engine, engine_version)
    settings = c.engine_settings(engine_version)  # its knobs and launch switches
    max_len = c.max_model_len or launch_length(dep, settings)
    if not max_len or not starts_at(dep, settings, max_len) or not covers(load, slo, max_len):
        return None  # the launch command's --max-model-len would not start, or refuses the load
    settings = replace(settings, max_model_len=max_len)
    engine_config = sim_config(dep, settings)
    whole = not engine_config.chunked_prefill
    if engine == "trtllm" and ((chunked and whole) or refuses_whole_prompt(
            load.longest_prompt(max_len), engine_config.max_num_batched_tokens,
            engine_config.chunked_prefill)):
        settings = replace(settings, enable_chunked_prefill=True)
        engine_config = sim_config(dep, settings)
    config = lane_config(engine_config, c.pp, engine, engine_version)
    if config.num_blocks < 1:  # a lane whose pool holds no block cannot run a request
        return None
    profile = profile or profile_for(engine)
    lifetime = c.ttft_floor_s + load.means()[1] * c.tpot_s
    runs = {} if runs is None else runs

    def run(replicas: int, draw: int = 0) -> CheckRun:
        """``replicas`` replicas in the steady state, on the load's requests or (``draw`` n)
        on another draw of them; each run once (a run of another candidate's, where it
        launches the same engine on the same requests)."""
        key = (dep, engine_config, lifetime, replicas, draw)
        if key not in runs:
            drawn = replace(load, seed=load.seed + draw) if draw else load
            work, window = drawn.steady(replicas, lifetime,  # a replica's share
                                        percentile=slo.percentile)
            result = run_replica(dep, profile, engine_config, work, engine_version,
                                 slo=(slo.ttft_s, slo.tpot_s, slo.itl_s), window_s=window,
                                 stop_past=settling(work, window, slo))
            ttft, tpot = (result.latency_s_at(name, slo.percentile) for name in ("ttft", "tpot"))
            itl = result.itl_s_at(slo.percentile)
            held = not result.rec.missed and ttft <= slo.ttft_s and (
                math.isnan(tpot) or tpot <= slo.tpot_s) and slo.itl_ok(itl) \
                and result.rec.held_steady  # a queue that grows misses the SLO, given time
            # of a trace, the requests counted (a stretch's, its lead and trail apart)
            counted = [r for r in work if window[0] <= r.arrival_s <= window[1]] \
                if load.trace else work
            runs[key] = CheckRun(held, ttft, tpot, len(counted),
                                 counted[0].id if load.trace else 0,
                                 window, result.rec.over_budget_prompts, itl)
        return runs[key]

    def holds(replicas: int, draw: int = 0) -> bool:
        """Whether ``replicas`` replicas meet the SLO (``run``)."""
        return run(replicas, draw).held

    def miss(replicas: int) -> Candidate | None:
        """None (no count held), once ``replicas``, the most within ``max_gpus``, missed:
        kept in ``missed`` with its run that missed (the second draw's where the first held)."""
        if missed is not None:
            first = run(replicas)
            missed.append((replace(c, replicas=replicas), run(replicas, CONFIRM_DRAW)
                           if first.held and not load.trace else first))
        return None

    met = len(edges) if edges is not None else 0  # ``edges`` before this check's
    low, high = 0, c.replicas  # the most replicas known to miss, a count to try
    most = max_gpus // c.replica_gpus  # the most replicas within max_gpus
    while not holds(high):  # too few: grow by a quarter, to the most, until the SLO holds
        if high >= most:
            return miss(high)
        low, high = high, min(high + max(1, high // 4), most)
    if low == 0:  # the analytic count holds: fewer may (it sizes at the capacity edge)
        low = max(0, high - max(1, high // 4))
        while low and holds(low):
            high, low = low, max(0, low - max(1, low // 4))
    while high - low > 1:  # the fewest between a miss and a hold
        mid = (low + high) // 2
        low, high = (low, mid) if holds(mid) else (mid, high)
    # At the capacity edge one short run's percentile swings (p90 TTFT from 4.8 to 20 s
    # between stretches of one long run): another draw of the requests must hold too. A
    # trace has one draw.
    while not (holds(high) and (bool(load.trace) or holds(high, CONFIRM_DRAW))):
        if edges is not None and holds(high):  # the second draw alone missed
            edges.append(SecondDraw(replace(c, replicas=high, max_model_len=max_len,
                                            enable_chunked_prefill=engine == "trtllm"
                                            and engine_config.chunked_prefill),
                                    run(high), run(high, CONFIRM_DRAW)))
        if high >= most:
            return miss(high)
        high += 1
    _, ttft, tpot, count, first, window, over, itl = run(high)
    confirm_over = 0 if load.trace else run(high, CONFIRM_DRAW).over_budget  # cached: no rerun
    # past max_num_tokens, the draws missed; checked once so (an MLA model outside SM
    # 90/100/103/120 stays whole: chunked_prefill.trtllm_mla_unchunked)
    if (over or confirm_over) and engine == "trtllm" and not chunked:
        if edges is not None:  # this pass's counts: the chunked one's replace them
            del edges[met:]
        return verify(model, c, load, slo, max_gpus, engine_version, engine, profile, runs,
                      chunked=True, missed=missed, edges=edges)
    return replace(c, enable_chunked_prefill=engine == "trtllm" and engine_config.chunked_prefill,
                   replicas=high, verified=True, sim_ttft_s=ttft, sim_tpot_s=tpot,
                   sim_itl_s=itl,
                   max_model_len=max_len, refused_share=load.refused_share(max_len),
                   analytic_replicas=c.replicas, sim_requests=count, sim_first=first,
                   sim_window_s=window if math.isfinite(window[0]) else None,
                   sim_over_budget=over)
