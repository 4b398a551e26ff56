# -*- coding: utf-8 -*-
# Copyright (c) gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it): standard library only (a TOML reader, tomllib, tomli
# or toml, is used when the node has one), Python 3.8+.
"""Read TOML with whatever the managed node has, and write it without a library.

Reading: ``tomllib`` (Python 3.11+), else ``tomli`` (same API), else the older
``toml`` package.  Debian/Ubuntu ship them as ``python3-tomli`` and
``python3-toml``.

Writing: the standard library has no TOML writer, so ``dumps`` below covers
what containerd configs hold: nested tables, quoted keys such as
``"io.containerd.grpc.v1.cri"``, strings, booleans, integers, floats,
date-times, arrays (of scalars, of inline tables, of tables) and empty tables.
Its output is read back identically by every reader above.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import math
import re

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError

TOML_PACKAGES_HINT = (
    "Install a TOML reader for the node's Python: python3-tomli (Debian 12, Ubuntu 22.04+) "
    "or python3-toml (older releases), or use Python 3.11+ (tomllib)"
)


class TomlUnavailableError(FleetError):
    """No TOML reader can be imported on this Python."""


class TomlParseError(FleetError):
    """The text is not valid TOML.  ``line``/``column`` are 1-based or None."""

    def __init__(self, reason, line=None, column=None):
        self.reason = reason
        self.line = line
        self.column = column
        where = ""
        if line is not None:
            where = " at line %d" % line
            if column is not None:
                where += ", column %d" % column
        super(TomlParseError, self).__init__("invalid TOML%s: %s" % (where, reason))


_BACKEND = None


def _backend():
    """Return ``(name, module)`` of the first importable TOML reader."""
    global _BACKEND
    if _BACKEND is not None:
        return _BACKEND
    for name in ("tomllib", "tomli", "toml"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        _BACKEND = (name, module)
        return _BACKEND
    raise TomlUnavailableError("no TOML reader (tomllib, tomli or toml) can be imported. " + TOML_PACKAGES_HINT)


def backend_name():
    """Name of the reader in use: ``tomllib``, ``tomli`` or ``toml``."""
    return _backend()[0]


def reset_backend():
    """Forget the chosen reader (tests switch readers)."""
    global _BACKEND
    _BACKEND = None


_AT_LINE = re.compile(r"\(at line (\d+), column (\d+)\)")
_LINE_COL = re.compile(r"line (\d+) column (\d+)")


def loads(text):
    """Parse TOML text into plain dicts/lists; raise TomlParseError on bad input."""
    name, module = _backend()
    try:
        return _loads(name, module, text)
    except RecursionError:
        # Deeply nested arrays or inline tables exhaust the readers' recursion.
        raise TomlParseError("arrays or inline tables are nested too deeply to read")


def _loads(name, module, text):
    if name in ("tomllib", "tomli"):
        try:
            return module.loads(text)
        except module.TOMLDecodeError as exc:
            message = str(exc)
            line = getattr(exc, "lineno", None)
            column = getattr(exc, "colno", None)
            match = _AT_LINE.search(message)
            if match:
                line, column = int(match.group(1)), int(match.group(2))
                message = _AT_LINE.sub("", message).strip()
            if line is None:
                line, column = _end_position(text)
            raise TomlParseError(message, line, column)
    # The toml package (TOML 0.5): errors carry lineno/colno; values are plain types.
    try:
        return module.loads(text)
    except module.TomlDecodeError as exc:
        message = getattr(exc, "msg", str(exc))
        line = getattr(exc, "lineno", None)
        column = getattr(exc, "colno", None)
        if line is None:
            match = _LINE_COL.search(str(exc))
            if match:
                line, column = int(match.group(1)), int(match.group(2))
        raise TomlParseError(message, line, column)
    except (IndexError, ValueError, TypeError) as exc:
        # toml 0.10 raises bare errors on some malformed input.
        raise TomlParseError(str(exc) or exc.__class__.__name__)


def _end_position(text):
    lines = text.split("\n")
    return len(lines), len(lines[-1]) + 1


# ---------------------------------------------------------------- writer

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+\Z")  # \Z: "$" would accept a trailing newline
_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


class TomlWriteError(FleetError):
    """A value that TOML cannot represent (None, unknown types)."""


def quote_string(value):
    """A TOML basic string for ``value`` (escapes quotes, backslashes, controls)."""
    out = []
    for char in value:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append("\\u%04X" % ord(char))
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def format_key(key):
    """A bare key when possible, else a quoted one (``"io.containerd.grpc.v1.cri"``)."""
    if not isinstance(key, str):
        raise TomlWriteError("TOML keys must be strings, got %r" % (key,))
    if _BARE_KEY.match(key):
        return key
    return quote_string(key)


def format_key_path(path):
    return ".".join(format_key(part) for part in path)


def _format_float(value):
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = repr(value)
    if "e" in text or "E" in text:
        mantissa, exponent = text.lower().split("e")
        if "." not in mantissa:
            mantissa += ".0"
        return "%se%s" % (mantissa, exponent)
    if "." not in text:
        text += ".0"
    return text


def format_value(value):
    """Inline TOML for a scalar, an array or an inline table."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _format_float(value)
    if isinstance(value, str):
        return quote_string(value)
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(item) for item in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join("%s = %s" % (format_key(k), format_value(v)) for k, v in value.items()) + " }"
    if value is None:
        raise TomlWriteError("TOML has no null value")
    raise TomlWriteError("cannot write %s values as TOML" % type(value).__name__)


