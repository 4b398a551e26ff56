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

- ``gpu_env_names``, ``gpu_env_allowed_values``: the NVIDIA Container Toolkit's
  environment variables and the values that ask for no GPU;
- ``macros``: ``{NAME: expression}``, written ``@NAME@`` (parenthesised) in the
  match condition, the variables and the built-in rules, because match
  conditions cannot use ``variables``;
- ``match_condition``: a CEL expression over ``object`` that is true for a
  pod the policy looks at (a GPU pod, or one that reaches for GPUs another way);
- ``variables``: ``[{name, expression}]`` shared by the rules (``isGpuPod``
  among them);
- ``rules``: ``[{name, violations, message}]``; ``violations`` is a CEL
  expression giving a list of strings, one per thing to fix, empty when the
  pod complies; ``message`` says what to change.

Each rule becomes the variable ``rule_<name>`` (its violations), the
validation ``variables.rule_<name>.size() == 0``, the static ``message`` and a
``messageExpression`` that adds the first violation, e.g.
``GPU pods must set runtimeClassName: nvidia (container 'train' requests nvidia.com/gpu)``.
``extra_rules`` (the user's) apply to GPU pods only: their violations are
wrapped in ``variables.isGpuPod ? (...) : []``.

Expressions may hold the placeholders ``@GPU_RESOURCE_NAMES@``,
``@GPU_RESOURCE_PREFIXES@``, ``@GPU_TAINT_KEYS@``, ``@GPU_NODE_LABEL_NAMES@``,
``@GPU_NODE_LABEL_PREFIXES@``, ``@GPU_ENV_NAMES@``, ``@GPU_ENV_ALLOWED_VALUES@``
(CEL lists of strings), ``@RUNTIME_CLASS_NAME@`` (a CEL string),
``@RESOURCE_CLAIMS_ARE_GPU@`` and ``@REFUSE_RUNTIME_CLASS_WITHOUT_GPU@`` (CEL
bools); messages may hold ``@RUNTIME_CLASS_NAME@`` (plain text).

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
MATCH_CONDITION_NAME = "reaches-for-gpus"
# Bounds: a policy is small; these keep hostile input from producing a huge object.
MAX_RULES = 64
MAX_EXPRESSION = 5000  # characters; the API server caps expressions at 5 KiB-ish
MAX_MESSAGE = 1000
MAX_NAMESPACES = 256
MAX_RESOURCES = 64
MAX_TAINT_KEYS = 64
MAX_NODE_LABELS = 64

_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_RULE_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_CEL_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# extended resource names: <domain>/<name>; a trailing * makes it a prefix (nvidia.com/mig-*)
_RESOURCE_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?[-_.]?\*?$")
# label and taint keys: [<DNS subdomain prefix>/]<name>; a trailing * makes a label key a prefix (nvidia.com/*)
_KEY_RE = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_KEY_OR_PREFIX_RE = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
                               r"|([A-Za-z0-9][-A-Za-z0-9_.]*)?\*)$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
_MACRO_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")


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
    macros = cel_data.get("macros") or {}
    if not isinstance(macros, dict) or any(not isinstance(key, str) or not _MACRO_RE.match(key)
                                           or not isinstance(value, str) for key, value in macros.items()):
        _fail("__gpu_policies_cel.macros must map upper-case names to CEL expressions. "
              "Fix: restore the role's vars/main.yml.")
    for key in ("gpu_env_names", "gpu_env_allowed_values"):
        value = cel_data.get(key)
        if not isinstance(value, list) or not value or any(not isinstance(item, str) for item in value):
            _fail("__gpu_policies_cel.%s must be a list of strings. Fix: restore the role's vars/main.yml." % key)
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


def _names_and_prefixes(items):
    return ([item for item in items if not item.endswith("*")], [item[:-1] for item in items if item.endswith("*")])


def render_cel(cel_data, runtime_class_name, gpu_resources, extra_rules=(), gpu_taint_keys=(), gpu_node_labels=(),
               resource_claims_are_gpu=True, refuse_runtime_class_without_gpu=True):
    """Return {match_condition, variables, validations} with every macro and placeholder filled in."""
    names, prefixes = _names_and_prefixes(gpu_resources)
    label_names, label_prefixes = _names_and_prefixes(gpu_node_labels)
    expression_values = {
        "GPU_RESOURCE_NAMES": cel_string_list(names),
        "GPU_RESOURCE_PREFIXES": cel_string_list(prefixes),
        "RUNTIME_CLASS_NAME": cel_string(runtime_class_name),
        "GPU_TAINT_KEYS": cel_string_list(gpu_taint_keys),
        "GPU_NODE_LABEL_NAMES": cel_string_list(label_names),
        "GPU_NODE_LABEL_PREFIXES": cel_string_list(label_prefixes),
        "GPU_ENV_NAMES": cel_string_list(cel_data["gpu_env_names"]),
        "GPU_ENV_ALLOWED_VALUES": cel_string_list(cel_data["gpu_env_allowed_values"]),
        "RESOURCE_CLAIMS_ARE_GPU": "true" if resource_claims_are_gpu else "false",
        "REFUSE_RUNTIME_CLASS_WITHOUT_GPU": "true" if refuse_runtime_class_without_gpu else "false",
    }
    # macros first (they may hold placeholders, never other macros), then the placeholders
    macros = dict(("@%s@" % key, "(%s)" % " ".join(value.split()))
                  for key, value in (cel_data.get("macros") or {}).items())

    def expand(text):
        for key, value in macros.items():
            text = text.replace(key, value)
        return _substitute_expression(text, expression_values)

    message_values = {"RUNTIME_CLASS_NAME": runtime_class_name}
    variables = [{"name": item["name"], "expression": expand(item["expression"].strip())}
                 for item in cel_data.get("variables") or []]
    validations = []
    rules = [(rule, rule["violations"].strip()) for rule in cel_data["rules"]]
    # a user's rule sees GPU pods only (as when the policy looked at nothing else)
    rules += [(rule, "variables.isGpuPod ? (%s) : []" % rule["violations"].strip()) for rule in extra_rules]
    for rule, violations in rules:
        var = "variables." + rule_variable(rule["name"])
        variables.append({"name": rule_variable(rule["name"]), "expression": expand(violations)})
        message = _substitute_expression(rule["message"].strip(), message_values)
        validations.append({
            "expression": "%s.size() == 0" % var,
            "message": message,
            "messageExpression": "%s + \" (\" + %s[0] + (%s.size() > 1 ? \" and \" + string(%s.size() - 1) "
                                 "+ \" more\" : \"\") + \")\"" % (cel_string(message), var, var, var),
        })
    return {
        "match_condition": expand(cel_data["match_condition"].strip()),
        "variables": variables,
        "validations": validations,
    }


def _enforcement(action, failure_policy, vap_validation_actions):
    """The VAP validation actions for ``action`` (checked with ``failure_policy`` and the list given, if any): one
    rule for the pod guardrails and the claim guardrails."""
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
    return vap_validation_actions


def render_policy_objects(cel_data, engine="vap", name="gpu-pod-guardrails", runtime_class_name="nvidia",
                          gpu_resources=("nvidia.com/gpu",), excluded_namespaces=(), action="Enforce",
                          vap_validation_actions=None, failure_policy="Fail", extra_rules=(), labels=None,
                          gpu_taint_keys=("nvidia.com/gpu",), gpu_node_labels=(), resource_claims_are_gpu=True,
                          refuse_runtime_class_without_gpu=True, namespace_match_labels=None):
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
    gpu_taint_keys = list(gpu_taint_keys) if isinstance(gpu_taint_keys, (list, tuple)) else gpu_taint_keys
    _check_names(gpu_taint_keys, "gpu_policies_gpu_taint_keys", _KEY_RE,
                 "a taint key such as nvidia.com/gpu", MAX_TAINT_KEYS)
    gpu_node_labels = list(gpu_node_labels) if isinstance(gpu_node_labels, (list, tuple)) else gpu_node_labels
    _check_names(gpu_node_labels, "gpu_policies_gpu_node_labels", _KEY_OR_PREFIX_RE,
                 "a node label key such as accelerator, or a prefix ending in * such as nvidia.com/*",
                 MAX_NODE_LABELS)
    for value, varname in ((resource_claims_are_gpu, "gpu_policies_resource_claims_are_gpu"),
                           (refuse_runtime_class_without_gpu, "gpu_policies_refuse_runtime_class_without_gpu")):
        if not isinstance(value, bool):
            _fail("%s must be true or false, got %r. Fix: write true or false." % (varname, value))
    namespace_match_labels = {} if namespace_match_labels is None else namespace_match_labels
    if not isinstance(namespace_match_labels, dict) or len(namespace_match_labels) > MAX_NODE_LABELS:
        _fail("gpu_policies_namespace_match_labels must be a mapping of label keys to values (at most %d), got %r. "
              "Fix: e.g. {tenant: 'true'}, or {} for every namespace." % (MAX_NODE_LABELS, namespace_match_labels))
    for key, value in namespace_match_labels.items():
        if not isinstance(key, str) or len(key) > 316 or not _KEY_RE.match(key) or not isinstance(value, str) \
                or not _LABEL_VALUE_RE.match(value):
            _fail("gpu_policies_namespace_match_labels has %r: %r, not a label key and value. Fix: correct it "
                  "(values are strings of at most 63 letters, digits, '-', '_', '.'; quote true)." % (key, value))
    vap_validation_actions = _enforcement(action, failure_policy, vap_validation_actions)
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

    cel = render_cel(cel_data, runtime_class_name, gpu_resources, extra_rules, gpu_taint_keys, gpu_node_labels,
                     resource_claims_are_gpu, refuse_runtime_class_without_gpu)
    objects = []
    if engine in ("vap", "both"):
        objects.extend(render_vap(cel, name, excluded_namespaces, vap_validation_actions, failure_policy, labels,
                                  namespace_match_labels))
    if engine in ("kyverno", "both"):
        objects.append(render_kyverno(cel, name, excluded_namespaces, action, failure_policy, labels,
                                      namespace_match_labels))
    return objects


POD_RESOURCE_RULES = [
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]},
    # kubectl debug adds ephemeral containers through this subresource (an UPDATE of the Pod)
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods/ephemeralcontainers"]},
]
POD_KYVERNO_MATCH = [{"resources": {"kinds": ["Pod"], "operations": ["CREATE"]}},
                     {"resources": {"kinds": ["Pod/ephemeralcontainers"], "operations": ["UPDATE"]}}]
