# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""Kubernetes label and taint syntax, and the GPU node labels derived from nvidia-smi.

Public API
----------
``label_key_problem(key)`` / ``label_value_problem(value)``: None when the
key/value is valid for the API server, else a one-line reason (the same
rules as apimachinery's ``IsQualifiedName`` / ``IsValidLabelValue``).
``taint_problem(taint)``: None or a reason, for ``{key, value, effect}``.
``dns_subdomain_problem(name)`` / ``dns_label_problem(name)``: object names
(RFC 1123, as apimachinery's ``IsDNS1123Subdomain`` / ``IsDNS1123Label``).
``toleration_problem(toleration)``, ``quantity_problem(value)``.
``problems(value, kind, name)``: every rule above behind one entry point, as a
list of ``"<name>...: <reason>"`` lines (what the ``k8s_problems`` filter
returns); ``KINDS`` lists the kinds.
``label_value_from_text(text)``: a label-safe form of free text, the way GPU
Feature Discovery writes ``nvidia.com/gpu.product`` (``NVIDIA H100 80GB HBM3``
becomes ``NVIDIA-H100-80GB-HBM3``).
``memory_label(mib)``: ``<n>Gi`` rounded to the nearest GiB (81559 MiB: ``80Gi``).
``gpu_node_labels(inventory, accelerator, model=None, memory=None)``: the
labels ``accelerator``, ``gpu.nvidia.com/model`` and ``gpu.nvidia.com/memory``
from a ``nvidia_smi.parse_query_xml`` result; explicit ``model``/``memory``
win.  Raises ``K8sLabelError`` (one line, with the fix).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from collections.abc import Mapping, Sequence

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError

LABEL_ACCELERATOR = "accelerator"
LABEL_MODEL = "gpu.nvidia.com/model"
LABEL_MEMORY = "gpu.nvidia.com/memory"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_MEMORY_RE = re.compile(r"^[1-9][0-9]*Gi$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# resource.Quantity, the forms a RuntimeClass overhead takes (no exponent form).
_QUANTITY_RE = re.compile(r"^([0-9]+(\.[0-9]+)?|\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
TOLERATION_OPERATORS = ("Exists", "Equal")
TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")


def type_name(value):
    """The plain YAML/JSON type of a value (dict, list, str, int...), never an internal class name.

    Values from templates arrive as ansible-core's lazy containers
    (``_AnsibleLazyTemplateList``...); a message names the type a user wrote.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "str"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, Mapping):
        return "dict"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    if isinstance(value, (Sequence, set, frozenset)):
        return "list"
    return type(value).__name__


class K8sLabelError(FleetError, ValueError):
    """A label cannot be derived or is invalid; the message names the fix."""


def label_key_problem(key):
    if not isinstance(key, str) or not key:
        return "a label key must be a non-empty string"
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.match(prefix):
            return ("prefix %r must be a lowercase DNS subdomain of at most 253 characters "
                    "(e.g. gpu.nvidia.com)" % prefix)
    if len(name) > 63:
        return "name part %r is longer than 63 characters" % name
    if not _NAME_RE.match(name):
        return ("name part %r must consist of alphanumerics, '-', '_' or '.', and start and end with an "
                "alphanumeric" % name)
    return None


def label_value_problem(value):
    if not isinstance(value, str):
        return "a label value must be a string, got %s" % type_name(value)
    if len(value) > 63:
        return "%r is longer than 63 characters" % value
    if not _VALUE_RE.match(value):
        return ("%r must be empty or consist of alphanumerics, '-', '_' or '.', and start and end with an "
                "alphanumeric" % value)
    return None


def dns_subdomain_problem(name):
    if not isinstance(name, str) or not name:
        return "must be a non-empty string, got %s" % type_name(name)
    if len(name) > 253:
        return "%r is longer than 253 characters" % name
    if not _DNS_SUBDOMAIN_RE.match(name):
        return ("%r must be a lowercase DNS subdomain (lowercase alphanumerics, '-' and '.', starting and ending "
                "with an alphanumeric)" % name)
    return None


def dns_label_problem(name):
    if not isinstance(name, str) or not name:
        return "must be a non-empty string, got %s" % type_name(name)
    if len(name) > 63:
        return "%r is longer than 63 characters" % name
    if not _DNS_LABEL_RE.match(name):
        return ("%r must be a lowercase DNS label (lowercase alphanumerics and '-', starting and ending with an "
                "alphanumeric)" % name)
    return None


def quantity_problem(value):
    text = value if isinstance(value, str) else (str(value) if isinstance(value, int) and not isinstance(value, bool)
                                                 else None)
    if text is None or not _QUANTITY_RE.match(text):
        return "%r is not a Kubernetes quantity (e.g. 250m, 0.5, 120Mi, 1Gi)" % (value,)
    return None


def toleration_problem(toleration):
    """None or a reason, for one RuntimeClass/pod toleration (this collection requires the operator)."""
    if not isinstance(toleration, Mapping):
        return "a toleration must be a dict with key, operator, value and effect, got %s" % type_name(toleration)
    unknown = sorted(set(toleration) - set(TOLERATION_FIELDS))
    if unknown:
        return "unknown toleration field(s) %s; a toleration has %s" % (", ".join(unknown), ", ".join(TOLERATION_FIELDS))
    operator = toleration.get("operator")
    if operator not in TOLERATION_OPERATORS:
        return "operator %r must be Exists or Equal" % (operator,)
    key = toleration.get("key") or ""
    if key:
        problem = label_key_problem(key)
        if problem:
            return "key: " + problem
    elif operator != "Exists":
        return "an empty key matches every taint only with operator Exists"
    value = toleration.get("value")
    if operator == "Exists" and value not in (None, ""):
        return "operator Exists takes no value (got %r)" % (value,)
    if operator == "Equal" and value not in (None, ""):
        problem = label_value_problem(value)
        if problem:
            return "value: " + problem
    effect = toleration.get("effect") or ""
    if effect and effect not in TAINT_EFFECTS:
        return "effect %r must be one of %s, or empty for all" % (effect, ", ".join(TAINT_EFFECTS))
    if "tolerationSeconds" in toleration and effect != "NoExecute":
        return "tolerationSeconds applies to effect NoExecute only"
    return None


def taint_problem(taint):
    if not isinstance(taint, Mapping):
        return "a taint must be a dict with key, value and effect, got %s" % type_name(taint)
    unknown = sorted(set(taint) - set(("key", "value", "effect")))
    if unknown:
        return "unknown taint field(s) %s; a taint has key, value and effect" % ", ".join(unknown)
    problem = label_key_problem(taint.get("key"))
    if problem:
        return "key: " + problem
    if taint.get("value") not in (None, ""):
        problem = label_value_problem(taint.get("value"))
        if problem:
            return "value: " + problem
    if taint.get("effect") not in TAINT_EFFECTS:
        return "effect %r must be one of %s" % (taint.get("effect"), ", ".join(TAINT_EFFECTS))
    return None


def label_value_from_text(text):
    """Free text to a valid label value (GFD style); '' when nothing usable is left."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", (text or "").strip())
    value = re.sub(r"-{2,}", "-", value)
    value = value[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def memory_label(mib):
    """MiB to ``<n>Gi``, rounded half up to the nearest GiB (never below 1Gi)."""
    gib = int((int(mib) + 512) // 1024)
    return "%dGi" % max(gib, 1)


def memory_label_problem(value):
    if not isinstance(value, str) or not _MEMORY_RE.match(value):
        return "%r must be a whole number of GiB written as <n>Gi (e.g. 80Gi)" % (value,)
    return None


def gpu_node_labels(inventory, accelerator, model=None, memory=None):
    """Return (labels, details) for one node; see the module docstring."""
    problem = label_value_problem(accelerator)
    if problem:
        raise K8sLabelError("accelerator: %s. Fix: use a valid label value such as nvidia-gpu." % problem)
    gpus = (inventory or {}).get("gpus") or []
    details = {"gpu_count": len(gpus), "product": None, "memory_mib": None}
    if model:
        model_label = model
    else:
        products = sorted(set(g.get("product") for g in gpus if g.get("product")))
        if not products:
            raise K8sLabelError("nvidia-smi lists no GPU with a product name, so the model label cannot be derived. "
                                "Fix: check the driver with gpu_native.fleet.gpu_health, or set the model explicitly.")
        if len(products) > 1:
            raise K8sLabelError("this node mixes GPU models (%s); one gpu.nvidia.com/model label cannot describe them. "
                                "Fix: set the model explicitly."
                                % ", ".join(" ".join(str(name).split())[:80] for name in products[:8]))
        details["product"] = products[0]
        model_label = label_value_from_text(products[0])
    problem = label_value_problem(model_label)
    if problem or not model_label:
        raise K8sLabelError("model: %s. Fix: use a valid label value such as NVIDIA-H100-80GB-HBM3."
                            % (problem or "%r leaves no valid label value" % model_label))
    if memory:
        memory_value = memory
    else:
        sizes = [g.get("memory_total_mib") for g in gpus if g.get("memory_total_mib")]
        if not sizes:
            raise K8sLabelError("nvidia-smi reports no GPU memory size, so the memory label cannot be derived. "
                                "Fix: set the memory explicitly (e.g. 80Gi).")
        # the smallest GPU is what a pod can count on
        details["memory_mib"] = min(sizes)
        memory_value = memory_label(details["memory_mib"])
    problem = memory_label_problem(memory_value)
    if problem:
        raise K8sLabelError("memory: %s." % problem)
    labels = {LABEL_ACCELERATOR: accelerator, LABEL_MODEL: model_label, LABEL_MEMORY: memory_value}
    return labels, details


def _label_map_problems(labels, name):
    if labels is None:
        return []
    if not isinstance(labels, Mapping):
        return ["%s: must be a dict of labels, got %s" % (name, type_name(labels))]
    found = []
    for key in sorted(labels, key=str):
        problem = label_key_problem(key)
        if problem:
            found.append("%s.%s: key %s" % (name, key, problem))
        problem = label_value_problem(labels[key])
        if problem:
            found.append("%s.%s: value %s" % (name, key, problem))
    return found


def _tolerations_problems(tolerations, name):
    if tolerations is None:
        return []
    if isinstance(tolerations, (str, bytes)) or not isinstance(tolerations, Sequence):
        return ["%s: must be a list of tolerations, got %s" % (name, type_name(tolerations))]
    found = []
    for index, toleration in enumerate(tolerations):
        problem = toleration_problem(toleration)
        if problem:
            found.append("%s[%d]: %s" % (name, index, problem))
    return found


def _resources_problems(resources, name):
    if resources is None:
        return []
    if not isinstance(resources, Mapping):
        return ["%s: must be a dict of cpu/memory quantities, got %s" % (name, type_name(resources))]
    found = []
    for key in sorted(resources, key=str):
        if key not in ("cpu", "memory"):
            found.append("%s.%s: unknown resource; use cpu and memory" % (name, key))
            continue
        problem = quantity_problem(resources[key])
        if problem:
            found.append("%s.%s: %s" % (name, key, problem))
    return found


def _single(check):
    def run(value, name):
        problem = check(value)
        return ["%s: %s" % (name, problem)] if problem else []
    return run


def _gpu_memory(value):
    return None if value == "" else memory_label_problem(value)


KINDS = {
    "labels": _label_map_problems,
    "label_key": _single(label_key_problem),
    "label_value": _single(label_value_problem),
    "dns_subdomain": _single(dns_subdomain_problem),
    "dns_label": _single(dns_label_problem),
    "taint": _single(taint_problem),
    "tolerations": _tolerations_problems,
    "resources": _resources_problems,
    "gpu_memory": _single(_gpu_memory),
}


def problems(value, kind, name="value"):
    """Every problem the API server (or the GPU label scheme) has with ``value`` read as ``kind``; [] when none."""
    if kind not in KINDS:
        raise ValueError("unknown kind %r; use one of %s" % (kind, ", ".join(sorted(KINDS))))
    return KINDS[kind](value, name)
