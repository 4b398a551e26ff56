# Test harness only (never shipped: tests/ is in galaxy.yml's build_ignore).
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containers.podman's podman connection with Ansible's pipelining, for the Molecule test hosts.

Why: without pipelining every module task costs five `podman exec` calls (home folder, mkdir of a temporary
folder, chmod, the module, rm), and on the 2-core CI machine those podman processes, not the roles, were most
of Molecule's CPU. containers.podman 1.18 turns pipelining off ("pipelining does not work with podman") because
its exec runs `podman exec` without `--interactive`, so the module that pipelining writes to stdin never
arrives. This connection passes `--interactive` when there is input, and is otherwise the same plugin: same
options, file transfer through the mounted container filesystem or `podman cp`.

Run as root (the harness always is), it goes one step further: a task still cost two podman processes (the
parent's `podman mount` at every connection, then `podman exec`), about 0.25 s of CPU, most of what a Molecule
task costs on the 2-core machine. So the container's init is looked up once (`podman inspect`, cached in
$GN_PODMAN_NSENTER_CACHE, default /tmp/gn-podman-nsenter, and checked by its start time, so a restarted container
is looked up again), and commands and file transfers enter its namespaces with util-linux's `nsenter`, the way
`podman exec` does, with the container's own environment, root and working directory: about 15 ms. What differs
from `podman exec`: the process keeps the caller's cgroup, capabilities and seccomp profile. GN_PODMAN_NSENTER=0
(or a remote_user, or not being root) keeps the podman commands.
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

import json
import os
import re
import shlex
import shutil
import subprocess

from ansible.errors import AnsibleConnectionFailure
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible.plugins.connection import ensure_connect
from ansible_collections.containers.podman.plugins.connection.podman import Connection as PodmanConnection

_INSPECT_FORMAT = "{{.State.Pid}} {{json .Config.Env}}"


def _start_time(pid):
    """The start time of process `pid` (field 22 of /proc/PID/stat), or None when there is no such process."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


class Connection(PodmanConnection):
    """containers.podman.podman, with stdin passed through to the container (and nsenter when root)."""

    transport = "podman_pipelined"
    has_pipelining = True

    def __init__(self, *args, **kwargs):
        super(Connection, self).__init__(*args, **kwargs)
        self._target = None

    def _nsenter_target(self):
        """(nsenter, pid, env) of the container's init, looked up once and cached; None where podman's own commands
        run."""
        if self._target is not None:
            return self._target
        nsenter = shutil.which("nsenter")
        if self.user or os.geteuid() != 0 or not nsenter or os.environ.get("GN_PODMAN_NSENTER", "1") == "0":
            return None
        folder = os.environ.get("GN_PODMAN_NSENTER_CACHE", "/tmp/gn-podman-nsenter")
        cache = os.path.join(folder, re.sub(r"[^A-Za-z0-9_.-]", "_", self._container_id) + ".json")
        try:
            with open(cache, encoding="utf-8") as handle:
                cached = json.load(handle)
        except (OSError, ValueError):
            cached = None
        if not cached or _start_time(cached["pid"]) != cached["started"]:
            rc, out, err = self._podman(["inspect", "--format", _INSPECT_FORMAT])
            if rc != 0:
                raise AnsibleConnectionFailure("podman inspect %s failed: %s" % (self._container_id, to_native(err)))
            pid, env = to_native(out).strip().split(" ", 1)
            pid = int(pid)
            if pid <= 0:
                raise AnsibleConnectionFailure("container %s is not running" % self._container_id)
            cached = {"pid": pid, "env": json.loads(env), "started": _start_time(pid)}
            # one temporary file per writer: two forks may look the same container up at once
            partial = "%s.%d.tmp" % (cache, os.getpid())
            os.makedirs(folder, exist_ok=True)
            with open(partial, "w", encoding="utf-8") as handle:
                json.dump(cached, handle)
            os.replace(partial, cache)
        self._target = (nsenter, cached["pid"], cached["env"])
        return self._target

    def _nsenter(self, argv, in_data=None):
        """Run argv inside the container's namespaces, as `podman exec` would: (rc, stdout, stderr)."""
        nsenter, pid, env = self._target
        command = [nsenter, "-t", str(pid), "-m", "-u", "-i", "-n", "-p", "-r", "-w", "--", "/usr/bin/env", "-i"]
        command += list(env) + list(argv)
        process = subprocess.Popen([to_bytes(part, errors="surrogate_or_strict") for part in command],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        stdout, stderr = process.communicate(input=in_data)
        return process.returncode, stdout, stderr

    def _connect(self):
        if self._connected:
            return
        if self._nsenter_target() is None:
            super(Connection, self)._connect()  # podman mount, for the parent's file transfer
            return
        super(PodmanConnection, self)._connect()
        self._connected = True

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        # ConnectionBase.exec_command only logs; the parent's would drop in_data (no --interactive).
        super(PodmanConnection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
        argv = shlex.split(to_native(cmd, errors="surrogate_or_strict"))
        if self._target is not None:
            return self._nsenter(argv, in_data)
        exec_args = ["exec"]
        if in_data is not None:
            exec_args.append("--interactive")
        if self.user:
            exec_args.extend(("--user", self.user))
        return self._podman(exec_args, argv, in_data)

    @ensure_connect
    def put_file(self, in_path, out_path):
        if self._target is None:
            return super(Connection, self).put_file(in_path, out_path)
        super(PodmanConnection, self).put_file(in_path, out_path)
        with open(to_bytes(in_path, errors="surrogate_or_strict"), "rb") as handle:
            data = handle.read()
        rc, _out, err = self._nsenter(["/bin/sh", "-c", 'cat > "$1"', "sh", out_path], data)
        if rc != 0:
            raise AnsibleConnectionFailure("Failed to copy %s to %s in container %s: %s"
                                           % (in_path, out_path, self._container_id, to_native(err)))
        return None

    @ensure_connect
    def fetch_file(self, in_path, out_path):
        if self._target is None:
            return super(Connection, self).fetch_file(in_path, out_path)
        super(PodmanConnection, self).fetch_file(in_path, out_path)
        rc, out, err = self._nsenter(["/bin/cat", in_path])
        if rc != 0:
            raise AnsibleConnectionFailure("Failed to fetch %s from container %s: %s"
                                           % (in_path, self._container_id, to_native(err)))
        with open(to_bytes(out_path, errors="surrogate_or_strict"), "wb") as handle:
            handle.write(out)
        return None