# DRA claims (resource.k8s.io/v1): CREATE only. The spec of a claim and of a template is immutable (API reference),
# and the controllers update a claim's metadata (finalizers) later: judging those updates could block the
# deallocation of a claim created before the policy.
CLAIM_RESOURCE_RULES = [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE"],
                         "resources": ["resourceclaims", "resourceclaimtemplates"]}]
CLAIM_KYVERNO_MATCH = [{"resources": {"kinds": ["resource.k8s.io/v1/ResourceClaim",
                                                "resource.k8s.io/v1/ResourceClaimTemplate"],
                                      "operations": ["CREATE"]}}]
POD_DESCRIPTION = ("GPU pod guardrails", "Pod",
                   "Pods that request NVIDIA GPUs must run no privileged container and use the GPU RuntimeClass; pods "
                   "that request none must not reach for GPUs through NVIDIA_VISIBLE_DEVICES, the GPU RuntimeClass or "
                   "privileged containers on GPU nodes. Rendered by gpu_native.fleet.gpu_policies.")
CLAIM_DESCRIPTION = ("GPU DRA claim guardrails", "ResourceClaim",
                     "ResourceClaims and ResourceClaimTemplates may ask for a DeviceClass only in the namespaces "
                     "allowed to use it, and for adminAccess only in system namespaces. Rendered by "
                     "gpu_native.fleet.gpu_policies.")


