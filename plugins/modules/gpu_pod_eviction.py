#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_pod_eviction
short_description: Evict the pods that use a node's GPUs, respecting PodDisruptionBudgets, within a deadline
version_added: 0.1.0
author:
  - gpu_native.fleet maintainers (@gpu-native)
description:
  - Clears a node's GPUs before its driver or Container Toolkit changes. It lists the pods bound to O(node) and
    evicts, through the C(policy/v1) eviction subresource, every pod whose containers or init containers request
    or limit a resource named in O(resources) (C(nvidia.com/gpu), MIG slices such as C(nvidia.com/mig-1g.10gb),
    shared replicas). With O(drain=true) every other pod leaves too, like C(kubectl drain --ignore-daemonsets).
  - Under Dynamic Resource Allocation a pod holds a GPU through a ResourceClaim instead; a pod whose claims
    (named in its C(spec.resourceClaims), or generated from a claim template) are allocated a device of a driver in
    O(dra_drivers) is a GPU pod too, and is evicted like one.
  - DaemonSet pods are never evicted (their controller would put them back at once; pause the NVIDIA DaemonSets
    separately), nor mirror (static) pods, which the API cannot remove. Pods that already finished are skipped;
    pods already terminating are waited on, not evicted again.
  - An eviction refused with HTTP 429 (a PodDisruptionBudget allows no disruption now) is retried until
    O(timeout). The module then waits until every evicted pod is gone from the node (deleted, or replaced by a
    new pod of the same name elsewhere). When the deadline passes it fails with one line naming the pods still
    refused and their PodDisruptionBudgets (or the pods still terminating), and returns what it evicted so far.
  - It does not cordon the node; cordon it first (with the collection's ownership mark) so that evicted pods
    are not scheduled back onto it.
  - Runs where the C(kubernetes) Python library is, normally the controller (with C(delegate_to) set to C(localhost)).
  - In check mode nothing is evicted. Every candidate is evicted with C(dryRun=All), so the result lists the
    pods that would be evicted and, in RV(blocked), those a PodDisruptionBudget would refuse right now.
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gpu_native.fleet.attributes
  - gpu_native.fleet.attributes.actiongroup_k8s
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Returns the node's pods to evict before, and those still there after (or that a budget would keep).
    support: full
  platform:
    support: full
    platforms: posix
options:
  node:
    description:
      - Name of the Kubernetes Node whose pods are evicted.
    type: str
    required: true
    aliases: [name]
  resources:
    description:
      - Resource name prefixes that count as GPU. A pod is a GPU pod when any of its containers or init containers
        has a request or a limit whose name starts with one of them.
      - The default covers every resource of the NVIDIA device plugin (C(nvidia.com/gpu), C(nvidia.com/mig-*),
        renamed shared replicas such as C(nvidia.com/gpu.shared)).
    type: list
    elements: str
    default: ['nvidia.com/']
  dra_drivers:
    description:
      - DRA (C(resource.k8s.io/v1)) drivers whose devices count as GPU. A pod is a GPU pod when one of its
        ResourceClaims is allocated a device of one of them (C(status.allocation.devices.results[].driver)).
      - The default is NVIDIA's DRA Driver for GPUs, which publishes full GPUs and MIG devices. The claims are read
        only for pods that name some and ask for no resource of O(resources).
      - Set V([]) to look at O(resources) only (a cluster without C(resource.k8s.io/v1), before Kubernetes 1.34).
      - At most 16 names.
    type: list
    elements: str
    default: ['gpu.nvidia.com']
  drain:
    description:
      - Also evict the pods that use no GPU, like C(kubectl drain --ignore-daemonsets), that is every pod except DaemonSet
        pods, mirror pods and finished pods.
      - Like C(kubectl drain), a non-GPU pod with an C(emptyDir) volume is refused unless O(delete_emptydir_data),
        and one that no controller owns unless O(force); a refusal evicts nothing.
    type: bool
    default: false
  delete_emptydir_data:
    description:
      - With O(drain), evict pods with C(emptyDir) volumes too (their local data is lost), as
        C(kubectl drain --delete-emptydir-data).
      - GPU pods are evicted whatever their volumes, since they hold the device the change needs.
    type: bool
    default: false
  force:
    description:
      - With O(drain), evict pods that no ReplicaSet, StatefulSet, Job or other controller owns (nothing recreates
        them), as C(kubectl drain --force).
      - GPU pods are evicted whoever owns them.
    type: bool
    default: false
  timeout:
    description:
      - Seconds for the whole eviction, retries of refused evictions and the wait for the pods to be gone included.
      - Between 1 and 86400.
      - Every request to the API server shares this deadline (plus 5 seconds for the last round of requests). An
        API server, proxy or load balancer that answers byte by byte, or never finishes an answer, fails the task
        then, and the module's process ends with it.
    type: int
    default: 300
  wait_sleep:
    description:
      - Seconds between two rounds of retries and checks.
      - Above 0 and at most 60.
    type: float
    default: 5
  grace_period:
    description:
      - Seconds each evicted pod gets to terminate (C(deleteOptions.gracePeriodSeconds) of the eviction); unset,
        the pod's own C(terminationGracePeriodSeconds) applies. V(0) kills at once.
    type: int
requirements:
  - kubernetes >= 24.2.0 (the Python client, where the module runs); >= 34.1.0 to read the ResourceClaims of pods
    that use DRA (its C(ResourceV1Api))
notes:
  - Mirrors the option names of C(kubectl drain) and M(kubernetes.core.k8s_drain) (O(delete_emptydir_data),
    O(force), O(wait_sleep); O(grace_period) is their C(terminate_grace_period)).
  - Every PodDisruptionBudget rule is the API server's own; the module only asks and retries. A pod matched by
    more than one budget cannot be evicted at all (the API answers 500); that is reported at once, not retried.
seealso:
  - module: kubernetes.core.k8s_drain
"""

EXAMPLES = r"""
- name: Evict the GPU pods of the node, waiting up to 10 minutes for their budgets
  gpu_native.fleet.gpu_pod_eviction:
    node: "{{ inventory_hostname }}"
    timeout: 600
  delegate_to: localhost

- name: Drain the whole node (DaemonSet pods stay), local scratch data included
  gpu_native.fleet.gpu_pod_eviction:
    node: gpu-node-07
    drain: true
    delete_emptydir_data: true
    grace_period: 60
    kubeconfig: /etc/ansible/kubeconfig
    context: prod
  delegate_to: localhost

- name: Dry run, which pods would leave and which a budget would block now
  gpu_native.fleet.gpu_pod_eviction:
    node: gpu-node-07
  check_mode: true
  delegate_to: localhost
  register: eviction_plan
"""

RETURN = r"""
evicted:
  description: Pods evicted by this run (also on failure, what was evicted before it).
  returned: always
  type: list
  elements: dict
  contains:
    pod:
      description: Pod name.
      type: str
    namespace:
      description: Pod namespace.
      type: str
  sample: [{pod: trainer-0, namespace: ml}]
would_evict:
  description: In check mode, the pods that would be evicted (those in RV(blocked) included); empty otherwise.
  returned: always
  type: list
  elements: dict
  sample: [{pod: trainer-0, namespace: ml}]
terminating:
  description: Pods that were already terminating; waited on, not evicted.
  returned: always
  type: list
  elements: dict
  sample: []
blocked:
  description:
    - Pods whose eviction a PodDisruptionBudget refused (HTTP 429) at the last try; in check mode, those it would
      refuse now. On success this is empty unless check mode.
  returned: always
  type: list
  elements: dict
  contains:
    pod:
      description: Pod name.
      type: str
    namespace:
      description: Pod namespace.
      type: str
    pdb:
      description: The PodDisruptionBudget that refused, as the API named it (null when it did not).
      type: str
    message:
      description: The API's message.
      type: str
  sample: [{pod: trainer-0, namespace: ml, pdb: trainer,
            message: "Cannot evict pod as it would violate the pod's disruption budget."}]
skipped:
  description: Pods on the node left alone, and why (no GPU resource, DaemonSet, mirror pod, finished).
  returned: always
  type: list
  elements: dict
  sample: [{pod: nvidia-device-plugin-x2k8d, namespace: gpu-operator,
            reason: "DaemonSet pod: never evicted (pause its DaemonSet instead)"}]
"""

import copy
import json
import os
import socket
import sys
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import http_deadline
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.json_limits import json_nesting_exceeds
from ansible_collections.gpu_native.fleet.plugins.module_utils.k8s import gpu_pods

try:
    from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
    KUBERNETES_CORE_ERROR = None
except ImportError:  # the collection is a dependency (galaxy.yml); without it only the error below is left
    AUTH_ARG_SPEC = {}
    KUBERNETES_CORE_ERROR = traceback.format_exc()

try:
    import kubernetes  # noqa: F401  pylint: disable=unused-import
    from kubernetes.client.exceptions import ApiException
    KUBERNETES_ERROR = None
except ImportError:
    ApiException = Exception
    KUBERNETES_ERROR = traceback.format_exc()


# Seconds one API request may take (connect and read), so that an unreachable API server is an error, not a hang.
REQUEST_TIMEOUT = 30
# Seconds past ``timeout`` for the last round of requests (the eviction loop stops at ``timeout`` itself). At
# ``timeout`` + this the module fails wherever it is blocked (a read of a dripping answer included), and if that
# failure is swallowed the process ends a few seconds later: it never outlives its task (issue 27, reproducer 11).
FINAL_ROUND_S = 5
# A node's pods (at most a few hundred) list in a few MiB; a larger answer is refused, not held in memory.
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
# Kubernetes objects nest about 10 levels deep; deeper JSON is refused before json recurses.
MAX_JSON_DEPTH = 100


def _json(data):
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    data = str(data or "{}")[:MAX_RESPONSE_BYTES]
    try:
        answer = None if json_nesting_exceeds(data, MAX_JSON_DEPTH) else json.loads(data)
    except ValueError:
        answer = None
    return answer if isinstance(answer, dict) else {"message": data[:300]}


def _body(response):
    """A successful answer's JSON object; ValueError for one too large, too deep or not a JSON object."""
    data = response.read(MAX_RESPONSE_BYTES + 1)
    if len(data) > MAX_RESPONSE_BYTES:
        raise ValueError("the API server's answer is larger than %d MiB" % (MAX_RESPONSE_BYTES // (1024 * 1024)))
    text = data.decode("utf-8", "replace")
    if json_nesting_exceeds(text, MAX_JSON_DEPTH):
        raise ValueError("the API server's answer nests deeper than %d levels" % MAX_JSON_DEPTH)
    try:
        answer = json.loads(text)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise ValueError("the API server's answer is not a JSON object (%r...)" % text[:60])
    return answer


class ClientApi(object):
    """The calls gpu_pods.Evictor needs, over the kubernetes client; bodies stay plain API JSON."""

    def __init__(self, api_client, deadline):
        from kubernetes.client import CoreV1Api, PolicyV1Api  # pylint: disable=import-outside-toplevel
        self.core = CoreV1Api(api_client)
        self.policy = PolicyV1Api(api_client)
        try:
            from kubernetes.client import ResourceV1Api  # pylint: disable=import-outside-toplevel
            self.resource = ResourceV1Api(api_client)
        except ImportError:  # a client before 34.1.0: read_claim says so when a pod uses claims
            self.resource = None
        self.claims = {}
        self.deadline = deadline

    def _timeout(self):
        """Each request's connect and read timeout: what is left of the task's deadline, at most REQUEST_TIMEOUT."""
        return self.deadline.timeout(REQUEST_TIMEOUT)

    def read_node(self, name):
        try:
            response = self.core.read_node(name, _preload_content=False, _request_timeout=self._timeout())
            return _body(response)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list_pods(self, node):
        response = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % node,
                                                         _preload_content=False, _request_timeout=self._timeout())
        return gpu_pods._list(_body(response).get("items"))  # pylint: disable=protected-access

    def read_pod(self, namespace, name):
        try:
            response = self.core.read_namespaced_pod(name, namespace, _preload_content=False,
                                                     _request_timeout=self._timeout())
            return _body(response)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def read_claim(self, namespace, name):
        """A ResourceClaim of ``namespace`` (None when gone), from one listing per namespace (the ``list`` right of
        the job's ClusterRole, which the serving gate uses too)."""
        if namespace not in self.claims:
            if self.resource is None:
                raise gpu_pods.EvictionError(
                    "a pod in namespace %s uses ResourceClaims, and this kubernetes Python client (%s) cannot read "
                    "resource.k8s.io/v1; install kubernetes >= 34.1.0 where the module runs, or set dra_drivers: [] "
                    "to judge pods by their resources only" % (namespace, _client_version()))
            try:
                response = self.resource.list_namespaced_resource_claim(namespace, _preload_content=False,
                                                                        _request_timeout=self._timeout())
            except ApiException as exc:
                if exc.status == 404:
                    raise gpu_pods.EvictionError(
                        "a pod in namespace %s uses ResourceClaims, and the API server serves no resource.k8s.io/v1 "
                        "(Kubernetes before 1.34): which of them hold a GPU cannot be read; evict those pods by hand, "
                        "or set dra_drivers: [] to judge pods by their resources only" % namespace)
                raise
            items = gpu_pods._list(_body(response).get("items"))  # pylint: disable=protected-access
            self.claims[namespace] = dict((gpu_pods._dict(c.get("metadata")).get("name"), c)  # pylint: disable=protected-access
                                          for c in items if isinstance(c, dict))
        return self.claims[namespace].get(name)

    def list_pdbs(self, namespace):
        response = self.policy.list_namespaced_pod_disruption_budget(namespace, _preload_content=False,
                                                                     _request_timeout=self._timeout())
        return gpu_pods._list(_body(response).get("items"))  # pylint: disable=protected-access

    def evict(self, namespace, name, grace_period, dry_run):
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        if grace_period is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace_period}
        kwargs = {"_preload_content": False, "_request_timeout": self._timeout()}
        if dry_run:
            kwargs["dry_run"] = "All"
        try:
            response = self.core.create_namespaced_pod_eviction(name, namespace, body, **kwargs)
            return response.status, _body(response)
        except ApiException as exc:
            return exc.status, _json(exc.body)


def _client_version():
    return getattr(kubernetes, "__version__", "unknown version") if not KUBERNETES_ERROR else "missing"


def argument_spec():
    spec = dict(
        node=dict(type="str", required=True, aliases=["name"]),
        resources=dict(type="list", elements="str", default=["nvidia.com/"]),
        dra_drivers=dict(type="list", elements="str", default=list(gpu_pods.DEFAULT_DRA_DRIVERS)),
        drain=dict(type="bool", default=False),
        delete_emptydir_data=dict(type="bool", default=False),
        force=dict(type="bool", default=False),
        timeout=dict(type="int", default=300),
        wait_sleep=dict(type="float", default=5.0),
        grace_period=dict(type="int"),
    )
    spec.update(copy.deepcopy(AUTH_ARG_SPEC))
    return spec


def _empty_result():
    return {"changed": False, "evicted": [], "would_evict": [], "terminating": [], "blocked": [], "skipped": []}


def _check_params(module):
    params = module.params
    if not 1 <= params["timeout"] <= 86400:
        module.fail_json(msg="timeout must be between 1 and 86400 seconds, got %s; set it in that range"
                         % params["timeout"], **_empty_result())
    if not 0 < params["wait_sleep"] <= 60:
        module.fail_json(msg="wait_sleep must be above 0 and at most 60 seconds, got %s; set it in that range"
                         % params["wait_sleep"], **_empty_result())
    if params["grace_period"] is not None and not 0 <= params["grace_period"] <= 86400:
        module.fail_json(msg="grace_period must be between 0 and 86400 seconds, got %s; set it in that range"
                         % params["grace_period"], **_empty_result())
    prefixes = [p for p in params["resources"] if p]
    if not prefixes or len(params["resources"]) > 64:
        module.fail_json(msg="resources must hold 1 to 64 non-empty resource name prefixes (such as nvidia.com/); "
                         "set it, or leave it unset for the default", **_empty_result())
    drivers = params["dra_drivers"]
    if len(drivers) > 16 or any(not driver or len(driver) > 253 for driver in drivers):
        module.fail_json(msg="dra_drivers must hold at most 16 non-empty DRA driver names (such as gpu.nvidia.com); "
                         "set it, [] to judge pods by their resources only, or leave it unset for the default",
                         **_empty_result())
    if not params["node"] or len(params["node"]) > 253:
        module.fail_json(msg="node must be a Node name (1 to 253 characters); set it to the node's name",
                         **_empty_result())


def _connect(module, deadline):
    if KUBERNETES_CORE_ERROR:
        module.fail_json(msg="the kubernetes.core collection is not installed where this module runs; install it "
                         "(ansible-galaxy collection install kubernetes.core, a dependency of gpu_native.fleet)",
                         exception=KUBERNETES_CORE_ERROR, **_empty_result())
    if KUBERNETES_ERROR:
        module.fail_json(msg=missing_required_lib("kubernetes") + " It is needed where this module runs (the "
                         "controller with delegate_to: localhost); install it there with pip install kubernetes",
                         exception=KUBERNETES_ERROR, **_empty_result())
    # pylint: disable-next=import-outside-toplevel
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client
    auth = dict((key, module.params.get(key)) for key in AUTH_ARG_SPEC)
    # The client's discovery request (at creation) takes no timeout of ours: bound every socket of this process.
    socket.setdefaulttimeout(REQUEST_TIMEOUT)
    try:
        client = get_api_client(**auth)
        return ClientApi(client.client.client, deadline)
    except Exception as exc:  # pylint: disable=broad-except
        module.fail_json(msg="cannot connect to the Kubernetes API: %s; point kubeconfig (or K8S_AUTH_KUBECONFIG) "
                         "at a valid kubeconfig, or set host and api_key"
                         % str(exc).strip().splitlines()[0][:300].rstrip(".")
                         if str(exc).strip() else "cannot connect to the Kubernetes API (%s); point kubeconfig at a "
                         "valid kubeconfig, or set host and api_key" % type(exc).__name__, **_empty_result())


def _api_failure(module, node, exc, result):
    if isinstance(exc, ApiException):
        body = _json(exc.body)
        why = "HTTP %s %s" % (exc.status, body.get("message") or exc.reason)
    else:
        why = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else exc.__class__.__name__
    result = dict(_empty_result(), **result)
    module.fail_json(msg="talking to the Kubernetes API about node %s failed: %s; check the API address, the "
                     "credentials and their rights (get nodes, list pods, create pods/eviction, list resourceclaims), then run "
                     "again"
                     % (node, why), **result)


def _diff(node, selection, result):
    before = sorted(gpu_pods.pod_key(pod) for pod in selection.evict + selection.wait)
    after = sorted("%s/%s" % (entry["namespace"], entry["pod"]) for entry in result["blocked"])
    return {"before": "".join(key + "\n" for key in before), "after": "".join(key + "\n" for key in after),
            "before_header": "pods to leave node %s" % node, "after_header": "pods still on node %s" % node}


def _deadline_message(module):
    return ("the Kubernetes API did not finish answering within timeout %s s (+%s s for the last requests); check "
            "the API address in the kubeconfig (a proxy or load balancer that holds answers open?), or raise "
            "timeout, then run again" % (module.params["timeout"], FINAL_ROUND_S))


def _overrun(module):
    """The deadline's exception was swallowed: report and end the process (the module never outlives its task)."""
    def report(_message):
        sys.stdout.write(json.dumps(dict(_empty_result(), failed=True, msg=_deadline_message(module))) + "\n")
        sys.stdout.flush()
        os._exit(1)  # pylint: disable=protected-access
    return report


def evict(module, deadline, state):
    params = module.params
    node = params["node"]
    api = _connect(module, deadline)
    result = state["result"]
    evictor = gpu_pods.Evictor(api, node, params["timeout"], params["grace_period"], params["wait_sleep"])
    state["evictor"] = evictor
    try:
        if api.read_node(node) is None:
            module.fail_json(msg="node %s not found in the cluster; check the node name (kubectl get nodes)" % node,
                             **result)
        selection = gpu_pods.select_pods(api.list_pods(node), [p for p in params["resources"] if p],
                                         drain=params["drain"], delete_emptydir_data=params["delete_emptydir_data"],
                                         force=params["force"], node=node, dra_drivers=tuple(params["dra_drivers"]),
                                         read_claim=api.read_claim)
        result["skipped"] = selection.skipped
        if selection.refused:
            reasons = "; ".join("%s %s" % (gpu_pods.pod_key(pod), why) for pod, why in selection.refused)
            module.fail_json(msg="node %s cannot be drained, nothing was evicted: %s" % (node, reasons), **result)
        if module.check_mode:
            result.update(evictor.check(selection))
            result["changed"] = bool(result["would_evict"])
        else:
            result.update(evictor.run(selection))
            result["changed"] = bool(result["evicted"])
        if module._diff:  # pylint: disable=protected-access
            result["diff"] = _diff(node, selection, result)
    except gpu_pods.EvictionError as exc:
        result.update(exc.result)
        result["changed"] = bool(result["evicted"])
        module.fail_json(msg=str(exc), **result)
    except Exception as exc:  # pylint: disable=broad-except
        result.update(evictor.result)
        result["changed"] = bool(result["evicted"])
        _api_failure(module, node, exc, result)
    module.exit_json(**result)


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    _check_params(module)
    seconds = module.params["timeout"] + FINAL_ROUND_S
    deadline = http_deadline.Deadline(seconds)
    state = {"result": _empty_result(), "evictor": None}
    try:
        with http_deadline.task_deadline(seconds, _deadline_message(module), on_overrun=_overrun(module)):
            evict(module, deadline, state)
    except http_deadline.TaskDeadlineExceeded as exc:
        result = state["result"]
        if state["evictor"] is not None:
            result.update(state["evictor"].result)
        result["changed"] = bool(result["evicted"])
        module.fail_json(msg=str(exc), **result)


if __name__ == "__main__":
    main()
