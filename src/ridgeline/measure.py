"""`ridgeline measure`: measure an accelerator and write rows `validate` and `calibrate` read.

The device's ceilings first (``device_probes.py``: bandwidth and matmul rate). Then decode
and prefill steps of a catalog model built with random weights (``torch_model.py``) over a
grid of batch × context, timed by ``device_probes.timed``. On CUDA each decode step is
timed twice: launched op by op (engine ``torch-eager``) and replayed from a CUDA graph
(``torch-cudagraph``, what engines run for decode: no launch gaps). The measured accelerator
is written as a catalog record beside the rows, so the rows validate against it.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from functools import partial
from pathlib import Path
from typing import Any

from ridgeline.catalog import model_entries, resolve_model
from ridgeline.device_probes import (
    PROBE_DTYPES,
    Probe,
    device_memory_bytes,
    device_total_bytes,
    graph_replay,
    host_cpu_name,
    probe_device,
    sm_clock_note,
    timed_s,
)
from ridgeline.errors import InputError
from ridgeline.layouts import MOE
from ridgeline.params import count_params
from ridgeline.precision import weight_bytes_at
from ridgeline.torch_model import RandomModel, import_torch

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
COLUMNS = ("id", "model", "weights_dtype", "kv_dtype", "gpu", "num_gpus", "tp", "batch",
           "input_len", "output_len", "context_len", "metric", "value", "unit", "engine",
           "source", "notes")
_WEIGHTS = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}


@dataclass
class MeasureResult:
    device: str
    device_name: str
    probes: list[Probe] = field(default_factory=list)
    rows: list[dict[str, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    memory_bytes: float | None = None  # the device's total, as its runtime reports it
    gpu_id: str = ""  # the id the rows name the device by, and its record's


def _row(model_hf: str, weights: str, gpu_id: str, batch: int, input_len: int, output_len: int,
         context: int, metric: str, value: float, unit: str, notes: str,
         engine: str = "torch-eager", kv: str | None = None) -> dict[str, str]:
    """A measurement row; ``kv`` is the cache's dtype where the weights' differs (fp8)."""
    graph = "-graph" if engine == "torch-cudagraph" else ""
    fmt = f"-w{weights}" if kv and kv != weights else ""
    return {"id": f"measure-{gpu_id}-{model_hf.split('/')[-1]}-{metric}-b{batch}-c{context}"
                  f"-i{input_len}{fmt}{graph}",
            "model": model_hf, "weights_dtype": weights, "kv_dtype": kv or weights,
            "gpu": gpu_id,
            "num_gpus": "1", "tp": "1", "batch": str(batch), "input_len": str(input_len),
            "output_len": str(output_len), "context_len": str(context), "metric": metric,
            "value": f"{value:.6g}", "unit": unit, "engine": engine,
            "source": f"ridgeline measure {date.today().isoformat()}", "notes": notes}


def _decode_row(hf: str, weights: str, gpu_id: str, batch: int, context: int, seconds: float,
                notes: str, engine: str, kv: str | None = None) -> dict[str, str]:
    """One decode step of ``batch`` sequences over ``context`` cached tokens, as a row."""
    if batch == 1:
        return _row(hf, weights, gpu_id, 1, 0, 1, context + 1, "decode_tok_s_per_user",
                    1 / seconds, "tok/s", notes, engine, kv)
    return _row(hf, weights, gpu_id, batch, context, 1, context + 1, "output_throughput_tok_s",
                batch / seconds, "tok/s", "S_TG (decode steps only, aggregate); " + notes, engine,
                kv)


QUICK_GRID = ((1, 4), (128, 512))
FULL_GRID = ((1, 8, 32, 64, 128, 256), (512, 2048, 8192, 32768))


def measure(device: str = "cpu", quick: bool = True, model: str = "llama-3.2-1b",
            dtype: str | None = None, gpu_id: str | None = None,
            batches: tuple[int, ...] | None = None, contexts: tuple[int, ...] | None = None,
            probes: bool = True, fp8: bool = False) -> MeasureResult:
    """``fp8``: the linear layers' weights in float8 e4m3 (W8A8 through torch._scaled_mm),
    the rows' weights_dtype ``fp8`` and their kv_dtype the model's dtype."""
    torch = import_torch()
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"--device {device}: no CUDA device is visible")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise InputError(f"--device {device}: only " + ("cuda:0 is" if count == 1 else
                                                        f"cuda:0 to cuda:{count - 1} are")
                         + " visible")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"--device {device}: no Metal device is visible")
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else host_cpu_name()
    gid = gpu_id or f"measured-{dev.type}"
    result = MeasureResult(device, name, memory_bytes=device_total_bytes(torch, dev), gpu_id=gid)
    dt = dtype or ("float32" if dev.type == "cpu" else "bfloat16")
    # refused before the probes' minutes: a model that cannot run
    spec = resolve_model(model, fetchable=False)
    if fp8 and dev.type == "cuda" and torch.cuda.get_device_capability(dev) < (8, 9):
        raise InputError("--fp8: fp8 matmuls need an sm_89+ GPU (Ada, Hopper, Blackwell)")
    weights_bytes = weight_bytes_at(count_params(spec).total, DTYPE_BYTES.get(dt, 2))
    if result.memory_bytes and weights_bytes > result.memory_bytes:
        raise InputError(f"does not fit: {spec.name}'s {weights_bytes / 1e9:,.1f} GB of {dt} "
                         f"weights exceed the device's {result.memory_bytes / 1e9:,.1f} GB "
                         "(a smaller --model, or --dtype)")
    if probes:
        result.probes += probe_device(torch, dev, quick, result.skipped, dt)
    # a catalog model is recorded by its Hugging Face id, a config file by its path
    hf = next((e.hf_id for e in model_entries() if e.id == spec.name), model)
    try:
        rm = RandomModel.build(spec, device, dt, fp8=fp8)
    except RuntimeError as exc:  # torch's OutOfMemoryError is one: the model, not a bug
        if "out of memory" not in str(exc).lower():
            raise
        raise InputError(f"does not fit: building {spec.name} in {dt} ran the device out of "
                         "memory (a smaller --model, or --dtype)") from None
    kv = _WEIGHTS.get(dt, dt)
    weights = "fp8" if fp8 else kv
    notes = f"random weights, PyTorch {torch.__version__}, {name}, {dt}"
    if fp8:
        notes += ", linear weights fp8 e4m3 (torch._scaled_mm, per-tensor scales)"
    graphs = dev.type == "cuda"
    if any(layer.ffn == MOE for layer in spec.layers):
        notes += (", experts in grouped matmuls" if rm.grouped else
                  ", experts one matmul each")
        if graphs and not rm.grouped:
            graphs = False
            result.skipped.append("CUDA-graph decode: without torch._grouped_mm the experts "
                                  "are picked on the host, which a graph cannot hold (eager "
                                  "only)")
    default_batches, default_contexts = QUICK_GRID if quick else FULL_GRID
    element = 4 if dt == "float32" else 2
    # weights are allocated; the cache, its scores and the MLP's activations must fit beside
    room = 0.85 * device_memory_bytes(torch, dev)
    for context in contexts or default_contexts:
        for batch in batches or default_batches:
            need = RandomModel.cache_bytes(spec, batch, context, element) * 1.1
            if need > room:
                result.skipped.append(f"batch {batch} x context {context}: the cache needs "
                                      f"{need / 2**30:,.1f} GiB, {room / 2**30:,.1f} GiB free")
                continue
            try:
                graphs = _decode_point(torch, dev, rm, batch, context, result, graphs, notes,
                                       partial(_decode_row, hf, weights, gid, batch, context,
                                               kv=kv))
            except RuntimeError as exc:  # torch.cuda.OutOfMemoryError is one
                if "out of memory" not in str(exc).lower():
                    raise
                result.skipped.append(f"batch {batch} x context {context}: out of memory "
                                      "beside the cache")
            _free(torch, dev)
        need = RandomModel.prefill_bytes(spec, context, element)
        if need > room:
            result.skipped.append(f"prefill of {context:,} tokens: needs about "
                                  f"{need / 2**30:,.1f} GiB, {room / 2**30:,.1f} GiB free")
            continue
        prompt = torch.zeros(1, context, dtype=torch.long, device=dev)
        seconds = timed_s(torch, dev, partial(rm.step, prompt, None), repeats=3, warmup=1)
        result.rows.append(_row(hf, weights, gid, 1, context, 0, context, "prefill_tok_s",
                                context / seconds, "tok/s",
                                notes + ", median of 3" + sm_clock_note(torch, dev), kv=kv))
    if not result.rows:
        raise InputError(f"{spec.name}: nothing in the grid fits on this device "
                         f"({result.skipped[-1]})")
    return result


def _decode_point(torch: Any, dev: Any, rm: RandomModel, batch: int, context: int,
                  result: MeasureResult, graphs: bool, notes: str,
                  row: Callable[..., dict[str, str]]) -> bool:
    """Time one decode step eagerly (and from a CUDA graph while ``graphs``); returns whether
    graphs are still worth trying."""
    cache = rm.kv_cache(batch, context)
    step = partial(rm.step, torch.zeros(batch, 1, dtype=torch.long, device=dev), cache)
    seconds = timed_s(torch, dev, step, repeats=3, warmup=1)
    result.rows.append(row(seconds, notes=notes + ", eager, median of 3"
                           + sm_clock_note(torch, dev), engine="torch-eager"))
    if graphs:
        graphs = _graph_row(torch, dev, step, result, partial(
            row, notes=notes + ", CUDA graph replay, median of 10", engine="torch-cudagraph"))
    return graphs


def _free(torch: Any, dev: Any) -> None:
    """Hand cached blocks back before the next cache is drawn (a different size each time)."""
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def _graph_row(torch: Any, dev: Any, step: Callable[[], Any], result: MeasureResult,
               row: Callable[..., dict[str, str]]) -> bool:
    """Time ``step`` replayed from a CUDA graph and add its row; False (and why, in
    ``skipped``) when the capture fails, so the rest of the grid runs eager only."""
    replay: Callable[[], Any] | None = None
    try:
        replay = graph_replay(torch, step)
        seconds = timed_s(torch, dev, replay, repeats=10, warmup=2)
    except RuntimeError as exc:
        result.skipped.append(f"CUDA-graph decode: capture failed ({str(exc).splitlines()[0]})")
        return False
    finally:
        replay = None
        _free(torch, dev)
    row_ = row(seconds)
    row_["notes"] += sm_clock_note(torch, dev)
    result.rows.append(row_)
    return True


def accelerator_record(result: MeasureResult, memory_bytes: float) -> dict[str, Any]:
    """The measured device as a catalog record, under the id its rows name: its measured
    bandwidth and best matmul per dtype."""
    bandwidth = max(p.value for p in result.probes if "bandwidth" in p.name)
    best: dict[str, float] = {}
    for p in result.probes:
        if "matmul" in p.name and p.value:
            dtype = PROBE_DTYPES[p.name.split()[0]]
            best[dtype] = max(best.get(dtype, 0.0), p.value)
    return {"id": result.gpu_id, "name": result.device_name, "vendor": "measured",
            "form": "measured", "memory_bytes": memory_bytes, "memory_size": memory_bytes / 2**30,
            "memory_unit": "GiB", "memory_bandwidth_bytes_per_s": bandwidth, "peak_flops": best,
            "sources": [f"ridgeline measure {date.today().isoformat()}"],
            "notes": "measured figures, not a spec sheet: efficiencies fitted against it are "
                     "relative to what the probes reached"}


def record_path(rows: Path) -> Path:
    """The device record beside the rows: rows.csv → rows.accelerator.json, and a name
    without .csv keeps its own (x.v2/rows → x.v2/rows.accelerator.json)."""
    stem = rows.stem if rows.suffix.lower() == ".csv" else rows.name
    return rows.with_name(stem + ".accelerator.json")


def wrote_rows(path: Path) -> bool:
    """Whether ``path`` holds rows this command wrote (its header, every row's source
    'ridgeline measure …'): a file that may be measured over again. A device or a pipe
    (/dev/full, a FIFO) is no such file, and is not read: its read never ends."""
    try:
        if not path.is_file() or path.stat().st_size > 2**24:
            return False
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            rows = list(reader)
            header = tuple(reader.fieldnames or ())
    except (OSError, UnicodeDecodeError, csv.Error):
        return False
    return header == COLUMNS and bool(rows) and all(
        (r.get("source") or "").startswith("ridgeline measure ") for r in rows)


def measured_record(path: Path) -> dict[str, Any] | None:
    """The device record at ``path`` where this command wrote it (vendor and form
    'measured'), else None (no file, or another kind of file: a device or a pipe, unread)."""
    try:
        if not path.is_file() or path.stat().st_size > 2**20:
            return None
        record = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not (isinstance(record, dict) and record.get("vendor") == "measured"
            and record.get("form") == "measured"):
        return None
    return record


def earlier_record(rows: Path, gpu_id: str) -> Path | None:
    """A record an earlier run wrote of the device ``gpu_id`` names, for rows measured without
    probes: the one beside ``rows`` (``record_path``), else the newest in their folder (a
    session's probed run writes measured-h200-sxm-rows.accelerator.json, then its steps-only
    runs measured-h200-sxm-qwen3-32b-rows.csv beside it); None where there is none."""
    beside = record_path(rows)
    if (measured_record(beside) or {}).get("id") == gpu_id:
        return beside
    try:
        others = sorted(rows.parent.glob("*.accelerator.json"),
                        key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    return next((p for p in others if (measured_record(p) or {}).get("id") == gpu_id), None)


def write_rows(rows: list[dict[str, str]], path: Path) -> None:
    try:
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc}") from None


def write_record(record: dict[str, Any], path: Path) -> None:
    try:
        path.write_text(json.dumps(record, indent=1), encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc}") from None
