"""`ridgeline validate FILE` and `ridgeline calibrate FILE -o profile.json`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import partial
from typing import Any

from ridgeline.calibrate_audit import Coverage
from ridgeline.calibrate_folds import HeldOut
from ridgeline.calibrate_held import ALL_SIDES, compute_hold, held_parameters
from ridgeline.calibrate_moves import Move, Shift
from ridgeline.calibrate_objective import HUBER_DELTA
from ridgeline.calibrate_space import GROUP_PRIOR
from ridgeline.cost import Seq, decode_batch, mean_decode_context, step_cost
from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile, accelerator_group, bundled_profiles, profile_for
from ridgeline.errors import InputError
from ridgeline.explain import Quantity, Step, q, step
from ridgeline.hardware import resolve_accelerator
from ridgeline.measurements import KV_METRICS, UNITS, Measurement
from ridgeline.metric_divisions import (
    THROUGHPUT_METRICS,
    DecodeDivision,
    PromptDivision,
    ThroughputDivision,
    decode_division,
    prompt_division,
    prompts_per_step,
    step_token_budget,
    throughput_division,
)
from ridgeline.outlier_rows import FAR_FACTOR, OutlierRow, outlier_rows
from ridgeline.predict import Prediction, deployment_for, kv_row_settings, row_profile
from ridgeline.render import table
from ridgeline.scoring import CLOSE_ERRORS, ErrorStats, error_stats
from ridgeline.units import fmt_share, plural

# a marked row, as the text names it: predicted ÷ measured past FAR_FACTOR or under its inverse
FAR = f"off by over {FAR_FACTOR:g}×"
COMPUTE_SHARE = ALL_SIDES["compute_efficiency"]  # held_parameters' name for it
# the summary tables' signed column: Prediction.optimism, a time's error turned into its rate's
# (60.72 ms predicted, 95 measured: error −36.1 %, bias +56.4 %), so its header says so
BIAS_HEADER = "median bias (as a rate)"
# the summary tables' columns: the median, the tails (p90 and the worst row), the shares of
# rows within 10 % and 25 %, the signed median
STATS_HEADERS = ["rows", "median |err|", "p90 |err|", "worst |err|",
                 *(f"≤{close:.0%}" for close in CLOSE_ERRORS), BIAS_HEADER]
# validate's summary tables: (the column each groups its rows by, its title)
SUMMARY_TABLES = (("metric", "metric"), ("fit", "metric: in or out of its profile's fit"),
                  ("engine", "engine"), ("family", "accelerator group"),
                  ("gpu", "accelerator"))
# how metric_divisions turns step times into each metric (its docstring has the definitions)
METRIC_FORMULAS = {
    "decode_tok_s_per_user": "1 ÷ decode step time, the batch's caches midway through the "
                             "generation",
    "prefill_tok_s": "prompts × prompt tokens ÷ prefill time (llama.cpp: 512-token ubatches, "
                     "each attending to those before)",
    "output_throughput_tok_s": "sequences × output tokens ÷ (prefill + output tokens × decode "
                               "step)",
    "output_throughput_tok_s_per_gpu": "sequences × output tokens ÷ (prefill + output tokens × "
                                       "decode step) ÷ GPUs",
    "ttft_ms": "one prompt's prefill in one pass",
    **{m: "the engine's KV pool, as `ridgeline fit` sizes it" for m in KV_METRICS},
}


def metric_formula(row: Measurement) -> str:
    """The formula that turned step times into this row's metric, for its case alone
    (predict.output_throughput): a throughput row with no batch runs as many sequences as the
    KV pool holds, and a llama-batched-bench S_TG row times the decode steps only."""
    formula = METRIC_FORMULAS.get(row.metric, row.metric)
    if row.metric not in THROUGHPUT_METRICS:
        return formula
    per_gpu = " ÷ GPUs" if row.metric == "output_throughput_tok_s_per_gpu" else ""
    if "S_TG" in row.notes:
        return "llama-batched-bench S_TG: sequences ÷ decode step (the decode steps only)" \
            + per_gpu
    if row.batch is None:
        return (formula.removesuffix(per_gpu) + ", with as many sequences as the KV pool holds "
                "(no batch stated)" + per_gpu)
    return formula


def prediction_steps(rows: Sequence[Measurement], predictions: Sequence[Prediction],
                     profiles: Mapping[str, EngineProfile] | None = None) -> tuple[Step, ...]:
    """One step per row: what its prediction assumed (the deployment, the engine profile, the
    row's conditions) and the formula that turned step times into its metric."""
    steps = []
    for row, p in zip(rows, predictions, strict=True):
        measured = q("measured", row.value, row.unit)
        if p.predicted is None:
            steps.append(step(row.id, f"no prediction: {p.reason}", _predicted(row, p),
                              measured))
            continue
        try:
            dep = deployment_for(row)
        except InputError:  # pragma: no cover - predicted rows have a deployment
            continue
        if row.metric in KV_METRICS:
            steps.append(_kv_step(row, p, dep, measured))
            continue
        attention = "flash-style" if dep.flash_attention else "without flash attention"
        stated = row.flash_attention()
        if dep.engine.startswith("llama.cpp"):
            attention += ("  [row notes]" if stated is not None
                          else "  [not stated: llama-bench's default, -fa off]")
        conditions = ", ".join(f"{name} {value:,}" for name, value in (
            ("batch", row.batch), ("input", row.input_len), ("output", row.output_len),
            ("context", row.context_len)) if value is not None)
        formula = metric_formula(row)
        if row.serving_tpot():  # a serving harness's TPOT: the others' prompts among its steps
            formula = ("1 ÷ (decode step time + the other c − 1 requests' prompts prefilled "
                       "among its output − 1 steps), as a serving TPOT counts them")
        # a throughput row with no batch runs what the pool holds: the sequences it was priced at
        priced = [q("sequences", p.batch, "", "as many as the engine runs at input + output "
                    "tokens: its KV pool at its offline defaults, a batch run's, and its "
                    "seats")] if row.batch is None and p.batch and row.metric in \
            THROUGHPUT_METRICS and "S_TG" not in row.notes else []
        steps.append(step(
            row.id, formula,
            _predicted(row, p), q("deployment", _deployment(dep)),
            q("conditions", conditions or "none stated"), *priced,
            q("attention", attention),
            q("engine profile", dep.engine, "", profile_for(dep.engine, profiles).source),
            *_division(row, dep, profiles), measured))
    return tuple(steps)


def _division(row: Measurement, dep: Deployment,
              profiles: Mapping[str, EngineProfile] | None) -> list[Quantity]:
    """The intermediate times of a speed or TTFT row, from the objects its prediction was
    computed with (metric_divisions' decode_division, prompt_division, throughput_division): the
    step or prefill times, their operators, and the division that makes the metric."""
    profile = row_profile(row, dep, profiles)
    d = decode_division(row, dep, profile)
    if d is not None:
        return _decode_quantities(row, dep, profile, d)
    prompt = prompt_division(row, dep, profile)
    if prompt is not None:
        return _prompt_quantities(row, dep, profile, prompt)
    run = throughput_division(row, dep, profile)
    return [] if run is None else _throughput_quantities(row, dep, profile, run)


def _parts(dep: Deployment, batch: list[Seq], profile: EngineProfile, what: str) -> Quantity:
    """One step's time by operator, as step_cost prices it (the step the prediction's time
    is), largest first: the weights' matmuls, attention (its KV cache read in a decode),
    collectives and the engine's fixed costs ("overhead")."""
    cost = step_cost(dep, batch, profile)
    ops = sorted(cost.ops, key=lambda op: -op.time_s)
    return q(f"{what} by operator", ", ".join(
        f"{op.name} {op.time_s * 1e3:.4g} ms" + (f" ({op.bound}-bound)" if op.bound in (
            "compute", "memory") else "") for op in ops),
        "", f"step_cost, {cost.time_s * 1e3:.4g} ms in all: attention reads the KV cache, "
        "the matmuls the weights; overhead is the profile's fixed costs")


def _per_gpu(row: Measurement) -> bool:
    return row.metric.endswith("per_gpu") and row.num_gpus > 1


def _decode_quantities(row: Measurement, dep: Deployment, profile: EngineProfile,
                       d: DecodeDivision) -> list[Quantity]:
    """A decode speed's step time, its operators and the division that makes it tok/s
    (1 ÷ step a user, the batch ÷ step for an S_TG row)."""
    mid = mean_decode_context(d.start, d.generated)
    out = [q("decode step", d.step_s * 1e3, "ms",
             f"{d.batch:,} {plural(d.batch, 'sequence')} at {mid:,} tokens of context, midway"
             f" from {d.start:,} to {d.start + d.generated:,}"),
           _parts(dep, decode_batch(d.batch, mid), profile, "decode step")]
    step_ms = f"{d.step_s * 1e3:.4g} ms"
    if d.others_s:
        out.append(q("other prompts a step", d.others_s * 1e3, "ms",
                     "the other requests' prompts prefilled among its output"))
        step_ms = f"({step_ms} + {d.others_s * 1e3:.4g} ms)"
    tok_s = d.tok_s / row.num_gpus if _per_gpu(row) else d.tok_s
    out.append(q("division", f"{d.sequences:,} ÷ {step_ms}"
                 + (f" ÷ {row.num_gpus} GPUs" if _per_gpu(row) else "")
                 + f" = {tok_s:,.4g} tok/s"))
    return out


def _prompt_quantities(row: Measurement, dep: Deployment, profile: EngineProfile,
                       p: PromptDivision) -> list[Quantity]:
    """A prefill speed's or a TTFT's prefill time, its (first) pass's operators, and the
    division that makes the metric."""
    depth = f" after {p.depth:,} cached" if p.depth else ""
    prompts = f"{p.prompts:,} {plural(p.prompts, 'prompt')} of {p.tokens:,} tokens{depth}"
    if p.ubatch is not None and p.passes > 1:
        how = (f"{prompts}, in {p.passes:,} ubatches of at most {p.ubatch:,} tokens, each "
               "re-reading the weights and attending to the tokens before it")
        first = [Seq(min(p.ubatch, p.tokens), p.depth)]
        what = "first ubatch"
    else:
        how = f"{prompts}, in one pass"
        first = [Seq(p.tokens, p.depth)] * p.prompts
        what = "prefill step"
    out = [q("prefill", p.prefill_s * 1e3, "ms", how), _parts(dep, first, profile, what)]
    if row.metric == "ttft_ms":
        out.append(q("division", f"TTFT = the prefill = {p.ttft_ms:,.4g} ms"))
    else:
        out.append(q("division", f"{p.prompts:,} × {p.tokens:,} ÷ {p.prefill_s * 1e3:.4g} ms"
                     f" = {p.tok_s:,.4g} tok/s"))
    return out


def _throughput_quantities(row: Measurement, dep: Deployment, profile: EngineProfile,
                           t: ThroughputDivision) -> list[Quantity]:
    """A serving throughput's prefill and decode step, the step's operators, and the
    division that makes it tok/s."""
    out = []
    step_ms = f"{t.step_s * 1e3:.4g} ms"
    if t.input:
        budget = step_token_budget(dep.engine)
        per_step = prompts_per_step(dep.engine, t.input)
        steps = -(-t.sequences // per_step)
        out.append(q("prefill", t.prefill_s * 1e3, "ms",
                     f"{t.sequences:,} {plural(t.sequences, 'prompt')} of {t.input:,} tokens, "
                     f"{per_step:,} a step under the engine's {budget:,}-token budget: "
                     f"{steps:,} {plural(steps, 'step')}"))
    mid = mean_decode_context(t.input, t.output)
    out += [q("decode step", t.step_s * 1e3, "ms",
              f"{t.sequences:,} {plural(t.sequences, 'sequence')} at {mid:,} tokens of "
              f"context, midway from {t.input:,} to {t.input + t.output:,}"),
            _parts(dep, decode_batch(t.sequences, mid), profile, "decode step")]
    tok_s = t.tok_s / row.num_gpus if _per_gpu(row) else t.tok_s
    out.append(q("division", f"{t.sequences:,} × {t.output:,} ÷ ({t.prefill_s * 1e3:.4g} ms "
                 f"+ {t.output:,} × {step_ms})" + (f" ÷ {row.num_gpus} GPUs" if _per_gpu(row)
                                                   else "") + f" = {tok_s:,.4g} tok/s"))
    return out


def profile_steps(profiles: Mapping[str, EngineProfile]) -> tuple[Step, ...]:
    """One step per fitted engine: the step-time formula its rows were fitted through, the
    objective, and each coefficient with where it came from (fitted, or held)."""
    steps = []
    for engine, p in profiles.items():
        prior = bundled_profiles().get(engine)
        held = dict(held_parameters(p, prior))
        source = partial(_source, held)
        compute = "fitted" if p.compute_fitted else f"{compute_hold(p, prior)}: no prompt rows"
        inputs = [
            q("rows fitted", p.fitted_rows, "", ", ".join(f"{g} {n}" for g, n in
                                                     p.fitted_groups.items())),
            q("bandwidth share", p.bandwidth_efficiency, "of rated", source("bandwidth share")),
            q("compute share", p.compute_efficiency, "of dense peak", compute),
            q("per step", _us(p.step_overhead_s), "µs", source("cost per step")),
            q("per layer", _us(p.layer_overhead_s), "µs", source("cost per layer")),
        ]
        if p.prefill_layer_overhead_s is not None:
            inputs.append(q("per layer of a prompt step", _us(p.prefill_layer_overhead_s), "µs",
                            source("cost per layer of a prompt step")))
        if p.matmul_overhead_s:
            inputs.append(q("per weight matmul", _us(p.matmul_overhead_s), "µs",
                            source("cost per weight matmul")))
        if p.moe_layer_overhead_s:
            inputs.append(q("per MoE layer", _us(p.moe_layer_overhead_s), "µs",
                            source("cost per MoE layer")))
        if p.bandwidth_cap_bytes_per_s is not None:
            inputs.append(q("bandwidth ceiling", p.bandwidth_cap_bytes_per_s / 1e12, "TB/s",
                            source("bandwidth ceiling",
                                   "fitted: a matrix-vector kernel's bytes in flight")))
        inputs += [q(f"bandwidth share on {g}", v, "x the share above",
                     source("bandwidth by card group",
                            f"fitted, pulled towards 1 by {GROUP_PRIOR} × ln²"))
                   for g, v in p.group_bandwidth.items()]
        inputs.append(q("objective", f"mean Huber(ln(predicted ÷ measured), δ {HUBER_DELTA}) "
                        "over the rows, minimised by Nelder–Mead"))
        steps.append(step(
            f"{engine} profile",
            "step time = per step + layers × per layer (+ weight-matmul launches × per matmul, + MoE "
            "layers × per MoE layer) + Σ over "
            "operators max(FLOPs ÷ (peak × compute share), bytes ÷ (bandwidth × bandwidth "
            "share)) + collectives",
            q("band", f"{p.band_low:.2f}–{p.band_high:.2f}", "× the expectation",
              "p10–p90 of measured ÷ predicted over the rows"),
            *inputs))
    return tuple(steps)


def _source(held: Mapping[str, str], words: str, fitted: str = "fitted") -> str:
    """A coefficient's source: ``fitted``, or where the fit held it at the bundled profile's
    (``held``: held_parameters, by parameter), why."""
    return f"the bundled profile's: {held[words]}" if words in held else fitted


def _us(seconds: float) -> float:
    """Seconds as µs to two decimals (a fitted 5e-12 µs reads 0)."""
    return round(seconds * 1e6, 2)


def _kv_step(row: Measurement, p: Prediction, dep: Deployment, measured: Quantity) -> Step:
    settings = kv_row_settings(row)
    stated = ", ".join(f"{f.name} {getattr(settings, f.name)}" for f in fields(settings)
                       if getattr(settings, f.name) not in (None, False, f.default))
    inputs = [q("deployment", _deployment(dep)),
              q("engine", dep.engine, "", "version " + (settings.engine_version or "not stated: "
                                                        "the newest modelled")),
              q("settings the row states", stated or "none: the engine's defaults"), measured]
    if p.caveat:
        inputs.append(q("caveat", p.caveat))
    return step(row.id, METRIC_FORMULAS[row.metric], _predicted(row, p), *inputs)


def _deployment(dep: Deployment) -> str:
    return (f"{dep.model.name} on {dep.num_gpus} x {dep.accelerator.id} "
            f"(TP {dep.tensor_parallel_size}), weights {dep.weights.label}, KV {dep.kv.id}, "
            f"matmuls at {dep.matmuls_label}")


def _predicted(row: Measurement, p: Prediction) -> Quantity:
    return q("predicted", p.predicted if p.predicted is not None else "-", row.unit,
             "" if p.error is None else f"error {p.error:+.1%}")


def _card(name: str) -> str:
    """The catalog id a row's accelerator resolves to (its own name where none does)."""
    try:
        return resolve_accelerator(name).id
    except InputError:
        return name


def _family(name: str) -> str:
    """The group a row's accelerator is in (engines.accelerator_group: nvidia-datacenter,
    apple, amd-radeon, …; its own name where no card resolves)."""
    try:
        return accelerator_group(resolve_accelerator(name))
    except InputError:
        return name


# the summary tables that split a group's KV-capacity rows from its speed rows: the memory
# model's 1–2 % would otherwise set an engine's median, read as its speed's
KIND_SPLIT = ("engine", "family", "gpu")
KV_GROUP = ": KV capacity"  # a capacity row's group, after the engine's or card's name


def _group(row: Measurement, column: str) -> str:
    """The summary group a row falls in under ``column``: the card by its catalog id
    (h100, 'NVIDIA H100 80GB HBM3' alike), the accelerator group, or the column's value; an
    engine's or card's KV-capacity rows apart, as 'vllm: KV capacity'."""
    name = (_card(row.gpu) if column == "gpu" else _family(row.gpu) if column == "family"
            else str(getattr(row, column)))
    return name + KV_GROUP if column in KIND_SPLIT and row.metric in KV_METRICS else name


def _stats_rows(stats: Sequence[ErrorStats]) -> list[list[str]]:
    return [[s.group, str(s.rows), f"{s.median_abs_error:.1%}", f"{s.p90_abs_error:.1%}",
             f"{s.max_abs_error:.1%}", f"{s.within_10_percent:.0%}",
             f"{s.within_25_percent:.0%}", f"{s.median_bias:+.1%}"] for s in stats]


@dataclass(frozen=True)
class ValidationReport:
    rows: tuple[Measurement, ...]
    predictions: tuple[Prediction, ...]
    read_errors: tuple[str, ...]
    show_rows: bool = True
    steps: tuple[Step, ...] = ()
    strict: bool = False  # --strict: a row unread or unpredicted fails the run
    notes: tuple[str, ...] = ()  # about the run as a whole (a --profile no row used)
    # (row id, the slip it looks like) for each row far off in the direction of a unit slip
    # (unit_slips.py): scored, in the tables, and named under them even with --summary
    slips: tuple[tuple[str, str], ...] = ()
    # the ids of the rows their profile was fitted on (scoring.fitted_row_ids): in sample
    in_sample: frozenset[str] = frozenset()

    @property
    def failure(self) -> str:
        """Under --strict, why the run fails (one line), else ""."""
        missing = sum(p.predicted is None for p in self.predictions)
        if not self.strict or not (missing or self.read_errors):
            return ""
        n = len(self.read_errors)
        return (f"--strict: {n} {plural(n, 'row')} unreadable and {missing} without a "
                "prediction (each named above)")

    def _by(self, column: str) -> list[ErrorStats]:
        lookup = {r.id: r for r in self.rows}
        if column == "fit":  # the rows its profile was fitted on apart from the others
            return error_stats(self.predictions, lambda p: f"{p.metric}: " + (
                "in sample" if p.id in self.in_sample else "out of sample"))
        return error_stats(self.predictions, lambda p: _group(lookup[p.id], column))

    def _sample_counts(self) -> tuple[int, int]:
        """(scored rows their profile was fitted on, scored rows)."""
        scored = [p for p in self.predictions if p.error is not None]
        return sum(1 for p in scored if p.id in self.in_sample), len(scored)

    def _tables(self) -> tuple[tuple[str, str], ...]:
        """The summary tables shown: in or out of the fit apart only where the rows mix."""
        inside, scored = self._sample_counts()
        return tuple(t for t in SUMMARY_TABLES if t[0] != "fit" or 0 < inside < scored)

    def _sample_line(self) -> str:
        """How many scored rows are in sample (their profile was fitted on them), said so
        that no in-sample figure reads as the error on a new row."""
        inside, scored = self._sample_counts()
        whose = "their profile (or a term fitted beside it) was fitted on"
        if not inside:
            return f"out of sample: no scored row is among those {whose}"
        how = ("their errors say how far the fit bends to them, not how far off a new row "
               "would be (the bundled profiles' held-out errors: docs/accuracy.md)")
        if inside == scored:
            return f"in sample: all {scored:,} scored rows are among those {whose}: {how}"
        return (f"in sample: {inside:,} of the {scored:,} scored rows are among those {whose}, "
                f"apart in the second table: {how}")

    @property
    def outliers(self) -> tuple[OutlierRow, ...]:
        """The scored rows off by over FAR_FACTOR either way, each with its reason
        (outlier_rows)."""
        return outlier_rows(self.rows, self.predictions)

    def _without_explained(self, column: str) -> list[tuple[ErrorStats, ErrorStats | None]]:
        """(with, without) for each group of ``column`` that holds an explained outlier: its
        figures over every row, and with the explained outliers left out (None: no row left)."""
        explained = {o.id for o in self.outliers if o.explained}
        if not explained:
            return []
        kept = [p for p in self.predictions if p.id not in explained]
        without = {s.group: s for s in ValidationReport(self.rows, tuple(kept), ())._by(column)}
        lookup = {r.id: r for r in self.rows}
        touched = {_group(lookup[i], column) for i in explained}
        return [(s, without.get(s.group)) for s in self._by(column) if s.group in touched]

    def _outlier_lines(self, outliers: tuple[OutlierRow, ...]) -> list[str]:
        """Under the count of scored rows: how many are off by over FAR_FACTOR, that the medians keep
        them, and the medians without the explained ones (labelled); under --summary each such
        row and its reason, the rows' table not shown."""
        if not outliers:
            return []
        n = len(outliers)
        by = {"caveat": 0, "notes": 0, "": 0}
        for o in outliers:
            by[o.source] += 1
        explained = by["caveat"] + by["notes"]
        lines = [f"{n} {plural(n, 'row')} {FAR} (predicted over twice or under half the "
                 "measured: error past +100 % or under −50 %), in every median and p90 "
                 f"above ({by['caveat']} with a caveat, {by['notes']} explained by the row's "
                 f"notes, {by['']} unexplained)"]
        if not self.show_rows:
            lines += [f"  {FAR}: {o.id} {o.error:+.1%} ({o.factor_words}): "
                      + ("caveat (shown without --summary)" if o.source == "caveat" else o.reason)
                      for o in outliers]
        if explained:
            # the rows left out named as the count above names them: a caveat is no note
            left = " and ".join(words for count, words in (
                (by["caveat"], f"the {by['caveat']} with a caveat"),
                (by["notes"], f"the {by['notes']} explained by their notes")) if count)
            lines.append(f"  without {left} (the {by['']} unexplained kept), "
                         "median |err| and p90 |err|:")
            for column in ("metric", "engine", "gpu"):
                lines += [f"    {a.group}: " + (
                    f"{a.median_abs_error:.1%} → {b.median_abs_error:.1%}, {a.p90_abs_error:.1%}"
                    f" → {b.p90_abs_error:.1%} ({b.rows} of {a.rows} rows)" if b else
                    f"all {a.rows} left out") for a, b in self._without_explained(column)]
        return lines

    def to_dict(self) -> dict[str, Any]:
        """Every row, its summary tables, what could not be read; under --summary the rows
        only those without a prediction, as the text names them (``rows_left_out``: how many
        scored rows it leaves out, 0 without --summary)."""
        shown = [p for p in self.predictions if self.show_rows or p.predicted is None]
        lookup = {r.id: r for r in self.rows}
        return {
            # each row's model, engine and card as the summary groups them (the card by the
            # catalog id its name resolves to: 'h100' is h100-sxm)
            "rows": [{"id": p.id, "model": lookup[p.id].model,
                      "engine": str(lookup[p.id].engine), "gpu": _card(lookup[p.id].gpu),
                      "metric": p.metric, "unit": UNITS.get(p.metric),
                      "measured": p.measured,
                      "predicted": p.predicted, "low": p.low, "high": p.high,
                      "error": p.error, "reason": p.reason or None,
                      "caveat": p.caveat or None, "priced_batch": p.batch,
                      "in_sample": p.id in self.in_sample}
                     for p in shown],
            "rows_left_out": len(self.predictions) - len(shown),  # --summary's scored rows
            "summary": {column: [vars(s) for s in self._by(column)]
                        for column, _ in SUMMARY_TABLES},
            # how many scored rows their profile was fitted on (rows' in_sample)
            "in_sample_rows": sum(1 for p in self.predictions
                                  if p.error is not None and p.id in self.in_sample),
            "read_errors": list(self.read_errors),
            "notes": list(self.notes),
            # rows that look written in another unit, scored and in the summary
            "unit_slips": [{"id": row_id, "slip": words} for row_id, words in self.slips],
            # rows off by over 2× either way (in every summary figure above) and why:
            # "caveat", "notes" (a phrase of the row's notes, quoted) or null (unexplained)
            "off_by_over_2x": [{"id": o.id, "error": o.error, "reason": o.reason,
                                "explained_by": o.source or None} for o in self.outliers],
            # the summary's groups that hold an explained one, figured without those rows
            "summary_without_explained": {
                column: [vars(b) for _, b in self._without_explained(column) if b]
                for column in ("metric", "engine", "gpu")},
        }

    def text_lines(self) -> list[str]:
        lines: list[str] = []
        outliers = self.outliers
        unmarked = {o.id: o for o in outliers if o.source != "caveat"}  # no * of their own
        if self.show_rows:
            # in or out of the fit, a column where the rows mix (as the 'fit' table): where
            # all or none are in sample, the count under the tables says so for every row
            mixed = any(t[0] == "fit" for t in self._tables())
            rows = [[p.id, p.metric, figure(p.measured),
                     "-" if p.predicted is None else figure(p.predicted),
                     "- †" if p.error is None else f"{p.error:+.1%}" + (
                         " *" if p.caveat else " !" if p.id in unmarked else ""),
                     *([_fit_mark(p, self.in_sample)] if mixed else [])]
                    for p in self.predictions]
            lines += table(rows, ["id", "metric", "measured", "predicted", "error",
                                  *(["fit"] if mixed else [])])
            if mixed:
                lines.append(FIT_LEGEND)
            lines.append("")
            reasons: dict[str, list[str]] = {}  # under the table: a reason in it would widen it
            for p in self.predictions:
                if p.error is None:
                    reasons.setdefault(p.reason, []).append(p.id)
            if reasons:
                lines.append("† no prediction:")
                lines += [f"  {_some(ids)}: {reason}" for reason, ids in reasons.items()]
                lines.append("")
            caveats: dict[str, list[str]] = {}  # one line per caveat, with the rows it covers
            for p in self.predictions:
                if p.caveat and p.error is not None:
                    caveats.setdefault(p.caveat, []).append(p.id)
            if caveats:
                lines.append("* still scored, with a caveat (what the engine did that the model "
                             "leaves out, or why the row looks wrong):")
                lines += [f"  {ids[0] if len(ids) == 1 else f'{len(ids)} rows ({ids[0]}, …)'}: "
                          f"{caveat}" for caveat, ids in caveats.items()]
                lines.append("")
            if unmarked:
                lines.append(f"! {FAR} with no caveat: the reason the row's notes give, or "
                             "unexplained:")
                lines += [f"  {o.id}: {o.reason}" for o in unmarked.values()]
                lines.append("")
        for column, title in self._tables():
            lines += table(_stats_rows(self._by(column)), [title, *STATS_HEADERS])
            lines.append("")
        lines.append("error = predicted ÷ measured − 1 (a time's + is slower); bias, as a rate "
                     "(a time's measured ÷ predicted − 1, so its sign is the opposite of its "
                     "error's): + where the prediction promises more than measured (faster, or "
                     "more capacity)")
        if any(p.error is not None and p.metric in KV_METRICS for p in self.predictions):
            lines.append(f"'{KV_GROUP[2:]}' after an engine, group or card: its KV-capacity "
                         "rows (the memory model's pool, no step time), apart from its speed "
                         "rows")
        unpredicted = sum(1 for p in self.predictions if p.predicted is None)
        scored = len(self.predictions) - unpredicted
        slips = len(self.slips)
        lines.append(f"{scored} {plural(scored, 'row')} scored"
                     + (f" ({slips} of them far off as a unit slip would put "
                        f"{'it' if slips == 1 else 'them'}: in the tables above)"
                        if slips else "")
                     + f", {unpredicted} without a prediction (reason given), "
                     f"{len(self.read_errors)} unreadable")
        if not self.show_rows:  # --summary: the rows' caveats are not shown, the slips are
            lines += [f"  far off: {row_id}: {words}" for row_id, words in self.slips]
        lines.append(self._sample_line())
        lines += self._outlier_lines(outliers)
        lines += [f"  unreadable: {e}" for e in self.read_errors]
        lines += [f"note: {n}" for n in self.notes]
        if not self.show_rows:  # --summary: the rows' table is not shown, their reasons are
            lines += [f"  no prediction: {p.id}: {p.reason}" for p in self.predictions
                      if p.predicted is None]
        return lines


# the rows' table's 'fit' column, under it (as narrow as the table: ids set its width)
FIT_LEGEND = "fit: in = its profile (or a term fitted beside it) was fitted on the row; out = not"


def _fit_mark(p: Prediction, in_sample: frozenset[str]) -> str:
    """A scored row's 'fit' cell: ``in`` where its profile was fitted on it, else ``out``
    ("" for a row with no prediction, which no fit took)."""
    if p.error is None:
        return ""
    return "in" if p.id in in_sample else "out"


def _some(ids: list[str], shown: int = 3) -> str:
    """Up to ``shown`` row ids, and how many more: "a, b, c and 4 more"."""
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(ids[:shown]) + more


@dataclass(frozen=True)
class CalibrationReport:
    profiles: Mapping[str, EngineProfile]
    before: tuple[ErrorStats, ...]
    after: tuple[ErrorStats, ...]
    output: str
    steps: tuple[Step, ...] = ()
    unreadable: tuple[str, ...] = ()  # rows the reader refused, with why
    skipped: tuple[str, ...] = ()  # rows left out of the fit, with why (past the roofline)
    cautions: tuple[str, ...] = ()
    coverage: Mapping[str, Coverage] = field(default_factory=dict)  # by engine
    # each engine's rows predicted by it refitted without them (calibrate_folds), by metric
    held_out: tuple[HeldOut, ...] = ()
    held_out_stats: tuple[ErrorStats, ...] = ()
    # by engine: what moved from the bundled profile, and its predictions of the rows with it
    moves: Mapping[str, tuple[Move, ...]] = field(default_factory=dict)
    shifts: Mapping[str, Shift] = field(default_factory=dict)

    def prior(self, engine: str) -> EngineProfile | None:
        """The bundled profile ``engine``'s fit stood on where its rows pinned nothing."""
        return bundled_profiles().get(engine)

    def held(self, engine: str) -> tuple[tuple[str, str], ...]:
        """(parameter, why) for each of the engine's parameters the fit held at the bundled
        profile's, its rows unable to pin it."""
        return held_parameters(self.profiles[engine], self.prior(engine))

    def to_dict(self) -> dict[str, Any]:
        return {"output": self.output,
                "profiles": {e: p.to_dict() for e, p in self.profiles.items()},
                "held": {e: [{"parameter": name, "why": why} for name, why in self.held(e)]
                         for e in self.profiles},
                "coverage": {e: c.to_dict() for e, c in self.coverage.items()},
                "before": [vars(s) for s in self.before], "after": [vars(s) for s in self.after],
                # each engine's rows predicted without them (folds: 0 where not run, reason)
                "held_out": [vars(s) for s in self.held_out_stats],
                "held_out_runs": [{"engine": h.engine, "folds": h.folds,
                                   "rows": len(h.predictions), "unscored": list(h.unscored),
                                   "reason": h.reason or None} for h in self.held_out],
                # by engine: each value that moved from the bundled profile (shares 0–1, costs
                # in s), and the new predictions ÷ the bundled ones as speeds
                "moved": {e: [vars(m) for m in moves] for e, moves in self.moves.items()},
                "prediction_shift": {e: vars(s) for e, s in self.shifts.items()},
                "unreadable": list(self.unreadable), "skipped": list(self.skipped),
                "cautions": list(self.cautions)}

    def text_lines(self) -> list[str]:
        lines = [f"wrote {self.output}"]
        for engine, p in self.profiles.items():
            groups = ", ".join(f"{g} x{v:.2f} = {fmt_share(p.group_bandwidth_share(g))}"
                               for g, v in p.group_bandwidth.items())
            base = " (a base, times each group's factor below; cards outside them)" \
                if groups else ""
            lines.append(f"  {engine}: bandwidth {p.bandwidth_efficiency:.0%}{base}, compute "
                         f"{p.compute_efficiency:.0%}"
                         + ("" if p.compute_fitted else f" ({compute_hold(p, self.prior(engine))}"
                            ": no prefill or TTFT row to fit it)")
                         + f", {p.step_overhead_s * 1e6:,.0f} µs/step, "
                         f"{p.layer_overhead_s * 1e6:,.1f} µs/layer"
                         + (f" ({p.prefill_layer_overhead_s * 1e6:,.1f} µs/layer in a prefill step)"
                            if p.prefill_layer_overhead_s is not None else "")
                         + (f", {p.matmul_overhead_s * 1e6:,.1f} µs/weight matmul"
                            if p.matmul_overhead_s else "")
                         + (f", {p.moe_layer_overhead_s * 1e6:,.1f} µs/MoE layer"
                            if p.moe_layer_overhead_s else "")
                         + (f"; bandwidth by group: {groups}" if groups else "")
                         + (f"; bandwidth ceiling {p.bandwidth_cap_bytes_per_s / 1e12:.2f} TB/s"
                            if p.bandwidth_cap_bytes_per_s is not None else "")
                         + f"; band {p.band_low:.2f}–{p.band_high:.2f}")
            cover = self.coverage.get(engine)
            if cover is not None:
                lines.append(f"    fitted on {p.fitted_rows:,} rows: {cover.shown}")
            held: dict[str, list[str]] = {}
            for name, why in self.held(engine):
                if name == COMPUTE_SHARE and not p.compute_fitted:
                    continue  # its hold is said above
                held.setdefault(why, []).append(name)
            lines += [f"    held at the bundled profile's ({why}): {', '.join(names)}"
                      for why, names in held.items()]
            moves = self.moves.get(engine, ())
            if moves:
                lines.append("    moved from the bundled profile: "
                             + ", ".join(m.shown for m in moves))
            if engine in self.shifts:
                lines.append(f"    {self.shifts[engine].shown}")
        lines.append("")
        before = {s.group: s for s in self.before}
        unseen = {s.group: s for s in self.held_out_stats}
        rows = [[s.group, str(s.rows), f"{before[s.group].median_abs_error:.1%}"
                 if s.group in before else "-", f"{s.median_abs_error:.1%}",
                 f"{unseen[s.group].median_abs_error:.1%} ({unseen[s.group].rows})"
                 if s.group in unseen else "-"] for s in self.after]
        lines += table(rows, ["metric", "rows", "before (bundled)", "after (this profile)",
                              "held out (rows)"])
        lines.append("median |error|: before and after over the rows the profile was fitted on "
                     "(in sample: how far it bends to them); held out, each row predicted by "
                     "the profile refitted without it (its error on a row it has not seen)")
        lines += [f"  {h.shown}" for h in self.held_out]
        lines += [f"  unreadable: {e}" for e in self.unreadable]
        lines += [f"  left out: {e}" for e in self.skipped]
        lines += [f"caution: {c}" for c in self.cautions]
        lines.append(f"use it with --profile {self.output}")
        return lines


def figure(value: float) -> str:
    """A measured or predicted figure: whole above 10,000 (973,760, not 9.738e+05), else to
    four significant digits."""
    if abs(value) >= 1e4:
        return f"{value:,.0f}"
    return f"{value:,.4g}"
