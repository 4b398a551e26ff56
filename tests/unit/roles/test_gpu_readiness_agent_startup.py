# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The readiness agent's start-up (issue #32): a steady-state run imports only what it uses, the unit's command line
skips argparse with the same result, and the CUDA probe child runs with the agent's interpreter flags."""
import argparse
import os
import subprocess
import sys

import pytest

from test_gpu_readiness_agent import AGENT_PATH, agent, node  # noqa: F401 pylint: disable=unused-import

COLLECTIONS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".cache", "collections"))


def argparse_options(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=agent.DEFAULT_CONFIG)
    parser.add_argument("--output-dir")
    parser.add_argument("--cuda-probe")
    return vars(parser.parse_args(argv))


@pytest.mark.parametrize("argv", [
    [],
    ["--config", "/etc/gpu-native-readiness/config.json"],
    ["--config", "/etc/x.json", "--output-dir", "/tmp/out"],
    ["--output-dir", "/tmp/out", "--config", "/etc/x.json"],
    ["--cuda-probe", "libcuda.so.1"],
    # not plain pairs: argparse parses these, as before
    ["--config=/etc/x.json"],
    ["--conf", "/etc/x.json"],
    ["--config", "/a.json", "--config", "/b.json"],
    ["--config", ""],
    ["--cuda-probe", ""],
])
def test_options_equal_argparse(argv):
    assert agent.parse_options(argv) == argparse_options(argv)


def test_plain_pairs_skip_argparse_and_the_rest_does_not():
    assert agent._plain_options(["--config", "/etc/x.json"]) == {
        "config": "/etc/x.json", "output_dir": None, "cuda_probe": None}
    for argv in (["--help"], ["--config"], ["--config", "-x"], ["--bogus", "1"], ["--config", "/a", "--config", "/b"]):
        assert agent._plain_options(argv) is None


def test_bad_command_line_still_gets_argparse_errors(capsys):
    with pytest.raises(SystemExit) as raised:
        agent.main(["--bogus"])
    assert raised.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_a_run_imports_neither_argparse_nor_ssl_nor_calendar():
    """The agent and every module_utils it imports, loaded as the unit runs them (python3 -I -S)."""
    code = (
        "import sys, importlib.util\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "spec = importlib.util.spec_from_file_location('agent', sys.argv[1])\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import gpu_health, kernel_log_state\n"
        "module.parse_options(['--config', '/etc/x.json'])\n"
        "print(' '.join(name for name in ('argparse', 'ssl', 'calendar', 'datetime', 'urllib.request', 'ctypes')"
        " if name in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code, AGENT_PATH, COLLECTIONS], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_the_cuda_probe_child_gets_the_agents_interpreter_flags():
    code = (
        "import sys, importlib.util\n"
        "spec = importlib.util.spec_from_file_location('agent', sys.argv[1])\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "seen = []\n"
        "module.run_command = lambda argv, timeout=None: seen.append(argv) or (1, '', '')\n"
        "module.check_cuda('libcuda.so.1')\n"
        "print(' '.join(seen[0][1:3]))\n"
    )
    isolated = subprocess.run([sys.executable, "-I", "-S", "-c", code, AGENT_PATH], capture_output=True, text=True,
                              check=True)
    assert isolated.stdout.strip() == "-I -S"
    plain = subprocess.run([sys.executable, "-c", code, AGENT_PATH], capture_output=True, text=True, check=True)
    # the launcher next to the agent: the child imports the agent from its bytecode instead of compiling it
    assert plain.stdout.split()[0] == os.path.join(os.path.dirname(AGENT_PATH), "gpu_native_readiness_run.py")


def test_the_cuda_probe_child_runs_the_agent_itself_where_no_launcher_is_installed(tmp_path):
    import shutil
    shutil.copy(AGENT_PATH, str(tmp_path))
    code = (
        "import sys, importlib.util\n"
        "spec = importlib.util.spec_from_file_location('agent', sys.argv[1])\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "print(module.probe_script())\n"
    )
    alone = str(tmp_path / "gpu_native_readiness_agent.py")
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code, alone], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == alone


def test_the_cuda_probe_through_the_launcher_answers_as_the_agent_does(tmp_path):
    """The probe child started the way check_cuda starts it: a library that cannot be loaded exits 2, both ways."""
    for script in (AGENT_PATH, LAUNCHER):
        result = subprocess.run([sys.executable, "-I", "-S", script, "--cuda-probe", str(tmp_path / "no-libcuda.so")],
                                capture_output=True, text=True, check=False)
        assert result.returncode == 2, (script, result.stderr)


LAUNCHER = os.path.join(os.path.dirname(AGENT_PATH), "gpu_native_readiness_run.py")


def test_the_launcher_runs_the_agent_from_its_compiled_bytecode(node, tmp_path):
    """What the unit starts (python3 -I -S -B launcher --config ...): the agent is imported as a module, from the
    .pyc the role compiles (compileall), never compiled in the run; the metrics are the agent's."""
    import compileall
    import shutil
    install = tmp_path / "install"
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(AGENT_PATH))))
    shutil.copytree(os.path.join(repo, "plugins", "module_utils"),
                    str(install / "ansible_collections" / "gpu_native" / "fleet" / "plugins" / "module_utils"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    for source in (AGENT_PATH, LAUNCHER):
        shutil.copy(source, str(install))
    assert compileall.compile_file(str(install / "gpu_native_readiness_agent.py"), quiet=1, force=True)
    config, output = node("h100x8-healthy")
    code = (
        "import builtins, sys\n"
        "compiled = []\n"
        "original = builtins.compile\n"
        "builtins.compile = lambda source, name, *a, **k: compiled.append(name) or original(source, name, *a, **k)\n"
        "import importlib._bootstrap_external as ext\n"
        "orig_source_to_code = ext.SourceLoader.source_to_code\n"
        "ext.SourceLoader.source_to_code = lambda self, data, path, **k: compiled.append(path) or "
        "orig_source_to_code(self, data, path, **k)\n"
        "sys.argv = sys.argv[1:]\n"
        "try:\n"
        "    exec(original(open(sys.argv[0]).read(), sys.argv[0], 'exec'), {'__name__': '__main__', "
        "'__file__': sys.argv[0]})\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "print(code, sys.modules['gpu_native_readiness_agent'].__file__, [n for n in compiled if 'readiness' in n])\n"
    )
    result = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", code, str(install / "gpu_native_readiness_run.py"),
                             "--config", config], capture_output=True, text=True, check=False, env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    status, module_file, compiled = result.stdout.split(" ", 2)
    assert status == "0"
    assert module_file == str(install / "gpu_native_readiness_agent.py")
    assert compiled.strip() == "[]", "the agent was compiled in the run: %s" % compiled
    with open(output) as handle:
        text = handle.read()
    assert 'gpu_native_node_driver_ready{node="gpu-node-1"} 1' in text
    assert 'gpu_native_readiness_agent_error{node="gpu-node-1"} 0' in text


def test_the_unit_starts_the_launcher_and_the_role_compiles_the_agent():
    role = os.path.dirname(os.path.dirname(AGENT_PATH))
    with open(os.path.join(role, "templates", "gpu-native-readiness.service.j2")) as handle:
        unit = handle.read()
    assert "-I -S -B {{ __gpu_readiness_launcher }} --config" in unit
    with open(os.path.join(role, "handlers", "main.yml")) as handle:
        handlers = handle.read()
    assert '"{{ __gpu_readiness_agent }}"]' in handlers.split("listen: gpu_readiness compile agent")[0]
