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
    device_context,
    device_memory_bytes,
    device_total_bytes,
    fp8_format,
    graph_replay,
    host_cpu_name,
    probe_device,
    sm_clock_note,
    timed_s,
)
from ridgeline.errors import InputError
from ridgeline.layouts import MOE
from ridgeline.model import ModelSpec
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
    sink: Callable[[dict[str, str]], None] | None = None  # handed each row as it is measured

    def add(self, row: dict[str, str]) -> None:
        """A row measured: kept, and handed to ``sink`` (written at once, RowsWriter)."""
        self.rows.append(row)
        if self.sink is not None:
            self.sink(row)


def _row(model_hf: str, weights: str, gpu_id: str, batch: int, input_len: int, output_len: int,
         context: int, metric: str, value: float, unit: str, notes: str,
         engine: str = "torch-eager", kv: str | None = None) -> dict[str, str]:
    """A measurement row; ``kv`` is the cache's dtype where the weights' differs (fp8)."""
    graph = "-graph" if engine == "torch-cudagraph" else ""
    fmt = f"-w{weights}" if kv and kv != weights else ""
    return {"id": f"measure-{gpu_id}-{row_label(model_hf)}-{metric}-b{batch}-c{context}"
                  f"-i{input_len}{fmt}{graph}",
            "model": model_hf, "weights_dtype": weights, "kv_dtype": kv or weights,
            "gpu": gpu_id,
            "num_gpus": "1", "tp": "1", "batch": str(batch), "input_len": str(input_len),
            "output_len": str(output_len), "context_len": str(context), "metric": metric,
            "value": f"{value:.6g}", "unit": unit, "engine": engine,
            "source": f"ridgeline measure {date.today().isoformat()}", "notes": notes}


def row_label(model: str) -> str:
    """The model's name in a row's id: a Hugging Face id's last part (meta-llama/Llama-3.2-1B
    → Llama-3.2-1B); a config file's folder (models/qwen3-8b/config.json → qwen3-8b) or, not
    named config.json, its stem (tiny.json → tiny), so two configs' rows in one file keep
    apart ids where every one was "config.json"."""
    path = Path(model).expanduser()
    if not (model.lower().endswith((".json", ".gguf")) or path.exists()):
        return model.split("/")[-1]
    if path.is_dir():
        return path.resolve().name or "model"
    if path.name.lower() == "config.json":
        return path.resolve().parent.name or "config"
    return path.stem


def _decode_row(hf: str, weights: str, gpu_id: str, batch: int, context: int, seconds: float,
                notes: str, engine: str, kv: str | None = None) -> dict[str, str]:
    """One decode step of ``batch`` sequences over ``context`` cached tokens, as a row."""
    if batch == 1:
        return _row(hf, weights, gpu_id, 1, 0, 1, context + 1, "decode_tok_s_per_user",
                    1 / seconds, "tok/s", notes, engine, kv)
    return _row(hf, weights, gpu_id, batch, context, 1, context + 1, "output_throughput_tok_s",
                batch / seconds, "tok/s", "S_TG (decode steps only, aggregate); " + notes, engine,
                kv)


# torch.cuda.clock_rate asks NVML through the nvidia-ml-py package (import pynvml), which
# torch does not require, or on ROCm amdsmi (torch/cuda/__init__.py, clock_rate)
SM_CLOCK_HINT = ("torch.cuda.clock_rate cannot read it (NVIDIA: pip install nvidia-ml-py; "
                 "ROCm: ROCm's amdsmi Python package)")

QUICK_GRID = ((1, 4), (128, 512))
FULL_GRID = ((1, 8, 32, 64, 128, 256), (512, 2048, 8192, 32768))


@dataclass(frozen=True)
class GridPoint:
    """One timing of the grid: a decode step of ``batch`` sequences over ``context`` cached
    tokens, or (``prefill``) one prompt of ``context`` tokens at batch 1."""

    batch: int
    context: int
    prefill: bool = False


