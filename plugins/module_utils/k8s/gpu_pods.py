# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""Which pods leave a node before its GPU stack changes, and evicting them within a deadline.

Public API
----------
``gpu_resources(pod, prefixes)``: the sorted resource names of a pod's
containers and init containers (requests or limits) that start with one of
``prefixes`` (``nvidia.com/`` covers ``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``
and shared replicas such as ``nvidia.com/gpu.shared``).
``select_pods(pods, prefixes, drain=False, delete_emptydir_data=False, force=False)``:
the rules, over pod objects as the API returns them (plain dicts); returns a
``Selection`` with ``evict`` (pods to evict), ``wait`` (pods already
terminating: waited on, not evicted again), ``skipped`` (``{pod, namespace,
reason}``) and ``refused`` (drain only: pods that ``kubectl drain`` would refuse
without ``--delete-emptydir-data`` / ``--force``; nothing may be evicted then).
``claim_names(pod)``: the ResourceClaims (``resource.k8s.io/v1``) a pod uses, by name.
``allocated_devices(claim, drivers)``: the devices of those DRA ``drivers`` allocated to a claim.
``pdb_from_status(body)``: the PodDisruptionBudget named by a 429 eviction answer.
``selector_matches(selector, labels)``: a ``metav1.LabelSelector`` against labels.
``Evictor(api, node, ...)``: evicts a selection through the eviction
subresource, retrying 429 until the deadline, then waits for the pods to be
gone.  ``api`` is any object with ``evict(namespace, name, grace_period,
dry_run) -> (code, body)``, ``read_pod(namespace, name) -> dict or None`` and
``list_pdbs(namespace) -> list``; the clock and sleep are injectable.

The rules (what ``kubectl drain --ignore-daemonsets`` does, narrowed to GPU pods
unless ``drain``):

- only pods bound to the node are considered (the caller lists them with
  ``fieldSelector=spec.nodeName=<node>``; a pod of another node is skipped);
- ``Succeeded``/``Failed`` pods hold no device and are skipped;
- DaemonSet pods are never evicted (their controller would recreate them at
  once; the NVIDIA DaemonSets are paused separately), nor mirror (static) pods,
  which the API cannot remove;
- a pod with a ``deletionTimestamp`` is already leaving: it is waited on;
- a pod also holds a GPU when one of its ResourceClaims is allocated a device of
  one of the DRA drivers given (NVIDIA's DRA driver, ``gpu.nvidia.com``, publishes
  GPUs and MIG devices; a pod asking for ``nvidia.com/gpu`` through the driver's
  extended resource is caught by the resource rule already);
- without ``drain`` a pod is evicted when it asks for a GPU resource, whatever
  its volumes or owner (it holds the device the driver change needs); with
  ``drain`` every other pod is evicted too, and like ``kubectl drain`` a pod
  with an ``emptyDir`` volume needs ``delete_emptydir_data`` and a pod no
  controller owns needs ``force`` (else the whole eviction is refused before
  anything is evicted).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import time

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
DEFAULT_PREFIXES = ("nvidia.com/",)
# Bounds: hostile or huge listings stay cheap to judge and to report.
MAX_PODS = 5000
MAX_CONTAINERS = 256
# A pod names at most a few claims; more is hostile input, judged by the first ones only.
MAX_CLAIMS = 64
# NVIDIA's DRA Driver for GPUs (kubernetes-sigs/dra-driver-nvidia-gpu): spec.driver of its GPU and MIG slices, and
# so allocation.devices.results[].driver of the claims it serves (plugins/plugin_utils/dra_facts.yml, its sources).
DEFAULT_DRA_DRIVERS = ("gpu.nvidia.com",)

# kube-apiserver's 429 names the budget in details.causes[].message, in each of its forms: "The disruption budget
# %s needs %d healthy pods and has %d currently", "... %s does not allow evicting pods currently because it failed
# sync: ...", "... %s does not allow evicting pods currently (...)" (pkg/registry/core/pod/storage/eviction.go).
_PDB_RE = re.compile(r"disruption budget ([a-z0-9]([-a-z0-9.]*[a-z0-9])?)")


class EvictionError(FleetError):
    """A failure with a one-line cause and its fix; ``result`` holds what was done so far."""

    def __init__(self, message, result=None):
        super(EvictionError, self).__init__(message)
        self.result = result or {}


