# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helpers shared by every test suite (unit, integration, Molecule verifiers run by pytest).

The root ``tests/conftest.py`` puts ``tests/`` on ``sys.path``, so any test
imports this module as ``testlib``.  It holds:

- the repository paths (``REPO_ROOT``, ``FIXTURES``) and the collection link;
- ``fixture_text``: THE loader of capture files under tests/fixtures/ (drops
  the ``#`` source header through ``# ---- BEGIN VERBATIM ----``);
- ``modules_loaded_by``: what an import costs, as the module names it loads in a fresh interpreter;
- ``render_role_template``: a role's template rendered with the role's
  defaults (what the tests of rendered Kubernetes objects read);
- ``run_ansible_playbook`` (integration tests only: unit tests run no
  ansible-playbook).
"""
import json
import os
import subprocess
import sys

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FIXTURES = os.path.join(REPO_ROOT, "tests", "fixtures")
COLLECTIONS = os.path.join(REPO_ROOT, ".cache", "collections")
VENV_BIN = os.path.dirname(sys.executable)
VERBATIM_MARKER = "# ---- BEGIN VERBATIM ----\n"


def link_collection():
    """Make the checkout importable as ansible_collections.gpu_native.fleet; return the base on sys.path.

    A plain checkout is linked into .cache/collections; under ansible-test
    the checkout already sits in an ansible_collections/<ns>/<name> tree.
    """
    parts = REPO_ROOT.split(os.sep)
    if len(parts) >= 3 and parts[-3] == "ansible_collections":
        base = os.sep.join(parts[:-3])
    else:
        base = COLLECTIONS
        namespace_dir = os.path.join(base, "ansible_collections", "gpu_native")
        os.makedirs(namespace_dir, exist_ok=True)
        link = os.path.join(namespace_dir, "fleet")
        if not os.path.islink(link):
            if os.path.exists(link):
                raise RuntimeError("%s exists and is not a link" % link)
            try:
                os.symlink(REPO_ROOT, link)
            except FileExistsError:
                pass  # another test process made it first
    if base not in sys.path:
        sys.path.insert(0, base)
    return base


def modules_loaded_by(statements, watched, *argv):
    """Which of the module names ``watched`` are in ``sys.modules`` after ``statements`` (Python source that may
    read ``sys.argv[2:]``, which are ``argv``) run in a fresh, isolated interpreter that imports the collection
    from its link (what a managed node's module or the readiness agent pays for at start-up)."""
    code = "import sys; sys.path.insert(0, sys.argv[1]); %s; print(' '.join(n for n in %r if n in sys.modules))" % (
        statements, tuple(watched))
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code, COLLECTIONS] + list(argv), capture_output=True,
                            text=True, check=True)
    return result.stdout.split()


def fixture_path(*parts):
    """Path of a file under tests/fixtures/."""
    return os.path.join(FIXTURES, *parts)


def fixture_text(*parts):
    """The captured text of tests/fixtures/<parts>: everything after the source header, if it has one."""
    with open(fixture_path(*parts)) as handle:
        text = handle.read()
    return text.split(VERBATIM_MARKER, 1)[1] if VERBATIM_MARKER in text else text


def render_role_template(role, template, **overrides):
    """The YAML document ``roles/<role>/templates/<template>`` renders with the role's defaults plus ``overrides``."""
    import jinja2
    import yaml

    role_path = os.path.join(REPO_ROOT, "roles", role)
    with open(os.path.join(role_path, "defaults", "main.yml")) as handle:
        variables = yaml.safe_load(handle)
    variables.update(overrides)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["to_json"] = json.dumps
    with open(os.path.join(role_path, "templates", template)) as handle:
        return yaml.safe_load(env.from_string(handle.read()).render(**variables))


def ansible_env(kubeconfig_path=None, extra=None):
    """Environment for ansible-playbook: this checkout's collection, the venv's Python, plain output."""
    env = dict(os.environ)
    env.update({
        "ANSIBLE_COLLECTIONS_PATH": COLLECTIONS,
        "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "true",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default",
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "ANSIBLE_RETRY_FILES_ENABLED": "false",
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "PATH": VENV_BIN + os.pathsep + env.get("PATH", ""),
    })
    if kubeconfig_path:
        env["K8S_AUTH_KUBECONFIG"] = kubeconfig_path
    env.update(extra or {})
    return env


def run_ansible_playbook(playbook, kubeconfig_path=None, args=(), extra_env=None, timeout=600):
    """Run ansible-playbook from the venv on localhost; return CompletedProcess (stdout+stderr in .stdout)."""
    cmd = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local", playbook] + list(args)
    return subprocess.run(cmd, env=ansible_env(kubeconfig_path, extra_env), cwd=REPO_ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False)


def build_fake_libcuda(directory):
    """Compile the libcuda stand-in (tests/standins/fake_libcuda.c) into ``directory``; return its path.

    Fails the test with the fix when no C compiler is installed (tests/tools/setup-host.sh installs gcc).
    """
    import shutil  # pylint: disable=import-outside-toplevel
    import pytest  # pylint: disable=import-outside-toplevel
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.fail("a C compiler is needed to build the libcuda stand-in (tests/tools/setup-host.sh installs gcc)")
    out = os.path.join(str(directory), "libcuda.so.1")
    subprocess.check_call([compiler, "-shared", "-fPIC", "-O1", "-o", out,
                           os.path.join(REPO_ROOT, "tests", "standins", "fake_libcuda.c")])
    return out