def grid_axes(quick: bool, batches: tuple[int, ...] | None,
              contexts: tuple[int, ...] | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The batches and contexts a run times: those given, else the quick or full grid's
    (--quick: batches 1, 4 at 128 and 512 tokens)."""
    default_batches, default_contexts = QUICK_GRID if quick else FULL_GRID
    return tuple(batches or default_batches), tuple(contexts or default_contexts)


def plan_grid(spec: ModelSpec, batches: tuple[int, ...], contexts: tuple[int, ...],
              room_bytes: float, element_bytes: int) -> tuple[list[GridPoint], list[str]]:
    """The points a run times, in its order (each context's decode batches, then its
    prefill), and those skipped, each saying why: a cache (× 1.1 for the step's scores and
    activations) or a prompt's working set larger than ``room_bytes``, the memory free
    beside the weights: Llama-3.2-1B's bf16 cache at batch 256 × 32,768 tokens, 256 GiB
    (281.6 with the 1.1), is skipped in the 117.9 GiB an H200's 141 GiB leaves (0.85 of
    what its 2.3 GiB of weights leave, as `measure --dry-run --card h200` reckons it)."""
    points: list[GridPoint] = []
    skipped: list[str] = []
    for context in contexts:
        for batch in batches:
            need = RandomModel.cache_bytes(spec, batch, context, element_bytes) * 1.1
            if need > room_bytes:
                skipped.append(f"batch {batch} x context {context}: the cache needs "
                               f"{need / 2**30:,.1f} GiB, {room_bytes / 2**30:,.1f} GiB free")
            else:
                points.append(GridPoint(batch, context))
        need = RandomModel.prefill_bytes(spec, context, element_bytes)
        if need > room_bytes:
            skipped.append(f"prefill of {context:,} tokens: needs about "
                           f"{need / 2**30:,.1f} GiB, {room_bytes / 2**30:,.1f} GiB free")
        else:
            points.append(GridPoint(1, context, prefill=True))
    return points, skipped


def measure(device: str = "cpu", quick: bool = True, model: str = "llama-3.2-1b",
            dtype: str | None = None, gpu_id: str | None = None,
            batches: tuple[int, ...] | None = None, contexts: tuple[int, ...] | None = None,
            probes: bool = True, fp8: bool = False,
            sink: Callable[[dict[str, str]], None] | None = None) -> MeasureResult:
    """``fp8``: the linear layers' weights in float8 e4m3 (W8A8 through torch._scaled_mm),
    the rows' weights_dtype ``fp8`` and their kv_dtype the model's dtype. ``sink`` is handed
    each row as it is measured (RowsWriter.add: a crash mid-grid keeps the rows timed). On
    cuda:N everything runs with N the current device (device_context), so events, syncs and
    graph captures are N's, not cuda:0's."""
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
    with device_context(torch, dev):
        return _measure_on(torch, dev, device, quick, model, dtype, gpu_id, batches, contexts,
                           probes, fp8, sink)


def _measure_on(torch: Any, dev: Any, device: str, quick: bool, model: str, dtype: str | None,
                gpu_id: str | None, batches: tuple[int, ...] | None,
                contexts: tuple[int, ...] | None, probes: bool, fp8: bool,
                sink: Callable[[dict[str, str]], None] | None) -> MeasureResult:
    """``measure`` on a device already checked, and current where it is a GPU."""
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else host_cpu_name()
    gid = gpu_id or f"measured-{dev.type}"
    result = MeasureResult(device, name, memory_bytes=device_total_bytes(torch, dev),
                           gpu_id=gid, sink=sink)
    dt = dtype or ("float32" if dev.type == "cpu" else "bfloat16")
    # refused before the probes' minutes: a model that cannot run
    spec = resolve_model(model, fetchable=False)
    fp8_dtype = "float8_e4m3fn"
    if fp8 and dev.type == "cuda":
        found, why = fp8_format(torch, dev)
        if found is None:
            raise InputError(f"--fp8 {why}")
        fp8_dtype = found
    if dev.type == "cuda" and not sm_clock_note(torch, dev):
        result.skipped.append(f"the SM clock in the rows' notes: {SM_CLOCK_HINT}")
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
        rm = RandomModel.build(spec, device, dt, fp8=fp8, fp8_dtype=fp8_dtype)
    except RuntimeError as exc:  # torch's OutOfMemoryError is one: the model, not a bug
        if "out of memory" not in str(exc).lower():
            raise
        raise InputError(f"does not fit: building {spec.name} in {dt} ran the device out of "
                         "memory (a smaller --model, or --dtype)") from None
    kv = _WEIGHTS.get(dt, dt)
    weights = "fp8" if fp8 else kv
    notes = f"random weights, PyTorch {torch.__version__}, {name}, {dt}"
    if fp8:
        e4m3 = "e4m3fnuz" if fp8_dtype.endswith("fnuz") else "e4m3"
        notes += f", linear weights fp8 {e4m3} (torch._scaled_mm, per-tensor scales)"
    graphs = dev.type == "cuda"
    if any(layer.ffn == MOE for layer in spec.layers):
        notes += (", experts in grouped matmuls" if rm.grouped else
                  ", experts one matmul each")
        if graphs and not rm.grouped:
            graphs = False
            result.skipped.append("CUDA-graph decode: without torch._grouped_mm the experts "
                                  "are picked on the host, which a graph cannot hold (eager "
                                  "only)")
    element = 4 if dt == "float32" else 2
    # weights are allocated; the cache, its scores and the MLP's activations must fit beside.
    # The probes' blocks go back first: cached by the allocator, they would count as used
    _free(torch, dev)
    room = 0.85 * device_memory_bytes(torch, dev)
    points, skipped = plan_grid(spec, *grid_axes(quick, batches, contexts), room, element)
    result.skipped += skipped
    for point in points:
        batch, context = point.batch, point.context
        if point.prefill:
            prompt = torch.zeros(1, context, dtype=torch.long, device=dev)
            seconds = timed_s(torch, dev, partial(rm.step, prompt, None), repeats=3, warmup=1)
            result.add(_row(hf, weights, gid, 1, context, 0, context, "prefill_tok_s",
                            context / seconds, "tok/s",
                            notes + ", median of 3" + sm_clock_note(torch, dev), kv=kv))
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
    result.add(row(seconds, notes=notes + ", eager, median of 3" + sm_clock_note(torch, dev),
                   engine="torch-eager"))
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
    result.add(row_)
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


def card_rows_path(rows: Path, card_id: str) -> Path:
    """The rows named for a catalog card, beside them: rows.csv with --card h200 →
    rows.h200-sxm.csv (x.v2/rows → x.v2/rows.h200-sxm.csv, as record_path names)."""
    stem = rows.stem if rows.suffix.lower() == ".csv" else rows.name
    return rows.with_name(f"{stem}.{card_id}.csv")


def card_row(row: dict[str, str], card_id: str) -> dict[str, str]:
    """A measured row naming the catalog card it ran on instead of the measured device, as
    its id does: gpu measured-cuda → h200-sxm, id measure-measured-cuda-… →
    measure-h200-sxm-…; validate then reads it against the card's spec sheet."""
    prefix = f"measure-{row['gpu']}-"
    id_ = row["id"]
    return {**row, "gpu": card_id,
            "id": f"measure-{card_id}-{id_[len(prefix):]}" if id_.startswith(prefix) else id_}


