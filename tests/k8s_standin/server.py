# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes API stand-in for gpu_native.fleet tests.

No real API server can be had on the test machines, so this small, threaded
HTTP server speaks the parts of the Kubernetes REST API our roles and
kubernetes.core's modules use: discovery, CRUD on typed and custom
resources, the four PATCH types, dry runs, label and field selectors,
``resourceVersion`` preconditions, finalizers, pod eviction honouring
PodDisruptionBudgets, and the real server's ``Status`` error bodies.

It is a stand-in, not an emulator of everything: there is no kubelet (pods
are removed at once when deleted), no controllers, no admission webhooks, and
server-side apply merges like a strategic merge patch without field
ownership.  See README.md next to this file.

Standard library only (PyYAML is used when present, for YAML seed files).
"""

import argparse
import base64
import copy
import datetime
import hashlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

KUBE_VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.4",
    "gitCommit": "a78aa47129b8539636eb86a9d00e31b2720fe06b",
    "gitTreeState": "clean",
    "buildDate": "2024-12-10T18:36:03Z",
    "goVersion": "go1.22.10",
    "compiler": "gc",
    "platform": "linux/amd64",
}

STATE_FILE_NAME = "state.json"

# ---------------------------------------------------------------------------
# Resource catalogue (built-in types).  Custom resources are added from
# CustomResourceDefinition objects, as on a real server.
# ---------------------------------------------------------------------------

VERBS_ALL = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


class ResourceType:
    """One REST resource: group/version/plural and how it behaves."""

    def __init__(self, group, version, plural, kind, namespaced, short_names=(),
                 subresources=("status",), custom=False, generation=False, singular=None):
        self.group = group
        self.version = version
        self.plural = plural
        self.kind = kind
        self.namespaced = namespaced
        self.short_names = list(short_names)
        self.subresources = list(subresources)
        self.custom = custom
        self.generation = generation or custom
        self.singular = singular or kind.lower()

    @property
    def api_version(self):
        return "%s/%s" % (self.group, self.version) if self.group else self.version

    @property
    def qualified(self):
        """`plural.group` as the real server names a resource in messages."""
        return "%s.%s" % (self.plural, self.group) if self.group else self.plural

    @property
    def kind_qualified(self):
        return "%s.%s" % (self.kind, self.group) if self.group else self.kind

    def discovery(self):
        entries = [{
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(VERBS_ALL),
        }]
        if self.short_names:
            entries[0]["shortNames"] = list(self.short_names)
        if self.custom:
            entries[0]["categories"] = ["all"]
        for sub in self.subresources:
            if sub == "status":
                entries.append({"name": "%s/status" % self.plural, "singularName": "",
                                "namespaced": self.namespaced, "kind": self.kind,
                                "verbs": ["get", "patch", "update"]})
            elif sub == "eviction":
                entries.append({"name": "%s/eviction" % self.plural, "singularName": "",
                                "namespaced": self.namespaced, "group": "policy",
                                "version": "v1", "kind": "Eviction", "verbs": ["create"]})
        return entries


BUILTIN_TYPES = [
    ResourceType("", "v1", "namespaces", "Namespace", False, ["ns"], ("status",)),
    ResourceType("", "v1", "nodes", "Node", False, ["no"], ("status",)),
    ResourceType("", "v1", "pods", "Pod", True, ["po"], ("status", "eviction")),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, ["cm"], ()),
    ResourceType("", "v1", "secrets", "Secret", True, [], ()),
    ResourceType("", "v1", "services", "Service", True, ["svc"], ("status",)),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, ["sa"], ()),
    ResourceType("", "v1", "events", "Event", True, ["ev"], ()),
    ResourceType("", "v1", "endpoints", "Endpoints", True, ["ep"], (), singular="endpoints"),
    ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, ["ds"], ("status",), generation=True),
    ResourceType("apps", "v1", "deployments", "Deployment", True, ["deploy"], ("status",), generation=True),
    ResourceType("apps", "v1", "replicasets", "ReplicaSet", True, ["rs"], ("status",), generation=True),
    ResourceType("apps", "v1", "statefulsets", "StatefulSet", True, ["sts"], ("status",), generation=True),
    ResourceType("batch", "v1", "jobs", "Job", True, [], ("status",), generation=True),
    ResourceType("batch", "v1", "cronjobs", "CronJob", True, ["cj"], ("status",), generation=True),
    ResourceType("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False, [], ()),
    ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ["pdb"],
                 ("status",), generation=True),
    ResourceType("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                 "CustomResourceDefinition", False, ["crd", "crds"], ("status",), generation=True),
]

# The Prometheus operator's CRDs, present on a fresh stand-in (as on clusters
# running kube-prometheus-stack) unless --no-default-crds is given.
DEFAULT_CRDS = [
    ("monitoring.coreos.com", "v1", "prometheusrules", "PrometheusRule", "Namespaced", ["promrule"]),
    ("monitoring.coreos.com", "v1", "servicemonitors", "ServiceMonitor", "Namespaced", ["smon"]),
    ("monitoring.coreos.com", "v1", "podmonitors", "PodMonitor", "Namespaced", ["pmon"]),
]

DEFAULT_NAMESPACES = ["default", "kube-system", "kube-public", "kube-node-lease"]

# patchMergeKey of list fields (strategic merge patch); lists not named here
# are replaced whole, as for Node.spec.taints and tolerations.
SMP_MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "volumes": "name", "env": "name", "volumeMounts": "mountPath", "imagePullSecrets": "name",
    "conditions": "type", "ownerReferences": "uid", "hostAliases": "ip",
    "addresses": "type", "topologySpreadConstraints": "topologyKey",
}
SMP_PRIMITIVE_MERGE = {"finalizers"}


# ---------------------------------------------------------------------------
# Errors rendered as the real server's Status objects
# ---------------------------------------------------------------------------

class ApiError(Exception):
    def __init__(self, code, reason, message, details=None):
        Exception.__init__(self, message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self):
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            body["details"] = self.details
        return body


def _details(rtype, name):
    details = {"name": name, "kind": rtype.plural}
    if rtype.group:
        details["group"] = rtype.group
    return details


def not_found(rtype, name):
    return ApiError(404, "NotFound", '%s "%s" not found' % (rtype.qualified, name), _details(rtype, name))


def already_exists(rtype, name):
    return ApiError(409, "AlreadyExists", '%s "%s" already exists' % (rtype.qualified, name),
                    _details(rtype, name))


def conflict(rtype, name, why="the object has been modified; please apply your changes to the "
                              "latest version and try again"):
    return ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s'
                    % (rtype.qualified, name, why), _details(rtype, name))


def bad_request(message):
    return ApiError(400, "BadRequest", message)


class FieldError:
    def __init__(self, field, reason, message):
        self.field = field
        self.reason = reason  # FieldValueInvalid, FieldValueRequired, ...
        self.message = message

    def text(self):
        return "%s: %s" % (self.field, self.message)


def invalid(rtype, name, errors):
    texts = [e.text() for e in errors]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details = {"name": name, "kind": rtype.kind, "causes": [
        {"reason": e.reason, "message": e.message, "field": e.field} for e in errors]}
    if rtype.group:
        details["group"] = rtype.group
    return ApiError(422, "Invalid", '%s "%s" is invalid: %s' % (rtype.kind_qualified, name, joined), details)


# ---------------------------------------------------------------------------
# Validation (the subset the real server enforces that our roles can hit)
# ---------------------------------------------------------------------------

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(([eE][+-]?\d+)|Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

MSG_DNS_LABEL = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                 "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
                 "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
MSG_DNS_SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                     "'-' or '.', and must start and end with an alphanumeric character (e.g. "
                     "'example.com', regex used for validation is "
                     "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
MSG_QUALIFIED = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
                 "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
                 "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
MSG_LABEL_VALUE = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
                   "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
                   "'my_value',  or '12345', regex used for validation is "
                   "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")


def _invalid_value(field, value, message):
    return FieldError(field, "FieldValueInvalid", "Invalid value: %s: %s" % (json.dumps(value), message))


def _required(field, message="Required value"):
    return FieldError(field, "FieldValueRequired", message)


def validate_qualified_name(field, key):
    errors = []
    if not isinstance(key, str) or not key:
        return [_invalid_value(field, key, "name part must be non-empty")]
    prefix, _slash, name = key.rpartition("/")
    if "/" in key:
        if not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix):
            errors.append(_invalid_value(field, key, "prefix part " + MSG_DNS_SUBDOMAIN))
    if len(name) > 63:
        errors.append(_invalid_value(field, key, "name part must be no more than 63 characters"))
    elif not QUALIFIED_NAME.match(name):
        errors.append(_invalid_value(field, key, MSG_QUALIFIED))
    return errors


def validate_label_value(field, value):
    if len(value) > 63:
        return [_invalid_value(field, value, "must be no more than 63 characters")]
    if not LABEL_VALUE.match(value):
        return [_invalid_value(field, value, MSG_LABEL_VALUE)]
    return []


def validate_labels(field, labels):
    errors = []
    for key, value in (labels or {}).items():
        errors.extend(validate_qualified_name(field, key))
        errors.extend(validate_label_value(field, value))
    return errors


def validate_tolerations(field, tolerations):
    errors = []
    for index, tol in enumerate(tolerations or []):
        path = "%s[%d]" % (field, index)
        if not isinstance(tol, dict):
            errors.append(_invalid_value(path, tol, "must be an object"))
            continue
        key = tol.get("key") or ""
        operator = tol.get("operator") or "Equal"
        if key:
            errors.extend(validate_qualified_name(path + ".key", key))
        elif operator != "Exists":
            errors.append(_invalid_value(path + ".operator", operator,
                                         "operator must be Exists when `key` is empty, which means "
                                         "\"match all values and all keys\""))
        if operator not in ("Equal", "Exists"):
            errors.append(FieldError(path + ".operator", "FieldValueNotSupported",
                                     'Unsupported value: "%s": supported values: "Equal", "Exists"' % operator))
        elif operator == "Exists" and tol.get("value"):
            errors.append(_invalid_value(path + ".operator", tol.get("value"),
                                         "value must be empty when `operator` is 'Exists'"))
        elif operator == "Equal" and tol.get("value"):
            errors.extend(validate_label_value(path + ".value", tol.get("value")))
        effect = tol.get("effect") or ""
        if effect and effect not in TAINT_EFFECTS:
            errors.append(FieldError(path + ".effect", "FieldValueNotSupported",
                                     'Unsupported value: "%s": supported values: "NoSchedule", '
                                     '"PreferNoSchedule", "NoExecute"' % effect))
    return errors


def validate_quantities(field, mapping):
    errors = []
    for key, value in (mapping or {}).items():
        if not isinstance(value, (str, int, float)) or not QUANTITY.match(str(value)):
            errors.append(_invalid_value("%s[%s]" % (field, key), value,
                                         "quantities must match the regular expression "
                                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"))
    return errors


def validate_object(rtype, obj, old=None):
    """Return a list of FieldError for `obj` (and `old` on update)."""
    errors = []
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    name_re, name_msg = DNS1123_SUBDOMAIN, MSG_DNS_SUBDOMAIN
    if rtype.plural in ("namespaces", "services"):
        name_re, name_msg = DNS1123_LABEL, MSG_DNS_LABEL
    if not rtype.custom and name and (len(name) > 253 or not name_re.match(name)):
        errors.append(_invalid_value("metadata.name", name, name_msg))
    errors.extend(validate_labels("metadata.labels", meta.get("labels")))
    for key in (meta.get("annotations") or {}):
        errors.extend(validate_qualified_name("metadata.annotations", key))
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    kind = rtype.kind if not rtype.custom else None

    if kind == "Node":
        seen = set()
        for index, taint in enumerate(spec.get("taints") or []):
            path = "spec.taints[%d]" % index
            if not isinstance(taint, dict):
                errors.append(_invalid_value(path, taint, "must be an object"))
                continue
            if not taint.get("key"):
                errors.append(_required(path + ".key"))
            else:
                errors.extend(validate_qualified_name(path + ".key", taint["key"]))
            if taint.get("value"):
                errors.extend(validate_label_value(path + ".value", taint["value"]))
            effect = taint.get("effect")
            if not effect:
                errors.append(_required(path + ".effect"))
            elif effect not in TAINT_EFFECTS:
                errors.append(FieldError(path + ".effect", "FieldValueNotSupported",
                                         'Unsupported value: "%s": supported values: "NoSchedule", '
                                         '"PreferNoSchedule", "NoExecute"' % effect))
            pair = (taint.get("key"), effect)
            if pair in seen:
                errors.append(FieldError("spec.taints", "FieldValueDuplicate",
                                         "Duplicate value: %s" % json.dumps(
                                             {"key": taint.get("key"), "effect": effect})))
            seen.add(pair)
    elif kind == "RuntimeClass":
        handler = obj.get("handler")
        if not handler:
            errors.append(_required("handler"))
        elif not isinstance(handler, str) or len(handler) > 63 or not DNS1123_LABEL.match(handler):
            errors.append(_invalid_value("handler", handler, MSG_DNS_LABEL))
        if old is not None and old.get("handler") != handler:
            errors.append(_invalid_value("handler", handler, "field is immutable"))
        overhead = obj.get("overhead") or {}
        errors.extend(validate_quantities("overhead.podFixed", overhead.get("podFixed")))
        scheduling = obj.get("scheduling") or {}
        errors.extend(validate_labels("scheduling.nodeSelector", scheduling.get("nodeSelector")))
        errors.extend(validate_tolerations("scheduling.tolerations", scheduling.get("tolerations")))
    elif kind == "ConfigMap":
        for field in ("data", "binaryData"):
            for key in (obj.get(field) or {}):
                if not CONFIGMAP_KEY.match(key):
                    errors.append(_invalid_value("%s[%s]" % (field, key), key,
                                                 "a valid config key must consist of alphanumeric "
                                                 "characters, '-', '_' or '.' (e.g. 'key.name',  or "
                                                 "'KEY_NAME',  or 'key-name', regex used for validation "
                                                 "is '[-._a-zA-Z0-9]+')"))
    elif kind == "Pod":
        containers = spec.get("containers")
        if not containers:
            errors.append(_required("spec.containers"))
        for index, container in enumerate(containers or []):
            if not isinstance(container, dict) or not container.get("name"):
                errors.append(_required("spec.containers[%d].name" % index))
            elif not container.get("image"):
                errors.append(_required("spec.containers[%d].image" % index))
        errors.extend(validate_tolerations("spec.tolerations", spec.get("tolerations")))
        errors.extend(validate_labels("spec.nodeSelector", spec.get("nodeSelector")))
    elif kind == "PodDisruptionBudget":
        if "minAvailable" in spec and "maxUnavailable" in spec:
            errors.append(_invalid_value("spec", spec, "minAvailable and maxUnavailable cannot be both set"))
    elif kind == "CustomResourceDefinition":
        names = spec.get("names") or {}
        for field in ("group", "scope"):
            if not spec.get(field):
                errors.append(_required("spec." + field))
        for field in ("plural", "kind"):
            if not names.get(field):
                errors.append(_required("spec.names." + field))
        if not spec.get("versions"):
            errors.append(_required("spec.versions"))
        expected = "%s.%s" % (names.get("plural"), spec.get("group"))
        if names.get("plural") and spec.get("group") and name != expected:
            errors.append(_invalid_value("metadata.name", name, "must be spec.names.plural+\".\"+spec.group"))
    return errors


# Typed list items the real server decodes into Go structs: unknown keys (such
# as the snake_case `time_added` some clients echo back) and nulls are dropped.
TYPED_ITEM_FIELDS = {
    ("Node", "taints"): ("key", "value", "effect", "timeAdded"),
}


KINDS_WITH_SPEC_AND_STATUS = ("Node", "Pod", "Namespace", "Service", "DaemonSet", "Deployment", "ReplicaSet",
                              "StatefulSet", "Job", "CronJob", "PodDisruptionBudget", "CustomResourceDefinition")
NODE_INFO_FIELDS = ("machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion",
                    "kubeletVersion", "kubeProxyVersion", "operatingSystem", "architecture")


def _drop_nulls(value):
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def normalise_typed(rtype, obj):
    """Decode-and-encode effects of typed (built-in) objects on the real server."""
    if rtype.custom:
        return obj
    obj = _drop_nulls(obj)
    if rtype.kind in KINDS_WITH_SPEC_AND_STATUS:
        # non-pointer Go structs: the real server always encodes them, if only as {}
        obj.setdefault("spec", {})
        obj.setdefault("status", {})
    status = obj.get("status")
    if rtype.kind == "Node" and isinstance(status, dict) and isinstance(status.get("nodeInfo"), dict):
        # NodeSystemInfo's fields carry no omitempty: Go always encodes them
        for field in NODE_INFO_FIELDS:
            status["nodeInfo"].setdefault(field, "")
    spec = obj.get("spec")
    if isinstance(spec, dict):
        for (kind, field), allowed in TYPED_ITEM_FIELDS.items():
            if kind == rtype.kind and isinstance(spec.get(field), list):
                spec[field] = [{k: v for k, v in item.items() if k in allowed and v != ""}
                               if isinstance(item, dict) else item for item in spec[field]]
                if not spec[field]:
                    del spec[field]  # omitempty
    return obj


def check_string_maps(obj):
    """The real server's JSON decoder rejects non-string label values: 400, not 422."""
    meta = obj.get("metadata") or {}
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise bad_request("json: cannot unmarshal %s into Go struct field ObjectMeta.metadata.%s of "
                              "type map[string]string" % (type(value).__name__, field))
        for key, item in value.items():
            if not isinstance(item, str):
                raise bad_request("json: cannot unmarshal %s into Go struct field ObjectMeta.metadata.%s "
                                  "of type string (key %s)" % (type(item).__name__, field, key))


