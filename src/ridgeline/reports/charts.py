"""A chart for every answer: what `--plot FILE` draws for each report."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import singledispatch
from typing import Any

from ridgeline.capacity import held_conversations
from ridgeline.cost import decode_batch, step_cost
from ridgeline.errors import InputError
from ridgeline.kvcache import kv_footprint
from ridgeline.llamacpp_fit import run_pool
from ridgeline.measurements import UNITS
from ridgeline.memory import kv_pool
from ridgeline.moe import expected_experts_touched
from ridgeline.plots import Chart, Series
from ridgeline.predict import row_engine
from ridgeline.reports.decode import DecodeReport
from ridgeline.reports.fit import FitReport
from ridgeline.reports.kv import KVReport
from ridgeline.reports.moe import MoEReport
from ridgeline.reports.plan import PlanReport
from ridgeline.reports.simulate import SimulateReport
from ridgeline.reports.validation import ValidationReport
from ridgeline.units import plural

BATCHES = tuple(2**i for i in range(11))  # 1 … 1024
CONTEXTS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


@singledispatch
def chart_for(report: Any) -> Chart:
    raise InputError(f"--plot is not available for {type(report).__name__}")


@chart_for.register
def _(report: DecodeReport) -> Chart:
    """The sweep of batches at the first context asked, the asked batches among them: the
    floor stops where weights and KV outgrow the memory, the expectation where the engine's
    pool runs out of seats (no speed is drawn for a batch that cannot run)."""
    from ridgeline.engines import profile_for
    from ridgeline.floors import decode_floor
    from ridgeline.stages import micro_batch

    dep = report.deployment
    context = report.floors[0][0].context
    engine = report.expected[0].engine
    profile = report.profile or profile_for(engine)
    seats = dict(report.pool_batch).get(context)
    batches = sorted(set(BATCHES) | {f.batch for f, _ in report.floors if f.context == context}
                     | ({seats} if seats else set()))  # the last batch the engine runs, drawn
    floors = [decode_floor(dep, b, context) for b in batches]
    fits = [f.fit.fits for f in floors]
    runs = [ok and (seats is None or b <= seats) for b, ok in zip(batches, fits)]
    expected = [step_cost(dep, decode_batch(micro_batch(dep, b), context), profile).time_s
                if ok else math.nan for b, ok in zip(batches, runs)]
    xs = tuple(float(b) for b in batches)
    nan = math.nan
    notes = ["The card's output rises with batch; each user's speed falls."]
    if not all(fits):
        last = max((b for b, ok in zip(batches, fits) if ok), default=0)
        weights_alone = floors[0].fit.weight_bytes > floors[0].fit.capacity_bytes
        notes.append(f"The floor stops at batch {last:,}: beyond it weights + KV cache "
                     "outgrow the memory." if last else
                     "No batch fits: the weights alone outgrow the memory." if weights_alone
                     else f"No batch fits: one sequence's {context:,}-token cache beside the "
                     "weights outgrows the memory.")
    asked = sorted({f.context for f, _ in report.floors})
    if len(asked) > 1:
        notes.append(f"Drawn at the first context asked ({context:,} tokens); one plot per "
                     "context for the others.")
    if seats == 0:
        notes.append(f"No expectation: {engine}'s KV pool holds no sequence of {context:,} "
                     "tokens (`ridgeline fit`).")
    elif seats is not None and seats < batches[-1]:
        notes.append(f"The expectation stops at {seats:,} sequences, the most {engine} runs at "
                     f"{context:,} tokens of context: its KV pool, then its seats "
                     "(`ridgeline fit`).")
    return Chart(
        f"{dep.model.name} on {dep.gpus_label}: decode at {context:,} tokens",
        "batch", "tokens/s",
        (Series("aggregate, floor", xs, tuple(f.aggregate_tok_s if ok else nan
                                              for f, ok in zip(floors, fits)), "dashed"),
         Series(f"aggregate, expected ({engine})", xs,
                tuple(b / t for b, t in zip(batches, expected))),
         Series("per user, floor", xs, tuple(f.per_user_tok_s if ok else nan
                                             for f, ok in zip(floors, fits)), "dashed"),
         Series(f"per user, expected ({engine})", xs, tuple(1 / t for t in expected))),
        log_x=True, log_y=True, notes=tuple(notes))


@chart_for.register
def _(report: KVReport) -> Chart:
    """One conversation's cache against its length, over the sweep and the context asked,
    which is marked on the curve. Each figure is the text's "per sequence": summed over the
    tensor-parallel ranks, with the copies they keep where they outnumber the KV heads (MLA's
    latent on every rank: KVFootprint.stored_bytes at the report's replication), and the
    legend says so; one GPU, or no copies, draws the one cache."""
    from ridgeline.catalog import resolve_model

    spec = report.spec or resolve_model(report.model)
    per, states, copies = report.footprint.bytes_per_element, report.state_element_bytes, \
        report.replication
    contexts = sorted(set(CONTEXTS) | {report.context})
    xs = tuple(float(c) for c in contexts)
    right = tuple(kv_footprint(spec, c, per, states).stored_bytes(copies) / 2**30
                  for c in contexts)
    naive = tuple(kv_footprint(spec, 1, per, states).bytes_per_token_naive * c * copies / 2**30
                  for c in contexts)
    asked = report.bytes_per_sequence / 2**30
    over = f", over {report.rank_gpus} GPUs with {report.copied} copies ×{copies:g}" \
        if copies != 1 else ""
    series = [Series(f"KV per conversation{over} (GiB)", xs, right)]
    if naive != right:
        series.append(Series("naive all-layers figure (GiB)", xs, naive, "dashed"))
    series.append(Series(f"asked: {report.context:,} tokens, {asked:,.3f} GiB",
                         (float(report.context),), (asked,), "mark"))
    return Chart(f"{report.model}: KV cache per conversation ({report.kv_dtype})", "context tokens",
                 "GiB", tuple(series), log_x=True, log_y=True)


@chart_for.register
def _(report: FitReport) -> Chart:
    dep, s = report.deployment, report.settings
    xs, ys = [], []
    for c in CONTEXTS:
        # every other knob as fit was given, and the margin llama.cpp's --fit keeps free
        # where it placed the run (llamacpp_fit.run_pool), as fit's own pool leaves it
        at = replace(s, max_model_len=c)
        pool = run_pool(dep, at, report.fit_host is not None, report.fit_margin_bytes)
        held = held_conversations(pool, dep, c)
        if report.fit_host is not None and dep.accelerator.one_memory \
                and held < max(1, report.target or 1):  # --fit finds no placement: llama-server
            pool = kv_pool(dep, at)  # loads every layer as given (fit.unplaced_report)
            held = held_conversations(pool, dep, c)
        xs.append(float(c))
        ys.append(float(min(held, pool.max_num_seqs)))
    series = [Series("conversations of full length at once", tuple(xs), tuple(ys)),
              Series("ridge", tuple(xs), (report.ridge_batch,) * len(xs), "dashed")]
    if report.target:
        series.append(Series("target", tuple(xs), (float(report.target),) * len(xs), "dashed"))
    return Chart(f"{dep.model.name} on {dep.gpus_label} ({dep.engine})",
                 "context tokens", "conversations at once", tuple(series), log_x=True,
                 log_y=True)


@chart_for.register
def _(report: MoEReport) -> Chart:
    xs = tuple(float(b) for b in BATCHES)
    touched = tuple(expected_experts_touched(report.num_experts, report.experts_per_token, b)
                    for b in BATCHES)
    return Chart(f"{report.model}: experts a batch touches", "batch", "experts",
                 (Series("expected experts touched", xs, touched),
                  Series("all experts (what memory holds)", xs,
                         (float(report.num_experts),) * len(xs), "dashed")), log_x=True)


@chart_for.register
def _(report: ValidationReport) -> Chart:
    engines: dict[str, tuple[list[float], list[float]]] = {}
    lookup = {r.id: r for r in report.rows}
    other_units = 0  # predicted rows in ms, GiB, blocks: the title says they are not drawn
    for p in report.predictions:  # speeds alone: one unit on each axis, faster up and right
        if p.predicted is None:
            continue
        if UNITS.get(p.metric) != "tok/s":
            other_units += 1
            continue
        xs, ys = engines.setdefault(row_engine(lookup[p.id]), ([], []))
        xs.append(p.measured)
        ys.append(p.predicted)
    if not engines:
        raise InputError("--plot draws predicted against measured tok/s, and no row measures "
                         "tok/s with a prediction (the report above stands)")
    lo = min(min(v[0]) for v in engines.values())
    hi = max(max(v[0]) for v in engines.values())
    diag = (lo, hi)
    series = [Series(engine, tuple(x), tuple(y), "points") for engine, (x, y) in engines.items()]
    series += [Series("predicted = measured", diag, diag),
               Series("+10%", diag, (lo * 1.1, hi * 1.1), "dashed"),
               Series("−10%", diag, (lo * 0.9, hi * 0.9), "dashed")]
    left_out = (f"; {other_units} {plural(other_units, 'row')} in other units not drawn"
                if other_units else "")
    return Chart(f"ridgeline's predictions against the measurements (tok/s{left_out})",
                 "measured tok/s",
                 "predicted tok/s", tuple(series), log_x=True, log_y=True)


@chart_for.register
def _(report: SimulateReport) -> Chart:
    pts = report.result.rec.series.points
    t = tuple(p[0] for p in pts)
    return Chart(f"{report.deployment.model.name}: the engine over time", "seconds", "requests",
                 (Series("running (vllm:num_requests_running)", t, tuple(float(p[1]) for p in pts)),
                  Series("waiting", t, tuple(float(p[2]) for p in pts), "dashed")))


@chart_for.register
def _(report: PlanReport) -> Chart:
    frontier = report.result.pareto
    return Chart(f"{report.model.name}: Pareto frontier", "tokens/s per user",
                 "tokens/s per GPU",
                 (Series("frontier", tuple(p[1] for p in frontier), tuple(p[0] for p in frontier),
                         "points"),), log_y=True)
