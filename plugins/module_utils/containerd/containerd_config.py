# -*- coding: utf-8 -*-
# Copyright (c) gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""containerd config logic: versions, CRI tables, the OCI runtime handler, imports.

Pure functions over file *text*: ``plan()`` takes what is on disk and returns
what should be there.  The module (plugins/modules/containerd_runtime.py) does
the I/O, check mode and diff.

Layout per config version (see docs/containerd_nvidia.md):

=======  ===============================  =========================================
version  CRI plugin table                 handler written to
=======  ===============================  =========================================
1/none   refused: run ``containerd config migrate`` first
2        ``io.containerd.grpc.v1.cri``    ``<drop_in_dir>/99-<name>.toml`` + imports
3, 4     ``io.containerd.cri.v1.runtime`` ``<drop_in_dir>/99-<name>.toml`` + imports
=======  ===============================  =========================================

containerd before 2.0.0 *replaces* a plugin table found in an imported file
instead of merging it (merging came with containerd PR #9982, released in
2.0.0), so the drop-in carries the whole CRI table, copied from the main
config on every run (never kept stale).  The drop-in declares the root
config's ``version``: containerd 2.3.0 to 2.3.4 refuse to start when an
imported file declares a higher one.

The handler: an existing entry of the same name keeps every key it has
(only ``BinaryName`` and ``SystemdCgroup`` change, and only when asked).  A new
entry copies a runc-type runtime's settings, in the order ``nvidia-ctk``
uses -- the default runtime, ``runc``, ``crun`` -- and then any runc-type
runtime that sets ``SystemdCgroup``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import fnmatch
import os
import re

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils._common import toml_compat

RUNC_V2 = "io.containerd.runc.v2"
CRI_PLUGINS = {
    2: "io.containerd.grpc.v1.cri",
    3: "io.containerd.cri.v1.runtime",
    4: "io.containerd.cri.v1.runtime",
}
SUPPORTED_VERSIONS = (2, 3, 4)
DEFAULT_VERSION = 2
DEFAULT_BINARY = "/usr/bin/nvidia-container-runtime"
# Input limits (docs/DEVELOPING.md, "Input limits").  containerd configs are a
# few KiB; kubeadm/EKS/GKE ones stay under 64 KiB.
MAX_CONFIG_CHARS = 1024 * 1024
MAX_DEPTH = 32
MAX_DROP_INS = 256
V1_MESSAGE = ("%s: config version 1 is not supported: run `containerd config migrate` (containerd 1.7+) and retry; "
              "nothing was changed.")

MARKER = "# gpu_native.fleet.containerd_runtime:"
_MARKER_RE = re.compile(
    r"^[ \t]*# gpu_native\.fleet\.containerd_runtime: "
    r"(added imports entry|added imports line|added version line|created this file)"
    r"(?: (\"(?:[^\"\\]|\\.)*\"))?.*$",
    re.M,
)
# RuntimeClass.handler must be a DNS label, so the containerd runtime name must be one.
_RUNTIME_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class ContainerdConfigError(FleetError):
    """A config that cannot be handled; the message says why and how to fix it."""


class FileChange:
    """What one file should become.  ``before``/``after`` None: missing / delete."""

    def __init__(self, path, before, after, effective):
        self.path = path
        self.before = before
        self.after = after
        # Whether containerd would see a different config (not only comments).
        self.effective = effective

    @property
    def changed(self):
        return self.before != self.after


class Plan:
    def __init__(self, version, cri_plugin, drop_in_path, handler, files, warnings,
                 inherited_from=None, existing_handler=None):
        self.version = version
        self.cri_plugin = cri_plugin
        self.drop_in_path = drop_in_path
        self.handler = handler
        self.files = files
        self.warnings = warnings
        # The runtime whose settings a new handler copied (None: kept an existing one, or none found).
        self.inherited_from = inherited_from
        # The handler as the main config already defined it (None when it did not).
        self.existing_handler = existing_handler

    @property
    def changed(self):
        return any(change.changed for change in self.files)

    @property
    def effective_changed(self):
        return any(change.changed and change.effective for change in self.files)

    def handler_changes(self):
        """``path: before -> after`` lines for what the handler gained or lost (a new one: everything)."""
        return describe_changes(self.existing_handler or {}, self.handler or {})


