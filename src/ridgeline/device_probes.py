"""Timing on a device, and probes of its two ceilings: memory bandwidth and matmul rate.

``timed_s`` is the one timer (warm-up, synchronisation, CUDA events where there is CUDA, the
median of repeats); ``graph_replay`` captures a step in a CUDA graph. The probes: a large
device-to-device copy and a read-only reduction (bandwidth), and dense matmuls per dtype over
square and skinny decode-shaped (M = batch) problems, fp8 through torch._scaled_mm on sm_89+
(and AMD MI300+: fp8_format).
torch is passed in: this module imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ridgeline.datafiles import load_data


@dataclass
class Probe:
    name: str
    value: float  # bytes/s or FLOP/s
    detail: str


# the catalog's compute dtype of each torch dtype a matmul probe runs (its name's first word)
PROBE_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16",
                "float8_e4m3fn": "fp8", "float8_e4m3fnuz": "fp8"}


def device_context(torch: Any, device: Any) -> Any:
    """What makes ``device`` current while it is measured: torch.cuda.device(cuda:N), so the
    stream an event records on, what synchronize() waits for and the stream a graph captures
    are N's (each uses the current device, cuda:0 unless set); nothing to set elsewhere."""
    if device.type == "cuda":
        return torch.cuda.device(device)
    return contextlib.nullcontext()


def fp8_format(torch: Any, device: Any) -> tuple[str | None, str]:
    """The e4m3 dtype torch._scaled_mm takes on this GPU, as torch names it, and ""; or None
    and why not ("needs …"). NVIDIA: float8_e4m3fn from sm_89 (Ada, Hopper, Blackwell).
    AMD (a ROCm torch: torch.version.hip set; its get_device_capability gives gfx9.x, which
    would pass an sm_89 test): MI300's gfx94x takes float8_e4m3fnuz (no negative zero,
    exponent bias 8), MI350's gfx950 and RDNA4's gfx120x the OCP float8_e4m3fn, as torch's
    own tests pick them (torch/testing/_internal/common_cuda.py,
    evaluate_platform_supports_fp8: gfx94, gfx120 from ROCm 6.3, gfx95 from 6.5; its fp8
    tests' e4m3_type is fnuz under HIP; TransformerEngine's benchmarks take fnuz on gfx94
    only)."""
    if getattr(getattr(torch, "version", None), "hip", None):
        arch = str(torch.cuda.get_device_properties(device).gcnArchName).split(":")[0]
        if arch.startswith("gfx94"):
            return "float8_e4m3fnuz", ""
        if arch.startswith(("gfx95", "gfx120")):
            return "float8_e4m3fn", ""
        return None, (f"needs an AMD MI300 (gfx94x), MI350 (gfx950) or RDNA4 (gfx120x) "
                      f"GPU; this one is {arch}")
    if torch.cuda.get_device_capability(device) >= (8, 9):
        return "float8_e4m3fn", ""
    return None, "needs an sm_89+ NVIDIA GPU (Ada, Hopper, Blackwell)"


def _sync(torch: Any, device: Any) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize()
    if device.type == "mps":
        return lambda: torch.mps.synchronize()
    return lambda: None


