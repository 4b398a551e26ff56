# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""Incremental kernel-log reading for the readiness agent, with a small state file.

The agent runs every minute and judges the Xids of a whole window
(``xid_since``, 24 h by default).  Reading that window again on every run costs
a full ``journalctl`` pass over every kernel line of the day.  This module
reads only what is new since the last run and keeps, in a state file, the
kernel-log lines the verdict needs:

- ``journalctl`` (``kernel_log: auto``): the first run of a boot reads
  ``-k -b --since -<xid_since> --show-cursor``; later runs read
  ``--after-cursor <saved cursor>``.  Lines older than the window expire from
  the state, so the verdict still covers the whole window.
- ``dmesg`` (``auto`` when the journal holds no NVRM line): the ring buffer is
  read through the runner as before; only lines after the last seen
  ``[seconds]`` position are added (the whole boot, as before).
- a plain file (``kernel_log: /path``): a byte offset together with the file's
  device and inode; a shorter file (truncated) or another inode (rotated)
  starts over from its beginning.

Every position is kept together with the boot id
(``/proc/sys/kernel/random/boot_id``): after a reboot everything starts over.

Only the lines ``xid.parse_kernel_log`` looks at are kept (``NVRM``, ``SXid``,
"fallen off the bus", "GPU is lost"; ``xid._is_candidate``), each run of other
lines collapsed into one ``~`` line (the parser ends a multi-line message at a
non-candidate line), so parsing the kept text gives the same verdict as
parsing the whole window.  The state is bounded (:data:`MAX_STATE_LINES`,
:data:`MAX_STATE_CHARS`, the oldest lines are dropped with a note), written
atomically (temporary file, then rename) and a corrupt, foreign or oversized
state file is set aside with a note: the run starts over, it never fails.

Standard library only, Python 3.8+: this file is copied onto nodes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import time

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils._common import node_tools
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.lazy_regex import lazy_compile
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.gpu_health import choose_kernel_log
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.xid import MAX_LINE_CHARS, _is_candidate

STATE_FORMAT = "gpu_native.fleet/kernel_log_state/1"
STATE_FILE = "kernel_log_state.json"
BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
#: Bounds of the kept lines (an Xid flood keeps its newest part, as the parser's own bound does).
MAX_STATE_LINES = 20000
MAX_STATE_CHARS = 4 * 1024 * 1024
#: A state file larger than this is not read (a foreign file); the run starts over.
MAX_STATE_FILE_BYTES = 3 * MAX_STATE_CHARS
#: A plain file grows by at most this much per run (the runner's own output bound).
MAX_READ_BYTES = node_tools.MAX_OUTPUT_BYTES
BREAK = "~"

_JOURNAL_BASE = ["-k", "-b", "--no-pager", "-q", "-o", "short-iso"]
_CURSOR_PREFIX = "-- cursor: "
_ISO_RE = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:[.,]\d{1,9})?(Z|[+-]\d\d:?\d\d)?\s")
_DMESG_TS_RE = lazy_compile(r"^\[\s{0,12}(\d{1,12})\.(\d{1,9})\]")
_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}
_SINCE_RE = re.compile(r"^-?(\d+)\s*(s|sec|m|min|h|d|w)$")


class KernelLogStateError(FleetError, ValueError):
    """Input the reader cannot work with (one line, with the fix)."""


def window_seconds(since):
    """``24h`` / ``-24h`` / ``30min`` -> seconds."""
    match = _SINCE_RE.match(str(since).strip())
    if not match:
        raise KernelLogStateError("xid_since %r is not a duration. Fix: use a number with s, min, h, d or w, e.g. 24h."
                                  % (since,))
    return int(match.group(1)) * _UNITS[match.group(2)]


def _timegm(year, month, day, hour, minute, second):
    """``calendar.timegm((year, month, day, hour, minute, second, ...))``, without importing calendar (it imports
    datetime and locale: ~1 ms of every agent run).  Like it, ValueError for a year outside 1-9999 or a month outside
    1-12; the day, hour, minute and second are counted as given (day 0 is the month's eve)."""
    if not (1 <= year <= 9999 and 1 <= month <= 12):
        raise ValueError("year %d, month %d is not a date" % (year, month))
    # days from 1970-01-01 to the first of the month (H. Hinnant, "chrono-compatible low-level date algorithms")
    shifted = year - 1 if month <= 2 else year
    era = shifted // 400
    year_of_era = shifted - era * 400
    day_of_year = (153 * (month - 3 if month > 2 else month + 9) + 2) // 5
    days = era * 146097 + year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year - 719468
    return (((days + day - 1) * 24 + hour) * 60 + minute) * 60 + second


