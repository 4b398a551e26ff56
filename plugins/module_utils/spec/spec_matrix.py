# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""The standard spec matrix: schema, profile selection, judging, compatibility.

Entry points::

    matrix = validate_matrix(user_dict)          # raises SpecMatrixError
    name, how = select_profile(matrix, facts, requested=None)
    results = judge_profile(matrix, name, facts) # list of result dicts
    summary = summarize(results)
    row = find_compatibility_row(table, kubernetes_version)

``facts`` is a :class:`spec_facts.NodeFacts`.  Each result is
``{check, name, expected, actual, status, note}`` with ``status`` one of
``pass``, ``fail``, ``unknown``.  The shipped compatibility table,
:data:`DEFAULT_COMPATIBILITY`, is data: a matrix's ``compatibility`` list
replaces it and ``compatibility_extra`` rows are consulted before it.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils.spec.spec_facts import sysctl_relative_path, unit_name
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.versions import (
    ConstraintError,
    Version,
    VersionError,
    parse_constraint,
)

MATRIX_VERSION = 1

#: Kubernetes / NVIDIA version compatibility.  Rows are tried in order; the
#: first whose ``kubernetes`` constraint holds for the node's kubelet applies.
#:
#: Sources, per column:
#:
#: * device_plugin: the NVIDIA k8s-device-plugin README ("Prerequisites":
#:   Kubernetes >= 1.10; "Versioning": with Kubernetes >= 1.10 any plugin
#:   version > v0.0.0 can be deployed, the v1beta1 device plugin API).  The
#:   plugin states no Kubernetes ceiling, so no row caps the plugin; the
#:   floors are the operator's guide's (March 2026).  The collection's own
#:   device_plugin_config default (sharedDevicesAllocationPolicy: packed)
#:   needs plugin >= 0.20.0, which every row admits.
#: * driver, container_toolkit: the operator's guide (March 2026) for 1.31 to
#:   1.33.  For 1.34 and 1.35 no NVIDIA statement ties these to a Kubernetes
#:   release: the 1.33 floors are carried forward, and the row's ``source``
#:   says so.
DEFAULT_COMPATIBILITY = [
    {"kubernetes": "1.35", "device_plugin": ">=0.17", "driver": ">=550", "container_toolkit": ">=1.17",
     "source": "device plugin: k8s-device-plugin README (Kubernetes >= 1.10, no ceiling); driver and toolkit: "
               "1.33 floors carried forward (no NVIDIA statement per Kubernetes release)"},
    {"kubernetes": "1.34", "device_plugin": ">=0.17", "driver": ">=550", "container_toolkit": ">=1.17",
     "source": "device plugin: k8s-device-plugin README (Kubernetes >= 1.10, no ceiling); driver and toolkit: "
               "1.33 floors carried forward (no NVIDIA statement per Kubernetes release)"},
    {"kubernetes": "1.33", "device_plugin": ">=0.17", "driver": ">=550", "container_toolkit": ">=1.17",
     "source": "operator's guide, March 2026; device plugin ceiling dropped per k8s-device-plugin README"},
    {"kubernetes": "1.32", "device_plugin": ">=0.16", "driver": ">=535", "container_toolkit": ">=1.16",
     "source": "operator's guide, March 2026; device plugin ceiling dropped per k8s-device-plugin README"},
    {"kubernetes": "1.31", "device_plugin": ">=0.15", "driver": ">=535", "container_toolkit": ">=1.15",
     "source": "operator's guide, March 2026; device plugin ceiling dropped per k8s-device-plugin README"},
]

#: Order in which sections are judged and reported.
SECTION_ORDER = (
    "os", "kernel", "driver", "cuda", "container_toolkit", "containerd", "kubernetes",
    "kernel_modules", "sysctl", "packages", "services", "gpu",
)

