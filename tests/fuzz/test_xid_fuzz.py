# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property tests of the Xid kernel-log parser and verdict (hypothesis).

* any text: parse_kernel_log never raises, evaluate raises nothing but GpuHealthError;
* Xid lines built from NVRM fragments (the shapes an attacker or a broken log would
  produce): the judgement is always one of the collection's actions;
* the real lines of fixture 07 give the same events whatever the prefix style.

Inputs are bounded in size (max_size), so each example's cost is bounded by the
parser's own input limits; no test measures time.
"""
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import gpu_health as gh
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import xid

from gpu_fixtures import text

#: The entry points this file fuzzes (tests/fuzz/test_fuzz_targets.py).
FUZZ_TARGETS = ("gpu_health",)

FRAGMENTS = [
    "NVRM: Xid (", "PCI:0000:18:00", "): ", "79", "149", "45", "154", ", ", "pid=", "name=", "'<unknown>'",
    "caused by previous Xid ", "Fatal", "Nonfatal", " Link ", "(0x025525c6 0x00000000", "0x", "GPU-I:05", ")",
    "to 0x3 (Drain P2P)", "SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 28", "nvidia-nvswitch0: ", "\n",
    "               NVRM: ", "fallen off the bus", "The NVIDIA GPU 0000:b3:00.0", "[ 12.5] ", "Oct 25 10:00:01 h kernel: ",
    "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  575.57.08", "NVRM: GPU at PCI:0000:18:00: ",
]
PROFILE = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
kernel_text = st.one_of(
    st.text(max_size=4000),
    st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=12), max_size=200).map("".join),
)
ALLOWED = set(xid.ACTIONS)


@PROFILE
@given(kernel_text)
def test_parser_never_raises(log):
    parsed = xid.parse_kernel_log(log)
    for event in parsed["events"]:
        assert isinstance(event["xid"], int) and len(event["raw"]) <= xid.MAX_LINE_CHARS
        assert xid.classify(event["xid"], event["message"]) in ALLOWED


@PROFILE
@given(kernel_text)
def test_evaluate_raises_only_its_own_error(log):
    try:
        result = gh.evaluate({"kernel_log": log})
    except gh.GpuHealthError:
        return
    for event in result["xid_events"]:
        assert event["action"] in ALLOWED


@PROFILE
@given(st.integers(min_value=1, max_value=200), st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=20), max_size=30)
       .map("".join), st.sampled_from([None, "lt_r575", "ge_r575"]))
def test_every_line_judgement_is_an_action(number, message, generation):
    judged = xid.judge_line(number, message, None, generation)
    assert judged["action"] in ALLOWED or (number == 154 and judged["action"] is None)
    if number in range(144, 151):
        assert judged["decode"]["action"] in ALLOWED | {"xid_154_eval"}


def _real_lines():
    lines = []
    for part in ("A", "B", "C", "E", "I", "J", "O"):
        for line in text("07_kernel_xid_lines_real_part.txt", part).splitlines():
            if "NVRM: Xid" in line:
                lines.append(line[line.index("NVRM: Xid"):])
    return lines


REAL = _real_lines()
PREFIXES = ["", "[430954.509105] ", "[Fri Aug 30 11:43:09 2024] ", "Feb 20 01:34:20 localhost kernel: ",
            "2025-01-25T10:34:54.859532+00:00 host kernel: ", "kernel: "]


def _meaning(log):
    return [(e["xid"], e["pci_bus_id"], e["pid"], e["name"], e["message"], xid.classify(e["xid"], e["message"]))
            for e in xid.parse_kernel_log(log)["events"]]


@PROFILE
@given(st.lists(st.sampled_from(REAL), min_size=1, max_size=12), st.sampled_from(PREFIXES), st.sampled_from(["", " ", "\t"]))
def test_real_lines_mean_the_same_in_any_prefix_style(lines, prefix, trailing):
    plain = "\n".join(lines) + "\n"
    styled = "".join(prefix + line + trailing + "\n" for line in lines)
    assert _meaning(styled) == _meaning(plain)
    assert len(_meaning(plain)) == len(lines)
