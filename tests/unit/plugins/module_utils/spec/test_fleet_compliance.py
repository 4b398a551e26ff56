"""fleet_compliance: the containerd and readiness checks, and the tool-run cache."""
from ansible_collections.gpu_native.fleet.plugins.module_utils.spec import fleet_compliance as fc

V2 = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
    BinaryName = "%s"
"""


def _runner(out, rc=0):
    """A CachedTools whose processes are faked: every call answers ``out`` with ``rc``."""
    calls = []

    def run(argv, timeout, env_update=None):
        calls.append(argv)
        return rc, out.encode(), b"", False, False, 0.0
    return fc.CachedTools(runner=run, finder=lambda name: "/usr/bin/" + name), calls


def test_containerd_handler():
    runner, calls = _runner(V2 % "/usr/bin/nvidia-container-runtime")
    assert fc.check_containerd(runner, "nvidia", "/usr/bin/nvidia-container-runtime")["status"] == "pass"
    fc.check_containerd(runner, "nvidia", "/usr/bin/nvidia-container-runtime")
    assert len(calls) == 1  # cached
    runner, calls = _runner(V2 % "/usr/bin/runc")
    result = fc.check_containerd(runner, "nvidia", "/usr/bin/nvidia-container-runtime")
    assert result["status"] == "fail" and "/usr/bin/runc" in result["actual"]
    runner, calls = _runner(V2 % "x")
    assert fc.check_containerd(runner, "other", "x")["status"] == "fail"
    runner, calls = _runner("", rc=1)
    assert fc.check_containerd(runner, "nvidia", "x")["status"] == "fail"
    runner, calls = _runner("version = [")
    assert fc.check_containerd(runner, "nvidia", "x")["status"] == "error"


def test_readiness_freshness(tmp_path):
    path = tmp_path / "r.prom"
    path.write_text('# TYPE m gauge\ngpu_native_node_validation_last_success_ts_seconds{node="n"} 1000\n')
    assert fc.check_readiness(str(path), 600, now=1500)["status"] == "pass"
    assert fc.check_readiness(str(path), 600, now=1700)["status"] == "fail"
    path.write_text("other_metric 1\n")
    assert "absent" in fc.check_readiness(str(path), 600, now=1000)["actual"]
    assert fc.check_readiness(str(tmp_path / "missing"), 600)["status"] == "fail"


def test_unselected_checks_are_skipped_and_not_counted():
    result = fc.run_checks({"checks": ["readiness"]})
    assert [c["status"] for c in result["checks"]] == ["skip"] * 4
    assert result["compliant"] is True and result["tool_runs"] == 0
