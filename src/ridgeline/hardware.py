"""Accelerators: peak FLOP/s per compute dtype, memory bandwidth, capacity, links; the catalog.

Each record in ``data/accelerators/*.json`` carries its sources. Names resolve forgivingly
(``H100``, ``h100-sxm5``, ``NVIDIA H100 80GB HBM3``, ``A100-80GB-PCIe``); an ambiguous or
unknown name gets an error listing the closest ids. A user adds an accelerator from a JSON
file or flags.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from ridgeline.catalog import normalise, resolve_name
from ridgeline.datafiles import data_files, load_data
from ridgeline.errors import InputError, shorten, shorten_path, wrong_kind
from ridgeline.record_views import ReadOnlyDict, headline_repr
from ridgeline.records import Fields
from ridgeline.units import GB, GIB, require_positive
from ridgeline.userfiles import json_loads, read_text

COMPUTE_DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp6", "fp4", "int4")
# When a dtype is missing, the next one a kernel would fall back to.
_FALLBACK = {"bf16": "fp16", "fp16": "bf16", "tf32": "fp32"}


# macOS lets the GPU wire 2/3 of RAM up to 36 GiB and 3/4 above (iogpu.wired_limit_mb = 0),
# as llama.cpp's ggml_metal_init logs recommendedMaxWorkingSetSize: 10,922.67 MB on 16 GB
# (llama-cpp-python #687), 21,845.34 MB on 32 GB (llama.cpp PR #2011, ollama #434),
# 73,728.00 MB on 96 GB (llama.cpp #3213). Newer macOS may allow more (107.52 GiB on a
# 128 GB M5 Max under macOS 26, antirez/ds4 #893); `sysctl iogpu.wired_limit_mb` raises it.
METAL_SMALL_RAM_BYTES = 36 * GIB
METAL_SMALL_SHARE = 2 / 3
METAL_LARGE_SHARE = 3 / 4


def metal_working_set_bytes(ram_bytes: float) -> float:
    """The GPU's share of unified memory under macOS's default wired limit."""
    share = METAL_SMALL_SHARE if ram_bytes <= METAL_SMALL_RAM_BYTES else METAL_LARGE_SHARE
    return ram_bytes * share


# the plausible figures a record may give, in base units (an H100 SXM: 3.35e12 B/s, 9.894e14
# bf16 FLOP/s); a figure outside them is a unit slip
BANDWIDTH_RANGE = (1e8, 1e14)
FLOPS_RANGE = (1e9, 1e17)


# the families whose devices are not called GPUs (Accelerator.device_noun)
DEVICE_NOUNS = {"tpu": "chip", "gaudi": "HPU"}


@dataclass(frozen=True)
class Accelerator:
    """One accelerator's spec sheet, SI inside (``resolve_accelerator`` reads the catalog by
    id, alias or marketing name; ``custom_accelerator`` builds one from peak and bandwidth):
    memory, bandwidth, dense peak FLOP/s per compute dtype, links, and each figure's source.
    An H100 SXM: 989.4 TFLOP/s at bf16 (``peak("bf16")``) over 3.35 TB/s, a ridge of
    989.4e12 ÷ 3.35e12 = 295 FLOP/byte (roofline.ridge_point); 80 GiB of memory."""

    id: str
    name: str
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    peak_flops: Mapping[str, float] = field(hash=False)
    vendor: str = ""
    family: str = ""
    form: str = ""
    memory_size: float = 0.0
    memory_unit: str = "GB"
    link_kind: str | None = None
    link_bytes_per_s: float | None = None  # per direction
    # per direction, between the devices one part shows the runtime (runtime_devices): an
    # MI250's in-package link between its two GCDs; None: one device, or not recorded
    die_link_bytes_per_s: float | None = None
    price_per_hour_usd: float | None = None
    tdp_w: float | None = None
    sources: tuple[str, ...] = ()
    # a figure read from a source other than the first, keyed by its field ("peak_flops"):
    # where, and how (an H100's dense peaks are its whitepaper's; the product page prints the
    # sparse ones, twice these)
    figure_sources: Mapping[str, str] = field(default_factory=dict, hash=False)
    notes: str = ""
    aliases: tuple[str, ...] = ()
    ecc_visible_bytes: float | None = None  # what the driver exposes with ECC on by default
    # The device total the CUDA/ROCm runtime reports (torch.cuda.mem_get_info), where logs
    # pin it: what an engine multiplies its memory fraction by. A discrete card's is a little
    # under what nvidia-smi shows (H100: 79.18 GiB); a unified-memory part lends the GPU its
    # RAM less what the OS and firmware keep (DGX Spark: 121.69 of 128 GiB).
    runtime_total_bytes: float | None = None
    # nvidia-smi's memory.total (MiB x 2^20), where a public nvidia-smi output pins it: what
    # SGLang's default memory fraction reads (H100 80GB: 81,559 MiB), a little above the
    # runtime's total; read by that rule alone (smi_total_bytes)
    smi_total_bytes: float | None = None
    # dense FP16 tensor FLOP/s with FP16 accumulation, where faster than peak_flops' fp16
    # (which is the FP32-accumulate rate): a GeForce card runs FP32 accumulate at half rate
    fp16_accumulate_flops: float | None = None
    # devices the runtime lists for one of these parts: ROCm shows each of an MI250's two
    # dies (GCDs) as a GPU of its own, with half the memory and bandwidth; 1 for the rest
    # (a B200's two dies are one CUDA device)
    runtime_devices: int = 1
    # these parts one operating-system host carries, where not a DGX/HGX board's 8 (a GB200
    # compute tray: 4; parallel.host_gpus); None: not recorded
    host_gpus: int | None = None
    # the fewest of these parts the priced offer rents at once: a GB200 is rented rack-scale
    # (an NVL72's 72; Spheron: "There is no GB200 single-GPU rental"), so a plan of 5 pays
    # for 72; 1 where a part rents alone (``rented_gpus``)
    rental_gpus: int = 1
    # the GPUs of the offer ``price_per_hour_usd`` is read from, where it is recorded (AWS
    # g6e.xlarge: 1 L40S a VM), so that plan can say a replica needing more in one host is
    # priced at a rate no offer of that size was read at; None: not recorded
    price_offer_gpus: int | None = None
    # the day ``price_per_hour_usd`` was read (ISO, "2026-03-17"); "" where its source gives
    # none ("list price at time of writing"): said "undated" (``price_source``)
    price_date: str = ""

    def __post_init__(self) -> None:
        # one record serves every lookup (catalog() is cached): its mappings are read-only,
        # so a notebook's acc.peak_flops["bf16"] *= 2 cannot change later lookups' figures
        for name in ("peak_flops", "figure_sources"):
            value = getattr(self, name)
            if not isinstance(value, Mapping):
                raise InputError(f"{self.id}: {name} must be a mapping, got {value!r:.60}")
            if not isinstance(value, ReadOnlyDict):
                object.__setattr__(self, name, ReadOnlyDict(value))
        require_positive(self.memory_bytes, f"{self.id}: memory")
        if self.memory_unit not in ("GB", "GiB"):
            raise InputError(f"{self.id}: memory_unit must be GB or GiB, got {self.memory_unit!r}")
        if not self.memory_size:  # a record giving bytes alone: stated in GB from them
            object.__setattr__(self, "memory_size", float(f"{self.memory_bytes / 1e9:.4g}"))
            object.__setattr__(self, "memory_unit", "GB")
        if self.memory_size:
            stated = self.memory_size * (GIB if self.memory_unit == "GiB" else 1e9)
            if abs(self.memory_bytes / stated - 1) > 0.01:
                raise InputError(f"{self.id}: memory_bytes {self.memory_bytes:,.0f} is not "
                                 f"{self.memory_size:g} {self.memory_unit} ({stated:,.0f} bytes)")
        for what, value, low, high, example in (
                ("memory bandwidth", self.memory_bandwidth_bytes_per_s, *BANDWIDTH_RANGE,
                 "an H100 SXM: 3.35e12"),
                *((f"peak {d} FLOP/s", v, *FLOPS_RANGE, "an H100 SXM bf16: 9.894e14")
                  for d, v in self.peak_flops.items())):
            if value > 0 and not low <= value <= high:
                raise InputError(f"{self.id}: {what} {value:.3g} is not a plausible figure in "
                                 f"base units ({example}; between {low:.0e} and {high:.0e})")
        if self.ecc_visible_bytes is not None:
            require_positive(self.ecc_visible_bytes, f"{self.id}: visible memory")
            if self.ecc_visible_bytes > self.memory_bytes:
                raise InputError(f"{self.id}: visible memory exceeds the memory on the card")
        if self.runtime_total_bytes is not None:
            require_positive(self.runtime_total_bytes, f"{self.id}: runtime total memory")
            if self.runtime_total_bytes > self.memory_bytes:
                raise InputError(f"{self.id}: runtime total memory exceeds the memory on the "
                                 "device")
        if self.smi_total_bytes is not None:
            require_positive(self.smi_total_bytes, f"{self.id}: nvidia-smi total memory")
            if self.smi_total_bytes > self.memory_bytes:
                raise InputError(f"{self.id}: nvidia-smi total memory exceeds the memory on the "
                                 "device")
        if self.fp16_accumulate_flops is not None:
            fp16 = self.peak_flops.get("fp16")
            if fp16 is None or not fp16 <= self.fp16_accumulate_flops <= 4 * fp16:
                raise InputError(f"{self.id}: fp16_accumulate_flops {self.fp16_accumulate_flops:.3g}"
                                 " is not a faster rate of the fp16 peak (between it and 4x it)")
        if isinstance(self.runtime_devices, bool) or not isinstance(self.runtime_devices, int) \
                or self.runtime_devices < 1:
            raise InputError(f"{self.id}: runtime_devices must be a whole number ≥ 1, got "
                             f"{self.runtime_devices!r}")
        require_positive(self.memory_bandwidth_bytes_per_s, f"{self.id}: memory bandwidth")
        if not self.peak_flops:
            raise InputError(f"{self.id}: needs at least one peak FLOP/s figure")
        for dtype, value in self.peak_flops.items():
            if dtype not in COMPUTE_DTYPES:
                raise InputError(f"{self.id}: unknown compute dtype {dtype!r} in peak_flops")
            require_positive(value, f"{self.id}: peak {dtype} FLOP/s")

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        """The spec sheet's headline, not its notes and sources: Accelerator(id='h100-sxm',
        memory_bytes=8.58993e+10, memory_bandwidth_bytes_per_s=3.35e+12, peak_flops={…})."""
        return headline_repr(self, ("id", "name", "memory_bytes",
                                    "memory_bandwidth_bytes_per_s", "peak_flops"))

    @property
    def one_memory(self) -> bool:
        """Whether the GPU and the CPU share one memory (a Mac, a Strix Halo or GB10 box): no
        host memory apart to offload weights to."""
        return self.vendor == "apple" or self.form == "soc"

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB

    @property
    def visible_memory_bytes(self) -> float:
        """The memory the driver exposes: less than the card carries where ECC on GDDR6
        reserves a sixteenth by default (L40S: 46,068 of 49,152 MiB); on Apple silicon,
        Metal's recommendedMaxWorkingSetSize, the share of RAM the GPU may wire; on another
        unified-memory part with a runtime total in its record (DGX Spark), that total."""
        if self.vendor == "apple":
            return metal_working_set_bytes(self.memory_bytes)
        if self.form == "soc" and self.runtime_total_bytes:
            return self.runtime_total_bytes
        return self.ecc_visible_bytes or self.memory_bytes

    @property
    def source(self) -> str:
        """Where the record's figures come from: its first source, else its id."""
        return self.sources[0] if self.sources else self.id

    def source_of(self, figure: str) -> str:
        """Where one figure (a record field: "peak_flops", "memory_bandwidth_bytes_per_s")
        was read: its own source where the record gives one, else the record's."""
        return self.figure_sources.get(figure) or self.source

    @property
    def bandwidth_tb_s(self) -> float:
        return self.memory_bandwidth_bytes_per_s / 1e12

    def has(self, dtype: str) -> bool:
        return dtype in self.peak_flops

    @property
    def device_noun(self) -> str:
        """What the vendor and its runtime call one device, for the lines that count them:
        a TPU's "chip" (Google's docs price and count chips), a Gaudi's "HPU" (Habana's
        runtime, torch's 'hpu' device), else "GPU"."""
        return DEVICE_NOUNS.get(self.family, "GPU")

    def resolve_dtype(self, dtype: str) -> str:
        """The dtype a matmul of ``dtype`` actually runs at here: bf16 on a T4 (Turing, no bf16
        tensor cores) runs as fp16."""
        if dtype in self.peak_flops:
            return dtype
        fallback = _FALLBACK.get(dtype)
        if fallback and fallback in self.peak_flops:
            return fallback
        have = ", ".join(sorted(self.peak_flops))
        raise InputError(f"{self.id} has no {dtype} peak (it has {have})")

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s at a compute dtype: H100 SXM bf16 = 9.89e14."""
        return self.peak_flops[self.resolve_dtype(dtype)]

    def first_supported(self, dtypes: tuple[str, ...] | list[str]) -> str:
        """The first of a format's compute dtypes this chip runs natively."""
        for dtype in dtypes:
            if dtype in self.peak_flops:
                return dtype
        for dtype in dtypes:
            fallback = _FALLBACK.get(dtype)
            if fallback and fallback in self.peak_flops:
                return fallback
        # no rate for these matmuls: another dtype's peak would be a guess (fp8's, twice bf16's)
        return self.resolve_dtype(dtypes[0])  # raises, naming the peaks the record has

    @classmethod
    def from_record(cls, record: Mapping[str, Any], origin: str = "record") -> Accelerator:
        """One catalog-format record, each field read by name as its kind and plausible range
        (the bandwidth and peaks are checked for base units in __post_init__). A field may
        have its --json spelling (hardware --json's peak_flops_per_s), so a record copied
        from `ridgeline hardware NAME --json` reads as the catalog's."""
        record = _catalog_spelling(record, origin)
        f = Fields(record, origin)
        link = record.get("link") or {}
        if not isinstance(link, Mapping):
            raise f.refuse("link", "an object (kind, bytes_per_s_per_direction)", link)
        wire = Fields(link, f"{origin}: link")
        peaks = record.get("peak_flops")
        if peaks is None:
            if "num_hidden_layers" in record or "hidden_size" in record:  # --gpu-file config.json
                raise InputError(f"{origin} is a model's config.json, not an accelerator record "
                                 "(`ridgeline hardware h100 --json` is one)")
            raise InputError(f"{origin}: the record lacks 'peak_flops' (or 'peak_flops_per_s', "
                             "as `ridgeline hardware NAME --json` writes it)")
        if not isinstance(peaks, Mapping):
            raise f.refuse("peak_flops", "an object of compute dtypes to FLOP/s", peaks)
        ident = f.text("id")
        size, unit = f.number("memory_size", 0, MAX_MEMORY_BYTES, default=0), \
            f.text("memory_unit", "GB")
        stated = size * (GIB if unit == "GiB" else 1e9) if size else None  # (unit: checked)
        return cls(
            id=ident,
            name=f.text("name", ident),
            # the bytes, or the size and unit that state them (memory_size 48, GiB)
            memory_bytes=f.number("memory_bytes", 0, MAX_MEMORY_BYTES, default=stated,
                                  open_low=True),
            memory_bandwidth_bytes_per_s=f.number("memory_bandwidth_bytes_per_s", 0, math.inf,
                                                  open_low=True),
            peak_flops=f.numbers("peak_flops", 0, math.inf, open_low=True),
            vendor=f.choice("vendor", VENDORS),
            family=f.text("family", "").strip().lower(),  # as the catalog writes them
            form=f.choice("form", FORMS),
            memory_size=size,
            memory_unit=unit,
            link_kind=None if link.get("kind") is None else wire.text("kind"),
            link_bytes_per_s=wire.optional("bytes_per_s_per_direction", 1e8, 1e14),
            die_link_bytes_per_s=wire.optional("die_bytes_per_s_per_direction", 1e8, 1e14),
            price_per_hour_usd=f.optional("price_per_hour_usd", 0, MAX_PRICE_USD, open_low=True),
            tdp_w=f.optional("tdp_w", 0, MAX_TDP_W, open_low=True),
            sources=f.texts("sources"),
            figure_sources=f.named_texts("figure_sources", FIGURES),
            notes=f.text("notes", ""),
            aliases=f.texts("aliases"),
            ecc_visible_bytes=f.optional("ecc_visible_bytes", 0, MAX_MEMORY_BYTES, open_low=True),
            smi_total_bytes=f.optional("smi_total_bytes", 0, MAX_MEMORY_BYTES, open_low=True),
            runtime_total_bytes=f.optional("runtime_total_bytes", 0, MAX_MEMORY_BYTES,
                                           open_low=True),
            fp16_accumulate_flops=f.optional("fp16_accumulate_flops", 0, math.inf,
                                             open_low=True),
            runtime_devices=f.whole("runtime_devices", 1, MAX_RUNTIME_DEVICES, default=1),
            host_gpus=f.whole("host_gpus", 1, MAX_HOST_GPUS) if "host_gpus" in record else None,
            rental_gpus=f.whole("rental_gpus", 1, MAX_RENTAL_GPUS, default=1),
            price_offer_gpus=f.whole("price_offer_gpus", 1, MAX_RENTAL_GPUS)
            if record.get("price_offer_gpus") is not None else None,  # null: --json's None
            # null as `hardware --json` writes an undated price, or absent
            price_date=_iso_date(f.text("price_date", "") if record.get("price_date") is not None
                                 else "", f"{origin}: price_date"),
        )


