"""The k8s_problems / k8s_label_problems filters: the Kubernetes rules of k8s_labels behind one entry point."""
import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.filter.k8s_label_problems import (
    FilterModule,
    k8s_label_problems,
    k8s_problems,
)


class _AnsibleLazyTemplateList(list):
    """Shaped like ansible-core's lazy template containers (what a template hands a filter)."""


class _AnsibleLazyTemplateDict(dict):
    pass


@pytest.mark.parametrize("value, kind, expected", [
    ("nvidia", "dns_label", []),
    ("nvidia-cdi", "dns_label", []),
    ("Nvidia", "dns_label", ["h: 'Nvidia' must be a lowercase DNS label"]),
    ("a" * 64, "dns_label", ["h: '%s' is longer than 63 characters" % ("a" * 64)]),
    ("gpu-node-1.example.com", "dns_subdomain", []),
    ("gpu_node", "dns_subdomain", ["h: 'gpu_node' must be a lowercase DNS subdomain"]),
    ("", "dns_subdomain", ["h: must be a non-empty string, got str"]),
    (None, "dns_subdomain", ["h: must be a non-empty string, got null"]),
    ("80Gi", "gpu_memory", []),
    ("", "gpu_memory", []),
    ("80GB", "gpu_memory", ["h: '80GB' must be a whole number of GiB"]),
    ({"cpu": "250m", "memory": "120Mi"}, "resources", []),
    ({"cpu": 1}, "resources", []),
    ({"cpu": "1.5.2"}, "resources", ["h.cpu: '1.5.2' is not a Kubernetes quantity"]),
    ({"gpu": "1"}, "resources", ["h.gpu: unknown resource; use cpu and memory"]),
    ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, "taint", []),
    ({"key": "nvidia.com/gpu", "effect": "Never"}, "taint", ["h: effect 'Never' must be one of"]),
    ([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], "tolerations", []),
    ([{"operator": "Exists"}], "tolerations", []),
    ([{"key": "nvidia.com/gpu", "operator": "Exists", "value": "x"}], "tolerations",
     ["h[0]: operator Exists takes no value (got 'x')"]),
    ([{"key": "nvidia.com/gpu"}], "tolerations", ["h[0]: operator None must be Exists or Equal"]),
    ([{"operator": "Equal", "value": "x"}], "tolerations", ["h[0]: an empty key matches every taint only with"]),
    ([{"key": "k", "operator": "Equal", "value": "a b"}], "tolerations", ["h[0]: value: 'a b' must be empty or"]),
    ([{"key": "k", "operator": "Exists", "effect": "Never"}], "tolerations", ["h[0]: effect 'Never' must be one of"]),
    ([{"key": "k", "operator": "Exists", "tolerationSeconds": 5}], "tolerations",
     ["h[0]: tolerationSeconds applies to effect NoExecute only"]),
    ([{"key": "k", "operator": "Exists", "typo": 1}], "tolerations", ["h[0]: unknown toleration field(s) typo"]),
    ("nvidia.com/gpu", "tolerations", ["h: must be a list of tolerations, got str"]),
    ({"team": "ml"}, "labels", []),
    ({"team": "a b"}, "labels", ["h.team: value 'a b' must be empty or"]),
])
def test_kinds(value, kind, expected):
    found = k8s_problems(value, kind, "h")
    assert len(found) == len(expected), found
    for line, fragment in zip(found, expected):
        assert line.startswith(fragment), (line, fragment)


def test_internal_container_types_are_named_plainly():
    found = k8s_problems({"gpu": _AnsibleLazyTemplateList(["a"])}, "labels", "sel")
    assert found == ["sel.gpu: value a label value must be a string, got list"]
    found = k8s_problems(_AnsibleLazyTemplateDict(key="k", operator="Exists"), "tolerations", "tol")
    assert found == ["tol: must be a list of tolerations, got dict"]
    with pytest.raises(AnsibleFilterError, match="expects a dict of labels, got list$"):
        k8s_label_problems(_AnsibleLazyTemplateList(["a"]), "sel")


def test_unknown_kind_is_refused_with_the_kinds():
    with pytest.raises(AnsibleFilterError, match="unknown kind 'node'; use one of dns_label, dns_subdomain"):
        k8s_problems("x", "node")


def test_both_filters_are_registered():
    assert set(FilterModule().filters()) == {"k8s_label_problems", "k8s_problems"}
