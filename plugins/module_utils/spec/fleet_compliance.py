# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""Node-side compliance checks for one host in one module execution.

Each check calls the collection's own logic (spec_matrix/spec_facts, gpu_health,
containerd_config, the Container Toolkit's isolation settings) and returns its result separately::

    {"check": "spec", "status": "pass"|"fail"|"skip"|"error",
     "expected": str, "actual": str, "items": [...], "parse_ms": float}

Tool runs are cached per execution, so ``nvidia-smi -q -x`` runs once even
though the spec facts and the GPU health check both read it.
Standard library only, Python 3.8+.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import re
import time

from ansible_collections.gpu_native.fleet.plugins.module_utils.containerd import containerd_config
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.gpu_health import GpuHealthError, collect, evaluate
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.bounded_int import IntegerParseError, parse_int
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.node_tools import NodeTools
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.regular_file import read_regular
from ansible_collections.gpu_native.fleet.plugins.module_utils._common import toml_compat
from ansible_collections.gpu_native.fleet.plugins.module_utils.spec.compliance_checks import NODE_CHECKS
from ansible_collections.gpu_native.fleet.plugins.module_utils.spec.spec_facts import NodeFacts
from ansible_collections.gpu_native.fleet.plugins.module_utils.spec.spec_matrix import (
    ProfileSelectionError, SpecMatrixError, drift_line, judge_profile, select_profile, summarize, validate_matrix)
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.xid import XidCatalogError

# The node checks, in the order they run and are reported (module_utils/spec/compliance_checks.py, the one list).
CHECKS = NODE_CHECKS
STATUSES = ("pass", "fail", "error", "skip", "unreachable")
READINESS_METRIC = "gpu_native_node_validation_last_success_ts_seconds"
# The agent's textfile is small; refuse to read more than this.
TEXTFILE_MAX_BYTES = 1024 * 1024
#: A last success at most this far in the future still passes (the agent and this check share the node's clock).
READINESS_FUTURE_SLACK_S = 60
#: The readiness timestamp: whole seconds (the agent writes ``%d``), optionally with a fraction.
_TIMESTAMP_RE = re.compile(r"^([0-9]{1,12})(?:\.[0-9]{1,9})?$")
#: The NVIDIA Container Toolkit's own config file and the GPU isolation settings the container_toolkit role
#: writes there (top-level keys): NVIDIA/nvidia-container-toolkit internal/config/config.go, type Config,
#: AcceptEnvvarUnprivileged (default true) and AcceptDeviceListAsVolumeMounts (default false), the same at
#: v1.17.0, v1.17.8, v1.18.0 and v1.18.1; the file is /etc + nvidia-container-runtime/config.toml.
TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
TOOLKIT_ISOLATION = (
    ("accept-nvidia-visible-devices-envvar-when-unprivileged", False, True),
    ("accept-nvidia-visible-devices-as-volume-mounts", True, False),
)  # (key, required value, the toolkit's default when the key is absent)
TOOLKIT_CONFIG_MAX_BYTES = 1024 * 1024
_METRIC_RE = re.compile(r"^" + READINESS_METRIC + r"(?:\{[^}]*\})?\s+(\S+)(?:\s+\d+)?\s*$")


class CachedTools(NodeTools):
    """The shared runner, running each command line once per execution (spec and gpu_health both read
    ``nvidia-smi -q -x``); ``runs`` and ``tool_ms`` say what the tools cost."""

    def __init__(self, **kwargs):
        NodeTools.__init__(self, **kwargs)
        self._cache = {}
        self.runs = 0
        self.tool_ms = 0.0

    def run(self, tool, args, capture_key=None, timeout=None, env_update=None):
        key = (tool, tuple(args))
        if key not in self._cache:
            self.runs += 1
            started = time.time()
            self._cache[key] = NodeTools.run(self, tool, args, capture_key=capture_key, timeout=timeout,
                                             env_update=env_update)
            self.tool_ms += (time.time() - started) * 1000.0
        return self._cache[key]


def _result(check, status, expected=None, actual=None, items=None):
    return {"check": check, "status": status, "expected": expected, "actual": actual, "items": items or []}


def check_spec(matrix, profile, facts):
    """spec_matrix against the host's profile; failing items listed one by one."""
    try:
        matrix = validate_matrix(matrix)
        name, how = select_profile(matrix, facts, profile)
    except (SpecMatrixError, ProfileSelectionError) as exc:
        return _result("spec", "error", "a valid matrix and profile", str(exc))
    results = judge_profile(matrix, name, facts)
    summary = summarize(results)
    bad = [item for item in results if item["status"] != "pass"]
    status = "pass" if not bad else "fail"
    expected = "profile %s (%s): %d item(s) compliant" % (name, how, summary["total"])
    actual = "%d pass, %d fail, %d unknown" % (summary["pass"], summary["fail"], summary["unknown"])
    if bad:
        actual += ": " + "; ".join(drift_line(item) for item in bad)
    return _result("spec", status, expected, actual, bad)