# The record fields `ridgeline hardware --json` names otherwise, its unit in the name as every
# rate in --json has it (roofline's peak_flops_per_s); a record may use either spelling.
JSON_SPELLINGS = {"peak_flops": "peak_flops_per_s"}


def _catalog_spelling(record: Mapping[str, Any], origin: str) -> Mapping[str, Any]:
    """The record with its fields under the catalog's names (peak_flops_per_s read as
    peak_flops, in figure_sources too); one field under both names is refused."""
    renamed = {json_key: key for key, json_key in JSON_SPELLINGS.items()}
    if not any(k in record for k in renamed) and not (
            isinstance(sources := record.get("figure_sources"), Mapping)
            and any(k in sources for k in renamed)):
        return record
    out = dict(record)
    for json_key, key in renamed.items():
        if json_key in out:
            if key in out:
                raise InputError(f"{origin}: gives both '{key}' and '{json_key}', one field "
                                 "under two names: keep one")
            out[key] = out.pop(json_key)
    sources = out.get("figure_sources")
    if isinstance(sources, Mapping):
        out["figure_sources"] = {renamed.get(k, k): v for k, v in sources.items()}
    return out


# the words data/accelerators/SCHEMA.md allows; 'measured' is a `ridgeline measure` record's
VENDORS = ("nvidia", "amd", "intel", "apple", "google", "measured")
FORMS = ("datacenter", "workstation", "consumer", "soc", "measured")
# the fields a record's figure_sources may name
FIGURES = ("memory_bytes", "memory_bandwidth_bytes_per_s", "peak_flops", "fp16_accumulate_flops",
           "ecc_visible_bytes", "runtime_total_bytes", "link", "price_per_hour_usd", "tdp_w",
           "host_gpus", "rental_gpus", "price_offer_gpus")
