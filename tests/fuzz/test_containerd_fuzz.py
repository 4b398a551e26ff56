# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property-based tests of the containerd TOML reader, writer and planner (issue #10).

- Any text into ``containerd_config.plan`` raises ``ContainerdConfigError`` or returns a plan, never another
  exception; ``toml_compat.loads`` raises only ``TomlParseError``.
- Valid documents survive ``dumps`` -> ``loads`` unchanged; a planned drop-in and main config parse, and
  ``state=absent`` on the result gives back the original text.
"""
import os
import sys

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings, strategies as st  # noqa: E402

_REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
try:
    from ansible_collections.gpu_native.fleet.plugins.module_utils.containerd import containerd_config as cc
except ImportError:  # a plain checkout: `make collection-link` made .cache/collections
    sys.path.insert(0, os.path.join(_REPO, ".cache", "collections"))
    from ansible_collections.gpu_native.fleet.plugins.module_utils.containerd import containerd_config as cc
from ansible_collections.gpu_native.fleet.plugins.module_utils._common import toml_compat  # noqa: E402

#: The entry points this file fuzzes (tests/fuzz/test_fuzz_targets.py).
FUZZ_TARGETS = ("containerd_runtime",)

FIXTURES = os.path.join(_REPO, "tests", "fixtures", "containerd")
CONFIG = "/etc/containerd/config.toml"
DROP_IN_DIR = "/etc/containerd/conf.d"
DROP_IN = DROP_IN_DIR + "/99-nvidia.toml"
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _fixtures():
    names = sorted(n for n in os.listdir(FIXTURES) if n.endswith(".toml"))
    texts = []
    for name in names:
        with open(os.path.join(FIXTURES, name)) as handle:
            texts.append(handle.read())
    return texts


FIXTURE_TEXTS = _fixtures()
TOML_CHARS = st.sampled_from(list("[]{}=\"'.,#\n\t -_:") + ["\r\n", "version = 2\n", "imports = [", "'io.containerd",
                                                            "\"\"\"", "'''", "\\u0000", "[[", "]]"])
TOML_ISH = st.lists(st.one_of(TOML_CHARS, st.text(max_size=4)), max_size=60).map("".join)


def _plan(text, **kwargs):
    params = dict(config_path=CONFIG, config_text=text, drop_in_dir=DROP_IN_DIR, drop_in_text=None,
                  runtime_name="nvidia", binary_path="/usr/bin/nvidia-container-runtime")
    params.update(kwargs)
    return cc.plan(**params)


def _only_own_error(text, **kwargs):
    try:
        return _plan(text, **kwargs)
    except cc.ContainerdConfigError as exc:
        message = str(exc)
        assert message and "\n" not in message.strip("\n")
        return None


@FUZZ
@given(TOML_ISH)
def test_reader_raises_only_its_own_error(text):
    try:
        toml_compat.loads(text)
    except toml_compat.TomlParseError:
        pass


@FUZZ
@given(st.one_of(TOML_ISH, st.text(max_size=200)), st.sampled_from(["present", "absent"]))
@example("version = 2\nx = " + "[" * 3000 + "]" * 3000 + "\n", "present")
@example("version = 2\nx = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n", "present")
@example("version = 2\n[" + ".".join(["t"] * 100) + "]\n", "present")
def test_planner_raises_only_containerd_config_error(text, state):
    _only_own_error(text, state=state)


@FUZZ
@given(st.sampled_from(FIXTURE_TEXTS), st.integers(min_value=0, max_value=10 ** 6), TOML_ISH,
       st.integers(min_value=0, max_value=20))
def test_mutated_fixtures_raise_only_containerd_config_error(text, position, insert, cut):
    position %= len(text) + 1
    mutated = text[:position] + insert + text[position + cut:]
    result = _only_own_error(mutated, set_as_default=True, enable_cdi=True)
    if result is not None:
        for change in result.files:
            if change.after is not None:
                toml_compat.loads(change.after)  # what would be written always parses


@FUZZ
@given(st.sampled_from(FIXTURE_TEXTS), st.one_of(st.text(max_size=30), st.text(alphabet='\\qu"x0\t', max_size=8)),
       TOML_ISH)
def test_marker_and_drop_in_damage_raise_only_containerd_config_error(text, junk, drop_in):
    damaged = text + '\n# gpu_native.fleet.containerd_runtime: added imports line "%s" (state=absent removes it)\n' % junk
    _only_own_error(damaged, state="absent")
    _only_own_error(text, drop_in_text=drop_in)


KEYS = st.text(min_size=1, max_size=12)
SCALARS = st.one_of(st.booleans(), st.integers(min_value=-2 ** 63, max_value=2 ** 63 - 1),
                    st.floats(allow_nan=False), st.text(max_size=20))
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(KEYS, children, max_size=4)),
    max_leaves=20)
DOCUMENTS = st.dictionaries(KEYS, VALUES, max_size=6)


@FUZZ
@given(DOCUMENTS)
def test_writer_round_trips_valid_documents(document):
    assert toml_compat.loads(toml_compat.dumps(document)) == document


RUNTIME = st.fixed_dictionaries(
    {"runtime_type": st.sampled_from(["io.containerd.runc.v2", "io.containerd.kata.v2", ""])},
    optional={"base_runtime_spec": st.text(max_size=10),
              "privileged_without_host_devices": st.booleans(),
              "pod_annotations": st.lists(st.text(max_size=8), max_size=2),
              "options": st.dictionaries(st.sampled_from(["SystemdCgroup", "BinaryName", "Root"]),
                                         st.one_of(st.booleans(), st.text(max_size=10)), max_size=3)})
RUNTIME_NAMES = st.sampled_from(["runc", "crun", "nvidia", "kata", "nvidia-container-runtime", "x"])


@FUZZ
@given(st.sampled_from([2, 3, 4]), st.dictionaries(RUNTIME_NAMES, RUNTIME, max_size=4),
       st.one_of(st.none(), RUNTIME_NAMES), st.sampled_from([None, True, False]), st.booleans())
def test_generated_configs_plan_round_trip(version, runtimes, default, systemd_cgroup, crlf):
    cri = cc.CRI_PLUGINS[version]
    containerd = {"runtimes": runtimes}
    if default:
        containerd["default_runtime_name"] = default
    document = {"version": version, "plugins": {cri: {"containerd": containerd}}}
    text = toml_compat.dumps(document)
    if crlf:
        text = text.replace("\n", "\r\n")
    result = _plan(text, systemd_cgroup=systemd_cgroup)
    main = [c for c in result.files if c.path == CONFIG][0].after
    drop_in = [c for c in result.files if c.path == DROP_IN][0].after
    if drop_in is None:  # the main config already had the handler as asked
        assert not result.changed and runtimes["nvidia"] == result.handler
        return
    merged = toml_compat.loads(drop_in)
    assert merged["version"] == version
    table = merged["plugins"][cri]["containerd"]["runtimes"]
    for name, entry in runtimes.items():
        if name != "nvidia":
            assert table[name] == entry  # every other runtime survives unchanged
    if "nvidia" in runtimes:
        kept = dict(runtimes["nvidia"], options=dict(runtimes["nvidia"].get("options", {}),
                                                     BinaryName="/usr/bin/nvidia-container-runtime"))
        if systemd_cgroup is not None:
            kept["options"]["SystemdCgroup"] = systemd_cgroup
        assert table["nvidia"] == kept
    elif result.inherited_from is not None:
        source = runtimes[result.inherited_from]
        assert source.get("runtime_type", "io.containerd.runc.v2") in ("io.containerd.runc.v2", "")
    toml_compat.loads(main)
    assert main.count("\n") == main.count("\r\n") or not crlf
    absent = _plan(main, state="absent", drop_in_text=drop_in)
    assert [c for c in absent.files if c.path == CONFIG][0].after == text
