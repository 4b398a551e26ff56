# Test harness only (never shipped: tests/ is in galaxy.yml's build_ignore).
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containers.podman's podman connection with Ansible's pipelining, for the Molecule test hosts.

Why: without pipelining every module task costs five `podman exec` calls (home folder, mkdir of a temporary
folder, chmod, the module, rm), and on the 2-core CI machine those podman processes, not the roles, were most
of Molecule's CPU. containers.podman 1.18 turns pipelining off ("pipelining does not work with podman") because
its exec runs `podman exec` without `--interactive`, so the module that pipelining writes to stdin never
arrives. This connection passes `--interactive` when there is input, and is otherwise the same plugin: same
options, file transfer through the mounted container filesystem or `podman cp`.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = """
    name: podman_pipelined
    short_description: containers.podman.podman with pipelining (test harness)
    description:
        - containers.podman.podman, with C(podman exec --interactive) when a command has input, so that
          Ansible's pipelining works and a module task costs one C(podman exec) instead of five.
    options:
      remote_addr:
        description: The ID of the container you want to access.
        default: inventory_hostname
        vars:
          - name: ansible_host
          - name: inventory_hostname
          - name: ansible_podman_host
      remote_user:
        description: User (name or UID) which is used to execute commands inside the container.
        ini:
          - section: defaults
            key: remote_user
        env:
          - name: ANSIBLE_REMOTE_USER
        vars:
          - name: ansible_user
      podman_extra_args:
        description: Extra arguments to pass to the podman command line.
        default: ''
        ini:
          - section: defaults
            key: podman_extra_args
        vars:
          - name: ansible_podman_extra_args
        env:
          - name: ANSIBLE_PODMAN_EXTRA_ARGS
      podman_executable:
        description: Executable for podman command.
        default: podman
        vars:
          - name: ansible_podman_executable
        env:
          - name: ANSIBLE_PODMAN_EXECUTABLE
      pipelining:
        description: Pipeline the module to the container's Python through stdin.
        default: true
        type: boolean
        env:
          - name: ANSIBLE_PIPELINING
        ini:
          - section: defaults
            key: pipelining
          - section: connection
            key: pipelining
        vars:
          - name: ansible_pipelining
"""

import shlex

from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.connection import ensure_connect
from ansible_collections.containers.podman.plugins.connection.podman import Connection as PodmanConnection


class Connection(PodmanConnection):
    """containers.podman.podman, with stdin passed through to the container."""

    transport = "podman_pipelined"
    has_pipelining = True

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        # ConnectionBase.exec_command only logs; the parent's would drop in_data (no --interactive).
        super(PodmanConnection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
        exec_args = ["exec"]
        if in_data is not None:
            exec_args.append("--interactive")
        if self.user:
            exec_args.extend(("--user", self.user))
        return self._podman(exec_args, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)