@dataclass
class RowsWriter:
    """The rows written as they are measured (``add``: the CSV opened at the first row, each
    row flushed), so a crash or Ctrl-C mid-grid keeps every row timed before it; with
    ``card_id``, each row also to ``card_path`` naming that catalog card (card_row).
    ``finish`` writes each file whole from the rows measure returned."""

    path: Path
    card_id: str = ""
    card_path: Path | None = None
    written: int = 0  # rows in the files so far
    _files: list[tuple[Any, Any, str]] = field(default_factory=list)  # handle, writer, card

    def _targets(self) -> list[tuple[Path, str]]:
        return [(self.path, ""), *([(self.card_path, self.card_id)] if self.card_path else [])]

    def add(self, row: dict[str, str]) -> None:
        try:
            if not self._files:
                for path, card in self._targets():
                    handle = path.open("w", newline="", encoding="utf-8")
                    writer = csv.DictWriter(handle, fieldnames=COLUMNS)
                    writer.writeheader()
                    self._files.append((handle, writer, card))
            for handle, writer, card in self._files:
                writer.writerow(card_row(row, card) if card else row)
                handle.flush()
        except OSError as exc:
            raise InputError(f"cannot write {self.path}: {exc}") from None
        self.written += 1

    def close(self) -> None:
        for handle, _, _ in self._files:
            handle.close()
        self._files.clear()

    def finish(self, rows: list[dict[str, str]]) -> None:
        self.close()
        for path, card in self._targets():
            write_rows([card_row(r, card) for r in rows] if card else rows, path)
        self.written = len(rows)


def write_record(record: dict[str, Any], path: Path) -> None:
    try:
        path.write_text(json.dumps(record, indent=1), encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc}") from None
