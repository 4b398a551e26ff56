# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The readiness agent's systemd unit, rendered from the role's template, rated by `systemd-analyze security`.

Issue 26 item 2: exposure 2.5 or lower for the sandboxed unit.  `systemd-analyze security --offline=yes <file>`
(systemd 250 and newer) rates a unit file without loading it; without it the tests skip and say why.  Molecule's
gpu_readiness scenario checks the installed unit on a real systemd as well.
"""
import os
import re
import shutil
import subprocess

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROLE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "gpu_readiness"))
UNIT = "gpu-native-readiness.service"
TARGET = 2.5
_EXPOSURE_RE = re.compile(r"Overall exposure level for %s: ([0-9]+(?:\.[0-9]+)?) " % re.escape(UNIT))


def _analyze_skip_reason():
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return "systemd-analyze is not installed"
    probe = subprocess.run([tool, "security", "--help"], capture_output=True, text=True, timeout=30, check=False)
    if "--offline" not in probe.stdout:
        return "this systemd-analyze has no --offline (systemd 250 and newer)"
    return None


SKIP_REASON = _analyze_skip_reason()
needs_analyze = pytest.mark.skipif(SKIP_REASON is not None, reason=str(SKIP_REASON))


def _trusted(value):
    """Strings from the role's own files are templates, as Ansible treats a role's defaults and vars."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return dict((key, _trusted(item)) for key, item in value.items())
    if isinstance(value, list):
        return [_trusted(item) for item in value]
    return value


def role_variables(**overrides):
    """The role's defaults and vars as Ansible loads them (trusted templates), plus ``overrides``."""
    loader = DataLoader()
    variables = {}
    for part in ("defaults", "vars"):
        variables.update(_trusted(loader.load_from_file(os.path.join(ROLE, part, "main.yml"))))
    variables.update(role_path=ROLE, ansible_managed="Ansible managed", ansible_facts={"nodename": "gpu-node-1"},
                     inventory_hostname="gpu-node-1")
    variables.update(overrides)
    return loader, variables


def render(expression, **overrides):
    loader, variables = role_variables(**overrides)
    return Templar(loader=loader, variables=variables).template(trust_as_template(expression))


def render_unit(**overrides):
    """The unit as the role writes it: its template with the role's defaults and vars (Ansible's own templar)."""
    with open(os.path.join(ROLE, "templates", UNIT + ".j2")) as handle:
        return render(handle.read(), **overrides)


def exposure(tmp_path, text):
    path = tmp_path / UNIT
    path.write_text(text)
    done = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(path)], capture_output=True,
                          text=True, timeout=60, check=False)
    match = _EXPOSURE_RE.search(done.stdout)
    assert match, "no exposure level in: %s %s" % (done.stdout[-2000:], done.stderr[-2000:])
    return float(match.group(1)), done.stdout


def directives(text):
    return [line for line in text.splitlines() if line and not line.startswith("#")]


@needs_analyze
def test_the_sandboxed_unit_rates_at_most_2_5(tmp_path):
    text = render_unit()
    level, report = exposure(tmp_path, text)
    assert level <= TARGET, report
    lines = directives(text)
    for wanted in ("DynamicUser=yes", "SupplementaryGroups=systemd-journal gpu-native-textfile",
                   "StateDirectory=gpu-native-readiness", "ReadWritePaths=-/var/lib/prometheus/node-exporter",
                   "UMask=0077", "CapabilityBoundingSet=", "ProtectSystem=strict", "ProtectKernelTunables=yes",
                   "ProtectKernelModules=yes", "ProtectControlGroups=yes", "RestrictNamespaces=yes",
                   "LockPersonality=yes", "SystemCallFilter=@system-service", "SystemCallArchitectures=native",
                   "DevicePolicy=closed", "DeviceAllow=char-nvidia* rw",
                   "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK"):
        assert wanted in lines, wanted
    # CUDA's JIT may need writable+executable memory: left off on purpose (docs/security.md)
    assert not any(line.startswith("MemoryDenyWriteExecute") for line in lines)
    assert not any(line.startswith("LoadCredential") for line in lines)  # none found on the node


@needs_analyze
def test_credentials_are_loaded_and_the_rating_holds(tmp_path):
    loaded = {"kubeconfig": "/etc/kubernetes/kubelet.conf",
              "kube-client-certificate": "/var/lib/kubelet/pki/kubelet-client-current.pem"}
    text = render_unit(__gpu_readiness_loaded_credentials=loaded)
    lines = directives(text)
    assert "LoadCredential=kubeconfig:/etc/kubernetes/kubelet.conf" in lines
    assert "LoadCredential=kube-client-certificate:/var/lib/kubelet/pki/kubelet-client-current.pem" in lines
    level, report = exposure(tmp_path, text)
    assert level <= TARGET, report


@needs_analyze
def test_a_custom_state_folder_and_groups_are_rendered(tmp_path):
    text = render_unit(gpu_readiness_state_dir="/var/lib/site/readiness", gpu_readiness_sandbox_groups=["systemd-journal", "adm"])
    lines = directives(text)
    assert "StateDirectory=site/readiness" in lines and "Environment=HOME=/var/lib/site/readiness" in lines
    assert "SupplementaryGroups=systemd-journal adm gpu-native-textfile" in lines
    assert exposure(tmp_path, text)[0] <= TARGET


@needs_analyze
def test_the_unsandboxed_unit_is_what_the_rating_catches(tmp_path):
    """gpu_readiness_sandbox: false (root, three settings): the check tells it apart, so it can fail."""
    text = render_unit(gpu_readiness_sandbox=False)
    assert "DynamicUser=yes" not in directives(text)
    level, _report = exposure(tmp_path, text)
    assert level > 8.0


def test_the_rendered_config_points_kube_at_the_credentials_only_when_loaded():
    """The agent's config.json (vars/main.yml __gpu_readiness_config) follows the credentials the role loaded."""
    plain = render("{{ __gpu_readiness_config.kube }}")
    assert plain["kubeconfig"] == "/etc/kubernetes/kubelet.conf"
    assert plain["client_certificate"] == "" and plain["client_key"] == ""
    loaded = render("{{ __gpu_readiness_config.kube }}", __gpu_readiness_loaded_credentials={
        "kubeconfig": "/etc/kubernetes/kubelet.conf", "kube-client-key": "/var/lib/kubelet/pki/k.pem"})
    assert loaded["kubeconfig"] == "/run/credentials/gpu-native-readiness.service/kubeconfig"
    assert loaded["client_key"] == "/run/credentials/gpu-native-readiness.service/kube-client-key"
    assert loaded["client_certificate"] == "" and loaded["token_file"] == ""
