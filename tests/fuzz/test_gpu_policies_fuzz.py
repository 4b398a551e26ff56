# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property tests for the GPU pod guardrails' filter and the isolation compliance check (issue 26).

* any values for the filter's options (strings, numbers, lists, mappings, CEL-injection attempts): the filter
  gives objects or its own AnsibleFilterError, never another exception; what it gives holds no placeholder, and a
  taint key, label key or RuntimeClass name reaches the CEL only as a quoted string literal;
* any toolkit config text: the isolation check gives pass, fail or error, never an exception, and passes only
  when both settings are exactly the booleans the container_toolkit role writes.

Inputs are bounded (max_size); no test measures time.
"""
import json
import os

import yaml
from ansible.errors import AnsibleFilterError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpu_native.fleet.plugins.filter.gpu_policy_objects import (
    gpu_claim_policy_objects,
    gpu_policy_objects,
)
from ansible_collections.gpu_native.fleet.plugins.module_utils.spec import fleet_compliance as fc

FUZZ_TARGETS = ("gpu_policy_objects", "gpu_claim_policy_objects")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(REPO, "roles", "gpu_policies", "vars", "main.yml"), encoding="utf-8") as _handle:
    _ROLE_VARS = yaml.safe_load(_handle)
    CEL_DATA = _ROLE_VARS["__gpu_policies_cel"]
    CLAIM_CEL = _ROLE_VARS["__gpu_policies_claim_cel"]

NAMEISH = st.one_of(st.text(max_size=30), st.sampled_from(
    ["nvidia.com/gpu", "nvidia.com/*", "accelerator", 'x" || true || "', "a\"b", "nvidia", "gpu-native.io/x",
     "Bad Key", "*", "nvidia.com/mig-*"]))
ANY = st.one_of(st.none(), st.booleans(), st.integers(), NAMEISH, st.lists(NAMEISH, max_size=4),
                st.dictionaries(NAMEISH, NAMEISH, max_size=3))


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({}, optional={
    "engine": st.one_of(ANY, st.sampled_from(["vap", "kyverno", "both"])),
    "runtime_class_name": ANY, "gpu_resources": ANY, "excluded_namespaces": ANY, "gpu_taint_keys": ANY,
    "gpu_node_labels": ANY, "resource_claims_are_gpu": ANY, "refuse_runtime_class_without_gpu": ANY,
    "namespace_match_labels": ANY, "action": ANY, "failure_policy": ANY}))
def test_filter_gives_objects_or_its_own_error(options):
    try:
        objects = gpu_policy_objects(CEL_DATA, **options)
    except AnsibleFilterError as exc:
        assert "\n" not in str(exc) and "Fix:" in str(exc)
        return
    text = json.dumps(objects)
    assert "@" not in text  # no placeholder left (no checked variable may hold "@")
    for key in list(options.get("gpu_taint_keys") or []) + list(options.get("gpu_node_labels") or []):
        assert '"' not in key and "\\" not in key  # only plain keys pass the checks


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({}, optional={
    "engine": st.one_of(ANY, st.sampled_from(["vap", "kyverno", "both"])), "name": ANY,
    "class_namespaces": st.one_of(ANY, st.dictionaries(NAMEISH, st.lists(NAMEISH, max_size=3), max_size=3)),
    "admin_namespaces": ANY, "action": ANY, "failure_policy": ANY}))
def test_claim_filter_gives_objects_or_its_own_error(options):
    """The DRA claim guardrails: objects or the filter's own error; a namespace or class reaches the CEL only as a
    checked name (no quote, no backslash), never as CEL."""
    try:
        objects = gpu_claim_policy_objects(CLAIM_CEL, **options)
    except AnsibleFilterError as exc:
        assert "\n" not in str(exc) and "Fix:" in str(exc)
        return
    assert "@" not in json.dumps(objects)
    classes = options.get("class_namespaces") or {}
    for key, value in classes.items():
        assert '"' not in key and "\\" not in key and all('"' not in ns for ns in value)


@given(st.one_of(st.text(max_size=200), st.lists(st.sampled_from([
    "accept-nvidia-visible-devices-envvar-when-unprivileged = false",
    "accept-nvidia-visible-devices-envvar-when-unprivileged = true",
    "accept-nvidia-visible-devices-as-volume-mounts = true",
    "accept-nvidia-visible-devices-as-volume-mounts = 1",
    "#accept-nvidia-visible-devices-as-volume-mounts = true", "[nvidia-container-cli]", "x = [", "\x00"]),
    max_size=6).map("\n".join)))
def test_isolation_check_never_raises(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("toolkit") / "config.toml"
    path.write_text(text, encoding="utf-8")
    result = fc.check_isolation(str(path))
    assert result["status"] in ("pass", "fail", "error")
    if result["status"] == "pass":
        data = fc.toml_compat.loads(path.read_text(encoding="utf-8"))
        assert data["accept-nvidia-visible-devices-envvar-when-unprivileged"] is False
        assert data["accept-nvidia-visible-devices-as-volume-mounts"] is True
