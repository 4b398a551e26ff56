"""Property-based (fuzz) tests: shared setup.

* the checkout is importable as ``ansible_collections.gpu_native.fleet``
  (as in tests/unit);
* Hypothesis profile ``fuzz`` (the default here): short runs, no deadline
  (no wall-clock limits: effort is measured in executed lines, see
  ``_bounds.py``), derandomised so a run is reproducible;
  ``FUZZ_EXAMPLES=<n>`` raises ``max_examples`` for a long run, and
  ``FUZZ_RANDOM=1`` explores with fresh random seeds (Hypothesis prints how
  to reproduce a failure; ``pytest --hypothesis-seed=<n>`` replays a seed).
"""
import os
import sys

from hypothesis import HealthCheck, Phase, settings

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _link_collection():
    parts = REPO_ROOT.split(os.sep)
    if len(parts) >= 3 and parts[-3] == "ansible_collections":
        base = os.sep.join(parts[:-3])
    else:
        base = os.path.join(REPO_ROOT, ".cache", "collections")
        namespace_dir = os.path.join(base, "ansible_collections", "gpu_native")
        os.makedirs(namespace_dir, exist_ok=True)
        link = os.path.join(namespace_dir, "fleet")
        if not os.path.islink(link) and not os.path.exists(link):
            try:
                os.symlink(REPO_ROOT, link)
            except FileExistsError:
                pass
    if base not in sys.path:
        sys.path.insert(0, base)
    # this folder (_bounds.py) and the unit tests' fixture helpers (gpu_fixtures.py)
    for path in (os.path.dirname(__file__), os.path.join(REPO_ROOT, "tests", "unit", "plugins", "module_utils", "gpu")):
        if path not in sys.path:
            sys.path.insert(0, path)


_link_collection()

settings.register_profile(
    "fuzz",
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")),
    deadline=None,
    derandomize=not os.environ.get("FUZZ_RANDOM"),
    database=None,
    print_blob=True,
    # the tracer in _bounds.py and Hypothesis's explain phase both want sys.settrace
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fuzz"))