# ---------------------------------------------------------------------------
# Patches
# ---------------------------------------------------------------------------

def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target, patch):
    """Strategic merge patch for the built-in types we know (see SMP_MERGE_KEYS)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key == "$patch" or key == "$retainKeys" or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [item for item in result.get(field) or [] if item not in (value or [])]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            if value.get("$patch") == "delete":
                result.pop(key, None)
            else:
                result[key] = strategic_merge_patch(result.get(key), value)
        elif isinstance(value, list):
            result[key] = _smp_list(key, result.get(key), value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _smp_list(key, current, patch_list):
    current = copy.deepcopy(current) if isinstance(current, list) else []
    if key in SMP_PRIMITIVE_MERGE:
        for item in patch_list:
            if item not in current:
                current.append(item)
        return current
    merge_key = SMP_MERGE_KEYS.get(key)
    if key == "ports" and patch_list and isinstance(patch_list[0], dict):
        merge_key = "containerPort" if "containerPort" in patch_list[0] else "port"
    if not merge_key or not all(isinstance(i, dict) for i in patch_list):
        return [i for i in copy.deepcopy(patch_list)
                if not (isinstance(i, dict) and i.get("$patch") == "replace")]
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch_list):
        return [i for i in copy.deepcopy(patch_list) if i.get("$patch") != "replace"]
    for item in patch_list:
        match = [idx for idx, cur in enumerate(current)
                 if isinstance(cur, dict) and cur.get(merge_key) == item.get(merge_key)]
        if item.get("$patch") == "delete":
            current = [cur for idx, cur in enumerate(current) if idx not in match]
        elif match:
            current[match[0]] = strategic_merge_patch(current[match[0]], item)
        else:
            current.append(strategic_merge_patch({}, item))
    return current


class JsonPatchError(Exception):
    pass


def _pointer_parts(pointer):
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise JsonPatchError('invalid JSON pointer "%s"' % pointer)
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]


def _resolve_parent(doc, parts, op, path):
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise JsonPatchError("jsonpatch %s operation does not apply: doc is missing path: %s"
                                 % (op, path))
    return node


def _get_at(doc, path, op):
    parts = _pointer_parts(path)
    if not parts:
        return doc
    parent = _resolve_parent(doc, parts, op, path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise JsonPatchError("jsonpatch %s operation does not apply: doc is missing key: %s" % (op, path))


def _remove_at(doc, path, op):
    parts = _pointer_parts(path)
    parent = _resolve_parent(doc, parts, op, path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise JsonPatchError("jsonpatch %s operation does not apply: doc is missing key: %s" % (op, path))


def _add_at(doc, path, value, op):
    parts = _pointer_parts(path)
    if not parts:
        return value
    parent = _resolve_parent(doc, parts, op, path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise JsonPatchError("jsonpatch %s operation does not apply: index out of range: %s" % (op, path))
    else:
        raise JsonPatchError("jsonpatch %s operation does not apply: doc is missing path: %s" % (op, path))
    return doc


def json_patch(doc, operations):
    """RFC 6902 JSON patch."""
    if not isinstance(operations, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(doc)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise JsonPatchError("Unable to apply patch: invalid operation %s" % json.dumps(operation))
        op, path = operation["op"], operation["path"]
        if op == "add":
            doc = _add_at(doc, path, copy.deepcopy(operation.get("value")), op)
        elif op == "remove":
            _remove_at(doc, path, op)
        elif op == "replace":
            _get_at(doc, path, op)
            parts = _pointer_parts(path)
            if not parts:
                doc = copy.deepcopy(operation.get("value"))
            else:
                parent = _resolve_parent(doc, parts, op, path)
                key = int(parts[-1]) if isinstance(parent, list) else parts[-1]
                parent[key] = copy.deepcopy(operation.get("value"))
        elif op == "move":
            value = _remove_at(doc, operation.get("from", ""), op)
            doc = _add_at(doc, path, value, op)
        elif op == "copy":
            value = copy.deepcopy(_get_at(doc, operation.get("from", ""), op))
            doc = _add_at(doc, path, value, op)
        elif op == "test":
            if _get_at(doc, path, op) != operation.get("value"):
                raise JsonPatchError("testing value %s failed" % path)
        else:
            raise JsonPatchError("Unexpected kind: %s" % op)
    return doc


# ---------------------------------------------------------------------------
# Selectors
# ---------------------------------------------------------------------------

LABEL_REQ = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*(?:(==|=|!=)\s*([A-Za-z0-9_.-]*)|\s+(in|notin)\s*"
                       r"\(([^)]*)\))?\s*$")


def _split_selector(selector):
    parts, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current)
    return parts


def parse_label_selector(selector):
    """Return a predicate over a labels dict; raise ApiError 400 when malformed."""
    requirements = []
    for raw in _split_selector(selector or ""):
        match = LABEL_REQ.match(raw)
        if not match:
            raise bad_request("unable to parse requirement: found '%s', expected: identifier" % raw.strip())
        negate, key, op, value, set_op, values = match.groups()
        if negate and (op or set_op):
            raise bad_request("unable to parse requirement: found '%s'" % raw.strip())
        if negate:
            requirements.append(lambda labels, k=key: k not in labels)
        elif op in ("=", "=="):
            requirements.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif op == "!=":
            requirements.append(lambda labels, k=key, v=value: labels.get(k) != v)
        elif set_op:
            options = set(v.strip() for v in values.split(",") if v.strip())
            if set_op == "in":
                requirements.append(lambda labels, k=key, o=options: k in labels and labels[k] in o)
            else:
                requirements.append(lambda labels, k=key, o=options: labels.get(k) not in o)
        else:
            requirements.append(lambda labels, k=key: k in labels)
    return lambda labels: all(req(labels or {}) for req in requirements)


def match_label_selector_object(selector, labels):
    """metav1.LabelSelector (matchLabels / matchExpressions) over a labels dict."""
    labels = labels or {}
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


# Field selectors the real server supports, per resource (plus metadata.name
# and metadata.namespace everywhere).
FIELD_SELECTABLE = {
    "pods": {"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
             "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"},
    "nodes": {"spec.unschedulable"},
    "events": {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
               "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
               "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"},
    "secrets": {"type"},
    "namespaces": {"status.phase"},
    "jobs": {"status.successful"},
}


def _field_value(obj, path):
    node = obj
    for part in path.split("."):
        if not isinstance(node, dict):
            return ""
        node = node.get(part)
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def parse_field_selector(rtype, selector):
    requirements = []
    for raw in _split_selector(selector or ""):
        match = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", raw)
        if not match:
            raise bad_request('invalid selector: \'%s\'; can\'t understand \'%s\'' % (selector, raw))
        field, op, value = match.groups()
        allowed = FIELD_SELECTABLE.get(rtype.plural, set()) | {"metadata.name", "metadata.namespace"}
        if field not in allowed:
            raise bad_request('field label not supported: %s' % field)
        if op == "!=":
            requirements.append(lambda obj, f=field, v=value: _field_value(obj, f) != v)
        else:
            requirements.append(lambda obj, f=field, v=value: _field_value(obj, f) == v)
    return lambda obj: all(req(obj) for req in requirements)


# ---------------------------------------------------------------------------
# The store
# ---------------------------------------------------------------------------

def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _strip_volatile(obj):
    obj = copy.deepcopy(obj)
    obj.get("metadata", {}).pop("resourceVersion", None)
    obj.get("metadata", {}).pop("generation", None)
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


class Store:
    """All objects, the resource catalogue and the resourceVersion counter."""

    def __init__(self, state_path=None):
        self.lock = threading.RLock()
        self.state_path = state_path
        self.objects = {}  # (group, plural, namespace, name) -> object
        self.revision = 1
        self.changed = threading.Condition(self.lock)
        self.node_history = []  # see "Node history" below

    # -- persistence -------------------------------------------------------
    def load(self):
        with open(self.state_path, "r", encoding="utf-8") as handle:
            data = json.load(handle)
        self.revision = int(data.get("resourceVersion", 1))
        for entry in data.get("objects", []):
            key = (entry["group"], entry["plural"], entry["namespace"], entry["name"])
            self.objects[key] = entry["object"]

    def save(self):
        if not self.state_path:
            return
        data = {"resourceVersion": self.revision, "objects": [
            {"group": k[0], "plural": k[1], "namespace": k[2], "name": k[3], "object": v}
            for k, v in sorted(self.objects.items())]}
        tmp = self.state_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)
        os.replace(tmp, self.state_path)

    # -- catalogue ---------------------------------------------------------
    def types(self):
        result = list(BUILTIN_TYPES)
        for key, crd in self.objects.items():
            if key[1] != "customresourcedefinitions" or crd["metadata"].get("deletionTimestamp"):
                continue
            spec = crd.get("spec", {})
            names = spec.get("names", {})
            for version in spec.get("versions", []):
                if not version.get("served", True):
                    continue
                subs = ("status",) if (version.get("subresources") or {}).get("status") is not None else ()
                result.append(ResourceType(spec["group"], version["name"], names["plural"], names["kind"],
                                           spec.get("scope") == "Namespaced", names.get("shortNames", []),
                                           subs, custom=True, singular=names.get("singular")))
        return result

    def find_type(self, group, version, plural):
        for rtype in self.types():
            if rtype.group == group and rtype.version == version and rtype.plural == plural:
                return rtype
        return None

    # -- revision ----------------------------------------------------------
    def bump(self):
        self.revision += 1
        return str(self.revision)

    def notify(self):
        self.changed.notify_all()


# -- DaemonSet controller (stand-in) ------------------------------------------
# The real DaemonSet controller runs one pod per node whose labels match the
# pod template's nodeSelector, and removes it when they stop matching.  The
# GPU Operator pauses its DaemonSets on a node by relabelling the node
# (nvidia.com/gpu.deploy.device-plugin=paused-for-mig-change); this controller
# makes that visible: pods leave and come back (with a new name).  Only pods
# owned by a DaemonSet object in the store are managed; seeded pods whose
# owner is not stored are left alone.

def _daemonset_wants(ds, node):
    selector = ((ds.get("spec") or {}).get("template") or {}).get("spec", {}).get("nodeSelector") or {}
    labels = node.get("metadata", {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


def _daemonset_pod(ds, node_name, revision):
    template = copy.deepcopy((ds.get("spec") or {}).get("template") or {})
    meta = ds["metadata"]
    suffix = hashlib.sha256(("%s/%s/%s" % (meta["name"], node_name, revision)).encode()).hexdigest()[:5]
    spec = template.get("spec") or {}
    spec["nodeName"] = node_name
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "%s-%s" % (meta["name"], suffix), "namespace": meta.get("namespace", "default"),
            "labels": dict((template.get("metadata") or {}).get("labels") or {}),
            "uid": str(uuid.uuid4()), "creationTimestamp": now_rfc3339(),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": meta["name"],
                                 "uid": meta.get("uid"), "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": spec,
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def reconcile_daemonsets(store):
    """Create and remove DaemonSet pods so that they follow node labels (holds the store lock)."""
    daemonsets = [obj for key, obj in store.objects.items() if key[0] == "apps" and key[1] == "daemonsets"]
    nodes = [obj for key, obj in store.objects.items() if key[0] == "" and key[1] == "nodes"]
    pods = [(key, obj) for key, obj in store.objects.items() if key[0] == "" and key[1] == "pods"]
    for ds in daemonsets:
        uid = ds["metadata"].get("uid")
        owned = {}
        for key, pod in pods:
            refs = pod["metadata"].get("ownerReferences") or []
            if any(ref.get("kind") == "DaemonSet" and ref.get("uid") == uid for ref in refs):
                owned.setdefault(pod.get("spec", {}).get("nodeName"), []).append(key)
        for node in nodes:
            node_name = node["metadata"]["name"]
            wanted = _daemonset_wants(ds, node)
            if wanted and not owned.get(node_name):
                pod = _daemonset_pod(ds, node_name, store.revision)
                pod["metadata"]["resourceVersion"] = store.bump()
                store.objects[("", "pods", pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod
            elif not wanted:
                for key in owned.get(node_name, []):
                    del store.objects[key]
                    store.bump()
        desired = sum(1 for node in nodes if _daemonset_wants(ds, node))
        ds["status"] = {"desiredNumberScheduled": desired, "currentNumberScheduled": desired,
                        "numberReady": desired, "numberAvailable": desired, "numberMisscheduled": 0,
                        "observedGeneration": ds["metadata"].get("generation", 1)}


# -- Node history (stand-in) ---------------------------------------------------
# Not an API feature: a test aid.  Every change of a Node's spec.unschedulable
# (and of its gpu-native.io/ annotations, which carry the cordon ownership mark)
# is appended to STATE_DIR/node-history.jsonl, one JSON object a line:
#   {"ts", "revision", "node", "event": "created"|"changed"|"deleted",
#    "unschedulable": bool, "annotations": {gpu-native.io/...: value}}
# so a test can replay a whole rollout and assert, for example, that never more
# than one node was cordoned at a time.  Dry runs write nothing.  Without a
# state file the lines are kept in Store.node_history only.

NODE_HISTORY_FILE = "node-history.jsonl"
NODE_HISTORY_ANNOTATION_PREFIXES = ("gpu-native.io/",)


def _node_history_view(node):
    meta = node.get("metadata") or {}
    annotations = {key: value for key, value in sorted((meta.get("annotations") or {}).items())
                   if key.startswith(NODE_HISTORY_ANNOTATION_PREFIXES)}
    return bool((node.get("spec") or {}).get("unschedulable")), annotations


def record_node_history(store, old, new):
    """Append a line when a Node is created or deleted, or its unschedulable flag or marks change (lock held)."""
    if new is None:
        event, node = "deleted", old
    elif old is None:
        event, node = "created", new
    else:
        if _node_history_view(old) == _node_history_view(new):
            return
        event, node = "changed", new
    unschedulable, annotations = _node_history_view(node)
    entry = {"ts": now_rfc3339(), "revision": store.revision, "node": node["metadata"]["name"], "event": event,
             "unschedulable": unschedulable if new is not None else False, "annotations": annotations}
    store.node_history.append(entry)
    if store.state_path:
        path = os.path.join(os.path.dirname(store.state_path), NODE_HISTORY_FILE)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, sort_keys=True) + "\n")


def read_node_history(state_dir):
    """The lines of STATE_DIR/node-history.jsonl as dicts (an empty list when there is none)."""
    path = os.path.join(state_dir, NODE_HISTORY_FILE)
    if not os.path.exists(path):
        return []
    with open(path, "r", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def max_cordoned(history):
    """The most nodes unschedulable at the same time over a node history (a list of its lines)."""
    cordoned, most = set(), 0
    for entry in history:
        if entry.get("unschedulable"):
            cordoned.add(entry["node"])
        else:
            cordoned.discard(entry["node"])
        most = max(most, len(cordoned))
    return most


class Api:
    """REST semantics over a Store.  Every public method holds the store lock."""

    def __init__(self, store):
        self.store = store

    # -- helpers -----------------------------------------------------------
    def _key(self, rtype, namespace, name):
        return (rtype.group, rtype.plural, namespace if rtype.namespaced else "", name)

    def _get(self, rtype, namespace, name):
        obj = self.store.objects.get(self._key(rtype, namespace, name))
        if obj is None:
            raise not_found(rtype, name)
        return obj

    def _require_namespace(self, namespace):
        ns_type = BUILTIN_TYPES[0]
        if (ns_type.group, ns_type.plural, "", namespace) not in self.store.objects:
            raise not_found(ns_type, namespace)

    def _decorate(self, rtype, obj):
        """Computed fields the real server's controllers would maintain."""
        if rtype.kind == "PodDisruptionBudget" and not rtype.custom:
            obj = copy.deepcopy(obj)
            obj["status"] = dict(obj.get("status") or {}, **self._pdb_status(obj))
        return obj

    def _finish_write(self, rtype, old, new, dry_run):
        """Shared tail of create/update/patch: validate, bump, store."""
        new = normalise_typed(rtype, new)
        name = new["metadata"]["name"]
        errors = validate_object(rtype, new, old)
        if errors:
            raise invalid(rtype, name, errors)
        if old is not None and _strip_volatile(old) == _strip_volatile(new):
            return old  # a no-op write keeps resourceVersion, as on the real server
        if old is not None and rtype.generation:
            def _spec(o):
                return {k: v for k, v in o.items() if k not in ("metadata", "status")}
            generation = old["metadata"].get("generation", 1)
            new["metadata"]["generation"] = generation + 1 if _spec(old) != _spec(new) else generation
        if dry_run:
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"] if old else ""
            return new
        new["metadata"]["resourceVersion"] = self.store.bump()
        if rtype.kind == "CustomResourceDefinition" and not rtype.custom:
            new["status"] = {"acceptedNames": new.get("spec", {}).get("names", {}),
                             "conditions": [{"type": "Established", "status": "True",
                                             "reason": "InitialNamesAccepted"}],
                             "storedVersions": [v["name"] for v in new.get("spec", {}).get("versions", [])
                                                if v.get("storage")]}
        ns = new["metadata"].get("namespace", "")
        self.store.objects[self._key(rtype, ns, name)] = new
        if rtype.kind == "Node" and not rtype.custom:
            record_node_history(self.store, old, new)
        if rtype.kind in ("Node", "DaemonSet") and not rtype.custom:
            reconcile_daemonsets(self.store)
        self.store.save()
        self.store.notify()
        return new

    # -- reads -------------------------------------------------------------
    def get(self, rtype, namespace, name):
        with self.store.lock:
            return self._decorate(rtype, copy.deepcopy(self._get(rtype, namespace, name)))

    def list(self, rtype, namespace, label_selector=None, field_selector=None, limit=None, cont=None):
        with self.store.lock:
            labels_ok = parse_label_selector(label_selector)
            fields_ok = parse_field_selector(rtype, field_selector)
            items = []
            start_after = None
            if cont:
                try:
                    start_after = tuple(json.loads(base64.b64decode(cont).decode()))
                except (ValueError, TypeError):
                    raise ApiError(410, "Expired", "The provided continue parameter is too old to display a "
                                                   "consistent list result.")
            keys = sorted(k for k in self.store.objects if k[0] == rtype.group and k[1] == rtype.plural)
            for key in keys:
                if namespace and key[2] != namespace:
                    continue
                if start_after is not None and key <= start_after:
                    continue
                obj = self.store.objects[key]
                if not labels_ok(obj.get("metadata", {}).get("labels")) or not fields_ok(obj):
                    continue
                items.append((key, obj))
            meta = {"resourceVersion": str(self.store.revision)}
            if limit and len(items) > limit:
                meta["continue"] = base64.b64encode(json.dumps(list(items[limit - 1][0])).encode()).decode()
                meta["remainingItemCount"] = len(items) - limit
                items = items[:limit]
            rendered = []
            for _key, obj in items:
                obj = self._decorate(rtype, copy.deepcopy(obj))
                if not rtype.custom:
                    # typed lists carry kind/apiVersion on the list, not on items
                    obj.pop("kind", None)
                    obj.pop("apiVersion", None)
                rendered.append(obj)
            return {"kind": rtype.kind + "List", "apiVersion": rtype.api_version, "metadata": meta,
                    "items": rendered}

    # -- writes ------------------------------------------------------------
    def _check_body(self, rtype, body, namespace):
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        if body.get("apiVersion") and body["apiVersion"] != rtype.api_version:
            raise bad_request("the API version in the data (%s) does not match the expected API version (%s)"
                              % (body["apiVersion"], rtype.api_version))
        if body.get("kind") and body["kind"] != rtype.kind:
            raise bad_request("the kind in the data (%s) does not match the expected kind (%s)"
                              % (body["kind"], rtype.kind))
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("json: cannot unmarshal into Go struct field .metadata of type v1.ObjectMeta")
        if rtype.namespaced:
            if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                raise bad_request("the namespace of the provided object does not match the namespace sent on "
                                  "the request")
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        check_string_maps(body)
        body["kind"] = rtype.kind
        body["apiVersion"] = rtype.api_version

    def create(self, rtype, namespace, body, dry_run=False, auto_namespace=False):
        with self.store.lock:
            body = copy.deepcopy(body)
            self._check_body(rtype, body, namespace)
            meta = body["metadata"]
            if not meta.get("name"):
                if meta.get("generateName"):
                    meta["name"] = meta["generateName"] + "".join(
                        secrets.choice("bcdfghjklmnpqrstvwxz2456789") for _index in range(5))
                else:
                    message = "Required value: name or generateName is required"
                    raise invalid(rtype, "", [_required("metadata.name", message)])
            if rtype.namespaced:
                try:
                    self._require_namespace(meta["namespace"])
                except ApiError:
                    if not auto_namespace:
                        raise
                    self.create(BUILTIN_TYPES[0], None, {"metadata": {"name": meta["namespace"]}})
            key = self._key(rtype, meta.get("namespace", ""), meta["name"])
            if key in self.store.objects:
                raise already_exists(rtype, meta["name"])
            for field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
                meta.pop(field, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            if rtype.generation:
                meta["generation"] = 1
            if rtype.kind == "Namespace" and not rtype.custom:
                body.setdefault("spec", {"finalizers": ["kubernetes"]})
                body["status"] = {"phase": "Active"}
            if rtype.kind == "Pod" and not rtype.custom:
                body.setdefault("status", {}).setdefault("phase", "Pending")
                admit_pod_create(self.store, rtype, body)  # ValidatingAdmissionPolicy, see "Admission"
            return self._finish_write(rtype, None, body, dry_run)

    def _merge_immutable(self, rtype, old, new, subresource):
        """Carry server-owned fields from `old` into `new`."""
        new_meta = new.setdefault("metadata", {})
        for field in ("uid", "creationTimestamp", "namespace", "deletionTimestamp",
                      "deletionGracePeriodSeconds", "generation"):
            if field in old["metadata"]:
                new_meta[field] = old["metadata"][field]
            else:
                new_meta.pop(field, None)
        new_meta["name"] = old["metadata"]["name"]
        if subresource == "status":
            status = new.get("status")
            new = copy.deepcopy(old)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        elif "status" in rtype.subresources:
            # the main resource ignores status changes when a status subresource exists
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        return new

    def _check_precondition(self, rtype, old, new):
        wanted = (new.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != old["metadata"]["resourceVersion"]:
            raise conflict(rtype, old["metadata"]["name"])

    def replace(self, rtype, namespace, name, body, subresource=None, dry_run=False):
        with self.store.lock:
            body = copy.deepcopy(body)
            self._check_body(rtype, body, namespace)
            if body["metadata"].get("name") and body["metadata"]["name"] != name:
                raise bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                                  % (body["metadata"]["name"], name))
            body["metadata"]["name"] = name
            old = self._get(rtype, namespace, name)
            self._check_precondition(rtype, old, body)
            new = self._merge_immutable(rtype, old, body, subresource)
            return self._finish_write(rtype, old, new, dry_run)

    def patch(self, rtype, namespace, name, content_type, raw_body, subresource=None, dry_run=False,
              field_manager=None, force=False):
        with self.store.lock:
            ctype = (content_type or "").split(";")[0].strip()
            if ctype == "application/apply-patch+yaml":
                if not field_manager:
                    raise ApiError(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: '
                                                   'Required value: is required for apply patch')
                patch = parse_yaml_or_json(raw_body)
                key = self._key(rtype, namespace, name)
                if key not in self.store.objects:
                    if isinstance(patch, dict):
                        patch.setdefault("metadata", {})["name"] = name
                    return self.create(rtype, namespace, patch, dry_run=dry_run), True
            else:
                try:
                    patch = json.loads(raw_body or b"null")
                except ValueError as exc:
                    raise bad_request("error decoding patch: %s" % exc)
            old = self._get(rtype, namespace, name)
            if ctype == "application/json-patch+json":
                try:
                    new = json_patch(old, patch)
                except JsonPatchError as exc:
                    raise ApiError(422, "Invalid", str(exc))
            elif ctype == "application/merge-patch+json":
                if not isinstance(patch, dict):
                    raise bad_request("json: cannot unmarshal %s into Go value of type map[string]interface {}"
                                      % type(patch).__name__)
                new = merge_patch(old, patch)
            elif ctype in ("application/strategic-merge-patch+json", "application/apply-patch+yaml"):
                if rtype.custom and ctype != "application/apply-patch+yaml":
                    raise ApiError(415, "UnsupportedMediaType",
                                   "the body of the request was in an unknown format - accepted media types "
                                   "include: application/json-patch+json, application/merge-patch+json, "
                                   "application/apply-patch+yaml")
                if not isinstance(patch, dict):
                    raise bad_request("json: cannot unmarshal %s into Go value of type map[string]interface {}"
                                      % type(patch).__name__)
                new = strategic_merge_patch(old, patch)
            else:
                raise ApiError(415, "UnsupportedMediaType",
                               "the body of the request was in an unknown format - accepted media types "
                               "include: application/json-patch+json, application/merge-patch+json, "
                               "application/apply-patch+yaml, application/strategic-merge-patch+json")
            if not isinstance(new, dict):
                raise bad_request("the patch did not produce an object")
            self._check_body(rtype, new, namespace)
            if (new["metadata"].get("name") or name) != name:
                raise bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                                  % (new["metadata"]["name"], name))
            self._check_precondition(rtype, old, new)
            new = self._merge_immutable(rtype, old, new, subresource)
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            return self._finish_write(rtype, old, new, dry_run), False

    def delete(self, rtype, namespace, name, options=None, dry_run=False):
        """Return (http_code, body)."""
        with self.store.lock:
            old = self._get(rtype, namespace, name)
            pre = (options or {}).get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != old["metadata"].get("uid"):
                raise conflict(rtype, name, "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                               % (pre["uid"], old["metadata"].get("uid")))
            if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
                raise conflict(rtype, name, "Precondition failed: ResourceVersion in precondition: %s, "
                                            "ResourceVersion in object meta: %s"
                               % (pre["resourceVersion"], old["metadata"]["resourceVersion"]))
            if old["metadata"].get("finalizers"):
                new = copy.deepcopy(old)
                if not new["metadata"].get("deletionTimestamp"):
                    new["metadata"]["deletionTimestamp"] = now_rfc3339()
                    new["metadata"]["deletionGracePeriodSeconds"] = 0
                    if not dry_run:
                        new["metadata"]["resourceVersion"] = self.store.bump()
                        self.store.objects[self._key(rtype, namespace, name)] = new
                        self.store.save()
                        self.store.notify()
                return 202, new
            result = copy.deepcopy(old)
            if not dry_run:
                self._remove(rtype, namespace, name)
            if rtype.kind == "Pod" and not rtype.custom:
                result["metadata"]["deletionTimestamp"] = now_rfc3339()
                result["metadata"]["deletionGracePeriodSeconds"] = 0
                return 200, result
            status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                      "details": dict(_details(rtype, name), uid=old["metadata"].get("uid"))}
            return 200, status

    def _remove(self, rtype, namespace, name):
        removed = self.store.objects.pop(self._key(rtype, namespace, name))
        if rtype.kind == "Node" and not rtype.custom:
            record_node_history(self.store, removed, None)
        if rtype.kind == "Namespace" and not rtype.custom:
            for key in [k for k in self.store.objects if k[2] == name]:
                del self.store.objects[key]
        if rtype.kind == "CustomResourceDefinition" and not rtype.custom:
            group, plural = name.split(".", 1)[1], name.split(".", 1)[0]
            for key in [k for k in self.store.objects if k[0] == group and k[1] == plural]:
                del self.store.objects[key]
        self.store.bump()
        self.store.save()
        self.store.notify()

    def delete_collection(self, rtype, namespace, label_selector=None, field_selector=None, dry_run=False):
        with self.store.lock:
            listing = self.list(rtype, namespace, label_selector, field_selector)
            for item in listing["items"]:
                self.delete(rtype, item["metadata"].get("namespace", ""), item["metadata"]["name"],
                            dry_run=dry_run)
            listing["metadata"] = {"resourceVersion": str(self.store.revision)}
            return listing

    # -- eviction ----------------------------------------------------------
    def _pods_for(self, namespace, selector):
        pods = []
        for key, obj in self.store.objects.items():
            if key[0] == "" and key[1] == "pods" and key[2] == namespace:
                if match_label_selector_object(selector, obj.get("metadata", {}).get("labels")):
                    pods.append(obj)
        return pods

    @staticmethod
    def _pod_healthy(pod):
        if pod["metadata"].get("deletionTimestamp"):
            return False
        status = pod.get("status") or {}
        if status.get("phase") != "Running":
            return False
        for cond in status.get("conditions") or []:
            if cond.get("type") == "Ready":
                return cond.get("status") == "True"
        return True  # no kubelet here: a Running pod without conditions counts as ready

    @staticmethod
    def _scaled(value, total, round_up):
        if isinstance(value, str) and value.endswith("%"):
            fraction = int(value[:-1]) * total / 100.0
            return int(-(-fraction // 1)) if round_up else int(fraction)
        return int(value)

    def _pdb_status(self, pdb):
        spec = pdb.get("spec") or {}
        pods = [p for p in self._pods_for(pdb["metadata"]["namespace"], spec.get("selector"))
                if not p["metadata"].get("deletionTimestamp")]
        expected = len(pods)
        healthy = len([p for p in pods if self._pod_healthy(p)])
        if "maxUnavailable" in spec:
            desired = max(0, expected - self._scaled(spec["maxUnavailable"], expected, True))
        else:
            desired = self._scaled(spec.get("minAvailable", 1), expected, True)
        return {"currentHealthy": healthy, "desiredHealthy": desired, "expectedPods": expected,
                "disruptionsAllowed": max(0, healthy - desired),
                "observedGeneration": pdb["metadata"].get("generation", 1)}

    def evict(self, namespace, name, body, dry_run=False):
        pod_type = BUILTIN_TYPES[2]
        with self.store.lock:
            pod = self._get(pod_type, namespace, name)
            if not isinstance(body, dict) or body.get("kind") not in (None, "Eviction"):
                raise bad_request("the body of the request was in an unknown format")
            phase = (pod.get("status") or {}).get("phase")
            if phase not in ("Succeeded", "Failed", "Pending") and not pod["metadata"].get("deletionTimestamp"):
                pdbs = [obj for key, obj in self.store.objects.items()
                        if key[1] == "poddisruptionbudgets" and key[2] == namespace
                        and match_label_selector_object((obj.get("spec") or {}).get("selector"),
                                                        pod["metadata"].get("labels"))]
                if len(pdbs) > 1:
                    raise ApiError(500, "InternalError", "This pod has more than one PodDisruptionBudget, which "
                                                         "the eviction subresource does not support.")
                if pdbs:
                    status = self._pdb_status(pdbs[0])
                    if status["disruptionsAllowed"] <= 0:
                        raise ApiError(429, "TooManyRequests",
                                       "Cannot evict pod as it would violate the pod's disruption budget.",
                                       {"causes": [{"reason": "DisruptionBudget", "message":
                                                    "The disruption budget %s needs %d healthy pods and has %d "
                                                    "currently" % (pdbs[0]["metadata"]["name"],
                                                                   status["desiredHealthy"],
                                                                   status["currentHealthy"])}]})
            self.delete(pod_type, namespace, name, (body or {}).get("deleteOptions"), dry_run=dry_run)
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


# ---------------------------------------------------------------------------
# Admission: ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1)
#
# Bound policies are enforced on Pod create, evaluated with a real CEL engine
# (cel-expr-python, Google's CEL C++ runtime; imported only when a bound policy
# matches, so the stand-in starts without it).  What is implemented is what
# gpu_native.fleet's policies need: matchConstraints.resourceRules,
# namespaceSelector and objectSelector (policy and binding), matchConditions,
# variables, validations with message/messageExpression, failurePolicy, and
# the binding's validationActions (Deny refuses with 422 like kube-apiserver;
# Warn and Audit let the request through).  No paramKind/paramRef, no
# auditAnnotations, no type checking against the OpenAPI schema (every
# variable is dyn), and variables are evaluated eagerly (an error is reported
# only where a validation uses that variable, as with lazy evaluation).
# ---------------------------------------------------------------------------

ADMISSION_TYPES = [
    ResourceType("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies",
                 "ValidatingAdmissionPolicy", False, [], ("status",), generation=True),
    ResourceType("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings",
                 "ValidatingAdmissionPolicyBinding", False, [], (), generation=True),
]
BUILTIN_TYPES.extend(ADMISSION_TYPES)

CEL_ACTIVATION_NAMES = ("object", "oldObject", "request", "namespaceObject", "params", "variables", "authorizer")
_CEL_STATE = {}
_CEL_LOCK = threading.Lock()


class CelUnavailable(Exception):
    pass


def _cel_engine():
    """(cel module, env), created on first use."""
    with _CEL_LOCK:
        if "env" not in _CEL_STATE:
            try:
                from cel_expr_python import cel  # pylint: disable=import-outside-toplevel
                from cel_expr_python.ext import ext_strings  # pylint: disable=import-outside-toplevel
            except ImportError as exc:
                raise CelUnavailable("the cel-expr-python package is missing (%s); install requirements.txt" % exc)
            _CEL_STATE["cel"] = cel
            _CEL_STATE["env"] = cel.NewEnv(variables={name: cel.Type.DYN for name in CEL_ACTIVATION_NAMES},
                                           extensions=[ext_strings.ExtStrings()])
            _CEL_STATE["programs"] = {}
        return _CEL_STATE["cel"], _CEL_STATE["env"]


def cel_evaluate(expression, activation):
    """Evaluate one CEL expression; return (value, None) or (None, error text)."""
    cel, env = _cel_engine()
    programs = _CEL_STATE["programs"]
    try:
        program = programs.get(expression)
        if program is None:
            program = env.compile(expression)
            if len(programs) < 1024:
                programs[expression] = program
        result = program.eval(data=activation)
    except Exception as exc:  # compile errors and engine faults: an error, as in the API server
        return None, "compilation or evaluation failed: %s" % exc
    if result.type() == cel.Type.ERROR:
        return None, str(result.value())
    return result.plain_value(), None


def vap_evaluate(spec, obj, namespace_obj=None, request=None, old_obj=None):
    """Evaluate a ValidatingAdmissionPolicy spec's CEL parts over `obj` as kube-apiserver does.

    Returns (applies, failures): applies is False when a match condition is false (or errors under
    failurePolicy Ignore); failures lists the messages of the failed validations, in order.
    """
    fail_closed = (spec.get("failurePolicy") or "Fail") == "Fail"
    activation = {"object": obj, "oldObject": old_obj, "request": request or {}, "namespaceObject": namespace_obj,
                  "params": None, "authorizer": None, "variables": {}}
    condition_errors = []
    for condition in spec.get("matchConditions") or []:
        value, error = cel_evaluate(condition["expression"], activation)
        if error is None and value is False:
            return False, []
        if error is not None or not isinstance(value, bool):
            condition_errors.append("failed to evaluate matchCondition %s: %s"
                                    % (condition.get("name"), error or "result is not a bool"))
    if condition_errors:
        return (True, condition_errors[:1]) if fail_closed else (False, [])
    variables, variable_errors = {}, {}
    for variable in spec.get("variables") or []:
        activation["variables"] = variables
        value, error = cel_evaluate(variable["expression"], activation)
        if error is None:
            variables[variable["name"]] = value
        else:
            variable_errors[variable["name"]] = error
    activation["variables"] = variables
    failures = []
    for validation in spec.get("validations") or []:
        expression = validation["expression"]
        used = [name for name in variable_errors if re.search(r"\bvariables\.%s\b" % re.escape(name), expression)]
        value, error = (None, "variable %s: %s" % (used[0], variable_errors[used[0]])) if used \
            else cel_evaluate(expression, activation)
        if error is None and value is True:
            continue
        if error is not None or not isinstance(value, bool):
            if fail_closed:
                failures.append("expression '%s' resulted in error: %s" % (expression, error or "not a bool"))
            continue
        message = None
        if validation.get("messageExpression"):
            text, text_error = cel_evaluate(validation["messageExpression"], activation)
            if text_error is None and isinstance(text, str) and text.strip() and "\n" not in text:
                message = text
        if message is None:
            message = validation.get("message") or "failed expression: %s" % expression
        failures.append(message)
    return True, failures


def _vap_rule_matches(rules, group, version, resource, operation):
    for rule in rules or []:
        if not any(item in ("*", group) for item in rule.get("apiGroups") or []):
            continue
        if not any(item in ("*", version) for item in rule.get("apiVersions") or []):
            continue
        if not any(item in ("*", operation) for item in rule.get("operations") or []):
            continue
        if any(item in ("*", resource, resource + "/*") for item in rule.get("resources") or []):
            return True
    return False


def _selector_matches(selector, labels):
    return selector is None or match_label_selector_object(selector, labels)


def _match_resources(match, namespace_labels, object_labels, resource, operation, need_rules):
    match = match or {}
    if need_rules or match.get("resourceRules"):
        if not _vap_rule_matches(match.get("resourceRules"), "", "v1", resource, operation):
            return False
    if _vap_rule_matches(match.get("excludeResourceRules"), "", "v1", resource, operation):
        return False
    return (_selector_matches(match.get("namespaceSelector"), namespace_labels)
            and _selector_matches(match.get("objectSelector"), object_labels))


def admit_pod_create(store, rtype, pod):
    """Run the bound ValidatingAdmissionPolicies on a Pod create; raise 422 like kube-apiserver on Deny."""
    if rtype.custom or validate_object(rtype, normalise_typed(rtype, copy.deepcopy(pod))):
        return  # validation errors come first, as on the real server (validating admission runs after)
    policy_type, binding_type = ADMISSION_TYPES
    bindings = sorted((obj for key, obj in store.objects.items()
                       if key[0] == binding_type.group and key[1] == binding_type.plural),
                      key=lambda obj: obj["metadata"]["name"])
    if not bindings:
        return
    namespace = pod["metadata"].get("namespace", "")
    namespace_obj = copy.deepcopy(store.objects.get(("", "namespaces", "", namespace)) or {})
    namespace_labels = dict(namespace_obj.get("metadata", {}).get("labels") or {})
    namespace_labels["kubernetes.io/metadata.name"] = namespace  # the API server always sets this label
    object_labels = pod["metadata"].get("labels") or {}
    request = {"operation": "CREATE", "namespace": namespace, "name": pod["metadata"].get("name", ""),
               "kind": {"group": "", "version": "v1", "kind": "Pod"},
               "resource": {"group": "", "version": "v1", "resource": "pods"}, "dryRun": False}
    pod_view = normalise_typed(rtype, copy.deepcopy(pod))
    for binding in bindings:
        spec = binding.get("spec") or {}
        policy = store.objects.get((policy_type.group, policy_type.plural, "", spec.get("policyName")))
        if policy is None or "Deny" not in (spec.get("validationActions") or []):
            continue  # a binding to a missing policy does nothing; Warn/Audit never refuse
        policy_spec = policy.get("spec") or {}
        if not _match_resources(policy_spec.get("matchConstraints"), namespace_labels, object_labels,
                                "pods", "CREATE", True):
            continue
        if not _match_resources(spec.get("matchResources"), namespace_labels, object_labels, "pods", "CREATE",
                                False):
            continue
        try:
            _applies, failures = vap_evaluate(policy_spec, pod_view, namespace_obj or None, request)
        except CelUnavailable as exc:
            raise ApiError(500, "InternalError", "k8s stand-in: ValidatingAdmissionPolicy '%s' cannot be "
                                                 "evaluated: %s" % (policy["metadata"]["name"], exc))
        if failures:
            name = pod["metadata"].get("name", "")
            message = "ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s" % (
                policy["metadata"]["name"], binding["metadata"]["name"], failures[0])
            raise ApiError(422, "Invalid", 'pods "%s" is forbidden: %s' % (name, message),
                           {"name": name, "kind": "pods", "causes": [{"message": message}]})


def parse_yaml_or_json(raw):
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        import yaml  # only the controller's venv has it; JSON bodies need nothing
    except ImportError:
        raise bad_request("YAML bodies need PyYAML next to the stand-in; send JSON instead")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise bad_request("error converting YAML to JSON: %s" % exc)


def load_seed_documents(path):
    """Seed files: YAML (multi-document) or JSON; a document may be a List or a plain list."""
    with open(path, "rb") as handle:
        raw = handle.read()
    text = raw.decode("utf-8")
    docs = []
    try:
        docs = [json.loads(text)]
    except ValueError:
        import yaml
        docs = list(yaml.safe_load_all(text))
    objects = []
    for doc in docs:
        if doc is None:
            continue
        if isinstance(doc, list):
            objects.extend(doc)
        elif isinstance(doc, dict) and doc.get("kind", "").endswith("List") and "items" in doc:
            objects.extend(doc["items"])
        else:
            objects.append(doc)
    return objects


# ---------------------------------------------------------------------------
# HTTP layer
# ---------------------------------------------------------------------------

class Handler(BaseHTTPRequestHandler):
    server_version = "kube-apiserver-standin"
    protocol_version = "HTTP/1.1"

    # silence the default stderr access log unless --verbose
    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("%s %s\n" % (self.log_date_time_string(), fmt % args))

    @property
    def api(self):
        return self.server.api

    def _send(self, code, body, content_type="application/json"):
        data = json.dumps(body).encode("utf-8") if not isinstance(body, bytes) else body
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _json_body(self):
        raw = self._body()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return parse_yaml_or_json(raw)

    def _authorised(self):
        token = self.server.token
        if not token:
            return True
        header = self.headers.get("Authorization", "")
        return header == "Bearer " + token

    def _dispatch(self):
        try:
            if not self._authorised():
                self._send(401, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                 "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
                return
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            code, body = self.route(url.path.rstrip("/") or "/", query)
            if code is None:
                return  # a watch already streamed its answer
            if isinstance(body, str):
                self._send(code, body.encode("utf-8"), "text/plain; charset=utf-8")
            else:
                self._send(code, body)
        except ApiError as exc:
            self._send(exc.code, exc.status())
        except Exception as exc:  # a stand-in bug must surface as a 500, not a hung client
            error = ApiError(500, "InternalError", "stand-in internal error: %s: %s" % (type(exc).__name__, exc))
            self._send(500, error.status())
            if self.server.verbose:
                import traceback
                traceback.print_exc()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _dispatch

    # -- routing -----------------------------------------------------------
    def route(self, path, query):
        method = self.command if self.command != "HEAD" else "GET"
        store = self.server.store
        if path in ("/healthz", "/livez", "/readyz"):
            return 200, "ok"
        if path == "/version":
            return 200, KUBE_VERSION
        if path == "/api":
            return 200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:%d" % self.server.server_port}]}
        with store.lock:
            types = store.types()
        if path == "/apis":
            return 200, self._group_list(types)
        parts = path.strip("/").split("/")
        if parts[0] == "api":
            group, rest = "", parts[1:]
        elif parts[0] == "apis" and len(parts) >= 2:
            group, rest = parts[1], parts[2:]
            if not rest:
                groups = [g for g in self._group_list(types)["groups"] if g["name"] == group]
                if not groups:
                    raise ApiError(404, "NotFound", "the server could not find the requested resource")
                return 200, dict(groups[0], kind="APIGroup", apiVersion="v1")
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        version, rest = rest[0], rest[1:]
        in_version = [t for t in types if t.group == group and t.version == version]
        if not in_version:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            if method != "GET":
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                                        "resource")
            resources = []
            for rtype in in_version:
                resources.extend(rtype.discovery())
            return 200, {"kind": "APIResourceList", "apiVersion": "v1",
                         "groupVersion": "%s/%s" % (group, version) if group else version,
                         "resources": resources}
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            candidate = store.find_type(group, version, rest[2])
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        rtype = store.find_type(group, version, rest[0])
        if rtype is None or len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) >= 2 else None
        subresource = rest[2] if len(rest) == 3 else None
        if subresource and subresource not in rtype.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return self.resource_call(method, rtype, namespace, name, subresource, query)

    @staticmethod
    def _group_list(types):
        groups = {}
        for rtype in types:
            if rtype.group:
                groups.setdefault(rtype.group, [])
                if rtype.version not in groups[rtype.group]:
                    groups[rtype.group].append(rtype.version)
        result = []
        for name in sorted(groups):
            versions = [{"groupVersion": "%s/%s" % (name, v), "version": v} for v in groups[name]]
            result.append({"name": name, "versions": versions, "preferredVersion": versions[0]})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": result}

    def resource_call(self, method, rtype, namespace, name, subresource, query):
        dry_run = query.get("dryRun") == "All"
        if query.get("dryRun") not in (None, "", "All"):
            raise bad_request('Invalid dry run value: "%s"; supported values: "All"' % query.get("dryRun"))
        if rtype.namespaced and namespace is None and name is not None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rtype.namespaced and namespace is not None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        api = self.api
        if name is None:
            if method == "GET":
                if query.get("watch") in ("true", "1"):
                    return self._watch(rtype, namespace, query)
                limit = int(query["limit"]) if query.get("limit") else None
                return 200, api.list(rtype, namespace, query.get("labelSelector"), query.get("fieldSelector"),
                                     limit, query.get("continue"))
            if method == "POST":
                return 201, api.create(rtype, namespace, self._json_body(), dry_run=dry_run)
            if method == "DELETE":
                return 200, api.delete_collection(rtype, namespace, query.get("labelSelector"),
                                                  query.get("fieldSelector"), dry_run=dry_run)
        else:
            if subresource == "eviction":
                if method != "POST":
                    raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the "
                                                            "requested resource")
                return 201, api.evict(namespace, name, self._json_body(), dry_run=dry_run)
            if method == "GET":
                return 200, api.get(rtype, namespace, name)
            if method == "PUT":
                return 200, api.replace(rtype, namespace, name, self._json_body(), subresource, dry_run=dry_run)
            if method == "PATCH":
                obj, created = api.patch(rtype, namespace, name, self.headers.get("Content-Type"), self._body(),
                                         subresource, dry_run=dry_run, field_manager=query.get("fieldManager"),
                                         force=query.get("force") == "true")
                return (201 if created else 200), obj
            if method == "DELETE" and subresource is None:
                return api.delete(rtype, namespace, name, self._json_body(), dry_run=dry_run)
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def _watch(self, rtype, namespace, query):
        """Minimal watch: ADDED for current objects, then changes, until timeoutSeconds."""
        timeout = float(query.get("timeoutSeconds") or 30)
        labels_ok = parse_label_selector(query.get("labelSelector"))
        fields_ok = parse_field_selector(rtype, query.get("fieldSelector"))
        store = self.server.store

        def snapshot():
            with store.lock:
                return {k: copy.deepcopy(v) for k, v in store.objects.items()
                        if k[0] == rtype.group and k[1] == rtype.plural and (not namespace or k[2] == namespace)
                        and labels_ok(v.get("metadata", {}).get("labels")) and fields_ok(v)}

        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def emit(kind, obj):
            line = (json.dumps({"type": kind, "object": obj}) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()

        since = query.get("resourceVersion")
        seen = snapshot()
        if not since or since == "0":
            for obj in seen.values():
                emit("ADDED", obj)
        deadline = time.time() + timeout
        try:
            while time.time() < deadline and not self.server.stopping:
                with store.lock:
                    store.changed.wait(min(0.5, max(0.01, deadline - time.time())))
                current = snapshot()
                for key, obj in current.items():
                    if key not in seen:
                        emit("ADDED", obj)
                    elif seen[key]["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                        emit("MODIFIED", obj)
                for key, obj in seen.items():
                    if key not in current:
                        emit("DELETED", obj)
                seen = current
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True
        return None, None


class StandinHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, store, token=None, verbose=False):
        ThreadingHTTPServer.__init__(self, address, Handler)
        self.store = store
        self.api = Api(store)
        self.token = token
        self.verbose = verbose
        self.stopping = False


# ---------------------------------------------------------------------------
# Embedding (pytest) and CLI
# ---------------------------------------------------------------------------

def kubeconfig_text(server_url, token, namespace="default"):
    lines = [
        "# Kubernetes API stand-in (tests/k8s_standin): a test server, not a cluster.",
        "apiVersion: v1",
        "kind: Config",
        "clusters:",
        "  - name: k8s-standin",
        "    cluster:",
        "      server: %s" % server_url,
        "users:",
        "  - name: k8s-standin-admin",
        "    user:",
    ]
    lines.append("      token: %s" % token if token else "      {}")
    lines += [
        "contexts:",
        "  - name: k8s-standin",
        "    context:",
        "      cluster: k8s-standin",
        "      user: k8s-standin-admin",
        "      namespace: %s" % namespace,
        "current-context: k8s-standin",
        "preferences: {}",
        "",
    ]
    return "\n".join(lines)


class KubeStandin:
    """The stand-in in a background thread, for pytest fixtures."""

    def __init__(self, state_dir=None, seed=None, seed_files=(), token=None, port=0, default_crds=True,
                 verbose=False):
        self.state_dir = state_dir
        state_path = os.path.join(state_dir, STATE_FILE_NAME) if state_dir else None
        self.store = Store(state_path)
        if state_path and os.path.exists(state_path):
            self.store.load()
        else:
            bootstrap(self.store, default_crds)
            for path in seed_files:
                apply_seed(self.store, load_seed_documents(path))
            if seed:
                apply_seed(self.store, seed)
        self.token = token if token is not None else secrets.token_hex(16)
        self.httpd = StandinHTTPServer(("127.0.0.1", port), self.store, self.token, verbose)
        self.thread = None

    @property
    def port(self):
        return self.httpd.server_port

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def write_kubeconfig(self, path, namespace="default"):
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(kubeconfig_text(self.url, self.token, namespace))
        os.chmod(path, 0o600)
        return path

    def start(self):
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="k8s-standin", daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.httpd.stopping = True
        self.httpd.shutdown()
        self.httpd.server_close()
        with self.store.lock:
            self.store.save()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def bootstrap(store, default_crds=True):
    api = Api(store)
    for name in DEFAULT_NAMESPACES:
        api.create(BUILTIN_TYPES[0], None, {"metadata": {"name": name, "labels": {
            "kubernetes.io/metadata.name": name}}})
    if default_crds:
        crd_type = [t for t in BUILTIN_TYPES if t.kind == "CustomResourceDefinition"][0]
        for group, version, plural, kind, scope, short in DEFAULT_CRDS:
            api.create(crd_type, None, {"metadata": {"name": "%s.%s" % (plural, group)}, "spec": {
                "group": group, "scope": scope,
                "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": kind + "List",
                          "shortNames": short},
                "versions": [{"name": version, "served": True, "storage": True,
                              "schema": {"openAPIV3Schema": {"type": "object",
                                                             "x-kubernetes-preserve-unknown-fields": True}}}]}})