_VERSION_SECTION_KEYS = {
    "os": ("id", "version", "codename"),
    "kernel": ("release",),
    "driver": ("version",),
    "cuda": ("version",),
    "container_toolkit": ("version",),
    "containerd": ("version",),
    "device_plugin": ("version",),
    "kubernetes": ("version", "compatibility"),
    "gpu": ("count", "product", "persistence_mode", "ecc_mode", "mig_mode", "memory_total_mib"),
}
#: What each profile value is compared with (``versions.parse_constraint``'s ``kind``);
#: anything not listed is ``text``.
FIELD_KINDS = {
    ("os", "version"): "version",
    ("kernel", "release"): "version",
    ("driver", "version"): "version",
    ("cuda", "version"): "version",
    ("container_toolkit", "version"): "version",
    ("containerd", "version"): "version",
    ("device_plugin", "version"): "version",
    ("kubernetes", "version"): "version",
    ("gpu", "count"): "count",
    ("gpu", "memory_total_mib"): "count",
    ("match", "gpu_count"): "count",
    ("match", "os_version"): "version",
}
PROFILE_KEYS = ("description", "match") + tuple(_VERSION_SECTION_KEYS) + ("kernel_modules", "sysctl", "packages",
                                                                          "services")
MATCH_KEYS = ("gpu_product", "gpu_count", "os_id", "os_version", "hostname")
MATRIX_KEYS = ("version", "profiles", "compatibility", "compatibility_extra")
COMPATIBILITY_KEYS = ("kubernetes", "device_plugin", "driver", "container_toolkit", "containerd", "cuda", "source")
COMPATIBILITY_COMPONENTS = ("driver", "container_toolkit", "containerd", "cuda", "device_plugin")
GPU_MODE_KEYS = ("persistence_mode", "ecc_mode", "mig_mode")
GPU_MODES = ("enabled", "disabled")
SERVICE_STATES = ("running", "stopped", "enabled", "disabled", "masked", "present", "absent")
PACKAGE_STATES = ("present", "absent")
_ENABLED_FILE_STATES = ("enabled", "enabled-runtime", "alias", "static", "indirect", "generated")


class SpecMatrixError(FleetError, ValueError):
    """The matrix is invalid; ``errors`` lists ``"path: reason"`` strings."""

    def __init__(self, errors):
        self.errors = list(errors)
        super(SpecMatrixError, self).__init__("; ".join(self.errors))


class ProfileSelectionError(FleetError, ValueError):
    """No profile could be chosen for this node."""


def _type_name(value):
    return {dict: "mapping", list: "list", str: "string", bool: "boolean", int: "integer",
            float: "number", type(None): "null"}.get(type(value), type(value).__name__)


def key_path(path, key):
    """``path.key`` for error messages; odd keys (empty, control characters, not text) as ``path[repr]``.

    A key is cut to 80 characters so a hostile key cannot flood the message.
    """
    if isinstance(key, str) and key and key.isprintable() and not any(c.isspace() for c in key):
        text = "%s.%s" % (path, key) if path else key
    elif isinstance(key, int) and not isinstance(key, bool):
        text = "%s.%d" % (path, key) if path else str(key)
    else:
        text = "%s[%r]" % (path, key)
    return text if len(text) <= 200 else text[:197] + "..."


class _Validator:
    def __init__(self):
        self.errors = []

    def error(self, path, reason):
        self.errors.append("%s: %s" % (path, reason))

    def mapping(self, value, path, allowed=None):
        if not isinstance(value, dict):
            self.error(path or "matrix", "expected a mapping, got %s" % _type_name(value))
            return {}
        if allowed is not None:
            for key in value:
                if key not in allowed:
                    self.error(key_path(path, key),
                               "unknown key; allowed: %s" % ", ".join(allowed))
        return value

    def constraint(self, value, path, kind="text"):
        if isinstance(value, float):
            # YAML reads an unquoted 12.10 as 12.1: refuse rather than compare the wrong version.
            self.error(path, "%r is a YAML number, not text; quote it (\"%s\") so it is compared as written"
                       % (value, value))
            return None
        try:
            return parse_constraint(value, path, kind)
        except ConstraintError as exc:
            self.errors.append("%s: %s" % (path, exc))
            return None

    def name_list(self, value, path):
        if not isinstance(value, list) or not all(isinstance(item, str) and item.strip() for item in value):
            self.error(path, "expected a list of names, got %s" % _type_name(value))
            return []
        return [item.strip() for item in value]