def check_gpu_health(tools, params):
    """gpu_health's verdict; the device-plugin count joins when given."""
    try:
        inputs, _sources = collect(
            tools, kernel_log=params.get("kernel_log") or "auto", xid_since=params.get("xid_since") or "24h",
            sysfs_root=params.get("pci_sysfs_root") or "/sys/bus/pci/devices")
        if params.get("device_plugin_count") is not None:
            inputs["device_plugin_count"] = params["device_plugin_count"]
        verdict = evaluate(inputs, expected_gpus=params.get("expected_gpus"),
                           xid_actions=params.get("xid_actions") or {})
    except (GpuHealthError, XidCatalogError) as exc:
        return _result("gpu_health", "error", "gpu_ready", str(exc))
    if inputs.get("kernel_log_error"):
        # Not a pass and not a drift: the check could not see what it judges (the Xids in the kernel log).
        return _result("gpu_health", "error", "gpu_ready with a readable kernel log", inputs["kernel_log_error"])
    expected = "gpu_ready"
    if params.get("expected_gpus") is not None:
        expected += " with %d GPU(s)" % params["expected_gpus"]
    if verdict.get("gpu_ready"):
        return _result("gpu_health", "pass", expected, "gpu_ready (%s GPU(s))" % verdict.get("nvidia_smi_gpu_count"))
    reasons = list(verdict.get("reasons") or [])
    return _result("gpu_health", "fail", expected, "not ready: " + "; ".join(reasons), reasons)


def check_containerd(tools, runtime_name, binary):
    """``containerd config dump`` registers the runtime with the expected BinaryName."""
    expected = "runtime %s with BinaryName %s" % (runtime_name, binary)
    result = tools.run("containerd", ["config", "dump"])
    if not result.ok:
        return _result("containerd", "fail", expected, "containerd config dump: %s" % result.message)
    out = result.stdout
    try:
        data = containerd_config.parse(out, "containerd config dump")
        version = containerd_config.detect_version(data, "containerd config dump")
    except containerd_config.ContainerdConfigError as exc:
        return _result("containerd", "error", expected, str(exc))
    path = ("plugins", containerd_config.cri_plugin_name(version), "containerd", "runtimes", runtime_name)
    entry = containerd_config._get(data, path)  # pylint: disable=protected-access
    if not isinstance(entry, dict):
        return _result("containerd", "fail", expected, "runtime %s is not registered (%s)"
                       % (runtime_name, ".".join(path)))
    actual_binary = containerd_config._get(entry, ("options", "BinaryName"))  # pylint: disable=protected-access
    actual = "runtime %s with BinaryName %s" % (runtime_name, actual_binary)
    return _result("containerd", "pass" if actual_binary == binary else "fail", expected, actual)


class ReadinessTextfileError(FleetError):
    """The readiness textfile holds a value that is not a Unix time."""


def _timestamp(text):
    """A metric value as whole Unix seconds: ASCII digits, an optional fraction; ``+Inf``, ``NaN``, ``1e9`` refused."""
    match = _TIMESTAMP_RE.match(text)
    if not match:
        raise ReadinessTextfileError("the value %r of %s is not a Unix time in seconds" % (text[:40], READINESS_METRIC))
    try:
        return parse_int(match.group(1), READINESS_METRIC, max_digits=12)
    except IntegerParseError as exc:  # pragma: no cover - the pattern already bounds it
        raise ReadinessTextfileError(str(exc))


def parse_last_success(text):
    """The newest value of the readiness metric in a textfile (whole seconds), or None.

    A value that is not a Unix time raises :class:`ReadinessTextfileError`.
    """
    newest = None
    for line in text.splitlines():
        match = _METRIC_RE.match(line.strip())
        if match:
            value = _timestamp(match.group(1))
            if newest is None or value > newest:
                newest = value
    return newest


def check_readiness(path, max_age, now=None):
    """The readiness agent's last successful validation is at most ``max_age`` seconds old (and not in the future)."""
    now = time.time() if now is None else now
    expected = "%s at most %ds old in %s" % (READINESS_METRIC, max_age, path)
    try:
        text = read_regular(path, TEXTFILE_MAX_BYTES)
    except (IOError, OSError) as exc:
        return _result("readiness", "fail", expected, "textfile unreadable: %s" % (exc.strerror or exc))
    if len(text) > TEXTFILE_MAX_BYTES:
        return _result("readiness", "error", expected, "textfile larger than %d bytes" % TEXTFILE_MAX_BYTES)
    try:
        value = parse_last_success(text.decode("utf-8", "replace"))
    except ReadinessTextfileError as exc:
        return _result("readiness", "error", expected, "%s. Fix: let the gpu_readiness agent rewrite the textfile "
                                                       "(it writes whole seconds)" % exc)
    if value is None:
        return _result("readiness", "fail", expected, "metric absent (no successful validation recorded)")
    age = int(now) - value
    if age < -READINESS_FUTURE_SLACK_S:
        return _result("readiness", "fail", expected, "last success %ds in the future: the node's clock was "
                                                      "set back or the textfile was not written by the agent" % -age)
    actual = "last success %ds ago" % max(age, 0)
    return _result("readiness", "pass" if age <= max_age else "fail", expected, actual)