def iso_epoch(line):
    """Unix time of a ``short-iso`` journal line (``2026-11-30T22:43:04+0000 host kernel: ...``), or None."""
    match = _ISO_RE.match(line)
    if not match:
        return None
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    zone = match.group(7)
    try:
        if zone is None:
            return int(time.mktime((year, month, day, hour, minute, second, 0, 0, -1)))
        epoch = _timegm(year, month, day, hour, minute, second)
    except (OverflowError, ValueError):
        return None
    if zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        epoch -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return epoch


def read_boot_id(path=BOOT_ID_FILE):
    try:
        with open(path) as handle:
            return handle.read(64).strip()
    except (IOError, OSError):
        return ""


# ---------------------------------------------------------------------------
# state file
# ---------------------------------------------------------------------------
def _valid_lines(lines):
    return isinstance(lines, list) and all(
        isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], str)
        and (entry[0] is None or (isinstance(entry[0], int) and not isinstance(entry[0], bool)))
        for entry in lines)


def _valid_source(kind, section):
    if not isinstance(section, dict) or not _valid_lines(section.get("lines")):
        return False
    if kind == "journal":
        return isinstance(section.get("cursor"), str) and isinstance(section.get("since"), str)
    if kind == "dmesg":
        position = section.get("position")
        return position is None or (isinstance(position, list) and len(position) == 3 and all(
            isinstance(value, int) and not isinstance(value, bool) and value >= 0 for value in position))
    if kind == "file":
        return isinstance(section.get("path"), str) and all(
            isinstance(section.get(key), int) and not isinstance(section.get(key), bool) and section.get(key) >= 0
            for key in ("dev", "ino", "offset"))
    return False


def load_state(path):
    """``(state, note)``: the saved state, or an empty one and a note saying why it was not used."""
    empty = {"format": STATE_FORMAT, "boot_id": None, "sources": {}}
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
    try:
        handle = os.open(path, flags)
    except (IOError, OSError) as exc:
        if getattr(exc, "errno", None) == 2:
            return empty, None
        return empty, "state file %s unreadable (%s): starting over" % (path, exc.strerror or exc)
    try:
        with os.fdopen(handle, "rb") as stream:
            data = stream.read(MAX_STATE_FILE_BYTES + 1)
    except (IOError, OSError) as exc:
        return empty, "state file %s unreadable (%s): starting over" % (path, exc.strerror or exc)
    if len(data) > MAX_STATE_FILE_BYTES:
        return empty, "state file %s is larger than %d bytes (not ours): starting over" % (path, MAX_STATE_FILE_BYTES)
    try:
        state = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return empty, "state file %s is not valid JSON (corrupt or foreign): starting over" % path
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        return empty, "state file %s is not a %s file: starting over" % (path, STATE_FORMAT)
    sources = state.get("sources")
    if not isinstance(sources, dict) or not isinstance(state.get("boot_id"), (str, type(None))) or not all(
            _valid_source(kind, section) for kind, section in sources.items()):
        return empty, "state file %s has an unexpected layout: starting over" % path
    return state, None


def save_state(path, state):
    """Write ``state`` as JSON through a temporary file in the same directory and a rename."""
    directory, name = os.path.split(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    handle, temp_path = node_tools.make_temporary(directory, "." + name + ".", ".tmp")
    try:
        with os.fdopen(handle, "w") as stream:
            # json.dumps, not json.dump: dump encodes in pure Python, dumps with the C encoder (the same text,
            # several ms less for a window's worth of lines every run)
            stream.write(json.dumps(state, separators=(",", ":")))
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temp_path, 0o600)
        os.rename(temp_path, path)
    except BaseException:
        if os.path.exists(temp_path):
            os.unlink(temp_path)
        raise


# ---------------------------------------------------------------------------
# keeping the lines the parser needs
# ---------------------------------------------------------------------------
def keep_lines(text, kept, epoch_of=None, skip=None):
    """Append the candidate lines of ``text`` to ``kept`` (``[[epoch, line], ...]``).

    A run of other non-empty lines becomes one ``~`` line; a line without its
    own time (a continuation) takes the time of the line above.  ``skip(line)``
    drops a line entirely (journalctl's own ``-- ...`` lines).  Returns the
    number of kernel-log lines looked at."""
    last_epoch = kept[-1][0] if kept else None
    broken = bool(kept) and kept[-1][1] == BREAK
    count = 0
    for raw in text.splitlines():
        if len(raw) > MAX_LINE_CHARS:
            raw = raw[:MAX_LINE_CHARS]
        line = raw.rstrip()
        if skip is not None and skip(line):
            continue
        count += 1
        if not line.strip():
            continue
        if not _is_candidate(line):
            if not broken and kept:
                kept.append([last_epoch, BREAK])
                broken = True
            continue
        if epoch_of is not None:
            epoch = epoch_of(line)
            if epoch is not None:
                last_epoch = epoch
        kept.append([last_epoch, line])
        broken = False
    return count


