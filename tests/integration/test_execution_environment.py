"""execution-environment.yml: `ansible-builder create` writes a build context with the collection and its requirements.

Only the context is checked; no image is built or pulled.
"""
import os
import shutil
import subprocess
import tarfile

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(REPO, ".venv", "bin")


def _galaxy_version():
    with open(os.path.join(REPO, "galaxy.yml")) as handle:
        return yaml.safe_load(handle)["version"]


def test_ansible_builder_create_context(tmp_path):
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    subprocess.run(["make", "-s", "build"], cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    context = tmp_path / "context"
    proc = subprocess.run([os.path.join(BIN, "ansible-builder"), "create", "-f", "execution-environment.yml",
                           "-c", str(context), "--output-filename", "Containerfile"],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    assert proc.returncode == 0, proc.stdout.decode()
    build = context / "_build"

    tarball = build / "collection" / ("gpu_native-fleet-%s.tar.gz" % _galaxy_version())
    assert tarball.is_file()
    with tarfile.open(str(tarball)) as archive:
        names = archive.getnames()
    assert "plugins/modules/node_compliance.py" in names
    assert "playbooks/compliance.yml" in names
    assert not [n for n in names if n.startswith((".venv", ".cache", "tests/output"))]

    python = (build / "requirements.txt").read_text()
    for name in ("kubernetes", "jmespath"):
        assert name in python
    galaxy = yaml.safe_load((build / "requirements.yml").read_text())
    collections = set(item["name"] for item in galaxy["collections"])
    assert {"community.general", "kubernetes.core", "awx.awx"} <= collections

    containerfile = (context / "Containerfile").read_text()
    assert "COPY _build/collection/ /tmp/gpu-native-fleet/" in containerfile
    assert "ansible-galaxy collection install --offline --no-deps" in containerfile
    assert "ansible-core==2.19.14" in containerfile
    shutil.rmtree(str(context))
