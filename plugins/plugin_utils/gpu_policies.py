# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on the controller only (filter plugins); never imported by a module or the gpu_readiness agent.
"""GPU pod guardrails: one set of CEL rules rendered for Kyverno and for ValidatingAdmissionPolicy.

Public API
----------
``render_policy_objects(cel_data, engine, ...)``: the Kubernetes objects for
``engine`` (``vap``: a ``ValidatingAdmissionPolicy`` and its binding,
``admissionregistration.k8s.io/v1``; ``kyverno``: a ``ClusterPolicy`` with
``validate.cel``, ``kyverno.io/v1``, Kyverno 1.11 or newer; ``both``).
``cel_data`` is the role's data (``roles/gpu_policies/vars/main.yml``):

- ``match_condition``: a CEL expression over ``object`` that is true for a
  pod requesting a GPU (no ``variables``: the API server evaluates match
  conditions before them);
- ``variables``: ``[{name, expression}]`` shared by the rules;
- ``rules``: ``[{name, violations, message}]``; ``violations`` is a CEL
  expression giving a list of strings, one per thing to fix, empty when the
  pod complies; ``message`` says what to change.

Each rule becomes the variable ``rule_<name>`` (its violations), the
validation ``variables.rule_<name>.size() == 0``, the static ``message`` and a
``messageExpression`` that adds the first violation, e.g.
``GPU pods must set runtimeClassName: nvidia (container 'train' requests nvidia.com/gpu)``.

Expressions may hold the placeholders ``@GPU_RESOURCE_NAMES@`` and
``@GPU_RESOURCE_PREFIXES@`` (CEL lists of strings) and ``@RUNTIME_CLASS_NAME@``
(a CEL string); messages may hold ``@RUNTIME_CLASS_NAME@`` (plain text).

Every input is checked first; ``GpuPolicyError`` (a ``ValueError``) carries a
one-line cause naming the variable plus the fix.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError

ENGINES = ("vap", "kyverno", "both")
ACTIONS = ("Enforce", "Audit")
VAP_ACTIONS = ("Deny", "Warn", "Audit")
FAILURE_POLICIES = ("Fail", "Ignore")
RULE_KEYS = ("name", "violations", "message")
VARIABLE_KEYS = ("name", "expression")
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu_native.fleet"}
NAMESPACE_LABEL = "kubernetes.io/metadata.name"
MATCH_CONDITION_NAME = "requests-gpu"
# Bounds: a policy is small; these keep hostile input from producing a huge object.
MAX_RULES = 64
MAX_EXPRESSION = 5000  # characters; the API server caps expressions at 5 KiB-ish
MAX_MESSAGE = 1000
MAX_NAMESPACES = 256
MAX_RESOURCES = 64

_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_RULE_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_CEL_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# extended resource names: <domain>/<name>; a trailing * makes it a prefix (nvidia.com/mig-*)
_RESOURCE_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?[-_.]?\*?$")


class GpuPolicyError(FleetError, ValueError):
    """Invalid input; the message names the variable and the fix."""


def cel_string(text):
    """A CEL string literal for `text` (JSON string syntax is valid CEL)."""
    return json.dumps(text)


def cel_string_list(items):
    return "[" + ", ".join(cel_string(item) for item in items) + "]"


def _fail(text):
    raise GpuPolicyError(text)


def _check_names(value, varname, pattern, what, maximum):
    if not isinstance(value, list) or any(not isinstance(item, str) for item in value):
        _fail("%s must be a list of strings, got %r. Fix: give a YAML list." % (varname, value))
    if len(value) > maximum:
        _fail("%s has %d entries; at most %d are allowed. Fix: shorten the list." % (varname, len(value), maximum))
    for index, item in enumerate(value):
        if len(item) > 253 or not pattern.match(item):
            _fail("%s[%d] (%r) is not %s. Fix: correct or remove it." % (varname, index, item, what))
    duplicates = sorted(set(item for item in value if value.count(item) > 1))
    if duplicates:
        _fail("%s lists %s more than once. Fix: remove the duplicates." % (varname, ", ".join(duplicates)))


def check_rules(rules, varname):
    """Check `[{name, violations, message}]`; raise GpuPolicyError naming the first problem."""
    if not isinstance(rules, list):
        _fail("%s must be a list of rules ({name, violations, message}), got %s. Fix: give a YAML list."
              % (varname, type(rules).__name__))
    if len(rules) > MAX_RULES:
        _fail("%s has %d rules; at most %d are allowed. Fix: merge or drop rules." % (varname, len(rules), MAX_RULES))
    for index, rule in enumerate(rules):
        path = "%s[%d]" % (varname, index)
        if not isinstance(rule, dict):
            _fail("%s must be a mapping with keys %s. Fix: correct the rule." % (path, ", ".join(RULE_KEYS)))
        unknown = sorted(str(key) for key in rule if key not in RULE_KEYS)
        if unknown:
            _fail("%s has unknown keys %s. Fix: use only %s." % (path, ", ".join(unknown), ", ".join(RULE_KEYS)))
        missing = [key for key in RULE_KEYS if not isinstance(rule.get(key), str) or not rule.get(key).strip()]
        if missing:
            _fail("%s needs a non-empty string %s. Fix: add it (violations is a CEL list of strings, empty when "
                  "the pod complies)." % (path, " and ".join(missing)))
        name = rule["name"]
        if len(name) > 63 or not _RULE_NAME_RE.match(name):
            _fail("%s.name (%r) must be a lowercase name of letters, digits and '-', starting with a letter, at most "
                  "63 characters. Fix: rename the rule." % (path, name))
        if len(rule["violations"]) > MAX_EXPRESSION:
            _fail("%s.violations is %d characters long; at most %d are allowed. Fix: shorten the expression."
                  % (path, len(rule["violations"]), MAX_EXPRESSION))
        message = rule["message"]
        if len(message) > MAX_MESSAGE or "\n" in message or "\r" in message:
            _fail("%s.message must be one line of at most %d characters (the API server refuses line breaks). "
                  "Fix: shorten it." % (path, MAX_MESSAGE))


def _check_data(cel_data):
    """The role's own data; a problem here is a defect of the role, reported all the same."""
    if not isinstance(cel_data, dict) or not isinstance(cel_data.get("match_condition"), str):
        _fail("the role's CEL data (vars/main.yml __gpu_policies_cel) needs match_condition, variables and rules. "
              "Fix: restore the role's vars/main.yml.")
    variables = cel_data.get("variables") or []
    for index, variable in enumerate(variables):
        if (not isinstance(variable, dict) or sorted(variable) != sorted(VARIABLE_KEYS)
                or not _CEL_IDENT_RE.match(str(variable.get("name")))):
            _fail("__gpu_policies_cel.variables[%d] must be {name, expression} with a CEL identifier as name. "
                  "Fix: restore the role's vars/main.yml." % index)
    check_rules(cel_data.get("rules"), "__gpu_policies_cel.rules")


