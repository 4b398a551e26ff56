# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The readiness agent's incremental kernel-log reader (module_utils.gpu.kernel_log_state), issue #15.

journalctl is tests/standins/journalctl (no journald with kernel messages here); dmesg is a two-line stand-in
that prints a file.  Both run through the real runner (node_tools), as on a node.
"""
import json
import os
import stat
import time

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import node_tools
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import gpu_health, kernel_log_state, xid

from gpu_fixtures import text

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
JOURNALCTL = os.path.join(REPO, "tests", "standins", "journalctl")
NOW = int(time.time())
BUS_A, BUS_B = "0000:18:00", "0000:2a:00"


def iso(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(epoch))


def jline(epoch, message):
    return "%s gpu-node-1 kernel: %s\n" % (iso(epoch), message)


def noise(epoch, count):
    return "".join(jline(epoch + i, "audit: type=1400 audit(%d.000:%d): apparmor=\"ALLOWED\"" % (epoch, i))
                   for i in range(count))


XID_119 = "NVRM: Xid (PCI:%s): 119, pid=2710030, name=nvidia-smi, Timeout waiting for RPC from GSP! " \
          "Expected function 10 (FREE) (0xa55a0050 0x0)." % BUS_A
XID_13 = "NVRM: Xid (PCI:%s): 13, pid=11, name=python3, Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): " \
         "Out Of Range Address" % BUS_B
XID_79 = "NVRM: Xid (PCI:%s): 79, pid=<unknown>, name=<unknown>, GPU has fallen off the bus." % BUS_B


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A node: PATH with journalctl and dmesg stand-ins, a boot id file, a state dir."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(JOURNALCTL, str(bin_dir / "journalctl"))
    dmesg = bin_dir / "dmesg"
    dmesg.write_text("#!/bin/sh\n# STAND-IN for dmesg: prints $DMESG_STANDIN_FILE, the kernel ring buffer.\n"
                     "echo \"$*\" >> \"$DMESG_STANDIN_FILE.args\"\ncat \"$DMESG_STANDIN_FILE\"\n")
    dmesg.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ["PATH"])
    journal = tmp_path / "journal.txt"
    journal.write_text("")
    monkeypatch.setenv("JOURNALCTL_STANDIN_LOG", str(journal))
    monkeypatch.setenv("JOURNALCTL_STANDIN_NOW", str(NOW))
    monkeypatch.setenv("JOURNALCTL_STANDIN_ARGS_LOG", str(tmp_path / "journalctl.args"))
    ring = tmp_path / "dmesg.txt"
    ring.write_text("")
    monkeypatch.setenv("DMESG_STANDIN_FILE", str(ring))
    boot = tmp_path / "boot_id"
    boot.write_text("11111111-2222-3333-4444-555555555555\n")
    monkeypatch.setattr(kernel_log_state, "BOOT_ID_FILE", str(boot))

    class Node(object):
        state_dir = str(tmp_path / "state")
        state_file = os.path.join(str(tmp_path / "state"), kernel_log_state.STATE_FILE)

        def __init__(self):
            self.journal, self.ring, self.boot = journal, ring, boot

        def journal_calls(self):
            path = tmp_path / "journalctl.args"
            return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

        def run(self, kernel_log="auto", now=NOW, since="24h", save=True):
            """One agent run's kernel-log step; returns (reader, text, source)."""
            reader = kernel_log_state.KernelLogReader(self.state_dir, now=now)
            inputs, sources = {}, {}
            reader.read(node_tools.NodeTools(), kernel_log, gpu_health.validate_since(since), inputs, sources)
            if save:
                reader.save()
            return reader, inputs["kernel_log"], sources["kernel_log"]

    return Node()


def verdict(kernel_text):
    """What the metrics are made of: the Xid entries (count, action, cleared) and bus errors, by GPU."""
    result = gpu_health.evaluate({"kernel_log": kernel_text})
    events = sorted((e["xid"], e["pci_bus_id"], e["count"], e["action"], e["pending_action"], e["cleared"],
                     tuple(e["processes"])) for e in result["xid_events"])
    return events, sorted(reason for reason in result["reasons"] if "No nvidia-smi output" not in reason)


def full_window(journal_text, now=NOW, window=24 * 3600):
    """What reading the whole window at once (the agent before #15) parses."""
    return "".join(line for line in journal_text.splitlines(True)
                   if kernel_log_state.iso_epoch(line) >= now - window)


