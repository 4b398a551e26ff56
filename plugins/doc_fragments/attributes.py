# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The attributes every module documents (as ansible.builtin's action_common_attributes and community.docker's
    attributes fragments do).

    ``gpu_native.fleet.attributes``: the descriptions of C(check_mode), C(diff_mode) and C(platform); each module
    states its own C(support) (and C(platforms)) in its C(attributes), so a missing one fails validate-modules.
    ``gpu_native.fleet.attributes.actiongroup_node_tools``: membership of the C(node_tools) action group of
    meta/runtime.yml (the modules whose options include O(nvidia_smi) and O(command_timeout)).
    ``gpu_native.fleet.attributes.actiongroup_k8s``: membership of the C(k8s) action group (the modules that take
    kubernetes.core's connection options).
    tests/unit/meta/test_runtime.py checks that these memberships and meta/runtime.yml agree.
    """

    DOCUMENTATION = r"""
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
  platform:
    description: Target OS/families that can be operated against.
    support: N/A
"""

    ACTIONGROUP_NODE_TOOLS = r"""
attributes:
  action_group:
    description:
      - Use C(group/gpu_native.fleet.node_tools) in C(module_defaults) to set defaults for this module. Every member
        takes O(nvidia_smi) and O(command_timeout); other options are not shared by the whole group.
    support: full
    membership:
      - gpu_native.fleet.node_tools
"""

    ACTIONGROUP_K8S = r"""
attributes:
  action_group:
    description:
      - Use C(group/gpu_native.fleet.k8s) in C(module_defaults) to set the Kubernetes connection options
        (O(kubeconfig), O(context), O(host) ...) for this module, next to C(group/kubernetes.core.k8s).
    support: full
    membership:
      - gpu_native.fleet.k8s
"""