def _is_table_array(value):
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(isinstance(item, dict) for item in value)


def _write_table(lines, path, table, header, array_item=False):
    """Write one table: its plain keys under a header, then its sub-tables."""
    plain = []
    subtables = []
    for key, value in table.items():
        if isinstance(value, dict) and value:
            subtables.append((key, value))
        elif _is_table_array(value):
            subtables.append((key, value))
        else:
            plain.append((key, value))
    # A header is needed for keys, for empty tables and for array items;
    # a table holding only sub-tables is implied by their headers.
    if header and (plain or array_item or not subtables):
        if lines:
            lines.append("")
        lines.append(("[[%s]]" if array_item else "[%s]") % format_key_path(path))
    for key, value in plain:
        lines.append("%s = %s" % (format_key(key), format_value(value)))
    for key, value in subtables:
        sub_path = path + [key]
        if isinstance(value, dict):
            _write_table(lines, sub_path, value, header=True)
        else:
            for item in value:
                _write_table(lines, sub_path, item, header=True, array_item=True)


def dumps(data):
    """TOML text for a dict; ``loads(dumps(d)) == d`` for what containerd configs hold."""
    if not isinstance(data, dict):
        raise TomlWriteError("the TOML document must be a table (dict)")
    lines = []
    _write_table(lines, [], data, header=False)
    return "\n".join(lines) + "\n" if lines else ""


# ---------------------------------------------------------------- text scanner
#
# Text-preserving edits (add one ``imports`` entry, set one key) need to know
# where each statement of an already valid document starts and ends, without
# re-writing the rest of the file.  The scanner below is lenient: callers
# validate the text with ``loads`` first.


class Statement:
    """One top-level statement of a TOML document.

    kind: ``table`` (``[a.b]``), ``array_table`` (``[[a.b]]``) or ``keyval``.
    table: the key path of the table a keyval belongs to (tuple).
    key: the header's path (tables) or the key's dotted path (keyvals), tuple.
    start/end: offsets of the whole line(s), ``end`` past the newline.
    value_start/value_end: offsets of the value text (keyvals).
    elements: for array values, ``(start, end, trailing_comma_end)`` per item.
    """

    def __init__(self, kind, table, key, start, end, value_start=None, value_end=None, elements=None):
        self.kind = kind
        self.table = table
        self.key = key
        self.start = start
        self.end = end
        self.value_start = value_start
        self.value_end = value_end
        self.elements = elements

    def __repr__(self):  # pragma: no cover - debugging aid
        return "Statement(%s %r %r %d-%d)" % (self.kind, self.table, self.key, self.start, self.end)