# --- the journal -----------------------------------------------------------
def test_first_run_reads_the_window_then_only_new_lines(node):
    base = NOW - 20 * 3600
    first = noise(base - 10 * 3600, 50) + jline(base, XID_119) + noise(base + 1, 200) + jline(base + 300, XID_13)
    node.journal.write_text(first)
    reader, kernel_text, source = node.run()
    assert source == "journalctl -k -b --since -24h (incremental)"
    assert verdict(kernel_text) == verdict(full_window(first))
    assert reader.parsed_lines == 201 + 1  # the 24 h part (the 50 older lines are left out by --since) ...
    added = noise(NOW - 120, 30) + jline(NOW - 60, XID_119)
    with open(str(node.journal), "a") as handle:
        handle.write(added)
    reader, kernel_text, _source = node.run()
    assert reader.parsed_lines == 31  # ... then only the 31 new lines
    calls = node.journal_calls()
    assert "--since" in calls[0] and "--after-cursor" not in calls[0]
    assert "--after-cursor" in calls[1] and "--since" not in calls[1]
    cursor = calls[1][calls[1].index("--after-cursor") + 1]
    assert cursor.endswith(";i=%d" % len(first.encode()))
    # steady state == a fresh read of the whole window
    assert verdict(kernel_text) == verdict(full_window(first + added))
    events, _reasons = verdict(kernel_text)
    assert [e for e in events if e[0] == 119][0][2] == 2


def test_steady_state_equals_a_fresh_run(node):
    node.journal.write_text(noise(NOW - 3600, 100) + jline(NOW - 3000, XID_119))
    node.run()
    with open(str(node.journal), "a") as handle:
        handle.write(jline(NOW - 100, XID_13) + noise(NOW - 99, 10))
    _reader, steady, _source = node.run()
    os.unlink(node.state_file)
    fresh_reader, fresh, _source = node.run()
    assert fresh_reader.parsed_lines == 112
    assert steady == fresh
    assert verdict(steady)[0] and verdict(steady) == verdict(fresh)


def test_lines_older_than_the_window_expire(node):
    node.journal.write_text(jline(NOW - 23 * 3600, XID_119) + noise(NOW - 10, 3))
    _reader, kernel_text, _source = node.run()
    assert [e[0] for e in verdict(kernel_text)[0]] == [119]
    # two hours later, nothing new: the Xid is 25 h old and leaves the window and the state
    _reader, kernel_text, _source = node.run(now=NOW + 2 * 3600)
    assert verdict(kernel_text)[0] == []
    with open(node.state_file) as handle:
        assert "Xid" not in handle.read()


def test_a_reboot_starts_over(node):
    node.journal.write_text(jline(NOW - 600, XID_79) + noise(NOW - 500, 5))
    _reader, kernel_text, _source = node.run()
    assert verdict(kernel_text)[1]  # fallen off the bus: not ready
    # the node reboots: another boot id, and the journal's current boot has no Xid
    node.boot.write_text("99999999-2222-3333-4444-555555555555\n")
    load = "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:47 UTC 2024"
    node.journal.write_text(noise(NOW - 60, 5) + jline(NOW - 30, load))
    reader, kernel_text, _source = node.run()
    assert any("boot id changed" in note for note in reader.notes)
    assert "--since" in node.journal_calls()[-1]  # the saved cursor belongs to the old boot
    assert verdict(kernel_text) == ([], [])


def test_a_refused_cursor_reads_the_window_again(node):
    node.journal.write_text(jline(NOW - 600, XID_119))
    node.run()
    with open(node.state_file) as handle:
        state = json.load(handle)
    state["sources"]["journal"]["cursor"] = "not a cursor"
    with open(node.state_file, "w") as handle:
        json.dump(state, handle)
    reader, kernel_text, _source = node.run()
    assert any("refused the saved cursor" in note for note in reader.notes)
    assert [e[2] for e in verdict(kernel_text)[0]] == [1]  # read again, not counted twice


def test_a_changed_window_reads_the_journal_again(node):
    node.journal.write_text(jline(NOW - 30 * 3600, XID_119) + jline(NOW - 60, XID_13))
    _reader, kernel_text, _source = node.run()
    assert [e[0] for e in verdict(kernel_text)[0]] == [13]
    reader, kernel_text, _source = node.run(since="48h")
    assert any("xid_since changed" in note for note in reader.notes)
    assert sorted(e[0] for e in verdict(kernel_text)[0]) == [13, 119]


