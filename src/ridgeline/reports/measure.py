"""`ridgeline measure`'s answer: the probes (beside a catalog card's rated figures where one is
named), the device record they make, the rows written, what was skipped, and the next step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ridgeline.device_probes import PROBE_DTYPES, Probe, matmul_dtypes
from ridgeline.explain import Step

if TYPE_CHECKING:
    from ridgeline.hardware import Accelerator
    from ridgeline.measure import MeasureResult
    from ridgeline.measure_plan import MeasurePlan

# said where a GPU's rows go to validate against its probed record only: the H200's run 2
# (validation/h200/2026-11-29-run2.csv) scored 2.7 % (CUDA graph) and 7.3 % (eager) median
# error against the catalog's h200-sxm, 9.9 % and 18.8 % against its probed record
CARD_HINT = ("the bundled torch profiles were fitted against spec sheets: --card names the "
             "catalog card to score these rows against; the probed record below counts the "
             "probes' shortfall again")

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
    card_id: str = ""  # --card: the catalog card the rows were also written as
    card_rows_path: str = ""  # where they were (rows.h200-sxm.csv)
    card_command: str = ""  # the validate of those rows: against the card's spec sheet
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
        if self.card_id:
            lines += self._card_lines(wrote)
        elif self.record is not None:
            if not self.device.startswith("cpu"):  # a GPU: a catalog card it could be read as
                lines.append(f"  ({CARD_HINT})")
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

    def _card_lines(self, wrote: str) -> list[str]:
        """--card: the rows as the card's, and the two validates, each with its question;
        the card's last (the next step: the bundled profiles' own reference)."""
        device = (f" and the measured device to {self.record_path}" if self.record is not None
                  else "")
        lines = [f"{wrote}{device}, and as the catalog's {self.card_id} to "
                 f"{self.card_rows_path}"]
        if self.next_command:
            lines.append(f"  against the probes (how near each step came to what they "
                         f"reached): {self.next_command}")
        lines.append(f"  against {self.card_id}'s spec sheet (the reference the bundled "
                     "torch profiles were fitted against):")
        return [*lines, f"next: {self.card_command}"]

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
            "card": ({"id": self.card_id, "rows": self.card_rows_path} if self.card_id
                     else None),
            "next": self.card_command or self.next_command or None,
            "validate_against_probes": self.next_command or None,
            "cautions": [] if self.record is not None or self.next_command or self.card_id
                        else [f"no device record: {self._no_record_words()}"],
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


@dataclass(frozen=True)
class MeasurePlanReport:
    """--dry-run: what the run would time and skip, and a floor on its time."""

    plan: MeasurePlan
    quick: bool
    rows_path: str
    card_rows_path: str = ""  # --card: where the rows are written again, naming the card

    def _probe_words(self) -> str:
        if not self.plan.probes:
            return "none (--skip-probes)"
        kind = self.plan.device.split(":")[0]
        dtypes = ", ".join(matmul_dtypes(kind, self.plan.dtype))
        fp8 = "; fp8 where the GPU has it" if kind == "cuda" else ""
        return f"bandwidth (a copy and a read), {dtypes} matmuls square and skinny{fp8}"

    def text_lines(self) -> list[str]:
        plan = self.plan
        decode = [p for p in plan.points if not p.prefill]
        prefill = [p for p in plan.points if p.prefill]
        engines = "eager and from a CUDA graph" if plan.graphs else "eager"
        lines = [f"dry run (nothing measured, no device touched): {plan.model} in "
                 f"{plan.dtype}{' with fp8 linear weights' if plan.fp8 else ''} on "
                 f"{plan.device}",
                 f"  probes: {self._probe_words()}",
                 f"  decode: {len(decode)} points, {engines}"
                 + ("".join(f"; at {c:,} tokens batch "
                            + ", ".join(str(p.batch) for p in decode if p.context == c)
                            for c in dict.fromkeys(p.context for p in decode)) or ": none"),
                 "  prefill: " + (", ".join(f"{p.context:,}" for p in prefill) or "none")
                 + " tokens"]
        if plan.graphs and plan.moe:
            lines.append("  (an MoE model's graphs need torch._grouped_mm, which the run tries "
                         "first; without it decode is eager only)")
        memory = (f"{plan.memory_bytes / 2**30:,.1f} GiB ({plan.memory_from}), "
                  f"{plan.weights_bytes / 2**30:,.1f} GiB of it weights"
                  if plan.memory_bytes is not None else
                  "only the device can say (--card or --memory-gib for the skips it knows)")
        lines.append(f"  memory: {memory}")
        lines += [f"  skipped: {s}" for s in plan.skipped]
        if plan.floor_s is not None:
            lines.append(f"  time: the {plan.steps:,} model steps' floor at {plan.card}'s rated "
                         f"figures is {plan.floor_s:,.2f} s; the probes, the model's random "
                         "weights, the caches and the runtime's start-up add to it")
        else:  # a CPU is no catalog card (--card is refused there): no rated figures
            why = ("no floor: no catalog card is a CPU" if plan.device == "cpu" else
                   "--card prices their floor")
            lines.append(f"  time: {plan.steps:,} model steps ({why})")
        card = (f", and as the catalog's {plan.card} to {self.card_rows_path}"
                if self.card_rows_path else "")
        lines.append(f"would write {len(decode) * (2 if plan.graphs else 1) + len(prefill)} "
                     f"rows to {self.rows_path}{card}")
        return lines

    def to_dict(self) -> dict[str, Any]:
        plan = self.plan
        return {"dry_run": True, "torch_device": plan.device, "model": plan.model,
                "dtype": plan.dtype, "fp8": plan.fp8, "probes": plan.probes,
                # each point's length as the CSV's context_len column and every command's
                "points": [{"kind": "prefill" if p.prefill else "decode", "batch": p.batch,
                            "context_len": p.context,
                            "engines": ["torch-eager"] + (["torch-cudagraph"] if plan.graphs
                                                          and not p.prefill else [])}
                           for p in plan.points],
                "skipped": list(plan.skipped), "memory_bytes": plan.memory_bytes,
                "memory_from": plan.memory_from or None,
                "weights_bytes": plan.weights_bytes, "model_steps": plan.steps,
                "floor_s": plan.floor_s, "floor_card": plan.card or None,
                "wrote": None, "would_write": self.rows_path,
                "would_write_card": self.card_rows_path or None}
