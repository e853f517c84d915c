"""`ridgeline measure`: measure an accelerator and write rows `validate` and `calibrate` read.

Probes: achievable memory bandwidth (a large device-to-device copy, and a read-only
reduction) and dense matmul throughput per dtype over square and skinny decode-shaped
(M = batch) problems. Then decode and prefill steps of a catalog model built with random
weights (``torch_model.py``) over a grid of batch × context. Timing: warm-up, device
synchronisation, CUDA events on CUDA, the median of repeats. On CUDA each decode step is
timed twice: launched op by op (engine ``torch-eager``) and replayed from a CUDA graph
(``torch-cudagraph``, what engines run for decode: no launch gaps). The measured accelerator
is written as a catalog record beside the rows, so the rows validate against it.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from functools import partial
from pathlib import Path
from typing import Any

from ridgeline.catalog import model_entries, resolve_model
from ridgeline.errors import InputError
from ridgeline.layouts import MOE
from ridgeline.torch_model import RandomModel, import_torch

COLUMNS = ("id", "model", "weights_dtype", "kv_dtype", "gpu", "num_gpus", "tp", "batch",
           "input_len", "output_len", "context_len", "metric", "value", "unit", "engine",
           "source", "notes")
_WEIGHTS = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}


@dataclass
class Probe:
    name: str
    value: float  # bytes/s or FLOP/s
    detail: str


@dataclass
class MeasureResult:
    device: str
    device_name: str
    probes: list[Probe] = field(default_factory=list)
    rows: list[dict[str, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _sync(torch: Any, device: Any) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize()
    if device.type == "mps":
        return lambda: torch.mps.synchronize()
    return lambda: None


def timed(torch: Any, device: Any, fn: Callable[[], Any], repeats: int = 5,
          warmup: int = 2) -> float:
    """Median seconds of ``fn`` after warm-up; CUDA events where there is CUDA."""
    sync = _sync(torch, device)
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            sync()
            samples.append(time.perf_counter() - t0)
    return float(statistics.median(samples))


def bandwidth_probes(torch: Any, device: Any, n_bytes: int) -> list[Probe]:
    src = torch.empty(n_bytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    copy_s = timed(torch, device, lambda: dst.copy_(src))
    read_s = timed(torch, device, lambda: src.sum())
    return [Probe("copy bandwidth", 2 * n_bytes / copy_s, f"{n_bytes / 2**20:.0f} MiB copied"),
            Probe("read bandwidth", n_bytes / read_s, f"{n_bytes / 2**20:.0f} MiB summed")]


def matmul_probes(torch: Any, device: Any, dtypes: list[str], big: int,
                  batches: tuple[int, ...]) -> list[Probe]:
    out = []
    for name in dtypes:
        dt = getattr(torch, name)
        try:
            a = torch.randn(big, big, device=device, dtype=dt)
            b = torch.randn(big, big, device=device, dtype=dt)
            seconds = timed(torch, device, partial(torch.matmul, a, b))
        except (RuntimeError, TypeError) as exc:
            out.append(Probe(f"{name} matmul", 0.0, f"unsupported: {exc}"))
            continue
        out.append(Probe(f"{name} matmul {big}³", 2 * big**3 / seconds, "square"))
        for m in batches:  # skinny: M = batch, left of the ridge
            x = torch.randn(m, big, device=device, dtype=dt)
            seconds = timed(torch, device, partial(torch.matmul, x, b))
            out.append(Probe(f"{name} matmul M={m}", 2 * m * big * big / seconds,
                             f"{m}x{big} @ {big}x{big}"))
    return out


def fp8_matmul_probes(torch: Any, device: Any, big: int, batches: tuple[int, ...]) -> list[Probe]:
    """e4m3 × e4m3 → bf16 with per-tensor scales (torch._scaled_mm, what fp8 serving
    kernels run), square and skinny. cuBLASLt wants every dimension a multiple of 16, so
    the skinny shapes start at M = 16."""
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return [Probe("float8_e4m3fn matmul", 0.0, "unsupported: this torch has no fp8")]
    one = torch.tensor(1.0, device=device)

    def operand(rows: int) -> Any:
        return torch.randn(rows, big, device=device).to(torch.float8_e4m3fn)

    def run(a: Any, b: Any) -> Any:
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    try:
        b = operand(big).t()  # the second operand column-major, as _scaled_mm requires
        seconds = timed(torch, device, partial(run, operand(big), b))
    except (RuntimeError, TypeError) as exc:
        return [Probe("float8_e4m3fn matmul", 0.0, f"unsupported: {exc}")]
    out = [Probe(f"float8_e4m3fn matmul {big}³", 2 * big**3 / seconds, "square, bf16 out")]
    for m in batches:
        seconds = timed(torch, device, partial(run, operand(m), b))
        out.append(Probe(f"float8_e4m3fn matmul M={m}", 2 * m * big * big / seconds,
                         f"{m}x{big} @ {big}x{big}, bf16 out"))
    return out


def graph_replay(torch: Any, fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` captured once in a CUDA graph; the result replays it. Raises RuntimeError where
    the capture fails (an op that syncs with the host, say)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # outside the capture: lazy initialisation, library workspaces
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    replay: Callable[[], Any] = graph.replay  # the bound method keeps the graph (and its pool)
    return replay


def sm_clock_note(torch: Any, device: Any) -> str:
    """The SM clock right after a timing, for the notes ('' where it cannot be read)."""
    if device.type != "cuda":
        return ""
    try:
        return f", SM clock {torch.cuda.clock_rate(device)} MHz"
    except Exception:  # pynvml missing or the query unsupported: the note is optional
        return ""


def device_memory_bytes(torch: Any, device: Any) -> float:
    """Memory the grid may use: what CUDA reports free, else the machine's RAM."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return float(free)
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return float("inf")


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
        raise InputError("--device cuda: no CUDA device is visible")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise InputError("--device mps: no Metal device is visible")
    name = (torch.cuda.get_device_name(dev) if dev.type == "cuda" else
            platform.processor() or platform.machine())
    result = MeasureResult(device, name)
    dt = dtype or ("float32" if dev.type == "cpu" else "bfloat16")
    if probes:
        _probe_device(torch, dev, quick, result)
    spec = resolve_model(model)
    # a catalog model is recorded by its Hugging Face id, a config file by its path
    hf = next((e.hf_id for e in model_entries() if e.id == spec.name), model)
    gid = gpu_id or f"measured-{dev.type}"
    if fp8 and dev.type == "cuda" and torch.cuda.get_device_capability(dev) < (8, 9):
        raise InputError("--fp8: fp8 matmuls need an sm_89+ GPU (Ada, Hopper, Blackwell)")
    rm = RandomModel.build(spec, device, dt, fp8=fp8)
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
        prompt = torch.zeros(1, context, dtype=torch.long, device=dev)
        seconds = timed(torch, dev, partial(rm.step, prompt, None), repeats=3, warmup=1)
        result.rows.append(_row(hf, weights, gid, 1, context, 0, context, "prefill_tok_s",
                                context / seconds, "tok/s",
                                notes + ", median of 3" + sm_clock_note(torch, dev), kv=kv))
    return result


