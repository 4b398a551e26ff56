"""The execution environment (execution-environment.yml, `make ee`), built and used the way AWX uses it.

1. `ansible-builder create` writes a context that builds offline: the pinned Python file, the wheelhouse, the
   `--offline` installs of the dependency tarballs and the collection (checked without building).
2. `make ee` builds localhost/gpu-native/fleet-ee:latest (a no-op when its inputs are unchanged: `make test`
   builds it in its own timed step before integration), and `ansible-runner run --process-isolation
   --container-image` runs playbooks/compliance.yml inside it, as AWX's task runner does on a podman execution
   node (AWX adds `--user=root` to the container options: awx/main/tasks/jobs.py,
   build_execution_environment_params), against the simulated GPU fleet (local-connection hosts with the
   nvidia-smi and containerd stand-ins, benchmarks/fleet_compliance.py) and the real control plane
   (tests/kube_cluster.py) through a token of the shipped read-only compliance ClusterRole.  The same
   inventory run on the host gives the same statuses; the runner artifacts (artifacts/<ident>/job_events,
   the set_stats summary of playbook_on_stats) and the reports under /runner/artifacts/compliance
   (docs/awx.md) are checked.
"""
import glob
import importlib.util
import json
import os
import secrets
import shutil
import subprocess
import tarfile

import ansible_runner
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(REPO, ".venv", "bin")
IMAGE = os.environ.get("EE_IMAGE", "localhost/gpu-native/fleet-ee:latest")
_SPEC = importlib.util.spec_from_file_location("fleet_bench", os.path.join(REPO, "benchmarks", "fleet_compliance.py"))
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)
EE_PATH = "/opt/ee/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _env():
    return dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""))


def _galaxy_version():
    with open(os.path.join(REPO, "galaxy.yml")) as handle:
        return yaml.safe_load(handle)["version"]


