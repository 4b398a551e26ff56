# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The check-result contract on every check module (docs/DEVELOPING.md, "How a check result looks").

conftest.py validates every result these modules return in every test of this folder; this file adds that each
check module documents ``status`` and ``reasons`` in RETURN and builds its result through check_result, and one run
of each module in a mode that needs no hardware (check mode, captured output, a missing tool)."""
import importlib
import json
import os

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import check_result

CHECK_MODULES = check_result.CHECK_MODULES

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
PASSING_DCGM = ('{"DCGM Diagnostic": {"version": "4.2.3", "test_categories": [{"category": "Deployment", "tests": '
                '[{"name": "software", "results": [{"entity_group": "GPU", "entity_id": 0, "status": "Pass"}]}]}]}}')


def module(name):
    return importlib.import_module("ansible_collections.gpu_native.fleet.plugins.modules." + name)


def run(capsys, name, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module(name).main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", CHECK_MODULES)
def test_each_check_module_documents_status_and_reasons(name):
    returns = yaml.safe_load(module(name).RETURN)
    assert "status" in returns and "reasons" in returns, name
    assert returns["status"]["type"] == "str"
    assert returns["reasons"]["type"] == "list" and returns["reasons"]["elements"] == "str"
    assert 'How a check result looks' in " ".join(returns["status"]["description"] if isinstance(
        returns["status"]["description"], list) else [returns["status"]["description"]])


@pytest.mark.parametrize("name", CHECK_MODULES)
def test_each_check_module_builds_its_result_through_check_result(name):
    with open(os.path.join(REPO, "plugins", "modules", name + ".py"), encoding="utf-8") as handle:
        source = handle.read()
    assert "module_utils._common import check_result" in source and "check_result.result(" in source


def test_the_contract_is_documented_once():
    with open(os.path.join(REPO, "docs", "DEVELOPING.md"), encoding="utf-8") as handle:
        text = handle.read()
    assert "## How a check result looks" in text


@pytest.mark.parametrize("name,args,status", [
    ("dcgm_diag", {"source": "captured", "captured": {"json": PASSING_DCGM}}, "pass"),
    ("dcgm_diag", {"dcgmi": "/nonexistent/dcgmi", "required": False}, "skip"),
    ("dcgm_diag", {"dcgmi": "/nonexistent/dcgmi", "fail_on_failure": False}, "fail"),
    ("dcgm_diag", {"_ansible_check_mode": True}, "skip"),
    ("gpu_bandwidth", {"_ansible_check_mode": True}, "skip"),
    ("gpu_bandwidth", {"nvbandwidth": "/nonexistent/nvbandwidth"}, "skip"),
    ("cuda_smoke", {"_ansible_check_mode": True}, "skip"),
    ("cuda_smoke", {"library": "/nonexistent/libcuda.so.1", "fail_on_failure": False}, "fail"),
    ("llm_smoke", {"base_url": "http://127.0.0.1:9/v1", "model": "m", "timeout": 5, "fail_on_failure": False}, "fail"),
    ("spec_matrix", {"matrix": {}, "facts_only": True}, "skip"),
    ("gpu_health", {"source": "captured", "captured": {"nvidia_smi": "not xml"}}, "fail"),
    ("node_compliance", {"checks": ["isolation"], "toolkit_config": "/nonexistent/config.toml"}, None),
])
def test_one_run_of_each_check_module_keeps_the_contract(capsys, name, args, status):
    result = run(capsys, name, args)
    check_result.check(result)
    if status is not None:
        assert result["status"] == status, result


def test_dcgm_diag_missing_is_a_skip_only_when_not_required(capsys):
    skipped = run(capsys, "dcgm_diag", {"dcgmi": "/nonexistent/dcgmi", "required": False})
    assert not skipped.get("failed") and skipped["reasons"][0].endswith("(the DCGM check is not required: skipped)")
    required = run(capsys, "dcgm_diag", {"dcgmi": "/nonexistent/dcgmi"})
    assert required["failed"] is True and required["status"] == "fail"
    assert "(the DCGM check is required)" in required["msg"]
