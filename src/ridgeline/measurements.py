"""Reading measurement rows (the CSV format of validation/README.md), row by row.

A bad row gets a message naming its id and the problem; good rows are still read.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from ridgeline.engines import engine_id, llamacpp_build, names_plain_llamacpp
from ridgeline.errors import InputError, shorten
from ridgeline.offload import HostOffload
from ridgeline.units import MAX_BATCH
from ridgeline.userfiles import read_text, refuse_a_column_twice

COLUMNS = ("id", "model", "weights_dtype", "kv_dtype", "gpu", "num_gpus", "tp", "batch",
           "input_len", "output_len", "context_len", "metric", "value", "unit", "engine",
           "source", "notes")
UNITS = {
    "decode_tok_s_per_user": "tok/s", "prefill_tok_s": "tok/s",
    "output_throughput_tok_s": "tok/s", "output_throughput_tok_s_per_gpu": "tok/s/gpu",
    "ttft_ms": "ms", "kv_cache_tokens": "tokens", "kv_cache_gib": "GiB",
    "gpu_blocks": "blocks", "max_concurrency": "x",
}
KV_METRICS = ("kv_cache_tokens", "kv_cache_gib", "gpu_blocks", "max_concurrency")
# The largest figure a row may state: past these it is a typo or a unit slip, and a batch of a
# billion would have the cost model build a billion sequences before saying anything.
MAX_VALUE = 1e15
MIN_VALUE = 1e-9  # below it a figure is a unit slip, and its error's ratio overflows
MAX_TOKENS = 100_000_000  # input_len, output_len, context_len
MAX_GPUS = 100_000
_NUMBER = r"[0-9][0-9.]*(?:[eE][+-]?[0-9]+)?"  # '0.9.1' taken whole, to be refused
_MEMORY_UNIT = r"(?:GiB|GB|MiB|MB)\b"
MIB_PER_GIB = 1024


@lru_cache(maxsize=16384)
def _setting_in(notes: str, name: str) -> str | None:
    """Measurement.setting of notes ``notes``, remembered: a fit reads each row's settings
    again under every trial profile. Notes that lack a word of ``name`` are passed over
    before the search (validate's 866 rows ask some 9,000 names of notes ~600 characters
    long, most absent); where both are ASCII, IGNORECASE matches what lower() does."""
    if notes.isascii() and name.isascii():
        lowered = notes.lower()
        if not all(word in lowered for word in name.lower().split("_")):
            return None
    spelled = re.escape(name).replace("_", "[_ -]")
    match = re.search(rf"(?<![a-z0-9_]){spelled}['\"]?\s*[=:]?\s*"
                      rf"({_NUMBER}(?:\s*{_MEMORY_UNIT})?)", notes, re.IGNORECASE)
    return match.group(1) if match else None


@dataclass(frozen=True)
class Measurement:
    id: str
    model: str
    weights_dtype: str
    kv_dtype: str
    gpu: str
    num_gpus: int
    tp: int
    batch: int | None
    input_len: int | None
    output_len: int | None
    context_len: int | None
    metric: str
    value: float
    unit: str
    engine: str
    source: str
    notes: str

    def __hash__(self) -> int:
        """Remembered on the instance, as Deployment's: a fit looks each row up in the
        prediction's caches (predict.deployment_for and the rest) under every trial profile,
        and its fields never change. A copy sent to another process hashes afresh there."""
        remembered: int | None = self.__dict__.get("_hash")
        if remembered is None:
            remembered = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", remembered)
        return remembered

    def __getstate__(self) -> dict[str, object]:
        # without the remembered hash: string hashes differ from one process to another
        return {name: value for name, value in self.__dict__.items() if name != "_hash"}

    @property
    def source_key(self) -> str:
        return self.source.split()[0] if self.source else ""

    def setting(self, name: str) -> str | None:
        """A value from the notes' engine settings, e.g. setting('gpu_memory_utilization'),
        written as the notes have it: 'gpu_memory_utilization 0.7', the flag
        '--gpu-memory-utilization 0.7', or vLLM's log "{'gpu_memory_utilization': 0.7}"."""
        return _setting_in(self.notes, name)

    def setting_number(self, *names: str) -> float | None:
        """The first of ``names`` the notes give a number for ('max_num_seqs default' gives
        none); a figure with a unit is memory, in GiB (SGLang's logs print GiB as 'GB';
        nvidia-smi's MiB are converted)."""
        for name in names:
            text = self.setting(name)
            if text is None:
                continue
            unit = re.search(_MEMORY_UNIT, text)
            number = (text[:unit.start()] if unit else text).strip()
            number = number[:-1] if number.endswith(".") else number  # a sentence's end
            try:
                value = float(number)
            except ValueError:
                raise InputError(f"{name} in the notes is not a number: {text!r}") from None
            return value / MIB_PER_GIB if unit and unit.group(0).startswith("M") else value
        return None

    def setting_count(self, *names: str, minimum: int = 1) -> int | None:
        """setting_number for a count (tokens, sequences, a block's size): a whole number of
        at least ``minimum``, refused otherwise rather than truncated or passed over."""
        for name in names:
            value = self.setting_number(name)
            if value is None:
                continue
            if value != int(value) or value < minimum:
                raise InputError(f"{name} in the notes must be a whole number ≥ {minimum}, "
                                 f"got {value:g}")
            return int(value)
        return None

    def mamba_ssm_dtype(self) -> str | None:
        """The SSM-state dtype the notes say an SGLang run kept ('--mamba-ssm-dtype bfloat16',
        'mamba_ssm_dtype bfloat16', or the environment's 'SGLANG_MAMBA_SSM_DTYPE=bfloat16',
        which the flag sets: SGLang's environ.py reads it, default unset); None when they do
        not say."""
        match = re.search(r"(?<![a-z0-9])(?:sglang[_ ])?mamba[_ -]ssm[_ -]dtype['\"]?\s*[=:]?\s*"
                          r"['\"]?([a-z0-9]+)", self.notes, re.IGNORECASE)
        return match.group(1).lower() if match else None

    def serving_tpot(self) -> bool:
        """Whether the row is a serving benchmark's TPOT at a concurrency above one (its notes
        name the TPOT or the inter-token latency it was read from: 'TPOT', 'mean_tpot_ms',
        'ITL'): per request (latency − TTFT) ÷ (output − 1), so the steps in which the engine
        prefilled the other requests count in it, as they do in the gaps between tokens."""
        return self.metric == "decode_tok_s_per_user" and (self.batch or 1) > 1 \
            and (self.input_len or 0) > 0 and _notes_name_tpot(self.notes)

    def flash_attention(self) -> bool | None:
        """Whether the notes say the run used flash attention ('fa=1', 'flash_attn 1',
        'FA off', 'no-FA column'); None when they do not say."""
        if re.search(r"\bFA off\b|\bno-FA\b|\bfa\s*[=:]?\s*0\b|flash_attn\s*[=:]?\s*(?:0|off)\b",
                     self.notes, re.IGNORECASE):
            return False
        if re.search(r"\bFA on\b|\bfa\s*[=:]?\s*1\b|flash_attn\s*[=:]?\s*(?:1|on)\b",
                     self.notes, re.IGNORECASE):
            return True
        return None

    def prefix_caching(self) -> bool | None:
        """Whether the notes say the engine ran with prefix caching ('prefix caching on',
        "'enable_prefix_caching': True", 'prefix caching off (forced: …)'); None when they do
        not say."""
        if re.search(r"prefix caching off|enable_prefix_caching'?\s*[=:]?\s*False", self.notes,
                     re.IGNORECASE):
            return False
        if re.search(r"prefix caching on|enable_prefix_caching'?\s*[=:]?\s*True", self.notes,
                     re.IGNORECASE):
            return True
        return None

    def warm_compile_cache(self) -> bool:
        """Whether the notes say vLLM found torch.compile's cache from an earlier start
        ('compile cache hit', 'warm compile cache')."""
        return bool(re.search(r"compile cache hit|warm compile cache", self.notes, re.IGNORECASE))

    def trtllm_backend(self) -> str | None:
        """TensorRT-LLM's backend as the notes name it: 'tensorrt' for the prebuilt engine
        ('TRT (engine) backend', 'TensorRT engine backend'), 'pytorch' ('PyTorch backend');
        None when they do not say."""
        if re.search(r"TRT \(engine\) backend|TensorRT engine backend|backend\s*[=:]\s*tensorrt",
                     self.notes, re.IGNORECASE):
            return "tensorrt"
        if re.search(r"PyTorch backend|backend\s*[=:]\s*pytorch", self.notes, re.IGNORECASE):
            return "pytorch"
        return None

    def offload(self) -> HostOffload | None:
        """llama.cpp's partial offload where the notes state the host ('ngl=20;
        host_bandwidth_gbs=38.4; host_link_gbs=7.88; n_cpu_moe=0'; 'ngl_rule=before-18148'
        for builds that kept the output layer last); None for rows on the GPU alone."""
        host = self.setting_number("host_bandwidth_gbs")
        if host is None:
            return None
        ngl = re.search(r"\bngl\s*[=:]?\s*(\d+)", self.notes)
        if ngl is None:
            raise InputError("the notes give a host bandwidth but no ngl")
        link = self.setting_number("host_link_gbs")
        experts = self.setting_count("n_cpu_moe", minimum=0)
        return HostOffload(int(ngl.group(1)), int(experts or 0), host * 1e9,
                           link * 1e9 if link else None,
                           re.search(r"ngl_rule\s*=\s*before-18148", self.notes) is None)

    def engine_version(self) -> str | None:
        """The engine version the notes name after 'engine:' ('vLLM v0.10.2 (V1)' → '0.10.2'),
        with ' V0' when the row ran vLLM's V0 engine. The version is read within the sentence
        'engine:' opens ('engine: vLLM version not stated. value = 1000 / 10.03 ms' names none)."""
        match = re.search(r"engine:[^|;.]*?v?(\d+\.\d+(?:\.\d+)?)", self.notes)
        if not match:
            return None
        v0 = re.search(r"\bV0\b", self.notes) is not None
        return match.group(1) + (" V0" if v0 else "")


