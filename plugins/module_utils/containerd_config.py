# -*- coding: utf-8 -*-
# Copyright (c) gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd config logic: versions, CRI tables, the OCI runtime handler, imports.

Pure functions over file *text*: ``plan()`` takes what is on disk and returns
what should be there.  The module (plugins/modules/containerd_runtime.py) does
the I/O, check mode and diff.

Layout per config version (see docs/containerd_nvidia.md):

=======  ==============================  ==========================================
version  CRI plugin table                handler written to
=======  ==============================  ==========================================
none, 1  ``plugins.cri``                 the main file, in place (a marked block)
2        ``io.containerd.grpc.v1.cri``   ``<drop_in_dir>/99-<name>.toml`` + imports
3, 4     ``io.containerd.cri.v1.runtime`` ``<drop_in_dir>/99-<name>.toml`` + imports
=======  ==============================  ==========================================

containerd before 2.1 *replaces* a plugin table found in an imported file
instead of merging it, so the drop-in carries the whole CRI table, copied from
the main config on every run (never kept stale).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import fnmatch
import os
import re

from ansible_collections.gpu_native.fleet.plugins.module_utils import toml_compat

RUNC_V2 = "io.containerd.runc.v2"
CRI_PLUGINS = {
    1: "cri",
    2: "io.containerd.grpc.v1.cri",
    3: "io.containerd.cri.v1.runtime",
    4: "io.containerd.cri.v1.runtime",
}
SUPPORTED_VERSIONS = (1, 2, 3, 4)
DEFAULT_VERSION = 2

MARKER = "# gpu_native.fleet.containerd_runtime:"
_MARKER_RE = re.compile(
    r"^[ \t]*# gpu_native\.fleet\.containerd_runtime: "
    r"(added imports entry|added imports line|added version line|created this file)"
    r"(?: (\"(?:[^\"\\]|\\.)*\"))?.*$",
    re.M,
)
_KEY_MARKER = " # gpu_native.fleet.containerd_runtime: was "
_BLOCK_BEGIN = "# BEGIN gpu_native.fleet.containerd_runtime %s"
_BLOCK_END = "# END gpu_native.fleet.containerd_runtime %s"
# RuntimeClass.handler must be a DNS label, so the containerd runtime name must be one.
_RUNTIME_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class ContainerdConfigError(Exception):
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
    def __init__(self, version, cri_plugin, drop_in_path, handler, files, warnings):
        self.version = version
        self.cri_plugin = cri_plugin
        self.drop_in_path = drop_in_path
        self.handler = handler
        self.files = files
        self.warnings = warnings

    @property
    def changed(self):
        return any(change.changed for change in self.files)

    @property
    def effective_changed(self):
        return any(change.changed and change.effective for change in self.files)


# ---------------------------------------------------------------- parsing


def parse(text, path):
    """Parse config text; errors name the file and line."""
    try:
        return toml_compat.loads(text)
    except toml_compat.TomlParseError as exc:
        where = "line %s" % exc.line if exc.line is not None else "an unknown line"
        if exc.line is not None and exc.column is not None:
            where += ", column %s" % exc.column
        raise ContainerdConfigError(
            "%s is not valid TOML at %s: %s. Nothing was changed. "
            "Fix: correct the TOML syntax (containerd refuses to start with it) or restore the file from a backup."
            % (path, where, exc.reason)
        )


