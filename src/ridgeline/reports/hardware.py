"""`ridgeline hardware [NAME]`: the accelerator catalog, or one record with its sources."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ridgeline.explain import Step
from ridgeline.hardware import (
    JSON_SPELLINGS,
    VISIBLE_MEMORY_FRACTION,
    Accelerator,
    catalog,
    device_memory_bytes,
)
from ridgeline.render import table
from ridgeline.roofline import ridge_point, ridge_step
from ridgeline.units import GIB, fmt_usd_per_hour


def _main_dtype(acc: Accelerator) -> str:
    return acc.resolve_dtype("bf16") if ("bf16" in acc.peak_flops or "fp16" in acc.peak_flops) \
        else max(acc.peak_flops, key=lambda d: acc.peak_flops[d])


def _record(acc: Accelerator) -> dict[str, Any]:
    dtype = _main_dtype(acc)
    return {
        "id": acc.id, "name": acc.name, "vendor": acc.vendor, "family": acc.family,
        "form": acc.form, "memory_bytes": acc.memory_bytes, "memory_size": acc.memory_size,
        "memory_unit": acc.memory_unit, "ecc_visible_bytes": acc.ecc_visible_bytes,
        "runtime_total_bytes": acc.runtime_total_bytes,
        "runtime_devices": acc.runtime_devices,  # an MI250's 2 GCDs: kept when read back
        "device_memory_bytes": device_memory_bytes(acc),  # what every fit starts from
        "memory_bandwidth_bytes_per_s": acc.memory_bandwidth_bytes_per_s,
        "peak_flops_per_s": dict(acc.peak_flops),
        "ridge_flop_per_byte": {d: ridge_point(v, acc.memory_bandwidth_bytes_per_s)
                                for d, v in acc.peak_flops.items()},
        "ridge_dtype": dtype,
        "link": {"kind": acc.link_kind, "bytes_per_s_per_direction": acc.link_bytes_per_s,
                 **({} if acc.die_link_bytes_per_s is None else
                    {"die_bytes_per_s_per_direction": acc.die_link_bytes_per_s})},
        "price_per_hour_usd": acc.price_per_hour_usd,
        # the fewest parts the priced offer rents at once (a GB200 rack: 72), the GPUs of
        # that offer (null: not recorded), and the day the price was read (null where its
        # source gives none; --gpu-file reads it back)
        "rental_gpus": acc.rental_gpus, "price_offer_gpus": acc.price_offer_gpus,
        "price_date": acc.price_date or None, "tdp_w": acc.tdp_w,
        "aliases": list(acc.aliases), "sources": list(acc.sources),
        "figure_sources": {JSON_SPELLINGS.get(k, k): v for k, v in acc.figure_sources.items()},
        "notes": acc.notes,
    }


@dataclass(frozen=True)
class HardwareList:
    accelerators: tuple[Accelerator, ...]
    steps: tuple[Step, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"accelerators": [_record(a) for a in self.accelerators]}

    def text_lines(self) -> list[str]:
        rows = []
        for a in self.accelerators:
            dtype = _main_dtype(a)
            fp8 = a.peak_flops.get("fp8")
            rows.append([
                a.id, f"{a.peak(dtype) / 1e12:,.1f} {dtype}",
                f"{fp8 / 1e12:,.0f}" if fp8 else "-",
                f"{a.bandwidth_tb_s:.3g}", f"{a.memory_size:g} {a.memory_unit}",
                f"{ridge_point(a.peak(dtype), a.memory_bandwidth_bytes_per_s):.0f}",
                fmt_usd_per_hour(a.price_per_hour_usd) if a.price_per_hour_usd else "-",
            ])
        header = ["id", "dense TFLOP/s", "fp8", "TB/s", "memory", "ridge FLOP/byte", "$/h"]
        return [*table(rows, header), "",
                f"{len(rows)} accelerators; `ridgeline hardware ID` shows one with its sources."]


@dataclass(frozen=True)
class HardwareRecord:
    accelerator: Accelerator
    steps: tuple[Step, ...]

    def to_dict(self) -> dict[str, Any]:
        return _record(self.accelerator)

    def text_lines(self) -> list[str]:
        a = self.accelerator
        lines = [f"{a.id}: {a.name}",
                 f"  memory       {a.memory_size:g} {a.memory_unit} = {a.memory_bytes:,.0f} bytes"
                 + (f"; {a.ecc_visible_bytes:,.0f} visible with ECC on (the default)"
                    if a.ecc_visible_bytes else "")
                 + (f"; the runtime reports {a.runtime_total_bytes / GIB:.2f} GiB"
                    if a.runtime_total_bytes else ""),
                 *_counted_line(a),
                 f"  bandwidth    {a.bandwidth_tb_s:.4g} TB/s"]
        for dtype, flops in sorted(a.peak_flops.items(), key=lambda kv: kv[1]):
            ridge = ridge_point(flops, a.memory_bandwidth_bytes_per_s)
            lines.append(f"  peak {dtype:<7} {flops / 1e12:,.1f} TFLOP/s dense  "
                         f"(ridge {ridge:,.0f} FLOP/byte)")
        if a.link_kind:
            per_dir = f"{a.link_bytes_per_s / 1e9:,.0f} GB/s per direction" \
                if a.link_bytes_per_s else "bandwidth not recorded"
            lines.append(f"  link         {a.link_kind}, {per_dir}")
        if a.price_per_hour_usd:
            rented = f", rented as {a.rental_gpus}-GPU units" if a.rental_gpus > 1 else ""
            lines.append(f"  price        {fmt_usd_per_hour(a.price_per_hour_usd)} per device-hour "
                         f"(a typical on-demand figure, {a.price_date or 'undated'}{rented}; "
                         "see notes)")
        if a.aliases:
            lines.append(f"  aliases      {', '.join(a.aliases)}")
        if a.notes:
            lines.append(f"  notes        {a.notes}")
        lines += ["  sources", *(f"    {s}" for s in a.sources),
                  *(f"    {figure}: {s}" for figure, s in a.figure_sources.items())]
        return lines


@dataclass(frozen=True)
class HardwareRecords:
    """Several named records (``hardware h100,h200``), each as it shows alone."""

    records: tuple[HardwareRecord, ...]

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(replace(st, label=f"{r.accelerator.id}: {st.label}")
                     for r in self.records for st in r.steps)

    def to_dict(self) -> dict[str, Any]:
        return {"accelerators": [r.to_dict() for r in self.records]}

    def text_lines(self) -> list[str]:
        lines: list[str] = []
        for r in self.records:
            lines += [*([""] if lines else []), *r.text_lines()]
        return lines


def _counted_line(a: Accelerator) -> list[str]:
    """Where no log pins the runtime's total, the figure every fit starts from instead, and
    why (kv's budget said "25.4 GB as the runtime reports it" of an RTX 4090, a figure its
    record never showed): a discrete card's 98.5 % of what the driver shows, Apple's Metal
    working set. RTX 4090: 24 GiB × 0.985 = 23.64 GiB. Where its sources cite a log's total that
    the record leaves unpinned (figure_sources.runtime_total_bytes: an L40S's 44.42 GiB), it
    says so and why, not that no log pins one."""
    if a.runtime_total_bytes:
        return []
    cited = a.figure_sources.get("runtime_total_bytes")  # a log's total, left unpinned
    why = ("Metal's recommendedMaxWorkingSetSize, the share of the RAM the GPU may wire"
           if a.vendor == "apple" else
           f"{VISIBLE_MEMORY_FRACTION:.1%} of the memory: the driver keeps the rest; the "
           f"runtime total is {cited}" if cited else
           f"{VISIBLE_MEMORY_FRACTION:.1%} of the memory: the driver keeps the rest, and no "
           "log in the record pins this card's runtime total")
    return [f"  usable       {device_memory_bytes(a) / GIB:.2f} GiB, what fit and kv size "
            f"from ({why})"]


def hardware_list() -> HardwareList:
    return HardwareList(tuple(sorted(catalog().values(), key=lambda a: a.id)))


def hardware_record(acc: Accelerator) -> HardwareRecord:
    """The record with its ridge steps: the main dtype's, then each other format's the text
    prints (H100: bf16's 295.3, then fp32's 20, tf32's 148 and fp8's 591 FLOP/byte)."""
    main = acc.resolve_dtype(_main_dtype(acc))
    others = dict.fromkeys(acc.resolve_dtype(d) for d, _ in sorted(
        acc.peak_flops.items(), key=lambda kv: kv[1]))
    return HardwareRecord(acc, (ridge_step(acc, main), *(
        replace(ridge_step(acc, d), label=f"ridge point, {d}") for d in others if d != main)))
