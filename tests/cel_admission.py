# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""STAND-IN for kube-apiserver's CEL admission, for unit tests only: the CEL parts of a ValidatingAdmissionPolicy
(matchConditions, variables, validations, messageExpression) evaluated over one object with cel-expr-python, the
way the API server evaluates them (failurePolicy, the order of the checks, the error texts).

The unit tests of the gpu_policies role run their whole table of cases (tests/gpu_policy_cases.py) through it in
milliseconds; the integration tests send the same cases to the real API server (tests/kube_cluster.py), which is
what decides.  It answers no API request and models nothing else of the server."""
import re
import threading

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


def match_resources(match, namespace_labels, object_labels, resource, operation, need_rules):
    """Whether a binding's (or policy's) matchResources selects a core/v1 `resource` `operation` of an object with
    `object_labels` in a namespace with `namespace_labels`."""
    match = match or {}
    if need_rules or match.get("resourceRules"):
        if not _vap_rule_matches(match.get("resourceRules"), "", "v1", resource, operation):
            return False
    if _vap_rule_matches(match.get("excludeResourceRules"), "", "v1", resource, operation):
        return False
    return (_selector_matches(match.get("namespaceSelector"), namespace_labels)
            and _selector_matches(match.get("objectSelector"), object_labels))


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