def validate_matrix(matrix):
    """Validate a user matrix; return a normalised copy with parsed constraints.

    Raises :class:`SpecMatrixError` listing every problem with its path, e.g.
    ``profiles.h100-serving.sysctl_typo: unknown key; allowed: ...``.
    The returned dict has ``profiles`` (name -> normalised profile, in the
    user's order) and ``compatibility`` (the effective table, rows with
    parsed constraints under ``constraints``).
    """
    check = _Validator()
    top = check.mapping(matrix, "", MATRIX_KEYS)
    if "version" in top and str(top["version"]) != str(MATRIX_VERSION):
        check.error("version", "unsupported matrix version %r; this collection reads version %d"
                    % (top["version"], MATRIX_VERSION))
    profiles = {}
    raw_profiles = top.get("profiles")
    if raw_profiles is not None:
        for name, profile in check.mapping(raw_profiles, "profiles").items():
            profiles[str(name)] = _validate_profile(check, profile, key_path("profiles", name))
    table = []
    for key in ("compatibility_extra", "compatibility"):
        if key not in top:
            continue
        rows = top[key]
        if not isinstance(rows, list):
            check.error(key, "expected a list of rows, got %s" % _type_name(rows))
            continue
        for index, row in enumerate(rows):
            parsed = _validate_row(check, row, "%s[%d]" % (key, index))
            if parsed is not None:
                table.append(parsed)
    if "compatibility" not in top:
        for index, row in enumerate(DEFAULT_COMPATIBILITY):
            table.append(_validate_row(check, row, "default_compatibility[%d]" % index))
    if check.errors:
        raise SpecMatrixError(check.errors)
    return {"profiles": profiles, "compatibility": table}


def _validate_row(check, row, path):
    if isinstance(row, dict) and not row:
        check.error(path, "empty row; a row needs at least `kubernetes`")
        return None
    row = check.mapping(row, path, COMPATIBILITY_KEYS)
    if not row:
        return None
    if "kubernetes" not in row:
        check.error(path, "missing required key `kubernetes`")
    constraints = {}
    for key in COMPATIBILITY_KEYS:
        if key == "source" or key not in row:
            continue
        constraints[key] = check.constraint(row[key], "%s.%s" % (path, key), "version")
    source = row.get("source")
    if source is not None and not isinstance(source, str):
        check.error("%s.source" % path, "expected a string, got %s" % _type_name(source))
    return {"row": dict(row), "constraints": constraints}


