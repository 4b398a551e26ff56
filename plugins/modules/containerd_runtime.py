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
  - Detects the config version. C(version = 2) uses C(io.containerd.grpc.v1.cri); C(version = 3) and C(4) use
    C(io.containerd.cri.v1.runtime). A missing or empty file is treated as v2. Version 1 (or a non-empty file
    without C(version), which containerd reads as 1) is refused with nothing changed; run C(containerd config migrate)
    (containerd 1.7+) first. Other versions are rejected.
  - The handler goes into a drop-in, O(drop_in_dir)/C(99-<runtime_name>.toml), and the main file gets an
    C(imports) entry for O(drop_in_dir)/C(*.toml) by a minimal text edit, so that comments, other runtimes and registry
    mirrors stay as they are. A marker comment records what was added.
  - Because containerd before 2.0.0 replaces (rather than merges) plugin tables from imported files, the drop-in carries
    the whole CRI plugin table, copied from the main config on every run. A config tool that rewrites the main file
    (dropping C(imports) or changing the CRI table) is therefore repaired by the next run.
  - The drop-in declares the main config's C(version), never a higher one (containerd 2.3.0 to 2.3.4 refuse to start
    when an imported file declares a higher version than the root config).
  - When the main config already defines a handler of that name (GPU node images often ship C(nvidia), sometimes as the
    default runtime), every key it has is kept (C(runtime_type), C(base_runtime_spec), C(options.SystemdCgroup), ...);
    only C(options.BinaryName) (when O(binary_path) is given) and C(options.SystemdCgroup) (when O(systemd_cgroup) is
    not V(inherit)) change. When it already is as asked, nothing is written.
  - A new handler copies the settings of the first runc-type runtime of the default runtime (C(default_runtime_name)),
    C(runc), C(crun), then any runc-type runtime that sets C(SystemdCgroup), reported as RV(inherited_from); it gets
    C(runtime_type = "io.containerd.runc.v2") and C(options.BinaryName). When there is none, the task warns.
  - The main config and the drop-in are written as one unit; when one cannot be written, the other is restored and
    the task fails naming the path. A symlinked config is edited behind the link (the link stays). The C(imports)
    line added to a file with CRLF line endings ends in CRLF too.
  - The module does not restart containerd; use RV(effective_changed) to decide (the C(gpu_native.fleet.containerd_nvidia)
    role does this through a handler).
  - Needs a TOML reader on the managed node, one of C(tomllib) (Python 3.11+), C(tomli) or C(toml)
    (Debian/Ubuntu packages C(python3-tomli), C(python3-toml)).
extends_documentation_fragment:
  - gpu_native.fleet.attributes
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
    description:
      - The OCI runtime binary the handler runs (C(options.BinaryName)).
      - When not given, an existing handler keeps its C(BinaryName) and a new one gets
        C(/usr/bin/nvidia-container-runtime).
    type: path
  systemd_cgroup:
    description:
      - C(options.SystemdCgroup) of the handler. V(inherit) keeps an existing handler's value and gives a new one the
        value of the runtime it copies (see RV(inherited_from)); V(true) or V(false) sets it.
      - Set V(true) when the kubelet uses the systemd cgroup driver and the config has no runtime to copy from.
    type: raw
    default: inherit
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
        (the drop-in and the C(imports) entry it added); a user's own C(imports) entries stay.
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
  - Other drop-ins in O(drop_in_dir) that also set the CRI plugin table are reported as warnings; before containerd 2.0.0
    the file imported last replaces the whole table.
  - Input limits, each failing with nothing changed - files of at most 1 MiB, at most 32 levels of nesting, at most 256
    C(*.toml) files in O(drop_in_dir).
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
  platform:
    support: full
    platforms: linux
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

- name: A config without runc or SystemdCgroup, on a kubelet with the systemd cgroup driver
  gpu_native.fleet.containerd_runtime:
    systemd_cgroup: true

- name: Remove the handler again (only what the module added)
  gpu_native.fleet.containerd_runtime:
    state: absent
"""

RETURN = r"""
config_version:
  description: The config version found (2, 3 or 4; a missing or empty file counts as 2).
  returned: always
  type: int
  sample: 2
cri_plugin:
  description: The CRI plugin table the handler belongs to.
  returned: always
  type: str
  sample: io.containerd.grpc.v1.cri
drop_in_path:
  description: The drop-in file.
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
handler_existed:
  description: Whether the main config already defined a handler of that name (its keys are then kept).
  returned: always
  type: bool
  sample: false
handler_changes:
  description: What changed in the handler, one line per key in the form C(key - before -> after) (a new handler lists every key).
  returned: always
  type: list
  elements: str
  sample: ['options.BinaryName: "/usr/local/nvidia/toolkit/nvidia-container-runtime" -> "/usr/bin/nvidia-container-runtime"']
inherited_from:
  description:
    - The runtime a new handler copied its settings from (default runtime, C(runc), C(crun), or a runc-type runtime
      with C(SystemdCgroup)); null when the handler already existed or there was nothing to copy.
  returned: always
  type: str
  sample: runc
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
import shutil
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import toml_compat
from ansible_collections.gpu_native.fleet.plugins.module_utils.containerd.containerd_config import (
    MAX_CONFIG_CHARS,
    MAX_DROP_INS,
    ContainerdConfigError,
    plan,
)

