"""A GGUF file's header read without its tensor data: the metadata key/values and the tensor
infos, in pure Python.

The layout is ggml's docs/gguf.md (github.com/ggml-org/ggml): the magic bytes "GGUF", a
uint32 version, uint64 tensor_count and metadata_kv_count, then each key (a uint64-length
string), its uint32 value type and value, then each tensor's name, uint32 n_dimensions,
uint64 dims, uint32 ggml_type and uint64 offset, all little-endian. Version 2 and 3 share
this layout; version 1 counted in uint32 and is refused. An array past ``KEEP_ARRAY_ITEMS``
(tokenizer.ggml.tokens: 128,256 strings for Llama 3) is stepped over and kept as its length
only. Counts past the limits below are refused before anything is allocated for them.

The tensor data follows the header from the next multiple of general.alignment (32 where
unset): gguf_init_from_file seeks to GGML_PAD(tell, alignment) before it, where the file has
tensors, and refuses an alignment that is no power of 2 (ggml/src/gguf.cpp). Each tensor's
offset counts from there.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ridgeline.errors import InputError, shorten, shorten_path

MAGIC = b"GGUF"
VERSIONS = (2, 3)
# Far above any real file (DeepSeek-V3's GGUF: 1,025 tensors, ~50 keys); past them the
# header is corrupt, and reading on would allocate for nothing.
MAX_TENSORS = 1_000_000
MAX_KEYS = 100_000
MAX_STRING_BYTES = 64 * 2**20  # a chat template is kilobytes
MAX_ARRAY_ITEMS = 2**32
MAX_DIMS = 8  # ggml's GGML_MAX_DIMS is 4
KEEP_ARRAY_ITEMS = 4096  # longer arrays are skipped, their length kept
MAX_NESTING = 8  # arrays of arrays (the spec allows them; no converter writes one)
DEFAULT_ALIGNMENT = 32  # ggml's GGUF_DEFAULT_ALIGNMENT, where general.alignment is unset
# ggml/src/gguf.cpp reads the key as a uint32 (gguf_get_val_u32, which aborts on another type;
# later builds refuse the file first: "key 'general.alignment' must be of type u32")
ALIGNMENT_KEY = "general.alignment"
UINT32_TYPE = 4  # gguf_metadata_value_type UINT32 (docs/gguf.md)

# value type id -> struct format of its scalar (docs/gguf.md gguf_metadata_value_type)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


@dataclass(frozen=True)
class SkippedArray:
    """A metadata array too long to keep: its element type id and its length."""
    item_type: int
    length: int


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's entry: dims innermost first (ggml's ne[0] is a row's length)."""
    name: str
    dims: tuple[int, ...]
    ggml_type: int
    offset_bytes: int

    @property
    def num_elements(self) -> int:
        count = 1
        for d in self.dims:
            count *= d
        return count


@dataclass(frozen=True)
class GgufHeader:
    """One file's header. ``data_offset_bytes`` is where its tensor data starts (the header's
    end padded to the alignment) and ``file_bytes`` the file's size, so each tensor's data
    spans data_offset_bytes + offset_bytes onward and must end by file_bytes."""
    version: int
    metadata: dict[str, Any]
    tensors: tuple[TensorInfo, ...]
    data_offset_bytes: int = 0
    file_bytes: int = 0

    def array_length(self, key: str) -> int | None:
        """The length of a metadata array (kept or skipped); None where the key is no array."""
        value = self.metadata.get(key)
        if isinstance(value, SkippedArray):
            return value.length
        return len(value) if isinstance(value, tuple) else None


def read_gguf_header(path: Path) -> GgufHeader:
    """Read ``path``'s header; refuse a file that is not a GGUF of version 2 or 3, or is cut
    short, in one line."""
    try:
        with path.open("rb") as f:
            return _Reader(f, shorten_path(path)).header()
    except OSError as exc:
        raise InputError(f"cannot read {shorten_path(path)}: {exc.strerror or exc}") from None