def bound(lines):
    """Drop the oldest lines beyond :data:`MAX_STATE_LINES` / :data:`MAX_STATE_CHARS`; return how many."""
    dropped = 0
    if len(lines) > MAX_STATE_LINES:
        dropped = len(lines) - MAX_STATE_LINES
        del lines[:dropped]
    total = sum(len(line) + 16 for _epoch, line in lines)
    cut = 0
    while total > MAX_STATE_CHARS and cut < len(lines):
        total -= len(lines[cut][1]) + 16
        cut += 1
    if cut:
        del lines[:cut]
    while lines and lines[0][1] == BREAK:
        del lines[0]
    return dropped + cut


def expire(lines, cutoff):
    """Drop lines whose time is before ``cutoff`` (lines without a time stay)."""
    kept = [entry for entry in lines if entry[0] is None or entry[0] >= cutoff]
    while kept and kept[0][1] == BREAK:
        del kept[0]
    return kept


def dmesg_positions(lines):
    """Position ``(seconds, nanoseconds, index under that stamp)`` of each dmesg line; None before the first stamp.

    Lines without a stamp (continuations) count under the stamp above them."""
    positions = []
    position = None
    match_stamp = _DMESG_TS_RE.compiled().match
    for line in lines:
        match = match_stamp(line)
        if match:
            stamp = (int(match.group(1)), int(match.group(2).ljust(9, "0")))
            position = (stamp[0], stamp[1], position[2] + 1) if position is not None and position[:2] == stamp else (
                stamp[0], stamp[1], 0)
        elif position is not None:
            position = (position[0], position[1], position[2] + 1)
        positions.append(position)
    return positions


def _text(lines):
    return "\n".join(line for _epoch, line in lines) + ("\n" if lines else "")


