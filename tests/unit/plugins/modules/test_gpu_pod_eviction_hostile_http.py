# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_pod_eviction with a kubeconfig pointing at the hostile HTTP server (tests/hostile_http.py): issue 27,
reproducer 11. A dripping or ``100 Continue`` server kept it past 150 s (a socket timeout bounds one read only),
and its process ran on after Ansible gave up. Now every request shares the task's deadline (timeout + 5 s for the
last round) and SIGALRM fails the task there, wherever it blocks. The bound asserted is that documented deadline
plus a few seconds: a hang bound, not a performance figure."""
import json
import os
import sys
import time

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import http_deadline
from ansible_collections.gpu_native.fleet.plugins.modules import gpu_pod_eviction

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))
import hostile_http  # noqa: E402

#: The smallest timeout the module takes, and a final round of 1 s instead of 5 (the module's FINAL_ROUND_S, set
#: per test): the deadline is the same code at any length, and twelve servers at 7 s each made this the slowest
#: unit file.
TIMEOUT = 1
FINAL_ROUND_S = 1
SLACK_S = 4


def kubeconfig(tmp_path, url):
    path = tmp_path / "hostile.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "hostile",
        "clusters": [{"name": "hostile", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "hostile", "context": {"cluster": "hostile", "user": "u"}}]}))
    return str(path)


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            gpu_pod_eviction.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("mode", ["drip-body", "drip-headers", "continue-forever", "drip-500", "flood",
                                  "header-flood", "huge", "deep", "bad-chunk", "short-body", "garbage",
                                  "redirect-302"])
def test_11_a_hostile_api_server_fails_the_task_within_its_deadline(capsys, tmp_path, monkeypatch, mode):
    monkeypatch.setattr(gpu_pod_eviction, "FINAL_ROUND_S", FINAL_ROUND_S)
    with hostile_http.HostileServer(mode, drip=0.2) as server:
        started = time.monotonic()
        result = run(capsys, {"node": "gpu-node-1", "timeout": TIMEOUT, "wait_sleep": 0.5,
                              "kubeconfig": kubeconfig(tmp_path, server.url)})
        elapsed = time.monotonic() - started
    limit = TIMEOUT + FINAL_ROUND_S + SLACK_S
    assert elapsed < limit, "%s kept the module %.1f s (deadline %d s)" % (mode, elapsed, limit - SLACK_S)
    assert result["failed"] is True and result["evicted"] == [] and "\n" not in result["msg"], result
    assert "Traceback" not in result["msg"]


def test_the_deadline_exception_is_not_swallowed_by_libraries():
    """TaskDeadlineExceeded is no Exception (urllib3 retries on OSError, kubernetes.core catches Exception)."""
    assert not issubclass(http_deadline.TaskDeadlineExceeded, Exception)
    with pytest.raises(http_deadline.TaskDeadlineExceeded, match="took too long"):
        with http_deadline.task_deadline(0.2, "took too long"):
            try:
                time.sleep(3)
            except Exception:  # pylint: disable=broad-except
                pytest.fail("swallowed")


def test_a_swallowed_deadline_still_ends_the_task():
    ended = []
    with http_deadline.task_deadline(0.1, "overrun", grace=0.1, on_overrun=ended.append):
        try:
            time.sleep(2)
        except BaseException:  # pylint: disable=broad-except
            pass  # a library that swallows everything
        time.sleep(0.5)
    assert ended == ["overrun"]