def _validate_profile(check, profile, path):
    profile = check.mapping(profile, path, PROFILE_KEYS)
    result = {}
    if "description" in profile and not isinstance(profile["description"], str):
        check.error(path + ".description", "expected a string, got %s" % _type_name(profile["description"]))
    if "match" in profile:
        match = check.mapping(profile["match"], path + ".match", MATCH_KEYS)
        if isinstance(profile["match"], dict) and not profile["match"]:
            check.error(path + ".match", "empty match; remove it or name at least one of %s" % ", ".join(MATCH_KEYS))
        result["match"] = dict(
            (key, check.constraint(value, "%s.match.%s" % (path, key), FIELD_KINDS.get(("match", key), "text")))
            for key, value in match.items() if key in MATCH_KEYS)
    for section, keys in _VERSION_SECTION_KEYS.items():
        if section not in profile:
            continue
        where = "%s.%s" % (path, section)
        body = check.mapping(profile[section], where, keys)
        parsed = {}
        for key, value in body.items():
            if key not in keys:
                continue
            if section == "kubernetes" and key == "compatibility":
                if not isinstance(value, bool):
                    check.error(where + ".compatibility", "expected true or false, got %s" % _type_name(value))
                parsed[key] = value
                continue
            if section == "gpu" and key in GPU_MODE_KEYS:
                value = _mode_value(check, value, "%s.%s" % (where, key))
                if value is None:
                    continue
            parsed[key] = check.constraint(value, "%s.%s" % (where, key), FIELD_KINDS.get((section, key), "text"))
        result[section] = parsed
    if "kernel_modules" in profile:
        where = path + ".kernel_modules"
        body = check.mapping(profile["kernel_modules"], where, ("loaded", "absent"))
        modules = {"loaded": [], "absent": []}
        for key in ("loaded", "absent"):
            if key in body:
                modules[key] = check.name_list(body[key], "%s.%s" % (where, key))
        both = set(_module_key(m) for m in modules["loaded"]) & set(_module_key(m) for m in modules["absent"])
        for name in sorted(both):
            check.error(where, "module %s is listed both as loaded and as absent" % name)
        result["kernel_modules"] = modules
    if "sysctl" in profile:
        where = path + ".sysctl"
        body = check.mapping(profile["sysctl"], where)
        sysctl = {}
        for key, value in body.items():
            try:
                sysctl_relative_path(key)
            except ValueError as exc:
                check.error(key_path(where, key),
                            "%s. Fix: name a sysctl as sysctl(8) does (vm.max_map_count)" % exc)
                continue
            sysctl[key] = check.constraint(value, key_path(where, key))
        result["sysctl"] = sysctl
    if "packages" in profile:
        where = path + ".packages"
        body = check.mapping(profile["packages"], where)
        packages = {}
        for key, value in body.items():
            if isinstance(value, str) and value.strip() in PACKAGE_STATES:
                packages[str(key)] = value.strip()
            else:
                constraint = check.constraint(value, key_path(where, key), "version")
                if constraint is not None and _has_v_prefix(constraint):
                    check.error(key_path(where, key), "package versions have no 'v' prefix (%s); the package "
                                "manager would compare the 'v' as a letter. Fix: drop the 'v'" % constraint.text)
                    continue
                packages[str(key)] = constraint
        result["packages"] = packages
    if "services" in profile:
        where = path + ".services"
        body = check.mapping(profile["services"], where)
        services = {}
        for key, value in body.items():
            states = value if isinstance(value, list) else [value]
            bad = [s for s in states if not isinstance(s, str) or s.strip() not in SERVICE_STATES]
            if bad or not states:
                check.error(key_path(where, key), "unknown service state %r; use one of %s (or a list of them)"
                            % (value, ", ".join(SERVICE_STATES)))
                continue
            states = [s.strip() for s in states]
            for first, second in (("running", "stopped"), ("enabled", "disabled"), ("present", "absent")):
                if first in states and second in states:
                    check.error(key_path(where, key), "states %s and %s contradict each other" % (first, second))
            services[str(key)] = states
        result["services"] = services
    return result


def _has_v_prefix(constraint):
    if constraint.kind == "exact" and isinstance(constraint.value, str):
        texts = [constraint.value]
    else:
        texts = [version.original for dummy, version in constraint.comparisons]
    return any(text[:1] in ("v", "V") and text[1:2].isdigit() for text in texts)


def _mode_value(check, value, path):
    if isinstance(value, bool):
        return "enabled" if value else "disabled"
    if isinstance(value, str) and value.strip().lower() in GPU_MODES:
        return value.strip().lower()
    check.error(path, "expected enabled or disabled, got %r" % (value,))
    return None


def _module_key(name):
    return name.replace("-", "_")


# ---- profile selection ------------------------------------------------------
def _match_actual(key, facts):
    if key == "gpu_product":
        return [gpu.get("product") for gpu in facts.gpu()["gpus"]]
    if key == "gpu_count":
        return facts.gpu()["count"]
    if key == "os_id":
        return (facts.os_release() or {}).get("id")
    if key == "os_version":
        return (facts.os_release() or {}).get("version_id")
    return facts.hostname()


def profile_matches(match, facts):
    """True when every ``match`` constraint holds (gpu_product: any GPU)."""
    for key, constraint in match.items():
        actual = _match_actual(key, facts)
        if isinstance(actual, list):
            if not any(constraint.matches(value) for value in actual):
                return False
        elif not constraint.matches(actual):
            return False
    return True


