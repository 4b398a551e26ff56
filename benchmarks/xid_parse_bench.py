# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark: gpu_health's kernel-log judgement on hostile and flooded logs (issue #10 item 3).

Cases: one 660 KB line of "NVRM: Xid (" (took 128 s before the input bounds), an 8 MiB flood of one
NVLink5 Xid 149 line, and 8 MiB of distinct Xid 149 lines (every line decoded).  Each is reported as a
ratio against a baseline measured in the same run on the same text: splitting it into lines and looking
for "NVRM" in each (what merely reading the log costs), so the figure does not depend on the machine.

    .venv/bin/python benchmarks/xid_parse_bench.py [--repeat 3]
"""
import argparse
import os
import random
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, ".cache", "collections"))
if not os.path.isdir(os.path.join(REPO, ".cache", "collections", "ansible_collections", "gpu_native", "fleet")):
    sys.exit("Run `make collection-link` first (links the checkout as ansible_collections/gpu_native/fleet).")

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import gpu_health  # noqa: E402

LINE = "[1.0] NVRM: Xid (PCI:0000:18:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 09 (0x025525c6 0x00000000)\n"


def cases(rng):
    yield "660 KB line of 'NVRM: Xid ('", "NVRM: Xid (" * 60000
    yield "8 MiB flood of one Xid 149 line", LINE * (8 * 1024 * 1024 // len(LINE))
    yield "8 MiB of distinct Xid 149 lines", "".join(
        "[%d.0] NVRM: Xid (PCI:0000:%02x:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 09 (0x%08x 0x%08x)\n"
        % (i, i % 256, rng.getrandbits(32), rng.getrandbits(3)) for i in range(85000))


def best(function, repeat):
    times = []
    for _attempt in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    for name, text in cases(random.Random(12)):
        baseline = best(lambda: [line for line in text.splitlines() if "NVRM" in line], options.repeat)
        measured = best(lambda: gpu_health.evaluate({"kernel_log": text}), options.repeat)
        print("%-34s %9.3f s  baseline %7.3f s  ratio %7.1f" % (name, measured, baseline, measured / max(baseline, 1e-6)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
