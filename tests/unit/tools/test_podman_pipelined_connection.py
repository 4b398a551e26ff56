"""The Molecule harness's connection (tests/tools/ansible_plugins/connection/podman_pipelined.py): as root it
looks the container's init up once, caches it, looks it up again when the process is gone or another one has its
pid, and runs commands and file transfers through nsenter with the container's environment.

The "container" here is this test process itself: nsenter into one's own namespaces is allowed to root and runs
the same code path as into a test host's."""
import importlib.util
import json
import os
import shutil

import pytest
from ansible.errors import AnsibleConnectionFailure
from ansible.playbook.play_context import PlayContext

from testlib import REPO_ROOT

PLUGIN = os.path.join(REPO_ROOT, "tests", "tools", "ansible_plugins", "connection", "podman_pipelined.py")

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nsenter"), reason="needs root and nsenter")


def load_plugin():
    spec = importlib.util.spec_from_file_location("podman_pipelined_under_test", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    monkeypatch.setenv("GN_PODMAN_NSENTER_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GN_PODMAN_NSENTER", raising=False)
    return load_plugin()


def connection(plugin, inspected, answer):
    """A connection to the container 'gn-test' whose `podman inspect` answers `answer` (and is recorded)."""
    context = PlayContext()
    context.remote_addr = "gn-test"
    conn = plugin.Connection(context, None)

    def podman(cmd, cmd_args=None, in_data=None, use_container_id=True):
        inspected.append(cmd)
        return answer
    conn._podman = podman
    return conn


def own_answer(env=("container=podman", "GN_MARK=inside")):
    return 0, ("%d %s\n" % (os.getpid(), json.dumps(list(env)))).encode(), b""


def test_commands_run_through_nsenter_with_the_containers_environment_only(plugin):
    inspected = []
    conn = connection(plugin, inspected, own_answer())
    rc, out, err = conn.exec_command("/bin/sh -c 'echo $GN_MARK; echo ${HOME:-no home}; cat'", in_data=b"stdin\n")
    assert (rc, err) == (0, b""), err
    assert out.decode().splitlines() == ["inside", "no home", "stdin"]
    assert len(inspected) == 1 and inspected[0][0] == "inspect"


def test_the_target_is_cached_and_looked_up_again_when_its_process_changed(plugin, tmp_path):
    inspected = []
    connection(plugin, inspected, own_answer()).exec_command("true")
    connection(plugin, inspected, own_answer()).exec_command("true")
    assert len(inspected) == 1, "the second connection reads the cache"
    cache = tmp_path / "cache" / "gn-test.json"
    cached = json.loads(cache.read_text())
    assert cached["pid"] == os.getpid()
    # the same pid, another start time: a restarted container whose old pid was reused
    cache.write_text(json.dumps(dict(cached, started="1")))
    connection(plugin, inspected, own_answer()).exec_command("true")
    assert len(inspected) == 2
    assert json.loads(cache.read_text())["started"] == cached["started"]


def test_files_go_in_and_come_back_through_nsenter(plugin, tmp_path):
    conn = connection(plugin, [], own_answer())
    source = tmp_path / "source"
    source.write_bytes(b"\x00binary\xff" * 1000)
    conn.put_file(str(source), str(tmp_path / "put"))
    assert (tmp_path / "put").read_bytes() == source.read_bytes()
    conn.fetch_file(str(tmp_path / "put"), str(tmp_path / "fetched"))
    assert (tmp_path / "fetched").read_bytes() == source.read_bytes()
    with pytest.raises(AnsibleConnectionFailure, match="Failed to fetch"):
        conn.fetch_file(str(tmp_path / "missing"), str(tmp_path / "never"))
    assert not (tmp_path / "never").exists()


def test_a_stopped_container_or_a_failed_inspect_is_unreachable(plugin):
    with pytest.raises(AnsibleConnectionFailure, match="is not running"):
        connection(plugin, [], (0, b"0 []\n", b"")).exec_command("true")
    with pytest.raises(AnsibleConnectionFailure, match="podman inspect gn-test failed: no such container"):
        connection(plugin, [], (125, b"", b"no such container")).exec_command("true")


def test_gn_podman_nsenter_0_keeps_podman_exec(plugin, monkeypatch):
    monkeypatch.setenv("GN_PODMAN_NSENTER", "0")
    calls = []
    conn = connection(plugin, calls, (0, b"podman-exec-ran", b""))
    conn._connected = True  # no podman mount here
    assert conn.exec_command("true", in_data=b"x")[1] == b"podman-exec-ran"
    assert calls == [["exec", "--interactive"]]