def render_claim_policy_objects(claim_cel, engine="vap", name="gpu-claim-guardrails", class_namespaces=None,
                                admin_namespaces=(), action="Enforce", vap_validation_actions=None,
                                failure_policy="Fail", labels=None):
    """The DRA claim guardrails (ResourceClaims, ResourceClaimTemplates) for ``engine``, from the role's
    ``__gpu_policies_claim_cel``: ``class_namespaces`` maps a DeviceClass to the namespaces that may claim it
    (a class not listed is unrestricted); ``admin_namespaces`` may set ``adminAccess``."""
    if engine not in ENGINES:
        _fail("gpu_policies_engine is %r. Fix: set it to vap, kyverno or both." % (engine,))
    if not isinstance(name, str) or len(name) > 63 or not _DNS_LABEL_RE.match(name):
        _fail("gpu_policies_dra_claims_name (%r) must be a lowercase DNS label of at most 63 characters. Fix: e.g. "
              "gpu-claim-guardrails." % (name,))
    class_namespaces = {} if class_namespaces is None else class_namespaces
    if not isinstance(class_namespaces, dict) or len(class_namespaces) > MAX_RESOURCES:
        _fail("gpu_policies_dra_class_namespaces must map DeviceClass names to lists of namespaces (at most %d "
              "classes), got %r. Fix: e.g. {gpu.nvidia.com: [training], mig.nvidia.com: [inference, training]}."
              % (MAX_RESOURCES, class_namespaces))
    for key, value in class_namespaces.items():
        if not isinstance(key, str) or len(key) > 253 or not _DNS_SUBDOMAIN_RE.match(key):
            _fail("gpu_policies_dra_class_namespaces has the key %r, not a DeviceClass name (a DNS subdomain). "
                  "Fix: e.g. gpu.nvidia.com." % (key,))
        _check_names(value, "gpu_policies_dra_class_namespaces[%s]" % key, _DNS_LABEL_RE,
                     "a namespace name (lowercase DNS label)", MAX_NAMESPACES)
    admin_namespaces = list(admin_namespaces) if isinstance(admin_namespaces, (list, tuple)) else admin_namespaces
    _check_names(admin_namespaces, "gpu_policies_dra_admin_namespaces", _DNS_LABEL_RE,
                 "a namespace name (lowercase DNS label)", MAX_NAMESPACES)
    vap_validation_actions = _enforcement(action, failure_policy, vap_validation_actions)
    if (not isinstance(claim_cel, dict) or not isinstance(claim_cel.get("match_condition"), str)
            or not isinstance(claim_cel.get("macros") or {}, dict)):
        _fail("the role's claim CEL data (vars/main.yml __gpu_policies_claim_cel) needs match_condition, variables "
              "and rules. Fix: restore the role's vars/main.yml.")
    check_rules(claim_cel.get("rules"), "__gpu_policies_claim_cel.rules")
    values = {
        "CLASS_NAMESPACES": "{" + ", ".join("%s: %s" % (cel_string(key), cel_string_list(class_namespaces[key]))
                                            for key in sorted(class_namespaces)) + "}",
        "ADMIN_NAMESPACES": cel_string_list(admin_namespaces),
    }
    macros = dict(("@%s@" % key, "(%s)" % " ".join(value.split())) for key, value in claim_cel["macros"].items())

    def expand(text):
        for key, value in macros.items():
            text = text.replace(key, value)
        return _substitute_expression(" ".join(text.split()), values)

    variables = [{"name": item["name"], "expression": expand(item["expression"])}
                 for item in claim_cel.get("variables") or []]
    validations = []
    for rule in claim_cel["rules"]:
        var = "variables." + rule_variable(rule["name"])
        variables.append({"name": rule_variable(rule["name"]), "expression": expand(rule["violations"])})
        message = " ".join(rule["message"].split())
        validations.append({
            "expression": "%s.size() == 0" % var, "message": message,
            "messageExpression": "%s + \" (\" + %s[0] + (%s.size() > 1 ? \" and \" + string(%s.size() - 1) "
                                 "+ \" more\" : \"\") + \")\"" % (cel_string(message), var, var, var)})
    cel = {"match_condition": expand(claim_cel["match_condition"]), "variables": variables,
           "validations": validations}
    labels = dict(MANAGED_BY) if labels is None else labels
    objects = []
    if engine in ("vap", "both"):
        objects.extend(render_vap(cel, name, [], vap_validation_actions, failure_policy, labels,
                                  resource_rules=CLAIM_RESOURCE_RULES))
    if engine in ("kyverno", "both"):
        objects.append(render_kyverno(cel, name, [], action, failure_policy, labels, match=CLAIM_KYVERNO_MATCH,
                                      description=CLAIM_DESCRIPTION))
    return objects