@pytest.mark.parametrize("content", [
    b"{not json",
    b"\xff\xfe\x00garbage",
    b'{"format": "someone-else/1", "boot_id": null, "sources": {}}',
    b'["a", "list"]',
    b'{"format": "gpu_native.fleet/kernel_log_state/1", "boot_id": "x", "sources": {"journal": {"cursor": 5}}}',
    b'{"format": "gpu_native.fleet/kernel_log_state/1", "boot_id": null, '
    b'"sources": {"file": {"path": "/x", "dev": 1, "ino": 2, "offset": -4, "lines": []}}}',
    b'{"format": "gpu_native.fleet/kernel_log_state/1", "boot_id": null, '
    b'"sources": {"dmesg": {"position": null, "lines": [["yesterday", "NVRM: Xid"]]}}}',
])
def test_a_corrupt_or_foreign_state_file_starts_over(node, content):
    node.journal.write_text(jline(NOW - 600, XID_119) + noise(NOW - 500, 3))
    os.makedirs(node.state_dir)
    with open(node.state_file, "wb") as handle:
        handle.write(content)
    reader, kernel_text, _source = node.run()
    assert any("starting over" in note for note in reader.notes), reader.notes
    assert "--since" in node.journal_calls()[-1]
    assert [e[0] for e in verdict(kernel_text)[0]] == [119]
    with open(node.state_file) as handle:
        assert json.load(handle)["format"] == kernel_log_state.STATE_FORMAT  # replaced by a good one


def test_an_oversized_state_file_is_not_read(node, monkeypatch):
    monkeypatch.setattr(kernel_log_state, "MAX_STATE_FILE_BYTES", 64)
    os.makedirs(node.state_dir)
    with open(node.state_file, "w") as handle:
        handle.write(" " * 65)
    reader, _text, _source = node.run()
    assert any("larger than 64 bytes" in note for note in reader.notes)


def test_a_symlinked_state_file_is_not_followed(node, tmp_path):
    secret = tmp_path / "elsewhere.json"
    secret.write_text('{"format": "gpu_native.fleet/kernel_log_state/1", "boot_id": null, "sources": {}}')
    os.makedirs(node.state_dir)
    os.symlink(str(secret), node.state_file)
    reader, _text, _source = node.run()
    assert any("unreadable" in note for note in reader.notes)
    assert not os.path.islink(node.state_file)  # the rename replaced the link, the target is untouched
    assert secret.read_text().endswith('"sources": {}}')


def test_the_state_is_written_atomically_and_privately(node):
    node.journal.write_text(jline(NOW - 600, XID_119))
    node.run()
    assert os.listdir(node.state_dir) == [kernel_log_state.STATE_FILE]  # no temporary file left
    assert stat.S_IMODE(os.stat(node.state_file).st_mode) == 0o600


def test_the_state_is_bounded(node, monkeypatch):
    monkeypatch.setattr(kernel_log_state, "MAX_STATE_LINES", 50)
    node.journal.write_text("".join(jline(NOW - 3000 + i, XID_13) for i in range(80)) + jline(NOW - 10, XID_119))
    reader, kernel_text, _source = node.run()
    assert any("31 oldest kept kernel-log lines dropped" in note for note in reader.notes)
    events = dict((e[0], e[2]) for e in verdict(kernel_text)[0])
    assert events == {13: 49, 119: 1}  # the newest part is kept, as the parser's own bound does


# --- dmesg (auto, when the journal holds no NVRM line) ------------------------
def test_dmesg_is_read_incrementally_when_the_journal_has_no_nvrm_line(node):
    node.journal.write_text(noise(NOW - 60, 5))
    ring = ("[    5.100000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:47 UTC 2024\n"
            "[  100.000001] e1000e: eth0 NIC Link is Up\n"
            "[  200.500000] %s\n" % XID_119)
    node.ring.write_text(ring)
    reader, kernel_text, source = node.run()
    assert source == "dmesg (since boot, incremental)"
    assert reader.parsed_lines == 3 + 5
    added = "[  200.500000] e1000e: same stamp, next line\n[  300.000000] %s\n" % XID_119
    node.ring.write_text(ring + added)
    reader, steady, _source = node.run()
    assert reader.parsed_lines == 2  # the journal had nothing new; dmesg: only the two new lines
    os.unlink(node.state_file)
    _reader, fresh, _source = node.run()
    assert steady == fresh and [e[2] for e in verdict(steady)[0]] == [2]


def test_dmesg_without_timestamps_is_read_whole_each_run(node):
    node.ring.write_text("NVRM: %s\n" % XID_13.split("NVRM: ", 1)[1])
    node.run()
    _reader, kernel_text, _source = node.run()
    assert [e[2] for e in verdict(kernel_text)[0]] == [1]  # not counted twice