def apply_seed(store, objects):
    """Create seed objects through the API (validated), creating missing namespaces."""
    api = Api(store)
    for obj in objects:
        if not isinstance(obj, dict) or "apiVersion" not in obj or "kind" not in obj:
            raise SystemExit("seed object without apiVersion/kind: %r" % (obj,))
        group, _slash, version = obj["apiVersion"].rpartition("/")
        with store.lock:
            candidates = [t for t in store.types() if t.group == group and t.version == version
                          and t.kind == obj["kind"]]
        if not candidates:
            raise SystemExit("seed object %s/%s: no resource for apiVersion %s kind %s (seed its "
                             "CustomResourceDefinition first)" % (obj["kind"], obj.get("metadata", {}).get("name"),
                                                                  obj["apiVersion"], obj["kind"]))
        rtype = candidates[0]
        namespace = (obj.get("metadata") or {}).get("namespace") or ("default" if rtype.namespaced else None)
        try:
            api.create(rtype, namespace, obj, auto_namespace=True)
        except ApiError as exc:
            raise SystemExit("seed object rejected: %s" % exc.message)


def _wait_for_file(path, seconds, child):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if os.path.exists(path):
            return True
        if child is not None and child.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def cmd_serve(args):
    if not args.state_dir:
        raise SystemExit("--state-dir is required")
    os.makedirs(args.state_dir, exist_ok=True)
    kubeconfig = args.kubeconfig_out or os.path.join(args.state_dir, "kubeconfig")
    pidfile = args.pidfile or os.path.join(args.state_dir, "server.pid")
    state_path = os.path.join(args.state_dir, STATE_FILE_NAME)
    if args.reset:
        for path in (state_path, os.path.join(args.state_dir, NODE_HISTORY_FILE)):
            if os.path.exists(path):
                os.remove(path)

    if args.daemon:
        # Re-run ourselves detached; return once the kubeconfig is written, so
        # a Molecule prepare step can use it right away.
        for path in (kubeconfig, pidfile):
            if os.path.exists(path):
                os.remove(path)
        argv = [sys.executable, os.path.abspath(__file__), "serve"] + [
            a for a in sys.argv[1:] if a not in ("serve", "--daemon", "--reset")]
        log_path = os.path.join(args.state_dir, "server.log")
        with open(log_path, "ab") as log, open(os.devnull, "rb") as devnull:
            child = subprocess.Popen(argv, stdin=devnull, stdout=log, stderr=log, start_new_session=True,
                                     close_fds=True)
        if not _wait_for_file(kubeconfig, 30, child):
            sys.stderr.write("k8s stand-in did not start; see %s\n" % log_path)
            if child.poll() is None:
                child.terminate()
            raise SystemExit(1)
        with open(kubeconfig, "r", encoding="utf-8") as handle:
            server = [line.split()[-1] for line in handle if "server:" in line][0]
        print(json.dumps({"pid": child.pid, "server": server, "kubeconfig": kubeconfig, "pidfile": pidfile,
                          "state_dir": args.state_dir}))
        return 0

    seed_files = args.seed or []
    standin = KubeStandin(state_dir=args.state_dir, seed_files=seed_files, token=args.token, port=args.port,
                          default_crds=not args.no_default_crds, verbose=args.verbose)
    with open(pidfile + ".tmp", "w", encoding="utf-8") as handle:
        handle.write("%d\n" % os.getpid())
    os.replace(pidfile + ".tmp", pidfile)

    def _terminate(_signum, _frame):
        threading.Thread(target=standin.stop, daemon=True).start()

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    standin.write_kubeconfig(kubeconfig + ".tmp")
    os.replace(kubeconfig + ".tmp", kubeconfig)
    sys.stdout.write("k8s stand-in listening on %s (state %s)\n" % (standin.url, args.state_dir))
    sys.stdout.flush()
    standin.httpd.serve_forever()
    with standin.store.lock:
        standin.store.save()
    try:
        os.remove(pidfile)
    except OSError:
        pass
    return 0