# Where containerd's systemd unit finds a BinaryName without a path.
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class WriteRefused(Exception):
    """A file or directory that could not be written; ``path`` names it."""

    def __init__(self, path, reason):
        super(WriteRefused, self).__init__("%s: %s" % (path, reason))
        self.path = path
        self.reason = reason
        self.problems = []  # what a rollback could not restore


def _read(module, path, limit=MAX_CONFIG_CHARS):
    """File text, or None when it does not exist.  Larger than ``limit`` bytes: fail."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(limit + 1)
    except (IOError, OSError) as exc:
        if not os.path.lexists(path):
            return None
        module.fail_json(msg="Cannot read %s: %s. Nothing was changed. Fix: check the path and its permissions."
                         % (path, to_native(exc)))
    if len(raw) > limit:
        module.fail_json(msg="%s is larger than %d bytes, more than this module reads. Nothing was changed. "
                             "Fix: check that it is really a containerd config (they are a few KiB)." % (path, limit))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        module.fail_json(msg="%s is not UTF-8 text (%s). Nothing was changed. Fix: restore the file from a backup."
                         % (path, to_native(exc)))


def _other_drop_ins(module, drop_in_dir, own_path):
    found = {}
    if not os.path.isdir(drop_in_dir):
        return found
    names = sorted(name for name in os.listdir(drop_in_dir) if name.endswith(".toml"))
    if len(names) > MAX_DROP_INS:
        module.fail_json(msg="%s holds %d *.toml files, more than the %d this module reads. Nothing was changed. "
                             "Fix: remove stale drop-ins." % (drop_in_dir, len(names), MAX_DROP_INS))
    for name in names:
        path = os.path.join(drop_in_dir, name)
        if path != own_path and os.path.isfile(path):
            text = _read(module, path)
            if text is not None:
                found[path] = text
    return found


def _replace(module, target, data, new_mode):
    """Write ``data`` to ``target`` atomically: a temp file beside it, then os.replace.

    An existing file keeps its mode, owner and SELinux context; a new one gets ``new_mode``.
    Raises WriteRefused; never leaves the temp file behind.
    """
    directory = os.path.dirname(target)
    existed = os.path.exists(target)
    context = None
    try:
        fd, temp_path = tempfile.mkstemp(prefix=".%s." % os.path.basename(target), dir=directory)
    except (IOError, OSError) as exc:
        raise WriteRefused(directory, to_native(exc))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        if existed:
            info = os.stat(target)
            os.chmod(temp_path, stat.S_IMODE(info.st_mode))
            try:
                os.chown(temp_path, info.st_uid, info.st_gid)
            except OSError:
                pass  # not root: the file stays ours, as any editor would leave it
            if module.selinux_enabled():
                context = module.selinux_context(target)
        else:
            os.chmod(temp_path, new_mode)
        os.replace(temp_path, target)
    except (IOError, OSError) as exc:
        if os.path.exists(temp_path):
            os.unlink(temp_path)
        raise WriteRefused(target, to_native(exc))
    if context is not None:
        module.set_context_if_different(target, context, False)
    elif not existed:
        module.set_default_selinux_context(target, False)


def _apply(module, changes, new_mode):
    """Write every change or none: on a failure, put back what was there and raise WriteRefused.

    Writes go to the real file behind a symlink, so the link stays a link.
    Returns a list of messages about a rollback that itself failed (empty when clean).
    """
    done = []  # (target, previous bytes or None)
    created_dirs = []
    try:
        for change in changes:
            target = os.path.realpath(change.path)
            previous = None
            if os.path.exists(target):
                try:
                    with open(target, "rb") as handle:
                        previous = handle.read()
                except (IOError, OSError) as exc:
                    raise WriteRefused(target, to_native(exc))
            if change.after is None:
                if previous is None:
                    continue
                try:
                    os.unlink(change.path)
                except OSError as exc:
                    raise WriteRefused(change.path, to_native(exc))
                done.append((target, previous))
                continue
            directory = os.path.dirname(target)
            missing = []
            while directory and not os.path.isdir(directory):
                missing.append(directory)
                directory = os.path.dirname(directory)
            for path in reversed(missing):
                try:
                    os.mkdir(path, 0o755)
                except OSError as exc:
                    raise WriteRefused(path, to_native(exc))
                created_dirs.append(path)
            _replace(module, target, to_bytes(change.after), new_mode)
            done.append((target, previous))
    except WriteRefused as refused:
        problems = []
        for target, previous in reversed(done):
            try:
                if previous is None:
                    os.unlink(target)
                else:
                    _replace(module, target, previous, new_mode)
            except (WriteRefused, OSError) as exc:
                problems.append("could not restore %s (%s)" % (target, to_native(exc)))
        for path in reversed(created_dirs):
            try:
                os.rmdir(path)
            except OSError as exc:
                problems.append("could not remove %s (%s)" % (path, to_native(exc)))
        refused.problems = problems
        raise


def _systemd_cgroup(module, value):
    if value is None or value == "inherit":
        return None
    try:
        return boolean(value, strict=True)
    except TypeError:
        module.fail_json(msg="systemd_cgroup is %r. Nothing was changed. Fix: use true, false or inherit." % (value,))


def _check_binary(module, binary, runtime_name, given):
    if not binary:
        return
    if os.path.isabs(binary):
        found = os.path.exists(binary)
    else:
        found = shutil.which(binary, path=_SYSTEM_PATH) is not None
    if found:
        return
    message = ("Runtime binary %s does not exist on this node; containerd would fail to start containers with the "
               "%r handler." % (binary, runtime_name))
    if module.check_mode or module.params["allow_missing_binary"]:
        module.warn(message + " Install the NVIDIA Container Toolkit before running GPU pods.")
    else:
        module.fail_json(msg=message + " Fix: install the NVIDIA Container Toolkit first, %s, or set "
                                       "allow_missing_binary=true when the binary is installed later."
                         % ("correct binary_path" if given else "pass binary_path"))


def _handler_toml(cri, runtime_name, handler):
    if handler is None:
        return ""
    return toml_compat.dumps({"plugins": {cri: {"containerd": {"runtimes": {runtime_name: handler}}}}})


def main():
    module = AnsibleModule(
        argument_spec=dict(
            config_path=dict(type="path", default="/etc/containerd/config.toml"),
            drop_in_dir=dict(type="path", default="/etc/containerd/conf.d"),
            runtime_name=dict(type="str", default="nvidia"),
            binary_path=dict(type="path"),
            systemd_cgroup=dict(type="raw", default="inherit"),
            set_as_default=dict(type="bool", default=False),
            enable_cdi=dict(type="bool", default=False),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            allow_missing_binary=dict(type="bool", default=False),
            backup=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    systemd_cgroup = _systemd_cgroup(module, params["systemd_cgroup"])
    try:
        reader = toml_compat.backend_name()
    except toml_compat.TomlUnavailableError as exc:
        module.fail_json(msg="%s. Fix: install python3-tomli (or python3-toml) on the node; the "
                             "gpu_native.fleet.containerd_nvidia role does this." % to_native(exc))

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
            systemd_cgroup=systemd_cgroup,
        )
    except ContainerdConfigError as exc:
        module.fail_json(msg=to_native(exc))

    if params["state"] == "present":
        binary = (result_plan.handler or {}).get("options", {}).get("BinaryName")
        _check_binary(module, binary, params["runtime_name"], params["binary_path"] is not None)

    for warning in result_plan.warnings:
        module.warn(warning)

    changes = [change for change in result_plan.files if change.changed]
    result = dict(
        changed=bool(changes),
        config_version=result_plan.version,
        cri_plugin=result_plan.cri_plugin,
        drop_in_path=result_plan.drop_in_path,
        handler=result_plan.handler,
        handler_existed=result_plan.existing_handler is not None,
        handler_changes=result_plan.handler_changes() if params["state"] == "present" else [],
        inherited_from=result_plan.inherited_from,
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
        if changes and params["state"] == "present" and result_plan.handler != result_plan.existing_handler:
            # The drop-in diff shows the whole CRI table; this one shows only the handler.
            label = "runtime %s as containerd reads it" % params["runtime_name"]
            result["diff"].append(dict(
                before=_handler_toml(result_plan.cri_plugin, params["runtime_name"], result_plan.existing_handler),
                after=_handler_toml(result_plan.cri_plugin, params["runtime_name"], result_plan.handler),
                before_header="%s (%s)" % (config_path, label),
                after_header="%s (%s)" % (result_plan.drop_in_path, label),
            ))
    if module.check_mode or not changes:
        module.exit_json(**result)

    # A new drop-in copies the main config's CRI table, which may hold registry
    # credentials: it gets the main file's mode (0644 when there is none).
    new_mode = 0o644
    if os.path.isfile(config_path):
        new_mode = stat.S_IMODE(os.stat(config_path).st_mode) & 0o666
    if params["backup"] and any(c.path == config_path and c.before is not None for c in changes):
        result["backup_file"] = module.backup_local(os.path.realpath(config_path))
    # present: drop-in before the main file that imports it; absent: the import goes first.
    ordered = changes if params["state"] == "absent" else list(reversed(changes))
    try:
        _apply(module, ordered, new_mode)
    except WriteRefused as exc:
        problems = exc.problems
        state = ("Nothing was changed (files written before it were restored)." if not problems
                 else "Restoring failed too: %s; restore them from backup." % "; ".join(problems))
        result["changed"] = bool(problems)
        result["path"] = exc.path
        result["msg"] = ("Cannot write %s: %s. %s Fix: make it writable (check `lsattr` for the immutable flag and "
                         "`chattr -i`, a read-only mount, permissions) and re-run." % (exc.path, exc.reason, state))
        module.fail_json(**result)
    result["written"] = True
    module.exit_json(**result)


if __name__ == "__main__":
    main()