def _substitute_expression(text, values):
    for key, value in values.items():
        text = text.replace("@%s@" % key, value)
    return text


def rule_variable(rule_name):
    return "rule_" + rule_name.replace("-", "_")


def render_cel(cel_data, runtime_class_name, gpu_resources, extra_rules=()):
    """Return {match_condition, variables, validations} with every placeholder filled in."""
    names = [item for item in gpu_resources if not item.endswith("*")]
    prefixes = [item[:-1] for item in gpu_resources if item.endswith("*")]
    expression_values = {
        "GPU_RESOURCE_NAMES": cel_string_list(names),
        "GPU_RESOURCE_PREFIXES": cel_string_list(prefixes),
        "RUNTIME_CLASS_NAME": cel_string(runtime_class_name),
    }
    message_values = {"RUNTIME_CLASS_NAME": runtime_class_name}
    variables = [{"name": item["name"],
                  "expression": _substitute_expression(item["expression"].strip(), expression_values)}
                 for item in cel_data.get("variables") or []]
    validations = []
    for rule in list(cel_data["rules"]) + list(extra_rules):
        var = "variables." + rule_variable(rule["name"])
        variables.append({"name": rule_variable(rule["name"]),
                          "expression": _substitute_expression(rule["violations"].strip(), expression_values)})
        message = _substitute_expression(rule["message"].strip(), message_values)
        validations.append({
            "expression": "%s.size() == 0" % var,
            "message": message,
            "messageExpression": "%s + \" (\" + %s[0] + (%s.size() > 1 ? \" and \" + string(%s.size() - 1) "
                                 "+ \" more\" : \"\") + \")\"" % (cel_string(message), var, var, var),
        })
    return {
        "match_condition": _substitute_expression(cel_data["match_condition"].strip(), expression_values),
        "variables": variables,
        "validations": validations,
    }


