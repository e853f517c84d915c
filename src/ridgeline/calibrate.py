"""Fit engine profiles to measurements: the entry points (fit_profiles, fit_engine).

The fit minimises a robust loss (Huber on the log ratio predicted/measured) over an
engine's throughput and latency rows, in log-parameter space (calibrate_space), by
Nelder–Mead (nelder_mead). Few parameters, each physical: bandwidth and compute efficiency, a
per-step and a per-layer overhead (a step carrying prompt tokens gets its own per-layer cost:
engines replay CUDA graphs only for decode-only steps), a multiplier per accelerator group
that has enough rows, an absolute bandwidth ceiling where the rows are matrix-vector steps on
cards far enough apart in bandwidth to show one, a cost per weight matmul where the rows'
models launch different numbers of them per layer, and (llama.cpp) the expert matmuls' tile
width where enough prompt rows are of MoE models and a cost per MoE layer where enough decode
rows are of MoE models and of dense ones (calibrate_rows says what the rows show; the loss and
those structural terms: calibrate_objective). The band
is the 10th–90th percentile of the fit's own ratios measured/predicted. A calibration
(`calibrate`, fitted with the bundled profile as its prior) fits only what its rows pin, the
rest held at the bundled profile's (calibrate_held).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from ridgeline.calibrate_held import PROMPT_METRICS, held_fields, held_notes, values_at_prior
from ridgeline.calibrate_objective import Objective, member_table, with_structure
from ridgeline.calibrate_rows import (
    dequantizes,
    pinned_groups,
    row_group,
    shows_prompt_layers,
)
from ridgeline.calibrate_space import ParameterSpace
from ridgeline.engines import (
    MIN_EDGE_ROWS,
    MIN_GROUP_ROWS,
    EngineProfile,
    bundled_profiles,
    engine_id,
    has_fused_projections,
)
from ridgeline.errors import InputError
from ridgeline.measurements import Measurement, performance_rows
from ridgeline.nelder_mead import minimise
from ridgeline.predict import Prediction, predict, row_engine
from ridgeline.scoring import quantile
from ridgeline.units import plural

START = EngineProfile("start", 0.7, 0.5, 3e-4, 5e-6, source="fit start")
# The bundled fit pools these: CUDA-graph serving engines with a few rows each (vLLM and
# SGLang have no offline-throughput rows, TensorRT-LLM no low-batch decode rows).
SERVING_ENGINES = ("trtllm", "vllm", "sglang")

# An engine that replays another's kernels, launched differently: `measure` times decode steps
# both eager and from a CUDA graph, and prefill eager only, so the graph rows never reach the
# compute roof and their compute efficiency comes from the eager rows (the same cuBLAS calls).
SAME_KERNELS = {"torch-cudagraph": "torch-eager"}


def fit_engine(rows: Sequence[Measurement], engine: str,
               base: EngineProfile | None = None,
               family: Iterable[str] | None = None, *, strict: bool = False,
               held_matmul_s: float = 0.0,
               prior: EngineProfile | None = None) -> EngineProfile:
    """Fit one engine's profile to its performance rows (KV rows are memory, not speed).

    family: engines whose rows are fitted together into this one profile (the bundled fit
    pools the CUDA-graph serving engines, which have too few rows each).
    strict: refuse fewer predictable rows than the fit has parameters (`calibrate` on a
    user's file); the cross-validation folds fit the few rows a held-out group leaves.
    held_matmul_s: the cost per weight matmul to keep where the rows cannot pin one (their
    models all launch about as many per layer); 0 leaves it to the cost per layer. Kept, it
    counts as held, with a prior or without (`calibrate` passes the bundled one's).
    prior: the profile whose values stand where the rows cannot pin them (`calibrate` passes
    the bundled one): with no decode or throughput rows, all of DECODE_SIDE; with no prompt
    rows, PROMPT_SIDE, the compute share with it (the bundled fit pulls that towards its
    start: calibrate_space.COMPUTE_PRIOR_ROWS); with no
    time-to-first-token rows, its prompt steps' own cost per layer; and each structural term
    (ceiling, unpacking, tile width, dequantization, costs per matmul and per MoE layer) the
    rows cannot show. The profile records which (EngineProfile.held), and its source says
    so from that record (held_notes). Without it, the fixed start stands there, as the
    bundled fit wants (reproducible, whatever is bundled), and the profile holds nothing at
    a prior (at most the cost per weight matmul it is given).
    """
    key = engine_id(engine)
    members = {engine_id(e) for e in family} | {key} if family is not None else {key}
    mine = _engine_rows(rows, engine, members)
    start = base or START  # a fixed start: the fit is reproducible, whatever is bundled
    start = replace(start, engine=key, group_bandwidth={}, group_compute={},
                    matmul_overhead_s=held_matmul_s if has_fused_projections(key) else 0.0)
    mine = _predictable(mine, member_table(start, members), key)
    space, given = _space(mine, key, start, prior, held_matmul_s)
    if strict:  # --engine leaves out an engine only where the rows hold another
        others = any(row_engine(r) not in members for r in performance_rows(rows))
        _require_pinned(mine, key, len(space.start()), others)
    objective = Objective(mine, frozenset(members))
    best = minimise(objective.of(space), space.start())
    space, best = with_structure(objective, space, best, key)
    return _finished(objective, space.profile(best), prior, held_fields(space, given))


def _engine_rows(rows: Sequence[Measurement], engine: str,
                 members: set[str]) -> list[Measurement]:
    """The throughput and latency rows of ``members`` (an InputError where there are none)."""
    mine = [r for r in performance_rows(rows) if row_engine(r) in members]
    if not mine:
        raise InputError(f"no throughput or latency rows for engine {engine!r} to fit")
    return mine


def _space(mine: Sequence[Measurement], key: str, start: EngineProfile,
           prior: EngineProfile | None,
           held_matmul_s: float) -> tuple[ParameterSpace, frozenset[str]]:
    """The space the rows are fitted in, before any structural term, and the fields set
    before the fit, to stand where the rows cannot pin them: ``prior``'s, and the cost per
    weight matmul given with it or given alone (fit_engine's held_matmul_s)."""
    bw, cg = _multiplier_groups(mine)
    compute_rows = [r for r in mine if r.metric in PROMPT_METRICS]
    decode_side = len(compute_rows) < len(mine)  # a row with decode steps pins DECODE_SIDE
    quantized = sum(1 for r in compute_rows if dequantizes(r))
    dequant = MIN_GROUP_ROWS <= quantized <= len(compute_rows) - MIN_GROUP_ROWS
    # a prefill step's own per-layer cost shows in time-to-first-token at batch 1, told
    # from the compute share where the prompts differ in length
    prefill = shows_prompt_layers(mine)
    given: frozenset[str] = frozenset()
    if prior is not None:  # what the rows cannot pin stands at the prior's (held_parameters)
        values = values_at_prior(prior, mine, key, dequant=dequant)
        start = replace(start, **values)
        given = frozenset(values)
    if has_fused_projections(key) and (prior is not None or held_matmul_s):
        given |= {"matmul_overhead_s"}  # the start's (held_matmul_s), where not fitted
    # with no prompt row, the compute share stands at the prior's, as calibrate says it does
    # (a soft pull had let 18 throughputs move vLLM's from 56 % to 33 %: COMPUTE_PRIOR_ROWS);
    # the bundled fit, with no prior, pulls it towards its start instead
    space = ParameterSpace(start, bw, cg, dequant, prefill, compute_prior=not compute_rows,
                           compute=bool(compute_rows) or prior is None,
                           decode_side=decode_side or prior is None)
    return space, given


def _multiplier_groups(mine: Sequence[Measurement]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The card groups that get a bandwidth multiplier and a compute one: each with
    MIN_GROUP_ROWS decode rows (prompt rows), less a reference where every group has one.
    Bandwidth groups are the rows' bandwidth_group (Vega 20 with CDNA), compute groups their
    accelerator_group."""
    groups = {row_group(r) for r in mine}
    bw_groups = {row_group(r, bandwidth=True) for r in mine}
    decode_groups = Counter(row_group(r, bandwidth=True) for r in mine
                            if r.metric == "decode_tok_s_per_user")
    compute_groups = Counter(row_group(r) for r in mine if r.metric in ("prefill_tok_s", "ttft_ms"))
    bw = tuple(sorted(g for g, n in decode_groups.items() if n >= MIN_GROUP_ROWS))
    cg = tuple(sorted(g for g, n in compute_groups.items() if n >= MIN_GROUP_ROWS))
    if len(bw) == len(bw_groups) and bw:
        bw = bw[1:]  # one group is the reference: the global efficiency is its value
    if len(cg) == len(groups) and cg:
        cg = cg[1:]
    return pinned_groups(bw, decode_groups), pinned_groups(cg, compute_groups)


def _require_pinned(mine: Sequence[Measurement], key: str, parameters: int,
                    others: bool = False) -> None:
    """An InputError where the rows cannot pin a fit of ``parameters`` parameters: fewer rows,
    or fewer distinct conditions (repeats of one setting pin one equation). ``others``: the
    rows hold other engines too, which --engine can fit without this one."""
    if len(mine) < parameters:
        raise InputError(f"engine {key}: {len(mine)} predictable throughput or latency "
                         f"row{'' if len(mine) == 1 else 's'}, but its fit sets {parameters} "
                         f"parameters: it needs at least {parameters} (measure more"
                         + (", or name the other engines with --engine)" if others else ")"))
    conditions = len({condition(r) for r in mine})
    if conditions < parameters:
        raise InputError(f"engine {key}: its {len(mine)} rows measure {conditions} distinct "
                         f"condition{'' if conditions == 1 else 's'} (model, GPU, batch, "
                         f"lengths, metric), but its fit sets {parameters} parameters: measure "
                         f"at least {parameters} different ones (batches, prompt lengths)")


def _finished(objective: Objective, fitted: EngineProfile, prior: EngineProfile | None,
              held: tuple[str, ...]) -> EngineProfile:
    """``fitted`` with its band, the rows it was fitted on, and what it held (``held``, the
    record its source then words: held_notes)."""
    mine = objective.rows
    table = member_table(fitted, objective.members)
    predictions = [predict(r, table) for r in mine]
    ratios = sorted(p.measured / p.predicted for p in predictions if p.predicted)
    # the band brackets the expectation itself (the loader's rule: band_low ≤ 1 ≤ band_high)
    low, high = min(1.0, quantile(ratios, 0.1)), max(1.0, quantile(ratios, 0.9))
    if prior is not None:  # a user's rows measure the fit's own error, not a new model's or
        # card's: the band is at least the bundled profile's, fitted on many of each
        low, high = min(low, prior.band_low), max(high, prior.band_high)
    groups = Counter(row_group(r) for r in mine)
    largest, optimism = largest_decode_batches(mine, predictions)
    profile = replace(fitted, band_low=low, band_high=high,
                      fitted_rows=len(mine), fitted_ids=tuple(r.id for r in mine),
                      fitted_groups=dict(sorted(groups.items())),
                      compute_rows=sum(1 for r in mine if r.metric in PROMPT_METRICS),
                      held=held, fitted_max_batch=largest, max_batch_optimism=optimism)
    notes = held_notes(profile, prior)  # the record, in words: one source for both
    if prior is not None:
        notes += "; its band at least the bundled profile's"
    return replace(profile, source=_fit_source(mine) + notes)


def largest_decode_batches(rows: Sequence[Measurement], predictions: Sequence[Prediction]
                           ) -> tuple[dict[str, int], dict[str, float]]:
    """Per card group, the largest decode batch ``predictions`` (one per row) priced (
    Prediction.batch: a serving throughput naming no batch at the pool's largest, a prefill or
    TTFT at none), and the median optimism of the group's rows near it, priced at half that
    batch or more (+ where it promised more than was measured), recorded only where at least
    MIN_EDGE_ROWS rows are there. The serving fit's nvidia-datacenter rows reach batch 2,048
    (TensorRT-LLM's H100 and GH200 throughputs at 128/128, which name no batch)."""
    largest: dict[str, int] = {}
    for r, p in zip(rows, predictions, strict=True):
        if p.batch is not None:
            group = row_group(r)
            largest[group] = max(largest.get(group, 1), p.batch)
    optimism: dict[str, float] = {}
    for group, batch in sorted(largest.items()):
        near_edge = sorted(o for r, p in zip(rows, predictions, strict=True)
                           if p.batch is not None and row_group(r) == group
                           and 2 * p.batch >= batch and (o := p.optimism) is not None)
        if len(near_edge) >= MIN_EDGE_ROWS:
            optimism[group] = quantile(near_edge, 0.5)
    return dict(sorted(largest.items())), optimism


def condition(row: Measurement) -> tuple[object, ...]:
    """What a row measured, apart from its value: repeats of one condition are one equation."""
    return (row.model, row.weights_dtype, row.kv_dtype, row.gpu, row.num_gpus, row.tp,
            row.batch, row.input_len, row.output_len, row.context_len, row.metric)


def _predictable(rows: Sequence[Measurement], table: Mapping[str, EngineProfile],
                 engine: str) -> list[Measurement]:
    """The rows the model predicts (an unknown model, or one that does not fit its GPUs, cannot
    steer the fit); an InputError with the first reasons when it predicts none."""
    predictions = [predict(r, table) for r in rows]
    usable = [r for r, p in zip(rows, predictions, strict=True) if p.predicted is not None]
    if not usable:
        reasons = "; ".join(f"{p.id}: {p.reason}" for p in predictions[:3])
        raise InputError(f"no row could be predicted for engine {engine}: {reasons}")
    return usable


def source_keys(keys: Iterable[str]) -> str:
    """Source keys in reading order, runs of one letter joined: L1–L16, R1–R3, S5."""
    def split(key: str) -> tuple[str, int | None]:
        head = key.rstrip("0123456789")
        return (head, int(key[len(head):])) if head != key else (key, None)

    parts: list[str] = []
    run: list[tuple[str, int]] = []

    def close() -> None:
        if run:
            (head, first), (_, last) = run[0], run[-1]
            if last - first > 1:
                parts.append(f"{head}{first}–{head}{last}")
            else:
                parts.extend(f"{head}{n}" for n in range(first, last + 1))
            run.clear()

    for key in sorted(set(keys), key=lambda k: (split(k)[0], split(k)[1] or -1, k)):
        head, number = split(key)
        if number is not None and run and run[-1][0] == head and run[-1][1] == number - 1:
            run.append((head, number))
            continue
        close()
        if number is None:
            parts.append(key)
        else:
            run.append((head, number))
    close()
    return ", ".join(parts)


def _fit_source(rows: Sequence[Measurement]) -> str:
    sources = source_keys(r.source_key for r in rows)
    engines = sorted({row_engine(r) for r in rows})
    models = sorted({r.model for r in rows})
    # a fit on one model says so wherever its source is shown (decode, plan, simulate)
    alone = f", all of {models[0]}" if len(models) == 1 else ""
    if len(engines) > 1:
        return (f"fitted on {len(rows)} rows of {', '.join(engines)} together{alone} "
                f"({sources})")
    return f"fitted on {len(rows)} rows{alone} ({sources})"


def fit_profiles(rows: Sequence[Measurement], engines: Iterable[str] | None = None,
                 progress: Callable[[str], None] | None = None,
                 priors: Mapping[str, EngineProfile] | None = None) -> dict[str, EngineProfile]:
    """A profile per engine that has performance rows, at least as many as it has parameters
    (InputError otherwise); ``progress`` hears of each engine as its fit starts; ``priors``
    (by engine) stand where an engine's rows cannot pin a value (fit_engine's prior)."""
    performance = performance_rows(rows)
    names = sorted({row_engine(r) for r in performance})
    if engines is not None:
        names = [engine_id(e) for e in engines if engine_id(e) in names]
    fitted: dict[str, EngineProfile] = {}
    for i, name in enumerate(sorted(names, key=lambda n: n in SAME_KERNELS), 1):
        if progress is not None:  # the kernels' owners first
            n = sum(row_engine(r) == name for r in performance)
            progress(f"fitting {name} on {n} {plural(n, 'row')} ({i} of {len(names)})")
        fitted[name] = calibrate_engine(rows, name, fitted, priors)
    return {name: fitted[name] for name in names}


def calibrate_engine(rows: Sequence[Measurement], name: str,
                     fitted: Mapping[str, EngineProfile],
                     priors: Mapping[str, EngineProfile] | None = None) -> EngineProfile:
    """One engine's profile as `calibrate` fits it (fit_profiles): at least as many rows as
    parameters, the bundled cost per weight matmul kept where the rows cannot pin one, the
    compute share of the engine whose kernels it replays (``fitted``, by engine) where its
    own rows have no prompt, ``priors`` where the rows pin nothing."""
    return fit_same_kernels(rows, name, fitted.get(SAME_KERNELS.get(name, "")), strict=True,
                            held_matmul_s=_bundled_matmul_s(name),
                            prior=(priors or {}).get(name))


def _bundled_matmul_s(engine: str) -> float:
    """The bundled profile's cost per weight matmul, kept by a user's calibration whose rows
    cannot pin one (a file of one model): else the cost per layer would absorb it, and a
    DeepSeek layer's ten matmuls would cost a Llama layer's four."""
    bundled = bundled_profiles().get(engine)
    return bundled.matmul_overhead_s if bundled is not None else 0.0


def fit_same_kernels(rows: Sequence[Measurement], engine: str,
                     owner: EngineProfile | None, *, strict: bool = False,
                     held_matmul_s: float = 0.0,
                     prior: EngineProfile | None = None) -> EngineProfile:
    """fit_engine, with the compute efficiency pulled towards ``owner``'s (the engine whose
    kernels this one replays, SAME_KERNELS) where this engine's rows cannot pin it."""
    if owner is None:
        return fit_engine(rows, engine, strict=strict, held_matmul_s=held_matmul_s, prior=prior)
    owned = replace(prior, compute_efficiency=owner.compute_efficiency) if prior else None
    profile = fit_engine(rows, engine, replace(START, compute_efficiency=owner.compute_efficiency),
                         strict=strict, held_matmul_s=held_matmul_s, prior=owned)
    return replace(profile, source=f"{profile.source}; compute efficiency from {owner.engine}'s "
                                   "rows (the same kernels) where its own have no prefill")
