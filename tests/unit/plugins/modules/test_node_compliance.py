"""node_compliance through main(): bad options fail with the fix and run nothing; a run keeps checks apart."""
import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpu_native.fleet.plugins.modules import node_compliance as module


def run(monkeypatch, capsys, args):
    calls = []

    def fake_run_checks(params):
        calls.append(params)
        return {"compliant": False, "tool_runs": 0, "checks": [
            {"check": "spec", "status": "fail", "expected": "e", "actual": "a", "items": []}]}
    monkeypatch.setattr(module, "run_checks", fake_run_checks)
    with patch_module_args(args):
        with pytest.raises(SystemExit) as info:
            module.main()
    return info.value.code, json.loads(capsys.readouterr().out), calls


@pytest.mark.parametrize("name", ["expected_gpus", "device_plugin_count", "readiness_max_age"])
def test_negative_counts_are_refused(monkeypatch, capsys, name):
    code, result, calls = run(monkeypatch, capsys, {name: -1})
    assert code == 1 and result["failed"]
    assert result["msg"] == "%s is -1. Fix: use 0 or more." % name
    assert calls == []


def test_spec_root_must_be_a_directory(monkeypatch, capsys, tmp_path):
    code, result, calls = run(monkeypatch, capsys, {"spec_root": str(tmp_path / "missing")})
    assert code == 1 and "is not a directory. Fix:" in result["msg"]
    assert calls == []


def test_unknown_check_is_refused(monkeypatch, capsys):
    code, result, calls = run(monkeypatch, capsys, {"checks": ["spec", "dcgm"]})
    assert code == 1 and "dcgm" in result["msg"]
    assert calls == []


def test_drift_is_reported_not_failed_and_nothing_changes(monkeypatch, capsys):
    code, result, calls = run(monkeypatch, capsys, {"_ansible_check_mode": True})
    assert code == 0 and result["changed"] is False and result["compliant"] is False
    assert result["checks"][0]["check"] == "spec" and len(calls) == 1


def _run_real(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as info:
            module.main()
    return info.value.code, json.loads(capsys.readouterr().out)


def test_isolation_check_reads_the_toolkit_config_it_is_given(capsys, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("accept-nvidia-visible-devices-envvar-when-unprivileged = false\n"
                      "accept-nvidia-visible-devices-as-volume-mounts = true\n[nvidia-container-cli]\n")
    code, result = _run_real(capsys, {"checks": ["isolation"], "toolkit_config": str(config)})
    assert code == 0 and result["compliant"] is True and result["changed"] is False
    assert [(c["check"], c["status"]) for c in result["checks"]][-1] == ("isolation", "pass")
    config.write_text("#accept-nvidia-visible-devices-envvar-when-unprivileged = false\n")
    code, result = _run_real(capsys, {"checks": ["isolation"], "toolkit_config": str(config)})
    assert code == 0 and result["compliant"] is False
    isolation = result["checks"][-1]
    assert isolation["status"] == "fail" and "default true applies" in isolation["items"][0]
    assert config.read_text().startswith("#accept")  # read, never written
