"""Observe a running engine: /metrics polled over a window, a saved scrape, a vLLM log, or a
benchmark result JSON — each read by its reader (observe_metrics, observe_log,
observe_bench) into one Observation.
Network reads are bounded in size and time; only this module and hub.py touch the network.
"""

from __future__ import annotations

import codecs
import re
import time
from collections.abc import Callable
from pathlib import Path

from ridgeline.errors import InputError, shorten
from ridgeline.observation import Observation
from ridgeline.observe_bench import from_bench
from ridgeline.observe_foreign import refuse_foreign
from ridgeline.observe_log import STATS_HINT, from_log
from ridgeline.observe_metrics import from_scrapes
from ridgeline.prometheus import MIN_SCRAPE_GAP_S, Scrape, parse_scrape, split_scrapes
from ridgeline.userfiles import compression_of, read_bounded

MAX_BYTES = 16 * 2**20
SOURCE_FILE = "a metrics scrape, server log or bench result file"  # what observe reads


def fetch(url: str, timeout_s: float = 5.0) -> str:
    """GET a URL with a bounded size and a deadline; clear errors for every way it fails."""
    import http.client
    import urllib.error
    import urllib.request

    if not is_url(url):
        raise InputError(f"{url} is not an http(s) URL")
    deadline = time.monotonic() + timeout_s
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            encoding = (response.headers.get("Content-Encoding") or "").strip().lower()
            chunks, size = [], 0
            while True:
                if time.monotonic() > deadline:
                    raise InputError(f"{url}: the response took longer than {timeout_s:g} s")
                # read1: what has come, not 64 KiB: read() waits for all of it, and a server
                # that trickles a byte a second would hold it for hours past the deadline
                chunk = response.read1(65536)
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_BYTES:
                    raise InputError(f"{url}: the response is larger than {MAX_BYTES >> 20} MiB")
                chunks.append(chunk)
    except InputError:  # a deadline or a size passed, named above: not wrapped as a bad URL
        raise
    except urllib.error.HTTPError as exc:
        raise InputError(f"{url} answered HTTP {exc.code}") from None
    except urllib.error.URLError as exc:
        raise InputError(f"cannot reach {url} ({exc.reason})") from None
    except TimeoutError:
        raise InputError(f"{url}: no answer within {timeout_s:g} s") from None
    except OSError as exc:
        raise InputError(f"cannot read {url} ({exc})") from None
    except (http.client.HTTPException, ValueError) as exc:  # a bad port, a broken IPv6 host
        raise InputError(f"{shorten(url)} is not a URL ridgeline can fetch ({exc})") from None
    body = b"".join(chunks)
    if encoding in ("gzip", "x-gzip") or compression_of(body) == "gzip":
        body = gunzipped(body, f"{url}: its gzip-encoded answer", f"{url}: the response")
    elif encoding not in ("", "identity"):
        raise InputError(f"{url} answered in Content-Encoding {shorten(encoding)}, which "
                         "ridgeline does not read (it asks for none): is a proxy between?")
    return body.decode("utf-8-sig", errors="replace")


def gunzipped(body: bytes, what: str, whole: str) -> bytes:
    """gzip bytes inflated to at most MAX_BYTES, every member of them (``gzip -c a b`` writes
    two): a proxy's gzip-encoded answer (prometheus_client's own /metrics compresses only
    where the request accepts gzip, and urllib asks for none), or a scrape saved as
    ``scrape.txt.gz`` (``curl -H 'Accept-Encoding: gzip'``, a log shipper's rotation). Read as
    text, their bytes held no sample and were refused as "not a metrics page". ``what`` names
    the gzip data in a refusal, ``whole`` what is past the cap: a 16 MiB answer inflates from
    a few hundred KiB, so the cap is on what it inflates to."""
    import zlib

    data, rest = b"", body
    while rest:
        inflater = zlib.decompressobj(wbits=31)  # the gzip wrapper, one member
        try:
            data += inflater.decompress(rest, MAX_BYTES + 1 - len(data))
        except zlib.error as exc:
            raise InputError(f"{what} does not inflate ({exc})") from None
        if len(data) > MAX_BYTES or inflater.unconsumed_tail:
            raise InputError(f"{whole} is larger than {MAX_BYTES >> 20} MiB once inflated")
        if not inflater.eof:
            raise InputError(f"{what} stops before the gzip stream ends (cut short: "
                             f"{len(body):,} bytes)")
        rest = inflater.unused_data
        if rest.strip(b"\0"):  # another member, or bytes after the stream that are none
            if compression_of(rest) != "gzip":
                raise InputError(f"{what} has {len(rest):,} bytes after its gzip stream that "
                                 "are not gzip: not one gzip file")
        else:
            rest = b""
    return data