def check_isolation(path):
    """The toolkit's config file still carries the two GPU isolation settings (read-only, bounded, regular file)."""
    expected = ", ".join("%s = %s" % (key, str(value).lower()) for key, value, _default in TOOLKIT_ISOLATION)
    expected += " in %s" % path
    try:
        raw = read_regular(path, TOOLKIT_CONFIG_MAX_BYTES)
    except (IOError, OSError) as exc:
        if getattr(exc, "errno", None) == errno.ENOENT:
            return _result("isolation", "fail", expected, "%s is missing: the toolkit's defaults apply (an unprivileged "
                                                          "container gets GPUs from NVIDIA_VISIBLE_DEVICES). Fix: run "
                                                          "the container_toolkit role" % path)
        return _result("isolation", "error", expected, "%s unreadable: %s" % (path, exc.strerror or exc))
    if len(raw) > TOOLKIT_CONFIG_MAX_BYTES:
        return _result("isolation", "error", expected, "%s is larger than %d bytes" % (path, TOOLKIT_CONFIG_MAX_BYTES))
    try:
        data = toml_compat.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return _result("isolation", "error", expected, "%s is not UTF-8 text" % path)
    except (toml_compat.TomlParseError, toml_compat.TomlUnavailableError) as exc:
        return _result("isolation", "error", expected, "%s: %s" % (path, exc))
    wrong, actual = [], []
    for key, required, default in TOOLKIT_ISOLATION:
        if key not in data:
            actual.append("%s absent (the toolkit's default %s applies)" % (key, str(default).lower()))
            if default is not required:
                wrong.append("%s is absent: the toolkit's default %s applies" % (key, str(default).lower()))
            continue
        value = data[key]
        shown = str(value).lower() if isinstance(value, bool) else repr(value)[:40]
        actual.append("%s = %s" % (key, shown))
        if value is not required:
            wrong.append("%s = %s" % (key, shown))
    if wrong:
        return _result("isolation", "fail", expected, "; ".join(actual) + ". Fix: run the container_toolkit role "
                                                                          "(its isolation settings)", wrong)
    return _result("isolation", "pass", expected, ", ".join(actual))


def tools_for(params):
    """The runner for one execution, with the binaries the options name."""
    paths = {}
    for option, tool in (("nvidia_smi", "nvidia-smi"), ("lspci", "lspci"), ("containerd", "containerd")):
        if params.get(option):
            paths[tool] = params[option]
    return CachedTools(paths=paths, timeout=params.get("command_timeout"))


def run_checks(params, tools=None, now=None):
    """Run the selected checks; returns ``{compliant, checks, tool_runs}``.

    ``params``: the module's options (see plugins/modules/node_compliance.py); ``tools``: a
    :class:`CachedTools` (tests inject one with a fake runner).
    """
    runner = tools if tools is not None else tools_for(params)
    wanted = params.get("checks") or list(CHECKS)
    checks = []
    for name in CHECKS:
        started, tool_before = time.time(), runner.tool_ms
        _one_check(name, wanted, params, runner, now, checks)
        if checks[-1]["status"] != "skip":
            tool_ms = runner.tool_ms - tool_before
            checks[-1]["tool_ms"] = round(tool_ms, 3)
            checks[-1]["parse_ms"] = round((time.time() - started) * 1000.0 - tool_ms, 3)
    compliant = all(item["status"] in ("pass", "skip") for item in checks)
    return {"compliant": compliant, "checks": checks, "tool_runs": runner.runs}


def _one_check(name, wanted, params, runner, now, checks):
    """Append the result of check ``name`` to ``checks``."""
    if name not in wanted:
        checks.append(_result(name, "skip", actual="not selected"))
        return
    if name == "spec":
        if not params.get("matrix"):
            checks.append(_result("spec", "skip", actual="no spec matrix given"))
            return
        facts = NodeFacts(root=params.get("spec_root") or "/", tools=runner)
        checks.append(check_spec(params["matrix"], params.get("profile"), facts))
    elif name == "gpu_health":
        checks.append(check_gpu_health(runner, params))
    elif name == "containerd":
        checks.append(check_containerd(runner, params.get("runtime_name") or "nvidia",
                                       params.get("runtime_binary") or containerd_config.DEFAULT_BINARY))
    elif name == "readiness":
        path = params.get("readiness_textfile")
        if not path:
            checks.append(_result("readiness", "skip", actual="no readiness textfile given"))
            return
        max_age = params.get("readiness_max_age")
        checks.append(check_readiness(path, 600 if max_age is None else int(max_age), now))
    elif name == "isolation":
        checks.append(check_isolation(params.get("toolkit_config") or TOOLKIT_CONFIG))
