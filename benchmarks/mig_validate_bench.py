# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark: validate every config of a 1,000-layout mig-parted document.

Builds a document of 1,000 configs (each a realistic mix: three per-model
entries with device-filters, an H100 entry for an index list and one with MIG
off; about 5% of the layouts do not fit) for an 8-GPU H100 node and times ``mplan.evaluate`` over all of it, the way
``gpu_native.fleet.mig_config`` validates it (fresh placement cache per run).

It reports a ratio against a baseline measured in the same run on the same
document: a JSON round trip of the document (what merely reading the config
costs), so the figure does not depend on the machine's speed.  The absolute
time is printed too; the goal is well under a second.

    .venv/bin/python benchmarks/mig_validate_bench.py [--configs 1000] [--repeat 5]
"""
import argparse
import json
import os
import random
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, ".cache", "collections"))
if not os.path.isdir(os.path.join(REPO, ".cache", "collections", "ansible_collections", "gpu_native", "fleet")):
    sys.exit("Run `make collection-link` first (links the checkout as ansible_collections/gpu_native/fleet).")

from ansible_collections.gpu_native.fleet.plugins.module_utils.mig import mig_placement as mpl  # noqa: E402
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig import mig_plan as mplan  # noqa: E402
from ansible_collections.gpu_native.fleet.plugins.module_utils.mig.mig_geometry import GEOMETRY  # noqa: E402


def random_layout(rng, model, invalid_share=0.05):
    """A random layout for ``model``: feasible, except for about ``invalid_share`` of them (as in real files)."""
    profiles = sorted(GEOMETRY[model]["profiles"])
    want_valid = rng.random() >= invalid_share
    while True:
        layout = {}
        for name in rng.sample(profiles, rng.randint(1, 3)):
            layout[name] = rng.randint(0, 3)
        if not any(layout.values()):
            continue
        feasible = mpl.find_placement(layout, GEOMETRY[model])[0] is not None
        if feasible == want_valid:
            return layout


def build_document(count, seed=20261130):
    rng = random.Random(seed)
    models = sorted(m for m in GEOMETRY if m != "H100-80GB")  # the node's own GPUs get the last two entries
    configs = {}
    for number in range(count):
        entries = []
        for model in rng.sample(models, 3):
            layout = random_layout(rng, model)
            entries.append({"device-filter": GEOMETRY[model]["device_ids"][:2], "devices": "all",
                            "mig-enabled": True, "mig-devices": layout})
        split = rng.randint(1, 7)
        entries.append({"devices": list(range(split)), "mig-enabled": True,
                        "mig-devices": random_layout(rng, "H100-80GB"), "device-filter": "0x233010DE"})
        entries.append({"devices": list(range(split, 8)), "mig-enabled": False, "device-filter": "0x233010DE"})
        configs["layout-%04d" % number] = entries
    return {"version": "v1", "mig-configs": configs}


def timed(function, repeat):
    best = None
    for _attempt in range(repeat):
        start = time.perf_counter()
        result = function()
        elapsed = time.perf_counter() - start
        best = elapsed if best is None else min(best, elapsed)
    return best, result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--configs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    document = build_document(args.configs)
    gpus, errors = mpl.resolve_gpus([{"index": i, "device_id": "0x233010DE"} for i in range(8)])
    assert not errors

    baseline, _round_trip = timed(lambda: json.loads(json.dumps(document)), args.repeat)
    validate, result = timed(
        lambda: mplan.evaluate(document, gpus, cache=mpl.PlacementCache(GEOMETRY)), args.repeat)
    valid = sum(1 for c in result["configs"].values() if c["valid"])
    total = len(result["configs"])
    print("configs validated:        %d (%d valid, %d invalid), 8 GPUs" % (total, valid, total - valid))
    print("baseline (JSON round trip of the document): %.4f s" % baseline)
    print("validate every config:                      %.4f s" % validate)
    print("ratio validate / baseline:                  %.1f" % (validate / baseline))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print("goal: well under 1 s -> %s (load average %.1f on %d CPUs; the ratio is the comparable figure)"
          % ("met" if validate < 1.0 else "NOT met", load, os.cpu_count() or 1))


if __name__ == "__main__":
    main()
