"""A user's files read with a bound: a file with no end (/dev/zero, a pipe left open) or one far
past anything ridgeline reads is refused before it fills the memory."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from ridgeline.errors import InputError, shorten, shorten_path

MAX_USER_FILE_BYTES = 256 * 2**20  # past any config, trace, measurements CSV or saved scrape


def read_bounded(path: str | Path, limit_bytes: int = MAX_USER_FILE_BYTES) -> bytes:
    """The file's bytes; OSError as open() raises it; larger than the limit, an InputError.
    A named pipe no process writes to reads as empty rather than waiting for a writer (it is
    opened without blocking, then read blocking: a pipe with a writer, as <(command) gives,
    is read to its end)."""
    nonblocking = getattr(os, "O_NONBLOCK", 0)  # POSIX; Windows has no named pipes to wait on
    fd = os.open(Path(path).expanduser(), os.O_RDONLY | nonblocking)
    if stat.S_ISDIR(os.fstat(fd).st_mode):  # reading it would name the descriptor, not the path
        os.close(fd)
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    with os.fdopen(fd, "rb") as handle:
        if nonblocking:
            os.set_blocking(fd, True)
        data = handle.read(limit_bytes + 1)
    if len(data) > limit_bytes:
        raise InputError(f"{shorten_path(path)} is larger than {limit_bytes >> 20} MiB: not a "
                         "file ridgeline reads")
    return data


def read_text(path: str | Path, limit_bytes: int = MAX_USER_FILE_BYTES) -> str:
    """read_bounded, as UTF-8 (a leading BOM dropped); UnicodeDecodeError as read_text raises."""
    return read_bounded(path, limit_bytes).decode("utf-8-sig")


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