def _dict(value):
    return value if isinstance(value, dict) else {}


def _list(value):
    return value if isinstance(value, list) else []


def pod_key(pod):
    meta = _dict(pod.get("metadata"))
    return "%s/%s" % (meta.get("namespace", ""), meta.get("name", ""))


def gpu_resources(pod, prefixes=DEFAULT_PREFIXES):
    """Sorted names of the resources matching ``prefixes`` that any (init) container requests or limits."""
    spec = _dict(_dict(pod).get("spec"))
    found = set()
    containers = _list(spec.get("containers")) + _list(spec.get("initContainers"))
    for container in containers[:MAX_CONTAINERS]:
        resources = _dict(_dict(container).get("resources"))
        for section in ("requests", "limits"):
            for name in _dict(resources.get(section)):
                if isinstance(name, str) and any(name.startswith(prefix) for prefix in prefixes):
                    found.add(name)
    return sorted(found)


def claim_names(pod):
    """Sorted names of the ResourceClaims a pod uses (core/v1 PodResourceClaim, PodResourceClaimStatus).

    ``spec.resourceClaims[].resourceClaimName`` names a claim directly; an entry with ``resourceClaimTemplateName``
    uses the claim generated for the pod, whose name ``status.resourceClaimStatuses[]`` records under the entry's
    name (null there when no claim was needed)."""
    spec = _dict(_dict(pod).get("spec"))
    generated = {}
    for entry in _list(_dict(_dict(pod).get("status")).get("resourceClaimStatuses"))[:MAX_CLAIMS]:
        entry = _dict(entry)
        generated[entry.get("name")] = entry.get("resourceClaimName")
    names = set()
    for entry in _list(spec.get("resourceClaims"))[:MAX_CLAIMS]:
        entry = _dict(entry)
        name = entry.get("resourceClaimName") or (generated.get(entry.get("name"))
                                                  if entry.get("resourceClaimTemplateName") else None)
        if isinstance(name, str) and name:
            names.add(name)
    return sorted(names)


def allocated_devices(claim, drivers):
    """``driver/pool/device`` of each device allocated to ``claim`` (a ResourceClaim dict) by one of ``drivers``."""
    allocation = _dict(_dict(_dict(claim).get("status")).get("allocation"))
    found = []
    for result in _list(_dict(allocation.get("devices")).get("results"))[:MAX_CLAIMS * 32]:
        result = _dict(result)
        if result.get("driver") in drivers:
            found.append("%s/%s/%s" % (result.get("driver"), result.get("pool", ""), result.get("device", "")))
    return found


def dra_gpu_devices(pod, drivers, read_claim):
    """The NVIDIA DRA devices ``pod`` holds through its claims; ``read_claim(namespace, name)`` returns the claim
    dict or None (gone: it holds nothing)."""
    namespace = _dict(_dict(pod).get("metadata")).get("namespace", "")
    devices = []
    for name in claim_names(pod):
        devices.extend(allocated_devices(read_claim(namespace, name), drivers))
    return devices


def owner_kinds(pod):
    refs = _list(_dict(pod.get("metadata")).get("ownerReferences"))
    return [_dict(ref).get("kind") for ref in refs if _dict(ref).get("controller")]


def is_daemonset_pod(pod):
    refs = _list(_dict(pod.get("metadata")).get("ownerReferences"))
    return any(_dict(ref).get("kind") == "DaemonSet" for ref in refs)


def is_mirror_pod(pod):
    return MIRROR_ANNOTATION in _dict(_dict(pod.get("metadata")).get("annotations"))


def uses_emptydir(pod):
    return any("emptyDir" in _dict(volume) for volume in _list(_dict(pod.get("spec")).get("volumes")))


class Selection(object):
    def __init__(self):
        self.evict = []
        self.wait = []
        self.skipped = []
        self.refused = []

    def skip(self, pod, reason):
        meta = _dict(pod.get("metadata"))
        self.skipped.append({"pod": meta.get("name", ""), "namespace": meta.get("namespace", ""),
                             "reason": reason})


