"""Checks shared by the scenarios that start a container through containerd's `nvidia` handler.

Not a scenario (no molecule.yml): the verify tests of containerd_nvidia, containerd_nvidia_containerd2,
node_stack and node_stack_debian13 import it after putting this folder on sys.path.
"""
import os
import shlex

# tests/standins/nvidia-container-runtime appends one line per call (its argv) to this log.
STANDIN_LOG = "/var/log/nvidia-container-runtime-standin.log"


def run_through_handler(host, runtime_type, options, message, name_prefix="gn-verify-nvidia"):
    """Run busybox `echo MESSAGE` with the handler's runtime type and options, as the CRI plugin would.

    Asserts that the container ran and printed MESSAGE, and that the runtime stand-in was called to
    create (with a bundle) and start it.  Returns the stand-in's log lines of this run.
    """
    before = int(host.check_output("cat %s 2>/dev/null | wc -l" % STANDIN_LOG))
    container_id = "%s-%d" % (name_prefix, os.getpid())
    argv = ["ctr", "run", "--rm", "--rootfs", "--runtime", runtime_type, "--runc-binary", options["BinaryName"]]
    if options.get("SystemdCgroup"):
        # Like the CRI plugin with SystemdCgroup = true: runc gets a systemd slice:prefix:name path.
        argv += ["--runc-systemd-cgroup", "--cgroup", "system.slice:gn-verify:%s" % container_id]
    argv += ["/opt/gn-rootfs", container_id, "/bin/busybox", "echo", message]
    result = host.run(" ".join(shlex.quote(a) for a in argv))
    assert result.rc == 0, result.stderr
    assert message in result.stdout
    calls = host.check_output("tail -n +%d %s" % (before + 1, STANDIN_LOG)).splitlines()
    assert any("'create'" in line and "'--bundle'" in line for line in calls), calls
    assert any("'start'" in line for line in calls), calls
    return calls
