"""Capacity planning: the cheapest deployment that meets an SLO for a workload.

Search: accelerator × tensor/pipeline parallel size × expert parallelism (MoE), or a MoE's
data-parallel attention ranks × their tensor parallel size (experts EP over all) × weight
format × KV dtype × engine knobs (max_num_seqs, max_num_batched_tokens). Each candidate
replica is first sized analytically (``replica_sizing``: ``size_replica``), which prunes
what cannot fit or cannot meet the SLO on its own; replicas cover the rate. The cheapest
candidates are then simulated (``sim/``) in the steady state at their per-replica rate, and
the fewest replicas that meet the SLO at the requested percentile kept. A pipeline-parallel
replica keeps one micro-batch per stage in flight (``sim/lanes.py``); a MoE's data-parallel
attention replica runs one scheduler and pool a rank, the ranks stepping together
(``sim/data_parallel.py``).
Disaggregated prefill/decode pools (xPyD) are sized analytically, the KV hand-off priced over
the inter-node link, and the cheapest simulated pool by pool, in the plan's own process
while the worker processes size the candidates.
What is searched is ``search_space``'s; the simulated checks ``plan_checks``'s; a winner
the CDNA3 MoE caution covers gives way as ``measured_slowdown`` says; where nothing meets
the SLO, ``closest_miss`` names the nearest group.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from ridgeline.candidate import (
    Candidate,
    candidate_deployment,
    kv_choices,
    replica_build,
    replica_deployment,
    weight_choices,
)
from ridgeline.closest_miss import Miss, ceiling_miss, closest_miss, simulated_miss
from ridgeline.context_length import served_positions
from ridgeline.cost import decode_batch, mean_decode_context, step_time_s
from ridgeline.disaggregated import (
    DISAGGREGATED_CHECKS,
    disaggregated_candidates,
    verify_disaggregated,
)
from ridgeline.engine_platforms import weights_platform_problem
from ridgeline.engine_scheduling import v0_scheduling_caution
from ridgeline.engines import EngineProfile, profile_for
from ridgeline.errors import InputError
from ridgeline.hardware import Accelerator, catalog_id_named, register, resolve_accelerator
from ridgeline.host_pricing import shared_host_caution
from ridgeline.measured_slowdown import measured_slowdown, moe_caution
from ridgeline.model import ModelSpec
from ridgeline.modelopt_algos import checkpoint_refusal
from ridgeline.plan_cautions import (
    calibration,
    candidate_cautions,
    chunked_prefill_note,
    data_parallel_winner_cautions,
    extensible_kv_caution,
    itl_stall_note,
    mla_unchunked_caution,
    streamed_load_note,
)
from ridgeline.plan_checks import (
    CheckRuns,
    Missed,
    SecondDraw,
    SecondDraws,
    cheapest,
    second_draw_miss,
    verify_cheapest,
)
from ridgeline.plan_checks import verify as verify_one  # ``verify``: plan's check budget
from ridgeline.plan_constraints import NO_CONSTRAINTS, PlanConstraints
from ridgeline.plan_precision import precision_note
from ridgeline.precision import weight_plan
from ridgeline.quantization_gates import capability_problem, deployment_problem
from ridgeline.replica_sizing import (
    covers,
    launch_at,
    pool_at_launch,
    size_replica,
    state_seats,
)
from ridgeline.search_space import LeftOut, data_parallel_space, left_out, search_space
from ridgeline.serving_load import Load, Slo
from ridgeline.sglang_nsa import nsa_no_dp_problem
from ridgeline.sim.timer import SharedTimers
from ridgeline.stages import micro_batch
from ridgeline.vllm_gpu_floors import gpu_floor_problem

RAY_CHUNK = 8  # candidates per Ray task: each takes milliseconds, a task's overhead about as much
DEFAULT_GPUS = ("h100-sxm", "h200-sxm", "b200", "mi300x", "l40s")


Job = tuple[ModelSpec, Accelerator, int, int, str, str, tuple[int | None, int | None], bool,
            Load, Slo, float | None, str | None, str, EngineProfile, int, PlanConstraints]


def _worker_card(acc: Accelerator) -> Accelerator:
    """The card a job sizes on, the record itself: a user's (``--gpu-file``), which a worker
    process or a Ray task has not read, registered there too, so that what looks a card up
    by its id downstream finds the record the command read."""
    if catalog_id_named(acc.id) is None:
        register(acc)
    return acc


def _evaluate(args: Job) -> Candidate | None:
    """One candidate replica sized (``size_replica``), or None where it cannot run or meet
    the SLO; the card is its record (``_worker_card``), the last two fields the
    data-parallel attention ranks (1: none) and the plan's constraints, of which a replica
    reads the --max-model-len every launch is fixed at (0: the planner's own,
    ``launch_at``) and the launch's hybrid KV-cache manager switches
    (``PlanConstraints.launch_settings``)."""
    (model, card, tp, pp, weights, kv, (seqs, budget), ep, load, slo, price, version,
     engine, profile, ranks, constraints) = args
    fixed_len = constraints.max_model_len
    acc = _worker_card(card)
    try:
        dep = replica_deployment(model, acc, tp, pp, weights, kv, ep, engine=engine,
                                 version=version, data_parallel_size=ranks)
    except InputError:
        return None
    switches = constraints.launch_settings
    settings = replace(switches, max_num_seqs=seqs, max_num_batched_tokens=budget,
                       engine_version=version)
    if seqs is None and engine == "trtllm":
        seqs = state_seats(dep, settings, load)
        if seqs == 0:
            return None  # not one seat's state and request fit beside the weights
        settings = replace(settings, max_num_seqs=seqs)
    try:
        max_len = launch_at(dep, settings, fixed_len)
    except InputError:  # a shape this engine version cannot launch (vLLM's PP before 0.5.1)
        return None
    if not max_len:
        return None  # no --max-model-len starts it
    sized = size_replica(dep, profile, load, slo, seqs, budget, version, max_len, switches)
    if sized is None:
        return None
    batch, tpot, ttft, rate, limits = sized
    replicas = max(1, math.ceil(load.rate_req_s / rate * 1.0001))  # past max_gpus too: the
    # plan then says how many the load needs
    calibrated, why = calibration(profile, acc, engine)
    return Candidate(acc.id, tp, pp, weights, kv, seqs, batch, tpot, ttft, rate, replicas, price,
                     calibrated, why, profile.band_on(acc),
                     expert_parallel=ep, max_num_batched_tokens=budget, rate_limits=limits,
                     max_model_len=max_len, data_parallel=ranks,
                     pool_at_launch=pool_at_launch(dep, settings, max_len),
                     disable_hybrid_kv_cache_manager=switches.disable_hybrid_kv_cache_manager,
                     allow_chunked_local_attn_hybrid=switches.allow_chunked_local_attn_hybrid)


@dataclass(frozen=True)
class CardOutcome:
    """What a plan found of one card it was asked to search: ``status`` "priced" (``best``
    its first deployment as the plan ranks them: simulated first, each cheapest first),
    "unpriced" (``best`` the fewest GPUs that meet the SLO), "split" (only split prefill and
    decode pools; ``best`` the first), "over ceiling" (each deployment that meets it costs
    more than --max-cost-per-hour-usd; ``best`` the cheapest), "beyond" (``gpus`` GPUs meet
    it, past --max-gpus),
    "left out" (the release runs no format of it: the "left out:" line says why), "missed"
    (layouts fit and were sized within --max-gpus, but none held in simulation) or "none"
    (no layout fits and meets the SLO on its own)."""

    gpu: str
    status: str
    best: Candidate | None = None
    gpus: int = 0


def _card_outcomes(ids: Sequence[str], candidates: Sequence[Candidate],
                   unpriced: Sequence[Candidate], split: Sequence[Candidate],
                   sized: Sequence[Candidate], max_gpus: int,
                   refused: AbstractSet[str] = frozenset(),
                   over: Sequence[Candidate] = ()) -> tuple[CardOutcome, ...]:
    """Each searched card's ``CardOutcome``: an MI300X with 15 replicas that held at $27.75/h
    "priced", an L40S whose Llama-70B layouts need 80 GPUs under --max-gpus 64 "beyond", a
    card the release runs no format of (``refused``: search_space.left_out's "every format",
    an A100 for a modelopt_mixed checkpoint under vLLM 0.23) "left out", one whose every
    deployment costs more than --max-cost-per-hour-usd (``over``) "over ceiling", ``best``
    its cheapest."""
    out = []
    for gpu in ids:
        if gpu in refused:
            out.append(CardOutcome(gpu, "left out"))
            continue
        mine = [c for c in candidates if c.accelerator == gpu]
        if mine:
            best = min(mine, key=lambda c: (not c.verified, c.cost_per_hour or 0.0, c.gpus))
            out.append(CardOutcome(gpu, "priced", best, best.gpus))
            continue
        dear = min((c for c in over if c.accelerator == gpu), default=None, key=cheapest)
        if dear is not None:
            out.append(CardOutcome(gpu, "over ceiling", dear, dear.gpus))
            continue
        free = next((c for c in unpriced if c.accelerator == gpu), None)
        pools = next((c for c in split if c.accelerator == gpu), None)
        past = min((c.gpus for c in sized if c.accelerator == gpu and c.gpus > max_gpus),
                   default=0)
        if free is not None:
            out.append(CardOutcome(gpu, "unpriced", free, free.gpus))
        elif pools is not None:
            out.append(CardOutcome(gpu, "split", pools, pools.gpus))
        elif past:
            out.append(CardOutcome(gpu, "beyond", None, past))
        elif any(c.accelerator == gpu and c.gpus <= max_gpus for c in sized):
            out.append(CardOutcome(gpu, "missed"))
        else:
            out.append(CardOutcome(gpu, "none"))
    return tuple(out)


def _row_cautions(c: Candidate, win: Candidate | None, engine: str, profile: EngineProfile,
                  slo: Slo, model: ModelSpec, engine_version: str | None,
                  load: Load, given: Sequence[str] = ()) -> tuple[str, ...]:
    """What every row plan prints says of its deployment: its own cautions
    (``candidate_cautions``; vLLM 0.34's unchecked extensible KV cache where 0.33's rules hold
    less than its batch, ``extensible_kv_caution``), and, on rows other than the winner (whose lines say both
    apart), its profile's calibration where the card's group is outside it (a Gaudi 3: 0
    fitted rows) and, where no measured-caution list names it (an unpriced pool), the CDNA3
    MoE caution (``moe_caution``)."""
    why = candidate_cautions(c, engine, profile, slo, model, engine_version)
    extensible = extensible_kv_caution(c, engine, model, load, engine_version)
    why = (*why, extensible) if extensible else why
    host = shared_host_caution(c, c.accelerator in given)  # a TP replica priced a GPU alone
    why = (*why, host) if host else why
    if c is win:
        return why
    extra = []
    calibrated, note = calibration(profile, resolve_accelerator(c.accelerator), engine)
    if not calibrated:  # a split's own flag is unset: read the profile for every row
        extra.append(f"outside the calibrated range: {note}")
    if c.price_per_gpu_hour is None and not c.disaggregated:
        extra.append(moe_caution(model, c, engine))
    return (*why, *(e for e in extra if e))


class ParetoPoint(NamedTuple):
    """A point of the Pareto frontier: its speeds, the label the text prints ("h100-sxm TP8
    fp8, KV fp8, b1") and what that label names, as --json's keys."""

    output_tok_s_per_gpu: float  # simulate's name for the output rate a GPU
    per_user_tok_s: float  # decode's name for one user's rate
    label: str
    accelerator: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    expert_parallel: bool
    weights: str
    kv_dtype: str
    batch: int  # sequences a replica decodes at once


@dataclass(frozen=True)
class PlanResult:
    load: Load
    slo: Slo
    # feasible and priced: verified first, each cheapest first; where a measured caution
    # covers the cheapest, the cheapest without it that held first (``winner``)
    candidates: tuple[Candidate, ...]
    unpriced: tuple[Candidate, ...]
    disaggregated: tuple[Candidate, ...]
    pareto: tuple[ParetoPoint, ...]
    searched: int
    mean_output_tokens: float
    closest_miss: str
    engine: str = "vllm"  # whose memory rules sized the pools
    cautions: tuple[str, ...] = ()
    engine_version: str | None = None  # the version whose memory rules sized them
    # the candidates (of ``candidates`` and ``disaggregated``) a measured caution leaves
    # unverified, each with it:
    # their price assumes a speed the measurements have not shown (CDNA3's MoE paths)
    measured_cautions: tuple[tuple[Candidate, str], ...] = ()
    # the candidates (of ``candidates``, ``unpriced`` and ``disaggregated``) whose deployment
    # carries cautions of its own (plan_cautions: TP across nodes, a prompt speed near the
    # TTFT SLO on a borrowed compute share), each with them
    deployment_cautions: tuple[tuple[Candidate, tuple[str, ...]], ...] = ()
    # what the plan did that a reader should know, no warning: the chunked prefill its
    # TensorRT-LLM check and launch line turned on (plan_cautions.chunked_prefill_note)
    notes: tuple[str, ...] = ()
    # the cards asked for, or some of their formats, the search left out: the release the
    # pools are sized for refuses them there (search_space.left_out: a V100 under vLLM 0.32)
    left_out: tuple[LeftOut, ...] = ()
    # every card asked for, in --gpus order, with what the search found of it
    # (``CardOutcome``): its cheapest deployment, no price, or why it has none
    cards: tuple[CardOutcome, ...] = ()
    # each searched card's price per GPU-hour as priced (None: no price), and the cards
    # whose price a --price gave (the rest: the catalog's)
    price_table: tuple[tuple[str, float | None], ...] = ()
    prices_given: tuple[str, ...] = ()
    # ``closest_miss``'s group and latencies as figures (closest_miss.Miss); None with a winner
    closest_miss_figures: Miss | None = None
    # the formats, launch length and price the deployments had to keep (--weights,
    # --kv-dtype, --min-context, --max-model-len, --max-cost-per-hour-usd)
    constraints: PlanConstraints = NO_CONSTRAINTS
    # where the winner's decode batch is past its profile's fitted range on its card
    # (EngineProfile.batch_range_caution), the first candidate within it (simulated first,
    # each cheapest first), else None
    in_range: Candidate | None = None
    # where --max-cost-per-hour-usd left no deployment that meets the SLO, the cheapest one
    # that does above it (simulated where a check reached it), else None
    over_ceiling: Candidate | None = None
    # how many of the cheapest split pools were simulated (``DISAGGREGATED_CHECKS``; 0 where
    # ``plan`` ran with verify=0: every split in ``disaggregated`` analytic)
    splits_simulated: int = 0
    # the cheapest count of a deployment cheaper than the winner (any, with none) that held on
    # the load's requests but missed on the second draw the checks also ask for
    # (plan_checks.second_draw_miss), else None: plan's check command, rerun on it, holds
    second_draw: SecondDraw | None = None

    @property
    def winner(self) -> Candidate | None:
        """The first candidate: the cheapest that holds in simulation without a measured
        caution; the cheaper ones a caution leaves unverified are ``cheaper_unverified``.
        Where none without the caution holds, the cheapest, unverified
        (``winner_unverified``)."""
        return self.candidates[0] if self.candidates else None

    @property
    def cheaper_unverified(self) -> tuple[Candidate, ...]:
        """The candidates a measured caution leaves unverified that cost less than the winner,
        in the candidates' order (simulated first, each cheapest first): the alternatives its
        price would undercut, at a speed the measurements have not shown."""
        win = self.winner
        if win is None or win.cost_per_hour is None:
            return ()
        return tuple(c for c in self.candidates[1:] if self.unverified_by(c)
                     and (c.cost_per_hour or 0.0) < win.cost_per_hour)

    def cautions_for(self, c: Candidate) -> tuple[str, ...]:
        """What to say of ``c``'s own deployment (plan_cautions.candidate_cautions), or ()."""
        return next((why for d, why in self.deployment_cautions if d is c), ())

    def unverified_by(self, c: Candidate) -> str:
        """The measured caution that leaves ``c`` (one of ``candidates`` or ``disaggregated``)
        unverified, or ""."""
        return next((why for d, why in self.measured_cautions if d is c), "")

    @property
    def winner_unverified(self) -> bool:
        """Whether the first candidate is the cheapest but unverified, not a winner."""
        return self.winner is not None and bool(self.unverified_by(self.winner))




def plan(model: ModelSpec, load: Load, slo: Slo,
         gpus: Sequence[str | Accelerator] = DEFAULT_GPUS,
         max_gpus: int = 64, prices: dict[str, float] | None = None, workers: int = 2,
         verify: int = 16, executor: str = "process",
         engine_version: str | None = None, engine: str = "vllm",
         profile: EngineProfile | None = None, data_parallel: bool = True,
         constraints: PlanConstraints = NO_CONSTRAINTS) -> PlanResult:
    """The cheapest deployment of ``model`` meeting ``slo`` for ``load``, each replica's pool
    sized by ``engine``'s memory rules (vLLM, SGLang or TensorRT-LLM) at ``engine_version``
    (default: the newest modelled), its steps timed by ``profile`` (default: the engine's
    bundled one; `calibrate` writes a user's). ``data_parallel``: a MoE's data-parallel
    attention layouts searched too (``data_parallel_space``). ``constraints``: the weight
    formats, KV dtypes and shortest launch length allowed, the one length every launch
    starts with, the most a deployment may cost an hour (``PlanConstraints``: any; a
    deployment past the ceiling is dropped, and where none is left ``over_ceiling`` names
    the cheapest that meets the SLO) and vLLM's hybrid KV-cache manager switches every pool
    is sized and launched with (``PlanConstraints.launch_settings``). ``gpus`` names cards
    (a catalog id, alias or a registered record's id) or gives their ``Accelerator``
    records, a user's own (``--gpu-file``, ``hardware.load_accelerator_file``) registered
    here (``_card_ids``); the candidate workers receive the record itself. ``verify``: the
    most single-pool candidates simulated (``verify_cheapest``); the rest are listed analytic
    (``Candidate.verified`` False). A positive ``verify`` also simulates the
    ``DISAGGREGATED_CHECKS`` cheapest split pools (a budget of their own); ``verify=0``
    simulates none, single pool or split: every split is listed as ``disaggregated`` rows
    with ``verified`` False, as the splits past those checked are (the text's "analytic
    only: not simulated"). Its simulations share their step timers (``SharedTimers``)."""
    ids = _card_ids(gpus)
    with SharedTimers():
        return _plan(model, load, slo, ids, max_gpus, prices, workers, verify, executor,
                     engine_version, engine, profile, data_parallel, constraints)


def _card_ids(gpus: Sequence[str | Accelerator]) -> tuple[str, ...]:
    """``gpus`` as names: a record's id, a user's record registered first (``hardware.register``,
    as `plan --gpu-file` does) so that what looks a card up by id finds it; a catalog card's
    record as its id. A record under a catalog id whose figures differ from the catalog's
    (``dataclasses.replace`` of the H100 at another price) is refused: its rows would be read
    as the catalog's card (``hardware.check_record_id``); a price belongs in ``prices``."""
    ids = []
    for g in gpus:
        if not isinstance(g, Accelerator):
            ids.append(g)
            continue
        taken = catalog_id_named(g.id)
        if taken is None:
            register(g)
        elif resolve_accelerator(taken) != g:
            raise InputError(f"the record {g.id!r} has the catalog's id ({taken}) but other "
                             f"figures: give it an id of its own (e.g. my-{taken}), or its "
                             "price in prices")
        ids.append(g.id)
    return tuple(ids)


def _plan(model: ModelSpec, load: Load, slo: Slo, gpus: Sequence[str], max_gpus: int,
          prices: dict[str, float] | None, workers: int, verify: int, executor: str,
          engine_version: str | None, engine: str, profile: EngineProfile | None,
          data_parallel: bool, constraints: PlanConstraints) -> PlanResult:
    profile = profile or profile_for(engine)
    if load.rate_req_s <= 0:
        raise InputError("the request rate must be positive")
    limit = served_positions(model, engine)
    if load.refused_share(limit) > 0.5:
        mean_in, mean_out = load.means()
        raise InputError(f"most requests of this load (mean {mean_in + mean_out:,.0f} tokens) are "
                         f"longer than {model.name}'s {limit:,}-token context: an engine refuses "
                         "them")
    refused = load.refused_share(limit)
    if refused > (100 - slo.percentile) / 100:
        raise InputError(f"{refused:.1%} of the requests are longer than {model.name}'s "
                         f"{limit:,}-token context: an engine refuses them, more than a "
                         f"p{slo.percentile:.10g} SLO lets miss ({100 - slo.percentile:.10g} %)")
    if slo.itl_s is not None and all(out <= 1 for _, out in load.samples()):
        # no request streams a chunk after its first token: no ITL to hold, and a check that
        # counted the SLO as kept would say so of a latency it never measured
        raise InputError(f"an ITL SLO ({slo.itl_s * 1e3:g} ms) needs outputs of 2 tokens or "
                         "more, and every request of this load asks for 1: none streams a "
                         "chunk after its first token, so there is no inter-token gap to "
                         "hold; drop --slo-itl-ms (the TTFT SLO is this load's latency)")
    long_len = constraints.length_refusal(load, slo)  # requests past --max-model-len
    if long_len:
        raise InputError(long_len)
    release = _release_refusal(model, gpus, engine, engine_version) or (
        "" if data_parallel else nsa_no_dp_problem(model, gpus, engine, engine_version)) or \
        constraints.switch_problem(model, engine, engine_version)  # the switches vLLM refuses
    if release:
        raise InputError(release)
    constraints = constraints.for_model(model, engine)
    constraints.check(weight_choices(model), kv_choices(model, engine), limit or 0, model.name)
    prices = dict(prices or {})
    table: dict[str, float | None] = {}
    given = []
    for gpu in gpus:
        acc = resolve_accelerator(gpu)
        table[acc.id] = prices.get(acc.id, prices.get(gpu, acc.price_per_hour_usd))
        if acc.id in prices or gpu in prices:
            given.append(acc.id)
    space = list(search_space(model, [resolve_accelerator(g).id for g in gpus], max_gpus,
                              engine, engine_version))
    sizing = load.for_sizing()
    fixed = constraints.max_model_len  # --max-model-len: every launch's (0: the planner's)
    # each job carries the card's record, not its id: a --gpu-file's is not registered in a
    # worker process or a Ray task (``_worker_card``)
    jobs: list[Job] = [(model, resolve_accelerator(g), tp, pp, w, kv, knobs, ep, sizing, slo,
                        table[g], engine_version, engine, profile, 1, constraints)
                       for g, tp, pp, w, kv, knobs, ep in space
                       if constraints.admits_formats(w, kv)]
    if data_parallel:  # pipeline 1, the experts spread whole over every rank's GPUs
        jobs += [(model, resolve_accelerator(g), tp, 1, w, kv, knobs, True, sizing, slo,
                  table[g], engine_version, engine, profile, ranks, constraints)
                 for g, tp, w, kv, knobs, ranks in data_parallel_space(
                     model, [resolve_accelerator(g).id for g in gpus], max_gpus, engine,
                     engine_version) if constraints.admits_formats(w, kv)]
    split = [c for c in disaggregated_candidates(
        model, load, slo, gpus, max_gpus, table, engine_version, engine, profile,
        constraints.admits, fixed, constraints.launch_settings)
        if constraints.within_price(c.cost_per_hour)]
    split_checks = DISAGGREGATED_CHECKS if verify > 0 else 0  # the splits simulated
    pool = ProcessPoolExecutor(max_workers=workers) if executor != "ray" and workers > 1 \
        and len(jobs) > 16 else None
    with pool or nullcontext():
        if executor == "ray":
            sized_by: Iterator[Candidate | None] = iter(_ray_map(jobs))
        elif pool is not None:  # every job handed to the workers at once
            sized_by = pool.map(_evaluate, jobs, chunksize=8)
        else:
            sized_by = map(_evaluate, jobs)
        # the disaggregated checks in this process while the workers size the candidates: here
        # they share the step timers of the co-located checks (``SharedTimers``), which a
        # worker process would compute again (None: no size within max_gpus holds)
        # (verify=0: none, each split left analytic, as the single pools are: ``plan``)
        checked = [verify_disaggregated(model, c, load, slo, max_gpus, engine_version, engine,
                                        profile) for c in split[:split_checks]]
        found = list(sized_by)
    sized = _covering([c for c in found if c is not None
                       and constraints.admits(c.weights, c.kv, c.max_model_len)], load, slo)
    feasible = [c for c in sized if c.gpus <= max_gpus]
    beyond = min((c for c in sized if c.gpus > max_gpus), default=None,
                 key=lambda c: (c.gpus, *cheapest(c)))  # the fewest GPUs, then as plans rank
    priced = sorted((c for c in feasible if c.cost_per_hour is not None), key=cheapest)
    # --max-cost-per-hour-usd: the checks go to the deployments within it (a check that adds
    # replicas can still push one past it: dropped after)
    over = [c for c in priced if not constraints.within_price(c.cost_per_hour)]
    priced = [c for c in priced if constraints.within_price(c.cost_per_hour)]
    unpriced = sorted((c for c in feasible if c.cost_per_hour is None),
                      key=lambda c: (c.gpus, *cheapest(c)))  # of one count, as priced ones rank
    runs: CheckRuns = {}  # the checks' runs, each made once
    missed: Missed = []  # the checks that held at no count within max_gpus
    edges: SecondDraws = []  # the counts that held on the first draw alone
    verified, rest = verify_cheapest(model, priced, load, slo, max_gpus, verify, engine_version,
                                     engine, profile, runs, missed, edges)
    _, mean_out = load.means()
    miss = None if feasible else closest_miss(model, load, slo, gpus, max_gpus, engine, profile,
                                            beyond, engine_version, constraints)
    split = [c for c in checked if c is not None] + split[split_checks:]
    split = [c for c in _covering(split, load, slo) if constraints.within_price(c.cost_per_hour)]
    candidates = tuple(verified + rest)
    slowed, candidates = measured_slowdown(model, candidates, load, slo, max_gpus,
                                           engine_version, engine, profile, runs)
    over += [c for c in candidates if not constraints.within_price(c.cost_per_hour)]
    candidates = tuple(c for c in candidates if constraints.within_price(c.cost_per_hour))
    dearer = None if candidates or not over else _cheapest_over(
        model, over, load, slo, max_gpus, verify, engine_version, engine, profile, runs)
    measured = tuple((c, why) for c, why in ((c, moe_caution(model, c, engine))
                                            for c in (*candidates, *split)) if why)
    win = candidates[0] if candidates else None
    if dearer is not None and not (unpriced or split):  # the ceiling is the miss
        miss = ceiling_miss(model, dearer, constraints.max_cost_per_hour_usd or 0.0, slo,
                            engine)
    if not (win or unpriced or miss or any(c.verified for c in split)):
        # sized within max_gpus, but every check missed: the nearest simulated (where no
        # check ran, every launch refused, the nearest unloaded)
        miss = simulated_miss(model, missed, slo, max_gpus, engine) or closest_miss(
            model, load, slo, gpus, max_gpus, engine, profile, beyond, engine_version,
            constraints)
    note = load.transient(win.ttft_floor_s + mean_out * win.tpot_s) if win else ""

    def check(c: Candidate) -> Candidate | None:
        """``c`` simulated as the winner was (precision_note's same-price alternative)."""
        return verify_one(model, c, load, slo, max_gpus, engine_version, engine, profile, runs)

    unpriced_best = tuple(_best_per_gpu(unpriced))
    split_sorted = tuple(sorted(split, key=lambda c: (not c.verified, c.cost_per_hour is None,
                                                      c.cost_per_hour or 0.0, c.gpus)))
    own = tuple((c, why) for c, why in ((c, _row_cautions(c, win, engine, profile, slo, model,
                                                            engine_version, load, given))
                                        for c in (*candidates, *unpriced_best, *split_sorted))
                if why)
    cautions = tuple(c for c in (note, load.thin(slo.percentile, win.sim_requests if win and
                                                  win.sim_requests else None),
                                 model.architecture_caution, slowed,
                                 constraints.switch_caution(model, engine, engine_version),
                                 v0_scheduling_caution(engine, engine_version),
                                 mla_unchunked_caution(win, engine, load, model),
                                 *(next((why for d, why in own if d is win), ())),
                                 *data_parallel_winner_cautions(win, engine, model)) if c)
    dropped = left_out(model, gpus, engine, engine_version, LEFT_OUT_LEVER)
    in_range = _cheapest_in_range(win, candidates, profile)
    return PlanResult(load, slo, candidates, unpriced_best, split_sorted,
                      tuple(_pareto(model, feasible, load, engine, profile, engine_version)),
                      len(jobs), mean_out, miss.text if miss else "",
                      engine, cautions, engine_version, measured, own,
                      tuple(n for n in (chunked_prefill_note(win, engine, load),
                                        streamed_load_note(win, engine, model, engine_version),
                                        itl_stall_note(win, slo),
                                        precision_note(win, candidates, slo.percentile,
                                                       check if verify > 0 else None, engine))
                            if n), dropped,
                      _card_outcomes([resolve_accelerator(g).id for g in gpus], candidates,
                                     unpriced_best, split_sorted, sized, max_gpus,
                                     {d.gpu for d in dropped if d.what == "every format"},
                                     over),
                      tuple(table.items()), tuple(given), miss, constraints, in_range,
                      dearer, len(checked), second_draw_miss(edges, win))


# plan's way out of a card vLLM's release runs nothing on: plan sizes no llama.cpp, so it names
# what the other commands do unasked (a V100 under vLLM 0.34: cli_load.default_engine)
PLAN_LEVER = ("a card it runs on (plan sizes no llama.cpp, which fit, decode, simulate and page "
              "run this card under when no --engine is given)")

# the way out of a card left out beside others the release runs on (search_space.left_out)
LEFT_OUT_LEVER = "--engine llama.cpp-cuda to fit, decode or simulate (plan sizes no llama.cpp)"


def _release_refusal(model: ModelSpec, gpus: Sequence[str], engine: str,
                     version: str | None) -> str:
    """Why ``engine`` at ``version`` serves the plan's weights on no layout at all, or "":
    one GPU of the first card that builds them, asked ``deployment_problem`` (a bitsandbytes
    checkpoint before vLLM 0.5, its MoE experts before 0.10), or a checkpoint's stored format
    the engine loads on none of them (``weights_platform_problem``: trtllm and bitsandbytes; its
    method below every card's compute capability, ``capability_problem``; a vLLM release that
    runs on none of them, ``gpu_floor_problem``: a V100 from 0.20), or a ModelOpt
    quant_algo the engine has no method for on any card (``checkpoint_refusal``)."""
    refused = checkpoint_refusal(model, engine)
    if refused:
        return refused
    if model.stored_formats:
        stored = weight_plan(model)
        problems = [weights_platform_problem(stored, resolve_accelerator(g), engine, False)
                    for g in gpus]
        if all(problems):  # plan serves the checkpoint as stored: it takes no --weights
            return (problems[0].split("; give ")[0] + f"; plan serves {model.name} as stored: "
                    f"give a checkpoint in a format {engine} loads, or another --engine")
    below = ""  # a card below the method's compute capability: the plan keeps the others
    for gpu in gpus:
        try:
            dep = replica_build(model, resolve_accelerator(gpu), 1, 1, weight_choices(model)[0],
                                kv_choices(model, engine)[0], engine=engine)
        except InputError:
            continue
        short = capability_problem(dep, version) or gpu_floor_problem(dep, version, PLAN_LEVER)
        if short:
            below = below or short
            continue
        return deployment_problem(dep, version)
    return below


def _cheapest_over(model: ModelSpec, over: list[Candidate], load: Load, slo: Slo,
                   max_gpus: int, verify: int, engine_version: str | None, engine: str,
                   profile: EngineProfile, runs: CheckRuns) -> Candidate | None:
    """Where --max-cost-per-hour-usd left no deployment, the cheapest above it that meets the
    SLO, checked as the plan checks its winner (``verify_cheapest``, reusing ``runs``): the
    first that held, else the cheapest analytic one; None where none is left."""
    held, rest = verify_cheapest(model, sorted(over, key=cheapest), load, slo, max_gpus,
                                 verify, engine_version, engine, profile, runs, [])
    return next(iter(held + rest), None)


def _cheapest_in_range(win: Candidate | None, candidates: Sequence[Candidate],
                       profile: EngineProfile) -> Candidate | None:
    """Where ``win``'s decode batch is priced past the largest its profile was fitted on for
    its card's group (``batch_range_caution``: an MI300X at batch 466 against Instinct rows
    up to 16), the first of ``candidates`` (simulated first, each cheapest first) priced
    within its own card's range, else None."""
    if win is None or not profile.batch_range_caution(resolve_accelerator(win.accelerator),
                                                      win.batch):
        return None
    return next((c for c in candidates if c is not win and not profile.batch_range_caution(
        resolve_accelerator(c.accelerator), c.batch)), None)


def _covering(cands: list[Candidate], load: Load, slo: Slo) -> list[Candidate]:
    """The candidates whose --max-model-len refuses no more of the load than the SLO spares
    (``covers``), each with the share it refuses; a pool shrunk below the model's context
    can refuse some (the candidates' workers see the load's means alone)."""
    out = []
    for c in cands:
        if c.max_model_len and not covers(load, slo, c.max_model_len):
            continue
        out.append(replace(c, refused_share=load.refused_share(c.max_model_len)))
    return out





def _ray_map(jobs: list[tuple[Any, ...]]) -> list[Candidate | None]:
    """Evaluate candidates on a Ray cluster (the checkout's ``ray`` extra): the one at
    ``RAY_ADDRESS``, or one started on this machine; one task per chunk of candidates."""
    try:
        import ray
    except ImportError:
        raise InputError("--executor ray needs Ray: pip install -e '.[ray]' in ridgeline's "
                         "checkout, or pip install ray") from None
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"))
    remote = ray.remote(_evaluate_chunk)
    chunks = [jobs[i:i + RAY_CHUNK] for i in range(0, len(jobs), RAY_CHUNK)]
    return [c for part in ray.get([remote.remote(chunk) for chunk in chunks]) for c in part]


def _evaluate_chunk(jobs: list[tuple[Any, ...]]) -> list[Candidate | None]:
    return [_evaluate(job) for job in jobs]


def _best_per_gpu(cands: list[Candidate]) -> list[Candidate]:
    best: dict[str, Candidate] = {}
    for c in cands:
        if c.accelerator not in best or c.gpus < best[c.accelerator].gpus:
            best[c.accelerator] = c
    return sorted(best.values(), key=lambda c: c.gpus)




def _pareto(model: ModelSpec, feasible: list[Candidate], load: Load,
            engine: str = "vllm", profile: EngineProfile | None = None,
            engine_version: str | None = None) -> list[ParetoPoint]:
    """Non-dominated (tok/s per GPU, tok/s per user) points over batch, per configuration,
    each step priced with the states ``engine_version`` keeps (as the search sized them)."""
    mean_in, mean_out = load.means()
    ctx = mean_decode_context(mean_in, mean_out)
    points = []
    profile = profile or profile_for(engine)
    widest: dict[tuple[str, int, int, str, str, bool, int], Candidate] = {}  # the largest SLO
    for c in feasible:  # batch of each configuration, over its engine knobs
        key = (c.accelerator, c.tp, c.pp, c.weights, c.kv, c.expert_parallel, c.data_parallel)
        if key not in widest or c.batch > widest[key].batch:
            widest[key] = c
    for c in widest.values():
        dep = candidate_deployment(model, c, engine, engine_version)
        top = max(1, c.batch)
        batches = [1 << k for k in range(top.bit_length()) if 1 << k < top] + [top]
        for b in batches:  # 1, 2, 4, … and the batch that meets the SLO
            # a pipeline's batch runs as micro-batches: a token's step is one's trip
            t = step_time_s(dep, decode_batch(micro_batch(dep, b), ctx), profile)
            points.append(ParetoPoint(b / t / dep.num_gpus, 1 / t, f"{c.accelerator} "
                                      f"{c.parallel_for(engine)} {c.weights}, KV {c.kv}, b{b}",
                                      c.accelerator, c.tp, c.pp, c.data_parallel,
                                      c.expert_parallel, c.weights, c.kv, b))
    points.sort(key=lambda p: (-p[1], -p[0]))
    frontier, best = [], -1.0
    for p in points:
        if p[0] > best:
            frontier.append(p)
            best = p[0]
    return frontier