def describe_changes(before, after, prefix=""):
    lines = []
    for key in list(before) + [k for k in after if k not in before]:
        path = prefix + key
        if key not in after:
            lines.append("%s: %s -> (removed)" % (path, _short(before[key])))
        elif key not in before:
            lines.append("%s: (unset) -> %s" % (path, _short(after[key])))
        elif isinstance(before[key], dict) and isinstance(after[key], dict):
            lines.extend(describe_changes(before[key], after[key], path + "."))
        elif before[key] != after[key] or type(before[key]) is not type(after[key]):
            lines.append("%s: %s -> %s" % (path, _short(before[key]), _short(after[key])))
    return lines


def _short(value):
    try:
        return toml_compat.format_value(value)
    except toml_compat.TomlWriteError:
        return repr(value)


# ---------------------------------------------------------------- parsing


def parse(text, path):
    """Parse config text, within the input limits; errors name the file and line."""
    if len(text) > MAX_CONFIG_CHARS:
        raise ContainerdConfigError(
            "%s is %d characters long, more than the %d this module reads. Nothing was changed. "
            "Fix: check that it is really containerd's config (they are a few KiB); move large parts "
            "into imported files." % (path, len(text), MAX_CONFIG_CHARS))
    try:
        data = toml_compat.loads(text)
    except toml_compat.TomlParseError as exc:
        where = "line %s" % exc.line if exc.line is not None else "an unknown line"
        if exc.line is not None and exc.column is not None:
            where += ", column %s" % exc.column
        raise ContainerdConfigError(
            "%s is not valid TOML at %s: %s. Nothing was changed. "
            "Fix: correct the TOML syntax (containerd refuses to start with it) or restore the file from a backup."
            % (path, where, exc.reason)
        )
    if _depth(data) > MAX_DEPTH:
        raise ContainerdConfigError(
            "%s nests tables or arrays more than %d levels deep. Nothing was changed. "
            "Fix: containerd configs need far fewer levels; correct the file." % (path, MAX_DEPTH))
    return data