@dataclass(frozen=True)
class ReadResult:
    rows: tuple[Measurement, ...]
    errors: tuple[str, ...]  # "id: problem"


def performance_rows(rows: Iterable[Measurement]) -> list[Measurement]:
    """The rows that time an engine (throughput, latency), not those of its KV pool."""
    return [r for r in rows if r.metric not in KV_METRICS]


def _int(text: str, column: str, minimum: int, maximum: int) -> int | None:
    if text is None or text.strip() == "":
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{column} must be a whole number, got {text!r}") from None
    if value < minimum:
        raise ValueError(f"{column} must be ≥ {minimum}, got {value}")
    if value > maximum:
        raise ValueError(f"{column} must be ≤ {maximum:,}, got {value:,}")
    return value


def parse_row(raw: dict[str, str]) -> Measurement:
    """One CSV row; ValueError naming the column when it is not what it claims."""
    if not (raw.get("id") or "").strip():
        raise ValueError("id is empty: each row needs its own, to be named in the reports")
    metric = raw["metric"].strip()
    if metric not in UNITS:
        raise ValueError(f"unknown metric {metric!r}")
    unit = raw["unit"].strip()
    if unit != UNITS[metric]:
        raise ValueError(f"metric {metric} is measured in {UNITS[metric]}, not {unit!r}")
    try:
        value = float(raw["value"])
    except ValueError:
        raise ValueError(f"value must be a number, got {raw['value']!r}") from None
    if not MIN_VALUE <= value < MAX_VALUE:  # NaN fails too
        raise ValueError(f"value must be a positive number from {MIN_VALUE:g} to below "
                         f"{MAX_VALUE:g}, got {raw['value']!r}")
    tp_stated = _int(raw["tp"], "tp", 1, MAX_GPUS)
    num_gpus = _int(raw["num_gpus"], "num_gpus", 1, MAX_GPUS) or tp_stated or 1
    if tp_stated is None and num_gpus > 1:  # tensor parallel, or stages of a pipeline?
        raise ValueError(f"tp is empty but num_gpus is {num_gpus}: state the tensor-parallel "
                         "degree (num_gpus ÷ tp GPUs are pipeline stages, or llama.cpp's layer "
                         "split when tp is 1)")
    tp = tp_stated or 1
    if num_gpus % tp:
        raise ValueError(f"num_gpus {num_gpus} is not a multiple of tp {tp}")
    input_len = _int(raw["input_len"], "input_len", 0, MAX_TOKENS)
    output_len = _int(raw["output_len"], "output_len", 0, MAX_TOKENS)
    context_len = _int(raw["context_len"], "context_len", 0, MAX_TOKENS)
    # the sequence at the phase's end holds what it read and wrote (a TTFT row: the prompt)
    held = (input_len or 0) + (0 if metric == "ttft_ms" else output_len or 0)
    if metric not in KV_METRICS and context_len is not None and context_len < held:
        raise ValueError(f"context_len {context_len:,} is shorter than the {held:,} tokens "
                         "input_len + output_len put in the cache")
    batch = _int(raw["batch"], "batch", 1, MAX_BATCH)
    if metric == "ttft_ms" and (batch or 1) > 1:
        raise ValueError(f"ttft_ms is one prompt's prefill alone (batch 1), got batch {batch}: "
                         "a TTFT under load waits in the engine's queue (`ridgeline simulate` "
                         "prices that)")
    engine = raw["engine"].strip()
    try:  # 'llama.cpp' unqualified names its vendor's build, resolved when the row is predicted
        engine_id(llamacpp_build(engine, ""))
    except InputError as exc:
        raise ValueError(f"engine: {exc}") from None
    # one spelling per engine ('vLLM', 'TensorRT-LLM'), as every rule keyed on it reads it
    engine = engine.lower() if names_plain_llamacpp(engine) else engine_id(engine)
    return Measurement(
        id=raw["id"].strip(), model=raw["model"].strip(),
        weights_dtype=raw["weights_dtype"].strip().lower(),
        kv_dtype=raw["kv_dtype"].strip().lower(),
        gpu=raw["gpu"].strip(), num_gpus=num_gpus, tp=tp,
        batch=batch,
        input_len=input_len, output_len=output_len, context_len=context_len, metric=metric,
        value=value,
        unit=unit, engine=engine, source=raw.get("source", ""),
        notes=raw.get("notes", "") or "",
    )


