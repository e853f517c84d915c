#!/usr/bin/env python3
"""How ridgeline's floor and calibrated prediction compare with an H200 measured by
`ridgeline measure` (a benchmark, not a test).

    python scripts/h200_report.py            # prints the tables, writes docs/h200.md
    python scripts/h200_report.py --predict  # writes the next run's predictions (PLAN), first

Rows: validation/h200/*.csv (random-weight models, eager and CUDA-graph decode steps, eager
prefill). For each row, as a step time:
  - the floor on the catalog's H200 (rated 4.8 TB/s, 989 TFLOP/s bf16): the article's
    roofline, no efficiency, no overhead;
  - the floor on the H200 as probed the same day (its measured copy/read bandwidth and best
    matmul; validation/h200/*.accelerator.json);
  - the calibrated prediction, leave one model out: the engine's profile fitted (against the
    catalog H200) on the other models' rows only, then used on this model's rows.
And a test ridgeline cannot have been tuned to: before a second run, `--predict` writes what
the bundled profiles (fitted on the first run) expect for models and batches not yet measured
(PLAN), committed before that run; the report sets the run's rows beside them.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ridgeline.calibrate import SAME_KERNELS, _quantile, fit_same_kernels
from ridgeline.cost import IDEAL
from ridgeline.engines import EngineProfile
from ridgeline.hardware import load_accelerator_file, register
from ridgeline.measure import _decode_row
from ridgeline.measurements import Measurement, parse_row, read_measurements
from ridgeline.predict import predict

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "validation" / "h200"
OUT = ROOT / "docs" / "h200.md"
# the second run: model -> (batches, contexts), steps only after the first model's probes.
# Llama-3.1-8B over batch at a short context walks up to the H200's ridge and past it.
PLAN = {"llama-3.1-8b": ((1, 16, 64, 128, 192, 256, 384, 512, 768, 1024), (128,)),
        "mistral-7b": ((1, 16, 64), (4096, 16384)),
        "llama-3.2-3b": ((1, 32, 128), (4096,)),
        "qwen3-8b": ((1, 64), (8192,))}
PREDICTED = DATA / "run2.predicted.csv"


def step_ms(row: Measurement, value: float) -> float:
    """A row's figure (tok/s) as the time of the step it timed, in ms."""
    if row.metric == "decode_tok_s_per_user":
        return 1e3 / value
    if row.metric == "output_throughput_tok_s":
        return 1e3 * (row.batch or 1) / value
    return 1e3 * (row.input_len or 0) / value  # prefill_tok_s: the whole prompt


def predicted_ms(row: Measurement, profile: EngineProfile) -> float:
    prediction = predict(row, {row.engine: replace(profile, engine=row.engine)})
    if prediction.predicted is None:
        raise SystemExit(f"{row.id}: no prediction ({prediction.reason})")
    return step_ms(row, prediction.predicted)


def short(model: str) -> str:
    return model.split("/")[-1].removesuffix("-it")


def stats(errors: Sequence[float]) -> str:
    absolute = sorted(abs(e) for e in errors)
    return (f"{len(errors):>4} rows  median |err| {100 * statistics.median(absolute):5.1f} %  "
            f"p90 {100 * _quantile(absolute, 0.9):5.1f} %  median {100 * statistics.median(errors):+6.1f} %")


def write_predictions() -> int:
    """What the bundled torch-* profiles expect for PLAN's decode steps, before measuring."""
    from ridgeline.catalog import model_entries, resolve_model

    lines = ["id,model,engine,batch,context,metric,predicted_tok_s"]
    for name, (batches, contexts) in PLAN.items():
        hf = next(e.hf_id for e in model_entries() if e.id == resolve_model(name).name)
        for context in contexts:
            for batch in batches:
                for engine in ("torch-eager", "torch-cudagraph"):
                    raw = _decode_row(hf, "bf16", "h200-sxm", batch, context, 1.0, notes="",
                                      engine=engine)
                    row = parse_row(raw)
                    p = predict(row)
                    lines.append(f"{row.id},{hf},{engine},{batch},{context},{row.metric},"
                                 f"{p.predicted:.6g}")
    PREDICTED.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines) - 1} predictions to {PREDICTED}")
    return 0


