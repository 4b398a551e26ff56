#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: containerd_runtime
short_description: Register an OCI runtime handler (such as C(nvidia)) in containerd's config
version_added: 0.1.0
author:
  - gpu_native.fleet contributors (@gpu-native)
description:
  - Registers an OCI runtime handler in containerd's CRI plugin, the way C(nvidia-ctk runtime configure --runtime=containerd)
    does, but idempotently and without rewriting the user's config.
  - Detects the config version. No C(version) key means v1 (plugin C(cri)); C(version = 2) uses
    C(io.containerd.grpc.v1.cri); C(version = 3) and C(4) use C(io.containerd.cri.v1.runtime).
    A missing or empty file is treated as v2. Other versions are rejected.
  - For v2 and later the handler goes into a drop-in, O(drop_in_dir)/C(99-<runtime_name>.toml), and the main file gets an
    C(imports) entry for O(drop_in_dir)/C(*.toml) by a minimal text edit, so that comments, other runtimes and registry
    mirrors stay as they are. A marker comment records what was added.
  - Because containerd before 2.1 replaces (rather than merges) plugin tables from imported files, the drop-in carries the
    whole CRI plugin table, copied from the main config on every run. A config tool that rewrites the main file (dropping
    C(imports) or changing the CRI table) is therefore repaired by the next run.
  - A v1 config is edited in place; the handler lives in a marked block at the end of the file.
  - The handler copies the C(runc) handler's settings (so C(SystemdCgroup = true) carries over), sets
    C(runtime_type = "io.containerd.runc.v2") and C(options.BinaryName) to O(binary_path).
  - The module does not restart containerd; use RV(effective_changed) to decide (the C(gpu_native.fleet.containerd_nvidia)
    role does this through a handler).
  - Needs a TOML reader on the managed node, one of C(tomllib) (Python 3.11+), C(tomli) or C(toml)
    (Debian/Ubuntu packages C(python3-tomli), C(python3-toml)).
