"""The YAML the serving engines' config files are written in, read without a YAML library:
block mappings nested by indentation, block lists (``- item``) of scalars, flow mappings and
lists (``{dtype: fp8, free_gpu_memory_fraction: 0.9}``, ``[1, 2]``), comments, and scalars:
int, float, true/false, null (``~`` or nothing), plain, single- and double-quoted strings.

Anything past that subset (anchors, aliases, tags, multi-line strings, tabs in the
indentation, lists of mappings, several documents) is refused with the line it is on, as
are the plain words YAML 1.1 reads as booleans (yes, no, on, off), which PyYAML, the
engines' reader, would turn into true or false where a reader of YAML 1.2 keeps the word.
``cfg.yaml:3: ...`` names the file and line. A file that is one JSON object, over one line
or many, is the mapping it writes (YAML's flow style; ``_json_mapping``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ridgeline.errors import InputError, shorten, shorten_path
from ridgeline.userfiles import CompressedFileError, read_text

_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)")
# PyYAML's (YAML 1.1) float: a dot, and a signed exponent; 1e9 and 1.0e9 stay strings there
_FLOAT = re.compile(r"[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+][0-9]+)?")
_NULLS = ("null", "Null", "NULL", "~", "")
_TRUE, _FALSE = ("true", "True", "TRUE"), ("false", "False", "FALSE")
_YAML11_BOOLS = {"yes", "no", "on", "off"}  # PyYAML reads these (any case) as booleans
_REFUSED_STARTS = {"&": "an anchor", "*": "an alias", "!": "a tag", "|": "a multi-line string",
                   ">": "a multi-line string", "%": "a directive", "@": "a reserved character",
                   "`": "a reserved character", "?": "a complex key"}


@dataclass(frozen=True)
class _Line:
    number: int  # 1-based, as an editor shows it
    indent: int
    text: str  # without the indentation and any trailing comment


class _Reader:
    def __init__(self, name: str, lines: list[_Line]) -> None:
        self.name, self.lines, self.at = name, lines, 0

    def fail(self, number: int, what: str) -> InputError:
        return InputError(f"{self.name}:{number}: {what} (ridgeline reads a subset of YAML: "
                          "mappings, lists of plain values, comments)")

    def block(self, indent: int) -> Any:
        """The mapping or list whose lines start at ``indent``, from the current line."""
        line = self.lines[self.at]
        return self.sequence(indent) if _is_item(line.text) else self.mapping(indent)

    def mapping(self, indent: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        while self.at < len(self.lines):
            line = self.lines[self.at]
            if line.indent < indent:
                break
            if line.indent > indent:
                raise self.fail(line.number, "unexpected indentation")
            if _is_item(line.text):
                raise self.fail(line.number, "a list item where a key was expected")
            key, rest = self.split_key(line)
            if key in out:
                raise self.fail(line.number, f"key {shorten(key)!r} given twice")
            self.at += 1
            if rest:
                out[key] = self.inline(rest, line.number)
                continue
            following = self.lines[self.at] if self.at < len(self.lines) else None
            if following is not None and (following.indent > indent or (
                    following.indent == indent and _is_item(following.text))):
                out[key] = self.block(following.indent)
            else:
                out[key] = None  # 'key:' alone is null, as 'cuda_graph_config:' reads
        return out

    def sequence(self, indent: int) -> list[Any]:
        out: list[Any] = []
        while self.at < len(self.lines):
            line = self.lines[self.at]
            if line.indent < indent or (line.indent == indent and not _is_item(line.text)):
                break
            if line.indent > indent:
                raise self.fail(line.number, "unexpected indentation")
            item = line.text[1:].strip()
            if not item or (_key_colon(item) is not None and item[0] not in "{['\""):
                raise self.fail(line.number, "a list item that is a mapping or a block")
            out.append(self.inline(item, line.number))
            self.at += 1
        return out

    def split_key(self, line: _Line) -> tuple[str, str]:
        colon = _key_colon(line.text)
        if colon is None:
            raise self.fail(line.number, f"no 'key: value' in {shorten(line.text)!r}")
        raw, rest = line.text[:colon].strip(), line.text[colon + 1:].strip()
        key = self.scalar(raw, line.number) if raw[:1] in ("'", '"') else raw
        if not isinstance(key, str) or not key or key[0] in _REFUSED_STARTS:
            raise self.fail(line.number, f"key {shorten(raw)!r} is not a plain name")
        return key, rest

    def inline(self, text: str, number: int) -> Any:
        """A value on one line: a flow mapping or list, or a scalar."""
        if text[0] in "{[":
            value, end = _Flow(self, text, number).value(0)
            if text[end:].strip():
                raise self.fail(number, f"text after the closing bracket: "
                                 f"{shorten(text[end:].strip())!r}")
            return value
        return self.scalar(text, number)

    def scalar(self, text: str, number: int) -> Any:
        text = text.strip()
        if text[:1] in _REFUSED_STARTS:
            raise self.fail(number, f"{_REFUSED_STARTS[text[0]]} ({text[0]})")
        if text[:1] in ("'", '"'):
            value, end = _quoted(text, 0)
            if value is None:
                raise self.fail(number, f"a quoted string that does not close: {shorten(text)}")
            if text[end:].strip():
                raise self.fail(number, f"text after a quoted string: "
                                 f"{shorten(text[end:].strip())!r}")
            return value
        if text in _NULLS:
            return None
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        if text.lower() in _YAML11_BOOLS:
            raise self.fail(number, f"{shorten(text)!r} is a boolean to YAML 1.1 and a word to "
                            "YAML 1.2: write true or false, or quote it")
        if _INT.fullmatch(text):
            return int(text)
        if re.fullmatch(r"[-+]?(0[0-9xXoObB][0-9a-fA-F_]*|[0-9][0-9_]*_[0-9_.]*)", text):
            raise self.fail(number, f"{shorten(text)!r}: write the number in decimal, without a "
                            "leading zero or underscores")
        if _FLOAT.fullmatch(text):
            return float(text)
        if text[:1] in "{[]},":
            raise self.fail(number, f"{shorten(text)!r} starts with a YAML bracket: quote it")
        return text


class _Flow:
    """A flow collection on one line: ``{a: 1, b: [x, y]}``."""

    def __init__(self, reader: _Reader, text: str, number: int) -> None:
        self.reader, self.text, self.number = reader, text, number

    def skip(self, at: int) -> int:
        while at < len(self.text) and self.text[at] == " ":
            at += 1
        return at

    def value(self, at: int) -> tuple[Any, int]:
        at = self.skip(at)
        if at >= len(self.text):
            raise self.reader.fail(self.number, "a flow collection must close on its line")
        opener = self.text[at]
        if opener == "{":
            return self.items(at + 1, "}", mapping=True)
        if opener == "[":
            return self.items(at + 1, "]", mapping=False)
        if opener in ("'", '"'):
            value, end = _quoted(self.text, at)
            if value is None:
                raise self.reader.fail(self.number, "a quoted string that does not close")
            return value, end
        end = at
        while end < len(self.text) and self.text[end] not in ",]}" and not (
                self.text[end] == ":" and self.text[end + 1:end + 2] in (" ", ",", "}", "")):
            end += 1
        return self.reader.scalar(self.text[at:end], self.number), end

    def items(self, at: int, closer: str, mapping: bool) -> tuple[Any, int]:
        pairs: dict[str, Any] = {}
        values: list[Any] = []
        at = self.skip(at)
        if at < len(self.text) and self.text[at] == closer:
            return (pairs if mapping else values), at + 1
        while True:
            at = self.skip(at)
            if at < len(self.text) and self.text[at] == ",":
                raise self.reader.fail(self.number, "an empty entry in a flow collection")
            item, at = self.value(at)
            at = self.skip(at)
            if mapping:
                if at >= len(self.text) or self.text[at] != ":":
                    raise self.reader.fail(self.number, "a flow mapping entry without 'key: "
                                           "value'")
                if not isinstance(item, str) or item in pairs:
                    raise self.reader.fail(self.number, f"flow mapping key "
                                           f"{shorten(repr(item))} is not a name, or is "
                                           "given twice")
                value, at = self.value(at + 1)
                pairs[item] = value
                at = self.skip(at)
            else:
                values.append(item)
            if at >= len(self.text):
                raise self.reader.fail(self.number, "a flow collection must close on its line")
            if self.text[at] == closer:
                return (pairs if mapping else values), at + 1
            if self.text[at] != ",":
                raise self.reader.fail(self.number, f"expected ',' or '{closer}' at "
                                       f"{self.text[at:at + 10]!r}")
            at = self.skip(at + 1)
            if at < len(self.text) and self.text[at] == closer:  # a trailing comma, as PyYAML
                return (pairs if mapping else values), at + 1


def _quoted(text: str, at: int) -> tuple[str | None, int]:
    """The quoted string starting at ``at`` and the index past it; (None, …) if it does not
    close. Single quotes escape only themselves ('it''s'); double quotes take backslash
    escapes for quote, backslash, n and t."""
    quote, out, i = text[at], [], at + 1
    escapes = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "/": "/"}
    while i < len(text):
        c = text[i]
        if c == quote:
            if quote == "'" and text[i + 1:i + 2] == "'":
                out.append("'")
                i += 2
                continue
            return "".join(out), i + 1
        if quote == '"' and c == "\\":
            if text[i + 1:i + 2] not in escapes:
                return None, i
            out.append(escapes[text[i + 1]])
            i += 2
            continue
        out.append(c)
        i += 1
    return None, i


def _is_item(text: str) -> bool:
    return text == "-" or text.startswith("- ")


def _outside_quotes(text: str) -> Iterator[tuple[int, str]]:
    """Each character of ``text`` outside a quoted scalar, with its index: a quote opens at the
    start or after a space or one of '{[,:-', and closes at its own kind."""
    quote = None
    for i, c in enumerate(text):
        if quote:
            if c == quote:
                quote = None
        elif c in ("'", '"') and (i == 0 or text[i - 1] in " {[,:-"):
            quote = c
        else:
            yield i, c


def _key_colon(text: str) -> int | None:
    """Where the colon that ends a block mapping's key is (one followed by a space or the
    end of the line, outside quotes), or None."""
    return next((i for i, c in _outside_quotes(text)
                 if c == ":" and text[i + 1:i + 2] in (" ", "")), None)


def _strip_comment(text: str) -> str:
    """``text`` without a comment: '#' at the start or after a space, outside quotes."""
    cut = next((i for i, c in _outside_quotes(text)
                if c == "#" and (i == 0 or text[i - 1] == " ")), None)
    return (text if cut is None else text[:cut]).rstrip()


def parse_yaml(text: str, name: str = "<yaml>") -> dict[str, Any]:
    """The mapping a config file's ``text`` holds (``name`` in errors): ``kv_cache_config:``
    over an indented ``dtype: fp8`` reads as {"kv_cache_config": {"dtype": "fp8"}}."""
    if text.lstrip().startswith("{"):  # one JSON object, which YAML reads as the mapping it
        return _json_mapping(text, name)  # is: its first key had been read as '{"max-model-len"'
    lines: list[_Line] = []
    for number, raw in enumerate(text.splitlines(), 1):
        body = raw.lstrip(" ")
        if body.startswith("\t"):
            raise InputError(f"{name}:{number}: a tab in the indentation (YAML indents with "
                             "spaces)")
        content = _strip_comment(body)
        if not content.strip():
            continue
        if content.strip() in ("---", "...") and raw.startswith(("---", "...")):
            if lines or content.strip() == "...":
                raise InputError(f"{name}:{number}: a second YAML document (ridgeline reads "
                                 "one)")
            continue
        lines.append(_Line(number, len(raw) - len(body), content))
    if not lines:
        raise InputError(f"{name}: holds no settings (an empty YAML file)")
    reader = _Reader(name, lines)
    if _is_item(lines[0].text) or _key_colon(lines[0].text) is None:
        raise reader.fail(lines[0].number, "the file must be a mapping of 'key: value' lines")
    try:
        out = reader.mapping(lines[0].indent)
    except RecursionError:  # mappings or brackets nested past Python's stack: no config's
        raise InputError(f"{name}: nested too deeply to be a config file") from None
    if reader.at < len(lines):  # a line indented less than the first
        raise reader.fail(lines[reader.at].number, "unexpected indentation")
    return out


def _json_mapping(text: str, name: str) -> dict[str, Any]:
    """A config file written as one JSON object, over one line or many ({"max-model-len":
    8192}), as the engines' YAML reader takes it (JSON is YAML's flow style); a file that
    opens a brace and is no JSON object is refused, naming where it stops reading."""
    import json

    def no_constant(word: str) -> Any:
        raise InputError(f"{name}: {word} is not a value a setting takes")

    try:
        value = json.loads(text, parse_constant=no_constant)
    except InputError:
        raise
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}:{exc.lineno}: opens with '{{' but is not a JSON object "
                         f"({exc.msg}): write one, or 'key: value' lines") from None
    except RecursionError:
        raise InputError(f"{name}: nested too deeply to be a config file") from None
    if not isinstance(value, dict):  # '{' opens an object, or fails above
        raise InputError(f"{name}: the file must be a mapping of settings")
    return value


def read_yaml(path: str | Path) -> dict[str, Any]:
    """``parse_yaml`` of the file at ``path``, read with the user-file bound; a file that is
    not UTF-8 text is refused by name."""
    try:
        text = read_text(path, what="a YAML file")
    except CompressedFileError as exc:
        raise InputError(f"{shorten_path(path)} is {exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{shorten_path(path)}: not UTF-8 text (byte {exc.start}), so no "
                         "YAML file") from None
    return parse_yaml(text, shorten_path(path))