class _Scanner:
    def __init__(self, text):
        self.text = text
        self.pos = 0
        self.n = len(text)

    def peek(self, count=1):
        return self.text[self.pos:self.pos + count]

    def skip_blanks(self):
        while self.pos < self.n and self.text[self.pos] in " \t":
            self.pos += 1

    def skip_comment(self):
        if self.peek() == "#":
            while self.pos < self.n and self.text[self.pos] != "\n":
                self.pos += 1

    def skip_blanks_newlines_comments(self):
        while self.pos < self.n:
            char = self.text[self.pos]
            if char in " \t\r\n":
                self.pos += 1
            elif char == "#":
                self.skip_comment()
            else:
                return

    def to_line_end(self):
        self.skip_blanks()
        self.skip_comment()
        while self.pos < self.n and self.text[self.pos] != "\n":
            self.pos += 1
        if self.pos < self.n:
            self.pos += 1

    def read_string(self):
        """Skip a string starting at pos; return its raw text."""
        start = self.pos
        text = self.text
        if text.startswith('"""', self.pos) or text.startswith("'''", self.pos):
            delim = text[self.pos:self.pos + 3]
            self.pos += 3
            while self.pos < self.n:
                if delim == '"""' and text[self.pos] == "\\":
                    self.pos += 2
                    continue
                if text.startswith(delim, self.pos):
                    self.pos += 3
                    # Up to two more quotes belong to the content.
                    extra = 0
                    while extra < 2 and self.pos < self.n and text[self.pos] == delim[0]:
                        self.pos += 1
                        extra += 1
                    return text[start:self.pos]
                self.pos += 1
            return text[start:self.pos]
        quote = text[self.pos]
        self.pos += 1
        while self.pos < self.n and text[self.pos] != quote and text[self.pos] != "\n":
            if quote == '"' and text[self.pos] == "\\":
                self.pos += 1
            self.pos += 1
        self.pos += 1
        return text[start:self.pos]

    def read_key(self):
        parts = []
        while self.pos < self.n:
            self.skip_blanks()
            char = self.peek()
            if char in ('"', "'"):
                raw = self.read_string()
                parts.append(unquote_key(raw))
            else:
                start = self.pos
                while self.pos < self.n and (self.text[self.pos].isalnum() or self.text[self.pos] in "_-"):
                    self.pos += 1
                parts.append(self.text[start:self.pos])
            self.skip_blanks()
            if self.peek() == ".":
                self.pos += 1
                continue
            return tuple(parts)
        return tuple(parts)

    def skip_value(self, in_array=False):
        """Skip one value; return element spans when it is an array."""
        char = self.peek()
        if char in ('"', "'"):
            self.read_string()
            return None
        if char == "[":
            self.pos += 1
            elements = []
            while True:
                self.skip_blanks_newlines_comments()
                if self.pos >= self.n or self.peek() == "]":
                    self.pos += 1
                    return elements
                start = self.pos
                self.skip_value(in_array=True)
                end = self.pos
                self.skip_blanks_newlines_comments()
                comma_end = None
                if self.peek() == ",":
                    self.pos += 1
                    comma_end = self.pos
                elements.append((start, end, comma_end))
        if char == "{":
            self.pos += 1
            while True:
                self.skip_blanks()
                if self.pos >= self.n or self.peek() == "}":
                    self.pos += 1
                    return None
                self.read_key()
                self.skip_blanks()
                if self.peek() == "=":
                    self.pos += 1
                self.skip_blanks()
                self.skip_value(in_array=True)
                self.skip_blanks()
                if self.peek() == ",":
                    self.pos += 1
        stops = ",]}#\n" if in_array else "#\n"
        start = self.pos
        while self.pos < self.n and self.text[self.pos] not in stops:
            self.pos += 1
        # Trailing blanks before a comment are not part of the value.
        while self.pos > start and self.text[self.pos - 1] in " \t\r":
            self.pos -= 1
        return None


def unquote_key(raw):
    """The key a quoted key token stands for (``"a.b"`` -> ``a.b``)."""
    if raw.startswith("'"):
        return raw[1:-1]
    if "\\" not in raw:
        return raw[1:-1]
    return loads("k = %s" % raw)["k"]


def scan_statements(text):
    """List the top-level statements of valid TOML ``text`` (see Statement)."""
    scanner = _Scanner(text)
    statements = []
    table = ()
    while scanner.pos < scanner.n:
        scanner.skip_blanks()
        char = scanner.peek()
        if char in ("\n", "\r"):
            scanner.pos += 1
            continue
        if char == "#":
            scanner.to_line_end()
            continue
        if char == "":
            break
        start = _line_start(text, scanner.pos)
        if char == "[":
            is_array = scanner.peek(2) == "[["
            scanner.pos += 2 if is_array else 1
            key = scanner.read_key()
            scanner.skip_blanks()
            scanner.pos += 2 if is_array else 1
            scanner.to_line_end()
            table = key
            statements.append(Statement("array_table" if is_array else "table", key, key, start, scanner.pos))
            continue
        key = scanner.read_key()
        scanner.skip_blanks()
        if scanner.peek() == "=":
            scanner.pos += 1
        scanner.skip_blanks()
        value_start = scanner.pos
        elements = scanner.skip_value()
        value_end = scanner.pos
        scanner.to_line_end()
        statements.append(Statement("keyval", table, key, start, scanner.pos, value_start, value_end, elements))
    return statements


def _line_start(text, pos):
    return text.rfind("\n", 0, pos) + 1