def _rows(reader: csv.DictReader[str], path: str | Path) -> Iterator[dict[str, str]]:
    """A CSV's rows, a line the csv module cannot read (a field past 131,072 characters)
    refused naming it: the line after the last it read whole."""
    try:
        yield from reader
    except csv.Error as exc:
        raise InputError(f"{path}, line {reader.line_num + 1}: {exc}") from None


def _cells(raw: dict[Any, Any]) -> int:
    """A CSV line's cells as csv.DictReader hands them over: the extra ones listed under
    None, the missing ones given as None."""
    named = sum(1 for key, value in raw.items() if key is not None and value is not None)
    return named + len(raw.get(None) or ())


def _beside(row: Measurement, folder: Path) -> Measurement:
    """A row whose model is a relative path to a config.json next to the CSV, read from
    there (as the file was written), not from wherever the command runs."""
    named = Path(row.model)
    if named.is_absolute() or named.exists() or not (folder / named).exists():
        return row
    return replace(row, model=str(folder / named))


def _other_separator(header: Sequence[str]) -> str:
    """Why a header names no column, where it is one cell holding the columns split by another
    separator (a spreadsheet set to a comma decimal exports ';'), or ""."""
    if len(header) != 1:
        return ""
    for mark, name in ((";", "semicolons"), ("\t", "tabs"), ("|", "bars")):
        if header[0].count(mark) >= 2:
            return (f"its header is one column, {shorten(header[0], 40)!r}, the columns split "
                    f"by {name}: save it with commas")
    return ""


