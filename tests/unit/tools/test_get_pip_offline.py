"""The offline get-pip stand-in must do what ansible-test expects of get-pip.py."""
import os
import subprocess
import venv

from testlib import REPO_ROOT

STANDIN = os.path.join(REPO_ROOT, "tests", "tools", "get-pip-offline.py")


def _pip_version(python):
    out = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, text=True, check=False)
    return out.returncode, out.stdout


def test_bootstraps_requested_pip_into_an_empty_venv_and_propagates_pip_failure(tmp_path):
    """One venv for both checks: creating it and seeding pip (ensurepip) is most of the cost, about 10 s each."""
    venv.EnvBuilder(with_pip=False).create(str(tmp_path / "venv"))
    python = str(tmp_path / "venv" / "bin" / "python")
    assert _pip_version(python)[0] != 0, "a --without-pip venv must start without pip"

    # The exact arguments ansible-test's bootstrap passes to get-pip.py.
    args = ["--disable-pip-version-check", "pip==24.2", "--no-setuptools", "--no-wheel"]
    result = subprocess.run([python, STANDIN] + args, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr

    rc, version = _pip_version(python)
    assert rc == 0
    assert version.startswith("pip 24.2 ")

    # A pip install that fails makes the stand-in fail (ansible-test must not go on without pip).
    result = subprocess.run(
        [python, STANDIN, "--disable-pip-version-check", "--no-index", "pip==0.0.0-does-not-exist"],
        capture_output=True, text=True, check=False)
    assert result.returncode != 0