def _judge(selection, pod, meta, gpus, prefixes, dra_drivers, drain, delete_emptydir_data, force):
    """The rules for a pod the node, phase, mirror and DaemonSet rules leave; ``gpus``: the GPU it holds."""
    if not gpus and not drain:
        selection.skip(pod, "uses no %s resource%s" % (
            " or ".join(p + "*" for p in prefixes),
            " and no device of DRA driver %s" % " or ".join(dra_drivers) if dra_drivers else ""))
    elif meta.get("deletionTimestamp"):
        selection.wait.append(pod)
    elif drain and not gpus and uses_emptydir(pod) and not delete_emptydir_data:
        selection.refused.append((pod, "uses emptyDir (local data); set delete_emptydir_data=true"))
    elif drain and not gpus and not owner_kinds(pod) and not force:
        selection.refused.append((pod, "not managed by a controller, nothing would recreate it; set force=true"))
    else:
        selection.evict.append(pod)


def select_pods(pods, prefixes=DEFAULT_PREFIXES, drain=False, delete_emptydir_data=False, force=False,
                node=None, dra_drivers=(), read_claim=None):
    """Apply the rules of this module's docstring to ``pods`` (a list of pod dicts).

    With ``dra_drivers`` and ``read_claim(namespace, name) -> claim dict or None``, a pod whose claims hold a
    device of one of those drivers is a GPU pod too; the claims are read only for pods the other rules leave."""
    if len(pods) > MAX_PODS:
        raise EvictionError("the node has %d pods, more than the %d this module judges at once; drain it with "
                            "kubectl drain instead" % (len(pods), MAX_PODS))
    prefixes = tuple(prefixes)
    selection = Selection()
    for pod in pods:
        pod = _dict(pod)
        meta = _dict(pod.get("metadata"))
        status = _dict(pod.get("status"))
        gpus = gpu_resources(pod, prefixes)
        if node is not None and _dict(pod.get("spec")).get("nodeName") != node:
            selection.skip(pod, "bound to another node")
        elif status.get("phase") in ("Succeeded", "Failed"):
            selection.skip(pod, "finished (%s)" % status.get("phase"))
        elif is_mirror_pod(pod):
            selection.skip(pod, "mirror (static) pod: the API cannot evict it")
        elif is_daemonset_pod(pod):
            selection.skip(pod, "DaemonSet pod: never evicted (pause its DaemonSet instead)")
        else:
            if not gpus and dra_drivers and read_claim is not None:
                gpus = dra_gpu_devices(pod, dra_drivers, read_claim)
            _judge(selection, pod, meta, gpus, prefixes, dra_drivers, drain, delete_emptydir_data, force)
    return selection


def selector_matches(selector, labels):
    """A ``metav1.LabelSelector`` (matchLabels, matchExpressions) against ``labels``; None matches nothing."""
    if not isinstance(selector, dict):
        return False
    labels = _dict(labels)
    if not selector.get("matchLabels") and not selector.get("matchExpressions"):
        return True  # policy/v1: an empty selector selects every pod of the namespace
    for key, value in _dict(selector.get("matchLabels")).items():
        if labels.get(key) != value:
            return False
    for expr in _list(selector.get("matchExpressions")):
        expr = _dict(expr)
        key, operator, values = expr.get("key"), expr.get("operator"), _list(expr.get("values"))
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def _status_message(body):
    body = _dict(body)
    causes = [_dict(c).get("message") for c in _list(_dict(body.get("details")).get("causes"))]
    parts = [str(body.get("message") or "")] + [str(c) for c in causes if c]
    return " ".join(p for p in parts if p)[:500]


def pdb_from_status(body):
    """The PodDisruptionBudget a 429 eviction answer names (kube-apiserver puts it in details.causes), or None."""
    for cause in _list(_dict(_dict(body).get("details")).get("causes")):
        match = _PDB_RE.search(str(_dict(cause).get("message") or ""))
        if match:
            return match.group(1)
    return None


def _entry(pod):
    meta = _dict(pod.get("metadata"))
    return {"pod": meta.get("name", ""), "namespace": meta.get("namespace", "")}


