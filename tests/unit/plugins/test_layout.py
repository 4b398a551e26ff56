# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The folder a shared file sits in tells where it runs (docs/DEVELOPING.md, Layout).

plugins/module_utils/<subpackage>/ is managed-node code; plugins/plugin_utils/ is controller-only code that no
module and no node agent may import. Each shared file declares itself private to the collection.
"""
import ast
import os
import re

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MODULE_UTILS = os.path.join(REPO, "plugins", "module_utils")
PLUGIN_UTILS = os.path.join(REPO, "plugins", "plugin_utils")
PRIVATE = "# Private to the gpu_native.fleet collection: not a public API; it may change in any release.\n"
NODE = "# Runs on managed nodes"
CONTROLLER = "# Runs on the controller only"


def python_files(*folders):
    found = []
    for folder in folders:
        for base, _dirs, files in os.walk(folder):
            found.extend(os.path.join(base, name) for name in sorted(files) if name.endswith(".py"))
    return sorted(found)


def imported_modules(path):
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_module_utils_holds_subpackages_only():
    flat = [name for name in os.listdir(MODULE_UTILS) if name.endswith(".py")]
    assert flat == []
    for name in sorted(os.listdir(MODULE_UTILS)):
        if os.path.isdir(os.path.join(MODULE_UTILS, name)) and name != "__pycache__":
            # AnsiballZ requires a package __init__.py below module_utils
            assert os.path.isfile(os.path.join(MODULE_UTILS, name, "__init__.py")), name


@pytest.mark.parametrize("path", [p for p in python_files(MODULE_UTILS, PLUGIN_UTILS) if not p.endswith("__init__.py")],
                         ids=lambda p: os.path.relpath(p, REPO))
def test_each_shared_file_says_it_is_private_and_where_it_runs(path):
    with open(path, encoding="utf-8") as handle:
        head = "".join(handle.readline() for _line in range(8))
    assert PRIVATE in head
    assert (CONTROLLER if path.startswith(PLUGIN_UTILS + os.sep) else NODE) in head


@pytest.mark.parametrize("path", python_files(os.path.join(REPO, "plugins", "modules"), MODULE_UTILS,
                                              os.path.join(REPO, "roles", "gpu_readiness", "files")),
                         ids=lambda p: os.path.relpath(p, REPO))
def test_node_code_never_imports_controller_code(path):
    assert not [name for name in imported_modules(path) if ".plugin_utils" in name or ".plugins.filter" in name]


TABLE_RULE = re.compile(r"""["']-["']\s*\*""")  # the dashed rule under a table's header


def test_one_table_renderer():
    """Every text table is drawn by module_utils/_common/text.py's fixed_width_table (issue 24, 6: there were
    three renderers, each with its own widths)."""
    owner = os.path.join(MODULE_UTILS, "_common", "text.py")
    drawing = [os.path.relpath(path, REPO)
               for path in python_files(os.path.join(REPO, "plugins"), os.path.join(REPO, "tools"))
               if path != owner and TABLE_RULE.search(open(path, encoding="utf-8").read())]
    assert drawing == [], "these draw a table of their own; use fixed_width_table: %s" % drawing


def test_fixed_width_table():
    from ansible_collections.gpu_native.fleet.plugins.module_utils._common.text import fixed_width_table
    assert fixed_width_table([["node", "verdict"], ["gpu-a", "pass"], ["gpu-long-name", ""]]) == (
        "node           verdict\n"
        "-------------  -------\n"
        "gpu-a          pass\n"
        "gpu-long-name")
    assert fixed_width_table([]) == ""


# One source per constant (issue 24, 6). Each constant below has one definition; every other file that spells it
# is listed with what holds it, and is checked to hold the same value: a role default or an internal variable
# (literals: argument specs need them, and ansible-core reads a role's defaults only from defaults/main.yml), a
# filter's documentation, a module's DOCUMENTATION (validate-modules checks that against the argument spec) or a
# role's argument spec (test_role_argument_specs.py checks that against defaults/main.yml). A spelling anywhere
# else under plugins/, roles/, playbooks/ or tools/ fails: import the constant, or take the role's variable.
SEARCHED = ("plugins", "roles", "playbooks", "tools")
ANY_SPEC = "roles/*/meta/argument_specs.yml"


def _spelled(value):
    """A whole spelling of value: not part of a longer key, path or ``key=value`` selector; comments left out."""
    return re.compile(r"(?<![\w./=-])" + re.escape(value) + r"(?![\w/=.-])")


def _default_of(role, name):
    import yaml
    with open(os.path.join(REPO, "roles", role, "defaults", "main.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)[name]


def known_constants():
    """(name, value, {file: [variables that must equal or contain it] or None (a documentation default)})."""
    from ansible_collections.gpu_native.fleet.plugins.plugin_utils import cordon_ownership as co
    from ansible_collections.gpu_native.fleet.plugins.module_utils.containerd import containerd_config
    from ansible_collections.gpu_native.fleet.plugins.module_utils.spec import fleet_compliance
    cordon = "plugins/plugin_utils/cordon_ownership.py"
    return [
        ("cordon owner annotation", co.OWNER_ANNOTATION, {
            cordon: None, "plugins/filter/cordon_decision.yml": ["owner_annotation"],
            "roles/preflight/defaults/main.yml": ["preflight_cordon_owner_annotation"],
            "roles/_node_cordon/defaults/main.yml": ["_node_cordon_owner_annotation"]}),
        ("cordon time annotation", co.TIME_ANNOTATION, {
            cordon: None, "plugins/filter/cordon_decision.yml": ["time_annotation"],
            "roles/preflight/defaults/main.yml": ["preflight_cordon_time_annotation"],
            "roles/_node_cordon/defaults/main.yml": ["_node_cordon_time_annotation"]}),
        ("cordon run-id annotation", co.RUN_ID_ANNOTATION, {
            cordon: None, "plugins/filter/cordon_decision.yml": ["run_id_annotation"],
            "roles/preflight/defaults/main.yml": ["preflight_run_id_annotation"],
            "roles/_node_cordon/defaults/main.yml": ["_node_cordon_run_id_annotation"]}),
        ("registration taint", co.REGISTRATION_TAINT_KEY, {
            cordon: None, "plugins/filter/cordon_decision.yml": ["registration_taint_key"],
            "plugins/filter/node_joined.yml": ["registration_taint_key"],
            "roles/preflight/defaults/main.yml": ["preflight_registration_taint_key"],
            "roles/_node_cordon/defaults/main.yml": ["_node_cordon_registration_taint_key"],
            "roles/gpu_policies/defaults/main.yml": ["gpu_policies_gpu_taint_keys"]}),
        ("preflight label (a joined node)", co.JOINED_LABEL, {
            cordon: None, "plugins/filter/node_joined.yml": ["label_key"],
            "plugins/filter/preflight_report_html.yml": ["label_key"],
            "roles/preflight/defaults/main.yml": ["preflight_label_key"]}),
        ("runtime binary", containerd_config.DEFAULT_BINARY, {
            "plugins/module_utils/containerd/containerd_config.py": None,
            "plugins/modules/containerd_runtime.py": None, "plugins/modules/node_compliance.py": None,
            "roles/compliance/defaults/main.yml": ["compliance_runtime_binary"],
            "roles/containerd_nvidia/defaults/main.yml": ["containerd_nvidia_binary_path"],
            "roles/container_toolkit/vars/main.yml": ["__container_toolkit_runtime_binary"]}),
        ("toolkit config file", fleet_compliance.TOOLKIT_CONFIG, {
            "plugins/module_utils/spec/fleet_compliance.py": None, "plugins/modules/node_compliance.py": None,
            "roles/compliance/defaults/main.yml": ["compliance_toolkit_config"],
            "roles/container_toolkit/vars/main.yml": ["__container_toolkit_config_file"]}),
        ("preflight reasons annotation", _default_of("preflight", "preflight_reasons_annotation"), {
            "roles/preflight/defaults/main.yml": ["preflight_reasons_annotation"],
            "roles/upgrade/vars/main.yml": ["__upgrade_reasons_annotation"]}),
        # The readiness textfile: its source is the gpu_readiness role's documented default; the agent's fallback
        # (a config without the key) and the roles that read the file without running gpu_readiness spell it too.
        ("readiness textfile folder", _default_of("gpu_readiness", "gpu_readiness_textfile_dir"), {
            "roles/gpu_readiness/defaults/main.yml": ["gpu_readiness_textfile_dir"],
            "roles/gpu_readiness/files/gpu_native_readiness_agent.py": None,
            "roles/compliance/vars/main.yml": ["__compliance_readiness_textfile"],
            "roles/preflight/defaults/main.yml": ["preflight_metrics_dir"]}),
        ("readiness textfile name", _default_of("gpu_readiness", "gpu_readiness_metrics_file_name"), {
            "roles/gpu_readiness/defaults/main.yml": ["gpu_readiness_metrics_file_name"],
            "roles/gpu_readiness/files/gpu_native_readiness_agent.py": None,
            "roles/compliance/vars/main.yml": ["__compliance_readiness_textfile"]}),
    ]


def _text_files():
    for top in SEARCHED:
        for base, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs[:] = [name for name in dirs if name != "__pycache__"]
            for name in sorted(files):
                path = os.path.join(base, name)
                try:
                    with open(path, encoding="utf-8") as handle:
                        yield os.path.relpath(path, REPO), handle.read()
                except UnicodeDecodeError:
                    continue


def _spellings(value):
    pattern = _spelled(value)
    return {path for path, text in _text_files()
            if any(pattern.search(line) for line in text.splitlines() if not line.lstrip().startswith("#"))}


@pytest.mark.parametrize("name,value,holders", known_constants(), ids=[c[0] for c in known_constants()])
def test_a_constant_is_spelled_only_where_it_is_checked(name, value, holders):
    import fnmatch
    stray = sorted(path for path in _spellings(value) - set(holders) if not fnmatch.fnmatch(path, ANY_SPEC))
    assert stray == [], "%s %r is spelled again in %s: import it or take the role variable" % (name, value, stray)


@pytest.mark.parametrize("name,value,holders", known_constants(), ids=[c[0] for c in known_constants()])
def test_every_holder_of_a_constant_holds_its_value(name, value, holders):
    import yaml
    wrong = []
    for path, variables in sorted(holders.items()):
        with open(os.path.join(REPO, path), encoding="utf-8") as handle:
            text = handle.read()
        if not _spelled(value).search(text):
            wrong.append("%s does not spell %r" % (path, value))
            continue
        data = yaml.safe_load(text) if path.endswith(".yml") else {}
        if path.startswith("plugins/filter/"):
            data = {key: option.get("default") for key, option in data["DOCUMENTATION"]["options"].items()}
        for variable in variables or ():
            held = data.get(variable)
            if not (held == value or (isinstance(held, list) and value in held)
                    or (isinstance(held, str) and re.search(r"default\('%s'\)" % re.escape(value), held))):
                wrong.append("%s %s is %r, not %r" % (path, variable, held, value))
    assert wrong == []