def _depth(value):
    """Nesting depth of parsed TOML (iterative: no recursion limit to hit)."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            break
        if isinstance(node, dict):
            stack.extend((child, level + 1) for child in node.values())
        elif isinstance(node, list):
            stack.extend((child, level + 1) for child in node)
    return deepest


def detect_version(data, path):
    """The config version: an empty config -> 2, else 2/3/4; version 1 (or no key) is refused."""
    if not data:
        return DEFAULT_VERSION
    if "version" not in data:
        raise ContainerdConfigError(V1_MESSAGE % path + " (The file has no 'version' key, which containerd reads as 1.)")
    version = data["version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise ContainerdConfigError(
            "%s: 'version' is %r, not an integer. Nothing was changed. Fix: set 'version = 2' (containerd 1.x) or "
            "'version = 3' (containerd 2.x)." % (path, version)
        )
    if version == 1:
        raise ContainerdConfigError(V1_MESSAGE % path)
    if version not in SUPPORTED_VERSIONS:
        raise ContainerdConfigError(
            "%s declares config version %d, which this module does not support (supported: 2, 3, 4). "
            "Nothing was changed. Fix: check the containerd release that wrote it, or regenerate it with "
            "'containerd config default'." % (path, version)
        )
    return version


def cri_plugin_name(version):
    return CRI_PLUGINS[version]


def _get(data, path):
    node = data
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _table(data, path, where):
    """The dict at ``path``, creating it; error when something else is there."""
    node = data
    for index, key in enumerate(path):
        if key not in node:
            node[key] = {}
        node = node[key]
        if not isinstance(node, dict):
            raise ContainerdConfigError(
                "%s: %s is a %s, not a table. Fix: correct the config so that it is a TOML table."
                % (where, ".".join(path[: index + 1]), type(node).__name__)
            )
    return node


def validate_runtime_name(name):
    if not _RUNTIME_NAME_RE.match(name or ""):
        raise ContainerdConfigError(
            "runtime_name %r is not a valid handler name. Fix: use a DNS label (lower-case letters, digits and '-', "
            "at most 63 characters), as Kubernetes RuntimeClass.handler requires." % (name,)
        )


def _runtimes(cri_table):
    runtimes = _get(cri_table or {}, ("containerd", "runtimes"))
    return runtimes if isinstance(runtimes, dict) else {}


def _is_runc_type(entry):
    # containerd's CRI plugin uses io.containerd.runc.v2 when runtime_type is empty.
    return isinstance(entry, dict) and entry.get("runtime_type", RUNC_V2) in (RUNC_V2, "")


def _sets_systemd_cgroup(entry):
    options = entry.get("options")
    return isinstance(options, dict) and "SystemdCgroup" in options


def inheritance_source(cri_table, runtime_name):
    """The runtime a new handler copies: ``(name, entry)`` or ``(None, None)``.

    Order: the default runtime (``default_runtime_name``), ``runc``, ``crun`` (as
    ``nvidia-ctk runtime configure`` does: NVIDIA/nvidia-container-toolkit,
    pkg/config/engine GetLowLevelRuntimes), then the first runc-type runtime that
    sets ``SystemdCgroup``.  Two deliberate differences from nvidia-ctk: a default
    whose name starts with ``nvidia`` is not skipped (on images whose only runtime
    is an NVIDIA one it is the only source of SystemdCgroup), and only runc-type
    runtimes qualify (a kata or gVisor default has options a runc shim does not
    understand).
    """
    runtimes = _runtimes(cri_table)
    default = _get(cri_table or {}, ("containerd", "default_runtime_name"))
    candidates = []
    if isinstance(default, str) and default:
        candidates.append(default)
    candidates.extend(("runc", "crun"))
    for name in candidates:
        entry = runtimes.get(name)
        if name != runtime_name and _is_runc_type(entry):
            return name, entry
    for name, entry in runtimes.items():
        if name != runtime_name and _is_runc_type(entry) and _sets_systemd_cgroup(entry):
            return name, entry
    return None, None


def _set_option(handler, key, value):
    options = handler.get("options")
    if not isinstance(options, dict):
        options = {}
        handler["options"] = options
    options[key] = value


def build_handler(cri_table, runtime_name, binary_path, systemd_cgroup=None):
    """The handler entry, ``(handler, existing, inherited_from)``.

    ``binary_path`` None keeps an existing handler's BinaryName (a new one gets
    DEFAULT_BINARY); ``systemd_cgroup`` None inherits/keeps, True/False sets it.
    """
    existing = _runtimes(cri_table).get(runtime_name)
    if existing is not None and not isinstance(existing, dict):
        raise ContainerdConfigError(
            "containerd.runtimes.%s is a %s, not a table. Nothing was changed. Fix: correct the config."
            % (runtime_name, type(existing).__name__))
    if existing is not None:
        handler = copy.deepcopy(existing)
        if binary_path is not None:
            _set_option(handler, "BinaryName", binary_path)
        if systemd_cgroup is not None:
            _set_option(handler, "SystemdCgroup", systemd_cgroup)
        return handler, copy.deepcopy(existing), None
    source_name, source = inheritance_source(cri_table, runtime_name)
    handler = copy.deepcopy(source) if source is not None else {}
    _set_option(handler, "BinaryName", binary_path or DEFAULT_BINARY)
    if systemd_cgroup is not None:
        _set_option(handler, "SystemdCgroup", systemd_cgroup)
    # runtime_type first, as containerd writes it.
    ordered = {"runtime_type": RUNC_V2}
    for key, value in handler.items():
        if key != "runtime_type":
            ordered[key] = value
    return ordered, None, source_name


def _apply_handler(cri_table, runtime_name, handler, set_as_default, enable_cdi, where):
    runtimes = _table(cri_table, ("containerd", "runtimes"), where)
    runtimes[runtime_name] = handler
    if set_as_default:
        _table(cri_table, ("containerd",), where)["default_runtime_name"] = runtime_name
    if enable_cdi:
        cri_table["enable_cdi"] = True


# ---------------------------------------------------------------- imports


def import_covers(entry, target_path, config_path):
    """Whether one ``imports`` glob matches ``target_path`` (Go filepath.Glob rules)."""
    if not isinstance(entry, str):
        return False
    if not os.path.isabs(entry):
        # containerd resolves relative imports against the importing file's directory.
        entry = os.path.join(os.path.dirname(config_path), entry)
    pattern_parts = os.path.normpath(entry).split("/")
    target_parts = os.path.normpath(target_path).split("/")
    if len(pattern_parts) != len(target_parts):
        return False
    return all(fnmatch.fnmatchcase(t, p) for t, p in zip(target_parts, pattern_parts))


def _markers(text):
    """Our marker comments: list of (kind, glob or None, line_start, line_end)."""
    found = []
    for match in _MARKER_RE.finditer(text):
        glob = toml_compat.loads("g = %s" % match.group(2))["g"] if match.group(2) else None
        end = match.end() + 1 if match.end() < len(text) else match.end()
        found.append((match.group(1), glob, match.start(), end))
    return found


def _marker_line(kind, glob=None):
    text = "%s %s" % (MARKER, kind)
    if glob is not None:
        text += " " + toml_compat.quote_string(glob)
    return text + " (state=absent removes it)\n"


def _remove_spans(text, spans):
    for start, end in sorted(spans, reverse=True):
        text = text[:start] + text[end:]
    return text


def _top_level(statements, key):
    for statement in statements:
        if statement.kind == "keyval" and statement.table == () and statement.key == (key,):
            return statement
    return None


def _element_values(text, statement):
    values = []
    for start, end, _comma in statement.elements or []:
        try:
            values.append(toml_compat.loads("v = %s" % text[start:end])["v"])
        except toml_compat.TomlParseError:
            values.append(None)
    return values


def ensure_imports(text, glob, drop_in_path, config_path, created):
    """Make the main config import ``drop_in_path``, by a minimal text edit.

    Returns the new text.  Comments and everything else are kept; a marker
    comment records what was added so that ``remove_imports`` undoes exactly that.
    """
    data = toml_compat.loads(text)
    imports = data.get("imports")
    if imports is not None and not isinstance(imports, list):
        raise ContainerdConfigError(
            "%s: 'imports' is a %s, not an array. Fix: write it as imports = [\"/etc/containerd/conf.d/*.toml\"]."
            % (config_path, type(imports).__name__)
        )
    imports = imports or []
    # Markers whose entry a config tool has since removed are stale.
    stale = [(start, end) for kind, marked, start, end in _markers(text)
             if kind in ("added imports entry", "added imports line") and marked not in imports]
    text = _remove_spans(text, stale)
    if any(import_covers(entry, drop_in_path, config_path) for entry in imports):
        return text
    statements = toml_compat.scan_statements(text)
    imports_statement = _top_level(statements, "imports")
    quoted = toml_compat.quote_string(glob)
    if imports_statement is not None:
        elements = imports_statement.elements or []
        if elements:
            last_start, last_end, _comma = elements[-1]
            line_start = text.rfind("\n", 0, last_start) + 1
            multiline = "\n" in text[imports_statement.value_start:last_start]
            if multiline:
                indent = text[line_start:last_start]
                insertion = ",\n%s%s" % (indent if not indent.strip() else "  ", quoted)
            else:
                insertion = ", %s" % quoted
            text = text[:last_end] + insertion + text[last_end:]
        else:
            close = text.rindex("]", imports_statement.value_start, imports_statement.value_end)
            text = text[:close] + quoted + text[close:]
        marker = _marker_line("added imports entry", glob)
        return text[:imports_statement.start] + marker + text[imports_statement.start:]
    addition = _marker_line("added imports line", glob) + "imports = [%s]\n" % quoted
    version_statement = _top_level(statements, "version")
    if version_statement is not None:
        position = version_statement.end
        if position == len(text) and not text.endswith("\n"):
            addition = "\n" + addition
        return text[:position] + addition + text[position:]
    # Empty (or comments-only) file, read as v2: say so, or containerd reads it as v1.
    header = ""
    if created:
        header += _marker_line("created this file")
    header += _marker_line("added version line") + "version = %d\n" % DEFAULT_VERSION
    if text and not text.endswith("\n"):
        text += "\n"
    return text + header + addition


def remove_imports(text):
    """Undo ``ensure_imports``: remove only the entries/lines our markers record.

    Returns ``(text, delete_file)``; ``delete_file`` is true when the file did
    not exist before ``present`` and nothing else was written to it since.
    """
    markers = _markers(text)
    if not markers:
        return text, False
    created = any(kind == "created this file" for kind, _g, _s, _e in markers)
    # Remove array entries / lines first (offsets from a fresh scan each time).
    for kind, glob, _start, _end in markers:
        if kind not in ("added imports entry", "added imports line"):
            continue
        statements = toml_compat.scan_statements(text)
        statement = _top_level(statements, "imports")
        if statement is None:
            continue
        values = _element_values(text, statement)
        if glob not in values:
            continue
        index = values.index(glob)
        if kind == "added imports line" and len(values) == 1:
            text = text[:statement.start] + text[statement.end:]
            continue
        text = _remove_element(text, statement.elements, index)
    # The version line we wrote into an empty file goes only when nothing else is left.
    only_version = _only_version_left(text)
    spans = []
    for kind, _glob, start, end in _markers(text):
        if kind == "added version line":
            if not only_version:
                continue
            statement = _top_level(toml_compat.scan_statements(text), "version")
            if statement is not None:
                spans.append((statement.start, statement.end))
        spans.append((start, end))
    text = _remove_spans(text, spans)
    delete = created and not text.strip()
    return text, delete


def _only_version_left(text):
    statements = toml_compat.scan_statements(text)
    return all(s.kind == "keyval" and s.table == () and s.key == ("version",) for s in statements)


def _remove_element(text, elements, index):
    start, end, comma_end = elements[index]
    line_start = text.rfind("\n", 0, start) + 1
    if comma_end is not None:
        line_end = text.find("\n", comma_end)
        line_end = len(text) if line_end < 0 else line_end
        alone = not text[line_start:start].strip() and not text[comma_end:line_end].strip()
        if alone:
            return text[:line_start] + text[line_end + 1:]
        stop = comma_end
        while stop < len(text) and text[stop] in " \t":
            stop += 1
        return text[:start] + text[stop:]
    if index == 0:
        return text[:start] + text[end:]
    previous_comma = elements[index - 1][2]
    return text[:previous_comma - 1] + text[end:]


def _parse_own(text, config_path):
    try:
        return toml_compat.loads(text)
    except toml_compat.TomlParseError as exc:
        raise ContainerdConfigError(
            "%s: adding the imports entry would produce invalid TOML (%s). Nothing was changed. "
            "Fix: write the top-level keys (version, imports) before the first [table] header, then re-run."
            % (config_path, exc)
        )


# ---------------------------------------------------------------- v2+, drop-in


def drop_in_path_for(drop_in_dir, runtime_name):
    return os.path.join(drop_in_dir, "99-%s.toml" % runtime_name)


def render_drop_in(data, version, config_path, runtime_name, binary_path, set_as_default, enable_cdi,
                   systemd_cgroup=None):
    """``(drop-in text, handler, existing handler, inherited_from)`` from the *current* main config."""
    cri = CRI_PLUGINS[version]
    source = _get(data, ("plugins", cri))
    if source is not None and not isinstance(source, dict):
        raise ContainerdConfigError(
            "%s: plugins.%s is not a table. Nothing was changed. Fix: correct the config." % (config_path, cri))
    cri_table = copy.deepcopy(source) if source else {}
    try:
        handler, existing, inherited_from = build_handler(cri_table, runtime_name, binary_path, systemd_cgroup)
    except ContainerdConfigError as exc:
        raise ContainerdConfigError("%s: plugins.%s.%s" % (config_path, toml_compat.format_key(cri), exc))
    _apply_handler(cri_table, runtime_name, handler, set_as_default, enable_cdi, config_path)
    header = (
        "# Managed by gpu_native.fleet.containerd_runtime: OCI runtime handler %s.\n"
        "# Regenerated from %s on every run; do not edit (changes are overwritten).\n"
        "# It carries the whole [plugins.%s] table because containerd before 2.0\n"
        "# replaces, rather than merges, plugin tables from imported files.\n"
        % (toml_compat.quote_string(runtime_name), config_path, toml_compat.format_key(cri))
    )
    # The root config's version, never higher: containerd 2.3.0-2.3.4 refuse a drop-in with a higher one
    # (check added by containerd PR #12891, reverted by PR #13939 and cherry-picked to release/2.3).
    body = toml_compat.dumps({"version": version, "plugins": {cri: cri_table}})
    return header + body, handler, existing, inherited_from


def _already_satisfied(data, cri, runtime_name, handler, existing, set_as_default, enable_cdi):
    """The main config alone already registers the handler exactly as asked."""
    if existing is None or handler != existing:
        return False
    cri_table = _get(data, ("plugins", cri)) or {}
    if set_as_default and _get(cri_table, ("containerd", "default_runtime_name")) != runtime_name:
        return False
    if enable_cdi and cri_table.get("enable_cdi") is not True:
        return False
    return True


def _line_ending(text):
    """``\r\n`` when every line of ``text`` ends so, else ``\n``."""
    if text and "\r\n" in text and text.count("\r\n") == text.count("\n"):
        return "\r\n"
    return "\n"


def plan(config_path, config_text, drop_in_dir, drop_in_text, runtime_name, binary_path=None,
         set_as_default=False, enable_cdi=False, state="present", other_drop_ins=None, systemd_cgroup=None):
    """Work out what the main config and the drop-in should contain.

    ``config_text``/``drop_in_text``: current contents, None when the file is missing.
    ``binary_path``: None keeps an existing handler's BinaryName (a new handler gets DEFAULT_BINARY).
    ``systemd_cgroup``: None inherits (new handler) or keeps (existing one); True/False sets it.
    ``other_drop_ins``: ``{path: text}`` of the other ``*.toml`` files in drop_in_dir (for warnings).
    Raises only ContainerdConfigError.
    """
    try:
        return _plan(config_path, config_text, drop_in_dir, drop_in_text, runtime_name, binary_path,
                     set_as_default, enable_cdi, state, other_drop_ins, systemd_cgroup)
    except toml_compat.TomlParseError as exc:
        # Only reachable through a hand-edited marker comment: the files themselves were parsed first.
        raise ContainerdConfigError(
            "%s holds a gpu_native.fleet.containerd_runtime marker comment that cannot be read (%s). "
            "Nothing was changed. Fix: delete the damaged marker comment and re-run." % (config_path, exc))
    except toml_compat.TomlWriteError as exc:
        raise ContainerdConfigError(
            "%s: the CRI table holds a value that cannot be written back as TOML (%s). Nothing was changed. "
            "Fix: simplify that value in the config." % (config_path, exc))


def _plan(config_path, config_text, drop_in_dir, drop_in_text, runtime_name, binary_path,
          set_as_default, enable_cdi, state, other_drop_ins, systemd_cgroup):
    validate_runtime_name(runtime_name)
    for name, value in (("config_path", config_path), ("drop_in_dir", drop_in_dir)):
        if not value or not os.path.isabs(value):
            raise ContainerdConfigError("%s must be an absolute path, got %r. Fix: pass an absolute path." % (name, value))
    if binary_path is not None and not os.path.isabs(binary_path):
        raise ContainerdConfigError(
            "binary_path must be an absolute path, got %r. Fix: pass an absolute path." % (binary_path,))
    if drop_in_text is not None:
        parse(drop_in_text, drop_in_path_for(drop_in_dir, runtime_name))
    text = config_text if config_text is not None else ""
    data = parse(text, config_path)
    version = detect_version(data, config_path)
    newline = _line_ending(text)
    if newline != "\n":
        text = text.replace("\r\n", "\n")
    cri = CRI_PLUGINS[version]
    drop_in_path = drop_in_path_for(drop_in_dir, runtime_name)
    glob = os.path.join(drop_in_dir, "*.toml")
    warnings = []
    if state == "absent":
        new_text, delete = remove_imports(text)
        main_after = None if delete else new_text.replace("\n", newline)
        if config_text is None:
            main_after = None
        files = [_change(config_path, config_text, main_after),
                 FileChange(drop_in_path, drop_in_text, None, drop_in_text is not None)]
        return Plan(version, cri, drop_in_path, None, files, warnings)
    drop_in, handler, existing, inherited_from = render_drop_in(
        data, version, config_path, runtime_name, binary_path, set_as_default, enable_cdi, systemd_cgroup)
    if drop_in_text is None and _already_satisfied(data, cri, runtime_name, handler, existing, set_as_default,
                                                   enable_cdi):
        files = [_change(config_path, config_text, config_text), _change(drop_in_path, None, None)]
        return Plan(version, cri, drop_in_path, handler, files, warnings, None, existing)
    if existing is None and inherited_from is None and systemd_cgroup is None:
        warnings.append(
            "%s defines no runtime to copy settings from (default runtime, runc, crun or a runc-type runtime with "
            "SystemdCgroup), so the new %r handler does not set SystemdCgroup and containerd uses cgroupfs for it. "
            "Fix: set systemd_cgroup: true when the kubelet uses the systemd cgroup driver (false to silence this)."
            % (config_path, runtime_name))
    new_text = ensure_imports(text, glob, drop_in_path, config_path, created=config_text is None)
    _parse_own(new_text, config_path)
    new_text = new_text.replace("\n", newline)
    for path, other in sorted((other_drop_ins or {}).items()):
        try:
            other_data = toml_compat.loads(other)
        except toml_compat.TomlParseError as exc:
            raise ContainerdConfigError(
                "%s (imported by %s) is not valid TOML at line %s: %s. Nothing was changed. "
                "Fix: correct or remove that drop-in; containerd refuses to start with it."
                % (path, config_path, exc.line, exc.reason))
        if _get(other_data, ("plugins", cri)) is not None:
            later = os.path.basename(path) > os.path.basename(drop_in_path)
            warnings.append(
                "%s also sets [plugins.%s]; before containerd 2.0 the file imported last replaces the whole table%s."
                % (path, toml_compat.format_key(cri),
                   " and that file sorts after %s, so it wins" % os.path.basename(drop_in_path) if later else "")
            )
        other_version = other_data.get("version") if isinstance(other_data, dict) else None
        if isinstance(other_version, int) and not isinstance(other_version, bool) and other_version > version:
            warnings.append(
                "%s declares version %d, higher than %s's %d; containerd 2.3.0 to 2.3.4 refuse to start with it. "
                "Fix: set its version to %d." % (path, other_version, config_path, version, version))
    files = [_change(config_path, config_text, new_text), _change(drop_in_path, drop_in_text, drop_in)]
    return Plan(version, cri, drop_in_path, handler, files, warnings, inherited_from, existing)


def _change(path, before, after):
    if before == after:
        return FileChange(path, before, after, False)
    return FileChange(path, before, after, _semantic(before) != _semantic(after))


def _semantic(text):
    if text is None:
        return None
    try:
        return toml_compat.loads(text)
    except toml_compat.TomlParseError:
        return ("unparseable", text)
