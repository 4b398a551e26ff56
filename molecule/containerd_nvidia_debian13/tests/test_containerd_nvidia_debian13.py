"""Verify gpu_native.fleet.containerd_nvidia on Debian 13: the containerd_nvidia scenario's checks, on this host."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "containerd_nvidia", "tests"))

# The shared checks (fixtures and test_* functions), collected here against this scenario's host.
from test_containerd_nvidia import *  # noqa: E402,F401,F403  pylint: disable=wildcard-import,unused-wildcard-import

testinfra_hosts = ["podman://gn-containerd_nvidia_debian13-node1"]


def test_host_is_debian_13_with_containerd_1_7(host):
    assert host.file("/etc/debian_version").content_string.startswith("13.")
    version = host.check_output("dpkg-query -W -f='${Version}' containerd")
    assert re.match(r"^1\.7\.", version), version