def render_policy_objects(cel_data, engine="vap", name="gpu-pod-guardrails", runtime_class_name="nvidia",
                          gpu_resources=("nvidia.com/gpu",), excluded_namespaces=(), action="Enforce",
                          vap_validation_actions=None, failure_policy="Fail", extra_rules=(), labels=None):
    """Check every input, then return the list of objects for `engine`."""
    if engine not in ENGINES:
        _fail("gpu_policies_engine is %r. Fix: set it to vap, kyverno or both." % (engine,))
    if not isinstance(name, str) or len(name) > 63 or not _DNS_LABEL_RE.match(name):
        _fail("gpu_policies_name (%r) must be a lowercase DNS label of at most 63 characters. Fix: e.g. "
              "gpu-pod-guardrails." % (name,))
    if not isinstance(runtime_class_name, str) or len(runtime_class_name) > 253 \
            or not _DNS_SUBDOMAIN_RE.match(runtime_class_name):
        _fail("gpu_policies_runtime_class_name (%r) must be a RuntimeClass name (lowercase DNS subdomain). "
              "Fix: e.g. nvidia, the runtime_class role's runtime_class_name." % (runtime_class_name,))
    gpu_resources = list(gpu_resources) if isinstance(gpu_resources, (list, tuple)) else gpu_resources
    _check_names(gpu_resources, "gpu_policies_gpu_resources", _RESOURCE_RE,
                 "an extended resource name such as nvidia.com/gpu, or a prefix ending in * such as nvidia.com/mig-*",
                 MAX_RESOURCES)
    if not gpu_resources:
        _fail("gpu_policies_gpu_resources is empty, so no pod would count as a GPU pod. Fix: list at least "
              "nvidia.com/gpu.")
    excluded_namespaces = list(excluded_namespaces) if isinstance(excluded_namespaces, (list, tuple)) \
        else excluded_namespaces
    _check_names(excluded_namespaces, "gpu_policies_excluded_namespaces", _DNS_LABEL_RE,
                 "a namespace name (lowercase DNS label)", MAX_NAMESPACES)
    if any(len(item) > 63 for item in excluded_namespaces):
        _fail("gpu_policies_excluded_namespaces holds a name longer than 63 characters. Fix: correct it.")
    if action not in ACTIONS:
        _fail("gpu_policies_action is %r. Fix: set it to Enforce or Audit." % (action,))
    if failure_policy not in FAILURE_POLICIES:
        _fail("gpu_policies_failure_policy is %r. Fix: set it to Fail or Ignore." % (failure_policy,))
    if not vap_validation_actions:
        vap_validation_actions = ["Deny"] if action == "Enforce" else ["Warn", "Audit"]
    if (not isinstance(vap_validation_actions, list)
            or any(item not in VAP_ACTIONS for item in vap_validation_actions)
            or len(set(vap_validation_actions)) != len(vap_validation_actions)
            or ("Deny" in vap_validation_actions and "Warn" in vap_validation_actions)):
        _fail("gpu_policies_vap_validation_actions (%r) must be a list of Deny, Warn and Audit without duplicates, "
              "and Deny and Warn never together (the API server refuses that). Fix: e.g. [Deny] or [Warn, Audit], "
              "or [] to follow gpu_policies_action." % (vap_validation_actions,))
    extra_rules = list(extra_rules) if isinstance(extra_rules, (list, tuple)) else extra_rules
    check_rules(extra_rules, "gpu_policies_extra_rules")
    _check_data(cel_data)
    builtin = set(rule["name"] for rule in cel_data["rules"])
    seen = set()
    for index, rule in enumerate(extra_rules):
        if rule["name"] in builtin or rule["name"] in seen:
            _fail("gpu_policies_extra_rules[%d].name %r is already used (built-in rules: %s). Fix: rename the rule."
                  % (index, rule["name"], ", ".join(sorted(builtin))))
        seen.add(rule["name"])
    if labels is None:
        labels = dict(MANAGED_BY)

    cel = render_cel(cel_data, runtime_class_name, gpu_resources, extra_rules)
    objects = []
    if engine in ("vap", "both"):
        objects.extend(render_vap(cel, name, excluded_namespaces, vap_validation_actions, failure_policy, labels))
    if engine in ("kyverno", "both"):
        objects.append(render_kyverno(cel, name, excluded_namespaces, action, failure_policy, labels))
    return objects


