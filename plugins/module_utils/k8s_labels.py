# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes label and taint syntax, and the GPU node labels derived from nvidia-smi.

Public API
----------
``label_key_problem(key)`` / ``label_value_problem(value)``: None when the
key/value is valid for the API server, else a one-line reason (the same
rules as apimachinery's ``IsQualifiedName`` / ``IsValidLabelValue``).
``taint_problem(taint)``: None or a reason, for ``{key, value, effect}``.
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

LABEL_ACCELERATOR = "accelerator"
LABEL_MODEL = "gpu.nvidia.com/model"
LABEL_MEMORY = "gpu.nvidia.com/memory"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_MEMORY_RE = re.compile(r"^[1-9][0-9]*Gi$")


class K8sLabelError(ValueError):
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
        return "a label value must be a string, got %s" % type(value).__name__
    if len(value) > 63:
        return "%r is longer than 63 characters" % value
    if not _VALUE_RE.match(value):
        return ("%r must be empty or consist of alphanumerics, '-', '_' or '.', and start and end with an "
                "alphanumeric" % value)
    return None


def taint_problem(taint):
    if not isinstance(taint, dict):
        return "a taint must be a dict with key, value and effect"
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
                                "Fix: set the model explicitly." % ", ".join(products))
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