def select_profile(matrix, facts, requested=None):
    """Choose the profile for this node.

    Order: the ``requested`` name; else the first profile (in matrix order)
    whose ``match`` holds; else the only profile without ``match``.
    Returns ``(name, how)`` where ``how`` is ``requested``, ``match`` or
    ``default``.  Raises :class:`ProfileSelectionError` otherwise.
    """
    profiles = matrix["profiles"]
    if not profiles:
        raise ProfileSelectionError(
            "the matrix has no profiles. Fix: add at least one entry under gpu_native_spec_matrix.profiles")
    if requested:
        if requested not in profiles:
            raise ProfileSelectionError("profile %r is not in the matrix (profiles: %s). Fix: pass one of those "
                                        "names as profile" % (requested, ", ".join(profiles)))
        return requested, "requested"
    for name, profile in profiles.items():
        if profile.get("match") and profile_matches(profile["match"], facts):
            return name, "match"
    defaults = [name for name, profile in profiles.items() if "match" not in profile]
    if len(defaults) == 1:
        return defaults[0], "default"
    gpus = facts.gpu()["gpus"] if any("gpu_product" in p.get("match", {}) or "gpu_count" in p.get("match", {})
                                      for p in profiles.values()) else None
    seen = []
    if gpus is not None:
        seen.append("gpu_product=%s" % (", ".join(sorted(set(str(g.get("product")) for g in gpus))) or
                                        "none (%s)" % facts.notes.get("gpu", "no GPUs listed")))
    osr = facts.os_release() or {}
    seen.append("os=%s %s" % (osr.get("id"), osr.get("version_id")))
    reason = "no profile matches this node (%s)" % "; ".join(seen)
    if len(defaults) > 1:
        reason += " and %d profiles have no match (%s), so none is the default" % (len(defaults), ", ".join(defaults))
    raise ProfileSelectionError(reason + ". Fix: pass profile=<name> or adjust the profiles' match")


# ---- judging ----------------------------------------------------------------
def _result(check, name, expected, actual, status, note=None):
    return {"check": check, "name": name, "expected": expected, "actual": actual, "status": status, "note": note}


def _toolkit_scheme(facts):
    """``tool`` for ``nvidia-ctk --version``; the package database's rule for a package version."""
    source = facts.container_toolkit().get("source") or ""
    if source.startswith("package"):
        return facts.package_scheme() or "tool"
    return "tool"


def _judge_value(check, name, constraint, actual, facts, absent_key, note_key=None, scheme="tool"):
    note = facts.notes.get(note_key or absent_key)
    if actual is None:
        status = "fail" if absent_key in facts.absent else "unknown"
        return _result(check, name, constraint.text, None, status, note)
    status = "pass" if constraint.matches(actual, scheme) else "fail"
    return _result(check, name, constraint.text, actual, status, note if status != "pass" else None)


def judge_profile(matrix, profile_name, facts):
    """Judge the named profile against ``facts``; returns the result list."""
    profile = matrix["profiles"][profile_name]
    facts.want(packages=list(profile.get("packages", {})), services=list(profile.get("services", {})),
               sysctl=list(profile.get("sysctl", {})))
    results = []
    for section in SECTION_ORDER:
        if section in profile:
            results.extend(_JUDGES[section](profile[section], facts))
    kubernetes = profile.get("kubernetes")
    if kubernetes is not None and kubernetes.get("compatibility", True):
        results.extend(judge_compatibility(matrix["compatibility"], facts, profile))
    return results


def _judge_os(section, facts):
    osr = facts.os_release()
    results = []
    for key, field in (("id", "id"), ("version", "version_id"), ("codename", "version_codename")):
        if key in section:
            actual = None if osr is None else osr.get(field)
            results.append(_judge_value("os", key, section[key], actual, facts, "os"))
    return results


def _judge_single(check, key, getter, absent_key=None, scheme=None):
    def judge(section, facts):
        if key not in section:
            return []
        actual = getter(facts)
        return [_judge_value(check, key, section[key], actual, facts, absent_key or check,
                             scheme=scheme(facts) if scheme else "tool")]
    return judge


def _judge_driver(section, facts):
    if "version" not in section:
        return []
    return [_judge_value("driver", "version", section["version"], facts.driver_version(), facts, "driver")]