def render_vap(cel, name, excluded_namespaces, validation_actions, failure_policy, labels):
    rules = [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]},
        # kubectl debug adds ephemeral containers through this subresource (an UPDATE of the Pod)
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods/ephemeralcontainers"]},
    ]
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {
            "failurePolicy": failure_policy,
            "matchConstraints": {"resourceRules": rules},
            "matchConditions": [{"name": MATCH_CONDITION_NAME, "expression": cel["match_condition"]}],
            "variables": [dict(item) for item in cel["variables"]],
            "validations": [dict(item) for item in cel["validations"]],
        },
    }
    binding_spec = {"policyName": name, "validationActions": list(validation_actions)}
    if excluded_namespaces:
        binding_spec["matchResources"] = {"namespaceSelector": {"matchExpressions": [
            {"key": NAMESPACE_LABEL, "operator": "NotIn", "values": list(excluded_namespaces)}]}}
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": binding_spec,
    }
    return [policy, binding]


def render_kyverno(cel, name, excluded_namespaces, action, failure_policy, labels):
    rule = {
        "name": name,
        "match": {"any": [
            {"resources": {"kinds": ["Pod"], "operations": ["CREATE"]}},
            {"resources": {"kinds": ["Pod/ephemeralcontainers"], "operations": ["UPDATE"]}},
        ]},
        "celPreconditions": [{"name": MATCH_CONDITION_NAME, "expression": cel["match_condition"]}],
        "validate": {"cel": {
            "variables": [dict(item) for item in cel["variables"]],
            "expressions": [dict(item) for item in cel["validations"]],
        }},
    }
    if excluded_namespaces:
        rule["exclude"] = {"any": [{"resources": {"namespaces": list(excluded_namespaces)}}]}
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {
            "name": name,
            "labels": dict(labels),
            "annotations": {
                "policies.kyverno.io/title": "GPU pod guardrails",
                "policies.kyverno.io/category": "GPU",
                "policies.kyverno.io/subject": "Pod",
                "policies.kyverno.io/minversion": "1.11.0",
                "policies.kyverno.io/description": "Pods that request NVIDIA GPUs must set GPU requests equal to "
                                                   "limits, run no privileged container and use the GPU "
                                                   "RuntimeClass. Rendered by gpu_native.fleet.gpu_policies.",
            },
        },
        "spec": {
            "validationFailureAction": action,
            "failurePolicy": failure_policy,
            "background": True,
            "rules": [rule],
        },
    }
