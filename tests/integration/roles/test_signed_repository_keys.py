# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""_signed_repository's pinned keys, run by ansible-playbook on localhost (issue 26, item 3).

Every path the role writes (keyring, source file) is under tmp_path.  Refusals run the whole role and must
leave nothing behind: no keyring, no source file, not even the keyring folder.  The accepted key runs the
role's key tasks (tasks_from: key), which is all the pin concerns: the source file and apt-get update
that follow are Molecule's (molecule/container_toolkit).  The keys are made here with gpg, as
tests/apt_repo/build_repo.py makes the stand-in repository's.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import shutil
import subprocess

import pytest

from testlib import run_ansible_playbook

PLAYBOOK = """\
- name: Run _signed_repository
  hosts: localhost
  gather_facts: false
  tasks:
    - name: The role
      ansible.builtin.include_role:
        name: gpu_native.fleet._signed_repository
        tasks_from: "{{ sr_tasks_from }}"
"""


def _gpg(home, *args, **kwargs):
    return subprocess.run(["gpg", "--homedir", home, "--batch", "--quiet", "--pinentry-mode", "loopback",
                           "--passphrase", ""] + list(args), check=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, **kwargs)


def _make_key(home, uid):
    _gpg(home, "--quick-gen-key", uid, "ed25519", "sign", "never")
    armored = _gpg(home, "--armor", "--export", uid).stdout
    listing = _gpg(home, "--with-colons", "--fingerprint", uid).stdout
    fingerprint = [line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")][0]
    return armored, fingerprint


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    if shutil.which("gpg") is None:
        pytest.fail("gpg is needed to make the test keys (tests/tools/setup-host.sh installs gnupg)")
    home = str(tmp_path_factory.mktemp("gnupg"))
    os.chmod(home, 0o700)
    try:
        good, good_fpr = _make_key(home, "gpu_native test repository <repo@example.invalid>")
        other, other_fpr = _make_key(home, "gpu_native other key <other@example.invalid>")
    finally:
        subprocess.run(["gpgconf", "--homedir", home, "--kill", "gpg-agent"], check=False)
    folder = tmp_path_factory.mktemp("keys")
    paths = {}
    for name, text in (("good", good), ("other", other), ("both", good + other), ("junk", "not a key\n")):
        path = folder / (name + ".asc")
        path.write_text(text)
        paths[name] = str(path)
    return {"good": good, "good_fpr": good_fpr, "other_fpr": other_fpr, "paths": paths}


def _role_vars(root, **role_vars):
    variables = {
        "_signed_repository_family": "apt",
        "_signed_repository_id": "gpu-native-test",
        "_signed_repository_description": "test repository",
        "_signed_repository_url": "file:///nonexistent/gpu-native-test",
        "_signed_repository_file": str(root / "sources" / "gpu-native-test.list"),
        "_signed_repository_keyring": str(root / "keyrings" / "gpu-native-test.asc"),
        "_signed_repository_what": "the test repository",
        "_signed_repository_fingerprint_variable": "test_repo_key_fingerprint",
    }
    variables.update(role_vars)
    return variables


def _run(tmp_path, tasks_from="main", args=(), **role_vars):
    root = tmp_path / "root"
    playbook = tmp_path / "playbook.yml"
    playbook.write_text(PLAYBOOK)
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps(dict(_role_vars(root, **role_vars), sr_tasks_from=tasks_from)))
    result = run_ansible_playbook(str(playbook), args=["-e", "@" + str(extra)] + list(args))
    return result, root


def _run_cases(folder, cases, args=()):
    """One ansible-playbook run for many cases: {name: (tasks_from, role vars)} -> {name: (message, root)}.

    Each case runs in a block whose rescue records the failure message, each with a root folder of its own.
    """
    tasks, roots = [], {}
    for name, (tasks_from, role_vars) in cases.items():
        root = folder / name
        roots[name] = root
        tasks.append({"name": "case " + name, "block": [
            {"ansible.builtin.include_role": {"name": "gpu_native.fleet._signed_repository", "tasks_from": tasks_from},
             "vars": _role_vars(root, **role_vars)},
            {"ansible.builtin.set_fact": {"results": "{{ results | default({}) | combine({'%s': 'ok'}) }}" % name}},
        ], "rescue": [
            {"ansible.builtin.set_fact": {"results": "{{ results | default({}) | combine({'%s': ansible_failed_result.msg}) }}"
                                          % name}},
        ]})
    out = folder / "results.json"
    tasks.append({"ansible.builtin.copy": {"content": "{{ results | to_json }}", "dest": str(out), "mode": "0644"},
                  "check_mode": False})
    playbook = folder / "cases.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    result = run_ansible_playbook(str(playbook), args=list(args))
    assert result.returncode == 0, result.stdout
    messages = json.loads(out.read_text())
    return dict((name, (messages[name], roots[name])) for name in cases)


def _nothing_installed(root):
    return not (root / "keyrings").exists() and not (root / "sources").exists()


def _recap(result):
    line = [line for line in result.stdout.splitlines() if line.startswith("localhost")][-1]
    return dict(part.split("=") for part in line.split(":", 1)[1].split())