def _refuse_unclosed_quote(raw: dict[Any, Any], text: str, path: str | Path, start: int,
                           end: int) -> None:
    """Refuse a row whose quote is never closed: the csv module reads everything after it, to
    the file's end, as that one field, so the rows below would vanish unread. A row that
    spans lines and ends the file is read again strictly, which fails only there: a
    notes field opened with '"' on line 2 of 3 swallows line 3."""
    if end == start or end < text.count("\n") + (not text.endswith("\n")):
        return  # one line, or not the file's last row: its quotes closed
    try:
        for _ in csv.reader(io.StringIO(text, newline=""), strict=True):
            pass
    except csv.Error as exc:
        if "unexpected end of data" not in str(exc):
            return  # a stray quote elsewhere, which the lenient read takes as a character
        cell = next((k for k, v in raw.items() if isinstance(v, str) and "\n" in v), None)
        raise InputError(f"{path}, line {start}: a quote opened in "
                         f"{'its ' + repr(cell) + ' cell' if cell else 'this row'} is never "
                         f"closed, so lines {start}–{end} would read as one row (the rows under "
                         "it lost): close the quote, or drop it") from None


def read_measurements(path: str | Path) -> ReadResult:
    """All rows of a measurements CSV; a file that is not one, or that gives an id twice (which
    of the two is the measurement?), raises InputError."""
    file = Path(path).expanduser()
    try:
        text = read_text(file, what="a measurements CSV file")  # a BOM: a spreadsheet's export
    except FileNotFoundError:
        raise InputError(f"no such measurements file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path} is not a readable CSV file ({exc})") from None
    # the csv module splits lines itself: str.splitlines() would also break a row at a form
    # feed, U+2028 or NEL inside its notes
    if not text.strip():
        raise InputError(f"{path} is empty: a measurements CSV starts with its header "
                         f"({', '.join(COLUMNS[:3])}, …; validation/README.md)")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:  # the header is a line too: one field past the csv module's limit was an internal error
        header = reader.fieldnames
    except csv.Error as exc:
        raise InputError(f"{path}, line 1: {exc}") from None
    if header:  # ' Metric' or 'METRIC' is the column it names
        reader.fieldnames = [name.strip().lower() for name in header]
        refuse_a_column_twice(reader.fieldnames, path)
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or []) and c != "notes"]
    if missing:
        raise InputError(f"{path} is not a measurements CSV: " + (
            _other_separator(reader.fieldnames or [])
            or f"missing columns {', '.join(missing)}"))
    rows: list[Measurement] = []
    errors: list[str] = []
    seen: dict[str, int] = {}  # id: line
    start = 2  # the line the row being read starts on
    for raw in _rows(reader, path):
        number = reader.line_num
        _refuse_unclosed_quote(raw, text, path, start, number)
        start = number + 1
        row_id = (raw.get("id") or f"line {number}").strip()
        if row_id in seen:
            raise InputError(f"{path}: id {row_id!r} is on lines {seen[row_id]} and {number}; "
                             "ids must be unique")
        seen[row_id] = number
        try:
            if None in raw.values() or None in raw:
                raise ValueError(f"wrong number of columns: {_cells(raw)} where the header has "
                                 f"{len(reader.fieldnames or ())} (a comma in a field that is "
                                 "not quoted?)")
            rows.append(_beside(parse_row(raw), file.parent))
        except (ValueError, KeyError) as exc:
            errors.append(f"{row_id}: {exc}")
    return ReadResult(tuple(rows), tuple(errors))