class KernelLogReader(object):
    """``read(tools, kernel_log, since, inputs, sources)`` for ``gpu_health.collect(kernel_log_reader=...)``.

    ``state_dir`` holds :data:`STATE_FILE`; ``now`` is the run's Unix time.
    After ``read``, ``notes`` says what was reset or bounded, ``parsed_lines``
    how many new kernel-log lines were looked at, and ``save()`` writes the
    state (the agent calls it once the run is done)."""

    def __init__(self, state_dir, now=None, boot_id_file=None):
        self.path = os.path.join(state_dir, STATE_FILE)
        self.now = int(time.time() if now is None else now)
        self.boot_id = read_boot_id(boot_id_file or BOOT_ID_FILE)
        self.notes = []
        self.parsed_lines = 0
        self.state, note = load_state(self.path)
        if note:
            self.notes.append(note)
        if self.state.get("boot_id") != self.boot_id:
            if self.state.get("boot_id") is not None:
                self.notes.append("boot id changed (%s -> %s): kernel-log state starts over" % (
                    self.state.get("boot_id"), self.boot_id))
            self.state = {"format": STATE_FORMAT, "boot_id": self.boot_id, "sources": {}}
        self.used = set()

    def save(self):
        self.state["sources"] = dict((kind, section) for kind, section in self.state["sources"].items()
                                     if kind in self.used)
        save_state(self.path, self.state)

    def _bounded(self, section, label):
        dropped = bound(section["lines"])
        if dropped:
            self.notes.append("%s: %d oldest kept kernel-log lines dropped (state bound %d lines, %d characters)"
                              % (label, dropped, MAX_STATE_LINES, MAX_STATE_CHARS))

    # -- journalctl --------------------------------------------------------
    def journal(self, tools, since):
        """Read the journal's new kernel lines; return ``(result, section)``."""
        self.used.add("journal")
        section = self.state["sources"].get("journal")
        if section is not None and section.get("since") != since:
            self.notes.append("xid_since changed (%s -> %s): the journal is read again" % (section.get("since"), since))
            section = None
        result = None
        if section is not None and section["cursor"]:
            result = tools.run("journalctl", _JOURNAL_BASE + ["--after-cursor", section["cursor"], "--show-cursor"])
            if not result.ok:
                self.notes.append("journalctl refused the saved cursor (%s): the journal is read again"
                                  % result.message)
                section = None
        if section is None or result is None or not result.ok:
            section = {"cursor": "", "since": since, "lines": []}
            result = tools.run("journalctl", _JOURNAL_BASE + ["--since", since, "--show-cursor"])
        self.state["sources"]["journal"] = section
        if result.ok:
            cursor = [None]

            def skip(line):
                if line.startswith(_CURSOR_PREFIX):
                    cursor[0] = line[len(_CURSOR_PREFIX):].strip()
                    return True
                return line.startswith("-- ")

            parsed = keep_lines(result.stdout, section["lines"], iso_epoch, skip)
            self.parsed_lines += parsed
            if cursor[0]:
                section["cursor"] = cursor[0]
            elif parsed and not section["cursor"]:
                self.notes.append("journalctl printed no cursor (--show-cursor): the next run reads the window again")
        section["lines"] = expire(section["lines"], self.now - window_seconds(since))
        self._bounded(section, "journal")
        return result, section

    # -- dmesg -------------------------------------------------------------
    def dmesg(self, tools):
        """Add the ring buffer's lines after the saved ``[seconds]`` position; return ``(result, section)``."""
        self.used.add("dmesg")
        section = self.state["sources"].get("dmesg") or {"position": None, "lines": []}
        self.state["sources"]["dmesg"] = section
        result = tools.run("dmesg", [])
        if not result.ok:
            return result, section
        lines = result.stdout.splitlines()
        positions = dmesg_positions(lines)
        placed = [position for position in positions if position is not None]
        if not placed:
            # no [seconds] prefixes (printk.time=0): no position to keep, the whole buffer is read each run
            section["lines"], section["position"], new = [], None, lines
        else:
            saved = tuple(section["position"]) if section["position"] else None
            new = lines if saved is None else [
                line for line, position in zip(lines, positions) if position is not None and position > saved]
            section["position"] = list(placed[-1])
        self.parsed_lines += keep_lines("\n".join(new), section["lines"])
        self._bounded(section, "dmesg")
        return result, section

    # -- a plain file ------------------------------------------------------
    def plain_file(self, path):
        """Read ``path`` from the saved byte offset; return the section."""
        self.used.add("file")
        try:
            handle = open(path, "rb")
        except (IOError, OSError) as exc:
            raise KernelLogStateError("kernel_log %s cannot be read: %s. Fix: pass a readable file or 'auto'." % (
                path, exc.strerror or exc))
        with handle:
            info = os.fstat(handle.fileno())
            section = self.state["sources"].get("file")
            if section is not None and (section["path"] != path or section["dev"] != info.st_dev
                                        or section["ino"] != info.st_ino):
                self.notes.append("%s was replaced (rotated): read from its start" % path)
                section = None
            elif section is not None and info.st_size < section["offset"]:
                self.notes.append("%s is shorter than the saved offset (truncated): read from its start" % path)
                section = None
            if section is None:
                section = {"path": path, "dev": info.st_dev, "ino": info.st_ino, "offset": 0, "lines": []}
            self.state["sources"]["file"] = section
            offset = section["offset"]
            if info.st_size - offset > MAX_READ_BYTES:
                offset = info.st_size - MAX_READ_BYTES
                if section["lines"] and section["lines"][-1][1] != BREAK:
                    section["lines"].append([None, BREAK])
                self.notes.append("%s grew by more than %d bytes: its older part is skipped" % (path, MAX_READ_BYTES))
            handle.seek(offset)
            if offset != section["offset"]:
                handle.readline()  # the cut line's tail
            partial = b""
            while True:
                chunk = handle.read(1024 * 1024)
                if not chunk:
                    break
                chunk = partial + chunk
                end = chunk.rfind(b"\n")
                if end < 0:
                    partial = chunk
                    continue
                partial = chunk[end + 1:]
                self.parsed_lines += keep_lines(node_tools.decode_output(chunk[:end + 1]), section["lines"])
                self._bounded(section, path)
            # an unfinished last line is read again next time, once it has its newline
            section["offset"] = handle.tell() - len(partial)
        self._bounded(section, path)
        return section

    # -- the collect() hook --------------------------------------------------
    def read(self, tools, kernel_log, since, inputs, sources):
        """Fill ``inputs['kernel_log']`` and ``sources['kernel_log']`` (the order is gpu_health.choose_kernel_log's)."""
        if kernel_log != "auto":
            section = self.plain_file(kernel_log)
            inputs["kernel_log"] = _text(section["lines"])
            sources["kernel_log"] = "%s (incremental)" % kernel_log
            return
        result, section = self.journal(tools, since)

        def read_dmesg():
            dmesg, dmesg_section = self.dmesg(tools)
            return dmesg, _text(dmesg_section["lines"])

        inputs["kernel_log"], sources["kernel_log"] = choose_kernel_log(
            since, result, _text(section["lines"]), read_dmesg, incremental=True)
