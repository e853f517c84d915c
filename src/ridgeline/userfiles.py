"""A user's files read with a bound: a file with no end (/dev/zero, a pipe left open) or one far
past anything ridgeline reads is refused before it fills the memory."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ridgeline.errors import InputError, shorten, shorten_path

MAX_USER_FILE_BYTES = 256 * 2**20  # past any config, trace, measurements CSV or saved scrape


def read_bounded(path: str | Path, limit_bytes: int = MAX_USER_FILE_BYTES,
                 what: str = "a file") -> bytes:
    """The file's bytes; OSError as open() raises it; larger than the limit, or a folder, an
    InputError (``what``: the file it should be, "a measurements CSV file" → "/tmp is a folder,
    not a measurements CSV file"). A named pipe no process writes to reads as empty rather
    than waiting for a writer (it is opened without blocking, then read blocking: a pipe with
    a writer, as <(command) gives, is read to its end)."""
    nonblocking = getattr(os, "O_NONBLOCK", 0)  # POSIX; Windows has no named pipes to wait on
    fd = os.open(Path(path).expanduser(), os.O_RDONLY | nonblocking)
    if stat.S_ISDIR(os.fstat(fd).st_mode):  # errno's "Is a directory" in brackets read as a fault
        os.close(fd)
        raise InputError(f"{shorten_path(path)} is a folder, not {what}")
    with os.fdopen(fd, "rb") as handle:
        if nonblocking:
            os.set_blocking(fd, True)
        data = handle.read(limit_bytes + 1)
    if len(data) > limit_bytes:
        raise InputError(f"{shorten_path(path)} is larger than {limit_bytes >> 20} MiB: not a "
                         "file ridgeline reads")
    return data


# A compressed file's first bytes (gzip RFC 1952, zip's local header, xz, zstd RFC 8878): read
# as text they fail on a byte the error names, not the compression
_COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"PK\x03\x04", "zip"), (b"\xfd7zXZ\x00", "xz"),
               (b"(\xb5/\xfd", "zstd"))


class CompressedFileError(UnicodeDecodeError):
    """A compressed file where text was expected: a UnicodeDecodeError (every reader of a
    user's text refuses one by name) whose message names the compression."""

    def __init__(self, data: bytes, kind: str) -> None:
        super().__init__("utf-8", data[:8], 0, 1, kind)
        self.kind = kind

    def __str__(self) -> str:
        return f"{self.kind}-compressed: decompress it first"


def compression_of(data: bytes) -> str | None:
    """'gzip', 'zip', 'xz' or 'zstd' where ``data`` starts as such a file does, else None."""
    return next((kind for magic, kind in _COMPRESSED if data.startswith(magic)), None)


def read_text(path: str | Path, limit_bytes: int = MAX_USER_FILE_BYTES,
              what: str = "a file") -> str:
    """read_bounded, as UTF-8 (a leading BOM dropped); UnicodeDecodeError as read_text raises,
    a CompressedFileError where the file is gzip, zip, xz or zstd."""
    data = read_bounded(path, limit_bytes, what)
    kind = compression_of(data)
    if kind is not None:
        raise CompressedFileError(data, kind)
    return data.decode("utf-8-sig")


def refuse_a_column_twice(names: Iterable[str], path: str | Path) -> None:
    """A CSV header that names a column twice (``names`` as the reader matches them): csv's
    DictReader keeps the last one's cells and drops the first's without a word, so the file's
    numbers would be read from a column picked by position. Unnamed columns are not names."""
    seen: set[str] = set()
    for name in names:
        if name and name in seen:
            raise InputError(f"{shorten_path(path)}: the header names the column "
                             f"{shorten(name)!r} twice; which of the two holds its values?")
        seen.add(name)


def json_loads(text: str, origin: str) -> Any:
    """json.loads, with a file nested past Python's stack (30,000 brackets deep) refused in one
    line naming ``origin`` (json sets no depth of its own; RecursionError would name no file);
    json's other errors raised as it raises them, for the caller's words."""
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError(f"{origin} is nested too deeply to be a file ridgeline reads") from None


def json_object(text: str, origin: str, what: str) -> dict[str, Any]:
    """``text`` read as one JSON object, or a one-line InputError naming ``origin``: empty
    (json's "Expecting value (line 1, column 1)" would not say so), not JSON, a number past
    Python's 4,300 digits, or not an object (``what``: the file it should be, 'a config.json')."""
    if not text.strip():
        raise InputError(f"{origin} is empty: {what} is one JSON object")
    try:
        value = json_loads(text, origin)  # takes the bare Infinity HF writes (Nemotron-H)
    except InputError:  # nested too deeply: said as it is
        raise
    except json.JSONDecodeError as exc:
        raise InputError(f"{origin} is not valid JSON: {exc.msg} (line {exc.lineno}, column "
                         f"{exc.colno})") from None
    except ValueError:  # an integer past Python's 4,300 digits
        raise InputError(f"{origin}: a number in it is more than 4,300 digits long") from None
    if not isinstance(value, dict):
        raise InputError(f"{origin} is not {what}: expected a JSON object")
    return value