@pytest.fixture(scope="module")
def refusals(keys, tmp_path_factory):
    paths = keys["paths"]
    cases = {
        "http_url": ("main", {"_signed_repository_key_url": "http://127.0.0.1:9/gpgkey",
                              "_signed_repository_key_fingerprint": keys["good_fpr"]}),
        "ftp_url": ("main", {"_signed_repository_key_url": "ftp://127.0.0.1:9/gpgkey",
                             "_signed_repository_key_fingerprint": keys["good_fpr"]}),
        "https_unpinned": ("main", {"_signed_repository_key_url": "https://127.0.0.1:9/gpgkey"}),
        "malformed_fingerprint": ("main", {"_signed_repository_key_url": "file://" + paths["good"],
                                           "_signed_repository_key_fingerprint": "F796ECB0"}),
        "wrong_fingerprint": ("main", {"_signed_repository_key_url": "file://" + paths["good"],
                                       "_signed_repository_key_fingerprint": keys["other_fpr"]}),
        "two_keys": ("main", {"_signed_repository_key_content": open(paths["both"]).read(),
                              "_signed_repository_key_fingerprint": keys["good_fpr"]}),
        "not_a_key": ("main", {"_signed_repository_key_url": "file://" + paths["junk"],
                               "_signed_repository_key_fingerprint": keys["good_fpr"]}),
    }
    return _run_cases(tmp_path_factory.mktemp("refusals"), cases)


@pytest.mark.parametrize("case,fragments", [
    ("http_url", ["http://127.0.0.1:9/gpgkey", "only https:// and file:// key URLs are used"]),
    ("ftp_url", ["only https:// and file:// key URLs are used"]),
    ("https_unpinned", ["without a fingerprint to check it against", "Fix: set test_repo_key_fingerprint"]),
    ("malformed_fingerprint", ["test_repo_key_fingerprint=F796ECB0 is not an OpenPGP fingerprint", "40 hexadecimal"]),
    ("wrong_fingerprint", ["has the fingerprint {good}, not {other}", "(test_repo_key_fingerprint)"]),
    ("two_keys", ["holds 2 keys ({good}, {other})", "the pinned key only"]),
    ("not_a_key", ["is not an OpenPGP key", "no valid OpenPGP data"]),
])
def test_refused_with_nothing_installed(refusals, keys, case, fragments):
    message, root = refusals[case]
    for fragment in fragments:
        assert fragment.format(good=keys["good_fpr"], other=keys["other_fpr"]) in message, message
    assert "Fix:" in message and "Nothing was installed" in message, message
    assert _nothing_installed(root) or not (root / "keyrings" / "gpu-native-test.asc").exists()
    assert not (root / "sources").exists()


def test_refused_before_the_keyring_folder_is_made(refusals):
    for case in ("http_url", "ftp_url", "https_unpinned", "malformed_fingerprint"):
        assert _nothing_installed(refusals[case][1]), case


def test_right_fingerprint_installs_and_the_next_run_does_not_fetch(tmp_path, keys):
    source = tmp_path / "published.asc"
    shutil.copy(keys["paths"]["good"], str(source))
    spaced = " ".join(keys["good_fpr"][i:i + 4] for i in range(0, 40, 4)).lower()  # as publishers print it
    role_vars = {"_signed_repository_key_url": "file://" + str(source), "_signed_repository_key_fingerprint": spaced}
    result, root = _run(tmp_path, tasks_from="key", **role_vars)
    assert result.returncode == 0, result.stdout
    keyring = root / "keyrings" / "gpu-native-test.asc"
    assert keyring.read_text() == keys["good"]
    assert oct(keyring.stat().st_mode & 0o777) == "0o644"
    assert _recap(result)["changed"] != "0"

    # The published key is gone: a run that fetched it would fail.  The installed key has the pinned
    # fingerprint, so nothing is fetched and nothing changes.
    source.unlink()
    again = _run(tmp_path, tasks_from="key", **role_vars)[0]
    assert again.returncode == 0, again.stdout
    assert _recap(again)["changed"] == "0", again.stdout
    assert re.search(r"Download the key to the scratch folder\] \*+\nskipping", again.stdout), again.stdout
    assert keyring.read_text() == keys["good"]


def test_installed_key_with_another_fingerprint_is_replaced_after_the_check(tmp_path, keys):
    keyring = tmp_path / "root" / "keyrings" / "gpu-native-test.asc"
    keyring.parent.mkdir(parents=True)
    shutil.copy(keys["paths"]["other"], str(keyring))
    result = _run(tmp_path, tasks_from="key", _signed_repository_key_url="file://" + keys["paths"]["good"],
                  _signed_repository_key_fingerprint=keys["good_fpr"])[0]
    assert result.returncode == 0, result.stdout
    assert keyring.read_text() == keys["good"]


def test_check_mode_checks_the_key_and_installs_nothing(tmp_path, keys):
    cases = {
        "wrong": ("key", {"_signed_repository_key_url": "file://" + keys["paths"]["good"],
                          "_signed_repository_key_fingerprint": keys["other_fpr"]}),
        "right": ("key", {"_signed_repository_key_url": "file://" + keys["paths"]["good"],
                          "_signed_repository_key_fingerprint": keys["good_fpr"]}),
    }
    results = _run_cases(tmp_path, cases, args=["--check"])
    assert "not %s" % keys["other_fpr"] in results["wrong"][0], results["wrong"][0]
    assert results["right"][0] == "ok"
    for _message, root in results.values():
        assert not (root / "keyrings" / "gpu-native-test.asc").exists()