def _judge_cuda(section, facts):
    if "version" not in section:
        return []
    actual = facts.cuda_version()
    absent = "gpu" if "gpu" in facts.absent else "cuda"
    return [_judge_value("cuda", "version", section["version"], actual, facts, absent, "gpu")]


def _judge_kernel_modules(section, facts):
    results = []
    for expected, names in (("loaded", section["loaded"]), ("not loaded", section["absent"])):
        for name in names:
            state = facts.module_state(name)
            if state is None:
                results.append(_result("kernel_modules", name, expected, None, "unknown",
                                       facts.notes.get("kernel_modules")))
                continue
            if expected == "loaded":
                status = "pass" if state in ("loaded", "built-in") else "fail"
                note = None
            else:
                status = "pass" if state == "not loaded" else "fail"
                note = "built into the kernel; it cannot be unloaded" if state == "built-in" else None
            results.append(_result("kernel_modules", name, expected, state, status, note))
    return results


def _judge_sysctl(section, facts):
    values = facts.sysctl()
    return [_judge_value("sysctl", key, constraint, values.get(key), facts, "sysctl." + key)
            for key, constraint in section.items()]


def _judge_packages(section, facts):
    versions = facts.packages()
    scheme = facts.package_scheme() or "tool"
    known = "packages" not in facts.notes
    results = []
    for name, wanted in section.items():
        actual = versions.get(name)
        if not known:
            expected = wanted if isinstance(wanted, str) else wanted.text
            results.append(_result("packages", name, expected, None, "unknown", facts.notes["packages"]))
        elif wanted == "absent":
            results.append(_result("packages", name, "absent", actual, "pass" if actual is None else "fail",
                                   None if actual is None else "installed"))
        elif wanted == "present":
            results.append(_result("packages", name, "present", actual, "fail" if actual is None else "pass",
                                   "not installed" if actual is None else None))
        elif actual is None:
            results.append(_result("packages", name, wanted.text, None, "fail", "not installed"))
        else:
            status = "pass" if wanted.matches(actual, scheme) else "fail"
            results.append(_result("packages", name, wanted.text, actual, status))
    return results


def _service_holds(state, info):
    load = info.get("load_state")
    active = info.get("active_state")
    file_state = info.get("unit_file_state")
    if state == "absent":
        return load == "not-found"
    if state == "present":
        return load not in (None, "not-found")
    if state == "masked":
        return load == "masked" or file_state in ("masked", "masked-runtime")
    if state == "running":
        return active == "active"
    if state == "stopped":
        return active != "active"
    if state == "enabled":
        return file_state in _ENABLED_FILE_STATES
    return file_state not in _ENABLED_FILE_STATES


def _service_actual(info):
    if info.get("load_state") == "not-found":
        return "absent"
    active = info.get("active_state")
    words = ["running" if active == "active" else (active or "unknown")]
    if info.get("load_state") == "masked":
        words.append("masked")
    elif info.get("unit_file_state"):
        words.append(info["unit_file_state"])
    return ", ".join(words)


def _judge_services(section, facts):
    units = facts.services()
    results = []
    for name, states in section.items():
        info = units.get(unit_name(name))
        expected = ", ".join(states)
        if info is None:
            results.append(_result("services", name, expected, None, "unknown", facts.notes.get("services")))
            continue
        holds = all(_service_holds(state, info) for state in states)
        note = None
        if info.get("load_state") == "not-found" and "absent" not in states:
            note = "unit not found"
        results.append(_result("services", name, expected, _service_actual(info), "pass" if holds else "fail", note))
    return results


def _describe_values(values):
    distinct = []
    for value in values:
        if value not in distinct:
            distinct.append(value)
    if len(distinct) == 1:
        return distinct[0]
    return ", ".join("%s x%d" % (value, values.count(value)) for value in distinct)