def main() -> int:
    if "--predict" in sys.argv[1:]:
        return write_predictions()
    rows = [r for path in sorted(DATA.glob("*.csv")) for r in read_measurements(path).rows]
    measured = [load_accelerator_file(str(p)) for p in sorted(DATA.glob("*.accelerator.json"))]
    for acc in measured:
        register(acc)
    probed = measured[-1].id
    models = sorted({r.model for r in rows})
    lines: list[str] = []
    say = lines.append
    held_out: dict[tuple[str, str], EngineProfile] = {}  # (engine, model held out) -> fit
    fitted: dict[str, EngineProfile] = {}
    for engine in ("torch-eager", "torch-cudagraph"):  # the kernels' owner first
        mine = [r for r in rows if r.engine == engine]
        owner = SAME_KERNELS.get(engine, "")
        for m in models:
            held_out[engine, m] = fit_same_kernels([r for r in mine if r.model != m], engine,
                                                   held_out.get((owner, m)))
        fitted[engine] = fit_same_kernels(mine, engine, fitted.get(owner))
    for engine in ("torch-cudagraph", "torch-eager"):
        mine = [r for r in rows if r.engine == engine]
        say(f"## {engine}\n")
        say("| model | step | batch | context | measured ms | floor (rated) | floor (probed) "
            "| of probed floor | calibrated, model held out | error |")
        say("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        errors: dict[str, list[float]] = {}
        of_floor: dict[str, list[float]] = {}
        for r in mine:
            ms = step_ms(r, r.value)
            rated = predicted_ms(r, IDEAL)
            floor = predicted_ms(replace(r, gpu=probed), IDEAL)
            calibrated = predicted_ms(r, held_out[engine, r.model])
            kind = "prefill" if r.metric == "prefill_tok_s" else "decode"
            error = (calibrated - ms) / ms
            errors.setdefault(kind, []).append(error)
            of_floor.setdefault(kind, []).append(floor / ms)
            context = (r.input_len if kind == "prefill" else (r.context_len or 1) - 1)
            say(f"| {short(r.model)} | {kind} | {r.batch} | {context:,} | {ms:.2f} | "
                f"{rated:.2f} | {floor:.2f} | {100 * floor / ms:.0f} % | {calibrated:.2f} | "
                f"{100 * error:+.1f} % |")
        say("")
        for kind in errors:
            say(f"- {engine} {kind}: calibrated, model held out: {stats(errors[kind])}; "
                f"measured at {100 * statistics.median(of_floor[kind]):.0f} % of the probed "
                f"floor's speed (median)")
        say("")
        f = fitted[engine]
        say(f"- {engine} fitted on all {len(mine)} rows (the bundled profile): bandwidth "
            f"efficiency {f.bandwidth_efficiency:.3f}, compute {f.compute_efficiency:.3f}, per "
            f"step {f.step_overhead_s * 1e6:.0f} µs, per layer {f.layer_overhead_s * 1e6:.1f} µs\n")
    text = "\n".join(lines)
    print(text)
    OUT.write_text(HEADER + text + "\n", encoding="utf-8")
    return 0


HEADER = """# ridgeline against a measured H200

Written by `python scripts/h200_report.py` from `validation/h200/` (rows from `ridgeline
measure` on an NVIDIA H200 lent to a session; `bash scripts/gpu_session.sh`). The models are
built with random weights in bf16 (no download). Decode steps are timed eager (PyTorch launches
each op) and replayed from a CUDA graph (what serving engines run); prefill is eager. Times
are per step (a decode step of the whole batch, or the whole prompt's prefill).

- **floor (rated)**: the article's roofline on the catalog's H200 (4.8 TB/s, 989 TFLOP/s
  bf16), no efficiency and no overhead.
- **floor (probed)**: the same on the bandwidth and matmul rate probed on the day (copy/read
  and 8192³ matmul; `2026-11-29.accelerator.json`).
- **calibrated, model held out**: the engine's profile fitted on the other models' rows (on
  the catalog's H200), then asked about this model. No row is predicted by a fit that saw it.

"""

if __name__ == "__main__":
    sys.exit(main())