def detect_version(data, path):
    """The config version: no key -> 1, an empty config -> 2, else 2/3/4."""
    if not data:
        return DEFAULT_VERSION
    if "version" not in data:
        return 1
    version = data["version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise ContainerdConfigError(
            "%s: 'version' is %r, not an integer. Fix: set 'version = 2' (containerd 1.x) or "
            "'version = 3' (containerd 2.x)." % (path, version)
        )
    if version not in SUPPORTED_VERSIONS:
        raise ContainerdConfigError(
            "%s declares config version %d, which this module does not support (supported: 1, 2, 3, 4). "
            "Fix: check the containerd release that wrote it, or regenerate it with 'containerd config default'."
            % (path, version)
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


def build_handler(cri_table, binary_path):
    """The handler entry: the runc entry's settings, runc.v2, BinaryName = binary_path.

    Like ``nvidia-ctk runtime configure``, the whole runc entry is copied so that
    ``SystemdCgroup``, ``base_runtime_spec`` and friends carry over.
    """
    runc = _get(cri_table or {}, ("containerd", "runtimes", "runc"))
    handler = copy.deepcopy(runc) if isinstance(runc, dict) else {}
    handler["runtime_type"] = RUNC_V2
    options = handler.get("options")
    if not isinstance(options, dict):
        options = {}
    options["BinaryName"] = binary_path
    handler["options"] = options
    # runtime_type first, as containerd writes it.
    ordered = {"runtime_type": RUNC_V2}
    for key, value in handler.items():
        if key != "runtime_type":
            ordered[key] = value
    return ordered


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


# ---------------------------------------------------------------- v1, in place


def _block_re(runtime_name):
    return re.compile(
        r"\n?^%s\n.*?^%s[^\n]*(?:\n|\Z)" % (re.escape(_BLOCK_BEGIN % runtime_name), re.escape(_BLOCK_END % runtime_name)),
        re.M | re.S,
    )


def _statement_path(statement):
    if statement.kind == "keyval":
        return tuple(statement.table) + tuple(statement.key)
    return tuple(statement.key)


def _restore_marked_keys(text):
    """Put back values that ``_set_key`` replaced (or drop keys it added)."""
    lines = text.split("\n")
    out = []
    for line in lines:
        position = line.rfind(_KEY_MARKER)
        if position < 0:
            out.append(line)
            continue
        previous = line[position + len(_KEY_MARKER):]
        if previous.strip() == "unset":
            continue
        equals = line.index("=") + 1
        while line[equals] in " \t":
            equals += 1
        out.append(line[:equals] + previous)
    return "\n".join(out)


def _set_key(text, table_path, key, value):
    """Set ``table_path.key = value`` in place, recording the previous value.

    Returns the new text, or None when the table has no header to add the key under.
    """
    data = toml_compat.loads(text)
    current = _get(data, tuple(table_path) + (key,))
    if current == value and type(current) is type(value):
        return text
    statements = toml_compat.scan_statements(text)
    target = tuple(table_path) + (key,)
    for statement in statements:
        if statement.kind == "keyval" and _statement_path(statement) == target:
            line_end = text.find("\n", statement.value_end)
            line_end = len(text) if line_end < 0 else line_end
            # The old value keeps its trailing comment, so that restoring is exact.
            previous = text[statement.value_start:line_end]
            return (text[:statement.value_start] + toml_compat.format_value(value) + _KEY_MARKER + previous
                    + text[line_end:])
    for index, statement in enumerate(statements):
        if statement.kind == "table" and statement.key == tuple(table_path):
            indent = "  "
            if index + 1 < len(statements) and statements[index + 1].kind == "keyval":
                following = statements[index + 1]
                first = text[following.start:]
                indent = first[: len(first) - len(first.lstrip(" \t"))]
            line = "%s%s = %s%sunset\n" % (indent, toml_compat.format_key(key), toml_compat.format_value(value),
                                           _KEY_MARKER)
            return text[:statement.end] + line + text[statement.end:]
    return None


def _strip_runtime_tables(text, runtimes_path, runtime_name):
    prefix = tuple(runtimes_path) + (runtime_name,)
    statements = toml_compat.scan_statements(text)
    spans = []
    removing = False
    for statement in statements:
        path = _statement_path(statement)
        if statement.kind in ("table", "array_table"):
            removing = path[: len(prefix)] == prefix
        if removing or path[: len(prefix)] == prefix:
            spans.append((statement.start, statement.end))
    return _remove_spans(text, spans)


def _nest(path, value):
    for key in reversed(path):
        value = {key: value}
    return value


def plan_v1(text, config_path, runtime_name, binary_path, set_as_default, enable_cdi, state):
    warnings = []
    cri = CRI_PLUGINS[1]
    runtimes_path = ("plugins", cri, "containerd", "runtimes")
    stripped = _block_re(runtime_name).sub("", _restore_marked_keys(text))
    if stripped != text:
        _parse_own(stripped, config_path)  # undoing our own edits must leave valid TOML behind
    handler = None
    if state == "absent":
        new_text = stripped
    else:
        stripped_data = toml_compat.loads(stripped)
        if _get(stripped_data, runtimes_path + (runtime_name,)) is not None:
            stripped = _strip_runtime_tables(stripped, runtimes_path, runtime_name)
            warnings.append(
                "%s already defined runtime %r outside the block this module manages; that definition was replaced."
                % (config_path, runtime_name)
            )
            stripped_data = toml_compat.loads(stripped)
        handler = build_handler(_get(stripped_data, ("plugins", cri)), binary_path)
        block_lines = [_BLOCK_BEGIN % runtime_name]
        extra = {}
        new_text = stripped
        settings = []
        if set_as_default:
            settings.append((("plugins", cri, "containerd"), "default_runtime_name", runtime_name))
        if enable_cdi:
            settings.append((("plugins", cri), "enable_cdi", True))
        for table_path, key, value in settings:
            edited = _set_key(new_text, table_path, key, value)
            if edited is None:
                extra.setdefault(table_path, {})[key] = value
            else:
                new_text = edited
        document = _nest(runtimes_path + (runtime_name,), handler)
        for table_path, values in extra.items():
            document = _deep_merge(document, _nest(table_path, values))
        block_lines.append(toml_compat.dumps(document).rstrip("\n"))
        block_lines.append(_BLOCK_END % runtime_name)
        if new_text and not new_text.endswith("\n"):
            new_text += "\n"
        if new_text.strip():
            new_text += "\n"
        new_text += "\n".join(block_lines) + "\n"
        new_data = _parse_own(new_text, config_path)
        registered = _get(new_data, runtimes_path + (runtime_name, "options", "BinaryName"))
        if registered != binary_path:
            raise ContainerdConfigError(
                "%s: the edited config would not register runtime %r (BinaryName is %r). Nothing was changed. "
                "Fix: simplify how %s is written in the file (use [table] headers), then re-run."
                % (config_path, runtime_name, registered, ".".join(runtimes_path))
            )
    return Plan(1, cri, None, handler, [_change(config_path, text, new_text)], warnings)


def _deep_merge(base, extra):
    result = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = _deep_merge(result[key], value)
        else:
            result[key] = value
    return result


def _parse_own(text, config_path):
    try:
        return toml_compat.loads(text)
    except toml_compat.TomlParseError as exc:
        raise ContainerdConfigError(
            "%s: editing the config in place would produce invalid TOML (%s). Nothing was changed. "
            "Fix: rewrite the CRI plugin section with plain [table] headers, then re-run." % (config_path, exc)
        )


# ---------------------------------------------------------------- v2+, drop-in


def drop_in_path_for(drop_in_dir, runtime_name):
    return os.path.join(drop_in_dir, "99-%s.toml" % runtime_name)


def render_drop_in(data, version, config_path, runtime_name, binary_path, set_as_default, enable_cdi):
    """The drop-in text and the handler, from the *current* main config."""
    cri = CRI_PLUGINS[version]
    source = _get(data, ("plugins", cri))
    if source is not None and not isinstance(source, dict):
        raise ContainerdConfigError(
            "%s: plugins.%s is not a table. Fix: correct the config." % (config_path, cri))
    cri_table = copy.deepcopy(source) if source else {}
    handler = build_handler(cri_table, binary_path)
    _apply_handler(cri_table, runtime_name, handler, set_as_default, enable_cdi, config_path)
    header = (
        "# Managed by gpu_native.fleet.containerd_runtime: OCI runtime handler %s.\n"
        "# Regenerated from %s on every run; do not edit (changes are overwritten).\n"
        "# It carries the whole [plugins.%s] table because containerd before 2.1\n"
        "# replaces, rather than merges, plugin tables from imported files.\n"
        % (toml_compat.quote_string(runtime_name), config_path, toml_compat.format_key(cri))
    )
    body = toml_compat.dumps({"version": version, "plugins": {cri: cri_table}})
    return header + body, handler


def plan(config_path, config_text, drop_in_dir, drop_in_text, runtime_name, binary_path,
         set_as_default=False, enable_cdi=False, state="present", other_drop_ins=None):
    """Work out what the main config and the drop-in should contain.

    ``config_text``/``drop_in_text``: current contents, None when the file is missing.
    ``other_drop_ins``: ``{path: text}`` of the other ``*.toml`` files in drop_in_dir (for warnings).
    """
    validate_runtime_name(runtime_name)
    for name, value in (("config_path", config_path), ("drop_in_dir", drop_in_dir), ("binary_path", binary_path)):
        if not value or not os.path.isabs(value):
            raise ContainerdConfigError("%s must be an absolute path, got %r. Fix: pass an absolute path." % (name, value))
    text = config_text if config_text is not None else ""
    data = parse(text, config_path)
    version = detect_version(data, config_path)
    if version == 1:
        return plan_v1(text, config_path, runtime_name, binary_path, set_as_default, enable_cdi, state)
    cri = CRI_PLUGINS[version]
    drop_in_path = drop_in_path_for(drop_in_dir, runtime_name)
    glob = os.path.join(drop_in_dir, "*.toml")
    warnings = []
    if state == "absent":
        new_text, delete = remove_imports(text)
        main_after = None if delete else new_text
        if config_text is None:
            main_after = None
        files = [_change(config_path, config_text, main_after),
                 FileChange(drop_in_path, drop_in_text, None, drop_in_text is not None)]
        return Plan(version, cri, drop_in_path, None, files, warnings)
    drop_in, handler = render_drop_in(data, version, config_path, runtime_name, binary_path, set_as_default,
                                      enable_cdi)
    new_text = ensure_imports(text, glob, drop_in_path, config_path, created=config_text is None)
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
                "%s also sets [plugins.%s]; before containerd 2.1 the file imported last replaces the whole table%s."
                % (path, toml_compat.format_key(cri),
                   " and that file sorts after %s, so it wins" % os.path.basename(drop_in_path) if later else "")
            )
    files = [_change(config_path, config_text, new_text), _change(drop_in_path, drop_in_text, drop_in)]
    return Plan(version, cri, drop_in_path, handler, files, warnings)


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