def _judge_gpu(section, facts):
    gpu = facts.gpu()
    results = []
    unavailable = facts.nvidia_smi() is None
    status_missing = "fail" if "gpu" in facts.absent else "unknown"
    note_missing = facts.notes.get("gpu")
    if unavailable and gpu.get("pci_count"):
        note_missing = "%s; %d NVIDIA GPU(s) on the PCI bus" % (note_missing, gpu["pci_count"])
    if "count" in section:
        constraint = section["count"]
        if unavailable:
            results.append(_result("gpu", "count", constraint.text, None, status_missing, note_missing))
        else:
            notes = [facts.notes["gpu.count"]] if facts.notes.get("gpu.count") else []
            if gpu["pci_count"] and gpu["pci_count"] != gpu["count"]:
                notes.append("%d NVIDIA GPU(s) on the PCI bus but nvidia-smi lists %d"
                             % (gpu["pci_count"], gpu["count"]))
            status = "pass" if constraint.matches(gpu["count"]) else "fail"
            results.append(_result("gpu", "count", constraint.text, gpu["count"], status, "; ".join(notes) or None))
    for key in ("product", "persistence_mode", "ecc_mode", "mig_mode", "memory_total_mib"):
        if key not in section:
            continue
        constraint = section[key]
        if unavailable:
            results.append(_result("gpu", key, constraint.text, None, status_missing, note_missing))
            continue
        if not gpu["gpus"]:
            results.append(_result("gpu", key, constraint.text, None, "fail", "nvidia-smi lists no GPUs"))
            continue
        values = [g.get(key) for g in gpu["gpus"]]
        offenders = [g for g in gpu["gpus"] if not constraint.matches(g.get(key))]
        notes = []
        if offenders:
            notes.append("; ".join("GPU %s (%s): %s" % (g.get("index"), g.get("pci_bus_id"), g.get(key))
                                   for g in offenders))
        if key in ("ecc_mode", "mig_mode"):
            pending = [g for g in gpu["gpus"] if g.get(key + "_pending") and g.get(key + "_pending") != g.get(key)]
            if pending:
                notes.append("pending change on GPU %s (takes effect after a GPU reset)"
                             % ", ".join(str(g.get("index")) for g in pending))
        results.append(_result("gpu", key, constraint.text, _describe_values(values),
                               "fail" if offenders else "pass", "; ".join(notes) or None))
    return results


_JUDGES = {
    "os": _judge_os,
    "kernel": _judge_single("kernel", "release", lambda f: f.kernel_release()),
    "driver": _judge_driver,
    "cuda": _judge_cuda,
    "container_toolkit": _judge_single("container_toolkit", "version", lambda f: f.container_toolkit()["version"],
                                       scheme=_toolkit_scheme),
    "containerd": _judge_single("containerd", "version", lambda f: f.containerd_version()),
    "kubernetes": _judge_single("kubernetes", "version", lambda f: f.kubelet_version(), "kubelet"),
    "kernel_modules": _judge_kernel_modules,
    "sysctl": _judge_sysctl,
    "packages": _judge_packages,
    "services": _judge_services,
    "gpu": _judge_gpu,
}


# ---- compatibility ----------------------------------------------------------
def row_label(row):
    """Human label of a compatibility row, e.g. ``kubernetes 1.33``."""
    return "kubernetes %s" % row["row"].get("kubernetes")


def find_compatibility_row(table, kubernetes_version):
    """The first row whose ``kubernetes`` constraint holds for the version, or ``None``."""
    if kubernetes_version is None:
        return None
    for row in table:
        constraint = row["constraints"].get("kubernetes")
        if constraint is not None and constraint.matches(kubernetes_version):
            return row
    return None


def _declared_version(constraint):
    """An exact declared version (device_plugin.version), or ``None`` for ranges/regexes."""
    if constraint is None or constraint.kind != "exact":
        return None
    try:
        Version(constraint.text)
    except VersionError:
        return None
    return constraint.text