def read_measurement_files(paths: Sequence[str | Path]) -> ReadResult:
    """The rows of several measurements CSVs together; an id in two of them raises InputError."""
    rows: list[Measurement] = []
    errors: list[str] = []
    where: dict[str, str] = {}
    try:
        named = [Path(p).expanduser().resolve() for p in paths]
    except (OSError, RuntimeError) as exc:  # a symlink loop, a name too long for a path
        raise InputError(f"cannot read the measurements: {shorten(str(exc))}") from None
    twice = next((p for i, p in enumerate(paths) if named[i] in named[:i]), None)
    if twice is not None:
        raise InputError(f"{twice} is named twice")
    for path in paths:
        result = read_measurements(path)
        errors += result.errors
        for row in result.rows:
            if row.id in where:
                raise InputError(f"id {row.id!r} is in both {where[row.id]} and {path}; ids "
                                 "must be unique across the files")
            where[row.id] = str(path)
            rows.append(row)
    return ReadResult(tuple(rows), tuple(errors))


@lru_cache(maxsize=4096)  # a fit asks it of each decode row under every trial profile
def _notes_name_tpot(notes: str) -> bool:
    """Whether a row's notes name a TPOT or an inter-token latency (Measurement.serving_tpot)."""
    return re.search(r"(?<![a-z])(?:tpot|itl)(?![a-z])", notes, re.I) is not None