class _Reader:
    def __init__(self, f: BinaryIO, origin: str) -> None:
        self.f = f
        self.origin = origin

    def header(self) -> GgufHeader:
        magic = self.f.read(4)
        if not magic:  # b'' would read as a start; an empty file is the likelier mistake
            raise InputError(f"{self.origin} is empty (0 bytes): not a GGUF file")
        if magic != MAGIC:
            raise InputError(f"{self.origin} is not a GGUF file: it starts with {magic[:4]!r}, "
                             "not b'GGUF'")
        version = self.scalar("<I")
        if version not in VERSIONS:
            if version == 1:
                why = "GGUF version 1 (2023's first files, with 32-bit counts) is not read"
            elif struct.unpack("<I", struct.pack(">I", version))[0] in VERSIONS:
                why = "a big-endian GGUF is not read"
            else:
                why = f"GGUF version {version} is not one ridgeline reads"
            raise InputError(f"{self.origin}: {why}; give a version 2 or 3 file "
                             "(llama.cpp's convert_hf_to_gguf.py writes 3)")
        tensor_count = self.count("tensor_count", MAX_TENSORS)
        key_count = self.count("metadata_kv_count", MAX_KEYS)
        metadata: dict[str, Any] = {}
        for _ in range(key_count):
            key = self.string()
            kind = self.scalar("<I")
            if key == ALIGNMENT_KEY and kind != UINT32_TYPE:
                raise InputError(f"{self.origin}: {ALIGNMENT_KEY} is of GGUF type {kind}, not "
                                 f"uint32 ({UINT32_TYPE}); llama.cpp refuses the file")
            metadata[key] = self.value(kind, key, 0)
        tensors = tuple(self.tensor() for _ in range(tensor_count))
        alignment = self.alignment(metadata)
        end = self.f.tell()
        if tensors:
            end += -end % alignment  # GGML_PAD(end, alignment)
        return GgufHeader(version, metadata, tensors, end, os.fstat(self.f.fileno()).st_size)

    def alignment(self, metadata: dict[str, Any]) -> int:
        value = metadata.get(ALIGNMENT_KEY, DEFAULT_ALIGNMENT)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0 \
                or value & (value - 1):
            raise InputError(f"{self.origin}: {ALIGNMENT_KEY} {value!r} is not a power of 2; "
                             "llama.cpp refuses the file")
        return value

    def read(self, size: int) -> bytes:
        data = self.f.read(size)
        if len(data) != size:
            raise InputError(f"{self.origin}: the GGUF header is cut short (truncated file)")
        return data

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def count(self, what: str, limit: int) -> int:
        value: int = self.scalar("<Q")
        if value > limit:
            raise InputError(f"{self.origin}: {what} {value:,} is past {limit:,}: the GGUF "
                             "header is corrupt")
        return value

    def string(self) -> str:
        size = self.count("a string's length", MAX_STRING_BYTES)
        return self.read(size).decode("utf-8", errors="replace")

    def value(self, kind: int, key: str, depth: int) -> Any:
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            if depth >= MAX_NESTING:
                raise InputError(f"{self.origin}: metadata {shorten(key)!r} nests arrays past "
                                 f"{MAX_NESTING} deep: the GGUF header is corrupt")
            item_type = self.scalar("<I")
            length = self.count(f"{key}'s length", MAX_ARRAY_ITEMS)
            if length > KEEP_ARRAY_ITEMS:
                self.skip(item_type, length, key, depth + 1)
                return SkippedArray(item_type, length)
            return tuple(self.value(item_type, key, depth + 1) for _ in range(length))
        raise InputError(f"{self.origin}: metadata {shorten(key)!r} has value type {kind}, "
                         "not one of GGUF's 0-12")

    def skip(self, item_type: int, length: int, key: str, depth: int) -> None:
        """Step over ``length`` items without keeping them (fixed-size items in one seek)."""
        if item_type in _SCALARS:
            size = length * struct.calcsize(_SCALARS[item_type])
            here = self.f.tell()
            end = self.f.seek(0, 2)
            if here + size > end:
                raise InputError(f"{self.origin}: the GGUF header is cut short (truncated file)")
            self.f.seek(here + size)
            return
        if item_type == STRING:  # each string's length, then a seek past its bytes, undecoded
            here = self.f.tell()
            end = self.f.seek(0, 2)
            self.f.seek(here)
            for _ in range(length):
                size = self.count("a string's length", MAX_STRING_BYTES)
                here = self.f.tell() + size
                if here > end:
                    raise InputError(f"{self.origin}: the GGUF header is cut short (truncated "
                                     "file)")
                self.f.seek(here)
            return
        for _ in range(length):  # nested arrays: each one's length, then past it
            self.value(item_type, key, depth)

    def tensor(self) -> TensorInfo:
        name = self.string()
        n_dims: int = self.scalar("<I")
        if n_dims > MAX_DIMS:
            raise InputError(f"{self.origin}: tensor {shorten(name)!r} has {n_dims:,} "
                             f"dimensions, past {MAX_DIMS}: the GGUF header is corrupt")
        dims = tuple(self.scalar("<Q") for _ in range(n_dims))
        return TensorInfo(name, dims, self.scalar("<I"), self.scalar("<Q"))
