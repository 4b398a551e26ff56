# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_health.choose_kernel_log: the one fallback order of a ``kernel_log: auto`` run, shared by gpu_health's own
reader and the readiness agent's incremental one (module_utils.gpu.kernel_log_state).

The results are real node_tools.ToolResult objects in the states the runner gives them."""
import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import node_tools
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import gpu_health, kernel_log_state

SINCE = "-24h"
JOURNAL_NVRM = "2026-11-30T22:43:04+0000 n kernel: NVRM: Xid (PCI:0000:18:00): 119, pid=1, name=x, GSP timeout\n"
JOURNAL_NOISE = "2026-11-30T22:43:05+0000 n kernel: e1000e: eth0 NIC Link is Up\n"
RING = "[  200.500000] NVRM: Xid (PCI:0000:18:00): 79, pid=<unknown>, name=<unknown>, GPU has fallen off the bus.\n"


def journal_ok(text):
    return node_tools.ToolResult("journalctl", ["journalctl", "-k"], node_tools.OK, rc=0, stdout=text)


def journal_missing():
    return node_tools.ToolResult("journalctl", ["journalctl", "-k"], node_tools.MISSING)


# journalctl as a user outside systemd-journal/adm: rc=0, the user's own (empty) journal, the hint on stderr
# (systemd src/shared/journal-util.c, access_check_var_log_journal()).
DENIED_HINT = ("Hint: You are currently not seeing messages from other users and the system.\n"
               "      Users in groups 'adm', 'systemd-journal' can see all messages.\n"
               "      Pass -q to turn off this notice.\n")


def journal_denied(stdout="-- No entries --\n", stderr=DENIED_HINT):
    return node_tools.ToolResult("journalctl", ["journalctl", "-k"], node_tools.OK, rc=0, stdout=stdout,
                                 stderr=stderr)


def dmesg_ok(text):
    return node_tools.ToolResult("dmesg", ["dmesg"], node_tools.OK, rc=0, stdout=text)


def dmesg_failed():
    return node_tools.ToolResult("dmesg", ["dmesg"], node_tools.FAILED, rc=1,
                                 stderr="dmesg: read kernel buffer failed: Operation not permitted")


class Dmesg(object):
    """read_dmesg for choose_kernel_log: returns ``(result, text)`` and counts its calls."""

    def __init__(self, result, text=None):
        self.result, self.text, self.calls = result, result.stdout if text is None else text, 0

    def __call__(self):
        self.calls += 1
        return self.result, self.text


@pytest.mark.parametrize("incremental, source", [
    (False, "journalctl -k -b --since -24h"),
    (True, "journalctl -k -b --since -24h (incremental)"),
])
def test_1_the_journal_wins_when_its_text_holds_an_nvrm_line_and_dmesg_is_not_run(incremental, source):
    dmesg = Dmesg(dmesg_ok(RING))
    text = JOURNAL_NOISE + JOURNAL_NVRM
    assert gpu_health.choose_kernel_log(SINCE, journal_ok(text), text, dmesg, incremental=incremental) == (
        text, source)
    assert dmesg.calls == 0


def test_1_the_nvrm_test_looks_at_the_text_passed_not_at_stdout():
    # the incremental reader passes its kept lines (earlier runs' NVRM lines) while this run's output is quiet
    dmesg = Dmesg(dmesg_ok(RING))
    kept = JOURNAL_NVRM
    assert gpu_health.choose_kernel_log(SINCE, journal_ok(""), kept, dmesg, incremental=True) == (
        kept, "journalctl -k -b --since -24h (incremental)")
    assert dmesg.calls == 0


@pytest.mark.parametrize("journal", [journal_ok(JOURNAL_NOISE), journal_missing()], ids=["no-nvrm", "journal-missing"])
@pytest.mark.parametrize("incremental, source", [
    (False, "dmesg (since boot)"),
    (True, "dmesg (since boot, incremental)"),
])
def test_2_dmesg_when_the_journal_has_no_nvrm_line_or_failed(journal, incremental, source):
    dmesg = Dmesg(dmesg_ok(RING), text="kept " + RING)
    assert gpu_health.choose_kernel_log(SINCE, journal, journal.stdout, dmesg, incremental=incremental) == (
        "kept " + RING, source)
    assert dmesg.calls == 1


@pytest.mark.parametrize("incremental", [False, True])
def test_3_an_answering_journal_without_nvrm_lines_when_dmesg_fails(incremental):
    dmesg = Dmesg(dmesg_failed())
    assert gpu_health.choose_kernel_log(SINCE, journal_ok(JOURNAL_NOISE), JOURNAL_NOISE, dmesg,
                                        incremental=incremental) == (
        "", "journalctl -k -b --since -24h (no NVRM lines)")
    assert dmesg.calls == 1


@pytest.mark.parametrize("incremental", [False, True])
def test_4_unavailable_names_both_failures(incremental):
    dmesg = Dmesg(dmesg_failed())
    assert gpu_health.choose_kernel_log(SINCE, journal_missing(), "", dmesg, incremental=incremental) == (
        "", "unavailable (journalctl was not found.; "
            "dmesg exited with rc=1: dmesg: read kernel buffer failed: Operation not permitted)")


class Tools(object):
    """A NodeTools-shaped stand-in answering journalctl and dmesg with fixed results (live source)."""

    source = "live"

    def __init__(self, journal, dmesg):
        self.results = {"journalctl": journal, "dmesg": dmesg}
        self.calls = []

    def run(self, tool, args, capture_key=None):
        self.calls.append(tool)
        return self.results[tool]


@pytest.mark.parametrize("journal, dmesg, text, source, calls", [
    (journal_ok(JOURNAL_NVRM), dmesg_ok(RING), JOURNAL_NVRM, "journalctl -k -b --since -24h", ["journalctl"]),
    (journal_ok(JOURNAL_NOISE), dmesg_ok(RING), RING, "dmesg (since boot)", ["journalctl", "dmesg"]),
    (journal_ok(JOURNAL_NOISE), dmesg_failed(), "", "journalctl -k -b --since -24h (no NVRM lines)",
     ["journalctl", "dmesg"]),
    (journal_missing(), dmesg_failed(), "", "unavailable (journalctl was not found.; dmesg exited with rc=1: "
                                            "dmesg: read kernel buffer failed: Operation not permitted)",
     ["journalctl", "dmesg"]),
], ids=["journal", "dmesg", "no-nvrm", "unavailable"])
def test_both_readers_follow_the_one_order(tmp_path, journal, dmesg, text, source, calls):
    inputs, sources = {}, {}
    tools = Tools(journal, dmesg)
    gpu_health._collect_kernel_log(tools, "auto", SINCE, inputs, sources)
    assert (inputs["kernel_log"], sources["kernel_log"], tools.calls) == (text, source, calls)

    boot = tmp_path / "boot_id"
    boot.write_text("11111111-2222-3333-4444-555555555555\n")
    now = kernel_log_state.iso_epoch(JOURNAL_NVRM) + 60  # the journal line lies inside the -24h window
    reader = kernel_log_state.KernelLogReader(str(tmp_path / "state"), now=now, boot_id_file=str(boot))
    inputs, sources = {}, {}
    tools = Tools(journal, dmesg)
    reader.read(tools, "auto", SINCE, inputs, sources)
    incremental = {"journalctl -k -b --since -24h": "journalctl -k -b --since -24h (incremental)",
                   "dmesg (since boot)": "dmesg (since boot, incremental)"}
    assert (sources["kernel_log"], tools.calls) == (incremental.get(source, source), calls)
    assert inputs["kernel_log"] == text  # the kept lines: here every line of the one read is an NVRM line


@pytest.mark.parametrize("journal", [
    journal_denied(),
    journal_denied(stderr="Hint: You are currently not seeing messages from the system.\n"),
    journal_denied(stdout="", stderr="No journal files were opened due to insufficient permissions.\n"),
], ids=["other-users-and-system", "system", "no-files"])
def test_a_journal_that_may_not_read_the_system_journal_did_not_answer(journal):
    # without root: no kernel lines from journalctl, EPERM from dmesg: unavailable, never "no NVRM lines"
    dmesg = Dmesg(dmesg_failed())
    text, source = gpu_health.choose_kernel_log(SINCE, journal, journal.stdout, dmesg)
    assert text == "" and source.startswith("unavailable (journalctl: ")
    assert "insufficient permissions" in source or "not seeing messages from" in source
    assert source.endswith("dmesg exited with rc=1: dmesg: read kernel buffer failed: Operation not permitted)")
    assert dmesg.calls == 1


def test_a_denied_journal_still_falls_back_to_a_readable_dmesg():
    dmesg = Dmesg(dmesg_ok(RING))
    assert gpu_health.choose_kernel_log(SINCE, journal_denied(), "-- No entries --\n", dmesg) == (
        RING, "dmesg (since boot)")


def test_an_unreadable_kernel_log_is_never_ready_and_names_the_fix():
    inputs, sources = {}, {}
    gpu_health._collect_kernel_log(Tools(journal_denied(), dmesg_failed()), "auto", SINCE, inputs, sources)
    assert inputs["kernel_log_error"].startswith("the kernel log cannot be read (unavailable (journalctl: You are "
                                                 "currently not seeing messages from other users and the system.; ")
    assert "Fix: run as root (become: true" in inputs["kernel_log_error"]
    verdict = gpu_health.evaluate(inputs)
    assert verdict["gpu_ready"] is False and inputs["kernel_log_error"] in verdict["reasons"]
    inputs, sources = {}, {}   # a readable, quiet journal is a clean log: no error
    gpu_health._collect_kernel_log(Tools(journal_ok(JOURNAL_NOISE), dmesg_failed()), "auto", SINCE, inputs, sources)
    assert "kernel_log_error" not in inputs