class Evictor(object):
    """Evict ``selection.evict`` through the eviction subresource and wait until they and ``selection.wait`` are gone."""

    def __init__(self, api, node, timeout, grace_period=None, wait_sleep=5.0, clock=time.time, sleep=time.sleep):
        self.api = api
        self.node = node
        self.timeout = timeout
        self.grace_period = grace_period
        self.wait_sleep = wait_sleep
        self.clock = clock
        self.sleep = sleep
        self.result = {"evicted": [], "would_evict": [], "terminating": [], "blocked": []}

    def _pdb_for(self, pod, body):
        name = pdb_from_status(body)
        if name:
            return name
        namespace = _dict(pod.get("metadata")).get("namespace", "")
        labels = _dict(pod.get("metadata")).get("labels")
        try:
            names = [_dict(p.get("metadata")).get("name") for p in self.api.list_pdbs(namespace)
                     if selector_matches(_dict(p.get("spec")).get("selector"), labels)]
        except Exception:  # pylint: disable=broad-except
            names = []  # the name is a courtesy in the report; the 429 itself is what counts
        return ",".join(sorted(n for n in names if n)) or None

    def _evict_once(self, pod, dry_run):
        meta = _dict(pod.get("metadata"))
        code, body = self.api.evict(meta.get("namespace", ""), meta.get("name", ""), self.grace_period, dry_run)
        return code, _dict(body)

    def _fail(self, pod, code, body, result):
        raise EvictionError("evicting pod %s from node %s failed: HTTP %s %s; fix the cause the API names (or "
                            "evict the pod by hand) and run again"
                            % (pod_key(pod), self.node, code, _status_message(body) or "(no message)"),
                            result)

    def check(self, selection):
        """Check mode: every candidate is evicted with dryRun=All; report which a PDB would block now."""
        result = {"evicted": [], "would_evict": [_entry(p) for p in selection.evict],
                  "terminating": [_entry(p) for p in selection.wait], "blocked": []}
        for pod in selection.evict:
            code, body = self._evict_once(pod, True)
            if code == 429:
                result["blocked"].append(dict(_entry(pod), pdb=self._pdb_for(pod, body),
                                              message=_status_message(body)))
            elif code not in (200, 201, 404):
                self._fail(pod, code, body, result)
        return result

    def _gone(self, pod):
        meta = _dict(pod.get("metadata"))
        current = self.api.read_pod(meta.get("namespace", ""), meta.get("name", ""))
        if current is None:
            return True
        current_meta = _dict(current.get("metadata"))
        if meta.get("uid") and current_meta.get("uid") != meta.get("uid"):
            return True  # a new pod of the same name (StatefulSet): ours is gone
        return _dict(current.get("spec")).get("nodeName") != self.node

    def run(self, selection):
        """Evict; returns the result dict or raises EvictionError (with the result so far) at the deadline."""
        deadline = self.clock() + self.timeout
        result = self.result
        result["terminating"] = [_entry(p) for p in selection.wait]
        pending = list(selection.evict)
        leaving = list(selection.wait)
        blocked = {}
        while True:
            still = []
            for pod in pending:
                code, body = self._evict_once(pod, False)
                if code in (200, 201):
                    result["evicted"].append(_entry(pod))
                    blocked.pop(pod_key(pod), None)
                    leaving.append(pod)
                elif code == 404:
                    blocked.pop(pod_key(pod), None)  # gone by itself meanwhile
                elif code == 429:
                    blocked[pod_key(pod)] = dict(_entry(pod), pdb=self._pdb_for(pod, body),
                                                 message=_status_message(body))
                    still.append(pod)
                else:
                    result["blocked"] = list(blocked.values())
                    self._fail(pod, code, body, result)
            pending = still
            leaving = [pod for pod in leaving if not self._gone(pod)]
            result["blocked"] = list(blocked.values())
            if not pending and not leaving:
                return result
            if self.clock() >= deadline:
                raise EvictionError(self._timeout_message(pending, leaving, blocked), result)
            self.sleep(max(0.0, min(self.wait_sleep, deadline - self.clock())))

    def _timeout_message(self, pending, leaving, blocked):
        parts = []
        if pending:
            names = []
            for pod in pending:
                entry = blocked.get(pod_key(pod), {})
                pdb = entry.get("pdb")
                names.append("%s (PodDisruptionBudget %s)" % (pod_key(pod), pdb) if pdb else pod_key(pod))
            parts.append("eviction of %s still refused after %ss" % (", ".join(names), self.timeout))
        if leaving:
            parts.append("%s still terminating on the node" % ", ".join(pod_key(p) for p in leaving))
        fix = ("let the budget allow a disruption (scale the workload up, or relax minAvailable/maxUnavailable), "
               "or move the pod away, then run again" if pending else
               "find what holds the pod (finalizers, a long grace period) or raise timeout, then run again")
        return "node %s: %s; %s" % (self.node, "; ".join(parts), fix)