def timed_s(torch: Any, device: Any, fn: Callable[[], Any], repeats: int = 5,
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
    copy_s = timed_s(torch, device, lambda: dst.copy_(src))
    read_s = timed_s(torch, device, lambda: src.sum())
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
            seconds = timed_s(torch, device, partial(torch.matmul, a, b))
        except (RuntimeError, TypeError) as exc:
            out.append(Probe(f"{name} matmul", 0.0, f"unsupported: {exc}"))
            continue
        out.append(Probe(f"{name} matmul {big}³", 2 * big**3 / seconds, "square"))
        for m in batches:  # skinny: M = batch, left of the ridge
            x = torch.randn(m, big, device=device, dtype=dt)
            seconds = timed_s(torch, device, partial(torch.matmul, x, b))
            out.append(Probe(f"{name} matmul M={m}", 2 * m * big * big / seconds,
                             f"{m}x{big} @ {big}x{big}"))
    return out


def fp8_matmul_probes(torch: Any, device: Any, big: int, batches: tuple[int, ...],
                      fp8: str = "float8_e4m3fn") -> list[Probe]:
    """e4m3 × e4m3 → bf16 with per-tensor scales (torch._scaled_mm, what fp8 serving
    kernels run), square and skinny; ``fp8`` the e4m3 dtype this GPU takes (fp8_format).
    cuBLASLt wants every dimension a multiple of 16, so the skinny shapes start at M = 16."""
    if not hasattr(torch, fp8) or not hasattr(torch, "_scaled_mm"):
        return [Probe(f"{fp8} matmul", 0.0, "unsupported: this torch has no fp8")]
    one = torch.tensor(1.0, device=device)
    kind = getattr(torch, fp8)

    def operand(rows: int) -> Any:
        return torch.randn(rows, big, device=device).to(kind)

    def run(a: Any, b: Any) -> Any:
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    try:
        b = operand(big).t()  # the second operand column-major, as _scaled_mm requires
        seconds = timed_s(torch, device, partial(run, operand(big), b))
    except (RuntimeError, TypeError) as exc:
        return [Probe(f"{fp8} matmul", 0.0, f"unsupported: {exc}")]
    out = [Probe(f"{fp8} matmul {big}³", 2 * big**3 / seconds, "square, bf16 out")]
    for m in batches:
        seconds = timed_s(torch, device, partial(run, operand(m), b))
        out.append(Probe(f"{fp8} matmul M={m}", 2 * m * big * big / seconds,
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


# /proc/cpuinfo's fields that name the processor, most telling first: x86's "model name"
# ("Intel(R) Xeon(R) Processor", this 2-core VM's, 2026-12-05), a board's "Model" (a
# Raspberry Pi); then an arm64 kernel's core ids (arm_core_names), which is all a GH200's
# cpuinfo gives; then older ARM kernels' "Hardware", MIPS's "cpu model", POWER's "cpu"
CPUINFO_NAME_KEYS = ("model name", "Model")
CPUINFO_LATER_KEYS = ("Hardware", "cpu model", "cpu")
MIDR_EL1_PATH = "/sys/devices/system/cpu/cpu0/regs/identification/midr_el1"


def host_cpu_name(system: str | None = None, cpuinfo: str | None = None,
                  brand_string: str | None = None, midr_el1: str | None = None) -> str:
    """The host CPU's model, as the device name of a CPU (or Apple GPU) measurement: Linux's
    /proc/cpuinfo (``cpuinfo``, read where not given: "Intel(R) Xeon(R) Processor"; an arm64
    kernel's core ids named by arm_core_names: a GH200's "Neoverse-V2"), macOS's
    ``sysctl -n machdep.cpu.brand_string`` (``brand_string``, asked where not given: "Apple
    M2 Pro"); else what platform knows ("aarch64", which names an instruction set, not a CPU).
    ``system`` as platform.system() names it; ``midr_el1`` cpu0's register, as sysfs gives it
    (read where cpuinfo is not given), for a cpuinfo without the ids."""
    system = system or platform.system()
    if system == "Linux":
        if cpuinfo is None:
            cpuinfo, midr_el1 = _read_text("/proc/cpuinfo"), _read_text(MIDR_EL1_PATH)
        fields: dict[str, str] = {}
        for line in cpuinfo.splitlines():
            key, colon, value = line.partition(":")
            if colon and value.strip():
                fields.setdefault(key.strip(), " ".join(value.split()))
        named = next((fields[k] for k in CPUINFO_NAME_KEYS if k in fields), "") \
            or arm_core_names(cpuinfo, midr_el1 or "") \
            or next((fields[k] for k in CPUINFO_LATER_KEYS if k in fields), "")
        if named:
            return named
    elif system == "Darwin":
        if brand_string is None:
            try:
                brand_string = subprocess.run(
                    ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                    text=True, timeout=5, check=False).stdout
            except (OSError, subprocess.SubprocessError):
                brand_string = ""
        if brand_string.strip():
            return " ".join(brand_string.split())
    return platform.processor() or platform.machine() or "unknown CPU"


def arm_core_names(cpuinfo: str, midr_el1: str = "") -> str:
    """The Arm cores an arm64 /proc/cpuinfo names by id ("CPU implementer", "CPU part": a
    GH200's 0x41 and 0xd4f), as lscpu names them (data/arm_cpu_parts.json): "Neoverse-V2";
    each kind once, in order, for a big.LITTLE chip ("Cortex-A76 + Cortex-A55"); a part the
    table lacks by its implementer ("ARM part 0xd99"). Without the ids, ``midr_el1``'s
    (0x410fd4f0: implementer bits 31-24, part 15-4); "" where neither is known."""
    ids: list[tuple[int, int]] = []
    implementer = None
    for line in cpuinfo.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        try:
            if key == "CPU implementer":
                implementer = int(value, 16)
            elif key == "CPU part" and implementer is not None:
                ids.append((implementer, int(value, 16)))
        except ValueError:
            continue
    if not ids and midr_el1.strip():
        try:
            midr = int(midr_el1.strip(), 16)
        except ValueError:
            return ""
        ids.append((midr >> 24 & 0xFF, midr >> 4 & 0xFFF))
    table = load_data("arm_cpu_parts.json")["implementers"]
    names: list[str] = []
    for impl, part in ids:
        vendor = table.get(f"0x{impl:02x}")
        if vendor is None:
            continue
        name = vendor["parts"].get(f"0x{part:03x}") or f"{vendor['name']} part 0x{part:03x}"
        if name not in names:
            names.append(name)
    return " + ".join(names)


def _read_text(path: str) -> str:
    """A small system file's text ("" where it cannot be read)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(1 << 20)
    except OSError:
        return ""


def host_ram_bytes() -> float | None:
    """This machine's RAM (None where the system does not say)."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def device_memory_bytes(torch: Any, device: Any) -> float:
    """Memory the grid may use: what CUDA reports free, else the machine's RAM."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return float(free)
    ram = host_ram_bytes()
    return float("inf") if ram is None else ram


def device_total_bytes(torch: Any, device: Any) -> float | None:
    """The device's whole memory as its runtime reports it (CUDA's total, Metal's recommended
    working set, a CPU's RAM), for the measured device's record; None where none is known."""
    try:
        if device.type == "cuda":
            return float(torch.cuda.mem_get_info(device)[1])
        if device.type == "mps":
            return float(torch.mps.recommended_max_memory())
        return host_ram_bytes()
    except (RuntimeError, AttributeError, ValueError, OSError):
        return None


def matmul_dtypes(device_type: str, dtype: str) -> list[str]:
    """The matmul peaks the device record needs for rows of a ``dtype`` model: the model's
    own, which its weights' matmuls and its cache's QKᵀ and PV run at
    (``Deployment.attention_compute_dtype``: an f32 cache at fp32, a 16-bit one at its own);
    a GPU's record states both 16-bit rates, as the catalog's GPU records do."""
    extra = ["bfloat16", "float16"] if device_type != "cpu" else []
    return [dtype, *(d for d in extra if d != dtype)]


def probe_device(torch: Any, dev: Any, quick: bool, skipped: list[str],
                 dtype: str = "float32") -> list[Probe]:
    """Every probe this device runs for a ``dtype`` model; what it cannot run is named in
    ``skipped``."""
    # big enough to leave every cache: 256 MiB on a CPU, 1 GiB on a GPU (4x with the full run)
    n_bytes = (256 if dev.type == "cpu" else 1024) * 2**20 * (1 if quick else 4)
    probes = bandwidth_probes(torch, dev, n_bytes)
    dtypes = matmul_dtypes(dev.type, dtype)
    if dev.type == "cpu":
        # a CPU's peak is not reached at one size: on a 2-core AMX Xeon (torch 2.13.0+cpu,
        # 2026-12-05) bf16 ran 1.06 TFLOP/s at 1024³ and 2.03 at 2048³, f16 313 and 275
        # GFLOP/s, so a 512-token bf16 prefill ran past the 1024³ figure's roofline; both
        # sizes are probed and the device record takes the better (accelerator_record)
        probes += matmul_probes(torch, dev, dtypes, 1024, ())
    big = 2048 if dev.type == "cpu" else (4096 if quick else 8192)
    probes += matmul_probes(torch, dev, dtypes, big, (1, 8, 64))
    fp8, why = fp8_format(torch, dev) if dev.type == "cuda" else (
        None, "needs a GPU: an sm_89+ NVIDIA or an AMD MI300+")
    if fp8 is not None:
        probes += fp8_matmul_probes(torch, dev, big, (16, 64, 256), fp8)
    else:
        skipped.append(f"fp8 matmul: {why}")
    return probes