def poll(url: str, duration_s: float, interval_s: float,
         clock: Callable[[], float] = time.monotonic,
         sleep: Callable[[float], None] = time.sleep,
         wall: Callable[[], float] = time.time) -> Observation:
    """Scrape ``url`` every ``interval_s`` for ``duration_s`` seconds. Each scrape is timed
    when its response is in (the first fetch also pays for loading the HTTP client), and
    scrapes are at least a second apart, as saved ones must be (prometheus.MIN_SCRAPE_GAP_S).
    Its times are unix seconds (``wall`` at the first response, then ``clock``'s steps), as a
    saved scrape's are, to set against the server's process start."""
    if interval_s <= 0 or duration_s < 0:
        raise InputError("interval must be positive and duration not negative")
    if interval_s < MIN_SCRAPE_GAP_S:
        raise InputError(f"--interval {interval_s:g} s: scrapes must be at least "
                         f"{MIN_SCRAPE_GAP_S:g} s apart for a rate, as saved ones must be "
                         "(under a second, a counter's step is noise)")
    if 0 < duration_s < interval_s:  # its second scrape would end the window past the one asked
        raise InputError(f"--interval {interval_s:g} s is longer than --duration "
                         f"{duration_s:g} s: the window would be one interval, "
                         f"{interval_s:g} s (give --duration {interval_s:g}s or more, or 0 for "
                         "one scrape)")
    scrapes: list[Scrape] = []
    taken_s: list[float] = []  # the clock as each response came in
    start_unix_s = 0.0
    stopped = ""
    while True:
        try:
            text = fetch(url, timeout_s=max(1.0, interval_s * 5))
            taken_s.append(clock())
            if len(taken_s) == 1:
                start_unix_s = wall()
            try:
                scrapes.append(parse_scrape(text, start_unix_s + taken_s[-1] - taken_s[0]))
            except InputError as exc:
                raise InputError(f"{url}: {exc}") from None
        except (InputError, KeyboardInterrupt) as exc:
            if len(scrapes) < 2:  # nothing to make a window of
                raise
            after = clock() - taken_s[0]
            stopped = (f"interrupted after {after:,.0f} s" if isinstance(
                exc, KeyboardInterrupt) else f"stopped after {after:,.0f} s: {exc}")
            break
        if taken_s[-1] - taken_s[0] >= duration_s:
            break
        try:
            sleep(interval_s)
        except KeyboardInterrupt:
            if len(scrapes) < 2:
                raise
            stopped = f"interrupted after {clock() - taken_s[0]:,.0f} s"
            break
    obs = from_scrapes(scrapes, url)
    if stopped:
        obs.notes.append(f"polling {stopped}; the window is the {len(scrapes)} scrapes taken "
                         "before")
    return obs


# a URL's scheme (RFC 3986: a letter, then letters, digits, '+', '-', '.'), before "://"
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def is_url(source: str) -> bool:
    """A source observe polls over HTTP, rather than a saved file it reads (the scheme in
    any case, as urllib reads it: 'HTTP://host/metrics')."""
    return source[:8].lower().startswith(("http://", "https://"))


def refuse_other_scheme(source: str) -> None:
    """Refuse a URL of a scheme observe does not poll ('ftp://host/metrics'), which would
    otherwise be looked for as a file and reported missing; a file of that name that exists
    is read as one."""
    scheme = _SCHEME.match(source)
    if scheme is not None and not is_url(source) and not Path(source).expanduser().exists():
        raise InputError(f"{shorten(source)} is not an http(s) URL ({scheme[1]}://): observe "
                         "polls an engine's /metrics over http:// or https://, or reads a saved "
                         "file")


def decoded(data: bytes) -> str:
    """A saved file's text: UTF-16 where it starts with UTF-16's byte-order mark (Windows
    PowerShell 5.1's ``>`` and Out-File write UTF-16LE with one: `curl.exe …/metrics >
    scrape.txt`, PowerShell's about_Redirection), else UTF-8, its BOM dropped. Read as UTF-8,
    such a scrape's every other byte is 0, and no line of it a sample."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8-sig", errors="replace")


def read_source(source: str, duration_s: float = 60.0, interval_s: float = 1.0) -> Observation:
    refuse_other_scheme(source)
    if is_url(source):
        return poll(source, duration_s, interval_s)
    path = Path(source).expanduser()
    try:
        data = read_bounded(path, 64 * MAX_BYTES, SOURCE_FILE)
    except FileNotFoundError:
        raise InputError(f"no such file: {source}") from None
    except OSError as exc:
        raise InputError(f"cannot read {source} ({exc})") from None
    compressed = compression_of(data)  # by its first bytes, whatever the file is named
    if compressed == "gzip":
        data = gunzipped(data, f"{source} (gzip)", source)
        compressed = compression_of(data)
    if compressed is not None:
        raise InputError(f"{source} is {compressed}-compressed: decompress it first")
    text = decoded(data)
    if not STATS_HINT.search(text) or text.lstrip()[:1] == "{":
        refuse_foreign(text, source)  # a JSON-wrapped log, an error body, another engine's log
    head = text.lstrip()[:1]
    if head in ("{", "[") and not (head == "[" and STATS_HINT.search(text)):
        return from_bench(text, source)  # a log may start "[Gloo] Rank 0 is connected…"
    if STATS_HINT.search(text):
        return from_log(text, source)
    try:
        scrapes = split_scrapes(text)
    except InputError as exc:
        raise InputError(f"{source}: {exc}") from None
    return from_scrapes(scrapes, source)