def test_ansible_builder_create_context(tmp_path):
    env = _env()
    subprocess.run(["make", "-s", "build"], cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    for folder in ("wheelhouse", "deps", "collection"):  # what tools/ee/build-ee.sh fills
        os.makedirs(os.path.join(REPO, ".cache", "ee", folder), exist_ok=True)
    context = tmp_path / "context"
    proc = subprocess.run([os.path.join(BIN, "ansible-builder"), "create", "-f", "execution-environment.yml",
                           "-c", str(context), "--output-filename", "Containerfile"],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    assert proc.returncode == 0, proc.stdout.decode()
    build = context / "_build"

    tarball = os.path.join(REPO, ".cache", "dist", "gpu_native-fleet-%s.tar.gz" % _galaxy_version())
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
    assert "plugins/modules/node_compliance.py" in names
    assert "playbooks/compliance.yml" in names
    assert not [n for n in names if n.startswith((".venv", ".cache", "tests/output"))]

    # one pinned file, every line an exact pin
    python = [line for line in (build / "requirements.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert all("==" in line for line in python), python
    assert {"kubernetes", "jmespath", "ansible-core", "ansible-runner"} <= set(line.split("==")[0] for line in python)
    containerfile = (context / "Containerfile").read_text()
    assert 'ARG EE_BASE_IMAGE="localhost/gpu-native/ee-base:latest"' in containerfile
    assert 'ARG PYCMD="/opt/ee/venv/bin/python3"' in containerfile
    assert 'ARG PKGMGR="/usr/bin/apt-get"' in containerfile
    assert "ENV PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheelhouse" in containerfile
    assert "ansible-core==2.19.14" in containerfile
    # the collections from the tarballs, in the final stage after the Python packages (so a change to the
    # collection re-runs only the last layers), the collection itself last
    lines = containerfile.splitlines()
    python = lines.index("RUN /output/scripts/install-from-bindep && rm -rf /output/wheels")
    deps = [n for n, line in enumerate(lines) if line.startswith("RUN ansible-galaxy collection install --offline")
            and "gpu-native-deps/ansible-posix.tar.gz" in line
            and "gpu-native-deps/community-general.tar.gz" in line and "kubernetes-core.tar.gz" in line
            and "awx-awx.tar.gz" in line]
    own = [n for n, line in enumerate(lines) if line.startswith("RUN ansible-galaxy collection install --offline")
           and "gpu-native-fleet/gpu_native-fleet.tar.gz" in line]
    assert len(deps) == 1 and len(own) == 1 and python < deps[0] < own[0], containerfile
    assert "FROM base AS galaxy" not in containerfile  # its COPY _build would defeat the layer cache
    shutil.rmtree(str(context))


# --- the image and the AWX job path -----------------------------------------------------------------------------
def _make_ee():
    proc = subprocess.run(["make", "-s", "ee"], cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, check=False)
    assert proc.returncode == 0, "make ee failed:\n" + proc.stdout.decode("utf-8", "replace")[-4000:]


def _fleet(tmp_path, kubeconfig, prefix):
    """The simulated fleet's inventory, with the node names the API knows and a Python both sides have."""
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    inventory, drifting = bench.build_fleet(str(fleet), 4, 2, unreachable=1)
    with open(inventory) as handle:
        data = json.load(handle)
    hosts = data["all"]["children"]["gpu_nodes"]["hosts"]
    for name, host in hosts.items():
        host["compliance_node_name"] = "%s-%s" % (prefix, name)
        if host.get("ansible_connection") == "local":
            # the Python that runs ansible-playbook: the venv's on the host, /opt/ee/venv's in the image
            host["ansible_python_interpreter"] = "{{ ansible_playbook_python }}"
    data["all"]["vars"]["compliance_kubeconfig"] = kubeconfig
    return data, drifting


def _private_data_dir(path, inventory, extravars, envvars):
    """An ansible-runner private data directory laid out as AWX writes one: project/ (the synced project),
    inventory/, env/extravars, env/envvars."""
    for sub in ("project", "inventory", "env", "artifacts"):
        os.makedirs(os.path.join(path, sub))
    shutil.copytree(os.path.join(REPO, "playbooks"), os.path.join(path, "project", "playbooks"))
    with open(os.path.join(path, "inventory", "hosts.json"), "w") as handle:
        json.dump(inventory, handle)
    with open(os.path.join(path, "env", "extravars"), "w") as handle:
        json.dump(extravars, handle)
    with open(os.path.join(path, "env", "envvars"), "w") as handle:
        json.dump(envvars, handle)
    return path


def _events(artifacts):
    events = []
    for path in sorted(glob.glob(os.path.join(artifacts, "job_events", "*.json"))):
        with open(path) as handle:
            events.append(json.load(handle))
    return events


def _statuses(report):
    with open(report) as handle:
        return sorted((row["host"], row["check"], row["status"]) for row in json.load(handle))


def _compliance_in_image_and_on_host(tmp_path, kubeconfig, prefix):
    """Run compliance.yml through ansible-runner in the image and on the host; check the AWX artifacts."""
    inventory, drifting = _fleet(tmp_path, kubeconfig, prefix)
    assert sorted(drifting) == ["node002", "node004"]

    # inside the image: the standard AWX layout, the reports where docs/awx.md tells AWX users to put them
    ee_inventory = json.loads(json.dumps(inventory))
    for host in ee_inventory["all"]["children"]["gpu_nodes"]["hosts"].values():
        if "compliance_environment" in host:
            host["compliance_environment"]["PATH"] = str(tmp_path / "fleet" / "bin") + os.pathsep + EE_PATH
    pdd = _private_data_dir(str(tmp_path / "ee"), ee_inventory,
                            {"compliance_report_dir": "/runner/artifacts/compliance"},
                            {"ANSIBLE_HOST_KEY_CHECKING": "False"})
    # the stand-ins and the captures they replay, at the paths the inventory names
    standins, captures = os.path.join(REPO, "tests", "standins"), os.path.join(REPO, "tests", "fixtures")
    proc = subprocess.run(
        [os.path.join(BIN, "ansible-runner"), "run", pdd, "-p", "playbooks/compliance.yml", "--ident", "job-1",
         "--process-isolation", "--process-isolation-executable", "podman", "--container-image", IMAGE,
         "--container-option=--user=root", "--container-option=--network=host",
         "--container-volume-mount", "%s:%s:ro" % (tmp_path / "fleet", tmp_path / "fleet"),
         "--container-volume-mount", "%s:%s:ro" % (kubeconfig, kubeconfig),
         "--container-volume-mount", "%s:%s:ro" % (standins, standins),
         "--container-volume-mount", "%s:%s:ro" % (captures, captures)],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False, timeout=1200)
    out = proc.stdout.decode("utf-8", "replace")
    artifacts = os.path.join(pdd, "artifacts", "job-1")
    with open(os.path.join(artifacts, "status")) as handle:
        assert handle.read().strip() == "failed", out[-4000:]  # drifting hosts fail the job
    with open(os.path.join(artifacts, "rc")) as handle:
        assert handle.read().strip() == "2", out[-4000:]

    # the playbook ran in the image: its Python, and the collection the image installed (no checkout link)
    events = _events(artifacts)
    start = [e for e in events if e["event"] == "playbook_on_start"]
    assert len(start) == 1
    assert start[0]["event_data"]["playbook"] == "playbooks/compliance.yml"
    command = open(os.path.join(artifacts, "command")).read()
    assert IMAGE in command and "--user=root" in command
    stats = [e for e in events if e["event"] == "playbook_on_stats"]
    assert len(stats) == 1
    assert sorted(set(stats[0]["event_data"]["failures"]) | set(stats[0]["event_data"]["dark"])) == [
        "gone01", "node002", "node004"]
    artifact_data = stats[0]["event_data"]["artifact_data"]  # what AWX shows as the job's artifacts
    summary = artifact_data["compliance_summary"]
    assert summary["hosts_total"] == 5 and summary["hosts_compliant"] == 2
    assert summary["hosts_failed"] == ["node002", "node004"] and summary["hosts_unreachable"] == ["gone01"]
    assert summary["by_check"]["kubernetes"]["pass"] == 4  # the API answered the compliance token
    assert [item["check"] for item in artifact_data["compliance_failing"]["node004"]] == ["gpu_health"]

    reports = os.path.join(pdd, "artifacts", "compliance")
    for name in ("compliance.json", "compliance.junit.xml", "compliance.html"):
        assert os.path.isfile(os.path.join(reports, name)), sorted(os.listdir(os.path.join(pdd, "artifacts")))
    in_image = _statuses(os.path.join(reports, "compliance.json"))
    assert ("node001", "kubernetes", "pass") in in_image and ("node003", "spec", "pass") in in_image

    # the same job on the host (the checkout's collection, the venv): the same statuses
    host_pdd = _private_data_dir(str(tmp_path / "host"), inventory,
                                 {"compliance_report_dir": str(tmp_path / "host-reports")}, {})
    env = bench.ansible_env()
    result = ansible_runner.run(
        private_data_dir=host_pdd, playbook="playbooks/compliance.yml", quiet=True,
        envvars=dict((k, env[k]) for k in ("ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH",
                                           "ANSIBLE_HOST_KEY_CHECKING", "PATH")))
    assert result.status == "failed"
    assert _statuses(str(tmp_path / "host-reports" / "compliance.json")) == in_image


def test_compliance_job_inside_the_image_as_awx_runs_it(tmp_path, kube_cluster, kube_job_kubeconfig):
    _make_ee()
    os.chmod(str(tmp_path), 0o755)  # pytest makes it 0700; the fleet under it is mounted into the container
    prefix = "ee-" + secrets.token_hex(3)
    names = ["%s-node%03d" % (prefix, n) for n in range(1, 5)]
    for name in names:  # what kubelets and the device plugin would have written: 8 nvidia.com/gpu each
        kube_cluster.api("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        kube_cluster.api("PATCH", "/api/v1/nodes/%s/status" % name,
                         {"status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}},
                         content_type="application/merge-patch+json")
    try:
        _compliance_in_image_and_on_host(tmp_path, kube_job_kubeconfig("compliance"), prefix)
    finally:
        for name in names:
            kube_cluster.request("DELETE", "/api/v1/nodes/" + name)


def test_fleet_report_ee_runs_the_job_in_the_image(tmp_path):
    """tools/fleet_report.py --ee IMAGE: the same per-host lines and exit status, from inside the image."""
    _make_ee()
    os.chmod(str(tmp_path), 0o755)
    fleet = tmp_path / "fleet"
    inventory, drifting = bench.build_fleet(str(fleet), 2, 2)
    assert list(drifting) == ["node002"]
    with open(inventory) as handle:
        data = json.load(handle)
    for host in data["all"]["children"]["gpu_nodes"]["hosts"].values():
        host["ansible_python_interpreter"] = "{{ ansible_playbook_python }}"
        host["compliance_environment"]["PATH"] = str(fleet / "bin") + os.pathsep + EE_PATH
    with open(inventory, "w") as handle:
        json.dump(data, handle)
    html = tmp_path / "report.html"
    mounts = []
    for path in (str(fleet), os.path.join(REPO, "tests", "standins"), os.path.join(REPO, "tests", "fixtures")):
        mounts += ["--ee-volume", path]
    proc = subprocess.run([os.path.join(BIN, "python"), os.path.join(REPO, "tools", "fleet_report.py"),
                           "-i", inventory, "--ee", IMAGE, "--html", str(html)] + mounts,
                          env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False, timeout=1200)
    out = proc.stdout.decode("utf-8", "replace")
    assert proc.returncode == 1, out
    lines = out.splitlines()
    assert any(line.startswith("node001") and "compliant" in line for line in lines), out
    assert any(line.startswith("node002") and "DRIFT" in line and "spec=fail" in line for line in lines), out
    assert "2 host(s): 1 compliant, failed: node002, unreachable: none" in out
    assert "<svg" in html.read_text()


def test_fleet_report_ee_volume_needs_ee(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all: {}\n")
    proc = subprocess.run([os.path.join(BIN, "python"), os.path.join(REPO, "tools", "fleet_report.py"),
                           "-i", str(inventory), "--ee-volume", "/tmp"], env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, check=False)
    assert proc.returncode == 2 and "--ee-volume needs --ee IMAGE" in proc.stdout.decode()