options:
  config_path:
    description: containerd's main config file.
    type: path
    default: /etc/containerd/config.toml
  drop_in_dir:
    description:
      - Directory for the drop-in file (config v2 and later). The main config gets an C(imports) entry for
        C(<drop_in_dir>/*.toml) unless an existing entry already matches the drop-in.
    type: path
    default: /etc/containerd/conf.d
  runtime_name:
    description:
      - Name of the runtime handler. Kubernetes RuntimeClass C(handler) fields refer to it, so it must be a DNS label.
    type: str
    default: nvidia
  binary_path:
    description: The OCI runtime binary the handler runs (C(options.BinaryName)).
    type: path
    default: /usr/bin/nvidia-container-runtime
  set_as_default:
    description:
      - Make the handler containerd's default (C(default_runtime_name)), so pods without a RuntimeClass use it.
      - V(false) leaves C(default_runtime_name) as the main config sets it.
    type: bool
    default: false
  enable_cdi:
    description:
      - Set C(enable_cdi = true) in the CRI plugin table (C(io.containerd.grpc.v1.cri) for v2,
        C(io.containerd.cri.v1.runtime) for v3 and later).
      - V(false) leaves C(enable_cdi) as the main config sets it.
    type: bool
    default: false
  state:
    description:
      - V(present) registers the handler. V(absent) removes exactly what V(present) added
        (the drop-in, the C(imports) entry it added, or the v1 block); a user's own C(imports) entries stay.
    type: str
    choices: [present, absent]
    default: present
  allow_missing_binary:
    description:
      - With V(false), a O(binary_path) that does not exist fails the task (a warning in check mode).
      - Set V(true) on nodes where the runtime binary is installed later (for example by the NVIDIA Container Toolkit
        in the same play); the task then only warns.
    type: bool
    default: false
  backup:
    description: Keep a timestamped copy of the main config before changing it.
    type: bool
    default: false
notes:
  - Supports check mode (nothing is written) and diff mode (one diff per changed file).
  - Files are written atomically (a temporary file in the same directory, then a rename); existing files keep their
    mode and owner, a new drop-in gets the main config's mode (it may copy registry credentials from the CRI table).
  - Other drop-ins in O(drop_in_dir) that also set the CRI plugin table are reported as warnings; before containerd 2.1
    the file imported last replaces the whole table.
seealso:
  - name: containerd configuration (imports, versions)
    description: containerd's documentation of config versions and imports.
    link: https://github.com/containerd/containerd/blob/main/docs/PLUGINS.md
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
    support: full
"""

EXAMPLES = r"""
- name: Register the nvidia runtime handler (containerd 1.7/2.x, drop-in + imports)
  gpu_native.fleet.containerd_runtime:
  register: nvidia_runtime

- name: Restart containerd only when its effective config changed
  ansible.builtin.service:
    name: containerd
    state: restarted
  when: nvidia_runtime.effective_changed

- name: Make nvidia the default runtime and enable CDI, before the toolkit is installed
  gpu_native.fleet.containerd_runtime:
    set_as_default: true
    enable_cdi: true
    allow_missing_binary: true

- name: Register a second handler for the experimental runtime
  gpu_native.fleet.containerd_runtime:
    runtime_name: nvidia-experimental
    binary_path: /usr/bin/nvidia-container-runtime.experimental

- name: Remove the handler again (only what the module added)
  gpu_native.fleet.containerd_runtime:
    state: absent
"""

RETURN = r"""
config_version:
  description: The config version found (1, 2, 3 or 4; a missing or empty file counts as 2).
  returned: always
  type: int
  sample: 2
cri_plugin:
  description: The CRI plugin table the handler belongs to.
  returned: always
  type: str
  sample: io.containerd.grpc.v1.cri
drop_in_path:
  description: The drop-in file (config v2 and later); null for v1, where the main file is edited in place.
  returned: always
  type: str
  sample: /etc/containerd/conf.d/99-nvidia.toml
handler:
  description: The runtime handler table as registered (null for O(state=absent)).
  returned: always
  type: dict
  sample:
    runtime_type: io.containerd.runc.v2
    options:
      SystemdCgroup: true
      BinaryName: /usr/bin/nvidia-container-runtime
files_changed:
  description: Files written or removed (in check mode, the ones that would be).
  returned: always
  type: list
  elements: str
  sample: [/etc/containerd/config.toml, /etc/containerd/conf.d/99-nvidia.toml]
effective_changed:
  description:
    - Whether containerd would read a different config (a comment-only edit does not count).
      Restart containerd when this is true.
  returned: always
  type: bool
  sample: true
backup_file:
  description: The backup of the main config, when O(backup=true) and it changed.
  returned: changed and backup requested
  type: str
  sample: /etc/containerd/config.toml.12345.2026-01-01@00:00:00~
written:
  description:
    - Whether this run changed files on disk (false in check mode and when nothing needed changing).
      Together with RV(effective_changed) it tells whether containerd must be restarted now.
  returned: always
  type: bool
  sample: true
toml_reader:
  description: The TOML reader used on the managed node (tomllib, tomli or toml).
  returned: always
  type: str
  sample: tomllib
"""

import os
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native

from ansible_collections.gpu_native.fleet.plugins.module_utils import toml_compat
from ansible_collections.gpu_native.fleet.plugins.module_utils.containerd_config import (
    ContainerdConfigError,
    plan,
)


def _read(module, path):
    """File text, or None when it does not exist."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except (IOError, OSError) as exc:
        if not os.path.exists(path):
            return None
        module.fail_json(msg="Cannot read %s: %s. Fix: check the path and its permissions." % (path, to_native(exc)))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        module.fail_json(msg="%s is not UTF-8 text (%s). Nothing was changed. Fix: restore the file from a backup."
                         % (path, to_native(exc)))


def _other_drop_ins(module, drop_in_dir, own_path):
    found = {}
    if not os.path.isdir(drop_in_dir):
        return found
    for name in sorted(os.listdir(drop_in_dir)):
        path = os.path.join(drop_in_dir, name)
        if name.endswith(".toml") and path != own_path and os.path.isfile(path):
            text = _read(module, path)
            if text is not None:
                found[path] = text
    return found


def _write(module, path, text, new_mode):
    """Write atomically: a temp file in the same directory, then rename (mode/owner kept)."""
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        try:
            os.makedirs(directory, 0o755)
        except OSError as exc:
            module.fail_json(msg="Cannot create %s: %s. Fix: check the parent directory." % (directory, to_native(exc)))
    existed = os.path.exists(path)
    fd, temp_path = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(to_bytes(text))
        if existed:
            module.atomic_move(temp_path, path)  # keeps the file's mode, owner and SELinux context
        else:
            # atomic_move would give a new file the umask's mode; keep new_mode from the start.
            os.chmod(temp_path, new_mode)
            os.rename(temp_path, path)
            module.set_default_selinux_context(path, False)
    except (IOError, OSError) as exc:
        if os.path.exists(temp_path):
            os.unlink(temp_path)
        module.fail_json(msg="Cannot write %s: %s. Fix: check the file system and permissions." % (path, to_native(exc)))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            config_path=dict(type="path", default="/etc/containerd/config.toml"),
            drop_in_dir=dict(type="path", default="/etc/containerd/conf.d"),
            runtime_name=dict(type="str", default="nvidia"),
            binary_path=dict(type="path", default="/usr/bin/nvidia-container-runtime"),
            set_as_default=dict(type="bool", default=False),
            enable_cdi=dict(type="bool", default=False),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            allow_missing_binary=dict(type="bool", default=False),
            backup=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        reader = toml_compat.backend_name()
    except toml_compat.TomlUnavailableError as exc:
        module.fail_json(msg="%s. Fix: install python3-tomli (or python3-toml) on the node; the "
                             "gpu_native.fleet.containerd_nvidia role does this." % to_native(exc))

    if params["state"] == "present" and not os.path.exists(params["binary_path"]):
        message = ("Runtime binary %s does not exist on this node; containerd would fail to start containers with the "
                   "%r handler." % (params["binary_path"], params["runtime_name"]))
        if module.check_mode or params["allow_missing_binary"]:
            module.warn(message + " Install the NVIDIA Container Toolkit before running GPU pods.")
        else:
            module.fail_json(msg=message + " Fix: install the NVIDIA Container Toolkit first, correct binary_path, or "
                                           "set allow_missing_binary=true when the binary is installed later.")

    config_path = params["config_path"]
    config_text = _read(module, config_path)
    drop_in_dir = params["drop_in_dir"]
    own_drop_in = os.path.join(drop_in_dir, "99-%s.toml" % params["runtime_name"])
    try:
        result_plan = plan(
            config_path=config_path,
            config_text=config_text,
            drop_in_dir=drop_in_dir,
            drop_in_text=_read(module, own_drop_in),
            runtime_name=params["runtime_name"],
            binary_path=params["binary_path"],
            set_as_default=params["set_as_default"],
            enable_cdi=params["enable_cdi"],
            state=params["state"],
            other_drop_ins=_other_drop_ins(module, drop_in_dir, own_drop_in),
        )
    except ContainerdConfigError as exc:
        module.fail_json(msg=to_native(exc))
    except toml_compat.TomlParseError as exc:
        # Only reachable through a hand-edited marker comment: the files themselves were parsed above.
        module.fail_json(msg="%s or a drop-in holds a gpu_native.fleet.containerd_runtime marker comment that cannot be "
                             "read (%s). Nothing was changed. Fix: delete the damaged marker comment and re-run."
                             % (config_path, to_native(exc)))

    for warning in result_plan.warnings:
        module.warn(warning)

    changes = [change for change in result_plan.files if change.changed]
    result = dict(
        changed=bool(changes),
        config_version=result_plan.version,
        cri_plugin=result_plan.cri_plugin,
        drop_in_path=result_plan.drop_in_path,
        handler=result_plan.handler,
        files_changed=[change.path for change in changes],
        effective_changed=result_plan.effective_changed,
        toml_reader=reader,
        written=False,
    )
    if module._diff:
        result["diff"] = [
            dict(
                before=change.before or "",
                after=change.after or "",
                before_header="%s%s" % (change.path, "" if change.before is not None else " (absent)"),
                after_header="%s%s" % (change.path, "" if change.after is not None else " (removed)"),
            )
            for change in changes
        ]
    if module.check_mode or not changes:
        module.exit_json(**result)

    # A new drop-in copies the main config's CRI table, which may hold registry
    # credentials: it gets the main file's mode (0644 when there is none).
    new_mode = 0o644
    if os.path.isfile(config_path):
        new_mode = stat.S_IMODE(os.stat(config_path).st_mode) & 0o666
    # present: drop-in before the main file that imports it; absent: the import goes first.
    ordered = changes if params["state"] == "absent" else list(reversed(changes))
    for change in ordered:
        if change.path == config_path and params["backup"] and change.before is not None:
            result["backup_file"] = module.backup_local(config_path)
        if change.after is None:
            try:
                os.unlink(change.path)
            except OSError as exc:
                if os.path.exists(change.path):
                    module.fail_json(msg="Cannot remove %s: %s. Fix: check permissions." % (change.path, to_native(exc)),
                                     **result)
        else:
            _write(module, change.path, change.after, new_mode)
        result["written"] = True
    module.exit_json(**result)


if __name__ == "__main__":
    main()