# --- a plain file --------------------------------------------------------------
def test_a_plain_file_is_read_from_the_saved_offset(node, tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("Feb 27 16:02:11 n kernel: %s\nFeb 27 16:03:00 n kernel: eth0 up\n" % XID_119)
    reader, _text, source = node.run(kernel_log=str(log))
    assert source == "%s (incremental)" % log and reader.parsed_lines == 2
    with open(str(log), "a") as handle:
        handle.write("Feb 27 16:04:00 n kernel: %s\nFeb 27 16:04:01 n kernel: NVRM: Xid (PCI:0000:2a" % XID_119)
    reader, kernel_text, _source = node.run(kernel_log=str(log))
    assert reader.parsed_lines == 1  # the unfinished last line waits for its newline
    assert [e[2] for e in verdict(kernel_text)[0]] == [2]
    with open(str(log), "a") as handle:
        handle.write(":00): 13, pid=1, name=x, Graphics Exception\n")
    reader, kernel_text, _source = node.run(kernel_log=str(log))
    assert reader.parsed_lines == 1
    assert verdict(kernel_text) == verdict(log.read_text())
    assert node.journal_calls() == []  # a configured file never runs journalctl


def test_a_truncated_file_starts_over(node, tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("Feb 27 16:02:11 n kernel: %s\n" % XID_119 * 3)
    node.run(kernel_log=str(log))
    log.write_text("Feb 27 17:00:00 n kernel: %s\n" % XID_13)  # same inode, shorter: truncated (copytruncate)
    reader, kernel_text, _source = node.run(kernel_log=str(log))
    assert any("truncated" in note for note in reader.notes)
    assert [e[0] for e in verdict(kernel_text)[0]] == [13]


def test_a_rotated_file_starts_over(node, tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("Feb 27 16:02:11 n kernel: %s\n" % XID_119)
    node.run(kernel_log=str(log))
    os.rename(str(log), str(tmp_path / "kern.log.1"))
    log.write_text("Feb 27 16:02:11 n kernel: %s\n" % XID_13 + "x" * 400 + "\n")  # longer, but another inode
    reader, kernel_text, _source = node.run(kernel_log=str(log))
    assert any("rotated" in note for note in reader.notes)
    assert [e[0] for e in verdict(kernel_text)[0]] == [13]


def test_an_unreadable_file_is_a_clear_error(node, tmp_path):
    with pytest.raises(kernel_log_state.KernelLogStateError, match="cannot be read.*Fix: pass a readable file"):
        node.run(kernel_log=str(tmp_path / "missing.log"))


# --- keeping only what the parser reads gives the parser's verdict ------------------
def chunks(lines, cut):
    return "".join(lines[:cut]), "".join(lines[cut:])


@pytest.mark.parametrize("name", ["07_kernel_xid_lines_real_part.txt", "constructed_kernel_log_a40_gpu4_xid119.txt"])
def test_kept_lines_parse_like_the_whole_log_wherever_a_run_ends(name):
    whole = text(name) if name.startswith("07") else open(os.path.join(
        REPO, "tests", "fixtures", "nvidia", name)).read()
    # open-module multi-line messages, a break by another line, and a continuation after it
    whole += ("[  9.000001] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
              "             NVRM: (PCI ID: 10de:2330) installed in this system has\n"
              "             NVRM: fallen off the bus and is not responding to commands.\n"
              "[  9.100000] usb 1-1: new device\n"
              "             NVRM: an orphan continuation line\n")
    lines = whole.splitlines(True)
    expected = xid.parse_kernel_log(whole)
    for cut in range(len(lines) + 1):
        kept = []
        for part in chunks(lines, cut):
            kernel_log_state.keep_lines(part, kept)
        got = xid.parse_kernel_log(kernel_log_state._text(kept))
        for key in ("events", "bus_errors", "sxid_events"):
            assert [dict(e, line=None) for e in got[key]] == [dict(e, line=None) for e in expected[key]], (key, cut)
        assert got["uuid_map"] == expected["uuid_map"] and got["driver_versions"] == expected["driver_versions"]
        assert verdict(kernel_log_state._text(kept)) == verdict(whole)
    assert len(kept) < len(lines)  # and fewer lines are kept


@pytest.mark.parametrize("line, epoch", [
    ("2026-11-30T22:43:04+0000 n kernel: x", 1796078584),
    ("2026-11-30T23:43:04+01:00 n kernel: x", 1796078584),
    ("2026-11-30T22:43:04.123456Z n kernel: x", 1796078584),
    ("Nov 30 22:43:04 n kernel: x", None),
])
def test_iso_times(line, epoch):
    assert kernel_log_state.iso_epoch(line) == epoch