def judge_compatibility(table, facts, profile):
    """Results for ``check: compatibility``: which row applies, then each component.

    The node's kubelet version picks the row; driver, Container Toolkit,
    containerd and CUDA versions come from the node; the device plugin
    version is the one the profile declares (``device_plugin.version``),
    since the plugin runs as a cluster DaemonSet, not on the node's disk.
    """
    kubelet = facts.kubelet_version()
    labels = ", ".join(str(row["row"].get("kubernetes")) for row in table) or "none"
    if kubelet is None:
        status = "fail" if "kubelet" in facts.absent else "unknown"
        return [_result("compatibility", "row", "a row for the node's Kubernetes version", None, status,
                        "%s; no row can be chosen" % facts.notes.get("kubelet", "kubelet version unknown"))]
    row = find_compatibility_row(table, kubelet)
    if row is None:
        return [_result("compatibility", "row", "a row for the node's Kubernetes version", None, "fail",
                        "no row covers kubernetes %s (rows: %s)" % (kubelet, labels))]
    label = row_label(row)
    results = [_result("compatibility", "row", "a row for the node's Kubernetes version", label, "pass",
                       "kubelet %s" % kubelet)]
    for component in COMPATIBILITY_COMPONENTS:
        constraint = row["constraints"].get(component)
        if constraint is None:
            continue
        note = "row %s" % label
        scheme = "tool"
        if component == "driver":
            actual, absent_key, note_key = facts.driver_version(), "driver", "driver"
        elif component == "container_toolkit":
            actual, absent_key, note_key = facts.container_toolkit()["version"], "container_toolkit", None
            scheme = _toolkit_scheme(facts)
        elif component == "containerd":
            actual, absent_key, note_key = facts.containerd_version(), "containerd", None
        elif component == "cuda":
            actual, absent_key, note_key = facts.cuda_version(), "gpu", "gpu"
        else:
            actual = _declared_version(profile.get("device_plugin", {}).get("version"))
            if actual is None:
                results.append(_result("compatibility", component, constraint.text, None, "unknown",
                                       "%s; declare the deployed plugin as device_plugin.version: <exact version> "
                                       "in the profile" % note))
                continue
            results.append(_result("compatibility", component, constraint.text, actual,
                                   "pass" if constraint.matches(actual) else "fail", note + "; declared in profile"))
            continue
        if actual is None:
            status = "fail" if absent_key in facts.absent else "unknown"
            reason = facts.notes.get(note_key or absent_key)
            results.append(_result("compatibility", component, constraint.text, None, status,
                                   "%s; %s" % (note, reason) if reason else note))
            continue
        results.append(_result("compatibility", component, constraint.text, actual,
                               "pass" if constraint.matches(actual, scheme) else "fail", note))
    return results


# ---- summary and messages ---------------------------------------------------
def summarize(results):
    """``{pass, fail, unknown, total}`` counts."""
    summary = {"pass": 0, "fail": 0, "unknown": 0}
    for item in results:
        summary[item["status"]] += 1
    summary["total"] = len(results)
    return summary


def _show(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def drift_line(item):
    """``check.name: expected X, got Y (note)`` for one result."""
    if item["actual"] is None and item["status"] == "unknown":
        actual = "unknown"
    else:
        actual = _show(item["actual"])
    text = "%s.%s: expected %s, got %s" % (item["check"], item["name"], _show(item["expected"]), actual)
    if item.get("note"):
        text += " (%s)" % item["note"]
    return text


def drift_message(profile_name, results):
    """The one-line failure message listing every failing and unknown item."""
    bad = [item for item in results if item["status"] != "pass"]
    return "spec drift against profile %s: %d item(s) not compliant: %s. Fix: bring these items to the profile, " \
           "or correct gpu_native_spec_matrix if the profile is wrong" % (
               profile_name, len(bad), "; ".join(drift_line(item) for item in bad))


def matrix_wanted_names(matrix):
    """All package, service and sysctl names the matrix mentions (for ``facts_only``)."""
    packages, services, sysctl = set(), set(), set()
    for profile in matrix["profiles"].values():
        packages.update(profile.get("packages", {}))
        services.update(profile.get("services", {}))
        sysctl.update(profile.get("sysctl", {}))
    return sorted(packages), sorted(services), sorted(sysctl)


def public_compatibility(table):
    """The effective table as plain data (constraints as text) for the module's return."""
    return [copy.deepcopy(row["row"]) for row in table]