def cmd_stop(args):
    pidfile = args.pidfile or (os.path.join(args.state_dir, "server.pid") if args.state_dir else None)
    if not pidfile:
        raise SystemExit("stop needs --pidfile or --state-dir")
    if not os.path.exists(pidfile):
        print(json.dumps({"stopped": False, "reason": "no pidfile %s" % pidfile}))
        return 0
    with open(pidfile, "r", encoding="utf-8") as handle:
        pid = int(handle.read().strip())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        os.remove(pidfile)
        print(json.dumps({"stopped": False, "reason": "process %d not running" % pid}))
        return 0
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
    if os.path.exists(pidfile):
        os.remove(pidfile)
    print(json.dumps({"stopped": True, "pid": pid}))
    return 0


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main(argv=None):
    parser = argparse.ArgumentParser(description="Kubernetes API stand-in for gpu_native.fleet tests "
                                                 "(binds 127.0.0.1 only).")
    parser.add_argument("command", nargs="?", choices=("serve", "stop"), default="serve")
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--state-dir", help="directory for state.json, server.log, kubeconfig, server.pid")
    parser.add_argument("--seed", action="append",
                        help="YAML/JSON file of objects to create on a fresh state (repeatable)")
    parser.add_argument("--kubeconfig-out", help="where to write the kubeconfig (default STATE_DIR/kubeconfig)")
    parser.add_argument("--pidfile", help="pid file (default STATE_DIR/server.pid)")
    parser.add_argument("--token", help="bearer token clients must send (default: random)")
    parser.add_argument("--daemon", action="store_true", help="detach; return once the kubeconfig is written")
    parser.add_argument("--reset", action="store_true",
                        help="discard an existing state.json (and node-history.jsonl) first")
    parser.add_argument("--no-default-crds", action="store_true", help="start without the monitoring.coreos.com "
                                                                       "CRDs")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)
    if args.command == "stop":
        return cmd_stop(args)
    return cmd_serve(args)


if __name__ == "__main__":
    sys.exit(main())