def render_vap(cel, name, excluded_namespaces, validation_actions, failure_policy, labels, namespace_match_labels=None,
               resource_rules=None):
    rules = [dict(rule) for rule in (resource_rules or POD_RESOURCE_RULES)]
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
    selector = {}
    if namespace_match_labels:
        selector["matchLabels"] = dict(namespace_match_labels)
    if excluded_namespaces:
        selector["matchExpressions"] = [
            {"key": NAMESPACE_LABEL, "operator": "NotIn", "values": list(excluded_namespaces)}]
    if selector:
        binding_spec["matchResources"] = {"namespaceSelector": selector}
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": binding_spec,
    }
    return [policy, binding]


def render_kyverno(cel, name, excluded_namespaces, action, failure_policy, labels, namespace_match_labels=None,
                   match=None, description=POD_DESCRIPTION):
    match = json.loads(json.dumps(match or POD_KYVERNO_MATCH))
    if namespace_match_labels:
        for item in match:
            item["resources"]["namespaceSelector"] = {"matchLabels": dict(namespace_match_labels)}
    rule = {
        "name": name,
        "match": {"any": match},
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
                "policies.kyverno.io/title": description[0],
                "policies.kyverno.io/category": "GPU",
                "policies.kyverno.io/subject": description[1],
                "policies.kyverno.io/minversion": "1.11.0",
                "policies.kyverno.io/description": description[2],
            },
        },
        "spec": {
            "validationFailureAction": action,
            "failurePolicy": failure_policy,
            "background": True,
            "rules": [rule],
        },
    }
