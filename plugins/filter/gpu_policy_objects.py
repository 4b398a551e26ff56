# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_policy_objects: render the GPU pod guardrails for Kyverno and/or ValidatingAdmissionPolicy."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.plugin_utils.gpu_policies import (
    GpuPolicyError,
    render_claim_policy_objects,
    render_policy_objects,
)


def gpu_policy_objects(cel_data, engine="vap", name="gpu-pod-guardrails", runtime_class_name="nvidia",
                       gpu_resources=None, excluded_namespaces=None, action="Enforce",
                       vap_validation_actions=None, failure_policy="Fail", extra_rules=None, gpu_taint_keys=None,
                       gpu_node_labels=None, resource_claims_are_gpu=True, refuse_runtime_class_without_gpu=True,
                       namespace_match_labels=None):
    """Return the Kubernetes objects for `engine`; AnsibleFilterError (cause and fix) on bad input."""
    try:
        return render_policy_objects(
            cel_data, engine=engine, name=name, runtime_class_name=runtime_class_name,
            gpu_resources=["nvidia.com/gpu"] if gpu_resources is None else gpu_resources,
            excluded_namespaces=[] if excluded_namespaces is None else excluded_namespaces,
            action=action, vap_validation_actions=vap_validation_actions, failure_policy=failure_policy,
            extra_rules=[] if extra_rules is None else extra_rules,
            gpu_taint_keys=["nvidia.com/gpu"] if gpu_taint_keys is None else gpu_taint_keys,
            gpu_node_labels=[] if gpu_node_labels is None else gpu_node_labels,
            resource_claims_are_gpu=resource_claims_are_gpu,
            refuse_runtime_class_without_gpu=refuse_runtime_class_without_gpu,
            namespace_match_labels={} if namespace_match_labels is None else namespace_match_labels)
    except GpuPolicyError as exc:
        raise AnsibleFilterError(str(exc))


def gpu_claim_policy_objects(claim_cel, engine="vap", name="gpu-claim-guardrails", class_namespaces=None,
                             admin_namespaces=None, action="Enforce", vap_validation_actions=None,
                             failure_policy="Fail"):
    """The DRA claim guardrails for `engine`; AnsibleFilterError (cause and fix) on bad input."""
    try:
        return render_claim_policy_objects(claim_cel, engine=engine, name=name, class_namespaces=class_namespaces,
                                           admin_namespaces=[] if admin_namespaces is None else admin_namespaces,
                                           action=action, vap_validation_actions=vap_validation_actions,
                                           failure_policy=failure_policy)
    except GpuPolicyError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    """gpu_native.fleet GPU policy filters."""

    def filters(self):
        return {"gpu_policy_objects": gpu_policy_objects, "gpu_claim_policy_objects": gpu_claim_policy_objects}