def _decode_point(torch: Any, dev: Any, rm: RandomModel, batch: int, context: int,
                  result: MeasureResult, graphs: bool, notes: str,
                  row: Callable[..., dict[str, str]]) -> bool:
    """Time one decode step eagerly (and from a CUDA graph while ``graphs``); returns whether
    graphs are still worth trying."""
    cache = rm.kv_cache(batch, context)
    step = partial(rm.step, torch.zeros(batch, 1, dtype=torch.long, device=dev), cache)
    seconds = timed(torch, dev, step, repeats=3, warmup=1)
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


def _probe_device(torch: Any, dev: Any, quick: bool, result: MeasureResult) -> None:
    # big enough to leave every cache: 256 MiB on a CPU, 1 GiB on a GPU (4x with the full run)
    n_bytes = (256 if dev.type == "cpu" else 1024) * 2**20 * (1 if quick else 4)
    result.probes += bandwidth_probes(torch, dev, n_bytes)
    dtypes = ["float32"] if dev.type == "cpu" else ["bfloat16", "float16"]
    big = 1024 if dev.type == "cpu" else (4096 if quick else 8192)
    result.probes += matmul_probes(torch, dev, dtypes, big, (1, 8, 64))
    if dev.type == "cuda" and torch.cuda.get_device_capability(dev) >= (8, 9):
        result.probes += fp8_matmul_probes(torch, dev, big, (16, 64, 256))
    else:
        result.skipped.append("fp8 matmul: needs an sm_89+ GPU (Ada, Hopper, Blackwell)")


def _graph_row(torch: Any, dev: Any, step: Callable[[], Any], result: MeasureResult,
               row: Callable[..., dict[str, str]]) -> bool:
    """Time ``step`` replayed from a CUDA graph and add its row; False (and why, in
    ``skipped``) when the capture fails, so the rest of the grid runs eager only."""
    replay: Callable[[], Any] | None = None
    try:
        replay = graph_replay(torch, step)
        seconds = timed(torch, dev, replay, repeats=10, warmup=2)
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


def accelerator_record(result: MeasureResult, gpu_id: str, memory_bytes: float) -> dict[str, Any]:
    """The measured device as a catalog record: its measured bandwidth and best matmul."""
    bandwidth = max(p.value for p in result.probes if "bandwidth" in p.name)
    best: dict[str, float] = {}
    for p in result.probes:
        if "matmul" in p.name and p.value:
            dtype = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16",
                     "float8_e4m3fn": "fp8"}[p.name.split()[0]]
            best[dtype] = max(best.get(dtype, 0.0), p.value)
    return {"id": gpu_id, "name": result.device_name, "vendor": "measured", "form": "measured",
            "memory_bytes": memory_bytes, "memory_size": memory_bytes / 2**30,
            "memory_unit": "GiB", "memory_bandwidth_bytes_per_s": bandwidth, "peak_flops": best,
            "sources": [f"ridgeline measure {date.today().isoformat()}"],
            "notes": "measured figures, not a spec sheet: efficiencies fitted against it are "
                     "relative to what the probes reached"}


def write_rows(rows: list[dict[str, str]], path: str) -> None:
    try:
        with Path(path).open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc}") from None


def write_record(record: dict[str, Any], path: str) -> None:
    Path(path).write_text(json.dumps(record, indent=1), encoding="utf-8")
