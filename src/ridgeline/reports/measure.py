"""`ridgeline measure`'s answer: the probes (beside a catalog card's rated figures where one is
named), the device record they make, the rows written, what was skipped, and the next step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ridgeline.device_probes import PROBE_DTYPES, Probe
from ridgeline.explain import Step

if TYPE_CHECKING:
    from ridgeline.hardware import Accelerator
    from ridgeline.measure import MeasureResult

# the CSV's columns that hold counts: typed as integers in the JSON (the rest are words)
COUNT_COLUMNS = ("num_gpus", "tp", "batch", "input_len", "output_len", "context_len")


@dataclass(frozen=True)
class MeasureReport:
    device: str  # as asked: cpu, cuda:1, mps
    result: MeasureResult
    rows_path: str  # as given to -o
    record: dict[str, Any] | None = None  # the device record written (None: --skip-probes)
    record_path: str = ""  # the record's place beside the rows (written there unless None)
    memory_from_flag: bool = False  # the record's memory is --memory-gib's, not the runtime's
    rated: Accelerator | None = None  # --rated-gpu
    next_command: str = ""  # the validate to run next ("" where no record of the rows' id is known)
    earlier_record: str = ""  # --skip-probes: the earlier run's record the next step names
    steps: tuple[Step, ...] = ()

    def _memory_bytes(self) -> float | None:
        return self.record["memory_bytes"] if self.record else None

    def _no_record_words(self) -> str:
        return (f"to validate them, give --gpu-file a record of {self.result.gpu_id} (a run "
                "without --skip-probes writes one)")

    def text_lines(self) -> list[str]:
        result = self.result
        lines = [f"{result.device_name} ({self.device})"]
        for p in result.probes:
            unit = "GB/s" if "bandwidth" in p.name else "TFLOP/s"
            value = p.value / 1e9 if unit == "GB/s" else p.value / 1e12
            line = f"  {p.name:<28} {probe_figure(value):>10} {unit}  ({p.detail})"
            lines.append(line + (rated_beside(p, self.rated) if self.rated else ""))
        memory = self._memory_bytes()
        if memory is not None:
            lines.append(f"  memory recorded {memory / 2**30:,.1f} GiB ("
                         + ("--memory-gib" if self.memory_from_flag else
                            "as the runtime reports it") + ")")
        lines += [f"  skipped: {s}" for s in result.skipped]
        wrote = f"wrote {len(result.rows)} rows to {self.rows_path}"
        if self.record is not None:
            lines.append(f"{wrote} and the measured device to {self.record_path}; next: "
                         f"{self.next_command}")
        else:  # the rows name a device no catalog holds: validate needs a record of it
            where = ("an earlier run's record is beside them" if self.earlier_record ==
                     self.record_path else f"an earlier run's record of {result.gpu_id} is in "
                     f"their folder, {self.earlier_record}")
            lines.append(f"{wrote} (no probes: no device record); "
                         + (f"{where}; next: {self.next_command}" if self.next_command else
                            self._no_record_words()))
        return lines

    def to_dict(self) -> dict[str, Any]:
        """The figures in SI units (bytes/s, FLOP/s, bytes), each named for its unit; the rows
        as the CSV holds them, counts as integers and the value as a number."""
        result = self.result
        memory = self._memory_bytes()
        return {
            "device": {"torch_device": self.device, "name": result.device_name,
                       "gpu_id": result.gpu_id, "runtime_memory_bytes": result.memory_bytes,
                       "recorded_memory_bytes": memory,
                       "recorded_memory_from": None if memory is None else
                       ("--memory-gib" if self.memory_from_flag else "runtime")},
            "probes": [probe_dict(p, self.rated) for p in result.probes],
            "rated_gpu": self.rated.id if self.rated else None,
            "device_record": ({"path": self.record_path, **self.record} if self.record
                              else None),
            "wrote": self.rows_path,
            "rows": [row_dict(r) for r in result.rows],
            "skipped": list(result.skipped),
            "next": self.next_command or None,
            "cautions": [] if self.record is not None or self.next_command else
                        [f"no device record: {self._no_record_words()}"],
        }


def row_dict(row: dict[str, str]) -> dict[str, Any]:
    """A written row for the JSON: batch "128" → 128, value "1234.5" → 1234.5."""
    return {k: (int(v) if k in COUNT_COLUMNS and v else float(v) if k == "value" else v)
            for k, v in row.items()}


def probe_dict(probe: Probe, rated: Accelerator | None) -> dict[str, Any]:
    """A probe for the JSON, its figure named for its unit: {"name": "copy bandwidth",
    "bytes_per_s": 4.32e12, ...}, or a matmul's "flop_per_s" and the catalog "dtype" it
    records; with --rated-gpu the rated figure read against and the share reached."""
    bandwidth = "bandwidth" in probe.name
    unit = "bytes_per_s" if bandwidth else "flop_per_s"
    out: dict[str, Any] = {"name": probe.name, unit: probe.value, "detail": probe.detail}
    if not bandwidth:
        out["dtype"] = PROBE_DTYPES.get(probe.name.split()[0])
    if rated is not None:
        rate = rated_figure(probe, rated)
        out[f"rated_{unit}"] = rate
        out["share_of_rated"] = probe.value / rate if rate else None
    return out


def probe_figure(value: float) -> str:
    """A probe in GB/s or TFLOP/s: two decimals, three significant figures below 1 (a
    CPU's 1 x 2048 bf16 matmul at 0.00421 TFLOP/s, which two decimals printed as 0.00)."""
    return f"{value:,.2f}" if value >= 1 else f"{value:.3g}"


def rated_figure(probe: Probe, rated: Accelerator) -> float | None:
    """The --rated-gpu figure a probe is read against: a bandwidth probe's rated bandwidth
    (bytes/s), a square matmul's dense peak of its dtype (FLOP/s: an H200's bf16 989.4e12);
    None for a skinny matmul, which memory bounds, and for a dtype the record gives no peak
    for."""
    if "bandwidth" in probe.name:
        return rated.memory_bandwidth_bytes_per_s
    peak = rated.peak_flops.get(PROBE_DTYPES.get(probe.name.split()[0], ""))
    return peak if "³" in probe.name and peak else None


def rated_beside(probe: Probe, rated: Accelerator) -> str:
    """The --rated-gpu figure a probe is read against, and the share reached: a bandwidth
    probe against the rated bandwidth, a square matmul against the dense peak of its dtype
    (an H200's bf16 8192³ at 778.4 TFLOP/s: rated 989.4, 79 %); "" for a skinny matmul,
    which memory bounds, for a dtype the record gives no peak for, and for a probe that
    measured nothing."""
    rate = rated_figure(probe, rated)
    if not probe.value or not rate:
        return ""
    if "bandwidth" in probe.name:
        return f"  rated {rate / 1e9:,.0f} GB/s ({probe.value / rate:.0%})"
    return f"  rated {rate / 1e12:,.1f} TFLOP/s dense ({probe.value / rate:.0%})"