MAX_MEMORY_BYTES = 1e15  # a petabyte: past any one accelerator's memory
MAX_PRICE_USD = 1000.0  # per device-hour
MAX_TDP_W = 100_000.0  # a whole wafer-scale system draws tens of kW
MAX_RUNTIME_DEVICES = 8  # devices one part shows the runtime (an MI250: 2)
MAX_HOST_GPUS = 64  # parts one host carries
MAX_RENTAL_GPUS = 1024  # parts one rental unit holds (an NVL72 rack: 72)


def _iso_date(text: str, where: str) -> str:
    """A record's date as ISO YYYY-MM-DD ("2026-03-17"), or "" for none; another form refused."""
    if not text:
        return ""
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        raise InputError(f"{where} must be a date as YYYY-MM-DD, got {text[:40]!r}") from None
    return text


def rented_gpus(acc: Accelerator, gpus: int) -> int:
    """The GPUs a deployment of ``gpus`` pays for: whole rental units of ``rental_gpus``
    (5 GB200s rented as 72-GPU racks: 72; 80: 144); ``gpus`` where a part rents alone."""
    unit = acc.rental_gpus
    return -(-gpus // unit) * unit


def price_source(acc: Accelerator) -> str:
    """Where ``price_per_hour_usd`` comes from: its ``figure_sources`` entry, else the
    notes' "Price: ..." sentence (MI300X: "Vultr on-demand $/GPU-hour (neocloud; ...)");
    "" where neither says."""
    if "price_per_hour_usd" in acc.figure_sources:
        return acc.figure_sources["price_per_hour_usd"]
    _, found, rest = acc.notes.partition("Price: ")
    if not found:
        return ""
    return rest.split(". ")[0].rstrip(".")


@lru_cache(maxsize=1)
def catalog() -> dict[str, Accelerator]:
    """Every bundled accelerator by id."""
    accelerators: dict[str, Accelerator] = {}
    for name in data_files("accelerators"):
        for record in load_data(f"accelerators/{name}"):
            acc = Accelerator.from_record(record, name)
            if acc.id in accelerators:
                raise InputError(f"accelerator id {acc.id!r} appears twice in the catalog")
            accelerators[acc.id] = acc
    return accelerators


@lru_cache(maxsize=1)
def _names() -> dict[str, str]:
    table: dict[str, str] = {}
    for acc in catalog().values():
        for alias in (acc.id, acc.name, *acc.aliases):
            table[normalise(alias)] = acc.id
    return table


_USER: dict[str, Accelerator] = {}


# A user's accelerator id, as a measurements row names it: one word of letters, digits, '-',
# '_' and '.', as the catalog writes its own (h200-sxm, rtx-6000-ada), at most 64 characters.
RECORD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_record_id(ident: str, what: str = "accelerator record id") -> str:
    """``ident`` if it may name a user's accelerator (``measure --gpu-id``, any ``--gpu-file``
    record): one word (RECORD_ID) and none the catalog answers to, which would silently
    re-card every row that names the catalog's card, and print a card of other figures under
    the catalog's name. ``what`` names it in the one-line refusal ("--gpu-id")."""
    if not ident.strip():
        raise InputError(f"{what} is empty")
    if not RECORD_ID.fullmatch(ident):
        raise InputError(f"{what} {shorten(ident)!r}: use letters, digits, '-', '_' and '.' "
                         "(at most 64, the first a letter or digit), as an accelerator id is "
                         "written (h200-run1)")
    taken = catalog_id_named(ident)
    if taken:
        raise InputError(f"{what} {ident!r} is the catalog's {taken}: give it an id of its "
                         f"own (e.g. my-{taken}), so that neither card is read as the other")
    return ident


def register(acc: Accelerator, what: str = "accelerator record id") -> tuple[tuple[str, str], ...]:
    """Make a user's accelerator (``--gpu-file``) resolvable by its id and its aliases, as
    the catalog's records are, once check_record_id has passed the id (``what`` names it in
    its refusal). A name another user record already answers to is refused. An alias the
    catalog answers to stays the catalog's (a record copied from `hardware --json` carries
    the catalog's aliases): returned with the catalog id it names, (alias, id), for the
    command to refuse where a row names one (its rows would read either card)."""
    key = normalise(check_record_id(acc.id, what))
    keys = {key: acc.id}
    shadowed: list[tuple[str, str]] = []
    for alias in acc.aliases:
        if not normalise(alias) or normalise(alias) in keys:
            continue
        taken = catalog_id_named(alias)
        if taken:
            shadowed.append((alias, taken))
        else:
            keys[normalise(alias)] = alias
    for name_key, name in keys.items():
        other = _USER.get(name_key)
        if other is not None and normalise(other.id) != key:  # not this record again
            raise InputError(f"{acc.id} and {other.id} both answer to {shorten(name)!r} (an id "
                             "or an alias): rows naming it would take one of them; drop it "
                             "from one record")
    for name_key in keys:
        _USER[name_key] = acc
    return tuple(shadowed)


def catalog_id_named(name: str) -> str | None:
    """The catalog id that ``name`` resolves to (an id, a name, an alias, a unique prefix
    such as 'rtx-6000' for rtx-6000-ada, or one with its memory size: 'A100-80G',
    'A100-80GB-PCIe'), else None."""
    try:
        return _catalog_id(name)
    except InputError:  # unknown, or a prefix of several
        return None


# the RTX Blackwells' forms, compute capability 12.x (RTX PRO 6000, RTX 5090, DGX Spark's GB10)
SM12X_FORMS = ("consumer", "workstation", "soc")


def blackwell_generation(acc: Accelerator) -> str | None:
    """'sm100' for NVIDIA's data-centre Blackwells (B200 and GB200 are SM 10.0, B300 SM 10.3:
    vLLM's is_device_capability_family(100)), 'sm12x' for the RTX ones (workstation,
    consumer or SoC), None for any other card. The one place the two are told apart."""
    if acc.vendor != "nvidia" or acc.family != "blackwell":
        return None
    return "sm12x" if "RTX" in acc.name or acc.form in SM12X_FORMS else "sm100"


def compute_dtype_fix(acc: Accelerator, offered: Sequence[str]) -> str:
    """The --compute-dtype values a command offers (``offered``, in its order) that ``acc``
    has a peak for, as the clause its refusal of a missing rate ends with; "" where it has
    none of them. roofline's and utilization's refusals share it: an A100 asked for fp8
    under roofline: '--compute-dtype fp32 or tf32 or bf16 or fp16 or int8'; under
    utilization (bf16, fp16, fp8, int8, fp4): '--compute-dtype bf16 or fp16 or int8'."""
    rates = [d for d in offered if d in acc.peak_flops]
    return f"--compute-dtype {' or '.join(rates)}" if rates else ""


def resolve_accelerator(name: str) -> Accelerator:
    """A card by its catalog id, alias or marketing name ('H100', 'NVIDIA H100 80GB HBM3'
    -> h100-sxm: 989.4 TFLOP/s bf16 over 3.35 TB/s, 80 GiB) or a user record's id
    (register); unknown or ambiguous names raise InputError with the closest ids. The record
    is shared by every lookup, so its mappings are read-only (ReadOnlyDict)."""
    if not isinstance(name, str):
        raise wrong_kind(name, "accelerator", "a name such as 'h100'")
    if not name or not name.strip():
        raise InputError("accelerator name is empty")
    if normalise(name) in _USER:
        return _USER[normalise(name)]
    return catalog()[_catalog_id(name)]


# A name ending in a memory size, G for GB as cloud SKUs and shorthand write it ('A100-80G',
# 'L40S 48GB', 'rtx4090-24g'): the name before it, and the size.
_SIZED_NAME = re.compile(r"(?P<card>.*?\S)[\s_/-]*(?P<size>\d+(?:\.\d+)?)\s*g(?:i?b)?", re.I)
# A memory size written between the card and its form ('A100-80GB-PCIe', 'h100 80gb sxm'),
# where the catalog's ids and aliases write it last ('a100-pcie-80gb'): the card, the size
# and the rest.
_SIZE_FIRST_NAME = re.compile(
    r"(?P<card>.*?\S)[\s_/-]+(?P<size>\d+(?:\.\d+)?\s*g(?:i?b)?)[\s_/-]+(?P<rest>\S.*)", re.I)


def _catalog_id(name: str) -> str:
    """The catalog id ``name`` names (resolve_name), or, where it names none and ends in a
    memory size, the card before the size that carries it ('A100-80G' -> a100-sxm-80gb,
    'L40S-48G' -> l40s). A size written before the form is read where the catalog writes
    it, last ('A100-80GB-PCIe' as a100-pcie-80gb, 'h100-80gb-sxm' as h100-sxm-80gb); a name
    that already resolves is never rewritten, so 'a100-80gb' stays a100-sxm-80gb. A size the
    card does not come in is refused with the flag that takes a smaller configuration; any
    other name raises resolve_name's own error."""
    try:
        return resolve_name(name, _names(), "accelerator", "ridgeline hardware")
    except InputError as unknown:
        written = name.strip()
        size_first = _SIZE_FIRST_NAME.fullmatch(written)
        if size_first is not None:  # one rewrite, so 'x-80gb-40gb' cannot swap back and forth
            written = f"{size_first['card']}-{size_first['rest']}-{size_first['size']}"
            try:
                return resolve_name(written, _names(), "accelerator")
            except InputError:
                pass
        sized = _SIZED_NAME.fullmatch(written)
        if sized is None:
            raise
        size = float(sized["size"])
        # the size spelled as the catalog's aliases spell it ('a100-80gb', 'h100 80gb')
        try:
            return resolve_name(f"{sized['card']}-{sized['size']}gb", _names(), "accelerator")
        except InputError:
            pass
        try:
            card = catalog()[resolve_name(sized["card"], _names(), "accelerator")]
        except InputError:
            raise unknown from None
        if math.isclose(card.memory_size, size):
            return card.id
        if size < card.memory_size:
            raise InputError(f"{unknown}; {card.id} comes with {card.memory_size:g} "
                             f"{card.memory_unit}: `--gpu {card.id} --gpu-memory-gib "
                             f"{size:g}` counts it with {size:g}") from None
        raise


def load_accelerator_file(path: str) -> Accelerator:
    """A user's accelerator (``--gpu-file``): one record (or a one-record list) in the
    catalog's format, its id one a user's record may take (check_record_id), in every command
    that reads one: a copy of the catalog's h100-sxm with other figures would print as it."""
    file = Path(path).expanduser()
    try:
        text = read_text(file, what="an accelerator JSON file")
        data = json_loads(text, shorten_path(path)) if text.strip() else None
    except FileNotFoundError:
        raise InputError(f"no such accelerator file: {path}") from None
    except InputError:  # a folder, or past the size bound: said whole
        raise
    except (OSError, ValueError) as exc:  # JSON, UTF-8 and over-long numbers
        raise InputError(f"{path} is not an accelerator JSON file ({shorten(str(exc))})"
                         ) from None
    if not text.strip():  # json's "Expecting value" would not say so
        raise InputError(f"{path} is empty: an accelerator file is one record in the "
                         "catalog's format (`ridgeline hardware h100 --json` is one)")
    if isinstance(data, list) and len(data) == 1:
        data = data[0]
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected one accelerator record (a JSON object)")
    acc = Accelerator.from_record(data, path)
    check_record_id(acc.id, f"--gpu-file {shorten_path(path)}: record id")
    from ridgeline.engine_platforms import family_problem  # its tables read the family

    problem = family_problem(acc)
    if problem:
        raise InputError(f"{path}: {problem}")
    return acc


def with_memory_gib(acc: Accelerator, memory_gib: float) -> tuple[Accelerator, str]:
    """``acc`` holding ``memory_gib`` GiB (``--gpu-memory-gib``), and a caution, or "".

    A record's memory is the most its part carries: a discrete card's one size, a SoC's
    largest configuration (the M1 Max record is the 64 GB machine; 32 GB ones exist), so
    more is refused. Less on a SoC is another configuration of the same chip, its GPU share
    (Strix Halo's 96 of 128 GiB) scaled with the RAM. Less on a discrete card keeps the whole
    card's FLOP/s and bandwidth, which a MIG slice would share out too: cautioned. The
    record's own size returns the record, its ECC and runtime figures kept."""
    require_positive(memory_gib, "--gpu-memory-gib")
    soc = acc.form == "soc"
    if memory_gib * GIB > acc.memory_bytes * (1 + 1e-9):
        carries = (f"comes with at most {acc.memory_gib:g} GiB, its largest configuration"
                   if soc else f"carries {acc.memory_gib:g} GiB, its only size")
        raise InputError(f"--gpu-memory-gib {memory_gib:g}: {acc.id} {carries}; give at most "
                         "that, or describe a larger part with --gpu-file")
    if memory_gib * GIB >= acc.memory_bytes * (1 - 1e-9):
        return acc, ""
    share = acc.runtime_total_bytes / acc.memory_bytes \
        if soc and acc.runtime_total_bytes else None
    sized = replace(acc, memory_bytes=memory_gib * GIB, memory_size=memory_gib,
                    memory_unit="GiB", ecc_visible_bytes=None, smi_total_bytes=None,
                    runtime_total_bytes=None if share is None else memory_gib * GIB * share)
    if soc:
        return sized, ""
    return sized, (f"{acc.id} counted with {memory_gib:g} of its {acc.memory_gib:g} GiB, its "
                   "FLOP/s and bandwidth still the whole card's (a MIG slice has a share of "
                   "those too: --gpu-file); an engine given part of the card is "
                   "--gpu-memory-utilization")


# The source a custom card's figures carry: the flags, not a spec sheet.
CUSTOM_SOURCE = "user flags"


def custom_accelerator(
    name: str, peak_tflops: float, bandwidth_gb_s: float, memory_gib: float,
    dtype: str = "bf16",
) -> Accelerator:
    """An accelerator from three spec-sheet figures given on the command line. The one peak
    is read as ``dtype``'s (bf16: the 16-bit matmul rate, fp16 running at it too); a matmul
    at another dtype (fp8) has no rate here and is refused rather than guessed."""
    require_positive(peak_tflops, "peak TFLOP/s")
    require_positive(bandwidth_gb_s, "bandwidth GB/s")
    require_positive(memory_gib, "memory GiB")
    # the record's own check, said in the units the flags take
    for flag, value, low, high, example in (
            ("--bandwidth-gbs", bandwidth_gb_s, BANDWIDTH_RANGE[0] / GB, BANDWIDTH_RANGE[1] / GB,
             "an H100 SXM: 3350"),
            ("--peak-tflops", peak_tflops, FLOPS_RANGE[0] / 1e12, FLOPS_RANGE[1] / 1e12,
             "an H100 SXM bf16: 989.4")):
        if not low <= value <= high:
            raise InputError(f"{flag} {value:g} is not a plausible figure ({example}; between "
                             f"{low:g} and {high:g})")
    return Accelerator(
        id=name, name=name, memory_bytes=memory_gib * GIB,
        memory_bandwidth_bytes_per_s=bandwidth_gb_s * GB,
        peak_flops={dtype: peak_tflops * 1e12}, memory_size=memory_gib, memory_unit="GiB",
        sources=(CUSTOM_SOURCE,),
    )


# What the driver keeps from the nominal capacity: torch reports 23.58 GiB total on a
# 24 GiB RTX 3090 (vLLM issue #10517 log) and 79.2 GiB on an 80 GiB H100.
VISIBLE_MEMORY_FRACTION = 0.985


def smi_total_bytes(acc: Accelerator) -> float | None:
    """The memory.total nvidia-smi shows, where the catalog pins it: the record's
    smi_total_bytes, else on a card whose ECC keeps part of the memory its ECC-visible
    figure, which is the one nvidia-smi shows (L40S: 46,068 MiB); None where not known.
    H100 80GB: 81,559 MiB, where the runtime reports 81,080."""
    return acc.smi_total_bytes or acc.ecc_visible_bytes


def device_memory_bytes(acc: Accelerator) -> float:
    """What an engine finds on the device: the runtime's total where the catalog records
    one from logs; else the driver's figure less what the runtime keeps on a discrete card
    (× 0.985); Metal's working set is already that figure."""
    if acc.runtime_total_bytes:
        return acc.runtime_total_bytes
    if acc.vendor == "apple":
        return acc.visible_memory_bytes
    return acc.visible_memory_bytes * VISIBLE_MEMORY_FRACTION


def device_memory_basis(acc: Accelerator) -> str:
    """Where device_memory_bytes came from, in a few words, so that a figure the catalog
    pins (H100: 79.18 GiB, "the runtime's total") is never worded as one it estimates (RTX
    4090: 24 GiB × 0.985, which kv had called "as the runtime reports it")."""
    if acc.runtime_total_bytes:
        return "the runtime's total"
    if acc.vendor == "apple":
        return "Metal's working set"
    return (f"{VISIBLE_MEMORY_FRACTION:.1%} of the memory the driver shows, no log pinning "
            "the runtime's total")


def runtime_device(acc: Accelerator) -> Accelerator:
    """One of the devices the runtime lists for ``acc``: ``acc`` itself, or for a part shown
    as several (``runtime_devices``) an equal share of its memory, bandwidth and peaks, as
    ROCm shows an MI250's 128 GiB, 3.28 TB/s board as two 64 GiB, 1.64 TB/s GPUs."""
    n = acc.runtime_devices
    if n == 1:
        return acc
    share = 1 / n
    return replace(
        acc, memory_bytes=acc.memory_bytes * share, memory_size=acc.memory_size * share,
        memory_bandwidth_bytes_per_s=acc.memory_bandwidth_bytes_per_s * share,
        peak_flops={dtype: flops * share for dtype, flops in acc.peak_flops.items()},
        ecc_visible_bytes=None if acc.ecc_visible_bytes is None else acc.ecc_visible_bytes * share,
        runtime_total_bytes=None if acc.runtime_total_bytes is None
        else acc.runtime_total_bytes * share,
        fp16_accumulate_flops=None if acc.fp16_accumulate_flops is None
        else acc.fp16_accumulate_flops * share,
        runtime_devices=1)


def dies_added(devices: int) -> str:
    """What a figure "per GPU" adds where the engine runs a card as several devices (vLLM on
    an MI250, two GCDs): ' (2 dies added)', the card's figure being its dies'; '' for one.
    A GPU is a card throughout, as --num-gpus counts it."""
    return "" if devices == 1 else f" ({devices} dies added)"


def engine_devices(engine: str, acc: Accelerator) -> int:
    """The devices ``engine`` runs each ``acc`` card as, each a tensor-parallel rank: vLLM
    those the runtime lists (an MI250's two GCDs, runtime_device;
    vllm_pool.vllm_deployment), the other engines the card; 1 for any other card."""
    return acc.runtime_devices if engine == "vllm" else 1
